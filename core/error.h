// core/error.h: heed's one exception type and the check macro.
//
// Messages follow one pattern so users can act on them: the op's name, what
// was given (values, shapes) and what was expected.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace heed {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace heed

// HEED_CHECK(cond, "matmul: ... {} ...", x): throws heed::Error when cond is false.
#define HEED_CHECK(cond, ...)          \
  do {                                 \
    if (!(cond)) ::heed::fail(__VA_ARGS__); \
  } while (0)
