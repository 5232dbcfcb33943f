// tests/core/test_bf16_gemm.cpp: the bf16 packers and GEMM of core/bf16.h.
// The packers must round exactly as to_bf16 does (the bits of bf16 results
// must not depend on which packer or which CPU path produced an operand);
// the GEMM's only rounding beyond the operands' is its float32 accumulation,
// so against the float64 product of the rounded operands every element lies
// within P 2^-23 (|A| |B|)_ij for P pairs (2P terms of at most 2^-24 each,
// rounded once per pair).
#include <cmath>
#include <cstring>
#include <limits>

#include "core/bf16.h"
#include "test_util.h"

using namespace heed;
namespace b16 = heed::kernel::bf16;
using kernel::from_bf16;
using kernel::to_bf16;

namespace {

float f_of_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Values that exercise the rounding: ties to even both ways, values that
// carry into the exponent, the largest finite float, infinities, NaNs, zeros,
// denormals, and ordinary numbers.
std::vector<float> awkward_values(int64_t n) {
  std::vector<float> v = {1.0f,
                          f_of_bits(0x3f808000u),  // tie, even below: rounds down
                          f_of_bits(0x3f818000u),  // tie, odd below: rounds up
                          f_of_bits(0x3f80ffffu),  // rounds up
                          f_of_bits(0x3fffffffu),  // carries into the exponent
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          f_of_bits(0x7f800001u),  // signalling NaN: must stay NaN
                          0.0f,
                          -0.0f,
                          f_of_bits(0x00000001u),
                          -1e-39f};
  const auto d = test::det_values(n, 77, -3, 3);
  for (size_t i = v.size(); i < static_cast<size_t>(n); ++i) v.push_back(static_cast<float>(d[i]));
  v.resize(static_cast<size_t>(n));
  return v;
}

uint32_t pair_bits(float lo, float hi) { return uint32_t{to_bf16(lo)} | uint32_t{to_bf16(hi)} << 16; }

}  // namespace

TEST_CASE("to_bf16 rounds to nearest even, keeps NaNs NaN and flushes denormals, as AVX512-BF16 converts") {
  CHECK(to_bf16(1.0f) == 0x3f80);
  CHECK(to_bf16(f_of_bits(0x3f808000u)) == 0x3f80);
  CHECK(to_bf16(f_of_bits(0x3f818000u)) == 0x3f82);
  CHECK(to_bf16(f_of_bits(0x3fffffffu)) == 0x4000);
  CHECK(std::isinf(from_bf16(to_bf16(std::numeric_limits<float>::max()))));  // beyond bf16's largest
  CHECK(std::isnan(from_bf16(to_bf16(f_of_bits(0x7f800001u)))));
  CHECK(from_bf16(to_bf16(-2.5f)) == -2.5f);
  // Denormals become a zero of their sign, even the largest, which rounding
  // alone would carry up to the smallest normal (0x0080).
  CHECK(to_bf16(f_of_bits(0x007fffffu)) == 0x0000);
  CHECK(to_bf16(f_of_bits(0x80000001u)) == 0x8000);
  CHECK(to_bf16(-0.0f) == 0x8000);
  CHECK(to_bf16(f_of_bits(0x00800000u)) == 0x0080);  // the smallest normal stays
}

TEST_CASE("bf16 packers: every layout gives to_bf16's bits, with zeros for the padding") {
  if (!b16::supported()) {
    MESSAGE("no AVX512-BF16 here: the packers are never called");
    return;
  }
  for (auto [rows, cols] : {std::array<int64_t, 2>{1, 1}, {2, 16}, {7, 5}, {33, 47}, {64, 64}, {65, 100}}) {
    CAPTURE(rows);
    CAPTURE(cols);
    // src (r, c) stored three ways: row-major, column-major, both strides > 1.
    const auto vals = awkward_values(rows * cols);
    std::vector<float> rm(vals.begin(), vals.end()), cm(vals.size()), wide(vals.size() * 6);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        cm[static_cast<size_t>(c * rows + r)] = rm[static_cast<size_t>(r * cols + c)];
        wide[static_cast<size_t>(r * 3 * cols * 2 + c * 2)] = rm[static_cast<size_t>(r * cols + c)];
      }
    auto at = [&](int64_t r, int64_t c) { return r < rows && c < cols ? rm[static_cast<size_t>(r * cols + c)] : 0.0f; };
    struct Layout {
      const float* p;
      int64_t rs, cs;
    };
    for (Layout L : {Layout{rm.data(), cols, 1}, Layout{cm.data(), 1, rows}, Layout{wide.data(), 6 * cols, 2}}) {
      CAPTURE(L.rs);
      CAPTURE(L.cs);
      const int64_t ld = (cols + 15) / 16 * 16 + 16, np = (rows + 1) / 2;
      std::vector<uint32_t> dst(static_cast<size_t>(np * ld), 0xdeadbeefu);
      b16::pack_pairs(L.p, L.rs, L.cs, rows, cols, dst.data(), ld);
      int bad = 0;
      for (int64_t p = 0; p < np; ++p)
        for (int64_t c = 0; c < ld; ++c)
          bad += dst[static_cast<size_t>(p * ld + c)] != pair_bits(at(2 * p, c), at(2 * p + 1, c));
      CHECK(bad == 0);

      const int64_t nq = (cols + 1) / 2, ldr = nq + 3;
      std::vector<uint32_t> rows_dst(static_cast<size_t>(rows * ldr), 0xdeadbeefu);
      b16::pack_rows(L.p, L.rs, L.cs, rows, cols, rows_dst.data(), ldr);
      bad = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const uint32_t* row = rows_dst.data() + r * ldr;
        for (int64_t q = 0; q < nq; ++q) bad += row[q] != pair_bits(at(r, 2 * q), at(r, 2 * q + 1));
        for (int64_t q = nq; q < ldr; ++q) bad += row[q] != 0xdeadbeefu;  // untouched
      }
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("bf16 gemm: float32 accumulation of the rounded operands' products, for every tile shape") {
  if (!b16::supported()) {
    MESSAGE("no AVX512-BF16 here: the bf16 GEMM is never called");
    return;
  }
  for (int64_t M : {1, 5, 6, 7, 13, 16, 17, 64}) {
    for (int64_t N : {1, 15, 16, 17, 33, 64, 65, 100, 130}) {
      for (int64_t K : {1, 2, 31, 64}) {
        CAPTURE(M);
        CAPTURE(N);
        CAPTURE(K);
        auto a = test::det_values(M * K, 1 + M, -1, 1), b = test::det_values(K * N, 2 + N, -1, 1);
        auto c0 = test::det_values(M * N, 3, -1, 1);
        std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end());
        const int64_t np = (K + 1) / 2, ldb = (N + 15) / 16 * 16;
        std::vector<uint32_t> pb(static_cast<size_t>(np * ldb)), pa_rows(static_cast<size_t>(M * np)),
            pa_t(static_cast<size_t>(np * (M + 3)));
        b16::pack_pairs(bf.data(), N, 1, K, N, pb.data(), ldb);
        b16::pack_rows(af.data(), K, 1, M, K, pa_rows.data(), np);
        b16::pack_pairs(af.data(), 1, K, K, M, pa_t.data(), M + 3);  // A^T packed along its rows
        for (int mode = 0; mode < 4; ++mode) {
          CAPTURE(mode);
          const float alpha = mode == 1 || mode == 3 ? 0.125f : 1.0f;
          const bool acc = mode >= 2;
          const bool a_rows = mode % 2 == 0;
          const int64_t ldc = N + 5;
          std::vector<float> c(static_cast<size_t>(M * ldc), 7.0f);
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j)
              c[static_cast<size_t>(i * ldc + j)] = static_cast<float>(c0[static_cast<size_t>(i * N + j)]);
          if (a_rows) b16::gemm(M, N, np, pa_rows.data(), np, 1, pb.data(), ldb, c.data(), ldc, alpha, acc);
          else b16::gemm(M, N, np, pa_t.data(), 1, M + 3, pb.data(), ldb, c.data(), ldc, alpha, acc);
          double worst = 0;
          int outside = 0;
          for (int64_t i = 0; i < M; ++i) {
            for (int64_t j = 0; j < N; ++j) {
              double exact = 0, mag = 0;
              for (int64_t k = 0; k < K; ++k) {
                const double x = from_bf16(to_bf16(af[static_cast<size_t>(i * K + k)])),
                             y = from_bf16(to_bf16(bf[static_cast<size_t>(k * N + j)]));
                exact += x * y;
                mag += std::abs(x * y);
              }
              exact *= alpha;
              mag *= alpha;
              const double before = c0[static_cast<size_t>(i * N + j)];
              if (acc) {
                exact += before;
                mag += std::abs(before);
              }
              const double err = std::abs(c[static_cast<size_t>(i * ldc + j)] - exact);
              worst = std::max(worst, err / (double(np + 1) * std::ldexp(1.0, -23) * mag + 1e-30));
            }
            for (int64_t j = N; j < ldc; ++j) outside += c[static_cast<size_t>(i * ldc + j)] != 7.0f;  // untouched
          }
          CHECK(worst <= 1.0);
          CHECK(outside == 0);
        }
      }
    }
  }
}

TEST_CASE("bf16 gemm's epilogues: a bias, the old C or a residual, added after the whole sum with a float32 add's bits") {
  if (!b16::supported()) {
    MESSAGE("no AVX512-BF16 here: the bf16 GEMM is never called");
    return;
  }
  for (int64_t M : {1, 6, 13}) {
    for (int64_t N : {1, 17, 64, 130}) {
      const int64_t K = 37, np = (K + 1) / 2, ldb = (N + 15) / 16 * 16, ldc = N + 3;
      CAPTURE(M);
      CAPTURE(N);
      const auto a = test::det_values(M * K, 31, -1, 1), b = test::det_values(K * N, 32, -1, 1);
      const auto bias = test::det_values(N, 33, -4, 4), old = test::det_values(M * ldc, 34, -4, 4);
      std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end()), biasf(bias.begin(), bias.end());
      std::vector<uint32_t> pa(static_cast<size_t>(M * np)), pb(static_cast<size_t>(np * ldb));
      b16::pack_rows(af.data(), K, 1, M, K, pa.data(), np);
      b16::pack_pairs(bf.data(), N, 1, K, N, pb.data(), ldb);
      std::vector<float> plain(static_cast<size_t>(M * ldc), 0.0f), with_bias = plain, added(old.begin(), old.end()),
          chained(old.begin(), old.end()), residual(old.begin(), old.end()), fresh(static_cast<size_t>(M * ldc), 9.0f);
      for (float& r : residual) r = r * 0.5f - 1.0f;
      b16::gemm(M, N, np, pa.data(), np, 1, pb.data(), ldb, plain.data(), ldc, 1.0f, false);
      b16::gemm(M, N, np, pa.data(), np, 1, pb.data(), ldb, with_bias.data(), ldc, 1.0f, false, {}, biasf.data());
      b16::gemm(M, N, np, pa.data(), np, 1, pb.data(), ldb, added.data(), ldc, 1.0f, true, {}, nullptr, true);
      b16::gemm(M, N, np, pa.data(), np, 1, pb.data(), ldb, chained.data(), ldc, 1.0f, true);
      // A residual: (A B + bias) + another matrix, C's old values unread.
      b16::gemm(M, N, np, pa.data(), np, 1, pb.data(), ldb, fresh.data(), ldc, 1.0f, true, {}, biasf.data(), true, 0,
                residual.data());
      int bias_off = 0, add_off = 0, chain_differs = 0, residual_off = 0;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          const size_t e = static_cast<size_t>(i * ldc + j);
          bias_off += with_bias[e] != plain[e] + biasf[static_cast<size_t>(j)];
          add_off += added[e] != plain[e] + static_cast<float>(old[e]);
          chain_differs += chained[e] != added[e];
          residual_off += fresh[e] != with_bias[e] + residual[e];
        }
      CHECK(bias_off == 0);
      CHECK(add_off == 0);
      CHECK(residual_off == 0);
      // Without add_after the sum starts from C: other roundings, somewhere.
      if (M * N > 100) CHECK(chain_differs > 0);
    }
  }
  std::vector<uint32_t> one(16, 0);
  std::vector<float> c(16, 0.0f), bias(16, 1.0f);
  CHECK_THROWS_WITH_AS(b16::gemm(1, 16, 1, one.data(), 1, 1, one.data(), 16, c.data(), 16, 0.5f, false, {}, bias.data()),
                       doctest::Contains("a bias goes with alpha 1, no band and no accumulation onto C's chains"),
                       Error);
  CHECK_THROWS_WITH_AS(b16::gemm(1, 16, 1, one.data(), 1, 1, one.data(), 16, c.data(), 16, 1.0f, true, {}, bias.data()),
                       doctest::Contains("no accumulation onto C's chains"), Error);
  CHECK_THROWS_WITH_AS(
      b16::gemm(1, 16, 1, one.data(), 1, 1, one.data(), 16, c.data(), 16, 1.0f, false, {}, nullptr, false, 0, c.data()),
      doctest::Contains("an addend goes with accumulate, add_after and alpha 1"), Error);
}

TEST_CASE("bf16 gemm with a band: the needed part equals the whole product's") {
  if (!b16::supported()) {
    MESSAGE("no AVX512-BF16 here: the bf16 GEMM is never called");
    return;
  }
  // A causal block's three kinds of product: columns needed below a diagonal
  // (scores), A zero beyond a diagonal (over keys), A zero before one (over
  // queries). The diagonal offset d takes every position relative to the tiles.
  const int64_t M = 64, N = 70, K = 45, np = (K + 1) / 2, ldb = 80;
  const auto a = test::det_values(M * K, 5, -1, 1), b = test::det_values(K * N, 6, -1, 1);
  std::vector<float> bf(b.begin(), b.end());
  std::vector<uint32_t> pb(static_cast<size_t>(np * ldb));
  b16::pack_pairs(bf.data(), N, 1, K, N, pb.data(), ldb);
  for (int64_t d = -70; d <= 70; d += 7) {
    CAPTURE(d);
    for (int kind = 0; kind < 3; ++kind) {
      CAPTURE(kind);
      b16::Band band;
      std::vector<float> af(a.begin(), a.end());
      if (kind == 0) band.col_end = d;
      if (kind == 1) band.inner_end = d;
      if (kind == 2) band.inner_begin = d;
      for (int64_t i = 0; i < M; ++i)
        for (int64_t k = 0; k < K; ++k)
          if ((kind == 1 && k >= i + d) || (kind == 2 && k < i + d)) af[static_cast<size_t>(i * K + k)] = 0.0f;
      std::vector<uint32_t> pa(static_cast<size_t>(M * np));
      b16::pack_rows(af.data(), K, 1, M, K, pa.data(), np);
      const auto c0 = test::det_values(M * N, 7, -1, 1);
      for (bool acc : {false, true}) {
        std::vector<float> whole(c0.begin(), c0.end()), banded(c0.begin(), c0.end());
        b16::gemm(M, N, np, pa.data(), np, 1, pb.data(), ldb, whole.data(), N, 1.0f, acc);
        b16::gemm(M, N, np, pa.data(), np, 1, pb.data(), ldb, banded.data(), N, 1.0f, acc, band);
        int bad = 0;
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < std::min(N, i + (kind == 0 ? d : N)); ++j)
            bad += whole[static_cast<size_t>(i * N + j)] != banded[static_cast<size_t>(i * N + j)];
        CHECK(bad == 0);
      }
    }
  }
}
