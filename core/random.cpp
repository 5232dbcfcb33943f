// core/random.cpp: Philox4x32-10, the Generator, and the tensor fills. The
// stream layout (which block each draw reads) is described in core/random.h.
#include "core/random.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#include <limits>
#include <numbers>


#include "core/error.h"
#include "core/kernels.h"

namespace heed {

// ---- Philox4x32-10 ----
// Salmon et al., SC'11, and the Random123 reference code: each round
// multiplies two of the four words by fixed odd constants, permutes the
// halves, and mixes in the key; between rounds the key is bumped by Weyl
// constants (the fractional parts of the golden ratio and of sqrt(3), in
// 32-bit fixed point).
namespace {
constexpr uint32_t kPhiloxM0 = 0xD2511F53, kPhiloxM1 = 0xCD9E8D57;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9, kPhiloxW1 = 0xBB67AE85;

inline std::array<uint32_t, 4> philox_round(const std::array<uint32_t, 4>& c, const std::array<uint32_t, 2>& k) {
  const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c[0];
  const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c[2];
  return {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
          static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
}
}  // namespace

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      key[0] += kPhiloxW0;
      key[1] += kPhiloxW1;
    }
    counter = philox_round(counter, key);
  }
  return counter;
}

// ---- turning 128 bits into one value ----
// Shared by the scalar draws and the fills, so g.uniform() equals the first
// element of a float64 rand() from the same state, and so on.
namespace {

struct Words {
  uint64_t w0, w1;
};

inline Words words(const std::array<uint32_t, 4>& b) {
  return {b[0] | static_cast<uint64_t>(b[1]) << 32, b[2] | static_cast<uint64_t>(b[3]) << 32};
}

// [0, 1) from the top 53 bits: every value is a multiple of 2^-53.
inline double unit53(uint64_t w) { return static_cast<double>(w >> 11) * 0x1.0p-53; }
// [0, 1) from the top 24 bits: exact in float, so float U[0,1) never rounds to 1.
inline double unit24(uint64_t w) { return static_cast<double>(w >> 40) * 0x1.0p-24; }

// Box-Muller (Box & Muller, 1958): u1 in (0, 1] keeps log finite.
inline double box_muller(Words w) {
  const double u1 = static_cast<double>((w.w0 >> 11) + 1) * 0x1.0p-53;
  const double u2 = unit53(w.w1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// Unbiased integer in [0, range) (range >= 1) by Lemire's multiply-shift with
// rejection ("Fast random integer generation in an interval", ACM TOMACS
// 2019). A 64-bit word w maps to floor(w * range / 2^64); words whose low
// product falls below 2^64 mod range are rejected, which leaves exactly
// floor(2^64 / range) words per outcome. Rejections continue with w1, then
// with lanes 1, 2, ... of the same block, so element i never touches another
// element's blocks.
struct IntRange {
  uint64_t range;      // hi - lo, >= 1
  uint64_t threshold;  // 2^64 mod range
  explicit IntRange(uint64_t r) : range(r), threshold((0 - r) % r) {}
};

inline bool lemire(uint64_t w, const IntRange& r, uint64_t& out) {
  // unsigned __int128 (GCC and Clang) gives the full 64x64 -> 128 product.
  const unsigned __int128 m = static_cast<unsigned __int128>(w) * r.range;
  if (static_cast<uint64_t>(m) < r.threshold) return false;
  out = static_cast<uint64_t>(m >> 64);
  return true;
}

inline uint64_t bounded(const Generator& g, uint64_t blk, const IntRange& r) {
  uint64_t out = 0;
  for (uint32_t lane = 0;; ++lane) {
    Words w = words(g.block(blk, lane));
    if (lemire(w.w0, r, out) || lemire(w.w1, r, out)) return out;
  }
}

inline int64_t add_offset(int64_t lo, uint64_t k) {
  // Wraps in unsigned arithmetic so ranges spanning all of int64 work.
  return static_cast<int64_t>(static_cast<uint64_t>(lo) + k);
}

IntRange int_range(int64_t lo, int64_t hi, const char* op) {
  if (lo >= hi) fail("{}: expected lo < hi, got lo={} hi={}", op, lo, hi);
  return IntRange(static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo));
}

}  // namespace

// ---- Generator ----
std::array<uint32_t, 4> Generator::block(uint64_t blk, uint32_t lane) const {
  return philox4x32_10({static_cast<uint32_t>(blk), static_cast<uint32_t>(blk >> 32), lane, 0},
                       {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)});
}

namespace {
// Lanes of 64 bits, each holding a 32-bit word of one block in its low half,
// and their 32 x 32 -> 64-bit products of the low halves: one vpmuludq per
// vector (from masked factors GCC made the slower vpmullq). The widest
// vector the build targets; integer arithmetic, so every width gives the
// same bits. Written this way (rounds interleaved over kChains vectors,
// counters built in vectors, the high halves left until the end), a Zen 5
// draws a mask element in 0.81 ns against 2.6-3.5 ns one vector at a time.
#if defined(__AVX512F__)
using U64V = uint64_t __attribute__((vector_size(64)));
#elif defined(__AVX2__)
using U64V = uint64_t __attribute__((vector_size(32)));
#else
using U64V = uint64_t __attribute__((vector_size(16)));
#endif
inline U64V mul32(U64V a, uint32_t m) {
#if defined(__AVX512F__)
  return reinterpret_cast<U64V>(_mm512_maskz_mul_epu32(0xff, reinterpret_cast<__m512i>(a), _mm512_set1_epi64(m)));
#elif defined(__AVX2__)
  return reinterpret_cast<U64V>(_mm256_mul_epu32(reinterpret_cast<__m256i>(a), _mm256_set1_epi64x(m)));
#else
  return (a & 0xffffffffu) * (static_cast<uint64_t>(m) & 0xffffffffu);
#endif
}
constexpr int kWidth = static_cast<int>(sizeof(U64V) / sizeof(uint64_t));
// Vectors whose rounds run interleaved: one vector's ten rounds are a chain
// of dependent multiplies, which alone would leave the multiplier idle
// most of the time.
constexpr int kChains = Generator::kBatch / kWidth;
static_assert(Generator::kBatch % kWidth == 0);

// w0 of lane 0 of blocks first .. first + kBatch - 1, a vector of kWidth
// blocks per chain: the operations of philox4x32_10 on each block.
inline void philox_w0(uint64_t first, uint64_t seed, U64V (&w0)[kChains]) {
  const uint64_t lo32 = 0xffffffffu;
  U64V iota;
  for (int j = 0; j < kWidth; ++j) iota[j] = static_cast<uint64_t>(j);
  U64V c0[kChains], c1[kChains], c2[kChains], c3[kChains];  // counter {lo32(b), hi32(b), lane 0, 0}
  for (int v = 0; v < kChains; ++v) {
    const U64V b = (first + static_cast<uint64_t>(v * kWidth)) + iota;
    c0[v] = b & lo32;
    c1[v] = b >> 32;
    c2[v] = U64V{};
    c3[v] = U64V{};
  }
  uint64_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#pragma GCC unroll 10
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 = (k0 + kPhiloxW0) & lo32;
      k1 = (k1 + kPhiloxW1) & lo32;
    }
    // Only each lane's low 32 bits are the block's words: mul32 reads no
    // more, and the high ones are dropped at the end.
    for (int v = 0; v < kChains; ++v) {
      const U64V p0 = mul32(c0[v], kPhiloxM0), p1 = mul32(c2[v], kPhiloxM1);
      c0[v] = (p1 >> 32) ^ c1[v] ^ k0;
      c1[v] = p1;
      c2[v] = (p0 >> 32) ^ c3[v] ^ k1;
      c3[v] = p0;
    }
  }
  for (int v = 0; v < kChains; ++v) w0[v] = (c0[v] & lo32) | c1[v] << 32;
}
}  // namespace

void Generator::blocks_w0(uint64_t first, int n, uint64_t* w0) const {
  U64V w[kChains];
  for (int j = 0; j < n; j += kBatch) {
    philox_w0(first + static_cast<uint64_t>(j), seed_, w);
    const int m = std::min(kBatch, n - j);
    if (m == kBatch) std::memcpy(w0 + j, w, sizeof w);
    else
      for (int i = 0; i < m; ++i) w0[j + i] = w[i / kWidth][i % kWidth];
  }
}

template <class T>
void Generator::keep_mask(uint64_t first, int64_t n, double keep, T kept, T* z) const {
  // unit53(w) < keep, in integers: unit53(w) is (w >> 11) 2^-53 and keep
  // 2^53 is exact, so the test is (w >> 11) < ceil(keep 2^53).
  const uint64_t below = static_cast<uint64_t>(std::ceil(std::clamp(keep, 0.0, 1.0) * 0x1.0p53));
  U64V w[kChains];
  for (int64_t j = 0; j < n; j += kBatch) {
    philox_w0(first + static_cast<uint64_t>(j), seed_, w);
    const int64_t m = std::min<int64_t>(kBatch, n - j);
    uint64_t u[kBatch];
    std::memcpy(u, w, sizeof w);
    if (m == kBatch)
      for (int i = 0; i < kBatch; ++i) z[j + i] = (u[i] >> 11) < below ? kept : T(0);
    else
      for (int64_t i = 0; i < m; ++i) z[j + i] = (u[i] >> 11) < below ? kept : T(0);
  }
}
template void Generator::keep_mask<float>(uint64_t, int64_t, double, float, float*) const;
template void Generator::keep_mask<double>(uint64_t, int64_t, double, double, double*) const;

std::vector<uint64_t> Generator::state() const { return {seed_, offset_}; }

void Generator::set_batch_shard(int rank, int processes) {
  if (processes < 1 || rank < 0 || rank >= processes)
    fail("Generator::set_batch_shard: expected 0 <= rank < processes, got rank {} of {}", rank, processes);
  shard_rank_ = rank;
  shard_processes_ = processes;
}

void Generator::set_state(const std::vector<uint64_t>& s) {
  if (s.size() != 2)
    fail("Generator::set_state: expected 2 values {{seed, offset}} as returned by state(), got {}", s.size());
  seed_ = s[0];
  offset_ = s[1];
}

Tensor Generator::state_tensor() const {
  // uint64 -> int64 is modular in C++20, and back again below: bits survive.
  return Tensor::from_i64({static_cast<int64_t>(seed_), static_cast<int64_t>(offset_)}, {2});
}

void Generator::set_state_tensor(const Tensor& t) {
  check_dtype(t, DType::i64, "Generator::set_state_tensor");
  if (t.shape() != Shape{2})
    fail("Generator::set_state_tensor: expected shape [2] {{seed, offset}} as returned by state_tensor(), got {}",
         shape_str(t.shape()));
  const int64_t* p = t.data<int64_t>();
  set_state({static_cast<uint64_t>(p[0]), static_cast<uint64_t>(p[t.stride(0)])});
}

uint64_t Generator::next_u64() { return words(block(reserve(1))).w0; }

double Generator::uniform() { return unit53(words(block(reserve(1))).w0); }

double Generator::normal() { return box_muller(words(block(reserve(1)))); }

int64_t Generator::randint(int64_t lo, int64_t hi) {
  IntRange r = int_range(lo, hi, "Generator::randint");
  return add_offset(lo, bounded(*this, reserve(1), r));
}

Generator& default_generator() {
  static Generator g(0);
  return g;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

// ---- factories ----
namespace {
Generator& or_default(Generator* g) { return g ? *g : default_generator(); }
}  // namespace

Tensor randn(const Shape& shape, Generator* g, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  kernel::normal_(t, 0.0, 1.0, or_default(g));
  return t;
}

Tensor rand(const Shape& shape, Generator* g, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  kernel::uniform_(t, 0.0, 1.0, or_default(g));
  return t;
}

Tensor randint(int64_t lo, int64_t hi, const Shape& shape, Generator* g) {
  Tensor t = Tensor::empty(shape, DType::i64);
  kernel::randint_(t, lo, hi, or_default(g));
  return t;
}

}  // namespace heed

namespace heed::kernel {

namespace {

// Writes value(i) to element i (row-major order) of t, for i in [0, numel).
// Contiguous tensors are one flat loop; other views are cut into fixed chunks
// of the logical index, each chunk locating its first element once and then
// stepping an odometer. Either way element i gets value(i) whichever thread
// runs it.
template <class T, class F>
void fill_each(const Tensor& t, F&& value) {
  const int64_t n = t.numel();
  if (n == 0) return;
  t.bump_version();
  T* base = t.data<T>();
  if (t.is_contiguous()) {
#pragma omp parallel for if (n > kParallelGrain)
    for (int64_t i = 0; i < n; ++i) base[i] = value(i);
    return;
  }
  const Shape& shape = t.shape();
  const Shape& strides = t.strides();
  const int64_t rank = t.dim();
  constexpr int64_t kChunk = 4096;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for if (n > kParallelGrain)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t start = c * kChunk, end = std::min(n, start + kChunk);
    std::vector<int64_t> idx(static_cast<size_t>(rank));
    int64_t off = 0, r = start;
    for (int64_t d = rank - 1; d >= 0; --d) {
      idx[d] = r % shape[d];
      r /= shape[d];
      off += idx[d] * strides[d];
    }
    for (int64_t i = start; i < end; ++i) {
      base[off] = value(i);
      for (int64_t d = rank - 1; d >= 0; --d) {  // step the odometer
        off += strides[d];
        if (++idx[d] < shape[d]) break;
        off -= idx[d] * strides[d];
        idx[d] = 0;
      }
    }
  }
}

// fill_each for a value that needs only w0 of lane 0 of element i's block
// (first + i): a contiguous tensor takes its blocks kBatch at a time
// (Generator::blocks_w0), the same bits as one by one.
template <class T, class F>
void fill_w0(const Tensor& t, const Generator& g, uint64_t first, F&& value) {
  constexpr int B = Generator::kBatch;
  const int64_t n = t.numel();
  if (n == 0 || !t.is_contiguous()) {
    fill_each<T>(t, [&](int64_t i) { return value(words(g.block(first + static_cast<uint64_t>(i))).w0); });
    return;
  }
  t.bump_version();
  T* base = t.data<T>();
  const int64_t batches = (n + B - 1) / B;
#pragma omp parallel for if (n > kParallelGrain)
  for (int64_t b = 0; b < batches; ++b) {
    uint64_t w[B];
    const int64_t i0 = b * B;
    const int m = static_cast<int>(std::min<int64_t>(B, n - i0));
    g.blocks_w0(first + static_cast<uint64_t>(i0), m, w);
    for (int j = 0; j < m; ++j) base[i0 + j] = value(w[j]);
  }
}

// Checked before a fill claims its blocks, so a rejected call leaves the
// generator untouched.
void check_writable(const Tensor& t, const char* op) {
  check_defined(t, op);
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.shape()[d] > 1 && t.strides()[d] == 0)
      fail("{}: cannot write random values into an expanded view (dim {} has size {} and stride 0); "
           "fill a contiguous tensor instead",
           op, d, t.shape()[d]);
}

void check_finite(double v, const char* what, const char* op) {
  if (!std::isfinite(v)) fail("{}: expected a finite {}, got {}", op, what, v);
}

}  // namespace

void uniform_(const Tensor& t, double lo, double hi, Generator& g) {
  check_writable(t, "uniform_");
  check_finite(lo, "lo", "uniform_");
  check_finite(hi, "hi", "uniform_");
  if (lo > hi) fail("uniform_: expected lo <= hi, got lo={} hi={}", lo, hi);
  // float gets 24 random bits (all a float in [0, 1) can hold), double 53.
  // Rounding lo + (hi - lo) * u to T can still land on hi for wide ranges;
  // those rare values move to the largest T below hi, keeping [lo, hi).
  auto run = [&]<class T>(T) {
    const T top = lo < hi ? std::nextafter(static_cast<T>(hi), static_cast<T>(lo)) : static_cast<T>(hi);
    const uint64_t first = g.reserve(t.numel());
    fill_w0<T>(t, g, first, [&](uint64_t w) {
      const T v = static_cast<T>(lo + (hi - lo) * (std::is_same_v<T, float> ? unit24(w) : unit53(w)));
      return lo < hi && v > top ? top : v;
    });
  };
  switch (t.dtype()) {
    case DType::f32: run(float{}); break;
    case DType::f64: run(double{}); break;
    case DType::i64: fail("uniform_: expected a float32 or float64 tensor, got int64 (use randint_)");
  }
}

void normal_(const Tensor& t, double mean, double std, Generator& g) {
  check_writable(t, "normal_");
  check_finite(mean, "mean", "normal_");
  check_finite(std, "std", "normal_");
  if (std < 0) fail("normal_: expected std >= 0, got {}", std);
  auto run = [&]<class T>(T) {
    const uint64_t first = g.reserve(t.numel());
    fill_each<T>(t, [&](int64_t i) {
      return static_cast<T>(mean + std * box_muller(words(g.block(first + static_cast<uint64_t>(i)))));
    });
  };
  switch (t.dtype()) {
    case DType::f32: run(float{}); break;
    case DType::f64: run(double{}); break;
    case DType::i64: fail("normal_: expected a float32 or float64 tensor, got int64");
  }
}

void dropout_mask_(const Tensor& t, double p, Generator& g) {
  check_writable(t, "dropout_mask_");
  if (!(p >= 0.0 && p < 1.0)) fail("dropout_mask_: expected 0 <= p < 1, got {}", p);
  if (!t.is_contiguous()) fail("dropout_mask_: expected a contiguous tensor, got strides {}", shape_str(t.strides()));
  auto run = [&]<class T>(T) {
    const int64_t n = t.numel();
    const uint64_t first = g.reserve_batch(static_cast<uint64_t>(n));  // a mask over a batch's rows
    if (n == 0) return;
    t.bump_version();
    T* z = t.data<T>();
    const T kept = static_cast<T>(1.0 / (1.0 - p));
    constexpr int64_t kChunk = 4096;  // a multiple of Generator::kBatch
    const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for if (n > kParallelGrain)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t at = c * kChunk;
      g.keep_mask<T>(first + static_cast<uint64_t>(at), std::min(kChunk, n - at), 1.0 - p, kept, z + at);
    }
  };
  switch (t.dtype()) {
    case DType::f32: run(float{}); break;
    case DType::f64: run(double{}); break;
    case DType::i64: fail("dropout_mask_: expected a float32 or float64 tensor, got int64");
  }
}

void bernoulli_(const Tensor& t, double p, Generator& g) {
  check_writable(t, "bernoulli_");
  if (!(p >= 0.0 && p <= 1.0)) fail("bernoulli_: expected 0 <= p <= 1, got {}", p);
  auto run = [&]<class T>(T) {
    const uint64_t first = g.reserve(t.numel());
    fill_w0<T>(t, g, first, [&](uint64_t w) { return static_cast<T>(unit53(w) < p ? 1 : 0); });
  };
  switch (t.dtype()) {
    case DType::f32: run(float{}); break;
    case DType::f64: run(double{}); break;
    case DType::i64: run(int64_t{}); break;
  }
}

void randint_(const Tensor& t, int64_t lo, int64_t hi, Generator& g) {
  check_writable(t, "randint_");
  const IntRange r = int_range(lo, hi, "randint_");
  if (t.is_floating()) {
    // Beyond 2^digits a float type skips integers, and the draw would not be
    // uniform over [lo, hi) any more.
    const int digits = t.dtype() == DType::f32 ? std::numeric_limits<float>::digits
                                               : std::numeric_limits<double>::digits;
    const int64_t limit = int64_t{1} << digits;
    if (lo < -limit || hi > limit)
      fail("randint_: range [{}, {}) is not exactly representable in {}; expected |lo|, |hi| <= 2^{}", lo, hi,
           dtype_name(t.dtype()), digits);
  }
  auto run = [&]<class T>(T) {
    const uint64_t first = g.reserve(t.numel());
    fill_each<T>(t, [&](int64_t i) {
      return static_cast<T>(add_offset(lo, bounded(g, first + static_cast<uint64_t>(i), r)));
    });
  };
  switch (t.dtype()) {
    case DType::f32: run(float{}); break;
    case DType::f64: run(double{}); break;
    case DType::i64: run(int64_t{}); break;
  }
}

}  // namespace heed::kernel
