// core/bf16.h: bfloat16 rounding and a small bf16 GEMM for the bf16 paths of
// core/ (internal). bfloat16 is the upper half of a float32: 8 significant
// bits, float32's exponent range.
//
// The GEMM works on "pair-packed" operands, the layout AVX512-BF16's
// vdpbf16ps reads: a uint32 holds two bf16 values that are neighbours along
// the inner (summed) dimension, the even one in the low half. For
// C [M, N] = A [M, K] B [K, N], with P = ceil(K / 2) pairs:
//   B is packed along its rows:  b[p * ldb + j] = (B[2p][j], B[2p+1][j])
//   A is read by pair: a[i * ars + p * aps] = (A[i][2p], A[i][2p+1]), so A
//   packs either way round: row by row (ars = ld, aps = 1) or as the
//   B-style packing of A^T (ars = 1, aps = ld).
// An odd K is padded with a zero, which both operands must hold (0 x inf
// would be NaN).
#pragma once

#include <cstdint>
#include <cstring>

#include "core/block_gemm.h"

namespace heed::kernel {

// float32 -> bfloat16 as AVX512-BF16's conversion (vcvtneps2bf16) rounds,
// so that the vector packers can use it and a scalar path gives the same
// bits: to nearest even, NaNs stay NaNs (quieted), and float32 denormals
// become a zero of their sign (bf16 products count them as zero anyway).
inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);  // zero or denormal
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded);
}

inline float from_bf16(uint16_t h) {
  const uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

namespace bf16 {

// True when this CPU runs AVX512-BF16 (vdpbf16ps): the functions below may
// only be called then.
bool supported();

// Packs a float32 matrix src [rows, cols] (element (r, c) at src[r * rs + c * cs])
// along its rows, as a B operand: dst[p * ld + c] = (src(2p, c), src(2p+1, c))
// for p < ceil(rows / 2), c < ld (ld >= cols; zeros beyond cols and for the
// missing row of an odd count).
void pack_pairs(const float* src, int64_t rs, int64_t cs, int64_t rows, int64_t cols, uint32_t* dst, int64_t ld);

// Packs src [rows, cols] row by row: dst[r * ld + q] = (src(r, 2q), src(r, 2q+1))
// for q < ceil(cols / 2) (a zero after the last column of an odd count).
void pack_rows(const float* src, int64_t rs, int64_t cs, int64_t rows, int64_t cols, uint32_t* dst, int64_t ld);

// Bands (core/block_gemm.h) count inner indices: a band skips the pairs
// that only meet zeros.
using kernel::Band;

// C [M, N] = alpha A B (+ C when accumulate), with A and B pair-packed as
// above over P pairs; C is float32 with unit column stride. Every element is
// one float32 sum over the pairs in ascending order (bf16 products are
// exact in float32; each addition rounds to nearest even, and bf16 and
// float32 denormals count as zero), computed the same way wherever the tile
// boundaries fall: no result depends on how a caller splits the work. A
// band skips only zero products: the values are those of the whole product.
// ldb a multiple of 16 and b 64-byte aligned are fastest. A bias (N floats,
// with alpha 1 and no accumulation) is added to every row after its sum.
// add_after (with accumulate and alpha 1): the sum starts from 0 and C's old
// value is added after it, the bits of a separate add, instead of the sum
// starting from C. panel > 0: B is stored in panels of 64 columns, panel q
// (columns 64q ..) at b + q * panel with rows ldb words apart (ldb >= 64),
// so that a tile's pairs of B are neighbours in memory, not a row of B
// apart (wide B, e.g. 1024 columns: a page per pair). A bias may also go
// with add_after: C = (A B + bias) + old C. addend (with accumulate,
// add_after and alpha 1; laid out like C, not overlapping it) is added
// instead of the old C: C = (A B + bias) + addend, the bits of a separate
// add (a residual stream the product joins).
void gemm(int64_t M, int64_t N, int64_t P, const uint32_t* a, int64_t ars, int64_t aps, const uint32_t* b,
          int64_t ldb, float* c, int64_t ldc, float alpha, bool accumulate, const Band& band = {},
          const float* bias = nullptr, bool add_after = false, int64_t panel = 0, const float* addend = nullptr);

}  // namespace bf16
}  // namespace heed::kernel
