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
// Backward recomputes the probabilities from lse (p_ij = e^(s_ij - lse_i)),
// or (keep_probs, the float32 or bf16 block path, all keys one block) reads
// the ones the forward kept (p_ij = e^(s_ij - m_i) / l_i, in float32):
//   D_i = dO_i . o_i,  dP_ij = dO_i . v_j,  dS_ij = p_ij (dP_ij - D_i)
//   dV_j += p_ij dO_i,  dQ_i += scale dS_ij k_j,  dK_j += scale dS_ij q_i
// One task per (n, g) owns dK and dV of that key/value head and dQ of its r
// query heads, so every gradient element is summed by one thread in a fixed
// order: deterministic for any thread count.
//
// Every block product is a GEMM reading the tensors where they lie: a head's
// rows need a unit stride along either the width (the usual [N, T, H, K]
// layout) or the positions (channels-first [N, K, T] seen through a
// transpose), which a GEMM reads as a transposed operand. Outputs and
// gradients are laid out like the inputs they belong to, so a channels-first
// caller gets channels-first results without a copy.
//
// Three paths share the blocks and the online softmax. float64 (and float32
// on a CPU without AVX2) runs its products on OpenBLAS. float32 runs them on
// heed's block GEMM and its rows on vector row kernels (see "float32 block
// products" below). Under set_precision(Precision::bf16) float32 attention
// takes a path of its own (see "bf16 block products"): the products on
// AVX512-BF16 with bf16 operands packed once per task, the elementwise steps
// fused with the rounding of P and dS. The last two share tasks, causal
// bands and scratch sums.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "core/allocator.h"
#include "core/attention_rows.h"
#include "core/bf16.h"
#include "core/bf16_simd.h"
#include "core/block_gemm.h"
#include "core/error.h"
#include "core/fast_math.h"
#include "core/format.h"
#include "core/kernels.h"
#include "core/lanes.h"
#include "core/runtime.h"

namespace heed::kernel {
namespace {

// Default blocks, measured on the bundled shapes: causal attention wastes the
// part of each diagonal block above the diagonal, so it prefers smaller ones.
constexpr int64_t kDefaultBlock = 128, kDefaultCausalBlock = 64;

// A matrix: element (i, j) at p[i * rs + j * cs], with rs or cs equal to 1.
template <class T>
struct Mat {
  T* p;
  int64_t rs, cs;
  Mat from_row(int64_t i) const { return {p + i * rs, rs, cs}; }
  Mat t() const { return {p, cs, rs}; }
};

// One head of a [N, L, heads, W] tensor: rows = positions, columns = width.
template <class T>
struct Heads {
  T* p = nullptr;
  int64_t s[4] = {0, 0, 0, 0};
  Mat<T> at(int64_t n, int64_t h) const { return {p + n * s[0] + h * s[2], s[1], s[3]}; }
};

// Strides with size-1 dims set to 1 (their stride is arbitrary), so "unit
// stride along the width or along the positions" can be read off directly.
template <class T>
Heads<T> heads(const Tensor& t, T* p) {
  Heads<T> h;
  h.p = p;
  for (int d = 0; d < 4; ++d) h.s[d] = t.size(d) == 1 ? 1 : t.stride(d);
  return h;
}
template <class T>
Heads<const T> heads(const Tensor& t) {
  return heads<const T>(t, t.data<T>());
}

// True when the heads' rows are readable as GEMM operands.
bool gemm_readable(const Tensor& t) {
  const int64_t L = t.size(1), W = t.size(3);
  const int64_t rs = L == 1 ? 1 : t.stride(1), cs = W == 1 ? 1 : t.stride(3);
  return (cs == 1 && (rs >= W || L == 1)) || (rs == 1 && (cs >= L || W == 1));
}
Tensor readable(const Tensor& t) { return gemm_readable(t) ? t : contiguous(t); }

// An uninitialised [N, L, heads, W] tensor laid out like t: channels-first
// when t is (its positions unit-stride), else contiguous. The kernels write
// every element (the first product into each gradient block has beta = 0),
// so no zero fill is spent on them.
Tensor empty_like_layout(const Tensor& t, const Shape& shape) {
  const bool channels_first = t.size(1) > 1 && t.stride(1) == 1 && t.size(3) > 1;
  if (!channels_first) return Tensor::empty(shape, t.dtype());
  Tensor m = Tensor::empty({shape[0], shape[2], shape[3], shape[1]}, t.dtype());  // [N, heads, W, L]
  return permute(m, {0, 3, 1, 2});
}

// C = alpha op(A) op(B) + beta C on OpenBLAS, for M x K by K x N operands in
// any Mat layout, on the calling thread (OpenBlasOneThread: also where the
// tasks' region has one thread, and is not an active one to OpenBLAS), so
// each block product is computed the same way whatever the thread count.
inline void blas(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  OpenBlasOneThread one;
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B,
              ldb, beta, C, ldc);
}
inline void blas(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const double* A, int64_t lda,
                 const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  OpenBlasOneThread one;
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B,
              ldb, beta, C, ldc);
}

template <class T>
void mm(int64_t M, int64_t N, int64_t K, T alpha, Mat<const T> A, Mat<const T> B, T beta, Mat<T> C) {
  if (C.cs != 1 && !(N == 1)) {  // C's columns are unit-stride: C^T = B^T A^T
    mm<T>(N, M, K, alpha, B.t(), A.t(), beta, C.t());
    return;
  }
  // An operand is read as stored (unit column stride, ld = row stride) or
  // as a transposed one (unit row stride, ld = column stride). A single row
  // or column never uses its ld, which must still look valid to BLAS.
  const bool ta = !(A.cs == 1 || K == 1), tb = !(B.cs == 1 || N == 1);
  const int64_t lda = ta ? std::max(A.cs, M) : std::max(M == 1 ? K : A.rs, K);
  const int64_t ldb = tb ? std::max(B.cs, K) : std::max(K == 1 ? N : B.rs, N);
  const int64_t ldc = std::max(M == 1 ? N : C.rs, N);
  blas(ta, tb, M, N, K, alpha, A.p, lda, B.p, ldb, beta, C.p, ldc);
}

template <class T>
struct Problem {
  Heads<const T> q, k, v;
  int64_t N, T_, S, H, G, K, E;
  int64_t off;  // causal: query i sees keys j <= i + off (off = S - T)
  bool causal;
  T scale;
  int64_t bq, bk;
  // Dropout on the probabilities (AttentionDrop): each is multiplied by its
  // mask value, `kept` (1 / (1 - p)) or 0.
  bool drop = false;
  double keep = 1.0;
  T kept = 1;
  Generator gen;
  uint64_t first = 0;
  int64_t group(int64_t h) const { return h / (H / G); }
  // Keys a block of queries [i0, i1) can see: [0, key_end).
  int64_t key_end(int64_t i1) const { return causal ? std::min(S, i1 - 1 + off + 1) : S; }
};

// Bytes of per-thread scratch held, all threads together (attention_scratch_bytes).
std::atomic<int64_t> g_scratch_bytes{0};

// v grown to at least n elements (never shrunk), its growth counted.
template <class V>
void hold(V& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) >= n) return;
  const size_t before = v.capacity();
  v.resize(static_cast<size_t>(n));
  g_scratch_bytes += static_cast<int64_t>((v.capacity() - before) * sizeof(v[0]));
}
// The first n elements of v, set to zero.
template <class V>
void hold_zeroed(V& v, int64_t n) {
  hold(v, n);
  std::fill(v.begin(), v.begin() + n, typename V::value_type(0));
}

// Per-thread scratch, grown once and reused (no allocation per call after
// the first at a given size).
template <class T>
struct Scratch {
  alloc::LineVector<T> s, dp, m, l, acc, d, z;
  std::vector<int64_t> written;  // backward: rows of each key block whose dK/dV hold a value
  void fit(int64_t bq, int64_t bk, int64_t E, int64_t rows, bool drop = false) {
    hold(s, bq * bk);
    if (drop) hold(z, bq * bk);  // dropout masks
    hold(dp, bq * bk);
    hold(m, bq);
    hold(l, bq);
    hold(acc, bq * E);
    hold(d, rows);
  }
};

template <class T>
Scratch<T>& scratch() {
  thread_local Scratch<T> s;
  return s;
}

// Row sums use 16 partial results (core/lanes.h). The maximum is exact in
// any order, so it is an OpenMP simd reduction (which the compiler
// vectorised where it left the lane-array form scalar; not everywhere: in
// the bf16 forward it stayed scalar, so that path has its own vector max).
template <class T>
T row_max(const T* x, int64_t n, T init) {
  T r = init;
#pragma omp simd reduction(max : r)
  for (int64_t j = 0; j < n; ++j) r = x[j] > r ? x[j] : r;
  return r;
}
// x_j = e^(x_j - c); returns sum_j x_j (the softmax denominator) from the
// same pass.
template <class T>
T exp_shifted_sum(T* x, int64_t n, T c) {
  T a[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const T e = fast::exp_softmax(x[j + l] - c);
      x[j + l] = e;
      a[l] += e;
    }
  // The tail as one more step of the same lanes (element j + l in lane l),
  // which the compiler masks, not as a scalar loop: a causal row's visible
  // keys seldom fill the last vector.
  const int64_t rem = n - j;
  if (rem > 0)
    for (int l = 0; l < kLanes; ++l) {
      const T e = fast::exp_softmax((l < rem ? x[j + l] : c) - c);
      if (l < rem) {
        x[j + l] = e;
        a[l] += e;
      }
    }
  return lanes_sum(a);
}
// x_j = e^(x_j - c): no reduction in the loop, so it vectorises.
template <class T>
void exp_shifted(T* x, int64_t n, T c) {
  for (int64_t j = 0; j < n; ++j) x[j] = fast::exp_softmax(x[j] - c);
}
// sum_c a[c * sa] b[c * sb]; vectorised when both strides are 1.
template <class T>
T dot(const T* a, int64_t sa, const T* b, int64_t sb, int64_t n) {
  if (sa != 1 || sb != 1) {
    T s = 0;
    for (int64_t c = 0; c < n; ++c) s += a[c * sa] * b[c * sb];
    return s;
  }
  T p[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int l = 0; l < kLanes; ++l) p[l] += a[c + l] * b[c + l];
  for (; c < n; ++c) p[0] += a[c] * b[c];
  return lanes_sum(p);
}

// How many of the nb keys from j0 query i sees: all but, when causal, those
// after i + off. Only those get a probability (exp); the rest are set to an
// exact 0 instead of a -inf score, which halves the exponentials of a
// diagonal block.
template <class T>
int64_t visible_keys(const Problem<T>& P, int64_t i, int64_t j0, int64_t nb) {
  if (!P.causal) return nb;
  return std::clamp<int64_t>(i + P.off + 1 - j0, 0, nb);
}

// Dropout: the masks of the [bq, nb] block of head (n, h) (queries from i0,
// keys from j0) into z (row stride nb), drawn for the keys each query sees
// (element (n, h, i, j) of the [N, H, T, S] probabilities takes block
// first + ((n H + h) T + i) S + j); zeros for the keys it does not.
template <class T>
void drop_masks(const Problem<T>& P, int64_t n, int64_t h, int64_t i0, int64_t bq, int64_t j0, int64_t nb, T* z) {
  for (int64_t i = 0; i < bq; ++i) {
    const int64_t vis = visible_keys(P, i0 + i, j0, nb);
    const uint64_t at = static_cast<uint64_t>(((n * P.H + h) * P.T_ + i0 + i) * P.S + j0);
    const int64_t drawn = P.keep > 0 ? vis : 0;  // p = 1: nothing kept, nothing drawn
    P.gen.keep_mask(P.first + at, drawn, P.keep, P.kept, z + i * nb);
    std::fill(z + i * nb + drawn, z + (i + 1) * nb, T(0));
  }
}
// x_j *= z_j over n elements.
template <class T>
void times(T* x, const T* z, int64_t n) {
  for (int64_t j = 0; j < n; ++j) x[j] *= z[j];
}

// The row operations: these loops, or (float32 block path) the vector row
// kernels of core/attention_rows.h.
template <class T>
struct LoopRows {
  T max(const T* x, int64_t n, T init) const { return row_max(x, n, init); }
  T exp_sum(T* x, int64_t vis, int64_t n, T c) const {
    const T r = exp_shifted_sum(x, vis, c);
    std::fill(x + vis, x + n, T(0));
    return r;
  }
};
struct VectorRows {
  const rows::Kernels* k;
  float max(const float* x, int64_t n, float init) const { return k->max(x, n, init); }
  float exp_sum(float* x, int64_t vis, int64_t n, float c) const { return k->exp_sum(x, vis, n, c); }
};

// The online softmax's step for query i over the nb scores of the key block
// from j0 (srow): srow becomes e^(s_ij - m_i') (exact zeros where causal
// hides a key), and the row's running max m, denominator l and accumulator
// acc [E] are brought up to date for the block's contribution.
template <class T, class Rows = LoopRows<T>>
void softmax_row(const Problem<T>& P, int64_t i, int64_t j0, int64_t nb, T* srow, T& m, T& l, T* acc,
                 const Rows& rows = {}) {
  const int64_t vis = visible_keys(P, i, j0, nb);
  const T mx = rows.max(srow, vis, m);
  // Key 0 is visible to every query and blocks go in ascending order, so
  // after the first block m is finite; a row fully hidden in a later
  // block keeps its m and adds exact zeros.
  const T corr = fast::exp_softmax(m - mx);
  const T rs = rows.exp_sum(srow, vis, nb, mx);
  l = l * corr + rs;
  m = mx;
  // The first block finds acc zero: nothing to rescale.
  if (corr != T(1) && j0 > 0)
    for (int64_t c = 0; c < P.E; ++c) acc[c] *= corr;
}

// keep_probs: rows [i0, i0 + bq) of one head's kept probabilities (row
// stride P.S), p = e / l, from the only key block's nb exponentials e (row
// stride lde; e may be those rows themselves).
inline void keep_rows(const Problem<float>& P, const float* e, int64_t lde, const float* l, int64_t i0, int64_t bq,
                      int64_t nb, float* probs) {
  for (int64_t i = 0; i < bq; ++i) {
    const float inv = 1.0f / l[i];
    const float* er = e + i * lde;
    float* pr = probs + (i0 + i) * P.S;
    for (int64_t j = 0; j < nb; ++j) pr[j] = er[j] * inv;
  }
}

// Starts the forward of a block of bq queries: m = -inf, l = 0, acc = 0.
template <class T>
void start_rows(Scratch<T>& w, int64_t bq, int64_t E) {
  for (int64_t i = 0; i < bq; ++i) {
    w.m[static_cast<size_t>(i)] = -std::numeric_limits<T>::infinity();
    w.l[static_cast<size_t>(i)] = 0;
  }
  std::fill(w.acc.begin(), w.acc.begin() + bq * E, T(0));
}

// o_i = acc_i / l_i and lse_i = m_i + log l_i for the bq queries from i0 of head (n, h).
template <class T>
void finish_rows(const Problem<T>& P, int64_t n, int64_t h, int64_t i0, int64_t bq, const Scratch<T>& w, Heads<T> o,
                 T* lse) {
  const int64_t E = P.E;
  const T *m = w.m.data(), *l = w.l.data(), *acc = w.acc.data();
  const Mat<T> O = o.at(n, h).from_row(i0);
  for (int64_t i = 0; i < bq; ++i) {
    const T inv = T(1) / l[i];
    T* orow = O.p + i * O.rs;
    if (O.cs == 1)  // the usual layout: a loop the compiler vectorises
      for (int64_t c = 0; c < E; ++c) orow[c] = acc[i * E + c] * inv;
    else
      for (int64_t c = 0; c < E; ++c) orow[c * O.cs] = acc[i * E + c] * inv;
    lse[(n * P.H + h) * P.T_ + i0 + i] = m[i] + std::log(l[i]);
  }
}

template <class T>
void forward_block(const Problem<T>& P, int64_t n, int64_t h, int64_t i0, int64_t i1, Heads<T> o, T* lse) {
  const int64_t bq = i1 - i0, E = P.E, K = P.K;
  Scratch<T>& w = scratch<T>();
  w.fit(P.bq, P.bk, E, P.T_, P.drop);
  const Mat<const T> Q = P.q.at(n, h).from_row(i0), Kh = P.k.at(n, P.group(h)), V = P.v.at(n, P.group(h));
  T *m = w.m.data(), *l = w.l.data(), *acc = w.acc.data(), *s = w.s.data();
  start_rows(w, bq, E);
  const int64_t jend = P.key_end(i1);
  for (int64_t j0 = 0; j0 < jend; j0 += P.bk) {
    const int64_t nb = std::min(P.bk, jend - j0);
    mm<T>(bq, nb, K, P.scale, Q, Kh.from_row(j0).t(), T(0), {s, nb, 1});  // S = scale Q K^T
    for (int64_t i = 0; i < bq; ++i) softmax_row(P, i0 + i, j0, nb, s + i * nb, m[i], l[i], acc + i * E);
    if (P.drop) {  // l summed the exponentials before dropout; the output sums the kept ones
      drop_masks(P, n, h, i0, bq, j0, nb, w.z.data());
      times(s, w.z.data(), bq * nb);
    }
    mm<T>(bq, E, nb, T(1), {s, nb, 1}, V.from_row(j0), T(1), {acc, E, 1});  // acc += P V
  }
  finish_rows(P, n, h, i0, bq, w, o, lse);
}

// Backward's probabilities of the [bq, nb] block of scores s (queries from
// i0, keys from j0), in place: p_ij = e^(s_ij - lse_i), exact zeros where
// causal hides a key.
template <class T>
void probabilities(const Problem<T>& P, int64_t i0, int64_t bq, int64_t j0, int64_t nb, const T* lse_h, T* s) {
  for (int64_t i = 0; i < bq; ++i) {
    T* srow = s + i * nb;
    const int64_t vis = visible_keys(P, i0 + i, j0, nb);
    exp_shifted(srow, vis, lse_h[i0 + i]);
    std::fill(srow + vis, srow + nb, T(0));
  }
}

// dS_ij = p_ij (dP_ij - D_i) over a [bq, nb] block, in place of dP.
template <class T>
void score_grads(int64_t bq, int64_t nb, const T* p, const T* D, T* dp) {
  for (int64_t i = 0; i < bq; ++i) {
    const T* pr = p + i * nb;
    T* dr = dp + i * nb;
    const T Di = D[i];
    for (int64_t jj = 0; jj < nb; ++jj) dr[jj] = pr[jj] * (dr[jj] - Di);
  }
}

// One (n, g): gradients of key/value head g and of its r query heads.
template <class T>
void backward_group(const Problem<T>& P, int64_t n, int64_t g, Heads<const T> o, const T* lse, Heads<const T> go,
                    Heads<T> dq, Heads<T> dk, Heads<T> dv) {
  const int64_t r = P.H / P.G, E = P.E, K = P.K;
  Scratch<T>& w = scratch<T>();
  w.fit(P.bq, P.bk, E, P.T_, P.drop);
  const Mat<const T> Kh = P.k.at(n, g), V = P.v.at(n, g);
  const Mat<T> dK = dk.at(n, g), dV = dv.at(n, g);
  T *s = w.s.data(), *dp = w.dp.data();
  // dK and dV rows are overwritten (beta = 0) by the first product that
  // reaches them and accumulated into after, in the same fixed order as
  // before. A causal block may reach only the first rows of a key block;
  // written[b] counts the rows of key block b that hold a value. Every key is
  // seen by some query (the last query sees them all), so all get written.
  const int64_t nkb = (P.S + P.bk - 1) / P.bk;
  hold_zeroed(w.written, nkb);
  auto zero_rows = [](Mat<T> m, int64_t r0, int64_t r1, int64_t cols) {
    for (int64_t i = r0; i < r1; ++i)
      for (int64_t c = 0; c < cols; ++c) m.p[i * m.rs + c * m.cs] = T(0);
  };
  for (int64_t h = g * r; h < (g + 1) * r; ++h) {
    const Mat<const T> Q = P.q.at(n, h), O = o.at(n, h), GO = go.at(n, h);
    const Mat<T> dQ = dq.at(n, h);
    const T* lse_h = lse + (n * P.H + h) * P.T_;
    T* D = w.d.data();  // D_i = dO_i . o_i
    for (int64_t i = 0; i < P.T_; ++i) D[i] = dot(GO.p + i * GO.rs, GO.cs, O.p + i * O.rs, O.cs, E);
    for (int64_t i0 = 0; i0 < P.T_; i0 += P.bq) {
      const int64_t i1 = std::min(P.T_, i0 + P.bq), bq = i1 - i0, jend = P.key_end(i1);
      const Mat<const T> Qb = Q.from_row(i0), GOb = GO.from_row(i0);
      for (int64_t j0 = 0; j0 < jend; j0 += P.bk) {
        const int64_t nb = std::min(P.bk, jend - j0);
        mm<T>(bq, nb, K, P.scale, Qb, Kh.from_row(j0).t(), T(0), {s, nb, 1});  // S
        probabilities(P, i0, bq, j0, nb, lse_h, s);
        mm<T>(bq, nb, E, T(1), GOb, V.from_row(j0).t(), T(0), {dp, nb, 1});  // dP = dO V^T
        // Dropout: the output read p z, so dP picks up z and dV reads p z;
        // D_i = dO_i . o_i holds as it is (o is the dropped output).
        if (P.drop) {
          drop_masks(P, n, h, i0, bq, j0, nb, w.z.data());
          times(dp, w.z.data(), bq * nb);
        }
        score_grads(bq, nb, s, D + i0, dp);
        if (P.drop) times(s, w.z.data(), bq * nb);
        const Mat<const T> Pm{s, nb, 1}, dS{dp, nb, 1};
        int64_t& done = w.written[static_cast<size_t>(j0 / P.bk)];
        const T bkv = done == 0 ? T(0) : T(1), bq0 = j0 == 0 ? T(0) : T(1);  // key block 0 starts each dQ row
        if (done > 0 && done < nb) {  // rows [done, nb) are new: start them at zero
          zero_rows(dV.from_row(j0), done, nb, E);
          zero_rows(dK.from_row(j0), done, nb, K);
        }
        done = std::max(done, nb);
        mm<T>(nb, E, bq, T(1), Pm.t(), GOb, bkv, dV.from_row(j0));                 // dV += P^T dO
        mm<T>(nb, K, bq, P.scale, dS.t(), Qb, bkv, dK.from_row(j0));               // dK += scale dS^T Q
        mm<T>(bq, K, nb, P.scale, dS, Kh.from_row(j0), bq0, dQ.from_row(i0));      // dQ += scale dS K
      }
    }
  }
}

// ---- bf16 block products (heed::set_precision(Precision::bf16)) ----
// As CPU autocast runs attention: the six block products take bf16 operands
// (Q, K, V and dO rounded once per task, P and dS once per block, each to
// nearest even) with float32 accumulation; scores, the softmax statistics
// (m, l, lse), exponentials, D_i, every accumulator and the outputs stay
// float32. The products run on core/bf16.h's pair-packed GEMM. The blocks
// and their order are the float32 path's, and a block computes the same
// whichever task runs it, so results do not depend on the thread count
// either. Block sizes are made even: the packed operands pair neighbouring
// positions, and a block must not start inside a pair.

// The bf16 forward's tasks own a key/value head (its packed K and V) and
// a run of query blocks; with few heads the blocks are split into runs so
// that the threads still have work to share.
constexpr int64_t kMinTasks = 8;

inline int64_t pairs(int64_t n) { return (n + 1) / 2; }
inline int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

// n words of v, from a 64-byte boundary (alloc::LineVector: the GEMM's B
// rows load whole cache lines).
uint32_t* line_words(alloc::LineVector<uint32_t>& v, int64_t n) {
  hold(v, n);
  return v.data();
}

// A pair-packed A operand: pair p of row i at p[i * rs + p * ps].
struct PackedA {
  const uint32_t* p;
  int64_t rs, ps;
  PackedA from_row(int64_t i) const { return {p + i * rs, rs, ps}; }
};

// Words pack_a needs for a [rows, inner] operand.
inline int64_t packed_a_size(int64_t rows, int64_t inner) { return pairs(inner) * round16(rows); }

// A [rows, inner], packed the way its layout reads with unit stride: row by
// row, or (positions unit-stride) as A^T along its rows.
PackedA pack_a(Mat<const float> a, int64_t rows, int64_t inner, uint32_t* dst) {
  if (a.cs == 1 || inner == 1) {
    bf16::pack_rows(a.p, a.rs, a.cs, rows, inner, dst, pairs(inner));
    return {dst, pairs(inner), 1};
  }
  bf16::pack_pairs(a.p, a.cs, a.rs, inner, rows, dst, round16(rows));
  return {dst, 1, round16(rows)};
}

// B [inner, cols] packed along its rows; row stride round16(cols).
void pack_b(Mat<const float> b, int64_t inner, int64_t cols, uint32_t* dst) {
  bf16::pack_pairs(b.p, b.rs, b.cs, inner, cols, dst, round16(cols));
}

// C [M, N] (+)= alpha A B over `inner`, B packed with row stride ldb and
// starting at the pair of its first row; band: the part a causal block needs.
inline void mm_bf16(int64_t M, int64_t N, int64_t inner, float alpha, PackedA A, const uint32_t* B, int64_t ldb,
                    bool accumulate, float* C, int64_t ldc, const Band& band = {}) {
  bf16::gemm(M, N, pairs(inner), A.p, A.rs, A.ps, B, ldb, C, ldc, alpha, accumulate, band);
}

// Causal blocks skip the products of hidden scores: in the block of queries
// from i0 and keys from j0, local query i sees local keys j < i + d with
// d = i0 + off - j0 + 1. Products over keys (rows = queries) stop there;
// products over queries (rows = keys) start at query j - d + 1.
struct Bands {
  Band cols, keys, queries;  // S and dP; P V and dS K; P^T dO and dS^T Q
};
Bands causal_bands(const Problem<float>& P, int64_t i0, int64_t j0) {
  Bands b;
  if (!P.causal) return b;
  const int64_t d = i0 + P.off - j0 + 1;
  b.cols.col_end = d;
  b.keys.inner_end = d;
  b.queries.inner_begin = 1 - d;
  return b;
}

// Fetches row i of m (cols wide) into the cache ahead of use, when its
// columns are unit-stride (the usual layout).
constexpr int64_t kAheadRows = 8;
inline void prefetch_row(Mat<const float> m, int64_t i, int64_t cols) {
  if (m.cs != 1) return;
  for (int64_t c = 0; c < cols; c += 16) _mm_prefetch(reinterpret_cast<const char*>(m.p + i * m.rs + c), _MM_HINT_T0);
}

// Asks for head (n, h)'s kept probabilities (its [T, S] rows, the first
// 16 KB: all of GPT-128's) when a backward task starts, before its D_i and
// its copies of K, V, Q and dO: the forward wrote them a whole forward pass
// earlier, so in a training step they come from memory, and the blocks read
// them row by row, each read waiting on its miss. GPT-128's attention
// backward in a training step (Zen 5; the steps alternating with and
// without in one process, 200 each, medians per call): float32 240 -> 217
// and 240 -> 216 us, bf16 239 -> 210 and 241 -> 211 us; with the GEMM
// tiles' addend prefetch (cpu_sgemm_simd.inc), the step 0.7-1.6% faster.
// (Alone, warm, it is 135-170 us: after a 64 MB pass over memory, 264.) Asking for the next task's inputs too, or for dQ, dK and dV before
// they are written, or for the forward's kept rows before it writes them,
// measured no faster.
void prefetch_kept(const Problem<float>& P, int64_t n, int64_t h, const float* probs) {
  if (!probs) return;
  const float* ph = probs + (n * P.H + h) * P.T_ * P.S;
  const int64_t count = std::min<int64_t>(P.T_ * P.S, 4096);
  for (int64_t i = 0; i < count; i += 16) __builtin_prefetch(ph + i, 0, 3);
}

// dst = alpha acc [rows, cols] (row stride cols), into a matrix of any layout.
void store_scaled(const float* acc, int64_t rows, int64_t cols, float alpha, Mat<float> dst) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* a = acc + i * cols;
    float* d = dst.p + i * dst.rs;
    if (dst.cs == 1)
      for (int64_t c = 0; c < cols; ++c) d[c] = alpha * a[c];
    else
      for (int64_t c = 0; c < cols; ++c) d[c * dst.cs] = alpha * a[c];
  }
}

// Per-thread scratch of the bf16 path.
struct Bf16Scratch {
  alloc::LineVector<uint32_t> qa, pa, kt, kb, vb, vt, qb, ga, gb, pb, dsb, dsa;
  alloc::LineVector<float> dk, dv, dq;
};
Bf16Scratch& bf16_scratch() {
  thread_local Bf16Scratch s;
  return s;
}

// softmax_row for the bf16 forward: the block's probabilities go straight
// into their bf16 pairs (dst, ceil(nb / 2) words; zeros where causal hides a
// key) instead of back into srow; l sums the unrounded float32 values.
// R rows at once (queries i .. i + R - 1; their scores, states and pairs a
// row stride apart: nb, E and ldp): each row's operations are one row's, in
// its order, so the numbers are those of R single rows; interleaved, the R
// rows' chains (maximum, exponentials, sum: a short row is all latency)
// overlap. A GPT-128 block's forward ran its rows one by one at 41% of its
// time.
// keep (or null): the R rows' e^(s - m) in float32 too (row stride P.S, the
// kept probabilities' rows before their division by l).
// z (or null): dropout's masks of the R rows (row stride nb); the pairs then
// hold e z, while l and keep still take e.
template <int R>
HEED_BF16 void softmax_rows_bf16(const Problem<float>& P, int64_t i, int64_t j0, int64_t nb, const float* srow,
                                 float* m, float* l, float* acc, uint32_t* dst, int64_t ldp, float* keep,
                                 const float* z) {
  using namespace bf16::simd;
  int64_t vis[R];
  float mx[R], corr[R];
  __m512 shift[R], sum[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    vis[r] = visible_keys(P, i + r, j0, nb);
    // row_max's value (x > m ? x : m is vmaxps's choice lane by lane; the
    // maximum is exact in any order), vectorised: here GCC left row_max's
    // loop scalar.
    __m512 v = _mm512_set1_ps(m[r]);
    for (int64_t j = 0; j < vis[r]; j += 16) {
      const __mmask16 in = first(vis[r] - j);
      v = _mm512_mask_max_ps(v, in, _mm512_maskz_loadu_ps(in, srow + r * nb + j), v);
    }
    mx[r] = _mm512_reduce_max_ps(v);
    corr[r] = fast::exp_softmax(m[r] - mx[r]);  // as in softmax_row
    shift[r] = _mm512_set1_ps(mx[r]);
    sum[r] = _mm512_setzero_ps();
  }
  for (int64_t j = 0; j < nb; j += 32) {
    const __mmask16 words = first((std::min<int64_t>(32, nb - j) + 1) / 2);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float* x = srow + r * nb + j;
      const __mmask16 m0 = first(vis[r] - j), m1 = first(vis[r] - j - 16);
      const __m512 e0 = _mm512_maskz_mov_ps(m0, exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m0, x), shift[r])));
      const __m512 e1 = _mm512_maskz_mov_ps(m1, exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m1, x + 16), shift[r])));
      sum[r] = _mm512_add_ps(sum[r], _mm512_add_ps(e0, e1));
      if (z)
        _mm512_mask_storeu_epi32(
            dst + r * ldp + j / 2, words,
            pair_run(_mm512_mul_ps(e0, _mm512_maskz_loadu_ps(m0, z + r * nb + j)),
                     _mm512_mul_ps(e1, _mm512_maskz_loadu_ps(m1, z + r * nb + j + 16))));
      else
        _mm512_mask_storeu_epi32(dst + r * ldp + j / 2, words, pair_run(e0, e1));
      if (keep) {
        _mm512_mask_storeu_ps(keep + r * P.S + j, first(nb - j), e0);
        _mm512_mask_storeu_ps(keep + r * P.S + j + 16, first(nb - j - 16), e1);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    l[r] = l[r] * corr[r] + _mm512_reduce_add_ps(sum[r]);
    m[r] = mx[r];
    if (corr[r] != 1.0f && j0 > 0)
      for (int64_t c = 0; c < P.E; ++c) acc[r * P.E + c] *= corr[r];
  }
}

// The bf16 backward's elementwise work on a [bq, nb] block (queries from
// i0, keys from j0), fused with the packing of the three operands it feeds:
// p_ij = e^(s_ij - lse_i) (0 where causal hides a key) and dS_ij = p_ij
// (dP_ij - D_i) in float32, rounded into pb (P's rows paired: P^T for dV),
// dsb (dS's rows paired: dS^T for dK), both with row stride ldb, and dsa (dS
// row by row, stride lda: for dQ). lse and D start at query i0.
// kept (or null): the forward's probabilities of these rows (row stride
// P.S), read instead of e^(s - lse) (s is then not read).
// z (or null): dropout's masks of these rows (row stride nb): dS_ij = p_ij
// (dP_ij z_ij - D_i), and pb holds p z.
HEED_BF16 void block_grads_bf16(const Problem<float>& P, int64_t i0, int64_t bq, int64_t j0, int64_t nb,
                                const float* s, const float* dp, const float* lse, const float* D, uint32_t* pb,
                                uint32_t* dsb, int64_t ldb, uint32_t* dsa, int64_t lda, const float* kept,
                                const float* z) {
  using namespace bf16::simd;
  for (int64_t i = 0; i < bq; i += 2) {
    const bool two = i + 1 < bq;  // an odd last row pairs with zeros
    const int64_t vis0 = visible_keys(P, i0 + i, j0, nb), vis1 = two ? visible_keys(P, i0 + i + 1, j0, nb) : 0;
    const __m512 lse0 = _mm512_set1_ps(lse[i]), lse1 = _mm512_set1_ps(two ? lse[i + 1] : 0.0f);
    const __m512 D0 = _mm512_set1_ps(D[i]), D1 = _mm512_set1_ps(two ? D[i + 1] : 0.0f);
    const float *s0 = s + i * nb, *s1 = s0 + nb, *dp0 = dp + i * nb, *dp1 = dp0 + nb;
    const float *k0 = kept ? kept + i * P.S : nullptr, *k1 = kept ? k0 + P.S : nullptr;
    const float *z0 = z ? z + i * nb : nullptr, *z1 = z ? z0 + nb : nullptr;
    for (int64_t j = 0; j < nb; j += 32) {
      __m512 ds0[2], ds1[2];  // dS of rows i and i + 1
      for (int hf = 0; hf < 2; ++hf) {
        const int64_t c = j + 16 * hf;
        const __mmask16 v0 = first(vis0 - c), v1 = first(vis1 - c), in0 = first(nb - c);
        const __m512 p0 = kept ? _mm512_maskz_loadu_ps(v0, k0 + c)
                               : _mm512_maskz_mov_ps(v0, exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(v0, s0 + c), lse0)));
        const __m512 p1 = kept ? _mm512_maskz_loadu_ps(v1, k1 + c)
                               : _mm512_maskz_mov_ps(v1, exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(v1, s1 + c), lse1)));
        // dS is zero where p is (a hidden key, or beyond nb), and dP is read
        // only where visible (the banded product leaves the rest unwritten).
        __m512 g0 = _mm512_maskz_loadu_ps(v0, dp0 + c), g1 = _mm512_maskz_loadu_ps(v1, dp1 + c);
        __m512 pz0 = p0, pz1 = p1;
        if (z) {
          const __m512 y0 = _mm512_maskz_loadu_ps(v0, z0 + c), y1 = _mm512_maskz_loadu_ps(v1, z1 + c);
          g0 = _mm512_mul_ps(g0, y0);
          g1 = _mm512_mul_ps(g1, y1);
          pz0 = _mm512_mul_ps(p0, y0);
          pz1 = _mm512_mul_ps(p1, y1);
        }
        ds0[hf] = _mm512_mul_ps(p0, _mm512_sub_ps(g0, D0));
        ds1[hf] = _mm512_mul_ps(p1, _mm512_sub_ps(g1, D1));
        _mm512_mask_storeu_epi32(pb + i / 2 * ldb + c, in0, pair_lanes(pz0, pz1));
        _mm512_mask_storeu_epi32(dsb + i / 2 * ldb + c, in0, pair_lanes(ds0[hf], ds1[hf]));
      }
      const __mmask16 words = first((std::min<int64_t>(32, nb - j) + 1) / 2);
      _mm512_mask_storeu_epi32(dsa + i * lda + j / 2, words, pair_run(ds0[0], ds0[1]));
      if (two) _mm512_mask_storeu_epi32(dsa + (i + 1) * lda + j / 2, words, pair_run(ds1[0], ds1[1]));
    }
  }
}

// One block of queries [i0, i1) of head (n, h), given its key/value head's
// K^T and V packed (kt: row stride ldk; vb: row stride ldv).
void forward_block_bf16(const Problem<float>& P, const uint32_t* kt, int64_t ldk, const uint32_t* vb, int64_t ldv,
                        int64_t n, int64_t h, int64_t i0, int64_t i1, Heads<float> o, float* lse, float* probs) {
  const int64_t bq = i1 - i0, E = P.E, K = P.K;
  Scratch<float>& w = scratch<float>();
  w.fit(P.bq, P.bk, E, P.T_, P.drop);
  Bf16Scratch& x = bf16_scratch();
  const PackedA Q = pack_a(P.q.at(n, h).from_row(i0), bq, K, line_words(x.qa, packed_a_size(bq, K)));
  const int64_t ldp = pairs(P.bk);
  uint32_t* pa = line_words(x.pa, bq * ldp);  // P rounded, row by row
  float *m = w.m.data(), *l = w.l.data(), *acc = w.acc.data(), *s = w.s.data();
  start_rows(w, bq, E);
  const int64_t jend = P.key_end(i1);
  for (int64_t j0 = 0; j0 < jend; j0 += P.bk) {
    const int64_t nb = std::min(P.bk, jend - j0);
    const Bands band = causal_bands(P, i0, j0);
    mm_bf16(bq, nb, K, P.scale, Q, kt + j0, ldk, false, s, nb, band.cols);  // S = scale Q K^T
    const float* z = nullptr;
    if (P.drop) {
      drop_masks(P, n, h, i0, bq, j0, nb, w.z.data());
      z = w.z.data();
    }
    int64_t i = 0;
    for (; i + 4 <= bq; i += 4)
      softmax_rows_bf16<4>(P, i0 + i, j0, nb, s + i * nb, m + i, l + i, acc + i * E, pa + i * ldp, ldp,
                           probs ? probs + (i0 + i) * P.S : nullptr, z ? z + i * nb : nullptr);
    for (; i < bq; ++i)
      softmax_rows_bf16<1>(P, i0 + i, j0, nb, s + i * nb, m + i, l + i, acc + i * E, pa + i * ldp, ldp,
                           probs ? probs + (i0 + i) * P.S : nullptr, z ? z + i * nb : nullptr);
    mm_bf16(bq, E, nb, 1.0f, {pa, ldp, 1}, vb + j0 / 2 * ldv, ldv, true, acc, E, band.keys);  // acc += P V
    if (probs) keep_rows(P, probs + i0 * P.S, P.S, l, i0, bq, nb, probs);  // e was written there
  }
  finish_rows(P, n, h, i0, bq, w, o, lse);
}

// The bf16 forward of query blocks [b0, b1) of every query head of
// key/value head (n, g): K^T and V are packed once, for the keys those
// blocks see, into this thread's scratch, where they stay in cache for all
// of them.
void forward_group_bf16(const Problem<float>& P, int64_t n, int64_t g, int64_t b0, int64_t b1, Heads<float> o,
                        float* lse, float* probs) {
  const int64_t r = P.H / P.G, keys = P.key_end(std::min(P.T_, b1 * P.bq)), ldk = round16(keys), ldv = round16(P.E);
  Bf16Scratch& x = bf16_scratch();
  uint32_t* kt = line_words(x.kt, pairs(P.K) * ldk);
  uint32_t* vb = line_words(x.vb, pairs(keys) * ldv);
  pack_b(P.k.at(n, g).t(), P.K, keys, kt);
  pack_b(P.v.at(n, g), keys, P.E, vb);
  for (int64_t h = g * r; h < (g + 1) * r; ++h)
    for (int64_t b = b0; b < b1; ++b)
      forward_block_bf16(P, kt, ldk, vb, ldv, n, h, b * P.bq, std::min(P.T_, (b + 1) * P.bq), o, lse,
                         probs ? probs + (n * P.H + h) * P.T_ * P.S : nullptr);
}

// The bf16 backward of one (n, g), in the order of backward_group. dK, dV
// and each query block's dQ sum in float32 scratch and are written out once
// (scale applied there).
void backward_group_bf16(const Problem<float>& P, int64_t n, int64_t g, Heads<const float> o, const float* lse,
                         Heads<const float> go, Heads<float> dq, Heads<float> dk, Heads<float> dv,
                         const float* probs) {
  const int64_t r = P.H / P.G, E = P.E, K = P.K, S = P.S, T = P.T_;
  Scratch<float>& w = scratch<float>();
  w.fit(P.bq, P.bk, E, T, P.drop);
  Bf16Scratch& x = bf16_scratch();
  float *s = w.s.data(), *dp = w.dp.data();
  const Mat<const float> Kh = P.k.at(n, g), V = P.v.at(n, g);
  // K^T and V^T (B of S and dP), K (B of dQ).
  const int64_t ld_s = round16(S), ld_k = round16(K), ld_e = round16(E);
  uint32_t* kt = line_words(x.kt, pairs(K) * ld_s);
  uint32_t* vt = line_words(x.vt, pairs(E) * ld_s);
  uint32_t* kb = line_words(x.kb, pairs(S) * ld_k);
  if (!probs) pack_b(Kh.t(), K, S, kt);  // the scores are recomputed
  pack_b(V.t(), E, S, vt);
  pack_b(Kh, S, K, kb);
  hold_zeroed(x.dk, S * K);
  hold_zeroed(x.dv, S * E);
  hold(x.dq, P.bq * K);
  float *dK = x.dk.data(), *dV = x.dv.data(), *dQ = x.dq.data();
  const int64_t ld_b = round16(P.bk), ld_a = pairs(P.bk);
  uint32_t* pb = line_words(x.pb, pairs(P.bq) * ld_b);   // P^T's pairs (A of dV)
  uint32_t* dsb = line_words(x.dsb, pairs(P.bq) * ld_b);  // dS^T's pairs (A of dK)
  uint32_t* dsa = line_words(x.dsa, P.bq * ld_a);          // dS row by row (A of dQ)
  for (int64_t h = g * r; h < (g + 1) * r; ++h) {
    const Mat<const float> Qh = P.q.at(n, h), O = o.at(n, h), GO = go.at(n, h);
    const float* lse_h = lse + (n * P.H + h) * T;
    prefetch_kept(P, n, h, probs);
    float* D = w.d.data();  // D_i = dO_i . o_i
    for (int64_t i = 0; i < T; ++i) {
      if (i + kAheadRows < T) {  // o is seldom in cache yet
        prefetch_row(O, i + kAheadRows, E);
        prefetch_row(GO, i + kAheadRows, E);
      }
      D[i] = dot(GO.p + i * GO.rs, GO.cs, O.p + i * O.rs, O.cs, E);
    }
    // Q and dO both ways: A of S and dP, B of dK and dV (Q as A only where
    // the scores are recomputed).
    const float* ph = probs ? probs + (n * P.H + h) * T * S : nullptr;
    const PackedA Qa = ph ? PackedA{} : pack_a(Qh, T, K, line_words(x.qa, packed_a_size(T, K)));
    const PackedA Ga = pack_a(GO, T, E, line_words(x.ga, packed_a_size(T, E)));
    uint32_t* qb = line_words(x.qb, pairs(T) * ld_k);
    uint32_t* gb = line_words(x.gb, pairs(T) * ld_e);
    pack_b(Qh, T, K, qb);
    pack_b(GO, T, E, gb);
    for (int64_t i0 = 0; i0 < T; i0 += P.bq) {
      const int64_t i1 = std::min(T, i0 + P.bq), bq = i1 - i0, jend = P.key_end(i1);
      for (int64_t j0 = 0; j0 < jend; j0 += P.bk) {
        const int64_t nb = std::min(P.bk, jend - j0);
        const Bands band = causal_bands(P, i0, j0);
        if (!ph) mm_bf16(bq, nb, K, P.scale, Qa.from_row(i0), kt + j0, ld_s, false, s, nb, band.cols);  // S
        mm_bf16(bq, nb, E, 1.0f, Ga.from_row(i0), vt + j0, ld_s, false, dp, nb, band.cols);  // dP = dO V^T
        if (P.drop) drop_masks(P, n, h, i0, bq, j0, nb, w.z.data());
        block_grads_bf16(P, i0, bq, j0, nb, s, dp, lse_h + i0, D + i0, pb, dsb, ld_b, dsa, ld_a,
                         ph ? ph + i0 * S : nullptr, P.drop ? w.z.data() : nullptr);
        const uint32_t *gbi = gb + i0 / 2 * ld_e, *qbi = qb + i0 / 2 * ld_k;  // from query i0's pair
        mm_bf16(nb, E, bq, 1.0f, {pb, 1, ld_b}, gbi, ld_e, true, dV + j0 * E, E, band.queries);   // dV += P^T dO
        mm_bf16(nb, K, bq, 1.0f, {dsb, 1, ld_b}, qbi, ld_k, true, dK + j0 * K, K, band.queries);  // dK += dS^T Q
        mm_bf16(bq, K, nb, 1.0f, {dsa, ld_a, 1}, kb + j0 / 2 * ld_k, ld_k, j0 > 0, dQ, K, band.keys);  // dQ += dS K
      }
      store_scaled(dQ, bq, K, P.scale, dq.at(n, h).from_row(i0));
    }
  }
  store_scaled(dK, S, K, P.scale, dk.at(n, g));
  store_scaled(dV, S, E, 1.0f, dv.at(n, g));
}

// ---- float32 block products on heed's block GEMM (core/block_gemm.h) ----
// Where heed's instruction set has the block GEMM (AVX2 or AVX-512), float32
// attention runs its products there instead of on OpenBLAS, whose per-call
// packing and dispatch cost as much as a block's arithmetic. The tasks,
// blocks, bands and scratch sums are the bf16 path's; the operands stay
// float32, A read where it lies and B too when its rows are unit-stride (K
// and V transposed for S and dP are copied once per task). Every element is
// a float32 sum in a fixed order whichever task or tile computes it, and the
// same on AVX2 as on AVX-512.

// B [rows, cols] of a block product: m's rows where they are unit-stride,
// else (its columns unit-stride: every head is readable()) a transposed copy
// in buf, row stride round16(cols).
struct RowsB {
  const float* p;
  int64_t ld;
  const float* from_row(int64_t r) const { return p + r * ld; }
};
RowsB rows_b(Mat<const float> m, int64_t rows, int64_t cols, alloc::LineVector<float>& buf) {
  if (m.cs == 1 || cols == 1) return {m.p, m.rs};
  const int64_t ld = round16(cols);
  hold(buf, rows * ld);
  block::transpose(m.p, m.cs, cols, rows, buf.data(), ld);
  return {buf.data(), ld};
}

// Asks for rows [0, rows) of a head (cols floats each, unit-stride) all at
// once, so that their misses overlap: a task's first reads of q, k and v
// (a transpose, then the products) each waited on the next line. A head of
// a [N, T, 3 H K] projection is short runs a row apart (GPT-128: 128 bytes
// every 1536), and it comes from the product just before, so from another
// core's cache or memory. Pairs of GPT-128 training steps alternating with
// and without in one process (Zen 5, float32, 400 steps): +0.6, +0.5,
// +0.5, +0.4% (medians); GPT-256 (40 steps) +0.1%. At most a head's first
// 16 KB (all of GPT-128's), which L1 keeps until the reads come.
void prefetch_rows(Mat<const float> m, int64_t rows, int64_t cols) {
  if (m.cs != 1) return;
  rows = std::min(rows, std::max<int64_t>(1, 4096 / cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t c = 0; c < cols; c += 16) __builtin_prefetch(m.p + i * m.rs + c, 0, 3);
}

// The float32 block path's kernels, for heed's instruction set.
struct F32Kernels {
  block::GemmFn gemm;
  const rows::Kernels* rows;
  static F32Kernels for_isa() {
    const CpuIsa isa = heed::cpu_isa();
    return {block::gemm_for(isa), rows::kernels_for(isa)};
  }
  explicit operator bool() const { return gemm != nullptr && rows != nullptr; }
};

struct F32Scratch {
  alloc::LineVector<float> kt, vt, kb, vb, qb, gb, dk, dv, dq;
};
F32Scratch& f32_scratch() {
  thread_local F32Scratch s;
  return s;
}

// One block of queries [i0, i1) of head (n, h), given its key/value head's
// K^T (kt) and V (vb) as B operands. probs (this head's [T, S] rows, or
// null): where all keys are one block, the probabilities are kept there,
// p_ij = e^(s_ij - m_i) / l_i.
void forward_block_f32(const Problem<float>& P, const F32Kernels& fk, RowsB kt, RowsB vb, int64_t n, int64_t h,
                       int64_t i0, int64_t i1, Heads<float> o, float* lse, float* probs) {
  const int64_t bq = i1 - i0, E = P.E, K = P.K;
  Scratch<float>& w = scratch<float>();
  w.fit(P.bq, P.bk, E, P.T_, P.drop);
  const Mat<const float> Q = P.q.at(n, h).from_row(i0);
  float *m = w.m.data(), *l = w.l.data(), *acc = w.acc.data(), *s = w.s.data();
  start_rows(w, bq, E);
  const int64_t jend = P.key_end(i1);
  for (int64_t j0 = 0; j0 < jend; j0 += P.bk) {
    const int64_t nb = std::min(P.bk, jend - j0);
    const Bands band = causal_bands(P, i0, j0);
    fk.gemm(bq, nb, K, Q.p, Q.rs, Q.cs, kt.p + j0, kt.ld, s, nb, P.scale, false, band.cols);  // S = scale Q K^T
    for (int64_t i = 0; i < bq; ++i)
      softmax_row(P, i0 + i, j0, nb, s + i * nb, m[i], l[i], acc + i * E, VectorRows{fk.rows});
    if (P.drop) {  // the probabilities are kept before dropout, which the backward draws again
      if (probs) keep_rows(P, s, nb, l, i0, bq, nb, probs);
      drop_masks(P, n, h, i0, bq, j0, nb, w.z.data());
      times(s, w.z.data(), bq * nb);
    }
    fk.gemm(bq, E, nb, s, nb, 1, vb.from_row(j0), vb.ld, acc, E, 1.0f, true, band.keys);  // acc += P V
    if (probs && !P.drop) keep_rows(P, s, nb, l, i0, bq, nb, probs);  // the only key block
  }
  finish_rows(P, n, h, i0, bq, w, o, lse);
}

// The forward of query blocks [b0, b1) of every query head of key/value
// head (n, g), as forward_group_bf16.
void forward_group_f32(const Problem<float>& P, const F32Kernels& fk, int64_t n, int64_t g, int64_t b0, int64_t b1,
                       Heads<float> o, float* lse, float* probs) {
  const int64_t r = P.H / P.G, keys = P.key_end(std::min(P.T_, b1 * P.bq));
  F32Scratch& x = f32_scratch();
  prefetch_rows(P.k.at(n, g), keys, P.K);
  prefetch_rows(P.v.at(n, g), keys, P.E);
  for (int64_t h = g * r; h < (g + 1) * r; ++h)
    prefetch_rows(P.q.at(n, h).from_row(b0 * P.bq), std::min(P.T_, b1 * P.bq) - b0 * P.bq, P.K);
  const RowsB kt = rows_b(P.k.at(n, g).t(), P.K, keys, x.kt), vb = rows_b(P.v.at(n, g), keys, P.E, x.vb);
  for (int64_t h = g * r; h < (g + 1) * r; ++h)
    for (int64_t b = b0; b < b1; ++b)
      forward_block_f32(P, fk, kt, vb, n, h, b * P.bq, std::min(P.T_, (b + 1) * P.bq), o, lse,
                        probs ? probs + (n * P.H + h) * P.T_ * P.S : nullptr);
}

// The backward of one (n, g), in the order of backward_group_bf16. probs:
// the forward's kept probabilities [N, H, T, S] (all keys one block), or
// null to recompute them.
void backward_group_f32(const Problem<float>& P, const F32Kernels& fk, int64_t n, int64_t g, Heads<const float> o,
                        const float* lse, Heads<const float> go, Heads<float> dq, Heads<float> dk, Heads<float> dv,
                        const float* probs) {
  const int64_t r = P.H / P.G, E = P.E, K = P.K, S = P.S, T = P.T_;
  Scratch<float>& w = scratch<float>();
  w.fit(P.bq, P.bk, E, T, P.drop);
  F32Scratch& x = f32_scratch();
  float *s = w.s.data(), *dp = w.dp.data();
  const Mat<const float> Kh = P.k.at(n, g), V = P.v.at(n, g);
  prefetch_rows(Kh, S, K);
  prefetch_rows(V, S, E);
  for (int64_t h = g * r; h < (g + 1) * r; ++h) {
    prefetch_rows(P.q.at(n, h), T, K);
    prefetch_rows(o.at(n, h), T, E);
    prefetch_rows(go.at(n, h), T, E);
    prefetch_kept(P, n, h, probs);
  }
  // K^T (B of S) only where the scores are recomputed.
  const RowsB kt = probs ? RowsB{nullptr, 0} : rows_b(Kh.t(), K, S, x.kt);
  const RowsB vt = rows_b(V.t(), E, S, x.vt), kb = rows_b(Kh, S, K, x.kb);
  hold_zeroed(x.dk, S * K);
  hold_zeroed(x.dv, S * E);
  hold(x.dq, P.bq * K);
  float *dK = x.dk.data(), *dV = x.dv.data(), *dQ = x.dq.data();
  for (int64_t h = g * r; h < (g + 1) * r; ++h) {
    const Mat<const float> Qh = P.q.at(n, h), O = o.at(n, h), GO = go.at(n, h);
    const float* lse_h = lse + (n * P.H + h) * T;
    const float* ph = probs ? probs + (n * P.H + h) * T * S : nullptr;
    float* D = w.d.data();  // D_i = dO_i . o_i
    for (int64_t i = 0; i < T; ++i) D[i] = dot(GO.p + i * GO.rs, GO.cs, O.p + i * O.rs, O.cs, E);
    const RowsB qb = rows_b(Qh, T, K, x.qb), gb = rows_b(GO, T, E, x.gb);
    for (int64_t i0 = 0; i0 < T; i0 += P.bq) {
      const int64_t i1 = std::min(T, i0 + P.bq), bq = i1 - i0, jend = P.key_end(i1);
      const Mat<const float> Qb = Qh.from_row(i0), GOb = GO.from_row(i0);
      for (int64_t j0 = 0; j0 < jend; j0 += P.bk) {
        const int64_t nb = std::min(P.bk, jend - j0);
        const Bands band = causal_bands(P, i0, j0);
        fk.gemm(bq, nb, E, GOb.p, GOb.rs, GOb.cs, vt.p + j0, vt.ld, dp, nb, 1.0f, false, band.cols);  // dP = dO V^T
        // Dropout (as backward_group): dP z, and dV reads p z, in s.
        float* z = w.z.data();
        if (P.drop) {
          drop_masks(P, n, h, i0, bq, j0, nb, z);
          times(dp, z, bq * nb);  // past a row's visible keys: ignored below
        }
        // P (row stride ps), and dS = P (dP - D) in place of dP.
        const float* pm = s;
        int64_t ps = nb;
        if (ph) {  // kept by the forward (j0 = 0, the only key block)
          pm = ph + i0 * S;
          ps = S;
          for (int64_t i = 0; i < bq; ++i)
            fk.rows->grads(pm + i * S, dp + i * nb, visible_keys(P, i0 + i, j0, nb), nb, D[i0 + i]);
          if (P.drop) {
            for (int64_t i = 0; i < bq; ++i)
              for (int64_t j = 0; j < nb; ++j) s[i * nb + j] = pm[i * S + j] * z[i * nb + j];
            pm = s;
            ps = nb;
          }
        } else {
          fk.gemm(bq, nb, K, Qb.p, Qb.rs, Qb.cs, kt.p + j0, kt.ld, s, nb, P.scale, false, band.cols);  // S
          for (int64_t i = 0; i < bq; ++i)
            fk.rows->probs_and_grads(s + i * nb, dp + i * nb, visible_keys(P, i0 + i, j0, nb), nb, lse_h[i0 + i],
                                     D[i0 + i]);
          if (P.drop) times(s, z, bq * nb);
        }
        fk.gemm(nb, E, bq, pm, 1, ps, gb.from_row(i0), gb.ld, dV + j0 * E, E, 1.0f, true, band.queries);  // dV += P^T dO
        fk.gemm(nb, K, bq, dp, 1, nb, qb.from_row(i0), qb.ld, dK + j0 * K, K, 1.0f, true, band.queries);  // dK += dS^T Q
        fk.gemm(bq, K, nb, dp, nb, 1, kb.from_row(j0), kb.ld, dQ, K, 1.0f, j0 > 0, band.keys);           // dQ += dS K
      }
      store_scaled(dQ, bq, K, P.scale, dq.at(n, h).from_row(i0));
    }
  }
  store_scaled(dK, S, K, P.scale, dk.at(n, g));
  store_scaled(dV, S, E, 1.0f, dv.at(n, g));
}

// Runs f(0 .. tasks-1), in parallel when worth it. Not `omp parallel if
// (...)`: a false if still opens an inactive region, inside which OpenBLAS's
// own parallel region would be a nested one (libgomp then creates and
// destroys threads on every GEMM).
//
// Tasks of equal work (whole heads, numbered batch-major) go to the threads
// in order: thread t then takes the batch rows [t N / nt, (t + 1) N / nt),
// as the products before and after attention split their rows, so q, k, v
// come from its own core's cache and its outputs stay there for the next
// op. Tasks of unequal work (runs of causal query blocks) are handed out one
// by one. Against one by one for all (in-process A/B, 8 alternations,
// attention with the projections around it): GPT-128 float32 1027 -> 984
// us, bf16 1020 -> 875; GPT-256 float32 19.5 -> 18.7 ms, bf16 13.1 -> 12.6.
//
// With two threads, equal tasks are claimed from both ends instead
// (block::claim_tiles, as the products share their row tiles): thread 0
// from the first task up, thread 1 from the last down, in chunks that
// shrink as they meet. Each still takes mostly the batch rows it would have
// had as its half, and a thread that runs late (woken late, or slowed by the
// machine) takes fewer instead of keeping the other waiting. Every task
// computes the same whichever thread runs it. On a Zen 3, in-process A/B
// against the static halves: GPT-128's attention forward + backward 675 ->
// 594 and 685 -> 644 us; its training step +1.0, +2.0, +1.7, +1.3% (pairs
// of steps alternating, 400 steps).
template <class F>
void for_tasks(int64_t tasks, bool worth_it, F&& f, bool equal_work = false) {
  if (tasks > 1 && worth_it && equal_work && omp_get_max_threads() == 2 && !omp_in_parallel()) {
    std::atomic<uint64_t> taken{0};
#pragma omp parallel num_threads(2)
    {
      // (With one thread in the team, side 0 takes every task.)
      const int side = omp_get_thread_num();
      int64_t lo, hi;
      while (block::claim_tiles(taken, tasks, side, lo, hi))
        for (int64_t i = 0; i < hi - lo; ++i) f(side == 0 ? lo + i : hi - 1 - i);
    }
  } else if (tasks > 1 && worth_it && equal_work) {
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tasks; ++t) f(t);
  } else if (tasks > 1 && worth_it) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) f(t);
  } else {
    for (int64_t t = 0; t < tasks; ++t) f(t);
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

void check_drop(const AttentionDrop& drop) {
  if (!(drop.p >= 0.0 && drop.p <= 1.0))
    fail("attention: dropout probability {} out of range (expected 0 <= p <= 1)", drop.p);
}

template <class T>
Problem<T> problem(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale, int64_t bq,
                   int64_t bk, const AttentionDrop& drop) {
  Problem<T> P;
  P.q = heads<T>(q);
  P.k = heads<T>(k);
  P.v = heads<T>(v);
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
  const int64_t def = causal ? kDefaultCausalBlock : kDefaultBlock;
  P.bq = bq > 0 ? bq : def;
  P.bk = bk > 0 ? bk : def;
  if (drop.active()) {
    P.drop = true;
    P.keep = 1.0 - drop.p;
    // dropout's mask value, 1 / (1 - p) rounded to T (unused when p = 1:
    // nothing is kept).
    P.kept = drop.p < 1.0 ? static_cast<T>(1.0 / (1.0 - drop.p)) : T(0);
    P.gen = Generator(drop.seed);
    P.first = drop.first;
  }
  return P;
}

// Whether float32 attention runs its block products in bf16 (set_precision).
// set_precision refuses bf16 on a CPU without it; the check of the CPU here
// only keeps the AVX512-BF16 code unreachable elsewhere.
bool bf16_products(const Tensor& q) {
  return q.dtype() == DType::f32 && precision() == Precision::bf16 && bf16::supported();
}

// The bf16 path's blocks: even sizes (see "bf16 block products").
void even_blocks(Problem<float>& P) {
  P.bq += P.bq % 2;
  P.bk += P.bk % 2;
}

}  // namespace

int64_t attention_scratch_bytes() { return g_scratch_bytes.load(); }

AttentionOut attention_forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, bool causal, double scale,
                               int64_t block_q, int64_t block_k, bool keep_probs, const AttentionDrop& drop) {
  check_inputs(q_in, k_in, v_in);
  check_drop(drop);
  if (causal && k_in.size(1) < q_in.size(1))
    fail("attention: causal attention needs at least as many keys as queries, got T={} queries and S={} keys",
         q_in.size(1), k_in.size(1));
  if (block_q < 0 || block_k < 0) fail("attention: block sizes must be >= 0 (0: default), got {} and {}", block_q, block_k);
  const Tensor q = readable(q_in), k = readable(k_in), v = readable(v_in);
  const int64_t N = q.size(0), T = q.size(1), H = q.size(2), E = v.size(3);
  AttentionOut r;
  r.out = empty_like_layout(q, {N, T, H, E});
  r.lse = Tensor::empty({N, H, T}, q.dtype());
  if (q.numel() == 0 || k.size(1) == 0) {
    if (k.size(1) == 0 && q.numel() > 0) fail("attention: no keys (S = 0)");
    return r;
  }
  auto run = [&](auto zero) {
    using T_ = decltype(zero);
    const Problem<T_> P = problem<T_>(q, k, v, causal, scale, block_q, block_k, drop);
    const Heads<T_> o = heads<T_>(r.out, r.out.data<T_>());
    T_* lse = r.lse.data<T_>();
    const int64_t nqb = (T + P.bq - 1) / P.bq, tasks = N * H * nqb;
    const double work = static_cast<double>(N * H) * static_cast<double>(T) * static_cast<double>(P.S) *
                        static_cast<double>(P.K + E);
    for_tasks(tasks, work > kParallelGrain, [&](int64_t t) {
      const int64_t n = t / (H * nqb), h = (t / nqb) % H, b = t % nqb;
      forward_block(P, n, h, b * P.bq, std::min(T, (b + 1) * P.bq), o, lse);
    });
  };
  // float32 with bf16 products, or on the block GEMM (gemm).
  auto run_groups = [&](bool bf16, const F32Kernels& fk) {
    Problem<float> P = problem<float>(q, k, v, causal, scale, block_q, block_k, drop);
    if (bf16) even_blocks(P);
    const Heads<float> o = heads<float>(r.out, r.out.data<float>());
    float* lse = r.lse.data<float>();
    if (keep_probs && P.S <= P.bk) r.probs = Tensor::empty({N, H, T, P.S});
    float* probs = r.probs.defined() ? r.probs.data<float>() : nullptr;
    // Tasks: (n, g, a run of query blocks), at least kMinTasks of them when
    // there are enough blocks. Results do not depend on the split: every
    // query block computes the same whichever task runs it.
    const int64_t G = P.G, nqb = (T + P.bq - 1) / P.bq;
    const int64_t runs = std::clamp<int64_t>((kMinTasks + N * G - 1) / (N * G), 1, nqb), per = (nqb + runs - 1) / runs;
    const double work = static_cast<double>(N * H) * static_cast<double>(T) * static_cast<double>(P.S) *
                        static_cast<double>(P.K + E);
    for_tasks(
        N * G * runs, work > kParallelGrain,
        [&](int64_t t) {
          const int64_t n = t / (G * runs), g = (t / runs) % G, b0 = (t % runs) * per, b1 = std::min(nqb, b0 + per);
          if (b0 >= nqb) return;
          if (bf16) forward_group_bf16(P, n, g, b0, b1, o, lse, probs);
          else forward_group_f32(P, fk, n, g, b0, b1, o, lse, probs);
        },
        runs == 1);
  };
  if (q.dtype() == DType::f64) run(double{});
  else if (bf16_products(q)) run_groups(true, {});
  else if (const F32Kernels fk = F32Kernels::for_isa()) run_groups(false, fk);
  else run(float{});
  return r;
}

AttentionGrads attention_backward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& out,
                                  const Tensor& lse, const Tensor& grad_out, bool causal, double scale,
                                  int64_t block_q, int64_t block_k, const Tensor& probs, const AttentionGrads* into,
                                  const AttentionDrop& drop) {
  check_inputs(q_in, k_in, v_in);
  check_drop(drop);
  const Tensor q = readable(q_in), k = readable(k_in), v = readable(v_in);
  if (grad_out.shape() != out.shape())
    fail("attention backward: the output gradient {} does not match the output {}", shape_str(grad_out.shape()),
         shape_str(out.shape()));
  const Tensor o = readable(out), go = readable(grad_out), l = contiguous(lse);
  const int64_t N = q.size(0), G = k.size(2);
  if (probs.defined() &&
      (probs.dtype() != DType::f32 || q.dtype() != DType::f32 || !probs.is_contiguous() ||
       probs.shape() != Shape{N, q.size(2), q.size(1), k.size(1)}))
    fail("attention backward: kept probabilities {} {} do not match [N, H, T, S] = {} float32 (contiguous)",
         dtype_name(probs.dtype()), shape_str(probs.shape()), shape_str({N, q.size(2), q.size(1), k.size(1)}));
  AttentionGrads r;
  if (into) {
    auto check = [](const Tensor& d, const Tensor& like, const char* what) {
      if (!d.defined() || d.shape() != like.shape() || d.dtype() != like.dtype() || !gemm_readable(d))
        fail("attention backward: the tensor to write {} into is {} {}, expected {} {} with unit-stride rows or "
             "positions",
             what, d.defined() ? shape_str(d.shape()) : "undefined", d.defined() ? dtype_name(d.dtype()) : "",
             shape_str(like.shape()), dtype_name(like.dtype()));
    };
    check(into->dq, q, "dq");
    check(into->dk, k, "dk");
    check(into->dv, v, "dv");
    r = *into;
  } else {
    r.dq = empty_like_layout(q, q.shape());
    r.dk = empty_like_layout(k, k.shape());
    r.dv = empty_like_layout(v, v.shape());
  }
  if (q.numel() == 0 || k.size(1) == 0) {
    // Nothing to compute: gradients of empty attention are zeros (a key or
    // value with no query reading it, when T = 0).
    fill_(r.dq, 0.0);
    fill_(r.dk, 0.0);
    fill_(r.dv, 0.0);
    return r;
  }
  auto run = [&](auto zero) {
    using T_ = decltype(zero);
    const Problem<T_> P = problem<T_>(q, k, v, causal, scale, block_q, block_k, drop);
    const Heads<const T_> ho = heads<T_>(o), hgo = heads<T_>(go);
    const Heads<T_> dq = heads<T_>(r.dq, r.dq.data<T_>()), dk = heads<T_>(r.dk, r.dk.data<T_>()),
                    dv = heads<T_>(r.dv, r.dv.data<T_>());
    const T_* pl = l.data<T_>();
    for_tasks(N * G, true, [&](int64_t t) { backward_group(P, t / G, t % G, ho, pl, hgo, dq, dk, dv); });
  };
  auto run_groups = [&](bool bf16, const F32Kernels& fk) {
    Problem<float> P = problem<float>(q, k, v, causal, scale, block_q, block_k, drop);
    if (bf16) even_blocks(P);
    const Heads<const float> ho = heads<float>(o), hgo = heads<float>(go);
    const Heads<float> dq = heads<float>(r.dq, r.dq.data<float>()), dk = heads<float>(r.dk, r.dk.data<float>()),
                       dv = heads<float>(r.dv, r.dv.data<float>());
    const float* pl = l.data<float>();
    // The forward's probabilities, where it kept them for this path.
    const float* pp = probs.defined() && P.S <= P.bk ? probs.data<float>() : nullptr;
    for_tasks(
        N * G, true,
        [&](int64_t t) {
          if (bf16) backward_group_bf16(P, t / G, t % G, ho, pl, hgo, dq, dk, dv, pp);
          else backward_group_f32(P, fk, t / G, t % G, ho, pl, hgo, dq, dk, dv, pp);
        },
        true);
  };
  if (q.dtype() == DType::f64) run(double{});
  else if (bf16_products(q)) run_groups(true, {});
  else if (const F32Kernels fk = F32Kernels::for_isa()) run_groups(false, fk);
  else run(float{});
  return r;
}

}  // namespace heed::kernel
