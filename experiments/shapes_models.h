// experiments/shapes_models.h: the two models of the toy shapes task
// (../shared/spec/toy-shapes-task.md). Kernel 5 with padding 2 keeps T = 100.
#pragma once

#include <memory>

#include "heed.h"

namespace heed::experiments {

// Conv(C,64,5) ReLU Conv(64,64,5) ReLU Conv(64,64,5) ReLU Conv(64,64,5) ReLU
// Conv(64,1,5): 62,337 parameters at C = 1. Each Conv then ReLU is one
// nn::Conv1dReLU; the children are named as the unfused chain's layers
// ("0", "2", "4", "6", "8"), so are the parameters ("2.weight").
std::shared_ptr<nn::Sequential> make_shapes_cnn(int64_t in_channels = 1, Generator* g = nullptr);

// Conv(C,64,5) ReLU Conv(64,64,5) ReLU SelfAttention(64,64,64) Conv(64,64,5)
// ReLU Conv(64,1,5): 54,081 parameters at C = 1. Children "0", "2", "4" (the
// attention layer), "5", "7", named likewise.
std::shared_ptr<nn::Sequential> make_shapes_attention(int64_t in_channels = 1, bool scaled = false,
                                                      Generator* g = nullptr);

}  // namespace heed::experiments
