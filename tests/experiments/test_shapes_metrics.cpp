// tests/experiments/test_shapes_metrics.cpp
#include "experiments/shapes_metrics.h"
#include "test_util.h"

using namespace heed;

namespace {
// One sample, T = 20: shapes 0 and 1 are partners, 2 and 3 are partners.
struct MetricsToy {
  Tensor centres = Tensor::from({3, 8, 13, 17}, {1, 4});
  Tensor widths = Tensor::from({3, 3, 3, 3}, {1, 4});  // inside: |t - c| < 1.5 -> 3 positions each
  Tensor partner = Tensor::from_i64({1, 0, 3, 2}, {1, 4});
};
}  // namespace

TEST_CASE("pair attention score: attention entirely on the partner scores 1, uniform scores partner width / T") {
  MetricsToy toy;
  const int64_t T = 20;
  // Perfect: every query inside shape s spreads its mass over its partner's 3 positions.
  Tensor A = Tensor::zeros({1, T, T});
  float* a = A.data<float>();
  const double c[4] = {3, 8, 13, 17};
  const int partner[4] = {1, 0, 3, 2};
  for (int s = 0; s < 4; ++s)
    for (int t = 0; t < T; ++t) {
      if (std::abs(t - c[s]) >= 1.5) continue;
      for (int k = 0; k < T; ++k)
        if (std::abs(k - c[partner[s]]) < 1.5) a[t * T + k] = 1.0f / 3.0f;
    }
  auto perfect = experiments::pair_attention_score(A, toy.centres, toy.widths, toy.partner);
  CHECK(perfect.queries == 12);
  CHECK(std::abs(perfect.value() - 1.0) < 1e-6);

  Tensor U = Tensor::full({1, T, T}, 1.0 / T);
  auto uniform = experiments::pair_attention_score(U, toy.centres, toy.widths, toy.partner);
  CHECK(std::abs(uniform.value() - 3.0 / T) < 1e-6);

  // Attending to itself instead of the partner scores 0.
  Tensor I = Tensor::zeros({1, T, T});
  for (int t = 0; t < T; ++t) I.data<float>()[t * T + t] = 1.0f;
  CHECK(experiments::pair_attention_score(I, toy.centres, toy.widths, toy.partner).value() == 0.0);
}

TEST_CASE("pair attention score: mismatched shapes are refused") {
  MetricsToy toy;
  test::check_error([&] { experiments::pair_attention_score(Tensor::zeros({1, 20, 19}), toy.centres, toy.widths, toy.partner); },
                    {"pair_attention_score", "[1, 20, 19]"});
}
