// experiments/copy.h: `heed run copy`, the copy-previous-token task.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "heed.h"

namespace heed::experiments {

// The task and its model, shared with `heed run scaling`.
struct CopyOptions {
  int64_t batch = 64;
  int64_t length = 16;  // T
  int64_t vocab = 16;   // V
  int64_t dim = 32;     // D, also the head width (one head)
  double lr = 1e-2;
  double scale = 0;     // the attention scores' factor; 0: 1/sqrt(D)
  int64_t seed = 0;
  int64_t eval_every = 100;  // accuracy and attention on t-1 every N steps, and at the end
};

// Embedding + learned positions -> causal self-attention (one head) -> vocabulary logits.
class CopyModel : public nn::Module {
 public:
  CopyModel(const CopyOptions& o, Generator* g);
  Tensor forward(const Tensor& ids) override;  // [N, T] -> [N, T, V]
  std::shared_ptr<nn::Embedding> tok;
  std::shared_ptr<nn::LearnedPositionalEmbedding> pos;
  std::shared_ptr<nn::MultiHeadAttention> attn;
  std::shared_ptr<nn::Linear> head;
};

// A batch of random tokens x [batch, T] and its targets: y_t = x_{t-1}, y_0 ignored (-100).
void make_copy_batch(const CopyOptions& o, Generator& g, Tensor& x, Tensor& y);
// On one fresh batch from g: accuracy over t >= 1 and the mean attention mass on t - 1.
void evaluate_copy(CopyModel& m, const CopyOptions& o, Generator& g, double& acc, double& prev_mass);

// The memory a run with options o takes at least, in bytes (peaks measured:
// copy.cpp): a training step's activations and gradients where they are
// most, and an evaluation's attention maps, as the allocator holds them
// (tensor_memory, experiments/common.h).
double copy_memory(const CopyOptions& o);

// `heed run copy [options]`: one causal attention layer over token + position
// embeddings learns y_t = x_{t-1}. 0 when done, 130 when stopped (Ctrl-C or
// --stop-after) with a checkpoint to resume from.
int run_copy(const std::vector<std::string>& args, const std::vector<std::string>& command_line);

}  // namespace heed::experiments
