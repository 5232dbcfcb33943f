// core/cpu_layernorm.cpp: layer normalisation over the last dim, forward
// and backward, as direct loops.
//
//   mean = sum_d x[r, d] / D,   var = sum_d (x[r, d] - mean)^2 / D
//   xhat = (x - mean) * rstd,   rstd = 1 / sqrt(var + eps)
//   y    = xhat * w + b
// Backward (as in llm.c's layernorm_backward), with dn = gy * w:
//   gx = rstd * (dn - mean_d(dn) - xhat * mean_d(dn * xhat))
//   gw = sum_r gy * xhat,   gb = sum_r gy
// Row sums are kept in 16 lanes (core/lanes.h). Both directions used
// oneDNN 2.6's primitives once; these loops run as fast forward (17.8 against
// 18.9 us for GPT-128's [768, 128], 99 against 101 us for GPT-256's [3072,
// 256]; heed bench --micro) and ~3x faster backward, open no parallel region
// for small inputs (oneDNN's forward split even a sampler's one row), and
// their fixed row blocks keep the weight gradients deterministic.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/kernels.h"
#include "core/lanes.h"

namespace heed::kernel {
namespace {

void check_ln(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  check_defined(x, "layer_norm");
  check_defined(w, "layer_norm");
  check_defined(b, "layer_norm");
  if (x.dim() < 1 || x.size(-1) < 1)
    fail("layer_norm: expected input [.., D] with D >= 1, got {}", shape_str(x.shape()));
  const int64_t D = x.size(-1);
  if (w.shape() != Shape{D} || b.shape() != Shape{D})
    fail("layer_norm: input {} needs weight and bias of shape [{}], got {} and {}", shape_str(x.shape()), D,
         shape_str(w.shape()), shape_str(b.shape()));
  if (!x.is_floating() || w.dtype() != x.dtype() || b.dtype() != x.dtype())
    fail("layer_norm: dtypes must be one floating type, got input {}, weight {}, bias {}", dtype_name(x.dtype()),
         dtype_name(w.dtype()), dtype_name(b.dtype()));
  if (!(eps > 0)) fail("layer_norm: expected eps > 0, got {}", eps);
}

// ---- direct loops: one row per iteration, each row by one thread ----
// float32 rows run on 16-float vectors (GCC's vector extension, so the same
// lanes on AVX2 and AVX-512), lane l holding partial sum l and lanes_sum's
// tree done in registers, the forward two rows at a time; their pointers are
// restrict (an output row never overlaps the inputs: a fresh tensor, or a
// thread's row buffer). The loops written per element had the compiler
// re-check overlaps every row, keep the partial sums in memory and add them
// up one scalar at a time. Same arithmetic in the same order (the outputs'
// bits unchanged); GPT-128's [768, 128], median us, old -> new, 2 threads:
// forward 15.4 -> 13.7, backward 28.5 -> 16.3, backward adding into a
// gradient sum 30.8 -> 19.2 (one thread: 29.5 -> 26.1, 53 -> 28, 61 -> 38).
template <class T>
struct RowStats {
  T mean, var;
};
template <class T>
RowStats<T> forward_row(const T* __restrict xr, const T* __restrict w, const T* __restrict b, T* __restrict yr,
                        int64_t D, double eps) {
  // Two passes (mean, then squared deviations): no cancellation for rows
  // with a large mean, unlike E[x^2] - E[x]^2. Each sum in kLanes partial
  // results (core/lanes.h): they vectorise, in a fixed order. The mean is
  // summed shifted by the row's first element, m = x0 + sum_d (x - x0) / D:
  // summed as is, a row of a large value c rounds each partial at c's scale,
  // and that error e (0.001 for 12345.678 over 1000 floats) came back as
  // x - m = e and var = e^2, so a constant row normalised to e / sqrt(e^2 +
  // eps), 0.88, not 0. Shifted, a constant row's mean is x0 exactly, and a
  // near-constant row's deviations are small and subtracted exactly: the
  // mean is off by its own rounding only.
  const T s = xr[0];
  T a[kLanes] = {};
  int64_t d0 = 0;
  for (; d0 + kLanes <= D; d0 += kLanes)
    for (int l = 0; l < kLanes; ++l) a[l] += xr[d0 + l] - s;
  for (int64_t d = d0; d < D; ++d) a[d - d0] += xr[d] - s;
  const T m = s + lanes_sum(a) / static_cast<T>(D);
  T q[kLanes] = {};
  for (d0 = 0; d0 + kLanes <= D; d0 += kLanes)
    for (int l = 0; l < kLanes; ++l) q[l] += (xr[d0 + l] - m) * (xr[d0 + l] - m);
  for (int64_t d = d0; d < D; ++d) q[d - d0] += (xr[d] - m) * (xr[d] - m);
  const T v = lanes_sum(q) / static_cast<T>(D);
  const T rstd = static_cast<T>(1.0 / std::sqrt(static_cast<double>(v) + eps));
  for (int64_t d = 0; d < D; ++d) yr[d] = (xr[d] - m) * rstd * w[d] + b[d];
  return {m, v};
}

// float: the same sums as forward_row, lane l of a 16-float vector holding
// partial l, two rows at a time (their chains overlap; one row at a time
// waited on each reduction in turn).
#pragma GCC diagnostic ignored "-Wpsabi"  // vectors by value: internal, inlined helpers only
#ifdef __AVX512F__
using F16 = float __attribute__((vector_size(64)));
inline void add_lane(F16& v, int64_t l, float x) { v[l] += x; }
#else
// Without AVX-512, GCC keeps a 64-byte vector type in memory, loading and
// spilling it around every operation (on a Zen 3 the forward ran at 5 cycles
// a value); two 8-float halves stay in registers. Same lanes, same sums.
using F8 = float __attribute__((vector_size(32)));
struct F16 {
  F8 lo, hi;
};
inline F16 operator+(const F16& a, const F16& b) { return {a.lo + b.lo, a.hi + b.hi}; }
inline F16 operator*(const F16& a, const F16& b) { return {a.lo * b.lo, a.hi * b.hi}; }
inline F16 operator-(const F16& a, float s) { return {a.lo - s, a.hi - s}; }
inline F16 operator*(const F16& a, float s) { return {a.lo * s, a.hi * s}; }
inline F16& operator+=(F16& a, const F16& b) { return a = a + b; }
inline void add_lane(F16& v, int64_t l, float x) {
  if (l < 8) v.lo[l] += x;
  else v.hi[l - 8] += x;
}
#endif
static_assert(sizeof(F16) == kLanes * sizeof(float));
inline F16 load16(const float* p) {
  F16 v;
#ifdef __AVX512F__
  std::memcpy(&v, p, sizeof v);
#else
  // Half by half: one memcpy of the pair GCC did in 16-byte pieces through
  // the stack.
  std::memcpy(&v.lo, p, sizeof v.lo);
  std::memcpy(&v.hi, p + 8, sizeof v.hi);
#endif
  return v;
}
inline void store16(float* p, const F16& v) {
#ifdef __AVX512F__
  std::memcpy(p, &v, sizeof v);
#else
  std::memcpy(p, &v.lo, sizeof v.lo);
  std::memcpy(p + 8, &v.hi, sizeof v.hi);
#endif
}

// Two rows at a time (their chains overlap; one row at a time waited on each
// reduction in turn). Each vector a named local, the tails added to the
// partials in memory: so GCC keeps the sums in registers (an array of them,
// indexed, it kept on the stack).
void forward_row_pair(const float* __restrict x0, const float* __restrict x1, const float* __restrict w,
                      const float* __restrict b, float* __restrict y0, float* __restrict y1, float* mean, float* var,
                      int64_t D, double eps) {
  // The mean shifted by each row's first element, as in forward_row.
  const float s0 = x0[0], s1 = x1[0];
  F16 a0 = {}, a1 = {};
  int64_t d0 = 0;
  for (; d0 + kLanes <= D; d0 += kLanes) {
    a0 += load16(x0 + d0) - s0;
    a1 += load16(x1 + d0) - s1;
  }
  float p0[kLanes], p1[kLanes];
  std::memcpy(p0, &a0, sizeof p0);
  std::memcpy(p1, &a1, sizeof p1);
  for (int64_t d = d0; d < D; ++d) {
    p0[d - d0] += x0[d] - s0;
    p1[d - d0] += x1[d] - s1;
  }
  const float m0 = s0 + lanes_sum(p0) / static_cast<float>(D), m1 = s1 + lanes_sum(p1) / static_cast<float>(D);
  F16 q0 = {}, q1 = {};
  for (d0 = 0; d0 + kLanes <= D; d0 += kLanes) {
    const F16 t0 = load16(x0 + d0) - m0, t1 = load16(x1 + d0) - m1;
    q0 += t0 * t0;
    q1 += t1 * t1;
  }
  std::memcpy(p0, &q0, sizeof p0);
  std::memcpy(p1, &q1, sizeof p1);
  for (int64_t d = d0; d < D; ++d) {
    p0[d - d0] += (x0[d] - m0) * (x0[d] - m0);
    p1[d - d0] += (x1[d] - m1) * (x1[d] - m1);
  }
  const float v0 = lanes_sum(p0) / static_cast<float>(D), v1 = lanes_sum(p1) / static_cast<float>(D);
  const float r0 = static_cast<float>(1.0 / std::sqrt(static_cast<double>(v0) + eps));
  const float r1 = static_cast<float>(1.0 / std::sqrt(static_cast<double>(v1) + eps));
  mean[0] = m0, var[0] = v0, mean[1] = m1, var[1] = v1;
  for (int64_t d = 0; d < D; ++d) {
    y0[d] = (x0[d] - m0) * r0 * w[d] + b[d];
    y1[d] = (x1[d] - m1) * r1 * w[d] + b[d];
  }
}

template <class T>
void loop_forward(const T* x, const T* w, const T* b, T* y, T* mean, T* var, int64_t R, int64_t D, double eps) {
  if constexpr (std::is_same_v<T, float>) {
    const int64_t pairs = (R + 1) / 2;
#pragma omp parallel for schedule(static) if (R * D > kParallelGrain)
    for (int64_t k = 0; k < pairs; ++k) {
      const int64_t r = 2 * k;
      if (r + 2 <= R) {
        forward_row_pair(x + r * D, x + (r + 1) * D, w, b, y + r * D, y + (r + 1) * D, mean + r, var + r, D, eps);
      } else {  // an odd count's last row, twice; the copy's results dropped
        std::vector<float> scratch(static_cast<size_t>(D));
        float mv[2], vv[2];
        forward_row_pair(x + r * D, x + r * D, w, b, y + r * D, scratch.data(), mv, vv, D, eps);
        mean[r] = mv[0], var[r] = vv[0];
      }
    }
  } else {
#pragma omp parallel for schedule(static) if (R * D > kParallelGrain)
    for (int64_t r = 0; r < R; ++r) {
      const RowStats<T> st = forward_row(x + r * D, w, b, y + r * D, D, eps);
      mean[r] = st.mean;
      var[r] = st.var;
    }
  }
}

// gw and gb sum over rows. To stay deterministic for any thread count, rows
// are summed in fixed blocks of kRowBlock into partials [blocks, D], which are
// then added in block order.
constexpr int64_t kRowBlock = 64;

// One row of the backward: its input gradient into gxr, its terms of the
// weight and bias gradients added to its block's partials pwb and pbb.
template <class T>
void backward_row(const T* __restrict xr, const T* __restrict gr, const T* __restrict w, T m, T rstd, int64_t D,
                  T* __restrict gxr, T* __restrict pwb, T* __restrict pbb) {
  // sum_d dn and sum_d dn * xhat, in kLanes partial sums (core/lanes.h):
  // they vectorise, and their fixed tree keeps the result deterministic.
  T a_dn[kLanes] = {}, a_dnx[kLanes] = {};
  int64_t d0 = 0;
  if constexpr (std::is_same_v<T, float>) {
    // Lane l of a 16-float vector holds partial l.
    F16 v_dn = {}, v_dnx = {};
    for (; d0 + kLanes <= D; d0 += kLanes) {
      const F16 g = load16(gr + d0), xhat = (load16(xr + d0) - m) * rstd, dn = g * load16(w + d0);
      v_dn += dn;
      v_dnx += dn * xhat;
      const F16 pw = load16(pwb + d0) + g * xhat, pb = load16(pbb + d0) + g;
      store16(pwb + d0, pw);
      store16(pbb + d0, pb);
    }
    std::memcpy(a_dn, &v_dn, sizeof a_dn);
    std::memcpy(a_dnx, &v_dnx, sizeof a_dnx);
  } else {
    for (; d0 + kLanes <= D; d0 += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        const int64_t d = d0 + l;
        const T xhat = (xr[d] - m) * rstd;
        const T dn = gr[d] * w[d];
        a_dn[l] += dn;
        a_dnx[l] += dn * xhat;
        pwb[d] += gr[d] * xhat;
        pbb[d] += gr[d];
      }
  }
  for (int64_t d = d0; d < D; ++d) {
    const T xhat = (xr[d] - m) * rstd;
    const T dn = gr[d] * w[d];
    a_dn[d - d0] += dn;
    a_dnx[d - d0] += dn * xhat;
    pwb[d] += gr[d] * xhat;
    pbb[d] += gr[d];
  }
  const T s_dn = lanes_sum(a_dn) / static_cast<T>(D), s_dnx = lanes_sum(a_dnx) / static_cast<T>(D);
  for (int64_t d = 0; d < D; ++d) {
    const T xhat = (xr[d] - m) * rstd;
    gxr[d] = rstd * (gr[d] * w[d] - s_dn - xhat * s_dnx);
  }
}

// gx: the input gradient, written; or, with add_into, a sum the input
// gradient is added into. Then a row's gradient is made in a row buffer first
// and added after: each element is sum + dx, rounded as a separate add would
// round it (written as one expression, the compiler could fuse rstd * (..) +
// sum into one FMA).
template <class T>
void loop_backward(const T* gy, const T* x, const T* w, const T* mean, const T* var, T* gx, T* gw, T* gb, int64_t R,
                   int64_t D, double eps, bool add_into = false) {
  const int64_t blocks = (R + kRowBlock - 1) / kRowBlock;
  std::vector<T> pw(static_cast<size_t>(blocks * D), T(0)), pb(static_cast<size_t>(blocks * D), T(0));  // [blocks, D]
#pragma omp parallel for schedule(static) if (R * D > kParallelGrain)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    thread_local std::vector<T> row;
    if (add_into && static_cast<int64_t>(row.size()) < D) row.resize(static_cast<size_t>(D));
    T* pwb = pw.data() + blk * D;
    T* pbb = pb.data() + blk * D;
    const int64_t r1 = std::min(R, (blk + 1) * kRowBlock);
    for (int64_t r = blk * kRowBlock; r < r1; ++r) {
      const T rstd = static_cast<T>(1.0 / std::sqrt(static_cast<double>(var[r]) + eps));
      backward_row(x + r * D, gy + r * D, w, mean[r], rstd, D, add_into ? row.data() : gx + r * D, pwb, pbb);
      if (add_into) {
        T* sr = gx + r * D;
        const T* gxr = row.data();
        for (int64_t d = 0; d < D; ++d) sr[d] += gxr[d];
      }
    }
  }
  for (int64_t d = 0; d < D; ++d) {
    T sw = 0, sb = 0;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      sw += pw[static_cast<size_t>(blk * D + d)];
      sb += pb[static_cast<size_t>(blk * D + d)];
    }
    gw[d] = sw;
    gb[d] = sb;
  }
}

}  // namespace

LayerNormResult layer_norm_forward(const Tensor& x0, const Tensor& w0, const Tensor& b0, double eps) {
  check_ln(x0, w0, b0, eps);
  Tensor x = contiguous(x0), w = contiguous(w0), b = contiguous(b0);
  const int64_t D = x.size(-1), R = x.numel() / D;
  LayerNormResult res{Tensor::empty(x.shape(), x.dtype()), Tensor::empty({R}, x.dtype()),
                      Tensor::empty({R}, x.dtype())};
  if (R == 0) return res;
  if (x.dtype() == DType::f64)
    loop_forward<double>(x.data<double>(), w.data<double>(), b.data<double>(), res.y.data<double>(),
                         res.mean.data<double>(), res.var.data<double>(), R, D, eps);
  else
    loop_forward<float>(x.data<float>(), w.data<float>(), b.data<float>(), res.y.data<float>(),
                        res.mean.data<float>(), res.var.data<float>(), R, D, eps);
  return res;
}

LayerNormGrads layer_norm_backward(const Tensor& gy0, const Tensor& x0, const Tensor& w0, const Tensor& mean0,
                                   const Tensor& var0, double eps, const Tensor& x_sum) {
  check_ln(x0, w0, w0, eps);
  check_defined(gy0, "layer_norm backward");
  if (gy0.shape() != x0.shape() || gy0.dtype() != x0.dtype())
    fail("layer_norm backward: gradient {} {} does not match input {} {}", shape_str(gy0.shape()),
         dtype_name(gy0.dtype()), shape_str(x0.shape()), dtype_name(x0.dtype()));
  Tensor gy = contiguous(gy0), x = contiguous(x0), w = contiguous(w0), mean = contiguous(mean0),
         var = contiguous(var0);
  const int64_t D = x.size(-1), R = x.numel() / D;
  if (mean.shape() != Shape{R} || var.shape() != Shape{R})
    fail("layer_norm backward: expected saved statistics of shape [{}], got {} and {}", R, shape_str(mean.shape()),
         shape_str(var.shape()));
  const bool into = x_sum.defined();
  if (into && (x_sum.shape() != x.shape() || x_sum.dtype() != x.dtype() || !x_sum.is_contiguous()))
    fail("layer_norm backward: the gradient sum to add dx into is {} {}, expected contiguous {} {}",
         shape_str(x_sum.shape()), dtype_name(x_sum.dtype()), shape_str(x.shape()), dtype_name(x.dtype()));
  LayerNormGrads g{into ? x_sum : Tensor::empty(x.shape(), x.dtype()), Tensor::zeros({D}, x.dtype()),
                   Tensor::zeros({D}, x.dtype())};
  if (R == 0) return g;
  if (x.dtype() == DType::f64) {
    loop_backward<double>(gy.data<double>(), x.data<double>(), w.data<double>(), mean.data<double>(),
                          var.data<double>(), g.x.data<double>(), g.w.data<double>(), g.b.data<double>(), R, D, eps,
                          into);
    return g;
  }
  loop_backward<float>(gy.data<float>(), x.data<float>(), w.data<float>(), mean.data<float>(), var.data<float>(),
                       g.x.data<float>(), g.w.data<float>(), g.b.data<float>(), R, D, eps, into);
  return g;
}

}  // namespace heed::kernel
