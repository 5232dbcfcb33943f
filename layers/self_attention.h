// layers/self_attention.h: the lectures' single-head self-attention over a
// channels-first sequence (Fleuret's toy attention model).
//
//   x [N, C, T]  ->  Q = Wq x [N, K, T], K = Wk x [N, K, T], V = Wv x [N, O, T]
//   A = softmax over keys of Q^T K   [N, T(query), T(key)]   (optionally / sqrt(K))
//   y = (A V^T)^T = V A^T            [N, O, T]
// Wq, Wk, Wv are 1x1 convolutions without bias ("conv_q", "conv_k", "conv_v").
// Unless the map is kept, A is never formed: the fused blockwise kernel
// (scaled_dot_product_attention) reads Q, K, V channels-first as they are and
// returns y channels-first.
#pragma once

#include "layers/basic.h"

namespace heed::nn {

struct SelfAttentionOptions {
  SelfAttentionOptions(int64_t in, int64_t out, int64_t key) : in_(in), out_(out), key_(key) {}
  // The reference experiment does not scale; the lectures' general form does.
  SelfAttentionOptions& scaled(bool s) { scaled_ = s; return *this; }
  SelfAttentionOptions& generator(Generator* g) { gen_ = g; return *this; }
  int64_t in_, out_, key_;
  bool scaled_ = false;
  Generator* gen_ = nullptr;
};

class SelfAttention : public Module {
 public:
  explicit SelfAttention(const SelfAttentionOptions& o);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  // When on, forward keeps the attention matrix A [N, T, T] (detached) for
  // logging, through the unfused path. Off by default: then nothing is kept
  // and the fused kernel runs.
  void keep_attention(bool on) { keep_ = on; if (!on) last_attention_ = Tensor(); }
  const Tensor& last_attention() const { return last_attention_; }
  bool keeps_attention() const { return keep_; }

  std::shared_ptr<Conv1d> conv_q, conv_k, conv_v;
  SelfAttentionOptions options;

 private:
  bool keep_ = false;
  Tensor last_attention_;
};

}  // namespace heed::nn
