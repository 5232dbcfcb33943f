// core/quantize.h: compressing a trained model's weight matrices, the
// methods of the attention lecture's last chapter:
//
//   uniform   B-bit nearest-neighbour quantization with dynamic range R (the
//             row's or the whole matrix's max |w|): 2^B levels evenly spaced
//             on [-R, R], both ends included. A vector of d coordinates gets
//             an error up to sqrt(d) R / (2^B - 1): one large coordinate sets
//             R for all the others.
//   hadamard  the same after the randomized Hadamard transform
//             S = H D / sqrt(d) (D random signs): S w spreads every
//             coordinate's mass over all d, so max |S w| is about
//             ||w|| sqrt(2 ln(2d) / d) with high probability and the error
//             grows like sqrt(log d) ||w|| 2^-B instead of sqrt(d). O(d log d).
//   gaussian  the same after a dense random rotation: the orthogonal factor
//             of a d x d matrix of N(0, 1) draws (Gaussian S, orthonormalised
//             so that S^T undoes it exactly; Haar-distributed). O(d^2) per row.
//   e8        the randomized Hadamard transform, then each block of 8
//             coordinates to the nearest point of the E8 lattice
//             (D8 union D8 + 1/2, Conway & Sloane), as QuIP# does (Tseng et
//             al. 2024). Scaled to the bit budget (below), E8's normalised
//             second moment 0.0717 against the cube's 1/12 = 0.0833 is 14%
//             less squared error than uniform quantization at the same bits
//             (the hexagonal lattice's factor in 2-D is 0.962; E8's 0.860).
//   lplr      low-rank low-precision factorization (Saha, Srivastava,
//             Pilanci 2023, "Matrix compression via randomized low rank and
//             low precision factorization"): a randomized range finder
//             (Halko, Martinsson, Tropp 2011) gives an orthonormal basis
//             L = orth(W Omega) [R, k] of the sketch W Omega (Omega [C, k]
//             Gaussian); L is quantized to B bits, the second factor is the
//             least-squares fit M = argmin ||L' M - W||_F against the
//             quantized L' (so it absorbs L's error), then quantized to B bits
//             too: W ~ L' M'. k (R + C) numbers instead of R C.
//
// A matrix is W [R, C]: R rows of length C, each row a vector the lecture's
// claims are about (a Linear weight [Out, In] has one row per output; a
// Conv1d weight [O, C, K] is seen as [O, C K]). The rotations act on rows:
// W S^T is what gets quantized, and W ~ Q(W S^T) S, so an inference engine
// could keep Q(W S^T) and rotate the activations instead, x -> S x.
//
// The bit budget. Every method stores B-bit codes, and what it needs to
// decode them; Quantized::stored_bits counts all of it:
//   - codes, bit-packed back to back (64-bit words; the last word's unused
//     bits are counted too): R C B bits (uniform, hadamard, gaussian, e8),
//     k (R + C) B (lplr);
//   - ranges R as float32: one per row (Range::row) or one per matrix
//     (Range::tensor); lplr one per rank-one component of each factor (2k),
//     or two;
//   - hadamard, e8: the random signs, one bit each (packed in 64-bit words):
//     C bits when C is a power of two, 2 C otherwise (two transforms);
//   - gaussian: the 64-bit seed from which the d x d rotation is drawn again
//     (storing the matrix itself would cost 32 C^2 bits).
// Nothing else (method, bits, shape: the descriptor `meta`, 6 int64) counts.
//
// E8 at B bits per dimension: a block of 8 coordinates t = w / s (step
// s = 2 R / (2^B - 1), the uniform quantizer's own step) goes to the
// nearest of the 2^(8B) points s (k + c/2), c in {0, 1} the coset,
// k in [-2^(B-1), 2^(B-1) - 1]^8 with an even sum: the E8 lattice cut to a
// cube. Its c = 1 half is exactly half of the uniform grid (the other half
// has odd sums); c = 0 is the same grid shifted by half a step. Stored in
// exactly 8B bits: c (1 bit), k_0 .. k_6 (B bits each), and k_7 without its
// lowest bit, which the parity gives (B - 1 bits).
//
// Randomness (signs, rotations, sketches) comes from heed::Generator seeded
// with Options::seed: the same seed gives the same bits on any number of
// threads. All arithmetic is float64; dequantize returns float32.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace heed::quant {

// The methods, each listed once: the enum, its names and every dispatch
// (method_name, method_from_name) come from this table (STYLE.md, 18).
#define HEED_QUANT_METHODS(X) X(uniform) X(hadamard) X(gaussian) X(e8) X(lplr)

enum class Method : int {
#define HEED_QUANT_ENUM(m) m,
  HEED_QUANT_METHODS(HEED_QUANT_ENUM)
#undef HEED_QUANT_ENUM
};
const char* method_name(Method m);
// Throws heed::Error naming the name and the methods when it is none of them.
Method method_from_name(const std::string& name);
std::vector<std::string> method_names();  // "uniform", "hadamard", ...

// Where the dynamic range R comes from: each row's max |w|, or the matrix's.
enum class Range : int { row, tensor };
const char* range_name(Range r);

constexpr int kMinBits = 2, kMaxBits = 16;

struct Options {
  Method method = Method::uniform;
  int bits = 4;          // kMinBits .. kMaxBits
  Range range = Range::row;
  int64_t rank = 0;      // lplr: 1 .. min(R, C); 0 for the other methods
  uint64_t seed = 0;     // signs (hadamard, e8), rotation (gaussian), sketch (lplr)
};

// ---- the random rotations of rows ----

// The randomized Hadamard transform of vectors of length d: orthogonal, with
// S^T = S^-1. For d a power of two, S = H_d D / sqrt(d). For other d, two
// overlapping blocks of the largest power of two n < d, each with its own
// signs: S = B2 D2 B1 D1, with B1 = H_n / sqrt(n) on coordinates [0, n) and
// B2 the same on [d - n, d) (identity elsewhere); every coordinate is mixed,
// the cost is at most 2 d log d and nothing is padded (so no extra
// coordinates to store). signs: +1/-1, d of them or 2d (two blocks).
class RandomizedHadamard {
 public:
  // Sign i from Philox block i of a generator seeded with seed (p = 1/2).
  RandomizedHadamard(int64_t d, uint64_t seed);
  RandomizedHadamard(int64_t d, std::vector<int8_t> signs);
  int64_t dim() const { return d_; }
  int64_t block() const { return n_; }  // the largest power of two <= d
  const std::vector<int8_t>& signs() const { return signs_; }
  // Rows of x [.., d] (f32 or f64) -> S row; a new contiguous tensor of x's dtype.
  Tensor apply(const Tensor& x) const;
  // Rows -> S^T row, the inverse.
  Tensor inverse(const Tensor& y) const;
  // S as a dense f64 [d, d] matrix (for tests).
  Tensor matrix() const;
  static int64_t sign_count(int64_t d);  // d, or 2d when d is not a power of two

 private:
  int64_t d_ = 0, n_ = 0;
  std::vector<int8_t> signs_;
};

// A dense random rotation of vectors of length d: Q of the QR decomposition
// of a d x d matrix G of N(0, 1) draws (Philox, seeded), with R's diagonal
// made positive so that Q is Haar-distributed (Mezzadri 2007). Building it
// costs O(d^3), applying it O(d^2) per vector.
class GaussianRotation {
 public:
  GaussianRotation(int64_t d, uint64_t seed);
  const Tensor& matrix() const { return q_; }  // f64 [d, d], orthogonal
  Tensor apply(const Tensor& x) const;         // rows of x [.., d] -> Q row (f64)
  Tensor inverse(const Tensor& y) const;       // rows -> Q^T row (f64)

 private:
  Tensor q_;
};

// ---- E8 ----

// The nearest point y of the E8 lattice to x (Conway & Sloane 1982: the
// nearest points of D8 and of D8 + 1/2, whichever is closer).
void e8_nearest(const double x[8], double y[8]);
// The nearest point of the E8 codebook of `bits` bits per dimension (the
// lattice cut to a cube; header comment) to t (in units of the step):
// returns the coset c (0 or 1) and k [8] with the point k + c / 2.
int e8_nearest_bounded(const double t[8], int bits, int32_t k[8]);

// ---- quantized matrices ----

// A matrix as stored: the codes, ranges, signs or seed its method needs.
struct Quantized {
  Method method = Method::uniform;
  int bits = 0;
  Range range = Range::row;
  int64_t rows = 0, cols = 0, rank = 0;
  std::vector<uint64_t> codes;  // bit-packed codes, back to back
  std::vector<float> scales;    // dynamic ranges R
  std::vector<uint64_t> signs;  // hadamard, e8: bit i set = sign i is -1
  std::vector<uint64_t> seed;   // gaussian: the rotation's seed (one word)

  // Everything above but the descriptor, in bits: 64 per code, sign and
  // seed word, 32 per scale. What to_state writes, byte for byte.
  int64_t stored_bits() const;
  double bits_per_weight() const { return static_cast<double>(stored_bits()) / static_cast<double>(rows * cols); }
  // The parts of stored_bits: codes, scales, signs + seed.
  int64_t code_bits() const { return 64 * static_cast<int64_t>(codes.size()); }
  int64_t scale_bits() const { return 32 * static_cast<int64_t>(scales.size()); }
  int64_t side_bits() const { return 64 * static_cast<int64_t>(signs.size() + seed.size()); }
};

// Quantizes w [R, C] (f32 or f64). Throws heed::Error naming the value and
// what was expected for bits outside 2..16, a rank outside 1..min(R, C)
// (lplr; the other methods take none), e8 on rows whose length is not a
// multiple of 8, and a matrix that is empty, not 2-D or not finite.
Quantized quantize(const Tensor& w, const Options& o);
// The matrix the codes stand for: f32 [R, C].
Tensor dequantize(const Quantized& q);

// As named tensors, the way checkpoints store them (docs/checkpoint-format.md):
//   meta    int64 [6]: method, bits, range, rows, cols, rank (not counted)
//   codes   int64 [words]  the packed codes
//   scales  float32 [n]
//   signs   int64 [words]  (hadamard, e8)
//   seed    int64 [1]      (gaussian)
// The bytes of everything but meta are stored_bits() / 8.
std::map<std::string, Tensor> to_state(const Quantized& q);
// Back; throws naming `what` (e.g. the parameter) when a piece is missing,
// mis-sized or of another dtype.
Quantized from_state(const std::map<std::string, Tensor>& state, const std::string& what);

// How peaked the rows of x [R, C] are: the mean over rows of
// max |x_r| / rms(x_r) (zero rows left out). The dynamic range a uniform
// quantizer spends its levels on, in units of the row's RMS: sqrt(3) = 1.73
// for uniformly distributed entries, about sqrt(2 ln 2C) for Gaussian ones
// (2.9 at C = 128), up to sqrt(C) for one large coordinate; the rotations
// bring any row near the Gaussian value.
double row_peak(const Tensor& x);

// ||w - w_hat||_F / ||w||_F in float64 (the absolute error when w is zero).
double relative_error(const Tensor& w, const Tensor& w_hat);

}  // namespace heed::quant
