// tests/experiments/test_inspect.cpp: `heed inspect` summarises run logs and
// checkpoints, works while the writer runs, and refuses bad files by name.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/safetensors.h"
#include "data/args.h"
#include "data/checkpoint.h"
#include "data/file_damage.h"
#include "data/h5.h"
#include "data/runlog.h"
#include "data/unreadable.h"
#include "experiments/inspect.h"
#include "experiments/plot.h"
#include "spawn.h"
#include "test_util.h"

using namespace heed;
using test::has;
using test::temp_path;

namespace {

// Whether some line of text reads `words` once runs of spaces (the column
// padding) are collapsed to one: has_line(s, "cnn/train_loss 5 1..5 4").
bool has_line(const std::string& text, const std::string& words) {
  size_t at = 0;
  while (at < text.size()) {
    size_t nl = text.find('\n', at);
    std::string line = text.substr(at, nl == std::string::npos ? std::string::npos : nl - at), collapsed;
    for (char c : line)
      if (c != ' ' || (!collapsed.empty() && collapsed.back() != ' ')) collapsed += c;
    while (!collapsed.empty() && collapsed.back() == ' ') collapsed.pop_back();
    if (collapsed == words) return true;
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  return false;
}

// The message of the heed::Error that inspect_file throws ("" if none).
std::string inspect_error(const std::string& path) {
  try {
    experiments::inspect_file(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The message of the heed::Error that plot_log throws ("" if none).
std::string plot_error(const std::string& path, const std::string& out_dir) {
  try {
    experiments::plot_log(path, out_dir, false);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A small log in the shapes experiment's layout.
void write_small_log(const std::string& path) {
  RunLog log = RunLog::create(path);
  log.set_attr("experiment", std::string("shapes"));
  log.set_attr("command_line", std::string("heed run shapes --epochs 2"));
  log.set_attr("threads", int64_t{2});
  log.set_attr("config.epochs", std::string("2"));
  log.set_attr("config.model", std::string("cnn"));
  log.declare_scalar("cnn/train_loss");
  log.declare_scalar("cnn/test_mse");
  log.declare_series("cnn/output", {3, 1, 10});
  log.write_tensor("samples/input", Tensor::zeros({3, 1, 10}));
  log.write_tensor("models/cnn/nb_parameters", Tensor::scalar(62337.0, DType::i64));
  log.set_attr("summary", std::string("Sequential(\n  (0): Conv1d\n)"), "models/cnn");
  log.begin();
  const double losses[] = {4.0, 3.0, 1.5, 2.0, 2.5};
  for (int64_t s = 1; s <= 5; ++s) log.scalar("cnn/train_loss", s, losses[s - 1]);
  log.scalar("cnn/test_mse", 5, 2.25);
  log.series("cnn/output", 3, Tensor::zeros({3, 1, 10}));
  log.series("cnn/output", 5, Tensor::zeros({3, 1, 10}));
  log.close();
}

}  // namespace

TEST_CASE("inspect: a run log shows its experiment, config, metrics with their minimum, series and datasets") {
  std::string path = temp_path("log.h5");
  write_small_log(path);
  std::string s = experiments::inspect_file(path);
  INFO(s);
  CHECK(has(s, path + ": heed run log, format 1"));
  CHECK(has(s, "experiment: shapes"));
  CHECK(has_line(s, "command_line heed run shapes --epochs 2"));
  CHECK(has_line(s, "threads 2"));
  CHECK(has(s, "\nconfig:\n"));
  CHECK(has_line(s, "epochs 2"));
  CHECK(has_line(s, "model cnn"));
  // name, rows, steps, first, last, min, step of the min
  CHECK(has_line(s, "cnn/train_loss 5 1..5 4 2.5 1.5 3"));
  CHECK(has_line(s, "cnn/test_mse 1 5..5 2.25 2.25 2.25 5"));
  // name, rows, item shape, steps
  CHECK(has_line(s, "cnn/output 2 [3, 1, 10] 3..5"));
  // path, shape, dtype, value (small tensors)
  CHECK(has_line(s, "models/cnn/nb_parameters [] int64 62337"));
  CHECK(has_line(s, "samples/input [3, 1, 10] float32"));
  CHECK(has_line(s, "models/cnn @summary: (3 lines; --full prints them)"));
  CHECK_FALSE(has(s, "columns"));  // the metrics' own attribute is not repeated

  std::string full = experiments::inspect_file(path, {.full = true});
  CHECK(has(full, "models/cnn @summary:\n      Sequential(\n        (0): Conv1d\n      )\n"));
}

TEST_CASE("inspect: a checkpoint's named parameters are listed with shapes, counts and totals") {
  std::string path = temp_path("ckpt.h5");
  {
    h5::File f(path, h5::File::Mode::create);
    f.set_attr("/", "heed_checkpoint_format", int64_t{1});
    f.set_attr("/", "experiment", std::string("shapes"));
    f.set_attr("/", "config.lr", std::string("0.001"));
    f.set_attr("/", "counter.step", int64_t{250});
    // Natural order: 2.weight before 10.weight.
    f.write_tensor("params/10.weight", Tensor::zeros({1, 64, 5}));
    f.write_tensor("params/2.weight", Tensor::zeros({64, 1, 5}));
    f.write_tensor("params/2.bias", Tensor::zeros({64}));
    f.write_tensor("optim/2.weight/exp_avg", Tensor::zeros({64, 1, 5}));
    f.write_tensor("optim/2.weight/exp_avg_sq", Tensor::zeros({64, 1, 5}));
    f.write_tensor("optim/2.bias/exp_avg", Tensor::zeros({64}));
    f.write_tensor("optim/2.bias/exp_avg_sq", Tensor::zeros({64}));
    f.write_tensor("optim/step", Tensor::scalar(250.0, DType::i64));
  }
  std::string s = experiments::inspect_file(path);
  INFO(s);
  CHECK(has(s, ": heed checkpoint, format 1"));
  CHECK(has(s, "config:\n  lr  0.001\n"));
  CHECK(has(s, "counters:\n  step  250\n"));
  CHECK(has_line(s, "parameters in params: 3 tensors, 704 values"));
  CHECK(has_line(s, "2.bias [64] 64"));
  CHECK(has_line(s, "2.weight [64, 1, 5] 320"));
  CHECK(has_line(s, "10.weight [1, 64, 5] 320"));
  CHECK(s.find("  2.weight ") < s.find("  10.weight "));  // natural order
  CHECK(has_line(s, "per-parameter state in optim: 2 parameters x {exp_avg, exp_avg_sq}, 768 values"));
  CHECK(has_line(s, "optim/step [] int64 250"));
}

TEST_CASE("inspect: a log is readable while its writer runs and after the writer is killed") {
  std::string path = temp_path("live.h5");
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    RunLog log = RunLog::create(path);
    log.set_attr("experiment", std::string("live"));
    log.declare_scalar("loss");
    log.begin();
    for (int64_t s = 1; s <= 7; ++s) log.scalar("loss", s, 1.0 / static_cast<double>(s));
    log.flush();
    if (write(ready[1], "x", 1) != 1) _exit(3);
    pause();  // never closes the file
    _exit(0);
  }
  char c = 0;
  REQUIRE(read(ready[0], &c, 1) == 1);
  std::string live = experiments::inspect_file(path);
  CHECK(has(live, "experiment: live"));
  CHECK(has_line(live, "loss 7 1..7 1 0.142857 0.142857 7"));
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(has_line(experiments::inspect_file(path), "loss 7 1..7 1 0.142857 0.142857 7"));
}

TEST_CASE("inspect: a missing, non-HDF5 or truncated file is refused with a message naming it") {
  std::string missing = temp_path("missing.h5");
  CHECK(has(inspect_error(missing), "'" + missing + "' does not exist"));

  std::string text = temp_path("notes.txt");
  std::ofstream(text) << "not a log\n";
  CHECK(has(inspect_error(text), "'" + text + "' is not an HDF5 file"));

  // A run killed as it started (its log's file made, nothing in it yet):
  // said as that, not as a file that is not HDF5.
  std::string empty = temp_path("started.h5");
  std::ofstream(empty).close();
  const std::string e0 = inspect_error(empty);
  CHECK(has(e0, "'" + empty + "' is empty (0 bytes)"));
  CHECK(has(e0, "killed as it started"));
  CHECK_FALSE(has(e0, "not an HDF5 file"));

  std::string whole = temp_path("whole.h5"), cut = temp_path("cut.h5");
  write_small_log(whole);
  std::filesystem::copy_file(whole, cut, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(cut, std::filesystem::file_size(whole) / 2);
  std::string e = inspect_error(cut);
  CHECK(has(e, "'" + cut + "'"));
  CHECK(has(e, "truncated"));
}

TEST_CASE("inspect: a safetensors file is summarised from its header; a damaged one, or neither kind, is named") {
  // `heed inspect` of heed export's output said "not an HDF5 file".
  const std::string st = temp_path("w.safetensors");
  safetensors::save(st,
                    {{"l1.weight", Tensor::zeros({2, 3})},
                     {"l1.bias", Tensor::zeros({3}, DType::f64)},
                     {"ids", Tensor::zeros({5}, DType::i64)}},
                    {{"heed_experiment", "sine"}});
  REQUIRE(experiments::looks_like_safetensors(st));
  const std::string out = experiments::inspect_safetensors(st);
  INFO(out);
  CHECK(has(out, st + ": safetensors file, 3 tensors, 14 values,"));
  CHECK(has_line(out, "heed_experiment sine"));
  CHECK(has_line(out, "l1.weight F32 [2, 3] 6"));
  CHECK(has_line(out, "l1.bias F64 [3] 3"));
  CHECK(has_line(out, "ids I64 [5] 5"));
  // Found by its header whatever its name; a log or a text file is not one.
  const std::string renamed = temp_path("weights.bin");
  std::filesystem::copy_file(st, renamed, std::filesystem::copy_options::overwrite_existing);
  CHECK(experiments::looks_like_safetensors(renamed));
  const std::string log = temp_path("st_log.h5"), text = temp_path("st_notes.txt");
  write_small_log(log);
  std::ofstream(text) << "not a log, not weights\n";
  CHECK_FALSE(experiments::looks_like_safetensors(log));
  CHECK_FALSE(experiments::looks_like_safetensors(text));
  // Truncated: the header's own check, named.
  const std::string cut = temp_path("cut.safetensors");
  std::filesystem::copy_file(st, cut, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(cut, 40);
  REQUIRE(experiments::looks_like_safetensors(cut));  // by its name
  std::string e;
  try {
    experiments::inspect_safetensors(cut);
  } catch (const Error& err) {
    e = err.what();
  }
  CHECK(has(e, "inspect: '" + cut + "': the header length"));
  CHECK(has(e, "runs past the end of the file (40 bytes)"));
  // The command: a text file is neither kind, and says so.
  std::string e2;
  try {
    experiments::run_inspect({text});
  } catch (const Error& err) {
    e2 = err.what();
  }
  CHECK(has(e2, "inspect: '" + text + "' is neither an HDF5 file (no HDF5 signature: not a heed run log or checkpoint) "
                "nor a safetensors file ("));
}

TEST_CASE("inspect: a checkpoint with a flipped byte in one tensor's data names that tensor (CRC mismatch), exit 1") {
  test::DamageDir d("heed-inspect-crc-");
  std::string path = d.file("sine.ckpt.h5");
  Checkpoint ck = test::small_checkpoint();
  save_checkpoint(path, ck);
  CHECK(inspect_error(path).empty());  // intact: every CRC holds
  test::flip_byte_in(path, test::tensor_bytes(ck.tensors.at("model/l1.weight")), 5);
  CHECK(has(inspect_error(path), "inspect: checkpoint '" + path + "': tensor 'model/l1.weight' is corrupt (CRC mismatch)"));
  test::Result r = test::run_process({HEED_CLI_PATH, "inspect", path}, d.path);
  INFO(r.err);
  CHECK(r.status == 1);
  CHECK(r.err.rfind("heed: inspect: checkpoint '" + path + "': tensor 'model/l1.weight' is corrupt (CRC mismatch)", 0) == 0);
}

TEST_CASE("inspect: a checkpoint with a flipped byte in HDF5's structure is damaged, naming it") {
  test::DamageDir d("heed-inspect-damaged-");
  std::string path = d.file("sine.ckpt.h5");
  for (const std::string& name : {std::string("model"), std::string("l1.bias")}) {
    CAPTURE(name);
    save_checkpoint(path, test::small_checkpoint());
    test::flip_byte_in(path, name, 1);
    CHECK(has(inspect_error(path), "inspect: checkpoint '" + path + "' is damaged: not a readable heed checkpoint"));
  }
}

TEST_CASE("inspect: a checkpoint whose crc32 attribute is not an integer is a heed::Error naming the tensor") {
  test::DamageDir d("heed-inspect-crctype-");
  std::string path = d.file("sine.ckpt.h5");
  save_checkpoint(path, test::small_checkpoint());
  h5::File(path, h5::File::Mode::append).set_attr("tensors/model/l1.bias", "crc32", std::string("abc"));
  CHECK(has(inspect_error(path), "inspect: checkpoint '" + path +
                                     "': tensor 'model/l1.bias': its crc32 attribute is text (\"abc\"), expected an "
                                     "integer"));
}

TEST_CASE("inspect: a text attribute holding NUL bytes is shown whole, each NUL as \\0") {
  test::DamageDir d("heed-inspect-nul-");
  std::string path = d.file("lm.h5");
  {
    RunLog log = RunLog::create(path);
    log.set_attr("experiment", std::string("charlm"));
    log.set_attr("vocabulary", std::string("\0 ab\0", 5));
    log.begin();
  }
  std::string s = experiments::inspect_file(path);
  INFO(s);
  CHECK(has_line(s, "vocabulary \\0 ab\\0"));
}

TEST_CASE("inspect: a 300-character file name or a symlink loop is a heed::Error naming the path") {
  test::DamageDir d("heed-inspect-paths-");
  const std::string longname = d.long_name(), loop = d.symlink_loop();
  CHECK(has(inspect_error(longname), "inspect: '" + longname + "' cannot be read: File name too long"));
  CHECK(has(inspect_error(loop), "inspect: '" + loop + "' cannot be read: Too many levels of symbolic links"));
}

TEST_CASE("inspect and plot: a file without read permission is named with the operating system's reason") {
  test::DamageDir d("heed-inspect-perm-");
  const std::string log = d.file("x.h5"), ck = d.file("x.ckpt.h5");
  write_small_log(log);
  save_checkpoint(ck, test::small_checkpoint());
  test::NoFileOverride as_a_user;
  for (const std::string& p : {log, ck}) {
    CAPTURE(p);
    test::make_unreadable(p);
    CHECK(inspect_error(p) == "inspect: cannot open '" + p + "': Permission denied");
    CHECK(plot_error(p, d.file("plots")) == "plot: cannot open '" + p + "': Permission denied");
  }
  CHECK(!std::filesystem::exists(d.file("plots")));
}

TEST_CASE("plot: a symlink loop is named as one, not as a missing file") {
  test::DamageDir d("heed-plot-loop-");
  const std::string loop = d.symlink_loop();
  CHECK(plot_error(loop, d.file("plots")) == "plot: cannot open '" + loop + "': Too many levels of symbolic links");
  CHECK(plot_error(d.file("none.h5"), d.file("plots")) == "plot: '" + d.file("none.h5") + "' does not exist");
}

TEST_CASE("plot: -o or --out without its value says DIR, as the help does") {
  test::DamageDir d("heed-plot-out-");
  const std::string log = d.file("x.h5");
  write_small_log(log);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{log, "-o"}, {log, "--out"}, {"-o", "--out", log}}) {
    CAPTURE(args.back());
    std::string msg;
    try {
      experiments::run_plot(args);
    } catch (const UsageError& e) {
      msg = e.what();
    }
    INFO(msg);
    CHECK(has(msg, "plot: --out expects a value (DIR"));
    CHECK(!has(msg, "TEXT"));
  }
  test::Result r = test::run_process({HEED_CLI_PATH, "plot", log, "-o"}, d.path);
  INFO(r.err);
  CHECK(r.status == 2);
  CHECK(has(r.err, "--out expects a value (DIR"));
  CHECK(has(test::run_process({HEED_CLI_PATH, "plot", "--help"}, d.path).out, "-o, --out DIR"));
  CHECK(!std::filesystem::exists(d.file("x_plots")));
}

TEST_CASE("inspect: a checkpoint's checksums are counted in one line (--full lists them), its damage worded for a checkpoint") {
  test::DamageDir d("heed-inspect-crcs-");
  const std::string path = d.file("sine.ckpt.h5");
  Checkpoint ck = test::small_checkpoint();
  ck.tensors["model/l2.weight"] = Tensor::zeros({3, 8});
  save_checkpoint(path, ck);
  const std::string n = std::to_string(ck.tensors.size());
  auto count = [](const std::string& s, const std::string& what) {
    size_t k = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++k;
    return k;
  };
  const std::string s = experiments::inspect_file(path);
  INFO(s);
  CHECK(count(s, "@crc32") == 0);
  CHECK(has_line(s, "checksums: " + n +
                        " tensors, each matching the CRC-32 stored with it (crc32 attributes; --full lists them)"));
  experiments::InspectOptions full;
  full.full = true;
  const std::string all = experiments::inspect_file(path, full);
  INFO(all);
  CHECK(count(all, "@crc32: ") == ck.tensors.size());
  CHECK(has(all, "  tensors/model/l2.weight @crc32: "));
  CHECK(has_line(all, "checksums: " + n + " tensors, each matching the CRC-32 stored with it (crc32 attributes, listed below)"));
  // A run log keeps every attribute as it was: no checksum line.
  const std::string log = d.file("x.h5");
  write_small_log(log);
  CHECK(!has(experiments::inspect_file(log), "checksums:"));

  // Cut short, the file opens in no HDF5 reader: worded for a checkpoint,
  // not as a log open in a writer.
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 3);
  const std::string e = inspect_error(path);
  CHECK(e == "inspect: checkpoint '" + path +
                 "' is damaged: not a readable heed checkpoint (truncated, or HDF5's structure is damaged)");
}

namespace {
// Peak resident memory (kB) of `heed inspect path`, and its output.
std::pair<long, test::Result> inspect_peak_kb(const std::string& path, const std::string& dir) {
  test::Result r;
  const pid_t pid = test::start({HEED_CLI_PATH, "inspect", path}, dir + "/.out", dir + "/.err");
  int status = 0;
  struct rusage use {};
  REQUIRE(wait4(pid, &status, 0, &use) == pid);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = test::slurp(dir + "/.out");
  r.err = test::slurp(dir + "/.err");
  return {use.ru_maxrss, r};
}
}  // namespace

TEST_CASE("inspect: datasets of any size are read in blocks, in bounded memory, with the same summary") {
  // It read every dataset whole (the check of every value, a metric's rows,
  // a checkpoint's tensors for their CRCs): a log of several GB needed as
  // much memory. Here: 128 MB datasets, inspected in well under that.
  test::TempDir d("heed-inspect-big-");
#ifdef __SANITIZE_ADDRESS__
  // Freed blocks would wait in AddressSanitizer's quarantine (256 MB).
  const char* asan_was = std::getenv("ASAN_OPTIONS");
  const std::string asan_before = asan_was ? asan_was : "";
  setenv("ASAN_OPTIONS", (asan_before + ":quarantine_size_mb=0").c_str(), 1);
#endif
  const int64_t rows = 2'000'000;  // 48 MB of metric rows: three blocks
  const std::string log = d.path + "/big.h5", ck = d.path + "/big.ckpt.h5", small = d.path + "/small.h5";
  {
    h5::File f(log, h5::File::Mode::create);
    f.set_attr("/", "heed_log_format", int64_t{1});
    f.set_attr("/", "experiment", std::string("copy"));
    Tensor m = Tensor::empty({rows, 3}, DType::f64);
    double* p = m.data<double>();
    for (int64_t i = 0; i < rows; ++i) {
      p[3 * i] = static_cast<double>(i);
      // Smallest at row 1'500'001 (in the third block), a NaN before it.
      p[3 * i + 1] = i == 1'500'001 ? -1.0 : i == 1'000'000 ? NAN : 1.0 + static_cast<double>(i % 1000);
      p[3 * i + 2] = 0.5 * static_cast<double>(i);
    }
    f.write_tensor("metrics/loss", m);
    f.write_tensor("samples/big", Tensor::zeros({4096, 8192}));  // 128 MB
    f.write_tensor("samples/wide", Tensor::zeros({2, 10'000'000}));  // rows of 40 MB each
  }
  {
    Checkpoint c;
    c.experiment = "copy";
    c.counters["step"] = 1;
    c.tensors["model/big"] = randn({4096, 8192});  // 128 MB
    save_checkpoint(ck, c);
  }
  {
    h5::File f(small, h5::File::Mode::create);
    f.set_attr("/", "heed_log_format", int64_t{1});
    f.write_tensor("samples/small", Tensor::zeros({4}));
  }
  const std::string s = experiments::inspect_file(log);
  INFO(s);
  CHECK(has_line(s, "loss 2000000 0..2e+06 1 1000 -1 1.5e+06"));  // first, last, min and its step across blocks
  CHECK(has(s, "last row 999999.5 s after the start"));
  CHECK(has_line(s, "samples/big [4096, 8192]"));
  const auto [base, rs] = inspect_peak_kb(small, d.path);
  REQUIRE(rs.status == 0);
  for (const std::string& path : {log, ck}) {
    CAPTURE(path);
    const auto [peak, r] = inspect_peak_kb(path, d.path);
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(r.out == experiments::inspect_file(path));
    // Blocks of 16 MB: far below one 128 MB dataset.
    CHECK(peak - base < 80 * 1024);
  }
#ifdef __SANITIZE_ADDRESS__
  setenv("ASAN_OPTIONS", asan_before.c_str(), 1);
  if (!asan_was) unsetenv("ASAN_OPTIONS");
#endif
}
