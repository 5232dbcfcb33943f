// data/shapes.h: the toy sequence task "average the heights of each pair of
// shapes" (Fleuret's toy attention model; the task is specified in full in
// the project's spec, toy-shapes-task.md).
//
// One sample is a 1-D signal of length L holding four shapes, stored in this
// order: triangle, triangle, box, box (shape index s = 0..3 below, so
// kinds[n] = {0, 0, 1, 1}). Each shape draws, uniformly and independently,
//   centre c in [w_max / 2, L - w_max / 2]  ([5.5, 94.5] for L = 100),
//   height h in [1, 25], width w in [5, 11],
// rounded to float32, which is what the geometry tensors hold; renderings are
// computed in float64 from those float32 values, so anyone can recompute them
// exactly from the stored geometry. At integer positions t = 0..L-1:
//   triangle(t) = max(0, h - max(0, |t - c| - 0.5) * 2h / w)
//   box(t)      = h if |t - c| < w / 2 (strictly), else 0
// and the signal is the pointwise maximum of the four.
//
// A draw is rejected (and redrawn) when
//  - two shapes collide: each shape's support (rendering > 0) is dilated one
//    position to the right (support at t or t + 1: a max-pool of width 2,
//    stride 1, giving L - 1 values), and some position has two or more
//    dilated supports on; so shapes never overlap or touch;
//  - it is not valid:
//    default task: the two triangles' heights differ by at most 4. The
//      reference code tests the triangle clause twice and so never tests the
//      boxes; by default heed does the same (boxes_must_differ = false), and
//      boxes_must_differ = true also requires |h_box0 - h_box1| > 4;
//    group_by_location: the mean height of the two leftmost shapes and that of
//      the two rightmost differ by at most 4.
//
// Targets replace each shape's height by the mean of its height and its
// partner's: default task, the other shape of the same kind (partner =
// {1, 0, 3, 2}); group_by_location, the other shape of the same half once the
// four are sorted by centre, whatever the kinds. Input and target each get
// their own independent noise, uniform in [-noise, noise) (0.15 by default).
//
// Positional encoding (positional = true) appends P = ceil(log2(L)) channels
// to the input only (7 for L = 100): channel 1 + k holds bit k of t as 0/1.
//
// Randomness, and why it does not depend on the thread count:
// generate_shapes claims one Philox block per sample from the generator
// (g.reserve(n), so g advances by exactly n blocks whatever the number of
// rejections). Sample i owns the counter-based stream
//   block b_i = first + i, lanes 0, 1, 2, ...
// i.e. the 128-bit outputs g.block(b_i, lane) for lane = 0, 1, ..., read as a
// sequence of 32-bit words (word 0 of lane 0 first). No other draw of g can
// read them: ordinary draws read lane 0 only of blocks they reserved
// themselves (randint's rare retries read later lanes of its own block). From
// that stream, sample i reads, in order:
//   per attempt, 4 shapes x (c, h, w), each uniform from two words
//     (the first word is the low half, top 53 bits of the 64);
//   once accepted, L input-noise values then L target-noise values, each from
//     one word (its top 24 bits).
// Samples are therefore independent of each other and of how they are spread
// over threads: generation runs OpenMP-parallel over samples and is
// bit-identical for any thread count.
//
// Legend: N samples, C channels (1, or 1 + P with positional), L positions.
#pragma once

#include <cstdint>

#include "core/random.h"
#include "core/tensor.h"

namespace heed::data {

enum ShapeKind : int64_t { kTriangle = 0, kBox = 1 };

// An aggregate: ShapesOptions{.group_by_location = true, .positional = true}.
struct ShapesOptions {
  int64_t length = 100;            // L
  bool group_by_location = false;  // pairs are the left two and the right two shapes
  bool positional = false;         // append ceil(log2(L)) bit channels to the input
  double noise = 0.15;             // half-width of the uniform noise: U[-noise, noise)
  // Default task only (rejected with group_by_location): also require the
  // boxes' heights to differ by more than min_height_gap.
  bool boxes_must_differ = false;
  double min_height_gap = 4.0;     // validity: paired heights (or means) differ by more than this
  double height_min = 1.0, height_max = 25.0;
  double width_min = 5.0, width_max = 11.0;
  // Attempts per sample before giving up with an error (options under which
  // almost every draw collides would otherwise loop for ever).
  int64_t max_attempts = 1000000;
};

struct ShapesSet {
  Tensor input;           // [N, C, L] f32: shapes + noise; C = 1, or 1 + P with positional
  Tensor target;          // [N, 1, L] f32: shapes with averaged heights + independent noise
  Tensor centres;         // [N, 4] f32, shape order triangle, triangle, box, box
  Tensor widths;          // [N, 4] f32
  Tensor heights;         // [N, 4] f32: the input's (original) heights
  Tensor target_heights;  // [N, 4] f32: (heights[s] + heights[partner[s]]) / 2, rounded to f32
  Tensor kinds;           // [N, 4] i64: 0 triangle, 1 box (always {0, 0, 1, 1})
  Tensor partner;         // [N, 4] i64: index (0..3) of the shape whose height is averaged with s

  int64_t size() const { return input.defined() ? input.size(0) : 0; }
};

// n samples drawn as described above; deterministic in g's state, and
// advances g by n blocks. Throws on invalid options (naming the option).
ShapesSet generate_shapes(int64_t n, Generator& g, const ShapesOptions& opt = {});

// ceil(log2(length)): the number of positional channels (7 for L = 100).
int64_t positional_channels(int64_t length);

// The bit channels alone: [P, L] f32, row k = bit k of t.
Tensor positional_encoding(int64_t length);

// The noiseless signal of the given geometry, rendered exactly as
// generate_shapes renders it: [N, 1, length] f32. centres, widths and heights
// are [N, S] float (f32 or f64), kinds [N, S] i64. Render with
// `heights` for the clean input and `target_heights` for the clean target.
Tensor render_shapes(const Tensor& centres, const Tensor& widths, const Tensor& heights, const Tensor& kinds,
                     int64_t length);

// Global scalar standardisation fitted on the training inputs.
//
// fit() reads channel 0 (the signal) of x [N, C, L] only: with positional
// encoding the bit channels are fixed 0/1 patterns, not data. apply() then
// maps channel 0 to (x - mean) / std and, by default, leaves the bit channels
// as 0/1. The reference standardises the whole concatenated input with the
// signal's statistics, bits included; signal_only = false reproduces that
// (the two differ by an affine map of the bit channels that a first
// convolution absorbs). std is the unbiased (n - 1) estimate, as torch.std.
struct Standardizer {
  double mean = 0.0;
  double std = 0.0;  // 0 until fitted
  bool signal_only = true;

  void fit(const Tensor& x);
  Tensor apply(const Tensor& x) const;  // a fresh [N, C, L] tensor of x's dtype

  // {mean, std} as an f64 tensor of shape [2], for checkpoints.
  Tensor state() const;
  void set_state(const Tensor& s);
};

}  // namespace heed::data
