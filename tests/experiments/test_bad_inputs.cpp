// tests/experiments/test_bad_inputs.cpp: the `heed` program given bad input,
// as a user would give it: every case ends with `heed: ...` naming the value
// or file and what was expected, exit status 1 (2 for a bad command line),
// never `terminate called`, and no file written. Then the cases that used to
// be refused and are now accepted.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "core/safetensors.h"
#include "data/checkpoint.h"
#include "data/h5.h"
#include "experiments/common.h"
#include "resume_check.h"
#include "spawn.h"
#include "test_util.h"

using namespace heed;
using test::heed_cli;
using test::snapshot;
namespace fs = std::filesystem;

namespace {

using test::cat;
using test::Result;
using test::slurp;

const std::vector<std::string> kTinyLM = {"--layers", "1", "--heads", "2", "--width", "16", "--context", "16",
                                          "--batch", "4", "--eval-every", "2", "--eval-batches", "1"};

}  // namespace

TEST_CASE("bad inputs: each gives its message and status, never 'terminate called', and changes no file") {
  test::TempDir d("heed-bad-");
  const std::string p = d.path;
  const std::string text = p + "/t.txt";
  {
    std::ofstream f(text);
    for (int i = 0; i < 100; ++i) f << "the quick brown fox jumps over the lazy dog. ";
  }
  // A run to resume, and files made bad on purpose.
  REQUIRE(heed_cli(cat({"run", "charlm", "--text", text, "--steps", "6", "--stop-after", "2", "--out", p + "/lm.h5"},
                       kTinyLM),
                   p)
              .status == 130);
  const std::string ckpt = p + "/lm.ckpt.h5";
  const std::string longname = p + "/" + std::string(300, 'a') + ".h5";
  fs::create_symlink(p + "/loop1", p + "/loop2");
  fs::create_symlink(p + "/loop2", p + "/loop1");
  {  // someone's own data in HDF5: no writer of heed's replaces it
    h5::File f(p + "/data.h5", h5::File::Mode::create);
    f.write_tensor("x", Tensor::from_f64({1, 2, 3}, {3}));
  }
  // Another run of the same experiment (another seed), whose log a resume must not take.
  REQUIRE(heed_cli(cat({"run", "charlm", "--text", text, "--steps", "2", "--seed", "7", "--out", p + "/lm7.h5"},
                       kTinyLM),
                   p)
              .status == 0);
  {
    Checkpoint c = load_checkpoint(ckpt, "charlm");
    c.config["layers"] = "two";
    save_checkpoint(p + "/badconfig.ckpt.h5", c);
  }
  {
    Checkpoint c = load_checkpoint(ckpt, "charlm");  // a diverged run: NaN weights, valid checksums
    Tensor& w = c.tensors.at("model/lm_head.weight");
    w = Tensor::full(w.shape(), std::numeric_limits<double>::quiet_NaN(), w.dtype());
    save_checkpoint(p + "/nan.ckpt.h5", c);
    safetensors::save(p + "/nanw.safetensors", c.get("model"));  // as a diverged run's weights from elsewhere
    // float64 weights, finite, one of them beyond float32's range.
    std::map<std::string, Tensor> big = load_checkpoint(ckpt, "charlm").get("model");
    for (auto& [k, t] : big) t = kernel::to_dtype(t, DType::f64);
    big.at("lm_head.weight").data<double>()[3] = -1e300;
    safetensors::save(p + "/bigw.safetensors", big);
  }
  {
    Checkpoint c = load_checkpoint(ckpt, "charlm");  // a tokenizer that is no text (valid checksums)
    Tensor cp = kernel::clone(c.tensors.at("tokenizer/codepoints"));
    cp.data<int64_t>()[0] = -5;
    c.tensors.at("tokenizer/codepoints") = cp;
    save_checkpoint(p + "/badtok.ckpt.h5", c);
  }

  struct Case {
    std::string what;
    std::vector<std::string> args;
    int status;
    std::vector<std::string> message;
  };
  std::string names;  // "charlm, copy, ...": every experiment of the table, in its order
  for (const auto& e : experiments::experiments()) names += (names.empty() ? "" : ", ") + std::string(e.name);
  const std::vector<Case> cases = {
      {"unknown command", {"frobnicate"}, 2, {"unknown command 'frobnicate'"}},
      {"no command", {}, 2, {"expected a command", "usage: heed <command>"}},
      {"info with an option", {"info", "--verbose"}, 2, {"info takes no options, got '--verbose'"}},
      {"inspect: an unknown option", {"inspect", p + "/lm.h5", "--bogus"}, 2, {"unknown option '--bogus'"}},
      {"inspect: no file", {"inspect", "--full"}, 2, {"expects a file"}},
      {"plot: -o without a value", {"plot", p + "/lm.h5", "-o"}, 2, {"plot: --out expects a value"}},
      {"plot: an empty --out=", {"plot", p + "/lm.h5", "--out="}, 2, {"plot: --out expects a value", "empty"}},
      {"plot: two files", {"plot", p + "/lm.h5", p + "/lm.h5"}, 2, {"unexpected argument"}},
      {"sample: an option where --prompt's text was expected", {"sample", ckpt, "--prompt", "--tokens", "5"}, 2,
       {"--prompt expects a value", "got the option '--tokens'", "--prompt=VALUE"}},
      {"run: an option where --out's path was expected", {"run", "sine", "--out", "--steps", "2"}, 2,
       {"--out expects a value", "'--steps'"}},
      {"sample: no checkpoint", {"sample", "--tokens", "5"}, 2, {"expected a checkpoint path"}},
      {"export: two checkpoints", {"export", ckpt, ckpt}, 2, {"unexpected argument"}},
      {"bench: an unknown workload", {"bench", "--only", "toy-cnn,bogus"}, 2, {"--only", "'bogus'", "gpt-128"}},
      {"bench: --rounds without --compare", {"bench", "--rounds", "3"}, 2, {"--rounds 3 alternates heed with PyTorch", "--compare"}},
      {"bench: an unknown --isa", {"bench", "--isa", "sse9"}, 2, {"--isa", "'sse9'", "avx2"}},
      {"bench: an option its mode ignored", {"bench", "--attention-memory", "--conv", "direct"}, 2,
       {"--attention-memory does not use --conv"}},
      {"bench: --max-t without --attention-memory", {"bench", "--max-t", "512"}, 2,
       {"training-step benchmark", "does not use --max-t"}},
      {"bench: two benchmarks at once", {"bench", "--attention-memory", "--load"}, 2, {"expected one of them"}},
      {"bench: --no-avx2-pass without --compare", {"bench", "--no-avx2-pass"}, 2, {"--no-avx2-pass is for --compare"}},
      {"bench: --dropout with --data-parallel", {"bench", "--data-parallel", "--dropout", "0.1"}, 2,
       {"--data-parallel (1 x 2 and 2 x 1 threads) does not use --dropout"}},
      {"bench: --dropout 1", {"bench", "--dropout", "1"}, 2, {"--dropout expects a number in [0, 1), got '1'"}},
      {"bench: --threads with --data-parallel", {"bench", "--data-parallel", "--threads", "1"}, 2,
       {"--data-parallel (1 x 2 and 2 x 1 threads) does not use --threads"}},
      {"charlm: --dropout 1", cat({"run", "charlm", "--text", text, "--dropout", "1", "--out", p + "/x.h5"}, kTinyLM), 2,
       {"--dropout expects a number in [0, 1), got '1'"}},
      {"charlm: --min-lr above --lr",
       cat({"run", "charlm", "--text", text, "--lr", "0.001", "--min-lr", "0.01", "--out", p + "/x.h5"}, kTinyLM), 2,
       {"--min-lr 0.01 exceeds --lr 0.001"}},
      {"unknown experiment", {"run", "nope"}, 2, {"unknown experiment 'nope'", names}},
      {"bad number", {"run", "copy", "--steps", "ten"}, 2, {"--steps", "'ten'", "integer"}},
      {"unknown option", {"run", "sine", "--epochs", "3"}, 2, {"unknown option '--epochs'"}},
      {"--out naming a directory to create", {"run", "sine", "--steps", "2", "--out", p + "/newdir/"}, 2,
       {"newdir/' is a directory", "expected a file path"}},
      {"--checkpoint equal to --out",
       {"run", "sine", "--out", p + "/same.h5", "--checkpoint", p + "/same.h5"},
       2,
       {"same.h5", "two files"}},
      {"300-character --out", {"run", "sine", "--out", longname}, 2,
       {"--out", "aaaaaaaa", "has 303 bytes; expected at most 250 (the filesystem's limit of 255"}},
      {"300-character --resume", {"run", "sine", "--resume", longname}, 1, {"aaaaaaaa"}},
      // A resumable run's checkpoint lock's name (the resume removes it).
      {"--checkpoint a lock file's name", {"run", "sine", "--out", p + "/s.h5", "--checkpoint", ckpt + ".lock"}, 2,
       {"run sine: --checkpoint '" + ckpt + ".lock' ends in '.lock'", "expected another name"}},
      {"300-character --text", cat({"run", "charlm", "--text", longname, "--out", p + "/x.h5"}, kTinyLM), 1, {"aaaaaaaa"}},
      {"symlink loop as --text", cat({"run", "charlm", "--text", p + "/loop1", "--out", p + "/x.h5"}, kTinyLM), 1, {"loop1"}},
      {"symlink loop as --resume", {"run", "charlm", "--resume", p + "/loop1"}, 1, {"loop1"}},
      {"symlink loop as --out", {"run", "sine", "--out", p + "/loop1"}, 2, {"--out", "loop1"}},
      {"a log as checkpoint", {"run", "charlm", "--resume", p + "/lm.h5"}, 1, {"lm.h5", "not a heed checkpoint"}},
      {"sample: a non-numeric config value", {"sample", p + "/badconfig.ckpt.h5"}, 1,
       {"config.layers is 'two'", "integer"}},
      {"sample: a missing checkpoint", {"sample", p + "/none.ckpt.h5"}, 1, {"none.ckpt.h5"}},
      {"--text a device (read forever)", {"run", "charlm", "--text", "/dev/zero", "--out", p + "/nd/x.h5"}, 1,
       {"'/dev/zero' is a device"}},
      {"--init-from a device (read forever)", {"run", "sine", "--init-from", "/dev/zero", "--out", p + "/nd/x.h5"}, 1,
       {"'/dev/zero' is a device"}},
      {"a refused run makes no directory", {"run", "sine", "--precision", "fp8", "--out", p + "/nd/x.h5"}, 2,
       {"--precision", "'fp8'"}},
      {"--out the file --text reads", {"run", "charlm", "--text", text, "--out", text}, 2,
       {"--out '" + text + "' is the file --text reads"}},
      {"--out another experiment's checkpoint", {"run", "sine", "--out", ckpt}, 2,
       {"is a heed checkpoint of the 'charlm' experiment", "expected a new file"}},
      {"--checkpoint another experiment's log", {"run", "sine", "--out", p + "/s.h5", "--checkpoint", p + "/lm.h5"}, 2,
       {"is a heed run log of the 'charlm' experiment"}},
      {"--out a file that is not HDF5", {"run", "sine", "--out", text}, 2, {"'" + text + "' is a file that is not heed's (neither HDF5 nor safetensors), which this would replace with a log"}},
      {"an integer with a sign or a space (strtoll took them)", {"run", "sine", "--steps", "+5", "--out", p + "/x.h5"}, 2,
       {"--steps expects an integer >= 1, got '+5'"}},
      {"a hexadecimal number (strtod took 0x10 as 16)", {"run", "sine", "--lr", "0x10", "--out", p + "/x.h5"}, 2,
       {"--lr expects a number > 0, got '0x10'"}},
      {"the same new file as --out and --checkpoint under two spellings", {"run", "sine", "--out", "n2.h5", "--checkpoint",
                                                                            "./n2.h5"},
       2, {"they must be two files"}},
      {"quantize -o the text the checkpoint was trained on", {"quantize", ckpt, "--bits", "4", "-o", text}, 2,
       {"quantize: --out '" + text + "' is a file that is not heed's (neither HDF5 nor safetensors)", "one quantize wrote before"}},
      {"export -o a text file", {"export", ckpt, "-o", text}, 2, {"export: --out", "is a file that is not heed's (neither HDF5 nor safetensors), which this would replace with a safetensors file"}},
      {"attend -o an HDF5 file that is not heed's", {"attend", ckpt, "--prompt", "the ", "-o", p + "/data.h5"}, 2,
       {"attend: --out", "data.h5' is an HDF5 file that is not heed's"}},
      {"--out an HDF5 file that is not heed's", {"run", "sine", "--out", p + "/data.h5"}, 2,
       {"run sine: --out", "an HDF5 file that is not heed's"}},
      {"attend -o a text file", {"attend", ckpt, "--prompt", "the ", "-o", text}, 2, {"attend: --out", "not heed's (neither HDF5 nor safetensors)"}},
      {"a logged map's length beyond its bound", {"run", "copy", "--length", "4097", "--out", p + "/x.h5"}, 2,
       {"--length expects an integer in 2..4096, got '4097'"}},
      {"size beyond its bound", {"run", "charlm", "--layers", "100000000", "--out", p + "/x.h5"}, 2,
       {"--layers expects an integer in 1..256, got '100000000'"}},
      {"a prompt character outside the vocabulary", {"sample", ckpt, "--prompt", "QZ"}, 2,
       {"sample: --prompt \"QZ\"", "'Q'", "not in the vocabulary", "lm.ckpt.h5"}},
      // It was printed raw: the newline split the message over two lines.
      {"a prompt with a control character outside the vocabulary", {"sample", ckpt, "--prompt", "th\ne\x01"}, 2,
       {"sample: --prompt \"th\\ne\\x01\": control character (U+000A) at position 2"}},
      {"resume NaN weights (trained on NaN with status 0)", {"run", "charlm", "--resume", p + "/nan.ckpt.h5", "--steps", "4"}, 1,
       {"nan.ckpt.h5", "model/lm_head.weight", "not finite", "diverged by step 2"}},
      {"sample: NaN weights", {"sample", p + "/nan.ckpt.h5"}, 1,
       {"nan.ckpt.h5", "parameter lm_head.weight holds values that are not finite"}},
      {"--init-from NaN weights (the run trained on NaN with status 0)",
       cat({"run", "charlm", "--text", text, "--steps", "2", "--init-from", p + "/nanw.safetensors", "--out",
            p + "/fromnan.h5"},
           kTinyLM),
       1, {"--init-from", "nanw.safetensors", "lm_head.weight", "NaN or infinite"}},
      {"--init-from float64 weights beyond float32's range (they loaded as infinities)",
       cat({"run", "charlm", "--text", text, "--steps", "2", "--init-from", p + "/bigw.safetensors", "--out",
            p + "/frombig.h5"},
           kTinyLM),
       1, {"--init-from", "bigw.safetensors", "'lm_head.weight' holds -1e+300, outside float32's range"}},
      {"sample: a tokenizer that is no text", {"sample", p + "/badtok.ckpt.h5"}, 1,
       {"badtok.ckpt.h5", "tokenizer/codepoints", "-5 is not a Unicode code point"}},
      {"export: NaN weights", {"export", p + "/nan.ckpt.h5", "-o", p + "/nan.safetensors"}, 1,
       {"export: checkpoint", "not finite"}},
      {"export: a bad configuration", {"export", p + "/badconfig.ckpt.h5", "-o", p + "/bad.safetensors"}, 1,
       {"config.layers is 'two'"}},
      {"inspect: a missing file", {"inspect", p + "/none.h5"}, 1, {"none.h5"}},
      {"bad --precision", {"run", "copy", "--precision", "fp16", "--out", p + "/x.h5"}, 2,
       {"--precision", "'fp16'", "f32 or bf16"}},
      {"resume in another precision", {"run", "charlm", "--resume", ckpt, "--precision", "bf16"}, 2,
       {"--precision bf16 contradicts the checkpoint's f32"}},
      {"resume with a changed option", {"run", "charlm", "--resume", ckpt, "--lr", "0.5"}, 2,
       {"--lr 0.5 contradicts the checkpoint's 0.001",
        "only --checkpoint, --checkpoint-every, --out, --steps, --stop-after, --threads may change"}},
      {"resume with --stop-after at the checkpoint's step", {"run", "charlm", "--resume", ckpt, "--stop-after", "2"},
       2, {"--stop-after 2 is not after step 2", "expected a later step"}},
      {"resume into another run's log", {"run", "charlm", "--resume", ckpt, "--out", p + "/lm7.h5"}, 1,
       {"the log '" + p + "/lm7.h5' is another run's than checkpoint", "with: heed run charlm", "--seed 7",
        "--out NEW.h5"}},
      // Commands that write beside the checkpoint they read never write over
      // it, nor over a training run's log.
      {"export over its checkpoint", {"export", ckpt, "-o", ckpt}, 2, {"lm.ckpt.h5", "is the checkpoint being read"}},
      {"export over a run log", {"export", ckpt, "-o", p + "/lm.h5"}, 2,
       {"lm.h5", "is a heed run log of the 'charlm' experiment", "safetensors"}},
      {"attend over its checkpoint", {"attend", ckpt, "--prompt", "the q", "--out", ckpt}, 2,
       {"is the checkpoint being read"}},
      {"attend over a run log", {"attend", ckpt, "--prompt", "the q", "--out", p + "/lm.h5"}, 2,
       {"is a heed run log of the 'charlm' experiment"}},
      {"quantize over a run log", {"quantize", ckpt, "--method", "uniform", "--bits", "4", "-o", p + "/lm.h5"}, 2,
       {"is a heed run log of the 'charlm' experiment", "a quantized checkpoint"}},
      {"export -o without a value", {"export", ckpt, "-o"}, 2, {"--out expects a value"}},
      {"export -o ''", {"export", ckpt, "-o", ""}, 2, {"--out expects a value, got an empty string"}},
      {"export -o a directory", {"export", ckpt, "-o", p + "/"}, 2, {"export: --out", "is a directory"}},
      // Its directory was made, then the write failed ("File name too long") and left it.
      {"export -o a name too long, in a new directory",
       {"export", ckpt, "-o", p + "/nd/" + std::string(245, 'x') + ".safetensors"}, 2,
       {"export: --out '", "': the file name 'xxxx", "has 257 bytes; expected at most 250"}},
      {"export -o in a file", {"export", ckpt, "-o", ckpt + "/x.safetensors"}, 2,
       {"export: cannot write --out", "Not a directory"}},
      // An option given twice took its last value without a word.
      {"an option given twice", {"run", "sine", "--steps", "5", "--steps", "7", "--out", p + "/x.h5"}, 2,
       {"run sine: --steps is given twice; expected it once"}},
      {"an option given twice, the second as --name=value", {"sample", ckpt, "--tokens", "5", "--tokens=7"}, 2,
       {"heed: sample: --tokens is given twice"}},  // was "sample CHECKPOINT: ", unlike every other command
      {"an option given by its short and its long name", {"export", ckpt, "-o", p + "/a.safetensors", "--out",
                                                           p + "/b.safetensors"},
       2, {"export: --out is given twice"}},
      {"a flag given twice", {"run", "compression", "--charlm", ckpt, "--no-plot", "--no-plot", "--out", p + "/c.h5"}, 2,
       {"--no-plot is given twice"}},
      // Past int64, the message named only the lower bound.
      {"sample: --seed beyond the largest integer", {"sample", ckpt, "--seed", "9223372036854775808"}, 2,
       {"--seed expects an integer in 0..9223372036854775807, got '9223372036854775808'"}},
      {"run: --steps beyond the largest integer", {"run", "sine", "--steps", "99999999999999999999", "--out", p + "/x.h5"},
       2, {"--steps expects an integer in 1..9223372036854775807"}},
      // Run's --init-from, listed by run compression's --help and always refused after the work began.
      {"run compression --init-from", {"run", "compression", "--charlm", ckpt, "--init-from", p + "/w.safetensors",
                                        "--out", p + "/c.h5"},
       2, {"run compression: --init-from does not apply", "trains no model"}},
      {"sample: a prompt that is not UTF-8", {"sample", ckpt, "--prompt", "th\xff\xfe" "e"}, 2,
       {"sample: --prompt 'th\\xFF\\xFEe' is not UTF-8", "expected UTF-8 text"}},
      {"attend: a prompt that is not UTF-8 (a Latin-1 e-acute)", {"attend", ckpt, "--prompt", "caf\xe9 the"}, 2,
       {"attend: --prompt 'caf\\xE9 the' is not UTF-8"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    const auto before = snapshot(p);
    Result r = heed_cli(c.args, p);
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    CHECK(r.status == c.status);
    CHECK(r.err.rfind("heed: ", 0) == 0);
    for (const auto& m : c.message) CHECK(r.err.find(m) != std::string::npos);
    CHECK(r.err.find("terminate called") == std::string::npos);
    CHECK(r.err.find('\xff') == std::string::npos);  // a bad byte is shown as \xFF, not written as it is
    CHECK(r.err.find('\xe9') == std::string::npos);
    CHECK(snapshot(p) == before);
  }
  // run compression trains no model: its help does not offer --init-from.
  {
    Result r = heed_cli({"run", "compression", "--help"}, p);
    CHECK(r.status == 0);
    CHECK(r.out.find("--charlm") != std::string::npos);
    CHECK(r.out.find("--init-from") == std::string::npos);
    Result c = heed_cli({"run", "charlm", "--help"}, p);  // the runs that train one still do
    CHECK(c.out.find("--init-from") != std::string::npos);
  }
  CHECK_FALSE(fs::exists(p + "/newdir"));  // refused before it was made (snapshot sees files only)
  CHECK_FALSE(fs::exists(p + "/nd"));
  // bf16 on a CPU without it (here: capped to AVX2, as on an AVX2-only
  // machine): refused naming the instruction sets, nothing written.
  {
    const auto before = snapshot(p);
    // The suite may itself run under HEED_CPU_ISA (the AVX2 path): put it back.
    const char* had = std::getenv("HEED_CPU_ISA");
    const std::string was = had ? had : "";
    setenv("HEED_CPU_ISA", "avx2", 1);
    Result r = heed_cli({"run", "copy", "--precision", "bf16", "--out", p + "/bf.h5"}, p);
    if (had) setenv("HEED_CPU_ISA", was.c_str(), 1);
    else unsetenv("HEED_CPU_ISA");
    INFO("stderr: " << r.err);
    CHECK(r.status == 2);
    CHECK(r.err.find("--precision bf16: bf16 needs a CPU with AVX512-BF16") != std::string::npos);
    CHECK(r.err.find("AVX2") != std::string::npos);
    CHECK(snapshot(p) == before);
  }
  // A bf16 run resumed where bf16 does not run: "use float32" is no advice
  // for a run that resumes in the precision it began with. (Its checkpoint
  // needs a CPU with AVX512-BF16 to be made.)
  if (test::bf16_here()) {
    REQUIRE(heed_cli({"run", "copy", "--precision", "bf16", "--steps", "2", "--out", p + "/bf16.h5"}, p).status == 0);
    const auto before = snapshot(p);
    const char* had = std::getenv("HEED_CPU_ISA");
    const std::string was = had ? had : "";
    setenv("HEED_CPU_ISA", "avx2", 1);
    Result r = heed_cli({"run", "copy", "--resume", p + "/bf16.ckpt.h5", "--steps", "4"}, p);
    if (had) setenv("HEED_CPU_ISA", was.c_str(), 1);
    else unsetenv("HEED_CPU_ISA");
    INFO("stderr: " << r.err);
    CHECK(r.status == 2);
    CHECK(r.err.find("has --precision bf16, which it resumes with: bf16 needs a CPU with AVX512-BF16") !=
          std::string::npos);
    CHECK(r.err.find("use float32") == std::string::npos);
    CHECK(r.err.find("heed export " + p + "/bf16.ckpt.h5, then --init-from") != std::string::npos);
    CHECK(snapshot(p) == before);
  }
}

TEST_CASE("writers replace only regular files: a device or FIFO is refused and stays, a link keeps leading to "
          "the new file") {
  test::TempDir d("heed-targets-");
  const std::string p = d.path;
  REQUIRE(heed_cli({"run", "copy", "--steps", "4", "--out", p + "/c.h5"}, p).status == 0);
  const std::string ckpt = p + "/c.ckpt.h5";
  REQUIRE(mkfifo((p + "/fifo").c_str(), 0644) == 0);
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Case& c : {Case{{"export", ckpt, "-o", p + "/fifo"}, "export: --out '" + p + "/fifo' is not a regular file"},
                        Case{{"run", "copy", "--steps", "4", "--out", p + "/t.h5", "--checkpoint", p + "/fifo"},
                             "run copy: --checkpoint '" + p + "/fifo' is not a regular file"},
                        Case{{"export", ckpt, "-o", "/dev/null"}, "--out '/dev/null' is not a regular file"},
                        // The log's writer waited on the FIFO forever.
                        Case{{"run", "copy", "--steps", "4", "--out", p + "/fifo"}, "fifo' is not a regular file"}}) {
    CAPTURE(c.args);
    Result r = heed_cli(c.args, p);
    INFO(r.err);
    CHECK(r.status == 2);
    CHECK(r.err.find(c.message) != std::string::npos);
    CHECK(fs::is_fifo(p + "/fifo"));
    CHECK(!fs::exists(p + "/t.h5"));  // refused before the run's log was begun
    CHECK(fs::is_character_file("/dev/null"));
  }
  // Through a link (to a file not there yet): the link stays, its target is written.
  fs::create_symlink("target.safetensors", p + "/link.safetensors");
  Result r = heed_cli({"export", ckpt, "-o", p + "/link.safetensors"}, p);
  INFO(r.err);
  CHECK(r.status == 0);
  CHECK(fs::is_symlink(p + "/link.safetensors"));
  CHECK(safetensors::load(p + "/target.safetensors").tensors.size() > 0);
  // Into directories not there yet, made as every other writer makes them.
  r = heed_cli({"export", ckpt, "-o", p + "/new/dir/c.safetensors"}, p);
  INFO(r.err);
  CHECK(r.status == 0);
  CHECK(safetensors::load(p + "/new/dir/c.safetensors").tensors.size() > 0);
  // Readers of HDF5 files given a FIFO: they waited for a writer for ever.
  for (const std::vector<std::string>& args : {std::vector<std::string>{"inspect", p + "/fifo"},
                                               {"export", p + "/fifo"},
                                               {"sample", p + "/fifo"},
                                               {"quantize", p + "/fifo", "--method", "uniform", "--bits", "4"},
                                               {"run", "copy", "--resume", p + "/fifo"}}) {
    CAPTURE(args);
    Result rr = heed_cli(args, p);
    INFO(rr.err);
    CHECK(rr.status == 1);
    CHECK(rr.err.find("fifo' is not") != std::string::npos);
  }
}

TEST_CASE("a run's log and checkpoint are its own while it runs: a second run on them is refused") {
  test::TempDir d("heed-live-");
  const std::string p = d.path;
  // A run that goes on until interrupted.
  const pid_t live = test::start({HEED_CLI_PATH, "run", "copy", "--steps", "100000000", "--checkpoint-every", "50",
                                  "--out", p + "/a.h5"},
                                 p + "/live.out", p + "/live.err");
  // Begun (its log locked) and past its first checkpoint.
  auto going = [&] {
    return slurp(p + "/live.out").find("logging to") != std::string::npos && fs::exists(p + "/a.ckpt.h5");
  };
  for (int i = 0; i < 6000 && !going(); ++i) usleep(10000);
  REQUIRE(going());
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Case& c : {Case{{"run", "copy", "--steps", "3", "--out", p + "/a.h5"},
                             "the log '" + p + "/a.h5' is being written by a run that is still going"},
                        Case{{"run", "sine", "--steps", "3", "--out", p + "/b.h5", "--checkpoint", p + "/a.ckpt.h5"},
                             "--checkpoint '" + p + "/a.ckpt.h5' is the checkpoint of the run writing"},
                        Case{{"run", "copy", "--resume", p + "/a.ckpt.h5"}, "is being written by a run that is still going"}}) {
    CAPTURE(c.args);
    Result r = heed_cli(c.args, p);
    INFO(r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find(c.message) != std::string::npos);
  }
  CHECK(!fs::exists(p + "/b.h5"));
  kill(live, SIGINT);
  CHECK(test::wait_status(live) == 130);
  // Ended, the run's files are free again: its own resume goes on.
  const int64_t at = load_checkpoint(p + "/a.ckpt.h5", "copy").counter("step");
  Result r = heed_cli({"run", "copy", "--resume", p + "/a.ckpt.h5", "--stop-after", std::to_string(at + 2)}, p);
  INFO(r.err);
  CHECK(r.status == 130);
}

TEST_CASE("a run's checkpoint is locked from its start: a second run on it is refused, naming the process") {
  // With --checkpoint-every 0 the first checkpoint comes at the end: a
  // second run given the same --checkpoint (and another --out) went ahead,
  // both wrote 'c.ckpt.h5' and its '.tmp', and one died in the middle.
  test::TempDir d("heed-ckpt-lock-");
  const std::string p = d.path, ck = p + "/c.ckpt.h5";
  const pid_t live = test::start({HEED_CLI_PATH, "run", "copy", "--steps", "100000000", "--checkpoint-every", "0",
                                  "--out", p + "/a.h5", "--checkpoint", ck},
                                 p + "/live.out", p + "/live.err");
  for (int i = 0; i < 6000 && slurp(p + "/live.out").find("logging to") == std::string::npos; ++i) usleep(10000);
  REQUIRE(slurp(p + "/live.out").find("logging to") != std::string::npos);
  REQUIRE(!fs::exists(ck));  // no checkpoint yet to tell whose it is
  CHECK(slurp(ck + ".lock") == std::to_string(live) + "\n" + p + "/a.h5\n");
  const std::string by = "a run that is still going (process " + std::to_string(live) + ")";
  auto names = [&] {
    std::set<std::string> n;
    for (const auto& e : fs::directory_iterator(p)) n.insert(e.path().filename().string());
    return n;
  };
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Case& c :
       {Case{{"run", "sine", "--steps", "3", "--out", p + "/b.h5", "--checkpoint", ck},
             "run sine: --checkpoint '" + ck + "' is being written by " + by + ", whose log is '" + p + "/a.h5'"},
        Case{{"run", "copy", "--steps", "3", "--out", ck}, "run copy: --out '" + ck + "' is the checkpoint of " + by},
        // Its log, though its checkpoint is not the log's default one: the
        // process was named only for a run with the default checkpoint (an
        // OFD lock does not tell its process: it is found by its lock).
        Case{{"run", "copy", "--steps", "3", "--out", p + "/b.h5", "--checkpoint", p + "/a.h5"},
             "run copy: --checkpoint '" + p + "/a.h5' is the log of " + by + "; expected another --checkpoint"},
        Case{{"run", "copy", "--steps", "3", "--out", p + "/a.h5"},
             "the log '" + p + "/a.h5' is being written by " + by + "; expected another --out"}}) {
    CAPTURE(c.args);
    const std::set<std::string> before = names();
    Result r = heed_cli(c.args, p);
    INFO(r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find(c.message) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(names() == before);  // nothing written (the live run's log grows meanwhile)
    CHECK(slurp(ck + ".lock") == std::to_string(live) + "\n" + p + "/a.h5\n");
  }
  // Killed, the run leaves its lock file and maybe a half-written '.tmp',
  // but no lock: the next run takes both over, and removes its lock at the end.
  kill(live, SIGKILL);
  CHECK(test::wait_status(live) == 128 + SIGKILL);
  CHECK(fs::exists(ck + ".lock"));
  std::ofstream(ck + ".tmp") << "half a checkpoint";
  Result r = heed_cli({"run", "copy", "--steps", "3", "--out", p + "/b.h5", "--checkpoint", ck}, p);
  INFO(r.err);
  CHECK(r.status == 0);
  CHECK(load_checkpoint(ck, "copy").counter("step") == 3);
  CHECK(!fs::exists(ck + ".lock"));
  CHECK(!fs::exists(ck + ".tmp"));
}

TEST_CASE("heed quantize and heed export take the output's lock: a running run's checkpoint, or another's output, "
          "is refused naming the process") {
  // They wrote without a lock. Every writer replaces its file through
  // "<file>.tmp": a second writer of the same file removed the first one's
  // half-written temporary file and wrote its own there, which the first
  // then moved into place; a run's checkpoint not yet written was taken by
  // a quantized one or a safetensors file.
  test::TempDir d("heed-out-lock-");
  const std::string p = d.path, ck = p + "/c.ckpt.h5";
  const std::string text = p + "/t.txt";
  {
    std::ofstream f(text);
    for (int i = 0; i < 100; ++i) f << "the quick brown fox jumps over the lazy dog. ";
  }
  REQUIRE(heed_cli(cat({"run", "charlm", "--text", text, "--steps", "2", "--out", p + "/lm.h5"}, kTinyLM), p).status ==
          0);
  const std::string lm = p + "/lm.ckpt.h5";
  auto names = [&] {
    std::set<std::string> n;
    for (const auto& e : fs::directory_iterator(p)) n.insert(e.path().filename().string());
    return n;
  };
  {
    // A run whose checkpoint comes at its end only: none there yet, but locked.
    const pid_t live = test::start({HEED_CLI_PATH, "run", "copy", "--steps", "100000000", "--checkpoint-every", "0",
                                    "--out", p + "/a.h5", "--checkpoint", ck},
                                   p + "/live.out", p + "/live.err");
    for (int i = 0; i < 6000 && slurp(p + "/live.out").find("logging to") == std::string::npos; ++i) usleep(10000);
    REQUIRE(slurp(p + "/live.out").find("logging to") != std::string::npos);
    REQUIRE(!fs::exists(ck));
    const std::string by =
        "is being written by a run that is still going (process " + std::to_string(live) + "), whose log is '" + p +
        "/a.h5'; expected another --out, or that run to end";
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"quantize", lm, "--method", "uniform", "--bits", "4", "-o", ck},
          std::vector<std::string>{"export", lm, "-o", ck}}) {
      CAPTURE(args);
      const std::set<std::string> before = names();
      Result r = heed_cli(args, p);
      INFO(r.out << r.err);
      CHECK(r.status == 1);
      CHECK(r.err.rfind("heed: " + args[0] + ": --out '" + ck + "' " + by, 0) == 0);
      CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
      CHECK(names() == before);  // nothing written (the live run's log grows meanwhile)
      CHECK(!fs::exists(ck));
    }
    kill(live, SIGINT);
    CHECK(test::wait_status(live) == 130);
    CHECK(load_checkpoint(ck, "copy").counter("step") > 0);  // the run's own checkpoint, as it wrote it
  }
  // While this process holds the lock as heed quantize would: a run, an
  // export and a quantize of that file are refused, naming it.
  const std::string q = p + "/q.ckpt.h5";
  {
    OutputLock held(q, "quantize", "--out");
    CHECK(slurp(q + ".lock") == std::to_string(::getpid()) + "\n\nheed quantize\n");
    const std::string by = "is being written by heed quantize (process " + std::to_string(::getpid()) + ")";
    struct Case {
      std::vector<std::string> args;
      std::string message;
    };
    for (const Case& c :
         {Case{{"run", "copy", "--steps", "2", "--out", p + "/b.h5", "--checkpoint", q},
               "heed: run copy: --checkpoint '" + q + "' " + by + "; expected another --checkpoint, or that command to end"},
          Case{{"export", lm, "-o", q}, "heed: export: --out '" + q + "' " + by + "; expected another --out, or that command"},
          Case{{"quantize", lm, "--method", "uniform", "--bits", "4", "-o", q},
               "heed: quantize: --out '" + q + "' " + by}}) {
      CAPTURE(c.args);
      const auto before = snapshot(p);
      Result r = heed_cli(c.args, p);
      INFO(r.out << r.err);
      CHECK(r.status == 1);
      CHECK(r.err.rfind(c.message, 0) == 0);
      CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
      CHECK(snapshot(p) == before);
    }
  }
  // Released, the file is free, and each writer removes its lock when done.
  CHECK(!fs::exists(q + ".lock"));
  Result r = heed_cli({"quantize", lm, "--method", "uniform", "--bits", "4", "-o", q}, p);
  INFO(r.out << r.err);
  CHECK(r.status == 0);
  CHECK(fs::exists(q));
  r = heed_cli({"export", lm, "-o", p + "/lm.safetensors"}, p);
  CHECK(r.status == 0);
  CHECK(!fs::exists(q + ".lock"));
  CHECK(!fs::exists(p + "/lm.safetensors.lock"));
}

TEST_CASE("a diverged run stops at its first non-finite loss or weights with status 1, and writes no checkpoint after") {
  // They trained on NaN to the last step with status 0, printed summaries
  // of NaN models (charlm advertised `heed sample`) and wrote NaN
  // checkpoints, which --resume trained on further.
  test::TempDir d("heed-diverge-");
  const std::string p = d.path;
  struct Case {
    std::vector<std::string> args;
  };
  for (const Case& c : {Case{{"run", "copy", "--steps", "20", "--eval-every", "10"}},
                        Case{{"run", "sine", "--steps", "50"}},
                        Case{{"run", "shapes", "--train", "200", "--test", "15", "--batch", "50", "--epochs", "2"}},
                        Case{{"run", "timeseries", "--steps", "20", "--eval-every", "10", "--test", "16", "--batch", "8"}},
                        Case{{"run", "scaling", "--steps", "20", "--eval-every", "10", "--seeds", "1", "--dk-max", "16",
                              "--queries", "16", "--keys", "8", "--dim", "16"}}}) {
    const std::string name = c.args[1];
    CAPTURE(name);
    std::vector<std::string> args = c.args;
    for (const std::string& a : {std::string("--lr"), std::string("1e6"), std::string("--checkpoint-every"),
                                 std::string("1"), std::string("--out"), p + "/" + name + ".h5"})
      args.push_back(a);
    Result r = heed_cli(args, p);
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    CHECK(r.status == 1);
    const size_t at = r.err.find("the run diverged at step ");
    REQUIRE(at != std::string::npos);
    const int64_t step = std::stoll(r.err.substr(at + 25));
    CHECK(r.err.find("holds step " + std::to_string(step - 1) + ", as it was") != std::string::npos);
    CHECK(r.out.find("final") == std::string::npos);  // no summary of a diverged model
    CHECK(load_checkpoint(p + "/" + name + ".ckpt.h5", name).counter("step") == step - 1);
    {  // readable, with every step up to the diverged one
      h5::File log(p + "/" + name + ".h5", h5::File::Mode::read);
      CHECK(log.has_attr("/", "run_id"));
    }
    // The checkpoint's weights are finite; from it the run diverges again, the same way.
    Result again = heed_cli({"run", name, "--resume", p + "/" + name + ".ckpt.h5"}, p);
    INFO("resumed: " << again.err);
    CHECK(again.status == 1);
    CHECK(again.err.find("the run diverged at step " + std::to_string(step)) != std::string::npos);
  }
}

TEST_CASE("charlm --text a named pipe: read as written; with no writer, SIGTERM ends the wait (143); sample and "
          "attend refuse to read it again") {
  test::TempDir d("heed-fifo-");
  const std::string p = d.path, fifo = p + "/pipe.txt";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto lm = [&](const std::string& out) {
    return cat({HEED_CLI_PATH, "run", "charlm", "--text", fifo, "--steps", "4", "--out", p + "/" + out}, kTinyLM);
  };
  // No writer: it said nothing and one SIGTERM (timeout's) could not end it.
  const pid_t waiting = test::start(lm("none.h5"), p + "/none.out", p + "/none.err");
  for (int i = 0; i < 1000 && test::slurp(p + "/none.out").find("waiting for the pipe") == std::string::npos; ++i)
    usleep(10000);
  CHECK(test::slurp(p + "/none.out").find("waiting for the pipe '" + fifo + "' to be written") != std::string::npos);
  kill(waiting, SIGTERM);
  CHECK(test::wait_status(waiting) == 143);
  CHECK(test::slurp(p + "/none.err").find("stopped by SIGTERM while waiting for the pipe") != std::string::npos);
  CHECK_FALSE(fs::exists(p + "/none.h5"));
  // A writer that comes later: the run reads what it writes, to its end.
  const pid_t run = test::start(lm("lm.h5"), p + "/lm.out", p + "/lm.err");
  usleep(300000);
  {
    std::ofstream w(fifo);  // waits for the run's open
    for (int i = 0; i < 100; ++i) w << "the quick brown fox jumps over the lazy dog. ";
  }
  INFO(test::slurp(p + "/lm.err"));
  REQUIRE(test::wait_status(run) == 0);
  // The pipe holds the text no more: sample and attend said nothing and waited.
  for (const std::string cmd : {"sample", "attend"}) {
    Result r = heed_cli({cmd, p + "/lm.ckpt.h5"}, p);
    CAPTURE(cmd);
    CHECK(r.status == 2);
    CHECK(r.err.find("its run's --text '" + fifo + "' is a pipe, which the run read to its end") != std::string::npos);
  }
}

TEST_CASE("heed plot ended by a signal leaves no drawing process behind") {
  test::TempDir d("heed-plotkill-");
  const std::string p = d.path;
  REQUIRE(heed_cli({"run", "copy", "--steps", "4", "--out", p + "/c.h5"}, p).status == 0);
  // Any process drawing this log: its command line names it.
  auto drawing = [&] {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      // Size 0 to stat: read it through. A process that ends meanwhile
      // fails the read with ESRCH, which std::ifstream's buffer threw as an
      // exception out of the test (in CI, beside plot.renders' processes):
      // read with read(2), and such a process counts as not drawing.
      std::string cmd;
      const int fd = ::open((e.path().string() + "/cmdline").c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      char buf[4096];
      for (ssize_t got; (got = ::read(fd, buf, sizeof buf)) > 0;) cmd.append(buf, static_cast<size_t>(got));
      ::close(fd);
      if (cmd.find("heed_plot") != std::string::npos && cmd.find(p + "/c.h5") != std::string::npos) return true;
    }
    return false;
  };
  const pid_t pid = test::start({HEED_CLI_PATH, "plot", p + "/c.h5"}, p + "/plot.out", p + "/plot.err");
  for (int i = 0; i < 1000 && !drawing(); ++i) usleep(5000);
  REQUIRE(drawing());  // the script has started (it spends a second importing its modules)
  kill(pid, SIGTERM);
  test::wait_status(pid);
  for (int i = 0; i < 300 && drawing(); ++i) usleep(10000);
  CHECK_FALSE(drawing());
  const bool no_figure = !fs::exists(p + "/c_plots") || fs::is_empty(p + "/c_plots");
  CHECK(no_figure);  // none drawn after heed ended
}

TEST_CASE("output that cannot be written to stdout (a full disk) ends with status 1, not 0") {
  test::TempDir d("heed-full-");
  const std::string p = d.path;
  REQUIRE(heed_cli({"run", "copy", "--steps", "4", "--out", p + "/c.h5"}, p).status == 0);
  for (const std::vector<std::string>& args : {std::vector<std::string>{"inspect", p + "/c.h5"},
                                               std::vector<std::string>{"info"}}) {
    CAPTURE(args);
    const std::string err = p + "/.stderr";
    const int status = test::wait_status(test::start(cat({HEED_CLI_PATH}, args), "/dev/full", err));
    const std::string message = slurp(err);
    INFO(message);
    CHECK(status == 1);
    CHECK(message.find("heed: cannot write to standard output: No space left on device") != std::string::npos);
  }
}

TEST_CASE("bad inputs no more: charlm resumes with the default corpus, short runs clamp the warm-up, "
          "--checkpoint-every comes back on resume") {
  test::TempDir d("heed-good-");
  const std::string p = d.path;
  SUBCASE("the default corpus (the King James Bible), stopped and resumed with the printed command") {
    Result r = heed_cli(cat({"run", "charlm", "--steps", "4", "--stop-after", "2", "--out", p + "/kjv.h5"}, kTinyLM), p);
    INFO(r.out << r.err);
    REQUIRE(r.status == 130);
    CHECK(r.out.find("resume with: heed run charlm --resume " + p + "/kjv.ckpt.h5") != std::string::npos);
    Result again = heed_cli({"run", "charlm", "--resume", p + "/kjv.ckpt.h5"}, p);
    INFO(again.out << again.err);
    CHECK(again.status == 0);
    CHECK(load_checkpoint(p + "/kjv.ckpt.h5", "charlm").counter("step") == 4);
  }
  SUBCASE("--steps 60 with the default warm-up of 100") {
    const std::string text = p + "/t.txt";
    std::ofstream(text) << std::string(2000, 'a') + "bcd";
    Result r = heed_cli(cat({"run", "charlm", "--text", text, "--steps", "60", "--out", p + "/w.h5"}, kTinyLM), p);
    INFO(r.out << r.err);
    CHECK(r.status == 0);
    CHECK(load_checkpoint(p + "/w.ckpt.h5", "charlm").config.at("warmup") == "6");
  }
  SUBCASE("a run resumed from another directory finds its log beside its checkpoint; a moved log with --out") {
    fs::create_directories(p + "/runs");
    Result r = heed_cli({"run", "copy", "--steps", "12", "--stop-after", "4", "--out", "runs/c.h5"}, p, p);
    REQUIRE(r.status == 130);
    // From inside runs/: the log was given as runs/c.h5, relative to p.
    Result again = heed_cli({"run", "copy", "--resume", "c.ckpt.h5", "--stop-after", "8"}, p, p + "/runs");
    INFO(again.out << again.err);
    CHECK(again.status == 130);
    CHECK(again.out.find("logging to c.h5") != std::string::npos);
    // The log moved: --out says where; every step is in it once.
    fs::rename(p + "/runs/c.h5", p + "/runs/moved.h5");
    Result moved = heed_cli({"run", "copy", "--resume", p + "/runs/c.ckpt.h5"}, p);
    CHECK(moved.status == 1);
    CHECK(moved.err.find("is missing; give --out if it moved") != std::string::npos);
    moved = heed_cli({"run", "copy", "--resume", p + "/runs/c.ckpt.h5", "--out", p + "/runs/moved.h5"}, p);
    INFO(moved.out << moved.err);
    CHECK(moved.status == 0);
    const Tensor rows = h5::File(p + "/runs/moved.h5", h5::File::Mode::read).read_tensor("metrics/train_loss");
    REQUIRE(rows.size(0) == 12);
    for (int64_t i = 0; i < 12; ++i) CHECK(rows.at({i, 0}) == static_cast<double>(i + 1));
  }
  SUBCASE("options before the checkpoint; help for run, info and --version") {
    REQUIRE(heed_cli({"run", "copy", "--steps", "4", "--out", p + "/c.h5"}, p).status == 0);
    Result r = heed_cli({"export", "-o", p + "/w.safetensors", p + "/c.ckpt.h5"}, p);
    INFO(r.out << r.err);
    CHECK(r.status == 0);
    CHECK(fs::exists(p + "/w.safetensors"));
    r = heed_cli({"run", "--help"}, p);
    CHECK(r.status == 0);
    for (const auto& e : experiments::experiments()) CHECK(r.out.find(std::string("  ") + e.name) != std::string::npos);
    CHECK(heed_cli({"info", "--help"}, p).out.rfind("usage: heed info", 0) == 0);
    r = heed_cli({"--version"}, p);
    CHECK(r.status == 0);
    CHECK(r.out == "heed " + heed_version() + " (commit " + git_commit() + ")\n");
  }
  SUBCASE("--checkpoint-every is restored, and the printed command needs nothing else") {
    Result r = heed_cli({"run", "sine", "--steps", "30", "--checkpoint-every", "7", "--stop-after", "8", "--out",
                         p + "/e.h5"},
                        p);
    REQUIRE(r.status == 130);
    CHECK(r.out.find("resume with: heed run sine --resume " + p + "/e.ckpt.h5\n") != std::string::npos);
    REQUIRE(heed_cli({"run", "sine", "--resume", p + "/e.ckpt.h5", "--stop-after", "15"}, p).status == 130);
    Checkpoint c = load_checkpoint(p + "/e.ckpt.h5", "sine");
    CHECK(c.config.at("checkpoint-every") == "7");
    CHECK(c.counter("step") == 15);
  }
}

TEST_CASE("a full disk (a file size limit) ends a run with status 1 naming the file, and loses no checkpoint") {
  test::TempDir d("heed-full-");
  const std::string p = d.path;
  // heed under a file size limit of kib KiB, SIGXFSZ ignored: a write past
  // it fails with EFBIG, as one on a full disk fails with ENOSPC.
  auto limited = [&](int kib, std::vector<std::string> args) {
    std::vector<std::string> argv = {"/bin/bash", "-c",
                                     "trap '' XFSZ; ulimit -f " + std::to_string(kib) + "; exec \"$0\" \"$@\"",
                                     HEED_CLI_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    return test::run_process(argv, p);
  };
  auto readable = [&](const std::string& file) { return heed_cli({"inspect", file}, p).status == 0; };
  SUBCASE("the log cannot grow: an error, no rows stored as zeros, the log readable up to its last flush") {
    // The rows were left as zeros and the run ended with status 0.
    Result r = limited(20, {"run", "copy", "--steps", "3000", "--checkpoint-every", "0", "--out", p + "/a.h5"});
    INFO(r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find("RunLog '" + p + "/a.h5': could not write the log") != std::string::npos);
    CHECK(readable(p + "/a.h5"));
    CHECK(!fs::exists(p + "/a.ckpt.h5"));
  }
  SUBCASE("the first checkpoint does not fit: status 1, not a crash, and no temporary file left") {
    // HDF5's cleanup at exit crashed on the file it could not close (SIGSEGV, 139).
    Result r = limited(48, {"run", "copy", "--steps", "3000", "--checkpoint-every", "200", "--out", p + "/b.h5"});
    INFO(r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find("File too large") != std::string::npos);
    CHECK(r.err.find("no checkpoint was written to '" + p + "/b.ckpt.h5'") != std::string::npos);
    CHECK(!fs::exists(p + "/b.ckpt.h5.tmp"));
    CHECK(readable(p + "/b.h5"));
  }
  SUBCASE("a later checkpoint does not fit: the previous one is as it was, and resumes") {
    REQUIRE(heed_cli({"run", "copy", "--steps", "200", "--out", p + "/c.h5"}, p).status == 0);
    const std::string before = slurp(p + "/c.ckpt.h5");
    Result r = limited(48, {"run", "copy", "--resume", p + "/c.ckpt.h5", "--steps", "400"});
    INFO(r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find("the previous checkpoint '" + p + "/c.ckpt.h5' is as it was") != std::string::npos);
    CHECK(slurp(p + "/c.ckpt.h5") == before);
    CHECK(heed_cli({"run", "copy", "--resume", p + "/c.ckpt.h5", "--steps", "400"}, p).status == 0);
  }
}

TEST_CASE("a bad HEED_* environment variable is refused before any file is touched, naming it, status 2") {
  test::TempDir d("heed-env-");
  const std::string p = d.path;
  const std::string text = p + "/t.txt";
  {
    std::ofstream f(text);
    for (int i = 0; i < 100; ++i) f << "the quick brown fox jumps over the lazy dog. ";
  }
  REQUIRE(heed_cli(cat({"run", "charlm", "--text", text, "--steps", "2", "--out", p + "/lm.h5"}, kTinyLM), p).status ==
          0);
  REQUIRE(heed_cli({"run", "copy", "--steps", "4", "--out", p + "/c.h5"}, p).status == 0);
  const std::string ckpt = p + "/lm.ckpt.h5";
  // heed with one variable set, as `VAR=value heed ...` in a shell.
  auto heed_with = [&](const std::string& var, const std::vector<std::string>& args) {
    return test::run_process(cat({"/usr/bin/env", var, HEED_CLI_PATH}, args), p);
  };
  struct Case {
    std::string var;
    std::vector<std::string> args;
    std::string message;
  };
  for (const Case& c : {
           // The variable was read at the first kernel: after the run had
           // truncated the previous log (or made a new, empty one).
           Case{"HEED_CPU_ISA=bogus", {"run", "copy", "--steps", "4", "--out", p + "/c.h5"},
                "HEED_CPU_ISA: expected baseline, avx2 or avx512, got 'bogus'"},
           Case{"HEED_CPU_ISA=bogus", {"run", "sine", "--out", p + "/sine2.h5"}, "HEED_CPU_ISA: expected baseline, avx2 or avx512"},
           Case{"HEED_CPU_ISA=bogus", {"run", "charlm", "--text", text, "--out", p + "/new.h5"},
                "HEED_CPU_ISA: expected baseline, avx2 or avx512, got 'bogus'"},
           // Read while the checkpoint's tensors were: reported as a damaged checkpoint.
           Case{"HEED_ADAPTIVE_THREADS=2", {"sample", ckpt}, "HEED_ADAPTIVE_THREADS='2': expected 1, on, true, yes"},
           Case{"HEED_ADAPTIVE_THREADS=2", {"export", ckpt}, "HEED_ADAPTIVE_THREADS='2'"},
           Case{"HEED_ADAPTIVE_THREADS=2", {"inspect", ckpt}, "HEED_ADAPTIVE_THREADS='2'"},
           Case{"HEED_ADAPTIVE_THREADS=2", {"run", "charlm", "--resume", ckpt, "--steps", "4"}, "HEED_ADAPTIVE_THREADS='2'"},
           // Were silently ignored: only 1 counted.
           Case{"HEED_NO_CACHE=maybe", {"run", "copy", "--steps", "4", "--out", p + "/c.h5"}, "HEED_NO_CACHE='maybe'"},
           Case{"HEED_NO_HUGE_PAGES=sometimes", {"info"}, "HEED_NO_HUGE_PAGES='sometimes'"},
       }) {
    CAPTURE(c.var);
    CAPTURE(c.args);
    const auto before = snapshot(p);
    Result r = heed_with(c.var, c.args);
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    CHECK(r.status == 2);
    CHECK(r.err.rfind("heed: " + c.message, 0) == 0);
    CHECK(r.err.find("damaged") == std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(snapshot(p) == before);
  }
  // The yes/no values every flag now takes.
  for (const std::string var : {"HEED_NO_CACHE=yes", "HEED_NO_HUGE_PAGES=TRUE", "HEED_ADAPTIVE_THREADS=off"}) {
    CAPTURE(var);
    Result r = heed_with(var, {"run", "copy", "--steps", "2", "--out", p + "/ok.h5"});
    INFO("stderr: " << r.err);
    CHECK(r.status == 0);
  }
}

TEST_CASE("a program of one's own on heed::Run refuses a bad HEED_* variable before it touches the last run's files") {
  // The example program (examples/fit_sine.cpp) as a user builds it: only
  // Run stands between the environment and the files.
  test::TempDir d("heed-env-own-");
  const std::string p = d.path;
  REQUIRE(test::run_process({HEED_EXAMPLE_PATH, "--steps", "20"}, p, p).status == 0);
  auto own_with = [&](const std::string& var, const std::vector<std::string>& args) {
    return test::run_process(cat({"/usr/bin/env", var, HEED_EXAMPLE_PATH}, args), p, p);
  };
  for (const std::string var : {"HEED_CPU_ISA=bogus", "HEED_NO_HUGE_PAGES=maybe",
                                "HEED_FAULT_KILL_IN_CHECKPOINT_WRITE=abc", "HEED_NO_CACHE=2"}) {
    CAPTURE(var);
    const auto before = snapshot(p);
    // A new run (which replaces the last one's log) and a resume.
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"--steps", "20"}, std::vector<std::string>{"--resume", "runs/fit_sine.ckpt.h5",
                                                                              "--steps", "30"}}) {
      Result r = own_with(var, args);
      INFO("stdout: " << r.out << "\nstderr: " << r.err);
      CHECK(r.status == 2);
      CHECK(r.err.find(var.substr(0, var.find('='))) != std::string::npos);
      CHECK(r.err.find("Environment variables") != std::string::npos);
      CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
      CHECK(snapshot(p) == before);
    }
  }
  // A name heed does not read: said once, and the run goes on.
  Result r = own_with("HEED_NO_CACHHE=1", {"--steps", "30", "--out", "runs/other.h5"});
  INFO("stderr: " << r.err);
  CHECK(r.status == 0);
  CHECK(r.err.find("note: HEED_NO_CACHHE is not a variable heed reads") != std::string::npos);
  Result twice = test::run_process({"/usr/bin/env", "HEED_NO_CACHHE=1", HEED_CLI_PATH, "run", "copy", "--steps", "2",
                                    "--out", p + "/c2.h5"},
                                   p);
  CHECK(twice.status == 0);
  size_t notes = 0;
  for (size_t at = twice.err.find("HEED_NO_CACHHE"); at != std::string::npos; at = twice.err.find("HEED_NO_CACHHE", at + 1))
    ++notes;
  CHECK(notes == 1);  // heed's check and its Run's: one note
}

TEST_CASE("a charlm checkpoint whose config.* attributes were altered is refused naming the file and the attribute") {
  test::TempDir d("heed-config-");
  const std::string p = d.path;
  const std::string text = p + "/t.txt";
  {
    std::ofstream f(text);
    for (int i = 0; i < 100; ++i) f << "the quick brown fox jumps over the lazy dog. ";
  }
  // kTinyLM: 1 layer, 2 heads, width 16, context 16.
  REQUIRE(heed_cli(cat({"run", "charlm", "--text", text, "--steps", "2", "--out", p + "/lm.h5"}, kTinyLM), p).status ==
          0);
  struct Case {
    std::string key, value, message;
  };
  for (const Case& c : {
           // Was "MultiHeadAttention: d_model=16 is not divisible by heads=3", naming no file.
           Case{"heads", "3", "config.heads is 3, expected a divisor of config.width (16)"},
           Case{"heads", "0", "config.heads is '0', expected an integer in 1..65536"},
           // Was "out of memory allocating ... bytes".
           Case{"context", "200000000000", "config.context is '200000000000', expected an integer in 2..1048576"},
           Case{"context", "1000000",
                "config.context is 1000000, but its weights model/wpe.weight have shape [16, 16]: expected "
                "config.context 16"},
           Case{"width", "64", "config.width is 64, but its weights model/wte.weight have shape"},
           Case{"layers", "3", "config.layers is 3, but its weights hold 1 blocks"},
       }) {
    CAPTURE(c.key);
    CAPTURE(c.value);
    const std::string bad = p + "/bad.ckpt.h5";
    {
      Checkpoint ck = load_checkpoint(p + "/lm.ckpt.h5", "charlm");
      ck.config[c.key] = c.value;
      save_checkpoint(bad, ck);
    }
    for (const std::string command : {"sample", "export", "quantize"}) {
      CAPTURE(command);
      std::vector<std::string> args = {command, bad};
      if (command == "sample") args = cat(args, {"--tokens", "5"});
      if (command == "export") args = cat(args, {"-o", p + "/bad.safetensors"});
      if (command == "quantize") args = cat(args, {"--text", text, "--out", p + "/q.ckpt.h5"});
      const auto before = snapshot(p);
      Result r = heed_cli(args, p);
      INFO("stdout: " << r.out << "\nstderr: " << r.err);
      CHECK(r.status == 1);
      CHECK(r.err.rfind("heed: " + command + ": checkpoint '" + bad + "': " + c.message, 0) == 0);
      CHECK(snapshot(p) == before);
    }
  }
}

TEST_CASE("sample, export and quantize name themselves in every message, also one from what they call") {
  test::TempDir d("heed-prefix-");
  const std::string missing = d.path + "/nx.ckpt.h5";
  for (const std::vector<std::string>& cmd :
       {std::vector<std::string>{"sample", missing}, {"export", missing}, {"quantize", missing}}) {
    CAPTURE(cmd[0]);
    const test::Result r = heed_cli(cmd, d.path);
    INFO(r.err);
    CHECK(r.status != 0);
    // It said "heed: checkpoint '...' does not exist", naming no command.
    CHECK(r.err.rfind("heed: " + cmd[0] + ": checkpoint '" + missing + "' does not exist", 0) == 0);
  }
  // Their own messages keep one prefix.
  const test::Result r = heed_cli({"sample", missing, "--tokens", "0"}, d.path);
  CHECK(r.err.rfind("heed: sample: --tokens expects", 0) == 0);
}

TEST_CASE("sample, export, quantize and attend show a bad command line's message on one line, prefixed once") {
  test::TempDir d("heed-oneline-");
  const std::string missing = d.path + "/nx.ckpt.h5";
  for (const char* command : {"sample", "export", "quantize", "attend"}) {
    CAPTURE(command);
    // An option name with a newline and a tab in it (a pasted line): shown
    // escaped, as attend showed it; the others printed them as they were.
    const test::Result r = heed_cli({command, missing, "--bo\ngus\tx\x01"}, d.path);
    INFO(r.err);
    CHECK(r.status == 2);
    CHECK(r.err == "heed: " + std::string(command) + ": unknown option '--bo\\ngus\\tx\\x01' (see --help)\n");
  }
}

TEST_CASE("heed demo after a stopped demo starts over: it takes no options, so it cannot be told --restart") {
  // A new run over an unfinished run's checkpoint is refused unless
  // --restart; the demo, stopped by Ctrl-C, was then refused for ever with
  // advice (--restart) that `heed demo` itself refuses.
  test::TempDir d("heed-demo-");
  Result first = heed_cli({"run", "shapes", "--train", "40", "--test", "15", "--batch", "20", "--epochs", "5",
                           "--out", "runs/demo.h5", "--stop-after", "1"},
                          d.path, d.path);
  INFO(first.out << first.err);
  REQUIRE(first.status == 130);  // runs/demo.ckpt.h5: an unfinished run's
  const std::string out = d.path + "/demo.out", err = d.path + "/demo.err";
  const pid_t pid = test::start({HEED_CLI_PATH, "demo"}, out, err, d.path);
  int status = 0;
  bool ended = false;
  for (int i = 0; i < 30000 && slurp(out).find("logging to") == std::string::npos; ++i) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      ended = true;
      break;
    }
    usleep(2000);
  }
  if (!ended) {
    kill(pid, SIGINT);  // it trains: the start is all this test needs
    status = test::wait_status(pid);
  } else {
    status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  INFO(slurp(out) << slurp(err));
  CHECK(!ended);
  CHECK(status == 130);
  CHECK(slurp(out).find("logging to runs/demo.h5") != std::string::npos);
  CHECK(slurp(err).find("unfinished") == std::string::npos);
}
