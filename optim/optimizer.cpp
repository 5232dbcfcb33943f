// optim/optimizer.cpp: the Optimizer base: parameters, per-parameter state,
// state dicts.
#include "optim/optimizer.h"

#include <cmath>
#include <set>

#include "core/error.h"
#include "core/kernels.h"

namespace heed::optim {

namespace {

constexpr const char* kStep = "step";
constexpr const char* kLr = "lr";

}  // namespace

// ---- Optimizer ----

Optimizer::Optimizer(std::string type, NamedParams params, double lr)
    : type_(std::move(type)), params_(std::move(params)), lr_(lr) {
  if (params_.empty()) fail("{}: got an empty parameter list", type_);
  check_option(std::isfinite(lr) && lr >= 0, "learning rate", lr);
  std::set<std::string> names;
  std::map<const TensorImpl*, std::string> seen;
  for (const auto& [name, p] : params_) {
    if (name.empty() || name.find('/') != std::string::npos)
      fail("{}: invalid parameter name '{}' (non-empty, without '/': state keys are '<name>/<state>')", type_, name);
    if (!names.insert(name).second) fail("{}: parameter '{}' appears more than once", type_, name);
    if (!p.defined()) fail("{}: parameter '{}' is undefined", type_, name);
    if (auto it = seen.find(p.impl()); it != seen.end())
      fail("{}: parameters '{}' and '{}' are the same tensor", type_, it->second, name);
    seen.emplace(p.impl(), name);
    if (!p.is_floating())
      fail("{}: parameter '{}' has dtype {}; only floating-point tensors can be optimised", type_, name,
           dtype_name(p.dtype()));
    if (!p.is_leaf()) fail("{}: parameter '{}' is not a leaf (it is the result of an op)", type_, name);
    if (!p.requires_grad()) fail("{}: parameter '{}' does not require grad", type_, name);
    if (!p.is_contiguous()) fail("{}: parameter '{}' is not contiguous", type_, name);
  }
  state_.resize(params_.size());
  for (auto& s : state_) s.emplace(kStep, Tensor::zeros({}, DType::i64));
}

void Optimizer::check_option(bool ok, const char* what, double value) const {
  if (!ok) fail("{}: invalid {} {}", type_, what, value);
}

void Optimizer::add_param_state(const std::string& key) {
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].second;
    state_[i].emplace(key, Tensor::zeros(p.shape(), p.dtype()));
  }
}

const Tensor& Optimizer::param_state(size_t i, const std::string& key) const { return state_.at(i).at(key); }

int64_t Optimizer::param_step(size_t i) const { return param_state(i, kStep).data<int64_t>()[0]; }

Tensor Optimizer::state(const std::string& param_name, const std::string& key) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].first != param_name) continue;
    auto it = state_[i].find(key);
    if (it == state_[i].end()) {
      std::vector<std::string> keys;
      for (const auto& [k, _] : state_[i]) keys.push_back(k);
      fail("{}: parameter '{}' has no state '{}' (it has: {})", type_, param_name, key, fmt::join(keys, ", "));
    }
    return it->second;
  }
  fail("{}: no parameter named '{}'", type_, param_name);
}

void Optimizer::set_lr(double lr) {
  check_option(std::isfinite(lr) && lr >= 0, "learning rate", lr);
  lr_ = lr;
}

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& [_, p] : params_) {
    if (set_to_none) {
      p.zero_grad();
    } else if (p.grad().defined()) {
      kernel::fill_(p.grad(), 0.0);
    }
  }
}

void Optimizer::step() {
  autograd::NoGradGuard no_grad;
  // Everything is checked before any parameter changes, so an error leaves
  // the parameters and the state as they were.
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& [name, p] = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (g.shape() != p.shape())
      fail("{}: gradient of parameter '{}' has shape {}, the parameter {}", type_, name, shape_str(g.shape()),
           shape_str(p.shape()));
    if (g.dtype() != p.dtype())
      fail("{}: gradient of parameter '{}' has dtype {}, the parameter {}", type_, name, dtype_name(g.dtype()),
           dtype_name(p.dtype()));
    if (!p.is_contiguous()) fail("{}: parameter '{}' is not contiguous", type_, name);
    if (!g.is_contiguous()) fail("{}: gradient of parameter '{}' is not contiguous", type_, name);
    for (const auto& [key, s] : state_[i])
      if (key != kStep && s.dtype() != p.dtype())
        fail("{}: parameter '{}' is {} but its state '{}' is {} (convert the model before creating the optimiser)",
             type_, name, dtype_name(p.dtype()), key, dtype_name(s.dtype()));
  }
  ++step_count_;
  std::vector<size_t> with_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].second.grad().defined()) continue;
    ++param_state(i, kStep).data<int64_t>()[0];
    with_grad.push_back(i);
  }
  // The updates write through data pointers: count them as in-place changes,
  // so that a backward through ops that saved these parameters (a graph kept
  // with retain_graph) is refused instead of using the new weights.
  for (size_t i : with_grad) {
    params_[i].second.bump_version();
    for (const auto& [key, s] : state_[i]) s.bump_version();
  }
  update_all(with_grad);
}

void Optimizer::update_all(const std::vector<size_t>& with_grad) {
  for (size_t i : with_grad) update(i, params_[i].second, params_[i].second.grad());
}

std::map<std::string, Tensor> Optimizer::state_dict() const {
  std::map<std::string, Tensor> out;
  out.emplace(kStep, Tensor::from_i64({step_count_}, {}));
  out.emplace(kLr, Tensor::scalar(lr_, DType::f64));
  for (size_t i = 0; i < params_.size(); ++i)
    for (const auto& [key, s] : state_[i]) out.emplace(params_[i].first + "/" + key, kernel::clone(s));
  return out;
}

void Optimizer::load_state_dict(const std::map<std::string, Tensor>& state) {
  // What this optimiser holds, by key: the templates every entry must match.
  std::map<std::string, Tensor> mine;
  mine.emplace(kStep, Tensor::zeros({}, DType::i64));
  mine.emplace(kLr, Tensor::zeros({}, DType::f64));
  for (size_t i = 0; i < params_.size(); ++i)
    for (const auto& [key, s] : state_[i]) mine.emplace(params_[i].first + "/" + key, s);

  // Every problem in one message (as Module::load_state_dict): missing,
  // unexpected and mismatched entries, each list cut after a few.
  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> missing_kinds, unexpected_kinds;  // the per-parameter state names ("exp_avg")
  auto kind = [](const std::string& key) {
    const size_t slash = key.rfind('/');
    return slash == std::string::npos ? std::string() : key.substr(slash + 1);
  };
  for (const auto& [key, t] : mine) {
    auto it = state.find(key);
    if (it == state.end()) {
      missing.push_back(fmt::format("'{}' (expected shape {}, dtype {})", key, shape_str(t.shape()), dtype_name(t.dtype())));
      if (!kind(key).empty()) missing_kinds.insert(kind(key));
      continue;
    }
    const Tensor& v = it->second;
    if (!v.defined())
      mismatched.push_back(fmt::format("entry '{}' is undefined", key));
    else if (v.shape() != t.shape())
      mismatched.push_back(fmt::format("entry '{}' has shape {}, the optimiser expects {}", key, shape_str(v.shape()),
                                       shape_str(t.shape())));
    else if (v.dtype() != t.dtype())
      mismatched.push_back(fmt::format("entry '{}' has dtype {}, the optimiser expects {}", key, dtype_name(v.dtype()),
                                       dtype_name(t.dtype())));
  }
  for (const auto& [key, t] : state)
    if (!mine.count(key)) {
      unexpected.push_back(fmt::format("'{}' (shape {})", key, t.defined() ? shape_str(t.shape()) : "undefined"));
      if (!kind(key).empty()) unexpected_kinds.insert(kind(key));
    }
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    auto some = [](const std::vector<std::string>& v) {
      constexpr size_t kShown = 6;
      std::vector<std::string> shown(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min(v.size(), kShown)));
      return fmt::format("{}{}", fmt::join(shown, ", "),
                         v.size() > kShown ? fmt::format(" and {} more", v.size() - kShown) : "");
    };
    std::string what;
    if (!missing.empty()) what += fmt::format("; {} missing: {}", missing.size(), some(missing));
    if (!unexpected.empty())
      what += fmt::format("; {} unexpected, not in the optimiser: {}", unexpected.size(), some(unexpected));
    if (!mismatched.empty()) what += fmt::format("; {}", some(mismatched));
    // State of another kind per parameter: another optimiser's.
    bool shared = false;
    for (const auto& k : unexpected_kinds) shared = shared || missing_kinds.count(k);
    if (!missing_kinds.empty() && !unexpected_kinds.empty() && !shared)
      what += fmt::format("; the state keeps {} per parameter where {} keeps {}: it is another optimiser's (construct "
                          "the optimiser the state was written with)",
                          fmt::join(unexpected_kinds, ", "), type_, fmt::join(missing_kinds, ", "));
    fail("{}: load_state_dict: the state does not fit this optimiser{}", type_, what);
  }
  // Values: counts are non-negative, lr is a valid learning rate.
  for (const auto& [key, t] : mine) {
    if (t.dtype() != DType::i64) continue;
    int64_t n = state.at(key).to_vector<int64_t>()[0];
    if (n < 0) fail("{}: load_state_dict: entry '{}' is {}, expected a count >= 0", type_, key, n);
  }
  double lr = state.at(kLr).item();
  if (!(std::isfinite(lr) && lr >= 0))
    fail("{}: load_state_dict: entry 'lr' is {}, expected a finite learning rate >= 0", type_, lr);

  step_count_ = state.at(kStep).to_vector<int64_t>()[0];
  lr_ = lr;
  for (size_t i = 0; i < params_.size(); ++i)
    for (const auto& [key, s] : state_[i]) kernel::copy_(s, state.at(params_[i].first + "/" + key));
}

}  // namespace heed::optim
