// tests/autograd/test_layernorm.cpp: layer_norm's oneDNN float32 path against
// its float64 loop (itself gradient-checked in test_gradcheck.cpp), and the
// fused op against the same normalisation composed from primitive ops.
#include "test_util.h"

using namespace heed;

namespace {

// The lectures' LayerNorm from primitives; its gradients come from theirs.
Tensor composed_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  Tensor mu = mean(x, {-1}, true);
  Tensor xc = x - mu;
  Tensor var = mean(xc * xc, {-1}, true);
  return xc / sqrt(var + eps) * w + b;
}

// Forward and dL/dx, dL/dw, dL/db of f on (x, w, b) with a fixed output
// gradient; x is built as `make(x_leaf)` so callers can pass views.
std::vector<Tensor> run(const Shape& xs, DType dt, double offset,
                        const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& f,
                        bool transposed = false) {
  Shape leaf_shape = xs;
  if (transposed) std::swap(leaf_shape[leaf_shape.size() - 1], leaf_shape[leaf_shape.size() - 2]);
  const int64_t D = xs.back();
  Tensor x = kernel::to_dtype(test::det_tensor(leaf_shape, 1, offset - 2.0, offset + 2.0, DType::f64), dt);
  Tensor w = test::det_tensor({D}, 2, 0.5, 1.5, dt), b = test::det_tensor({D}, 3, -0.5, 0.5, dt);
  for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
  Tensor xin = transposed ? transpose(x, -1, -2) : x;
  Tensor y = f(xin, w, b);
  backward(y, test::det_tensor(y.shape(), 4, -1, 1, dt));
  return {y, x.grad(), w.grad(), b.grad()};
}

void compare(const std::vector<Tensor>& a, const std::vector<Tensor>& b, double tol) {
  const char* names[] = {"y", "dL/dx", "dL/dw", "dL/db"};
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(names[i]);
    CHECK(a[i].shape() == b[i].shape());
    test::check_close(a[i], b[i].to_vector<double>(), tol);
  }
}

auto fused = [](const Tensor& x, const Tensor& w, const Tensor& b) { return layer_norm(x, w, b, 1e-5); };
auto composed = [](const Tensor& x, const Tensor& w, const Tensor& b) { return composed_layer_norm(x, w, b, 1e-5); };

}  // namespace

TEST_CASE("layer_norm: oneDNN float32 forward and all three gradients match the float64 loop") {
  struct Case {
    Shape shape;
    double offset;
    bool transposed;
  };
  // float32 sums over D terms of O(1) values: errors ~ sqrt(D) * 6e-8 times
  // the gradient's size; 2e-4 leaves a wide margin. dL/dw and dL/db sum over
  // all R rows as well.
  for (const Case& c : {Case{{2, 3, 5}, 0.0, false}, Case{{64, 128}, 0.0, false}, Case{{3, 40, 256}, 0.0, false},
                        Case{{4, 7, 33}, 0.0, true}, Case{{16, 128}, 10.0, false}, Case{{1, 1}, 0.0, false},
                        Case{{3, 7, 37}, 0.0, false}}) {
    INFO("shape " << shape_str(c.shape) << " offset " << c.offset << " transposed " << c.transposed);
    compare(run(c.shape, DType::f32, c.offset, fused, c.transposed),
            run(c.shape, DType::f64, c.offset, fused, c.transposed), 2e-4 * std::sqrt(static_cast<double>(c.shape[0])));
  }
}

TEST_CASE("layer_norm: the fused op equals the composed mean / var / normalise, values and gradients") {
  for (const Shape& s : {Shape{3, 5}, Shape{2, 4, 128}, Shape{6, 1}}) {
    INFO("shape " << shape_str(s));
    compare(run(s, DType::f64, 0.0, fused), run(s, DType::f64, 0.0, composed), 1e-12);
    compare(run(s, DType::f32, 0.0, fused), run(s, DType::f32, 0.0, composed), 1e-4);
  }
}

TEST_CASE("layer_norm: saved statistics are each row's mean and biased variance") {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = Tensor::from_f64({1, 2, 3, 4, -2, 0, 2, 8}, {2, 4});
    x = kernel::to_dtype(x, dt);
    auto r = kernel::layer_norm_forward(x, Tensor::ones({4}, dt), Tensor::zeros({4}, dt), 1e-5);
    test::check_close(r.mean, {2.5, 2.0}, 1e-6);
    test::check_close(r.var, {1.25, 14.0}, 1e-5);
    // Row 0: (x - 2.5) / sqrt(1.25 + 1e-5)
    const double s = 1.0 / std::sqrt(1.25 + 1e-5);
    test::check_close(narrow(r.y, 0, 0, 1), {-1.5 * s, -0.5 * s, 0.5 * s, 1.5 * s}, 1e-5);
    // A row whose variance (5e-7) is below eps, where eps's place shows:
    // 1 / sqrt(var + eps) = 308.6, not 1 / (sqrt(var) + eps) = 1394.6.
    Tensor q = kernel::to_dtype(Tensor::from_f64({0, 1e-3, -1e-3, 0}, {1, 4}), dt);
    auto rq = kernel::layer_norm_forward(q, Tensor::ones({4}, dt), Tensor::zeros({4}, dt), 1e-5);
    const double t = 1.0 / std::sqrt(5e-7 + 1e-5);
    const std::vector<double> want{0.0, 1e-3 * t, -1e-3 * t, 0.0}, got = rq.y.to_vector<double>();
    for (size_t i = 0; i < 4; ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5));
  }
}

TEST_CASE("layer_norm: without weight and bias it only normalises") {
  Tensor x = test::det_tensor({3, 6}, 9);
  Tensor y = layer_norm(x, Tensor(), Tensor());
  for (double m : kernel::mean(y, {-1}).to_vector<double>()) CHECK(std::abs(m) < 1e-6);
  for (double v : kernel::mean(kernel::binary(kernel::Binary::mul, y, y), {-1}).to_vector<double>())
    CHECK(std::abs(v - 1.0) < 1e-3);  // var / (var + eps)
}

TEST_CASE("layer_norm: bad shapes and dtypes are named") {
  Tensor x = Tensor::zeros({2, 5});
  test::check_error([&] { layer_norm(x, Tensor::ones({4}), Tensor::zeros({4})); },
                    {"layer_norm", "[2, 5]", "[5]", "[4]"});
  test::check_error([&] { layer_norm(x, Tensor::ones({5}, DType::f64), Tensor::zeros({5})); },
                    {"layer_norm", "float64"});
  test::check_error([&] { layer_norm(Tensor::scalar(1.0), Tensor(), Tensor()); }, {"layer_norm", "[.., D]"});
  test::check_error([&] { layer_norm(x, Tensor(), Tensor(), 0.0); }, {"layer_norm", "eps"});
}

namespace {

// Layer norm and its three gradients over rows of D, in plain float64 loops
// (no heed code): the reference for the float32 kernel. With dm, each row's
// mean taken as off by dm, the rest computed as the kernel does from it.
struct LnRef {
  std::vector<double> y, gx, gw, gb, xhat, rstd, s_dn, s_dnx;
};
LnRef ln_reference(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                   const std::vector<double>& gy, int64_t R, int64_t D, double eps, double dm = 0) {
  LnRef r;
  r.y = r.gx = r.xhat = std::vector<double>(x.size());
  r.gw = r.gb = std::vector<double>(static_cast<size_t>(D));
  for (int64_t i = 0; i < R; ++i) {
    const double* xr = x.data() + i * D;
    const double* gr = gy.data() + i * D;
    double m = 0, v = 0, s_dn = 0, s_dnx = 0;
    for (int64_t d = 0; d < D; ++d) m += xr[d];
    m = m / static_cast<double>(D) + dm;
    for (int64_t d = 0; d < D; ++d) v += (xr[d] - m) * (xr[d] - m);
    const double rstd = 1.0 / std::sqrt(v / static_cast<double>(D) + eps);
    for (int64_t d = 0; d < D; ++d) {
      const size_t e = static_cast<size_t>(i * D + d);
      r.xhat[e] = (xr[d] - m) * rstd;
      r.y[e] = r.xhat[e] * w[d] + b[d];
      s_dn += gr[d] * w[d];
      s_dnx += gr[d] * w[d] * r.xhat[e];
      r.gw[d] += gr[d] * r.xhat[e];
      r.gb[d] += gr[d];
    }
    s_dn /= static_cast<double>(D);
    s_dnx /= static_cast<double>(D);
    for (int64_t d = 0; d < D; ++d) {
      const size_t e = static_cast<size_t>(i * D + d);
      r.gx[e] = rstd * (gr[d] * w[d] - s_dn - r.xhat[e] * s_dnx);
    }
    r.rstd.push_back(rstd);
    r.s_dn.push_back(s_dn);
    r.s_dnx.push_back(s_dnx);
  }
  return r;
}

}  // namespace

// A row's mean summed as is in float32 partials carried their rounding error
// e (0.001 for 12345.678 over 1000 floats) into x - m and, as e^2, into the
// variance: a constant row of 12345.678 normalised to 0.88, not 0, and its
// input gradient was half the true one. Rows of R = 3: two through the
// float kernel's row pair, the third alone.
TEST_CASE("layer_norm: float32 constant and near-constant rows with a large offset, forward and gradients") {
  const double eps = 1e-5;
  const int64_t R = 3;
  auto to_f32 = [](std::vector<double> v) {  // the reference sees the kernel's float32 inputs
    for (double& e : v) e = static_cast<double>(static_cast<float>(e));
    return v;
  };
  for (int64_t D : {1, 15, 16, 17, 100, 1000, 4097}) {
    const std::vector<double> wv = to_f32(test::det_values(D, 12, 0.5, 1.5));
    const std::vector<double> bv = to_f32(test::det_values(D, 13, -0.5, 0.5));
    const std::vector<double> gv = to_f32(test::det_values(R * D, 14, -1.0, 1.0));
    for (double offset : {12345.678, 1000.3, -31415.927, 0.7}) {
      for (double spread : {0.0, 1e-2}) {
        INFO("D " << D << ", rows of " << offset << " +- " << spread);
        std::vector<double> xv = to_f32(test::det_values(R * D, 11, offset - spread, offset + spread));
        if (spread == 0.0) xv.assign(xv.size(), static_cast<double>(static_cast<float>(offset)));
        const LnRef ref = ln_reference(xv, wv, bv, gv, R, D, eps);
        Tensor x = kernel::to_dtype(Tensor::from_f64(xv, {R, D}), DType::f32);
        Tensor w = kernel::to_dtype(Tensor::from_f64(wv, {D}), DType::f32);
        Tensor b = kernel::to_dtype(Tensor::from_f64(bv, {D}), DType::f32);
        for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
        Tensor y = layer_norm(x, w, b, eps);
        backward(y, kernel::to_dtype(Tensor::from_f64(gv, {R, D}), DType::f32));
        const std::vector<double> yh = y.to_vector<double>(), gxh = x.grad().to_vector<double>(),
                                  gwh = w.grad().to_vector<double>(), gbh = b.grad().to_vector<double>();
        // The float32 mean can be off from the row's by its own rounding,
        // half an ulp of the offset (none for a constant row, whose mean is
        // its value exactly); allowed here: up to a whole ulp. Off by dm, xhat
        // moves by dm * rstd and the variance grows by dm^2: the tolerance
        // is the references' spread over dm in [-ulp, ulp] (times 1.25), plus
        // float32 rounding, ~1e-5 of the values' scale.
        const float of = static_cast<float>(std::abs(offset));
        const double ulp = spread == 0.0 ? 0.0 : static_cast<double>(std::nextafter(of, INFINITY) - of);
        const double rstd = *std::max_element(ref.rstd.begin(), ref.rstd.end());
        // dL/dw sums gy * xhat over rows, each row's mean off its own way.
        std::vector<double> tol_y(xv.size(), 0.0), tol_gx(xv.size(), 0.0), tol_gwt(xv.size(), 0.0),
            tol_gw(wv.size(), 0.0);
        for (double k : {-1.0, -0.5, 0.5, 1.0}) {
          const LnRef moved = ln_reference(xv, wv, bv, gv, R, D, eps, k * ulp);
          for (size_t e = 0; e < xv.size(); ++e) {
            tol_y[e] = std::max(tol_y[e], std::abs(moved.y[e] - ref.y[e]));
            tol_gx[e] = std::max(tol_gx[e], std::abs(moved.gx[e] - ref.gx[e]));
            tol_gwt[e] = std::max(tol_gwt[e], std::abs(gv[e] * (moved.xhat[e] - ref.xhat[e])));
          }
        }
        for (size_t e = 0; e < xv.size(); ++e) tol_gw[e % wv.size()] += tol_gwt[e];
        int bad_y = 0, bad_gx = 0, bad_gw = 0;
        for (size_t e = 0; e < xv.size(); ++e) {
          bad_y += !(std::abs(yh[e] - ref.y[e]) <= 1.25 * tol_y[e] + 1e-5 * (1 + std::abs(ref.y[e])));
          bad_gx += !(std::abs(gxh[e] - ref.gx[e]) <= 1.25 * tol_gx[e] + 1e-5 * rstd);
        }
        for (size_t d = 0; d < wv.size(); ++d)
          bad_gw += !(std::abs(gwh[d] - ref.gw[d]) <= 1.25 * tol_gw[d] + 1e-5 * R * (1 + std::abs(ref.gw[d])));
        CHECK(bad_y == 0);
        CHECK(bad_gx == 0);
        CHECK(bad_gw == 0);
        test::check_close(b.grad(), ref.gb, 1e-5 * R);
        if (spread == 0.0) {  // y is the bias exactly; dL/dw = sum gy * xhat exactly 0
          int not_bias = 0;
          for (int64_t e = 0; e < R * D; ++e) not_bias += yh[static_cast<size_t>(e)] != bv[static_cast<size_t>(e % D)];
          CHECK(not_bias == 0);
          CHECK(test::max_abs(w.grad()) == 0.0);
        }
      }
    }
  }
}
