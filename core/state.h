// core/state.h: the one interface through which anything with training state
// (a module's parameters and buffers, an optimiser's moments) is saved and
// restored. heed::Run (data/run.h) knows only this, so it stays below
// layers/ and optim/; the checkpoint file knows only names and tensors
// (STYLE.md, principle 13).
#pragma once

#include <map>
#include <string>

#include "core/tensor.h"

namespace heed {

class Stateful {
 public:
  virtual ~Stateful() = default;
  // Named tensors; names may hold dots and slashes ("blocks.0.attn.qkv.weight").
  virtual std::map<std::string, Tensor> state_dict() const = 0;
  // Validates everything first (missing, unexpected or mis-shaped keys are
  // one error naming them) and changes nothing when it throws.
  virtual void load_state_dict(const std::map<std::string, Tensor>& state) = 0;
};

}  // namespace heed
