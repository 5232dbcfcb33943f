// core/attention_rows.h: the per-row steps of fused attention's float32
// block path (internal to core/), vectorised for AVX-512 and AVX2 like the
// block GEMM (core/block_gemm.h), with the last partial vector of a row
// masked: a causal row of a diagonal block sees anywhere from 1 to all of
// its keys. Exponentials are fast::exp_softmax's (core/fast_math.h), bit
// for bit; sums keep 16 partial results, element j in lane j mod 16, combined
// as core/lanes.h does, so both widths give the same bits.
#pragma once

#include <cstdint>

#include "core/runtime.h"

namespace heed::kernel::rows {

struct Kernels {
  // max(init, x[0 .. n)).
  float (*max)(const float* x, int64_t n, float init);
  // x[j] = e^(x[j] - c) for j < vis, 0 for vis <= j < n; returns the sum
  // of the exponentials.
  float (*exp_sum)(float* x, int64_t vis, int64_t n, float c);
  // Backward: p[j] = e^(s[j] - lse) and ds[j] = p[j] (ds[j] - D) for j < vis
  // (ds holds dP there), both 0 for vis <= j < n.
  void (*probs_and_grads)(float* s, float* ds, int64_t vis, int64_t n, float lse, float D);
  // Backward from probabilities the forward kept: ds[j] = p[j] (ds[j] - D)
  // for j < vis, 0 for vis <= j < n (p is not written).
  void (*grads)(const float* p, float* ds, int64_t vis, int64_t n, float D);
};

// The kernels of an instruction set (AVX2 or AVX-512) this CPU has, else null.
const Kernels* kernels_for(CpuIsa isa);

}  // namespace heed::kernel::rows
