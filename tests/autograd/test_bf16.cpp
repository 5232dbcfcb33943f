// tests/autograd/test_bf16.cpp: bf16 mixed precision (heed::set_precision).
// Matrix products of float32 tensors round both operands to bfloat16 and
// accumulate in float32. bfloat16 keeps 8 significant bits, so rounding to
// nearest moves each operand by at most 2^-9 of itself, and a product of two
// rounded numbers by at most 2^-8 (+ 2^-18) of the exact product. The
// float32 accumulation over K terms adds at most ~K 2^-24 of the sum of
// |terms| (with slack: 2^-23). Every element of a bf16 product therefore
// lies within (2^-8 + 2^-18 + K 2^-23) (|A| |B|)_ij of the exact one: the
// bound these tests check, against float64, for the forward products and for
// the gradients of matmul and linear (each gradient is itself one product).
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/bf16.h"
#include "test_util.h"

using namespace heed;
using test::bf16_here;
using test::PrecisionScope;
using test::ThreadScope;

namespace {

double unit_bound(int64_t K) { return std::ldexp(1.0, -8) + std::ldexp(1.0, -18) + double(K) * std::ldexp(1.0, -23); }

// max over elements of |got - exact| / (|A| |B|)_ij, in units of the bound
// for inner dimension K (<= 1 passes).
double worst_in_bounds(const Tensor& got, const Tensor& exact, const Tensor& abs_product, int64_t K) {
  auto g = got.to_vector<double>(), e = exact.to_vector<double>(), m = abs_product.to_vector<double>();
  REQUIRE(g.size() == e.size());
  REQUIRE(g.size() == m.size());
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(g[i] - e[i]) / (unit_bound(K) * m[i] + 1e-30));
  return worst;
}

double max_rel(const Tensor& got, const Tensor& exact) {
  return test::max_diff(got.to(DType::f64), exact) / test::max_abs(exact);
}

Tensor f64(const Tensor& t) { return t.detach().to(DType::f64); }

}  // namespace

TEST_CASE("precision: names parse, a bad one is refused naming it, f32 is the default") {
  CHECK(precision() == Precision::f32);
  CHECK(parse_precision("bf16") == Precision::bf16);
  CHECK(parse_precision("bfloat16") == Precision::bf16);
  CHECK(parse_precision("f32") == Precision::f32);
  CHECK(std::string(precision_name(Precision::bf16)) == "bf16");
  CHECK_THROWS_WITH_AS(parse_precision("fp16"), doctest::Contains("expected f32 or bf16, got 'fp16'"), Error);
}

TEST_CASE("precision bf16 on a CPU without native bf16 is refused naming the instruction set; else it applies") {
  if (!bf16_here()) {
    MESSAGE("no native bf16 here: ", bf16_unsupported_reason());
    CHECK_THROWS_WITH_AS(set_precision(Precision::bf16), doctest::Contains("bf16 needs a CPU with AVX512-BF16"), Error);
    CHECK(precision() == Precision::f32);
    return;
  }
  {
    PrecisionScope s(Precision::bf16);
    CHECK(precision() == Precision::bf16);
    CHECK(backend_info().find("bf16 operands") != std::string::npos);
  }
  CHECK(precision() == Precision::f32);
}

TEST_CASE("bf16 matmul and linear: every element within the bf16 bound of float64; clearly coarser than float32") {
  if (!bf16_here()) {
    MESSAGE("skipped the bf16 products: ", bf16_unsupported_reason());
    CHECK_THROWS_AS(set_precision(Precision::bf16), Error);
    return;
  }
  struct Case {
    int64_t M, K, N;
  };
  // GPT-like shapes, odd sizes (partial slabs), few rows (split by columns).
  for (Case c : {Case{768, 128, 512}, Case{300, 257, 129}, Case{16, 1024, 640}, Case{2048, 64, 96}}) {
    CAPTURE(c.M);
    CAPTURE(c.K);
    CAPTURE(c.N);
    Tensor a = test::det_tensor({c.M, c.K}, 1, -1, 1), b = test::det_tensor({c.K, c.N}, 2, -1, 1);
    Tensor exact = matmul(f64(a), f64(b)), absprod = matmul(abs(f64(a)), abs(f64(b)));
    Tensor y32 = matmul(a, b);
    Tensor y16, y16t;
    {
      PrecisionScope s(Precision::bf16);
      y16 = matmul(a, b);
      // Transposed operands (views, no copy) take the same path.
      y16t = matmul(transpose(contiguous(transpose(a, 0, 1)), 0, 1), transpose(contiguous(transpose(b, 0, 1)), 0, 1));
    }
    CHECK(worst_in_bounds(y16, exact, absprod, c.K) <= 1.0);
    CHECK(worst_in_bounds(y16t, exact, absprod, c.K) <= 1.0);
    // bf16 really ran: its error is far above float32's (8 against 24 bits).
    CHECK(max_rel(y16, exact) > 30 * max_rel(y32, exact));
    CHECK(max_rel(y16, exact) < 1e-2);
  }
  // linear with a bias: the bias is added in float32 (exactly), the product in bf16.
  Tensor x = test::det_tensor({12, 64, 128}, 3, -1, 1), w = test::det_tensor({384, 128}, 4, -0.2, 0.2);
  Tensor b = test::det_tensor({384}, 5, -1, 1);
  Tensor exact = add(matmul(f64(x), transpose(f64(w), 0, 1)), f64(b));
  Tensor absprod = matmul(abs(f64(x)), transpose(abs(f64(w)), 0, 1));
  PrecisionScope s(Precision::bf16);
  CHECK(worst_in_bounds(linear(x, w, b), exact, absprod, 128) <= 1.0);
}

TEST_CASE("bf16 gradients of linear and matmul: within the bf16 bound of the float64 gradients") {
  if (!bf16_here()) {
    MESSAGE("skipped the bf16 gradients: ", bf16_unsupported_reason());
    CHECK_THROWS_AS(set_precision(Precision::bf16), Error);
    return;
  }
  // L = sum(r * y): dL/dy = r, so each gradient is one product with r.
  const int64_t N = 6, T = 64, I = 96, O = 160;
  Tensor x = test::det_tensor({N, T, I}, 6, -1, 1).set_requires_grad();
  Tensor w = test::det_tensor({O, I}, 7, -0.3, 0.3).set_requires_grad();
  Tensor bias = test::det_tensor({O}, 8, -1, 1).set_requires_grad();
  Tensor r = test::det_tensor({N, T, O}, 9, -1, 1);
  {
    PrecisionScope s(Precision::bf16);
    backward(sum(mul(linear(x, w, bias), r)));
  }
  Tensor r2 = reshape(f64(r), {N * T, O}), x2 = reshape(f64(x), {N * T, I});
  // dx = r W, dW = r^T x (K = N T), db = sum of r's rows (float32, no product).
  CHECK(worst_in_bounds(x.grad(), reshape(matmul(r2, f64(w)), {N, T, I}),
                        reshape(matmul(abs(r2), abs(f64(w))), {N, T, I}), O) <= 1.0);
  CHECK(worst_in_bounds(w.grad(), matmul(transpose(r2, 0, 1), x2), matmul(transpose(abs(r2), 0, 1), abs(x2)),
                        N * T) <= 1.0);
  CHECK(max_rel(bias.grad(), sum(r2, {0})) < 1e-6);
  CHECK(max_rel(w.grad(), matmul(transpose(r2, 0, 1), x2)) > 1e-4);  // bf16 ran in the backward too

  // A batched matmul (attention-like [B, M, K] x [B, K, N]).
  Tensor a = test::det_tensor({4, 96, 80}, 10, -1, 1).set_requires_grad();
  Tensor bm = test::det_tensor({4, 80, 112}, 11, -1, 1).set_requires_grad();
  Tensor rm = test::det_tensor({4, 96, 112}, 12, -1, 1);
  {
    PrecisionScope s(Precision::bf16);
    backward(sum(mul(matmul(a, bm), rm)));
  }
  CHECK(worst_in_bounds(a.grad(), matmul(f64(rm), transpose(f64(bm), -1, -2)),
                        matmul(abs(f64(rm)), transpose(abs(f64(bm)), -1, -2)), 112) <= 1.0);
  CHECK(worst_in_bounds(bm.grad(), matmul(transpose(f64(a), -1, -2), f64(rm)),
                        matmul(transpose(abs(f64(a)), -1, -2), abs(f64(rm))), 96) <= 1.0);
}

TEST_CASE("bf16 products are bit-identical on 1 and 2 threads; products below 1 MFLOP stay float32") {
  if (!bf16_here()) {
    MESSAGE("skipped: ", bf16_unsupported_reason());
    CHECK_THROWS_AS(set_precision(Precision::bf16), Error);
    return;
  }
  ThreadScope restore;
  PrecisionScope s(Precision::bf16);
  // On two threads a product's rows are shared from both ends in chunks
  // (Bf16Product::share_rows); on one, its slabs run in order. Rows that no
  // chunk or slab size divides (1000, 1001), A read transposed (a weight
  // gradient's dY^T), and a Linear with its bias and a residual added in the
  // epilogue.
  for (auto [M, K, N] : {std::array<int64_t, 3>{3072, 256, 768}, {512, 512, 256}, {37, 300, 129}, {1000, 130, 200},
                         {1001, 64, 96}}) {
    Tensor a = test::det_tensor({M, K}, 13, -1, 1), b = test::det_tensor({K, N}, 14, -1, 1);
    Tensor at = kernel::transpose(kernel::contiguous(kernel::transpose(a, 0, 1)), 0, 1);  // A stored as [K, M]
    Tensor w = test::det_tensor({N, K}, 20, -1, 1), bias = test::det_tensor({N}, 21, -1, 1);
    Tensor res = test::det_tensor({M, N}, 22, -1, 1);
    std::vector<std::vector<float>> got;
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      got.push_back(matmul(a, b).to_vector<float>());
      got.push_back(kernel::matmul(at, b).to_vector<float>());
      got.push_back(kernel::linear(a, w, bias, res).to_vector<float>());
    }
    for (int k : {0, 1, 2}) {
      INFO("M=" << M << " K=" << K << " N=" << N << ", product " << k << ": 2 threads against 1");
      REQUIRE(got[k].size() == got[k + 3].size());
      CHECK(std::memcmp(got[k].data(), got[k + 3].data(), got[k].size() * sizeof(float)) == 0);
    }
    CHECK(std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)) == 0);  // A's layout: the same sums
  }
  // The Linear backward (dY packed once for dX and dW, its column sums for
  // the bias taken in the same pass, in one parallel region; the weight
  // gradient in two halves of the tokens): GPT-256's fc1 and fc2 shapes, an
  // odd one whose weight gradient is cut by columns, one with an odd half.
  for (auto [R, I, O] :
       {std::array<int64_t, 3>{3072, 256, 1024}, {3072, 1024, 256}, {700, 40, 300}, {515, 37, 129}}) {
    Tensor x = test::det_tensor({R, I}, 17, -1, 1), w = test::det_tensor({O, I}, 18, -0.3, 0.3);
    Tensor g = test::det_tensor({R, O}, 19, -1, 1);
    std::vector<std::vector<float>> got;
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      kernel::LinearGrads d = kernel::linear_backward(g, x, w, true, true, Tensor(), true);
      got.push_back(d.x.to_vector<float>());
      got.push_back(d.w.to_vector<float>());
      got.push_back(d.b.to_vector<float>());
    }
    INFO("linear backward R=" << R << " I=" << I << " O=" << O);
    for (int k : {0, 1, 2}) {
      REQUIRE(got[k].size() == got[k + 3].size());
      CHECK(std::memcmp(got[k].data(), got[k + 3].data(), got[k].size() * sizeof(float)) == 0);
    }
    // The bias gradient is float32's column sum, whatever the precision.
    CHECK(max_rel(Tensor::from(got[2], {O}), sum(f64(g), {0})) < 1e-6);
  }
  Tensor a = test::det_tensor({32, 64}, 15, -1, 1), b = test::det_tensor({64, 64}, 16, -1, 1);  // 262k FLOPs
  auto small16 = matmul(a, b).to_vector<float>();
  set_precision(Precision::f32);
  auto small32 = matmul(a, b).to_vector<float>();
  CHECK(std::memcmp(small16.data(), small32.data(), small16.size() * sizeof(float)) == 0);
}

TEST_CASE("bf16 pointwise convolutions (kernel 1, channels-last): forward and gradients within the bf16 bound") {
  if (!bf16_here()) {
    MESSAGE("skipped the bf16 convolutions: ", bf16_unsupported_reason());
    return;
  }
  // The toy attention model's q/k/v layers: conv1d(64 -> 64, kernel 1) on
  // channels-last activations [N, C, T] (stored [N, T, C]); a product over the
  // channels, so the Linear layer's bound applies with K = C (forward, dx)
  // and K = N T (dw).
  const int64_t N = 8, C = 64, T = 50, O = 48;
  Tensor xs = kernel::contiguous(kernel::permute(test::det_tensor({N, C, T}, 21, -1, 1), {0, 2, 1}));
  Tensor x = kernel::permute(xs, {0, 2, 1}).set_requires_grad();
  REQUIRE(kernel::conv1d_channels_last(x));
  Tensor w = test::det_tensor({O, C, 1}, 22, -0.3, 0.3).set_requires_grad();
  Tensor b = test::det_tensor({O}, 23, -1, 1).set_requires_grad();
  Tensor r = test::det_tensor({N, O, T}, 24, -1, 1);
  Tensor y;
  {
    PrecisionScope s(Precision::bf16);
    y = conv1d(x, w, b);
    backward(sum(mul(y, r)));
  }
  CHECK(kernel::conv1d_channels_last(y));
  // In float64, as products over rows [N T, .]: y = x W^T + b, dx = r W, dW = r^T x.
  auto rows = [](const Tensor& t) {  // [N, C, T] -> [N T, C]
    return reshape(kernel::contiguous(kernel::permute(f64(t), {0, 2, 1})), {t.size(0) * t.size(2), t.size(1)});
  };
  const Tensor x2 = rows(x), r2 = rows(r), w2 = reshape(f64(w), {O, C});
  const Tensor y_exact = matmul(x2, transpose(w2, 0, 1)) + f64(b);
  CHECK(worst_in_bounds(rows(y) - f64(b), y_exact - f64(b), matmul(abs(x2), transpose(abs(w2), 0, 1)), C) <= 1.0);
  CHECK(max_rel(rows(y), y_exact) > 1e-4);  // bf16 ran, not float32
  CHECK(worst_in_bounds(rows(x.grad()), matmul(r2, w2), matmul(abs(r2), abs(w2)), O) <= 1.0);
  CHECK(worst_in_bounds(reshape(w.grad(), {O, C}), matmul(transpose(r2, 0, 1), x2),
                        matmul(transpose(abs(r2), 0, 1), abs(x2)), N * T) <= 1.0);
  CHECK(max_rel(b.grad(), sum(r2, {0})) < 1e-6);
  // bf16 ran for the gradients too, whatever the incoming gradient's layout
  // (r is contiguous here, y channels-last: the gradients took the float32
  // convolution), and a channels-last one gives the same bits.
  CHECK(max_rel(rows(x.grad()), matmul(r2, w2)) > 1e-4);
  CHECK(max_rel(reshape(w.grad(), {O, C}), matmul(transpose(r2, 0, 1), x2)) > 1e-4);
  const Tensor gx = x.grad(), gw = w.grad(), gb = b.grad();
  for (Tensor* t : {&x, &w, &b}) t->zero_grad();
  {
    PrecisionScope s(Precision::bf16);
    const Tensor r_cl = kernel::permute(kernel::contiguous(kernel::permute(r, {0, 2, 1})), {0, 2, 1});
    REQUIRE(kernel::conv1d_channels_last(r_cl));
    backward(sum(mul(conv1d(x, w, b), r_cl)));
  }
  CHECK(test::same_bits(x.grad(), gx));
  CHECK(test::same_bits(w.grad(), gw));
  CHECK(test::same_bits(b.grad(), gb));
}

TEST_CASE("bf16 Linear backward: the weight gradient is the float32 sum of the bf16-rounded operands' products") {
  if (!bf16_here()) {
    MESSAGE("skipped: ", bf16_unsupported_reason());
    return;
  }
  PrecisionScope s(Precision::bf16);
  // Odd sizes: partial 32 x 16 tiles in the transposed packing of x.
  for (auto [R, I, O] : {std::array<int64_t, 3>{700, 40, 300}, {515, 37, 129}, {768, 128, 128}}) {
    CAPTURE(R);
    CAPTURE(I);
    CAPTURE(O);
    Tensor x = test::det_tensor({R, I}, 71, -1, 1).to(DType::f32), w = test::det_tensor({O, I}, 72).to(DType::f32);
    Tensor g = test::det_tensor({R, O}, 73, -1, 1).to(DType::f32);
    const std::vector<float> dw = kernel::linear_backward(g, x, w, false, true).w.to_vector<float>();
    const std::vector<float> xv = x.to_vector<float>(), gv = g.to_vector<float>();
    auto r16 = [](float f) { return static_cast<double>(kernel::from_bf16(kernel::to_bf16(f))); };
    double worst = 0;
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < I; ++i) {
        double exact = 0, mag = 0;
        for (int64_t r = 0; r < R; ++r) {
          const double p = r16(gv[static_cast<size_t>(r * O + o)]) * r16(xv[static_cast<size_t>(r * I + i)]);
          exact += p;
          mag += std::abs(p);
        }
        worst = std::max(worst, std::abs(dw[static_cast<size_t>(o * I + i)] - exact) / (mag + 1e-30));
      }
    // float32 accumulation of R products: well under R 2^-24 of their magnitudes.
    CHECK(worst < static_cast<double>(R) * 6e-8);
    CHECK(worst < 1e-4);
  }
}

TEST_CASE("bf16 Linear: each operand is rounded exactly as to_bf16 rounds, in the plain and the transposed packs") {
  if (!bf16_here()) {
    MESSAGE("skipped: ", bf16_unsupported_reason());
    return;
  }
  PrecisionScope s(Precision::bf16);
  auto bits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  };
  // Values whose rounding is easy to get wrong: ties both ways, a carry into
  // the exponent, denormals (to a signed zero, the largest one included),
  // and ordinary numbers; x (r, i) cycles through them and a deterministic
  // spread. A one-hot factor makes each result element a single product by
  // 1 (plus zeros), so it must be the rounded x itself.
  const std::vector<float> awkward = {bits(0x3f808000u), bits(0x3f818000u), bits(0x3f80ffffu), bits(0x3fffffffu),
                                      bits(0x007fffffu), bits(0x80000001u), -1e-39f,           0.0f,
                                      -0.0f,             1.0f,              -2.5f,             bits(0x3f7f8000u)};
  for (auto [R, I] : {std::array<int64_t, 2>{700, 40}, {515, 37}, {96, 256}}) {
    CAPTURE(R);
    CAPTURE(I);
    const int64_t O = R;  // dY = identity: dW^T [I, O] = x^T, column o is row o of x
    std::vector<float> xv(static_cast<size_t>(R * I));
    const auto spread = test::det_values(R * I, 91, -3, 3);
    for (size_t k = 0; k < xv.size(); ++k)
      xv[k] = k % 3 == 0 ? awkward[(k / 3) % awkward.size()] : static_cast<float>(spread[k]);
    Tensor x = Tensor::from(xv, {R, I});
    Tensor eye = Tensor::zeros({R, O});
    for (int64_t r = 0; r < R; ++r) eye.data<float>()[r * O + r] = 1.0f;
    // The weight gradient x^T dY: x in the transposed pack (its columns of
    // rows), partial 32 x 16 tiles at the edges.
    const std::vector<float> dw = kernel::linear_backward(eye, x, Tensor::zeros({O, I}), false, true).w.to_vector<float>();
    // The forward x W^T with W = I_I: x in the plain pack, row by row.
    Tensor wi = Tensor::zeros({I, I});
    for (int64_t i = 0; i < I; ++i) wi.data<float>()[i * I + i] = 1.0f;
    const std::vector<float> y = kernel::linear(x, wi, Tensor()).to_vector<float>();
    int bad_t = 0, bad_plain = 0;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t i = 0; i < I; ++i) {
        const float want = kernel::from_bf16(kernel::to_bf16(xv[static_cast<size_t>(r * I + i)]));
        const float got_t = dw[static_cast<size_t>(r * I + i)], got_p = y[static_cast<size_t>(r * I + i)];
        // Compared as numbers: the sums' other terms (+0) turn a -0 into +0.
        bad_t += got_t != want;
        bad_plain += got_p != want;
      }
    CHECK(bad_t == 0);
    CHECK(bad_plain == 0);
  }
}

TEST_CASE("Linear with a frozen weight: the bias gradient alone, or with the input's, in float32 and bf16") {
  const int64_t N = 4, T = 64, I = 96, O = 160;  // 2 N T I O: 11.8 MFLOP, a bf16 product
  Tensor r = test::det_tensor({N, T, O}, 31, -1, 1);
  Tensor w = test::det_tensor({O, I}, 32, -0.3, 0.3);  // never requires grad
  Tensor r2 = reshape(f64(r), {N * T, O});
  std::vector<Precision> precisions = {Precision::f32};
  if (bf16_here()) precisions.push_back(Precision::bf16);
  for (Precision p : precisions) {
    CAPTURE(precision_name(p));
    for (bool x_grad : {false, true}) {
      CAPTURE(x_grad);
      Tensor x = test::det_tensor({N, T, I}, 33, -1, 1);
      if (x_grad) x.set_requires_grad();
      Tensor bias = test::det_tensor({O}, 34, -1, 1).set_requires_grad();
      {
        PrecisionScope s(p);
        backward(sum(mul(linear(x, w, bias), r)));
      }
      CHECK_FALSE(w.grad().defined());
      REQUIRE(bias.grad().defined());
      CHECK(max_rel(bias.grad(), sum(r2, {0})) < 1e-6);
      CHECK(x.grad().defined() == x_grad);
      if (x_grad)
        CHECK(worst_in_bounds(x.grad(), reshape(matmul(r2, f64(w)), {N, T, I}),
                              reshape(matmul(abs(r2), abs(f64(w))), {N, T, I}), O) <= 1.0);
    }
  }
}
