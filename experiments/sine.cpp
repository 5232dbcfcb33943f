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

  Tensor x, y;  // [N, 1] each
  sine_points(points, x, y);
  Generator gen(static_cast<uint64_t>(seed));
  SineNet net(hidden, &gen);
  optim::SGD opt(net.named_parameters(), optim::SGDOptions(lr).momentum(momentum));
  optim::DataParallel ddp(net.named_parameters());  // under mpirun each process fits its share of the points
  ddp.broadcast_parameters();
  if (points % dist::size() != 0)
    throw UsageError(fmt::format("run sine: --points {} is not divisible by the {} processes of this job", points,
                                 dist::size()));
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
