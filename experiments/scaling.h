// experiments/scaling.h: `heed run scaling`, why attention scales its scores
// by 1/sqrt(d_k).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace heed::experiments {

// What the softmax sees for one d_k: queries q [queries, d_k] and keys
// k [keys, d_k] with N(0, 1) entries, scores s = q k^T (times 1/sqrt(d_k)
// when scaled), p = softmax(s) over the keys.
struct SaturationRow {
  int64_t dk = 0;
  double score_var = 0;   // variance of s: d_k unscaled, 1 scaled
  double entropy = 0;     // mean over queries of -sum p log p (log(keys) when uniform)
  double max_weight = 0;  // mean over queries of max p (1 when saturated)
  double grad_ratio = 0;  // mean over queries of ||dL/ds|| / ||dL/dp|| for an N(0, 1) dL/dp
};
SaturationRow measure_saturation(int64_t dk, bool scaled, int64_t queries, int64_t keys, uint64_t seed);

// `heed run scaling [options]`: part 1 the table above for d_k = 4 .. 1024,
// part 2 the copy task trained scaled and unscaled. 0 when done, 130 when
// stopped with a checkpoint.
// The memory a `heed run scaling` takes, in bytes: part 1's float64 score
// matrices (`queries` x `keys`, several alive at once) and queries and keys
// at d_k = `dk_max`, then part 2's 2 x `seeds` copy models (weights,
// gradients and the optimiser's two moments each) and one model's training
// step and evaluation at a time (copy_memory, copy.h; options `copy`), as
// the allocator holds them (tensor_memory, common.h). With seeds 0, part 1
// alone. Peaks measured against it: scaling.cpp.
struct CopyOptions;
double scaling_memory(int64_t dk_max, int64_t queries, int64_t keys, int64_t seeds, const CopyOptions& copy);

int run_scaling(const std::vector<std::string>& args, const std::vector<std::string>& command_line);

}  // namespace heed::experiments
