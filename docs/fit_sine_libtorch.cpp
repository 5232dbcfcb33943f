// docs/fit_sine_libtorch.cpp: the libtorch twin of
// experiments/examples/fit_sine.cpp, for comparing the two APIs line by line
// (README, "Your own training program"). The same MLP, data, optimiser and
// loop against PyTorch's C++ frontend; it has no options, log, checkpoints,
// resume or data-parallel mode, which heed's version gets from heed::Run and
// optim::DataParallel. Not part of heed's build; with Debian's libtorch-dev:
//   g++ -std=c++17 -O2 docs/fit_sine_libtorch.cpp -I/usr/include/torch/csrc/api/include \
//       -ltorch -ltorch_cpu -lc10 -o fit_sine_libtorch
#include <torch/torch.h>

#include <cmath>
#include <cstdio>

struct SineMLP : torch::nn::Module {
  torch::nn::Linear hidden1{nullptr}, hidden2{nullptr}, out{nullptr};
  SineMLP() {
    hidden1 = register_module("hidden1", torch::nn::Linear(1, 32));
    hidden2 = register_module("hidden2", torch::nn::Linear(32, 32));
    out = register_module("out", torch::nn::Linear(32, 1));
  }
  torch::Tensor forward(torch::Tensor x) { return out(torch::tanh(hidden2(torch::tanh(hidden1(x))))); }
};

int main(int argc, char** argv) {
  const double lr = argc > 1 ? std::atof(argv[1]) : 0.05;
  const int64_t steps = 1500, N = 256;
  torch::manual_seed(0);
  torch::Tensor x = torch::linspace(-M_PI, M_PI, N).reshape({N, 1});
  torch::Tensor y = torch::sin(x);

  SineMLP model;
  torch::optim::SGD opt(model.parameters(), torch::optim::SGDOptions(lr).momentum(0.9));
  for (int64_t step = 1; step <= steps; ++step) {
    opt.zero_grad();
    torch::Tensor loss = torch::mse_loss(model.forward(x), y);
    loss.backward();
    opt.step();
    if (step % 100 == 0) std::printf("step %lld mse %.6f\n", static_cast<long long>(step), loss.item<double>());
  }
  torch::save(model.parameters(), "fit_sine.pt");
  torch::NoGradGuard no_grad;
  const double mse = torch::mse_loss(model.forward(x), y).item<double>();
  std::printf("final mse %.6f: %s\n", mse, mse < 1e-3 ? "fits" : "does not fit yet");
  return 0;
}
