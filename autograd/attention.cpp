// autograd/attention.cpp: fused scaled-dot-product attention. Forward keeps
// the output and each query's log-sum-exp; backward recomputes the
// probabilities block by block from them (core/cpu_attention.cpp).
#include "autograd/ops.h"
#include "core/kernels.h"

namespace heed {

namespace k = kernel;

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& key, const Tensor& v, bool causal, double scale,
                                    int64_t block_q, int64_t block_k) {
  k::AttentionOut f = k::attention_forward(q, key, v, causal, scale, block_q, block_k);
  return autograd::record(
      "scaled_dot_product_attention", f.out, {q, key, v},
      [qs = autograd::saved(q), ks = autograd::saved(key), vs = autograd::saved(v), os = autograd::saved(f.out),
       lse = f.lse, causal, scale, block_q, block_k](const Tensor& g, autograd::Grads& gi) {
        k::AttentionGrads d = k::attention_backward(qs, ks, vs, os, lse, g, causal, scale, block_q, block_k);
        gi.set(0, d.dq);
        gi.set(1, d.dk);
        gi.set(2, d.dv);
      });
}

}  // namespace heed
