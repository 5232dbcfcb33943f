// experiments/shapes_models.cpp
#include "experiments/shapes_models.h"

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

}  // namespace heed::experiments
