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

// Rounding to bf16 is AVX512-BF16's own conversion (vcvtne2ps2bf16), which
// to_bf16 (core/bf16.h) matches bit for bit: nearest even, NaNs quieted,
// float32 denormals to a signed zero.

// Lane c is the pair (a_c, b_c), a in the low half: two rows' values, paired
// along the rows.
HEED_BF16 inline __m512i pair_lanes(__m512 a, __m512 b) {
  // Words 0-15 of the conversion are a's, 16-31 b's; word 2c of the result
  // is a's word c, word 2c + 1 is b's.
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                       5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(b, a));
}

// 32 consecutive values (lo: the first 16, hi: the next), rounded: their 16
// pairs, in order.
HEED_BF16 inline __m512i pair_run(__m512 lo, __m512 hi) { return (__m512i)_mm512_cvtne2ps_pbh(hi, lo); }

// Transposes 16 x 16 32-bit words in registers: r[i] word j <-> r[j] word i.
HEED_BF16 inline void transpose16(__m512i (&r)[16]) {
  __m512i t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // Now per 128-bit lane: t[2i] = (x0 y0 x1 y1), t[2i+1] = (x2 y2 x3 y3) of rows x, y = 2i, 2i+1.
#pragma GCC unroll 4
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // r[4g + k] holds, in lane l, word 4l + k of rows 4g .. 4g+3.
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    t[k] = _mm512_shuffle_i32x4(r[k], r[4 + k], 0x88);        // lanes 0, 2 of groups 0, 1
    t[4 + k] = _mm512_shuffle_i32x4(r[k], r[4 + k], 0xdd);    // lanes 1, 3
    t[8 + k] = _mm512_shuffle_i32x4(r[8 + k], r[12 + k], 0x88);
    t[12 + k] = _mm512_shuffle_i32x4(r[8 + k], r[12 + k], 0xdd);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm512_shuffle_i32x4(t[k], t[8 + k], 0x88);            // words k
    r[4 + k] = _mm512_shuffle_i32x4(t[4 + k], t[12 + k], 0x88);   // words 4 + k
    r[8 + k] = _mm512_shuffle_i32x4(t[k], t[8 + k], 0xdd);        // words 8 + k
    r[12 + k] = _mm512_shuffle_i32x4(t[4 + k], t[12 + k], 0xdd);  // words 12 + k
  }
}

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
