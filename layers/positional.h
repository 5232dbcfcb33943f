// layers/positional.h: fixed (not learned) positional encodings.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace heed {

// The sinusoidal positional encoding of "Attention Is All You Need"
// (Vaswani et al., 2017, sec. 3.5):
//
//   PE[pos, 2i]     = sin(pos / 10000^(2i / D))
//   PE[pos, 2i + 1] = cos(pos / 10000^(2i / D))
//
// Returns [T, D] float32 (T positions, D model width). Each pair of columns
// (2i, 2i + 1) is a rotation at one frequency, so PE[pos + k] is a fixed
// linear function of PE[pos] for every pos. For odd D the last column is a
// sine with no cosine partner. Computed in float64 and rounded once.
// Throws heed::Error for T < 0 or D <= 0.
Tensor sinusoidal_encoding(int64_t T, int64_t D);

}  // namespace heed
