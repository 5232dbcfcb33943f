// core/quantize.cpp: the quantizers of core/quantize.h, and the small dense
// linear algebra they need (Householder QR, least squares), all in float64.
#include "core/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/kernels.h"
#include "core/random.h"

namespace heed::quant {

// ---- the method table ----

namespace {
constexpr const char* kMethodNames[] = {
#define HEED_QUANT_NAME(m) #m,
    HEED_QUANT_METHODS(HEED_QUANT_NAME)
#undef HEED_QUANT_NAME
};
constexpr int kMethods = static_cast<int>(sizeof(kMethodNames) / sizeof(kMethodNames[0]));
static_assert(static_cast<int>(Method::lplr) + 1 == kMethods, "every method has a name");
}  // namespace

const char* method_name(Method m) {
  const int i = static_cast<int>(m);
  return i >= 0 && i < kMethods ? kMethodNames[i] : "?";
}

std::vector<std::string> method_names() { return {std::begin(kMethodNames), std::end(kMethodNames)}; }

Method method_from_name(const std::string& name) {
  for (int i = 0; i < kMethods; ++i)
    if (name == kMethodNames[i]) return static_cast<Method>(i);
  fail("quantize: unknown method '{}' (expected one of: {})", name, fmt::join(method_names(), ", "));
}

const char* range_name(Range r) { return r == Range::row ? "row" : "tensor"; }

namespace {

// ---- bit packing: fields of 1..32 bits back to back in 64-bit words, low bits first ----

class BitWriter {
 public:
  void put(uint64_t v, int nbits) {
    if (nbits == 0) return;
    v &= nbits == 64 ? ~uint64_t{0} : (uint64_t{1} << nbits) - 1;  // a field never spills into the next
    const int64_t word = bit_ / 64;
    const int shift = static_cast<int>(bit_ % 64);
    if (static_cast<int64_t>(words_.size()) <= word + 1) words_.resize(static_cast<size_t>(word + 2), 0);
    words_[static_cast<size_t>(word)] |= v << shift;
    if (shift + nbits > 64) words_[static_cast<size_t>(word + 1)] |= v >> (64 - shift);
    bit_ += nbits;
  }
  std::vector<uint64_t> finish() {
    words_.resize(static_cast<size_t>((bit_ + 63) / 64));
    return std::move(words_);
  }

 private:
  std::vector<uint64_t> words_;
  int64_t bit_ = 0;
};

class BitReader {
 public:
  explicit BitReader(const std::vector<uint64_t>& w) : w_(w) {}
  uint64_t get(int nbits) {
    if (nbits == 0) return 0;
    const int64_t word = bit_ / 64;
    const int shift = static_cast<int>(bit_ % 64);
    uint64_t v = w_[static_cast<size_t>(word)] >> shift;
    if (shift + nbits > 64) v |= w_[static_cast<size_t>(word + 1)] << (64 - shift);
    bit_ += nbits;
    return nbits == 64 ? v : v & ((uint64_t{1} << nbits) - 1);
  }

 private:
  const std::vector<uint64_t>& w_;
  int64_t bit_ = 0;
};

int64_t words_for(int64_t bits) { return (bits + 63) / 64; }

// ---- dense linear algebra in float64 (row-major) ----

// Thin QR of a [m, k] (m >= k) by Householder reflections (Golub & Van Loan,
// Matrix Computations, 4th ed., algorithm 5.2.1): q [m, k] with orthonormal
// columns and r [k, k] upper triangular with a non-negative diagonal. Serial,
// so the bits do not depend on the thread count.
//
// A column left with a norm below 1e-12 of the largest column's (a
// rank-deficient a: LPLR's sketch of a low-rank matrix) gets no reflection,
// as a zero column: it is rounding noise, and a reflection built from it
// could overflow (2 / |v|^2 of a norm near 1e-160 is infinite) and fill q
// with NaN. q keeps orthonormal columns either way, and least_squares drops
// such a pivot.
void householder_qr(const double* a, int64_t m, int64_t k, std::vector<double>& q, std::vector<double>& r) {
  std::vector<double> A(a, a + m * k);
  std::vector<std::vector<double>> vs(static_cast<size_t>(k));
  std::vector<double> beta(static_cast<size_t>(k), 0.0), w(static_cast<size_t>(k));
  auto at = [&](std::vector<double>& M, int64_t i, int64_t c) -> double& { return M[static_cast<size_t>(i * k + c)]; };
  double largest = 0;
  for (int64_t c = 0; c < k; ++c) {
    double n2 = 0;
    for (int64_t i = 0; i < m; ++i) n2 += at(A, i, c) * at(A, i, c);
    largest = std::max(largest, std::sqrt(n2));
  }
  for (int64_t j = 0; j < k; ++j) {
    double norm2 = 0;
    for (int64_t i = j; i < m; ++i) norm2 += at(A, i, j) * at(A, i, j);
    const double norm = std::sqrt(norm2);
    if (!(norm > 1e-12 * largest)) continue;  // a zero column, or noise: no reflection
    std::vector<double>& v = vs[static_cast<size_t>(j)];
    v.resize(static_cast<size_t>(m - j));
    for (int64_t i = j; i < m; ++i) v[static_cast<size_t>(i - j)] = at(A, i, j);
    const double alpha = at(A, j, j) > 0 ? -norm : norm;
    v[0] -= alpha;
    double vn2 = 0;
    for (double x : v) vn2 += x * x;
    if (vn2 == 0) continue;
    beta[static_cast<size_t>(j)] = 2.0 / vn2;
    std::fill(w.begin() + j, w.end(), 0.0);
    for (int64_t i = j; i < m; ++i) {
      const double vi = v[static_cast<size_t>(i - j)];
      const double* row = &at(A, i, 0);
      for (int64_t c = j; c < k; ++c) w[static_cast<size_t>(c)] += vi * row[c];
    }
    for (int64_t i = j; i < m; ++i) {
      const double f = beta[static_cast<size_t>(j)] * v[static_cast<size_t>(i - j)];
      double* row = &at(A, i, 0);
      for (int64_t c = j; c < k; ++c) row[c] -= f * w[static_cast<size_t>(c)];
    }
  }
  r.assign(static_cast<size_t>(k * k), 0.0);
  for (int64_t i = 0; i < k; ++i)
    for (int64_t c = i; c < k; ++c) r[static_cast<size_t>(i * k + c)] = at(A, i, c);
  // Q = H_0 H_1 ... H_{k-1} [I_k; 0], the reflections applied last to first.
  q.assign(static_cast<size_t>(m * k), 0.0);
  for (int64_t i = 0; i < k; ++i) at(q, i, i) = 1.0;
  for (int64_t j = k - 1; j >= 0; --j) {
    const double b = beta[static_cast<size_t>(j)];
    if (b == 0) continue;
    const std::vector<double>& v = vs[static_cast<size_t>(j)];
    std::fill(w.begin(), w.end(), 0.0);
    for (int64_t i = j; i < m; ++i) {
      const double vi = v[static_cast<size_t>(i - j)];
      const double* row = &at(q, i, 0);
      for (int64_t c = 0; c < k; ++c) w[static_cast<size_t>(c)] += vi * row[c];
    }
    for (int64_t i = j; i < m; ++i) {
      const double f = b * v[static_cast<size_t>(i - j)];
      double* row = &at(q, i, 0);
      for (int64_t c = 0; c < k; ++c) row[c] -= f * w[static_cast<size_t>(c)];
    }
  }
  for (int64_t j = 0; j < k; ++j) {
    if (r[static_cast<size_t>(j * k + j)] >= 0) continue;
    for (int64_t i = 0; i < m; ++i) at(q, i, j) = -at(q, i, j);
    for (int64_t c = j; c < k; ++c) r[static_cast<size_t>(j * k + c)] = -r[static_cast<size_t>(j * k + c)];
  }
}

Tensor f64_contiguous(const Tensor& t) { return kernel::contiguous(kernel::to_dtype(t, DType::f64)); }

// The orthonormal factor of a [m, k] (m >= k), f64 [m, k].
Tensor orthonormal_basis(const Tensor& a) {
  Tensor x = f64_contiguous(a);
  std::vector<double> q, r;
  householder_qr(x.data<double>(), x.size(0), x.size(1), q, r);
  return Tensor::from_vector(q, x.shape());
}

// argmin_x ||a x - b||_F for a [m, k] (m >= k), b [m, n]: x = r^-1 q^T b
// [k, n]. A direction whose pivot is below 1e-12 of the largest (a
// rank-deficient a) is left out: its row of x is zero.
Tensor least_squares(const Tensor& a, const Tensor& b) {
  Tensor A = f64_contiguous(a);
  const int64_t m = A.size(0), k = A.size(1);
  std::vector<double> q, r;
  householder_qr(A.data<double>(), m, k, q, r);
  Tensor qtb = kernel::contiguous(kernel::matmul(kernel::transpose(Tensor::from_vector(q, {m, k}), 0, 1),
                                                 f64_contiguous(b)));  // [k, n]
  const int64_t n = qtb.size(1);
  double* y = qtb.data<double>();
  double pivot_max = 0;
  for (int64_t j = 0; j < k; ++j) pivot_max = std::max(pivot_max, std::abs(r[static_cast<size_t>(j * k + j)]));
  for (int64_t j = k - 1; j >= 0; --j) {
    const double p = r[static_cast<size_t>(j * k + j)];
    double* yj = y + j * n;
    if (!(std::abs(p) > 1e-12 * pivot_max)) {
      std::fill(yj, yj + n, 0.0);
      continue;
    }
    for (int64_t c = j + 1; c < k; ++c) {
      const double f = r[static_cast<size_t>(j * k + c)];
      const double* yc = y + c * n;
      for (int64_t i = 0; i < n; ++i) yj[i] -= f * yc[i];
    }
    for (int64_t i = 0; i < n; ++i) yj[i] /= p;
  }
  return qtb;
}

// ---- uniform scalar quantization ----

// The dynamic ranges of x [rows, cols]: max |x| per row, or one for all.
std::vector<float> dynamic_ranges(const double* x, int64_t rows, int64_t cols, Range range) {
  std::vector<float> out(static_cast<size_t>(range == Range::row ? rows : 1), 0.0f);
  for (int64_t i = 0; i < rows; ++i) {
    double m = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double a = std::abs(x[i * cols + c]);
      if (a > m || a != a) m = a;  // a NaN stays, to be refused below (std::max would drop it)
    }
    // The scales are stored in float32. A rotation keeps a row's norm but
    // may gather it into one entry (a constant row of d values v becomes
    // v sqrt(d) there), so finite weights near float32's largest value can
    // give a range it cannot hold: an infinite scale would decode to NaN.
    if (!(m <= static_cast<double>(std::numeric_limits<float>::max())))
      fail("quantize: a row's range to store is {:.4g}, beyond float32's largest value {:.4g} in which the scales "
           "are kept: scale the weights down first (--method uniform, which does not rotate, stores any float32 "
           "weights)",
           m, static_cast<double>(std::numeric_limits<float>::max()));
    float& o = out[static_cast<size_t>(range == Range::row ? i : 0)];
    o = std::max(o, static_cast<float>(m));
  }
  return out;
}

double range_of(const std::vector<float>& ranges, Range range, int64_t row) {
  return static_cast<double>(ranges[static_cast<size_t>(range == Range::row ? row : 0)]);
}

// Level k of 2^bits on [-r, r], both ends included: r (2k - (L - 1)) / (L - 1).
inline double uniform_value(uint64_t k, double r, int bits) {
  const double top = static_cast<double>((int64_t{1} << bits) - 1);
  return r * (2.0 * static_cast<double>(k) - top) / top;
}

inline uint64_t uniform_code(double x, double r, int bits) {
  if (!(r > 0)) return 0;
  const int64_t top = (int64_t{1} << bits) - 1;
  const int64_t k = std::llround((x / r + 1.0) * 0.5 * static_cast<double>(top));
  return static_cast<uint64_t>(std::clamp<int64_t>(k, 0, top));
}

void uniform_encode(const double* x, int64_t rows, int64_t cols, int bits, const std::vector<float>& ranges,
                    Range range, BitWriter& bw) {
  for (int64_t i = 0; i < rows; ++i) {
    const double r = range_of(ranges, range, i);
    for (int64_t c = 0; c < cols; ++c) bw.put(uniform_code(x[i * cols + c], r, bits), bits);
  }
}

void uniform_decode(BitReader& br, int64_t rows, int64_t cols, int bits, const std::vector<float>& ranges,
                    Range range, double* out) {
  for (int64_t i = 0; i < rows; ++i) {
    const double r = range_of(ranges, range, i);
    for (int64_t c = 0; c < cols; ++c) out[i * cols + c] = uniform_value(br.get(bits), r, bits);
  }
}

// ---- E8 blocks: coset bit, k_0 .. k_6 in B bits, k_7 without its parity bit ----

void e8_encode(const double* x, int64_t rows, int64_t cols, int bits, const std::vector<float>& ranges, Range range,
               BitWriter& bw) {
  const int64_t half = int64_t{1} << (bits - 1);
  const double top = static_cast<double>((int64_t{1} << bits) - 1);
  for (int64_t i = 0; i < rows; ++i) {
    const double step = 2.0 * range_of(ranges, range, i) / top;
    for (int64_t c = 0; c < cols; c += 8) {
      double t[8];
      for (int j = 0; j < 8; ++j) t[j] = step > 0 ? x[i * cols + c + j] / step : 0.0;
      int32_t k[8];
      const int coset = e8_nearest_bounded(t, bits, k);
      bw.put(static_cast<uint64_t>(coset), 1);
      for (int j = 0; j < 7; ++j) bw.put(static_cast<uint64_t>(k[j] + half), bits);
      bw.put(static_cast<uint64_t>(k[7] + half) >> 1, bits - 1);
    }
  }
}

void e8_decode(BitReader& br, int64_t rows, int64_t cols, int bits, const std::vector<float>& ranges, Range range,
               double* out) {
  const int64_t half = int64_t{1} << (bits - 1);
  const double top = static_cast<double>((int64_t{1} << bits) - 1);
  for (int64_t i = 0; i < rows; ++i) {
    const double step = 2.0 * range_of(ranges, range, i) / top;
    for (int64_t c = 0; c < cols; c += 8) {
      const double shift = br.get(1) ? 0.5 : 0.0;
      uint64_t u[8], parity = 0;
      for (int j = 0; j < 7; ++j) {
        u[j] = br.get(bits);
        parity ^= u[j] & 1;
      }
      u[7] = (br.get(bits - 1) << 1) | parity;  // the sum of the k (and of the u) is even
      for (int j = 0; j < 8; ++j)
        out[i * cols + c + j] = step * (static_cast<double>(static_cast<int64_t>(u[j]) - half) + shift);
    }
  }
}

// ---- signs ----

std::vector<uint64_t> pack_signs(const std::vector<int8_t>& s) {
  BitWriter bw;
  for (int8_t v : s) bw.put(v < 0 ? 1 : 0, 1);
  return bw.finish();
}

std::vector<int8_t> unpack_signs(const std::vector<uint64_t>& w, int64_t n) {
  BitReader br(w);
  std::vector<int8_t> s(static_cast<size_t>(n));
  for (auto& v : s) v = br.get(1) ? -1 : 1;
  return s;
}

bool power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

// Multiplies column c of every row of y [rows, d] by f[c].
template <class T>
void scale_columns(T* y, int64_t rows, int64_t d, const std::vector<double>& f) {
  if (rows * d > kernel::kParallelGrain) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < d; ++c) y[r * d + c] = static_cast<T>(y[r * d + c] * f[static_cast<size_t>(c)]);
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < d; ++c) y[r * d + c] = static_cast<T>(y[r * d + c] * f[static_cast<size_t>(c)]);
  }
}

void scale_columns(const Tensor& y, const std::vector<double>& f) {
  const int64_t d = y.size(-1), rows = y.numel() / std::max<int64_t>(d, 1);
  if (y.dtype() == DType::f32) scale_columns(y.data<float>(), rows, d, f);
  else scale_columns(y.data<double>(), rows, d, f);
}

// The rotation's two diagonal factors with the 1/sqrt(n) of their block folded in.
void hadamard_factors(const std::vector<int8_t>& s, int64_t d, int64_t n, std::vector<double>& f1,
                      std::vector<double>& f2) {
  const double inv = 1.0 / std::sqrt(static_cast<double>(n));
  f1.assign(static_cast<size_t>(d), 0.0);
  for (int64_t c = 0; c < d; ++c) f1[static_cast<size_t>(c)] = s[static_cast<size_t>(c)] * (c < n ? inv : 1.0);
  f2.clear();
  if (n == d) return;
  f2.assign(static_cast<size_t>(d), 0.0);
  for (int64_t c = 0; c < d; ++c) f2[static_cast<size_t>(c)] = s[static_cast<size_t>(d + c)] * (c >= d - n ? inv : 1.0);
}

}  // namespace

// ---- RandomizedHadamard ----

int64_t RandomizedHadamard::sign_count(int64_t d) { return power_of_two(d) ? d : 2 * d; }

RandomizedHadamard::RandomizedHadamard(int64_t d, uint64_t seed) : d_(d) {
  if (d < 1) fail("RandomizedHadamard: expected a dimension >= 1, got {}", d);
  n_ = 1;
  while (2 * n_ <= d) n_ *= 2;
  Generator g(seed);
  Tensor b = Tensor::empty({sign_count(d)}, DType::f64);
  kernel::bernoulli_(b, 0.5, g);
  signs_.resize(static_cast<size_t>(b.numel()));
  const double* p = b.data<double>();
  for (size_t i = 0; i < signs_.size(); ++i) signs_[i] = p[i] != 0 ? -1 : 1;
}

RandomizedHadamard::RandomizedHadamard(int64_t d, std::vector<int8_t> signs) : d_(d), signs_(std::move(signs)) {
  if (d < 1) fail("RandomizedHadamard: expected a dimension >= 1, got {}", d);
  n_ = 1;
  while (2 * n_ <= d) n_ *= 2;
  if (static_cast<int64_t>(signs_.size()) != sign_count(d))
    fail("RandomizedHadamard: dimension {} takes {} signs, got {}", d, sign_count(d), signs_.size());
  for (int8_t s : signs_)
    if (s != 1 && s != -1) fail("RandomizedHadamard: signs must be +1 or -1, got {}", static_cast<int>(s));
}

namespace {
Tensor rows_copy(const Tensor& x, int64_t d, const char* op) {
  check_defined(x, op);
  check_has_dims(x, op);
  if (!x.is_floating()) fail("{}: expected a float32 or float64 tensor, got {}", op, dtype_name(x.dtype()));
  if (x.size(-1) != d) fail("{}: expected rows of {} elements, got shape {}", op, d, shape_str(x.shape()));
  return kernel::clone(x);
}
}  // namespace

Tensor RandomizedHadamard::apply(const Tensor& x) const {
  Tensor y = rows_copy(x, d_, "RandomizedHadamard::apply");
  std::vector<double> f1, f2;
  hadamard_factors(signs_, d_, n_, f1, f2);
  Tensor y2 = kernel::view(y, {y.numel() / d_, d_});
  scale_columns(y2, f1);
  kernel::fwht_(kernel::narrow(y2, 1, 0, n_));
  if (n_ != d_) {
    scale_columns(y2, f2);
    kernel::fwht_(kernel::narrow(y2, 1, d_ - n_, n_));
  }
  return y;
}

Tensor RandomizedHadamard::inverse(const Tensor& x) const {
  Tensor y = rows_copy(x, d_, "RandomizedHadamard::inverse");
  std::vector<double> f1, f2;
  hadamard_factors(signs_, d_, n_, f1, f2);
  Tensor y2 = kernel::view(y, {y.numel() / d_, d_});
  if (n_ != d_) {
    kernel::fwht_(kernel::narrow(y2, 1, d_ - n_, n_));
    scale_columns(y2, f2);
  }
  kernel::fwht_(kernel::narrow(y2, 1, 0, n_));
  scale_columns(y2, f1);
  return y;
}

Tensor RandomizedHadamard::matrix() const {
  Tensor eye = Tensor::zeros({d_, d_}, DType::f64);
  double* p = eye.data<double>();
  for (int64_t i = 0; i < d_; ++i) p[i * d_ + i] = 1.0;
  return kernel::contiguous(kernel::transpose(apply(eye), 0, 1));  // row i of apply(I) is S e_i, column i of S
}

// ---- GaussianRotation ----

GaussianRotation::GaussianRotation(int64_t d, uint64_t seed) {
  if (d < 1) fail("GaussianRotation: expected a dimension >= 1, got {}", d);
  Generator g(seed);
  q_ = orthonormal_basis(randn({d, d}, &g, DType::f64));
}

Tensor GaussianRotation::apply(const Tensor& x) const {
  const int64_t d = q_.size(0);
  Tensor y = rows_copy(x, d, "GaussianRotation::apply");
  Shape shape = y.shape();
  Tensor out = kernel::matmul(kernel::view(kernel::to_dtype(y, DType::f64), {y.numel() / d, d}),
                              kernel::transpose(q_, 0, 1));
  return kernel::reshape(out, shape);
}

Tensor GaussianRotation::inverse(const Tensor& x) const {
  const int64_t d = q_.size(0);
  Tensor y = rows_copy(x, d, "GaussianRotation::inverse");
  Shape shape = y.shape();
  Tensor out = kernel::matmul(kernel::view(kernel::to_dtype(y, DType::f64), {y.numel() / d, d}), q_);
  return kernel::reshape(out, shape);
}

// ---- E8 ----

namespace {
// The nearest point of D8 (integers with an even sum): round every
// coordinate; when the sum is odd, round the one farthest from its integer
// the other way (Conway & Sloane 1982).
double d8_nearest(const double x[8], double y[8]) {
  int64_t sum = 0;
  int worst = 0;
  double worst_gap = -1;
  for (int i = 0; i < 8; ++i) {
    y[i] = std::round(x[i]);
    sum += static_cast<int64_t>(y[i]);
    const double gap = std::abs(x[i] - y[i]);
    if (gap > worst_gap) {
      worst_gap = gap;
      worst = i;
    }
  }
  if (sum % 2 != 0) y[worst] += x[worst] >= y[worst] ? 1.0 : -1.0;
  double dist = 0;
  for (int i = 0; i < 8; ++i) dist += (x[i] - y[i]) * (x[i] - y[i]);
  return dist;
}
}  // namespace

void e8_nearest(const double x[8], double y[8]) {
  double shifted[8], y1[8];
  for (int i = 0; i < 8; ++i) shifted[i] = x[i] - 0.5;
  const double d0 = d8_nearest(x, y);
  const double d1 = d8_nearest(shifted, y1);
  if (d1 < d0)
    for (int i = 0; i < 8; ++i) y[i] = y1[i] + 0.5;
}

int e8_nearest_bounded(const double t[8], int bits, int32_t k[8]) {
  if (bits < kMinBits || bits > kMaxBits) fail("e8: bits must be {}..{}, got {}", kMinBits, kMaxBits, bits);
  const int64_t lo = -(int64_t{1} << (bits - 1)), hi = (int64_t{1} << (bits - 1)) - 1;
  int best_coset = 0;
  double best = INFINITY;
  for (int c = 0; c < 2; ++c) {
    int64_t kk[8], sum = 0;
    double u[8], dist = 0;
    for (int i = 0; i < 8; ++i) {
      u[i] = t[i] - 0.5 * c;
      kk[i] = std::clamp<int64_t>(std::llround(std::clamp(u[i], -1e18, 1e18)), lo, hi);
      sum += kk[i];
      dist += (u[i] - static_cast<double>(kk[i])) * (u[i] - static_cast<double>(kk[i]));
    }
    if (sum % 2 != 0) {  // the cheapest change of one coordinate to the other parity, inside the cube
      int at = 0;
      int64_t alt_at = 0;
      double cost_at = INFINITY;
      for (int i = 0; i < 8; ++i) {
        int64_t alt = u[i] >= static_cast<double>(kk[i]) ? kk[i] + 1 : kk[i] - 1;
        if (alt > hi) alt = kk[i] - 1;
        if (alt < lo) alt = kk[i] + 1;
        const double cost = (u[i] - static_cast<double>(alt)) * (u[i] - static_cast<double>(alt)) -
                            (u[i] - static_cast<double>(kk[i])) * (u[i] - static_cast<double>(kk[i]));
        if (cost < cost_at) {
          cost_at = cost;
          at = i;
          alt_at = alt;
        }
      }
      kk[at] = alt_at;
      dist += cost_at;
    }
    if (dist < best) {
      best = dist;
      best_coset = c;
      for (int i = 0; i < 8; ++i) k[i] = static_cast<int32_t>(kk[i]);
    }
  }
  return best_coset;
}

// ---- quantize / dequantize ----

namespace {

// The sizes a quantized matrix's parts must have.
struct Layout {
  int64_t code_bits = 0, scales = 0, sign_words = 0, seed_words = 0;
};

void check_bits(int bits, const char* op) {
  if (bits < kMinBits || bits > kMaxBits)
    fail("{}: bits must be {}..{}, got {}", op, kMinBits, kMaxBits, bits);
}

void check_shape(Method m, int64_t rows, int64_t cols, int64_t rank, const char* op) {
  if (m == Method::e8 && cols % 8 != 0)
    fail("{}: e8 quantizes blocks of 8, but the rows of this [{}, {}] matrix have {} elements (expected a "
         "multiple of 8)",
         op, rows, cols, cols);
  if (m == Method::lplr && (rank < 1 || rank > std::min(rows, cols)))
    fail("{}: lplr rank {} does not fit a [{}, {}] matrix (expected 1..{})", op, rank, rows, cols,
         std::min(rows, cols));
  if (m != Method::lplr && rank != 0)
    fail("{}: a rank ({}) applies to lplr only, not to {}", op, rank, method_name(m));
}

Layout layout_of(Method m, int bits, Range range, int64_t rows, int64_t cols, int64_t rank) {
  Layout l;
  const bool per_row = range == Range::row;
  if (m == Method::lplr) {
    l.code_bits = rank * (rows + cols) * bits;
    l.scales = per_row ? 2 * rank : 2;
  } else {
    l.code_bits = rows * cols * bits;
    l.scales = per_row ? rows : 1;
  }
  if (m == Method::hadamard || m == Method::e8) l.sign_words = words_for(RandomizedHadamard::sign_count(cols));
  if (m == Method::gaussian) l.seed_words = 1;
  return l;
}

void check_quantized(const Quantized& q, const char* op) {
  const int mi = static_cast<int>(q.method);
  if (mi < 0 || mi >= kMethods) fail("{}: unknown method number {}", op, mi);
  check_bits(q.bits, op);
  if (q.range != Range::row && q.range != Range::tensor) fail("{}: unknown range number {}", op, static_cast<int>(q.range));
  if (q.rows < 1 || q.cols < 1) fail("{}: expected a matrix of at least [1, 1], got [{}, {}]", op, q.rows, q.cols);
  check_shape(q.method, q.rows, q.cols, q.rank, op);
  const Layout l = layout_of(q.method, q.bits, q.range, q.rows, q.cols, q.rank);
  auto expect = [&](const char* part, size_t got, int64_t want) {
    if (static_cast<int64_t>(got) != want)
      fail("{}: {} {} bits, [{}, {}]: expected {} {}, got {}", op, method_name(q.method), q.bits, q.rows, q.cols,
           want, part, got);
  };
  expect("code words", q.codes.size(), words_for(l.code_bits));
  expect("scales", q.scales.size(), l.scales);
  expect("sign words", q.signs.size(), l.sign_words);
  expect("seed words", q.seed.size(), l.seed_words);
}

}  // namespace

int64_t Quantized::stored_bits() const { return code_bits() + scale_bits() + side_bits(); }

Quantized quantize(const Tensor& w, const Options& o) {
  check_defined(w, "quantize");
  if (w.dim() != 2) fail("quantize: expected a matrix [R, C], got shape {}", shape_str(w.shape()));
  if (!w.is_floating()) fail("quantize: expected a float32 or float64 matrix, got {}", dtype_name(w.dtype()));
  if (w.numel() == 0) fail("quantize: the matrix {} is empty", shape_str(w.shape()));
  check_bits(o.bits, "quantize");
  const int64_t R = w.size(0), C = w.size(1);
  check_shape(o.method, R, C, o.rank, "quantize");
  if (!kernel::all_finite(w)) fail("quantize: the matrix {} holds non-finite values", shape_str(w.shape()));
  Quantized q;
  q.method = o.method;
  q.bits = o.bits;
  q.range = o.range;
  q.rows = R;
  q.cols = C;
  q.rank = o.rank;
  Tensor x = f64_contiguous(w);
  BitWriter bw;
  switch (o.method) {
    case Method::uniform:
    case Method::hadamard:
    case Method::gaussian:
    case Method::e8: {
      Tensor y = x;
      if (o.method == Method::hadamard || o.method == Method::e8) {
        RandomizedHadamard h(C, o.seed);
        y = h.apply(x);
        q.signs = pack_signs(h.signs());
      } else if (o.method == Method::gaussian) {
        y = GaussianRotation(C, o.seed).apply(x);
        q.seed = {o.seed};
      }
      y = kernel::contiguous(y);
      q.scales = dynamic_ranges(y.data<double>(), R, C, o.range);
      if (o.method == Method::e8) e8_encode(y.data<double>(), R, C, o.bits, q.scales, o.range, bw);
      else uniform_encode(y.data<double>(), R, C, o.bits, q.scales, o.range, bw);
      break;
    }
    case Method::lplr: {
      const int64_t k = o.rank;
      Generator g(o.seed);
      Tensor omega = randn({C, k}, &g, DType::f64);
      Tensor basis = orthonormal_basis(kernel::matmul(x, omega));             // L [R, k]
      Tensor lt = kernel::contiguous(kernel::transpose(basis, 0, 1));          // [k, R]: one column of L a row
      std::vector<float> lr = dynamic_ranges(lt.data<double>(), k, R, o.range);
      uniform_encode(lt.data<double>(), k, R, o.bits, lr, o.range, bw);
      Tensor lt_hat = Tensor::empty({k, R}, DType::f64);
      {
        std::vector<uint64_t> words = BitWriter(bw).finish();
        BitReader br(words);
        uniform_decode(br, k, R, o.bits, lr, o.range, lt_hat.data<double>());
      }
      Tensor m = least_squares(kernel::transpose(lt_hat, 0, 1), x);            // M [k, C]
      std::vector<float> mr = dynamic_ranges(m.data<double>(), k, C, o.range);
      uniform_encode(m.data<double>(), k, C, o.bits, mr, o.range, bw);
      q.scales = lr;
      q.scales.insert(q.scales.end(), mr.begin(), mr.end());
      break;
    }
  }
  q.codes = bw.finish();
  check_quantized(q, "quantize");
  return q;
}

Tensor dequantize(const Quantized& q) {
  check_quantized(q, "dequantize");
  const int64_t R = q.rows, C = q.cols;
  BitReader br(q.codes);
  Tensor out;
  switch (q.method) {
    case Method::uniform:
    case Method::hadamard:
    case Method::gaussian:
    case Method::e8: {
      Tensor y = Tensor::empty({R, C}, DType::f64);
      if (q.method == Method::e8) e8_decode(br, R, C, q.bits, q.scales, q.range, y.data<double>());
      else uniform_decode(br, R, C, q.bits, q.scales, q.range, y.data<double>());
      if (q.method == Method::hadamard || q.method == Method::e8)
        y = RandomizedHadamard(C, unpack_signs(q.signs, RandomizedHadamard::sign_count(C))).inverse(y);
      else if (q.method == Method::gaussian)
        y = GaussianRotation(C, q.seed[0]).inverse(y);
      out = y;
      break;
    }
    case Method::lplr: {
      const int64_t k = q.rank;
      const bool per_row = q.range == Range::row;
      std::vector<float> lr(q.scales.begin(), q.scales.begin() + (per_row ? k : 1));
      std::vector<float> mr(q.scales.begin() + (per_row ? k : 1), q.scales.end());
      Tensor lt = Tensor::empty({k, R}, DType::f64), m = Tensor::empty({k, C}, DType::f64);
      uniform_decode(br, k, R, q.bits, lr, q.range, lt.data<double>());
      uniform_decode(br, k, C, q.bits, mr, q.range, m.data<double>());
      out = kernel::matmul(kernel::transpose(lt, 0, 1), m);
      break;
    }
  }
  return kernel::contiguous(kernel::to_dtype(out, DType::f32));
}

// ---- as named tensors ----

namespace {
Tensor words_tensor(const std::vector<uint64_t>& w) {
  std::vector<int64_t> v(w.size());
  if (!w.empty()) std::memcpy(v.data(), w.data(), w.size() * sizeof(uint64_t));
  return Tensor::from_i64(v, {static_cast<int64_t>(v.size())});
}

std::vector<uint64_t> tensor_words(const Tensor& t) {
  std::vector<int64_t> v = t.to_vector<int64_t>();
  std::vector<uint64_t> w(v.size());
  if (!v.empty()) std::memcpy(w.data(), v.data(), v.size() * sizeof(uint64_t));
  return w;
}
}  // namespace

std::map<std::string, Tensor> to_state(const Quantized& q) {
  check_quantized(q, "quantize::to_state");
  std::map<std::string, Tensor> s;
  s["meta"] = Tensor::from_i64({static_cast<int64_t>(q.method), q.bits, static_cast<int64_t>(q.range), q.rows, q.cols,
                                q.rank},
                               {6});
  s["codes"] = words_tensor(q.codes);
  s["scales"] = Tensor::from_vector(q.scales, {static_cast<int64_t>(q.scales.size())});
  if (!q.signs.empty()) s["signs"] = words_tensor(q.signs);
  if (!q.seed.empty()) s["seed"] = words_tensor(q.seed);
  return s;
}

Quantized from_state(const std::map<std::string, Tensor>& state, const std::string& what) {
  auto get = [&](const char* key, DType dtype, bool required) -> Tensor {
    auto it = state.find(key);
    if (it == state.end()) {
      if (required) fail("{}: the quantized matrix has no '{}'", what, key);
      return Tensor();
    }
    if (it->second.dtype() != dtype || it->second.dim() != 1)
      fail("{}: '{}' is {} {}, expected {} [n]", what, key, dtype_name(it->second.dtype()),
           shape_str(it->second.shape()), dtype_name(dtype));
    return it->second;
  };
  for (const auto& [k, t] : state)
    if (k != "meta" && k != "codes" && k != "scales" && k != "signs" && k != "seed")
      fail("{}: unexpected '{}' in a quantized matrix (expected meta, codes, scales, signs, seed)", what, k);
  Tensor meta = get("meta", DType::i64, true);
  if (meta.numel() != 6) fail("{}: 'meta' has {} values, expected 6", what, meta.numel());
  std::vector<int64_t> m = meta.to_vector<int64_t>();
  if (m[0] < 0 || m[0] >= kMethods) fail("{}: unknown method number {} (expected 0..{})", what, m[0], kMethods - 1);
  if (m[2] != 0 && m[2] != 1) fail("{}: unknown range number {} (expected 0 row, 1 tensor)", what, m[2]);
  Quantized q;
  q.method = static_cast<Method>(m[0]);
  q.bits = static_cast<int>(std::clamp<int64_t>(m[1], -1, 1 << 20));
  q.range = static_cast<Range>(m[2]);
  q.rows = m[3];
  q.cols = m[4];
  q.rank = m[5];
  q.codes = tensor_words(get("codes", DType::i64, true));
  q.scales = get("scales", DType::f32, true).to_vector<float>();
  if (Tensor s = get("signs", DType::i64, false); s.defined()) q.signs = tensor_words(s);
  if (Tensor s = get("seed", DType::i64, false); s.defined()) q.seed = tensor_words(s);
  try {
    check_quantized(q, "quantized matrix");
  } catch (const Error& e) {
    fail("{}: {}", what, e.what());
  }
  return q;
}

double row_peak(const Tensor& x) {
  check_defined(x, "row_peak");
  if (x.dim() != 2) fail("row_peak: expected a matrix [R, C], got shape {}", shape_str(x.shape()));
  const int64_t R = x.size(0), C = x.size(1);
  std::vector<double> v = x.to_vector<double>();
  double sum = 0;
  int64_t rows = 0;
  for (int64_t r = 0; r < R; ++r) {
    double m = 0, sq = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double a = v[static_cast<size_t>(r * C + c)];
      m = std::max(m, std::abs(a));
      sq += a * a;
    }
    if (sq == 0) continue;
    sum += m / std::sqrt(sq / static_cast<double>(C));
    ++rows;
  }
  return rows > 0 ? sum / static_cast<double>(rows) : 0.0;
}

double relative_error(const Tensor& w, const Tensor& w_hat) {
  if (w.shape() != w_hat.shape())
    fail("relative_error: shapes differ: {} and {}", shape_str(w.shape()), shape_str(w_hat.shape()));
  std::vector<double> a = w.to_vector<double>(), b = w_hat.to_vector<double>();
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += a[i] * a[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace heed::quant
