// optim/optimizer.h: the Optimizer base (SGD in optim/sgd.h, Adam and AdamW
// in optim/adam.h).
//
// Optimisers take parameters by name (NamedParams, as Module::named_parameters
// returns them) and keep a per-parameter state of named tensors, so their
// state_dict() is a map from "<param name>/<state name>" to tensors that
// survives reordering of the parameter list, like a module's:
//
//   "step"                    int64 [], step() calls so far (schedules read it)
//   "lr"                      float64 [], the current learning rate
//   "<param>/step"            int64 [], updates this parameter has received
//                             (a parameter without a gradient is skipped, as
//                             in PyTorch, so this can lag "step")
//   "<param>/exp_avg"         Adam/AdamW first moment   [param shape]
//   "<param>/exp_avg_sq"      Adam/AdamW second moment  [param shape]
//   "<param>/momentum_buffer" SGD with momentum != 0    [param shape]
//
// All state is created (zero-filled) when the optimiser is constructed, so a
// fresh optimiser accepts a checkpoint's state; "<param>/step" == 0 plays the
// role of PyTorch's "no state yet" (SGD's first update copies the gradient
// into the momentum buffer). Hyperparameters other than lr are not part of
// the state dict: construct the optimiser with the same options to resume.
//
// The updates follow torch.optim's single-tensor (for-loop, non-fused,
// non-foreach) implementations, which is what PyTorch runs on CPU; the exact
// formulas are next to each class. Each parameter's update is one fused pass
// over contiguous buffers, OpenMP-parallel above kernel::kParallelGrain
// elements and element-wise, hence deterministic for any thread count.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "autograd/autograd.h"
#include "core/state.h"
#include "core/tensor.h"

namespace heed::optim {

class Optimizer : public Stateful {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Clears every parameter's gradient. set_to_none (PyTorch's default) drops
  // it, so step() skips parameters that receive none; otherwise fills zeros.
  void zero_grad(bool set_to_none = true);

  // One update of every parameter whose gradient is defined, under
  // NoGradGuard. Checks all gradients (shape, dtype, contiguity) before
  // changing anything. Increments step_count() even when no gradient exists.
  virtual void step();

  double lr() const { return lr_; }
  void set_lr(double lr);  // finite and >= 0
  int64_t step_count() const { return step_count_; }

  // "SGD", "Adam", "AdamW": the prefix of every error message.
  const std::string& type_name() const { return type_; }
  const NamedParams& params() const { return params_; }
  // One state tensor of one parameter (the tensor itself), e.g.
  // state("0.weight", "exp_avg"); throws naming what exists when absent.
  Tensor state(const std::string& param_name, const std::string& key) const;

  // A snapshot (deep copies, unlike Module::state_dict): training can go on
  // while the map is held, e.g. until a checkpoint is written.
  std::map<std::string, Tensor> state_dict() const override;
  // Validates everything first: a missing or unexpected key, or a shape or
  // dtype mismatch, throws naming the key and both shapes/dtypes, and nothing
  // is changed. Then copies the values in (exactly: the dtypes match).
  void load_state_dict(const std::map<std::string, Tensor>& state) override;

 protected:
  // Rejects (heed::Error naming the parameter) an empty list, duplicate names
  // or tensors, names that are empty or contain '/', undefined, non-leaf or
  // non-floating tensors, tensors that do not require grad or are not
  // contiguous.
  Optimizer(std::string type, NamedParams params, double lr);

  // Throws "<type>: invalid <what> <value>" unless ok.
  void check_option(bool ok, const char* what, double value) const;

  // Adds a zero-filled state tensor called key, shaped and typed like its
  // parameter, to every parameter ("<param>/step" exists always).
  void add_param_state(const std::string& key);

  // Updates parameter i from its gradient g (defined, same shape and dtype,
  // contiguous; checked by step()). Runs under NoGradGuard. The parameter's
  // own "step" has already been incremented.
  virtual void update(size_t i, const Tensor& p, const Tensor& g) = 0;
  // Updates every parameter listed (those with a gradient, in order; their
  // "step" already incremented). By default update() one after the other;
  // an optimiser may run them as one pass (Adam: one parallel region over
  // all their elements instead of one per parameter).
  virtual void update_all(const std::vector<size_t>& with_grad);
  const Tensor& param(size_t i) const { return params_.at(i).second; }

  // Parameter i's state tensor called key (e.g. "exp_avg").
  const Tensor& param_state(size_t i, const std::string& key) const;
  int64_t param_step(size_t i) const;

 private:
  std::string type_;
  NamedParams params_;
  // Per parameter, by state name; "step" is int64 [], the rest are shaped
  // and typed like the parameter.
  std::vector<std::map<std::string, Tensor>> state_;
  double lr_;
  int64_t step_count_ = 0;
};

}  // namespace heed::optim
