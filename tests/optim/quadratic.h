// tests/optim/quadratic.h: the small problem the optimiser tests run on, and
// its gradient written out by hand in double precision for the reference
// loops (which must not share any code with heed's optimisers).
//
// Parameters: a [3], b [2, 2], and c [2], which the loss does not use, so it
// never receives a gradient (optimisers must skip it). The loss
//   L = 1/2 sum(da (a - ca)^2) + 1/2 sum(db (b - cb)^2) + a0 b00 + a1 b01
// couples a and b so that each gradient depends on both parameters:
//   dL/da = da (a - ca) + [b00, b01, 0]
//   dL/db = db (b - cb) + [[a0, a1], [0, 0]]
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "test_util.h"

namespace heed::test::quad {

inline const std::vector<double> a0{0.5, -1.2, 2.0}, b0{1.5, -0.3, 0.8, -2.2}, c0{0.1, 0.2};
inline const std::vector<double> da{1.0, 2.0, 0.5}, ca{0.3, 0.4, -0.5};
inline const std::vector<double> db{1.5, 0.7, 1.2, 2.5}, cb{-0.2, 0.6, 0.1, 0.9};

// Fresh leaves a, b, c with the initial values, in dtype.
inline NamedParams make_params(DType dtype = DType::f32) {
  auto leaf = [&](const std::vector<double>& v, const Shape& s) {
    Tensor t = kernel::to_dtype(Tensor::from_f64(v, s), dtype);
    t.set_requires_grad(true);
    return t;
  };
  return {{"a", leaf(a0, {3})}, {"b", leaf(b0, {2, 2})}, {"c", leaf(c0, {2})}};
}

// L through heed's autograd ops (gradients flow to a and b only).
inline Tensor loss(const NamedParams& p) {
  const Tensor& a = p[0].second;
  const Tensor& b = p[1].second;
  DType t = a.dtype();
  auto constant = [&](const std::vector<double>& v, const Shape& s) {
    return kernel::to_dtype(Tensor::from_f64(v, s), t);
  };
  Tensor la = sum(constant(da, {3}) * pow(a - constant(ca, {3}), 2.0)) * 0.5;
  Tensor lb = sum(constant(db, {2, 2}) * pow(b - constant(cb, {2, 2}), 2.0)) * 0.5;
  Tensor coupling = sum(narrow(a, 0, 0, 2) * reshape(narrow(b, 0, 0, 1), {2}));
  return la + lb + coupling;
}

// zero_grad, forward, backward: the gradients of one iteration.
inline void compute_grads(optim::Optimizer& opt) {
  opt.zero_grad();
  backward(loss(opt.params()));
}

// The reference: parameter values as plain doubles, P[0] = a, P[1] = b
// (c never changes).
using Values = std::vector<std::vector<double>>;
inline Values initial_values() { return {a0, b0}; }

inline Values grads(const Values& P) {
  const auto& a = P[0];
  const auto& b = P[1];
  Values g{std::vector<double>(3), std::vector<double>(4)};
  for (int i = 0; i < 3; ++i) g[0][i] = da[i] * (a[i] - ca[i]);
  g[0][0] += b[0];
  g[0][1] += b[1];
  for (int i = 0; i < 4; ++i) g[1][i] = db[i] * (b[i] - cb[i]);
  g[1][0] += a[0];
  g[1][1] += a[1];
  return g;
}

// |got - want| <= rel * max(1, |want|), element by element, for a and b.
inline void check_values(const NamedParams& p, const Values& want, double rel) {
  for (size_t k = 0; k < want.size(); ++k) {
    auto got = p[k].second.to_vector<double>();
    REQUIRE(got.size() == want[k].size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("parameter " << p[k].first << " element " << i << ": got " << got[i] << " expected " << want[k][i]);
      CHECK(std::abs(got[i] - want[k][i]) <= rel * std::max(1.0, std::abs(want[k][i])));
    }
  }
}

// c must be exactly as it started.
inline void check_c_untouched(const NamedParams& p) {
  auto c = p[2].second.to_vector<double>();
  auto want = kernel::to_dtype(kernel::to_dtype(Tensor::from_f64(c0, {2}), p[2].second.dtype()), DType::f64)
                  .to_vector<double>();
  CHECK(c == want);
}

}  // namespace heed::test::quad
