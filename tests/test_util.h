// tests/test_util.h: small helpers shared by the tests.
#pragma once

#include <doctest/doctest.h>

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include "core/kernels.h"  // the tests also check kernels directly
#include "heed.h"

namespace heed::test {

// Deterministic values in [lo, hi) (xorshift; independent of heed's RNG so a
// bug there cannot hide a bug here).
inline std::vector<double> det_values(int64_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::vector<double> v(static_cast<size_t>(n));
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  for (auto& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = lo + (hi - lo) * static_cast<double>(s % 1000003) / 1000003.0;
  }
  return v;
}

inline Tensor det_tensor(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0,
                         DType dtype = DType::f32) {
  Tensor t = Tensor::from_f64(det_values(shape_numel(shape), seed, lo, hi), shape);
  return kernel::to_dtype(t, dtype);
}

// max |a|, and max |a - b| over same-sized tensors (any layout, any dtype).
inline double max_abs(const Tensor& a) {
  double m = 0;
  for (double v : a.to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}
inline double max_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  REQUIRE(x.size() == y.size());
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

// How many 4-byte words of a and b (same shape and dtype, any layout)
// differ: 0 when they hold the same bits.
inline int bits_differ(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  REQUIRE(a.dtype() == b.dtype());
  const Tensor ac = kernel::contiguous(a), bc = kernel::contiguous(b);
  const size_t n = static_cast<size_t>(ac.numel()) * dtype_size(a.dtype());  // 4 or 8 bytes an element
  const auto* pa = static_cast<const unsigned char*>(ac.raw_data());
  const auto* pb = static_cast<const unsigned char*>(bc.raw_data());
  int bad = 0;
  for (size_t i = 0; i < n; i += 4) bad += std::memcmp(pa + i, pb + i, 4) != 0;
  return bad;
}

// Whether a and b hold the same bits: same dtype and shape, and every
// element bit for bit (any layout). False, not a failed REQUIRE, when they
// differ in shape or dtype.
inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && bits_differ(a, b) == 0;
}

// Whether text contains part.
inline bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Elementwise |a - b| <= tol, with a message listing the first mismatch.
inline void check_close(const Tensor& a, const std::vector<double>& expect, double tol) {
  auto v = a.to_vector<double>();
  REQUIRE(v.size() == expect.size());
  for (size_t i = 0; i < v.size(); ++i) {
    INFO("element " << i << ": got " << v[i] << " expected " << expect[i]);
    CHECK(std::abs(v[i] - expect[i]) <= tol);
  }
}

// Expects fn to throw heed::Error whose message contains every fragment.
template <class F>
void check_error(F&& fn, const std::vector<std::string>& fragments) {
  std::string msg;
  try {
    fn();
  } catch (const heed::Error& e) {
    msg = e.what();
  }
  INFO("message: " << msg);
  REQUIRE(!msg.empty());
  for (const auto& f : fragments) {
    INFO("expected fragment: " << f);
    CHECK(msg.find(f) != std::string::npos);
  }
}

// A fresh directory under the system's temporary one, removed with its
// contents at the end of the scope.
struct TempDir {
  std::string path;
  explicit TempDir(const std::string& prefix) {
    namespace fs = std::filesystem;
    path = (fs::temp_directory_path() / (prefix + std::to_string(getpid()))).string();
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

// This test process's own directory under the system's temporary one:
// created on first use and removed with its contents when the process ends
// (files a test reopens after its scope live here, and no run of the suite
// leaves anything behind). A child made by fork() that exits leaves it alone.
inline const std::string& scratch_dir() {
  struct Root {
    pid_t owner = getpid();
    std::string path;
    Root() {
      path = (std::filesystem::temp_directory_path() / ("heed-tests-" + std::to_string(owner))).string();
      std::filesystem::create_directories(path);
    }
    ~Root() {
      std::error_code ec;
      if (getpid() == owner) std::filesystem::remove_all(path, ec);
    }
  };
  static const Root root;
  return root.path;
}

// A path for name in scratch_dir().
inline std::string temp_path(const std::string& name) { return scratch_dir() + "/" + name; }

// A file's bytes ("" when it cannot be read). One read, not a character at
// a time: the tests are built at -O0 (tests/CMakeLists.txt).
inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return {};
  std::string bytes(static_cast<size_t>(std::max<std::streamoff>(0, f.tellg())), '\0');
  f.seekg(0);
  if (!f.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) return {};
  return bytes;
}

// Every file under dir with its bytes (to check that a refused command
// changed none).
inline std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> m;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file(ec)) m[e.path().string()] = slurp(e.path().string());
  return m;
}

// The float32 product precision for one scope, put back after it.
struct PrecisionScope {
  Precision before = precision();
  explicit PrecisionScope(Precision p) { set_precision(p); }
  ~PrecisionScope() { set_precision(before); }
};

// The thread count as it was before the scope, put back after it.
struct ThreadScope {
  int before = num_threads();
  ~ThreadScope() { set_num_threads(before); }
};

// libgomp's thread count as it was before the scope, put back after it (for
// tests that call omp_set_num_threads themselves).
struct OmpThreadScope {
  int before = omp_get_max_threads();
  ~OmpThreadScope() { omp_set_num_threads(before); }
};

// The last value of a metric in a run log (rows of step, value, wall time).
inline double last_value(const std::string& log, const std::string& metric) {
  std::vector<double> rows = h5::File(log, h5::File::Mode::read).read_tensor("metrics/" + metric).to_vector<double>();
  REQUIRE(rows.size() >= 3);
  return rows[rows.size() - 2];
}

// Whether this CPU runs bf16 natively (else set_precision(bf16) throws).
inline bool bf16_here() { return bf16_unsupported_reason().empty(); }

// heed's kernels at one instruction set while it lives (oneDNN's untouched).
struct KernelIsa {
  CpuIsa before = heed::cpu_isa();
  explicit KernelIsa(CpuIsa isa) { kernel::set_kernel_isa(isa); }
  ~KernelIsa() { kernel::set_kernel_isa(before); }
  KernelIsa(const KernelIsa&) = delete;
  KernelIsa& operator=(const KernelIsa&) = delete;
};

}  // namespace heed::test
