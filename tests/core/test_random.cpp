// tests/core/test_random.cpp: Philox4x32-10 against its published answers,
// reproducibility (seeds, state save/restore, thread counts, views), and the
// distributions' moments.
//
// Statistical bounds are 5 standard errors of the estimate for n = 1e6
// samples: a correct generator fails one of them with probability ~6e-7, and
// the seeds are fixed, so the tests are deterministic anyway.
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/kernels.h"
#include "core/random.h"

using namespace heed;
using test::same_bits;

namespace {

constexpr int64_t kN = 1000000;

// Mean and (population) variance of all elements.
std::pair<double, double> moments(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  double m = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  double var = 0;
  for (double x : v) var += (x - m) * (x - m);
  return {m, var / static_cast<double>(v.size())};
}

// Elements of a (possibly strided) view in row-major order, as raw bits.
template <class T>
std::vector<T> strided_values(const Tensor& t) {
  std::vector<T> out;
  const T* base = static_cast<const T*>(t.impl()->storage->data);
  std::vector<int64_t> idx(t.dim(), 0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t off = t.offset();
    for (int64_t d = 0; d < t.dim(); ++d) off += idx[d] * t.stride(d);
    out.push_back(base[off]);
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      if (++idx[d] < t.size(d)) break;
      idx[d] = 0;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("philox4x32_10 matches the Random123 known-answer vectors") {
  // tests/kat_vectors of the Random123 distribution (D. E. Shaw Research):
  // counter (4 words), key (2 words) -> output (4 words).
  using C = std::array<uint32_t, 4>;
  using K = std::array<uint32_t, 2>;
  CHECK(philox4x32_10(C{0, 0, 0, 0}, K{0, 0}) == C{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(philox4x32_10(C{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, K{0xffffffff, 0xffffffff}) ==
        C{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(philox4x32_10(C{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, K{0xa4093822, 0x299f31d0}) ==
        C{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("generator block lays out counter and key as documented") {
  Generator g(0x0123456789abcdefULL);
  CHECK(g.block(0xfedcba9876543210ULL, 7) ==
        philox4x32_10({0x76543210, 0xfedcba98, 7, 0}, {0x89abcdef, 0x01234567}));
}

TEST_CASE("blocks_w0 gives block()'s first 64 bits, batch by batch, across the counter's 32-bit carry") {
  for (uint64_t seed : {uint64_t{0}, uint64_t{12345}, uint64_t{0xDEADBEEFCAFEF00Dull}}) {
    Generator g(seed);
    for (uint64_t first : {uint64_t{0}, uint64_t{7}, uint64_t{0xFFFFFFF8ull}, uint64_t{0x1FFFFFFFAull},
                           ~uint64_t{0} - 3}) {
      for (int n : {1, 5, Generator::kBatch, Generator::kBatch + 13}) {  // up to a batch and a part
        CAPTURE(seed);
        CAPTURE(first);
        CAPTURE(n);
        uint64_t w[2 * Generator::kBatch] = {};
        g.blocks_w0(first, n, w);
        for (int j = 0; j < 2 * Generator::kBatch; ++j) {
          const std::array<uint32_t, 4> b = g.block(first + static_cast<uint64_t>(j));
          CHECK(w[j] == (j < n ? (b[0] | static_cast<uint64_t>(b[1]) << 32) : 0));
        }
      }
    }
  }
}

TEST_CASE("a contiguous fill (blocks in batches) gives each element the value a strided one (block by block) gives it") {
  // 1000 elements: 62 whole batches and a tail of 8.
  for (int which = 0; which < 2; ++which) {
    CAPTURE(which);
    Generator g(21), h(21);
    Tensor flat = Tensor::empty({10, 100}, DType::f32);
    Tensor base = Tensor::empty({100, 10}, DType::f32);
    Tensor view = Tensor::view_of(base, {10, 100}, {1, 10}, 0);
    if (which == 0) {
      kernel::bernoulli_(flat, 0.3, g);
      kernel::bernoulli_(view, 0.3, h);
    } else {
      kernel::uniform_(flat, -1.0, 2.0, g);
      kernel::uniform_(view, -1.0, 2.0, h);
    }
    CHECK(strided_values<float>(view) == flat.to_vector<float>());
  }
}

TEST_CASE("same seed gives bit-identical tensors, different seeds differ") {
  Generator a(42), b(42), c(43);
  CHECK(same_bits(randn({64, 33}, &a), randn({64, 33}, &b)));
  CHECK(same_bits(rand({1000}, &a, DType::f64), rand({1000}, &b, DType::f64)));
  CHECK(same_bits(randint(-5, 5, {777}, &a), randint(-5, 5, {777}, &b)));
  Generator a2(42);
  CHECK_FALSE(same_bits(randn({64, 33}, &a2), randn({64, 33}, &c)));
}

TEST_CASE("successive fills advance the counter by numel and give fresh numbers") {
  Generator g(7);
  Tensor x = randn({10, 10}, &g);
  CHECK(g.offset() == 100);
  Tensor y = randn({10, 10}, &g);
  CHECK(g.offset() == 200);
  CHECK_FALSE(same_bits(x, y));
  g.normal();
  CHECK(g.offset() == 201);
  g.manual_seed(7);
  CHECK(g.offset() == 0);
  CHECK(same_bits(randn({10, 10}, &g), x));
}

TEST_CASE("a fill continues the stream exactly where scalar draws leave it") {
  // Element i of a fill reads block offset + i, the same block a scalar draw
  // at that offset would read.
  Generator g(3), h(3);
  Tensor u = rand({5}, &g, DType::f64);
  for (int i = 0; i < 5; ++i) CHECK(h.uniform() == u.to_vector<double>()[i]);
  Tensor z = randn({3}, &g, DType::f64);
  for (int i = 0; i < 3; ++i) CHECK(h.normal() == z.to_vector<double>()[i]);
  Tensor k = randint(0, 1000, {4}, &g);
  for (int i = 0; i < 4; ++i) CHECK(h.randint(0, 1000) == k.to_vector<int64_t>()[i]);
}

TEST_CASE("state save, draw, restore, draw gives identical numbers") {
  Generator g(1234);
  randn({17}, &g);
  SUBCASE("as a vector") {
    std::vector<uint64_t> s = g.state();
    Tensor a = randn({5, 7}, &g);
    double u = g.uniform();
    g.set_state(s);
    CHECK(same_bits(randn({5, 7}, &g), a));
    CHECK(g.uniform() == u);
  }
  SUBCASE("as an int64 tensor, into a fresh generator") {
    Tensor s = g.state_tensor();
    CHECK(s.dtype() == DType::i64);
    CHECK(s.shape() == Shape{2});
    Tensor a = rand({100}, &g, DType::f64);
    Generator h(999);
    h.set_state_tensor(s);
    CHECK(h.seed() == 1234);
    CHECK(same_bits(rand({100}, &h, DType::f64), a));
  }
  SUBCASE("seeds above 2^63 survive the int64 tensor") {
    Generator big(0xfedcba9876543210ULL);
    big.reserve(5);
    Generator h;
    h.set_state_tensor(big.state_tensor());
    CHECK(h.state() == big.state());
  }
}

TEST_CASE("a bad state is rejected with a message naming what was expected") {
  Generator g(5);
  CHECK_THROWS_WITH_AS(g.set_state({1, 2, 3}),
                       doctest::Contains("expected 2 values {seed, offset} as returned by state(), got 3"), Error);
  CHECK_THROWS_AS(g.set_state({}), Error);
  CHECK_THROWS_WITH_AS(g.set_state_tensor(Tensor::from_i64({1, 2, 3}, {3})), doctest::Contains("expected shape [2]"),
                       Error);
  CHECK_THROWS_WITH_AS(g.set_state_tensor(Tensor::from({1, 2}, {2})), doctest::Contains("expected dtype int64"),
                       Error);
  CHECK(g.state() == std::vector<uint64_t>{5, 0});
}

TEST_CASE("results do not depend on the thread count") {
  test::OmpThreadScope restore;
  // Above kParallelGrain, so the loops really split; the view covers the
  // chunked strided path.
  auto draw = [](int threads) {
    omp_set_num_threads(threads);
    Generator g(77);
    std::vector<Tensor> out;
    out.push_back(randn({300, 401}, &g));
    out.push_back(rand({300, 401}, &g, DType::f64));
    out.push_back(randint(-1000, 1000, {300, 401}, &g));
    Tensor b = Tensor::empty({300, 401}, DType::f32);
    kernel::bernoulli_(b, 0.25, g);
    out.push_back(b);
    Tensor base = Tensor::empty({401, 300}, DType::f64);
    kernel::normal_(Tensor::view_of(base, {300, 401}, {1, 300}, 0), 1.0, 2.0, g);
    out.push_back(base);
    return out;
  };
  std::vector<Tensor> one = draw(1), two = draw(2);
  for (size_t i = 0; i < one.size(); ++i) CHECK(same_bits(one[i], two[i]));
}

TEST_CASE("a strided view gets the numbers a contiguous tensor gets, in logical order") {
  // A transposed view [300, 401] of [401, 300] storage, and a narrowed one
  // (offset 5, row stride 410).
  Generator g(11), h(11);
  Tensor base = Tensor::empty({401, 300}, DType::f32);
  Tensor view = Tensor::view_of(base, {300, 401}, {1, 300}, 0);
  kernel::uniform_(view, -2.0, 3.0, g);
  Tensor ref = Tensor::empty({300, 401}, DType::f32);
  kernel::uniform_(ref, -2.0, 3.0, h);
  CHECK(strided_values<float>(view) == ref.to_vector<float>());

  Tensor wide = Tensor::zeros({20, 410}, DType::i64);
  Tensor narrow = Tensor::view_of(wide, {20, 400}, {410, 1}, 5);
  kernel::randint_(narrow, 1, 50, g);
  Tensor ref2 = Tensor::empty({20, 400}, DType::i64);
  kernel::randint_(ref2, 1, 50, h);
  CHECK(strided_values<int64_t>(narrow) == ref2.to_vector<int64_t>());
  // Elements outside the view stay untouched.
  std::vector<int64_t> all = wide.to_vector<int64_t>();
  for (int64_t r = 0; r < 20; ++r)
    for (int64_t c : {0, 1, 2, 3, 4, 405, 406, 407, 408, 409}) CHECK(all[r * 410 + c] == 0);
}

TEST_CASE("uniform: range and mean/variance of 1e6 samples") {
  // U[0,1): mean 1/2, variance 1/12. Standard error of the mean
  // sqrt(1/12/n) = 2.9e-4; of the sample variance sqrt((1/80 - 1/144)/n) = 7.5e-5.
  Generator g(2024);
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor u = rand({kN}, &g, dt);
    std::vector<double> v = u.to_vector<double>();
    CHECK(*std::min_element(v.begin(), v.end()) >= 0.0);
    CHECK(*std::max_element(v.begin(), v.end()) < 1.0);
    auto [m, var] = moments(u);
    CHECK(std::abs(m - 0.5) < 5 * 2.9e-4);
    CHECK(std::abs(var - 1.0 / 12) < 5 * 7.5e-5);
  }
  // U[-3, 5): mean 1, variance 64/12; errors scale by the width 8.
  Tensor w = Tensor::empty({kN}, DType::f64);
  kernel::uniform_(w, -3.0, 5.0, g);
  std::vector<double> v = w.to_vector<double>();
  CHECK(*std::min_element(v.begin(), v.end()) >= -3.0);
  CHECK(*std::max_element(v.begin(), v.end()) < 5.0);
  auto [m, var] = moments(w);
  CHECK(std::abs(m - 1.0) < 5 * 8 * 2.9e-4);
  CHECK(std::abs(var - 64.0 / 12) < 5 * 64 * 7.5e-5);
}

TEST_CASE("uniform keeps hi out of a float range where rounding would reach it") {
  // Floats below 2^24 are spaced 1 apart, so lo + (hi - lo) * u for
  // U[2^24 - 2, 2^24) rounds to hi = 2^24 for about a quarter of the draws
  // unless the fill steps back below hi.
  Generator g(1);
  Tensor t = Tensor::empty({100000}, DType::f32);
  kernel::uniform_(t, 16777214.0, 16777216.0, g);
  int64_t top = 0;
  for (float x : t.to_vector<float>()) {
    REQUIRE((x == 16777214.0f || x == 16777215.0f));
    top += x == 16777215.0f;
  }
  // Half the draws round to 2^24 - 1 and a quarter step back to it.
  CHECK(std::abs(top - 75000) < 5 * 137);  // sd sqrt(1e5 * 3/4 * 1/4) ~ 137
}

TEST_CASE("normal: mean and std of 1e6 samples") {
  // N(mu, s^2): standard error of the mean s/sqrt(n); of the sample variance
  // s^2 sqrt(2/n).
  Generator g(99);
  for (DType dt : {DType::f32, DType::f64}) {
    auto [m, var] = moments(randn({kN}, &g, dt));
    CHECK(std::abs(m) < 5 * 1e-3);
    CHECK(std::abs(var - 1) < 5 * std::sqrt(2.0 / kN));
  }
  Tensor t = Tensor::empty({1000, 1000}, DType::f64);
  kernel::normal_(t, 2.0, 3.0, g);
  auto [m, var] = moments(t);
  CHECK(std::abs(m - 2.0) < 5 * 3.0 / 1000);
  CHECK(std::abs(var - 9.0) < 5 * 9.0 * std::sqrt(2.0 / kN));
  // Scalar draws follow the same law.
  double s = 0, s2 = 0;
  for (int i = 0; i < 100000; ++i) {
    double z = g.normal();
    s += z;
    s2 += z * z;
  }
  CHECK(std::abs(s / 1e5) < 5 / std::sqrt(1e5));
  CHECK(std::abs(s2 / 1e5 - 1) < 5 * std::sqrt(2 / 1e5));
}

TEST_CASE("bernoulli: 0/1 values at rate p") {
  // Standard error of the rate: sqrt(p (1 - p) / n).
  Generator g(5);
  for (DType dt : {DType::f32, DType::f64, DType::i64}) {
    Tensor t = Tensor::empty({kN}, dt);
    kernel::bernoulli_(t, 0.3, g);
    std::vector<double> v = t.to_vector<double>();
    double ones = 0;
    for (double x : v) {
      REQUIRE((x == 0.0 || x == 1.0));
      ones += x;
    }
    CHECK(std::abs(ones / kN - 0.3) < 5 * std::sqrt(0.3 * 0.7 / kN));
  }
  Tensor t = Tensor::empty({1000}, DType::f32);
  kernel::bernoulli_(t, 0.0, g);
  for (float x : t.to_vector<float>()) CHECK(x == 0.0f);
  kernel::bernoulli_(t, 1.0, g);
  for (float x : t.to_vector<float>()) CHECK(x == 1.0f);
}

TEST_CASE("randint covers [lo, hi) evenly and nothing outside") {
  // 10 outcomes, n = 1e6: each count is 1e5 +- 5 sqrt(n p (1 - p)) = 1500.
  Generator g(8);
  std::vector<int64_t> v = randint(-3, 7, {kN}, &g).to_vector<int64_t>();
  std::vector<int64_t> count(10, 0);
  for (int64_t x : v) {
    REQUIRE((x >= -3 && x < 7));
    ++count[x + 3];
  }
  for (int64_t c : count) CHECK(std::abs(c - 100000) < 1500);

  // Floating tensors hold the same integers.
  Tensor f = Tensor::empty({1000}, DType::f32);
  kernel::randint_(f, 0, 4, g);
  for (float x : f.to_vector<float>()) CHECK((x == 0 || x == 1 || x == 2 || x == 3));

  // A one-value range, and the full int64 range (range 2^64 - 1).
  for (int64_t x : randint(5, 6, {100}, &g).to_vector<int64_t>()) CHECK(x == 5);
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> wide = randint(lo, hi, {1000}, &g).to_vector<int64_t>();
  int negative = 0;
  for (int64_t x : wide) {
    CHECK(x < hi);
    negative += x < 0;
  }
  CHECK(std::abs(negative - 500) < 5 * 16);  // sd sqrt(1000/4) ~ 16

  // Scalar randint: range and evenness over 3 outcomes.
  std::vector<int64_t> c3(3, 0);
  for (int i = 0; i < 300000; ++i) {
    int64_t x = g.randint(10, 13);
    REQUIRE((x >= 10 && x < 13));
    ++c3[x - 10];
  }
  for (int64_t c : c3) CHECK(std::abs(c - 100000) < 5 * 259);  // sd sqrt(3e5 * 1/3 * 2/3) ~ 258
}

TEST_CASE("the default generator follows manual_seed") {
  manual_seed(31);
  Tensor a = randn({4, 4});
  Generator g(31);
  CHECK(same_bits(a, randn({4, 4}, &g)));
  CHECK(default_generator().offset() == 16);
  manual_seed(31);
  CHECK(same_bits(randn({4, 4}), a));
}

TEST_CASE("bad fill arguments throw and leave the generator untouched") {
  Generator g(3);
  Tensor f = Tensor::empty({4}, DType::f32);
  Tensor i = Tensor::empty({4}, DType::i64);
  CHECK_THROWS_WITH_AS(kernel::uniform_(i, 0, 1, g), doctest::Contains("uniform_: expected a float32 or float64"),
                       Error);
  CHECK_THROWS_WITH_AS(kernel::uniform_(f, 2, 1, g), doctest::Contains("expected lo <= hi"), Error);
  CHECK_THROWS_AS(kernel::normal_(f, 0, -1, g), Error);
  CHECK_THROWS_AS(kernel::normal_(i, 0, 1, g), Error);
  CHECK_THROWS_WITH_AS(kernel::bernoulli_(f, 1.5, g), doctest::Contains("expected 0 <= p <= 1"), Error);
  CHECK_THROWS_WITH_AS(kernel::randint_(i, 3, 3, g), doctest::Contains("expected lo < hi"), Error);
  CHECK_THROWS_WITH_AS(kernel::randint_(f, 0, (int64_t{1} << 24) + 1, g),
                       doctest::Contains("not exactly representable in float32"), Error);
  CHECK_THROWS_AS(g.randint(0, 0), Error);
  Tensor expanded = Tensor::view_of(f, {3, 4}, {0, 1}, 0);
  CHECK_THROWS_WITH_AS(kernel::normal_(expanded, 0, 1, g), doctest::Contains("expanded view"), Error);
  CHECK_THROWS_AS(kernel::uniform_(Tensor(), 0, 1, g), Error);
  CHECK(g.offset() == 0);
}

TEST_CASE("keep_mask draws bernoulli_'s values for any run of its elements, scaled; keep 0 and 1 keep none and all") {
  for (double keep : {0.7, 0.5, 0.0, 1.0, 0.999999}) {
    CAPTURE(keep);
    Generator g(9);
    g.reserve(3);
    Generator at = g;  // the fill's first block is 3
    Tensor t = Tensor::empty({1000}, DType::f32);
    kernel::bernoulli_(t, keep, g);
    const std::vector<float> ref = t.to_vector<float>();
    for (int64_t from : {0, 100, 999})
      for (int64_t n : {int64_t{1}, int64_t{Generator::kBatch}, int64_t{77}}) {
        const int64_t m = std::min<int64_t>(n, 1000 - from);
        std::vector<float> z(static_cast<size_t>(m), -1.0f);
        at.keep_mask<float>(3 + static_cast<uint64_t>(from), m, keep, 2.5f, z.data());
        for (int64_t j = 0; j < m; ++j) CHECK(z[size_t(j)] == ref[size_t(from + j)] * 2.5f);
      }
    std::vector<double> zd(1000);
    at.keep_mask<double>(3, 1000, keep, 1.0, zd.data());
    int64_t kept = 0;
    for (size_t j = 0; j < zd.size(); ++j) {
      CHECK(zd[j] == static_cast<double>(ref[j]));
      kept += zd[j] != 0.0;
    }
    if (keep == 0.0) CHECK(kept == 0);
    if (keep == 1.0) CHECK(kept == 1000);
    if (keep == 0.7) CHECK(std::abs(kept - 700) < 60);
  }
}

TEST_CASE("dropout_mask_ is bernoulli_(1 - p) scaled by 1 / (1 - p), bit for bit, on 1 and 2 threads; a bad p is refused") {
  const int before = heed::num_threads();
  for (DType dt : {DType::f32, DType::f64})
    for (int64_t n : {int64_t{1}, int64_t{4097}, int64_t{300000}})  // a chunk and one, several chunks in parallel
      for (double p : {0.2, 0.5}) {
        CAPTURE(n);
        CAPTURE(p);
        Generator a(17), b(17);
        a.reserve(5);
        b.reserve(5);
        Tensor ref = Tensor::empty({n}, dt);
        kernel::bernoulli_(ref, 1.0 - p, a);
        kernel::scale_(ref, 1.0 / (1.0 - p));
        for (int threads : {1, 2}) {
          heed::set_num_threads(threads);
          Generator c = b;
          Tensor m = Tensor::empty({n}, dt);
          kernel::dropout_mask_(m, p, c);
          CHECK(c.offset() == a.offset());
          CHECK(test::same_bits(m, ref));
        }
      }
  heed::set_num_threads(before);
  Generator g(1);
  Tensor t = Tensor::empty({4});
  test::check_error([&] { kernel::dropout_mask_(t, 1.0, g); }, {"dropout_mask_", "0 <= p < 1", "1"});
  CHECK(g.offset() == 0);
}

TEST_CASE("a process's share of a batch draws its rows of the global batch's dropout mask (set_batch_shard)") {
  // One process: a mask over 6 rows of 5. Three processes, 2 rows each: each
  // must get its own rows of that mask, and every generator must end where
  // the one-process generator ends. Before, every process drew rows 0-1's
  // mask for its own rows (the same seed and offset everywhere).
  Generator one(5);
  one.reserve(3);
  Tensor global = Tensor::empty({6, 5});
  kernel::dropout_mask_(global, 0.5, one);
  const std::vector<float> all = global.to_vector<float>();
  std::vector<float> first_rows;
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    Generator g(5);
    g.reserve(3);
    g.set_batch_shard(r, 3);
    Tensor mine = Tensor::empty({2, 5});
    kernel::dropout_mask_(mine, 0.5, g);
    const std::vector<float> got = mine.to_vector<float>();
    CHECK(got == std::vector<float>(all.begin() + 10 * r, all.begin() + 10 * (r + 1)));
    CHECK(g.state() == one.state());
    if (r == 0) first_rows = got;
    // A scalar draw is the same on every process (a choice all must share).
    CHECK(g.next_u64() == Generator(one).next_u64());
  }
  CHECK(first_rows != std::vector<float>(all.begin() + 10, all.begin() + 20));  // the rows do differ
  Generator g(1);
  test::check_error([&] { g.set_batch_shard(2, 2); }, {"set_batch_shard", "0 <= rank < processes", "rank 2 of 2"});
  test::check_error([&] { g.set_batch_shard(0, 0); }, {"set_batch_shard", "rank 0 of 0"});
  CHECK(g.shard_processes() == 1);
}
