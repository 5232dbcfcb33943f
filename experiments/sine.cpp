// experiments/sine.cpp
#include "experiments/sine.h"

#include <fmt/core.h>

#include <cmath>
#include <numbers>
#include <optional>

#include "data/checkpoint.h"
#include "data/runlog.h"
#include "experiments/args.h"
#include "heed.h"

namespace heed::experiments {

namespace {

// 1 -> H -> H -> 1 with tanh: smooth like the target, so a few thousand
// full-batch steps reach a small error.
class SineNet : public nn::Module {
 public:
  SineNet(int64_t hidden, Generator* g) : Module("SineNet") {
    l1 = register_module("l1", std::make_shared<nn::Linear>(nn::LinearOptions(1, hidden).generator(g)));
    l2 = register_module("l2", std::make_shared<nn::Linear>(nn::LinearOptions(hidden, hidden).generator(g)));
    l3 = register_module("l3", std::make_shared<nn::Linear>(nn::LinearOptions(hidden, 1).generator(g)));
  }
  Tensor forward(const Tensor& x) override { return l3->forward(tanh(l2->forward(tanh(l1->forward(x))))); }
  std::shared_ptr<nn::Linear> l1, l2, l3;
};

// The command's options, bound to o.
Args sine_args(SineOptions& o) {
  Args a("run sine",
         "Fits a 1 -> H -> H -> 1 tanh MLP to y = sin(x) on [-pi, pi] with full-batch SGD\n"
         "and momentum 0.9, and prints the final mean squared error. Logs to HDF5, writes\n"
         "checkpoints; --resume continues a stopped run bit for bit, and Ctrl-C stops after\n"
         "the current step with a checkpoint.");
  a.integer("steps", &o.steps, "training steps", 1)
      .real("lr", &o.lr, "learning rate", 0.0, 1e300, /*min_exclusive=*/true)
      .integer("hidden", &o.hidden, "hidden width H", 1)
      .integer("seed", &o.seed, "initialisation seed", 0)
      .integer("threads", &o.threads, "threads for heed's kernels, 0 = heed's default", 0)
      .text("out", &o.out, "HDF5 log file");
  add_run_control_options(a, o.run);
  return a;
}

// The data: N evenly spaced points on [-pi, pi] and their sines, as column vectors [N, 1].
void sine_points(int64_t n, Tensor& x, Tensor& y) {
  const double pi = std::numbers::pi;
  std::vector<float> xs(n), ys(n);
  for (int64_t i = 0; i < n; ++i) {
    double v = -pi + 2 * pi * static_cast<double>(i) / static_cast<double>(n - 1);
    xs[i] = static_cast<float>(v);
    ys[i] = static_cast<float>(std::sin(v));
  }
  x = Tensor::from(xs, {n, 1});  // [N, 1]
  y = Tensor::from(ys, {n, 1});  // [N, 1]
}

// Refuses bad options before anything is built, and sets the thread count.
const SineOptions& prepared(const SineOptions& o) {
  if (o.steps < 1 || o.hidden < 1 || o.points < 2 || !(o.lr > 0))
    fail("train_sine: expected steps >= 1, hidden >= 1, points >= 2, lr > 0; got {}, {}, {}, {}", o.steps, o.hidden,
         o.points, o.lr);
  if (o.run.stop_after > 0 && o.run.checkpoint.empty())
    fail("train_sine: stop_after {} needs a checkpoint path to save the stopped run in", o.run.stop_after);
  if (o.threads > 0) kernel::set_num_threads(static_cast<int>(o.threads));
  return o;
}

// One training run: built, and with o.run.resume restored from its
// checkpoint (a bad one is refused here, before the caller touches the log),
// then trained.
struct SineRun {
  const SineOptions& o;
  Tensor x, y;  // [N, 1] each
  Generator gen;
  SineNet net;
  optim::SGD opt;  // v = mu v + g, p = p - lr v (PyTorch's SGD with momentum, dampening 0)
  SineResult r;
  int64_t step = 0;

  explicit SineRun(const SineOptions& opts)
      : o(prepared(opts)),
        gen(static_cast<uint64_t>(opts.seed)),
        net(opts.hidden, &gen),
        opt(net.named_parameters(), optim::SGDOptions(opts.lr).momentum(opts.momentum)) {
    sine_points(o.points, x, y);
    if (!o.run.resume.empty()) restore(load_checkpoint(o.run.resume, "sine"));
  }

  // The data is rebuilt exactly and the weights are overwritten; nothing
  // here draws random numbers after initialisation, but the default
  // generator is kept all the same.
  void restore(const Checkpoint& ck) {
    step = checkpoint_step(ck, o.steps);
    net.load_state_dict(ck.get("model"));
    opt.load_state_dict(ck.get("optim"));
    restore_generator(ck, "rng/default", default_generator());
    r.initial_mse = checkpoint_values(ck, "result", 1)[0];
  }

  void save() const {
    Checkpoint ck;
    ck.experiment = "sine";
    ck.config = o.run.config;
    ck.counters["step"] = step;
    ck.put("model", net.state_dict());
    ck.put("optim", opt.state_dict());
    ck.tensors["rng/default"] = default_generator().state_tensor();
    ck.tensors["result"] = Tensor::from_f64({r.initial_mse}, {1});  // the step-0 MSE, bit for bit
    save_checkpoint(o.run.checkpoint, ck);
  }

  SineResult train(RunLog* log) {
    if (o.print_every > 0) {
      fmt::print("sine: {} parameters, {} points, {} steps, lr {}, momentum {}\n", net.num_parameters(), o.points,
                 o.steps, o.lr, o.momentum);
      if (step > 0) fmt::print("resumed from {} at step {}/{}\n", o.run.resume, step, o.steps);
    }
    // Ctrl-C stops the run cleanly only when there is somewhere to save it.
    std::optional<StopRequest> ctrl_c;
    if (!o.run.checkpoint.empty()) ctrl_c.emplace();
    const int64_t start = step;
    while (step < o.steps) {
      opt.zero_grad();
      Tensor loss = mse_loss(net.forward(x), y);  // of the parameters after `step` updates
      const double mse = loss.item();
      if (step == 0) r.initial_mse = mse;
      if (!std::isfinite(mse)) {  // diverged: more steps cannot recover, and no checkpoint is worth writing
        if (o.print_every > 0) fmt::print("step {:5d}  mse {} (diverged; try a smaller --lr)\n", step, mse);
        if (log) log->scalar("train_loss", step + 1, mse);
        r.final_mse = mse;
        r.step = step;
        return r;
      }
      if (o.print_every > 0 && step % o.print_every == 0) fmt::print("step {:5d}  mse {:.6f}\n", step, mse);
      backward(loss);
      opt.step();
      ++step;
      if (log) log->scalar("train_loss", step, mse);
      if (o.run.end_step(step, o.steps, ctrl_c ? &*ctrl_c : nullptr, log, [&] { save(); })) {
        r.stopped = true;
        break;
      }
    }
    r.step = step;
    autograd::NoGradGuard no_grad;
    r.final_mse = mse_loss(net.forward(x), y).item();
    if (log && !r.stopped && start < o.steps) log->scalar("final_mse", step, r.final_mse);
    return r;
  }
};

}  // namespace

bool parse_sine_args(const std::vector<std::string>& args, SineOptions& o) { return sine_args(o).parse(args); }

SineResult train_sine(const SineOptions& o, RunLog* log) { return SineRun(o).train(log); }

int run_sine(const std::vector<std::string>& args, const std::vector<std::string>& command_line) {
  SineOptions o;
  o.out = "runs/sine.h5";
  o.run.checkpoint_every = 500;
  Args a = sine_args(o);
  try {
    if (!a.parse(args)) return 0;  // --help
  } catch (const Error& e) {
    fmt::print(stderr, "heed: {}\n", e.what());
    return 2;
  }
  std::vector<std::string> typed = command_line;
  if (typed.empty()) {
    typed = {"heed", "run", "sine"};
    typed.insert(typed.end(), args.begin(), args.end());
  }
  prepare_run(a, o.run, "sine", "run sine", o.out);

  SineRun run(o);  // restores a checkpoint before the log is touched
  RunLog log = o.run.resume.empty() ? RunLog::create(o.out) : RunLog::resume(o.out, run.step);
  if (o.run.resume.empty()) {
    write_run_metadata(log, "sine", typed, a);
    {
      Generator g(0);  // describes the model only: the run builds its own
      log_model(log, "mlp", SineNet(o.hidden, &g));
    }
    log.declare_scalar("train_loss");
    log.declare_scalar("final_mse");
    log.begin();
  }
  if (o.print_every > 0) fmt::print("logging to {}, checkpoints to {}\n", o.out, o.run.checkpoint);
  SineResult r = run.train(&log);
  log.close();
  if (r.stopped) {
    print_stopped("run sine", a, o.run.checkpoint, r.step, o.steps);
    return 130;
  }
  bool ok = r.final_mse < kSineMseThreshold;
  fmt::print("final mse {:.6f} (initial {:.6f}; threshold {}): {}\nlog: {}\n", r.final_mse, r.initial_mse,
             kSineMseThreshold, ok ? "below the threshold" : "NOT below the threshold", o.out);
  return ok ? 0 : 1;
}

}  // namespace heed::experiments
