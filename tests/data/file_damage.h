// tests/data/file_damage.h: small checkpoints and the ways files get damaged
// (a flipped byte in a tensor's data or in HDF5's own structure, a
// 300-character name, a symlink loop), shared by the checkpoint, text and
// inspect tests.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include <doctest/doctest.h>

#include "core/tensor.h"
#include "data/checkpoint.h"
#include "test_util.h"

namespace heed::test {

// A TempDir (test_util.h) with the damaged names a test needs.
struct DamageDir : TempDir {
  using TempDir::TempDir;
  std::string file(const std::string& name) const { return path + "/" + name; }
  // A name of 300 characters: longer than a file name may be (ENAMETOOLONG).
  std::string long_name() const { return file(std::string(300, 'a') + ".h5"); }
  // loop1 -> loop2 -> loop1 (ELOOP); returns the path of loop1.
  std::string symlink_loop() const {
    std::error_code ec;
    std::filesystem::create_symlink(file("loop1"), file("loop2"), ec);
    std::filesystem::create_symlink(file("loop2"), file("loop1"), ec);
    return file("loop1");
  }
};

// Flips one byte (XOR 0x5a) at offset `at` within the first occurrence of
// `needle` in the file: the bytes of a tensor's data, or a link name inside
// an HDF5 object header (which HDF5 protects with a checksum).
inline void flip_byte_in(const std::string& path, const std::string& needle, size_t at = 0) {
  std::string all = slurp(path);
  size_t pos = all.find(needle);
  REQUIRE(pos != std::string::npos);
  REQUIRE(all.find(needle, pos + 1) == std::string::npos);  // the damage lands where meant
  all[pos + at] = static_cast<char>(all[pos + at] ^ 0x5a);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << all;
}

// The raw bytes of a contiguous tensor, as HDF5 stores them.
inline std::string tensor_bytes(const Tensor& t) {
  return std::string(static_cast<const char*>(t.raw_data()), static_cast<size_t>(t.numel()) * dtype_size(t.dtype()));
}

// A checkpoint in the sine experiment's layout, with distinct tensor values.
inline Checkpoint small_checkpoint() {
  Checkpoint ck;
  ck.experiment = "sine";
  ck.config.emplace("hidden", "8");  // (operator= of a literal trips GCC 12's -Wrestrict)
  ck.counters["step"] = 5;
  ck.tensors["model/l1.weight"] = det_tensor({8, 1}, 1);
  ck.tensors["model/l1.bias"] = det_tensor({8}, 2);
  ck.tensors["optim/step"] = Tensor::scalar(5.0, DType::i64);
  return ck;
}

}  // namespace heed::test
