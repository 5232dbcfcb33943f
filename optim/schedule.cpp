// optim/schedule.cpp
#include "optim/schedule.h"

#include <cmath>
#include <numbers>

#include "core/error.h"
#include "optim/optimizer.h"

namespace heed::optim {

namespace {
void check_step(int64_t step, const char* schedule) {
  if (step < 0) fail("{}: lr_at: step must be >= 0, got {}", schedule, step);
}
void check_lr(double lr, const char* schedule, const char* what) {
  if (!(std::isfinite(lr) && lr >= 0)) fail("{}: {} must be finite and >= 0, got {}", schedule, what, lr);
}
}  // namespace

void LRSchedule::apply(Optimizer& opt, int64_t step) const { opt.set_lr(lr_at(step)); }
void LRSchedule::apply(Optimizer& opt) const { apply(opt, opt.step_count()); }

ConstantLR::ConstantLR(double lr) : lr_(lr) { check_lr(lr, "ConstantLR", "lr"); }

double ConstantLR::lr_at(int64_t step) const {
  check_step(step, "ConstantLR");
  return lr_;
}

StepLR::StepLR(double lr, int64_t step_size, double gamma) : lr_(lr), step_size_(step_size), gamma_(gamma) {
  check_lr(lr, "StepLR", "lr");
  if (step_size <= 0) fail("StepLR: step_size must be > 0, got {}", step_size);
  if (!(std::isfinite(gamma) && gamma >= 0)) fail("StepLR: gamma must be finite and >= 0, got {}", gamma);
}

double StepLR::lr_at(int64_t step) const {
  check_step(step, "StepLR");
  return lr_ * std::pow(gamma_, static_cast<double>(step / step_size_));
}

WarmupCosineLR::WarmupCosineLR(double lr, int64_t warmup_steps, int64_t total_steps, double min_lr)
    : lr_(lr), warmup_(warmup_steps), total_(total_steps), min_lr_(min_lr) {
  check_lr(lr, "WarmupCosineLR", "lr");
  check_lr(min_lr, "WarmupCosineLR", "min_lr");
  if (warmup_steps < 0 || total_steps < warmup_steps)
    fail("WarmupCosineLR: need 0 <= warmup_steps <= total_steps, got warmup_steps {}, total_steps {}", warmup_steps,
         total_steps);
}

double WarmupCosineLR::lr_at(int64_t step) const {
  check_step(step, "WarmupCosineLR");
  if (step < warmup_) return lr_ * static_cast<double>(step + 1) / static_cast<double>(warmup_);
  if (step >= total_) return min_lr_;
  double progress = static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);  // [0, 1)
  return min_lr_ + (lr_ - min_lr_) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace heed::optim
