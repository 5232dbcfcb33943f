// tests/core/test_elementwise_bits.cpp: an element-wise op gives each value
// the same bits wherever it sits in the tensor. A vectorised loop computes
// most values in its vector body and the last few in a scalar tail; where the
// compiler rounds the two differently (fused multiply-adds it contracts in
// one and not the other), a value's bits would depend on its position, and
// so on the shape and offset of the view it was computed in.
#include <cstring>

#include "core/kernels.h"
#include "test_util.h"

using namespace heed;
using namespace heed::test;
using kernel::Unary;

namespace {

constexpr Unary kAll[] = {Unary::neg,  Unary::exp,      Unary::log,    Unary::sqrt,       Unary::tanh,
                          Unary::sigmoid, Unary::relu,  Unary::gelu_tanh, Unary::gelu_erf, Unary::silu,
                          Unary::abs,  Unary::square,   Unary::reciprocal, Unary::sin,     Unary::cos};

// Index of the first element whose bits differ between a[from..] and b, or -1.
int64_t first_bit_difference(const Tensor& a, int64_t from, const Tensor& b) {
  const std::vector<float> av = a.to_floats(), bv = b.to_floats();
  for (size_t i = 0; i < bv.size(); ++i)
    if (std::memcmp(&av[from + i], &bv[i], sizeof(float)) != 0) return static_cast<int64_t>(i);
  return -1;
}

}  // namespace

TEST_CASE("float32 unary ops, their GELU derivative pass and backward: the same bits at every position") {
  const int64_t n = 1000;
  // Positive inputs for log, sqrt and reciprocal; [-6, 6] for the others
  // (both GELUs' interesting range, erf's clamp at 4 included).
  const Tensor xpos = det_tensor({n}, 11, 0.05, 6.0);
  const Tensor xany = det_tensor({n}, 12, -6.0, 6.0);
  const Tensor g = det_tensor({n}, 13);
  for (Unary op : kAll) {
    const bool positive = op == Unary::log || op == Unary::sqrt || op == Unary::reciprocal;
    const Tensor x = positive ? xpos : xany;
    CAPTURE(kernel::unary_name(op));
    const Tensor y = kernel::unary(op, x);
    const Tensor saved = kernel::unary_backward_uses_output(op) ? y : x;
    const Tensor dx = kernel::unary_backward(op, saved, g);
    Tensor d;
    const Tensor yd = kernel::unary_has_derivative_pass(op) ? kernel::unary_with_derivative(op, x, d) : Tensor();
    if (yd.defined()) CHECK(first_bit_difference(y, 0, yd) == -1);
    // Views starting 1..17 elements in: the vector body and the tail cover
    // other elements than in the whole tensor.
    for (int64_t at = 1; at <= 17; ++at) {
      CAPTURE(at);
      const Tensor xv = kernel::narrow(x, 0, at, n - at);
      CHECK(first_bit_difference(y, at, kernel::unary(op, xv)) == -1);
      CHECK(first_bit_difference(dx, at,
                                 kernel::unary_backward(op, kernel::narrow(saved, 0, at, n - at),
                                                        kernel::narrow(g, 0, at, n - at))) == -1);
      if (yd.defined()) {
        Tensor dv;
        CHECK(first_bit_difference(y, at, kernel::unary_with_derivative(op, xv, dv)) == -1);
        CHECK(first_bit_difference(d, at, dv) == -1);
      }
    }
    // Every element alone: the scalar code for each value the vector body
    // computed above.
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      const Tensor xi = kernel::narrow(x, 0, i, 1);
      differ += first_bit_difference(y, i, kernel::unary(op, xi)) != -1;
      differ += first_bit_difference(
                    dx, i, kernel::unary_backward(op, kernel::narrow(saved, 0, i, 1), kernel::narrow(g, 0, i, 1))) != -1;
      if (yd.defined()) {
        Tensor di;
        kernel::unary_with_derivative(op, xi, di);
        differ += first_bit_difference(d, i, di) != -1;
      }
    }
    CHECK(differ == 0);
  }
}
