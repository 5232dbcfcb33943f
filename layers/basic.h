// layers/basic.h: Linear, Conv1d, Conv1dReLU, LayerNorm, Embedding, Dropout,
// the activation modules and Sequential.
//
// Shapes (legend in core/tensor.h): Linear maps [.., In] -> [.., Out];
// Conv1d maps [N, C, T] -> [N, O, T']; LayerNorm maps [.., D] -> [.., D];
// Embedding maps int64 ids [..] -> [.., D].
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "layers/module.h"

namespace heed::nn {

struct LinearOptions {
  LinearOptions(int64_t in, int64_t out) : in_features_(in), out_features_(out) {}
  LinearOptions& bias(bool b) { bias_ = b; return *this; }
  LinearOptions& generator(Generator* g) { gen_ = g; return *this; }
  int64_t in_features_, out_features_;
  bool bias_ = true;
  Generator* gen_ = nullptr;
};

class Linear : public Module {
 public:
  explicit Linear(const LinearOptions& o);
  Linear(int64_t in, int64_t out) : Linear(LinearOptions(in, out)) {}
  Tensor forward(const Tensor& x) override;
  // residual + forward(x) in one pass (residual: the output's shape;
  // undefined: forward(x)), the add in the product's epilogue: the same
  // values as the separate add.
  Tensor forward_add(const Tensor& x, const Tensor& residual);
  std::string extra_repr() const override;
  Tensor weight;  // [Out, In]
  Tensor bias;    // [Out] or undefined
  LinearOptions options;
};

struct Conv1dOptions {
  Conv1dOptions(int64_t in, int64_t out, int64_t kernel) : in_(in), out_(out), kernel_(kernel) {}
  Conv1dOptions& stride(int64_t s) { stride_ = s; return *this; }
  Conv1dOptions& padding(int64_t p) { padding_ = p; return *this; }
  Conv1dOptions& dilation(int64_t d) { dilation_ = d; return *this; }
  Conv1dOptions& bias(bool b) { bias_ = b; return *this; }
  Conv1dOptions& generator(Generator* g) { gen_ = g; return *this; }
  int64_t in_, out_, kernel_;
  int64_t stride_ = 1, padding_ = 0, dilation_ = 1;
  bool bias_ = true;
  Generator* gen_ = nullptr;
};

class Conv1d : public Module {
 public:
  explicit Conv1d(const Conv1dOptions& o) : Conv1d(o, "Conv1d") {}
  // x [N, C, T] -> [N, O, T']. A wrong channel count or rank is reported with
  // the module's configuration. Which kernel runs depends on the shape and the
  // input's layout (kernel::conv1d_forward): float32 5-tap layers on
  // channels-last activations use Winograd F(4, 5) on CPUs with AVX2 or
  // AVX-512 (heed::set_conv1d_winograd(false) for oneDNN's direct kernels).
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight;  // [O, C, K]
  Tensor bias;    // [O] or undefined
  Conv1dOptions options;

 protected:
  Conv1d(const Conv1dOptions& o, std::string type);  // Conv1dReLU's own type name
  void check_input(const Tensor& x) const;  // rank 3 with in_channels channels, or an error naming both
};

// A Conv1d followed by a ReLU, as one fused op (conv1d_relu: the ReLU is
// applied inside the convolution's passes, forward and backward, instead of
// a pass of its own over the activations), with the values and gradients of
// Conv1d then ReLU. A Conv1d in all else: the same options, the same
// parameters ("weight", "bias") drawn from the generator in the same order,
// so it loads a Conv1d's state and starts from the same numbers.
// PyTorch's counterpart is torch.ao.nn.intrinsic.ConvReLU1d.
class Conv1dReLU : public Conv1d {
 public:
  explicit Conv1dReLU(const Conv1dOptions& o) : Conv1d(o, "Conv1dReLU") {}
  Tensor forward(const Tensor& x) override;  // relu(conv1d(x)): [N, C, T] -> [N, O, T']
};

struct LayerNormOptions {
  explicit LayerNormOptions(int64_t dim) : dim_(dim) {}
  LayerNormOptions& eps(double e) { eps_ = e; return *this; }
  int64_t dim_;
  double eps_ = 1e-5;
};

// Normalises over the last dim, then scales and shifts per feature.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(const LayerNormOptions& o);
  explicit LayerNorm(int64_t dim) : LayerNorm(LayerNormOptions(dim)) {}
  Tensor forward(const Tensor& x) override;  // [.., D] -> [.., D]
  std::string extra_repr() const override;
  Tensor weight;  // [D], initialised to 1
  Tensor bias;    // [D], initialised to 0
  LayerNormOptions options;
};

struct EmbeddingOptions {
  EmbeddingOptions(int64_t num, int64_t dim) : num_(num), dim_(dim) {}
  EmbeddingOptions& generator(Generator* g) { gen_ = g; return *this; }
  int64_t num_, dim_;
  Generator* gen_ = nullptr;
};

// A lookup table: int64 ids [..] -> rows of weight [.., D]. Initialised
// N(0, 1) like PyTorch.
class Embedding : public Module {
 public:
  explicit Embedding(const EmbeddingOptions& o);
  Embedding(int64_t num, int64_t dim) : Embedding(EmbeddingOptions(num, dim)) {}
  Tensor forward(const Tensor& ids) override;
  std::string extra_repr() const override;
  Tensor weight;  // [V, D]
  EmbeddingOptions options;
};

// Inverted dropout while training (is_training()), the identity in eval mode.
// Masks come from gen, or the default generator when null.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override { return dropout(x, p, is_training(), gen); }
  std::string extra_repr() const override;
  double p;
  Generator* gen;
};

// An element-wise activation (autograd/activation.h) as a module: forward
// is activation(x, kind). Printed under PyTorch's class names (ReLU(),
// GELU(approximate='tanh'), SiLU(), ...), which the named modules below are.
class ActivationLayer : public Module {
 public:
  explicit ActivationLayer(Activation a);
  Tensor forward(const Tensor& x) override { return activation(x, kind); }
  std::string extra_repr() const override;
  const Activation kind;
};

class ReLU : public ActivationLayer {
 public:
  ReLU() : ActivationLayer(Activation::relu) {}
};

class GELU : public ActivationLayer {
 public:
  explicit GELU(GeluApprox a = GeluApprox::erf)
      : ActivationLayer(a == GeluApprox::tanh ? Activation::gelu_tanh : Activation::gelu) {}
};

class Tanh : public ActivationLayer {
 public:
  Tanh() : ActivationLayer(Activation::tanh) {}
};

class Sigmoid : public ActivationLayer {
 public:
  Sigmoid() : ActivationLayer(Activation::sigmoid) {}
};

class SiLU : public ActivationLayer {
 public:
  SiLU() : ActivationLayer(Activation::silu) {}
};

// Children applied in order, each to the previous one's output; nothing
// else (a fused pair is a layer of its own, such as Conv1dReLU). Children
// are named "0", "1", ... by position unless given names, as in PyTorch's
// Sequential(OrderedDict(...)): names keep a model's parameter names, the
// keys of its checkpoints, when its layers change (shapes_models.cpp).
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<std::shared_ptr<Module>> mods);
  Sequential(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> named);
  void push_back(std::shared_ptr<Module> m);  // named by its position
  void push_back(const std::string& name, std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return children().size(); }
  std::shared_ptr<Module> operator[](size_t i) const { return children().at(i).second; }
  // The child of that name, or an error naming it and the children there are.
  std::shared_ptr<Module> operator[](const std::string& name) const;
};

}  // namespace heed::nn
