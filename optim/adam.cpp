// optim/adam.cpp: Adam/AdamW's fused per-element update.
//
// Precision: a float32 parameter is updated in float32 arithmetic, as in
// PyTorch. The scalars derived from the options (bias corrections, step
// size, 1 - beta, 1 - lr * weight_decay) are computed in double, like PyTorch's
// Python floats, then cast to the parameter's type once per update; every
// per-element operation then runs in that type, in PyTorch's order (the
// comment on each line gives the PyTorch call it mirrors). float64 parameters
// run the same code in double.
//
// The per-element update is one fused pass over contiguous buffers,
// OpenMP-parallel above kParallelGrain elements; each element is computed by
// one thread, so results do not depend on the thread count.
#include "optim/adam.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/kernels.h"

namespace heed::optim {

namespace {

template <class T>
struct AdamConsts {
  T beta1, one_minus_beta1, beta2, one_minus_beta2;
  T weight_decay;       // L2 (Adam)
  T decay;              // 1 - lr * weight_decay (AdamW)
  T step_size;          // lr / bias_correction1
  T bias_correction2_sqrt;
  T eps;
  bool l2, decoupled;
};

// The update's unit of work: a run of one parameter's elements.
constexpr int64_t kChunk = 4096;

// Elements [0, n) of one parameter, on the calling thread.
template <class T>
void adam_range(T* p, const T* g, T* m, T* v, int64_t n, const AdamConsts<T>& c) {
  for (int64_t i = 0; i < n; ++i) {
    T pi = p[i];
    T gi = g[i];
    if (c.l2) gi = gi + c.weight_decay * pi;  // grad.add(param, alpha=wd)
    if (c.decoupled) pi = pi * c.decay;       // param.mul_(1 - lr * wd)
    // exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1). (Recent PyTorch writes
    // exp_avg.lerp_(grad, 1 - beta1), i.e. m + (1 - beta1) (g - m): the same
    // value up to float rounding.)
    T mi = m[i] * c.beta1 + c.one_minus_beta1 * gi;
    T vi = v[i] * c.beta2 + c.one_minus_beta2 * gi * gi;  // exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    T denom = std::sqrt(vi) / c.bias_correction2_sqrt + c.eps;  // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - c.step_size * mi / denom;  // param.addcdiv_(exp_avg, denom, value=-step_size)
  }
}

template <class T>
void adam_update(T* p, const T* g, T* m, T* v, int64_t n, const AdamConsts<T> c) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > kernel::kParallelGrain)
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t a = k * kChunk, b = std::min(n, a + kChunk);
    adam_range(p + a, g + a, m + a, v + a, b - a, c);
  }
}

AdamOptions as_adamw(const AdamWOptions& w) {
  return AdamOptions()
      .lr(w.lr_)
      .betas(w.beta1_, w.beta2_)
      .eps(w.eps_)
      .weight_decay(w.weight_decay_)
      .decoupled_weight_decay(true);
}

template <class T>
AdamConsts<T> adam_consts(const AdamOptions& o, double lr, int64_t t) {
  // In double, as PyTorch's Python floats: beta ** step, lr / bc1, bc2 ** 0.5.
  double step = static_cast<double>(t);
  double bias_correction1 = 1.0 - std::pow(o.beta1_, step);
  double bias_correction2 = 1.0 - std::pow(o.beta2_, step);
  bool wd = o.weight_decay_ != 0;
  return AdamConsts<T>{static_cast<T>(o.beta1_),
                  static_cast<T>(1.0 - o.beta1_),
                  static_cast<T>(o.beta2_),
                  static_cast<T>(1.0 - o.beta2_),
                  static_cast<T>(o.weight_decay_),
                  static_cast<T>(1.0 - lr * o.weight_decay_),
                  static_cast<T>(lr / bias_correction1),
                  static_cast<T>(std::sqrt(bias_correction2)),
                  static_cast<T>(o.eps_),
                  wd && !o.decoupled_weight_decay_,
                  wd && o.decoupled_weight_decay_};
}

template <class T>
void adam_dispatch(const AdamOptions& o, double lr, int64_t t, const Tensor& p, const Tensor& g, const Tensor& m,
                   const Tensor& v) {
  adam_update<T>(p.data<T>(), g.data<T>(), m.data<T>(), v.data<T>(), p.numel(), adam_consts<T>(o, lr, t));
}

}  // namespace

Adam::Adam(NamedParams params, const AdamOptions& o)
    : Optimizer(o.decoupled_weight_decay_ ? "AdamW" : "Adam", std::move(params), o.lr_), options_(o) {
  check_option(std::isfinite(o.eps_) && o.eps_ >= 0, "epsilon", o.eps_);
  check_option(o.beta1_ >= 0 && o.beta1_ < 1, "beta1", o.beta1_);
  check_option(o.beta2_ >= 0 && o.beta2_ < 1, "beta2", o.beta2_);
  check_option(std::isfinite(o.weight_decay_) && o.weight_decay_ >= 0, "weight_decay", o.weight_decay_);
  add_param_state("exp_avg");
  add_param_state("exp_avg_sq");
}

void Adam::update(size_t i, const Tensor& p, const Tensor& g) {
  const Tensor& m = param_state(i, "exp_avg");    // [param shape]
  const Tensor& v = param_state(i, "exp_avg_sq");  // [param shape]
  if (p.dtype() == DType::f32)
    adam_dispatch<float>(options_, lr(), param_step(i), p, g, m, v);
  else
    adam_dispatch<double>(options_, lr(), param_step(i), p, g, m, v);
}

// Every float32 parameter in one parallel region: their elements cut into
// chunks of kChunk (each parameter's own, never two parameters in one),
// shared out statically. The model's many small tensors (biases, LayerNorm,
// 128 x 128 projections) each fell below the grain of a region of their own
// and ran on one thread. Each element is computed as update() computes it,
// so the numbers do not change. float64 parameters go one by one.
void Adam::update_all(const std::vector<size_t>& with_grad) {
  struct Piece {
    float *p, *m, *v;
    const float* g;
    int64_t n;
    size_t job;
  };
  std::vector<AdamConsts<float>> consts;
  std::vector<Piece> pieces;
  int64_t total = 0;
  for (size_t i : with_grad) {
    const Tensor& p = param(i);
    if (p.dtype() != DType::f32) {
      update(i, p, p.grad());
      continue;
    }
    const Tensor g = p.grad();
    const Tensor &m = param_state(i, "exp_avg"), &v = param_state(i, "exp_avg_sq");
    consts.push_back(adam_consts<float>(options_, lr(), param_step(i)));
    const int64_t n = p.numel();
    for (int64_t a = 0; a < n; a += kChunk)
      pieces.push_back({p.data<float>() + a, m.data<float>() + a, v.data<float>() + a, g.data<float>() + a,
                        std::min(kChunk, n - a), consts.size() - 1});
    total += n;
  }
  const int64_t np = static_cast<int64_t>(pieces.size());
#pragma omp parallel for schedule(static) if (total > kernel::kParallelGrain)
  for (int64_t k = 0; k < np; ++k) {
    const Piece& q = pieces[static_cast<size_t>(k)];
    adam_range(q.p, q.g, q.m, q.v, q.n, consts[q.job]);
  }
}

AdamW::AdamW(NamedParams params, const AdamWOptions& o) : Adam(std::move(params), as_adamw(o)) {}

}  // namespace heed::optim
