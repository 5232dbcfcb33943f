// core/cpu_views.cpp: views that share storage (reshape, permute, narrow,
// expand, ...) and the copies they sometimes need.
#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/iter.h"
#include "core/kernels.h"

namespace heed::kernel {

Shape infer_shape(const Shape& shape, int64_t numel, const char* op) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0) fail("{}: only one dimension can be -1, got shape {}", op, shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else if (out[i] < 0) {
      fail("{}: invalid size {} in shape {}", op, out[i], shape_str(shape));
    } else {
      known *= out[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      fail("{}: shape {} is invalid for a tensor of {} elements", op, shape_str(shape), numel);
    out[infer] = numel / known;
  } else if (known != numel) {
    fail("{}: shape {} is invalid for a tensor of {} elements", op, shape_str(shape), numel);
  }
  return out;
}

// Strides for viewing (shape, strides) as new_shape without a copy, or an
// empty optional when the memory layout does not allow it. Follows the
// algorithm of PyTorch's computeStride: walk the old dims in chunks that are
// contiguous among themselves and map each chunk onto new dims.
static bool view_strides(const Shape& shape, const Shape& strides, const Shape& new_shape, Shape& out) {
  int64_t numel = shape_numel(shape);
  out.assign(new_shape.size(), 0);
  if (numel == 0) {
    out = contiguous_strides(new_shape);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(new_shape.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= shape[d];
    if (d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

Tensor view(const Tensor& t, const Shape& shape) {
  check_defined(t, "view");
  Shape s = infer_shape(shape, t.numel(), "view");
  Shape st;
  if (!view_strides(t.shape(), t.strides(), s, st))
    fail("view: cannot view a tensor of shape {} with strides {} as shape {} without a copy (use reshape)",
         shape_str(t.shape()), shape_str(t.strides()), shape_str(s));
  return Tensor::view_of(t, s, st, t.offset());
}

Tensor reshape(const Tensor& t, const Shape& shape) {
  check_defined(t, "reshape");
  Shape s = infer_shape(shape, t.numel(), "reshape");
  Shape st;
  if (view_strides(t.shape(), t.strides(), s, st)) return Tensor::view_of(t, s, st, t.offset());
  Tensor c = clone(t);
  return Tensor::view_of(c, s, contiguous_strides(s), 0);
}

Tensor permute(const Tensor& t, const std::vector<int64_t>& dims) {
  check_defined(t, "permute");
  int64_t r = t.dim();
  if (static_cast<int64_t>(dims.size()) != r)
    fail("permute: got {} dims {} for a tensor of rank {}", dims.size(), shape_str(dims), r);
  std::vector<bool> seen(r, false);
  Shape s(r), st(r);
  for (int64_t i = 0; i < r; ++i) {
    int64_t d = normalize_dim(dims[i], r, "permute");
    if (seen[d]) fail("permute: dim {} repeated in {}", d, shape_str(dims));
    seen[d] = true;
    s[i] = t.shape()[d];
    st[i] = t.strides()[d];
  }
  return Tensor::view_of(t, s, st, t.offset());
}

Tensor transpose(const Tensor& t, int64_t d0, int64_t d1) {
  check_defined(t, "transpose");
  int64_t r = t.dim();
  d0 = normalize_dim(d0, r, "transpose");
  d1 = normalize_dim(d1, r, "transpose");
  if (r == 0) return Tensor::view_of(t, {}, {}, t.offset());  // a scalar's only "dim" swapped with itself
  Shape s = t.shape(), st = t.strides();
  std::swap(s[d0], s[d1]);
  std::swap(st[d0], st[d1]);
  return Tensor::view_of(t, s, st, t.offset());
}

Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  check_has_dims(t, "narrow");
  dim = normalize_dim(dim, t.dim(), "narrow");
  int64_t n = t.shape()[dim];
  const int64_t given = start;
  if (start < 0) start += n;
  if (start < 0 || length < 0 || start + length > n)
    fail("narrow: start {} and length {} out of range for dim {} of size {} (expected a slice within [0, {}] "
         "with length >= 0; a negative start counts from the end)",
         given, length, dim, n, n);
  Shape s = t.shape();
  s[dim] = length;
  return Tensor::view_of(t, s, t.strides(), t.offset() + start * t.strides()[dim]);
}

Tensor expand(const Tensor& t, const Shape& shape) {
  check_defined(t, "expand");
  if (shape.size() < t.shape().size())
    fail("expand: cannot expand shape {} to fewer dims {}", shape_str(t.shape()), shape_str(shape));
  Shape s = shape, st(shape.size(), 0);
  size_t off = shape.size() - t.shape().size();
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < off) {
      if (s[i] < 0) fail("expand: size -1 not allowed in new leading dim, shape {}", shape_str(shape));
      continue;
    }
    int64_t have = t.shape()[i - off];
    if (s[i] == -1) s[i] = have;
    if (have == s[i]) {
      st[i] = t.strides()[i - off];
    } else if (have == 1) {
      st[i] = 0;
    } else {
      fail("expand: cannot expand shape {} to {} (dim {} has size {}, expected 1 or {})", shape_str(t.shape()),
           shape_str(shape), i, have, s[i]);
    }
  }
  return Tensor::view_of(t, s, st, t.offset());
}

Tensor unsqueeze(const Tensor& t, int64_t dim) {
  check_defined(t, "unsqueeze");
  dim = normalize_dim(dim, t.dim() + 1, "unsqueeze");
  Shape s = t.shape(), st = t.strides();
  int64_t stride = dim < t.dim() ? t.strides()[dim] * t.shape()[dim] : 1;
  s.insert(s.begin() + dim, 1);
  st.insert(st.begin() + dim, stride);
  return Tensor::view_of(t, s, st, t.offset());
}

Tensor squeeze(const Tensor& t, int64_t dim) {
  check_defined(t, "squeeze");
  dim = normalize_dim(dim, t.dim(), "squeeze");
  if (t.dim() == 0) return Tensor::view_of(t, {}, {}, t.offset());  // nothing to squeeze, like PyTorch
  if (t.shape()[dim] != 1)
    fail("squeeze: dim {} has size {}, expected 1 (shape {})", dim, t.shape()[dim], shape_str(t.shape()));
  Shape s = t.shape(), st = t.strides();
  s.erase(s.begin() + dim);
  st.erase(st.begin() + dim);
  return Tensor::view_of(t, s, st, t.offset());
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      fail("{}: shapes {} and {} do not broadcast (dim {}: {} vs {})", op, shape_str(a), shape_str(b), i, da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// ---- copies ----
template <class D, class S>
static void copy_loop(const Tensor& dst, const Tensor& src) {
  // A transposed matrix into a row-major one (e.g. a weight gradient made as
  // its transpose): 32 x 32 tiles, each read down the source's unit-stride
  // columns while its destination rows stay in cache. Element by element,
  // every destination row touched the source once per cache line it spans.
  if (dst.dim() == 2 && src.shape() == dst.shape() && dst.stride(1) == 1 && src.stride(0) == 1 &&
      src.stride(1) >= dst.size(0) && dst.size(0) >= 32 && dst.size(1) >= 32) {
    const int64_t R = dst.size(0), C = dst.size(1), ds = dst.stride(0), ss = src.stride(1);
    constexpr int64_t kTile = 32;
    D* d = dst.data<D>();
    const S* s = src.data<S>();
    const int64_t row_tiles = (R + kTile - 1) / kTile;
#pragma omp parallel for schedule(static) if (R * C > kParallelGrain)
    for (int64_t bi = 0; bi < row_tiles; ++bi) {
      const int64_t r0 = bi * kTile, r1 = std::min(R, r0 + kTile);
      for (int64_t c0 = 0; c0 < C; c0 += kTile) {
        const int64_t c1 = std::min(C, c0 + kTile);
        for (int64_t c = c0; c < c1; ++c)
          for (int64_t r = r0; r < r1; ++r) d[r * ds + c] = static_cast<D>(s[r + c * ss]);
      }
    }
    return;
  }
  Shape sst = detail::broadcast_strides(src, dst.shape());
  auto it = detail::make_iter<2>(dst.shape(), {&dst.strides(), &sst});
  D* d = dst.data<D>();
  const S* s = src.data<S>();
  detail::run(it, [&](const int64_t* off, int64_t n, const int64_t* st) {
    D* dp = d + off[0];
    const S* sp = s + off[1];
    if (st[0] == 1 && st[1] == 1) {
      for (int64_t i = 0; i < n; ++i) dp[i] = static_cast<D>(sp[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) dp[i * st[0]] = static_cast<D>(sp[i * st[1]]);
    }
  });
}

void copy_(const Tensor& dst, const Tensor& src) {
  check_defined(dst, "copy_");
  check_defined(src, "copy_");
  Shape b = broadcast_shapes(dst.shape(), src.shape(), "copy_");
  if (b != dst.shape())
    fail("copy_: source shape {} does not broadcast to destination shape {}", shape_str(src.shape()),
         shape_str(dst.shape()));
  if (dst.numel() == 0) return;
  dst.bump_version();
  switch (dst.dtype()) {
    case DType::f32: HEED_DISPATCH_ALL(src.dtype(), "copy_", copy_loop<float, T>(dst, src)); break;
    case DType::f64: HEED_DISPATCH_ALL(src.dtype(), "copy_", copy_loop<double, T>(dst, src)); break;
    case DType::i64: HEED_DISPATCH_ALL(src.dtype(), "copy_", copy_loop<int64_t, T>(dst, src)); break;
  }
}

Tensor contiguous(const Tensor& t) {
  check_defined(t, "contiguous");
  if (t.is_contiguous()) return t;
  return clone(t);
}

Tensor empty_like_dense(const Tensor& t, DType dtype) {
  check_defined(t, "empty_like_dense");
  const int64_t nd = t.dim();
  if (t.is_contiguous() || t.numel() == 0) return Tensor::empty(t.shape(), dtype);
  // Dims by decreasing stride (size-1 dims last: their stride means nothing);
  // dense when each stride is the product of the sizes inside it.
  std::vector<int64_t> order(static_cast<size_t>(nd));
  for (int64_t d = 0; d < nd; ++d) order[static_cast<size_t>(d)] = d;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const bool a1 = t.size(a) == 1, b1 = t.size(b) == 1;
    if (a1 != b1) return b1;
    return t.stride(a) > t.stride(b);
  });
  int64_t expect = 1;
  for (int64_t i = nd - 1; i >= 0; --i) {
    const int64_t d = order[static_cast<size_t>(i)];
    if (t.size(d) == 1) continue;
    if (t.stride(d) != expect) return Tensor::empty(t.shape(), dtype);
    expect *= t.size(d);
  }
  Shape physical(static_cast<size_t>(nd));
  for (int64_t i = 0; i < nd; ++i) physical[static_cast<size_t>(i)] = t.size(order[static_cast<size_t>(i)]);
  std::vector<int64_t> inverse(static_cast<size_t>(nd));
  for (int64_t i = 0; i < nd; ++i) inverse[static_cast<size_t>(order[static_cast<size_t>(i)])] = i;
  return permute(Tensor::empty(physical, dtype), inverse);
}

Tensor clone(const Tensor& t) {
  check_defined(t, "clone");
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  copy_(out, t);
  return out;
}

Tensor to_dtype(const Tensor& t, DType dtype) {
  check_defined(t, "to_dtype");
  if (t.dtype() == dtype) return t;
  Tensor out = Tensor::empty(t.shape(), dtype);
  copy_(out, t);
  return out;
}

void fill_(const Tensor& t, double value) {
  check_defined(t, "fill_");
  // An int64 tensor takes the value truncated toward zero, where that is one.
  if (t.dtype() == DType::i64 && !(value > -9223372036854775808.0 && value < 9223372036854775808.0))
    fail("fill_: {} is not an int64 value (the tensor of shape {} is int64)", value, shape_str(t.shape()));
  if (t.numel() == 0) return;
  t.bump_version();
  auto it = detail::make_iter<1>(t.shape(), {&t.strides()});
  HEED_DISPATCH_ALL(t.dtype(), "fill_", {
    T* p = t.data<T>();
    T v = static_cast<T>(value);
    detail::run(it, [&](const int64_t* off, int64_t n, const int64_t* st) {
      for (int64_t i = 0; i < n; ++i) p[off[0] + i * st[0]] = v;
    });
  });
}

}  // namespace heed::kernel
