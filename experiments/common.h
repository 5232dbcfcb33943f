// experiments/common.h: what every experiment shares: run metadata for the
// log, progress lines with an ETA, and timing.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "data/runlog.h"
#include "experiments/args.h"

namespace heed::experiments {

// Writes the run's metadata as attributes of the log's root: experiment,
// heed version and git commit, command line, every option ("config.<name>"),
// seed, thread count, CPU, start time.
void write_run_metadata(RunLog& log, const std::string& experiment, const std::vector<std::string>& command_line,
                        const Args& args);

std::string cpu_model();
std::string git_commit();
std::string heed_version();

// Creates the parent directory of path if needed and checks that a file can
// be created there, so a bad --out fails before any work (naming the path).
void prepare_output_path(const std::string& path);

// Resuming continues the same run: sets every option from the checkpoint's
// configuration; an option given on the command line with another value is
// an error. (--resume, --threads, --checkpoint, --checkpoint-every and
// --stop-after may differ.)
void restore_config(Args& args, const std::map<std::string, std::string>& config, const std::string& command);

// "runs/x.h5" -> "runs/x.ckpt.h5"
std::string default_checkpoint_path(const std::string& out);

// "1m05s", "12.3s"
std::string format_seconds(double s);

// Prints a progress line at most every `interval` seconds (and when forced).
class Progress {
 public:
  explicit Progress(double interval = 5.0) : interval_(interval) {}
  bool due(bool force = false);

 private:
  double interval_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now() - std::chrono::hours(1);
};

class Stopwatch {
 public:
  Stopwatch() : t0_(std::chrono::steady_clock::now()) {}
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
  void reset() { t0_ = std::chrono::steady_clock::now(); }

 private:
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace heed::experiments
