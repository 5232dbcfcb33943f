// optim/adam.h: Adam (Kingma & Ba, "Adam: A Method for Stochastic
// Optimization", ICLR 2015) and AdamW, one implementation.
#pragma once

#include "optim/optimizer.h"

namespace heed::optim {

// ---- Adam and AdamW: one implementation (torch.optim.Adam / AdamW,
// amsgrad=False, maximize=False, not fused) ----
// With t = the parameter's update count (1 on its first update):
//   Adam:  g = g + weight_decay * p                 (L2, into the gradient)
//   AdamW: p = p * (1 - lr * weight_decay)          (decoupled, before the update)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   bias_correction1 = 1 - beta1^t,  bias_correction2 = 1 - beta2^t
//   step_size = lr / bias_correction1
//   denom = sqrt(v) / sqrt(bias_correction2) + eps
//   p = p - step_size * m / denom
// Adam and AdamW differ only in the defaults of their options and in where
// weight decay goes; AdamOptions().decoupled_weight_decay(true) is AdamW.
template <class Self>
struct AdamFamilyOptions {
  Self& lr(double v) { lr_ = v; return self(); }
  Self& betas(double b1, double b2) { beta1_ = b1; beta2_ = b2; return self(); }
  Self& eps(double v) { eps_ = v; return self(); }
  Self& weight_decay(double v) { weight_decay_ = v; return self(); }
  Self& decoupled_weight_decay(bool v) { decoupled_weight_decay_ = v; return self(); }
  double lr_ = 1e-3;
  double beta1_ = 0.9, beta2_ = 0.999;
  double eps_ = 1e-8;
  double weight_decay_ = 0.0;
  bool decoupled_weight_decay_ = false;

 private:
  Self& self() { return static_cast<Self&>(*this); }
};

// torch.optim.Adam's defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8, L2 weight decay 0.
struct AdamOptions : AdamFamilyOptions<AdamOptions> {
  AdamOptions() = default;
  explicit AdamOptions(double lr) { lr_ = lr; }
};
// torch.optim.AdamW's defaults: as Adam, but decoupled weight decay 1e-2.
struct AdamWOptions : AdamFamilyOptions<AdamWOptions> {
  AdamWOptions() { weight_decay_ = 1e-2; decoupled_weight_decay_ = true; }
  explicit AdamWOptions(double lr) : AdamWOptions() { lr_ = lr; }
};

class Adam : public Optimizer {
 public:
  explicit Adam(NamedParams params, const AdamOptions& options = AdamOptions());
  // As constructed (decoupled_weight_decay_ set for AdamW); lr() is the current rate.
  const AdamOptions& options() const { return options_; }

 protected:
  void update(size_t i, const Tensor& p, const Tensor& g) override;
  void update_all(const std::vector<size_t>& with_grad) override;

 private:
  AdamOptions options_;
};

// Adam with decoupled weight decay (Loshchilov & Hutter, "Decoupled Weight
// Decay Regularization", ICLR 2019). Always decoupled.
class AdamW : public Adam {
 public:
  explicit AdamW(NamedParams params, const AdamWOptions& options = AdamWOptions());
};

}  // namespace heed::optim
