// core/runtime.h: the process-wide settings of heed's CPU backends.
#pragma once

#include <string>
#include <string_view>

namespace heed {

// Threads for heed's parallel loops, GEMMs and convolutions (OpenMP; oneDNN
// shares the pool). Results do not depend on it: every kernel splits work by
// shape, never by thread count. Throws when n < 1.
void set_num_threads(int n);
int num_threads();
// A one-line description of the backends ("OpenBLAS 0.3.21 (OpenMP), ...").
std::string backend_info();

// 5-tap float32 convolutions on channels-last activations with channel
// counts that are multiples of 16 (stride 1, dilation 1, padding 0..4) run
// Winograd's F(4, 5) on CPUs with AVX2 + FMA or AVX-512 (the same bits on
// both): 2.5x fewer multiplications, in all three passes, with float32
// rounding differences of ~1e-6 relative to the direct convolution. On by
// default; off sends them to oneDNN's direct kernels (`--conv direct` on the
// command line).
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
