// tests/core/test_quantize.cpp: the quantizers of core/quantize.h, and the
// attention lecture's claims about them, measured with stated tolerances.
#include <cstring>
#include <limits>
#include <random>

#include "test_util.h"

using namespace heed;
using quant::Method;

namespace {

quant::Options opts(Method m, int bits, quant::Range range = quant::Range::row, int64_t rank = 0,
                    uint64_t seed = 1) {
  quant::Options o;
  o.method = m;
  o.bits = bits;
  o.range = range;
  o.rank = rank;
  o.seed = seed;
  return o;
}

Tensor gaussian(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, &g, DType::f64);
}

// Per-row relative errors ||x_r - q_r|| / ||x_r||, averaged.
double mean_row_error(const Tensor& x, const Tensor& q) {
  const int64_t R = x.size(0), C = x.size(1);
  std::vector<double> a = x.to_vector<double>(), b = q.to_vector<double>();
  double sum = 0;
  for (int64_t r = 0; r < R; ++r) {
    double num = 0, den = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double u = a[static_cast<size_t>(r * C + c)], v = b[static_cast<size_t>(r * C + c)];
      num += (u - v) * (u - v);
      den += u * u;
    }
    sum += std::sqrt(num / den);
  }
  return sum / static_cast<double>(R);
}

// The bytes of a quantized matrix's tensors, the descriptor left out.
int64_t stored_bytes(const std::map<std::string, Tensor>& s) {
  int64_t b = 0;
  for (const auto& [k, t] : s)
    if (k != "meta") b += t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
  return b;
}

bool is_e8_point(const double y[8]) {
  const bool integer = std::floor(y[0]) == y[0];
  double sum = 0;
  for (int i = 0; i < 8; ++i) {
    const double frac = y[i] - std::floor(y[i]);
    if (integer ? frac != 0.0 : frac != 0.5) return false;
    sum += y[i];
  }
  return std::fmod(sum, 2.0) == 0.0;  // D8: an even sum; D8 + 1/2: its sum (that of D8, plus 4) too
}

}  // namespace

TEST_CASE("the lecture's claim, measured: after the randomized Hadamard rotation the error of a vector with one "
          "large coordinate is far below plain uniform quantization and grows like sqrt(log d), not sqrt(d)") {
  // 32 vectors of each d: N(0, 1) coordinates and one of magnitude sqrt(d)
  // (half the vector's energy) at a random place; 8 bits, one range per row.
  // Plain uniform quantization: R = sqrt(d), every coordinate's error about
  // R / 255, so the relative error is ~ sqrt(d) / (255 sqrt(6)).
  // Rotated: max |S x| ~ 1 + sqrt(2 ln 2d), so the error ~ sqrt(log d).
  const std::vector<int64_t> ds = {64, 128, 256, 512, 1024, 2048, 4096};
  std::vector<double> plain, rotated;
  for (int64_t d : ds) {
    Tensor x = gaussian({32, d}, static_cast<uint64_t>(d));
    std::mt19937_64 pick(static_cast<uint64_t>(d));
    double* p = x.data<double>();
    for (int64_t r = 0; r < 32; ++r)
      p[r * d + static_cast<int64_t>(pick() % static_cast<uint64_t>(d))] =
          (pick() % 2 ? 1.0 : -1.0) * std::sqrt(static_cast<double>(d));
    plain.push_back(mean_row_error(x, quant::dequantize(quant::quantize(x, opts(Method::uniform, 8)))));
    rotated.push_back(mean_row_error(x, quant::dequantize(quant::quantize(x, opts(Method::hadamard, 8)))));
    MESSAGE("d " << d << ": uniform " << plain.back() << ", hadamard " << rotated.back() << " (ratio "
                 << plain.back() / rotated.back() << ")");
  }
  for (size_t i = 0; i < ds.size(); ++i) {
    const double d = static_cast<double>(ds[i]);
    CAPTURE(ds[i]);
    // Far below, and further below the larger d.
    if (i > 0) CHECK(plain[i] / rotated[i] > plain[i - 1] / rotated[i - 1]);
    // Plain: error / sqrt(d) constant within 10% across a 64x range of d.
    CHECK(plain[i] / std::sqrt(d) == doctest::Approx(plain[0] / 8.0).epsilon(0.10));
    // Rotated: error / sqrt(ln 2d) constant within 15%, while sqrt(d) grows 8x.
    CHECK(rotated[i] / std::sqrt(std::log(2 * d)) ==
          doctest::Approx(rotated[0] / std::sqrt(std::log(128.0))).epsilon(0.15));
  }
  CHECK(plain.front() / rotated.front() > 1.5);
  CHECK(plain.back() / rotated.back() > 8.0);
  // Over the whole range: plain grows ~8x (sqrt(64)), rotated under 1.5x.
  CHECK(plain.back() / plain.front() == doctest::Approx(8.0).epsilon(0.10));
  CHECK(rotated.back() / rotated.front() < 1.5);
}

TEST_CASE("every method's error shrinks with the bits; on Gaussian rows E8 beats the same grid's uniform "
          "quantization by about its normalised second moment (0.0717 against 1/12)") {
  Tensor w = gaussian({128, 256}, 3);
  for (Method m : {Method::uniform, Method::hadamard, Method::gaussian, Method::e8, Method::lplr}) {
    const std::string method = quant::method_name(m);
    CAPTURE(method);
    double prev = INFINITY;
    for (int bits : {2, 3, 4, 6, 8}) {
      const double e = quant::relative_error(
          w, quant::dequantize(quant::quantize(w, opts(m, bits, quant::Range::row, m == Method::lplr ? 128 : 0))));
      CAPTURE(bits);
      CHECK(e < prev);
      prev = e;
    }
  }
  // Squared error of E8 against the uniform quantizer after the same
  // rotation: the granular gain 0.0717 / 0.0833 = 0.86 (the cube's corners
  // and the clipped tails add a little to both).
  for (int bits : {3, 4, 5}) {
    const double eu = quant::relative_error(w, quant::dequantize(quant::quantize(w, opts(Method::hadamard, bits))));
    const double ee = quant::relative_error(w, quant::dequantize(quant::quantize(w, opts(Method::e8, bits))));
    CAPTURE(bits);
    MESSAGE("bits " << bits << ": squared error e8 / uniform = " << ee * ee / (eu * eu));
    CHECK(ee * ee / (eu * eu) == doctest::Approx(0.86).epsilon(0.05));
  }
}

TEST_CASE("E8: the nearest-point search agrees with brute force over a local neighbourhood, and every output is a "
          "lattice point") {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-6.0, 6.0);
  for (int trial = 0; trial < 2000; ++trial) {
    double x[8], y[8];
    for (double& v : x) v = u(rng);
    quant::e8_nearest(x, y);
    CHECK(is_e8_point(y));
    double got = 0;
    for (int i = 0; i < 8; ++i) got += (x[i] - y[i]) * (x[i] - y[i]);
    // Brute force: every point of each coset within one step of the rounded x.
    double best = INFINITY;
    for (int c = 0; c < 2; ++c) {
      int base[8];
      for (int i = 0; i < 8; ++i) base[i] = static_cast<int>(std::lround(x[i] - 0.5 * c));
      for (int code = 0; code < 6561; ++code) {  // 3^8 offsets in {-1, 0, 1}
        int rest = code, sum = 0;
        double dist = 0;
        for (int i = 0; i < 8; ++i) {
          const int k = base[i] + rest % 3 - 1;
          rest /= 3;
          sum += k;
          dist += (x[i] - k - 0.5 * c) * (x[i] - k - 0.5 * c);
        }
        if (sum % 2 == 0) best = std::min(best, dist);
      }
    }
    CHECK(got == doctest::Approx(best).epsilon(1e-12));
  }
}

TEST_CASE("E8 cut to the B-bit cube: the bounded search agrees with brute force (each coordinate within one step of "
          "its clamped rounding; every codeword at 2 bits), and outputs are lattice points inside the cube") {
  std::mt19937_64 rng(11);
  for (int bits : {2, 3, 4, 8}) {
    CAPTURE(bits);
    const int lo = -(1 << (bits - 1)), hi = (1 << (bits - 1)) - 1;
    std::uniform_real_distribution<double> u(lo - 1.5, hi + 1.5);  // inside and outside the cube
    for (int trial = 0; trial < 300; ++trial) {
      double t[8];
      for (double& v : t) v = u(rng);
      int32_t k[8];
      const int c = quant::e8_nearest_bounded(t, bits, k);
      double y[8], got = 0;
      for (int i = 0; i < 8; ++i) {
        CHECK(k[i] >= lo);
        CHECK(k[i] <= hi);
        y[i] = k[i] + 0.5 * c;
        got += (t[i] - y[i]) * (t[i] - y[i]);
      }
      CHECK(is_e8_point(y));
      // Brute force: offsets {-1, 0, 1} around each coordinate's clamped
      // rounding, inside the cube, even sums; at 2 bits every codeword.
      const bool all = bits == 2 && trial < 100;
      const int side = all ? hi - lo + 1 : 3;
      int64_t total = 1;
      for (int i = 0; i < 8; ++i) total *= side;
      double best = INFINITY;
      for (int cc = 0; cc < 2; ++cc) {
        int base[8];
        for (int i = 0; i < 8; ++i) base[i] = all ? lo : std::clamp(static_cast<int>(std::lround(t[i] - 0.5 * cc)), lo, hi) - 1;
        for (int64_t code = 0; code < total; ++code) {
          int64_t rest = code;
          int sum = 0;
          double dist = 0;
          bool inside = true;
          for (int i = 0; i < 8; ++i) {
            const int kk = base[i] + static_cast<int>(rest % side);
            rest /= side;
            inside = inside && kk >= lo && kk <= hi;
            sum += kk;
            dist += (t[i] - kk - 0.5 * cc) * (t[i] - kk - 0.5 * cc);
          }
          if (inside && sum % 2 == 0) best = std::min(best, dist);
        }
      }
      CHECK(got == doctest::Approx(best).epsilon(1e-12));
    }
  }
}

TEST_CASE("lattice gains, measured: E8's normalised second moment is 0.0717 (0.860 of the cube's 1/12), the "
          "hexagonal lattice's 0.0802 (0.962)") {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(0.0, 100.0);
  const int n = 40000;
  double e8 = 0;
  for (int i = 0; i < n; ++i) {
    double x[8], y[8];
    for (double& v : x) v = u(rng);
    quant::e8_nearest(x, y);
    for (int j = 0; j < 8; ++j) e8 += (x[j] - y[j]) * (x[j] - y[j]);
  }
  const double g8 = e8 / (8.0 * n);  // E8 has volume 1 per point
  // The hexagonal lattice A2, basis (1, 0), (1/2, sqrt(3)/2): two rectangular cosets.
  const double s3 = std::sqrt(3.0);
  double a2 = 0;
  for (int i = 0; i < n; ++i) {
    const double x = u(rng), y = u(rng);
    double best = INFINITY;
    for (int c = 0; c < 2; ++c) {
      const double ox = 0.5 * c, oy = 0.5 * s3 * c;
      const double px = std::round(x - ox) + ox, py = std::round((y - oy) / s3) * s3 + oy;
      best = std::min(best, (x - px) * (x - px) + (y - py) * (y - py));
    }
    a2 += best;
  }
  const double g2 = a2 / (2.0 * n) / (s3 / 2.0);  // per dimension, over volume^(2/2)
  MESSAGE("G(E8) = " << g8 << " (" << g8 * 12 << " of the cube), G(A2) = " << g2 << " (" << g2 * 12 << ")");
  CHECK(g8 == doctest::Approx(0.07168).epsilon(0.02));
  CHECK(g2 == doctest::Approx(5.0 / (36.0 * s3)).epsilon(0.02));
  CHECK(g8 * 12 == doctest::Approx(0.860).epsilon(0.02));
  CHECK(g2 * 12 == doctest::Approx(0.962).epsilon(0.02));
}

TEST_CASE("LPLR at full rank and 16 bits reproduces the matrix to half-precision rounding; at low rank it is the "
          "best rank-k approximation plus quantization error") {
  for (Shape s : {Shape{48, 48}, Shape{80, 30}, Shape{30, 80}}) {
    CAPTURE(shape_str(s));
    Tensor w = gaussian(s, 4);
    const int64_t full = std::min(s[0], s[1]);
    const double e = quant::relative_error(w, quant::dequantize(quant::quantize(w, opts(Method::lplr, 16,
                                                                                        quant::Range::row, full))));
    // 16-bit codes: a step of 2 R / 65535 per entry of each factor.
    CHECK(e < 1e-4);
    const double e_8bits = quant::relative_error(
        w, quant::dequantize(quant::quantize(w, opts(Method::lplr, 8, quant::Range::row, full))));
    CHECK(e_8bits > 30 * e);  // 8 bits fewer: ~256x the error
  }
  // A matrix of exact rank 6: rank 6 recovers it; rank 3 cannot.
  Tensor w = kernel::matmul(gaussian({60, 6}, 1), gaussian({6, 50}, 2));
  CHECK(quant::relative_error(w, quant::dequantize(quant::quantize(w, opts(Method::lplr, 16, quant::Range::row, 6)))) <
        1e-4);
  CHECK(quant::relative_error(w, quant::dequantize(quant::quantize(w, opts(Method::lplr, 16, quant::Range::row, 3)))) >
        0.1);
}

TEST_CASE("LPLR fits its second factor to the decoded first factor, not to the exact one") {
  // W = u v^T, rank 1, with u = (1, 0.5, 0.2, -0.7) and v constant. The first
  // factor L = +-u / |u| at 2 bits (levels -r, -r/3, r/3, r with r = max |L|)
  // decodes to L^ ~ (1, 1/3, 1/3, -1): codes round((u_i + 1) 3 / 2) = 3, 2, 2,
  // 0. Fitting M by least squares to L^ leaves only the part of u orthogonal
  // to L^, sin(u, L^) = 0.234641 of W (numpy: sqrt(1 - cos^2)); M = v^T times
  // a scalar is a constant row, which 2-bit codes store exactly. Fitting M to
  // the exact L instead gives W^ = L^ |u| v^T, |u - (1, 1/3, 1/3, -1)| / |u| =
  // 0.275962.
  const std::vector<double> u{1.0, 0.5, 0.2, -0.7};
  std::vector<double> w;
  for (double ui : u)
    for (int c = 0; c < 4; ++c) w.push_back(ui * 0.8);
  Tensor W = Tensor::from_f64(w, {4, 4});
  for (quant::Range range : {quant::Range::row, quant::Range::tensor}) {
    INFO("range " << quant::range_name(range));
    Tensor q = quant::dequantize(quant::quantize(W, opts(Method::lplr, 2, range, 1)));
    CHECK(quant::relative_error(W, q) == doctest::Approx(0.2346405331).epsilon(1e-5));
  }
}

TEST_CASE("uniform quantization with one range for the matrix takes the largest |x| of every row") {
  // Rows of different magnitude: the range is 4 (row 0's), not the last
  // row's 0.5, so row 0 is not clipped. 8 bits on [-4, 4]: levels 8 / 255
  // apart, every value within half a level; -4 and 4 are levels themselves.
  Tensor W = Tensor::from_f64({4.0, -1.0, 3.0, 0.25, -0.5, 0.125, 0.5, 0.0, -0.25}, {3, 3});
  quant::Quantized q = quant::quantize(W, opts(Method::uniform, 8, quant::Range::tensor));
  REQUIRE(q.scales.size() == 1);
  CHECK(q.scales[0] == 4.0f);
  Tensor back = quant::dequantize(q);
  CHECK(back.at({0, 0}) == 4.0);
  CHECK(test::max_diff(back, W) <= 0.5 * 8.0 / 255.0 + 1e-6);
  // Row by row, each row keeps its own range.
  quant::Quantized per_row = quant::quantize(W, opts(Method::uniform, 8, quant::Range::row));
  CHECK(per_row.scales == std::vector<float>{4.0f, 0.5f, 0.5f});
}

TEST_CASE("LPLR of a matrix of lower rank than asked: every rank reproduces it (the sketch's noise columns once "
          "overflowed the QR into NaN, stored as zero scales: relative error 1)") {
  for (int64_t n : {16, 32}) {
    Tensor ones = Tensor::full({n, n}, 1.0, DType::f64);  // rank 1
    for (int64_t rank = 1; rank <= n; ++rank) {
      CAPTURE(n);
      CAPTURE(rank);
      Tensor q = quant::dequantize(quant::quantize(ones, opts(Method::lplr, 4, quant::Range::row, rank)));
      CHECK(quant::relative_error(ones, q) < 1e-6);
    }
  }
}

TEST_CASE("bits accounting: stored_bits counts codes, ranges, signs and seed, and equals the bytes to_state writes") {
  struct Case {
    Method m;
    int bits;
    quant::Range range;
    int64_t rows, cols, rank;
    int64_t expect_bits;
  };
  auto words = [](int64_t bits) { return 64 * ((bits + 63) / 64); };
  const std::vector<Case> cases = {
      {Method::uniform, 4, quant::Range::row, 10, 30, 0, words(1200) + 32 * 10},
      {Method::uniform, 3, quant::Range::tensor, 10, 30, 0, words(900) + 32},
      {Method::hadamard, 2, quant::Range::row, 7, 64, 0, words(896) + 32 * 7 + words(64)},
      {Method::hadamard, 5, quant::Range::row, 7, 40, 0, words(1400) + 32 * 7 + words(80)},  // two blocks: 2C signs
      {Method::gaussian, 8, quant::Range::row, 9, 12, 0, words(864) + 32 * 9 + 64},
      {Method::e8, 3, quant::Range::row, 5, 16, 0, words(240) + 32 * 5 + words(16)},
      {Method::e8, 2, quant::Range::tensor, 4, 24, 0, words(192) + 32 + words(48)},
      {Method::lplr, 4, quant::Range::row, 20, 12, 5, words(4 * 5 * 32) + 32 * 10},
      {Method::lplr, 6, quant::Range::tensor, 20, 12, 5, words(6 * 5 * 32) + 64},
  };
  for (const Case& c : cases) {
    const std::string method = quant::method_name(c.m);
    CAPTURE(method);
    CAPTURE(c.bits);
    quant::Quantized q = quant::quantize(gaussian({c.rows, c.cols}, 9), opts(c.m, c.bits, c.range, c.rank));
    CHECK(q.stored_bits() == c.expect_bits);
    CHECK(q.bits_per_weight() == doctest::Approx(static_cast<double>(c.expect_bits) / static_cast<double>(c.rows * c.cols)));
    std::map<std::string, Tensor> s = quant::to_state(q);
    CHECK(8 * stored_bytes(s) == q.stored_bits());
    // The stored form decodes to the same bits.
    Tensor a = quant::dequantize(q), b = quant::dequantize(quant::from_state(s, "w"));
    CHECK(std::memcmp(a.raw_data(), b.raw_data(), static_cast<size_t>(a.numel()) * 4) == 0);
  }
}

TEST_CASE("quantizers are deterministic: the same seed gives the same codes on 1 and 2 threads, another seed others") {
  const int before = heed::num_threads();
  Tensor w = gaussian({256, 256}, 5);  // large enough for the parallel paths
  for (Method m : {Method::uniform, Method::hadamard, Method::gaussian, Method::e8, Method::lplr}) {
    const std::string method = quant::method_name(m);
    CAPTURE(method);
    const quant::Options o = opts(m, 4, quant::Range::row, m == Method::lplr ? 32 : 0, 77);
    heed::set_num_threads(1);
    quant::Quantized a = quant::quantize(w, o);
    heed::set_num_threads(2);
    quant::Quantized b = quant::quantize(w, o);
    CHECK(a.codes == b.codes);
    CHECK(a.scales == b.scales);
    CHECK(a.signs == b.signs);
    Tensor da = quant::dequantize(a), db = quant::dequantize(b);
    CHECK(std::memcmp(da.raw_data(), db.raw_data(), static_cast<size_t>(da.numel()) * 4) == 0);
    if (m != Method::uniform) {
      quant::Options other = o;
      other.seed = 78;
      CHECK(quant::quantize(w, other).codes != a.codes);
    }
  }
  heed::set_num_threads(before);
}

TEST_CASE("quantize refuses bad input with errors naming the value and what was expected") {
  Tensor w = gaussian({16, 12}, 1);
  test::check_error([&] { quant::quantize(w, opts(Method::uniform, 1)); }, {"bits must be 2..16", "got 1"});
  test::check_error([&] { quant::quantize(w, opts(Method::hadamard, 17)); }, {"bits must be 2..16", "got 17"});
  test::check_error([&] { quant::quantize(w, opts(Method::lplr, 4, quant::Range::row, 13)); },
                    {"rank 13", "[16, 12]", "expected 1..12"});
  test::check_error([&] { quant::quantize(w, opts(Method::lplr, 4, quant::Range::row, 0)); }, {"rank 0", "1..12"});
  test::check_error([&] { quant::quantize(w, opts(Method::uniform, 4, quant::Range::row, 3)); },
                    {"rank (3)", "lplr only", "uniform"});
  test::check_error([&] { quant::quantize(w, opts(Method::e8, 4)); }, {"e8", "blocks of 8", "12 elements", "multiple of 8"});
  test::check_error([] { quant::quantize(Tensor::zeros({2, 3, 4}), opts(Method::uniform, 4)); },
                    {"expected a matrix", "[2, 3, 4]"});
  test::check_error([] { quant::quantize(Tensor::zeros({0, 4}), opts(Method::uniform, 4)); }, {"empty", "[0, 4]"});
  test::check_error([] { quant::quantize(Tensor::full({2, 2}, NAN), opts(Method::uniform, 4)); }, {"non-finite"});
  // Finite, but a rotation gathers a constant row's norm into one entry,
  // beyond float32 where the scales are kept (an infinite scale decoded to NaN).
  for (Method m : {Method::hadamard, Method::gaussian, Method::e8})
    test::check_error([&] { quant::quantize(Tensor::full({2, 16}, 3e38), opts(m, 4)); },
                      {"beyond float32's largest value"});
  // Without a rotation any float32 matrix fits, up to its largest value.
  Tensor top = Tensor::full({2, 16}, static_cast<double>(std::numeric_limits<float>::max()));
  CHECK(kernel::all_finite(quant::dequantize(quant::quantize(top, opts(Method::uniform, 4)))));
  test::check_error([] { quant::method_from_name("e9"); }, {"unknown method 'e9'", "uniform, hadamard, gaussian, e8, lplr"});
  // A stored matrix whose parts do not fit its descriptor.
  std::map<std::string, Tensor> s = quant::to_state(quant::quantize(w, opts(Method::uniform, 4)));
  s["codes"] = Tensor::zeros({2}, DType::i64);
  test::check_error([&] { quant::from_state(s, "blocks.0.w"); }, {"blocks.0.w", "expected 12 code words, got 2"});
  s.erase("codes");
  test::check_error([&] { quant::from_state(s, "w"); }, {"w", "no 'codes'"});
}

TEST_CASE("a zero matrix quantizes to zeros with every method, a zero row to a zero row with the row-wise ones") {
  Tensor w = Tensor::zeros({8, 16}, DType::f64);
  kernel::narrow(w, 0, 3, 1).data<double>()[5] = 2.0;  // one non-zero row
  for (Method m : {Method::uniform, Method::hadamard, Method::gaussian, Method::e8, Method::lplr}) {
    const std::string method = quant::method_name(m);
    CAPTURE(method);
    Tensor q = quant::dequantize(quant::quantize(w, opts(m, 4, quant::Range::row, m == Method::lplr ? 8 : 0)));
    CHECK(kernel::all_finite(q));
    // Row by row, a zero row stays zero (lplr's factors mix the rows).
    if (m != Method::lplr)
      for (int64_t r : {0, 7}) CHECK(test::max_abs(kernel::narrow(q, 0, r, 1)) == 0);
    Tensor z = quant::dequantize(quant::quantize(Tensor::zeros({4, 8}), opts(m, 3, quant::Range::tensor, m == Method::lplr ? 2 : 0)));
    CHECK(test::max_abs(z) == 0);
  }
}

TEST_CASE("row_peak: max / rms of each row, averaged: 1 for a flat row, sqrt(C) for one coordinate, about "
          "sqrt(2 ln 2C) after a rotation") {
  Tensor x = Tensor::from_f64({1, -1, 1, -1, 0, 0, 0, 3, 0, 0, 0, 0}, {3, 4});  // flat, one coordinate, zero
  CHECK(quant::row_peak(x) == doctest::Approx((1.0 + 2.0) / 2));
  Tensor spike = Tensor::zeros({1, 1024}, DType::f64);
  spike.data<double>()[17] = 5.0;
  CHECK(quant::row_peak(spike) == doctest::Approx(32.0));
  CHECK(quant::row_peak(quant::RandomizedHadamard(1024, 3).apply(spike)) == doctest::Approx(1.0));  // spread flat
  const double g = quant::row_peak(quant::RandomizedHadamard(1024, 3).apply(gaussian({64, 1024}, 2)));
  CHECK(g == doctest::Approx(std::sqrt(2 * std::log(2048.0))).epsilon(0.15));
}
