// tests/experiments/test_learning.cpp: the small bundled experiments learn
// what they claim, read back from their logs (the Run's schema).
#include "data/h5.h"
#include "experiments/copy.h"
#include "experiments/sine.h"
#include "resume_check.h"
#include "test_util.h"

using namespace heed;

namespace {
// The last value of a metric in a log.
double last(const std::string& log, const std::string& metric) {
  std::vector<double> rows = h5::File(log, h5::File::Mode::read).read_tensor("metrics/" + metric).to_vector<double>();
  REQUIRE(rows.size() >= 3);
  return rows[rows.size() - 2];
}
double first(const std::string& log, const std::string& metric) {
  std::vector<double> rows = h5::File(log, h5::File::Mode::read).read_tensor("metrics/" + metric).to_vector<double>();
  REQUIRE(rows.size() >= 3);
  return rows[1];
}
}  // namespace

TEST_CASE("copy task: one attention layer reaches >= 99% accuracy with >= 0.9 attention on t-1") {
  test::TempDir d("heed-learn-copy-");
  const std::string log = d.path + "/copy.h5";
  REQUIRE(experiments::run_copy({"--steps", "200", "--out", log}, {"heed", "run", "copy"}) == 0);
  INFO("accuracy " << last(log, "accuracy") << ", attention on the previous position "
                   << last(log, "prev_token_attention"));
  CHECK(last(log, "accuracy") >= 0.99);
  CHECK(last(log, "prev_token_attention") >= 0.9);
}

TEST_CASE("sine fit: a few hundred steps cut the MSE by more than 100x; the same seed gives the same run") {
  test::TempDir d("heed-learn-sine-");
  REQUIRE(experiments::run_sine({"--steps", "300", "--out", d.path + "/a.h5"}) == 0);  // below 1e-3
  const double initial = first(d.path + "/a.h5", "train_loss"), final_mse = last(d.path + "/a.h5", "final_mse");
  INFO("initial " << initial << " final " << final_mse);
  CHECK(initial > 0.05);  // a fresh network is far from sin(x)
  CHECK(final_mse < 0.01 * initial);
  REQUIRE(experiments::run_sine({"--steps", "300", "--out", d.path + "/b.h5"}) == 0);
  test::check_same_log(d.path + "/a.h5", d.path + "/b.h5");
  REQUIRE(experiments::run_sine({"--steps", "3", "--seed", "4", "--out", d.path + "/c.h5"}) == 1);
  CHECK(first(d.path + "/c.h5", "train_loss") != initial);
}
