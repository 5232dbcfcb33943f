// data/shapes.cpp: the toy shapes task generator and the input standardiser.
// The task, the rejection rules and the random-stream layout are described in
// data/shapes.h.
#include "data/shapes.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/kernels.h"

namespace heed::data {

namespace {

constexpr int kShapes = 4;
constexpr std::array<int64_t, kShapes> kKinds = {kTriangle, kTriangle, kBox, kBox};
constexpr std::array<int, kShapes> kKindPartner = {1, 0, 3, 2};

// Sample i's counter-based stream: the 32-bit words of g.block(b, 0),
// g.block(b, 1), ... in order (see the header).
class SampleStream {
 public:
  SampleStream(const Generator& g, uint64_t block) : g_(g), block_(block) {}

  uint32_t next_word() {
    if (used_ == 4) {
      words_ = g_.block(block_, lane_++);
      used_ = 0;
    }
    return words_[used_++];
  }
  // [0, 1) from 53 bits, like Generator::uniform: low word first.
  double uniform53() {
    const uint64_t lo = next_word();
    const uint64_t w = lo | static_cast<uint64_t>(next_word()) << 32;
    return static_cast<double>(w >> 11) * 0x1.0p-53;
  }
  // [0, 1) from 24 bits, enough for float32 noise.
  double uniform24() { return static_cast<double>(next_word() >> 8) * 0x1.0p-24; }

 private:
  const Generator& g_;
  uint64_t block_;
  uint32_t lane_ = 0;
  std::array<uint32_t, 4> words_{};
  int used_ = 4;  // words of words_ already read (4: fetch a new lane)
};

struct Shape1d {
  double c, h, w;  // float32 values, held in double
  int64_t kind;
};

// The rendering formulas of the spec, evaluated in double.
inline double render_one(int64_t kind, double c, double h, double w, double t) {
  const double d = std::abs(t - c);
  if (kind == kTriangle) return std::max(0.0, h - std::max(0.0, d - 0.5) * 2.0 * h / w);
  return d < w / 2.0 ? h : 0.0;
}

// Positions outside [lo, hi] render as exactly 0: both supports lie within
// w / 2 + 0.5 of the centre, and the window adds a margin of one position.
inline void support_window(double c, double w, int64_t L, int64_t& lo, int64_t& hi) {
  lo = std::max<int64_t>(0, static_cast<int64_t>(std::floor(c - w / 2.0 - 1.5)));
  hi = std::min<int64_t>(L - 1, static_cast<int64_t>(std::ceil(c + w / 2.0 + 1.5)));
}

// True when two dilated supports meet. count is scratch of L - 1 zeros and is
// left zeroed. Dilation: support at t turns on positions t - 1 and t of the
// L - 1 max-pooled values (max-pool width 2, stride 1).
bool collides(const std::array<Shape1d, kShapes>& s, int64_t L, std::vector<uint8_t>& count) {
  bool hit = false;
  for (const Shape1d& sh : s) {
    int64_t lo, hi;
    support_window(sh.c, sh.w, L, lo, hi);
    int64_t last = -1;  // last pooled position this shape turned on
    for (int64_t t = lo; t <= hi && !hit; ++t) {
      if (!(render_one(sh.kind, sh.c, sh.h, sh.w, static_cast<double>(t)) > 0.0)) continue;
      for (int64_t p = t - 1; p <= t; ++p) {
        if (p < 0 || p > L - 2 || p <= last) continue;
        last = p;
        if (++count[p] >= 2) hit = true;
      }
    }
    if (hit) break;
  }
  std::fill(count.begin(), count.end(), uint8_t{0});
  return hit;
}

// Adds the rendering of the shapes (with heights h) into signal as a max.
void render_into(const std::array<Shape1d, kShapes>& s, const std::array<double, kShapes>& h, int64_t L,
                 double* signal) {
  std::fill(signal, signal + L, 0.0);
  for (int k = 0; k < kShapes; ++k) {
    int64_t lo, hi;
    support_window(s[k].c, s[k].w, L, lo, hi);
    for (int64_t t = lo; t <= hi; ++t)
      signal[t] = std::max(signal[t], render_one(s[k].kind, s[k].c, h[k], s[k].w, static_cast<double>(t)));
  }
}

void check_options(int64_t n, const ShapesOptions& o) {
  auto finite = [](double v) { return std::isfinite(v); };
  if (n < 0) fail("generate_shapes: expected n >= 0, got {}", n);
  if (!(finite(o.height_min) && finite(o.height_max) && o.height_min > 0 && o.height_min <= o.height_max))
    fail("generate_shapes: expected 0 < height_min <= height_max, got height_min={} height_max={}", o.height_min,
         o.height_max);
  if (!(finite(o.width_min) && finite(o.width_max) && o.width_min > 0 && o.width_min <= o.width_max))
    fail("generate_shapes: expected 0 < width_min <= width_max, got width_min={} width_max={}", o.width_min,
         o.width_max);
  if (static_cast<double>(o.length) <= o.width_max)
    fail("generate_shapes: length={} leaves no room for centres in [width_max / 2, length - width_max / 2] "
         "(width_max={}); expected length > width_max",
         o.length, o.width_max);
  if (!(finite(o.noise) && o.noise >= 0)) fail("generate_shapes: expected noise >= 0, got {}", o.noise);
  if (!(finite(o.min_height_gap) && o.min_height_gap >= 0))
    fail("generate_shapes: expected min_height_gap >= 0, got {}", o.min_height_gap);
  if (o.group_by_location && o.boxes_must_differ)
    fail("generate_shapes: boxes_must_differ applies to the default task only, not with group_by_location "
         "(whose validity rule compares the left and right mean heights)");
  if (o.max_attempts < 1) fail("generate_shapes: expected max_attempts >= 1, got {}", o.max_attempts);
}

}  // namespace

int64_t positional_channels(int64_t length) {
  if (length < 1) fail("positional_channels: expected length >= 1, got {}", length);
  int64_t p = 0;
  while ((int64_t{1} << p) < length) ++p;
  return p;
}

Tensor positional_encoding(int64_t length) {
  const int64_t P = positional_channels(length);
  Tensor out = Tensor::empty({P, length}, DType::f32);  // [P, L]
  float* o = out.data<float>();
  for (int64_t k = 0; k < P; ++k)
    for (int64_t t = 0; t < length; ++t) o[k * length + t] = static_cast<float>((t >> k) & 1);
  return out;
}

ShapesSet generate_shapes(int64_t n, Generator& g, const ShapesOptions& opt) {
  check_options(n, opt);
  const int64_t L = opt.length;
  const int64_t P = opt.positional ? positional_channels(L) : 0;
  const int64_t C = 1 + P;

  ShapesSet set;
  set.input = Tensor::empty({n, C, L}, DType::f32);
  set.target = Tensor::empty({n, 1, L}, DType::f32);
  set.centres = Tensor::empty({n, kShapes}, DType::f32);
  set.widths = Tensor::empty({n, kShapes}, DType::f32);
  set.heights = Tensor::empty({n, kShapes}, DType::f32);
  set.target_heights = Tensor::empty({n, kShapes}, DType::f32);
  set.kinds = Tensor::empty({n, kShapes}, DType::i64);
  set.partner = Tensor::empty({n, kShapes}, DType::i64);
  if (n == 0) return set;

  float* in = set.input.data<float>();
  float* tg = set.target.data<float>();
  float* pc = set.centres.data<float>();
  float* pw = set.widths.data<float>();
  float* ph = set.heights.data<float>();
  float* pth = set.target_heights.data<float>();
  int64_t* pk = set.kinds.data<int64_t>();
  int64_t* pp = set.partner.data<int64_t>();
  const Tensor bits = opt.positional ? positional_encoding(L) : Tensor();  // [P, L]

  const uint64_t first = g.reserve(static_cast<uint64_t>(n));
  const double c_lo = opt.width_max / 2.0, c_hi = static_cast<double>(L) - opt.width_max / 2.0;
  const double gap = opt.min_height_gap;
  const Generator& gen = g;

  int64_t failed = -1;  // a sample that ran out of attempts (reported after the loop)
#pragma omp parallel
  {
    std::vector<uint8_t> count(static_cast<size_t>(L - 1), 0);  // dilated supports per pooled position
    std::vector<double> signal(static_cast<size_t>(L));         // [L] noiseless rendering
#pragma omp for schedule(dynamic, 64)
    for (int64_t i = 0; i < n; ++i) {
      SampleStream rs(gen, first + static_cast<uint64_t>(i));
      std::array<Shape1d, kShapes> s{};
      std::array<int, kShapes> partner = kKindPartner;
      bool accepted = false;
      for (int64_t attempt = 0; attempt < opt.max_attempts && !accepted; ++attempt) {
        for (int k = 0; k < kShapes; ++k) {
          // Rounded to float32 first: the stored geometry is then exactly what was rendered.
          s[k].c = static_cast<float>(c_lo + (c_hi - c_lo) * rs.uniform53());
          s[k].h = static_cast<float>(opt.height_min + (opt.height_max - opt.height_min) * rs.uniform53());
          s[k].w = static_cast<float>(opt.width_min + (opt.width_max - opt.width_min) * rs.uniform53());
          s[k].kind = kKinds[k];
        }
        bool valid;
        if (opt.group_by_location) {
          std::array<int, kShapes> order = {0, 1, 2, 3};
          std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return s[a].c < s[b].c; });
          partner[order[0]] = order[1];
          partner[order[1]] = order[0];
          partner[order[2]] = order[3];
          partner[order[3]] = order[2];
          const double left = (s[order[0]].h + s[order[1]].h) / 2.0;
          const double right = (s[order[2]].h + s[order[3]].h) / 2.0;
          valid = std::abs(left - right) > gap;
        } else {
          valid = std::abs(s[0].h - s[1].h) > gap && (!opt.boxes_must_differ || std::abs(s[2].h - s[3].h) > gap);
        }
        accepted = valid && !collides(s, L, count);
      }
      if (!accepted) {
#pragma omp critical(heed_shapes_failed)
        failed = i;
        continue;
      }

      std::array<double, kShapes> h{}, th{};
      for (int k = 0; k < kShapes; ++k) {
        h[k] = s[k].h;
        th[k] = (s[k].h + s[partner[k]].h) / 2.0;
        pc[i * kShapes + k] = static_cast<float>(s[k].c);
        pw[i * kShapes + k] = static_cast<float>(s[k].w);
        ph[i * kShapes + k] = static_cast<float>(s[k].h);
        pth[i * kShapes + k] = static_cast<float>(th[k]);
        pk[i * kShapes + k] = s[k].kind;
        pp[i * kShapes + k] = partner[k];
      }
      const double a = opt.noise;
      float* x = in + i * C * L;  // [C, L]
      render_into(s, h, L, signal.data());
      for (int64_t t = 0; t < L; ++t) {
        const auto noise = static_cast<float>(-a + 2.0 * a * rs.uniform24());
        x[t] = static_cast<float>(signal[t] + static_cast<double>(noise));
      }
      if (P > 0) std::memcpy(x + L, bits.data<float>(), static_cast<size_t>(P * L) * sizeof(float));
      float* y = tg + i * L;  // [L]
      render_into(s, th, L, signal.data());
      for (int64_t t = 0; t < L; ++t) {
        const auto noise = static_cast<float>(-a + 2.0 * a * rs.uniform24());
        y[t] = static_cast<float>(signal[t] + static_cast<double>(noise));
      }
    }
  }
  if (failed >= 0)
    fail("generate_shapes: no valid sample after max_attempts={} draws (sample {}); with length={}, "
         "width_max={} and min_height_gap={} almost every draw collides or is invalid",
         opt.max_attempts, failed, L, opt.width_max, gap);
  return set;
}

Tensor render_shapes(const Tensor& centres, const Tensor& widths, const Tensor& heights, const Tensor& kinds,
                     int64_t length) {
  for (const Tensor* t : {&centres, &widths, &heights, &kinds}) check_defined(*t, "render_shapes");
  if (length < 1) fail("render_shapes: expected length >= 1, got {}", length);
  if (centres.dim() != 2)
    fail("render_shapes: expected centres of shape [N, S], got {}", shape_str(centres.shape()));
  for (const Tensor* t : {&widths, &heights, &kinds})
    if (t->shape() != centres.shape())
      fail("render_shapes: centres {}, widths {}, heights {} and kinds {} must share one shape [N, S]",
           shape_str(centres.shape()), shape_str(widths.shape()), shape_str(heights.shape()),
           shape_str(kinds.shape()));
  check_dtype(kinds, DType::i64, "render_shapes");
  const int64_t N = centres.size(0), S = centres.size(1);
  const std::vector<double> c = centres.to_vector<double>(), w = widths.to_vector<double>(),
                            h = heights.to_vector<double>();
  const std::vector<int64_t> k = kinds.to_vector<int64_t>();
  for (int64_t j = 0; j < N * S; ++j)
    if (k[j] != kTriangle && k[j] != kBox)
      fail("render_shapes: kinds must be 0 (triangle) or 1 (box), got {} at flat index {}", k[j], j);
  Tensor out = Tensor::zeros({N, 1, length}, DType::f32);  // [N, 1, L]
  float* o = out.data<float>();
  for (int64_t i = 0; i < N; ++i) {
    for (int64_t t = 0; t < length; ++t) {
      double v = 0.0;
      for (int64_t s = 0; s < S; ++s) {
        const int64_t j = i * S + s;
        v = std::max(v, render_one(k[j], c[j], h[j], w[j], static_cast<double>(t)));
      }
      o[i * length + t] = static_cast<float>(v);
    }
  }
  return out;
}

// ---- Standardizer ----

namespace {
void check_nct(const Tensor& x, const char* op) {
  check_defined(x, op);
  if (x.dim() != 3) fail("{}: expected an input of shape [N, C, L], got {}", op, shape_str(x.shape()));
  if (!x.is_floating()) fail("{}: expected a float32 or float64 input, got {}", op, dtype_name(x.dtype()));
}
}  // namespace

void Standardizer::fit(const Tensor& x) {
  check_nct(x, "Standardizer::fit");
  const std::vector<double> v = kernel::narrow(x, 1, 0, 1).to_vector<double>();  // channel 0, [N, 1, L]
  if (v.size() < 2) fail("Standardizer::fit: expected at least 2 signal values, got {}", v.size());
  // Two passes (mean, then squared deviations) in double: exact enough for
  // millions of float32 values, unlike the one-pass sum of squares.
  double m = 0.0;
  for (double a : v) m += a;
  m /= static_cast<double>(v.size());
  double ss = 0.0;
  for (double a : v) ss += (a - m) * (a - m);
  const double s = std::sqrt(ss / static_cast<double>(v.size() - 1));
  if (!(s > 0.0) || !std::isfinite(s))
    fail("Standardizer::fit: the signal channel has standard deviation {} (constant or non-finite input)", s);
  mean = m;
  std = s;
}

Tensor Standardizer::apply(const Tensor& x) const {
  check_nct(x, "Standardizer::apply");
  if (!(std > 0.0)) fail("Standardizer::apply: not fitted (std = {}); call fit() on the training inputs first", std);
  Tensor out = kernel::clone(x);  // [N, C, L], contiguous
  const int64_t N = out.size(0), C = out.size(1), L = out.size(2);
  const int64_t channels = signal_only ? std::min<int64_t>(C, 1) : C;
  auto run = [&]<class T>(T* p) {
    const double m = mean, inv = 1.0 / std;
    for (int64_t i = 0; i < N; ++i)
      for (int64_t c = 0; c < channels; ++c) {
        T* row = p + (i * C + c) * L;
        for (int64_t t = 0; t < L; ++t) row[t] = static_cast<T>((static_cast<double>(row[t]) - m) * inv);
      }
  };
  if (out.dtype() == DType::f32)
    run(out.data<float>());
  else
    run(out.data<double>());
  return out;
}

Tensor Standardizer::state() const { return Tensor::from_f64({mean, std}, {2}); }

void Standardizer::set_state(const Tensor& s) {
  check_defined(s, "Standardizer::set_state");
  check_dtype(s, DType::f64, "Standardizer::set_state");
  if (s.shape() != Shape{2})
    fail("Standardizer::set_state: expected shape [2] {{mean, std}} as returned by state(), got {}",
         shape_str(s.shape()));
  const std::vector<double> v = s.to_vector<double>();
  if (!std::isfinite(v[0]) || !(v[1] > 0.0) || !std::isfinite(v[1]))
    fail("Standardizer::set_state: expected a finite mean and std > 0, got mean={} std={}", v[0], v[1]);
  mean = v[0];
  std = v[1];
}

}  // namespace heed::data
