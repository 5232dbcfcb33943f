// experiments/bench.cpp: `heed bench`: training-step speed of the bundled
// workloads, as figures (ms/step, samples or tokens per second, GFLOP/s as a
// share of this machine's sgemm peak measured in the same run, peak memory,
// allocations per step), optionally side by side with PyTorch on the same
// CPU (experiments/bench/torch_peer.py).
//
// `heed bench --attention-memory`: time and peak tensor memory of attention
// forward + backward as T grows, fused (O(T) memory) against plain matmul +
// softmax + matmul (O(T^2)). `heed bench --micro`: the per-kernel
// micro-benchmarks (experiments/bench/micro.cpp, program heed_microbench).
#include "experiments/bench.h"

#include <array>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <iterator>
#include <thread>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <memory>
#include <sstream>

#include "core/allocator.h"
#include "core/env.h"
#include "core/kernels.h"
#include "data/args.h"
#include "experiments/charlm.h"
#include "experiments/common.h"
#include "experiments/shapes_models.h"
#include "heed.h"

#ifndef HEED_SOURCE_DIR
#define HEED_SOURCE_DIR "."
#endif

namespace heed::experiments {

namespace {

struct Workload {
  std::string name;
  std::string unit;      // "samples" or "tokens"
  double items = 0;      // per step
  double flops = 0;      // per training step (analytic): the products the step computes
  double flops_palm = 0;  // GPTs: the same with causal attention counted in full (PaLM's and nanoGPT's MFU), else 0
  bool fewer_mults = false;  // Winograd convolutions: flops counts more multiplications than run
  std::function<void()> forward_backward;  // zero_grad, forward, backward
  std::function<void()> update;            // the optimiser step
  void step() const {
    forward_backward();
    update();
  }
};

// Training FLOPs ~ 3x forward (backward computes two products per forward one).
double conv_flops(double N, double Cin, double Cout, double K, double T) { return 2 * N * Cin * Cout * K * T; }

Workload toy_workload(bool attention, int64_t batch) {
  Generator g(1);
  auto net = attention ? make_shapes_attention(1, false, &g) : make_shapes_cnn(1, &g);
  auto opt = std::make_shared<optim::Adam>(net->named_parameters(), optim::AdamOptions().lr(1e-3));
  Tensor x = randn({batch, 1, 100}, &g), y = randn({batch, 1, 100}, &g);
  const double N = static_cast<double>(batch), T = 100;
  double fwd = conv_flops(N, 1, 64, 5, T) + conv_flops(N, 64, 64, 5, T) + conv_flops(N, 64, 1, 5, T);
  if (attention) {
    fwd += conv_flops(N, 64, 64, 5, T) + 3 * conv_flops(N, 64, 64, 1, T) + 2 * (2 * N * T * T * 64);
  } else {
    fwd += 2 * conv_flops(N, 64, 64, 5, T);
  }
  Workload w;
  w.name = attention ? "toy-attention" : "toy-cnn";
  w.unit = "samples";
  w.items = N;
  w.flops = 3 * fwd;
  w.fewer_mults = heed::conv1d_winograd();
  w.forward_backward = [net, opt, x, y] {
    opt->zero_grad();
    Tensor loss = mse_loss(net->forward(x), y);
    backward(loss);
  };
  w.update = [opt] { opt->step(); };
  return w;
}

// Under mpirun (the data-parallel mode), each process trains on its share of
// the batch and the gradients are averaged (optim::DataParallel); items and
// FLOPs stay those of the whole batch.
Workload gpt_workload(const std::string& name, int64_t width, int64_t context, int64_t batch, int64_t layers = 4,
                      int64_t heads = 4, std::shared_ptr<optim::DataParallel>* ddp_out = nullptr, double dropout = 0) {
  const int64_t vocab = 65;
  Generator g(1);
  auto net = std::make_shared<nn::GPT>(
      nn::GPTOptions(vocab, width, layers, heads, context).dropout(dropout).generator(&g));
  auto opt = std::make_shared<optim::AdamW>(net->named_parameters(), optim::AdamWOptions().lr(1e-3).weight_decay(0.1));
  auto ddp = std::make_shared<optim::DataParallel>(net->named_parameters());
  if (ddp_out) *ddp_out = ddp;
  const int64_t rows = batch / dist::size();
  Tensor ids = randint(0, vocab, {rows, context}, &g), tgt = randint(0, vocab, {rows, context}, &g);
  const double D = static_cast<double>(width), T = static_cast<double>(context), L = layers, V = vocab;
  // Per token, forward: 2 FLOPs per weight of the blocks (12 D^2 per layer)
  // and the LM head (D V), plus per layer the attention products S = Q K^T
  // and P V over the keys a query sees: causal, (T + 1) / 2 on average, and
  // the fused kernel skips the blocks above the diagonal (as --micro counts
  // it). PaLM's MFU (and nanoGPT's estimate_mfu) count all T keys, 4-8% more
  // here: kept as flops_palm, for figures measured that way.
  const double weights = 2 * (12 * D * D * L + D * V);
  const double per_token = weights + 2 * 2 * D * L * (T + 1) / 2;
  Workload w;
  w.name = name;
  w.unit = "tokens";
  w.items = static_cast<double>(batch * context);
  w.flops = 3 * per_token * w.items;
  w.flops_palm = 3 * (weights + 2 * 2 * D * L * T) * w.items;
  w.forward_backward = [net, opt, ddp, ids, tgt] {
    opt->zero_grad();
    Tensor loss = cross_entropy(net->forward(ids), tgt);
    ddp->backward(loss);  // one process: plain backward
  };
  w.update = [opt] { opt->step(); };
  return w;
}

const std::vector<std::string> kWorkloads{"toy-cnn", "toy-attention", "gpt-128", "gpt-256", "nanogpt"};

// A bundled workload by name (kWorkloads). nanogpt: nanoGPT's character-level
// baseline (shakespeare_char: 6 layers, 6 heads, width 384, context 256) at batch 8.
// dropout: the GPTs' (GPT's dropout option: the attention probabilities,
// the residual branches and the embeddings).
Workload make_workload(const std::string& n, std::shared_ptr<optim::DataParallel>* ddp = nullptr,
                       double dropout = 0) {
  if (n == "toy-cnn") return toy_workload(false, 100);
  if (n == "toy-attention") return toy_workload(true, 100);
  if (n == "gpt-128") return gpt_workload(n, 128, 64, 12, 4, 4, ddp, dropout);
  if (n == "gpt-256") return gpt_workload(n, 256, 256, 12, 4, 4, ddp, dropout);
  if (n == "nanogpt") return gpt_workload(n, 384, 256, 8, 6, 6, ddp, dropout);
  fail("bench: --only expects one of toy-cnn|toy-attention|gpt-128|gpt-256|nanogpt, got '{}'", n);
}

// The machine's practical GEMM peak: the best of several 1024^3 and 2048^3
// products and of GPT-128's fc1 product ([768, 128] x [128, 512]), each after
// a warm-up one (a single timing wanders by 20% on a shared machine, and
// every "% of peak" figure divides by it). The products are kernel::matmul's:
// heed's own GEMM where the CPU has AVX2 (226.8-228.5 GFLOP/s on this Zen 4,
// oneDNN's matmul 226.1-226.2 before it), else oneDNN's. The GPT's own shape
// counts because a GEMM's kernel for it can beat its big square ones: on the
// AVX2 path oneDNN's squares alone gave a peak that GPT-128's step exceeded
// (128%).
//
// Each shape's timed products stop after kPeakShapeSeconds (never reached
// by an optimised build: 0.1-0.4 s a shape at 160-230 GFLOP/s), and 2048^3
// is skipped when the 1024^3 warm-up took over kSlowSquareSeconds (under 8.6
// GFLOP/s: an unoptimised build, whose figures are not speeds).
// Under AddressSanitizer the peak ran at 3 GFLOP/s and its ~90 GFLOP took
// ~28 s, twice per `heed bench` run: most of the suite's bench tests. Since
// its float32 tile runs uninstrumented (core/cpu_sgemm_simd.inc) a sanitized
// build reaches ~60 GFLOP/s there, no longer below the threshold, and bf16
// ~16: a sanitized build (GCC's __SANITIZE_ADDRESS__) skips 2048^3 and times
// each shape for kSanitizedShapeSeconds, which took the suite's `heed bench`
// runs from ~12.6 to ~4 s each.
constexpr double kPeakShapeSeconds = 1.0, kSlowSquareSeconds = 0.25, kSanitizedShapeSeconds = 0.2;
#ifdef __SANITIZE_ADDRESS__
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#ifdef __OPTIMIZE__
constexpr bool kOptimised = true;
#else
constexpr bool kOptimised = false;
#endif

struct Peak {
  double gflops = 0;
  bool skipped_big = false;  // 2048^3 not measured (a slow or sanitized build)
};

// The operands of each shape are drawn once per process (the same numbers
// each time: a shape's first draw from Generator(3 + m)) and kept: the peak is
// measured up to twice a row, and drawing its ~10 million normal numbers
// again each time took longer than the products (a 5-step bench of two
// workloads, 4.3 s).
const std::pair<Tensor, Tensor>& peak_operands(int64_t m, int64_t k, int64_t n) {
  static std::map<std::array<int64_t, 3>, std::pair<Tensor, Tensor>> kept;
  auto it = kept.find({m, k, n});
  if (it == kept.end()) {
    Generator g(static_cast<uint64_t>(3 + m));
    Tensor a = randn({m, k}, &g);
    it = kept.emplace(std::array<int64_t, 3>{m, k, n}, std::pair<Tensor, Tensor>{a, randn({k, n}, &g)}).first;
  }
  return it->second;
}

Peak gemm_peak(Precision p) {
  const Precision before = precision();
  set_precision(p);
  Peak r;
  for (auto [m, k, n, reps] : {std::array<int64_t, 4>{1024, 1024, 1024, 8}, {2048, 2048, 2048, 3}, {768, 128, 512, 30}}) {
    if (m == 2048 && r.skipped_big) continue;
    const auto& [a, b] = peak_operands(m, k, n);
    Stopwatch warm;
    kernel::matmul(a, b);
    if (m == 1024 && (kSanitized || warm.seconds() > kSlowSquareSeconds)) r.skipped_big = true;
    const double cap = kSanitized ? kSanitizedShapeSeconds : kPeakShapeSeconds;
    Stopwatch shape;
    for (int64_t i = 0; i < reps && (i == 0 || shape.seconds() < cap); ++i) {
      Stopwatch sw;
      Tensor c = kernel::matmul(a, b);
      r.gflops = std::max(r.gflops, 2.0 * static_cast<double>(m * n * k) / sw.seconds() / 1e9);
    }
  }
  set_precision(before);
  return r;
}
double gemm_peak_gflops(Precision p) { return gemm_peak(p).gflops; }

// ---- the arithmetic peak: what the cores' vector units can do at most ----
// Independent chains of the widest multiply-add the instruction set in use
// has (heed's cap, --isa): AVX-512 FMA on 16 floats, AVX2 FMA on 8, SSE's
// separate multiply and add on 4 (x86-64's baseline); for bf16,
// AVX512-BF16's vdpbf16ps (16 lanes of two products each). Enough chains to
// cover the instruction's latency on every pipe that runs it; nothing is
// read from memory. On the Zen 5 this measured 190-199 GFLOP/s a core in
// float32 and 390-399 in bf16, each core alone or both at once; the GEMM
// peak above reached 92-100% of the first and 80-87% of the second.
#if defined(__x86_64__)
// The sum of every lane of n vectors (which keeps the chains' work alive),
// read as bytes: no instruction of the vectors' own set needed.
template <class V>
double sum_lanes(const V* acc, int n) {
  float v[sizeof(V) / sizeof(float)];
  float sum = 0;
  for (int i = 0; i < n; ++i) {
    std::memcpy(v, &acc[i], sizeof(V));
    for (float x : v) sum += x;
  }
  return sum;
}
// FMA, or with kBf16 vdpbf16ps (the target names AVX512-BF16 for both; the
// FMA loop runs only AVX-512F instructions, on any AVX-512 CPU).
template <int kChains, bool kBf16>
__attribute__((target("avx512f,avx512bf16"))) double chains_avx512(int64_t rounds) {
  __m512 acc[kChains];
#pragma GCC unroll 32
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-3f);
  const __m512bh ah = (__m512bh)_mm512_set1_epi32(0x3f803f80), bh = (__m512bh)_mm512_set1_epi32(0x3a833a83);  // 1, 1e-3
  for (int64_t r = 0; r < rounds; ++r) {
#pragma GCC unroll 32
    for (int i = 0; i < kChains; ++i)
      acc[i] = kBf16 ? _mm512_dpbf16_ps(acc[i], ah, bh) : _mm512_fmadd_ps(acc[i], a, b);
  }
  return sum_lanes(acc, kChains);
}
template <int kChains>
__attribute__((target("avx2,fma"))) double chains_avx2(int64_t rounds) {
  __m256 acc[kChains];
#pragma GCC unroll 32
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(float(i));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(1e-3f);
  for (int64_t r = 0; r < rounds; ++r) {
#pragma GCC unroll 32
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  return sum_lanes(acc, kChains);
}
template <int kChains>
double chains_sse(int64_t rounds) {
  __m128 acc[kChains];
#pragma GCC unroll 32
  for (int i = 0; i < kChains; ++i) acc[i] = _mm_set1_ps(float(i));
  const __m128 a = _mm_set1_ps(0.999f), b = _mm_set1_ps(1e-3f);
  for (int64_t r = 0; r < rounds; ++r) {
#pragma GCC unroll 32
    for (int i = 0; i < kChains; ++i) acc[i] = _mm_add_ps(_mm_mul_ps(acc[i], a), b);
  }
  return sum_lanes(acc, kChains);
}
#endif

// GFLOP/s of `threads` threads each running the chains for ~kArithSeconds
// (after a warm-up), at the same time; 0 where this build has no such loop
// (not x86-64).
constexpr double kArithSeconds = 0.05;
constexpr int kArithTries = 5;
double arithmetic_peak(bool bf16, int64_t threads) {
#if defined(__x86_64__)
  const CpuIsa isa = heed::cpu_isa();
  double flops_per_round = 0;
  double (*run)(int64_t) = nullptr;
  if (bf16) {
    run = chains_avx512<24, true>, flops_per_round = 24.0 * 16 * 2 * 2;  // 16 lanes, 2 products, multiply and add
  } else if (isa == CpuIsa::avx512) {
    run = chains_avx512<24, false>, flops_per_round = 24.0 * 16 * 2;
  } else if (isa == CpuIsa::avx2) {
    run = chains_avx2<12>, flops_per_round = 12.0 * 8 * 2;
  } else {
    run = chains_sse<14>, flops_per_round = 14.0 * 4 * 2;  // 14 + 2 of the 16 registers
  }
  // Rounds for ~kArithSeconds on one thread, from a short timed run.
  int64_t rounds = 1 << 16;
  for (;;) {
    Stopwatch sw;
    volatile double sink = run(rounds);
    (void)sink;
    const double s = sw.seconds();
    if (s > kArithSeconds / 8 || rounds > (int64_t{1} << 40)) {
      rounds = std::max<int64_t>(rounds, static_cast<int64_t>(static_cast<double>(rounds) * kArithSeconds / s));
      break;
    }
    rounds *= 4;
  }
  // Each thread's rate over its own CPU time, so that a thread the system
  // preempts (another program on the core: ctest runs two tests at once)
  // still counts a core's rate; their mean times the cores they can run on
  // at once (threads beyond the cores share them). The best of kArithTries:
  // the machine's speed wanders, as for the GEMM peak.
  cpu_set_t mask;
  const int64_t cores = sched_getaffinity(0, sizeof mask, &mask) == 0 ? CPU_COUNT(&mask) : threads;
  double best = 0;
  for (int k = 0; k < kArithTries; ++k) {
    std::atomic<int64_t> ready{0};
    std::vector<double> rate(static_cast<size_t>(threads));
    std::vector<std::thread> team;
    for (int64_t t = 0; t < threads; ++t)
      team.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < threads) std::this_thread::yield();
        timespec a{}, b{};
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
        volatile double sink = run(rounds);
        (void)sink;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
        const double s = double(b.tv_sec - a.tv_sec) + 1e-9 * double(b.tv_nsec - a.tv_nsec);
        rate[static_cast<size_t>(t)] = flops_per_round * static_cast<double>(rounds) / std::max(s, 1e-9);
      });
    for (auto& th : team) th.join();
    double mean = 0;
    for (double r : rate) mean += r / static_cast<double>(threads);
    best = std::max(best, mean * static_cast<double>(std::min(threads, std::max<int64_t>(1, cores))) / 1e9);
  }
  return best;
#else
  (void)bf16;
  (void)threads;
  return 0;
#endif
}

double peak_rss_mb() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // kB on Linux
}

// How many times a round whose steps ran on fewer threads (busy cores) is
// measured again before it is reported as it is, flagged.
constexpr int kBusyRetries = 2;

struct Result {
  double median_ms = 0, items_per_s = 0, gflops = 0, rss_mb = 0;
  double allocs_per_step = 0;  // the tensor allocator's requests to the system (misses of its cache), per step
  int64_t paced_steps = 0;  // measured steps that ended on fewer threads than asked (core/runtime.h)
};

Result measure(Workload& w, int64_t warmup, int64_t steps) {
  for (int64_t i = 0; i < warmup; ++i) w.step();
  alloc::reset_counters();
  std::vector<double> ms;
  int64_t paced = 0;
  for (int64_t i = 0; i < steps; ++i) {
    Stopwatch sw;
    w.step();
    ms.push_back(1000 * sw.seconds());
    const heed::ThreadPacing p = heed::thread_pacing();
    if (p.active < p.threads) ++paced;
  }
  std::sort(ms.begin(), ms.end());
  Result r;
  const size_t n = ms.size();  // the median as statistics.median takes it (the PyTorch peer's)
  r.median_ms = n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
  r.items_per_s = w.items / (r.median_ms / 1000);
  r.gflops = w.flops / (r.median_ms / 1000) / 1e9;
  r.rss_mb = peak_rss_mb();
  r.allocs_per_step = static_cast<double>(alloc::stats().system_allocs) / static_cast<double>(std::max<int64_t>(steps, 1));
  r.paced_steps = paced;
  return r;
}

// The ops that do a workload's counted FLOPs: matrix products, attention and
// convolutions (an op's profile name is its kind, then its shape).
bool is_product_op(const std::string& op) {
  const std::string kind = op.substr(0, op.find(' '));
  return kind == "linear" || kind == "matmul" || kind == "scaled_dot_product_attention" || kind == "conv1d" ||
         kind == "conv1d_relu";
}

// `--profile`: `steps` more steps with the op profiler on; prints where a
// step's time goes, per op, forward and backward, most first, then the
// products' share of the GEMM peak (peak) and the limit it sets: the step
// with every counted FLOP at the peak and the other ops as measured.
struct Profiled {
  double wall_ms = 0;   // a step with the profiler on
  double bound_ms = 0;  // the products at the peak, everything else as measured (0: no products)
};
Profiled print_profile(const Workload& w, int64_t steps, double peak) {
  autograd::set_profiling(true);
  Stopwatch total;
  for (int64_t i = 0; i < steps; ++i) {
    autograd::profile_mark();
    w.forward_backward();
    Stopwatch sw;
    w.update();
    autograd::profile_add("(optimiser step)", sw.seconds());
  }
  const double wall_ms = 1000 * total.seconds() / static_cast<double>(steps);
  autograd::set_profiling(false);
  auto rows = autograd::profile_results();
  double sum_ms = 0;
  for (const auto& r : rows) sum_ms += 1000 * (r.forward_s + r.backward_s) / static_cast<double>(steps);
  fmt::print("  profile of {} over {} steps: {:.2f} ms/step with the profiler on, {:.2f} ms of it in ops\n", w.name,
             steps, wall_ms, sum_ms);
  fmt::print("  {:<40} {:>9} {:>9} {:>9} {:>7} {:>10}\n", "op", "fwd ms", "bwd ms", "total ms", "share",
             "calls/step");
  const double n = static_cast<double>(steps);
  for (const auto& r : rows) {
    const double f = 1000 * r.forward_s / n, b = 1000 * r.backward_s / n;
    fmt::print("  {:<40} {:>9.3f} {:>9.3f} {:>9.3f} {:>6.1f}% {:>10.1f}\n", r.op, f, b, f + b,
               100 * (f + b) / std::max(sum_ms, 1e-12), static_cast<double>(std::max(r.forward_calls, r.backward_calls)) / n);
  }
  double products_ms = 0;
  for (const auto& r : rows)
    if (is_product_op(r.op)) products_ms += 1000 * (r.forward_s + r.backward_s) / n;
  const double rest_ms = wall_ms - products_ms, at_peak_ms = w.flops / (peak * 1e9) * 1000;
  if (products_ms <= 0 || peak <= 0) return {wall_ms, 0};
  const double gflops = w.flops / products_ms / 1e6;
  const std::string products =
      fmt::format("  products (linear, matmul, attention, convolutions): {:.2f} ms, {:.1f} GFLOP/s = {:.1f}% of the peak",
                  products_ms, gflops, 100 * gflops / peak);
  if (at_peak_ms >= products_ms) {  // at or above the peak: it sets no limit
    const char* why = w.fewer_mults ? "an effective rate: fewer multiplications than counted"
                                    : "above the peaks measured around this row: the machine was slower then";
    fmt::print("{}\n  ({}, so the peak sets no limit);\n  everything else {:.2f} ms.\n", products, why, rest_ms);
    return {wall_ms, 0};
  }
  fmt::print("{};\n  everything else {:.2f} ms. At the peak the products would take {:.2f} ms: this step can reach at\n"
             "  most {:.1f}% of the peak ({:.2f} ms) unless everything else gets faster.\n",
             products, rest_ms, at_peak_ms, 100 * at_peak_ms / (at_peak_ms + rest_ms), at_peak_ms + rest_ms);
  return {wall_ms, at_peak_ms + rest_ms};
}

// The interpreter of the PyTorch peer: the one that sees Debian's python3-*
// packages, or HEED_PYTHON (as `heed plot`).
std::string peer_python() { return env::python("python3-torch"); }

// The PyTorch peer: in the source tree this program was built from, else
// installed beside the executable (PREFIX/bin/heed_torch_peer.py).
std::string torch_peer_script() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates{fs::path(HEED_SOURCE_DIR) / "experiments/bench/torch_peer.py"};
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path() / "heed_torch_peer.py");
  for (const auto& c : candidates)
    if (fs::is_regular_file(c, ec)) return c.string();
  std::string tried;
  for (const auto& c : candidates) tried += (tried.empty() ? "" : ", ") + c.string();
  fail("bench --compare: cannot find the PyTorch peer script (looked at: {})", tried);
}

// The last non-empty line of a program's output: a Python error's message
// without its traceback.
std::string last_line(const std::string& out) {
  size_t end = out.find_last_not_of(" \n\r\t");
  if (end == std::string::npos) return "(no output)";
  const size_t begin = out.rfind('\n', end);
  return out.substr(begin == std::string::npos ? 0 : begin + 1, end + 1 - (begin == std::string::npos ? 0 : begin + 1));
}

// Before heed's first row: the peer's script is there and its interpreter
// imports torch, so a missing PyTorch is said at once, not after minutes.
void check_torch_peer() {
  torch_peer_script();
  std::string python;
  try {
    python = peer_python();
  } catch (const Error& e) {
    fail("bench --compare: {}", e.what());
  }
  const std::string cmd = fmt::format("'{}' -c 'import torch, torch.nn' 2>&1", python);
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) fail("bench --compare: cannot run {}: {}", python, std::strerror(errno));
  std::string out;
  char line[4096];
  while (fgets(line, sizeof line, p)) out += line;
  if (pclose(p) != 0)
    fail("bench --compare: {} cannot import PyTorch ({}); install python3-torch (`apt-get install python3-torch`)",
         python, last_line(out));
}

// Runs the PyTorch peer and returns its median ms per workload.
std::map<std::string, double> run_torch(int64_t threads, int64_t steps, int64_t warmup, const std::string& only,
                                        const std::string& precision = "f32", double dropout = 0) {
  const std::string script = torch_peer_script();
  // On heed's capped instruction set, PyTorch is capped alike: its own
  // kernels (ATen), its oneDNN and OpenBLAS (which both read the cap when
  // they load; the AVX2 pass starts heed with the same OPENBLAS_CORETYPE).
  const CpuIsa isa = cpu_isa();
  const std::string env = isa == cpu_isa_max() ? ""
                          : isa == CpuIsa::avx2
                              ? "ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2 "
                                "OPENBLAS_CORETYPE=Haswell "
                              : "ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=SSE41 DNNL_MAX_CPU_ISA=SSE41 "
                                "OPENBLAS_CORETYPE=Prescott ";
  // The peer inherits the OpenMP spin count share_cores() gives heed
  // (core/threads.cpp), deliberately: on this 2-core machine PyTorch ran
  // GPT-128 at 96-105 ms a step with it and at 155-174 ms at libgomp's
  // default (2026-11-29, alternating), so the comparison is the one that
  // favours PyTorch, not the one that flatters heed.
  std::string cmd = fmt::format("{}'{}' '{}' --threads {} --steps {} --warmup {} --precision {}{}{} 2>&1",
                                env, peer_python(), script, threads, steps, warmup, precision, only.empty() ? "" : " --only " + only,
                                dropout > 0 ? fmt::format(" --dropout {}", dropout) : "");
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) fail("bench: cannot run {}", cmd);
  std::map<std::string, double> out;
  char line[4096];
  std::string all;
  while (fgets(line, sizeof line, p)) {
    all += line;
    char name[256];
    double ms;
    if (std::sscanf(line, "RESULT %255s %lf", name, &ms) == 2) out[name] = ms;
  }
  int rc = pclose(p);
  if (rc != 0 || out.empty())
    fail("bench: the PyTorch peer failed: {} (its whole output: run {})", last_line(all), cmd.substr(0, cmd.size() - 5));
  // The kernel goes on tidying up after the peer's exit for a few tens of
  // ms (measured: ~20 ms of waiting for a core in the next 50 ms); heed's
  // next round starts after that.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  return out;
}

// ---- attention memory: fused versus plain as T grows ----
// One causal self-attention call, forward + backward, through autograd as the
// layers run it: N 1, H 4 heads of width K 32.
struct AttentionMemoryConfig {
  int64_t N = 1, H = 4, K = 32;
};

struct AttentionCall {
  double median_ms = 0;
  int64_t paced_calls = 0;  // measured calls that ended on fewer threads than asked (busy cores)
  int64_t peak_bytes = 0;  // most tensor bytes in use during the call, beyond its inputs
  int64_t scratch_bytes = 0;  // the fused kernels' per-thread scratch held after the calls
};

AttentionCall attention_call(bool fused, int64_t T, const AttentionMemoryConfig& c, int64_t warmup, int64_t repeats) {
  Generator g(7);
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.K));
  // Fused takes q, k, v [N, T, H, K]; the plain path [N, H, T, K].
  const Shape shape = fused ? Shape{c.N, T, c.H, c.K} : Shape{c.N, c.H, T, c.K};
  Tensor q = randn(shape, &g), k = randn(shape, &g), v = randn(shape, &g), go = randn(shape, &g);
  for (Tensor* t : {&q, &k, &v}) t->set_requires_grad();
  auto call = [&] {
    Tensor o;
    if (fused) {
      o = scaled_dot_product_attention(q, k, v, true, scale);
    } else {  // MultiHeadAttention::attend: scores, mask, softmax, product
      Tensor s = matmul(q * scale, transpose(k, -1, -2));  // [N, H, T, T]
      s = masked_fill(s, causal_mask(T), static_cast<double>(std::numeric_limits<float>::lowest()));
      o = matmul(softmax(s, -1), v);  // [N, H, T, K]
    }
    backward(o, go);
  };
  AttentionCall r;
  std::vector<double> ms;
  for (int64_t i = 0; i < warmup + repeats; ++i) {
    const int64_t before = alloc::stats().bytes_in_use;
    alloc::reset_peak();
    Stopwatch sw;
    call();
    const double t = 1000 * sw.seconds();
    r.peak_bytes = std::max(r.peak_bytes, alloc::stats().peak_bytes_in_use - before);  // the gradients included
    for (Tensor* x : {&q, &k, &v}) x->zero_grad();
    if (i >= warmup) {
      ms.push_back(t);
      const heed::ThreadPacing p = heed::thread_pacing();
      if (p.active < p.threads) ++r.paced_calls;
    }
  }
  std::sort(ms.begin(), ms.end());
  r.median_ms = ms[ms.size() / 2];
  if (fused) r.scratch_bytes = kernel::attention_scratch_bytes();
  return r;
}

int run_attention_memory(int64_t threads, int64_t max_t, int64_t plain_max_t, int64_t warmup, int64_t repeats) {
  const AttentionMemoryConfig c;
  const double MiB = 1024.0 * 1024.0;
  fmt::print(
      "heed bench --attention-memory: causal self-attention forward + backward, batch {}, {} heads of width {};\n"
      "{} threads, {}. Peak = most tensor memory (caching allocator) in use during the call beyond\n"
      "its inputs q, k, v and the output gradient, the gradients dq, dk, dv included; median of {} calls.\n"
      "The fused MiB add the scratch the fused kernels keep per thread outside the allocator (scratch\n"
      "MiB: K^T, V^T and the dK, dV sums of a key/value head, a block of scores; held after the calls).\n"
      "x = growth over the previous T (2 = linear, 4 = quadratic). map = one [N, H, T, T] score matrix.\n\n",
      c.N, c.H, c.K, threads, cpu_model(), repeats);
  fmt::print("{:>6} {:>10} {:>11} {:>8} {:>6}   {:>10} {:>11} {:>6}   {:>10} {:>12}\n", "T", "fused ms", "fused MiB",
             "scratch", "x", "plain ms", "plain MiB", "x", "map MiB", "plain/fused");
  AttentionCall prev_fused, prev_plain;
  for (int64_t T = 256; T <= max_t; T *= 2) {
    AttentionCall f = attention_call(true, T, c, warmup, repeats);
    f.peak_bytes += f.scratch_bytes;
    std::string fx = prev_fused.peak_bytes ? fmt::format("{:.2f}", double(f.peak_bytes) / prev_fused.peak_bytes) : "";
    std::string line = fmt::format("{:>6} {:>10.2f} {:>11.2f} {:>8.2f} {:>6}   ", T, f.median_ms, f.peak_bytes / MiB,
                                   f.scratch_bytes / MiB, fx);
    const double map_mib = 4.0 * c.N * c.H * T * T / MiB;
    int64_t plain_paced = 0;
    if (T <= plain_max_t) {
      AttentionCall p = attention_call(false, T, c, warmup, repeats);
      plain_paced = p.paced_calls;
      std::string px = prev_plain.peak_bytes ? fmt::format("{:.2f}", double(p.peak_bytes) / prev_plain.peak_bytes) : "";
      line += fmt::format("{:>10.2f} {:>11.2f} {:>6}   {:>10.2f} {:>11.1f}x", p.median_ms, p.peak_bytes / MiB, px,
                          map_mib, double(p.peak_bytes) / f.peak_bytes);
      prev_plain = p;
    } else {
      line += fmt::format("{:>10} {:>11} {:>6}   {:>10.2f} {:>12}", "-", "-", "", map_mib, "");
    }
    prev_fused = f;
    // The fused kernels keep scratch per thread that ran: on fewer threads
    // (busy cores) the row's memory and time are not the machine's.
    if (f.paced_calls + plain_paced > 0)
      line += fmt::format("   [on fewer threads, the cores were busy: {} of {} fused calls, {} plain]", f.paced_calls,
                          repeats, plain_paced);
    fmt::print("{}\n", line);
    std::fflush(stdout);
  }
  return 0;
}

// `heed bench --micro ARGS`: runs heed_microbench (built beside this program
// when Google Benchmark was found) with ARGS, in place of this process.
[[noreturn]] void exec_microbench(const std::vector<std::string>& args) {
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  std::filesystem::path prog = (ec ? std::filesystem::path(".") : self.parent_path()) / "heed_microbench";
  if (!std::filesystem::exists(prog))
    fail("bench --micro: {} was not built: the micro-benchmarks need Google Benchmark (Debian package "
         "libbenchmark-dev) when CMake configures heed; install it and rebuild (./heed build does both)",
         prog.string());
  std::vector<std::string> argv_s{prog.string()};
  for (const auto& s : args)
    if (s != "--micro") argv_s.push_back(s);
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  execv(prog.c_str(), argv.data());
  fail("bench --micro: cannot run {}: {}", prog.string(), std::strerror(errno));
}

}  // namespace

// `--data-parallel`, the worker side: run by mpirun with 2 processes x 1
// thread; rank 0 prints one line the parent reads.
int run_data_parallel_worker(const std::string& name, int64_t warmup, int64_t steps) {
  dist::init();
  if (dist::size() < 2) fail("bench: --dp-worker runs under mpirun with 2 or more processes");
  std::shared_ptr<optim::DataParallel> ddp;
  Workload w = make_workload(name, &ddp);
  for (int64_t i = 0; i < warmup; ++i) w.step();
  const double exposed0 = ddp->exposed_seconds();
  std::vector<double> ms;
  for (int64_t i = 0; i < steps; ++i) {
    Stopwatch sw;
    w.step();
    // The step time of the slowest process: all wait for it at the next exchange anyway.
    double slowest = 0;
    for (const Tensor& x : dist::all_gather(Tensor::scalar(1000 * sw.seconds(), DType::f64)))
      slowest = std::max(slowest, x.item());
    ms.push_back(slowest);
  }
  std::sort(ms.begin(), ms.end());
  const double exposed_ms = 1000 * (ddp->exposed_seconds() - exposed0) / static_cast<double>(steps);
  if (dist::is_main())
    fmt::print("dp-result {} {} {:.4f} {:.4f} {}\n", name, dist::size(), ms[ms.size() / 2], exposed_ms, ddp->buckets());
  return 0;
}

// `--data-parallel`: the GPT workloads on 1 process x 2 threads (here) and on
// 2 processes x 1 thread (mpirun, the same global batch of 12).
int run_data_parallel(const std::string& only, int64_t warmup, int64_t steps) {
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) fail("bench: cannot find this program's own path: {}", ec.message());
  fmt::print("heed bench --data-parallel: {}\n1 process x 2 threads against 2 processes x 1 thread (mpirun --bind-to "
             "none), global batch 12; median of {} steps\n\n",
             cpu_model(), steps);
  fmt::print("{:<9} {:>13} {:>10} {:>13} {:>10} {:>17} {:>8}\n", "workload", "1x2 ms/step", "tokens/s", "2x1 ms/step",
             "tokens/s", "exposed comm ms", "buckets");
  for (const std::string n : {"gpt-128", "gpt-256"}) {
    if (!only.empty() && n != only) continue;
    heed::set_num_threads(2);
    Workload w = make_workload(n);
    Result one = measure(w, warmup, steps);
    const std::string cmd =
        fmt::format("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 --bind-to none "
                    "--oversubscribe '{}' bench --dp-worker {} --threads 1 --warmup {} --steps {} 2>&1",
                    self, n, warmup, steps);
    std::FILE* pipe = popen(cmd.c_str(), "r");
    if (!pipe) fail("bench: could not start mpirun: {}", std::strerror(errno));
    std::string out;
    char buf[4096];
    while (std::fgets(buf, sizeof buf, pipe)) out += buf;
    const int status = pclose(pipe);
    auto at = out.find("dp-result ");
    if (status != 0 || at == std::string::npos)
      fail("bench: the 2-process run failed (is Open MPI installed? ./heed setup): {}", out);
    std::string name;
    int procs = 0;
    double ms = 0, exposed = 0;
    int64_t buckets = 0;
    std::istringstream line(out.substr(at + 10));
    line >> name >> procs >> ms >> exposed >> buckets;
    fmt::print("{:<9} {:>13.2f} {:>10.0f} {:>13.2f} {:>10.0f} {:>9.2f} ({:>4.1f}%) {:>8}\n", n, one.median_ms,
               one.items_per_s, ms, w.items / (ms / 1000), exposed, 100 * exposed / ms, buckets);
    std::fflush(stdout);
  }
  fmt::print("\nexposed comm: time per step spent waiting for gradient exchanges after backward ended (the part\n"
             "not overlapped with backward's computation), on rank 0.\n");
  return 0;
}

// ---- under load: processes sharing the cores ----
//
// `--load`: the same programs alone and side by side, with libgomp's default
// spin-wait, heed's (share_cores) with fixed threads, and heed's with
// adaptive threads (the default; core/runtime.h), each a child process
// of this one with GOMP_SPINCOUNT and HEED_ADAPTIVE_THREADS set for it. The children are this program
// in an internal mode (--load-worker): "train:<workload>" prints one line per
// step, "sample" times generating characters from a charlm-sized GPT.

int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// What the adaptive threads did in a --load child (core/runtime.h).
void print_pacing() {
  const auto p = heed::thread_pacing();
  fmt::print("load-pacing {} {:.3f}\n", p.reductions, p.reduced_seconds);
}

int run_load_worker(const std::string& what, int64_t steps) {
  if (what.rfind("train:", 0) == 0) {
    Workload w = make_workload(what.substr(6));
    for (int i = 0; i < 2; ++i) w.step();
    for (int64_t i = 0; i < steps; ++i) {
      Stopwatch sw;
      w.step();
      fmt::print("load-step {} {:.4f}\n", monotonic_ns(), 1000 * sw.seconds());
      std::fflush(stdout);
    }
    print_pacing();
    return 0;
  }
  if (what != "sample") fail("bench: --load-worker expects train:<workload> or sample, got '{}'", what);
  Generator g(1);
  nn::GPT model(nn::GPTOptions(73, 128, 4, 4, 64).generator(&g));
  SampleOptions o;
  o.tokens = steps;
  const int64_t t0 = monotonic_ns();
  generate(model, {1, 2, 3}, o);
  fmt::print("load-sample {} {}\n", t0, monotonic_ns());
  print_pacing();
  return 0;
}

// A child process: this program with args, its output into a temporary file.
struct Child {
  pid_t pid = -1;
  std::string out_path;
  std::string output() const {
    std::ifstream in(out_path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  int wait() {
    int st = 0;
    if (pid > 0 && waitpid(pid, &st, 0) < 0) fail("bench --load: waitpid failed: {}", std::strerror(errno));
    pid = -1;
    return st;
  }
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      wait();
    }
    if (!out_path.empty()) std::remove(out_path.c_str());
  }
};

// How a --load child waits and shares: libgomp's spin count, and whether
// heed's adaptive threads are on (core/runtime.h).
struct Policy {
  std::string id, spin;
  bool adaptive;
  std::string label;
};

std::unique_ptr<Child> spawn_self(const std::vector<std::string>& args, const Policy& pol) {
  auto c = std::make_unique<Child>();
  char path[] = "/tmp/heed-bench-load-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) fail("bench --load: cannot create a temporary file: {}", std::strerror(errno));
  c->out_path = path;
  std::vector<std::string> argv_s{"heed", "bench"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& x : argv_s) argv.push_back(x.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "GOMP_SPINCOUNT=", 15) != 0 && std::strncmp(*e, "OMP_WAIT_POLICY=", 16) != 0 &&
        std::strncmp(*e, "HEED_ADAPTIVE_THREADS=", 22) != 0)
      env_s.emplace_back(*e);
  env_s.push_back("GOMP_SPINCOUNT=" + pol.spin);
  env_s.push_back(std::string("HEED_ADAPTIVE_THREADS=") + (pol.adaptive ? "1" : "0"));
  std::vector<char*> envp;
  for (auto& x : env_s) envp.push_back(x.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd, 1);
  posix_spawn_file_actions_adddup2(&fa, fd, 2);
  const int rc = posix_spawn(&c->pid, "/proc/self/exe", &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(fd);
  if (rc != 0) fail("bench --load: cannot start a child process: {}", std::strerror(rc));
  return c;
}

// The "load-step <end ns> <ms>" lines of a training child.
std::vector<std::pair<int64_t, double>> load_steps(const std::string& out) {
  std::vector<std::pair<int64_t, double>> v;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    long long ns;
    double ms;
    if (std::sscanf(line.c_str(), "load-step %lld %lf", &ns, &ms) == 2) v.emplace_back(ns, ms);
  }
  return v;
}

double median_of(std::vector<double> v) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The share of a training child's measured steps it ran on fewer threads
// than asked (its "load-pacing" line; 0 with the adaptive threads off).
double paced_share(const Child& c) {
  const std::string out = c.output();
  const auto at = out.find("load-pacing ");
  long long cuts = 0;
  double seconds = 0;
  if (at == std::string::npos || std::sscanf(out.c_str() + at, "load-pacing %lld %lf", &cuts, &seconds) != 2) return 0;
  double total_ms = 0;
  for (auto& s : load_steps(out)) total_ms += s.second;
  return total_ms > 0 ? std::min(1.0, 1000 * seconds / total_ms) : 0;
}

double finished_train_ms(Child& c) {
  const int st = c.wait();
  auto steps = load_steps(c.output());
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || steps.empty())
    fail("bench --load: a training child failed:\n{}", c.output());
  std::vector<double> ms;
  for (auto& s : steps) ms.push_back(s.second);
  return median_of(ms);
}

int run_load(int64_t threads, int64_t sample_chars) {
  const std::vector<std::pair<std::string, int64_t>> trainers{{"toy-attention", 60}, {"gpt-128", 40}};
  const std::vector<Policy> policies{
      {"default", "300000", false, "libgomp's default spin (300000), fixed threads"},
      {"spin", share_cores_spin(false), false,
       fmt::format("heed's short spin ({}), fixed threads", share_cores_spin(false))},
      {"heed", share_cores_spin(true), true,
       fmt::format("heed's spin ({}) and adaptive threads (the default)", share_cores_spin(true))}};
  const std::string th = std::to_string(threads);
  fmt::print("heed bench --load: {} threads per process, {} cores, {}\n"
             "each figure: median ms per step (or seconds) of one process; x: against the same alone\n\n",
             threads, std::thread::hardware_concurrency(), cpu_model());
  std::map<std::string, std::map<std::string, std::string>> cells;  // row -> policy -> text
  std::vector<std::string> rows;
  auto cell = [&](const std::string& row, const std::string& pol, const std::string& text) {
    if (std::find(rows.begin(), rows.end(), row) == rows.end()) rows.push_back(row);
    cells[row][pol] = text;
  };
  std::map<std::string, double> alone_ms;
  for (const Policy& pol : policies) {
    const std::string& id = pol.id;
    const std::string& label = pol.label;
    for (const auto& [w, steps] : trainers) {
      const std::vector<std::string> args{"--load-worker", "train:" + w, "--steps", std::to_string(steps),
                                          "--threads", th};
      auto a = spawn_self(args, pol);
      const double alone = finished_train_ms(*a);
      alone_ms[id + w] = alone;
      auto p1 = spawn_self(args, pol);
      auto p2 = spawn_self(args, pol);
      const double m1 = finished_train_ms(*p1), m2 = finished_train_ms(*p2);
      cell(w + " alone", id, fmt::format("{:.2f} ms", alone));
      cell(w + " x2 processes", id,
           fmt::format("{:.2f} / {:.2f} ms ({:.1f}x)", m1, m2, std::max(m1, m2) / alone));
      fmt::print("  {:<44} {}: alone {:.2f} ms, two at once {:.2f} and {:.2f} ms", label, w, alone, m1, m2);
      if (pol.adaptive)
        fmt::print(" (on fewer threads {:.0f}% and {:.0f}% of the time; alone {:.0f}%)", 100 * paced_share(*p1),
                   100 * paced_share(*p2), 100 * paced_share(*a));
      fmt::print("\n");
      std::fflush(stdout);
    }
    // The sampler alone, then beside a training run of the toy attention model.
    const std::vector<std::string> sargs{"--load-worker", "sample", "--steps", std::to_string(sample_chars), "--threads",
                                         th};
    auto sample_seconds = [](Child& c) {
      const int st = c.wait();
      long long t0 = 0, t1 = 0;
      const std::string out = c.output();
      const auto at = out.find("load-sample ");
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || at == std::string::npos ||
          std::sscanf(out.c_str() + at, "load-sample %lld %lld", &t0, &t1) != 2)
        fail("bench --load: the sampler child failed:\n{}", out);
      return std::make_pair(t0, t1);
    };
    auto s = spawn_self(sargs, pol);
    const auto [a0, a1] = sample_seconds(*s);
    const double alone_s = double(a1 - a0) / 1e9;
    auto trainer = spawn_self({"--load-worker", "train:toy-attention", "--steps", "1000000", "--threads", th}, pol);
    for (int i = 0; i < 600 && load_steps(trainer->output()).size() < 3; ++i) usleep(50000);
    auto s2 = spawn_self(sargs, pol);
    const auto [b0, b1] = sample_seconds(*s2);
    const auto steps = load_steps(trainer->output());
    kill(trainer->pid, SIGKILL);
    trainer->wait();
    std::vector<double> during;
    for (auto& [ns, ms] : steps)
      if (ns >= b0 && ns <= b1) during.push_back(ms);
    const double beside_s = double(b1 - b0) / 1e9;
    cell(fmt::format("sampler {} chars alone", sample_chars), id, fmt::format("{:.2f} s", alone_s));
    cell(fmt::format("sampler beside toy-attention training", sample_chars), id,
         fmt::format("{:.2f} s ({:.1f}x)", beside_s, beside_s / alone_s));
    cell("  the training meanwhile", id,
         during.empty() ? std::string("no step finished")
                        : fmt::format("{:.2f} ms ({:.1f}x)", median_of(during),
                                      median_of(during) / alone_ms[id + "toy-attention"]));
    fmt::print("  {:<44} sampler: alone {:.2f} s, beside training {:.2f} s\n", label, alone_s, beside_s);
    std::fflush(stdout);
  }
  fmt::print("\n{:<40} {:>30} {:>30} {:>30}\n", "", "libgomp default spin (300000)",
             fmt::format("heed's short spin ({})", share_cores_spin(false)),
             fmt::format("heed's spin ({})", share_cores_spin(true)));
  fmt::print("{:<40} {:>30} {:>30} {:>30}\n", "", "fixed threads", "fixed threads", "+ adaptive threads (heed)");
  for (const auto& r : rows)
    fmt::print("{:<40} {:>30} {:>30} {:>30}\n", r, cells[r]["default"], cells[r]["spin"], cells[r]["heed"]);
  fmt::print("\ntargets: two processes each within 2.5x of alone, the sampler within 3x, and heed's settings no\n"
             "slower alone than the default.\n");
  return 0;
}

int run_bench(const std::vector<std::string>& args) {
  // With --micro anywhere, every other argument belongs to heed_microbench
  // (--threads, --help and Google Benchmark's --benchmark_* flags).
  if (std::find(args.begin(), args.end(), "--micro") != args.end()) exec_microbench(args);
  int64_t threads = 2, steps = 20, warmup = 3, max_t = 4096, plain_max_t = 4096, rounds = 1;
  bool compare = false, attention_memory = false, micro = false, profile = false, data_parallel = false, load = false,
       avx2_pass_off = false;
  int64_t sample_chars = 300;
  double dropout = 0;
  std::string only, conv = "winograd", isa, dp_worker, prec = "both", load_worker;
  std::vector<std::string> isa_names;  // --isa's choices, lowest first
  for (int i = 0; i <= static_cast<int>(CpuIsa::avx512); ++i) isa_names.push_back(cpu_isa_name(static_cast<CpuIsa>(i)));
  Args a("bench",
         "Times one training step (forward, backward, optimiser) of each bundled workload after warm-up:\n"
         "toy-cnn and toy-attention (batch 100), gpt-128 (4 layers, 4 heads, width 128, context 64,\n"
         "batch 12), gpt-256 (width 256, context 256, batch 12) and nanogpt (the shape of nanoGPT's\n"
         "character-level baseline: 6 layers, 6 heads, width 384, context 256; batch 8; no dropout unless\n"
         "--dropout), in\n"
         "float32 and in bf16. GFLOP/s counts what a step computes (causal attention: (T + 1) / 2 keys a\n"
         "query); max RSS MB is the process's peak so far (the GEMM peak's products included);\n"
         "allocs/step, the tensor allocator's requests to the system (misses of its cache) per step.\n"
         "--attention-memory: time and peak tensor memory of attention forward + backward for\n"
         "T = 256, 512, .. max-t, fused against plain (matmul + softmax + matmul).\n"
         "--micro: per-kernel micro-benchmarks (Google Benchmark; heed bench --micro --help).");
  a.integer("threads", &threads, "threads for every backend", 1, 1024)
      .integer("steps", &steps, "measured steps per workload (the median is reported); 3 with --attention-memory", 1)
      .integer("warmup", &warmup, "unmeasured steps first; 1 with --attention-memory", 0)
      .choices("only", &only, kWorkloads, "run only these workloads, comma-separated")
      .flag("no-avx2-pass", &avx2_pass_off,
            "with --compare on an AVX-512 CPU: skip the second pass that times the AVX2 path (--isa avx2)")
      .choice("precision", &prec, {"f32", "bf16", "both"},
              "the precision of the matrix products (both: a bf16 row after each float32 one of the GPT "
              "workloads, where the CPU has native bf16)")
      .flag("compare", &compare, "also run the same workloads in PyTorch (python3-torch) and print the ratio")
      .integer("rounds", &rounds,
               "with --compare: alternate heed and PyTorch this many times per workload and report the median "
               "ratio (this machine's speed drifts between runs)",
               1, 100)
      .flag("profile", &profile,
            "also print where each workload's step time goes, per op (forward, backward), and the share of the "
            "GEMM peak its matrix products reach, with the limit that sets")
      .real("dropout", &dropout,
            "dropout probability of the GPT workloads, as GPT applies it (the attention probabilities, the "
            "residual branches, the embeddings) and PyTorch's peer alike; nanoGPT's baseline trains with 0.2",
            0.0, 1.0, false, true)
      .choice("conv", &conv, {"winograd", "direct"},
              "5-tap convolutions: winograd (F(4, 5), fewer multiplications) or direct (products on heed's GEMM, or "
              "oneDNN without AVX2), to compare the two")
      .choice("isa", &isa, isa_names,
            "cap the instruction set of heed's kernels and oneDNN's (default: the best "
            "this CPU has, or HEED_CPU_ISA), e.g. avx2 to time an AVX2-only CPU's code (OpenBLAS picks its "
            "kernels when it loads: cap it with OPENBLAS_CORETYPE=Haswell in the environment, as --compare's "
            "AVX2 pass does)")
      .flag("attention-memory", &attention_memory,
            "instead: attention time and peak memory against T, fused and plain")
      .integer("max-t", &max_t, "--attention-memory: the longest sequence (T doubles from 256)", 256, 1 << 20)
      .integer("plain-max-t", &plain_max_t,
               "--attention-memory: the longest sequence for the plain path (its memory grows as T^2)", 0, 1 << 20)
      .flag("micro", &micro,
            "instead: run the per-kernel micro-benchmarks (heed_microbench); every other argument goes to it")
      .flag("data-parallel", &data_parallel,
            "instead: the GPT workloads on 1 process x 2 threads against 2 processes x 1 thread (mpirun; "
            "docs/distributed.md): step time, tokens/s and the communication not overlapped")
      .text("dp-worker", &dp_worker, "(internal) the mpirun side of --data-parallel for this workload")
      .flag("load", &load,
            "instead: processes sharing the cores: toy-attention and gpt-128 alone and two at once, and a sampler "
            "alone and beside a training run, with libgomp's default spin-wait, heed's short spin (fixed threads), and "
            "heed's spin with adaptive threads (the default)")
      .integer("sample-chars", &sample_chars, "--load: characters the sampler generates", 1)
      .text("load-worker", &load_worker, "(internal) a child process of --load");
  if (!a.parse(args)) return 0;
  if (!isa.empty()) {
    try {
      heed::set_cpu_isa(heed::parse_cpu_isa(isa, "bench: --isa"));
    } catch (const UsageError&) {
      throw;
    } catch (const Error& e) {  // an instruction set this CPU lacks (the name is one of the choices)
      throw UsageError(e.what());
    }
    setenv("HEED_CPU_ISA", isa.c_str(), 1);  // and in the processes it starts (--data-parallel)
  }
  if (!load_worker.empty()) {
    heed::set_num_threads(static_cast<int>(threads));
    return run_load_worker(load_worker, steps);
  }
  // An option the chosen mode does not read is refused, not ignored.
  auto only_these = [&](const std::string& mode, const std::set<std::string>& uses) {
    for (const char* o : {"threads", "steps", "warmup", "only", "no-avx2-pass", "precision", "compare", "rounds",
                          "profile", "conv", "dropout", "max-t", "plain-max-t", "sample-chars"})
      if (a.given(o) && !uses.count(o))
        throw UsageError(fmt::format("bench: {} does not use --{}",
                                     mode.empty() ? "the training-step benchmark (no --load, --data-parallel or "
                                                    "--attention-memory)"
                                                  : mode,
                                     o));
  };
  if (dp_worker.empty()) {
    if (int(load) + int(data_parallel) + int(attention_memory) > 1)
      throw UsageError("bench: --load, --data-parallel and --attention-memory are three benchmarks; expected one of them");
    if (load) only_these("--load", {"threads", "sample-chars"});
    else if (data_parallel) only_these("--data-parallel (1 x 2 and 2 x 1 threads)", {"only", "warmup", "steps"});
    else if (attention_memory) only_these("--attention-memory", {"threads", "steps", "warmup", "max-t", "plain-max-t"});
    else {
      if (a.given("rounds") && !compare)
        throw UsageError(fmt::format("bench: --rounds {} alternates heed with PyTorch: it is for --compare, which is not "
                                     "given", rounds));
      if (a.given("no-avx2-pass") && !compare)
        throw UsageError("bench: --no-avx2-pass is for --compare, which is not given");
      only_these("", {"threads", "steps", "warmup", "only", "no-avx2-pass", "precision", "compare", "rounds", "profile",
                      "conv", "dropout"});
    }
  }
  if (load) {
    return run_load(threads, sample_chars);
  }
  if (!dp_worker.empty()) {
    heed::set_num_threads(static_cast<int>(threads));
    return run_data_parallel_worker(dp_worker, warmup, steps);
  }
  if (data_parallel) {
    if (!only.empty() && only != "gpt-128" && only != "gpt-256")
      throw UsageError(
          fmt::format("bench: --data-parallel runs gpt-128 and gpt-256; --only expects one of them, got '{}'", only));
    return run_data_parallel(only, warmup, steps);
  }
  if (attention_memory) {
    heed::set_num_threads(static_cast<int>(threads));
    return run_attention_memory(threads, max_t, plain_max_t, a.given("warmup") ? warmup : 1,
                                a.given("steps") ? steps : 3);
  }
  heed::set_conv1d_winograd(conv == "winograd");
  // --only takes one workload or several, comma-separated (each one of kWorkloads: Args::choices).
  std::vector<std::string> selected;
  for (size_t i = 0; !only.empty() && i <= only.size();) {
    const size_t comma = std::min(only.find(',', i), only.size());
    selected.push_back(only.substr(i, comma - i));
    i = comma + 1;
  }
  auto chosen = [&](const std::string& n) {
    return selected.empty() || std::find(selected.begin(), selected.end(), n) != selected.end();
  };
  // The toy models have no bf16 row and no dropout: an option that would
  // change nothing of what was chosen is refused, not ignored.
  const bool any_gpt = std::any_of(kWorkloads.begin(), kWorkloads.end(),
                                   [&](const std::string& n) { return n.rfind("toy", 0) != 0 && chosen(n); });
  if (!any_gpt && prec == "bf16")
    throw UsageError(fmt::format("bench: --precision bf16 times the GPT workloads' products in bf16; --only {} has "
                                 "none (the toy models' convolutions stay float32): expected a GPT workload in --only",
                                 only));
  if (!any_gpt && a.given("dropout"))
    throw UsageError(fmt::format("bench: --dropout applies to the GPT workloads; --only {} has none: expected a GPT "
                                 "workload in --only, or no --dropout",
                                 only));
  const std::string no_bf16 = bf16_unsupported_reason();
  if (prec == "bf16" && !no_bf16.empty()) throw UsageError(fmt::format("bench: --precision bf16: {}", no_bf16));
  std::vector<Precision> precisions;
  if (prec != "bf16") precisions.push_back(Precision::f32);
  if (prec == "bf16" || (prec == "both" && no_bf16.empty())) precisions.push_back(Precision::bf16);
  heed::set_num_threads(static_cast<int>(threads));

  if (compare) check_torch_peer();
  const Peak first = gemm_peak(Precision::f32);
  const double peak = first.gflops;
  const double peak_bf16 = no_bf16.empty() ? gemm_peak_gflops(Precision::bf16) : 0;
  // Not in a sanitized or unoptimised build: its chains' registers live in
  // instrumented memory there (3.7 GFLOP/s under AddressSanitizer).
  const bool arith_measured = kOptimised && !kSanitized;
  const double arith = arith_measured ? arithmetic_peak(false, threads) : 0;
  const double arith_bf16 = arith_measured && no_bf16.empty() ? arithmetic_peak(true, threads) : 0;
  const std::string nthreads = fmt::format("{} thread{}", threads, threads == 1 ? "" : "s");
  fmt::print("heed bench: {}, {}, isa {} (oneDNN {})\nGEMM peak (best of 1024^3, {}768x128x512): float32 {:.1f} "
             "GFLOP/s, {}; measured again right before and right after each row, whose % peak divides by the larger (column peak)\n",
             nthreads, cpu_model(), heed::cpu_isa_name(), kernel::onednn_isa_name(),
             first.skipped_big ? "" : "2048^3 and ", peak,
             no_bf16.empty() ? fmt::format("bf16 {:.1f} GFLOP/s", peak_bf16) : "no bf16 rows: " + no_bf16);
  if (arith > 0)
    fmt::print("arithmetic peak ({} of independent {} chains, nothing read from memory): float32 {:.1f} "
               "GFLOP/s (the GEMM peak is {:.0f}% of it){}\n",
               nthreads, heed::cpu_isa() == CpuIsa::avx512 ? "AVX-512 FMA" : heed::cpu_isa() == CpuIsa::avx2 ? "AVX2 FMA" : "SSE multiply-add",
               arith, 100 * peak / arith,
               arith_bf16 > 0 ? fmt::format(", bf16 {:.1f} GFLOP/s (vdpbf16ps; the GEMM peak is {:.0f}% of it)", arith_bf16,
                                            100 * peak_bf16 / arith_bf16)
                              : std::string());
  else if (!arith_measured)
    fmt::print("arithmetic peak: not measured in {}, whose figures are not speeds\n",
               kSanitized ? "a sanitized build" : "an unoptimised build");
  fmt::print("\n");
  if (dropout > 0)
    fmt::print("GPT workloads with dropout {} (the attention probabilities, the residual branches, the embeddings){}\n\n",
               dropout, compare ? "; PyTorch's alike" : "");
  if (first.skipped_big)
    fmt::print("(2048^3 skipped: {}, whose figures are not speeds)\n\n",
               kSanitized ? std::string("a sanitized build")
                          : fmt::format("1024^3 took over {} s, {}", kSlowSquareSeconds,
                                        heed::cpu_isa() != heed::cpu_isa_max()
                                            ? fmt::format("on the capped instruction set (--isa {})",
                                                          heed::cpu_isa_name())
                                            : std::string(kOptimised ? "a busy machine" : "an unoptimised build")));
  fmt::print("{:<19} {:>9} {:>14} {:>9} {:>7} {:>7} {:>10} {:>12}\n", "workload", "ms/step", "items/s", "GFLOP/s",
             "% peak", "peak", "max RSS MB", "allocs/step");
  // With --compare, each workload's PyTorch run follows its heed run, so a
  // machine whose speed drifts (shared cores, frequency) affects both alike.
  // Rows are keyed "<workload>" (float32) and "<workload> bf16".
  std::map<std::string, std::vector<double>> heed_ms, torch_ms, ratios, pct_peak;
  std::vector<std::string> rows;
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  const int64_t nrounds = compare ? rounds : 1;
  std::map<std::string, int64_t> paced_steps;  // per row, over its rounds
  std::map<std::string, double> palm_factor;    // GPTs: flops_palm / flops
  std::map<std::string, Profiled> profiled;    // per row, with --profile
  // Rounds outermost, then the precisions: each round times the float32
  // step, then the bf16 one, so that the bf16 speed-up of a round compares
  // two steps taken moments apart (this machine's speed drifts by 20-50%
  // over minutes). And each row's % of peak divides by the GEMM peak
  // measured right before it and right after it, at that precision, the
  // larger of the two: the step and the peak it is held against see the
  // machine in the same state. (A peak measured only before could be taken
  // in a slow moment that the step then missed: a nanogpt round on a Zen 3
  // reached 162.8% of a peak of 86.8 GFLOP/s, half the 158-166 of the rounds
  // around it. Where every counted FLOP is done, unlike the toy models'
  // Winograd rates, a % of peak above 100 is a wrong peak, not a fast step.)
  std::map<std::string, std::vector<double>> bf16_speedup;  // per workload, per round: float32 ms / bf16 ms
  for (const auto& n : kWorkloads) {
    if (!chosen(n)) continue;
    Workload w = make_workload(n, nullptr, dropout);
    if (w.flops_palm > 0) palm_factor[n] = w.flops_palm / w.flops;
    std::vector<Precision> here;
    for (Precision p : precisions)
      // The toy models' products are convolutions, which stay float32 (bf16
      // covers matrix products and attention's blocks; toy-attention's one
      // small attention layer would hardly move its row): no bf16 row.
      if (!(p == Precision::bf16 && n.rfind("toy", 0) == 0)) here.push_back(p);
    for (Precision p : here) rows.push_back(p == Precision::bf16 ? n + " bf16" : n);
    std::map<std::string, double> last_peak;
    for (int64_t round = 0; round < nrounds; ++round) {
      std::map<Precision, double> step_ms;
      for (Precision p : here) {
        const std::string row = p == Precision::bf16 ? n + " bf16" : n;
        double pk = gemm_peak_gflops(p);
        set_precision(p);
        Result r = measure(w, round == 0 ? warmup : 1, steps);
        // Steps on fewer threads: another process wanted the cores (heed's
        // adaptive threads gave way) for at least the two ticks that start
        // the pacing, 0.1 s, about a toy model's whole round. Measured again
        // after a pause, twice at most; a round still busy then is flagged.
        for (int again = 0; again < kBusyRetries && r.paced_steps > 0; ++again) {
          fmt::print("  [{} {:.2f} ms/step: {} of {} steps on fewer threads, the cores were busy; measured again]\n",
                     row, r.median_ms, r.paced_steps, steps);
          std::fflush(stdout);
          set_precision(Precision::f32);
          std::this_thread::sleep_for(std::chrono::seconds(1));
          pk = gemm_peak_gflops(p);
          set_precision(p);
          r = measure(w, 1, steps);
        }
        pk = std::max(pk, gemm_peak_gflops(p));  // and right after the row: the larger
        last_peak[row] = pk;
        step_ms[p] = r.median_ms;
        paced_steps[row] += r.paced_steps;
        heed_ms[row].push_back(r.median_ms);
        pct_peak[row].push_back(100 * r.gflops / pk);
        fmt::print("{:<19} {:>9.2f} {:>8.0f} {:<5} {:>9.1f} {:>6.1f}% {:>7.1f} {:>10.0f} {:>12.2f}", row, r.median_ms,
                   r.items_per_s, w.unit, r.gflops, 100 * r.gflops / pk, pk, r.rss_mb, r.allocs_per_step);
        std::fflush(stdout);
        if (compare) {
          auto t = run_torch(threads, steps, warmup, n, precision_name(p), dropout);  // a fresh process: cold each round
          if (t.count(n)) {
            torch_ms[row].push_back(t[n]);
            ratios[row].push_back(t[n] / r.median_ms);
            fmt::print("   PyTorch {:.2f} ms: heed {:.2f}x", t[n], t[n] / r.median_ms);
          }
        }
        // The cores were busy (another process) and heed's adaptive threads
        // ran some steps on fewer threads: this figure is not the machine's.
        if (r.paced_steps > 0) fmt::print("   [{} of {} steps on fewer threads: the cores were busy]", r.paced_steps, steps);
        fmt::print("\n");
        std::fflush(stdout);
        set_precision(Precision::f32);
      }
      if (step_ms.count(Precision::f32) && step_ms.count(Precision::bf16))
        bf16_speedup[n].push_back(step_ms[Precision::f32] / step_ms[Precision::bf16]);
    }
    if (profile)
      for (Precision p : here) {
        const std::string row = p == Precision::bf16 ? n + " bf16" : n;
        set_precision(p);
        profiled[row] = print_profile(w, steps, last_peak[row]);
        set_precision(Precision::f32);
        fmt::print("\n");
      }
  }
  if (conv == "winograd" && (chosen("toy-cnn") || chosen("toy-attention")))
    fmt::print("\nGFLOP/s counts the direct convolution's multiplications (and three 1x1 projections in the\n"
               "self-attention); Winograd convolutions do 2.5x fewer and the self-attention two projections, so the\n"
               "toy models' rates are effective ones and can exceed the peak (--conv direct for the direct path).\n");
  {  // GPT rows: the other count's % of peak, for figures measured that way
    std::string palm;
    for (const auto& [n, factor] : palm_factor)
      for (const std::string& row : std::vector<std::string>{n, n + " bf16"})
        if (pct_peak.count(row))
          palm += fmt::format("{}{} {:.1f}%", palm.empty() ? "" : ", ", row, median(pct_peak[row]) * factor);
    if (!palm.empty())
      fmt::print("\nGPT rows count causal attention as the kernel computes it: each query's (T + 1) / 2 keys on\n"
                 "average. PaLM's MFU and nanoGPT's estimate_mfu count all T (4-8% more FLOPs here); that count's\n"
                 "% peak (medians): {}.\n",
                 palm);
  }
  const bool any_bf16 = std::any_of(rows.begin(), rows.end(), [](const std::string& r) { return r.find(" bf16") != std::string::npos; });
  if (any_bf16)
    fmt::print("\n% peak of a bf16 row is of the bf16 GEMM peak. bf16 rows: matrix products and attention's block\n"
               "products with bf16 operands and float32 accumulation; everything else float32 (PyTorch:\n"
               "torch.autocast(\"cpu\", torch.bfloat16)).\n");
  if (any_bf16) {
    fmt::print("\nbf16 against float32 (heed, medians; the speed-up is the median of the rounds' own):\n");
    for (const auto& n : kWorkloads) {
      if (!bf16_speedup.count(n)) continue;
      std::string each;
      if (bf16_speedup[n].size() > 1)
        for (double x : bf16_speedup[n]) each += fmt::format(" {:.2f}x", x);
      fmt::print("{:<19} {:>9.2f} ms -> {:>9.2f} ms: {:.2f}x{}", n, median(heed_ms[n]), median(heed_ms[n + " bf16"]),
                 median(bf16_speedup[n]), each.empty() ? "" : " (per round:" + each + ")");
      // The profiles' limit: the float32 step against the bf16 one with its
      // products at the bf16 peak and everything else as measured.
      const Profiled &f = profiled[n], &b = profiled[n + " bf16"];
      if (f.wall_ms > 0 && b.bound_ms > 0)
        fmt::print(" (profiled: {:.2f}x; at most {:.2f}x with the bf16 products at the bf16 peak)", f.wall_ms / b.wall_ms,
                   f.wall_ms / b.bound_ms);
      fmt::print("\n");
    }
  }
  if (compare) {
    fmt::print("\nheed against the PyTorch peer (same shapes, same thread count, each run right after heed's{}):\n",
               nrounds > 1 ? fmt::format("; medians of {} alternating rounds", nrounds) : "");
    fmt::print("{:<19} {:>12} {:>14} {:>16}{}\n", "workload", "heed ms", "PyTorch ms", "heed speed-up",
               nrounds > 1 ? "   per round" : "");
    for (const auto& n : rows) {
      if (!ratios.count(n)) continue;
      std::string each;
      if (nrounds > 1)
        for (double x : ratios[n]) each += fmt::format(" {:.2f}x", x);
      // A busy machine: heed's adaptive threads gave way, PyTorch's did not.
      const std::string busy =
          paced_steps[n] > 0 ? fmt::format("   [busy: {} steps on fewer threads, the ratio is not the machine's]",
                                           paced_steps[n])
                             : "";
      fmt::print("{:<19} {:>12.2f} {:>14.2f} {:>15.2f}x  {}{}\n", n, median(heed_ms[n]), median(torch_ms[n]),
                 median(ratios[n]), each, busy);
    }
  }
  // The AVX2 path in the same run: on an AVX-512 CPU, --compare without
  // --isa times the toy models and GPT-128 again in a child process capped
  // to AVX2 (heed's kernels and oneDNN; PyTorch capped alike).
  std::map<std::string, double> avx2_ratio;
  std::map<std::string, bool> avx2_busy;  // the AVX2 pass flagged the row's ratio as not the machine's
  if (compare && isa.empty() && cpu_isa_max() == CpuIsa::avx512 && !avx2_pass_off) {
    std::vector<std::string> want;
    for (const char* n : {"toy-cnn", "toy-attention", "gpt-128"})
      if (chosen(n)) want.push_back(n);
    if (!want.empty()) {
      // OpenBLAS picks its kernels when it loads: capped through the
      // environment of the child (heed's attention blocks and small products
      // run on it), as PyTorch's is.
      const std::string cmd = fmt::format(
          "OPENBLAS_CORETYPE=Haswell '{}' bench --compare --isa avx2 --precision f32 --threads {} --steps {} --warmup {} --rounds {} "
          "--conv {} --dropout {} --only {} 2>&1",
          // This very program, also when its file was replaced meanwhile (a
          // rebuild during a long run: the link's target then ends in
          // " (deleted)", and the pass failed).
          fmt::format("/proc/{}/exe", getpid()), threads, steps, warmup, rounds, conv, dropout,
          fmt::join(want, ","));
      fmt::print("\n---- the AVX2 path (an AVX2-only CPU's code on this one): heed bench --compare --isa avx2 ----\n");
      std::fflush(stdout);
      FILE* pipe = popen(cmd.c_str(), "r");
      if (!pipe) fail("bench: cannot run the AVX2 pass: {}", std::strerror(errno));
      char line[4096];
      bool table = false;
      while (fgets(line, sizeof line, pipe)) {
        fmt::print("{}", line);
        std::fflush(stdout);
        const std::string l = line;
        if (l.rfind("heed against the PyTorch peer", 0) == 0) table = true;
        char name[64];
        double h, t, x;
        if (table && std::sscanf(line, "%63s %lf %lf %lfx", name, &h, &t, &x) == 4) {
          avx2_ratio[name] = x;
          avx2_busy[name] = l.find("[busy:") != std::string::npos;
        }
      }
      if (pclose(pipe) != 0) fail("bench: the AVX2 pass failed (its output is above)");
    }
  }
  // On an AVX2-only CPU the main pass is the AVX2 path.
  if (compare && isa.empty() && cpu_isa_max() == CpuIsa::avx2)
    for (const char* n : {"toy-cnn", "toy-attention", "gpt-128"})
      if (ratios.count(n)) {
        avx2_ratio[n] = median(ratios[n]);
        avx2_busy[n] = paced_steps[n] > 0;
      }
  // The targets of a full --compare run (printed by the main pass only).
  if (compare && isa.empty()) {
    struct Target {
      std::string what;
      bool known;
      double value, goal;
      bool at_least;
      std::string unit;
      std::string why_unknown = "not measured in this run";  // printed when !known
      std::string busy = "";  // why the figure is not the machine's (busy cores), printed after the verdict
    };
    std::vector<Target> targets;
    auto busy_note = [](int64_t paced) {
      return paced > 0 ? fmt::format(" [busy: {} steps on fewer threads, not the machine's figure]", paced)
                       : std::string();
    };
    // The GPT targets are of the workloads without dropout.
    const std::string with_dropout = "not measured: the targets are without dropout (this run has --dropout)";
    auto pct = [&](const std::string& r, double goal) {
      const bool k = pct_peak.count(r) > 0 && dropout == 0;
      targets.push_back({r + " float32, % of the float32 GEMM peak", k, k ? median(pct_peak[r]) : 0, goal, true, "%",
                         dropout > 0 ? with_dropout : "not measured in this run", busy_note(paced_steps[r])});
    };
    auto speedup = [&](const std::string& n, double goal) {
      const bool k = bf16_speedup.count(n) > 0 && dropout == 0;
      targets.push_back({n + " bf16 against float32", k, k ? median(bf16_speedup[n]) : 0, goal, true, "x",
                         dropout > 0              ? with_dropout
                         : no_bf16.empty() ? "not measured in this run"
                                           : "not measured: no bf16 on this CPU",
                         busy_note(paced_steps[n] + paced_steps[n + " bf16"])});
    };
    pct("gpt-128", 80);
    pct("gpt-256", 85);
    speedup("gpt-128", 1.5);
    speedup("gpt-256", 1.8);
    for (const std::string n : {"toy-cnn", "toy-attention", "gpt-128"}) {
      const bool gpt_dropout = n == "gpt-128" && dropout > 0;
      targets.push_back({fmt::format("{} AVX2 path against PyTorch", n), avx2_ratio.count(n) > 0 && !gpt_dropout,
                         avx2_ratio.count(n) ? avx2_ratio[n] : 0, 3.0, true, "x",
                         gpt_dropout      ? with_dropout
                         : avx2_pass_off ? "not measured: --no-avx2-pass"
                                         : "not measured in this run",
                         avx2_busy[n] ? std::string(" [busy: the cores were shared, the ratio is not the machine's]")
                                      : ""});
    }
    fmt::print("\ntargets (medians of this run):\n");
    for (const auto& t : targets) {
      if (!t.known) {  // listed with the reason, not dropped silently
        fmt::print("  {:<52} {:>10} (target >= {}{}): {}\n", t.what, "-", t.goal, t.unit, t.why_unknown);
        continue;
      }
      const bool met = t.at_least ? t.value >= t.goal : t.value <= t.goal;
      fmt::print("  {:<52} {:>8.2f}{:<2} (target >= {}{}): {}{}\n", t.what, t.value, t.unit, t.goal, t.unit,
                 met ? "met" : "NOT met", t.busy);
    }
  }
  return 0;
}

}  // namespace heed::experiments
