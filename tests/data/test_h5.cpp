// tests/data/test_h5.cpp: heed's HDF5 layer: attributes keep every byte and
// type, a value of another type is refused naming what was expected, and a
// file the operating system will not open is refused in its words.
#include "data/file_damage.h"
#include "data/h5.h"
#include "data/runlog.h"
#include "data/unreadable.h"
#include "test_util.h"

using namespace heed;

TEST_CASE("h5: text attributes keep every byte: embedded, leading and trailing NULs, empty, 100 KB") {
  test::DamageDir d("heed-h5-text-");
  const std::vector<std::string> texts = {
      std::string("a\0b", 3),
      std::string("\0\n !abc", 7),  // a vocabulary whose corpus holds NUL: U+0000 sorts first
      std::string("end\0\0", 5),
      std::string(1, '\0'),
      "",
      "plain UTF-8: héllo ∑ 🙂",
      std::string(100000, 'x') + std::string(1, '\0') + "tail",
  };
  auto name = [](size_t i) { return fmt::format("t{}", i); };
  std::string path = d.file("attrs.h5");
  {
    h5::File f(path, h5::File::Mode::create);
    f.set_attr("/", name(0), std::string("to be replaced"));
    for (size_t i = 0; i < texts.size(); ++i) f.set_attr("/", name(i), texts[i]);
  }
  h5::File f(path, h5::File::Mode::read);
  for (size_t i = 0; i < texts.size(); ++i) {
    CAPTURE(i);
    h5::Attr a = f.get_attr("/", name(i));
    REQUIRE(std::holds_alternative<std::string>(a));
    CHECK(std::get<std::string>(a).size() == texts[i].size());
    CHECK((std::get<std::string>(a) == texts[i]));  // (not printed: 100 KB)
  }
}

TEST_CASE("h5: variable-length text in ASCII (h5py's for a bytes value) reads back, as UTF-8 does") {
  test::DamageDir d("heed-h5-ascii-");
  const std::string path = d.file("ascii.h5");
  // h5py writes a bytes value as variable-length ASCII text, a str as UTF-8.
  const test::Result py = test::run_process({"/usr/bin/python3", "-c",
                                             "import sys, h5py\n"
                                             "f = h5py.File(sys.argv[1], 'w')\n"
                                             "f.attrs['ascii'] = b'shapes'\n"
                                             "f.attrs['utf8'] = 'shapes'\n",
                                             path},
                                            d.path);
  INFO("h5py: " << py.out << py.err);
  REQUIRE(py.status == 0);
  h5::File f(path, h5::File::Mode::read);
  for (const char* name : {"ascii", "utf8"}) {
    CAPTURE(name);
    h5::Attr a;
    REQUIRE_NOTHROW(a = f.get_attr("/", name));  // ASCII was refused: HDF5 converts no text to UTF-8
    REQUIRE(std::holds_alternative<std::string>(a));
    CHECK(std::get<std::string>(a) == "shapes");
  }
  CHECK(f.attrs("/").size() == 2);
}

TEST_CASE("h5: a run log's text attribute with NUL bytes (charlm's vocabulary) reads back whole") {
  test::DamageDir d("heed-h5-runlog-");
  std::string path = d.file("lm.h5");
  const std::string vocabulary("\0\n abc", 6);
  {
    RunLog log = RunLog::create(path);
    log.set_attr("vocabulary", vocabulary);
    log.declare_scalar("loss");
    log.begin();
    log.scalar("loss", 1, 2.0);
  }
  h5::File f(path, h5::File::Mode::read_swmr);
  CHECK(h5::attr_as<std::string>(f.get_attr("/", "vocabulary"), "vocabulary") == vocabulary);
}

TEST_CASE("h5: attr_as returns a value of the asked type and refuses another, naming both") {
  CHECK(h5::attr_as<int64_t>(h5::Attr(int64_t{7}), "x") == 7);
  CHECK(h5::attr_as<double>(h5::Attr(0.5), "x") == 0.5);
  CHECK(h5::attr_as<std::string>(h5::Attr(std::string("s")), "x") == "s");
  test::check_error([] { h5::attr_as<int64_t>(h5::Attr(std::string("abc")), "file 'f.h5': its n attribute"); },
                    {"file 'f.h5': its n attribute is text (\"abc\"), expected an integer"});
  test::check_error([] { h5::attr_as<std::string>(h5::Attr(2.5), "its name"); },
                    {"its name is a real number (2.5), expected text"});
}

TEST_CASE("h5: a run log whose start_unix_time is not a real number is refused on resume, naming it") {
  test::DamageDir d("heed-h5-start-");
  std::string path = d.file("run.h5");
  {
    RunLog log = RunLog::create(path);
    log.declare_scalar("loss");
    log.begin();
    log.scalar("loss", 1, 2.0);
  }
  h5::File(path, h5::File::Mode::append).set_attr("/", "start_unix_time", std::string("yesterday"));
  test::check_error([&] { RunLog::resume(path, 1); },
                    {"run log '" + path + "': its start_unix_time attribute is text (\"yesterday\"), expected a real "
                                          "number"});
}

TEST_CASE("h5: a file the operating system will not open is named with its reason, not as \"not HDF5\"") {
  test::DamageDir d("heed-h5-open-");
  const std::string file = d.file("run.h5");
  { h5::File f(file, h5::File::Mode::create); }
  CHECK(h5::open_problem(file).empty());
  CHECK(h5::open_problem(file, true).empty());
  // A directory, a loop of symbolic links, a missing file: root meets these too.
  CHECK(h5::open_problem(d.path) == "Is a directory");
  CHECK(h5::open_problem(d.path, true) == "Is a directory");
  const std::string loop = d.symlink_loop();
  CHECK(h5::open_problem(loop) == "Too many levels of symbolic links");
  CHECK(h5::open_problem(d.file("none.h5")) == "No such file or directory");
  for (auto mode : {h5::File::Mode::read, h5::File::Mode::read_swmr, h5::File::Mode::read_any, h5::File::Mode::append}) {
    CAPTURE(static_cast<int>(mode));
    test::check_error([&] { h5::File f(d.path, mode); }, {"cannot open '" + d.path + "': Is a directory"});
    test::check_error([&] { h5::File f(loop, mode); }, {"cannot open '" + loop + "': Too many levels of symbolic links"});
  }
  // No permission (chmod 000, and not root's override): "Permission denied".
  test::NoFileOverride as_a_user;
  test::make_unreadable(file);
  CHECK(h5::open_problem(file) == "Permission denied");
  for (auto mode : {h5::File::Mode::read, h5::File::Mode::read_swmr, h5::File::Mode::read_any, h5::File::Mode::append}) {
    CAPTURE(static_cast<int>(mode));
    test::check_error([&] { h5::File f(file, mode); }, {"cannot open '" + file + "': Permission denied"});
  }
}

TEST_CASE("h5: has_signature of a directory is false at once (it looked for a signature for ever)") {
  test::DamageDir d("heed-h5-dirsig-");
  CHECK(!h5::has_signature(d.path));
  const std::string file = d.file("x.h5");
  { h5::File f(file, h5::File::Mode::create); }
  CHECK(h5::has_signature(file));
}

TEST_CASE("h5: read_block reads a box of a dataset; read_in_blocks reads it all, in order, in bounded blocks") {
  const std::string path = test::temp_path("blocks.h5");
  Tensor t = Tensor::empty({3, 5, 7}, DType::f64);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = static_cast<double>(i);
  {
    h5::File f(path, h5::File::Mode::create);
    f.write_tensor("t", t);
    f.write_tensor("i", Tensor::full({4}, 7, DType::i64));
    f.write_tensor("s", Tensor::scalar(2.5, DType::f32));
    f.write_tensor("e", Tensor::zeros({0, 3}));
  }
  h5::File f(path, h5::File::Mode::read);
  CHECK(f.dataset_dtype("t") == DType::f64);
  CHECK(f.dataset_dtype("i") == DType::i64);
  CHECK(f.dataset_dtype("s") == DType::f32);
  // The box [1..3) x [2..5) x [6..7).
  const Tensor b = f.read_block("t", {1, 2, 6}, {2, 3, 1});
  CHECK(b.shape() == Shape{2, 3, 1});
  CHECK(b.to_vector<double>() == std::vector<double>{55, 62, 69, 90, 97, 104});
  test::check_error([&] { (void)f.read_block("t", {1, 2, 6}, {2, 3, 2}); }, {"lies outside it", "[3, 5, 7]"});
  test::check_error([&] { (void)f.read_block("t", {0, 0}, {1, 1}); }, {"has 3 dimensions"});
  // Whole slices, runs of rows, parts of a row, one element at a time: the
  // blocks, in order, are the dataset's values in row-major order.
  for (int64_t max_bytes : {int64_t{1}, int64_t{8}, int64_t{24}, int64_t{56}, int64_t{300}, int64_t{1000}, int64_t{1} << 20}) {
    CAPTURE(max_bytes);
    std::vector<double> all;
    int64_t biggest = 0;
    f.read_in_blocks("t", max_bytes, [&](const Tensor& block) {
      CHECK(block.dim() == 1);
      biggest = std::max(biggest, block.numel());
      for (double v : block.to_vector<double>()) all.push_back(v);
    });
    CHECK(all == t.to_vector<double>());
    CHECK(biggest * 8 <= std::max<int64_t>(8, max_bytes));
  }
  std::vector<double> scalar;
  f.read_in_blocks("s", 16, [&](const Tensor& block) { scalar = block.to_vector<double>(); });
  CHECK(scalar == std::vector<double>{2.5});
  int64_t calls = 0;
  f.read_in_blocks("e", 16, [&](const Tensor&) { ++calls; });
  CHECK(calls == 0);
}
