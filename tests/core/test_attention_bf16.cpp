// tests/core/test_attention_bf16.cpp: the fused attention's bf16 path
// (set_precision(Precision::bf16): the six block products take bf16 operands
// with float32 accumulation) against a float64 reference, element by element,
// within a bound derived from bf16's 8-bit mantissa.
//
// The bound. Rounding to bf16 moves a value by at most 2^-9 of itself, so a
// product of two rounded values is within u2 = 2^-8 + 2^-18 of the exact
// product; float32 accumulation over n terms adds at most n 2^-24 of the sum
// of |terms| (taken with slack as (n + 64) 2^-23, which also covers the fast
// exp's 3e-7 and the log, divisions and rescalings of the online softmax).
// With a = scale |Q| |K|^T (elementwise absolute values; P, dP, D, dS below
// are the exact float64 quantities):
//  - scores: |s~_ij - s_ij| <= d_ij = (u2 + K 2^-23) a_ij;
//  - probabilities: p~_ij / p_ij = e^(d~_ij) / sum_k p_ik e^(d~_ik) with
//    |d~| <= d, so |p~_ij - p_ij| <= r_ij p_ij, r_ij = e^(d_ij + L_i) - 1,
//    L_i = log sum_k p_ik e^(d_ik) (Jensen bounds the denominator both ways);
//  - output: o = sum_j bf16(p~_ij) bf16(v_j) (l sums unrounded values), so
//    |o~ - o|_ic <= sum_j p_ij (r_ij + (1 + r_ij) g_S) |v_jc|, g_n = u2 + (n + 64) 2^-23;
//  - dV_jc = sum_i bf16(p~_ij) bf16(dO_ic): the same with |dO| and g over the
//    r T queries summed;
//  - dP: within (u2 + E 2^-23) (|dO| |V|^T)_ij; D_i = dO_i . o~_i within
//    sum_c |dO_ic| (bound_o_ic + E 2^-23 |o_ic|); so dS = p (dP - D) is
//    within e_ij = r_ij p_ij |dP_ij - D_i| + (1 + r_ij) p_ij (bound_dP_ij + bound_D_i);
//  - dQ = scale sum_j bf16(dS~_ij) bf16(k_j): within scale sum_j (e_ij (1 + u2)
//    + |dS_ij| g_S) |k_jc|; dK likewise with |Q| and g over r T.
// First-order terms are kept exactly and second-order ones (~2^-16) are
// inside the slack. The exact values are the float64 kernel's. The bound
// assumes every rounding errs the same way, so the largest errors sit 4-80x
// inside it; an error of float32's size would sit ~10^4 x inside, which is
// why each case also checks that the bf16 error is far above the float32
// kernel's.
#include <cmath>
#include <cstring>

#include "test_util.h"

using namespace heed;
using test::bf16_here;
using test::PrecisionScope;
using test::ThreadScope;

namespace {

struct BlockCase {
  int64_t N, T, S, H, G, K, E;
  bool causal;
  int64_t bq = 0, bk = 0;  // 0: the kernel's default
  double scale = 0;        // 0: 1 / sqrt(K)
  bool channels_first = false;
  bool padded = false;  // rows wider than the heads (views of a wider tensor, as a fused projection gives)
};

// The exact values and each element's error bound, in logical order
// [N, T, H, K] (q, dQ), [N, S, G, K] (k, dK), [N, S, G, E] (v, dV), [N, T, H, E] (o).
struct Reference {
  std::vector<double> o, dq, dk, dv;
  std::vector<double> bo, bdq, bdk, bdv;
};

Reference reference(const BlockCase& c, double scale, const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v, const std::vector<double>& go) {
  const int64_t N = c.N, T = c.T, S = c.S, H = c.H, G = c.G, K = c.K, E = c.E, rr = H / G;
  const double u2 = std::ldexp(1.0, -8) + std::ldexp(1.0, -18), ulp = std::ldexp(1.0, -23);
  auto g_of = [&](int64_t n) { return u2 + double(n + 64) * ulp; };
  const double uK = u2 + double(K) * ulp, uE = u2 + double(E) * ulp;
  Reference R;
  R.o.assign(size_t(N * T * H * E), 0.0);
  R.bo = R.o;
  R.dq.assign(size_t(N * T * H * K), 0.0);
  R.bdq = R.dq;
  R.dk.assign(size_t(N * S * G * K), 0.0);
  R.bdk = R.dk;
  R.dv.assign(size_t(N * S * G * E), 0.0);
  R.bdv = R.dv;
  auto Q = [&](int64_t n, int64_t i, int64_t h, int64_t x) { return q[size_t(((n * T + i) * H + h) * K + x)]; };
  auto Kx = [&](int64_t n, int64_t j, int64_t g, int64_t x) { return k[size_t(((n * S + j) * G + g) * K + x)]; };
  auto V = [&](int64_t n, int64_t j, int64_t g, int64_t x) { return v[size_t(((n * S + j) * G + g) * E + x)]; };
  auto GO = [&](int64_t n, int64_t i, int64_t h, int64_t x) { return go[size_t(((n * T + i) * H + h) * E + x)]; };
  std::vector<double> p(size_t(T * S)), r(size_t(T * S)), dS(size_t(T * S)), eS(size_t(T * S));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / rr;
      for (int64_t i = 0; i < T; ++i) {
        const int64_t vis = c.causal ? i + S - T + 1 : S;
        std::vector<double> s(static_cast<size_t>(vis)), d(static_cast<size_t>(vis));
        double mx = -1e300;
        for (int64_t j = 0; j < vis; ++j) {
          double dot = 0, a = 0;
          for (int64_t x = 0; x < K; ++x) {
            dot += Q(n, i, h, x) * Kx(n, j, g, x);
            a += std::abs(Q(n, i, h, x) * Kx(n, j, g, x));
          }
          s[size_t(j)] = scale * dot;
          d[size_t(j)] = uK * scale * a;
          mx = std::max(mx, s[size_t(j)]);
        }
        double l = 0;
        for (int64_t j = 0; j < vis; ++j) l += std::exp(s[size_t(j)] - mx);
        double L = 0;
        for (int64_t j = 0; j < S; ++j) {
          p[size_t(i * S + j)] = j < vis ? std::exp(s[size_t(j)] - mx) / l : 0.0;
          if (j < vis) L += p[size_t(i * S + j)] * std::exp(d[size_t(j)]);
        }
        L = std::log(L);
        for (int64_t j = 0; j < S; ++j) r[size_t(i * S + j)] = j < vis ? std::exp(d[size_t(j)] + L) - 1 : 0.0;
        const double gS = g_of(S);
        for (int64_t x = 0; x < E; ++x) {
          double o = 0, b = 0;
          for (int64_t j = 0; j < vis; ++j) {
            const double pij = p[size_t(i * S + j)], rij = r[size_t(i * S + j)];
            o += pij * V(n, j, g, x);
            b += pij * (rij + (1 + rij) * gS) * std::abs(V(n, j, g, x));
          }
          R.o[size_t(((n * T + i) * H + h) * E + x)] = o;
          R.bo[size_t(((n * T + i) * H + h) * E + x)] = b;
        }
        // D_i and its bound (the kernel uses its own output o~).
        double D = 0, bD = 0;
        for (int64_t x = 0; x < E; ++x) {
          const size_t at = size_t(((n * T + i) * H + h) * E + x);
          D += GO(n, i, h, x) * R.o[at];
          bD += std::abs(GO(n, i, h, x)) * (R.bo[at] + double(E) * ulp * std::abs(R.o[at]));
        }
        for (int64_t j = 0; j < S; ++j) {
          double dP = 0, b = 0;
          for (int64_t x = 0; x < E; ++x) {
            dP += GO(n, i, h, x) * V(n, j, g, x);
            b += std::abs(GO(n, i, h, x) * V(n, j, g, x));
          }
          const double pij = p[size_t(i * S + j)], rij = r[size_t(i * S + j)];
          dS[size_t(i * S + j)] = pij * (dP - D);
          eS[size_t(i * S + j)] = rij * pij * std::abs(dP - D) + (1 + rij) * pij * (uE * b + bD);
        }
      }
      const double gS = g_of(S), gT = g_of(rr * T);
      for (int64_t i = 0; i < T; ++i)
        for (int64_t x = 0; x < K; ++x) {
          double dq = 0, b = 0;
          for (int64_t j = 0; j < S; ++j) {
            dq += dS[size_t(i * S + j)] * Kx(n, j, g, x);
            b += (eS[size_t(i * S + j)] * (1 + u2) + std::abs(dS[size_t(i * S + j)]) * gS) * std::abs(Kx(n, j, g, x));
          }
          R.dq[size_t(((n * T + i) * H + h) * K + x)] = scale * dq;
          R.bdq[size_t(((n * T + i) * H + h) * K + x)] = scale * b;
        }
      for (int64_t j = 0; j < S; ++j) {
        for (int64_t x = 0; x < K; ++x) {
          double dk = 0, b = 0;
          for (int64_t i = 0; i < T; ++i) {
            dk += dS[size_t(i * S + j)] * Q(n, i, h, x);
            b += (eS[size_t(i * S + j)] * (1 + u2) + std::abs(dS[size_t(i * S + j)]) * gT) * std::abs(Q(n, i, h, x));
          }
          R.dk[size_t(((n * S + j) * G + g) * K + x)] += scale * dk;
          R.bdk[size_t(((n * S + j) * G + g) * K + x)] += scale * b;
        }
        for (int64_t x = 0; x < E; ++x) {
          double dv = 0, b = 0;
          for (int64_t i = 0; i < T; ++i) {
            const double pij = p[size_t(i * S + j)], rij = r[size_t(i * S + j)];
            dv += pij * GO(n, i, h, x);
            b += pij * (rij + (1 + rij) * gT) * std::abs(GO(n, i, h, x));
          }
          R.dv[size_t(((n * S + j) * G + g) * E + x)] += dv;
          R.bdv[size_t(((n * S + j) * G + g) * E + x)] += b;
        }
      }
    }
  return R;
}

// A float32 [N, L, heads, W] tensor holding vals (logical order), stored
// contiguously, channels-first (positions unit-stride: [N, heads, W, L]
// permuted) or padded (a view of [N, L, heads, W + 3]).
Tensor make(const std::vector<double>& vals, int64_t N, int64_t L, int64_t heads, int64_t W, bool channels_first,
            bool padded) {
  if (padded) {
    std::vector<double> wide(static_cast<size_t>(N * L * heads * (W + 3)), 1e30);  // the padding must go unread
    for (int64_t r = 0; r < N * L * heads; ++r)
      for (int64_t w = 0; w < W; ++w) wide[static_cast<size_t>(r * (W + 3) + w)] = vals[static_cast<size_t>(r * W + w)];
    return kernel::narrow(kernel::to_dtype(Tensor::from_f64(wide, {N, L, heads, W + 3}), DType::f32), 3, 0, W);
  }
  if (!channels_first) return kernel::to_dtype(Tensor::from_f64(vals, {N, L, heads, W}), DType::f32);
  std::vector<double> cf(vals.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t w = 0; w < W; ++w)
          cf[size_t(((n * heads + h) * W + w) * L + l)] = vals[size_t(((n * L + l) * heads + h) * W + w)];
  Tensor t = kernel::to_dtype(Tensor::from_f64(cf, {N, heads, W, L}), DType::f32);
  return kernel::permute(t, {0, 3, 1, 2});
}

// The float32 inputs' values as float64 (the reference sees exactly what the kernel sees).
std::vector<double> rounded(std::vector<double> v) {
  for (double& x : v) x = double(float(x));
  return v;
}

// max |got - exact| / bound over the elements (<= 1 passes), and max |got - exact|.
struct Worst {
  double in_bounds = 0, abs_err = 0;
};
Worst worst(const Tensor& got, const std::vector<double>& exact, const std::vector<double>& bound) {
  const auto g = got.to_vector<double>();
  REQUIRE(g.size() == exact.size());
  Worst w;
  for (size_t i = 0; i < g.size(); ++i) {
    const double e = std::abs(g[i] - exact[i]);
    w.in_bounds = std::max(w.in_bounds, e / (bound[i] + 1e-30));
    w.abs_err = std::max(w.abs_err, e);
  }
  return w;
}

double max_abs_of(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

void check_case(const BlockCase& c) {
  INFO("N=" << c.N << " T=" << c.T << " S=" << c.S << " H=" << c.H << " G=" << c.G << " K=" << c.K << " E=" << c.E
            << " causal=" << c.causal << " blocks=" << c.bq << "," << c.bk << " channels_first=" << c.channels_first
            << " padded=" << c.padded);
  const double scale = c.scale > 0 ? c.scale : 1.0 / std::sqrt(double(c.K));
  const auto qv = rounded(test::det_values(c.N * c.T * c.H * c.K, 11, -1.5, 1.5));
  const auto kv = rounded(test::det_values(c.N * c.S * c.G * c.K, 12, -1.5, 1.5));
  const auto vv = rounded(test::det_values(c.N * c.S * c.G * c.E, 13, -1.5, 1.5));
  const auto gv = rounded(test::det_values(c.N * c.T * c.H * c.E, 14, -1, 1));
  const bool cf = c.channels_first, pad = c.padded;
  const Tensor q = make(qv, c.N, c.T, c.H, c.K, cf, pad), k = make(kv, c.N, c.S, c.G, c.K, cf, pad),
               v = make(vv, c.N, c.S, c.G, c.E, cf, pad), go = make(gv, c.N, c.T, c.H, c.E, cf, pad);
  const Reference R = reference(c, scale, qv, kv, vv, gv);
  // The exact values are the float64 kernel's; the reference above, which
  // supplies the bounds, must agree with it.
  const Tensor q64 = Tensor::from_f64(qv, {c.N, c.T, c.H, c.K}), k64 = Tensor::from_f64(kv, {c.N, c.S, c.G, c.K}),
               v64 = Tensor::from_f64(vv, {c.N, c.S, c.G, c.E}), go64 = Tensor::from_f64(gv, {c.N, c.T, c.H, c.E});
  const kernel::AttentionOut f64 = kernel::attention_forward(q64, k64, v64, c.causal, scale, c.bq, c.bk);
  const kernel::AttentionGrads d64 =
      kernel::attention_backward(q64, k64, v64, f64.out, f64.lse, go64, c.causal, scale, c.bq, c.bk);
  const std::vector<double> o64 = f64.out.to_vector<double>(), dq64 = d64.dq.to_vector<double>(),
                            dk64 = d64.dk.to_vector<double>(), dv64 = d64.dv.to_vector<double>();
  for (auto [kern, ref] : {std::pair{&o64, &R.o}, {&dq64, &R.dq}, {&dk64, &R.dk}, {&dv64, &R.dv}}) {
    REQUIRE(kern->size() == ref->size());
    double diff = 0;
    for (size_t i = 0; i < kern->size(); ++i) diff = std::max(diff, std::abs((*kern)[i] - (*ref)[i]));
    REQUIRE(diff < 1e-12 * (1 + max_abs_of(*ref)));
  }

  auto run = [&](Precision p) {
    PrecisionScope ps(p);
    kernel::AttentionOut f = kernel::attention_forward(q, k, v, c.causal, scale, c.bq, c.bk);
    kernel::AttentionGrads d = kernel::attention_backward(q, k, v, f.out, f.lse, go, c.causal, scale, c.bq, c.bk);
    return std::make_pair(f, d);
  };
  const auto [f16, d16] = run(Precision::bf16);
  const auto [f32, d32] = run(Precision::f32);
  if (c.channels_first) {  // results laid out like their inputs
    CHECK(f16.out.stride(1) == 1);
    CHECK(d16.dq.stride(1) == 1);
    CHECK(d16.dk.stride(1) == 1);
    CHECK(d16.dv.stride(1) == 1);
  }
  struct Out {
    const char* name;
    const Tensor& bf16;
    const Tensor& f32;
    const std::vector<double>& exact;
    const std::vector<double>& bound;
  };
  for (const Out& o : {Out{"out", f16.out, f32.out, o64, R.bo}, Out{"dq", d16.dq, d32.dq, dq64, R.bdq},
                       Out{"dk", d16.dk, d32.dk, dk64, R.bdk}, Out{"dv", d16.dv, d32.dv, dv64, R.bdv}}) {
    INFO(o.name);
    const Worst w16 = worst(o.bf16, o.exact, o.bound), w32 = worst(o.f32, o.exact, o.bound);
    CHECK(w16.in_bounds <= 1.0);
    // bf16 really ran: its error is far above float32's (8 against 24 bits),
    // and still small.
    CHECK(w16.abs_err > 30 * w32.abs_err);
    CHECK(w16.abs_err < 2e-2 * max_abs_of(o.exact));
    MESSAGE(std::string(o.name) << ": bf16 error " << w16.abs_err << " (" << w16.in_bounds << " of the bound), float32 "
                   << w32.abs_err << ", largest value " << max_abs_of(o.exact));
  }
}

}  // namespace

TEST_CASE("bf16 attention: output and gradients within the bf16 bound of float64, far coarser than float32") {
  if (!bf16_here()) {
    MESSAGE("no native bf16 here: ", bf16_unsupported_reason());
    CHECK_THROWS_AS(set_precision(Precision::bf16), Error);
    CHECK(precision() == Precision::f32);
    return;
  }
  const std::vector<BlockCase> cases{
      // GQA (2 query heads per key/value head), causal, odd lengths, partial blocks.
      {2, 37, 37, 4, 2, 24, 20, true, 16, 16},
      // Cross-attention with odd widths and odd block sizes (the bf16 path makes them even).
      {1, 50, 77, 2, 1, 33, 17, false, 15, 21},
      // Causal with a cached prefix (S > T), the GPT's head width, default blocks.
      {2, 64, 80, 2, 2, 64, 64, true},
      // More positions than one default block, non-causal, a sharp softmax.
      {1, 130, 130, 1, 1, 64, 32, false, 0, 0, 0.5},
      // Channels-first inputs (positions unit-stride), GQA, causal.
      {2, 37, 37, 4, 2, 24, 20, true, 16, 16, 0, true},
      {1, 50, 77, 2, 1, 33, 17, false, 0, 0, 0, true},
      // Rows wider than the heads (q, k, v and the output gradient as views).
      {2, 37, 37, 4, 2, 24, 20, true, 16, 16, 0, false, true},
      // Widths of 1 and 3, one query seeing 9 keys, blocks of 1 (made 2).
      {2, 1, 9, 2, 1, 1, 3, false, 1, 1},
      {2, 5, 9, 2, 2, 3, 1, true, 1, 1},
  };
  for (const BlockCase& c : cases) check_case(c);
}

TEST_CASE("bf16 attention is bit-identical on 1 and 2 threads") {
  if (!bf16_here()) {
    MESSAGE("no native bf16 here: ", bf16_unsupported_reason());
    CHECK_THROWS_AS(set_precision(Precision::bf16), Error);
    return;
  }
  ThreadScope restore;
  PrecisionScope ps(Precision::bf16);
  for (bool causal : {true, false}) {
    INFO("causal=" << causal);
    // Big enough to run its tasks in parallel; GQA; a partial last block.
    const int64_t N = 3, T = 100, H = 4, G = 2, K = 64;
    Tensor q = test::det_tensor({N, T, H, K}, 21), k = test::det_tensor({N, T, G, K}, 22),
           v = test::det_tensor({N, T, G, K}, 23), go = test::det_tensor({N, T, H, K}, 24);
    auto run = [&](int threads) {
      set_num_threads(threads);
      kernel::AttentionOut f = kernel::attention_forward(q, k, v, causal, 0.125);
      kernel::AttentionGrads d = kernel::attention_backward(q, k, v, f.out, f.lse, go, causal, 0.125);
      return std::vector<std::vector<float>>{f.out.to_vector<float>(), f.lse.to_vector<float>(),
                                             d.dq.to_vector<float>(), d.dk.to_vector<float>(),
                                             d.dv.to_vector<float>()};
    };
    const auto one = run(1), two = run(2);
    for (size_t i = 0; i < one.size(); ++i) {
      CAPTURE(i);
      REQUIRE(one[i].size() == two[i].size());
      CHECK(std::memcmp(one[i].data(), two[i].data(), one[i].size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("bf16 attention keeps its probabilities when all keys are one block: rows summing to 1, zeros where causal hides a key, the gradients of recomputing them up to bf16 rounding") {
  if (!bf16_here()) {
    MESSAGE("no native bf16 here: ", bf16_unsupported_reason());
    return;
  }
  PrecisionScope ps(Precision::bf16);
  struct Shape7 {
    int64_t N, T, S, H, G, K;
    bool causal;
  };
  for (const Shape7 c : {Shape7{3, 64, 64, 4, 4, 32, true}, Shape7{2, 37, 40, 2, 1, 8, true},
                         Shape7{2, 100, 100, 1, 1, 16, false}, Shape7{1, 7, 11, 4, 2, 3, false}}) {
    INFO("T=" << c.T << " S=" << c.S << " H=" << c.H << " G=" << c.G << " K=" << c.K << " causal=" << c.causal);
    Tensor q = test::det_tensor({c.N, c.T, c.H, c.K}, 41, -1.5, 1.5), k = test::det_tensor({c.N, c.S, c.G, c.K}, 42, -1.5, 1.5),
           v = test::det_tensor({c.N, c.S, c.G, c.K}, 43), go = test::det_tensor({c.N, c.T, c.H, c.K}, 44);
    const kernel::AttentionOut kept = kernel::attention_forward(q, k, v, c.causal, 0.4, 0, 0, true);
    const kernel::AttentionOut plain = kernel::attention_forward(q, k, v, c.causal, 0.4);
    CHECK(kept.out.to_vector<float>() == plain.out.to_vector<float>());
    CHECK(kept.lse.to_vector<float>() == plain.lse.to_vector<float>());
    REQUIRE(kept.probs.defined());
    const std::vector<float> P = kept.probs.to_vector<float>();
    double worst_sum = 0;
    int64_t hidden_nonzero = 0;
    for (int64_t row = 0; row < c.N * c.H * c.T; ++row) {
      const int64_t i = row % c.T, visible = c.causal ? i + c.S - c.T + 1 : c.S;
      double sum = 0;
      for (int64_t j = 0; j < c.S; ++j) {
        const float p = P[static_cast<size_t>(row * c.S + j)];
        if (j < visible) sum += p;
        else hidden_nonzero += p != 0.0f;
      }
      worst_sum = std::max(worst_sum, std::abs(sum - 1.0));
    }
    CHECK(worst_sum < 1e-5);
    CHECK(hidden_nonzero == 0);
    const kernel::AttentionGrads a = kernel::attention_backward(q, k, v, kept.out, kept.lse, go, c.causal, 0.4, 0, 0, kept.probs);
    const kernel::AttentionGrads b = kernel::attention_backward(q, k, v, plain.out, plain.lse, go, c.causal, 0.4);
    for (auto [x, y] : {std::pair{&a.dq, &b.dq}, std::pair{&a.dk, &b.dk}, std::pair{&a.dv, &b.dv}}) {
      const double scale = test::max_diff(*y, Tensor::zeros(y->shape()));
      CHECK(scale > 1e-3);
      CHECK(test::max_diff(*x, *y) <= 1e-2 * scale);  // P or dS rounded to bf16 one ulp apart here and there
    }
  }
}
