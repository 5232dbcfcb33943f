// experiments/common.h: what every experiment shares: run metadata for the
// log, checkpoints, --stop-after and Ctrl-C, progress lines with an ETA, and
// timing.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "data/checkpoint.h"
#include "data/runlog.h"
#include "experiments/args.h"

namespace heed {
class Generator;
namespace nn {
class Module;
}
}  // namespace heed

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

// Describes a model in the log (before begin()): the dataset
// models/<name>/nb_parameters and the attributes summary (the module tree)
// and parameters (one "name [shape]" a line) of models/<name>.
void log_model(RunLog& log, const std::string& name, const nn::Module& model);

// Ctrl-C during training. While a StopRequest lives, the first SIGINT only
// sets a flag that the training loop reads after each step: it finishes the
// step, writes a checkpoint, flushes the log and returns, and the command
// exits with 130. A second SIGINT ends the process at once, as usual. The
// previous handler comes back when the StopRequest goes; one at a time.
class StopRequest {
 public:
  StopRequest();
  ~StopRequest();
  StopRequest(const StopRequest&) = delete;
  StopRequest& operator=(const StopRequest&) = delete;
  bool requested() const;

 private:
  void (*previous_)(int);
};

// How a training run is checkpointed, stopped and resumed: the options
// --checkpoint, --checkpoint-every, --resume and --stop-after of the
// experiments whose options structs hold one (copy, sine).
struct RunControl {
  std::string checkpoint;        // write checkpoints here; "": never (and Ctrl-C keeps ending the process)
  int64_t checkpoint_every = 0;  // steps between checkpoints; 0: only at the end and when stopped
  int64_t stop_after = 0;        // stop after this step with a checkpoint, as Ctrl-C does; 0: never
  std::string resume;            // continue the run saved in this checkpoint; "": start afresh
  // The run's options as text, saved in every checkpoint so --resume can
  // restore them (the commands put every option here).
  std::map<std::string, std::string> config;

  // After step `step`: whether the run stops here (Ctrl-C or stop_after) ...
  bool stop_now(int64_t step, const StopRequest* ctrl_c) const;
  // ... and whether a checkpoint is written (when stopping, every
  // checkpoint_every steps, at the last step).
  bool checkpoint_now(int64_t step, int64_t total, bool stopping) const;
  // Both at the end of step `step` of `total`: calls save() when a
  // checkpoint is due, after flushing `log` (when given) so the log and the
  // checkpoint agree, and returns whether the run stops here, before its end.
  template <class Save>
  bool end_step(int64_t step, int64_t total, const StopRequest* ctrl_c, RunLog* log, Save&& save) const {
    const bool stop = stop_now(step, ctrl_c);
    if (checkpoint_now(step, total, stop)) {
      if (log) log->flush();
      save();
    }
    return stop && step < total;
  }
};

// Declares --checkpoint, --checkpoint-every, --resume and --stop-after.
void add_run_control_options(Args& a, RunControl& rc);

// The command's side of --resume, before any work: loads the checkpoint
// (refusing a damaged one or one from another experiment, naming the
// problem), restores its configuration into a (restore_config; this also
// restores the log path bound to `out`), and makes the resumed file the
// checkpoint path unless --checkpoint was given. Without --resume the
// checkpoint path defaults to the log's name with .ckpt.h5. Checks that the
// log (on a fresh run) and the checkpoint can be written, and records every
// option in rc.config. (The training state itself is restored by the run,
// before the command reopens the log.)
void prepare_run(Args& a, RunControl& rc, const std::string& experiment, const std::string& command,
                       const std::string& out);

// The generator state saved under key (restore_generator fails naming the
// checkpoint key when it is missing).
void restore_generator(const Checkpoint& ck, const std::string& key, Generator& g);

// The checkpoint's step counter, which must lie in 0..total (else an error
// naming both).
int64_t checkpoint_step(const Checkpoint& ck, int64_t total);

// The n doubles saved under key (an error when missing or of another shape).
std::vector<double> checkpoint_values(const Checkpoint& ck, const std::string& key, int64_t n);

// After a stopped run: "stopped at step 7/20; checkpoint written and log
// flushed." and the exact command that resumes it (with --threads when it
// was given: the thread count is not part of the saved configuration).
void print_stopped(const std::string& command, const Args& a, const std::string& checkpoint, int64_t step,
                   int64_t total);

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
