// experiments/sine.h: `heed run sine`, fit a small tanh MLP to y = sin(x) on
// [-pi, pi]: the smallest end-to-end training run heed has (Linear layers,
// tanh, an MSE loss, backward, full-batch SGD with momentum).
#pragma once

#include <string>
#include <vector>

namespace heed::experiments {

// 0 when the final MSE is below kSineMseThreshold, 1 when above, 130 when
// stopped (Ctrl-C or --stop-after) with a checkpoint to resume from.
constexpr double kSineMseThreshold = 1e-3;
int run_sine(const std::vector<std::string>& args, const std::vector<std::string>& command_line = {});

}  // namespace heed::experiments
