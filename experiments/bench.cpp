// experiments/bench.cpp: `heed bench`: training-step speed of the bundled
// workloads, as figures (ms/step, samples or tokens per second, GFLOP/s as a
// share of this machine's sgemm peak measured in the same run, peak memory,
// allocations per step), optionally side by side with PyTorch on the same
// CPU (experiments/bench/torch_peer.py).
#include "experiments/bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>

#include "core/allocator.h"
#include "experiments/args.h"
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
  double flops = 0;      // per training step (analytic)
  std::function<void()> step;
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
  w.step = [net, opt, x, y] {
    opt->zero_grad();
    Tensor loss = mse_loss(net->forward(x), y);
    backward(loss);
    opt->step();
  };
  return w;
}

Workload gpt_workload(const std::string& name, int64_t width, int64_t context, int64_t batch) {
  const int64_t layers = 4, heads = 4, vocab = 65;
  Generator g(1);
  auto net = std::make_shared<nn::GPT>(nn::GPTOptions(vocab, width, layers, heads, context).generator(&g));
  auto opt = std::make_shared<optim::AdamW>(net->named_parameters(), optim::AdamWOptions().lr(1e-3).weight_decay(0.1));
  Tensor ids = randint(0, vocab, {batch, context}, &g), tgt = randint(0, vocab, {batch, context}, &g);
  const double D = static_cast<double>(width), T = static_cast<double>(context), L = layers, V = vocab;
  // Per token, forward: 2 FLOPs per weight of the blocks (12 D^2 per layer)
  // and the LM head (D V), plus the attention products 2 * 2 T D per layer.
  double per_token = 2 * (12 * D * D * L + D * V) + 4 * T * D * L;
  Workload w;
  w.name = name;
  w.unit = "tokens";
  w.items = static_cast<double>(batch * context);
  w.flops = 3 * per_token * w.items;
  w.step = [net, opt, ids, tgt] {
    opt->zero_grad();
    Tensor loss = cross_entropy(net->forward(ids), tgt);
    backward(loss);
    opt->step();
  };
  return w;
}

double sgemm_peak_gflops() {
  Generator g(3);
  Tensor a = randn({1024, 1024}, &g), b = randn({1024, 1024}, &g);
  double best = 1e9;
  for (int i = 0; i < 6; ++i) {
    Stopwatch sw;
    Tensor c = kernel::matmul(a, b);
    best = std::min(best, sw.seconds());
  }
  return 2.0 * 1024 * 1024 * 1024 / best / 1e9;
}

double peak_rss_mb() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) / 1024.0;  // kB on Linux
}

struct Result {
  double median_ms = 0, items_per_s = 0, gflops = 0, rss_mb = 0;
  int64_t allocs_per_step = 0;
};

Result measure(Workload& w, int64_t warmup, int64_t steps) {
  for (int64_t i = 0; i < warmup; ++i) w.step();
  alloc::reset_counters();
  std::vector<double> ms;
  for (int64_t i = 0; i < steps; ++i) {
    Stopwatch sw;
    w.step();
    ms.push_back(1000 * sw.seconds());
  }
  std::sort(ms.begin(), ms.end());
  Result r;
  r.median_ms = ms[ms.size() / 2];
  r.items_per_s = w.items / (r.median_ms / 1000);
  r.gflops = w.flops / (r.median_ms / 1000) / 1e9;
  r.rss_mb = peak_rss_mb();
  r.allocs_per_step = alloc::stats().system_allocs / std::max<int64_t>(steps, 1);
  return r;
}

// Runs the PyTorch peer and returns its median ms per workload.
std::map<std::string, double> run_torch(int64_t threads, int64_t steps, const std::string& only) {
  std::string script = std::string(HEED_SOURCE_DIR) + "/experiments/bench/torch_peer.py";
  std::string cmd = fmt::format("/usr/bin/python3 '{}' --threads {} --steps {}{} 2>&1", script, threads, steps,
                                only.empty() ? "" : " --only " + only);
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
    fail("bench: the PyTorch peer failed (is python3-torch installed? `apt-get install python3-torch`):\n{}", all);
  return out;
}

}  // namespace

int run_bench(const std::vector<std::string>& args) {
  int64_t threads = 2, steps = 20, warmup = 3;
  bool compare = false;
  std::string only;
  Args a("bench",
         "Times one training step (forward, backward, optimiser) of each bundled workload after warm-up:\n"
         "toy-cnn and toy-attention (batch 100), gpt-128 (4 layers, 4 heads, width 128, context 64,\n"
         "batch 12) and gpt-256 (width 256, context 256, batch 12).");
  a.integer("threads", &threads, "threads for every backend", 1, 1024)
      .integer("steps", &steps, "measured steps per workload (the median is reported)", 1)
      .integer("warmup", &warmup, "unmeasured steps first", 0)
      .text("only", &only, "run only this workload (toy-cnn, toy-attention, gpt-128, gpt-256)")
      .flag("compare", &compare, "also run the same workloads in PyTorch (python3-torch) and print the ratio");
  if (!a.parse(args)) return 0;
  const std::vector<std::string> names{"toy-cnn", "toy-attention", "gpt-128", "gpt-256"};
  if (!only.empty() && std::find(names.begin(), names.end(), only) == names.end())
    fail("bench: --only expects one of toy-cnn|toy-attention|gpt-128|gpt-256, got '{}'", only);
  kernel::set_num_threads(static_cast<int>(threads));

  double peak = sgemm_peak_gflops();
  fmt::print("heed bench: {} threads, {}\nsgemm 1024^3 peak: {:.1f} GFLOP/s\n\n", threads, cpu_model(), peak);
  fmt::print("{:<14} {:>9} {:>14} {:>9} {:>7} {:>9} {:>12}\n", "workload", "ms/step", "items/s", "GFLOP/s",
             "% peak", "RSS MB", "allocs/step");
  std::map<std::string, double> heed_ms;
  for (const auto& n : names) {
    if (!only.empty() && n != only) continue;
    Workload w = n == "toy-cnn"         ? toy_workload(false, 100)
                 : n == "toy-attention" ? toy_workload(true, 100)
                 : n == "gpt-128"       ? gpt_workload(n, 128, 64, 12)
                                        : gpt_workload(n, 256, 256, 12);
    Result r = measure(w, warmup, steps);
    heed_ms[n] = r.median_ms;
    fmt::print("{:<14} {:>9.2f} {:>8.0f} {:<5} {:>9.1f} {:>6.1f}% {:>9.0f} {:>12}\n", n, r.median_ms, r.items_per_s,
               w.unit, r.gflops, 100 * r.gflops / peak, r.rss_mb, r.allocs_per_step);
    std::fflush(stdout);
  }
  if (compare) {
    fmt::print("\nPyTorch peer (same shapes, same thread count, same process launch):\n");
    std::fflush(stdout);
    auto torch_ms = run_torch(threads, steps, only);
    fmt::print("{:<14} {:>12} {:>14} {:>16}\n", "workload", "heed ms", "PyTorch ms", "heed speed-up");
    for (const auto& [n, ms] : heed_ms) {
      auto it = torch_ms.find(n);
      if (it == torch_ms.end()) continue;
      fmt::print("{:<14} {:>12.2f} {:>14.2f} {:>15.2f}x\n", n, ms, it->second, it->second / ms);
    }
  }
  return 0;
}

}  // namespace heed::experiments
