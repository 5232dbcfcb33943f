// experiments/main.cpp: the `heed` command-line program.
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/env.h"
#include "experiments/inspect.h"
#include "experiments/plot.h"
#include "experiments/bench.h"
#include "experiments/charlm.h"
#include "experiments/common.h"
#include "experiments/export.h"
#include "experiments/heads.h"
#include "experiments/quantize.h"
#include "experiments/shapes.h"
#include "heed.h"

namespace {

std::string usage() {
  std::string experiments;
  for (const auto& e : heed::experiments::experiments())
    experiments += fmt::format("  run {:<15} {} (heed run {} --help)\n", std::string(e.name) + " [opts]", e.summary, e.name);
  return "usage: heed <command> [options]\n"
         "\n"
         "commands:\n"
         "  info              version, commit, backends and thread count (also: heed --version)\n"
         "  demo              the CNN-versus-attention experiment, 5 epochs (about 45 s on 2 cores)\n"
         "  bench [opts]      training-step speed of the bundled workloads (--compare: side by side with PyTorch;\n"
         "                    --micro: per-kernel micro-benchmarks; --attention-memory: memory against T)\n" +
         experiments +
         "  sample CKPT [opts] generate text from a charlm checkpoint (heed sample --help)\n"
         "  attend CKPT [opts] what every attention head of a charlm checkpoint does (heed attend --help)\n"
         "  export CKPT [-o FILE.safetensors]  a checkpoint's model weights for PyTorch and Hugging Face tools\n"
         "  quantize CKPT [opts] quantize a trained model's weight matrices, measure and evaluate it\n"
         "                    (--method uniform|hadamard|gaussian|e8|lplr --bits B; heed quantize --help)\n"
         "  inspect FILE.h5   summary of a run log or checkpoint: config, metrics, series, parameters\n"
         "  plot FILE.h5      PNG figures of a run log, into FILE_plots/ (heed plot --help)\n"
         "\n"
         "Every run logs to HDF5 (readable while it runs: docs/log-format.md), writes checkpoints, stops\n"
         "cleanly on Ctrl-C and continues with --resume CHECKPOINT (docs/checkpoint-format.md).\n"
         "Exit status: 0 done, 1 error (or a check failed: run sine --help), 2 bad command line, 130 stopped\n"
         "with a checkpoint (143 when stopped by SIGTERM).\n";
}

// The processes mpirun started this one among (OMPI_COMM_WORLD_SIZE, as
// core/dist.h reads it), 1 without mpirun.
int launched_processes() {
  const char* n = std::getenv("OMPI_COMM_WORLD_SIZE");
  return n ? std::max(1, std::atoi(n)) : 1;
}

bool asks_for_help(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "help" || args[0] == "--version")) return true;
  for (const std::string& a : args)  // anywhere: every command's parser takes it so
    if (a == "--help" || a == "-h") return true;
  return false;
}

// Under mpirun with several processes: every process first says what it was
// started to do, and all of them compare it with rank 0's. Processes that
// run different commands (a training on rank 0, `heed inspect` or `heed
// run charlm --help` on rank 1) would otherwise wait forever: one that ends
// without MPI leaves the others in MPI's start, and one that ends after it
// leaves them in their first exchange. A command that trains no model
// data-parallel (inspect, export, ...) is refused: each process would do
// the whole work again, and those that write would write one file at once.
// Returns false when this process has nothing more to do (help, which rank
// 0 alone prints).
bool join_job(const std::vector<std::string>& args) {
  const int processes = launched_processes();
  if (processes <= 1) return true;
  const bool help = asks_for_help(args);
  std::string command = args.empty() ? "heed" : "heed " + args[0];
  bool trains = false;
  if (!args.empty() && args[0] == "run" && args.size() >= 2 && args[1].rfind("-", 0) != 0) {
    command += " " + args[1];
    for (const auto& e : heed::experiments::experiments()) trains = trains || args[1] == e.name;
  } else if (!args.empty() && args[0] == "demo") {
    trains = true;
  } else if (!args.empty() && args[0] == "bench" &&
             std::find(args.begin(), args.end(), "--dp-worker") != args.end()) {  // bench --data-parallel's workers
    command += " --dp-worker";
    trains = true;
  }
  const std::string role = command + (help ? " --help" : "");
  const std::vector<std::string> roles = heed::dist::all_gather_text(role);  // starts MPI
  for (size_t r = 1; r < roles.size(); ++r)
    if (roles[r] != roles[0])
      heed::fail("the processes of this job run different commands: rank {} runs '{}', rank 0 '{}'; every process "
                 "must run the same command",
                 r, roles[r], roles[0]);
  if (help) return heed::dist::is_main();
  static const std::vector<std::string> alone{"info", "sample", "attend", "export", "quantize", "inspect", "plot",
                                              "bench"};
  if (!trains && !args.empty() && std::find(alone.begin(), alone.end(), args[0]) != alone.end())
    throw heed::UsageError(fmt::format(
        "{} takes no part in data-parallel training: run it as one process, without mpirun (it was started as {} "
        "processes)",
        args[0], processes));
  return true;
}

int run(const std::vector<std::string>& args) {
  std::vector<std::string> full{"heed"};
  full.insert(full.end(), args.begin(), args.end());
  if (!join_job(args)) return 0;
  // Under mpirun, rank 0 speaks for the job.
  const bool speaks = !heed::dist::in_job() || heed::dist::is_main();
  if (args.empty()) {  // a command is missing: the usage, as a bad command line
    if (!speaks) return 2;
    fmt::print(stderr, "heed: expected a command\n{}", usage());
    return 2;
  }
  // The HEED_* variables, checked before any command touches a file: they
  // are otherwise read at their first use, after a run has opened its log or
  // while a checkpoint is being read.
  if (const std::string bad = heed::env::problem(); !bad.empty())
    throw heed::UsageError(fmt::format("{} (README.md, \"Environment variables\")", bad));
  // A name heed does not read is said, not refused (another program may read it).
  if (const std::string note = heed::env::unknown_note(); !note.empty() && speaks)
    fmt::print(stderr, "heed: note: {}\n", note);
  // `--help=1` where a command's own options are not parsed (the commands'
  // parsers say the same of theirs).
  for (size_t i = 0; i < std::min<size_t>(args.size(), 2); ++i)
    if (args[i].rfind("--help=", 0) == 0 && (i == 0 || args[0] == "run" || args[0] == "info" || args[0] == "demo"))
      throw heed::UsageError(fmt::format("--help takes no value, got '{}'", args[i]));
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    fmt::print("{}", usage());
    return 0;
  }
  if (args[0] == "--version") {
    fmt::print("heed {} (commit {})\n", heed::heed_version(), heed::git_commit());
    return 0;
  }
  if (args[0] == "info") {
    if (args.size() > 1 && (args[1] == "--help" || args[1] == "-h")) {
      fmt::print("usage: heed info\n\nPrints heed's version and commit, the libraries' kernels and threads, heed's "
                 "instruction set\nand which kernels the convolutions and float32 products run on.\n");
      return 0;
    }
    if (args.size() > 1) throw heed::UsageError(fmt::format("info takes no options, got '{}'", args[1]));
    fmt::print("heed {} (commit {})\n{}\n", heed::heed_version(), heed::git_commit(), heed::backend_info());
    return 0;
  }
  if (args[0] == "demo") {
    if (args.size() == 2 && (args[1] == "--help" || args[1] == "-h")) {
      fmt::print("usage: heed demo\n\nThe CNN-versus-attention experiment on the toy shapes task, 5 epochs (about 45 s on "
                 "2 cores): heed run shapes --epochs 5 --out runs/demo.h5 --restart (a demo stopped before its end "
                 "starts over), then its figures into runs/demo_plots/.\n"
                 "It takes no options; heed run shapes --help lists those of the experiment itself.\n");
      return 0;
    }
    if (args.size() > 1)
      throw heed::UsageError(fmt::format("demo takes no options, got '{}' (use heed run shapes [options])", args[1]));
    fmt::print("heed demo: a CNN and the same CNN with one self-attention layer learn the toy shapes task\n");
    const std::string log = "runs/demo.h5";
    // --restart: the demo takes no options, so a stopped demo starts over
    // (`heed run shapes --resume runs/demo.ckpt.h5` continues it instead).
    int rc = heed::experiments::run_shapes({"--epochs", "5", "--out", log, "--restart"}, full);
    if (rc != 0 || !heed::dist::is_main()) return rc;  // under mpirun, rank 0 alone has the log to plot
    // The figures are a bonus: without Python's plotting packages the demo still succeeds.
    std::string dir = heed::experiments::default_plot_dir(log);
    try {
      std::vector<std::string> files = heed::experiments::plot_log(log, dir, false);
      fmt::print("\nplots of the run ({} files):\n", files.size());
      for (const auto& f : files) fmt::print("  {}\n", f);
    } catch (const heed::Error& e) {
      fmt::print("\nnote: no plots were drawn: {}\nthe run itself succeeded; draw them later with: heed plot {}\n",
                 e.what(), log);
    }
    fmt::print("inspect it: heed inspect {}\n", log);
    return 0;
  }
  if (args[0] == "export")
    return heed::experiments::with_command_prefix("export", [&] { return heed::experiments::run_export({args.begin() + 1, args.end()}); });
  if (args[0] == "quantize")
    return heed::experiments::with_command_prefix("quantize", [&] { return heed::experiments::run_quantize({args.begin() + 1, args.end()}); });
  if (args[0] == "inspect") return heed::experiments::run_inspect({args.begin() + 1, args.end()});
  if (args[0] == "plot") return heed::experiments::run_plot({args.begin() + 1, args.end()});
  if (args[0] == "sample")
    return heed::experiments::with_command_prefix("sample", [&] { return heed::experiments::run_sample({args.begin() + 1, args.end()}); });
  if (args[0] == "attend") return heed::experiments::run_attend({args.begin() + 1, args.end()});
  if (args[0] == "bench") return heed::experiments::run_bench({args.begin() + 1, args.end()});
  if (args[0] == "run") {
    std::string names;
    for (const auto& e : heed::experiments::experiments()) names += (names.empty() ? "" : ", ") + std::string(e.name);
    if (args.size() >= 2 && (args[1] == "--help" || args[1] == "-h")) {
      std::string list;
      for (const auto& e : heed::experiments::experiments())
        list += fmt::format("  {:<12} {}\n", e.name, e.summary);
      fmt::print("usage: heed run EXPERIMENT [options]\n\nexperiments (heed run EXPERIMENT --help for the "
                 "options of each):\n{}",
                 list);
      return 0;
    }
    // Through guard_main: under mpirun, printed once for the job, naming the rank.
    if (args.size() < 2) throw heed::UsageError(fmt::format("run expects an experiment name (expected one of: {})", names));
    for (const auto& e : heed::experiments::experiments())
      if (args[1] == e.name) return e.run({args.begin() + 2, args.end()}, full);
    throw heed::UsageError(fmt::format("unknown experiment '{}' (expected one of: {})", args[1], names));
  }
  throw heed::UsageError(fmt::format("unknown command '{}' (expected one of: info, demo, run, sample, attend, export, "
                                     "quantize, inspect, plot, bench; see heed --help)",
                                     args[0]));
}

}  // namespace

// An error ends the command with "heed: ..." and its status (heed::guard_main,
// as for a user's program); in a data-parallel job it ends every process at
// once (naming the rank), so that none is left waiting for the failed one.
int main(int argc, char** argv) {
  return heed::guard_main("heed", [&] { return run(std::vector<std::string>(argv + 1, argv + argc)); });
}
