// core/env.cpp: the HEED_* environment variables (core/env.h).
#include "core/env.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/kernels.h"
#include "core/runtime.h"

namespace heed::env {

namespace {
constexpr const char* kFlagValues = "1, on, true, yes, 0, off, false or no";

// The yes/no variables and their meaning when unset.
constexpr const char* kFlags[] = {"HEED_ADAPTIVE_THREADS", "HEED_NO_HUGE_PAGES", "HEED_NO_CACHE"};
}  // namespace

std::optional<bool> parse_flag(const std::string& value) {
  std::string v = value;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (v == "1" || v == "on" || v == "true" || v == "yes") return true;
  if (v == "0" || v == "off" || v == "false" || v == "no") return false;
  return std::nullopt;
}

bool flag(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  if (const std::optional<bool> b = parse_flag(v)) return *b;
  fail("{}='{}': expected {}", name, v, kFlagValues);
}

std::string problem() {
  try {
    for (const char* name : kFlags) flag(name, false);
    // An instruction set this CPU has (core/cpu_isa.cpp reads it once, at
    // first use: checked here on its own, also after that).
    if (const char* v = std::getenv("HEED_CPU_ISA"); v && *v)
      kernel::check_cpu_has(parse_cpu_isa(v, "HEED_CPU_ISA"), cpu_isa_max(), fmt::format("HEED_CPU_ISA={}", v));
    // The fault injection of the checkpoint tests: a count.
    if (const char* v = std::getenv("HEED_FAULT_KILL_IN_CHECKPOINT_WRITE"); v && *v) {
      const std::string s(v);
      if (s.size() > 9 || !std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); }))
        fail("HEED_FAULT_KILL_IN_CHECKPOINT_WRITE='{}': expected a count of checkpoints (an integer >= 0)", s);
    }
    // HEED_SHARE_CORES (set or not) takes any value; HEED_PYTHON is checked
    // (env::python) by what runs it, before its work: most commands do not.
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const std::vector<std::string>& known() {
  // HEED_PLOT_PARENT: set by `heed plot` for its plotting script.
  static const std::vector<std::string> names{"HEED_ADAPTIVE_THREADS", "HEED_CPU_ISA", "HEED_FAULT_KILL_IN_CHECKPOINT_WRITE",
                                              "HEED_NO_CACHE", "HEED_NO_HUGE_PAGES", "HEED_PLOT_PARENT",
                                              "HEED_PYTHON", "HEED_SHARE_CORES"};
  return names;
}

std::string python(const std::string& needs) {
  const char* v = std::getenv("HEED_PYTHON");
  if (!v || !*v) return "/usr/bin/python3";
  const std::string value(v);
  const std::string expected =
      fmt::format("expected a Python 3 interpreter with {} (or HEED_PYTHON unset: /usr/bin/python3)", needs);
  auto runnable = [](const std::string& path) {
    struct stat st {};
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
  };
  if (value.find('/') == std::string::npos) {  // a name: the first such program on PATH, as a shell runs it
    const char* path_env = std::getenv("PATH");
    const std::string dirs = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
    for (size_t at = 0; at <= dirs.size();) {
      size_t colon = dirs.find(':', at);
      if (colon == std::string::npos) colon = dirs.size();
      const std::string dir = dirs.substr(at, colon - at);
      const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + value;
      if (runnable(candidate)) return candidate;
      at = colon + 1;
    }
    fail("HEED_PYTHON='{}': no program of that name on PATH; {}", value, expected);
  }
  struct stat st {};
  if (stat(value.c_str(), &st) != 0) fail("HEED_PYTHON='{}': {}; {}", value, std::strerror(errno), expected);
  if (S_ISDIR(st.st_mode)) fail("HEED_PYTHON='{}' is a directory; {}", value, expected);
  if (!runnable(value)) fail("HEED_PYTHON='{}' is not an executable program; {}", value, expected);
  return value;
}

std::string unknown_note() {
  static std::atomic<bool> said{false};
  const std::vector<std::string> odd = unknown();
  if (odd.empty() || said.exchange(true)) return "";
  return fmt::format("{} {} not {} heed reads (it reads {}); ignored", fmt::join(odd, ", "),
                     odd.size() == 1 ? "is" : "are", odd.size() == 1 ? "a variable" : "variables",
                     fmt::join(known(), ", "));
}

std::vector<std::string> unknown() {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry(*e);
    if (entry.rfind("HEED_", 0) != 0) continue;
    const std::string name = entry.substr(0, entry.find('='));
    if (std::find(known().begin(), known().end(), name) == known().end()) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace heed::env
