// core/format.cpp: Tensor::str(), following PyTorch's torch/_tensor_str.py
// (print options precision=4, threshold=1000, edgeitems=3, linewidth=80):
//
//   - tensors with more than 1000 elements are summarised: each dim longer
//     than 6 shows its first and last 3 entries around "...";
//   - floats use 4 decimals, or scientific notation (1.0000e-05) when the
//     shown nonzero finite magnitudes span more than 1000x, exceed 1e8 or go
//     below 1e-4;
//   - every element is right-aligned to one common width; rows wrap at 80
//     columns.
//
// Two departures from PyTorch, both so that logs read the same from step to
// step: floats always show 4 decimals (PyTorch prints "1." when every value
// is an integer), and float columns always keep one place for a minus sign
// (" 1.0000" lines up with "-1.0000" printed later). The shape and dtype are
// always given; PyTorch omits defaults.
//
// Elements are read straight from storage through the strides, so any view
// prints without a copy and without calling a kernel.
#include "core/format.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace heed {

namespace {

constexpr int64_t kThreshold = 1000;
constexpr int64_t kEdgeItems = 3;
constexpr int64_t kLineWidth = 80;

// Indices shown along a dim of size n: all, or the first and last kEdgeItems
// with -1 standing for the "..." between them.
std::vector<int64_t> shown(int64_t n, bool summarize) {
  std::vector<int64_t> out;
  if (summarize && n > 2 * kEdgeItems) {
    for (int64_t i = 0; i < kEdgeItems; ++i) out.push_back(i);
    out.push_back(-1);
    for (int64_t i = n - kEdgeItems; i < n; ++i) out.push_back(i);
  } else {
    for (int64_t i = 0; i < n; ++i) out.push_back(i);
  }
  return out;
}

class Printer {
 public:
  explicit Printer(const Tensor& t) : t_(t), summarize_(t.numel() > kThreshold) {
    std::vector<int64_t> offsets;
    collect(0, t.offset(), offsets);
    choose_format(offsets);
  }

  // The element at storage offset off, padded to the common width.
  std::string element(int64_t off) const {
    const std::string s = plain(off);
    std::string out(static_cast<size_t>(std::max<int64_t>(0, width_ - static_cast<int64_t>(s.size()))), ' ');
    return out.append(s);
  }

  // The element unpadded (used for scalars).
  std::string plain(int64_t off) const {
    if (!t_.is_floating()) return fmt::format("{}", static_cast<const int64_t*>(t_.impl()->storage->data)[off]);
    return format_float(read_float(off));
  }

  // "[...]" for dims d.. starting at storage offset off; indent is the column
  // of the opening bracket.
  std::string block(int64_t d, int64_t off, int64_t indent) const {
    const int64_t rank = t_.dim();
    const int64_t n = t_.shape()[d], stride = t_.strides()[d];
    std::vector<std::string> parts;
    if (d == rank - 1) {
      for (int64_t i : shown(n, summarize_)) parts.push_back(i < 0 ? " ..." : element(off + i * stride));
      // As many elements per line as fit in kLineWidth after the indent.
      const int64_t per_line = std::max<int64_t>(1, (kLineWidth - indent) / (width_ + 2));
      std::string out = "[";
      for (size_t i = 0; i < parts.size(); ++i) {
        if (i > 0 && static_cast<int64_t>(i) % per_line == 0)
          out.append(",\n").append(indent + 1, ' ');
        else if (i > 0)
          out.append(", ");
        out.append(parts[i]);
      }
      return out.append("]");
    }
    for (int64_t i : shown(n, summarize_)) parts.push_back(i < 0 ? "..." : block(d + 1, off + i * stride, indent + 1));
    // rank - d - 1 newlines: a matrix's rows on consecutive lines, matrices
    // one blank line apart, and so on up.
    std::string out = "[";
    for (size_t i = 0; i < parts.size(); ++i) {
      if (i > 0) out.append(",").append(rank - d - 1, '\n').append(indent + 1, ' ');
      out.append(parts[i]);
    }
    return out.append("]");
  }

 private:
  void collect(int64_t d, int64_t off, std::vector<int64_t>& out) const {
    if (d == t_.dim()) {
      out.push_back(off);
      return;
    }
    for (int64_t i : shown(t_.shape()[d], summarize_))
      if (i >= 0) collect(d + 1, off + i * t_.strides()[d], out);
  }

  double read_float(int64_t off) const {
    const void* p = t_.impl()->storage->data;
    return t_.dtype() == DType::f32 ? static_cast<double>(static_cast<const float*>(p)[off])
                                    : static_cast<const double*>(p)[off];
  }

  std::string format_float(double v) const {
    if (std::isnan(v)) return "nan";  // never "-nan"
    return sci_ ? fmt::format("{:.4e}", v) : fmt::format("{:.4f}", v);
  }

  // Chooses fixed or scientific notation and the column width from the
  // elements that will be shown (like PyTorch's _Formatter).
  void choose_format(const std::vector<int64_t>& offsets) {
    if (!t_.is_floating()) {
      for (int64_t off : offsets) width_ = std::max<int64_t>(width_, static_cast<int64_t>(plain(off).size()));
      return;
    }
    double lo = INFINITY, hi = 0;
    for (int64_t off : offsets) {
      double a = std::abs(read_float(off));
      if (std::isfinite(a) && a != 0) {
        lo = std::min(lo, a);
        hi = std::max(hi, a);
      }
    }
    sci_ = hi > 0 && (hi / lo > 1000.0 || hi > 1.0e8 || lo < 1.0e-4);
    // One extra column for the sign (see the header comment).
    for (int64_t off : offsets)
      width_ = std::max<int64_t>(width_, 1 + static_cast<int64_t>(format_float(std::abs(read_float(off))).size()));
  }

  const Tensor& t_;
  bool summarize_;
  bool sci_ = false;
  int64_t width_ = 1;
};

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  const std::string prefix = "tensor(";
  const int64_t indent = static_cast<int64_t>(prefix.size());
  std::string body;
  if (numel() == 0) {
    body = "[]";
  } else {
    Printer p(*this);
    body = dim() == 0 ? p.plain(offset()) : p.block(0, offset(), indent);
  }

  std::vector<std::string> suffixes;
  if (dim() > 0) suffixes.push_back("shape=" + shape_str(shape()));
  suffixes.push_back(fmt::format("dtype={}", dtype_name(dtype())));
  if (requires_grad()) suffixes.push_back("requires_grad=True");

  // Suffixes go on the last line while it stays within kLineWidth (counting
  // the ", " before and the ")" after), else on a new line at the indent.
  std::string out = prefix + body;
  const size_t newline = out.rfind('\n');
  int64_t line = static_cast<int64_t>(newline == std::string::npos ? out.size() : out.size() - newline - 1);
  for (const std::string& s : suffixes) {
    const int64_t len = static_cast<int64_t>(s.size());
    if (line + 2 + len + 1 > kLineWidth) {
      out.append(",\n").append(indent, ' ').append(s);
      line = indent + len;
    } else {
      out += ", " + s;
      line += 2 + len;
    }
  }
  return out + ")";
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace heed
