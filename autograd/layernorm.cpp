// autograd/layernorm.cpp: layer normalisation over the last dim (Ba, Kiros,
// Hinton 2016), as one op on the fused kernels in core/cpu_layernorm.cpp.
//
//   y = (x - mean) / sqrt(var + eps) * w + b   (statistics over the last dim)
// Forward saves x, w and each row's mean and var; backward produces dL/dx,
// dL/dw and dL/db in one kernel call. It matches the version composed from
// mean / sub / mul / sqrt (tests/autograd/test_layernorm.cpp), which needs
// about ten graph nodes and as many full-size temporaries.
#include "autograd/ops.h"
#include "core/error.h"
#include "core/kernels.h"

namespace heed {

namespace k = kernel;

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  check_defined(x, "layer_norm");
  if (x.dim() < 1) fail("layer_norm: expected input [.., D], got {}", shape_str(x.shape()));
  const int64_t D = x.size(-1);
  // Without an affine part the kernels still take one: w = 1, b = 0.
  Tensor w = weight.defined() ? weight : Tensor::ones({D}, x.dtype());
  Tensor b = bias.defined() ? bias : Tensor::zeros({D}, x.dtype());
  k::LayerNormResult r = k::layer_norm_forward(x, w, b, eps);
  return autograd::record(
      "layer_norm", r.y, {x, weight, bias},
      [xs = autograd::saved(x), ws = autograd::saved(w), mean = r.mean, var = r.var, eps](const Tensor& g,
                                                                                         autograd::Grads& gi) {
        // dx goes straight into the sum of x's other gradients (the residual
        // stream's) when it may.
        const Tensor sum = gi.sum_target(0);
        k::LayerNormGrads gr = k::layer_norm_backward(g, xs, ws, mean, var, eps, sum);
        if (gi.needs(0)) {
          if (sum.defined()) gi.set_summed(0, gr.x);
          else gi.set(0, gr.x);
        }
        if (gi.needs(1)) gi.set(1, gr.w);
        if (gi.needs(2)) gi.set(2, gr.b);
      });
}

}  // namespace heed
