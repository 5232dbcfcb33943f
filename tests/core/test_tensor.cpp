// tests/core/test_tensor.cpp: the tensor core and the CPU kernels behind
// core/kernels.h, against references computed independently here (naive loops
// in double over the operands' logical values, read element by element with
// at(), so a bug in heed's copy or view kernels cannot hide one elsewhere).
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/conv_winograd.h"
#include "test_util.h"

using namespace heed;
namespace k = heed::kernel;

namespace {

// Logical (row-major) values of any view, read one element at a time.
std::vector<double> dense(const Tensor& t) {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(t.numel()));
  std::vector<int64_t> idx(static_cast<size_t>(t.dim()), 0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    out.push_back(t.at(idx));
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      if (++idx[d] < t.size(d)) break;
      idx[d] = 0;
    }
  }
  return out;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

Tensor f64(const Shape& s, uint64_t seed) { return test::det_tensor(s, seed, -1.0, 1.0, DType::f64); }
Tensor f32(const Shape& s, uint64_t seed) { return test::det_tensor(s, seed, -1.0, 1.0, DType::f32); }

// C = A B with NumPy broadcasting of the batch dims, in double.
std::vector<double> naive_matmul(const Tensor& a, const Tensor& b, Shape& out_shape) {
  const std::vector<double> A = dense(a), B = dense(b);
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  const size_t nd = std::max(ab.size(), bb.size());
  while (ab.size() < nd) ab.insert(ab.begin(), 1);
  while (bb.size() < nd) bb.insert(bb.begin(), 1);
  Shape batch(nd);
  for (size_t d = 0; d < nd; ++d) batch[d] = std::max(ab[d], bb[d]);
  const int64_t nb = shape_numel(batch);
  std::vector<double> C(static_cast<size_t>(nb * M * N), 0.0);
  for (int64_t i = 0; i < nb; ++i) {
    int64_t rem = i, ia = 0, ib = 0, sa = 1, sb = 1;
    for (size_t d = nd; d-- > 0;) {
      int64_t q = rem % batch[d];
      rem /= batch[d];
      ia += (ab[d] == 1 ? 0 : q) * sa;
      ib += (bb[d] == 1 ? 0 : q) * sb;
      sa *= ab[d];
      sb *= bb[d];
    }
    const double* pa = A.data() + ia * M * K;
    const double* pb = B.data() + ib * K * N;
    double* pc = C.data() + i * M * N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double acc = 0;
        for (int64_t kk = 0; kk < K; ++kk) acc += pa[m * K + kk] * pb[kk * N + n];
        pc[m * N + n] = acc;
      }
  }
  out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  return C;
}

void check_matmul(const Tensor& a, const Tensor& b, double tol) {
  Shape expect_shape;
  std::vector<double> expect = naive_matmul(a, b, expect_shape);
  Tensor c = k::matmul(a, b);
  CHECK(c.shape() == expect_shape);
  CHECK(c.is_contiguous());
  CHECK(max_abs_diff(dense(c), expect) <= tol);
}

// Reduction over `dims` (normalised, non-empty) of a dense row-major array, in
// keepdim layout; max when is_max, else sum.
std::vector<double> naive_reduce(const std::vector<double>& x, const Shape& shape, const std::vector<int64_t>& dims,
                                 bool is_max) {
  Shape os = shape;
  for (int64_t d : dims) os[d] = 1;
  std::vector<double> out(static_cast<size_t>(shape_numel(os)),
                          is_max ? -std::numeric_limits<double>::infinity() : 0.0);
  Shape ost = contiguous_strides(os);
  std::vector<int64_t> idx(shape.size(), 0);
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t o = 0;
    for (size_t d = 0; d < shape.size(); ++d) o += (os[d] == 1 ? 0 : idx[d]) * ost[d];
    out[o] = is_max ? std::max(out[o], x[i]) : out[o] + x[i];
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

}  // namespace

// ---- views ----

TEST_CASE("reshape of a contiguous tensor is a view: same storage, no copy") {
  Tensor t = Tensor::arange(12);
  Tensor r = k::reshape(t, {3, -1});
  CHECK(r.shape() == Shape{3, 4});
  CHECK(r.strides() == Shape{4, 1});
  CHECK(r.shares_storage(t));
  CHECK(r.raw_data() == t.raw_data());
  r.data<float>()[5] = 100.0f;  // writes through to t
  CHECK(t.at({5}) == 100.0);
}

TEST_CASE("reshape of a transposed tensor copies, in the transposed order") {
  Tensor t = k::reshape(Tensor::arange(6), {2, 3});
  Tensor tt = k::transpose(t, 0, 1);  // [3, 2]: 0 3 1 4 2 5
  Tensor r = k::reshape(tt, {6});
  CHECK_FALSE(r.shares_storage(t));
  CHECK(r.is_contiguous());
  CHECK(r.to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
}

TEST_CASE("view of a transposed tensor throws naming both shapes") {
  Tensor tt = k::transpose(k::reshape(Tensor::arange(12), {3, 4}), 0, 1);
  test::check_error([&] { k::view(tt, {12}); }, {"view", "[4, 3]", "[12]", "reshape"});
  // The same request on the contiguous original is a view.
  Tensor v = k::view(k::reshape(Tensor::arange(12), {3, 4}), {2, 6});
  CHECK(v.strides() == Shape{6, 1});
}

TEST_CASE("view splits and merges dims of a sliced tensor when the strides allow it") {
  Tensor base = k::reshape(Tensor::arange(60), {5, 3, 4});
  Tensor rows = k::narrow(base, 0, 1, 3);  // [3, 3, 4], contiguous block at offset 12
  Tensor v = k::view(rows, {9, 4});
  CHECK(v.shares_storage(base));
  CHECK(v.offset() == 12);
  CHECK(v.at({0, 0}) == 12.0);
  CHECK(v.at({8, 3}) == 47.0);
  Tensor cols = k::narrow(base, 2, 1, 2);  // [5, 3, 2] with strides [12, 4, 1]
  Tensor v2 = k::view(cols, {15, 2});       // the first two dims still merge
  CHECK(v2.strides() == Shape{4, 1});
  CHECK(v2.at({4, 1}) == 1 * 12 + 1 * 4 + 2);
  test::check_error([&] { k::view(cols, {30}); }, {"view", "[5, 3, 2]", "[30]"});
}

TEST_CASE("permute, transpose, narrow, expand, unsqueeze, squeeze: shape, strides and values") {
  Tensor t = k::reshape(Tensor::arange(24), {2, 3, 4});  // value = 12 i + 4 j + k

  Tensor p = k::permute(t, {2, 0, 1});
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(p.strides() == Shape{1, 12, 4});
  CHECK(p.shares_storage(t));
  CHECK(p.at({3, 1, 2}) == 12 + 8 + 3);
  test::check_error([&] { k::permute(t, {0, 0, 1}); }, {"permute", "repeated"});

  Tensor tr = k::transpose(t, 0, -1);
  CHECK(tr.shape() == Shape{4, 3, 2});
  CHECK(tr.strides() == Shape{1, 4, 12});
  CHECK(tr.at({1, 2, 1}) == 12 + 8 + 1);

  Tensor n = k::narrow(t, 1, 1, 2);
  CHECK(n.shape() == Shape{2, 2, 4});
  CHECK(n.strides() == Shape{12, 4, 1});
  CHECK(n.offset() == 4);
  CHECK(n.at({1, 1, 3}) == 12 + 8 + 3);
  Tensor nn = k::narrow(t, -1, -2, 2);  // negative dim and start count from the end
  CHECK(nn.shape() == Shape{2, 3, 2});
  CHECK(nn.at({0, 0, 0}) == 2.0);

  Tensor col = k::reshape(Tensor::arange(3), {3, 1});
  Tensor e = k::expand(col, {2, 3, 4});
  CHECK(e.shape() == Shape{2, 3, 4});
  CHECK(e.strides() == Shape{0, 1, 0});
  CHECK(e.shares_storage(col));
  CHECK(e.at({1, 2, 3}) == 2.0);
  CHECK(k::expand(col, {-1, 5}).shape() == Shape{3, 5});

  Tensor u = k::unsqueeze(k::reshape(Tensor::arange(12), {3, 4}), 1);
  CHECK(u.shape() == Shape{3, 1, 4});
  CHECK(u.strides() == Shape{4, 4, 1});
  Tensor ul = k::unsqueeze(k::reshape(Tensor::arange(12), {3, 4}), -1);
  CHECK(ul.shape() == Shape{3, 4, 1});
  Tensor s = k::squeeze(u, 1);
  CHECK(s.shape() == Shape{3, 4});
  CHECK(s.strides() == Shape{4, 1});
  CHECK(s.at({2, 3}) == 11.0);
  test::check_error([&] { k::squeeze(s, 0); }, {"squeeze", "dim 0", "size 3"});
}

TEST_CASE("contiguous returns the same tensor when already contiguous and a copy otherwise") {
  Tensor t = k::reshape(Tensor::arange(6), {2, 3});
  CHECK(k::contiguous(t).same(t));
  Tensor tt = k::transpose(t, 0, 1);
  CHECK_FALSE(tt.is_contiguous());
  Tensor c = k::contiguous(tt);
  CHECK_FALSE(c.same(tt));
  CHECK_FALSE(c.shares_storage(t));
  CHECK(c.is_contiguous());
  CHECK(c.to_vector<double>() == std::vector<double>{0, 3, 1, 4, 2, 5});
  // size-1 dims do not break contiguity, whatever their stride
  Tensor odd = Tensor::view_of(t, {2, 1, 3}, {3, 99, 1}, 0);
  CHECK(odd.is_contiguous());
  CHECK(k::contiguous(odd).same(odd));
  // clone always copies
  Tensor cl = k::clone(t);
  CHECK_FALSE(cl.shares_storage(t));
  CHECK(cl.to_vector<double>() == t.to_vector<double>());
}

TEST_CASE("to_vector reads non-contiguous views in logical order") {
  Tensor t = k::reshape(Tensor::arange(12, DType::f64), {3, 4});
  CHECK(k::transpose(t, 0, 1).to_vector<double>() ==
        std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK(k::narrow(t, 1, 1, 2).to_vector<double>() == std::vector<double>{1, 2, 5, 6, 9, 10});
  CHECK(k::expand(k::narrow(t, 0, 2, 1), {2, 4}).to_vector<int64_t>() == std::vector<int64_t>{8, 9, 10, 11, 8, 9, 10, 11});
}

TEST_CASE("storage is 64-byte aligned for every size and dtype") {
  for (DType dt : {DType::f32, DType::f64, DType::i64})
    for (int64_t n : {0, 1, 3, 17, 1000, 4097}) {
      Tensor t = Tensor::empty({n}, dt);
      auto addr = reinterpret_cast<std::uintptr_t>(t.impl()->storage->data);
      INFO("dtype " << dtype_name(dt) << " n " << n);
      CHECK(addr % 64 == 0);
      CHECK(t.impl()->storage->bytes == static_cast<size_t>(n) * dtype_size(dt));
    }
}

TEST_CASE("factories: shapes, dtypes, values and contiguous strides") {
  Tensor z = Tensor::zeros({2, 3});
  CHECK(z.dtype() == DType::f32);
  CHECK(z.strides() == Shape{3, 1});
  CHECK(z.to_vector<double>() == std::vector<double>(6, 0.0));
  CHECK(Tensor::ones({2, 2}, DType::i64).to_vector<int64_t>() == std::vector<int64_t>(4, 1));
  CHECK(Tensor::full({3}, -2.5, DType::f64).to_vector<double>() == std::vector<double>(3, -2.5));
  Tensor s = Tensor::scalar(4.0);
  CHECK(s.dim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.item() == 4.0);
  CHECK(Tensor::arange(4, DType::i64).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3});
  Tensor e = Tensor::empty({2, 0, 3});
  CHECK(e.numel() == 0);
  CHECK(e.is_contiguous());
  Tensor f = Tensor::from({1, 2, 3, 4, 5, 6}, {3, 2});
  CHECK(f.at({2, 0}) == 5.0);
  CHECK(Tensor::from_i64({-3, 7}, {2}).to_vector<int64_t>() == std::vector<int64_t>{-3, 7});
  // Named by the function called (it said from_vector for all of them).
  test::check_error([&] { Tensor::from({1, 2, 3}, {2, 2}); }, {"Tensor::from: 3 values", "[2, 2]"});
  test::check_error([&] { Tensor::from_i64({1}, {2}); }, {"Tensor::from_i64: 1 values", "[2]"});
  test::check_error([&] { Tensor::from_f64({1}, {2}); }, {"Tensor::from_f64: 1 values"});
  test::check_error([&] { Tensor::from_vector(std::vector<float>{1}, {2}); }, {"Tensor::from_vector: 1 values"});
  test::check_error([&] { Tensor::empty({2, -1}); }, {"empty", "-1", "[2, -1]"});
  test::check_error([&] { Tensor::zeros({2, 2}).item(); }, {"item", "[2, 2]"});
  test::check_error([&] { f.at({3, 0}); }, {"at", "index 3", "0..2"});
}

TEST_CASE("rank-0 tensors: transpose and squeeze are views, argmax is 0, dim-indexing ops throw") {
  Tensor s = Tensor::scalar(3.0);
  Tensor t = k::transpose(s, 0, -1);
  CHECK(t.dim() == 0);
  CHECK(t.shares_storage(s));
  CHECK(k::squeeze(s, 0).dim() == 0);
  CHECK(k::squeeze(s, -1).item() == 3.0);
  Tensor am = k::argmax(s, 0);
  CHECK(am.dim() == 0);
  CHECK(am.dtype() == DType::i64);
  CHECK(am.item() == 0.0);
  CHECK(k::unsqueeze(s, 0).shape() == Shape{1});
  CHECK(k::softmax(s, 0).item() == 1.0);
  // Ops that need a dim's size name themselves instead of reading past the shape.
  test::check_error([&] { s.size(0); }, {"size", "rank >= 1", "[]"});
  test::check_error([&] { s.stride(-1); }, {"stride", "rank >= 1"});
  test::check_error([&] { k::narrow(s, 0, 0, 1); }, {"narrow", "rank >= 1"});
  test::check_error([&] { k::index_select(s, 0, Tensor::from_i64({0}, {1})); }, {"index_select", "rank >= 1"});
  test::check_error([&] { k::index_add_(s, 0, Tensor::from_i64({0}, {1}), s); }, {"index_add_", "rank >= 1"});
  test::check_error([&] { k::concat({s, s}, 0); }, {"concat", "rank >= 1"});
  test::check_error([&] { k::transpose(s, 0, 1); }, {"transpose", "dim 1", "-1..0"});
}

// ---- element-wise ----

TEST_CASE("binary ops broadcast NumPy-style") {
  Tensor a = Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor row = Tensor::from({10, 20, 30}, {3});
  CHECK(k::binary(k::Binary::add, a, row).to_vector<double>() == std::vector<double>{11, 22, 33, 14, 25, 36});
  Tensor col = Tensor::from({1, 2}, {2, 1});
  Tensor r3 = Tensor::from({1, 10, 100}, {1, 3});
  Tensor outer = k::binary(k::Binary::mul, col, r3);
  CHECK(outer.shape() == Shape{2, 3});
  CHECK(outer.to_vector<double>() == std::vector<double>{1, 10, 100, 2, 20, 200});
  // A rank-0 scalar broadcasts against anything, from either side.
  Tensor s = Tensor::scalar(2.0);
  CHECK(k::binary(k::Binary::sub, s, a).to_vector<double>() == std::vector<double>{1, 0, -1, -2, -3, -4});
  CHECK(k::binary(k::Binary::div, a, s).to_vector<double>() == std::vector<double>{0.5, 1, 1.5, 2, 2.5, 3});
  CHECK(k::binary(k::Binary::add, s, s).dim() == 0);
  // A transposed operand is read by its strides.
  Tensor at = k::transpose(Tensor::from({1, 2, 3, 4, 5, 6}, {3, 2}), 0, 1);  // [[1,3,5],[2,4,6]]
  CHECK(k::binary(k::Binary::sub, a, at).to_vector<double>() == std::vector<double>{0, -1, -2, 2, 1, 0});
  // Size-0 dims broadcast like any other.
  Tensor empty = Tensor::zeros({0, 3});
  Tensor r = k::binary(k::Binary::add, empty, row);
  CHECK(r.shape() == Shape{0, 3});
  CHECK(k::binary(k::Binary::add, Tensor::zeros({2, 0}), Tensor::zeros({1, 1})).shape() == Shape{2, 0});
  // scalar forms, both orders
  CHECK(k::binary_scalar(k::Binary::sub, a, 1.0, true).to_vector<double>() ==
        std::vector<double>{0, -1, -2, -3, -4, -5});
  CHECK(k::binary_scalar(k::Binary::pow, a, 2.0).to_vector<double>() == std::vector<double>{1, 4, 9, 16, 25, 36});
  CHECK(k::binary(k::Binary::maximum, a, Tensor::scalar(3.5)).to_vector<double>() ==
        std::vector<double>{3.5, 3.5, 3.5, 4, 5, 6});
  CHECK(k::binary(k::Binary::minimum, a, Tensor::scalar(3.5)).to_vector<double>() ==
        std::vector<double>{1, 2, 3, 3.5, 3.5, 3.5});
}

TEST_CASE("binary ops on large broadcast operands (parallel path) match a naive loop") {
  Tensor a = f32({300, 257}, 1);
  Tensor b = f32({257}, 2);
  Tensor c = k::binary(k::Binary::mul, k::transpose(k::contiguous(k::transpose(a, 0, 1)), 0, 1), b);
  const std::vector<float> A = a.to_vector<float>(), B = b.to_vector<float>();
  const std::vector<double> C = dense(c);
  bool ok = true;
  for (int64_t i = 0; i < 300; ++i)
    for (int64_t j = 0; j < 257; ++j) {
      const float expect = A[i * 257 + j] * B[j];
      ok &= static_cast<float>(C[i * 257 + j]) == expect;
    }
  CHECK(ok);
}

TEST_CASE("int64 arithmetic stays in int64 (exact beyond 2^53, truncating division)") {
  Tensor a = Tensor::from_i64({7, -7, 3, (int64_t{1} << 53) + 1}, {4});
  Tensor b = Tensor::from_i64({2, 2, -4, 2}, {4});
  CHECK(k::binary(k::Binary::add, a, b).dtype() == DType::i64);
  CHECK(k::binary(k::Binary::add, a, b).to_vector<int64_t>() ==
        std::vector<int64_t>{9, -5, -1, (int64_t{1} << 53) + 3});
  CHECK(k::binary(k::Binary::sub, a, b).to_vector<int64_t>() ==
        std::vector<int64_t>{5, -9, 7, (int64_t{1} << 53) - 1});
  CHECK(k::binary(k::Binary::mul, a, b).to_vector<int64_t>() ==
        std::vector<int64_t>{14, -14, -12, (int64_t{1} << 54) + 2});
  CHECK(k::binary(k::Binary::div, a, b).to_vector<int64_t>() ==
        std::vector<int64_t>{3, -3, 0, int64_t{1} << 52});
  CHECK(k::binary(k::Binary::gt, a, b).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1, 1});
  CHECK(k::sum(a, {}).to_vector<int64_t>() == std::vector<int64_t>{3 + (int64_t{1} << 53) + 1});
  // Integer division by zero has no inf to give: it throws (rather than trapping).
  test::check_error([&] { k::binary(k::Binary::div, a, Tensor::from_i64({1, 0, 1, 1}, {4})); },
                    {"div", "division by zero"});
  test::check_error([&] { k::binary_scalar(k::Binary::div, a, 0.0); }, {"div", "division by zero"});
  CHECK(k::binary_scalar(k::Binary::div, a, 0.0, /*scalar_first=*/true).to_vector<int64_t>() ==
        std::vector<int64_t>{0, 0, 0, 0});
}

TEST_CASE("comparisons give 1 or 0 in the operands' dtype") {
  Tensor a = Tensor::from({1, 2, 3}, {3});
  Tensor b = Tensor::from({2, 2, 2}, {3});
  using B = k::Binary;
  CHECK(k::binary(B::eq, a, b).dtype() == DType::f32);
  CHECK(k::binary(B::eq, a, b).to_vector<double>() == std::vector<double>{0, 1, 0});
  CHECK(k::binary(B::ne, a, b).to_vector<double>() == std::vector<double>{1, 0, 1});
  CHECK(k::binary(B::lt, a, b).to_vector<double>() == std::vector<double>{1, 0, 0});
  CHECK(k::binary(B::le, a, b).to_vector<double>() == std::vector<double>{1, 1, 0});
  CHECK(k::binary(B::gt, a, b).to_vector<double>() == std::vector<double>{0, 0, 1});
  CHECK(k::binary(B::ge, a, b).to_vector<double>() == std::vector<double>{0, 1, 1});
  // NaN compares unequal to everything, itself included
  Tensor n = Tensor::from({NAN}, {1});
  CHECK(k::binary(B::eq, n, n).item() == 0.0);
  CHECK(k::binary(B::ne, n, n).item() == 1.0);
}

TEST_CASE("unary ops match the C library and the textbook formulas") {
  std::vector<double> xs = {-3.0, -0.7, -1e-3, 0.0, 0.25, 1.3, 4.0};
  Tensor x = Tensor::from_f64(xs, {7});
  auto run = [&](k::Unary op) { return k::unary(op, x).to_vector<double>(); };
  auto close = [](const std::vector<double>& got, auto f, const std::vector<double>& in) {
    for (size_t i = 0; i < in.size(); ++i) {
      INFO("x = " << in[i]);
      CHECK(got[i] == doctest::Approx(f(in[i])).epsilon(1e-14));
    }
  };
  close(run(k::Unary::neg), [](double v) { return -v; }, xs);
  close(run(k::Unary::exp), [](double v) { return std::exp(v); }, xs);
  close(run(k::Unary::tanh), [](double v) { return std::tanh(v); }, xs);
  close(run(k::Unary::sigmoid), [](double v) { return 1.0 / (1.0 + std::exp(-v)); }, xs);
  close(run(k::Unary::relu), [](double v) { return v > 0 ? v : 0.0; }, xs);
  close(run(k::Unary::abs), [](double v) { return std::fabs(v); }, xs);
  close(run(k::Unary::square), [](double v) { return v * v; }, xs);
  // GELU: x Phi(x) with Phi(x) = (1 + erf(x / sqrt 2)) / 2; the tanh form of
  // Hendrycks & Gimpel is within 1e-3 of it on this range.
  close(run(k::Unary::gelu_erf), [](double v) { return 0.5 * v * std::erfc(-v / std::sqrt(2.0)); }, xs);
  auto gt = run(k::Unary::gelu_tanh), ge = run(k::Unary::gelu_erf);
  for (size_t i = 0; i < xs.size(); ++i) CHECK(std::abs(gt[i] - ge[i]) < 1e-3);
  // ... and is its own formula, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), to the last bits (a
  // constant changed in the forward and its derivative alike passes every gradient check).
  close(run(k::Unary::gelu_tanh),
        [](double v) { return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))); }, xs);
  Tensor p = Tensor::from_f64({0.25, 4.0}, {2});
  CHECK(k::unary(k::Unary::log, p).to_vector<double>() == std::vector<double>{std::log(0.25), std::log(4.0)});
  CHECK(k::unary(k::Unary::sqrt, p).to_vector<double>() == std::vector<double>{0.5, 2.0});
  CHECK(k::unary(k::Unary::reciprocal, p).to_vector<double>() == std::vector<double>{4.0, 0.25});
  test::check_error([&] { k::unary(k::Unary::exp, Tensor::arange(3, DType::i64)); }, {"exp", "int64"});
}

TEST_CASE("silu: PyTorch's values and derivatives; float32 (fast exp) within 1e-6 of float64") {
  // torch.nn.functional.silu in float64 (PyTorch 1.13), and its gradient.
  const std::vector<double> xs = {-20.0, -3.0, -1.0, -0.25, 0.0, 0.5, 1.0, 2.0, 5.0};
  const std::vector<double> ys = {-4.122307236380407e-08, -0.14227761953270035, -0.2689414213699951,
                                  -0.10945587477855048,   0.0,                  0.3112296656009273,
                                  0.7310585786300049,     1.7615941559557646,   4.966535745378576};
  const std::vector<double> ds = {-3.9161918660646786e-08, -0.08810410601516962, 0.07232948812851325,
                                  0.37628997842980233,     0.5,                  0.7399611873026519,
                                  0.9276705118714869,      1.0907842487848955,   1.0265474324296655};
  Tensor x = Tensor::from_f64(xs, {9});
  auto y = k::unary(k::Unary::silu, x).to_vector<double>();
  auto d = k::unary_backward(k::Unary::silu, x, Tensor::ones({9}, DType::f64)).to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) {
    INFO("x = " << xs[i]);
    CHECK(y[i] == doctest::Approx(ys[i]).epsilon(1e-14));
    CHECK(d[i] == doctest::Approx(ds[i]).epsilon(1e-14));
  }
  // float32 over [-30, 30] (contiguous, so the vectorised loop runs), against
  // float64: within 1e-6 of max(1, |y|), the fast exp's error and float rounding.
  Tensor xf = Tensor::linspace(-30.0, 30.0, 6001);
  Tensor x64 = k::to_dtype(xf, DType::f64);
  Tensor g = Tensor::full({6001}, 0.75f), g64 = k::to_dtype(g, DType::f64);
  auto yf = k::unary(k::Unary::silu, xf).to_vector<double>(), y64 = k::unary(k::Unary::silu, x64).to_vector<double>();
  auto df = k::unary_backward(k::Unary::silu, xf, g).to_vector<double>();
  auto d64 = k::unary_backward(k::Unary::silu, x64, g64).to_vector<double>();
  double worst_y = 0, worst_d = 0;
  for (size_t i = 0; i < yf.size(); ++i) {
    worst_y = std::max(worst_y, std::abs(yf[i] - y64[i]) / std::max(1.0, std::abs(y64[i])));
    worst_d = std::max(worst_d, std::abs(df[i] - d64[i]));
  }
  CHECK(worst_y < 1e-6);
  CHECK(worst_d < 1e-6);
  // Beyond exp's float range: the limits, 0 (as -0) and x; NaN stays NaN.
  auto edge = k::unary(k::Unary::silu, Tensor::from({-100.0f, 100.0f, NAN}, {3})).to_vector<float>();
  CHECK(edge[0] == 0.0f);
  CHECK(std::signbit(edge[0]));
  CHECK(edge[1] == 100.0f);
  CHECK(std::isnan(edge[2]));
  auto dedge = k::unary_backward(k::Unary::silu, Tensor::from({-100.0f, 100.0f}, {2}), Tensor::ones({2}))
                   .to_vector<float>();
  CHECK(dedge[0] == 0.0f);
  CHECK(dedge[1] == 1.0f);
}

TEST_CASE("where and masked_fill broadcast the condition; any nonzero value is true") {
  Tensor cond = Tensor::from({1, 0, 0.5f}, {3});
  Tensor a = Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::scalar(-1.0);
  CHECK(k::where(cond, a, b).to_vector<double>() == std::vector<double>{1, -1, 3, 4, -1, 6});
  // The condition's dtype does not matter: 0.5 is true for int64 operands too.
  Tensor ai = Tensor::from_i64({7, 8, 9}, {3}), bi = Tensor::from_i64({0, 0, 0}, {3});
  CHECK(k::where(cond, ai, bi).to_vector<int64_t>() == std::vector<int64_t>{7, 0, 9});
  Tensor tiny = Tensor::from_f64({1e-300, 0.0, -1e-300}, {3});  // nonzero, but 0 in float32
  CHECK(k::where(tiny, a, b).to_vector<double>() == std::vector<double>{1, -1, 3, 4, -1, 6});
  Tensor mask = Tensor::from_i64({0, 1}, {2, 1});
  Tensor m = k::masked_fill(a, mask, -INFINITY);
  CHECK(m.shape() == Shape{2, 3});
  CHECK(m.to_vector<double>() == std::vector<double>{1, 2, 3, -INFINITY, -INFINITY, -INFINITY});
  CHECK(a.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});  // not in place
  test::check_error([&] { k::masked_fill(Tensor::zeros({3}), Tensor::zeros({2, 3}), 1.0); },
                    {"masked_fill", "[2, 3]", "[3]"});
}

TEST_CASE("copy_, fill_, add_ and scale_ write only through the destination view") {
  Tensor base = Tensor::zeros({3, 4});
  Tensor col = k::narrow(base, 1, 1, 2);
  k::fill_(col, 2.0);
  CHECK(base.to_vector<double>() == std::vector<double>{0, 2, 2, 0, 0, 2, 2, 0, 0, 2, 2, 0});
  k::add_(col, Tensor::from({1, 10}, {2}), 0.5);
  CHECK(base.to_vector<double>() == std::vector<double>{0, 2.5, 7, 0, 0, 2.5, 7, 0, 0, 2.5, 7, 0});
  k::scale_(k::narrow(base, 0, 2, 1), -2.0);
  CHECK(base.to_vector<double>() == std::vector<double>{0, 2.5, 7, 0, 0, 2.5, 7, 0, 0, -5, -14, 0});
  Tensor d = Tensor::zeros({2, 2}, DType::i64);
  k::copy_(d, Tensor::from_f64({1.9, -1.9}, {2}));  // converts and broadcasts, truncating like a C cast
  CHECK(d.to_vector<int64_t>() == std::vector<int64_t>{1, -1, 1, -1});
  CHECK(k::to_dtype(d, DType::f32).dtype() == DType::f32);
  CHECK(k::to_dtype(d, DType::i64).same(d));
}

// ---- reductions ----

TEST_CASE("sum, mean and max over single and multiple dims, keepdim, negative and all dims") {
  Tensor x = f64({2, 3, 4}, 3);
  const std::vector<double> X = dense(x);
  const Shape s = x.shape();
  CHECK(max_abs_diff(dense(k::sum(x, {1})), naive_reduce(X, s, {1}, false)) < 1e-12);
  CHECK(k::sum(x, {1}).shape() == Shape{2, 4});
  CHECK(k::sum(x, {1}, true).shape() == Shape{2, 1, 4});
  CHECK(max_abs_diff(dense(k::sum(x, {-1, 0})), naive_reduce(X, s, {0, 2}, false)) < 1e-12);
  CHECK(k::sum(x, {-1, 0}).shape() == Shape{3});
  Tensor all = k::sum(x, {});
  CHECK(all.dim() == 0);
  CHECK(all.item() == doctest::Approx(naive_reduce(X, s, {0, 1, 2}, false)[0]).epsilon(1e-14));
  CHECK(k::sum(x, {}, true).shape() == Shape{1, 1, 1});
  CHECK(k::sum(x, {0, 1, 2}).item() == doctest::Approx(all.item()).epsilon(1e-14));

  auto mean_ref = naive_reduce(X, s, {0, 2}, false);
  for (auto& v : mean_ref) v /= 8.0;
  CHECK(max_abs_diff(dense(k::mean(x, {0, 2}, true)), mean_ref) < 1e-12);
  CHECK(k::mean(x, {0, 2}, true).shape() == Shape{1, 3, 1});

  CHECK(dense(k::amax(x, {-2})) == naive_reduce(X, s, {1}, true));
  CHECK(dense(k::amax(x, {0, 1})) == naive_reduce(X, s, {0, 1}, true));
  CHECK(k::amax(x, {}).item() == naive_reduce(X, s, {0, 1, 2}, true)[0]);
}

TEST_CASE("reductions read non-contiguous inputs by their strides") {
  Tensor base = f64({4, 6, 5}, 4);
  Tensor p = k::permute(base, {2, 0, 1});       // [5, 4, 6]
  Tensor n = k::narrow(p, 2, 1, 4);             // [5, 4, 4], sliced
  const std::vector<double> N = dense(n);
  for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{0}, {1}, {2}, {0, 2}, {1, 2}}) {
    INFO("dims " << shape_str(dims));
    CHECK(max_abs_diff(dense(k::sum(n, dims, true)), naive_reduce(N, n.shape(), dims, false)) < 1e-12);
    CHECK(dense(k::amax(n, dims, true)) == naive_reduce(N, n.shape(), dims, true));
  }
  // expanded (stride 0) input: each of the 7 copies counts
  Tensor row = Tensor::from_f64({1, 2, 3}, {1, 3});
  CHECK(k::sum(k::expand(row, {7, 3}), {0}).to_vector<double>() == std::vector<double>{7, 14, 21});
}

TEST_CASE("reductions: rank-0, size-0 dims, NaN, int64 and repeated dims") {
  Tensor s = Tensor::scalar(3.0);
  CHECK(k::sum(s, {}).item() == 3.0);
  CHECK(k::sum(s, {0}).item() == 3.0);
  CHECK(k::sum(s, {-1}).dim() == 0);
  Tensor e = Tensor::zeros({0, 3});
  CHECK(k::sum(e, {0}).to_vector<double>() == std::vector<double>{0, 0, 0});
  CHECK(std::isnan(k::mean(e, {}).item()));
  CHECK(k::sum(e, {1}).shape() == Shape{0});
  test::check_error([&] { k::amax(e, {0}); }, {"max", "empty", "[0, 3]"});
  Tensor withnan = Tensor::from({1, NAN, 3, 4}, {2, 2});
  auto mx = k::amax(withnan, {1}).to_vector<double>();
  CHECK(std::isnan(mx[0]));
  CHECK(mx[1] == 4.0);
  CHECK(k::sum(Tensor::from_i64({1, 2, 3, 4}, {2, 2}), {0}).to_vector<int64_t>() == std::vector<int64_t>{4, 6});
  // int64 max: exact beyond 2^53, and all-negative rows (a maximum that
  // started from 0, as -infinity converted to an integer is, would say 0).
  const int64_t big = (int64_t{1} << 60) + 1;
  Tensor ints = Tensor::from_i64({-5, -3, -9, big, big - 1, -1}, {2, 3});
  CHECK(k::amax(ints, {1}).to_vector<int64_t>() == std::vector<int64_t>{-3, big});
  CHECK(k::amax(ints, {0}).to_vector<int64_t>() == std::vector<int64_t>{big, big - 1, -1});
  CHECK(k::amax(ints, {}).dtype() == DType::i64);
  CHECK(max(ints).to_vector<int64_t>() == std::vector<int64_t>{big});
  CHECK(k::amax(Tensor::from_i64({-7, -8}, {2}), {}).to_vector<int64_t>() == std::vector<int64_t>{-7});
  test::check_error([&] { k::mean(Tensor::arange(3, DType::i64), {}); }, {"mean", "int64"});
  test::check_error([&] { k::sum(Tensor::zeros({2, 3}), {1, -1}); }, {"sum", "dim 1", "more than once"});
}

TEST_CASE("summing the leading dim: the row-block fast path equals a naive double loop, bit for bit") {
  // [3000, 50] over dim 0 takes the fast path (kept dims one contiguous
  // block); the same data transposed takes the general path. Both accumulate
  // in double in index order, so both equal the naive loop exactly.
  // (The expectations are kept as float: GCC 12.2 at -O3 can drop the
  // rounding of a double -> float -> double round trip in a vectorised loop.)
  auto naive_colsum = [](const Tensor& m) {  // m: [R, C] float32
    const std::vector<float> v = m.to_vector<float>();
    const int64_t rows = m.size(0), cols = m.size(1);
    std::vector<double> acc(static_cast<size_t>(cols), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) acc[c] += static_cast<double>(v[r * cols + c]);
    std::vector<float> out(acc.size());
    for (size_t c = 0; c < acc.size(); ++c) out[c] = static_cast<float>(acc[c]);
    return out;
  };
  const int64_t R = 3000, C = 50;
  Tensor x = f32({R, C}, 5);
  const std::vector<float> expect = naive_colsum(x);

  CHECK(k::sum(x, {0}).to_vector<float>() == expect);
  Tensor xt = k::contiguous(k::transpose(x, 0, 1));                         // [50, 3000]
  CHECK(k::sum(k::transpose(xt, 0, 1), {0}).to_vector<float>() == expect);  // strided: general path
  CHECK(k::sum(xt, {1}).to_vector<float>() == expect);                      // reduce the inner dim
  // keepdim and a sliced (still row-block) input
  Tensor part = k::narrow(x, 1, 10, 30);
  CHECK(k::sum(part, {0}, true).shape() == Shape{1, 30});
  CHECK(k::sum(part, {0}, true).to_vector<float>() == naive_colsum(k::contiguous(part)));

  // Wide rows: more than one column chunk, so threads split the columns.
  Tensor w = f32({40, 10000}, 6);
  const std::vector<float> expect_w = naive_colsum(w);
  CHECK(k::sum(w, {0}).to_vector<float>() == expect_w);
  CHECK(k::sum(k::reshape(w, {40, 100, 100}), {0}).to_vector<float>() == expect_w);
}

TEST_CASE("sum_to sums broadcast dims back to the given shape") {
  Tensor g = f64({2, 3, 4}, 7);
  const std::vector<double> G = dense(g);
  Tensor a = k::sum_to(g, {3, 1});
  CHECK(a.shape() == Shape{3, 1});
  auto ref = naive_reduce(G, g.shape(), {0, 2}, false);
  CHECK(max_abs_diff(dense(a), ref) < 1e-12);
  CHECK(k::sum_to(g, {}).dim() == 0);
  CHECK(k::sum_to(g, {}).item() == doctest::Approx(naive_reduce(G, g.shape(), {0, 1, 2}, false)[0]));
  CHECK(k::sum_to(g, {2, 3, 4}).same(g));
  CHECK(k::sum_to(g, {1, 3, 4}).shape() == Shape{1, 3, 4});
  test::check_error([&] { k::sum_to(g, {5}); }, {"sum_to", "[2, 3, 4]", "[5]"});
}

TEST_CASE("argmax: index of the maximum, first on ties, any dim and view") {
  Tensor x = Tensor::from({1, 5, 5, 0, -1, 2, 9, 9}, {2, 4});
  CHECK(k::argmax(x, 1).dtype() == DType::i64);
  CHECK(k::argmax(x, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 2});
  CHECK(k::argmax(x, -1, true).shape() == Shape{2, 1});
  CHECK(k::argmax(x, 0).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 1});
  CHECK(k::argmax(k::transpose(x, 0, 1), 0).to_vector<int64_t>() == std::vector<int64_t>{1, 2});
}

// ---- matmul ----

TEST_CASE("matmul 2-D matches a naive triple loop, including transposed and strided operands") {
  Tensor a = f64({5, 7}, 11), b = f64({7, 3}, 12);
  check_matmul(a, b, 1e-12);
  Tensor at = k::transpose(f64({7, 5}, 13), 0, 1);
  Tensor bt = k::transpose(f64({3, 7}, 14), 0, 1);
  check_matmul(at, b, 1e-12);
  check_matmul(a, bt, 1e-12);
  check_matmul(at, bt, 1e-12);
  // both strides > 1 (every other column of a wider matrix): needs a copy
  Tensor wide = f64({5, 7, 2}, 15);
  Tensor strided = k::squeeze(k::narrow(wide, 2, 1, 1), 2);  // [5, 7], strides [14, 2]
  check_matmul(strided, b, 1e-12);
  check_matmul(k::narrow(f64({5, 9}, 16), 1, 2, 7), b, 1e-12);  // row stride 9 > K
  // vectors as [1, K] and [K, 1], and K = 0
  check_matmul(f64({1, 7}, 17), f64({7, 1}, 18), 1e-12);
  Tensor z = k::matmul(Tensor::zeros({3, 0}), Tensor::zeros({0, 4}));
  CHECK(z.shape() == Shape{3, 4});
  CHECK(z.to_vector<double>() == std::vector<double>(12, 0.0));
  CHECK(k::matmul(Tensor::zeros({0, 3}), Tensor::zeros({3, 4})).shape() == Shape{0, 4});
}

TEST_CASE("matmul batched, broadcast batch dims, and a shared operand") {
  check_matmul(f64({3, 4, 5}, 21), f64({3, 5, 6}, 22), 1e-12);
  check_matmul(f64({2, 1, 4, 5}, 23), f64({3, 5, 6}, 24), 1e-12);  // -> [2, 3, 4, 6]
  check_matmul(f64({4, 5, 6}, 25), f64({6, 7}, 26), 1e-12);        // shared right operand: one GEMM
  check_matmul(f64({2, 3, 5, 6}, 27), f64({1, 6, 7}, 28), 1e-12);  // shared right with a size-1 batch dim
  check_matmul(f64({4, 5}, 29), f64({3, 5, 6}, 30), 1e-12);        // shared left operand
  check_matmul(k::transpose(f64({3, 5, 4}, 31), 1, 2), k::transpose(f64({3, 6, 5}, 32), 1, 2), 1e-12);
  check_matmul(k::transpose(f64({6, 4, 5}, 33), 0, 1), f64({5, 2}, 34), 1e-12);  // batch dim not outermost
  // One-row operands broadcast over the batch (stride-0 batch dim, as the
  // backward of a mean produces): the batch cannot fold into GEMM rows.
  Tensor row = f64({1, 1, 3}, 35);
  check_matmul(k::expand(row, {4, 1, 3}), f64({3, 2}, 36), 1e-12);
  check_matmul(k::expand(f64({1, 2, 3}, 37), {4, 2, 3}), f64({3, 2}, 38), 1e-12);
  check_matmul(f64({4, 2, 3}, 39), k::expand(f64({1, 3, 2}, 40), {4, 3, 2}), 1e-12);
}

TEST_CASE("matmul at sizes that take the parallel paths matches a naive triple loop") {
  // One large GEMM (OpenBLAS threads), float32 and float64.
  Tensor a = f32({300, 400}, 41), b = f32({400, 200}, 42);
  check_matmul(a, b, 1e-3);
  check_matmul(k::transpose(f32({400, 300}, 43), 0, 1), b, 1e-3);
  check_matmul(test::det_tensor({300, 400}, 44, -1, 1, DType::f64), test::det_tensor({400, 200}, 45, -1, 1, DType::f64),
               1e-11);
  // Few large products: a serial loop of threaded GEMMs.
  check_matmul(f32({4, 128, 64}, 46), f32({4, 64, 128}, 47), 1e-4);
  // Many small products: one GEMM per OpenMP thread.
  check_matmul(f32({64, 16, 16}, 48), f32({64, 16, 16}, 49), 1e-5);
  check_matmul(f32({8, 8, 16, 16}, 50), k::transpose(f32({8, 16, 16}, 51), 1, 2), 1e-5);
  // A shared weight applied to [N, T, D]: one big GEMM.
  check_matmul(f32({8, 64, 128}, 52), f32({128, 96}, 53), 1e-4);
}

// ---- softmax ----

TEST_CASE("softmax and log_softmax: rows sum to 1, match a naive computation, any dim") {
  Tensor x = f64({3, 4, 5}, 61);
  const std::vector<double> X = dense(x);
  for (int64_t dim : {0, 1, 2, -1}) {
    INFO("dim " << dim);
    Tensor y = k::softmax(x, dim), ly = k::log_softmax(x, dim);
    int64_t d = dim < 0 ? dim + 3 : dim;
    std::vector<double> ref(X.size());
    auto sums = naive_reduce(X, x.shape(), {d}, false);  // only for the layout of the keepdim output
    std::vector<double> mx = naive_reduce(X, x.shape(), {d}, true);
    Shape os = x.shape();
    os[d] = 1;
    Shape ost = contiguous_strides(os);
    std::vector<double> z(sums.size(), 0.0);
    auto out_index = [&](size_t i) {
      int64_t rem = static_cast<int64_t>(i), o = 0;
      for (int64_t q = 2; q >= 0; --q) {
        int64_t idx = rem % x.size(q);
        rem /= x.size(q);
        if (q != d) o += idx * ost[q];
      }
      return o;
    };
    for (size_t i = 0; i < X.size(); ++i) z[out_index(i)] += std::exp(X[i] - mx[out_index(i)]);
    for (size_t i = 0; i < X.size(); ++i) ref[i] = std::exp(X[i] - mx[out_index(i)]) / z[out_index(i)];
    CHECK(max_abs_diff(dense(y), ref) < 1e-15);
    std::vector<double> lref(ref.size());
    for (size_t i = 0; i < ref.size(); ++i) lref[i] = std::log(ref[i]);
    CHECK(max_abs_diff(dense(ly), lref) < 1e-14);
    auto row_sums = dense(k::sum(y, {dim}));
    for (double s : row_sums) CHECK(s == doctest::Approx(1.0).epsilon(1e-14));
  }
  // a transposed input
  Tensor t = k::transpose(f32({6, 3}, 62), 0, 1);
  for (double s : dense(k::sum(k::softmax(t, 1), {1}))) CHECK(s == doctest::Approx(1.0).epsilon(1e-6));
}

TEST_CASE("softmax: a fully -inf row gives NaN; large logits do not overflow") {
  Tensor x = Tensor::from({-INFINITY, -INFINITY, -INFINITY, 0, 1, 2}, {2, 3});
  auto y = k::softmax(x, 1).to_vector<double>();
  for (int i = 0; i < 3; ++i) CHECK(std::isnan(y[i]));
  for (int i = 3; i < 6; ++i) CHECK(std::isfinite(y[i]));
  auto ly = k::log_softmax(x, 1).to_vector<double>();
  for (int i = 0; i < 3; ++i) CHECK(std::isnan(ly[i]));
  // a partially masked row is a distribution over the rest
  Tensor part = Tensor::from({-INFINITY, 0, 0}, {1, 3});
  CHECK(k::softmax(part, 1).to_vector<double>() == std::vector<double>{0, 0.5, 0.5});

  Tensor big = Tensor::from({1000, 1001, 1002, -1000}, {1, 4});
  auto s = k::softmax(big, 1).to_vector<double>();
  double z = std::exp(-2.0) + std::exp(-1.0) + 1.0;
  CHECK(s[0] == doctest::Approx(std::exp(-2.0) / z).epsilon(1e-6));
  CHECK(s[2] == doctest::Approx(1.0 / z).epsilon(1e-6));
  CHECK(s[3] == 0.0);
  auto ls = k::log_softmax(big, 1).to_vector<double>();
  CHECK(ls[2] == doctest::Approx(-std::log(z)).epsilon(1e-6));
  CHECK(ls[3] == doctest::Approx(-2002.0 - std::log(z)).epsilon(1e-6));
}

TEST_CASE("softmax float32 rows: within 1e-6 of double at every length around the 16 partials, the same bits on 1 and 2 threads, NaN stays") {
  for (int64_t n : {1, 5, 15, 16, 17, 33, 64, 100, 257}) {
    CAPTURE(n);
    Tensor x = f32({7, n}, 80 + static_cast<uint64_t>(n));
    k::scale_(x, 4.0);
    const std::vector<double> X = x.to_vector<double>();
    const std::vector<double> y = k::softmax(x, 1).to_vector<double>(), ly = k::log_softmax(x, 1).to_vector<double>();
    for (int64_t r = 0; r < 7; ++r) {
      double m = -INFINITY, z = 0;
      for (int64_t j = 0; j < n; ++j) m = std::max(m, X[static_cast<size_t>(r * n + j)]);
      for (int64_t j = 0; j < n; ++j) z += std::exp(X[static_cast<size_t>(r * n + j)] - m);
      for (int64_t j = 0; j < n; ++j) {
        const size_t i = static_cast<size_t>(r * n + j);
        const double p = std::exp(X[i] - m) / z;
        CHECK(std::abs(y[i] - p) <= 1e-6 * p + 1e-12);
        CHECK(std::abs(ly[i] - std::log(p)) <= 1e-5);
      }
    }
  }
  {  // rows enough for the threads to split them
    Tensor big = f32({4096, 64}, 90);
    const int was = heed::num_threads();
    heed::set_num_threads(2);
    const std::vector<double> y2 = k::softmax(big, 1).to_vector<double>();
    heed::set_num_threads(1);
    const std::vector<double> y1 = k::softmax(big, 1).to_vector<double>();
    heed::set_num_threads(was);
    CHECK(y1 == y2);
  }
  // NaN anywhere in a row: that row is NaN (as PyTorch), the others are not.
  Tensor x = Tensor::from({0, NAN, 1, 2, 0, 1, 2, 3}, {2, 4});
  const std::vector<double> y = k::softmax(x, 1).to_vector<double>();
  for (int i = 0; i < 4; ++i) CHECK(std::isnan(y[static_cast<size_t>(i)]));
  for (int i = 4; i < 8; ++i) CHECK(std::isfinite(y[static_cast<size_t>(i)]));
}

// ---- indexing ----

TEST_CASE("index_select gathers rows and columns, repeated indices included") {
  Tensor t = k::reshape(Tensor::arange(12), {3, 4});
  Tensor idx = Tensor::from_i64({2, 0, 2}, {3});
  CHECK(k::index_select(t, 0, idx).to_vector<double>() == std::vector<double>{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11});
  Tensor c = k::index_select(t, -1, Tensor::from_i64({3, 3, 1}, {3}));
  CHECK(c.shape() == Shape{3, 3});
  CHECK(c.to_vector<double>() == std::vector<double>{3, 3, 1, 7, 7, 5, 11, 11, 9});
  CHECK(k::index_select(k::transpose(t, 0, 1), 0, Tensor::from_i64({1}, {1})).to_vector<double>() ==
        std::vector<double>{1, 5, 9});
  CHECK(k::index_select(t, 0, Tensor::empty({0}, DType::i64)).shape() == Shape{0, 4});
}

TEST_CASE("index_add_ sums the rows of repeated indices") {
  Tensor dst = Tensor::zeros({3, 2});
  Tensor src = Tensor::from({1, 2, 10, 20, 100, 200, 1000, 2000}, {4, 2});
  k::index_add_(dst, 0, Tensor::from_i64({2, 0, 2, 2}, {4}), src);
  CHECK(dst.to_vector<double>() == std::vector<double>{10, 20, 0, 0, 1101, 2202});
  k::index_add_(dst, 1, Tensor::from_i64({1, 1}, {2}), Tensor::ones({3, 2}));
  CHECK(dst.to_vector<double>() == std::vector<double>{10, 22, 0, 2, 1101, 2204});
}

TEST_CASE("index_add_ with many repeated indices and wide rows (parallel path) matches a naive loop") {
  const int64_t V = 50, D = 700, Kn = 400;
  std::vector<int64_t> ids(Kn);
  for (int64_t i = 0; i < Kn; ++i) ids[i] = (i * 7) % 13;  // 13 distinct rows, each ~30 times
  Tensor src = f32({Kn, D}, 63);
  Tensor dst = Tensor::zeros({V, D});
  k::index_add_(dst, 0, Tensor::from_i64(ids, {Kn}), src);
  const std::vector<float> S = src.to_vector<float>();
  std::vector<float> ref(static_cast<size_t>(V * D), 0.0f);
  for (int64_t i = 0; i < Kn; ++i)
    for (int64_t j = 0; j < D; ++j) ref[ids[i] * D + j] += S[i * D + j];
  CHECK(dst.to_vector<float>() == ref);  // summed in index order in float32: exactly the naive loop
}

TEST_CASE("concat joins along any dim, reading views by their strides") {
  Tensor a = Tensor::from({1, 2, 3, 4}, {2, 2});
  Tensor b = k::transpose(Tensor::from({5, 6, 7, 8, 9, 10}, {3, 2}), 0, 1);  // [[5,7,9],[6,8,10]]
  Tensor c = k::concat({a, b}, 1);
  CHECK(c.shape() == Shape{2, 5});
  CHECK(c.to_vector<double>() == std::vector<double>{1, 2, 5, 7, 9, 3, 4, 6, 8, 10});
  Tensor r = k::concat({a, Tensor::from({0, 0}, {1, 2}), a}, -2);
  CHECK(r.shape() == Shape{5, 2});
  CHECK(r.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 0, 0, 1, 2, 3, 4});
  CHECK(k::concat({a, Tensor::zeros({2, 0})}, 1).to_vector<double>() == a.to_vector<double>());
  CHECK(k::concat({Tensor::from_i64({1}, {1}), Tensor::from_i64({2, 3}, {2})}, 0).to_vector<int64_t>() ==
        std::vector<int64_t>{1, 2, 3});
  // Each input one block of the output (only size-1 dims before dim): a
  // contiguous input is copied whole, from its own offset (a narrowed view);
  // a transposed one element by element.
  Tensor big = Tensor::from({0, 0, 1, 2, 3, 4, 0, 0}, {4, 2});
  Tensor mid = k::narrow(big, 0, 1, 2);  // [[1, 2], [3, 4]], contiguous from element 2
  REQUIRE(mid.is_contiguous());
  Tensor bt = k::transpose(Tensor::from({5, 6, 7, 8}, {2, 2}), 0, 1);  // [[5, 7], [6, 8]]
  CHECK(k::concat({mid, bt, mid}, 0).to_vector<double>() ==
        std::vector<double>{1, 2, 3, 4, 5, 7, 6, 8, 1, 2, 3, 4});
  Tensor x = Tensor::from({1, 2, 3, 4, 5, 6}, {1, 2, 3}), y = Tensor::from({7, 8, 9}, {1, 1, 3});
  Tensor xy = k::concat({x, y}, 1);
  CHECK(xy.shape() == Shape{1, 3, 3});
  CHECK(xy.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9});
}

// ---- cross-entropy ----

TEST_CASE("cross_entropy kernel matches a naive log-softmax, with ignore_index") {
  const int64_t R = 6, V = 7;
  Tensor logits = test::det_tensor({R, V}, 71, -3, 3, DType::f64);
  const std::vector<double> L = dense(logits);
  std::vector<int64_t> tg = {3, 0, 6, -100, 2, 3};
  Tensor targets = Tensor::from_i64(tg, {R});
  std::vector<double> lse(R);
  double total = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < R; ++r) {
    double m = -INFINITY, z = 0;
    for (int64_t v = 0; v < V; ++v) m = std::max(m, L[r * V + v]);
    for (int64_t v = 0; v < V; ++v) z += std::exp(L[r * V + v] - m);
    lse[r] = m + std::log(z);
    if (tg[r] == -100) continue;
    total += lse[r] - L[r * V + tg[r]];  // -log_softmax at the target
    ++count;
  }
  k::CrossEntropyResult res = k::cross_entropy(logits, targets, -100);
  CHECK(res.saved.count == 5);
  CHECK(res.loss.dim() == 0);
  CHECK(res.loss.item() == doctest::Approx(total / 5.0).epsilon(1e-14));
  std::vector<double> lse_got = dense(res.saved.row_max), log_z = dense(res.saved.log_z);
  for (size_t r = 0; r < lse_got.size(); ++r) lse_got[r] += log_z[r];
  CHECK(max_abs_diff(lse_got, lse) < 1e-14);

  // backward: g (softmax - onehot) / count, zero rows where ignored
  Tensor d = k::cross_entropy_backward(logits, targets, res.saved, 2.0);
  const std::vector<double> D = dense(d);
  std::vector<double> ref(static_cast<size_t>(R * V), 0.0);
  for (int64_t r = 0; r < R; ++r) {
    if (tg[r] == -100) continue;
    for (int64_t v = 0; v < V; ++v)
      ref[r * V + v] = 2.0 * (std::exp(L[r * V + v] - lse[r]) - (v == tg[r] ? 1.0 : 0.0)) / 5.0;
  }
  CHECK(max_abs_diff(D, ref) < 1e-14);

  // a transposed logits view, a non-default ignore_index, and every row ignored
  Tensor lt = k::transpose(k::contiguous(k::transpose(logits, 0, 1)), 0, 1);
  CHECK(k::cross_entropy(lt, targets, -100).loss.item() == doctest::Approx(total / 5.0).epsilon(1e-14));
  k::CrossEntropyResult ign = k::cross_entropy(logits, Tensor::from_i64({3, 3, 3, 3, 3, 3}, {R}), 3);
  CHECK(ign.saved.count == 0);
  CHECK(std::isnan(ign.loss.item()));
}

TEST_CASE("cross_entropy kernel with logits tied at the maximum: each counts in the log-sum-exp") {
  // PyTorch (float64): F.cross_entropy on these rows and targets 0, 2, 3 is
  // 1.8514201817924212; the rows' logsumexp is log 4, 2 + log(2 + e^-2 + e^-3)
  // and 1.5 + log 4; the gradient is (softmax - onehot) / 3.
  Tensor logits = Tensor::from_f64({0, 0, 0, 0, 2, 2, 0, -1, 1.5, 1.5, 1.5, 1.5}, {3, 4});
  Tensor targets = Tensor::from_i64({0, 2, 3}, {3});
  k::CrossEntropyResult r = k::cross_entropy(logits, targets, -100);
  CHECK(r.loss.item() == doctest::Approx(1.8514201817924212).epsilon(1e-14));
  std::vector<double> lse = r.saved.row_max.to_vector<double>();
  for (size_t i = 0; i < lse.size(); ++i) lse[i] += r.saved.log_z.to_vector<double>()[i];
  CHECK(lse[0] == doctest::Approx(1.3862943611198906).epsilon(1e-14));
  CHECK(lse[1] == doctest::Approx(2.7816718231374824).epsilon(1e-14));
  CHECK(lse[2] == doctest::Approx(2.886294361119891).epsilon(1e-14));
  const std::vector<double> want{-0.25, 1.0 / 12, 1.0 / 12, 1.0 / 12,
                                 0.15254675926433847, 0.15254675926433847, -0.3126883744614667, 0.007594855932789702,
                                 1.0 / 12, 1.0 / 12, 1.0 / 12, -0.25};
  Tensor d = k::cross_entropy_backward(logits, targets, r.saved, 1.0);
  CHECK(max_abs_diff(dense(d), want) < 1e-14);
  // float32: a uniform prediction over V classes costs log V.
  CHECK(k::cross_entropy(Tensor::zeros({2, 8}), Tensor::from_i64({3, 7}, {2}), -100).loss.item() ==
        doctest::Approx(std::log(8.0)).epsilon(1e-6));
}

TEST_CASE("cross_entropy kernel on large logits stays finite and exact") {
  Tensor logits = Tensor::from({1000, 0, -1000, 50}, {2, 2});
  auto r = k::cross_entropy(logits, Tensor::from_i64({1, 0}, {2}), -100);
  // row 0: lse = 1000, loss 1000; row 1: lse = 50 + log(1 + e^-1050) = 50, loss 1050
  CHECK(r.loss.item() == doctest::Approx(1025.0).epsilon(1e-6));
}

TEST_CASE("cross_entropy in float32 keeps the gradient's and the loss's precision far from zero (logits c + small)") {
  // Logits c + {0, 1, -1, 0.5}, target 0: the softmax does not depend on c.
  // The gradient once came from exp(x - lse) with lse = c + log z rounded
  // to float32, which loses log z's digits to c: a relative error of 4.7e-4
  // at c = 1e4 (PyTorch: 5e-8). Reference: the same rows at c = 0 in float64.
  const std::vector<double> d = {0, 1, -1, 0.5};
  Tensor ref_logits = Tensor::from_f64(d, {1, 4});
  const Tensor t = Tensor::from_i64({0}, {1});
  k::CrossEntropyResult ref = k::cross_entropy(ref_logits, t, -100);
  const std::vector<double> ref_grad = dense(k::cross_entropy_backward(ref_logits, t, ref.saved, 1.0));
  for (double c : {0.0, 100.0, 1e3, 1e4}) {
    INFO("c = " << c);
    std::vector<float> row;
    for (double v : d) row.push_back(static_cast<float>(c + v));  // c + v is exact in float32 at these c
    Tensor logits = Tensor::from(row, {1, 4});
    k::CrossEntropyResult r = k::cross_entropy(logits, t, -100);
    CHECK(r.loss.item() == doctest::Approx(ref.loss.item()).epsilon(1e-6));
    const std::vector<double> g = dense(k::cross_entropy_backward(logits, t, r.saved, 1.0));
    for (size_t i = 0; i < g.size(); ++i) CHECK(std::abs(g[i] - ref_grad[i]) <= 2e-7 * std::abs(ref_grad[i]));
  }
  // Equal logits near float32's largest: log 6, not 0 (m + log z, then minus
  // the target's logit, rounded log z away in double too).
  Tensor big = Tensor::full({1, 6}, 3e38f);
  CHECK(k::cross_entropy(big, t, -100).loss.item() == doctest::Approx(std::log(6.0)).epsilon(1e-6));
}

// ---- runtime ----

TEST_CASE("set_num_threads controls the pools; backend_info reports OpenBLAS and oneDNN on OpenMP") {
  const int before = heed::num_threads();
  heed::set_num_threads(1);
  CHECK(heed::num_threads() == 1);
  CHECK(heed::backend_info().find("OpenMP threads=1") != std::string::npos);
  heed::set_num_threads(2);
  CHECK(heed::num_threads() == 2);
  heed::set_num_threads(before);
  test::check_error([] { heed::set_num_threads(0); }, {"set_num_threads", "0"});
  // One thread pool, not two: OpenBLAS must be the OpenMP build (see the
  // CMake note on libopenblas0-openmp), or its pthreads fight oneDNN's.
  const std::string info = heed::backend_info();
  INFO(info);
  CHECK(info.find("OpenBLAS") != std::string::npos);
  CHECK(info.find("threading=OpenMP") != std::string::npos);
  // oneDNN (convolutions, the mid-sized matrix products) shares that pool.
  CHECK(info.find("oneDNN") != std::string::npos);
  CHECK(info.find("oneDNN") < info.rfind("threading=OpenMP"));
  // The 5-tap convolution algorithm, which run logs record.
  CHECK(info.find(kernel::winograd_conv1d_supported() ? "conv1d 5-tap: Winograd F(4,5)" : "conv1d 5-tap: direct") !=
        std::string::npos);
  heed::set_conv1d_winograd(false);
  CHECK(heed::backend_info().find("conv1d 5-tap: direct") != std::string::npos);
  heed::set_conv1d_winograd(true);
}

TEST_CASE("element-wise results keep a dense input's memory order (channels-last stays channels-last)") {
  // [N, C, T] stored as [N, T, C]: C unit-stride.
  Tensor base = test::det_tensor({2, 5, 3}, 11);  // [N, T, C] storage
  Tensor x = kernel::permute(base, {0, 2, 1});    // [N, C, T] view
  REQUIRE_FALSE(x.is_contiguous());
  Tensor e = kernel::empty_like_dense(x);
  CHECK(e.shape() == x.shape());
  CHECK(e.strides() == x.strides());
  // Each op's values are those of the contiguous computation, element by element.
  Tensor xc = kernel::contiguous(x);
  auto same_values = [](const Tensor& a, const Tensor& b) { CHECK(a.to_vector<double>() == b.to_vector<double>()); };
  Tensor r = kernel::unary(kernel::Unary::relu, x);
  CHECK(r.strides() == x.strides());
  same_values(r, kernel::unary(kernel::Unary::relu, xc));
  Tensor g = kernel::unary_backward(kernel::Unary::relu, x, x);
  CHECK(g.strides() == x.strides());
  same_values(g, kernel::unary_backward(kernel::Unary::relu, xc, xc));
  Tensor s = kernel::binary(kernel::Binary::mul, x, x);
  CHECK(s.strides() == x.strides());
  same_values(s, kernel::binary(kernel::Binary::mul, xc, xc));
  // A broadcast operand takes the full-shape operand's layout, from either side.
  Tensor bias = test::det_tensor({1, 3, 1}, 12);
  CHECK(kernel::binary(kernel::Binary::add, x, bias).strides() == x.strides());
  CHECK(kernel::binary(kernel::Binary::sub, bias, x).strides() == x.strides());
  same_values(kernel::binary(kernel::Binary::sub, bias, x), kernel::binary(kernel::Binary::sub, bias, xc));
  // Not dense (a slice): contiguous results.
  Tensor sliced = kernel::narrow(x, 2, 0, 4);
  CHECK(kernel::unary(kernel::Unary::neg, sliced).is_contiguous());
  CHECK(kernel::empty_like_dense(sliced).is_contiguous());
  // Size-1 dims do not get in the way.
  Tensor one = kernel::permute(test::det_tensor({2, 1, 4, 3}, 13), {0, 3, 1, 2});  // [2, 3, 1, 4]
  CHECK(kernel::unary(kernel::Unary::neg, one).strides() == kernel::empty_like_dense(one).strides());
  same_values(kernel::unary(kernel::Unary::neg, one), kernel::unary(kernel::Unary::neg, kernel::contiguous(one)));
}

TEST_CASE("factories: linspace includes both ends exactly; arange steps up or down; bad ranges are named") {
  CHECK(Tensor::linspace(-1, 1, 5, DType::f64).to_vector<double>() == std::vector<double>{-1, -0.5, 0, 0.5, 1});
  Tensor p = Tensor::linspace(-M_PI, M_PI, 256, DType::f64);
  CHECK(p.to_vector<double>().front() == -M_PI);
  CHECK(p.to_vector<double>().back() == M_PI);
  CHECK(Tensor::linspace(2, 3, 1).to_vector<double>() == std::vector<double>{2});
  CHECK(Tensor::linspace(2, 3, 0).numel() == 0);
  CHECK(Tensor::arange(0, 1, 0.25).to_vector<double>() == std::vector<double>{0, 0.25, 0.5, 0.75});
  CHECK(Tensor::arange(5, 1, -2, DType::i64).to_vector<double>() == std::vector<double>{5, 3});
  CHECK(Tensor::arange(1, 1).numel() == 0);
  test::check_error([] { Tensor::arange(0, 1, 0); }, {"arange", "nonzero step", "0"});
  test::check_error([] { Tensor::linspace(0, 1, -3); }, {"linspace", "n >= 0", "-3"});
}

TEST_CASE("contiguous of a transposed matrix: every element in place, tiles and their edges alike") {
  for (auto [R, C] : {std::array<int64_t, 2>{33, 70}, {32, 32}, {128, 512}, {100, 40}, {31, 90}}) {
    for (DType dt : {DType::f32, DType::f64, DType::i64}) {
      CAPTURE(R);
      CAPTURE(C);
      Tensor m = test::det_tensor({C, R}, 81, -100, 100).to(dt);  // stored [C, R]; viewed [R, C]
      Tensor t = kernel::contiguous(kernel::transpose(m, 0, 1));
      REQUIRE(t.is_contiguous());
      REQUIRE(t.shape() == Shape{R, C});
      const std::vector<double> mv = m.to_vector<double>(), tv = t.to_vector<double>();
      bool same = true;
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c) same &= tv[static_cast<size_t>(r * C + c)] == mv[static_cast<size_t>(c * R + r)];
      CHECK(same);
    }
  }
}

TEST_CASE("to_vector<int64_t> of floats truncates toward zero and refuses what is no int64 (NaN, inf, out of range)") {
  CHECK(Tensor::from({2.9f, -2.9f, 0.0f}, {3}).to_vector<int64_t>() == std::vector<int64_t>{2, -2, 0});
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  test::check_error([&] { Tensor::from(std::vector<float>{1, nan}, {2}).to_vector<int64_t>(); },
                    {"to_vector<int64_t>: element 1 of a float32 tensor is nan"});
  test::check_error([&] { Tensor::from(std::vector<float>{-inf}, {1}).to_vector<int64_t>(); }, {"element 0", "-inf"});
  test::check_error([&] { Tensor::full({1}, 1e19, DType::f64).to_vector<int64_t>(); }, {"element 0", "not an int64"});
}
