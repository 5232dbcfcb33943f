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
  CHECK(has(r.out, "sgemm peak"));
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
  CHECK(has(r.out, "toy-cnn|toy-attention|gpt-128|gpt-256"));
  r = run_cli("bench --conv fft");
  CHECK(r.status != 0);
  CHECK(has(r.out, "'fft'"));
  CHECK(has(r.out, "winograd or direct"));
  r = run_cli("bench --attention-memory --compare");
  CHECK(r.status != 0);
  CHECK(has(r.out, "--attention-memory"));
}
