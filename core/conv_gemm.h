// core/conv_gemm.h: float32 1-D convolutions as products on heed's GEMM
// (internal to core/; core/dnnl_conv.cpp routes there every float32
// convolution that neither Winograd nor the one-output-channel kernel takes,
// on CPUs with AVX2 or AVX-512).
#pragma once

#include "core/kernels.h"

namespace heed::kernel {

// float32 under Precision::f32 on a CPU whose heed GEMM exists (AVX2 or
// AVX-512): its products are then the same bits on either.
bool gemm_conv1d_applies(DType dtype);
// x [N, C, T] (channels-last or contiguous), w [O, C, K], b [O] or undefined
// -> y [N, O, T'], channels-last when cl (x's layout), else contiguous.
Tensor gemm_conv1d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv1dGeom& g, bool cl);
// dL/dx [N, C, T] (shape xs) from dL/dy [N, O, T'], channels-last when asked.
Tensor gemm_conv1d_backward_data(const Tensor& gy, const Tensor& w, const Shape& xs, const Conv1dGeom& g,
                                 bool channels_last);
// dL/dw [O, C, K] (and dL/db [O] into *gb when not null).
Tensor gemm_conv1d_backward_weights(const Tensor& gy, const Tensor& x, const Shape& ws, const Conv1dGeom& g, Tensor* gb);

}  // namespace heed::kernel
