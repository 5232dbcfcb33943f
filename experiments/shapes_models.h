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

// The memory a `heed run shapes` takes, in bytes (tensor_memory,
// experiments/common.h): its training and test sets (`train` and `test`
// samples of `in_channels` channels and `length` positions) and a step's
// copy of a batch; the models' weights, gradients and optimiser state; a
// training step of each model trained (cnn, attention) on `batch` samples
// where its activations and gradients are most, and an evaluation of `batch`
// test samples at a time (the attention model's keeps its L x L maps).
// Peaks measured against it: shapes_models.cpp.
double shapes_memory(int64_t in_channels, int64_t length, bool cnn, bool attention, int64_t train, int64_t test,
                     int64_t batch);

}  // namespace heed::experiments
