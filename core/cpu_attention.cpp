// core/cpu_attention.cpp: fused scaled-dot-product attention, forward and
// backward, computed block by block with an online softmax so the T x S score
// matrix never exists in memory (only one block_q x block_k tile per thread).
//
// Legend: N batch, T queries, S keys, H query heads, G key/value heads
// (H = r G; query head h reads key/value head h / r), K query/key width,
// E value width.
//
// Forward, for one (n, h) and a block of queries, over key blocks in
// ascending order (the associativity of spec #7: softmax over a union of
// blocks = rescaled partial results):
//   s_ij = scale q_i . k_j            (-inf where causal hides j)
//   m_i' = max(m_i, max_j s_ij)       running max
//   l_i  = l_i e^(m_i - m_i') + sum_j e^(s_ij - m_i')
//   acc_i = acc_i e^(m_i - m_i') + sum_j e^(s_ij - m_i') v_j
// and at the end o_i = acc_i / l_i, lse_i = m_i + log l_i (kept for backward).
//
// Backward recomputes the probabilities from lse (p_ij = e^(s_ij - lse_i)):
//   D_i = dO_i . o_i,  dP_ij = dO_i . v_j,  dS_ij = p_ij (dP_ij - D_i)
//   dV_j += p_ij dO_i,  dQ_i += scale dS_ij k_j,  dK_j += scale dS_ij q_i
// One task per (n, g) owns dK and dV of that key/value head and dQ of its r
// query heads, so every gradient element is summed by one thread in a fixed
// order: deterministic for any thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/fast_math.h"
#include "core/format.h"
#include "core/kernels.h"

namespace heed::kernel {
namespace {

constexpr int64_t kDefaultBlock = 64;

// e^x: the vectorisable float version (core/fast_math.h), libm for double.
inline float ex(float x) { return fast::exp(x); }
inline double ex(double x) { return std::exp(x); }

// A [rows, width] matrix slice of a 4-D tensor: element (i, c) at
// p[i * ld + c * cs]. Any strides: blocks are packed into contiguous scratch
// before the arithmetic touches them (so channels-first inputs, whose rows
// are strided, cost one pack per block rather than a full copy).
template <class T>
struct Rows {
  T* p;
  int64_t ld, cs;
  T at(int64_t i, int64_t c) const { return p[i * ld + c * cs]; }
};

template <class T>
struct Problem {
  const T *q, *k, *v;
  int64_t qs[4], ks[4], vs[4];  // strides
  int64_t N, T_, S, H, G, K, E;
  int64_t off;  // causal: query i sees keys j <= i + off (off = S - T)
  bool causal;
  T scale;
  int64_t bq, bk;

  Rows<const T> Q(int64_t n, int64_t h) const { return {q + n * qs[0] + h * qs[2], qs[1], qs[3]}; }
  Rows<const T> Kr(int64_t n, int64_t g) const { return {k + n * ks[0] + g * ks[2], ks[1], ks[3]}; }
  Rows<const T> V(int64_t n, int64_t g) const { return {v + n * vs[0] + g * vs[2], vs[1], vs[3]}; }
  // Keys a block of queries [i0, i1) can see: [0, key_end).
  int64_t key_end(int64_t i1) const { return causal ? std::min(S, i1 - 1 + off + 1) : S; }
};

// Per-thread scratch, grown once and reused (no allocation per call after
// the first at a given size).
template <class T>
struct Scratch {
  std::vector<T> qb, kt, kb, vt, vb, s, dp, m, l, acc, d;
  void fit(int64_t bq, int64_t bk, int64_t K, int64_t E, int64_t rows) {
    auto grow = [](std::vector<T>& v, int64_t n) {
      if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
    };
    grow(qb, bq * K);
    grow(kt, K * bk);
    grow(kb, bk * K);
    grow(vt, E * bk);
    grow(vb, bk * E);
    grow(s, bq * bk);
    grow(dp, bq * bk);
    grow(m, bq);
    grow(l, bq);
    grow(acc, bq * E);
    grow(d, rows);
  }
};

template <class T>
Scratch<T>& scratch() {
  thread_local Scratch<T> s;
  return s;
}

// Rows [j0, j0 + nb) packed: dst[jj * width + c] = src(j0 + jj, c), times f.
template <class T>
void pack_block(Rows<const T> src, int64_t j0, int64_t nb, int64_t width, T* dst, T f = T(1)) {
  for (int64_t jj = 0; jj < nb; ++jj)
    for (int64_t c = 0; c < width; ++c) dst[jj * width + c] = src.at(j0 + jj, c) * f;
}

// Rows [j0, j0 + nb) transposed: dst[c * nb + jj] = src(j0 + jj, c).
template <class T>
void transpose_block(Rows<const T> src, int64_t j0, int64_t nb, int64_t width, T* dst) {
  for (int64_t c = 0; c < width; ++c)
    for (int64_t jj = 0; jj < nb; ++jj) dst[c * nb + jj] = src.at(j0 + jj, c);
}

// srow[0, nb) = q . k_j for the block's keys (q already scaled; kt: the block
// transposed, [K, nb]), with the causally hidden keys at -inf. Written as
// axpy over the keys so it vectorises without reassociating a reduction.
template <class T>
void scores_row(const Problem<T>& P, const T* qi, const T* kt, int64_t nb, int64_t i, int64_t j0, T* srow) {
  for (int64_t jj = 0; jj < nb; ++jj) srow[jj] = 0;
  for (int64_t c = 0; c < P.K; ++c) {
    const T a = qi[c];
    const T* kr = kt + c * nb;
    for (int64_t jj = 0; jj < nb; ++jj) srow[jj] += a * kr[jj];
  }
  if (P.causal) {
    const int64_t first_hidden = std::max<int64_t>(i + P.off + 1 - j0, 0);
    for (int64_t jj = first_hidden; jj < nb; ++jj) srow[jj] = -std::numeric_limits<T>::infinity();
  }
}

template <class T>
void forward_block(const Problem<T>& P, int64_t n, int64_t h, int64_t i0, int64_t i1, T* o, T* lse) {
  const int64_t r = P.H / P.G, g = h / r, bq = i1 - i0, E = P.E;
  Scratch<T>& w = scratch<T>();
  w.fit(P.bq, P.bk, P.K, E, P.T_);
  const Rows<const T> Q = P.Q(n, h), Kr = P.Kr(n, g), V = P.V(n, g);
  T *m = w.m.data(), *l = w.l.data(), *acc = w.acc.data();
  for (int64_t i = 0; i < bq; ++i) {
    m[i] = -std::numeric_limits<T>::infinity();
    l[i] = 0;
  }
  std::fill(acc, acc + bq * E, T(0));
  pack_block(Q, i0, bq, P.K, w.qb.data(), P.scale);
  const int64_t jend = P.key_end(i1);
  for (int64_t j0 = 0; j0 < jend; j0 += P.bk) {
    const int64_t nb = std::min(P.bk, jend - j0);
    transpose_block(Kr, j0, nb, P.K, w.kt.data());
    pack_block(V, j0, nb, E, w.vb.data());
    for (int64_t i = 0; i < bq; ++i) {
      T* srow = w.s.data();
      scores_row(P, w.qb.data() + i * P.K, w.kt.data(), nb, i0 + i, j0, srow);
      T mx = m[i];
      for (int64_t jj = 0; jj < nb; ++jj) mx = std::max(mx, srow[jj]);
      // Key 0 is visible to every query and blocks go in ascending order, so
      // after the first block m is finite; a row fully hidden in a later
      // block keeps its m and adds exact zeros.
      const T corr = ex(m[i] - mx);
      T sum = 0;
      for (int64_t jj = 0; jj < nb; ++jj) {
        const T e = ex(srow[jj] - mx);
        srow[jj] = e;
        sum += e;
      }
      l[i] = l[i] * corr + sum;
      m[i] = mx;
      T* ai = acc + i * E;
      if (corr != T(1))
        for (int64_t c = 0; c < E; ++c) ai[c] *= corr;
      for (int64_t jj = 0; jj < nb; ++jj) {
        const T p = srow[jj];
        if (p == T(0)) continue;
        const T* vj = w.vb.data() + jj * E;
        for (int64_t c = 0; c < E; ++c) ai[c] += p * vj[c];
      }
    }
  }
  for (int64_t i = 0; i < bq; ++i) {
    T* oi = o + ((n * P.T_ + i0 + i) * P.H + h) * E;
    const T inv = T(1) / l[i];
    for (int64_t c = 0; c < E; ++c) oi[c] = acc[i * E + c] * inv;
    lse[(n * P.H + h) * P.T_ + i0 + i] = m[i] + std::log(l[i]);
  }
}

// One (n, g): gradients of key/value head g and of its r query heads.
template <class T>
void backward_group(const Problem<T>& P, int64_t n, int64_t g, const T* o, const T* lse, const T* go, T* dq, T* dk,
                    T* dv) {
  const int64_t r = P.H / P.G, E = P.E, K = P.K;
  Scratch<T>& w = scratch<T>();
  w.fit(P.bq, P.bk, K, E, P.T_);
  const Rows<const T> Kr = P.Kr(n, g), V = P.V(n, g);
  // dK, dV: [N, S, G, K|E] contiguous; dQ: [N, T, H, K] contiguous.
  auto dk_row = [&](int64_t j) { return dk + ((n * P.S + j) * P.G + g) * K; };
  auto dv_row = [&](int64_t j) { return dv + ((n * P.S + j) * P.G + g) * E; };
  for (int64_t h = g * r; h < (g + 1) * r; ++h) {
    const Rows<const T> Q = P.Q(n, h);
    auto o_row = [&](int64_t i) { return o + ((n * P.T_ + i) * P.H + h) * E; };
    auto go_row = [&](int64_t i) { return go + ((n * P.T_ + i) * P.H + h) * E; };
    auto dq_row = [&](int64_t i) { return dq + ((n * P.T_ + i) * P.H + h) * K; };
    const T* lse_h = lse + (n * P.H + h) * P.T_;
    T* D = w.d.data();
    for (int64_t i = 0; i < P.T_; ++i) {
      const T *a = go_row(i), *b = o_row(i);
      T s = 0;
      for (int64_t c = 0; c < E; ++c) s += a[c] * b[c];
      D[i] = s;
    }
    for (int64_t i0 = 0; i0 < P.T_; i0 += P.bq) {
      const int64_t i1 = std::min(P.T_, i0 + P.bq), jend = P.key_end(i1);
      pack_block(Q, i0, i1 - i0, K, w.qb.data(), P.scale);  // scale q once: dK_j += dS_ij (scale q_i)
      for (int64_t j0 = 0; j0 < jend; j0 += P.bk) {
        const int64_t nb = std::min(P.bk, jend - j0);
        transpose_block(Kr, j0, nb, K, w.kt.data());
        pack_block(Kr, j0, nb, K, w.kb.data());
        transpose_block(V, j0, nb, E, w.vt.data());
        for (int64_t i = i0; i < i1; ++i) {
          T* p = w.s.data();
          const T* qi = w.qb.data() + (i - i0) * K;
          scores_row(P, qi, w.kt.data(), nb, i, j0, p);
          for (int64_t jj = 0; jj < nb; ++jj) p[jj] = ex(p[jj] - lse_h[i]);
          // dP_ij = dO_i . v_j, as axpy over the block's keys.
          T* dpr = w.dp.data();
          const T* goi = go_row(i);
          for (int64_t jj = 0; jj < nb; ++jj) dpr[jj] = 0;
          for (int64_t c = 0; c < E; ++c) {
            const T a = goi[c];
            const T* vr = w.vt.data() + c * nb;
            for (int64_t jj = 0; jj < nb; ++jj) dpr[jj] += a * vr[jj];
          }
          T* dqi = dq_row(i);
          for (int64_t jj = 0; jj < nb; ++jj) {
            const T pij = p[jj];
            if (pij == T(0)) continue;
            const T ds = pij * (dpr[jj] - D[i]);
            T* dvj = dv_row(j0 + jj);
            for (int64_t c = 0; c < E; ++c) dvj[c] += pij * goi[c];
            const T* kj = w.kb.data() + jj * K;
            const T dsq = ds * P.scale;
            for (int64_t c = 0; c < K; ++c) dqi[c] += dsq * kj[c];
            T* dkj = dk_row(j0 + jj);
            for (int64_t c = 0; c < K; ++c) dkj[c] += ds * qi[c];
          }
        }
      }
    }
  }
}

void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v) {
  for (const Tensor* t : {&q, &k, &v})
    if (!t->defined()) fail("attention: an input is undefined");
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4)
    fail("attention: expected q [N, T, H, K], k [N, S, G, K], v [N, S, G, E], got q {}, k {}, v {}",
         shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
  if (q.dtype() != k.dtype() || q.dtype() != v.dtype() || !q.is_floating())
    fail("attention: q, k and v must share a floating dtype, got {}, {}, {}", dtype_name(q.dtype()),
         dtype_name(k.dtype()), dtype_name(v.dtype()));
  const int64_t N = q.size(0), H = q.size(2), K = q.size(3), S = k.size(1), G = k.size(2);
  if (k.size(0) != N || v.size(0) != N || k.size(3) != K || v.size(1) != S || v.size(2) != G || G <= 0 ||
      H % G != 0)
    fail("attention: q {}, k {}, v {} do not fit q [N, T, H, K], k [N, S, G, K], v [N, S, G, E] with H a multiple "
         "of G",
         shape_str(q.shape()), shape_str(k.shape()), shape_str(v.shape()));
}

template <class T>
Problem<T> problem(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, int64_t bq,
                   int64_t bk) {
  Problem<T> P;
  P.q = q.data<T>();
  P.k = k.data<T>();
  P.v = v.data<T>();
  for (int d = 0; d < 4; ++d) {
    P.qs[d] = q.stride(d);
    P.ks[d] = k.stride(d);
    P.vs[d] = v.stride(d);
  }
  P.N = q.size(0);
  P.T_ = q.size(1);
  P.H = q.size(2);
  P.K = q.size(3);
  P.S = k.size(1);
  P.G = k.size(2);
  P.E = v.size(3);
  P.off = P.S - P.T_;
  P.causal = causal;
  P.scale = static_cast<T>(scale);
  P.bq = bq > 0 ? bq : kDefaultBlock;
  P.bk = bk > 0 ? bk : kDefaultBlock;
  return P;
}

}  // namespace

AttentionOut attention_forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool causal, double scale,
                               int64_t block_q, int64_t block_k) {
  check_inputs(q_in, k_in, v_in);
  if (causal && k_in.size(1) < q_in.size(1))
    fail("attention: causal attention needs at least as many keys as queries, got T={} queries and S={} keys",
         q_in.size(1), k_in.size(1));
  if (block_q < 0 || block_k < 0) fail("attention: block sizes must be >= 0 (0: default), got {} and {}", block_q, block_k);
  const Tensor &q = q_in, &k = k_in, &v = v_in;
  const int64_t N = q.size(0), T = q.size(1), H = q.size(2), E = v.size(3);
  AttentionOut r;
  r.out = Tensor::empty({N, T, H, E}, q.dtype());
  r.lse = Tensor::empty({N, H, T}, q.dtype());
  if (q.numel() == 0 || k.size(1) == 0) {
    if (k.size(1) == 0 && q.numel() > 0) fail("attention: no keys (S = 0)");
    return r;
  }
  auto run = [&](auto zero) {
    using T_ = decltype(zero);
    const Problem<T_> P = problem<T_>(q, k, v, causal, scale, block_q, block_k);
    T_* o = r.out.data<T_>();
    T_* lse = r.lse.data<T_>();
    const int64_t nqb = (T + P.bq - 1) / P.bq, tasks = N * H * nqb;
    const double work = static_cast<double>(N * H) * static_cast<double>(T) * static_cast<double>(P.S) *
                        static_cast<double>(P.K + E);
#pragma omp parallel for schedule(dynamic, 1) if (tasks > 1 && work > kParallelGrain)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t n = t / (H * nqb), h = (t / nqb) % H, b = t % nqb;
      forward_block(P, n, h, b * P.bq, std::min(T, (b + 1) * P.bq), o, lse);
    }
  };
  if (q.dtype() == DType::f64) run(double{});
  else run(float{});
  return r;
}

AttentionGrads attention_backward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& out,
                                  const Tensor& lse, const Tensor& grad_out, bool causal, double scale,
                                  int64_t block_q, int64_t block_k) {
  check_inputs(q_in, k_in, v_in);
  const Tensor &q = q_in, &k = k_in, &v = v_in;
  Tensor o = contiguous(out), l = contiguous(lse), go = contiguous(grad_out);
  if (go.shape() != o.shape())
    fail("attention backward: the output gradient {} does not match the output {}", shape_str(go.shape()),
         shape_str(o.shape()));
  const int64_t N = q.size(0), G = k.size(2);
  AttentionGrads r;
  r.dq = Tensor::zeros(q.shape(), q.dtype());
  r.dk = Tensor::zeros(k.shape(), k.dtype());
  r.dv = Tensor::zeros(v.shape(), v.dtype());
  if (q.numel() == 0) return r;
  auto run = [&](auto zero) {
    using T_ = decltype(zero);
    const Problem<T_> P = problem<T_>(q, k, v, causal, scale, block_q, block_k);
    const T_ *po = o.data<T_>(), *pl = l.data<T_>(), *pg = go.data<T_>();
    T_ *dq = r.dq.data<T_>(), *dk = r.dk.data<T_>(), *dv = r.dv.data<T_>();
    const int64_t tasks = N * G;
#pragma omp parallel for schedule(dynamic, 1) if (tasks > 1)
    for (int64_t t = 0; t < tasks; ++t) backward_group(P, t / G, t % G, po, pl, pg, dq, dk, dv);
  };
  if (q.dtype() == DType::f64) run(double{});
  else run(float{});
  return r;
}

}  // namespace heed::kernel
