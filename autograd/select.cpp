// autograd/select.cpp: ops that choose between values (abs, clamp, where),
// comparisons, argmax and dtype conversion, forward and backward.
#include <cmath>

#include "autograd/ops.h"
#include "core/error.h"
#include "core/kernels.h"

namespace heed {

using autograd::Grads;
using autograd::record;
using autograd::saved;
namespace k = kernel;
using k::Binary;
using k::Unary;

namespace {

void check_floating(const Tensor& t, const char* op) {
  check_defined(t, op);
  HEED_CHECK(t.is_floating(), "{}: expected a floating tensor (f32 or f64), got {} of shape {}", op,
             dtype_name(t.dtype()), shape_str(t.shape()));
}

// 1 where lo <= x <= hi (either bound may be NaN: unbounded), in x's dtype.
Tensor inside(const Tensor& x, double lo, double hi) {
  Tensor m = Tensor::ones(x.shape(), x.dtype());
  if (!std::isnan(lo)) m = k::binary(Binary::mul, m, k::binary_scalar(Binary::ge, x, lo));
  if (!std::isnan(hi)) m = k::binary(Binary::mul, m, k::binary_scalar(Binary::le, x, hi));
  return m;
}

Tensor clamp_impl(const Tensor& x, double lo, double hi, const char* op) {
  check_floating(x, op);
  HEED_CHECK(std::isnan(lo) || std::isnan(hi) || lo <= hi, "{}: min {} is greater than max {}", op, lo, hi);
  Tensor y = x;
  if (!std::isnan(lo)) y = k::binary_scalar(Binary::maximum, y, lo);
  if (!std::isnan(hi)) y = k::binary_scalar(Binary::minimum, y, hi);
  if (y.same(x)) y = k::clone(x);
  // The gradient passes where x lies inside [lo, hi], bounds included (as
  // PyTorch's clamp), and is zero where x was clamped.
  return record(op, y, {x}, [xs = saved(x), lo, hi](const Tensor& g, Grads& gi) {
    gi.set(0, k::binary(Binary::mul, g, inside(xs, lo, hi)));
  });
}

Tensor compare(Binary op, const Tensor& a, const Tensor& b) {
  check_defined(a, k::binary_name(op));
  check_defined(b, k::binary_name(op));
  return k::binary(op, a, b);
}

Tensor compare(Binary op, const Tensor& a, double s) {
  check_defined(a, k::binary_name(op));
  return k::binary_scalar(op, a, s);
}
}  // namespace

Tensor abs(const Tensor& a) {
  check_floating(a, "abs");
  Tensor y = k::unary(Unary::abs, a);
  return record("abs", y, {a}, [as = saved(a)](const Tensor& g, Grads& gi) {
    gi.set(0, k::unary_backward(Unary::abs, as, g));
  });
}

Tensor clamp(const Tensor& t, double min, double max) {
  HEED_CHECK(!std::isnan(min) && !std::isnan(max), "clamp: bounds must be numbers, got min {} and max {}", min, max);
  return clamp_impl(t, min, max, "clamp");
}
Tensor clamp_min(const Tensor& t, double min) {
  HEED_CHECK(!std::isnan(min), "clamp_min: the bound must be a number, got {}", min);
  return clamp_impl(t, min, NAN, "clamp_min");
}
Tensor clamp_max(const Tensor& t, double max) {
  HEED_CHECK(!std::isnan(max), "clamp_max: the bound must be a number, got {}", max);
  return clamp_impl(t, NAN, max, "clamp_max");
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_defined(cond, "where");
  check_floating(a, "where");
  check_floating(b, "where");
  Tensor y = k::where(cond, a, b);
  // Each branch's gradient is g where it was chosen, summed back to its shape.
  return record("where", y, {a, b, cond},  // cond: no gradient, its version kept
                [c = saved(cond), sa = a.shape(), sb = b.shape()](const Tensor& g, Grads& gi) {
                  Tensor zero = Tensor::zeros({}, g.dtype());
                  if (gi.needs(0)) gi.set(0, k::sum_to(k::where(c, g, zero), sa));
                  if (gi.needs(1)) gi.set(1, k::sum_to(k::where(c, zero, g), sb));
                });
}

Tensor where(const Tensor& cond, const Tensor& a, double b) {
  check_floating(a, "where");
  return where(cond, a, Tensor::scalar(b, a.dtype()));
}

Tensor where(const Tensor& cond, double a, const Tensor& b) {
  check_floating(b, "where");
  return where(cond, Tensor::scalar(a, b.dtype()), b);
}

Tensor eq(const Tensor& a, const Tensor& b) { return compare(Binary::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(Binary::ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(Binary::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(Binary::le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(Binary::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(Binary::ge, a, b); }
Tensor eq(const Tensor& a, double s) { return compare(Binary::eq, a, s); }
Tensor ne(const Tensor& a, double s) { return compare(Binary::ne, a, s); }
Tensor lt(const Tensor& a, double s) { return compare(Binary::lt, a, s); }
Tensor le(const Tensor& a, double s) { return compare(Binary::le, a, s); }
Tensor gt(const Tensor& a, double s) { return compare(Binary::gt, a, s); }
Tensor ge(const Tensor& a, double s) { return compare(Binary::ge, a, s); }

Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator<(const Tensor& a, double s) { return lt(a, s); }
Tensor operator<=(const Tensor& a, double s) { return le(a, s); }
Tensor operator>(const Tensor& a, double s) { return gt(a, s); }
Tensor operator>=(const Tensor& a, double s) { return ge(a, s); }

Tensor argmax(const Tensor& t, int64_t dim, bool keepdim) {
  check_defined(t, "argmax");
  return k::argmax(t, dim, keepdim);
}

Tensor to(const Tensor& t, DType dtype) {
  check_defined(t, "to");
  if (t.dtype() == dtype) return t;
  Tensor y = k::to_dtype(t, dtype);
  // Integer results carry no gradient (as in PyTorch); between floating
  // dtypes the gradient is converted back.
  if (dtype == DType::i64 || !t.is_floating()) return y;
  return record("to", y, {t}, [from = t.dtype()](const Tensor& g, Grads& gi) { gi.set(0, k::to_dtype(g, from)); });
}

Tensor zeros_like(const Tensor& t) { return Tensor::zeros(t.shape(), t.dtype()); }
Tensor ones_like(const Tensor& t) { return Tensor::ones(t.shape(), t.dtype()); }
Tensor full_like(const Tensor& t, double value) { return Tensor::full(t.shape(), value, t.dtype()); }

}  // namespace heed
