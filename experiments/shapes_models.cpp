// experiments/shapes_models.cpp
#include "experiments/shapes_models.h"

namespace heed::experiments {

namespace {
std::shared_ptr<nn::Conv1d> conv(int64_t in, int64_t out, Generator* g) {
  return std::make_shared<nn::Conv1d>(nn::Conv1dOptions(in, out, 5).padding(2).generator(g));
}
std::shared_ptr<nn::ReLU> relu() { return std::make_shared<nn::ReLU>(); }
}  // namespace

std::shared_ptr<nn::Sequential> make_shapes_cnn(int64_t in_channels, Generator* g) {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      conv(in_channels, 64, g), relu(), conv(64, 64, g), relu(), conv(64, 64, g), relu(), conv(64, 64, g), relu(),
      conv(64, 1, g)});
}

std::shared_ptr<nn::Sequential> make_shapes_attention(int64_t in_channels, bool scaled, Generator* g) {
  auto attn = std::make_shared<nn::SelfAttention>(nn::SelfAttentionOptions(64, 64, 64).scaled(scaled).generator(g));
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      conv(in_channels, 64, g), relu(), conv(64, 64, g), relu(), attn, conv(64, 64, g), relu(), conv(64, 1, g)});
}

}  // namespace heed::experiments
