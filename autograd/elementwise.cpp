// autograd/elementwise.cpp: arithmetic and activations, forward and backward.
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
Tensor kmul(const Tensor& a, const Tensor& b) { return k::binary(Binary::mul, a, b); }
Tensor kdiv(const Tensor& a, const Tensor& b) { return k::binary(Binary::div, a, b); }
Tensor kscale(const Tensor& a, double s) { return k::binary_scalar(Binary::mul, a, s); }
bool rg(const Tensor& t) { return t.defined() && t.requires_grad(); }
// Captures t only when a gradient that reads it will be computed.
Tensor keep_if(bool needed, const Tensor& t) { return needed ? saved(t) : Tensor(); }
}  // namespace

// ---- binary, broadcasting: each gradient is summed back to its input's shape ----
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor y = k::binary(Binary::add, a, b);
  return record("add", y, {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g, Grads& gi) {
    if (gi.needs(0)) gi.set(0, k::sum_to(g, sa));
    if (gi.needs(1)) gi.set(1, k::sum_to(g, sb));
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor y = k::binary(Binary::sub, a, b);
  return record("sub", y, {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g, Grads& gi) {
    if (gi.needs(0)) gi.set(0, k::sum_to(g, sa));
    if (gi.needs(1)) gi.set(1, k::unary(Unary::neg, k::sum_to(g, sb)));
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor y = k::binary(Binary::mul, a, b);
  // dL/da = g * b reads b; dL/db = g * a reads a.
  return record("mul", y, {a, b},
                [as = keep_if(rg(b), a), bs = keep_if(rg(a), b), sa = a.shape(), sb = b.shape()](const Tensor& g,
                                                                                                 Grads& gi) {
                  if (gi.needs(0)) gi.set(0, k::sum_to(kmul(g, bs), sa));
                  if (gi.needs(1)) gi.set(1, k::sum_to(kmul(g, as), sb));
                });
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor y = k::binary(Binary::div, a, b);
  // dL/da = g / b; dL/db = -g * a / b^2 = -g * y / b.
  return record("div", y, {a, b},
                [bs = saved(b), ys = keep_if(rg(b), y), sa = a.shape(), sb = b.shape()](const Tensor& g, Grads& gi) {
                  if (gi.needs(0)) gi.set(0, k::sum_to(kdiv(g, bs), sa));
                  if (gi.needs(1)) gi.set(1, k::sum_to(k::unary(Unary::neg, kdiv(kmul(g, ys), bs)), sb));
                });
}

// ---- scalar forms ----
Tensor add(const Tensor& a, double s) {
  Tensor y = k::binary_scalar(Binary::add, a, s);
  return record("add_scalar", y, {a}, [](const Tensor& g, Grads& gi) { gi.set(0, g); });
}

Tensor sub(const Tensor& a, double s) {
  Tensor y = k::binary_scalar(Binary::sub, a, s);
  return record("sub_scalar", y, {a}, [](const Tensor& g, Grads& gi) { gi.set(0, g); });
}

Tensor rsub(double s, const Tensor& a) {
  Tensor y = k::binary_scalar(Binary::sub, a, s, /*scalar_first=*/true);
  return record("rsub_scalar", y, {a}, [](const Tensor& g, Grads& gi) { gi.set(0, k::unary(Unary::neg, g)); });
}

Tensor mul(const Tensor& a, double s) {
  Tensor y = k::binary_scalar(Binary::mul, a, s);
  return record("mul_scalar", y, {a}, [s](const Tensor& g, Grads& gi) { gi.set(0, kscale(g, s)); });
}

Tensor div(const Tensor& a, double s) {
  Tensor y = k::binary_scalar(Binary::div, a, s);
  return record("div_scalar", y, {a}, [s](const Tensor& g, Grads& gi) { gi.set(0, kscale(g, 1.0 / s)); });
}

Tensor rdiv(double s, const Tensor& a) {
  Tensor y = k::binary_scalar(Binary::div, a, s, /*scalar_first=*/true);
  // d(s/a)/da = -s/a^2 = -y/a
  return record("rdiv_scalar", y, {a}, [as = saved(a), ys = saved(y)](const Tensor& g, Grads& gi) {
    gi.set(0, k::unary(Unary::neg, kdiv(kmul(g, ys), as)));
  });
}

Tensor neg(const Tensor& a) {
  Tensor y = k::unary(Unary::neg, a);
  return record("neg", y, {a}, [](const Tensor& g, Grads& gi) { gi.set(0, k::unary(Unary::neg, g)); });
}

Tensor pow(const Tensor& a, double e) {
  Tensor y = k::binary_scalar(Binary::pow, a, e);
  // d(a^e)/da = e * a^(e-1)
  return record("pow", y, {a}, [as = saved(a), e](const Tensor& g, Grads& gi) {
    // a^0 is constant: its gradient is 0, also at a = 0 (where 0 * 0^-1 would be NaN).
    if (e == 0.0) return gi.set(0, Tensor::zeros(as.shape(), as.dtype()));
    gi.set(0, kmul(g, kscale(k::binary_scalar(Binary::pow, as, e - 1.0), e)));
  });
}

// ---- unary activations: one helper, the kernel knows each derivative ----
static Tensor unary_op(Unary op, const Tensor& a) {
  // The GELUs make f'(x) in the forward pass, where it shares the erf or tanh
  // with f(x), and keep it in place of x (the same memory): the backward is
  // then one multiply instead of a second erf and an exp per element.
  if (k::unary_has_derivative_pass(op) && a.requires_grad() && autograd::is_grad_enabled()) {
    Tensor d;
    Tensor y = k::unary_with_derivative(op, a, d);
    // On its last run the closure multiplies g into d, which it alone holds
    // (g * d and d * g are the same product): no new [.., F] tensor.
    return record(k::unary_name(op), y, {a}, [d](const Tensor& g, Grads& gi) {
      if (gi.last_run() && autograd::sole_owner(d) && g.shape() == d.shape()) {
        k::mul_(d, g);
        gi.set(0, d);
      } else {
        gi.set(0, kmul(g, d));
      }
    });
  }
  Tensor y = k::unary(op, a);
  Tensor keep = k::unary_backward_uses_output(op) ? saved(y) : saved(a);
  return record(k::unary_name(op), y, {a},
                [op, keep](const Tensor& g, Grads& gi) { gi.set(0, k::unary_backward(op, keep, g)); });
}

Tensor exp(const Tensor& a) { return unary_op(Unary::exp, a); }
Tensor log(const Tensor& a) { return unary_op(Unary::log, a); }
Tensor sqrt(const Tensor& a) { return unary_op(Unary::sqrt, a); }
Tensor tanh(const Tensor& a) { return unary_op(Unary::tanh, a); }
Tensor sin(const Tensor& a) { return unary_op(Unary::sin, a); }
Tensor cos(const Tensor& a) { return unary_op(Unary::cos, a); }
Tensor sigmoid(const Tensor& a) { return unary_op(Unary::sigmoid, a); }
Tensor relu(const Tensor& a) { return unary_op(Unary::relu, a); }
Tensor gelu(const Tensor& a, GeluApprox approx) {
  return unary_op(approx == GeluApprox::tanh ? Unary::gelu_tanh : Unary::gelu_erf, a);
}
Tensor silu(const Tensor& a) { return unary_op(Unary::silu, a); }

// ---- activations by enum (autograd/activation.h) ----
const char* activation_name(Activation a) {
  switch (a) {
#define HEED_ACTIVATION_NAME(id, name) \
  case Activation::id: return name;
    HEED_ACTIVATIONS(HEED_ACTIVATION_NAME)
#undef HEED_ACTIVATION_NAME
  }
  return "?";
}

Activation parse_activation(std::string_view name) {
  std::string valid;
  for (Activation a : kActivations) {
    if (name == activation_name(a)) return a;
    valid += valid.empty() ? "" : ", ";
    valid += activation_name(a);
  }
  fail("unknown activation '{}' (expected one of: {})", name, valid);
}

Tensor activation(const Tensor& x, Activation a) {
  // No default: a new Activation without its case here is a -Wswitch warning.
  switch (a) {
    case Activation::relu: return relu(x);
    case Activation::gelu: return gelu(x, GeluApprox::erf);
    case Activation::gelu_tanh: return gelu(x, GeluApprox::tanh);
    case Activation::tanh: return tanh(x);
    case Activation::sigmoid: return sigmoid(x);
    case Activation::silu: return silu(x);
  }
  fail("activation: invalid Activation value {}", static_cast<int>(a));
}

// ---- operators ----
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double s) { return add(a, s); }
Tensor operator-(const Tensor& a, double s) { return sub(a, s); }
Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
Tensor operator/(const Tensor& a, double s) { return div(a, s); }
Tensor operator+(double s, const Tensor& a) { return add(a, s); }
Tensor operator-(double s, const Tensor& a) { return rsub(s, a); }
Tensor operator*(double s, const Tensor& a) { return mul(a, s); }
Tensor operator/(double s, const Tensor& a) { return rdiv(s, a); }
Tensor operator-(const Tensor& a) { return neg(a); }

}  // namespace heed
