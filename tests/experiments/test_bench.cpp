// tests/experiments/test_bench.cpp: `heed bench` as a user runs it: the
// figures it prints, the --profile table, and its refusals of bad flags.
// Speed itself is not asserted (that is what the benchmark is for).
#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "test_util.h"

namespace {

struct Run {
  int status = -1;
  std::string out;  // stdout and stderr
};

Run run_cli(const std::string& args) {
  Run r;
  const std::string cmd = std::string(HEED_CLI_PATH) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

}  // namespace

TEST_CASE("heed bench: one workload's figures and its per-op profile") {
  Run r = run_cli("bench --only toy-cnn --steps 2 --warmup 1 --threads 2 --profile");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(has(r.out, "GEMM peak"));
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
}

TEST_CASE("heed bench: a GPT workload gets a bf16 row after its float32 one where the CPU has bf16") {
  Run r = run_cli("bench --only gpt-128 --steps 1 --warmup 0");
  INFO(r.out);
  REQUIRE(r.status == 0);
  if (heed::bf16_unsupported_reason().empty()) {
    CHECK(has(r.out, "\ngpt-128 "));
    CHECK(has(r.out, "\ngpt-128 bf16 "));
    CHECK(has(r.out, "bf16 against float32"));
    CHECK(has(r.out, "GFLOP/s, bf16 "));  // both peaks measured
  } else {
    CHECK(has(r.out, "no bf16 rows: bf16 needs a CPU with AVX512-BF16"));
    CHECK_FALSE(has(r.out, "gpt-128 bf16"));
    r = run_cli("bench --only gpt-128 --steps 1 --precision bf16");
    CHECK(r.status != 0);
    CHECK(has(r.out, "AVX512-BF16"));
  }
}

TEST_CASE("heed bench --conv direct: the toy CNN on oneDNN's direct convolutions") {
  Run r = run_cli("bench --only toy-cnn --steps 1 --warmup 0 --conv direct");
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK(has(r.out, "toy-cnn"));
  CHECK_FALSE(has(r.out, "effective"));
}

TEST_CASE("heed bench: bad flags are refused, naming the value and what was expected") {
  Run r = run_cli("bench --rounds 2");
  CHECK(r.status != 0);
  CHECK(has(r.out, "--rounds 2"));
  CHECK(has(r.out, "--compare"));
  r = run_cli("bench --only toy-transformer");
  CHECK(r.status != 0);
  CHECK(has(r.out, "toy-transformer"));
  CHECK(has(r.out, "toy-cnn|toy-attention|gpt-128|gpt-256|nanogpt"));
  r = run_cli("bench --precision fp16");
  CHECK(r.status != 0);
  CHECK(has(r.out, "'fp16'"));
  CHECK(has(r.out, "f32, bf16 or both"));
  r = run_cli("bench --conv fft");
  CHECK(r.status != 0);
  CHECK(has(r.out, "'fft'"));
  CHECK(has(r.out, "winograd or direct"));
  r = run_cli("bench --attention-memory --compare");
  CHECK(r.status != 0);
  CHECK(has(r.out, "--attention-memory"));
}
