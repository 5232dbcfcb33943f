// experiments/shapes_metrics.cpp
#include "experiments/shapes_metrics.h"

#include <cmath>

#include "core/kernels.h"

namespace heed::experiments {

PairScore pair_attention_score(const Tensor& attn0, const Tensor& centres0, const Tensor& widths0,
                               const Tensor& partner0) {
  if (attn0.dim() != 3 || attn0.size(1) != attn0.size(2))
    fail("pair_attention_score: expected attention [N, T, T], got {}", shape_str(attn0.shape()));
  const int64_t N = attn0.size(0), T = attn0.size(1), S = centres0.size(1);
  if (centres0.shape() != Shape{N, S} || widths0.shape() != Shape{N, S} || partner0.shape() != Shape{N, S})
    fail("pair_attention_score: centres {}, widths {} and partner {} must all be [{}, S]", shape_str(centres0.shape()),
         shape_str(widths0.shape()), shape_str(partner0.shape()), N);
  Tensor attn = kernel::contiguous(kernel::to_dtype(attn0, DType::f32));
  Tensor c = kernel::contiguous(kernel::to_dtype(centres0, DType::f64));
  Tensor w = kernel::contiguous(kernel::to_dtype(widths0, DType::f64));
  Tensor p = kernel::contiguous(partner0);
  const float* A = attn.data<float>();
  const double* pc = c.data<double>();
  const double* pw = w.data<double>();
  const int64_t* pp = p.data<int64_t>();
  auto inside = [&](int64_t n, int64_t s, int64_t t) {
    return std::abs(static_cast<double>(t) - pc[n * S + s]) < pw[n * S + s] / 2;
  };
  PairScore r;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t s = 0; s < S; ++s) {
      int64_t q = pp[n * S + s];
      for (int64_t t = 0; t < T; ++t) {
        if (!inside(n, s, t)) continue;
        const float* row = A + (n * T + t) * T;
        double m = 0;
        for (int64_t k = 0; k < T; ++k)
          if (inside(n, q, k)) m += row[k];
        r.mass += m;
        ++r.queries;
      }
    }
  return r;
}

}  // namespace heed::experiments
