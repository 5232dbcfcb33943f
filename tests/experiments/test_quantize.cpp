// tests/experiments/test_quantize.cpp: `heed quantize` and `heed run
// compression` on tiny trained models, run as a user runs them: the
// per-layer report against the file it wrote (bits per weight = bytes of the
// stored codes), the written checkpoint read by heed sample, heed inspect and
// the library, the evaluation repeated independently, the sweep's log, and
// bad input.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/checkpoint.h"
#include "data/h5.h"
#include "experiments/common.h"
#include "spawn.h"
#include "test_util.h"

using namespace heed;
using test::heed_cli;
using test::snapshot;
namespace fs = std::filesystem;

namespace {

using test::Result;

// A tiny charlm (on a small text) and a tiny shapes attention model, trained
// once for all the cases below.
struct Trained {
  test::TempDir dir{"heed-quantize-"};
  std::string lm, shapes, text;
  Trained() {
    text = dir.path + "/t.txt";
    {
      std::ofstream f(text);
      for (int i = 0; i < 60; ++i) f << "And God said, Let there be light: and there was light. The quick brown fox. ";
    }
    Result a = heed_cli({"run", "charlm", "--text", text, "--steps", "30", "--layers", "2", "--heads", "2", "--width",
                         "32", "--context", "32", "--batch", "4", "--eval-every", "30", "--eval-batches", "2", "--threads", "1",
                         "--out", dir.path + "/lm.h5"},
                        dir.path);
    INFO(a.out << a.err);
    REQUIRE(a.status == 0);
    Result b = heed_cli({"run", "shapes", "--model", "attention", "--epochs", "1", "--train", "100", "--test", "15",
                         "--batch", "50", "--threads", "1", "--out", dir.path + "/sh.h5"},
                        dir.path);
    INFO(b.out << b.err);
    REQUIRE(b.status == 0);
    lm = dir.path + "/lm.ckpt.h5";
    shapes = dir.path + "/sh.ckpt.h5";
  }
};

Trained& trained() {
  static Trained t;
  return t;
}

struct LayerLine {
  double rel_error = 0, bits_per_weight = 0;
};

// The report's per-layer lines: "  NAME  [SHAPE]  REL_ERROR  BITS/WT [rank K]".
std::map<std::string, LayerLine> layer_lines(const std::string& out) {
  std::map<std::string, LayerLine> m;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("  ", 0) != 0 || line.find("kept in float32") != std::string::npos) continue;
    const size_t close = line.find(']');
    if (close == std::string::npos) continue;
    std::istringstream name_part(line.substr(0, line.find('[')));
    std::string name;
    name_part >> name;
    std::istringstream rest(line.substr(close + 1));
    LayerLine l;
    if (rest >> l.rel_error >> l.bits_per_weight) m[name] = l;
  }
  return m;
}

// "... 4.818 bits per weight ..." -> 4.818
double summary_bits(const std::string& out) {
  const size_t at = out.find(" bits per weight (");
  REQUIRE(at != std::string::npos);
  const size_t start = out.rfind(' ', at - 1);
  return std::stod(out.substr(start + 1, at - start - 1));
}

// "validation loss: float32 2.9974, quantized 2.9993 (+0.0019)" -> {2.9974, 2.9993}
std::pair<double, double> before_after(const std::string& out, const std::string& what) {
  const size_t at = out.find(what + ": float32 ");
  REQUIRE(at != std::string::npos);
  const std::string line = out.substr(at, out.find('\n', at) - at);
  const size_t q = line.find(", quantized ");
  REQUIRE(q != std::string::npos);
  return {std::stod(line.substr(what.size() + 10)), std::stod(line.substr(q + 12))};
}

}  // namespace

TEST_CASE("heed quantize, every method on a charlm model: the report's bits per weight are the bytes of the stored "
          "codes, the weights are what the codes decode to, and the evaluation is the quantized model's") {
  Trained& t = trained();
  const Checkpoint original = load_checkpoint(t.lm, "charlm");
  for (const std::string method : {"uniform", "hadamard", "gaussian", "e8", "lplr"}) {
    CAPTURE(method);
    const std::string out = t.dir.path + "/q-" + method + ".ckpt.h5";
    Result r = heed_cli({"quantize", t.lm, "--method", method, "--bits", "3", "--threads", "1", "-o", out}, t.dir.path);
    INFO(r.out << r.err);
    REQUIRE(r.status == 0);
    Checkpoint q = load_checkpoint(out, "charlm");
    // Every matrix of the model is quantized; vectors stay as they were.
    std::map<std::string, Tensor> weights = q.get("model"), before = original.get("model");
    std::map<std::string, LayerLine> lines = layer_lines(r.out);
    int64_t total_bits = 0, total_weights = 0, matrices = 0;
    for (const auto& [name, w] : weights) {
      CAPTURE(name);
      if (w.dim() < 2) {
        CHECK(test::max_diff(w, before.at(name)) == 0);
        continue;
      }
      ++matrices;
      quant::Quantized qm = quant::from_state(q.get("quantized/" + name), name);
      CHECK(quant::method_name(qm.method) == method);
      CHECK(qm.bits == 3);
      // The weights written are exactly the stored codes decoded.
      Tensor decoded = quant::dequantize(qm);
      CHECK(std::memcmp(decoded.raw_data(), kernel::contiguous(w).raw_data(), static_cast<size_t>(w.numel()) * 4) ==
            0);
      // The bytes under quantized/<name>/ (the descriptor aside) are the bits reported.
      int64_t bytes = 0;
      for (const auto& [part, tensor] : q.get("quantized/" + name))
        if (part != "meta") bytes += tensor.numel() * static_cast<int64_t>(dtype_size(tensor.dtype()));
      CHECK(8 * bytes == qm.stored_bits());
      REQUIRE(lines.count(name));
      CHECK(lines[name].bits_per_weight == doctest::Approx(8.0 * bytes / w.numel()).epsilon(0.0005));
      CHECK(lines[name].rel_error == doctest::Approx(quant::relative_error(before.at(name), w)).epsilon(0.001));
      total_bits += 8 * bytes;
      total_weights += w.numel();
    }
    CHECK(matrices == static_cast<int64_t>(lines.size()));
    CHECK(summary_bits(r.out) == doctest::Approx(static_cast<double>(total_bits) / total_weights).epsilon(0.0005));
    CHECK(q.get("optim").empty());  // the float model's optimiser state is not carried over
    // The printed validation loss is the written model's, evaluated anew.
    auto [fp, qv] = before_after(r.out, "validation loss");
    std::unique_ptr<experiments::TrainedModels> tm = experiments::trained_models(q, out, "test");
    CHECK(tm->evaluate("").front().second == doctest::Approx(qv).epsilon(1e-4));
    CHECK(fp == doctest::Approx(original.tensors.at("result/val_loss").item()).epsilon(1e-4));
    // heed sample and heed inspect read it.
    if (method != "e8") continue;
    Result s = heed_cli({"sample", out, "--tokens", "20"}, t.dir.path);
    INFO(s.err);
    CHECK(s.status == 0);
    CHECK(s.out.rfind("And God said", 0) == 0);
    Result i = heed_cli({"inspect", out}, t.dir.path);
    CHECK(i.status == 0);
    CHECK(i.out.find(fmt::format("quantized matrices in tensors/quantized (heed quantize): {}, e8 3 bits;", matrices)) !=
          std::string::npos);
    CHECK(i.out.find(fmt::format("{:.3f} bits per weight stored", static_cast<double>(total_bits) / total_weights)) !=
          std::string::npos);
  }
}

TEST_CASE("heed quantize is deterministic (the same seed, 1 or 2 threads: the same file contents) and its error falls "
          "with the bits") {
  Trained& t = trained();
  const std::string a = t.dir.path + "/d1.ckpt.h5", b = t.dir.path + "/d2.ckpt.h5";
  REQUIRE(heed_cli({"quantize", t.lm, "--method", "gaussian", "--bits", "4", "--threads", "1", "-o", a}, t.dir.path)
              .status == 0);
  REQUIRE(heed_cli({"quantize", t.lm, "--method", "gaussian", "--bits", "4", "--threads", "2", "-o", b}, t.dir.path)
              .status == 0);
  Checkpoint x = load_checkpoint(a, "charlm"), y = load_checkpoint(b, "charlm");
  REQUIRE(x.tensors.size() == y.tensors.size());
  for (const auto& [k, v] : x.tensors) {
    CAPTURE(k);
    CHECK(test::max_diff(v, y.tensors.at(k)) == 0);
  }
  Result lo = heed_cli(
      {"quantize", t.lm, "--method", "hadamard", "--bits", "2", "--threads", "1", "-o", t.dir.path + "/lo.ckpt.h5"},
      t.dir.path);
  Result hi = heed_cli(
      {"quantize", t.lm, "--method", "hadamard", "--bits", "8", "--threads", "1", "-o", t.dir.path + "/hi.ckpt.h5"},
      t.dir.path);
  REQUIRE(lo.status == 0);
  REQUIRE(hi.status == 0);
  const double fp = before_after(hi.out, "validation loss").first;
  const double q8 = before_after(hi.out, "validation loss").second, q2 = before_after(lo.out, "validation loss").second;
  CHECK(std::abs(q8 - fp) < 0.01);
  CHECK(std::abs(q2 - fp) > std::abs(q8 - fp));
}

TEST_CASE("heed quantize on a shapes attention model: test MSE and pair-attention score before and after, e8 with "
          "the first convolution kept in float32") {
  Trained& t = trained();
  const std::string out = t.dir.path + "/sh-e8.ckpt.h5";
  Result r = heed_cli(
      {"quantize", t.shapes, "--method", "e8", "--bits", "8", "--keep", "0.weight", "--threads", "1", "-o", out},
      t.dir.path);
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("attention/0.weight [64, 1, 5]") != std::string::npos);
  auto [mse0, mse1] = before_after(r.out, "attention test MSE");
  CHECK(std::abs(mse1 - mse0) < 0.01 * mse0);
  auto [ps0, ps1] = before_after(r.out, "attention pair-attention score");
  CHECK(std::abs(ps1 - ps0) < 0.01);
  Checkpoint q = load_checkpoint(out, "shapes");
  CHECK(q.get("quantized/attention/0.weight").empty());
  CHECK(!q.get("quantized/attention/4.conv_q.weight").empty());
  CHECK(heed_cli({"inspect", out}, t.dir.path).status == 0);
}

TEST_CASE("heed quantize refuses bad input naming the value and what was expected, with a non-zero status and no "
          "file written or changed") {
  Trained& t = trained();
  const std::string p = t.dir.path;
  REQUIRE(heed_cli({"run", "sine", "--steps", "5", "--stop-after", "2", "--threads", "1", "--out", p + "/sine.h5"}, p)
              .status == 130);
  {
    // Finite weights whose rotated rows exceed float32: a constant row of
    // 3e38 becomes 3e38 sqrt(32) in one entry.
    Checkpoint c = load_checkpoint(t.lm, "charlm");
    Tensor& w = c.tensors.at("model/blocks.0.attn.v_proj.weight");
    w = Tensor::full(w.shape(), 3e38, w.dtype());
    save_checkpoint(p + "/huge.ckpt.h5", c);
  }
  // heed quantize's own output: quantized again, it mixed the first method's
  // stored codes into the new file and called the quantized model float32.
  const std::string quantized = p + "/twice.e8-4bit.ckpt.h5";
  REQUIRE(heed_cli({"quantize", t.lm, "--method", "e8", "--bits", "4", "--threads", "1", "-o", quantized}, p).status ==
          0);
  // Texts other than the run's: the same characters, other bytes (the
  // validation loss quantize printed as float32 was another text's).
  {
    std::ifstream in(t.text);
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (size_t at = s.find("fox"); at != std::string::npos; at = s.find("fox", at)) s.replace(at, 3, "xof");
    std::ofstream(p + "/changed.txt") << s;
    std::ofstream(p + "/short.txt") << s.substr(0, 40);
    Checkpoint c = load_checkpoint(t.lm, "charlm");
    c.config["text"] = p + "/changed.txt";  // the run's text, changed since
    save_checkpoint(p + "/changedrun.ckpt.h5", c);
    c.config["text"] = p + "/gone.txt";  // the run's text, moved away
    save_checkpoint(p + "/moved.ckpt.h5", c);
    c.config["text"] = p + "/short.txt";  // too short, in a checkpoint without the fingerprint to tell
    c.tensors.erase("corpus/fingerprint");
    save_checkpoint(p + "/nofp.ckpt.h5", c);
  }
  struct Case {
    std::string what;
    std::vector<std::string> args;
    int status;
    std::vector<std::string> message;
    std::vector<std::string> absent = {};  // what the message must not say
  };
  const std::vector<Case> cases = {
      {"bits below the range", {"quantize", t.lm, "--bits", "1"}, 2, {"--bits", "2..16", "'1'"}},
      {"bits above the range", {"quantize", t.lm, "--bits", "17"}, 2, {"--bits", "2..16", "'17'"}},
      {"bits not a number", {"quantize", t.lm, "--bits", "four"}, 2, {"--bits", "'four'"}},
      {"an unknown method", {"quantize", t.lm, "--method", "e9"}, 2, {"--method", "uniform, hadamard", "'e9'"}},
      {"a rank larger than the matrices", {"quantize", t.lm, "--method", "lplr", "--rank", "33"}, 2,
       {"--rank 33", "is larger than", "wte.weight", "expected 1..", ", or 0: half of each matrix's smaller side)"}},
      {"a rank for another method", {"quantize", t.lm, "--method", "uniform", "--rank", "4"}, 2,
       {"--rank 4", "lplr only", "uniform"}},
      {"e8 on rows of 5", {"quantize", t.shapes, "--method", "e8"}, 2,
       {"attention/0.weight", "[64, 1, 5]", "rows of 5", "multiple of 8", "--keep 0.weight"}},
      {"weights near float32's largest value, rotated", {"quantize", p + "/huge.ckpt.h5", "--method", "hadamard"}, 1,
       {"beyond float32's largest value", "blocks.0.attn.v_proj.weight"}},
      {"the same, lplr", {"quantize", p + "/huge.ckpt.h5", "--method", "lplr"}, 1,
       {"beyond float32's largest value", "blocks.0.attn.v_proj.weight"}},
      {"a checkpoint of another kind", {"quantize", p + "/sine.ckpt.h5"}, 1,
       {"sine.ckpt.h5", "experiment 'sine'", "charlm or shapes"}},
      {"a run log", {"quantize", p + "/lm.h5"}, 1, {"lm.h5", "not a heed checkpoint"}},
      {"a missing checkpoint", {"quantize", p + "/none.ckpt.h5"}, 1, {"none.ckpt.h5"}},
      {"--keep of no matrix", {"quantize", t.lm, "--keep", "nope.weight"}, 2, {"--keep", "nope.weight"}},
      {"--keep of no matrix with e8, whose rows of 5 it would not have to keep", {"quantize", t.shapes, "--method",
                                                                                 "e8", "--keep", "nosuch"},
       2, {"--keep names no weight matrix: nosuch"}, {"multiple of 8"}},
      {"--keep with an empty item", {"quantize", t.lm, "--keep", "wte.weight,,lm_head.weight"}, 2,
       {"--keep 'wte.weight,,lm_head.weight' has an empty item (item 2)", "single commas"}},
      {"--keep ','", {"quantize", t.lm, "--keep", ","}, 2, {"--keep ',' has an empty item (item 1)"}},
      {"--keep with a trailing comma", {"quantize", t.lm, "--keep", "wte.weight,"}, 2,
       {"--keep 'wte.weight,' has an empty item (item 2)"}},
      {"run compression: --bits with an empty item", {"run", "compression", "--charlm", t.lm, "--bits", "2,,8", "--out",
                                                      p + "/c.h5"},
       2, {"run compression: --bits '2,,8' has an empty item (item 2)"}},
      {"run compression: --methods with an empty item", {"run", "compression", "--charlm", t.lm, "--methods",
                                                         ",uniform", "--out", p + "/c.h5"},
       2, {"run compression: --methods expects one or more of uniform, hadamard, gaussian, e8 or lplr, "
           "comma-separated, got an empty item in ',uniform'"}},
      {"run compression: --methods with an unknown method", {"run", "compression", "--charlm", t.lm, "--methods",
                                                             "uniform,lattice", "--out", p + "/c.h5"},
       2, {"--methods expects one or more of uniform, hadamard, gaussian, e8 or lplr", "got 'lattice' (in 'uniform,lattice')"}},
      {"run compression: --methods naming a method twice", {"run", "compression", "--charlm", t.lm, "--methods",
                                                            "e8,uniform,e8", "--out", p + "/c.h5"},
       2, {"run compression: --methods names 'e8' twice in 'e8,uniform,e8'; expected each once"}},
      {"the run's text changed since the run", {"quantize", p + "/changedrun.ckpt.h5", "-o", p + "/x.ckpt.h5"}, 1,
       {"quantize: its run's --text '" + p + "/changed.txt' is not the text checkpoint", "corpus/fingerprint",
        "give --text where it is now"}},
      {"--text another text", {"quantize", t.lm, "--text", p + "/changed.txt", "-o", p + "/x.ckpt.h5"}, 1,
       {"quantize: --text '" + p + "/changed.txt' is not the text checkpoint '" + t.lm + "' was trained on"}},
      {"the run's text moved away", {"quantize", p + "/moved.ckpt.h5", "-o", p + "/x.ckpt.h5"}, 1,
       {"gone.txt", "does not exist", "give --text where it is now"}},
      {"--text a missing file", {"quantize", t.lm, "--text", p + "/none.txt", "-o", p + "/x.ckpt.h5"}, 1,
       {"none.txt' does not exist", "given as --text"}},
      {"a text shorter than the context (a checkpoint without the fingerprint)", {"quantize", p + "/nofp.ckpt.h5",
                                                                                  "-o", p + "/x.ckpt.h5"},
       1, {"short.txt' has 40 characters", "fewer than the model's context of 32 + 1", "give --text"}, {"--context"}},
      {"--text of a shapes checkpoint", {"quantize", t.shapes, "--text", t.text}, 2,
       {"--text '" + t.text + "' gives the text of a charlm checkpoint", "experiment 'shapes'"}},
      {"--model of a one-model checkpoint", {"quantize", t.lm, "--model", "cnn"}, 2, {"--model cnn", "one model"}},
      {"-o the checkpoint itself", {"quantize", t.lm, "-o", t.lm}, 2, {"lm.ckpt.h5", "being read"}},
      {"-o a training run's checkpoint (its optimiser state lost)", {"quantize", t.lm, "-o", p + "/sine.ckpt.h5"}, 2,
       {"sine.ckpt.h5", "checkpoint of the 'sine' experiment"}},
      // A checkpoint's lock file's name: the next run on the checkpoint removed the output.
      {"-o a checkpoint's lock file", {"quantize", t.lm, "-o", t.lm + ".lock"}, 2,
       {"quantize: --out '" + t.lm + ".lock' ends in '.lock', the name of the lock file heed keeps beside 'lm.ckpt.h5'",
        "expected another name"}},
      {"no checkpoint", {"quantize", "--bits", "4"}, 2, {"quantize: expected a checkpoint path"}},
      {"a checkpoint quantize wrote", {"quantize", quantized, "--method", "uniform", "-o", p + "/rq.ckpt.h5"}, 1,
       {"quantize: checkpoint '" + quantized + "' is already quantized (e8 4 bits;",
        "expected the training checkpoint it was made from"}},
      {"run compression on one", {"run", "compression", "--charlm", quantized, "--out", p + "/rq.h5"}, 1,
       {"run compression: --charlm '" + quantized + "' is already quantized (e8 4 bits;"}},
      // It listed the 108 keys under quantized/ as unexpected.
      {"--resume of one", {"run", "charlm", "--resume", quantized}, 1,
       {"run charlm: checkpoint '" + quantized + "' is a quantized checkpoint (e8 4 bits;",
        "expected the training checkpoint it was made from"},
       {"unexpected", "quantized/"}},
      // Checkpoints that do not load, named by the option that gave them
      // ("heed: checkpoint '...' is from the 'shapes' experiment" named neither).
      {"run compression: --charlm of another experiment", {"run", "compression", "--charlm", t.shapes, "--out",
                                                          p + "/c.h5"},
       1, {"run compression: --charlm: checkpoint '", "sh.ckpt.h5' is from the 'shapes' experiment, expected 'charlm'"}},
      {"run compression: --shapes of another experiment", {"run", "compression", "--shapes", t.lm, "--out", p + "/c.h5"},
       1, {"run compression: --shapes: checkpoint '", "lm.ckpt.h5' is from the 'charlm' experiment, expected 'shapes'"}},
      {"run compression: --shapes missing", {"run", "compression", "--shapes", p + "/none.ckpt.h5", "--out",
                                             p + "/c.h5"},
       1, {"run compression: --shapes: checkpoint '", "none.ckpt.h5' does not exist"}},
      {"run compression: --charlm a run log", {"run", "compression", "--charlm", p + "/lm.h5", "--out", p + "/c.h5"}, 1,
       {"run compression: --charlm: '", "lm.h5' is a heed run log, not a heed checkpoint"}},
      // --rank above every matrix's smaller side (64 at most) leaves nothing to quantize.
      {"run compression: --rank above every matrix", {"run", "compression", "--shapes", t.shapes, "--methods", "lplr",
                                                      "--rank", "65", "--out", p + "/c.h5"},
       2, {"run compression: --rank 65 leaves no matrix of --shapes", "a smaller side below it", "expected --rank 64 or less"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const auto before = snapshot(p);
    Result r = heed_cli(c.args, p);
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    CHECK(r.status == c.status);
    CHECK(r.err.rfind("heed: ", 0) == 0);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);  // one line
    for (const auto& m : c.message) CHECK(r.err.find(m) != std::string::npos);
    for (const auto& m : c.absent) CHECK(r.err.find(m) == std::string::npos);
    // A bad command line is refused before any work: shapes' data set, made
    // for the first evaluation, was generated (and announced) first.
    if (c.status == 2) CHECK(r.out.find("data: ") == std::string::npos);
    CHECK(snapshot(p) == before);
  }
}

TEST_CASE("heed quantize --rank 0 is the default rank, and --help and the too-large rank's message say so") {
  // --rank 0 was taken as the default while --help said nothing of 0 and a
  // rank too large was told "expected 1..32".
  Trained& t = trained();
  const std::string p = t.dir.path;
  Result help = heed_cli({"quantize", "--help"}, p);
  REQUIRE(help.status == 0);
  CHECK(help.out.find("  --rank R           lplr: the factors' rank, 1 to each matrix's smaller side (default, or 0:\n"
                      "                     half of each matrix's smaller side)\n") != std::string::npos);
  Result zero = heed_cli({"quantize", t.lm, "--method", "lplr", "--rank", "0", "--threads", "1", "-o",
                          p + "/rank0.ckpt.h5"},
                         p);
  INFO(zero.out << zero.err);
  REQUIRE(zero.status == 0);
  Result deflt = heed_cli({"quantize", t.lm, "--method", "lplr", "--threads", "1", "-o", p + "/rankd.ckpt.h5"}, p);
  INFO(deflt.out << deflt.err);
  REQUIRE(deflt.status == 0);
  // The same per-layer lines (each matrix's rank, half of its smaller side, among them) and the same weights.
  auto layer_report = [](const std::string& out) {
    std::string lines;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);)
      if (line.find(" rank ") != std::string::npos && line.rfind("  ", 0) == 0) lines += line + "\n";
    return lines;
  };
  CHECK(!layer_report(zero.out).empty());
  CHECK(layer_report(zero.out) == layer_report(deflt.out));
  CHECK(load_checkpoint(p + "/rank0.ckpt.h5", "charlm").get("model").at("wte.weight").to_vector<float>() ==
        load_checkpoint(p + "/rankd.ckpt.h5", "charlm").get("model").at("wte.weight").to_vector<float>());
  Result big = heed_cli({"quantize", t.lm, "--method", "lplr", "--rank", "33", "-o", p + "/rank33.ckpt.h5"}, p);
  INFO(big.err);
  CHECK(big.status == 2);
  CHECK(big.err.find(" allows (expected 1..") != std::string::npos);
  CHECK(big.err.find(", or 0: half of each matrix's smaller side)\n") != std::string::npos);
  CHECK_FALSE(fs::exists(p + "/rank33.ckpt.h5"));
}

TEST_CASE("heed quantize reads a charlm run's text where --text says it is now") {
  Trained& t = trained();
  test::TempDir d("heed-quantize-text-");
  const std::string p = d.path;
  // The run's text moved: quantize finds it with --text and measures the run's loss on it.
  const std::string moved = p + "/moved.txt";
  fs::copy_file(t.text, moved);
  {
    Checkpoint c = load_checkpoint(t.lm, "charlm");
    c.config["text"] = p + "/gone.txt";
    save_checkpoint(p + "/moved.ckpt.h5", c);
  }
  Result here = heed_cli({"quantize", t.lm, "--method", "uniform", "--bits", "8", "--threads", "1", "-o",
                          p + "/a.ckpt.h5"},
                         p);
  Result there = heed_cli({"quantize", p + "/moved.ckpt.h5", "--text", moved, "--method", "uniform", "--bits", "8",
                           "--threads", "1", "-o", p + "/b.ckpt.h5"},
                          p);
  INFO(here.out << here.err << there.out << there.err);
  REQUIRE(here.status == 0);
  REQUIRE(there.status == 0);
  CHECK(before_after(there.out, "validation loss") == before_after(here.out, "validation loss"));
}

TEST_CASE("heed quantize's hint to sample the quantized model gives a prompt when heed sample's default cannot be "
          "encoded") {
  Trained& t = trained();
  test::TempDir d("heed-quantize-hint-");
  const std::string p = d.path;
  // A run on the Bible's characters: heed sample's default prompt works, the hint gives none.
  Result bible = heed_cli({"quantize", t.lm, "--method", "uniform", "--bits", "8", "--threads", "1", "-o",
                           p + "/a.ckpt.h5"},
                          p);
  REQUIRE(bible.status == 0);
  CHECK(bible.out.find("sample it: heed sample " + p + "/a.ckpt.h5\n") != std::string::npos);

  // A run on lowercase letters and spaces: heed sample's default "And God said" cannot be encoded.
  const std::string lower = p + "/lower.txt";
  {
    std::ofstream f(lower);
    for (int i = 0; i < 200; ++i) f << "the quick brown fox jumps over the lazy dog ";
  }
  REQUIRE(heed_cli({"run", "charlm", "--text", lower, "--layers", "1", "--heads", "2", "--width", "16", "--context",
                    "16", "--batch", "4", "--steps", "3", "--eval-every", "3", "--eval-batches", "1", "--threads", "1",
                    "--out", p + "/lower.h5"},
                   p)
              .status == 0);
  const std::string q = p + "/lower.q.ckpt.h5";
  Result r = heed_cli({"quantize", p + "/lower.ckpt.h5", "--method", "uniform", "--bits", "8", "-o", q}, p);
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  const std::string hint = "sample it: heed sample " + q + " --prompt '";
  const size_t at = r.out.find(hint);
  REQUIRE(at != std::string::npos);
  const size_t end = r.out.find("'\n", at + hint.size());
  REQUIRE(end != std::string::npos);
  const std::string prompt = r.out.substr(at + hint.size(), end - at - hint.size());
  CHECK(!prompt.empty());
  Result s = heed_cli({"sample", q, "--prompt", prompt, "--tokens", "5"}, p);
  INFO(s.err);
  CHECK(s.status == 0);
  CHECK(s.out.rfind(prompt, 0) == 0);
}

TEST_CASE("heed run compression: the table of methods x bits logged to HDF5 (8 bits next to float32), printed and "
          "read back by heed inspect") {
  Trained& t = trained();
  const std::string log = t.dir.path + "/comp.h5";
  Result r = heed_cli({"run", "compression", "--charlm", t.lm, "--shapes", t.shapes, "--methods", "uniform,e8,lplr",
                       "--bits", "2,8", "--threads", "1", "--no-plot", "--out", log},
                      t.dir.path);
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("| uniform   |") != std::string::npos);
  CHECK(r.out.find("shapes: kept in float32 by every method: 0.weight") != std::string::npos);
  h5::File f(log, h5::File::Mode::read);
  CHECK(std::get<std::string>(f.get_attr("/", "experiment")) == "compression");
  const double val0 = f.read_tensor("baseline/charlm/val_loss").item();
  const double mse0 = f.read_tensor("baseline/shapes/test_mse").item();
  for (const std::string method : {"uniform", "e8", "lplr"}) {
    CAPTURE(method);
    std::vector<double> val = f.read_tensor("metrics/charlm/" + method + "/val_loss").to_vector<double>();
    std::vector<double> bits = f.read_tensor("metrics/charlm/" + method + "/bits").to_vector<double>();
    std::vector<double> bpw = f.read_tensor("metrics/shapes/" + method + "/bits_per_weight").to_vector<double>();
    std::vector<double> mse = f.read_tensor("metrics/shapes/" + method + "/test_mse").to_vector<double>();
    REQUIRE(val.size() == 6);  // two rows of (step, value, wall_seconds)
    CHECK(bits[1] == 2);
    CHECK(bits[4] == 8);
    CHECK(bpw[4] > bpw[1]);
    if (method != "lplr") {  // half rank: its error is the low-rank part's, whatever the bits
      CHECK(std::abs(val[4] - val0) < 0.01);
      CHECK(std::abs(mse[4] - mse0) < 0.02 * mse0);
      CHECK(bpw[1] == doctest::Approx(2.0).epsilon(0.25));
    }
  }
  f.close();
  Result i = heed_cli({"inspect", log}, t.dir.path);
  CHECK(i.status == 0);
  CHECK(i.out.find("charlm/e8/val_loss") != std::string::npos);
  // Bad lists are refused before anything is written.
  Result bad = heed_cli({"run", "compression", "--charlm", t.lm, "--bits", "2,20", "--out", t.dir.path + "/bad.h5"},
                        t.dir.path);
  CHECK(bad.status == 2);
  CHECK(bad.err.find("'20'") != std::string::npos);
  CHECK(!fs::exists(t.dir.path + "/bad.h5"));
}

TEST_CASE("heed run compression reads a charlm run's text where --text says it is now, and refuses another text") {
  Trained& t = trained();
  test::TempDir d("heed-compression-text-");
  const std::string p = d.path;
  // The run's text moved: without --text the sweep cannot evaluate the model; with it, the same baseline.
  const std::string moved = p + "/moved.txt";
  fs::copy_file(t.text, moved);
  {
    Checkpoint c = load_checkpoint(t.lm, "charlm");
    c.config["text"] = p + "/gone.txt";
    save_checkpoint(p + "/moved.ckpt.h5", c);
  }
  const std::vector<std::string> sweep = {"--methods", "uniform", "--bits", "8", "--threads", "1", "--no-plot"};
  Result lost = heed_cli(test::cat({"run", "compression", "--charlm", p + "/moved.ckpt.h5", "--out", p + "/l.h5"},
                                   sweep),
                         p);
  INFO(lost.out << lost.err);
  CHECK(lost.status != 0);
  CHECK(lost.err.find("gone.txt") != std::string::npos);
  CHECK(lost.err.find("give --text where it is now") != std::string::npos);  // it was told of an option it lacked
  CHECK(!fs::exists(p + "/l.h5"));
  Result here = heed_cli(test::cat({"run", "compression", "--charlm", t.lm, "--out", p + "/a.h5"}, sweep), p);
  Result there = heed_cli(test::cat({"run", "compression", "--charlm", p + "/moved.ckpt.h5", "--text", moved, "--out",
                                     p + "/b.h5"},
                                    sweep),
                          p);
  INFO(here.out << here.err << there.out << there.err);
  REQUIRE(here.status == 0);
  REQUIRE(there.status == 0);
  auto baseline = [](const std::string& log) {
    return h5::File(log, h5::File::Mode::read).read_tensor("baseline/charlm/val_loss").item();
  };
  CHECK(baseline(p + "/b.h5") == baseline(p + "/a.h5"));
  CHECK(h5::attr_str(h5::File(p + "/b.h5", h5::File::Mode::read).get_attr("/", "config.text")) ==
        fs::absolute(moved).lexically_normal().string());
  // Another text than the run's is refused by its fingerprint, naming --text; --text without --charlm too.
  {
    std::ofstream f(p + "/other.txt");
    for (int i = 0; i < 60; ++i) f << "And God said, Let there be light: and there was light. The quick brown fix. ";
  }
  Result other = heed_cli(test::cat({"run", "compression", "--charlm", p + "/moved.ckpt.h5", "--text", p + "/other.txt",
                                     "--out", p + "/o.h5"},
                                    sweep),
                          p);
  INFO(other.err);
  CHECK(other.status == 1);
  CHECK(other.err.find("run compression: --text '" + p + "/other.txt' is not the text checkpoint") !=
        std::string::npos);
  CHECK(!fs::exists(p + "/o.h5"));
  Result alone = heed_cli(test::cat({"run", "compression", "--shapes", t.shapes, "--text", moved, "--out", p + "/s.h5"},
                                    sweep),
                          p);
  CHECK(alone.status == 2);
  CHECK(alone.err.find("run compression: --text '" + moved + "' gives the text of the --charlm checkpoint's run") !=
        std::string::npos);
  CHECK(!fs::exists(p + "/s.h5"));
}

TEST_CASE("heed run compression refuses to resume with another --charlm or --shapes model than the one it began "
          "with, and resumes with that one") {
  Trained& t = trained();
  test::TempDir d("heed-compression-resume-");
  const std::string p = d.path;
  for (const std::string label : {"charlm", "shapes"}) {
    CAPTURE(label);
    const std::string model = p + "/" + label + ".ckpt.h5", log = p + "/" + label + "_c.h5";
    const std::string ck = p + "/" + label + "_c.ckpt.h5";
    fs::copy_file(label == "charlm" ? t.lm : t.shapes, model);
    Result first = heed_cli({"run", "compression", "--" + label, model, "--methods", "uniform", "--bits", "2,4,8",
                             "--threads", "1", "--no-plot", "--out", log, "--stop-after", "1"},
                            p);
    INFO(first.out << first.err);
    REQUIRE(first.status == 130);
    // The file now holds another model: trained further (charlm: its step
    // moved on too) or another run's. It resumed, and its table mixed the
    // cells of both models under the first one's baseline.
    fs::copy_file(model, p + "/original.ckpt.h5", fs::copy_options::overwrite_existing);
    {
      Checkpoint c = load_checkpoint(model, label);
      Tensor& w = c.tensors.at(label == "charlm" ? "model/wte.weight" : "model/attention/2.weight");
      std::vector<float> v = w.to_vector<float>();
      v[0] += 0.5f;
      w = Tensor::from(v, w.shape());
      if (label == "charlm") c.counters["step"] += 10;
      save_checkpoint(model, c);
    }
    const auto before = snapshot(p);
    Result again = heed_cli({"run", "compression", "--resume", ck, "--threads", "1"}, p);
    INFO(again.out << again.err);
    CHECK(again.status == 1);
    CHECK(again.err.rfind("heed: run compression: --" + label + " '" + model +
                              "' is not the model this run started with: its weights differ from those checkpoint '" +
                              ck + "' recorded",
                          0) == 0);
    CHECK(std::count(again.err.begin(), again.err.end(), '\n') == 1);
    if (label == "charlm")
      CHECK(again.err.find("(it holds step 40 of its run, the sweep began with step 30)") != std::string::npos);
    CHECK(again.out.find("[2/3]") == std::string::npos);
    CHECK(snapshot(p) == before);
    // The model it began with: resumed, and finished.
    fs::copy_file(p + "/original.ckpt.h5", model, fs::copy_options::overwrite_existing);
    Result back = heed_cli({"run", "compression", "--resume", ck, "--threads", "1"}, p);
    INFO(back.out << back.err);
    CHECK(back.status == 0);
    CHECK(back.out.find("[3/3]") != std::string::npos);
  }
}

TEST_CASE("heed run compression --rank leaves the matrices it does not fit in float32, for every method, saying so") {
  Trained& t = trained();
  test::TempDir d("heed-compression-rank-");
  // Every --rank >= 2 was refused: the last convolution, [1, 64, 5], has rank 1 at most.
  Result r = heed_cli({"run", "compression", "--shapes", t.shapes, "--methods", "uniform,lplr", "--bits", "4", "--rank",
                       "2", "--threads", "1", "--no-plot", "--out", d.path + "/r.h5"},
                      d.path);
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("shapes: kept in float32 by every method: 7.weight [1, 64, 5] (a smaller side below --rank 2, "
                   "which lplr needs)") != std::string::npos);
  h5::File f(d.path + "/r.h5", h5::File::Mode::read);
  CHECK(h5::attr_str(f.get_attr("/", "shapes_kept")) == "7.weight");
  // lplr at rank 2 quantized the rest: a cell was measured.
  CHECK(f.read_tensor("metrics/shapes/lplr/rel_error").to_vector<double>().size() == 3);
}

TEST_CASE("heed run compression checks HEED_PYTHON before its work when it will draw the figure") {
  Trained& t = trained();
  test::TempDir d("heed-compression-python-");
  const std::string p = d.path;
  auto sweep_to = [&](const std::string& log) {
    return std::vector<std::string>{"run", "compression", "--charlm", t.lm, "--methods", "uniform", "--bits", "8",
                                    "--threads", "1", "--out", log};
  };
  const std::vector<std::string> sweep = sweep_to(p + "/c.h5");
  {
    // It ran every cell, then said "note: no plot was drawn".
    test::EnvFor python("HEED_PYTHON", "/nonexistent/python3");
    Result r = heed_cli(sweep, p);
    INFO(r.out << r.err);
    CHECK(r.status == 2);
    CHECK(r.err.rfind("heed: run compression: HEED_PYTHON='/nonexistent/python3': ", 0) == 0);
    CHECK(r.err.find("--no-plot") != std::string::npos);
    CHECK(r.out.find("[1/1]") == std::string::npos);
    CHECK(!fs::exists(p + "/c.h5"));
    CHECK(!fs::exists(p + "/c.ckpt.h5"));
    // Without the figure it does not matter.
    Result n = heed_cli(test::cat(sweep, {"--no-plot"}), p);
    INFO(n.out << n.err);
    CHECK(n.status == 0);
  }
  {
    test::EnvFor python("HEED_PYTHON", "/etc/passwd");
    Result r = heed_cli(sweep_to(p + "/e.h5"), p);
    INFO(r.out << r.err);
    CHECK(r.status == 2);
    CHECK(r.err.find("HEED_PYTHON='/etc/passwd' is not an executable program") != std::string::npos);
    CHECK(!fs::exists(p + "/e.h5"));
  }
  {
    // A program that is no Python: the message was a shell's many lines of usage.
    test::EnvFor python("HEED_PYTHON", "/bin/bash");
    Result r = heed_cli(sweep_to(p + "/b.h5"), p);
    INFO(r.out << r.err);
    CHECK(r.status == 2);
    CHECK(r.err.rfind("heed: run compression: HEED_PYTHON='/bin/bash' cannot run the plotting script (exit status 2: ",
                      0) == 0);
    CHECK(r.err.find("expected a Python 3 interpreter") != std::string::npos);
    CHECK(r.err.find('\n') == r.err.size() - 1);  // one line
    CHECK(!fs::exists(p + "/b.h5"));
  }
}
