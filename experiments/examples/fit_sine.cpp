// experiments/examples/fit_sine.cpp: a complete training program written the
// way a user of heed writes one, against heed.h alone. It fits a small MLP
// (1 -> 32 -> 32 -> 1, tanh) to y = sin(x) on [-pi, pi] with heed's SGD, and
// gets the whole run machinery from heed::Run in a few lines: an HDF5 log
// that `heed inspect` and `heed plot` read, checkpoints, Ctrl-C that saves,
// and --resume that continues bit for bit.
//
//   build/heed_fit_sine                      1500 steps, log runs/fit_sine.h5
//   build/heed_fit_sine --stop-after 500     ... then, as it prints:
//   build/heed_fit_sine --resume runs/fit_sine.ckpt.h5
//   build/heed_fit_sine --help
//   mpirun -np 2 --bind-to none --oversubscribe build/heed_fit_sine --threads 1   (data-parallel)
#include <numbers>

#include "heed.h"

using namespace heed;

// A model is a Module: it registers its layers by name (the names become the
// keys of state_dict() and of the checkpoint, e.g. "hidden1.weight"), and
// forward() says how they connect.
struct SineMLP : nn::Module {
  std::shared_ptr<nn::Linear> hidden1, hidden2, out;
  explicit SineMLP(Generator& g) : Module("SineMLP") {
    hidden1 = register_module("hidden1", std::make_shared<nn::Linear>(nn::LinearOptions(1, 32).generator(&g)));
    hidden2 = register_module("hidden2", std::make_shared<nn::Linear>(nn::LinearOptions(32, 32).generator(&g)));
    out = register_module("out", std::make_shared<nn::Linear>(nn::LinearOptions(32, 1).generator(&g)));
  }
  Tensor forward(const Tensor& x) override { return (*out)(tanh((*hidden2)(tanh((*hidden1)(x))))); }
};

int main(int argc, char** argv) {
  // guard_main: a bad option exits with status 2 and its message, any other
  // error with 1 (under mpirun, stopping the other processes too).
  return guard_main(argv[0], [&] {
    // The run: its own options (--out, --steps, --checkpoint-every, --resume,
    // --stop-after, --threads) and this program's.
    double lr = 0.05;
    int64_t seed = 0;
    Run run("fit_sine", "Fits a tanh MLP to sin(x) with SGD and momentum 0.9.",
            RunOptions("runs/fit_sine.h5").steps(1500).checkpoint_every(250));
    run.args().real("lr", &lr, "learning rate", 0.0, 1e300, true).integer("seed", &seed, "initialisation seed", 0);
    if (!run.parse(argc, argv)) return 0;  // --help

    // Training data: N evenly spaced x in [-pi, pi] and y = sin(x), as [N, 1]
    // columns because Linear maps the last dimension.
    const int64_t N = 256;
    Tensor x = Tensor::linspace(-std::numbers::pi, std::numbers::pi, N).reshape({N, 1});
    Tensor y = sin(x);

    Generator gen(static_cast<uint64_t>(seed));  // the initial weights, and so the whole run, are reproducible
    SineMLP model(gen);
    optim::SGD opt(model.named_parameters(), optim::SGDOptions(lr).momentum(0.9));
    // Under mpirun, each process fits its share of the points and the
    // gradients are averaged; as one process, backward is plain backward.
    optim::DataParallel ddp(model.named_parameters());
    ddp.broadcast_parameters();
    x = dist::shard(x);
    y = dist::shard(y);

    // What a checkpoint holds, registered once; the log's datasets, declared once.
    run.track("model", model);
    run.track("optim", opt);
    run.begin([](RunLog& log) { log.declare_scalar("train_loss"); });

    while (run.next()) {
      opt.zero_grad();
      Tensor loss = mse_loss(model(x), y);
      ddp.backward(loss);
      opt.step();
      const double mse = dist::mean(loss.item());  // over all the points
      run.log().scalar("train_loss", run.step(), mse);
      run.show_loss("mse", mse);  // a loss that is not finite ends the run (it diverged)
    }
    if (int status = run.finish()) return status;  // 130: stopped, with a checkpoint; 1: diverged

    autograd::NoGradGuard no_grad;  // evaluation records no graph
    const double mse = dist::mean(mse_loss(model(x), y).item());
    fmt::print("final mse {:.6f}: {}\n", mse, mse < 1e-3 ? "fits" : "does not fit yet (try more --steps)");
    return 0;
  });
}
