// experiments/sine.cpp
#include "experiments/sine.h"

#include <fmt/core.h>

#include <cmath>
#include <numbers>

#include "experiments/args.h"
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

}  // namespace

bool parse_sine_args(const std::vector<std::string>& args, SineOptions& o) {
  Args a("run sine",
         "Fits a 1 -> H -> H -> 1 tanh MLP to y = sin(x) on [-pi, pi] with full-batch SGD\n"
         "and momentum 0.9, and prints the final mean squared error.");
  a.integer("steps", &o.steps, "training steps", 1)
      .real("lr", &o.lr, "learning rate", 0.0, 1e300, /*min_exclusive=*/true)
      .integer("hidden", &o.hidden, "hidden width H", 1)
      .integer("seed", &o.seed, "initialisation seed", 0)
      .integer("threads", &o.threads, "threads for heed's kernels, 0 = heed's default", 0);
  return a.parse(args);
}

SineResult train_sine(const SineOptions& o) {
  if (o.steps < 1 || o.hidden < 1 || o.points < 2 || !(o.lr > 0))
    fail("train_sine: expected steps >= 1, hidden >= 1, points >= 2, lr > 0; got {}, {}, {}, {}", o.steps, o.hidden,
         o.points, o.lr);
  if (o.threads > 0) kernel::set_num_threads(static_cast<int>(o.threads));

  // The data: N evenly spaced points and their sines, as column vectors [N, 1].
  const double pi = std::numbers::pi;
  std::vector<float> xs(o.points), ys(o.points);
  for (int64_t i = 0; i < o.points; ++i) {
    double x = -pi + 2 * pi * static_cast<double>(i) / static_cast<double>(o.points - 1);
    xs[i] = static_cast<float>(x);
    ys[i] = static_cast<float>(std::sin(x));
  }
  Tensor x = Tensor::from(xs, {o.points, 1});  // [N, 1]
  Tensor y = Tensor::from(ys, {o.points, 1});  // [N, 1]

  Generator gen(static_cast<uint64_t>(o.seed));
  SineNet net(o.hidden, &gen);
  std::vector<Tensor> params = net.parameters();
  std::vector<Tensor> velocity;  // one per parameter, same shape
  for (const Tensor& p : params) velocity.push_back(Tensor::zeros(p.shape()));

  if (o.print_every > 0)
    fmt::print("sine: {} parameters, {} points, {} steps, lr {}, momentum {}\n", net.num_parameters(), o.points,
               o.steps, o.lr, o.momentum);
  SineResult r;
  for (int64_t step = 0; step < o.steps; ++step) {
    net.zero_grad();
    Tensor loss = mse_loss(net.forward(x), y);  // of the parameters after `step` updates
    const double mse = loss.item();
    if (step == 0) r.initial_mse = mse;
    if (!std::isfinite(mse)) {  // diverged: more steps cannot recover
      if (o.print_every > 0) fmt::print("step {:5d}  mse {} (diverged; try a smaller --lr)\n", step, mse);
      r.final_mse = mse;
      return r;
    }
    if (o.print_every > 0 && step % o.print_every == 0) fmt::print("step {:5d}  mse {:.6f}\n", step, mse);
    backward(loss);
    // Heavy-ball momentum: v <- mu v + g, p <- p - lr v. In place and outside
    // the graph, so the parameters stay the same tensors (leaves).
    autograd::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      kernel::scale_(velocity[i], o.momentum);
      kernel::add_(velocity[i], params[i].grad());
      kernel::add_(params[i], velocity[i], -o.lr);
    }
  }
  autograd::NoGradGuard no_grad;
  r.final_mse = mse_loss(net.forward(x), y).item();
  return r;
}

int run_sine(const std::vector<std::string>& args) {
  SineOptions o;
  try {
    if (!parse_sine_args(args, o)) return 0;  // --help
  } catch (const Error& e) {
    fmt::print(stderr, "heed: {}\n", e.what());
    return 2;
  }
  SineResult r = train_sine(o);
  bool ok = r.final_mse < kSineMseThreshold;
  fmt::print("final mse {:.6f} (initial {:.6f}; threshold {}): {}\n", r.final_mse, r.initial_mse, kSineMseThreshold,
             ok ? "below the threshold" : "NOT below the threshold");
  return ok ? 0 : 1;
}

}  // namespace heed::experiments
