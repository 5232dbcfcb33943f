// tests/autograd/test_tensor_methods.cpp: Tensor's op methods are the
// differentiable functions of the same name: same values, same gradients.
#include "test_util.h"

using namespace heed;

TEST_CASE("Tensor methods: x.matmul(w).reshape(..).transpose(..).softmax(..).mean().backward() equal the functions") {
  auto run = [](bool methods, std::vector<double>& gx, std::vector<double>& gw) {
    Tensor x = test::det_tensor({4, 3}, 1, -1, 1, DType::f64).set_requires_grad(true);
    Tensor w = test::det_tensor({3, 6}, 2, -1, 1, DType::f64).set_requires_grad(true);
    Tensor loss;
    if (methods) {
      Tensor y = x.matmul(w).reshape({4, 2, 3}).transpose(1, 2).softmax(-1);  // [4, 3, 2]
      loss = y.mean({0}).sum() + (y * y.detach()).sum();
      loss.backward();
    } else {
      Tensor y = softmax(transpose(reshape(matmul(x, w), {4, 2, 3}), 1, 2), -1);
      loss = sum(mean(y, {0})) + sum(y * detach(y));
      backward(loss);
    }
    gx = x.grad().to_vector<double>();
    gw = w.grad().to_vector<double>();
    return loss.item();
  };
  std::vector<double> ax, aw, bx, bw;
  const double a = run(true, ax, aw), b = run(false, bx, bw);
  CHECK(a == b);
  CHECK(ax == bx);
  CHECK(aw == bw);
  CHECK(test::max_abs(Tensor::from_f64(ax, {12})) > 0);  // the gradients are not all zero
  Tensor c = Tensor::ones({2, 2}).set_requires_grad(true);
  CHECK_FALSE(c.matmul(c).detach().requires_grad());
  test::check_error([] { Tensor::ones({2, 3}).matmul(Tensor::ones({2, 3})); }, {"matmul", "[2, 3]"});
}

TEST_CASE("Tensor methods: the element-wise, shape and selection methods equal the functions, gradients included") {
  auto run = [](bool methods, std::vector<double>& gx) {
    Tensor x = test::det_tensor({2, 3, 4}, 3, 0.1, 1.5, DType::f64).set_requires_grad(true);
    Tensor loss;
    if (methods) {
      Tensor a = x.permute({2, 0, 1}).contiguous().view({4, 6}).flatten().unsqueeze(0).squeeze(0);  // [24]
      Tensor b = a.pow(3.0).exp().log().sqrt().abs().clamp(0.2, 1.2).relu().tanh().sigmoid();
      Tensor c = x.log_softmax(-1).max({1}) + x.to(DType::f32).to(DType::f64).sum({1});
      loss = b.sum() + c.mean();
      loss.backward();
    } else {
      Tensor a = squeeze(unsqueeze(flatten(view(contiguous(permute(x, {2, 0, 1})), {4, 6})), 0), 0);
      Tensor b = sigmoid(tanh(relu(clamp(abs(sqrt(log(exp(pow(a, 3.0))))), 0.2, 1.2))));
      Tensor c = max(log_softmax(x, -1), {1}) + sum(to(to(x, DType::f32), DType::f64), {1});
      loss = sum(b) + mean(c);
      backward(loss);
    }
    gx = x.grad().to_vector<double>();
    return loss.item();
  };
  std::vector<double> a, b;
  CHECK(run(true, a) == run(false, b));
  CHECK(a == b);
  CHECK(test::max_abs(Tensor::from_f64(a, {24})) > 0);
  Tensor t = Tensor::from({3, 9, 1, 4}, {2, 2});
  CHECK(t.argmax(1).to_vector<int64_t>() == argmax(t, 1).to_vector<int64_t>());
}
