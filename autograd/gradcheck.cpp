// autograd/gradcheck.cpp
#include "autograd/gradcheck.h"

#include <cmath>

#include "autograd/autograd.h"
#include "autograd/ops.h"
#include "core/error.h"
#include "core/kernels.h"

namespace heed::autograd {
namespace {

// Deterministic weights in [-1, 1] without touching any generator state.
Tensor projection(const Tensor& y) {
  Tensor r = Tensor::empty(y.shape(), y.dtype());
  std::vector<double> v(static_cast<size_t>(y.numel()));
  uint64_t s = 0x9E3779B97F4A7C15ull;
  for (auto& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = static_cast<double>(s % 2000001) / 1000000.0 - 1.0;
  }
  Tensor src = Tensor::from_f64(v, y.shape());
  kernel::copy_(r, src);
  return r;
}

double scalar_loss(const GradcheckFn& f, const std::vector<Tensor>& inputs, const Tensor& r) {
  Tensor y = f(inputs);
  Tensor p = kernel::sum(kernel::binary(kernel::Binary::mul, y, r), {});
  return p.item();
}

void set_elem(const Tensor& t, int64_t i, double v) {
  if (t.dtype() == DType::f64) t.data<double>()[i] = v;
  else t.data<float>()[i] = static_cast<float>(v);
}
double get_elem(const Tensor& t, int64_t i) {
  return t.dtype() == DType::f64 ? t.data<double>()[i] : t.data<float>()[i];
}

}  // namespace

GradcheckResult gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& opt) {
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    if (x.defined() && x.requires_grad() && (!x.is_leaf() || !x.is_contiguous()))
      fail("gradcheck: input {} must be a contiguous leaf (apply views inside f)", k);
    if (x.defined() && x.requires_grad()) x.impl()->grad.reset();
  }
  Tensor y = f(inputs);
  Tensor r = projection(y);
  Tensor loss = sum(mul(y, r));
  backward(loss);

  GradcheckResult res;
  int reported = 0;
  NoGradGuard no_grad;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    if (!x.defined() || !x.requires_grad()) continue;
    Tensor ga = x.grad();
    std::vector<double> analytic = ga.defined() ? ga.to_vector<double>() : std::vector<double>(x.numel(), 0.0);
    for (int64_t i = 0; i < x.numel(); ++i) {
      double orig = get_elem(x, i);
      set_elem(x, i, orig + opt.eps);
      double lp = scalar_loss(f, inputs, r);
      set_elem(x, i, orig - opt.eps);
      double lm = scalar_loss(f, inputs, r);
      set_elem(x, i, orig);
      double numeric = (lp - lm) / (2 * opt.eps);
      double err = std::abs(analytic[i] - numeric);
      res.max_abs_err = std::max(res.max_abs_err, err);
      if (!(err <= opt.atol + opt.rtol * std::abs(numeric))) {
        res.ok = false;
        if (reported++ < 5)
          res.report += fmt::format("input {} element {}: analytic {:.10g} numeric {:.10g} (|diff| {:.3g})\n", k, i,
                                    analytic[i], numeric, err);
      }
    }
  }
  return res;
}

}  // namespace heed::autograd
