// experiments/copy.cpp: `heed run copy`: one causal attention layer over
// token + position embeddings learns y_t = x_{t-1} (the lectures' worked
// example 5, learned instead of set by hand).
#include "experiments/copy.h"

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

}  // namespace

CopyResult train_copy(const CopyOptions& o, RunLog* log) {
  Generator init(static_cast<uint64_t>(o.seed) * 7919 + 1), data(static_cast<uint64_t>(o.seed));
  Generator eval_gen(static_cast<uint64_t>(o.seed) + 1000003);
  CopyModel m(o, &init);
  optim::Adam opt(m.named_parameters(), optim::AdamOptions().lr(o.lr));
  CopyResult r;
  Stopwatch clock;
  Progress progress(2.0);
  for (int64_t step = 1; step <= o.steps; ++step) {
    Tensor x, y;
    make_batch(o, data, x, y);
    opt.zero_grad();
    Tensor loss = cross_entropy(m.forward(x), y);
    backward(loss);
    opt.step();
    r.final_loss = loss.item();
    if (log) log->scalar("train_loss", step, r.final_loss);
    if (step % 100 == 0 || step == o.steps) {
      evaluate(m, o, eval_gen, r.accuracy, r.prev_mass);
      if (log) {
        log->scalar("accuracy", step, r.accuracy);
        log->scalar("prev_token_attention", step, r.prev_mass);
      }
      if (o.verbose && progress.due(step == o.steps))
        fmt::print("step {}/{} loss {:.4f} accuracy {:.4f} attention on t-1 {:.3f} ({})\n", step, o.steps,
                   r.final_loss, r.accuracy, r.prev_mass, format_seconds(clock.seconds()));
    }
  }
  r.seconds = clock.seconds();
  if (log) {
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

int run_copy(const std::vector<std::string>& args, const std::vector<std::string>& command_line) {
  CopyOptions o;
  std::string out = "runs/copy.h5";
  int64_t threads = 2;
  Args a("run copy",
         "One causal self-attention layer over token + position embeddings learns to copy the\n"
         "previous token (y_t = x_{t-1}). Reports accuracy and the attention mass on position t-1.");
  a.integer("steps", &o.steps, "training steps", 1)
      .integer("batch", &o.batch, "sequences per step", 1)
      .integer("length", &o.length, "sequence length", 2)
      .integer("vocab", &o.vocab, "vocabulary size", 2)
      .integer("dim", &o.dim, "embedding width", 1)
      .real("lr", &o.lr, "Adam learning rate", 0.0, 1e300, true)
      .integer("seed", &o.seed, "seed", 0)
      .integer("threads", &threads, "threads for every backend", 1, 1024)
      .text("out", &out, "HDF5 log file");
  if (!a.parse(args)) return 0;
  prepare_output_path(out);
  kernel::set_num_threads(static_cast<int>(threads));
  RunLog log = RunLog::create(out);
  write_run_metadata(log, "copy", command_line, a);
  for (const char* m : {"train_loss", "accuracy", "prev_token_attention"}) log.declare_scalar(m);
  log.declare_series("attention/maps", {1, o.length, o.length});
  log.begin();
  CopyResult r = train_copy(o, &log);
  log.close();
  fmt::print("\naccuracy {:.4f}, mean attention on the previous position {:.3f}, {} ({})\nlog: {}\n", r.accuracy,
             r.prev_mass, format_seconds(r.seconds),
             r.accuracy >= 0.99 && r.prev_mass >= 0.9 ? "learned the shift" : "not learned yet: try more --steps",
             out);
  return 0;
}

}  // namespace heed::experiments
