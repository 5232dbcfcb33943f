// tests/experiments/test_stop_request.cpp: Ctrl-C handling shared by every
// experiment (experiments/common.h).
#include <csignal>

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
