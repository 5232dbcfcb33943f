// tests/core/test_safetensors.cpp: weights in and out as safetensors files
// (core/safetensors.h), Module::save/load, and load_state_dict's conversions
// and errors.
#include <sys/stat.h>

#include <cstring>
#include <functional>
#include <filesystem>
#include <fstream>

#include "../experiments/resume_check.h"
#include "test_util.h"

using namespace heed;

namespace {

// A file made by hand: the header text, then the data bytes.
void write_raw(const std::string& path, const std::string& header, const std::string& data, int64_t claimed = -1) {
  const uint64_t n = claimed < 0 ? header.size() : static_cast<uint64_t>(claimed);
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  std::ofstream(path, std::ios::binary) << bytes << header << data;
}

std::string f32_bytes(std::vector<float> v) { return std::string(reinterpret_cast<const char*>(v.data()), 4 * v.size()); }

}  // namespace

TEST_CASE("safetensors: float32, float64 and int64 tensors and the metadata round-trip bit for bit") {
  test::TempDir d("heed-st-");
  const std::string path = d.path + "/w.safetensors";
  std::map<std::string, Tensor> in = {
      {"a.weight", test::det_tensor({3, 4}, 1)},
      {"b", test::det_tensor({5}, 2, -1, 1, DType::f64)},
      {"ids", Tensor::from_i64({7, -3, 1LL << 40}, {3})},
      {"empty", Tensor::zeros({0, 4})},
      {"strided", kernel::transpose(test::det_tensor({2, 3}, 3), 0, 1)},  // not contiguous: stored as [3, 2]
  };
  safetensors::save(path, in, {{"format", "pt"}, {"note", "hello"}});
  safetensors::File f = safetensors::load(path);
  CHECK(f.metadata.at("note") == "hello");
  CHECK(safetensors::metadata(path) == f.metadata);  // the header alone
  REQUIRE(f.tensors.size() == in.size());
  for (const auto& [k, t] : in) {
    INFO(k);
    CHECK(f.tensors.at(k).shape() == t.shape());
    CHECK(f.tensors.at(k).dtype() == t.dtype());
    CHECK(f.tensors.at(k).to_vector<double>() == t.to_vector<double>());
  }
  // The data starts 8-byte aligned, as the format recommends.
  std::ifstream raw(path, std::ios::binary);
  uint64_t n = 0;
  raw.read(reinterpret_cast<char*>(&n), 8);
  CHECK(n % 8 == 0);
}

TEST_CASE("safetensors: F16 and BF16 tensors (PyTorch's half types) are read as float32") {
  test::TempDir d("heed-st-");
  const std::string path = d.path + "/h.safetensors";
  // 1.0, -2.0, 0.5, 2^-24 (the smallest subnormal half), 65504 (the largest half); bfloat16 1.0, -3.0.
  const uint16_t half[] = {0x3c00, 0xc000, 0x3800, 0x0001, 0x7bff}, bf[] = {0x3f80, 0xc040};
  std::string data(reinterpret_cast<const char*>(half), sizeof half);
  data.append(reinterpret_cast<const char*>(bf), sizeof bf);
  write_raw(path,
            R"({"h":{"dtype":"F16","shape":[5],"data_offsets":[0,10]},"b":{"dtype":"BF16","shape":[2],"data_offsets":[10,14]}})",
            data);
  safetensors::File f = safetensors::load(path);
  CHECK(f.tensors.at("h").dtype() == DType::f32);
  CHECK(f.tensors.at("h").to_vector<double>() == std::vector<double>{1.0, -2.0, 0.5, std::ldexp(1.0, -24), 65504.0});
  CHECK(f.tensors.at("b").to_vector<double>() == std::vector<double>{1.0, -3.0});
  // inf, -inf, NaN, and subnormals with more than one mantissa bit (3 and 1023 times 2^-24).
  const uint16_t special[] = {0x7c00, 0xfc00, 0x7e00, 0x0003, 0x03ff};
  write_raw(path, R"({"s":{"dtype":"F16","shape":[5],"data_offsets":[0,10]}})",
            std::string(reinterpret_cast<const char*>(special), sizeof special));
  const std::vector<double> s = safetensors::load(path).tensors.at("s").to_vector<double>();
  CHECK(s[0] == INFINITY);
  CHECK(s[1] == -INFINITY);
  CHECK(std::isnan(s[2]));
  CHECK(s[3] == std::ldexp(3.0, -24));
  CHECK(s[4] == std::ldexp(1023.0, -24));
}

TEST_CASE("safetensors: a damaged or malformed file is refused, naming the file and the tensor") {
  test::TempDir d("heed-st-");
  const std::string p = d.path + "/bad.safetensors";
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  SUBCASE("too short") {
    std::ofstream(p, std::ios::binary) << "abc";
    test::check_error([&] { safetensors::load(p); }, {"bad.safetensors", "3 bytes", "too short"});
  }
  SUBCASE("a header length past the end") {
    write_raw(p, ok, f32_bytes({1, 2}), 1000);
    test::check_error([&] { safetensors::load(p); }, {"bad.safetensors", "header length 1000", "past the end"});
  }
  SUBCASE("a header that is not JSON") {
    write_raw(p, "{\"w\": [", "");
    test::check_error([&] { safetensors::load(p); }, {"bad.safetensors", "not valid JSON"});
  }
  SUBCASE("an unknown dtype") {
    write_raw(p, R"({"w":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", f32_bytes({1, 2}));
    test::check_error([&] { safetensors::load(p); }, {"tensor 'w'", "dtype 'Q4'", "F32, F64, I64"});
  }
  SUBCASE("a shape that does not match the bytes") {
    write_raw(p, R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", f32_bytes({1, 2}));
    test::check_error([&] { safetensors::load(p); }, {"tensor 'w'", "needs 12 bytes", "give 8"});
  }
  SUBCASE("offsets outside the data") {
    write_raw(p, R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", f32_bytes({1, 2}));
    test::check_error([&] { safetensors::load(p); }, {"tensor 'w'", "[4, 12]", "outside the 8 bytes"});
  }
  SUBCASE("overlapping tensors") {
    write_raw(p,
              R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
              f32_bytes({1, 2}));
    test::check_error([&] { safetensors::load(p); }, {"bad.safetensors", "overlap"});
  }
  SUBCASE("a negative size") {
    write_raw(p, R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", f32_bytes({1, 2}));
    test::check_error([&] { safetensors::load(p); }, {"tensor 'w'", "not a size"});
  }
  SUBCASE("a missing file") {
    test::check_error([&] { safetensors::load(d.path + "/none.safetensors"); }, {"none.safetensors", "cannot read"});
  }
  SUBCASE("a shape nested 100000 lists deep (the message once printed it, recursively: a stack overflow)") {
    const std::string deep = std::string(100000, '[') + std::string(100000, ']');
    write_raw(p, R"({"w":{"dtype":"F32","shape":[)" + deep + R"(],"data_offsets":[0,0]}})", "");
    test::check_error([&] { safetensors::load(p); }, {"tensor 'w'", "not a size", "JSON array"});
  }
  SUBCASE("a shape whose byte count wraps around 64 bits (2^62 elements of 4 bytes: 0 bytes)") {
    write_raw(p, R"({"w":{"dtype":"F32","shape":[1099511627776,4194304],"data_offsets":[0,0]}})", "");
    test::check_error([&] { safetensors::load(p); }, {"tensor 'w'", "too large"});
    test::check_error([] { Tensor::empty({int64_t{1} << 40, int64_t{1} << 22}); }, {"empty", "more bytes"});
    test::check_error([] { Tensor::empty({int64_t{1} << 62, 4, 0}); }, {"empty", "more bytes"});  // its strides would wrap
    CHECK(Tensor::empty({int64_t{1} << 20, 0}).numel() == 0);
  }
  SUBCASE("a directory") {
    std::filesystem::create_directory(d.path + "/dir.safetensors");
    test::check_error([&] { safetensors::load(d.path + "/dir.safetensors"); }, {"dir.safetensors", "is a directory"});
  }
  SUBCASE("a key twice in one object (JSON's parser keeps the last: two readers could see two files)") {
    write_raw(p,
              R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
              f32_bytes({1, 2}));
    test::check_error([&] { safetensors::load(p); }, {"bad.safetensors", "key 'w' more than once"});
    write_raw(p, R"({"w":{"dtype":"F32","shape":[2],"dtype":"F64","data_offsets":[0,8]}})", f32_bytes({1, 2}));
    test::check_error([&] { safetensors::load(p); }, {"bad.safetensors", "key 'dtype' more than once"});
  }
  SUBCASE("a header that does not start with '{' (a byte-order mark, blanks)") {
    write_raw(p, "\xef\xbb\xbf" + std::string(ok), f32_bytes({1, 2}));
    test::check_error([&] { safetensors::load(p); }, {"bad.safetensors", "does not start with '{'", "0xef"});
    write_raw(p, "  " + std::string(ok), f32_bytes({1, 2}));
    test::check_error([&] { safetensors::load(p); }, {"bad.safetensors", "0x20"});
    write_raw(p, "", "");
    test::check_error([&] { safetensors::load(p); }, {"bad.safetensors", "it is empty"});
    write_raw(p, std::string(ok) + "   ", f32_bytes({1, 2}));  // blanks after the object pad it, as the format allows
    CHECK(safetensors::load(p).tensors.at("w").to_floats() == std::vector<float>{1, 2});
  }
  SUBCASE("bytes that belong to no tensor: a gap, or bytes after the last") {
    write_raw(p,
              R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
              f32_bytes({1, 2, 3}));
    test::check_error([&] { safetensors::load(p); }, {"bad.safetensors", "bytes 4..8", "no tensor", "before 'b'"});
    write_raw(p, ok, f32_bytes({1, 2, 3}));
    test::check_error([&] { safetensors::load(p); }, {"bad.safetensors", "4 bytes after the last tensor"});
    test::check_error([&] { safetensors::metadata(p); }, {"bad.safetensors", "4 bytes after the last tensor"});
  }
  SUBCASE("more dimensions than heed's tensors have, named with the tensor, not found later by a kernel") {
    write_raw(p, R"({"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})", f32_bytes({1}));
    test::check_error([&] { safetensors::load(p); }, {"tensor 'w'", "13 dimensions", "limit of 12"});
    // Sizes whose product is 0 but whose other sizes multiply past 64 bits.
    write_raw(p, R"({"w":{"dtype":"F32","shape":[1099511627776,0,1099511627776],"data_offsets":[0,0]}})", "");
    test::check_error([&] { safetensors::load(p); }, {"tensor 'w'", "too large"});
  }
  SUBCASE("a name that is not UTF-8 is shown escaped, not written raw to the terminal") {
    write_raw(p, "{\"w\xff\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", f32_bytes({1, 2}));
    std::string what;
    try {
      safetensors::load(p);
    } catch (const Error& e) {
      what = e.what();
    }
    REQUIRE(!what.empty());
    CHECK(what.find('\xff') == std::string::npos);
    CHECK(what.find("\\xff") != std::string::npos);
  }
  SUBCASE("a FIFO (it would wait for a writer forever)") {
    const std::string fifo = d.path + "/pipe.safetensors";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    test::check_error([&] { safetensors::load(fifo); }, {"pipe.safetensors", "is a FIFO"});
  }
  SUBCASE("a large file that is not safetensors is refused from its first bytes, without reading it") {
    const std::string big = d.path + "/zeros.safetensors";
    { std::ofstream(big, std::ios::binary) << std::string(8, '\0'); }
    std::filesystem::resize_file(big, uint64_t{1} << 40);  // sparse: 1 TiB of zeros, no disk
    test::check_error([&] { safetensors::load(big); }, {"zeros.safetensors", "it is empty"});
    std::ofstream(big, std::ios::binary | std::ios::in) << std::string("\x10\0\0\0\0\0\0\0", 8) << "not json!";
    test::check_error([&] { safetensors::load(big); }, {"zeros.safetensors", "0x6e"});
  }
  SUBCASE("an HDF5 file (a checkpoint given where weights were expected)") {
    const std::string p = d.path + "/run.ckpt.h5";
    std::ofstream(p, std::ios::binary) << std::string("\x89HDF\r\n\x1a\n\0\0\0\0\0\x08\x08\0", 16);  // its signature
    test::check_error([&] { safetensors::load(p); }, {"run.ckpt.h5", "is an HDF5 file", "heed export"});
  }
}

TEST_CASE("safetensors: the writer replaces a link at its temporary name, not the file the link leads to") {
  test::TempDir d("heed-st-tmp-");
  const std::string keep = d.path + "/precious.bin", out = d.path + "/out.safetensors";
  std::ofstream(keep) << "keep me";
  std::filesystem::create_symlink(keep, out + ".tmp");
  safetensors::save(out, {{"w", Tensor::ones({2})}});
  std::ifstream in(keep);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  CHECK(text == "keep me");
  CHECK(safetensors::load(out).tensors.at("w").to_floats() == std::vector<float>{1, 1});
  CHECK_FALSE(std::filesystem::exists(out + ".tmp"));
  // Metadata that is not UTF-8 (a Latin-1 file name) is written, the byte as U+FFFD.
  safetensors::save(out, {{"w", Tensor::ones({2})}}, {{"text", "caf\xe9.txt"}});
  CHECK(safetensors::load(out).metadata.at("text") == "caf\xef\xbf\xbd.txt");
}

TEST_CASE("safetensors: the writer refuses what it would lose: a name that is not UTF-8, a file that is not safetensors") {
  test::TempDir d("heed-st-w-");
  const std::string out = d.path + "/w.safetensors";
  // Written with U+FFFD for the bad byte, the two names became one key.
  test::check_error([&] { safetensors::save(out, {{"a\xff", Tensor::ones({1})}, {"a\xfe", Tensor::ones({2})}}); },
                    {"w.safetensors", "a\\xf", "not UTF-8"});
  CHECK_FALSE(std::filesystem::exists(out));
  // A run's log (HDF5) or any other file at the name stays as it was.
  for (const std::string& content :
       {std::string("\x89HDF\r\n\x1a\n\0\0\0\0", 12), std::string("my notes, not weights\n")}) {
    std::ofstream(out, std::ios::binary) << content;
    test::check_error([&] { safetensors::save(out, {{"w", Tensor::ones({2})}}); }, {"will not write", "w.safetensors"});
    std::ifstream in(out, std::ios::binary);
    CHECK(std::string((std::istreambuf_iterator<char>(in)), {}) == content);
  }
  // An earlier safetensors file, or an empty one, is replaced.
  std::filesystem::remove(out);
  safetensors::save(out, {{"w", Tensor::ones({2})}});
  safetensors::save(out, {{"v", Tensor::zeros({1})}});
  CHECK(safetensors::load(out).tensors.count("v") == 1);
  std::ofstream(out, std::ios::trunc).close();
  safetensors::save(out, {{"w", Tensor::ones({2})}});
  CHECK(safetensors::load(out).tensors.count("w") == 1);
}

TEST_CASE("Module::save and load go through safetensors; load_state_dict converts float64 and names every problem") {
  test::TempDir d("heed-st-");
  Generator g1(1), g2(2);
  nn::Linear a(nn::LinearOptions(3, 2).generator(&g1)), b(nn::LinearOptions(3, 2).generator(&g2));
  a.save(d.path + "/lin.safetensors");
  b.load(d.path + "/lin.safetensors");
  CHECK(b.weight.to_vector<double>() == a.weight.to_vector<double>());
  CHECK(b.bias.to_vector<double>() == a.bias.to_vector<double>());

  // float64 values load into the float32 model, rounded as PyTorch's copy_ does.
  std::map<std::string, Tensor> f64 = {{"weight", test::det_tensor({2, 3}, 5, -1, 1, DType::f64)},
                                       {"bias", test::det_tensor({2}, 6, -1, 1, DType::f64)}};
  b.load_state_dict(f64);
  CHECK(b.weight.dtype() == DType::f32);
  CHECK(b.weight.to_vector<double>() == kernel::to_dtype(f64.at("weight"), DType::f32).to_vector<double>());

  // Every missing, unexpected and mis-shaped key in one message.
  std::map<std::string, Tensor> bad = {{"weight", Tensor::zeros({2, 4})}, {"extra", Tensor::zeros({1})}};
  test::check_error([&] { b.load_state_dict(bad); },
                    {"missing entries: 'bias' (expected shape [2])", "unexpected entries", "'extra' (shape [1])",
                     "'weight' has shape [2, 4], the model expects [2, 3]"});
  std::map<std::string, Tensor> ints = {{"weight", Tensor::from_i64({1, 2, 3, 4, 5, 6}, {2, 3})},
                                        {"bias", Tensor::zeros({2})}};
  test::check_error([&] { b.load_state_dict(ints); }, {"'weight' has dtype int64, the model expects float32"});
  test::check_error([&] { b.load(d.path + "/none.safetensors"); }, {"Linear", "none.safetensors"});
}

TEST_CASE("load_state_dict names a file's keys escaped: a newline or a terminal escape in a key stays in one line") {
  // A safetensors file written byte by byte (an 8-byte little-endian header
  // length, the JSON header, the data) whose keys hold control characters.
  test::TempDir d("heed-st-keys-");
  auto write = [&](const std::string& name, const std::string& json_key) {
    const std::string header =
        "{\"" + json_key + "\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}";
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    bytes += header + std::string(4, '\0');
    std::ofstream(d.path + "/" + name, std::ios::binary) << bytes;
    return d.path + "/" + name;
  };
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string evil = write("evil.safetensors", "evil\\nname\\u001b[31mRED");
  REQUIRE(safetensors::load(evil).tensors.count("evil\nname\x1b[31mRED") == 1);
  Generator g(1);
  nn::Linear lin(nn::LinearOptions(3, 2).generator(&g));
  std::string msg = message([&] { lin.load(evil); });
  INFO(msg);
  CHECK(msg.find("unexpected entries, not in the model: 'evil\\x0aname\\x1b[31mRED' (shape [1])") != std::string::npos);
  CHECK(msg.find('\n') == std::string::npos);
  CHECK(msg.find('\x1b') == std::string::npos);

  // A GPT's own key with a newline after it: missing under its name,
  // unexpected under the file's, both in one line.
  nn::GPT gpt(nn::GPTOptions(7, 8, 1, 2, 5).generator(&g));
  std::map<std::string, Tensor> state = gpt.state_dict();
  state["wte.weight\n"] = state.at("wte.weight");
  state.erase("wte.weight");
  msg = message([&] { gpt.load_state_dict(state); });
  INFO(msg);
  CHECK(msg.find("missing entries: 'wte.weight' (expected shape [7, 8])") != std::string::npos);
  CHECK(msg.find("'wte.weight\\x0a' (shape [7, 8])") != std::string::npos);
  CHECK(msg.find('\n') == std::string::npos);
  // nanoGPT's names: a key of the layout's prefix with an escape in it.
  std::map<std::string, Tensor> nano = nn::gpt_to_nanogpt(gpt.state_dict(), gpt.options);
  nano["transformer.h.0.\x1b[2Jx"] = Tensor::zeros({1});
  msg = message([&] { gpt.load_state_dict(nano); });
  INFO(msg);
  CHECK(msg.find("'transformer.h.0.\\x1b[2Jx'") != std::string::npos);
  CHECK(msg.find('\x1b') == std::string::npos);
  // The file's path too, when Module::load names it.
  const std::string odd = write("odd\x1b.safetensors", "weight");
  msg = message([&] { lin.load(odd); });
  INFO(msg);
  CHECK(msg.find("odd\\x1b.safetensors") != std::string::npos);
  CHECK(msg.find('\x1b') == std::string::npos);
}
