// tests/autograd/test_activation.cpp: the Activation enum (autograd/
// activation.h): its names, parsing them, and activation(x, a) being the
// per-op function it names, in values, gradients and op name.
#include "test_util.h"

using namespace heed;

namespace {

// The function of autograd/ops.h that each activation names.
Tensor named_op(const Tensor& x, Activation a) {
  switch (a) {
    case Activation::relu: return relu(x);
    case Activation::gelu: return gelu(x);
    case Activation::gelu_tanh: return gelu(x, GeluApprox::tanh);
    case Activation::tanh: return tanh(x);
    case Activation::sigmoid: return sigmoid(x);
    case Activation::silu: return silu(x);
  }
  FAIL("unhandled activation");
  return Tensor();
}

}  // namespace

TEST_CASE("activation: the names are released spellings, and parse back") {
  // Summaries logged by past runs hold these strings ("activation=gelu").
  std::vector<std::string> names;
  for (Activation a : kActivations) names.push_back(activation_name(a));
  CHECK(names == std::vector<std::string>{"relu", "gelu", "gelu_tanh", "tanh", "sigmoid", "silu"});
  for (Activation a : kActivations) CHECK(parse_activation(activation_name(a)) == a);
}

TEST_CASE("activation: an unknown name is refused, naming it and listing the valid ones") {
  test::check_error([] { parse_activation("swish"); },
                    {"unknown activation 'swish'", "relu, gelu, gelu_tanh, tanh, sigmoid, silu"});
  test::check_error([] { parse_activation("GELU"); }, {"'GELU'"});
  test::check_error([] { parse_activation(""); }, {"''"});
}

TEST_CASE("activation(x, a) is the op it names: same values, gradient and op name, float32 and float64") {
  for (DType dt : {DType::f32, DType::f64}) {
    for (Activation a : kActivations) {
      INFO(activation_name(a) << " " << dtype_name(dt));
      Tensor x1 = test::det_tensor({5, 7}, 3, -4.0, 4.0, dt), x2 = test::det_tensor({5, 7}, 3, -4.0, 4.0, dt);
      x1.set_requires_grad(true);
      x2.set_requires_grad(true);
      Tensor y1 = activation(x1, a), y2 = named_op(x2, a);
      CHECK(y1.grad_fn()->name == y2.grad_fn()->name);
      CHECK(y1.to_vector<double>() == y2.to_vector<double>());
      backward(sum(y1 * y1));
      backward(sum(y2 * y2));
      CHECK(x1.grad().to_vector<double>() == x2.grad().to_vector<double>());
    }
  }
}

TEST_CASE("activation(x, a) matches finite differences for every activation (float64)") {
  for (Activation a : kActivations) {
    INFO(activation_name(a));
    // |x| >= 0.1: ReLU's kink at 0 is beyond a finite difference.
    auto v = test::det_values(12, 17, 0.1, 2.0);
    for (size_t i = 0; i < v.size(); i += 2) v[i] = -v[i];
    Tensor x = Tensor::from_f64(v, {3, 4});
    x.set_requires_grad(true);
    auto r = autograd::gradcheck([a](const std::vector<Tensor>& in) { return activation(in[0], a); }, {x});
    INFO("max |error| " << r.max_abs_err << "\n" << r.report);
    CHECK(r.ok);
  }
}

TEST_CASE("the GELUs' training path (f and f' in one pass, then g f') has the bits of the plain kernels") {
  // Values across the erf's and the exponential's ranges, tails included.
  Tensor x = test::det_tensor({64, 129}, 41, -9.0, 9.0).to(DType::f32);
  Tensor g = test::det_tensor({64, 129}, 42).to(DType::f32);
  for (const auto op : {kernel::Unary::gelu_erf, kernel::Unary::gelu_tanh}) {
    CAPTURE(kernel::unary_name(op));
    Tensor d;
    const Tensor y = kernel::unary_with_derivative(op, x, d);
    CHECK(y.to_vector<float>() == kernel::unary(op, x).to_vector<float>());
    CHECK(kernel::binary(kernel::Binary::mul, g, d).to_vector<float>() ==
          kernel::unary_backward(op, x, g).to_vector<float>());
    // Through autograd: the gradient is g f'(x).
    Tensor xl = kernel::clone(x);
    xl.set_requires_grad(true);
    backward(op == kernel::Unary::gelu_erf ? gelu(xl) : gelu(xl, GeluApprox::tanh), g);
    CHECK(xl.grad().to_vector<float>() == kernel::unary_backward(op, x, g).to_vector<float>());
  }
  CHECK_THROWS_WITH_AS([&] { Tensor d; kernel::unary_with_derivative(kernel::Unary::relu, x, d); }(),
                       doctest::Contains("no derivative pass"), Error);
}

TEST_CASE("GELU's backward multiplies into its saved derivative only on its last run") {
  Tensor x = test::det_tensor({16, 33}, 43, -3.0, 3.0).to(DType::f32);
  x.set_requires_grad(true);
  Tensor g = test::det_tensor({16, 33}, 44).to(DType::f32);
  const std::vector<float> once = kernel::unary_backward(kernel::Unary::gelu_erf, x, g).to_vector<float>();
  Tensor y = gelu(x);
  backward(y, g, /*retain_graph=*/true);  // keeps f'(x) for the second run
  CHECK(x.grad().to_vector<float>() == once);
  x.zero_grad();
  backward(y, g);  // the last run: may reuse f'(x)'s memory
  CHECK(x.grad().to_vector<float>() == once);
  CHECK(g.to_vector<float>() == test::det_tensor({16, 33}, 44).to(DType::f32).to_vector<float>());
}
