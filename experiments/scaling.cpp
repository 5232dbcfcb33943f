// experiments/scaling.cpp: `heed run scaling`: why attention divides its scores
// by sqrt(d_k). Part 1 measures, for q and k of unit-variance entries, what
// the softmax sees as d_k grows, scaled and unscaled. Part 2 trains the same
// one-head attention model on the copy task (copy.h) at a large head width,
// scaled and unscaled, from the same initial weights and batches, for several
// seeds, all in lockstep so that one Run checkpoints and resumes them together.
#include "experiments/scaling.h"

#include <cmath>
#include <limits>

#include "experiments/common.h"
#include "experiments/copy.h"
#include "heed.h"

namespace heed::experiments {

SaturationRow measure_saturation(int64_t dk, bool scaled, int64_t queries, int64_t keys, uint64_t seed) {
  Generator g(seed);
  Tensor q = randn({queries, dk}, &g, DType::f64), k = randn({keys, dk}, &g, DType::f64);
  Tensor up = randn({queries, keys}, &g, DType::f64);  // an upstream gradient of unit variance
  const double factor = scaled ? 1.0 / std::sqrt(static_cast<double>(dk)) : 1.0;
  // The softmax's input as a leaf, so its gradient is the softmax's backward.
  Tensor s = (q.matmul(k.transpose(0, 1)) * factor).detach().set_requires_grad();
  Tensor p = s.softmax(-1);
  (p * up).sum().backward();
  SaturationRow r;
  r.dk = dk;
  r.score_var = (s - s.mean()).pow(2.0).mean().item();
  r.entropy = -(p * clamp_min(p, 1e-300).log()).sum({1}).mean().item();
  r.max_weight = p.max({1}).mean().item();
  // ||dL/ds|| / ||dL/dp|| per query, averaged: how much gradient the softmax
  // lets through to the scores (0 when saturated).
  r.grad_ratio = (s.grad().pow(2.0).sum({1}).sqrt() / up.pow(2.0).sum({1}).sqrt()).mean().item();
  return r;
}

// Peaks measured (resident, the whole process, --steps 1), against this:
// the defaults (3 seeds, --dim 256, --length 16, --dk-max 1024) with --batch
// 4096: 0.98 GB, this 0.91 GB; --batch 16384: 3.63 GB, this 3.56 GB (part 2
// counts copy_memory's lower bound); --queries 4096 --keys 4096 --dk-max 64:
// 1.00 GB, this 0.96 GB; --queries 2048 --dk-max 65536: 2.21 GB, this 2.16 GB.
double scaling_memory(int64_t dk_max, int64_t queries, int64_t keys, int64_t seeds, const CopyOptions& copy) {
  const auto Q = static_cast<double>(queries), K = static_cast<double>(keys);
  // Part 1, one moment a d_k (4, 8, .. dk_max): q and k, and of the Q x K
  // float64 matrices the upstream gradient, the scores, their softmax, its
  // product with the gradient, the scores' gradient, and the statistics'
  // temporaries. (The cache holds every d_k's q and k: about twice the
  // largest's.)
  std::vector<LiveBlocks> moments;
  for (int64_t d = 4; d <= dk_max; d *= 2) {
    const auto dk = static_cast<double>(d);
    moments.push_back({{8 * Q * dk, 1}, {8 * K * dk, 1}, {8 * Q * K, 7}});
  }
  if (seeds > 0) {
    const auto D = static_cast<double>(copy.dim), V = static_cast<double>(copy.vocab),
               T = static_cast<double>(copy.length);
    // Every model's weights (embeddings, four D x D projections, the head)
    // with their gradients and the optimiser's two moments; copy_memory
    // counts one model's.
    const double weights = 4 * ((V + T) * D + 4 * D * D + D * V + V);
    moments.push_back({{copy_memory(copy), 1}, {weights, 4 * (2 * static_cast<double>(seeds) - 1)}});
  }
  return tensor_memory(moments);
}

namespace {

struct Settings {
  int64_t dk_max = 1024, queries = 256, keys = 64;
  int64_t seeds = 3;
  CopyOptions copy;
};

std::vector<int64_t> dk_values(int64_t dk_max) {
  std::vector<int64_t> v;
  for (int64_t d = 4; d <= dk_max; d *= 2) v.push_back(d);
  return v;
}

}  // namespace

int run_scaling(const std::vector<std::string>& args, const std::vector<std::string>& command_line) {
  Settings s;
  s.copy.dim = 256;
  s.copy.lr = 1e-3;
  s.copy.batch = 32;
  s.copy.eval_every = 50;
  Run run("scaling",
          "Why attention scales its scores by 1/sqrt(d_k). Part 1: for q, k with unit-variance\n"
          "entries, the variance of the scores, the softmax's entropy, its largest weight and the\n"
          "gradient it passes back, for d_k = 4 .. --dk-max, scaled and unscaled. Part 2: the copy\n"
          "task (heed run copy) with one head of width --dim, trained scaled and unscaled from the\n"
          "same weights and batches, for --seeds seeds: loss and accuracy side by side.",
          RunOptions("runs/scaling.h5").steps(400).checkpoint_every(100).progress_seconds(2));
  run.args()
      .integer("dk-max", &s.dk_max, "largest d_k of part 1 (powers of two from 4)", 4, 1 << 16)
      .integer("queries", &s.queries, "queries per d_k in part 1", 1, kMaxLength)
      .integer("keys", &s.keys, "keys each query attends to in part 1", 2, kMaxLength)
      .integer("seeds", &s.seeds, "training runs per variant in part 2", 1, 64)
      .integer("dim", &s.copy.dim, "part 2: embedding and head width (one head)", 1, kMaxWidth)
      .integer("length", &s.copy.length, "part 2: sequence length", 2, kMaxMapLength)
      .integer("vocab", &s.copy.vocab, "part 2: vocabulary size", 2, kMaxWidth)
      .integer("batch", &s.copy.batch, "part 2: sequences per step", 1, kMaxBatch)
      .real("lr", &s.copy.lr, "part 2: Adam learning rate", 0.0, 1e300, true)
      .integer("eval-every", &s.copy.eval_every, "part 2: accuracy every N steps (and at the end)", 1)
      .integer("seed", &s.copy.seed, "first seed (part 2 uses seed .. seed + seeds - 1; part 1 uses seed)", 0);
  // Part 2 compares 2 x --seeds models, each pair of a seed from the same
  // initial draw; one file's weights given to all of them would leave one
  // starting point and nothing to compare, and to one of them a broken pair.
  // Run's --init-from is therefore neither offered (--help) nor taken.
  run.args().withhold("init-from", "does not apply: scaling trains 2 x --seeds models (scaled and unscaled) from "
                                   "initial weights it draws per seed, and starts none of them from a file (heed run "
                                   "copy --init-from starts one copy model from a file)");
  if (!run.parse(args, command_line)) return 0;
  // Part 2's seeds are --seed .. --seed + --seeds - 1, each an int64 (the
  // models' names, the log's attribute): the last one must be one too.
  if (s.copy.seed > std::numeric_limits<int64_t>::max() - (s.seeds - 1))
    throw UsageError(fmt::format("run scaling: --seed {} with --seeds {} runs past the largest seed, {} (part 2 uses "
                                 "seeds --seed .. --seed + --seeds - 1); expected --seed at most {}",
                                 s.copy.seed, s.seeds, std::numeric_limits<int64_t>::max(),
                                 std::numeric_limits<int64_t>::max() - (s.seeds - 1)));
  // Part 1 runs d_k = 4, 8, 16, .. --dk-max, as --help says: a value that
  // is not a power of two would run to the one below it and be logged as
  // run (config.dk-max).
  if ((s.dk_max & (s.dk_max - 1)) != 0) {
    int64_t below = 4;
    while (2 * below < s.dk_max) below *= 2;
    throw UsageError(fmt::format("run scaling: --dk-max {} is not a power of two (part 1 runs d_k = 4, 8, 16, .. "
                                 "--dk-max); expected {} or {}",
                                 s.dk_max, below, 2 * below));
  }
  if (s.copy.batch % dist::size() != 0)
    throw UsageError(fmt::format("run scaling: --batch {} is not divisible by the {} processes of this job",
                                 s.copy.batch, dist::size()));

  // Memory the options make the run take, refused before anything is
  // written when it is not there (else part 1 or the first steps were
  // killed part way, or an allocation failed, after the log was written):
  // part 1, named by the option of its largest term (--dk-max for the
  // queries and keys, else the larger of --queries and --keys), then the
  // models' weights (--dim), then part 2's steps beside them (--batch).
  {
    const double part1 = scaling_memory(s.dk_max, s.queries, s.keys, 0, s.copy);
    const bool by_dk = 2 * static_cast<double>(s.queries + s.keys) * static_cast<double>(s.dk_max) >
                       7 * static_cast<double>(s.queries) * static_cast<double>(s.keys);
    const bool by_keys = !by_dk && s.keys > s.queries;
    check_memory("run scaling", by_dk ? "dk-max" : by_keys ? "keys" : "queries",
                 by_dk ? s.dk_max : by_keys ? s.keys : s.queries,
                 fmt::format("part 1's float64 scores, softmax and gradients (--queries {} x --keys {}) and queries "
                             "and keys of d_k up to --dk-max {}",
                             s.queries, s.keys, s.dk_max),
                 part1);
    const auto D = static_cast<double>(s.copy.dim), V = static_cast<double>(s.copy.vocab),
               T = static_cast<double>(s.copy.length);
    check_memory("run scaling", "dim", s.copy.dim,
                 fmt::format("part 2's {} models' weights, their gradients and the optimiser's two moments (--dim "
                             "{}, --vocab {}, --length {}) beside part 1",
                             2 * s.seeds, s.copy.dim, s.copy.vocab, s.copy.length),
                 part1 + 2 * static_cast<double>(s.seeds) * 4 * 4 * ((V + T) * D + 4 * D * D + D * V + V));
    check_memory("run scaling", "batch", s.copy.batch,
                 fmt::format("part 2's training steps and evaluations ({} models in turn, {} sequences of --length "
                             "{}, --dim {}, --vocab {}) beside their weights and part 1",
                             2 * s.seeds, s.copy.batch, s.copy.length, s.copy.dim, s.copy.vocab),
                 scaling_memory(s.dk_max, s.queries, s.keys, s.seeds, s.copy));
  }

  // Part 2's models: [variant][seed], variant 0 scaled (1/sqrt(dim)), 1 unscaled
  // (factor 1). Both variants of a seed start from the same weights and see
  // the same batches.
  const int64_t S = s.seeds;
  const char* variants[2] = {"scaled", "unscaled"};
  std::vector<std::unique_ptr<CopyModel>> models;
  std::vector<std::unique_ptr<optim::Adam>> opts;
  std::vector<std::unique_ptr<optim::DataParallel>> ddps;
  std::vector<Generator> data, evals;
  for (int v = 0; v < 2; ++v)
    for (int64_t i = 0; i < S; ++i) {
      CopyOptions o = s.copy;
      o.scale = v == 0 ? 0.0 : 1.0;
      Generator init(static_cast<uint64_t>(s.copy.seed + i) * 7919 + 1);
      models.push_back(std::make_unique<CopyModel>(o, &init));
      opts.push_back(std::make_unique<optim::Adam>(models.back()->named_parameters(), optim::AdamOptions().lr(o.lr)));
      ddps.push_back(std::make_unique<optim::DataParallel>(models.back()->named_parameters()));
      ddps.back()->broadcast_parameters();
    }
  for (int64_t i = 0; i < S; ++i) {
    data.emplace_back(static_cast<uint64_t>(s.copy.seed + i));
    evals.emplace_back(static_cast<uint64_t>(s.copy.seed + i) + 1000003);
  }
  auto index = [S](int v, int64_t i) { return static_cast<size_t>(v * S + i); };
  std::vector<double> loss(static_cast<size_t>(2 * S), NAN), acc(static_cast<size_t>(2 * S), NAN);
  for (int v = 0; v < 2; ++v)
    for (int64_t i = 0; i < S; ++i) {
      const std::string name = fmt::format("{}/seed{}", variants[v], s.copy.seed + i);
      run.track("model/" + name, *models[index(v, i)]);
      run.track("optim/" + name, *opts[index(v, i)]);
      run.track("result/loss/" + name, loss[index(v, i)]);
      run.track("result/accuracy/" + name, acc[index(v, i)]);
    }
  for (int64_t i = 0; i < S; ++i) {
    run.track(fmt::format("rng/data/seed{}", s.copy.seed + i), data[static_cast<size_t>(i)]);
    run.track(fmt::format("rng/eval/seed{}", s.copy.seed + i), evals[static_cast<size_t>(i)]);
  }

  run.begin([&](RunLog& log) {
    // Part 1, measured once when the run starts.
    const std::vector<int64_t> dks = dk_values(s.dk_max);
    const int64_t n = static_cast<int64_t>(dks.size());
    std::vector<double> var(2 * n), ent(2 * n), mx(2 * n), gr(2 * n);
    fmt::print("part 1: q, k with N(0, 1) entries, {} queries over {} keys (uniform attention: entropy {:.3f}, "
               "largest weight {:.4f})\n",
               s.queries, s.keys, std::log(static_cast<double>(s.keys)), 1.0 / static_cast<double>(s.keys));
    fmt::print("{:>6} | {:>10} {:>8} {:>8} {:>9} | {:>10} {:>8} {:>8} {:>9}\n", "d_k", "var scaled", "entropy",
               "max w", "grad", "var unsc.", "entropy", "max w", "grad");
    for (int64_t j = 0; j < n; ++j) {
      SaturationRow r[2];
      for (int v = 0; v < 2; ++v) {
        r[v] = measure_saturation(dks[static_cast<size_t>(j)], v == 0, s.queries, s.keys,
                                  static_cast<uint64_t>(s.copy.seed) * 31 + static_cast<uint64_t>(j));
        const size_t at = static_cast<size_t>(v * n + j);
        var[at] = r[v].score_var;
        ent[at] = r[v].entropy;
        mx[at] = r[v].max_weight;
        gr[at] = r[v].grad_ratio;
      }
      fmt::print("{:>6} | {:>10.3f} {:>8.3f} {:>8.4f} {:>9.2e} | {:>10.1f} {:>8.3f} {:>8.4f} {:>9.2e}\n",
                 dks[static_cast<size_t>(j)], r[0].score_var, r[0].entropy, r[0].max_weight, r[0].grad_ratio,
                 r[1].score_var, r[1].entropy, r[1].max_weight, r[1].grad_ratio);
    }
    log.write_tensor("saturation/dk", Tensor::from_i64(dks, {n}));
    log.write_tensor("saturation/score_var", Tensor::from_f64(var, {2, n}));
    log.write_tensor("saturation/entropy", Tensor::from_f64(ent, {2, n}));
    log.write_tensor("saturation/max_weight", Tensor::from_f64(mx, {2, n}));
    log.write_tensor("saturation/grad_ratio", Tensor::from_f64(gr, {2, n}));
    log.set_attr("variants", std::string("scaled unscaled"));
    log.set_attr("seeds", fmt::format("{}..{}", s.copy.seed, s.copy.seed + (S - 1)));
    log_model(log, "copy", *models[0]);
    log.declare_scalar("train_loss");  // the mean over all 2 x seeds models
    log.declare_series("losses", {2, S});
    log.declare_series("accuracy", {2, S});
    log.declare_series("prev_token_attention", {2, S});
  });
  fmt::print("part 2: the copy task, one head of width {}, {} seeds, scaled and unscaled\n", s.copy.dim, S);

  auto mean_of = [S](const std::vector<double>& v, int variant) {
    double sum = 0;
    for (int64_t i = 0; i < S; ++i) sum += v[static_cast<size_t>(variant * S + i)];
    return sum / static_cast<double>(S);
  };
  while (run.next()) {
    const int64_t step = run.step();
    for (int64_t i = 0; i < S; ++i) {
      Tensor x, y;
      make_copy_batch(s.copy, data[static_cast<size_t>(i)], x, y);  // the same batch for both variants
      x = dist::shard(x);
      y = dist::shard(y);
      for (int v = 0; v < 2; ++v) {
        const size_t at = index(v, i);
        opts[at]->zero_grad();
        Tensor l = cross_entropy(models[at]->forward(x), y);
        ddps[at]->backward(l);
        opts[at]->step();
        loss[at] = dist::mean(l.item());
      }
    }
    run.log().series("losses", step, Tensor::from_f64(loss, {2, S}));
    run.log().scalar("train_loss", step, (mean_of(loss, 0) + mean_of(loss, 1)) / 2);
    run.show_loss("loss scaled", mean_of(loss, 0));
    run.show_loss("loss unscaled", mean_of(loss, 1));
    if (step % s.copy.eval_every == 0 || step == run.steps()) {
      std::vector<double> mass(static_cast<size_t>(2 * S));
      for (int64_t i = 0; i < S; ++i)
        for (int v = 0; v < 2; ++v) {
          Generator g = evals[static_cast<size_t>(i)];  // both variants are scored on the same batch
          evaluate_copy(*models[index(v, i)], s.copy, g, acc[index(v, i)], mass[index(v, i)]);
          if (v == 1) evals[static_cast<size_t>(i)] = g;
        }
      run.log().series("accuracy", step, Tensor::from_f64(acc, {2, S}));
      run.log().series("prev_token_attention", step, Tensor::from_f64(mass, {2, S}));
      run.show("accuracy scaled", mean_of(acc, 0));
      run.show("accuracy unscaled", mean_of(acc, 1));
    }
  }
  if (int rc = run.finish()) return rc;
  fmt::print("\nafter {} steps (mean over {} seeds): scaled loss {:.4f} accuracy {:.3f}; unscaled loss {:.4f} "
             "accuracy {:.3f}\nlog: {}\nplot: heed plot {}\n",
             run.steps(), S, mean_of(loss, 0), mean_of(acc, 0), mean_of(loss, 1), mean_of(acc, 1), run.log_path(),
             run.log_path());
  return 0;
}

}  // namespace heed::experiments
