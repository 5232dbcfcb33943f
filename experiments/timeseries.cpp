// experiments/timeseries.cpp: `heed run timeseries`: a causal attention
// forecaster and a causal CNN of about the same size learn to predict the next
// clean value of periodic signals with noise and anomalies, on the same
// batches; the log holds both test errors, the attention maps of a few test
// signals and how much attention falls at the same phase of earlier cycles.
#include "experiments/timeseries.h"

#include <cmath>
#include <functional>
#include <memory>
#include <optional>

#include "core/kernels.h"
#include "experiments/common.h"
#include "experiments/timeseries_task.h"
#include "heed.h"

namespace heed::experiments {

namespace {

constexpr int64_t kLoggedSignals = 4;     // test signals whose forecasts and attention maps are logged
constexpr int64_t kSignalsPerEval = 128;  // test signals per forward pass in evaluation

struct TimeseriesConfig {
  std::string model = "both";
  int64_t batch = 32;
  double lr = 3e-3;
  int64_t dim = 32, heads = 2, layers = 1, kernel = 7;
  int64_t cnn_channels = 24, cnn_layers = 4;
  SeriesOptions series;  // the task's knobs, with their defaults
  double window = 1;
  int64_t test = 512;
  int64_t eval_every = 250;
  int64_t seed = 0;
};

struct SeriesModelRun {
  std::string name;  // "attention" or "cnn"
  std::shared_ptr<nn::Module> net;
  std::shared_ptr<AttentionForecaster> attn;  // null for the CNN
  std::unique_ptr<optim::Adam> opt;
  std::unique_ptr<optim::DataParallel> ddp;
  double loss = NAN, test_mse = NAN;
};

// Mean squared error over positions first .. T-1.
Tensor scored_mse(const Tensor& out, const Tensor& target, int64_t first) {
  const int64_t n = out.size(1) - first;
  return mse_loss(narrow(out, 1, first, n), narrow(target, 1, first, n));
}

void keep_attention(SeriesModelRun& m, bool on) {
  if (m.attn)
    for (size_t l = 0; l < m.attn->blocks.size(); ++l) m.attn->attention(l)->keep_attention(on);
}

// Test MSE (and, for the attention model, the same-phase score of each
// layer) over the whole test set, in chunks; kept maps take the unfused path.
// Before each chunk asks stop (when given): nullopt when it says to stop.
std::optional<double> evaluate(SeriesModelRun& m, const SeriesSet& test, int64_t first, double window,
                               std::vector<PhaseScore>& scores, const std::function<bool()>& stop) {
  autograd::NoGradGuard ng;
  keep_attention(m, true);
  scores.assign(m.attn ? m.attn->blocks.size() : 0, PhaseScore());
  double sum = 0;
  const int64_t n = test.size();
  for (int64_t at = 0; at < n; at += kSignalsPerEval) {
    if (stop && stop()) {
      keep_attention(m, false);
      return std::nullopt;
    }
    const int64_t b = std::min(kSignalsPerEval, n - at);
    Tensor out = m.net->forward(kernel::narrow(test.input, 0, at, b));
    sum += scored_mse(out, kernel::narrow(test.target, 0, at, b), first).item() * static_cast<double>(b);
    for (size_t l = 0; l < scores.size(); ++l)
      scores[l].add(same_phase_attention(m.attn->attention(l)->last_attention(), kernel::narrow(test.period, 0, at, b),
                                         window));
  }
  keep_attention(m, false);
  return sum / static_cast<double>(n);
}

// Reference forecasts of clean(t + 1), scored like the models: the last
// observed value (persistence), and the observed value one true period back
// (linear interpolation between the two neighbouring positions).
void reference_mse(const SeriesSet& s, int64_t first, double& persistence, double& seasonal) {
  const int64_t N = s.size(), T = s.input.size(1);
  const float* x = s.input.data<float>();
  const float* y = s.target.data<float>();
  const float* P = s.period.data<float>();
  double sp = 0, ss = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < N; ++i)
    for (int64_t t = first; t < T; ++t) {
      const double target = y[i * T + t];
      const double back = static_cast<double>(t + 1) - static_cast<double>(P[i]);  // >= 0: t >= ceil(period_max)
      const auto lo = static_cast<int64_t>(std::floor(back));
      const double f = back - static_cast<double>(lo);
      const double hi = lo + 1 < T ? x[i * T + lo + 1] : x[i * T + lo];
      // The fused multiply-adds written out: left to the compiler, they were
      // contracted differently with AVX-512 and with AVX2 (the logged value
      // differed in its last bit between the two CPUs).
      const double seasonal_forecast = std::fma(1 - f, static_cast<double>(x[i * T + lo]), f * hi);
      const double dp = x[i * T + t] - target, ds = seasonal_forecast - target;
      sp = std::fma(dp, dp, sp);
      ss = std::fma(ds, ds, ss);
      ++count;
    }
  persistence = sp / static_cast<double>(count);
  seasonal = ss / static_cast<double>(count);
}

}  // namespace

int run_timeseries(const std::vector<std::string>& args, const std::vector<std::string>& command_line) {
  TimeseriesConfig c;
  Run run("timeseries",
          "Forecasting periodic signals with noise and anomalies (period, phase, waveform, noise and\n"
          "anomalies drawn per signal): a causal attention model and a causal CNN of about the same size\n"
          "predict the next clean value at every position. Logs both test MSEs, the attention maps, and\n"
          "how much of each query's attention falls within --window steps of the same phase in earlier\n"
          "cycles, against attention spread evenly.",
          RunOptions("runs/timeseries.h5").steps(2000).checkpoint_every(500).progress_seconds(2));
  run.args()
      .choice("model", &c.model, {"attention", "cnn", "both"}, "which model(s) to train")
      .integer("batch", &c.batch, "signals per step", 1, kMaxBatch)
      .real("lr", &c.lr, "Adam learning rate", 0.0, 1e300, true)
      .integer("dim", &c.dim, "attention model: width D", 1, kMaxWidth)
      .integer("heads", &c.heads, "attention model: heads (must divide --dim)", 1, kMaxWidth)
      .integer("layers", &c.layers, "attention model: transformer blocks", 1, 8)
      .integer("kernel", &c.kernel, "causal convolution width (both models; at most --length)", 1, kMaxWidth)
      .integer("cnn-channels", &c.cnn_channels, "CNN: channels per layer", 1, kMaxWidth)
      .integer("cnn-layers", &c.cnn_layers, "CNN: causal convolution layers", 1, kMaxLayers)
      .integer("length", &c.series.length, "signal length T", 8, kMaxLength)
      .real("period-min", &c.series.period_min, "shortest period", 2.0)
      .real("period-max", &c.series.period_max, "longest period (at most half of --length)", 2.0)
      .integer("harmonics", &c.series.harmonics, "harmonics of the periodic pattern (at most --length / 2)", 1, kMaxWidth)
      .real("noise-min", &c.series.noise_min, "smallest noise standard deviation", 0.0)
      .real("noise-max", &c.series.noise_max, "largest noise standard deviation", 0.0)
      .integer("anomalies", &c.series.anomalies_max, "at most this many anomalies per signal", 0, kMaxLength)
      .real("window", &c.window,
            "same-phase window: keys within this many steps of a whole number of periods back (at most --length "
            "- --period-max)",
            0.0)
      .integer("test", &c.test, "test signals", kLoggedSignals, kMaxSamples)
      .integer("eval-every", &c.eval_every, "evaluate every N steps (and at the end)", 1)
      .integer("seed", &c.seed, "seed for data and initialisation", 0);
  if (!run.parse(args, command_line)) return 0;
  const SeriesOptions& so = c.series;
  if (so.period_max < so.period_min)
    throw UsageError(fmt::format("run timeseries: --period-max {} is below --period-min {}", so.period_max,
                                 so.period_min));
  if (so.noise_max < so.noise_min)
    throw UsageError(
        fmt::format("run timeseries: --noise-max {} is below --noise-min {}", so.noise_max, so.noise_min));
  if (2 * so.period_max > static_cast<double>(so.length))
    throw UsageError(fmt::format("run timeseries: --period-max {} leaves fewer than two cycles in --length {}",
                                 so.period_max, so.length));
  // Taps of a causal convolution beyond the signal's start read only its
  // zero padding: a kernel longer than the signal has weights that never
  // see a value (and costs memory and time with the padding it needs).
  if (c.kernel > so.length)
    throw UsageError(fmt::format("run timeseries: --kernel {} is longer than the signals (--length {}); expected at "
                                 "most {}",
                                 c.kernel, so.length, so.length));
  // T samples hold T/2 frequencies (a period of at least two steps): a
  // harmonic beyond that only aliases onto lower ones, and each one costs a
  // sine at every position of every signal drawn.
  if (so.harmonics > so.length / 2)
    throw UsageError(fmt::format("run timeseries: --harmonics {} is more than signals of --length {} can represent "
                                 "(T samples hold T/2 frequencies); expected at most {}",
                                 so.harmonics, so.length, so.length / 2));
  // Same-phase attention scores a query at t once t + 1 >= P + window
  // (same_phase_attention): a window beyond T - period_max leaves signals
  // with no query to score, and past T - period_min none at all, the scores
  // then logged as 0 as if measured.
  if (c.window > static_cast<double>(so.length) - so.period_max)
    throw UsageError(fmt::format("run timeseries: --window {} leaves no query to score in signals of --length {} "
                                 "with periods up to --period-max {} (--period-min {}): a query at t is scored once "
                                 "t + 1 >= period + window; expected at most {:g}",
                                 c.window, so.length, so.period_max, so.period_min,
                                 static_cast<double>(so.length) - so.period_max));
  if (c.dim % c.heads != 0)
    throw UsageError(fmt::format("run timeseries: --dim {} is not divisible by --heads {}", c.dim, c.heads));
  if (c.batch % dist::size() != 0)
    throw UsageError(fmt::format("run timeseries: --batch {} is not divisible by the {} processes of this job",
                                 c.batch, dist::size()));

  // Memory the options make the run take, refused before anything is
  // written when it is not there (else the kernel kills the run part way, or
  // an allocation fails after the log is written): the test set; the models'
  // weights, gradients and optimiser state; what a training step and an
  // evaluation allocate besides (timeseries_memory). Named is the option that
  // makes it too much: --dim or --cnn-channels when a model's weights alone
  // are, --length when one signal a step is, else --batch.
  {
    check_memory("run timeseries", "test", c.test,
                 fmt::format("the test set ({} signals of --length {})", c.test, so.length),
                 series_bytes(c.test, so));
    ForecasterSizes m;
    m.attention = c.model != "cnn";
    m.cnn = c.model != "attention";
    m.dim = c.dim;
    m.heads = c.heads;
    m.layers = c.layers;
    m.kernel = c.kernel;
    m.cnn_channels = c.cnn_channels;
    m.cnn_layers = c.cnn_layers;
    const auto D = static_cast<double>(c.dim), C = static_cast<double>(c.cnn_channels);
    if (m.attention)
      check_memory("run timeseries", "dim", c.dim,
                   fmt::format("the attention model's weights, their gradients and the optimiser's two moments ({} "
                               "block(s) of 12 x {}^2 weights)",
                               c.layers, c.dim),
                   4 * 4 * static_cast<double>(c.layers) * 12 * D * D);
    if (m.cnn)
      check_memory("run timeseries", "cnn-channels", c.cnn_channels,
                   fmt::format("the CNN's weights, their gradients and the optimiser's two moments ({} layer(s) "
                               "of {} x {}^2 weights after the first)",
                               c.cnn_layers - 1, c.kernel, c.cnn_channels),
                   4 * 4 * static_cast<double>(c.cnn_layers - 1) * static_cast<double>(c.kernel) * C * C);
    const std::string models = c.model == "both" ? "both models" : "the " + c.model + " model";
    check_memory("run timeseries", "length", so.length,
                 fmt::format("a training step on one signal and an evaluation{} ({}, {} test signals at a time of "
                             "--length {}) beside the test set",
                             m.attention ? fmt::format("'s attention maps ({} layer(s) x {} heads)", c.layers, c.heads)
                                         : std::string(),
                             models, std::min(kSignalsPerEval, c.test), so.length),
                 timeseries_memory(so, m, 1, c.test, kSignalsPerEval));
    check_memory("run timeseries", "batch", c.batch,
                 fmt::format("a training step's activations and gradients ({}, {} signals of --length {}) and an "
                             "evaluation beside the test set",
                             models, c.batch, so.length),
                 timeseries_memory(so, m, c.batch, c.test, kSignalsPerEval));
  }
  const int64_t first = first_scored_position(so);
  Generator data(static_cast<uint64_t>(c.seed));
  SeriesSet test;
  try {
    Generator g(static_cast<uint64_t>(c.seed) + 1000003);  // the test set, rebuilt identically on resume
    test = generate_series(c.test, g, so);
  } catch (const Error& e) {  // out of memory: the options were checked above
    fail("run timeseries: the test set (--test {} signals of --length {}): {}", c.test, so.length, e.what());
  }
  double persistence = 0, seasonal = 0;
  reference_mse(test, first, persistence, seasonal);

  std::vector<SeriesModelRun> runs;
  // Each model's initialisation has its own generator: one model's run is the
  // same whether or not the other is trained beside it.
  if (c.model != "cnn") {
    Generator g(static_cast<uint64_t>(c.seed) * 1000 + 1);
    auto net = std::make_shared<AttentionForecaster>(c.dim, c.heads, c.layers, c.kernel, &g);
    runs.push_back({"attention", net, net, nullptr, nullptr});
  }
  if (c.model != "attention") {
    Generator g(static_cast<uint64_t>(c.seed) * 1000 + 2);
    runs.push_back({"cnn", std::make_shared<ConvForecaster>(c.cnn_channels, c.cnn_layers, c.kernel, &g), nullptr,
                    nullptr, nullptr});
  }
  // Same-phase attention at the last evaluation: per layer, the mean over
  // heads and the best head; and attention spread evenly.
  const auto layers = static_cast<size_t>(c.layers);
  std::vector<double> same_phase(layers, NAN), same_phase_best(layers, NAN);
  double uniform = NAN;
  for (auto& m : runs) {
    m.opt = std::make_unique<optim::Adam>(m.net->named_parameters(), optim::AdamOptions().lr(c.lr));
    m.ddp = std::make_unique<optim::DataParallel>(m.net->named_parameters());  // one process: plain backward
    m.ddp->broadcast_parameters();
    run.track("model/" + m.name, *m.net);
    run.track("optim/" + m.name, *m.opt);
    run.track("result/" + m.name + "/test_mse", m.test_mse);
  }
  run.track("rng/data", data);
  for (size_t l = 0; l < same_phase.size(); ++l) {
    run.track(fmt::format("result/layer{}/same_phase", l), same_phase[l]);
    run.track(fmt::format("result/layer{}/same_phase_best_head", l), same_phase_best[l]);
  }
  run.track("result/uniform", uniform);
  // Ctrl-C or SIGTERM during an evaluation cuts it short (a large --test
  // takes minutes; a batch system's SIGKILL follows SIGTERM after a grace
  // period): the checkpoint the stop writes records the step, and the
  // resumed run evaluates it first, so the log is the one an uninterrupted
  // run writes. (Not required: older checkpoints lack it.)
  int64_t eval_pending = 0;
  run.track("eval/pending", eval_pending, false);
  std::vector<std::string> eval_logs;  // what evaluate_and_log writes
  for (const auto& m : runs) {
    eval_logs.push_back(m.name + "/test_mse");
    eval_logs.push_back(m.name + "/output");
  }
  if (c.model != "cnn") {
    eval_logs.insert(eval_logs.end(), {"attention/uniform", "attention/maps"});
    for (int64_t l = 0; l < c.layers; ++l) {
      eval_logs.push_back(fmt::format("attention/layer{}/same_phase", l));
      eval_logs.push_back(fmt::format("attention/layer{}/same_phase_best_head", l));
    }
  }
  run.owed_work("eval/pending", eval_logs);
  run.begin([&](RunLog& log) {
    const std::vector<std::pair<const char*, const Tensor*>> fixed = {
        {"input", &test.input},
        {"target", &test.target},
        {"clean", &test.clean},
        {"period", &test.period},
        {"phase", &test.phase},
        {"noise", &test.noise},
        {"anomaly_position", &test.anomaly_position},
        {"anomaly_width", &test.anomaly_width},
        {"anomaly_height", &test.anomaly_height}};
    for (const auto& [name, t] : fixed)
      log.write_tensor(std::string("samples/") + name, kernel::narrow(*t, 0, 0, kLoggedSignals));
    log.write_tensor("reference/persistence_mse", Tensor::scalar(persistence, DType::f64));
    log.write_tensor("reference/seasonal_mse", Tensor::scalar(seasonal, DType::f64));
    log.set_attr("first_scored_position", first);
    for (auto& m : runs) {
      log_model(log, m.name, *m.net);
      log.declare_scalar(m.name + "/train_loss");
      log.declare_scalar(m.name + "/test_mse");
      log.declare_series(m.name + "/output", {kLoggedSignals, so.length});
    }
    if (c.model != "cnn") {
      log.declare_scalar("attention/uniform");
      for (int64_t l = 0; l < c.layers; ++l) {
        log.declare_scalar(fmt::format("attention/layer{}/same_phase", l));
        log.declare_scalar(fmt::format("attention/layer{}/same_phase_best_head", l));
      }
      log.declare_series("attention/maps", {kLoggedSignals, c.layers, c.heads, so.length, so.length});
    }
  });
  for (auto& m : runs) fmt::print("{}\n", m.net->summary());

  // Every model evaluated first, then logged: false when a stop cut the
  // evaluation short (may_stop: the run's last step is evaluated whole, as
  // its result, unless it is owed), with nothing logged or kept.
  auto evaluate_and_log = [&](int64_t step, bool may_stop) {
    std::function<bool()> stop;
    if (may_stop) stop = [&run] { return run.stop_requested(); };
    std::vector<double> mse(runs.size());
    std::vector<std::vector<PhaseScore>> scores(runs.size());
    for (size_t i = 0; i < runs.size(); ++i) {
      const std::optional<double> e = evaluate(runs[i], test, first, c.window, scores[i], stop);
      if (!e) {
        fmt::print("step {}: evaluation cut short by the stop; a resumed run evaluates step {} first\n", step, step);
        std::fflush(stdout);
        return false;
      }
      mse[i] = *e;
    }
    for (size_t i = 0; i < runs.size(); ++i) {
      SeriesModelRun& m = runs[i];
      m.test_mse = mse[i];
      run.log().scalar(m.name + "/test_mse", step, m.test_mse);
      autograd::NoGradGuard ng;
      keep_attention(m, true);
      run.log().series(m.name + "/output", step, m.net->forward(kernel::narrow(test.input, 0, 0, kLoggedSignals)));
      std::string extra;
      if (m.attn) {
        std::vector<Tensor> maps;
        for (size_t l = 0; l < scores[i].size(); ++l) {
          maps.push_back(kernel::unsqueeze(m.attn->attention(l)->last_attention(), 1));
          same_phase[l] = scores[i][l].mean();
          same_phase_best[l] = scores[i][l].best();
          run.log().scalar(fmt::format("attention/layer{}/same_phase", l), step, same_phase[l]);
          run.log().scalar(fmt::format("attention/layer{}/same_phase_best_head", l), step, same_phase_best[l]);
          extra += fmt::format("; layer {} same-phase attention {:.3f} (best head {:.3f})", l, same_phase[l],
                               same_phase_best[l]);
        }
        run.log().series("attention/maps", step, kernel::concat(maps, 1));  // [kLoggedSignals, layers, H, T, T]
        uniform = scores[i][0].baseline();
        run.log().scalar("attention/uniform", step, uniform);
        extra += fmt::format(" (uniform {:.3f})", uniform);
      }
      keep_attention(m, false);
      fmt::print("step {} {}: test mse {:.4f}{}\n", step, m.name, m.test_mse, extra);
    }
    std::fflush(stdout);
    return true;
  };
  // The evaluation a stop cut short. Cut again, it stays owed: the run then
  // stops before its next step (Run::next), the checkpoint as it was.
  if (eval_pending > 0 && evaluate_and_log(eval_pending, true)) eval_pending = 0;

  while (run.next()) {
    const int64_t step = run.step();
    SeriesSet batch = generate_series(c.batch, data, so);  // the global batch; each process trains on its share
    Tensor x = dist::shard(batch.input), y = dist::shard(batch.target);
    for (auto& m : runs) {
      m.opt->zero_grad();
      Tensor loss = scored_mse(m.net->forward(x), y, first);
      m.ddp->backward(loss);
      m.opt->step();
      m.loss = dist::mean(loss.item());
      run.log().scalar(m.name + "/train_loss", step, m.loss);
      run.show_loss(m.name, m.loss);
    }
    if ((step % c.eval_every == 0 || step == run.steps()) && !evaluate_and_log(step, step < run.steps()))
      eval_pending = step;
  }
  if (int rc = run.finish()) return rc;

  fmt::print("\n{:<10} {:>11} {:>10}\n", "model", "parameters", "test mse");
  for (auto& m : runs) fmt::print("{:<10} {:>11} {:>10.4f}\n", m.name, m.net->num_parameters(), m.test_mse);
  fmt::print("{:<10} {:>11} {:>10.4f}\n{:<10} {:>11} {:>10.4f}\n", "last value", "-", persistence,
             "one period back", "-", seasonal);
  if (uniform == 0 && !same_phase.empty())  // a ratio to it would be 0/0
    fmt::print("\nsame-phase attention: no key lies within {} step(s) of a whole number of periods back from any "
               "scored query (the periods are real numbers), so there is nothing to measure; widen --window\n",
               c.window);
  for (size_t l = 0; l < same_phase.size() && uniform > 0; ++l)
    fmt::print("{}layer {}: attention within {} step(s) of the same phase of earlier cycles {:.3f} averaged over "
               "heads ({:.1f}x uniform), {:.3f} in the best head ({:.1f}x); uniform {:.3f}\n",
               l == 0 ? "\n" : "", l, c.window, same_phase[l], same_phase[l] / uniform, same_phase_best[l],
               same_phase_best[l] / uniform, uniform);
  fmt::print("\nlog: {} ({})\n", run.log_path(), format_seconds(run.seconds()));
  return 0;
}

}  // namespace heed::experiments
