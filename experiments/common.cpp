// experiments/common.cpp
#include "experiments/common.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/kernels.h"
#include "core/random.h"
#include "layers/module.h"

#ifndef HEED_GIT_COMMIT
#define HEED_GIT_COMMIT "unknown"
#endif
#ifndef HEED_VERSION
#define HEED_VERSION "0.1.0"
#endif

namespace heed::experiments {

std::string heed_version() { return HEED_VERSION; }
std::string git_commit() { return HEED_GIT_COMMIT; }

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) return line.substr(p + 2);
    }
  return "unknown";
}

void write_run_metadata(RunLog& log, const std::string& experiment, const std::vector<std::string>& command_line,
                        const Args& args) {
  std::string cmd;
  for (const auto& a : command_line) cmd += (cmd.empty() ? "" : " ") + a;
  std::time_t now = std::time(nullptr);
  char iso[32];
  std::strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  log.set_attr("experiment", experiment);
  log.set_attr("heed_version", heed_version());
  log.set_attr("git_commit", git_commit());
  log.set_attr("command_line", cmd);
  log.set_attr("threads", static_cast<int64_t>(kernel::num_threads()));
  log.set_attr("cpu", cpu_model());
  log.set_attr("start_time", std::string(iso));
  log.set_attr("backends", kernel::backend_info());
  for (const auto& [k, v] : args.values()) log.set_attr("config." + k, v);
}

void prepare_output_path(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  std::error_code ec;
  if (p.has_parent_path() && !fs::exists(p.parent_path())) {
    fs::create_directories(p.parent_path(), ec);
    if (ec) fail("cannot create directory '{}' for '{}': {}", p.parent_path().string(), path, ec.message());
  }
  if (fs::is_directory(p)) fail("'{}' is a directory; expected a file path like run.h5", path);
  // Probe with a temporary file beside the target: never clobbers the target.
  fs::path probe = p.string() + ".probe";
  {
    std::ofstream f(probe);
    if (!f) fail("cannot write to '{}' (directory not writable?)", path);
  }
  fs::remove(probe, ec);
}

void restore_config(Args& args, const std::map<std::string, std::string>& config, const std::string& command) {
  auto current = args.values();
  for (const auto& [k, v] : config) {
    if (k == "resume" || k == "threads" || k == "checkpoint-every" || k == "stop-after" || k == "checkpoint") continue;
    std::string mine;
    for (const auto& [n, val] : current)
      if (n == k) mine = val;
    if (args.given(k) && mine != v)
      fail("{}: --{} {} contradicts the checkpoint's {} (a resumed run keeps its configuration)", command, k, mine, v);
    args.assign(k, v);
  }
}

std::string default_checkpoint_path(const std::string& out) {
  bool h5 = out.size() > 3 && out.compare(out.size() - 3, 3, ".h5") == 0;
  return (h5 ? out.substr(0, out.size() - 3) : out) + ".ckpt.h5";
}

void log_model(RunLog& log, const std::string& name, const nn::Module& model) {
  log.write_tensor("models/" + name + "/nb_parameters",
                   Tensor::scalar(static_cast<double>(model.num_parameters()), DType::i64));
  log.set_attr("summary", model.summary(), "models/" + name);
  std::string params;
  for (const auto& [n, p] : model.named_parameters()) params += n + " " + shape_str(p.shape()) + "\n";
  log.set_attr("parameters", params, "models/" + name);
}

namespace {
// Set by the first SIGINT while a StopRequest lives; a signal handler may
// only touch lock-free atomics.
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void on_sigint(int) {
  if (g_stop.exchange(true)) {  // the second Ctrl-C: end now, as if no handler were installed
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
  }
}
}  // namespace

StopRequest::StopRequest() {
  g_stop = false;
  previous_ = std::signal(SIGINT, on_sigint);
}

StopRequest::~StopRequest() { std::signal(SIGINT, previous_); }

bool StopRequest::requested() const { return g_stop.load(); }

bool RunControl::stop_now(int64_t step, const StopRequest* ctrl_c) const {
  return (ctrl_c && ctrl_c->requested()) || (stop_after > 0 && step == stop_after);
}

bool RunControl::checkpoint_now(int64_t step, int64_t total, bool stopping) const {
  return !checkpoint.empty() && (stopping || (checkpoint_every > 0 && step % checkpoint_every == 0) || step == total);
}

void add_run_control_options(Args& a, RunControl& rc) {
  a.text("checkpoint", &rc.checkpoint, "checkpoint file (default: the log's name with .ckpt.h5)")
      .integer("checkpoint-every", &rc.checkpoint_every, "write a checkpoint every N steps (0: only at the end)", 0)
      .text("resume", &rc.resume, "continue the run saved in this checkpoint (appends to its log)")
      .integer("stop-after", &rc.stop_after, "stop after step N with a checkpoint, as Ctrl-C does (0: never)", 0);
}

void prepare_run(Args& a, RunControl& rc, const std::string& experiment, const std::string& command,
                 const std::string& out) {
  if (!rc.resume.empty()) {
    restore_config(a, load_checkpoint(rc.resume, experiment).config, command);
    if (!a.given("checkpoint")) rc.checkpoint = rc.resume;
  }
  if (rc.checkpoint.empty()) rc.checkpoint = default_checkpoint_path(out);
  if (rc.resume.empty()) prepare_output_path(out);
  prepare_output_path(rc.checkpoint);
  rc.config.clear();
  for (const auto& [k, v] : a.values()) rc.config[k] = v;
}

void restore_generator(const Checkpoint& ck, const std::string& key, Generator& g) {
  auto it = ck.tensors.find(key);
  if (it == ck.tensors.end()) fail("checkpoint: '{}' is missing", key);
  g.set_state_tensor(it->second);
}

int64_t checkpoint_step(const Checkpoint& ck, int64_t total) {
  const int64_t step = ck.counter("step");
  if (step < 0 || step > total) fail("checkpoint: step {} is outside this run's 0..{} steps", step, total);
  return step;
}

std::vector<double> checkpoint_values(const Checkpoint& ck, const std::string& key, int64_t n) {
  auto it = ck.tensors.find(key);
  if (it == ck.tensors.end() || it->second.shape() != Shape{n})
    fail("checkpoint: '{}' is missing or not of shape [{}]", key, n);
  return it->second.to_vector<double>();
}

void print_stopped(const std::string& command, const Args& a, const std::string& checkpoint, int64_t step,
                   int64_t total) {
  std::string cmd = "heed " + command + " --resume " + checkpoint;
  if (a.given("threads"))
    for (const auto& [k, v] : a.values())
      if (k == "threads") cmd += " --threads " + v;
  fmt::print("\nstopped at step {}/{}; checkpoint written and log flushed.\nresume with: {}\n", step, total, cmd);
  std::fflush(stdout);
}

std::string format_seconds(double s) {
  if (s < 60) return fmt::format("{:.1f}s", s);
  int64_t m = static_cast<int64_t>(s / 60);
  return fmt::format("{}m{:02d}s", m, static_cast<int>(s - 60.0 * static_cast<double>(m)));
}

bool Progress::due(bool force) {
  auto now = std::chrono::steady_clock::now();
  if (force || std::chrono::duration<double>(now - last_).count() >= interval_) {
    last_ = now;
    return true;
  }
  return false;
}

}  // namespace heed::experiments
