// tests/experiments/test_copy_resume.cpp: `heed run copy` stopped (by
// --stop-after or Ctrl-C) and resumed is bit-identical to a run that never
// stopped; bad checkpoints are refused, naming the problem.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "data/checkpoint.h"
#include "data/h5.h"
#include "experiments/copy.h"
#include "experiments/sine.h"
#include "resume_check.h"
#include "test_util.h"

extern char** environ;

using namespace heed;
namespace fs = std::filesystem;

namespace {


// 24 steps of a small batch; evaluations at 5, 10, 15, 20 and 24 (so a stop at
// 12 falls between two of them), checkpoints every 4 steps.
std::vector<std::string> small(const std::string& out) {
  return {"--steps", "24", "--batch", "16", "--eval-every", "5", "--checkpoint-every", "4", "--threads", "2",
          "--out", out};
}

int run(std::vector<std::string> args) { return experiments::run_copy(args, {"heed", "run", "copy"}); }

}  // namespace

TEST_CASE("copy resume: 24 steps equal 12 steps, stopped, then resumed to 24, bit for bit") {
  test::TempDir d("heed-copy-resume-");
  REQUIRE(run(small(d.path + "/straight.h5")) == 0);
  auto args = small(d.path + "/stopped.h5");
  args.insert(args.end(), {"--stop-after", "12"});
  REQUIRE(run(args) == 130);
  const std::string ckpt = d.path + "/stopped.ckpt.h5";
  REQUIRE(fs::exists(ckpt));
  CHECK(load_checkpoint(ckpt, "copy").counter("step") == 12);
  REQUIRE(run({"--resume", ckpt, "--threads", "2"}) == 0);
  // Per-step losses, evaluations and the final attention map (the logs), and
  // the final parameters, optimiser state and generators (the checkpoints).
  test::check_same_log(d.path + "/straight.h5", d.path + "/stopped.h5");
  test::check_same_checkpoint(d.path + "/straight.ckpt.h5", ckpt, "copy");
}

TEST_CASE("copy resume: train_copy stopped and resumed through the library returns the uninterrupted result") {
  test::TempDir d("heed-copy-resume-");
  experiments::CopyOptions o;
  o.steps = 20;
  o.batch = 16;
  o.eval_every = 6;
  o.verbose = false;
  experiments::CopyResult straight = experiments::train_copy(o);
  o.run.checkpoint = d.path + "/lib.ckpt.h5";
  o.run.stop_after = 9;
  experiments::CopyResult first = experiments::train_copy(o);
  CHECK(first.stopped);
  CHECK(first.step == 9);
  o.run.stop_after = 0;
  o.run.resume = o.run.checkpoint;
  experiments::CopyResult rest = experiments::train_copy(o);
  CHECK_FALSE(rest.stopped);
  CHECK(rest.step == 20);
  CHECK(rest.final_loss == straight.final_loss);
  CHECK(rest.accuracy == straight.accuracy);
  CHECK(rest.prev_mass == straight.prev_mass);
}

TEST_CASE("copy resume: Ctrl-C finishes the step, writes a checkpoint, flushes the log, prints the resume command, exits 130") {
  test::TempDir d("heed-copy-resume-");
  const std::string out = d.path + "/int.h5", ckpt = d.path + "/int.ckpt.h5", printed = d.path + "/stdout.txt";
  // Far more steps than the test waits for: the run ends only by Ctrl-C.
  std::vector<std::string> argv_s{HEED_CLI_PATH, "run", "copy", "--steps", "1000000", "--batch", "8",
                                  "--checkpoint-every", "20", "--threads", "1", "--out", out};
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, printed.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, HEED_CLI_PATH, &fa, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&fa);
  for (int i = 0; i < 6000 && !fs::exists(ckpt); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  bool started = fs::exists(ckpt);
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(started);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);

  const int64_t step = load_checkpoint(ckpt, "copy").counter("step");
  CHECK(step >= 20);
  std::ifstream in(printed);
  std::stringstream text;
  text << in.rdbuf();
  INFO("printed: " << text.str());
  CHECK(text.str().find(fmt::format("stopped at step {}/1000000", step)) != std::string::npos);
  CHECK(text.str().find("resume with: heed run copy --resume " + ckpt + " --threads 1") != std::string::npos);
  {
    // The log holds every step up to the checkpoint's, and nothing after it.
    h5::File f(out, h5::File::Mode::read);
    std::vector<double> rows = f.read_tensor("metrics/train_loss").to_vector<double>();
    REQUIRE(static_cast<int64_t>(rows.size()) == 3 * step);
    CHECK(rows[rows.size() - 3] == static_cast<double>(step));
  }
  // The printed command continues the run (here for 3 more steps).
  REQUIRE(run({"--resume", ckpt, "--threads", "1", "--stop-after", std::to_string(step + 3)}) == 130);
  CHECK(load_checkpoint(ckpt, "copy").counter("step") == step + 3);
  h5::File f(out, h5::File::Mode::read);
  std::vector<double> rows = f.read_tensor("metrics/train_loss").to_vector<double>();
  REQUIRE(static_cast<int64_t>(rows.size()) == 3 * (step + 3));
  for (int64_t i = 0; i < step + 3; ++i) CHECK(rows[static_cast<size_t>(3 * i)] == static_cast<double>(i + 1));
}

TEST_CASE("copy resume: bad checkpoints are refused, naming the problem") {
  test::TempDir d("heed-copy-resume-");
  auto args = small(d.path + "/base.h5");
  args.insert(args.end(), {"--stop-after", "4"});
  REQUIRE(run(args) == 130);
  const std::string good = d.path + "/base.ckpt.h5";
  Checkpoint ck = load_checkpoint(good, "copy");

  SUBCASE("a sine checkpoint") {
    REQUIRE(experiments::run_sine({"--steps", "4", "--stop-after", "2", "--out", d.path + "/sine.h5"}) == 130);
    test::check_error([&] { run({"--resume", d.path + "/sine.ckpt.h5"}); },
                      {"sine.ckpt.h5", "'sine' experiment", "expected 'copy'"});
  }
  SUBCASE("missing generator state") {
    Checkpoint bad = ck;
    bad.tensors.erase("rng/eval");
    save_checkpoint(d.path + "/norng.ckpt.h5", bad);
    test::check_error([&] { run({"--resume", d.path + "/norng.ckpt.h5"}); }, {"'rng/eval' is missing"});
  }
  SUBCASE("wrong shape") {
    Checkpoint bad = ck;
    bad.tensors["model/head.weight"] = Tensor::zeros({16, 8});
    save_checkpoint(d.path + "/shape.ckpt.h5", bad);
    test::check_error([&] { run({"--resume", d.path + "/shape.ckpt.h5"}); }, {"head.weight", "[16, 8]", "[16, 32]"});
  }
  SUBCASE("contradicting option") {
    test::check_error([&] { run({"--resume", good, "--dim", "64"}); }, {"--dim 64", "contradicts", "32"});
  }
}
