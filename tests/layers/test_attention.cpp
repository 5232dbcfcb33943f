// tests/layers/test_attention.cpp: MultiHeadAttention: gradients, a head-by-
// head reference, grouped-query sharing, the lectures' causal-mask example
// and parameter counts, attention maps, the KV cache and bad input.
#include <cmath>

#include "layers/module_check.h"

using namespace heed;
using namespace heed::nn;
using test::check_module_grads;

using Ins = const std::vector<Tensor>&;

namespace {

void set_weight(const Tensor& w, const std::vector<double>& values) {
  autograd::NoGradGuard ng;
  kernel::copy_(w, Tensor::from_f64(values, w.shape()));
}

// Every parameter of m set from the deterministic test values (in [-0.7, 0.7]).
void det_params(Module& m, uint64_t seed) {
  autograd::NoGradGuard ng;
  for (auto& [n, p] : m.named_parameters()) kernel::copy_(p, test::det_tensor(p.shape(), seed++, -0.7, 0.7));
}

// Attention computed head by head from slices of the projection weights,
// without reshapes or grouped GEMMs: query head h reads key/value head
// h / (H / G). mask [T, S] or undefined.
Tensor reference(const MultiHeadAttention& m, const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                 const Tensor& mask) {
  const auto& o = m.options;
  const int64_t K = o.head_dim_, r = o.heads_ / o.kv_heads_;
  auto proj = [&](const Linear& l, const Tensor& x, int64_t head) {
    Tensor y = matmul(x, transpose(narrow(l.weight, 0, head * K, K), 0, 1));
    return l.bias.defined() ? y + narrow(l.bias, 0, head * K, K) : y;
  };
  std::vector<Tensor> outs;
  for (int64_t h = 0; h < o.heads_; ++h) {
    Tensor q = proj(*m.q_proj, q_in, h), k = proj(*m.k_proj, k_in, h / r), v = proj(*m.v_proj, v_in, h / r);
    Tensor s = matmul(q, transpose(k, 1, 2)) / std::sqrt(static_cast<double>(K));  // [N, T, S]
    if (mask.defined()) s = masked_fill(s, mask, -1e30);
    outs.push_back(matmul(softmax(s, -1), v));  // [N, T, K]
  }
  return m.out_proj->forward(concat(outs, -1));
}

}  // namespace

TEST_CASE("layers: MultiHeadAttention gradients match finite differences (float64)") {
  Generator g(2);
  SUBCASE("self") {
    MultiHeadAttention a(MultiHeadAttentionOptions(6, 2).generator(&g));
    check_module_grads(a, {test::det_tensor({2, 3, 6}, 1)}, [&](Ins in) { return a.forward(in[0]); });
  }
  SUBCASE("causal") {
    MultiHeadAttention a(MultiHeadAttentionOptions(6, 2).causal(true).generator(&g));
    check_module_grads(a, {test::det_tensor({2, 4, 6}, 2)}, [&](Ins in) { return a.forward(in[0]); });
  }
  SUBCASE("cross, S != T, kdim != d_model") {
    MultiHeadAttention a(MultiHeadAttentionOptions(6, 2).kdim(5).vdim(5).generator(&g));
    check_module_grads(a, {test::det_tensor({2, 3, 6}, 3), test::det_tensor({2, 4, 5}, 4)},
                       [&](Ins in) { return a.forward(in[0], in[1]); });
  }
  SUBCASE("cross, separate key and value inputs of different widths") {
    MultiHeadAttention a(MultiHeadAttentionOptions(4, 2).kdim(3).vdim(5).head_dim(3).generator(&g));
    check_module_grads(a, {test::det_tensor({1, 2, 4}, 5), test::det_tensor({1, 3, 3}, 6), test::det_tensor({1, 3, 5}, 7)},
                       [&](Ins in) { return a.forward(in[0], in[1], in[2]); });
  }
  SUBCASE("grouped-query, heads 4, kv_heads 2, causal") {
    MultiHeadAttention a(MultiHeadAttentionOptions(8, 4).kv_heads(2).causal(true).generator(&g));
    check_module_grads(a, {test::det_tensor({2, 3, 8}, 8)}, [&](Ins in) { return a.forward(in[0]); });
  }
  SUBCASE("with biases") {
    MultiHeadAttention a(MultiHeadAttentionOptions(6, 3).bias(true).causal(true).generator(&g));
    det_params(a, 10);
    check_module_grads(a, {test::det_tensor({2, 3, 6}, 9)}, [&](Ins in) { return a.forward(in[0]); });
  }
}

TEST_CASE("layers: MultiHeadAttention equals attention computed head by head") {
  struct Case {
    const char* name;
    MultiHeadAttentionOptions o;
    int64_t T, S;
  };
  for (const Case& c : {Case{"self", MultiHeadAttentionOptions(8, 2), 5, 5},
                        Case{"causal with biases", MultiHeadAttentionOptions(8, 4).causal(true).bias(true), 5, 5},
                        Case{"grouped-query", MultiHeadAttentionOptions(8, 4).kv_heads(2).causal(true), 6, 6},
                        Case{"multi-query, head_dim 3", MultiHeadAttentionOptions(8, 4).kv_heads(1).head_dim(3), 4, 4},
                        Case{"cross", MultiHeadAttentionOptions(8, 2).kdim(6).vdim(6).bias(true), 3, 7}}) {
    INFO(c.name);
    MultiHeadAttention a(c.o);
    det_params(a, 20);
    Tensor x = test::det_tensor({2, c.T, 8}, 1);
    Tensor kv = c.name == std::string("cross") ? test::det_tensor({2, c.S, 6}, 2) : x;
    Tensor y = c.name == std::string("cross") ? a.forward(x, kv) : a.forward(x);
    Tensor ref = reference(a, x, kv, kv, a.options.causal_ ? causal_mask(c.T) : Tensor());
    CHECK(y.shape() == Shape{2, c.T, 8});
    test::check_close(y, ref.to_vector<double>(), 1e-5);
  }
}

TEST_CASE("layers: grouped-query attention equals full attention with each KV head repeated per group") {
  Generator g(3);
  MultiHeadAttention gqa(MultiHeadAttentionOptions(8, 4).kv_heads(2).generator(&g));
  MultiHeadAttention full(MultiHeadAttentionOptions(8, 4).generator(&g));
  // head_dim 2: the full model's K/V rows for heads 0, 1, 2, 3 are the GQA
  // model's rows for KV heads 0, 0, 1, 1.
  auto repeat = [](const Tensor& w) {
    return concat({narrow(w, 0, 0, 2), narrow(w, 0, 0, 2), narrow(w, 0, 2, 2), narrow(w, 0, 2, 2)}, 0);
  };
  {
    autograd::NoGradGuard ng;
    kernel::copy_(full.q_proj->weight, gqa.q_proj->weight);
    kernel::copy_(full.out_proj->weight, gqa.out_proj->weight);
    kernel::copy_(full.k_proj->weight, repeat(gqa.k_proj->weight));
    kernel::copy_(full.v_proj->weight, repeat(gqa.v_proj->weight));
  }
  Tensor x = test::det_tensor({2, 5, 8}, 4);
  test::check_close(gqa.forward(x), full.forward(x).to_vector<double>(), 1e-6);
}

TEST_CASE("worked example 3 through MultiHeadAttention: the causal mask") {
  // One head, d_model = head_dim = 3, x = I_3. With q_proj = sqrt(3) I the
  // queries, once scaled by 1/sqrt(3), are I, so with k_proj = M the scores
  // Q K^T / sqrt(3) are M itself: the lecture's unmasked scores.
  MultiHeadAttention a(MultiHeadAttentionOptions(3, 1).causal(true));
  const double r3 = std::sqrt(3.0);
  set_weight(a.q_proj->weight, {r3, 0, 0, 0, r3, 0, 0, 0, r3});
  set_weight(a.k_proj->weight, {0.5, 1.2, 0.8, 0.3, 0.9, 1.1, 0.2, 0.7, 0.4});
  set_weight(a.v_proj->weight, {1, 0, 0, 0, 1, 0, 0, 0, 1});
  set_weight(a.out_proj->weight, {1, 0, 0, 0, 1, 0, 0, 0, 1});
  a.keep_attention(true);
  Tensor y = a.forward(Tensor::from({1, 0, 0, 0, 1, 0, 0, 0, 1}, {1, 3, 3}));
  const std::vector<double> expect{1, 0, 0, 0.3543, 0.6457, 0, 0.2584, 0.4260, 0.3156};
  CHECK(a.last_attention().shape() == Shape{1, 1, 3, 3});
  test::check_close(a.last_attention(), expect, 5e-5);
  test::check_close(y, expect, 5e-5);  // V = I and W_O = I: the output is A
}

TEST_CASE("layers: MultiHeadAttention parameter counts (lecture example 6) and names") {
  MultiHeadAttention a(512, 8);
  CHECK(a.num_parameters() == 1048576);
  std::vector<std::string> names;
  for (auto& [n, p] : a.named_parameters()) names.push_back(n);
  CHECK(names == std::vector<std::string>{"q_proj.weight", "k_proj.weight", "v_proj.weight", "out_proj.weight"});
  // The lecture's split: Q, K, V projections 3 * 512 * 512 = 786,432, W_O
  // 512 * 512 = 262,144; from the parameters themselves, by name.
  int64_t qkv = 0, out = 0;
  for (auto& [n, p] : a.named_parameters()) {
    if (n == "out_proj.weight") out += p.numel();
    if (n == "q_proj.weight" || n == "k_proj.weight" || n == "v_proj.weight") {
      CHECK(p.shape() == Shape{512, 512});
      qkv += p.numel();
    }
  }
  CHECK(qkv == 786432);
  CHECK(out == 262144);
  CHECK(a.options.head_dim_ == 64);
  // Grouped-query: K and V shrink to kv_heads * head_dim outputs.
  CHECK(MultiHeadAttention(MultiHeadAttentionOptions(512, 8).kv_heads(2)).num_parameters() ==
        2 * 512 * 512 + 2 * 512 * 128);
  CHECK(MultiHeadAttention(MultiHeadAttentionOptions(8, 2).bias(true)).num_parameters() == 4 * (64 + 8));
  CHECK(MultiHeadAttention(MultiHeadAttentionOptions(8, 2).kdim(3).vdim(5)).num_parameters() == 64 + 24 + 40 + 64);
}

TEST_CASE("layers: MultiHeadAttention keeps per-head maps [N, H, T, S] only when asked") {
  Generator g(4);
  MultiHeadAttention a(MultiHeadAttentionOptions(8, 4).kdim(6).vdim(6).generator(&g));
  Tensor x = test::det_tensor({2, 3, 8}, 1), kv = test::det_tensor({2, 5, 6}, 2);
  a.forward(x, kv);
  CHECK_FALSE(a.last_attention().defined());
  a.keep_attention(true);
  a.forward(x, kv);
  Tensor A = a.last_attention();
  REQUIRE(A.defined());
  CHECK(A.shape() == Shape{2, 4, 3, 5});
  CHECK_FALSE(A.requires_grad());
  for (double v : kernel::sum(A, {-1}).to_vector<double>()) CHECK(std::abs(v - 1.0) < 1e-5);

  MultiHeadAttention c(MultiHeadAttentionOptions(8, 2).causal(true).generator(&g));
  c.keep_attention(true);
  c.forward(test::det_tensor({2, 6, 8}, 3));
  Tensor C = c.last_attention();  // [2, 2, 6, 6]
  REQUIRE(C.shape() == Shape{2, 2, 6, 6});
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < 6; ++i) {
        double row = 0;
        for (int64_t j = 0; j < 6; ++j) {
          const double v = C.at({n, h, i, j});
          row += v;
          if (j > i) CHECK(v == 0.0);
          else CHECK(v > 0.0);
        }
        CHECK(std::abs(row - 1.0) < 1e-5);
      }
  c.keep_attention(false);
  CHECK_FALSE(c.last_attention().defined());
}

TEST_CASE("layers: MultiHeadAttention's KV cache gives forward(x) on the whole sequence, token by token or in chunks") {
  Generator g(5);
  for (int64_t kv_heads : {4, 2, 1}) {
    INFO("kv_heads " << kv_heads);
    MultiHeadAttention a(MultiHeadAttentionOptions(8, 4).kv_heads(kv_heads).causal(true).bias(true).generator(&g));
    det_params(a, 30);
    autograd::NoGradGuard ng;
    Tensor x = test::det_tensor({2, 7, 8}, 6);
    const std::vector<double> full = a.forward(x).to_vector<double>();
    for (const std::vector<int64_t>& chunks : {std::vector<int64_t>(7, 1), std::vector<int64_t>{3, 1, 2, 1},
                                               std::vector<int64_t>{7}}) {
      KVCache cache;
      std::vector<Tensor> outs;
      int64_t t0 = 0;
      for (int64_t t : chunks) {
        outs.push_back(a.forward_cached(narrow(x, 1, t0, t), cache));
        t0 += t;
        CHECK(cache.length() == t0);
      }
      CHECK(cache.k.shape() == Shape{2, kv_heads, 7, 2});
      test::check_close(concat(outs, 1), full, 1e-5);
    }
  }
}

TEST_CASE("layers: causal MultiHeadAttention runs under anomaly mode (masked scores stay finite)") {
  Generator g(6);
  MultiHeadAttention a(MultiHeadAttentionOptions(8, 2).causal(true).generator(&g));
  autograd::AnomalyGuard anomaly;
  Tensor y = a.forward(test::det_tensor({2, 5, 8}, 7));
  backward(sum(y));
  CHECK(a.q_proj->weight.grad().defined());
  KVCache cache;
  a.forward_cached(test::det_tensor({2, 3, 8}, 8), cache);
}

TEST_CASE("layers: MultiHeadAttention refuses bad configurations and inputs with its configuration and the shape") {
  MultiHeadAttention a(8, 2);
  test::check_error([&] { a.forward(Tensor::zeros({2, 3, 5})); },
                    {"MultiHeadAttention(d_model=8, heads=2, kv_heads=2, head_dim=4", "expected query [N, T, 8]",
                     "[2, 3, 5]"});
  test::check_error([&] { a.forward(Tensor::zeros({3, 8})); }, {"MultiHeadAttention", "[3, 8]"});
  test::check_error([&] { a.forward(Tensor::zeros({2, 3, 8}), Tensor::zeros({2, 4, 6})); },
                    {"expected key [N, S, 8]", "[2, 4, 6]"});
  test::check_error([&] { a.forward(Tensor::zeros({2, 3, 8}), Tensor::zeros({1, 4, 8})); },
                    {"[2, 3, 8]", "[1, 4, 8]", "batch"});
  test::check_error([] { MultiHeadAttention(10, 3); }, {"MultiHeadAttention", "d_model=10", "not divisible", "heads=3"});
  test::check_error([] { MultiHeadAttention(MultiHeadAttentionOptions(8, 4).kv_heads(3)); },
                    {"MultiHeadAttention", "heads=4", "not divisible", "kv_heads=3"});
  MultiHeadAttention c(MultiHeadAttentionOptions(8, 2).causal(true));
  test::check_error([&] { c.forward(Tensor::zeros({2, 3, 8}), Tensor::zeros({2, 4, 8})); },
                    {"causal", "T=3", "S=4"});
  KVCache cache;
  test::check_error([&] { a.forward_cached(Tensor::zeros({1, 2, 8}), cache); }, {"forward_cached", "causal=True"});
  c.forward_cached(Tensor::zeros({1, 2, 8}), cache);
  test::check_error([&] { c.forward_cached(Tensor::zeros({3, 1, 8}), cache); }, {"cache", "[1, 2, 2, 4]", "[3, 2, 2, 4]"});
  MultiHeadAttention x(MultiHeadAttentionOptions(8, 2).kdim(3).vdim(5));
  test::check_error([&] { x.forward(Tensor::zeros({1, 2, 8})); }, {"self-attention", "kdim == vdim == d_model"});
  test::check_error([&] { x.forward(Tensor::zeros({1, 2, 8}), Tensor::zeros({1, 2, 3})); }, {"kdim == vdim"});
}

TEST_CASE("layers: MultiHeadAttention's attention dropout: the fused path draws the plain path's masks; none in eval mode") {
  Generator g(6);
  for (bool causal : {false, true})
    for (int64_t kv_heads : {4, 2}) {
      INFO("causal=" << causal << " kv_heads=" << kv_heads);
      MultiHeadAttention a(MultiHeadAttentionOptions(8, 4).kv_heads(kv_heads).causal(causal).dropout(0.3).generator(&g));
      det_params(a, 10);
      Tensor x = test::det_tensor({2, 6, 8}, 1);
      // The same default-generator state for both paths: plain (keep_attention),
      // then fused.
      const Generator start = default_generator();
      auto run = [&](bool keep) {
        default_generator() = start;
        a.keep_attention(keep);
        a.zero_grad();
        Tensor xi = x.detach();
        xi.set_requires_grad(true);
        Tensor y = a.forward(xi);
        backward(sum(y * y));
        return std::vector<Tensor>{y, xi.grad(), a.q_proj->weight.grad(), a.v_proj->weight.grad()};
      };
      const auto plain = run(true);
      const uint64_t after_plain = default_generator().offset();
      const auto fused = run(false);
      CHECK(default_generator().offset() == after_plain);
      CHECK(after_plain == start.offset() + 2 * 4 * 6 * 6);
      for (size_t i = 0; i < plain.size(); ++i) CHECK(test::max_diff(fused[i], plain[i]) < 1e-5);
      // Dropout acted: the outputs of two draws differ, and eval mode draws none.
      Tensor again = a.forward(x);
      CHECK(test::max_diff(again, fused[0]) > 1e-3);
      a.eval();
      const uint64_t before_eval = default_generator().offset();
      Tensor e1 = a.forward(x), e2 = a.forward(x);
      CHECK(default_generator().offset() == before_eval);
      CHECK(test::max_diff(e1, e2) == 0.0);
      a.train();
    }
}
