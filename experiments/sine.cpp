// experiments/sine.cpp
#include "experiments/sine.h"

#include <cmath>
#include <numbers>

#include "experiments/common.h"
#include "heed.h"

namespace heed::experiments {

namespace {

// 1 -> H -> H -> 1 with tanh: smooth like the target, so a few thousand
// full-batch steps reach a small error.
class SineNet : public nn::Module {
 public:
  SineNet(int64_t hidden, Generator* g) : Module("SineNet") {
    l1 = register_module("l1", std::make_shared<nn::Linear>(nn::LinearOptions(1, hidden).generator(g)));
    l2 = register_module("l2", std::make_shared<nn::Linear>(nn::LinearOptions(hidden, hidden).generator(g)));
    l3 = register_module("l3", std::make_shared<nn::Linear>(nn::LinearOptions(hidden, 1).generator(g)));
  }
  Tensor forward(const Tensor& x) override { return l3->forward(tanh(l2->forward(tanh(l1->forward(x))))); }
  std::shared_ptr<nn::Linear> l1, l2, l3;
};

// N evenly spaced points on [-pi, pi] and their sines, as columns [N, 1].
void sine_points(int64_t n, Tensor& x, Tensor& y) {
  x = reshape(Tensor::linspace(-std::numbers::pi, std::numbers::pi, n), {n, 1});
  y = sin(x);
}

}  // namespace

double sine_memory(int64_t points, int64_t hidden, int64_t processes) {
  // Per process, float32: its share n of the points, each with H hidden
  // values in a block (A, 4 n H bytes) and one value in a column (c, 4 n);
  // all N points' x and y drawn before they are shared out (4 N each).
  // At the backward's start: both layers' pre-activations or their tanh
  // outputs, saved, and the gradients flowing back (4 blocks of n x H), the
  // columns (input, target, output and its gradient). Peaks measured
  // (resident, the whole process, --steps 3), against this: --points
  // 1048576: 0.59 GB, this 0.56 GB; --points 4194304: 2.29 GB, this 2.25 GB;
  // --hidden 128 --points 2097152: 4.38 GB, this 4.35 GB.
  const auto N = static_cast<double>(points), H = static_cast<double>(hidden);
  const double n = N / static_cast<double>(std::max<int64_t>(processes, 1));
  // The weights (1 -> H -> H -> 1), with their gradients and the momentum.
  const double weights = 4 * (H * H + 3 * H + 1);
  return tensor_memory({{{weights, 3}, {4 * N, 2}, {4 * n * H, 4}, {4 * n, 4}}});
}

int run_sine(const std::vector<std::string>& args, const std::vector<std::string>& command_line) {
  double lr = 0.05, momentum = 0.9;
  int64_t hidden = 32, seed = 0, points = 256;
  Run run("sine",
          fmt::format("Fits a 1 -> H -> H -> 1 tanh MLP to y = sin(x) on [-pi, pi] with full-batch SGD\n"
                      "and momentum, and prints the final mean squared error. Exit status 1 when that is not\n"
                      "below {} (the default settings reach ~1e-5).",
                      kSineMseThreshold),
          RunOptions("runs/sine.h5").steps(1500).checkpoint_every(500).progress_seconds(1));
  run.args()
      .real("lr", &lr, "learning rate", 0.0, 1e300, /*min_exclusive=*/true)
      .real("momentum", &momentum, "heavy-ball momentum: v = mu v + g, p = p - lr v", 0.0, 1.0)
      .integer("hidden", &hidden, "hidden width H", 1, kMaxWidth)
      .integer("points", &points, "training points, evenly spaced on [-pi, pi]", 2, kMaxSamples)
      .integer("seed", &seed, "initialisation seed", 0);
  if (!run.parse(args, command_line)) return 0;
  if (points % dist::size() != 0)
    throw UsageError(fmt::format("run sine: --points {} is not divisible by the {} processes of this job", points,
                                 dist::size()));
  // Memory the run takes at least, refused before anything is written when
  // it is not there (else an allocation fails, or the kernel kills the run,
  // after the log is begun): --hidden when the weights alone are too much,
  // else --points.
  {
    const auto H = static_cast<double>(hidden);
    check_memory("run sine", "hidden", hidden,
                 fmt::format("the weights, their gradients and the momentum (a {} x {} layer and two of {})", hidden,
                             hidden, hidden),
                 3 * 4 * (H * H + 3 * H + 1));
    check_memory("run sine", "points", points,
                 fmt::format("a training step's activations and gradients ({} points of --hidden {})", points, hidden),
                 sine_memory(points, hidden, dist::size()));
  }

  Tensor x, y;  // [N, 1] each
  sine_points(points, x, y);
  Generator gen(static_cast<uint64_t>(seed));
  SineNet net(hidden, &gen);
  optim::SGD opt(net.named_parameters(), optim::SGDOptions(lr).momentum(momentum));
  optim::DataParallel ddp(net.named_parameters());  // under mpirun each process fits its share of the points
  ddp.broadcast_parameters();
  x = dist::shard(x);
  y = dist::shard(y);
  double initial_mse = 0, mse = 0;
  run.track("model", net);
  run.track("optim", opt);
  run.track("result/initial_mse", initial_mse);
  run.begin([&](RunLog& log) {
    log_model(log, "mlp", net);
    log.declare_scalar("train_loss");
    log.declare_scalar("final_mse");
  });

  while (run.next()) {
    opt.zero_grad();
    Tensor loss = mse_loss(net.forward(x), y);  // of the parameters after step - 1 updates
    mse = dist::mean(loss.item());
    if (run.step() == 1) initial_mse = mse;
    run.log().scalar("train_loss", run.step(), mse);
    run.show_loss("mse", mse);  // a non-finite one ends the run (Run::show_loss)
    ddp.backward(loss);
    opt.step();
    if (run.step() == run.steps()) {
      autograd::NoGradGuard no_grad;
      mse = dist::mean(mse_loss(net.forward(x), y).item());
      run.log().scalar("final_mse", run.step(), mse);
    }
  }
  if (int rc = run.finish()) return rc;
  {
    autograd::NoGradGuard no_grad;
    mse = dist::mean(mse_loss(net.forward(x), y).item());
  }
  const bool ok = mse < kSineMseThreshold;
  fmt::print("final mse {:.6f} (initial {:.6f}; threshold {}): {}\nlog: {}\n", mse, initial_mse, kSineMseThreshold,
             ok ? "below the threshold" : "NOT below the threshold", run.log_path());
  return ok ? 0 : 1;
}

}  // namespace heed::experiments
