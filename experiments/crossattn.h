// experiments/crossattn.h: `heed run crossattn`, cross-attention from a
// signal's positions to the tokens that describe its shapes
// (experiments/crossattn_task.h).
#pragma once

#include <string>
#include <vector>

namespace heed::experiments {

// 0 when done, 130 when stopped (Ctrl-C or --stop-after) with a checkpoint.
int run_crossattn(const std::vector<std::string>& args, const std::vector<std::string>& command_line);

}  // namespace heed::experiments
