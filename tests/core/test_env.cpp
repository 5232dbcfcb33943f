// tests/core/test_env.cpp: the HEED_* environment variables (core/env.h):
// one set of yes/no values for every flag, and a bad value of any variable
// named by env::problem().
#include <algorithm>
#include <cstdlib>
#include <optional>
#include <string>

#include "core/env.h"
#include "test_util.h"

using namespace heed;

namespace {
// Sets `name` to `value` for its scope (nullptr: unset), then puts back what was there.
struct EnvFor {
  std::string name;
  std::optional<std::string> was;
  EnvFor(const char* n, const char* value) : name(n) {
    if (const char* v = std::getenv(n)) was = v;
    if (value) setenv(n, value, 1);
    else unsetenv(n);
  }
  ~EnvFor() {
    if (was) setenv(name.c_str(), was->c_str(), 1);
    else unsetenv(name.c_str());
  }
};
}  // namespace

TEST_CASE("env::parse_flag: 1/on/true/yes and 0/off/false/no in any case, nothing else") {
  for (const char* v : {"1", "on", "true", "yes", "ON", "True", "YES"}) {
    CAPTURE(v);
    CHECK(env::parse_flag(v) == std::optional<bool>(true));
  }
  for (const char* v : {"0", "off", "false", "no", "OFF", "False", "No"}) {
    CAPTURE(v);
    CHECK(env::parse_flag(v) == std::optional<bool>(false));
  }
  for (const char* v : {"2", "", "y", "enable", "yes please", " 1", "onn"}) {
    CAPTURE(v);
    CHECK_FALSE(env::parse_flag(v).has_value());
  }
}

TEST_CASE("env::flag: the default when unset or empty, the value, or an error naming the variable and value") {
  const char* n = "HEED_NO_CACHE";
  {
    EnvFor e(n, nullptr);
    CHECK(env::flag(n, false) == false);
    CHECK(env::flag(n, true) == true);
  }
  {
    EnvFor e(n, "");
    CHECK(env::flag(n, true) == true);
  }
  {
    EnvFor e(n, "yes");  // was silently ignored: only "1" counted
    CHECK(env::flag(n, false) == true);
  }
  {
    EnvFor e(n, "maybe");
    CHECK_THROWS_WITH_AS(env::flag(n, false), "HEED_NO_CACHE='maybe': expected 1, on, true, yes, 0, off, false or no",
                         Error);
  }
}

TEST_CASE("env::problem names the first bad HEED_* variable, its value and what it takes") {
  // The suite may itself run under HEED_CPU_ISA or HEED_ADAPTIVE_THREADS: EnvFor puts them back.
  EnvFor isa("HEED_CPU_ISA", nullptr);
  EnvFor adaptive("HEED_ADAPTIVE_THREADS", nullptr);
  EnvFor huge("HEED_NO_HUGE_PAGES", nullptr);
  EnvFor cache("HEED_NO_CACHE", nullptr);
  EnvFor fault("HEED_FAULT_KILL_IN_CHECKPOINT_WRITE", nullptr);
  CHECK(env::problem() == "");
  struct Case {
    const char* name;
    const char* value;
    std::string message;  // "" when the value is fine
  };
  for (const Case& c : {Case{"HEED_CPU_ISA", "bogus", "HEED_CPU_ISA: expected baseline, avx2 or avx512, got 'bogus'"},
                        Case{"HEED_CPU_ISA", "baseline", ""},
                        Case{"HEED_ADAPTIVE_THREADS", "2", "HEED_ADAPTIVE_THREADS='2': expected 1, on, true, yes"},
                        Case{"HEED_ADAPTIVE_THREADS", "No", ""},
                        Case{"HEED_NO_HUGE_PAGES", "yes", ""},
                        Case{"HEED_NO_HUGE_PAGES", "sometimes", "HEED_NO_HUGE_PAGES='sometimes': expected"},
                        Case{"HEED_NO_CACHE", "true", ""},
                        Case{"HEED_NO_CACHE", "11", "HEED_NO_CACHE='11': expected"},
                        Case{"HEED_FAULT_KILL_IN_CHECKPOINT_WRITE", "3", ""},
                        Case{"HEED_FAULT_KILL_IN_CHECKPOINT_WRITE", "x3",
                             "HEED_FAULT_KILL_IN_CHECKPOINT_WRITE='x3': expected a count"}}) {
    CAPTURE(c.name);
    CAPTURE(c.value);
    EnvFor e(c.name, c.value);
    const std::string p = env::problem();
    if (c.message.empty()) CHECK(p == "");
    else CHECK(p.rfind(c.message, 0) == 0);
    CHECK(p.find('\n') == std::string::npos);
  }
}

TEST_CASE("env::unknown names the HEED_* variables heed does not read, a misspelling among them") {
  EnvFor typo("HEED_NO_CACHHE", "1");
  EnvFor other("HEED_ZZ_OTHER", "");
  EnvFor fine("HEED_NO_CACHE", "0");
  const std::vector<std::string> odd = env::unknown();
  CHECK(std::find(odd.begin(), odd.end(), "HEED_NO_CACHHE") != odd.end());
  CHECK(std::find(odd.begin(), odd.end(), "HEED_ZZ_OTHER") != odd.end());
  CHECK(std::find(odd.begin(), odd.end(), "HEED_NO_CACHE") == odd.end());
  CHECK(std::is_sorted(odd.begin(), odd.end()));
  for (const char* name : {"HEED_CPU_ISA", "HEED_ADAPTIVE_THREADS", "HEED_NO_HUGE_PAGES", "HEED_PYTHON",
                           "HEED_SHARE_CORES", "HEED_FAULT_KILL_IN_CHECKPOINT_WRITE"})
    CHECK(std::find(env::known().begin(), env::known().end(), name) != env::known().end());
}

TEST_CASE("env::python: HEED_PYTHON's program, found on PATH when it is a name; one that cannot run is named with "
          "its value") {
  {
    EnvFor unset("HEED_PYTHON", nullptr);
    CHECK(env::python() == "/usr/bin/python3");
  }
  {
    EnvFor empty("HEED_PYTHON", "");
    CHECK(env::python() == "/usr/bin/python3");
  }
  {
    // A name, as a shell runs it: `heed plot` spawned "sh" as a path and
    // said "needs sh" although it is installed.
    EnvFor name("HEED_PYTHON", "sh");
    EnvFor path("PATH", "/nonexistent-dir:/bin:/usr/bin");
    CHECK(env::python() == "/bin/sh");
  }
  struct Case {
    const char* value;
    std::string message;
  };
  for (const Case& c : {Case{"/nonexistent/python3", "HEED_PYTHON='/nonexistent/python3': No such file or directory"},
                        Case{"/etc/passwd", "HEED_PYTHON='/etc/passwd' is not an executable program"},
                        Case{"/tmp", "HEED_PYTHON='/tmp' is a directory"},
                        Case{"no-such-python-here", "HEED_PYTHON='no-such-python-here': no program of that name on PATH"}}) {
    CAPTURE(c.value);
    EnvFor bad("HEED_PYTHON", c.value);
    std::string what;
    try {
      env::python();
    } catch (const Error& e) {
      what = e.what();
    }
    CHECK(what.rfind(c.message, 0) == 0);
    CHECK(what.find("expected a Python 3 interpreter with python3-numpy, python3-h5py and python3-matplotlib") !=
          std::string::npos);
  }
}
