// experiments/sine.h: fit a small tanh MLP to y = sin(x) on [-pi, pi].
//
// The smallest end-to-end training run heed has: Linear layers, tanh, an MSE
// loss, backward, and plain SGD with momentum written inline (the optimisers
// arrive later). `heed demo` and `heed run sine` run it; so does the test.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace heed::experiments {

struct SineOptions {
  int64_t steps = 1500;       // full-batch SGD steps
  double lr = 0.05;           // learning rate
  double momentum = 0.9;      // heavy-ball momentum
  int64_t hidden = 32;        // width of both hidden layers: 1 -> H -> H -> 1
  int64_t seed = 0;           // initialisation
  int64_t threads = 0;        // 0 = keep heed's default
  int64_t points = 256;       // training points, evenly spaced on [-pi, pi]
  int64_t print_every = 250;  // progress lines; 0 = silent
};

struct SineResult {
  double initial_mse = 0;  // before the first step
  double final_mse = 0;    // after the last step
};

// Trains with the given options. Progress goes to stdout when print_every > 0.
SineResult train_sine(const SineOptions& o);

// Parses --steps N --lr X --hidden N --seed N --threads N into o. Returns
// false when --help was asked for (the help is printed); throws heed::Error
// naming the option, the bad value and what was expected.
bool parse_sine_args(const std::vector<std::string>& args, SineOptions& o);

// The CLI entry: `heed run sine [options]`. Returns 0 when the final MSE is
// below kSineMseThreshold, 1 when above, 2 on a usage error.
constexpr double kSineMseThreshold = 1e-3;
int run_sine(const std::vector<std::string>& args);

}  // namespace heed::experiments
