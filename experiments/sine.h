// experiments/sine.h: fit a small tanh MLP to y = sin(x) on [-pi, pi].
//
// The smallest end-to-end training run heed has: Linear layers, tanh, an MSE
// loss, backward, and full-batch SGD with momentum (optim::SGD). `heed run
// sine` runs it with an HDF5 log and checkpoints; the tests run it directly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "experiments/common.h"

namespace heed::experiments {

struct SineOptions {
  int64_t steps = 1500;       // full-batch SGD steps
  double lr = 0.05;           // learning rate
  double momentum = 0.9;      // heavy-ball momentum: v = mu v + g, p = p - lr v
  int64_t hidden = 32;        // width of both hidden layers: 1 -> H -> H -> 1
  int64_t seed = 0;           // initialisation
  int64_t threads = 0;        // 0 = keep heed's default
  int64_t points = 256;       // training points, evenly spaced on [-pi, pi]
  int64_t print_every = 250;  // progress lines; 0 = silent
  // The log run_sine writes (--out; the command's default is runs/sine.h5).
  // train_sine itself logs to the RunLog it is given.
  std::string out;
  RunControl run;  // checkpoints, stop_after, Ctrl-C (with a checkpoint path) and resume
};

struct SineResult {
  double initial_mse = 0;  // before the first step
  double final_mse = 0;    // after the last step done
  int64_t step = 0;        // steps done: o.steps unless stopped (or diverged)
  bool stopped = false;    // stopped early (Ctrl-C or run.stop_after), with a checkpoint
};

// Trains (or, with o.run.resume, continues) the network. Progress goes to
// stdout when print_every > 0. A log is given with its schema declared
// (run_sine does that); a resumed run needs the log reopened with
// RunLog::resume at the checkpoint's step.
SineResult train_sine(const SineOptions& o, RunLog* log = nullptr);

// Parses --steps N --lr X --hidden N --seed N --threads N --out PATH and the
// checkpoint options into o. Returns false when --help was asked for (the
// help is printed); throws heed::Error naming the option, the bad value and
// what was expected.
bool parse_sine_args(const std::vector<std::string>& args, SineOptions& o);

// The CLI entry: `heed run sine [options]`. Returns 0 when the final MSE is
// below kSineMseThreshold, 1 when above, 2 on a usage error, 130 when stopped
// (Ctrl-C or --stop-after) with a checkpoint to resume from; a bad checkpoint
// throws heed::Error naming the problem. command_line (for the log; default:
// "heed run sine" and args) is the command as typed.
constexpr double kSineMseThreshold = 1e-3;
int run_sine(const std::vector<std::string>& args, const std::vector<std::string>& command_line = {});

}  // namespace heed::experiments
