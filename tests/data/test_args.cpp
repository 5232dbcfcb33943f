// tests/data/test_args.cpp: heed::Args, the command-line options of heed's
// commands (data/args.h), and the commands' command lines as a user types
// them.
#include <filesystem>
#include <functional>
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

TEST_CASE("Args: a choice option shows its choices in --help and refuses another value, naming them") {
  std::string precision = "f32", method = "uniform", only;
  auto make = [&] {
    auto args = std::make_unique<Args>("tool", "a tool");
    args->choice("precision", &precision, {"f32", "bf16"}, "the products' precision", {{"float32", "f32"}})
        .choice("method", &method, {"uniform", "nf4", "lplr", "hadamard-uniform"}, "quantizer")
        .choices("only", &only, {"a", "bb", "ccc"}, "these workloads");
    return args;
  };
  const std::string help = make()->help();
  INFO(help);
  // Beside the option where they fit the column; else CHOICE, and the choices after the help.
  CHECK(has(help, "  --precision {f32,bf16}       the products' precision (default: f32)\n"));
  CHECK(has(help, "  --method CHOICE              quantizer (one of: uniform, nf4, lplr, hadamard-uniform) "
                  "(default: uniform)\n"));
  CHECK(has(help, "  --only {a,bb,ccc}[,...]      these workloads\n"));  // no default: none shown
  CHECK(!has(help, "TEXT"));
  // A bad value: refused when parsed, one line naming the option, the value and the choices.
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--precision", "fp16"}, {"--precision=F32"}, {"--precision="}}) {
    CAPTURE(bad[0]);
    std::string msg;
    try {
      make()->parse(bad);
    } catch (const UsageError& e) {
      msg = e.what();
    }
    const std::string value = bad.size() == 2 ? bad[1] : bad[0].substr(bad[0].find('=') + 1);
    CHECK(msg == "tool: --precision expects f32 or bf16, got '" + value + "'");
  }
  test::check_error([&] { make()->parse({"--method", "nf5"}); },
                    {"tool: --method expects uniform, nf4, lplr or hadamard-uniform, got 'nf5'"});
  test::check_error([&] { make()->parse({"--precision"}); }, {"tool: --precision expects a value ({f32,bf16})"});
  // An alias is read as its choice, and recorded so.
  {
    auto a = make();
    REQUIRE(a->parse({"--precision", "float32", "--method", "nf4"}));
    CHECK(precision == "f32");
    CHECK(method == "nf4");
    CHECK(a->value("precision") == "f32");
  }
  // A list: each item one of the choices, once.
  {
    auto a = make();
    REQUIRE(a->parse({"--only", "ccc,a"}));
    CHECK(only == "ccc,a");
  }
  test::check_error([&] { make()->parse({"--only", "a,b"}); },
                    {"tool: --only expects one or more of a, bb or ccc, comma-separated, got 'b' (in 'a,b')"});
  test::check_error([&] { make()->parse({"--only", "a,,bb"}); }, {"got an empty item in 'a,,bb'"});
  test::check_error([&] { make()->parse({"--only", "a,bb,a"}); }, {"--only names 'a' twice in 'a,bb,a'"});
  test::check_error([&] { make()->parse({"--only="}); }, {"tool: --only expects a value, got an empty string"});
  // Restored from a checkpoint's configuration: as parsed; a list left
  // without a value (its default, none) comes back as none.
  only.clear();
  {
    auto a = make();
    a->assign("precision", "bf16");
    a->assign("only", "");
    CHECK(precision == "bf16");
    CHECK(only.empty());
    test::check_error([&] { a->assign("precision", "fp8"); }, {"--precision expects f32 or bf16, got 'fp8'"});
  }
  precision = "bf16";
  CHECK(make()->help().find("(default: bf16)") != std::string::npos);
}

TEST_CASE("Args: a choice declared with a default outside its choices is the program's error, refused when declared") {
  // A program's own error (heed::Error), not the user's (UsageError), before any command line is read.
  auto declared = [](const std::function<void(Args&)>& declare) {
    Args a("tool", "a tool");
    try {
      declare(a);
    } catch (const UsageError& e) {
      return std::string("UsageError: ") + e.what();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  std::string v = "fp8";
  CHECK(declared([&](Args& a) { a.choice("precision", &v, {"f32", "bf16"}, "p"); }) ==
        "tool: --precision is declared with the default 'fp8'; expected f32 or bf16 (or \"\": none)");
  v = "float32";  // an alias is a name the user may give, not a default
  CHECK(has(declared([&](Args& a) { a.choice("precision", &v, {"f32", "bf16"}, "p", {{"float32", "f32"}}); }),
            "tool: --precision is declared with the default 'float32'"));
  v = "a,d";
  CHECK(has(declared([&](Args& a) { a.choices("only", &v, {"a", "b"}, "w"); }),
            "tool: --only is declared with the default 'a,d'; expected a comma-separated list of a or b"));
  v = "a";
  CHECK(has(declared([&](Args& a) { a.choice("x", &v, {"a", "b", "a"}, "x"); }), "--x is declared with the choice 'a' twice"));
  CHECK(has(declared([&](Args& a) { a.choice("x", &v, {}, "x"); }), "--x is declared as a choice of nothing"));
  CHECK(has(declared([&](Args& a) { a.choice("x", &v, {"a", "b"}, "x", {{"c", "d"}}); }),
            "--x is declared with the alias 'c' of 'd'"));
  CHECK(has(declared([&](Args& a) { a.choices("x", &v, {"a", "b,c"}, "x"); }), "the choice 'b,c'"));
  // Fine: a default among the choices, or none.
  CHECK(declared([&](Args& a) { a.choice("x", &v, {"a", "b"}, "x"); }).empty());
  v.clear();
  CHECK(declared([&](Args& a) { a.choice("x", &v, {"a", "b"}, "x"); }).empty());
}

TEST_CASE("heed: options of a fixed set of values show their choices in --help, and a bad value names them") {
  test::TempDir d("heed-args-choice-");
  struct Want {
    std::vector<std::string> command;
    std::vector<std::string> lines;  // what the help shows for each choice option
  };
  const std::vector<Want> wants = {
      {{"run", "copy"}, {"--precision {f32,bf16} "}},
      {{"run", "charlm"}, {"--precision {f32,bf16} "}},
      {{"run", "shapes"}, {"--precision {f32,bf16} ", "--model {cnn,attention,both} ", "--variant {pairs,location} "}},
      {{"bench"},
       {"--precision {f32,bf16,both} ", "--conv {winograd,direct} ", "--isa {baseline,avx2,avx512} ",
        "--only CHOICE[,...] "}},
  };
  for (const Want& w : wants) {
    std::vector<std::string> argv = w.command;
    argv.push_back("--help");
    const test::Result r = test::heed_cli(argv, d.path);
    CAPTURE(argv[0]);
    INFO(r.out);
    REQUIRE(r.status == 0);
    for (const std::string& line : w.lines) CHECK(has(r.out, "  " + line));
    CHECK(!has(r.out, "--precision TEXT"));
  }
  const test::Result bench = test::heed_cli({"bench", "--help"}, d.path);
  CHECK(has(bench.out, "(one or more of: toy-cnn, toy-attention, gpt-128, gpt-256, nanogpt)"));

  // A bad --precision, to a new run and to a resume: refused naming the
  // choices (the resume's said "--precision fp16 contradicts the
  // checkpoint's f32"), every file as it was.
  const std::string log = d.path + "/c.h5", ckpt = d.path + "/c.ckpt.h5";
  auto slurp = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  test::Result r = test::heed_cli({"run", "copy", "--steps", "2", "--precision", "fp16", "--out", log}, d.path);
  INFO(r.err);
  CHECK(r.status == 2);
  CHECK(r.err == "heed: run copy: --precision expects f32 or bf16, got 'fp16'\n");
  CHECK(!std::filesystem::exists(log));
  REQUIRE(test::heed_cli({"run", "copy", "--steps", "2", "--out", log}, d.path).status == 0);
  const std::string log_before = slurp(log), ckpt_before = slurp(ckpt);
  r = test::heed_cli({"run", "copy", "--resume", ckpt, "--steps", "3", "--precision", "fp16"}, d.path);
  INFO(r.err);
  CHECK(r.status == 2);
  CHECK(r.err == "heed: run copy: --precision expects f32 or bf16, got 'fp16'\n");
  CHECK(slurp(log) == log_before);
  CHECK(slurp(ckpt) == ckpt_before);
  // The recorded choice comes back on resume (and an alias given again is the same choice).
  r = test::heed_cli({"run", "copy", "--resume", ckpt, "--steps", "3", "--precision", "float32"}, d.path);
  INFO(r.err);
  CHECK(r.status == 0);
  // bench's own: one line, the value and the choices.
  r = test::heed_cli({"bench", "--conv", "fft"}, d.path);
  CHECK(r.status == 2);
  CHECK(has(r.err, "bench: --conv expects winograd or direct, got 'fft'\n"));
  r = test::heed_cli({"bench", "--only", "gpt-128,gpt-512"}, d.path);
  CHECK(r.status == 2);
  CHECK(has(r.err, "bench: --only expects one or more of toy-cnn, toy-attention, gpt-128, gpt-256 or nanogpt, "
                   "comma-separated, got 'gpt-512' (in 'gpt-128,gpt-512')\n"));
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
