// layers/transformer.h: the position-wise feed-forward network, the
// transformer block and a GPT (decoder-only language model).
//
//   pre-LN block (default; GPT-2):   x = x + drop(attn(ln1(x)));  x = x + ffn(ln2(x))
//   post-LN block (Vaswani et al.):  x = ln1(x + drop(attn(x)));  x = ln2(x + ffn(x))
//   GPT: ids [N, T] -> wte(ids) + wpe(positions) -> drop -> blocks -> ln_f -> lm_head -> logits [N, T, V]
//
// Top-level names are nanoGPT's ("wte", "wpe", "ln_f", "lm_head"); inside a
// block they are heed's own ("blocks.0.ln1.weight", "blocks.0.attn.q_proj.weight",
// "blocks.0.ffn.fc1.bias"), with separate q/k/v projections where nanoGPT
// fuses them into one c_attn; gpt_to_nanogpt and gpt_from_nanogpt (below)
// map between the two, and GPT::load_state_dict takes either.
#pragma once

#include <memory>
#include <vector>

#include "layers/attention.h"
#include "layers/basic.h"
#include "layers/positional.h"

namespace heed::nn {

struct FeedForwardOptions {
  explicit FeedForwardOptions(int64_t dim) : dim_(dim) {}
  FeedForwardOptions& hidden(int64_t h) { hidden_ = h; return *this; }  // 0 = 4 dim
  // Any of autograd/activation.h (heed::Activation); exact GELU by default.
  FeedForwardOptions& activation(Activation a) { activation_ = a; return *this; }
  FeedForwardOptions& bias(bool b) { bias_ = b; return *this; }
  FeedForwardOptions& dropout(double p) { dropout_ = p; return *this; }  // on the output, while training
  FeedForwardOptions& generator(Generator* g) { gen_ = g; return *this; }
  int64_t dim_, hidden_ = 0;
  Activation activation_ = Activation::gelu;
  bool bias_ = true;
  double dropout_ = 0.0;
  Generator* gen_ = nullptr;
};

// [.., D] -> fc1 -> activation -> fc2 -> dropout -> [.., D].
class FeedForward : public Module {
 public:
  explicit FeedForward(const FeedForwardOptions& o);
  explicit FeedForward(int64_t dim) : FeedForward(FeedForwardOptions(dim)) {}
  Tensor forward(const Tensor& x) override;
  // residual + forward(x) (undefined residual: forward(x)), the add in fc2's
  // epilogue when no dropout is active (else a separate add after the
  // dropout): the same values.
  Tensor forward_add(const Tensor& x, const Tensor& residual);
  std::string extra_repr() const override;
  std::shared_ptr<Linear> fc1;  // D -> hidden
  std::shared_ptr<Linear> fc2;  // hidden -> D
  FeedForwardOptions options;   // hidden resolved
};

struct TransformerBlockOptions {
  TransformerBlockOptions(int64_t dim, int64_t heads) : dim_(dim), heads_(heads) {}
  TransformerBlockOptions& pre_ln(bool b) { pre_ln_ = b; return *this; }  // false: post-LN
  TransformerBlockOptions& ffn_hidden(int64_t h) { ffn_hidden_ = h; return *this; }  // 0 = 4 dim
  TransformerBlockOptions& activation(Activation a) { activation_ = a; return *this; }
  // One rate for the attention weights, the attention output and the FFN output.
  TransformerBlockOptions& dropout(double p) { dropout_ = p; return *this; }
  TransformerBlockOptions& causal(bool c) { causal_ = c; return *this; }
  TransformerBlockOptions& kv_heads(int64_t g) { kv_heads_ = g; return *this; }  // 0 = heads
  TransformerBlockOptions& attn_bias(bool b) { attn_bias_ = b; return *this; }
  TransformerBlockOptions& ffn_bias(bool b) { ffn_bias_ = b; return *this; }
  TransformerBlockOptions& ln_eps(double e) { ln_eps_ = e; return *this; }
  TransformerBlockOptions& generator(Generator* g) { gen_ = g; return *this; }
  int64_t dim_, heads_;
  bool pre_ln_ = true;
  int64_t ffn_hidden_ = 0;
  Activation activation_ = Activation::gelu;
  double dropout_ = 0.0;
  bool causal_ = false;
  int64_t kv_heads_ = 0;
  // Defaults give the lectures' block: attention without biases, FFN with.
  bool attn_bias_ = false, ffn_bias_ = true;
  double ln_eps_ = 1e-5;
  Generator* gen_ = nullptr;
};

// [N, T, D] -> [N, T, D]. Children "ln1", "attn", "ln2", "ffn".
class TransformerBlock : public Module {
 public:
  explicit TransformerBlock(const TransformerBlockOptions& o);
  TransformerBlock(int64_t dim, int64_t heads) : TransformerBlock(TransformerBlockOptions(dim, heads)) {}
  Tensor forward(const Tensor& x) override;
  // Generation step over the next t positions (see MultiHeadAttention).
  Tensor forward_cached(const Tensor& x_new, KVCache& cache);
  std::string extra_repr() const override;
  std::shared_ptr<LayerNorm> ln1, ln2;
  std::shared_ptr<MultiHeadAttention> attn;
  std::shared_ptr<FeedForward> ffn;
  TransformerBlockOptions options;

 private:
  Tensor block(const Tensor& x, KVCache* cache);
};

struct GPTOptions {
  GPTOptions(int64_t vocab, int64_t dim, int64_t layers, int64_t heads, int64_t context)
      : vocab_(vocab), dim_(dim), layers_(layers), heads_(heads), context_(context) {}
  // The LM head reuses the token embedding matrix (Press & Wolf 2017).
  GPTOptions& tie_weights(bool b) { tie_weights_ = b; return *this; }
  GPTOptions& dropout(double p) { dropout_ = p; return *this; }
  // false: fixed sinusoidal positions (a buffer) instead of learned ones.
  GPTOptions& learned_positions(bool b) { learned_positions_ = b; return *this; }
  GPTOptions& ffn_hidden(int64_t h) { ffn_hidden_ = h; return *this; }  // 0 = 4 dim
  GPTOptions& activation(Activation a) { activation_ = a; return *this; }
  GPTOptions& kv_heads(int64_t g) { kv_heads_ = g; return *this; }  // 0 = heads
  // Biases in the attention and FFN linears (LayerNorms always have theirs).
  GPTOptions& bias(bool b) { bias_ = b; return *this; }
  GPTOptions& pre_ln(bool b) { pre_ln_ = b; return *this; }
  GPTOptions& generator(Generator* g) { gen_ = g; return *this; }
  // gpt2: N(0, 0.02) weights, residual projections scaled by 1/sqrt(2 layers),
  // zero biases (GPT-2 as nanoGPT writes it). torch: every layer keeps
  // PyTorch's own defaults (Linear U(+-1/sqrt(fan_in)), Embedding N(0, 1)).
  enum class Init { gpt2, torch };
  GPTOptions& init(Init i) { init_ = i; return *this; }
  int64_t vocab_, dim_, layers_, heads_, context_;
  Init init_ = Init::gpt2;
  bool tie_weights_ = false;
  double dropout_ = 0.0;
  bool learned_positions_ = true;
  int64_t ffn_hidden_ = 0;
  Activation activation_ = Activation::gelu;
  int64_t kv_heads_ = 0;
  bool bias_ = true;
  bool pre_ln_ = true;
  Generator* gen_ = nullptr;
};

// Per-layer key/value caches of a GPT, for generation.
struct GPTCache {
  std::vector<KVCache> layers;
  int64_t length() const { return layers.empty() ? 0 : layers.front().length(); }
  void clear() { layers.clear(); }
};

// A decoder-only transformer language model (Radford et al. 2018/2019).
// Initialised like GPT-2 / nanoGPT: linear and embedding weights N(0, 0.02),
// the residual projections (attn.out_proj, ffn.fc2) N(0, 0.02 / sqrt(2 layers)),
// biases 0, LayerNorms 1 and 0.
class GPT : public Module {
 public:
  explicit GPT(const GPTOptions& o);
  // ids [N, T] int64, T <= context -> logits [N, T, V].
  Tensor forward(const Tensor& ids) override;
  // Generation: ids_new [N, t] continue the sequence held by cache (positions
  // cache.length() ..); returns their logits [N, t, V]. Run under NoGradGuard.
  Tensor forward_cached(const Tensor& ids_new, GPTCache& cache);
  std::string extra_repr() const override;

  // Also takes a state dict under nanoGPT's names (keys starting with
  // "transformer."; see gpt_from_nanogpt), as written by PyTorch. A tied GPT
  // also takes lm_head.weight when it equals wte.weight (PyTorch's state_dict
  // of a tied model, nanoGPT's by default, lists the weight under both names);
  // a different one is refused.
  void load_state_dict(const std::map<std::string, Tensor>& state) override;

  // Attention weights [N, H, T, T] of every layer's last forward, when kept.
  void keep_attention(bool on);
  std::vector<Tensor> attention_maps() const;

  std::shared_ptr<Embedding> wte;                  // [V, D]
  std::shared_ptr<LearnedPositionalEmbedding> wpe;  // learned positions, or
  std::shared_ptr<SinusoidalPositionalEncoding> wpe_fixed;  // fixed ones (also named "wpe")
  std::vector<std::shared_ptr<TransformerBlock>> blocks;    // registered as "blocks.0", "blocks.1", ...
  std::shared_ptr<LayerNorm> ln_f;
  std::shared_ptr<Linear> lm_head;  // D -> V without bias; null when tied to wte
  GPTOptions options;

 private:
  Tensor embed(const Tensor& ids, int64_t start);
  Tensor head(const Tensor& h);
};

// heed's GPT parameter names and a plain PyTorch GPT's (nanoGPT's layout):
//   wte.weight                      transformer.wte.weight
//   wpe.weight                      transformer.wpe.weight
//   blocks.<i>.ln1 / ln2            transformer.h.<i>.ln_1 / ln_2
//   blocks.<i>.attn.q_proj, k_proj, v_proj
//                                   transformer.h.<i>.attn.c_attn (fused: rows q, k, v)
//   blocks.<i>.attn.out_proj        transformer.h.<i>.attn.c_proj
//   blocks.<i>.ffn.fc1 / fc2        transformer.h.<i>.mlp.c_fc / c_proj
//   ln_f                            transformer.ln_f
//   lm_head.weight                  lm_head.weight
// A name outside this map is an error naming it. from_nanogpt ignores
// nanoGPT's causal-mask buffers (transformer.h.<i>.attn.bias). A tied GPT
// has no lm_head.weight, so neither has its nanoGPT state (PyTorch loads it
// into a tied model with strict=False; Hugging Face's safetensors files drop
// tied duplicates the same way).
//
// nanoGPT's names stand for nanoGPT's model: pre-LN blocks, exact GELU, an
// MLP of 4 D, learned positions, and q, k and v of D rows each in c_attn.
// gpt_to_nanogpt takes the options of the GPT the state is from and refuses
// one that differs (nanogpt_unsupported), as GPT::load_state_dict refuses a
// state under nanoGPT's names for such a GPT: the same names over another
// computation would load into PyTorch's GPT without an error and compute
// something else (and grouped-query attention's c_attn of D + 2 kv rows
// splits into thirds that are not q, k and v).
std::map<std::string, Tensor> gpt_to_nanogpt(const std::map<std::string, Tensor>& state, const GPTOptions& options);
std::map<std::string, Tensor> gpt_from_nanogpt(const std::map<std::string, Tensor>& state);
// What of a GPT with these options nanoGPT's layout cannot hold, naming the
// setting ("post-LN blocks (pre_ln(false)); nanoGPT's are pre-LN"), or "".
std::string nanogpt_unsupported(const GPTOptions& options);

}  // namespace heed::nn
