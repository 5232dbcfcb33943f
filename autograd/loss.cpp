// autograd/loss.cpp: fused cross-entropy from logits, and mean squared error.
#include "autograd/ops.h"
#include "core/error.h"
#include "core/kernels.h"

namespace heed {

namespace k = kernel;

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  check_defined(logits, "cross_entropy");
  check_defined(targets, "cross_entropy");
  if (logits.dim() < 1) fail("cross_entropy: expected logits of shape [.., V], got {}", shape_str(logits.shape()));
  Shape lead(logits.shape().begin(), logits.shape().end() - 1);
  if (targets.shape() != lead)
    fail("cross_entropy: targets shape {} does not match logits shape {} (expected {})", shape_str(targets.shape()),
         shape_str(logits.shape()), shape_str(lead));
  const int64_t V = logits.size(-1);
  // Before the reshape to [-1, V], which cannot infer -1 for V = 0.
  if (V < 1)
    fail("cross_entropy: expected logits of shape [.., V] with V >= 1 classes, got {}", shape_str(logits.shape()));
  Tensor l2 = k::reshape(logits, {-1, V}), t2 = k::reshape(targets, {-1});
  k::CrossEntropyResult r = k::cross_entropy(l2, t2, ignore_index);
  return autograd::record(
      "cross_entropy", r.loss, {logits, targets},  // targets: no gradient, their version kept
      [ls = autograd::saved(l2), ts = autograd::saved(t2), fw = r.saved, s = logits.shape()](const Tensor& g, autograd::Grads& gi) {
        Tensor d = k::cross_entropy_backward(ls, ts, fw, g.item());
        gi.set(0, k::reshape(d, s));
      });
}

Tensor mse_loss(const Tensor& a, const Tensor& b) {
  check_defined(a, "mse_loss");
  check_defined(b, "mse_loss");
  if (a.shape() != b.shape())
    fail("mse_loss: input shape {} and target shape {} differ (expected equal shapes)", shape_str(a.shape()),
         shape_str(b.shape()));
  if (a.dtype() != b.dtype())
    fail("mse_loss: input {} {} and target {} {} differ in dtype (expected one dtype)", dtype_name(a.dtype()),
         shape_str(a.shape()), dtype_name(b.dtype()), shape_str(b.shape()));
  Tensor d = k::binary(k::Binary::sub, a, b);
  Tensor y = k::mean(k::unary(k::Unary::square, d), {});
  // dL/da = 2 (a - b) / n * g; dL/db = -dL/da
  return autograd::record("mse_loss", y, {a, b}, [ds = d](const Tensor& g, autograd::Grads& gi) {
    double n = static_cast<double>(ds.numel());
    Tensor ga = k::binary_scalar(k::Binary::mul, ds, 2.0 * g.item() / n);
    if (gi.needs(0)) gi.set(0, ga);
    if (gi.needs(1)) gi.set(1, k::unary(k::Unary::neg, ga));
  });
}

}  // namespace heed
