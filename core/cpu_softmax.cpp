// core/cpu_softmax.cpp: softmax and log-softmax over one dim, forward and
// backward. oneDNN 2.6's softmax backward is a reference loop ~10x slower than
// its forward on this class of machine, so both directions are written here.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/error.h"
#include "core/fast_math.h"
#include "core/iter.h"
#include "core/kernels.h"
#include "core/lanes.h"

namespace heed::kernel {
namespace {

// A contiguous tensor seen as [outer, n, inner] around `dim`.
struct Lanes {
  int64_t outer = 1, n = 1, inner = 1;
};

Lanes lanes(const Tensor& t, int64_t dim) {
  Lanes l;
  for (int64_t d = 0; d < dim; ++d) l.outer *= t.size(d);
  l.n = t.size(dim);
  for (int64_t d = dim + 1; d < t.dim(); ++d) l.inner *= t.size(d);
  return l;
}

// Calls f(base pointer offset, stride) for every lane of length n.
template <class F>
void for_lanes(const Lanes& l, F&& f) {
  const int64_t count = l.outer * l.inner;
#pragma omp parallel for schedule(static) if (count * l.n > kParallelGrain && count > 1)
  for (int64_t i = 0; i < count; ++i) {
    int64_t o = i / l.inner, in = i % l.inner;
    f(o * l.n * l.inner + in, l.inner);
  }
}

template <class T, bool LOG>
void softmax_lane(const T* x, T* y, int64_t n, int64_t s) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t k = 0; k < n; ++k) m = std::max(m, x[k * s]);
  // A lane that is entirely -inf (fully masked) has no valid distribution;
  // give NaN like PyTorch rather than inventing one.
  double z = 0;
  for (int64_t k = 0; k < n; ++k) {
    T e = std::exp(x[k * s] - m);
    if (!LOG) y[k * s] = e;
    z += e;
  }
  if (LOG) {
    // (x - m) - log z, not x - (m + log z): with logits ~1000 in float32 the
    // sum m + log z keeps only ~1e-4 of log z.
    T lz = static_cast<T>(std::log(z));
    for (int64_t k = 0; k < n; ++k) y[k * s] = (x[k * s] - m) - lz;
  } else {
    T inv = static_cast<T>(1.0 / z);
    for (int64_t k = 0; k < n; ++k) y[k * s] *= inv;
  }
}

// float32 rows of unit stride, the usual case (attention maps, logits): the
// maximum and the sum of exponentials in 16 partials each (lanes.h), combined
// in a fixed tree, and fast::exp_softmax (the arguments are never above 0),
// so the loops vectorise; std::exp and one running sum kept them scalar, at
// 4.3 ns a value. The same bits for any thread count and either instruction
// set: each value's operations and the order of the additions are fixed by
// its position in the row alone.
template <bool LOG>
void softmax_row_f32(const float* x, float* y, int64_t n) {
  float m16[kLanes];
  for (int l = 0; l < kLanes; ++l) m16[l] = -std::numeric_limits<float>::infinity();
  int64_t k = 0;
  for (; k + kLanes <= n; k += kLanes)
    for (int l = 0; l < kLanes; ++l) m16[l] = std::max(m16[l], x[k + l]);
  for (int l = 0; k + l < n; ++l) m16[l] = std::max(m16[l], x[k + l]);
  float m = m16[0];
  for (int l = 1; l < kLanes; ++l) m = std::max(m, m16[l]);  // max: any order gives the same
  // A lane that is entirely -inf (fully masked) has no valid distribution:
  // -inf - -inf is NaN, as PyTorch gives.
  float z16[kLanes] = {};
  for (k = 0; k + kLanes <= n; k += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float e = fast::exp_softmax(x[k + l] - m);
      if (!LOG) y[k + l] = e;
      z16[l] += e;
    }
  for (int l = 0; k + l < n; ++l) {
    const float e = fast::exp_softmax(x[k + l] - m);
    if (!LOG) y[k + l] = e;
    z16[l] += e;
  }
  const float z = lanes_sum(z16);
  if (LOG) {
    const float lz = std::log(z);  // (x - m) - log z: see softmax_lane
    for (k = 0; k < n; ++k) y[k] = (x[k] - m) - lz;
  } else {
    const float inv = 1.0f / z;
    for (k = 0; k < n; ++k) y[k] *= inv;
  }
}

template <bool LOG>
Tensor softmax_fwd(const Tensor& x0, int64_t dim, const char* op) {
  check_defined(x0, op);
  dim = normalize_dim(dim, x0.dim(), op);
  Tensor x = contiguous(x0);
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  if (x.numel() == 0) return y;
  if (x.dim() == 0) {
    fill_(y, LOG ? 0.0 : 1.0);
    return y;
  }
  Lanes l = lanes(x, dim);
  HEED_DISPATCH_FLOAT(x.dtype(), op, {
    const T* px = x.data<T>();
    T* py = y.data<T>();
    if constexpr (std::is_same_v<T, float>) {
      if (l.inner == 1) {
        for_lanes(l, [&](int64_t off, int64_t) { softmax_row_f32<LOG>(px + off, py + off, l.n); });
        return y;
      }
    }
    for_lanes(l, [&](int64_t off, int64_t s) { softmax_lane<T, LOG>(px + off, py + off, l.n, s); });
  });
  return y;
}

template <bool LOG>
Tensor softmax_bwd(const Tensor& y0, const Tensor& g0, int64_t dim, const char* op) {
  check_defined(y0, op);
  check_defined(g0, op);
  if (y0.shape() != g0.shape())
    fail("{}: gradient shape {} does not match output shape {}", op, shape_str(g0.shape()), shape_str(y0.shape()));
  dim = normalize_dim(dim, y0.dim(), op);
  Tensor y = contiguous(y0), g = contiguous(g0);
  Tensor dx = Tensor::empty(y.shape(), y.dtype());
  if (y.numel() == 0) return dx;
  if (y.dim() == 0) {
    fill_(dx, 0.0);
    return dx;
  }
  Lanes l = lanes(y, dim);
  HEED_DISPATCH_FLOAT(y.dtype(), op, {
    const T* py = y.data<T>();
    const T* pg = g.data<T>();
    T* pd = dx.data<T>();
    for_lanes(l, [&](int64_t off, int64_t s) {
      const T* yy = py + off;
      const T* gg = pg + off;
      T* dd = pd + off;
      double acc = 0;
      if (s == 1) {  // unit stride: 16 partial sums (lanes.h), so the loop vectorises
        double a16[kLanes] = {};
        int64_t k = 0;
        for (; k + kLanes <= l.n; k += kLanes)
          for (int j = 0; j < kLanes; ++j)
            a16[j] += LOG ? static_cast<double>(gg[k + j]) : static_cast<double>(gg[k + j]) * yy[k + j];
        for (int j = 0; k + j < l.n; ++j)
          a16[j] += LOG ? static_cast<double>(gg[k + j]) : static_cast<double>(gg[k + j]) * yy[k + j];
        acc = lanes_sum(a16);
        if (LOG) {
          for (k = 0; k < l.n; ++k) dd[k] = gg[k] - fast::exp_softmax(yy[k]) * static_cast<T>(acc);
        } else {
          for (k = 0; k < l.n; ++k) dd[k] = yy[k] * (gg[k] - static_cast<T>(acc));
        }
        return;
      }
      if (LOG) {
        for (int64_t k = 0; k < l.n; ++k) acc += gg[k * s];
        for (int64_t k = 0; k < l.n; ++k) dd[k * s] = gg[k * s] - std::exp(yy[k * s]) * static_cast<T>(acc);
      } else {
        for (int64_t k = 0; k < l.n; ++k) acc += static_cast<double>(gg[k * s]) * yy[k * s];
        for (int64_t k = 0; k < l.n; ++k) dd[k * s] = yy[k * s] * (gg[k * s] - static_cast<T>(acc));
      }
    });
  });
  return dx;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_fwd<false>(x, dim, "softmax"); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_fwd<true>(x, dim, "log_softmax"); }
Tensor softmax_backward(const Tensor& y, const Tensor& g, int64_t dim) {
  return softmax_bwd<false>(y, g, dim, "softmax backward");
}
Tensor log_softmax_backward(const Tensor& y, const Tensor& g, int64_t dim) {
  return softmax_bwd<true>(y, g, dim, "log_softmax backward");
}

}  // namespace heed::kernel
