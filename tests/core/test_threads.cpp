// tests/core/test_threads.cpp: the adaptive threads (core/threads.h): the
// pacing decision, driven with made-up clocks, and the real thing beside
// threads that keep every core busy.
#include <omp.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/threads.h"
#include "test_util.h"

using namespace heed;
using detail::Pacer;

namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kTick = 50 * kMs;

// Feeds the pacer ticks of 50 ms in which the thread waited `busy` of the
// time; returns the thread count after each.
std::vector<int> run(Pacer& p, int64_t& now, int64_t& waited, double busy, int ticks) {
  std::vector<int> out;
  for (int i = 0; i < ticks; ++i) {
    now += kTick;
    waited += static_cast<int64_t>(busy * kTick);
    out.push_back(p.update(now, waited));
  }
  return out;
}

}  // namespace

TEST_CASE("pacing: alone nothing changes; a short burst neither; a busy machine halves two threads, holds, tries again, backs off") {
  Pacer p;
  p.reset(2);
  int64_t now = 1000 * kMs, waited = 0;
  CHECK(p.update(now, waited) == 2);  // the first sample only sets the baseline
  // Alone: a few percent of waiting never cuts the count.
  for (int c : run(p, now, waited, 0.05, 200)) CHECK(c == 2);
  CHECK(p.reductions() == 0);
  CHECK(p.reduced_ns() == 0);

  // A busy tick alone (a burst) changes nothing, nor do busy ticks that are
  // not in a row.
  for (int i = 0; i < 5; ++i) {
    CHECK(run(p, now, waited, 0.5, 1).back() == 2);
    CHECK(run(p, now, waited, 0.02, 1).back() == 2);
  }
  CHECK(p.reductions() == 0);
  // Busy twice in a row (waiting half the time): one thread, for 0.5 s.
  CHECK(run(p, now, waited, 0.5, 1).back() == 2);
  CHECK(run(p, now, waited, 0.5, 1).back() == 1);
  CHECK(p.reductions() == 1);
  auto held = run(p, now, waited, 0.0, 10);  // ticks at 50 .. 500 ms of the hold
  for (int i = 0; i < 9; ++i) CHECK(held[i] == 1);
  CHECK(held[9] == 2);  // the hold is over: every thread again, for one tick
  // The try finds the cores busy: back to one thread, the hold doubled.
  CHECK(run(p, now, waited, 0.5, 1).back() == 1);
  CHECK(p.hold_ns() == 2 * Pacer::kMinHold);
  held = run(p, now, waited, 0.0, 20);
  for (int i = 0; i < 19; ++i) CHECK(held[i] == 1);
  CHECK(held[19] == 2);
  // Doubling stops at the longest hold (a busy try cuts at once).
  for (int i = 0; i < 10; ++i) {
    run(p, now, waited, 0.5, 1);
    while (p.active() == 1) run(p, now, waited, 0.0, 1);
  }
  CHECK(p.hold_ns() == Pacer::kMaxHold);
  // A quiet try ends the pacing and resets the hold.
  CHECK(run(p, now, waited, 0.01, 1).back() == 2);
  CHECK(p.hold_ns() == Pacer::kMinHold);
  for (int c : run(p, now, waited, 0.01, 50)) CHECK(c == 2);
  CHECK(p.reduced_ns() > 0);
}

TEST_CASE("pacing: waiting while no more threads are runnable than cores (behind the process's own) never cuts") {
  Pacer p;
  p.reset(2);
  int64_t now = 1000 * kMs, waited = 0;
  p.update(now, waited, false);
  // Waiting half the time for 20 ticks, the machine never crowded: both threads stay.
  for (int i = 0; i < 20; ++i) {
    now += kTick;
    waited += kTick / 2;
    CHECK(p.update(now, waited, false) == 2);
  }
  CHECK(p.reductions() == 0);
  // Crowded for one tick between uncrowded ones: not two busy ticks in a row.
  for (int i = 0; i < 6; ++i) {
    now += kTick;
    waited += kTick / 2;
    CHECK(p.update(now, waited, i % 2 == 0) == 2);
  }
  CHECK(p.reductions() == 0);
  // Crowded and waiting, twice in a row: cut.
  for (int i = 0; i < 2; ++i) {
    now += kTick;
    waited += kTick / 2;
    p.update(now, waited, true);
  }
  CHECK(p.active() == 1);
  CHECK(p.reductions() == 1);
}

TEST_CASE("pacing: the cut is in proportion to the waiting, at least one thread, below the cap") {
  int64_t now = 0, waited = 0;
  Pacer p;
  p.reset(8);
  p.update(now, waited);
  CHECK(run(p, now, waited, 0.5, 2).back() == 4);
  p.reset(8);
  p.update(now, waited);
  CHECK(run(p, now, waited, 0.95, 2).back() == 1);
  p.reset(8);
  p.update(now, waited);
  CHECK(run(p, now, waited, 0.11, 2).back() == 7);
  const int64_t cuts = p.reductions();
  p.reset(1);
  p.update(now, waited);
  CHECK(run(p, now, waited, 0.9, 3).back() == 1);  // one thread stays one, and that is no cut
  CHECK(p.reductions() == cuts);
}

TEST_CASE("adaptive threads: beside threads that keep every core busy, ops run on fewer threads; num_threads keeps the count set") {
  struct Restore {
    int before = heed::num_threads();
    ~Restore() {
      heed::set_adaptive_threads(true);
      heed::set_num_threads(before);
    }
  } restore;
  heed::set_adaptive_threads(true);
  heed::set_num_threads(2);
  const auto before = heed::thread_pacing();
  std::atomic<bool> stop{false};
  std::vector<std::thread> spinners;
  const unsigned cores = std::max(2u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < cores; ++i)
    spinners.emplace_back([&] {
      volatile uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) n = n + 1;
    });
  // Ops (each output passes the pacing) until the count is cut, for up to 10 s.
  Tensor a = test::det_tensor({64, 64}, 1);
  const auto t0 = std::chrono::steady_clock::now();
  int active_seen = 2;
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
    Tensor b = matmul(a, a);
    if (heed::thread_pacing().reductions > before.reductions) {
      active_seen = omp_get_max_threads();
      break;
    }
  }
  stop = true;
  for (auto& t : spinners) t.join();
  const auto after = heed::thread_pacing();
  CHECK(after.reductions > before.reductions);
  CHECK(active_seen == 1);
  CHECK(heed::num_threads() == 2);
  CHECK(after.threads == 2);
  // Turning it off gives every thread back at once.
  heed::set_adaptive_threads(false);
  CHECK(omp_get_max_threads() == 2);
  CHECK(heed::thread_pacing().active == 2);
}

TEST_CASE("spread_threads: a team's threads are moved to cores of their own, then get the process's whole mask back") {
  struct Restore {
    int before = heed::num_threads();
    ~Restore() { heed::set_num_threads(before); }
  } restore;
  heed::set_num_threads(2);
  cpu_set_t all;
  CPU_ZERO(&all);
  REQUIRE(sched_getaffinity(0, sizeof all, &all) == 0);
  const bool bound = omp_get_proc_bind() != omp_proc_bind_false;
  const std::vector<int> placed = detail::spread_threads();
  if (CPU_COUNT(&all) < 2 || bound) {
    CHECK(placed.empty());  // nothing to spread over, or libgomp placed them
  } else {
    REQUIRE(placed.size() == 2);
    CHECK(placed[0] != placed[1]);
    for (int c : placed) {
      CHECK(c >= 0);
      CHECK(CPU_ISSET(c, &all));
    }
    // Each thread may run anywhere the process may again.
    std::vector<int> same(2, 0);
#pragma omp parallel num_threads(2)
    {
      cpu_set_t mine;
      CPU_ZERO(&mine);
      if (sched_getaffinity(0, sizeof mine, &mine) == 0)
        same[static_cast<size_t>(omp_get_thread_num())] = CPU_EQUAL(&mine, &all) ? 1 : 0;
    }
    CHECK(same[0] == 1);
    CHECK(same[1] == 1);
  }
  // Inside a parallel region it does nothing.
  std::vector<int> inner;
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    inner = detail::spread_threads();
  }
  CHECK(inner.empty());
}
