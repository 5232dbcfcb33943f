// experiments/copy.h: `heed run copy`, the copy-previous-token task.
#pragma once

#include <string>
#include <vector>

namespace heed::experiments {

// `heed run copy [options]`: one causal attention layer over token + position
// embeddings learns y_t = x_{t-1}. 0 when done, 130 when stopped (Ctrl-C or
// --stop-after) with a checkpoint to resume from.
int run_copy(const std::vector<std::string>& args, const std::vector<std::string>& command_line);

}  // namespace heed::experiments
