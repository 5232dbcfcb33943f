// tests/optim/test_schedule.cpp: learning-rate schedules at their key steps.
#include <cmath>
#include <numbers>

#include "quadratic.h"

using namespace heed;
namespace quad = heed::test::quad;
using namespace heed::optim;

TEST_CASE("optim: schedule ConstantLR and StepLR") {
  ConstantLR c(3e-4);
  CHECK(c.lr_at(0) == 3e-4);
  CHECK(c.lr_at(123456) == 3e-4);

  StepLR s(0.1, 10, 0.5);
  CHECK(s.lr_at(0) == 0.1);
  CHECK(s.lr_at(9) == 0.1);
  CHECK(s.lr_at(10) == 0.05);
  CHECK(s.lr_at(19) == 0.05);
  CHECK(s.lr_at(25) == 0.025);
  CHECK(s.lr_at(100) == doctest::Approx(0.1 * std::pow(0.5, 10)).epsilon(1e-15));
  CHECK(StepLR(1.0, 3).lr_at(3) == 0.1);  // PyTorch's default gamma
}

TEST_CASE("optim: schedule WarmupCosineLR at step 0, warmup-1, warmup, mid, end and past the end") {
  const double lr = 1e-3, min_lr = 1e-4;
  const int64_t W = 10, S = 110;
  WarmupCosineLR s(lr, W, S, min_lr);
  auto near = [](double got, double want) {
    INFO("got " << got << " want " << want);
    CHECK(std::abs(got - want) <= 1e-15);
  };
  near(s.lr_at(0), lr / W);            // (0 + 1) / W: the first step already trains
  near(s.lr_at(4), lr * 5 / W);        // linear
  near(s.lr_at(W - 1), lr);            // warm-up reaches lr on its last step
  near(s.lr_at(W), lr);                // cosine starts at lr
  near(s.lr_at(W + (S - W) / 2), min_lr + 0.5 * (lr - min_lr));  // halfway: the mean
  near(s.lr_at(W + (S - W) / 4), min_lr + (lr - min_lr) * 0.5 * (1 + std::cos(std::numbers::pi / 4)));
  near(s.lr_at(S - 1), min_lr + (lr - min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * 99 / 100)));
  near(s.lr_at(S), min_lr);            // end
  near(s.lr_at(S + 1), min_lr);        // past the end
  near(s.lr_at(100 * S), min_lr);
  // Non-increasing after warm-up, always within [min_lr, lr].
  for (int64_t t = W; t < S + 5; ++t) {
    CHECK(s.lr_at(t + 1) <= s.lr_at(t));
    CHECK(s.lr_at(t) >= min_lr);
    CHECK(s.lr_at(t) <= lr);
  }

  WarmupCosineLR no_warmup(0.5, 0, 4);  // min_lr 0
  near(no_warmup.lr_at(0), 0.5);
  near(no_warmup.lr_at(2), 0.25);
  near(no_warmup.lr_at(4), 0.0);
  WarmupCosineLR only_warmup(0.5, 4, 4, 0.01);
  near(only_warmup.lr_at(3), 0.5);
  near(only_warmup.lr_at(4), 0.01);
}

TEST_CASE("optim: schedule apply sets the optimiser's rate for the step about to happen") {
  NamedParams p = quad::make_params();
  SGD opt(p, SGDOptions(1.0));
  WarmupCosineLR s(0.1, 4, 20);
  s.apply(opt);
  CHECK(opt.lr() == s.lr_at(0));
  for (int t = 0; t < 5; ++t) {
    s.apply(opt);
    CHECK(opt.lr() == s.lr_at(t));
    opt.step();
  }
  s.apply(opt, 15);
  CHECK(opt.lr() == s.lr_at(15));
}

TEST_CASE("optim: schedule refuses invalid settings and negative steps") {
  test::check_error([] { WarmupCosineLR(1e-3, 10, 5); }, {"WarmupCosineLR", "warmup_steps 10", "total_steps 5"});
  test::check_error([] { WarmupCosineLR(1e-3, -1, 5); }, {"warmup_steps -1"});
  test::check_error([] { WarmupCosineLR(1e-3, 1, 5, -1.0); }, {"min_lr"});
  test::check_error([] { StepLR(0.1, 0); }, {"StepLR", "step_size"});
  test::check_error([] { ConstantLR(-1.0); }, {"ConstantLR", "lr"});
  test::check_error([] { (void)WarmupCosineLR(1e-3, 1, 5).lr_at(-2); }, {"WarmupCosineLR", "step", "-2"});
}
