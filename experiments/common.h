// experiments/common.h: what the bundled experiments share beyond heed::Run
// (data/run.h): the description of a model in the log, and the table of
// experiments the command-line program dispatches from.
#pragma once

#include <functional>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/run.h"

namespace heed::nn {
class Module;
}

namespace heed::experiments {

// Upper bounds of the experiments' size options: far above anything these
// CPUs train, low enough that products of sizes cannot overflow and that a
// mistyped value is refused naming its option (status 2), not found later
// by an allocation that fails or never ends.
constexpr int64_t kMaxLayers = 256, kMaxWidth = int64_t(1) << 16, kMaxLength = int64_t(1) << 20,
                  kMaxBatch = int64_t(1) << 20, kMaxSamples = int64_t(1) << 26, kMaxRepeats = int64_t(1) << 30;
// Sequences whose T x T attention maps are logged (copy, scaling, crossattn).
constexpr int64_t kMaxMapLength = 4096;

// Memory this process can still allocate, in bytes: the system's available
// memory (MemAvailable in /proc/meminfo), or less when a cgroup's memory
// limit (a container's, a systemd unit's, a batch job's) or an address-space
// limit (ulimit -v) leaves less; -1 when none is known. Under mpirun, the
// memory (and cgroup limit) is shared by the job's processes on this machine
// (processes_on_this_machine), and this process's share of it is what
// counts. `source` (if given) says which: "available memory (MemAvailable)",
// "memory left under the cgroup limit of 8.0 GiB
// (/sys/fs/cgroup/job/memory.max)", either followed by ", this process's
// share of 21.6 GiB among the 2 processes mpirun started on this machine",
// or "address space left under ulimit -v".
int64_t memory_available(std::string* source = nullptr);
// The processes of this MPI job on this machine (Open MPI's
// OMPI_COMM_WORLD_LOCAL_SIZE), 1 outside mpirun (or for a value that is not
// a positive number).
int64_t processes_on_this_machine();
// What cgroup memory limits leave this process, in bytes: the least, over
// its memory cgroup and every cgroup above it, of the limit less that
// cgroup's usage; -1 when no limit is set (or none can be read). Reads
// cgroup v2 (memory.max, memory.current; "0::/path" in proc_cgroup) and v1
// (memory.limit_in_bytes, memory.usage_in_bytes under root/memory;
// "N:memory:/path"). `limit_file` (if given) names the file of the limit
// that leaves the least, `limit` (if given) that limit.
int64_t cgroup_memory_left(const std::string& proc_cgroup = "/proc/self/cgroup",
                           const std::string& root = "/sys/fs/cgroup", std::string* limit_file = nullptr,
                           int64_t* limit = nullptr);

// Refuses up front (UsageError, status 2) a run whose option makes it
// allocate more than memory_available(), before anything is written: the
// kernel would kill it part way (status 137, its log cut off) rather than
// let an allocation fail. `bytes` is what the run allocates up front at
// least (a double: products of option values may pass 2^63), `what` says for
// what. E.g.
//   run crossattn: --test 67108864 needs 24.3 GiB (26085244928 bytes) for the test set (67108864 samples
//   of --length 64), more than the 21.6 GiB of available memory (MemAvailable); expected a smaller --test
void check_memory(const std::string& command, const std::string& option, int64_t value, const std::string& what,
                  double bytes);
// check_memory's refusal for what a command line asks that is not an
// option's number: `subject` is what it asks ("--text 'a.txt' (1000
// bytes)"), `need` what the bytes are for ("to load (...)"; check_memory's
// is "for <what>"), `option` the one to make smaller ("text"). E.g.
//   run charlm: --text 'a.txt' (1000 bytes) needs 1.2 GiB (1288490189 bytes) to load (...), more than the
//   0.9 GiB of available memory (MemAvailable); expected a smaller --text
void check_memory_needed(const std::string& command, const std::string& subject, const std::string& need,
                         const std::string& option, double bytes);

// Tensor blocks alive together at one moment of a run: {bytes of one block,
// how many of them}.
using LiveBlocks = std::vector<std::pair<double, double>>;

// The memory a run's tensors take at least, in bytes, from moments of it
// whose live blocks are known (each moment a lower bound: blocks sure to be
// alive together then): the largest moment's sum. With the allocator's
// cache (core/allocator.h), which keeps a freed block for a later one of
// the same size only, the memory held is for each block size the most blocks
// of it alive at one moment (a training step's activations stay held while
// an evaluation allocates its attention maps), of which at most 4 GiB are
// cached beyond the largest moment. An estimator of a model's needs lists
// its moments and passes the sum to check_memory.
double tensor_memory(const std::vector<LiveBlocks>& moments);

// Describes a model in the log (inside Run::begin's schema): the dataset
// models/<name>/nb_parameters and the attributes summary (the module tree)
// and parameters (one "name [shape]" a line) of models/<name>.
void log_model(RunLog& log, const std::string& name, const nn::Module& model);

// An experiment of `heed run NAME`: its entry point takes the arguments after
// the name and the whole command line (for the log), and returns the exit
// status (130 when stopped with a checkpoint).
struct Experiment {
  const char* name;
  const char* summary;  // one line for `heed --help`
  int (*run)(const std::vector<std::string>& args, const std::vector<std::string>& command_line);
};
const std::vector<Experiment>& experiments();

// What a command that writes a file beside its input checkpoint (heed
// export, attend, quantize) may not write over, refused with a UsageError
// naming the file and what it is (refuse_replacing): the checkpoint being
// read, and any existing file but one this command wrote before. `writes` is
// what the command writes: "safetensors" (heed export's: a safetensors file
// whose metadata names heed_experiment; a PyTorch user's own is refused), a
// run log of experiment `log_experiment`, or "checkpoint" (a quantized one:
// a checkpoint with tensors/quantized; a training checkpoint is refused).
void check_output(const std::string& command, const std::string& out, const std::string& input,
                  const std::string& writes, const std::string& log_experiment = "");

// A checkpoint's option as its run saved it (config.<key>): as text, or
// read as an integer >= min, a number or a flag. A missing or malformed
// value is an error naming the file, the option and the value.
std::string config_text(const Checkpoint& ck, const std::string& path, const std::string& key);
int64_t config_int(const Checkpoint& ck, const std::string& path, const std::string& key, int64_t min = 1);
double config_real(const Checkpoint& ck, const std::string& path, const std::string& key);
bool config_flag(const Checkpoint& ck, const std::string& path, const std::string& key);

// A checkpoint's trained models rebuilt from its configuration, weights
// loaded, with the data its run evaluated them on (heed quantize and heed run
// compression change the weights and measure again).
class TrainedModels {
 public:
  virtual ~TrainedModels() = default;
  const std::string& experiment() const { return experiment_; }
  // The models by the name their weights have in the checkpoint: "" for a
  // run of one model (weights under model/), else model/<name>/ ("cnn",
  // "attention" for shapes).
  virtual std::vector<std::string> names() const = 0;
  virtual nn::Module& model(const std::string& name) = 0;
  // The checkpoint key prefix of a model's weights: "model" or "model/<name>".
  static std::string prefix(const std::string& name) { return name.empty() ? "model" : "model/" + name; }
  // What the run reports for the model, in its words and order:
  // charlm {val_loss}; shapes {test_mse, pair_score} (attention), {test_mse} (cnn).
  virtual std::vector<std::pair<std::string, double>> evaluate(const std::string& name) = 0;
  // What heed sample needs besides the checkpoint to sample the model (a
  // charlm trained on another text than the Bible: " --prompt '...'", from
  // its own text); "" when nothing is.
  virtual std::string sample_options() const { return ""; }

 protected:
  std::string experiment_;
};

// The models of a charlm or shapes checkpoint; a checkpoint of another
// experiment is refused naming it and the two that can be evaluated. `text`
// (the command's option text_option, e.g. "--text"): where a charlm run's
// text is now (charlm_trained_models); given for another checkpoint, it is
// refused.
std::unique_ptr<TrainedModels> trained_models(const Checkpoint& ck, const std::string& path, const std::string& who,
                                              const std::string& text = "", const std::string& text_option = "");

// Runs a command's body so that every message it throws starts with
// "<command>: " once, as those of Args do: what it calls (a checkpoint
// that does not load, a file that cannot be written) names no command. A bad
// command line's message (UsageError) is kept on one line: a control
// character in it (a value's newline, quoted in the message) is shown
// escaped, \n, \t, \x01.
int with_command_prefix(const std::string& command, const std::function<int()>& body);

}  // namespace heed::experiments
