// tests/data/test_runlog.cpp: the HDF5 run log: schema, appends, reading while
// the writer runs, surviving kill -9, resuming.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "data/h5.h"
#include "data/runlog.h"
#include "test_util.h"

using namespace heed;
using test::temp_path;

namespace {

int64_t rows(const h5::File& f, const std::string& ds) { return f.dataset_shape(ds)[0]; }

}  // namespace

TEST_CASE("runlog: metrics, series, attributes and fixed datasets read back") {
  std::string path = temp_path("basic.h5");
  {
    RunLog log = RunLog::create(path);
    log.set_attr("experiment", std::string("unit"));
    log.set_attr("seed", int64_t{7});
    log.set_attr("lr", 0.001);
    log.declare_scalar("model/train_loss");
    log.declare_series("attention/maps", {2, 3});
    log.write_tensor("samples/input", Tensor::from({1, 2, 3}, {3}));
    log.begin();
    for (int64_t s = 1; s <= 5; ++s) log.scalar("model/train_loss", s, 1.0 / static_cast<double>(s));
    log.series("attention/maps", 5, Tensor::from({1, 2, 3, 4, 5, 6}, {2, 3}));
    log.close();
  }
  h5::File f(path, h5::File::Mode::read);
  CHECK(h5::attr_str(f.get_attr("/", "experiment")) == "unit");
  CHECK(std::get<int64_t>(f.get_attr("/", "seed")) == 7);
  CHECK(std::get<double>(f.get_attr("/", "lr")) == 0.001);
  Tensor m = f.read_tensor("metrics/model/train_loss");
  REQUIRE(m.shape() == Shape{5, 3});
  CHECK(m.at({0, 0}) == 1.0);
  CHECK(m.at({4, 0}) == 5.0);
  CHECK(m.at({4, 1}) == 0.2);
  CHECK(m.at({4, 2}) >= 0.0);  // wall seconds
  CHECK(f.read_tensor("series/attention/maps/values").shape() == Shape{1, 2, 3});
  CHECK(f.read_tensor("series/attention/maps/step").to_vector<int64_t>() == std::vector<int64_t>{5});
  CHECK(f.read_tensor("samples/input").to_vector<float>() == std::vector<float>{1, 2, 3});
}

TEST_CASE("runlog: misuse is refused with a message naming the problem") {
  std::string path = temp_path("misuse.h5");
  RunLog log = RunLog::create(path);
  log.declare_scalar("a");
  log.declare_series("s", {2});
  // It said "could not create dataset 'series/z/values' (declared twice?)" to each.
  test::check_error([&] { log.declare_series("z", {0, 3}); },
                    {"series 'z' declared with item shape [0, 3]", "expected every size >= 1"});
  test::check_error([&] { log.declare_series("big", {1 << 15, 1 << 15}); },
                    {"series 'big'", "[32768, 32768]", "1073741824 float32 values a row", "less than 4 GiB"});
  test::check_error([&] { log.declare_series("s", {2}); }, {"series 's' is declared twice"});
  test::check_error([&] { log.declare_scalar("a"); }, {"metric 'a' is declared twice"});
  // A name under or above a declared one: it said "could not create dataset
  // 'metrics/a/x' (declared twice?)". Metrics and series are apart: a series
  // "a/x" is no metric's group.
  test::check_error([&] { log.declare_scalar("a/x"); }, {"metric 'a/x' lies under the metric 'a'", "group"});
  log.declare_scalar("grp/x");
  test::check_error([&] { log.declare_scalar("grp"); }, {"metric 'grp' lies above the metric 'grp/x'"});
  log.declare_scalar("grpx");  // a longer name, not a group of it
  log.declare_series("a/x", {2});
  // A series is a group of two datasets, values and step: another series may
  // lie under it (see the next test), but not at or under those two.
  test::check_error([&] { log.declare_series("s/values", {2}); }, {"series 's/values' lies under the series 's'"});
  test::check_error([&] { log.declare_series("s/step/x", {2}); }, {"series 's/step/x' lies under the series 's'"});
  log.declare_series("t/values/x", {2});
  test::check_error([&] { log.declare_series("t", {2}); }, {"series 't' lies above the series 't/values/x'"});
  log.declare_series("s/steps", {2});
  test::check_error([&] { log.scalar("a", 1, 1.0); }, {"scalar", "needs", "begin()"});
  log.begin();
  test::check_error([&] { log.begin(); }, {"begin() was already called"});
  test::check_error([&] { log.declare_scalar("b"); }, {"declare_scalar", "before begin()"});
  test::check_error([&] { log.scalar("nope", 1, 1.0); }, {"metric 'nope' was not declared"});
  test::check_error([&] { log.series("s", 1, Tensor::zeros({3})); }, {"series 's'", "[2]", "[3]"});
  test::check_error([&] { log.series("s", 1, Tensor()); }, {"series 's' at step 1", "undefined", "keep_attention"});
  // Steps never decrease within a metric or series (a repeated step is allowed).
  log.scalar("a", 5, 1.0);
  log.scalar("a", 5, 2.0);
  test::check_error([&] { log.scalar("a", 4, 1.0); }, {"metric 'a' at step 4 after step 5", "never decrease"});
  log.series("s", 3, Tensor::zeros({2}));
  test::check_error([&] { log.series("s", 2, Tensor::zeros({2})); }, {"series 's' at step 2 after step 3"});
  // After close(), a row is refused as such (it said "metric 'a' was not declared").
  log.close();
  test::check_error([&] { log.scalar("a", 6, 1.0); }, {"RunLog '" + path + "': scalar after the log was closed"});
  test::check_error([&] { log.series("s", 6, Tensor::zeros({2})); }, {"series after the log was closed"});
  test::check_error([] { RunLog::create("/nonexistent-dir/x/y.h5"); }, {"cannot create", "/nonexistent-dir/x/y.h5"});
  test::check_error([] { h5::File("/nonexistent.h5", h5::File::Mode::read); }, {"cannot open", "/nonexistent.h5"});
}

TEST_CASE("runlog: a metric or series name HDF5 would store under another name is refused, naming it") {
  std::string path = temp_path("names.h5");
  RunLog log = RunLog::create(path);
  RunLog discard = RunLog::discard();  // another process of a job refuses the same names
  for (RunLog* l : {&log, &discard}) {
    for (const char* kind : {"metric", "series"}) {
      auto declare = [&](const std::string& name) {
        if (std::string(kind) == "metric") l->declare_scalar(name);
        else l->declare_series(name, {2});
      };
      for (const auto& [name, problem] : std::vector<std::pair<std::string, std::string>>{
               {"", "is empty"},
               {"attention/", "ends with '/'"},
               {"/attention", "starts with '/'"},
               {"attention//maps", "holds '//'"},
               {"attention/./maps", "has a part '.'"},
               {".", "has a part '.'"},
               {std::string("a\0b", 3), "holds a NUL character"}}) {
        const std::string shown = name.size() == 3 && name[1] == '\0' ? "a\\0b" : name;
        INFO(kind << " '" << shown << "'");
        test::check_error([&] { declare(name); },
                          {std::string(kind) + " name '" + shown + "' " + problem, "expected parts joined by single '/'"});
      }
    }
  }
  // Every name the bundled experiments log is taken.
  for (const char* name : {"train_loss", "attention/pair_score", "cnn/test_mse", "charlm/uniform/bits_per_weight",
                           "attention/layer0/same_phase_best_head", "tokens_per_second"})
    log.declare_scalar(name);
  for (const char* name : {"attention/layer0/maps", "heads/entropy", "attention/output", "attention/maps",
                           "prev_token_attention", "attention/blocks.0.attn", "attention", "a..b/.c/d."})
    log.declare_series(name, {2});
  log.begin();
  log.series("attention", 1, Tensor::zeros({2}));
  log.close();
  h5::File f(path, h5::File::Mode::read);
  CHECK(f.dataset_shape("series/attention/values") == Shape{1, 2});
  CHECK(f.dataset_shape("series/a..b/.c/d./values") == Shape{0, 2});
}

TEST_CASE("runlog: a reader sees flushed rows while the writer runs, and they survive kill -9") {
  std::string path = temp_path("live.h5");
  int ready[2], go[2];
  REQUIRE(pipe(ready) == 0);
  REQUIRE(pipe(go) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The writer: 10 rows, flush, report; 10 more, flush, report; then hang
    // until killed (never closes the file).
    RunLog::Options opt;
    opt.flush_seconds = 1e9;
    opt.flush_rows = 1000000;
    RunLog log = RunLog::create(path, opt);
    log.declare_scalar("loss");
    log.begin();
    char c = 0;
    for (int phase = 0; phase < 2; ++phase) {
      for (int i = 0; i < 10; ++i) log.scalar("loss", phase * 10 + i + 1, 0.5);
      log.flush();
      if (write(ready[1], "x", 1) != 1) _exit(3);
      if (phase == 0 && read(go[0], &c, 1) != 1) _exit(4);
    }
    for (int i = 0; i < 5; ++i) log.scalar("loss", 100 + i, 0.5);  // written, never flushed
    pause();
    _exit(0);
  }
  char c = 0;
  REQUIRE(read(ready[0], &c, 1) == 1);
  {
    h5::File live(path, h5::File::Mode::read_swmr);  // the writer is still running
    CHECK(rows(live, "metrics/loss") == 10);
  }
  REQUIRE(write(go[1], "x", 1) == 1);
  REQUIRE(read(ready[0], &c, 1) == 1);
  {
    h5::File live(path, h5::File::Mode::read_swmr);
    CHECK(rows(live, "metrics/loss") == 20);
  }
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status));
  h5::File after(path, h5::File::Mode::read_swmr);
  Tensor m = after.read_tensor("metrics/loss");
  REQUIRE(m.size(0) >= 20);  // every flushed row survived
  for (int64_t i = 0; i < 20; ++i) CHECK(m.at({i, 0}) == static_cast<double>(i + 1));
}

TEST_CASE("runlog: resume drops rows written after the checkpoint step and appends after them") {
  std::string path = temp_path("resume.h5");
  {
    RunLog log = RunLog::create(path);
    log.declare_scalar("loss");
    log.declare_series("maps", {2});
    log.begin();
    for (int64_t s = 1; s <= 10; ++s) log.scalar("loss", s, static_cast<double>(s));
    log.series("maps", 4, Tensor::zeros({2}));
    log.series("maps", 6, Tensor::full({2}, 6.0));  // at the checkpoint's step: kept
    log.series("maps", 8, Tensor::ones({2}));
  }
  {  // The run began 1000 s ago: rows appended after the resume count from then.
    h5::File f(path, h5::File::Mode::append);
    const double start = h5::attr_as<double>(f.get_attr("/", "start_unix_time"), "start_unix_time");
    f.set_attr("/", "start_unix_time", start - 1000.0);
  }
  {
    RunLog log = RunLog::resume(path, 6);
    test::check_error([&] { log.begin(); }, {"begin() was already called", "RunLog::resume"});
    // After the kept rows (the last at step 6), not before them.
    test::check_error([&] { log.scalar("loss", 5, 0.0); }, {"metric 'loss' at step 5 after step 6"});
    test::check_error([&] { log.series("maps", 5, Tensor::zeros({2})); }, {"series 'maps' at step 5 after step 6"});
    for (int64_t s = 7; s <= 8; ++s) log.scalar("loss", s, 100.0 + static_cast<double>(s));
  }
  h5::File f(path, h5::File::Mode::read);
  Tensor m = f.read_tensor("metrics/loss");
  REQUIRE(m.size(0) == 8);
  CHECK(m.at({5, 1}) == 6.0);
  CHECK(m.at({6, 1}) == 107.0);
  CHECK(m.at({6, 2}) >= 1000.0);  // wall_seconds since the run's start, not the resume's
  CHECK(f.read_tensor("series/maps/step").to_vector<int64_t>() == std::vector<int64_t>{4, 6});
  CHECK(f.read_tensor("series/maps/values").to_vector<double>() == std::vector<double>{0, 0, 6, 6});
  test::check_error([&] { RunLog::resume(temp_path("basic-missing.h5"), 0); }, {"cannot open"});
}

TEST_CASE("runlog: a log whose resume was killed before SWMR began still reads, and is left as it was") {
  // RunLog::resume opens the log read-write (not SWMR: it trims rows past the
  // checkpoint first), then starts SWMR. A kill -9 in between leaves the file
  // marked open for writing by a non-SWMR writer: SWMR readers and plain
  // readers refuse it. read_any reads a copy with the mark cleared.
  std::string path = temp_path("killed-resume.h5");
  {
    RunLog log = RunLog::create(path);
    log.declare_scalar("loss");
    log.begin();
    for (int64_t s = 1; s <= 6; ++s) log.scalar("loss", s, static_cast<double>(s) / 2);
  }
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    h5::File f(path, h5::File::Mode::append);  // as resume opens it
    kill(getpid(), SIGKILL);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE(WIFSIGNALED(status));
  const std::string before = test::slurp(path);
  CHECK_THROWS(h5::File(path, h5::File::Mode::read_swmr));  // the state this test is about
  {
    h5::File f(path, h5::File::Mode::read_any);
    CHECK(f.from_copy());
    Tensor m = f.read_tensor("metrics/loss");
    REQUIRE(m.size(0) == 6);
    CHECK(m.at({5, 1}) == 3.0);
  }
  CHECK(test::slurp(path) == before);  // the file itself untouched
  {  // Cut short as well: refused, not read with its missing bytes as zeros.
    const std::string cut = temp_path("killed-resume-cut.h5");
    std::filesystem::copy_file(path, cut, std::filesystem::copy_options::overwrite_existing);
    std::filesystem::resize_file(cut, std::filesystem::file_size(path) / 2);
    CHECK_THROWS(h5::File(cut, h5::File::Mode::read_any));
  }
  // A resume clears the mark and goes on.
  {
    RunLog log = RunLog::resume(path, 4);
    log.scalar("loss", 5, 50.0);
  }
  h5::File f(path, h5::File::Mode::read_any);
  CHECK_FALSE(f.from_copy());
  Tensor m = f.read_tensor("metrics/loss");
  REQUIRE(m.size(0) == 5);
  CHECK(m.at({4, 1}) == 50.0);
}

namespace {

// A child process that opens path as a SWMR reader (as h5py's
// File(path, "r", libver="latest", swmr=True) does: HDF5 then holds its
// shared lock on the file), says so on `ready` ('x'; 'e' when it cannot
// open it), and keeps it open until a byte comes on `go`, or for hold_ms
// when that is not 0.
pid_t hold_open(const std::string& path, const int (&ready_pipe)[2], const int (&go_pipe)[2], int hold_ms) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  close(ready_pipe[0]);
  close(go_pipe[1]);  // the parent's end closing (it ended) ends the wait
  const int ready = ready_pipe[1], go = go_pipe[0];
  try {
    h5::File reader(path, h5::File::Mode::read_swmr);
    if (write(ready, "x", 1) != 1) _exit(3);
    char c = 0;
    if (hold_ms > 0) usleep(static_cast<useconds_t>(hold_ms) * 1000);
    else if (read(go, &c, 1) != 1) _exit(4);
  } catch (...) {
    if (write(ready, "e", 1) != 1) _exit(3);
    _exit(5);
  }
  _exit(0);
}

// Ends and reaps a child at the end of the scope, should the test stop
// before it does.
struct Reaped {
  pid_t pid;
  ~Reaped() {
    if (pid > 0 && waitpid(pid, nullptr, WNOHANG) == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
};

}  // namespace

TEST_CASE("runlog: a log another program has open is neither truncated by a new log nor reopened, and is named so") {
  // A reader left open on a log (h5py, heed inspect) made a new run at the
  // same --out empty the log (HDF5 truncates, then finds the reader's lock),
  // then fail with "Resource temporarily unavailable"; a resume said the log
  // was damaged.
  const std::string path = temp_path("held.h5");
  {
    RunLog log = RunLog::create(path);
    log.declare_scalar("loss");
    log.begin();
    for (int64_t s = 1; s <= 6; ++s) log.scalar("loss", s, static_cast<double>(s));
  }
  const std::string before = test::slurp(path);
  REQUIRE(!before.empty());
  int ready[2], go[2];
  REQUIRE(pipe(ready) == 0);
  REQUIRE(pipe(go) == 0);
  const pid_t reader = hold_open(path, ready, go, 0);
  REQUIRE(reader > 0);
  Reaped reaped_reader{reader};
  char c = 0;
  REQUIRE(read(ready[0], &c, 1) == 1);
  REQUIRE(c == 'x');
  test::check_error([&] { RunLog::create(path); },
                    {"cannot create HDF5 file '" + path + "'", "open in another program", "h5py",
                     "HDF5_USE_FILE_LOCKING=FALSE", "locking=False"});
  CHECK(test::slurp(path) == before);
  test::check_error([&] { RunLog::resume(path, 4); },
                    {"cannot open '" + path + "' to write to it", "open in another program", "close it"});
  CHECK(test::slurp(path) == before);
  REQUIRE(write(go[1], "x", 1) == 1);
  int status = 0;
  waitpid(reader, &status, 0);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  // A reader that lets go soon (one that polls the log) is waited for.
  const pid_t poller = hold_open(path, ready, go, 300);
  REQUIRE(poller > 0);
  Reaped reaped_poller{poller};
  REQUIRE(read(ready[0], &c, 1) == 1);
  REQUIRE(c == 'x');
  {
    RunLog log = RunLog::resume(path, 4);
    log.scalar("loss", 5, 50.0);
  }
  waitpid(poller, &status, 0);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  {
    h5::File f(path, h5::File::Mode::read);
    Tensor m = f.read_tensor("metrics/loss");
    REQUIRE(m.size(0) == 5);
    CHECK(m.at({4, 1}) == 50.0);
  }
  const pid_t poller2 = hold_open(path, ready, go, 300);
  REQUIRE(poller2 > 0);
  Reaped reaped_poller2{poller2};
  REQUIRE(read(ready[0], &c, 1) == 1);
  REQUIRE(c == 'x');
  {
    RunLog log = RunLog::create(path);
    log.declare_scalar("fresh");
    log.begin();
    log.scalar("fresh", 1, 1.0);
  }
  waitpid(poller2, &status, 0);
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  h5::File f(path, h5::File::Mode::read);
  CHECK(f.exists("metrics/fresh"));
  CHECK_FALSE(f.exists("metrics/loss"));
  for (int fd : {ready[0], ready[1], go[0], go[1]}) close(fd);
}

TEST_CASE("runlog: a log cut back by an older checkpoint's resume is refused for a later checkpoint, untouched") {
  // A checkpoint at step 9, then an older one (step 4) resumed to step 6:
  // the log was cut back to 4 and holds 1..6. Resuming the step-9
  // checkpoint went on at 10 with steps 7-9 missing, silently.
  const std::string path = temp_path("cut-back.h5");
  {
    RunLog log = RunLog::create(path);
    log.declare_scalar("loss");
    log.declare_scalar("eval");
    log.declare_series("maps", {2});
    log.begin();
    for (int64_t s = 1; s <= 9; ++s) {
      log.scalar("loss", s, static_cast<double>(s));
      if (s % 3 == 0) log.scalar("eval", s, 0.5);
      if (s % 2 == 0) log.series("maps", s, Tensor::zeros({2}));
    }
  }
  {
    RunLog log = RunLog::resume(path, 4);
    for (int64_t s = 5; s <= 6; ++s) log.scalar("loss", s, static_cast<double>(s));
  }
  {
    h5::File f(path, h5::File::Mode::read);
    CHECK(RunLog::gap_before(f, 6) == "");
    CHECK(RunLog::gap_before(f, 5) == "");
    const std::string gap = RunLog::gap_before(f, 9);
    CHECK(test::has(gap, "ends at step 6"));
    CHECK(test::has(gap, "steps 7 to 9 would be missing"));
  }
  const std::string before = test::slurp(path);
  test::check_error([&] { RunLog::resume(path, 9); },
                    {"run log '" + path + "'", "resumed at step 9", "ends at step 6", "steps 7 to 9", "a new log"});
  CHECK(test::slurp(path) == before);
  {  // The checkpoint the log was cut back for goes on.
    RunLog log = RunLog::resume(path, 6);
    log.scalar("loss", 7, 7.0);
  }
  // A metric logged every k steps reaches the k - 1 steps after its last row;
  // a log with no rows loses nothing.
  const std::string sparse = temp_path("sparse.h5");
  {
    RunLog log = RunLog::create(sparse);
    log.declare_scalar("eval");
    log.declare_scalar("never");
    log.begin();
    log.scalar("eval", 10, 1.0);
    log.scalar("eval", 20, 2.0);
  }
  {
    h5::File f(sparse, h5::File::Mode::read);
    CHECK(RunLog::gap_before(f, 29) == "");
    CHECK(test::has(RunLog::gap_before(f, 30), "ends at step 20, so steps 21 to 30"));
  }
  const std::string empty = temp_path("no-rows.h5");
  {
    RunLog log = RunLog::create(empty);
    log.declare_scalar("never");
    log.begin();
  }
  h5::File f(empty, h5::File::Mode::read);
  CHECK(RunLog::gap_before(f, 1000) == "");
}

TEST_CASE("runlog: a write the file system refuses is reported with its reason, also when a later flush succeeds") {
  // The log flushes every dataset, and each flush clears HDF5's error stack:
  // when the one that failed (no room for its next chunk) was followed by
  // one that succeeded (its rows fit in the chunk it has), the message lost
  // the reason. A file size limit refuses the write here (EFBIG), as a full
  // disk does (ENOSPC).
  const std::string path = temp_path("limited.h5");
  int out[2];
  REQUIRE(pipe(out) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::string msg = "no error";
    try {
      signal(SIGXFSZ, SIG_IGN);  // a write past the limit then fails with EFBIG
      RunLog::Options opt;
      opt.flush_seconds = 1e9;
      opt.flush_rows = 1000000;
      RunLog log = RunLog::create(path, opt);
      log.declare_scalar("a_grows");   // flushed first (by name)
      log.declare_scalar("b_stays");   // flushed after it, into the chunk it has
      log.begin();
      log.scalar("a_grows", 1, 1.0);
      log.scalar("b_stays", 1, 1.0);
      log.flush();
      struct rlimit lim {};
      lim.rlim_cur = lim.rlim_max = static_cast<rlim_t>(std::filesystem::file_size(path));
      if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(5);
      for (int64_t s = 2; s <= 600; ++s) log.scalar("a_grows", s, 1.0);  // past its first chunk of 256 rows
      log.scalar("b_stays", 2, 2.0);
      log.flush();
    } catch (const Error& e) {
      msg = e.what();
    }
    if (write(out[1], msg.data(), msg.size()) != static_cast<ssize_t>(msg.size())) _exit(4);
    _exit(0);
  }
  close(out[1]);
  std::string msg;
  char buf[512];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) msg.append(buf, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  INFO("message: " << msg);
  CHECK(test::has(msg, "RunLog '" + path + "': could not write the log: " + std::strerror(EFBIG)));
  CHECK(test::has(msg, "the rows logged since its last flush are lost"));
}

TEST_CASE("runlog: the digest of the rows up to a step is the same kept while writing, read from the file, and resumed") {
  const std::string path = temp_path("digest.h5");
  auto write = [](RunLog& log, int64_t from, int64_t to, double seed) {
    for (int64_t s = from; s <= to; ++s) {
      log.scalar("loss", s, seed / static_cast<double>(s));
      if (s % 2 == 0) log.scalar("eval", s, seed * static_cast<double>(s));
      if (s % 3 == 0) log.series("maps", s, Tensor::from({static_cast<float>(s), static_cast<float>(seed)}, {2}));
    }
  };
  auto of_file = [&path](int64_t step, const std::set<std::string>& redo = {}) {
    return RunLog::rows_digest(h5::File(path, h5::File::Mode::read_any), step, redo);
  };
  std::map<std::pair<int64_t, bool>, uint64_t> kept;  // (step, redo of "eval" and "maps") -> digest while writing
  {
    RunLog log = RunLog::create(path);
    log.declare_scalar("loss");
    log.declare_scalar("eval");
    log.declare_series("maps", {2});
    log.begin();
    for (int64_t s = 1; s <= 8; ++s) {
      write(log, s, s, 1.0);
      for (bool redo : {false, true}) {
        const std::optional<uint64_t> d = log.digest(s, redo ? std::set<std::string>{"eval", "maps"} : std::set<std::string>{});
        REQUIRE(d.has_value());
        kept[{s, redo}] = *d;
      }
    }
    // Rows after the step at one later step are told apart; at two, not.
    CHECK(log.digest(7) == kept.at({7, false}));
    CHECK(!log.digest(6).has_value());
    log.close();
  }
  for (const auto& [at, digest] : kept) {
    INFO("step " << at.first << (at.second ? ", owed work left out" : ""));
    CHECK(of_file(at.first, at.second ? std::set<std::string>{"eval", "maps"} : std::set<std::string>{}) == digest);
  }
  // Every step's rows count, and the values too.
  CHECK(kept.at({4, false}) != kept.at({5, false}));
  CHECK(kept.at({6, false}) != kept.at({6, true}));
  // Resumed at 5, the log's digest goes on from the rows it kept; the rows
  // written again (another value: another branch of the run) give another one.
  {
    RunLog log = RunLog::resume(path, 5);
    CHECK(log.digest(5) == kept.at({5, false}));
    write(log, 6, 8, 2.0);
    CHECK(log.digest(8) != kept.at({8, false}));
    const std::optional<uint64_t> now = log.digest(8);
    log.close();
    CHECK(of_file(8) == now);
  }
  CHECK(of_file(5) == kept.at({5, false}));
  CHECK(of_file(6) != kept.at({6, false}));
  // Resumed with owed work at 6: its rows at 6 go, and the digest is the one that left them out.
  const uint64_t owed = of_file(6, {"eval", "maps"});
  CHECK(owed != of_file(6));
  RunLog log = RunLog::resume(path, 6, {"eval", "maps"});
  CHECK(log.digest(6, {"eval", "maps"}) == owed);
  CHECK(log.digest(6) == owed);  // nothing at step 6 left in them
  CHECK(RunLog::discard().digest(6) == std::nullopt);
}
