// optim/sgd.h: stochastic gradient descent with momentum (torch.optim.SGD).
#pragma once

#include "optim/optimizer.h"

namespace heed::optim {

// ---- SGD (torch.optim.SGD, maximize=False) ----
// Per element, for gradient g and parameter p:
//   g = g + weight_decay * p                        (if weight_decay != 0)
//   if momentum != 0:
//     buf = g                                       (first update of p)
//     buf = momentum * buf + (1 - dampening) * g    (later updates)
//     g = nesterov ? g + momentum * buf : buf
//   p = p - lr * g
struct SGDOptions {
  explicit SGDOptions(double lr = 1e-2) : lr_(lr) {}
  SGDOptions& lr(double v) { lr_ = v; return *this; }
  SGDOptions& momentum(double v) { momentum_ = v; return *this; }
  SGDOptions& dampening(double v) { dampening_ = v; return *this; }
  SGDOptions& nesterov(bool v) { nesterov_ = v; return *this; }
  SGDOptions& weight_decay(double v) { weight_decay_ = v; return *this; }
  double lr_;
  double momentum_ = 0.0;
  double dampening_ = 0.0;
  bool nesterov_ = false;  // needs momentum > 0 and dampening == 0
  double weight_decay_ = 0.0;
};

class SGD : public Optimizer {
 public:
  explicit SGD(NamedParams params, const SGDOptions& options = SGDOptions());
  // As constructed; lr() is the current rate.
  const SGDOptions& options() const { return options_; }

 protected:
  void update(size_t i, const Tensor& p, const Tensor& g) override;

 private:
  SGDOptions options_;
};

}  // namespace heed::optim
