// tests/data/test_batch.cpp: BatchSampler coverage, shuffling, exact state
// restore, and the gather_rows / slice_batch helpers.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/kernels.h"
#include "data/batch.h"

using namespace heed;
using namespace heed::data;

namespace {

// All batches of the sampler's current epoch (and moves it to the next one).
std::vector<std::vector<int64_t>> one_epoch(BatchSampler& s) {
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> idx;
  while (s.next(idx)) out.push_back(idx);
  CHECK(idx.empty());
  return out;
}

std::vector<int64_t> flatten(const std::vector<std::vector<int64_t>>& b) {
  std::vector<int64_t> out;
  for (const auto& v : b) out.insert(out.end(), v.begin(), v.end());
  return out;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

}  // namespace

TEST_CASE("batch sampler: in-order batches cover 0..n-1 exactly once, in order") {
  BatchSampler s(25, {.batch_size = 10});
  CHECK(s.batches_per_epoch() == 3);
  const auto b = one_epoch(s);
  REQUIRE(b.size() == 3);
  CHECK(b[0].size() == 10);
  CHECK(b[1].size() == 10);
  CHECK(b[2].size() == 5);  // the partial last batch is kept by default
  CHECK(flatten(b) == iota(25));
  CHECK(s.epoch() == 1);
  CHECK(s.position() == 0);
  CHECK(flatten(one_epoch(s)) == iota(25));  // every epoch is the same order
  CHECK(s.epoch() == 2);
}

TEST_CASE("batch sampler: drop_last drops the partial batch") {
  BatchSampler s(25, {.batch_size = 10, .drop_last = true});
  CHECK(s.batches_per_epoch() == 2);
  const auto b = one_epoch(s);
  REQUIRE(b.size() == 2);
  CHECK(flatten(b) == iota(20));
  // An exact multiple loses nothing.
  BatchSampler exact(30, {.batch_size = 10, .drop_last = true});
  CHECK(flatten(one_epoch(exact)) == iota(30));
  // The reference setting: 25,000 samples in batches of 100, 250 per epoch.
  BatchSampler ref(25000, {.batch_size = 100});
  const auto rb = one_epoch(ref);
  CHECK(rb.size() == 250);
  CHECK(flatten(rb) == iota(25000));
}

TEST_CASE("batch sampler: shuffled epochs are permutations, differ per epoch, and follow the seed") {
  BatchSampler a(1000, {.batch_size = 64, .shuffle = true, .seed = 7});
  BatchSampler b(1000, {.batch_size = 64, .shuffle = true, .seed = 7});
  BatchSampler c(1000, {.batch_size = 64, .shuffle = true, .seed = 8});
  const std::vector<int64_t> e0 = flatten(one_epoch(a)), e1 = flatten(one_epoch(a));
  for (const auto* e : {&e0, &e1}) {
    std::vector<int64_t> sorted = *e;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == iota(1000));
    CHECK(*e != iota(1000));
  }
  CHECK(e0 != e1);
  CHECK(flatten(one_epoch(b)) == e0);
  CHECK(flatten(one_epoch(b)) == e1);
  CHECK(flatten(one_epoch(c)) != e0);
}

TEST_CASE("batch sampler: next_batch counts batches_per_epoch steps and rolls over by itself") {
  for (bool shuffle : {false, true}) {
    CAPTURE(shuffle);
    BatchSampler a(25, {.batch_size = 10, .shuffle = shuffle, .seed = 4});
    BatchSampler b(25, {.batch_size = 10, .shuffle = shuffle, .seed = 4});
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      std::vector<std::vector<int64_t>> steps;
      for (int64_t k = 0; k < a.batches_per_epoch(); ++k) {
        steps.push_back(a.next_batch());
        CHECK(a.epoch() == epoch);
      }
      CHECK(steps == one_epoch(b));  // the same batches as the while (next(idx)) loop
      CHECK(a.position() == 25);     // exhausted; the next call starts epoch + 1
    }
    CHECK(a.next_batch() == b.next_batch());
    CHECK(a.epoch() == 3);
    CHECK(a.state() == b.state());
  }
}

TEST_CASE("batch sampler: batches_per_epoch is ceil(n / B), or floor(n / B) with drop_last") {
  // n = 24: 3 full batches of 8 either way; n = 25: a short fourth batch,
  // dropped by drop_last.
  CHECK(BatchSampler(24, {.batch_size = 8}).batches_per_epoch() == 3);
  CHECK(BatchSampler(24, {.batch_size = 8, .drop_last = true}).batches_per_epoch() == 3);
  CHECK(BatchSampler(25, {.batch_size = 8}).batches_per_epoch() == 4);
  CHECK(BatchSampler(25, {.batch_size = 8, .drop_last = true}).batches_per_epoch() == 3);
  CHECK(BatchSampler(1, {.batch_size = 1}).batches_per_epoch() == 1);
  BatchSampler s(24, {.batch_size = 8});
  CHECK(static_cast<int64_t>(one_epoch(s).size()) == s.batches_per_epoch());
}

TEST_CASE("batch sampler: a shuffled epoch is Fisher-Yates with Generator::randint") {
  // Epoch e draws n - 1 randint blocks starting at offset e (n - 1).
  const int64_t n = 50;
  BatchSampler s(n, {.batch_size = 7, .shuffle = true, .seed = 3});
  Generator g(3);
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> p = iota(n);
    for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[g.randint(0, i + 1)]);
    CHECK(s.order() == p);
    CHECK(flatten(one_epoch(s)) == p);
  }
}

TEST_CASE("batch sampler: restoring a saved state continues identically") {
  for (bool shuffle : {false, true}) {
    for (bool drop_last : {false, true}) {
      CAPTURE(shuffle);
      CAPTURE(drop_last);
      const BatchSamplerOptions opt{.batch_size = 16, .shuffle = shuffle, .drop_last = drop_last, .seed = 11};
      BatchSampler s(100, opt);
      std::vector<int64_t> idx;
      one_epoch(s);                                // finish epoch 0
      for (int k = 0; k < 3; ++k) CHECK(s.next(idx));  // 3 batches into epoch 1
      const std::vector<int64_t> saved = s.state();
      const Tensor saved_t = s.state_tensor();
      CHECK(saved[4] == 1);   // epoch
      CHECK(saved[5] == 48);  // position
      std::vector<std::vector<int64_t>> expect;
      for (int k = 0; k < 20; ++k) {  // runs past the end of epoch 1 into epoch 2
        const bool more = s.next(idx);
        expect.push_back(more ? idx : std::vector<int64_t>{-1});
      }
      for (int how = 0; how < 2; ++how) {
        BatchSampler r(100, {.batch_size = 16, .shuffle = shuffle, .drop_last = drop_last, .seed = 999});
        if (how == 0)
          r.set_state(saved);
        else
          r.set_state_tensor(saved_t);
        CHECK(r.epoch() == 1);
        CHECK(r.position() == 48);
        CHECK(r.state() == saved);
        std::vector<std::vector<int64_t>> got;
        for (int k = 0; k < 20; ++k) {
          const bool more = r.next(idx);
          got.push_back(more ? idx : std::vector<int64_t>{-1});
        }
        CHECK(got == expect);
        CHECK(r.state() == s.state());
      }
    }
  }
}

TEST_CASE("batch sampler: bad states and options are rejected with clear errors") {
  CHECK_THROWS_WITH_AS(BatchSampler(0, {}), doctest::Contains("expected n >= 1"), Error);
  CHECK_THROWS_WITH_AS(BatchSampler(10, {.batch_size = 0}), doctest::Contains("expected batch_size >= 1"), Error);
  CHECK_THROWS_WITH_AS(BatchSampler(5, {.batch_size = 10, .drop_last = true}),
                       doctest::Contains("drop_last with n=5 < batch_size=10 leaves no batch"), Error);
  BatchSampler s(100, {.batch_size = 10});
  std::vector<int64_t> st = s.state();
  CHECK_THROWS_WITH_AS(s.set_state({1, 2, 3}), doctest::Contains("expected 8 values"), Error);
  BatchSampler other(99, {.batch_size = 10});
  CHECK_THROWS_WITH_AS(other.set_state(st), doctest::Contains("the state is for n=100, this sampler has n=99"), Error);
  BatchSampler shuffled(100, {.batch_size = 10, .shuffle = true});
  CHECK_THROWS_WITH_AS(shuffled.set_state(st), doctest::Contains("shuffle=0"), Error);
  std::vector<int64_t> bad = st;
  bad[5] = 15;
  CHECK_THROWS_WITH_AS(s.set_state(bad), doctest::Contains("position 15 is not a batch boundary"), Error);
  bad = st;
  bad[4] = -1;
  CHECK_THROWS_WITH_AS(s.set_state(bad), doctest::Contains("expected epoch >= 0"), Error);
  CHECK_THROWS_WITH_AS(s.set_state_tensor(Tensor::from({1, 2}, {2})), doctest::Contains("expected dtype int64"),
                       Error);
  CHECK(s.state() == st);  // rejected states leave the sampler untouched
}

TEST_CASE("batch: slice_batch returns a view for in-order batches and a gather otherwise") {
  const Tensor x = kernel::reshape(Tensor::arange(5 * 2 * 3), {5, 2, 3});  // [N, C, L]
  const Tensor v = slice_batch(x, {1, 2, 3});
  CHECK(v.shape() == Shape{3, 2, 3});
  CHECK(v.shares_storage(x));
  CHECK(v.at({0, 0, 0}) == 6.0);
  CHECK(v.to_vector<float>() == kernel::narrow(x, 0, 1, 3).to_vector<float>());

  const Tensor g = slice_batch(x, {4, 0, 2});
  CHECK_FALSE(g.shares_storage(x));
  CHECK(g.shape() == Shape{3, 2, 3});
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t t = 0; t < 3; ++t) CHECK(g.at({i, c, t}) == x.at({std::vector<int64_t>{4, 0, 2}[i], c, t}));
  CHECK(gather_rows(x, {3, 3}).at({1, 1, 2}) == x.at({3, 1, 2}));
  CHECK_THROWS_WITH_AS(gather_rows(x, {0, 5}), doctest::Contains("index 5 (at position 1) is out of range"), Error);
  CHECK_THROWS_WITH_AS(slice_batch(x, {5, 6}), doctest::Contains("index 5"), Error);

  // A sampler's batches gathered row by row rebuild the whole tensor.
  BatchSampler s(5, {.batch_size = 2, .shuffle = true, .seed = 1});
  std::vector<int64_t> idx;
  int64_t rows = 0;
  while (s.next(idx)) {
    const Tensor b = slice_batch(x, idx);
    for (size_t i = 0; i < idx.size(); ++i)
      CHECK(b.at({static_cast<int64_t>(i), 1, 1}) == x.at({idx[i], 1, 1}));
    rows += b.size(0);
  }
  CHECK(rows == 5);
}
