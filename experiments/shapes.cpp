// experiments/shapes.cpp: `heed run shapes`, the CNN-versus-attention toy
// experiment (../shared/spec/toy-shapes-task.md): both models trained on the
// same data with the same protocol, everything logged to one HDF5 file.
#include "experiments/shapes.h"

#include <cmath>
#include <functional>
#include <memory>
#include <optional>

#include "core/kernels.h"
#include "data/batch.h"
#include "data/shapes.h"
#include "experiments/common.h"
#include "experiments/shapes_metrics.h"
#include "experiments/shapes_models.h"
#include "heed.h"
#include "optim/adam.h"

namespace heed::experiments {

namespace {

constexpr int64_t kLoggedSamples = 15;  // fixed test samples whose predictions and attention are logged

struct ShapesConfig {
  std::string model = "both";
  int64_t epochs = 5;
  int64_t train = 25000;
  int64_t test = 1000;
  int64_t batch = 100;
  double lr = 1e-3;
  std::string variant = "pairs";
  bool positional = false;
  bool scaled = false;
  int64_t seed = 0;
  int64_t attention_every = 1;
};

struct Data {
  data::ShapesSet train, test;
  Tensor train_x, test_x;  // standardised inputs
};

struct ModelRun {
  std::string name;  // "cnn" or "attention"
  std::shared_ptr<nn::Sequential> net;
  std::shared_ptr<nn::SelfAttention> attn;  // null for the CNN
  double final_train = NAN, final_test = NAN, pair_score = NAN, ms_per_step = NAN;
};

// Mean squared error of the model over a whole set, in eval mode, batch by
// batch. Before each batch asks stop (when given): nullopt when it says to stop.
std::optional<double> evaluate(nn::Module& net, const Tensor& x, const Tensor& y, int64_t batch,
                               const std::function<bool()>& stop = {}) {
  autograd::NoGradGuard ng;
  net.eval();
  double sum = 0;
  const int64_t n = x.size(0);
  for (int64_t at = 0; at < n; at += batch) {
    if (stop && stop()) {
      net.train();
      return std::nullopt;
    }
    int64_t b = std::min(batch, n - at);
    Tensor out = net.forward(kernel::narrow(x, 0, at, b));
    sum += mse_loss(out, kernel::narrow(y, 0, at, b)).item() * static_cast<double>(b);
  }
  net.train();
  return sum / static_cast<double>(n);
}

// The attention model's pair score over the test set, batch by batch (stop: as evaluate's).
std::optional<PairScore> score_attention(ModelRun& m, const Data& d, int64_t batch,
                                         const std::function<bool()>& stop = {}) {
  autograd::NoGradGuard ng;
  m.net->eval();
  m.attn->keep_attention(true);
  PairScore total;
  const int64_t n = d.test_x.size(0);
  for (int64_t at = 0; at < n; at += batch) {
    if (stop && stop()) {
      m.attn->keep_attention(false);
      m.net->train();
      return std::nullopt;
    }
    int64_t b = std::min(batch, n - at);
    m.net->forward(kernel::narrow(d.test_x, 0, at, b));
    PairScore s = pair_attention_score(m.attn->last_attention(), kernel::narrow(d.test.centres, 0, at, b),
                                       kernel::narrow(d.test.widths, 0, at, b),
                                       kernel::narrow(d.test.partner, 0, at, b));
    total.mass += s.mass;
    total.queries += s.queries;
  }
  m.attn->keep_attention(false);
  m.net->train();
  return total;
}

// The input channels of a run's samples, as make_data makes them: the
// signal, then --positional's binary position channels.
int64_t input_channels(const ShapesConfig& c) {
  return 1 + (c.positional ? data::positional_channels(data::ShapesOptions{}.length) : 0);
}

// The training and test sets of a run, from its --seed.
Data make_data(const ShapesConfig& c) {
  Data d;
  data::ShapesOptions so;
  so.group_by_location = c.variant == "location";
  so.positional = c.positional;
  Generator g(static_cast<uint64_t>(c.seed));
  Stopwatch sw;
  d.train = data::generate_shapes(c.train, g, so);
  d.test = data::generate_shapes(c.test, g, so);
  data::Standardizer st;
  st.fit(d.train.input);
  d.train_x = st.apply(d.train.input);
  d.test_x = st.apply(d.test.input);
  fmt::print("data: {} train + {} test samples ({} variant{}) in {}\n", c.train, c.test, c.variant,
             c.positional ? ", positional channels" : "", format_seconds(sw.seconds()));
  return d;
}

class ShapesModels : public TrainedModels {
 public:
  ShapesModels(const Checkpoint& ck, const std::string& path) {
    experiment_ = "shapes";
    c_.train = config_int(ck, path, "train");
    c_.test = config_int(ck, path, "test", kLoggedSamples);
    c_.batch = config_int(ck, path, "batch");
    c_.variant = config_text(ck, path, "variant");
    if (c_.variant != "pairs" && c_.variant != "location")
      fail("checkpoint '{}': config.variant is '{}', expected pairs or location", path, c_.variant);
    c_.positional = config_flag(ck, path, "positional");
    c_.scaled = config_flag(ck, path, "scaled");
    c_.seed = config_int(ck, path, "seed", 0);
    for (const char* name : {"cnn", "attention"})
      if (!ck.get(prefix(name)).empty()) runs_.push_back({name, nullptr, nullptr});
    if (runs_.empty()) fail("checkpoint '{}' holds no model (expected model/cnn or model/attention)", path);
    // The input's channels as make_data makes them; the data itself waits
    // for the first evaluation, so a command that refuses its options after
    // loading the models (heed quantize's --keep, --model, --rank) has not
    // generated a data set first.
    C_ = input_channels(c_);
    for (ModelRun& m : runs_) {
      if (m.name == "cnn") {
        m.net = make_shapes_cnn(C_);
      } else {
        m.net = make_shapes_attention(C_, c_.scaled);
        m.attn = std::dynamic_pointer_cast<nn::SelfAttention>((*m.net)["4"]);
        if (!m.attn) fail("shapes: the attention model's child \"4\" is not its SelfAttention layer");
      }
      m.net->load_state_dict(ck.get(prefix(m.name)));
    }
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> n;
    for (const ModelRun& m : runs_) n.push_back(m.name);
    return n;
  }
  nn::Module& model(const std::string& name) override { return *find(name).net; }
  std::vector<std::pair<std::string, double>> evaluate(const std::string& name) override {
    ModelRun& m = find(name);
    if (!d_) {
      d_ = make_data(c_);
      if (d_->train_x.size(1) != C_)
        fail("shapes: the data has {} input channels, the models were built for {}", d_->train_x.size(1), C_);
    }
    std::vector<std::pair<std::string, double>> out = {
        {"test_mse", *experiments::evaluate(*m.net, d_->test_x, d_->test.target, c_.batch)}};
    if (m.attn) out.emplace_back("pair_score", score_attention(m, *d_, c_.batch)->value());
    return out;
  }

 private:
  ModelRun& find(const std::string& name) {
    for (ModelRun& m : runs_)
      if (m.name == name) return m;
    fail("shapes: no model '{}' in this checkpoint (it has: {})", name, fmt::join(names(), ", "));
  }
  ShapesConfig c_;
  int64_t C_ = 0;
  std::optional<Data> d_;  // made at the first evaluate()
  std::vector<ModelRun> runs_;
};

// Logs the fixed samples' outputs (and attention maps when due) at `step`.
void log_samples(RunLog& log, ModelRun& m, const Data& d, int64_t step, bool with_attention) {
  autograd::NoGradGuard ng;
  m.net->eval();
  if (m.attn && with_attention) m.attn->keep_attention(true);
  Tensor out = m.net->forward(kernel::narrow(d.test_x, 0, 0, kLoggedSamples));
  log.series(m.name + "/output", step, out);
  if (m.attn && with_attention) {
    log.series("attention/maps", step, m.attn->last_attention());
    m.attn->keep_attention(false);
  }
  m.net->train();
}

// Both models see the same batches: one step trains each on the next batch.
struct Trainer {
  const ShapesConfig& c;
  const Data& d;
  std::vector<ModelRun>& runs;
  Run& run;
  data::BatchSampler sampler;
  std::vector<std::unique_ptr<optim::Adam>> opts;
  std::vector<std::unique_ptr<optim::DataParallel>> ddps;  // one process: plain backward
  // Per model: loss summed over the current epoch (weighted by rows), and
  // seconds spent in forward + backward + update.
  std::vector<double> epoch_loss, compute_seconds;
  int64_t epoch_rows = 0;
  int64_t eval_pending = 0;  // the step whose end-of-epoch evaluation a stop cut short (0: none)

  Trainer(const ShapesConfig& c_, const Data& d_, std::vector<ModelRun>& r, Run& run_)
      : c(c_), d(d_), runs(r), run(run_),
        sampler(d_.train_x.size(0), data::BatchSamplerOptions{c_.batch, false, false, 0}),
        epoch_loss(r.size(), 0.0), compute_seconds(r.size(), 0.0) {
    for (auto& m : runs) {
      opts.push_back(std::make_unique<optim::Adam>(m.net->named_parameters(), optim::AdamOptions().lr(c.lr)));
      ddps.push_back(std::make_unique<optim::DataParallel>(m.net->named_parameters()));
      ddps.back()->broadcast_parameters();
    }
    // Data and initial weights come from generators seeded by --seed, rebuilt
    // identically on resume; the rest is this.
    for (size_t i = 0; i < runs.size(); ++i) {
      run.track("model/" + runs[i].name, *runs[i].net);
      run.track("optim/" + runs[i].name, *opts[i]);
      run.track("acc/" + runs[i].name + "/epoch_loss", epoch_loss[i]);  // the epoch's running MSE, bit for bit
      run.track("acc/" + runs[i].name + "/seconds", compute_seconds[i]);
      run.track("result/" + runs[i].name + "/train_mse", runs[i].final_train);
      run.track("result/" + runs[i].name + "/test_mse", runs[i].final_test);
      if (runs[i].attn) run.track("result/" + runs[i].name + "/pair_score", runs[i].pair_score);
    }
    run.track("epoch_rows", epoch_rows);
    run.track("sampler", sampler);
    // Ctrl-C or SIGTERM during an epoch's evaluation cuts it short (a large
    // --test takes minutes; a batch system's SIGKILL follows SIGTERM after a
    // grace period): the checkpoint the stop writes records the step, and the
    // resumed run evaluates it first, so the log is the one an uninterrupted
    // run writes. (Not required: older checkpoints lack it.)
    run.track("eval/pending", eval_pending, false);
    std::vector<std::string> eval_logs;  // what end_of_epoch writes
    for (const ModelRun& m : runs) {
      for (const char* metric : {"train_mse", "test_mse", "output"}) eval_logs.push_back(m.name + "/" + metric);
      if (m.attn) eval_logs.insert(eval_logs.end(), {"attention/pair_score", "attention/maps"});
    }
    run.owed_work("eval/pending", eval_logs);
  }

  int64_t steps_per_epoch() const { return sampler.batches_per_epoch(); }

  // The end of an epoch: both models evaluated on the test set, then
  // logged. False when a stop cut the evaluation short (may_stop: the run's
  // last epoch is evaluated whole, as its result, unless it is owed): nothing
  // logged or kept, the epoch's running losses as they were.
  bool end_of_epoch(int64_t step, int64_t epoch, bool may_stop) {
    std::function<bool()> stop;
    if (may_stop) stop = [this] { return run.stop_requested(); };
    std::vector<double> test(runs.size());
    std::vector<PairScore> pairs(runs.size());
    for (size_t i = 0; i < runs.size(); ++i) {
      const std::optional<double> mse = evaluate(*runs[i].net, d.test_x, d.test.target, c.batch, stop);
      const std::optional<PairScore> ps =
          mse && runs[i].attn ? score_attention(runs[i], d, c.batch, stop) : std::optional<PairScore>(PairScore());
      if (!mse || !ps) {
        fmt::print("epoch {}/{}: evaluation cut short by the stop; a resumed run evaluates step {} first\n", epoch + 1,
                   c.epochs, step);
        std::fflush(stdout);
        return false;
      }
      test[i] = *mse;
      pairs[i] = *ps;
    }
    RunLog& log = run.log();
    bool last = epoch + 1 == c.epochs;
    bool attn_due = last || (epoch + 1) % c.attention_every == 0;
    for (size_t i = 0; i < runs.size(); ++i) {
      ModelRun& m = runs[i];
      double train_mse = epoch_loss[i] / static_cast<double>(epoch_rows);
      double test_mse = test[i];
      log.scalar(m.name + "/train_mse", step, train_mse);
      log.scalar(m.name + "/test_mse", step, test_mse);
      std::string extra;
      if (m.attn) {
        const PairScore& ps = pairs[i];
        log.scalar("attention/pair_score", step, ps.value());
        m.pair_score = ps.value();
        extra = fmt::format(" pair-attention {:.3f}", ps.value());
      }
      log_samples(log, m, d, step, attn_due);
      fmt::print("{} epoch {}/{}: train mse {:.4f} test mse {:.4f}{}\n", m.name, epoch + 1, c.epochs, train_mse,
                 test_mse, extra);
      m.final_train = train_mse;
      m.final_test = test_mse;
      epoch_loss[i] = 0;
    }
    epoch_rows = 0;
    log.flush();
    std::fflush(stdout);
    return true;
  }

  void train() {
    // The evaluation a stop cut short. Cut again, it stays owed: the run then
    // stops before its next step (Run::next), the checkpoint as it was.
    if (eval_pending > 0 && end_of_epoch(eval_pending, (eval_pending - 1) / steps_per_epoch(), true)) eval_pending = 0;
    std::vector<int64_t> idx;
    while (run.next()) {
      const int64_t step = run.step();
      idx = sampler.next_batch();  // the global batch; under mpirun each process takes its share of the rows
      const int64_t share = static_cast<int64_t>(idx.size()) / dist::size();
      std::vector<int64_t> mine(idx.begin() + dist::rank() * share, idx.begin() + (dist::rank() + 1) * share);
      Tensor x = data::slice_batch(d.train_x, mine), y = data::slice_batch(d.train.target, mine);
      for (size_t i = 0; i < runs.size(); ++i) {
        ModelRun& m = runs[i];
        Stopwatch sw;
        opts[i]->zero_grad();
        Tensor loss = mse_loss(m.net->forward(x), y);
        ddps[i]->backward(loss);
        opts[i]->step();
        double secs = sw.seconds();
        compute_seconds[i] += secs;
        const double l = dist::mean(loss.item());  // the global batch's
        epoch_loss[i] += l * static_cast<double>(idx.size());
        run.log().scalar(m.name + "/train_loss", step, l);
        run.log().scalar(m.name + "/step_seconds", step, secs);
        run.show_loss(m.name, l);
      }
      epoch_rows += static_cast<int64_t>(idx.size());
      if (step % steps_per_epoch() == 0 && !end_of_epoch(step, (step - 1) / steps_per_epoch(), step < run.steps()))
        eval_pending = step;
    }
    for (size_t i = 0; i < runs.size(); ++i)
      runs[i].ms_per_step = 1000.0 * compute_seconds[i] / static_cast<double>(std::max<int64_t>(run.step(), 1));
  }
};

}  // namespace

std::unique_ptr<TrainedModels> shapes_trained_models(const Checkpoint& ck, const std::string& path) {
  return std::make_unique<ShapesModels>(ck, path);
}

int run_shapes(const std::vector<std::string>& args, const std::vector<std::string>& command_line) {
  ShapesConfig c;
  Run run("shapes",
          "Trains a CNN and the same CNN with one self-attention layer on the toy shapes task\n"
          "(each output depends on a partner shape up to ~90 positions away) and logs both to HDF5.",
          RunOptions("runs/shapes.h5").checkpoint_every(250));
  run.args()
      .choice("model", &c.model, {"cnn", "attention", "both"}, "which model(s) to train")
      .integer("epochs", &c.epochs, "passes over the training set (may be raised on --resume to train longer)", 1, kMaxRepeats)
      .integer("train", &c.train, "training samples", 1, kMaxSamples)
      .integer("test", &c.test, "test samples (at least 15 are logged)", kLoggedSamples, kMaxSamples)
      .integer("batch", &c.batch, "batch size", 1, kMaxBatch)
      .real("lr", &c.lr, "Adam learning rate", 0.0, 1e300, true)
      .choice("variant", &c.variant, {"pairs", "location"}, "average the two triangles / two boxes, or left / right pairs")
      .flag("positional", &c.positional, "append 7 binary positional channels to the input")
      .flag("scaled", &c.scaled, "scale attention scores by 1/sqrt(d_k) (the reference does not)")
      .integer("seed", &c.seed, "seed for data and initialisation", 0)
      .integer("attention-every", &c.attention_every, "log attention maps every N epochs (and at the end)", 1);
  run.may_change_on_resume("epochs");
  if (!run.parse(args, command_line)) return 0;

  // Memory the options make the run take, refused before anything is
  // written when it is not there (else the kernel kills the run part way, or
  // an allocation fails after the log is written): the training set, the
  // test set beside it, then what the models' steps and evaluations, batch
  // by batch, allocate besides (shapes_memory).
  {
    const data::ShapesOptions so;
    const int64_t C = input_channels(c);
    const bool cnn = c.model != "attention", attention = c.model != "cnn";
    // The data alone: shapes_memory of no model and a batch of none.
    check_memory("run shapes", "train", c.train, fmt::format("the training set ({} samples)", c.train),
                 shapes_memory(C, so.length, false, false, c.train, 0, 0));
    check_memory("run shapes", "test", c.test,
                 fmt::format("the test set ({} samples) beside the training set", c.test),
                 shapes_memory(C, so.length, false, false, c.train, c.test, 0));
    // No batch holds more samples than its set: a --batch beyond both sets
    // allocates for the larger set (it said "--batch 100000 needs 31.4 GiB"
    // of a run with 10 training samples, which took 40 MB).
    const int64_t batch = std::min(c.batch, std::max(c.train, c.test));
    check_memory("run shapes", "batch", c.batch,
                 fmt::format("a training step's activations and gradients and an evaluation{} ({} samples of {} "
                             "positions a batch, {}) beside the data",
                             attention ? "'s attention maps" : "", batch, so.length,
                             c.model == "both" ? "both models" : "the " + c.model + " model"),
                 shapes_memory(C, so.length, cnn, attention, c.train, c.test, batch));
  }
  Stopwatch total_clock;
  Data d = make_data(c);
  const int64_t C = d.train_x.size(1);

  std::vector<ModelRun> runs;
  // Each model's initialisation comes from its own seeded generator, so the
  // CNN is the same whether or not the attention model is trained too.
  if (c.model != "attention") {
    Generator g(static_cast<uint64_t>(c.seed) * 1000 + 1);
    runs.push_back({"cnn", make_shapes_cnn(C, &g), nullptr});
  }
  if (c.model != "cnn") {
    Generator g(static_cast<uint64_t>(c.seed) * 1000 + 2);
    auto net = make_shapes_attention(C, c.scaled, &g);
    runs.push_back({"attention", net, std::dynamic_pointer_cast<nn::SelfAttention>((*net)["4"])});
  }

  // Data-parallel: every batch, the last of an epoch included, splits evenly over the processes.
  if (c.batch % dist::size() != 0 || (c.train % c.batch) % dist::size() != 0)
    throw UsageError(fmt::format("run shapes: --batch {} (and the last batch of an epoch, {} of --train {}) must be "
                                 "divisible by the {} processes of this job",
                                 c.batch, c.train % c.batch, c.train, dist::size()));
  Trainer trainer(c, d, runs, run);
  run.set_steps(trainer.steps_per_epoch() * c.epochs);
  run.begin([&](RunLog& log) {
    log.write_tensor("samples/input", kernel::narrow(d.test.input, 0, 0, kLoggedSamples));
    log.write_tensor("samples/input_standardised", kernel::narrow(d.test_x, 0, 0, kLoggedSamples));
    log.write_tensor("samples/target", kernel::narrow(d.test.target, 0, 0, kLoggedSamples));
    log.write_tensor("samples/centres", kernel::narrow(d.test.centres, 0, 0, kLoggedSamples));
    log.write_tensor("samples/widths", kernel::narrow(d.test.widths, 0, 0, kLoggedSamples));
    log.write_tensor("samples/heights", kernel::narrow(d.test.heights, 0, 0, kLoggedSamples));
    log.write_tensor("samples/kinds", kernel::narrow(d.test.kinds, 0, 0, kLoggedSamples));
    log.write_tensor("samples/partner", kernel::narrow(d.test.partner, 0, 0, kLoggedSamples));
    for (auto& m : runs) {
      log_model(log, m.name, *m.net);
      for (const char* metric : {"train_loss", "step_seconds", "train_mse", "test_mse"})
        log.declare_scalar(m.name + "/" + metric);
      log.declare_series(m.name + "/output", {kLoggedSamples, 1, d.test_x.size(2)});
      if (m.attn) {
        log.declare_scalar("attention/pair_score");
        log.declare_series("attention/maps", {kLoggedSamples, d.test_x.size(2), d.test_x.size(2)});
      }
    }
  });
  for (auto& m : runs) fmt::print("{}\n", m.net->summary());
  trainer.train();
  if (int rc = run.finish()) return rc;

  fmt::print("\n{:<10} {:>11} {:>10} {:>10} {:>15} {:>9}\n", "model", "parameters", "train mse", "test mse",
             "pair-attention", "ms/step");
  for (auto& m : runs)
    fmt::print("{:<10} {:>11} {:>10.4f} {:>10.4f} {:>15} {:>9.1f}\n", m.name, m.net->num_parameters(), m.final_train,
               m.final_test, m.attn ? fmt::format("{:.3f}", m.pair_score) : std::string("-"), m.ms_per_step);
  fmt::print("\nlog: {} (total {})\n", run.log_path(), format_seconds(total_clock.seconds()));
  return 0;
}

}  // namespace heed::experiments
