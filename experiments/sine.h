// experiments/sine.h: `heed run sine`, fit a small tanh MLP to y = sin(x) on
// [-pi, pi]: the smallest end-to-end training run heed has (Linear layers,
// tanh, an MSE loss, backward, full-batch SGD with momentum).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace heed::experiments {

// 0 when the final MSE is below kSineMseThreshold, 1 when above, 130 when
// stopped (Ctrl-C or --stop-after) with a checkpoint to resume from.
constexpr double kSineMseThreshold = 1e-3;
// The memory, in bytes, a run of `points` points and `hidden` hidden units
// takes at least with its points shared out over `processes` (a lower bound
// within a few percent of the peaks measured): what run_sine refuses up
// front when it is not there.
double sine_memory(int64_t points, int64_t hidden, int64_t processes = 1);
int run_sine(const std::vector<std::string>& args, const std::vector<std::string>& command_line = {});

}  // namespace heed::experiments
