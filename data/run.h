// data/run.h: a training run as one library object. It owns what every
// training program needs around its loop: the command line of the run
// (--out, --checkpoint, --checkpoint-every, --resume, --restart,
// --stop-after, --threads, --precision, --init-from, --steps), the HDF5 log
// (docs/log-format.md) and its metadata, atomic CRC-checked checkpoints
// (docs/checkpoint-format.md), bit-identical resume, Ctrl-C and
// --stop-after, and the progress line. A program
// registers its state once by name (model, optimiser, generators, data
// position, counters) and writes its loop:
//
//   heed::Run run("mine", "what it does", heed::RunOptions("runs/mine.h5").steps(1000));
//   run.args().real("lr", &lr, "learning rate");      // the program's own options
//   if (!run.parse(argc, argv)) return 0;               // --help
//   ... build model, optimiser, data from the options ...
//   run.track("model", model);
//   run.track("optim", opt);
//   run.track("rng/data", gen);
//   run.begin([&](heed::RunLog& log) { log.declare_scalar("train_loss"); });
//   while (run.next()) {
//     ... one step ...
//     run.log().scalar("train_loss", run.step(), loss);
//     run.show("loss", loss);
//   }
//   return run.finish();                               // 0, or 130 (143: SIGTERM) when stopped
//
// Every file is checked before any is touched: a resume that is refused
// (another experiment's checkpoint, another model, a damaged file, an option
// that contradicts the checkpoint) leaves the log and the checkpoint as they
// were.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/state.h"
#include "core/tensor.h"
#include "data/args.h"
#include "data/checkpoint.h"
#include "data/runlog.h"

namespace heed {

// The defaults of a run's own options.
struct RunOptions {
  explicit RunOptions(std::string out) : out_(std::move(out)) {}
  RunOptions& steps(int64_t n) { steps_ = n; return *this; }
  RunOptions& checkpoint_every(int64_t n) { checkpoint_every_ = n; return *this; }
  RunOptions& threads(int64_t n) { threads_ = n; return *this; }
  RunOptions& precision(std::string p) { precision_ = std::move(p); return *this; }
  RunOptions& progress_seconds(double s) { progress_seconds_ = s; return *this; }
  RunOptions& program(std::string p) { program_ = std::move(p); return *this; }
  RunOptions& init_from(bool offered) { init_from_ = offered; return *this; }
  std::string out_;                 // --out: the HDF5 log
  int64_t steps_ = 0;               // --steps; 0: no --steps option, the program calls set_steps()
  int64_t checkpoint_every_ = 500;  // --checkpoint-every N (0: only at the end and when stopped)
  int64_t threads_ = 2;             // --threads
  std::string precision_ = "f32";   // --precision: f32 or bf16 (heed::set_precision)
  double progress_seconds_ = 5.0;   // a progress line at most this often (0: none)
  // How the program is run: --help's usage line, the printed resume command
  // and the command line the log records start with it ("mytool train", a
  // tool with subcommands). Unset: argv[0] with parse(argc, argv), else
  // "heed run <experiment>".
  std::string program_;
  // --init-from: false for a program that trains no one model tracked as
  // "model" (or "model/NAME"), whose Run would refuse it: --help then does
  // not offer it, and given, it is refused at once ("--init-from does not
  // apply: ..."; args().withhold("init-from", why) says it in the program's
  // own words).
  bool init_from_ = true;
};

namespace experiments {
class Run;
}

// The experiments heed comes with (heed run NAME, and heed attend's log):
// "attend", "charlm", "compression", "copy", "crossattn", "scaling",
// "shapes", "sine", "timeseries", in order. heed plot, inspect, export,
// sample and quantize read a log or checkpoint of one of these names as
// that experiment's.
const std::vector<std::string>& bundled_experiments();

class Run {
 public:
  // experiment: the program's name, which its log and checkpoints record
  // (and a resume checks). Refused, before anything is touched (heed::Error
  // naming it), when it is empty or the name of one of heed's bundled
  // experiments (bundled_experiments()): heed plot would draw its log as
  // that experiment's, heed export and sample would read its checkpoints so.
  Run(std::string experiment, std::string summary, RunOptions defaults);
  ~Run();
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  // The program's own options are declared here before parse().
  Args& args() { return args_; }
  // An option of the program's that may take a new value when a run is
  // resumed (like --steps: training for longer). Every other option is
  // restored from the checkpoint, and one given with another value is refused.
  // A value the program hands to something whose state the checkpoint holds
  // comes back from that state at begin(): an optimiser's learning rate is
  // in its state (as in PyTorch), so a changeable --lr takes effect when the
  // program sets it after begin() (opt.set_lr(lr); a schedule sets it each
  // step anyway).
  // Before parse() (which checks a resume's options, and whose --help lists
  // these beside --resume); after it, refused.
  void may_change_on_resume(const std::string& option);
  // An option of the program's whose value `placeholder` (as args().value()
  // shows it, e.g. "-1") stands for a default the program works out after
  // parse() and saves worked out (charlm's --warmup -1: 100 steps, at most a
  // tenth of --steps). Given on resume, the placeholder means the value the
  // run began with: it is accepted, the checkpoint's value is restored, and
  // args().given(option) is false, as when the option is left out. Any other
  // value is refused unless it is the checkpoint's, as for every option.
  void resolved_default(const std::string& option, const std::string& placeholder);
  // An option of the program's that names a file it reads (e.g. --text):
  // --out and --checkpoint may not be that file (--init-from is one already).
  // It is recorded by its absolute path, so a resume from another directory
  // finds it; a resume may name the same file otherwise, or any file when
  // the recorded one is not found (moved): what it holds is the program's
  // to check (e.g. track_constant of its fingerprint).
  // Both before parse(); after it, refused (as may_change_on_resume).
  void reads_file(const std::string& option);

  // Parses the command line, then with --resume loads and verifies the
  // checkpoint, restores the run's whole configuration into the options and
  // checks the log it continues; checks every path; sets the thread count.
  // Touches no file. Returns false when --help was asked for (printed).
  // Throws UsageError on a bad option, heed::Error on anything else (a
  // second call too). From here on Ctrl-C and SIGTERM ask the run to stop
  // (StopRequest): one that comes while the program starts ends the run at
  // its first next(), before its first step. (Before parse(), while the
  // process loads and guard_main restarts it, a signal still ends it.)
  bool parse(const std::vector<std::string>& argv, std::vector<std::string> command_line = {});
  bool parse(int argc, char** argv);

  const std::string& experiment() const { return experiment_; }
  bool resuming() const { return !resume_.empty(); }
  const std::string& log_path() const { return out_; }
  const std::string& checkpoint_path() const { return checkpoint_; }
  int64_t steps() const { return steps_; }
  // For programs whose length is not --steps (e.g. epochs x batches).
  void set_steps(int64_t total);

  // ---- the state a checkpoint holds, each registered once by name ----
  // A name is a path in the checkpoint (docs/checkpoint-format.md): parts
  // joined by single '/', none of them empty or '.' (RunLog's rule for
  // metric names: HDF5 would store "g//x" as "g/x"). A module's or
  // optimiser's state lies under its name, so a name equal to, under or
  // above another tracked one is refused ("model/fc.weight" beside "model"
  // would overwrite the weight), as are names under "ranks/" and the
  // counters "step", "steps" and "processes" (heed's own). The Run tracks the default
  // generator (dropout draws from it) itself, as "rng/default". Refused
  // when called, naming both names: not at the resume, the run lost.
  void track(const std::string& name, Stateful& s);  // name/<key> for each key of its state dict
  // A counter is required in the checkpoint unless `required` is false: one
  // a program added later (a checkpoint from before it resumes with the
  // counter's value as the program set it).
  void track(const std::string& name, int64_t& counter, bool required = true);
  void track(const std::string& name, double& value);  // bit for bit
  // Anything with Tensor state_tensor() and set_state_tensor(const Tensor&):
  // Generator, data::BatchSampler.
  template <class T>
    requires requires(T& t, const Tensor& s) {
      { t.state_tensor() } -> std::same_as<Tensor>;
      t.set_state_tensor(s);
    }
  void track(const std::string& name, T& x) {
    add_entry(name, false, [&x] { return x.state_tensor(); }, [&x](const Tensor& t) { x.set_state_tensor(t); });
  }
  // A tensor the run derives from its inputs (e.g. a tokenizer's alphabet):
  // saved, and on resume compared with the value rebuilt now, bit for bit
  // (refused when they differ: the inputs changed). Not required: a
  // checkpoint without it (from before the program kept it) resumes unchecked.
  // `input`: the option (reads_file) naming the file it is derived from, if
  // one is; a difference is then refused naming that option and file, e.g.
  //   run charlm: --text '/data/v2.txt' is not the file checkpoint 'lm.ckpt.h5' was trained on (its
  //   'corpus/fingerprint' differs: the file changed since the checkpoint, or is another one); expected that file
  void track_constant(const std::string& name, const Tensor& value, bool required = true,
                      const std::string& input = "");

  // Restores every registered piece of state from the checkpoint (resuming:
  // all validated before the log is reopened and cut back to the
  // checkpoint's step), or creates the log, writes the run's metadata, calls
  // schema(log) to declare its datasets, and starts appending.
  void begin(const std::function<void(RunLog&)>& schema = {});
  RunLog& log();  // from begin() until finish(), which closes it

  // Work before the loop (an evaluation of the initial model, logged at
  // step()) runs again on every resume, at the step it resumes from: a row
  // an uninterrupted run does not have. Do it when !resuming() only, or as
  // owed work (owed_work()).

  // The loop: ends the step just done (checkpoint when due, stop on Ctrl-C
  // or --stop-after, progress line), then starts the next one. False when
  // the run is complete or stopped; the first call, when a stop was asked
  // before it, stops before the first step, writing nothing.
  bool next();
  int64_t step() const { return step_; }  // the step in progress, 1-based (0 before the first)
  bool stopped() const { return stopped_; }
  // Whether Ctrl-C or SIGTERM has asked the run to stop; it then stops at the
  // end of the step in progress, as next() does. A program may poll this
  // inside a step's long work (an evaluation over many batches) to cut that
  // work short, and redo what it cut when the run resumes (heed run charlm:
  // the evaluation, first thing): a batch system's SIGTERM is followed by
  // SIGKILL after a grace period. Under mpirun, whether any process of the
  // job was asked: a collective call that every process makes at the same
  // points. False before begin().
  bool stop_requested();
  // Work of a step that such a stop cuts short: `pending`, a counter the
  // program tracks, holds the step whose work is owed (0: none), and
  // `datasets` names the metrics and series that work logs. A run resumed
  // from a checkpoint where pending is not 0 drops those datasets' rows at
  // the checkpoint's step from the log (an earlier resume of the same
  // checkpoint may have logged them), and the program does the work first
  // and sets pending to 0. Before begin().
  void owed_work(const std::string& pending, std::vector<std::string> datasets);
  // A value for the progress line ("loss 1.2345"), kept until replaced.
  void show(const std::string& name, double value);
  // A training loss for the progress line. A loss that is not finite (NaN
  // or inf) means the run diverged: the step ends the run without a
  // checkpoint (the last one stays as it was), next() returns false, and
  // finish() says where and returns 1. Under mpirun every process stops
  // when any one diverges. (Weights that are not finite when a checkpoint
  // is due end the run the same way, shown loss or not.)
  void show_loss(const std::string& name, double value);
  bool diverged() const { return !diverged_.empty(); }
  double seconds() const;  // since begin()

  // Closes the log. When stopped prints where and the command that resumes
  // the run (a new run stopped before its first step: the command that
  // starts it again) and returns 130 (143 when SIGTERM stopped it); when
  // the loss diverged says at which step and returns 1; else returns 0.
  int finish();

 private:
  // The bundled experiments' own Run (heed::experiments::Run, below), which
  // may bear their names.
  friend class experiments::Run;
  struct Bundled {};
  Run(std::string experiment, std::string summary, RunOptions defaults, Bundled);
  struct Entry {
    std::string name;
    const void* object = nullptr;  // the tracked Stateful (a module, an optimiser)
    bool prefix = false;  // a state dict under name/
    std::function<Tensor()> save;
    std::function<void(const Tensor&)> load;
    std::function<std::map<std::string, Tensor>()> save_dict;
    std::function<void(const std::map<std::string, Tensor>&)> load_dict;
  };
  void add_entry(const std::string& name, bool prefix, std::function<Tensor()> save,
                 std::function<void(const Tensor&)> load);
  void check_name(const std::string& name, bool tensor) const;  // tensor: a key under tensors/, else a counter
  void restore_config();
  std::string resume_help() const;  // --resume's help: every option a resume may change
  void check_resumed_step(int64_t at) const;  // refuses a checkpoint's step beyond the run's length
  // Refuses a length that ends the run at the step where a longer one
  // stopped (its end-of-run work undone), unless that step's work is owed.
  void check_unfinished(int64_t at) const;
  int64_t resumed_length() const;  // the length of the checkpoint's run (-1: not known)
  std::string resumable_length(int64_t at) const;  // the lengths a resume from step `at` may ask for, in words
  bool work_owed_at(int64_t at) const;             // owed_work() of step `at` that a stop cut short
  void check_paths();
  void check_resumed_log();
  // In begin(), before the log is touched: its rows up to the checkpoint's
  // step must be the ones the checkpoint was written with (its log_digest),
  // as a resume keeps them (owed work's rows at that step left out).
  void check_log_rows() const;
  [[noreturn]] void refuse_other_log(const std::string& own) const;  // --out missing, the run's log still there
  std::set<std::string> owed_datasets() const;  // the datasets of the work the run owes now (owed_work())
  void restore_state();
  void init_model();
  // --init-from's metadata (kExperimentKey): another experiment's export is
  // refused; with model (the name the run's one model has under model/, ""
  // for "model"), another model's export too.
  void check_init_from(const std::string* model) const;
  std::string save() const;  // "", or what is not finite (then nothing is written)
  static std::string rank_key(const std::string& name, int rank);
  void write_metadata();
  void print_progress(bool force);

  std::string experiment_;
  RunOptions defaults_;
  Args args_;
  std::set<std::string> changeable_;
  std::map<std::string, std::string> placeholders_;  // resolved_default(): option -> placeholder
  std::vector<std::string> input_options_;  // reads_file()
  bool is_input(const std::string& option) const;
  // Throws when parse() was called: `call` ("reads_file('text')") acts on
  // what parse() has done already (parse_did).
  void before_parse(const std::string& call, const char* parse_did) const;
  void check_same_job() const;  // under mpirun: every process's options, data and state shapes are rank 0's
  std::string command_line_;  // as a shell reads it (shell_command; a RunOptions::program as written)
  // The run's own options.
  std::string out_, checkpoint_, resume_, init_from_, precision_;
  bool restart_ = false;  // --restart: a new run may replace an unfinished run's checkpoint or log
  int64_t checkpoint_every_ = 0, stop_after_ = 0, threads_ = 2, steps_ = 0;

  std::unique_ptr<Checkpoint> resume_ck_;  // loaded by parse(), consumed by begin()
  std::vector<Entry> entries_;
  std::map<std::string, int64_t*> counters_;
  std::map<std::string, Tensor> constants_;
  std::map<std::string, std::string> constant_inputs_;  // track_constant(): name -> the option of its file
  std::set<std::string> optional_constants_;
  std::set<std::string> optional_counters_;
  std::map<std::string, std::vector<std::string>> owed_;  // owed_work(): pending counter -> its datasets
  std::unique_ptr<RunLog> log_;
  int log_lock_ = -1;  // the descriptor holding the log's lock while the run goes (data/run.cpp)
  // The checkpoint's lock ("<checkpoint>.lock" beside it) while the run goes:
  // its descriptor, path, and whether this run made the file.
  int checkpoint_lock_ = -1;
  std::string checkpoint_lock_path_;
  bool checkpoint_lock_created_ = false;
  void lock_checkpoint();
  void release_log();  // both locks
  struct StopGuard;
  std::unique_ptr<StopGuard> ctrl_c_;
  int64_t step_ = 0, start_step_ = 0;
  bool in_step_ = false, stopped_ = false, begun_ = false, parsed_ = false;
  bool parse_called_ = false;  // parse() was entered (parsed_: and succeeded)
  bool program_given_ = false;  // RunOptions::program was set: it wins over argv[0]
  // Stopped before the first step: a resumed run's checkpoint stands, a new run wrote none.
  bool stopped_unchanged_ = false;
  bool new_log_ = false;  // resuming into a new log (--out naming no file): the old one is gone
  std::pair<uint64_t, uint64_t> log_file_{0, 0};  // the log's device and inode, from begin() on (rank 0)
  int stop_signal_ = 0;  // the signal that stopped the run (SIGINT, SIGTERM), or 0
  bool job_sigterm_ = false;  // under mpirun: some process of the job got SIGTERM
  bool finished_ = false;     // finish() was called
  std::string run_id_;   // the run's identity, in its log and every checkpoint (data/checkpoint.h)
  std::string diverged_;  // the first non-finite loss shown ("loss nan"), or empty
  int64_t saved_step_ = -1;  // the step of the last checkpoint written or resumed from (-1: none)
  std::string saved_path_;   // and its file
  std::set<std::string> nonfinite_ok_;  // state not finite before any step (a -inf mask buffer): the model's own
  std::vector<std::pair<std::string, double>> shown_;
  std::chrono::steady_clock::time_point t0_, last_progress_;
};

namespace experiments {
// The Run of heed's bundled experiments (experiments/*.cpp, which live in
// this namespace and so name it as plain `Run`): a heed::Run that may bear
// the name of one of them. Nothing else is different.
class Run : public heed::Run {
 public:
  Run(std::string experiment, std::string summary, RunOptions defaults)
      : heed::Run(std::move(experiment), std::move(summary), std::move(defaults), Bundled{}) {}
};
}  // namespace experiments

// The first SIGINT or SIGTERM a StopRequest (a Run's, from its parse())
// has caught and not yet acted on, else 0: for a wait that may never end on
// its own (a pipe with no writer yet) to look at while it waits.
int pending_stop_signal();

// Thrown by such a wait once a signal asks to stop: guard_main ends the
// program with status 128 + signal (130, 143), saying what was waiting.
struct Stopped : Error {
  Stopped(const std::string& what, int sig) : Error(what), signal(sig) {}
  int signal;
};

// Ctrl-C during training (a Run holds one from parse() to finish()). While
// a StopRequest lives, the first SIGINT or
// SIGTERM (kill's default, a batch system's or mpirun's way to end a job)
// only sets a flag that the run reads after each step: it finishes the
// step, writes a checkpoint, flushes the log and returns, and the command
// exits with 128 + the signal (130 for Ctrl-C, 143 for SIGTERM). A second
// one ends the process at once, as usual. The previous handlers come back
// when the StopRequest goes; one at a time. A process started with a signal
// ignored (SIGINT in a script's background job, nohup) keeps ignoring it.
class StopRequest {
 public:
  StopRequest();
  ~StopRequest();
  StopRequest(const StopRequest&) = delete;
  StopRequest& operator=(const StopRequest&) = delete;
  bool requested() const;
  int signal() const;  // SIGINT or SIGTERM once requested, else 0

 private:
  void (*previous_)(int);
  void (*previous_term_)(int);
};

// heed export's metadata in a safetensors file: the experiment of the
// checkpoint (heed_experiment) and, for a checkpoint of several models, the
// one exported (heed_model: shapes' "cnn" or "attention", scaling's
// "scaled/seed0", ...). A Run's --init-from refuses a file whose
// heed_experiment is not the run's experiment, or whose heed_model is not
// the model the run trains (its one model tracked as "model/NAME"), in one
// line naming the file, what it holds and what the run expected; a file
// without them (a PyTorch user's, a program's Module::save) is accepted.
inline constexpr const char* kExperimentKey = "heed_experiment";
inline constexpr const char* kModelKey = "heed_model";

// "runs/x.h5" -> "runs/x.ckpt.h5"
std::string default_checkpoint_path(const std::string& out);

// The lock a running Run holds on its checkpoint, for any other writer of a
// file: "<file>.lock" beside the file (through a symbolic link: beside the
// file it leads to), an OFD lock the kernel drops when its process ends,
// however it ends. Writers replace a file through a temporary one beside it,
// "<file>.tmp", which two writers of one file would share: each removes
// what it finds there, and one can move the other's half-written file into
// place. heed quantize and heed export hold this lock on their output while
// they write it, so they never write a file that a running run, or another
// of them, writes (and a run is refused the file they write). When another
// process holds it, throws heed::Error naming the file, the process and
// what it is, e.g.
//   quantize: --out 'c.ckpt.h5' is being written by a run that is still going (process 1234), whose log is
//   '/home/me/a.h5'; expected another --out, or that run to end
class OutputLock {
 public:
  // command: "quantize" (the holder is then shown as "heed quantize"),
  // option: "--out", as messages name them.
  OutputLock(const std::string& path, const std::string& command, const std::string& option);
  ~OutputLock();  // drops the lock; removes the lock file if it made it, or once written()
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;
  // The file is written: the lock file goes at the end even if it was there
  // before (a killed writer's, taken over).
  void written() { written_ = true; }

 private:
  int fd_ = -1;
  std::string lock_path_;
  bool created_ = false, written_ = false;
};
// Checks that a file can be created at path (naming the path when not):
// its directory, or the nearest existing one above it, is a writable
// directory, and path is none, or not a directory or special file; a '..'
// after a directory that does not exist yet ("nd/../x.h5", which names no
// file until nd is made) is refused. Creates nothing: a refused command
// leaves no directory behind. Throws UsageError
// naming the command and the option that gave the path, when given
// ("run copy: --out 'x' is a directory; expected a file path like run.h5",
// `example` the kind of file the command writes).
void check_output_path(const std::string& path, const std::string& command = "", const std::string& flag = "",
                       const std::string& example = "run.h5");
// The same, then creates the directories path needs, outermost first;
// never touches path itself. Returns the directories it made, in the order
// made (none when they all exist); a failure midway removes them again
// before it throws.
std::vector<std::string> prepare_output_path(const std::string& path, const std::string& command = "",
                                             const std::string& flag = "", const std::string& example = "run.h5");
// Removes directories prepare_output_path made, innermost first, each only
// while it is empty (a refused command's, so that it leaves none behind).
void remove_directories(const std::vector<std::string>& made) noexcept;
// The directories prepare_output_path made for a command's output, removed
// again (each while empty) when the command fails after making them, unless
// kept: a command that throws leaves no directory behind. Declare it before
// the command's OutputLock, whose lock file must go first.
class MadeDirectories {
 public:
  explicit MadeDirectories(std::vector<std::string> made) : made_(std::move(made)) {}
  ~MadeDirectories() {
    if (!kept_) remove_directories(made_);
  }
  MadeDirectories(const MadeDirectories&) = delete;
  MadeDirectories& operator=(const MadeDirectories&) = delete;
  // The output is written: its directories stay.
  void keep() { kept_ = true; }

 private:
  std::vector<std::string> made_;
  bool kept_ = false;
};
// What an output path holds now, so that a command replaces only a file it
// wrote before (or nothing anyone could use) and refuses every other one.
struct ExistingFile {
  enum class Kind {
    none,         // no regular file there, or an empty one (a killed writer's)
    unreadable,   // HDF5 that does not open (a writer killed mid-file)
    not_hdf5,     // any other file: a text, notes, a safetensors file, ...
    hdf5,         // an HDF5 file that is not heed's
    log,          // a heed run log
    checkpoint,   // a heed checkpoint
  };
  Kind kind = Kind::none;
  // A log's or checkpoint's experiment ("?" if it names none); a safetensors
  // file's heed_experiment metadata (heed export's), "" if it has none.
  std::string experiment;
  bool safetensors = false;  // not_hdf5 that reads as a safetensors file (8-byte length, then '{')
  bool quantized = false;    // a checkpoint heed quantize wrote (tensors/quantized)
  // "a heed checkpoint of the 'copy' experiment", "not HDF5", ...
  std::string describe() const;
};
ExistingFile existing_file(const std::string& path);
// Throws UsageError "<command>: --<flag> '<path>' is <what>, which this would
// replace with <writes>; expected a new file (or <again>)" unless the file at
// path is none, unreadable, or one `replaceable` accepts.
void refuse_replacing(const std::string& command, const std::string& flag, const std::string& path,
                      const std::string& writes, const std::string& again,
                      const std::function<bool(const ExistingFile&)>& replaceable);

// "12.3s", "1m05s", "5h00m00s", "2d03h07m"; "over 999 days" from 1000 days on (an ETA of no use)
std::string format_seconds(double s);
std::string cpu_model();
std::string heed_version();
std::string git_commit();
// A new run's identity (run_id): 32 hex digits from the system's entropy.
std::string new_run_id();
// The root attributes that say which heed wrote a log, how and when, as
// every run's log has them (docs/log-format.md): heed_version, git_commit,
// command_line (its words as shell_command() joins them), start_time (now,
// ISO 8601 UTC) and run_id (unless empty). For a log written without a
// heed::Run.
void log_provenance(RunLog& log, const std::vector<std::string>& command_line, const std::string& run_id);
// The root attributes that say what computed a log's numbers, as every
// run's log has them: threads (the count given), processes (dist::size()),
// cpu (cpu_model()) and backends (heed::backend_info()).
void log_machine(RunLog& log, int64_t threads);

// A word as a POSIX shell reads it back: as it is when it holds only
// letters, digits and _@%+=:,./- (and is not empty), else in single quotes,
// a ' in it written '\'' ("a b" -> 'a b', "it's" -> 'it'\''s', "" -> '').
std::string shell_quote(const std::string& word);
// The words joined by spaces, each shell_quote()d: a line that, pasted into
// a shell, runs the same command with the same words.
std::string shell_command(const std::vector<std::string>& words);

class Stopwatch {
 public:
  Stopwatch() : t0_(std::chrono::steady_clock::now()) {}
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
  void reset() { t0_ = std::chrono::steady_clock::now(); }

 private:
  std::chrono::steady_clock::time_point t0_;
};

// A program's main in one line, with nothing escaping as `terminate called`:
//   int main(int argc, char** argv) { return heed::guard_main(argv[0], [&] { ...; return 0; }); }
// runs body and returns its status; a UsageError (a bad option) prints
// "PROGRAM: message" and returns 2, any other exception (std::exception or
// not) prints the same and returns 1, and so does output that could not be
// written to stdout (a full disk) after the body returned 0. Under mpirun the
// other processes are stopped too, and mpirun ends with the same status
// (dist::abort_job), so they never wait for one that failed. First it calls share_cores()
// (core/runtime.h), which may restart the program once: put nothing before it.
int guard_main(const char* program, const std::function<int()>& body);

}  // namespace heed
