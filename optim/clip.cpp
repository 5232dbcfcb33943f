// optim/clip.cpp
#include "optim/clip.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "core/kernels.h"

namespace heed::optim {

namespace {

// PyTorch's clip_grad_norm_: clip_coef = max_norm / (total_norm + 1e-6).
constexpr double kClipEps = 1e-6;

void check_grad(const Tensor& g, const std::string& name) {
  if (!g.is_floating()) fail("clip_grad_norm: gradient of parameter '{}' has dtype {}", name, dtype_name(g.dtype()));
  if (!g.is_contiguous()) fail("clip_grad_norm: gradient of parameter '{}' is not contiguous", name);
}

// Positional parameters are named by their index in error messages.
NamedParams by_index(const std::vector<Tensor>& params) {
  NamedParams out;
  out.reserve(params.size());
  for (size_t k = 0; k < params.size(); ++k) out.emplace_back(std::to_string(k), params[k]);
  return out;
}

// Sum of squares in double. Chunks of kParallelGrain elements are summed
// independently (in parallel when there are several) and then in chunk
// order: the chunking depends only on n, never on the thread count.
template <class T>
double sum_squares(const T* x, int64_t n) {
  const int64_t chunk = kernel::kParallelGrain;
  const int64_t nchunks = (n + chunk - 1) / chunk;
  std::vector<double> partial(static_cast<size_t>(nchunks), 0.0);
#pragma omp parallel for schedule(static) if (nchunks > 1)
  for (int64_t c = 0; c < nchunks; ++c) {
    double s = 0.0;
    const int64_t end = std::min(n, (c + 1) * chunk);
    for (int64_t i = c * chunk; i < end; ++i) {
      double v = static_cast<double>(x[i]);
      s += v * v;
    }
    partial[static_cast<size_t>(c)] = s;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

template <class T>
void scale(T* x, int64_t n, T s) {
#pragma omp parallel for schedule(static) if (n > kernel::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * s;  // grad.mul_(clip_coef)
}

}  // namespace

double grad_norm(const NamedParams& params) {
  double total = 0.0;
  for (const auto& [name, p] : params) {
    if (!p.defined()) fail("clip_grad_norm: parameter '{}' is undefined", name);
    Tensor g = p.grad();
    if (!g.defined()) continue;
    check_grad(g, name);
    total += g.dtype() == DType::f32 ? sum_squares(g.data<float>(), g.numel()) : sum_squares(g.data<double>(), g.numel());
  }
  return std::sqrt(total);
}

double grad_norm(const std::vector<Tensor>& params) { return grad_norm(by_index(params)); }

double clip_grad_norm(const NamedParams& params, double max_norm) {
  if (!(max_norm >= 0)) fail("clip_grad_norm: max_norm must be >= 0, got {}", max_norm);
  const double norm = grad_norm(params);  // also checks every gradient
  if (!std::isfinite(norm)) return norm;
  const double coef = max_norm / (norm + kClipEps);
  if (coef >= 1.0) return norm;
  for (const auto& [_, p] : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    g.bump_version();
    if (g.dtype() == DType::f32)
      scale(g.data<float>(), g.numel(), static_cast<float>(coef));
    else
      scale(g.data<double>(), g.numel(), coef);
  }
  return norm;
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  return clip_grad_norm(by_index(params), max_norm);
}

}  // namespace heed::optim
