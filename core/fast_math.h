// core/fast_math.h: float32 exp and erf written so that loops calling them
// vectorise (plain arithmetic and bit casts, no libm calls, no branches).
// glibc's expf/erff are scalar calls that stop the compiler from vectorising
// the GELU, softmax and attention loops around them.
//
// Accuracy (checked against double-precision libm in tests/core/
// test_fast_math.cpp over their whole useful range): exp within 2 ulp-ish
// (relative error < 3e-7), erf within 3e-7 absolute. float64 code keeps libm.
#pragma once

#include <bit>
#include <cstdint>

namespace heed::kernel::fast {

// e^x: x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two so n ln2 is exact
// enough), e^r by a degree-6 Taylor polynomial (truncation error
// < 0.35^7 / 7! = 1.3e-7 relative), 2^n built in the exponent bits.
// Saturates to 0 below -87.3 and to +inf above 88.7; NaN stays NaN.
inline float exp(float x) {
  // Every step is a value select, never a branch, so loops over exp
  // vectorise; NaN compares false everywhere and is restored at the end.
  const float hi = 88.72f, lo = -87.33f;
  float xc = x > hi ? hi : x;
  xc = xc < lo ? lo : xc;
  // n = round(x / ln2) by the 1.5 * 2^23 trick: adding it pushes the
  // fraction bits out, subtracting it back leaves the rounded integer (exact
  // for |x / ln2| < 2^22). floorf would not vectorise without -fno-trapping-math.
  const float shifter = 12582912.0f;
  float n = (xc * 1.44269504088896341f + shifter) - shifter;
  n = n == n ? n : 0.0f;                  // NaN: any finite n, result replaced below
  float r = xc - n * 0.693145751953125f;  // ln2 high part (exact in float)
  r = r - n * 1.428606765330187e-06f;     // ln2 low part
  r = r == r ? r : 0.0f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // n in [-126, 128]: 2^n as a float has exponent bits n + 127, which
  // leaves the normal range at both ends, so scale by 2^a 2^b, a + b = n.
  const int32_t ni = static_cast<int32_t>(n), a = ni >> 1, b = ni - a;
  const float sa = std::bit_cast<float>((a + 127) << 23), sb = std::bit_cast<float>((b + 127) << 23);
  float y = p * sa * sb;
  y = x < lo ? 0.0f : y;
  y = x > hi ? __builtin_inff() : y;
  return x == x ? y : x;
}

// erf(x) = 1 - t (a1 + a2 t + ... + a5 t^4) e^(-x^2), t = 1 / (1 + p |x|)
// (Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7), odd in x. Below |x| = 0.5
// the subtraction from 1 would cancel, so there the Maclaurin series
// 2/sqrt(pi) (x - x^3/3 + x^5/10 - x^7/42 + x^9/216 - x^11/1320) is used
// (next term < 2e-8 there).
inline float erf(float x) {
  const float x2 = x * x;
  float s = -1.0f / 1320.0f;
  s = s * x2 + 1.0f / 216.0f;
  s = s * x2 - 1.0f / 42.0f;
  s = s * x2 + 1.0f / 10.0f;
  s = s * x2 - 1.0f / 3.0f;
  s = s * x2 + 1.0f;
  const float series = 1.1283791670955126f * x * s;
  const float ax = x < 0 ? -x : x;
  const float t = 1.0f / (1.0f + 0.3275911f * ax);
  float poly = 1.061405429f;
  poly = poly * t - 1.453152027f;
  poly = poly * t + 1.421413741f;
  poly = poly * t - 0.284496736f;
  poly = poly * t + 0.254829592f;
  const float y = 1.0f - poly * t * exp(-ax * ax);
  return ax < 0.5f ? series : (x < 0 ? -y : y);
}

}  // namespace heed::kernel::fast
