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
