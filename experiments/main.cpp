// experiments/main.cpp: the `heed` command-line program.
#include <fmt/core.h>

#include <string>
#include <vector>

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
    "  run shapes [opts] the CNN-versus-attention toy experiment (heed run shapes --help)\n"
    "  run sine [opts]   fit sin(x) with a small MLP (heed run sine --help)\n";

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
    return heed::experiments::run_shapes({"--epochs", "5", "--out", "runs/demo.h5"}, full);
  }
  if (args[0] == "run") {
    if (args.size() < 2) {
      fmt::print(stderr, "heed: run expects an experiment name (expected one of: shapes, sine)\n");
      return 2;
    }
    if (args[1] == "sine") return heed::experiments::run_sine({args.begin() + 2, args.end()});
    if (args[1] == "shapes") return heed::experiments::run_shapes({args.begin() + 2, args.end()}, full);
    fmt::print(stderr, "heed: unknown experiment '{}' (expected one of: shapes, sine)\n", args[1]);
    return 2;
  }
  fmt::print(stderr, "heed: unknown command '{}' (expected one of: info, demo, run; see heed --help)\n", args[0]);
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
