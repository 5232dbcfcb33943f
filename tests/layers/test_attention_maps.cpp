// tests/layers/test_attention_maps.cpp: nn::KeepAttention finds every
// attention layer of a user's own stack, names them as the state dict does,
// hands back each forward's maps, and restores what it changed; the
// recipe that logs them names every series as it is stored.
#include <cmath>
#include <string>
#include <vector>

#include "data/h5.h"
#include "data/runlog.h"
#include "layers/module_check.h"

using namespace heed;
using namespace heed::nn;

namespace {

// A user's own model: two transformer blocks in a Sequential, a lectures'
// SelfAttention beside them, and no attention of its own.
struct Stack : Module {
  std::shared_ptr<Linear> embed;
  std::shared_ptr<Sequential> blocks;
  std::shared_ptr<SelfAttention> mix;
  Stack(Generator& g) : Module("Stack") {
    embed = register_module("embed", std::make_shared<Linear>(LinearOptions(3, 8).generator(&g)));
    blocks = register_module(
        "blocks", std::make_shared<Sequential>(std::initializer_list<std::shared_ptr<Module>>{
                      std::make_shared<TransformerBlock>(TransformerBlockOptions(8, 2).causal(true).generator(&g)),
                      std::make_shared<TransformerBlock>(TransformerBlockOptions(8, 4).generator(&g))}));
    mix = register_module("mix", std::make_shared<SelfAttention>(SelfAttentionOptions(8, 8, 4).generator(&g)));
  }
  // x [N, T, 3] -> [N, T, 8]
  Tensor forward(const Tensor& x) override {
    Tensor h = blocks->forward(embed->forward(x));          // [N, T, 8]
    return transpose(mix->forward(transpose(h, 1, 2)), 1, 2);  // SelfAttention is channels-first
  }
};

}  // namespace

TEST_CASE("layers: KeepAttention hands back every attention layer's maps by name, and restores the layers after") {
  Generator g(3);
  Stack m(g);
  Tensor x = test::det_tensor({2, 5, 3}, 1);
  const Tensor before = m.forward(x);
  auto attn = [&](size_t i) { return std::dynamic_pointer_cast<TransformerBlock>((*m.blocks)[i])->attn; };
  attn(1)->keep_attention(true);  // one layer was keeping already: it stays so
  {
    KeepAttention keep(m);
    REQUIRE(keep.size() == 3);
    for (const auto& [name, map] : keep.maps()) CHECK_FALSE(map.defined());  // nothing run yet
    const Tensor y = m.forward(x);
    CHECK(test::max_diff(y, before) < 1e-5);  // the plain path's values
    const auto maps = keep.maps();
    REQUIRE(maps.size() == 3);
    CHECK(maps[0].first == "blocks.0.attn");
    CHECK(maps[1].first == "blocks.1.attn");
    CHECK(maps[2].first == "mix");
    // The names are the state dict's prefixes.
    const auto sd = m.state_dict();
    CHECK(sd.count("blocks.0.attn.q_proj.weight") == 1);
    CHECK(sd.count("mix.conv_q.weight") == 1);
    CHECK(maps[0].second.shape() == Shape{2, 2, 5, 5});
    CHECK(maps[1].second.shape() == Shape{2, 4, 5, 5});
    CHECK(maps[2].second.shape() == Shape{2, 5, 5});
    for (const auto& [name, map] : maps) {
      INFO(name);
      CHECK_FALSE(map.requires_grad());
      for (double s : kernel::sum(map, {-1}).to_vector<double>()) CHECK(std::abs(s - 1.0) < 1e-5);
    }
    CHECK(maps[0].second.at({1, 1, 0, 4}) == 0.0);  // causal: the first query sees only itself
    CHECK(maps[1].second.at({1, 1, 0, 4}) > 0.0);
  }
  CHECK_FALSE(attn(0)->keeps_attention());
  CHECK_FALSE(attn(0)->last_attention().defined());  // freed
  CHECK_FALSE(m.mix->keeps_attention());
  CHECK(attn(1)->keeps_attention());  // as it was
  CHECK(attn(1)->last_attention().defined());
  // Nested: the inner object hands back only the maps of forwards since it
  // began, never the outer's older ones; leaving, it keeps the outer's going.
  {
    KeepAttention outer(m);
    m.forward(x);
    {
      KeepAttention inner(m);
      for (const auto& [name, map] : inner.maps()) CHECK_FALSE(map.defined());
      m.forward(x);
      for (const auto& [name, map] : inner.maps()) CHECK(map.defined());
    }
    CHECK(attn(0)->keeps_attention());
    for (const auto& [name, map] : outer.maps()) CHECK(map.defined());
  }
  CHECK_FALSE(attn(0)->keeps_attention());
  // A model without attention: nothing to keep.
  Linear plain(LinearOptions(3, 2).generator(&g));
  KeepAttention none(plain);
  CHECK(none.size() == 0);
  CHECK(none.maps().empty());
  // A GPT, its layers found through its blocks: the maps GPT's own helper gives.
  GPT gpt(GPTOptions(7, 8, 2, 2, 5).generator(&g));
  Tensor ids = Tensor::from_i64({3, 0, 6, 2, 2, 5, 1, 4}, {2, 4});
  KeepAttention keep(gpt);
  gpt.forward(ids);
  const auto maps = keep.maps();
  const auto own = gpt.attention_maps();
  REQUIRE(maps.size() == own.size());
  for (size_t i = 0; i < maps.size(); ++i) {
    CHECK(maps[i].first == fmt::format("blocks.{}.attn", i));
    CHECK(test::max_diff(maps[i].second, own[i]) == 0.0);
  }
}

TEST_CASE("layers: KeepAttention's maps under a prefix name a bare attention layer by the prefix, its log series too") {
  Generator g(5);
  Stack stack(g);
  MultiHeadAttention bare(MultiHeadAttentionOptions(8, 2).causal(true).generator(&g));
  Tensor x = test::det_tensor({2, 4, 8}, 2);
  KeepAttention keep_stack(stack), keep_bare(bare);
  stack.forward(test::det_tensor({2, 4, 3}, 1));
  bare.forward(x);
  // The state dict's path of root is "": under a prefix, the prefix alone.
  REQUIRE(keep_bare.maps().size() == 1);
  CHECK(keep_bare.maps()[0].first == "");
  const auto bare_maps = keep_bare.maps("attention");
  REQUIRE(bare_maps.size() == 1);
  CHECK(bare_maps[0].first == "attention");
  CHECK(bare_maps[0].second.shape() == Shape{2, 2, 4, 4});
  std::vector<std::string> names;
  for (const auto& [name, map] : keep_stack.maps("attention")) names.push_back(name);
  CHECK(names == std::vector<std::string>{"attention/blocks.0.attn", "attention/blocks.1.attn", "attention/mix"});
  CHECK(keep_stack.maps("")[0].first == "blocks.0.attn");
  // The recipe of layers/attention_maps.h, for both models: every series is
  // stored under the name it was logged by.
  const std::string path = test::temp_path("keep_attention_recipe.h5");
  {
    RunLog log = RunLog::create(path);
    for (const auto& [name, map] : bare_maps) log.declare_series(name, map.shape());
    for (const auto& [name, map] : keep_stack.maps("stack")) log.declare_series(name, map.shape());
    // The recipe before maps(prefix), "attention/" + name, names root "attention/".
    test::check_error([&] { log.declare_series("attention/" + keep_bare.maps()[0].first, {2}); },
                      {"series name 'attention/'", "ends with '/'"});
    log.begin();
    for (const auto& [name, map] : bare_maps) log.series(name, 7, map);
    for (const auto& [name, map] : keep_stack.maps("stack")) log.series(name, 7, map);
    log.close();
  }
  {
    h5::File f(path, h5::File::Mode::read);
    CHECK(f.dataset_shape("series/attention/values") == Shape{1, 2, 2, 4, 4});
    CHECK(f.dataset_shape("series/stack/blocks.1.attn/values") == Shape{1, 2, 4, 4, 4});
  }
  RunLog again = RunLog::resume(path, 7);  // reads its series back by the names they were logged by
  again.series("attention", 8, bare_maps[0].second);
  again.series("stack/mix", 8, keep_stack.maps("stack")[2].second);
  again.close();
}
