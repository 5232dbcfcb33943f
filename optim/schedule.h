// optim/schedule.h: learning-rate schedules.
//
// A schedule is a pure function of the step: lr_at(step) is the learning rate
// for the update numbered `step` (0-based: the first step() call is step 0),
// so resuming from a checkpoint needs nothing but the optimiser's step count.
// Typical use, once per iteration before opt.step():
//
//   schedule.apply(opt);  // opt.set_lr(schedule.lr_at(opt.step_count()))
//   opt.step();
#pragma once

#include <cstdint>

namespace heed::optim {

class Optimizer;

class LRSchedule {
 public:
  virtual ~LRSchedule() = default;
  // step >= 0; throws on a negative step.
  virtual double lr_at(int64_t step) const = 0;
  // opt.set_lr(lr_at(step)).
  void apply(Optimizer& opt, int64_t step) const;
  // apply(opt, opt.step_count()): the rate for the update about to happen.
  void apply(Optimizer& opt) const;
};

// lr at every step.
class ConstantLR : public LRSchedule {
 public:
  explicit ConstantLR(double lr);
  double lr_at(int64_t step) const override;

 private:
  double lr_;
};

// lr * gamma^floor(step / step_size), like torch.optim.lr_scheduler.StepLR.
class StepLR : public LRSchedule {
 public:
  StepLR(double lr, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t step) const override;

 private:
  double lr_;
  int64_t step_size_;
  double gamma_;
};

// Linear warm-up, then cosine decay to min_lr, then min_lr. With W = warmup
// steps and S = total steps (W <= S):
//   step <  W:      lr * (step + 1) / W
//                   (so step 0 already trains, at lr / W, and step W - 1 reaches lr)
//   W <= step < S:  min_lr + (lr - min_lr) * (1 + cos(pi * (step - W) / (S - W))) / 2
//                   (lr at step W, falling towards min_lr)
//   step >= S:      min_lr
// W = 0 means no warm-up; W = S means warm-up then min_lr.
class WarmupCosineLR : public LRSchedule {
 public:
  WarmupCosineLR(double lr, int64_t warmup_steps, int64_t total_steps, double min_lr = 0.0);
  double lr_at(int64_t step) const override;

 private:
  double lr_;
  int64_t warmup_;
  int64_t total_;
  double min_lr_;
};

}  // namespace heed::optim
