// tests/optim/test_sgd.cpp: SGD against a hand-written double-precision loop
// of torch.optim.SGD's published update, on the quadratic problem.
#include <string>

#include "quadratic.h"

using namespace heed;
namespace quad = heed::test::quad;
using optim::SGD;
using optim::SGDOptions;

namespace {

struct SGDCase {
  std::string name;
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
};

// torch.optim.SGD, written out: the buffer starts as the first gradient.
quad::Values reference_sgd(const SGDCase& c, int steps) {
  quad::Values P = quad::initial_values();
  quad::Values buf = P;  // shape only; set on the first step
  for (int t = 1; t <= steps; ++t) {
    quad::Values G = quad::grads(P);
    for (size_t k = 0; k < P.size(); ++k) {
      for (size_t i = 0; i < P[k].size(); ++i) {
        double g = G[k][i] + c.weight_decay * P[k][i];
        if (c.momentum != 0) {
          buf[k][i] = t == 1 ? g : c.momentum * buf[k][i] + (1 - c.dampening) * g;
          g = c.nesterov ? g + c.momentum * buf[k][i] : buf[k][i];
        }
        P[k][i] -= c.lr * g;
      }
    }
  }
  return P;
}

const std::vector<SGDCase> kSgdCases{
    {"plain", 0.05, 0.0, 0.0, 0.0, false},
    {"momentum", 0.05, 0.9, 0.0, 0.0, false},
    {"momentum + dampening", 0.05, 0.9, 0.3, 0.0, false},
    {"nesterov", 0.05, 0.9, 0.0, 0.0, true},
    {"weight decay", 0.05, 0.0, 0.0, 0.1, false},
    {"nesterov + weight decay", 0.03, 0.8, 0.0, 0.2, true},
    {"momentum + dampening + weight decay", 0.04, 0.7, 0.5, 0.05, false},
};

}  // namespace

TEST_CASE("optim: SGD matches a double-precision reference of torch.optim.SGD (float32 and float64)") {
  const int steps = 6;
  for (const auto& c : kSgdCases) {
    for (DType dtype : {DType::f32, DType::f64}) {
      INFO("case " << c.name << ", dtype " << dtype_name(dtype));
      NamedParams p = quad::make_params(dtype);
      SGD opt(p, SGDOptions(c.lr).momentum(c.momentum).dampening(c.dampening).weight_decay(c.weight_decay).nesterov(
                     c.nesterov));
      for (int t = 0; t < steps; ++t) {
        quad::compute_grads(opt);
        opt.step();
      }
      // float32: a few roundings per step; float64: the same formula, so only
      // the order of a handful of operations can differ.
      quad::check_values(p, reference_sgd(c, steps), dtype == DType::f32 ? 1e-6 : 1e-13);
      quad::check_c_untouched(p);
      CHECK(opt.step_count() == steps);
    }
  }
}

TEST_CASE("optim: SGD's first momentum step initialises the buffer to the gradient") {
  NamedParams p = quad::make_params();
  SGD opt(p, SGDOptions(0.1).momentum(0.9).dampening(0.5));
  quad::compute_grads(opt);
  std::vector<float> a_before = p[0].second.to_floats();
  opt.step();
  // Not (1 - dampening) * g: PyTorch clones the gradient on the first step.
  CHECK(opt.state("a", "momentum_buffer").to_floats() == p[0].second.grad().to_floats());
  CHECK(opt.state("b", "momentum_buffer").to_floats() == p[1].second.grad().to_floats());
  // c had no gradient: no update counted, buffer still zero.
  CHECK(opt.state("c", "step").item() == 0);
  CHECK(opt.state("a", "step").item() == 1);
  auto g = p[0].second.grad().to_floats();
  auto a = p[0].second.to_floats();
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == a_before[i] - 0.1f * g[i]);
}

TEST_CASE("optim: SGD refuses invalid options naming them") {
  test::check_error([] { SGD(quad::make_params(), SGDOptions(-0.1)); }, {"SGD", "learning rate", "-0.1"});
  test::check_error([] { SGD(quad::make_params(), SGDOptions(0.1).momentum(-0.5)); }, {"SGD", "momentum"});
  test::check_error([] { SGD(quad::make_params(), SGDOptions(0.1).weight_decay(-1)); }, {"SGD", "weight_decay"});
  test::check_error([] { SGD(quad::make_params(), SGDOptions(0.1).nesterov(true)); }, {"SGD", "nesterov", "momentum"});
  test::check_error([] { SGD(quad::make_params(), SGDOptions(0.1).momentum(0.9).dampening(0.1).nesterov(true)); },
                    {"nesterov", "dampening 0.1"});
}

TEST_CASE("optim: SGD without momentum keeps no per-parameter state") {
  NamedParams p = quad::make_params();
  SGD opt(p, SGDOptions(0.1));
  auto sd = opt.state_dict();
  // "<param>/step" only: the update count.
  std::vector<std::string> keys;
  for (const auto& [k, _] : sd) keys.push_back(k);
  CHECK(keys == std::vector<std::string>{"a/step", "b/step", "c/step", "lr", "step"});
  SGD with_momentum(quad::make_params(), SGDOptions(0.1).momentum(0.9));
  CHECK(with_momentum.state_dict().count("b/momentum_buffer") == 1);
  CHECK(with_momentum.state_dict().at("b/momentum_buffer").shape() == Shape{2, 2});
}
