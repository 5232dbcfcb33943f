// experiments/shapes.h: `heed run shapes` (the CNN-versus-attention experiment).
#pragma once

#include <string>
#include <vector>

namespace heed::experiments {

// args: the options after "run shapes"; command_line: the full command, for the log.
int run_shapes(const std::vector<std::string>& args, const std::vector<std::string>& command_line);

}  // namespace heed::experiments
