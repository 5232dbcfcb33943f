// experiments/timeseries_task.cpp
#include "experiments/timeseries_task.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/kernels.h"
#include "experiments/common.h"

namespace heed::experiments {

namespace {

void check_options(const SeriesOptions& o) {
  if (o.length < 2) fail("timeseries: the length must be at least 2, got {}", o.length);
  if (!(o.period_min >= 2.0 && o.period_max >= o.period_min))
    fail("timeseries: expected 2 <= period_min <= period_max, got period_min={} period_max={}", o.period_min,
         o.period_max);
  if (o.harmonics < 1) fail("timeseries: harmonics must be at least 1, got {}", o.harmonics);
  if (!(o.noise_min >= 0.0 && o.noise_max >= o.noise_min))
    fail("timeseries: expected 0 <= noise_min <= noise_max, got noise_min={} noise_max={}", o.noise_min, o.noise_max);
  if (o.anomalies_max < 0) fail("timeseries: anomalies_max must be >= 0, got {}", o.anomalies_max);
  if (!(o.anomaly_min >= 0.0 && o.anomaly_max >= o.anomaly_min))
    fail("timeseries: expected 0 <= anomaly_min <= anomaly_max, got anomaly_min={} anomaly_max={}", o.anomaly_min,
         o.anomaly_max);
  if (o.anomaly_width_max < 1) fail("timeseries: anomaly_width_max must be at least 1, got {}", o.anomaly_width_max);
}

float f32(double v) { return static_cast<float>(v); }

// clean(t) from float32 parameters, in float64.
double clean_value(double t, double P, double phi, const float* a, const float* b, int64_t R) {
  double s = 0, power = 0;
  for (int64_t k = 1; k <= R; ++k) {
    const double ak = a[k - 1];
    s += ak * std::sin(2.0 * std::numbers::pi * static_cast<double>(k) * (t / P + phi) + b[k - 1]);
    power += ak * ak / 2.0;
  }
  return s / std::sqrt(power);  // a_1 >= 0.5: never 0
}

}  // namespace

double series_bytes(int64_t n, const SeriesOptions& o) {
  const auto T = static_cast<double>(o.length), R = static_cast<double>(o.harmonics),
             A = static_cast<double>(o.anomalies_max);
  return static_cast<double>(n) * (3 * 4 * T + 3 * 4 + 2 * 4 * R + (8 + 8 + 4) * A);
}

SeriesSet generate_series(int64_t n, Generator& g, const SeriesOptions& o) {
  check_options(o);
  if (n < 0) fail("timeseries: cannot generate {} samples", n);
  const int64_t T = o.length, R = o.harmonics, A = o.anomalies_max;
  SeriesSet s;
  s.input = Tensor::zeros({n, T});
  s.target = Tensor::zeros({n, T});
  s.clean = Tensor::zeros({n, T});
  s.period = Tensor::zeros({n});
  s.phase = Tensor::zeros({n});
  s.amplitude = Tensor::zeros({n, R});
  s.offset = Tensor::zeros({n, R});
  s.noise = Tensor::zeros({n});
  s.anomaly_position = Tensor::full({n, A}, -1, DType::i64);
  s.anomaly_width = Tensor::zeros({n, A}, DType::i64);
  s.anomaly_height = Tensor::zeros({n, A});
  float* x = s.input.data<float>();
  float* y = s.target.data<float>();
  float* c = s.clean.data<float>();
  float* P = s.period.data<float>();
  float* phi = s.phase.data<float>();
  float* a = s.amplitude.data<float>();
  float* b = s.offset.data<float>();
  float* sigma = s.noise.data<float>();
  int64_t* ap = s.anomaly_position.data<int64_t>();
  int64_t* aw = s.anomaly_width.data<int64_t>();
  float* ah = s.anomaly_height.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    P[i] = f32(o.period_min + (o.period_max - o.period_min) * g.uniform());
    phi[i] = f32(g.uniform());
    float* ai = a + i * R;
    float* bi = b + i * R;
    for (int64_t k = 1; k <= R; ++k) {
      const double u = g.uniform();
      ai[k - 1] = f32(k == 1 ? 0.5 + 0.5 * u : (2.0 * u - 1.0) / std::sqrt(static_cast<double>(k)));
      bi[k - 1] = f32(2.0 * std::numbers::pi * g.uniform());
    }
    sigma[i] = f32(o.noise_min + (o.noise_max - o.noise_min) * g.uniform());
    const int64_t m = g.randint(0, A + 1);
    for (int64_t j = 0; j < m; ++j) {
      ap[i * A + j] = g.randint(0, T);
      aw[i * A + j] = g.randint(1, o.anomaly_width_max + 1);
      const double sign = g.uniform() < 0.5 ? -1.0 : 1.0;
      ah[i * A + j] = f32(sign * (o.anomaly_min + (o.anomaly_max - o.anomaly_min) * g.uniform()));
    }
    for (int64_t t = 0; t <= T; ++t) {
      const double v = clean_value(static_cast<double>(t), P[i], phi[i], ai, bi, R);
      if (t < T) c[i * T + t] = f32(v);
      if (t > 0) y[i * T + t - 1] = f32(v);
      if (t == T) break;
      double spikes = 0;
      for (int64_t j = 0; j < m; ++j)
        if (ap[i * A + j] <= t && t < ap[i * A + j] + aw[i * A + j]) spikes += ah[i * A + j];
      x[i * T + t] = f32(v + static_cast<double>(sigma[i]) * g.normal() + spikes);
    }
  }
  return s;
}

int64_t first_scored_position(const SeriesOptions& o) {
  return std::min<int64_t>(static_cast<int64_t>(std::ceil(o.period_max)), o.length - 1);
}

Tensor render_clean(const Tensor& period0, const Tensor& phase0, const Tensor& amplitude0, const Tensor& offset0,
                    int64_t length) {
  const int64_t N = period0.size(0), R = amplitude0.dim() == 2 ? amplitude0.size(1) : 0;
  if (period0.shape() != Shape{N} || phase0.shape() != Shape{N} || amplitude0.shape() != Shape{N, R} ||
      offset0.shape() != Shape{N, R} || R < 1)
    fail("render_clean: expected period [N], phase [N], amplitude and offset [N, R], got {}, {}, {}, {}",
         shape_str(period0.shape()), shape_str(phase0.shape()), shape_str(amplitude0.shape()),
         shape_str(offset0.shape()));
  Tensor P = kernel::contiguous(kernel::to_dtype(period0, DType::f32));
  Tensor phi = kernel::contiguous(kernel::to_dtype(phase0, DType::f32));
  Tensor a = kernel::contiguous(kernel::to_dtype(amplitude0, DType::f32));
  Tensor b = kernel::contiguous(kernel::to_dtype(offset0, DType::f32));
  Tensor out = Tensor::zeros({N, length});
  float* po = out.data<float>();
  for (int64_t i = 0; i < N; ++i)
    for (int64_t t = 0; t < length; ++t)
      po[i * length + t] = f32(clean_value(static_cast<double>(t), P.data<float>()[i], phi.data<float>()[i],
                                           a.data<float>() + i * R, b.data<float>() + i * R, R));
  return out;
}

// ---- same-phase attention ----

double PhaseScore::mean() const {
  double s = 0;
  for (size_t h = 0; h < mass.size(); ++h) s += head(h);
  return mass.empty() ? 0.0 : s / static_cast<double>(mass.size());
}

double PhaseScore::best() const {
  double b = 0;
  for (size_t h = 0; h < mass.size(); ++h) b = std::max(b, head(h));
  return b;
}

void PhaseScore::add(const PhaseScore& o) {
  if (mass.empty()) mass.assign(o.mass.size(), 0.0);
  if (mass.size() != o.mass.size()) fail("PhaseScore: cannot pool {} heads with {}", mass.size(), o.mass.size());
  for (size_t h = 0; h < mass.size(); ++h) mass[h] += o.mass[h];
  uniform += o.uniform;
  queries += o.queries;
}

PhaseScore same_phase_attention(const Tensor& attn0, const Tensor& period0, double window) {
  if (attn0.dim() != 4 || attn0.size(2) != attn0.size(3))
    fail("same_phase_attention: expected attention [N, H, T, T], got {}", shape_str(attn0.shape()));
  const int64_t N = attn0.size(0), H = attn0.size(1), T = attn0.size(2);
  if (period0.shape() != Shape{N})
    fail("same_phase_attention: expected period [{}], got {}", N, shape_str(period0.shape()));
  if (!(window >= 0)) fail("same_phase_attention: the window must be >= 0, got {}", window);
  Tensor attn = kernel::contiguous(kernel::to_dtype(attn0, DType::f32));
  Tensor period = kernel::contiguous(kernel::to_dtype(period0, DType::f64));
  const float* A = attn.data<float>();
  const double* pp = period.data<double>();
  PhaseScore r;
  r.mass.assign(static_cast<size_t>(H), 0.0);
  // in[L]: whether a key L positions before the predicted position t + 1
  // (L = t + 1 - j, 1 .. T) is within the window of a multiple k >= 1 of P.
  std::vector<char> in(static_cast<size_t>(T + 1));
  for (int64_t n = 0; n < N; ++n) {
    const double P = pp[n];
    for (int64_t L = 0; L <= T; ++L) {
      const double k = std::max(1.0, std::round(static_cast<double>(L) / P));
      in[static_cast<size_t>(L)] = std::abs(static_cast<double>(L) - k * P) <= window;
    }
    for (int64_t t = 0; t < T; ++t) {
      if (static_cast<double>(t + 1) < P + window) continue;
      int64_t count = 0;
      for (int64_t j = 0; j <= t; ++j) count += in[static_cast<size_t>(t + 1 - j)];
      r.uniform += static_cast<double>(count) / static_cast<double>(t + 1);
      ++r.queries;
      for (int64_t h = 0; h < H; ++h) {
        const float* row = A + ((n * H + h) * T + t) * T;
        double m = 0;
        for (int64_t j = 0; j <= t; ++j)
          if (in[static_cast<size_t>(t + 1 - j)]) m += row[j];
        r.mass[static_cast<size_t>(h)] += m;
      }
    }
  }
  return r;
}

// ---- models ----

CausalConv1d::CausalConv1d(int64_t in, int64_t out, int64_t kernel, Generator* g) : Module("CausalConv1d") {
  conv = register_module(
      "conv", std::make_shared<nn::Conv1d>(nn::Conv1dOptions(in, out, kernel).padding(kernel - 1).generator(g)));
}

// Padding kernel - 1 on both sides gives T + kernel - 1 outputs; output t of
// the first T reads inputs t - kernel + 1 .. t.
Tensor CausalConv1d::forward(const Tensor& x) { return narrow(conv->forward(x), 2, 0, x.size(2)); }
Tensor CausalConv1d::forward_relu(const Tensor& x) {
  const nn::Conv1dOptions& o = conv->options;
  return narrow(conv1d_relu(x, conv->weight, conv->bias, o.stride_, o.padding_, o.dilation_), 2, 0, x.size(2));
}

std::string CausalConv1d::extra_repr() const {
  return fmt::format("{}, {}, kernel_size={}, causal", conv->options.in_, conv->options.out_, conv->options.kernel_);
}

AttentionForecaster::AttentionForecaster(int64_t dim, int64_t heads, int64_t layers, int64_t kernel, Generator* g)
    : Module("AttentionForecaster") {
  embed = register_module("embed", std::make_shared<CausalConv1d>(1, dim, kernel, g));
  for (int64_t l = 0; l < layers; ++l)
    blocks.push_back(register_module("block" + std::to_string(l),
                                     std::make_shared<nn::TransformerBlock>(
                                         nn::TransformerBlockOptions(dim, heads).causal(true).generator(g))));
  ln = register_module("ln", std::make_shared<nn::LayerNorm>(dim));
  head = register_module("head", std::make_shared<nn::Linear>(nn::LinearOptions(dim, 1).generator(g)));
}

Tensor AttentionForecaster::forward(const Tensor& x) {  // [N, T]
  Tensor h = transpose(embed->forward_relu(unsqueeze(x, 1)), 1, 2);  // [N, T, D]
  for (auto& b : blocks) h = b->forward(h);
  return squeeze(head->forward(ln->forward(h)), -1);  // [N, T]
}

ConvForecaster::ConvForecaster(int64_t channels, int64_t layers, int64_t kernel, Generator* g)
    : Module("ConvForecaster") {
  for (int64_t l = 0; l < layers; ++l)
    convs.push_back(register_module(std::to_string(l), std::make_shared<CausalConv1d>(l == 0 ? 1 : channels, channels,
                                                                                      kernel, g)));
  out = register_module("out", std::make_shared<nn::Conv1d>(nn::Conv1dOptions(channels, 1, 1).generator(g)));
}

Tensor ConvForecaster::forward(const Tensor& x) {  // [N, T]
  Tensor h = unsqueeze(x, 1);  // [N, 1, T]
  for (auto& c : convs) h = c->forward_relu(h);
  return squeeze(out->forward(h), 1);
}

// Peaks measured (resident, the whole process, --steps 1: one step of each
// model and one evaluation), against this: the defaults (both models,
// --length 128, --dim 32, --heads 2, --layers 1, --cnn-channels 24,
// --cnn-layers 4, --kernel 7) with --batch 256: 0.24 GB, this 0.21 GB;
// --batch 1024: 0.72 GB, this 0.72 GB; --batch 4096: 2.69 GB, this 2.79 GB;
// --model attention --batch 4096: 2.10 GB, this 2.03 GB; --model cnn --batch
// 4096: 0.64 GB, this 0.76 GB; --length 512 --batch 512: 2.22 GB, this 2.26
// GB; --length 64 --batch 2048: 0.78 GB, this 0.79 GB; --model attention
// --dim 64 --heads 4 --layers 2 --batch 1024: 1.65 GB, this 1.57 GB; --model
// cnn --cnn-channels 48 --kernel 3 --batch 2048: 0.62 GB, this 0.54 GB. (The
// program itself, about 50 MB, is in the peaks, not in this.)
double timeseries_memory(const SeriesOptions& o, const ForecasterSizes& m, int64_t batch, int64_t test,
                         int64_t chunk) {
  const auto T = static_cast<double>(o.length), D = static_cast<double>(m.dim), H = static_cast<double>(m.heads),
             Y = static_cast<double>(m.layers), K = static_cast<double>(m.kernel),
             C = static_cast<double>(m.cnn_channels), Z = static_cast<double>(m.cnn_layers),
             B = static_cast<double>(batch), E = static_cast<double>(std::min(chunk, test));
  // The test set and a step's batch, in every moment.
  const LiveBlocks data = {{series_bytes(test, o), 1}, {series_bytes(batch, o), 1}};
  auto with_data = [&](LiveBlocks blocks) {
    blocks.insert(blocks.end(), data.begin(), data.end());
    return blocks;
  };
  std::vector<LiveBlocks> moments = {with_data({})};
  if (m.attention) {
    // Per block, float32: n positions, each with D floats (act), the 3 D
    // query/key/value projection (qkv), the feed-forward's 4 D (hidden), a
    // layer norm's mean or variance (stat), the heads' log-sum-exps (lse),
    // the causal convolution's T + kernel - 1 outputs of D channels (conv);
    // the fused attention keeps a step's probabilities when all keys are one
    // block (core/cpu_attention.cpp: 64 keys, causal).
    const double n = B * T, act = 4 * n * D, qkv = 4 * n * 3 * D, hidden = 4 * n * 4 * D, stat = 4 * n,
                 lse = 4 * n * H, conv = 4 * B * D * (T + K - 1), probs = T <= 64 ? 4 * B * H * T * T : 0;
    // The embedding convolution, each block's 12 D^2 (attention without
    // bias, feed-forward) and biases and layer norms, the read-out; then
    // with their gradients and the optimiser's two moments beside them.
    const double weights = 4 * (K * D + D + Y * (12 * D * D + 9 * D) + 2 * D + D + 1);
    // The step's backward through the last block's feed-forward: what each
    // block saved (as a GPT block's, charlm.cpp), the embedding's output and
    // its transposed copy, the last layer norm's input and output, and the
    // gradients in flight: two of the residual stream's, the hidden layer's,
    // the projections' (the attention's backward).
    moments.push_back(with_data({{weights, 2},
                                 {act, 5 * Y + 5},
                                 {qkv, Y + 1},
                                 {hidden, 2 * Y + 1},
                                 {stat, 4 * Y + 2},
                                 {lse, Y},
                                 {probs, Y},
                                 {conv, 1}}));
    // An evaluation's last layer (the maps kept, the unfused path): the maps
    // of the layers before it, its scores, their masked copy and softmax,
    // the residual stream, its layer-normed copy, queries, keys and values.
    const double ne = E * T;
    moments.push_back(with_data({{weights, 4}, {4 * E * H * T * T, Y + 2}, {4 * ne * D, 6}, {4 * ne * 4 * D, 1}}));
  }
  if (m.cnn) {
    // Per layer, float32: its T + kernel - 1 outputs of C channels (saved for
    // the ReLU's backward, and the next layer's input), and the whole batch's
    // unfolded input (kernel x C values an output position) the products
    // read. The backward holds every layer's output, the read-out's, and
    // the gradients of a layer's output and input.
    const double out = 4 * B * C * (T + K - 1), cols = 4 * B * (T + K - 1) * K * C;
    const double weights = 4 * (K * C + C + (Z - 1) * (K * C * C + C) + C + 1);
    moments.push_back(with_data({{weights, 2}, {out, Z + 3}, {cols, 1}}));
    moments.push_back(with_data({{weights, 4}, {4 * E * C * (T + K - 1), 3}, {4 * E * (T + K - 1) * K * C, 1}}));
  }
  return tensor_memory(moments);
}

}  // namespace heed::experiments
