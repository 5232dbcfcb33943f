// tests/data/test_text.cpp: corpus loading, the character tokenizer, splits
// and context windows.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "data/file_damage.h"
#include "data/text.h"
#include "test_util.h"

using namespace heed;
using namespace heed::data;

namespace {
std::string write_file(const std::string& name, const std::string& content) {
  std::string p = test::temp_path("text-" + name);
  std::ofstream(p, std::ios::binary) << content;
  return p;
}
}  // namespace

TEST_CASE("text: the tokenizer's vocabulary is the corpus's distinct characters, and round-trips") {
  std::string text = "héllo wörld — ∑ 🙂";
  CharTokenizer t = CharTokenizer::from_text(text);
  CHECK(t.vocab_size() == 12);  // h é l o ' ' w ö r d — ∑ 🙂
  auto ids = t.encode(text);
  CHECK(static_cast<int64_t>(ids.size()) == 17);  // code points, not bytes
  CHECK(t.decode(ids) == text);
  CharTokenizer u = CharTokenizer::from_tensor(t.to_tensor());
  CHECK(u.encode(text) == ids);
  test::check_error([&] { t.encode("hox"); }, {"'x'", "position 2", "not in the vocabulary"});
  test::check_error([&] { t.decode({99}); }, {"id 99", "0..11"});
}

TEST_CASE("text: loading refuses missing, empty and invalid UTF-8 files, naming the path and offset") {
  test::check_error([] { load_text("/nonexistent/corpus.txt"); }, {"/nonexistent/corpus.txt", "does not exist"});
  std::string empty = write_file("empty.txt", "");
  test::check_error([&] { load_text(empty); }, {"empty.txt", "empty"});
  std::string bad = write_file("bad.txt", std::string("abc\xC3(def", 8));
  test::check_error([&] { load_text(bad); }, {"bad.txt", "invalid UTF-8", "byte offset 4"});
  std::string overlong = write_file("overlong.txt", std::string("ok\xC0\xAF", 4));
  test::check_error([&] { load_text(overlong); }, {"invalid UTF-8", "byte offset 2"});
  std::string good = write_file("good.txt", "In the beginning");
  CHECK(load_text(good) == "In the beginning");
}

TEST_CASE("text: 90/10 split and reproducible windows whose targets are the next tokens") {
  std::vector<int64_t> ids(1000);
  for (int64_t i = 0; i < 1000; ++i) ids[i] = i % 50;
  TextSplit s = split_tokens(ids);
  CHECK(s.train.numel() == 900);
  CHECK(s.val.numel() == 100);
  CHECK(s.val.to_vector<int64_t>()[0] == ids[900]);
  Generator g1(5), g2(5);
  Tensor x1, y1, x2, y2;
  random_windows(s.train, 4, 16, g1, x1, y1);
  random_windows(s.train, 4, 16, g2, x2, y2);
  CHECK(x1.shape() == Shape{4, 16});
  CHECK(x1.to_vector<int64_t>() == x2.to_vector<int64_t>());
  auto x = x1.to_vector<int64_t>(), y = y1.to_vector<int64_t>();
  for (int b = 0; b < 4; ++b)
    for (int t = 0; t < 16; ++t) CHECK(y[b * 16 + t] == (x[b * 16 + t] + 1) % 50);
  Tensor shortx, shorty;
  test::check_error([&] { random_windows(Tensor::from_i64({1, 2, 3}, {3}), 1, 8, g1, shortx, shorty); },
                    {"3 tokens", "context window of 8"});
}

TEST_CASE("text: every window start is drawn, the last one included; T + 1 tokens make exactly one window") {
  // T + 1 tokens: the one window [0, T), its targets [1, T].
  Tensor stream = Tensor::from_i64({10, 11, 12, 13, 14}, {5});
  Generator g(3);
  Tensor x, y;
  random_windows(stream, 2, 4, g, x, y);
  CHECK(x.to_vector<int64_t>() == std::vector<int64_t>{10, 11, 12, 13, 10, 11, 12, 13});
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{11, 12, 13, 14, 11, 12, 13, 14});
  // T + 3 tokens: starts 0, 1, 2, each drawn among 300 windows (a start is
  // missed with probability (2/3)^300).
  Tensor longer = Tensor::from_i64({0, 1, 2, 3, 4, 5, 6}, {7});
  random_windows(longer, 300, 4, g, x, y);
  std::set<int64_t> starts;
  const std::vector<int64_t> xs = x.to_vector<int64_t>();
  for (size_t b = 0; b < 300; ++b) starts.insert(xs[b * 4]);
  CHECK(starts == std::set<int64_t>{0, 1, 2});
}

TEST_CASE("text: the fingerprint is 64-bit FNV-1a (its published test vectors)") {
  // Fowler, Noll and Vo's FNV-1a 64: "" is the offset basis, "a" and
  // "foobar" from the reference test suite.
  CHECK(text_fingerprint("") == 0xcbf29ce484222325ull);
  CHECK(text_fingerprint("a") == 0xaf63dc4c8601ec8cull);
  CHECK(text_fingerprint("foobar") == 0x85944171f73967e8ull);
}

TEST_CASE("text: a 300-character file name or a symlink loop is a heed::Error naming the path") {
  test::DamageDir d("heed-text-paths-");
  const std::string longname = d.long_name(), loop = d.symlink_loop();
  test::check_error([&] { load_text(longname); }, {"text file '" + longname + "' cannot be read: File name too long"});
  test::check_error([&] { load_text(loop); },
                    {"text file '" + loop + "' cannot be read: Too many levels of symbolic links"});
  // The default corpus's cache: refused by name before anything is extracted.
  test::check_error([&] { kjv_text(loop); },
                    {"the corpus cache '" + loop + "' cannot be read: Too many levels of symbolic links"});
}

namespace {
// The tokenizer as it was first written: every code point decoded, sorted
// and made unique for the vocabulary; the whole text decoded again to
// encode. The one-pass tokenizer must give the very same vocabulary and ids
// (checkpoints and logs record them).
struct ReferenceTokenizer {
  std::vector<uint32_t> chars;
  std::vector<int64_t> ids;
  explicit ReferenceTokenizer(const std::string& text) {
    std::vector<uint32_t> cps = decode_utf8(text);
    chars = cps;
    std::sort(chars.begin(), chars.end());
    chars.erase(std::unique(chars.begin(), chars.end()), chars.end());
    for (uint32_t cp : cps)
      ids.push_back(std::lower_bound(chars.begin(), chars.end(), cp) - chars.begin());
  }
};
}  // namespace

TEST_CASE("text: the one-pass tokenizer gives the vocabulary and ids of decode, sort and unique") {
  // Multi-byte characters of every length, CRLF line ends, NUL, DEL, the
  // last code point, and seeded random mixes of them.
  const std::vector<std::string> alphabet = {"a", "Z", " ", "\r\n", "\n", std::string(1, '\0'), "\x7f", "é", "ß",
                                             "—", "∑", "中", "🙂", "\xF4\x8F\xBF\xBF" /* U+10FFFF */, "\xC2\x80"};
  std::vector<std::string> texts = {"In the beginning God created the heaven and the earth.\r\n",
                                    std::string("nul\0inside\0", 11), "héllo wörld — ∑ 🙂", "\xF4\x8F\xBF\xBF"};
  Generator g(7);
  for (int k = 0; k < 20; ++k) {
    std::string t;
    const int64_t n = g.randint(1, 400);
    for (int64_t i = 0; i < n; ++i) t += alphabet[static_cast<size_t>(g.randint(0, static_cast<int64_t>(alphabet.size())))];
    texts.push_back(t);
  }
  for (const std::string& text : texts) {
    CAPTURE(escape_invalid_utf8(text));
    const ReferenceTokenizer ref(text);
    const CharTokenizer t = CharTokenizer::from_text(text);
    CHECK(t.chars() == ref.chars);
    CHECK(t.encode(text) == ref.ids);
    const Tensor ids = t.encode_tensor(text);
    CHECK(ids.dtype() == DType::i64);
    CHECK(ids.shape() == Shape{static_cast<int64_t>(ref.ids.size())});
    CHECK(ids.to_vector<int64_t>() == ref.ids);
    CHECK(t.decode(ref.ids) == text);
    // The saved vocabulary rebuilds the same tokenizer.
    CHECK(CharTokenizer::from_tensor(t.to_tensor()).chars() == ref.chars);
  }
}

TEST_CASE("text: split_tokens of a tensor gives views of its storage, the parts split_tokens of a vector gives") {
  std::vector<int64_t> v(1234);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>((i * 7919) % 61);
  const Tensor ids = Tensor::from_i64(v, {1234});
  const TextSplit a = split_tokens(ids), b = split_tokens(v);
  CHECK(a.train.numel() == 1110);
  CHECK(a.val.numel() == 124);
  CHECK(a.train.to_vector<int64_t>() == b.train.to_vector<int64_t>());
  CHECK(a.val.to_vector<int64_t>() == b.val.to_vector<int64_t>());
  CHECK(a.train.shares_storage(ids));  // no copy of the stream
  CHECK(a.val.shares_storage(ids));
  CHECK(a.val.data<int64_t>() == ids.data<int64_t>() + 1110);
  // Windows over a view read the view's tokens.
  Generator g1(3), g2(3);
  Tensor x1, y1, x2, y2;
  random_windows(a.val, 5, 8, g1, x1, y1);
  random_windows(b.val, 5, 8, g2, x2, y2);
  CHECK(x1.to_vector<int64_t>() == x2.to_vector<int64_t>());
  CHECK(y1.to_vector<int64_t>() == y2.to_vector<int64_t>());
  test::check_error([&] { split_tokens(Tensor::zeros({4})); }, {"split_tokens", "int64"});
  test::check_error([&] { split_tokens(Tensor::from_i64({1, 2, 3, 4}, {2, 2})); }, {"split_tokens", "[2, 2]"});
}

TEST_CASE("text: the one-pass tokenizer keeps its errors: invalid UTF-8 by byte offset, before a character it lacks") {
  const CharTokenizer t = CharTokenizer::from_text("abc\n");
  test::check_error([&] { t.encode_tensor("abx"); }, {"character 'x' (U+0078) at position 2", "vocabulary of 4"});
  test::check_error([&] { t.encode_tensor("ab\tc"); }, {"control character (U+0009) at position 2"});
  test::check_error([&] { t.encode(std::string("a\xC3(", 3)); }, {"text: invalid UTF-8 at byte offset 2 (byte 0x28)"});
  // A missing character before invalid UTF-8: the invalid UTF-8 is reported,
  // as when the whole text was decoded first.
  test::check_error([&] { t.encode_tensor(std::string("abxa\xFF", 5)); }, {"invalid UTF-8 at byte offset 4"});
  test::check_error([&] { CharTokenizer::from_text(std::string("ok\xED\xA0\x80", 5)); },
                    {"text: invalid UTF-8 at byte offset 2"});
}

TEST_CASE("text: a text file's path that is not UTF-8 is shown with \\xNN, not its raw bytes") {
  test::TempDir d("heed-text-latin1-");
  const std::string empty = d.path + "/caf\xE9.txt";
  std::ofstream(empty, std::ios::binary).close();
  const std::string shown = d.path + "/caf\\xe9.txt";
  std::string msg;
  try {
    load_text(empty);
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK(msg == "text file '" + shown + "' is empty");
  CHECK(is_utf8(msg));
  const std::string bad = d.path + "/bad\xE9\n.txt";
  std::ofstream(bad, std::ios::binary) << std::string("ok\xFF", 3);
  test::check_error([&] { load_text(bad); }, {d.path + "/bad\\xe9\\x0a.txt: invalid UTF-8 at byte offset 2"});
  test::check_error([&] { load_text(d.path + "/gone\xE9.txt"); },
                    {"text file '" + d.path + "/gone\\xe9.txt' does not exist"});
}

TEST_CASE("text: a text read from a pipe, or a file that is not a whole number of buffers, is read whole") {
  std::string big;
  for (int i = 0; big.size() < 300000; ++i) big += fmt::format("line {} — ∑ {}\r\n", i, i * i);
  const std::string p = write_file("big.txt", big);
  CHECK(load_text(p) == big);
  FILE* pipe = popen(fmt::format("cat '{}'", p).c_str(), "r");
  REQUIRE(pipe);
  const std::string via = load_text(fmt::format("/dev/fd/{}", fileno(pipe)));
  pclose(pipe);
  CHECK(via == big);
}

TEST_CASE("text: running out of memory is a TextMemoryError naming the file and its size") {
  const TextMemoryError named("/data/caf\xE9.txt", 314572800, "out of memory reading its bytes");
  CHECK(std::string(named.what()) ==
        "text file '/data/caf\\xe9.txt' (314572800 bytes) does not fit in memory: out of memory reading its bytes");
  CHECK(named.bytes() == 314572800);
  const TextMemoryError unnamed("", 12, "x");
  CHECK(std::string(unnamed.what()) == "the text (12 bytes) does not fit in memory: x");
  // What a check before loading counts: the bytes and an int64 id a byte.
  CHECK(text_memory_bytes(100000000) >= 9e8);
  CHECK(text_memory_bytes(100000000) < 1e9);
}
