// tests/core/test_allocator.cpp: the caching allocator.
#include "core/allocator.h"
#include "test_util.h"

using namespace heed;

TEST_CASE("allocator: after one warm-up step a training step takes no new memory from the system") {
  if (!alloc::caching_enabled()) return;  // sanitized builds hand every block back (see allocator.h)
  Generator g(1);
  nn::Sequential net{std::make_shared<nn::Conv1d>(nn::Conv1dOptions(2, 8, 3).padding(1).generator(&g)),
                     std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::SelfAttention>(nn::SelfAttentionOptions(8, 8, 4).generator(&g)),
                     std::make_shared<nn::Conv1d>(nn::Conv1dOptions(8, 1, 3).padding(1).generator(&g))};
  optim::Adam opt(net.named_parameters(), optim::AdamOptions().lr(1e-3));
  Tensor x = test::det_tensor({4, 2, 16}, 1), y = test::det_tensor({4, 1, 16}, 2);
  auto step = [&] {
    opt.zero_grad();
    Tensor loss = mse_loss(net.forward(x), y);
    backward(loss);
    opt.step();
    return loss.item();
  };
  step();
  step();
  alloc::reset_counters();
  step();
  alloc::Stats s = alloc::stats();
  CHECK(s.system_allocs == 0);
  CHECK(s.cache_hits > 10);
}

TEST_CASE("allocator: freed blocks are reused and the gauges balance") {
  if (!alloc::caching_enabled()) return;
  alloc::Stats before = alloc::stats();
  { Tensor a = Tensor::empty({1000}); }
  alloc::reset_counters();
  { Tensor b = Tensor::empty({1000}); }
  alloc::Stats after = alloc::stats();
  CHECK(after.system_allocs == 0);
  CHECK(after.cache_hits == 1);
  CHECK(after.bytes_in_use == before.bytes_in_use);
}

TEST_CASE("allocator: the peak gauge holds the most bytes in use since reset_peak") {
  // The gauges count in caching and sanitized builds alike.
  alloc::reset_peak();
  const alloc::Stats start = alloc::stats();
  CHECK(start.peak_bytes_in_use == start.bytes_in_use);
  {
    Tensor a = Tensor::empty({1000});  // 4000 bytes -> a 4032-byte block
    {
      Tensor b = Tensor::empty({100});  // 400 -> 448
      CHECK(alloc::stats().bytes_in_use == start.bytes_in_use + 4032 + 448);
    }
    Tensor c = Tensor::empty({10});  // 40 -> 64; b's block is gone, so no new peak
    alloc::Stats s = alloc::stats();
    CHECK(s.bytes_in_use == start.bytes_in_use + 4032 + 64);
    CHECK(s.peak_bytes_in_use == start.bytes_in_use + 4032 + 448);
  }
  alloc::Stats end = alloc::stats();
  CHECK(end.bytes_in_use == start.bytes_in_use);
  CHECK(end.peak_bytes_in_use == start.bytes_in_use + 4032 + 448);
  alloc::reset_peak();
  CHECK(alloc::stats().peak_bytes_in_use == start.bytes_in_use);
}
