// core/cpu_conv_gemm.cpp: float32 1-D convolutions as products on heed's
// GEMM (core/conv_gemm.h), so that their bits are the same on AVX2 and
// AVX-512 CPUs and for any thread count (oneDNN's convolution kernels differ
// between the two instruction sets).
//
// Legend: x [N, C, L], w [O, C, K], y [N, O, Lo], stride s, padding p.
// Every activation is handled channels-last, [N, L, C] in memory (a
// contiguous [N, C, L] is transposed in and out).
//
// With xp = x padded by p zero positions at each end ([N, L + 2p, C]), the
// columns the convolution needs for sample n,
//   X_n [Lo, K C]:  X_n[t, k C + c] = xp[n, t s + k, c],
// lie in xp_n at (t s C) + (k C + c): a matrix with row stride s C and unit
// column stride whose rows overlap. The GEMM reads A and B through any
// strides, so X_n is a view and no column matrix is ever built:
//   forward   y_n [Lo, O] = X_n W^T + b,  W [O, K C]: W[o, k C + c] = w[o, c, k]
//   weights   dW^T [K C, O] = sum over n of X_n^T dy_n (one chain over n
//             and t: each sample's call resumes the chain the last one left)
//   bias      db = the column sums of dy's rows
//   data (s = 1) dx_n [L, C] = Y_n V with dy padded by K - 1 zero rows at
//             each end (dyp [N, Lo + 2 (K - 1), O]), Y_n[u, j O + o] =
//             dyp[n, u + p + j, o] (again a view, row stride O) and
//             V [K O, C]: V[j O + o, c] = w[o, c, K - 1 - j]
//             (the full convolution of dy with the reversed kernel).
// Dilation (any pass) and stride in the data gradient take explicit columns
// instead: X [N Lo, K C] built, dx collected from dX = dy W entry by entry in
// ascending k.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/block_gemm.h"
#include "core/conv_gemm.h"
#include "core/runtime.h"

namespace heed::kernel {
namespace {

struct Geo {
  int64_t N, C, L, O, K, Lo, s, d, p;
};

Geo geo_of(const Shape& xs, const Shape& ws, const Conv1dGeom& g) {
  return {xs[0], xs[1], xs[2], ws[0], ws[2], conv1d_out_length(xs[2], ws[2], g), g.stride, g.dilation, g.padding};
}

block::SgemmFn the_gemm() { return block::sgemm_for(heed::cpu_isa()); }

// Work over samples and blocks of rows, each task writing its own rows: the
// split depends on the shapes only.
template <class F>
void for_rows(int64_t N, int64_t rows, const F& f) {
  constexpr int64_t kRows = 96;
  const int64_t per = (rows + kRows - 1) / kRows, tasks = N * per;
#pragma omp parallel for schedule(static) if (tasks > 1 && N * rows > 64)
  for (int64_t i = 0; i < tasks; ++i) {
    const int64_t n = i / per, r0 = i % per * kRows;
    f(n, r0, std::min(kRows, rows - r0));
  }
}

// t [N, C, L] channels-last in memory, padded by `front` and `back` zero
// positions: [N, front + L + back, C]. A channels-last t with no padding is
// read where it lies (when its samples are dense).
Tensor padded_rows(const Tensor& t, int64_t front, int64_t back) {
  const int64_t N = t.size(0), C = t.size(1), L = t.size(2), Lp = front + L + back;
  if (front == 0 && back == 0 && conv1d_channels_last(t)) return contiguous(permute(t, {0, 2, 1}));  // a view when dense
  Tensor out = Tensor::empty({N, Lp, C});
  float* po = out.data<float>();
  const float* pt = t.data<float>();
  const int64_t sn = t.stride(0), sc = C == 1 ? 1 : t.stride(1), sl = L == 1 ? 1 : t.stride(2);
#pragma omp parallel for schedule(static) if (N * Lp * C > (1 << 15))
  for (int64_t n = 0; n < N; ++n) {
    float* o = po + n * Lp * C;
    std::fill(o, o + front * C, 0.0f);
    std::fill(o + (front + L) * C, o + Lp * C, 0.0f);
    const float* src = pt + n * sn;
    if (C == 1) {
      for (int64_t u = 0; u < L; ++u) o[front + u] = src[u * sl];
    } else if (sc == 1) {
      for (int64_t u = 0; u < L; ++u) std::memcpy(o + (front + u) * C, src + u * sl, size_t(C) * sizeof(float));
    } else if (sl == 1) {  // contiguous [C, L]: a transposition
      block::transpose(src, sc, C, L, o + front * C, C);
    } else {
      for (int64_t u = 0; u < L; ++u)
        for (int64_t c = 0; c < C; ++c) o[(front + u) * C + c] = src[c * sc + u * sl];
    }
  }
  return out;
}

// rows [N, L, C] in memory as [N, C, L]: a view (channels-last) or a
// contiguous copy.
Tensor from_rows(const Tensor& rows, bool cl) {
  Tensor v = permute(rows, {0, 2, 1});
  return cl ? v : contiguous(v);
}

// W [O, K C] (w's taps outer, channels inner) and its transpose [K C, O].
Tensor weight_rows(const Tensor& w) {
  return reshape(contiguous(permute(w, {0, 2, 1})), {w.size(0), w.size(2) * w.size(1)});
}

// ---- explicit columns (dilation; stride in the data gradient) ----

// X [N Lo, K C] from x (any strides).
Tensor columns(const Tensor& x, const Geo& s) {
  Tensor X = Tensor::empty({s.N * s.Lo, s.K * s.C});
  float* px = X.data<float>();
  const float* in = x.data<float>();
  const int64_t sn = x.stride(0), sc = s.C == 1 ? 1 : x.stride(1), sl = s.L == 1 ? 1 : x.stride(2), KC = s.K * s.C;
#pragma omp parallel for schedule(static) if (s.N * s.Lo * KC > (1 << 15))
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t t = 0; t < s.Lo; ++t) {
      float* row = px + (n * s.Lo + t) * KC;
      for (int64_t k = 0; k < s.K; ++k) {
        const int64_t u = t * s.s + k * s.d - s.p;
        float* dst = row + k * s.C;
        if (u < 0 || u >= s.L) {
          std::fill(dst, dst + s.C, 0.0f);
        } else {
          const float* src = in + n * sn + u * sl;
          for (int64_t c = 0; c < s.C; ++c) dst[c] = src[c * sc];
        }
      }
    }
  return X;
}

}  // namespace

bool gemm_conv1d_applies(DType dtype) {
  return dtype == DType::f32 && precision() == Precision::f32 && the_gemm() != nullptr;
}

Tensor gemm_conv1d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv1dGeom& g, bool cl) {
  const Geo s = geo_of(x.shape(), w.shape(), g);
  if (s.d != 1) {
    Tensor rows = linear(columns(x, s), weight_rows(w), b);  // [N Lo, O]
    return from_rows(reshape(rows, {s.N, s.Lo, s.O}), cl);
  }
  const Tensor xp = padded_rows(x, s.p, s.p);                      // [N, Lp, C]
  const Tensor wt = contiguous(transpose(weight_rows(w), 0, 1));  // [K C, O]
  Tensor y = Tensor::empty({s.N, s.Lo, s.O});
  const float *px = xp.data<float>(), *pw = wt.data<float>(), *pb = b.defined() ? b.data<float>() : nullptr;
  float* py = y.data<float>();
  const int64_t KC = s.K * s.C, xn = xp.stride(0);
  const auto gemm = the_gemm();
  for_rows(s.N, s.Lo, [&](int64_t n, int64_t t0, int64_t rows) {
    gemm(rows, s.O, KC, px + n * xn + t0 * s.s * s.C, s.s * s.C, 1, pw, s.O, 1, py + (n * s.Lo + t0) * s.O, s.O, pb,
         nullptr, nullptr, false);
  });
  return from_rows(y, cl);
}

Tensor gemm_conv1d_backward_data(const Tensor& gy, const Tensor& w, const Shape& xs, const Conv1dGeom& g,
                                 bool channels_last) {
  const Geo s = geo_of(xs, w.shape(), g);
  if (s.s != 1 || s.d != 1) {
    // dX = dy rows W [N Lo, K C]; each x[n, c, u] collects its entries in ascending k.
    const Tensor dX = matmul(reshape(padded_rows(gy, 0, 0), {s.N * s.Lo, s.O}), weight_rows(w));
    Tensor dx = Tensor::empty({s.N, s.L, s.C});
    float* out = dx.data<float>();
    const float* pd = dX.data<float>();
    const int64_t KC = s.K * s.C;
#pragma omp parallel for schedule(static) if (s.N * s.Lo * KC > (1 << 15))
    for (int64_t n = 0; n < s.N; ++n) {
      float* o = out + n * s.L * s.C;
      std::fill(o, o + s.L * s.C, 0.0f);
      for (int64_t k = 0; k < s.K; ++k)
        for (int64_t t = 0; t < s.Lo; ++t) {
          const int64_t u = t * s.s + k * s.d - s.p;
          if (u < 0 || u >= s.L) continue;
          const float* src = pd + (n * s.Lo + t) * KC + k * s.C;
          for (int64_t c = 0; c < s.C; ++c) o[u * s.C + c] += src[c];
        }
    }
    return from_rows(dx, channels_last);
  }
  const Tensor dyp = padded_rows(gy, s.K - 1, s.K - 1);  // [N, Lo + 2 (K - 1), O]
  // V [K O, C]: V[j O + o, c] = w[o, c, K - 1 - j].
  Tensor v = Tensor::empty({s.K * s.O, s.C});
  {
    const Tensor wc = contiguous(w);
    const float* pw = wc.data<float>();
    float* pv = v.data<float>();
    for (int64_t j = 0; j < s.K; ++j)
      for (int64_t o = 0; o < s.O; ++o)
        for (int64_t c = 0; c < s.C; ++c) pv[(j * s.O + o) * s.C + c] = pw[(o * s.C + c) * s.K + (s.K - 1 - j)];
  }
  Tensor dx = Tensor::empty({s.N, s.L, s.C});
  const float *pd = dyp.data<float>(), *pv = v.data<float>();
  float* px = dx.data<float>();
  const int64_t KO = s.K * s.O, dn = dyp.stride(0);
  const auto gemm = the_gemm();
  for_rows(s.N, s.L, [&](int64_t n, int64_t u0, int64_t rows) {
    gemm(rows, s.C, KO, pd + n * dn + (u0 + s.p) * s.O, s.O, 1, pv, s.C, 1, px + (n * s.L + u0) * s.C, s.C, nullptr,
         nullptr, nullptr, false);
  });
  return from_rows(dx, channels_last);
}

Tensor gemm_conv1d_backward_weights(const Tensor& gy, const Tensor& x, const Shape& ws, const Conv1dGeom& g,
                                    Tensor* gb) {
  const Geo s = geo_of(x.shape(), ws, g);
  const Tensor dy = padded_rows(gy, 0, 0);  // [N, Lo, O]
  if (gb) *gb = sum(reshape(dy, {s.N * s.Lo, s.O}), {0}, false);
  const int64_t KC = s.K * s.C;
  Tensor dW;
  if (s.d != 1) {
    dW = matmul(transpose(reshape(dy, {s.N * s.Lo, s.O}), 0, 1), columns(x, s));  // [O, K C]
  } else {
    // dW^T [K C, O] = sum over n of X_n^T dy_n, one chain per element over
    // (n, t): each sample's call resumes it. (Transposed, the output's rows
    // are the K C columns and its vectors run along O: a first layer's
    // [64, 5] gradient fills whole vectors.) The threads share dW^T in slabs
    // of rows, or of columns when the rows are few, cut by shape.
    const Tensor xp = padded_rows(x, s.p, s.p);
    Tensor dWt = Tensor::empty({KC, s.O});
    const float *px = xp.data<float>(), *pd = dy.data<float>();
    float* pw = dWt.data<float>();
    const int64_t xn = xp.stride(0), slabs = std::clamp<int64_t>(KC * s.O / 2048, 1, 8);
    const bool by_rows = KC >= 12 * slabs;
    // Where the samples' columns follow each other in xp (a kernel of 1,
    // stride 1, no padding), they are one matrix: one call for all.
    const bool joined = xn == s.Lo * s.s * s.C;
    const auto gemm = the_gemm();
#pragma omp parallel for schedule(static) if (slabs > 1)
    for (int64_t i = 0; i < slabs; ++i) {
      const int64_t total = by_rows ? KC : s.O, lo = total * i / slabs, hi = total * (i + 1) / slabs;
      const int64_t r0 = by_rows ? lo : 0, r1 = by_rows ? hi : KC, c0 = by_rows ? 0 : lo, c1 = by_rows ? s.O : hi;
      for (int64_t n = 0; n < (joined ? 1 : s.N); ++n)
        gemm(r1 - r0, c1 - c0, joined ? s.N * s.Lo : s.Lo, px + n * xn + r0, 1, s.s * s.C, pd + n * s.Lo * s.O + c0,
             s.O, 1, pw + r0 * s.O + c0, s.O, nullptr, nullptr, nullptr, n > 0);
    }
    dW = transpose(dWt, 0, 1);
  }
  return contiguous(permute(reshape(dW, {s.O, s.K, s.C}), {0, 2, 1}));
}

}  // namespace heed::kernel
