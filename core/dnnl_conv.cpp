// core/dnnl_conv.cpp: 1-D convolution on oneDNN (2.6 API: op::desc, then
// op::primitive_desc), plus a direct float64 loop. The dispatch lives here:
// one output channel goes to core/cpu_conv_single.cpp, channels-last 5-tap
// layers to Winograd (core/cpu_conv_winograd.cpp), other float32 ones to
// heed's GEMM where the CPU has AVX2 or AVX-512 (core/cpu_conv_gemm.cpp:
// the same bits on both), the rest (bf16, and float32 without AVX2) to
// oneDNN.
//
// Primitive creation costs far more than a small convolution, so primitives
// are built once per shape and cached. Activations come in two layouts:
// - channels-last (nwc, stored [N, T, C]): oneDNN's jit and brgemm kernels
//   read and write it where it lies, as fast as its own blocked layouts;
//   only the weights are reordered. This is the layout of a model whose
//   input has one channel (the toy models), from its first convolution on.
// - contiguous (ncw): oneDNN only has gemm-based kernels for it (~1.8x
//   slower), so the primitives pick their layouts (format_tag::any: blocked
//   nCw16c / OIw16i16o) and each argument is reordered into a scratch tensor
//   and back by reorder primitives built once and cached with the convolution.
#include <dnnl.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/iter.h"
#include "core/dnnl_context.h"
#include "core/conv_gemm.h"
#include "core/conv_single.h"
#include "core/runtime.h"
#include "core/conv_winograd.h"
#include "core/kernels.h"
#include "core/threads.h"

namespace heed::kernel {

int64_t conv1d_out_length(int64_t T, int64_t K, const Conv1dGeom& g) {
  return (T + 2 * g.padding - g.dilation * (K - 1) - 1) / g.stride + 1;
}

namespace {

void check_conv(const Tensor& x, const Tensor& w, const Tensor& b, const Conv1dGeom& g) {
  check_defined(x, "conv1d");
  check_defined(w, "conv1d");
  if (x.dim() != 3) fail("conv1d: expected input of shape [N, C, T], got {}", shape_str(x.shape()));
  if (w.dim() != 3) fail("conv1d: expected weight of shape [O, C, K], got {}", shape_str(w.shape()));
  if (x.size(1) != w.size(1))
    fail("conv1d: input has {} channels (shape {}) but the weight expects {} (shape {})", x.size(1),
         shape_str(x.shape()), w.size(1), shape_str(w.shape()));
  if (b.defined() && (b.dim() != 1 || b.size(0) != w.size(0)))
    fail("conv1d: bias shape {} does not match {} output channels", shape_str(b.shape()), w.size(0));
  if (g.stride < 1 || g.dilation < 1 || g.padding < 0)
    fail("conv1d: invalid stride {} / padding {} / dilation {} (expected >= 1 / >= 0 / >= 1)", g.stride, g.padding,
         g.dilation);
  if (x.dtype() != w.dtype())
    fail("conv1d: dtype mismatch between input {} and weight {}", dtype_name(x.dtype()), dtype_name(w.dtype()));
  if (b.defined() && b.dtype() != x.dtype())
    fail("conv1d: bias dtype {} does not match input and weight dtype {}", dtype_name(b.dtype()),
         dtype_name(x.dtype()));
  if (conv1d_out_length(x.size(2), w.size(2), g) < 1)
    fail("conv1d: input length {} is too short for kernel {} with padding {} and dilation {}", x.size(2), w.size(2),
         g.padding, g.dilation);
}

// ---- float64 direct loops: y[n,o,t] = b[o] + sum_{c,k} w[o,c,k] x[n,c,t S - P + k D] ----
template <class T>
void ref_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv1dGeom& g, const Tensor& y) {
  const int64_t N = x.size(0), C = x.size(1), L = x.size(2), O = w.size(0), K = w.size(2), Lo = y.size(2);
  const T* px = x.data<T>();
  const T* pw = w.data<T>();
  T* py = y.data<T>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t t = 0; t < Lo; ++t) {
        T acc = b.defined() ? b.data<T>()[o] : T(0);
        for (int64_t c = 0; c < C; ++c)
          for (int64_t k = 0; k < K; ++k) {
            int64_t s = t * g.stride - g.padding + k * g.dilation;
            if (s >= 0 && s < L) acc += pw[(o * C + c) * K + k] * px[(n * C + c) * L + s];
          }
        py[(n * O + o) * Lo + t] = acc;
      }
}

template <class T>
void ref_backward(const Tensor& gy, const Tensor& x, const Tensor& w, const Conv1dGeom& g, const Tensor* gx,
                  const Tensor* gw, const Tensor* gb) {
  const int64_t N = gy.size(0), O = gy.size(1), Lo = gy.size(2);
  const int64_t C = w.size(1), K = w.size(2);
  const int64_t L = gx ? gx->size(2) : x.size(2);
  const T* pg = gy.data<T>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t t = 0; t < Lo; ++t) {
        T gv = pg[(n * O + o) * Lo + t];
        if (gb) gb->data<T>()[o] += gv;
        for (int64_t c = 0; c < C; ++c)
          for (int64_t k = 0; k < K; ++k) {
            int64_t s = t * g.stride - g.padding + k * g.dilation;
            if (s < 0 || s >= L) continue;
            if (gx) gx->data<T>()[(n * C + c) * L + s] += w.data<T>()[(o * C + c) * K + k] * gv;
            if (gw) gw->data<T>()[(o * C + c) * K + k] += x.data<T>()[(n * C + c) * L + s] * gv;
          }
      }
}

// ---- oneDNN ----
using dnnl::memory;
// Shape, geometry, bias, whether the activations are channels-last, and
// whether a ReLU is fused into the forward primitive.
// And the thread count oneDNN builds them for.
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, bool, int>;

// One argument of a primitive: heed's plain layout, the layout the
// primitive chose, and the reorders between them when they differ.
struct Arg {
  memory::desc plain, want;
  bool same = true;
  dnnl::reorder to_want, to_plain;
  Arg() = default;
  Arg(const memory::desc& plain_, const memory::desc& want_) : plain(plain_), want(want_), same(plain_ == want_) {
    if (same) return;
    auto& eng = detail::dnnl_engine();
    to_want = dnnl::reorder(dnnl::reorder::primitive_desc(eng, plain, eng, want));
    to_plain = dnnl::reorder(dnnl::reorder::primitive_desc(eng, want, eng, plain));
  }
  Tensor scratch() const { return Tensor::empty({static_cast<int64_t>(want.get_size() / sizeof(float))}); }
  // An input: t itself, or its values reordered into `buf`.
  memory in(const Tensor& t, Tensor& buf) const {
    if (same) return detail::dnnl_mem(plain, t);
    buf = scratch();
    memory m = detail::dnnl_mem(want, buf);
    detail::dnnl_run(to_want, {{DNNL_ARG_FROM, detail::dnnl_mem(plain, t)}, {DNNL_ARG_TO, m}});
    return m;
  }
  // An output: t itself, or a scratch `buf` that finish() reorders into t.
  memory out(const Tensor& t, Tensor& buf) const {
    if (same) return detail::dnnl_mem(plain, t);
    buf = scratch();
    return detail::dnnl_mem(want, buf);
  }
  void finish(const Tensor& t, const Tensor& buf) const {
    if (same) return;
    detail::dnnl_run(to_plain, {{DNNL_ARG_FROM, detail::dnnl_mem(want, buf)}, {DNNL_ARG_TO, detail::dnnl_mem(plain, t)}});
  }
};

struct ConvPrims {
  memory::desc src, wei, bias, dst;  // heed's: ncw (or nwc when channels-last), oiw, x, ncw (nwc)
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_weights;
  Arg f_src, f_wei, f_dst;         // forward
  Arg d_ddst, d_wei, d_dsrc;       // backward data
  Arg w_src, w_ddst, w_dwei;       // backward weights
  memory::desc w_scratch;          // its scratchpad, when built for one thread
};

struct PrimitiveCache {
  std::mutex mu;
  std::map<Key, std::shared_ptr<ConvPrims>> cache;
};

PrimitiveCache& primitive_cache() {
  static PrimitiveCache d;
  return d;
}

// cl: the activations (src, dst and their gradients) are channels-last
// (nwc), which oneDNN's jit and brgemm kernels read directly as fast as its
// blocked layouts (measured here: forward 1.74 ms against 1.75 blocked, plain
// ncw 3.1-3.3 ms, for the toy models' 64 -> 64 k5 layer); the primitives then
// take them as they are and only the weights are reordered.
// relu: the forward primitive applies max(0, .) as a post-op (the backward
// primitives do not depend on it).
// threads: the count oneDNN builds them for: heed's (num_threads), or 1 for
// primitives heed's threads run side by side (their backward-weights
// primitive then takes a scratchpad per call).
std::shared_ptr<ConvPrims> prims_for(int64_t N, int64_t C, int64_t L, int64_t O, int64_t K, const Conv1dGeom& g,
                                     bool bias, bool cl, bool relu = false, int threads = 0) {
  if (threads == 0) threads = num_threads();
  PrimitiveCache& d = primitive_cache();
  Key key{N, C, L, O, K, g.stride, g.padding, g.dilation, bias, cl, relu, threads};
  std::lock_guard<std::mutex> lock(d.mu);
  auto it = d.cache.find(key);
  if (it != d.cache.end()) return it->second;

  // Built for that count, whatever the adaptive threads do now (core/threads.h).
  const heed::detail::OmpThreadsFor built_for(threads);
  const int64_t Lo = conv1d_out_length(L, K, g);
  auto p = std::make_shared<ConvPrims>();
  using dt = memory::data_type;
  using tag = memory::format_tag;
  p->src = memory::desc({N, C, L}, dt::f32, cl ? tag::nwc : tag::ncw);
  p->wei = memory::desc({O, C, K}, dt::f32, tag::oiw);
  p->bias = memory::desc({O}, dt::f32, tag::x);
  p->dst = memory::desc({N, O, Lo}, dt::f32, cl ? tag::nwc : tag::ncw);
  const memory::desc wei_any({O, C, K}, dt::f32, tag::any);
  const memory::desc src_any = cl ? p->src : memory::desc({N, C, L}, dt::f32, tag::any),
                     dst_any = cl ? p->dst : memory::desc({N, O, Lo}, dt::f32, tag::any);
  memory::dims strides{g.stride}, dil{g.dilation - 1}, pad_l{g.padding};
  // Symmetric padding, like PyTorch: oneDNN rounds the output length down
  // the same way when the stride does not divide.
  memory::dims pad_r{g.padding};
  auto alg = dnnl::algorithm::convolution_direct;
  auto& eng = detail::dnnl_engine();
  auto fwd_d = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, src_any, wei_any,
                                                      p->bias, dst_any, strides, dil, pad_l, pad_r)
                    : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, src_any, wei_any,
                                                      dst_any, strides, dil, pad_l, pad_r);
  dnnl::primitive_attr attr;
  if (relu) {
    dnnl::post_ops po;
    po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(po);
  }
  dnnl::convolution_forward::primitive_desc fwd_pd(fwd_d, attr, eng);
  p->fwd = dnnl::convolution_forward(fwd_pd);
  p->f_src = Arg(p->src, fwd_pd.src_desc());
  p->f_wei = Arg(p->wei, fwd_pd.weights_desc());
  p->f_dst = Arg(p->dst, fwd_pd.dst_desc());

  dnnl::convolution_backward_data::desc bd_d(alg, src_any, wei_any, dst_any, strides, dil, pad_l, pad_r);
  dnnl::convolution_backward_data::primitive_desc bd_pd(bd_d, eng, fwd_pd);
  p->bwd_data = dnnl::convolution_backward_data(bd_pd);
  p->d_ddst = Arg(p->dst, bd_pd.diff_dst_desc());
  p->d_wei = Arg(p->wei, bd_pd.weights_desc());
  p->d_dsrc = Arg(p->src, bd_pd.diff_src_desc());

  auto bw_d = bias ? dnnl::convolution_backward_weights::desc(alg, src_any, wei_any, p->bias, dst_any, strides, dil,
                                                              pad_l, pad_r)
                   : dnnl::convolution_backward_weights::desc(alg, src_any, wei_any, dst_any, strides, dil, pad_l,
                                                              pad_r);
  dnnl::primitive_attr bw_attr;
  if (threads == 1) bw_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::convolution_backward_weights::primitive_desc bw_pd(bw_d, bw_attr, eng, fwd_pd);
  p->bwd_weights = dnnl::convolution_backward_weights(bw_pd);
  if (threads == 1) p->w_scratch = bw_pd.scratchpad_desc();
  p->w_src = Arg(p->src, bw_pd.src_desc());
  p->w_ddst = Arg(p->dst, bw_pd.diff_dst_desc());
  p->w_dwei = Arg(p->wei, bw_pd.diff_weights_desc());
  d.cache.emplace(key, p);
  return p;
}

memory mem(const memory::desc& md, const Tensor& t) { return detail::dnnl_mem(md, t); }

}  // namespace

bool conv1d_channels_last(const Tensor& x) {
  if (x.dim() != 3) return false;
  const int64_t N = x.size(0), C = x.size(1), L = x.size(2);
  return (C == 1 || x.stride(1) == 1) && (L == 1 || x.stride(2) == C) && (N == 1 || x.stride(0) == C * L);
}

namespace {
// An uninitialised [N, C, L] tensor, channels-last (stored as [N, L, C]) or contiguous.
Tensor empty_ncl(int64_t N, int64_t C, int64_t L, bool cl, DType dtype) {
  if (!cl) return Tensor::empty({N, C, L}, dtype);
  return permute(Tensor::empty({N, L, C}, dtype), {0, 2, 1});
}

// ---- pointwise (kernel size 1) convolutions in bf16, channels-last ----
// A kernel-1 convolution of a channels-last x (stored [N, L, C]) is a
// product over the channels: y [N L, O] = x [N L, C] w[O, C]^T + b, and its
// gradients are the Linear layer's. Under set_precision(bf16) they run on
// heed's GEMM (gemm_split: bf16 operands, float32 accumulation, slabs
// independent of the thread count, the bias in the epilogue), as the Linear
// layers do. (In float32 core/cpu_conv_gemm.cpp takes them, as every
// convolution, on the float32 GEMM.)
bool pointwise_geometry(DType dtype, int64_t K, const Conv1dGeom& g) {
  return dtype == DType::f32 && precision() == Precision::bf16 && K == 1 && g.stride == 1 && g.padding == 0;
}
bool pointwise_applies(const Tensor& x, int64_t K, const Conv1dGeom& g) {
  return pointwise_geometry(x.dtype(), K, g) && conv1d_channels_last(x);
}
// t itself when channels-last, else a channels-last copy: the pointwise
// gradients read rows of the incoming gradient whatever layout it came in
// (a contiguous one took the float32 convolution instead of bf16).
Tensor as_channels_last(const Tensor& t) {
  return conv1d_channels_last(t) ? t : permute(contiguous(permute(t, {0, 2, 1})), {0, 2, 1});
}
// [N, C, L] channels-last <-> its rows [N L, C] (views, no copy).
Tensor cl_rows(const Tensor& t) { return reshape(permute(t, {0, 2, 1}), {t.size(0) * t.size(2), t.size(1)}); }
Tensor cl_from_rows(const Tensor& rows, int64_t N, int64_t L) {
  return permute(reshape(rows, {N, L, rows.size(1)}), {0, 2, 1});
}
}  // namespace

Tensor conv1d_forward(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Conv1dGeom& g, bool relu) {
  check_conv(x0, w0, b0, g);
  if (relu && (x0.dtype() != DType::f32 || single_channel_conv_applies(x0.dtype(), w0.size(0), g))) {
    // The float64 loop and the one-output-channel kernel: a separate pass.
    Tensor y = conv1d_forward(x0, w0, b0, g, false);
    return unary(Unary::relu, y);
  }
  const bool cl = x0.dtype() == DType::f32 && conv1d_channels_last(x0);
  Tensor x = cl ? x0 : contiguous(x0), w = contiguous(w0), b = b0.defined() ? contiguous(b0) : b0;
  const int64_t N = x.size(0), C = x.size(1), L = x.size(2), O = w.size(0), K = w.size(2);
  if (x.dtype() == DType::f64) {
    Tensor y = Tensor::empty({N, O, conv1d_out_length(L, K, g)}, x.dtype());
    ref_forward<double>(x, w, b, g, y);
    return y;
  }
  check_dtype(x, DType::f32, "conv1d");
  if (pointwise_applies(x, K, g)) {
    Tensor y = cl_from_rows(linear(cl_rows(x), reshape(w, {O, C}), b), N, L);
    return relu ? unary(Unary::relu, y) : y;
  }
  if (single_channel_conv_applies(x.dtype(), O, g)) return single_channel_conv1d_forward(x, w, b, g.padding);
  if (winograd_conv1d_applies(x.dtype(), C, O, K, g, cl)) return winograd_conv1d_forward(x, w, b, g.padding, relu);
  if (gemm_conv1d_applies(x.dtype())) {
    Tensor y = gemm_conv1d_forward(x, w, b, g, cl);
    return relu ? unary(Unary::relu, y) : y;
  }
  Tensor y = empty_ncl(N, O, conv1d_out_length(L, K, g), cl, x.dtype());
  auto p = prims_for(N, C, L, O, K, g, b.defined(), cl, relu);
  Tensor xb, wb, yb;
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, p->f_src.in(x, xb)},
                                       {DNNL_ARG_WEIGHTS, p->f_wei.in(w, wb)},
                                       {DNNL_ARG_DST, p->f_dst.out(y, yb)}};
  if (b.defined()) args.emplace(DNNL_ARG_BIAS, mem(p->bias, b));
  detail::dnnl_run(p->fwd, args);
  p->f_dst.finish(y, yb);
  return y;
}

bool conv1d_backward_fuses_relu(const Tensor& gy, const Shape& ws, const Conv1dGeom& g, bool x_channels_last) {
  return winograd_conv1d_applies(gy.dtype(), ws[1], ws[0], ws[2], g,
                                 x_channels_last && conv1d_channels_last(gy));
}

Tensor conv1d_backward_data(const Tensor& gy_in, const Tensor& w0, const Shape& xs, const Conv1dGeom& g,
                            bool channels_last, const Tensor& relu_out) {
  Tensor w = contiguous(w0);
  if (relu_out.defined() && conv1d_backward_fuses_relu(gy_in, w.shape(), g, channels_last))
    return winograd_conv1d_backward_data(gy_in, relu_out, w, xs[2], g.padding);
  const Tensor gy0 = relu_out.defined() ? unary_backward(Unary::relu, relu_out, gy_in) : gy_in;
  const bool f32 = gy0.dtype() == DType::f32;
  if (single_channel_conv_applies(gy0.dtype(), w.size(0), g))
    return single_channel_conv1d_backward_data(contiguous(gy0), w, xs, g.padding, channels_last);
  // oneDNN reads gy and writes dx channels-last when both are (or gy has one
  // channel); otherwise both contiguous, and dx is permuted into the asked layout.
  if (channels_last && pointwise_geometry(gy0.dtype(), w.size(2), g))  // pointwise in bf16: dx = dy w
    return cl_from_rows(matmul(cl_rows(as_channels_last(gy0)), reshape(w, {w.size(0), w.size(1)})), xs[0], xs[2]);
  const bool cl = f32 && channels_last && conv1d_channels_last(gy0);
  Tensor gy = cl ? gy0 : contiguous(gy0);
  if (winograd_conv1d_applies(gy.dtype(), xs[1], w.size(0), w.size(2), g, cl))
    return winograd_conv1d_backward_data(gy, Tensor(), w, xs[2], g.padding);
  if (gemm_conv1d_applies(gy.dtype())) return gemm_conv1d_backward_data(gy, w, xs, g, channels_last);
  if (!f32) {
    Tensor gx = Tensor::zeros(xs, gy.dtype());  // the float64 loop accumulates into zeros
    ref_backward<double>(gy, Tensor(), w, g, &gx, nullptr, nullptr);
    return gx;
  }
  Tensor gx = empty_ncl(xs[0], xs[1], xs[2], cl, gy.dtype());  // oneDNN writes every element
  auto p = prims_for(xs[0], xs[1], xs[2], w.size(0), w.size(2), g, false, cl);
  Tensor gyb, wb, gxb;
  detail::dnnl_run(p->bwd_data, {{DNNL_ARG_DIFF_DST, p->d_ddst.in(gy, gyb)},
                                 {DNNL_ARG_WEIGHTS, p->d_wei.in(w, wb)},
                                 {DNNL_ARG_DIFF_SRC, p->d_dsrc.out(gx, gxb)}});
  p->d_dsrc.finish(gx, gxb);
  if (channels_last && !cl) {
    Tensor out = empty_ncl(xs[0], xs[1], xs[2], true, gy.dtype());
    copy_(out, gx);
    return out;
  }
  return gx;
}

Tensor conv1d_backward_weights(const Tensor& gy_in, const Tensor& x0, const Shape& ws, const Conv1dGeom& g, Tensor* gb,
                               const Tensor& relu_out) {
  if (gy_in.numel() == 0 || x0.numel() == 0) {  // an empty batch: a sum of no terms, which the kernels never write
    if (gb) *gb = Tensor::zeros({ws[0]}, gy_in.dtype());
    return Tensor::zeros(ws, gy_in.dtype());
  }
  if (relu_out.defined() && conv1d_backward_fuses_relu(gy_in, ws, g, conv1d_channels_last(x0)))
    return winograd_conv1d_backward_weights(gy_in, relu_out, x0, g.padding, gb);
  const Tensor gy0 = relu_out.defined() ? unary_backward(Unary::relu, relu_out, gy_in) : gy_in;
  if (single_channel_conv_applies(gy0.dtype(), ws[0], g))
    return single_channel_conv1d_backward_weights(contiguous(gy0), conv1d_channels_last(x0) ? x0 : contiguous(x0),
                                                  ws[2], g.padding, gb);
  if (gy0.dtype() == DType::f32 && pointwise_applies(x0, ws[2], g)) {  // in bf16: dw = dy^T x, db = dy's column sums
    const Tensor gy2 = cl_rows(as_channels_last(gy0));
    if (gb) *gb = sum(gy2, {0}, false);
    return reshape(matmul(transpose(gy2, 0, 1), cl_rows(x0)), ws);
  }
  // Channels-last when both x and gy are; else both contiguous.
  const bool cl = gy0.dtype() == DType::f32 && conv1d_channels_last(x0) && conv1d_channels_last(gy0);
  Tensor gy = cl ? gy0 : contiguous(gy0), x = cl ? x0 : contiguous(x0);
  if (winograd_conv1d_applies(gy.dtype(), ws[1], ws[0], ws[2], g, cl))
    return winograd_conv1d_backward_weights(gy, Tensor(), x, g.padding, gb);
  if (gemm_conv1d_applies(gy.dtype())) return gemm_conv1d_backward_weights(gy, x, ws, g, gb);
  const bool f64 = gy.dtype() == DType::f64;  // the loop accumulates; oneDNN writes every element
  Tensor gw = f64 ? Tensor::zeros(ws, gy.dtype()) : Tensor::empty(ws, gy.dtype());
  if (gb) *gb = f64 ? Tensor::zeros({ws[0]}, gy.dtype()) : Tensor::empty({ws[0]}, gy.dtype());
  if (gy.dtype() == DType::f64) {
    ref_backward<double>(gy, x, Tensor::empty(ws, DType::f64), g, nullptr, &gw, gb);
    return gw;
  }
  // The gradient sums over the batch, and oneDNN would split that sum
  // across the threads it was built for, which changes the last bits with
  // the thread count. heed cuts the batch into chunks by shape alone, runs
  // each on one thread with a primitive built for one thread, and adds the
  // chunks' partial gradients in chunk order. Channels-last activations are
  // sliced where they lie; contiguous ones are copied channels-last first.
  if (!cl) {
    x = permute(contiguous(permute(x, {0, 2, 1})), {0, 2, 1});
    gy = permute(contiguous(permute(gy, {0, 2, 1})), {0, 2, 1});
  }
  const int64_t N = x.size(0), wsize = ws[0] * ws[1] * ws[2];
  // Up to 8 chunks (two threads get four each, four get two), fewer when
  // the partial gradients would pass 16 MB.
  const int64_t want = std::max<int64_t>(1, std::min<int64_t>({N, 8, (int64_t(4) << 20) / std::max<int64_t>(wsize, 1)}));
  const int64_t per = (N + want - 1) / want, chunks = (N + per - 1) / per;
  struct Chunk {
    std::shared_ptr<ConvPrims> p;
    Tensor x, gy, gw, gb, xb, gyb, gwb, scratch;  // *b: the primitive's layouts, when not heed's
    std::unordered_map<int, memory> args;
  };
  std::vector<Chunk> cs(static_cast<size_t>(chunks));
  for (int64_t i = 0; i < chunks; ++i) {  // primitives, buffers and reorders on this thread
    Chunk& c = cs[static_cast<size_t>(i)];
    const int64_t n0 = i * per, n = std::min(per, N - n0);
    c.p = prims_for(n, x.size(1), x.size(2), ws[0], ws[2], g, gb != nullptr, true, false, 1);
    c.x = narrow(x, 0, n0, n);
    c.gy = narrow(gy, 0, n0, n);
    c.gw = i == 0 ? gw : Tensor::empty(ws);
    c.scratch = Tensor::empty({std::max<int64_t>(1, int64_t(c.p->w_scratch.get_size() / sizeof(float)))});
    c.args = {{DNNL_ARG_SRC, c.p->w_src.in(c.x, c.xb)},
              {DNNL_ARG_DIFF_DST, c.p->w_ddst.in(c.gy, c.gyb)},
              {DNNL_ARG_DIFF_WEIGHTS, c.p->w_dwei.out(c.gw, c.gwb)},
              {DNNL_ARG_SCRATCHPAD, mem(c.p->w_scratch, c.scratch)}};
    if (gb) {
      c.gb = i == 0 ? *gb : Tensor::empty({ws[0]});
      c.args.emplace(DNNL_ARG_DIFF_BIAS, mem(c.p->bias, c.gb));
    }
  }
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t i = 0; i < chunks; ++i) {
    const Chunk& c = cs[static_cast<size_t>(i)];
    detail::dnnl_run_here(c.p->bwd_weights, c.args);
  }
  for (const Chunk& c : cs) c.p->w_dwei.finish(c.gw, c.gwb);
  // gw (chunk 0's) += chunk 1's, then chunk 2's, ...: the same order on any thread count.
  auto add_chunks = [&](const Tensor& total, Tensor Chunk::*part, int64_t n) {
    float* out = total.data<float>();
    for (int64_t i = 1; i < chunks; ++i) {
      const float* in = (cs[static_cast<size_t>(i)].*part).data<float>();
      for (int64_t e = 0; e < n; ++e) out[e] += in[e];
    }
  };
  add_chunks(gw, &Chunk::gw, wsize);
  if (gb) add_chunks(*gb, &Chunk::gb, ws[0]);
  return gw;
}

}  // namespace heed::kernel
