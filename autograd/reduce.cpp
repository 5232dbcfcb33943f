// autograd/reduce.cpp: sum, mean, max over dims. Backward broadcasts the
// gradient back over the reduced dims as a stride-0 view (no copy).
#include "autograd/ops.h"
#include "core/error.h"
#include "core/kernels.h"

namespace heed {

using autograd::Grads;
namespace k = kernel;

namespace {
// g (reduced, keepdim or not) viewed with the reduced dims as size 1.
Tensor keepdim_view(const Tensor& g, const Shape& in, const std::vector<int64_t>& dims) {
  Shape s = in;
  if (dims.empty() || in.empty()) {  // all dims, or a scalar (whose dims 0 and -1 are no dim at all)
    for (auto& d : s) d = 1;
  } else {
    for (int64_t d : dims) s[normalize_dim(d, static_cast<int64_t>(in.size()), "reduce")] = 1;
  }
  return k::reshape(g, s);
}
int64_t reduced_count(const Shape& in, const std::vector<int64_t>& dims) {
  if (dims.empty() || in.empty()) return shape_numel(in);
  int64_t n = 1;
  std::vector<bool> seen(in.size(), false);
  for (int64_t d : dims) {
    int64_t nd = normalize_dim(d, static_cast<int64_t>(in.size()), "reduce");
    if (!seen[nd]) n *= in[nd];
    seen[nd] = true;
  }
  return n;
}
}  // namespace

Tensor sum(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor y = k::sum(t, dims, keepdim);
  return autograd::record("sum", y, {t}, [s = t.shape(), dims](const Tensor& g, Grads& gi) {
    gi.set(0, k::expand(keepdim_view(g, s, dims), s));
  });
}

Tensor mean(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor y = k::mean(t, dims, keepdim);
  return autograd::record("mean", y, {t}, [s = t.shape(), dims](const Tensor& g, Grads& gi) {
    double n = static_cast<double>(reduced_count(s, dims));
    gi.set(0, k::expand(k::binary_scalar(k::Binary::mul, keepdim_view(g, s, dims), 1.0 / n), s));
  });
}

Tensor max(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor y = k::amax(t, dims, keepdim);
  return autograd::record("max", y, {t},
                          [xs = autograd::saved(t), ys = autograd::saved(y), dims](const Tensor& g, Grads& gi) {
                            const Shape& s = xs.shape();
                            // Ties share the gradient equally (like torch.amax).
                            Tensor hit = k::binary(k::Binary::eq, xs, keepdim_view(ys, s, dims));
                            Tensor count = k::sum(hit, dims, true);
                            Tensor share = k::binary(k::Binary::div, keepdim_view(g, s, dims), count);
                            gi.set(0, k::binary(k::Binary::mul, hit, share));
                          });
}

}  // namespace heed
