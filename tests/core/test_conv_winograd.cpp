// tests/core/test_conv_winograd.cpp: the Winograd F(4, 5) convolution
// (float32, channels-last) against the float64 direct loop, forward (with
// and without bias and ReLU) and both gradients, over lengths that leave
// partial tiles and every padding it accepts; the fused ReLU mask of the
// backward passes; thread-count independence; where it does not apply. Each
// at every instruction set with Winograd kernels this CPU has (AVX2,
// AVX-512), which must also agree bit for bit, with each other and with the
// bits recorded on an AVX-512 machine.
#include <cmath>
#include <cstring>

#include "core/conv_winograd.h"
#include "test_util.h"

using namespace heed;
using test::max_abs;
using test::max_diff;

namespace {

// float32 copy of an [N, C, T] tensor, stored channels-last ([N, T, C]).
Tensor f32_cl(const Tensor& t) {
  Tensor s = kernel::to_dtype(t, DType::f32);
  if (t.dim() != 3) return s;
  return kernel::permute(kernel::contiguous(kernel::permute(s, {0, 2, 1})), {0, 2, 1});
}

// The instruction sets with Winograd kernels that this CPU has; on a CPU
// with neither, the one in effect (the tests then check the oneDNN path).
std::vector<CpuIsa> isas_to_test() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::avx2, CpuIsa::avx512})
    if (isa <= heed::cpu_isa_max()) isas.push_back(isa);
  if (isas.empty()) isas.push_back(heed::cpu_isa());
  return isas;
}

// Every case at the instruction set in effect.
void check_against_float64() {
  struct Case {
    int64_t N, C, O, T, P;
  };
  std::vector<Case> cases{{3, 64, 64, 100, 2}, {2, 32, 48, 7, 0}, {1, 16, 32, 10, 4}, {2, 48, 16, 9, 1},
                          {2, 16, 16, 3, 3},   {1, 80, 16, 1, 2}, {4, 16, 64, 6, 2}};
  for (int64_t T = 1; T <= 13; ++T) cases.push_back({2, 16, 32, T, 2});  // 1, 2, 3 or 4 outputs in the last tile
  for (Case c : cases) {
    INFO("N=" << c.N << " C=" << c.C << " O=" << c.O << " T=" << c.T << " P=" << c.P);
    const kernel::Conv1dGeom g{1, c.P, 1};
    const int64_t L = kernel::conv1d_out_length(c.T, 5, g);
    REQUIRE(L >= 1);
    Tensor x = test::det_tensor({c.N, c.C, c.T}, 1, -1, 1, DType::f64);
    Tensor w = test::det_tensor({c.O, c.C, 5}, 2, -0.3, 0.3, DType::f64);
    Tensor b = test::det_tensor({c.O}, 3, -1, 1, DType::f64);
    Tensor gy = test::det_tensor({c.N, c.O, L}, 4, -1, 1, DType::f64);
    REQUIRE(kernel::conv1d_channels_last(f32_cl(x)));
    CHECK(kernel::winograd_conv1d_applies(DType::f32, c.C, c.O, 5, g, true) == kernel::winograd_conv1d_supported());
    // A float32 sum of 5 C products of size ~0.3, through transforms with
    // entries up to 160: ~1e-6 of the largest output (core/gen_winograd.py),
    // so 2e-5 leaves a margin and still fails on any wrong tap or tile.
    auto tol = [](const Tensor& ref) { return 2e-5 * std::max(1.0, max_abs(ref)); };

    Tensor y64 = kernel::conv1d_forward(x, w, b, g);
    Tensor y32 = kernel::conv1d_forward(f32_cl(x), f32_cl(w), f32_cl(b), g);
    CHECK(y32.shape() == y64.shape());
    CHECK(kernel::conv1d_channels_last(y32));
    CHECK(max_diff(y32, y64) <= tol(y64));
    Tensor y32n = kernel::conv1d_forward(f32_cl(x), f32_cl(w), Tensor(), g);
    CHECK(max_diff(y32n, kernel::conv1d_forward(x, w, Tensor(), g)) <= tol(y64));
    Tensor r32 = kernel::conv1d_forward(f32_cl(x), f32_cl(w), f32_cl(b), g, true);
    CHECK(max_diff(r32, kernel::unary(kernel::Unary::relu, y64)) <= tol(y64));

    Tensor gx64 = kernel::conv1d_backward_data(gy, w, x.shape(), g);
    Tensor gx32 = kernel::conv1d_backward_data(f32_cl(gy), f32_cl(w), x.shape(), g, true);
    CHECK(kernel::conv1d_channels_last(gx32));
    CHECK(max_diff(gx32, gx64) <= tol(gx64));

    Tensor gb64, gb32;
    Tensor gw64 = kernel::conv1d_backward_weights(gy, x, w.shape(), g, &gb64);
    Tensor gw32 = kernel::conv1d_backward_weights(f32_cl(gy), f32_cl(x), w.shape(), g, &gb32);
    CHECK(gw32.shape() == gw64.shape());
    CHECK(max_diff(gw32, gw64) <= tol(gw64));
    CHECK(max_diff(gb32, gb64) <= tol(gb64));
  }
}

}  // namespace

TEST_CASE("Winograd conv1d equals the float64 direct convolution: forward, ReLU, both gradients, partial tiles") {
  REQUIRE(heed::conv1d_winograd());
  for (CpuIsa isa : isas_to_test()) {
    test::KernelIsa use(isa);
    INFO("heed isa " << heed::cpu_isa_name(isa));
    check_against_float64();
  }
}

TEST_CASE("Winograd conv1d on an empty batch: empty outputs, zero weight gradients") {
  for (CpuIsa isa : isas_to_test()) {
    test::KernelIsa use(isa);
    INFO("heed isa " << heed::cpu_isa_name(isa));
    if (!kernel::winograd_conv1d_supported()) {  // no AVX2: the conv1d tests cover the oneDNN path
      CHECK_FALSE(kernel::winograd_conv1d_applies(DType::f32, 16, 32, 5, {1, 2, 1}, true));
      continue;
    }
    Tensor x = f32_cl(test::det_tensor({0, 16, 9}, 1, -1, 1, DType::f64));
    Tensor w = test::det_tensor({32, 16, 5}, 2), gy = f32_cl(test::det_tensor({0, 32, 9}, 3, -1, 1, DType::f64));
    CHECK(kernel::winograd_conv1d_forward(x, w, Tensor(), 2, false).shape() == Shape{0, 32, 9});
    CHECK(kernel::winograd_conv1d_backward_data(gy, Tensor(), w, 9, 2).shape() == Shape{0, 16, 9});
    Tensor gb;
    Tensor gw = kernel::winograd_conv1d_backward_weights(gy, Tensor(), x, 2, &gb);
    CHECK(gw.shape() == w.shape());
    for (float v : gw.to_vector<float>()) CHECK(v == 0.0f);
    CHECK(gb.to_vector<float>() == std::vector<float>(32, 0.0f));
  }
}

TEST_CASE("Winograd conv1d backward with the ReLU mask fused equals masking first, bit for bit") {
  for (CpuIsa isa : isas_to_test()) {
    test::KernelIsa use(isa);
    INFO("heed isa " << heed::cpu_isa_name(isa));
    if (!kernel::winograd_conv1d_supported()) {
      CHECK_FALSE(kernel::winograd_conv1d_applies(DType::f32, 64, 64, 5, {1, 2, 1}, true));
      continue;
    }
    Tensor x = f32_cl(test::det_tensor({5, 32, 23}, 11, -1, 1, DType::f64));
    Tensor w = test::det_tensor({48, 32, 5}, 12, -0.3, 0.3);
    Tensor b = test::det_tensor({48}, 13, -0.2, 0.2);
    Tensor y = kernel::winograd_conv1d_forward(x, w, b, 2, true);
    Tensor gy = f32_cl(test::det_tensor({5, 48, 23}, 14, -1, 1, DType::f64));
    Tensor masked = kernel::unary_backward(kernel::Unary::relu, y, gy);
    int64_t zeros = 0;
    for (float v : y.to_vector<float>()) zeros += v == 0.0f;
    CHECK(zeros > 0);  // the mask removes something
    CHECK(kernel::winograd_conv1d_backward_data(gy, y, w, 23, 2).to_vector<float>() ==
          kernel::winograd_conv1d_backward_data(masked, Tensor(), w, 23, 2).to_vector<float>());
    Tensor gb1, gb2;
    CHECK(kernel::winograd_conv1d_backward_weights(gy, y, x, 2, &gb1).to_vector<float>() ==
          kernel::winograd_conv1d_backward_weights(masked, Tensor(), x, 2, &gb2).to_vector<float>());
    CHECK(gb1.to_vector<float>() == gb2.to_vector<float>());
  }
}

TEST_CASE("Winograd conv1d: the same numbers on 1 and 2 threads; close to oneDNN's direct convolution") {
  Tensor x = f32_cl(test::det_tensor({100, 64, 100}, 5, -1, 1, DType::f64));
  Tensor w = test::det_tensor({64, 64, 5}, 6, -0.1, 0.1), b = test::det_tensor({64}, 8, -0.1, 0.1);
  Tensor gy = f32_cl(test::det_tensor({100, 64, 100}, 7, -1, 1, DType::f64));
  const kernel::Conv1dGeom g{1, 2, 1};
  const int before = heed::num_threads();
  auto run = [&](int threads) {
    heed::set_num_threads(threads);
    Tensor gb;
    return std::vector<std::vector<float>>{kernel::conv1d_forward(x, w, b, g, true).to_vector<float>(),
                                           kernel::conv1d_backward_data(gy, w, x.shape(), g, true).to_vector<float>(),
                                           kernel::conv1d_backward_weights(gy, x, w.shape(), g, &gb).to_vector<float>(),
                                           gb.to_vector<float>()};
  };
  heed::set_conv1d_winograd(false);
  CHECK_FALSE(kernel::winograd_conv1d_applies(DType::f32, 64, 64, 5, g, true));
  auto direct = run(before);
  heed::set_conv1d_winograd(true);
  for (CpuIsa isa : isas_to_test()) {
    test::KernelIsa use(isa);
    INFO("heed isa " << heed::cpu_isa_name(isa));
    auto a = run(1), c = run(2);
    heed::set_num_threads(before);
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == c[i]);
    for (size_t i = 0; i < a.size(); ++i) {
      double worst = 0, scale = 1;
      for (size_t j = 0; j < a[i].size(); ++j) {
        worst = std::max(worst, double(std::abs(a[i][j] - direct[i][j])));
        scale = std::max(scale, double(std::abs(direct[i][j])));
      }
      INFO("output " << i);
      CHECK(worst <= 2e-5 * scale);
    }
  }
}

namespace {

// The three passes' results for one shape at the instruction set in effect:
// forward with bias and ReLU, forward without either, backward data through
// the ReLU's mask, backward weights and bias through it.
std::vector<std::vector<float>> all_passes(int64_t N, int64_t C, int64_t O, int64_t T, int64_t P, uint64_t seed) {
  const kernel::Conv1dGeom g{1, P, 1};
  const int64_t L = kernel::conv1d_out_length(T, 5, g);
  Tensor x = f32_cl(test::det_tensor({N, C, T}, seed, -1, 1, DType::f64));
  Tensor w = test::det_tensor({O, C, 5}, seed + 1, -0.3, 0.3), b = test::det_tensor({O}, seed + 2, -0.5, 0.5);
  Tensor gy = f32_cl(test::det_tensor({N, O, L}, seed + 3, -1, 1, DType::f64));
  Tensor y = kernel::conv1d_forward(x, w, b, g, true);
  Tensor gb;
  Tensor gw = kernel::conv1d_backward_weights(gy, x, w.shape(), g, &gb, y);
  return {y.to_vector<float>(), kernel::conv1d_forward(x, w, Tensor(), g).to_vector<float>(),
          kernel::conv1d_backward_data(gy, w, x.shape(), g, true, y).to_vector<float>(), gw.to_vector<float>(),
          gb.to_vector<float>()};
}

// FNV-1a over the bits of every float.
uint64_t bits_hash(const std::vector<std::vector<float>>& outs) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const auto& v : outs)
    for (float f : v) {
      uint32_t u;
      std::memcpy(&u, &f, sizeof u);
      for (int k = 0; k < 4; ++k) h = (h ^ ((u >> (8 * k)) & 0xFF)) * 0x100000001b3ull;
    }
  return h;
}

}  // namespace

TEST_CASE("Winograd conv1d: AVX2 and AVX-512 give the same bits, and the bits recorded on an AVX-512 machine") {
  // Shapes that exercise every part of the kernels: partial last tiles
  // (T + 2P - 4 not a multiple of 4), several chunks of 36 tiles and
  // weight-gradient groups (N = 9, T = 100), channel counts that leave the
  // AVX-512 GEMM a partial column block (48, 80) and every padding.
  struct Case {
    int64_t N, C, O, T, P;
  };
  const std::vector<Case> cases{{9, 64, 64, 100, 2}, {2, 48, 16, 9, 1}, {3, 16, 80, 13, 0},
                                {2, 80, 48, 30, 3},  {1, 32, 32, 5, 4}, {4, 16, 16, 1, 2}};
  // bits_hash of every case's results, printed by this test when they differ.
  // Recorded on an AVX-512 machine (Zen 5) and the same on its AVX2 path;
  // change it only with a deliberate change of the kernels' arithmetic.
  constexpr uint64_t kRecorded = 0xe01237c7920575a0ull;
  std::vector<std::string> compared;
  std::vector<std::vector<float>> first;
  for (CpuIsa isa : isas_to_test()) {
    test::KernelIsa use(isa);
    INFO("heed isa " << heed::cpu_isa_name(isa));
    if (!kernel::winograd_conv1d_supported()) {
      MESSAGE("this CPU has neither AVX2 nor AVX-512: no Winograd kernels to compare");
      CHECK_FALSE(kernel::winograd_conv1d_applies(DType::f32, 64, 64, 5, {1, 2, 1}, true));
      continue;
    }
    std::vector<std::vector<float>> all;
    for (size_t i = 0; i < cases.size(); ++i) {
      const Case& c = cases[i];
      for (auto& v : all_passes(c.N, c.C, c.O, c.T, c.P, 100 + 10 * i)) all.push_back(std::move(v));
    }
    if (first.empty()) first = all;
    CHECK(all == first);
    const uint64_t h = bits_hash(all);
    INFO("bits_hash " << fmt::format("{:#018x}", h));
    CHECK(h == kRecorded);
    compared.push_back(kernel::winograd_conv1d_isa());
  }
  if (!compared.empty()) {
    std::string what = "Winograd bits compared: " + compared[0];
    if (compared.size() > 1) what += " and " + compared[1] + " with each other and";
    MESSAGE(what << " with the bits recorded on AVX-512");
  }
}

TEST_CASE("Winograd conv1d applies only where it is exact in shape, and only with AVX2 or AVX-512") {
  const bool on = kernel::winograd_conv1d_supported();
  CHECK(on == (heed::cpu_isa() >= CpuIsa::avx2));
  CHECK(kernel::winograd_conv1d_applies(DType::f32, 64, 64, 5, {1, 2, 1}, true) == on);
  CHECK_FALSE(kernel::winograd_conv1d_applies(DType::f32, 64, 64, 5, {1, 2, 1}, false));  // not channels-last
  CHECK_FALSE(kernel::winograd_conv1d_applies(DType::f64, 64, 64, 5, {1, 2, 1}, true));
  CHECK_FALSE(kernel::winograd_conv1d_applies(DType::f32, 64, 64, 3, {1, 1, 1}, true));   // 3 taps
  CHECK_FALSE(kernel::winograd_conv1d_applies(DType::f32, 64, 64, 5, {2, 2, 1}, true));   // stride 2
  CHECK_FALSE(kernel::winograd_conv1d_applies(DType::f32, 64, 64, 5, {1, 4, 2}, true));   // dilation 2
  CHECK_FALSE(kernel::winograd_conv1d_applies(DType::f32, 64, 64, 5, {1, 5, 1}, true));   // padding 5
  CHECK_FALSE(kernel::winograd_conv1d_applies(DType::f32, 8, 64, 5, {1, 2, 1}, true));    // 8 channels
  CHECK_FALSE(kernel::winograd_conv1d_applies(DType::f32, 64, 1, 5, {1, 2, 1}, true));    // one output
  // Without AVX2 (every CPU can be capped there) the convolutions go to oneDNN,
  // and a direct call of the kernels says why it cannot run.
  test::KernelIsa use(CpuIsa::baseline);
  CHECK_FALSE(kernel::winograd_conv1d_supported());
  CHECK(kernel::winograd_conv1d_isa() == nullptr);
  CHECK_FALSE(kernel::winograd_conv1d_applies(DType::f32, 64, 64, 5, {1, 2, 1}, true));
  Tensor x = f32_cl(test::det_tensor({1, 16, 9}, 1, -1, 1, DType::f64)), w = test::det_tensor({16, 16, 5}, 2);
  test::check_error([&] { kernel::winograd_conv1d_forward(x, w, Tensor(), 2, false); },
                    {"Winograd", "AVX2", "baseline"});
  Tensor y = kernel::conv1d_forward(x, w, Tensor(), {1, 2, 1});  // oneDNN's
  CHECK(y.shape() == Shape{1, 16, 9});
}
