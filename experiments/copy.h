// experiments/copy.h: `heed run copy`, the copy-previous-token task.
#pragma once

#include <string>
#include <vector>

namespace heed {
class RunLog;
}

namespace heed::experiments {

struct CopyOptions {
  int64_t steps = 300;
  int64_t batch = 64;
  int64_t length = 16;  // T
  int64_t vocab = 16;   // V
  int64_t dim = 32;     // D
  double lr = 1e-2;
  int64_t seed = 0;
  bool verbose = true;
};

struct CopyResult {
  double final_loss = 0, accuracy = 0, prev_mass = 0, seconds = 0;
};

CopyResult train_copy(const CopyOptions& o, RunLog* log = nullptr);
int run_copy(const std::vector<std::string>& args, const std::vector<std::string>& command_line);

}  // namespace heed::experiments
