// tests/experiments/test_sine_resume.cpp: `heed run sine` logs to HDF5, and a
// run stopped and resumed is bit-identical to one that never stopped; bad
// checkpoints are refused, naming the problem.
#include <unistd.h>

#include <filesystem>

#include "data/checkpoint.h"
#include "data/h5.h"
#include "experiments/copy.h"
#include "experiments/sine.h"
#include "resume_check.h"
#include "test_util.h"

using namespace heed;
namespace fs = std::filesystem;

namespace {


std::vector<std::string> small(const std::string& out) {
  return {"--steps", "40", "--hidden", "8", "--checkpoint-every", "7", "--threads", "1", "--out", out};
}

int run(std::vector<std::string> args) { return experiments::run_sine(args, {"heed", "run", "sine"}); }

}  // namespace

TEST_CASE("sine resume: 40 steps equal 20 steps, stopped, then resumed to 40, bit for bit") {
  test::TempDir d("heed-sine-resume-");
  const int straight_rc = run(small(d.path + "/straight.h5"));
  CHECK((straight_rc == 0 || straight_rc == 1));  // 40 steps may not reach the threshold
  auto args = small(d.path + "/stopped.h5");
  args.insert(args.end(), {"--stop-after", "20"});
  REQUIRE(run(args) == 130);
  const std::string ckpt = d.path + "/stopped.ckpt.h5";
  CHECK(load_checkpoint(ckpt, "sine").counter("step") == 20);
  CHECK(run({"--resume", ckpt, "--threads", "1"}) == straight_rc);
  test::check_same_log(d.path + "/straight.h5", d.path + "/stopped.h5");
  test::check_same_checkpoint(d.path + "/straight.ckpt.h5", ckpt, "sine");
}

TEST_CASE("sine log: metadata, the model's parameters, the loss of every step and the final MSE") {
  test::TempDir d("heed-sine-resume-");
  const std::string out = d.path + "/log.h5";
  run({"--steps", "12", "--hidden", "8", "--seed", "2", "--out", out});
  h5::File f(out, h5::File::Mode::read);
  CHECK(h5::attr_str(f.get_attr("/", "experiment")) == "sine");
  CHECK(h5::attr_str(f.get_attr("/", "config.hidden")) == "8");
  CHECK(h5::attr_str(f.get_attr("/", "command_line")) == "heed run sine");
  CHECK(f.read_tensor("models/mlp/nb_parameters").to_vector<int64_t>() == std::vector<int64_t>{1 * 8 + 8 + 8 * 8 + 8 + 8 + 1});
  std::string params = h5::attr_str(f.get_attr("models/mlp", "parameters"));
  CHECK(params.find("l2.weight [8, 8]") != std::string::npos);
  Tensor loss = f.read_tensor("metrics/train_loss");  // [12, 3]: step, value, wall seconds
  REQUIRE(loss.shape() == Shape{12, 3});
  std::vector<double> rows = loss.to_vector<double>();
  for (int64_t i = 0; i < 12; ++i) CHECK(rows[static_cast<size_t>(3 * i)] == static_cast<double>(i + 1));
  // The first row is the MSE of the initial network, as train_sine reports it.
  experiments::SineOptions o;
  o.steps = 12;
  o.hidden = 8;
  o.seed = 2;
  o.print_every = 0;
  experiments::SineResult r = experiments::train_sine(o);
  CHECK(rows[1] == r.initial_mse);
  std::vector<double> fin = f.read_tensor("metrics/final_mse").to_vector<double>();
  REQUIRE(fin.size() == 3);
  CHECK(fin[0] == 12.0);
  CHECK(fin[1] == r.final_mse);
}

TEST_CASE("sine resume: train_sine stopped and resumed through the library returns the uninterrupted result") {
  test::TempDir d("heed-sine-resume-");
  experiments::SineOptions o;
  o.steps = 30;
  o.hidden = 8;
  o.print_every = 0;
  experiments::SineResult straight = experiments::train_sine(o);
  o.run.checkpoint = d.path + "/lib.ckpt.h5";
  o.run.stop_after = 11;
  experiments::SineResult first = experiments::train_sine(o);
  CHECK(first.stopped);
  CHECK(first.step == 11);
  o.run.stop_after = 0;
  o.run.resume = o.run.checkpoint;
  experiments::SineResult rest = experiments::train_sine(o);
  CHECK_FALSE(rest.stopped);
  CHECK(rest.step == 30);
  CHECK(rest.initial_mse == straight.initial_mse);
  CHECK(rest.final_mse == straight.final_mse);
  o.run.resume.clear();
  o.run.checkpoint.clear();
  o.run.stop_after = 5;
  test::check_error([&] { experiments::train_sine(o); }, {"train_sine", "stop_after 5", "checkpoint"});
}

TEST_CASE("sine resume: bad checkpoints are refused, naming the problem") {
  test::TempDir d("heed-sine-resume-");
  auto args = small(d.path + "/base.h5");
  args.insert(args.end(), {"--stop-after", "3"});
  REQUIRE(run(args) == 130);
  const std::string good = d.path + "/base.ckpt.h5";
  Checkpoint ck = load_checkpoint(good, "sine");

  SUBCASE("a copy checkpoint") {
    REQUIRE(experiments::run_copy({"--steps", "4", "--batch", "4", "--stop-after", "2", "--out", d.path + "/copy.h5"},
                                  {"heed", "run", "copy"}) == 130);
    test::check_error([&] { run({"--resume", d.path + "/copy.ckpt.h5"}); },
                      {"copy.ckpt.h5", "'copy' experiment", "expected 'sine'"});
  }
  SUBCASE("missing optimiser state") {
    Checkpoint bad = ck;
    bad.tensors.erase("optim/l1.weight/momentum_buffer");
    save_checkpoint(d.path + "/nomom.ckpt.h5", bad);
    test::check_error([&] { run({"--resume", d.path + "/nomom.ckpt.h5"}); },
                      {"SGD", "missing entry", "l1.weight/momentum_buffer"});
  }
  SUBCASE("contradicting option") {
    test::check_error([&] { run({"--resume", good, "--hidden", "16"}); }, {"--hidden 16", "contradicts", "8"});
  }
  SUBCASE("a log is not a checkpoint") {
    test::check_error([&] { run({"--resume", d.path + "/base.h5"}); }, {"not a heed checkpoint"});
  }
}
