// tests/experiments/test_crossattn.cpp: the token-to-signal task (token
// sequences pinned by seed, decoding to the signal they describe), the
// shape-token measure on maps made by hand, and a small run in which the
// signal must be drawn and its positions must attend to their shape's tokens.
#include <cmath>

#include "data/h5.h"
#include "experiments/crossattn.h"
#include "experiments/crossattn_task.h"
#include "test_util.h"

using namespace heed;
using test::last_value;
using namespace heed::experiments;

namespace {
// The profile of crossattn_task.h, written out again.
double expected_value(int64_t kind, int64_t c, double h, int64_t t) {
  const double d = std::abs(static_cast<double>(t - c));
  if (d > 4) return 0.0;
  if (kind == 0) return h * (1 - d / 5);
  if (kind == 1) return h;
  return h * (1 - (d / 5) * (d / 5));
}

std::string describe(const Tensor& tokens, int64_t i, const DescribedOptions& o) {
  std::string s;
  const std::vector<int64_t> ids = tokens.to_vector<int64_t>();
  for (int64_t j = 0; j < tokens.size(1); ++j) {
    if (j > 0) s += ' ';
    s += token_name(ids[static_cast<size_t>(i * tokens.size(1) + j)], o);
  }
  return s;
}
}  // namespace

TEST_CASE("crossattn task: seed 0 draws the pinned token sequences; the vocabulary is kinds, centres, heights") {
  DescribedOptions o;  // L = 64, 3 shapes, half width 4, centres 5, 7, ..., 57, heights 0.5 .. 4
  CHECK(position_tokens(o) == 27);
  CHECK(vocabulary_size(o) == 3 + 27 + 8);
  CHECK(token_name(0, o) == "triangle");
  CHECK(token_name(2, o) == "bump");
  CHECK(token_name(3, o) == "@5");
  CHECK(token_name(29, o) == "@57");
  CHECK(token_name(30, o) == "h0.5");
  CHECK(token_name(37, o) == "h4");
  test::check_error([&] { token_name(38, o); }, {"token id 38", "0 .. 37"});

  Generator g(0);
  DescribedSet s = generate_described(2, g, o);
  CHECK(s.tokens.to_vector<int64_t>() ==
        std::vector<int64_t>{2, 12, 32, 1, 21, 30, 2, 4, 35, 0, 25, 30, 0, 18, 30, 2, 13, 30});
  CHECK(describe(s.tokens, 0, o) == "bump @23 h1.5 box @41 h0.5 bump @7 h3");
  CHECK(describe(s.tokens, 1, o) == "triangle @49 h0.5 triangle @35 h0.5 bump @25 h0.5");
  CHECK(s.kinds.to_vector<int64_t>() == std::vector<int64_t>{2, 1, 2, 0, 0, 2});
  CHECK(s.centres.to_vector<int64_t>() == std::vector<int64_t>{23, 41, 7, 49, 35, 25});
  CHECK(s.heights.to_vector<float>() == std::vector<float>{1.5f, 0.5f, 3.0f, 0.5f, 0.5f, 0.5f});
  CHECK(g.offset() == 18);  // 3 shapes x 3 draws, one attempt each
  // A few values of sample 0 by hand: the bump's top and edge, the box, nothing between.
  const std::vector<float> x = s.signal.to_vector<float>();
  CHECK(x[23] == 1.5f);
  CHECK(x[27] == doctest::Approx(1.5 * (1 - 0.64)));
  CHECK(x[28] == 0.0f);
  CHECK(x[37] == 0.5f);
  CHECK(x[7] == 3.0f);
  CHECK(x[64 + 37] == doctest::Approx(0.5 * (1 - 2.0 / 5)));  // sample 1's triangle at 35, two steps off
}

TEST_CASE("crossattn task: every token sequence decodes to the signal it describes; shapes never touch") {
  DescribedOptions o;
  Generator g(5);
  const int64_t n = 300, M = o.shapes, S = 3 * M, L = o.length, P = position_tokens(o);
  DescribedSet s = generate_described(n, g, o);
  CHECK(render_tokens(s.tokens, o).to_vector<float>() == s.signal.to_vector<float>());
  const std::vector<int64_t> tok = s.tokens.to_vector<int64_t>(), kind = s.kinds.to_vector<int64_t>(),
                             centre = s.centres.to_vector<int64_t>();
  const std::vector<float> height = s.heights.to_vector<float>(), x = s.signal.to_vector<float>();
  std::vector<int64_t> kinds_seen(3, 0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t m = 0; m < M; ++m) {
      // Shape m is tokens 3m (kind), 3m + 1 (position), 3m + 2 (height), and they say what the tensors say.
      const int64_t k = i * M + m;
      CHECK(tok[static_cast<size_t>(i * S + 3 * m)] == kind[k]);
      CHECK(centre[k] == 5 + 2 * (tok[static_cast<size_t>(i * S + 3 * m + 1)] - 3));
      CHECK(height[k] == 0.5f * static_cast<float>(tok[static_cast<size_t>(i * S + 3 * m + 2)] - 3 - P + 1));
      ++kinds_seen[static_cast<size_t>(kind[k])];
      for (int64_t m2 = m + 1; m2 < M; ++m2) CHECK(std::abs(centre[k] - centre[i * M + m2]) >= 10);
    }
    for (int64_t t = 0; t < L; ++t) {
      double v = 0;
      for (int64_t m = 0; m < M; ++m) v += expected_value(kind[i * M + m], centre[i * M + m], height[i * M + m], t);
      CHECK(x[i * L + t] == doctest::Approx(v).epsilon(1e-6));
    }
  }
  for (int64_t c : kinds_seen) CHECK(c > n * M / 4);  // each kind about a third of the time

  // A token of the wrong kind for its place is named.
  std::vector<int64_t> bad = std::vector<int64_t>(tok.begin(), tok.begin() + S);
  bad[4] = 35;  // a height token where shape 1's position goes
  test::check_error([&] { render_tokens(Tensor::from_i64(bad, {1, S}), o); }, {"sample 0, shape 1", "35"});
  DescribedOptions crowded;
  crowded.shapes = 7;  // centres 10 apart from 5 on: the last would be at 65
  test::check_error([&] { generate_described(1, g, crowded); }, {"7 shapes", "do not fit"});
}

TEST_CASE("shape-token attention: all on the shape's own tokens scores 1, spread evenly 3 / S") {
  const int64_t L = 20, S = 6;
  Tensor centres = Tensor::from_i64({5, 14}, {1, 2});  // half width 2: positions 3..7 and 12..16
  Tensor A = Tensor::zeros({1, 2, L, S});
  float* a = A.data<float>();
  for (int64_t t = 0; t < L; ++t) {
    const int64_t own = t < 10 ? 0 : 1;
    a[(0 * L + t) * S + 3 * own + 1] = 1.0f;  // head 0: its shape's position token
    a[(1 * L + t) * S + 3 * (1 - own)] = 1.0f;  // head 1: the other shape's kind token
  }
  ShapeTokenScore s = shape_token_attention(A, centres, 2);
  CHECK(s.queries == 10);
  CHECK(s.head(0) == doctest::Approx(1.0));
  CHECK(s.head(1) == doctest::Approx(0.0));
  CHECK(s.mean() == doctest::Approx(0.5));
  CHECK(s.on_field(1) == doctest::Approx(0.5));
  CHECK(s.on_field(0) == doctest::Approx(0.0));
  CHECK(s.baseline() == doctest::Approx(0.5));
  Tensor even = Tensor::full({1, 1, L, S}, 1.0 / S);
  CHECK(shape_token_attention(even, centres, 2).head(0) == doctest::Approx(0.5));
  test::check_error([&] { shape_token_attention(A, Tensor::from_i64({5}, {1, 1}), 2); }, {"centres", "[1, 1]"});
}

TEST_CASE("crossattn: a small model draws the described signals, and in its second layer each position of a shape "
          "attends to that shape's tokens") {
  test::TempDir d("heed-learn-crossattn-");
  const std::string log = d.path + "/ca.h5";
  REQUIRE(run_crossattn({"--steps", "600", "--batch", "16", "--dim", "32", "--length", "48", "--test", "128",
                         "--eval-every", "1000", "--out", log},
                        {"heed", "run", "crossattn"}) == 0);
  const double mse = last_value(log, "test_mse"), uniform = last_value(log, "attention/uniform");
  const double own = last_value(log, "attention/layer1/shape_tokens");
  const double zero = h5::File(log, h5::File::Mode::read).read_tensor("reference/zero_mse").item();
  INFO("test mse " << mse << " (drawing nothing " << zero << "); layer 1 on the shape's 3 tokens " << own
                   << ", uniform " << uniform);
  CHECK(uniform == doctest::Approx(1.0 / 3));
  CHECK(mse < 0.05 * zero);
  CHECK(own > 2.4 * uniform);
}
