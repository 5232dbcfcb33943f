// tests/autograd/test_gradcheck.cpp: every differentiable op against central
// finite differences, in float64 (see autograd/gradcheck.h for why the
// default tolerance, atol 1e-6 + rtol 1e-5, is safe there). One line per case;
// "nc" cases feed the op a non-contiguous view (transposed, sliced or
// broadcast) of a contiguous leaf.
#include <functional>
#include <string>

#include "test_util.h"

using namespace heed;
using autograd::GradcheckFn;

namespace {

enum class Dom { any, pos, away0 };  // input domain: [-1,1], [0.5,2], |x| in [0.1,1]

struct GradCase {
  std::string name;
  std::vector<Shape> shapes;
  GradcheckFn f;
  Dom dom = Dom::any;
};

using V = const std::vector<Tensor>&;

Tensor make_input(const Shape& s, uint64_t seed, Dom d) {
  std::vector<double> v;
  if (d == Dom::pos) {
    v = test::det_values(shape_numel(s), seed, 0.5, 2.0);
  } else {
    v = test::det_values(shape_numel(s), seed, -1.0, 1.0);
    if (d == Dom::away0)
      for (auto& x : v) x = x < 0 ? x - 0.1 : x + 0.1;
  }
  Tensor t = Tensor::from_f64(v, s);
  t.set_requires_grad(true);
  return t;
}

Tensor T(const Tensor& t) { return transpose(t, 0, 1); }

std::vector<GradCase> cases() {
  Tensor idx = Tensor::from_i64({2, 0, 2, 1}, {4});
  Tensor ids = Tensor::from_i64({1, 3, 1, 0, 3, 3}, {2, 3});
  Tensor tgt = Tensor::from_i64({1, 0, 4, 2, 4}, {5});
  Tensor tgt_ign = Tensor::from_i64({1, -100, 4, 2, -100}, {5});
  Tensor tgt3 = Tensor::from_i64({0, 3, 2, 1, 1, 0}, {2, 3});
  return {
      // element-wise binary, with broadcasting
      {"add", {{3, 4}, {3, 4}}, [](V x) { return add(x[0], x[1]); }},
      {"add broadcast row", {{3, 4}, {4}}, [](V x) { return x[0] + x[1]; }},
      {"add broadcast both", {{2, 1, 4}, {3, 1}}, [](V x) { return x[0] + x[1]; }},
      {"add nc transposed", {{4, 3}, {3, 4}}, [](V x) { return T(x[0]) + x[1]; }},
      {"sub", {{3, 4}, {1, 4}}, [](V x) { return x[0] - x[1]; }},
      {"sub nc sliced", {{3, 6}, {3, 2}}, [](V x) { return narrow(x[0], 1, 2, 2) - x[1]; }},
      {"mul", {{3, 4}, {3, 4}}, [](V x) { return x[0] * x[1]; }},
      {"mul broadcast", {{2, 3, 4}, {3, 1}}, [](V x) { return x[0] * x[1]; }},
      {"mul nc expanded", {{3, 1}, {3, 4}}, [](V x) { return expand(x[0], {3, 4}) * x[1]; }},
      {"mul same input twice", {{3, 4}}, [](V x) { return x[0] * x[0]; }},
      {"div", {{3, 4}, {3, 4}}, [](V x) { return x[0] / x[1]; }, Dom::pos},
      {"div broadcast", {{3, 4}, {4}}, [](V x) { return x[0] / x[1]; }, Dom::pos},
      {"div nc transposed", {{4, 3}, {3, 4}}, [](V x) { return x[1] / T(x[0]); }, Dom::pos},
      // scalar forms
      {"add scalar", {{3, 4}}, [](V x) { return x[0] + 2.5; }},
      {"sub scalar", {{3, 4}}, [](V x) { return x[0] - 2.5; }},
      {"rsub scalar", {{3, 4}}, [](V x) { return 2.5 - x[0]; }},
      {"mul scalar", {{3, 4}}, [](V x) { return x[0] * -3.0; }},
      {"div scalar", {{3, 4}}, [](V x) { return x[0] / 4.0; }},
      {"rdiv scalar", {{3, 4}}, [](V x) { return 2.0 / x[0]; }, Dom::pos},
      {"neg", {{3, 4}}, [](V x) { return -x[0]; }},
      {"pow 2", {{3, 4}}, [](V x) { return pow(x[0], 2.0); }},
      {"pow 3 nc", {{4, 3}}, [](V x) { return pow(T(x[0]), 3.0); }},
      {"pow 2.5", {{3, 4}}, [](V x) { return pow(x[0], 2.5); }, Dom::pos},
      {"pow -1.5", {{3, 4}}, [](V x) { return pow(x[0], -1.5); }, Dom::pos},
      // unary
      {"exp", {{3, 4}}, [](V x) { return exp(x[0]); }},
      {"exp nc", {{4, 3}}, [](V x) { return exp(T(x[0])); }},
      {"log", {{3, 4}}, [](V x) { return log(x[0]); }, Dom::pos},
      {"log nc", {{3, 6}}, [](V x) { return log(narrow(x[0], 1, 1, 4)); }, Dom::pos},
      {"sqrt", {{3, 4}}, [](V x) { return sqrt(x[0]); }, Dom::pos},
      {"tanh", {{3, 4}}, [](V x) { return tanh(x[0]); }},
      {"tanh nc", {{4, 3}}, [](V x) { return tanh(T(x[0])); }},
      {"sigmoid", {{3, 4}}, [](V x) { return sigmoid(x[0]); }},
      {"sin", {{3, 4}}, [](V x) { return sin(x[0] * 3.0); }},
      {"cos nc", {{4, 3}}, [](V x) { return cos(T(x[0]) * 3.0); }},
      {"relu", {{3, 4}}, [](V x) { return relu(x[0]); }, Dom::away0},
      {"relu nc", {{4, 3}}, [](V x) { return relu(T(x[0])); }, Dom::away0},
      {"gelu erf", {{3, 4}}, [](V x) { return gelu(x[0] * 3.0, GeluApprox::erf); }},
      {"gelu tanh", {{3, 4}}, [](V x) { return gelu(x[0] * 3.0, GeluApprox::tanh); }},
      {"gelu nc", {{4, 3}}, [](V x) { return gelu(T(x[0])); }},
      {"silu", {{3, 4}}, [](V x) { return silu(x[0] * 4.0); }},
      {"silu nc", {{4, 3}}, [](V x) { return silu(T(x[0])); }},
      {"activation(silu) by enum", {{3, 4}}, [](V x) { return activation(x[0] * 3.0, Activation::silu); }},
      // matmul
      {"matmul 2d", {{3, 4}, {4, 5}}, [](V x) { return matmul(x[0], x[1]); }},
      {"linear 2d", {{3, 4}, {5, 4}, {5}}, [](V x) { return linear(x[0], x[1], x[2]); }},
      {"linear 3d", {{2, 3, 4}, {5, 4}, {5}}, [](V x) { return linear(x[0], x[1], x[2]); }},
      {"linear no bias", {{2, 3, 4}, {5, 4}}, [](V x) { return linear(x[0], x[1]); }},
      {"linear + residual", {{2, 3, 4}, {5, 4}, {5}, {2, 3, 5}}, [](V x) { return linear(x[0], x[1], x[2], x[3]); }},
      {"linear + residual nc", {{4, 3}, {5, 4}, {5}, {5, 3}}, [](V x) { return linear(T(x[0]), x[1], x[2], T(x[3])); }},
      {"linear nc x^T, w^T", {{4, 3}, {4, 5}, {5}}, [](V x) { return linear(T(x[0]), T(x[1]), x[2]); }},
      {"matmul nc a^T b", {{4, 3}, {4, 5}}, [](V x) { return matmul(T(x[0]), x[1]); }},
      {"matmul nc a b^T", {{3, 4}, {5, 4}}, [](V x) { return matmul(x[0], T(x[1])); }},
      {"matmul nc sliced", {{3, 6}, {4, 5}}, [](V x) { return matmul(narrow(x[0], 1, 1, 4), x[1]); }},
      {"matmul batched", {{2, 3, 4}, {2, 4, 5}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul batch x shared", {{2, 3, 4}, {4, 5}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul shared x batch", {{3, 4}, {2, 4, 5}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul broadcast batch", {{2, 1, 3, 4}, {3, 4, 2}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul batched nc", {{2, 4, 3}, {2, 4, 5}}, [](V x) { return matmul(transpose(x[0], 1, 2), x[1]); }},
      {"matmul vector right", {{3, 4}, {4}}, [](V x) { return matmul(x[0], x[1]); }},
      {"matmul vector left", {{4}, {4, 5}}, [](V x) { return matmul(x[0], x[1]); }},
      // convolution (the float64 path: a direct loop; oneDNN's float32 path
      // is compared against it in tests/autograd/test_conv.cpp)
      {"conv1d", {{2, 3, 9}, {4, 3, 3}, {4}}, [](V x) { return conv1d(x[0], x[1], x[2]); }},
      {"conv1d padding", {{2, 3, 9}, {4, 3, 5}, {4}}, [](V x) { return conv1d(x[0], x[1], x[2], 1, 2); }},
      {"conv1d stride", {{2, 3, 10}, {4, 3, 3}, {4}}, [](V x) { return conv1d(x[0], x[1], x[2], 2, 1); }},
      {"conv1d dilation", {{2, 3, 11}, {2, 3, 3}, {2}}, [](V x) { return conv1d(x[0], x[1], x[2], 1, 2, 2); }},
      {"conv1d stride pad dilation no bias", {{1, 2, 12}, {3, 2, 3}},
       [](V x) { return conv1d(x[0], x[1], Tensor(), 3, 1, 2); }},
      {"conv1d nc input", {{2, 9, 3}, {4, 3, 3}, {4}}, [](V x) { return conv1d(transpose(x[0], 1, 2), x[1], x[2], 1, 1); }},
      {"conv1d_relu (fused)", {{2, 3, 9}, {4, 3, 3}, {4}}, [](V x) { return conv1d_relu(x[0], x[1], x[2], 1, 1); }},
      {"conv1d_relu one output channel", {{2, 3, 9}, {1, 3, 3}, {1}},
       [](V x) { return conv1d_relu(x[0], x[1], x[2], 1, 1); }},
      // layer normalisation (the float64 path: a direct loop; oneDNN's float32
      // path is compared against it in tests/autograd/test_layernorm.cpp)
      {"layer_norm", {{3, 5}, {5}, {5}}, [](V x) { return layer_norm(x[0], x[1], x[2]); }},
      {"layer_norm 3d eps", {{2, 3, 4}, {4}, {4}}, [](V x) { return layer_norm(x[0], x[1], x[2], 0.1); }},
      {"layer_norm nc", {{4, 3}, {4}, {4}}, [](V x) { return layer_norm(T(x[0]), x[1], x[2]); }},
      {"layer_norm no affine", {{3, 6}}, [](V x) { return layer_norm(x[0], Tensor(), Tensor()); }},
      // shape
      {"reshape", {{3, 4}}, [](V x) { return reshape(x[0], {2, -1}) * reshape(x[0], {2, 6}); }},
      {"reshape nc (copies)", {{4, 3}}, [](V x) { return reshape(T(x[0]), {12}); }},
      {"view", {{3, 4}}, [](V x) { return view(x[0], {4, 3}); }},
      {"flatten", {{2, 3, 4}}, [](V x) { return flatten(x[0], 1); }},
      {"permute", {{2, 3, 4}}, [](V x) { return permute(x[0], {2, 0, 1}); }},
      {"transpose", {{2, 3, 4}}, [](V x) { return transpose(x[0], 0, 2); }},
      {"narrow", {{5, 4}}, [](V x) { return narrow(x[0], 0, 1, 3); }},
      {"narrow negative start", {{5, 4}}, [](V x) { return narrow(x[0], 1, -2, 2); }},
      {"expand", {{3, 1}}, [](V x) { return expand(x[0], {2, 3, 4}); }},
      {"unsqueeze squeeze", {{3, 4}}, [](V x) { return squeeze(unsqueeze(x[0], 1), 1) * unsqueeze(x[0], 0); }},
      {"contiguous nc", {{4, 3}}, [](V x) { return contiguous(T(x[0])); }},
      {"clone nc", {{4, 3}}, [](V x) { return clone(T(x[0])) * x[0].sum(); }},
      {"concat", {{2, 3}, {2, 1}, {2, 2}}, [](V x) { return concat({x[0], x[1], x[2]}, 1); }},
      {"concat nc", {{3, 2}, {2, 2}}, [](V x) { return concat({T(x[0]), x[1]}, 1); }},
      {"split", {{2, 5}}, [](V x) {
         auto p = split(x[0], 2, 1);  // sizes 2, 2, 1
         return concat({p[2] * 3.0, p[0], p[1] * p[1]}, 1);
       }},
      {"split sizes", {{6, 2}}, [](V x) {
         auto p = split(x[0], std::vector<int64_t>{1, 3, 2}, 0);
         return p[1] * 2.0 + narrow(concat({p[0], p[2]}, 0), 0, 0, 3);
       }},
      // indexing
      {"index_select repeated", {{3, 4}}, [idx](V x) { return index_select(x[0], 0, idx); }},
      {"index_select dim1", {{2, 3}}, [idx](V x) { return index_select(x[0], 1, idx); }},
      {"index_select nc", {{4, 3}}, [idx](V x) { return index_select(T(x[0]), 0, idx); }},
      {"embedding", {{4, 5}}, [ids](V x) { return embedding(x[0], ids); }},
      // reductions
      {"sum all", {{3, 4}}, [](V x) { return sum(x[0]); }},
      {"sum dim", {{2, 3, 4}}, [](V x) { return sum(x[0], {1}); }},
      {"sum dims keepdim", {{2, 3, 4}}, [](V x) { return sum(x[0], {0, 2}, true); }},
      {"sum nc", {{4, 3}}, [](V x) { return sum(T(x[0]), {1}); }},
      {"sum nc expanded", {{3, 1}}, [](V x) { return sum(expand(x[0], {3, 5}), {0}); }},
      {"sum mean max of a scalar over dim 0", {{}}, [](V x) { return sum(x[0], {0}) * mean(x[0], {-1}, true) + max(x[0], {0}); }},
      {"mean all", {{3, 4}}, [](V x) { return mean(x[0]); }},
      {"mean dim keepdim", {{2, 3, 4}}, [](V x) { return mean(x[0], {-1}, true); }},
      {"max dim", {{3, 5}}, [](V x) { return max(x[0], {1}); }},
      {"max dims keepdim", {{2, 3, 4}}, [](V x) { return max(x[0], {0, 2}, true); }},
      {"max all nc", {{4, 3}}, [](V x) { return max(T(x[0])); }},
      // softmax
      {"softmax last", {{3, 5}}, [](V x) { return softmax(x[0] * 2.0, -1); }},
      {"softmax dim0", {{3, 5}}, [](V x) { return softmax(x[0], 0); }},
      {"softmax middle 3d", {{2, 3, 4}}, [](V x) { return softmax(x[0], 1); }},
      {"softmax nc", {{5, 3}}, [](V x) { return softmax(T(x[0]), 1); }},
      {"log_softmax last", {{3, 5}}, [](V x) { return log_softmax(x[0] * 2.0, -1); }},
      {"log_softmax nc", {{5, 3}}, [](V x) { return log_softmax(T(x[0]), 0); }},
      // masking
      {"masked_fill causal softmax", {{4, 4}},
       [](V x) { return softmax(masked_fill(x[0], causal_mask(4), -1e30), -1); }},
      {"masked_fill broadcast mask", {{2, 3, 3}}, [](V x) { return masked_fill(x[0], causal_mask(3), 0.5); }},
      // losses
      {"cross_entropy", {{5, 6}}, [tgt](V x) { return cross_entropy(x[0] * 2.0, tgt); }},
      {"cross_entropy ignore_index", {{5, 6}}, [tgt_ign](V x) { return cross_entropy(x[0], tgt_ign); }},
      {"cross_entropy 3d", {{2, 3, 4}}, [tgt3](V x) { return cross_entropy(x[0], tgt3); }},
      {"cross_entropy nc", {{6, 5}}, [tgt](V x) { return cross_entropy(T(x[0]), tgt); }},
      {"mse_loss", {{3, 4}, {3, 4}}, [](V x) { return mse_loss(x[0], x[1]); }},
      {"mse_loss nc", {{4, 3}, {3, 4}}, [](V x) { return mse_loss(T(x[0]), x[1]); }},
      // dropout: a generator seeded inside f gives the same mask on every call
      {"dropout train", {{4, 5}}, [](V x) {
         Generator g(11);
         return dropout(x[0], 0.3, true, &g);
       }},
      {"dropout nc", {{5, 4}}, [](V x) {
         Generator g(12);
         return dropout(T(x[0]), 0.5, true, &g);
       }},
      {"dropout eval", {{4, 5}}, [](V x) { return dropout(x[0], 0.3, false); }},
      // composites: gradients of ops used together, as layers will use them
      {"attention composite", {{3, 2}, {3, 2}, {3, 2}}, [](V x) {
         Tensor a = softmax(matmul(x[0], T(x[1])) / std::sqrt(2.0), -1);
         return matmul(a, x[2]);
       }},
      {"layernorm composite", {{3, 5}}, [](V x) {
         Tensor mu = mean(x[0], {-1}, true);
         Tensor xc = x[0] - mu;
         Tensor var = mean(xc * xc, {-1}, true);
         return xc / sqrt(var + 1e-5);
       }},
  };
}

}  // namespace

TEST_CASE("gradcheck: every op matches central finite differences (float64)") {
  uint64_t seed = 1;
  for (const GradCase& c : cases()) {
    SUBCASE(c.name.c_str()) {
      std::vector<Tensor> in;
      for (const Shape& s : c.shapes) in.push_back(make_input(s, seed++, c.dom));
      auto r = autograd::gradcheck(c.f, in);
      INFO(c.name << ": max |error| " << r.max_abs_err << "\n" << r.report);
      CHECK(r.ok);
    }
  }
}

TEST_CASE("gradcheck catches a wrong gradient") {
  // An op whose backward is deliberately wrong (2x) must fail the check, or
  // the checker proves nothing.
  GradcheckFn bad = [](V x) {
    Tensor y = kernel::binary(kernel::Binary::mul, x[0], x[0]);
    return autograd::record("bad_square", y, {x[0]}, [xs = autograd::saved(x[0])](const Tensor& g, autograd::Grads& gi) {
      gi.set(0, kernel::binary_scalar(kernel::Binary::mul, kernel::binary(kernel::Binary::mul, g, xs), 4.0));
    });
  };
  auto r = autograd::gradcheck(bad, {make_input({3}, 7, Dom::any)});
  CHECK_FALSE(r.ok);
  CHECK(r.report.find("input 0") != std::string::npos);
}
