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

TEST_CASE("Args: a default outside its own declared range must be given; a range that admits nothing is refused") {
  // Before, a run started with such a default, recorded it, and its own
  // resume command was refused reading it back.
  {
    int64_t k = -3;
    Args a("tool", "a tool");
    a.integer("k", &k, "a count >= 0", 0);
    test::check_error([&] { a.parse({}); },
                      {"tool: --k was not given, and its default -3 is not an integer >= 0: expected --k on the "
                       "command line"});
  }
  {
    int64_t k = -3;
    Args a("tool", "a tool");
    a.integer("k", &k, "a count >= 0", 0);
    CHECK(a.parse({"--k", "2"}));  // given: fine
    CHECK(k == 2);
  }
  {
    double v = 5;
    Args a("tool", "a tool");
    a.real("v", &v, "in [0, 1]", 0.0, 1.0);
    test::check_error([&] { a.parse({}); }, {"--v was not given, and its default 5 is not a number in [0, 1]"});
  }
  {
    double p = 0;
    Args a("tool", "a tool");
    a.real("p", &p, "a probability", 0.0, 1.0, true);
    test::check_error([&] { a.parse({}); }, {"--p was not given, and its default 0 is not a number in (0, 1]"});
  }
  {  // deferred (as heed::Run does for a resume), then checked on request
    int64_t k = 0;
    Args a("tool", "a tool");
    a.integer("k", &k, "rounds", 1);
    a.defer_default_check();
    CHECK(a.parse({}));
    test::check_error([&] { a.check_defaults(); }, {"--k was not given, and its default 0"});
  }
  int64_t k = 5;
  double v = 0.5;
  test::check_error([&] { Args("tool", "a tool").integer("k", &k, "a count", 10, 1); },
                    {"tool: --k is declared with the range 10..1"});
  test::check_error([&] { Args("tool", "a tool").real("v", &v, "x", 1.0, 0.0); }, {"--v is declared with the range"});
  // In range, at either bound, is fine.
  k = 0;
  v = 1.0;
  Args ok("tool", "a tool");
  ok.integer("k", &k, "a count >= 0", 0).real("v", &v, "in [0, 1]", 0.0, 1.0);
  CHECK(ok.parse({"--k", "4"}));
  CHECK(k == 4);
}

TEST_CASE("heed: --help=VALUE to a command says --help takes no value (exit status 2)") {
  test::TempDir d("heed-args-help-");
  for (const std::vector<std::string>& cmd :
       {std::vector<std::string>{"run", "copy", "--help=1"}, {"run", "charlm", "--help=anything"},
        {"attend", "x.ckpt.h5", "--help=1"}, {"quantize", "x.ckpt.h5", "--help=1"}, {"plot", "x.h5", "--help=1"},
        {"export", "x.ckpt.h5", "--help=1"}, {"sample", "x.ckpt.h5", "--help=1"}, {"inspect", "x.h5", "--help=1"},
        {"--help=1"}, {"run", "--help=1"}, {"info", "--help=yes"}, {"demo", "--help=1"}}) {
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

TEST_CASE("Args: a path option shows FILE, DIR or PATH for its value, in --help and when the value is missing") {
  std::string text, file, dir, any;
  // Made in place (its options refer to it: an Args is not to be moved).
  auto make = [&] {
    auto args = std::make_unique<Args>("tool", "a tool");
    args->text("prompt", &text, "words")
        .path("out", &file, "the file to write")
        .path("into", &dir, "where to write", Args::PathKind::dir)
        .path("from", &any, "a file or a directory", Args::PathKind::any)
        .alias("o", "out");
    return args;
  };
  const std::string help = make()->help();
  INFO(help);
  CHECK(has(help, "--prompt TEXT "));
  CHECK(has(help, "-o, --out FILE "));
  CHECK(has(help, "--into DIR "));
  CHECK(has(help, "--from PATH "));
  test::check_error([&] { make()->parse({"--out"}); }, {"tool: --out expects a value (FILE)"});
  test::check_error([&] { make()->parse({"--into"}); }, {"tool: --into expects a value (DIR)"});
  test::check_error([&] { make()->parse({"--from", "--out", "x"}); },
                    {"--from expects a value (PATH), got the option '--out'"});
  // A path is a text option otherwise: its value as given, an empty one refused.
  test::check_error([&] { make()->parse({"--out="}); }, {"tool: --out expects a value, got an empty string"});
  REQUIRE(make()->parse({"-o", "a b.h5", "--into", "figs"}));
  CHECK(file == "a b.h5");
  CHECK(dir == "figs");
}

TEST_CASE("heed: every command's --help names a path option's value FILE or DIR, never TEXT") {
  test::TempDir d("heed-args-metavar-");
  struct Want {
    std::vector<std::string> command;
    std::vector<std::string> lines;  // what the help shows for each path option
  };
  const std::vector<std::string> run = {"--out FILE", "--checkpoint FILE", "--resume FILE"};
  const std::vector<Want> wants = {
      {{"run", "charlm"}, {"--out FILE", "--checkpoint FILE", "--resume FILE", "--init-from FILE", "--text FILE"}},
      {{"run", "compression"}, {"--out FILE", "--resume FILE", "--charlm FILE", "--shapes FILE"}},
      {{"run", "copy"}, {"--out FILE", "--checkpoint FILE", "--resume FILE", "--init-from FILE"}},
      {{"run", "crossattn"}, run},
      {{"run", "scaling"}, run},
      {{"run", "shapes"}, {"--out FILE", "--init-from FILE"}},
      {{"run", "sine"}, run},
      {{"run", "timeseries"}, run},
      {{"attend"}, {"-o, --out FILE"}},
      {{"quantize"}, {"--text FILE", "-o, --out FILE"}},
      {{"export"}, {"-o, --out FILE"}},
      {{"plot"}, {"-o, --out DIR"}},
  };
  for (const Want& w : wants) {
    std::vector<std::string> argv = w.command;
    argv.push_back("--help");
    const test::Result r = test::heed_cli(argv, d.path);
    CAPTURE(argv[0] + (argv.size() > 2 ? " " + argv[1] : std::string()));
    INFO(r.out);
    REQUIRE(r.status == 0);
    for (const std::string& line : w.lines) CHECK(has(r.out, "  " + line + " "));
    for (const char* opt : {"--out", "--checkpoint", "--resume", "--init-from", "--text", "--charlm", "--shapes"})
      CHECK(!has(r.out, std::string(opt) + " TEXT"));
  }
  // The message of a missing value says it too.
  const test::Result r = test::heed_cli({"run", "copy", "--resume"}, d.path);
  CHECK(r.status == 2);
  CHECK(has(r.err, "run copy: --resume expects a value (FILE)"));
}

namespace {
// The words a POSIX shell makes of line (sh's printf prints each on a line of its own).
std::vector<std::string> shell_words(const std::string& line, const std::string& dir) {
  const test::Result r = test::run_process({"/bin/sh", "-c", "printf '%s\\n' " + line}, dir);
  REQUIRE(r.status == 0);
  std::vector<std::string> words;
  size_t at = 0;
  while (at < r.out.size()) {
    const size_t nl = r.out.find('\n', at);
    words.push_back(r.out.substr(at, nl - at));
    at = nl + 1;
  }
  return words;
}
}  // namespace

TEST_CASE("shell_command: words a shell reads back as they were, quoted only where needed") {
  CHECK(shell_quote("--steps") == "--steps");
  CHECK(shell_quote("runs/a-1_b.h5") == "runs/a-1_b.h5");
  CHECK(shell_quote("a b") == "'a b'");
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK(shell_quote("") == "''");
  CHECK(shell_quote("$HOME") == "'$HOME'");
  test::TempDir d("heed-args-shell-");
  const std::vector<std::string> words = {"heed", "run", "charlm", "--prompt", "a b",  "it's \"so\"", "",
                                          "$x`y`", "*",   "~",      "tab\tnl", "--out=x y.h5", "é"};
  const std::string line = shell_command(words);
  INFO(line);
  CHECK(line.rfind("heed run charlm --prompt 'a b' ", 0) == 0);
  CHECK(shell_words(line, d.path) == words);
  // A first word with '=' is quoted (a shell would take it for an assignment).
  CHECK(shell_command({"a=b", "c=d"}) == "'a=b' c=d");
}

TEST_CASE("heed: a log's command_line quotes the words that need it, so that it runs the same command again") {
  test::TempDir d("heed-args-cmdline-");
  const std::string out = d.path + "/a b's.h5";
  const test::Result r = test::heed_cli({"run", "copy", "--steps", "1", "--out", out}, d.path);
  INFO(r.err);
  REQUIRE(r.status == 0);
  const std::string cmd = h5::attr_str(h5::File(out, h5::File::Mode::read).get_attr("/", "command_line"));
  // It was "heed run copy --steps 1 --out /tmp/.../a b's.h5": three words for the path.
  CHECK(cmd == "heed run copy --steps 1 --out '" + d.path + "/a b'\\''s.h5'");
  CHECK(shell_words(cmd, d.path) == std::vector<std::string>{"heed", "run", "copy", "--steps", "1", "--out", out});
}

TEST_CASE("heed: an --out the system will not let heed write is refused naming the path and the real reason") {
  test::TempDir d("heed-args-out-");
  auto slurp = [](const std::string& path) {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const std::string version = slurp("/proc/version");
  REQUIRE(!version.empty());
  struct Case {
    std::string out;
    std::vector<std::string> want;
  };
  // /proc/version said "cannot write --out '/proc/version': No such file or directory (in '/proc')": the file
  // exists; creating the probe beside it failed.
  const std::vector<Case> cases = {
      {"/proc/version", {"run copy: cannot write --out '/proc/version': it is on the kernel's proc filesystem ('/proc')"}},
      {"/proc/heed-x.h5",
       {"cannot write --out '/proc/heed-x.h5': it is on the kernel's proc filesystem",
        "(creating a file in '/proc' fails: No such file or directory)"}},
      {"/proc/heed-none/sub/x.h5",
       {"cannot write --out '/proc/heed-none/sub/x.h5'",
        "creating the directory '/proc/heed-none' in '/proc' fails: No such file or directory"}},
      {"/sys/heed-x.h5", {"cannot write --out '/sys/heed-x.h5': it is on the kernel's sysfs filesystem ('/sys')"}},
      {"/", {"run copy: --out '/' is a directory; expected a file path like run.h5"}},
      {"/etc", {"run copy: --out '/etc' is a directory; expected a file path like run.h5"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.out);
    const test::Result r = test::heed_cli({"run", "copy", "--steps", "1", "--out", c.out}, d.path);
    INFO(r.err);
    CHECK(r.status == 2);
    for (const std::string& w : c.want) CHECK(has(r.err, w));
  }
  CHECK(slurp("/proc/version") == version);
  CHECK(!std::filesystem::exists("/proc/heed-x.h5"));
  // The same check for every command that writes a file.
  const test::Result lib = test::heed_cli({"run", "sine", "--checkpoint", "/proc/version", "--out", d.path + "/s.h5"},
                                          d.path);
  CHECK(lib.status == 2);
  CHECK(has(lib.err, "cannot write --checkpoint '/proc/version': it is on the kernel's proc filesystem"));
  CHECK(!std::filesystem::exists(d.path + "/s.h5"));
  // An ordinary path under a file: the system's reason, and the path.
  std::ofstream(d.path + "/f") << "x";
  test::check_error([&] { check_output_path(d.path + "/f/sub/x.h5", "tool", "--out"); },
                    {"tool: cannot write --out '" + d.path + "/f/sub/x.h5': Not a directory"});
}
