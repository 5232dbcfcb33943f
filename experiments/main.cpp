// experiments/main.cpp: the `heed` command-line program.
#include <fmt/core.h>

#include <cstdio>
#include <string>
#include <vector>

#include "experiments/inspect.h"
#include "experiments/plot.h"
#include "experiments/bench.h"
#include "experiments/charlm.h"
#include "experiments/copy.h"
#include "experiments/shapes.h"
#include "experiments/sine.h"
#include "heed.h"

namespace {

const char* kUsage =
    "usage: heed <command> [options]\n"
    "\n"
    "commands:\n"
    "  info              backends and thread count\n"
    "  demo              the CNN-versus-attention experiment, 5 epochs (about 3-5 minutes on 2 cores)\n"
    "  bench [opts]     training-step speed of the bundled workloads (--compare: side by side with PyTorch;\n"
    "                   --micro: per-kernel micro-benchmarks; --attention-memory: memory against T)\n"
    "  run charlm [opts] a character-level GPT on the King James Bible (heed run charlm --help)\n"
    "  sample CKPT [opts] generate text from a charlm checkpoint (heed sample --help)\n"
    "  run copy [opts]   one attention layer learns to copy the previous token (heed run copy --help)\n"
    "  run shapes [opts] the CNN-versus-attention toy experiment (heed run shapes --help)\n"
    "  run sine [opts]   fit sin(x) with a small MLP (heed run sine --help)\n"
    "  inspect FILE.h5   summary of a run log or checkpoint: config, metrics, series, parameters\n"
    "  plot FILE.h5      PNG figures of a run log, into FILE_plots/ (heed plot --help)\n"
    "\n"
    "Run logs are HDF5 files, readable while the run writes them: docs/log-format.md.\n";

int run(const std::vector<std::string>& args) {
  std::vector<std::string> full{"heed"};
  full.insert(full.end(), args.begin(), args.end());
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    fmt::print("{}", kUsage);
    return 0;
  }
  if (args[0] == "info") {
    fmt::print("heed {}\n{}\n", "0.1.0", heed::kernel::backend_info());
    return 0;
  }
  if (args[0] == "demo") {
    if (args.size() > 1) {
      fmt::print(stderr, "heed: demo takes no options, got '{}' (use heed run shapes [options])\n", args[1]);
      return 2;
    }
    fmt::print("heed demo: a CNN and the same CNN with one self-attention layer learn the toy shapes task\n");
    const std::string log = "runs/demo.h5";
    int rc = heed::experiments::run_shapes({"--epochs", "5", "--out", log}, full);
    if (rc != 0) return rc;
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
  if (args[0] == "inspect") return heed::experiments::run_inspect({args.begin() + 1, args.end()});
  if (args[0] == "plot") return heed::experiments::run_plot({args.begin() + 1, args.end()});
  if (args[0] == "sample") return heed::experiments::run_sample({args.begin() + 1, args.end()});
  if (args[0] == "bench") return heed::experiments::run_bench({args.begin() + 1, args.end()});
  if (args[0] == "run") {
    if (args.size() < 2) {
      fmt::print(stderr, "heed: run expects an experiment name (expected one of: charlm, copy, shapes, sine)\n");
      return 2;
    }
    if (args[1] == "sine") return heed::experiments::run_sine({args.begin() + 2, args.end()}, full);
    if (args[1] == "charlm") return heed::experiments::run_charlm({args.begin() + 2, args.end()}, full);
    if (args[1] == "copy") return heed::experiments::run_copy({args.begin() + 2, args.end()}, full);
    if (args[1] == "shapes") return heed::experiments::run_shapes({args.begin() + 2, args.end()}, full);
    fmt::print(stderr, "heed: unknown experiment '{}' (expected one of: charlm, copy, shapes, sine)\n", args[1]);
    return 2;
  }
  fmt::print(stderr, "heed: unknown command '{}' (expected one of: info, demo, run, inspect, plot; see heed --help)\n",
             args[0]);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const heed::Error& e) {
    fmt::print(stderr, "heed: {}\n", e.what());
    return 1;
  }
}
