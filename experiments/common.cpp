// experiments/common.cpp
#include "experiments/common.h"

#include <ctime>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/kernels.h"

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
