// core/lanes.h: sums kept as 16 independent partial results (internal to
// core/). A reduction written with one running accumulator is a serial chain
// of dependent adds that the compiler may not reorder (float addition is not
// associative); 16 partials (one vector register of floats) vectorise, and
// combining them in a fixed tree keeps the result deterministic.
#pragma once

namespace heed::kernel {

constexpr int kLanes = 16;

// The 16 partials summed as a fixed tree (depth 4, not a chain of 15 adds).
template <class T>
T lanes_sum(const T (&a)[kLanes]) {
  T h[kLanes / 2];
  for (int l = 0; l < kLanes / 2; ++l) h[l] = a[l] + a[l + kLanes / 2];
  return ((h[0] + h[4]) + (h[1] + h[5])) + ((h[2] + h[6]) + (h[3] + h[7]));
}

// float: the same tree on vector registers (GCC's vector extension, so any
// x86-64 target): h = a[0..8) + a[8..16), k = h[0..4) + h[4..8), then
// (k0 + k1) + (k2 + k3), the very additions above. Written on the array, the
// compiler spilled the partials' register to memory and added them one
// scalar at a time: that cost more than the sums' loop at a row of 64-128.
inline float lanes_sum(const float (&a)[kLanes]) {
  using V16 = float __attribute__((vector_size(64)));
  using V8 = float __attribute__((vector_size(32)));
  using V4 = float __attribute__((vector_size(16)));
  V16 v;
  __builtin_memcpy(&v, a, sizeof v);
  const V8 h = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
               __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  const V4 k = __builtin_shufflevector(h, h, 0, 1, 2, 3) + __builtin_shufflevector(h, h, 4, 5, 6, 7);
  return (k[0] + k[1]) + (k[2] + k[3]);
}

}  // namespace heed::kernel
