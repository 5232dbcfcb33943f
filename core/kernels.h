// core/kernels.h: the backend layer. Every numeric kernel heed runs is declared
// here; implementations live in core/cpu_*.cpp and call OpenBLAS / oneDNN /
// hand-written loops. Nothing above core/ calls a numeric library directly.
//
// These functions know nothing about autograd: they take tensors and return new
// tensors (or write into a destination). The differentiable ops in autograd/
// are built from them.
//
// Conventions:
//  - Inputs may be any strided view; outputs are fresh contiguous tensors.
//  - Binary ops broadcast NumPy-style; operands must share a dtype.
//  - Loops are OpenMP-parallel above kParallelGrain elements and deterministic:
//    each output element is computed by one thread in a fixed order, so the
//    numbers do not depend on the thread count.
#pragma once

#include <utility>
#include <vector>

#include "core/random.h"
#include "core/runtime.h"
#include "core/tensor.h"

namespace heed::kernel {

constexpr int64_t kParallelGrain = 32768;

// ---- views: no copy; share storage ----
// Shape may hold one -1 (inferred). view() throws when strides do not allow a
// view; reshape() falls back to a copy.
Shape infer_shape(const Shape& shape, int64_t numel, const char* op);
Tensor view(const Tensor& t, const Shape& shape);
Tensor reshape(const Tensor& t, const Shape& shape);
Tensor permute(const Tensor& t, const std::vector<int64_t>& dims);
Tensor transpose(const Tensor& t, int64_t d0, int64_t d1);
Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length);
Tensor expand(const Tensor& t, const Shape& shape);  // size-1 dims -> stride 0
Tensor unsqueeze(const Tensor& t, int64_t dim);
Tensor squeeze(const Tensor& t, int64_t dim);

// The broadcast shape of a and b, or an error naming op and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// ---- copies and fills ----
Tensor contiguous(const Tensor& t);  // t itself when already contiguous
Tensor clone(const Tensor& t);       // always a fresh copy
// An uninitialised tensor of t's shape and dtype laid out in t's memory order
// when t is dense (a permutation of a contiguous layout, e.g. channels-last
// [N, C, T] with C unit-stride), else contiguous. Element-wise ops allocate
// their results this way, so a layout chosen by a kernel (conv1d) survives
// the activations between kernels instead of being transposed back.
Tensor empty_like_dense(const Tensor& t, DType dtype);
inline Tensor empty_like_dense(const Tensor& t) { return empty_like_dense(t, t.dtype()); }
void copy_(const Tensor& dst, const Tensor& src);  // src broadcast to dst's shape, dtype converted
Tensor to_dtype(const Tensor& t, DType dtype);
void fill_(const Tensor& t, double value);

// ---- element-wise ----
enum class Binary { add, sub, mul, div, pow, maximum, minimum, eq, ne, lt, le, gt, ge };
const char* binary_name(Binary op);
Tensor binary(Binary op, const Tensor& a, const Tensor& b);
// a op s, or s op a when scalar_first (e.g. 1 - a, 2 / a).
Tensor binary_scalar(Binary op, const Tensor& a, double s, bool scalar_first = false);
// dst += alpha * src (src broadcast to dst). Used to accumulate gradients.
void add_(const Tensor& dst, const Tensor& src, double alpha = 1.0);
// dst *= s
void scale_(const Tensor& dst, double s);
// dst *= src, element by element (src broadcast to dst): the bits of
// binary(mul, dst, src) written over dst.
void mul_(const Tensor& dst, const Tensor& src);

enum class Unary { neg, exp, log, sqrt, tanh, sigmoid, relu, gelu_tanh, gelu_erf, silu, abs, square, reciprocal, sin, cos };
const char* unary_name(Unary op);
Tensor unary(Unary op, const Tensor& x);
// y = f(x) and, from the same pass, derivative = f'(x), for the ops whose
// f'(x) shares f's work (the GELUs: one erf or tanh for both). The backward is
// then g * f'(x), one multiply, with the bits of unary_backward(op, x, g).
bool unary_has_derivative_pass(Unary op);
Tensor unary_with_derivative(Unary op, const Tensor& x, Tensor& derivative);
// Whether unary_backward wants the op's output y (true) or its input x (false):
// exp, tanh, sigmoid, sqrt, reciprocal read y; the rest read x.
bool unary_backward_uses_output(Unary op);
// dL/dx = g * f'(.) with f' evaluated from `saved` (x or y as above).
Tensor unary_backward(Unary op, const Tensor& saved, const Tensor& g);

// Where mask (any dtype, nonzero = true, broadcast to t) holds, value; else t.
Tensor masked_fill(const Tensor& t, const Tensor& mask, double value);
// out = cond ? a : b (cond nonzero), all broadcast together.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// True when every element is finite (floating tensors; i64 always true).
bool all_finite(const Tensor& t);

// ---- reductions ----
// dims may be negative; empty dims means all dims.
Tensor sum(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor amax(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim = false);
// Sums the broadcast dims of t away so the result has `shape` (the backward
// of broadcasting). t's shape must be a broadcast of `shape`.
Tensor sum_to(const Tensor& t, const Shape& shape);
// Index of the maximum along dim (int64), first on ties.
Tensor argmax(const Tensor& t, int64_t dim, bool keepdim = false);

// ---- linear algebra ----
// a [.., M, K] x b [.., K, N] -> [.., M, N]; 1-D operands are not accepted
// (use reshape). Leading (batch) dims broadcast. Transposed views (unit stride
// on either of the last two dims) go to GEMM without a copy.
Tensor matmul(const Tensor& a, const Tensor& b);
// x [.., I] w[O, I]^T + b (b [O] or undefined) -> [.., O], as one GEMM over
// all leading dims with the bias added in its epilogue. With add (the
// output's shape and dtype), add + linear(x, w, b) in the same pass: the
// GEMM's epilogue adds it after the bias, so the bits are those of the
// separate add (a residual connection).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& add = Tensor());
// The gradients of y = linear(x, w, b) for dL/dy = g: dx = g w (x's shape),
// dw = g^T x ([O, I], leading dims folded into rows) and db = g summed over
// its rows ([O], need_b), each when asked. Under set_precision(bf16) g is
// rounded and packed once for both products, and its column sums for db are
// taken in the same pass.
struct LinearGrads {
  Tensor x, w, b;
};
// With x_sum (contiguous, x's shape), dx is added into it in place (beta = 1:
// each element x_sum + (g w), as adding the separate product would give) and
// returned as .x: autograd's fused gradient sum (autograd::Grads::sum_target).
// With dx_mul (contiguous, x's shape and dtype; not with x_sum), dx is (g w)
// times dx_mul element by element, in the product's epilogue where heed's
// GEMM runs it: the gradient through an element-wise function before the
// layer, f'(a) saved by its forward (autograd's activation_linear), with the
// bits of the separate multiply.
LinearGrads linear_backward(const Tensor& g, const Tensor& x, const Tensor& w, bool need_x, bool need_w,
                            const Tensor& x_sum = Tensor(), bool need_b = false, const Tensor& dx_mul = Tensor());

// For its scope, OpenBLAS's products run on the calling thread, whatever
// OpenMP's thread count (core/cpu_matmul.cpp): every call to OpenBLAS holds
// one, so a product's bits never depend on the thread count.
struct OpenBlasOneThread {
  OpenBlasOneThread();
  ~OpenBlasOneThread();
  OpenBlasOneThread(const OpenBlasOneThread&) = delete;
  OpenBlasOneThread& operator=(const OpenBlasOneThread&) = delete;

 private:
  int restore_ = 0;
};

// ---- 1-D convolution ----
// x [N, C, T], w [O, C, K], b [O] (optional) -> y [N, O, T'] with
// T' = (T + 2 padding - dilation (K - 1) - 1) / stride + 1.
// float32 runs on oneDNN (primitives cached by shape), on Winograd F(4, 5)
// for 5-tap layers (below), or on a hand-written kernel for one output
// channel; float64 runs a direct loop, which is what the float64 gradient
// checks exercise, and which the tests compare the others against.
struct Conv1dGeom {
  int64_t stride = 1, padding = 0, dilation = 1;
};
//
// Layout: a channels-last x ([N, C, T] with C unit-stride, i.e. stored as
// [N, T, C]; a one-channel x counts as both) gives a channels-last y, and
// oneDNN runs on both where they lie; any other x is read as contiguous and
// gives a contiguous y (oneDNN's blocked layouts are reached by reorders).
// A model whose input has one channel therefore keeps channels-last
// activations from its first convolution on, with no reorder between layers;
// element-wise ops keep the layout (empty_like_dense).
int64_t conv1d_out_length(int64_t T, int64_t K, const Conv1dGeom& g);
bool conv1d_channels_last(const Tensor& x);
// relu: max(0, y) applied in the same pass (a oneDNN post-op), for a
// convolution followed by a ReLU.
Tensor conv1d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv1dGeom& g, bool relu = false);
// dL/dx [N, C, T] from gy [N, O, T'], channels-last when channels_last (pass
// conv1d_channels_last of the forward input, so dx is laid out like x).
// relu_out: for a conv1d + ReLU, its output; gy is then first masked by
// relu_out > 0 (in the same pass where conv1d_backward_fuses_relu says so).
Tensor conv1d_backward_data(const Tensor& gy, const Tensor& w, const Shape& x_shape, const Conv1dGeom& g,
                            bool channels_last = false, const Tensor& relu_out = Tensor());
// dL/dw [O, C, K] (and dL/db [O] into *gb when gb is non-null); relu_out as above.
Tensor conv1d_backward_weights(const Tensor& gy, const Tensor& x, const Shape& w_shape, const Conv1dGeom& g,
                               Tensor* gb, const Tensor& relu_out = Tensor());
// Whether both backward passes apply the ReLU mask inside their own pass for
// this gradient, weight shape and input layout (else masking once first and
// passing no relu_out saves a pass).
bool conv1d_backward_fuses_relu(const Tensor& gy, const Shape& w_shape, const Conv1dGeom& g, bool x_channels_last);
// 5-tap float32 convolutions on channels-last activations may run Winograd's
// F(4, 5): set_conv1d_winograd / conv1d_winograd in core/runtime.h.

// ---- layer normalisation over the last dim (Ba, Kiros, Hinton 2016) ----
// x [.., D] seen as R = numel / D rows, w and b [D]:
//   y = (x - mean) / sqrt(var + eps) * w + b,  mean and biased var over D.
// The forward returns each row's mean and var [R] for the backward (the
// statistics oneDNN's forward_training saves). float32 runs on oneDNN
// (primitives cached by shape), float64 on a direct loop, which the float64
// gradient checks exercise and which the tests compare oneDNN against.
struct LayerNormResult {
  Tensor y;     // [.., D]
  Tensor mean;  // [R]
  Tensor var;   // [R]
};
LayerNormResult layer_norm_forward(const Tensor& x, const Tensor& w, const Tensor& b, double eps);
struct LayerNormGrads {
  Tensor x;  // dL/dx [.., D]
  Tensor w;  // dL/dw [D]
  Tensor b;  // dL/db [D]
};
// All three gradients from gy [.., D] and what the forward saved.
// With x_sum (contiguous, x's shape and dtype), dL/dx is added into it in
// place, row by row as each row's gradient is made (each element x_sum + dx,
// as adding the separate gradient would give), and returned as .x.
LayerNormGrads layer_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& w, const Tensor& mean,
                                   const Tensor& var, double eps, const Tensor& x_sum = Tensor());

// ---- softmax family (over one dim) ----
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// dL/dx from y = softmax(x) and g = dL/dy: y * (g - sum(g * y)).
Tensor softmax_backward(const Tensor& y, const Tensor& g, int64_t dim);
// dL/dx from y = log_softmax(x) and g: g - exp(y) * sum(g).
Tensor log_softmax_backward(const Tensor& y, const Tensor& g, int64_t dim);

// ---- fused attention (core/cpu_attention.cpp) ----
// softmax(scale q k^T [+ causal mask]) v, block by block with an online
// softmax: memory O(T) beyond the inputs, never the T x S score matrix.
// q [N, T, H, K], k [N, S, G, K], v [N, S, G, E] (any strides; H a multiple
// of G, query head h reads key/value head h / (H / G)). Causal: query i sees
// keys j <= i + S - T. Block sizes 0 take the default (128, causal 64). Results are laid
// out like the input they belong to: channels-first (positions unit-stride)
// when it is, else contiguous. Under set_precision(Precision::bf16), float32
// attention runs its block products with bf16 operands and float32
// accumulation (odd block sizes are then rounded up to even); results stay
// independent of the thread count.
//
// keep_probs: where all S keys fit in one key block (S <= block_k) and a
// block path runs (float32 on AVX2 or AVX-512, or bf16 products), the
// forward also returns the probabilities P [N, H, T, S] (row i's columns past its
// block's visible keys unspecified), at most block_k floats per query: the
// backward given them skips recomputing the scores (one of its five block
// products) and their exponentials. Elsewhere probs stays undefined and the
// backward recomputes as usual.
//
// drop: dropout on the probabilities (p > 0), as dropout() would apply it
// to softmax's [N, H, T, S] output: element (n, h, i, j) is kept, scaled by
// 1 / (1 - p), where a bernoulli_(1 - p) fill of that tensor from block
// `first` of generator `seed` would draw 1 (Generator::keep_mask), so the
// masks are those of the plain path given the same generator state. The
// caller reserves the N H T S blocks; backward, given the same drop,
// draws the masks again instead of keeping them (probs, where kept, are
// the probabilities before dropout).
struct AttentionDrop {
  double p = 0.0;
  uint64_t seed = 0, first = 0;
  bool active() const { return p > 0.0; }
};
struct AttentionOut {
  Tensor out;    // [N, T, H, E], laid out like q
  Tensor lse;    // [N, H, T] log-sum-exp of each query's scores, for backward
  Tensor probs;  // [N, H, T, S] with keep_probs where it applies, else undefined
};
AttentionOut attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                               int64_t block_q = 0, int64_t block_k = 0, bool keep_probs = false,
                               const AttentionDrop& drop = {});
struct AttentionGrads {
  Tensor dq, dk, dv;  // shaped and laid out as q, k, v
};
// probs: the forward's AttentionOut::probs (same problem and blocks), or
// undefined to recompute them. into (optional): tensors shaped as q, k and v
// (same dtype, each [N, L, heads, W] with unit-stride rows or positions: the
// views of one projection's output, say) that receive dq, dk and dv instead
// of new ones; every element is written.
AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                                  const Tensor& lse, const Tensor& grad_out, bool causal, double scale,
                                  int64_t block_q = 0, int64_t block_k = 0, const Tensor& probs = Tensor(),
                                  const AttentionGrads* into = nullptr, const AttentionDrop& drop = {});
// Bytes of scratch the attention kernels hold between calls, all threads
// together, outside the caching allocator: per thread one block of scores,
// and per key/value head the float32 path's K^T and V^T copies and dK, dV
// sums (the bf16 path's packed operands likewise). It grows with the
// longest S met and is never given back.
int64_t attention_scratch_bytes();

// ---- Walsh-Hadamard transform (core/cpu_hadamard.cpp) ----
// In place over the last dim: every row r of x becomes H_n r, with H_n the
// Sylvester Hadamard matrix (H_1 = [1], H_2m = [[H_m, H_m], [H_m, -H_m]];
// entries +-1, unnormalised, so H_n H_n = n I: the transform is its own
// inverse up to 1/n). n must be a power of two; other lengths go through
// quant::RandomizedHadamard (core/quantize.h), which covers a row with two
// overlapping power-of-two blocks. O(n log n) additions per row: radix-8 and
// radix-4 butterflies, the levels below 16 KiB done block by block in cache;
// rows are split over threads (each row by one thread: results do not depend
// on the thread count). f32 or f64; x must be contiguous, or a 2-D view
// [R, n] whose rows are unit-stride (a narrowed block of wider rows).
void fwht_(const Tensor& x);

// ---- indexing ----
// out = t indexed along dim by idx (int64, 1-D); bounds checked with a message
// naming the bad index and the valid range.
Tensor index_select(const Tensor& t, int64_t dim, const Tensor& idx);
// dst.index_add_(dim, idx, src): dst[.., idx[i], ..] += src[.., i, ..].
void index_add_(const Tensor& dst, int64_t dim, const Tensor& idx, const Tensor& src);
Tensor concat(const std::vector<Tensor>& ts, int64_t dim);

// ---- losses ----
// Mean cross-entropy of logits [R, V] against int64 targets [R], skipping rows
// whose target equals ignore_index. Returns the loss (shape []) and saves, for
// the backward, each row's maximum m and log z = log sum exp(x - m) [R]
// apart (their sum, the log-sum-exp, would lose log z's digits to m's size
// for large logits). count = rows not ignored.
struct CrossEntropySaved {
  Tensor row_max, log_z;
  int64_t count = 0, ignore_index = 0;
};
struct CrossEntropyResult {
  Tensor loss;
  CrossEntropySaved saved;
};
CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index);
// dL/dlogits = g * (softmax(logits) - onehot(target)) / count; zero for ignored rows.
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const CrossEntropySaved& forward, double g);

// ---- runtime: set_num_threads, num_threads, backend_info, CPU instruction sets (core/runtime.h; core/cpu_isa.cpp) ----
// heed's own kernels only, at any time (oneDNN keeps its cap): how the tests
// run both widths of a kernel in one process. Throws as set_cpu_isa does
// when the CPU lacks isa.
void set_kernel_isa(CpuIsa isa);
// Throws unless a CPU whose best instruction set is `best` has isa, naming
// `what` (the caller), isa and what the CPU has.
void check_cpu_has(CpuIsa isa, CpuIsa best, std::string_view what);
// The instruction set oneDNN dispatches to ("avx512_core_bf16"). Asking
// fixes oneDNN's cap for the rest of the process.
std::string onednn_isa_name();
// Reads HEED_CPU_ISA (once) and caps oneDNN accordingly; core/dnnl_context.cpp
// calls it before heed creates its oneDNN engine, while oneDNN takes a cap.
void apply_isa_settings();

// ---- random fills (core/random.cpp) ----
// In-place fills; t may be any view whose elements do not overlap (an
// expanded view, with stride 0 on a dim of size > 1, is rejected). Element i
// in row-major order draws from block g.offset() + i, so results do not
// depend on the thread count; each fill advances g by t.numel() blocks.
// Users get fresh tensors from randn / rand / randint (core/random.h).

// U[lo, hi) for f32/f64; needs lo <= hi.
void uniform_(const Tensor& t, double lo, double hi, Generator& g);
// N(mean, std^2) for f32/f64 (Box-Muller, one block per element); needs std >= 0.
void normal_(const Tensor& t, double mean, double std, Generator& g);
// 1 with probability p, else 0; f32/f64/i64; needs 0 <= p <= 1.
void bernoulli_(const Tensor& t, double p, Generator& g);
// Dropout's mask in one pass: 1 / (1 - p) (rounded to t's dtype) where
// bernoulli_(t, 1 - p, g) would draw 1, else 0 (so the values of that fill
// scaled by scale_); f32/f64, contiguous; needs 0 <= p < 1. Its blocks are
// claimed with g.reserve_batch: dim 0 of t is a batch's rows (core/random.h).
void dropout_mask_(const Tensor& t, double p, Generator& g);
// Integers in [lo, hi), unbiased; i64, or f32/f64 when every value in the
// range is exactly representable (|lo|, |hi| <= 2^24 for f32, 2^53 for f64).
void randint_(const Tensor& t, int64_t lo, int64_t hi, Generator& g);

}  // namespace heed::kernel
