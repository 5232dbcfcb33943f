// autograd/gradcheck.h: compares an op's analytic gradients with central
// finite differences. Reusable by anyone adding an op or a layer.
//
// Run it in float64: with eps = 1e-6 the truncation error of a central
// difference is O(eps^2) ~ 1e-12 and the rounding error ~ 1e-16 / eps =
// 1e-10, so a tolerance of 1e-6 leaves four orders of magnitude of margin.
// In float32 the rounding error alone is ~1e-7 / eps, which is why float32
// checks need eps ~ 1e-2 and tolerances ~ 1e-2 (callers must justify them).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace heed::autograd {

struct GradcheckOptions {
  double eps = 1e-6;   // finite-difference step
  double atol = 1e-6;  // pass when |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-5;
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_err = 0;
  std::string report;  // the first mismatches: input, element, analytic, numeric
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks every input that requires grad (each must be a contiguous leaf).
// A non-scalar output y is reduced as sum(y * r) with a fixed pseudo-random r,
// so every element of the Jacobian-vector product is exercised.
GradcheckResult gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& opt = {});

}  // namespace heed::autograd
