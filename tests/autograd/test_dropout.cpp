// tests/autograd/test_dropout.cpp: dropout's statistics and modes.
#include "test_util.h"

using namespace heed;

TEST_CASE("dropout zeroes about p of the elements and scales survivors by 1/(1-p)") {
  Generator g(3);
  Tensor x = Tensor::ones({200, 500});
  Tensor y = dropout(x, 0.25, true, &g);
  auto v = y.to_vector<double>();
  int64_t zeros = 0;
  for (double e : v) {
    if (e == 0.0) ++zeros;
    else CHECK(std::abs(e - 1.0 / 0.75) < 1e-6);
  }
  // 100,000 Bernoulli(0.25) draws: sd of the rate = sqrt(.25*.75/1e5) ~ 0.00137; allow 5 sd.
  double rate = static_cast<double>(zeros) / static_cast<double>(v.size());
  CHECK(std::abs(rate - 0.25) < 5 * 0.00137);
}

TEST_CASE("dropout in eval mode or with p = 0 returns its input unchanged") {
  Tensor x = test::det_tensor({3, 4}, 1);
  CHECK(dropout(x, 0.5, false).same(x));
  CHECK(dropout(x, 0.0, true).same(x));
}

TEST_CASE("dropout with p = 1 drops everything and passes no gradient") {
  Tensor x = test::det_tensor({3, 4}, 2);
  x.set_requires_grad(true);
  Tensor y = dropout(x, 1.0, true);
  for (double e : y.to_vector<double>()) CHECK(e == 0.0);
  backward(sum(y));
  for (double e : x.grad().to_vector<double>()) CHECK(e == 0.0);
}

TEST_CASE("dropout is reproducible from the generator's seed") {
  Tensor x = test::det_tensor({64, 64}, 3);
  Generator a(99), b(99), c(100);
  auto ya = dropout(x, 0.4, true, &a).to_vector<float>();
  auto yb = dropout(x, 0.4, true, &b).to_vector<float>();
  auto yc = dropout(x, 0.4, true, &c).to_vector<float>();
  CHECK(ya == yb);
  CHECK(ya != yc);
}

TEST_CASE("dropout rejects a probability outside [0, 1]") {
  Tensor x = Tensor::ones({2});
  test::check_error([&] { dropout(x, 1.5, true); }, {"dropout", "1.5", "0 <= p <= 1"});
  test::check_error([&] { dropout(x, -0.1, true); }, {"dropout", "-0.1"});
}
