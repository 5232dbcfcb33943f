// tests/experiments/test_heads.cpp: per-head attention statistics (heads.h)
// on maps whose answers are known, the saturation measurements of `heed run
// scaling` against the lecture's claims, and `heed attend` end to end.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "experiments/charlm.h"
#include "experiments/heads.h"
#include "experiments/scaling.h"
#include "spawn.h"
#include "test_util.h"

using namespace heed;
using namespace heed::experiments;

namespace {

// [1, H, T, T] maps from a rule w(i, j) (j <= i), rows normalised.
Tensor maps_from(int64_t T, const std::vector<std::function<double(int64_t, int64_t)>>& heads) {
  const int64_t H = static_cast<int64_t>(heads.size());
  std::vector<double> v(static_cast<size_t>(H * T * T), 0.0);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < T; ++i) {
      double z = 0;
      for (int64_t j = 0; j <= i; ++j) z += heads[static_cast<size_t>(h)](i, j);
      for (int64_t j = 0; j <= i; ++j)
        v[static_cast<size_t>((h * T + i) * T + j)] = heads[static_cast<size_t>(h)](i, j) / z;
    }
  return Tensor::from_f64(v, {1, H, T, T});
}

}  // namespace

TEST_CASE("head_stats: previous-token, first-token, same-character and word-start heads have the numbers they must") {
  // "ab ab aab": ids a=0, b=1, space=2; words start at 0, 3, 6.
  const std::vector<int64_t> text = {0, 1, 2, 0, 1, 2, 0, 0, 1};
  const int64_t T = static_cast<int64_t>(text.size());
  Tensor ids = Tensor::from_i64(text, {1, T});
  const std::vector<bool> boundary = {false, false, true};
  auto word_start = [&](int64_t i) {
    int64_t w = 0;
    for (int64_t j = 1; j <= i; ++j)
      if (boundary[static_cast<size_t>(text[static_cast<size_t>(j - 1)])]) w = j;
    return w;
  };
  Tensor maps = maps_from(T, {
                                 [](int64_t i, int64_t j) { return j == i - 1 ? 1.0 : 0.0; },
                                 [](int64_t, int64_t j) { return j == 0 ? 1.0 : 0.0; },
                                 [&](int64_t i, int64_t j) { return j == word_start(i) ? 1.0 : 0.0; },
                                 [](int64_t, int64_t) { return 1.0; },
                             });
  HeadStats u;
  std::vector<HeadStats> s = head_stats(maps, ids, boundary, &u);
  REQUIRE(s.size() == 4);
  const double queries = static_cast<double>(T - 1);
  // Previous-token: all mass one step back.
  CHECK(s[0].prev == doctest::Approx(1.0));
  CHECK(s[0].distance == doctest::Approx(1.0));
  CHECK(s[0].entropy == doctest::Approx(0.0));
  CHECK(head_kind(s[0], u) == "previous-token");
  // First-token: distance is the mean of i over the queries 1..T-1.
  CHECK(s[1].first == doctest::Approx(1.0));
  CHECK(s[1].distance == doctest::Approx((T * (T - 1) / 2) / queries));
  CHECK(head_kind(s[1], u) == "first-token");
  // Word-start: mass 1 on the word's start; a query at its word's start counts its own weight.
  CHECK(s[2].word_start == doctest::Approx(1.0));
  CHECK(head_kind(s[2], u) == "word-start");
  // The uniform head equals the uniform baseline, and is "mixed".
  CHECK(s[3].entropy == doctest::Approx(u.entropy));
  CHECK(s[3].prev == doctest::Approx(u.prev));
  CHECK(s[3].same_char == doctest::Approx(u.same_char));
  CHECK(head_kind(s[3], u) == "mixed");
  // Same-character mass of the previous-token head: queries whose previous
  // character equals their own (positions 7: a after a).
  CHECK(s[0].same_char == doctest::Approx(1.0 / queries));
  // The uniform baseline by hand: mean over i of 1 / (i + 1).
  double prev = 0;
  for (int64_t i = 1; i < T; ++i) prev += 1.0 / static_cast<double>(i + 1);
  CHECK(u.prev == doctest::Approx(prev / queries));
  // uniform_head_stats gives the same baseline without a model.
  HeadStats u2 = uniform_head_stats(ids, boundary);
  CHECK(u2.entropy == doctest::Approx(u.entropy));
  CHECK(u2.word_start == doctest::Approx(u.word_start));
}

TEST_CASE("head_stats: bad shapes and ids are refused naming what was expected") {
  test::check_error([] { head_stats(Tensor::zeros({2, 3, 4}), Tensor::zeros({2, 4}, DType::i64), {true}); },
                    {"head_stats", "[B, H, T, T]", "[2, 3, 4]"});
  test::check_error([] { head_stats(Tensor::zeros({1, 1, 4, 4}), Tensor::zeros({1, 3}, DType::i64), {true}); },
                    {"head_stats", "[1, 4]", "[1, 3]"});
  test::check_error(
      [] { head_stats(Tensor::ones({1, 1, 2, 2}), Tensor::from_i64({0, 5}, {1, 2}), {true, false}); },
      {"head_stats", "id 5", "vocabulary of 2"});
}

TEST_CASE("scaling: unscaled scores have variance ~ d_k and saturate the softmax; scaled ones stay at ~1") {
  double prev_grad = 1e300;
  SaturationRow first_scaled;
  for (int64_t dk : {16, 64, 256, 1024}) {
    SaturationRow s = measure_saturation(dk, true, 256, 64, 1), u = measure_saturation(dk, false, 256, 64, 1);
    INFO("d_k " << dk << ": var scaled " << s.score_var << " unscaled " << u.score_var << "; entropy " << s.entropy
                << " / " << u.entropy << "; max weight " << s.max_weight << " / " << u.max_weight << "; grad "
                << s.grad_ratio << " / " << u.grad_ratio);
    if (dk == 16) first_scaled = s;
    CHECK(s.score_var == doctest::Approx(1.0).epsilon(0.1));
    CHECK(u.score_var == doctest::Approx(static_cast<double>(dk)).epsilon(0.1));
    CHECK(s.entropy > 0.85 * std::log(64.0));  // close to uniform over 64 keys, at every d_k
    CHECK(s.grad_ratio == doctest::Approx(first_scaled.grad_ratio).epsilon(0.2));  // flat in d_k
    CHECK(u.entropy < s.entropy);
    CHECK(u.grad_ratio < prev_grad);  // unscaled: less gradient through the softmax as d_k grows
    prev_grad = u.grad_ratio;
    if (dk >= 256) CHECK(u.max_weight > 0.85);  // nearly one-hot
    if (dk == 1024) {
      CHECK(u.entropy < 0.05 * s.entropy);
      CHECK(u.grad_ratio < 0.4 * s.grad_ratio);
    }
  }
}

TEST_CASE("heed attend: a tiny charlm checkpoint's heads, printed, written and drawn; bad prompts refused") {
  test::TempDir d("heed-attend-");
  const std::string corpus = d.path + "/corpus.txt";
  {
    std::ofstream f(corpus);
    for (int i = 0; i < 60; ++i) f << "In the beginning God created the heaven and the earth. ";
  }
  REQUIRE(run_charlm({"--text", corpus, "--layers", "1", "--heads", "2", "--width", "16", "--context", "16",
                      "--batch", "4", "--steps", "10", "--eval-every", "10", "--eval-batches", "1", "--out",
                      d.path + "/c.h5"},
                     {"heed", "run", "charlm"}) == 0);
  h5::File log(d.path + "/c.h5", h5::File::Mode::read);
  CHECK(log.read_tensor("series/heads/prev/values").shape() == Shape{1, 1, 2});
  CHECK(log.read_tensor("heads/uniform").shape() == Shape{6});

  REQUIRE(run_attend({d.path + "/c.ckpt.h5", "--prompt", "In the beginning", "-o", d.path + "/a.h5"}) == 0);
  h5::File a(d.path + "/a.h5", h5::File::Mode::read);
  Tensor maps = a.read_tensor("attention/maps");
  CHECK(maps.shape() == Shape{1, 2, 16, 16});
  // Causal rows that sum to 1.
  Tensor rows = sum(maps, {3});
  CHECK(test::max_diff(rows, Tensor::ones({1, 2, 16}, maps.dtype())) < 1e-5);
  CHECK(a.read_tensor("heads/entropy").shape() == Shape{1, 2});
  CHECK(std::filesystem::is_regular_file(d.path + "/a_plots/attention_grid.png"));
  // The attributes every log has (docs/log-format.md), as a run's log has them.
  auto text = [&](const char* name) {
    return a.has_attr("/", name) ? h5::attr_str(a.get_attr("/", name)) : std::string("(none)");
  };
  h5::File run_log(d.path + "/c.h5", h5::File::Mode::read);
  CHECK(text("heed_version") == h5::attr_str(run_log.get_attr("/", "heed_version")));
  CHECK(text("git_commit") == h5::attr_str(run_log.get_attr("/", "git_commit")));
  CHECK(text("command_line") == "heed attend " + d.path + "/c.ckpt.h5 --prompt 'In the beginning' -o " + d.path +
                                    "/a.h5");
  const std::string start = text("start_time");  // 2026-11-25T23:59:31Z
  CHECK(start.size() == 20);
  CHECK(start.find('T') == 10);
  CHECK(start.back() == 'Z');
  const std::string id = text("run_id");
  CHECK(id.size() == 32);
  CHECK(id.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(id != h5::attr_str(run_log.get_attr("/", "run_id")));  // its own, not the training run's
  // What computed it, as a run's log says (it had none of these), and its options as used.
  CHECK(h5::attr_as<int64_t>(a.get_attr("/", "threads"), "threads") == num_threads());
  CHECK(h5::attr_as<int64_t>(a.get_attr("/", "processes"), "processes") == 1);
  CHECK(text("cpu") == h5::attr_str(run_log.get_attr("/", "cpu")));
  CHECK(text("backends") == h5::attr_str(run_log.get_attr("/", "backends")));
  CHECK(text("config.prompt") == "In the beginning");
  CHECK(text("config.out") == d.path + "/a.h5");

  test::check_error([&] { run_attend({d.path + "/c.ckpt.h5", "--prompt", "Zebra"}); }, {"Z"});
  test::check_error([&] { run_attend({d.path + "/c.ckpt.h5", "--prompt", std::string(17, 'e')}); },
                    {"17 characters", "context of 16"});
  test::check_error([&] { run_attend({d.path + "/c.h5"}); }, {"c.h5"});
  test::check_error([&] { run_attend({}); }, {"checkpoint path"});
}

TEST_CASE("heed attend's default prompt: the Bible's, cut to the model's context; for a run on a text without its "
          "characters, the start of the run's validation text") {
  test::TempDir d("heed-attend-default-");
  auto train = [&](const std::string& name, const std::string& line) {
    std::ofstream(d.path + "/" + name + ".txt") << [&] {
      std::string s;
      for (int i = 0; i < 80; ++i) s += line;
      return s;
    }();
    REQUIRE(run_charlm({"--text", d.path + "/" + name + ".txt", "--layers", "1", "--heads", "2", "--width", "16",
                        "--context", "16", "--batch", "4", "--steps", "3", "--eval-every", "3", "--eval-batches", "1",
                        "--out", d.path + "/" + name + ".h5"},
                       {"heed", "run", "charlm"}) == 0);
    return d.path + "/" + name + ".ckpt.h5";
  };
  auto prompt_of = [](const std::string& log) {
    h5::File f(log, h5::File::Mode::read);
    return h5::attr_str(f.get_attr("/", "prompt"));
  };
  // The Bible's characters, a context of 16: the default's first 16 characters
  // (it has 39; it was refused as longer than the context).
  const std::string bible = train("bible", "And God said unto Moses, I AM THAT I AM. ");
  REQUIRE(run_attend({bible, "-o", d.path + "/b.h5"}) == 0);
  CHECK(prompt_of(d.path + "/b.h5") == "And God said unt");
  // Lowercase letters and spaces only: no 'A' for the default; the prompt is
  // the start of the validation text, as run charlm's probe of the maps is.
  const std::string lower = train("lower", "the quick brown fox jumps over the lazy dog ");
  REQUIRE(run_attend({lower, "-o", d.path + "/l.h5"}) == 0);
  const std::string p = prompt_of(d.path + "/l.h5");
  CHECK(p.size() == 16);
  CHECK(p.find_first_not_of("abcdefghijklmnopqrstuvwxyz ") == std::string::npos);
  {
    std::string all;  // one byte a character: the validation text begins at 90% of the bytes
    for (int i = 0; i < 80; ++i) all += "the quick brown fox jumps over the lazy dog ";
    CHECK(p == all.substr(static_cast<size_t>(static_cast<double>(all.size()) * 0.9), 16));
  }
  // Its text gone, there is nothing to take a prompt from: the message says to give one.
  std::filesystem::remove(d.path + "/lower.txt");
  test::check_error([&] { run_attend({lower, "-o", d.path + "/g.h5"}); },
                    {"default --prompt", "lower.txt", "expected --prompt TEXT"});
  CHECK_FALSE(std::filesystem::exists(d.path + "/g.h5"));
}

TEST_CASE("heed attend: every message begins \"attend: \", its own and those of what it calls") {
  test::TempDir d("heed-attend-prefix-");
  const std::string corpus = d.path + "/corpus.txt";
  {
    std::ofstream f(corpus);
    for (int i = 0; i < 60; ++i) f << "In the beginning God created the heaven and the earth. ";
  }
  REQUIRE(run_charlm({"--text", corpus, "--layers", "1", "--heads", "2", "--width", "16", "--context", "16",
                      "--batch", "4", "--steps", "2", "--eval-every", "2", "--eval-batches", "1", "--out",
                      d.path + "/c.h5"},
                     {"heed", "run", "charlm"}) == 0);
  const std::string ck = d.path + "/c.ckpt.h5";
  // Each said it its own way: "attend CHECKPOINT: unknown option", "checkpoint '...' does not exist", "'c.h5' is a
  // heed run log, not a heed checkpoint", "attend: ...".
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{ck, "--bogus"}, "attend: unknown option '--bogus'"},
      {{ck, "--prompt"}, "attend: --prompt expects a value (TEXT)"},
      {{}, "attend: expected a checkpoint path"},
      {{d.path + "/none.ckpt.h5"}, "attend: checkpoint '" + d.path + "/none.ckpt.h5' does not exist"},
      {{d.path + "/c.h5"}, "attend: '" + d.path + "/c.h5' is a heed run log, not a heed checkpoint"},
      {{ck, "--prompt", "Zebra"}, "attend: --prompt \"Zebra\""},
      {{ck, "--prompt", "I"}, "attend: --prompt \"I\" must hold at least 2 characters"},
      {{ck, "-o", d.path + "/c.h5"}, "attend: --out '" + d.path + "/c.h5' is a heed run log"},
  };
  for (const auto& [args, want] : cases) {
    CAPTURE(want);
    std::string msg;
    try {
      run_attend(args);
    } catch (const Error& e) {
      msg = e.what();
    }
    INFO(msg);
    CHECK(msg.rfind(want, 0) == 0);
    CHECK(msg.find("attend: attend:") == std::string::npos);
  }
  // Its --help keeps the usage line that names the checkpoint.
  const std::string help = test::heed_cli({"attend", "--help"}, d.path).out;
  CHECK(help.rfind("usage: heed attend CHECKPOINT [options]\n", 0) == 0);
}

TEST_CASE("heed attend's default prompt from a text of short lines has no newline, and a prompt shows on one line") {
  test::TempDir d("heed-attend-lines-");
  // Lines of 25 characters, lowercase (no default prompt of the Bible's): the
  // validation text (the last 10% of the bytes) begins 3 characters before
  // the end of a line, so its first 16 characters held a newline.
  const std::string line = "the quick brown fox jumps\n";
  std::string all;
  for (int i = 0; i < 81; ++i) all += line;
  std::ofstream(d.path + "/lines.txt") << all;
  const size_t val = static_cast<size_t>(static_cast<double>(all.size()) * 0.9);
  REQUIRE(all.substr(val, 16).find('\n') != std::string::npos);
  REQUIRE(run_charlm({"--text", d.path + "/lines.txt", "--layers", "1", "--heads", "2", "--width", "16", "--context",
                      "16", "--batch", "4", "--steps", "2", "--eval-every", "2", "--eval-batches", "1", "--out",
                      d.path + "/c.h5"},
                     {"heed", "run", "charlm"}) == 0);
  const std::string ck = d.path + "/c.ckpt.h5";
  test::Result r = test::heed_cli({"attend", ck, "-o", d.path + "/a.h5"}, d.path);
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  const std::string prompt = h5::attr_str(h5::File(d.path + "/a.h5", h5::File::Mode::read).get_attr("/", "prompt"));
  // The first 16 characters of the validation text in a row without a newline: the next line's start.
  const size_t next = all.find('\n', val) + 1;
  CHECK(prompt == all.substr(next, 16));
  CHECK(prompt.find('\n') == std::string::npos);
  CHECK(r.out.find("prompt: \"" + prompt + "\" (16 characters)\n") != std::string::npos);
  // A prompt given with a newline is shown escaped, on the one line; so is one refused.
  test::Result g = test::heed_cli({"attend", ck, "--prompt", "fox\njumps", "-o", d.path + "/g.h5"}, d.path);
  INFO(g.out << g.err);
  REQUIRE(g.status == 0);
  CHECK(g.out.rfind("prompt: \"fox\\njumps\" (9 characters)\n", 0) == 0);
  test::Result bad = test::heed_cli({"attend", ck, "--prompt", "fox\n\tjumps", "-o", d.path + "/b.h5"}, d.path);
  INFO(bad.err);
  CHECK(bad.status == 2);
  CHECK(bad.err.find("heed: attend: --prompt \"fox\\n\\tjumps\": control character (U+0009)") == 0);
  CHECK(bad.err.find('\n') == bad.err.size() - 1);  // one line
  CHECK(!std::filesystem::exists(d.path + "/b.h5"));
}

TEST_CASE("attend_default_prompt and attend_printable") {
  CHECK(attend_default_prompt("ab\ncdefgh\nijklmnopq", 4) == "cdef");  // the first line long enough
  CHECK(attend_default_prompt("abcdefgh", 4) == "abcd");
  CHECK(attend_default_prompt("ab\r\nabc\tx\n", 5) == "abc");  // none long enough: the first longest
  CHECK(attend_default_prompt("\n\n\t", 4).empty());
  CHECK(attend_default_prompt("é\u2028àü", 2) == "àü");  // a Unicode line separator ends a line too
  CHECK(attend_printable("a\nb\tc\rd") == "a\\nb\\tc\\rd");
  CHECK(attend_printable("say \"hi\" \\ \x1b") == "say \\\"hi\\\" \\\\ \\x1b");
  CHECK(attend_printable("\u2029é") == "\\u2029é");
  CHECK(attend_printable("In the beginning") == "In the beginning");
}

namespace {

// A tiny charlm trained on `line` repeated, in dir; its checkpoint's path.
std::string tiny_charlm(const std::string& dir, const std::string& name, const std::string& line, int times = 80) {
  std::string all;
  for (int i = 0; i < times; ++i) all += line;
  std::ofstream(dir + "/" + name + ".txt") << all;
  REQUIRE(run_charlm({"--text", dir + "/" + name + ".txt", "--layers", "1", "--heads", "2", "--width", "16",
                      "--context", "16", "--batch", "4", "--steps", "2", "--eval-every", "2", "--eval-batches", "1",
                      "--out", dir + "/" + name + ".h5"},
                     {"heed", "run", "charlm"}) == 0);
  return dir + "/" + name + ".ckpt.h5";
}

}  // namespace

TEST_CASE("heed attend refuses what would keep it from drawing its figure before it writes anything: a HEED_PYTHON "
          "that cannot, a file where the figures' directory goes") {
  // It wrote (or replaced) its .h5, then failed on the figure with status 1,
  // the new maps beside the old figure.
  test::TempDir d("heed-attend-plot-");
  const std::string ck = tiny_charlm(d.path, "c", "In the beginning God created the heaven and the earth. ");
  const std::string r = d.path + "/R.h5";
  test::Result first = test::heed_cli({"attend", ck, "--prompt", "In the", "-o", r}, d.path);
  INFO(first.out << first.err);
  REQUIRE(first.status == 0);
  REQUIRE(std::filesystem::is_regular_file(d.path + "/R_plots/attention_grid.png"));
  const std::string not_executable = d.path + "/python3";
  std::ofstream(not_executable) << "#!/bin/sh\n";
  struct Case {
    std::string python, says;
  };
  for (const Case& c : {Case{"/nonexistent/python3", "HEED_PYTHON='/nonexistent/python3': No such file or directory"},
                        Case{not_executable, "HEED_PYTHON='" + not_executable + "' is not an executable program"},
                        // A program that is no Python: a shell's many lines of usage were the message.
                        Case{"/bin/bash", "HEED_PYTHON='/bin/bash' cannot run the plotting script (exit status 2: "}}) {
    CAPTURE(c.python);
    const auto before = test::snapshot(d.path);
    test::Result bad = [&] {
      test::EnvFor python("HEED_PYTHON", c.python);
      return test::heed_cli({"attend", ck, "--prompt", "the heaven", "-o", r}, d.path);
    }();
    INFO(bad.out << bad.err);
    CHECK(bad.status == 2);
    CHECK(bad.err.rfind("heed: attend: " + c.says, 0) == 0);
    CHECK(bad.err.find('\n') == bad.err.size() - 1);  // one line
    CHECK(bad.out.empty());  // refused before the work: no table
    CHECK(test::snapshot(d.path) == before);
  }
  CHECK(h5::attr_str(h5::File(r, h5::File::Mode::read).get_attr("/", "prompt")) == "In the");
  // A file where the figures' directory goes: nothing written.
  std::ofstream(d.path + "/F_plots") << "mine\n";
  const auto before = test::snapshot(d.path);
  test::Result file = test::heed_cli({"attend", ck, "--prompt", "In the", "-o", d.path + "/F.h5"}, d.path);
  INFO(file.out << file.err);
  CHECK(file.status == 2);
  CHECK(file.err == "heed: attend: the figures' directory '" + d.path + "/F_plots' (beside --out '" + d.path +
                        "/F.h5') exists and is not a directory; expected a directory or nothing there (remove it, or "
                        "give another --out)\n");
  CHECK(test::snapshot(d.path) == before);
  CHECK_FALSE(std::filesystem::exists(d.path + "/F.h5"));
}

TEST_CASE("heed attend draws a prompt with a character its font lacks (U+200B) without a warning") {
  // matplotlib's "UserWarning: Glyph 8203 (\N{ZERO WIDTH SPACE}) missing
  // from current font" reached the user with a line of heed_plot.py.
  test::TempDir d("heed-attend-glyph-");
  const std::string ck = tiny_charlm(d.path, "z", "the cat sat on the mat\u200b and the dog sat. ");
  test::Result r = test::heed_cli({"attend", ck, "--prompt", "the mat\u200b and", "-o", d.path + "/a.h5"}, d.path);
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.find("Warning") == std::string::npos);
  CHECK(r.err.find("Glyph") == std::string::npos);
  CHECK(std::filesystem::is_regular_file(d.path + "/a_plots/attention_grid.png"));
}

TEST_CASE("heed sample's default prompt works with a model of any text: for one without \"And God said\"'s "
          "characters, a line of its run's validation text") {
  // It was refused with status 2 on any model lacking 'A'.
  test::TempDir d("heed-sample-default-");
  const std::string line = "the quick brown fox jumps over the lazy dog ";
  const std::string lower = tiny_charlm(d.path, "lower", line);
  test::Result s = test::heed_cli({"sample", lower, "--tokens", "5"}, d.path);
  INFO(s.out << s.err);
  REQUIRE(s.status == 0);
  {
    std::string all;  // one byte a character: the validation text begins at 90% of the bytes
    for (int i = 0; i < 80; ++i) all += line;
    const std::string prompt = all.substr(static_cast<size_t>(static_cast<double>(all.size()) * 0.9), 12);
    CHECK(s.out.rfind(prompt, 0) == 0);
    CHECK(s.out.size() == prompt.size() + 5 + 1);  // 5 characters of one byte, a newline
  }
  // A prompt given is the user's: refused when the vocabulary lacks a character.
  test::Result given = test::heed_cli({"sample", lower, "--prompt", "And God said", "--tokens", "5"}, d.path);
  CHECK(given.status == 2);
  CHECK(given.err.rfind("heed: sample: --prompt \"And God said\": character 'A'", 0) == 0);
  // The Bible's characters: the default itself.
  const std::string bible = tiny_charlm(d.path, "bible", "And God said unto Moses, I AM THAT I AM. ");
  test::Result b = test::heed_cli({"sample", bible, "--tokens", "5"}, d.path);
  INFO(b.err);
  CHECK(b.status == 0);
  CHECK(b.out.rfind("And God said", 0) == 0);
  // Its text gone, there is nothing to take a prompt from: the message says to give one.
  std::filesystem::remove(d.path + "/lower.txt");
  test::Result gone = test::heed_cli({"sample", lower, "--tokens", "5"}, d.path);
  INFO(gone.err);
  CHECK(gone.status == 2);
  CHECK(gone.err.rfind("heed: sample: the default --prompt \"And God said\" has characters checkpoint '" + lower +
                           "' lacks, and no prompt could be taken from its run's text instead (",
                       0) == 0);
  CHECK(gone.err.find("lower.txt") != std::string::npos);
  CHECK(gone.err.find("); expected --prompt TEXT\n") != std::string::npos);
  CHECK(gone.out.empty());
}
