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

TEST_CASE("shapes models: a batch [N, 1, 100] maps to [N, 1, 100]") {
  auto att = experiments::make_shapes_attention();
  Tensor x = test::det_tensor({3, 1, 100}, 1);
  CHECK(att->forward(x).shape() == Shape{3, 1, 100});
}
