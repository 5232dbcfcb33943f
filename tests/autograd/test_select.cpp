// tests/autograd/test_select.cpp: abs, clamp, where, comparisons, argmax,
// to(dtype) and the *_like factories (autograd/select.cpp): values, gradients
// against finite differences in float64, and the errors users meet.
#include <cmath>
#include <limits>

#include "test_util.h"

using namespace heed;
using autograd::GradcheckFn;
using V = const std::vector<Tensor>&;

namespace {
// Values in [-1, 1] kept at least 0.05 away from the kinks the ops have
// (0 for abs, the bounds for clamp), where a finite difference straddles one.
Tensor input(const Shape& s, uint64_t seed, std::vector<double> kinks) {
  std::vector<double> v = test::det_values(shape_numel(s), seed);
  for (double& x : v)
    for (double k : kinks)
      if (std::abs(x - k) < 0.05) x = k + (x < k ? -0.05 : 0.05);
  Tensor t = Tensor::from_f64(v, s);
  t.set_requires_grad(true);
  return t;
}

void check_grad(const char* name, const GradcheckFn& f, std::vector<Tensor> in,
                const autograd::GradcheckOptions& opt = {}) {
  auto r = autograd::gradcheck(f, in, opt);
  INFO(name << ": max |error| " << r.max_abs_err << "\n" << r.report);
  CHECK(r.ok);
}
}  // namespace

TEST_CASE("abs, clamp, clamp_min, clamp_max: values as PyTorch's") {
  Tensor x = Tensor::from({-2.0f, -0.5f, 0.0f, 0.25f, 3.0f}, {5});
  test::check_close(abs(x), {2, 0.5, 0, 0.25, 3}, 0);
  test::check_close(clamp(x, -1.0, 0.5), {-1, -0.5, 0, 0.25, 0.5}, 0);
  test::check_close(clamp_min(x, 0.0), {0, 0, 0, 0.25, 3}, 0);
  test::check_close(clamp_max(x, 0.0), {-2, -0.5, 0, 0, 0}, 0);
  test::check_close(x.abs(), {2, 0.5, 0, 0.25, 3}, 0);
  test::check_close(x.clamp(-1.0, 0.5), {-1, -0.5, 0, 0.25, 0.5}, 0);
}

TEST_CASE("abs and clamp gradients: 0 at abs's kink and where clamped, 1 inside (bounds included)") {
  Tensor x = Tensor::from({-2.0f, -1.0f, 0.0f, 0.5f, 3.0f}, {5});
  x.set_requires_grad(true);
  clamp(x, -1.0, 0.5).sum().backward();
  test::check_close(x.grad(), {0, 1, 1, 1, 0}, 0);
  x.zero_grad();
  abs(x).sum().backward();
  test::check_close(x.grad(), {-1, -1, 0, 1, 1}, 0);
}

TEST_CASE("gradcheck: abs, clamp, where, to (float64)") {
  check_grad("abs", [](V x) { return abs(x[0] * 2.0); }, {input({3, 4}, 1, {0.0})});
  check_grad("abs nc", [](V x) { return abs(transpose(x[0], 0, 1)); }, {input({4, 3}, 2, {0.0})});
  check_grad("clamp", [](V x) { return clamp(x[0], -0.4, 0.3); }, {input({3, 4}, 3, {-0.4, 0.3})});
  check_grad("clamp_min", [](V x) { return clamp_min(x[0], -0.2); }, {input({3, 4}, 4, {-0.2})});
  check_grad("clamp_max", [](V x) { return clamp_max(x[0], 0.1); }, {input({3, 4}, 5, {0.1})});
  Tensor cond = Tensor::from_f64({1, 0, 0, 1, 1, 0, 1, 0, 0, 0, 1, 1}, {3, 4});
  check_grad("where", [cond](V x) { return where(cond, x[0], x[1]); }, {input({3, 4}, 6, {}), input({3, 4}, 7, {})});
  check_grad("where broadcast", [cond](V x) { return where(cond, x[0], x[1]); },
             {input({4}, 8, {}), input({3, 1}, 9, {})});
  check_grad("where scalar", [cond](V x) { return where(cond, x[0], 0.5) * where(cond, -2.0, x[0]); },
             {input({3, 4}, 10, {})});
  // Through float32 the function itself is rounded to ~6e-8 relative, so
  // the finite difference takes a larger step: x * x is quadratic, for which
  // the central difference is exact at any step, leaving only that rounding
  // (~6e-8 / 1e-2) in the numeric gradient.
  check_grad("to f32 and back", [](V x) { return to(to(x[0], DType::f32), DType::f64) * x[0]; },
             {input({3, 4}, 11, {})}, {.eps = 1e-2, .atol = 1e-5, .rtol = 1e-5});
}

TEST_CASE("where: chooses by the condition's nonzero entries, broadcasting all three") {
  Tensor c = Tensor::from({1.0f, 0.0f, 2.0f}, {3, 1});
  Tensor a = Tensor::from({10.0f, 20.0f}, {1, 2});
  Tensor y = where(c, a, -1.0);
  CHECK(y.shape() == Shape{3, 2});
  test::check_close(y, {10, 20, -1, -1, 10, 20}, 0);
  // An int64 condition selects floating values.
  test::check_close(where(Tensor::from_i64({0, 5}, {2}), Tensor::ones({2}), Tensor::zeros({2})), {0, 1}, 0);
}

TEST_CASE("comparisons: 1 where true, 0 where false, in the operands' dtype; no gradient") {
  Tensor x = Tensor::from({-1.0f, 0.0f, 2.0f}, {3});
  x.set_requires_grad(true);
  Tensor y = Tensor::from({0.0f, 0.0f, 0.0f}, {3});
  test::check_close(x > 0.0, {0, 0, 1}, 0);
  test::check_close(x >= 0.0, {0, 1, 1}, 0);
  test::check_close(x < y, {1, 0, 0}, 0);
  test::check_close(x <= y, {1, 1, 0}, 0);
  test::check_close(eq(x, y), {0, 1, 0}, 0);
  test::check_close(ne(x, 2.0), {1, 1, 0}, 0);
  CHECK((x > 0.0).dtype() == DType::f32);
  CHECK_FALSE((x > 0.0).requires_grad());
  CHECK(masked_fill(x, x < 0.0, 9.0).to_floats() == std::vector<float>{9, 0, 2});
}

TEST_CASE("argmax: first index of the maximum, int64, keepdim") {
  Tensor t = Tensor::from({1, 7, 7, 0, -3, -1, -2, -1}, {2, 4});
  CHECK(argmax(t, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  CHECK(t.argmax(0).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0, 0});
  CHECK(argmax(Tensor::from({0, 2, 2, 5, 5, 1}, {2, 3}), 0).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 0});
  CHECK(t.argmax(-1, true).shape() == Shape{2, 1});
  CHECK(argmax(t, 1).dtype() == DType::i64);
}

TEST_CASE("to(dtype): converts, returns the tensor itself when nothing changes, gradients flow back") {
  Tensor x = Tensor::from({1.5f, -2.25f}, {2});
  x.set_requires_grad(true);
  CHECK(x.to(DType::f32).same(x));
  Tensor d = x.to(DType::f64);
  CHECK(d.dtype() == DType::f64);
  CHECK(d.to_vector<double>() == std::vector<double>{1.5, -2.25});
  (d * d).sum().backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == DType::f32);
  CHECK(x.grad().to_floats() == std::vector<float>{3.0f, -4.5f});
  // To int64: truncated values, no gradient (as in PyTorch).
  Tensor i = x.to(DType::i64);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, -2});
  CHECK_FALSE(i.requires_grad());
}

TEST_CASE("zeros_like, ones_like, full_like: t's shape and dtype, no gradient") {
  Tensor t = Tensor::from_f64({1, 2, 3, 4, 5, 6}, {2, 3});
  t.set_requires_grad(true);
  Tensor z = zeros_like(t), o = ones_like(t), f = full_like(t, 2.5);
  for (const Tensor& u : {z, o, f}) {
    CHECK(u.shape() == t.shape());
    CHECK(u.dtype() == DType::f64);
    CHECK_FALSE(u.requires_grad());
  }
  CHECK(sum(f).item() == 15.0);
  CHECK(sum(o).item() == 6.0);
  CHECK(sum(z).item() == 0.0);
}

TEST_CASE("select ops: errors name the op and what was wrong") {
  Tensor x = Tensor::ones({2, 3});
  test::check_error([&] { clamp(x, 1.0, -1.0); }, {"clamp", "min 1 is greater than max -1"});
  test::check_error([&] { clamp(x, std::numeric_limits<double>::quiet_NaN(), 1.0); }, {"clamp", "numbers", "nan"});
  test::check_error([&] { abs(Tensor::from_i64({1, -2}, {2})); }, {"abs", "floating", "int64", "[2]"});
  test::check_error([&] { where(Tensor::ones({4}), x, x); }, {"where", "[4]", "[2, 3]"});
  test::check_error([&] { x > Tensor::ones({2}, DType::f64); }, {"gt", "float32", "float64"});
  test::check_error([&] { argmax(x, 2); }, {"argmax", "dim 2"});
}
