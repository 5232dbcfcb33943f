// autograd/dropout.cpp: inverted dropout (Srivastava et al. 2014, scaled at
// training time so evaluation is the identity).
#include "autograd/ops.h"
#include "core/error.h"
#include "core/kernels.h"
#include "core/random.h"

namespace heed {

namespace k = kernel;

Tensor dropout(const Tensor& t, double p, bool training, Generator* gen) {
  check_defined(t, "dropout");
  if (!(p >= 0.0 && p <= 1.0)) fail("dropout: probability {} out of range (expected 0 <= p <= 1)", p);
  if (!training || p == 0.0) return t;
  if (!t.is_floating()) fail("dropout: expected a floating-point tensor, got {}", dtype_name(t.dtype()));
  // keep ~ Bernoulli(1 - p), scaled by 1 / (1 - p) so E[y] = x.
  Tensor mask = Tensor::empty(t.shape(), t.dtype());
  if (p == 1.0) {
    k::fill_(mask, 0.0);
  } else {
    // bernoulli_(1 - p) scaled by 1 / (1 - p), in one pass.
    k::dropout_mask_(mask, p, gen ? *gen : default_generator());
  }
  Tensor y = k::binary(k::Binary::mul, t, mask);
  return autograd::record("dropout", y, {t}, [mask](const Tensor& g, autograd::Grads& gi) {
    gi.set(0, k::binary(k::Binary::mul, g, mask));
  });
}

}  // namespace heed
