// experiments/main.cpp: the `heed` command-line program.
#include <fmt/core.h>

#include <string>
#include <vector>

#include "heed.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    fmt::print("usage: heed <command> [options]\n\ncommands:\n  info    backends and thread count\n");
    return 0;
  }
  if (args[0] == "info") {
    fmt::print("heed {}\n{}\n", "0.1.0", heed::kernel::backend_info());
    return 0;
  }
  fmt::print(stderr, "heed: unknown command '{}' (expected one of: info; see heed --help)\n", args[0]);
  return 2;
}
