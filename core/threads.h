// core/threads.h: heed's thread pacing (core/threads.cpp), inside core.
#pragma once

#include <cstdint>
#include <vector>

namespace heed::detail {

// How often the pacing looks at the clock's run-queue figures.
constexpr int64_t kPaceTick = 50'000'000;  // ns

// The pacing decision, apart from the clock and /proc (tests drive it). Fed
// once per tick with the time and the thread's total run-queue wait; returns
// the thread count to open parallel regions with, between 1 and the cap.
class Pacer {
 public:
  static constexpr double kBusy = 0.10;                 // waited above this share of the time: the cores are busy
  static constexpr int kBusyTicks = 2;                  // busy ticks in a row before the count is cut
  static constexpr int64_t kMinHold = 500'000'000;      // ns with fewer threads before trying every thread again
  static constexpr int64_t kMaxHold = 8'000'000'000;    // the longest hold (it doubles on each busy try)

  void reset(int cap);
  // crowded: more threads were runnable than the machine has cores when the
  // tick was taken. A busy tick that was not crowded does not count: the
  // thread waited behind its own process's threads (a new OpenMP worker
  // starts on its parent's core and runs there, spinning, until the kernel
  // moves it: measured, both threads on one core for 50-80 ms at a
  // program's start), not behind another program's.
  int update(int64_t now_ns, int64_t waited_ns, bool crowded = true);
  int cap() const { return cap_; }
  int active() const { return active_; }
  int64_t reductions() const { return reductions_; }
  int64_t reduced_ns() const { return reduced_ns_; }
  int64_t hold_ns() const { return hold_; }

 private:
  int cap_ = 1, active_ = 1;
  bool have_sample_ = false, probing_ = false;
  int busy_ticks_ = 0;
  int64_t last_now_ = 0, last_waited_ = 0;
  int64_t hold_ = kMinHold, hold_until_ = 0;
  int64_t reductions_ = 0, reduced_ns_ = 0;
};

// Called by Tensor::empty (every op's output) on the thread running the op:
// at most once per tick it reads the thread's run-queue wait and sets its
// OpenMP thread count. Costs one coarse clock read otherwise.
void pace_threads();
// Moves each thread of the calling thread's OpenMP team (opened here with
// omp_get_max_threads() threads) to a core of its own, the t-th the process
// may use (modulo their count), then gives each the process's whole mask
// back, so that the kernel may still move them. pace_threads() does it once
// per process, on the first thread to run an op. Returns the core each
// thread was moved to; empty when nothing was done (one thread or one core,
// inside a parallel region, or OMP_PROC_BIND: libgomp has placed the
// threads).
std::vector<int> spread_threads();
// set_num_threads(n): n becomes the calling thread's cap. pace_cap: its cap.
void pace_set_cap(int n);
int pace_cap();

// For its scope, the calling thread's OpenMP count is n: oneDNN fixes a
// primitive's split across threads when it creates it, and a primitive
// cached for the whole run must be built for a count chosen on purpose (the
// cap, or one for a primitive heed's threads run side by side), never for a
// moment of pacing.
class OmpThreadsFor {
 public:
  explicit OmpThreadsFor(int n);
  ~OmpThreadsFor();
  OmpThreadsFor(const OmpThreadsFor&) = delete;
  OmpThreadsFor& operator=(const OmpThreadsFor&) = delete;

 private:
  int saved_;
};

}  // namespace heed::detail
