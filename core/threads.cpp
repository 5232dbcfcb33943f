// core/threads.cpp: how heed's OpenMP threads wait (heed::share_cores).
//
// libgomp, the OpenMP runtime of heed and oneDNN, lets a thread that reaches
// a barrier or finishes its share of a parallel loop spin for GOMP_SPINCOUNT
// iterations (300,000 by default: milliseconds) before it sleeps. Alone on
// the machine that costs nothing; beside another busy process it burns the
// time slices the other needs, and two processes with spinning threads slow
// each other down 5-20x (measured: a 2-thread training step beside another
// one, and a sampler beside a training run). libgomp reads its settings once,
// when it is loaded, before main() runs, so the only way to change them from
// inside a program is to start it again with the variable set.
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/runtime.h"

namespace heed {

namespace {
// Spin iterations before a waiting thread sleeps (a few tens of microseconds
// here): long enough to cover the gaps between the parallel regions of a
// training step, short enough to give the cores away when the machine is busy.
constexpr const char* kSpinCount = "1000";
}  // namespace

void share_cores() {
  // The user's own choice, or already restarted.
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT") || std::getenv("HEED_SHARE_CORES")) return;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.eof() && !in.good()) return;
  std::vector<std::string> args;
  for (size_t i = 0; i < all.size();) {
    const size_t end = all.find('\0', i);
    args.push_back(all.substr(i, end == std::string::npos ? std::string::npos : end - i));
    if (end == std::string::npos) break;
    i = end + 1;
  }
  if (args.empty()) return;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  setenv("GOMP_SPINCOUNT", kSpinCount, 1);
  setenv("HEED_SHARE_CORES", "1", 1);  // marks the restarted process (and stops a loop if exec is refused below)
  execv("/proc/self/exe", argv.data());
  // exec failed (no /proc?): carry on with libgomp's defaults.
  unsetenv("GOMP_SPINCOUNT");
}

}  // namespace heed
