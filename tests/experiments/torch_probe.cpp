// tests/experiments/torch_probe.cpp: heed's side of the round trip against
// PyTorch (test_torch_roundtrip.py). Reads a model's weights and a batch,
// runs one forward and backward pass through heed's public API, and writes
// the loss and every parameter's gradient under PyTorch's parameter names.
//
//   torch_probe shapes-attention WEIGHTS BATCH OUT
//   torch_probe gpt --heads H [--tied] WEIGHTS BATCH OUT
//
// WEIGHTS: a .safetensors file under PyTorch's names (the shapes model's
// nn.Sequential names "0.weight", "4.conv_q.weight", ...; nanoGPT's for the
// GPT) or a heed checkpoint (.h5), whose model is read as it was trained.
// BATCH: a .safetensors file with x and y:
//   shapes-attention  x [N, C, L] f32, y [N, 1, L] f32; loss = mse_loss
//   gpt               x [N, T] i64,    y [N, T] i64;    loss = mean cross-entropy
// The GPT's sizes (vocabulary, width, layers, context, biases) are read off
// the weights' shapes; the number of heads is not in them. --tied: lm_head
// is wte (nanoGPT's default; its state dict lists the weight under both
// names), as when the weights have no lm_head.weight.
// OUT: "loss" (f64, shape []) and "grad.<name>" (f32) for every parameter;
// the GPT's under nanoGPT's names (c_attn's gradient is q, k and v stacked).
#include <cstdio>
#include <string>

#include "experiments/shapes_models.h"
#include "heed.h"

using namespace heed;

namespace {

std::map<std::string, Tensor> read_weights(const std::string& path) {
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".h5") == 0) return load_checkpoint(path, "").get("model");
  return safetensors::load(path).tensors;
}

const Tensor& need(const std::map<std::string, Tensor>& m, const std::string& key, const std::string& file) {
  auto it = m.find(key);
  if (it == m.end()) fail("torch_probe: '{}' holds no tensor '{}'", file, key);
  return it->second;
}

// The GPT the weights describe (heed's names), with `heads` heads.
std::shared_ptr<nn::GPT> gpt_for(const std::map<std::string, Tensor>& w, int64_t heads, bool tied,
                                 const std::string& file) {
  const Tensor& wte = need(w, "wte.weight", file);  // [V, D]
  const Tensor& wpe = need(w, "wpe.weight", file);  // [context, D]
  int64_t layers = 0;
  while (w.count(fmt::format("blocks.{}.ln1.weight", layers))) ++layers;
  const Tensor& fc1 = need(w, "blocks.0.ffn.fc1.weight", file);  // [hidden, D]
  return std::make_shared<nn::GPT>(nn::GPTOptions(wte.size(0), wte.size(1), layers, heads, wpe.size(0))
                                       .ffn_hidden(fc1.size(0))
                                       .bias(w.count("blocks.0.attn.q_proj.bias") == 1)
                                       .tie_weights(tied || w.count("lm_head.weight") == 0)
                                       .init(nn::GPTOptions::Init::torch));
}

int probe(const std::vector<std::string>& args) {
  int64_t heads = 0;
  bool tied = false;
  std::vector<std::string> files;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--heads" && i + 1 < args.size()) heads = std::stoll(args[++i]);
    else if (args[i] == "--tied") tied = true;
    else files.push_back(args[i]);
  }
  const std::string model_name = args.empty() ? "" : args[0];
  if (files.size() != 3 || (model_name != "shapes-attention" && model_name != "gpt") ||
      (model_name == "gpt" && heads < 1)) {
    std::fprintf(stderr,
                 "usage: torch_probe shapes-attention WEIGHTS BATCH OUT\n"
                 "       torch_probe gpt --heads H [--tied] WEIGHTS BATCH OUT\n");
    return 2;
  }
  const std::string &weights_path = files[0], &batch_path = files[1], &out_path = files[2];
  std::map<std::string, Tensor> weights = read_weights(weights_path);
  const safetensors::File batch = safetensors::load(batch_path);
  const Tensor& x = need(batch.tensors, "x", batch_path);
  const Tensor& y = need(batch.tensors, "y", batch_path);

  // Every parameter's gradient, under heed's names.
  auto gradients = [](const nn::Module& m) {
    std::map<std::string, Tensor> g;
    for (const auto& [name, p] : m.named_parameters()) {
      if (!p.grad().defined()) fail("torch_probe: parameter '{}' received no gradient", name);
      g[name] = p.grad();
    }
    return g;
  };
  Tensor loss;
  std::map<std::string, Tensor> grads;  // PyTorch's names
  if (model_name == "shapes-attention") {
    auto model = experiments::make_shapes_attention(x.size(1));
    model->load_state_dict(weights);
    loss = mse_loss(model->forward(x), y);
    backward(loss);
    grads = gradients(*model);  // nn.Sequential's names are heed's
  } else {
    bool nanogpt = false;
    for (const auto& [k, t] : weights) nanogpt = nanogpt || k.rfind("transformer.", 0) == 0;
    auto gpt = gpt_for(nanogpt ? nn::gpt_from_nanogpt(weights) : weights, heads, tied, weights_path);
    gpt->load_state_dict(weights);  // either names
    loss = cross_entropy(gpt->forward(x), y);
    backward(loss);
    grads = nn::gpt_to_nanogpt(gradients(*gpt), gpt->options);
  }
  std::map<std::string, Tensor> out{{"loss", Tensor::scalar(loss.item(), DType::f64)}};
  for (const auto& [name, g] : grads) out["grad." + name] = g;
  safetensors::save(out_path, out);
  fmt::print("{}: loss {:.9g}, {} gradients\n", out_path, out.at("loss").item(), out.size() - 1);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return probe(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "torch_probe: %s\n", e.what());
    return 1;
  }
}
