// tests/layers/test_layers.cpp: Module bookkeeping, layer gradients (float64
// gradient checks), PyTorch-compatible initialisation and bad input.
#include <cmath>

#include "test_util.h"

using namespace heed;
using namespace heed::nn;

namespace {

// Gradient-checks module m (converted to float64) on input x: every
// parameter and the input itself are checked.
void check_module_grads(Module& m, const Shape& xshape, uint64_t seed = 5) {
  m.to(DType::f64);
  Tensor x = kernel::to_dtype(test::det_tensor(xshape, seed), DType::f64);
  x.set_requires_grad(true);
  std::vector<Tensor> inputs{x};
  for (auto& [n, p] : m.named_parameters()) inputs.push_back(p);
  auto r = autograd::gradcheck([&](const std::vector<Tensor>& in) { return m.forward(in[0]); }, inputs);
  INFO(m.type_name() << ": max |error| " << r.max_abs_err << "\n" << r.report);
  CHECK(r.ok);
}

}  // namespace

TEST_CASE("layers: Linear, Conv1d and SelfAttention gradients match finite differences (float64)") {
  Generator g(1);
  SUBCASE("Linear") {
    Linear l(LinearOptions(4, 3).generator(&g));
    check_module_grads(l, {2, 5, 4});
  }
  SUBCASE("Linear without bias") {
    Linear l(LinearOptions(4, 3).bias(false).generator(&g));
    check_module_grads(l, {3, 4});
  }
  SUBCASE("Conv1d padding") {
    Conv1d c(Conv1dOptions(3, 4, 5).padding(2).generator(&g));
    check_module_grads(c, {2, 3, 8});
  }
  SUBCASE("Conv1d stride padding dilation") {
    Conv1d c(Conv1dOptions(2, 3, 3).stride(2).padding(3).dilation(2).generator(&g));
    check_module_grads(c, {2, 2, 11});
  }
  SUBCASE("SelfAttention unscaled (the reference)") {
    SelfAttention a(SelfAttentionOptions(3, 4, 2).generator(&g));
    check_module_grads(a, {2, 3, 6});
  }
  SUBCASE("SelfAttention scaled") {
    SelfAttention a(SelfAttentionOptions(3, 2, 5).scaled(true).generator(&g));
    check_module_grads(a, {2, 3, 5});
  }
  SUBCASE("SelfAttention key width = input width (the toy model's; scores through Wq^T Wk)") {
    SelfAttention a(SelfAttentionOptions(3, 4, 3).generator(&g));
    check_module_grads(a, {2, 3, 6});
  }
  SUBCASE("Sequential conv-relu-attention-conv") {
    Sequential s{std::make_shared<Conv1d>(Conv1dOptions(2, 4, 3).padding(1).generator(&g)), std::make_shared<GELU>(),
                 std::make_shared<SelfAttention>(SelfAttentionOptions(4, 4, 3).generator(&g)),
                 std::make_shared<Conv1d>(Conv1dOptions(4, 1, 3).padding(1).generator(&g))};
    check_module_grads(s, {2, 2, 7});
  }
}

TEST_CASE("layers: parameters are registered by dotted name in order") {
  Generator g(0);
  Sequential s{std::make_shared<Conv1d>(Conv1dOptions(1, 4, 3).generator(&g)), std::make_shared<ReLU>(),
               std::make_shared<SelfAttention>(SelfAttentionOptions(4, 4, 2).generator(&g))};
  std::vector<std::string> names;
  for (auto& [n, p] : s.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "2.conv_q.weight", "2.conv_k.weight",
                                          "2.conv_v.weight"});
  CHECK(s.num_parameters() == 4 * 1 * 3 + 4 + 3 * 0 + 2 * 4 + 2 * 4 + 4 * 4);
  for (auto& p : s.parameters()) CHECK(p.requires_grad());
}

TEST_CASE("layers: summary prints like PyTorch and ends with nb_parameters") {
  Generator g(0);
  Sequential s{std::make_shared<Conv1d>(Conv1dOptions(1, 4, 5).padding(2).generator(&g)), std::make_shared<ReLU>(),
               std::make_shared<SelfAttention>(SelfAttentionOptions(4, 4, 4).generator(&g))};
  CHECK(s.summary() ==
        "Sequential(\n"
        "  (0): Conv1d(1, 4, kernel_size=(5,), stride=(1,), padding=(2,))\n"
        "  (1): ReLU()\n"
        "  (2): SelfAttention(in_channels=4, out_channels=4, key_channels=4, scaled=False\n"
        "    (conv_q): Conv1d(4, 4, kernel_size=(1,), stride=(1,), bias=False)\n"
        "    (conv_k): Conv1d(4, 4, kernel_size=(1,), stride=(1,), bias=False)\n"
        "    (conv_v): Conv1d(4, 4, kernel_size=(1,), stride=(1,), bias=False)\n"
        "  )\n"
        ")\n"
        "nb_parameters 72");
}

TEST_CASE("layers: default initialisation is PyTorch's kaiming_uniform(a=sqrt(5)) and bias U(+-1/sqrt(fan_in))") {
  Generator g(42);
  Conv1d c(Conv1dOptions(64, 64, 5).generator(&g));
  double bound = 1.0 / std::sqrt(64.0 * 5.0);
  auto w = c.weight.to_vector<double>();
  double sq = 0, mx = 0;
  for (double v : w) {
    sq += v * v;
    mx = std::max(mx, std::abs(v));
  }
  CHECK(mx <= bound);
  CHECK(mx > 0.99 * bound);  // 20,480 draws reach the edge
  // U(-b, b) has sd b / sqrt(3); 20,480 samples pin it within ~1%.
  CHECK(std::abs(std::sqrt(sq / static_cast<double>(w.size())) - bound / std::sqrt(3.0)) < 0.02 * bound);
  for (double v : c.bias.to_vector<double>()) CHECK(std::abs(v) <= bound);
  Linear l(LinearOptions(10, 3).generator(&g));
  for (double v : l.weight.to_vector<double>()) CHECK(std::abs(v) <= 1.0 / std::sqrt(10.0));
}

TEST_CASE("layers: the same generator seed gives the same model") {
  Generator a(7), b(7);
  Conv1d c1(Conv1dOptions(3, 4, 5).generator(&a)), c2(Conv1dOptions(3, 4, 5).generator(&b));
  CHECK(c1.weight.to_vector<float>() == c2.weight.to_vector<float>());
  CHECK(c1.bias.to_vector<float>() == c2.bias.to_vector<float>());
}


TEST_CASE("layers: Module::to converts to float64 and back, and refuses int64 without touching a weight") {
  Generator g(4);
  Linear l(LinearOptions(3, 2).generator(&g));
  const std::vector<float> w = l.weight.to_vector<float>();
  test::check_error([&] { l.to(DType::i64); }, {"Module::to", "floating-point", "int64"});
  CHECK(l.weight.dtype() == DType::f32);
  CHECK(l.weight.requires_grad());
  CHECK(l.weight.to_vector<float>() == w);
  l.to(DType::f64);
  CHECK(l.weight.dtype() == DType::f64);
  l.to(DType::f32);
  CHECK(l.weight.to_vector<float>() == w);  // float32 -> float64 -> float32 is exact
}
TEST_CASE("layers: a wrong input is refused with the layer's configuration and the shape") {
  Generator g(0);
  Conv1d c(Conv1dOptions(1, 64, 5).padding(2).generator(&g));
  test::check_error([&] { c.forward(Tensor::zeros({2, 3, 100})); }, {"Conv1d(1, 64", "expected input [N, 1, T]", "[2, 3, 100]"});
  test::check_error([&] { c.forward(Tensor::zeros({1, 100})); }, {"Conv1d", "[1, 100]"});
  SelfAttention a(SelfAttentionOptions(8, 8, 8).generator(&g));
  test::check_error([&] { a.forward(Tensor::zeros({2, 4, 10})); }, {"SelfAttention", "[N, 8, T]", "[2, 4, 10]"});
  Linear l(LinearOptions(4, 2).generator(&g));
  test::check_error([&] { l.forward(Tensor::zeros({3, 5})); }, {"Linear(4, 2)", "[.., 4]", "[3, 5]"});
  test::check_error([] { Conv1d(Conv1dOptions(1, 0, 5)); }, {"Conv1d", "out=0"});
}

TEST_CASE("layers: state_dict round-trips and load_state_dict refuses mismatches without changing anything") {
  Generator g1(1), g2(2);
  Sequential a{std::make_shared<Conv1d>(Conv1dOptions(2, 3, 3).generator(&g1)),
               std::make_shared<SelfAttention>(SelfAttentionOptions(3, 3, 2).generator(&g1))};
  Sequential b{std::make_shared<Conv1d>(Conv1dOptions(2, 3, 3).generator(&g2)),
               std::make_shared<SelfAttention>(SelfAttentionOptions(3, 3, 2).generator(&g2))};
  auto before = b.state_dict().at("0.weight").to_vector<float>();

  auto sd = a.state_dict();
  sd.erase("1.conv_k.weight");
  test::check_error([&] { b.load_state_dict(sd); }, {"missing", "1.conv_k.weight", "[2, 3, 1]"});
  sd = a.state_dict();
  sd["extra.weight"] = Tensor::zeros({1});
  test::check_error([&] { b.load_state_dict(sd); }, {"unexpected", "extra.weight"});
  sd = a.state_dict();
  sd["0.bias"] = Tensor::zeros({4});
  test::check_error([&] { b.load_state_dict(sd); }, {"0.bias", "[4]", "[3]"});
  CHECK(b.state_dict().at("0.weight").to_vector<float>() == before);  // nothing half-loaded

  b.load_state_dict(a.state_dict());
  for (auto& [n, t] : a.state_dict()) CHECK(b.state_dict().at(n).to_vector<float>() == t.to_vector<float>());
  Tensor x = test::det_tensor({2, 2, 6}, 3);
  CHECK(a.forward(x).to_vector<float>() == b.forward(x).to_vector<float>());
}

TEST_CASE("layers: SelfAttention keeps its attention map only when asked") {
  Generator g(3);
  SelfAttention a(SelfAttentionOptions(4, 4, 4).generator(&g));
  Tensor x = test::det_tensor({2, 4, 7}, 1);
  a.forward(x);
  CHECK_FALSE(a.last_attention().defined());
  a.keep_attention(true);
  a.forward(x);
  Tensor A = a.last_attention();
  REQUIRE(A.defined());
  CHECK(A.shape() == Shape{2, 7, 7});
  CHECK_FALSE(A.requires_grad());
  Tensor rows = kernel::sum(A, {-1});
  for (double v : rows.to_vector<double>()) CHECK(std::abs(v - 1.0) < 1e-5);
}

TEST_CASE("layers: SelfAttention computes the scores as x^T (Wq^T Wk) x when key >= in: the same outputs and gradients "
          "as the three projections") {
  for (int64_t key : {4, 6}) {
    INFO("in 4, key " << key);
    Generator g(5);
    SelfAttention a(SelfAttentionOptions(4, 3, key).generator(&g));
    a.to(DType::f64);
    Tensor x = kernel::to_dtype(test::det_tensor({2, 4, 9}, 2), DType::f64);
    x.set_requires_grad(true);
    std::vector<std::vector<double>> res[2];
    for (bool keep : {false, true}) {  // keep: the three projections and an explicit map
      a.keep_attention(keep);
      a.zero_grad();
      x.zero_grad();
      Tensor y = a.forward(x);
      backward(sum(y * test::det_tensor(y.shape(), 3, -1, 1, DType::f64)));
      auto& r = res[keep];
      r.push_back(y.to_vector<double>());
      r.push_back(x.grad().to_vector<double>());
      for (auto& p : a.parameters()) r.push_back(p.grad().to_vector<double>());
    }
    REQUIRE(res[0].size() == res[1].size());
    for (size_t i = 0; i < res[0].size(); ++i) {
      REQUIRE(res[0][i].size() == res[1][i].size());
      for (size_t j = 0; j < res[0][i].size(); ++j) CHECK(std::abs(res[0][i][j] - res[1][i][j]) < 1e-12);
    }
  }
}

// ---- the lectures' worked examples through the layer itself ----
namespace {
// Sets a 1x1 convolution's weight [O, C, 1] from a row-major O x C matrix.
void set_proj(Conv1d& c, const std::vector<float>& m) {
  autograd::NoGradGuard ng;
  kernel::copy_(c.weight, Tensor::from(m, c.weight.shape()));
}
}  // namespace

TEST_CASE("worked example 1 through SelfAttention: scaled dot-product with given Q, K, V") {
  // Channels 0-1 carry Q^T, 2-3 K^T, 4-5 V^T; the projections select them.
  SelfAttention a(SelfAttentionOptions(6, 2, 2).scaled(true));
  set_proj(*a.conv_q, {1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0});
  set_proj(*a.conv_k, {0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0});
  set_proj(*a.conv_v, {0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1});
  // positions (columns): Q = [[1,0],[0,1],[1,1]], K = [[1,1],[0,1],[1,0]], V = [[1,2],[3,4],[5,6]]
  Tensor x = Tensor::from({1, 0, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 3, 5, 2, 4, 6}, {1, 6, 3});
  a.keep_attention(true);
  Tensor y = a.forward(x);  // [1, 2, 3] = (A V)^T
  test::check_close(a.last_attention(), {0.4011, 0.1978, 0.4011, 0.4011, 0.4011, 0.1978, 0.5035, 0.2483, 0.2483},
                    5e-5);
  test::check_close(transpose(y, 1, 2), {3.0000, 4.0000, 2.5933, 3.5933, 2.4895, 3.4895}, 5e-5);
}

TEST_CASE("worked example 2 through SelfAttention: identity projections") {
  SelfAttention a(SelfAttentionOptions(2, 2, 2).scaled(true));
  for (auto* c : {a.conv_q.get(), a.conv_k.get(), a.conv_v.get()}) set_proj(*c, {1, 0, 0, 1});
  Tensor x = Tensor::from({1, 0, 1, 0, 1, 1}, {1, 2, 3});  // X^T, X = [[1,0],[0,1],[1,1]]
  a.keep_attention(true);
  Tensor y = a.forward(x);
  test::check_close(a.last_attention(), {0.4011, 0.1978, 0.4011, 0.1978, 0.4011, 0.4011, 0.2483, 0.2483, 0.5035},
                    5e-5);
  test::check_close(transpose(y, 1, 2), {0.8022, 0.5989, 0.5989, 0.8022, 0.7517, 0.7517}, 5e-5);
}

TEST_CASE("worked example 5 through SelfAttention: W_K = c S copies the previous token") {
  // Row-vector convention of the lectures: K = X W_K. The layer computes
  // K = Wk x with x = X^T, so Wk = W_K^T = c S^T (ones below the diagonal).
  const float c = 30.0f;
  SelfAttention a(SelfAttentionOptions(4, 4, 4));  // unscaled
  std::vector<float> eye(16, 0), wk(16, 0);
  for (int i = 0; i < 4; ++i) eye[i * 4 + i] = 1;
  for (int i = 1; i < 4; ++i) wk[i * 4 + (i - 1)] = c;
  set_proj(*a.conv_q, eye);
  set_proj(*a.conv_v, eye);
  set_proj(*a.conv_k, wk);
  Tensor x = Tensor::from(eye, {1, 4, 4});  // X = I_4
  Tensor out = transpose(a.forward(x), 1, 2);  // rows = positions
  test::check_close(out, {0.25, 0.25, 0.25, 0.25, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0}, 1e-6);
}

TEST_CASE("layers: Conv1dReLU equals Conv1d then ReLU, values and gradients bit for bit; Sequential fuses nothing") {
  for (int64_t in : {1, 3}) {  // one input channel: channels-last activations from the first layer on
    INFO("in_channels=" << in);
    // The same seed: Conv1dReLU draws its parameters as Conv1d does.
    Generator gf(4), gp(4);
    auto opts = [in](int64_t layer, Generator* g) {
      return layer == 0 ? Conv1dOptions(in, 16, 5).padding(2).generator(g)
             : layer == 1 ? Conv1dOptions(16, 16, 5).padding(2).generator(g)
                          : Conv1dOptions(16, 1, 5).padding(2).generator(g);
    };
    Sequential fused{std::make_shared<Conv1dReLU>(opts(0, &gf)), std::make_shared<Conv1dReLU>(opts(1, &gf)),
                     std::make_shared<Conv1dReLU>(opts(2, &gf))};
    Sequential plain;
    for (int64_t layer = 0; layer < 3; ++layer) {
      plain.push_back(std::to_string(2 * layer), std::make_shared<Conv1d>(opts(layer, &gp)));
      plain.push_back(std::to_string(2 * layer + 1), std::make_shared<ReLU>());
    }
    Tensor x = test::det_tensor({4, in, 30}, 7);
    auto run = [&](Sequential& s) {
      Tensor y = s.forward(x);
      backward(sum(y * y));
      std::vector<std::vector<float>> r{y.to_vector<float>()};
      for (auto& p : s.parameters()) r.push_back(p.grad().to_vector<float>());
      return std::make_pair(y, r);
    };
    auto [yf, rf] = run(fused);
    auto [yp, rp] = run(plain);
    REQUIRE(rf.size() == rp.size());
    for (size_t i = 0; i < rf.size(); ++i) CHECK(rf[i] == rp[i]);
    CHECK(yf.grad_fn()->name == "conv1d_relu");  // after a one-output-channel conv too
    CHECK(yp.grad_fn()->name == "relu");         // Sequential runs each child as it is
  }
}

TEST_CASE("layers: Conv1dReLU is a Conv1d by its parameters: names, initial values, state; its own summary line") {
  Generator a(9), b(9);
  Conv1dReLU f(Conv1dOptions(3, 4, 5).padding(2).generator(&a));
  Conv1d c(Conv1dOptions(3, 4, 5).padding(2).generator(&b));
  std::vector<std::string> names;
  for (auto& [n, p] : f.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"weight", "bias"});
  CHECK(f.weight.to_vector<float>() == c.weight.to_vector<float>());
  CHECK(f.bias.to_vector<float>() == c.bias.to_vector<float>());
  Generator g(10);
  Conv1d other(Conv1dOptions(3, 4, 5).padding(2).generator(&g));
  f.load_state_dict(other.state_dict());
  CHECK(f.weight.to_vector<float>() == other.weight.to_vector<float>());
  CHECK(f.summary() == "Conv1dReLU(3, 4, kernel_size=(5,), stride=(1,), padding=(2,))\nnb_parameters 64");
  test::check_error([&] { f.forward(Tensor::zeros({2, 2, 10})); },
                    {"Conv1dReLU(3, 4", "expected input [N, 3, T]", "[2, 2, 10]"});
  test::check_error([] { Conv1dReLU(Conv1dOptions(3, 4, 5).stride(0)); }, {"Conv1dReLU: invalid stride 0"});
  check_module_grads(f, {2, 3, 9});
}

TEST_CASE("layers: the activation modules are activation(x, a) under PyTorch's names") {
  struct Row {
    std::shared_ptr<Module> m;
    Activation a;
    std::string summary;
  };
  std::vector<Row> rows = {
      {std::make_shared<ReLU>(), Activation::relu, "ReLU()"},
      {std::make_shared<GELU>(), Activation::gelu, "GELU()"},
      {std::make_shared<GELU>(GeluApprox::tanh), Activation::gelu_tanh, "GELU(approximate='tanh')"},
      {std::make_shared<Tanh>(), Activation::tanh, "Tanh()"},
      {std::make_shared<Sigmoid>(), Activation::sigmoid, "Sigmoid()"},
      {std::make_shared<SiLU>(), Activation::silu, "SiLU()"},
  };
  REQUIRE(rows.size() == std::size(kActivations));  // one named module per activation
  Tensor x = test::det_tensor({3, 8}, 5, -3.0, 3.0);
  for (const Row& r : rows) {
    INFO(r.summary);
    CHECK(r.m->summary() == r.summary + "\nnb_parameters 0");
    CHECK(std::dynamic_pointer_cast<ActivationLayer>(r.m)->kind == r.a);
    CHECK(r.m->forward(x).to_vector<float>() == activation(x, r.a).to_vector<float>());
    // The generic module prints as its named one.
    CHECK(ActivationLayer(r.a).summary() == r.m->summary());
  }
}

TEST_CASE("layers: Sequential children may be named; a name is looked up, refused twice, and a missing one is named") {
  Generator g(0);
  Sequential s{{"0", std::make_shared<Conv1dReLU>(Conv1dOptions(1, 4, 3).padding(1).generator(&g))},
               {"2", std::make_shared<SiLU>()},
               {"head", std::make_shared<Conv1d>(Conv1dOptions(4, 1, 3).padding(1).generator(&g))}};
  std::vector<std::string> names;
  for (auto& [n, p] : s.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "head.weight", "head.bias"});
  CHECK(s.size() == 3);
  CHECK(s["2"] == s[1]);
  CHECK(s["head"]->type_name() == "Conv1d");
  CHECK(s.summary() ==
        "Sequential(\n"
        "  (0): Conv1dReLU(1, 4, kernel_size=(3,), stride=(1,), padding=(1,))\n"
        "  (2): SiLU()\n"
        "  (head): Conv1d(4, 1, kernel_size=(3,), stride=(1,), padding=(1,))\n"
        ")\n"
        "nb_parameters 29");
  Tensor x = test::det_tensor({2, 1, 6}, 4);
  Tensor y = s.forward(x);
  Tensor h = s[2]->forward(silu(s[0]->forward(x)));
  CHECK(y.to_vector<float>() == h.to_vector<float>());
  test::check_error([&] { s["1"]; }, {"no child named '1'", "'0', '2', 'head'"});
  test::check_error([&] { s.push_back("2", std::make_shared<ReLU>()); }, {"'2' already registered"});
  test::check_error([&] { s.push_back(nullptr); }, {"null module"});
}
