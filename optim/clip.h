// optim/clip.h: gradient clipping by global norm
// (torch.nn.utils.clip_grad_norm_, norm_type 2).
#pragma once

#include <vector>

#include "autograd/autograd.h"
#include "core/tensor.h"

namespace heed::optim {

// The L2 norm of all gradients together, sqrt(sum over every element of every
// defined gradient of g^2), accumulated in double in a fixed order (the
// parameters' order, then fixed-size chunks of each gradient summed in chunk
// order), so the result does not depend on the thread count. Parameters
// without a gradient are skipped; gradients must be floating and contiguous
// (errors name the parameter, or its index for a plain vector).
//
// When max_norm / (norm + 1e-6) < 1 (PyTorch's clip coefficient, clamped at
// 1; in effect norm > max_norm), every gradient is multiplied in place by
// that coefficient, so the clipped norm is max_norm (up to the 1e-6).
// Returns the norm before clipping. A non-finite norm (an Inf or NaN in some
// gradient) is returned as is and nothing is scaled: the caller decides
// (typically: skip the step). PyTorch would instead scale by 0 or NaN.
// max_norm must be >= 0.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);
double clip_grad_norm(const NamedParams& params, double max_norm);

// The same global norm without clipping.
double grad_norm(const std::vector<Tensor>& params);
double grad_norm(const NamedParams& params);

}  // namespace heed::optim
