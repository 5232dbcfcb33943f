// autograd/softmax.cpp: softmax and log-softmax over a dim. Backward reads
// only the output y (dx = y * (g - sum(g y)); log form: dx = g - e^y sum(g)).
#include "autograd/ops.h"
#include "core/kernels.h"

namespace heed {

namespace k = kernel;

Tensor softmax(const Tensor& t, int64_t dim) {
  Tensor y = k::softmax(t, dim);
  return autograd::record("softmax", y, {t}, [ys = autograd::saved(y), dim](const Tensor& g, autograd::Grads& gi) {
    gi.set(0, k::softmax_backward(ys, g, dim));
  });
}

Tensor log_softmax(const Tensor& t, int64_t dim) {
  Tensor y = k::log_softmax(t, dim);
  return autograd::record("log_softmax", y, {t},
                          [ys = autograd::saved(y), dim](const Tensor& g, autograd::Grads& gi) {
                            gi.set(0, k::log_softmax_backward(ys, g, dim));
                          });
}

}  // namespace heed
