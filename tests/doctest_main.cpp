// The test programs' main: doctest's, after share_cores() (ctest runs two
// test processes at once on two cores; spinning OpenMP threads would make
// each many times slower).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "core/runtime.h"

#ifdef __SANITIZE_ADDRESS__
// An allocation that cannot be met fails as in a plain build (null, which
// heed reports as "out of memory allocating N bytes", as its tests check)
// rather than ending the process. ASAN_OPTIONS, when set, adds to this.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
#endif

int main(int argc, char** argv) {
  heed::share_cores();
  return doctest::Context(argc, argv).run();
}
