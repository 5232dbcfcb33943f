// tests/core/test_format.cpp: Tensor::str() and the fmt / iostream hooks,
// pinned to exact strings.
#include <doctest/doctest.h>

#include <limits>
#include <sstream>
#include <string>

#include "core/format.h"

using namespace heed;

TEST_CASE("a 2x2 float tensor prints with aligned 4-decimal columns, shape and dtype") {
  Tensor t = Tensor::from({1, 2, 3, 4}, {2, 2});
  CHECK(t.str() ==
        "tensor([[ 1.0000,  2.0000],\n"
        "        [ 3.0000,  4.0000]], shape=[2, 2], dtype=float32)");
}

TEST_CASE("negative values use the column kept for the sign") {
  Tensor t = Tensor::from_f64({-1.5, 2.25, 10, -0.125}, {2, 2});
  CHECK(t.str() ==
        "tensor([[ -1.5000,   2.2500],\n"
        "        [ 10.0000,  -0.1250]], shape=[2, 2], dtype=float64)");
}

TEST_CASE("a scalar prints without brackets or shape") {
  CHECK(Tensor::from({3.5f}, {}).str() == "tensor(3.5000, dtype=float32)");
  CHECK(Tensor::from_f64({-0.25}, {}).str() == "tensor(-0.2500, dtype=float64)");
  CHECK(Tensor::from_i64({-7}, {}).str() == "tensor(-7, dtype=int64)");
}

TEST_CASE("an int64 vector prints integers right-aligned") {
  Tensor t = Tensor::from_i64({1, -20, 300}, {3});
  CHECK(t.str() == "tensor([  1, -20, 300], shape=[3], dtype=int64)");
}

TEST_CASE("very large or small magnitudes switch to scientific notation") {
  CHECK(Tensor::from_f64({1e-5, 1.0}, {2}).str() == "tensor([ 1.0000e-05,  1.0000e+00], shape=[2], dtype=float64)");
  CHECK(Tensor::from({2e9f, -3.0f}, {2}).str() == "tensor([ 2.0000e+09, -3.0000e+00], shape=[2], dtype=float32)");
  // Within 1000x and between 1e-4 and 1e8: fixed point.
  CHECK(Tensor::from_f64({0.001, 0.5}, {2}).str() == "tensor([ 0.0010,  0.5000], shape=[2], dtype=float64)");
}

TEST_CASE("non-finite values and zeros") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(Tensor::from_f64({0, inf, -inf, -nan}, {4}).str() ==
        "tensor([ 0.0000,     inf,    -inf,     nan], shape=[4], dtype=float64)");
}

TEST_CASE("a transposed (non-contiguous) view prints in its logical order") {
  Tensor base = Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor t = Tensor::view_of(base, {3, 2}, {1, 3}, 0);
  CHECK(t.str() ==
        "tensor([[ 1.0000,  4.0000],\n"
        "        [ 2.0000,  5.0000],\n"
        "        [ 3.0000,  6.0000]], shape=[3, 2], dtype=float32)");
}

TEST_CASE("a view with an offset prints only its own elements") {
  Tensor base = Tensor::from_i64({0, 1, 2, 3, 4, 5, 6, 7}, {8});
  CHECK(Tensor::view_of(base, {3}, {2}, 1).str() == "tensor([1, 3, 5], shape=[3], dtype=int64)");
}

TEST_CASE("3-D tensors leave a blank line between matrices") {
  Tensor t = Tensor::from_i64({0, 1, 2, 3, 4, 5, 6, 7}, {2, 2, 2});
  CHECK(t.str() ==
        "tensor([[[0, 1],\n"
        "         [2, 3]],\n"
        "\n"
        "        [[4, 5],\n"
        "         [6, 7]]], shape=[2, 2, 2], dtype=int64)");
}

TEST_CASE("more than 1000 elements are summarised to the first and last 3 per dim") {
  Tensor flat = Tensor::arange(2000, DType::i64);
  Tensor t = Tensor::view_of(flat, {40, 50}, {50, 1}, 0);
  const std::string s = t.str();
  CHECK(s ==
        "tensor([[   0,    1,    2,  ...,   47,   48,   49],\n"
        "        [  50,   51,   52,  ...,   97,   98,   99],\n"
        "        [ 100,  101,  102,  ...,  147,  148,  149],\n"
        "        ...,\n"
        "        [1850, 1851, 1852,  ..., 1897, 1898, 1899],\n"
        "        [1900, 1901, 1902,  ..., 1947, 1948, 1949],\n"
        "        [1950, 1951, 1952,  ..., 1997, 1998, 1999]], shape=[40, 50],\n"
        "       dtype=int64)");

  // A million floats: 6 matrices of 6 rows of 6 values are shown, about 4 kB
  // (printed in full it would be over 12 MB).
  Tensor big = Tensor::arange(1000000, DType::f32);
  const std::string b = Tensor::view_of(big, {100, 100, 100}, {10000, 100, 1}, 0).str();
  CHECK(b.find(" ...") != std::string::npos);
  CHECK(b.find("...,\n\n") != std::string::npos);  // the skipped matrices
  CHECK(b.size() < 5000);
}

TEST_CASE("long rows wrap at 80 columns") {
  Tensor t = Tensor::arange(20, DType::f64);
  CHECK(t.str() ==
        "tensor([  0.0000,   1.0000,   2.0000,   3.0000,   4.0000,   5.0000,   6.0000,\n"
        "          7.0000,   8.0000,   9.0000,  10.0000,  11.0000,  12.0000,  13.0000,\n"
        "         14.0000,  15.0000,  16.0000,  17.0000,  18.0000,  19.0000], shape=[20],\n"
        "       dtype=float64)");
}

TEST_CASE("requires_grad is shown; an empty or undefined tensor prints plainly") {
  Tensor t = Tensor::from({1.0f, -2.5f}, {2});
  t.set_requires_grad(true);
  CHECK(t.str() == "tensor([ 1.0000, -2.5000], shape=[2], dtype=float32, requires_grad=True)");
  CHECK(Tensor::empty({0, 3}).str() == "tensor([], shape=[0, 3], dtype=float32)");
  CHECK(Tensor().str() == "tensor(undefined)");
}

TEST_CASE("fmt and ostream print the same text as str()") {
  Tensor t = Tensor::from({1, 2, 3, 4}, {2, 2});
  CHECK(fmt::format("{}", t) == t.str());
  std::ostringstream os;
  os << t;
  CHECK(os.str() == t.str());
  CHECK(fmt::format("{}", Tensor()) == "tensor(undefined)");
}
