// tests/data/test_args.cpp: heed::Args, the command-line options of heed's
// commands (data/args.h), and the commands' command lines as a user types
// them.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "../experiments/spawn.h"
#include "data/args.h"
#include "test_util.h"

using namespace heed;

namespace {
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("Args: --help=VALUE is refused as --help taking no value, not as an unknown option") {
  for (const std::string given : {"--help=1", "--help=", "--help=yes"}) {
    CAPTURE(given);
    Args args("tool", "a tool");
    int64_t n = 1;
    args.integer("n", &n, "a number");
    // It said "tool: unknown option '--help' (see --help)".
    test::check_error([&] { args.parse({"--n", "2", given}); },
                      {"tool: --help takes no value, got '" + given + "'"});
    std::string msg;
    try {
      args.parse({given});
    } catch (const UsageError& e) {
      msg = e.what();
    }
    CHECK(!has(msg, "unknown option"));
  }
  // --help itself still shows the help, and returns false.
  Args args("tool", "a tool");
  CHECK_FALSE(args.parse({"--help"}));
}

TEST_CASE("heed: --help=VALUE to a command says --help takes no value (exit status 2)") {
  test::TempDir d("heed-args-help-");
  for (const std::vector<std::string>& cmd :
       {std::vector<std::string>{"run", "copy", "--help=1"}, {"run", "charlm", "--help=anything"},
        {"attend", "x.ckpt.h5", "--help=1"}, {"quantize", "x.ckpt.h5", "--help=1"}, {"plot", "x.h5", "--help=1"},
        {"export", "x.ckpt.h5", "--help=1"}, {"sample", "x.ckpt.h5", "--help=1"}}) {
    std::vector<std::string> argv{HEED_CLI_PATH};
    argv.insert(argv.end(), cmd.begin(), cmd.end());
    const test::Result r = test::run_process(argv, d.path);
    CAPTURE(cmd[0]);
    INFO(r.err);
    CHECK(r.status == 2);
    CHECK(has(r.err, "--help takes no value, got '" + cmd.back() + "'"));
    CHECK(!has(r.err, "unknown option"));
  }
}
