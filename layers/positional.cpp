// layers/positional.cpp
#include "layers/positional.h"

#include <cmath>

#include "autograd/ops.h"
#include "core/error.h"
#include "core/kernels.h"
#include "core/random.h"

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

namespace heed::nn {

namespace {

// x [N, T, D] with positions start .. start + T - 1 inside a table [T_max, D].
void check_positions(const std::string& who, const Tensor& x, int64_t start, int64_t max_len, int64_t dim) {
  check_defined(x, who.c_str());
  if (x.dim() != 3 || x.size(2) != dim)
    fail("{}: expected input [N, T, {}], got {}", who, dim, shape_str(x.shape()));
  if (start < 0) fail("{}: expected a start position >= 0, got {}", who, start);
  const int64_t T = x.size(1);
  if (start + T > max_len) {
    if (start == 0) fail("{}: sequence length T={} exceeds the {} positions of the table", who, T, max_len);
    fail("{}: positions {}..{} (start {} + T={}) exceed the {} positions of the table", who, start, start + T - 1,
         start, T, max_len);
  }
}

}  // namespace

SinusoidalPositionalEncoding::SinusoidalPositionalEncoding(int64_t max_len_, int64_t dim_)
    : Module("SinusoidalPositionalEncoding"), max_len(max_len_), dim(dim_) {
  if (max_len <= 0 || dim <= 0)
    fail("SinusoidalPositionalEncoding: max_len and dim must be positive, got max_len={} dim={}", max_len, dim);
  pe = register_buffer("pe", sinusoidal_encoding(max_len, dim));
}

Tensor SinusoidalPositionalEncoding::forward(const Tensor& x, int64_t start) {
  check_positions(fmt::format("SinusoidalPositionalEncoding({})", extra_repr()), x, start, max_len, dim);
  return x + narrow(pe, 0, start, x.size(1));
}

std::string SinusoidalPositionalEncoding::extra_repr() const { return fmt::format("max_len={}, dim={}", max_len, dim); }

LearnedPositionalEmbedding::LearnedPositionalEmbedding(int64_t max_len_, int64_t dim_, Generator* gen)
    : Module("LearnedPositionalEmbedding"), max_len(max_len_), dim(dim_) {
  if (max_len <= 0 || dim <= 0)
    fail("LearnedPositionalEmbedding: max_len and dim must be positive, got max_len={} dim={}", max_len, dim);
  weight = register_parameter("weight", Tensor::empty({max_len, dim}));
  kernel::normal_(weight, 0.0, 1.0, init_generator(gen));
}

Tensor LearnedPositionalEmbedding::forward(const Tensor& x, int64_t start) {
  check_positions(fmt::format("LearnedPositionalEmbedding({})", extra_repr()), x, start, max_len, dim);
  return x + narrow(weight, 0, start, x.size(1));
}

std::string LearnedPositionalEmbedding::extra_repr() const { return fmt::format("max_len={}, dim={}", max_len, dim); }

}  // namespace heed::nn
