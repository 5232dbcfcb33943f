// data/text.cpp
#include "data/text.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <new>

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <csignal>

#include "core/dist.h"
#include "core/error.h"
#include "core/kernels.h"
#include "core/safetensors.h"
#include "data/run.h"

namespace heed::data {

namespace {

// The UTF-8 sequence at p[i] (i < n): its length, with its code point in
// *cp; or 0 with the offset of the byte that breaks it in *bad_at.
size_t utf8_sequence(const unsigned char* p, size_t n, size_t i, uint32_t* cp, size_t* bad_at) {
  const unsigned char c = p[i];
  size_t len;
  if (c < 0x80) { *cp = c; return 1; }
  else if ((c & 0xE0) == 0xC0) { *cp = c & 0x1F; len = 2; }
  else if ((c & 0xF0) == 0xE0) { *cp = c & 0x0F; len = 3; }
  else if ((c & 0xF8) == 0xF0) { *cp = c & 0x07; len = 4; }
  else { *bad_at = i; return 0; }
  if (i + len > n) { *bad_at = i; return 0; }
  for (size_t k = 1; k < len; ++k) {
    const unsigned char cc = p[i + k];
    if ((cc & 0xC0) != 0x80) { *bad_at = i + k; return 0; }
    *cp = (*cp << 6) | (cc & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
  if ((len == 2 && *cp < 0x80) || (len == 3 && *cp < 0x800) || (len == 4 && *cp < 0x10000) || *cp > 0x10FFFF ||
      (*cp >= 0xD800 && *cp <= 0xDFFF)) {
    *bad_at = i;
    return 0;
  }
  return len;
}

// Calls f(code point) for each character of s, in order, without a copy of
// s in any other form; invalid UTF-8 is an error naming source and the byte
// offset.
template <class F>
void for_each_code_point(const std::string& s, const std::string& source, F&& f) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {  // ASCII, most of most texts
      f(static_cast<uint32_t>(p[i]));
      ++i;
      continue;
    }
    uint32_t cp = 0;
    size_t bad_at = 0;
    const size_t len = utf8_sequence(p, n, i, &cp, &bad_at);
    if (len == 0)
      fail("{}: invalid UTF-8 at byte offset {} (byte 0x{:02x}); heed reads text as UTF-8", source, bad_at,
           static_cast<unsigned>(p[bad_at]));
    f(cp);
    i += len;
  }
}

// The characters of UTF-8 text: its bytes that do not continue a sequence
// (for text that is not UTF-8, at least as many as decode before the error).
size_t count_code_points(const std::string& s) {
  size_t n = 0;
  for (const char ch : s) n += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;
  return n;
}

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / double(int64_t{1} << 30)); }

}  // namespace

TextMemoryError::TextMemoryError(const std::string& path, int64_t bytes, const std::string& detail)
    : Error(fmt::format("{} ({} bytes) does not fit in memory: {}",
                        path.empty() ? std::string("the text") : fmt::format("text file '{}'", safetensors::printable(path)),
                        bytes, detail)),
      path_(path),
      bytes_(bytes),
      detail_(detail) {}

double text_memory_bytes(int64_t bytes) {
  // The text, one int64 token id per character (at most one a byte) and the
  // tokenizer's tables (a code point's id, dense up to U+10FFFF at most).
  return 9.0 * static_cast<double>(bytes) + double(int64_t{10} << 20);
}

std::vector<uint32_t> decode_utf8(const std::string& s, const std::string& source) {
  std::vector<uint32_t> out;
  out.reserve(count_code_points(s));
  for_each_code_point(s, source, [&](uint32_t cp) { out.push_back(cp); });
  return out;
}

std::string escape_invalid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  std::string out;
  for (size_t i = 0; i < n;) {
    uint32_t cp = 0;
    size_t bad_at = 0;
    const size_t len = utf8_sequence(p, n, i, &cp, &bad_at);
    if (len > 0) {
      out.append(s, i, len);
      i += len;
    } else {  // this byte alone; the next may begin a valid sequence
      out += fmt::format("\\x{:02X}", static_cast<unsigned>(p[i]));
      ++i;
    }
  }
  return out;
}

bool is_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  uint32_t cp = 0;
  size_t bad_at = 0;
  for (size_t i = 0, len = 0; i < s.size(); i += len)
    if ((len = utf8_sequence(p, s.size(), i, &cp, &bad_at)) == 0) return false;
  return true;
}

uint64_t text_fingerprint(const std::string& bytes) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a's offset basis and prime
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string encode_utf8(const std::vector<uint32_t>& cps) {
  std::string s;
  for (uint32_t cp : cps) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return s;
}

namespace {

// A pipe's bytes up to its end: a named pipe (mkfifo) or one of the shell's
// (--text <(zcat corpus.gz)). A named pipe's open waited, without a word,
// for a writer that might never come, and a run's Ctrl-C or SIGTERM, which
// lets the start finish, could not end it (one `timeout` sent was lost).
// Opened without waiting, it is read as its writers write; while nothing
// comes, every 0.2 s a stop signal is looked for (pending_stop_signal: the
// program ends with 130 or 143, saying so), and after 2 s the wait is said.
std::string load_pipe(const std::string& path, const std::string& shown) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail("cannot read text file '{}': {}", shown, std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } const closer{fd};
  std::string s;
  char buf[1 << 16];
  const auto start = std::chrono::steady_clock::now();
  bool said = false;
  try {
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      const int ready = ::poll(&p, 1, 200);
      if (ready < 0 && errno != EINTR) fail("cannot read text file '{}': {}", shown, std::strerror(errno));
      if (ready > 0) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n > 0) {
          s.append(buf, static_cast<size_t>(n));
          continue;
        }
        if (n == 0) break;  // every writer has closed it (poll: a writer came)
        if (errno != EAGAIN && errno != EINTR) fail("cannot read text file '{}': {}", shown, std::strerror(errno));
        continue;
      }
      if (const int sig = pending_stop_signal())
        throw Stopped(fmt::format("stopped by {} while waiting for the pipe '{}' to be written: nothing was trained "
                                  "or written",
                                  sig == SIGTERM ? "SIGTERM" : "Ctrl-C", shown),
                      sig);
      if (!said && std::chrono::steady_clock::now() - start > std::chrono::seconds(2)) {
        fmt::print("waiting for the pipe '{}' to be written ({} bytes so far; Ctrl-C stops)\n", shown, s.size());
        std::fflush(stdout);
        said = true;
      }
    }
  } catch (const std::bad_alloc&) {
    throw TextMemoryError(path, static_cast<int64_t>(s.size()),
                          "out of memory reading its bytes (a pipe: the bytes read so far)");
  }
  if (s.empty()) fail("text file '{}' is empty", shown);
  for_each_code_point(s, shown, [](uint32_t) {});  // validates, naming the offset
  return s;
}

}  // namespace

std::string load_text(const std::string& path) {
  namespace fs = std::filesystem;
  // The path as messages show it: a byte that is not UTF-8, or a control
  // character, as \xNN.
  const std::string shown = safetensors::printable(path);
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) fail("text file '{}' does not exist", shown);
  if (ec) fail("text file '{}' cannot be read: {}", shown, ec.message());
  if (fs::is_directory(st)) fail("'{}' is a directory, expected a text file", shown);
  // A device never ends (/dev/zero, /dev/urandom); a pipe does: --text <(zcat corpus.gz).
  if (fs::is_character_file(st) || fs::is_block_file(st) || fs::is_socket(st))
    fail("'{}' is a device or socket, expected a text file (or a pipe)", shown);
  if (fs::is_fifo(st)) return load_pipe(path, shown);
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> in(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!in) fail("cannot read text file '{}'", shown);
  // Read straight into the string: a regular file's size is known (it may
  // still grow or shrink as it is read); a pipe's grows as it comes.
  std::string s;
  const bool regular = fs::is_regular_file(st);
  const uintmax_t size = regular ? fs::file_size(path, ec) : 0;
  try {
    if (!ec && size > 0) {
      s.resize(static_cast<size_t>(size));
      s.resize(std::fread(s.data(), 1, s.size(), in.get()));
    }
    char buf[1 << 16];  // the rest: a pipe's bytes, or what the file grew by
    for (size_t got; (got = std::fread(buf, 1, sizeof buf, in.get())) > 0;) s.append(buf, got);
  } catch (const std::bad_alloc&) {
    if (regular) throw TextMemoryError(path, static_cast<int64_t>(size), "out of memory reading its bytes");
    throw TextMemoryError(path, static_cast<int64_t>(s.size()),
                          "out of memory reading its bytes (a pipe: the bytes read so far)");
  }
  if (std::ferror(in.get())) fail("cannot read text file '{}': {}", shown, std::strerror(errno));
  if (s.empty()) fail("text file '{}' is empty", shown);
  for_each_code_point(s, shown, [](uint32_t) {});  // validates, naming the offset
  return s;
}

std::string kjv_text(const std::string& cache_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(cache_path, ec);
  if (ec && st.type() != fs::file_type::not_found)
    fail("the corpus cache '{}' cannot be read: {}", cache_path, ec.message());
  if (fs::exists(st) && (fs::is_directory(st) || fs::file_size(cache_path, ec) > 0)) return load_text(cache_path);
  FILE* pipe = popen("bible \"gen1:1-rev22:21\" 2>/dev/null", "r");
  if (!pipe) fail("cannot run 'bible' (install the bible-kjv package, or pass --text FILE)");
  std::string s;
  char buf[1 << 16];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, pipe)) > 0) s.append(buf, got);
  int rc = pclose(pipe);
  if (rc != 0 || s.size() < 1000000)
    fail("'bible \"gen1:1-rev22:21\"' failed or printed too little ({} bytes); install the bible-kjv package "
         "(./heed does) or pass --text FILE",
         s.size());
  // The cache is written by one process of a data-parallel job (the others
  // have the same text from 'bible'), through a name of this process's own:
  // with one shared ".tmp", a second writer (another rank, or another run
  // started at the same moment) found it already moved and failed.
  if (!dist::is_main()) return s;
  const fs::path dir = fs::path(cache_path).parent_path();
  if (!dir.empty() && !fs::create_directories(dir, ec) && ec)
    fail("cannot create directory '{}' for the corpus cache '{}': {}", dir.string(), cache_path, ec.message());
  const std::string tmp = fmt::format("{}.tmp.{}", cache_path, static_cast<long>(getpid()));
  {
    std::ofstream out(tmp, std::ios::binary);
    out << s;
    if (!out.flush()) {
      out.close();
      std::error_code ignored;
      fs::remove(tmp, ignored);
      fail("cannot write the corpus cache '{}'", tmp);
    }
  }
  fs::rename(tmp, cache_path, ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    fail("cannot move '{}' to the corpus cache '{}': {}", tmp, cache_path, ec.message());
  }
  return s;
}

CharTokenizer CharTokenizer::from_text(const std::string& text) {
  // One pass marking the code points present (no copy of the text in any
  // other form), then the vocabulary in code-point order.
  std::vector<bool> seen(0x110000, false);
  for_each_code_point(text, "text", [&](uint32_t cp) { seen[cp] = true; });
  CharTokenizer t;
  for (uint32_t cp = 0; cp < 0x110000; ++cp)
    if (seen[cp]) t.chars_.push_back(cp);
  const uint32_t top = t.chars_.empty() ? 0 : t.chars_.back();
  t.lookup_.assign(static_cast<size_t>(top) + 1, -1);
  for (size_t i = 0; i < t.chars_.size(); ++i) t.lookup_[t.chars_[i]] = static_cast<int64_t>(i);
  return t;
}

CharTokenizer CharTokenizer::from_tensor(const Tensor& codepoints) {
  check_dtype(codepoints, DType::i64, "CharTokenizer::from_tensor");
  std::vector<int64_t> v = codepoints.to_vector<int64_t>();
  std::vector<uint32_t> cps;
  for (int64_t x : v) {
    if (x < 0 || x > 0x10FFFF) fail("CharTokenizer: {} is not a Unicode code point", x);
    if (!cps.empty() && static_cast<uint32_t>(x) <= cps.back())
      fail("CharTokenizer: saved vocabulary is not sorted and distinct at code point {}", x);
    cps.push_back(static_cast<uint32_t>(x));
  }
  return from_text(encode_utf8(cps));
}

Tensor CharTokenizer::to_tensor() const {
  std::vector<int64_t> v(chars_.begin(), chars_.end());
  return Tensor::from_i64(v, {static_cast<int64_t>(v.size())});
}

void CharTokenizer::encode_into(const std::string& text, int64_t* out, size_t capacity) const {
  size_t i = 0;
  for_each_code_point(text, "text", [&](uint32_t cp) {
    const int64_t id = cp < lookup_.size() ? lookup_[cp] : -1;
    if (id < 0) [[unlikely]] {
      // Invalid UTF-8 anywhere in the text is reported first, as before.
      for_each_code_point(text, "text", [](uint32_t) {});
      // A control character is named by its code point alone: printed, it
      // would break the message's line (a newline) or the terminal.
      const bool control = cp < 0x20 || (cp >= 0x7f && cp <= 0x9f);
      fail("CharTokenizer: {}(U+{:04X}) at position {} is not in the vocabulary of {} characters",
           control ? std::string("control character ") : fmt::format("character '{}' ", encode_utf8({cp})), cp, i,
           chars_.size());
    }
    if (i < capacity) out[i] = id;
    ++i;
  });
}

std::vector<int64_t> CharTokenizer::encode(const std::string& text) const {
  std::vector<int64_t> ids(count_code_points(text));
  encode_into(text, ids.data(), ids.size());
  return ids;
}

Tensor CharTokenizer::encode_tensor(const std::string& text) const {
  const size_t n = count_code_points(text);
  Tensor ids;
  try {
    ids = Tensor::empty({static_cast<int64_t>(n)}, DType::i64);
  } catch (const Error& e) {  // out of memory (the allocator's message says how much)
    throw TextMemoryError("", static_cast<int64_t>(text.size()),
                          fmt::format("its {} characters' token ids take {} ({} bytes): {}", n,
                                      gib(static_cast<double>(n) * 8), n * 8, e.what()));
  }
  encode_into(text, ids.data<int64_t>(), n);
  return ids;
}

std::string CharTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<uint32_t> cps;
  cps.reserve(ids.size());
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size()) fail("CharTokenizer: id {} out of range (expected 0..{})", id, vocab_size() - 1);
    cps.push_back(chars_[static_cast<size_t>(id)]);
  }
  return encode_utf8(cps);
}

TextSplit split_tokens(const Tensor& ids, double train_fraction) {
  if (!(train_fraction > 0 && train_fraction < 1)) fail("split_tokens: fraction {} must be in (0, 1)", train_fraction);
  check_dtype(ids, DType::i64, "split_tokens");
  if (ids.dim() != 1) fail("split_tokens: the ids have shape {}, expected one dimension", shape_str(ids.shape()));
  const Tensor all = ids.is_contiguous() ? ids : kernel::clone(ids);
  const int64_t n = all.numel();
  const int64_t ntrain = static_cast<int64_t>(static_cast<double>(n) * train_fraction);
  // Views of the one stream, not copies: a corpus of N characters is held
  // once, as 8 N bytes of ids.
  TextSplit s;
  s.train = Tensor::view_of(all, {ntrain}, {1}, all.offset());
  s.val = Tensor::view_of(all, {n - ntrain}, {1}, all.offset() + ntrain);
  return s;
}

TextSplit split_tokens(const std::vector<int64_t>& ids, double train_fraction) {
  if (!(train_fraction > 0 && train_fraction < 1)) fail("split_tokens: fraction {} must be in (0, 1)", train_fraction);
  return split_tokens(Tensor::from_i64(ids, {static_cast<int64_t>(ids.size())}), train_fraction);
}

void random_windows(const Tensor& stream, int64_t B, int64_t T, Generator& g, Tensor& x, Tensor& y) {
  check_dtype(stream, DType::i64, "random_windows");
  const int64_t n = stream.numel();
  if (B < 1 || T < 1) fail("random_windows: batch {} and context {} must be positive", B, T);
  if (n < T + 1)
    fail("random_windows: the text has {} tokens, fewer than one context window of {} + 1 (use a longer text or a "
         "shorter --context)",
         n, T);
  x = Tensor::empty({B, T}, DType::i64);
  y = Tensor::empty({B, T}, DType::i64);
  const int64_t* s = stream.data<int64_t>();
  int64_t* px = x.data<int64_t>();
  int64_t* py = y.data<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    int64_t start = g.randint(0, n - T);  // the window [start, start + T] fits
    std::copy(s + start, s + start + T, px + b * T);
    std::copy(s + start + 1, s + start + T + 1, py + b * T);
  }
}

}  // namespace heed::data
