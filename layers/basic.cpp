// layers/basic.cpp
#include "layers/basic.h"

#include <cmath>

#include "core/error.h"
#include "core/kernels.h"
#include "core/random.h"

namespace heed::nn {

// ---- Linear: y = x W^T + b ----
Linear::Linear(const LinearOptions& o) : Module("Linear"), options(o) {
  if (o.in_features_ <= 0 || o.out_features_ <= 0)
    fail("Linear: features must be positive, got in={} out={}", o.in_features_, o.out_features_);
  Generator& g = init_generator(o.gen_);
  weight = register_parameter("weight", Tensor::empty({o.out_features_, o.in_features_}));
  kaiming_uniform_(weight, std::sqrt(5.0), o.in_features_, g);
  if (o.bias_) {
    bias = register_parameter("bias", Tensor::empty({o.out_features_}));
    uniform_init_(bias, 1.0 / std::sqrt(static_cast<double>(o.in_features_)), g);
  }
}

Tensor Linear::forward(const Tensor& x) { return forward_add(x, Tensor()); }

Tensor Linear::forward_add(const Tensor& x, const Tensor& residual) {
  check_defined(x, "Linear");
  if (x.dim() < 1 || x.size(-1) != options.in_features_)
    fail("Linear({}, {}): expected input [.., {}], got {}", options.in_features_, options.out_features_,
         options.in_features_, shape_str(x.shape()));
  if (residual.defined()) {
    Shape out = x.shape();
    out.back() = options.out_features_;
    if (residual.shape() != out)
      fail("Linear({}, {}): the residual to add is {}, expected the output's {}", options.in_features_,
           options.out_features_, shape_str(residual.shape()), shape_str(out));
  }
  return linear(x, weight, bias, residual);
}

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", options.in_features_, options.out_features_,
                     bias.defined() ? "True" : "False");
}

// ---- Conv1d ----
Conv1d::Conv1d(const Conv1dOptions& o, std::string type) : Module(std::move(type)), options(o) {
  if (o.in_ <= 0 || o.out_ <= 0 || o.kernel_ <= 0)
    fail("{}: channels and kernel size must be positive, got in={} out={} kernel={}", type_name(), o.in_, o.out_,
         o.kernel_);
  if (o.stride_ < 1 || o.dilation_ < 1 || o.padding_ < 0)
    fail("{}: invalid stride {} / padding {} / dilation {} (expected >= 1 / >= 0 / >= 1)", type_name(), o.stride_,
         o.padding_, o.dilation_);
  Generator& g = init_generator(o.gen_);
  int64_t fan_in = o.in_ * o.kernel_;
  weight = register_parameter("weight", Tensor::empty({o.out_, o.in_, o.kernel_}));
  kaiming_uniform_(weight, std::sqrt(5.0), fan_in, g);
  if (o.bias_) {
    bias = register_parameter("bias", Tensor::empty({o.out_}));
    uniform_init_(bias, 1.0 / std::sqrt(static_cast<double>(fan_in)), g);
  }
}

void Conv1d::check_input(const Tensor& x) const {
  check_defined(x, type_name().c_str());
  if (x.dim() != 3 || x.size(1) != options.in_)
    fail("{}({}): expected input [N, {}, T], got {}", type_name(), extra_repr(), options.in_, shape_str(x.shape()));
}

Tensor Conv1d::forward(const Tensor& x) {
  check_input(x);
  return conv1d(x, weight, bias, options.stride_, options.padding_, options.dilation_);
}

Tensor Conv1dReLU::forward(const Tensor& x) {
  check_input(x);
  return conv1d_relu(x, weight, bias, options.stride_, options.padding_, options.dilation_);
}

std::string Conv1d::extra_repr() const {
  std::string s = fmt::format("{}, {}, kernel_size=({},), stride=({},)", options.in_, options.out_, options.kernel_,
                              options.stride_);
  if (options.padding_ != 0) s += fmt::format(", padding=({},)", options.padding_);
  if (options.dilation_ != 1) s += fmt::format(", dilation=({},)", options.dilation_);
  if (!bias.defined()) s += ", bias=False";
  return s;
}

// ---- LayerNorm ----
LayerNorm::LayerNorm(const LayerNormOptions& o) : Module("LayerNorm"), options(o) {
  if (o.dim_ <= 0) fail("LayerNorm: the normalised dim must be positive, got {}", o.dim_);
  if (!(o.eps_ > 0)) fail("LayerNorm: eps must be positive, got {}", o.eps_);
  weight = register_parameter("weight", Tensor::ones({o.dim_}));
  bias = register_parameter("bias", Tensor::zeros({o.dim_}));
}

Tensor LayerNorm::forward(const Tensor& x) {
  check_defined(x, "LayerNorm");
  if (x.dim() < 1 || x.size(-1) != options.dim_)
    fail("LayerNorm({}): expected input [.., {}], got {}", extra_repr(), options.dim_, shape_str(x.shape()));
  return layer_norm(x, weight, bias, options.eps_);
}

std::string LayerNorm::extra_repr() const {
  return fmt::format("({},), eps={}, elementwise_affine=True", options.dim_, options.eps_);
}

// ---- Embedding ----
Embedding::Embedding(const EmbeddingOptions& o) : Module("Embedding"), options(o) {
  if (o.num_ <= 0 || o.dim_ <= 0)
    fail("Embedding: table size and dim must be positive, got num={} dim={}", o.num_, o.dim_);
  weight = register_parameter("weight", Tensor::empty({o.num_, o.dim_}));
  kernel::normal_(weight, 0.0, 1.0, init_generator(o.gen_));
}

Tensor Embedding::forward(const Tensor& ids) {
  check_defined(ids, "Embedding");
  if (ids.dtype() != DType::i64)
    fail("Embedding({}): expected int64 ids, got {} of shape {}", extra_repr(), dtype_name(ids.dtype()),
         shape_str(ids.shape()));
  return embedding(weight, ids);
}

std::string Embedding::extra_repr() const { return fmt::format("{}, {}", options.num_, options.dim_); }

// ---- Dropout ----
Dropout::Dropout(double p_, Generator* g) : Module("Dropout"), p(p_), gen(g) {
  if (!(p >= 0.0 && p <= 1.0)) fail("Dropout: probability {} out of range (expected 0 <= p <= 1)", p);
}

std::string Dropout::extra_repr() const { return fmt::format("p={}, inplace=False", p); }

// ---- activations ----
namespace {
// PyTorch's class name of each activation's module.
const char* module_name(Activation a) {
  switch (a) {  // no default: -Wswitch names a missing activation
    case Activation::relu: return "ReLU";
    case Activation::gelu:
    case Activation::gelu_tanh: return "GELU";
    case Activation::tanh: return "Tanh";
    case Activation::sigmoid: return "Sigmoid";
    case Activation::silu: return "SiLU";
  }
  fail("ActivationLayer: invalid Activation value {}", static_cast<int>(a));
}
}  // namespace

ActivationLayer::ActivationLayer(Activation a) : Module(module_name(a)), kind(a) {}

std::string ActivationLayer::extra_repr() const { return kind == Activation::gelu_tanh ? "approximate='tanh'" : ""; }

// ---- Sequential ----
Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> mods) : Module("Sequential") {
  for (auto& m : mods) push_back(m);
}

Sequential::Sequential(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> named)
    : Module("Sequential") {
  for (auto& [name, m] : named) push_back(name, m);
}

void Sequential::push_back(std::shared_ptr<Module> m) { push_back(std::to_string(size()), std::move(m)); }

void Sequential::push_back(const std::string& name, std::shared_ptr<Module> m) {
  if (!m) fail("Sequential: cannot add a null module (as '{}')", name);
  register_module(name, std::move(m));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (const auto& [name, m] : children()) h = m->forward(h);
  return h;
}

std::shared_ptr<Module> Sequential::operator[](const std::string& name) const {
  std::string names;
  for (const auto& [n, m] : children()) {
    if (n == name) return m;
    names += fmt::format("{}'{}'", names.empty() ? "" : ", ", n);
  }
  fail("Sequential: no child named '{}' (children: {})", name, names.empty() ? "none" : names);
}

}  // namespace heed::nn
