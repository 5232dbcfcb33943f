// layers/module.cpp
#include "layers/module.h"

#include "core/safetensors.h"

#include <cmath>
#include <set>

#include "core/error.h"
#include "core/kernels.h"
#include "core/random.h"

namespace heed::nn {

Tensor Module::forward(const Tensor&) {
  fail("{}: this module does not take a single input; call its own forward(...)", type_);
}

void Module::check_new_name(const std::string& name) const {
  if (name.empty() || name.find('.') != std::string::npos)
    fail("{}: invalid member name '{}' (non-empty, without '.'; for a numbered list of modules, nn::Sequential "
         "and push_back)",
         type_, name);
  for (const auto& [n, _] : params_)
    if (n == name) fail("{}: name '{}' already registered", type_, name);
  for (const auto& [n, _] : buffers_)
    if (n == name) fail("{}: name '{}' already registered", type_, name);
  for (const auto& [n, _] : children_)
    if (n == name) fail("{}: name '{}' already registered", type_, name);
}

Tensor Module::register_parameter(const std::string& name, Tensor t) {
  check_new_name(name);
  check_defined(t, "register_parameter");
  t.set_requires_grad(true);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_new_name(name);
  check_defined(t, "register_buffer");
  buffers_.emplace_back(name, t);
  return t;
}

void Module::collect(const std::string& prefix, NamedParams& out, bool buffers) const {
  for (const auto& [n, t] : buffers ? buffers_ : params_) out.emplace_back(prefix + n, t);
  for (const auto& [n, m] : children_) m->collect(prefix + n + ".", out, buffers);
}

NamedParams Module::named_parameters() const {
  NamedParams out;
  collect("", out, false);
  return out;
}

NamedParams Module::named_buffers() const {
  NamedParams out;
  collect("", out, true);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::to(DType dtype) {
  // Parameters require grad, which only floating-point tensors can; a
  // conversion to int64 would truncate every weight (and leave them
  // requiring grad). Refused before anything changes, as PyTorch's
  // Module.to refuses it.
  if (dtype == DType::i64)
    fail("Module::to: converts parameters and buffers to a floating-point dtype (float32 or float64), got {}",
         dtype_name(dtype));
  auto convert = [&](const Tensor& t) {
    if (t.dtype() == dtype || !t.is_floating()) return;  // integer buffers (indices) stay as they are
    Tensor c = kernel::to_dtype(t, dtype);
    TensorImpl* impl = t.impl();
    impl->storage = c.impl()->storage;
    impl->dtype = dtype;
    impl->strides = c.strides();
    impl->offset = 0;
    impl->grad.reset();
  };
  for (auto& [n, t] : named_parameters()) convert(t);
  for (auto& [n, t] : named_buffers()) convert(t);
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, m] : children_) m->train(on);
}

void Module::zero_grad() {
  for (auto& [n, t] : named_parameters()) t.zero_grad();
}

std::string Module::repr(int indent) const {
  std::string s = type_ + "(" + extra_repr();
  if (children_.empty()) return s + ")";
  s += "\n";
  std::string pad(static_cast<size_t>(indent + 2), ' ');
  for (const auto& [n, m] : children_) s += pad + "(" + n + "): " + m->repr(indent + 2) + "\n";
  return s + std::string(static_cast<size_t>(indent), ' ') + ")";
}

std::string Module::summary() const { return repr(0) + fmt::format("\nnb_parameters {}", num_parameters()); }

std::map<std::string, Tensor> Module::state_dict() const {
  std::map<std::string, Tensor> out;
  for (auto& [n, t] : named_parameters()) out.emplace(n, t);
  for (auto& [n, t] : named_buffers()) out.emplace(n, t);
  return out;
}

std::string state_dict_mismatch(const std::map<std::string, Tensor>& mine,
                                const std::map<std::string, Tensor>& state) {
  // Every problem in one message: missing, unexpected and mis-shaped entries.
  // Floating dtypes convert, as PyTorch's does (a float64 state loads into a
  // float32 model); an integer entry must match exactly.
  // Names are shown escaped (safetensors::printable): a file's key may hold a
  // newline or a terminal's escape sequence.
  std::vector<std::string> missing, unexpected, mismatched;
  for (const auto& [name, t] : mine) {
    const std::string shown = safetensors::printable(name);
    auto it = state.find(name);
    if (it == state.end()) {
      missing.push_back(fmt::format("'{}' (expected shape {})", shown, shape_str(t.shape())));
    } else if (!it->second.defined()) {
      mismatched.push_back(fmt::format("'{}' is undefined", shown));
    } else if (it->second.shape() != t.shape()) {
      mismatched.push_back(
          fmt::format("'{}' has shape {}, the model expects {}", shown, shape_str(it->second.shape()), shape_str(t.shape())));
    } else if (it->second.dtype() != t.dtype() && !(it->second.is_floating() && t.is_floating())) {
      mismatched.push_back(fmt::format("'{}' has dtype {}, the model expects {}", shown, dtype_name(it->second.dtype()),
                                       dtype_name(t.dtype())));
    }
  }
  for (const auto& [name, t] : state)
    if (!mine.count(name))
      unexpected.push_back(fmt::format("'{}' (shape {})", safetensors::printable(name), shape_str(t.shape())));
  std::string what;
  if (!missing.empty()) what += fmt::format("; missing entries: {}", fmt::join(missing, ", "));
  if (!unexpected.empty()) what += fmt::format("; unexpected entries, not in the model: {}", fmt::join(unexpected, ", "));
  if (!mismatched.empty()) what += fmt::format("; {}", fmt::join(mismatched, "; "));
  return what;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state) {
  auto mine = state_dict();
  if (const std::string what = state_dict_mismatch(mine, state); !what.empty())
    fail("load_state_dict: the state does not fit {}{}", type_name(), what);
  autograd::NoGradGuard no_grad;
  for (const auto& [name, t] : mine) kernel::copy_(t, state.at(name));
}

void Module::save(const std::string& path) const { safetensors::save(path, state_dict(), {{"format", "pt"}}); }

void Module::load(const std::string& path) {
  try {
    load_state_dict(safetensors::load(path).tensors);
  } catch (const Error& e) {
    fail("{}: loading '{}': {}", type_name(), safetensors::printable(path), e.what());
  }
}

// ---- initialisation ----
Generator& init_generator(Generator* g) { return g ? *g : default_generator(); }

void uniform_init_(const Tensor& t, double bound, Generator& g) { kernel::uniform_(t, -bound, bound, g); }

void kaiming_uniform_(const Tensor& w, double a, int64_t fan_in, Generator& g) {
  if (fan_in <= 0) fail("kaiming_uniform_: fan_in must be positive, got {}", fan_in);
  double gain = std::sqrt(2.0 / (1.0 + a * a));
  uniform_init_(w, gain * std::sqrt(3.0 / static_cast<double>(fan_in)), g);
}

}  // namespace heed::nn
