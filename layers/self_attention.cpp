// layers/self_attention.cpp
#include "layers/self_attention.h"

#include <cmath>

#include "core/error.h"

namespace heed::nn {

SelfAttention::SelfAttention(const SelfAttentionOptions& o) : Module("SelfAttention"), options(o) {
  if (o.in_ <= 0 || o.out_ <= 0 || o.key_ <= 0)
    fail("SelfAttention: channel counts must be positive, got in={} out={} key={}", o.in_, o.out_, o.key_);
  auto proj = [&](int64_t out) { return std::make_shared<Conv1d>(Conv1dOptions(o.in_, out, 1).bias(false).generator(o.gen_)); };
  conv_q = register_module("conv_q", proj(o.key_));
  conv_k = register_module("conv_k", proj(o.key_));
  conv_v = register_module("conv_v", proj(o.out_));
}

Tensor SelfAttention::forward(const Tensor& x) {
  check_defined(x, "SelfAttention");
  if (x.dim() != 3 || x.size(1) != options.in_)
    fail("SelfAttention({}): expected input [N, {}, T], got {}", extra_repr(), options.in_, shape_str(x.shape()));
  const double scale = options.scaled_ ? 1.0 / std::sqrt(static_cast<double>(options.key_)) : 1.0;
  auto rows = [](const Tensor& t) { return unsqueeze(transpose(t, 1, 2), 2); };  // [N, C, T] -> [N, T, 1, C]
  const int64_t C = options.in_;
  if (!keep_ && options.key_ >= C) {
    // The scores only need Q^T K = x^T (Wq^T Wk) x: with key width >= input
    // width, projecting x once by M = Wq^T Wk [C, C] costs no more than one
    // of the two projections, and the other is x itself. The same function
    // (rounded differently); gradients reach Wq and Wk through M.
    Tensor m = matmul(transpose(reshape(conv_q->weight, {options.key_, C}), 0, 1),
                      reshape(conv_k->weight, {options.key_, C}));                      // [C, C]
    Tensor km = conv1d(x, reshape(m, {C, C, 1}), Tensor(), 1, 0, 1);                     // [N, C, T]: M x
    Tensor v = conv_v->forward(x);                                                       // [N, O, T]
    Tensor o = scaled_dot_product_attention(rows(x), rows(km), rows(v), false, scale);  // [N, T, 1, O]
    return transpose(squeeze(o, 2), 1, 2);                                               // [N, O, T]
  }
  Tensor q = conv_q->forward(x);  // [N, K, T]
  Tensor k = conv_k->forward(x);  // [N, K, T]
  Tensor v = conv_v->forward(x);  // [N, O, T]
  if (!keep_) {
    // Nobody asked for the map: the fused blockwise kernel never builds the
    // T x T matrix and reads the channels-first layout as it is.
    Tensor o = scaled_dot_product_attention(rows(q), rows(k), rows(v), false, scale);  // [N, T, 1, O]
    return transpose(squeeze(o, 2), 1, 2);                                              // [N, O, T]
  }
  Tensor scores = matmul(transpose(q, 1, 2), k);  // [N, T, T]: row = query, column = key
  if (options.scaled_) scores = scores * scale;
  Tensor a = softmax(scores, -1);                // over keys
  if (keep_) last_attention_ = detach(a);
  return matmul(v, transpose(a, 1, 2));          // [N, O, T]
}

std::string SelfAttention::extra_repr() const {
  return fmt::format("in_channels={}, out_channels={}, key_channels={}, scaled={}", options.in_, options.out_,
                     options.key_, options.scaled_ ? "True" : "False");
}

}  // namespace heed::nn
