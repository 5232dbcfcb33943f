// tests/autograd/test_conv.cpp: oneDNN's float32 convolution against the
// float64 direct loop (itself gradient-checked in test_gradcheck.cpp).
#include "test_util.h"

using namespace heed;

namespace {

struct Geo {
  int64_t N, C, T, O, K, stride, padding, dilation;
  bool bias;
};

// float32 accumulation over C*K products of O(1) values: relative error
// ~ sqrt(C K) * 6e-8; 1e-4 absolute leaves a wide margin at these sizes.
constexpr double kTol = 1e-4;

void compare(const Geo& g) {
  INFO("N=" << g.N << " C=" << g.C << " T=" << g.T << " O=" << g.O << " K=" << g.K << " stride=" << g.stride
            << " padding=" << g.padding << " dilation=" << g.dilation << " bias=" << g.bias);
  Tensor x = test::det_tensor({g.N, g.C, g.T}, 1), w = test::det_tensor({g.O, g.C, g.K}, 2);
  Tensor b = g.bias ? test::det_tensor({g.O}, 3) : Tensor();
  std::vector<Tensor> f32{x, w, b}, f64;
  for (const Tensor& t : f32) f64.push_back(t.defined() ? kernel::to_dtype(t, DType::f64) : Tensor());
  std::vector<Tensor> grads32, grads64;
  for (auto* set : {&f32, &f64}) {
    for (Tensor& t : *set)
      if (t.defined()) t.set_requires_grad(true);
    Tensor y = conv1d((*set)[0], (*set)[1], (*set)[2], g.stride, g.padding, g.dilation);
    Tensor gy = test::det_tensor(y.shape(), 4, -1, 1, y.dtype());
    backward(y, gy);
    auto& out = set == &f32 ? grads32 : grads64;
    out.push_back(y);
    for (Tensor& t : *set)
      if (t.defined()) out.push_back(t.grad());
  }
  REQUIRE(grads32.size() == grads64.size());
  for (size_t i = 0; i < grads32.size(); ++i) {
    CHECK(grads32[i].shape() == grads64[i].shape());
    test::check_close(grads32[i], grads64[i].to_vector<double>(), kTol);
  }
}

}  // namespace

TEST_CASE("conv1d: oneDNN float32 forward and both backwards match the float64 loop") {
  compare({2, 3, 9, 4, 3, 1, 0, 1, true});
  compare({3, 8, 100, 16, 5, 1, 2, 1, true});   // the toy task's layer shape, smaller batch
  compare({2, 4, 20, 5, 3, 2, 1, 1, true});     // stride
  compare({2, 4, 21, 5, 3, 3, 2, 1, false});    // stride that does not divide
  compare({2, 4, 20, 5, 3, 1, 2, 2, true});     // dilation
  compare({2, 4, 25, 3, 3, 2, 3, 3, false});    // everything at once
  compare({2, 6, 10, 7, 1, 1, 0, 1, false});    // 1x1 (attention projections)
}

TEST_CASE("conv1d: bad shapes are named") {
  Tensor x = Tensor::zeros({2, 3, 10}), w = Tensor::zeros({4, 5, 3});
  test::check_error([&] { conv1d(x, w); }, {"conv1d", "3 channels", "[2, 3, 10]", "expects 5", "[4, 5, 3]"});
  test::check_error([&] { conv1d(Tensor::zeros({3, 10}), Tensor::zeros({4, 3, 3})); },
                    {"conv1d", "[N, C, T]", "[3, 10]"});
  test::check_error([&] { conv1d(Tensor::zeros({1, 3, 2}), Tensor::zeros({4, 3, 5})); },
                    {"conv1d", "too short", "length 2"});
}
