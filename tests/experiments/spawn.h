// tests/experiments/spawn.h: running a program (the heed CLI, the example
// user program) as a separate process, as a user would, for the tests that
// kill, interrupt or feed it bad input.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "test_util.h"

extern char** environ;

namespace heed::test {

struct Result {
  int status = 0;  // exit status, or 128 + signal
  std::string out, err;
};

// Starts argv (argv[0] a path) with stdout and stderr into files, in the
// directory cwd (empty: this process's); the pid.
inline pid_t start(const std::vector<std::string>& argv_s, const std::string& out, const std::string& err,
                   const std::string& cwd = "") {
  std::vector<std::string> copy = argv_s;
  std::vector<char*> argv;
  for (auto& s : copy) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());  // after the opens: out, err as given
  // SIGINT as a terminal delivers it, even when this process was started
  // with it ignored (a background job of a script): the tests send it.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t deflt;
  sigemptyset(&deflt);
  sigaddset(&deflt, SIGINT);
  posix_spawnattr_setsigdefault(&attr, &deflt);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0], &fa, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE(rc == 0);
  return pid;
}

inline int wait_status(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Runs argv to its end, its output captured through files in dir (and in
// the directory cwd when one is given).
inline Result run_process(const std::vector<std::string>& argv, const std::string& dir, const std::string& cwd = "") {
  const std::string out = dir + "/.stdout", err = dir + "/.stderr";
  Result r;
  r.status = wait_status(start(argv, out, err, cwd));
  r.out = slurp(out);
  r.err = slurp(err);
  std::remove(out.c_str());
  std::remove(err.c_str());
  return r;
}

#ifdef HEED_CLI_PATH
// The heed program of this build with args, its output captured in dir (and
// run in the directory cwd when one is given).
inline Result heed_cli(std::vector<std::string> args, const std::string& dir, const std::string& cwd = "") {
  args.insert(args.begin(), HEED_CLI_PATH);
  return run_process(args, dir, cwd);
}

// heed_cli under `ulimit -v kib` (address space), for the memory checks.
inline Result heed_under_ulimit(const std::vector<std::string>& args, const std::string& dir, int64_t kib) {
  std::vector<std::string> argv = {"/bin/sh", "-c", "ulimit -v " + std::to_string(kib) + "; exec \"$0\" \"$@\"",
                                   HEED_CLI_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_process(argv, dir);
}
#endif

// An environment variable set for the processes a test starts while this
// lives, then put back as it was (or unset).
struct EnvFor {
  std::string name, was;
  bool had;
  EnvFor(std::string n, const std::string& value) : name(std::move(n)), had(std::getenv(name.c_str()) != nullptr) {
    if (had) was = std::getenv(name.c_str());
    setenv(name.c_str(), value.c_str(), 1);
  }
  ~EnvFor() {
    if (had) setenv(name.c_str(), was.c_str(), 1);
    else unsetenv(name.c_str());
  }
  EnvFor(const EnvFor&) = delete;
  EnvFor& operator=(const EnvFor&) = delete;
};

inline std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace heed::test
