// tests/autograd/test_conv.cpp: the float32 convolutions (heed's GEMM on
// CPUs with AVX2 or AVX-512, core/cpu_conv_gemm.cpp; oneDNN elsewhere; the
// Winograd and one-output-channel kernels where they apply) against the
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

// The same values stored channels-last: [N, C, T] viewing [N, T, C] storage.
Tensor channels_last(const Tensor& t) {
  return kernel::permute(kernel::contiguous(kernel::permute(t, {0, 2, 1})), {0, 2, 1});
}

void compare(const Geo& g, bool cl = false) {
  INFO("N=" << g.N << " C=" << g.C << " T=" << g.T << " O=" << g.O << " K=" << g.K << " stride=" << g.stride
            << " padding=" << g.padding << " dilation=" << g.dilation << " bias=" << g.bias
            << " channels_last=" << cl);
  Tensor x = test::det_tensor({g.N, g.C, g.T}, 1), w = test::det_tensor({g.O, g.C, g.K}, 2);
  if (cl) x = channels_last(x);
  Tensor b = g.bias ? test::det_tensor({g.O}, 3) : Tensor();
  std::vector<Tensor> f32{x, w, b}, f64;
  for (const Tensor& t : f32) f64.push_back(t.defined() ? kernel::to_dtype(t, DType::f64) : Tensor());
  std::vector<Tensor> grads32, grads64;
  for (auto* set : {&f32, &f64}) {
    for (Tensor& t : *set)
      if (t.defined()) t.set_requires_grad(true);
    Tensor y = conv1d((*set)[0], (*set)[1], (*set)[2], g.stride, g.padding, g.dilation);
    Tensor gy = test::det_tensor(y.shape(), 4, -1, 1, y.dtype());
    if (cl && y.dtype() == DType::f32) {
      // A channels-last input gives a channels-last output (and the
      // gradient arrives channels-last, as an element-wise op leaves it).
      CHECK(kernel::conv1d_channels_last(y));
      gy = channels_last(gy);
    }
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

TEST_CASE("conv1d: float32 forward and both backwards match the float64 loop") {
  compare({2, 3, 9, 4, 3, 1, 0, 1, true});
  compare({3, 8, 100, 16, 5, 1, 2, 1, true});   // the toy task's layer shape, smaller batch
  compare({2, 4, 20, 5, 3, 2, 1, 1, true});     // stride
  compare({2, 4, 21, 5, 3, 3, 2, 1, false});    // stride that does not divide
  compare({2, 4, 20, 5, 3, 1, 2, 2, true});     // dilation
  compare({2, 4, 25, 3, 3, 2, 3, 3, false});    // everything at once
  compare({2, 6, 10, 7, 1, 1, 0, 1, false});    // 1x1 (attention projections)
  compare({3, 1, 40, 8, 5, 1, 2, 1, true});     // one input channel (a toy model's first layer)
  compare({3, 8, 30, 1, 5, 1, 2, 1, true});     // one output channel (its last layer, hand-written)
  compare({2, 8, 30, 1, 5, 2, 2, 1, true});     // one output channel, strided (oneDNN)
  compare({2, 3, 5, 4, 7, 1, 3, 1, true});      // kernel longer than the input
  compare({2, 3, 12, 4, 3, 1, 4, 1, true});     // padding beyond the kernel
  compare({1, 5, 250, 6, 3, 1, 1, 1, true});    // one sample, rows in several blocks
  compare({2, 4, 31, 6, 4, 3, 3, 1, true});     // stride with padding (the data gradient's explicit columns)
}

TEST_CASE("conv1d: channels-last activations give the same numbers as contiguous ones, and keep their layout") {
  for (bool cl : {true, false}) {
    compare({3, 8, 100, 16, 5, 1, 2, 1, true}, cl);
    compare({2, 4, 21, 5, 3, 3, 2, 1, false}, cl);
    compare({2, 4, 20, 5, 3, 1, 2, 2, true}, cl);
    compare({2, 6, 10, 7, 1, 1, 0, 1, false}, cl);
    compare({4, 64, 100, 64, 1, 1, 0, 1, true}, cl);
    compare({3, 8, 30, 1, 5, 1, 2, 1, true}, cl);
    compare({2, 5, 30, 1, 3, 2, 1, 1, false}, cl);
  }
  // The kernels' layouts: dx is channels-last exactly when asked.
  const kernel::Conv1dGeom geo{1, 2, 1};
  Tensor x = channels_last(test::det_tensor({4, 6, 12}, 1)), w = test::det_tensor({5, 6, 5}, 2);
  CHECK(kernel::conv1d_channels_last(x));
  CHECK_FALSE(kernel::conv1d_channels_last(test::det_tensor({4, 6, 12}, 1)));
  CHECK(kernel::conv1d_channels_last(test::det_tensor({4, 1, 12}, 1)));  // one channel: both layouts at once
  Tensor y = kernel::conv1d_forward(x, w, Tensor(), geo);
  CHECK(kernel::conv1d_channels_last(y));
  Tensor gy_cl = channels_last(test::det_tensor(y.shape(), 3)), gy = test::det_tensor(y.shape(), 3);
  for (const Tensor& g : {gy, gy_cl}) {
    CHECK(kernel::conv1d_channels_last(kernel::conv1d_backward_data(g, w, x.shape(), geo, true)));
    CHECK(kernel::conv1d_backward_data(g, w, x.shape(), geo, false).is_contiguous());
    test::check_close(kernel::conv1d_backward_data(g, w, x.shape(), geo, true),
                      kernel::conv1d_backward_data(gy, w, x.shape(), geo, false).to_vector<double>(), 1e-6);
  }
  Tensor w1 = test::det_tensor({1, 6, 5}, 4);  // the hand-written one-output-channel kernel
  Tensor g1 = test::det_tensor({4, 1, 12}, 5);
  CHECK(kernel::conv1d_channels_last(kernel::conv1d_backward_data(g1, w1, x.shape(), geo, true)));
  CHECK(kernel::conv1d_backward_data(g1, w1, x.shape(), geo, false).is_contiguous());
}

TEST_CASE("conv1d and conv1d_relu on channels-last 5-tap layers (Winograd, ReLU mask in the backward) match float64") {
  // 16 and 32 channels: the shapes the Winograd kernels take (with AVX2 or
  // AVX-512; elsewhere oneDNN, and the comparison holds the same).
  compare({2, 16, 23, 32, 5, 1, 2, 1, true}, true);
  compare({3, 32, 10, 16, 5, 1, 0, 1, false}, true);
  for (int64_t P : {1, 2, 4}) {
    INFO("padding " << P);
    Tensor x32 = channels_last(test::det_tensor({3, 16, 13}, 1)), w32 = test::det_tensor({32, 16, 5}, 2, -0.3, 0.3),
           b32 = test::det_tensor({32}, 3, -0.5, 0.5);
    std::vector<Tensor> t32{x32, w32, b32}, t64;
    for (const Tensor& t : t32) t64.push_back(kernel::to_dtype(t, DType::f64));
    std::vector<Tensor> out32, out64;
    for (auto* set : {&t32, &t64}) {
      for (Tensor& t : *set) t.set_requires_grad(true);
      Tensor y = conv1d_relu((*set)[0], (*set)[1], (*set)[2], 1, P);
      Tensor gy = test::det_tensor(y.shape(), 4, -1, 1, y.dtype());
      if (y.dtype() == DType::f32) gy = channels_last(gy);
      backward(y, gy);
      auto& out = set == &t32 ? out32 : out64;
      out.push_back(y);
      for (Tensor& t : *set) out.push_back(t.grad());
    }
    int64_t zeros = 0;
    for (double v : out64[0].to_vector<double>()) zeros += v == 0.0;
    CHECK(zeros > 0);  // the ReLU masks something
    for (size_t i = 0; i < out32.size(); ++i) test::check_close(out32[i], out64[i].to_vector<double>(), kTol);
  }
}

TEST_CASE("conv1d on an empty batch: the weight and bias gradients are zeros, on every path") {
  // The kernels accumulate over the batch into memory they never wrote when
  // it is empty: the allocator's cache is filled with 42s first, so a
  // gradient that reads it shows.
  for (int64_t n : {16, 96, 512, 1536}) Tensor::full({n}, 42.0f);
  for (bool cl : {false, true}) {
    compare({0, 2, 8, 3, 3, 1, 0, 1, true}, cl);     // heed's GEMM (or oneDNN)
    compare({0, 16, 23, 32, 5, 1, 2, 1, true}, cl);  // Winograd where it applies
    compare({0, 4, 9, 1, 3, 1, 1, 1, true}, cl);     // one output channel
    compare({0, 4, 9, 6, 1, 1, 0, 1, true}, cl);     // pointwise
    compare({0, 3, 11, 5, 3, 2, 1, 2, false}, cl);   // strided, dilated
  }
  Tensor x = channels_last(Tensor::zeros({0, 16, 13})), w = Tensor::full({32, 16, 5}, 0.5f), b = Tensor::ones({32});
  for (Tensor* t : {&x, &w, &b}) t->set_requires_grad(true);
  sum(conv1d_relu(x, w, b, 1, 2)).backward();
  CHECK(w.grad().to_vector<double>() == std::vector<double>(static_cast<size_t>(w.numel()), 0.0));
  CHECK(b.grad().to_vector<double>() == std::vector<double>(32, 0.0));
  CHECK(x.grad().shape() == Shape{0, 16, 13});
}

TEST_CASE("conv1d: bad shapes are named") {
  Tensor x = Tensor::zeros({2, 3, 10}), w = Tensor::zeros({4, 5, 3});
  test::check_error([&] { conv1d(x, w); }, {"conv1d", "3 channels", "[2, 3, 10]", "expects 5", "[4, 5, 3]"});
  test::check_error([&] { conv1d(Tensor::zeros({3, 10}), Tensor::zeros({4, 3, 3})); },
                    {"conv1d", "[N, C, T]", "[3, 10]"});
  test::check_error([&] { conv1d(Tensor::zeros({1, 3, 2}), Tensor::zeros({4, 3, 5})); },
                    {"conv1d", "too short", "length 2"});
}

TEST_CASE("conv1d: a bias of another dtype is named as the bias, with its dtype") {
  // Input and weight agree (float32); only the bias is float64. The message
  // once named the input and weight, both float32, as the mismatch.
  Tensor x = Tensor::zeros({1, 2, 5}), w = Tensor::zeros({1, 2, 3}), b = Tensor::zeros({1}, DType::f64);
  for (bool relu : {false, true}) {
    INFO("relu " << relu);
    std::string msg;
    try {
      relu ? conv1d_relu(x, w, b) : conv1d(x, w, b);
    } catch (const Error& e) {
      msg = e.what();
    }
    CHECK(msg == "conv1d: bias dtype float64 does not match input and weight dtype float32");
  }
  // An input / weight mismatch is still named as such.
  test::check_error([&] { conv1d(x, Tensor::zeros({1, 2, 3}, DType::f64), b); },
                    {"conv1d", "input float32", "weight float64"});
}

TEST_CASE("conv1d: forward and both backwards give the same bits on 1 and 2 threads (the toy models' layers)") {
  struct Restore {
    int before = heed::num_threads();
    ~Restore() { heed::set_num_threads(before); }
  } restore;
  // The toy models' convolutions, channels-last as in the models: 1 -> 64
  // (oneDNN), 64 -> 64 5-tap (Winograd), 64 -> 64 kernel-1 (oneDNN, the
  // attention's projections) and 64 -> 1 (one output channel).
  // Then contiguous activations (oneDNN with its own layouts), a strided
  // dilated layer, and a batch that does not divide into equal chunks.
  const Geo geos[] = {{100, 1, 100, 64, 5, 1, 2, 1, true},   {100, 64, 100, 64, 5, 1, 2, 1, true},
                      {100, 64, 100, 64, 1, 1, 0, 1, true},  {100, 64, 100, 1, 5, 1, 2, 1, true},
                      {37, 24, 50, 40, 3, 2, 1, 2, true},    {13, 32, 40, 48, 5, 1, 2, 1, false}};
  for (size_t gi = 0; gi < std::size(geos); ++gi) {
    const Geo& g = geos[gi];
    const bool cl = gi < 4;
    INFO("C=" << g.C << " O=" << g.O << " K=" << g.K << " channels_last=" << cl);
    std::vector<std::vector<float>> runs[2];
    for (int threads : {1, 2}) {
      heed::set_num_threads(threads);
      Tensor x = test::det_tensor({g.N, g.C, g.T}, 1);
      if (cl) x = channels_last(x);
      Tensor w = test::det_tensor({g.O, g.C, g.K}, 2), b = g.bias ? test::det_tensor({g.O}, 3) : Tensor();
      for (Tensor* t : {&x, &w, &b})
        if (t->defined()) t->set_requires_grad(true);
      Tensor y = conv1d(x, w, b, g.stride, g.padding, g.dilation);
      Tensor gy = test::det_tensor(y.shape(), 4, -1, 1);
      backward(y, cl ? channels_last(gy) : gy);
      for (const Tensor& t : {y, x.grad(), w.grad(), b.defined() ? b.grad() : y})
        runs[threads - 1].push_back(t.to_vector<float>());
    }
    const char* names[] = {"output", "input gradient", "weight gradient", "bias gradient"};
    for (int i = 0; i < 4; ++i) {
      INFO(std::string(names[i]));
      CHECK(runs[0][i] == runs[1][i]);
    }
  }
}
