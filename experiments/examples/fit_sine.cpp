// experiments/examples/fit_sine.cpp: a complete training program written the
// way a user of heed would write one, against heed.h alone. It fits a small
// MLP (1 -> 32 -> 32 -> 1, tanh) to y = sin(x) on [-pi, pi].
//
//   build/heed_fit_sine      prints the loss every 250 steps, then the final
//                            MSE; exits 0 only when it is below the threshold.
#include <cmath>
#include <cstdio>
#include <numbers>
#include <vector>

#include "heed.h"

using namespace heed;

// A model is a Module: it registers its layers by name (the names become the
// keys of state_dict(), e.g. "hidden1.weight"), and forward() says how they
// connect. There is no Tanh layer to stack, so the activations are calls.
struct SineMLP : nn::Module {
  std::shared_ptr<nn::Linear> hidden1, hidden2, out;
  explicit SineMLP(Generator& g) : Module("SineMLP") {
    hidden1 = register_module("hidden1", std::make_shared<nn::Linear>(nn::LinearOptions(1, 32).generator(&g)));
    hidden2 = register_module("hidden2", std::make_shared<nn::Linear>(nn::LinearOptions(32, 32).generator(&g)));
    out = register_module("out", std::make_shared<nn::Linear>(nn::LinearOptions(32, 1).generator(&g)));
  }
  Tensor forward(const Tensor& x) override { return out->forward(tanh(hidden2->forward(tanh(hidden1->forward(x))))); }
};

int main() {
  const int64_t N = 256, steps = 1500, print_every = 250;
  const double lr = 0.05, momentum = 0.9, threshold = 1e-3;

  // Training data: N evenly spaced x in [-pi, pi] and y = sin(x), as [N, 1]
  // columns because Linear maps the last dimension (1 feature in, 1 out).
  std::vector<float> xs(N), ys(N);
  for (int64_t i = 0; i < N; ++i) {
    double x = -std::numbers::pi + 2 * std::numbers::pi * double(i) / double(N - 1);
    xs[i] = float(x);
    ys[i] = float(std::sin(x));
  }
  Tensor x = Tensor::from(xs, {N, 1}), y = Tensor::from(ys, {N, 1});

  // A seeded generator makes the initial weights, and so the whole run,
  // reproducible.
  Generator gen(0);
  SineMLP model(gen);
  std::printf("%s\n", model.summary().c_str());

  // SGD with momentum, written out (heed's optimisers would do the same):
  // one velocity buffer per parameter, v <- momentum v + grad, p <- p - lr v.
  std::vector<Tensor> params = model.parameters(), velocity;
  for (const Tensor& p : params) velocity.push_back(Tensor::zeros(p.shape()));

  for (int64_t step = 0; step < steps; ++step) {
    model.zero_grad();  // gradients accumulate across backward() calls
    Tensor loss = mse_loss(model.forward(x), y);
    backward(loss);
    if (step % print_every == 0) std::printf("step %5lld  mse %.6f\n", (long long)step, loss.item());
    // The update is not part of the model's computation: with no graph being
    // recorded, the in-place kernels change the parameters' values while the
    // parameters stay the same tensors.
    autograd::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) {
      kernel::scale_(velocity[i], momentum);
      kernel::add_(velocity[i], params[i].grad());
      kernel::add_(params[i], velocity[i], -lr);
    }
  }

  autograd::NoGradGuard no_grad;  // evaluation needs no graph either
  const double mse = mse_loss(model.forward(x), y).item();
  std::printf("final mse %.6f (threshold %g): %s\n", mse, threshold, mse < threshold ? "ok" : "too high");
  return mse < threshold ? 0 : 1;
}
