// experiments/charlm.cpp: `heed run charlm` (a character-level GPT trained on
// real text, the King James Bible by default) and `heed sample` (text
// generation from its checkpoint, with cached keys and values within the
// model's context).
#include "experiments/charlm.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "core/kernels.h"
#include "core/safetensors.h"
#include "data/text.h"
#include "experiments/common.h"
#include "experiments/heads.h"
#include "heed.h"

namespace heed::experiments {

namespace {

constexpr const char* kProbe = "And God said, Let there be light: and there was light.";
constexpr const char* kSamplePrompt = "And God said";  // heed sample's default --prompt

struct CharLMConfig {
  int64_t layers = 4, heads = 4, width = 128, context = 64, batch = 12, steps = 2000;
  double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1, dropout = 0.0, clip = 1.0;
  int64_t warmup = 100;
  std::string schedule = "cosine";
  std::string init = "torch";
  int64_t eval_every = 200, eval_batches = 32;
  int64_t seed = 0;
  std::string text;
};

std::shared_ptr<nn::GPT> make_model(const CharLMConfig& c, int64_t vocab, Generator* g) {
  return std::make_shared<nn::GPT>(
      nn::GPTOptions(vocab, c.width, c.layers, c.heads, c.context)
                                       .dropout(c.dropout)
                                       .init(c.init == "torch" ? nn::GPTOptions::Init::torch : nn::GPTOptions::Init::gpt2)
                                       .generator(g));
}

// The memory a run of c's options on a text of `vocab` characters takes at
// least, in bytes (tensor_memory): a training step (the attention fused, no
// T x T map) at its backward's first product, where the activations every
// block saved for it are all alive, and an evaluation's per-head statistics,
// which keep every layer's attention maps of a batch of windows. Blocks
// that only some paths keep (dropout's masks, the fused attention's
// probabilities for a context of one block) are left out.
// Peaks measured (resident, the whole process, with a 1 MB text of 18
// characters loaded), against this, with the defaults (4 layers, 4 heads,
// width 128): --context 256 --batch 32: 0.58 GB, this 0.46 GB; --context 1024
// --batch 8: 1.11 GB, this 0.97 GB; --context 512 --batch 32: 1.38 GB, this
// 1.25 GB.
double charlm_memory(const CharLMConfig& c, int64_t vocab) {
  const double n = static_cast<double>(c.batch) * static_cast<double>(c.context);
  const auto D = static_cast<double>(c.width), H = static_cast<double>(c.heads), L = static_cast<double>(c.layers),
             T = static_cast<double>(c.context), V = static_cast<double>(vocab);
  // Per block, float32 unless said: n positions of the batch, each with D
  // floats (act), the 3 D query/key/value projection (qkv), the
  // feed-forward's 4 D (hidden), a layer norm's mean or variance (stat),
  // the heads' log-sum-exps (lse), V logits; the windows and targets int64.
  const double ids = 8 * n, act = 4 * n * D, qkv = 4 * n * 3 * D, hidden = 4 * n * 4 * D, stat = 4 * n,
               lse = 4 * n * H, logits = 4 * n * V, map = 4 * n * H * T;
  // Embeddings, each block's 12 D^2 weights, the head: the weights, then with
  // the optimiser's two moments beside them.
  const double weights = 4 * ((V + T) * D + L * 12 * D * D + D * V);
  return tensor_memory({
      // The step's backward through the head: what each block saved (its
      // input and layer-normed input, the attention's output, the residual
      // sum and its layer-normed copy, the GELU's output and slope, the
      // projection, four layer-norm statistics, the log-sum-exps), the final
      // layer norm's input, output and statistics, the logits' gradient and
      // the one it gives the final layer norm's output.
      {{weights, 1},
       {ids, 2},
       {act, 5 * L + 3},
       {qkv, L},
       {hidden, 2 * L},
       {stat, 4 * L + 2},
       {lse, L},
       {logits, 1}},
      // The evaluation's last layer: the maps of the layers before it, its
      // scores and their softmax; the windows and targets of the step and of
      // the evaluation, the layer's input, its layer-normed copy, queries,
      // keys and values.
      {{weights, 3}, {map, L + 1}, {ids, 4}, {act, 5}},
  });
}

// The mean loss over c.eval_batches fixed windows of stream (drawn from a
// generator seeded the same way at every evaluation, so the numbers are
// comparable across the run); nothing when stop, asked before each batch,
// says to stop first.
std::optional<double> eval_loss(nn::GPT& m, const Tensor& stream, const CharLMConfig& c, uint64_t seed,
                                const std::function<bool()>& stop = {}) {
  autograd::NoGradGuard ng;
  m.eval();
  Generator g(seed);
  double sum = 0;
  for (int64_t i = 0; i < c.eval_batches; ++i) {
    if (stop && stop()) {
      m.train();
      return std::nullopt;
    }
    Tensor x, y;
    data::random_windows(stream, c.batch, c.context, g, x, y);
    sum += cross_entropy(m.forward(x), y).item();
  }
  m.train();
  return sum / static_cast<double>(c.eval_batches);
}

std::string text_for(const CharLMConfig& c) {
  if (!c.text.empty()) return data::load_text(c.text);
  return data::kjv_text("runs/corpus/kjv.txt");
}

// The text of a run, for a message: "--text 'corpus.txt'", or the default's name.
std::string text_name(const CharLMConfig& c) {
  return c.text.empty() ? std::string("the King James Bible (the default --text)")
                        : fmt::format("--text '{}'", safetensors::printable(c.text));
}

// A --text file that loading cannot hold (its bytes and an 8-byte token id
// a character) is refused before it is read (status 2): else it took
// minutes to fail, or the kernel killed the run. (A pipe's size is unknown
// until it is read.)
void check_text_memory(const std::string& path) {
  std::error_code ec;
  if (path.empty() || !std::filesystem::is_regular_file(path, ec)) return;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return;  // load_text reports it
  check_memory_needed("run charlm", fmt::format("--text '{}' ({} bytes)", safetensors::printable(path), size),
                      "to load (its bytes and an 8-byte token id a character)", "text",
                      data::text_memory_bytes(static_cast<int64_t>(size)));
}

// A --text of 64 MiB or more takes seconds to read and tokenize (100 MB:
// about 3.5 s on 2 cores): a line says so first, so that the wait is not
// silent. Smaller texts load in under a second and say nothing here.
void announce_long_load(const std::string& path) {
  std::error_code ec;
  if (path.empty() || !dist::is_main() || !std::filesystem::is_regular_file(path, ec)) return;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec || size < (uintmax_t{64} << 20)) return;
  fmt::print("text: reading and tokenizing '{}' ({:.0f} MB) ...\n", safetensors::printable(path), size / 1e6);
  std::fflush(stdout);
}

// A charlm checkpoint's tokenizer; errors begin with `who` ("sample: " or "").
data::CharTokenizer tokenizer_of(const Checkpoint& ck, const std::string& path, const std::string& who) {
  auto tt = ck.tensors.find("tokenizer/codepoints");
  if (tt == ck.tensors.end()) fail("{}checkpoint '{}' has no tokenizer/codepoints", who, path);
  try {
    return data::CharTokenizer::from_tensor(tt->second);
  } catch (const Error& e) {
    fail("{}checkpoint '{}': tokenizer/codepoints: {}", who, path, e.what());
  }
}

// The model options a charlm checkpoint's run saved (config.layers, heads,
// width, context), each checked before a model is built from them: in range,
// heads dividing width, and width, context and layers those of the weights
// (config.* attributes are not covered by the tensors' checksums, and an
// altered one gave "MultiHeadAttention: d_model=32 is not divisible by
// heads=3" or an allocation of terabytes). Errors begin with `who`
// ("sample: " or "") and name the checkpoint and the attribute. (A changed
// config.heads that still divides width changes no weight's shape: nothing
// in the checkpoint can tell it from the run's.)
CharLMConfig model_config(const Checkpoint& ck, const std::string& path, const std::string& who) {
  auto num = [&](const char* k, int64_t lo, int64_t hi) {
    auto it = ck.config.find(k);
    if (it == ck.config.end()) fail("{}checkpoint '{}': config.{} is missing", who, path, k);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(it->second.c_str(), &end, 10);
    if (it->second.empty() || *end != '\0' || errno != 0 || v < lo || v > hi)
      fail("{}checkpoint '{}': config.{} is '{}', expected an integer in {}..{}", who, path, k, it->second, lo, hi);
    return static_cast<int64_t>(v);
  };
  CharLMConfig c;
  c.layers = num("layers", 1, kMaxLayers);
  c.heads = num("heads", 1, kMaxWidth);
  c.width = num("width", 1, kMaxWidth);
  c.context = num("context", 2, kMaxLength);
  if (c.width % c.heads != 0)
    fail("{}checkpoint '{}': config.heads is {}, expected a divisor of config.width ({})", who, path, c.heads, c.width);
  auto weight = [&](const std::string& k) -> const Tensor* {
    auto it = ck.tensors.find("model/" + k);
    return it != ck.tensors.end() && it->second.dim() == 2 ? &it->second : nullptr;
  };
  auto differs = [&](const char* k, int64_t v, const std::string& tensor, int64_t want) {
    fail("{}checkpoint '{}': config.{} is {}, but its weights model/{} have shape {}: expected config.{} {}", who, path,
         k, v, tensor, shape_str(weight(tensor)->shape()), k, want);
  };
  if (const Tensor* e = weight("wte.weight"); e && e->size(1) != c.width) differs("width", c.width, "wte.weight", e->size(1));
  if (const Tensor* e = weight("wpe.weight"); e && e->size(0) != c.context)
    differs("context", c.context, "wpe.weight", e->size(0));
  std::set<int64_t> blocks;
  for (const auto& [k, t] : ck.tensors)
    if (k.rfind("model/blocks.", 0) == 0) blocks.insert(std::atoll(k.c_str() + 13));
  if (!blocks.empty() && static_cast<int64_t>(blocks.size()) != c.layers)
    fail("{}checkpoint '{}': config.layers is {}, but its weights hold {} blocks (model/blocks.0 to model/blocks.{}): "
         "expected config.layers {}",
         who, path, c.layers, blocks.size(), *blocks.rbegin(), blocks.size());
  return c;
}

// A character for a message: "'a' (U+0061)", or only "U+000A" for one that
// does not print (a control character).
std::string describe_char(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp < 0xA0)) return fmt::format("U+{:04X}", cp);
  return fmt::format("'{}' (U+{:04X})", data::encode_utf8({cp}), cp);
}

// The code points of a heed_vocabulary value (vocabulary_metadata's JSON
// array of integers); an error names what is wrong.
std::vector<uint32_t> parse_vocabulary(const std::string& v) {
  const nlohmann::json j = nlohmann::json::parse(v, nullptr, false);
  auto bad = [](const std::string& why) {
    fail("its {} metadata is not a JSON array of code points ({})", kVocabularyKey, why);
  };
  if (!j.is_array()) bad(j.is_discarded() ? "not valid JSON" : "not an array");
  if (j.empty()) bad("an empty array");
  std::vector<uint32_t> cps;
  for (const nlohmann::json& e : j) {
    if (!e.is_number_unsigned() || e.get<uint64_t>() > 0x10FFFF)
      bad(fmt::format("item {} is {}, not an integer in 0..1114111", cps.size(),
                      e.is_number() ? e.dump() : std::string("a JSON ") + e.type_name()));
    cps.push_back(static_cast<uint32_t>(e.get<uint64_t>()));
  }
  return cps;
}

// --init-from of a charlm run: a token id of the file's weights must stand
// for the character it stands for in this run's text. heed export records
// the vocabulary (heed_vocabulary); a file without it (PyTorch's, an older
// heed's) is taken to follow this text's, as its shapes alone cannot tell.
void check_init_vocabulary(const std::string& file, const data::CharTokenizer& tok, const std::string& text) {
  const std::string where = fmt::format("run charlm: --init-from '{}'", file);
  std::map<std::string, std::string> meta;
  try {
    meta = safetensors::metadata(file);
  } catch (const Error& e) {
    fail("{}: {}", where, e.what());
  }
  const std::string text_name = text.empty() ? std::string("the King James Bible (the default --text)")
                                             : fmt::format("--text '{}'", text);
  const auto it = meta.find(kVocabularyKey);
  if (it == meta.end()) {
    fmt::print("note: {} records no vocabulary ({}): its token ids are taken to be those of {}, its {} characters "
               "in code-point order\n",
               file, kVocabularyKey, text_name, tok.vocab_size());
    return;
  }
  std::vector<uint32_t> theirs;
  try {
    theirs = parse_vocabulary(it->second);
  } catch (const Error& e) {
    fail("{}: {}", where, e.what());
  }
  const std::vector<uint32_t>& ours = tok.chars();
  if (theirs == ours) return;
  size_t id = 0;
  while (id < theirs.size() && id < ours.size() && theirs[id] == ours[id]) ++id;
  auto at = [&](const std::vector<uint32_t>& v) { return id < v.size() ? describe_char(v[id]) : std::string("none"); };
  fail("{} was trained on another vocabulary than {}: id {} is {} in the file and {} in the text (the file has {} "
       "characters, the text {}); expected weights trained on text of the same characters",
       where, text_name, id, at(theirs), at(ours), theirs.size(), ours.size());
}

// The validation tokens of a charlm checkpoint's run: the last 10% of the
// text it trained on, read from `text` when given (where it is now; the
// command's option text_option names it, "--text"), else from its run's
// --text (or the default corpus). A text whose bytes are not the run's (the
// checkpoint's corpus/fingerprint; older checkpoints lack it) would give
// another loss than the run's: refused, as a resume on it is. Errors begin
// with `who`; a text shorter than one context window of the model is
// refused in its words, not in run charlm's.
Tensor validation_tokens(const Checkpoint& ck, const std::string& path, const data::CharTokenizer& tok,
                         int64_t context, const std::string& who, const std::string& text,
                         const std::string& text_option) {
  CharLMConfig c;
  c.text = text.empty() ? config_text(ck, path, "text") : text;
  const std::string source = !text.empty() ? fmt::format("{} '{}'", text_option, text)
                             : c.text.empty() ? std::string("the King James Bible (its run's default --text)")
                                              : fmt::format("its run's --text '{}'", c.text);
  const std::string give = text.empty() && !text_option.empty()
                               ? fmt::format("; give {} where it is now", text_option)
                               : std::string();
  // A pipe the run read (a named one, or the shell's <(...)) holds its text
  // no more: opening it again waited for a writer that would not come
  // (heed sample without --prompt hung).
  if (std::error_code ec; text.empty() && !c.text.empty() && std::filesystem::is_fifo(c.text, ec))
    fail("{}: its run's --text '{}' is a pipe, which the run read to its end: it holds no text to read again "
         "(the validation text of checkpoint '{}'){}",
         who, c.text, path, text_option.empty() ? "" : fmt::format("; give {} FILE holding that text", text_option));
  std::string bytes;
  try {
    bytes = text_for(c);
  } catch (const Error& e) {  // the run's --text as it was given: relative to where the run started
    if (!text.empty()) fail("{}: {} (given as {})", who, e.what(), text_option);
    fail("{}: {} (the validation text of checkpoint '{}': {}, read from this directory{})", who, e.what(), path,
         source, give);
  }
  const auto fp = ck.tensors.find("corpus/fingerprint");
  if (fp != ck.tensors.end() && fp->second.numel() == 1 && fp->second.dtype() == DType::i64 &&
      fp->second.to_vector<int64_t>()[0] != static_cast<int64_t>(data::text_fingerprint(bytes)))
    fail("{}: {} is not the text checkpoint '{}' was trained on (its corpus/fingerprint differs: the file changed "
         "since the run, or is another one); expected that text{}",
         who, source, path, give);
  Tensor ids;
  try {
    ids = tok.encode_tensor(bytes);
  } catch (const data::TextMemoryError& e) {
    fail("{}: {} ({} bytes) does not fit in memory: {}", who, source, e.bytes(), e.detail());
  } catch (const Error& e) {  // a checkpoint without the fingerprint, on another text
    std::string what = e.what();
    if (what.rfind("CharTokenizer: ", 0) == 0) what = what.substr(15);
    fail("{}: {}: {} of checkpoint '{}'; expected the text it was trained on{}", who, source, what, path, give);
  }
  // Its own copy: a view would keep the whole text's ids alive.
  Tensor val = kernel::clone(data::split_tokens(ids).val);
  if (val.numel() < context + 1)
    fail("{}: {} has {} character{}, and its last 10% (the validation text) {}, fewer than the model's context of {} "
         "+ 1; expected the text checkpoint '{}' was trained on{}",
         who, source, ids.numel(), ids.numel() == 1 ? "" : "s", val.numel(), context, path, give);
  return val;
}

// heed sample's --prompt for a closing hint: nothing when heed sample's
// default (the Bible's) can be encoded, else " --prompt '<12 characters of
// the validation text val>'", quoted for a POSIX shell: the first 12 in a
// row free of control characters (a NUL, a tab, a CR or newline would be
// pasted into the quotes raw), as heed attend picks its prompt
// (attend_default_prompt), or the longest such stretch when none is that
// long; nothing when val holds control characters only.
std::string sample_prompt_option(const data::CharTokenizer& tok, const Tensor& val) {
  try {
    tok.encode(kSamplePrompt);
    return "";
  } catch (const Error&) {
  }
  const int64_t n = std::min<int64_t>(val.numel(), int64_t{1} << 14);
  const std::string prompt = attend_default_prompt(
      tok.decode(std::vector<int64_t>(val.data<int64_t>(), val.data<int64_t>() + n)), 12);
  if (prompt.empty()) return "";
  std::string quoted;
  for (char ch : prompt) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return " --prompt '" + quoted + "'";
}

class CharLMModels : public TrainedModels {
 public:
  CharLMModels(const Checkpoint& ck, const std::string& path, const std::string& who, const std::string& text,
               const std::string& text_option) {
    experiment_ = "charlm";
    c_ = model_config(ck, path, who.empty() ? std::string() : who + ": ");
    c_.batch = config_int(ck, path, "batch");
    c_.eval_batches = config_int(ck, path, "eval-batches");
    tok_ = tokenizer_of(ck, path, "");
    val_ = validation_tokens(ck, path, tok_, c_.context, who, text, text_option);
    model_ = make_model(c_, tok_.vocab_size(), nullptr);
    try {
      model_->load_state_dict(ck.get("model"));
    } catch (const Error& e) {
      fail("{}{}checkpoint '{}': {}", who, who.empty() ? "" : ": ", path, e.what());
    }
  }
  std::vector<std::string> names() const override { return {""}; }
  nn::Module& model(const std::string&) override { return *model_; }
  std::vector<std::pair<std::string, double>> evaluate(const std::string&) override {
    return {{"val_loss", *eval_loss(*model_, val_, c_, 12345)}};
  }
  std::string sample_options() const override { return sample_prompt_option(tok_, val_); }

 private:
  CharLMConfig c_;
  data::CharTokenizer tok_;
  Tensor val_;
  std::shared_ptr<nn::GPT> model_;
};

}  // namespace

std::vector<int64_t> generate(nn::GPT& model, const std::vector<int64_t>& prompt, const SampleOptions& o) {
  if (prompt.empty()) fail("sample: the prompt must hold at least one character");
  if (o.temperature <= 0) fail("sample: temperature must be > 0, got {}", o.temperature);
  autograd::NoGradGuard ng;
  model.eval();
  Generator g(static_cast<uint64_t>(o.seed));
  const int64_t context = model.options.context_, V = model.options.vocab_;
  std::vector<int64_t> seq = prompt;
  nn::GPTCache cache;
  auto ids_tensor = [](const std::vector<int64_t>& v, size_t from) {
    std::vector<int64_t> part(v.begin() + static_cast<std::ptrdiff_t>(from), v.end());
    return Tensor::from_i64(part, {1, static_cast<int64_t>(part.size())});
  };
  for (int64_t i = 0; i < o.tokens; ++i) {
    Tensor logits;  // [1, t, V]
    const size_t window = std::min<size_t>(seq.size(), static_cast<size_t>(context));
    if (!o.use_cache) {
      logits = model.forward(ids_tensor(seq, seq.size() - window));
    } else if (cache.length() == 0 || cache.length() >= context) {
      // (Re)fill the cache with the last window; positions restart at 0.
      cache.clear();
      logits = model.forward_cached(ids_tensor(seq, seq.size() - window), cache);
    } else {
      logits = model.forward_cached(ids_tensor(seq, seq.size() - 1), cache);
    }
    Tensor last = kernel::contiguous(kernel::narrow(logits, 1, logits.size(1) - 1, 1));
    std::vector<double> l = last.to_vector<double>();
    // top-k, temperature, softmax, one draw.
    if (o.top_k > 0 && o.top_k < V) {
      std::vector<double> sorted = l;
      std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<double>());
      double kth = sorted[static_cast<size_t>(o.top_k - 1)];
      for (auto& v : l)
        if (v < kth) v = -INFINITY;
    }
    // exp((v - max) / T): the largest logit weighs 1 and the others less,
    // whatever T. (Dividing first, v / T overflowed to inf for a tiny T, such
    // as 1e-310, inf - inf was NaN, and every draw fell through to the last
    // character.) As T goes to 0 this is greedy decoding: the others' weights
    // underflow to 0.
    double mx = -INFINITY;
    for (double v : l) mx = std::max(mx, v);
    double z = 0;
    for (auto& v : l) {
      v = std::exp((v - mx) / o.temperature);
      z += v;
    }
    double u = g.uniform() * z, acc = 0;
    int64_t pick = V - 1;
    for (int64_t k = 0; k < V; ++k) {
      acc += l[static_cast<size_t>(k)];
      if (u < acc) {
        pick = k;
        break;
      }
    }
    seq.push_back(pick);
  }
  return std::vector<int64_t>(seq.begin() + static_cast<std::ptrdiff_t>(prompt.size()), seq.end());
}

std::string vocabulary_metadata(const data::CharTokenizer& tok) {
  return fmt::format("[{}]", fmt::join(tok.chars(), ", "));
}

std::unique_ptr<TrainedModels> charlm_trained_models(const Checkpoint& ck, const std::string& path,
                                                     const std::string& who, const std::string& text,
                                                     const std::string& text_option) {
  return std::make_unique<CharLMModels>(ck, path, who, text, text_option);
}

std::string validation_start(const Checkpoint& ck, const std::string& path, const data::CharTokenizer& tok,
                             const std::string& who, int64_t n) {
  const Tensor val = validation_tokens(ck, path, tok, 1, who, "", "");
  const int64_t k = std::min<int64_t>(n, val.numel());
  return tok.decode(std::vector<int64_t>(val.data<int64_t>(), val.data<int64_t>() + k));
}

int run_charlm(const std::vector<std::string>& args, const std::vector<std::string>& command_line) {
  CharLMConfig c;
  Run run("charlm",
          "Trains a character-level GPT (token + learned position embeddings, pre-LN transformer\n"
          "blocks, AdamW, warm-up then cosine or constant learning rate, global-norm clipping) on a\n"
          "text file (default: the King James Bible) and logs losses and attention maps to HDF5.",
          RunOptions("runs/charlm.h5").steps(2000).checkpoint_every(500));
  c.warmup = -1;  // default: 100 steps, at most a tenth of the run
  run.args()
      .integer("layers", &c.layers, "transformer blocks", 1, kMaxLayers)
      .integer("heads", &c.heads, "attention heads", 1, kMaxWidth)
      .integer("width", &c.width, "model width (divisible by heads)", 1, kMaxWidth)
      .integer("context", &c.context, "context length in characters", 2, kMaxLength)
      .integer("batch", &c.batch, "sequences per step", 1, kMaxBatch)
      .real("lr", &c.lr, "peak learning rate", 0.0, 1e300, true)
      .real("min-lr", &c.min_lr, "final learning rate of the cosine schedule", 0.0)
      .integer("warmup", &c.warmup,
               "linear warm-up steps (-1: 100, at most a tenth of --steps; resumed, the run's own)", -1)
      .choice("schedule", &c.schedule, {"cosine", "constant"},
              "learning-rate schedule after warm-up (cosine decays to --min-lr at --steps, which a resumed run may raise)")
      .choice("init", &c.init, {"gpt2", "torch"},
              "initialisation: gpt2 (N(0, 0.02), scaled residual projections) or torch (PyTorch's layer defaults)")
      .real("weight-decay", &c.weight_decay, "AdamW decoupled weight decay", 0.0)
      .real("dropout", &c.dropout, "dropout probability", 0.0, 1.0, false, true)
      .real("clip", &c.clip, "clip the global gradient norm to this (0: off)", 0.0)
      .integer("eval-every", &c.eval_every, "evaluate every N steps", 1)
      .integer("eval-batches", &c.eval_batches, "fixed batches per evaluation", 1, kMaxBatch)
      .integer("seed", &c.seed, "seed", 0)
      .path("text", &c.text, "UTF-8 text file to train on (default: the King James Bible)");
  run.reads_file("text");
  run.resolved_default("warmup", "-1");  // resumed, the warm-up the run began with
  if (!run.parse(args, command_line)) return 0;
  c.steps = run.steps();
  if (c.warmup < 0) c.warmup = std::min<int64_t>(100, c.steps / 10);  // saved resolved: a resumed run keeps it
  if (c.width % c.heads != 0)
    throw UsageError(fmt::format("run charlm: --width {} is not divisible by --heads {}", c.width, c.heads));
  if (c.warmup > c.steps) {
    if (run.resuming() && !run.args().given("warmup"))  // the warm-up the run began with (resolved then)
      throw UsageError(fmt::format("run charlm: --steps {} ends within this run's warm-up of {} steps (set when it "
                                   "began); expected --steps of at least {}",
                                   c.steps, c.warmup, c.warmup));
    throw UsageError(fmt::format("run charlm: --warmup {} exceeds --steps {}", c.warmup, c.steps));
  }
  if (c.schedule == "cosine" && c.min_lr > c.lr)
    throw UsageError(fmt::format("run charlm: --min-lr {} exceeds --lr {} (the cosine schedule decays from --lr "
                                 "to --min-lr)",
                                 c.min_lr, c.lr));
  // Data-parallel (mpirun -np N): every process draws the same global batch
  // and trains on its N-th of the rows; the gradients are averaged.
  const int64_t procs = dist::size();
  if (c.batch % procs != 0)
    throw UsageError(fmt::format("run charlm: --batch {} is not divisible by the {} processes of this job", c.batch,
                                 procs));

  // Data: the vocabulary is built from the whole corpus and saved with the model.
  Stopwatch sw;
  std::string text;
  data::CharTokenizer tok;
  data::TextSplit split;
  uint64_t fingerprint = 0;
  check_text_memory(c.text);
  announce_long_load(c.text);
  try {
    text = text_for(c);
    // The vocabulary, then the ids straight into one int64 tensor whose two
    // parts are views; the text's bytes are not kept past its fingerprint.
    fingerprint = data::text_fingerprint(text);
    tok = data::CharTokenizer::from_text(text);
    split = data::split_tokens(tok.encode_tensor(text));
    std::string().swap(text);
  } catch (const data::TextMemoryError& e) {
    fail("run charlm: {} ({} bytes) does not fit in memory: {}; expected a smaller --text (or more memory)",
         text_name(c), e.bytes(), e.detail());
  } catch (const std::bad_alloc&) {  // the tokenizer's own tables
    fail("run charlm: {} ({} bytes) does not fit in memory: out of memory building its vocabulary; expected a "
         "smaller --text (or more memory)",
         text_name(c), text.size());
  } catch (const Stopped&) {
    throw;  // a signal while waiting for a pipe: guard_main says so
  } catch (const Error& e) {
    if (c.text.empty()) throw;  // the default corpus's messages name it
    if (run.resuming() && !run.args().given("text"))
      fail("run charlm: {} (the run's --text, read from this directory when relative; give --text where it is now)",
           e.what());
    fail("run charlm: --text: {}", e.what());
  }
  // Each part holds a window of --context characters and the one after it.
  // A resume keeps its --context: a text too short for it is not the one
  // the run trained on (which was long enough).
  if (split.val.numel() < c.context + 1 || split.train.numel() < c.context + 1) {
    const int64_t n = split.train.numel() + split.val.numel();
    const std::string source = c.text.empty() ? std::string("the text") : fmt::format("--text '{}'", c.text);
    if (run.resuming())
      fail("run charlm: {} has {} character{}, too few for the run's --context {}: its 90/10 split needs at least {} "
           "in each part; it is not the text checkpoint '{}' was trained on; expected that text",
           source, n, n == 1 ? "" : "s", c.context, c.context + 1, run.args().value("resume"));
    fail("run charlm: {} has {} character{}; its 90/10 split needs at least {} in each part for --context {} "
         "(expected a shorter --context or a longer --text)",
         source, n, n == 1 ? "" : "s", c.context + 1, c.context);
  }
  fmt::print("text: {} characters, vocabulary {} ({})\n", split.train.numel() + split.val.numel(), tok.vocab_size(),
             format_seconds(sw.seconds()));
  // Memory the run takes at least, refused before anything is written when
  // it is not there (else the kernel kills the run part way).
  check_memory("run charlm", "batch", c.batch,
               fmt::format("a training step's activations and an evaluation's attention maps ({} sequences of "
                           "--context {}, {} blocks of --width {} with --heads {}, a vocabulary of {} characters)",
                           c.batch, c.context, c.layers, c.width, c.heads, tok.vocab_size()),
               charlm_memory(c, tok.vocab_size()));
  // Before any file is made: weights trained on other characters are refused.
  if (const std::string init = run.args().value("init-from"); !init.empty()) check_init_vocabulary(init, tok, c.text);

  Generator init(static_cast<uint64_t>(c.seed) * 7919 + 11), batches(static_cast<uint64_t>(c.seed));
  auto model = make_model(c, tok.vocab_size(), &init);
  optim::AdamW opt(model->named_parameters(), optim::AdamWOptions().lr(c.lr).weight_decay(c.weight_decay));
  std::unique_ptr<optim::LRSchedule> sched;
  if (c.schedule == "cosine") sched = std::make_unique<optim::WarmupCosineLR>(c.lr, c.warmup, c.steps, c.min_lr);
  else if (c.warmup > 0) sched = std::make_unique<optim::WarmupCosineLR>(c.lr, c.warmup, c.steps, c.lr);
  else sched = std::make_unique<optim::ConstantLR>(c.lr);

  // The probe: a fixed text whose attention maps are logged at each evaluation.
  std::string probe_text;
  try {
    tok.encode(kProbe);
    std::vector<uint32_t> cps = data::decode_utf8(kProbe);
    cps.resize(std::min<size_t>(cps.size(), static_cast<size_t>(c.context)));
    probe_text = data::encode_utf8(cps);
  } catch (const Error&) {  // a corpus without some of its characters: the start of the validation text
    probe_text = tok.decode(std::vector<int64_t>(split.val.data<int64_t>(),
                                                 split.val.data<int64_t>() + std::min<int64_t>(c.context, 48)));
  }
  const std::vector<int64_t> probe_ids = tok.encode(probe_text);
  const int64_t P = static_cast<int64_t>(probe_ids.size());

  const std::vector<bool> boundary = word_boundaries(tok);
  optim::DataParallel ddp(model->named_parameters());
  ddp.broadcast_parameters();
  double last_val = NAN, last_train = NAN;
  run.track("model", *model);
  run.track("optim", opt);
  run.track("rng/batches", batches);
  run.track("result/val_loss", last_val);
  run.track("result/train_loss", last_train);
  // Ctrl-C or SIGTERM during an evaluation cuts it short (a big --eval-batches
  // takes minutes; a batch system's SIGKILL follows SIGTERM after a grace
  // period): the checkpoint the stop writes records the step, and the
  // resumed run evaluates it first, so the log is the one an uninterrupted
  // run writes. (Not required: older checkpoints lack it.)
  int64_t eval_pending = 0;
  run.track("eval/pending", eval_pending, false);
  std::vector<std::string> eval_logs = {"val_loss", "train_eval_loss"};  // what evaluate_and_log writes
  for (int64_t l = 0; l < c.layers; ++l) eval_logs.push_back(fmt::format("attention/layer{}/maps", l));
  for (const std::string& name : head_stat_names()) eval_logs.push_back("heads/" + name);
  run.owed_work("eval/pending", eval_logs);
  // Both from --text: a resume on another text is refused naming it.
  run.track_constant("tokenizer/codepoints", tok.to_tensor(), true, "text");  // `heed sample` reads it
  // The text itself: a resume on another one with the same characters would
  // train on other windows (not required: older checkpoints lack it).
  run.track_constant("corpus/fingerprint",
                     Tensor::from_i64({static_cast<int64_t>(fingerprint)}, {1}), false, "text");
  run.begin([&](RunLog& log) {
    std::vector<int64_t> all(static_cast<size_t>(tok.vocab_size()));
    for (int64_t i = 0; i < tok.vocab_size(); ++i) all[static_cast<size_t>(i)] = i;
    log.set_attr("vocabulary", tok.decode(all));
    log_model(log, "gpt", *model);
    for (const char* m : {"train_loss", "lr", "grad_norm", "tokens_per_second", "val_loss", "train_eval_loss"})
      log.declare_scalar(m);
    for (int64_t l = 0; l < c.layers; ++l) log.declare_series(fmt::format("attention/layer{}/maps", l), {c.heads, P, P});
    log.set_attr("probe_text", probe_text, "series/attention");  // docs/log-format.md: the maps' positions
    for (const std::string& name : head_stat_names()) log.declare_series("heads/" + name, {c.layers, c.heads});
    // heads/<stat> [layers, heads] on fixed validation windows; heads/uniform
    // [stats]: the same statistics under uniform attention on those windows.
    Generator hg(777);
    Tensor hx, hy;
    data::random_windows(split.val, c.batch, c.context, hg, hx, hy);
    const HeadStats u = uniform_head_stats(hx, boundary);
    std::vector<double> uv;
    for (size_t k = 0; k < head_stat_names().size(); ++k) uv.push_back(head_stat(u, k));
    log.write_tensor("heads/uniform", Tensor::from_f64(uv, {static_cast<int64_t>(uv.size())}));
    std::string stat_names;
    for (const auto& n : head_stat_names()) stat_names += (stat_names.empty() ? "" : " ") + n;
    log.set_attr("stats", stat_names, "heads");
  });
  fmt::print("{}\n", model->summary());

  // False when a stop cut the evaluation short (may_stop: the run's last
  // step is evaluated whole, as its result, unless it is owed): nothing
  // logged or kept.
  auto evaluate_and_log = [&](int64_t step, bool may_stop) {
    std::function<bool()> stop;
    if (may_stop) stop = [&run] { return run.stop_requested(); };
    const std::optional<double> val = eval_loss(*model, split.val, c, 12345, stop);
    const std::optional<double> train = val ? eval_loss(*model, split.train, c, 54321, stop) : std::nullopt;
    if (!train) {
      fmt::print("step {}/{}: evaluation cut short by the stop; a resumed run evaluates step {} first\n", step, c.steps,
                 step);
      return false;
    }
    last_val = *val;
    last_train = *train;
    run.log().scalar("val_loss", step, last_val);
    run.log().scalar("train_eval_loss", step, last_train);
    autograd::NoGradGuard ng;
    model->eval();
    model->keep_attention(true);
    model->forward(Tensor::from_i64(probe_ids, {1, P}));
    auto maps = model->attention_maps();
    for (int64_t l = 0; l < c.layers; ++l)
      run.log().series(fmt::format("attention/layer{}/maps", l), step,
                       kernel::reshape(maps[static_cast<size_t>(l)], {c.heads, P, P}));
    // What each head does, on fixed validation windows (heads.h).
    Generator hg(777);
    Tensor hx, hy;
    data::random_windows(split.val, c.batch, c.context, hg, hx, hy);
    model->forward(hx);
    maps = model->attention_maps();
    const auto& names = head_stat_names();
    std::vector<std::vector<double>> values(names.size());
    HeadStats uniform;
    for (int64_t l = 0; l < c.layers; ++l) {
      std::vector<HeadStats> hs = head_stats(maps[static_cast<size_t>(l)], hx, boundary, &uniform);
      for (size_t k = 0; k < names.size(); ++k)
        for (const HeadStats& h : hs) values[k].push_back(head_stat(h, k));
    }
    for (size_t k = 0; k < names.size(); ++k)
      run.log().series("heads/" + names[k], step, Tensor::from_f64(values[k], {c.layers, c.heads}));
    model->keep_attention(false);
    model->train();
    fmt::print("step {}/{}: train loss {:.4f} val loss {:.4f}\n", step, c.steps, last_train, last_val);
    return true;
  };
  // The evaluation a stop cut short. Cut again, it stays owed: the run then
  // stops before its next step (Run::next), the checkpoint as it was.
  if (eval_pending > 0 && evaluate_and_log(eval_pending, true)) eval_pending = 0;

  const double tokens = static_cast<double>(c.batch * c.context);
  while (run.next()) {
    const int64_t step = run.step();
    Stopwatch st;
    sched->apply(opt, step - 1);
    Tensor x, y;
    data::random_windows(split.train, c.batch, c.context, batches, x, y);  // [B, T]: the global batch
    x = dist::shard(x);
    y = dist::shard(y);
    opt.zero_grad();
    Tensor loss = cross_entropy(model->forward(x), y);
    ddp.backward(loss);
    const double gn = c.clip > 0 ? optim::clip_grad_norm(model->named_parameters(), c.clip)
                                 : optim::grad_norm(model->named_parameters());
    opt.step();
    const double l = dist::mean(loss.item());  // the global batch's
    run.log().scalar("train_loss", step, l);
    run.log().scalar("lr", step, opt.lr());
    run.log().scalar("grad_norm", step, gn);
    run.log().scalar("tokens_per_second", step, tokens / st.seconds());
    run.show_loss("loss", l);
    run.show("grad norm", gn);
    if ((step % c.eval_every == 0 || step == c.steps) && !evaluate_and_log(step, step < c.steps)) eval_pending = step;
  }
  if (int rc = run.finish()) return rc;
  // heed sample's default prompt is the Bible's; a text of other characters
  // gets a prompt from its own validation text in the hint.
  const std::string prompt_option = sample_prompt_option(tok, split.val);
  fmt::print("\nfinal: train loss {:.4f}, validation loss {:.4f}, {}\nlog: {}\ncheckpoint: {}\n"
             "sample it: heed sample {}{}\n",
             last_train, last_val, format_seconds(run.seconds()), run.log_path(), run.checkpoint_path(),
             run.checkpoint_path(), prompt_option);
  return 0;
}

std::vector<int64_t> CharModel::encode_prompt(const std::string& prompt, const char* command,
                                              const std::string& path) const {
  // Bytes of another encoding (a Latin-1 terminal) would be printed as they
  // are, garbling the message: show them as \xNN.
  if (!data::is_utf8(prompt))
    throw UsageError(fmt::format("{}: --prompt '{}' is not UTF-8 (the bytes shown as \\xNN); expected UTF-8 text",
                                 command, data::escape_invalid_utf8(prompt)));
  try {
    return tok.encode(prompt);
  } catch (const Error& e) {
    std::string why = e.what();
    if (why.rfind("CharTokenizer: ", 0) == 0) why = why.substr(15);
    // On one line: a newline or other control character in the prompt is
    // shown escaped, as heed attend shows prompts.
    throw UsageError(
        fmt::format("{}: --prompt \"{}\": {} of checkpoint '{}'", command, attend_printable(prompt), why, path));
  }
}

CharModel load_charlm(const std::string& path, const char* command) {
  return charlm_from(load_checkpoint(path, "charlm"), path, command);
}

CharModel charlm_from(const Checkpoint& ck, const std::string& path, const char* command) {
  CharModel cm;
  cm.tok = tokenizer_of(ck, path, fmt::format("{}: ", command));
  const CharLMConfig c = model_config(ck, path, fmt::format("{}: ", command));
  cm.model = make_model(c, cm.tok.vocab_size(), nullptr);
  try {
    cm.model->load_state_dict(ck.get("model"));
  } catch (const Error& e) {
    fail("{}: checkpoint '{}': {}", command, path, e.what());
  }
  // A diverged run's weights (or a file altered after its checksums) would
  // give nonsense that looks like output: refuse, naming the parameter.
  for (const auto& [name, p] : cm.model->named_parameters())
    if (!kernel::all_finite(p))
      fail("{}: checkpoint '{}': parameter {} holds values that are not finite (NaN or inf): the run diverged",
           command, path, name);
  return cm;
}

int run_sample(const std::vector<std::string>& args) {
  std::string path;
  SampleOptions o;
  std::string prompt = kSamplePrompt;
  bool no_cache = false;
  Args a("sample",
         "Generates text from a character-level GPT checkpoint (written by heed run charlm). Until the\n"
         "text (prompt included) fills the model's context, each new character reuses the cached keys\n"
         "and values of the ones before it; past the context, every character runs the model on the\n"
         "whole window of the last CONTEXT characters again (the positions are learned and absolute: each\n"
         "step moves every character to another one), with or without the cache.");
  a.text("prompt", &prompt,
         "text to continue (default: \"" + std::string(kSamplePrompt) +
             "\"; for a run on a text without its characters, the first line of the run's validation text that is "
             "as long, or its longest)")
      .integer("tokens", &o.tokens, "characters to generate", 1, kMaxLength)
      .real("temperature", &o.temperature, "softmax temperature", 0.0, 1e300, true)
      .integer("top-k", &o.top_k, "sample among the k most likely characters (0: all)", 0)
      .integer("seed", &o.seed, "seed", 0)
      .flag("no-cache", &no_cache, "run the model on the whole window for every character, also before the context is full (slower "
            "there; same tokens)");
  a.set_program("heed sample CHECKPOINT");  // errors begin "sample: ", as every command's
  if (!a.parse(args, &path, "a checkpoint path")) return 0;
  o.use_cache = !no_cache;
  const Checkpoint ck = load_checkpoint(path, "charlm");
  CharModel cm = charlm_from(ck, path, "sample");
  auto& model = cm.model;
  const data::CharTokenizer& tok = cm.tok;
  // The default works with any model, as heed attend's does.
  if (!a.given("prompt"))
    prompt = default_prompt(ck, path, tok, prompt, static_cast<int64_t>(std::string_view(kSamplePrompt).size()), 1,
                            "sample");
  std::vector<int64_t> ids = cm.encode_prompt(prompt, "sample", path);
  Stopwatch sw;
  std::vector<int64_t> out = generate(*model, ids, o);
  fmt::print("{}{}\n", prompt, tok.decode(out));
  fmt::print(stderr, "({} characters in {}, {})\n", out.size(), format_seconds(sw.seconds()),
             o.use_cache ? "cached keys/values" : "recomputed prefix");
  return 0;
}

}  // namespace heed::experiments
