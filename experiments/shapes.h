// experiments/shapes.h: `heed run shapes` (the CNN-versus-attention experiment).
#pragma once

#include <string>
#include <vector>

#include "experiments/common.h"

namespace heed::experiments {

// args: the options after "run shapes"; command_line: the full command, for the log.
// The models of a shapes checkpoint (those it holds: cnn, attention) with the
// run's test set, regenerated from its --seed (heed quantize): evaluate(name)
// is the test MSE, and for the attention model the pair-attention score.
std::unique_ptr<TrainedModels> shapes_trained_models(const Checkpoint& ck, const std::string& path);

int run_shapes(const std::vector<std::string>& args, const std::vector<std::string>& command_line);

}  // namespace heed::experiments
