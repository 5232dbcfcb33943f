// tests/autograd/test_activation_linear.cpp: activation_linear(a, act, w, b,
// residual), the GELUs' gradient multiplied into dX in the product's
// epilogue, against the two ops it replaces: the same bits, forward and
// backward, on every path the product takes (heed's float32 GEMM with its
// shared row tiles and its slabs, K blocks, bf16, float64, an empty inner
// dim); its gradients against finite differences; the kernel's refusals.
#include <span>

#include "autograd/gradcheck.h"
#include "layers/module_check.h"

using namespace heed;

using test::bits_differ;

TEST_CASE("activation_linear: the two ops' bits, values and every gradient") {
  struct Case {
    int64_t R, I, O;  // a [R, I] (the activation's input), w [O, I]
    DType dtype;
    bool bias, residual;
  };
  // GPT-128's fc2 (dX [768, 512] over K = 128: two threads share its row
  // tiles), dX cut into column slabs (a wide I, few rows), K > 512 (heed's
  // GEMM cuts dX's K = O in blocks and multiplies at the last), tile edges,
  // no bias, float64, an empty product.
  const Case cases[] = {{768, 512, 128, DType::f32, true, true}, {40, 1100, 24, DType::f32, true, false},
                        {37, 70, 600, DType::f32, true, true},   {13, 17, 70, DType::f32, false, false},
                        {20, 30, 10, DType::f64, true, true},    {5, 7, 0, DType::f32, true, false}};
  for (const bool bf16 : {false, true}) {
    if (bf16 && !bf16_unsupported_reason().empty()) continue;
    for (const Activation act : {Activation::gelu, Activation::gelu_tanh, Activation::silu}) {
      for (const Case& c : cases) {
        CAPTURE(bf16);
        CAPTURE(activation_name(act));
        CAPTURE(c.R);
        CAPTURE(c.I);
        CAPTURE(c.O);
        if (bf16 && c.dtype == DType::f64) continue;
        set_precision(bf16 ? Precision::bf16 : Precision::f32);
        Tensor a = test::det_tensor({c.R, c.I}, 1, -3, 3, c.dtype), w = test::det_tensor({c.O, c.I}, 2, -1, 1, c.dtype);
        Tensor b = c.bias ? test::det_tensor({c.O}, 3, -1, 1, c.dtype) : Tensor();
        Tensor r = c.residual ? test::det_tensor({c.R, c.O}, 4, -3, 3, c.dtype) : Tensor();
        Tensor g = test::det_tensor({c.R, c.O}, 5, -1, 1, c.dtype);
        for (Tensor* t : {&a, &w, &b, &r})
          if (t->defined()) t->set_requires_grad(true);
        Tensor fused = activation_linear(a, act, w, b, r);
        Tensor apart = linear(activation(a, act), w, b, r);
        CHECK(bits_differ(fused, apart) == 0);
        backward(fused, g);
        std::vector<Tensor> first;
        for (Tensor* t : {&a, &w, &b, &r})
          if (t->defined()) {
            REQUIRE(t->grad().defined());
            first.push_back(t->grad());
            t->zero_grad();
          }
        backward(apart, g);
        size_t k = 0;
        for (Tensor* t : {&a, &w, &b, &r})
          if (t->defined()) CHECK(bits_differ(first[k++], t->grad()) == 0);
        set_precision(Precision::f32);
      }
    }
  }
}

TEST_CASE("activation_linear: a frozen weight, an input without gradient, and no grad mode") {
  Tensor a = test::det_tensor({9, 20}, 1, -3, 3), w = test::det_tensor({7, 20}, 2), b = test::det_tensor({7}, 3);
  Tensor g = test::det_tensor({9, 7}, 4);
  // Only the input's gradient (a frozen layer after a trained one).
  a.set_requires_grad(true);
  backward(activation_linear(a, Activation::gelu, w, b), g);
  const Tensor only_a = a.grad();
  a.zero_grad();
  backward(linear(gelu(a), w, b), g);
  CHECK(bits_differ(only_a, a.grad()) == 0);
  // Only the weight's (the activation's input is data).
  a.set_requires_grad(false);
  w.set_requires_grad(true);
  backward(activation_linear(a, Activation::gelu_tanh, w, b), g);
  const Tensor only_w = w.grad();
  w.zero_grad();
  backward(linear(gelu(a, GeluApprox::tanh), w, b), g);
  CHECK(bits_differ(only_w, w.grad()) == 0);
  {
    autograd::NoGradGuard no_grad;
    a.set_requires_grad(true);
    const Tensor y = activation_linear(a, Activation::gelu, w, b);
    CHECK_FALSE(y.requires_grad());
    CHECK(bits_differ(y, linear(gelu(a), w, b)) == 0);
  }
}

TEST_CASE("activation_linear: gradients against finite differences (float64)") {
  for (const Activation act : {Activation::gelu, Activation::gelu_tanh, Activation::relu}) {
    CAPTURE(activation_name(act));
    std::vector<Tensor> in = {
        test::det_tensor({2, 3, 4}, 1, -2, 2, DType::f64), test::det_tensor({5, 4}, 2, -1, 1, DType::f64),
        test::det_tensor({5}, 3, -1, 1, DType::f64), test::det_tensor({2, 3, 5}, 4, -1, 1, DType::f64)};
    if (act == Activation::relu)  // away from relu's kink, where the difference quotient is wrong
      for (double& v : std::span(in[0].data<double>(), static_cast<size_t>(in[0].numel())))
        v = v < 0 ? v - 0.1 : v + 0.1;
    for (Tensor& t : in) t.set_requires_grad(true);
    const auto res = autograd::gradcheck(
        [act](const std::vector<Tensor>& x) { return activation_linear(x[0], act, x[1], x[2], x[3]); }, in);
    CHECK_MESSAGE(res.ok, res.report);
  }
}

TEST_CASE("linear backward: a gradient sum or a factor for dX of the wrong shape, dtype or layout is named") {
  Tensor g = Tensor::zeros({2, 3, 5}), x = Tensor::zeros({2, 3, 4}), w = Tensor::zeros({5, 4});
  CHECK_THROWS_WITH_AS(
      kernel::linear_backward(g, x, w, true, true, Tensor(), false, Tensor::zeros({2, 3, 5})),
      doctest::Contains("the factor to multiply dX by is [2, 3, 5] float32, expected contiguous [2, 3, 4] float32"),
      Error);
  CHECK_THROWS_WITH_AS(
      kernel::linear_backward(g, x, w, true, true, Tensor(), false, Tensor::zeros({2, 3, 4}, DType::f64)),
      doctest::Contains("[2, 3, 4] float64, expected contiguous [2, 3, 4] float32"), Error);
  CHECK_THROWS_WITH_AS(kernel::linear_backward(g, x, w, true, true, Tensor(), false,
                                               kernel::transpose(Tensor::zeros({2, 4, 3}), 1, 2)),
                       doctest::Contains("expected contiguous [2, 3, 4]"), Error);
  CHECK_THROWS_WITH_AS(kernel::linear_backward(g, x, w, true, true, Tensor::zeros({6, 4})),
                       doctest::Contains("the gradient sum to add dX into is [6, 4] float32, expected contiguous "
                                         "[2, 3, 4] float32"),
                       Error);
  CHECK_THROWS_WITH_AS(
      kernel::linear_backward(g, x, w, true, true, Tensor::zeros({2, 3, 4}), false, Tensor::zeros({2, 3, 4})),
      doctest::Contains("dX can be multiplied by a factor or added into a sum, not both"), Error);
}

TEST_CASE("FeedForward: fc2 (GELU (fc1 x)) as one op gives the written-out layer's bits") {
  for (const Activation act : {Activation::gelu, Activation::gelu_tanh}) {
    CAPTURE(activation_name(act));
    Generator gen(5);
    nn::FeedForward ffn(nn::FeedForwardOptions(16).hidden(40).activation(act).generator(&gen));
    Tensor x = test::det_tensor({3, 5, 16}, 7), res = test::det_tensor({3, 5, 16}, 9);
    x.set_requires_grad(true);
    Tensor up = test::det_tensor({3, 5, 16}, 8);
    Tensor y = ffn.forward_add(x, res);
    backward(y, up);
    const Tensor gx = x.grad();
    std::vector<Tensor> gp;
    for (auto& [n, p] : ffn.named_parameters()) gp.push_back(p.grad());
    ffn.zero_grad();
    x.zero_grad();
    Tensor y2 = res + ffn.fc2->forward(activation(ffn.fc1->forward(x), act));
    CHECK(bits_differ(y, y2) == 0);
    backward(y2, up);
    CHECK(bits_differ(gx, x.grad()) == 0);
    size_t k = 0;
    for (auto& [n, p] : ffn.named_parameters()) {
      CAPTURE(n);
      CHECK(bits_differ(gp[k++], p.grad()) == 0);
    }
  }
}
