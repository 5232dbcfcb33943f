// tests/experiments/test_copy.cpp: the copy-previous-token task is learned.
#include "experiments/copy.h"
#include "test_util.h"

using namespace heed;

TEST_CASE("copy task: one attention layer reaches >= 99% accuracy with >= 0.9 attention on t-1") {
  experiments::CopyOptions o;
  o.steps = 200;
  o.verbose = false;
  experiments::CopyResult r = experiments::train_copy(o);
  INFO("accuracy " << r.accuracy << ", attention on the previous position " << r.prev_mass);
  CHECK(r.accuracy >= 0.99);
  CHECK(r.prev_mass >= 0.9);
}
