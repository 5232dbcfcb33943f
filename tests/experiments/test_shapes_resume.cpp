// tests/experiments/test_shapes_resume.cpp: a run stopped or killed, then
// resumed, is bit-identical to one that never stopped; bad checkpoints are
// refused with errors that name the problem.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "data/checkpoint.h"
#include "data/h5.h"
#include "experiments/shapes.h"
#include "resume_check.h"
#include "test_util.h"

extern char** environ;

using namespace heed;
namespace fs = std::filesystem;

namespace {

std::string dir() {
  auto d = fs::temp_directory_path() / ("heed-resume-" + std::to_string(getpid()));
  fs::create_directories(d);
  return d.string();
}

// Small but complete: 2 epochs of 5 steps, both models.
std::vector<std::string> small(const std::string& out, const char* epochs = "2") {
  return {"--train", "100", "--test", "15", "--batch", "20", "--epochs", epochs, "--threads", "2",
          "--checkpoint-every", "2", "--out", out};
}

int run(std::vector<std::string> args) { return experiments::run_shapes(args, {"heed", "run", "shapes"}); }

void check_same_run(const std::string& a, const std::string& b) { test::check_same_log(a, b); }

// The final checkpoints' tensors, except acc/ (it holds compute seconds).
void check_same_checkpoint(const std::string& a, const std::string& b) {
  test::check_same_checkpoint(a, b, "shapes", {"acc/"});
}

}  // namespace

TEST_CASE("shapes resume: stopped at step 3 and resumed equals the uninterrupted run, bit for bit") {
  std::string d = dir();
  REQUIRE(run(small(d + "/straight.h5")) == 0);
  auto args = small(d + "/stopped.h5");
  args.insert(args.end(), {"--stop-after", "3"});
  REQUIRE(run(args) == 130);
  REQUIRE(fs::exists(d + "/stopped.ckpt.h5"));
  REQUIRE(run({"--resume", d + "/stopped.ckpt.h5"}) == 0);
  check_same_run(d + "/straight.h5", d + "/stopped.h5");
  check_same_checkpoint(d + "/straight.ckpt.h5", d + "/stopped.ckpt.h5");
}

TEST_CASE("shapes resume: a run killed with SIGKILL resumes from its last checkpoint to the same result") {
  std::string d = dir();
  std::string out = d + "/killed.h5", ckpt = d + "/killed.ckpt.h5";
  // 6 epochs of 5 steps: long enough that the run cannot finish between its
  // first checkpoint (step 2) and the kill, even on a busy machine.
  REQUIRE(run(small(d + "/ref.h5", "6")) == 0);
  // A separate process (the heed program), killed without warning once it
  // has written a checkpoint.
  std::vector<std::string> argv_s{HEED_CLI_PATH, "run", "shapes"};
  for (auto& s : small(out, "6")) argv_s.push_back(s);
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  REQUIRE(posix_spawn(&pid, HEED_CLI_PATH, &fa, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&fa);
  for (int i = 0; i < 6000 && !fs::exists(ckpt); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(fs::exists(ckpt));
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  INFO("the run finished before it could be killed: make it longer");
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(run({"--resume", ckpt}) == 0);
  check_same_run(d + "/ref.h5", out);
  check_same_checkpoint(d + "/ref.ckpt.h5", ckpt);
}

TEST_CASE("shapes resume: bad checkpoints are refused, naming the problem") {
  std::string d = dir();
  auto args = small(d + "/base.h5");
  args.insert(args.end(), {"--stop-after", "2"});
  REQUIRE(run(args) == 130);
  std::string good = d + "/base.ckpt.h5";
  Checkpoint ck = load_checkpoint(good, "shapes");

  SUBCASE("missing file") { test::check_error([&] { run({"--resume", d + "/nope.h5"}); }, {"nope.h5", "does not exist"}); }
  SUBCASE("truncated") {
    std::string p = d + "/trunc.ckpt.h5";
    fs::copy_file(good, p, fs::copy_options::overwrite_existing);
    fs::resize_file(p, fs::file_size(p) / 2);
    test::check_error([&] { run({"--resume", p}); }, {"trunc.ckpt.h5"});
  }
  SUBCASE("corrupt data") {
    std::string p = d + "/corrupt.ckpt.h5";
    Checkpoint bad = ck;
    save_checkpoint(p, bad);
    // Flip bytes inside one tensor's raw data: HDF5 does not checksum raw data,
    // heed's per-tensor CRC must catch it.
    Tensor w = bad.tensors.at("model/attention/0.weight");
    std::string bytes(reinterpret_cast<const char*>(w.raw_data()), 16);
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto at = all.find(bytes);
    REQUIRE(at != std::string::npos);
    f.seekp(static_cast<std::streamoff>(at + 4));
    f.write("\xde\xad\xbe\xef", 4);
    f.close();
    test::check_error([&] { run({"--resume", p}); }, {"corrupt", "model/attention/0.weight", "checksum"});
  }
  SUBCASE("another experiment") {
    Checkpoint other = ck;
    other.experiment = "charlm";
    save_checkpoint(d + "/other.ckpt.h5", other);
    test::check_error([&] { run({"--resume", d + "/other.ckpt.h5"}); }, {"'charlm' experiment", "expected 'shapes'"});
  }
  SUBCASE("a log is not a checkpoint") {
    test::check_error([&] { run({"--resume", d + "/base.h5"}); }, {"not a heed checkpoint"});
  }
  SUBCASE("missing parameter") {
    Checkpoint bad = ck;
    bad.tensors.erase("model/attention/4.conv_k.weight");
    save_checkpoint(d + "/missing.ckpt.h5", bad);
    test::check_error([&] { run({"--resume", d + "/missing.ckpt.h5"}); }, {"missing", "4.conv_k.weight", "[64, 64, 1]"});
  }
  SUBCASE("extra parameter") {
    Checkpoint bad = ck;
    bad.tensors["model/cnn/9.weight"] = Tensor::zeros({3});
    save_checkpoint(d + "/extra.ckpt.h5", bad);
    test::check_error([&] { run({"--resume", d + "/extra.ckpt.h5"}); }, {"unexpected", "9.weight"});
  }
  SUBCASE("wrong shape") {
    Checkpoint bad = ck;
    bad.tensors["model/cnn/8.weight"] = Tensor::zeros({1, 64, 3});
    save_checkpoint(d + "/shape.ckpt.h5", bad);
    test::check_error([&] { run({"--resume", d + "/shape.ckpt.h5"}); }, {"8.weight", "[1, 64, 3]", "[1, 64, 5]"});
  }
  SUBCASE("contradicting option") {
    test::check_error([&] { run({"--resume", good, "--lr", "0.01"}); }, {"--lr 0.01", "contradicts", "0.001"});
  }
}

TEST_CASE("shapes: bad options are refused before any work, and nothing is written") {
  std::string d = dir();
  test::check_error([] { run({"--epochs", "0"}); }, {"--epochs", "'0'", ">= 1"});
  test::check_error([] { run({"--model", "rnn"}); }, {"--model", "cnn|attention|both", "'rnn'"});
  test::check_error([] { run({"--out", "/proc/heed/x.h5"}); }, {"/proc/heed"});
  test::check_error([] { run({"--lr", "-1"}); }, {"--lr", "'-1'"});
  CHECK_FALSE(fs::exists("/proc/heed"));
}
