// tests/experiments/test_timeseries.cpp: the time-series task (signals
// pinned by seed, targets rebuilt from the stored parameters), the
// same-phase measure on maps made by hand, causal forecasters, a small run in
// which attention must beat the CNN and look one period back, and the bad
// options of both lecture experiments (timeseries, crossattn).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/allocator.h"
#include "data/h5.h"
#include "experiments/common.h"
#include "experiments/copy.h"
#include "experiments/crossattn.h"
#include "experiments/crossattn_task.h"
#include "experiments/scaling.h"
#include "experiments/shapes_models.h"
#include "experiments/sine.h"
#include "experiments/timeseries.h"
#include "experiments/timeseries_task.h"
#include "spawn.h"
#include "test_util.h"

using namespace heed;
using test::last_value;
using namespace heed::experiments;

TEST_CASE("timeseries task: seed 0 draws the pinned periods, phases, waveforms, noise, anomalies and values") {
  Generator g(0);
  SeriesSet s = generate_series(3, g);  // defaults: T = 128, periods 12..24, 5 harmonics, up to 3 anomalies
  CHECK(s.period.to_vector<float>() == std::vector<float>{22.566242f, 18.762756f, 16.203968f});
  CHECK(s.phase.to_vector<float>() == std::vector<float>{0.36209112f, 0.40118986f, 0.2635083f});
  CHECK(s.noise.to_vector<float>() == std::vector<float>{0.112887375f, 0.06571018f, 0.27273202f});
  const std::vector<float> a = s.amplitude.to_vector<float>();  // [3, 5]
  CHECK(a[0] == 0.65972286f);
  CHECK(a[5] == 0.783292f);
  CHECK(a[11] == -0.084196314f);
  CHECK(s.offset.to_vector<float>()[0] == 2.6081946f);
  // Sample 0 has two anomalies, sample 1 one, sample 2 none (-1 / 0 past the count).
  CHECK(s.anomaly_position.to_vector<int64_t>() == std::vector<int64_t>{4, 64, -1, -1, -1, -1, 65, -1, -1});
  CHECK(s.anomaly_width.to_vector<int64_t>() == std::vector<int64_t>{3, 1, 0, 0, 0, 0, 2, 0, 0});
  CHECK(s.anomaly_height.to_vector<float>() ==
        std::vector<float>{-2.204169f, 2.206044f, 0, 0, 0, 0, -3.9099982f, 0, 0});
  const std::vector<float> x = s.input.to_vector<float>(), y = s.target.to_vector<float>();
  CHECK(x[0] == -1.72808218f);
  CHECK(x[4] - s.clean.to_vector<float>()[4] < -1.5f);  // inside the first anomaly (height -2.2)
  CHECK(x[127] == 0.682340264f);
  CHECK(x[128 + 0] == 0.0365753025f);
  CHECK(x[256 + 5] == -0.883939326f);
  CHECK(y[0] == -0.782608569f);
  CHECK(y[127] == 1.7123512f);
  // Draws per sample, as documented: 2 + 2 R + 1 + 1 + 4 m + T.
  CHECK(g.offset() == (2 + 10 + 2 + 8 + 128) + (2 + 10 + 2 + 4 + 128) + (2 + 10 + 2 + 0 + 128));
  // The same seed again: the same bits; another seed: another signal.
  Generator g2(0), g3(1);
  CHECK(generate_series(3, g2).input.to_vector<float>() == x);
  CHECK(generate_series(3, g3).input.to_vector<float>() != x);
}

TEST_CASE("timeseries task: targets are the next clean values, rebuilt from the stored parameters; the rest is noise "
          "and the stored anomalies") {
  SeriesOptions o;
  Generator g(7);
  const int64_t n = 64, T = o.length, A = o.anomalies_max;
  SeriesSet s = generate_series(n, g, o);
  Tensor clean = render_clean(s.period, s.phase, s.amplitude, s.offset, T + 1);  // [n, T + 1]
  CHECK(kernel::narrow(clean, 1, 0, T).to_vector<float>() == s.clean.to_vector<float>());
  CHECK(kernel::narrow(clean, 1, 1, T).to_vector<float>() == s.target.to_vector<float>());

  const std::vector<float> x = s.input.to_vector<float>(), c = s.clean.to_vector<float>();
  const std::vector<float> P = s.period.to_vector<float>(), phi = s.phase.to_vector<float>(),
                           sigma = s.noise.to_vector<float>(), ah = s.anomaly_height.to_vector<float>();
  const std::vector<int64_t> ap = s.anomaly_position.to_vector<int64_t>(), aw = s.anomaly_width.to_vector<int64_t>();
  double z2 = 0, power = 0;
  int64_t count = 0, anomalies = 0;
  for (int64_t i = 0; i < n; ++i) {
    CHECK(P[i] >= o.period_min);
    CHECK(P[i] < o.period_max);
    CHECK(phi[i] >= 0.0f);
    CHECK(phi[i] < 1.0f);
    CHECK(sigma[i] >= o.noise_min);
    CHECK(sigma[i] <= o.noise_max);
    bool ended = false;  // the anomalies fill the first slots
    for (int64_t j = 0; j < A; ++j) {
      const int64_t k = i * A + j;
      if (ap[k] < 0) {
        ended = true;
        CHECK((aw[k] == 0 && ah[k] == 0.0f));
        continue;
      }
      CHECK_FALSE(ended);
      ++anomalies;
      CHECK(ap[k] < T);
      CHECK((aw[k] >= 1 && aw[k] <= o.anomaly_width_max));
      CHECK((std::abs(ah[k]) >= o.anomaly_min && std::abs(ah[k]) <= o.anomaly_max));
    }
    for (int64_t t = 0; t < T; ++t) {
      double spikes = 0;
      for (int64_t j = 0; j < A; ++j)
        if (ap[i * A + j] >= 0 && ap[i * A + j] <= t && t < ap[i * A + j] + aw[i * A + j]) spikes += ah[i * A + j];
      const double noise = x[i * T + t] - c[i * T + t] - spikes;
      z2 += noise * noise / (sigma[i] * sigma[i]);
      power += c[i * T + t] * c[i * T + t];
      ++count;
    }
  }
  CHECK(std::abs(z2 / static_cast<double>(count) - 1.0) < 0.05);     // unit-variance noise scaled by sigma
  CHECK(std::abs(power / static_cast<double>(count) - 1.0) < 0.1);   // the clean pattern has unit RMS
  CHECK(std::abs(static_cast<double>(anomalies) / n - 1.5) < 0.4);    // 0..3 per signal, 1.5 on average
  CHECK(first_scored_position(o) == 24);
}

TEST_CASE("timeseries task: options that make no signal are refused, naming them") {
  Generator g(0);
  auto with = [&](auto change) {
    SeriesOptions o;
    change(o);
    return [o, &g] { generate_series(2, g, o); };
  };
  test::check_error(with([](SeriesOptions& o) { o.period_min = 1; }), {"period_min=1"});
  test::check_error(with([](SeriesOptions& o) { o.period_max = 10; }), {"period_max=10", "period_min=12"});
  test::check_error(with([](SeriesOptions& o) { o.noise_min = 0.5; }), {"noise_min=0.5"});
  test::check_error(with([](SeriesOptions& o) { o.harmonics = 0; }), {"harmonics"});
  test::check_error(with([](SeriesOptions& o) { o.anomaly_width_max = 0; }), {"anomaly_width_max"});
}

TEST_CASE("same-phase attention: all of it one period back scores 1, one step back 0, spread evenly the baseline") {
  const int64_t T = 40;
  const double P = 10;
  Tensor A = Tensor::zeros({1, 3, T, T});  // three heads
  float* a = A.data<float>();
  for (int64_t t = 0; t < T; ++t) {
    // Head 0: everything on the key one period before the predicted position t + 1.
    if (t + 1 - 10 >= 0) a[(0 * T + t) * T + t + 1 - 10] = 1.0f;
    else a[(0 * T + t) * T + t] = 1.0f;
    a[(1 * T + t) * T + (t > 0 ? t - 1 : 0)] = 1.0f;                           // head 1: the previous value
    for (int64_t j = 0; j <= t; ++j) a[(2 * T + t) * T + j] = 1.0f / static_cast<float>(t + 1);  // head 2: even
  }
  PhaseScore s = same_phase_attention(A, Tensor::from({10}, {1}), 1.0);
  REQUIRE(s.queries == T - 10);  // t + 1 >= P + window: t = 10 .. 39
  CHECK(s.head(0) == doctest::Approx(1.0));
  CHECK(s.head(1) == doctest::Approx(0.0));
  CHECK(s.head(2) == doctest::Approx(s.baseline()).epsilon(1e-6));
  CHECK(s.best() == doctest::Approx(1.0));
  CHECK(s.mean() == doctest::Approx((1.0 + s.baseline()) / 3).epsilon(1e-6));
  // The baseline by hand: query t sees keys 0..t; those within 1 of t + 1 - 10 k.
  double expect = 0;
  for (int64_t t = 10; t < T; ++t) {
    int64_t in = 0;
    for (int64_t j = 0; j <= t; ++j) {
      const int64_t lag = t + 1 - j;
      for (int64_t k = 1; k * P <= lag + 1; ++k) in += std::abs(static_cast<double>(lag) - k * P) <= 1.0;
    }
    expect += static_cast<double>(in) / static_cast<double>(t + 1);
  }
  CHECK(s.baseline() == doctest::Approx(expect / (T - 10)));
  test::check_error([&] { same_phase_attention(Tensor::zeros({1, 1, 4, 5}), Tensor::from({3}, {1}), 1); },
                    {"[N, H, T, T]", "[1, 1, 4, 5]"});
}

TEST_CASE("timeseries forecasters are causal: inputs after position t change no output up to t") {
  Generator g(3);
  AttentionForecaster attn(16, 2, 2, 7, &g);
  ConvForecaster cnn(8, 3, 7, &g);
  autograd::NoGradGuard ng;
  Tensor x = test::det_tensor({2, 40}, 1);
  std::vector<double> v = x.to_vector<double>();
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t t = 25; t < 40; ++t) v[static_cast<size_t>(i * 40 + t)] += 3.0;
  Tensor x2 = Tensor::from_f64(v, {2, 40}).to(DType::f32);
  for (nn::Module* m : {static_cast<nn::Module*>(&attn), static_cast<nn::Module*>(&cnn)}) {
    CAPTURE(m->type_name());
    Tensor y = m->forward(x), y2 = m->forward(x2);
    REQUIRE(y.shape() == Shape{2, 40});
    CHECK(test::max_diff(kernel::narrow(y, 1, 0, 25), kernel::narrow(y2, 1, 0, 25)) < 1e-5);
    CHECK(test::max_diff(kernel::narrow(y, 1, 25, 15), kernel::narrow(y2, 1, 25, 15)) > 1e-3);
  }
  // About the same size at the experiment's defaults.
  Generator h(0);
  const double pa = static_cast<double>(AttentionForecaster(32, 2, 1, 7, &h).num_parameters());
  const double pc = static_cast<double>(ConvForecaster(24, 4, 7, &h).num_parameters());
  CHECK(std::abs(pa / pc - 1.0) < 0.1);
}

TEST_CASE("timeseries: attention beats the CNN of its size and looks one period back (400 steps of 16 short signals)") {
  test::TempDir d("heed-learn-timeseries-");
  const std::string log = d.path + "/ts.h5";
  REQUIRE(run_timeseries({"--steps", "400", "--batch", "16", "--length", "64", "--period-min", "8", "--period-max",
                          "16", "--test", "128", "--eval-every", "1000", "--out", log},
                         {"heed", "run", "timeseries"}) == 0);
  const double attn = last_value(log, "attention/test_mse"), cnn = last_value(log, "cnn/test_mse");
  const double best = last_value(log, "attention/layer0/same_phase_best_head"),
               uniform = last_value(log, "attention/uniform");
  const double seasonal = h5::File(log, h5::File::Mode::read).read_tensor("reference/seasonal_mse").item();
  INFO("test mse: attention " << attn << ", cnn " << cnn << ", one period back " << seasonal
                              << "; same-phase attention in the best head " << best << ", uniform " << uniform);
  CHECK(attn < 0.8 * cnn);
  CHECK(attn < seasonal);  // better than copying the value one period back: it averages cycles
  CHECK(best > 3.0 * uniform);
}

TEST_CASE("run timeseries and run crossattn: bad options are refused naming them, before any file is written") {
  test::TempDir d("heed-bad-lectures-");
  const std::string log = d.path + "/runs/x.h5";
  struct Case {
    int (*run)(const std::vector<std::string>&, const std::vector<std::string>&);
    std::vector<std::string> args;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {run_timeseries, {"--period-max", "70"}, {"--period-max 70", "--length 128"}},
      {run_timeseries, {"--period-min", "20", "--period-max", "16"}, {"--period-max 16", "--period-min 20"}},
      {run_timeseries, {"--noise-max", "0.01"}, {"--noise-max 0.01", "--noise-min 0.05"}},
      {run_timeseries, {"--heads", "3"}, {"--dim 32", "--heads 3"}},
      // A kernel longer than the signal reads only padding (65536 ran for minutes at 4.6 GB before step 1).
      {run_timeseries, {"--kernel", "129"}, {"--kernel 129", "--length 128", "expected at most 128"}},
      {run_timeseries, {"--kernel", "65536", "--length", "64", "--period-max", "16"},
       {"--kernel 65536", "--length 64", "expected at most 64"}},
      // Harmonics beyond T/2 only alias (65536 spent minutes drawing sines before step 1).
      {run_timeseries, {"--harmonics", "65"}, {"--harmonics 65", "--length 128", "expected at most 64"}},
      // A window past --length - --period-max leaves signals with no query to
      // score (was: run, "no key lies within 1000 step(s) ...; widen
      // --window", the scores logged as 0).
      {run_timeseries,
       {"--window", "1000"},
       {"--window 1000", "--length 128", "--period-max 24", "expected at most 104"}},
      {run_timeseries, {"--window", "64.5", "--length", "96", "--period-min", "8", "--period-max", "32"},
       {"--window 64.5", "--length 96", "--period-max 32", "--period-min 8", "expected at most 64"}},
      {run_crossattn, {"--shapes", "6"}, {"--shapes 6", "--length 64", "no non-overlapping draw"}},
      {run_crossattn, {"--shapes", "8"}, {"--shapes 8", "--length 64", "do not fit"}},
      // Shapes that cannot fit, whatever the memory: said so, not blamed on
      // --batch (was "--batch 32 needs 23.4 GiB ...; expected a smaller --batch").
      {run_crossattn, {"--shapes", "1048576"}, {"--shapes 1048576", "--length 64", "do not fit in length 64"}},
      {run_crossattn, {"--heads", "5"}, {"--dim 64", "--heads 5"}},
      {run_crossattn, {"--shapes", "2", "--length", "16"}, {"--shapes 2", "--length 16", "2 shapes", "do not fit"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = c.args;
    args.insert(args.end(), {"--out", log});
    CAPTURE(args[0]);
    std::string msg;
    try {
      c.run(args, {"heed"});
    } catch (const UsageError& e) {
      msg = e.what();
    }
    INFO("message: " << msg);
    REQUIRE(!msg.empty());
    for (const auto& m : c.message) CHECK(msg.find(m) != std::string::npos);
    // The command named once, at the start (was "run crossattn: --shapes 2
    // with --length 16: crossattn: 2 shapes ...").
    CHECK(msg.rfind("run ", 0) == 0);
    CHECK(msg.find("crossattn:", msg.find(':') + 1) == std::string::npos);
    CHECK(msg.find("GiB") == std::string::npos);  // not blamed on the memory an option needs
    CHECK_FALSE(std::filesystem::exists(log));
  }
}

TEST_CASE("run timeseries: a window no key falls in is said so, not printed as a ratio to a zero baseline") {
  test::TempDir d("heed-window-");
  // Periods are real numbers: with --window 0 no key is exactly a whole
  // number of periods back, the uniform baseline is 0 and a ratio is 0/0.
  const test::Result r = test::heed_cli({"run", "timeseries", "--steps", "2", "--test", "4", "--window", "0",
                                          "--length", "32", "--period-min", "4", "--period-max", "8", "--out",
                                          d.path + "/w.h5"},
                                         d.path);
  INFO(r.out << r.err);
  CHECK(r.status == 0);
  CHECK(r.out.find("nan") == std::string::npos);
  CHECK(r.out.find("no key lies within 0 step(s) of a whole number of periods back") != std::string::npos);
  CHECK(last_value(d.path + "/w.h5", "attention/uniform") == 0.0);
}

TEST_CASE("options that need more memory than there is are refused up front with status 2, naming the option") {
  // The run went ahead: an allocation the size of the memory either failed
  // (status 1) or, within what the kernel lets a process map, was killed
  // part way (status 137, crossattn --test 67108864 at about 26 GB), its log
  // cut off. Now the bytes the options need are counted before anything is
  // allocated or written. Each of these needs terabytes (shapes: 465 GB).
  test::TempDir d("heed-mem-");
  struct Case {
    std::vector<std::string> args;
    std::string named;  // "--option value"
  };
  for (const Case& c :
       {Case{{"timeseries", "--test", "67108864", "--length", "1048576"}, "--test 67108864"},
        Case{{"timeseries", "--model", "attention", "--test", "4", "--batch", "4", "--length", "1048576"},
             "--length 1048576"},
        Case{{"crossattn", "--test", "67108864", "--length", "4096"}, "--test 67108864"},
        // A model's width whose weights alone do not fit, and signals whose
        // evaluation maps (128 test samples at a time) do not at --batch 1,
        // are blamed on the width and on --length, not on --batch.
        Case{{"crossattn", "--dim", "65536"}, "--dim 65536"},
        Case{{"crossattn", "--length", "4096", "--shapes", "20", "--heads", "64", "--layers", "8", "--batch", "1"},
             "--length 4096"},
        Case{{"timeseries", "--cnn-channels", "65536"}, "--cnn-channels 65536"},
        Case{{"shapes", "--train", "67108864", "--test", "67108864", "--positional"}, "--train 67108864"},
        Case{{"copy", "--batch", "1048576", "--length", "4096"}, "--batch 1048576"},
        Case{{"charlm", "--batch", "1048576", "--context", "4096"}, "--batch 1048576"}}) {
    CAPTURE(c.args);
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    for (const std::string& a : {std::string("--steps"), std::string("1"), std::string("--out"), d.path + "/r.h5"})
      args.push_back(a);
    if (c.args[0] == "shapes") args.erase(args.end() - 4, args.end() - 2);  // shapes counts epochs, not steps
    const test::Result r = test::heed_cli(args, d.path);
    INFO(r.out << r.err);
    CHECK(r.status == 2);
    CHECK(r.err.find("heed: run " + c.args[0] + ": " + c.named + " needs ") != std::string::npos);
    CHECK(r.err.find(" bytes) for ") != std::string::npos);
    CHECK(r.err.find("GiB of available memory (MemAvailable); expected a smaller --") != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(std::filesystem::is_empty(d.path));  // no log, no checkpoint, no directory
  }
}

TEST_CASE("run timeseries and run crossattn: a test set beyond the address-space limit is refused, naming --test") {
  // The memory there is counts what ulimit -v leaves too (status 2, before
  // anything is allocated); an allocation that fails anyway (the sanitized
  // build's allocator limit, which the count cannot know) is out of memory,
  // status 1, blamed on --test, not on --shapes and --length.
  test::TempDir d("heed-oom-");
  struct Case {
    std::string experiment, test;
    std::string named;
  };
  // 3.2 and 4.1 GB; their first allocations 360 MB and 1.3 GB.
  for (const Case& c : {Case{"timeseries", "2500000", "the test set (--test 2500000 signals of --length 128)"},
                        Case{"crossattn", "5000000", "the test set (--test 5000000 samples of --length 64)"}}) {
    CAPTURE(c.experiment);
    // AddressSanitizer reserves terabytes of shadow address space, so there
    // its own allocator is given a limit instead, of 300 MB per allocation.
#ifdef __SANITIZE_ADDRESS__
    const std::string limit =
        "ASAN_OPTIONS=\"$ASAN_OPTIONS:allocator_may_return_null=1:max_allocation_size_mb=300\"; export ASAN_OPTIONS; ";
#else
    const std::string limit = "ulimit -v 3000000; ";
#endif
    const test::Result r = test::run_process(
        {"/bin/sh", "-c", limit + "exec \"$0\" \"$@\"", HEED_CLI_PATH, "run", c.experiment, "--test", c.test,
         "--steps", "1", "--out", d.path + "/" + c.experiment + ".h5"},
        d.path);
    INFO(r.out << r.err);
#ifdef __SANITIZE_ADDRESS__
    CHECK(r.status == 1);
    CHECK(r.err.find("heed: run " + c.experiment + ": " + c.named + ": out of memory allocating") != std::string::npos);
#else
    CHECK(r.status == 2);
    CHECK(r.err.find("heed: run " + c.experiment + ": --test " + c.test + " needs ") != std::string::npos);
    CHECK(r.err.find("of address space left under ulimit -v; expected a smaller --test") != std::string::npos);
#endif
    CHECK(r.err.find("--shapes") == std::string::npos);
    // One line of heed's (AddressSanitizer's own warning, "==pid==WARNING: ...
    // failed to allocate", aside).
    int64_t lines = 0;
    std::istringstream err(r.err);
    for (std::string line; std::getline(err, line);) lines += line.rfind("==", 0) != 0;
    CHECK(lines == 1);
    CHECK_FALSE(std::filesystem::exists(d.path + "/" + c.experiment + ".h5"));
  }
}

TEST_CASE("tensor_memory: blocks of one size held at once count at their most; of sizes the cache cannot reuse, "
          "summed over moments") {
  // Two moments of 10 and 12 MB: a process whose allocator keeps freed
  // blocks for their own size holds both (the second's blocks are of
  // another size), else the larger.
  const double MB = 1 << 20;
  const std::vector<LiveBlocks> moments = {{{MB, 10}}, {{3 * MB, 4}}};
  CHECK(tensor_memory(moments) == (alloc::caching_enabled() ? 22 * MB : 12 * MB));
  // Blocks of the same size are reused: the most alive at once.
  CHECK(tensor_memory({{{MB, 10}}, {{MB, 4}, {2 * MB, 1}}}) == (alloc::caching_enabled() ? 12 * MB : 10 * MB));
  CHECK(tensor_memory({{{100, 1}}}) == 128);  // rounded up to the allocator's 64 bytes
}

TEST_CASE("run charlm and run copy: a --batch whose training step and evaluation pass the memory left is refused at "
          "once, naming it; one that fits runs") {
  // The estimates counted a fraction of what a run takes (charlm: no
  // attention maps, no feed-forward, no gradients; copy: no width), and
  // these runs were accepted, then died out of memory after half a minute,
  // a log written. copy's estimate is checked against measured peaks too:
  // a lower bound within a few tenths of them.
  CopyOptions o;
  o.batch = 131072;  // measured: 3.9 GB resident at its peak
  CHECK(copy_memory(o) < 3.9e9);
  CHECK(copy_memory(o) > (alloc::caching_enabled() ? 0.75 : 0.55) * 3.9e9);
  test::TempDir d("heed-ulimit-");
  const std::string p = d.path;
  {
    std::ofstream f(p + "/m1.txt");
    for (int i = 0; i < 2000; ++i) f << "In the beginning God created the heaven and the earth.\n";
  }
  struct Case {
    std::vector<std::string> args;
    int status;
  };
  const std::vector<Case> cases = {
      {{"copy", "--batch", "262144"}, 2},
      {{"charlm", "--text", p + "/m1.txt", "--context", "2048", "--batch", "64", "--eval-batches", "1", "--eval-every",
        "1"},
       2},
      {{"copy", "--batch", "2048"}, 0},
      {{"charlm", "--text", p + "/m1.txt", "--layers", "1", "--width", "16", "--heads", "2", "--context", "64",
        "--batch", "8", "--eval-batches", "1", "--eval-every", "1"},
       0},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    CAPTURE(c.args);
    const std::string out = p + "/run" + std::to_string(i) + ".h5";
    const std::string batch = *(std::find(c.args.begin(), c.args.end(), "--batch") + 1);
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    args.insert(args.end(), {"--steps", "1", "--out", out});
#ifdef __SANITIZE_ADDRESS__
    // AddressSanitizer reserves terabytes of shadow address space: no ulimit
    // -v, and the refusals are left to the estimates' checks above; the
    // sizes that fit still run.
    if (c.status != 0) continue;
    const test::Result r = test::heed_cli(args, p);
#else
    const test::Result r = test::heed_under_ulimit(args, p, 6000000);
#endif
    INFO(r.out << r.err);
    CHECK(r.status == c.status);
    if (c.status == 2) {
      CHECK(r.err.find("heed: run " + c.args[0] + ": --batch " + batch + " needs ") != std::string::npos);
      CHECK(r.err.find("of address space left under ulimit -v; expected a smaller --batch") != std::string::npos);
      CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
      CHECK_FALSE(std::filesystem::exists(out));
      CHECK(r.out.find("step 1") == std::string::npos);  // refused before the first step
    } else {
      CHECK(std::filesystem::exists(out));
    }
  }
}

TEST_CASE("cgroup_memory_left: the least a memory cgroup or one above it leaves, cgroup v2 and v1") {
  using experiments::cgroup_memory_left;
  test::TempDir d("heed-cgroup-");
  const auto write = [&](const std::string& rel, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(d.path + "/" + rel).parent_path());
    std::ofstream(d.path + "/" + rel) << text;
  };
  // v2: the job's own cgroup has no limit ("max"); the one above it 1 GiB,
  // 512 MiB of it used: 512 MiB left, from the parent's memory.max.
  write("proc2", "0::/a/b\n");
  write("v2/a/b/memory.max", "max\n");
  write("v2/a/b/memory.current", "1000\n");
  write("v2/a/memory.max", "1073741824\n");
  write("v2/a/memory.current", "536870912\n");
  write("v2/memory.max", "8589934592\n");  // a root's (none has one): larger, not the least
  std::string file;
  int64_t limit = 0;
  CHECK(cgroup_memory_left(d.path + "/proc2", d.path + "/v2", &file, &limit) == 536870912);
  CHECK(file == d.path + "/v2/a/memory.max");
  CHECK(limit == 1073741824);
  // The child's own limit leaves less: it counts.
  write("v2/a/b/memory.max", "2000\n");
  CHECK(cgroup_memory_left(d.path + "/proc2", d.path + "/v2", &file) == 1000);
  CHECK(file == d.path + "/v2/a/b/memory.max");
  // A number past int64 is no limit (it threw), one with a sign or a unit is none either.
  for (const char* bad : {"9999999999999999999", "-5", "2G"}) {
    write("v2/a/b/memory.max", std::string(bad) + "\n");
    CHECK(cgroup_memory_left(d.path + "/proc2", d.path + "/v2") == 536870912);
  }
  write("v2/a/b/memory.max", "2000\n");
  // Usage over the limit leaves nothing, not a negative number.
  write("v2/a/b/memory.current", "5000\n");
  CHECK(cgroup_memory_left(d.path + "/proc2", d.path + "/v2") == 0);
  // v1: the memory controller's hierarchy, among others; its "no limit" is
  // the largest multiple of the page size.
  write("proc1", "9:name=systemd:/\n4:cpu,memory:/job/x\n1:cpu:/\n0::/\n");
  write("v1/memory/job/x/memory.limit_in_bytes", "9223372036854771712\n");
  write("v1/memory/job/x/memory.usage_in_bytes", "100\n");
  write("v1/memory/job/memory.limit_in_bytes", "4096000\n");
  write("v1/memory/job/memory.usage_in_bytes", "96000\n");
  CHECK(cgroup_memory_left(d.path + "/proc1", d.path + "/v1", &file) == 4000000);
  CHECK(file == d.path + "/v1/memory/job/memory.limit_in_bytes");
  // No limit anywhere, no such files, no such cgroup file: unknown.
  write("proc3", "0::/\n");
  CHECK(cgroup_memory_left(d.path + "/proc3", d.path + "/none") == -1);
  CHECK(cgroup_memory_left(d.path + "/missing", d.path + "/v2") == -1);
  // A path outside the cgroup namespace ("/../x") reads nothing above root.
  write("proc4", "0::/../a\n");
  CHECK(cgroup_memory_left(d.path + "/proc4", d.path + "/v2/a/b") == -1);
}

TEST_CASE("memory_available: under mpirun, each process counts on its share of the machine's memory") {
  using experiments::memory_available;
  using experiments::processes_on_this_machine;
  const char* before = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const std::string saved = before ? before : "";
  const auto restore = [&] {
    if (before) ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", saved.c_str(), 1);
    else ::unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  };
  ::unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  CHECK(processes_on_this_machine() == 1);
  std::string alone_source;
  const int64_t alone = memory_available(&alone_source);
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  CHECK(processes_on_this_machine() == 4);
  std::string shared_source;
  const int64_t shared = memory_available(&shared_source);
  // Anything else reads as one process: no mpirun, or not its number.
  for (const char* bad : {"", "0", "1", "-4", "4x", "x", "99999999999999999999"}) {
    ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", bad, 1);
    CHECK_MESSAGE(processes_on_this_machine() == 1, bad);
  }
  restore();
  INFO(alone_source << " | " << shared_source);
  if (alone < 0 || alone_source.rfind("address space", 0) == 0) return;  // nothing shared to divide
  CHECK(shared_source.rfind(alone_source + ", this process's share of ", 0) == 0);
  CHECK(shared_source.find(" GiB among the 4 processes mpirun started on this machine") != std::string::npos);
  // A quarter, give or take what other processes took or gave back meanwhile.
  CHECK(std::abs(4 * static_cast<double>(shared) - static_cast<double>(alone)) < 0.1 * static_cast<double>(alone));
}

namespace {
// A run the memory checks refuse or let through.
struct MemoryCase {
  std::vector<std::string> args;  // after "run"
  std::string named;              // the option refused ("--batch 16384"), or "" for a run that fits
};

// Each case under ulimit -v 6000000 (one step, or one epoch for shapes; its
// log in p): a refusal is status 2 and one line naming the option, with
// nothing written; a run that fits ends with status 0 and its log.
void check_memory_cases(const std::vector<MemoryCase>& cases, const std::string& p) {
  for (size_t i = 0; i < cases.size(); ++i) {
    const MemoryCase& c = cases[i];
    CAPTURE(c.args);
    const std::string out = p + "/run" + std::to_string(i) + ".h5";
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    if (c.args[0] != "shapes") args.insert(args.end(), {"--steps", "1"});
    args.insert(args.end(), {"--out", out});
#ifdef __SANITIZE_ADDRESS__
    // AddressSanitizer reserves terabytes of shadow address space: no ulimit
    // -v, and the refusals are left to the estimates' checks above; the
    // sizes that fit still run.
    if (!c.named.empty()) continue;
    const test::Result r = test::heed_cli(args, p);
#else
    const test::Result r = test::heed_under_ulimit(args, p, 6000000);
#endif
    INFO(r.out << r.err);
    if (!c.named.empty()) {
      const std::string option = c.named.substr(0, c.named.find(' '));
      CHECK(r.status == 2);
      CHECK(r.err.find("heed: run " + c.args[0] + ": " + c.named + " needs ") != std::string::npos);
      CHECK(r.err.find("of address space left under ulimit -v; expected a smaller " + option + "\n") !=
            std::string::npos);
      CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
      CHECK(r.out.empty());  // refused before the data is drawn or a model built
      CHECK_FALSE(std::filesystem::exists(out));
    } else {
      CHECK(r.status == 0);
      CHECK(std::filesystem::exists(out));
    }
  }
}

// An estimate of a run's memory against the peak measured: between low and
// 1.3 times it.
void check_estimate(double low, double estimate, double measured) {
  CAPTURE(estimate);
  CAPTURE(measured);
  CHECK(estimate > low * measured);
  CHECK(estimate < 1.3 * measured);
}
}  // namespace

TEST_CASE("run crossattn, timeseries and shapes: a --batch whose training step and evaluation pass the memory left is "
          "refused at once, naming it; one that fits runs") {
  // Their --batch checks counted the data a step draws, not what the step
  // and the evaluation allocate: these runs were accepted, the log written,
  // then died out of memory (status 1, or killed by the kernel without a
  // limit). The estimates are checked against peaks
  // measured with /usr/bin/time -v (resident, the whole process, one step
  // and one evaluation): within -20% .. +30% of them with the allocator's
  // cache (without it, blocks freed are not held: less).
  const double low = alloc::caching_enabled() ? 0.8 : 0.5;
  auto near = [low](double estimate, double measured) { check_estimate(low, estimate, measured); };
  near(crossattn_memory(DescribedOptions(), 64, 2, 0, 2, 8192, 512, 128), 4889080 * 1024.0);
  near(timeseries_memory(SeriesOptions(), ForecasterSizes(), 4096, 512, 128), 2624128 * 1024.0);
  near(shapes_memory(1, 100, true, true, 8000, 8000, 8000), 2709456 * 1024.0);

  test::TempDir d("heed-ulimit-");
  const std::string p = d.path;
  const std::vector<MemoryCase> cases = {
      {{"crossattn", "--batch", "16384"}, "--batch 16384"},
      {{"timeseries", "--batch", "16384"}, "--batch 16384"},
      {{"shapes", "--train", "32768", "--test", "100", "--batch", "32768", "--epochs", "1"}, "--batch 32768"},
      {{"crossattn", "--batch", "64", "--test", "128"}, ""},
      {{"timeseries", "--batch", "64", "--test", "128"}, ""},
      {{"shapes", "--train", "200", "--test", "100", "--batch", "100", "--epochs", "1"}, ""},
      // No batch holds more than its set: a --batch beyond both sets runs
      // (it was refused: "--batch 100000 needs 31.4 GiB").
      {{"shapes", "--train", "10", "--test", "15", "--batch", "100000", "--epochs", "1"}, ""},
  };
  check_memory_cases(cases, p);
}

TEST_CASE("run scaling: a --batch, --queries, --keys, --dk-max or --dim whose memory is not there is refused at once, "
          "naming it; one that fits runs") {
  // scaling had no memory check: these runs wrote their log, then died out
  // of memory in part 1 or in the first step (status 1, or killed by the
  // kernel without a limit). The estimate is checked against peaks measured
  // with /usr/bin/time -v (resident, the whole process, one step). Without
  // the allocator's cache, part 1's earlier d_k are not held: about half.
  const double low = alloc::caching_enabled() ? 0.8 : 0.4;
  auto near = [low](double estimate, double measured) { check_estimate(low, estimate, measured); };
  CopyOptions scaling_copy;
  scaling_copy.dim = 256;
  scaling_copy.batch = 16384;
  near(scaling_memory(1024, 256, 64, 3, scaling_copy), 3549820 * 1024.0);
  scaling_copy.batch = 8;  // part 1 at --dk-max 65536: every d_k's queries and keys held
  near(scaling_memory(65536, 2048, 64, 1, scaling_copy), 2154020 * 1024.0);

  test::TempDir d("heed-ulimit-");
  const std::string p = d.path;
  const std::vector<MemoryCase> cases = {
      {{"scaling", "--batch", "65536"}, "--batch 65536"},
      {{"scaling", "--queries", "8192", "--keys", "16384"}, "--keys 16384"},
      {{"scaling", "--queries", "65536", "--dk-max", "65536"}, "--dk-max 65536"},
      {{"scaling", "--dim", "16384"}, "--dim 16384"},
      {{"scaling", "--batch", "64", "--seeds", "1", "--dk-max", "64"}, ""},
  };
  check_memory_cases(cases, p);
}

namespace {

// Runs heed under `ulimit -v kib` (no limit in the sanitized build, whose
// shadow memory takes terabytes of address space).
test::Result heed_limited(const std::vector<std::string>& args, const std::string& dir, int64_t kib) {
#ifdef __SANITIZE_ADDRESS__
  (void)kib;
  return test::heed_cli(args, dir);
#else
  std::vector<std::string> argv = {"/bin/sh", "-c", "ulimit -v " + std::to_string(kib) + "; exec \"$0\" \"$@\"",
                                   HEED_CLI_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  return test::run_process(argv, dir);
#endif
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("run sine: --points or --hidden whose memory is not there is refused at once, naming it, the log left as "
          "it was") {
  // sine had no memory check: --points 67108864 (the largest --help offers)
  // under ulimit -v 4000000 printed "logging to S.h5", then "out of memory
  // allocating 8589934592 bytes" (status 1), an earlier run's S.h5 replaced
  // by an empty log. The estimate is checked against peaks measured with
  // /usr/bin/time -v (resident, the whole process, --steps 3): a lower bound.
  auto near = [](double estimate, double measured) {
    CAPTURE(estimate);
    CAPTURE(measured);
    CHECK(estimate > 0.9 * measured);
    CHECK(estimate < measured);
  };
  near(sine_memory(1048576, 32), 579608 * 1024.0);
  near(sine_memory(4194304, 32), 2237552 * 1024.0);
  near(sine_memory(2097152, 128), 4279776 * 1024.0);
  // Shared out over processes, each holds its share of the activations.
  CHECK(sine_memory(4194304, 32, 2) < 0.6 * sine_memory(4194304, 32));

  test::TempDir d("heed-ulimit-");
  const std::string log = d.path + "/S.h5";
  const test::Result good = test::heed_cli({"run", "sine", "--steps", "20", "--out", log}, d.path);
  INFO(good.out << good.err);
  REQUIRE(std::filesystem::exists(log));
  const std::string before = file_bytes(log);
  struct Case {
    std::vector<std::string> args;
    std::string named;
    bool huge;  // beyond any machine's memory (4 TiB)
  };
  for (const Case& c : {Case{{"--points", "67108864"}, "--points 67108864", false},
                        Case{{"--hidden", "65536"}, "--hidden 65536", false},
                        Case{{"--points", "67108864", "--hidden", "4096"}, "--points 67108864", true}}) {
    CAPTURE(c.args);
    std::vector<std::string> args = {"run", "sine"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    args.insert(args.end(), {"--steps", "1", "--out", log});
#ifdef __SANITIZE_ADDRESS__
    if (!c.huge) continue;  // no ulimit -v there
#endif
    const test::Result r = heed_limited(args, d.path, 4000000);
    INFO(r.out << r.err);
    const std::string option = c.named.substr(0, c.named.find(' '));
    CHECK(r.status == 2);
    CHECK(r.err.rfind("heed: run sine: " + c.named + " needs ", 0) == 0);
    CHECK(r.err.find("; expected a smaller " + option + "\n") != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.out.empty());  // refused before "logging to ..."
    CHECK(file_bytes(log) == before);
  }
}

TEST_CASE("run copy: memory that --dim or --vocab makes too much is blamed on it, not on --batch; the estimate is "
          "within a tenth of the peaks measured") {
  // copy named --batch whatever the cause: "--batch 1 needs 288.1 GiB ...;
  // expected a smaller --batch" for --dim 65536 --vocab 65536. And its
  // evaluation counted 5 blocks of n x D activations where the unfused
  // attention holds 7: 16-19% under the peaks measured with /usr/bin/time
  // -v (resident, the whole process, --steps 1).
  auto near = [](int64_t dim, int64_t batch, double measured) {
    CopyOptions o;
    o.dim = dim;
    o.batch = batch;
    CAPTURE(dim);
    CAPTURE(batch);
    CHECK(copy_memory(o) > (alloc::caching_enabled() ? 0.9 : 0.6) * measured);
    CHECK(copy_memory(o) < measured);
  };
  near(256, 4096, 906004 * 1024.0);
  near(256, 16384, 3509348 * 1024.0);
  near(512, 4096, 1785864 * 1024.0);
  near(128, 16384, 1798356 * 1024.0);

  test::TempDir d("heed-ulimit-");
  struct Case {
    std::vector<std::string> args;
    std::string named;
    bool huge;  // beyond any machine's memory (384 GiB of weights and moments)
  };
  for (const Case& c : {Case{{"--dim", "65536", "--vocab", "65536", "--batch", "1"}, "--dim 65536", true},
                        Case{{"--dim", "4096", "--vocab", "65536", "--batch", "1"}, "--vocab 65536", false},
                        Case{{"--dim", "256", "--batch", "65536"}, "--batch 65536", false}}) {
    CAPTURE(c.args);
#ifdef __SANITIZE_ADDRESS__
    if (!c.huge) continue;  // no ulimit -v there
#endif
    const std::string out = d.path + "/c.h5";
    std::vector<std::string> args = {"run", "copy"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    args.insert(args.end(), {"--steps", "1", "--out", out});
    const test::Result r = heed_limited(args, d.path, 6000000);
    INFO(r.out << r.err);
    const std::string option = c.named.substr(0, c.named.find(' '));
    CHECK(r.status == 2);
    CHECK(r.err.rfind("heed: run copy: " + c.named + " needs ", 0) == 0);
    CHECK(r.err.find("; expected a smaller " + option + "\n") != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.out.empty());
    CHECK_FALSE(std::filesystem::exists(out));
  }
}

TEST_CASE("run scaling: a --dk-max that is not a power of two is refused, naming the powers of two around it") {
  // --dk-max 100 ran d_k = 4 .. 64 and logged config.dk-max 100.
  test::TempDir d("heed-dk-");
  struct Case {
    std::string dk, expected;
  };
  for (const Case& c : {Case{"100", "expected 64 or 128"}, Case{"5", "expected 4 or 8"},
                        Case{"65535", "expected 32768 or 65536"}}) {
    CAPTURE(c.dk);
    const test::Result r =
        test::heed_cli({"run", "scaling", "--dk-max", c.dk, "--steps", "1", "--out", d.path + "/s.h5"}, d.path);
    INFO(r.out << r.err);
    CHECK(r.status == 2);
    CHECK(r.err == "heed: run scaling: --dk-max " + c.dk +
                       " is not a power of two (part 1 runs d_k = 4, 8, 16, .. --dk-max); " + c.expected + "\n");
    CHECK(std::filesystem::is_empty(d.path));
  }
  // A power of two runs to it.
  const test::Result r = test::heed_cli({"run", "scaling", "--dk-max", "8", "--queries", "4", "--keys", "4", "--seeds",
                                         "1", "--dim", "8", "--steps", "1", "--out", d.path + "/s.h5"},
                                        d.path);
  INFO(r.out << r.err);
  CHECK(r.status == 0);
}
