// core/safetensors.h: named tensors in the safetensors format, the weights
// format of Hugging Face and of many PyTorch users
// (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON
//   {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//    ..., "__metadata__": {"key": "text", ...}}
// then the tensors' raw little-endian bytes, offsets relative to the end of
// the header. The JSON is parsed by nlohmann::json (Debian's
// nlohmann-json3-dev), not by hand.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/tensor.h"

namespace heed::safetensors {

// A tensor as the header describes it: its dtype as stored (F32, F64, I64,
// F16 or BF16), its shape and its bytes.
struct Entry {
  std::string dtype;
  Shape shape;
  uint64_t bytes = 0;
};

struct File {
  std::map<std::string, Tensor> tensors;  // (empty from header())
  std::map<std::string, std::string> metadata;
  std::map<std::string, Entry> entries;
};

// Writes F32, F64 and I64 tensors (any layout; stored contiguous), in name
// order, atomically (a temporary file beside path, renamed over it; through
// a symbolic link, beside and over the file it leads to). A directory,
// device, FIFO or socket at path is refused (files::replace_target), and so
// is an existing file that is not a safetensors file (a run's log, say); a
// tensor name that is not UTF-8 text is refused.
void save(const std::string& path, const std::map<std::string, Tensor>& tensors,
          const std::map<std::string, std::string>& metadata = {});

// Reads and validates everything, the header before any tensor's bytes: the
// header length lies inside the file, the header starts with '{' and is a
// JSON object with no key twice in an object, every dtype is known (F32,
// F64, I64; F16 and BF16 are widened to float32), shapes are non-negative
// with at most 12 dimensions and their byte counts equal the offsets' span,
// and the tensors' bytes tile the data exactly (no overlap, no gap, nothing
// after the last). A directory, device, FIFO or socket is refused. Each
// tensor is read straight into its storage. An error names the file and the
// tensor.
File load(const std::string& path);

// The metadata of a file, with the same checks as load but no tensor's bytes
// read (whose file it is, what it holds, before loading it).
std::map<std::string, std::string> metadata(const std::string& path);
// The header alone (metadata and entries), with the same checks as load but
// no tensor's bytes read (heed inspect).
File header(const std::string& path);

// Text from a file (a tensor name, a metadata value, a path) fit for an
// error message: control characters (a newline, a terminal escape), and
// every byte above 0x7f when the text is not UTF-8, written as \xNN.
std::string printable(const std::string& text);

}  // namespace heed::safetensors
