// core/cpu_bf16_gemm.cpp: the bf16 packers and GEMM of core/bf16.h, on
// AVX512-BF16. Every function that uses those instructions carries a target
// attribute, so the file compiles for any x86-64 CPU; callers take this path
// only when bf16::supported().
//
// The GEMM is a register-blocked outer product (the BLIS/GotoBLAS
// micro-kernel shape, without their packing into panels: the operands come
// pair-packed from the caller): a tile of MR rows x NR vectors of 16 columns
// stays in registers while the pairs p run, each step one vdpbf16ps per
// (row, vector) with the row's pair broadcast and the B row loaded once for
// all MR rows. It was built for attention's blocks (64 x 64 with an inner
// dimension of 32-128), where B's 64-column panel stays in L1 while the row
// tiles pass over it; the bf16 matrix products (core/cpu_matmul.cpp,
// Bf16Product) run on it too, a slab at a time: ~220-230 GFLOP/s a thread
// on GPT-128's Linear shapes with its operands in cache.
#include <algorithm>
#include <vector>

#include "core/bf16.h"
#include "core/bf16_simd.h"
#include "core/error.h"

namespace heed::kernel::bf16 {
namespace {

using simd::first;

// 32 consecutive floats (n <= 32 of them, zeros after) -> 16 pairs.
HEED_BF16 inline __m512i pairs_of_run(const float* x, int64_t n) {
  return simd::pair_run(_mm512_maskz_loadu_ps(first(n), x), _mm512_maskz_loadu_ps(first(n - 16), x + 16));
}

// One row, cs == 1: dst[q] = (x[2q], x[2q+1]) for q < ceil(n / 2).
HEED_BF16 void pack_run(const float* x, int64_t n, uint32_t* dst) {
  for (int64_t k = 0; k < n; k += 32) {
    const int64_t m = std::min<int64_t>(32, n - k);
    _mm512_mask_storeu_epi32(dst + k / 2, first((m + 1) / 2), pairs_of_run(x + k, m));
  }
}

// Two rows, cs == 1 (b null: a zero row): dst[c] = (a[c], b[c]) for c < ld.
HEED_BF16 void pack_two_rows(const float* a, const float* b, int64_t cols, uint32_t* dst, int64_t ld) {
  for (int64_t c = 0; c < ld; c += 16) {
    const __mmask16 m = first(cols - c);
    const __m512 vb = b ? _mm512_maskz_loadu_ps(m, b + c) : _mm512_setzero_ps();
    _mm512_mask_storeu_epi32(dst + c, first(ld - c), simd::pair_lanes(_mm512_maskz_loadu_ps(m, a + c), vb));
  }
}

// ncols (<= 16) columns of unit-stride runs, column c at x + c * cs, n
// floats left in each: their first np (<= 16) pairs, written as np rows of
// width (<= 16) words at dst (row stride ld); columns beyond ncols are zero.
HEED_BF16 void pack_columns(const float* x, int64_t cs, int64_t n, int64_t ncols, uint32_t* dst, int64_t ld,
                            int64_t np, int64_t width) {
  __m512i r[16];
#pragma GCC unroll 16
  for (int c = 0; c < 16; ++c) r[c] = c < ncols ? pairs_of_run(x + c * cs, n) : _mm512_setzero_si512();
  simd::transpose16(r);
  const __mmask16 m = first(width);
#pragma GCC unroll 16
  for (int p = 0; p < 16; ++p)
    if (p < np) _mm512_mask_storeu_epi32(dst + p * ld, m, r[p]);
}

uint32_t pair(float lo, float hi) { return uint32_t{to_bf16(lo)} | uint32_t{to_bf16(hi)} << 16; }

// Any strides, one element at a time (layouts the vector paths do not take).
void pack_pairs_scalar(const float* src, int64_t rs, int64_t cs, int64_t rows, int64_t cols, uint32_t* dst,
                       int64_t ld) {
  for (int64_t p = 0; p < (rows + 1) / 2; ++p)
    for (int64_t c = 0; c < ld; ++c) {
      const float lo = c < cols ? src[2 * p * rs + c * cs] : 0.0f;
      const float hi = c < cols && 2 * p + 1 < rows ? src[(2 * p + 1) * rs + c * cs] : 0.0f;
      dst[p * ld + c] = pair(lo, hi);
    }
}

// The micro-kernel: C[MR, 16 NR] tile; the last of the NR vectors holds the
// columns of `last`.
template <int MR, int NR>
HEED_BF16 void tile(int64_t np, const uint32_t* a, int64_t ars, int64_t aps, const uint32_t* b, int64_t ldb, float* c,
                    int64_t ldc, __mmask16 last, float alpha, bool accumulate, const float* bias, bool add_after,
                    const float* addend) {
  // The accumulators stay in registers only if every loop over them is
  // unrolled before GCC decides where the array lives: hence the pragmas.
  __m512 x[MR][NR];
  const bool from_c = accumulate && alpha == 1.0f && !add_after;
  // C's lines asked for (for writing) before the inner loop, when it does
  // not start from them, as heed's float32 GEMM does: a product's output is
  // often a block not in cache, and the stores at the tile's end stalled on
  // it. Training steps with and without, alternating in pairs of steps in
  // one process: GPT-128 bf16 +4.0, +1.4, +3.1, +1.7% (400 steps), GPT-256
  // bf16 +3.2, +2.6% (60).
  if (!from_c) {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NR; ++v) __builtin_prefetch(c + r * ldc + 16 * v, 1, 3);
  }
  // And the addend's (a residual stream added in the epilogue), read only
  // after the inner loop: a Linear's residual was often not in cache either.
  // GPT-256's output projection (3072 x 256 x 256, a residual added) in
  // one process, with and without alternating (16 calls each, medians):
  // warm 732 -> 695 us, after a pass over 256 MB 1113 -> 1005 us; its fc2
  // (K = 1024) warm 2693 -> 2650, after the pass 3154 -> 3064 us. The
  // same in heed's float32 GEMM (cpu_sgemm_simd.inc).
  if (addend) {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NR; ++v) __builtin_prefetch(addend + r * ldc + 16 * v, 0, 3);
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NR; ++v)
      x[r][v] = !from_c                ? _mm512_setzero_ps()
                : v + 1 < NR ? _mm512_loadu_ps(c + r * ldc + 16 * v)
                             : _mm512_maskz_loadu_ps(last, c + r * ldc + 16 * v);
  for (int64_t p = 0; p < np; ++p) {
    __m512bh bv[NR];
#pragma GCC unroll 4
    for (int v = 0; v < NR; ++v)
      bv[v] = (__m512bh)(v + 1 < NR ? _mm512_loadu_si512(b + 16 * v) : _mm512_maskz_loadu_epi32(last, b + 16 * v));
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r * ars]));
#pragma GCC unroll 4
      for (int v = 0; v < NR; ++v) x[r][v] = _mm512_dpbf16_ps(x[r][v], av, bv[v]);
    }
    a += aps;
    b += ldb;
  }
  const __m512 al = _mm512_set1_ps(alpha);
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NR; ++v) {
      float* cp = c + r * ldc + 16 * v;
      const __mmask16 m = v + 1 < NR ? __mmask16(0xffff) : last;
      __m512 y = x[r][v];
      if (!from_c) {
        if (alpha != 1.0f) y = _mm512_mul_ps(y, al);
        if (bias) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m, bias + 16 * v));
        if (accumulate) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m, addend ? addend + r * ldc + 16 * v : cp));
      }
      _mm512_mask_storeu_ps(cp, m, y);
    }
}

// Rows per tile for NR vectors: MR x NR accumulators plus NR B vectors and a
// broadcast within the 32 registers, and enough independent accumulators to
// cover vdpbf16ps's latency.
constexpr int kMaxMR[5] = {0, 16, 12, 8, 6};

// A tile of mr <= kMaxMR[NR] rows.
template <int NR, int MR = kMaxMR[NR]>
void run_tile(int64_t mr, int64_t np, const uint32_t* a, int64_t ars, int64_t aps, const uint32_t* b, int64_t ldb,
              float* c, int64_t ldc, __mmask16 last, float alpha, bool accumulate, const float* bias, bool add_after,
              const float* addend) {
  if constexpr (MR > 0) {
    if (mr == MR)
      return tile<MR, NR>(np, a, ars, aps, b, ldb, c, ldc, last, alpha, accumulate, bias, add_after, addend);
    run_tile<NR, MR - 1>(mr, np, a, ars, aps, b, ldb, c, ldc, last, alpha, accumulate, bias, add_after, addend);
  }
}

}  // namespace

bool supported() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512bf16");
  return ok;
}

// The packers read operands that are often not in cache yet (a head's rows
// of a [N, L, heads, W] tensor: short runs a row stride apart), so they
// fetch a few runs ahead: the hardware prefetchers do not follow that
// pattern far enough to hide the misses.
constexpr int64_t kAhead = 8;  // runs

void prefetch_run(const float* x, int64_t n) {
  for (int64_t k = 0; k < n; k += 16) _mm_prefetch(reinterpret_cast<const char*>(x + k), _MM_HINT_T0);
}

void pack_pairs(const float* src, int64_t rs, int64_t cs, int64_t rows, int64_t cols, uint32_t* dst, int64_t ld) {
  const int64_t np = (rows + 1) / 2;
  if (cs == 1 || cols == 1) {
    for (int64_t p = 0; p < np; ++p) {
      for (int64_t r = 2 * p + kAhead; r < std::min(rows, 2 * p + kAhead + 2); ++r) prefetch_run(src + r * rs, cols);
      pack_two_rows(src + 2 * p * rs, 2 * p + 1 < rows ? src + (2 * p + 1) * rs : nullptr, cols, dst + p * ld, ld);
    }
    return;
  }
  if (rs != 1) {
    pack_pairs_scalar(src, rs, cs, rows, cols, dst, ld);
    return;
  }
  // Rows unit-stride: a pair is two neighbouring floats of one column. 16
  // columns at a time pack as runs (16 pairs each), transposed in registers.
  for (int64_t c0 = 0; c0 < ld; c0 += 16) {
    const int64_t real = std::clamp<int64_t>(cols - c0, 0, 16);
    for (int64_t c = c0 + 16; c < std::min(cols, c0 + 32); ++c) prefetch_run(src + c * cs, rows);
    for (int64_t p0 = 0; p0 < np; p0 += 16)
      pack_columns(src + c0 * cs + 2 * p0, cs, rows - 2 * p0, real, dst + p0 * ld + c0, ld,
                   std::min<int64_t>(16, np - p0), std::min<int64_t>(16, ld - c0));
  }
}

void pack_rows(const float* src, int64_t rs, int64_t cs, int64_t rows, int64_t cols, uint32_t* dst, int64_t ld) {
  if (cs == 1 || cols == 1) {
    for (int64_t r = 0; r < rows; ++r) {
      if (r + kAhead < rows) prefetch_run(src + (r + kAhead) * rs, cols);
      pack_run(src + r * rs, cols, dst + r * ld);
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t q = 0; q < (cols + 1) / 2; ++q)
      dst[r * ld + q] = pair(src[r * rs + 2 * q * cs], 2 * q + 1 < cols ? src[r * rs + (2 * q + 1) * cs] : 0.0f);
}

void gemm(int64_t M, int64_t N, int64_t P, const uint32_t* a, int64_t ars, int64_t aps, const uint32_t* b,
          int64_t ldb, float* c, int64_t ldc, float alpha, bool accumulate, const Band& band, const float* bias,
          bool add_after, int64_t panel, const float* addend) {
  const bool banded = band.col_end != Band::kAll || band.inner_begin != -Band::kAll || band.inner_end != Band::kAll;
  if (bias && (alpha != 1.0f || (accumulate && !add_after) || banded))
    fail("bf16::gemm: a bias goes with alpha 1, no band and no accumulation onto C's chains, got alpha {}, "
         "accumulate {} (add after {}), band {}",
         alpha, accumulate, add_after, banded);
  if (addend && !(accumulate && add_after && alpha == 1.0f))
    fail("bf16::gemm: an addend goes with accumulate, add_after and alpha 1, got {}, {}, {}", accumulate, add_after,
         alpha);
  for (int64_t j0 = 0; j0 < N; j0 += 64) {
    const int64_t mr = kMaxMR[(std::min<int64_t>(64, N - j0) + 15) / 16];
    for (int64_t i0 = 0; i0 < M; i0 += mr) {
      const int64_t m = std::min(mr, M - i0);
      // The band, for the tile's rows: the columns its last row needs, the
      // pairs between its first row's first nonzero and its last row's last.
      const int64_t n = std::min({int64_t{64}, N - j0, i0 + m - 1 + band.col_end - j0});
      if (n <= 0) continue;
      const int64_t p0 = std::min(P, std::max<int64_t>(0, i0 + band.inner_begin) / 2);
      const int64_t p1 = std::clamp<int64_t>((i0 + m + band.inner_end) / 2, p0, P);  // ceil((i0 + m - 1 + end) / 2)
      const int64_t nr = (n + 15) / 16;
      const __mmask16 last = first(n - 16 * (nr - 1));
      const uint32_t* ai = a + i0 * ars + p0 * aps;
      const uint32_t* bj = panel ? b + j0 / 64 * panel + p0 * ldb : b + p0 * ldb + j0;
      float* ci = c + i0 * ldc + j0;
      const float* bj_bias = bias ? bias + j0 : nullptr;
      const float* di = addend ? addend + i0 * ldc + j0 : nullptr;
      const int64_t q = p1 - p0;
      switch (nr) {
        case 1: run_tile<1>(m, q, ai, ars, aps, bj, ldb, ci, ldc, last, alpha, accumulate, bj_bias, add_after, di); break;
        case 2: run_tile<2>(m, q, ai, ars, aps, bj, ldb, ci, ldc, last, alpha, accumulate, bj_bias, add_after, di); break;
        case 3: run_tile<3>(m, q, ai, ars, aps, bj, ldb, ci, ldc, last, alpha, accumulate, bj_bias, add_after, di); break;
        default: run_tile<4>(m, q, ai, ars, aps, bj, ldb, ci, ldc, last, alpha, accumulate, bj_bias, add_after, di); break;
      }
    }
  }
}

}  // namespace heed::kernel::bf16
