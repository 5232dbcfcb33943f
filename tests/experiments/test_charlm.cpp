// tests/experiments/test_charlm.cpp: text generation and a tiny training run.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/checkpoint.h"
#include "data/h5.h"
#include "experiments/charlm.h"
#include "spawn.h"
#include "test_util.h"

using namespace heed;

TEST_CASE("charlm: sampling with cached keys and values gives the same tokens as recomputing the prefix") {
  Generator g(3);
  nn::GPT m(nn::GPTOptions(11, 16, 2, 2, 24).generator(&g));
  for (int64_t seed : {0, 1, 2}) {
    experiments::SampleOptions o;
    o.tokens = 20;  // prompt 4 + 20 = 24 = one context window
    o.seed = seed;
    o.temperature = 1.0;
    o.use_cache = true;
    auto cached = experiments::generate(m, {1, 2, 3, 4}, o);
    o.use_cache = false;
    auto recomputed = experiments::generate(m, {1, 2, 3, 4}, o);
    CHECK(cached == recomputed);
    CHECK(cached.size() == 20);
  }
}

TEST_CASE("charlm: past the context window too, cached and recomputed sampling give the same tokens") {
  // Past the window the cache is refilled with the whole window for every
  // character (learned absolute positions: every position moves), as the
  // recomputed prefix is: the same tokens.
  Generator g(4);
  nn::GPT m(nn::GPTOptions(11, 16, 2, 2, 12).generator(&g));
  experiments::SampleOptions o;
  o.tokens = 40;  // prompt 4 + 40: more than three windows of 12
  o.temperature = 1.0;
  o.use_cache = true;
  auto cached = experiments::generate(m, {1, 2, 3, 4}, o);
  o.use_cache = false;
  CHECK(cached == experiments::generate(m, {1, 2, 3, 4}, o));
}

TEST_CASE("charlm: a tiny temperature (even subnormal) samples greedily, not the last character over and over") {
  Generator g(5);
  const int64_t V = 11, context = 12;
  nn::GPT m(nn::GPTOptions(V, 16, 2, 2, context).generator(&g));
  // Greedy decoding by hand: the most likely next character, every time.
  std::vector<int64_t> seq = {1, 2, 3, 4};
  std::vector<int64_t> greedy;
  {
    autograd::NoGradGuard ng;
    m.eval();
    for (int i = 0; i < 30; ++i) {
      const size_t w = std::min<size_t>(seq.size(), static_cast<size_t>(context));
      std::vector<int64_t> window(seq.end() - static_cast<std::ptrdiff_t>(w), seq.end());
      const std::vector<double> l =
          m.forward(Tensor::from_i64(window, {1, static_cast<int64_t>(w)})).to_vector<double>();
      const auto last = l.end() - V;
      const int64_t best = std::max_element(last, l.end()) - last;
      seq.push_back(best);
      greedy.push_back(best);
    }
  }
  REQUIRE(std::count(greedy.begin(), greedy.end(), V - 1) < static_cast<std::ptrdiff_t>(greedy.size()));
  for (double t : {1e-15, 1e-30, 1e-300, 1e-310, 4.9e-324}) {
    for (bool cache : {true, false}) {
      for (int64_t top_k : {0, 3}) {
        CAPTURE(t);
        CAPTURE(cache);
        CAPTURE(top_k);
        experiments::SampleOptions o;
        o.tokens = 30;
        o.temperature = t;
        o.use_cache = cache;
        o.top_k = top_k;
        o.seed = 9;
        CHECK(experiments::generate(m, {1, 2, 3, 4}, o) == greedy);
      }
    }
  }
}

TEST_CASE("charlm: a tiny run on a given text trains, checkpoints and refuses bad input") {
  test::TempDir scratch("heed-charlm-");
  const std::filesystem::path dir = scratch.path;
  std::string text = (dir / "t.txt").string(), out = (dir / "lm.h5").string();
  {
    std::ofstream f(text);
    for (int i = 0; i < 200; ++i) f << "the quick brown fox jumps over the lazy dog. ";
  }
  std::vector<std::string> args{"--text", text, "--layers", "1", "--heads", "2", "--width", "16", "--context", "16",
                                "--batch", "4", "--steps", "30", "--warmup", "5", "--eval-every", "15",
                                "--eval-batches", "2", "--out", out};
  REQUIRE(experiments::run_charlm(args, {"heed"}) == 0);
  Checkpoint ck = load_checkpoint((dir / "lm.ckpt.h5").string(), "charlm");
  CHECK(ck.counter("step") == 30);
  CHECK(ck.tensors.count("tokenizer/codepoints") == 1);
  CHECK(experiments::run_sample({(dir / "lm.ckpt.h5").string(), "--prompt", "the ", "--tokens", "10"}) == 0);
  {  // where docs/log-format.md puts it: T characters, T the maps' size
    h5::File log(out, h5::File::Mode::read);
    REQUIRE(log.has_attr("series/attention", "probe_text"));
    const std::string probe = h5::attr_str(log.get_attr("series/attention", "probe_text"));
    CHECK(static_cast<int64_t>(probe.size()) == log.read_tensor("series/attention/layer0/maps/values").size(-1));
  }

  std::string shorttext = (dir / "short.txt").string();
  std::ofstream(shorttext) << "tiny";
  auto bad = args;
  bad[1] = shorttext;
  test::check_error([&] { experiments::run_charlm(bad, {"heed"}); }, {"4 characters", "--context"});
  std::ofstream(shorttext) << "t";
  test::check_error([&] { experiments::run_charlm(bad, {"heed"}); }, {"has 1 character;", "--context"});
  test::check_error([&] { experiments::run_charlm({"--width", "10", "--heads", "3"}, {"heed"}); },
                    {"--width 10", "--heads 3"});
  test::check_error([&] { experiments::run_sample({(dir / "lm.ckpt.h5").string(), "--prompt", "XYZ"}); },
                    {"'X'", "not in the vocabulary"});

  // A resume on another text of the same characters (its vocabulary, the
  // only thing compared before) is refused; the log stays as it was.
  {
    std::ofstream f(text, std::ios::trunc);
    for (int i = 0; i < 200; ++i) f << "the lazy dog jumps over the quick brown fox. ";
  }
  const std::string log_before = test::slurp(out);
  test::check_error([&] { experiments::run_charlm({"--resume", (dir / "lm.ckpt.h5").string(), "--steps", "40"}, {"heed"}); },
                    {"lm.ckpt.h5", "corpus/fingerprint", "differs"});
  CHECK(test::slurp(out) == log_before);
  // A checkpoint from before the fingerprint resumes on its text, unchecked.
  {
    std::ofstream f(text, std::ios::trunc);
    for (int i = 0; i < 200; ++i) f << "the quick brown fox jumps over the lazy dog. ";
  }
  Checkpoint old = load_checkpoint((dir / "lm.ckpt.h5").string(), "charlm");
  old.tensors.erase("corpus/fingerprint");
  save_checkpoint((dir / "lm.ckpt.h5").string(), old);
  CHECK(experiments::run_charlm({"--resume", (dir / "lm.ckpt.h5").string(), "--steps", "32"}, {"heed"}) == 0);
}

namespace {
// Runs the scope in another working directory.
struct InDirectory {
  std::filesystem::path was = std::filesystem::current_path();
  explicit InDirectory(const std::filesystem::path& dir) { std::filesystem::current_path(dir); }
  ~InDirectory() { std::filesystem::current_path(was); }
};
}  // namespace

TEST_CASE("charlm: the closing hint to sample a run on a text without heed sample's default prompt's characters "
          "gives a prompt from the text") {
  test::TempDir scratch("heed-charlm-hint-");
  const std::string dir = scratch.path, text = dir + "/t.txt";
  {
    std::ofstream f(text);  // no 'A', 'G': heed sample's default "And God said" cannot be encoded
    for (int i = 0; i < 200; ++i) f << "it's a test, it's only a test of the text. ";
  }
  const test::Result r = test::heed_cli({"run", "charlm", "--text", text, "--layers", "1", "--heads", "2", "--width",
                                         "16", "--context", "16", "--batch", "4", "--steps", "3", "--eval-every", "3",
                                         "--eval-batches", "1", "--out", dir + "/lm.h5"},
                                        dir);
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  const std::string hint = "sample it: heed sample " + dir + "/lm.ckpt.h5 --prompt '";
  const size_t at = r.out.find(hint);
  REQUIRE(at != std::string::npos);
  // The shell's quoting of the prompt, undone: '\'' is a quote.
  std::string quoted = r.out.substr(at + hint.size(), r.out.find('\n', at) - at - hint.size());
  REQUIRE(!quoted.empty());
  quoted.pop_back();  // the closing quote
  std::string prompt;
  for (size_t i = 0; i < quoted.size(); ++i) {
    if (quoted.compare(i, 4, "'\\''") == 0) {
      prompt += '\'';
      i += 3;
    } else {
      prompt += quoted[i];
    }
  }
  CHECK(prompt.find('\'') != std::string::npos);  // the text's own "it's": the quoting is exercised
  CHECK(experiments::run_sample({dir + "/lm.ckpt.h5", "--prompt", prompt, "--tokens", "5"}) == 0);
}

TEST_CASE("charlm: a run on a relative --text resumes from another directory") {
  test::TempDir scratch("heed-charlm-rel-");
  const std::filesystem::path dir = scratch.path;
  std::filesystem::create_directory(dir / "a");
  {
    std::ofstream f(dir / "a" / "t.txt");
    for (int i = 0; i < 200; ++i) f << "the quick brown fox jumps over the lazy dog. ";
  }
  {
    std::ofstream f(dir / "other.txt");
    for (int i = 0; i < 200; ++i) f << "the lazy dog jumps over the quick brown fox. ";
  }
  {
    InDirectory in(dir / "a");
    REQUIRE(experiments::run_charlm({"--text", "t.txt", "--layers", "1", "--heads", "2", "--width", "16", "--context",
                                     "16", "--batch", "4", "--steps", "30", "--eval-every", "10", "--eval-batches", "1",
                                     "--checkpoint-every", "10", "--stop-after", "10", "--out", "lm.h5"},
                                    {"heed"}) == 130);  // stopped as by Ctrl-C
  }
  InDirectory in(dir);
  // The checkpoint names the text by its absolute path: found from here.
  Checkpoint ck = load_checkpoint("a/lm.ckpt.h5", "charlm");
  CHECK(ck.config.at("text") == (dir / "a" / "t.txt").string());
  const Checkpoint at10 = ck;
  CHECK(experiments::run_charlm({"--resume", "a/lm.ckpt.h5", "--stop-after", "20"}, {"heed"}) == 130);
  CHECK(load_checkpoint("a/lm.ckpt.h5", "charlm").counter("step") == 20);
  // The same file under another name is no contradiction; another file is.
  const std::string log_before = test::slurp((dir / "a" / "lm.h5").string());
  test::check_error([&] { experiments::run_charlm({"--resume", "a/lm.ckpt.h5", "--text", "other.txt"}, {"heed"}); },
                    {"--text", "other.txt", "contradicts"});
  CHECK(test::slurp((dir / "a" / "lm.h5").string()) == log_before);
  CHECK(experiments::run_charlm({"--resume", "a/lm.ckpt.h5", "--text", "./a/../a/t.txt", "--stop-after", "25"},
                                {"heed"}) == 130);
  // A checkpoint of an older heed keeps --text as it was given, relative to
  // where its run began: not found from here, so the text is asked for, and
  // the right one given is taken (its fingerprint checked).
  Checkpoint old = at10;
  old.config["text"] = "t.txt";
  save_checkpoint("a/old.ckpt.h5", old);
  test::check_error([&] { experiments::run_charlm({"--resume", "a/old.ckpt.h5", "--out", "old.h5"}, {"heed"}); },
                    {"run charlm: text file 't.txt'", "read from this directory", "give --text"});
  test::check_error([&] {
    experiments::run_charlm({"--resume", "a/old.ckpt.h5", "--out", "old.h5", "--text", "other.txt"}, {"heed"});
  }, {"corpus/fingerprint", "differs"});
  CHECK(experiments::run_charlm({"--resume", "a/old.ckpt.h5", "--out", "old.h5", "--text", "a/t.txt"}, {"heed"}) == 0);
  CHECK(load_checkpoint("a/old.ckpt.h5", "charlm").counter("step") == 30);
}

TEST_CASE("charlm: a resume keeps the warm-up the run began with: --warmup -1 given again means it, a shorter "
          "--steps names it, another --warmup is refused") {
  test::TempDir scratch("heed-charlm-warm-");
  const std::filesystem::path dir = scratch.path;
  const std::string text = (dir / "t.txt").string(), out = (dir / "lm.h5").string();
  const std::string ck = (dir / "lm.ckpt.h5").string();
  {
    std::ofstream f(text);
    for (int i = 0; i < 200; ++i) f << "the quick brown fox jumps over the lazy dog. ";
  }
  // --warmup left at -1: min(100, 200 / 10) = 20 steps, kept in the checkpoint.
  REQUIRE(experiments::run_charlm({"--text", text, "--layers", "1", "--heads", "2", "--width", "16", "--context", "16",
                                   "--batch", "4", "--steps", "200", "--eval-every", "100", "--eval-batches", "1",
                                   "--stop-after", "2", "--out", out},
                                  {"heed"}) == 130);
  CHECK(load_checkpoint(ck, "charlm").config.at("warmup") == "20");
  const std::string before = test::slurp(out);
  test::check_error([&] { experiments::run_charlm({"--resume", ck, "--steps", "10"}, {"heed"}); },
                    {"--steps 10 ends within this run's warm-up of 20 steps", "at least 20"});
  // Short of the checkpoint's own step: that is what is wrong, whatever the warm-up.
  test::check_error([&] { experiments::run_charlm({"--resume", ck, "--steps", "1"}, {"heed"}); },
                    {"is at step 2, beyond this run's 1 steps"});
  // --warmup -1 given again means the same warm-up, so the message is the same.
  test::check_error([&] { experiments::run_charlm({"--resume", ck, "--warmup", "-1", "--steps", "10"}, {"heed"}); },
                    {"--steps 10 ends within this run's warm-up of 20 steps", "at least 20"});
  // Any other warm-up contradicts the checkpoint.
  test::check_error([&] { experiments::run_charlm({"--resume", ck, "--warmup", "5"}, {"heed"}); },
                    {"--warmup 5 contradicts the checkpoint's 20"});
  CHECK(test::slurp(out) == before);
  // The command line the run began with, --warmup -1 included, repeated with --resume.
  REQUIRE(experiments::run_charlm({"--resume", ck, "--text", text, "--layers", "1", "--heads", "2", "--width", "16",
                                   "--context", "16", "--batch", "4", "--steps", "200", "--warmup", "-1",
                                   "--eval-every", "100", "--eval-batches", "1", "--stop-after", "4", "--out", out},
                                  {"heed"}) == 130);
  Checkpoint at4 = load_checkpoint(ck, "charlm");
  CHECK(at4.counter("step") == 4);
  CHECK(at4.config.at("warmup") == "20");
  CHECK(experiments::run_charlm({"--resume", ck, "--steps", "20", "--warmup=-1"}, {"heed"}) == 0);
  CHECK(load_checkpoint(ck, "charlm").config.at("warmup") == "20");
}

namespace {
const std::vector<std::string> kTiny = {"--layers", "1", "--heads", "2", "--width", "16", "--context", "16",
                                        "--batch", "4", "--eval-every", "2", "--eval-batches", "2"};
// The first n characters of a pangram, repeated.
std::string pangrams(size_t n) {
  std::string s;
  while (s.size() < n) s += "the quick brown fox jumps over the lazy dog. ";
  return s.substr(0, n);
}
void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}
}  // namespace

TEST_CASE("charlm: a text too short for --context: each part of the split needs at least context + 1 characters; "
          "a resume, which keeps --context, says the text is not the run's") {
  test::TempDir scratch("heed-charlm-short-");
  const std::string dir = scratch.path, text = dir + "/t.txt";
  // 161 characters: a validation part of 17 (--context 16 + 1), which trains.
  write_file(text, pangrams(161));
  test::Result r = test::heed_cli(test::cat({"run", "charlm", "--text", text, "--steps", "2", "--out", dir + "/a.h5"},
                                            kTiny),
                                  dir);
  INFO(r.out << r.err);
  CHECK(r.status == 0);
  // 160: a validation part of 16, refused saying what it needs (was "more
  // than 17", which 17 is not).
  write_file(text, pangrams(160));
  r = test::heed_cli(test::cat({"run", "charlm", "--text", text, "--steps", "2", "--out", dir + "/b.h5"}, kTiny), dir);
  INFO(r.out << r.err);
  CHECK(r.status == 1);
  CHECK(r.err.find("--text '" + text + "' has 160 characters; its 90/10 split needs at least 17 in each part for "
                   "--context 16 (expected a shorter --context or a longer --text)") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir + "/b.h5"));
  // A resume cannot take a shorter --context: the run's text, cut short
  // since, is said not to be the one the checkpoint was trained on.
  write_file(text, pangrams(400));
  REQUIRE(test::heed_cli(test::cat({"run", "charlm", "--text", text, "--steps", "4", "--stop-after", "2", "--out",
                                    dir + "/c.h5"},
                                   kTiny),
                         dir)
              .status == 130);
  write_file(text, pangrams(100));
  const auto before = test::snapshot(dir);
  r = test::heed_cli({"run", "charlm", "--resume", dir + "/c.ckpt.h5"}, dir);
  INFO(r.out << r.err);
  CHECK(r.status == 1);
  CHECK(r.err.find("--text '" + text + "' has 100 characters, too few for the run's --context 16: its 90/10 split "
                   "needs at least 17 in each part; it is not the text checkpoint '" +
                   dir + "/c.ckpt.h5' was trained on; expected that text") != std::string::npos);
  CHECK(r.err.find("shorter --context") == std::string::npos);
  CHECK(test::snapshot(dir) == before);
}

TEST_CASE("charlm: a resume on a changed text names --text and the file, not only the checkpoint's key") {
  test::TempDir scratch("heed-charlm-changed-");
  const std::string dir = scratch.path, z1 = dir + "/z1.txt", z2 = dir + "/z2.txt";
  const std::string text = pangrams(2000);
  write_file(z1, text);
  REQUIRE(test::heed_cli(test::cat({"run", "charlm", "--text", z1, "--steps", "4", "--out", dir + "/z1.h5"}, kTiny),
                         dir)
              .status == 0);
  const std::string ck = dir + "/z1.ckpt.h5";
  // The same characters in another order: the run's file gone, another given.
  write_file(z2, std::string(text.rbegin(), text.rend()));
  std::filesystem::remove(z1);
  auto before = test::snapshot(dir);
  test::Result r = test::heed_cli({"run", "charlm", "--resume", ck, "--steps", "6", "--text", z2}, dir);
  INFO(r.out << r.err);
  CHECK(r.status == 1);
  // Was: "checkpoint '...z1.ckpt.h5': 'corpus/fingerprint' differs from this run's (its inputs changed since the
  // checkpoint)".
  CHECK(r.err.find("heed: run charlm: --text '" + z2 + "' is not the file checkpoint '" + ck +
                   "' was trained on (its 'corpus/fingerprint' differs: the file changed since the checkpoint, or is "
                   "another one); expected that file") != std::string::npos);
  CHECK(test::snapshot(dir) == before);
  // The run's own file, edited in place: named as the run recorded it.
  write_file(z1, std::string(text.rbegin(), text.rend()));
  before = test::snapshot(dir);
  r = test::heed_cli({"run", "charlm", "--resume", ck, "--steps", "6"}, dir);
  INFO(r.out << r.err);
  CHECK(r.status == 1);
  CHECK(r.err.find("heed: run charlm: --text '" + z1 + "' is not the file checkpoint '" + ck + "' was trained on") !=
        std::string::npos);
  CHECK(test::snapshot(dir) == before);
  // Its text as it was resumes.
  write_file(z1, text);
  CHECK(test::heed_cli({"run", "charlm", "--resume", ck, "--steps", "6"}, dir).status == 0);
}

TEST_CASE("charlm: the closing hint's --prompt is a stretch of the text without control characters") {
  test::TempDir scratch("heed-charlm-ctl-");
  const std::string dir = scratch.path;
  struct Case {
    std::string name, text, prompt;
  };
  std::string nul, crlf;
  for (int i = 0; i < 50; ++i) nul += std::string("ab\0cd\0ef", 8);
  for (int i = 0; i < 100; ++i) crlf += "it's a line of text\r\n";
  // NUL bytes between two-letter words: the longest stretch without one
  // (the hint held "ab^@cd^@efab^@c"); CR LF lines: the first 12
  // characters of a line (the hint held a raw CR and newline).
  for (const Case& c : {Case{"nul", nul, "efab"}, Case{"crlf", crlf, "it'\\''s a line "}}) {
    CAPTURE(c.name);
    const std::string text = dir + "/" + c.name + ".txt";
    write_file(text, c.text);
    const test::Result r = test::heed_cli(
        test::cat({"run", "charlm", "--text", text, "--steps", "4", "--out", dir + "/" + c.name + ".h5"}, kTiny), dir);
    INFO(r.out << r.err);
    REQUIRE(r.status == 0);
    const std::string ck = dir + "/" + c.name + ".ckpt.h5";
    CHECK(r.out.find("sample it: heed sample " + ck + " --prompt '" + c.prompt + "'\n") != std::string::npos);
    const std::string hint = r.out.substr(r.out.find("sample it:"));
    CHECK(std::count_if(hint.begin(), hint.end() - 1, [](char ch) { return static_cast<unsigned char>(ch) < 0x20; }) ==
          0);
  }
}

TEST_CASE("charlm: a --text too big to load is refused before it is read, naming --text, the file and its size") {
  // A sparse file of 64 GiB: loading it takes 9 bytes a byte (its bytes and
  // an int64 id a character), more than any machine that runs this has. It
  // took minutes to fail with a bare "std::bad_alloc" (or was killed).
  test::TempDir d("heed-charlm-huge-");
  const std::string huge = d.path + "/huge.txt";
  const int64_t size = int64_t{64} << 30;
  std::ofstream(huge, std::ios::binary).close();
  std::filesystem::resize_file(huge, static_cast<uintmax_t>(size));
  const test::Result r = test::heed_cli({"run", "charlm", "--text", huge, "--layers", "1", "--width", "16", "--heads",
                                         "2", "--context", "16", "--steps", "2", "--out", d.path + "/b.h5"},
                                        d.path);
  INFO(r.out << r.err);
  CHECK(r.status == 2);
  CHECK(r.err.rfind("heed: run charlm: --text '" + huge + "' (" + std::to_string(size) + " bytes) needs 576.0 GiB", 0) ==
        0);
  CHECK(r.err.find("to load (its bytes and an 8-byte token id a character), more than the ") != std::string::npos);
  CHECK(r.err.find("; expected a smaller --text\n") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.out.empty());
  CHECK_FALSE(std::filesystem::exists(d.path + "/b.h5"));  // no log, no checkpoint
  CHECK_FALSE(std::filesystem::exists(d.path + "/b.ckpt.h5"));
}

TEST_CASE("charlm: running out of memory loading --text is an error naming --text and its size, not std::bad_alloc") {
  // A pipe's size is unknown until it is read, so nothing refuses it up
  // front: the allocation that fails is named. 200 MB of NUL characters:
  // their bytes fit, their 1.6 GB of int64 ids do not (under ulimit -v, or
  // AddressSanitizer's allocation limit, which ulimit -v cannot give).
  test::TempDir d("heed-charlm-oom-");
  struct Case {
    int64_t bytes;
    std::string detail;
  };
#ifdef __SANITIZE_ADDRESS__
  const std::string limit =
      "ASAN_OPTIONS=\"$ASAN_OPTIONS:allocator_may_return_null=1:max_allocation_size_mb=300\"; export ASAN_OPTIONS; ";
  // (A std::string past the limit aborts under AddressSanitizer, whose
  // operator new does not throw.)
  const std::vector<Case> cases = {{200000000, "its 200000000 characters' token ids take 1.5 GiB (1600000000 bytes)"}};
#else
  const std::string limit = "ulimit -v 1200000; ";
  // The ids' tensor (heed's allocator), then the text's own bytes (a
  // std::bad_alloc while reading the pipe).
  const std::vector<Case> cases = {{200000000, "its 200000000 characters' token ids take 1.5 GiB (1600000000 bytes)"},
                                   {3000000000, "out of memory reading its bytes (a pipe: the bytes read so far)"}};
#endif
  for (const Case& c : cases) {
    CAPTURE(c.bytes);
    const test::Result r = test::run_process(
        {"/bin/sh", "-c",
         limit + "head -c " + std::to_string(c.bytes) + " /dev/zero | exec \"$0\" \"$@\"", HEED_CLI_PATH, "run",
         "charlm", "--text", "/dev/stdin", "--layers", "1", "--width", "16", "--heads", "2", "--context", "16",
         "--steps", "2", "--out", d.path + "/b.h5"},
        d.path);
    INFO(r.out << r.err);
    CHECK(r.status == 1);
    // heed's own lines: AddressSanitizer's "==pid==WARNING: ... failed to
    // allocate" comes first in the sanitized build.
    std::string heed_err;
    int64_t lines = 0;
    std::istringstream err(r.err);
    for (std::string line; std::getline(err, line);)
      if (line.rfind("==", 0) != 0) heed_err += line + "\n", ++lines;
    CHECK(heed_err.rfind("heed: run charlm: --text '/dev/stdin' (", 0) == 0);
    CHECK(heed_err.find(" bytes) does not fit in memory: " + c.detail) != std::string::npos);
    CHECK(heed_err.find("; expected a smaller --text (or more memory)\n") != std::string::npos);
    CHECK(r.err.find("bad_alloc") == std::string::npos);
    CHECK(lines == 1);
    CHECK_FALSE(std::filesystem::exists(d.path + "/b.h5"));
  }
}

TEST_CASE("charlm: a --text whose name is not UTF-8 is named with \\xNN in its errors") {
  test::TempDir d("heed-charlm-latin1-");
  const std::string empty = d.path + "/caf\xE9.txt";
  std::ofstream(empty, std::ios::binary).close();
  const test::Result r = test::heed_cli({"run", "charlm", "--text", empty, "--steps", "2", "--out", d.path + "/b.h5"},
                                        d.path);
  INFO(r.out << r.err);
  CHECK(r.status == 1);
  CHECK(r.err == "heed: run charlm: --text: text file '" + d.path + "/caf\\xe9.txt' is empty\n");
}

TEST_CASE("charlm: a --text of 64 MiB or more is announced before it is read; a small one is not") {
  // Loading takes seconds from this size on (100 MB: about 3.5 s): a line
  // says so first. Both files end in a byte that is not UTF-8, so each run
  // stops right after reading its text.
  test::TempDir d("heed-charlm-announce-");
  struct Case {
    std::string name;
    int64_t bytes;
    bool announced;
  };
  for (const Case& c : {Case{"big.txt", int64_t{64} << 20, true}, Case{"small.txt", (int64_t{64} << 20) - 1, false}}) {
    CAPTURE(c.name);
    const std::string path = d.path + "/" + c.name;
    {
      std::ofstream f(path, std::ios::binary);
      const std::string line = "In the beginning God created the heaven and the earth.\n";
      for (int64_t left = c.bytes - 1; left > 0; left -= static_cast<int64_t>(line.size()))
        f.write(line.data(), std::min<int64_t>(left, static_cast<int64_t>(line.size())));
      f.put('\xFF');
    }
    REQUIRE(std::filesystem::file_size(path) == static_cast<uintmax_t>(c.bytes));
    const test::Result r = test::heed_cli({"run", "charlm", "--text", path, "--layers", "1", "--width", "16", "--heads",
                                           "2", "--context", "16", "--steps", "2", "--out", d.path + "/b.h5"},
                                          d.path);
    INFO(r.out << r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find("invalid UTF-8 at byte offset " + std::to_string(c.bytes - 1)) != std::string::npos);
    CHECK(r.err.find("heed: run charlm: --text: ") == 0);
    const std::string line = "text: reading and tokenizing '" + path + "' (67 MB) ...\n";
    CHECK((r.out.find(line) != std::string::npos) == c.announced);
    CHECK((r.out.find("reading and tokenizing") != std::string::npos) == c.announced);
  }
}
