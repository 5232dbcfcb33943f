// experiments/crossattn_task.h: cross-attention from a signal to the tokens
// that describe it (`heed run crossattn`), the mechanism of text-conditioned
// generation in miniature: queries from the signal's positions, keys and
// values from an encoded token sequence.
//
// A signal of L positions holds M shapes. Each shape is described by three
// tokens, kind, position and height, and the M triples follow each other in
// the order the shapes were drawn (not sorted by position), S = 3 M tokens:
//   kind      triangle, box or bump
//   position  centre c = half_width + 1 + position_step i, i = 0 .. P - 1,
//             as many as keep c + half_width <= L - 2
//   height    h = 0.5 (i + 1), i = 0 .. heights - 1
// The vocabulary is kinds first (ids 0 .. 2), then positions (3 .. 2 + P),
// then heights. A shape covers the 2 half_width + 1 positions |t - c| <=
// half_width, where with r = half_width + 1 it is
//   triangle  h (1 - |t - c| / r)
//   box       h
//   bump      h (1 - ((t - c) / r)^2)
// and 0 elsewhere; the signal is their sum (they never overlap).
//
// Drawing one sample (heed::Generator scalar draws): per attempt, for each
// shape in turn kind = randint(0, 3), position index = randint(0, P),
// height index = randint(0, heights); the attempt is kept when every two
// centres are at least 2 half_width + 2 apart (a zero between any two shapes),
// else drawn again.
//
// Legend: N samples, L positions, M shapes, S = 3 M tokens, H heads, V vocabulary.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "heed.h"

namespace heed::experiments {

enum DescribedKind : int64_t { kDescribedTriangle = 0, kDescribedBox = 1, kDescribedBump = 2 };
constexpr int64_t kDescribedKinds = 3;

struct DescribedOptions {
  int64_t length = 64;         // L
  int64_t shapes = 3;          // M
  int64_t half_width = 4;      // a shape covers 2 half_width + 1 positions
  int64_t position_step = 2;   // between neighbouring centres a position token can name
  int64_t heights = 8;         // height tokens: 0.5, 1.0, ..., 0.5 heights
  int64_t max_attempts = 100000;
};

// Number of position tokens P, and the whole vocabulary V = 3 + P + heights.
int64_t position_tokens(const DescribedOptions& o);
int64_t vocabulary_size(const DescribedOptions& o);
// "triangle", "box", "bump", "@17" (centre 17), "h2.5" (height 2.5).
std::string token_name(int64_t id, const DescribedOptions& o);

struct DescribedSet {
  Tensor tokens;   // [N, S] i64: kind, position, height of shape 0, then of shape 1, ...
  Tensor signal;   // [N, L] f32
  Tensor kinds;    // [N, M] i64
  Tensor centres;  // [N, M] i64
  Tensor heights;  // [N, M] f32
  int64_t size() const { return tokens.defined() ? tokens.size(0) : 0; }
};

// n samples as described above; throws naming the option when the options
// make no sense or M shapes cannot fit.
DescribedSet generate_described(int64_t n, Generator& g, const DescribedOptions& o = {});
// The bytes n samples of generate_described take: tokens, kinds and centres
// (int64), signal and heights (float32).
double described_bytes(int64_t n, const DescribedOptions& o);

// The signal a token sequence describes: tokens [N, S] -> [N, L] f32. Throws
// when a token is not of the kind its place needs (kind, position, height).
Tensor render_tokens(const Tensor& tokens, const DescribedOptions& o);

// Shape-token attention: for every shape s and every position t it covers,
// the attention mass on the three tokens that describe s (3 s .. 3 s + 2);
// mass[h] sums it for head h over those queries, field splits it into the
// kind, position and height token; uniform sums 3 / S per query (attention
// spread evenly over the tokens).
struct ShapeTokenScore {
  std::vector<double> mass;  // per head
  std::array<double, 3> field{};  // summed over heads: the mass on the kind, the position and the height token
  double uniform = 0;
  int64_t queries = 0;
  double head(size_t h) const { return queries > 0 ? mass[h] / static_cast<double>(queries) : 0.0; }
  double mean() const;  // over heads
  double on_field(size_t f) const;  // 0 kind, 1 position, 2 height; averaged over heads
  double baseline() const { return queries > 0 ? uniform / static_cast<double>(queries) : 0.0; }
  void add(const ShapeTokenScore& o);
};
// attn [N, H, L, S] (row = signal position, column = token), centres [N, M] i64.
ShapeTokenScore shape_token_attention(const Tensor& attn, const Tensor& centres, int64_t half_width);

// tokens [N, S] -> signal [N, L]. The tokens (embedding + a learned embedding
// of their place in the sequence) go through `encoder_layers` transformer
// blocks (none: each token stays itself); each signal position starts as a
// learned embedding of its position and, in each of `layers` decoder layers,
// cross-attends to the tokens (pre-LayerNorm, residual), then a feed-forward
// layer; a linear read-out gives the value.
class SignalFromTokens : public nn::Module {
 public:
  SignalFromTokens(const DescribedOptions& task, int64_t dim, int64_t heads, int64_t encoder_layers, int64_t layers,
                   Generator* g);
  Tensor forward(const Tensor& tokens) override;
  // The kept maps of decoder layer l: [N, H, L, S] (keep_attention on).
  void keep_attention(bool on);
  const Tensor& last_attention(size_t layer) const { return cross[layer]->last_attention(); }
  size_t layers() const { return cross.size(); }

  std::shared_ptr<nn::Embedding> tok;
  std::shared_ptr<nn::LearnedPositionalEmbedding> slot, pos;
  std::vector<std::shared_ptr<nn::TransformerBlock>> encoder;
  std::shared_ptr<nn::LayerNorm> ln_memory;
  std::vector<std::shared_ptr<nn::LayerNorm>> ln_cross, ln_ffn;
  std::vector<std::shared_ptr<nn::MultiHeadAttention>> cross;
  std::vector<std::shared_ptr<nn::FeedForward>> ffn;
  std::shared_ptr<nn::LayerNorm> ln_out;
  std::shared_ptr<nn::Linear> head;
  int64_t length, dim;
};

// The memory a `heed run crossattn` takes, in bytes (tensor_memory,
// experiments/common.h): its test set of `test` samples and a step's batch,
// SignalFromTokens's weights, gradients and optimiser state, a training step
// on `batch` samples where its activations and gradients are most, and an
// evaluation of `chunk` test samples at a time that keeps every decoder
// layer's attention maps. Peaks measured against it: crossattn_task.cpp.
double crossattn_memory(const DescribedOptions& task, int64_t dim, int64_t heads, int64_t encoder_layers,
                        int64_t layers, int64_t batch, int64_t test, int64_t chunk);

}  // namespace heed::experiments
