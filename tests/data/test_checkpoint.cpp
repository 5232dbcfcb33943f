// tests/data/test_checkpoint.cpp: load_checkpoint round-trips a checkpoint and
// refuses every damaged, corrupt, mistyped or mistaken file with a
// heed::Error that names the file and the problem (never another exception).
#include <cstdlib>
#include <sstream>

#include "data/checkpoint.h"
#include "data/file_damage.h"
#include "data/h5.h"
#include "data/runlog.h"
#include "data/unreadable.h"
#include "experiments/spawn.h"
#include "test_util.h"

using namespace heed;

TEST_CASE("checkpoint: save and load round-trip; a flipped byte in a tensor's data is refused naming the tensor") {
  test::DamageDir d("heed-ckpt-crc-");
  std::string path = d.file("sine.ckpt.h5");
  Checkpoint ck = test::small_checkpoint();
  save_checkpoint(path, ck);
  Checkpoint back = load_checkpoint(path, "sine");
  CHECK(back.config == ck.config);
  CHECK(back.counters == ck.counters);
  REQUIRE(back.tensors.size() == ck.tensors.size());
  for (const auto& [k, t] : ck.tensors) CHECK(test::tensor_bytes(back.tensors.at(k)) == test::tensor_bytes(t));

  test::flip_byte_in(path, test::tensor_bytes(ck.tensors.at("model/l1.weight")), 5);
  test::check_error([&] { load_checkpoint(path, "sine"); },
                    {"checkpoint '" + path + "': tensor 'model/l1.weight' is corrupt (CRC mismatch)", "checksum"});
}

TEST_CASE("checkpoint: a flipped byte in HDF5's structure says the file is damaged, naming it") {
  test::DamageDir d("heed-ckpt-damaged-");
  std::string path = d.file("sine.ckpt.h5");
  // A link name inside a group's object header, which HDF5 checksums: the
  // group "tensors" (holding "model" and "optim"), then "tensors/model".
  for (const std::string& name : {std::string("model"), std::string("l1.bias")}) {
    CAPTURE(name);
    save_checkpoint(path, test::small_checkpoint());
    test::flip_byte_in(path, name, 1);
    test::check_error([&] { load_checkpoint(path, "sine"); },
                      {"checkpoint '" + path + "' is damaged: not a readable heed checkpoint"});
  }
}

TEST_CASE("checkpoint: an error that is not HDF5's while reading (memory) names the checkpoint, never calls it damaged") {
  // A tensor of 2^46 float32 (256 TiB, more than any address space): HDF5
  // stores its shape in a few bytes (no data written), and reading it needs
  // memory the allocator cannot give. It was reported as "checkpoint '...'
  // is damaged: not a readable heed checkpoint (out of memory allocating
  // ... bytes)": a good file, which its owner might delete.
  test::DamageDir d("heed-ckpt-oom-");
  const std::string path = d.file("big.ckpt.h5");
  const test::Result py = test::run_process(
      {"/usr/bin/python3", "-c",
       "import sys, h5py, numpy as np\n"
       "f = h5py.File(sys.argv[1], 'w', libver='latest')\n"
       "f.attrs['heed_checkpoint_format'] = np.int64(1)\n"
       "f.attrs['experiment'] = 'sine'\n"
       "f.attrs['counter.step'] = np.int64(5)\n"
       "w = f.create_dataset('tensors/model/l1.weight', shape=(1 << 46,), dtype='f4')\n"
       "w.attrs['crc32'] = np.int64(0)\n",
       path},
      d.path);
  INFO("h5py: " << py.out << py.err);
  REQUIRE(py.status == 0);
  const std::string bytes = std::to_string(int64_t{4} << 46);
  std::string msg;
  try {
    load_checkpoint(path, "sine");
  } catch (const Error& e) {
    msg = e.what();
  }
  INFO("message: " << msg);
  CHECK(msg == "checkpoint '" + path + "': tensor 'model/l1.weight' cannot be read: out of memory allocating " + bytes +
                   " bytes");
  CHECK(msg.find("damaged") == std::string::npos);
  // The same through a command, in one line, with nothing written.
  const auto before = test::snapshot(d.path);
#ifdef __SANITIZE_ADDRESS__
  // The command's allocator fails as a plain build's does (returns null),
  // with AddressSanitizer's warning before heed's message.
  const char* asan_was = std::getenv("ASAN_OPTIONS");
  const std::string asan_before = asan_was ? asan_was : "";
  setenv("ASAN_OPTIONS", (asan_before + ":allocator_may_return_null=1").c_str(), 1);
#endif
  test::Result r = test::heed_cli({"export", path}, d.path);
#ifdef __SANITIZE_ADDRESS__
  if (asan_was)
    setenv("ASAN_OPTIONS", asan_before.c_str(), 1);
  else
    unsetenv("ASAN_OPTIONS");
  std::istringstream lines(r.err);
  r.err.clear();
  for (std::string line; std::getline(lines, line);)
    if (line.find("WARNING: AddressSanitizer failed to allocate") == std::string::npos) r.err += line + "\n";
#endif
  INFO("export: " << r.out << r.err);
  CHECK(r.status == 1);
  CHECK(r.err == "heed: export: " + msg + "\n");
  CHECK(test::snapshot(d.path) == before);

  // What HDF5 itself refuses still says damaged: the file cut short, or a
  // byte of its structure flipped (HDF5 checksums it).
  const std::string good = d.file("sine.ckpt.h5");
  save_checkpoint(good, test::small_checkpoint());
  const std::string all = test::slurp(good);
  for (size_t keep : {all.size() / 2, all.size() - 1}) {
    CAPTURE(keep);
    const std::string cut = d.file("cut.ckpt.h5");
    std::ofstream(cut, std::ios::binary | std::ios::trunc) << all.substr(0, keep);
    test::check_error([&] { load_checkpoint(cut, "sine"); },
                      {"checkpoint '" + cut + "' is damaged: not a readable heed checkpoint"});
  }
  test::flip_byte_in(good, "l1.bias", 1);
  test::check_error([&] { load_checkpoint(good, "sine"); },
                    {"checkpoint '" + good + "' is damaged: not a readable heed checkpoint"});
}

TEST_CASE("checkpoint: a run log, or another HDF5 file, given as a checkpoint is refused saying what it is") {
  test::DamageDir d("heed-ckpt-log-");
  std::string log = d.file("sine.h5");
  {
    RunLog l = RunLog::create(log);
    l.set_attr("experiment", std::string("sine"));
    l.declare_scalar("loss");
    l.begin();
    l.scalar("loss", 1, 0.5);
  }
  test::check_error([&] { load_checkpoint(log, "sine"); }, {"'" + log + "' is a heed run log, not a heed checkpoint"});
  std::string other = d.file("other.h5");
  { h5::File f(other, h5::File::Mode::create); }
  test::check_error([&] { load_checkpoint(other, "sine"); }, {"'" + other + "' is not a heed checkpoint"});
  std::string text = d.file("notes.txt");
  std::ofstream(text) << "not HDF5\n";
  test::check_error([&] { load_checkpoint(text, "sine"); }, {"'" + text + "' is not a heed checkpoint (not an HDF5 file)"});
}

TEST_CASE("checkpoint: an attribute of another type (crc32, a counter, experiment) or an unknown format is a heed::Error naming it") {
  test::DamageDir d("heed-ckpt-types-");
  std::string path = d.file("sine.ckpt.h5");
  struct Case {
    std::string object, name;
    h5::Attr value;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {"tensors/model/l1.weight", "crc32", std::string("abc"),
       {"checkpoint '" + path + "': tensor 'model/l1.weight': its crc32 attribute is text (\"abc\"), expected an integer"}},
      {"tensors/model/l1.weight", "crc32", 1.5,
       {"checkpoint '" + path + "': tensor 'model/l1.weight': its crc32 attribute is a real number (1.5), expected an "
                                "integer"}},
      {"/", "counter.step", std::string("five"),
       {"checkpoint '" + path + "': counter.step is text (\"five\"), expected an integer"}},
      {"/", "experiment", int64_t{3}, {"checkpoint '" + path + "': its experiment attribute is an integer (3), expected text"}},
      // A format this heed does not read (a newer heed's): refused, not misread.
      {"/", "heed_checkpoint_format", int64_t{2},
       {"checkpoint '" + path + "' is in format 2; this heed reads format 1", "written by a newer heed"}},
      {"/", "heed_checkpoint_format", int64_t{0}, {"checkpoint '" + path + "' is in format 0; this heed reads format 1"}},
      {"/", "heed_checkpoint_format", std::string("1"),
       {"checkpoint '" + path + "': its heed_checkpoint_format attribute is text (\"1\"), expected an integer"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    save_checkpoint(path, test::small_checkpoint());
    h5::File(path, h5::File::Mode::append).set_attr(c.object, c.name, c.value);
    test::check_error([&] { load_checkpoint(path, "sine"); }, c.message);
  }
}

TEST_CASE("checkpoint: a 300-character file name or a symlink loop is a heed::Error naming the path") {
  test::DamageDir d("heed-ckpt-paths-");
  const std::string longname = d.long_name(), loop = d.symlink_loop();
  test::check_error([&] { load_checkpoint(longname, "sine"); },
                    {"checkpoint '" + longname + "' cannot be read: File name too long"});
  test::check_error([&] { load_checkpoint(loop, "sine"); },
                    {"checkpoint '" + loop + "' cannot be read: Too many levels of symbolic links"});
  test::check_error([&] { save_checkpoint(longname, test::small_checkpoint()); },
                    {"checkpoint: cannot write '" + longname + "': File name too long"});
  test::check_error([&] { save_checkpoint(loop, test::small_checkpoint()); },
                    {"checkpoint: cannot write '" + loop + "': Too many levels of symbolic links"});
  // Nothing was left behind, and a plain missing file still says so.
  CHECK(std::distance(std::filesystem::directory_iterator(d.path), {}) == 2);  // loop1, loop2
  test::check_error([&] { load_checkpoint(d.file("none.ckpt.h5"), "sine"); }, {"none.ckpt.h5' does not exist"});
}

TEST_CASE("checkpoint: a file without read permission is refused with the operating system's reason") {
  test::DamageDir d("heed-ckpt-perm-");
  const std::string path = d.file("sine.ckpt.h5");
  save_checkpoint(path, test::small_checkpoint());
  test::NoFileOverride as_a_user;
  test::make_unreadable(path);
  std::string msg;
  try {
    load_checkpoint(path, "sine");
  } catch (const Error& e) {
    msg = e.what();
  }
  INFO(msg);
  CHECK(msg == "cannot open checkpoint '" + path + "': Permission denied");
}

TEST_CASE("checkpoint and safetensors writers keep a replaced file's permissions") {
  namespace fs = std::filesystem;
  test::TempDir d("heed-mode-");
  const std::string ck = d.path + "/run.ckpt.h5", st = d.path + "/w.safetensors";
  save_checkpoint(ck, test::small_checkpoint());
  safetensors::save(st, {{"w", Tensor::ones({2})}});
  for (const std::string& p : {ck, st}) fs::permissions(p, fs::perms::owner_read | fs::perms::owner_write);
  save_checkpoint(ck, test::small_checkpoint());  // each replaces the file through a temporary one
  safetensors::save(st, {{"w", Tensor::zeros({2})}});
  for (const std::string& p : {ck, st}) {
    INFO(p);
    CHECK(fs::status(p).permissions() == (fs::perms::owner_read | fs::perms::owner_write));
  }
  CHECK(safetensors::load(st).tensors.at("w").to_floats() == std::vector<float>{0, 0});
}
