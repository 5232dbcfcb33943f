// tests/experiments/test_stop_request.cpp: Ctrl-C handling shared by every
// experiment (experiments/common.h).
#include <csignal>
#include <vector>

#include "experiments/common.h"
#include "test_util.h"

using namespace heed::experiments;

TEST_CASE("StopRequest: the first SIGINT only sets the flag; the previous handler comes back afterwards") {
  auto outer = std::signal(SIGINT, SIG_IGN);  // a known handler to come back to
  {
    StopRequest ctrl_c;
    CHECK_FALSE(ctrl_c.requested());
    std::raise(SIGINT);  // the process goes on
    CHECK(ctrl_c.requested());
  }
  bool restored = std::signal(SIGINT, SIG_IGN) == SIG_IGN;
  CHECK(restored);
  {
    StopRequest again;  // a new run starts without the old request
    CHECK_FALSE(again.requested());
  }
  std::signal(SIGINT, outer);
}

TEST_CASE("RunControl: stops at stop_after or on Ctrl-C; checkpoints when stopping, every N steps and at the end") {
  RunControl rc;
  rc.checkpoint = "x.ckpt.h5";
  rc.checkpoint_every = 4;
  rc.stop_after = 6;
  CHECK_FALSE(rc.stop_now(5, nullptr));
  CHECK(rc.stop_now(6, nullptr));
  CHECK(rc.checkpoint_now(4, 10, false));
  CHECK_FALSE(rc.checkpoint_now(5, 10, false));
  CHECK(rc.checkpoint_now(5, 10, true));
  CHECK(rc.checkpoint_now(10, 10, false));
  rc.checkpoint.clear();  // nowhere to write
  CHECK_FALSE(rc.checkpoint_now(4, 10, true));
}

TEST_CASE("RunControl::end_step saves when a checkpoint is due and stops only before the last step") {
  RunControl rc;
  rc.checkpoint = "x.ckpt.h5";
  rc.checkpoint_every = 4;
  rc.stop_after = 6;
  std::vector<int64_t> saved;
  int64_t step = 0;
  auto save = [&] { saved.push_back(step); };
  bool stopped = false;
  for (step = 1; step <= 10 && !stopped; ++step) stopped = rc.end_step(step, 10, nullptr, nullptr, save);
  CHECK(stopped);
  CHECK(saved == std::vector<int64_t>{4, 6});  // every 4 steps, and where it stopped
  // Stopping at the last step is just the end of the run (saved, not "stopped").
  rc.stop_after = 10;
  saved.clear();
  step = 10;
  CHECK_FALSE(rc.end_step(10, 10, nullptr, nullptr, save));
  CHECK(saved == std::vector<int64_t>{10});
}
