// core/conv_winograd.h: 5-tap 1-D convolution by Winograd's minimal
// filtering F(4, 5) (internal to core/; core/dnnl_conv.cpp routes the shapes
// it applies to here). 2.5x fewer multiplications than the direct
// convolution, in all three passes.
#pragma once

#include "core/kernels.h"

namespace heed::kernel {

// float32, kernel 5, stride 1, dilation 1, padding 0..4, channels-last
// activations, in and out channels multiples of 16, heed's instruction set
// (heed::cpu_isa()) AVX2 or AVX-512, and the algorithm not switched off
// (set_conv1d_winograd). Both instruction sets give the same bits.
// Whether heed's instruction set in effect has the kernels (AVX2 or AVX-512).
bool winograd_conv1d_supported();
// Which kernels run: "AVX-512", "AVX2", or null when not supported.
const char* winograd_conv1d_isa();
bool winograd_conv1d_applies(DType dtype, int64_t C, int64_t O, int64_t K, const Conv1dGeom& g, bool channels_last);
// x [N, C, T] channels-last, w [O, C, 5], b [O] or undefined -> y [N, O, T + 2P - 4], channels-last.
Tensor winograd_conv1d_forward(const Tensor& x, const Tensor& w, const Tensor& b, int64_t P, bool relu);
// dL/dx [N, C, T] channels-last from dL/dy [N, O, L] (channels-last). When
// relu_out is defined (the forward's output after its ReLU), dL/dy is first
// masked by relu_out > 0.
Tensor winograd_conv1d_backward_data(const Tensor& gy, const Tensor& relu_out, const Tensor& w, int64_t T, int64_t P);
// dL/dw [O, C, 5] (and dL/db [O] into *gb) from dL/dy, masked as above, and x.
Tensor winograd_conv1d_backward_weights(const Tensor& gy, const Tensor& relu_out, const Tensor& x, int64_t P,
                                        Tensor* gb);

}  // namespace heed::kernel
