// layers/attention.cpp
#include "layers/attention.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace heed::nn {

namespace {

// [N, L, n K] -> [N, n, L, K] (a view).
Tensor split_heads(const Tensor& y, int64_t n, int64_t K) {
  return transpose(reshape(y, {y.size(0), y.size(1), n, K}), 1, 2);
}

// Query i of a chunk of t new positions sits at position start + i and sees
// keys 0 .. start + i: mask [t, start + t], 1 where j > start + i. Every row
// keeps at least key 0 (and itself), so no row is ever fully masked.
Tensor causal_mask_from(int64_t t, int64_t start) {
  if (start == 0) return causal_mask(t);
  const int64_t S = start + t;
  Tensor m = Tensor::zeros({t, S});
  float* p = m.data<float>();
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = start + i + 1; j < S; ++j) p[i * S + j] = 1.0f;
  return m;
}

// Masked scores get the dtype's lowest finite value rather than -inf: exp
// underflows to exactly 0 either way (every row keeps one unmasked score),
// and anomaly mode, which rejects any op output holding Inf, stays usable.
double masked_score(DType t) {
  return t == DType::f64 ? std::numeric_limits<double>::lowest()
                         : static_cast<double>(std::numeric_limits<float>::lowest());
}

}  // namespace

MultiHeadAttention::MultiHeadAttention(const MultiHeadAttentionOptions& o) : Module("MultiHeadAttention"), options(o) {
  MultiHeadAttentionOptions& c = options;
  if (c.d_model_ <= 0 || c.heads_ <= 0)
    fail("MultiHeadAttention: d_model and heads must be positive, got d_model={} heads={}", c.d_model_, c.heads_);
  if (c.kv_heads_ < 0 || c.head_dim_ < 0 || c.kdim_ < 0 || c.vdim_ < 0)
    fail("MultiHeadAttention: kv_heads, head_dim, kdim and vdim must be positive (or 0 for the default), got "
         "kv_heads={} head_dim={} kdim={} vdim={}",
         c.kv_heads_, c.head_dim_, c.kdim_, c.vdim_);
  if (c.head_dim_ == 0) {
    if (c.d_model_ % c.heads_ != 0)
      fail("MultiHeadAttention: d_model={} is not divisible by heads={} (set head_dim to use another head width)",
           c.d_model_, c.heads_);
    c.head_dim_ = c.d_model_ / c.heads_;
  }
  if (c.kv_heads_ == 0) c.kv_heads_ = c.heads_;
  if (c.heads_ % c.kv_heads_ != 0)
    fail("MultiHeadAttention: heads={} is not divisible by kv_heads={} (each key/value head serves an equal group "
         "of query heads)",
         c.heads_, c.kv_heads_);
  if (c.kdim_ == 0) c.kdim_ = c.d_model_;
  if (c.vdim_ == 0) c.vdim_ = c.d_model_;
  if (!(c.dropout_ >= 0.0 && c.dropout_ < 1.0))
    fail("MultiHeadAttention: dropout {} out of range (expected 0 <= p < 1)", c.dropout_);
  if (!(c.scale_ >= 0.0 && std::isfinite(c.scale_)))
    fail("MultiHeadAttention: scale {} out of range (expected > 0, or 0 for 1/sqrt(head_dim))", c.scale_);
  if (c.scale_ == 0.0) c.scale_ = 1.0 / std::sqrt(static_cast<double>(c.head_dim_));

  const int64_t HK = c.heads_ * c.head_dim_, GK = c.kv_heads_ * c.head_dim_;
  auto linear = [&](int64_t in, int64_t out) {
    return std::make_shared<Linear>(LinearOptions(in, out).bias(c.bias_).generator(c.gen_));
  };
  q_proj = register_module("q_proj", linear(c.d_model_, HK));
  k_proj = register_module("k_proj", linear(c.kdim_, GK));
  v_proj = register_module("v_proj", linear(c.vdim_, GK));
  out_proj = register_module("out_proj", linear(HK, c.d_model_));
}

std::string MultiHeadAttention::extra_repr() const {
  const auto& c = options;
  std::string s = fmt::format("d_model={}, heads={}, kv_heads={}, head_dim={}", c.d_model_, c.heads_, c.kv_heads_,
                              c.head_dim_);
  if (c.kdim_ != c.d_model_ || c.vdim_ != c.d_model_) s += fmt::format(", kdim={}, vdim={}", c.kdim_, c.vdim_);
  s += fmt::format(", causal={}, bias={}", c.causal_ ? "True" : "False", c.bias_ ? "True" : "False");
  if (c.dropout_ > 0) s += fmt::format(", dropout={}", c.dropout_);
  if (std::abs(c.scale_ * std::sqrt(static_cast<double>(c.head_dim_)) - 1.0) > 1e-12) s += fmt::format(", scale={}", c.scale_);
  return s;
}

void MultiHeadAttention::check_input(const Tensor& t, const char* what, int64_t width) const {
  if (!t.defined()) fail("MultiHeadAttention({}): the {} input is undefined", extra_repr(), what);
  if (t.dim() != 3 || t.size(2) != width)
    fail("MultiHeadAttention({}): expected {} [N, {}, {}], got {}", extra_repr(), what,
         std::string(what) == "query" ? "T" : "S", width, shape_str(t.shape()));
}

Tensor MultiHeadAttention::forward(const Tensor& x) { return forward_add(x, Tensor()); }

Tensor MultiHeadAttention::forward(const Tensor& q_in, const Tensor& kv_in) {
  if (options.kdim_ != options.vdim_)
    fail("MultiHeadAttention({}): one key/value input needs kdim == vdim; call forward(q_in, k_in, v_in)",
         extra_repr());
  return forward(q_in, kv_in, kv_in);
}

Tensor MultiHeadAttention::forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in) {
  return project(q_in, k_in, v_in, Tensor());
}

Tensor MultiHeadAttention::forward_add(const Tensor& x, const Tensor& residual) {
  if (options.kdim_ != options.d_model_ || options.vdim_ != options.d_model_)
    fail("MultiHeadAttention({}): self-attention needs kdim == vdim == d_model; call forward(q_in, k_in, v_in)",
         extra_repr());
  if (x.defined() && residual.defined() && residual.shape() != x.shape())
    fail("MultiHeadAttention({}): the residual to add is {}, expected the input's {}", extra_repr(),
         shape_str(residual.shape()), shape_str(x.shape()));
  return project(x, x, x, residual);
}

// forward(q_in, k_in, v_in), plus residual (when defined) after the output
// projection: in its epilogue on the fused path, else a separate add.
Tensor MultiHeadAttention::project(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                   const Tensor& residual) {
  const auto& c = options;
  check_input(q_in, "query", c.d_model_);
  check_input(k_in, "key", c.kdim_);
  check_input(v_in, "value", c.vdim_);
  const int64_t N = q_in.size(0), T = q_in.size(1), S = k_in.size(1);
  if (k_in.size(0) != N || v_in.size(0) != N || v_in.size(1) != S)
    fail("MultiHeadAttention({}): query {}, key {} and value {} disagree on the batch or the key length", extra_repr(),
         shape_str(q_in.shape()), shape_str(k_in.shape()), shape_str(v_in.shape()));
  if (c.causal_ && S != T)
    fail("MultiHeadAttention({}): causal attention needs as many keys as queries, got T={} queries and S={} keys",
         extra_repr(), T, S);
  const double scale = c.scale_;
  if (fused() && q_in.impl() == k_in.impl() && k_in.impl() == v_in.impl()) {
    // Self-attention: the three projections as one product, x [W_q; W_k;
    // W_v]^T, which the attention reads in place and whose gradient it
    // writes as one: x is packed once, not three times, and dX is one
    // product over the three. Training steps alternating with the three
    // projections in pairs of steps in one process: GPT-256 bf16 +2.0, +0.3,
    // -0.6, +2.0, +2.4%, float32 +0.7%; GPT-128 bf16 +0.8, +1.0, +0.4, +0.1,
    // -0.2%, float32 -0.1, +0.8, +0.3, +0.8, -1.1%, AVX2 path -0.3, +1.4%: a
    // wash there, where concatenating the weights and copying their
    // gradients into owned tensors takes back what the one product saves.
    Tensor w = concat({q_proj->weight, k_proj->weight, v_proj->weight}, 0);
    Tensor b = c.bias_ ? concat({q_proj->bias, k_proj->bias, v_proj->bias}, 0) : Tensor();
    Tensor o = scaled_dot_product_attention_qkv(linear(q_in, w, b), c.heads_, c.kv_heads_, c.causal_, scale,
                                                active_dropout());
    Tensor o2 = reshape(o, {N, T, c.heads_ * c.head_dim_});
    return residual.defined() ? out_proj->forward_add(o2, residual) : out_proj->forward(o2);
  }
  if (fused()) {
    Tensor q = reshape(q_proj->forward(q_in), {N, T, c.heads_, c.head_dim_});     // [N, T, H, K]
    Tensor k = reshape(k_proj->forward(k_in), {N, S, c.kv_heads_, c.head_dim_});  // [N, S, G, K]
    Tensor v = reshape(v_proj->forward(v_in), {N, S, c.kv_heads_, c.head_dim_});  // [N, S, G, K]
    Tensor o = scaled_dot_product_attention(q, k, v, c.causal_, scale, 0, 0, active_dropout());  // [N, T, H, K]
    Tensor o2 = reshape(o, {N, T, c.heads_ * c.head_dim_});
    return residual.defined() ? out_proj->forward_add(o2, residual) : out_proj->forward(o2);
  }
  Tensor q = split_heads(q_proj->forward(q_in) * scale, c.heads_, c.head_dim_);  // [N, H, T, K]
  Tensor k = split_heads(k_proj->forward(k_in), c.kv_heads_, c.head_dim_);       // [N, G, S, K]
  Tensor v = split_heads(v_proj->forward(v_in), c.kv_heads_, c.head_dim_);       // [N, G, S, K]
  Tensor y = attend(q, k, v, c.causal_ ? causal_mask(T) : Tensor());
  return residual.defined() ? residual + y : y;
}

// The fused kernel serves every call except those that keep the maps,
// which need the probabilities themselves. It applies dropout itself, with
// the masks the plain path's dropout would draw.
bool MultiHeadAttention::fused() const { return !keep_; }
double MultiHeadAttention::active_dropout() const { return is_training() ? options.dropout_ : 0.0; }

Tensor MultiHeadAttention::forward_cached(const Tensor& x_new, KVCache& cache) {
  const auto& c = options;
  if (!c.causal_)
    fail("MultiHeadAttention({}): forward_cached generates left to right and needs causal=True", extra_repr());
  if (c.kdim_ != c.d_model_ || c.vdim_ != c.d_model_)
    fail("MultiHeadAttention({}): forward_cached is self-attention and needs kdim == vdim == d_model", extra_repr());
  check_input(x_new, "query", c.d_model_);
  const int64_t N = x_new.size(0), t = x_new.size(1);
  const double scale = c.scale_;
  Tensor q = split_heads(q_proj->forward(x_new), c.heads_, c.head_dim_);          // [N, H, t, K]
  Tensor k = split_heads(k_proj->forward(x_new), c.kv_heads_, c.head_dim_);       // [N, G, t, K]
  Tensor v = split_heads(v_proj->forward(x_new), c.kv_heads_, c.head_dim_);       // [N, G, t, K]
  const int64_t start = cache.length();
  if (start > 0) {
    const Shape want{N, c.kv_heads_, start, c.head_dim_};
    if (cache.k.shape() != want || !cache.v.defined() || cache.v.shape() != want || cache.k.dtype() != k.dtype())
      fail("MultiHeadAttention({}): the cache holds keys {} and values {} ({}), expected {} ({}) for input {}",
           extra_repr(), shape_str(cache.k.shape()), cache.v.defined() ? shape_str(cache.v.shape()) : "undefined",
           dtype_name(cache.k.dtype()), shape_str(want), dtype_name(k.dtype()), shape_str(x_new.shape()));
    k = concat({cache.k, k}, 2);  // [N, G, start + t, K]
    v = concat({cache.v, v}, 2);
  } else {
    k = contiguous(k);
    v = contiguous(v);
  }
  cache.k = k;
  cache.v = v;
  if (fused()) {  // causal with the prefix: query i sees keys j <= start + i
    Tensor o = scaled_dot_product_attention(transpose(q, 1, 2), transpose(k, 1, 2), transpose(v, 1, 2), true,
                                            scale, 0, 0, active_dropout());  // [N, t, H, K]
    return out_proj->forward(reshape(o, {N, t, c.heads_ * c.head_dim_}));
  }
  q = q * scale;
  // A single new position may see every cached one: no mask needed.
  return attend(q, k, v, t > 1 ? causal_mask_from(t, start) : Tensor());
}

Tensor MultiHeadAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask) {
  const int64_t N = q.size(0), H = q.size(1), T = q.size(2), K = q.size(3);
  const int64_t G = k.size(1), S = k.size(2), r = H / G;
  // The r query heads that share a KV head are stacked along the rows, so
  // each KV head takes part in one GEMM and is never copied r times.
  Tensor scores = matmul(reshape(q, {N, G, r * T, K}), transpose(k, -1, -2));  // [N, G, r T, S]
  scores = reshape(scores, {N, H, T, S});
  if (mask.defined()) scores = masked_fill(scores, mask, masked_score(scores.dtype()));
  Tensor a = softmax(scores, -1);  // [N, H, T, S], over keys
  if (keep_) last_attention_ = detach(a);
  a = dropout(a, options.dropout_, is_training());
  Tensor o = matmul(reshape(a, {N, G, r * T, S}), v);               // [N, G, r T, K]
  o = reshape(transpose(reshape(o, {N, H, T, K}), 1, 2), {N, T, H * K});  // [N, T, H K]
  return out_proj->forward(o);
}

}  // namespace heed::nn
