// core/format.h: printing tensors with fmt and iostreams.
//
//   fmt::print("{}\n", t);   std::cout << t;   t.str();
//
// all give PyTorch's layout (see Tensor::str in core/format.cpp):
//
//   tensor([[ 1.0000,  2.0000],
//           [ 3.0000,  4.0000]], shape=[2, 2], dtype=float32)
#pragma once

#include <ostream>
#include <string_view>

#include <fmt/format.h>

#include "core/tensor.h"

namespace heed {

std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace heed

// Accepts the string format spec ("{:>60}" pads the whole text, as for a string).
template <>
struct fmt::formatter<heed::Tensor> : fmt::formatter<std::string_view> {
  auto format(const heed::Tensor& t, fmt::format_context& ctx) const {
    const std::string s = t.str();
    return fmt::formatter<std::string_view>::format(s, ctx);
  }
};
