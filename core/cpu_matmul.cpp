// core/cpu_matmul.cpp: (batched) matrix products through OpenBLAS GEMM, and
// the thread-count controls of every backend.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"
#include "core/bf16.h"
#include "core/block_gemm.h"
#include "core/conv_winograd.h"
#include "core/dnnl_context.h"
#include "core/error.h"
#include "core/iter.h"
#include "core/kernels.h"
#include "core/threads.h"

extern "C" {
// OpenBLAS extensions (declared in its cblas.h on most builds; repeated here
// so the file compiles against any cblas.h).
void openblas_set_num_threads(int);
int openblas_get_parallel(void);
char* openblas_get_config(void);
}

namespace heed::kernel {
namespace {

// How a [rows, cols] matrix view with strides (rs, cs) is handed to BLAS
// (row-major): as is (cs == 1, ld = rs) or transposed (rs == 1, ld = cs).
struct BlasMat {
  bool ok = false;
  bool trans = false;
  int64_t ld = 0;
};

BlasMat blas_layout(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  BlasMat m;
  if ((cs == 1 || cols == 1) && (rs >= std::max<int64_t>(cols, 1) || rows == 1)) {
    m.ok = true;
    m.ld = rows == 1 ? std::max<int64_t>(cols, 1) : rs;
  } else if ((rs == 1 || rows == 1) && (cs >= std::max<int64_t>(rows, 1) || cols == 1)) {
    m.ok = true;
    m.trans = true;
    m.ld = cols == 1 ? std::max<int64_t>(rows, 1) : cs;
  }
  return m;
}

// OpenBLAS never threads a product itself: its own split of a large product
// changes the last bits with the thread count. heed splits products over its
// threads instead (gemm_split). openblas_set_num_threads(1) is not enough in
// the OpenMP build (Debian's openblas-openmp): outside a parallel region
// each call takes OpenMP's thread count again, so a product called there
// (one below 1 MFLOP, or a single slab) ran on 2 threads and its bits
// depended on the count. Such a call runs with OpenMP's count at 1, put back
// after it. (openblas_set_num_threads also sets OpenMP's count, which is put
// back too.)
void openblas_single_threaded() {
  static std::once_flag once;
  std::call_once(once, [] {
    const int n = omp_get_max_threads();
    openblas_set_num_threads(1);  // the pthreads build's own count
    omp_set_num_threads(n);
  });
}

}  // namespace

OpenBlasOneThread::OpenBlasOneThread() {
  openblas_single_threaded();
  if (!omp_in_parallel() && omp_get_max_threads() > 1) {
    restore_ = omp_get_max_threads();
    omp_set_num_threads(1);
  }
}
OpenBlasOneThread::~OpenBlasOneThread() {
  if (restore_) omp_set_num_threads(restore_);
}

namespace {

template <class T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb,
          T* C, int64_t ldc, T beta = T(0)) {
  OpenBlasOneThread one;
  auto tA = ta ? CblasTrans : CblasNoTrans;
  auto tB = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, tA, tB, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
  else
    cblas_dgemm(CblasRowMajor, tA, tB, M, N, K, 1.0, A, lda, B, ldb, beta, C, ldc);
}

// C = op(A) op(B) (+ C when beta = 1) on oneDNN's matmul (brgemm kernels),
// in float32 on a CPU without AVX2, on the calling thread only.
// (float32 ran the Linear layers' mid-sized products 8-12% faster than
// OpenBLAS, e.g. [768, 128] x [128, 512]: 458 against 496 us on 2 threads,
// before heed's own GEMM took float32 over where AVX2 is.) Primitives are
// built once per shape, transposition, leading dimensions and beta, and
// cached. They are built for one thread: oneDNN fixes a primitive's split
// across threads when it is created, and on some CPUs (brgemm on AVX-512)
// that split cuts the inner dimension K differently for 1 and 2 threads,
// which changes the last bits. heed splits the work itself (gemm_split).
void dnnl_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
               int64_t ldb, float* C, int64_t ldc, float beta, const float* bias = nullptr) {
  using dnnl::memory;
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, bool, bool>;
  struct Entry {
    memory::desc a, b, c, bias, scratch;
    dnnl::matmul prim;
    bool shield = true;  // not a brgemm kernel: run with the signals blocked (core/dnnl_context.cpp)
  };
  // Each thread's own view of the primitives it ran: the entry and memory
  // objects bound to it, whose data handles are repointed per call (creating
  // four or five memory objects and an argument map per call cost more than
  // a small product's slab).
  struct Bound {
    std::shared_ptr<Entry> e;
    memory a, b, c, bias, scratch;
    std::unordered_map<int, memory> args;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      size_t h = 0;
      std::apply([&](const auto&... v) { ((h = h * 1000003u ^ std::hash<int64_t>()(int64_t(v))), ...); }, k);
      return h;
    }
  };
  static std::mutex mu;
  static std::map<Key, std::shared_ptr<Entry>> cache;
  thread_local std::unordered_map<Key, Bound, KeyHash> bound;
  const bool acc = beta != 0.0f;
  const Key key{M, N, K, lda, ldb, ldc, ta, tb, acc, bias != nullptr};
  auto it = bound.find(key);
  if (it == bound.end()) {
    std::shared_ptr<Entry> e;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto& slot = cache[key];
      if (!slot) {
        auto entry = std::make_shared<Entry>();
        const auto in = memory::data_type::f32;
        // Row-major strides; a transposed operand is the stored matrix read by columns.
        entry->a = memory::desc({M, K}, in, ta ? memory::dims{1, lda} : memory::dims{lda, 1});
        entry->b = memory::desc({K, N}, in, tb ? memory::dims{1, ldb} : memory::dims{ldb, 1});
        entry->c = memory::desc({M, N}, memory::data_type::f32, memory::dims{ldc, 1});
        // A bias row is added in the kernel's epilogue, to each row of C.
        if (bias) entry->bias = memory::desc({1, N}, memory::data_type::f32, memory::dims{N, 1});
        dnnl::primitive_attr attr;
        // Threads run primitives side by side: each brings its own scratchpad
        // (oneDNN's library-managed one is shared).
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        if (acc) {
          dnnl::post_ops po;
          po.append_sum(1.0f);  // C += A B
          attr.set_post_ops(po);
        }
        // oneDNN (OpenMP runtime) reads the thread count of the creating thread.
        const int threads = omp_get_max_threads();
        omp_set_num_threads(1);
        try {
          auto& eng = detail::dnnl_engine();
          dnnl::matmul::primitive_desc pd(bias ? dnnl::matmul::desc(entry->a, entry->b, entry->bias, entry->c)
                                               : dnnl::matmul::desc(entry->a, entry->b, entry->c),
                                          attr, eng);
          entry->scratch = pd.scratchpad_desc();
          entry->shield = detail::dnnl_needs_shield(pd.impl_info_str());
          entry->prim = dnnl::matmul(pd);
        } catch (...) {
          omp_set_num_threads(threads);
          throw;
        }
        omp_set_num_threads(threads);
        slot = entry;
      }
      e = slot;
    }
    auto& eng = detail::dnnl_engine();
    Bound nb;
    nb.e = e;
    nb.a = memory(e->a, eng, DNNL_MEMORY_NONE);
    nb.b = memory(e->b, eng, DNNL_MEMORY_NONE);
    nb.c = memory(e->c, eng, DNNL_MEMORY_NONE);
    nb.scratch = memory(e->scratch, eng, DNNL_MEMORY_NONE);
    nb.args = {{DNNL_ARG_SRC, nb.a}, {DNNL_ARG_WEIGHTS, nb.b}, {DNNL_ARG_DST, nb.c}, {DNNL_ARG_SCRATCHPAD, nb.scratch}};
    if (bias) {
      nb.bias = memory(e->bias, eng, DNNL_MEMORY_NONE);
      nb.args.emplace(DNNL_ARG_BIAS, nb.bias);
    }
    it = bound.emplace(key, std::move(nb)).first;
  }
  Bound& b = it->second;
  thread_local std::vector<char> scratch;  // grows to the largest scratchpad this thread needed
  if (scratch.size() < b.e->scratch.get_size()) scratch.resize(b.e->scratch.get_size());
  b.a.set_data_handle(const_cast<float*>(A));
  b.b.set_data_handle(const_cast<float*>(B));
  b.c.set_data_handle(C);
  b.scratch.set_data_handle(scratch.data());
  if (bias) b.bias.set_data_handle(const_cast<float*>(bias));
  if (b.e->shield) detail::dnnl_run_here(b.e->prim, b.args);
  else detail::dnnl_run_here_unshielded(b.e->prim, b.args);
}

// One single-threaded GEMM on the calling thread. float32 on a CPU with
// AVX2 or AVX-512: heed's own (block::sgemm_for, core/cpu_sgemm_simd.inc),
// whose elements are each one chain of fused multiply-adds in ascending
// order, so an AVX2 machine computes the same bits as an AVX-512 one (the
// libraries' kernels differ between the two: oneDNN ran brgemm on AVX-512
// and its older jit gemm on AVX2, cutting K differently, and OpenBLAS picks
// its kernels by CPU). Elsewhere, and for float64: oneDNN's matmul for
// float32 products from 1 MFLOP (faster than OpenBLAS there), OpenBLAS
// otherwise (heed keeps OpenBLAS at one thread: set_num_threads).
// With a bias (beta 0), C = op(A) op(B) + bias on every row: in the GEMM's
// epilogue, or written into C first for OpenBLAS to accumulate onto.
// With add (beta 0; laid out like C, not overlapping it), C = (op(A) op(B)
// + bias) + add: the bits of a separate add after the product (heed's GEMM
// adds it in its epilogue; after the libraries' GEMMs, a pass over C).
// With mul (laid out like C, not overlapping it), the result is then
// multiplied by it element by element: the bits of a separate multiply.
template <class T>
void gemm_one(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb,
              T* C, int64_t ldc, T beta, const T* bias = nullptr, const T* add = nullptr, const T* mul = nullptr) {
  if constexpr (std::is_same_v<T, float>) {
    const block::SgemmFn sgemm = block::sgemm_for(heed::cpu_isa());
    if (sgemm && (beta == 0.0f || beta == 1.0f)) {
      sgemm(M, N, K, A, ta ? 1 : lda, ta ? lda : 1, B, tb ? 1 : ldb, tb ? ldb : 1, C, ldc, bias,
            beta == 1.0f ? C : add, mul, false);
      return;
    }
  }
  auto add_after = [&] {
    if (add)
      for (int64_t r = 0; r < M; ++r)
        for (int64_t c = 0; c < N; ++c) C[r * ldc + c] = C[r * ldc + c] + add[r * ldc + c];
    if (mul)
      for (int64_t r = 0; r < M; ++r)
        for (int64_t c = 0; c < N; ++c) C[r * ldc + c] = C[r * ldc + c] * mul[r * ldc + c];
  };
  if constexpr (std::is_same_v<T, float>) {
    if (2 * M * N * K >= (int64_t{1} << 20) && (beta == 0.0f || beta == 1.0f)) {
      dnnl_gemm(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, beta, bias);
      add_after();
      return;
    }
  }
  if (bias) {
    for (int64_t r = 0; r < M; ++r) std::copy(bias, bias + N, C + r * ldc);
    beta = T(1);
  }
  gemm<T>(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, beta);
  add_after();
}

// How gemm_split cuts a product: into `count` slabs of output rows (or of
// columns, when the rows are fewer), `size` rows or columns each (the last
// one shorter), a multiple of 16 so that slab edges fall on the libraries'
// micro-kernel tiles. The cut depends on the shape only, never on the thread
// count, and every output element is one dot product over the whole K
// computed by one single-threaded call: the numbers are the same whatever
// the thread count (and in float32 with AVX2 or AVX-512, heed's GEMM, the
// same on either: gemm_one).
struct Slabs {
  bool by_rows = true;
  int64_t size = 0, count = 1;
};

Slabs gemm_slabs(int64_t M, int64_t N, int64_t K) {
  Slabs s;
  s.by_rows = M >= N;
  const int64_t total = s.by_rows ? M : N;
  const double flops = 2.0 * double(M) * double(N) * double(K);
  // Below 1 MFLOP one call does it all. Above, an even number of slabs (two
  // cores share them evenly), more as the product grows, so that a slab
  // stays near 256 MFLOP and its operands near the caches; at least 16 rows
  // or columns each.
  int64_t want = 1;
  if (flops >= double(1 << 20)) {
    want = 2;
    while (want < 64 && flops / double(want) > double(1 << 28)) want *= 2;
  }
  want = std::max<int64_t>(1, std::min(want, total / 16));
  s.size = ((total + want - 1) / want + 15) / 16 * 16;
  s.count = (total + s.size - 1) / s.size;
  return s;
}

// The precision of float32 products (heed::set_precision); products below
// kBf16MinFlops stay float32 (rounding the operands costs more than bf16 saves).
std::atomic<bool> g_bf16{false};
constexpr int64_t kBf16MinFlops = int64_t{1} << 20;
// Where a weight gradient dW [O, I] over R tokens splits its tokens: from 2
// MFLOP (and 32 tokens), in two halves at R / 2 (WeightGrad, linear_backward);
// else not at all (R).
int64_t token_split(int64_t R, int64_t O, int64_t I) {
  return R >= 32 && 2 * R * O * I >= (int64_t{1} << 21) ? R / 2 : R;
}

// work(i) for each i < count, over heed's threads unless already inside a
// parallel region (then in order on the calling thread). before(t, nt),
// when given, runs first on every thread t of nt, all before any work.
template <class Work, class Before = std::nullptr_t>
void for_slabs(int64_t count, const Work& work, const Before& before = nullptr) {
  constexpr bool has_before = !std::is_same_v<Before, std::nullptr_t>;
  const int nt = omp_in_parallel() ? 1 : static_cast<int>(std::min<int64_t>(omp_get_max_threads(), count));
  if (nt < 2) {
    if constexpr (has_before) before(0, 1);
    for (int64_t i = 0; i < count; ++i) work(i);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    if constexpr (has_before) {
      before(omp_get_thread_num(), nt);
#pragma omp barrier
    }
#pragma omp for schedule(static)
    for (int64_t i = 0; i < count; ++i) work(i);
  }
}

// The bf16 product of float32 operands (set_precision(Precision::bf16)):
// each operand rounded to bfloat16 once and pair-packed (core/bf16.h), then
// heed's bf16 GEMM (bf16::gemm: vdpbf16ps, float32 accumulation in
// ascending pairs) slab by slab, as float32 products are. The cut into slabs
// depends on the shape only (gemm_slabs), and every element is one chain
// over all of K whichever slab and thread compute it, so the numbers do not
// depend on the thread count either.
//
// Every layout packs without a transposition of floats: A by rows
// (pack_rows) or, stored transposed (a weight gradient's dY^T), by pairs of
// its stored rows (pack_pairs, read with its strides swapped); B by pairs of
// rows, or stored transposed (x W^T's W) by pairs of neighbours in its rows.
// (oneDNN's bf16 matmul, which heed used before, wanted A untransposed and
// copied B into its own layout in every call: GPT-128's weight gradients ran
// at ~200 GFLOP/s against ~350 for the other products.)
//
// B is packed in panels of 64 columns ([P][64] words each, bf16::gemm's
// `panel`), so that the pairs a tile reads are neighbours in memory: with
// B's whole rows a pair apart, a 1024-column B put a page between pairs.
// Measured on one slab with its operands in cache, one thread: GPT-256's fc1
// weight gradient (128 x 1024 x 3072) 202-211 against 224 GFLOP/s, 1024^3's
// 222-226 against 229-230, GPT-128's shapes 0-1.5% faster.
//
// In pieces, so that a caller can run several products in one parallel
// region (linear_backward): bind(a, b) the buffers (a_words() and b_words()
// long) first, then shared(t, nt) on every thread t of nt (the operand all
// slabs read: B for row slabs, A for column ones), then, after a barrier,
// slab(i) once for each i < count(), on any thread, which packs its own rows
// of A or columns of B and multiplies.
class Bf16Product {
 public:
  Bf16Product(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
              int64_t ldb, float* C, int64_t ldc, float beta, const float* bias, const float* add = nullptr)
      : s_(gemm_slabs(M, N, K)), ta_(ta), tb_(tb), M_(M), N_(N), K_(K), P_((K + 1) / 2), A_(A), lda_(lda), B_(B),
        ldb_(ldb), C_(C), ldc_(ldc), beta_(beta), bias_(bias), add_(beta == 1.0f ? nullptr : add),
        // B's panels: all of B for row slabs, a column slab's own for column ones.
        bregion_(((s_.by_rows ? N : s_.size) + 63) / 64 * 64 * P_) {}

  int64_t a_words() const { return M_ * P_; }
  int64_t b_words() const { return s_.by_rows ? bregion_ : s_.count * bregion_; }
  void bind(uint32_t* a, uint32_t* b) {
    pa_ = a;
    pb_ = b;
  }
  int64_t count() const { return s_.count; }

  void shared(int t, int nt) const {
    const int64_t p0 = P_ * t / nt, p1 = P_ * (t + 1) / nt;
    if (s_.by_rows) {
      pack_b(0, N_, p0, p1, pb_);  // B whole: this thread's pairs of every panel
    } else if (ta_) {
      // A whole, by pairs of its stored rows: [P, M].
      const int64_t rows = std::min(K_, 2 * p1) - 2 * p0;
      if (rows > 0) bf16::pack_pairs(A_ + 2 * p0 * lda_, lda_, 1, rows, M_, pa_ + p0 * M_, M_);
    } else {
      // A whole, by rows: [M, P].
      const int64_t m0 = M_ * t / nt, m1 = M_ * (t + 1) / nt;
      if (m1 > m0) bf16::pack_rows(A_ + m0 * lda_, lda_, 1, m1 - m0, K_, pa_ + m0 * P_, P_);
    }
  }

  void slab(int64_t i) const {
    const int64_t lo = i * s_.size;
    const bool acc = beta_ == 1.0f || add_;
    if (s_.by_rows) {
      rows(lo, std::min(lo + s_.size, M_));
    } else {
      const int64_t w = std::min(lo + s_.size, N_) - lo;
      uint32_t* b = pb_ + i * bregion_;  // the slab's own columns' panels
      pack_b(lo, w, 0, P_, b);
      bf16::gemm(M_, w, P_, pa_, ta_ ? 1 : P_, ta_ ? M_ : 1, b, 64, C_ + lo, ldc_, 1.0f, acc, {},
                 bias_ ? bias_ + lo : nullptr, true, 64 * P_, add_ ? add_ + lo : nullptr);
    }
  }

  // Whether two threads may share the row slabs (share_rows).
  bool shares_rows() const { return s_.by_rows && s_.count >= 2; }
  // The rows of a row-slab product shared by two threads, after shared() on
  // both: each takes chunks of kShareRows rows, thread 0 (side 0) from the
  // top, thread 1 from the bottom (block::claim_tiles, as heed's float32
  // GEMM shares its row tiles), so that a core running late does less
  // instead of keeping the other waiting. A chunk is one bf16::gemm call on
  // rows it packed itself, and every element is one chain over all of K
  // wherever the chunks fall: the numbers of slab(i) for every i.
  void share_rows(std::atomic<uint64_t>& taken, int side) const {
    const int64_t units = (M_ + kShareRows - 1) / kShareRows;
    for (int64_t lo, hi; block::claim_tiles(taken, units, side, lo, hi);)
      rows(lo * kShareRows, std::min(M_, hi * kShareRows));
  }

 private:
  // A multiple of every height bf16::gemm's register tiles take (6, 8, 12
  // and 16 rows).
  static constexpr int64_t kShareRows = 48;

  // Rows [lo, hi) of a row-slab product: packed into their own part of A's
  // buffer ([m, P], or [P, m] by pairs), then multiplied.
  void rows(int64_t lo, int64_t hi) const {
    const bool acc = beta_ == 1.0f || add_;
    const int64_t m = hi - lo;
    uint32_t* a = pa_ + lo * P_;
    if (ta_) bf16::pack_pairs(A_ + lo, lda_, 1, K_, m, a, m);
    else bf16::pack_rows(A_ + lo * lda_, lda_, 1, m, K_, a, P_);
    bf16::gemm(m, N_, P_, a, ta_ ? 1 : P_, ta_ ? m : 1, pb_, 64, C_ + lo * ldc_, ldc_, 1.0f, acc, {}, bias_, true,
               64 * P_, add_ ? add_ + lo * ldc_ : nullptr);
  }

  // Pairs [p0, p1) of B's columns [c0, c0 + w) into their panels at dst.
  void pack_b(int64_t c0, int64_t w, int64_t p0, int64_t p1, uint32_t* dst) const {
    const int64_t rows = std::min(K_, 2 * p1) - 2 * p0;
    if (rows <= 0) return;
    for (int64_t q = 0; 64 * q < w; ++q) {
      const int64_t c = c0 + 64 * q, n = std::min<int64_t>(64, w - 64 * q);
      uint32_t* d = dst + q * 64 * P_ + p0 * 64;
      if (tb_) bf16::pack_pairs(B_ + c * ldb_ + 2 * p0, 1, ldb_, rows, n, d, 64);
      else bf16::pack_pairs(B_ + 2 * p0 * ldb_ + c, ldb_, 1, rows, n, d, 64);
    }
  }

  Slabs s_;
  bool ta_, tb_;
  int64_t M_, N_, K_, P_;
  const float* A_;
  int64_t lda_;
  const float* B_;
  int64_t ldb_;
  float* C_;
  int64_t ldc_;
  float beta_;
  const float* bias_;
  const float* add_;
  int64_t bregion_;
  uint32_t *pa_ = nullptr, *pb_ = nullptr;
};

// A thread's packing buffer of at least n words, grown as needed, from a
// cache line (alloc::LineVector: its panels' rows load whole lines).
uint32_t* bf16_buffer(alloc::LineVector<uint32_t>& v, int64_t n) {
  if (v.size() < size_t(n)) v.resize(size_t(n));
  return v.data();
}

// One Bf16Product over heed's threads: with two, its rows shared from both
// ends (share_rows), else its slabs in order (for_slabs). Whole training
// steps, pairs of steps alternating the two in one process (bf16; GPT-128
// 300 pairs, GPT-256 40, nanoGPT's shape 40), shared against in order:
// GPT-128 +0.4, +1.3, +1.6%, GPT-256 +3.2, +1.9, +1.9%, nanoGPT's +1.3,
// +0.7%; the products alone, GPT-256's forward +3.5 to +9.3%. (Sharing the
// Linear backward's dX rows or dW halves too measured -2.6 to +8.3%, no
// better on the whole: dX's next op reads its rows where the in-order
// slabs leave them, linear_backward.)
void gemm_split_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                     int64_t ldb, float* C, int64_t ldc, float beta, const float* bias, const float* add) {
  thread_local alloc::LineVector<uint32_t> bufa, bufb;
  Bf16Product p(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, beta, bias, add);
  p.bind(bf16_buffer(bufa, p.a_words()), bf16_buffer(bufb, p.b_words()));
  if (p.shares_rows() && !omp_in_parallel() && omp_get_max_threads() == 2) {
    std::atomic<uint64_t> taken{0};
#pragma omp parallel num_threads(2)
    {
      const int t = omp_get_thread_num();
      p.shared(t, omp_get_num_threads());
#pragma omp barrier
      p.share_rows(taken, t);  // (a team of one: side 0 takes every row)
    }
    return;
  }
  for_slabs(p.count(), [&](int64_t i) { p.slab(i); }, [&](int t, int nt) { p.shared(t, nt); });
}

// C = op(A) op(B) (+ C when beta = 1), split over heed's threads in slabs
// (gemm_slabs), each slab one single-threaded call. Inside an active parallel
// region the slabs run one after the other on the calling thread. A bias
// (contiguous, N long) is added to every row of C, then add (beta 0; laid
// out like C: gemm_one). Under set_precision(bf16) float32 products of 1
// MFLOP or more run in bf16 (gemm_split_bf16).
template <class T>
void gemm_split(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
                int64_t ldb, T* C, int64_t ldc, T beta = T(0), const T* bias = nullptr, const T* add = nullptr) {
  if constexpr (std::is_same_v<T, float>) {
    if (g_bf16.load(std::memory_order_relaxed) && 2 * M * N * K >= kBf16MinFlops && (beta == 0.0f || beta == 1.0f)) {
      gemm_split_bf16(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, beta, bias, add);
      return;
    }
  }
  const Slabs s = gemm_slabs(M, N, K);
  // Two threads and row slabs: the row tiles shared from both ends instead
  // (block::RowShare; each tile one call's bits either way), so that a
  // thread running late does less instead of keeping the other waiting.
  if constexpr (std::is_same_v<T, float>) {
    block::SgemmSharedFn shared = nullptr;
    if (s.by_rows && s.count >= 2 && (beta == 0.0f || beta == 1.0f) && block::sgemm_shareable(K, N) &&
        !(ta && block::sgemm_copies_transposed_a(heed::cpu_isa())) && !omp_in_parallel() &&
        omp_get_max_threads() == 2)
      shared = block::sgemm_shared_for(heed::cpu_isa());
    if (shared) {
      block::RowShare share;
      bool done = true;
#pragma omp parallel num_threads(2) reduction(&& : done)
      done = shared(M, N, K, A, ta ? 1 : lda, ta ? lda : 1, B, tb ? 1 : ldb, tb ? ldb : 1, C, ldc, bias,
                    beta == 1.0f ? C : add, nullptr, share, omp_get_thread_num());
      if (done) return;  // (else nothing was written: sgemm_shareable said yes, so never)
    }
  }
  for_slabs(s.count, [&](int64_t i) {
    int64_t lo = i * s.size, hi = lo + s.size;
    if (s.by_rows) {
      hi = std::min(hi, M);
      gemm_one<T>(ta, tb, hi - lo, N, K, ta ? A + lo : A + lo * lda, lda, B, ldb, C + lo * ldc, ldc, beta, bias,
                  add ? add + lo * ldc : nullptr);
    } else {
      hi = std::min(hi, N);
      gemm_one<T>(ta, tb, M, hi - lo, K, A, lda, tb ? B + lo * ldb : B + lo, ldb, C + lo, ldc, beta,
                  bias ? bias + lo : nullptr, add ? add + lo : nullptr);
    }
  });
}

// y [R, O] = x [R, I] w[O, I]^T (+ b): the bias goes with the GEMM, slab by
// slab (oneDNN adds it in its epilogue; before OpenBLAS it is written into
// the slab, which the GEMM then accumulates onto), never in a pass of its own.
// add (contiguous, y's shape, or undefined): y = add + (x w^T + b), added in
// the same epilogue.
template <class T>
void linear_impl(const Tensor& x2, const Tensor& w, const Tensor& b, const Tensor& y, const Tensor& add) {
  const int64_t R = x2.size(0), I = x2.size(1), O = w.size(0);
  T* py = y.data<T>();
  if (R == 0 || O == 0) return;
  const Tensor bc = b.defined() ? contiguous(b) : Tensor();
  const T* pa = add.defined() ? add.data<T>() : nullptr;
  if (I == 0) {
    for (int64_t r = 0; r < R; ++r)
      for (int64_t o = 0; o < O; ++o) {
        const T v = bc.defined() ? bc.data<T>()[o] : T(0);
        py[r * O + o] = pa ? v + pa[r * O + o] : v;
      }
    return;
  }
  BlasMat mx = blas_layout(R, I, x2.stride(0), x2.stride(1));
  BlasMat mw = blas_layout(I, O, w.stride(1), w.stride(0));  // w^T as [I, O]
  gemm_split<T>(mx.trans, mw.trans, R, O, I, x2.data<T>(), mx.ld, w.data<T>(), mw.ld, py, O, T(0),
                bc.defined() ? bc.data<T>() : nullptr, pa);
}

template <class T>
Tensor matmul_impl(Tensor a, Tensor b, const Shape& batch) {
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  const int64_t nb = shape_numel(batch);
  Shape out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  Tensor out = Tensor::empty(out_shape, a.dtype());
  if (out.numel() == 0) return out;
  if (K == 0) {
    fill_(out, 0.0);
    return out;
  }

  // A matrix whose layout BLAS cannot take (both strides > 1) is copied once.
  auto fix = [](Tensor& t) {
    BlasMat m = blas_layout(t.size(-2), t.size(-1), t.stride(-2), t.stride(-1));
    if (!m.ok) t = contiguous(t);
  };
  fix(a);
  fix(b);

  // Shared right operand (e.g. a Linear weight applied to [N, T, D]): when a's
  // batch and row dims flatten into one row dim, do one big GEMM.
  bool b_shared = true;
  for (int64_t d = 0; d < b.dim() - 2; ++d)
    if (b.size(d) != 1) b_shared = false;
  if (nb > 1 && b_shared && a.dim() > 2 && a.stride(-1) == 1) {
    Shape flat = {nb * M, K};
    Tensor ae = expand(a, [&] { Shape s = batch; s.push_back(M); s.push_back(K); return s; }());
    Shape st;
    Tensor av;
    try {
      av = view(ae, flat);
    } catch (const Error&) {
    }
    // A one-row a broadcast over the batch ([B, 1, K] with batch stride 0)
    // folds into a view with row stride 0, which GEMM rejects (lda < K) and
    // then leaves C unwritten; such operands take the batched loop below.
    if (av.defined() && av.stride(0) >= K) {
      Tensor b2 = reshape(b, {K, N});
      BlasMat mb = blas_layout(K, N, b2.stride(0), b2.stride(1));
      if (mb.ok) {
        gemm_split<T>(false, mb.trans, nb * M, N, K, av.data<T>(), av.stride(0), b2.data<T>(), mb.ld, out.data<T>(), N);
        return out;
      }
    }
  }

  Shape ashape = batch, bshape = batch;
  ashape.push_back(M);
  ashape.push_back(K);
  bshape.push_back(K);
  bshape.push_back(N);
  Tensor ae = expand(a, ashape), be = expand(b, bshape);
  BlasMat ma = blas_layout(M, K, ae.stride(-2), ae.stride(-1));
  BlasMat mb = blas_layout(K, N, be.stride(-2), be.stride(-1));
  const int nbd = static_cast<int>(batch.size());
  const T* pa = ae.data<T>();
  const T* pb = be.data<T>();
  T* pc = out.data<T>();
  auto batch_offsets = [&](int64_t i, int64_t& oa, int64_t& ob) {
    oa = ob = 0;
    for (int d = nbd - 1; d >= 0; --d) {
      int64_t k = i % batch[d];
      i /= batch[d];
      oa += k * ae.stride(d);
      ob += k * be.stride(d);
    }
  };
  auto one = [&](int64_t i) {
    int64_t oa, ob;
    batch_offsets(i, oa, ob);
    gemm_split<T>(ma.trans, mb.trans, M, N, K, pa + oa, ma.ld, pb + ob, mb.ld, pc + i * M * N, N);
  };
  // Many small products: one GEMM per thread. Larger ones: each split over
  // the threads by gemm_split. A batch with little work in all stays on one
  // thread: a parallel region costs more than it saves there, and far more
  // when the cores are busy (attention heads at generation time, gradient
  // checks).
  const bool small = M * N * K < (1 << 18);
  if (small && nb > 1 && nb * M * N * K > kParallelGrain) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < nb; ++i) one(i);
  } else {
    for (int64_t i = 0; i < nb; ++i) one(i);
  }
  return out;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_defined(a, "matmul");
  check_defined(b, "matmul");
  if (a.dim() < 2 || b.dim() < 2)
    fail("matmul: expected operands of rank >= 2, got shapes {} and {}", shape_str(a.shape()), shape_str(b.shape()));
  if (a.size(-1) != b.size(-2))
    fail("matmul: shapes {} and {} do not match (inner dims {} and {})", shape_str(a.shape()), shape_str(b.shape()),
         a.size(-1), b.size(-2));
  if (a.dtype() != b.dtype())
    fail("matmul: dtype mismatch: {} and {}", dtype_name(a.dtype()), dtype_name(b.dtype()));
  Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  for (size_t i = 1; i <= std::min(ab.size(), bb.size()); ++i) {
    int64_t da = ab[ab.size() - i], db = bb[bb.size() - i];
    if (da != db && da != 1 && db != 1)
      fail("matmul: batch dims of shapes {} and {} do not broadcast ({} vs {})", shape_str(a.shape()),
           shape_str(b.shape()), da, db);
  }
  Shape batch = broadcast_shapes(ab, bb, "matmul");
  switch (a.dtype()) {
    case DType::f32: return matmul_impl<float>(a, b, batch);
    case DType::f64: return matmul_impl<double>(a, b, batch);
    default: fail("matmul: expected floating-point operands, got {}", dtype_name(a.dtype()));
  }
}

// ---- runtime ----
namespace {
// x_sum += g2 [R, O] w [O, I]: the product matmul(g, w) makes, slab for slab,
// with beta = 1 (each element the product's own value, then added to x_sum's).
template <class T>
void data_grad_into(Tensor g2, Tensor w, const Tensor& x_sum) {
  const int64_t R = g2.size(0), O = g2.size(1), I = w.size(1);
  if (!blas_layout(R, O, g2.stride(0), g2.stride(1)).ok) g2 = contiguous(g2);
  if (!blas_layout(O, I, w.stride(0), w.stride(1)).ok) w = contiguous(w);
  const BlasMat mg = blas_layout(R, O, g2.stride(0), g2.stride(1)), mw = blas_layout(O, I, w.stride(0), w.stride(1));
  gemm_split<T>(mg.trans, mw.trans, R, I, O, g2.data<T>(), mg.ld, w.data<T>(), mw.ld, x_sum.data<T>(), I, T(1));
}
// acc[o] += row[o] for o < O, in double: a row of the bias gradient's sum.
inline void add_row(const float* row, int64_t O, double* acc) {
  for (int64_t o = 0; o < O; ++o) acc[o] += double(row[o]);
}

// dW [O, I] = dY^T x over R tokens (dY [R, O] contiguous, x [R, I] in
// layout mx), float32, as tasks for the caller's parallel region. From 2
// MFLOP (and 32 tokens), in two halves of the tokens, [0, R/2) and [R/2, R),
// whose products are summed first + second (add_halves, after all tasks):
// thread t of two takes half t, the rows every row-split op before it (the
// forward's slabs, LayerNorm, GELU, dX's slabs) gave it, so each core reads
// only its own rows of dY and x. (With the product cut into slabs of dW's
// rows instead, both cores read all of x: its lines end up in both caches,
// and the op that next writes to the block they lie in waits for the other
// core's copies.) The halves depend on R only: the same bits for any thread
// count. Below 2 MFLOP, one product in slabs (gemm_slabs).
class WeightGrad {
 public:
  WeightGrad(int64_t R, int64_t O, int64_t I, const float* dy, const float* x, const BlasMat& mx, float* dw,
             alloc::LineVector<float>& second)
      : R_(R), O_(O), I_(I), h_(token_split(R, O, I)), dy_(dy), x_(x), mx_(mx),
        dw_(dw), s_(gemm_slabs(O, I, h_)) {
    if (halves() && dw) {
      if (second.size() < size_t(O * I)) second.resize(size_t(O * I));
      second_ = second.data();
    }
  }
  bool halves() const { return h_ < R_; }
  int64_t tasks() const { return halves() ? 2 * s_.count : s_.count; }
  // Task t: half t / count's slab t % count, dW's rows (or columns) [lo, hi).
  void task(int64_t t) const {
    const int64_t half = t / s_.count, i = t % s_.count;
    const int64_t r0 = half ? h_ : 0, r1 = half ? R_ : h_;
    float* C = half ? second_ : dw_;
    const float* A = dy_ + r0 * O_;                             // dY^T: element (o, r) at A[r O + o]
    const float* B = mx_.trans ? x_ + r0 : x_ + r0 * mx_.ld;  // x's rows from r0
    const int64_t lo = i * s_.size;
    if (s_.by_rows) {
      const int64_t hi = std::min(lo + s_.size, O_);
      gemm_one<float>(true, mx_.trans, hi - lo, I_, r1 - r0, A + lo, O_, B, mx_.ld, C + lo * I_, I_, 0.0f);
    } else {
      const int64_t hi = std::min(lo + s_.size, I_);
      gemm_one<float>(true, mx_.trans, O_, hi - lo, r1 - r0, A, O_, mx_.trans ? B + lo * mx_.ld : B + lo, mx_.ld,
                      C + lo, I_, 0.0f);
    }
  }
  // Whether two threads can share each half's row tiles (share_half).
  bool shareable() const { return halves() && block::sgemm_shareable(std::max(h_, R_ - h_), I_); }
  // Half `half`'s product, its row tiles shared (block::sgemm_shared): side 0
  // on the thread that owns the half (takes it from the top), side 1 on the
  // other (from the bottom, once done with its own). The owner computes the
  // half by its tasks if the product cannot be shared (never after
  // shareable()).
  void share_half(block::SgemmSharedFn fn, int half, block::RowShare& share, int side) const {
    const int64_t r0 = half ? h_ : 0, r1 = half ? R_ : h_;
    const float* B = mx_.trans ? x_ + r0 : x_ + r0 * mx_.ld;
    if (!fn(O_, I_, r1 - r0, dy_ + r0 * O_, 1, O_, B, mx_.trans ? 1 : mx_.ld, mx_.trans ? mx_.ld : 1,
            half ? second_ : dw_, I_, nullptr, nullptr, nullptr, share, side) &&
        side == 0)
      for (int64_t i = 0; i < s_.count; ++i) task(half * s_.count + i);
  }
  // dW's rows [o0, o1) += the second half's.
  void add_halves(int64_t o0, int64_t o1) const {
    for (int64_t o = o0; o < o1; ++o)
      for (int64_t c = 0; c < I_; ++c) dw_[o * I_ + c] += second_[o * I_ + c];
  }

 private:
  int64_t R_, O_, I_, h_;
  const float *dy_, *x_;
  BlasMat mx_;
  float* dw_;
  Slabs s_;
  float* second_ = nullptr;
};

// Chunk c of `chunks` of dY's R rows [R, O], summed column by column in
// double into part's row c.
inline void bias_chunk(const float* dy, int64_t R, int64_t O, int64_t chunks, int64_t c, double* part) {
  const int64_t r0 = R * c / chunks, r1 = R * (c + 1) / chunks;
  double* __restrict acc = part + c * O;
  std::fill(acc, acc + O, 0.0);
  // Four rows per pass over acc, each element still added in row order: the
  // same sums as one row at a time, a quarter of the loads and stores of acc.
  int64_t row = r0;
  for (; row + 4 <= r1; row += 4) {
    const float* __restrict a = dy + row * O;
    for (int64_t o = 0; o < O; ++o)
      acc[o] = (((acc[o] + double(a[o])) + double(a[O + o])) + double(a[2 * O + o])) + double(a[3 * O + o]);
  }
  for (; row < r1; ++row) add_row(dy + row * O, O, acc);
}

// The chunks' sums, in order: the bias gradient, the same for any thread
// count. Chunk by chunk over a run of columns (each column's sum still in
// chunk order), so the adds of neighbouring columns share vectors.
void bias_from_chunks(const double* part, int64_t chunks, int64_t O, int64_t o0, int64_t o1, float* b) {
  double sum[32];
  const int64_t n = o1 - o0;
  for (int64_t i0 = 0; i0 < n; i0 += 32) {
    const int64_t m = std::min<int64_t>(32, n - i0);
    for (int64_t i = 0; i < m; ++i) sum[i] = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      const double* p = part + c * O + o0 + i0;
      for (int64_t i = 0; i < m; ++i) sum[i] += p[i];
    }
    for (int64_t i = 0; i < m; ++i) b[o0 + i0 + i] = static_cast<float>(sum[i]);
  }
}

}  // namespace

LinearGrads linear_backward(const Tensor& g, const Tensor& x, const Tensor& w, bool need_x, bool need_w,
                            const Tensor& x_sum, bool need_b, const Tensor& dx_mul) {
  const int64_t O = w.size(0), I = w.size(1);
  // Rows counted from the leading dims: reshape's -1 cannot be solved when
  // O or I is 0.
  int64_t R = 1;
  for (int64_t d = 0; d + 1 < g.dim(); ++d) R *= g.size(d);
  Tensor g2 = reshape(g, {R, O});
  LinearGrads r;
  // x_sum (autograd::Grads::sum_target) and dx_mul: contiguous, x's shape
  // and dtype.
  const bool into = need_x && x_sum.defined() && R > 0 && O > 0;
  auto check_like_dx = [&](const Tensor& t, const char* what) {
    Shape xs = g.shape();
    xs.back() = I;
    if (t.defined() && (t.shape() != xs || t.dtype() != g.dtype() || !t.is_contiguous()))
      fail("linear backward: {} is {} {}, expected contiguous {} {}", what, shape_str(t.shape()),
           dtype_name(t.dtype()), shape_str(xs), dtype_name(g.dtype()));
  };
  check_like_dx(x_sum, "the gradient sum to add dX into");
  check_like_dx(dx_mul, "the factor to multiply dX by");
  if (x_sum.defined() && dx_mul.defined())
    fail("linear backward: dX can be multiplied by a factor or added into a sum, not both");
  const bool scale_x = need_x && dx_mul.defined();
  // The products run in bf16 (set_precision) from kBf16MinFlops. Without
  // dW (a frozen weight, whose x the caller need not pass), dX alone goes
  // through gemm_split, in bf16 there.
  const bool bf16_products = g_bf16.load(std::memory_order_relaxed) && g.dtype() == DType::f32 &&
                             w.dtype() == DType::f32 && (!x.defined() || x.dtype() == DType::f32) &&
                             2 * R * O * I >= kBf16MinFlops;
  const bool bf16 = need_w && bf16_products;
  if (!bf16 && (g.dtype() != DType::f32 || R == 0 || O == 0 || I == 0 || bf16_products)) {
    if (need_x && x_sum.defined()) {
      // An empty product adds nothing: the sum comes back as it was.
      if (into && g.dtype() == DType::f64) data_grad_into<double>(g2, w, x_sum);
      else if (into) data_grad_into<float>(g2, w, x_sum);
      r.x = x_sum;
    } else if (need_x) {
      Shape xs = g.shape();  // x's: a 1-d x too, which matmul's operands may not be
      xs.back() = I;
      r.x = reshape(matmul(g2, w), xs);
      if (scale_x) mul_(r.x, dx_mul);
    }
    if (need_w) r.w = matmul(transpose(g2, 0, 1), reshape(x, {R, I}));
    if (need_b) r.b = sum(g2, {0}, false);
    return r;
  }
  // The bias gradient's column sums of dY, chunk by chunk, each in double.
  thread_local std::vector<double> partial;
  const int64_t chunks = need_b ? std::max<int64_t>(1, std::min<int64_t>(64, R / 16)) : 0;
  if (need_b && partial.size() < size_t(chunks * O)) partial.resize(size_t(chunks * O));
  double* part = partial.data();  // (inside a region, `partial` would name each thread's own)
  if (need_b) r.b = Tensor::empty({O}, DType::f32);
  float* pb = need_b ? r.b.data<float>() : nullptr;
  if (!bf16) {
    // float32, all in one parallel region: the bias gradient's chunks, dX's
    // row slabs in order over the threads (each one call of heed's GEMM, as
    // gemm_split cuts them), dW's tasks (WeightGrad), then the halves' sum
    // and the bias gradient's chunks summed in order. Against three regions
    // (dX's slabs, dW's tasks, then the bias by sum()), a whole training
    // step alternating the two step by step in one process: GPT-128 2.1-6.3%
    // faster (four runs of 400 steps), GPT-256 -4.4 to +3.1% (three of 60:
    // no difference at its ~10 ms products).
    g2 = contiguous(g2);
    const float* pg = g2.data<float>();
    Tensor wc = blas_layout(O, I, w.stride(0), w.stride(1)).ok ? w : contiguous(w);
    const BlasMat mw = blas_layout(O, I, wc.stride(0), wc.stride(1));
    if (need_x) {
      Shape xs = g.shape();
      xs.back() = I;
      r.x = into ? x_sum : Tensor::empty(xs, DType::f32);
    }
    Tensor x2;
    BlasMat mx;
    if (need_w) {
      x2 = reshape(x, {R, I});
      if (!blas_layout(R, I, x2.stride(0), x2.stride(1)).ok) x2 = contiguous(x2);
      mx = blas_layout(R, I, x2.stride(0), x2.stride(1));
      r.w = Tensor::empty({O, I}, DType::f32);
    }
    thread_local alloc::LineVector<float> second;  // dW of the second half (C of its product: rows on cache lines)
    const WeightGrad dw(R, O, I, pg, need_w ? x2.data<float>() : nullptr, mx, need_w ? r.w.data<float>() : nullptr,
                        second);
    const Slabs sx = gemm_slabs(R, I, O);
    const int64_t nx = need_x ? sx.count : 0, nw = need_w ? dw.tasks() : 0;
    const float* pw = wc.data<float>();
    float* pdx = need_x ? r.x.data<float>() : nullptr;
    // dX's factor (laid out like dX) in the GEMM's epilogue on AVX2; on
    // AVX-512 in a pass after the region. Pairs of GPT-128 training steps
    // alternating the two in one process (400 steps), epilogue against pass:
    // Zen 3 (AVX2) +1.3, +1.3, +0.5, +1.1, -0.8, +0.9, +2.0, +1.0, +0.6,
    // +0.6%; Zen 5, AVX2 path +0.3, +0.4%; Zen 5, AVX-512 -0.8, -0.9, -1.2,
    // -1.0, -1.4% (GPT-256, 40 steps: -1.1%). (Its bf16 products, with the
    // factor in their epilogue too: -0.6 to -2.7%.) The same bits either way.
    const bool fuse_mul = scale_x && heed::cpu_isa() != CpuIsa::avx512;
    const float* pm = fuse_mul ? dx_mul.data<float>() : nullptr;
    const float beta = into ? 1.0f : 0.0f;
    auto dx_slab = [&](int64_t i) {
      const int64_t lo = i * sx.size;
      if (sx.by_rows) {
        const int64_t hi = std::min(lo + sx.size, R);
        gemm_one<float>(false, mw.trans, hi - lo, I, O, pg + lo * O, O, pw, mw.ld, pdx + lo * I, I, beta, nullptr,
                        nullptr, pm ? pm + lo * I : nullptr);
      } else {
        const int64_t hi = std::min(lo + sx.size, I);
        gemm_one<float>(false, mw.trans, R, hi - lo, O, pg, O, mw.trans ? pw + lo * mw.ld : pw + lo, mw.ld, pdx + lo,
                        I, beta, nullptr, nullptr, pm ? pm + lo : nullptr);
      }
    };
    const int64_t work = std::max(chunks, std::max(nx, nw));
    const int nt = omp_in_parallel() ? 1 : static_cast<int>(std::min<int64_t>(omp_get_max_threads(), work));
    // Two threads: dX's row tiles shared from both ends (as gemm_split's),
    // and on AVX-512 each half of dW too, its owner from the top and, once
    // done, the other thread from the bottom. (AVX2's GEMM copies a
    // transposed A, dY^T, whole before its tiles: a helper would copy all of
    // the other half for a few tiles; GPT-128's AVX2 step was 8.5% slower.)
    const block::SgemmSharedFn shared = nt == 2 && sx.by_rows && sx.count >= 2 && block::sgemm_shareable(O, I)
                                            ? block::sgemm_shared_for(heed::cpu_isa())
                                            : nullptr;
    const bool share_w = shared && need_w && dw.shareable() && !block::sgemm_copies_transposed_a(heed::cpu_isa());
    block::RowShare x_share, w_share[2];
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
      if (need_b) {
#pragma omp for schedule(static) nowait
        for (int64_t c = 0; c < chunks; ++c) bias_chunk(pg, R, O, chunks, c, part);
      }
      if (shared) {
        const int t = omp_get_thread_num();  // (on one thread, it does both halves' tiles)
        if (share_w) {
          dw.share_half(shared, t, w_share[t], 0);
        } else {
#pragma omp for schedule(static) nowait
          for (int64_t i = 0; i < nw; ++i) dw.task(i);
        }
        if (need_x && !shared(R, I, O, pg, O, 1, pw, mw.trans ? 1 : mw.ld, mw.trans ? mw.ld : 1, pdx, I, nullptr,
                              into ? pdx : nullptr, pm, x_share, t)) {
#pragma omp for schedule(static) nowait
          for (int64_t i = 0; i < nx; ++i) dx_slab(i);
        }
        if (share_w) dw.share_half(shared, 1 - t, w_share[1 - t], 1);
#pragma omp barrier
      } else {
#pragma omp for schedule(static) nowait
        for (int64_t i = 0; i < nx; ++i) dx_slab(i);
#pragma omp for schedule(static)
        for (int64_t i = 0; i < nw; ++i) dw.task(i);
      }
      if (need_w && dw.halves()) {
#pragma omp for schedule(static) nowait
        for (int64_t o0 = 0; o0 < O; o0 += 16) dw.add_halves(o0, std::min(O, o0 + 16));
      }
      if (need_b) {
#pragma omp for schedule(static)
        for (int64_t o0 = 0; o0 < O; o0 += 32) bias_from_chunks(part, chunks, O, o0, std::min(O, o0 + 32), pb);
      }
    }
    if (scale_x && !fuse_mul) mul_(r.x, dx_mul);
    return r;
  }
  // bf16, all in one parallel region:
  // 1. The bias gradient's column sums of dY, chunk by chunk.
  // 2. The operands each product's slabs share (W for dX = dY W, x for
  //    dW = dY^T x), packed by all threads.
  // 3. The slabs of both products (each slab is one call whichever thread
  //    runs it: the numbers do not change); each packs its own rows of dY
  //    (for dX) or its columns of dY (dY^T's rows, for dW). dX's slabs go to
  //    the threads in order, then dW's: from 2 MFLOP, two products over the
  //    two halves of the tokens, half t's packing and slabs on thread t of
  //    two, summed first + second after (as float32's WeightGrad).
  // 4. The bias gradient: the chunks' sums in order.
  // One region instead of three or four: a GPT-128 layer's products are
  // ~100 us each, where every extra fork and join costs a few.
  g2 = contiguous(g2);
  Tensor x2 = reshape(x, {R, I});
  if (!blas_layout(R, I, x2.stride(0), x2.stride(1)).ok) x2 = contiguous(x2);
  const BlasMat mx = blas_layout(R, I, x2.stride(0), x2.stride(1));
  Tensor wc = contiguous(w);
  const float* pg = g2.data<float>();
  thread_local alloc::LineVector<uint32_t> dxa, dxb, dwa, dwb, dwa2, dwb2;
  if (need_x) {
    if (into) {
      r.x = x_sum;
    } else {
      Shape xs = g.shape();
      xs.back() = I;
      r.x = Tensor::empty(xs, DType::f32);
    }
  }
  // dX [R, I] = dY [R, O] W [O, I]; dW [O, I] = dY^T x, dY^T read from dY as stored.
  Bf16Product dx(false, false, R, I, O, pg, O, wc.data<float>(), I, need_x ? r.x.data<float>() : nullptr, I,
                 into ? 1.0f : 0.0f, nullptr);
  if (need_x) dx.bind(bf16_buffer(dxa, dx.a_words()), bf16_buffer(dxb, dx.b_words()));
  // dW in two halves of the tokens, as float32's WeightGrad: dw[0] over
  // [0, R/2) into dW, dw[1] over [R/2, R) into `second`, then dW += second.
  r.w = Tensor::empty({O, I}, DType::f32);
  const int64_t h = token_split(R, O, I);
  const bool halves = h < R;
  Tensor second = halves ? Tensor::empty({O, I}, DType::f32) : Tensor();
  const float* px = x2.data<float>();
  Bf16Product dw[2] = {
      Bf16Product(true, mx.trans, O, I, h, pg, O, px, mx.ld, r.w.data<float>(), I, 0.0f, nullptr),
      Bf16Product(true, mx.trans, O, I, R - h, pg + h * O, O, mx.trans ? px + h : px + h * mx.ld, mx.ld,
                  halves ? second.data<float>() : nullptr, I, 0.0f, nullptr)};
  dw[0].bind(bf16_buffer(dwa, dw[0].a_words()), bf16_buffer(dwb, dw[0].b_words()));
  if (halves) dw[1].bind(bf16_buffer(dwa2, dw[1].a_words()), bf16_buffer(dwb2, dw[1].b_words()));
  const int64_t per_half = dw[0].count(), nw = halves ? 2 * per_half : per_half;
  float *pw = r.w.data<float>(), *p2 = halves ? second.data<float>() : nullptr;
  const int64_t nx = need_x ? dx.count() : 0, nslabs = nx + nw;
  const int64_t work = std::max(chunks, nslabs);
  const int nt = omp_in_parallel() ? 1 : static_cast<int>(std::min<int64_t>(omp_get_max_threads(), work));
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    if (need_b) {
#pragma omp for schedule(static) nowait
      for (int64_t c = 0; c < chunks; ++c) bias_chunk(pg, R, O, chunks, c, part);
    }
    if (need_x) dx.shared(t, n);
    // Each half's shared operand packed whole by the thread that multiplies it.
    if (!halves) {
      dw[0].shared(t, n);
    } else if (n == 1) {
      dw[0].shared(0, 1);
      dw[1].shared(0, 1);
    } else if (t < 2) {
      dw[t].shared(0, 1);
    }
#pragma omp barrier
    // dX's row slabs in order over the threads, as every row-split op
    // (element-wise, LayerNorm, the forward's slabs) splits its rows: the
    // LayerNorm or GELU backward that reads dX next then finds its rows in
    // its own core's cache, not modified in the other's. dW's slabs, which
    // nothing reads by rows soon, balance the load after them. Against
    // handing all slabs out one by one (in-process A/B, 8 alternations,
    // bf16): the backward 223 -> 203 us (GPT-128 768 x 128 x 128) and
    // 2531 -> 2332 us (GPT-256 3072 x 256 x 256), the next element-wise op
    // on dX 3-11% faster.
    // dW in halves: each core packs and reads only its own half of the
    // tokens, as the row-split ops gave them (with one product, both cores
    // read all of x's packed pairs, half of them packed in the other core's
    // cache). A whole training step, alternating the two step by step in
    // one process: GPT-128 bf16 10.9-12.0% faster, GPT-256 bf16 1.9-3.8%.
#pragma omp for schedule(static) nowait
    for (int64_t i = 0; i < nx; ++i) dx.slab(i);
    if (!halves) {
#pragma omp for schedule(dynamic, 1)
      for (int64_t i = 0; i < nw; ++i) dw[0].slab(i);
    } else {
#pragma omp for schedule(static)
      for (int64_t i = 0; i < nw; ++i) dw[i / per_half].slab(i % per_half);
#pragma omp for schedule(static)
      for (int64_t o = 0; o < O; ++o)
        for (int64_t c = 0; c < I; ++c) pw[o * I + c] += p2[o * I + c];
    }
    if (need_b) {
#pragma omp for schedule(static)
      for (int64_t o0 = 0; o0 < O; o0 += 32) bias_from_chunks(part, chunks, O, o0, std::min(O, o0 + 32), pb);
    }
  }
  if (scale_x) mul_(r.x, dx_mul);
  return r;
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& add) {
  check_defined(x, "linear");
  check_defined(w, "linear");
  if (x.dim() < 1 || w.dim() != 2 || x.size(-1) != w.size(1) || (b.defined() && (b.dim() != 1 || b.size(0) != w.size(0))))
    fail("linear: expected x [.., I], weight [O, I] and bias [O], got x {}, weight {}, bias {}", shape_str(x.shape()),
         shape_str(w.shape()), b.defined() ? shape_str(b.shape()) : "undefined");
  if (x.dtype() != w.dtype() || (b.defined() && b.dtype() != x.dtype()) || !x.is_floating())
    fail("linear: x, weight and bias must share a floating dtype, got {}, {}, {}", dtype_name(x.dtype()),
         dtype_name(w.dtype()), b.defined() ? dtype_name(b.dtype()) : "-");
  const int64_t I = x.size(-1), O = w.size(0);
  int64_t R = 1;  // counted, not reshape's -1: that cannot be solved when I is 0
  for (int64_t d = 0; d + 1 < x.dim(); ++d) R *= x.size(d);
  Tensor x2 = reshape(x, {R, I});
  if (!blas_layout(x2.size(0), I, x2.stride(0), x2.stride(1)).ok) x2 = contiguous(x2);
  Tensor wt = blas_layout(I, O, w.stride(1), w.stride(0)).ok ? w : contiguous(w);
  Shape out_shape = x.shape();
  out_shape.back() = O;
  if (add.defined() && (add.shape() != out_shape || add.dtype() != x.dtype()))
    fail("linear: the tensor to add is {} {}, expected the output's {} {}", shape_str(add.shape()),
         dtype_name(add.dtype()), shape_str(out_shape), dtype_name(x.dtype()));
  const Tensor addc = add.defined() ? contiguous(add) : Tensor();
  Tensor y = Tensor::empty(out_shape, x.dtype());
  if (x.dtype() == DType::f64) linear_impl<double>(x2, wt, b, y, addc);
  else linear_impl<float>(x2, wt, b, y, addc);
  return y;
}

}  // namespace heed::kernel

namespace heed {

void set_num_threads(int n) {
  if (n < 1) fail("set_num_threads: expected a thread count >= 1, got {}", n);
  kernel::openblas_single_threaded();
  omp_set_num_threads(n);  // oneDNN uses OpenMP, so this covers it
  detail::pace_set_cap(n);
}

// The count asked for; regions may open with fewer while the cores are busy.
int num_threads() { return detail::pace_cap(); }

// bf16 runs on heed's own kernels (bf16::gemm: AVX512-BF16's vdpbf16ps),
// so it needs that instruction set, and heed's cap (HEED_CPU_ISA,
// set_cpu_isa) at avx512.
std::string bf16_unsupported_reason(bool advice) {
  kernel::apply_isa_settings();
  const bool has = kernel::bf16::supported();
  if (has && heed::cpu_isa() == CpuIsa::avx512) return "";
  if (has)
    return fmt::format(
        "bf16 needs a CPU with AVX512-BF16; this one has it, but heed's instruction set is capped at {} (HEED_CPU_ISA={} "
        "or set_cpu_isa){}",
        heed::cpu_isa() == CpuIsa::avx2 ? "AVX2" : "baseline x86-64", heed::cpu_isa_name(),
        advice ? ": use float32, or lift the cap" : "");
  const char* name = heed::cpu_isa_max() == CpuIsa::avx512 ? "AVX-512 without BF16"
                     : heed::cpu_isa_max() == CpuIsa::avx2 ? "AVX2"
                                                           : "an older instruction set";
  const std::string cap = heed::cpu_isa() == heed::cpu_isa_max()
                              ? std::string()
                              : fmt::format(" (and heed is capped at {})",
                                            heed::cpu_isa() == CpuIsa::avx2 ? "AVX2" : "baseline x86-64");
  return fmt::format(
      "bf16 needs a CPU with AVX512-BF16, and this one runs {}{}: its products would be emulated at a fraction of "
      "float32's speed{}",
      name, cap, advice ? "; use float32" : "");
}

void set_precision(Precision p) {
  if (p == Precision::bf16) {
    const std::string why = bf16_unsupported_reason();
    if (!why.empty()) fail("set_precision: {}", why);
  }
  kernel::g_bf16.store(p == Precision::bf16);
}

Precision precision() { return kernel::g_bf16.load() ? Precision::bf16 : Precision::f32; }

const char* precision_name(Precision p) { return p == Precision::bf16 ? "bf16" : "f32"; }

Precision parse_precision(const std::string& name) {
  if (name == "f32" || name == "float32") return Precision::f32;
  if (name == "bf16" || name == "bfloat16") return Precision::bf16;
  fail("precision: expected f32 or bf16, got '{}'", name);
}

std::string backend_info() {
  int par = openblas_get_parallel();
  const char* mode = par == 0 ? "sequential" : par == 1 ? "pthreads" : par == 2 ? "OpenMP" : "unknown";
  const dnnl_version_t* v = dnnl::version();
  const char* rt = v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP" : v->cpu_runtime == DNNL_RUNTIME_SEQ ? "sequential" : "other";
  // Which algorithm the 5-tap convolutions use changes float32 rounding, so
  // run logs record it with the rest (not the instruction set: both of
  // Winograd's give the same bits).
  const std::string conv = !heed::conv1d_winograd()                ? "direct (switched off)"
                           : kernel::winograd_conv1d_supported() ? fmt::format("Winograd F(4,5) {}", kernel::winograd_conv1d_isa())
                                                                 : std::string("direct (no AVX2)");
  // Which GEMM runs float32 products and convolutions (heed's, the same
  // bits on AVX2 and AVX-512, or the libraries' without AVX2).
  const bool own = kernel::block::sgemm_for(heed::cpu_isa()) != nullptr;
  const std::string isa = heed::cpu_isa_name() + (heed::cpu_isa() != heed::cpu_isa_max()
                                                      ? fmt::format(" (capped; CPU has {})", heed::cpu_isa_name(heed::cpu_isa_max()))
                                                      : std::string());
  return fmt::format(
      "OpenBLAS [{}] threading={}; oneDNN {}.{}.{} threading={} isa={}; OpenMP threads={} (adaptive {}); heed isa={}; "
      "conv1d 5-tap: {}; float32 products: {}",
      openblas_get_config(), mode, v->major, v->minor, v->patch, rt, kernel::onednn_isa_name(), num_threads(),
      adaptive_threads() ? "on" : "off", isa, conv,
      precision() == Precision::bf16 ? "bf16 operands, float32 accumulation (heed bf16 GEMM)"
      : own                          ? "float32 (heed GEMM)"
                                     : "float32 (oneDNN, OpenBLAS)");
}

}  // namespace heed
