// tests/optim/test_clip.cpp: clip_grad_norm (torch.nn.utils.clip_grad_norm_,
// L2): the norm it returns, the scaling it applies, and what it leaves alone.
#include <cmath>
#include <limits>

#include "quadratic.h"

using namespace heed;
namespace quad = heed::test::quad;
using optim::clip_grad_norm;
using optim::grad_norm;

namespace {

Tensor with_grad(const std::vector<float>& g) {
  Tensor t = Tensor::zeros({static_cast<int64_t>(g.size())});
  t.set_requires_grad(true);
  t.set_grad(Tensor::from(g, {static_cast<int64_t>(g.size())}));
  return t;
}

}  // namespace

TEST_CASE("optim: clip_grad_norm returns the global norm and scales the gradients to max_norm") {
  // |(3, 4, 12)| = 13 across two parameters; a third has no gradient.
  Tensor a = with_grad({3, 4}), b = with_grad({12}), none = Tensor::zeros({5});
  none.set_requires_grad(true);
  std::vector<Tensor> ps{a, b, none};
  CHECK(grad_norm(ps) == 13.0);
  double norm = clip_grad_norm(ps, 6.5);
  CHECK(norm == 13.0);
  // PyTorch's coefficient max_norm / (norm + 1e-6), applied in float32.
  const float coef = static_cast<float>(6.5 / (13.0 + 1e-6));
  CHECK(a.grad().to_floats() == std::vector<float>{3 * coef, 4 * coef});
  CHECK(b.grad().to_floats() == std::vector<float>{12 * coef});
  CHECK(std::abs(grad_norm(ps) - 6.5) <= 1e-5);
  CHECK(!none.grad().defined());
}

TEST_CASE("optim: clip_grad_norm leaves gradients below max_norm bit-identical") {
  Tensor a = with_grad({0.1f, -0.2f}), b = with_grad({0.3f});
  NamedParams ps{{"a", a}, {"b", b}};
  double want = std::sqrt(double(0.1f) * double(0.1f) + double(-0.2f) * double(-0.2f) + double(0.3f) * double(0.3f));
  CHECK(clip_grad_norm(ps, 1.0) == doctest::Approx(want).epsilon(1e-15));
  CHECK(a.grad().to_floats() == std::vector<float>{0.1f, -0.2f});
  CHECK(b.grad().to_floats() == std::vector<float>{0.3f});
  // Exactly at max_norm the coefficient is 13 / (13 + 1e-6) < 1: PyTorch
  // scales (by a hair), and so does heed.
  Tensor c = with_grad({5, 12});
  CHECK(clip_grad_norm(std::vector<Tensor>{c}, 13.0) == 13.0);
  CHECK(c.grad().to_floats()[1] < 12.0f);
}

TEST_CASE("optim: clip_grad_norm returns a non-finite norm and scales nothing") {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor a = with_grad({1, inf}), b = with_grad({2});
  double n = clip_grad_norm(std::vector<Tensor>{a, b}, 1.0);
  CHECK(std::isinf(n));
  CHECK(a.grad().to_floats() == std::vector<float>{1, inf});
  CHECK(b.grad().to_floats() == std::vector<float>{2});
  Tensor c = with_grad({1, std::nanf("")});
  CHECK(std::isnan(clip_grad_norm(std::vector<Tensor>{c, b}, 1.0)));
  CHECK(b.grad().to_floats() == std::vector<float>{2});
}

TEST_CASE("optim: clip_grad_norm over large gradients matches a double reference and ignores the thread count") {
  const int64_t n = 5 * kernel::kParallelGrain + 3;
  auto run = [&](int threads, double* norm) {
    int saved = heed::num_threads();
    heed::set_num_threads(threads);
    Tensor w = Tensor::zeros({n});
    w.set_requires_grad(true);
    w.set_grad(test::det_tensor({n}, 7));
    Tensor v = Tensor::zeros({2, 3}, DType::f64);
    v.set_requires_grad(true);
    v.set_grad(test::det_tensor({2, 3}, 8, -1, 1, DType::f64));
    *norm = clip_grad_norm(std::vector<Tensor>{w, v}, 10.0);
    heed::set_num_threads(saved);
    return w.grad().to_floats();
  };
  double n1 = 0, n2 = 0;
  auto g1 = run(1, &n1), g2 = run(2, &n2);
  CHECK(n1 == n2);
  CHECK(g1 == g2);
  double ss = 0;
  for (float x : test::det_tensor({n}, 7).to_floats()) ss += double(x) * double(x);
  for (double x : test::det_values(6, 8)) ss += x * x;
  CHECK(n1 == doctest::Approx(std::sqrt(ss)).epsilon(1e-12));
  CHECK(n1 > 10.0);
  CHECK(g1[0] == test::det_tensor({n}, 7).to_floats()[0] * static_cast<float>(10.0 / (n1 + 1e-6)));
}

TEST_CASE("optim: clip_grad_norm refuses a negative max_norm and names a bad gradient") {
  Tensor a = with_grad({1, 2});
  test::check_error([&] { clip_grad_norm(std::vector<Tensor>{a}, -1.0); }, {"clip_grad_norm", "max_norm", "-1"});
  Tensor m = Tensor::zeros({2, 3});
  m.set_requires_grad(true);
  m.set_grad(kernel::transpose(Tensor::zeros({3, 2}), 0, 1));
  test::check_error([&] { clip_grad_norm(NamedParams{{"0.weight", m}}, 1.0); }, {"'0.weight'", "not contiguous"});
}
