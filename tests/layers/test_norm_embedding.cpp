// tests/layers/test_norm_embedding.cpp: LayerNorm, Embedding, Dropout and the
// positional encoding layers.
#include <cmath>

#include "layers/module_check.h"

using namespace heed;
using namespace heed::nn;
using test::check_module_grads;

using Ins = const std::vector<Tensor>&;

TEST_CASE("layers: LayerNorm, Embedding and positional layers' gradients match finite differences (float64)") {
  Generator g(1);
  SUBCASE("LayerNorm") {
    LayerNorm ln(6);
    {
      // Away from the initial 1 / 0 so a swapped weight and bias would show.
      autograd::NoGradGuard ng;
      kernel::copy_(ln.weight, test::det_tensor({6}, 7, 0.5, 1.5));
      kernel::copy_(ln.bias, test::det_tensor({6}, 8));
    }
    check_module_grads(ln, {test::det_tensor({2, 3, 6}, 1)}, [&](Ins in) { return ln.forward(in[0]); });
  }
  SUBCASE("Embedding (weight)") {
    Embedding e(EmbeddingOptions(5, 3).generator(&g));
    Tensor ids = Tensor::from_i64({4, 0, 4, 2, 1, 4}, {2, 3});
    check_module_grads(e, {ids}, [&](Ins in) { return e.forward(in[0]); });
  }
  SUBCASE("SinusoidalPositionalEncoding (input)") {
    SinusoidalPositionalEncoding pe(6, 4);
    check_module_grads(pe, {test::det_tensor({2, 3, 4}, 2)}, [&](Ins in) { return pe.forward(in[0], 2); });
  }
  SUBCASE("LearnedPositionalEmbedding (input and weight)") {
    LearnedPositionalEmbedding pe(6, 4, &g);
    check_module_grads(pe, {test::det_tensor({2, 3, 4}, 3)}, [&](Ins in) { return pe.forward(in[0], 1); });
  }
}

TEST_CASE("layers: LayerNorm starts as weight 1, bias 0 under PyTorch's names and prints like PyTorch") {
  LayerNorm ln(LayerNormOptions(4).eps(1e-6));
  auto params = ln.named_parameters();
  REQUIRE(params.size() == 2);
  CHECK(params[0].first == "weight");
  CHECK(params[1].first == "bias");
  CHECK(ln.weight.to_vector<double>() == std::vector<double>(4, 1.0));
  CHECK(ln.bias.to_vector<double>() == std::vector<double>(4, 0.0));
  CHECK(LayerNorm(8).summary() == "LayerNorm((8,), eps=1e-05, elementwise_affine=True)\nnb_parameters 16");
  Tensor y = ln.forward(test::det_tensor({3, 4}, 5));
  for (double m : kernel::mean(y, {-1}).to_vector<double>()) CHECK(std::abs(m) < 1e-6);
}

TEST_CASE("layers: Embedding is initialised N(0, 1) like PyTorch and looks rows up") {
  Generator g(3);
  Embedding e(EmbeddingOptions(100, 50).generator(&g));
  CHECK(e.weight.shape() == Shape{100, 50});
  CHECK(e.named_parameters().at(0).first == "weight");
  auto w = e.weight.to_vector<double>();
  double s = 0, sq = 0;
  for (double v : w) {
    s += v;
    sq += v * v;
  }
  const double n = static_cast<double>(w.size()), m = s / n, sd = std::sqrt(sq / n - m * m);
  CHECK(std::abs(m) < 0.05);  // 5,000 draws: the mean's sd is 0.014
  CHECK(std::abs(sd - 1.0) < 0.05);
  Tensor y = e.forward(Tensor::from_i64({7, 0}, {2}));
  CHECK(y.shape() == Shape{2, 50});
  CHECK(narrow(y, 0, 0, 1).to_vector<float>() == narrow(e.weight, 0, 7, 1).to_vector<float>());
  test::check_error([&] { e.forward(Tensor::from_i64({100}, {1})); }, {"embedding", "100", "0..99"});
  test::check_error([&] { e.forward(Tensor::zeros({2})); }, {"Embedding(100, 50)", "int64", "float32"});
}

TEST_CASE("layers: Dropout drops and rescales while training and is the identity in eval mode") {
  Generator g(4);
  Dropout d(0.25, &g);
  Tensor x = Tensor::ones({4000});
  auto v = d.forward(x).to_vector<double>();
  int64_t zeros = 0;
  for (double e : v) {
    if (e == 0) ++zeros;
    else CHECK(std::abs(e - 1.0 / 0.75) < 1e-6);
  }
  CHECK(std::abs(static_cast<double>(zeros) / 4000.0 - 0.25) < 0.03);  // sd 0.007
  d.eval();
  CHECK(d.forward(x).same(x));
  CHECK(d.summary() == "Dropout(p=0.25, inplace=False)\nnb_parameters 0");
  test::check_error([] { Dropout(1.5); }, {"Dropout", "1.5"});
}

TEST_CASE("layers: SinusoidalPositionalEncoding adds the table, kept as a buffer, from any start") {
  SinusoidalPositionalEncoding pe(10, 6);
  CHECK(pe.num_parameters() == 0);
  REQUIRE(pe.named_buffers().size() == 1);
  CHECK(pe.named_buffers()[0].first == "pe");
  CHECK(pe.state_dict().count("pe") == 1);
  Tensor x = test::det_tensor({2, 4, 6}, 6);
  Tensor table = sinusoidal_encoding(10, 6);
  for (int64_t start : {0, 3, 6}) {
    Tensor d = pe.forward(x, start) - x;  // [2, 4, 6]
    for (int64_t n = 0; n < 2; ++n)
      test::check_close(squeeze(narrow(d, 0, n, 1), 0), narrow(table, 0, start, 4).to_vector<double>(), 1e-6);
  }
  test::check_error([&] { pe.forward(test::det_tensor({1, 11, 6}, 1)); },
                    {"SinusoidalPositionalEncoding", "T=11", "10 positions"});
  test::check_error([&] { pe.forward(x, 7); }, {"SinusoidalPositionalEncoding", "7..10", "10 positions"});
  test::check_error([&] { pe.forward(test::det_tensor({1, 4, 5}, 1)); }, {"[N, T, 6]", "[1, 4, 5]"});
}

TEST_CASE("layers: LearnedPositionalEmbedding adds a learned row per position and names T when too long") {
  Generator g(5);
  LearnedPositionalEmbedding pe(8, 3, &g);
  REQUIRE(pe.named_parameters().size() == 1);
  CHECK(pe.named_parameters()[0].first == "weight");
  CHECK(pe.weight.shape() == Shape{8, 3});
  Tensor x = Tensor::zeros({1, 5, 3});
  CHECK(pe.forward(x).to_vector<float>() == narrow(pe.weight, 0, 0, 5).to_vector<float>());
  CHECK(pe.forward(x, 3).to_vector<float>() == narrow(pe.weight, 0, 3, 5).to_vector<float>());
  test::check_error([&] { pe.forward(Tensor::zeros({2, 9, 3})); },
                    {"LearnedPositionalEmbedding(max_len=8, dim=3)", "T=9", "8 positions"});
}
