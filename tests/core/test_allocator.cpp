// tests/core/test_allocator.cpp: the caching allocator.
#include "core/allocator.h"
#include "test_util.h"

#include <sys/resource.h>
#include <sys/wait.h>

#include <cstdio>

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

TEST_CASE("allocator: a block of 2 MiB or more starts on a 2 MiB boundary, holds its data and is reused") {
  // Such blocks are mapped for transparent huge pages (allocator.cpp);
  // HEED_NO_HUGE_PAGES=1 keeps them on the ordinary path, as the sanitized
  // build (which also turns the cache off) does.
  const char* env = std::getenv("HEED_NO_HUGE_PAGES");
  const bool huge = !(env && env[0] == '1') && alloc::caching_enabled();
  const int64_t n = (int64_t{3} << 20) / 4 + 5;  // 3 MiB and a bit: a huge page and a tail of small ones
  const void* first = nullptr;
  {
    Tensor a = Tensor::empty({n});
    first = a.data<float>();
    if (huge) CHECK(reinterpret_cast<uintptr_t>(first) % (uintptr_t{2} << 20) == 0);
    float* p = a.data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(i % 1000);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += p[i];
    CHECK(s == doctest::Approx(static_cast<double>(n / 1000) * 499500.0 + (n % 1000) * (n % 1000 - 1) / 2.0));
    CHECK(p[n - 1] == static_cast<float>((n - 1) % 1000));
  }
  if (alloc::caching_enabled()) {
    alloc::reset_counters();
    Tensor b = Tensor::empty({n});
    CHECK(static_cast<const void*>(b.data<float>()) == first);
    CHECK(alloc::stats().system_allocs == 0);
  }
  // Handing the cached blocks back unmaps them; a new one still works.
  alloc::empty_cache();
  Tensor c = Tensor::zeros({n});
  CHECK(c.data<float>()[n - 1] == 0.0f);
}

TEST_CASE("allocator: blocks from 64 KiB to 2 MiB are carved apart, hold their data and stay cached") {
  // From huge-page chunks (allocator.cpp), only with the cache and huge
  // pages; elsewhere the same checks hold for the ordinary path.
  const char* env = std::getenv("HEED_NO_HUGE_PAGES");
  const bool carved = !(env && env[0] == '1') && alloc::caching_enabled();
  const std::vector<int64_t> floats = {16 * 1024, 25 * 1024 + 3, 100 * 1024, 384 * 1024, (int64_t{2} << 20) / 4 - 16};
  {
    std::vector<Tensor> ts;
    for (size_t k = 0; k < floats.size(); ++k) {
      ts.push_back(Tensor::empty({floats[k]}));
      float* p = ts.back().data<float>();
      CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);
      for (int64_t i = 0; i < floats[k]; ++i) p[i] = static_cast<float>(k * 1000 + i % 1000);
    }
    // Disjoint, and each still holds what was written into it.
    for (size_t a = 0; a < ts.size(); ++a) {
      const auto lo = reinterpret_cast<uintptr_t>(ts[a].data<float>()), hi = lo + 4 * uintptr_t(floats[a]);
      for (size_t b = 0; b < ts.size(); ++b) {
        if (a == b) continue;
        const auto lo2 = reinterpret_cast<uintptr_t>(ts[b].data<float>()), hi2 = lo2 + 4 * uintptr_t(floats[b]);
        CHECK((hi <= lo2 || hi2 <= lo));
      }
      const float* p = ts[a].data<float>();
      int64_t bad = 0;
      for (int64_t i = 0; i < floats[a]; ++i) bad += p[i] != static_cast<float>(a * 1000 + i % 1000);
      CHECK(bad == 0);
    }
  }
  alloc::empty_cache();
  if (carved) {
    // empty_cache keeps carved blocks: the same sizes come back without the system.
    alloc::reset_counters();
    std::vector<Tensor> again;
    for (int64_t n : floats) again.push_back(Tensor::empty({n}));
    CHECK(alloc::stats().system_allocs == 0);
  }
}

TEST_CASE("allocator: an allocation the system refuses changes no gauge") {
  alloc::reset_peak();
  const alloc::Stats before = alloc::stats();
  const size_t huge = size_t{1} << 50;  // 1 PiB: refused by any machine this runs on
  CHECK_THROWS_WITH_AS(alloc::allocate(huge), doctest::Contains("out of memory allocating 1125899906842624 bytes"),
                       heed::Error);
  const alloc::Stats after = alloc::stats();
  CHECK(after.bytes_in_use == before.bytes_in_use);
  CHECK(after.peak_bytes_in_use == before.peak_bytes_in_use);
  CHECK(after.system_allocs == before.system_allocs);
}

namespace {
// The process's address space in bytes (VmSize), or -1.
int64_t address_space_bytes() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  int64_t kb = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmSize: %ld kB", &kb) == 1) break;
  std::fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}
}  // namespace

TEST_CASE("allocator: an allocation that fits only without the cache's blocks empties the cache and succeeds") {
  // A child process under an address-space limit caches a freed 400 MB block,
  // then asks for 420 MB: only the room the cached block holds lets it fit.
  constexpr size_t kFirst = size_t{400} << 20, kSecond = size_t{420} << 20;
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const int64_t now = address_space_bytes();
    if (now < 0) _exit(3);
    const rlimit lim{static_cast<rlim_t>(now) + (size_t{600} << 20), static_cast<rlim_t>(now) + (size_t{600} << 20)};
    if (setrlimit(RLIMIT_AS, &lim) != 0) _exit(3);
    try {
      void* a = alloc::allocate(kFirst);
      std::memset(a, 1, 4096);
      alloc::release(a, kFirst);  // into the cache when it is on
      void* b = alloc::allocate(kSecond);
      std::memset(b, 2, 4096);
      alloc::release(b, kSecond);
    } catch (const heed::Error&) {
      _exit(1);
    }
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK_MESSAGE(WEXITSTATUS(status) == 0, "exit status ", WEXITSTATUS(status),
                " (1: the second allocation was refused although the cache held room for it; 3: no limit could be set)");
}
