// experiments/plot.cpp
#include "experiments/inspect.h"
#include "experiments/plot.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/env.h"
#include "core/error.h"
#include "data/args.h"

extern char** environ;

namespace heed::experiments {

namespace {

constexpr const char* kScript = "experiments/plot/heed_plot.py";

// The interpreter that sees Debian's python3-* packages (a python3 earlier on
// PATH may be another installation without them). HEED_PYTHON overrides it
// (env::python). Messages start with `who`.
std::string python_path(const std::string& who) {
  std::string python;
  try {
    python = env::python();
  } catch (const Error& e) {
    fail("{}: {}", who, e.what());
  }
  // (HEED_PYTHON was checked above: here the default is missing.)
  if (access(python.c_str(), X_OK) != 0)
    fail("{}: needs {} (Debian packages python3, python3-h5py, python3-matplotlib: "
         "apt-get install python3-h5py python3-matplotlib)",
         who, python);
  return python;
}

// The script in the source tree this program was built from, else beside the
// executable's build directory (build/heed -> experiments/plot/ one level up).
std::string script_path() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
#ifdef HEED_SOURCE_DIR
  candidates.push_back(fs::path(HEED_SOURCE_DIR) / kScript);
#endif
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path().parent_path() / kScript);
    candidates.push_back(exe.parent_path() / "heed_plot.py");
  }
  for (const auto& c : candidates)
    if (fs::is_regular_file(c, ec)) return c.string();
  std::string tried;
  for (const auto& c : candidates) tried += (tried.empty() ? "" : ", ") + c.string();
  fail("plot: cannot find the plotting script heed_plot.py (looked at: {})", tried);
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

struct Output {
  int status = -1;  // exit code, or -1 when killed by a signal
  std::string out, err;
};

// Runs argv[0] with stdout and stderr captured (no shell).
Output run_captured(const std::vector<std::string>& argv) {
  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0) fail("plot: cannot create a pipe");
  if (pipe(err_pipe) != 0) {
    close(out_pipe[0]);
    close(out_pipe[1]);
    fail("plot: cannot create a pipe");
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  posix_spawn_file_actions_addclose(&fa, out_pipe[0]);
  posix_spawn_file_actions_addclose(&fa, err_pipe[0]);
  std::vector<char*> args;
  std::vector<std::string> copy = argv;
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  // The plotting script ends with heed (heed_plot.py: end_with_parent), so a
  // Ctrl-C that reaches heed alone stops the drawing too.
  setenv("HEED_PLOT_PARENT", std::to_string(getpid()).c_str(), 1);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(out_pipe[1]);
  close(err_pipe[1]);
  Output o;
  if (rc != 0) {
    close(out_pipe[0]);
    close(err_pipe[0]);
    fail("plot: cannot run {}: {}", argv[0], std::strerror(rc));
  }
  // Read both pipes until both close (one full pipe must not block the other).
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&o.out, &o.err};
  int open_fds = 2;
  char buf[4096];
  while (open_fds > 0) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& p : fds)
    if (p.fd >= 0) close(p.fd);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) fail("plot: lost track of {}", argv[0]);
  o.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return o;
}

}  // namespace

std::string default_plot_dir(const std::string& log_path) {
  std::string base = log_path;
  if (base.size() > 3 && base.compare(base.size() - 3, 3, ".h5") == 0) base.resize(base.size() - 3);
  return base + "_plots";
}

std::string plot_problem() {
  try {
    const std::string python = python_path("plot");
    Output o = run_captured({python, script_path(), "--check-modules"});
    // The script's answer (CHECKED in heed_plot.py): /bin/true exits 0 too.
    if (o.status == 0 && trim(o.out) == "heed_plot.py: the modules import") return "";
    const std::string err = trim(o.err);
    // The script's own message: one line, status 2 (a missing module).
    if (o.status == 2 && !err.empty() && err.find('\n') == std::string::npos)
      return err.rfind("plot: ", 0) == 0 ? err.substr(6) : err;
    // Anything else, such as a program that is no Python (a shell prints its
    // usage, many lines, with status 2): one line, with the last line it said.
    const char* chosen = std::getenv("HEED_PYTHON");
    return fmt::format("{} cannot run the plotting script ({}{}); expected a Python 3 interpreter with "
                       "python3-numpy, python3-h5py and python3-matplotlib",
                       chosen && *chosen ? fmt::format("HEED_PYTHON='{}'", chosen) : python,
                       o.status < 0 ? std::string("killed")
                       : o.status == 0 ? std::string("exit status 0 without the script's answer")
                                       : fmt::format("exit status {}", o.status),
                       err.empty() ? std::string() : ": " + err.substr(err.rfind('\n') + 1));
  } catch (const Error& e) {
    const std::string what = e.what();
    return what.rfind("plot: ", 0) == 0 ? what.substr(6) : what;
  }
}

std::vector<std::string> plot_log(const std::string& log_path, const std::string& out_dir, bool echo) {
  const std::string python = python_path("plot");
  // Checked here too so the common mistake costs no Python start-up.
  std::error_code ec;
  if (!std::filesystem::exists(log_path, ec)) {
    // Only a missing file is "does not exist": a loop of symbolic links, a
    // directory on the way that cannot be searched, ... are named as they are.
    if (ec) fail("plot: cannot open '{}': {}", log_path, ec.message());
    fail("plot: '{}' does not exist", log_path);
  }
  // heed's own reader first: it gives up on metadata that fails its checksum
  // after a few attempts, where h5py in SWMR mode retried with sleeps for
  // more than 10 minutes (a log with one damaged byte).
  try {
    InspectOptions every_value;
    every_value.read_values = true;  // (the default, said here: plot needs it)
    inspect_file(log_path, every_value);
  } catch (const Error& e) {
    const std::string what = e.what();
    fail("plot: {}", what.rfind("inspect: ", 0) == 0 ? what.substr(9) : what);
  }
  // An interpreter the user chose is checked first: a program that is no
  // Python (a shell) printed its errors about the script's lines as the
  // message, and /bin/true drew nothing with status 0.
  if (const char* chosen = std::getenv("HEED_PYTHON"); chosen && *chosen)
    if (const std::string why = plot_problem(); !why.empty()) fail("plot: {}", why);
  std::string dir = out_dir.empty() ? default_plot_dir(log_path) : out_dir;
  Output o = run_captured({python, script_path(), log_path, "-o", dir});
  // The script exits 2 on a problem it explains in one message (a missing
  // file, a missing Python module); anything else is a bug worth its traceback.
  if (o.status == 2) fail("{}", trim(o.err));
  if (o.status != 0)
    fail("plot: the plotting script failed on '{}' ({}):\n{}", log_path,
         o.status < 0 ? std::string("killed") : fmt::format("exit status {}", o.status), trim(o.err));
  if (!o.err.empty()) fmt::print(stderr, "{}\n", trim(o.err));  // warnings
  std::vector<std::string> files;
  size_t at = 0;
  while (at < o.out.size()) {
    size_t nl = o.out.find('\n', at);
    std::string l = o.out.substr(at, nl == std::string::npos ? std::string::npos : nl - at);
    if (!l.empty()) files.push_back(l);
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  if (echo)
    for (const auto& f : files) fmt::print("{}\n", f);
  return files;
}

int run_plot(const std::vector<std::string>& args) {
  const char* help =
      "usage: heed plot FILE.h5 [-o DIR]\n"
      "\n"
      "Draws a run log as PNG figures and prints each file it writes: loss curves, and per\n"
      "experiment its samples and attention maps (shapes), its probe text's attention\n"
      "(charlm), its forecasts and a signal with one query's attention on it (timeseries), or\n"
      "its drawn signals with their cross-attention to the tokens (crossattn); then every\n"
      "series named like attention maps that those did not draw (a program of your own's),\n"
      "one heatmap per batch and head (the first 16). Works on a log whose run is still\n"
      "writing it. Needs /usr/bin/python3 with python3-h5py and python3-matplotlib (set\n"
      "HEED_PYTHON to use another interpreter).\n"
      "\n"
      "options:\n"
      "  -o, --out DIR    where to write the figures (default: FILE without .h5, plus _plots)\n"
      "  --help           show this help\n";
  for (const auto& a : args)
    if (a == "--help" || a == "-h") {
      fmt::print("{}", help);
      return 0;
    }
  std::string file, dir;
  Args a("plot", "Draws a run log as PNG figures.");
  a.path("out", &dir, "where to write the figures", Args::PathKind::dir).alias("o", "out");
  a.parse(args, &file, "a log file: heed plot FILE.h5 [-o DIR]");
  // A file where the figures' directory goes is the command line's mistake
  // (status 2, as heed attend's -o): the script said "cannot create the
  // directory ...: File exists" with status 1.
  if (std::error_code ec; !file.empty()) {
    const std::string where = dir.empty() ? default_plot_dir(file) : dir;
    const auto st = std::filesystem::status(where, ec);
    if (std::filesystem::exists(st) && !std::filesystem::is_directory(st)) {
      if (!dir.empty())
        throw UsageError(fmt::format("plot: --out '{}' is a file; expected a directory for the figures (or a path "
                                     "where one can be made)",
                                     dir));
      throw UsageError(fmt::format("plot: '{}', where the figures go (FILE without .h5, plus _plots), is a file; "
                                   "expected a directory there, or -o DIR",
                                   where));
    }
  }
  plot_log(file, dir);
  return 0;
}

}  // namespace heed::experiments
