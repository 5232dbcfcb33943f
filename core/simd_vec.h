// core/simd_vec.h: float32 vector traits for heed's kernels written once for
// AVX-512 and AVX2 (internal, for core/'s .cpp files). A kernel file includes
// its vector code once per instruction set, with `Vec` naming one of these
// structs and every function carrying that set's target attribute
// (core/cpu_conv_winograd.cpp, core/cpu_block_gemm.cpp). Every member is
// always inlined into those kernels, so nothing here needs the instruction
// set at its own call site, and the files compile for any x86-64 CPU.
//
// The operations are the same arithmetic on either width (one rounding per
// add, multiply or fused multiply-add), so a kernel that combines them the
// same way per element gets the same bits on an AVX2 CPU as on an AVX-512 one.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#define HEED_SIMD_X86 1
#include <immintrin.h>

#include <cstdint>

// GCC 12's false "used uninitialized" warnings on the AVX-512 intrinsics'
// own _mm512_undefined_* operands (GCC bug 105593; see core/bf16_simd.h).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace heed::kernel::simd {

#define HEED_AVX512 __attribute__((always_inline, target("avx512f,fma"))) static inline
struct Avx512 {
  using f = __m512;
  using i = __m512i;
  using mask = __mmask16;
  static constexpr int W = 16;
  HEED_AVX512 f zero() { return _mm512_setzero_ps(); }
  HEED_AVX512 f set1(float a) { return _mm512_set1_ps(a); }
  HEED_AVX512 f load(const float* p) { return _mm512_load_ps(p); }
  HEED_AVX512 f loadu(const float* p) { return _mm512_loadu_ps(p); }
  HEED_AVX512 void store(float* p, f a) { _mm512_store_ps(p, a); }
  HEED_AVX512 void storeu(float* p, f a) { _mm512_storeu_ps(p, a); }
  // The first n lanes (all for n >= W, none for n <= 0); loads give 0 in
  // the others, stores leave their memory untouched (and unread).
  HEED_AVX512 mask first(int64_t n) {
    return n >= 16 ? mask(0xffff) : n <= 0 ? mask(0) : mask((1u << n) - 1);
  }
  HEED_AVX512 f loadu(const float* p, mask m) { return _mm512_maskz_loadu_ps(m, p); }
  HEED_AVX512 void storeu(float* p, mask m, f a) { _mm512_mask_storeu_ps(p, m, a); }
  HEED_AVX512 f add(f a, f b) { return _mm512_add_ps(a, b); }
  HEED_AVX512 f mul(f a, f b) { return _mm512_mul_ps(a, b); }
  HEED_AVX512 f fmadd(f a, f b, f c) { return _mm512_fmadd_ps(a, b, c); }
  HEED_AVX512 f fnmadd(f a, f b, f c) { return _mm512_fnmadd_ps(a, b, c); }  // c - a b
  HEED_AVX512 f sub(f a, f b) { return _mm512_sub_ps(a, b); }
  HEED_AVX512 f max(f a, f b) { return _mm512_max_ps(a, b); }
  // Lanes of a where m is in, b elsewhere.
  HEED_AVX512 f select(mask m, f a, f b) { return _mm512_mask_mov_ps(b, m, a); }
  HEED_AVX512 mask less(f a, f b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  HEED_AVX512 mask ordered(f a) { return _mm512_cmp_ps_mask(a, a, _CMP_ORD_Q); }
  HEED_AVX512 mask and_not(mask a, mask b) { return static_cast<mask>(a & ~b); }  // in a, not in b
  // 2^n for lanes holding integers n in [-126, 127].
  HEED_AVX512 f pow2(f n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
  }
  HEED_AVX512 float reduce_max(f a) { return _mm512_reduce_max_ps(a); }
  // Lanes 0-7 plus lanes 8-15, stored to h[8].
  HEED_AVX512 void fold_halves(f a, float* h) {
    _mm256_storeu_ps(h, _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1))));
  }
  // v where m > 0, else +0 (NaN in m gives 0). A zero-masked move, not
  // _mm512_max_ps, which trips a false -Wmaybe-uninitialized in GCC 12's header.
  HEED_AVX512 f keep_if_positive(f v, f m) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(m, _mm512_setzero_ps(), _CMP_GT_OQ), v);
  }
  HEED_AVX512 i lanes_times(int s) {
    return _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                              _mm512_set1_epi32(s));
  }
  // base[idx[l]] (the masked form, whose explicit source keeps GCC 12 from the same false warning).
  HEED_AVX512 f gather(const float* base, i idx) {
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), 0xFFFF, idx, base, 4);
  }
  HEED_AVX512 void scatter(float* base, i idx, f a) { _mm512_i32scatter_ps(base, idx, a, 4); }
};
#undef HEED_AVX512

#define HEED_AVX2 __attribute__((always_inline, target("avx2,fma"))) static inline
struct Avx2 {
  using f = __m256;
  using i = __m256i;
  using mask = __m256i;  // all ones in a lane that is in
  static constexpr int W = 8;
  HEED_AVX2 f zero() { return _mm256_setzero_ps(); }
  HEED_AVX2 f set1(float a) { return _mm256_set1_ps(a); }
  HEED_AVX2 f load(const float* p) { return _mm256_load_ps(p); }
  HEED_AVX2 f loadu(const float* p) { return _mm256_loadu_ps(p); }
  HEED_AVX2 void store(float* p, f a) { _mm256_store_ps(p, a); }
  HEED_AVX2 void storeu(float* p, f a) { _mm256_storeu_ps(p, a); }
  HEED_AVX2 mask first(int64_t n) {
    const int c = n >= 8 ? 8 : n <= 0 ? 0 : static_cast<int>(n);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  HEED_AVX2 f loadu(const float* p, mask m) { return _mm256_maskload_ps(p, m); }
  HEED_AVX2 void storeu(float* p, mask m, f a) { _mm256_maskstore_ps(p, m, a); }
  HEED_AVX2 f add(f a, f b) { return _mm256_add_ps(a, b); }
  HEED_AVX2 f mul(f a, f b) { return _mm256_mul_ps(a, b); }
  HEED_AVX2 f fmadd(f a, f b, f c) { return _mm256_fmadd_ps(a, b, c); }
  HEED_AVX2 f fnmadd(f a, f b, f c) { return _mm256_fnmadd_ps(a, b, c); }
  HEED_AVX2 f sub(f a, f b) { return _mm256_sub_ps(a, b); }
  HEED_AVX2 f max(f a, f b) { return _mm256_max_ps(a, b); }
  HEED_AVX2 f select(mask m, f a, f b) { return _mm256_blendv_ps(b, a, _mm256_castsi256_ps(m)); }
  HEED_AVX2 mask less(f a, f b) { return _mm256_castps_si256(_mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
  HEED_AVX2 mask ordered(f a) { return _mm256_castps_si256(_mm256_cmp_ps(a, a, _CMP_ORD_Q)); }
  HEED_AVX2 mask and_not(mask a, mask b) { return _mm256_andnot_si256(b, a); }
  HEED_AVX2 f pow2(f n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  }
  HEED_AVX2 float reduce_max(f a) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }
  // v where m > 0, else +0 (NaN in m gives 0): the same bits as Avx512's.
  HEED_AVX2 f keep_if_positive(f v, f m) { return _mm256_and_ps(_mm256_cmp_ps(m, _mm256_setzero_ps(), _CMP_GT_OQ), v); }
  HEED_AVX2 i lanes_times(int s) {
    return _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(s));
  }
  HEED_AVX2 f gather(const float* base, i idx) {
    return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), base, idx, _mm256_castsi256_ps(_mm256_set1_epi32(-1)), 4);
  }
  // AVX2 has no scatter: W scalar stores (once per weight per call).
  HEED_AVX2 void scatter(float* base, i idx, f a) {
    alignas(32) float v[W];
    alignas(32) int32_t at[W];
    _mm256_store_ps(v, a);
    _mm256_store_si256(reinterpret_cast<__m256i*>(at), idx);
    for (int l = 0; l < W; ++l) base[at[l]] = v[l];
  }
};
#undef HEED_AVX2

}  // namespace heed::kernel::simd
#endif  // x86
