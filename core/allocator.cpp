// core/allocator.cpp
#include "core/allocator.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/env.h"
#include "core/error.h"

namespace heed::alloc {
namespace {

// Blocks are binned by size rounded up to 64 bytes: training repeats the
// same shapes, so exact bins are reused fully without the 2x waste of
// power-of-two bins.
constexpr size_t kAlign = 64;
constexpr int64_t kMaxCachedBytes = int64_t{4} << 30;

size_t round_up(size_t n) { return n == 0 ? kAlign : ((n + kAlign - 1) / kAlign) * kAlign; }

// Blocks of 2 MiB or more (a GPT's activations and their gradients) are
// mapped at a 2 MiB boundary and offered to the kernel for transparent huge
// pages (madvise; Debian's default THP mode only backs regions that ask).
// A training step streams hundreds of MB of them: on 4 KiB pages the TLB
// covers a few MB and every few KB read costs a page walk.
constexpr size_t kHuge = size_t{2} << 20;
// HEED_NO_HUGE_PAGES=1 (or on, true, yes: core/env.h) in the environment keeps them on the ordinary path
// (to measure the difference); so does the sanitized build, where
// AddressSanitizer must see every block.
bool huge_pages_enabled() {
#ifdef HEED_SANITIZE_BUILD
  return false;
#else
  static const bool on = [] {
    return !env::flag("HEED_NO_HUGE_PAGES", false);
  }();
  return on;
#endif
}
size_t page_round(size_t n) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (n + page - 1) / page * page;
}
bool mapped(size_t n) { return n >= kHuge && huge_pages_enabled(); }

void* system_alloc(size_t n) {
  if (!mapped(n)) return std::aligned_alloc(kAlign, n);
  const size_t len = page_round(n), over = len + kHuge;
  void* raw = mmap(nullptr, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = (reinterpret_cast<uintptr_t>(raw) + kHuge - 1) / kHuge * kHuge;
  const size_t head = start - reinterpret_cast<uintptr_t>(raw), tail = over - head - len;
  if (head > 0) munmap(raw, head);
  if (tail > 0) munmap(reinterpret_cast<char*>(start) + len, tail);
  void* p = reinterpret_cast<void*>(start);
  madvise(p, len, MADV_HUGEPAGE);  // advice only: without THP the pages stay small
  return p;
}
void system_free(void* p, size_t n) {
  if (mapped(n)) munmap(p, page_round(n));
  else std::free(p);
}

// Mid-sized blocks, from 64 KiB up to 2 MiB (GPT-128's activations, a
// layer's weights, gradients and optimiser state), are carved one after the
// other from 16 MiB chunks that start on a 2 MiB boundary and are offered
// for huge pages: one page per 2 MiB instead of 512. GPT-128's float32
// step, 8 alternating pairs of bench runs without and with: 23.95 -> 23.18
// ms (medians, 6 of 8 pairs faster); its bf16 step and GPT-256's (whose
// activations were already on huge pages) unchanged; RSS +2 MB. Carved
// blocks never go back to the system (a chunk is not freed piece by
// piece): released, they stay in the cache's free lists, whatever its
// limit and empty_cache().
// Chunks stop at kArenaMax in all; later blocks take the ordinary path.
// Only with the cache (the sanitized build and HEED_NO_CACHE=1 hand every
// block back) and with huge pages (HEED_NO_HUGE_PAGES=1).
constexpr size_t kArenaMin = size_t{64} << 10;
constexpr size_t kArenaChunk = size_t{16} << 20;
constexpr size_t kArenaMax = size_t{1} << 30;
bool arena_size(size_t n) { return n >= kArenaMin && n < kHuge && huge_pages_enabled(); }

struct Arena {
  std::vector<std::pair<uintptr_t, uintptr_t>> chunks;  // [begin, end)
  uintptr_t next = 0, end = 0;
  size_t mapped = 0;
  // A block of n bytes (a multiple of 64), or null when the chunks are spent.
  void* carve(size_t n) {
    if (end - next < n) {
      if (mapped + kArenaChunk > kArenaMax) return nullptr;
      void* c = system_alloc(kArenaChunk);  // 2 MiB-aligned, advised for huge pages
      if (!c) return nullptr;
      mapped += kArenaChunk;
      next = reinterpret_cast<uintptr_t>(c);
      end = next + kArenaChunk;
      chunks.emplace_back(next, end);
    }
    void* p = reinterpret_cast<void*>(next);
    next += n;
    return p;
  }
  bool owns(const void* p) const {
    const auto a = reinterpret_cast<uintptr_t>(p);
    for (const auto& [b, e] : chunks)
      if (a >= b && a < e) return true;
    return false;
  }
};

struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free;
  Stats s;
  Arena arena;  // under mu
  bool enabled;
  Cache() {
#ifdef HEED_SANITIZE_BUILD
    enabled = false;
#else
    enabled = !env::flag("HEED_NO_CACHE", false);  // HEED_NO_CACHE=1: every block from the system
#endif
  }
  ~Cache() {
    for (auto& [n, v] : free)
      for (void* p : v)
        if (!arena.owns(p)) system_free(p, n);
  }
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: tensors may outlive static destruction
  return *c;
}

// Under c.mu, once the block is obtained: a failed allocation changes no gauge.
void count_system_alloc(Cache& c, size_t n) {
  c.s.system_allocs++;
  c.s.bytes_in_use += static_cast<int64_t>(n);
  c.s.peak_bytes_in_use = std::max(c.s.peak_bytes_in_use, c.s.bytes_in_use);
}

}  // namespace

void* allocate(size_t bytes) {
  size_t n = round_up(bytes);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.enabled) {
      auto it = c.free.find(n);
      if (it != c.free.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        c.s.cache_hits++;
        c.s.bytes_cached -= static_cast<int64_t>(n);
        c.s.bytes_in_use += static_cast<int64_t>(n);
        c.s.peak_bytes_in_use = std::max(c.s.peak_bytes_in_use, c.s.bytes_in_use);
        return p;
      }
    }
    if (c.enabled && arena_size(n))
      if (void* p = c.arena.carve(n)) {
        count_system_alloc(c, n);
        return p;
      }
  }
  void* p = system_alloc(n);
  if (!p && c.enabled) {
    // Blocks of other sizes sitting in the cache may be what stands in the
    // way: hand them back to the system and ask once more.
    empty_cache();
    p = system_alloc(n);
  }
  if (!p) fail("out of memory allocating {} bytes", bytes);  // the gauges stay as they were
  {
    std::lock_guard<std::mutex> lock(c.mu);
    count_system_alloc(c, n);
  }
#ifdef HEED_SANITIZE_BUILD
  // Fresh memory is often zero pages, which would hide a kernel that reads
  // an element of Tensor::empty it never wrote. In the sanitizer build every
  // allocation starts as all-ones bytes (NaN in float32 and float64, -1 in
  // int64), so such a read shows up as NaN in the tests.
  std::memset(p, 0xFF, n);
#endif
  return p;
}

void release(void* p, size_t bytes) {
  if (!p) return;
  size_t n = round_up(bytes);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.s.bytes_in_use -= static_cast<int64_t>(n);
    if (c.enabled && (c.s.bytes_cached + static_cast<int64_t>(n) <= kMaxCachedBytes || c.arena.owns(p))) {
      c.free[n].push_back(p);
      c.s.bytes_cached += static_cast<int64_t>(n);
      return;
    }
  }
  system_free(p, n);
}

Stats stats() {
  std::lock_guard<std::mutex> lock(cache().mu);
  return cache().s;
}

void reset_counters() {
  std::lock_guard<std::mutex> lock(cache().mu);
  cache().s.system_allocs = 0;
  cache().s.cache_hits = 0;
}

void reset_peak() {
  std::lock_guard<std::mutex> lock(cache().mu);
  cache().s.peak_bytes_in_use = cache().s.bytes_in_use;
}

void empty_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  int64_t kept = 0;
  for (auto& [n, v] : c.free) {
    std::vector<void*> carved;
    for (void* p : v) {
      if (c.arena.owns(p)) carved.push_back(p);
      else system_free(p, n);
    }
    kept += static_cast<int64_t>(n * carved.size());
    v = std::move(carved);
  }
  c.s.bytes_cached = kept;
}

bool caching_enabled() { return cache().enabled; }

}  // namespace heed::alloc
