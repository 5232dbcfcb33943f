// core/cpu_loss.cpp: fused cross-entropy from logits. One pass computes each
// row's maximum and log-sum-exp and the loss; backward is softmax minus one-hot, without
// ever materialising log_softmax.
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/fast_math.h"
#include "core/iter.h"
#include "core/kernels.h"
#include "core/lanes.h"

namespace heed::kernel {
namespace {

template <class T>
void ce_forward(const Tensor& logits, const int64_t* pt, int64_t ignore_index, int64_t count, CrossEntropyResult& res) {
  const int64_t R = logits.size(0), V = logits.size(1);
  const T* px = logits.data<T>();
  T* pm = res.saved.row_max.data<T>();
  T* pz = res.saved.log_z.data<T>();
  std::vector<double> row_loss(static_cast<size_t>(R), 0.0);
#pragma omp parallel for schedule(static) if (R * V > kParallelGrain)
  for (int64_t r = 0; r < R; ++r) {
    const T* x = px + r * V;
    T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
    for (int64_t v = 0; v < V; ++v) m = std::max(m, x[v]);
    // The denominator z = c + rest: the c logits equal to the maximum give
    // exactly 1 each, and rest sums the others, as kLanes partial sums
    // (core/lanes.h). lse = m + log c + log1p(rest / c) then keeps its
    // precision where the loss is small (a confident, right prediction: lse
    // just above the target's logit), where a float sum of all the terms
    // would round away most of it.
    T zl[kLanes] = {}, cl[kLanes] = {};
    int64_t v0 = 0;
    for (; v0 + kLanes <= V; v0 += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        const T e = fast::exp_softmax(x[v0 + l] - m), top = x[v0 + l] == m ? T(1) : T(0);
        zl[l] += e - top * e;  // e, or 0 for a maximum (a select: the loop stays branch-free)
        cl[l] += top;
      }
    for (int64_t v = v0; v < V; ++v) {
      const T e = fast::exp_softmax(x[v] - m), top = x[v] == m ? T(1) : T(0);
      zl[v - v0] += e - top * e;
      cl[v - v0] += top;
    }
    const double c = static_cast<double>(lanes_sum(cl)), rest = static_cast<double>(lanes_sum(zl));
    // log z apart from m: lse = m + log z rounded to T (or even to double,
    // for logits near 1e38) would lose log z's digits to m's magnitude.
    // m - x[target] is exact in double.
    const double log_z = std::log(c) + std::log1p(rest / c);
    pm[r] = m;
    pz[r] = static_cast<T>(log_z);
    if (pt[r] != ignore_index) row_loss[r] = (static_cast<double>(m) - static_cast<double>(x[pt[r]])) + log_z;
  }
  double total = 0;
  for (int64_t r = 0; r < R; ++r) total += row_loss[r];  // in order: deterministic
  res.loss.data<T>()[0] =
      static_cast<T>(count > 0 ? total / static_cast<double>(count) : std::numeric_limits<double>::quiet_NaN());
}

template <class T>
void ce_backward(const Tensor& logits, const int64_t* pt, const Tensor& row_max, const Tensor& log_z, int64_t count,
                 int64_t ignore_index, double g, const Tensor& dx) {
  const int64_t R = logits.size(0), V = logits.size(1);
  const T* px = logits.data<T>();
  const T* pm = row_max.data<T>();
  const T* pz = log_z.data<T>();
  T* pd = dx.data<T>();
  const T scale = static_cast<T>(count > 0 ? g / static_cast<double>(count) : 0.0);
#pragma omp parallel for schedule(static) if (R * V > kParallelGrain)
  for (int64_t r = 0; r < R; ++r) {
    T* d = pd + r * V;
    if (pt[r] == ignore_index) {
      for (int64_t v = 0; v < V; ++v) d[v] = T(0);
      continue;
    }
    const T* x = px + r * V;
    // (x - m) - log z, as log_softmax computes it: x - m is exact near the
    // maximum, where the probabilities are large.
    const T m = pm[r], lz = pz[r];
    for (int64_t v = 0; v < V; ++v) d[v] = fast::exp_softmax((x[v] - m) - lz) * scale;
    d[pt[r]] -= scale;
  }
}

}  // namespace

CrossEntropyResult cross_entropy(const Tensor& logits0, const Tensor& targets0, int64_t ignore_index) {
  check_defined(logits0, "cross_entropy");
  check_defined(targets0, "cross_entropy");
  if (logits0.dim() != 2) fail("cross_entropy: expected logits of shape [R, V], got {}", shape_str(logits0.shape()));
  check_dtype(targets0, DType::i64, "cross_entropy targets");
  if (targets0.dim() != 1 || targets0.size(0) != logits0.size(0))
    fail("cross_entropy: targets shape {} does not match logits shape {} (expected [{}])", shape_str(targets0.shape()),
         shape_str(logits0.shape()), logits0.size(0));
  Tensor logits = contiguous(logits0), targets = contiguous(targets0);
  const int64_t R = logits.size(0), V = logits.size(1);
  const int64_t* pt = targets.data<int64_t>();
  int64_t count = 0;
  for (int64_t r = 0; r < R; ++r) {
    if (pt[r] == ignore_index) continue;
    if (pt[r] < 0 || pt[r] >= V)
      fail("cross_entropy: target {} at row {} out of range (expected 0..{} or ignore_index {})", pt[r], r, V - 1,
           ignore_index);
    ++count;
  }
  CrossEntropyResult res;
  res.saved.count = count;
  res.saved.ignore_index = ignore_index;
  res.saved.row_max = Tensor::empty({R}, logits.dtype());
  res.saved.log_z = Tensor::empty({R}, logits.dtype());
  res.loss = Tensor::empty({}, logits.dtype());
  HEED_DISPATCH_FLOAT(logits.dtype(), "cross_entropy", ce_forward<T>(logits, pt, ignore_index, count, res));
  return res;
}

Tensor cross_entropy_backward(const Tensor& logits0, const Tensor& targets0, const CrossEntropySaved& forward,
                              double g) {
  const int64_t count = forward.count, ignore_index = forward.ignore_index;
  Tensor logits = contiguous(logits0), targets = contiguous(targets0);
  Tensor dx = Tensor::empty(logits.shape(), logits.dtype());
  const int64_t* pt = targets.data<int64_t>();
  HEED_DISPATCH_FLOAT(logits.dtype(), "cross_entropy backward", ce_backward<T>(logits, pt, forward.row_max, forward.log_z, count, ignore_index, g, dx));
  return dx;
}

}  // namespace heed::kernel
