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
  // index is an input without a gradient, listed so that its saved version is kept.
  return autograd::record("index_select", y, {t, index},
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
  // Checked here too so that a bad id is reported as the user's call, with
  // the table's size, rather than as the index_select it becomes.
  const Tensor flat = k::contiguous(ids);
  const int64_t* p = flat.data<int64_t>();
  const int64_t V = weight.size(0);
  for (int64_t i = 0; i < flat.numel(); ++i)
    if (p[i] < 0 || p[i] >= V)
      fail("embedding: id {} at position {} out of range for a table of {} rows (expected 0..{})", p[i], i, V, V - 1);
  Shape out = ids.shape();
  out.push_back(weight.size(1));
  return reshape(index_select(weight, 0, k::reshape(ids, {-1})), out);
}

}  // namespace heed
