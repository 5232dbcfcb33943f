// tests/experiments/test_bench.cpp: `heed bench` as a user runs it: the
// figures it prints, the --profile table, and its refusals of bad flags.
// Speed itself is not asserted (that is what the benchmark is for).
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>

#include "test_util.h"

using heed::test::has;

namespace {

struct BenchRun {
  int status = -1;
  std::string out;  // stdout and stderr
};

// env: assignments for the command's environment ("HEED_CPU_ISA=avx2"), or empty.
BenchRun run_cli(const std::string& args, const std::string& env = "") {
  BenchRun r;
  const std::string cmd = (env.empty() ? "" : "env " + env + " ") + std::string(HEED_CLI_PATH) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// `heed bench` for the cases that check what it prints, not how fast it
// runs: without adaptive threads (HEED_ADAPTIVE_THREADS=0). Beside another
// test (ctest runs two at once) the adaptive threads find the cores busy,
// and the bench measures each such row again after a pause, twice
// (kBusyRetries), its GEMM peak too. This file's cases beside
// test_fault_matrix.cpp took 74 s with them, 51 s without (17 -> 7 s for a
// GPT-128 profile, 17 -> 7 s for the OMP_PROC_BIND case); alone, 31 s.
BenchRun run_bench(const std::string& args, const std::string& env = "") {
  return run_cli(args, (env.empty() ? "" : env + " ") + "HEED_ADAPTIVE_THREADS=0");
}

}  // namespace

TEST_CASE("heed bench: one workload's figures and its per-op profile") {
  BenchRun r = run_bench("bench --only toy-cnn --steps 2 --warmup 1 --threads 2 --profile");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(has(r.out, "GEMM peak"));
  // The arithmetic peak (multiply-add chains on every thread) is the ceiling
  // the GEMM peak stays under: within 25%, for the machine's drift between
  // the two measurements; a FLOP miscounted by 2x on either side would fail.
  // A sanitized build (the suite's second run) says it did not measure it.
  if (has(r.out, "(2048^3 skipped: a sanitized build")) {
    CHECK(has(r.out, "arithmetic peak: not measured in a sanitized build, whose figures are not speeds"));
    CHECK_FALSE(has(r.out, "arithmetic peak ("));
  } else {
    const auto g = r.out.find("GEMM peak (best of");
    const auto a = r.out.find("arithmetic peak (");
    REQUIRE(g != std::string::npos);
    REQUIRE(a != std::string::npos);
    double gemm = 0, arith = 0, share = 0;
    REQUIRE(std::sscanf(r.out.c_str() + r.out.find(": float32 ", g), ": float32 %lf GFLOP/s", &gemm) == 1);
    REQUIRE(std::sscanf(r.out.c_str() + r.out.find(": float32 ", a), ": float32 %lf GFLOP/s (the GEMM peak is %lf%% of it)",
                        &arith, &share) == 2);
    CHECK(arith > 0);
    CHECK(gemm <= 1.25 * arith);
    CHECK(std::abs(share - 100 * gemm / arith) <= 0.6);  // printed as a whole percent
  }
  for (const char* column : {"ms/step", "items/s", "GFLOP/s", "% peak", "RSS MB", "allocs/step"})
    CHECK(has(r.out, column));
  CHECK(has(r.out, "toy-cnn"));
  CHECK_FALSE(has(r.out, "toy-attention"));  // --only
  CHECK(has(r.out, "profile of toy-cnn over 2 steps"));
  // The CNN's Conv1dReLU layers run the fused op; its last conv has one output channel.
  CHECK(has(r.out, "conv1d_relu [100, 64, 100]"));
  CHECK(has(r.out, "conv1d [100, 1, 100]"));
  CHECK(has(r.out, "(optimiser step)"));
  CHECK(has(r.out, "(accumulate grad)"));
  CHECK(has(r.out, "effective"));  // the Winograd rates are labelled as such
  CHECK_FALSE(has(r.out, "bf16 against float32"));  // the toy models have no bf16 row
  // The products' share of the peak: Winograd's effective rate can pass it,
  // and then no limit is claimed (the GPT test below checks the limit line).
  const auto at = r.out.find("  products (linear, matmul, attention, convolutions): ");
  REQUIRE(at != std::string::npos);
  double products_ms = 0, gflops = 0, pct = 0;
  REQUIRE(std::sscanf(r.out.c_str() + at, "  products (linear, matmul, attention, convolutions): %lf ms, %lf GFLOP/s = %lf%%",
                      &products_ms, &gflops, &pct) == 3);
  CHECK(products_ms > 0);
  if (has(r.out, "an effective rate")) CHECK(pct > 100);
  else CHECK(has(r.out, "this step can reach at"));
}

TEST_CASE("heed bench: a GPT workload's profile and its limit, and a bf16 row after the float32 one where the CPU has bf16") {
  BenchRun r = run_bench("bench --only gpt-128 --steps 1 --warmup 0 --profile");
  INFO(r.out);
  REQUIRE(r.status == 0);
  // The products' share and the limit they set (float32 row): the limit is
  // the products at the peak plus everything else, as the line says.
  const auto at = r.out.find("  products (linear, matmul, attention, convolutions): ");
  REQUIRE(at != std::string::npos);
  double products_ms = 0, gflops = 0, pct = 0, rest_ms = 0, at_peak_ms = 0, most_pct = 0, bound_ms = 0;
  const int fields = std::sscanf(
      r.out.c_str() + at,
      "  products (linear, matmul, attention, convolutions): %lf ms, %lf GFLOP/s = %lf%% of the peak;\n"
      "  everything else %lf ms. At the peak the products would take %lf ms: this step can reach at\n"
      "  most %lf%% of the peak (%lf ms)",
      &products_ms, &gflops, &pct, &rest_ms, &at_peak_ms, &most_pct, &bound_ms);
  if (fields == 3) {
    // The products ran faster than the peaks measured around the row (a
    // sanitized build's figures swing so): no limit is claimed, and the GPT
    // has no Winograd to call the rate effective.
    CHECK(pct >= 100);
    CHECK(has(r.out, "above the peaks measured around this row"));
    CHECK_FALSE(has(r.out, "an effective rate"));
  } else {
    REQUIRE(fields == 7);
    CHECK(products_ms > at_peak_ms);  // below the peak
    CHECK(rest_ms > 0);               // the optimiser step at least
    CHECK(bound_ms == doctest::Approx(at_peak_ms + rest_ms).epsilon(0.01));
    CHECK(most_pct == doctest::Approx(100 * at_peak_ms / bound_ms).epsilon(0.01));
  }
  // The row's % peak divides its GFLOP/s by the larger of the peaks measured right before and right
  // after it (column peak).
  const auto row = r.out.find("\ngpt-128 ");
  REQUIRE(row != std::string::npos);
  double ms = 0, items = 0, rate = 0, row_pct = 0, row_peak = 0;
  REQUIRE(std::sscanf(r.out.c_str() + row, "\ngpt-128 %lf %lf tokens %lf %lf%% %lf", &ms, &items, &rate, &row_pct,
                      &row_peak) == 5);
  REQUIRE(row_peak > 0.05);
  // Each figure is printed to 0.1 (a sanitized build runs at a few GFLOP/s):
  // the printed % lies within what the printed rate and peak allow.
  CHECK(row_pct >= 100 * (rate - 0.05) / (row_peak + 0.05) - 0.05);
  CHECK(row_pct <= 100 * (rate + 0.05) / (row_peak - 0.05) + 0.05);
  // The FLOPs behind the rate: GPT-128's (width 128, 4 layers, context 64,
  // vocabulary 65, batch 12) with causal attention as the kernel computes it,
  // (T + 1) / 2 keys a query; all T keys (PaLM's count) would be 3.9% more.
  const double D = 128, L = 4, T = 64, V = 65, tokens = 12 * 64;
  const double causal = 3 * tokens * (2 * (12 * D * D * L + D * V) + 2 * D * L * (T + 1));
  const double full = 3 * tokens * (2 * (12 * D * D * L + D * V) + 4 * D * L * T);
  const double lo = (rate - 0.05) * (ms - 0.005) * 1e6, hi = (rate + 0.05) * (ms + 0.005) * 1e6;
  CHECK(lo <= causal);
  CHECK(causal <= hi);
  if (rate > 10) CHECK_FALSE((lo <= full && full <= hi));
  CHECK(has(r.out, "PaLM's MFU and nanoGPT's estimate_mfu count all T"));
  if (heed::bf16_unsupported_reason().empty()) {
    CHECK(has(r.out, "\ngpt-128 "));
    CHECK(has(r.out, "\ngpt-128 bf16 "));
    CHECK(has(r.out, "bf16 against float32"));
    CHECK(has(r.out, "GFLOP/s, bf16 "));  // both peaks measured
    // One round: the speed-up is that round's float32 step over its bf16 one.
    const auto line = r.out.find("\ngpt-128 ", r.out.find("bf16 against float32"));
    REQUIRE(line != std::string::npos);
    double f32_ms = 0, bf16_ms = 0, speedup = 0;
    REQUIRE(std::sscanf(r.out.c_str() + line, "\ngpt-128 %lf ms -> %lf ms: %lfx", &f32_ms, &bf16_ms, &speedup) == 3);
    CHECK(speedup == doctest::Approx(f32_ms / bf16_ms).epsilon(0.01));
    // With --profile: how far bf16 could go with its products at the bf16 peak.
    CHECK(has(r.out, "with the bf16 products at the bf16 peak)"));
  } else {
    CHECK(has(r.out, "no bf16 rows: bf16 needs a CPU with AVX512-BF16"));
    CHECK_FALSE(has(r.out, "gpt-128 bf16"));
    r = run_bench("bench --only gpt-128 --steps 1 --precision bf16");
    CHECK(r.status != 0);
    CHECK(has(r.out, "AVX512-BF16"));
  }
}

TEST_CASE("heed bench --dropout: the GPT workloads train with dropout, attention still on the fused kernel") {
  BenchRun r = run_bench("bench --only gpt-128 --steps 1 --warmup 0 --precision f32 --dropout 0.2 --profile");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(has(r.out, "GPT workloads with dropout 0.2"));
  CHECK(has(r.out, "dropout [12, 64, 128]"));                   // the residual branches and the embeddings
  CHECK(has(r.out, "scaled_dot_product_attention [12, 64, 4, 32]"));  // the probabilities' dropout inside it
  CHECK_FALSE(has(r.out, "softmax ["));                         // not the plain path
  BenchRun none = run_bench("bench --only gpt-128 --steps 1 --warmup 0 --precision f32 --profile");
  INFO(none.out);
  REQUIRE(none.status == 0);
  CHECK_FALSE(has(none.out, "dropout ["));
  CHECK_FALSE(has(none.out, "GPT workloads with dropout"));
}

TEST_CASE("heed bench --conv direct: the toy CNN on oneDNN's direct convolutions") {
  BenchRun r = run_bench("bench --only toy-cnn --steps 1 --warmup 0 --conv direct");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(has(r.out, "toy-cnn"));
  CHECK_FALSE(has(r.out, "effective"));
}

TEST_CASE("heed bench: bad flags are refused, naming the value and what was expected") {
  BenchRun r = run_bench("bench --rounds 2");
  CHECK(r.status != 0);
  CHECK(has(r.out, "--rounds 2"));
  CHECK(has(r.out, "--compare"));
  r = run_bench("bench --only toy-transformer");
  CHECK(r.status != 0);
  CHECK(has(r.out, "toy-transformer"));
  CHECK(has(r.out, "toy-cnn, toy-attention, gpt-128, gpt-256 or nanogpt"));
  r = run_bench("bench --precision fp16");
  CHECK(r.status != 0);
  CHECK(has(r.out, "'fp16'"));
  CHECK(has(r.out, "f32, bf16 or both"));
  r = run_bench("bench --conv fft");
  CHECK(r.status != 0);
  CHECK(has(r.out, "'fft'"));
  CHECK(has(r.out, "winograd or direct"));
  r = run_bench("bench --attention-memory --compare");
  CHECK(r.status != 0);
  CHECK(has(r.out, "--attention-memory"));
  r = run_bench("bench --isa avx3");
  CHECK(r.status != 0);
  CHECK(has(r.out, "bench: --isa"));
  CHECK(has(r.out, "'avx3'"));
  CHECK(has(r.out, "baseline, avx2 or avx512"));
}

TEST_CASE("heed bench --isa caps heed's kernels and oneDNN's, and says so in its header") {
  // avx2 where the CPU has it (the AVX2-only CPUs' code on an AVX-512 one), else baseline.
  const bool avx2 = heed::cpu_isa_max() >= heed::CpuIsa::avx2;
  const std::string isa = avx2 ? "avx2" : "baseline";
  // (Without a HEED_CPU_ISA the suite itself may run under: --isa cannot
  // raise the cap the environment set.)
  BenchRun r = run_bench("bench --only toy-cnn --steps 1 --warmup 0 --isa " + isa, "-u HEED_CPU_ISA");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(has(r.out, "isa " + isa + " (oneDNN " + (avx2 ? "avx2)" : "")));
  CHECK(has(r.out, "toy-cnn"));
  CHECK(has(r.out, "effective") == avx2);  // Winograd with AVX2, oneDNN's direct kernels without
  if (heed::cpu_isa_max() < heed::CpuIsa::avx512) {
    r = run_bench("bench --only toy-cnn --steps 1 --warmup 0 --isa avx512");
    CHECK(r.status != 0);
    CHECK(has(r.out, "set_cpu_isa(avx512): this CPU has no AVX-512F"));
  }
}

TEST_CASE("HEED_CPU_ISA is applied to heed's kernels and oneDNN's, and a bad value is refused naming it") {
  const bool avx2 = heed::cpu_isa_max() >= heed::CpuIsa::avx2;
  BenchRun r = run_cli("info", avx2 ? "HEED_CPU_ISA=avx2" : "HEED_CPU_ISA=baseline");
  INFO(r.out);
  REQUIRE(r.status == 0);
  if (avx2) {
    CHECK(has(r.out, "isa=avx2;"));  // oneDNN's
    CHECK(has(r.out, "heed isa=avx2"));
    CHECK(has(r.out, "conv1d 5-tap: Winograd F(4,5) AVX2"));
  } else {
    CHECK(has(r.out, "heed isa=baseline"));
    CHECK(has(r.out, "conv1d 5-tap: direct (no AVX2)"));
  }
  if (avx2) {  // an explicit ONEDNN_MAX_CPU_ISA keeps oneDNN's cap its own
    r = run_cli("info", "HEED_CPU_ISA=baseline ONEDNN_MAX_CPU_ISA=AVX2");
    CHECK(has(r.out, "isa=avx2;"));
    CHECK(has(r.out, "heed isa=baseline"));
  }
  r = run_cli("info", "HEED_CPU_ISA=avx3");
  CHECK(r.status != 0);
  CHECK(has(r.out, "HEED_CPU_ISA"));
  CHECK(has(r.out, "'avx3'"));
  CHECK(has(r.out, "baseline, avx2 or avx512"));
}

TEST_CASE("HEED_ADAPTIVE_THREADS turns the adaptive threads off or on, and a bad value is refused naming it") {
  BenchRun r = run_cli("info");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(has(r.out, "(adaptive on)"));  // the default
  r = run_cli("info", "HEED_ADAPTIVE_THREADS=0");
  REQUIRE(r.status == 0);
  CHECK(has(r.out, "(adaptive off)"));
  r = run_cli("info", "HEED_ADAPTIVE_THREADS=off");
  CHECK(has(r.out, "(adaptive off)"));
  r = run_cli("info", "HEED_ADAPTIVE_THREADS=on");
  CHECK(has(r.out, "(adaptive on)"));
  r = run_cli("info", "HEED_ADAPTIVE_THREADS=false");
  CHECK(has(r.out, "(adaptive off)"));
  // Checked before any command runs: a bad command line's status.
  r = run_cli("info", "HEED_ADAPTIVE_THREADS=maybe");
  CHECK(r.status == 2);
  CHECK(has(r.out, "HEED_ADAPTIVE_THREADS"));
  CHECK(has(r.out, "'maybe'"));
  CHECK(has(r.out, "expected 1, on, true, yes, 0, off, false or no"));
}

TEST_CASE("with OMP_PROC_BIND=true, heed's restart keeps libgomp's places: its threads run on different cores") {
  // libgomp binds the initial thread to the first place when it loads; the
  // process share_cores() restarts used to inherit that one-core mask, and
  // libgomp then bound every thread to CPU 0.
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  BenchRun r = run_bench("bench --only toy-attention --steps 2 --warmup 1 --threads 2",
                  "-u HEED_SHARE_CORES -u GOMP_SPINCOUNT OMP_PROC_BIND=true OMP_DISPLAY_AFFINITY=true "
                  "'OMP_AFFINITY_FORMAT=thread-on %A'");  // as from a shell: the restart happens
  INFO(r.out);
  REQUIRE(r.status == 0);
  std::set<std::string> on;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("thread-on ", 0) == 0) on.insert(line.substr(10));
  REQUIRE(!on.empty());
  CHECK(on.size() == static_cast<size_t>(std::min(cores, 2L)));
}

TEST_CASE("heed bench --attention-memory: the fused path's memory, its scratch included, grows linearly and stays below the plain path's") {
  BenchRun r = run_bench("bench --attention-memory --max-t 1024 --plain-max-t 1024 --threads 2");
  INFO(r.out);
  REQUIRE(r.status == 0);
  // Rows: T, fused ms, fused MiB, scratch MiB, [x,] plain ms, plain MiB, [x,] ... (no x in the first)
  std::vector<std::vector<double>> rows;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::vector<double> v;
    for (std::string w; ls >> w;) {
      char* end = nullptr;
      const double d = std::strtod(w.c_str(), &end);
      if (end == w.c_str() || *end != '\0') break;
      v.push_back(d);
    }
    if (v.size() >= 7 && (v[0] == 256 || v[0] == 512 || v[0] == 1024)) rows.push_back(v);
  }
  REQUIRE(rows.size() == 3);
  for (const auto& v : rows) {
    CAPTURE(v[0]);
    CHECK(v[3] > 0);     // the kernels' scratch is counted
    CHECK(v[3] < v[2]);  // and is part of the fused figure
  }
  // Fused memory about doubles with T (linear); the plain path's is larger.
  CHECK(rows[2][2] / rows[1][2] < 2.5);
  CHECK(rows[2][2] / rows[1][2] > 1.5);
  CHECK(rows[2][6] > 4 * rows[2][2]);
}

TEST_CASE("heed bench: bf16 or dropout for the toy models alone is refused, not a silent empty table") {
  BenchRun r = run_bench("bench --precision bf16 --only toy-cnn");
  CHECK(r.status == 2);
  CHECK(has(r.out, "--precision bf16"));
  CHECK(has(r.out, "--only toy-cnn"));
  CHECK(has(r.out, "expected a GPT workload"));
  CHECK_FALSE(has(r.out, "GEMM peak"));  // refused before measuring anything
  r = run_bench("bench --dropout 0.2 --precision f32 --only toy-cnn,toy-attention");
  CHECK(r.status == 2);
  CHECK(has(r.out, "--dropout"));
  CHECK(has(r.out, "--only toy-cnn,toy-attention"));
  CHECK_FALSE(has(r.out, "GEMM peak"));
}

TEST_CASE("heed bench --compare with a HEED_PYTHON that names no program: one line naming it, before any row") {
  for (const std::string& value : {std::string("/nonexistent/python3"), std::string("/tmp"),
                                   std::string("no-such-python-heed")}) {
    CAPTURE(value);
    BenchRun r = run_bench("bench --compare --only toy-attention --steps 1 --warmup 0 --no-avx2-pass",
                         "HEED_PYTHON=" + value);
    CHECK(r.status == 1);
    CHECK(r.out.rfind("heed: bench --compare: HEED_PYTHON='" + value + "'", 0) == 0);
    CHECK(has(r.out, "expected a Python 3 interpreter with python3-torch"));
    CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
    CHECK_FALSE(has(r.out, "GEMM peak"));
  }
}

TEST_CASE("heed bench --compare without PyTorch: one line naming the interpreter, before heed's first row") {
  // An interpreter that fails to import torch the way Python does.
  char dir[] = "/tmp/heed_bench_nopy_XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string py = std::string(dir) + "/python3";
  {
    FILE* f = std::fopen(py.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs("#!/bin/sh\necho 'Traceback (most recent call last):'\necho '  File \"<string>\", line 1'\n"
               "echo \"ModuleNotFoundError: No module named 'torch'\"\nexit 1\n",
               f);
    std::fclose(f);
  }
  REQUIRE(chmod(py.c_str(), 0755) == 0);
  BenchRun r = run_bench("bench --compare --only toy-attention --steps 1 --warmup 0 --no-avx2-pass", "HEED_PYTHON=" + py);
  CHECK(r.status == 1);
  CHECK(has(r.out, py));
  CHECK(has(r.out, "No module named 'torch'"));
  CHECK(has(r.out, "python3-torch"));
  CHECK_FALSE(has(r.out, "Traceback"));
  CHECK_FALSE(has(r.out, "GEMM peak"));  // nothing measured first
  std::remove(py.c_str());
  rmdir(dir);
}
