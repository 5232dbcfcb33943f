// experiments/timeseries_task.h: the lectures' time-series example as a task
// (`heed run timeseries`): a periodic signal with noise and anomalies, and the
// next value of its clean pattern to predict at every position. Attention
// can look up what the signal did one or more periods earlier; the measure
// here says how much of each query's attention falls at the same phase of
// earlier cycles.
//
// One sample, of T observed values x_0 .. x_{T-1}, draws from its generator,
// in this order (every draw a scalar draw of heed::Generator, one block each):
//   period P  = period_min + (period_max - period_min) u
//   phase  phi = u                                   (a fraction of a cycle)
//   for k = 1 .. harmonics: amplitude a_k, offset b_k = 2 pi u, where
//     a_1 = 0.5 + 0.5 u (the fundamental is never faint, so P is the period)
//     a_k = (2u - 1) / sqrt(k) for k >= 2 (a pattern with corners: the next
//     value is hard to extrapolate from the last few, easy to look up one
//     period back)
//   noise sigma = noise_min + (noise_max - noise_min) u
//   anomaly count m = randint(0, anomalies_max + 1), then per anomaly:
//     position p = randint(0, T), width w = randint(1, anomaly_width_max + 1),
//     sign (u < 0.5: -1, else +1), size anomaly_min + (anomaly_max - anomaly_min) u
//   T standard normals e_t (Box-Muller), the noise of x_0 .. x_{T-1}
// u is uniform in [0, 1). Every parameter is rounded to float32 first (that is
// what the tensors hold); the signal is computed in float64 from those values:
//   clean(t) = sum_k a_k sin(2 pi k (t / P + phi) + b_k) / sqrt(sum_k a_k^2 / 2)
//   x_t      = clean(t) + sigma e_t + sum of the heights of the anomalies with p <= t < p + w
// so the clean pattern has unit root-mean-square, and the target at position
// t is clean(t + 1): the next value without noise or anomaly.
//
// Legend: N samples, T positions, H heads, A = anomalies_max, R = harmonics.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "heed.h"

namespace heed::experiments {

struct SeriesOptions {
  int64_t length = 128;  // T
  double period_min = 12.0, period_max = 24.0;
  int64_t harmonics = 5;  // R
  double noise_min = 0.05, noise_max = 0.3;
  int64_t anomalies_max = 3;  // A
  double anomaly_min = 2.0, anomaly_max = 4.0;  // |height|
  int64_t anomaly_width_max = 3;
};

struct SeriesSet {
  Tensor input;      // [N, T] f32: x_t
  Tensor target;     // [N, T] f32: clean(t + 1)
  Tensor clean;      // [N, T] f32: clean(t)
  Tensor period;     // [N] f32
  Tensor phase;      // [N] f32, in [0, 1)
  Tensor amplitude;  // [N, R] f32
  Tensor offset;     // [N, R] f32
  Tensor noise;      // [N] f32: sigma
  Tensor anomaly_position;  // [N, A] i64; -1 past the sample's count
  Tensor anomaly_width;     // [N, A] i64; 0 past the count
  Tensor anomaly_height;    // [N, A] f32; 0 past the count
  int64_t size() const { return input.defined() ? input.size(0) : 0; }
};

// n samples as described above; advances g by the draws of each sample in
// turn. Throws naming the option when the options make no sense.
SeriesSet generate_series(int64_t n, Generator& g, const SeriesOptions& o = {});
// The bytes n samples of generate_series take: input, target and clean
// signals, period, phase and noise, R amplitudes and offsets (float32), A
// anomalies' positions and widths (int64) and heights (float32).
double series_bytes(int64_t n, const SeriesOptions& o);

// The first position scored: the first ceil(period_max) positions have no
// earlier cycle to look at, so losses and test errors leave them out.
int64_t first_scored_position(const SeriesOptions& o);

// The clean pattern at positions 0 .. length-1 from the stored parameters
// (period [N], phase [N], amplitude and offset [N, R]): [N, length] f32.
Tensor render_clean(const Tensor& period, const Tensor& phase, const Tensor& amplitude, const Tensor& offset,
                    int64_t length);

// Same-phase attention. The query at position t forecasts position t + 1;
// a key j <= t lies at the same phase of an earlier cycle when it is within
// `window` steps of t + 1 - k P for some k >= 1: min_{k >= 1} |t + 1 - j - k P|
// <= window. Queries with t + 1 >= P + window count (each has a whole window
// one cycle back). mass[h] sums head h's attention on those keys over the
// queries; uniform sums what attention spread evenly over the t + 1 keys
// would put there. Sums, so batches can be pooled.
struct PhaseScore {
  std::vector<double> mass;  // per head
  double uniform = 0;
  int64_t queries = 0;
  double head(size_t h) const { return queries > 0 ? mass[h] / static_cast<double>(queries) : 0.0; }
  double mean() const;       // over heads: the heads' average attention
  double best() const;       // the head that attends most to the same phase
  double baseline() const { return queries > 0 ? uniform / static_cast<double>(queries) : 0.0; }
  void add(const PhaseScore& o);
};
// attn [N, H, T, T] (row = query, causal), period [N].
PhaseScore same_phase_attention(const Tensor& attn, const Tensor& period, double window);

// ---- the two forecasters: [N, T] -> [N, T], position t predicts clean(t + 1) ----

// Conv1d whose output at t sees inputs t - kernel + 1 .. t only: [N, C, T] -> [N, O, T].
class CausalConv1d : public nn::Module {
 public:
  CausalConv1d(int64_t in, int64_t out, int64_t kernel, Generator* g);
  Tensor forward(const Tensor& x) override;
  Tensor forward_relu(const Tensor& x);  // relu(forward(x)), one fused op
  std::string extra_repr() const override;
  std::shared_ptr<nn::Conv1d> conv;
};

// A causal convolution embeds each position with its last `kernel` values
// (ReLU), then `layers` causal pre-LayerNorm transformer blocks (multi-head
// self-attention and a feed-forward layer, each with a residual connection),
// a final LayerNorm and a linear read-out.
class AttentionForecaster : public nn::Module {
 public:
  AttentionForecaster(int64_t dim, int64_t heads, int64_t layers, int64_t kernel, Generator* g);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::MultiHeadAttention> attention(size_t layer) const { return blocks[layer]->attn; }
  std::shared_ptr<CausalConv1d> embed;
  std::vector<std::shared_ptr<nn::TransformerBlock>> blocks;
  std::shared_ptr<nn::LayerNorm> ln;
  std::shared_ptr<nn::Linear> head;
};

// `layers` causal convolutions of `channels` channels (ReLU), receptive field
// layers (kernel - 1) + 1, and a 1x1 read-out.
class ConvForecaster : public nn::Module {
 public:
  ConvForecaster(int64_t channels, int64_t layers, int64_t kernel, Generator* g);
  Tensor forward(const Tensor& x) override;
  std::vector<std::shared_ptr<CausalConv1d>> convs;
  std::shared_ptr<nn::Conv1d> out;
};

// The sizes of `heed run timeseries`'s two forecasters (either may be left out).
struct ForecasterSizes {
  bool attention = true, cnn = true;
  int64_t dim = 32, heads = 2, layers = 1, kernel = 7;  // AttentionForecaster (and both models' kernel)
  int64_t cnn_channels = 24, cnn_layers = 4;            // ConvForecaster
};

// The memory a `heed run timeseries` takes, in bytes (tensor_memory,
// experiments/common.h): its test set of `test` signals and a step's batch,
// the models' weights, gradients and optimiser state, each model's training
// step on `batch` signals where its activations and gradients are most, and
// an evaluation of `chunk` test signals at a time that keeps every layer's
// attention maps. Peaks measured against it: timeseries_task.cpp.
double timeseries_memory(const SeriesOptions& o, const ForecasterSizes& m, int64_t batch, int64_t test,
                         int64_t chunk);

}  // namespace heed::experiments
