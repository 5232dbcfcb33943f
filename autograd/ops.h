// autograd/ops.h: the differentiable ops. Each family lives in its own file
// (autograd/<family>.cpp) with forward and backward side by side.
//
// All ops accept any strided view and broadcast NumPy-style where noted;
// gradients of broadcast inputs are summed back to the input's shape.
#pragma once

#include <vector>

#include "autograd/activation.h"
#include "autograd/autograd.h"
#include "core/tensor.h"

namespace heed {

class Generator;

// ---- element-wise (autograd/elementwise.cpp); binary ops broadcast ----
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor sub(const Tensor& a, double s);
Tensor rsub(double s, const Tensor& a);  // s - a
Tensor mul(const Tensor& a, double s);
Tensor div(const Tensor& a, double s);
Tensor rdiv(double s, const Tensor& a);  // s / a
Tensor neg(const Tensor& a);
Tensor pow(const Tensor& a, double exponent);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor sin(const Tensor& a);
Tensor cos(const Tensor& a);
// Activations (also by enum: activation(x, Activation::silu), autograd/activation.h).
Tensor sigmoid(const Tensor& a);
Tensor relu(const Tensor& a);
enum class GeluApprox { erf, tanh };
Tensor gelu(const Tensor& a, GeluApprox approx = GeluApprox::erf);
Tensor silu(const Tensor& a);  // x sigmoid(x), PyTorch's silu (swish)

// Both operands of one dtype (broadcast). On int64 tensors, arithmetic wraps
// around (two's complement) and / truncates toward zero, as C++'s does
// (PyTorch's / gives a float there, its // floors); a divisor 0 is refused,
// and so is a number that is no int64 value (a + 0.5: convert a first).
// An op that saves a tensor for its backward notes its version
// (Storage::version): changing that tensor in place in between (an optimiser
// step before a second backward with retain_graph, a targets buffer refilled)
// makes backward refuse the graph, naming the op, before any gradient changes.
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double s);
Tensor operator-(const Tensor& a, double s);
Tensor operator*(const Tensor& a, double s);
Tensor operator/(const Tensor& a, double s);
Tensor operator+(double s, const Tensor& a);
Tensor operator-(double s, const Tensor& a);
Tensor operator*(double s, const Tensor& a);
Tensor operator/(double s, const Tensor& a);
Tensor operator-(const Tensor& a);

// ---- linear algebra (autograd/matmul.cpp) ----
// [.., M, K] x [.., K, N] -> [.., M, N], batch dims broadcast; 1-D operands
// are treated as a row (left) or column (right) vector and that dim dropped.
Tensor matmul(const Tensor& a, const Tensor& b);
// x [.., I] w^T + b with w [O, I], b [O] or undefined: a Linear layer's
// product and bias in one pass (the bias added in the GEMM's epilogue).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());
// residual + linear(x, w, b) (residual: the output's shape; undefined: plain
// linear) in the same pass, the residual added in the GEMM's epilogue after
// the bias: the values of the separate add, bit for bit, without its pass
// over memory (a transformer block's output projections,
// nn::Linear::forward_add). Its gradient is the output's.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& residual);
// linear(activation(a, act), w, b, residual) as one op: the same values and
// gradients, bit for bit. For the GELUs, whose forward keeps f'(a) (as
// gelu()), the backward multiplies f'(a) into dX = dY w in the product's
// epilogue instead of a pass of its own over dX (a transformer's
// feed-forward: nn::FeedForward), where that measured faster (AVX2; with
// AVX-512 and in bf16 the multiply is a pass after the product); other
// activations run the two ops.
Tensor activation_linear(const Tensor& a, Activation act, const Tensor& w, const Tensor& b = Tensor(),
                         const Tensor& residual = Tensor());

// ---- convolution (autograd/conv.cpp) ----
// x [N, C, T], w [O, C, K], b [O] or undefined -> [N, O, T'].
Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), int64_t stride = 1, int64_t padding = 0,
              int64_t dilation = 1);
// relu(conv1d(...)) in one pass (the layer nn::Conv1dReLU); the same values
// and gradients.
Tensor conv1d_relu(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), int64_t stride = 1,
                   int64_t padding = 0, int64_t dilation = 1);

// ---- normalisation (autograd/layernorm.cpp) ----
// Layer normalisation over the last dim: x [.., D], weight and bias [D] (either
// may be undefined: scale 1, shift 0) -> [.., D]; biased variance, as PyTorch.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

// ---- shape (autograd/shape.cpp): views where possible ----
Tensor reshape(const Tensor& t, const Shape& shape);  // one -1 allowed
Tensor view(const Tensor& t, const Shape& shape);     // throws if a copy would be needed
Tensor flatten(const Tensor& t, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor permute(const Tensor& t, const std::vector<int64_t>& dims);
Tensor transpose(const Tensor& t, int64_t d0, int64_t d1);
Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length);
Tensor expand(const Tensor& t, const Shape& shape);
Tensor unsqueeze(const Tensor& t, int64_t dim);
Tensor squeeze(const Tensor& t, int64_t dim);
Tensor contiguous(const Tensor& t);
// Always a fresh copy (contiguous), the gradient passing through: a tensor
// to change in place without touching what an op saved (torch.clone).
Tensor clone(const Tensor& t);
Tensor concat(const std::vector<Tensor>& ts, int64_t dim);
// Pieces of `size` along dim (the last may be shorter), as views.
std::vector<Tensor> split(const Tensor& t, int64_t size, int64_t dim);
// Pieces of the given sizes along dim (must sum to the dim's size).
std::vector<Tensor> split(const Tensor& t, const std::vector<int64_t>& sizes, int64_t dim);

// ---- indexing (autograd/index.cpp) ----
Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index);
// weight [V, D] gathered by int64 ids of any shape [..] -> [.., D].
Tensor embedding(const Tensor& weight, const Tensor& ids);

// ---- reductions (autograd/reduce.cpp); empty dims = all dims ----
Tensor sum(const Tensor& t, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& t, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Maximum over dims; the gradient is shared equally among tied maxima.
Tensor max(const Tensor& t, const std::vector<int64_t>& dims = {}, bool keepdim = false);

// ---- softmax family (autograd/softmax.cpp) ----
Tensor softmax(const Tensor& t, int64_t dim);
Tensor log_softmax(const Tensor& t, int64_t dim);

// ---- masking (autograd/mask.cpp) ----
// value where mask (broadcast to t; nonzero = true), else t. No gradient
// flows to masked positions. causal_mask(T) is [T, T], 1 above the diagonal.
Tensor masked_fill(const Tensor& t, const Tensor& mask, double value);
Tensor causal_mask(int64_t T);

// ---- selection, comparison, conversion (autograd/select.cpp) ----
// |a|; the gradient at 0 is 0 (as PyTorch).
Tensor abs(const Tensor& a);
// Clamped to [min, max] (min <= max); the gradient passes where min <= t <= max
// and is 0 where t was clamped. clamp_min / clamp_max bound one side only.
Tensor clamp(const Tensor& t, double min, double max);
Tensor clamp_min(const Tensor& t, double min);
Tensor clamp_max(const Tensor& t, double max);
// a where cond (any dtype, nonzero = true) else b, all three broadcast; the
// gradient goes to whichever branch was chosen. cond gets none.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
Tensor where(const Tensor& cond, double a, const Tensor& b);
// Comparisons, broadcasting, without gradient: 1 where true, else 0, in the
// operands' dtype (heed has no bool dtype), ready for where() and masked_fill.
// There is deliberately no operator== / != on tensors: those would read as
// "is the same tensor"; write eq(a, b) / ne(a, b).
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double s);
Tensor ne(const Tensor& a, double s);
Tensor lt(const Tensor& a, double s);
Tensor le(const Tensor& a, double s);
Tensor gt(const Tensor& a, double s);
Tensor ge(const Tensor& a, double s);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, double s);
Tensor operator<=(const Tensor& a, double s);
Tensor operator>(const Tensor& a, double s);
Tensor operator>=(const Tensor& a, double s);
// Index (int64) of the largest element along dim, the first on ties; no gradient.
Tensor argmax(const Tensor& t, int64_t dim, bool keepdim = false);
// t converted to dtype (t itself when it already has it). Between f32 and f64
// it is differentiable (the gradient is converted back); to or from i64 it
// carries no gradient.
Tensor to(const Tensor& t, DType dtype);
// New tensors of t's shape and dtype (never requiring grad).
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);

// ---- fused attention (autograd/attention.cpp) ----
// softmax(scale q k^T, causal or not) v without materialising the score
// matrix (blockwise, online softmax; see core/cpu_attention.cpp).
// q [N, T, H, K], k [N, S, G, K], v [N, S, G, E] -> [N, T, H, E].
// Causal: query i sees keys j <= i + S - T, so it needs S >= T (fewer keys
// would leave the first queries none: refused, where PyTorch gives NaN rows).
// Block sizes 0: the default.
// dropout_p > 0: dropout on the attention probabilities (whenever given,
// as in PyTorch: pass 0 outside training), with the masks dropout() on the
// probabilities would draw from gen (the default generator when null): the
// same values as the plain path up to rounding, still O(T) memory.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                                    int64_t block_q = 0, int64_t block_k = 0, double dropout_p = 0.0,
                                    Generator* gen = nullptr);
// The same from one projection's output qkv [N, T, (heads + 2 kv_heads) K]
// (q's heads, then k's, then v's: x times the three weights stacked), read
// in place; its gradient comes back as one tensor laid out as qkv, so that
// the projection's backward is one product, not three. -> [N, T, heads, K].
Tensor scaled_dot_product_attention_qkv(const Tensor& qkv, int64_t heads, int64_t kv_heads, bool causal,
                                        double scale, double dropout_p = 0.0, Generator* gen = nullptr);

// ---- losses (autograd/loss.cpp) ----
// Mean cross-entropy; logits [.., V], targets int64 [..]; rows whose target is
// ignore_index count neither in the sum nor in the mean.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);
// mean((a - b)^2); shapes must match exactly (no silent broadcasting).
Tensor mse_loss(const Tensor& a, const Tensor& b);

// ---- regularisation (autograd/dropout.cpp) ----
// Training: zero each element with probability p and scale survivors by
// 1/(1-p), drawing from gen (the default generator when null). Eval: identity.
Tensor dropout(const Tensor& t, double p, bool training, Generator* gen = nullptr);

}  // namespace heed
