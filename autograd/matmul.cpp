// autograd/matmul.cpp: matrix products.
//
//   Y[.., M, N] = A[.., M, K] B[.., K, N]
//   dA = dY B^T   (transposed view: no copy reaches GEMM)
//   dB = A^T dY
// Batch dims broadcast, so each gradient is summed back to its input's shape.
//
// linear: Y[.., O] = X[.., I] W[O, I]^T + b
//   dX = dY W,  dW = dY^T X (leading dims folded into rows),  db = sum of dY rows
#include <chrono>

#include "autograd/ops.h"
#include "core/error.h"
#include "core/kernels.h"

namespace heed {

namespace k = kernel;

Tensor matmul(const Tensor& a0, const Tensor& b0) {
  check_defined(a0, "matmul");
  check_defined(b0, "matmul");
  if (a0.dim() == 0 || b0.dim() == 0)
    fail("matmul: expected operands of rank >= 1, got shapes {} and {}", shape_str(a0.shape()), shape_str(b0.shape()));
  // 1-D operands: a row vector on the left, a column vector on the right.
  if (a0.dim() == 1 || b0.dim() == 1) {
    if (a0.size(-1) != b0.size(b0.dim() == 1 ? 0 : -2))
      fail("matmul: shapes {} and {} do not match (inner dims {} and {})", shape_str(a0.shape()),
           shape_str(b0.shape()), a0.size(-1), b0.size(b0.dim() == 1 ? 0 : -2));
    Tensor a = a0.dim() == 1 ? unsqueeze(a0, 0) : a0;
    Tensor b = b0.dim() == 1 ? unsqueeze(b0, 1) : b0;
    Tensor y = matmul(a, b);
    if (b0.dim() == 1) y = squeeze(y, -1);
    if (a0.dim() == 1) y = squeeze(y, a0.dim() == 1 && b0.dim() == 1 ? 0 : -2);
    return y;
  }
  Tensor y = k::matmul(a0, b0);
  bool ga = a0.requires_grad(), gb = b0.requires_grad();
  return autograd::record(
      "matmul", y, {a0, b0},
      [as = gb ? autograd::saved(a0) : Tensor(), bs = ga ? autograd::saved(b0) : Tensor(), sa = a0.shape(),
       sb = b0.shape()](const Tensor& g, autograd::Grads& gi) {
        if (gi.needs(0)) gi.set(0, k::sum_to(k::matmul(g, k::transpose(bs, -1, -2)), sa));
        if (gi.needs(1)) {
          if (sb.size() == 2 && sa.size() > 2) {
            // A shared weight (Linear on [N, T, D]): fold the batch into rows
            // and do one GEMM instead of a GEMM per batch and a reduction.
            Tensor a2 = k::reshape(as, {-1, sa.back()}), g2 = k::reshape(g, {-1, sb.back()});
            gi.set(1, k::matmul(k::transpose(a2, 0, 1), g2));
          } else {
            gi.set(1, k::sum_to(k::matmul(k::transpose(as, -1, -2), g), sb));
          }
        }
      });
}

namespace {
// linear's backward: dX (into the sum of x's other gradients when it may),
// dW and db from one kernel call; with a residual (input 3), its gradient is
// dY itself.
auto linear_grad(const Tensor& x, const Tensor& w) {
  return [xs = w.requires_grad() ? autograd::saved(x) : Tensor(), ws = autograd::saved(w)](const Tensor& g,
                                                                                         autograd::Grads& gi) {
    if (gi.needs(0) || gi.needs(1) || gi.needs(2)) {
      const Tensor sum = gi.sum_target(0);
      k::LinearGrads d = k::linear_backward(g, xs, ws, gi.needs(0), gi.needs(1), sum, gi.needs(2));
      if (gi.needs(0)) {
        if (sum.defined()) gi.set_summed(0, d.x);
        else gi.set(0, d.x);
      }
      if (gi.needs(1)) gi.set(1, d.w);
      if (gi.needs(2)) gi.set(2, d.b);
    }
    if (gi.needs(3)) gi.set(3, g);
  };
}
}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  return autograd::record("linear", k::linear(x, w, b), {x, w, b}, linear_grad(x, w));
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& residual) {
  if (!residual.defined()) return linear(x, w, b);
  return autograd::record("linear", k::linear(x, w, b, residual), {x, w, b, residual}, linear_grad(x, w));
}

Tensor activation_linear(const Tensor& a, Activation act, const Tensor& w, const Tensor& b, const Tensor& residual) {
  const bool gelu = act == Activation::gelu || act == Activation::gelu_tanh;
  if (!gelu || !a.defined() || !a.requires_grad() || !autograd::is_grad_enabled())
    return linear(activation(a, act), w, b, residual);
  // As gelu(): y = f(a) and d = f'(a) from one pass, d kept for the backward.
  const auto t0 = std::chrono::steady_clock::now();
  const k::Unary op = act == Activation::gelu ? k::Unary::gelu_erf : k::Unary::gelu_tanh;
  Tensor d;
  const Tensor h = k::unary_with_derivative(op, a, d);
  if (!d.is_contiguous()) d = k::contiguous(d);  // laid out like a: the backward's epilogue reads it as dX's rows
  if (autograd::is_profiling()) {  // the activation's pass under its own name, the product under linear's
    autograd::profile_add(fmt::format("{} {}", k::unary_name(op), shape_str(h.shape())),
                          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    autograd::profile_mark();
  }
  return autograd::record(
      "linear", k::linear(h, w, b, residual), {a, w, b, residual},
      [hs = w.requires_grad() ? h : Tensor(), ws = autograd::saved(w), d](const Tensor& g, autograd::Grads& gi) {
        if (gi.needs(0) || gi.needs(1) || gi.needs(2)) {
          // dA = (dY w) f'(a), the factor applied in the product's epilogue.
          const k::LinearGrads r = k::linear_backward(g, hs, ws, gi.needs(0), gi.needs(1), Tensor(), gi.needs(2),
                                                      gi.needs(0) ? d : Tensor());
          if (gi.needs(0)) gi.set(0, r.x);
          if (gi.needs(1)) gi.set(1, r.w);
          if (gi.needs(2)) gi.set(2, r.b);
        }
        if (gi.needs(3)) gi.set(3, g);
      });
}

}  // namespace heed
