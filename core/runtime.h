// core/runtime.h: the process-wide settings of heed's CPU backends.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace heed {

// Threads for heed's parallel loops, GEMMs and convolutions (OpenMP; oneDNN
// shares the pool). Results do not depend on it: every kernel splits work by
// shape, never by thread count. Throws when n < 1.
void set_num_threads(int n);
int num_threads();  // the count set (regions may run with fewer: below)
// Adaptive threads (on by default): while more threads want the cores than
// there are cores (another training, a sampler, any busy process), the
// thread that runs heed's ops opens its parallel regions with fewer threads,
// so that no region waits at a barrier for a thread the kernel has parked.
// It watches its own wait for a core (the run-queue delay the kernel keeps)
// every 50 ms of work; waiting more than 10% of the time, twice in a row,
// cuts its count in proportion (to 1 of 2), for 0.5 s, then it tries every
// thread again for 50 ms (a busy try doubles the hold, up to 8 s). Alone on the machine it
// never waits and nothing changes. Results do not change either.
// HEED_ADAPTIVE_THREADS=0 (or off) turns it off at start-up.
void set_adaptive_threads(bool on);
bool adaptive_threads();
// What the adaptive threads did on the calling thread.
struct ThreadPacing {
  int threads = 1;              // num_threads()
  int active = 1;               // the count regions open with now
  int64_t reductions = 0;       // times the count was cut for a busy machine
  double reduced_seconds = 0;   // time spent below num_threads()
};
ThreadPacing thread_pacing();
// Makes heed's waiting threads give the cores away sooner (libgomp's spin
// count, GOMP_SPINCOUNT: share_cores_spin() instead of 300,000, ~8 ms), so
// that processes sharing the cores (two trainings, a sampler beside a
// training) each keep a fair share instead of slowing each other down many
// times over. libgomp reads it once at start-up, so this re-executes the
// program (same arguments, same process id) with the variable set, once; it
// returns at once when OMP_WAIT_POLICY or GOMP_SPINCOUNT is set (the user's
// choice wins). Call it first thing in main(), before any output or file is
// touched: guard_main does.
void share_cores();
// The spin count share_cores sets: 30,000 (~0.8 ms) with adaptive threads
// (HEED_ADAPTIVE_THREADS unset, 1 or on), which leave one thread per process
// when the cores are shared; 1,000 (~27 us) without them (HEED_ADAPTIVE_THREADS
// 0 or off), where a longer spin would take the other process's time. A
// program that calls set_adaptive_threads(false) should set
// HEED_ADAPTIVE_THREADS=0 too, so that share_cores picks the short spin.
const char* share_cores_spin(bool adaptive);
// A one-line description of the backends ("OpenBLAS 0.3.21 (OpenMP), ...").
std::string backend_info();

// The precision of float32 matrix products: f32 (the default), or bf16 as
// CPU autocast does it: the operands of every linear layer and matmul from
// 1 MFLOP are rounded to bfloat16 (8-bit mantissa) and multiplied with
// float32 accumulation into a float32 result (heed's bf16 GEMM), and so
// are the block products of the fused attention (its scores, the weighting
// of values and the four backward products; the softmax statistics and
// every accumulator stay float32). Tensors, weights, optimiser state,
// LayerNorm, softmax, losses and reductions stay float32, and so do
// checkpoints. Process-wide: forward and
// backward passes use the setting in force when they run. bf16 throws on a
// CPU without AVX512-BF16 (or with heed capped below AVX-512), naming what it has.
enum class Precision { f32, bf16 };
void set_precision(Precision p);
Precision precision();
const char* precision_name(Precision p);
// "f32" / "float32" or "bf16" / "bfloat16"; throws naming the bad value.
Precision parse_precision(const std::string& name);
// Empty when this CPU runs bf16 natively, else why not (the message
// set_precision(Precision::bf16) throws), and what to do: use float32 or
// lift heed's instruction-set cap. advice = false leaves out what to do
// (a resumed run cannot change its precision: its caller says what can).
std::string bf16_unsupported_reason(bool advice = true);

// 5-tap float32 convolutions on channels-last activations with channel
// counts that are multiples of 16 (stride 1, dilation 1, padding 0..4) run
// Winograd's F(4, 5) on CPUs with AVX2 + FMA or AVX-512 (the same bits on
// both): 2.5x fewer multiplications, in all three passes, with float32
// rounding differences of ~1e-6 relative to the direct convolution. On by
// default; off sends them to the direct convolution (`--conv direct` on the
// command line): products on heed's GEMM on those CPUs, else oneDNN's
// kernels.
void set_conv1d_winograd(bool on);
bool conv1d_winograd();

// The instruction sets heed's own vector kernels (the Winograd convolution)
// are written for, lowest first. baseline: x86-64 without AVX2 + FMA (those
// kernels are off, their work goes to oneDNN); avx2: AVX2 + FMA (Zen 3,
// Haswell on); avx512: AVX-512F + FMA (Zen 4/5, Skylake-X on).
enum class CpuIsa { baseline, avx2, avx512 };

// Caps the instruction set of heed's kernels AND of oneDNN's at isa, to test
// or time the code an older CPU runs (results do not change: heed's kernels
// give the same bits at every width). Throws when this CPU lacks isa, naming
// what it has. oneDNN accepts a cap only until it first dispatches (its
// first primitive, or the first query of its ISA: backend_info): the first
// set_cpu_isa fixes it, and a later call that would need a different oneDNN
// cap throws, naming the ISA oneDNN runs, and changes nothing. Call it
// before any computation, or set HEED_CPU_ISA instead.
//
// Environment: HEED_CPU_ISA=baseline|avx2|avx512 is read once, at the first
// use of heed's kernels or oneDNN, and acts as set_cpu_isa would (an unknown
// value or one this CPU lacks is an error naming it). When
// ONEDNN_MAX_CPU_ISA is set too, oneDNN keeps that cap instead.
void set_cpu_isa(CpuIsa isa);
// The instruction set heed's kernels use now; by default the best this CPU has.
CpuIsa cpu_isa();
std::string cpu_isa_name();
std::string cpu_isa_name(CpuIsa isa);  // "baseline", "avx2", "avx512"
// The best instruction set this CPU has (what cpu_isa() may be raised to).
CpuIsa cpu_isa_max();
// "avx2" -> CpuIsa::avx2; anything else throws, naming what (e.g.
// "HEED_CPU_ISA"), the value and the valid names.
CpuIsa parse_cpu_isa(std::string_view name, std::string_view what);

}  // namespace heed
