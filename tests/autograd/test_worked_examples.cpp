// tests/autograd/test_worked_examples.cpp: the attention lectures' worked
// examples (../shared/spec/lecture-worked-examples.md), run through heed's
// differentiable ops.
//
// Two references per value:
//  - the spec's float64 recomputation, printed to 4 decimals, so
//    |got - spec| <= 5e-5 (half a unit in the last printed place);
//  - a plain float64 recomputation in this file (no heed code), at 1e-6 for
//    the float32 ops (a few float32 roundings of values up to ~6) and at 1e-12
//    when the same ops run in float64.
// Where a lecture's printed numbers are off, the spec says so; the recomputed
// values are the ones asserted here.
#include <cmath>
#include <limits>

#include "layers/positional.h"
#include "test_util.h"

using namespace heed;

namespace {

using Mat = std::vector<std::vector<double>>;  // row-major, plain float64

constexpr double kSpecTol = 5e-5;

Mat mm(const Mat& a, const Mat& b) {
  Mat c(a.size(), std::vector<double>(b[0].size(), 0.0));
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t k = 0; k < b.size(); ++k)
      for (size_t j = 0; j < b[0].size(); ++j) c[i][j] += a[i][k] * b[k][j];
  return c;
}

Mat tr(const Mat& a) {
  Mat t(a[0].size(), std::vector<double>(a.size()));
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[0].size(); ++j) t[j][i] = a[i][j];
  return t;
}

// Row-wise softmax of s * a; entries equal to -inf get weight 0.
Mat softmax_rows(const Mat& a, double s = 1.0) {
  Mat y = a;
  for (auto& r : y) {
    double m = -std::numeric_limits<double>::infinity(), z = 0;
    for (double v : r) m = std::max(m, v * s);
    for (double& v : r) z += (v = std::exp(v * s - m));
    for (double& v : r) v /= z;
  }
  return y;
}

std::vector<double> flat(const Mat& a) {
  std::vector<double> v;
  for (const auto& r : a) v.insert(v.end(), r.begin(), r.end());
  return v;
}

Tensor tensor(const Mat& a, DType dtype) {
  return kernel::to_dtype(Tensor::from_f64(flat(a), {int64_t(a.size()), int64_t(a[0].size())}), dtype);
}

double own_tol(DType dtype) { return dtype == DType::f32 ? 1e-6 : 1e-12; }

// Scaled dot-product attention as the lectures write it, from heed ops:
// softmax(Q K^T * scale) over keys, then A V. Q [T, K], K [S, K], V [S, D].
struct Attn {
  Tensor A, out;  // A [T, S], out [T, D]
};
Attn attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  Tensor a = softmax(matmul(q, transpose(k, 0, 1)) * scale, -1);
  return {a, matmul(a, v)};
}

const Mat kQ1 = {{1, 0}, {0, 1}, {1, 1}};
const Mat kK1 = {{1, 1}, {0, 1}, {1, 0}};
const Mat kV1 = {{1, 2}, {3, 4}, {5, 6}};

}  // namespace

TEST_CASE("worked example 1: scaled dot-product attention, d_k = 2") {
  const double scale = 1.0 / std::sqrt(2.0);
  const std::vector<double> spec_A = {0.4011, 0.1978, 0.4011, 0.4011, 0.4011, 0.1978, 0.5035, 0.2483, 0.2483};
  const std::vector<double> spec_AV = {3.0000, 4.0000, 2.5933, 3.5933, 2.4895, 3.4895};
  const Mat own_A = softmax_rows(mm(kQ1, tr(kK1)), scale);
  const Mat own_AV = mm(own_A, kV1);
  for (DType dt : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(dt));
    Attn r = attention(tensor(kQ1, dt), tensor(kK1, dt), tensor(kV1, dt), scale);
    CHECK(r.A.dtype() == dt);
    test::check_close(r.A, spec_A, kSpecTol);
    test::check_close(r.out, spec_AV, kSpecTol);
    test::check_close(r.A, flat(own_A), own_tol(dt));
    test::check_close(r.out, flat(own_AV), own_tol(dt));
  }
}

TEST_CASE("worked example 1: attention gradients w.r.t. Q, K, V pass gradcheck (float64)") {
  std::vector<Tensor> in;
  for (const Mat* m : {&kQ1, &kK1, &kV1}) {
    Tensor t = kernel::to_dtype(tensor(*m, DType::f32), DType::f64);
    t.set_requires_grad(true);
    in.push_back(t);
  }
  auto r = autograd::gradcheck(
      [](const std::vector<Tensor>& x) { return attention(x[0], x[1], x[2], 1.0 / std::sqrt(2.0)).out; }, in);
  INFO("max |error| " << r.max_abs_err << "\n" << r.report);
  CHECK(r.ok);
}

TEST_CASE("worked example 2: self-attention with identity projections") {
  // Tokens are rows: Q = X W_Q, K = X W_K, V = X W_V, here with W = I_2.
  const Mat X = {{1, 0}, {0, 1}, {1, 1}};
  const Mat I2 = {{1, 0}, {0, 1}};
  const std::vector<double> spec_A = {0.4011, 0.1978, 0.4011, 0.1978, 0.4011, 0.4011, 0.2483, 0.2483, 0.5035};
  const std::vector<double> spec_Y = {0.8022, 0.5989, 0.5989, 0.8022, 0.7517, 0.7517};
  const Mat own_A = softmax_rows(mm(X, tr(X)), 1.0 / std::sqrt(2.0));
  const Mat own_Y = mm(own_A, X);
  for (DType dt : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(dt));
    Tensor x = tensor(X, dt), w = tensor(I2, dt);
    Attn r = attention(matmul(x, w), matmul(x, w), matmul(x, w), 1.0 / std::sqrt(2.0));
    test::check_close(r.A, spec_A, kSpecTol);
    test::check_close(r.out, spec_Y, kSpecTol);
    test::check_close(r.A, flat(own_A), own_tol(dt));
    test::check_close(r.out, flat(own_Y), own_tol(dt));
  }
}

TEST_CASE("worked example 3: causal mask via masked_fill(-inf) then softmax") {
  const Mat scores = {{0.5, 1.2, 0.8}, {0.3, 0.9, 1.1}, {0.2, 0.7, 0.4}};
  // The lecture prints [0.24, 0.76, 0] and [0.15, 0.49, 0.36] for rows 2 and
  // 3; those are not the softmax of these scores.
  const std::vector<double> spec = {1, 0, 0, 0.3543, 0.6457, 0, 0.2584, 0.4260, 0.3156};
  Mat masked = scores;
  for (size_t i = 0; i < 3; ++i)
    for (size_t j = i + 1; j < 3; ++j) masked[i][j] = -std::numeric_limits<double>::infinity();
  const Mat own = softmax_rows(masked);
  for (DType dt : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(dt));
    Tensor s = tensor(scores, dt);
    s.set_requires_grad(true);
    Tensor a = softmax(masked_fill(s, causal_mask(3), -std::numeric_limits<double>::infinity()), -1);
    test::check_close(a, spec, kSpecTol);
    test::check_close(a, flat(own), own_tol(dt));
    // Future positions get exactly zero weight, and no gradient.
    CHECK(a.at({0, 1}) == 0.0);
    CHECK(a.at({0, 2}) == 0.0);
    CHECK(a.at({1, 2}) == 0.0);
    backward(sum(a * test::det_tensor({3, 3}, 5, -1, 1, dt)));
    Tensor g = s.grad();
    REQUIRE(g.defined());
    CHECK(kernel::all_finite(g));
    CHECK(g.at({0, 1}) == 0.0);
    CHECK(g.at({0, 2}) == 0.0);
    CHECK(g.at({1, 2}) == 0.0);
  }
}

TEST_CASE("worked example 4: one query's weights adapt to the query") {
  // Keys and values are rows; no scaling. Both queries run as one batch [2, 2].
  const Mat K = {{1, 0}, {0.5, 0.5}, {-1, -1}};
  const Mat V = {{10, 0}, {0, 10}, {5, 5}};
  const Mat Q = {{1, 1}, {-1, -1}};
  const std::vector<double> spec_scores = {1, 1, -2, -1, -1, 2};
  const std::vector<double> spec_w = {0.4879, 0.4879, 0.0243, 0.0453, 0.0453, 0.9094};
  const std::vector<double> spec_out = {5, 5, 5, 5};
  const Mat own_w = softmax_rows(mm(Q, tr(K)));
  const Mat own_out = mm(own_w, V);
  for (DType dt : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(dt));
    Tensor q = tensor(Q, dt), k = tensor(K, dt), v = tensor(V, dt);
    test::check_close(matmul(q, transpose(k, 0, 1)), spec_scores, 0.0);  // exact in binary
    Attn r = attention(q, k, v, 1.0);
    test::check_close(r.A, spec_w, kSpecTol);
    test::check_close(r.out, spec_out, kSpecTol);
    test::check_close(r.A, flat(own_w), own_tol(dt));
    test::check_close(r.out, flat(own_out), own_tol(dt));
    // A single query as a vector: matmul drops the vector dim.
    Tensor w1 = softmax(matmul(k, kernel::to_dtype(Tensor::from({1, 1}, {2}), dt)), 0);
    CHECK(w1.shape() == Shape{3});
    test::check_close(w1, {spec_w[0], spec_w[1], spec_w[2]}, kSpecTol);
  }
}

TEST_CASE("worked example 4: softmax([2.1, -0.5, 3.8, 0.2])") {
  const Mat x = {{2.1, -0.5, 3.8, 0.2}};
  const std::vector<double> spec = {0.1493, 0.0111, 0.8173, 0.0223};
  for (DType dt : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(dt));
    Tensor y = softmax(reshape(tensor(x, dt), {4}), 0);
    test::check_close(y, spec, kSpecTol);
    test::check_close(y, flat(softmax_rows(x)), own_tol(dt));
  }
}

TEST_CASE("worked example 5: attention with W_K = c S copies the previous token") {
  // Conventions. The spec (and this test) puts tokens in ROWS: X [T, D] with
  // X = I_4, Q = X W_Q, K = X W_K, V = X W_V and A = softmax(Q K^T) row-wise
  // (row i = query i, column j = key j). S is the shift matrix with
  // S[i][i+1] = 1 (superdiagonal). Then Q K^T = X (c S)^T = c S^T, and S^T
  // has its ones on the SUBdiagonal: row i is one-hot at column i-1, so query
  // i attends to key i-1 and (A V)_i = x_{i-1}. Row 1 (0-based row 0) of S^T
  // is all zeros, so that query's weights are uniform.
  //
  // heed's SelfAttention layer is channels-first (tokens in COLUMNS: Q = Wq x,
  // A = Q^T K): there the same W_K = c S gives Q^T K = c S, one-hot at column
  // i+1 (a copy of the NEXT token); copying the previous token there needs
  // W_K = c S^T (as tests/layers/test_layers.cpp sets it). Both products are
  // pinned below.
  const int64_t n = 4;
  const double c = 30.0;
  Tensor X = Tensor::zeros({n, n}), S = Tensor::zeros({n, n});
  for (int64_t i = 0; i < n; ++i) X.data<float>()[i * n + i] = 1.0f;
  for (int64_t i = 0; i + 1 < n; ++i) S.data<float>()[i * n + i + 1] = 1.0f;
  Tensor W_Q = X, W_V = X, W_K = S * c;  // X = I_4, so it doubles as the identity

  SUBCASE("tokens as rows: softmax(Q K^T) V shifts by one") {
    Tensor Q = matmul(X, W_Q), K = matmul(X, W_K), V = matmul(X, W_V);
    Tensor scores = matmul(Q, transpose(K, 0, 1));  // c S^T
    test::check_close(scores, {0, 0, 0, 0, c, 0, 0, 0, 0, c, 0, 0, 0, 0, c, 0}, 0.0);
    Tensor Y = matmul(softmax(scores, -1), V);  // [T, D], no scaling
    test::check_close(Y,
                      {0.25, 0.25, 0.25, 0.25,  // row 1: uniform average
                       1, 0, 0, 0,              // rows 2..4: e_1, e_2, e_3
                       0, 1, 0, 0,              //
                       0, 0, 1, 0},
                      1e-6);
  }
  SUBCASE("tokens as columns (the SelfAttention layer's layout): the same W_K copies the next token") {
    Tensor Q = matmul(W_Q, X), K = matmul(W_K, X), V = matmul(W_V, X);  // [D, T]
    Tensor A = softmax(matmul(transpose(Q, 0, 1), K), -1);             // c S, [T(query), T(key)]
    Tensor Y = matmul(V, transpose(A, 0, 1));                          // [D, T]: column t is output t
    Tensor Yt = transpose(Y, 0, 1);                                    // rows = outputs
    test::check_close(Yt, {0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0.25, 0.25, 0.25, 0.25}, 1e-6);
    // With W_K = c S^T the layer's layout copies the previous token.
    Tensor A2 = softmax(matmul(transpose(Q, 0, 1), matmul(transpose(W_K, 0, 1), X)), -1);
    Tensor Y2 = transpose(matmul(V, transpose(A2, 0, 1)), 0, 1);
    test::check_close(Y2, {0.25, 0.25, 0.25, 0.25, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0}, 1e-6);
  }
}

// ---- example 8: sinusoidal positional encoding ----

TEST_CASE("worked example 8: sinusoidal encoding, hand-computed entries") {
  Tensor pe = sinusoidal_encoding(3, 4);
  CHECK(pe.shape() == Shape{3, 4});
  CHECK(pe.dtype() == DType::f32);
  // pos 0: sin 0 = 0 and cos 0 = 1, alternating.
  test::check_close(narrow(pe, 0, 0, 1), {0, 1, 0, 1}, 0.0);
  // pos 1, D = 4: frequencies 10000^0 = 1 and 10000^(-2/4) = 1/100.
  test::check_close(narrow(pe, 0, 1, 1), {std::sin(1.0), std::cos(1.0), std::sin(0.01), std::cos(0.01)}, 1e-7);
  test::check_close(narrow(pe, 0, 2, 1), {std::sin(2.0), std::cos(2.0), std::sin(0.02), std::cos(0.02)}, 1e-7);
}

TEST_CASE("worked example 8: odd D ends with a sine column that has no cosine partner") {
  const int64_t T = 7, D = 5;
  Tensor pe = sinusoidal_encoding(T, D);
  CHECK(pe.shape() == Shape{T, D});
  for (int64_t pos = 0; pos < T; ++pos) {
    CAPTURE(pos);
    // Last column is 2i = 4: sin(pos / 10000^(4/5)).
    CHECK(std::abs(pe.at({pos, 4}) - std::sin(pos / std::pow(10000.0, 0.8))) <= 1e-7);
    CHECK(std::abs(pe.at({pos, 3}) - std::cos(pos / std::pow(10000.0, 0.4))) <= 1e-7);
  }
  CHECK(sinusoidal_encoding(4, 1).shape() == Shape{4, 1});
  CHECK(sinusoidal_encoding(0, 6).shape() == Shape{0, 6});
}

TEST_CASE("worked example 8: PE(pos + k) is a fixed rotation of PE(pos) for every frequency pair") {
  // sin(a + b) = sin a cos b + cos a sin b and cos(a + b) = cos a cos b - sin a sin b
  // with a = pos w, b = k w: per pair, [s, c](pos + k) = [s, c](pos) R_k with
  // R_k = [[cos kw, -sin kw], [sin kw, cos kw]], independent of pos. Built as
  // one block-diagonal [D, D] matrix and applied to every position at once.
  const int64_t T = 40, D = 8, k = 3;
  Tensor pe = sinusoidal_encoding(T + k, D);  // [T + k, D]
  std::vector<double> R(D * D, 0.0);
  for (int64_t c = 0; c < D; c += 2) {
    double b = k * std::pow(10000.0, -double(c) / D);
    R[c * D + c] = std::cos(b), R[c * D + c + 1] = -std::sin(b);
    R[(c + 1) * D + c] = std::sin(b), R[(c + 1) * D + c + 1] = std::cos(b);
  }
  Tensor shifted = matmul(narrow(pe, 0, 0, T), kernel::to_dtype(Tensor::from_f64(R, {D, D}), DType::f32));
  test::check_close(shifted, narrow(pe, 0, k, T).to_vector<double>(), 1e-5);
}

TEST_CASE("worked example 8: bad sizes throw, naming the value") {
  test::check_error([] { sinusoidal_encoding(-1, 4); }, {"sinusoidal_encoding", "T=-1"});
  test::check_error([] { sinusoidal_encoding(3, 0); }, {"sinusoidal_encoding", "D=0"});
  test::check_error([] { sinusoidal_encoding(3, -2); }, {"sinusoidal_encoding", "D=-2"});
}
