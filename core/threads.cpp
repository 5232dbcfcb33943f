// core/threads.cpp: how heed's OpenMP threads wait (heed::share_cores).
//
// libgomp, the OpenMP runtime of heed and oneDNN, lets a thread that reaches
// a barrier or finishes its share of a parallel loop spin for GOMP_SPINCOUNT
// iterations (300,000 by default: milliseconds) before it sleeps. Alone on
// the machine that costs nothing; beside another busy process it burns the
// time slices the other needs, and two processes with spinning threads slow
// each other down 5-20x (measured: a 2-thread training step beside another
// one, and a sampler beside a training run). libgomp reads its settings once,
// when it is loaded, before main() runs, so the only way to change them from
// inside a program is to start it again with the variable set.
#include <fcntl.h>
#include <sched.h>
#include <omp.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/error.h"
#include "core/kernels.h"
#include "core/runtime.h"
#include "core/threads.h"

namespace heed {

namespace {
// HEED_ADAPTIVE_THREADS: adaptive threads unless 0, off, false or no
// (core/env.h); another value throws, naming it.
bool env_adaptive() { return env::flag("HEED_ADAPTIVE_THREADS", true); }

// With OMP_PROC_BIND set, the cores of all of libgomp's places (the cores
// the process may use: the initial thread's own mask is narrowed to the
// first place); false when threads are not bound or there are no places.
bool places_cores(cpu_set_t& mask) {
  CPU_ZERO(&mask);
  if (omp_get_proc_bind() == omp_proc_bind_false) return false;
  const int places = omp_get_num_places();
  for (int p = 0; p < places; ++p) {
    std::vector<int> ids(static_cast<size_t>(std::max(0, omp_get_place_num_procs(p))));
    if (ids.empty()) continue;
    omp_get_place_proc_ids(p, ids.data());
    for (int id : ids)
      if (id >= 0 && id < CPU_SETSIZE) CPU_SET(id, &mask);
  }
  return CPU_COUNT(&mask) > 0;
}
}  // namespace

// Spin iterations before a waiting thread sleeps (a PAUSE is ~27 ns on Zen
// 4). With adaptive threads (the default), 30,000 (~0.8 ms): longer than the
// gaps between a training step's parallel regions, so the other thread is
// awake when the next one opens; when another process wants the cores,
// adaptive threads drop to one thread per process, which leaves nobody to
// spin. 1,000 (~27 us) slept through GPT-128's longer gaps ~85 times a step
// and woke with a futex each time: alone, 8 alternating pairs of `heed bench
// --only gpt-128 --precision f32`, 1,000 against 30,000: 27.5-34.3 against
// 25.5-31.4 ms, 7 of 8 pairs slower (median +3.5%, mean +5.7%). Without
// adaptive threads (HEED_ADAPTIVE_THREADS=0) both threads stay under load,
// and a long spin takes the other process's time slices (two GPT-128
// processes with fixed threads: 151 ms a step at 10,000, 363 ms at 30,000):
// there, 1,000.
const char* share_cores_spin(bool adaptive) { return adaptive ? "30000" : "1000"; }

namespace {
// With OMP_PROC_BIND set, libgomp binds the initial thread to the first of
// its places when it is loaded, and a restarted process inherits that
// one-place mask: libgomp then sees one place, and binds every thread of
// every team to the same core (OMP_PROC_BIND=true: both threads on CPU 0,
// GPT-128 at half speed and paced as if the cores were busy). Give the
// thread back the cores of all the places, which libgomp computed from the
// mask the process started with, so the restarted libgomp finds the same
// places.
void unbind_initial_thread() {
  cpu_set_t mask;
  if (places_cores(mask)) sched_setaffinity(0, sizeof mask, &mask);
}
}  // namespace

void share_cores() {
  // The user's own choice, or already restarted.
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT") || std::getenv("HEED_SHARE_CORES")) return;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.eof() && !in.good()) return;
  std::vector<std::string> args;
  for (size_t i = 0; i < all.size();) {
    const size_t end = all.find('\0', i);
    args.push_back(all.substr(i, end == std::string::npos ? std::string::npos : end - i));
    if (end == std::string::npos) break;
    i = end + 1;
  }
  if (args.empty()) return;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  bool adaptive = true;
  try {
    adaptive = env_adaptive();
  } catch (const Error&) {
    // A bad HEED_ADAPTIVE_THREADS is reported where threads are first paced.
  }
  unbind_initial_thread();
  setenv("GOMP_SPINCOUNT", share_cores_spin(adaptive), 1);
  setenv("HEED_SHARE_CORES", "1", 1);  // marks the restarted process (and stops a loop if exec is refused below)
  // The program's own path, so that the restarted process keeps its name
  // (ps, top, pgrep and pkill read it from the file executed: "exe" for
  // /proc/self/exe); /proc/self/exe when the path is gone (a rebuild).
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len > 0) {
    self[len] = '\0';
    execv(self, argv.data());
  }
  execv("/proc/self/exe", argv.data());
  // exec failed (no /proc?): carry on with libgomp's defaults.
  unsetenv("GOMP_SPINCOUNT");
}

// ---- pacing: fewer threads while the cores are oversubscribed ----
//
// A short spin is not enough when two processes each want every core: a
// parallel region then waits, at every barrier, for a thread the kernel has
// parked behind the other process's threads, and a 2-thread step slows down
// 3x instead of the fair 2x (the toy attention model: 18 ms alone, 52-56 ms
// side by side). The thread that opens heed's parallel regions measures, every
// 50 ms of its work, how long it waited for a core (the kernel's run-queue
// delay, /proc/thread-self/schedstat). Waiting more than a tenth of the time,
// with more threads runnable on the machine than it has cores at the tick
// (/proc/loadavg), means another program wants the cores: it opens its
// regions with fewer
// threads (OpenMP's thread count for that thread, which oneDNN's and heed's
// regions follow) for a hold of 0.5 s, then tries every thread again for one
// tick; a try that finds the cores still busy doubles the hold (to 8 s), a
// quiet one ends the pacing. Two busy ticks in a row start it: a burst
// shorter than that passes. The count of runnable threads keeps a process
// alone at full speed: its new OpenMP worker sometimes starts on its own
// core and spins there for 50-80 ms before the kernel moves it, and the
// wait alone cut a lone 2-thread bf16 product (3072 x 256 x 1024) to one
// thread, and half its speed, for its first 0.5 s in 2 of 12 and 3 of 6
// runs (0 of 12 with the count; but 4 of 130 of a 3072 x 256 x 256 one,
// fixed at the cause by spread_threads below: 0 of 100). Where the count
// cannot speak for this process's cores (an affinity mask or a cgroup
// quota), the wait alone decides, as before. Results do not change: every
// kernel splits its work by shape, never by thread count.

namespace {

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// The calling thread's total time waiting for a core, in ns; -1 when the
// kernel does not say (no schedstat).
int64_t run_queue_wait_ns() {
  char buf[128];
  const int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  unsigned long long on_cpu = 0, waited = 0;
  if (std::sscanf(buf, "%llu %llu", &on_cpu, &waited) != 2) return -1;
  return static_cast<int64_t>(waited);
}

// Whether the machine-wide count of runnable threads speaks for the cores
// this process runs on: it may run on every online core (no narrower
// affinity mask; with OMP_PROC_BIND, none narrower than its places) and no
// cgroup quota caps its CPU time. In a container given 2 of a host's 64
// cores, the host's count says nothing about them.
bool machine_count_applies() {
  static const bool applies = [] {
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t mask;
    CPU_ZERO(&mask);
    if (cores <= 0 || (!places_cores(mask) && sched_getaffinity(0, sizeof mask, &mask) != 0) ||
        CPU_COUNT(&mask) < cores)
      return false;
    std::ifstream quota("/sys/fs/cgroup/cpu.max");
    std::string first;
    return !(quota >> first) || first == "max";
  }();
  return applies;
}

// Whether more threads are runnable on the whole machine (the kernel's
// count in /proc/loadavg, this thread included) than it has cores online;
// true when that count does not apply or the kernel does not say (the wait
// alone decides then).
bool crowded() {
  if (!machine_count_applies()) return true;
  char buf[128];
  const int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return true;
  buf[n] = '\0';
  double l1, l5, l15;
  long running = 0, total = 0;
  if (std::sscanf(buf, "%lf %lf %lf %ld/%ld", &l1, &l5, &l15, &running, &total) != 5) return true;
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores <= 0 || running > cores;
}

std::atomic<int> g_adaptive{-1};  // -1: not read from the environment yet

struct ThreadPace {
  bool started = false;
  bool unavailable = false;
  detail::Pacer pacer;
  int64_t next_tick = 0;
};
thread_local ThreadPace t_pace;

ThreadPace& pace_state() {
  ThreadPace& p = t_pace;
  if (!p.started) {
    p.started = true;
    p.pacer.reset(omp_get_max_threads());
  }
  return p;
}

}  // namespace

namespace detail {

void Pacer::reset(int cap) {
  cap_ = std::max(1, cap);
  active_ = cap_;
  have_sample_ = false;
  hold_ = kMinHold;
  hold_until_ = 0;
  probing_ = false;
  busy_ticks_ = 0;
}

int Pacer::update(int64_t now, int64_t waited, bool crowded) {
  if (!have_sample_ || now <= last_now_) {
    have_sample_ = true;
    last_now_ = now;
    last_waited_ = waited;
    return active_;
  }
  const double busy = crowded ? double(waited - last_waited_) / double(now - last_now_) : 0.0;
  if (active_ < cap_) reduced_ns_ += now - last_now_;
  last_now_ = now;
  last_waited_ = waited;
  if (active_ == cap_) {
    // A busy tick counts only in a row of kBusyTicks (a try counts at once):
    // a burst of a few tens of ms (the kernel tidying up after a process
    // that exited, say) is no reason to halve the next half second.
    busy_ticks_ = busy > kBusy ? busy_ticks_ + 1 : 0;
    if (busy_ticks_ >= (probing_ ? 1 : kBusyTicks) && cap_ > 1) {
      busy_ticks_ = 0;
      // Fewer threads in proportion to the time lost waiting; at least one.
      active_ = std::max(1, std::min(cap_ - 1, static_cast<int>(cap_ * (1.0 - busy))));
      if (probing_) hold_ = std::min(2 * hold_, kMaxHold);
      hold_until_ = now + hold_;
      ++reductions_;
    } else if (probing_) {
      hold_ = kMinHold;  // every thread again, and the cores are not contended
    }
    probing_ = false;
  } else if (now >= hold_until_) {
    active_ = cap_;  // try every thread again for one tick
    probing_ = true;
  }
  return active_;
}

}  // namespace detail

// A new OpenMP worker sometimes starts on its parent's core and spins there
// for 50-80 ms before the kernel moves it (measured with a per-10-ms probe
// of both threads' sched_getcpu() and run-queue wait): a program's first
// tenth of a second ran on one core, and the master's wait behind its own
// worker looked like a busy machine to the pacing. Logged each tick over 40
// lone runs of a bf16 product (3072 x 256 x 256, 20 calls), the master
// waited 45-50% of a tick at the start of nearly every run; with the
// threads spread first, at most 7% of any tick in 40 runs.
std::vector<int> detail::spread_threads() {
  std::vector<int> placed;
  const int nt = omp_get_max_threads();
  if (nt < 2 || omp_in_parallel() || omp_get_proc_bind() != omp_proc_bind_false) return placed;
  cpu_set_t all;
  CPU_ZERO(&all);
  if (sched_getaffinity(0, sizeof all, &all) != 0 || CPU_COUNT(&all) < 2) return placed;
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &all)) cpus.push_back(c);
  placed.assign(static_cast<size_t>(nt), -1);
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num();
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[static_cast<size_t>(t) % cpus.size()], &one);
    if (sched_setaffinity(0, sizeof one, &one) == 0) {
      placed[static_cast<size_t>(t)] = sched_getcpu();  // on that core now: the call migrates before it returns
      sched_setaffinity(0, sizeof all, &all);
    }
  }
  return placed;
}

void detail::pace_threads() {
  ThreadPace& p = t_pace;
  const int64_t now = now_ns();
  if (now < p.next_tick) return;
  p.next_tick = now + kPaceTick;
  if (omp_in_parallel()) return;
  // Once per process, by the first thread to run an op (the main thread,
  // usually): each thread that opens regions has its own OpenMP team, but
  // one spread by every thread that ever makes a tensor (a data loader's)
  // would open teams that would otherwise never exist.
  static std::atomic<bool> spread{false};
  if (!spread.load(std::memory_order_relaxed) && !spread.exchange(true)) detail::spread_threads();
  if (!adaptive_threads() || p.unavailable) return;
  pace_state();  // started: its cap is the count OpenMP has now
  // OpenMP's count changed behind heed's back (omp_set_num_threads): the
  // caller's choice becomes the cap.
  if (omp_get_max_threads() != p.pacer.active()) p.pacer.reset(omp_get_max_threads());
  const int64_t waited = run_queue_wait_ns();
  if (waited < 0) {
    p.unavailable = true;
    return;
  }
  const int before = p.pacer.active();
  const int after = p.pacer.update(now, waited, crowded());
  if (after != before) omp_set_num_threads(after);
}

void detail::pace_set_cap(int n) { pace_state().pacer.reset(n); }

detail::OmpThreadsFor::OmpThreadsFor(int n) : saved_(omp_get_max_threads()) {
  if (n != saved_) omp_set_num_threads(n);
}
detail::OmpThreadsFor::~OmpThreadsFor() {
  if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
}

int detail::pace_cap() { return t_pace.started ? t_pace.pacer.cap() : omp_get_max_threads(); }

void set_adaptive_threads(bool on) {
  g_adaptive.store(on ? 1 : 0, std::memory_order_relaxed);
  if (!on && t_pace.started && t_pace.pacer.active() != t_pace.pacer.cap()) {
    omp_set_num_threads(t_pace.pacer.cap());
    t_pace.pacer.reset(t_pace.pacer.cap());
  }
}

bool adaptive_threads() {
  int a = g_adaptive.load(std::memory_order_relaxed);
  if (a < 0) {  // first use: HEED_ADAPTIVE_THREADS, unless set_adaptive_threads came first
    int from_env = env_adaptive() ? 1 : 0;
    g_adaptive.compare_exchange_strong(a, from_env, std::memory_order_relaxed);
    a = g_adaptive.load(std::memory_order_relaxed);
  }
  return a == 1;
}

ThreadPacing thread_pacing() {
  const ThreadPace& p = pace_state();
  ThreadPacing r;
  r.threads = p.pacer.cap();
  r.active = p.pacer.active();
  r.reductions = p.pacer.reductions();
  r.reduced_seconds = double(p.pacer.reduced_ns()) / 1e9;
  return r;
}

}  // namespace heed
