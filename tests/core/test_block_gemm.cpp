// tests/core/test_block_gemm.cpp: the float32 block GEMM of core/block_gemm.h
// (fused attention's block products) and attention's row kernels
// (core/attention_rows.h). Its arithmetic is specified to the
// bit: each element is the sum of its products in ascending order, each
// added by a fused multiply-add, from 0 or from C. So every result is
// checked for equality with that scalar loop (std::fmaf), for every tile
// shape, A in both orientations and with strides, alpha and accumulate in
// all four combinations, and bands; at each instruction set this CPU has,
// which therefore agree with each other bit for bit.
#include <omp.h>
#include <sys/wait.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <thread>

#include "core/attention_rows.h"
#include "core/block_gemm.h"
#include "core/fast_math.h"
#include "core/kernels.h"
#include "core/lanes.h"
#include "test_util.h"

using namespace heed;
namespace blk = heed::kernel::block;

namespace {

struct Isa {
  CpuIsa isa;
  const char* name;
};

// What `get` gives for each instruction set this CPU has, with its name.
template <class T>
std::vector<std::pair<const char*, T>> per_isa(T (*get)(CpuIsa)) {
  std::vector<std::pair<const char*, T>> k;
  for (Isa i : {Isa{CpuIsa::avx2, "avx2"}, Isa{CpuIsa::avx512, "avx512"}})
    if (T f = get(i.isa)) k.emplace_back(i.name, f);
  return k;
}

std::vector<std::pair<const char*, blk::GemmFn>> kernels() { return per_isa(blk::gemm_for); }

// The specification, one element at a time.
float reference(int64_t i, int64_t j, int64_t P, const float* a, int64_t ars, int64_t aps, const float* b,
                int64_t ldb, float c, float alpha, bool accumulate) {
  const bool from_c = accumulate && alpha == 1.0f;
  float s = from_c ? c : 0.0f;
  for (int64_t p = 0; p < P; ++p) s = std::fmaf(a[i * ars + p * aps], b[p * ldb + j], s);
  if (from_c) return s;
  if (alpha != 1.0f) s = alpha * s;
  return accumulate ? s + c : s;
}

bool same_float_bits(float x, float y) { return std::memcmp(&x, &y, sizeof x) == 0; }

}  // namespace

TEST_CASE("block gemm: every element is the specified float32 sum, bit for bit, at every tile shape") {
  const auto ks = kernels();
  if (ks.empty()) {
    MESSAGE("no AVX2 here: the block GEMM is never called (attention uses OpenBLAS)");
    return;
  }
  for (auto [name, gemm] : ks) {
    CAPTURE(name);
    for (int64_t M : {1, 5, 6, 7, 12, 13, 16, 17, 64}) {
      for (int64_t N : {1, 7, 8, 15, 16, 17, 33, 64, 65, 100}) {
        for (int64_t P : {0, 1, 31, 64}) {
          CAPTURE(M);
          CAPTURE(N);
          CAPTURE(P);
          const auto ad = test::det_values(M * P * 3 + 1, 1 + M, -1, 1), bd = test::det_values(P * (N + 9) + 1, 2 + N, -1, 1);
          const auto cd = test::det_values(M * N, 3, -1, 1);
          const std::vector<float> a(ad.begin(), ad.end()), b(bd.begin(), bd.end());
          const int64_t ldb = N + 9, ldc = N + 5;
          for (int mode = 0; mode < 8; ++mode) {
            CAPTURE(mode);
            const float alpha = mode % 2 == 1 ? 0.125f : 1.0f;
            const bool acc = mode % 4 >= 2;
            // A row-major (ars = P), transposed (aps = M), or with both strides > 1.
            const bool a_t = mode >= 4;
            const int64_t ars = a_t ? 1 : 3 * P, aps = a_t ? M : 3;
            std::vector<float> c(static_cast<size_t>(M * ldc), 7.0f);
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < N; ++j) c[static_cast<size_t>(i * ldc + j)] = static_cast<float>(cd[i * N + j]);
            const std::vector<float> before = c;
            gemm(M, N, P, a.data(), ars, aps, b.data(), ldb, c.data(), ldc, alpha, acc, {});
            int bad = 0, outside = 0;
            for (int64_t i = 0; i < M; ++i) {
              for (int64_t j = 0; j < N; ++j)
                bad += !same_float_bits(c[static_cast<size_t>(i * ldc + j)],
                                  reference(i, j, P, a.data(), ars, aps, b.data(), ldb,
                                            before[static_cast<size_t>(i * ldc + j)], alpha, acc));
              for (int64_t j = N; j < ldc; ++j) outside += c[static_cast<size_t>(i * ldc + j)] != 7.0f;  // untouched
            }
            CHECK(bad == 0);
            CHECK(outside == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("block gemm with a band: the needed part equals the whole product's, bit for bit") {
  // A causal block's three kinds of product: columns needed below a diagonal
  // (scores), A zero beyond a diagonal (over keys), A zero before one (over
  // queries). The diagonal offset d takes every position relative to the tiles.
  const int64_t M = 64, N = 70, K = 45, ldb = 80;
  const auto ad = test::det_values(M * K, 5, -1, 1), bd = test::det_values(K * ldb, 6, -1, 1);
  const std::vector<float> b(bd.begin(), bd.end());
  for (auto [name, gemm] : kernels()) {
    CAPTURE(name);
    for (int64_t d = -70; d <= 70; d += 7) {
      CAPTURE(d);
      for (int kind = 0; kind < 3; ++kind) {
        CAPTURE(kind);
        kernel::Band band;
        std::vector<float> a(ad.begin(), ad.end());
        if (kind == 0) band.col_end = d;
        if (kind == 1) band.inner_end = d;
        if (kind == 2) band.inner_begin = d;
        for (int64_t i = 0; i < M; ++i)
          for (int64_t k = 0; k < K; ++k)
            if ((kind == 1 && k >= i + d) || (kind == 2 && k < i + d)) a[static_cast<size_t>(i * K + k)] = 0.0f;
        const auto c0 = test::det_values(M * N, 7, -1, 1);
        for (bool acc : {false, true}) {
          std::vector<float> whole(c0.begin(), c0.end()), banded(c0.begin(), c0.end());
          gemm(M, N, K, a.data(), K, 1, b.data(), ldb, whole.data(), N, 1.0f, acc, {});
          gemm(M, N, K, a.data(), K, 1, b.data(), ldb, banded.data(), N, 1.0f, acc, band);
          int bad = 0;
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < std::min(N, i + (kind == 0 ? d : N)); ++j)
              bad += !same_float_bits(whole[static_cast<size_t>(i * N + j)], banded[static_cast<size_t>(i * N + j)]);
          CHECK(bad == 0);
        }
      }
    }
  }
}

TEST_CASE("block transpose: every size around its 8 x 8 blocks") {
  for (int64_t rows : {1, 7, 8, 9, 16, 30}) {
    for (int64_t cols : {1, 5, 8, 17, 64}) {
      CAPTURE(rows);
      CAPTURE(cols);
      const int64_t rs = cols + 3, ld = rows + 2;
      const auto sd = test::det_values(rows * rs, 9, -1, 1);
      const std::vector<float> src(sd.begin(), sd.end());
      std::vector<float> dst(static_cast<size_t>(cols * ld), 7.0f);
      blk::transpose(src.data(), rs, rows, cols, dst.data(), ld);
      int bad = 0;
      for (int64_t c = 0; c < cols; ++c)
        for (int64_t r = 0; r < ld; ++r)
          bad += dst[static_cast<size_t>(c * ld + r)] != (r < rows ? src[static_cast<size_t>(r * rs + c)] : 7.0f);
      CHECK(bad == 0);
    }
  }
}

// ---- fused attention's row kernels (core/attention_rows.h) ----

namespace {

std::vector<std::pair<const char*, const kernel::rows::Kernels*>> row_kernels() {
  return per_isa(kernel::rows::kernels_for);
}

// fast::exp_softmax as the library compiles it for a CPU with FMA (every
// a * b + c of its source contracted into one rounding), which the vector
// kernels must reproduce; this file itself may be built without FMA.
float exp_softmax_fma(float x) {
  const float lo = -87.33f, shifter = 12582912.0f;
  const float xc = x < lo ? lo : x;
  float n = std::fmaf(xc, 1.44269504088896341f, shifter) - shifter;
  n = n == n ? n : 0.0f;
  float r = std::fmaf(-n, 0.693145751953125f, xc);
  r = std::fmaf(-n, 1.428606765330187e-06f, r);
  float p = 1.0f / 720.0f;
  for (float c : {1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f}) p = std::fmaf(p, r, c);
  const float y = p * kernel::fast::pow2(static_cast<int32_t>(n));
  return x < lo ? 0.0f : y;
}

// Scores with what a softmax meets: -inf (masked), far below the clamp, the
// clamp itself, NaN, zero, ordinary values.
std::vector<float> scores(int64_t n, uint64_t seed) {
  const auto d = test::det_values(n, seed, -12, 3);
  std::vector<float> v(d.begin(), d.end());
  const float special[] = {-std::numeric_limits<float>::infinity(), -200.0f, -87.33f, -87.2f, 0.0f, 2.5f};
  for (size_t i = 0; i < v.size(); i += 7) v[i] = special[(i / 7) % 6];
  return v;
}

}  // namespace

TEST_CASE("attention row kernels: fast::exp_softmax's bits (with FMA), the 16-lane sums of core/lanes.h, zeros past the visible keys") {
  const auto ks = row_kernels();
  if (ks.empty()) {
    MESSAGE("no AVX2 here: the row kernels are never called");
    return;
  }
  for (auto [name, rk] : ks) {
    CAPTURE(name);
    for (int64_t n : {1, 7, 8, 15, 16, 17, 31, 33, 64, 70}) {
      for (int64_t vis : {int64_t{0}, int64_t{1}, n / 2, n - 1, n}) {
        if (vis < 0) continue;
        CAPTURE(n);
        CAPTURE(vis);
        const std::vector<float> x0 = scores(n, static_cast<uint64_t>(n * 100 + vis));
        // max over the visible scores (NaN-free here: with NaN the row is NaN anyway).
        std::vector<float> xm = x0;
        for (auto& v : xm) v = std::isnan(v) ? 0.0f : v;
        float want_max = -5.0f;
        for (int64_t j = 0; j < vis; ++j) want_max = xm[j] > want_max ? xm[j] : want_max;
        CHECK(same_float_bits(rk->max(xm.data(), vis, -5.0f), want_max));

        const float c = 0.75f;
        std::vector<float> x = x0;
        const float sum = rk->exp_sum(x.data(), vis, n, c);
        float lanes[kernel::kLanes] = {};
        int bad = 0;
        for (int64_t j = 0; j < n; ++j) {
          const float e = j < vis ? exp_softmax_fma(x0[j] - c) : 0.0f;
          if (j < vis) lanes[j % kernel::kLanes] += e;
          bad += !same_float_bits(x[j], e);
        }
        CHECK(bad == 0);
        CHECK(same_float_bits(sum, kernel::lanes_sum(lanes)));

        std::vector<float> s = x0, ds(static_cast<size_t>(n));
        const auto g = test::det_values(n, 11, -1, 1);
        for (int64_t j = 0; j < n; ++j) ds[j] = static_cast<float>(g[j]);
        const float lse = 1.25f, D = -0.3f;
        rk->probs_and_grads(s.data(), ds.data(), vis, n, lse, D);
        bad = 0;
        for (int64_t j = 0; j < n; ++j) {
          const float p = j < vis ? exp_softmax_fma(x0[j] - lse) : 0.0f;
          const float want = j < vis ? p * (static_cast<float>(g[j]) - D) : 0.0f;
          bad += !same_float_bits(s[j], p) + !same_float_bits(ds[j], want);
        }
        CHECK(bad == 0);
      }
    }
  }
}

namespace {

std::vector<std::pair<const char*, blk::SgemmFn>> sgemms() { return per_isa(blk::sgemm_for); }

struct Shape3 {
  int64_t M, N, K;
};

}  // namespace

TEST_CASE("sgemm: every element is the ascending fused multiply-add chain, then + bias, then + old C, bit for bit") {
  // heed's GEMM for whole products (core/cpu_sgemm_simd.inc): register tiles,
  // K blocks of 512 (256 for a transposed A read in place, on AVX-512, past
  // 512: 513, 530 and 1100 below; a chain cut there resumes from C), B copied into panels
  // when its rows are not unit-stride (on AVX2 always, and a transposed A a
  // row tile at a time). None of that may show in the bits:
  // each element must equal the scalar chain, at every instruction set, so
  // an AVX2 machine trains to the same numbers as an AVX-512 one.
  const auto ks = sgemms();
  if (ks.empty()) {
    MESSAGE("no AVX2 here: float32 products go to oneDNN and OpenBLAS");
    return;
  }
  // Tiles' row and column edges (6 rows; 16-float vectors, 64-column panels
  // on AVX-512, 8 and 16 on AVX2), one and several K blocks, B blocks; on
  // AVX2 the copies of a unit-stride B (from 192 rows, or 96 with rows of
  // 512 or more) and of a transposed A (from 128 columns), with partial tiles
  // and vectors.
  const Shape3 shapes[] = {{1, 1, 1},    {5, 7, 3},      {6, 16, 31},   {7, 17, 64},   {13, 65, 100},
                           {12, 64, 0},  {30, 130, 33},  {3, 300, 17},  {9, 20, 512},  {8, 33, 513},
                           {7, 70, 1100}, {50, 129, 140}, {2, 1000, 80}, {196, 45, 530}, {193, 130, 70},
                           {96, 512, 9}, {100, 515, 40}};
  for (auto [name, sgemm] : ks) {
    CAPTURE(name);
    for (const Shape3 sh : shapes) {
      const int64_t M = sh.M, N = sh.N, K = sh.K;
      CAPTURE(M);
      CAPTURE(N);
      CAPTURE(K);
      const auto ad = test::det_values(M * K + 1, 11 + M, -1, 1), bd = test::det_values(K * N + 1, 12 + N, -1, 1);
      const auto cd = test::det_values(M * N, 13, -1, 1), bias_d = test::det_values(N, 14, -1, 1);
      const std::vector<float> a(ad.begin(), ad.end()), b(bd.begin(), bd.end()), bias(bias_d.begin(), bias_d.end());
      const int64_t ldc = N + 3;
      for (int mode = 0; mode < 48; ++mode) {
        CAPTURE(mode);
        // A row-major or transposed; B row-major or transposed (the packed
        // path); with and without the bias; writing C, adding to C, or adding
        // another matrix laid out like C (a residual); then multiplied or not
        // by a third matrix laid out like C (a gradient through f'(x)).
        const bool a_t = mode & 1, b_t = mode & 2, with_bias = mode & 4, with_mul = mode >= 24;
        const int add_kind = (mode % 24) >> 3;  // 0 none, 1 C itself, 2 another matrix
        const int64_t ars = a_t ? 1 : K, aps = a_t ? M : 1, brs = b_t ? 1 : N, bcs = b_t ? K : 1;
        std::vector<float> c(static_cast<size_t>(M * ldc), 7.0f), other(static_cast<size_t>(M * ldc), -3.0f),
            factor(static_cast<size_t>(M * ldc), 11.0f);
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            c[static_cast<size_t>(i * ldc + j)] = static_cast<float>(cd[i * N + j]);
            other[static_cast<size_t>(i * ldc + j)] = static_cast<float>(cd[(i * N + j + 5) % (M * N)]) * 3.0f;
            factor[static_cast<size_t>(i * ldc + j)] = static_cast<float>(cd[(i * N + j + 9) % (M * N)]) * 1.7f;
          }
        const std::vector<float> before = c;
        const float* add = add_kind == 1 ? c.data() : add_kind == 2 ? other.data() : nullptr;
        sgemm(M, N, K, a.data(), ars, aps, b.data(), brs, bcs, c.data(), ldc, with_bias ? bias.data() : nullptr, add,
              with_mul ? factor.data() : nullptr, false);
        int bad = 0, outside = 0;
        for (int64_t i = 0; i < M; ++i) {
          for (int64_t j = 0; j < N; ++j) {
            float s = 0.0f;
            for (int64_t p = 0; p < K; ++p) s = std::fmaf(a[i * ars + p * aps], b[p * brs + j * bcs], s);
            if (with_bias) s = s + bias[j];
            if (add_kind == 1) s = before[static_cast<size_t>(i * ldc + j)] + s;
            if (add_kind == 2) s = other[static_cast<size_t>(i * ldc + j)] + s;
            if (with_mul) s = s * factor[static_cast<size_t>(i * ldc + j)];
            bad += !same_float_bits(c[static_cast<size_t>(i * ldc + j)], s);
          }
          for (int64_t j = N; j < ldc; ++j) outside += c[static_cast<size_t>(i * ldc + j)] != 7.0f;  // untouched
        }
        CHECK(bad == 0);
        CHECK(outside == 0);
      }
    }
  }
}

TEST_CASE("claim_tiles: two sides take every tile exactly once, from their own ends, in shrinking chunks") {
  for (int64_t tiles : {1, 2, 3, 5, 16, 64, 128, 1000}) {
    CAPTURE(tiles);
    // One side at a time in turn: side 0's chunks run up from 0, side 1's down from the end.
    std::atomic<uint64_t> taken{0};
    std::vector<int> seen(static_cast<size_t>(tiles), 0);
    int64_t top = 0, bottom = tiles, claims = 0;
    for (int side = 0;; side ^= 1) {
      int64_t lo = -1, hi = -1;
      if (!blk::claim_tiles(taken, tiles, side, lo, hi)) {
        CHECK_FALSE(blk::claim_tiles(taken, tiles, side ^ 1, lo, hi));
        break;
      }
      ++claims;
      REQUIRE(lo < hi);
      if (side == 0) {
        CHECK(lo == top);
        top = hi;
      } else {
        CHECK(hi == bottom);
        bottom = lo;
      }
      for (int64_t i = lo; i < hi; ++i) ++seen[static_cast<size_t>(i)];
    }
    CHECK(top == bottom);
    for (int n : seen) CHECK(n == 1);
    CHECK(claims <= 2 + 2 * 20);  // 3/8 each, then thirds of the rest: logarithmic
    // Two threads at once, each claiming as fast as it can.
    std::atomic<uint64_t> shared{0};
    std::vector<std::atomic<int>> hits(static_cast<size_t>(tiles));
    auto claimer = [&](int side) {
      for (int64_t lo, hi; blk::claim_tiles(shared, tiles, side, lo, hi);)
        for (int64_t i = lo; i < hi; ++i) hits[static_cast<size_t>(i)]++;
    };
    std::thread a(claimer, 0), b(claimer, 1);
    a.join();
    b.join();
    int wrong = 0;
    for (auto& h : hits) wrong += h.load() != 1;
    CHECK(wrong == 0);
  }
}

TEST_CASE("sgemm_shared: two threads sharing the row tiles, or one taking both sides, give sgemm's bits") {
  const auto shared_fns = per_isa(blk::sgemm_shared_for);
  const auto plain = sgemms();
  if (shared_fns.empty()) {
    MESSAGE("no AVX2 here: no heed GEMM to share");
    return;
  }
  // Partial tiles, several blocks of B's columns (K 512: 128 columns a
  // block), one tile in all, and the largest shareable K.
  const Shape3 shapes[] = {{5, 7, 3}, {6, 64, 16}, {61, 130, 33}, {200, 300, 512}, {97, 1100, 100}, {768, 128, 128}};
  for (size_t k = 0; k < shared_fns.size(); ++k) {
    const auto [name, shared] = shared_fns[k];
    const blk::SgemmFn sgemm = plain[k].second;
    CAPTURE(name);
    for (const Shape3 sh : shapes) {
      const int64_t M = sh.M, N = sh.N, K = sh.K;
      CAPTURE(M);
      CAPTURE(N);
      CAPTURE(K);
      const auto ad = test::det_values(M * K, 21 + M, -1, 1), bd = test::det_values(K * N, 22 + N, -1, 1);
      const auto bias_d = test::det_values(N, 23, -1, 1), add_d = test::det_values(M * N, 24, -1, 1);
      const std::vector<float> a(ad.begin(), ad.end()), b(bd.begin(), bd.end()), bias(bias_d.begin(), bias_d.end()),
          add(add_d.begin(), add_d.end());
      for (int mode = 0; mode < 8; ++mode) {
        CAPTURE(mode);
        const bool a_t = mode & 1, b_t = mode & 2, extra = mode & 4;  // extra: a bias and an addend
        const int64_t ars = a_t ? 1 : K, aps = a_t ? M : 1, brs = b_t ? 1 : N, bcs = b_t ? K : 1;
        const float* pb = extra ? bias.data() : nullptr;
        const float* pd = extra ? add.data() : nullptr;
        std::vector<float> want(static_cast<size_t>(M * N), 5.0f);
        sgemm(M, N, K, a.data(), ars, aps, b.data(), brs, bcs, want.data(), N, pb, pd, nullptr, false);
        for (int how = 0; how < 3; ++how) {  // two threads; one thread, both sides; one thread, side 0 only
          CAPTURE(how);
          std::vector<float> got(static_cast<size_t>(M * N), 5.0f);
          blk::RowShare share;
          bool ok = true;
          auto run = [&](int side) {
            return shared(M, N, K, a.data(), ars, aps, b.data(), brs, bcs, got.data(), N, pb, pd, nullptr, share,
                          side);
          };
          if (how == 0) {
#pragma omp parallel num_threads(2) reduction(&& : ok)
            ok = run(omp_get_thread_num() % 2);
          } else {
            ok = run(0);
            if (how == 1) ok = run(1) && ok;
          }
          CHECK(ok);
          CHECK(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
        }
      }
    }
    // Not shareable (two blocks of K): refused, C untouched.
    std::vector<float> a(600 * 8, 1.0f), b(600 * 8, 1.0f), c(64, 5.0f);
    blk::RowShare share;
    CHECK_FALSE(blk::sgemm_shareable(600, 8));
    CHECK_FALSE(
        shared(8, 8, 600, a.data(), 600, 1, b.data(), 8, 1, c.data(), 8, nullptr, nullptr, nullptr, share, 0));
    for (float v : c) CHECK(v == 5.0f);
  }
}

TEST_CASE("float32 linear and matmul: heed's GEMM, the scalar chain's bits, split over threads or not") {
  // The products as the layers call them (kernel::linear, kernel::matmul,
  // kernel::linear_backward): cut into slabs by shape, x W^T with W
  // transposed once for all slabs. Every element must still be the chain of
  // the specification, which is what makes the numbers the same on AVX2 and
  // AVX-512 CPUs. The weight gradient of 2 MFLOP or more (R = 200 here: 3.6
  // MFLOP) is two chains, over the first R / 2 tokens and over the rest,
  // summed first + second; below (R = 20: 0.36 MFLOP), one chain. Either way
  // the same bits on one thread as on two.
  if (!blk::sgemm_for(heed::cpu_isa())) {
    MESSAGE("no AVX2 here: float32 products go to oneDNN and OpenBLAS");
    return;
  }
  auto check = [](int64_t R) {
    const int64_t I = 130, O = 70;
    Tensor x = test::det_tensor({R, I}, 21), w = test::det_tensor({O, I}, 22), b = test::det_tensor({O}, 23);
    Tensor g = test::det_tensor({R, O}, 24);
    Tensor y = kernel::linear(x, w, b);
    kernel::LinearGrads d = kernel::linear_backward(g, x, w, true, true, Tensor(), true);
    const bool halves = 2 * R * O * I >= (int64_t{1} << 21);
    CHECK(halves == (R == 200));
    const float *px = x.data<float>(), *pw = w.data<float>(), *pb = b.data<float>(), *pg = g.data<float>();
    int bad_y = 0, bad_dx = 0, bad_dw = 0;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t o = 0; o < O; ++o) {
        float s = 0.0f;
        for (int64_t i = 0; i < I; ++i) s = std::fmaf(px[r * I + i], pw[o * I + i], s);
        bad_y += !same_float_bits(y.data<float>()[r * O + o], s + pb[o]);
      }
    for (int64_t r = 0; r < R; ++r)
      for (int64_t i = 0; i < I; ++i) {
        float s = 0.0f;
        for (int64_t o = 0; o < O; ++o) s = std::fmaf(pg[r * O + o], pw[o * I + i], s);
        bad_dx += !same_float_bits(d.x.data<float>()[r * I + i], s);
      }
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < I; ++i) {
        auto chain = [&](int64_t r0, int64_t r1) {
          float s = 0.0f;
          for (int64_t r = r0; r < r1; ++r) s = std::fmaf(pg[r * O + o], px[r * I + i], s);
          return s;
        };
        const float s = halves ? chain(0, R / 2) + chain(R / 2, R) : chain(0, R);
        bad_dw += !same_float_bits(d.w.data<float>()[o * I + i], s);
      }
    CHECK(bad_y == 0);
    CHECK(bad_dx == 0);
    CHECK(bad_dw == 0);
    // The bias gradient: dY's column sums (in double, rounded once).
    double worst = 0;
    for (int64_t o = 0; o < O; ++o) {
      double s = 0;
      for (int64_t r = 0; r < R; ++r) s += pg[r * O + o];
      worst = std::max(worst, std::abs(double(d.b.data<float>()[o]) - s) / (std::abs(s) + 1e-30));
    }
    CHECK(worst < 1e-6);
    return d.b.to_vector<float>();
  };
  const int before = heed::num_threads();
  for (const int64_t R : {200, 20}) {
    std::vector<std::vector<float>> bias;
    for (const int threads : {1, 2}) {
      CAPTURE(threads);
      CAPTURE(R);
      heed::set_num_threads(threads);
      bias.push_back(check(R));
    }
    CHECK(bias[0] == bias[1]);
  }
  heed::set_num_threads(before);
}

TEST_CASE("sgemm resume: a product over K1 + K2 inner indices in two calls is one call's bits") {
  const auto ks = sgemms();
  if (ks.empty()) return;
  for (auto [name, sgemm] : ks) {
    CAPTURE(name);
    for (int64_t K1 : {0, 1, 100, 512, 700}) {
      const int64_t M = 13, N = 70, K2 = 300, K = K1 + K2;
      CAPTURE(K1);
      const auto ad = test::det_values(M * K, 31, -1, 1), bd = test::det_values(K * N, 32, -1, 1);
      const auto bias_d = test::det_values(N, 33, -1, 1);
      const std::vector<float> a(ad.begin(), ad.end()), b(bd.begin(), bd.end()), bias(bias_d.begin(), bias_d.end());
      std::vector<float> one(static_cast<size_t>(M * N)), two(static_cast<size_t>(M * N), 5.0f);
      sgemm(M, N, K, a.data(), K, 1, b.data(), N, 1, one.data(), N, bias.data(), nullptr, nullptr, false);
      // A's first K1 columns and B's first K1 rows, then the rest, resumed.
      sgemm(M, N, K1, a.data(), K, 1, b.data(), N, 1, two.data(), N, nullptr, nullptr, nullptr, false);
      sgemm(M, N, K2, a.data() + K1, K, 1, b.data() + K1 * N, N, 1, two.data(), N, bias.data(), nullptr, nullptr,
            true);
      int bad = 0;
      for (size_t i = 0; i < one.size(); ++i) bad += !same_float_bits(one[i], two[i]);
      CHECK(bad == 0);
    }
  }
}

#ifdef __SANITIZE_ADDRESS__
// Under AddressSanitizer the register tiles of sgemm and of the block GEMM
// are not instrumented; their callers check every range a tile will touch
// instead (core/cpu_block_gemm.cpp, HEED_TILE). These tests keep that
// honest: a buffer one float short, each operand in turn (A in both
// layouts), is still reported as a heap-buffer-overflow, at every
// instruction set; with nothing short the product runs clean.
namespace {

// Runs product() in a forked child, its stderr in err. True when the child
// exited 0: the product finished and returned true (else ASan stopped it).
bool runs_clean(const std::string& err, const std::function<bool()>& product) {
  fflush(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (FILE* f = freopen(err.c_str(), "w", stderr); f == nullptr) _exit(3);
    _exit(product() ? 0 : 4);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

TEST_CASE("sanitized build: sgemm with any operand one float short is reported by AddressSanitizer") {
  const int64_t M = 7, N = 70, K = 33;
  const test::TempDir dir("heed-sgemm-asan-");
  const std::string err = dir.path + "/stderr.txt";
  for (const auto& [isa, sgemm] : sgemms()) {
    for (int shortened = 0; shortened < 6; ++shortened) {  // a, a transposed, b, c, bias; 5: none
      CAPTURE(isa);
      CAPTURE(shortened);
      const bool clean = runs_clean(err, [&, sgemm = sgemm] {
        const bool tr = shortened == 1;
        std::vector<float> a(size_t(M * K - (shortened <= 1)), 1.0f), b(size_t(K * N - (shortened == 2)), 1.0f),
            c(size_t(M * N - (shortened == 3))), bias(size_t(N - (shortened == 4)), 0.5f);
        sgemm(M, N, K, a.data(), tr ? 1 : K, tr ? M : 1, b.data(), N, 1, c.data(), N, bias.data(), nullptr, nullptr,
              false);
        return c[0] == float(K) + 0.5f;
      });
      CHECK(clean == (shortened == 5));
      if (shortened != 5) CHECK(test::slurp(err).find("heap-buffer-overflow") != std::string::npos);
    }
  }
}

TEST_CASE("sanitized build: the block GEMM with any operand one float short is reported by AddressSanitizer") {
  const int64_t M = 7, N = 70, P = 33;
  const test::TempDir dir("heed-block-gemm-asan-");
  const std::string err = dir.path + "/stderr.txt";
  for (const auto& [isa, gemm] : kernels()) {
    for (int shortened = 0; shortened < 5; ++shortened) {  // a, a transposed, b, c; 4: none
      CAPTURE(isa);
      CAPTURE(shortened);
      const bool clean = runs_clean(err, [&, gemm = gemm] {
        const bool tr = shortened == 1;
        std::vector<float> a(size_t(M * P - (shortened <= 1)), 1.0f), b(size_t(P * N - (shortened == 2)), 1.0f),
            c(size_t(M * N - (shortened == 3)));
        gemm(M, N, P, a.data(), tr ? 1 : P, tr ? M : 1, b.data(), N, c.data(), N, 1.0f, false, kernel::Band{});
        return c[0] == float(P);
      });
      CHECK(clean == (shortened == 4));
      if (shortened != 4) CHECK(test::slurp(err).find("heap-buffer-overflow") != std::string::npos);
    }
  }
}
#endif
