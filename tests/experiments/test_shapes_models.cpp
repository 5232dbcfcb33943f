// tests/experiments/test_shapes_models.cpp: the toy task's two models.
#include "experiments/shapes_models.h"
#include "test_util.h"

using namespace heed;

TEST_CASE("shapes models: parameter counts are the spec's 62,337 and 54,081") {
  auto cnn = experiments::make_shapes_cnn();
  auto att = experiments::make_shapes_attention();
  CHECK(cnn->num_parameters() == 62337);
  CHECK(att->num_parameters() == 54081);
  CHECK(cnn->summary().ends_with("nb_parameters 62337"));
  CHECK(att->summary().ends_with("nb_parameters 54081"));
  CHECK(att->state_dict().count("4.conv_q.weight") == 1);
  // positional variant: 8 input channels
  CHECK(experiments::make_shapes_cnn(8)->num_parameters() == 62337 + 7 * 64 * 5);
}

TEST_CASE("shapes models: the parameter names of the unfused Conv1d + ReLU chains (checkpoints and logs hold them)") {
  auto keys = [](const nn::Module& m) {
    std::vector<std::string> k;
    for (auto& [n, t] : m.state_dict()) k.push_back(n);
    return k;
  };
  CHECK(keys(*experiments::make_shapes_cnn()) ==
        std::vector<std::string>{"0.bias", "0.weight", "2.bias", "2.weight", "4.bias", "4.weight", "6.bias",
                                 "6.weight", "8.bias", "8.weight"});
  CHECK(keys(*experiments::make_shapes_attention()) ==
        std::vector<std::string>{"0.bias", "0.weight", "2.bias", "2.weight", "4.conv_k.weight", "4.conv_q.weight",
                                 "4.conv_v.weight", "5.bias", "5.weight", "7.bias", "7.weight"});
  // Each Conv1d + ReLU pair is one fused layer, chosen where the model is built.
  auto cnn = experiments::make_shapes_cnn();
  for (const char* c : {"0", "2", "4", "6"}) CHECK((*cnn)[c]->type_name() == "Conv1dReLU");
  CHECK((*cnn)["8"]->type_name() == "Conv1d");
  auto att = experiments::make_shapes_attention();
  CHECK((*att)["4"]->type_name() == "SelfAttention");
  Tensor x = test::det_tensor({2, 1, 100}, 3);
  CHECK(cnn->forward(x).grad_fn()->name == "conv1d");
}

TEST_CASE("shapes models: a batch [N, 1, 100] maps to [N, 1, 100]") {
  auto att = experiments::make_shapes_attention();
  Tensor x = test::det_tensor({3, 1, 100}, 1);
  CHECK(att->forward(x).shape() == Shape{3, 1, 100});
}
