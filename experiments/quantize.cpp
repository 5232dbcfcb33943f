// experiments/quantize.cpp: `heed quantize` and `heed run compression`.
#include "experiments/quantize.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include "heed.h"

namespace heed::experiments {

// ---- the plan and the quantization ----

std::string LayerQuantization::weight_key() const { return TrainedModels::prefix(model) + "/" + name; }
std::string LayerQuantization::quantized_key() const {
  return "quantized/" + (model.empty() ? std::string() : model + "/") + name;
}

int64_t ModelQuantization::quantized_weights() const {
  int64_t n = 0;
  for (const auto& l : layers) n += l.rows * l.cols;
  return n;
}

int64_t ModelQuantization::stored_bits() const {
  int64_t n = 0;
  for (const auto& l : layers) n += l.q.stored_bits();
  return n;
}

double ModelQuantization::bits_per_weight() const {
  return static_cast<double>(stored_bits()) / static_cast<double>(std::max<int64_t>(quantized_weights(), 1));
}

double ModelQuantization::bits_per_parameter() const {
  const int64_t rest = total_parameters - quantized_weights();
  return static_cast<double>(stored_bits() + 32 * rest) / static_cast<double>(std::max<int64_t>(total_parameters, 1));
}

double ModelQuantization::rel_error() const {
  double e = 0, n = 0;
  for (const auto& l : layers) {
    e += l.sq_error;
    n += l.sq_norm;
  }
  return n > 0 ? std::sqrt(e / n) : std::sqrt(e);
}

namespace {

std::string model_label(const std::string& model, const std::string& name) {
  return model.empty() ? name : model + "/" + name;
}

// A seed of its own for each matrix: its name hashed (FNV-1a) into the run's
// seed (SplitMix64's finaliser), so a matrix's draws do not depend on which
// others are quantized or in what order.
uint64_t matrix_seed(uint64_t seed, const std::string& label) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : label) h = (h ^ c) * 1099511628211ull;
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (h | 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    size_t comma = s.find(',', at);
    if (comma == std::string::npos) comma = s.size();
    std::string item = s.substr(at, comma - at);
    if (!item.empty()) out.push_back(item);
    at = comma + 1;
  }
  return out;
}

}  // namespace

ModelQuantization plan_quantization(TrainedModels& tm, const std::vector<std::string>& names,
                                    const QuantizeSettings& s, const std::string& who) {
  ModelQuantization mq;
  std::set<std::string> keep_unused(s.keep.begin(), s.keep.end());
  for (const std::string& model : names) {
    for (const auto& [name, p] : tm.model(model).named_parameters()) {
      mq.total_parameters += p.numel();
      if (p.dim() < 2) continue;  // biases, LayerNorm weights: float32
      const std::string label = model_label(model, name);
      const bool keep = std::count(s.keep.begin(), s.keep.end(), name) || std::count(s.keep.begin(), s.keep.end(), label);
      keep_unused.erase(name);
      keep_unused.erase(label);
      if (keep) {
        mq.kept.push_back(label + " " + shape_str(p.shape()));
        continue;
      }
      LayerQuantization l;
      l.model = model;
      l.name = name;
      l.shape = p.shape();
      l.rows = p.size(0);
      l.cols = p.numel() / l.rows;
      const std::string as_matrix =
          p.dim() == 2 ? std::string() : fmt::format(" (as a matrix [{}, {}])", l.rows, l.cols);
      if (s.method == quant::Method::e8 && l.cols % 8 != 0)
        throw UsageError(fmt::format(
            "{}: --method e8 quantizes blocks of 8 weights, but {} {} has rows of {}{}, not a multiple of 8; "
            "leave it in float32 with --keep {}, or choose another method",
            who, label, shape_str(l.shape), l.cols, as_matrix, name));
      if (s.method == quant::Method::lplr) {
        const int64_t most = std::min(l.rows, l.cols);
        l.rank = s.rank > 0 ? s.rank : std::max<int64_t>(1, most / 2);
        if (l.rank > most)
          throw UsageError(fmt::format("{}: --rank {} is larger than {} {}{} allows (expected 1..{})", who, s.rank,
                                       label, shape_str(l.shape), as_matrix, most));
      }
      mq.layers.push_back(std::move(l));
    }
  }
  if (!keep_unused.empty())
    throw UsageError(fmt::format("{}: --keep names no weight matrix: {} (expected parameter names such as {})", who,
                                 fmt::join(keep_unused, ", "),
                                 mq.layers.empty() ? std::string("0.weight") : mq.layers.front().name));
  if (mq.layers.empty()) throw UsageError(fmt::format("{}: nothing to quantize (every matrix is kept)", who));
  return mq;
}

void quantize_planned(TrainedModels& tm, ModelQuantization& mq, const QuantizeSettings& s, bool echo) {
  std::map<std::string, std::map<std::string, Tensor>> params;
  for (LayerQuantization& l : mq.layers) {
    if (!params.count(l.model)) params[l.model] = tm.model(l.model).state_dict();
    Tensor p = params[l.model].at(l.name);
    Tensor w = kernel::reshape(p, {l.rows, l.cols});
    quant::Options o;
    o.method = s.method;
    o.bits = s.bits;
    o.range = s.range;
    o.rank = l.rank;
    o.seed = matrix_seed(s.seed, model_label(l.model, l.name));
    l.q = quant::quantize(w, o);
    Tensor w_hat = quant::dequantize(l.q);
    l.rel_error = quant::relative_error(w, w_hat);
    double e = 0, n = 0;
    std::vector<double> a = w.to_vector<double>(), b = w_hat.to_vector<double>();
    for (size_t i = 0; i < a.size(); ++i) {
      e += (a[i] - b[i]) * (a[i] - b[i]);
      n += a[i] * a[i];
    }
    l.sq_error = e;
    l.sq_norm = n;
    kernel::copy_(p, kernel::reshape(w_hat, p.shape()));
    if (echo) {
      const std::string rank = l.rank > 0 ? fmt::format(" rank {}", l.rank) : std::string();
      fmt::print("  {:<34} {:<14} {:>9.4f} {:>9.3f}{}\n", model_label(l.model, l.name), shape_str(l.shape),
                 l.rel_error, l.q.bits_per_weight(), rank);
      std::fflush(stdout);
    }
  }
}

// ---- heed quantize ----

namespace {

constexpr const char* kQuantizeHelp =
    "usage: heed quantize CHECKPOINT [--method M] [--bits B] [options]\n"
    "\n"
    "Quantizes every weight matrix of a trained model (a charlm or shapes checkpoint): each Linear,\n"
    "embedding and convolution weight, seen as [rows, the rest]; biases and LayerNorms stay float32.\n"
    "Reports per layer the relative Frobenius error ||W - W'|| / ||W|| and the bits per weight\n"
    "actually stored (codes, float32 ranges, Hadamard signs or rotation seed), evaluates the\n"
    "quantized model as its run did (charlm: validation loss; shapes: test MSE, and the attention\n"
    "model's pair-attention score) against the float32 one, and writes a checkpoint with the\n"
    "dequantized float32 weights (heed sample and heed inspect read it) and, under quantized/, the\n"
    "stored codes, whose bytes are the bits counted (docs/checkpoint-format.md).\n"
    "\n"
    "methods (core/quantize.h):\n"
    "  uniform    B-bit nearest-neighbour levels on [-R, R], R = the row's (or matrix's) max |w|\n"
    "  hadamard   uniform after the randomized Hadamard transform of the rows (H D / sqrt(d))\n"
    "  gaussian   uniform after a dense random rotation (orthonormalised Gaussian matrix)\n"
    "  e8         randomized Hadamard, then blocks of 8 to the nearest E8 lattice point (as QuIP#)\n"
    "  lplr       low rank, low precision: W ~ L M, L = orth(W Omega) from a randomized range\n"
    "             finder, M the least-squares fit; both factors B-bit uniform\n"
    "\n"
    "options:\n"
    "  --method M         uniform|hadamard|gaussian|e8|lplr (default hadamard)\n"
    "  --bits B           bits per code, 2..16 (default 4)\n"
    "  --rank R           lplr: the factors' rank (default: half of each matrix's smaller side)\n"
    "  --range R          row (one range per row, default) or tensor (one per matrix)\n"
    "  --seed S           seed of the signs, rotations and sketches (default 0)\n"
    "  --keep NAMES       parameters to leave in float32, comma-separated (e.g. 0.weight, or\n"
    "                     attention/0.weight for one model of a shapes checkpoint)\n"
    "  --model NAME       shapes: quantize only this model (cnn or attention; default: every one)\n"
    "  -o, --out FILE     the checkpoint to write (default: CHECKPOINT with .<method>-<bits>bit.ckpt.h5)\n"
    "  --threads N        threads (default 2; results do not depend on it)\n"
    "\n"
    "Exit status: 0 done, 1 error, 2 bad command line. Nothing is written unless everything succeeds.\n";

std::string default_out(const std::string& path, const QuantizeSettings& s) {
  std::string base = path;
  for (const char* ext : {".ckpt.h5", ".h5"})
    if (base.size() > std::strlen(ext) && base.compare(base.size() - std::strlen(ext), std::strlen(ext), ext) == 0) {
      base.resize(base.size() - std::strlen(ext));
      break;
    }
  return fmt::format("{}.{}-{}bit.ckpt.h5", base, quant::method_name(s.method), s.bits);
}

bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code ea, eb;
  fs::path ca = fs::weakly_canonical(a, ea), cb = fs::weakly_canonical(b, eb);
  if (ea || eb) return fs::absolute(a, ea).lexically_normal() == fs::absolute(b, eb).lexically_normal();
  return ca == cb;
}

std::string metric_label(const std::string& metric) {
  if (metric == "val_loss") return "validation loss";
  if (metric == "test_mse") return "test MSE";
  if (metric == "pair_score") return "pair-attention score";
  return metric;
}

}  // namespace

int run_quantize(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    fmt::print("{}", kQuantizeHelp);
    if (args.empty()) throw UsageError("quantize: expected a checkpoint path (see heed quantize --help)");
    return 0;
  }
  const std::string path = args[0];
  if (path.rfind("-", 0) == 0)
    throw UsageError(fmt::format("quantize: expected the checkpoint first, got '{}' (heed quantize CHECKPOINT "
                                 "[options]; see --help)",
                                 path));
  std::string method = "hadamard", range = "row", keep, model, out;
  int64_t bits = 4, rank = 0, seed = 0, threads = 2;
  Args a("quantize", "Quantizes the weight matrices of a trained model.");
  a.choice("method", &method, quant::method_names(), "quantizer")
      .integer("bits", &bits, "bits per code", quant::kMinBits, quant::kMaxBits)
      .integer("rank", &rank, "lplr: the factors' rank (0: half of each matrix's smaller side)", 0)
      .choice("range", &range, {"row", "tensor"}, "one range per row or per matrix")
      .integer("seed", &seed, "seed", 0)
      .text("keep", &keep, "parameters left in float32, comma-separated")
      .text("model", &model, "shapes: only this model")
      .text("out", &out, "the checkpoint to write")
      .integer("threads", &threads, "threads", 1, 1024);
  std::vector<std::string> rest;
  for (size_t i = 1; i < args.size(); ++i) rest.push_back(args[i] == "-o" ? "--out" : args[i]);
  if (!a.parse(rest)) {
    fmt::print("{}", kQuantizeHelp);
    return 0;
  }
  QuantizeSettings s;
  s.method = quant::method_from_name(method);
  s.bits = static_cast<int>(bits);
  s.range = range == "row" ? quant::Range::row : quant::Range::tensor;
  s.rank = rank;
  s.seed = static_cast<uint64_t>(seed);
  s.keep = split_list(keep);
  if (rank != 0 && s.method != quant::Method::lplr)
    throw UsageError(fmt::format("quantize: --rank {} applies to --method lplr only, not {}", rank, method));
  kernel::set_num_threads(static_cast<int>(threads));
  if (out.empty()) out = default_out(path, s);

  Checkpoint ck = load_checkpoint(path, "");
  if (same_file(out, path))
    throw UsageError(fmt::format("quantize: --out '{}' is the checkpoint being read; expected another file", out));
  Stopwatch sw;
  std::unique_ptr<TrainedModels> tm = trained_models(ck, path, "quantize");
  std::vector<std::string> names = tm->names();
  if (!model.empty()) {
    if (std::find(names.begin(), names.end(), model) == names.end())
      throw UsageError(fmt::format("quantize: --model {}: checkpoint '{}' holds {}", model, path,
                                   names == std::vector<std::string>{""} ? std::string("one model (leave out --model)")
                                                                         : fmt::format("{}", fmt::join(names, ", "))));
    names = {model};
  }
  ModelQuantization mq = plan_quantization(*tm, names, s, "quantize");
  prepare_output_path(out);

  fmt::print("{}: {} checkpoint, step {}; {} {} bits, one range per {}{}\n", path, ck.experiment,
             ck.counters.count("step") ? ck.counters.at("step") : 0, method, bits, range,
             s.method == quant::Method::lplr ? (rank > 0 ? fmt::format(", rank {}", rank)
                                                         : std::string(", rank half of each matrix's smaller side"))
                                             : std::string());
  std::vector<std::vector<std::pair<std::string, double>>> before;
  for (const auto& n : names) before.push_back(tm->evaluate(n));
  fmt::print("\n  {:<34} {:<14} {:>9} {:>9}\n", "parameter", "shape", "rel.error", "bits/wt");
  quantize_planned(*tm, mq, s, true);
  for (const std::string& k : mq.kept) fmt::print("  {:<34} kept in float32 (--keep)\n", k);

  int64_t codes = 0, scales = 0, side = 0;
  for (const auto& l : mq.layers) {
    codes += l.q.code_bits();
    scales += l.q.scale_bits();
    side += l.q.side_bits();
  }
  const double nw = static_cast<double>(mq.quantized_weights());
  const std::string side_part =
      side == 0 ? std::string()
                : fmt::format(", {} {:.3f}", s.method == quant::Method::gaussian ? "rotation seeds" : "signs",
                              static_cast<double>(side) / nw);
  fmt::print("\n{} matrices, {} weights: {:.3f} bits per weight (codes {:.3f}, ranges {:.3f}{}), relative error "
             "{:.4f}\n",
             mq.layers.size(), mq.quantized_weights(), mq.bits_per_weight(), static_cast<double>(codes) / nw,
             static_cast<double>(scales) / nw, side_part, mq.rel_error());
  fmt::print("the whole model{} (biases, norms{} in float32): {:.3f} bits per parameter, {:.1f}x smaller than "
             "float32\n",
             names.size() > 1 ? "s" : "", mq.kept.empty() ? "" : ", kept matrices", mq.bits_per_parameter(),
             32.0 / mq.bits_per_parameter());
  for (size_t i = 0; i < names.size(); ++i) {
    std::vector<std::pair<std::string, double>> after = tm->evaluate(names[i]);
    for (size_t j = 0; j < after.size(); ++j)
      fmt::print("{}{}: float32 {:.4f}, quantized {:.4f} ({:+.4f})\n", names[i].empty() ? "" : names[i] + " ",
                 metric_label(after[j].first), before[i][j].second, after[j].second,
                 after[j].second - before[i][j].second);
  }

  // The quantized checkpoint: the dequantized weights where the model's were,
  // the stored codes under quantized/, no optimiser state (the float model's).
  for (const auto& n : tm->names()) ck.put(TrainedModels::prefix(n), tm->model(n).state_dict());
  for (auto it = ck.tensors.begin(); it != ck.tensors.end();)
    it = it->first.rfind("optim/", 0) == 0 ? ck.tensors.erase(it) : std::next(it);
  for (const auto& l : mq.layers) ck.put(l.quantized_key(), quant::to_state(l.q));
  save_checkpoint(out, ck);
  fmt::print("\nwritten: {} ({})\n", out, format_seconds(sw.seconds()));
  if (ck.experiment == "charlm") fmt::print("sample it: heed sample {}\n", out);
  fmt::print("inspect it: heed inspect {}\n", out);
  return 0;
}

}  // namespace heed::experiments
