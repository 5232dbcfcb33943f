// experiments/copy.h: `heed run copy`, the copy-previous-token task.
#pragma once

#include <string>
#include <vector>

#include "experiments/common.h"

namespace heed::experiments {

struct CopyOptions {
  int64_t steps = 300;
  int64_t batch = 64;
  int64_t length = 16;  // T
  int64_t vocab = 16;   // V
  int64_t dim = 32;     // D
  double lr = 1e-2;
  int64_t seed = 0;
  int64_t eval_every = 100;  // accuracy and attention on t-1 every N steps, and at the end
  bool verbose = true;
  RunControl run;  // checkpoints, stop_after, Ctrl-C (with a checkpoint path) and resume
};

struct CopyResult {
  double final_loss = 0, accuracy = 0, prev_mass = 0, seconds = 0;
  int64_t step = 0;      // steps done: o.steps unless stopped
  bool stopped = false;  // stopped early (Ctrl-C or run.stop_after), with a checkpoint
};

// Trains (or, with o.run.resume, continues) the copy model. A log is given
// with its schema declared (run_copy does that); a resumed run needs the log
// reopened with RunLog::resume at the checkpoint's step.
CopyResult train_copy(const CopyOptions& o, RunLog* log = nullptr);
// `heed run copy [options]`: 0 when done, 130 when stopped (Ctrl-C or
// --stop-after) with a checkpoint to resume from; throws heed::Error on bad
// options or a bad checkpoint.
int run_copy(const std::vector<std::string>& args, const std::vector<std::string>& command_line);

}  // namespace heed::experiments
