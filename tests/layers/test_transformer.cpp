// tests/layers/test_transformer.cpp: FeedForward, TransformerBlock and GPT:
// gradients, structure, the lectures' parameter counts, cached generation
// and bad input.
#include <cmath>

#include "layers/module_check.h"

using namespace heed;
using namespace heed::nn;
using test::check_module_grads;

using Ins = const std::vector<Tensor>&;

namespace {

std::vector<std::string> names_of(const Module& m) {
  std::vector<std::string> out;
  for (auto& [n, p] : m.named_parameters()) out.push_back(n);
  return out;
}

// The tiny GPT of the gradient checks.
GPTOptions tiny_gpt() { return GPTOptions(7, 8, 2, 2, 5); }

Tensor tiny_ids() { return Tensor::from_i64({3, 0, 6, 2, 2, 5, 1, 4}, {2, 4}); }

}  // namespace

TEST_CASE("layers: FeedForward, TransformerBlock and GPT gradients match finite differences (float64)") {
  Generator g(6);
  SUBCASE("FeedForward gelu") {
    FeedForward f(FeedForwardOptions(4).hidden(6).generator(&g));
    check_module_grads(f, {test::det_tensor({2, 3, 4}, 1)}, [&](Ins in) { return f.forward(in[0]); });
  }
  SUBCASE("FeedForward relu without bias") {
    FeedForward f(FeedForwardOptions(4).activation(Activation::relu).bias(false).generator(&g));
    check_module_grads(f, {test::det_tensor({3, 4}, 2)}, [&](Ins in) { return f.forward(in[0]); });
  }
  SUBCASE("TransformerBlock pre-LN, causal") {
    TransformerBlock b(TransformerBlockOptions(8, 2).ffn_hidden(12).causal(true).generator(&g));
    check_module_grads(b, {test::det_tensor({2, 3, 8}, 3)}, [&](Ins in) { return b.forward(in[0]); });
  }
  SUBCASE("TransformerBlock post-LN, grouped-query, biases, gelu_tanh") {
    TransformerBlock b(TransformerBlockOptions(8, 4)
                           .pre_ln(false)
                           .kv_heads(2)
                           .ffn_hidden(12)
                           .attn_bias(true)
                           .activation(Activation::gelu_tanh)
                           .generator(&g));
    check_module_grads(b, {test::det_tensor({2, 3, 8}, 4)}, [&](Ins in) { return b.forward(in[0]); });
  }
  SUBCASE("GPT vocab 7, d 8, 2 layers, 2 heads, context 5, every parameter") {
    GPT m(tiny_gpt().generator(&g));
    check_module_grads(m, {tiny_ids()}, [&](Ins in) { return m.forward(in[0]); });
  }
  SUBCASE("GPT tied weights, sinusoidal positions") {
    GPT m(tiny_gpt().tie_weights(true).learned_positions(false).ffn_hidden(8).generator(&g));
    check_module_grads(m, {tiny_ids()}, [&](Ins in) { return m.forward(in[0]); });
  }
}

TEST_CASE("layers: TransformerBlock computes the pre-LN and post-LN residual formulas") {
  Generator g(7);
  Tensor x = test::det_tensor({2, 4, 8}, 5);
  for (bool pre : {true, false}) {
    INFO("pre_ln " << pre);
    TransformerBlock b(TransformerBlockOptions(8, 2).pre_ln(pre).causal(true).generator(&g));
    {
      autograd::NoGradGuard ng;  // LayerNorms away from 1 / 0
      for (auto* ln : {b.ln1.get(), b.ln2.get()}) {
        kernel::copy_(ln->weight, test::det_tensor({8}, 11, 0.5, 1.5));
        kernel::copy_(ln->bias, test::det_tensor({8}, 12));
      }
    }
    Tensor expect;
    if (pre) {
      Tensor h = x + b.attn->forward(b.ln1->forward(x));
      expect = h + b.ffn->forward(b.ln2->forward(h));
    } else {
      Tensor h = b.ln1->forward(x + b.attn->forward(x));
      expect = b.ln2->forward(h + b.ffn->forward(h));
    }
    test::check_close(b.forward(x), expect.to_vector<double>(), 1e-6);
  }
}

TEST_CASE("layers: transformer parameter counts match the lectures (example 6)") {
  // d = 512, 8 heads without biases, FFN 512 -> 2048 -> 512 with biases, two LayerNorms.
  auto opts = TransformerBlockOptions(512, 8).ffn_hidden(2048);
  Sequential six;
  for (int i = 0; i < 6; ++i) six.push_back(std::make_shared<TransformerBlock>(opts));
  const auto& b = dynamic_cast<const TransformerBlock&>(*six[0]);
  CHECK(b.attn->num_parameters() == 1048576);
  CHECK(b.ffn->num_parameters() == 2099712);
  CHECK(b.ln1->num_parameters() + b.ln2->num_parameters() == 2048);
  CHECK(b.num_parameters() == 3150336);
  CHECK(six.num_parameters() == 18902016);
  CHECK(FeedForward(512).options.hidden_ == 2048);  // hidden defaults to 4 d
}

TEST_CASE("layers: GPT registers nanoGPT-style names, and tying drops lm_head") {
  GPT m(tiny_gpt());
  auto names = names_of(m);
  const std::vector<std::string> block0{
      "blocks.0.ln1.weight",          "blocks.0.ln1.bias",          "blocks.0.attn.q_proj.weight",
      "blocks.0.attn.q_proj.bias",    "blocks.0.attn.k_proj.weight", "blocks.0.attn.k_proj.bias",
      "blocks.0.attn.v_proj.weight",  "blocks.0.attn.v_proj.bias",   "blocks.0.attn.out_proj.weight",
      "blocks.0.attn.out_proj.bias",  "blocks.0.ln2.weight",         "blocks.0.ln2.bias",
      "blocks.0.ffn.fc1.weight",      "blocks.0.ffn.fc1.bias",       "blocks.0.ffn.fc2.weight",
      "blocks.0.ffn.fc2.bias"};
  REQUIRE(names.size() == 2 + 2 * block0.size() + 3);
  CHECK(names[0] == "wte.weight");
  CHECK(names[1] == "wpe.weight");
  for (size_t i = 0; i < block0.size(); ++i) CHECK(names[2 + i] == block0[i]);
  CHECK(names[2 + block0.size()] == "blocks.1.ln1.weight");
  CHECK(names[names.size() - 3] == "ln_f.weight");
  CHECK(names[names.size() - 2] == "ln_f.bias");
  CHECK(names.back() == "lm_head.weight");
  // wte 7x8, wpe 5x8, per block 4 (64 + 8) attention + (8x32 + 32 + 32x8 + 8) FFN + 32 LN, ln_f 16, head 56.
  const int64_t block = 4 * 72 + 552 + 32;
  CHECK(m.num_parameters() == 56 + 40 + 2 * block + 16 + 56);

  GPT tied(tiny_gpt().tie_weights(true).learned_positions(false));
  CHECK(tied.num_parameters() == 56 + 2 * block + 16);
  CHECK(tied.named_buffers().at(0).first == "wpe.pe");
  CHECK(tied.lm_head == nullptr);
  // The same model untied, with lm_head holding a copy of the embedding
  // matrix, gives the same logits.
  GPT untied(tiny_gpt().learned_positions(false));
  auto sd = tied.state_dict();
  sd["lm_head.weight"] = tied.wte->weight;
  untied.load_state_dict(sd);
  autograd::NoGradGuard ng;
  Tensor y = tied.forward(tiny_ids());
  CHECK(y.shape() == Shape{2, 4, 7});
  test::check_close(y, untied.forward(tiny_ids()).to_vector<double>(), 1e-6);
}

TEST_CASE("layers: GPT is initialised like GPT-2 (N(0, 0.02), residual projections scaled down)") {
  Generator g(8);
  GPT m(GPTOptions(50, 64, 4, 4, 32).generator(&g));
  auto sd = [](const Tensor& t) {
    auto v = t.to_vector<double>();
    double sq = 0;
    for (double x : v) sq += x * x;
    return std::sqrt(sq / static_cast<double>(v.size()));
  };
  CHECK(std::abs(sd(m.wte->weight) - 0.02) < 0.002);
  CHECK(std::abs(sd(m.blocks[0]->ffn->fc1->weight) - 0.02) < 0.002);
  CHECK(std::abs(sd(m.blocks[0]->ffn->fc2->weight) - 0.02 / std::sqrt(8.0)) < 0.001);
  CHECK(std::abs(sd(m.blocks[0]->attn->out_proj->weight) - 0.02 / std::sqrt(8.0)) < 0.001);  // the other residual one
  CHECK(std::abs(sd(m.blocks[0]->attn->q_proj->weight) - 0.02) < 0.002);
  CHECK(sd(m.blocks[0]->ffn->fc1->bias) == 0.0);
  CHECK(m.ln_f->weight.to_vector<double>() == std::vector<double>(64, 1.0));
  Generator g2(8);
  GPT m2(GPTOptions(50, 64, 4, 4, 32).generator(&g2));
  for (auto& [n, t] : m.state_dict()) CHECK(m2.state_dict().at(n).to_vector<float>() == t.to_vector<float>());
}

TEST_CASE("layers: GPT cached generation, token by token, gives forward's logits") {
  Generator g(9);
  for (bool learned : {true, false}) {
    INFO("learned positions " << learned);
    GPT m(GPTOptions(11, 16, 2, 4, 8).kv_heads(2).learned_positions(learned).dropout(0.1).generator(&g));
    m.eval();
    autograd::NoGradGuard ng;
    Tensor ids = Tensor::from_i64({1, 5, 10, 0, 3, 3, 7, 2, 9, 4, 4, 0, 6, 1}, {2, 7});
    Tensor full = m.forward(ids);
    CHECK(full.shape() == Shape{2, 7, 11});
    GPTCache cache;
    std::vector<Tensor> steps;
    for (int64_t t = 0; t < 7; ++t) steps.push_back(m.forward_cached(narrow(ids, 1, t, 1), cache));
    CHECK(cache.length() == 7);
    test::check_close(concat(steps, 1), full.to_vector<double>(), 1e-5);
    // A prompt in one chunk, then single tokens.
    cache.clear();
    Tensor a = m.forward_cached(narrow(ids, 1, 0, 4), cache);
    Tensor b = m.forward_cached(narrow(ids, 1, 4, 3), cache);
    test::check_close(concat({a, b}, 1), full.to_vector<double>(), 1e-5);
    test::check_error([&] { m.forward_cached(narrow(ids, 1, 0, 2), cache); },
                      {"GPT", "positions 7..8", "context of 8"});
  }
}

TEST_CASE("layers: GPT hands back every layer's causal attention maps when asked") {
  GPT m(tiny_gpt());
  Tensor ids = tiny_ids();
  m.forward(ids);
  for (const Tensor& a : m.attention_maps()) CHECK_FALSE(a.defined());
  m.keep_attention(true);
  m.forward(ids);
  auto maps = m.attention_maps();
  REQUIRE(maps.size() == 2);
  for (const Tensor& a : maps) {
    REQUIRE(a.shape() == Shape{2, 2, 4, 4});
    for (double v : kernel::sum(a, {-1}).to_vector<double>()) CHECK(std::abs(v - 1.0) < 1e-5);
    CHECK(a.at({1, 1, 0, 1}) == 0.0);
    CHECK(a.at({0, 0, 2, 3}) == 0.0);
  }
}

TEST_CASE("layers: transformer layers refuse bad input with their configuration and the shape") {
  GPT m(tiny_gpt());
  test::check_error([&] { m.forward(Tensor::from_i64(std::vector<int64_t>(12, 0), {2, 6})); },
                    {"GPT(vocab=7, dim=8, layers=2, heads=2, context=5", "T=6", "context of 5"});
  test::check_error([&] { m.forward(Tensor::zeros({2, 3})); }, {"GPT", "int64", "float32 [2, 3]"});
  test::check_error([&] { m.forward(Tensor::from_i64({7}, {1, 1})); }, {"embedding", "id 7"});
  TransformerBlock b(8, 2);
  test::check_error([&] { b.forward(Tensor::zeros({2, 3, 6})); },
                    {"TransformerBlock(dim=8, heads=2, pre-LN)", "[N, T, 8]", "[2, 3, 6]"});
  FeedForward f(8);
  test::check_error([&] { f.forward(Tensor::zeros({2, 5})); }, {"FeedForward(dim=8, hidden=32", "[.., 8]", "[2, 5]"});
  test::check_error([] { GPT(GPTOptions(7, 10, 1, 3, 4)); }, {"d_model=10", "heads=3"});
  test::check_error([] { TransformerBlock(TransformerBlockOptions(8, 4).kv_heads(3)); }, {"heads=4", "kv_heads=3"});
}

TEST_CASE("GPT: nanoGPT's names (fused c_attn) round-trip, and a GPT loads a state dict under either names") {
  Generator g1(1), g2(2);
  nn::GPT a(nn::GPTOptions(11, 8, 2, 2, 6).generator(&g1)), b(nn::GPTOptions(11, 8, 2, 2, 6).generator(&g2));
  auto nano = nn::gpt_to_nanogpt(a.state_dict(), a.options);
  REQUIRE(nano.count("transformer.h.1.attn.c_attn.weight") == 1);
  CHECK(nano.at("transformer.h.1.attn.c_attn.weight").shape() == Shape{24, 8});  // q, k, v rows stacked
  CHECK(nano.at("transformer.h.1.attn.c_attn.bias").shape() == Shape{24});
  CHECK(nano.count("transformer.wte.weight") == 1);
  CHECK(nano.count("transformer.h.0.mlp.c_fc.weight") == 1);
  CHECK(nano.count("transformer.ln_f.bias") == 1);
  CHECK(nano.count("lm_head.weight") == 1);
  // The k rows of c_attn are k_proj's.
  CHECK(kernel::contiguous(kernel::narrow(nano.at("transformer.h.1.attn.c_attn.weight"), 0, 8, 8)).to_vector<double>() ==
        a.blocks[1]->attn->k_proj->weight.to_vector<double>());
  nano["transformer.h.0.attn.bias"] = Tensor::ones({1, 1, 6, 6});  // nanoGPT's mask buffer: ignored
  b.load_state_dict(nano);
  Tensor ids = Tensor::from_i64({1, 2, 3, 4, 5, 6}, {1, 6});
  CHECK(b.forward(ids).to_vector<double>() == a.forward(ids).to_vector<double>());
  test::check_error([&] { nn::gpt_to_nanogpt({{"blocks.0.odd.weight", Tensor::zeros({1})}}, a.options); },
                    {"blocks.0.odd.weight"});
  test::check_error([&] { nn::gpt_from_nanogpt({{"transformer.h.0.attn.c_attn.weight", Tensor::zeros({7, 2})}}); },
                    {"c_attn.weight", "[7, 2]", "multiple of 3"});
  // Layer numbers as nanoGPT writes them, and no other: "00" once gave
  // blocks.0 a second time (the last one silently won), and 20 digits threw
  // std::stoll's bare "stoll".
  for (const char* k : {"transformer.h.00.ln_1.weight", "transformer.h.99999999999999999999.ln_1.weight",
                        "transformer.h.-1.ln_1.weight"})
    test::check_error([&] { nn::gpt_from_nanogpt({{k, Tensor::zeros({2})}}); }, {k, "not a name of nanoGPT's layout"});
}

TEST_CASE("GPT: a state under nanoGPT's names that does not fit is reported under those names and shapes") {
  // A PyTorch GPT of vocabulary 30 without positions, for a GPT of 28: the
  // error named heed's 'wpe.weight' and 'wte.weight', keys the file lacks.
  Generator g1(1), g2(2);
  nn::GPT other(nn::GPTOptions(30, 32, 1, 4, 16).generator(&g1)), m(nn::GPTOptions(28, 32, 1, 4, 16).generator(&g2));
  auto nano = nn::gpt_to_nanogpt(other.state_dict(), other.options);
  nano.erase("transformer.wpe.weight");
  const auto before = m.state_dict().at("wte.weight").to_vector<double>();
  std::string msg;
  try {
    m.load_state_dict(nano);
  } catch (const Error& e) {
    msg = e.what();
  }
  INFO(msg);
  CHECK(msg.find("missing entries: 'transformer.wpe.weight' (expected shape [16, 32])") != std::string::npos);
  CHECK(msg.find("'transformer.wte.weight' has shape [30, 32], the model expects [28, 32]") != std::string::npos);
  CHECK(msg.find("'lm_head.weight' has shape [30, 32], the model expects [28, 32]") != std::string::npos);
  CHECK(msg.find("'wpe.weight'") == std::string::npos);
  CHECK(msg.find("'wte.weight'") == std::string::npos);
  CHECK(m.state_dict().at("wte.weight").to_vector<double>() == before);  // nothing loaded
  // A fused c_attn of the wrong size is one entry, as the file has it, not
  // three q_proj, k_proj, v_proj entries of a third of its rows each.
  nano = nn::gpt_to_nanogpt(m.state_dict(), m.options);
  nano["transformer.h.0.attn.c_attn.weight"] = Tensor::zeros({48, 32});
  msg.clear();
  try {
    m.load_state_dict(nano);
  } catch (const Error& e) {
    msg = e.what();
  }
  INFO(msg);
  CHECK(msg.find("'transformer.h.0.attn.c_attn.weight' has shape [48, 32], the model expects [96, 32]") !=
        std::string::npos);
  CHECK(msg.find("q_proj") == std::string::npos);
  // Unexpected keys under their own names; the mask buffers stay ignored.
  nano = nn::gpt_to_nanogpt(m.state_dict(), m.options);
  nano["transformer.h.0.attn.bias"] = Tensor::ones({1, 1, 16, 16});
  nano["transformer.h.1.ln_1.weight"] = Tensor::ones({32});
  test::check_error([&] { m.load_state_dict(nano); },
                    {"unexpected entries, not in the model: 'transformer.h.1.ln_1.weight' (shape [32])"});
}

TEST_CASE("GPT: nanoGPT's names are refused for a GPT nanoGPT cannot express, naming the setting") {
  // gpt_to_nanogpt wrote them for any GPT: grouped-query attention's c_attn
  // of D + 2 kv rows, which no reader splits back into q, k and v (heed's
  // own cut it into thirds), and post-LN or ReLU blocks that PyTorch's
  // nanoGPT would load without an error and compute differently.
  const nn::GPTOptions base(11, 8, 1, 4, 6);
  struct Case {
    nn::GPTOptions options;
    std::vector<std::string> fragments;
  };
  const std::vector<Case> cases = {
      {nn::GPTOptions(base).kv_heads(2), {"grouped-query attention", "kv_heads=2 of heads=4", "kv_heads()"}},
      {nn::GPTOptions(base).pre_ln(false), {"post-LN", "pre_ln(false)"}},
      {nn::GPTOptions(base).activation(Activation::relu), {"activation relu", "exact GELU"}},
      {nn::GPTOptions(base).activation(Activation::gelu_tanh), {"activation gelu_tanh"}},
      {nn::GPTOptions(base).ffn_hidden(16), {"FFN hidden width of 16", "4 x dim = 32"}},
      {nn::GPTOptions(base).learned_positions(false), {"sinusoidal positions", "learned_positions(false)"}},
      // nanoGPT's bias=False has no LayerNorm biases either: its state would
      // lack ln_*.bias, or load with strict=False and drop trained ones.
      {nn::GPTOptions(base).bias(false), {"linears without biases", "bias(false)", "bias=False neither"}},
  };
  Generator g(3);
  nn::GPT plain(nn::GPTOptions(base).generator(&g));
  const auto nano = nn::gpt_to_nanogpt(plain.state_dict(), plain.options);
  for (const Case& c : cases) {
    nn::GPT m(nn::GPTOptions(c.options).generator(&g));
    CAPTURE(m.summary());
    std::vector<std::string> out = c.fragments;
    out.push_back("gpt_to_nanogpt: nanoGPT's layout cannot hold this GPT");
    test::check_error([&] { nn::gpt_to_nanogpt(m.state_dict(), m.options); }, out);
    // And a nanoGPT state does not load into it (post-LN and ReLU did, the
    // shapes being the same).
    std::vector<std::string> in = c.fragments;
    in.push_back("nanoGPT's names");
    const auto before = m.state_dict().begin()->second.to_vector<double>();
    test::check_error([&] { m.load_state_dict(nano); }, in);
    CHECK(m.state_dict().begin()->second.to_vector<double>() == before);
  }
  // Options that nanoGPT has: a tied head; and an explicit 4 D.
  for (const nn::GPTOptions& o : {nn::GPTOptions(base).tie_weights(true), nn::GPTOptions(base).ffn_hidden(32).kv_heads(4)}) {
    nn::GPT a(nn::GPTOptions(o).generator(&g)), b(nn::GPTOptions(o).generator(&g));
    b.load_state_dict(nn::gpt_to_nanogpt(a.state_dict(), a.options));
    Tensor ids = Tensor::from_i64({1, 2, 3}, {1, 3});
    CHECK(b.forward(ids).to_vector<double>() == a.forward(ids).to_vector<double>());
  }
}

TEST_CASE("GPT: a tied GPT loads PyTorch's tied state dict (lm_head.weight equal to wte.weight), not another head") {
  Generator g1(1), g2(2);
  nn::GPT a(nn::GPTOptions(11, 8, 2, 2, 6).tie_weights(true).generator(&g1));
  nn::GPT b(nn::GPTOptions(11, 8, 2, 2, 6).tie_weights(true).generator(&g2));
  auto nano = nn::gpt_to_nanogpt(a.state_dict(), a.options);
  CHECK(nano.count("lm_head.weight") == 0);
  nano["lm_head.weight"] = kernel::contiguous(nano.at("transformer.wte.weight"));  // as nanoGPT's state_dict has it
  b.load_state_dict(nano);
  Tensor ids = Tensor::from_i64({1, 2, 3, 4, 5, 6}, {1, 6});
  CHECK(b.forward(ids).to_vector<double>() == a.forward(ids).to_vector<double>());
  auto heed_names = a.state_dict();
  heed_names["lm_head.weight"] = heed_names.at("wte.weight");
  nn::GPT c(nn::GPTOptions(11, 8, 2, 2, 6).tie_weights(true).generator(&g2));
  c.load_state_dict(heed_names);
  CHECK(c.forward(ids).to_vector<double>() == a.forward(ids).to_vector<double>());
  // A head of its own does not fit a tied model, and nothing is loaded.
  nano["lm_head.weight"] = Tensor::zeros({11, 8});
  nn::GPT d(nn::GPTOptions(11, 8, 2, 2, 6).tie_weights(true).generator(&g2));
  const auto before = d.forward(ids).to_vector<double>();
  test::check_error([&] { d.load_state_dict(nano); }, {"tied", "lm_head.weight [11, 8]", "tie_weights(false)"});
  CHECK(d.forward(ids).to_vector<double>() == before);
}
