// tests/experiments/test_export.cpp: `heed export` and `--init-from` as a
// user runs them: what the file records (a charlm's vocabulary), which model
// of a checkpoint of several it writes, which existing files it may replace,
// and the charlm and scaling runs that refuse given weights they cannot use.
#include <filesystem>
#include <fstream>
#include <set>

#include "data/h5.h"
#include "experiments/charlm.h"
#include "spawn.h"
#include "test_util.h"

using namespace heed;
using test::heed_cli;
using test::Result;
using test::snapshot;
namespace fs = std::filesystem;

namespace {

void write_text(const std::string& path, const std::string& line, int times) {
  std::ofstream f(path);
  for (int i = 0; i < times; ++i) f << line;
}

// A tiny charlm trained on `text`, in dir; its checkpoint's path.
std::string train_charlm(const std::string& dir, const std::string& text, const std::string& name) {
  Result r = heed_cli({"run", "charlm", "--text", text, "--steps", "4", "--layers", "1", "--heads", "2", "--width", "16",
                       "--context", "16", "--batch", "4", "--eval-every", "4", "--eval-batches", "1", "--threads", "1",
                       "--out", dir + "/" + name + ".h5"},
                      dir);
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  return dir + "/" + name + ".ckpt.h5";
}

std::vector<std::string> charlm_from(const std::string& text, const std::string& init, const std::string& out) {
  return {"run", "charlm", "--text", text, "--steps", "2", "--layers", "1", "--heads", "2", "--width", "16",
          "--context", "16", "--batch", "4", "--eval-every", "2", "--eval-batches", "1", "--threads", "1",
          "--init-from", init, "--out", out};
}

}  // namespace

TEST_CASE("export: a charlm's file records its vocabulary, and charlm --init-from refuses text of other characters") {
  test::TempDir d("heed-export-");
  const std::string p = d.path;
  const std::string lower = p + "/lower.txt", upper = p + "/upper.txt", shuffled = p + "/shuffled.txt",
                    wider = p + "/wider.txt";
  write_text(lower, "in the beginning god created the heaven and the earth. ", 40);
  write_text(upper, "IN THE BEGINNING GOD CREATED THE HEAVEN AND THE EARTH. ", 40);  // as many characters
  write_text(shuffled, "the earth and the heaven god created in the beginning. ", 40);  // the same ones
  write_text(wider, "in the beginning, god created the heaven and the earth. ", 40);  // one more: ','

  const std::string ckpt = train_charlm(p, lower, "lm");
  Result r = heed_cli({"export", ckpt, "-o", p + "/lm.safetensors"}, p);
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  const safetensors::File f = safetensors::load(p + "/lm.safetensors");
  // The code points in id order: sorted, as the tokenizer numbers them.
  const data::CharTokenizer tok = data::CharTokenizer::from_text(test::slurp(lower));
  REQUIRE(f.metadata.count("heed_vocabulary") == 1);
  CHECK(f.metadata.at("heed_vocabulary") == "[32, 46, 97, 98, 99, 100, 101, 103, 104, 105, 110, 111, 114, 116, 118]");
  CHECK(f.metadata.at("heed_vocabulary") == experiments::vocabulary_metadata(tok));
  // The run's absolute --text is recorded by its file name alone: the
  // directory is the training machine's (a home directory), not the reader's.
  CHECK(f.metadata.at("heed_config.text") == "lower.txt");
  // The nanoGPT names carry it too.
  r = heed_cli({"export", ckpt, "--names", "nanogpt", "-o", p + "/nano.safetensors"}, p);
  REQUIRE(r.status == 0);
  CHECK(safetensors::load(p + "/nano.safetensors").metadata.at("heed_vocabulary") ==
        f.metadata.at("heed_vocabulary"));

  SUBCASE("text of other characters, as many: refused naming the first id that differs, no file made") {
    const auto before = snapshot(p);
    r = heed_cli(charlm_from(upper, p + "/lm.safetensors", p + "/up.h5"), p);
    INFO(r.out << r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find("--init-from '" + p + "/lm.safetensors' was trained on another vocabulary than --text") !=
          std::string::npos);
    CHECK(r.err.find("id 2 is 'a' (U+0061) in the file and 'A' (U+0041) in the text") != std::string::npos);
    CHECK(r.err.find("the file has 15 characters, the text 15") != std::string::npos);
    CHECK(snapshot(p) == before);
    // Under nanoGPT's names alike.
    r = heed_cli(charlm_from(upper, p + "/nano.safetensors", p + "/up.h5"), p);
    CHECK(r.status == 1);
    CHECK(r.err.find("trained on another vocabulary") != std::string::npos);
    CHECK(snapshot(p) == before);
  }
  SUBCASE("a vocabulary that adds a character: the id where they part, and both sizes") {
    r = heed_cli(charlm_from(wider, p + "/lm.safetensors", p + "/w.h5"), p);
    INFO(r.err);
    CHECK(r.status == 1);
    CHECK(r.err.find("id 1 is '.' (U+002E) in the file and ',' (U+002C) in the text") != std::string::npos);
    CHECK(r.err.find("the file has 15 characters, the text 16") != std::string::npos);
    CHECK(!fs::exists(p + "/w.h5"));
  }
  SUBCASE("other text of the same characters starts from the weights (fine-tuning)") {
    r = heed_cli(charlm_from(shuffled, p + "/lm.safetensors", p + "/s.h5"), p);
    INFO(r.out << r.err);
    CHECK(r.status == 0);
    CHECK(r.out.find("model initialised from") != std::string::npos);
    CHECK(r.out.find("note:") == std::string::npos);
  }
  SUBCASE("a file without the vocabulary (PyTorch's) is taken as the text's, with a note") {
    safetensors::save(p + "/bare.safetensors", f.tensors, {{"format", "pt"}});
    r = heed_cli(charlm_from(upper, p + "/bare.safetensors", p + "/b.h5"), p);
    INFO(r.out << r.err);
    CHECK(r.status == 0);
    CHECK(r.out.find("note: " + p + "/bare.safetensors records no vocabulary (heed_vocabulary)") != std::string::npos);
  }
  SUBCASE("a malformed vocabulary is refused naming the key") {
    for (const std::string bad : {"[32, 46", "32, 46", "[]", "[32, -1]", "[1114112]", "[32] x"}) {
      CAPTURE(bad);
      std::map<std::string, std::string> meta = f.metadata;
      meta["heed_vocabulary"] = bad;
      safetensors::save(p + "/bad.safetensors", f.tensors, meta);
      r = heed_cli(charlm_from(lower, p + "/bad.safetensors", p + "/x.h5"), p);
      INFO(r.err);
      CHECK(r.status == 1);
      CHECK(r.err.find("heed_vocabulary metadata is not a JSON array of code points") != std::string::npos);
      CHECK(!fs::exists(p + "/x.h5"));
    }
    // As Python's json.dumps writes it (spaces, no spaces), it reads.
    std::map<std::string, std::string> meta = f.metadata;
    std::string compact = f.metadata.at("heed_vocabulary");
    compact.erase(std::remove(compact.begin(), compact.end(), ' '), compact.end());
    meta["heed_vocabulary"] = compact;
    safetensors::save(p + "/compact.safetensors", f.tensors, meta);
    r = heed_cli(charlm_from(lower, p + "/compact.safetensors", p + "/c.h5"), p);
    INFO(r.err);
    CHECK(r.status == 0);
  }
}

TEST_CASE("export: a checkpoint of several models names them whole, and --model takes one model, not a group") {
  test::TempDir d("heed-export-");
  const std::string p = d.path;
  Result r = heed_cli({"run", "scaling", "--dk-max", "8", "--queries", "4", "--keys", "4", "--seeds", "2", "--dim",
                       "8", "--length", "4", "--vocab", "4", "--batch", "4", "--steps", "3", "--eval-every", "3",
                       "--threads", "1", "--out", p + "/sc.h5"},
                      p);
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  const std::string ckpt = p + "/sc.ckpt.h5";
  const auto before = snapshot(p);
  // "several models (scaled, unscaled)": neither is a model.
  r = heed_cli({"export", ckpt}, p);
  CHECK(r.status == 2);
  CHECK(r.err.find("holds several models (scaled/seed0, scaled/seed1, unscaled/seed0, unscaled/seed1); choose one "
                   "with --model") != std::string::npos);
  // --model unscaled wrote seed0/... and seed1/... together, which no model loads.
  r = heed_cli({"export", ckpt, "--model", "unscaled", "-o", p + "/u.safetensors"}, p);
  INFO(r.err);
  CHECK(r.status == 2);
  CHECK(r.err.find("--model unscaled names a group of 2 models in checkpoint '" + ckpt +
                   "' (unscaled/seed0, unscaled/seed1); expected one of them") != std::string::npos);
  r = heed_cli({"export", ckpt, "--model", "seed0", "-o", p + "/u.safetensors"}, p);
  CHECK(r.status == 2);
  CHECK(r.err.find("has no model 'seed0' (its models: scaled/seed0, scaled/seed1, unscaled/seed0, unscaled/seed1)") !=
        std::string::npos);
  CHECK(snapshot(p) == before);
  r = heed_cli({"export", ckpt, "--model", "unscaled/seed1", "-o", p + "/u1.safetensors"}, p);
  INFO(r.err);
  REQUIRE(r.status == 0);
  const Checkpoint ck = load_checkpoint(ckpt, "scaling");
  const auto weights = safetensors::load(p + "/u1.safetensors").tensors;
  const auto expected = ck.get("model/unscaled/seed1");
  REQUIRE(weights.size() == expected.size());
  for (const auto& [k, t] : expected) {
    CAPTURE(k);
    REQUIRE(weights.count(k) == 1);
    CHECK(weights.at(k).to_vector<double>() == t.to_vector<double>());
  }
  // scaling cannot start from a file: it said "train one of them", which it cannot.
  r = heed_cli({"run", "scaling", "--dk-max", "8", "--seeds", "2", "--dim", "8", "--steps", "3", "--init-from",
                p + "/u1.safetensors", "--out", p + "/sc2.h5"},
               p);
  INFO(r.err);
  CHECK(r.status == 2);
  CHECK(r.err.find("run scaling: --init-from does not apply: scaling trains 2 x --seeds models") != std::string::npos);
  // ... and does not offer it.
  r = heed_cli({"run", "scaling", "--help"}, p);
  CHECK(r.status == 0);
  CHECK(r.out.find("--init-from") == std::string::npos);
  CHECK(r.out.find("--seeds") != std::string::npos);
  CHECK(r.err.find("train one of them") == std::string::npos);
  CHECK(!fs::exists(p + "/sc2.h5"));
}

TEST_CASE("export: -o replaces only a safetensors file heed wrote, and says what else it found") {
  test::TempDir d("heed-export-");
  const std::string p = d.path;
  Result r = heed_cli({"run", "sine", "--steps", "5", "--threads", "1", "--out", p + "/s.h5"}, p);
  REQUIRE(r.status == 1);  // 5 steps do not fit sin(x) (the run says so); the checkpoint is written
  REQUIRE(fs::exists(p + "/s.ckpt.h5"));
  const std::string ckpt = p + "/s.ckpt.h5";
  // A PyTorch user's own weights, with and without metadata of their own.
  safetensors::save(p + "/mine.safetensors", {{"w", Tensor::ones({2, 2})}}, {{"format", "pt"}});
  safetensors::save(p + "/bare.safetensors", {{"w", Tensor::ones({3})}});
  for (const std::string name : {"mine", "bare"}) {
    CAPTURE(name);
    const auto before = snapshot(p);
    r = heed_cli({"export", ckpt, "-o", p + "/" + name + ".safetensors"}, p);
    INFO(r.err);
    CHECK(r.status == 2);
    // It said "a safetensors file heed did not write", of a file a heed program may have written (Module::save).
    CHECK(r.err.find("export: --out '" + p + "/" + name +
                     ".safetensors' is a safetensors file export did not write (its metadata names no "
                     "heed_experiment: a PyTorch file, or weights a program saved with Module::save); expected a new "
                     "file (or remove that one first)") != std::string::npos);
    CHECK(r.err.find("heed did not write") == std::string::npos);
    CHECK(snapshot(p) == before);
  }
  // Its own export, written again.
  r = heed_cli({"export", ckpt, "-o", p + "/w.safetensors"}, p);
  REQUIRE(r.status == 0);
  r = heed_cli({"export", ckpt, "-o", p + "/w.safetensors"}, p);
  INFO(r.err);
  CHECK(r.status == 0);
  // A directory: the example names the file it writes.
  r = heed_cli({"export", ckpt, "-o", p}, p);
  CHECK(r.status == 2);
  CHECK(r.err.find("is a directory; expected a file path like x.safetensors") != std::string::npos);
  // A link into a directory that is not there: said so (only "No such file
  // or directory" came from the writer), nothing made.
  fs::create_symlink(p + "/gone/w.safetensors", p + "/dangling.safetensors");
  const auto before = snapshot(p);
  r = heed_cli({"export", ckpt, "-o", p + "/dangling.safetensors"}, p);
  INFO(r.err);
  CHECK(r.status == 2);
  CHECK(r.err.find("export: --out '" + p + "/dangling.safetensors' is a symbolic link to '" + p +
                   "/gone/w.safetensors', whose directory '" + p + "/gone' does not exist") != std::string::npos);
  CHECK(snapshot(p) == before);
  CHECK(!fs::exists(p + "/gone"));
}

TEST_CASE("export: a checkpoint heed quantize wrote says so in its metadata; a training checkpoint's does not") {
  test::TempDir d("heed-export-");
  const std::string p = d.path, text = p + "/t.txt";
  write_text(text, "in the beginning god created the heaven and the earth. ", 40);
  const std::string ckpt = train_charlm(p, text, "lm");
  Result q = heed_cli({"quantize", ckpt, "--method", "e8", "--bits", "4", "--threads", "1", "-o", p + "/q.ckpt.h5"}, p);
  INFO(q.out << q.err);
  REQUIRE(q.status == 0);
  for (const auto& [from, expected] : {std::pair<std::string, std::string>{ckpt, ""}, {p + "/q.ckpt.h5", "e8 4 bits"}}) {
    CAPTURE(from);
    const std::string out = p + "/x.safetensors";
    fs::remove(out);
    Result r = heed_cli({"export", from, "-o", out}, p);
    INFO(r.out << r.err);
    REQUIRE(r.status == 0);
    const std::map<std::string, std::string> meta = safetensors::metadata(out);
    CHECK(meta.count("heed_quantized") == (expected.empty() ? 0u : 1u));
    if (!expected.empty() && meta.count("heed_quantized")) CHECK(meta.at("heed_quantized") == expected);
  }
}

TEST_CASE("export: a shapes checkpoint of one model exports it and records which; --init-from checks the model and "
          "the experiment") {
  test::TempDir d("heed-export-");
  const std::string p = d.path;
  const std::vector<std::string> tiny = {"--epochs", "1", "--train", "100", "--test", "15", "--batch", "50",
                                         "--threads", "1"};
  Result r = heed_cli(test::cat({"run", "shapes", "--model", "attention", "--out", p + "/s.h5"}, tiny), p);
  INFO(r.out << r.err);
  REQUIRE(r.status == 0);
  // It said "holds several models (attention); choose one with --model".
  r = heed_cli({"export", p + "/s.ckpt.h5", "-o", p + "/s.safetensors"}, p);
  INFO(r.err);
  REQUIRE(r.status == 0);
  const Checkpoint ck = load_checkpoint(p + "/s.ckpt.h5", "shapes");
  CHECK(safetensors::load(p + "/s.safetensors").tensors.size() == ck.get("model/attention").size());
  auto meta = safetensors::metadata(p + "/s.safetensors");
  CHECK(meta["heed_model"] == "attention");
  CHECK(meta["heed_experiment"] == "shapes");
  // The run of both models: which one was exported is recorded (heed_config.model is the run's "both").
  r = heed_cli(test::cat({"run", "shapes", "--out", p + "/b.h5"}, tiny), p);
  REQUIRE(r.status == 0);
  r = heed_cli({"export", p + "/b.ckpt.h5", "--model", "cnn", "-o", p + "/cnn.safetensors"}, p);
  REQUIRE(r.status == 0);
  meta = safetensors::metadata(p + "/cnn.safetensors");
  CHECK(meta["heed_model"] == "cnn");
  CHECK(meta["heed_config.model"] == "both");
  // The CNN's weights into the attention model: one line naming both (was a long list of mismatched keys).
  auto before = snapshot(p);
  r = heed_cli(test::cat({"run", "shapes", "--model", "attention", "--init-from", p + "/cnn.safetensors", "--out",
                          p + "/x.h5"},
                         tiny),
               p);
  INFO(r.err);
  CHECK(r.status == 1);
  CHECK(r.err == "heed: run shapes: --init-from '" + p +
                     "/cnn.safetensors' holds the cnn model of a shapes checkpoint (its heed_model metadata); this run "
                     "trains the attention model: expected its weights (heed export --model attention)\n");
  CHECK(snapshot(p) == before);
  // The attention model's own export starts it.
  r = heed_cli(test::cat({"run", "shapes", "--model", "attention", "--init-from", p + "/s.safetensors", "--out",
                          p + "/x.h5"},
                         tiny),
               p);
  INFO(r.err);
  CHECK(r.status == 0);
  // A shapes export into charlm: refused naming the experiment (it said the file "records no vocabulary" and took
  // its ids to be the Bible's).
  const std::string text = p + "/t.txt";
  write_text(text, "the quick brown fox jumps over the lazy dog. ", 100);
  before = snapshot(p);
  r = heed_cli({"run", "charlm", "--text", text, "--init-from", p + "/s.safetensors", "--out", p + "/lm.h5"}, p);
  INFO(r.out << r.err);
  CHECK(r.status == 1);
  CHECK(r.err.rfind("heed: run charlm: --init-from '" + p +
                        "/s.safetensors' holds a shapes model (attention) (heed export of a shapes checkpoint: its "
                        "heed_experiment metadata); expected the weights of a charlm model",
                    0) == 0);
  CHECK(r.out.find("records no vocabulary") == std::string::npos);
  CHECK(snapshot(p) == before);
}

TEST_CASE("export: every run's --init-from refuses another experiment's export in one line, writing nothing") {
  // Only charlm and shapes checked heed_experiment: copy and sine took a
  // charlm's export and failed on its names, and weights whose names and
  // shapes happened to fit (another experiment's export of the same layout)
  // were loaded and trained on.
  test::TempDir d("heed-init-exp-");
  const std::string p = d.path;
  const std::string text = p + "/t.txt";
  write_text(text, "the quick brown fox jumps over the lazy dog. ", 100);
  const std::string lm = train_charlm(p, text, "lm");
  REQUIRE(heed_cli({"export", lm, "-o", p + "/lm.safetensors"}, p).status == 0);
  REQUIRE(heed_cli({"run", "copy", "--steps", "2", "--out", p + "/c.h5"}, p).status == 0);
  REQUIRE(heed_cli({"export", p + "/c.ckpt.h5", "-o", p + "/c.safetensors"}, p).status == 0);
  // copy's own weights, as another experiment's export would hold them: every name and shape fits.
  const safetensors::File copy = safetensors::load(p + "/c.safetensors");
  std::map<std::string, std::string> meta = copy.metadata;
  REQUIRE(meta.at("heed_experiment") == "copy");
  meta["heed_experiment"] = "sine";
  safetensors::save(p + "/relabeled.safetensors", copy.tensors, meta);
  struct Case {
    std::string experiment, file, holds;
  };
  for (const Case& c : {Case{"copy", "lm.safetensors", "charlm"}, Case{"sine", "lm.safetensors", "charlm"},
                        Case{"copy", "relabeled.safetensors", "sine"}}) {
    CAPTURE(c.experiment);
    CAPTURE(c.file);
    const auto before = snapshot(p);
    Result r = heed_cli({"run", c.experiment, "--steps", "2", "--init-from", p + "/" + c.file, "--out", p + "/x.h5"},
                        p);
    INFO(r.out << r.err);
    CHECK(r.status == 1);  // (sine's status when its fit misses the threshold, too: the message tells)
    CHECK(r.err == "heed: run " + c.experiment + ": --init-from '" + p + "/" + c.file + "' holds a " + c.holds +
                       " model (heed export of a " + c.holds + " checkpoint: its heed_experiment metadata); expected "
                       "the weights of a " + c.experiment + " model\n");
    CHECK(snapshot(p) == before);
  }
  // The run's own experiment's export starts it, and so do the same weights
  // without heed export's metadata (a PyTorch user's file).
  safetensors::save(p + "/bare.safetensors", copy.tensors, {{"format", "pt"}});
  // An empty heed_experiment names no experiment (as for -o's check): the
  // file is taken as one without it, not refused as "a  model" of "a
  // checkpoint" of no name.
  safetensors::save(p + "/unnamed.safetensors", copy.tensors, {{"heed_experiment", ""}});
  for (const std::string file : {"c.safetensors", "bare.safetensors", "unnamed.safetensors"}) {
    CAPTURE(file);
    Result r = heed_cli({"run", "copy", "--steps", "2", "--init-from", p + "/" + file, "--out", p + "/x.h5"}, p);
    INFO(r.out << r.err);
    CHECK(r.status == 0);
    CHECK(r.out.find("model initialised from " + p + "/" + file) != std::string::npos);
  }
}

TEST_CASE("export: the C++ tour's weights and heed export's default output for its checkpoint are two files") {
  // The tour (docs/cpp-api.md) wrote runs/tour.safetensors, the very file `heed export runs/tour.ckpt.h5`
  // writes by default, and export then refused it as a file "heed did not write".
  std::ifstream in(std::string(HEED_SOURCE_DIR) + "/docs/cpp-api.md");
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto at = doc.find("std::string export_path = \"");
  REQUIRE(at != std::string::npos);
  const std::string tour_export = doc.substr(at + 27, doc.find('"', at + 27) - at - 27);
  CHECK(tour_export.size() > 12);
  CHECK(tour_export != "runs/tour.safetensors");  // export's default for runs/tour.ckpt.h5
  CHECK(tour_export.rfind(".safetensors") == tour_export.size() - 12);
}

TEST_CASE("export: --model takes the name a checkpoint of one model logs it under (models/<name>); another name is "
          "refused naming that one") {
  // It refused them all ("has no model 'copy' (it has one model: leave out
  // --model)"), though the run's log lists the model under that name.
  test::TempDir d("heed-export-own-");
  const std::string p = d.path;
  const std::string text = p + "/t.txt";
  write_text(text, "the quick brown fox jumps over the lazy dog. ", 100);
  train_charlm(p, text, "charlm");
  for (const std::vector<std::string>& run :
       {std::vector<std::string>{"copy", "--steps", "2"}, {"sine", "--steps", "2"},
        {"crossattn", "--steps", "2", "--test", "8", "--batch", "4", "--dim", "16", "--layers", "1", "--eval-every",
         "2"}}) {
    Result r = heed_cli(test::cat(test::cat({"run"}, run), {"--threads", "1", "--out", p + "/" + run[0] + ".h5"}), p);
    INFO(r.out << r.err);
    REQUIRE(r.status <= 1);  // (sine's status when two steps miss its threshold)
  }
  for (const std::string experiment : {"charlm", "copy", "sine", "crossattn"}) {
    CAPTURE(experiment);
    const std::string ckpt = p + "/" + experiment + ".ckpt.h5";
    // The model's name as the run's log gives it: its one models/<name>.
    std::set<std::string> logged;
    for (const std::string& ds : h5::File(p + "/" + experiment + ".h5", h5::File::Mode::read).list_datasets("/models"))
      logged.insert(ds.substr(0, ds.find('/')));
    REQUIRE(logged.size() == 1);
    const std::string name = *logged.begin();
    REQUIRE(heed_cli({"export", ckpt, "-o", p + "/plain.safetensors"}, p).status == 0);
    Result r = heed_cli({"export", ckpt, "--model", name, "-o", p + "/named.safetensors"}, p);
    INFO(r.out << r.err);
    CHECK(r.status == 0);
    // The same file as without --model, byte for byte.
    CHECK(test::slurp(p + "/named.safetensors") == test::slurp(p + "/plain.safetensors"));
    const auto before = snapshot(p);
    r = heed_cli({"export", ckpt, "--model", "other", "-o", p + "/other.safetensors"}, p);
    CHECK(r.status == 2);
    CHECK(r.err == "heed: export: checkpoint '" + ckpt + "' has no model 'other' (it has one model, " + name +
                       ": give --model " + name + " or leave out --model)\n");
    CHECK(snapshot(p) == before);
  }
}
