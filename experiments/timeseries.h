// experiments/timeseries.h: `heed run timeseries`, the lectures' time-series
// example: forecasting a periodic signal with noise and anomalies, a causal
// attention model against a CNN of similar size (experiments/timeseries_task.h).
#pragma once

#include <string>
#include <vector>

namespace heed::experiments {

// 0 when done, 130 when stopped (Ctrl-C or --stop-after) with a checkpoint.
int run_timeseries(const std::vector<std::string>& args, const std::vector<std::string>& command_line);

}  // namespace heed::experiments
