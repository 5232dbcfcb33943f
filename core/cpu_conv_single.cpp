// core/cpu_conv_single.cpp: 1-D convolution with a single output channel
// (the toy models' last layer, 64 -> 1, kernel 5), written out by hand.
// oneDNN's kernels are built for channel blocks of 8 or 16 and reach ~10
// GFLOP/s on one output channel; here every tap is a vectorised
// multiply-add over a row, ~5x faster.
//
// Legend: N batch, C input channels, T input length, K taps, P padding,
// L = T + 2P - K + 1 output length (stride 1, dilation 1).
//   y[n][t]     = b + sum_c sum_k w[c][k] x[n][c][t + k - P]
//   dx[n][c][s] = sum_k w[c][k] dy[n][s - k + P]
//   dw[c][k]    = sum_n sum_t dy[n][t] x[n][c][t + k - P],  db = sum dy
// Each output element is summed by one thread in a fixed order, so the
// numbers do not depend on the thread count.
#include <algorithm>
#include <vector>

#include "core/conv_single.h"
#include "core/error.h"

namespace heed::kernel {

namespace {

// Output positions t for which x index t + k - P lies in [0, T): [lo, hi).
inline void valid_range(int64_t k, int64_t P, int64_t T, int64_t L, int64_t& lo, int64_t& hi) {
  lo = std::max<int64_t>(0, P - k);
  hi = std::min<int64_t>(L, T + P - k);
  if (hi < lo) hi = lo;
}

template <class F>
void parallel_over(int64_t count, int64_t work, F&& f) {
  if (count > 1 && work > kParallelGrain) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; ++i) f(i);
  } else {
    for (int64_t i = 0; i < count; ++i) f(i);
  }
}

}  // namespace

bool single_channel_conv_applies(DType dtype, int64_t O, const Conv1dGeom& g) {
  return dtype == DType::f32 && O == 1 && g.stride == 1 && g.dilation == 1;
}

Tensor single_channel_conv1d_forward(const Tensor& x0, const Tensor& w0, const Tensor& b0, int64_t P) {
  Tensor x = contiguous(x0), w = contiguous(w0);
  const int64_t N = x.size(0), C = x.size(1), T = x.size(2), K = w.size(2), L = T + 2 * P - K + 1;
  Tensor y = Tensor::empty({N, 1, L});
  const float *px = x.data<float>(), *pw = w.data<float>();
  const float b = b0.defined() ? contiguous(b0).data<float>()[0] : 0.0f;
  float* py = y.data<float>();
  parallel_over(N, N * C * K * L, [&](int64_t n) {
    float* __restrict yr = py + n * L;
    for (int64_t t = 0; t < L; ++t) yr[t] = b;
    for (int64_t c = 0; c < C; ++c) {
      const float* xr = px + (n * C + c) * T;
      for (int64_t k = 0; k < K; ++k) {
        int64_t lo, hi;
        valid_range(k, P, T, L, lo, hi);
        const float wk = pw[c * K + k];
        const float* __restrict src = xr + k - P;
        for (int64_t t = lo; t < hi; ++t) yr[t] += wk * src[t];
      }
    }
  });
  return y;
}

Tensor single_channel_conv1d_backward_data(const Tensor& gy0, const Tensor& w0, const Shape& xs, int64_t P) {
  Tensor gy = contiguous(gy0), w = contiguous(w0);
  const int64_t N = xs[0], C = xs[1], T = xs[2], K = w.size(2), L = gy.size(2);
  Tensor gx = Tensor::empty(xs);
  const float *pg = gy.data<float>(), *pw = w.data<float>();
  float* px = gx.data<float>();
  parallel_over(N * C, N * C * K * L, [&](int64_t nc) {
    const int64_t n = nc / C, c = nc % C;
    float* __restrict xr = px + nc * T;
    const float* gr = pg + n * L;
    for (int64_t s = 0; s < T; ++s) xr[s] = 0.0f;
    for (int64_t k = 0; k < K; ++k) {
      int64_t lo, hi;
      valid_range(k, P, T, L, lo, hi);
      const float wk = pw[c * K + k];
      float* __restrict dst = xr + k - P;  // dx[t + k - P] += w[k] dy[t]
      for (int64_t t = lo; t < hi; ++t) dst[t] += wk * gr[t];
    }
  });
  return gx;
}

Tensor single_channel_conv1d_backward_weights(const Tensor& gy0, const Tensor& x0, int64_t K, int64_t P, Tensor* gb) {
  Tensor gy = contiguous(gy0), x = contiguous(x0);
  const int64_t N = x.size(0), C = x.size(1), T = x.size(2), L = gy.size(2);
  Tensor gw = Tensor::empty({1, C, K});
  const float *pg = gy.data<float>(), *px = x.data<float>();
  float* pw = gw.data<float>();
  // Per channel: acc[k][t] += dy[n][t] x[n][c][t + k - P] over n (vectorised
  // over t), then each acc row summed in order.
  parallel_over(C, N * C * K * L, [&](int64_t c) {
    thread_local std::vector<float> acc;
    acc.assign(static_cast<size_t>(K * L), 0.0f);
    for (int64_t n = 0; n < N; ++n) {
      const float* gr = pg + n * L;
      const float* xr = px + (n * C + c) * T;
      for (int64_t k = 0; k < K; ++k) {
        int64_t lo, hi;
        valid_range(k, P, T, L, lo, hi);
        float* __restrict a = acc.data() + k * L;
        const float* __restrict src = xr + k - P;
        for (int64_t t = lo; t < hi; ++t) a[t] += gr[t] * src[t];
      }
    }
    for (int64_t k = 0; k < K; ++k) {
      double s = 0;
      for (int64_t t = 0; t < L; ++t) s += acc[static_cast<size_t>(k * L + t)];
      pw[c * K + k] = static_cast<float>(s);
    }
  });
  if (gb) {
    double s = 0;
    for (int64_t i = 0; i < N * L; ++i) s += pg[i];
    *gb = Tensor::full({1}, s);
  }
  return gw;
}

}  // namespace heed::kernel
