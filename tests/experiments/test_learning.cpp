// tests/experiments/test_learning.cpp: the small bundled experiments learn
// what they claim, read back from their logs (the Run's schema).
#include "data/h5.h"
#include "experiments/copy.h"
#include "experiments/scaling.h"
#include "experiments/shapes.h"
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

TEST_CASE("copy and shapes: a stopped run resumed with its length at the step it stopped is refused; its own length "
          "does the end-of-run work") {
  // The last step's work (copy: the final evaluation and attention map;
  // shapes: the last epoch's) happens only at the run's last step; a run
  // stopped at step 10 of 20 never did it, and --steps 10 would print
  // results it does not have (copy said "accuracy 0.0000").
  test::TempDir d("heed-learn-resume-");
  const std::string log = d.path + "/copy.h5", ck = d.path + "/copy.ckpt.h5";
  REQUIRE(experiments::run_copy({"--steps", "20", "--eval-every", "50", "--stop-after", "10", "--out", log},
                                {"heed", "run", "copy"}) == 130);
  const std::string log_bytes = test::slurp(log), ck_bytes = test::slurp(ck);
  test::check_error([&] { experiments::run_copy({"--resume", ck, "--steps", "10"}, {"heed", "run", "copy"}); },
                    {"run copy: checkpoint '" + ck + "' stopped at step 10 of 20", "expected --steps above 10"});
  // Shorter still: the same lengths are expected (it said "--steps 10 or more").
  test::check_error([&] { experiments::run_copy({"--resume", ck, "--steps", "5"}, {"heed", "run", "copy"}); },
                    {"is at step 10, beyond this run's 5 steps",
                     "expected --steps above 10 (or no --steps: the run's own 20)"});
  // Its own checkpoint given as --out is named as such, not as "the run's log".
  test::check_error([&] { experiments::run_copy({"--resume", ck, "--out", ck}, {"heed", "run", "copy"}); },
                    {"--out '" + ck + "' is the checkpoint --resume continues; expected the run's log"});
  // Another unfinished run's checkpoint as --checkpoint is not replaced (it was, silently).
  const std::string other = d.path + "/other.h5", other_ck = d.path + "/other.ckpt.h5";
  REQUIRE(experiments::run_copy({"--steps", "20", "--stop-after", "5", "--out", other}, {"heed", "run", "copy"}) ==
          130);
  const std::string other_bytes = test::slurp(other_ck);
  test::check_error(
      [&] { experiments::run_copy({"--resume", ck, "--checkpoint", other_ck}, {"heed", "run", "copy"}); },
      {"--checkpoint '" + other_ck + "' holds another unfinished run, at step 5 of 20", "expected another --checkpoint"});
  CHECK(test::slurp(other_ck) == other_bytes);
  CHECK(test::slurp(log) == log_bytes);
  CHECK(test::slurp(ck) == ck_bytes);
  REQUIRE(experiments::run_copy({"--resume", ck}, {"heed", "run", "copy"}) == 0);
  const std::vector<double> acc =
      h5::File(log, h5::File::Mode::read).read_tensor("metrics/accuracy").to_vector<double>();
  REQUIRE(acc.size() == 3);  // one evaluation, at the end
  CHECK(acc[0] == 20);
  CHECK(h5::File(log, h5::File::Mode::read).read_tensor("series/attention/maps/step").to_vector<int64_t>() ==
        std::vector<int64_t>{20});

  // shapes' length is --epochs x batches an epoch: 2 batches of 8, stopped after epoch 1 of 2.
  const std::string slog = d.path + "/shapes.h5", sck = d.path + "/shapes.ckpt.h5";
  const std::vector<std::string> small = {"--train", "16", "--test", "16", "--batch", "8", "--model", "cnn"};
  std::vector<std::string> start = small;
  start.insert(start.end(), {"--epochs", "2", "--stop-after", "2", "--out", slog});
  REQUIRE(experiments::run_shapes(start, {"heed", "run", "shapes"}) == 130);
  const std::string sck_bytes = test::slurp(sck);
  test::check_error(
      [&] { experiments::run_shapes({"--resume", sck, "--epochs", "1"}, {"heed", "run", "shapes"}); },
      {"stopped at step 2 of 4", "expected a run longer than 2 steps (a larger --epochs; the run's own was 4)"});
  CHECK(test::slurp(sck) == sck_bytes);
  REQUIRE(experiments::run_shapes({"--resume", sck}, {"heed", "run", "shapes"}) == 0);
}

TEST_CASE("scaling: seeds past the largest int64 are refused naming them; the largest seed itself runs") {
  test::TempDir d("heed-learn-scaling-");
  const std::vector<std::string> small = {"--seeds", "2", "--dim", "8", "--dk-max", "4", "--steps", "3"};
  // --seed 9223372036854775807 --seeds 2 named its second seed -9223372036854775808.
  std::vector<std::string> over = small;
  over.insert(over.end(), {"--seed", "9223372036854775807", "--out", d.path + "/ov.h5"});
  test::check_error([&] { experiments::run_scaling(over, {"heed", "run", "scaling"}); },
                    {"run scaling: --seed 9223372036854775807 with --seeds 2", "expected --seed at most "
                                                                                "9223372036854775806"});
  CHECK_FALSE(std::filesystem::exists(d.path + "/ov.h5"));
  std::vector<std::string> last = small;
  last.insert(last.end(), {"--seed", "9223372036854775806", "--out", d.path + "/ok.h5"});
  REQUIRE(experiments::run_scaling(last, {"heed", "run", "scaling"}) == 0);
  CHECK(h5::attr_str(h5::File(d.path + "/ok.h5", h5::File::Mode::read).get_attr("/", "seeds")) ==
        "9223372036854775806..9223372036854775807");
  CHECK(load_checkpoint(d.path + "/ok.ckpt.h5", "scaling").tensors.count("model/unscaled/seed9223372036854775807/"
                                                                          "head.weight") == 1);
}
