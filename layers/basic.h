// layers/basic.h: Linear, Conv1d, activations and Sequential.
//
// Shapes (legend in core/tensor.h): Linear maps [.., In] -> [.., Out];
// Conv1d maps [N, C, T] -> [N, O, T'].
#pragma once

#include <memory>
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
  explicit Conv1d(const Conv1dOptions& o);
  // x [N, C, T] -> [N, O, T']. A wrong channel count or rank is reported with
  // the module's configuration.
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight;  // [O, C, K]
  Tensor bias;    // [O] or undefined
  Conv1dOptions options;
};

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override { return relu(x); }
};

class GELU : public Module {
 public:
  explicit GELU(GeluApprox a = GeluApprox::erf) : Module("GELU"), approx(a) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approx); }
  std::string extra_repr() const override { return approx == GeluApprox::tanh ? "approximate='tanh'" : ""; }
  GeluApprox approx;
};

// Children named "0", "1", ... applied in order.
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<std::shared_ptr<Module>> mods);
  void push_back(std::shared_ptr<Module> m);
  Tensor forward(const Tensor& x) override;
  size_t size() const { return children().size(); }
  std::shared_ptr<Module> operator[](size_t i) const { return children().at(i).second; }
};

}  // namespace heed::nn
