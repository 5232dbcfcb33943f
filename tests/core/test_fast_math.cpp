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

TEST_CASE("fast erf: absolute error below 3e-7, odd, saturates to +-1") {
  double worst = 0, at = 0;
  for (int i = 0; i <= 400000; ++i) {
    const float x = static_cast<float>(-6.0 + 12.0 * i / 400000.0);
    const double err = std::abs(kernel::fast::erf(x) - std::erf(static_cast<double>(x)));
    if (err > worst) worst = err, at = x;
  }
  INFO("worst absolute error " << worst << " at x = " << at);
  CHECK(worst < 3e-7);
  CHECK(kernel::fast::erf(-1.3f) == -kernel::fast::erf(1.3f));
  CHECK(kernel::fast::erf(10.0f) == 1.0f);
  CHECK(kernel::fast::erf(-10.0f) == -1.0f);
}
