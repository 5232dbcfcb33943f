// tests/layers/module_check.h: gradient checks of whole modules in float64.
#pragma once

#include <functional>
#include <vector>

#include "test_util.h"

namespace heed::test {

// Converts m to float64 and gradient-checks f with respect to the floating
// inputs (converted to float64; int64 inputs such as token ids pass through
// unchanged) and every parameter of m. f receives the inputs first, then the
// parameters; it normally reads only the inputs and calls m.
inline void check_module_grads(nn::Module& m, const std::vector<Tensor>& inputs,
                               const std::function<Tensor(const std::vector<Tensor>&)>& f) {
  m.to(DType::f64);
  std::vector<Tensor> in;
  for (const Tensor& x : inputs) {
    if (!x.is_floating()) {
      in.push_back(x);
      continue;
    }
    Tensor t = kernel::to_dtype(x, DType::f64);
    t.set_requires_grad(true);
    in.push_back(t);
  }
  for (auto& [n, p] : m.named_parameters()) in.push_back(p);
  auto r = autograd::gradcheck(f, in);
  INFO(m.type_name() << "(" << m.extra_repr() << "): max |error| " << r.max_abs_err << "\n" << r.report);
  CHECK(r.ok);
}

}  // namespace heed::test
