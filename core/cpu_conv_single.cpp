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
//
// A channels-last x (stored [N, T, C]) gets its own loops, vectorised over
// the channels instead of over time: y[n][t] is a sum over taps of dot
// products of x's row t + k - P with the weights' column k.
#include <algorithm>
#include <vector>

#include "core/conv_single.h"
#include "core/error.h"
#include "core/lanes.h"

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

namespace {

// w [1, C, K] as wt [K][C], so each tap's weights are a unit-stride row.
std::vector<float> taps_by_channel(const Tensor& w) {
  const int64_t C = w.size(1), K = w.size(2);
  const float* pw = w.data<float>();
  std::vector<float> wt(static_cast<size_t>(K * C));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t k = 0; k < K; ++k) wt[static_cast<size_t>(k * C + c)] = pw[c * K + k];
  return wt;
}

// Channels-last x: y[n][t] = b + sum_k sum_c wt[k][c] x[n][t + k - P][c].
// Each output is a dot product of K rows of x with the weights, kept as 16
// partial sums (one vector register) so the channel loop is a vector
// multiply-add. kTB outputs are computed together, each with its own partial
// sums, so their dependent multiply-add chains overlap.
Tensor forward_channels_last(const Tensor& x, const Tensor& w, float b, int64_t P) {
  constexpr int64_t kTB = 8;
  const int64_t N = x.size(0), C = x.size(1), T = x.size(2), K = w.size(2), L = T + 2 * P - K + 1;
  Tensor y = Tensor::empty({N, 1, L});
  const std::vector<float> wt = taps_by_channel(w);
  const float* px = x.data<float>();  // [N, T, C]
  float* py = y.data<float>();
  const int64_t c16 = C / kLanes * kLanes;
  parallel_over(N, N * C * K * L, [&](int64_t n) {
    for (int64_t t0 = 0; t0 < L; t0 += kTB) {
      const int64_t nt = std::min(kTB, L - t0);
      float part[kTB][kLanes] = {};
      float tail[kTB] = {};
      for (int64_t k = 0; k < K; ++k) {
        const float* __restrict wr = wt.data() + k * C;
        for (int64_t i = 0; i < nt; ++i) {
          const int64_t s = t0 + i + k - P;
          if (s < 0 || s >= T) continue;
          const float* __restrict xr = px + (n * T + s) * C;
          for (int64_t c = 0; c < c16; c += kLanes)
            for (int l = 0; l < kLanes; ++l) part[i][l] += xr[c + l] * wr[c + l];
          for (int64_t c = c16; c < C; ++c) tail[i] += xr[c] * wr[c];
        }
      }
      for (int64_t i = 0; i < nt; ++i) py[n * L + t0 + i] = b + (lanes_sum(part[i]) + tail[i]);
    }
  });
  return y;
}

}  // namespace

Tensor single_channel_conv1d_forward(const Tensor& x0, const Tensor& w0, const Tensor& b0, int64_t P) {
  if (x0.size(1) > 1 && conv1d_channels_last(x0))
    return forward_channels_last(x0, contiguous(w0), b0.defined() ? contiguous(b0).data<float>()[0] : 0.0f, P);
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

Tensor single_channel_conv1d_backward_data(const Tensor& gy0, const Tensor& w0, const Shape& xs, int64_t P,
                                           bool channels_last) {
  Tensor gy = contiguous(gy0), w = contiguous(w0);
  const int64_t N = xs[0], C = xs[1], T = xs[2], K = w.size(2), L = gy.size(2);
  if (channels_last && C > 1) {
    // dx[n][s][c] = sum_k wt[k][c] dy[n][s - k + P]: rows of C, vectorised over c.
    Tensor gx = permute(Tensor::empty({N, T, C}), {0, 2, 1});
    const std::vector<float> wt = taps_by_channel(w);
    const float* pg = gy.data<float>();
    float* px = gx.data<float>();  // [N, T, C]
    parallel_over(N, N * C * K * L, [&](int64_t n) {
      for (int64_t s = 0; s < T; ++s) {
        float* __restrict xr = px + (n * T + s) * C;
        for (int64_t c = 0; c < C; ++c) xr[c] = 0.0f;
        for (int64_t k = 0; k < K; ++k) {
          const int64_t t = s - k + P;
          if (t < 0 || t >= L) continue;
          const float gv = pg[n * L + t];
          const float* __restrict wr = wt.data() + k * C;
          for (int64_t c = 0; c < C; ++c) xr[c] += gv * wr[c];
        }
      }
    });
    return gx;
  }
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
  const bool cl = x0.size(1) > 1 && conv1d_channels_last(x0);
  Tensor gy = contiguous(gy0), x = cl ? x0 : contiguous(x0);
  const int64_t N = x.size(0), C = x.size(1), T = x.size(2), L = gy.size(2);
  Tensor gw = Tensor::empty({1, C, K});
  const float *pg = gy.data<float>(), *px = x.data<float>();
  float* pw = gw.data<float>();
  if (cl) {
    // x stored [N, T, C]. dw[c][k] = sum_n sum_t dy[n][t] x[n][t + k - P][c]:
    // per sample a float sum over t (vectorised over c), then the samples
    // summed in double, in order. Tasks split the channels, so each element
    // has one thread.
    constexpr int64_t kBlock = 16;
    parallel_over((C + kBlock - 1) / kBlock, N * C * K * L, [&](int64_t blk) {
      const int64_t c0 = blk * kBlock, nc = std::min(kBlock, C - c0);
      thread_local std::vector<double> tot;
      tot.assign(static_cast<size_t>(K * nc), 0.0);
      float part[kBlock];
      for (int64_t k = 0; k < K; ++k) {
        int64_t lo, hi;
        valid_range(k, P, T, L, lo, hi);
        for (int64_t n = 0; n < N; ++n) {
          for (int64_t c = 0; c < nc; ++c) part[c] = 0.0f;
          const float* gr = pg + n * L;
          for (int64_t t = lo; t < hi; ++t) {
            const float gv = gr[t];
            const float* __restrict xr = px + (n * T + t + k - P) * C + c0;
            for (int64_t c = 0; c < nc; ++c) part[c] += gv * xr[c];
          }
          for (int64_t c = 0; c < nc; ++c) tot[static_cast<size_t>(k * nc + c)] += part[c];
        }
      }
      for (int64_t c = 0; c < nc; ++c)
        for (int64_t k = 0; k < K; ++k) pw[(c0 + c) * K + k] = static_cast<float>(tot[static_cast<size_t>(k * nc + c)]);
    });
  } else {
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
        double sum = 0;
        for (int64_t t = 0; t < L; ++t) sum += acc[static_cast<size_t>(k * L + t)];
        pw[c * K + k] = static_cast<float>(sum);
      }
    });
  }
  if (gb) {
    double sum = 0;
    for (int64_t i = 0; i < N * L; ++i) sum += pg[i];
    *gb = Tensor::full({1}, sum);
  }
  return gw;
}

}  // namespace heed::kernel
