// core/cpu_hadamard.cpp: the fast Walsh-Hadamard transform, in place.
//
// The Sylvester matrix factors into log2(n) sparse levels; level h pairs
// element j with j + h inside blocks of 2h and replaces (a, b) by
// (a + b, a - b). The order of the levels does not matter (they commute), so
// the kernel is free to group them:
//   - levels 1, 2, 4 as one radix-8 butterfly on each group of 8 (strides
//     under a vector's width would not vectorise level by level), and on
//     rows of 32 or more levels 8 and 16 with them, in registers;
//   - then two levels at a time (h and 2h: a radix-4 butterfly on a, b, c, d
//     h apart), each a unit-stride loop over h >= 8 elements that vectorises;
//   - on long rows, every level whose blocks fit in kCacheBytes first, one
//     block at a time, then the remaining levels over the whole row: the row
//     goes through memory O(log(n / block)) times instead of O(log n).
// Each row is transformed by one thread in a fixed order of additions.
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/kernels.h"

namespace heed::kernel {

namespace {

constexpr int64_t kCacheBytes = 16384;  // half of the smallest L1 data cache here (32 KiB)

template <class T>
inline void radix8(T* __restrict x) {
  const T a0 = x[0] + x[1], a1 = x[0] - x[1], a2 = x[2] + x[3], a3 = x[2] - x[3];
  const T a4 = x[4] + x[5], a5 = x[4] - x[5], a6 = x[6] + x[7], a7 = x[6] - x[7];
  const T b0 = a0 + a2, b1 = a1 + a3, b2 = a0 - a2, b3 = a1 - a3;
  const T b4 = a4 + a6, b5 = a5 + a7, b6 = a4 - a6, b7 = a5 - a7;
  x[0] = b0 + b4;
  x[1] = b1 + b5;
  x[2] = b2 + b6;
  x[3] = b3 + b7;
  x[4] = b0 - b4;
  x[5] = b1 - b5;
  x[6] = b2 - b6;
  x[7] = b3 - b7;
}

// The same for floats as one 8-lane vector: level h is v' = swap_h(v) + s_h v,
// swap_h exchanging the halves of each block of 2h lanes, s_h = +1 on the
// lower half and -1 on the upper (so lane j gets x_j + x_{j+h}, lane j + h
// gets x_j - x_{j+h}: the scalar additions, the same roundings). GCC's vector
// extensions lower this to AVX2 / AVX-512VL shuffles, or SSE pairs.
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

template <>
inline void radix8<float>(float* __restrict x) {
  v8f v;
  std::memcpy(&v, x, sizeof v);
  v = __builtin_shuffle(v, v8i{1, 0, 3, 2, 5, 4, 7, 6}) + v * v8f{1, -1, 1, -1, 1, -1, 1, -1};
  v = __builtin_shuffle(v, v8i{2, 3, 0, 1, 6, 7, 4, 5}) + v * v8f{1, 1, -1, -1, 1, 1, -1, -1};
  v = __builtin_shuffle(v, v8i{4, 5, 6, 7, 0, 1, 2, 3}) + v * v8f{1, 1, 1, 1, -1, -1, -1, -1};
  std::memcpy(x, &v, sizeof v);
}

// Level h alone over x[0, n).
template <class T>
void level1(T* x, int64_t n, int64_t h) {
  for (int64_t i = 0; i < n; i += 2 * h) {
    T* __restrict a = x + i;
    T* __restrict b = x + i + h;
#pragma omp simd
    for (int64_t j = 0; j < h; ++j) {
      const T p = a[j], q = b[j];
      a[j] = p + q;
      b[j] = p - q;
    }
  }
}

// Levels h and 2h together over x[0, n).
template <class T>
void level2(T* x, int64_t n, int64_t h) {
  for (int64_t i = 0; i < n; i += 4 * h) {
    T* __restrict a = x + i;
    T* __restrict b = a + h;
    T* __restrict c = b + h;
    T* __restrict d = c + h;
#pragma omp simd
    for (int64_t j = 0; j < h; ++j) {
      const T p = a[j] + b[j], q = a[j] - b[j], r = c[j] + d[j], s = c[j] - d[j];
      a[j] = p + r;
      b[j] = q + s;
      c[j] = p - r;
      d[j] = q - s;
    }
  }
}

// Levels 1 .. 16 on a group of 32: four radix-8 butterflies, then levels 8
// and 16 across them while they are still in registers (one pass over the
// row instead of two; the same additions in the same order as level2).
template <class T>
inline void radix32(T* __restrict x) {
  for (int g = 0; g < 4; ++g) radix8(x + 8 * g);
  level2(x, 32, 8);
}

template <>
inline void radix32<float>(float* __restrict x) {
  v8f a, b, c, d;
  std::memcpy(&a, x, sizeof a);
  std::memcpy(&b, x + 8, sizeof b);
  std::memcpy(&c, x + 16, sizeof c);
  std::memcpy(&d, x + 24, sizeof d);
  v8f* v[4] = {&a, &b, &c, &d};
  for (v8f* p : v) {
    *p = __builtin_shuffle(*p, v8i{1, 0, 3, 2, 5, 4, 7, 6}) + *p * v8f{1, -1, 1, -1, 1, -1, 1, -1};
    *p = __builtin_shuffle(*p, v8i{2, 3, 0, 1, 6, 7, 4, 5}) + *p * v8f{1, 1, -1, -1, 1, 1, -1, -1};
    *p = __builtin_shuffle(*p, v8i{4, 5, 6, 7, 0, 1, 2, 3}) + *p * v8f{1, 1, 1, 1, -1, -1, -1, -1};
  }
  const v8f p = a + b, q = a - b, r = c + d, t = c - d;
  a = p + r;
  b = q + t;
  c = p - r;
  d = q - t;
  std::memcpy(x, &a, sizeof a);
  std::memcpy(x + 8, &b, sizeof b);
  std::memcpy(x + 16, &c, sizeof c);
  std::memcpy(x + 24, &d, sizeof d);
}

// Levels from, 2 from, ... below `to` over x[0, n) (from >= 8).
template <class T>
void levels(T* x, int64_t n, int64_t from, int64_t to) {
  int64_t h = from;
  while (h < to) {
    if (4 * h <= to) {
      level2(x, n, h);
      h *= 4;
    } else {
      level1(x, n, h);
      h *= 2;
    }
  }
}

template <class T>
void fwht_row(T* x, int64_t n) {
  if (n < 8) {  // 1, 2, 4
    for (int64_t h = 1; h < n; h *= 2)
      for (int64_t i = 0; i < n; i += 2 * h)
        for (int64_t j = i; j < i + h; ++j) {
          const T p = x[j], q = x[j + h];
          x[j] = p + q;
          x[j + h] = p - q;
        }
    return;
  }
  const int64_t block = std::min<int64_t>(n, std::max<int64_t>(8, kCacheBytes / static_cast<int64_t>(sizeof(T))));
  for (int64_t b = 0; b < n; b += block) {
    T* xb = x + b;
    if (block >= 32) {
      for (int64_t i = 0; i < block; i += 32) radix32(xb + i);
      levels(xb, block, 32, block);
    } else {
      for (int64_t i = 0; i < block; i += 8) radix8(xb + i);
      levels(xb, block, 8, block);
    }
  }
  levels(x, n, block, n);
}

template <class T>
void fwht_rows(T* base, int64_t rows, int64_t n, int64_t row_stride) {
  if (rows > 1 && rows * n > kParallelGrain) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) fwht_row(base + r * row_stride, n);
  } else {
    for (int64_t r = 0; r < rows; ++r) fwht_row(base + r * row_stride, n);
  }
}

}  // namespace

void fwht_(const Tensor& x) {
  check_defined(x, "fwht_");
  check_has_dims(x, "fwht_");
  if (!x.is_floating()) fail("fwht_: expected a float32 or float64 tensor, got {}", dtype_name(x.dtype()));
  const int64_t n = x.size(-1);
  if (n < 1 || (n & (n - 1)) != 0)
    fail("fwht_: the last dim must be a power of two, got {} (shape {}; quant::RandomizedHadamard takes any length)",
         n, shape_str(x.shape()));
  if (x.numel() == 0) return;
  int64_t rows = 0, row_stride = 0;
  if (x.is_contiguous()) {
    rows = x.numel() / n;
    row_stride = n;
  } else if (x.dim() == 2 && x.stride(1) == 1 && x.stride(0) >= n) {
    rows = x.size(0);
    row_stride = x.stride(0);
  } else {
    fail("fwht_: expected a contiguous tensor or a 2-D view with unit-stride rows, got shape {} strides {}",
         shape_str(x.shape()), shape_str(x.strides()));
  }
  x.bump_version();
  if (x.dtype() == DType::f32) fwht_rows(x.data<float>(), rows, n, row_stride);
  else fwht_rows(x.data<double>(), rows, n, row_stride);
}

}  // namespace heed::kernel
