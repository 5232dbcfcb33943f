// core/runtime.h: the process-wide settings of heed's CPU backends.
#pragma once

#include <string>

namespace heed {

// Threads for heed's parallel loops, GEMMs and convolutions (OpenMP; oneDNN
// shares the pool). Results do not depend on it: every kernel splits work by
// shape, never by thread count. Throws when n < 1.
void set_num_threads(int n);
int num_threads();
// Makes heed's waiting threads give the cores away quickly (libgomp's spin
// count, GOMP_SPINCOUNT, 1000 instead of 300,000), so that processes sharing
// the cores (two trainings, a sampler beside a training) each keep a fair
// share instead of slowing each other down many times over. libgomp reads it
// once at start-up, so this re-executes the program (same arguments, same
// process id) with the variable set, once; it returns at once when
// OMP_WAIT_POLICY or GOMP_SPINCOUNT is set (the user's choice wins). Call it
// first thing in main(), before any output or file is touched: guard_main
// does.
void share_cores();
// A one-line description of the backends ("OpenBLAS 0.3.21 (OpenMP), ...").
std::string backend_info();

// The precision of float32 matrix products: f32 (the default), or bf16 as
// CPU autocast does it: the operands of every linear layer and matmul from
// 1 MFLOP are rounded to bfloat16 (8-bit mantissa) and multiplied with
// float32 accumulation into a float32 result (oneDNN's bf16 kernels), and so
// are the block products of the fused attention (its scores, the weighting
// of values and the four backward products; the softmax statistics and
// every accumulator stay float32). Tensors, weights, optimiser state,
// LayerNorm, softmax, losses and reductions stay float32, and so do
// checkpoints. Process-wide: forward and
// backward passes use the setting in force when they run. bf16 throws on a
// CPU without native bf16 (AVX512-BF16 or AMX), naming what it has.
enum class Precision { f32, bf16 };
void set_precision(Precision p);
Precision precision();
const char* precision_name(Precision p);
// "f32" / "float32" or "bf16" / "bfloat16"; throws naming the bad value.
Precision parse_precision(const std::string& name);
// Empty when this CPU runs bf16 natively, else why not (the message
// set_precision(Precision::bf16) throws).
std::string bf16_unsupported_reason();

// 5-tap float32 convolutions on channels-last activations with channel
// counts that are multiples of 16 (stride 1, dilation 1, padding 0..4) run
// Winograd's F(4, 5) on CPUs with AVX-512: 2.5x fewer multiplications, in
// all three passes, with float32 rounding differences of ~1e-6 relative to
// the direct convolution. On by default; off sends them to oneDNN's direct
// kernels (`--conv direct` on the command line).
void set_conv1d_winograd(bool on);
bool conv1d_winograd();

}  // namespace heed
