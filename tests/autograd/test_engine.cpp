// tests/autograd/test_engine.cpp: the backward engine's contract: what is
// recorded, how gradients accumulate, when the graph is freed, what closures
// keep alive, deep graphs, grad and anomaly modes, and its error messages.
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <thread>

#include "test_util.h"

using namespace heed;
using test::check_error;

namespace {

Tensor leaf(const std::vector<double>& v, const Shape& s) {
  Tensor t = Tensor::from_f64(v, s);
  t.set_requires_grad(true);
  return t;
}

std::vector<double> grad_of(const Tensor& t) {
  REQUIRE(t.grad().defined());
  return t.grad().to_vector<double>();
}

}  // namespace

TEST_CASE("requires_grad propagates from any input; constants and NoGradGuard record nothing") {
  Tensor x = leaf({1, 2}, {2});
  Tensor c = Tensor::from_f64({3, 4}, {2});
  CHECK(x.is_leaf());
  CHECK_FALSE(c.requires_grad());
  Tensor y = x * c;
  CHECK(y.requires_grad());
  CHECK_FALSE(y.is_leaf());
  CHECK(y.grad_fn()->name == "mul");
  CHECK((c * c).is_leaf());
  CHECK_FALSE((c * c).requires_grad());
  Tensor z = c + y;  // one input requiring grad is enough
  CHECK(z.requires_grad());
  {
    autograd::NoGradGuard no_grad;
    Tensor w = x * c;
    CHECK_FALSE(w.requires_grad());
    CHECK(w.is_leaf());
  }
  // views of a leaf are graph nodes too
  CHECK_FALSE(transpose(reshape(x, {1, 2}), 0, 1).is_leaf());
}

TEST_CASE("a leaf used twice accumulates both uses: d(x*x + x)/dx = 2x + 1") {
  Tensor x = leaf({-1.5, 0, 2}, {3});
  backward(sum(x * x + x));
  CHECK(grad_of(x) == std::vector<double>{-2, 1, 5});
}

TEST_CASE("a diamond waits for both branches before flowing further") {
  // a = 2x feeds c twice, directly and through b = 3a: dc/dx = 2 (1 + 3) = 8.
  Tensor x = leaf({1, 2}, {2});
  Tensor a = x * 2.0;
  Tensor b = a * 3.0;
  backward(sum(a + b));
  CHECK(grad_of(x) == std::vector<double>{8, 8});
}

TEST_CASE("gradients accumulate into a leaf across backward calls until zero_grad") {
  Tensor x = leaf({1, 2}, {2});
  backward(sum(x * 3.0));
  backward(sum(x * x));
  CHECK(grad_of(x) == std::vector<double>{3 + 2, 3 + 4});
  Tensor g = x.grad();
  x.zero_grad();
  CHECK_FALSE(x.grad().defined());
  CHECK(g.to_vector<double>() == std::vector<double>{5, 7});  // the old gradient is not reused
  backward(sum(x * 3.0));
  CHECK(grad_of(x) == std::vector<double>{3, 3});
  CHECK(g.to_vector<double>() == std::vector<double>{5, 7});
}

TEST_CASE("the accumulated gradient owns its storage: it never aliases a tensor of the graph") {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = leaf({0, 0}, {2});
  Tensor up = Tensor::from_f64({10, 20}, {2});
  backward(x + y, up);  // add passes the output gradient straight through
  CHECK_FALSE(x.grad().shares_storage(up));
  CHECK_FALSE(x.grad().shares_storage(y.grad()));
  backward(x * 1.0, up);
  CHECK(grad_of(x) == std::vector<double>{20, 40});
  CHECK(up.to_vector<double>() == std::vector<double>{10, 20});
  CHECK(grad_of(y) == std::vector<double>{10, 20});
}

TEST_CASE("retain_graph keeps the graph for a second backward") {
  Tensor x = leaf({1, 2}, {2});
  Tensor loss = sum(x * x);
  backward(loss, Tensor(), /*retain_graph=*/true);
  backward(loss);
  CHECK(grad_of(x) == std::vector<double>{4, 8});
}

TEST_CASE("a second backward through a freed graph throws naming the op and retain_graph") {
  Tensor x = leaf({1, 2}, {2});
  Tensor h = tanh(x);
  Tensor loss = sum(h);
  backward(loss);
  check_error([&] { backward(loss); }, {"sum", "freed", "heed::backward(loss, Tensor(), /*retain_graph=*/true)"});
  // a new graph that reaches into the freed part fails the same way, naming that op
  check_error([&] { backward(sum(h * 2.0)); }, {"tanh", "retain_graph"});
}

TEST_CASE("detach shares the data but cuts the graph") {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = x * 2.0;
  Tensor d = detach(y);
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
  CHECK(d.shares_storage(y));
  CHECK(y.requires_grad());  // the original is untouched
  backward(sum(d * x));      // d is a constant here: d(d*x)/dx = d = 2x
  CHECK(grad_of(x) == std::vector<double>{2, 4});
}

TEST_CASE("NoGradGuard: restores on scope exit, nests, and is per thread") {
  CHECK(autograd::is_grad_enabled());
  Tensor x = leaf({1}, {1});
  {
    autograd::NoGradGuard outer;
    CHECK_FALSE(autograd::is_grad_enabled());
    {
      autograd::NoGradGuard inner;
      CHECK_FALSE(autograd::is_grad_enabled());
    }
    CHECK_FALSE(autograd::is_grad_enabled());  // the inner guard restores "off", not "on"
    CHECK((x * 2.0).is_leaf());

    bool other_enabled = false, other_records = false;
    std::thread th([&] {
      other_enabled = autograd::is_grad_enabled();
      other_records = !(x * 2.0).is_leaf();
    });
    th.join();
    CHECK(other_enabled);
    CHECK(other_records);
  }
  CHECK(autograd::is_grad_enabled());
  CHECK_FALSE((x * 2.0).is_leaf());
}

TEST_CASE("backward from a non-scalar needs an explicit gradient of the output's shape and dtype") {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor y = x * 3.0;
  check_error([&] { backward(y); }, {"backward", "not a scalar", "[2, 3]"});
  check_error([&] { backward(y, Tensor::ones({3}, DType::f64)); }, {"backward", "[3]", "[2, 3]"});
  check_error([&] { backward(y, Tensor::ones({2, 3}, DType::f32)); }, {"backward", "float32", "float64"});
  CHECK_FALSE(x.grad().defined());  // nothing ran
  backward(y, Tensor::from_f64({1, 0, -1, 2, 0.5, 0}, {2, 3}));
  CHECK(grad_of(x) == std::vector<double>{3, 0, -3, 6, 1.5, 0});
  // a one-element output of any rank is a scalar loss
  Tensor x2 = leaf({2}, {1, 1});
  backward(x2 * x2);
  CHECK(grad_of(x2) == std::vector<double>{4});
  // backward of a leaf itself
  Tensor x3 = leaf({7}, {});
  backward(x3);
  CHECK(grad_of(x3) == std::vector<double>{1});
}

TEST_CASE("backward of an output that does not require grad throws") {
  Tensor c = Tensor::from_f64({1, 2}, {2});
  check_error([&] { backward(sum(c)); }, {"backward", "does not require grad"});
}

TEST_CASE("only the gradients that are needed are computed") {
  Tensor a = leaf({1, 2}, {2});
  Tensor b = Tensor::from_f64({3, 4}, {2});  // a constant
  Tensor c = leaf({5, 6}, {2});
  std::vector<bool> asked;
  auto probe = [&asked](const Tensor& g, autograd::Grads& gi) {
    asked = {gi.needs(0), gi.needs(1), gi.needs(2)};
    for (size_t i = 0; i < 3; ++i)
      if (gi.needs(i)) gi.set(i, g);
  };
  Tensor y = autograd::record("probe", kernel::binary(kernel::Binary::add, a, c), {a, b, c}, probe);
  backward(sum(y));
  CHECK(asked == std::vector<bool>{true, false, true});
  CHECK_FALSE(b.grad().defined());
  CHECK(grad_of(a) == std::vector<double>{1, 1});

  // through an intermediate: only its own inputs matter
  asked.clear();
  Tensor z = autograd::record("probe", kernel::clone(b), {b, a * 2.0, b}, probe);
  backward(sum(z));
  CHECK(asked == std::vector<bool>{false, true, false});
  CHECK(grad_of(a) == std::vector<double>{1 + 2, 1 + 2});
}

TEST_CASE("a backward closure that returns a wrong shape or dtype is named") {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = autograd::record("bad_shape", kernel::clone(x), {x},
                              [](const Tensor&, autograd::Grads& gi) { gi.set(0, Tensor::ones({2}, DType::f64)); });
  check_error([&] { backward(sum(y)); }, {"bad_shape", "input 0", "[2]", "[3]"});
  Tensor y2 = autograd::record("bad_dtype", kernel::clone(x), {x},
                               [](const Tensor&, autograd::Grads& gi) { gi.set(0, Tensor::ones({3}, DType::f32)); });
  check_error([&] { backward(sum(y2)); }, {"bad_dtype", "input 0", "float32", "float64"});
}

TEST_CASE("backward closures keep only what they read, and release it after backward") {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor w = Tensor::from_f64({4, 5, 6}, {3});  // does not require grad
  std::weak_ptr<Storage> w_data = w.impl()->storage;
  Tensor y = x * w;                               // dL/dx = g * w reads w, never x
  CHECK(x.impl()->storage.use_count() == 1);      // x's data was not captured
  w = Tensor();
  CHECK_FALSE(w_data.expired());                  // the closure keeps w for backward
  Tensor loss = sum(y);
  backward(loss);
  CHECK(w_data.expired());                        // freed with the graph
  CHECK(grad_of(x) == std::vector<double>{4, 5, 6});

  // tanh's backward reads its output, not its input
  Tensor h = tanh(x);
  CHECK(x.impl()->storage.use_count() == 1);
  std::weak_ptr<Storage> h_data = h.impl()->storage;
  Tensor lh = sum(h);
  h = Tensor();
  CHECK_FALSE(h_data.expired());
  backward(lh);
  CHECK(h_data.expired());

  // with retain_graph the saved tensors live as long as the graph
  Tensor v = Tensor::from_f64({1, 1, 1}, {3});
  std::weak_ptr<Storage> v_data = v.impl()->storage;
  Tensor l2 = sum(x * v);
  v = Tensor();
  backward(l2, Tensor(), true);
  CHECK_FALSE(v_data.expired());
  l2 = Tensor();
  CHECK(v_data.expired());
}

TEST_CASE("a 10,000-op chain backpropagates without recursion and gives the right gradient") {
  const int n = 10000;
  Tensor x = leaf({0.5, -2.0}, {2});
  Tensor y = x;
  for (int i = 0; i < n / 2; ++i) y = y * 1.0001 + 0.0;
  backward(sum(y));
  const double expect = std::pow(1.0001, n / 2);
  auto g = grad_of(x);
  CHECK(g[0] == doctest::Approx(expect).epsilon(1e-12));
  CHECK(g[1] == doctest::Approx(expect).epsilon(1e-12));

  // tanh chain: the gradient is the product of (1 - y_i^2), computed here directly
  Tensor x2 = leaf({0.9}, {1});
  Tensor h = x2;
  for (int i = 0; i < n; ++i) h = tanh(h);
  backward(sum(h));
  std::vector<double> ys(n);
  double v = 0.9;
  for (int i = 0; i < n; ++i) ys[i] = v = std::tanh(v);
  double prod = 1;
  for (int i = n; i-- > 0;) prod *= 1.0 - ys[i] * ys[i];
  CHECK(h.item() == doctest::Approx(ys.back()).epsilon(1e-12));
  CHECK(grad_of(x2)[0] == doctest::Approx(prod).epsilon(1e-10));
}

TEST_CASE("dropping a 100,000-op graph without backward does not recurse") {
  Tensor x = leaf({1.0}, {1});
  {
    Tensor y = x;
    for (int i = 0; i < 50000; ++i) y = y * 1.0001 + 0.0;
    CHECK_FALSE(x.impl()->grad_accumulator.expired());  // the chain reaches x
  }  // y and its 100,000 nodes are released here
  CHECK(x.impl()->grad_accumulator.expired());  // nothing leaked
  // the same after a backward that kept the graph
  {
    Tensor y = x;
    for (int i = 0; i < 50000; ++i) y = tanh(y);
    backward(sum(y), Tensor(), true);
  }
  CHECK(x.impl()->grad_accumulator.expired());
  CHECK(x.grad().defined());
}

TEST_CASE("anomaly mode names the op whose output or gradient is not finite") {
  Tensor x = leaf({-1, 2}, {2});
  {
    autograd::AnomalyGuard on;
    CHECK(autograd::is_anomaly_enabled());
    check_error([&] { log(x); }, {"anomaly", "log", "[2]"});
    // NaN sent backward by an op's closure
    Tensor y = autograd::record("make_nan", kernel::clone(x), {x}, [](const Tensor& g, autograd::Grads& gi) {
      gi.set(0, Tensor::full(g.shape(), std::numeric_limits<double>::quiet_NaN(), DType::f64));
    });
    check_error([&] { backward(sum(y)); }, {"anomaly", "make_nan", "gradient"});
    // a finite forward with an infinite derivative: sqrt at 0
    Tensor z = leaf({0, 4}, {2});
    Tensor s = sqrt(z);
    check_error([&] { backward(sum(s)); }, {"anomaly", "sqrt", "gradient"});
    {
      autograd::AnomalyGuard off(false);
      CHECK_FALSE(autograd::is_anomaly_enabled());
      CHECK_NOTHROW(log(x));
    }
    CHECK(autograd::is_anomaly_enabled());
  }
  CHECK_FALSE(autograd::is_anomaly_enabled());
  // off (the default): the same computations run, non-finite values and all
  Tensor lx = log(x);
  CHECK(std::isnan(lx.to_vector<double>()[0]));
  Tensor z = leaf({0, 4}, {2});
  backward(sum(sqrt(z)));
  CHECK(std::isinf(grad_of(z)[0]));
  CHECK(grad_of(z)[1] == 0.25);
}

TEST_CASE("set_requires_grad refuses int64 tensors and non-leaves") {
  Tensor i = Tensor::arange(3, DType::i64);
  check_error([&] { i.set_requires_grad(true); }, {"set_requires_grad", "int64"});
  CHECK_FALSE(i.requires_grad());
  Tensor x = leaf({1}, {1});
  Tensor y = x * 2.0;
  check_error([&] { y.set_requires_grad(true); }, {"set_requires_grad", "leaf"});
  CHECK_NOTHROW(i.set_requires_grad(false));
  x.set_requires_grad(false);
  CHECK_FALSE((x * 2.0).requires_grad());
}

TEST_CASE("the op profiler sums forward and backward time per op and output shape, and only while on") {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  autograd::set_profiling(true);
  CHECK(autograd::is_profiling());
  for (int i = 0; i < 3; ++i) {
    autograd::profile_mark();
    Tensor y = exp(x) * 2.0;
    backward(sum(y));
  }
  autograd::profile_add("(optimiser step)", 0.5);
  autograd::set_profiling(false);
  Tensor z = exp(x);  // not counted: the profiler is off
  backward(sum(z));
  std::map<std::string, autograd::OpTiming> by_op;
  for (const auto& r : autograd::profile_results()) by_op[r.op] = r;
  REQUIRE(by_op.count("exp [2, 3]"));
  CHECK(by_op["exp [2, 3]"].forward_calls == 3);
  CHECK(by_op["exp [2, 3]"].backward_calls == 3);
  CHECK(by_op["exp [2, 3]"].backward_s > 0);
  REQUIRE(by_op.count("sum []"));
  CHECK(by_op["sum []"].forward_calls == 3);
  CHECK(by_op["(accumulate grad)"].backward_calls == 3);
  // Added time is reported as it was given, and sorts first (most time).
  CHECK(by_op["(optimiser step)"].forward_s == 0.5);
  CHECK(autograd::profile_results().front().op == "(optimiser step)");
  // Turning it on again starts a fresh table.
  autograd::set_profiling(true);
  autograd::set_profiling(false);
  CHECK(autograd::profile_results().empty());
}

// ---- fused gradient sums (autograd::Grads::sum_target) ----
namespace {
// h feeds two Linear layers; its gradient, summed by the engine, must be the
// bits of the two products added (one sum: the same in either order).
void check_linear_sum(int64_t rows, int64_t in, int64_t out, uint64_t seed) {
  Tensor h = test::det_tensor({rows, in}, seed).to(DType::f32);
  h.set_requires_grad(true);
  Tensor w1 = test::det_tensor({out, in}, seed + 1).to(DType::f32);
  Tensor w2 = test::det_tensor({out, in}, seed + 2).to(DType::f32);
  Tensor up = test::det_tensor({rows, out}, seed + 3).to(DType::f32);
  backward(linear(h, w1) + linear(h, w2), up);
  const Tensor expect = kernel::binary(kernel::Binary::add, kernel::matmul(up, w1), kernel::matmul(up, w2));
  CHECK(h.grad().to_vector<float>() == expect.to_vector<float>());
  CHECK(up.to_vector<double>() == test::det_tensor({rows, out}, seed + 3).to(DType::f32).to_vector<double>());
}
}  // namespace

TEST_CASE("a Linear adds its input gradient into the sum so far with the bits of a separate add") {
  check_linear_sum(96, 128, 128, 11);  // 3 MFLOP: oneDNN's product, beta = 1
  check_linear_sum(7, 5, 3, 12);       // tiny: OpenBLAS's
  if (test::bf16_here()) {
    set_precision(Precision::bf16);
    try {
      check_linear_sum(96, 128, 128, 13);
    } catch (...) {
      set_precision(Precision::f32);
      throw;
    }
    set_precision(Precision::f32);
  }
}

TEST_CASE("a gradient sum that another tensor sees is never written into") {
  // add passes `up` itself to h's sum; the Linear must not add into it.
  Tensor h = test::det_tensor({32, 64}, 21).to(DType::f32);
  h.set_requires_grad(true);
  Tensor w = test::det_tensor({64, 64}, 22).to(DType::f32);
  Tensor up = test::det_tensor({32, 64}, 23).to(DType::f32);
  const std::vector<float> up0 = up.to_vector<float>();
  backward(h + linear(h, w), up);
  CHECK(up.to_vector<float>() == up0);
  const Tensor expect = kernel::binary(kernel::Binary::add, up, kernel::matmul(up, w));
  CHECK(h.grad().to_vector<float>() == expect.to_vector<float>());
  // A leaf's .grad from an earlier backward is not a sum in flight either.
  const std::vector<float> g1 = h.grad().to_vector<float>();
  backward(linear(h, w) + linear(h, w), up);
  const Tensor d = kernel::matmul(up, w);
  const Tensor expect2 = kernel::binary(kernel::Binary::add, Tensor::from_f64(std::vector<double>(g1.begin(), g1.end()), {32, 64}).to(DType::f32),
                                        kernel::binary(kernel::Binary::add, d, d));
  CHECK(h.grad().to_vector<float>() == expect2.to_vector<float>());
}

TEST_CASE("LayerNorm adds its input gradient into the sum so far with the bits of a separate add") {
  for (const int64_t D : {128, 37}) {
    Tensor h = test::det_tensor({64, D}, 31).to(DType::f32);
    h.set_requires_grad(true);
    Tensor w = test::det_tensor({D}, 32).to(DType::f32), b = test::det_tensor({D}, 33).to(DType::f32);
    Tensor up = test::det_tensor({64, D}, 34).to(DType::f32);
    // The residual stream's pattern: h reaches the output through the norm
    // and around it.
    backward(layer_norm(h, w, b, 1e-5) + h * 2.0, up);
    kernel::LayerNormResult f = kernel::layer_norm_forward(h, w, b, 1e-5);
    kernel::LayerNormGrads gr = kernel::layer_norm_backward(up, h, w, f.mean, f.var, 1e-5);
    const Tensor expect = kernel::binary(kernel::Binary::add, kernel::binary_scalar(kernel::Binary::mul, up, 2.0), gr.x);
    CHECK(h.grad().to_vector<float>() == expect.to_vector<float>());
  }
}

TEST_CASE("a gradient sum of the wrong shape or dtype is refused by the kernels, naming both") {
  Tensor x = test::det_tensor({8, 16}, 91).to(DType::f32), w = test::det_tensor({4, 16}, 92).to(DType::f32);
  Tensor g = test::det_tensor({8, 4}, 93).to(DType::f32);
  check_error([&] { kernel::linear_backward(g, x, w, true, false, Tensor::zeros({8, 15}, DType::f32)); },
              {"linear backward", "[8, 15]", "[8, 16]"});
  check_error([&] { kernel::linear_backward(g, x, w, true, false, Tensor::zeros({8, 16}, DType::f64)); },
              {"linear backward", "float64", "float32"});
  Tensor ln_w = Tensor::ones({16}, DType::f32);
  kernel::LayerNormResult f = kernel::layer_norm_forward(x, ln_w, Tensor::zeros({16}, DType::f32), 1e-5);
  check_error(
      [&] { kernel::layer_norm_backward(x, x, ln_w, f.mean, f.var, 1e-5, Tensor::zeros({16, 8}, DType::f32)); },
      {"layer_norm backward", "[16, 8]", "[8, 16]"});
}

TEST_CASE("a Linear with no outputs leaves the gradient sum it was handed as it was") {
  // Its dX is all zeros: the sum of h's other gradients must come through.
  for (int order = 0; order < 2; ++order) {
    Tensor h = test::det_tensor({4, 3}, 95).to(DType::f32);
    h.set_requires_grad(true);
    Tensor w = Tensor::zeros({0, 3}, DType::f32);
    Tensor twice = sum(h * 2.0), none = sum(linear(h, w));
    backward(order == 0 ? twice + none : none + twice);
    CHECK(h.grad().to_vector<float>() == std::vector<float>(12, 2.0f));
  }
}

TEST_CASE("a Linear with no inputs or no outputs has gradients of the right, empty or zero, shapes") {
  Tensor x = test::det_tensor({2, 5, 3}, 96).to(DType::f32);
  x.set_requires_grad(true);
  Tensor w0 = Tensor::zeros({0, 3}, DType::f32), b0 = Tensor::zeros({0}, DType::f32);
  w0.set_requires_grad(true);
  b0.set_requires_grad(true);
  backward(sum(linear(x, w0, b0)) + sum(x));
  CHECK(x.grad().to_vector<float>() == std::vector<float>(30, 1.0f));
  CHECK(w0.grad().shape() == Shape{0, 3});
  CHECK(b0.grad().shape() == Shape{0});
  Tensor e = Tensor::zeros({2, 5, 0}, DType::f32);
  e.set_requires_grad(true);
  Tensor wi = test::det_tensor({4, 0}, 97).to(DType::f32), bi = test::det_tensor({4}, 98).to(DType::f32);
  wi.set_requires_grad(true);
  bi.set_requires_grad(true);
  backward(sum(linear(e, wi, bi)));
  CHECK(e.grad().shape() == Shape{2, 5, 0});
  CHECK(wi.grad().shape() == Shape{4, 0});
  CHECK(bi.grad().to_vector<float>() == std::vector<float>(4, 10.0f));
}
