// core/cpu_reduce.cpp: sum / mean / max over dims, sum_to, argmax.
//
// Determinism: each output element is reduced by one thread, in index order,
// so results do not depend on the thread count. Float sums accumulate in
// double: it costs little here and keeps long reductions (a loss over 10^6
// elements) accurate.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/iter.h"
#include "core/kernels.h"

namespace heed::kernel {
namespace {

enum class Red { sum, max };

struct Plan {
  Shape out_shape;          // keepdim form (reduced dims are 1)
  std::vector<bool> reduced;
  int64_t reduce_count = 1;
};

Plan make_plan(const Tensor& t, const std::vector<int64_t>& dims, const char* op) {
  Plan p;
  int64_t r = t.dim();
  p.reduced.assign(r, dims.empty());
  for (int64_t d : dims) {
    int64_t nd = normalize_dim(d, r, op);
    if (r == 0) continue;
    if (p.reduced[nd] && !dims.empty()) {
      // a repeated dim is an error, like PyTorch
      bool dup = std::count_if(dims.begin(), dims.end(), [&](int64_t x) { return normalize_dim(x, r, op) == nd; }) > 1;
      if (dup) fail("{}: dim {} appears more than once in the reduction dims", op, nd);
    }
    p.reduced[nd] = true;
  }
  p.out_shape = t.shape();
  for (int64_t d = 0; d < r; ++d)
    if (p.reduced[d]) {
      p.reduce_count *= t.shape()[d];
      p.out_shape[d] = 1;
    }
  return p;
}

Shape drop_reduced(const Plan& p) {
  Shape s;
  for (size_t d = 0; d < p.out_shape.size(); ++d)
    if (!p.reduced[d]) s.push_back(p.out_shape[d]);
  return s;
}

template <class T, class Acc, Red R>
void reduce_into(const Tensor& x, const Plan& p, const Tensor& out) {
  // kept dims iterate the output; reduced dims iterate inside each element.
  Shape kshape, kstrides, rshape, rstrides;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (p.reduced[d]) {
      rshape.push_back(x.shape()[d]);
      rstrides.push_back(x.strides()[d]);
    } else {
      kshape.push_back(x.shape()[d]);
      kstrides.push_back(x.strides()[d]);
    }
  }
  // Merge reduced dims that are adjacent in memory (e.g. N and T of a
  // contiguous [N, T, C] summed to [C]), so the fast path below sees one.
  for (size_t d = rshape.size(); d-- > 1;) {
    if (rstrides[d - 1] == rshape[d] * rstrides[d]) {
      rshape[d - 1] *= rshape[d];
      rstrides[d - 1] = rstrides[d];
      rshape.erase(rshape.begin() + static_cast<std::ptrdiff_t>(d));
      rstrides.erase(rstrides.begin() + static_cast<std::ptrdiff_t>(d));
    }
  }
  const T* px = x.data<T>();
  T* po = out.data<T>();
  const int64_t nout = shape_numel(kshape);
  const int64_t nred = shape_numel(rshape);
  constexpr Acc lowest =
      std::numeric_limits<Acc>::has_infinity ? -std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::lowest();
  const Acc init = R == Red::sum ? Acc(0) : lowest;

  // Fast path: the reduced dims are the slowest ones and the kept dims are one
  // contiguous block (e.g. summing a bias gradient over N*T rows). Add whole
  // rows in order, which vectorises across the kept block.
  Shape kc = contiguous_strides(kshape);
  bool kept_contig = kstrides == kc || nout == 1;
  bool red_outer = true;
  for (int64_t s : rstrides)
    if (s < nout) red_outer = false;
  if (R == Red::sum && kept_contig && red_outer && nout > 1 && rshape.size() == 1) {
    const int64_t rs = rstrides[0];
    // Column blocks, each summed over every row in order by one thread (so
    // the numbers never depend on the cut): at least four when the work is
    // worth sharing (a bias gradient's 128 or 512 columns were one block, on
    // one thread).
    int64_t chunk = 4096;
    if (nout * nred > kParallelGrain) chunk = std::clamp<int64_t>((nout / 4 + 15) / 16 * 16, 32, 4096);
#pragma omp parallel for schedule(static) if (nout * nred > kParallelGrain)
    for (int64_t c0 = 0; c0 < nout; c0 += chunk) {
      int64_t c1 = std::min(nout, c0 + chunk);
      std::vector<Acc> acc(static_cast<size_t>(c1 - c0), Acc(0));
      for (int64_t r = 0; r < nred; ++r) {
        const T* row = px + r * rs;
        for (int64_t j = c0; j < c1; ++j) acc[j - c0] += static_cast<Acc>(row[j]);
      }
      for (int64_t j = c0; j < c1; ++j) po[j] = static_cast<T>(acc[j - c0]);
    }
    return;
  }

  const int nr = static_cast<int>(rshape.size());
  const int nk = static_cast<int>(kshape.size());
#pragma omp parallel for schedule(static) if (nout * nred > kParallelGrain && nout > 1)
  for (int64_t o = 0; o < nout; ++o) {
    int64_t base = 0, rem = o;
    for (int d = nk - 1; d >= 0; --d) {
      base += (rem % kshape[d]) * kstrides[d];
      rem /= kshape[d];
    }
    Acc acc = init;
    if (nr == 1) {
      const T* q = px + base;
      const int64_t s = rstrides[0];
      for (int64_t i = 0; i < nred; ++i) {
        Acc v = static_cast<Acc>(q[i * s]);
        if constexpr (R == Red::sum) acc += v;
        else acc = (v > acc || std::isnan(static_cast<double>(v))) ? v : acc;
      }
    } else {
      std::vector<int64_t> idx(nr, 0);
      for (int64_t i = 0; i < nred; ++i) {
        int64_t off = base;
        for (int d = 0; d < nr; ++d) off += idx[d] * rstrides[d];
        Acc v = static_cast<Acc>(px[off]);
        if constexpr (R == Red::sum) acc += v;
        else acc = (v > acc || std::isnan(static_cast<double>(v))) ? v : acc;
        for (int d = nr - 1; d >= 0; --d) {
          if (++idx[d] < rshape[d]) break;
          idx[d] = 0;
        }
      }
    }
    po[o] = static_cast<T>(acc);
  }
}

Tensor reduce(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, Red r, const char* op) {
  check_defined(x, op);
  Plan p = make_plan(x, dims, op);
  if (r == Red::max && p.reduce_count == 0)
    fail("{}: cannot take the max over an empty dimension (shape {})", op, shape_str(x.shape()));
  Tensor out = Tensor::empty(keepdim ? p.out_shape : drop_reduced(p), x.dtype());
  if (out.numel() == 0) return out;
  switch (x.dtype()) {
    case DType::f32:
      if (r == Red::sum) reduce_into<float, double, Red::sum>(x, p, out);
      else reduce_into<float, float, Red::max>(x, p, out);
      break;
    case DType::f64:
      if (r == Red::sum) reduce_into<double, double, Red::sum>(x, p, out);
      else reduce_into<double, double, Red::max>(x, p, out);
      break;
    case DType::i64:
      if (r == Red::sum) reduce_into<int64_t, int64_t, Red::sum>(x, p, out);
      else reduce_into<int64_t, int64_t, Red::max>(x, p, out);
      break;
  }
  return out;
}

}  // namespace

Tensor sum(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce(t, dims, keepdim, Red::sum, "sum");
}

Tensor mean(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  check_defined(t, "mean");
  if (!t.is_floating()) fail("mean: expected a floating-point tensor, got {}", dtype_name(t.dtype()));
  Plan p = make_plan(t, dims, "mean");
  Tensor s = reduce(t, dims, keepdim, Red::sum, "mean");
  scale_(s, p.reduce_count == 0 ? std::numeric_limits<double>::quiet_NaN() : 1.0 / static_cast<double>(p.reduce_count));
  return s;
}

Tensor amax(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce(t, dims, keepdim, Red::max, "max");
}

Tensor sum_to(const Tensor& t, const Shape& shape) {
  check_defined(t, "sum_to");
  if (t.shape() == shape) return t;
  Shape b = broadcast_shapes(t.shape(), shape, "sum_to");
  if (b != t.shape() || shape.size() > t.shape().size())
    fail("sum_to: shape {} is not a broadcast of {}", shape_str(t.shape()), shape_str(shape));
  size_t lead = t.shape().size() - shape.size();
  std::vector<int64_t> dims;
  for (size_t i = 0; i < t.shape().size(); ++i)
    if (i < lead || (shape[i - lead] == 1 && t.shape()[i] != 1)) dims.push_back(static_cast<int64_t>(i));
  if (dims.empty()) return reshape(t, shape);
  Tensor s = sum(t, dims, true);
  return reshape(s, shape);
}

Tensor argmax(const Tensor& t, int64_t dim, bool keepdim) {
  check_defined(t, "argmax");
  dim = normalize_dim(dim, t.dim(), "argmax");
  if (t.dim() == 0) return Tensor::zeros({}, DType::i64);  // a scalar is its own maximum
  Tensor x = contiguous(t);
  int64_t n = x.shape()[dim];
  if (n == 0) fail("argmax: dim {} is empty", dim);
  int64_t inner = 1, outer = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.shape()[d];
  for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.shape()[d];
  Shape os = x.shape();
  if (keepdim) os[dim] = 1;
  else os.erase(os.begin() + dim);
  Tensor out = Tensor::empty(os, DType::i64);
  int64_t* po = out.data<int64_t>();
  HEED_DISPATCH_ALL(x.dtype(), "argmax", {
    const T* px = x.data<T>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const T* q = px + o * n * inner + i;
        // The first maximum; a NaN counts as the maximum (as PyTorch's, and
        // as max() propagates it): the first NaN is the answer.
        int64_t best = 0;
        for (int64_t k = 1; k < n && q[best * inner] == q[best * inner]; ++k)
          if (q[k * inner] > q[best * inner] || q[k * inner] != q[k * inner]) best = k;
        po[o * inner + i] = best;
      }
  });
  return out;
}

}  // namespace heed::kernel
