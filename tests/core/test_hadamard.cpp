// tests/core/test_hadamard.cpp: the fast Walsh-Hadamard transform
// (kernel::fwht_) and the random rotations of core/quantize.h.
#include <bit>
#include <cstring>

#include "test_util.h"

using namespace heed;
using test::same_bits;

namespace {

// The Sylvester matrix: H[i][j] = (-1)^popcount(i & j).
Tensor dense_hadamard(int64_t n) {
  Tensor h = Tensor::empty({n, n}, DType::f64);
  double* p = h.data<double>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) p[i * n + j] = std::popcount(static_cast<uint64_t>(i & j)) % 2 ? -1.0 : 1.0;
  return h;
}

double norm(const Tensor& t) {
  double s = 0;
  for (double v : t.to_vector<double>()) s += v * v;
  return std::sqrt(s);
}

// max |A A^T - I|
double orthogonality_defect(const Tensor& a) {
  Tensor p = kernel::matmul(a, kernel::transpose(a, 0, 1));
  const int64_t n = a.size(0);
  double m = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) m = std::max(m, std::abs(p.at({i, j}) - (i == j ? 1.0 : 0.0)));
  return m;
}

}  // namespace

TEST_CASE("fwht_ equals multiplication by the dense Sylvester Hadamard matrix (float64), n = 1 .. 2^13") {
  for (int64_t n : {1, 2, 4, 8, 16, 32, 64, 128, 1024, 4096, 8192}) {
    CAPTURE(n);
    const int64_t rows = n >= 4096 ? 2 : 5;
    Tensor x = test::det_tensor({rows, n}, static_cast<uint64_t>(n), -1, 1, DType::f64);
    Tensor expect = kernel::matmul(x, dense_hadamard(n));  // H is symmetric
    Tensor y = kernel::clone(x);
    kernel::fwht_(y);
    CHECK(test::max_diff(y, expect) <= 1e-13 * static_cast<double>(n));
  }
  // float32: the same within float rounding (log2 n additions per output).
  Tensor x = test::det_tensor({3, 512}, 7, -1, 1, DType::f32);
  Tensor expect = kernel::matmul(kernel::to_dtype(x, DType::f64), dense_hadamard(512));
  kernel::fwht_(x);
  CHECK(test::max_diff(x, expect) <= 1e-4);
}

TEST_CASE("fwht_ is its own inverse up to 1/n and scales norms by exactly sqrt(n)") {
  for (int64_t n : {2, 8, 64, 256, 4096, 65536}) {
    CAPTURE(n);
    Tensor x = test::det_tensor({4, n}, 3, -1, 1, DType::f64);
    Tensor y = kernel::clone(x);
    kernel::fwht_(y);
    for (int64_t r = 0; r < 4; ++r)  // Parseval: ||H x|| = sqrt(n) ||x||, row by row
      CHECK(norm(kernel::narrow(y, 0, r, 1)) ==
            doctest::Approx(std::sqrt(static_cast<double>(n)) * norm(kernel::narrow(x, 0, r, 1))).epsilon(1e-12));
    kernel::fwht_(y);
    kernel::scale_(y, 1.0 / static_cast<double>(n));
    CHECK(test::max_diff(y, x) <= 1e-14 * std::log2(static_cast<double>(n)));
  }
}

TEST_CASE("fwht_ on views, leading dims and threads: unit-stride blocks of wider rows, the same bits on 1 and 2 threads") {
  test::ThreadScope restore;
  // A block of each row of a wider matrix, in place: the rest untouched.
  Tensor wide = test::det_tensor({6, 40}, 5, -1, 1, DType::f64);
  Tensor before = kernel::clone(wide);
  Tensor block = kernel::narrow(wide, 1, 8, 32);
  Tensor expect = kernel::contiguous(block);
  kernel::fwht_(expect);
  kernel::fwht_(block);
  CHECK(test::max_diff(block, expect) == 0);
  CHECK(test::max_diff(kernel::narrow(wide, 1, 0, 8), kernel::narrow(before, 1, 0, 8)) == 0);
  // Leading dims are rows.
  Tensor x3 = test::det_tensor({2, 3, 16}, 6, -1, 1, DType::f32), x2 = kernel::reshape(kernel::clone(x3), {6, 16});
  kernel::fwht_(x3);
  kernel::fwht_(x2);
  CHECK(same_bits(kernel::reshape(x3, {6, 16}), x2));
  // Enough rows to be split over threads.
  Tensor big = test::det_tensor({300, 1024}, 9, -1, 1, DType::f32);
  Tensor one = kernel::clone(big), two = kernel::clone(big);
  heed::set_num_threads(1);
  kernel::fwht_(one);
  heed::set_num_threads(2);
  kernel::fwht_(two);
  CHECK(same_bits(one, two));
}

TEST_CASE("fwht_ refuses lengths that are not powers of two, integer tensors and strided rows, naming them") {
  test::check_error([] { kernel::fwht_(Tensor::zeros({3, 12})); }, {"fwht_", "power of two", "12", "[3, 12]"});
  test::check_error([] { kernel::fwht_(Tensor::zeros({4}, DType::i64)); }, {"fwht_", "int64"});
  Tensor t = Tensor::zeros({8, 4});
  test::check_error([&] { kernel::fwht_(kernel::transpose(t, 0, 1)); }, {"fwht_", "unit-stride"});
}

TEST_CASE("the randomized Hadamard rotation is orthogonal for every d (one block, or two overlapping ones), and "
          "inverse undoes apply") {
  for (int64_t d : {1, 2, 5, 7, 64, 100, 320, 512}) {
    CAPTURE(d);
    quant::RandomizedHadamard h(d, 42);
    CHECK(h.signs().size() == static_cast<size_t>(quant::RandomizedHadamard::sign_count(d)));
    CHECK(h.block() <= d);
    CHECK(2 * h.block() > d);
    Tensor s = h.matrix();
    CHECK(orthogonality_defect(s) <= 1e-13);
    Tensor x = test::det_tensor({3, d}, 8, -1, 1, DType::f64);
    Tensor y = h.apply(x);
    CHECK(test::max_diff(y, kernel::matmul(x, kernel::transpose(s, 0, 1))) <= 1e-13);
    CHECK(norm(y) == doctest::Approx(norm(x)).epsilon(1e-13));
    CHECK(test::max_diff(h.inverse(y), x) <= 1e-13);
    // float32 in, float32 out, within float rounding.
    Tensor xf = kernel::to_dtype(x, DType::f32);
    Tensor yf = h.apply(xf);
    CHECK(yf.dtype() == DType::f32);
    CHECK(test::max_diff(yf, y) <= 1e-5);
  }
  // Seeded: the same seed draws the same signs, another seed others; every
  // coordinate of a two-block rotation is mixed.
  CHECK(quant::RandomizedHadamard(64, 1).signs() == quant::RandomizedHadamard(64, 1).signs());
  CHECK(quant::RandomizedHadamard(64, 1).signs() != quant::RandomizedHadamard(64, 2).signs());
  Tensor s = quant::RandomizedHadamard(5, 3).matrix();
  for (int64_t j = 0; j < 5; ++j) {
    int nonzero = 0;
    for (int64_t i = 0; i < 5; ++i) nonzero += std::abs(s.at({i, j})) > 1e-12;
    CHECK(nonzero >= 4);
  }
  test::check_error([] { quant::RandomizedHadamard(8, std::vector<int8_t>(7, 1)); }, {"8", "8 signs", "got 7"});
  test::check_error([] { quant::RandomizedHadamard(8, 0).apply(Tensor::zeros({2, 6})); }, {"rows of 8", "[2, 6]"});
}

TEST_CASE("the Gaussian rotation is orthogonal, seeded, and the same on 1 and 2 threads") {
  test::ThreadScope restore;
  for (int64_t d : {1, 3, 64, 200}) {
    CAPTURE(d);
    quant::GaussianRotation g(d, 5);
    CHECK(orthogonality_defect(g.matrix()) <= 1e-12);
    Tensor x = test::det_tensor({4, d}, 2, -1, 1, DType::f64);
    CHECK(test::max_diff(g.inverse(g.apply(x)), x) <= 1e-12);
  }
  heed::set_num_threads(1);
  Tensor a = quant::GaussianRotation(96, 9).apply(test::det_tensor({400, 96}, 1, -1, 1, DType::f64));
  heed::set_num_threads(2);
  Tensor b = quant::GaussianRotation(96, 9).apply(test::det_tensor({400, 96}, 1, -1, 1, DType::f64));
  CHECK(same_bits(a, b));
  CHECK(test::max_diff(quant::GaussianRotation(16, 1).matrix(), quant::GaussianRotation(16, 2).matrix()) > 0.1);
}
