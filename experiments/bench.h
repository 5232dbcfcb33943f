// experiments/bench.h: `heed bench`.
#pragma once

#include <string>
#include <vector>

namespace heed::experiments {

int run_bench(const std::vector<std::string>& args);

}  // namespace heed::experiments
