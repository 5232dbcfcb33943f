// autograd/index.cpp: gathers along a dim; the backward scatter-adds, so rows
// picked more than once (a token seen twice) get the sum of their gradients.
#include "autograd/ops.h"
#include "core/error.h"
#include "core/kernels.h"

namespace heed {

namespace k = kernel;

Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index) {
  Tensor y = k::index_select(t, dim, index);
  dim = normalize_dim(dim, t.dim(), "index_select");
  return autograd::record("index_select", y, {t},
                          [s = t.shape(), dim, idx = autograd::saved(index)](const Tensor& g, autograd::Grads& gi) {
                            Tensor gx = Tensor::zeros(s, g.dtype());
                            k::index_add_(gx, dim, idx, g);
                            gi.set(0, gx);
                          });
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  check_defined(weight, "embedding");
  check_defined(ids, "embedding");
  if (weight.dim() != 2) fail("embedding: expected a weight of shape [V, D], got {}", shape_str(weight.shape()));
  check_dtype(ids, DType::i64, "embedding ids");
  Shape out = ids.shape();
  out.push_back(weight.size(1));
  return reshape(index_select(weight, 0, k::reshape(ids, {-1})), out);
}

}  // namespace heed
