// tests/experiments/resume_check.h: what "the same run" means for the resume
// tests: equal logs and equal final checkpoints, bit for bit.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "data/checkpoint.h"
#include "data/h5.h"
#include "test_util.h"

namespace heed::test {

// Every dataset of two logs: metrics by (step, value) (not wall time; metrics
// whose name holds "second" are timings, such as step_seconds and
// tokens_per_second, and differ by nature), series and fixed datasets entirely.
inline void check_same_log(const std::string& a, const std::string& b) {
  h5::File fa(a, h5::File::Mode::read), fb(b, h5::File::Mode::read);
  auto names = fa.list_datasets("/");
  CHECK(names == fb.list_datasets("/"));
  for (const auto& n : names) {
    INFO("dataset " << n);
    Tensor ta = fa.read_tensor(n), tb = fb.read_tensor(n);
    REQUIRE(ta.shape() == tb.shape());
    if (n.rfind("metrics/", 0) == 0) {
      if (n.find("second") != std::string::npos) continue;
      ta = kernel::narrow(ta, 1, 0, 2);  // step, value
      tb = kernel::narrow(tb, 1, 0, 2);
    }
    CHECK(ta.to_vector<double>() == tb.to_vector<double>());
  }
}

// Counters and every tensor of two checkpoints, except keys starting with
// one of skip (timings).
inline void check_same_checkpoint(const std::string& a, const std::string& b, const std::string& experiment,
                                  const std::vector<std::string>& skip = {}) {
  Checkpoint ca = load_checkpoint(a, experiment), cb = load_checkpoint(b, experiment);
  CHECK(ca.counters == cb.counters);
  REQUIRE(ca.tensors.size() == cb.tensors.size());
  for (const auto& [k, t] : ca.tensors) {
    bool skipped = false;
    for (const auto& s : skip) skipped = skipped || k.rfind(s, 0) == 0;
    if (skipped) continue;
    INFO("tensor " << k);
    REQUIRE(cb.tensors.count(k) == 1);
    CHECK(t.shape() == cb.tensors.at(k).shape());
    CHECK(t.to_vector<double>() == cb.tensors.at(k).to_vector<double>());
  }
}

}  // namespace heed::test
