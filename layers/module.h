// layers/module.h: the Module base, in the spirit of PyTorch's C++ frontend.
//
// A module registers its parameters, buffers and submodules by name; names
// join with '.' ("3.conv_q.weight"). Those dotted names are the keys of
// state_dict(), which checkpoints store, so a checkpoint survives reordering
// and refactors. Layers take an options struct; the constructor creates and
// initialises parameters; forward() is a thin call into autograd ops.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/autograd.h"
#include "core/state.h"
#include "core/tensor.h"

namespace heed {
class Generator;
}

namespace heed::nn {

class Module : public Stateful {
 public:
  explicit Module(std::string type_name) : type_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Single-input modules override this (Sequential chains it); modules with
  // other signatures provide their own forward and leave this throwing.
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  const std::string& type_name() const { return type_; }
  // The part inside the parentheses of the summary line, as PyTorch prints it.
  virtual std::string extra_repr() const { return ""; }

  // Recursive, dotted names, registration order.
  NamedParams named_parameters() const;
  std::vector<Tensor> parameters() const;
  NamedParams named_buffers() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  int64_t num_parameters() const;

  // Converts every parameter and floating-point buffer to dtype (float32 or
  // float64; int64 is refused) in place (the tensors keep their identity,
  // so handles held by layers and optimisers stay valid). float64 modules
  // are what the layer gradient checks run on.
  void to(DType dtype);

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();

  // PyTorch's module print, then a line "nb_parameters N".
  std::string summary() const;

  // Parameters and buffers by dotted name (the tensors themselves, not copies).
  std::map<std::string, Tensor> state_dict() const override;
  // Copies values into the existing tensors. Validates everything first: a
  // missing or unexpected key, or a shape/dtype mismatch, throws naming the
  // key and both shapes, and nothing is changed.
  void load_state_dict(const std::map<std::string, Tensor>& state) override;
  // The state dict to and from a .safetensors file (core/safetensors.h), the
  // format PyTorch users and Hugging Face tools read and write.
  void save(const std::string& path) const;
  void load(const std::string& path);

 protected:
  Tensor register_parameter(const std::string& name, Tensor t);
  Tensor register_buffer(const std::string& name, Tensor t);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    check_new_name(name);
    children_.emplace_back(name, m);
    return m;
  }

 private:
  void check_new_name(const std::string& name) const;
  void collect(const std::string& prefix, NamedParams& out, bool buffers) const;
  std::string repr(int indent) const;

  std::string type_;
  NamedParams params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// What keeps `state` from loading into a module whose own state dict is
// `mine`: "; missing entries: ...; unexpected entries, ...; 'x' has shape
// [a], the model expects [b]", each part led by "; ", or "" when it fits.
// Module::load_state_dict's check, shared with a module that also reads a
// state under other names (GPT: nanoGPT's), whose errors must name the keys
// the state itself has.
std::string state_dict_mismatch(const std::map<std::string, Tensor>& mine, const std::map<std::string, Tensor>& state);

// ---- initialisation (PyTorch's defaults, so results compare with it) ----
// U(-bound, bound) with bound = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2)).
// With a = sqrt(5) (PyTorch's Conv1d/Linear default) bound = 1 / sqrt(fan_in).
void kaiming_uniform_(const Tensor& w, double a, int64_t fan_in, Generator& g);
void uniform_init_(const Tensor& t, double bound, Generator& g);  // U(-bound, bound)
Generator& init_generator(Generator* g);  // g, or the default generator

}  // namespace heed::nn
