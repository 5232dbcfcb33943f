// core/runtime.h: the process-wide settings of heed's CPU backends.
#pragma once

#include <string>

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
// Winograd's F(4, 5) on CPUs with AVX-512: 2.5x fewer multiplications, in
// all three passes, with float32 rounding differences of ~1e-6 relative to
// the direct convolution. On by default; off sends them to oneDNN's direct
// kernels (`--conv direct` on the command line).
void set_conv1d_winograd(bool on);
bool conv1d_winograd();

}  // namespace heed
