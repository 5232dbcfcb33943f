// tests/autograd/test_linear_residual.cpp: linear(x, w, b, residual), the
// residual add in the product's epilogue, against the separate add it
// replaces: the same bits, forward and backward, on every path the product
// takes (heed's float32 GEMM, K blocks, bf16, float64, an empty inner dim),
// and a transformer block that uses it against the block written out.

#include "layers/module_check.h"

using namespace heed;

using test::bits_differ;

TEST_CASE("linear + residual in one pass: the separate add's bits, values and gradients") {
  struct Case {
    int64_t R, I, O;
    DType dtype;
    bool bias;
  };
  // GPT-128's out projection and fc2 shapes, K > 512 (heed's GEMM cuts K in
  // blocks and reads the residual at the last), a tile edge, no bias, float64.
  const Case cases[] = {{768, 128, 128, DType::f32, true}, {96, 512, 128, DType::f32, true},
                        {37, 700, 65, DType::f32, true},   {13, 17, 70, DType::f32, false},
                        {20, 30, 10, DType::f64, true},    {5, 0, 7, DType::f32, true}};
  for (const bool bf16 : {false, true}) {
    if (bf16 && !bf16_unsupported_reason().empty()) continue;
    for (const Case& c : cases) {
      CAPTURE(bf16);
      CAPTURE(c.R);
      CAPTURE(c.I);
      CAPTURE(c.O);
      if (bf16 && c.dtype == DType::f64) continue;
      set_precision(bf16 ? Precision::bf16 : Precision::f32);
      Tensor x = test::det_tensor({c.R, c.I}, 1, -1, 1, c.dtype), w = test::det_tensor({c.O, c.I}, 2, -1, 1, c.dtype);
      Tensor b = c.bias ? test::det_tensor({c.O}, 3, -1, 1, c.dtype) : Tensor();
      Tensor r = test::det_tensor({c.R, c.O}, 4, -3, 3, c.dtype);
      Tensor g = test::det_tensor({c.R, c.O}, 5, -1, 1, c.dtype);
      for (Tensor* t : {&x, &w, &b, &r})
        if (t->defined()) t->set_requires_grad(true);
      Tensor fused = linear(x, w, b, r);
      Tensor apart = r + linear(x, w, b);
      CHECK(bits_differ(fused, apart) == 0);
      // Gradients: the same graph arithmetic, the residual's is dY itself.
      backward(fused, g);
      std::vector<Tensor> first;
      for (Tensor* t : {&x, &w, &b, &r})
        if (t->defined()) {
          first.push_back(t->grad());
          t->zero_grad();
        }
      backward(apart, g);
      size_t k = 0;
      for (Tensor* t : {&x, &w, &b, &r})
        if (t->defined()) CHECK(bits_differ(first[k++], t->grad()) == 0);
      CHECK(bits_differ(r.grad(), g) == 0);
      set_precision(Precision::f32);
    }
  }
}

TEST_CASE("linear + residual: a residual of the wrong shape or dtype is named, with the expected one") {
  Tensor x = Tensor::zeros({2, 3, 4}), w = Tensor::zeros({5, 4}), b = Tensor::zeros({5});
  CHECK_THROWS_WITH_AS(linear(x, w, b, Tensor::zeros({2, 3, 4})),
                       doctest::Contains("the tensor to add is [2, 3, 4] float32, expected the output's [2, 3, 5] float32"),
                       Error);
  CHECK_THROWS_WITH_AS(linear(x, w, b, Tensor::zeros({2, 3, 5}, DType::f64)), doctest::Contains("[2, 3, 5] float64"),
                       Error);
  nn::Linear lin(4, 5);
  CHECK_THROWS_WITH_AS(lin.forward_add(x, Tensor::zeros({3, 5})),
                       doctest::Contains("the residual to add is [3, 5], expected the output's [2, 3, 5]"), Error);
  // FeedForward on both of its paths: the fused add, and (dropout while
  // training) the separate add, which would otherwise broadcast [4] over [2, 3, 4].
  for (double p : {0.0, 0.5}) {
    CAPTURE(p);
    nn::FeedForward ffn(nn::FeedForwardOptions(4).hidden(8).dropout(p));
    ffn.train();
    CHECK_THROWS_WITH_AS(ffn.forward_add(x, Tensor::zeros({4})),
                         doctest::Contains("the residual to add is [4], expected the input's [2, 3, 4]"), Error);
    CHECK(ffn.forward_add(x, Tensor::zeros({2, 3, 4})).shape() == Shape{2, 3, 4});
  }
}

TEST_CASE("TransformerBlock: the residual adds fused into out_proj and fc2 give the written-out block's bits") {
  Generator g(11);
  nn::TransformerBlock blk(nn::TransformerBlockOptions(16, 2).ffn_hidden(40).causal(true).generator(&g));
  Tensor x = test::det_tensor({3, 5, 16}, 7);
  x.set_requires_grad(true);
  Tensor up = test::det_tensor({3, 5, 16}, 8);
  // The pre-LN block as its definition reads: x + attn(ln1(x)), then h + ffn(ln2(h)).
  auto written_out = [&](const Tensor& in) {
    Tensor h = in + blk.attn->forward(blk.ln1->forward(in));
    return h + blk.ffn->forward(blk.ln2->forward(h));
  };
  Tensor y = blk.forward(x);
  backward(y, up);
  const Tensor gx = x.grad();
  std::vector<Tensor> gp;
  for (auto& [n, p] : blk.named_parameters()) gp.push_back(p.grad());
  blk.zero_grad();
  x.zero_grad();
  Tensor y2 = written_out(x);
  CHECK(bits_differ(y, y2) == 0);
  backward(y2, up);
  CHECK(bits_differ(gx, x.grad()) == 0);
  size_t k = 0;
  for (auto& [n, p] : blk.named_parameters()) {
    CAPTURE(n);
    CHECK(bits_differ(gp[k++], p.grad()) == 0);
  }
  // With attention weights kept, MultiHeadAttention takes its unfused path
  // (other arithmetic inside) and adds the residual apart: still the written-
  // out block's values.
  blk.attn->keep_attention(true);
  CHECK(bits_differ(blk.forward(x), written_out(x)) == 0);
  blk.attn->keep_attention(false);
}
