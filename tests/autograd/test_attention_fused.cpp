// tests/autograd/test_attention_fused.cpp: the fused blockwise attention
// against the plain path (scores, mask, softmax, weighted sum, each its own
// op) for every kind of block size, causal and not, cross-attention (S != T),
// grouped-query heads and strided inputs; values and all three gradients.
// Plus finite differences in float64.
#include <cmath>
#include <cstring>

#include "core/kernels.h"
#include "test_util.h"

using namespace heed;
using test::same_bits;

namespace {

// The reference: q [N, T, H, K], k [N, S, G, K], v [N, S, G, E] -> [N, T, H, E];
// dropout p > 0 on the probabilities [N, H, T, S] from g, as
// MultiHeadAttention's plain path applies it.
Tensor plain_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, double p = 0,
                       Generator* g = nullptr) {
  const int64_t N = q.size(0), T = q.size(1), H = q.size(2), S = k.size(1), G = k.size(2), r = H / G;
  Tensor qh = transpose(q, 1, 2);  // [N, H, T, K]
  Tensor kh = transpose(k, 1, 2);  // [N, G, S, K]
  Tensor vh = transpose(v, 1, 2);  // [N, G, S, E]
  if (r > 1) {  // repeat each key/value head for its r query heads
    kh = reshape(expand(unsqueeze(kh, 2), {N, G, r, S, k.size(3)}), {N, H, S, k.size(3)});
    vh = reshape(expand(unsqueeze(vh, 2), {N, G, r, S, v.size(3)}), {N, H, S, v.size(3)});
  }
  Tensor s = matmul(qh, transpose(kh, -1, -2)) * scale;  // [N, H, T, S]
  if (causal) {
    Tensor m = Tensor::zeros({T, S});
    float* p = m.data<float>();
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = i + S - T + 1; j < S; ++j) p[i * S + j] = 1;
    s = masked_fill(s, m, -1e30);
  }
  return transpose(matmul(dropout(softmax(s, -1), p, true, g), vh), 1, 2);  // [N, T, H, E]
}

Tensor leaf(const Shape& s, uint64_t seed, DType dt) {
  Tensor t = test::det_tensor(s, seed, -1.5, 1.5, dt);
  t.set_requires_grad(true);
  return t;
}

using test::max_diff;

struct Case {
  int64_t N, T, S, H, G, K, E;
  bool causal;
};

void compare(const Case& c, int64_t bq, int64_t bk, DType dt, bool strided) {
  INFO("N=" << c.N << " T=" << c.T << " S=" << c.S << " H=" << c.H << " G=" << c.G << " K=" << c.K << " E=" << c.E
            << " causal=" << c.causal << " block_q=" << bq << " block_k=" << bk << " strided=" << strided);
  const double tol = dt == DType::f64 ? 1e-12 : 2e-5;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.K));
  Tensor q0, k0, v0, q, k, v;
  if (strided) {
    // q, k, v as views of wider leaves (row stride > width), the layout a
    // fused QKV projection would hand over.
    q0 = leaf({c.N, c.T, c.H * c.K + 5}, 1, dt);
    k0 = leaf({c.N, c.S, c.G, c.K + 3}, 2, dt);
    v0 = leaf({c.N, c.G, c.E, c.S}, 3, dt);
  } else {
    q0 = leaf({c.N, c.T, c.H, c.K}, 1, dt);
    k0 = leaf({c.N, c.S, c.G, c.K}, 2, dt);
    v0 = leaf({c.N, c.S, c.G, c.E}, 3, dt);
  }
  // Fresh views for each pass (a view's graph is freed by its backward).
  auto views = [&] {
    if (!strided) {
      q = q0, k = k0, v = v0;
      return;
    }
    q = reshape(narrow(q0, 2, 2, c.H * c.K), {c.N, c.T, c.H, c.K});
    k = narrow(k0, 3, 1, c.K);
    v = permute(v0, {0, 3, 1, 2});  // [N, S, G, E] channels-first: the last dim has stride S
  };
  views();
  Tensor w = test::det_tensor({c.N, c.T, c.H, c.E}, 9, -1, 1, dt);  // a fixed output weighting

  Tensor ref = plain_attention(q, k, v, c.causal, scale);
  backward(sum(ref * w));
  Tensor gq = q0.grad(), gk = k0.grad(), gv = v0.grad();
  q0.zero_grad();
  k0.zero_grad();
  v0.zero_grad();

  views();
  Tensor out = scaled_dot_product_attention(q, k, v, c.causal, scale, bq, bk);
  CHECK(out.shape() == Shape{c.N, c.T, c.H, c.E});
  CHECK(max_diff(out, ref) <= tol);
  backward(sum(out * w));
  CHECK(max_diff(q0.grad(), gq) <= tol);
  CHECK(max_diff(k0.grad(), gk) <= tol);
  CHECK(max_diff(v0.grad(), gv) <= tol);
}

}  // namespace

TEST_CASE("fused attention equals the plain path for every block size, forward and backward") {
  const std::vector<Case> cases{
      {2, 9, 9, 2, 2, 4, 4, false},   // self-attention
      {2, 9, 9, 2, 2, 4, 4, true},    // causal
      {1, 7, 11, 4, 2, 3, 5, false},  // cross-attention (S != T), grouped-query, E != K
      {1, 5, 12, 4, 1, 4, 4, true},   // causal with a cached prefix: S > T, one KV head
  };
  for (const Case& c : cases)
    for (DType dt : {DType::f64, DType::f32})
      for (int64_t b : {1, 2, 3, 4, 7, 64}) {  // 1, odd, even, a single block holding everything
        compare(c, b, b, dt, false);
        compare(c, b, (b % 5) + 1, dt, false);  // query and key blocks of different sizes
      }
  // Views: heads' rows wider than the heads, and channels-first values
  // (float32 copies them transposed for its block products).
  for (const Case& c : cases)
    for (DType dt : {DType::f64, DType::f32}) {
      compare(c, 3, 2, dt, true);
      compare(c, 8, 8, dt, true);
    }
  compare(cases[1], 0, 0, DType::f32, true);  // the defaults
}

TEST_CASE("fused attention passes finite differences in float64") {
  for (bool causal : {false, true}) {
    INFO("causal=" << causal);
    auto f = [causal](const std::vector<Tensor>& in) {
      return scaled_dot_product_attention(in[0], in[1], in[2], causal, 0.7, 2, 3);
    };
    std::vector<Tensor> in{leaf({2, 5, 2, 3}, 4, DType::f64), leaf({2, 5, 1, 3}, 5, DType::f64),
                           leaf({2, 5, 1, 2}, 6, DType::f64)};
    auto r = autograd::gradcheck(f, in);
    INFO(r.report);
    CHECK(r.ok);
  }
}

TEST_CASE("fused attention is deterministic across thread counts") {
  Tensor q = leaf({3, 40, 4, 8}, 1, DType::f32), k = leaf({3, 40, 2, 8}, 2, DType::f32),
         v = leaf({3, 40, 2, 8}, 3, DType::f32);
  auto run = [&](int threads) {
    heed::set_num_threads(threads);
    q.zero_grad();
    k.zero_grad();
    v.zero_grad();
    Tensor o = scaled_dot_product_attention(q, k, v, true, 0.35, 16, 16);
    backward(sum(o * o));
    return std::vector<std::vector<float>>{o.to_vector<float>(), q.grad().to_vector<float>(),
                                           k.grad().to_vector<float>(), v.grad().to_vector<float>()};
  };
  const int before = heed::num_threads();
  auto a = run(1), b = run(2);
  heed::set_num_threads(before);
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == b[i]);
}

TEST_CASE("fused attention rejects mismatched shapes, naming them") {
  Tensor q = Tensor::zeros({1, 4, 3, 8}), k = Tensor::zeros({1, 4, 2, 8}), v = Tensor::zeros({1, 4, 2, 8});
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, v, false, 1.0), doctest::Contains("[1, 4, 3, 8]"), Error);
  Tensor k2 = Tensor::zeros({1, 3, 3, 8}), v2 = Tensor::zeros({1, 3, 3, 8});
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k2, v2, true, 1.0), doctest::Contains("S=3"), Error);
}

TEST_CASE("fused attention in float32 at every instruction set: the plain path's values (baseline: OpenBLAS's block products), AVX2 and AVX-512 bit for bit") {
  const Case causal{2, 40, 40, 4, 2, 8, 8, true}, cross{1, 7, 11, 4, 2, 3, 5, false};
  std::vector<std::vector<std::vector<float>>> results;  // per vector ISA: output and gradients
  for (CpuIsa isa : {CpuIsa::baseline, CpuIsa::avx2, CpuIsa::avx512}) {
    if (isa > heed::cpu_isa_max()) continue;
    INFO("isa " << heed::cpu_isa_name(isa));
    test::KernelIsa at(isa);
    for (int64_t b : {3, 16, 64}) {
      compare(causal, b, b, DType::f32, false);
      compare(cross, b, b, DType::f32, false);
    }
    compare(causal, 8, 8, DType::f32, true);  // views: wider rows, channels-first values
    if (isa == CpuIsa::baseline) continue;
    Tensor q = leaf({2, 40, 4, 8}, 1, DType::f32), k = leaf({2, 40, 2, 8}, 2, DType::f32),
           v = leaf({2, 40, 2, 8}, 3, DType::f32);
    Tensor o = scaled_dot_product_attention(q, k, v, true, 0.35, 16, 16);
    backward(sum(o * o));
    results.push_back({o.to_vector<float>(), q.grad().to_vector<float>(), k.grad().to_vector<float>(),
                       v.grad().to_vector<float>()});
  }
  if (results.size() == 2)
    for (size_t i = 0; i < results[0].size(); ++i) CHECK(results[0][i] == results[1][i]);
  else
    MESSAGE("one vector instruction set here: AVX2 against AVX-512 not compared");
}

TEST_CASE("fused attention keeps its probabilities when all keys are one block: softmax's values, and the gradients of recomputing them") {
  namespace k = heed::kernel;
  // {N, T, S, H, G, K, E, causal}: all keys fit one default block (128, causal 64).
  const std::vector<Case> cases{{2, 9, 9, 2, 2, 4, 4, true}, {1, 7, 11, 4, 2, 3, 5, false}, {2, 37, 40, 2, 1, 8, 6, true},
                                {3, 64, 64, 4, 4, 32, 32, true}, {2, 100, 100, 1, 1, 16, 16, false}};
  std::vector<std::vector<std::vector<float>>> per_isa;
  for (CpuIsa isa : {CpuIsa::baseline, CpuIsa::avx2, CpuIsa::avx512}) {
    if (isa > heed::cpu_isa_max()) continue;
    INFO("isa " << heed::cpu_isa_name(isa));
    test::KernelIsa at(isa);
    std::vector<std::vector<float>> results;
    for (const Case& c : cases) {
      INFO("T=" << c.T << " S=" << c.S << " H=" << c.H << " G=" << c.G << " causal=" << c.causal);
      const double scale = 0.4;
      Tensor q = test::det_tensor({c.N, c.T, c.H, c.K}, 1, -1.5, 1.5), kk = test::det_tensor({c.N, c.S, c.G, c.K}, 2, -1.5, 1.5),
             v = test::det_tensor({c.N, c.S, c.G, c.E}, 3), go = test::det_tensor({c.N, c.T, c.H, c.E}, 4);
      const k::AttentionOut kept = k::attention_forward(q, kk, v, c.causal, scale, 0, 0, true);
      const k::AttentionOut plain = k::attention_forward(q, kk, v, c.causal, scale);
      CHECK_FALSE(plain.probs.defined());
      CHECK(kept.out.to_vector<float>() == plain.out.to_vector<float>());  // keeping them changes nothing else
      CHECK(kept.lse.to_vector<float>() == plain.lse.to_vector<float>());
      if (isa == CpuIsa::baseline) {  // no float32 block path: recomputed as before
        CHECK_FALSE(kept.probs.defined());
        continue;
      }
      REQUIRE(kept.probs.defined());
      CHECK(kept.probs.shape() == Shape{c.N, c.H, c.T, c.S});
      // p_ij = e^(s_ij - lse_i) for the keys query i sees.
      const std::vector<float> P = kept.probs.to_vector<float>(), L = kept.lse.to_vector<float>();
      const Tensor qc = contiguous(q), kc = contiguous(kk);
      const float *pq = qc.data<float>(), *pk = kc.data<float>();
      double worst = 0, worst_sum = 0;
      for (int64_t n = 0; n < c.N; ++n)
        for (int64_t h = 0; h < c.H; ++h)
          for (int64_t i = 0; i < c.T; ++i) {
            const int64_t g = h / (c.H / c.G), visible = c.causal ? i + c.S - c.T + 1 : c.S;
            const double lse = L[static_cast<size_t>((n * c.H + h) * c.T + i)];
            double sum = 0;
            for (int64_t j = 0; j < visible; ++j) {
              double s = 0;
              for (int64_t d = 0; d < c.K; ++d)
                s += double(pq[((n * c.T + i) * c.H + h) * c.K + d]) * pk[((n * c.S + j) * c.G + g) * c.K + d];
              const double p = P[static_cast<size_t>(((n * c.H + h) * c.T + i) * c.S + j)];
              worst = std::max(worst, std::abs(p - std::exp(scale * s - lse)));
              sum += p;
            }
            worst_sum = std::max(worst_sum, std::abs(sum - 1.0));
          }
      CHECK(worst < 5e-6);  // float32 scores up to ~30 in size
      CHECK(worst_sum < 1e-5);
      // The backward from them: the recomputing backward's gradients up to rounding.
      const k::AttentionGrads a = k::attention_backward(q, kk, v, kept.out, kept.lse, go, c.causal, scale, 0, 0, kept.probs);
      const k::AttentionGrads b = k::attention_backward(q, kk, v, plain.out, plain.lse, go, c.causal, scale);
      CHECK(max_diff(a.dq, b.dq) < 1e-5);
      CHECK(max_diff(a.dk, b.dk) < 1e-5);
      CHECK(max_diff(a.dv, b.dv) < 1e-5);
      CHECK(max_diff(a.dq, Tensor::zeros(a.dq.shape())) > 1e-3);  // not trivially zero
      results.push_back(P);
      for (const Tensor* t : {&a.dq, &a.dk, &a.dv}) results.push_back(t->to_vector<float>());
    }
    // Not kept: more keys than one block, or float64.
    const Case big{1, 20, 20, 1, 1, 4, 4, false};
    Tensor q = test::det_tensor({1, 20, 1, 4}, 5), kk = test::det_tensor({1, 20, 1, 4}, 6), v = test::det_tensor({1, 20, 1, 4}, 7);
    CHECK_FALSE(k::attention_forward(q, kk, v, big.causal, 1.0, 8, 8, true).probs.defined());
    CHECK_FALSE(k::attention_forward(k::to_dtype(q, DType::f64), k::to_dtype(kk, DType::f64), k::to_dtype(v, DType::f64), false,
                                     1.0, 0, 0, true)
                    .probs.defined());
    if (isa != CpuIsa::baseline) per_isa.push_back(results);
  }
  if (per_isa.size() == 2)  // AVX2 and AVX-512: the same bits
    for (size_t i = 0; i < per_isa[0].size(); ++i) CHECK(per_isa[0][i] == per_isa[1][i]);
  // Probabilities of the wrong shape are refused, naming both.
  Tensor q = test::det_tensor({1, 4, 2, 8}, 8), kk = test::det_tensor({1, 4, 2, 8}, 9), v = test::det_tensor({1, 4, 2, 8}, 10);
  const k::AttentionOut f = k::attention_forward(q, kk, v, false, 1.0);
  CHECK_THROWS_WITH_AS(k::attention_backward(q, kk, v, f.out, f.lse, f.out, false, 1.0, 0, 0, Tensor::zeros({1, 2, 4, 5})),
                       doctest::Contains("[1, 2, 4, 5]"), Error);
}

namespace {
}  // namespace

TEST_CASE("fused attention from one projection (scaled_dot_product_attention_qkv) equals it on the three views, bit for bit, gradient included") {
  struct Qkv {
    int64_t N, T, H, G, K;
    bool causal;
  };
  const std::vector<Precision> precisions =
      test::bf16_here() ? std::vector<Precision>{Precision::f32, Precision::bf16} : std::vector<Precision>{Precision::f32};
  const Precision before = precision();
  for (const Qkv& c : {Qkv{2, 9, 2, 2, 4, false}, Qkv{2, 9, 4, 2, 4, true}, Qkv{1, 70, 4, 1, 8, true},
                       Qkv{3, 64, 4, 4, 32, true}})
    for (DType dt : {DType::f64, DType::f32})
      for (Precision p : precisions) {
        if (dt == DType::f64 && p == Precision::bf16) continue;
        INFO("N=" << c.N << " T=" << c.T << " H=" << c.H << " G=" << c.G << " K=" << c.K << " causal=" << c.causal
                  << " dtype=" << dtype_name(dt) << " bf16=" << (p == Precision::bf16));
        set_precision(p);
        const int64_t W = (c.H + 2 * c.G) * c.K;
        Tensor qkv = leaf({c.N, c.T, W}, 11, dt), w = test::det_tensor({c.N, c.T, c.H, c.K}, 12, -1, 1, dt);
        const double scale = 0.3;
        auto part = [&](int64_t first, int64_t n) {
          return reshape(narrow(qkv, 2, first * c.K, n * c.K), {c.N, c.T, n, c.K});
        };
        Tensor ref = scaled_dot_product_attention(part(0, c.H), part(c.H, c.G), part(c.H + c.G, c.G), c.causal, scale);
        backward(sum(ref * w));
        const Tensor gref = qkv.grad();
        qkv.zero_grad();
        Tensor out = scaled_dot_product_attention_qkv(qkv, c.H, c.G, c.causal, scale);
        REQUIRE(out.shape() == ref.shape());
        CHECK(same_bits(out, ref));
        backward(sum(out * w));
        CHECK(same_bits(qkv.grad(), gref));
      }
  set_precision(before);
}

TEST_CASE("scaled_dot_product_attention_qkv passes finite differences in float64, and refuses bad widths naming them") {
  for (bool causal : {false, true}) {
    INFO("causal=" << causal);
    auto f = [causal](const std::vector<Tensor>& in) { return scaled_dot_product_attention_qkv(in[0], 2, 1, causal, 0.7); };
    std::vector<Tensor> in{leaf({2, 5, 12}, 7, DType::f64)};  // heads 2, kv_heads 1, K 3
    auto r = autograd::gradcheck(f, in);
    INFO(r.report);
    CHECK(r.ok);
  }
  Tensor bad = Tensor::zeros({1, 4, 13});
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention_qkv(bad, 2, 1, false, 1.0), doctest::Contains("[1, 4, 13]"), Error);
  Tensor ok = Tensor::zeros({1, 4, 12});
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention_qkv(ok, 3, 2, false, 1.0), doctest::Contains("heads=3 kv_heads=2"),
                       Error);
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention_qkv(Tensor::zeros({4, 12}), 2, 1, false, 1.0),
                       doctest::Contains("[4, 12]"), Error);
}

TEST_CASE("attention backward into given tensors: the same bits as into new ones; a wrong one is refused, naming it") {
  Tensor q = test::det_tensor({2, 8, 2, 4}, 1), k = test::det_tensor({2, 8, 2, 4}, 2),
         v = test::det_tensor({2, 8, 2, 4}, 3), g = test::det_tensor({2, 8, 2, 4}, 4);
  kernel::AttentionOut f = kernel::attention_forward(q, k, v, true, 0.5);
  kernel::AttentionGrads fresh = kernel::attention_backward(q, k, v, f.out, f.lse, g, true, 0.5);
  Tensor wide = Tensor::full({2, 8, 3 * 8}, 7.0);  // dq, dk, dv side by side in each row
  auto part = [&](int64_t i) { return kernel::view(kernel::narrow(wide, 2, 8 * i, 8), {2, 8, 2, 4}); };
  const kernel::AttentionGrads into{part(0), part(1), part(2)};
  kernel::attention_backward(q, k, v, f.out, f.lse, g, true, 0.5, 0, 0, Tensor(), &into);
  CHECK(same_bits(kernel::contiguous(part(0)), fresh.dq));
  CHECK(same_bits(kernel::contiguous(part(1)), fresh.dk));
  CHECK(same_bits(kernel::contiguous(part(2)), fresh.dv));
  const kernel::AttentionGrads wrong{part(0), Tensor::empty({2, 8, 2, 5}), part(2)};
  CHECK_THROWS_WITH_AS(kernel::attention_backward(q, k, v, f.out, f.lse, g, true, 0.5, 0, 0, Tensor(), &wrong),
                       doctest::Contains("dk into is [2, 8, 2, 5]"), Error);
}

// ---- dropout on the probabilities, inside the fused kernel ----

namespace {

struct Grads {
  Tensor out, dq, dk, dv;
};

// Output and gradients of f(q, k, v) weighted by w, from fresh leaves.
template <class F>
Grads run_weighted(const Case& c, DType dt, F&& f) {
  Tensor q = leaf({c.N, c.T, c.H, c.K}, 1, dt), k = leaf({c.N, c.S, c.G, c.K}, 2, dt),
         v = leaf({c.N, c.S, c.G, c.E}, 3, dt);
  Tensor w = test::det_tensor({c.N, c.T, c.H, c.E}, 9, -1, 1, dt);
  Tensor out = f(q, k, v);
  backward(sum(out * w));
  return {out, q.grad(), k.grad(), v.grad()};
}

// The fused kernel with dropout p against the plain path given the same
// generator state: the same masks, so the same values up to rounding; the
// generator advanced alike. Returns the fused result.
Grads compare_dropout(const Case& c, int64_t bq, int64_t bk, DType dt, double p) {
  INFO("N=" << c.N << " T=" << c.T << " S=" << c.S << " H=" << c.H << " G=" << c.G << " K=" << c.K << " E=" << c.E
            << " causal=" << c.causal << " block_q=" << bq << " block_k=" << bk << " p=" << p);
  const double tol = dt == DType::f64 ? 1e-12 : 2e-5;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.K));
  Generator base(1234);
  base.reserve(7);  // not at the stream's start
  Generator ga = base, gb = base;
  const Grads ref = run_weighted(c, dt, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
    return plain_attention(q, k, v, c.causal, scale, p, &ga);
  });
  const Grads got = run_weighted(c, dt, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
    return scaled_dot_product_attention(q, k, v, c.causal, scale, bq, bk, p, &gb);
  });
  CHECK(gb.offset() == ga.offset());
  CHECK(gb.offset() == base.offset() + static_cast<uint64_t>(c.N * c.H * c.T * c.S));
  CHECK(max_diff(got.out, ref.out) <= tol);
  CHECK(max_diff(got.dq, ref.dq) <= tol);
  CHECK(max_diff(got.dk, ref.dk) <= tol);
  CHECK(max_diff(got.dv, ref.dv) <= tol);
  return got;
}

}  // namespace

TEST_CASE("fused attention with dropout: the plain path's masks and values for every block size, forward and backward") {
  const std::vector<Case> cases{
      {2, 9, 9, 2, 2, 4, 4, false},
      {2, 9, 9, 2, 2, 4, 4, true},
      {1, 7, 11, 4, 2, 3, 5, false},  // cross-attention, grouped-query, E != K
      {1, 5, 12, 4, 1, 4, 4, true},   // causal with a prefix: S > T
      {2, 70, 70, 2, 1, 8, 8, true},  // more keys than the default causal block
  };
  for (const Case& c : cases)
    for (DType dt : {DType::f64, DType::f32})
      for (double p : {0.1, 0.5}) {
        // Blocks of 1, odd, even, all keys in one (float32 then keeps the
        // probabilities and draws the masks again in the backward), and the
        // defaults.
        for (int64_t b : {1, 3, 4, 128}) {
          compare_dropout(c, b, b, dt, p);
          compare_dropout(c, b, (b % 5) + 1, dt, p);
        }
        const Grads got = compare_dropout(c, 0, 0, dt, p);
        // The masks did something: without dropout the output differs.
        const Grads none = run_weighted(c, dt, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
          return scaled_dot_product_attention(q, k, v, c.causal, 1.0 / std::sqrt(double(c.K)));
        });
        CHECK(max_diff(got.out, none.out) > 0.01);
        CHECK(max_diff(got.dq, none.dq) > 0.01);
      }
  // Every probability dropped: zero output and gradients, and nothing drawn, as dropout(1).
  const Case c{2, 9, 9, 2, 2, 4, 4, true};
  for (DType dt : {DType::f64, DType::f32}) {
    Generator g(3);
    const Grads all = run_weighted(c, dt, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
      return scaled_dot_product_attention(q, k, v, true, 0.5, 0, 0, 1.0, &g);
    });
    for (const Tensor& t : {all.out, all.dq, all.dk, all.dv}) CHECK(test::max_abs(t) == 0.0);
    CHECK(g.offset() == 0);
    dropout(Tensor::ones({3}), 1.0, true, &g);
    CHECK(g.offset() == 0);
  }
}

TEST_CASE("fused attention with dropout passes finite differences in float64, the masks held fixed") {
  for (bool causal : {false, true})
    for (int64_t b : {2, 16}) {  // several key blocks, and one
      INFO("causal=" << causal << " block=" << b);
      auto f = [causal, b](const std::vector<Tensor>& in) {
        Generator g(5);  // the same masks at every evaluation
        return scaled_dot_product_attention(in[0], in[1], in[2], causal, 0.7, b, b, 0.3, &g);
      };
      std::vector<Tensor> in{leaf({2, 5, 2, 3}, 4, DType::f64), leaf({2, 5, 1, 3}, 5, DType::f64),
                             leaf({2, 5, 1, 2}, 6, DType::f64)};
      auto r = autograd::gradcheck(f, in);
      INFO(r.report);
      CHECK(r.ok);
    }
}

TEST_CASE("fused attention with dropout: the same bits on 1 and 2 threads, at AVX2 and AVX-512, and from one projection") {
  const std::vector<Precision> precisions =
      test::bf16_here() ? std::vector<Precision>{Precision::f32, Precision::bf16} : std::vector<Precision>{Precision::f32};
  const Precision before_p = precision();
  const int before_t = heed::num_threads();
  const Case c{3, 40, 40, 4, 2, 8, 8, true};
  for (Precision prec : precisions) {
    INFO("bf16=" << (prec == Precision::bf16));
    set_precision(prec);
    auto run = [&](int threads, int64_t b) {
      heed::set_num_threads(threads);
      Generator g(11);
      const Grads r = run_weighted(c, DType::f32, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
        return scaled_dot_product_attention(q, k, v, true, 0.35, b, b, 0.25, &g);
      });
      return std::vector<std::vector<float>>{r.out.to_vector<float>(), r.dq.to_vector<float>(),
                                             r.dk.to_vector<float>(), r.dv.to_vector<float>()};
    };
    for (int64_t b : {16, 64}) {  // masks drawn again, and kept probabilities
      INFO("block " << b);
      const auto one = run(1, b), two = run(2, b);
      for (size_t i = 0; i < one.size(); ++i) CHECK(one[i] == two[i]);
      if (prec == Precision::f32 && heed::cpu_isa_max() >= CpuIsa::avx512) {
        test::KernelIsa at(CpuIsa::avx2);
        const auto avx2 = run(2, b);
        for (size_t i = 0; i < one.size(); ++i) CHECK(one[i] == avx2[i]);
      }
    }
    heed::set_num_threads(before_t);
    // scaled_dot_product_attention_qkv: the three views' bits, the same masks.
    const int64_t N = 2, T = 70, H = 4, G = 2, K = 8, W = (H + 2 * G) * K;
    Tensor qkv = leaf({N, T, W}, 11, DType::f32), w = test::det_tensor({N, T, H, K}, 12, -1, 1, DType::f32);
    auto part = [&](int64_t first, int64_t n) { return reshape(narrow(qkv, 2, first * K, n * K), {N, T, n, K}); };
    Generator ga(21), gb(21);
    Tensor ref = scaled_dot_product_attention(part(0, H), part(H, G), part(H + G, G), true, 0.3, 0, 0, 0.2, &ga);
    backward(sum(ref * w));
    const Tensor gref = qkv.grad();
    qkv.zero_grad();
    Tensor out = scaled_dot_product_attention_qkv(qkv, H, G, true, 0.3, 0.2, &gb);
    CHECK(same_bits(out, ref));
    backward(sum(out * w));
    CHECK(same_bits(qkv.grad(), gref));
    CHECK(ga.offset() == gb.offset());
  }
  set_precision(before_p);
}

TEST_CASE("fused attention with dropout in bf16: the float32 path's masks") {
  if (!test::bf16_here()) {
    MESSAGE("no native bf16 on this CPU: the bf16 path is not reachable here");
    return;
  }
  const Precision before = precision();
  for (const Case& c : {Case{2, 40, 40, 4, 2, 8, 8, true}, Case{1, 7, 11, 4, 2, 3, 5, false}})
    for (int64_t b : {16, 64}) {
      INFO("T=" << c.T << " block " << b);
      auto run = [&](Precision prec, double p) {
        set_precision(prec);
        Generator g(31);
        return run_weighted(c, DType::f32, [&](const Tensor& q, const Tensor& k, const Tensor& v) {
          return scaled_dot_product_attention(q, k, v, c.causal, 0.35, b, b, p, &g);
        });
      };
      const Grads f32 = run(Precision::f32, 0.3), bf = run(Precision::bf16, 0.3), none = run(Precision::bf16, 0.0);
      // bf16's rounding (8-bit mantissa: ~2^-9 relative per operand) and
      // nothing like another mask, which moves values by their own size.
      const double tol = 0.02;
      CHECK(max_diff(bf.out, f32.out) <= tol * test::max_abs(f32.out));
      CHECK(max_diff(bf.dq, f32.dq) <= tol * test::max_abs(f32.dq));
      CHECK(max_diff(bf.dk, f32.dk) <= tol * test::max_abs(f32.dk));
      CHECK(max_diff(bf.dv, f32.dv) <= tol * test::max_abs(f32.dv));
      CHECK(max_diff(bf.out, f32.out) > 0.0);  // the bf16 path ran
      CHECK(max_diff(none.out, f32.out) > 10 * tol * test::max_abs(f32.out));
    }
  set_precision(before);
}

TEST_CASE("fused attention refuses a dropout probability out of range naming it; a refused call leaves the generator as it was") {
  Tensor q = Tensor::zeros({1, 4, 2, 8}), k = Tensor::zeros({1, 4, 2, 8}), v = Tensor::zeros({1, 4, 2, 8});
  Generator g(4);
  for (double p : {-0.1, 1.5, std::nan("")}) {
    CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, v, false, 1.0, 0, 0, p, &g),
                         doctest::Contains("dropout_p"), Error);
    CHECK(g.offset() == 0);
  }
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k, v, false, 1.0, 0, 0, 1.5, &g), doctest::Contains("1.5"),
                       Error);
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention_qkv(Tensor::zeros({1, 4, 24}), 1, 1, false, 1.0, 2.0, &g),
                       doctest::Contains("scaled_dot_product_attention_qkv: dropout_p 2 out of range"), Error);
  Tensor k2 = Tensor::zeros({1, 3, 2, 8}), v2 = Tensor::zeros({1, 3, 2, 8});
  CHECK_THROWS_WITH_AS(scaled_dot_product_attention(q, k2, v2, true, 1.0, 0, 0, 0.2, &g), doctest::Contains("S=3"),
                       Error);
  CHECK(g.offset() == 0);
  scaled_dot_product_attention(q, k, v, false, 1.0, 0, 0, 0.2, &g);
  CHECK(g.offset() == 1 * 2 * 4 * 4);
}

TEST_CASE("fused attention with dropout on a process's share of a batch draws its rows of the global batch's masks") {
  // Data-parallel (optim::DataParallel sets the shard): the process of rank 1
  // of 2 computes rows 2-3 of a batch of 4, and must get the one-process
  // run's output for those rows, not rows 0-1's masks again.
  for (bool causal : {false, true}) {
    CAPTURE(causal);
    Generator init(11);
    const Tensor q = randn({4, 9, 2, 4}, &init, DType::f64), k = randn({4, 9, 2, 4}, &init, DType::f64),
                 v = randn({4, 9, 2, 4}, &init, DType::f64);
    Generator one(3);
    const Tensor all = scaled_dot_product_attention(q, k, v, causal, 0.5, 0, 0, 0.3, &one);
    for (int r = 0; r < 2; ++r) {
      CAPTURE(r);
      Generator g(3);
      g.set_batch_shard(r, 2);
      auto rows = [&](const Tensor& t) { return contiguous(narrow(t, 0, 2 * r, 2)); };
      const Tensor mine = scaled_dot_product_attention(rows(q), rows(k), rows(v), causal, 0.5, 0, 0, 0.3, &g);
      CHECK(same_bits(mine, rows(all)));
      CHECK(g.state() == one.state());
    }
  }
}
