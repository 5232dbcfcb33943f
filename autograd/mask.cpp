// autograd/mask.cpp: masked_fill (causal masks before a softmax).
#include "autograd/ops.h"
#include "core/error.h"
#include "core/kernels.h"

namespace heed {

namespace k = kernel;

Tensor masked_fill(const Tensor& t, const Tensor& mask, double value) {
  Tensor y = k::masked_fill(t, mask, value);
  // Filled positions do not depend on t: their gradient is zero.
  return autograd::record("masked_fill", y, {t, mask},  // mask: no gradient, its version kept
                          [m = autograd::saved(mask)](const Tensor& g, autograd::Grads& gi) {
                            gi.set(0, k::masked_fill(g, m, 0.0));
                          });
}

Tensor causal_mask(int64_t T) {
  if (T < 0) fail("causal_mask: expected T >= 0, got {}", T);
  Tensor m = Tensor::zeros({T, T});
  float* p = m.data<float>();
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = i + 1; j < T; ++j) p[i * T + j] = 1.0f;
  return m;
}

}  // namespace heed
