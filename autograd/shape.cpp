// autograd/shape.cpp: views and the ops that glue or cut tensors. Forward
// results share storage with the input wherever strides allow.
#include <numeric>

#include "autograd/ops.h"
#include "core/error.h"
#include "core/kernels.h"

namespace heed {

using autograd::Grads;
using autograd::record;
namespace k = kernel;

Tensor reshape(const Tensor& t, const Shape& shape) {
  Tensor y = k::reshape(t, shape);
  return record("reshape", y, {t}, [s = t.shape()](const Tensor& g, Grads& gi) { gi.set(0, k::reshape(g, s)); });
}

Tensor view(const Tensor& t, const Shape& shape) {
  Tensor y = k::view(t, shape);
  return record("view", y, {t}, [s = t.shape()](const Tensor& g, Grads& gi) { gi.set(0, k::reshape(g, s)); });
}

Tensor flatten(const Tensor& t, int64_t start_dim, int64_t end_dim) {
  check_defined(t, "flatten");
  if (t.dim() == 0) return reshape(t, {1});
  int64_t s = normalize_dim(start_dim, t.dim(), "flatten"), e = normalize_dim(end_dim, t.dim(), "flatten");
  if (s > e) fail("flatten: start_dim {} comes after end_dim {}", start_dim, end_dim);
  Shape out(t.shape().begin(), t.shape().begin() + s);
  int64_t m = 1;
  for (int64_t d = s; d <= e; ++d) m *= t.size(d);
  out.push_back(m);
  out.insert(out.end(), t.shape().begin() + e + 1, t.shape().end());
  return reshape(t, out);
}

Tensor permute(const Tensor& t, const std::vector<int64_t>& dims) {
  Tensor y = k::permute(t, dims);
  std::vector<int64_t> inv(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inv[normalize_dim(dims[i], t.dim(), "permute")] = static_cast<int64_t>(i);
  return record("permute", y, {t}, [inv](const Tensor& g, Grads& gi) { gi.set(0, k::permute(g, inv)); });
}

Tensor transpose(const Tensor& t, int64_t d0, int64_t d1) {
  Tensor y = k::transpose(t, d0, d1);
  return record("transpose", y, {t}, [d0, d1](const Tensor& g, Grads& gi) { gi.set(0, k::transpose(g, d0, d1)); });
}

Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  Tensor y = k::narrow(t, dim, start, length);
  dim = normalize_dim(dim, t.dim(), "narrow");
  if (start < 0) start += t.size(dim);
  return record("narrow", y, {t}, [s = t.shape(), dim, start, length](const Tensor& g, Grads& gi) {
    Tensor gx = Tensor::zeros(s, g.dtype());
    k::copy_(k::narrow(gx, dim, start, length), g);
    gi.set(0, gx);
  });
}

Tensor expand(const Tensor& t, const Shape& shape) {
  Tensor y = k::expand(t, shape);
  return record("expand", y, {t}, [s = t.shape()](const Tensor& g, Grads& gi) { gi.set(0, k::sum_to(g, s)); });
}

Tensor unsqueeze(const Tensor& t, int64_t dim) {
  Tensor y = k::unsqueeze(t, dim);
  return record("unsqueeze", y, {t}, [s = t.shape()](const Tensor& g, Grads& gi) { gi.set(0, k::reshape(g, s)); });
}

Tensor squeeze(const Tensor& t, int64_t dim) {
  Tensor y = k::squeeze(t, dim);
  return record("squeeze", y, {t}, [s = t.shape()](const Tensor& g, Grads& gi) { gi.set(0, k::reshape(g, s)); });
}

Tensor contiguous(const Tensor& t) {
  Tensor y = k::contiguous(t);
  if (y.same(t)) return t;  // already contiguous: no node, no copy
  return record("contiguous", y, {t}, [](const Tensor& g, Grads& gi) { gi.set(0, g); });
}

Tensor clone(const Tensor& t) {
  return record("clone", k::clone(t), {t}, [](const Tensor& g, Grads& gi) { gi.set(0, g); });
}

Tensor concat(const std::vector<Tensor>& ts, int64_t dim) {
  Tensor y = k::concat(ts, dim);
  dim = normalize_dim(dim, ts[0].dim(), "concat");
  std::vector<int64_t> sizes;
  for (const Tensor& t : ts) sizes.push_back(t.size(dim));
  return record("concat", y, ts, [sizes, dim](const Tensor& g, Grads& gi) {
    int64_t at = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (gi.needs(i)) gi.set(i, k::narrow(g, dim, at, sizes[i]));
      at += sizes[i];
    }
  });
}

std::vector<Tensor> split(const Tensor& t, const std::vector<int64_t>& sizes, int64_t dim) {
  check_defined(t, "split");
  dim = normalize_dim(dim, t.dim(), "split");
  int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  if (total != t.size(dim))
    fail("split: sizes {} sum to {}, expected the size {} of dim {} (shape {})", shape_str(sizes), total, t.size(dim),
         dim, shape_str(t.shape()));
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    if (s < 0) fail("split: negative size {} in {}", s, shape_str(sizes));
    out.push_back(narrow(t, dim, at, s));
    at += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& t, int64_t size, int64_t dim) {
  check_defined(t, "split");
  if (size <= 0) fail("split: size must be positive, got {}", size);
  int64_t n = t.size(dim);
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < n; at += size) sizes.push_back(std::min(size, n - at));
  return split(t, sizes, dim);
}

}  // namespace heed
