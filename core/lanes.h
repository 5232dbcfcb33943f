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

}  // namespace heed::kernel
