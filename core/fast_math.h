// core/fast_math.h: float32 exp and erf written so that loops calling them
// vectorise (plain arithmetic and bit casts, no libm calls, no branches).
// glibc's expf/erff are scalar calls that stop the compiler from vectorising
// the GELU, softmax and attention loops around them.
//
// Accuracy (checked against double-precision libm in tests/core/
// test_fast_math.cpp over their whole useful range): exp within 2 ulp-ish
// (relative error < 3e-7), erf within 4e-7 absolute. float64 code keeps libm.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace heed::kernel::fast {

// e^x = 2^n e^r with x = n ln2 + r, |r| <= ln2 / 2 (ln2 split in two so
// n ln2 is exact enough), e^r by a degree-6 Taylor polynomial (truncation
// error < 0.35^7 / 7! = 1.3e-7 relative). Returns e^r and sets n, an integer
// in [-126, 128] for xc in [-87.33, 88.72]; a NaN xc gives a NaN e^r and
// n = 0 (converting NaN to an integer would be undefined).
inline float exp_reduce(float xc, int32_t& n_out) {
  // Every step is a value select, never a branch, so loops over exp
  // vectorise. n = round(x / ln2) by the 1.5 * 2^23 trick: adding it pushes
  // the fraction bits out, subtracting it back leaves the rounded integer
  // (exact for |x / ln2| < 2^22); floorf would not vectorise without
  // -fno-trapping-math.
  const float shifter = 12582912.0f;
  const float n = (xc * 1.44269504088896341f + shifter) - shifter;
  // A NaN n (from a NaN xc) leaves r NaN as xc would; only the integer
  // conversion below must not see it. (Zeroing n itself here led GCC to
  // evaluate the polynomial twice, once per case, in the GELU loop.)
  float r = xc - n * 0.693145751953125f;  // ln2 high part (exact in float)
  r = r - n * 1.428606765330187e-06f;     // ln2 low part
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  n_out = static_cast<int32_t>(n == n ? n : 0.0f);
  return p;
}

// 2^n as a float, for n in [-126, 127] (the normal exponents).
inline float pow2(int32_t n) { return std::bit_cast<float>((n + 127) << 23); }

// e^x. Saturates to 0 below -87.3 and to +inf above 88.7; NaN stays NaN.
inline float exp(float x) {
  const float hi = 88.72f, lo = -87.33f;
  float xc = x > hi ? hi : x;
  xc = xc < lo ? lo : xc;
  int32_t n;
  const float p = exp_reduce(xc, n);
  // n may be 128 or -126: 2^n in two normal factors 2^a 2^b, a + b = n.
  const int32_t a = n >> 1;
  float y = p * pow2(a) * pow2(n - a);
  y = x < lo ? 0.0f : y;
  y = x > hi ? __builtin_inff() : y;
  return x == x ? y : x;
}

// e^x for the softmax's arguments, which are never far above 0 (scores minus
// their running maximum or log-sum-exp): exp without the overflow handling,
// and 2^n in one factor. Exact as exp for x <= 88.7; 0 below -87.33 (and for
// -inf, the masked scores); NaN stays NaN. Fewer vector operations than exp,
// in the loop that dominates attention outside its matrix products.
inline float exp_softmax(float x) {
  const float lo = -87.33f;
  const float xc = x < lo ? lo : x;  // NaN compares false and stays NaN
  int32_t n;
  const float y = exp_reduce(xc, n) * pow2(n);
  return x < lo ? 0.0f : y;
}
// The double kernels' counterpart (reference and gradient-check precision):
// libm's exp, so softmax and cross-entropy can call exp_softmax on either type.
inline double exp_softmax(double x) { return std::exp(x); }

// erf(x) = x P(x^2) / Q(x^2) on |x| <= 4, a rational approximation whose
// coefficients heed fitted itself (least squares, then refined towards the
// minimax error, against double-precision erf on [0, 4]): 6 + 5 terms, error
// 2.4e-8 in exact arithmetic, below 4e-7 absolute (7 ulp of 1) and 3e-7
// relative near 0 once evaluated in float. P and Q have positive
// coefficients, so Q never vanishes. Beyond 4, erf is +-1 in float (1 - erf(4)
// = 1.5e-8). About 14 vector operations, no exp and one division: a third of
// an erf built on exp (GELU is bound by this arithmetic).
inline float erf(float x) {
  float ax = x < 0 ? -x : x;
  ax = ax < 4.0f ? ax : 4.0f;
  const float z = ax * ax;
  float p = 1.983791118699434e-06f;
  p = p * z + 2.8608576787705724e-04f;
  p = p * z + 3.930702081617617e-03f;
  p = p * z + 5.324371030364083e-02f;
  p = p * z + 1.945891753709394e-01f;
  p = p * z + 1.1283790574487331f;
  float q = 3.747070226861125e-05f;
  q = q * z + 1.1980308155889173e-03f;
  q = q * z + 1.5299548634966773e-02f;
  q = q * z + 1.1578595419613125e-01f;
  q = q * z + 5.057820264771044e-01f;
  q = q * z + 1.0f;
  float y = ax * p / q;
  y = y < 1.0f ? y : 1.0f;
  y = x < 0 ? -y : y;
  return x == x ? y : x;  // NaN stays NaN (the clamp above would make it 1)
}

}  // namespace heed::kernel::fast
