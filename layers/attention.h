// layers/attention.h: multi-head attention (Vaswani et al. 2017, sec. 3.2),
// batch first, with grouped-query attention (Ainslie et al. 2023), causal
// masking, cross-attention and a key/value cache for generation.
//
//   x [N, T, D] -> Q = x Wq^T [N, H, T, K]            (H heads of width K)
//   kv [N, S, Dk] -> K = kv Wk^T, V = kv Wv^T [N, G, S, K]   (G = kv_heads)
//   A = softmax(Q K^T / sqrt(K)) over S, masked      [N, H, T, S]
//   y = concat_h(A V) Wo^T                           [N, T, D]
// Query head h reads key/value head h / (H / G): each KV head serves H / G
// consecutive query heads (PyTorch's repeat_interleave order). G = H is
// ordinary multi-head attention, G = 1 multi-query attention.
//
// Two paths, the same numbers up to rounding (tests/layers, tests/autograd/
// test_attention_fused.cpp): by default one fused blockwise op,
// scaled_dot_product_attention (online softmax, never the T x S matrix,
// attention dropout drawn inside it); when the maps are kept
// (keep_attention), the composition of matmul, masked_fill, softmax and
// dropout, whose probabilities are then at hand. Both draw the same dropout
// masks from the same generator state.
#pragma once

#include "layers/basic.h"

namespace heed::nn {

struct MultiHeadAttentionOptions {
  MultiHeadAttentionOptions(int64_t d_model, int64_t heads) : d_model_(d_model), heads_(heads) {}
  // Key/value heads; 0 = heads. heads must be a multiple of it.
  MultiHeadAttentionOptions& kv_heads(int64_t g) { kv_heads_ = g; return *this; }
  // Width of one head; 0 = d_model / heads (which must then divide).
  MultiHeadAttentionOptions& head_dim(int64_t k) { head_dim_ = k; return *this; }
  // Position i attends to positions j <= i only.
  MultiHeadAttentionOptions& causal(bool c) { causal_ = c; return *this; }
  // Biases on the four projections (off: the lectures' parameter counts).
  MultiHeadAttentionOptions& bias(bool b) { bias_ = b; return *this; }
  // The scores' factor: 0 (the default) is 1/sqrt(head_dim), as in "Attention
  // is all you need"; 1 is the unscaled dot product (heed run scaling).
  MultiHeadAttentionOptions& scale(double s) { scale_ = s; return *this; }
  // Dropout on the attention weights while training.
  MultiHeadAttentionOptions& dropout(double p) { dropout_ = p; return *this; }
  // Widths of the key and value inputs (cross-attention); 0 = d_model.
  MultiHeadAttentionOptions& kdim(int64_t d) { kdim_ = d; return *this; }
  MultiHeadAttentionOptions& vdim(int64_t d) { vdim_ = d; return *this; }
  // Initialisation (dropout masks use the default generator).
  MultiHeadAttentionOptions& generator(Generator* g) { gen_ = g; return *this; }
  int64_t d_model_, heads_;
  int64_t kv_heads_ = 0, head_dim_ = 0, kdim_ = 0, vdim_ = 0;
  bool causal_ = false, bias_ = false;
  double dropout_ = 0.0, scale_ = 0.0;
  Generator* gen_ = nullptr;
};

// Keys and values of the positions seen so far, per layer, for generation.
// Run generation under NoGradGuard: with grad mode on the cache keeps the
// graph of every step alive.
struct KVCache {
  Tensor k;  // [N, G, L, K]
  Tensor v;  // [N, G, L, K]
  int64_t length() const { return k.defined() ? k.size(2) : 0; }
  void clear() { k = Tensor(); v = Tensor(); }
};

class MultiHeadAttention : public Module {
 public:
  // The constructor resolves the options' defaults (kv_heads, head_dim,
  // kdim, vdim), so `options` holds the actual configuration.
  explicit MultiHeadAttention(const MultiHeadAttentionOptions& o);
  MultiHeadAttention(int64_t d_model, int64_t heads) : MultiHeadAttention(MultiHeadAttentionOptions(d_model, heads)) {}

  // Self-attention: x [N, T, D] -> [N, T, D].
  Tensor forward(const Tensor& x) override;
  // residual + forward(x) (residual [N, T, D]; undefined: forward(x)), the
  // add in the output projection's epilogue when it may (no attention weights
  // kept): the same values as the separate add.
  Tensor forward_add(const Tensor& x, const Tensor& residual);
  // Cross-attention: queries from q_in [N, T, D], keys and values from
  // kv_in [N, S, Dk] (needs kdim == vdim). S may differ from T; causal
  // cross-attention needs S == T.
  Tensor forward(const Tensor& q_in, const Tensor& kv_in);
  // Keys from k_in [N, S, kdim], values from v_in [N, S, vdim].
  Tensor forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in);

  // Generation: x_new [N, t, D] holds the next t positions. Their keys and
  // values are appended to cache, and they attend to everything cached plus
  // themselves, causally. Feeding a sequence chunk by chunk gives forward(x)
  // on the whole sequence. Needs causal = true.
  Tensor forward_cached(const Tensor& x_new, KVCache& cache);

  std::string extra_repr() const override;

  // When on, forward keeps the attention weights [N, H, T, S] (detached,
  // before dropout) for logging. Off by default: then nothing is kept.
  void keep_attention(bool on) { keep_ = on; if (!on) last_attention_ = Tensor(); }
  const Tensor& last_attention() const { return last_attention_; }
  bool keeps_attention() const { return keep_; }

  std::shared_ptr<Linear> q_proj;    // D -> H K
  std::shared_ptr<Linear> k_proj;    // kdim -> G K
  std::shared_ptr<Linear> v_proj;    // vdim -> G K
  std::shared_ptr<Linear> out_proj;  // H K -> D
  MultiHeadAttentionOptions options;

 private:
  void check_input(const Tensor& t, const char* what, int64_t width) const;
  Tensor project(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& residual);
  // q [N, H, T, K], k and v [N, G, S, K], mask [T, S] (1 = hidden) or
  // undefined -> [N, T, D].
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask);
  bool fused() const;
  double active_dropout() const;  // the attention dropout this call applies: 0 outside training

  bool keep_ = false;
  Tensor last_attention_;
};

}  // namespace heed::nn
