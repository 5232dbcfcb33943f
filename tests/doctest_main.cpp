// The test programs' main: doctest's, after share_cores() (ctest runs two
// test processes at once on two cores; spinning OpenMP threads would make
// each many times slower).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "core/runtime.h"

int main(int argc, char** argv) {
  heed::share_cores();
  return doctest::Context(argc, argv).run();
}
