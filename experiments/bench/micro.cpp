// experiments/bench/micro.cpp: heed_microbench, per-kernel micro-benchmarks on
// Google Benchmark (`heed bench --micro`). Each kernel of core/kernels.h that
// a training step spends its time in, at the shapes the bundled models run:
//
//   toy    toy-cnn / toy-attention: N 100, C 64, T 100, conv kernel 5 (padding
//          2); the attention layer is one head of width 64, not causal.
//   gpt-128  4 heads, width D 128 (head dim 32), context T 64, batch 12: the
//          Linear layers see R = N T = 768 rows.
//   gpt-256  4 heads, width 256 (head dim 64), context 256, batch 12: R = 3072.
//
// FLOP-heavy kernels report a counter FLOP (analytic count, per second of wall
// time: "FLOP=85.1G/s" is 85.1 GFLOP/s); memory-bound ones report bytes (the
// minimum traffic: every input read once, every output written once).
//
// Attention runs both ways: fused (kernel::attention_forward/_backward,
// blockwise with an online softmax) and plain, the matmul + softmax + matmul
// path MultiHeadAttention takes when it keeps its maps. Both are credited the
// same FLOPs (the two products forward, four backward; causal counts only the
// unmasked scores), so their FLOP rates compare directly. Where all keys fit
// one block (toy, gpt-128), training's fused path keeps the probabilities
// (keep_probs): attention_fused_forward_keep and attention_fused_backward_kept
// time that path; the other two, recomputing them, as inference and longer
// sequences run.
//
// The fast Walsh-Hadamard transform (kernel::fwht_, in place) runs on rows of
// d = 128 .. 65536 floats, 64 MiB in all (far beyond the caches) and 256 KiB
// (in L2); its bytes counter is the traffic of one read and one write of every
// element, and `memory_pass` (kernel::scale_ in place: the same one read and
// one write, no arithmetic to speak of) at the same sizes is the bandwidth it
// is measured against; `rotation_dense` is the O(d^2) alternative, a dense
// rotation as one GEMM.
//
// Usage: heed_microbench [--threads N] [Google Benchmark flags], e.g.
//   heed_microbench --benchmark_filter='attention.*gpt-256'
#include <benchmark/benchmark.h>
#include <fmt/core.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "autograd/ops.h"  // causal_mask
#include "core/conv_winograd.h"  // winograd_conv1d_applies: which shapes get a _direct twin
#include "core/kernels.h"
#include "core/random.h"
#include "core/runtime.h"
#include "core/tensor.h"

namespace {

using heed::Shape;
using heed::Tensor;
namespace k = heed::kernel;

Tensor rnd(const Shape& shape, uint64_t seed) {
  heed::Generator g(seed);
  return heed::randn(shape, &g);
}

constexpr double kF32 = 4;  // bytes per element

void count_flops(benchmark::State& st, double flops) {
  st.counters["FLOP"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}
void count_bytes(benchmark::State& st, double bytes) {
  st.counters["bytes"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}

// Every benchmark times wall-clock (the kernels run on a thread pool; the
// main thread's CPU time would undercount) in microseconds.
template <class F>
void add(const std::string& name, const std::string& label, F fn) {
  benchmark::RegisterBenchmark(name.c_str(), [fn, label](benchmark::State& st) {
    st.SetLabel(label);
    fn(st);
  })->UseRealTime()->Unit(benchmark::kMicrosecond);
}

// ---- 1-D convolution: x [N, C, T], w [O, C, K] -> y [N, O, T] ----
void conv1d_benchmarks() {
  struct Conv {
    const char* label;
    int64_t N, C, O, T, K, padding;
  };
  const Conv convs[] = {
      {"toy conv 64->64 k5", 100, 64, 64, 100, 5, 2},
      {"toy conv 1->64 k5 (first)", 100, 1, 64, 100, 5, 2},
      {"toy conv 64->1 k5 (last)", 100, 64, 1, 100, 5, 2},
      {"toy-attention q/k/v 64->64 k1", 100, 64, 64, 100, 1, 0},
  };
  // Activations contiguous (ncw) or channels-last (nwc: stored [N, T, C]),
  // the layout the toy models run in from their one-channel input on.
  auto act = [](int64_t N, int64_t C, int64_t T, uint64_t seed, bool nwc) {
    return nwc ? k::permute(rnd({N, T, C}, seed), {0, 2, 1}) : rnd({N, C, T}, seed);
  };
  // Channels-last 5-tap layers run Winograd F(4, 5) by default; "_direct"
  // is the same shape on oneDNN's direct kernels, for comparison. FLOP
  // counts are the direct convolution's, so Winograd's rate is effective.
  struct Mode {
    bool nwc, winograd;
    const char* suffix;
  };
  for (const Conv& c : convs)
    for (Mode m : {Mode{true, true, "nwc"}, Mode{true, false, "nwc_direct"}, Mode{false, true, "ncw"}}) {
      k::Conv1dGeom g;
      g.padding = c.padding;
      if (!m.winograd && !k::winograd_conv1d_applies(heed::DType::f32, c.C, c.O, c.K, g, true)) continue;
      const std::string shape = fmt::format("N{}_C{}_O{}_T{}_K{}_{}", c.N, c.C, c.O, c.T, c.K, m.suffix);
      const int64_t To = k::conv1d_out_length(c.T, c.K, g);
      const double flops = 2.0 * c.N * c.O * c.C * c.K * To;  // each of the three
      const bool nwc = m.nwc, wino = m.winograd;
      add("conv1d_forward/" + shape, c.label, [=](benchmark::State& st) {
        Tensor x = act(c.N, c.C, c.T, 1, nwc), w = rnd({c.O, c.C, c.K}, 2), b = rnd({c.O}, 3);
        heed::set_conv1d_winograd(wino);
        for (auto _ : st) benchmark::DoNotOptimize(k::conv1d_forward(x, w, b, g));
        heed::set_conv1d_winograd(true);
        count_flops(st, flops);
      });
      add("conv1d_backward_data/" + shape, c.label, [=](benchmark::State& st) {
        Tensor gy = act(c.N, c.O, To, 1, nwc), w = rnd({c.O, c.C, c.K}, 2);
        heed::set_conv1d_winograd(wino);
        for (auto _ : st) benchmark::DoNotOptimize(k::conv1d_backward_data(gy, w, {c.N, c.C, c.T}, g, nwc));
        heed::set_conv1d_winograd(true);
        count_flops(st, flops);
      });
      add("conv1d_backward_weights/" + shape, c.label, [=](benchmark::State& st) {
        Tensor gy = act(c.N, c.O, To, 1, nwc), x = act(c.N, c.C, c.T, 2, nwc);
        heed::set_conv1d_winograd(wino);
        for (auto _ : st) {
          Tensor gb;
          benchmark::DoNotOptimize(k::conv1d_backward_weights(gy, x, {c.O, c.C, c.K}, g, &gb));
        }
        heed::set_conv1d_winograd(true);
        count_flops(st, flops);
      });
    }
}

// ---- matrix products of the Linear layers (OpenBLAS) ----
// Linear keeps w [out, in] and computes y = x w^T, so a layer's step runs
//   forward       y [R, out] = x [R, in] . w^T      (w read transposed)
//   backward-data gx [R, in] = gy [R, out] . w
//   backward-w    gw^T [in, out] = x^T . gy          (x read transposed)
// Names give the product as M x K x N. Each product also runs on oneDNN's
// matmul (its brgemm kernels; "_onednn"), which heed's float32 products
// take where heed's kernels are capped below AVX2: the same operands and
// layouts, to compare heed's GEMM with the library's at the models' own
// shapes (float32; with --precision bf16 both take bf16 operands).
void matmul_benchmarks() {
  struct Model {
    const char* name;
    int64_t R, D;
  };
  const int64_t vocab = 65;
  for (const Model& m : {Model{"gpt-128", 12 * 64, 128}, Model{"gpt-256", 12 * 256, 256}}) {
    struct Layer {
      const char* what;
      int64_t in, out;
    };
    const Layer layers[] = {
        {"q/k/v/out projection", m.D, m.D},
        {"fused qkv", m.D, 3 * m.D},
        {"fc1", m.D, 4 * m.D},
        {"fc2", 4 * m.D, m.D},
        {"lm head", m.D, vocab},
    };
    for (const Layer& l : layers)
      for (bool onednn : {false, true}) {
        const int64_t R = m.R, in = l.in, out = l.out;
        const double flops = 2.0 * R * in * out;
        const std::string label = fmt::format("{} {} [{},{}]->[{},{}]", m.name, l.what, R, in, R, out);
        const std::string lib = onednn ? "_onednn" : "";
        // heed's kernels capped to baseline for the oneDNN rows, while they run.
        auto on = [onednn](auto&& body) {
          const heed::CpuIsa before = heed::cpu_isa();
          if (onednn) k::set_kernel_isa(heed::CpuIsa::baseline);
          body();
          k::set_kernel_isa(before);
        };
        add(fmt::format("matmul_forward_xwT{}/M{}_K{}_N{}", lib, R, in, out), label, [=](benchmark::State& st) {
          Tensor x = rnd({R, in}, 1), w = rnd({out, in}, 2);
          Tensor wt = k::transpose(w, 0, 1);
          on([&] {
            for (auto _ : st) benchmark::DoNotOptimize(k::matmul(x, wt));
          });
          count_flops(st, flops);
        });
        add(fmt::format("matmul_backward_data{}/M{}_K{}_N{}", lib, R, out, in), label, [=](benchmark::State& st) {
          Tensor gy = rnd({R, out}, 1), w = rnd({out, in}, 2);
          on([&] {
            for (auto _ : st) benchmark::DoNotOptimize(k::matmul(gy, w));
          });
          count_flops(st, flops);
        });
        add(fmt::format("matmul_backward_weight_xTgy{}/M{}_K{}_N{}", lib, in, R, out), label,
            [=](benchmark::State& st) {
              Tensor x = rnd({R, in}, 1), gy = rnd({R, out}, 2);
              Tensor xt = k::transpose(x, 0, 1);
              on([&] {
                for (auto _ : st) benchmark::DoNotOptimize(k::matmul(xt, gy));
              });
              count_flops(st, flops);
            });
      }
    // The Linear backward as a training step runs it (linear_backward: dX,
    // dW and the bias gradient in one parallel region, dW over the tokens'
    // two halves), heed's kernels only: 4 R in out FLOPs.
    for (const Layer& l : layers) {
      const int64_t R = m.R, in = l.in, out = l.out;
      add(fmt::format("linear_backward/R{}_I{}_O{}", R, in, out),
          fmt::format("{} {} dX, dW, db", m.name, l.what), [=](benchmark::State& st) {
            Tensor x = rnd({R, in}, 1), gy = rnd({R, out}, 2), w = rnd({out, in}, 3);
            for (auto _ : st) benchmark::DoNotOptimize(k::linear_backward(gy, x, w, true, true, Tensor(), true));
            count_flops(st, 4.0 * R * in * out);
          });
    }
  }
}

// ---- attention: fused versus plain ----
struct AttnShape {
  const char* label;
  int64_t N, T, H, K;
  bool causal;
  std::string name() const { return fmt::format("N{}_T{}_H{}_K{}_{}", N, T, H, K, causal ? "causal" : "full"); }
  double scale() const { return 1.0 / std::sqrt(static_cast<double>(K)); }
  // The two products q k^T and p v, counting only the scores a query sees.
  double forward_flops() const {
    const double seen = causal ? static_cast<double>(T) * (T + 1) / 2 : static_cast<double>(T) * T;
    return 4.0 * N * H * seen * K;
  }
};

// The plain path, as MultiHeadAttention::attend runs it, on q, k, v [N, H, T, K].
struct Plain {
  Tensor qs;  // [N, H, T, K] q * scale (saved for dk)
  Tensor p;   // [N, H, T, T] probabilities
  Tensor o;   // [N, H, T, K]
};
Plain plain_forward(const Tensor& q, const Tensor& kk, const Tensor& v, const Tensor& mask, double scale) {
  Plain f;
  f.qs = k::binary_scalar(k::Binary::mul, q, scale);
  Tensor s = k::matmul(f.qs, k::transpose(kk, -1, -2));  // [N, H, T, T]
  if (mask.defined()) s = k::masked_fill(s, mask, std::numeric_limits<float>::lowest());
  f.p = k::softmax(s, -1);
  f.o = k::matmul(f.p, v);
  return f;
}
k::AttentionGrads plain_backward(const Plain& f, const Tensor& kk, const Tensor& v, const Tensor& mask,
                                 const Tensor& go, double scale) {
  k::AttentionGrads d;
  d.dv = k::matmul(k::transpose(f.p, -1, -2), go);
  Tensor ds = k::softmax_backward(f.p, k::matmul(go, k::transpose(v, -1, -2)), -1);
  if (mask.defined()) ds = k::masked_fill(ds, mask, 0.0);
  d.dq = k::binary_scalar(k::Binary::mul, k::matmul(ds, kk), scale);
  d.dk = k::matmul(k::transpose(ds, -1, -2), f.qs);
  return d;
}

void attention_benchmarks() {
  const AttnShape shapes[] = {
      {"toy-attention (1 head, width 64)", 100, 100, 1, 64, false},
      {"gpt-128", 12, 64, 4, 32, true},
      {"gpt-128, not causal", 12, 64, 4, 32, false},
      {"gpt-256", 12, 256, 4, 64, true},
      {"gpt-256, not causal", 12, 256, 4, 64, false},
  };
  for (const AttnShape& a : shapes) {
    const double fwd = a.forward_flops();
    // Fused: q, k, v [N, T, H, K], the layout the layer hands it.
    add("attention_fused_forward/" + a.name(), a.label, [=](benchmark::State& st) {
      Tensor q = rnd({a.N, a.T, a.H, a.K}, 1), kk = rnd({a.N, a.T, a.H, a.K}, 2), v = rnd({a.N, a.T, a.H, a.K}, 3);
      for (auto _ : st) benchmark::DoNotOptimize(k::attention_forward(q, kk, v, a.causal, a.scale()));
      count_flops(st, fwd);
    });
    add("attention_fused_backward/" + a.name(), a.label, [=](benchmark::State& st) {
      Tensor q = rnd({a.N, a.T, a.H, a.K}, 1), kk = rnd({a.N, a.T, a.H, a.K}, 2), v = rnd({a.N, a.T, a.H, a.K}, 3);
      Tensor go = rnd({a.N, a.T, a.H, a.K}, 4);
      k::AttentionOut f = k::attention_forward(q, kk, v, a.causal, a.scale());
      for (auto _ : st)
        benchmark::DoNotOptimize(k::attention_backward(q, kk, v, f.out, f.lse, go, a.causal, a.scale()));
      count_flops(st, 2 * fwd);
    });
    if (a.T <= (a.causal ? 64 : 128)) {  // one default key block: training keeps the probabilities
      add("attention_fused_forward_keep/" + a.name(), a.label, [=](benchmark::State& st) {
        Tensor q = rnd({a.N, a.T, a.H, a.K}, 1), kk = rnd({a.N, a.T, a.H, a.K}, 2), v = rnd({a.N, a.T, a.H, a.K}, 3);
        for (auto _ : st) benchmark::DoNotOptimize(k::attention_forward(q, kk, v, a.causal, a.scale(), 0, 0, true));
        count_flops(st, fwd);
      });
      add("attention_fused_backward_kept/" + a.name(), a.label, [=](benchmark::State& st) {
        Tensor q = rnd({a.N, a.T, a.H, a.K}, 1), kk = rnd({a.N, a.T, a.H, a.K}, 2), v = rnd({a.N, a.T, a.H, a.K}, 3);
        Tensor go = rnd({a.N, a.T, a.H, a.K}, 4);
        k::AttentionOut f = k::attention_forward(q, kk, v, a.causal, a.scale(), 0, 0, true);
        if (!f.probs.defined()) {
          st.SkipWithError("probabilities not kept here (baseline instruction set?)");
          return;
        }
        for (auto _ : st)
          benchmark::DoNotOptimize(
              k::attention_backward(q, kk, v, f.out, f.lse, go, a.causal, a.scale(), 0, 0, f.probs));
        count_flops(st, 2 * fwd);
      });
    }
    // Plain: q, k, v [N, H, T, K] contiguous.
    add("attention_plain_forward/" + a.name(), a.label, [=](benchmark::State& st) {
      Tensor q = rnd({a.N, a.H, a.T, a.K}, 1), kk = rnd({a.N, a.H, a.T, a.K}, 2), v = rnd({a.N, a.H, a.T, a.K}, 3);
      Tensor mask = a.causal ? heed::causal_mask(a.T) : Tensor();
      for (auto _ : st) benchmark::DoNotOptimize(plain_forward(q, kk, v, mask, a.scale()));
      count_flops(st, fwd);
    });
    add("attention_plain_backward/" + a.name(), a.label, [=](benchmark::State& st) {
      Tensor q = rnd({a.N, a.H, a.T, a.K}, 1), kk = rnd({a.N, a.H, a.T, a.K}, 2), v = rnd({a.N, a.H, a.T, a.K}, 3);
      Tensor go = rnd({a.N, a.H, a.T, a.K}, 4);
      Tensor mask = a.causal ? heed::causal_mask(a.T) : Tensor();
      Plain f = plain_forward(q, kk, v, mask, a.scale());
      for (auto _ : st) benchmark::DoNotOptimize(plain_backward(f, kk, v, mask, go, a.scale()));
      count_flops(st, 2 * fwd);
    });
  }
}

// ---- memory-bound kernels ----
void layer_norm_benchmarks() {
  for (auto [label, R, D] : {std::tuple{"gpt-128", int64_t{768}, int64_t{128}}, {"gpt-256", 3072, 256}}) {
    const std::string shape = fmt::format("R{}_D{}", R, D);
    add("layer_norm_forward/" + shape, label, [R, D](benchmark::State& st) {
      Tensor x = rnd({R, D}, 1), w = rnd({D}, 2), b = rnd({D}, 3);
      for (auto _ : st) benchmark::DoNotOptimize(k::layer_norm_forward(x, w, b, 1e-5));
      count_bytes(st, kF32 * (2.0 * R * D + 2.0 * D + 2.0 * R));  // x, w, b -> y, mean, var
    });
    add("layer_norm_backward/" + shape, label, [R, D](benchmark::State& st) {
      Tensor x = rnd({R, D}, 1), w = rnd({D}, 2), b = rnd({D}, 3), gy = rnd({R, D}, 4);
      k::LayerNormResult f = k::layer_norm_forward(x, w, b, 1e-5);
      for (auto _ : st) benchmark::DoNotOptimize(k::layer_norm_backward(gy, x, w, f.mean, f.var, 1e-5));
      count_bytes(st, kF32 * (3.0 * R * D + 3.0 * D + 2.0 * R));  // gy, x, w, mean, var -> gx, gw, gb
    });
  }
}

void softmax_benchmarks() {
  // The attention maps of the plain path, softmax over the keys.
  const std::pair<const char*, Shape> maps[] = {
      {"toy-attention maps", {100, 100, 100}},
      {"gpt-128 maps", {12, 4, 64, 64}},
      {"gpt-256 maps", {12, 4, 256, 256}},
  };
  for (const auto& [label, shape] : maps) {
    std::string name;
    for (int64_t d : shape) {
      if (!name.empty()) name += 'x';
      name += std::to_string(d);
    }
    const double n = static_cast<double>(heed::shape_numel(shape));
    add("softmax_forward/" + name, label, [shape, n](benchmark::State& st) {
      Tensor x = rnd(shape, 1);
      for (auto _ : st) benchmark::DoNotOptimize(k::softmax(x, -1));
      count_bytes(st, kF32 * 2 * n);
    });
    add("softmax_backward/" + name, label, [shape, n](benchmark::State& st) {
      Tensor y = k::softmax(rnd(shape, 1), -1), g = rnd(shape, 2);
      for (auto _ : st) benchmark::DoNotOptimize(k::softmax_backward(y, g, -1));
      count_bytes(st, kF32 * 3 * n);
    });
  }
}

void cross_entropy_benchmarks() {
  const int64_t V = 65;
  for (auto [label, R] : {std::pair{"gpt-128 logits", int64_t{768}}, {"gpt-256 logits", 3072}}) {
    const std::string shape = fmt::format("R{}_V{}", R, V);
    heed::Generator g(5);
    Tensor targets = heed::randint(0, V, {R}, &g);
    add("cross_entropy_forward/" + shape, label, [R, targets](benchmark::State& st) {
      Tensor logits = rnd({R, V}, 1);
      for (auto _ : st) benchmark::DoNotOptimize(k::cross_entropy(logits, targets, -100));
      count_bytes(st, kF32 * (1.0 * R * V + R) + 8.0 * R);  // logits, targets -> lse
    });
    add("cross_entropy_backward/" + shape, label, [R, targets](benchmark::State& st) {
      Tensor logits = rnd({R, V}, 1);
      k::CrossEntropyResult f = k::cross_entropy(logits, targets, -100);
      for (auto _ : st)
        benchmark::DoNotOptimize(k::cross_entropy_backward(logits, targets, f.saved, 1.0));
      count_bytes(st, kF32 * (2.0 * R * V + R) + 8.0 * R);  // logits, targets, lse -> dlogits
    });
  }
}

void bias_grad_benchmarks() {
  // A Linear layer's bias gradient: its output gradient summed over the rows.
  for (auto [label, R, O] : {std::tuple{"gpt-128 projections", int64_t{768}, int64_t{128}},
                             {"gpt-128 fc1", 768, 512},
                             {"gpt-256 projections", 3072, 256},
                             {"gpt-256 fc1", 3072, 1024}}) {
    add(fmt::format("bias_grad_sum/R{}_O{}", R, O), label, [R, O](benchmark::State& st) {
      Tensor g = rnd({R, O}, 1);
      for (auto _ : st) benchmark::DoNotOptimize(k::sum(g, {0}, false));
      count_bytes(st, kF32 * static_cast<double>(R * O + O));
    });
  }
}

void transpose_copy_benchmarks() {
  // contiguous(transpose(m)): a bf16 weight gradient, made as dW^T, turned into dW [O, I].
  for (auto [label, O, I] : {std::tuple{"gpt-128 projection dW", int64_t{128}, int64_t{128}},
                             {"gpt-128 fc1 dW", 512, 128},
                             {"gpt-256 fc1 dW", 1024, 256}}) {
    add(fmt::format("transpose_copy/O{}_I{}", O, I), label, [O, I](benchmark::State& st) {
      Tensor wt = rnd({I, O}, 1);
      for (auto _ : st) benchmark::DoNotOptimize(k::contiguous(k::transpose(wt, 0, 1)));
      count_bytes(st, kF32 * 2.0 * static_cast<double>(O * I));
    });
  }
}

void activation_benchmarks() {
  // The feed-forward hidden layer [R, 4 D]: exact (erf) GELU, the default, and SiLU.
  for (auto [name, op] : {std::pair{"gelu", k::Unary::gelu_erf}, {"silu", k::Unary::silu}}) {
    for (auto [label, R, F] :
         {std::tuple{"gpt-128 fc1 output", int64_t{768}, int64_t{512}}, {"gpt-256 fc1 output", 3072, 1024}}) {
      const std::string shape = fmt::format("R{}_F{}", R, F);
      const double n = static_cast<double>(R * F);
      add(fmt::format("{}_forward/{}", name, shape), label, [R, F, n, op](benchmark::State& st) {
        Tensor x = rnd({R, F}, 1);
        for (auto _ : st) benchmark::DoNotOptimize(k::unary(op, x));
        count_bytes(st, kF32 * 2 * n);
      });
      add(fmt::format("{}_backward/{}", name, shape), label, [R, F, n, op](benchmark::State& st) {
        Tensor x = rnd({R, F}, 1), g = rnd({R, F}, 2);
        for (auto _ : st) benchmark::DoNotOptimize(k::unary_backward(op, x, g));
        count_bytes(st, kF32 * 3 * n);
      });
      if (!k::unary_has_derivative_pass(op)) continue;
      // What training runs (autograd): f(x) and f'(x) in one pass, then g f'(x).
      add(fmt::format("{}_forward_with_derivative/{}", name, shape), label, [R, F, n, op](benchmark::State& st) {
        Tensor x = rnd({R, F}, 1), d;
        for (auto _ : st) benchmark::DoNotOptimize(k::unary_with_derivative(op, x, d));
        count_bytes(st, kF32 * 3 * n);
      });
      add(fmt::format("{}_backward_from_derivative/{}", name, shape), label, [R, F, n](benchmark::State& st) {
        Tensor d = rnd({R, F}, 1), g = rnd({R, F}, 2);
        for (auto _ : st) benchmark::DoNotOptimize(k::binary(k::Binary::mul, g, d));
        count_bytes(st, kF32 * 3 * n);
      });
    }
  }
}

void hadamard_benchmarks() {
  // The data grows by sqrt(d) per transform and ends as inf and NaN; x86
  // vector adds take the same time on those (only subnormals are slow), and
  // a rescaling pass would double the traffic measured.
  for (int64_t total : {int64_t{1} << 24, int64_t{1} << 16}) {  // 64 MiB, 256 KiB of floats
    const char* where = total > (1 << 20) ? "64 MiB, memory" : "256 KiB, cache";
    for (int64_t d : {128, 512, 4096, 65536}) {
      if (d > total) continue;
      const int64_t rows = total / d;
      const std::string shape = fmt::format("R{}_D{}", rows, d);
      add("fwht/" + shape, fmt::format("{}: {} adds per element", where, static_cast<int>(std::log2(d))),
          [rows, d](benchmark::State& st) {
            Tensor x = rnd({rows, d}, 1);
            for (auto _ : st) {
              k::fwht_(x);
              benchmark::ClobberMemory();
            }
            count_bytes(st, kF32 * 2.0 * static_cast<double>(rows * d));
            count_flops(st, static_cast<double>(rows * d) * std::log2(static_cast<double>(d)));
          });
    }
    // The dense rotation the randomized Hadamard transform stands in for
    // (quant::GaussianRotation: x Q^T, 2 d multiply-adds per element instead
    // of log2 d additions), on the same rows; 256 KiB only (at d = 4096 the
    // 64 MiB case is 0.5 TFLOP).
    if (total < (1 << 20))
      for (int64_t d : {128, 512, 4096}) {
        const int64_t rows = std::max<int64_t>(1, total / d);
        add(fmt::format("rotation_dense/R{}_D{}", rows, d), fmt::format("{}: x Q^T, Q [d, d]", where),
            [rows, d](benchmark::State& st) {
              Tensor x = rnd({rows, d}, 1), q = rnd({d, d}, 2);
              for (auto _ : st) benchmark::DoNotOptimize(k::matmul(x, k::transpose(q, 0, 1)));
              count_flops(st, 2.0 * static_cast<double>(rows * d) * static_cast<double>(d));
            });
      }
    add(fmt::format("memory_pass/N{}", total), fmt::format("{}: one read + one write, in place", where),
        [total](benchmark::State& st) {
          Tensor x = rnd({total}, 1);
          for (auto _ : st) {
            k::scale_(x, 1.0);
            benchmark::ClobberMemory();
          }
          count_bytes(st, kF32 * 2.0 * static_cast<double>(total));
        });
  }
}

const char* kUsage =
    "usage: heed_microbench [--threads N] [--precision f32|bf16] [Google Benchmark flags]\n"
    "       (heed bench --micro [the same arguments])\n"
    "\n"
    "Per-kernel micro-benchmarks of heed's backend (core/kernels.h) at the shapes of the\n"
    "bundled models: conv1d forward/backward (toy models), the Linear matmuls forward and\n"
    "backward (gpt-128, gpt-256), fused and plain attention forward/backward, LayerNorm,\n"
    "softmax, cross-entropy, and GELU and SiLU forward/backward; the Walsh-Hadamard transform (fwht)\n"
    "against an in-place memory pass (memory_pass).\n"
    "Counters: FLOP = analytic FLOPs per second of wall time (FLOP=85G/s is 85 GFLOP/s);\n"
    "bytes = minimum memory traffic per second, for the memory-bound kernels.\n"
    "\n"
    "  --threads N   threads for every backend (OpenMP, OpenBLAS, oneDNN); default 2\n"
    "  --precision P f32 (default) or bf16: float32 products with bf16 operands, as\n"
    "                heed::set_precision (the Linear matmuls and attention's block products)\n"
    "\n"
    "For example:\n"
    "  --benchmark_filter='attention'          only the attention benchmarks (a regex)\n"
    "  --benchmark_list_tests                  list the benchmarks\n"
    "  --benchmark_min_time=0.1                shorter runs\n"
    "  --benchmark_counters_tabular=true       counters as columns\n"
    "  --benchmark_format=json                 machine-readable output\n"
    "\n"
    "Google Benchmark's own flags:\n";

}  // namespace

int main(int argc, char** argv) {
  int threads = 2;
  std::string precision = "f32";
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string value;
    if (a == "--precision" || a.rfind("--precision=", 0) == 0) {
      if (a == "--precision" && i + 1 >= argc) {
        std::fprintf(stderr, "heed_microbench: --precision expects f32 or bf16\n");
        return 2;
      }
      precision = a == "--precision" ? argv[++i] : a.substr(std::strlen("--precision="));
      continue;
    }
    if (a == "--threads") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "heed_microbench: --threads expects a value\n");
        return 2;
      }
      value = argv[++i];
    } else if (a.rfind("--threads=", 0) == 0) {
      value = a.substr(std::strlen("--threads="));
    } else {
      if (a == "--help" || a == "-h") {
        std::fputs(kUsage, stdout);
        std::fflush(stdout);
        rest.push_back(const_cast<char*>("--help"));  // Google Benchmark prints its flags and exits
        continue;
      }
      rest.push_back(argv[i]);
      continue;
    }
    char* end = nullptr;
    long n = std::strtol(value.c_str(), &end, 10);
    if (value.empty() || *end != '\0' || n < 1 || n > 1024) {
      std::fprintf(stderr, "heed_microbench: --threads expects an integer in 1..1024, got '%s'\n", value.c_str());
      return 2;
    }
    threads = static_cast<int>(n);
  }
  int rest_argc = static_cast<int>(rest.size());
  rest.push_back(nullptr);
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 2;

  heed::set_num_threads(threads);
  try {
    heed::set_precision(heed::parse_precision(precision));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "heed_microbench: %s\n", e.what());
    return 2;
  }
  benchmark::AddCustomContext("heed threads", std::to_string(heed::num_threads()));
  benchmark::AddCustomContext("heed precision", heed::precision_name(heed::precision()));
  benchmark::AddCustomContext("heed backends", heed::backend_info());
  conv1d_benchmarks();
  matmul_benchmarks();
  attention_benchmarks();
  layer_norm_benchmarks();
  softmax_benchmarks();
  cross_entropy_benchmarks();
  activation_benchmarks();
  bias_grad_benchmarks();
  transpose_copy_benchmarks();
  hadamard_benchmarks();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
