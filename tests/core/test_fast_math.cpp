// tests/core/test_fast_math.cpp: the vectorisable float exp and erf against
// double-precision libm over their useful range, plus the edge values.
#include <cmath>
#include <limits>

#include "core/fast_math.h"
#include "test_util.h"

using namespace heed;

TEST_CASE("fast exp: relative error below 3e-7 on [-87, 88], saturation, NaN") {
  double worst = 0, at = 0;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = static_cast<float>(-87.0 + 175.0 * i / 2000000.0);
    const double want = std::exp(static_cast<double>(x));
    const double err = std::abs(kernel::fast::exp(x) - want) / want;
    if (err > worst) worst = err, at = x;
  }
  INFO("worst relative error " << worst << " at x = " << at);
  CHECK(worst < 3e-7);
  CHECK(kernel::fast::exp(0.0f) == 1.0f);
  CHECK(kernel::fast::exp(-200.0f) == 0.0f);
  CHECK(kernel::fast::exp(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(std::isinf(kernel::fast::exp(100.0f)));
  CHECK(std::isnan(kernel::fast::exp(std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("fast erf: absolute error below 4e-7, relative below 4e-7 near 0, odd, saturates to +-1, keeps NaN") {
  double worst = 0, at = 0, worst_rel = 0, at_rel = 0;
  for (int i = 0; i <= 400000; ++i) {
    const float x = static_cast<float>(-6.0 + 12.0 * i / 400000.0);
    const double exact = std::erf(static_cast<double>(x));
    const double err = std::abs(kernel::fast::erf(x) - exact);
    if (err > worst) worst = err, at = x;
    if (std::abs(x) < 0.5f && x != 0.0f && err / std::abs(exact) > worst_rel) worst_rel = err / std::abs(exact), at_rel = x;
  }
  INFO("worst absolute error " << worst << " at x = " << at << "; worst relative (|x| < 0.5) " << worst_rel
                               << " at x = " << at_rel);
  CHECK(worst < 4e-7);
  CHECK(worst_rel < 4e-7);
  CHECK(kernel::fast::erf(1e-30f) > 0.0f);  // tiny arguments keep their sign and size: 2x/sqrt(pi)
  CHECK(kernel::fast::erf(0.0f) == 0.0f);
  CHECK(kernel::fast::erf(-1.3f) == -kernel::fast::erf(1.3f));
  CHECK(kernel::fast::erf(10.0f) == 1.0f);
  CHECK(kernel::fast::erf(-10.0f) == -1.0f);
  CHECK(kernel::fast::erf(std::numeric_limits<float>::infinity()) == 1.0f);
  CHECK(std::isnan(kernel::fast::erf(std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("fast exp_softmax: relative error below 3e-7 up to 88, 0 below -87.33 and for -inf, keeps NaN") {
  double worst = 0, at = 0;
  for (int i = 0; i <= 400000; ++i) {
    const float x = static_cast<float>(-87.0 + 175.0 * i / 400000.0);
    const double exact = std::exp(static_cast<double>(x));
    const double rel = std::abs(kernel::fast::exp_softmax(x) - exact) / exact;
    if (rel > worst) worst = rel, at = x;
  }
  INFO("worst relative error " << worst << " at x = " << at);
  CHECK(worst < 3e-7);
  CHECK(kernel::fast::exp_softmax(0.0f) == 1.0f);
  CHECK(kernel::fast::exp_softmax(-87.5f) == 0.0f);
  CHECK(kernel::fast::exp_softmax(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(std::isnan(kernel::fast::exp_softmax(std::numeric_limits<float>::quiet_NaN())));
  // Where both apply, it agrees with fast::exp.
  for (float x : {-80.0f, -10.5f, -1.0f, -1e-3f, 0.0f, 2.0f, 50.0f})
    CHECK(kernel::fast::exp_softmax(x) == kernel::fast::exp(x));
}
