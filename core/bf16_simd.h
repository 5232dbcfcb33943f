// core/bf16_simd.h: AVX-512 building blocks of heed's bf16 kernels (internal,
// for the .cpp files of core/ that run them). Every function carries a target
// attribute instead of relying on the compiler flags, so the files compile
// for any x86-64 CPU; callers reach them only when bf16::supported().
#pragma once

#include <immintrin.h>

#include <cstdint>

// GCC 12 warns that the AVX-512 intrinsics' own _mm512_undefined_* operand
// "is used" or "may be used uninitialized" wherever they inline (GCC bug
// 105593, fixed in GCC 13; which of the two depends on -march); nothing
// here reads an undefined value. The warnings are reported in the including
// file's functions, so the pragmas stay in force for the rest of it.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#define HEED_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))

namespace heed::kernel::bf16::simd {

// The first n of 16 lanes (none for n <= 0).
inline __mmask16 first(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// Rounds 16 floats to bf16 as to_bf16 (core/bf16.h) does, leaving each
// result in the upper half of its 32-bit lane (the lower half is garbage).
HEED_BF16 inline __m512i round_hi(__m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(u, _mm512_set1_epi32(0x400000)));  // quiet the NaN
}

// From values rounded by round_hi: lane c is the pair (a_c, b_c), a in the
// low half.
HEED_BF16 inline __m512i pair_lanes_rounded(__m512i ra, __m512i rb) {
  return _mm512_mask_blend_epi16(0xAAAAAAAAu, _mm512_srli_epi32(ra, 16), rb);
}
HEED_BF16 inline __m512i pair_lanes(__m512 a, __m512 b) { return pair_lanes_rounded(round_hi(a), round_hi(b)); }

// From 32 consecutive values rounded by round_hi (lo: the first 16, hi:
// the next): their 16 pairs.
HEED_BF16 inline __m512i pair_run_rounded(__m512i lo, __m512i hi) {
  // Word m of the result: the upper word of value m (word 2m + 1 of lo:hi).
  const __m512i idx = _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25,
                                       23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  return _mm512_permutex2var_epi16(lo, idx, hi);
}
HEED_BF16 inline __m512i pair_run(__m512 lo, __m512 hi) { return pair_run_rounded(round_hi(lo), round_hi(hi)); }

// e^x by fast::exp_softmax's method (core/fast_math.h: x = n ln2 + r, a
// degree-6 polynomial for e^r; relative error < 3e-7), 16 lanes: for the
// softmax's arguments, which are never far above 0. 0 below -87.33; NaN
// stays NaN.
HEED_BF16 inline __m512 exp(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.33f);
  const __mmask16 below = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  const __m512 xc = _mm512_mask_mov_ps(x, below, lo);
  const __m512 shifter = _mm512_set1_ps(12582912.0f);  // 1.5 2^23: adding it rounds to an integer
  const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), shifter), shifter);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~below), _mm512_scalef_ps(p, n));
}

}  // namespace heed::kernel::bf16::simd
