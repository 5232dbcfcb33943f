// experiments/copy.cpp: `heed run copy`: one causal attention layer over
// token + position embeddings learns y_t = x_{t-1} (the lectures' worked
// example 5, learned instead of set by hand).
#include "experiments/copy.h"

#include "core/kernels.h"
#include "experiments/common.h"
#include "heed.h"

namespace heed::experiments {

CopyModel::CopyModel(const CopyOptions& o, Generator* g) : Module("CopyModel") {
  tok = register_module("tok", std::make_shared<nn::Embedding>(nn::EmbeddingOptions(o.vocab, o.dim).generator(g)));
  pos = register_module("pos", std::make_shared<nn::LearnedPositionalEmbedding>(o.length, o.dim, g));
  attn = register_module("attn", std::make_shared<nn::MultiHeadAttention>(
                                     nn::MultiHeadAttentionOptions(o.dim, 1).causal(true).scale(o.scale).generator(g)));
  head = register_module("head", std::make_shared<nn::Linear>(nn::LinearOptions(o.dim, o.vocab).generator(g)));
}

Tensor CopyModel::forward(const Tensor& ids) { return (*head)((*attn)((*pos)((*tok)(ids)))); }

void make_copy_batch(const CopyOptions& o, Generator& g, Tensor& x, Tensor& y) {
  x = randint(0, o.vocab, {o.batch, o.length}, &g);
  y = Tensor::full({o.batch, o.length}, -100, DType::i64);
  const int64_t* px = x.data<int64_t>();
  int64_t* py = y.data<int64_t>();
  for (int64_t n = 0; n < o.batch; ++n)
    for (int64_t t = 1; t < o.length; ++t) py[n * o.length + t] = px[n * o.length + t - 1];
}

void evaluate_copy(CopyModel& m, const CopyOptions& o, Generator& g, double& acc, double& prev_mass) {
  autograd::NoGradGuard ng;
  Tensor x, y;
  make_copy_batch(o, g, x, y);
  m.attn->keep_attention(true);
  Tensor pred = argmax(m.forward(x), -1);          // [N, T]
  Tensor a = m.attn->last_attention().contiguous();  // [N, 1, T, T]
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

double copy_memory(const CopyOptions& o) {
  // Per block, float32 unless said: n = batch x length positions, each with
  // D floats (A), its 3 D query/key/value projection (B), V logits, T
  // attention weights (one head), one log-sum-exp; the token ids and
  // targets int64. Blocks that a step's path may also keep (the fused
  // attention's probabilities for short sequences) are left out: counted are
  // blocks alive on every path. Peaks measured (resident, the whole
  // process, --steps 1), against this: the defaults with --batch 131072:
  // 3.9 GB, this 3.83 GB; --dim 256 --batch 4096: 0.93 GB, this 0.89 GB;
  // --dim 256 --batch 16384: 3.59 GB, this 3.54 GB; --dim 512 --batch 4096:
  // 1.83 GB, this 1.77 GB; --dim 128 --batch 16384: 1.84 GB, this 1.79 GB.
  const double n = static_cast<double>(o.batch) * static_cast<double>(o.length);
  const auto D = static_cast<double>(o.dim), V = static_cast<double>(o.vocab), T = static_cast<double>(o.length);
  const double ids = 8 * n, A = 4 * n * D, B = 4 * n * 3 * D, lse = 4 * n, logits = 4 * n * V, maps = 4 * n * T;
  // The weights (embeddings, four D x D projections, the head), then with
  // the optimiser's two moments beside them.
  const double weights = 4 * ((V + T) * D + 4 * D * D + D * V + V);
  return tensor_memory({
      // The backward's first product (the head's): ids and targets, the
      // embedded input, the attention's output and the head's input (saved),
      // the projections and log-sum-exp (saved), the logits' gradient and
      // the one it gives the head's input.
      {{weights, 1}, {ids, 2}, {A, 4}, {B, 1}, {lse, 1}, {logits, 1}},
      // The attention's backward: its saved inputs and output, its output's
      // gradient, and the projections' gradient it writes.
      {{weights, 1}, {ids, 2}, {A, 3}, {B, 2}, {lse, 1}},
      // An evaluation (the maps kept, the unfused path): the step's batch
      // and the evaluation's, the embeddings, the position-added input, the
      // queries before and after scaling, the keys, the values, the
      // attention's output, and the scores with their softmax. (Counting 5
      // of these blocks left the estimate 16-19% under the peaks above.)
      {{weights, 3}, {ids, 4}, {A, 7}, {maps, 2}},
  });
}

int run_copy(const std::vector<std::string>& args, const std::vector<std::string>& command_line) {
  CopyOptions o;
  Run run("copy",
          "One causal self-attention layer over token + position embeddings learns to copy the\n"
          "previous token (y_t = x_{t-1}). Reports accuracy and the attention mass on position t-1.",
          RunOptions("runs/copy.h5").steps(300).checkpoint_every(100).progress_seconds(2));
  run.args()
      .integer("batch", &o.batch, "sequences per step", 1, kMaxBatch)
      .integer("length", &o.length, "sequence length", 2, kMaxMapLength)
      .integer("vocab", &o.vocab, "vocabulary size", 2, kMaxWidth)
      .integer("dim", &o.dim, "embedding width", 1, kMaxWidth)
      .real("lr", &o.lr, "Adam learning rate", 0.0, 1e300, true)
      .integer("eval-every", &o.eval_every, "evaluate every N steps (and at the end)", 1)
      .integer("seed", &o.seed, "seed", 0);
  if (!run.parse(args, command_line)) return 0;

  Generator init(static_cast<uint64_t>(o.seed) * 7919 + 1), data(static_cast<uint64_t>(o.seed)),
      eval_gen(static_cast<uint64_t>(o.seed) + 1000003);
  if (o.batch % dist::size() != 0)
    throw UsageError(fmt::format("run copy: --batch {} is not divisible by the {} processes of this job", o.batch,
                                 dist::size()));
  // Memory the run takes at least, refused before anything is written when
  // it is not there (else the kernel kills the run part way). Named is the
  // option that makes it too much: when the weights alone are, --dim if
  // they are at the smallest --vocab too, else --vocab; else --batch.
  {
    const auto D = static_cast<double>(o.dim), V = static_cast<double>(o.vocab),
               T = static_cast<double>(o.length);
    // The weights (embeddings, four D x D projections, the head), their
    // gradients and the optimiser's two moments, at a vocabulary of V.
    auto weights = [&](double v) { return 4 * 4 * ((v + T) * D + 4 * D * D + D * v + v); };
    const int64_t avail = memory_available();
    const bool by_dim = avail >= 0 && weights(2) > static_cast<double>(avail);
    check_memory("run copy", by_dim ? "dim" : "vocab", by_dim ? o.dim : o.vocab,
                 fmt::format("the weights, their gradients and the optimiser's two moments (--dim {}, --vocab {}, "
                             "--length {})",
                             o.dim, o.vocab, o.length),
                 weights(V));
  }
  check_memory("run copy", "batch", o.batch,
               fmt::format("a training step's activations and an evaluation's attention maps ({} sequences of "
                           "--length {}, --dim {}, --vocab {})",
                           o.batch, o.length, o.dim, o.vocab),
               copy_memory(o));
  CopyModel m(o, &init);
  optim::Adam opt(m.named_parameters(), optim::AdamOptions().lr(o.lr));
  optim::DataParallel ddp(m.named_parameters());  // under mpirun; one process: plain backward
  ddp.broadcast_parameters();
  double loss = 0, accuracy = 0, prev_mass = 0;
  run.track("model", m);
  run.track("optim", opt);
  run.track("rng/data", data);
  run.track("rng/eval", eval_gen);
  run.track("result/accuracy", accuracy);  // bit for bit: a resumed run reports what the uninterrupted one does
  run.track("result/prev_mass", prev_mass);
  run.track("result/loss", loss);
  run.begin([&](RunLog& log) {
    log_model(log, "copy", m);
    for (const char* name : {"train_loss", "accuracy", "prev_token_attention"}) log.declare_scalar(name);
    log.declare_series("attention/maps", {1, o.length, o.length});
  });

  while (run.next()) {
    const int64_t step = run.step();
    Tensor x, y;
    make_copy_batch(o, data, x, y);  // the global batch; each process trains on its share
    opt.zero_grad();
    Tensor l = cross_entropy(m.forward(dist::shard(x)), dist::shard(y));
    ddp.backward(l);
    opt.step();
    loss = dist::mean(l.item());
    run.log().scalar("train_loss", step, loss);
    run.show_loss("loss", loss);
    const bool last = step == run.steps();
    if (step % o.eval_every == 0 || last) {
      evaluate_copy(m, o, eval_gen, accuracy, prev_mass);
      run.log().scalar("accuracy", step, accuracy);
      run.log().scalar("prev_token_attention", step, prev_mass);
      run.show("accuracy", accuracy);
      run.show("attention on t-1", prev_mass);
    }
    if (last) {  // one attention map of the trained model
      autograd::NoGradGuard ng;
      Generator g(static_cast<uint64_t>(o.seed) + 17);
      make_copy_batch(o, g, x, y);
      m.attn->keep_attention(true);
      m.forward(kernel::narrow(x, 0, 0, 1));
      run.log().series("attention/maps", step, kernel::reshape(m.attn->last_attention(), {1, o.length, o.length}));
      m.attn->keep_attention(false);
    }
  }
  if (int rc = run.finish()) return rc;
  fmt::print("\naccuracy {:.4f}, mean attention on the previous position {:.3f}, {} ({})\nlog: {}\ncheckpoint: {}\n",
             accuracy, prev_mass, format_seconds(run.seconds()),
             accuracy >= 0.99 && prev_mass >= 0.9 ? "learned the shift" : "not learned yet: try more --steps",
             run.log_path(), run.checkpoint_path());
  return 0;
}

}  // namespace heed::experiments
