// tests/experiments/test_fault_matrix.cpp: no run is ever lost. Every bundled
// experiment and the example user program (one row each; a new experiment
// gets the whole matrix by adding a row) goes through the same faults as real
// processes: --stop-after, Ctrl-C, kill -9 at several steps and in the middle
// of a checkpoint write, each followed by the resume command the program
// printed; the continued run must be bit-identical to one never interrupted
// (every per-step loss, every final tensor; no step missing or doubled). Then
// every refused resume must leave the log and the checkpoint byte-identical.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "data/checkpoint.h"
#include "data/h5.h"
#include "../data/file_damage.h"
#include "resume_check.h"
#include "spawn.h"
#include "test_util.h"

using namespace heed;
namespace fs = std::filesystem;

namespace {

struct Row {
  std::string experiment;                // as the checkpoint names it
  std::vector<std::string> program;      // the command without options
  std::vector<std::string> args;         // small settings (without --out)
  int64_t steps;                         // total steps of those settings
  int done;                              // exit status of a completed run
  std::vector<std::string> contradict;   // an option the resumed run may not change
  std::vector<std::string> other_model;  // options of a differently shaped model
  std::vector<std::string> longer;       // options that continue a finished run by 4 steps
  std::vector<std::string> skip_tensors; // checkpoint keys that hold timings
};

// args with each option of extra ("--name VALUE") in place of its own: heed
// refuses an option given twice.
std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& extra) {
  for (size_t i = 0; i + 1 < extra.size(); i += 2)
    for (size_t j = 0; j + 1 < args.size(); ++j)
      if (args[j] == extra[i]) {
        args.erase(args.begin() + static_cast<std::ptrdiff_t>(j), args.begin() + static_cast<std::ptrdiff_t>(j + 2));
        break;
      }
  return test::cat(args, extra);
}

std::string corpus_path() {
  static const std::string path = [] {
    std::string p = test::temp_path("fault-corpus.txt");
    std::ofstream f(p);
    for (int i = 0; i < 120; ++i) f << "In the beginning God created the heaven and the earth. ";
    return p;
  }();
  return path;
}

std::vector<Row> rows() {
  const std::string cli = HEED_CLI_PATH;
  std::vector<Row> all = {
      {"copy", {cli, "run", "copy"}, {"--steps", "24", "--batch", "16", "--eval-every", "5"}, 24, 0,
       {"--dim", "64"}, {"--dim", "16"}, {"--steps", "28"}, {}},
      {"sine", {cli, "run", "sine"}, {"--steps", "40", "--hidden", "8"}, 40, 1, {"--lr", "0.01"}, {"--hidden", "6"},
       {"--steps", "44"}, {}},
      {"charlm", {cli, "run", "charlm"},
       {"--text", corpus_path(), "--layers", "1", "--heads", "2", "--width", "16", "--context", "16", "--batch", "4",
        "--steps", "24", "--eval-every", "10", "--eval-batches", "2"},
       24, 0, {"--heads", "4"}, {"--width", "24"}, {"--steps", "28"}, {}},
      {"shapes", {cli, "run", "shapes"}, {"--train", "80", "--test", "15", "--batch", "20", "--epochs", "5"}, 20, 0,
       {"--lr", "0.01"}, {"--model", "cnn"}, {"--epochs", "6"}, {"acc/"}},
      {"scaling", {cli, "run", "scaling"},
       {"--steps", "24", "--dk-max", "16", "--seeds", "1", "--dim", "16", "--batch", "8", "--eval-every", "5"}, 24, 0,
       {"--lr", "0.01"}, {"--dim", "8"}, {"--steps", "28"}, {}},
      {"fit_sine", {HEED_EXAMPLE_PATH}, {"--steps", "40"}, 40, 0, {"--lr", "0.01"}, {}, {"--steps", "44"}, {}},
      {"timeseries", {cli, "run", "timeseries"},
       {"--steps", "24", "--length", "32", "--period-min", "4", "--period-max", "8", "--test", "8", "--eval-every", "5"},
       24, 0, {"--lr", "0.01"}, {"--dim", "16"}, {"--steps", "28"}, {}},
      {"crossattn", {cli, "run", "crossattn"},
       {"--steps", "24", "--dim", "16", "--length", "32", "--test", "8", "--eval-every", "5"}, 24, 0, {"--lr", "0.01"},
       {"--dim", "24"}, {"--steps", "28"}, {}},
  };
  // bf16 mixed precision, where the CPU has it: products of 8 MFLOP (width
  // 64, 256 tokens), so bf16 really runs; a resume may not change precision.
  if (bf16_unsupported_reason().empty())
    all.push_back({"charlm", {cli, "run", "charlm"},
                   {"--text", corpus_path(), "--layers", "1", "--heads", "2", "--width", "64", "--context", "32",
                    "--batch", "8", "--steps", "24", "--eval-every", "10", "--eval-batches", "2", "--precision", "bf16"},
                   24, 0, {"--precision", "f32"}, {"--width", "32"}, {"--steps", "28"}, {}});
  else
    MESSAGE("no bf16 row in the fault matrix: ", bf16_unsupported_reason());
  return all;
}

using test::cat;
using test::Result;
using test::slurp;
using test::start;
using test::wait_status;

Result run(const std::vector<std::string>& argv, const std::string& dir) { return test::run_process(argv, dir); }

// Waits (up to 20 s) until the output file `out` of a started process
// contains `what`; the time it did.
std::chrono::steady_clock::time_point printed(const std::string& out, const std::string& what) {
  for (int i = 0; i < 20000 && slurp(out).find(what) == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return std::chrono::steady_clock::now();
}

// The command after "resume with: ", split at spaces (the test's paths have none).
std::vector<std::string> printed_resume(const Result& r) {
  const std::string key = "resume with: ";
  auto at = r.out.rfind(key);
  REQUIRE(at != std::string::npos);
  std::istringstream line(r.out.substr(at + key.size(), r.out.find('\n', at) - at - key.size()));
  std::vector<std::string> words;
  for (std::string w; line >> w;) words.push_back(w);
  if (!words.empty() && words[0] == "heed") words[0] = HEED_CLI_PATH;
  return words;
}

// The step of the checkpoint at path (-1 when there is none yet).
int64_t checkpoint_step(const std::string& path) {
  try {
    h5::File f(path, h5::File::Mode::read);
    return std::get<int64_t>(f.get_attr("/", "counter.step"));
  } catch (const std::exception&) {
    return -1;
  }
}

// The step column of a metric: every step once, in order, from 1.
void check_every_step_once(const std::string& log, const std::string& metric, int64_t last) {
  std::vector<double> rows = h5::File(log, h5::File::Mode::read).read_tensor("metrics/" + metric).to_vector<double>();
  REQUIRE(static_cast<int64_t>(rows.size()) == 3 * last);
  for (int64_t i = 0; i < last; ++i) CHECK(rows[static_cast<size_t>(3 * i)] == static_cast<double>(i + 1));
}

// After a kill: the log opens for SWMR readers (h5py, as users read live
// logs) and `heed inspect` reads it.
void check_readable_after_kill(const std::string& log, const std::string& dir) {
  Result py = run({"/usr/bin/python3", "-c",
                   "import sys, h5py\n"
                   "f = h5py.File(sys.argv[1], 'r', libver='latest', swmr=True)\n"
                   "n = sum(1 for k in f['metrics'])\n"
                   "print('metrics', n)\n",
                   log},
                  dir);
  INFO("h5py: " << py.out << py.err);
  CHECK(py.status == 0);
  Result in = run({HEED_CLI_PATH, "inspect", log}, dir);
  INFO("heed inspect: " << in.out << in.err);
  CHECK(in.status == 0);
}

// Whether row goes through every fault and every refusal. In the sanitized
// suite (every process several times slower) four rows do: copy, shapes, the
// example user program and the bf16 row where the CPU has one (else charlm),
// which together hold every kind of state a checkpoint keeps; every other
// row is stopped once and resumed, through its own checkpoint code, and must
// still equal its uninterrupted run. The Release suite takes every row
// through everything.
bool every_fault(const Row& row) {
#ifdef __SANITIZE_ADDRESS__
  const bool bf16 = std::find(row.args.begin(), row.args.end(), "bf16") != row.args.end();
  return row.experiment == "copy" || row.experiment == "shapes" || row.experiment == "fit_sine" || bf16 ||
         (row.experiment == "charlm" && !bf16_unsupported_reason().empty());
#else
  (void)row;
  return true;
#endif
}

}  // namespace

TEST_CASE("fault matrix: stop, Ctrl-C and kill -9 (also mid-checkpoint), then resume, equal the uninterrupted run") {
  for (const Row& row : rows()) {
    CAPTURE(row.experiment);
    test::TempDir d("heed-fault-" + row.experiment + "-");
    const std::string& p = d.path;
    auto cmd = [&](const std::string& name, std::vector<std::string> extra = {}) {
      return cat(cat(cat(row.program, row.args), {"--out", p + "/" + name + ".h5", "--checkpoint-every", "2"}), extra);
    };
    const std::string metric =
        row.experiment == "shapes" || row.experiment == "timeseries" ? "cnn/train_loss" : "train_loss";
    // The reference: never interrupted.
    Result ref = run(cmd("ref"), p);
    INFO("reference: " << ref.out << ref.err);
    REQUIRE(ref.status == row.done);
    check_every_step_once(p + "/ref.h5", metric, row.steps);

    // The same run, taken through every fault: a stop, Ctrl-C, kill -9 at a
    // step, kill -9 inside a checkpoint write; each time resumed with the
    // command the program printed (or the documented one after a kill).
    const std::string log = p + "/f.h5", ckpt = p + "/f.ckpt.h5";
    Result r = run(cmd("f", {"--stop-after", "3"}), p);
    INFO("stopped run: " << r.out << r.err);
    REQUIRE(r.status == 130);
    CHECK(checkpoint_step(ckpt) == 3);
    std::vector<std::string> resume = printed_resume(r);
    CHECK(resume == cat(row.program, {"--resume", ckpt}));

    // A stop signal once the checkpoint reaches `at_least`: finish the step,
    // checkpoint, flush, print the resume command, exit 128 + the signal.
    auto stop_with = [&](int sig, int64_t at_least, const std::string& name) {
      pid_t pid = start(resume, p + "/" + name + ".out", p + "/" + name + ".err");
      for (int i = 0; i < 3000 && checkpoint_step(ckpt) < at_least; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      kill(pid, sig);
      int status = wait_status(pid);
      Result rs{status, slurp(p + "/" + name + ".out"), slurp(p + "/" + name + ".err")};
      INFO("after signal " << sig << ": " << rs.out << rs.err);
      if (status == 128 + sig) {
        CHECK(printed_resume(rs) == resume);
        const int64_t at = checkpoint_step(ckpt);
        CHECK(rs.out.find(fmt::format("stopped at step {}/{}", at, row.steps)) != std::string::npos);
        check_every_step_once(log, metric, at);
      } else {
        CHECK(status == row.done);  // the run ended before the signal came (a fast machine): nothing to stop
      }
    };
    const bool all_faults = every_fault(row);
    if (all_faults) stop_with(SIGINT, 5, "int");  // Ctrl-C: 130
    // SIGTERM (kill's default, mpirun's on Ctrl-C): the same, 143.
    if (all_faults && checkpoint_step(ckpt) < row.steps - 3) stop_with(SIGTERM, checkpoint_step(ckpt) + 1, "term");
    for (int kills = 0; all_faults && kills < 2 && checkpoint_step(ckpt) < row.steps - 4; ++kills) {  // kill -9 at two later steps
      const int64_t before = checkpoint_step(ckpt);
      pid_t pid = start(resume, p + "/kill.out", p + "/kill.err");
      for (int i = 0; i < 3000 && checkpoint_step(ckpt) < before + 2; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      kill(pid, SIGKILL);
      int status = wait_status(pid);
      CHECK((status == 128 + SIGKILL || status == row.done));
      check_readable_after_kill(log, p);
    }
    if (all_faults && checkpoint_step(ckpt) < row.steps - 2) {  // kill -9 inside the next checkpoint write
      const int64_t before = checkpoint_step(ckpt);
      setenv("HEED_FAULT_KILL_IN_CHECKPOINT_WRITE", "1", 1);
      Result rk = run(resume, p);
      unsetenv("HEED_FAULT_KILL_IN_CHECKPOINT_WRITE");
      INFO("killed in a checkpoint write: " << rk.out << rk.err);
      CHECK(rk.status == 128 + SIGKILL);
      CHECK(checkpoint_step(ckpt) == before);  // the previous checkpoint is intact
      check_readable_after_kill(log, p);
    }
    Result fin = run(resume, p);
    INFO("final resume: " << fin.out << fin.err);
    REQUIRE(fin.status == row.done);
    check_every_step_once(log, metric, row.steps);
    test::check_same_log(p + "/ref.h5", log);
    test::check_same_checkpoint(p + "/ref.ckpt.h5", ckpt, row.experiment, row.skip_tensors);

    // A finished run continues for more steps.
    Result more = run(cat(cat(row.program, {"--resume", ckpt}), row.longer), p);
    INFO("continued: " << more.out << more.err);
    CHECK(more.status == row.done);
    CHECK(checkpoint_step(ckpt) > row.steps);
  }
}

TEST_CASE("fault matrix: every refused resume names the problem and leaves log and checkpoint byte-identical") {
  const std::vector<Row> all = rows();
  for (const Row& row : all) {
    if (!every_fault(row)) continue;
    CAPTURE(row.experiment);
    test::TempDir d("heed-refuse-" + row.experiment + "-");
    const std::string& p = d.path;
    const std::string log = p + "/r.h5", ckpt = p + "/r.ckpt.h5";
    REQUIRE(run(cat(cat(row.program, row.args), {"--out", log, "--stop-after", "5"}), p).status == 130);
    // Another experiment's checkpoint (the next row's).
    const Row& other = all[(&row - all.data() + 1) % all.size()];
    const std::string other_ckpt = p + "/other.ckpt.h5";
    REQUIRE(run(cat(cat(other.program, other.args), {"--out", p + "/other.h5", "--stop-after", "2"}), p).status == 130);
    // The same experiment with another model.
    std::string model_ckpt;
    if (!row.other_model.empty()) {
      REQUIRE(run(cat(cat(row.program, with(row.args, row.other_model)), {"--out", p + "/m.h5", "--stop-after", "2"}), p)
                  .status == 130);
      Checkpoint c = load_checkpoint(p + "/m.ckpt.h5", row.experiment);
      const Checkpoint mine = load_checkpoint(ckpt, row.experiment);
      c.config = mine.config;  // this run's configuration and identity, the other's tensors
      c.run_id = mine.run_id;
      model_ckpt = p + "/model.ckpt.h5";
      save_checkpoint(model_ckpt, c);
    }
    const std::string good = slurp(ckpt);
    // A flipped byte in the middle of the largest weight's data (the file's
    // middle byte may be free space, whose damage nothing can see), and the
    // first half only.
    const std::string corrupt = p + "/corrupt.ckpt.h5", truncated = p + "/truncated.ckpt.h5";
    {
      std::ofstream(corrupt, std::ios::binary) << good;
      const Checkpoint c = load_checkpoint(ckpt, row.experiment);
      std::string largest;
      for (const auto& [k, t] : c.tensors)
        if (k.rfind("model/", 0) == 0 && (largest.empty() || t.numel() > c.tensors.at(largest).numel())) largest = k;
      REQUIRE(!largest.empty());
      const std::string bytes = test::tensor_bytes(c.tensors.at(largest));
      test::flip_byte_in(corrupt, bytes, bytes.size() / 2);
      std::ofstream(truncated, std::ios::binary) << good.substr(0, good.size() / 2);
    }
    struct Refusal {
      std::string what;
      std::vector<std::string> args;
      std::vector<std::string> message;
    };
    std::vector<Refusal> refusals = {
        {"another experiment's checkpoint", {"--resume", other_ckpt}, {"other.ckpt.h5", other.experiment}},
        {"a corrupt checkpoint", {"--resume", corrupt}, {"corrupt.ckpt.h5"}},
        {"a truncated checkpoint", {"--resume", truncated}, {"truncated.ckpt.h5"}},
        {"a contradicting option", cat({"--resume", ckpt}, row.contradict), {"--" + row.contradict[0].substr(2), "contradicts"}},
        {"the log given as checkpoint", {"--resume", log}, {"r.h5"}},
        {"fewer steps than done", cat({"--resume", ckpt}, {row.longer[0], "1"}), {"step"}},
    };
    if (!model_ckpt.empty()) refusals.push_back({"another model", {"--resume", model_ckpt}, {"model", "does not fit"}});
    for (const Refusal& f : refusals) {
      CAPTURE(f.what);
      const std::string log_before = slurp(log), ckpt_before = slurp(ckpt);
      Result r = run(cat(row.program, f.args), p);
      INFO("stdout: " << r.out << "\nstderr: " << r.err);
      CHECK((r.status == 1 || r.status == 2));
      for (const auto& m : f.message) CHECK(r.err.find(m) != std::string::npos);
      CHECK(r.err.find("terminate called") == std::string::npos);
      CHECK(slurp(log) == log_before);
      CHECK(slurp(ckpt) == ckpt_before);
    }
  }
}

TEST_CASE("a stop during a long evaluation cuts it short; the resumed run evaluates that step first, as if unstopped") {
  test::TempDir d("heed-evalstop-");
  const std::string& p = d.path;
  // Evaluations at steps 2 and 3 that take about a second each (the steps
  // themselves milliseconds): a SIGTERM soon after the run begins comes
  // during the first. (Under AddressSanitizer everything is ~5x slower.)
#ifdef __SANITIZE_ADDRESS__
  const std::string batches = "2000";
#else
  const std::string batches = "10000";
#endif
  const std::vector<std::string> args = {"run", "charlm", "--text", corpus_path(), "--layers", "1", "--heads", "2",
                                         "--width", "16", "--context", "16", "--batch", "4", "--steps", "3",
                                         "--eval-every", "2", "--eval-batches", batches};
  Result ref = run(cat(cat({HEED_CLI_PATH}, args), {"--out", p + "/ref.h5"}), p);
  INFO("reference: " << ref.out << ref.err);
  REQUIRE(ref.status == 0);

  const std::string out = p + "/f.out";
  pid_t pid = start(cat(cat({HEED_CLI_PATH}, args), {"--out", p + "/f.h5"}), out, p + "/f.err");
  printed(out, "logging to");
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // steps 1 and 2, into step 2's evaluation
  kill(pid, SIGTERM);
  Result stopped{wait_status(pid), slurp(out), slurp(p + "/f.err")};
  INFO("stopped: " << stopped.out << stopped.err);
  REQUIRE(stopped.status == 143);
  CHECK(stopped.out.find("step 2/3: evaluation cut short by the stop; a resumed run evaluates step 2 first") !=
        std::string::npos);
  CHECK(stopped.out.find("val loss") == std::string::npos);  // no evaluation was finished
  CHECK(checkpoint_step(p + "/f.ckpt.h5") == 2);
  fs::copy_file(p + "/f.ckpt.h5", p + "/keep.ckpt.h5");

  // Stopped again during the redone evaluation: cut too, and the run ends
  // before its next step, the checkpoint as it was.
  {
    const std::string checkpoint_before = slurp(p + "/f.ckpt.h5");
    pid_t again = start(printed_resume(stopped), out, p + "/f.err");
    printed(out, "resumed from");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    kill(again, SIGINT);
    Result twice{wait_status(again), slurp(out), slurp(p + "/f.err")};
    INFO("stopped during the redone evaluation: " << twice.out << twice.err);
    CHECK(twice.status == 130);
    CHECK(twice.out.find("step 2/3: evaluation cut short") != std::string::npos);
    CHECK(twice.out.find("stopped at step 2/3 before its next step") != std::string::npos);
    CHECK(printed_resume(twice) == printed_resume(stopped));
    CHECK(slurp(p + "/f.ckpt.h5") == checkpoint_before);
  }

  // Resumed as far as the owed step only: it evaluates step 2 and ends
  // (no step runs, so the checkpoint still owes it).
  Result owed = run(cat(printed_resume(stopped), {"--steps", "2"}), p);
  INFO("resumed to step 2: " << owed.out << owed.err);
  REQUIRE(owed.status == 0);
  CHECK(owed.out.find("step 2/2: train loss") != std::string::npos);
  // Then to the end: step 2's evaluation again, logged once.
  Result resumed = run(printed_resume(stopped), p);
  INFO("resumed: " << resumed.out << resumed.err);
  REQUIRE(resumed.status == 0);
  CHECK(resumed.out.find("step 2/3: train loss") != std::string::npos);
  test::check_same_log(p + "/ref.h5", p + "/f.h5");
  test::check_same_checkpoint(p + "/ref.ckpt.h5", p + "/f.ckpt.h5", "charlm");
  // Back to the stop's checkpoint, into the same log: still every step once.
  Result back = run({HEED_CLI_PATH, "run", "charlm", "--resume", p + "/keep.ckpt.h5", "--out", p + "/f.h5"}, p);
  INFO("from the stop's checkpoint again: " << back.out << back.err);
  REQUIRE(back.status == 0);
  test::check_same_log(p + "/ref.h5", p + "/f.h5");
}

TEST_CASE("a stop during shapes', timeseries' or crossattn's test-set evaluation cuts it short; the resume equals "
          "the unstopped run") {
  // Two steps, each followed by an evaluation of a large test set (a few
  // tenths of a second or more) while a step takes milliseconds: a SIGINT
  // during the first evaluation may cut it (the second, the run's last, is
  // its result). The signal's time comes from the reference run: 60% of the
  // way from its "logging to" to the first evaluation's result, so inside
  // that evaluation however fast the machine and the build are (a fixed
  // 0.5 s missed it on a fast machine in the sanitized build). Under
  // AddressSanitizer the evaluations run ~30x slower: there the test sets
  // are 4-7x smaller.
#ifdef __SANITIZE_ADDRESS__
  const std::string shapes_test = "300", timeseries_test = "1024", crossattn_test = "3072";
#else
  const std::string shapes_test = "2000", timeseries_test = "8192", crossattn_test = "12288";
#endif
  struct Case {
    std::string experiment;
    std::vector<std::string> args;
    std::string cut;        // what the stopped run says
    std::string evaluated;  // a line of the first step's evaluation, finished
    std::vector<std::string> skip;  // checkpoint keys of timings
  };
  const std::vector<Case> cases = {
      {"shapes",
       {"--train", "20", "--batch", "20", "--epochs", "2", "--test", shapes_test},
       "epoch 1/2: evaluation cut short by the stop; a resumed run evaluates step 1 first",
       "epoch 1/2: train mse",
       {"acc/"}},
      {"timeseries",
       {"--steps", "2", "--eval-every", "1", "--length", "32", "--period-min", "4", "--period-max", "8", "--test",
        timeseries_test},
       "step 1: evaluation cut short by the stop; a resumed run evaluates step 1 first",
       "step 1 attention: test mse",
       {}},
      {"crossattn",
       {"--steps", "2", "--eval-every", "1", "--dim", "16", "--length", "32", "--test", crossattn_test},
       "step 1: evaluation cut short by the stop; a resumed run evaluates step 1 first",
       "step 1: test mse",
       {}},
  };
  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::time_point a, clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  for (const Case& c : cases) {
    CAPTURE(c.experiment);
    test::TempDir d("heed-evalstop-" + c.experiment + "-");
    const std::string& p = d.path;
    const std::vector<std::string> command = cat({HEED_CLI_PATH, "run", c.experiment}, c.args);
    // The reference, started as the stopped runs are: when it prints
    // "logging to" and when the first evaluation's result.
    const clock::time_point ref_start = clock::now();
    pid_t ref_pid = start(cat(command, {"--out", p + "/ref.h5"}), p + "/ref.out", p + "/ref.err");
    const clock::time_point ref_logging = printed(p + "/ref.out", "logging to");
    const clock::time_point ref_evaluated = printed(p + "/ref.out", c.evaluated);
    const int ref_status = wait_status(ref_pid);
    const Result ref{ref_status, slurp(p + "/ref.out"), slurp(p + "/ref.err")};
    const double ref_seconds = seconds(ref_start, clock::now());
    // Between the two lines: the model's set-up, step 1 (milliseconds), then
    // the evaluation, most of it.
    double wait = 0.6 * seconds(ref_logging, ref_evaluated);
    INFO("reference: " << ref.out << ref.err);
    REQUIRE(ref.status == 0);
    CHECK(ref.out.find(c.evaluated) != std::string::npos);

    // The signal may miss the evaluation on a loaded machine (the process
    // held up before its first step, or the evaluation over before the
    // signal): then the run stops at a step's end, and the test tries again.
    const std::string out = p + "/f.out";
    Result stopped;
    double stop_seconds = 0;
    for (int attempt = 0; attempt < 3; ++attempt) {
      for (const char* f : {"/f.h5", "/f.ckpt.h5"}) fs::remove(p + f);
      pid_t pid = start(cat(command, {"--out", p + "/f.h5"}), out, p + "/f.err");
      printed(out, "logging to");
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));  // step 1, into its evaluation
      const clock::time_point signalled = clock::now();
      kill(pid, SIGINT);
      stopped = Result{wait_status(pid), slurp(out), slurp(p + "/f.err")};
      stop_seconds = seconds(signalled, clock::now());
      if (stopped.out.find(c.cut) != std::string::npos) break;
      MESSAGE(c.experiment, ": the signal ", wait, " s after \"logging to\" missed the evaluation (attempt ",
              attempt + 1, "): ", stopped.out);
      // Too late (the evaluation finished) or too early (before it began).
      wait *= stopped.out.find(c.evaluated) != std::string::npos ? 0.5 : 1.5;
    }
    INFO("stopped after " << stop_seconds << " s (the whole reference run: " << ref_seconds << " s): " << stopped.out
                          << stopped.err);
    REQUIRE(stopped.status == 130);
    // Cut short: it did not wait for the evaluation to end, and stopped at step 1's end.
    REQUIRE(stopped.out.find(c.cut) != std::string::npos);
    CHECK(stopped.out.find(c.evaluated) == std::string::npos);  // no evaluation was finished
    CHECK(stop_seconds < ref_seconds / 2);
    CHECK(checkpoint_step(p + "/f.ckpt.h5") == 1);

    // The resume evaluates step 1 first, then goes on: the log and the
    // final checkpoint (every result) as the unstopped run's, bit for bit.
    Result resumed = run(printed_resume(stopped), p);
    INFO("resumed: " << resumed.out << resumed.err);
    REQUIRE(resumed.status == 0);
    CHECK(resumed.out.find(c.evaluated) != std::string::npos);
    test::check_same_log(p + "/ref.h5", p + "/f.h5");
    test::check_same_checkpoint(p + "/ref.ckpt.h5", p + "/f.ckpt.h5", c.experiment, c.skip);
  }
}
