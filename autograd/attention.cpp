// autograd/attention.cpp: fused scaled-dot-product attention. Forward keeps
// the output and each query's log-sum-exp; backward recomputes the
// probabilities block by block from them (core/cpu_attention.cpp), unless
// all keys fit in one block: then, when a gradient will be needed, the
// forward keeps the probabilities themselves (at most one block of keys per
// query) and the backward skips the scores' product and exponentials.
#include "autograd/ops.h"
#include "core/kernels.h"

namespace heed {

namespace k = kernel;

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& key, const Tensor& v, bool causal, double scale,
                                    int64_t block_q, int64_t block_k) {
  const bool grad = autograd::is_grad_enabled() && (q.requires_grad() || key.requires_grad() || v.requires_grad());
  k::AttentionOut f = k::attention_forward(q, key, v, causal, scale, block_q, block_k, grad);
  return autograd::record(
      "scaled_dot_product_attention", f.out, {q, key, v},
      [qs = autograd::saved(q), ks = autograd::saved(key), vs = autograd::saved(v), os = autograd::saved(f.out),
       lse = f.lse, probs = f.probs, causal, scale, block_q, block_k](const Tensor& g, autograd::Grads& gi) {
        k::AttentionGrads d =
            k::attention_backward(qs, ks, vs, os, lse, g, causal, scale, block_q, block_k, probs);
        gi.set(0, d.dq);
        gi.set(1, d.dk);
        gi.set(2, d.dv);
      });
}

}  // namespace heed
