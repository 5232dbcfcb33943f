// experiments/shapes_models.cpp
#include "experiments/shapes_models.h"

#include "experiments/common.h"

namespace heed::experiments {

// Each convolution followed by a ReLU is one fused layer (nn::Conv1dReLU).
// The children keep the names they had as separate Conv1d and ReLU
// children ("0", "2", ...: the ReLUs were "1", "3", ...), so the parameter
// names, which checkpoints, logs and exported weights use, are the same:
// CNN 0, 2, 4, 6, 8; attention model 0, 2, 4 (the attention layer), 5, 7.

namespace {
nn::Conv1dOptions conv5(int64_t in, int64_t out, Generator* g) {
  return nn::Conv1dOptions(in, out, 5).padding(2).generator(g);
}
std::shared_ptr<nn::Module> conv(int64_t in, int64_t out, Generator* g) {
  return std::make_shared<nn::Conv1d>(conv5(in, out, g));
}
std::shared_ptr<nn::Module> conv_relu(int64_t in, int64_t out, Generator* g) {
  return std::make_shared<nn::Conv1dReLU>(conv5(in, out, g));
}
}  // namespace

// Layers draw their initial values from g in the order they are created:
// the order of the initialiser list.
std::shared_ptr<nn::Sequential> make_shapes_cnn(int64_t in_channels, Generator* g) {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::pair<std::string, std::shared_ptr<nn::Module>>>{
      {"0", conv_relu(in_channels, 64, g)},
      {"2", conv_relu(64, 64, g)},
      {"4", conv_relu(64, 64, g)},
      {"6", conv_relu(64, 64, g)},
      {"8", conv(64, 1, g)}});
}

std::shared_ptr<nn::Sequential> make_shapes_attention(int64_t in_channels, bool scaled, Generator* g) {
  // The attention layer draws its initial values first, then the convolutions.
  auto attn = std::make_shared<nn::SelfAttention>(nn::SelfAttentionOptions(64, 64, 64).scaled(scaled).generator(g));
  return std::make_shared<nn::Sequential>(std::initializer_list<std::pair<std::string, std::shared_ptr<nn::Module>>>{
      {"0", conv_relu(in_channels, 64, g)},
      {"2", conv_relu(64, 64, g)},
      {"4", attn},
      {"5", conv_relu(64, 64, g)},
      {"7", conv(64, 1, g)}});
}

// Peaks measured (resident, the whole process, --epochs 1 with --train,
// --test and --batch alike: one step and one evaluation), against this:
// both models, 2000: 0.73 GB, this 0.68 GB; 8000: 2.77 GB, this 2.72 GB;
// --model cnn, 2000: 0.35 GB, this 0.32 GB; 8000: 1.30 GB, this 1.26 GB;
// --positional, 4000: 1.68 GB, this 1.89 GB; --positional --model cnn, 4000:
// 1.14 GB, this 1.16 GB. (The program itself, about 50 MB, is in the peaks,
// not in this: --train 50000 --batch 100: 0.15 GB, this 0.10 GB.)
double shapes_memory(int64_t in_channels, int64_t length, bool cnn, bool attention, int64_t train, int64_t test,
                     int64_t batch) {
  const auto C = static_cast<double>(in_channels), L = static_cast<double>(length), B = static_cast<double>(batch);
  // A sample holds its input twice (as drawn and standardised), its target,
  // and four shapes' centres, widths, heights and target heights (float32),
  // kinds and partners (int64).
  const double sample = 2 * 4 * C * L + 4 * L + 4 * 4 * 4 + 2 * 4 * 8;
  const LiveBlocks data = {{static_cast<double>(train) * sample, 1},
                           {static_cast<double>(test) * sample, 1},
                           {B * (4 * C * L + 4 * L), 1}};  // a step's inputs and targets
  auto with_data = [&](LiveBlocks blocks) {
    blocks.insert(blocks.end(), data.begin(), data.end());
    return blocks;
  };
  // Per block, float32: a batch of 64 channels of L positions (act), of L x
  // L attention weights (map); the weights (64-channel convolutions of
  // width 5, the attention's three 64 x 64 projections), then with their
  // gradients and the optimiser's two moments beside them.
  const double act = 4 * B * 64 * L, map = 4 * B * L * L;
  // A first convolution of more than one input channel (--positional) takes
  // the general path, not the one-channel kernel: its unfolded input (5 C
  // values a position) and channels-last copies of its input, output and
  // their gradients, measured at about 4 batches of 64 channels besides.
  const LiveBlocks first = C > 1 ? LiveBlocks{{4 * B * C * 5 * L, 1}, {act, 4}} : LiveBlocks{};
  std::vector<LiveBlocks> moments = {with_data({})};
  if (cnn) {
    const double weights = 4 * (C * 64 * 5 + 3 * 64 * 64 * 5 + 64 * 5 + 4 * 64 + 1);
    // The step's backward: the four convolutions' outputs (saved for their
    // ReLUs' backward and read by the next), and two gradients in flight.
    LiveBlocks step = {{weights, 2}, {act, 6}};
    step.insert(step.end(), first.begin(), first.end());
    moments.push_back(with_data(step));
    moments.push_back(with_data({{weights, 4}, {act, 3}}));  // an evaluation's batch: a layer's input and output
  }
  if (attention) {
    const double weights = 4 * (C * 64 * 5 + 2 * 64 * 64 * 5 + 3 * 64 * 64 + 64 * 5 + 3 * 64 + 1);
    // The step's backward: the convolutions' outputs, the attention's
    // keys, values, output and its transposed copy, and the probabilities
    // the fused attention keeps (all L keys one block, core/cpu_attention.cpp:
    // 128 keys), with four gradients in flight.
    LiveBlocks step = {{weights, 2}, {act, 10}, {map, L <= 128 ? 1.0 : 0.0}};
    step.insert(step.end(), first.begin(), first.end());
    moments.push_back(with_data(step));
    // An evaluation that keeps the map (the unfused path): the queries,
    // keys and values, the scores and their softmax, the attention's output.
    moments.push_back(with_data({{weights, 4}, {act, 5}, {map, 2}}));
  }
  return tensor_memory(moments);
}

}  // namespace heed::experiments
