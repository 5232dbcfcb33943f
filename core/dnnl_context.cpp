// core/dnnl_context.cpp
#include "core/dnnl_context.h"

#include <omp.h>
#include <pthread.h>

#include <atomic>
#include <csignal>

#include "core/kernels.h"

namespace heed::kernel::detail {

namespace {

// ---- signals and oneDNN's GEMM kernels ----
// oneDNN's JIT sgemm (the `gemm:jit` kernels behind some matmul and
// convolution shapes) points the stack pointer at a heap workspace while it
// runs, for more than 84 rows. A signal handled on that thread then has its
// frame (several KB with the AVX-512 state) written by the kernel just below
// the workspace, over the heap: a Ctrl-C during training (heed's handler
// only sets a flag) corrupted the heap in about 1 run in 20 ("corrupted size
// vs. prev_size", "unaligned tcache chunk"), with 1 or 2 threads. So no
// signal is ever handled there: heed's OpenMP worker threads block the
// asynchronous signals for good (the main thread takes them, as usual in
// threaded programs), and any other thread blocks them while it runs a
// oneDNN primitive; a signal that arrives meanwhile waits for the end of
// the call. oneDNN's brgemm matmuls keep a normal stack and skip the two
// system calls (heed's float32 and bf16 products run on them). Synchronous faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP,
// SIGSYS) stay unblocked: blocking them would only hide a crash's cause.
sigset_t async_signals() {
  sigset_t s;
  sigfillset(&s);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}) sigdelset(&s, sig);
  return s;
}

thread_local bool t_signals_blocked = false;  // a worker thread blocked by shield_workers
std::atomic<int> g_shielded_threads{0};

// Blocks the asynchronous signals on every thread of OpenMP's pool (each
// time the pool may have grown); threads it creates later inherit the block
// from the calling thread's mask, set for the duration.
void shield_workers() {
  const int n = omp_get_max_threads();
  if (n <= g_shielded_threads.load(std::memory_order_relaxed) || omp_in_parallel()) return;
  const sigset_t all = async_signals();
  sigset_t old;
  pthread_sigmask(SIG_BLOCK, &all, &old);
#pragma omp parallel num_threads(n)
  if (omp_get_thread_num() != 0) {
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    t_signals_blocked = true;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  g_shielded_threads.store(n, std::memory_order_relaxed);
}

// Runs fn with the asynchronous signals blocked on the calling thread
// (a worker has them blocked already).
template <class Fn>
void without_signals(const Fn& fn) {
  shield_workers();
  if (t_signals_blocked) {
    fn();
    return;
  }
  struct Blocked {  // the thread's mask as it was, put back however fn ends
    sigset_t old;
    Blocked() {
      const sigset_t all = async_signals();
      pthread_sigmask(SIG_BLOCK, &all, &old);
    }
    ~Blocked() { pthread_sigmask(SIG_SETMASK, &old, nullptr); }
  } blocked;
  fn();
}

struct Context {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{eng};
};
Context& ctx() {
  // HEED_CPU_ISA caps oneDNN before it creates anything (core/cpu_isa.cpp).
  apply_isa_settings();
  static Context c;
  return c;
}
}  // namespace

dnnl::engine& dnnl_engine() { return ctx().eng; }

dnnl::memory dnnl_mem(const dnnl::memory::desc& md, const Tensor& t) {
  return dnnl::memory(md, ctx().eng, t.raw_data());
}

void dnnl_run(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args) {
  without_signals([&] {
    p.execute(ctx().stream, args);
    ctx().stream.wait();
  });
}

namespace {
dnnl::stream& here_stream() {
  thread_local dnnl::stream stream{ctx().eng};
  return stream;
}
}  // namespace

void dnnl_run_here(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args) {
  without_signals([&] {
    p.execute(here_stream(), args);
    here_stream().wait();
  });
}

void dnnl_run_here_unshielded(const dnnl::primitive& p, const std::unordered_map<int, dnnl::memory>& args) {
  p.execute(here_stream(), args);
  here_stream().wait();
}

bool dnnl_needs_shield(const std::string& impl) { return impl.rfind("brg:", 0) != 0; }

}  // namespace heed::kernel::detail
