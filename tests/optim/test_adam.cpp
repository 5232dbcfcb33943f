// tests/optim/test_adam.cpp: Adam and AdamW against a hand-written
// double-precision loop of the published update (torch.optim.Adam / AdamW,
// Kingma & Ba 2015 Algorithm 1 with PyTorch's epsilon placement), on the
// quadratic problem; plus the exact relations between Adam and AdamW.
#include <cmath>
#include <string>

#include "quadratic.h"

using namespace heed;
namespace quad = heed::test::quad;
using optim::Adam;
using optim::AdamOptions;
using optim::AdamW;
using optim::AdamWOptions;

namespace {

struct AdamCase {
  std::string name;
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled;
};

quad::Values reference_adam(const AdamCase& c, int steps) {
  quad::Values P = quad::initial_values();
  quad::Values m = P, v = P;
  for (auto& x : m) std::fill(x.begin(), x.end(), 0.0);
  for (auto& x : v) std::fill(x.begin(), x.end(), 0.0);
  for (int t = 1; t <= steps; ++t) {
    quad::Values G = quad::grads(P);
    double bc1 = 1 - std::pow(c.beta1, t);
    double bc2 = 1 - std::pow(c.beta2, t);
    for (size_t k = 0; k < P.size(); ++k) {
      for (size_t i = 0; i < P[k].size(); ++i) {
        double g = G[k][i];
        if (c.decoupled)
          P[k][i] -= c.lr * c.weight_decay * P[k][i];
        else
          g += c.weight_decay * P[k][i];
        m[k][i] = c.beta1 * m[k][i] + (1 - c.beta1) * g;
        v[k][i] = c.beta2 * v[k][i] + (1 - c.beta2) * g * g;
        double m_hat = m[k][i] / bc1;
        double denom = std::sqrt(v[k][i]) / std::sqrt(bc2) + c.eps;
        P[k][i] -= c.lr * m_hat / denom;
      }
    }
  }
  return P;
}

const std::vector<AdamCase> kCases{
    {"Adam defaults", 1e-2, 0.9, 0.999, 1e-8, 0.0, false},
    {"Adam betas eps", 2e-2, 0.8, 0.95, 1e-3, 0.0, false},
    {"Adam L2", 1e-2, 0.9, 0.999, 1e-8, 0.1, false},
    {"AdamW", 1e-2, 0.9, 0.999, 1e-8, 0.1, true},
    {"AdamW betas eps", 3e-2, 0.85, 0.98, 1e-4, 0.3, true},
};

std::unique_ptr<optim::Optimizer> make(const AdamCase& c, const NamedParams& p) {
  if (c.decoupled)
    return std::make_unique<AdamW>(
        p, AdamWOptions().lr(c.lr).betas(c.beta1, c.beta2).eps(c.eps).weight_decay(c.weight_decay));
  return std::make_unique<Adam>(p,
                                AdamOptions().lr(c.lr).betas(c.beta1, c.beta2).eps(c.eps).weight_decay(c.weight_decay));
}

// Parameter values exactly: float bits compared as values.
std::vector<std::vector<float>> snapshot(const NamedParams& p) {
  std::vector<std::vector<float>> out;
  for (const auto& [_, t] : p) out.push_back(t.to_floats());
  return out;
}

void set_grads(const NamedParams& p, const std::vector<std::vector<float>>& g) {
  for (size_t k = 0; k < g.size(); ++k) {
    Tensor t = p[k].second;
    t.set_grad(Tensor::from(g[k], t.shape()));
  }
}

}  // namespace

TEST_CASE("optim: Adam and AdamW match a double-precision reference of the published update (float32 and float64)") {
  const int steps = 7;
  for (const auto& c : kCases) {
    for (DType dtype : {DType::f32, DType::f64}) {
      INFO("case " << c.name << ", dtype " << dtype_name(dtype));
      NamedParams p = quad::make_params(dtype);
      auto opt = make(c, p);
      CHECK(opt->type_name() == (c.decoupled ? "AdamW" : "Adam"));
      for (int t = 0; t < steps; ++t) {
        quad::compute_grads(*opt);
        opt->step();
      }
      quad::check_values(p, reference_adam(c, steps), dtype == DType::f32 ? 1e-6 : 1e-13);
      quad::check_c_untouched(p);
      CHECK(opt->state("a", "step").item() == steps);
      CHECK(opt->state("c", "step").item() == 0);
    }
  }
}

TEST_CASE("optim: Adam's bias correction makes the first step move each parameter by lr against its gradient") {
  // Step 1: m = (1 - b1) g, v = (1 - b2) g^2, so m / bc1 = g and
  // sqrt(v / bc2) = |g|: the step is lr g / (|g| + eps). Without the bias
  // correction it would be lr (1 - b1) / sqrt(1 - b2) ~ 3.16 lr.
  const double lr = 1e-2;
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO("dtype " << dtype_name(dtype));
    NamedParams p = quad::make_params(dtype);
    Adam opt(p, AdamOptions().lr(lr));
    quad::compute_grads(opt);
    std::vector<std::vector<double>> before, grad;
    for (int k = 0; k < 2; ++k) {
      before.push_back(p[k].second.to_vector<double>());
      grad.push_back(p[k].second.grad().to_vector<double>());
    }
    opt.step();
    for (int k = 0; k < 2; ++k) {
      auto after = p[k].second.to_vector<double>();
      for (size_t i = 0; i < after.size(); ++i) {
        double moved = after[i] - before[k][i];
        INFO("parameter " << p[k].first << " element " << i << " moved " << moved);
        double g = grad[k][i];
        double want = -lr * g / (std::abs(g) + 1e-8);
        // float32: the difference of two parameters near 1-2 carries their
        // rounding (ulp 2.4e-7 at 2).
        CHECK(std::abs(moved - want) <= (dtype == DType::f32 ? 3e-7 : 1e-15));
        CHECK(std::abs(std::abs(moved) - lr) <= (dtype == DType::f32 ? 3e-7 : 1e-9));
      }
    }
  }
}

TEST_CASE("optim: AdamW is exactly Adam on a parameter first multiplied by (1 - lr wd); Adam's L2 is exactly a gradient term") {
  const double lr = 0.05, wd = 0.2;
  const std::vector<std::vector<float>> grads_per_step[] = {
      {{0.3f, -1.1f, 0.7f}, {2.0f, -0.4f, 0.05f, -0.9f}},
      {{-0.2f, -0.8f, 0.9f}, {1.5f, 0.1f, -0.3f, -1.0f}},
      {{0.1f, 0.5f, -0.6f}, {-0.7f, 0.2f, 0.4f, 1.2f}},
  };
  NamedParams pw = quad::make_params(), p0 = quad::make_params(), pl = quad::make_params(),
              pg = quad::make_params();
  AdamW adamw(pw, AdamWOptions().lr(lr).weight_decay(wd));
  Adam plain_for_w(p0, AdamOptions().lr(lr));
  Adam adam_l2(pl, AdamOptions().lr(lr).weight_decay(wd));
  Adam plain_for_l2(pg, AdamOptions().lr(lr));
  const float decay = static_cast<float>(1.0 - lr * wd);
  const float wdf = static_cast<float>(wd);
  for (const auto& g : grads_per_step) {
    // AdamW vs plain Adam on p * (1 - lr wd).
    set_grads(pw, g);
    set_grads(p0, g);
    for (int k = 0; k < 2; ++k) {
      float* x = p0[k].second.data<float>();
      for (int64_t i = 0; i < p0[k].second.numel(); ++i) x[i] = x[i] * decay;
    }
    adamw.step();
    plain_for_w.step();
    CHECK(snapshot(pw) == snapshot(p0));
    // Adam with L2 vs plain Adam on g + wd p.
    set_grads(pl, g);
    auto g_l2 = g;
    for (int k = 0; k < 2; ++k) {
      auto x = pg[k].second.to_floats();
      for (size_t i = 0; i < x.size(); ++i) g_l2[k][i] = g[k][i] + wdf * x[i];
    }
    set_grads(pg, g_l2);
    adam_l2.step();
    plain_for_l2.step();
    CHECK(snapshot(pl) == snapshot(pg));
  }
  // And the two kinds of decay are not the same thing.
  CHECK(snapshot(pw) != snapshot(pl));
}

TEST_CASE("optim: AdamW is Adam with decoupled_weight_decay, with PyTorch's AdamW defaults") {
  CHECK(AdamWOptions().weight_decay_ == 1e-2);
  CHECK(AdamOptions().weight_decay_ == 0.0);
  CHECK(AdamWOptions().lr_ == 1e-3);
  NamedParams p1 = quad::make_params(), p2 = quad::make_params();
  AdamW w(p1);
  Adam a(p2, AdamOptions().weight_decay(1e-2).decoupled_weight_decay(true));
  CHECK(w.type_name() == "AdamW");
  CHECK(a.type_name() == "AdamW");
  for (int t = 0; t < 3; ++t) {
    quad::compute_grads(w);
    quad::compute_grads(a);
    w.step();
    a.step();
  }
  CHECK(snapshot(p1) == snapshot(p2));
}

TEST_CASE("optim: Adam's update does not depend on the thread count") {
  const int64_t n = 3 * kernel::kParallelGrain + 17;  // parallel path
  auto run = [&](int threads) {
    int saved = heed::num_threads();
    heed::set_num_threads(threads);
    Tensor w = test::det_tensor({n}, 1);
    w.set_requires_grad(true);
    AdamW opt({{"w", w}}, AdamWOptions().lr(1e-2));
    for (int t = 0; t < 3; ++t) {
      w.set_grad(test::det_tensor({n}, 10 + t));
      opt.step();
    }
    heed::set_num_threads(saved);
    return w.to_floats();
  };
  auto one = run(1), two = run(2);
  CHECK(one == two);
}

TEST_CASE("optim: Adam refuses invalid options naming them") {
  test::check_error([] { Adam(quad::make_params(), AdamOptions().lr(-1)); }, {"Adam", "learning rate"});
  test::check_error([] { Adam(quad::make_params(), AdamOptions().betas(1.0, 0.999)); }, {"Adam", "beta1", "1"});
  test::check_error([] { Adam(quad::make_params(), AdamOptions().betas(0.9, -0.1)); }, {"Adam", "beta2"});
  test::check_error([] { AdamW(quad::make_params(), AdamWOptions().eps(-1e-8)); }, {"AdamW", "epsilon"});
  test::check_error([] { AdamW(quad::make_params(), AdamWOptions().weight_decay(-0.1)); }, {"AdamW", "weight_decay"});
}

namespace {
// Adam updating one parameter at a time, as every optimiser does by default.
struct AdamOneByOne : Adam {
  using Adam::Adam;
  void update_all(const std::vector<size_t>& with_grad) override { optim::Optimizer::update_all(with_grad); }
};
}  // namespace

TEST_CASE("optim: Adam's one pass over every parameter gives the bits of updating them one by one") {
  // Sizes around the 4096-element chunks and the parallel grain, a float64
  // parameter among them, and one without a gradient.
  const std::vector<Shape> shapes = {{5}, {4096}, {4097}, {128, 128}, {3, 7}, {300, 130}, {2}};
  auto make = [&](uint64_t seed) {
    NamedParams ps;
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tensor p = test::det_tensor(shapes[i], seed + i).to(i == 4 ? DType::f64 : DType::f32);
      p.set_requires_grad(true);
      std::string name = "p";
      name += std::to_string(i);  // ("p" + std::to_string(i) trips GCC 12's -Wrestrict false positive)
      ps.emplace_back(name, p);
    }
    return ps;
  };
  NamedParams a = make(50), b = make(50);
  const AdamWOptions o = AdamWOptions(1e-2).weight_decay(0.1);
  AdamW fused(a, o);
  AdamOneByOne plain(b, AdamOptions(1e-2).weight_decay(0.1).decoupled_weight_decay(true));
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      if (i == 6) continue;  // no gradient: left alone
      const Tensor g = test::det_tensor(shapes[i], 100 + step * 10 + i).to(a[i].second.dtype());
      a[i].second.set_grad(kernel::clone(g));
      b[i].second.set_grad(kernel::clone(g));
    }
    fused.step();
    plain.step();
  }
  for (size_t i = 0; i < shapes.size(); ++i) {
    CAPTURE(i);
    CHECK(a[i].second.to_vector<double>() == b[i].second.to_vector<double>());
  }
  CHECK(a[6].second.to_vector<double>() == make(50)[6].second.to_vector<double>());
}

TEST_CASE("optim: Adam's bias correction counts each parameter's own updates, not the optimiser's steps") {
  // q gets its first gradient at the optimiser's third step: that is q's
  // update 1, whose bias correction makes it move by lr g / (|g| + eps), i.e.
  // by lr (as the first-step test above). With the optimiser's count (t = 3)
  // it would move by lr (1 - b1) / (1 - b1^3) / sqrt((1 - b2) / (1 - b2^3))
  // = 0.64 lr. Both float32 (one pass over every parameter) and float64.
  const double lr = 1e-2;
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO("dtype " << dtype_name(dtype));
    Tensor p = kernel::to_dtype(Tensor::from_f64({0.5, -1.0}, {2}), dtype);
    Tensor q = kernel::to_dtype(Tensor::from_f64({1.0, 2.0, -0.5}, {3}), dtype);
    p.set_requires_grad(true);
    q.set_requires_grad(true);
    AdamW opt({{"p", p}, {"q", q}}, AdamWOptions(lr).weight_decay(0.0));
    for (int t = 0; t < 2; ++t) {
      p.set_grad(kernel::to_dtype(Tensor::from_f64({0.3, -0.2}, {2}), dtype));
      opt.step();
    }
    CHECK(opt.state("q", "step").item() == 0);
    const std::vector<double> before = q.to_vector<double>(), g{0.7, -1.5, 0.02};
    q.set_grad(kernel::to_dtype(Tensor::from_f64(g, {3}), dtype));
    p.set_grad(kernel::to_dtype(Tensor::from_f64({0.3, -0.2}, {2}), dtype));
    opt.step();
    CHECK(opt.state("q", "step").item() == 1);
    const std::vector<double> after = q.to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i) {
      INFO("element " << i);
      const double want = -lr * g[i] / (std::abs(g[i]) + 1e-8);
      CHECK(std::abs((after[i] - before[i]) - want) <= (dtype == DType::f32 ? 3e-7 : 1e-15));
    }
  }
}

TEST_CASE("optim: AdamW's decay uses the learning rate of the step, as a schedule sets it") {
  // A zero gradient leaves m = v = 0 and the Adam step 0 / (0 + eps) = 0: the
  // step is the decay alone, p (1 - lr wd) with the lr set_lr gave (0.01),
  // not the one the optimiser was built with (0.1).
  Tensor p = Tensor::from({1.0f, -2.0f, 4.0f}, {3});
  p.set_requires_grad(true);
  AdamW opt({{"p", p}}, AdamWOptions(0.1).weight_decay(0.5));
  opt.set_lr(0.01);
  p.set_grad(Tensor::zeros({3}));
  opt.step();
  const float decay = static_cast<float>(1.0 - 0.01 * 0.5);
  CHECK(p.to_floats() == std::vector<float>{1.0f * decay, -2.0f * decay, 4.0f * decay});
}
