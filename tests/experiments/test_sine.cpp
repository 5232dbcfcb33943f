// tests/experiments/test_sine.cpp: the sine fit behind `heed demo` and
// `heed run sine`.
#include "experiments/sine.h"
#include "test_util.h"

using namespace heed;
using namespace heed::experiments;

TEST_CASE("sine fit: a few hundred steps cut the MSE by more than 100x") {
  SineOptions o;
  o.steps = 300;
  o.print_every = 0;
  SineResult r = train_sine(o);
  INFO("initial " << r.initial_mse << " final " << r.final_mse);
  CHECK(r.initial_mse > 0.05);  // a fresh network is far from sin(x)
  CHECK(r.final_mse < 0.01 * r.initial_mse);
}

TEST_CASE("sine fit: the same seed gives the same run") {
  SineOptions o;
  o.steps = 20;
  o.print_every = 0;
  o.seed = 3;
  SineResult a = train_sine(o), b = train_sine(o);
  CHECK(a.initial_mse == b.initial_mse);
  CHECK(a.final_mse == b.final_mse);
  o.seed = 4;
  CHECK(train_sine(o).initial_mse != a.initial_mse);
}

TEST_CASE("sine fit: options are parsed, and bad values name the value and what was expected") {
  SineOptions o;
  REQUIRE(parse_sine_args({"--steps", "10", "--lr", "0.1", "--hidden", "8", "--seed", "7", "--threads", "1"}, o));
  CHECK(o.steps == 10);
  CHECK(o.lr == 0.1);
  CHECK(o.hidden == 8);
  CHECK(o.seed == 7);
  CHECK(o.threads == 1);
  test::check_error([&] { parse_sine_args({"--steps", "0"}, o); }, {"--steps", "'0'", ">= 1"});
  test::check_error([&] { parse_sine_args({"--lr", "-0.5"}, o); }, {"--lr", "'-0.5'", "> 0"});
  test::check_error([&] { parse_sine_args({"--lr", "fast"}, o); }, {"--lr", "'fast'"});
  test::check_error([&] { parse_sine_args({"--hidden", "2.5"}, o); }, {"--hidden", "'2.5'", "integer"});
  test::check_error([&] { parse_sine_args({"--seed", "-1"}, o); }, {"--seed", "'-1'", ">= 0"});
  test::check_error([&] { parse_sine_args({"--threads"}, o); }, {"--threads", "expects a value"});
  test::check_error([&] { parse_sine_args({"--epochs", "3"}, o); }, {"unknown option", "--epochs"});
  CHECK(run_sine({"--steps", "-3"}) == 2);  // a usage error, reported before any training
}
