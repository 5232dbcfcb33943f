// autograd/conv.cpp: 1-D convolution (cross-correlation, as in PyTorch).
//
//   y[n, o, t] = b[o] + sum_{c, k} w[o, c, k] x[n, c, t S - P + k D]
// Backward: dL/dx by the transposed convolution, dL/dw and dL/db by the
// weight-gradient kernel; each only when needed. conv1d_relu is the same op
// with the ReLU fused into the forward pass (and, where the kernels allow,
// its mask into the backward passes).
#include "autograd/ops.h"
#include "core/error.h"
#include "core/kernels.h"

namespace heed {

namespace k = kernel;

namespace {

// y = conv1d(x, w, b), then max(0, y) when relu. Backward: the ReLU's mask
// (y > 0, read from the saved output), then the convolution's; the Winograd
// kernels apply the mask as they read the gradient.
Tensor conv1d_op(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t padding,
                 int64_t dilation, bool relu) {
  k::Conv1dGeom geo{stride, padding, dilation};
  Tensor y = k::conv1d_forward(x, w, b, geo, relu);
  bool need_x = x.requires_grad(), need_w = w.requires_grad() || (b.defined() && b.requires_grad());
  return autograd::record(
      relu ? "conv1d_relu" : "conv1d", y, {x, w, b},
      [xs = need_w ? autograd::saved(x) : Tensor(), ws = need_x ? autograd::saved(w) : Tensor(), sx = x.shape(),
       sw = w.shape(), geo, x_cl = k::conv1d_channels_last(x),
       ys = relu ? autograd::saved(y) : Tensor()](const Tensor& g_out, autograd::Grads& gi) {
        // The ReLU's mask inside the convolution's passes when they can
        // apply it, else once, first.
        const bool fuse = ys.defined() && k::conv1d_backward_fuses_relu(g_out, sw, geo, x_cl);
        const Tensor g = ys.defined() && !fuse ? k::unary_backward(k::Unary::relu, ys, g_out) : g_out;
        const Tensor mask = fuse ? ys : Tensor();
        // dx laid out like x (channels-last stays channels-last).
        if (gi.needs(0)) gi.set(0, k::conv1d_backward_data(g, ws, sx, geo, x_cl, mask));
        if (gi.needs(1) || gi.needs(2)) {
          Tensor gb;
          Tensor gw = k::conv1d_backward_weights(g, xs, sw, geo, gi.needs(2) ? &gb : nullptr, mask);
          if (gi.needs(1)) gi.set(1, gw);
          if (gi.needs(2)) gi.set(2, gb);
        }
      });
}

}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t padding, int64_t dilation) {
  return conv1d_op(x, w, b, stride, padding, dilation, false);
}

Tensor conv1d_relu(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride, int64_t padding,
                   int64_t dilation) {
  return conv1d_op(x, w, b, stride, padding, dilation, true);
}

}  // namespace heed
