// core/safetensors.cpp
#include "core/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/files.h"
#include "core/iter.h"
#include "core/kernels.h"

namespace heed::safetensors {

namespace {

using json = nlohmann::json;

const char* dtype_code(DType d) {
  switch (d) {
    case DType::f32: return "F32";
    case DType::f64: return "F64";
    case DType::i64: return "I64";
  }
  return "?";
}

// IEEE half and bfloat16 bits -> float.
float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      uint32_t m = mant;
      do {
        ++e;
        m <<= 1;
      } while (!(m & 0x400u));
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((m & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Whether text is valid UTF-8 (what JSON strings hold).
bool valid_utf8(const std::string& text) {
  try {
    (void)json(text).dump();  // the strict handler throws on a byte sequence that is not UTF-8
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

}  // namespace

// A raw 0xff byte would reach the terminal as it is.
std::string printable(const std::string& text) {
  const bool utf8 = valid_utf8(text);
  std::string out;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f || (c >= 0x80 && !utf8)) out += fmt::format("\\x{:02x}", c);
    else out += ch;
  }
  return out;
}

namespace {

// An existing file at target is replaced only when it is a safetensors file
// (an 8-byte length, then '{') or empty: a run's log or checkpoint, or any
// other file, named by mistake stays as it is.
void refuse_replacing_other(const std::string& target, const std::string& path) {
  std::FILE* f = std::fopen(target.c_str(), "rb");
  if (!f) return;  // nothing there (or unreadable: the write reports it)
  unsigned char head[9];
  const size_t got = std::fread(head, 1, sizeof head, f);
  std::fclose(f);
  if (got == 0) return;
  if (got >= 8 && std::memcmp(head, "\x89HDF\r\n\x1a\n", 8) == 0)
    fail("safetensors: will not write '{}': an HDF5 file is there (a heed log or checkpoint?), not a .safetensors file "
         "this would replace; choose another name",
         path);
  if (got < 9 || head[8] != '{')
    fail("safetensors: will not write '{}': a file that is not a .safetensors file is there, which this would "
         "replace; choose another name (or remove it)",
         path);
}

}  // namespace

void save(const std::string& path, const std::map<std::string, Tensor>& tensors,
          const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  std::vector<Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__")
      fail("safetensors: cannot save a tensor named '{}' to '{}'", name, path);
    // JSON keys are UTF-8: written with U+FFFD for a bad byte, two names
    // could become one key, and a tensor would be lost.
    if (!valid_utf8(name))
      fail("safetensors: cannot save the tensor named '{}' to '{}': its name is not UTF-8 text, as the format's "
           "JSON header needs",
           printable(name), path);
    check_defined(t, "safetensors::save");
    Tensor c = kernel::contiguous(t);
    const uint64_t bytes = static_cast<uint64_t>(c.numel()) * dtype_size(c.dtype());
    header[name] = {{"dtype", dtype_code(c.dtype())}, {"shape", c.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    data.push_back(c);
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  // JSON is UTF-8: a byte that is not (a Latin-1 file name in a run's
  // configuration) is written as U+FFFD instead of failing the export.
  std::string text = header.dump(-1, ' ', false, json::error_handler_t::replace);
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  const uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));

  const std::string target = files::replace_target(path, "safetensors");
  refuse_replacing_other(target, path);
  const std::string tmp = files::temporary_beside(target, ".tmp", "safetensors");
  std::FILE* f = std::fopen(tmp.c_str(), "wbx");  // x: a new file, never through a link made meanwhile
  if (!f) fail("safetensors: cannot write '{}': {}", path, std::strerror(errno));
  bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  for (const Tensor& t : data) {
    const size_t bytes = static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
    ok = ok && (bytes == 0 || std::fwrite(t.raw_data(), 1, bytes, f) == bytes);  // x86-64: already little-endian
  }
  ok = std::fflush(f) == 0 && ok;
  ok = ::fsync(fileno(f)) == 0 && ok;  // on disk before it replaces the old file, as checkpoints are
  ok = std::fclose(f) == 0 && ok;
  if (ok) files::keep_mode(tmp, target);
  if (!ok || std::rename(tmp.c_str(), target.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    fail("safetensors: cannot write '{}': {}", path, why);
  }
}

namespace {

// load, or with with_data false only the header: every entry checked, no
// tensor's bytes read (metadata()).
File read(const std::string& path, bool with_data) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (std::filesystem::is_directory(st)) fail("safetensors: '{}' is a directory, expected a .safetensors file", path);
  if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    // /dev/zero never ends, and a FIFO waits for a writer that may never come.
    fail("safetensors: '{}' is a {}, expected a .safetensors file", path,
         std::filesystem::is_fifo(st) ? "FIFO" : std::filesystem::is_socket(st) ? "socket" : "device");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("safetensors: cannot read '{}': {}", path, std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info;
  if (::fstat(fd, &info) != 0) fail("safetensors: cannot read '{}': {}", path, std::strerror(errno));
  if (!S_ISREG(info.st_mode)) fail("safetensors: '{}' is not a regular file, expected a .safetensors file", path);
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  // Exactly `count` bytes at `at`, or an error naming what was being read.
  auto read_at = [&](void* to, uint64_t count, uint64_t at, const char* what) {
    auto* p = static_cast<char*>(to);
    while (count > 0) {
      const ssize_t got = ::pread(fd, p, std::min<uint64_t>(count, uint64_t{1} << 30), static_cast<off_t>(at));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) fail("safetensors: cannot read {} of '{}': {}", what, path, std::strerror(errno));
      if (got == 0) fail("safetensors: '{}' ended while reading {} (the file shrank while being read?)", path, what);
      p += got;
      at += static_cast<uint64_t>(got);
      count -= static_cast<uint64_t>(got);
    }
  };
  if (size < 8) fail("safetensors: '{}' has {} bytes, too short for a header length", path, size);
  unsigned char head[8];
  read_at(head, 8, 0, "the header length");
  if (std::memcmp(head, "\x89HDF\r\n\x1a\n", 8) == 0)  // HDF5's signature: a heed log or checkpoint
    fail("safetensors: '{}' is an HDF5 file (a heed log or checkpoint?), not a .safetensors file (heed export "
         "CHECKPOINT writes one)",
         path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(head[i]) << (8 * i);
  // Checked against the file's size before anything else is read: a file of
  // any size that is not a safetensors file is refused at once.
  if (n > size - 8)
    fail("safetensors: '{}': the header length {} runs past the end of the file ({} bytes)", path, n, size);
  std::string text(n, '\0');
  read_at(text.data(), n, 8, "the header");
  // The format's header starts with '{' (no byte-order mark, no blanks);
  // blanks may pad its end, to align the data.
  if (n == 0 || text[0] != '{')
    fail("safetensors: '{}': the header does not start with '{{' ({}), as a safetensors header does", path,
         n == 0 ? std::string("it is empty") : fmt::format("its first byte is 0x{:02x}", static_cast<unsigned char>(text[0])));
  json header;
  std::string duplicate;
  try {
    // JSON allows a key twice in an object and the parser keeps the last:
    // two entries for one tensor would make the file mean different things
    // to different readers, so a repeated key is refused.
    std::vector<std::set<std::string>> keys;
    header = json::parse(text, [&](int, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::object_start) keys.emplace_back();
      else if (event == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
      else if (event == json::parse_event_t::key && !keys.empty() && !keys.back().insert(parsed.get<std::string>()).second &&
               duplicate.empty())
        duplicate = parsed.get<std::string>();
      return true;
    });
  } catch (const json::exception& e) {
    fail("safetensors: '{}': the header is not valid JSON ({})", path, printable(e.what()));
  }
  if (!duplicate.empty())
    fail("safetensors: '{}': the header holds the key '{}' more than once in one object", path, printable(duplicate));
  if (!header.is_object()) fail("safetensors: '{}': the header is not a JSON object", path);
  const uint64_t data_size = size - 8 - n, data_at = 8 + n;

  // Every entry checked before any tensor's bytes are read.
  struct Entry {
    std::string name, code;
    Shape shape;
    uint64_t begin, end, numel;
  };
  File out;
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) fail("safetensors: '{}': __metadata__ is not an object", path);
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (!m.value().is_string()) fail("safetensors: '{}': metadata '{}' is not text", path, printable(m.key()));
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) { fail("safetensors: '{}': tensor '{}': {}", path, printable(name), what); };
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      bad("expected an object with dtype, shape and data_offsets");
    if (!e["dtype"].is_string()) bad("dtype is not text");
    const std::string code = e["dtype"].get<std::string>();
    size_t item = 0;
    if (code == "F32") item = 4;
    else if (code == "F64" || code == "I64") item = 8;
    else if (code == "F16" || code == "BF16") item = 2;
    else bad(fmt::format("dtype '{}' is not one heed reads (F32, F64, I64, F16, BF16)", printable(code)));
    Shape shape;
    if (!e["shape"].is_array()) bad("shape is not a list");
    if (e["shape"].size() > static_cast<size_t>(kernel::detail::kMaxDims))
      bad(fmt::format("shape has {} dimensions, more than heed's limit of {}", e["shape"].size(), kernel::detail::kMaxDims));
    // The product of the sizes other than 0 stays countable: a tensor of
    // no elements is still one heed can lay out.
    uint64_t numel = 1, span = 1;
    for (const json& d : e["shape"]) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
        // Not e["shape"].dump(): a shape nested 100000 lists deep overflowed
        // the stack of the JSON library's recursive printer.
        bad(fmt::format("shape holds a value that is not a size (an integer >= 0) but a JSON {}", d.type_name()));
      const uint64_t v = d.get<uint64_t>();
      if (v > (uint64_t{1} << 40) || (v && span > (uint64_t{1} << 62) / v)) bad("shape is too large");
      numel *= v;
      if (v) span *= v;
      shape.push_back(static_cast<int64_t>(v));
    }
    if (span > (uint64_t{1} << 62) / item) bad("shape is too large");  // numel * item would wrap to a small number
    const json& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      bad("data_offsets is not a pair of byte offsets");
    const uint64_t b = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (b > end || end > data_size)
      bad(fmt::format("data_offsets [{}, {}] lie outside the {} bytes of data", b, end, data_size));
    if (end - b != numel * item)
      bad(fmt::format("shape {} of {} needs {} bytes, data_offsets [{}, {}] give {}", shape_str(shape), code,
                      numel * item, b, end, end - b));
    out.entries[name] = {code, shape, end - b};
    entries.push_back({name, code, std::move(shape), b, end, numel});
  }
  // The tensors' bytes tile the data exactly, as the format requires: an
  // overlap, a gap or bytes after the last tensor mean a damaged or
  // mis-assembled file.
  std::vector<const Entry*> order;
  for (const Entry& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(),
            [](const Entry* a, const Entry* b) { return std::tie(a->begin, a->end) < std::tie(b->begin, b->end); });
  uint64_t covered = 0;
  const Entry* last = nullptr;
  for (const Entry* e : order) {
    if (e->begin < covered)
      fail("safetensors: '{}': the data of tensors '{}' (bytes {}..{}) and '{}' (bytes {}..{}) overlap", path,
           printable(last->name), last->begin, last->end, printable(e->name), e->begin, e->end);
    if (e->begin > covered)
      fail("safetensors: '{}': bytes {}..{} of the data belong to no tensor (before '{}'): a damaged file?", path,
           covered, e->begin, printable(e->name));
    covered = e->end;
    last = e;
  }
  if (covered != data_size)
    fail("safetensors: '{}': {} bytes after the last tensor's data belong to no tensor (the file has {} bytes of "
         "data, the tensors {}): a damaged file?",
         path, data_size - covered, data_size, covered);

  if (!with_data) return out;
  for (const Entry& e : entries) {
    const DType dt = e.code == "F64" ? DType::f64 : e.code == "I64" ? DType::i64 : DType::f32;
    Tensor t;
    try {
      t = Tensor::empty(e.shape, dt);
    } catch (const Error& err) {
      fail("safetensors: '{}': tensor '{}': {}", path, printable(e.name), err.what());
    }
    const std::string what = fmt::format("tensor '{}'", printable(e.name));
    if (e.code == "F16" || e.code == "BF16") {
      std::vector<uint16_t> half(static_cast<size_t>(e.numel));
      read_at(half.data(), e.end - e.begin, data_at + e.begin, what.c_str());
      float* p = t.data<float>();
      for (uint64_t i = 0; i < e.numel; ++i) p[i] = e.code == "F16" ? half_to_float(half[i]) : bf16_to_float(half[i]);
    } else {
      read_at(t.raw_data(), e.end - e.begin, data_at + e.begin, what.c_str());  // x86-64: already little-endian
    }
    out.tensors[e.name] = t;
  }
  return out;
}

}  // namespace

File load(const std::string& path) { return read(path, true); }

std::map<std::string, std::string> metadata(const std::string& path) { return read(path, false).metadata; }
File header(const std::string& path) { return read(path, false); }

}  // namespace heed::safetensors
