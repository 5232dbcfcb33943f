// core/block_gemm.h: a small float32 GEMM for the blocks of heed's own kernels
// (internal to core/): fused attention's block products, where a call is a
// 64 x 64 block or smaller and a library GEMM's per-call packing and
// dispatch cost as much as the arithmetic; and, with the same arithmetic,
// heed's GEMM for whole products (sgemm_for).
#pragma once

#include <atomic>
#include <cstdint>

#include "core/runtime.h"

namespace heed::kernel {

// The part of a product a triangular (causal) block needs: row i of C only
// in its columns j < i + col_end (the others are left unwritten), and row i
// of A zero outside the inner indices [i + inner_begin, i + inner_end), so
// the products that only meet those zeros are skipped. The defaults: all of
// it. (The bf16 GEMM of core/bf16.h counts inner indices, not pairs, too.)
struct Band {
  static constexpr int64_t kAll = INT64_MAX / 4;
  int64_t col_end = kAll, inner_begin = -kAll, inner_end = kAll;
};

namespace block {

// C [M, N] = alpha A B (+ C when accumulate) over P inner indices, with
// A(i, p) = a[i * ars + p * aps] (any strides: A is read one element at a
// time, so A^T is A with its strides swapped), B's rows b[p * ldb + 0 .. N)
// and C's rows c[i * ldc + 0 .. N). Every element of C is one float32 sum of
// its products in ascending p, each added with a fused multiply-add, from 0
// (or from C itself when accumulate and alpha == 1; else alpha times the sum
// is rounded, then C added): the same bits wherever the register tiles fall,
// on either instruction set. A band skips only zero products.
using GemmFn = void (*)(int64_t M, int64_t N, int64_t P, const float* a, int64_t ars, int64_t aps, const float* b,
                        int64_t ldb, float* c, int64_t ldc, float alpha, bool accumulate, const Band& band);

// The GEMM of one instruction set (callers pass heed::cpu_isa()), null for
// baseline or one this CPU lacks: callers then use a library GEMM.
GemmFn gemm_for(CpuIsa isa);

// C [M, N] = A B (+ bias on every row) (+ add), for whole products
// (core/cpu_sgemm_simd.inc: float32 products and convolutions run on it
// where the CPU has AVX2 or AVX-512). A(i, p) = a[i * ars + p * aps],
// B(p, j) = b[p * brs + j * bcs] (any strides; fastest with B's rows or
// columns unit-stride), C's rows c[i * ldc + 0 .. N). Every element of C is
// one float32 chain of fused multiply-adds over p = 0 .. K - 1 from 0 (as
// gemm's), then + bias[j], then + add[i * ldc + j], then * mul[i * ldc + j]:
// the same bits for any blocking, on either instruction set. add (null:
// none) is laid out like C: C itself (beta = 1), or a matrix that does not
// overlap C (a residual stream the product is added to: the bits of a
// separate add after it). mul (null: none) is laid out like C and does not
// overlap it: a gradient through an element-wise function, dY W times f'(x),
// with the bits of the separate multiply after the product. With resume the
// chain starts from C instead (C holds a chain an earlier call left off: a
// product over K1 + K2 inner indices in two calls is the same bits as in
// one), the bias added at the end as usual; resume excludes add and mul.
// Single-threaded: callers split the work over threads.
using SgemmFn = void (*)(int64_t M, int64_t N, int64_t K, const float* a, int64_t ars, int64_t aps, const float* b,
                         int64_t brs, int64_t bcs, float* c, int64_t ldc, const float* bias, const float* add,
                         const float* mul, bool resume);
SgemmFn sgemm_for(CpuIsa isa);

// One product's row tiles shared by two threads (sgemm_shared): side 0 takes
// them from the top, side 1 from the bottom, in chunks that shrink as the
// two meet (3/8 of the tiles each first, then a third of what is left), so
// each thread keeps mostly the rows it would have had as its half, and
// whichever runs late (woken late, or slowed down by the machine) does less
// instead of keeping the other waiting at the end. Every element is still
// one call's chain over all of K: the same bits as any other cut.
// Value-initialised (all zero) before the threads start.
struct RowShare {
  static constexpr int kBlocks = 16;       // column blocks (sgemm's blocks of B) it can hold
  std::atomic<uint64_t> taken[kBlocks]{};  // per column block: tiles taken from the top | from the bottom << 32
};
// The next chunk of `tiles` row tiles from side's end (0: top, 1: bottom):
// [lo, hi); false when none is left.
bool claim_tiles(std::atomic<uint64_t>& taken, int64_t tiles, int side, int64_t& lo, int64_t& hi);

// Products whose row tiles sgemm_shared can share: one block of K (at most
// 512: a tile's chain then never waits in C for another tile's K block) and
// at most RowShare::kBlocks column blocks.
constexpr bool sgemm_shareable(int64_t K, int64_t N) { return K > 0 && K <= 512 && N <= 2048; }

// sgemm's product (no resume) with its row tiles shared through `share`:
// both threads call it with the same arguments, one with side 0, the other
// with side 1 (one thread alone may make both calls, or one: side 0 then
// takes every tile). False, having written nothing, unless
// sgemm_shareable(K, N).
using SgemmSharedFn = bool (*)(int64_t M, int64_t N, int64_t K, const float* a, int64_t ars, int64_t aps,
                               const float* b, int64_t brs, int64_t bcs, float* c, int64_t ldc, const float* bias,
                               const float* add, const float* mul, RowShare& share, int side);
SgemmSharedFn sgemm_shared_for(CpuIsa isa);
// Whether isa's sgemm copies a transposed A (a weight gradient's dY^T) whole
// before its tiles (AVX2: Vec::kPackRows), which a thread taking only a few
// of those tiles would still pay for.
bool sgemm_copies_transposed_a(CpuIsa isa);

// dst[c * ld + r] = src[r * rs + c] for r < rows, c < cols: a B operand's
// rows from a matrix stored the other way round.
void transpose(const float* src, int64_t rs, int64_t rows, int64_t cols, float* dst, int64_t ld);

}  // namespace block
}  // namespace heed::kernel
