// experiments/crossattn_task.cpp
#include "experiments/crossattn_task.h"

#include <cmath>

#include "core/kernels.h"
#include "experiments/common.h"

namespace heed::experiments {

namespace {

constexpr const char* kKindNames[kDescribedKinds] = {"triangle", "box", "bump"};

// What the options ask for cannot be drawn: a UsageError (a caller's
// command line is at fault), unlike running out of memory for the samples.
// Its message has no prefix: `heed run crossattn` puts it after its own
// ("run crossattn: --shapes 2 with --length 16: ...").
template <class... Args>
[[noreturn]] void refuse(fmt::format_string<Args...> f, Args&&... args) {
  throw UsageError(fmt::format(f, std::forward<Args>(args)...));
}

void check_options(const DescribedOptions& o) {
  if (o.half_width < 0) fail("crossattn: half_width must be >= 0, got {}", o.half_width);
  if (o.position_step < 1) fail("crossattn: position_step must be >= 1, got {}", o.position_step);
  if (o.heights < 1) fail("crossattn: heights must be >= 1, got {}", o.heights);
  if (o.shapes < 1) fail("crossattn: shapes must be >= 1, got {}", o.shapes);
  if (position_tokens(o) < 1)
    refuse("length {} leaves no room for a shape of half width {}", o.length, o.half_width);
  // The densest packing: centres 2 half_width + 2 apart from the first.
  const int64_t span = (o.shapes - 1) * (2 * o.half_width + 2);
  if ((position_tokens(o) - 1) * o.position_step < span)
    refuse("{} shapes of half width {} do not fit in length {}", o.shapes, o.half_width, o.length);
}

int64_t centre_of(int64_t index, const DescribedOptions& o) { return o.half_width + 1 + o.position_step * index; }

// One shape's value at position t.
double profile(int64_t kind, int64_t centre, double height, int64_t t, int64_t half_width) {
  const int64_t d = t - centre;
  if (d < -half_width || d > half_width) return 0.0;
  const double r = static_cast<double>(half_width + 1), x = static_cast<double>(d) / r;
  switch (kind) {
    case kDescribedTriangle: return height * (1.0 - std::abs(x));
    case kDescribedBox: return height;
    default: return height * (1.0 - x * x);
  }
}

}  // namespace

int64_t position_tokens(const DescribedOptions& o) {
  const int64_t last = o.length - 2 - o.half_width;  // the largest centre allowed
  const int64_t first = o.half_width + 1;
  return last < first ? 0 : (last - first) / o.position_step + 1;
}

int64_t vocabulary_size(const DescribedOptions& o) { return kDescribedKinds + position_tokens(o) + o.heights; }

std::string token_name(int64_t id, const DescribedOptions& o) {
  const int64_t P = position_tokens(o);
  if (id >= 0 && id < kDescribedKinds) return kKindNames[id];
  if (id >= kDescribedKinds && id < kDescribedKinds + P) return fmt::format("@{}", centre_of(id - kDescribedKinds, o));
  if (id >= kDescribedKinds + P && id < vocabulary_size(o))
    return fmt::format("h{:g}", 0.5 * static_cast<double>(id - kDescribedKinds - P + 1));
  fail("crossattn: token id {} is outside the vocabulary (0 .. {})", id, vocabulary_size(o) - 1);
}

DescribedSet generate_described(int64_t n, Generator& g, const DescribedOptions& o) {
  check_options(o);
  if (n < 0) fail("crossattn: cannot generate {} samples", n);
  const int64_t M = o.shapes, S = 3 * M, P = position_tokens(o);
  DescribedSet s;
  s.tokens = Tensor::zeros({n, S}, DType::i64);
  s.kinds = Tensor::zeros({n, M}, DType::i64);
  s.centres = Tensor::zeros({n, M}, DType::i64);
  s.heights = Tensor::zeros({n, M});
  int64_t* tok = s.tokens.data<int64_t>();
  int64_t* kind = s.kinds.data<int64_t>();
  int64_t* centre = s.centres.data<int64_t>();
  float* height = s.heights.data<float>();
  std::vector<int64_t> k(static_cast<size_t>(M)), p(static_cast<size_t>(M)), h(static_cast<size_t>(M));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t attempt = 0;; ++attempt) {
      if (attempt == o.max_attempts)
        refuse("no non-overlapping draw of {} shapes in {} attempts (length {}, half width {}); expected "
               "fewer shapes or a longer signal",
               M, o.max_attempts, o.length, o.half_width);
      for (size_t m = 0; m < static_cast<size_t>(M); ++m) {
        k[m] = g.randint(0, kDescribedKinds);
        p[m] = g.randint(0, P);
        h[m] = g.randint(0, o.heights);
      }
      bool apart = true;
      for (size_t a = 0; a < static_cast<size_t>(M) && apart; ++a)
        for (size_t b = a + 1; b < static_cast<size_t>(M) && apart; ++b)
          apart = std::abs(centre_of(p[a], o) - centre_of(p[b], o)) >= 2 * o.half_width + 2;
      if (apart) break;
    }
    for (int64_t m = 0; m < M; ++m) {
      const auto mm = static_cast<size_t>(m);
      tok[i * S + 3 * m] = k[mm];
      tok[i * S + 3 * m + 1] = kDescribedKinds + p[mm];
      tok[i * S + 3 * m + 2] = kDescribedKinds + P + h[mm];
      kind[i * M + m] = k[mm];
      centre[i * M + m] = centre_of(p[mm], o);
      height[i * M + m] = static_cast<float>(0.5 * static_cast<double>(h[mm] + 1));
    }
  }
  s.signal = render_tokens(s.tokens, o);
  return s;
}

double described_bytes(int64_t n, const DescribedOptions& o) {
  const auto M = static_cast<double>(o.shapes), L = static_cast<double>(o.length);
  return static_cast<double>(n) * (8 * 3 * M + 8 * M + 8 * M + 4 * M + 4 * L);
}

Tensor render_tokens(const Tensor& tokens0, const DescribedOptions& o) {
  check_options(o);
  const int64_t S = 3 * o.shapes, P = position_tokens(o), L = o.length;
  if (tokens0.dim() != 2 || tokens0.size(1) != S || tokens0.dtype() != DType::i64)
    fail("render_tokens: expected int64 tokens [N, {}] ({} shapes of 3 tokens), got {} {}", S, o.shapes,
         dtype_name(tokens0.dtype()), shape_str(tokens0.shape()));
  Tensor tokens = kernel::contiguous(tokens0);
  const int64_t N = tokens.size(0);
  const int64_t* tok = tokens.data<int64_t>();
  Tensor out = Tensor::zeros({N, L});
  float* po = out.data<float>();
  for (int64_t i = 0; i < N; ++i)
    for (int64_t m = 0; m < o.shapes; ++m) {
      const int64_t* t3 = tok + i * S + 3 * m;
      if (t3[0] < 0 || t3[0] >= kDescribedKinds || t3[1] < kDescribedKinds || t3[1] >= kDescribedKinds + P ||
          t3[2] < kDescribedKinds + P || t3[2] >= vocabulary_size(o))
        fail("render_tokens: sample {}, shape {}: tokens {} {} {} are not (kind, position, height)", i, m, t3[0], t3[1],
             t3[2]);
      const int64_t c = centre_of(t3[1] - kDescribedKinds, o);
      const double h =
          static_cast<double>(static_cast<float>(0.5 * static_cast<double>(t3[2] - kDescribedKinds - P + 1)));
      for (int64_t t = std::max<int64_t>(0, c - o.half_width); t <= std::min(L - 1, c + o.half_width); ++t)
        po[i * L + t] = static_cast<float>(po[i * L + t] + profile(t3[0], c, h, t, o.half_width));
    }
  return out;
}

double ShapeTokenScore::mean() const {
  double s = 0;
  for (size_t h = 0; h < mass.size(); ++h) s += head(h);
  return mass.empty() ? 0.0 : s / static_cast<double>(mass.size());
}

double ShapeTokenScore::on_field(size_t f) const {
  return queries > 0 && !mass.empty() ? field.at(f) / static_cast<double>(queries) / static_cast<double>(mass.size())
                                      : 0.0;
}

void ShapeTokenScore::add(const ShapeTokenScore& o) {
  if (mass.empty()) mass.assign(o.mass.size(), 0.0);
  if (mass.size() != o.mass.size()) fail("ShapeTokenScore: cannot pool {} heads with {}", mass.size(), o.mass.size());
  for (size_t h = 0; h < mass.size(); ++h) mass[h] += o.mass[h];
  for (size_t f = 0; f < field.size(); ++f) field[f] += o.field[f];
  uniform += o.uniform;
  queries += o.queries;
}

ShapeTokenScore shape_token_attention(const Tensor& attn0, const Tensor& centres0, int64_t half_width) {
  if (attn0.dim() != 4)
    fail("shape_token_attention: expected attention [N, H, L, S], got {}", shape_str(attn0.shape()));
  const int64_t N = attn0.size(0), H = attn0.size(1), L = attn0.size(2), S = attn0.size(3);
  if (centres0.dim() != 2 || centres0.size(0) != N || 3 * centres0.size(1) != S || centres0.dtype() != DType::i64)
    fail("shape_token_attention: expected int64 centres [{}, {}] for {} tokens, got {} {}", N, S / 3, S,
         dtype_name(centres0.dtype()), shape_str(centres0.shape()));
  Tensor attn = kernel::contiguous(kernel::to_dtype(attn0, DType::f32));
  Tensor centres = kernel::contiguous(centres0);
  const float* A = attn.data<float>();
  const int64_t* pc = centres.data<int64_t>();
  const int64_t M = S / 3;
  ShapeTokenScore r;
  r.mass.assign(static_cast<size_t>(H), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      const int64_t c = pc[n * M + m];
      for (int64_t t = std::max<int64_t>(0, c - half_width); t <= std::min(L - 1, c + half_width); ++t) {
        for (int64_t h = 0; h < H; ++h) {
          const float* row = A + ((n * H + h) * L + t) * S;
          for (size_t f = 0; f < 3; ++f) {
            r.mass[static_cast<size_t>(h)] += row[3 * m + static_cast<int64_t>(f)];
            r.field[f] += row[3 * m + static_cast<int64_t>(f)];
          }
        }
        r.uniform += 3.0 / static_cast<double>(S);
        ++r.queries;
      }
    }
  return r;
}

// ---- the model ----

SignalFromTokens::SignalFromTokens(const DescribedOptions& task, int64_t dim_, int64_t heads, int64_t encoder_layers,
                                   int64_t layers, Generator* g)
    : Module("SignalFromTokens"), length(task.length), dim(dim_) {
  if (layers < 1) fail("SignalFromTokens: needs at least one decoder layer, got {}", layers);
  tok = register_module(
      "tok", std::make_shared<nn::Embedding>(nn::EmbeddingOptions(vocabulary_size(task), dim).generator(g)));
  slot = register_module("slot", std::make_shared<nn::LearnedPositionalEmbedding>(3 * task.shapes, dim, g));
  for (int64_t l = 0; l < encoder_layers; ++l)
    encoder.push_back(register_module("encoder" + std::to_string(l),
                                      std::make_shared<nn::TransformerBlock>(
                                          nn::TransformerBlockOptions(dim, heads).generator(g))));
  ln_memory = register_module("ln_memory", std::make_shared<nn::LayerNorm>(dim));
  pos = register_module("pos", std::make_shared<nn::LearnedPositionalEmbedding>(task.length, dim, g));
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = std::to_string(l);
    ln_cross.push_back(register_module("ln_cross" + p, std::make_shared<nn::LayerNorm>(dim)));
    cross.push_back(register_module("cross" + p, std::make_shared<nn::MultiHeadAttention>(
                                                     nn::MultiHeadAttentionOptions(dim, heads).generator(g))));
    ln_ffn.push_back(register_module("ln_ffn" + p, std::make_shared<nn::LayerNorm>(dim)));
    ffn.push_back(
        register_module("ffn" + p, std::make_shared<nn::FeedForward>(nn::FeedForwardOptions(dim).generator(g))));
  }
  ln_out = register_module("ln_out", std::make_shared<nn::LayerNorm>(dim));
  head = register_module("head", std::make_shared<nn::Linear>(nn::LinearOptions(dim, 1).generator(g)));
}

Tensor SignalFromTokens::forward(const Tensor& tokens) {  // [N, S]
  const int64_t N = tokens.size(0);
  Tensor memory = slot->forward(tok->forward(tokens));  // [N, S, D]
  for (auto& e : encoder) memory = e->forward(memory);
  memory = ln_memory->forward(memory);
  Tensor h = pos->forward(Tensor::zeros({N, length, dim}));                                    // [N, L, D]
  for (size_t l = 0; l < cross.size(); ++l) {
    h = h + cross[l]->forward(ln_cross[l]->forward(h), memory);  // queries from the signal, keys/values from tokens
    h = h + ffn[l]->forward(ln_ffn[l]->forward(h));
  }
  return squeeze(head->forward(ln_out->forward(h)), -1);  // [N, L]
}

void SignalFromTokens::keep_attention(bool on) {
  for (auto& c : cross) c->keep_attention(on);
}

// Peaks measured (resident, the whole process, --steps 1: one step and one
// evaluation), against this: the defaults (--dim 64, --heads 2, --layers 2,
// --length 64, --shapes 3) with --batch 512: 0.36 GB, this 0.33 GB; --batch
// 2048: 1.31 GB, this 1.29 GB; --batch 8192: 5.01 GB, this 5.07 GB; --dim 128
// --batch 2048: 2.57 GB, this 2.55 GB; --length 256 --batch 1024: 2.58 GB,
// this 2.57 GB; --encoder-layers 2 --batch 2048: 1.52 GB, this 1.45 GB;
// --layers 4 --heads 8 --batch 2048: 2.46 GB, this 2.41 GB. (The program
// itself, about 50 MB, is in the peaks, not in this.)
double crossattn_memory(const DescribedOptions& task, int64_t dim, int64_t heads, int64_t encoder_layers,
                        int64_t layers, int64_t batch, int64_t test, int64_t chunk) {
  const auto D = static_cast<double>(dim), H = static_cast<double>(heads), E = static_cast<double>(encoder_layers),
             Y = static_cast<double>(layers), L = static_cast<double>(task.length),
             S = static_cast<double>(3 * task.shapes), V = static_cast<double>(vocabulary_size(task)),
             B = static_cast<double>(batch), C = static_cast<double>(std::min(chunk, test));
  // The fused attention keeps a step's probabilities when all keys are one
  // block (core/cpu_attention.cpp: 128 keys).
  const double kept = S <= 128 ? 1 : 0;
  // Per block, float32: n signal positions (queries), each with D floats
  // (act), the feed-forward's 4 D (hidden), a layer norm's mean or variance
  // (stat), the heads' log-sum-exps (lse), S keys per head (probs); m token
  // positions with D floats (mact), their 3 D projection (mqkv), 4 D (mhidden)
  // and their own statistics, log-sum-exps and S x S probabilities.
  auto blocks = [&](double samples) {
    const double n = samples * L, m = samples * S;
    struct {
      double act, hidden, stat, lse, probs, mact, mqkv, mhidden, mstat, mlse, mprobs;
    } b{4 * n * D, 16 * n * D, 4 * n, 4 * n * H, 4 * samples * H * L * S, 4 * m * D, 12 * m * D, 16 * m * D,
        4 * m,     4 * m * H,  4 * samples * H * S * S};
    return b;
  };
  const auto step = blocks(B), eval = blocks(C);
  // The weights: token, place and position embeddings, each encoder block's
  // and decoder layer's 12 D^2 (attention without bias, feed-forward) and
  // biases and layer norms, the read-out; then with their gradients, and the
  // optimiser's two moments beside them.
  const double weights =
      4 * ((V + S + L) * D + E * (12 * D * D + 9 * D) + Y * (12 * D * D + 9 * D) + 2 * D + 2 * D + D + 1);
  // The test set, its signals' squares (the reference mean square), and a step's batch.
  const double data = described_bytes(test, task) + 4 * L * static_cast<double>(test);
  const double batch_data = described_bytes(batch, task);
  return tensor_memory({
      // The training step's backward through the last decoder layer's
      // feed-forward: what each layer saved (its layer norms' outputs and
      // statistics, the queries, the attention's output, probabilities and
      // log-sum-exps, the residual sums, the feed-forward's hidden layer and
      // its activation), the keys and values each layer projected from the
      // tokens, the encoder blocks' own (as a GPT block's), the starting
      // positions, the last layer norm's output, and the gradients in flight:
      // two of the residual stream's and the hidden layer's.
      {{weights, 2},
       {data, 1},
       {batch_data, 1},
       {step.act, 6 * Y + 4},
       {step.hidden, 2 * Y + 1},
       {step.stat, 4 * Y + 2},
       {step.lse, Y},
       {step.probs, kept * Y},
       {step.mact, 2 * Y + 5 * E + 2},
       {step.mqkv, E},
       {step.mhidden, 2 * E},
       {step.mstat, 4 * E + 2},
       {step.mlse, E},
       {step.mprobs, kept * E}},
      // An evaluation's last layer (the maps kept, the unfused path): the
      // maps of the layers before it, its scores and their softmax, the
      // residual stream, its layer-normed copy, the queries and scaled
      // queries, the heads' output; the tokens' memory, keys and values.
      {{weights, 4},
       {data, 1},
       {batch_data, 1},
       {eval.act, 6},
       {eval.hidden, 1},
       {4 * C * H * L * S, Y + 1},
       {eval.mact, 3 + 5 * E}},
  });
}

}  // namespace heed::experiments
