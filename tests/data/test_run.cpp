// tests/data/test_run.cpp: heed::Run, the library object that owns a
// training run's log, checkpoints, resume and stop (data/run.h), driven the
// way a user's program drives it.
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <limits>
#include <filesystem>
#include <fstream>
#include <functional>
#include <vector>

#include "../experiments/resume_check.h"
#include "experiments/common.h"
#include "../experiments/spawn.h"
#include "file_damage.h"
#include "test_util.h"

using namespace heed;
namespace fs = std::filesystem;

namespace {

// A toy program on the Run: a linear model fitted by SGD to fixed data, with
// a generator that draws each step's noise and a user counter.
struct Toy {
  Generator init{1}, noise{2};
  nn::Linear model;
  optim::SGD opt;
  int64_t counter = 0;
  double last = 0;
  int64_t nan_at = 0;  // the step whose loss is reported as NaN (0: none), as a diverged run's
  int64_t inf_at = 0;  // the step after which the weights are infinite (0: never)
  bool show_losses = true;
  nn::Module* extra = nullptr;  // tracked as "extra" when given
  int64_t raise_at = 0;         // the step during which SIGINT is raised (0: never)
  bool asked_before = false, asked_after = false;  // stop_requested() then, just before and after it
  int64_t later = 7;            // a counter added after the checkpoints were written, when track_later
  bool track_later = false, later_required = false;
  std::function<void()> after_parse;  // the program's own work between parse() and begin(), when given
  std::function<void(int64_t)> each_step;  // called at the end of each step with its number, when given
  std::function<void()> after_begin;       // the program's work between begin() and its first step, when given
  Run run;
  explicit Toy(int64_t width = 3)
      : Toy(RunOptions("unused.h5").steps(10).checkpoint_every(3).progress_seconds(0), width) {}
  explicit Toy(RunOptions options, int64_t width = 3)
      : model(nn::LinearOptions(width, 2).generator(&init)),
        opt(model.named_parameters(), optim::SGDOptions(0.1).momentum(0.9)),
        run("toy", "a toy", std::move(options)) {}
  // Runs the program with argv; returns finish()'s status.
  int go(const std::vector<std::string>& argv) {
    if (!run.parse(argv)) return 0;
    if (after_parse) after_parse();
    run.track("model", model);
    run.track("optim", opt);
    run.track("rng/noise", noise);
    run.track("counter", counter);
    run.track("last", last);
    if (extra) run.track("extra", *extra);
    if (track_later) run.track("later", later, later_required);
    run.begin([](RunLog& log) { log.declare_scalar("loss"); });
    if (after_begin) after_begin();
    Tensor x = test::det_tensor({4, model.weight.size(1)}, 5), y = test::det_tensor({4, 2}, 6);
    while (run.next()) {
      opt.zero_grad();
      Tensor loss = mse_loss(model.forward(x + randn({4, model.weight.size(1)}, &noise) * 0.01), y);
      backward(loss);
      opt.step();
      last = loss.item();
      counter += 2;
      if (run.step() == nan_at) last = std::numeric_limits<double>::quiet_NaN();
      if (run.step() == inf_at) kernel::fill_(model.weight, INFINITY);
      if (run.step() == raise_at) {
        asked_before = run.stop_requested();
        std::raise(SIGINT);  // Ctrl-C within the step (the Run's handler only sets its flag)
        asked_after = run.stop_requested();
      }
      run.log().scalar("loss", run.step(), last);
      if (show_losses) run.show_loss("loss", last);
      if (each_step) each_step(run.step());
    }
    return run.finish();
  }
};

// What f prints on the descriptor `out` (1 or 2).
std::string output_of(int out, const std::function<void()>& f) {
  const std::string path = test::temp_path(out == 1 ? "run-stdout.txt" : "run-stderr.txt");
  std::fflush(stdout);
  std::fflush(stderr);
  const int saved = ::dup(out), fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  REQUIRE(saved >= 0);
  REQUIRE(fd >= 0);
  ::dup2(fd, out);
  ::close(fd);
  struct Restore {
    int saved, out;
    ~Restore() {
      std::fflush(stdout);
      std::fflush(stderr);
      ::dup2(saved, out);
      ::close(saved);
    }
  };
  {
    Restore restore{saved, out};
    f();
  }
  return test::slurp(path);
}

// What f prints on standard output (the Run's messages on stopping).
std::string stdout_of(const std::function<void()>& f) { return output_of(1, f); }
// What f prints on standard error (the Run's warnings).
std::string stderr_of(const std::function<void()>& f) { return output_of(2, f); }

// The steps of a log's metric, row by row.
std::vector<double> logged_steps(const std::string& log, const std::string& metric) {
  const std::vector<double> rows =
      h5::File(log, h5::File::Mode::read).read_tensor("metrics/" + metric).to_vector<double>();
  std::vector<double> steps;
  for (size_t i = 0; i < rows.size(); i += 3) steps.push_back(rows[i]);
  return steps;
}

}  // namespace

TEST_CASE("Run: stopped at step 4 and resumed, a program's log and checkpoint equal the uninterrupted run's") {
  test::TempDir d("heed-run-");
  Toy straight;
  REQUIRE(straight.go({"--out", d.path + "/a.h5"}) == 0);
  Toy first;
  REQUIRE(first.go({"--out", d.path + "/b.h5", "--stop-after", "4"}) == 130);
  CHECK(load_checkpoint(d.path + "/b.ckpt.h5", "toy").counter("step") == 4);
  Toy rest;
  REQUIRE(rest.go({"--resume", d.path + "/b.ckpt.h5"}) == 0);
  CHECK(rest.counter == 20);  // the user's counter came back with the rest
  CHECK(rest.last == straight.last);
  test::check_same_log(d.path + "/a.h5", d.path + "/b.h5");
  test::check_same_checkpoint(d.path + "/a.ckpt.h5", d.path + "/b.ckpt.h5", "toy");
  // Everything registered is in the checkpoint, each once, by its name.
  Checkpoint ck = load_checkpoint(d.path + "/b.ckpt.h5", "toy");
  CHECK(ck.counters.at("counter") == 20);
  CHECK(ck.tensors.count("model/weight") == 1);
  CHECK(ck.tensors.count("rng/noise") == 1);
  CHECK(ck.tensors.count("rng/default") == 1);
  CHECK(ck.tensors.count("last") == 1);
  CHECK(ck.config.at("checkpoint-every") == "3");
}

TEST_CASE("Run: resume restores the whole configuration; only the run's length and where it writes may change") {
  test::TempDir d("heed-run-");
  Toy first;
  REQUIRE(first.go({"--out", d.path + "/r.h5", "--checkpoint-every", "2", "--stop-after", "4"}) == 130);
  const std::string ck = d.path + "/r.ckpt.h5";
  {
    Toy more;  // --checkpoint-every comes back; --steps may grow
    REQUIRE(more.run.parse({"--resume", ck, "--steps", "14"}));
    CHECK(more.run.log_path() == d.path + "/r.h5");
    CHECK(more.run.checkpoint_path() == ck);
    CHECK(more.run.steps() == 14);
    CHECK(more.run.args().values().size() > 0);
    bool every2 = false;
    for (const auto& [k, v] : more.run.args().values()) every2 = every2 || (k == "checkpoint-every" && v == "2");
    CHECK(every2);
  }
  // --out may name the run's log where it moved to, not a missing file or another run's log.
  test::check_error([&] { Toy().run.parse({"--resume", ck, "--out", d.path + "/other.h5"}); },
                    {"the log '" + d.path + "/other.h5'", "is missing"});
  // (Another run's log: tests/experiments/test_bad_inputs.cpp, "resume into another run's log".)
  test::check_error([&] { Toy().run.parse({"--out", d.path + "/x.h5", "--checkpoint", d.path + "/x.h5"}); },
                    {"--checkpoint", "is the log --out", "two files"});
  test::check_error([&] { Toy().run.parse({"--resume", d.path + "/r.h5"}); }, {"r.h5", "not a heed checkpoint"});
  CHECK_FALSE(fs::exists(d.path + "/x.h5"));
}

TEST_CASE("Run: a placeholder option given on resume means the value the run began with; another value is refused") {
  test::TempDir d("heed-run-");
  const std::string ck = d.path + "/p.ckpt.h5";
  int64_t warm = -1;
  // A program whose --warm -1 is worked out from --steps after parse(), as charlm's --warmup.
  auto program = [&warm](Toy& t) {
    warm = -1;
    t.run.args().integer("warm", &warm, "warm-up steps (-1: a fifth of --steps)", -1);
    t.run.resolved_default("warm", "-1");
    t.after_parse = [&warm, &t] {
      if (warm < 0) warm = t.run.steps() / 5;
    };
  };
  Toy first;
  program(first);
  REQUIRE(first.go({"--out", d.path + "/p.h5", "--warm", "-1", "--stop-after", "4"}) == 130);
  CHECK(load_checkpoint(ck, "toy").config.at("warm") == "2");
  test::check_error([&] {
    Toy other;
    program(other);
    other.run.parse({"--resume", ck, "--warm", "3"});
  }, {"--warm 3 contradicts the checkpoint's 2"});
  {
    Toy same;  // the saved value itself is accepted, and counts as given
    program(same);
    REQUIRE(same.run.parse({"--resume", ck, "--warm", "2"}));
    CHECK(same.run.args().given("warm"));
  }
  Toy rest;
  program(rest);
  REQUIRE(rest.go({"--resume", ck, "--warm", "-1", "--steps", "20"}) == 0);
  CHECK(warm == 2);  // the run's own, not a fifth of the new --steps
  CHECK_FALSE(rest.run.args().given("warm"));
  CHECK(load_checkpoint(ck, "toy").config.at("warm") == "2");
}

TEST_CASE("Run: a finished run continues for more steps, and the log has every step once") {
  test::TempDir d("heed-run-");
  REQUIRE(Toy().go({"--out", d.path + "/f.h5"}) == 0);
  Toy more;
  REQUIRE(more.go({"--resume", d.path + "/f.ckpt.h5", "--steps", "16"}) == 0);
  CHECK(more.counter == 32);
  std::vector<double> rows = h5::File(d.path + "/f.h5", h5::File::Mode::read).read_tensor("metrics/loss").to_vector<double>();
  REQUIRE(rows.size() == 3 * 16);
  for (size_t i = 0; i < 16; ++i) CHECK(rows[3 * i] == double(i + 1));
  {
    // The log's configuration is the run's now, as an uninterrupted run of
    // 16 steps would have logged it; how it began is still its command line.
    h5::File f(d.path + "/f.h5", h5::File::Mode::read);
    auto text = [&](const char* name) { return h5::attr_as<std::string>(f.get_attr("/", name), name); };
    CHECK(text("config.steps") == "16");
    CHECK(text("config.checkpoint-every") == "3");  // restored, not given: as it was
    CHECK(text("command_line").find("--resume") == std::string::npos);
  }
  test::check_error([&] { Toy().go({"--resume", d.path + "/f.ckpt.h5", "--steps", "5"}); },
                    {"at step 16", "beyond this run's 5 steps", "expected --steps 16 or more"});
  // A shorter run than the first, still past the checkpoint's step, goes on
  // (the message said "the length may only grow on resume").
  Toy first;
  REQUIRE(first.go({"--out", d.path + "/s.h5", "--stop-after", "4"}) == 130);  // of 10 steps
  Toy shorter;
  REQUIRE(shorter.go({"--resume", d.path + "/s.ckpt.h5", "--steps", "6"}) == 0);
  CHECK(h5::File(d.path + "/s.h5", h5::File::Mode::read).read_tensor("metrics/loss").size(0) == 6);
}

TEST_CASE("Run: a checkpoint that does not fit the program is refused before any file changes") {
  test::TempDir d("heed-run-");
  REQUIRE(Toy().go({"--out", d.path + "/g.h5"}) == 0);
  const std::string log = d.path + "/g.h5", ck = d.path + "/g.ckpt.h5";
  const std::string log_bytes = test::slurp(log), ck_bytes = test::slurp(ck);
  SUBCASE("another model") {  // width 5 instead of 3: the weight's shape differs
    test::check_error([&] { Toy(5).go({"--resume", ck}); }, {"'model'", "weight", "[2, 3]", "[2, 5]"});
  }
  SUBCASE("a missing piece of state") {
    Checkpoint c = load_checkpoint(ck, "toy");
    c.tensors.erase("rng/noise");
    c.counters.erase("counter");
    c.tensors["extra/thing"] = Tensor::zeros({2});
    save_checkpoint(d.path + "/m.ckpt.h5", c);
    test::check_error([&] { Toy().go({"--resume", d.path + "/m.ckpt.h5"}); },
                      {"does not fit", "missing [rng/noise, counter counter]", "unexpected [extra/thing]"});
  }
  SUBCASE("another experiment's checkpoint") {
    Checkpoint c = load_checkpoint(ck, "toy");
    c.experiment = "copy";
    save_checkpoint(d.path + "/e.ckpt.h5", c);
    test::check_error([&] { Toy().go({"--resume", d.path + "/e.ckpt.h5"}); }, {"e.ckpt.h5", "'copy'", "'toy'"});
  }
  CHECK(test::slurp(log) == log_bytes);
  CHECK(test::slurp(ck) == ck_bytes);
}

TEST_CASE("Run: registering a name twice, or after begin, is refused naming it") {
  test::TempDir d("heed-run-");
  Toy t;
  REQUIRE(t.run.parse({"--out", d.path + "/t.h5"}));
  t.run.track("model", t.model);
  test::check_error([&] { t.run.track("model", t.opt); }, {"'model'", "twice"});
  test::check_error([&] { t.run.track("rng/default", t.noise); },
                    {"'rng/default' is registered twice; heed::Run tracks the default generator as 'rng/default' "
                     "itself"});
  t.run.begin();
  test::check_error([&] { t.run.track("late", t.counter); }, {"'late'", "after begin"});
  t.run.finish();
}

TEST_CASE("Run: track() refuses a name the checkpoint would store as another, or mix with another's state") {
  // Each was accepted, and found out only at the resume, the run lost: a
  // generator tracked as "model/weight" overwrote the model's weight in
  // every checkpoint, "optim/lr" the optimiser's rate, "model/extra" was
  // refused as the model's unexpected key, and "g//x" was stored as "g/x"
  // ("missing [g//x], unexpected [g/x]").
  test::TempDir d("heed-run-names-");
  Toy t;
  REQUIRE(t.run.parse({"--out", d.path + "/n.h5", "--steps", "2"}));
  t.run.track("model", t.model);
  t.run.track("optim", t.opt);
  Generator g(7), h(8);
  double value = 0;
  int64_t count = 0;
  test::check_error([&] { t.run.track("model/weight", g); },
                    {"Run::track: 'model/weight' lies under 'model', already tracked, whose checkpoint keys are "
                     "'model/...'"});
  test::check_error([&] { t.run.track("optim/lr", g); }, {"'optim/lr' lies under 'optim'"});
  test::check_error([&] { t.run.track("model/extra", value); }, {"'model/extra' lies under 'model'"});
  test::check_error([&] { t.run.track_constant("optim/x", Tensor::zeros({1})); }, {"'optim/x' lies under 'optim'"});
  // Above a name tracked already: heed's own generator, or another tensor.
  test::check_error([&] { t.run.track("rng", g); },
                    {"'rng' would hold 'rng/default', tracked by heed::Run itself (the default generator"});
  t.run.track_constant("data/hash", Tensor::zeros({1}));
  test::check_error([&] { t.run.track("data", g); }, {"'data' and 'data/hash'", "would share a path"});
  test::check_error([&] { t.run.track("data/hash/x", g); }, {"'data/hash/x' and 'data/hash'"});
  // Names HDF5 would store under another name, as a log's metric names (RunLog's rule).
  for (const auto& [name, problem] : std::vector<std::pair<std::string, std::string>>{
           {"", "is empty"},
           {"gx/", "ends with '/'"},
           {"/g", "starts with '/'"},
           {"g//x", "holds '//'"},
           {"g/./x", "has a part '.'"},
           {std::string("g\0x", 3), "holds a NUL character"}}) {
    const std::string shown = name.size() == 3 && name[1] == '\0' ? "g\\0x" : name;
    INFO("'" << shown << "'");
    const std::vector<std::string> parts{"Run::track: name '" + shown + "' " + problem,
                                         "expected parts joined by single '/'"};
    test::check_error([&] { t.run.track(name, g); }, parts);
    test::check_error([&] { t.run.track(name, count); }, parts);
    test::check_error([&] { t.run.track_constant(name, Tensor::zeros({1})); }, parts);
  }
  // heed's own names: its counters, and each process's state in a data-parallel run.
  test::check_error([&] { t.run.track("processes", count); }, {"'processes' is the name of a counter heed::Run keeps"});
  test::check_error([&] { t.run.track("ranks/1/g", g); }, {"'ranks/1/g' is under 'ranks/'"});
  // Names beside each other are taken, and a counter (an attribute) may sit under a module's name.
  t.run.track("modelx", g);
  t.run.track("rng/h", h);
  t.run.track("model/steps", count);
  t.run.begin([](RunLog& log) { log.declare_scalar("loss"); });
  while (t.run.next()) t.run.log().scalar("loss", t.run.step(), 1.0);
  REQUIRE(t.run.finish() == 0);
  const Checkpoint ck = load_checkpoint(d.path + "/n.ckpt.h5", "toy");
  CHECK(ck.tensors.count("modelx") == 1);
  CHECK(ck.tensors.count("rng/h") == 1);
  CHECK(ck.tensors.count("data/hash") == 1);
  CHECK(ck.counters.count("model/steps") == 1);
  CHECK(ck.get("model").size() == 2);  // weight and bias, nothing else
}

TEST_CASE("Run: a precision's other name is the same precision on resume, recorded under one name") {
  test::TempDir d("heed-run-");
  REQUIRE(Toy().go({"--out", d.path + "/p.h5", "--precision", "float32"}) == 0);
  CHECK(load_checkpoint(d.path + "/p.ckpt.h5", "toy").config.at("precision") == "f32");
  // It was refused: "--precision f32 contradicts the checkpoint's float32".
  CHECK(Toy().go({"--resume", d.path + "/p.ckpt.h5", "--steps", "12", "--precision", "f32"}) == 0);
  CHECK(Toy().go({"--resume", d.path + "/p.ckpt.h5", "--steps", "14", "--precision", "float32"}) == 0);
  if (test::bf16_here())
    test::check_error([&] { Toy().go({"--resume", d.path + "/p.ckpt.h5", "--steps", "16", "--precision", "bfloat16"}); },
                      {"--precision bf16 contradicts the checkpoint's f32"});
}

TEST_CASE("Run: a checkpoint outlives its log: --resume with --out NEW.h5 goes on in a new log") {
  test::TempDir d("heed-run-");
  const std::string ck = d.path + "/n.ckpt.h5";
  REQUIRE(Toy().go({"--out", d.path + "/n.h5"}) == 0);
  fs::remove(d.path + "/n.h5");  // deleted (a cleaner, a crash that lost what was not on disk)
  test::check_error([&] { Toy().go({"--resume", ck, "--steps", "14"}); },
                    {"n.h5", "is missing", "--out NEW.h5", "steps after 10"});
  REQUIRE(Toy().go({"--resume", ck, "--steps", "14", "--out", d.path + "/m.h5"}) == 0);
  {
    h5::File m(d.path + "/m.h5", h5::File::Mode::read);
    std::vector<double> rows = m.read_tensor("metrics/loss").to_vector<double>();
    REQUIRE(rows.size() == 3 * 4);
    for (size_t i = 0; i < 4; ++i) CHECK(rows[3 * i] == double(11 + i));
    CHECK(h5::attr_str(m.get_attr("/", "continues")).find("from step 10") != std::string::npos);
  }
  // A damaged log: its reader's error, and the same way on.
  std::ofstream(d.path + "/m.h5", std::ios::trunc) << "not a log";
  test::check_error([&] { Toy().go({"--resume", ck, "--steps", "16"}); }, {"m.h5", "--out NEW.h5", "steps after 14"});
  Toy last;
  REQUIRE(last.go({"--resume", ck, "--steps", "16", "--out", d.path + "/k.h5"}) == 0);
  CHECK(last.counter == 32);  // 16 steps of 2, as one uninterrupted run
}

TEST_CASE("Run: a non-finite loss ends the run at its step, without a checkpoint; the last one resumes") {
  test::TempDir d("heed-run-");
  const std::string log = d.path + "/v.h5", ck = d.path + "/v.ckpt.h5";
  Toy t;
  t.nan_at = 5;
  CHECK(t.go({"--out", log}) == 1);  // checkpoints every 3 steps: at 3, not at 5
  CHECK(t.run.diverged());
  CHECK(t.run.step() == 5);
  CHECK(load_checkpoint(ck, "toy").counter("step") == 3);
  {
    h5::File f(log, h5::File::Mode::read);
    const std::vector<double> rows = f.read_tensor("metrics/loss").to_vector<double>();
    REQUIRE(rows.size() == 3 * 5);  // every step up to the diverged one, that one included
    CHECK(std::isnan(rows[3 * 4 + 1]));
  }
  // From the last checkpoint the same run goes on (here without the NaN) to
  // the uninterrupted run's end.
  Toy resumed, whole;
  REQUIRE(resumed.go({"--resume", ck}) == 0);
  REQUIRE(whole.go({"--out", d.path + "/w.h5"}) == 0);
  CHECK(resumed.counter == whole.counter);
  CHECK(resumed.last == whole.last);
  // A checkpoint of non-finite weights (an older heed's, or another
  // program's) is refused, naming the tensor; no file changes.
  Checkpoint c = load_checkpoint(ck, "toy");
  c.tensors.at("model/weight") = Tensor::full(c.tensors.at("model/weight").shape(), INFINITY);
  save_checkpoint(d.path + "/inf.ckpt.h5", c);
  const auto before = test::slurp(log);
  test::check_error([&] { Toy().go({"--resume", d.path + "/inf.ckpt.h5"}); },
                    {"inf.ckpt.h5", "model/weight", "not finite", "diverged by step 10"});
  CHECK(test::slurp(log) == before);
  // Weights that are not finite when a checkpoint is due end the run the
  // same way, though no loss was shown.
  Toy quiet;
  quiet.inf_at = 4;
  quiet.show_losses = false;
  CHECK(quiet.go({"--out", d.path + "/q.h5"}) == 1);
  CHECK(quiet.run.step() == 6);
  CHECK(load_checkpoint(d.path + "/q.ckpt.h5", "toy").counter("step") == 3);
}

TEST_CASE("Run: a later run's log is refused for an earlier run's checkpoint, even with the same configuration") {
  // A new run at the same --out replaces the log at once, the checkpoint at
  // its first one: killed (or diverged) before that, it left the earlier
  // run's checkpoint beside its own log, and --resume spliced the two runs
  // into one log.
  test::TempDir d("heed-run-");
  const std::string log = d.path + "/s.h5", ck = d.path + "/s.ckpt.h5";
  REQUIRE(Toy().go({"--out", log}) == 0);  // the earlier run: 10 steps, checkpoint at 10
  Toy later;
  later.nan_at = 2;  // ends at step 2, before any checkpoint of its own
  REQUIRE(later.go({"--out", log, "--checkpoint-every", "0"}) == 1);
  REQUIRE(load_checkpoint(ck, "toy").counter("step") == 10);
  const auto before = test::slurp(log);
  test::check_error([&] { Toy().go({"--resume", ck, "--steps", "12"}); },
                    {"s.h5", "another run's", "s.ckpt.h5", "--out NEW.h5", "steps after 10"});
  CHECK(test::slurp(log) == before);
  // As the message says: the checkpoint's run goes on in a new log.
  Toy on;
  REQUIRE(on.go({"--resume", ck, "--steps", "12", "--out", d.path + "/s2.h5"}) == 0);
  CHECK(on.counter == 24);
  // The new log and later checkpoints keep the run's identity: they resume together.
  REQUIRE(Toy().go({"--resume", ck, "--steps", "14", "--out", d.path + "/s2.h5"}) == 0);
  h5::File f(d.path + "/s2.h5", h5::File::Mode::read);
  CHECK(h5::attr_str(f.get_attr("/", "run_id")) == load_checkpoint(ck, "toy").run_id);
  CHECK(load_checkpoint(ck, "toy").run_id.size() == 32);
}

namespace {
// A module with a buffer of -inf (a mask): not finite from the start.
struct Masked : nn::Module {
  Tensor mask;
  Masked() : nn::Module("Masked") { mask = register_buffer("mask", Tensor::full({2}, -INFINITY)); }
};
}  // namespace

TEST_CASE("Run: divergence is a change: state not finite from the start (a -inf mask) checkpoints and resumes") {
  test::TempDir d("heed-run-");
  Masked m1, m2;
  Toy t;
  t.extra = &m1;
  REQUIRE(t.go({"--out", d.path + "/m.h5", "--stop-after", "4"}) == 130);
  CHECK(load_checkpoint(d.path + "/m.ckpt.h5", "toy").counter("step") == 4);
  Toy r;
  r.extra = &m2;
  CHECK(r.go({"--resume", d.path + "/m.ckpt.h5"}) == 0);
}

TEST_CASE("Run: a run begun under an older heed (no run_id, fewer options in its log) resumes, twice") {
  test::TempDir d("heed-run-");
  const std::string log = d.path + "/o.h5", ck = d.path + "/o.ckpt.h5";
  REQUIRE(Toy().go({"--out", log, "--stop-after", "4"}) == 130);
  {  // as an older heed wrote them
    h5::File f(log, h5::File::Mode::append);
    f.remove_attr("/", "run_id");
    f.remove_attr("/", "config.precision");
  }
  Checkpoint c = load_checkpoint(ck, "toy");
  c.run_id.clear();
  c.config.erase("precision");
  save_checkpoint(ck, c);
  REQUIRE(Toy().go({"--resume", ck, "--stop-after", "7"}) == 130);
  // This heed's checkpoint has --precision; the log has not: nothing differs.
  Toy last, whole;
  REQUIRE(last.go({"--resume", ck}) == 0);
  REQUIRE(whole.go({"--out", d.path + "/w.h5"}) == 0);
  CHECK(last.counter == whole.counter);
}

TEST_CASE("Run: a refused resume makes no directory; a diverged resume names the checkpoint it kept and the log's steps") {
  test::TempDir d("heed-run-");
  const std::string ck = d.path + "/r.ckpt.h5";
  REQUIRE(Toy().go({"--out", d.path + "/r.h5", "--stop-after", "4"}) == 130);
  test::check_error([&] { Toy().go({"--resume", ck, "--steps", "3", "--checkpoint", d.path + "/nd/c.ckpt.h5"}); },
                    {"step 4", "beyond this run's 3 steps"});
  CHECK_FALSE(fs::exists(d.path + "/nd"));
  // Diverging before its first checkpoint to a new path: the one it resumed from is kept.
  fs::remove(d.path + "/r.h5");
  Toy t;
  t.nan_at = 6;
  CHECK(t.go({"--resume", ck, "--checkpoint", d.path + "/c2.ckpt.h5", "--out", d.path + "/n.h5"}) == 1);
  CHECK_FALSE(fs::exists(d.path + "/c2.ckpt.h5"));
}

TEST_CASE("Run: begin() before parse() is refused before anything is written") {
  // It trained every step, then failed to move '.tmp' to '' (no checkpoint
  // path yet), leaving .tmp in the working directory.
  REQUIRE_FALSE(std::filesystem::exists("unused.h5"));
  Toy t;
  t.run.track("model", t.model);
  test::check_error([&] { t.run.begin(); }, {"Run::begin", "call parse() first"});
  CHECK_FALSE(std::filesystem::exists("unused.h5"));
  CHECK_FALSE(std::filesystem::exists(".tmp"));
  test::check_error([&] { t.run.next(); }, {"Run::next", "begin()"});
}

namespace {
void known_handler(int) {}
}  // namespace

TEST_CASE("StopRequest: the first SIGINT only sets the flag; the previous handler comes back afterwards") {
  auto outer = std::signal(SIGINT, known_handler);  // a known handler to come back to
  {
    StopRequest ctrl_c;
    CHECK_FALSE(ctrl_c.requested());
    std::raise(SIGINT);  // the process goes on
    CHECK(ctrl_c.requested());
  }
  bool restored = std::signal(SIGINT, known_handler) == known_handler;
  CHECK(restored);
  {
    StopRequest again;  // a new run starts without the old request
    CHECK_FALSE(again.requested());
  }
  // Started with SIGINT ignored (a script's background job): it stays ignored.
  std::signal(SIGINT, SIG_IGN);
  {
    StopRequest ignored;
    std::raise(SIGINT);
    CHECK_FALSE(ignored.requested());
  }
  const bool still_ignored = std::signal(SIGINT, outer) == SIG_IGN;
  CHECK(still_ignored);
  // SIGTERM is a stop request too, and says which signal it was.
  auto outer_term = std::signal(SIGTERM, known_handler);
  {
    StopRequest term;
    std::raise(SIGTERM);  // the process goes on
    CHECK(term.requested());
    CHECK(term.signal() == SIGTERM);
  }
  const bool term_restored = std::signal(SIGTERM, outer_term) == known_handler;
  CHECK(term_restored);
}

TEST_CASE("Run: Ctrl-C or SIGTERM from parse() on stops the run before its first step, with 130 or 143") {
  // A signal before begin() (a program's start takes a while: its data, its
  // model, a resumed log cut back) killed the process with the signal's
  // default action, status -2 or -15: the handler came at begin()'s end.
  // Here the previous handlers do nothing, so a signal the Run does not
  // catch leaves the run to train all its steps.
  auto outer = std::signal(SIGINT, known_handler);
  auto outer_term = std::signal(SIGTERM, known_handler);
  test::TempDir d("heed-run-early-");
  {
    // A new run: nothing trained, nothing to save; it says so and how to start again.
    Toy t;
    t.after_parse = [] { std::raise(SIGINT); };
    const std::string out = stdout_of([&] { CHECK(t.go({"--out", d.path + "/n.h5"}) == 130); });
    CHECK(t.run.step() == 0);
    CHECK(t.counter == 0);
    CHECK_FALSE(fs::exists(d.path + "/n.ckpt.h5"));
    CHECK(test::has(out, "stopped before its first step: nothing was trained, and no checkpoint written.\n"));
    CHECK(test::has(out, "start it again with: heed run toy --out " + d.path + "/n.h5\n"));
  }
  const std::string ck = d.path + "/r.ckpt.h5";
  REQUIRE(Toy().go({"--out", d.path + "/r.h5", "--stop-after", "4"}) == 130);
  const std::string ck_bytes = test::slurp(ck);
  {
    // A resumed run: begin() goes to its end (the log cut back), and the
    // checkpoint stays as it was.
    Toy t;
    t.after_parse = [] { std::raise(SIGTERM); };
    const std::string out = stdout_of([&] { CHECK(t.go({"--resume", ck}) == 143); });
    CHECK(t.run.step() == 4);
    CHECK(test::slurp(ck) == ck_bytes);
    CHECK(test::has(out, "stopped at step 4/10 before its next step; the checkpoint '" + ck + "' holds it"));
  }
  Toy rest;
  REQUIRE(rest.go({"--resume", ck}) == 0);
  CHECK(logged_steps(d.path + "/r.h5", "loss") == std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  const bool restored = std::signal(SIGINT, outer) == known_handler;  // the Run's handler went with it
  const bool term_restored = std::signal(SIGTERM, outer_term) == known_handler;
  CHECK(restored);
  CHECK(term_restored);
}

TEST_CASE("Run logs and heed info name the commit the build was made from, read at build time") {
  // What git says of the source tree now; the suite runs on a fresh build.
  std::string head;
  if (FILE* f = popen("git -C '" HEED_SOURCE_DIR "' rev-parse --short=12 HEAD 2>/dev/null", "r")) {
    char buf[64];
    while (fgets(buf, sizeof buf, f)) head += buf;
    pclose(f);
  }
  while (!head.empty() && (head.back() == '\n' || head.back() == '\r')) head.pop_back();
  const std::string expected = head.empty() ? "unknown" : head;
  CHECK(git_commit() == expected);
  test::TempDir d("heed-info-");
  const test::Result r = test::heed_cli({"info"}, d.path);
  CHECK(r.status == 0);
  CHECK(r.out.rfind("heed " + heed_version() + " (commit " + expected + ")\n", 0) == 0);
}

TEST_CASE("guard_main: any exception becomes a message and status 1, a bad command line status 2") {
  CHECK(guard_main("toy", [] { return 0; }) == 0);
  CHECK(guard_main("toy", [] { return 130; }) == 130);
  CHECK(guard_main("toy", []() -> int { throw UsageError("--steps: expected an integer"); }) == 2);
  CHECK(guard_main("toy", []() -> int { fail("something failed"); }) == 1);
  CHECK(guard_main("toy", []() -> int { throw 42; }) == 1);  // was `terminate called`
}

TEST_CASE("Run: a program's --help names the program, and no option shows an empty default") {
  Toy t;
  std::vector<std::string> words = {"./my_trainer", "--steps", "3"};
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  REQUIRE(t.run.parse(static_cast<int>(argv.size()), argv.data()));
  const std::string help = t.run.args().help();
  CHECK(help.rfind("usage: ./my_trainer [options]\n", 0) == 0);
  CHECK(help.find("(default: )") == std::string::npos);
  // The option whose help gives its default in words shows it once.
  const size_t at = help.find("--checkpoint ");
  REQUIRE(at != std::string::npos);
  const std::string line = help.substr(at, help.find('\n', at) - at);
  REQUIRE(line.find("(default:") != std::string::npos);
  CHECK(line.find("(default:") == line.rfind("(default:"));
}

TEST_CASE("Run: RunOptions::program, when set, starts --help's usage line and the resume command, not argv[0]") {
  // A tool with subcommands ("mytool train ..."): parse(argc, argv) replaced
  // the program with argv[0].
  test::TempDir d("heed-run-program-");
  Toy t(RunOptions("unused.h5").steps(10).progress_seconds(0).program("mytool train"));
  std::vector<std::string> words = {"mytool", "--out", d.path + "/p.h5", "--stop-after", "2"};
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  REQUIRE(t.run.parse(static_cast<int>(argv.size()), argv.data()));
  CHECK(t.run.args().help().rfind("usage: mytool train [options]\n", 0) == 0);
  t.run.track("model", t.model);
  t.run.begin();
  while (t.run.next()) {
  }
  const std::string out = stdout_of([&] { CHECK(t.run.finish() == 130); });
  CHECK(test::has(out, "resume with: mytool train --resume " + d.path + "/p.ckpt.h5\n"));
  const std::string cmd = h5::attr_str(h5::File(d.path + "/p.h5", h5::File::Mode::read).get_attr("/", "command_line"));
  CHECK(cmd == "mytool train --out " + d.path + "/p.h5 --stop-after 2");
}

TEST_CASE("Run: a program's option named like one of Run's (or declared twice) is refused where it is declared") {
  Toy t;
  int64_t steps = 0;
  // --steps was shown twice in --help and read into the program's variable
  // alone: the run's length ignored it.
  t.run.args().integer("steps", &steps, "my steps", 1);
  test::check_error([&] { t.run.parse({"--steps", "3"}); }, {"--steps is declared twice", "heed::Run's"});
  std::string a, b;
  Args args("tool", "a tool");
  args.text("name", &a, "a name");
  test::check_error([&] { args.text("name", &b, "again"); }, {"tool: option --name is declared twice"});
  bool f = false;
  test::check_error([&] { args.flag("name", &f, "a flag"); }, {"--name is declared twice"});
}

TEST_CASE("Run: parse() twice, and the log after finish(), are refused saying so") {
  test::TempDir d("heed-run-misuse-");
  Toy t;
  REQUIRE(t.run.parse({"--out", d.path + "/a.h5"}));
  // It said "option --steps is declared twice (a program's own option named like one of heed::Run's?)".
  test::check_error([&] { t.run.parse({"--out", d.path + "/a.h5"}); }, {"Run::parse: called twice"});
  Toy u;
  REQUIRE(u.go({"--out", d.path + "/b.h5", "--steps", "2"}) == 0);
  // It said "metric 'loss' was not declared".
  test::check_error([&] { u.run.log().scalar("loss", 9, 1.0); },
                    {"Run::log: the run has finished (finish() was called): its log '" + d.path + "/b.h5' is closed"});
  test::check_error([&] { u.run.log().series("vec", 9, Tensor::zeros({3})); }, {"Run::log: the run has finished"});
}

TEST_CASE("Run: one module under two names, and next() after finish(), are refused") {
  test::TempDir d("heed-run-misuse-");
  Toy t;
  t.extra = &t.model;  // the model again, as "extra"
  test::check_error([&] { t.go({"--out", d.path + "/a.h5"}); }, {"Run::track: 'extra' is already tracked as 'model'"});
  Toy u;
  REQUIRE(u.go({"--out", d.path + "/b.h5", "--steps", "2"}) == 0);
  test::check_error([&] { u.run.next(); }, {"Run::next: the run has finished"});
}

TEST_CASE("Args: --help shows the range of a bounded option, integer or real, and the value refused names it") {
  Args args("tool", "a tool");
  int64_t n = 1;
  double p = 0, lr = 0.1, m = 0.5;
  args.integer("layers", &n, "layers", 1, 1024)
      .real("dropout", &p, "dropout probability", 0.0, 1.0, false, true)
      .real("lr", &lr, "learning rate", 0.0, 1e300, true)
      .real("mix", &m, "mixing weight, in [0, 1]", 0.0, 1.0);
  const std::string help = args.help();
  auto line = [&](const std::string& opt) {
    const size_t at = help.find("--" + opt + " ");
    REQUIRE(at != std::string::npos);
    return help.substr(at, help.find('\n', at) - at);
  };
  CHECK(line("layers").find("layers [1..1024]") != std::string::npos);
  CHECK(line("dropout").find("dropout probability [0, 1) (default: 0)") != std::string::npos);
  CHECK(line("lr").find("[") == std::string::npos);  // bounded below only: nothing shown
  CHECK(line("mix").find("[0, 1] [0, 1]") == std::string::npos);  // the help says it already: once
  test::check_error([&] { args.parse({"--dropout", "1"}); }, {"--dropout expects a number in [0, 1), got '1'"});
}

TEST_CASE("Run: stop_requested() tells a step's long work that Ctrl-C came; a counter added later is optional") {
  test::TempDir d("heed-run-");
  const std::string ck = d.path + "/s.ckpt.h5";
  Toy t;
  CHECK_FALSE(t.run.stop_requested());  // before begin(): no run to stop
  t.raise_at = 4;
  REQUIRE(t.go({"--out", d.path + "/s.h5"}) == 130);
  CHECK_FALSE(t.asked_before);
  CHECK(t.asked_after);
  CHECK(t.run.step() == 4);  // the step in progress ended, then the run stopped
  CHECK(load_checkpoint(ck, "toy").counters.at("step") == 4);
  CHECK_FALSE(t.run.stop_requested());  // after finish()
  // A program that tracks one more counter resumes the checkpoint without it
  // when it is optional, keeping its own value; a required one is refused.
  Toy opt;
  opt.track_later = true;
  REQUIRE(opt.go({"--resume", ck}) == 0);
  CHECK(opt.later == 7);
  CHECK(load_checkpoint(ck, "toy").counters.at("later") == 7);  // and saved from then on
  Toy req;
  req.track_later = req.later_required = true;
  Toy again;
  again.raise_at = 2;
  REQUIRE(again.go({"--out", d.path + "/r.h5"}) == 130);
  test::check_error([&] { req.go({"--resume", d.path + "/r.ckpt.h5"}); }, {"does not fit", "missing [counter later]"});
  try {  // nothing unexpected: not said ("missing [counter later], unexpected []")
    req.go({"--resume", d.path + "/r.ckpt.h5"});
    FAIL("the resume was not refused");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("unexpected") == std::string::npos);
  }
}

TEST_CASE("Run: owed work names a tracked counter, before begin()") {
  test::TempDir d("heed-run-");
  {
    Toy t;
    REQUIRE(t.run.parse({"--out", d.path + "/o.h5"}));
    t.run.owed_work("eval/pending", {"loss"});  // never tracked
    test::check_error([&] { t.run.begin(); }, {"'eval/pending'", "not a counter the run tracks"});
  }
  Toy t;
  REQUIRE(t.run.parse({"--out", d.path + "/p.h5"}));
  t.run.track("counter", t.counter);
  t.run.owed_work("counter", {"loss"});
  t.run.begin();
  test::check_error([&] { t.run.owed_work("counter", {"loss"}); }, {"'counter'", "after begin"});
  t.run.finish();
}

TEST_CASE("Run: a run stopped before its end is refused a length that ends it at the step it stopped, files untouched") {
  // Step 4 of 10 was trained as an ordinary step: a program's work after its
  // last step (a final evaluation) was never done, and --steps 4 would end
  // the run at once without it.
  test::TempDir d("heed-run-");
  const std::string log = d.path + "/s.h5", ck = d.path + "/s.ckpt.h5";
  REQUIRE(Toy().go({"--out", log, "--stop-after", "4"}) == 130);
  CHECK(load_checkpoint(ck, "toy").counters.at("steps") == 10);  // the run's length, as written
  const std::string log_bytes = test::slurp(log), ck_bytes = test::slurp(ck);
  test::check_error([&] { Toy().go({"--resume", ck, "--steps", "4"}); },
                    {"checkpoint '" + ck + "' stopped at step 4 of 10", "--steps 4 would end the run there",
                     "expected --steps above 4 (or no --steps: the run's own 10)"});
  // A checkpoint from before the counter: the length comes from its --steps.
  Checkpoint old = load_checkpoint(ck, "toy");
  old.counters.erase("steps");
  save_checkpoint(d.path + "/old.ckpt.h5", old);
  test::check_error([&] { Toy().go({"--resume", d.path + "/old.ckpt.h5", "--out", log, "--steps", "4"}); },
                    {"stopped at step 4 of 10", "expected --steps above 4"});
  CHECK(test::slurp(log) == log_bytes);
  CHECK(test::slurp(ck) == ck_bytes);
  // The run's own length finishes it; a finished run resumed at its length
  // has nothing owed and ends at once, as before.
  Toy rest;
  REQUIRE(rest.go({"--resume", ck}) == 0);
  CHECK(rest.counter == 20);
  Toy done;
  REQUIRE(done.go({"--resume", ck, "--steps", "10"}) == 0);
  CHECK(done.counter == 20);
}

TEST_CASE("Run: a program that sets its own length is refused the same, naming the option that sets it") {
  test::TempDir d("heed-run-");
  const std::string ck = d.path + "/e.ckpt.h5";
  int64_t rounds = 0;
  // Two steps a round, as shapes has batches an epoch (--epochs).
  auto program = [&rounds](Toy& t) {
    t.run.args().integer("rounds", &rounds, "rounds of two steps", 1);
    t.run.may_change_on_resume("rounds");
    t.after_parse = [&rounds, &t] { t.run.set_steps(2 * rounds); };
  };
  Toy first(RunOptions("unused.h5").checkpoint_every(3).progress_seconds(0));
  program(first);
  REQUIRE(first.go({"--out", d.path + "/e.h5", "--rounds", "5", "--stop-after", "4"}) == 130);
  const std::string ck_bytes = test::slurp(ck);
  Toy two(RunOptions("unused.h5").checkpoint_every(3).progress_seconds(0));
  program(two);
  test::check_error([&] { two.go({"--resume", ck, "--rounds", "2"}); },
                    {"stopped at step 4 of 10", "a run of 4 steps would end the run there",
                     "expected a run longer than 4 steps (a larger --rounds; the run's own was 10)"});
  CHECK(test::slurp(ck) == ck_bytes);
  Toy three(RunOptions("unused.h5").checkpoint_every(3).progress_seconds(0));
  program(three);
  REQUIRE(three.go({"--resume", ck, "--rounds", "3"}) == 0);
  CHECK(three.counter == 12);
}

TEST_CASE("Run: an option whose default lies outside its range must be given for a new run, not for a resume") {
  test::TempDir d("heed-run-");
  int64_t rounds = 0;  // no default the range takes: the user says how many
  auto program = [&rounds](Toy& t) {
    t.run.args().integer("rounds", &rounds, "rounds of two steps", 1);
    t.after_parse = [&rounds, &t] { t.run.set_steps(2 * rounds); };
  };
  Toy none(RunOptions("unused.h5").checkpoint_every(3).progress_seconds(0));
  program(none);
  test::check_error([&] { none.go({"--out", d.path + "/n.h5"}); },
                    {"--rounds was not given, and its default 0 is not an integer >= 1"});
  CHECK(!std::filesystem::exists(d.path + "/n.h5"));
  Toy first(RunOptions("unused.h5").checkpoint_every(3).progress_seconds(0));
  program(first);
  REQUIRE(first.go({"--out", d.path + "/e.h5", "--rounds", "5", "--stop-after", "4"}) == 130);
  rounds = 0;
  Toy again(RunOptions("unused.h5").checkpoint_every(3).progress_seconds(0));
  program(again);
  REQUIRE(again.go({"--resume", d.path + "/e.ckpt.h5"}) == 0);  // --rounds 5 restored
  CHECK(rounds == 5);
  CHECK(again.counter == 20);  // 2 a step, 10 steps
}

TEST_CASE("format_seconds: seconds, minutes, hours, days; an ETA beyond any use is capped") {
  CHECK(format_seconds(12.34) == "12.3s");
  CHECK(format_seconds(65) == "1m05s");
  CHECK(format_seconds(3599) == "59m59s");
  CHECK(format_seconds(5 * 3600) == "5h00m00s");
  CHECK(format_seconds(3600 + 62) == "1h01m02s");
  CHECK(format_seconds(2 * 86400 + 3 * 3600 + 7 * 60 + 30) == "2d03h07m");
  CHECK(format_seconds(999 * 86400.0) == "999d00h00m");
  CHECK(format_seconds(1000 * 86400.0) == "over 999 days");
  CHECK(format_seconds(9.16e15) == "over 999 days");  // steps left / a rate of almost nothing
  CHECK(format_seconds(INFINITY) == "over 999 days");
}

TEST_CASE("Run: a resume may end the run at the step it stopped when that step's work is owed: the program does it first") {
  // charlm's evaluation cut short by a stop is owed (owed_work()): resumed
  // with --steps at that step, the program evaluates it, as its last step would.
  test::TempDir d("heed-run-");
  const std::string ck = d.path + "/w.ckpt.h5";
  Toy first;
  first.track_later = true;
  first.later = 4;  // the step whose work is owed, as a program sets it when a stop cuts that work short
  REQUIRE(first.go({"--out", d.path + "/w.h5", "--stop-after", "4"}) == 130);
  Toy owing;
  owing.track_later = true;
  owing.after_parse = [&owing] { owing.run.owed_work("later", {}); };
  REQUIRE(owing.go({"--resume", ck, "--steps", "4"}) == 0);
  CHECK(owing.later == 4);
  // Without owed work declared, the same checkpoint is refused.
  Toy plain;
  plain.track_later = true;
  test::check_error([&] { plain.go({"--resume", ck, "--steps", "4"}); }, {"stopped at step 4 of 10"});
}

namespace {
// What a bundled experiment prints for `heed run NAME --help`.
std::string bundled_help(const std::string& name) {
  for (const experiments::Experiment& e : experiments::experiments())
    if (e.name == name) {
      int status = -1;
      const std::string out = stdout_of([&] { status = e.run({"--help"}, {"heed", "run", name, "--help"}); });
      CHECK(status == 0);
      return out;
    }
  FAIL("no bundled experiment " << name);
  return "";
}
}  // namespace

TEST_CASE("Run: a program's Run may bear neither an empty name nor a bundled experiment's; the bundled ones may") {
  test::check_error([] { Run("", "a toy", RunOptions("unused.h5").steps(1)); },
                    {"heed::Run: the experiment name is empty; expected the program's name"});
  std::vector<std::string> names{"attend"};  // heed attend's log, which heed plot draws as its own
  for (const experiments::Experiment& e : experiments::experiments()) names.push_back(e.name);
  for (const std::string& name : names) {
    INFO("name: " << name);
    const std::vector<std::string>& bundled = bundled_experiments();
    CHECK(std::find(bundled.begin(), bundled.end(), name) != bundled.end());
    test::check_error([&] { Run(name, "mine", RunOptions("unused.h5").steps(1)); },
                      {"heed::Run: the experiment name '" + name + "' is one of heed's bundled experiments (attend, "
                       "charlm, compression, copy, crossattn, scaling, shapes, sine, timeseries)",
                       "expected a name of the program's own (e.g. \"my_" + name + "\")"});
    experiments::Run own(name, "the bundled one", RunOptions("unused.h5").steps(1));
    CHECK(own.experiment() == name);
  }
  CHECK(Run("my_shapes", "mine", RunOptions("unused.h5").steps(1)).experiment() == "my_shapes");
  // The bundled experiments still make their Run (here up to its --help).
  CHECK(test::has(bundled_help("sine"), "usage: heed run sine [options]"));
}

namespace {
// Every path under dir (directories and links too), to check that a refused
// run made none.
std::set<std::string> every_entry(const std::string& dir) {
  std::set<std::string> all;
  for (const auto& e : fs::recursive_directory_iterator(dir)) all.insert(e.path().string());
  return all;
}
}  // namespace

TEST_CASE("Run: a path with '..' after a directory to be made is refused; a run refused later removes what it made") {
  test::TempDir d("heed-run-dirs-");
  std::ofstream(d.path + "/afile") << "notes";
  fs::create_symlink("afile", d.path + "/link");
  fs::create_symlink("nowhere", d.path + "/dangling");
  const std::set<std::string> before = every_entry(d.path);
  // "nd/.." reaches nothing until nd is made; made, it names a file, a
  // dangling link or any file at all where a directory goes.
  for (const std::string target : {"link", "dangling", "afile"}) {
    INFO("through " << target);
    const std::string out = d.path + "/nd/../" + target + "/x.h5";
    test::check_error([&] { Toy().go({"--out", out}); },
                      {"run toy: --out '" + out + "' has '..' after '" + d.path + "/nd', a directory that does not "
                       "exist; expected a path without '..' after a directory to be made (e.g. '" + d.path + "/" +
                       target + "/x.h5')"});
    CHECK(every_entry(d.path) == before);
  }
  // A link to nothing where a directory goes: refused in parse(), before the program's work.
  test::check_error([&] { Toy().go({"--out", d.path + "/dangling/x.h5"}); },
                    {"--out '" + d.path + "/dangling/x.h5' goes through '" + d.path +
                     "/dangling', a symbolic link to 'nowhere', which does not exist"});
  test::check_error([&] { check_output_path("nd/a/../../x.h5", "export", "-o"); },
                    {"export: -o 'nd/a/../../x.h5' has '..' after 'nd'", "(e.g. 'x.h5')"});
  test::check_error([&] { Toy().go({"--out", d.path + "/x.h5", "--checkpoint", d.path + "/nd/../c.h5"}); },
                    {"--checkpoint '" + d.path + "/nd/../c.h5' has '..' after"});
  CHECK(every_entry(d.path) == before);
  // Names too long for the filesystem, refused before any directory is
  // made (this one was refused only once its directories existed: the
  // checkpoint's lock file "<name>.lock" had a name too long).
  const std::string long_name = d.path + "/nd2/sub/" + std::string(250, 'c') + ".h5";
  test::check_error([&] { Toy().go({"--out", d.path + "/nd/x.h5", "--checkpoint", long_name}); },
                    {"--checkpoint '" + long_name.substr(0, 32) + "...", "': the file name 'cccc",
                     "...ccccccccccccc.h5' has 253 bytes; expected at most 250 (the filesystem's limit of 255, less 5 "
                     "for the '.lock' file heed writes beside it)"});
  CHECK(every_entry(d.path) == before);
  const std::string long_dir = d.path + "/nd3/" + std::string(256, 'd') + "/x.h5";
  test::check_error([&] { Toy().go({"--out", long_dir}); },
                    {"the directory name 'dddd", "' has 256 bytes; expected at most 255, the filesystem's limit"});
  std::string deep = d.path;
  while (deep.size() < 4100) deep += "/" + std::string(200, 'e');
  test::check_error([&] { Toy().go({"--out", deep + "/x.h5"}); },
                    {"': the path has ", " bytes; expected fewer than 4091 (the system's limit of 4096, less 5"});
  CHECK(every_entry(d.path) == before);
  // What prepare_output_path made, in order; removed innermost first.
  const std::vector<std::string> made = prepare_output_path(d.path + "/p/q/x.h5");
  CHECK(made == std::vector<std::string>{d.path + "/p", d.path + "/p/q"});
  CHECK(prepare_output_path(d.path + "/p/q/y.h5").empty());
  remove_directories(made);
  CHECK(every_entry(d.path) == before);
  // A command that fails after making them (export, quantize, attend)
  // leaves none; one that finishes keeps them.
  try {
    MadeDirectories dirs(prepare_output_path(d.path + "/f/g/x.h5"));
    CHECK(std::filesystem::is_directory(d.path + "/f/g"));
    throw std::runtime_error("the write failed");
  } catch (const std::runtime_error&) {
  }
  CHECK(every_entry(d.path) == before);
  {
    MadeDirectories dirs(prepare_output_path(d.path + "/k/x.h5"));
    dirs.keep();
  }
  CHECK(std::filesystem::is_directory(d.path + "/k"));
}

TEST_CASE("Run: RunOptions::init_from(false) leaves --init-from out of --help and refuses it at once") {
  test::TempDir d("heed-run-init-");
  const RunOptions none = RunOptions("unused.h5").steps(3).progress_seconds(0).init_from(false);
  Toy shown;
  const std::string offered = stdout_of([&] { CHECK(shown.go({"--help"}) == 0); });
  CHECK(test::has(offered, "--init-from FILE"));
  Toy help(none);
  const std::string text = stdout_of([&] { CHECK(help.go({"--help"}) == 0); });
  CHECK(test::has(text, "--resume FILE"));
  CHECK(!test::has(text, "init-from"));
  const std::string weights = d.path + "/w.safetensors";
  safetensors::save(weights, {{"weight", Tensor::zeros({2, 3})}, {"bias", Tensor::zeros({2})}});
  const std::set<std::string> before = every_entry(d.path);
  Toy given(none);
  bool usage = false;
  test::check_error(
      [&] {
        try {
          given.go({"--out", d.path + "/i.h5", "--init-from", weights});
        } catch (const UsageError&) {
          usage = true;
          throw;
        }
      },
      {"run toy: --init-from does not apply: this program starts no model from given weights"});
  CHECK(usage);
  CHECK(every_entry(d.path) == before);
}

TEST_CASE("Run: --resume's help names every option a resume may change, the program's own too") {
  test::TempDir d("heed-run-help-");
  Toy plain;
  const std::string text = stdout_of([&] { CHECK(plain.go({"--help"}) == 0); });
  CHECK(test::has(text, "only the run's length (--steps), --threads, --stop-after, where and how often it "
                        "checkpoints, and where its log is now (--out, for a log that moved) may change"));
  int64_t rounds = 1;
  double rate = 0.5;
  Toy own;
  own.run.args().integer("rounds", &rounds, "rounds", 1).real("rate", &rate, "a rate");
  own.run.may_change_on_resume("rounds");
  own.run.may_change_on_resume("rate");
  const std::string listed = stdout_of([&] { CHECK(own.go({"--help"}) == 0); });
  CHECK(test::has(listed, "where its log is now (--out, for a log that moved), and --rate, --rounds may change"));
  // After parse() the resume is checked: too late to change what it takes.
  Toy late;
  REQUIRE(late.run.parse({"--out", d.path + "/l.h5"}));
  test::check_error([&] { late.run.may_change_on_resume("rounds"); },
                    {"Run::may_change_on_resume('rounds'): called after parse()"});
  // The same for the other calls parse() acts on (they were ignored without a word).
  test::check_error([&] { late.run.resolved_default("rounds", "-1"); },
                    {"Run::resolved_default('rounds', '-1'): called after parse()", "expected it before parse()"});
  test::check_error([&] { late.run.reads_file("text"); },
                    {"Run::reads_file('text'): called after parse()", "expected it before parse()"});
  // heed run shapes: its length is --epochs, which a resume may raise.
  CHECK(test::has(bundled_help("shapes"), "(--out, for a log that moved), and --epochs may change"));
}

TEST_CASE("Run: --init-from's refusal and an existing file's description show a file's metadata with \\xNN") {
  test::TempDir d("heed-run-meta-");
  const std::string weights = d.path + "/w.safetensors";
  safetensors::save(weights, {{"weight", Tensor::zeros({2, 3})}},
                    {{kExperimentKey, "evil\n\x1b[2Jshapes"}, {kModelKey, "m\x1b]0;t\x07"}});
  std::string msg;
  try {
    Toy().go({"--out", d.path + "/e.h5", "--init-from", weights});
  } catch (const Error& e) {
    msg = e.what();
  }
  INFO("message: " << msg);
  CHECK(test::has(msg, "holds a evil\\x0a\\x1b[2Jshapes model (m\\x1b]0;t\\x07) (heed export of a "
                       "evil\\x0a\\x1b[2Jshapes checkpoint"));
  CHECK(msg.find_first_of("\n\x1b\x07") == std::string::npos);
  CHECK(!fs::exists(d.path + "/e.h5"));
  CHECK(existing_file(weights).describe() == "a safetensors file heed wrote (of the 'evil\\x0a\\x1b[2Jshapes' experiment)");
}

TEST_CASE("Run: a later checkpoint after an older one's resume cut the log back is refused, naming both steps") {
  // Checkpoint at 9, then an older copy (step 4) resumed to 6: the log was
  // cut back to 4 and went on to 6. Resuming the step-9 checkpoint then
  // logged from 10 on, steps 7-9 missing from the log, with status 0.
  test::TempDir d("heed-run-");
  const std::string log = d.path + "/g.h5", ck = d.path + "/g.ckpt.h5", old = d.path + "/old.ckpt.h5";
  REQUIRE(Toy().go({"--out", log, "--steps", "12", "--stop-after", "4"}) == 130);
  fs::copy_file(ck, old);
  REQUIRE(Toy().go({"--resume", ck, "--stop-after", "9"}) == 130);
  REQUIRE(Toy().go({"--resume", old, "--stop-after", "6"}) == 130);
  CHECK(logged_steps(log, "loss") == std::vector<double>{1, 2, 3, 4, 5, 6});
  const auto before = test::snapshot(d.path);
  test::check_error([&] { Toy().go({"--resume", ck}); },
                    {"the log '" + log + "' cannot continue from checkpoint '" + ck + "' at step 9",
                     "ends at step 6", "steps 7 to 9 would be missing", "--out NEW.h5", "steps after 9"});
  CHECK(test::snapshot(d.path) == before);
  // As the message says: a new log goes on from the checkpoint.
  REQUIRE(Toy().go({"--resume", ck, "--out", d.path + "/g2.h5"}) == 0);
  CHECK(logged_steps(d.path + "/g2.h5", "loss") == std::vector<double>{10, 11, 12});
  // The older checkpoint's own resume, which the log does reach, goes on.
  REQUIRE(Toy().go({"--resume", old}) == 0);
  CHECK(logged_steps(log, "loss") == std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
}

namespace {
// The message and whether it is a UsageError (status 2 in heed's commands):
// what fn throws, or "" when it throws nothing.
std::pair<std::string, bool> thrown_by(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const UsageError& e) {
    return {e.what(), true};
  } catch (const Error& e) {
    return {e.what(), false};
  }
  return {"", false};
}
}  // namespace

TEST_CASE("Run: a log that opens but does not read whole is damaged: the resume says so, --out NEW.h5 goes on") {
  // It opened, and the resume failed later with HDF5's bare words ("could
  // not list group /"); --out NEW.h5 was refused, the log counted as
  // readable from its root attributes alone.
  test::TempDir d("heed-run-");
  const std::string log = d.path + "/g.h5", ck = d.path + "/g.ckpt.h5", fresh = d.path + "/fresh.h5";
  struct Damage {
    const char* what;
    std::function<void()> apply;
  };
  const std::vector<Damage> damages = {
      // A byte of the metric's name where the group of metrics links it,
      // under HDF5's checksum: the group no longer lists.
      {"a link of the metrics group", [&] { test::flip_byte_in(log, "loss", 1); }},
      // Zeros over the root object header (after the 48-byte superblock):
      // the file opens, its attributes do not read.
      {"the root object header",
       [&] {
         std::fstream f(log, std::ios::in | std::ios::out | std::ios::binary);
         f.seekp(48);
         f << std::string(200, '\0');
       }},
  };
  for (const Damage& damage : damages) {
    INFO("damaged: " << std::string(damage.what));
    fs::remove(log);
    fs::remove(ck);
    fs::remove(fresh);
    REQUIRE(Toy().go({"--out", log, "--stop-after", "4"}) == 130);
    damage.apply();
    REQUIRE(h5::File(log, h5::File::Mode::read_any).path() == log);  // it still opens
    const std::string damaged = test::slurp(log);
    test::check_error([&] { Toy().go({"--resume", ck}); },
                      {"the log '" + log + "' is damaged (", "HDF5",
                       "continue the run in a new log with --out NEW.h5, which holds the steps after 4"});
    CHECK(test::slurp(log) == damaged);
    // As the message says: the run goes on in a new log, the damaged one as it was.
    Toy on;
    REQUIRE(on.go({"--resume", ck, "--out", fresh}) == 0);
    CHECK(on.counter == 20);
    CHECK(logged_steps(fresh, "loss") == std::vector<double>{5, 6, 7, 8, 9, 10});
    CHECK(h5::attr_str(h5::File(fresh, h5::File::Mode::read).get_attr("/", "continues")) ==
          "the run of checkpoint '" + ck + "' from step 4");
    CHECK(test::slurp(log) == damaged);
  }
}

TEST_CASE("Run: a log truncated while the run goes on is warned of at its end, as a deleted one is") {
  test::TempDir d("heed-run-");
  const std::string log = d.path + "/t.h5", ck = d.path + "/t.ckpt.h5";
  Toy cut;
  cut.each_step = [&](int64_t step) {
    if (step == 5) fs::resize_file(log, 0);  // truncate -s 0, in the middle of the run
  };
  int status = -1;
  const std::string err = stderr_of([&] { status = cut.go({"--out", log}); });
  CHECK(status == 0);  // the training itself is done, and its checkpoint written
  CHECK(test::has(err, "warning: the log '" + log + "' was truncated or overwritten while the run went on"));
  CHECK(test::has(err, "The checkpoint '" + ck + "' is intact (--resume it with --out NEW.h5"));
  // As it says: the checkpoint's run goes on in a new log.
  Toy on;
  REQUIRE(on.go({"--resume", ck, "--steps", "12", "--out", d.path + "/t2.h5"}) == 0);
  CHECK(on.counter == 24);
  // A log left alone: no warning.
  CHECK(!test::has(stderr_of([&] { REQUIRE(Toy().go({"--out", d.path + "/u.h5"}) == 0); }), "warning"));
}

TEST_CASE("Run: a new run over an unfinished run's checkpoint is refused, files untouched; --restart starts over") {
  // After kill -9 (or a stop) the same command started the run over from
  // step 1 and replaced its checkpoint: every step trained was lost.
  test::TempDir d("heed-run-");
  const std::string log = d.path + "/k.h5", ck = d.path + "/k.ckpt.h5";
  REQUIRE(Toy().go({"--out", log, "--stop-after", "4"}) == 130);
  const std::string run_id = load_checkpoint(ck, "toy").run_id;
  const auto before = test::snapshot(d.path);
  {
    const auto [msg, usage] = thrown_by([&] { Toy().go({"--out", log}); });
    INFO(msg);
    CHECK(usage);
    CHECK(test::has(msg, "the checkpoint '" + ck + "' holds an unfinished run, at step 4 of 10"));
    CHECK(test::has(msg, "expected --resume to continue it"));
    CHECK(test::has(msg, " --resume " + ck + ")"));
    CHECK(test::has(msg, "or --restart to start it over"));
  }
  {  // the same checkpoint under another log
    const auto [msg, usage] = thrown_by([&] { Toy().go({"--out", d.path + "/other.h5", "--checkpoint", ck}); });
    INFO(msg);
    CHECK(usage);
    CHECK(test::has(msg, "--checkpoint '" + ck + "' holds an unfinished run, at step 4 of 10"));
  }
  {  // a checkpoint from before counter.steps: its length is its --steps
    Checkpoint old = load_checkpoint(ck, "toy");
    old.counters.erase("steps");
    save_checkpoint(d.path + "/old.ckpt.h5", old);
    const auto [msg, usage] = thrown_by([&] { Toy().go({"--out", d.path + "/old.h5"}); });
    CHECK(usage);
    CHECK(test::has(msg, "'" + d.path + "/old.ckpt.h5' holds an unfinished run, at step 4 of 10"));
    fs::remove(d.path + "/old.ckpt.h5");
  }
  {
    const auto [msg, usage] = thrown_by([&] { Toy().go({"--resume", ck, "--restart"}); });
    CHECK(usage);
    CHECK(test::has(msg, "--restart starts a run over; --resume continues one"));
  }
  CHECK(test::snapshot(d.path) == before);
  // --restart: a new run, from step 1, over both files.
  Toy over;
  REQUIRE(over.go({"--out", log, "--restart"}) == 0);
  CHECK(over.counter == 20);
  CHECK(logged_steps(log, "loss") == std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  CHECK(load_checkpoint(ck, "toy").run_id != run_id);
  // A finished run's checkpoint is replaced by a new run, as before.
  Toy again;
  REQUIRE(again.go({"--out", log}) == 0);
  CHECK(again.counter == 20);
}

TEST_CASE("heed run: the same command after a stop is refused with status 2, naming the checkpoint and both ways on") {
  test::TempDir d("heed-run-cli-");
  const std::vector<std::string> run = {"run", "copy", "--steps", "40", "--out", d.path + "/x.h5"};
  REQUIRE(test::heed_cli(test::cat(run, {"--stop-after", "20"}), d.path).status == 130);
  const auto before = test::snapshot(d.path);
  const test::Result again = test::heed_cli(run, d.path);
  INFO(again.err);
  CHECK(again.status == 2);
  CHECK(test::has(again.err, "holds an unfinished run, at step 20 of 40"));
  CHECK(test::has(again.err, "heed run copy --resume " + d.path + "/x.ckpt.h5"));
  CHECK(test::has(again.err, "--restart"));
  CHECK(test::snapshot(d.path) == before);
  CHECK(test::heed_cli(test::cat(run, {"--restart"}), d.path).status == 0);
}

TEST_CASE("Run: a finished run resumed with another --checkpoint writes that checkpoint, which resumes") {
  // It printed "checkpoint: other.ckpt.h5" and named it in the log, and no
  // such file was written: the run had no step left to write it at.
  test::TempDir d("heed-run-");
  const std::string log = d.path + "/c.h5", ck = d.path + "/c.ckpt.h5", other = d.path + "/other.ckpt.h5";
  REQUIRE(Toy().go({"--out", log}) == 0);
  Toy same;
  REQUIRE(same.go({"--resume", ck, "--checkpoint", other}) == 0);
  REQUIRE(fs::exists(other));
  test::check_same_checkpoint(ck, other, "toy");
  CHECK(load_checkpoint(other, "toy").config.at("checkpoint") == other);
  CHECK(h5::attr_str(h5::File(log, h5::File::Mode::read).get_attr("/", "config.checkpoint")) == other);
  Toy more;
  REQUIRE(more.go({"--resume", other, "--steps", "12"}) == 0);
  CHECK(more.counter == 24);
}

TEST_CASE("Run: a log whose rows up to the checkpoint's step another resume wrote is refused; --out NEW.h5 goes on") {
  // g.ckpt.h5 at 9 (log rows 1-9: branch A); an older copy (step 4) resumed
  // to 11 cut the log back to 4 and logged 5-11 (branch B). The resume of
  // the step-9 checkpoint then cut the log to 9 and went on with status 0:
  // rows 5-9 of B, 10-12 of A.
  test::TempDir d("heed-run-");
  const std::string log = d.path + "/g.h5", ck = d.path + "/g.ckpt.h5", old = d.path + "/old.ckpt.h5";
  const std::string fresh = d.path + "/g2.h5";
  REQUIRE(Toy().go({"--out", log, "--steps", "12", "--checkpoint-every", "1", "--stop-after", "4"}) == 130);
  fs::copy_file(ck, old);
  REQUIRE(Toy().go({"--resume", ck, "--stop-after", "9"}) == 130);
  REQUIRE(Toy().go({"--resume", old, "--stop-after", "11"}) == 130);  // an older copy's resume: cut back, allowed
  CHECK(logged_steps(log, "loss") == std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  CHECK(load_checkpoint(ck, "toy").log_digest.size() == 16);
  const auto before = test::snapshot(d.path);
  const auto [msg, usage] = thrown_by([&] { Toy().go({"--resume", ck}); });
  INFO(msg);
  CHECK(!usage);  // status 1, as the refusal of a log cut back below the step
  CHECK(test::has(msg, "the log '" + log + "' cannot continue from checkpoint '" + ck + "' at step 9: its rows up to "
                       "step 9 come from another resume of the run"));
  CHECK(test::has(msg, "give --out NEW.h5: a new log, which holds the steps after 9"));
  CHECK(test::snapshot(d.path) == before);
  // As the message says: a new log goes on from the checkpoint (the old log
  // is not "still there" to continue), and the checkpoints written into it
  // resume in it.
  Toy on;
  REQUIRE(on.go({"--resume", ck, "--out", fresh}) == 0);
  CHECK(on.counter == 24);
  CHECK(logged_steps(fresh, "loss") == std::vector<double>{10, 11, 12});
  CHECK(h5::attr_str(h5::File(fresh, h5::File::Mode::read).get_attr("/", "continues")) ==
        "the run of checkpoint '" + ck + "' from step 9");
  REQUIRE(Toy().go({"--resume", ck, "--steps", "14"}) == 0);
  CHECK(logged_steps(fresh, "loss") == std::vector<double>{10, 11, 12, 13, 14});
  // Branch B's own checkpoint goes on in the log it wrote.
  REQUIRE(Toy().go({"--resume", old, "--steps", "16"}) == 0);
  CHECK(logged_steps(log, "loss") == std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  // A checkpoint of the new log's run does not take the first log's rows up to its step.
  const auto after = test::snapshot(d.path);
  test::check_error([&] { Toy().go({"--resume", ck, "--out", log, "--steps", "16"}); },
                    {"cannot continue from checkpoint '" + ck + "' at step 14", "another resume of the run"});
  CHECK(test::snapshot(d.path) == after);
}

TEST_CASE("Run: the digest leaves out the rows of work a checkpoint owes, which its resumes log again") {
  // A checkpoint that owes step 4's work (its "loss" row, logged again by
  // the resume that does that work) resumes after such a resume went on,
  // as charlm's evaluation cut short by a stop does; and its run's log,
  // still there, is not taken for a missing one.
  test::TempDir d("heed-run-");
  const std::string log = d.path + "/w.h5", ck = d.path + "/w.ckpt.h5", keep = d.path + "/keep.ckpt.h5";
  auto program = [](Toy& t) {
    t.track_later = true;
    t.later = 0;
    t.after_parse = [&t] { t.run.owed_work("later", {"loss"}); };
    t.after_begin = [&t] {  // the owed work first: its row at the step resumed
      if (t.later == 0) return;
      t.run.log().scalar("loss", t.run.step(), 0.5);
      t.later = 0;
    };
    t.each_step = [&t](int64_t step) {
      if (step == 4) t.later = 4;  // as a stop that cut step 4's work short
    };
  };
  Toy first;
  program(first);
  REQUIRE(first.go({"--out", log, "--stop-after", "4"}) == 130);
  fs::copy_file(ck, keep);
  Toy again;
  program(again);
  REQUIRE(again.go({"--resume", ck, "--stop-after", "6"}) == 130);
  CHECK(logged_steps(log, "loss") == std::vector<double>{1, 2, 3, 4, 5, 6});
  // The log's rows up to step 4, but for the owed one, are the checkpoint's.
  const auto before = test::snapshot(d.path);
  test::check_error(
      [&] {
        Toy missing;
        program(missing);
        missing.go({"--resume", keep, "--out", d.path + "/new.h5"});
      },
      {"the log '" + d.path + "/new.h5' is missing, and the run's log is still at '" + log + "'"});
  CHECK(test::snapshot(d.path) == before);
  Toy back;
  program(back);
  REQUIRE(back.go({"--resume", keep}) == 0);
  CHECK(logged_steps(log, "loss") == std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
}

TEST_CASE("Run: a new run whose --out is an unfinished run's log, its checkpoint elsewhere, is refused; --restart replaces it") {
  // The new run replaced the log of a run stopped at step 4 whose
  // checkpoint is another file: that checkpoint then resumed into another
  // run's log, its rows 1-4 lost.
  test::TempDir d("heed-run-");
  const std::string log = d.path + "/x.h5", ck = d.path + "/x.ckpt.h5", y = d.path + "/y.ckpt.h5";
  REQUIRE(Toy().go({"--out", log, "--stop-after", "4"}) == 130);
  const std::string run_id = load_checkpoint(ck, "toy").run_id;
  const auto before = test::snapshot(d.path);
  {
    const auto [msg, usage] = thrown_by([&] { Toy().go({"--out", log, "--checkpoint", y}); });
    INFO(msg);
    CHECK(usage);
    CHECK(test::has(msg, "--out '" + log + "' is the log of an unfinished run, at step 4 of 10 (its checkpoint '" +
                             ck + "'), which this new run would replace"));
    CHECK(test::has(msg, "expected --resume to continue it (heed run toy --resume " + ck + "), or --restart"));
  }
  CHECK(test::snapshot(d.path) == before);
  // Its checkpoint named by the log's config.checkpoint: a run stopped with
  // --checkpoint, then a new one with the default checkpoint.
  const std::string log2 = d.path + "/z.h5", c2 = d.path + "/c2.ckpt.h5";
  REQUIRE(Toy().go({"--out", log2, "--checkpoint", c2, "--stop-after", "3"}) == 130);
  const auto before2 = test::snapshot(d.path);
  test::check_error([&] { Toy().go({"--out", log2}); },
                    {"--out '" + log2 + "' is the log of an unfinished run, at step 3 of 10 (its checkpoint '" + c2 +
                     "')"});
  CHECK(test::snapshot(d.path) == before2);
  // --restart starts over in that log; the old checkpoint stays.
  Toy over;
  REQUIRE(over.go({"--out", log, "--checkpoint", y, "--restart"}) == 0);
  CHECK(logged_steps(log, "loss") == std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  CHECK(load_checkpoint(y, "toy").run_id != run_id);
  CHECK(load_checkpoint(ck, "toy").run_id == run_id);
  // A finished run's log is replaced by a new run, as before.
  Toy again;
  REQUIRE(again.go({"--out", log, "--checkpoint", d.path + "/w.ckpt.h5"}) == 0);
  CHECK(again.counter == 20);
}

TEST_CASE("heed run: a new run at an unfinished run's --out with another --checkpoint is refused with status 2") {
  test::TempDir d("heed-run-cli-");
  const std::vector<std::string> run = {"run", "copy", "--steps", "40", "--out", d.path + "/x.h5"};
  REQUIRE(test::heed_cli(test::cat(run, {"--stop-after", "20"}), d.path).status == 130);
  const auto before = test::snapshot(d.path);
  const test::Result again = test::heed_cli(test::cat(run, {"--checkpoint", d.path + "/y.ckpt.h5"}), d.path);
  INFO(again.err);
  CHECK(again.status == 2);
  CHECK(test::has(again.err, "is the log of an unfinished run, at step 20 of 40 (its checkpoint '" + d.path +
                                 "/x.ckpt.h5')"));
  CHECK(test::has(again.err, "heed run copy --resume " + d.path + "/x.ckpt.h5"));
  CHECK(test::snapshot(d.path) == before);
}
