// layers/positional.cpp
#include "layers/positional.h"

#include <cmath>

#include "core/error.h"

namespace heed {

Tensor sinusoidal_encoding(int64_t T, int64_t D) {
  if (T < 0) fail("sinusoidal_encoding: expected T >= 0 positions, got T={}", T);
  if (D <= 0) fail("sinusoidal_encoding: expected a model width D >= 1, got D={}", D);
  Tensor pe = Tensor::empty({T, D});  // [T, D]
  float* p = pe.data<float>();
  for (int64_t c = 0; c < D; c += 2) {
    // Column pair (2i, 2i + 1) with c = 2i shares the frequency 10000^(-2i/D).
    const double freq = std::pow(10000.0, -static_cast<double>(c) / static_cast<double>(D));
    for (int64_t pos = 0; pos < T; ++pos) {
      const double angle = static_cast<double>(pos) * freq;
      p[pos * D + c] = static_cast<float>(std::sin(angle));
      if (c + 1 < D) p[pos * D + c + 1] = static_cast<float>(std::cos(angle));
    }
  }
  return pe;
}

}  // namespace heed
