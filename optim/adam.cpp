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

#include <cmath>

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

template <class T>
void adam_update(T* p, const T* g, T* m, T* v, int64_t n, const AdamConsts<T> c) {
#pragma omp parallel for schedule(static) if (n > kernel::kParallelGrain)
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

AdamOptions as_adamw(const AdamWOptions& w) {
  return AdamOptions()
      .lr(w.lr_)
      .betas(w.beta1_, w.beta2_)
      .eps(w.eps_)
      .weight_decay(w.weight_decay_)
      .decoupled_weight_decay(true);
}

template <class T>
void adam_dispatch(const AdamOptions& o, double lr, int64_t t, const Tensor& p, const Tensor& g, const Tensor& m,
                   const Tensor& v) {
  // In double, as PyTorch's Python floats: beta ** step, lr / bc1, bc2 ** 0.5.
  double step = static_cast<double>(t);
  double bias_correction1 = 1.0 - std::pow(o.beta1_, step);
  double bias_correction2 = 1.0 - std::pow(o.beta2_, step);
  bool wd = o.weight_decay_ != 0;
  AdamConsts<T> c{static_cast<T>(o.beta1_),
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
  adam_update<T>(p.data<T>(), g.data<T>(), m.data<T>(), v.data<T>(), p.numel(), c);
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

AdamW::AdamW(NamedParams params, const AdamWOptions& o) : Adam(std::move(params), as_adamw(o)) {}

}  // namespace heed::optim
