// core/allocator.h: where tensor storage comes from. A caching allocator:
// freed blocks are kept in per-size free lists and handed out again, so after
// the first training step (which sees every shape once) a step needs no new
// memory from the system. The counters let benchmarks prove it, and the
// byte gauges measure how much tensor memory a call needs at its peak
// (`heed bench --attention-memory`).
//
// Under the sanitizers (HEED_SANITIZE) and with HEED_NO_CACHE=1 in the
// environment, every block goes straight back to the system, so
// AddressSanitizer still sees each use after free.
//
// Blocks of 2 MiB or more start on a 2 MiB boundary and are offered to the
// kernel for transparent huge pages (a training step streams hundreds of MB
// of activations; 4 KiB pages cost a TLB miss every few KB). Blocks from 64
// KiB up to 2 MiB are carved from 16 MiB chunks offered the same way, and
// never go back to the system: released, they stay cached (up to 1 GiB of
// chunks; later ones take the ordinary path). Not under the sanitizers,
// nor with HEED_NO_HUGE_PAGES=1 in the environment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace heed::alloc {

void* allocate(size_t bytes);          // 64-byte aligned; never null: when the system refuses, empties the cache and
                                       // asks once more, then throws
void release(void* p, size_t bytes);   // bytes as passed to allocate

// A std::allocator whose blocks start on a 64-byte cache line, for kernels'
// scratch vectors (LineVector): from std::vector's own blocks, 16 bytes past
// a line, every 64-byte row of a copied operand straddled two lines. Plain
// operator new, not allocate(): scratch is not tensor memory (stats()).
template <class T>
struct LineAligned {
  using value_type = T;
  LineAligned() = default;
  template <class U>
  LineAligned(const LineAligned<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(64))); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t(64)); }
  template <class U>
  bool operator==(const LineAligned<U>&) const { return true; }
};
template <class T>
using LineVector = std::vector<T, LineAligned<T>>;

// Byte gauges count blocks as allocated (rounded up to 64 bytes), whether
// they came from the system or the cache.
struct Stats {
  int64_t system_allocs = 0;      // blocks obtained from the system
  int64_t cache_hits = 0;         // blocks reused from the cache
  int64_t bytes_in_use = 0;       // held by live tensors now
  int64_t bytes_cached = 0;       // free blocks kept for reuse
  int64_t peak_bytes_in_use = 0;  // the most bytes_in_use has been since start or reset_peak()
};
Stats stats();
void reset_counters();  // zeroes system_allocs and cache_hits (not the byte gauges)
// Starts a new peak: peak_bytes_in_use = bytes_in_use. The peak of a call is
// then stats().peak_bytes_in_use after it minus bytes_in_use before it.
void reset_peak();
void empty_cache();     // returns every cached block to the system but the carved ones (above)
bool caching_enabled();

}  // namespace heed::alloc
