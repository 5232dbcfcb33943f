// core/iter.h: the strided loop every element-wise kernel runs on (internal to
// core/). Operands are described by per-dim strides over one common shape
// (broadcast dims have stride 0). Dims are coalesced where all operands allow
// it, so contiguous tensors become one flat loop whose inner body the compiler
// vectorises.
#pragma once

#include <array>
#include <cstdint>
#include <utility>

#include "core/error.h"
#include "core/tensor.h"

namespace heed::kernel::detail {

constexpr int kMaxDims = 12;

#define HEED_DISPATCH_ALL(dtype, op, ...)                                               \
  switch (dtype) {                                                                      \
    case ::heed::DType::f32: { using T = float; __VA_ARGS__; break; }                   \
    case ::heed::DType::f64: { using T = double; __VA_ARGS__; break; }                  \
    case ::heed::DType::i64: { using T = int64_t; __VA_ARGS__; break; }                 \
  }

#define HEED_DISPATCH_FLOAT(dtype, op, ...)                                             \
  switch (dtype) {                                                                      \
    case ::heed::DType::f32: { using T = float; __VA_ARGS__; break; }                   \
    case ::heed::DType::f64: { using T = double; __VA_ARGS__; break; }                  \
    default: ::heed::fail("{}: expected a floating-point tensor, got {}", op,           \
                          ::heed::dtype_name(dtype));                                   \
  }

template <int N>
struct Iter {
  int ndim = 0;                       // after coalescing; >= 1
  int64_t shape[kMaxDims];
  int64_t strides[N][kMaxDims];
};

// strides[k] gives operand k's strides for `shape` (same rank).
template <int N>
Iter<N> make_iter(const Shape& shape, const std::array<const Shape*, N>& strides) {
  Iter<N> it;
  HEED_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "tensors of rank {} exceed heed's limit of {}",
             shape.size(), kMaxDims);
  // Drop size-1 dims, then merge dim i into i+1 when every operand is
  // contiguous across the pair.
  int nd = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    it.shape[nd] = shape[d];
    for (int k = 0; k < N; ++k) it.strides[k][nd] = (*strides[k])[d];
    ++nd;
  }
  if (nd == 0) {
    it.ndim = 1;
    it.shape[0] = 1;
    for (int k = 0; k < N; ++k) it.strides[k][0] = 0;
    return it;
  }
  // Visit dims in operand 0's memory order (largest stride outermost), so an
  // output laid out channels-last ([N, C, T] with C unit-stride) is written
  // with a unit-stride inner loop rather than gathered. Every caller is an
  // element-wise map (or a check over all elements), for which the visiting
  // order does not change any result. Stable: ties keep the logical order.
  for (int d = 1; d < nd; ++d) {
    for (int e = d; e > 0 && it.strides[0][e - 1] < it.strides[0][e]; --e) {
      std::swap(it.shape[e - 1], it.shape[e]);
      for (int k = 0; k < N; ++k) std::swap(it.strides[k][e - 1], it.strides[k][e]);
    }
  }
  int out = 0;
  for (int d = 1; d < nd; ++d) {
    bool merge = true;
    for (int k = 0; k < N; ++k)
      if (it.strides[k][out] != it.strides[k][d] * it.shape[d]) merge = false;
    if (merge) {
      it.shape[out] *= it.shape[d];
      for (int k = 0; k < N; ++k) it.strides[k][out] = it.strides[k][d];
    } else {
      ++out;
      it.shape[out] = it.shape[d];
      for (int k = 0; k < N; ++k) it.strides[k][out] = it.strides[k][d];
    }
  }
  it.ndim = out + 1;
  return it;
}

// Calls f(offsets[N], n, inner_strides[N]) for runs of n elements along the
// innermost dim. Work is split into (row, chunk) items so one long flat loop
// still parallelises; each element is touched by exactly one call.
template <int N, class F>
void run(const Iter<N>& it, F&& f) {
  const int last = it.ndim - 1;
  const int64_t inner = it.shape[last];
  int64_t rows = 1;
  for (int d = 0; d < last; ++d) rows *= it.shape[d];
  const int64_t total = rows * inner;
  const int64_t chunk = inner > 16384 ? 16384 : inner;
  const int64_t chunks_per_row = (inner + chunk - 1) / chunk;
  const int64_t items = rows * chunks_per_row;
  std::array<int64_t, N> inner_strides;
  for (int k = 0; k < N; ++k) inner_strides[k] = it.strides[k][last];
#pragma omp parallel for schedule(static) if (total > 32768 && items > 1)
  for (int64_t item = 0; item < items; ++item) {
    int64_t row = item / chunks_per_row, c = item % chunks_per_row;
    std::array<int64_t, N> off{};
    int64_t r = row;
    for (int d = last - 1; d >= 0; --d) {
      int64_t i = r % it.shape[d];
      r /= it.shape[d];
      for (int k = 0; k < N; ++k) off[k] += i * it.strides[k][d];
    }
    int64_t start = c * chunk, n = std::min(chunk, inner - start);
    for (int k = 0; k < N; ++k) off[k] += start * inner_strides[k];
    f(off.data(), n, inner_strides.data());
  }
}

// Strides of t broadcast to `shape` (0 on broadcast dims). Assumes the shapes
// were checked with broadcast_shapes.
inline Shape broadcast_strides(const Tensor& t, const Shape& shape) {
  Shape st(shape.size(), 0);
  size_t off = shape.size() - t.shape().size();
  for (size_t i = 0; i < t.shape().size(); ++i)
    st[off + i] = t.shape()[i] == 1 ? 0 : t.strides()[i];
  return st;
}

}  // namespace heed::kernel::detail
