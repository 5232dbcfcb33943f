// tests/core/test_matmul_threads.cpp: matrix products give the same bits
// whatever the thread count. heed splits every GEMM over output rows or
// columns itself, in slabs that depend only on the shape, and runs each slab
// on one thread (core/cpu_matmul.cpp); the libraries' own splits (oneDNN's
// brgemm may split the inner dimension, and differently per thread count and
// CPU) never decide the numbers.
#include <array>
#include <cstdlib>
#include <cstring>

#include "test_util.h"

using namespace heed;
using test::same_bits;

namespace {

}  // namespace

TEST_CASE("matmul and linear are bit-identical on 1, 2, 3 and 4 threads, for every GEMM path, float32 and float64") {
  test::ThreadScope restore;
  // [M, K] x [K, N]: the shapes of the GPTs' and the determinism test's
  // products (oneDNN's range), one too small for any split, one large enough
  // for OpenBLAS's own threading, odd sizes that leave partial slabs, and few
  // rows (split by columns).
  const std::vector<std::array<int64_t, 3>> shapes = {
      {512, 512, 256}, {512, 256, 512}, {256, 512, 512}, {768, 128, 512}, {768, 512, 128}, {3072, 256, 768},
      {37, 300, 129},  {16, 4096, 64},  {5, 64, 4000},   {24, 24, 24},    {1100, 1030, 1000}, {67, 129, 45}};
  // float64 (OpenBLAS): a product below 1 MFLOP ({67, 129, 45}) is one call
  // outside heed's threads, which OpenBLAS's OpenMP build threaded itself.
  for (DType dt : {DType::f32, DType::f64})
  for (auto [M, K, N] : shapes) {
    if (dt == DType::f64 && M * K * N > (int64_t{1} << 24)) continue;  // OpenBLAS is slow in float64 at 1100^3
    Tensor a = test::det_tensor({M, K}, 11, -1, 1, dt);
    Tensor b = test::det_tensor({K, N}, 12, -1, 1, dt);
    Tensor bt = kernel::contiguous(kernel::transpose(test::det_tensor({K, N}, 13, -1, 1, dt), 0, 1));  // [N, K]
    Tensor bias = test::det_tensor({N}, 14, -1, 1, dt);
    std::vector<Tensor> ref;
    for (int nt : {1, 2, 3, 4}) {
      heed::set_num_threads(nt);
      std::vector<Tensor> got = {kernel::matmul(a, b), kernel::matmul(kernel::transpose(kernel::contiguous(kernel::transpose(a, 0, 1)), 0, 1), b),
                                 kernel::linear(a, bt, bias)};
      if (ref.empty()) ref = got;
      for (size_t i = 0; i < got.size(); ++i) {
        INFO(dtype_name(dt) << " shape " << M << "x" << K << " @ " << K << "x" << N << ", product " << i << ", " << nt
                      << " threads against 1");
        CHECK(same_bits(got[i], ref[i]));
      }
    }
  }
}

TEST_CASE("share_cores: the test program was restarted once with libgomp's short spin, or the user chose") {
  // doctest_main calls heed::share_cores() first thing.
  const char* user = std::getenv("OMP_WAIT_POLICY");
  const char* marker = std::getenv("HEED_SHARE_CORES");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  if (marker) {
    REQUIRE(spin != nullptr);
    // The long spin with adaptive threads, the short one without.
    const char* adaptive = std::getenv("HEED_ADAPTIVE_THREADS");
    const bool off = adaptive && (std::string(adaptive) == "0" || std::string(adaptive) == "off");
    CHECK(std::string(spin) == heed::share_cores_spin(!off));
    CHECK(std::string(heed::share_cores_spin(true)) == "30000");
    CHECK(std::string(heed::share_cores_spin(false)) == "1000");
  } else {
    CHECK((user != nullptr || spin != nullptr));  // share_cores stands back only for the user's own setting
  }
  heed::share_cores();  // a second call returns: no second restart
  CHECK(true);
}

TEST_CASE("a sum over rows (a bias gradient) is each column added row by row in double, on any thread count") {
  test::ThreadScope keep;
  for (const int64_t cols : {int64_t{130}, int64_t{512}, int64_t{7}}) {
    const int64_t rows = 768;
    Tensor x = test::det_tensor({rows, cols}, 61).to(DType::f32);
    const std::vector<float> xv = x.to_vector<float>();
    std::vector<float> expect(static_cast<size_t>(cols));
    for (int64_t c = 0; c < cols; ++c) {
      double s = 0;
      for (int64_t r = 0; r < rows; ++r) s += static_cast<double>(xv[static_cast<size_t>(r * cols + c)]);
      expect[static_cast<size_t>(c)] = static_cast<float>(s);
    }
    for (int threads : {1, 2}) {
      CAPTURE(cols);
      CAPTURE(threads);
      set_num_threads(threads);
      CHECK(kernel::sum(x, {0}, false).to_vector<float>() == expect);
    }
  }
}
