// layers/positional.h: positional encodings, fixed and learned.
//
// (The toy shapes task's binary encoding, bit channels concatenated to a
// channels-first signal, is data::positional_encoding in data/shapes.h.)
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "layers/module.h"

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

namespace heed::nn {

// Adds sinusoidal_encoding(max_len, D) to x [N, T, D] (any T <= max_len).
// The table is a buffer ("pe" [max_len, D]): saved with the model, not trained.
class SinusoidalPositionalEncoding : public Module {
 public:
  SinusoidalPositionalEncoding(int64_t max_len, int64_t dim);
  Tensor forward(const Tensor& x) override { return forward(x, 0); }
  // Positions start .. start + T - 1 (generation with a cache continues at
  // the cache's length).
  Tensor forward(const Tensor& x, int64_t start);
  std::string extra_repr() const override;
  Tensor pe;  // [T_max, D]
  int64_t max_len, dim;
};

// Adds a learned row per position to x [N, T, D]: weight [T_max, D],
// initialised N(0, 1) like an Embedding.
class LearnedPositionalEmbedding : public Module {
 public:
  LearnedPositionalEmbedding(int64_t max_len, int64_t dim, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override { return forward(x, 0); }
  Tensor forward(const Tensor& x, int64_t start);
  std::string extra_repr() const override;
  Tensor weight;  // [T_max, D]
  int64_t max_len, dim;
};

}  // namespace heed::nn
