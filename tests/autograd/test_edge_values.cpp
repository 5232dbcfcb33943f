// tests/autograd/test_edge_values.cpp: edge cases where heed once parted
// from PyTorch 1.13 (found by running the same inputs through both): strided
// inputs into fused backwards, 1-d inputs, int64 arithmetic at its limits and
// with numbers that are no int64, NaN through relu, clamp, maximum and
// argmax, pow's gradient at 0^0, max's gradient at tied maxima and concat's
// with an input that needs none. Each case states PyTorch's answer.
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/kernels.h"
#include "heed.h"
#include "test_util.h"

using namespace heed;

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();
}

TEST_CASE("edge values: activation_linear's backward takes a transposed input") {
  for (DType dt : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(dt));
    Tensor a0 = Tensor::arange(1, 13, 1, dt).reshape({4, 3}).set_requires_grad();
    Tensor w = (Tensor::arange(0, 20, 1, dt).reshape({5, 4}) * 0.1).set_requires_grad();
    backward(sum(activation_linear(a0.transpose(0, 1), Activation::gelu, w)));
    // The same through the unfused ops on a contiguous copy.
    Tensor a1 = Tensor::arange(1, 13, 1, dt).reshape({4, 3}).set_requires_grad();
    Tensor w1 = (Tensor::arange(0, 20, 1, dt).reshape({5, 4}) * 0.1).set_requires_grad();
    backward(sum(linear(gelu(a1.transpose(0, 1).contiguous()), w1)));
    CHECK(test::max_diff(a0.grad(), a1.grad()) < 1e-5);
    CHECK(test::max_diff(w.grad(), w1.grad()) < 1e-4);
  }
}

TEST_CASE("edge values: linear of a 1-d float64 input has an input gradient") {
  Tensor x = Tensor::from_f64({1, 2, 3, 4}, {4}).set_requires_grad();
  Tensor w = Tensor::ones({5, 4}, DType::f64);
  backward(sum(linear(x, w)));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{5, 5, 5, 5});  // PyTorch: [5, 5, 5, 5]
}

TEST_CASE("edge values: int64 arithmetic wraps around; a number that is no int64 is refused") {
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  // PyTorch: INT64_MIN // -1 = INT64_MIN, INT64_MAX + 1 = INT64_MIN (was SIGFPE, and undefined).
  CHECK((Tensor::from_i64({lo}, {1}) / Tensor::from_i64({-1}, {1})).to_vector<int64_t>()[0] == lo);
  CHECK((Tensor::from_i64({hi}, {1}) + Tensor::from_i64({1}, {1})).to_vector<int64_t>()[0] == lo);
  CHECK((Tensor::from_i64({hi}, {1}) * Tensor::from_i64({2}, {1})).to_vector<int64_t>()[0] == -2);
  Tensor a = Tensor::from_i64({0, 3, 5}, {3});
  CHECK((a * 2.0).to_vector<int64_t>() == std::vector<int64_t>{0, 6, 10});
  // a + 0.5 was [0, 3, 5], eq(a, 0.5) was [1, 0, 0], a * 1e30 wrapped.
  test::check_error([&] { (void)(a + 0.5); }, {"add: an int64 tensor of shape [3] with the number 0.5", "to(DType::f64)"});
  test::check_error([&] { (void)eq(a, 0.5); }, {"eq:", "0.5", "not an int64 value"});
  test::check_error([&] { (void)(a * 1e30); }, {"mul:", "not an int64 value"});
  test::check_error([&] { (void)(a / kNaN); }, {"div:", "nan"});
  test::check_error([] { Tensor::full({2}, kNaN, DType::i64); }, {"fill_: nan is not an int64 value"});
  test::check_error([] { Tensor::full({2}, 1e300, DType::i64); }, {"not an int64 value"});
}

TEST_CASE("edge values: NaN passes through relu, clamp and maximum, and argmax finds it") {
  Tensor x = Tensor::from_f64({kNaN, 2, -1}, {3}).set_requires_grad();
  Tensor r = relu(x);
  CHECK(std::isnan(r.at({0})));  // PyTorch: [nan, 2, 0]
  CHECK(r.at({1}) == 2);
  CHECK(r.at({2}) == 0);
  backward(sum(r * Tensor::from_f64({7, 7, 7}, {3})));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{7, 7, 0});  // at NaN the gradient passes
  Tensor c = clamp(Tensor::from_f64({kNaN, 2, -3}, {3}), -1, 1);
  CHECK(std::isnan(c.at({0})));  // PyTorch: [nan, 1, -1]
  CHECK(c.at({1}) == 1);
  CHECK(c.at({2}) == -1);
  Tensor m = kernel::binary(kernel::Binary::maximum, Tensor::from_f64({1, kNaN}, {2}), Tensor::from_f64({kNaN, 1}, {2}));
  CHECK(std::isnan(m.at({0})));
  CHECK(std::isnan(m.at({1})));
  CHECK(argmax(Tensor::from_f64({1, kNaN, 3, kNaN}, {4}), 0).item() == 1);  // PyTorch: 1
  CHECK(argmax(Tensor::from_f64({1, 5, 3, 5}, {4}), 0).item() == 1);      // the first maximum
}

TEST_CASE("edge values: the gradient of x^0 is 0, at x = 0 too") {
  Tensor x = Tensor::from_f64({0, 2}, {2}).set_requires_grad();
  backward(sum(pow(x, 0.0)));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0});  // PyTorch: [0, 0] (was [nan, 0])
}

TEST_CASE("edge values: max shares the gradient equally among tied maxima, like torch.amax") {
  // torch.amax(x, 1).sum().backward() on [[1, 5, 5], [4, 4, 0]]:
  // x.grad = [[0, 0.5, 0.5], [0.5, 0.5, 0]].
  Tensor x = Tensor::from_f64({1, 5, 5, 4, 4, 0}, {2, 3}).set_requires_grad();
  backward(sum(max(x, {1})));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 0.5, 0.5, 0.5, 0.5, 0});
  // Over every element: three tied maxima get a third each.
  Tensor y = Tensor::from_f64({2, 7, 7, 7}, {4}).set_requires_grad();
  backward(max(y, {}) * 3.0);
  CHECK(y.grad().to_vector<double>() == std::vector<double>{0, 1, 1, 1});
}

TEST_CASE("edge values: concat's backward cuts each input's part at its place, whichever inputs need a gradient") {
  // d/db sum(concat(a, b) * w) = w[2:5] when a (2 elements) is a constant.
  Tensor a = Tensor::from_f64({10, 20}, {2});
  Tensor b = Tensor::from_f64({1, 2, 3}, {3}).set_requires_grad();
  Tensor c = Tensor::from_f64({4}, {1}).set_requires_grad();
  Tensor w = Tensor::from_f64({1, 2, 3, 4, 5, 6}, {6});
  backward(sum(concat({a, b, c}, 0) * w));
  CHECK(b.grad().to_vector<double>() == std::vector<double>{3, 4, 5});
  CHECK(c.grad().to_vector<double>() == std::vector<double>{6});
  // The same along dim 1, the constant in the middle.
  Tensor p = Tensor::from_f64({1, 2}, {2, 1}).set_requires_grad();
  Tensor q = Tensor::zeros({2, 2}, DType::f64);
  Tensor r = Tensor::from_f64({3, 4}, {2, 1}).set_requires_grad();
  Tensor w2 = Tensor::from_f64({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
  backward(sum(concat({p, q, r}, 1) * w2));
  CHECK(p.grad().to_vector<double>() == std::vector<double>{1, 5});
  CHECK(r.grad().to_vector<double>() == std::vector<double>{4, 8});
}
