// experiments/crossattn.cpp: `heed run crossattn`: a model whose signal
// positions cross-attend to a token description of the signal's shapes
// (kind, position, height of each) learns to draw the signal. The log holds
// the test error, the cross-attention maps of a few test samples and, per
// layer, how much of each covered position's attention falls on the tokens
// of its shape. With the defaults (two cross-attention layers, the tokens
// not mixed by an encoder) the first layer learns to find the position
// token near the query, the second to read that shape's kind and height.
#include "experiments/crossattn.h"

#include <array>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>

#include "core/kernels.h"
#include "experiments/common.h"
#include "experiments/crossattn_task.h"
#include "heed.h"

namespace heed::experiments {

namespace {

constexpr int64_t kSamples = 4;      // test samples whose outputs and maps are logged
constexpr int64_t kEvalChunk = 128;  // test samples per forward pass in evaluation
// The logged scores of each decoder layer (ShapeTokenScore: mean, on_field 0..2).
constexpr const char* kScores[4] = {"shape_tokens", "on_kind", "on_position", "on_height"};

struct CrossAttnConfig {
  int64_t batch = 32;
  double lr = 3e-3;
  int64_t dim = 64, heads = 2, encoder_layers = 0, layers = 2;
  DescribedOptions task;  // the task's knobs, with their defaults
  int64_t test = 512;
  int64_t eval_every = 250;
  int64_t seed = 0;
};

// Test MSE over the whole test set and the shape-token score of every
// decoder layer, in chunks; kept maps take the unfused path. Before each
// chunk asks stop (when given): nullopt when it says to stop.
std::optional<double> evaluate(SignalFromTokens& m, const DescribedSet& test, int64_t half_width,
                               std::vector<ShapeTokenScore>& scores, const std::function<bool()>& stop) {
  autograd::NoGradGuard ng;
  m.keep_attention(true);
  scores.assign(m.layers(), ShapeTokenScore());
  double sum = 0;
  const int64_t n = test.size();
  for (int64_t at = 0; at < n; at += kEvalChunk) {
    if (stop && stop()) {
      m.keep_attention(false);
      return std::nullopt;
    }
    const int64_t b = std::min(kEvalChunk, n - at);
    Tensor out = m.forward(kernel::narrow(test.tokens, 0, at, b));
    sum += mse_loss(out, kernel::narrow(test.signal, 0, at, b)).item() * static_cast<double>(b);
    for (size_t l = 0; l < m.layers(); ++l)
      scores[l].add(shape_token_attention(m.last_attention(l), kernel::narrow(test.centres, 0, at, b), half_width));
  }
  m.keep_attention(false);
  return sum / static_cast<double>(n);
}

}  // namespace

int run_crossattn(const std::vector<std::string>& args, const std::vector<std::string>& command_line) {
  CrossAttnConfig c;
  Run run("crossattn",
          "Cross-attention from a signal to the tokens that describe it: each sample is a signal of\n"
          "--shapes shapes and a token sequence giving each shape's kind, position and height. Every\n"
          "signal position starts from a learned position embedding and, layer by layer, cross-attends\n"
          "to the tokens (embedded with their place in the sequence; --encoder-layers transformer\n"
          "blocks over them first, none by default); the model draws the signal. Logs the test MSE,\n"
          "the cross-attention maps and, per layer, the attention each position inside a shape puts on\n"
          "the three tokens of that shape, against attention spread evenly.",
          RunOptions("runs/crossattn.h5").steps(2000).checkpoint_every(500).progress_seconds(2));
  run.args()
      .integer("batch", &c.batch, "samples per step", 1, kMaxBatch)
      .real("lr", &c.lr, "Adam learning rate", 0.0, 1e300, true)
      .integer("dim", &c.dim, "model width D", 1, kMaxWidth)
      .integer("heads", &c.heads, "attention heads (must divide --dim)", 1, kMaxWidth)
      .integer("encoder-layers", &c.encoder_layers, "transformer blocks over the tokens (0: none)", 0, 8)
      .integer("layers", &c.layers, "decoder layers (cross-attention + feed-forward)", 1, 8)
      .integer("length", &c.task.length, "signal length L", 16, kMaxMapLength)
      .integer("shapes", &c.task.shapes, "shapes per signal (3 tokens each)", 1, kMaxLength)
      .integer("test", &c.test, "test samples", kSamples, kMaxSamples)
      .integer("eval-every", &c.eval_every, "evaluate every N steps (and at the end)", 1)
      .integer("seed", &c.seed, "seed for data and initialisation", 0);
  if (!run.parse(args, command_line)) return 0;
  if (c.dim % c.heads != 0)
    throw UsageError(fmt::format("run crossattn: --dim {} is not divisible by --heads {}", c.dim, c.heads));
  if (c.batch % dist::size() != 0)
    throw UsageError(fmt::format("run crossattn: --batch {} is not divisible by the {} processes of this job",
                                 c.batch, dist::size()));

  const DescribedOptions& task = c.task;
  const int64_t S = 3 * task.shapes;
  // Shapes that do not fit in the signal, and options that make no sense,
  // refused as such (drawing no sample checks them) before the memory their
  // sizes would take is counted: that check would blame --batch or --test.
  auto drawing = [&](const std::function<DescribedSet()>& draw) {
    try {
      return draw();
    } catch (const UsageError& e) {  // shapes that do not fit, or cannot be drawn apart
      throw UsageError(
          fmt::format("run crossattn: --shapes {} with --length {}: {}", task.shapes, task.length, e.what()));
    }
  };
  drawing([&] {
    Generator none(0);
    return generate_described(0, none, task);
  });
  // Memory the options make the run take, refused before anything is
  // written when it is not there (else the kernel kills the run part way, or
  // an allocation fails after the log is written): the test set; the model's
  // weights, gradients and optimiser state; what a training step and an
  // evaluation allocate besides (crossattn_memory). Named is the option that
  // makes it too much: --dim when the weights alone are, --length when one
  // sample a step is, else --batch.
  {
    check_memory("run crossattn", "test", c.test,
                 fmt::format("the test set ({} samples of --length {})", c.test, task.length),
                 described_bytes(c.test, task) + 4 * static_cast<double>(task.length) * static_cast<double>(c.test));
    const auto D = static_cast<double>(c.dim);
    check_memory("run crossattn", "dim", c.dim,
                 fmt::format("the weights, their gradients and the optimiser's two moments ({} decoder and {} "
                             "encoder layers of 12 x {}^2 weights)",
                             c.layers, c.encoder_layers, c.dim),
                 4 * 4 * static_cast<double>(c.layers + c.encoder_layers) * 12 * D * D);
    auto need = [&](int64_t batch) {
      return crossattn_memory(task, c.dim, c.heads, c.encoder_layers, c.layers, batch, c.test, kEvalChunk);
    };
    check_memory("run crossattn", "length", task.length,
                 fmt::format("a training step on one sample and an evaluation's attention maps ({} test samples at "
                             "a time of --length {}, --shapes {}, --dim {}, --heads {}, --layers {}) beside the test "
                             "set",
                             std::min(kEvalChunk, c.test), task.length, task.shapes, c.dim, c.heads, c.layers),
                 need(1));
    check_memory("run crossattn", "batch", c.batch,
                 fmt::format("a training step's activations and gradients ({} samples of --length {}, --shapes {}, "
                             "--dim {}, --heads {}, --layers {}) and an evaluation beside the test set",
                             c.batch, task.length, task.shapes, c.dim, c.heads, c.layers),
                 need(c.batch));
  }
  DescribedSet test;
  try {
    test = drawing([&] {
      Generator g(static_cast<uint64_t>(c.seed) + 1000003);  // the test set, rebuilt identically on resume
      return generate_described(c.test, g, task);
    });
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {  // out of memory: no fault of the options' meaning
    fail("run crossattn: the test set (--test {} samples of --length {}): {}", c.test, task.length, e.what());
  }
  Generator data(static_cast<uint64_t>(c.seed)), init(static_cast<uint64_t>(c.seed) * 1000 + 1);
  SignalFromTokens m(task, c.dim, c.heads, c.encoder_layers, c.layers, &init);
  optim::Adam opt(m.named_parameters(), optim::AdamOptions().lr(c.lr));
  optim::DataParallel ddp(m.named_parameters());  // one process: plain backward
  ddp.broadcast_parameters();
  // What drawing nothing would score: the mean square of the test signals.
  // (mse_loss(signal, zeros)'s value, bit for bit, without two more copies of the signals.)
  const double zero_mse = kernel::mean(kernel::unary(kernel::Unary::square, test.signal), {}).item();

  // Per decoder layer at the last evaluation: the attention on the shape's
  // own tokens (mean over heads), then split by token (kind, position, height).
  double loss = NAN, test_mse = NAN, uniform = NAN;
  std::vector<std::array<double, 4>> result(static_cast<size_t>(c.layers), {NAN, NAN, NAN, NAN});
  run.track("model", m);
  run.track("optim", opt);
  run.track("rng/data", data);
  run.track("result/test_mse", test_mse);
  run.track("result/uniform", uniform);
  for (size_t l = 0; l < result.size(); ++l)
    for (size_t k = 0; k < 4; ++k) run.track(fmt::format("result/layer{}/{}", l, kScores[k]), result[l][k]);
  // Ctrl-C or SIGTERM during an evaluation cuts it short (a large --test
  // takes minutes; a batch system's SIGKILL follows SIGTERM after a grace
  // period): the checkpoint the stop writes records the step, and the
  // resumed run evaluates it first, so the log is the one an uninterrupted
  // run writes. (Not required: older checkpoints lack it.)
  int64_t eval_pending = 0;
  run.track("eval/pending", eval_pending, false);
  std::vector<std::string> eval_logs = {"test_mse", "attention/uniform", "output", "attention/maps"};
  for (int64_t l = 0; l < c.layers; ++l)
    for (const char* score : kScores) eval_logs.push_back(fmt::format("attention/layer{}/{}", l, score));
  run.owed_work("eval/pending", eval_logs);
  run.begin([&](RunLog& log) {
    log_model(log, "crossattn", m);
    log.write_tensor("samples/tokens", kernel::narrow(test.tokens, 0, 0, kSamples));
    log.write_tensor("samples/signal", kernel::narrow(test.signal, 0, 0, kSamples));
    log.write_tensor("samples/kinds", kernel::narrow(test.kinds, 0, 0, kSamples));
    log.write_tensor("samples/centres", kernel::narrow(test.centres, 0, 0, kSamples));
    log.write_tensor("samples/heights", kernel::narrow(test.heights, 0, 0, kSamples));
    log.write_tensor("reference/zero_mse", Tensor::scalar(zero_mse, DType::f64));
    std::string vocabulary;
    for (int64_t id = 0; id < vocabulary_size(task); ++id) {
      if (id > 0) vocabulary += ' ';
      vocabulary += token_name(id, task);
    }
    log.set_attr("vocabulary", vocabulary);
    log.set_attr("half_width", task.half_width);
    for (const char* name : {"train_loss", "test_mse", "attention/uniform"}) log.declare_scalar(name);
    for (int64_t l = 0; l < c.layers; ++l)
      for (const char* score : kScores) log.declare_scalar(fmt::format("attention/layer{}/{}", l, score));
    log.declare_series("output", {kSamples, task.length});
    log.declare_series("attention/maps", {kSamples, c.layers, c.heads, task.length, S});
  });
  fmt::print("{}\n", m.summary());

  // False when a stop cut the evaluation short (may_stop: the run's last
  // step is evaluated whole, as its result, unless it is owed): nothing
  // logged or kept.
  auto evaluate_and_log = [&](int64_t step, bool may_stop) {
    std::function<bool()> stop;
    if (may_stop) stop = [&run] { return run.stop_requested(); };
    std::vector<ShapeTokenScore> scores;
    const std::optional<double> e = evaluate(m, test, task.half_width, scores, stop);
    if (!e) {
      fmt::print("step {}: evaluation cut short by the stop; a resumed run evaluates step {} first\n", step, step);
      std::fflush(stdout);
      return false;
    }
    test_mse = *e;
    uniform = scores[0].baseline();
    run.log().scalar("test_mse", step, test_mse);
    run.log().scalar("attention/uniform", step, uniform);
    std::string shown;
    for (size_t l = 0; l < scores.size(); ++l) {
      result[l] = {scores[l].mean(), scores[l].on_field(0), scores[l].on_field(1), scores[l].on_field(2)};
      for (size_t k = 0; k < 4; ++k)
        run.log().scalar(fmt::format("attention/layer{}/{}", l, kScores[k]), step, result[l][k]);
      shown += fmt::format("{}{:.3f}", l ? ", " : "", result[l][0]);
    }
    {
      autograd::NoGradGuard ng;
      m.keep_attention(true);
      run.log().series("output", step, m.forward(kernel::narrow(test.tokens, 0, 0, kSamples)));
      std::vector<Tensor> maps;
      for (size_t i = 0; i < m.layers(); ++i) maps.push_back(kernel::unsqueeze(m.last_attention(i), 1));
      run.log().series("attention/maps", step, kernel::concat(maps, 1));  // [kSamples, layers, H, L, S]
      m.keep_attention(false);
    }
    run.show("test mse", test_mse);
    fmt::print("step {}: test mse {:.4f} (drawing nothing: {:.4f}); attention on the shape's own tokens, layer by "
               "layer: {} (uniform {:.3f})\n",
               step, test_mse, zero_mse, shown, uniform);
    std::fflush(stdout);
    return true;
  };
  // The evaluation a stop cut short. Cut again, it stays owed: the run then
  // stops before its next step (Run::next), the checkpoint as it was.
  if (eval_pending > 0 && evaluate_and_log(eval_pending, true)) eval_pending = 0;

  while (run.next()) {
    const int64_t step = run.step();
    DescribedSet batch = generate_described(c.batch, data, task);  // the global batch; each process trains on its share
    opt.zero_grad();
    Tensor l = mse_loss(m.forward(dist::shard(batch.tokens)), dist::shard(batch.signal));
    ddp.backward(l);
    opt.step();
    loss = dist::mean(l.item());
    run.log().scalar("train_loss", step, loss);
    run.show_loss("loss", loss);
    if ((step % c.eval_every == 0 || step == run.steps()) && !evaluate_and_log(step, step < run.steps()))
      eval_pending = step;
  }
  if (int rc = run.finish()) return rc;
  fmt::print("\ntest mse {:.4f} (drawing nothing: {:.4f}), {} parameters\n", test_mse, zero_mse, m.num_parameters());
  for (size_t l = 0; l < result.size(); ++l)
    fmt::print("layer {}: attention of the positions a shape covers on the 3 tokens of that shape {:.3f} (kind "
               "{:.3f}, position {:.3f}, height {:.3f}); spread evenly: {:.3f} ({:.1f}x)\n",
               l, result[l][0], result[l][1], result[l][2], result[l][3], uniform, result[l][0] / uniform);
  fmt::print("log: {} ({})\n", run.log_path(), format_seconds(run.seconds()));
  return 0;
}

}  // namespace heed::experiments
