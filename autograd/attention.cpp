// autograd/attention.cpp: fused scaled-dot-product attention. Forward keeps
// the output and each query's log-sum-exp; backward recomputes the
// probabilities block by block from them (core/cpu_attention.cpp), unless
// all keys fit in one block: then, when a gradient will be needed, the
// forward keeps the probabilities themselves (at most one block of keys per
// query) and the backward skips the scores' product and exponentials.
// Dropout on the probabilities claims the generator's blocks of an
// [N, H, T, S] fill, the ones dropout() on softmax's output would, and the
// kernels draw each mask where they use it, forward and backward.
#include "autograd/ops.h"
#include "core/error.h"
#include "core/kernels.h"
#include "core/random.h"

namespace heed {

namespace k = kernel;

namespace {

// The forward with dropout_p's masks claimed from gen (the default
// generator when null): given back if the kernel refuses the call, so a
// refused call leaves the generator as it was.
template <class F>
k::AttentionOut forward_dropping(const char* op, double dropout_p, Generator* gen, int64_t N, int64_t H, int64_t T,
                                 int64_t S, k::AttentionDrop& drop, F&& forward) {
  if (!(dropout_p >= 0.0 && dropout_p <= 1.0)) fail("{}: dropout_p {} out of range (expected 0 <= p <= 1)", op, dropout_p);
  if (dropout_p == 0.0) return forward();
  Generator& g = gen ? *gen : default_generator();
  const std::vector<uint64_t> before = g.state();
  // p = 1 drops everything and draws nothing, as dropout() does.
  drop = {dropout_p, g.seed(), dropout_p < 1.0 ? g.reserve_batch(static_cast<uint64_t>(N * H * T * S)) : 0};
  try {
    return forward();
  } catch (...) {
    g.set_state(before);
    throw;
  }
}

int64_t size_or_0(const Tensor& t, int64_t d) { return t.defined() && t.dim() > d ? t.size(d) : 0; }

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& key, const Tensor& v, bool causal, double scale,
                                    int64_t block_q, int64_t block_k, double dropout_p, Generator* gen) {
  const bool grad = autograd::is_grad_enabled() && (q.requires_grad() || key.requires_grad() || v.requires_grad());
  k::AttentionDrop drop;
  k::AttentionOut f = forward_dropping(
      "scaled_dot_product_attention", dropout_p, gen, size_or_0(q, 0), size_or_0(q, 2), size_or_0(q, 1), size_or_0(key, 1), drop,
      [&] { return k::attention_forward(q, key, v, causal, scale, block_q, block_k, grad, drop); });
  return autograd::record(
      "scaled_dot_product_attention", f.out, {q, key, v},
      [qs = autograd::saved(q), ks = autograd::saved(key), vs = autograd::saved(v), os = autograd::saved(f.out),
       lse = f.lse, probs = f.probs, causal, scale, block_q, block_k, drop](const Tensor& g, autograd::Grads& gi) {
        k::AttentionGrads d = k::attention_backward(qs, ks, vs, os, lse, g, causal, scale, block_q, block_k, probs,
                                                    nullptr, drop);
        gi.set(0, d.dq);
        gi.set(1, d.dk);
        gi.set(2, d.dv);
      });
}

namespace {

// Heads [first, first + n) of a [N, L, heads K] projection: a [N, L, n, K] view.
Tensor heads_of(const Tensor& t, int64_t first, int64_t n, int64_t K) {
  return k::view(k::narrow(t, 2, first * K, n * K), {t.size(0), t.size(1), n, K});
}

}  // namespace

Tensor scaled_dot_product_attention_qkv(const Tensor& qkv, int64_t heads, int64_t kv_heads, bool causal,
                                        double scale, double dropout_p, Generator* gen) {
  if (!qkv.defined()) fail("scaled_dot_product_attention_qkv: the projection is undefined");
  const int64_t parts = heads + 2 * kv_heads;
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0 || qkv.dim() != 3 || qkv.size(2) % parts != 0 ||
      qkv.size(2) == 0)
    fail("scaled_dot_product_attention_qkv: expected [N, T, (heads + 2 kv_heads) K] with heads a positive multiple "
         "of kv_heads, got {} with heads={} kv_heads={}",
         shape_str(qkv.shape()), heads, kv_heads);
  const int64_t H = heads, G = kv_heads, K = qkv.size(2) / parts;
  const bool grad = autograd::is_grad_enabled() && qkv.requires_grad();
  k::AttentionDrop drop;
  k::AttentionOut f = forward_dropping("scaled_dot_product_attention_qkv", dropout_p, gen, qkv.size(0), H, qkv.size(1),
                                       qkv.size(1), drop, [&] {
    return k::attention_forward(heads_of(qkv, 0, H, K), heads_of(qkv, H, G, K), heads_of(qkv, H + G, G, K), causal,
                                scale, 0, 0, grad, drop);
  });
  return autograd::record(
      "scaled_dot_product_attention", f.out, {qkv},
      [s = autograd::saved(qkv), os = autograd::saved(f.out), lse = f.lse, probs = f.probs, H, G, K, causal, scale,
       drop](const Tensor& g, autograd::Grads& gi) {
        // dq, dk and dv written straight into one gradient laid out as qkv:
        // the projection's backward reads it as one [N T, (H + 2 G) K] dY.
        Tensor d = Tensor::empty(s.shape(), s.dtype());
        const k::AttentionGrads into{heads_of(d, 0, H, K), heads_of(d, H, G, K), heads_of(d, H + G, G, K)};
        k::attention_backward(heads_of(s, 0, H, K), heads_of(s, H, G, K), heads_of(s, H + G, G, K), os, lse, g,
                              causal, scale, 0, 0, probs, &into, drop);
        gi.set(0, d);
      });
}

}  // namespace heed
