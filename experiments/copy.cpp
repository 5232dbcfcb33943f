// experiments/copy.cpp: `heed run copy`: one causal attention layer over
// token + position embeddings learns y_t = x_{t-1} (the lectures' worked
// example 5, learned instead of set by hand).
#include "experiments/copy.h"

#include <optional>

#include "data/checkpoint.h"
#include "data/runlog.h"
#include "experiments/args.h"
#include "experiments/common.h"
#include "heed.h"

namespace heed::experiments {

namespace {

// Embedding + learned positions -> causal self-attention -> vocabulary logits.
class CopyModel : public nn::Module {
 public:
  CopyModel(const CopyOptions& o, Generator* g) : Module("CopyModel") {
    tok = register_module("tok", std::make_shared<nn::Embedding>(nn::EmbeddingOptions(o.vocab, o.dim).generator(g)));
    pos = register_module("pos", std::make_shared<nn::LearnedPositionalEmbedding>(o.length, o.dim, g));
    attn = register_module("attn", std::make_shared<nn::MultiHeadAttention>(
                                       nn::MultiHeadAttentionOptions(o.dim, 1).causal(true).generator(g)));
    head = register_module("head", std::make_shared<nn::Linear>(nn::LinearOptions(o.dim, o.vocab).generator(g)));
  }
  Tensor forward(const Tensor& ids) override {  // [N, T] -> [N, T, V]
    return head->forward(attn->forward(pos->forward(tok->forward(ids))));
  }
  std::shared_ptr<nn::Embedding> tok;
  std::shared_ptr<nn::LearnedPositionalEmbedding> pos;
  std::shared_ptr<nn::MultiHeadAttention> attn;
  std::shared_ptr<nn::Linear> head;
};

// A batch of random tokens and its targets: y_t = x_{t-1}, y_0 ignored.
void make_batch(const CopyOptions& o, Generator& g, Tensor& x, Tensor& y) {
  x = randint(0, o.vocab, {o.batch, o.length}, &g);
  y = Tensor::full({o.batch, o.length}, -100, DType::i64);
  const int64_t* px = x.data<int64_t>();
  int64_t* py = y.data<int64_t>();
  for (int64_t n = 0; n < o.batch; ++n)
    for (int64_t t = 1; t < o.length; ++t) py[n * o.length + t] = px[n * o.length + t - 1];
}

// Accuracy over t >= 1 and the mean attention mass on t - 1.
void evaluate(CopyModel& m, const CopyOptions& o, Generator& g, double& acc, double& prev_mass) {
  autograd::NoGradGuard ng;
  Tensor x, y;
  make_batch(o, g, x, y);
  m.attn->keep_attention(true);
  Tensor pred = kernel::argmax(m.forward(x), -1);  // [N, T]
  Tensor a = kernel::contiguous(m.attn->last_attention());  // [N, 1, T, T]
  m.attn->keep_attention(false);
  const int64_t* pp = pred.data<int64_t>();
  const int64_t* py = y.data<int64_t>();
  const float* pa = a.data<float>();
  int64_t right = 0, count = 0;
  double mass = 0;
  const int64_t T = o.length;
  for (int64_t n = 0; n < o.batch; ++n)
    for (int64_t t = 1; t < T; ++t) {
      right += pp[n * T + t] == py[n * T + t];
      mass += pa[(n * T + t) * T + (t - 1)];
      ++count;
    }
  acc = static_cast<double>(right) / static_cast<double>(count);
  prev_mass = mass / static_cast<double>(count);
}

// One training run: built, and with o.run.resume restored from its
// checkpoint (a bad one is refused here, before the caller touches the log),
// then trained.
struct CopyRun {
  const CopyOptions& o;
  Generator init, data, eval_gen;
  CopyModel m;
  optim::Adam opt;
  CopyResult r;
  int64_t step = 0;

  explicit CopyRun(const CopyOptions& opts)
      : o(opts),
        init(static_cast<uint64_t>(opts.seed) * 7919 + 1),
        data(static_cast<uint64_t>(opts.seed)),
        eval_gen(static_cast<uint64_t>(opts.seed) + 1000003),
        m(opts, &init),
        opt(m.named_parameters(), optim::AdamOptions().lr(opts.lr)) {
    if (o.run.stop_after > 0 && o.run.checkpoint.empty())
      fail("train_copy: stop_after {} needs a checkpoint path to save the stopped run in", o.run.stop_after);
    if (!o.run.resume.empty()) restore(load_checkpoint(o.run.resume, "copy"));
  }

  // The initial weights are overwritten; everything random from here on
  // comes from the saved generators.
  void restore(const Checkpoint& ck) {
    step = checkpoint_step(ck, o.steps);
    m.load_state_dict(ck.get("model"));
    opt.load_state_dict(ck.get("optim"));
    restore_generator(ck, "rng/data", data);
    restore_generator(ck, "rng/eval", eval_gen);
    restore_generator(ck, "rng/default", default_generator());
    auto v = checkpoint_values(ck, "result", 3);
    r.final_loss = v[0];
    r.accuracy = v[1];
    r.prev_mass = v[2];
  }

  void save() const {
    Checkpoint ck;
    ck.experiment = "copy";
    ck.config = o.run.config;
    ck.counters["step"] = step;
    ck.put("model", m.state_dict());
    ck.put("optim", opt.state_dict());
    ck.tensors["rng/data"] = data.state_tensor();
    ck.tensors["rng/eval"] = eval_gen.state_tensor();
    ck.tensors["rng/default"] = default_generator().state_tensor();
    // Bit for bit, so a resumed run reports what the uninterrupted one does.
    ck.tensors["result"] = Tensor::from_f64({r.final_loss, r.accuracy, r.prev_mass}, {3});
    save_checkpoint(o.run.checkpoint, ck);
  }

  CopyResult train(RunLog* log) {
    if (o.verbose && step > 0) fmt::print("resumed from {} at step {}/{}\n", o.run.resume, step, o.steps);
    // Ctrl-C stops the run cleanly only when there is somewhere to save it.
    std::optional<StopRequest> ctrl_c;
    if (!o.run.checkpoint.empty()) ctrl_c.emplace();
    Stopwatch clock;
    Progress progress(2.0);
    const int64_t start = step;
    while (step < o.steps) {
      ++step;
      Tensor x, y;
      make_batch(o, data, x, y);
      opt.zero_grad();
      Tensor loss = cross_entropy(m.forward(x), y);
      backward(loss);
      opt.step();
      r.final_loss = loss.item();
      if (log) log->scalar("train_loss", step, r.final_loss);
      if (step % o.eval_every == 0 || step == o.steps) {
        evaluate(m, o, eval_gen, r.accuracy, r.prev_mass);
        if (log) {
          log->scalar("accuracy", step, r.accuracy);
          log->scalar("prev_token_attention", step, r.prev_mass);
        }
        if (o.verbose && progress.due(step == o.steps))
          fmt::print("step {}/{} loss {:.4f} accuracy {:.4f} attention on t-1 {:.3f} ({})\n", step, o.steps,
                     r.final_loss, r.accuracy, r.prev_mass, format_seconds(clock.seconds()));
      }
      if (o.run.end_step(step, o.steps, ctrl_c ? &*ctrl_c : nullptr, log, [&] { save(); })) {
        r.stopped = true;
        break;
      }
    }
    r.step = step;
    r.seconds = clock.seconds();
    if (log && !r.stopped && start < o.steps) {
      autograd::NoGradGuard ng;
      Tensor x, y;
      make_batch(o, eval_gen, x, y);
      m.attn->keep_attention(true);
      m.forward(kernel::narrow(x, 0, 0, 1));
      log->series("attention/maps", o.steps, kernel::reshape(m.attn->last_attention(), {1, o.length, o.length}));
      m.attn->keep_attention(false);
    }
    return r;
  }
};

}  // namespace

CopyResult train_copy(const CopyOptions& o, RunLog* log) { return CopyRun(o).train(log); }

int run_copy(const std::vector<std::string>& args, const std::vector<std::string>& command_line) {
  CopyOptions o;
  o.run.checkpoint_every = 100;
  std::string out = "runs/copy.h5";
  int64_t threads = 2;
  Args a("run copy",
         "One causal self-attention layer over token + position embeddings learns to copy the\n"
         "previous token (y_t = x_{t-1}). Reports accuracy and the attention mass on position t-1.\n"
         "Logs to HDF5, writes checkpoints; --resume continues a stopped run bit for bit, and\n"
         "Ctrl-C stops after the current step with a checkpoint.");
  a.integer("steps", &o.steps, "training steps", 1)
      .integer("batch", &o.batch, "sequences per step", 1)
      .integer("length", &o.length, "sequence length", 2)
      .integer("vocab", &o.vocab, "vocabulary size", 2)
      .integer("dim", &o.dim, "embedding width", 1)
      .real("lr", &o.lr, "Adam learning rate", 0.0, 1e300, true)
      .integer("eval-every", &o.eval_every, "evaluate every N steps (and at the end)", 1)
      .integer("seed", &o.seed, "seed", 0)
      .integer("threads", &threads, "threads for every backend", 1, 1024)
      .text("out", &out, "HDF5 log file");
  add_run_control_options(a, o.run);
  if (!a.parse(args)) return 0;
  prepare_run(a, o.run, "copy", "run copy", out);
  kernel::set_num_threads(static_cast<int>(threads));

  CopyRun run(o);  // restores a checkpoint before the log is touched
  RunLog log = o.run.resume.empty() ? RunLog::create(out) : RunLog::resume(out, run.step);
  if (o.run.resume.empty()) {
    write_run_metadata(log, "copy", command_line, a);
    {
      Generator g(0);  // describes the model only: the run builds its own
      log_model(log, "copy", CopyModel(o, &g));
    }
    for (const char* m : {"train_loss", "accuracy", "prev_token_attention"}) log.declare_scalar(m);
    log.declare_series("attention/maps", {1, o.length, o.length});
    log.begin();
  }
  fmt::print("logging to {}, checkpoints to {}\n", out, o.run.checkpoint);
  CopyResult r = run.train(&log);
  log.close();
  if (r.stopped) {
    print_stopped("run copy", a, o.run.checkpoint, r.step, o.steps);
    return 130;
  }
  fmt::print("\naccuracy {:.4f}, mean attention on the previous position {:.3f}, {} ({})\nlog: {}\ncheckpoint: {}\n",
             r.accuracy, r.prev_mass, format_seconds(r.seconds),
             r.accuracy >= 0.99 && r.prev_mass >= 0.9 ? "learned the shift" : "not learned yet: try more --steps", out,
             o.run.checkpoint);
  return 0;
}

}  // namespace heed::experiments
