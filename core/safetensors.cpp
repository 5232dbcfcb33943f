// core/safetensors.cpp
#include "core/safetensors.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "core/files.h"
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

}  // namespace

void save(const std::string& path, const std::map<std::string, Tensor>& tensors,
          const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  std::vector<Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty() || name == "__metadata__")
      fail("safetensors: cannot save a tensor named '{}' to '{}'", name, path);
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

File load(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    fail("safetensors: '{}' is a directory, expected a .safetensors file", path);
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (std::filesystem::is_character_file(st) || std::filesystem::is_block_file(st) || std::filesystem::is_socket(st))
    fail("safetensors: '{}' is a device or socket, expected a .safetensors file", path);  // /dev/zero never ends
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("safetensors: cannot read '{}': {}", path, std::strerror(errno));
  std::string bytes;
  try {  // a read error surfaces as the stream library's own exception
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  } catch (const std::exception& e) {
    fail("safetensors: cannot read '{}': {}", path, e.what());
  }
  if (bytes.size() < 8) fail("safetensors: '{}' has {} bytes, too short for a header length", path, bytes.size());
  if (bytes.compare(0, 8, "\x89HDF\r\n\x1a\n") == 0)  // HDF5's signature: a heed log or checkpoint
    fail("safetensors: '{}' is an HDF5 file (a heed log or checkpoint?), not a .safetensors file (heed export "
         "CHECKPOINT writes one)",
         path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[static_cast<size_t>(i)])) << (8 * i);
  if (n > bytes.size() - 8)
    fail("safetensors: '{}': the header length {} runs past the end of the file ({} bytes)", path, n, bytes.size());
  json header;
  try {
    header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  } catch (const json::exception& e) {
    fail("safetensors: '{}': the header is not valid JSON ({})", path, e.what());
  }
  if (!header.is_object()) fail("safetensors: '{}': the header is not a JSON object", path);
  const uint64_t data_size = bytes.size() - 8 - n;
  const char* data = bytes.data() + 8 + n;
  File out;
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) fail("safetensors: '{}': __metadata__ is not an object", path);
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (!m.value().is_string()) fail("safetensors: '{}': metadata '{}' is not text", path, m.key());
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) { fail("safetensors: '{}': tensor '{}': {}", path, name, what); };
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      bad("expected an object with dtype, shape and data_offsets");
    if (!e["dtype"].is_string()) bad("dtype is not text");
    const std::string code = e["dtype"].get<std::string>();
    size_t item = 0;
    if (code == "F32") item = 4;
    else if (code == "F64" || code == "I64") item = 8;
    else if (code == "F16" || code == "BF16") item = 2;
    else bad(fmt::format("dtype '{}' is not one heed reads (F32, F64, I64, F16, BF16)", code));
    Shape shape;
    if (!e["shape"].is_array()) bad("shape is not a list");
    uint64_t numel = 1;
    for (const json& d : e["shape"]) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0))
        // Not e["shape"].dump(): a shape nested 100000 lists deep overflowed
        // the stack of the JSON library's recursive printer.
        bad(fmt::format("shape holds a value that is not a size (an integer >= 0) but a JSON {}", d.type_name()));
      const uint64_t v = d.get<uint64_t>();
      if (v > (uint64_t{1} << 40) || (v && numel > (uint64_t{1} << 62) / v)) bad("shape is too large");
      numel *= v;
      shape.push_back(static_cast<int64_t>(v));
    }
    if (numel > (uint64_t{1} << 62) / item) bad("shape is too large");  // numel * item would wrap to a small number
    const json& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      bad("data_offsets is not a pair of byte offsets");
    const uint64_t b = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (b > end || end > data_size)
      bad(fmt::format("data_offsets [{}, {}] lie outside the {} bytes of data", b, end, data_size));
    if (end - b != numel * item)
      bad(fmt::format("shape {} of {} needs {} bytes, data_offsets [{}, {}] give {}", e["shape"].dump(), code,
                      numel * item, b, end, end - b));
    spans.emplace_back(b, end);
    DType dt = code == "F64" ? DType::f64 : code == "I64" ? DType::i64 : DType::f32;
    Tensor t = Tensor::empty(shape, dt);
    if (item == 2) {
      float* p = t.data<float>();
      for (uint64_t i = 0; i < numel; ++i) {
        uint16_t h;
        std::memcpy(&h, data + b + 2 * i, 2);
        p[i] = code == "F16" ? half_to_float(h) : bf16_to_float(h);
      }
    } else if (numel) {
      std::memcpy(t.raw_data(), data + b, numel * item);
    }
    out.tensors[name] = t;
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second)
      fail("safetensors: '{}': two tensors' data overlap (bytes {}..{} and {}..{})", path, spans[i - 1].first,
           spans[i - 1].second, spans[i].first, spans[i].second);
  return out;
}

}  // namespace heed::safetensors
