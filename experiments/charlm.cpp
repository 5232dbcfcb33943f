// experiments/charlm.cpp: `heed run charlm` (a character-level GPT trained on
// real text, the King James Bible by default) and `heed sample` (text
// generation from its checkpoint with cached keys and values).
#include "experiments/charlm.h"

#include <cmath>
#include <memory>

#include "data/checkpoint.h"
#include "data/runlog.h"
#include "data/text.h"
#include "experiments/args.h"
#include "experiments/common.h"
#include "heed.h"

namespace heed::experiments {

namespace {

constexpr const char* kProbe = "And God said, Let there be light: and there was light.";

struct Config {
  int64_t layers = 4, heads = 4, width = 128, context = 64, batch = 12, steps = 2000;
  double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1, dropout = 0.0, clip = 1.0;
  int64_t warmup = 100;
  std::string schedule = "cosine";
  std::string init = "torch";
  int64_t eval_every = 200, eval_batches = 32;
  int64_t seed = 0, threads = 2;
  std::string text, out = "runs/charlm.h5", checkpoint, resume;
  int64_t checkpoint_every = 500;
  int64_t stop_after = 0;
};

std::shared_ptr<nn::GPT> make_model(const Config& c, int64_t vocab, Generator* g) {
  return std::make_shared<nn::GPT>(
      nn::GPTOptions(vocab, c.width, c.layers, c.heads, c.context)
                                       .dropout(c.dropout)
                                       .init(c.init == "torch" ? nn::GPTOptions::Init::torch : nn::GPTOptions::Init::gpt2)
                                       .generator(g));
}

// Mean loss over fixed batches (drawn from a generator seeded the same way at
// every evaluation, so the numbers are comparable across the run).
double eval_loss(nn::GPT& m, const Tensor& stream, const Config& c, uint64_t seed) {
  autograd::NoGradGuard ng;
  m.eval();
  Generator g(seed);
  double sum = 0;
  for (int64_t i = 0; i < c.eval_batches; ++i) {
    Tensor x, y;
    data::random_windows(stream, c.batch, c.context, g, x, y);
    sum += cross_entropy(m.forward(x), y).item();
  }
  m.train();
  return sum / static_cast<double>(c.eval_batches);
}

std::string text_for(const Config& c) {
  if (!c.text.empty()) return data::load_text(c.text);
  return data::kjv_text("runs/corpus/kjv.txt");
}

}  // namespace

std::vector<int64_t> generate(nn::GPT& model, const std::vector<int64_t>& prompt, const SampleOptions& o) {
  if (prompt.empty()) fail("sample: the prompt must hold at least one character");
  if (o.temperature <= 0) fail("sample: temperature must be > 0, got {}", o.temperature);
  autograd::NoGradGuard ng;
  model.eval();
  Generator g(static_cast<uint64_t>(o.seed));
  const int64_t context = model.options.context_, V = model.options.vocab_;
  std::vector<int64_t> seq = prompt;
  nn::GPTCache cache;
  auto ids_tensor = [](const std::vector<int64_t>& v, size_t from) {
    std::vector<int64_t> part(v.begin() + static_cast<std::ptrdiff_t>(from), v.end());
    return Tensor::from_i64(part, {1, static_cast<int64_t>(part.size())});
  };
  for (int64_t i = 0; i < o.tokens; ++i) {
    Tensor logits;  // [1, t, V]
    const size_t window = std::min<size_t>(seq.size(), static_cast<size_t>(context));
    if (!o.use_cache) {
      logits = model.forward(ids_tensor(seq, seq.size() - window));
    } else if (cache.length() == 0 || cache.length() >= context) {
      // (Re)fill the cache with the last window; positions restart at 0.
      cache.clear();
      logits = model.forward_cached(ids_tensor(seq, seq.size() - window), cache);
    } else {
      logits = model.forward_cached(ids_tensor(seq, seq.size() - 1), cache);
    }
    Tensor last = kernel::contiguous(kernel::narrow(logits, 1, logits.size(1) - 1, 1));
    std::vector<double> l = last.to_vector<double>();
    // top-k, temperature, softmax, one draw.
    if (o.top_k > 0 && o.top_k < V) {
      std::vector<double> sorted = l;
      std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<double>());
      double kth = sorted[static_cast<size_t>(o.top_k - 1)];
      for (auto& v : l)
        if (v < kth) v = -INFINITY;
    }
    double mx = -INFINITY;
    for (double v : l) mx = std::max(mx, v / o.temperature);
    double z = 0;
    for (auto& v : l) {
      v = std::exp(v / o.temperature - mx);
      z += v;
    }
    double u = g.uniform() * z, acc = 0;
    int64_t pick = V - 1;
    for (int64_t k = 0; k < V; ++k) {
      acc += l[static_cast<size_t>(k)];
      if (u < acc) {
        pick = k;
        break;
      }
    }
    seq.push_back(pick);
  }
  return std::vector<int64_t>(seq.begin() + static_cast<std::ptrdiff_t>(prompt.size()), seq.end());
}

int run_charlm(const std::vector<std::string>& args, const std::vector<std::string>& command_line) {
  Config c;
  Args a("run charlm",
         "Trains a character-level GPT (token + learned position embeddings, pre-LN transformer\n"
         "blocks, AdamW, warm-up then cosine or constant learning rate, global-norm clipping) on a\n"
         "text file (default: the King James Bible) and logs losses and attention maps to HDF5.");
  a.integer("layers", &c.layers, "transformer blocks", 1)
      .integer("heads", &c.heads, "attention heads", 1)
      .integer("width", &c.width, "model width (divisible by heads)", 1)
      .integer("context", &c.context, "context length in characters", 2)
      .integer("batch", &c.batch, "sequences per step", 1)
      .integer("steps", &c.steps, "training steps", 1)
      .real("lr", &c.lr, "peak learning rate", 0.0, 1e300, true)
      .real("min-lr", &c.min_lr, "final learning rate of the cosine schedule", 0.0)
      .integer("warmup", &c.warmup, "linear warm-up steps", 0)
      .choice("schedule", &c.schedule, {"cosine", "constant"}, "learning-rate schedule after warm-up")
      .choice("init", &c.init, {"gpt2", "torch"},
              "initialisation: gpt2 (N(0, 0.02), scaled residual projections) or torch (PyTorch's layer defaults)")
      .real("weight-decay", &c.weight_decay, "AdamW decoupled weight decay", 0.0)
      .real("dropout", &c.dropout, "dropout probability", 0.0, 1.0)
      .real("clip", &c.clip, "clip the global gradient norm to this (0: off)", 0.0)
      .integer("eval-every", &c.eval_every, "evaluate every N steps", 1)
      .integer("eval-batches", &c.eval_batches, "fixed batches per evaluation", 1)
      .integer("seed", &c.seed, "seed", 0)
      .integer("threads", &c.threads, "threads for every backend", 1, 1024)
      .text("text", &c.text, "UTF-8 text file to train on (default: the King James Bible)")
      .text("out", &c.out, "HDF5 log file")
      .text("checkpoint", &c.checkpoint, "checkpoint file (default: the log's name with .ckpt.h5)")
      .integer("checkpoint-every", &c.checkpoint_every, "write a checkpoint every N steps (0: only at the end)", 0)
      .text("resume", &c.resume, "continue the run saved in this checkpoint")
      .integer("stop-after", &c.stop_after, "stop after step N with a checkpoint, as Ctrl-C does", 0);
  if (!a.parse(args)) return 0;

  Checkpoint resume_ck;
  if (!c.resume.empty()) {
    resume_ck = load_checkpoint(c.resume, "charlm");
    restore_config(a, resume_ck.config, "run charlm");
    if (!a.given("checkpoint")) c.checkpoint = c.resume;
  }
  if (c.width % c.heads != 0) fail("run charlm: --width {} is not divisible by --heads {}", c.width, c.heads);
  if (c.warmup > c.steps) fail("run charlm: --warmup {} exceeds --steps {}", c.warmup, c.steps);
  if (c.checkpoint.empty()) c.checkpoint = default_checkpoint_path(c.out);
  if (c.resume.empty()) prepare_output_path(c.out);
  prepare_output_path(c.checkpoint);
  kernel::set_num_threads(static_cast<int>(c.threads));

  // Data: the vocabulary is built from the whole corpus and saved with the model.
  Stopwatch sw;
  std::string text = text_for(c);
  data::CharTokenizer tok = data::CharTokenizer::from_text(text);
  data::TextSplit split = data::split_tokens(tok.encode(text));
  if (split.val.numel() < c.context + 1 || split.train.numel() < c.context + 1)
    fail("run charlm: the text has {} characters; its 90/10 split needs more than {} in each part (a shorter "
         "--context or a longer --text)",
         split.train.numel() + split.val.numel(), c.context + 1);
  fmt::print("text: {} characters, vocabulary {} ({})\n", split.train.numel() + split.val.numel(), tok.vocab_size(),
             format_seconds(sw.seconds()));

  Generator init(static_cast<uint64_t>(c.seed) * 7919 + 11);
  auto model = make_model(c, tok.vocab_size(), &init);
  optim::AdamW opt(model->named_parameters(), optim::AdamWOptions().lr(c.lr).weight_decay(c.weight_decay));
  std::unique_ptr<optim::LRSchedule> sched;
  if (c.schedule == "cosine") sched = std::make_unique<optim::WarmupCosineLR>(c.lr, c.warmup, c.steps, c.min_lr);
  else if (c.warmup > 0) sched = std::make_unique<optim::WarmupCosineLR>(c.lr, c.warmup, c.steps, c.lr);
  else sched = std::make_unique<optim::ConstantLR>(c.lr);
  Generator batches(static_cast<uint64_t>(c.seed));

  // The probe: a fixed text whose attention maps are logged at each evaluation.
  std::string probe_text;
  {
    std::vector<uint32_t> cps = data::decode_utf8(kProbe);
    std::vector<uint32_t> ok;
    bool all_known = true;
    try {
      tok.encode(kProbe);
    } catch (const Error&) {
      all_known = false;
    }
    if (all_known) {
      for (size_t i = 0; i < cps.size() && static_cast<int64_t>(i) < c.context; ++i) ok.push_back(cps[i]);
      probe_text = data::encode_utf8(ok);
    } else {
      probe_text = tok.decode(std::vector<int64_t>(split.val.data<int64_t>(),
                                                   split.val.data<int64_t>() + std::min<int64_t>(c.context, 48)));
    }
  }
  std::vector<int64_t> probe_ids = tok.encode(probe_text);
  const int64_t P = static_cast<int64_t>(probe_ids.size());

  int64_t step = 0;
  std::unique_ptr<RunLog> log;
  if (c.resume.empty()) {
    log = std::make_unique<RunLog>(RunLog::create(c.out));
    write_run_metadata(*log, "charlm", command_line, a);
    log->set_attr("probe_text", probe_text);
    log->set_attr("vocabulary", tok.decode([&] {
      std::vector<int64_t> all(static_cast<size_t>(tok.vocab_size()));
      for (int64_t i = 0; i < tok.vocab_size(); ++i) all[static_cast<size_t>(i)] = i;
      return all;
    }()));
    log->write_tensor("models/gpt/nb_parameters", Tensor::scalar(static_cast<double>(model->num_parameters()), DType::i64));
    log->set_attr("summary", model->summary(), "models/gpt");
    for (const char* m : {"train_loss", "lr", "grad_norm", "tokens_per_second", "val_loss", "train_eval_loss"})
      log->declare_scalar(m);
    for (int64_t l = 0; l < c.layers; ++l) log->declare_series(fmt::format("attention/layer{}/maps", l), {c.heads, P, P});
    log->begin();
  } else {
    step = checkpoint_step(resume_ck, c.steps);
    log = std::make_unique<RunLog>(RunLog::resume(c.out, step));
    model->load_state_dict(resume_ck.get("model"));
    opt.load_state_dict(resume_ck.get("optim"));
    restore_generator(resume_ck, "rng/batches", batches);
    auto dg = resume_ck.tensors.find("rng/default");
    if (dg != resume_ck.tensors.end()) default_generator().set_state_tensor(dg->second);
    fmt::print("resumed from {} at step {}/{}\n", c.resume, step, c.steps);
  }
  fmt::print("{}\nlogging to {}, checkpoints to {}\n", model->summary(), c.out, c.checkpoint);

  auto save = [&] {
    Checkpoint ck;
    ck.experiment = "charlm";
    for (const auto& [k, v] : a.values()) ck.config[k] = v;
    ck.counters["step"] = step;
    ck.put("model", model->state_dict());
    ck.put("optim", opt.state_dict());
    ck.tensors["rng/batches"] = batches.state_tensor();
    ck.tensors["rng/default"] = default_generator().state_tensor();  // dropout draws from it
    ck.tensors["tokenizer/codepoints"] = tok.to_tensor();
    save_checkpoint(c.checkpoint, ck);
  };

  auto evaluate_and_log = [&] {
    double val = eval_loss(*model, split.val, c, 12345);
    double tr = eval_loss(*model, split.train, c, 54321);
    log->scalar("val_loss", step, val);
    log->scalar("train_eval_loss", step, tr);
    {
      autograd::NoGradGuard ng;
      model->eval();
      model->keep_attention(true);
      model->forward(Tensor::from_i64(probe_ids, {1, P}));
      auto maps = model->attention_maps();
      for (int64_t l = 0; l < c.layers; ++l)
        log->series(fmt::format("attention/layer{}/maps", l), step, kernel::reshape(maps[static_cast<size_t>(l)], {c.heads, P, P}));
      model->keep_attention(false);
      model->train();
    }
    log->flush();
    return std::make_pair(tr, val);
  };

  StopRequest ctrl_c;
  Progress progress;
  Stopwatch clock;
  const int64_t start = step;
  double last_val = NAN, last_train = NAN;
  bool stopped = false;
  while (step < c.steps) {
    Stopwatch st;
    sched->apply(opt, step);
    Tensor x, y;
    data::random_windows(split.train, c.batch, c.context, batches, x, y);
    opt.zero_grad();
    Tensor loss = cross_entropy(model->forward(x), y);
    backward(loss);
    double gn = c.clip > 0 ? optim::clip_grad_norm(model->named_parameters(), c.clip) : optim::grad_norm(model->named_parameters());
    opt.step();
    ++step;
    double l = loss.item();
    double tps = static_cast<double>(c.batch * c.context) / st.seconds();
    log->scalar("train_loss", step, l);
    log->scalar("lr", step, opt.lr());
    log->scalar("grad_norm", step, gn);
    log->scalar("tokens_per_second", step, tps);
    if (step % c.eval_every == 0 || step == c.steps) {
      auto [tr, val] = evaluate_and_log();
      last_train = tr;
      last_val = val;
      fmt::print("step {}/{}: train loss {:.4f} val loss {:.4f}\n", step, c.steps, tr, val);
    }
    if (progress.due(step == c.steps)) {
      double rate = static_cast<double>(step - start) / clock.seconds();
      fmt::print("step {}/{} loss {:.4f} lr {:.2e} grad norm {:.2f} {:.0f} tokens/s ETA {}\n", step, c.steps, l, opt.lr(),
                 gn, rate * static_cast<double>(c.batch * c.context), format_seconds(static_cast<double>(c.steps - step) / rate));
      std::fflush(stdout);
    }
    bool stop = ctrl_c.requested() || (c.stop_after > 0 && step == c.stop_after);
    if (stop || (c.checkpoint_every > 0 && step % c.checkpoint_every == 0) || step == c.steps) {
      log->flush();
      save();
    }
    if (stop && step < c.steps) {
      stopped = true;
      break;
    }
  }
  log->close();
  if (stopped) {
    fmt::print("\nstopped at step {}/{}; checkpoint written and log flushed.\nresume with: heed run charlm --resume {}\n",
               step, c.steps, c.checkpoint);
    return 130;
  }
  fmt::print("\nfinal: train loss {:.4f}, validation loss {:.4f}, {} steps in {}\nlog: {}\ncheckpoint: {}\n"
             "sample it: heed sample {}\n",
             last_train, last_val, step - start, format_seconds(clock.seconds()), c.out, c.checkpoint, c.checkpoint);
  return 0;
}

int run_sample(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    fmt::print("usage: heed sample CHECKPOINT [options]\n\nGenerates text from a character-level GPT checkpoint "
               "(written by heed run charlm),\nreusing cached keys and values for each new character.\n\n"
               "options: --prompt TEXT --tokens N --temperature X --top-k K --seed S --no-cache\n");
    if (args.empty()) fail("sample: expected a checkpoint path (see heed sample --help)");
    return 0;
  }
  std::string path = args[0];
  SampleOptions o;
  std::string prompt = "And God said";
  bool no_cache = false;
  Args a("sample CHECKPOINT", "Generates text from a character-level GPT checkpoint.");
  a.text("prompt", &prompt, "text to continue")
      .integer("tokens", &o.tokens, "characters to generate", 1)
      .real("temperature", &o.temperature, "softmax temperature", 0.0, 1e300, true)
      .integer("top-k", &o.top_k, "sample among the k most likely characters (0: all)", 0)
      .integer("seed", &o.seed, "seed", 0)
      .flag("no-cache", &no_cache, "recompute the whole prefix for every character (slower; same tokens)");
  if (!a.parse({args.begin() + 1, args.end()})) return 0;
  o.use_cache = !no_cache;
  Checkpoint ck = load_checkpoint(path, "charlm");
  auto tt = ck.tensors.find("tokenizer/codepoints");
  if (tt == ck.tensors.end()) fail("checkpoint '{}' has no tokenizer/codepoints", path);
  data::CharTokenizer tok = data::CharTokenizer::from_tensor(tt->second);
  Config c;
  auto num = [&](const char* k) {
    auto it = ck.config.find(k);
    if (it == ck.config.end()) fail("checkpoint '{}': config.{} is missing", path, k);
    return std::stoll(it->second);
  };
  c.layers = num("layers");
  c.heads = num("heads");
  c.width = num("width");
  c.context = num("context");
  auto model = make_model(c, tok.vocab_size(), nullptr);
  model->load_state_dict(ck.get("model"));
  std::vector<int64_t> ids = tok.encode(prompt);
  Stopwatch sw;
  std::vector<int64_t> out = generate(*model, ids, o);
  fmt::print("{}{}\n", prompt, tok.decode(out));
  fmt::print(stderr, "({} characters in {}, {})\n", out.size(), format_seconds(sw.seconds()),
             o.use_cache ? "cached keys/values" : "recomputed prefix");
  return 0;
}

}  // namespace heed::experiments
