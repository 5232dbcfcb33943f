// optim/sgd.cpp: SGD's fused per-element update.
//
// Precision: a float32 parameter is updated in float32 arithmetic, as in
// PyTorch. The scalars derived from the options (lr, weight decay, momentum,
// 1 - dampening) are computed in double, like PyTorch's
// Python floats, then cast to the parameter's type once per update; every
// per-element operation then runs in that type, in PyTorch's order (the
// comment on each line gives the PyTorch call it mirrors). float64 parameters
// run the same code in double.
//
// The per-element update is one fused pass over contiguous buffers,
// OpenMP-parallel above kParallelGrain elements; each element is computed by
// one thread, so results do not depend on the thread count.
#include "optim/sgd.h"

#include <cmath>

#include "core/error.h"
#include "core/kernels.h"

namespace heed::optim {

namespace {

template <class T>
struct SGDConsts {
  T lr, weight_decay, momentum, one_minus_dampening;
  bool use_wd, use_momentum, nesterov, first;  // first: buffer not initialised yet
};

template <class T>
void sgd_update(T* p, const T* g, T* buf, int64_t n, const SGDConsts<T> c) {
#pragma omp parallel for schedule(static) if (n > kernel::kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    T gi = g[i];
    if (c.use_wd) gi = gi + c.weight_decay * p[i];  // grad.add(param, alpha=wd)
    if (c.use_momentum) {
      // buf = clone(grad) first; then buf.mul_(momentum).add_(grad, alpha=1 - dampening)
      T b = c.first ? gi : buf[i] * c.momentum + c.one_minus_dampening * gi;
      buf[i] = b;
      gi = c.nesterov ? gi + c.momentum * b : b;  // grad.add(buf, alpha=momentum)
    }
    p[i] = p[i] - c.lr * gi;  // param.add_(grad, alpha=-lr)
  }
}

template <class T>
void sgd_dispatch(const SGDOptions& o, double lr, bool first, const Tensor& p, const Tensor& g, const Tensor& buf) {
  SGDConsts<T> c{static_cast<T>(lr),
                 static_cast<T>(o.weight_decay_),
                 static_cast<T>(o.momentum_),
                 static_cast<T>(1.0 - o.dampening_),
                 o.weight_decay_ != 0,
                 o.momentum_ != 0,
                 o.nesterov_,
                 first};
  sgd_update<T>(p.data<T>(), g.data<T>(), buf.defined() ? buf.data<T>() : nullptr, p.numel(), c);
}

}  // namespace

SGD::SGD(NamedParams params, const SGDOptions& o) : Optimizer("SGD", std::move(params), o.lr_), options_(o) {
  check_option(std::isfinite(o.momentum_) && o.momentum_ >= 0, "momentum", o.momentum_);
  check_option(std::isfinite(o.dampening_), "dampening", o.dampening_);
  check_option(std::isfinite(o.weight_decay_) && o.weight_decay_ >= 0, "weight_decay", o.weight_decay_);
  if (o.nesterov_ && (o.momentum_ <= 0 || o.dampening_ != 0))
    fail("SGD: nesterov momentum requires momentum > 0 and dampening 0 (got momentum {}, dampening {})",
         o.momentum_, o.dampening_);
  if (o.momentum_ != 0) add_param_state("momentum_buffer");
}

void SGD::update(size_t i, const Tensor& p, const Tensor& g) {
  Tensor buf = options_.momentum_ != 0 ? param_state(i, "momentum_buffer") : Tensor();
  bool first = param_step(i) == 1;
  if (p.dtype() == DType::f32)
    sgd_dispatch<float>(options_, lr(), first, p, g, buf);
  else
    sgd_dispatch<double>(options_, lr(), first, p, g, buf);
}

}  // namespace heed::optim
