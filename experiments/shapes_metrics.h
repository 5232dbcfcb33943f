// experiments/shapes_metrics.h: how well attention links partner shapes.
#pragma once

#include "heed.h"

namespace heed::experiments {

// Pair-attention score (toy-shapes-task.md): for every shape s of every sample
// and every query position t inside s (|t - c_s| < w_s / 2), the attention
// mass A[t, k] summed over key positions k inside s's partner; averaged over
// all those queries. Returns the sum and the count so batches can be pooled.
//   attn [N, T, T] (row = query), centres / widths [N, 4] f32, partner [N, 4] i64
struct PairScore {
  double mass = 0;
  int64_t queries = 0;
  double value() const { return queries > 0 ? mass / static_cast<double>(queries) : 0.0; }
};
PairScore pair_attention_score(const Tensor& attn, const Tensor& centres, const Tensor& widths,
                               const Tensor& partner);

}  // namespace heed::experiments
