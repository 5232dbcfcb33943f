// core/conv_single.h: 1-D convolution with one output channel, by hand
// (internal to core/; core/dnnl_conv.cpp routes those shapes here).
#pragma once

#include "core/kernels.h"

namespace heed::kernel {

// float32, one output channel, stride 1, dilation 1 (any kernel, padding).
bool single_channel_conv_applies(DType dtype, int64_t O, const Conv1dGeom& g);
// x [N, C, T] (contiguous or channels-last), w [1, C, K], b [1] or undefined
// -> [N, 1, T + 2P - K + 1].
Tensor single_channel_conv1d_forward(const Tensor& x, const Tensor& w, const Tensor& b, int64_t P);
// dL/dx [N, C, T] (shape xs) from dL/dy [N, 1, L] and w; channels-last when asked.
Tensor single_channel_conv1d_backward_data(const Tensor& gy, const Tensor& w, const Shape& xs, int64_t P,
                                           bool channels_last);
// dL/dw [1, C, K] (and dL/db [1] into *gb when not null) from dL/dy and x.
Tensor single_channel_conv1d_backward_weights(const Tensor& gy, const Tensor& x, int64_t K, int64_t P, Tensor* gb);

}  // namespace heed::kernel
