// tests/core/test_conv_single.cpp: the hand-written single-output-channel
// convolution (float32, stride 1) against the float64 direct loop, forward
// and both gradients, through conv1d's own dispatch; and thread-count
// independence.
#include <cmath>

#include "core/conv_single.h"
#include "test_util.h"

using namespace heed;
using test::max_abs;
using test::max_diff;

TEST_CASE("single-output-channel conv1d equals the float64 direct convolution, forward and both gradients") {
  struct Case {
    int64_t N, C, T, K, P;
  };
  for (bool cl : {false, true})
  for (Case c : {Case{2, 64, 100, 5, 2}, Case{3, 5, 7, 3, 0}, Case{1, 4, 6, 5, 4}, Case{2, 1, 9, 1, 0},
                 Case{4, 7, 3, 5, 2}, Case{3, 20, 11, 5, 2}, Case{2, 32, 3, 5, 4}}) {
    // channels-last x (and dx) take their own loops: 16-channel blocks, with
    // a partial block when C is not a multiple of 16.
    INFO("N=" << c.N << " C=" << c.C << " T=" << c.T << " K=" << c.K << " P=" << c.P << " channels_last=" << cl);
    const kernel::Conv1dGeom g{1, c.P, 1};
    REQUIRE(kernel::single_channel_conv_applies(DType::f32, 1, g));
    const int64_t L = kernel::conv1d_out_length(c.T, c.K, g);
    Tensor x = test::det_tensor({c.N, c.C, c.T}, 1, -1, 1, DType::f64);
    Tensor w = test::det_tensor({1, c.C, c.K}, 2, -0.5, 0.5, DType::f64);
    Tensor b = test::det_tensor({1}, 3, -1, 1, DType::f64);
    Tensor gy = test::det_tensor({c.N, 1, L}, 4, -1, 1, DType::f64);
    auto f32 = [cl](const Tensor& t) {
      Tensor s = kernel::to_dtype(t, DType::f32);
      if (!cl || t.dim() != 3 || t.size(1) == 1) return s;
      return kernel::permute(kernel::contiguous(kernel::permute(s, {0, 2, 1})), {0, 2, 1});
    };
    // float32 sums of C K terms of size ~1: a few ulp of the result each.
    auto tol = [](const Tensor& ref) { return 1e-6 * std::max(1.0, max_abs(ref)) * 8; };

    Tensor y64 = kernel::conv1d_forward(x, w, b, g);
    Tensor y32 = kernel::conv1d_forward(f32(x), f32(w), f32(b), g);  // dispatches to the hand-written path
    CHECK(y32.shape() == y64.shape());
    CHECK(max_diff(y32, y64) <= tol(y64));

    Tensor gx64 = kernel::conv1d_backward_data(gy, w, x.shape(), g);
    Tensor gx32 = kernel::conv1d_backward_data(f32(gy), f32(w), x.shape(), g, cl);
    CHECK(kernel::conv1d_channels_last(gx32) == (cl || c.C == 1));
    CHECK(max_diff(gx32, gx64) <= tol(gx64));

    Tensor gb64, gb32;
    Tensor gw64 = kernel::conv1d_backward_weights(gy, x, w.shape(), g, &gb64);
    Tensor gw32 = kernel::conv1d_backward_weights(f32(gy), f32(x), w.shape(), g, &gb32);
    CHECK(gw32.shape() == gw64.shape());
    CHECK(max_diff(gw32, gw64) <= tol(gw64));
    CHECK(max_diff(gb32, gb64) <= tol(gb64));
  }
  CHECK_FALSE(kernel::single_channel_conv_applies(DType::f32, 2, {1, 2, 1}));
  CHECK_FALSE(kernel::single_channel_conv_applies(DType::f32, 1, {2, 2, 1}));
  CHECK_FALSE(kernel::single_channel_conv_applies(DType::f32, 1, {1, 2, 2}));
  CHECK_FALSE(kernel::single_channel_conv_applies(DType::f64, 1, {1, 2, 1}));
}

TEST_CASE("single-output-channel conv1d: the same numbers on 1 and 2 threads, contiguous and channels-last") {
  for (bool cl : {false, true}) {
  INFO("channels_last=" << cl);
  Tensor x = test::det_tensor({100, 64, 100}, 5), w = test::det_tensor({1, 64, 5}, 6), gy = test::det_tensor({100, 1, 100}, 7);
  if (cl) x = kernel::permute(kernel::contiguous(kernel::permute(x, {0, 2, 1})), {0, 2, 1});
  REQUIRE(kernel::conv1d_channels_last(x) == cl);
  const kernel::Conv1dGeom g{1, 2, 1};
  const int before = heed::num_threads();
  auto run = [&](int threads) {
    heed::set_num_threads(threads);
    Tensor gb;
    return std::vector<std::vector<float>>{kernel::conv1d_forward(x, w, Tensor(), g).to_vector<float>(),
                                           kernel::conv1d_backward_data(gy, w, x.shape(), g, cl).to_vector<float>(),
                                           kernel::conv1d_backward_weights(gy, x, w.shape(), g, &gb).to_vector<float>(),
                                           gb.to_vector<float>()};
  };
  auto a = run(1), b = run(2);
  heed::set_num_threads(before);
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == b[i]);
  }
}
