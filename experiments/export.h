// experiments/export.h: `heed export`, a checkpoint's model weights to a
// .safetensors file.
#pragma once

#include <string>
#include <vector>

namespace heed::experiments {

int run_export(const std::vector<std::string>& args);

}  // namespace heed::experiments
