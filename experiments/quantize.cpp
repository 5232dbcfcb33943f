// experiments/quantize.cpp: `heed quantize` and `heed run compression`.
#include "experiments/quantize.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include "core/kernels.h"
#include "experiments/plot.h"
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

double ModelQuantization::peak() const {
  double s = 0, n = 0;
  for (const auto& l : layers) {
    s += l.peak * static_cast<double>(l.rows);
    n += static_cast<double>(l.rows);
  }
  return n > 0 ? s / n : 0.0;
}

double ModelQuantization::peak_quantized() const {
  double s = 0, n = 0;
  for (const auto& l : layers) {
    s += l.peak_quantized * static_cast<double>(l.rows);
    n += static_cast<double>(l.rows);
  }
  return n > 0 ? s / n : 0.0;
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

// A comma-separated option's items; an empty one ("a,,b", ",", "a,") is
// refused naming the option (a doubled comma is a typo, not "nothing").
std::vector<std::string> split_list(const std::string& s, const std::string& who, const std::string& option) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    size_t comma = s.find(',', at);
    if (comma == std::string::npos) comma = s.size();
    std::string item = s.substr(at, comma - at);
    if (item.empty())
      throw UsageError(fmt::format("{}: --{} '{}' has an empty item (item {}); expected items separated by single "
                                   "commas",
                                   who, option, s, out.size() + 1));
    out.push_back(item);
    at = comma + 1;
  }
  return out;
}

}  // namespace

ModelQuantization plan_quantization(TrainedModels& tm, const std::vector<std::string>& names,
                                    const QuantizeSettings& s, const std::string& who) {
  ModelQuantization mq;
  // --keep's names first: a misspelt one is the mistake to report, before
  // what a matrix it meant to keep would not allow (e8's rows, lplr's rank).
  std::set<std::string> keep_unused(s.keep.begin(), s.keep.end());
  std::string example;
  for (const std::string& model : names)
    for (const auto& [name, p] : tm.model(model).named_parameters()) {
      if (p.dim() < 2) continue;  // biases, LayerNorm weights: float32
      keep_unused.erase(name);
      keep_unused.erase(model_label(model, name));
      if (example.empty() && !std::count(s.keep.begin(), s.keep.end(), name)) example = name;
    }
  if (!keep_unused.empty())
    throw UsageError(fmt::format("{}: --keep names no weight matrix: {} (expected parameter names such as {})", who,
                                 fmt::join(keep_unused, ", "), example.empty() ? std::string("0.weight") : example));
  for (const std::string& model : names) {
    for (const auto& [name, p] : tm.model(model).named_parameters()) {
      mq.total_parameters += p.numel();
      if (p.dim() < 2) continue;  // biases, LayerNorm weights: float32
      const std::string label = model_label(model, name);
      const bool keep = std::count(s.keep.begin(), s.keep.end(), name) || std::count(s.keep.begin(), s.keep.end(), label);
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
          throw UsageError(fmt::format("{}: --rank {} is larger than {} {}{} allows (expected 1..{}, or 0: half of "
                                       "each matrix's smaller side)",
                                       who, s.rank, label, shape_str(l.shape), as_matrix, most));
      }
      mq.layers.push_back(std::move(l));
    }
  }
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
    try {
      l.q = quant::quantize(w, o);
    } catch (const Error& e) {  // the matrix alone does not know which parameter it is
      fail("{} (in {} {})", e.what(), model_label(l.model, l.name), shape_str(l.shape));
    }
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
    l.peak = quant::row_peak(w);
    switch (s.method) {
      case quant::Method::hadamard:
      case quant::Method::e8: l.peak_quantized = quant::row_peak(quant::RandomizedHadamard(l.cols, o.seed).apply(w)); break;
      case quant::Method::gaussian: l.peak_quantized = quant::row_peak(quant::GaussianRotation(l.cols, o.seed).apply(w)); break;
      default: l.peak_quantized = l.peak; break;
    }
    kernel::copy_(p, kernel::reshape(w_hat, p.shape()));
    if (echo) {
      const std::string rank = l.rank > 0 ? fmt::format(" rank {}", l.rank) : std::string();
      const std::string peak = l.peak_quantized != l.peak ? fmt::format("{:.2f} -> {:.2f}", l.peak, l.peak_quantized)
                                                          : fmt::format("{:.2f}", l.peak);
      fmt::print("  {:<34} {:<14} {:>9.4f} {:>9.3f}   {:<12}{}\n", model_label(l.model, l.name), shape_str(l.shape),
                 l.rel_error, l.q.bits_per_weight(), peak, rank);
      std::fflush(stdout);
    }
  }
}

std::optional<std::string> quantized_by(const Checkpoint& ck) {
  const std::map<std::string, Tensor> stored = ck.get("quantized");
  if (stored.empty()) return std::nullopt;
  std::set<std::string> methods;  // "e8 4 bits", from each matrix's meta (docs/checkpoint-format.md)
  for (const auto& [key, t] : stored) {
    if (key != "meta" && (key.size() < 5 || key.compare(key.size() - 5, 5, "/meta") != 0)) continue;
    const std::vector<int64_t> m =
        t.numel() == 6 && t.dtype() == DType::i64 ? t.to_vector<int64_t>() : std::vector<int64_t>{};
    const bool known = !m.empty() && m[0] >= 0 && m[0] < static_cast<int64_t>(quant::method_names().size());
    methods.insert(known ? fmt::format("{} {} bits", quant::method_name(static_cast<quant::Method>(m[0])), m[1])
                         : std::string("an unknown method"));
  }
  return methods.empty() ? std::string("tensors under quantized/") : fmt::format("{}", fmt::join(methods, ", "));
}

void refuse_quantized(const Checkpoint& ck, const std::string& who, const std::string& what) {
  const std::optional<std::string> by = quantized_by(ck);
  if (!by) return;
  // A file of the wrong kind, as a log or another experiment's checkpoint
  // given there: status 1, as `run charlm --resume` of one (it was 2, a bad
  // command line's).
  throw Error(fmt::format("{}: {} is already quantized ({}; heed quantize wrote it, and its weights are the "
                          "dequantized ones); expected the training checkpoint it was made from",
                          who, what, *by));
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
    "  --rank R           lplr: the factors' rank, 1 to each matrix's smaller side (default, or 0:\n"
    "                     half of each matrix's smaller side)\n"
    "  --range R          row (one range per row, default) or tensor (one per matrix)\n"
    "  --seed S           seed of the signs, rotations and sketches (default 0)\n"
    "  --keep NAMES       parameters to leave in float32, comma-separated (e.g. 0.weight, or\n"
    "                     attention/0.weight for one model of a shapes checkpoint)\n"
    "  --model NAME       shapes: quantize only this model (cnn or attention; default: every one)\n"
    "  --text FILE        charlm: the text its run trained on, where it is now (default: the run's\n"
    "                     --text; a text other than the run's is refused, as on --resume)\n"
    "  -o, --out FILE     the checkpoint to write (default: CHECKPOINT with .<method>-<bits>bit.ckpt.h5)\n"
    "  --threads N        threads (default 2; results do not depend on it)\n"
    "  --help             show this help\n"
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


std::string metric_label(const std::string& metric) {
  if (metric == "val_loss") return "validation loss";
  if (metric == "test_mse") return "test MSE";
  if (metric == "pair_score") return "pair-attention score";
  return metric;
}

}  // namespace

int run_quantize(const std::vector<std::string>& args) {
  for (const auto& x : args)
    if (x == "--help" || x == "-h") {
      fmt::print("{}", kQuantizeHelp);
      return 0;
    }
  std::string path, method = "hadamard", range = "row", keep, model, out, text;
  int64_t bits = 4, rank = 0, seed = 0, threads = 2;
  Args a("quantize", "Quantizes the weight matrices of a trained model.");
  a.choice("method", &method, quant::method_names(), "quantizer")
      .integer("bits", &bits, "bits per code", quant::kMinBits, quant::kMaxBits)
      .integer("rank", &rank, "lplr: the factors' rank (0: half of each matrix's smaller side)", 0, kMaxWidth)
      .choice("range", &range, {"row", "tensor"}, "one range per row or per matrix")
      .integer("seed", &seed, "seed", 0)
      .text("keep", &keep, "parameters left in float32, comma-separated")
      .text("model", &model, "shapes: only this model")
      .path("text", &text, "charlm: the text its run trained on, where it is now")
      .path("out", &out, "the checkpoint to write")
      .integer("threads", &threads, "threads", 1, 1024)
      .alias("o", "out");
  a.parse(args, &path, "a checkpoint path");
  QuantizeSettings s;
  s.method = quant::method_from_name(method);
  s.bits = static_cast<int>(bits);
  s.range = range == "row" ? quant::Range::row : quant::Range::tensor;
  s.rank = rank;
  s.seed = static_cast<uint64_t>(seed);
  s.keep = keep.empty() ? std::vector<std::string>{} : split_list(keep, "quantize", "keep");
  if (rank != 0 && s.method != quant::Method::lplr)
    throw UsageError(fmt::format("quantize: --rank {} applies to --method lplr only, not {}", rank, method));
  set_num_threads(static_cast<int>(threads));
  if (out.empty()) out = default_out(path, s);

  Checkpoint ck = load_checkpoint(path, "");
  refuse_quantized(ck, "quantize", fmt::format("checkpoint '{}'", path));
  check_output("quantize", out, path, "checkpoint");
  Stopwatch sw;
  std::unique_ptr<TrainedModels> tm = trained_models(ck, path, "quantize", text, "--text");
  std::vector<std::string> names = tm->names();
  if (!model.empty()) {
    if (std::find(names.begin(), names.end(), model) == names.end())
      throw UsageError(fmt::format("quantize: --model {}: checkpoint '{}' holds {}", model, path,
                                   names == std::vector<std::string>{""} ? std::string("one model (leave out --model)")
                                                                         : fmt::format("{}", fmt::join(names, ", "))));
    names = {model};
  }
  ModelQuantization mq = plan_quantization(*tm, names, s, "quantize");
  MadeDirectories dirs(prepare_output_path(out, "quantize", "--out"));  // removed again if what follows fails
  // Held until the file is written: a running run's checkpoint, or the output
  // of another heed quantize, is refused here, before the work.
  OutputLock lock(out, "quantize", "--out");

  fmt::print("{}: {} checkpoint, step {}; {} {} bits, one range per {}{}\n", path, ck.experiment,
             ck.counters.count("step") ? ck.counters.at("step") : 0, method, bits, range,
             s.method == quant::Method::lplr ? (rank > 0 ? fmt::format(", rank {}", rank)
                                                         : std::string(", rank half of each matrix's smaller side"))
                                             : std::string());
  std::vector<std::vector<std::pair<std::string, double>>> before;
  for (const auto& n : names) before.push_back(tm->evaluate(n));
  fmt::print("\n  {:<34} {:<14} {:>9} {:>9}   {}\n", "parameter", "shape", "rel.error", "bits/wt",
             "row max/rms (the range in RMS units; after the rotation)");
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
  fmt::print("rows' max / rms: {:.2f}{}\n", mq.peak(),
             mq.peak_quantized() != mq.peak() ? fmt::format(", {:.2f} after the rotation", mq.peak_quantized())
                                              : std::string());
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
  lock.written();
  dirs.keep();
  fmt::print("\nwritten: {} ({})\n", out, format_seconds(sw.seconds()));
  if (ck.experiment == "charlm") fmt::print("sample it: heed sample {}{}\n", out, tm->sample_options());
  fmt::print("inspect it: heed inspect {}\n", out);
  return 0;
}

// ---- heed run compression ----

namespace {

struct SweepModel {
  std::string label;  // "charlm", "shapes"
  std::string path;
  std::string model;  // the name in its checkpoint: "" or "attention"
  std::unique_ptr<TrainedModels> tm;
  std::map<std::string, Tensor> float_weights;  // to restore between cells
  std::vector<std::pair<std::string, double>> baseline;
  std::vector<std::string> auto_keep;  // matrices no method of the sweep may quantize
  std::vector<int64_t> identity;       // {fingerprint of the float weights, step}: model_identity()
};

// What a resumed sweep checks its --charlm/--shapes model against: an
// FNV-1a fingerprint of the model's float32 weights (each tensor's name,
// shape, type and bytes, in name order) and the checkpoint's step. A file
// trained further, or replaced by another run's, since the sweep began has
// other weights: its cells would be mixed with the first model's.
std::vector<int64_t> model_identity(const std::map<std::string, Tensor>& weights, const Checkpoint& ck) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a's offset basis and prime, as data::text_fingerprint
  auto mix = [&h](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  for (const auto& [name, t] : weights) {
    const std::string head = name + " " + shape_str(t.shape()) + " " + dtype_name(t.dtype());
    mix(head.c_str(), head.size() + 1);
    const Tensor c = kernel::contiguous(t);
    mix(c.raw_data(), static_cast<size_t>(c.numel()) * dtype_size(c.dtype()));
  }
  return {static_cast<int64_t>(h), ck.counters.count("step") ? ck.counters.at("step") : 0};
}

std::vector<int> parse_bits(const std::string& s) {
  std::vector<int> out;
  for (const std::string& item : split_list(s, "run compression", "bits")) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (*end != '\0' || v < quant::kMinBits || v > quant::kMaxBits)
      throw UsageError(fmt::format("run compression: --bits expects integers in {}..{}, comma-separated, got '{}'",
                                   quant::kMinBits, quant::kMaxBits, item));
    if (std::find(out.begin(), out.end(), static_cast<int>(v)) == out.end()) out.push_back(static_cast<int>(v));
  }
  if (out.empty()) throw UsageError(fmt::format("run compression: --bits expects at least one value, got '{}'", s));
  std::sort(out.begin(), out.end());
  return out;
}

// --methods as Args checked it: known names, in the order given, once each.
std::vector<quant::Method> parse_methods(const std::string& s) {
  std::vector<quant::Method> out;
  for (const std::string& item : split_list(s, "run compression", "methods")) out.push_back(quant::method_from_name(item));
  return out;
}

}  // namespace

int run_compression(const std::vector<std::string>& args, const std::vector<std::string>& command_line) {
  std::string charlm, shapes, text, methods_s = "uniform,hadamard,gaussian,e8,lplr", bits_s = "2,3,4,8",
                                   range = "row";
  int64_t seed = 0, rank = 0;
  bool no_plot = false;
  Run run("compression",
          "Quantizes a trained charlm model and a trained shapes attention model with every method of\n"
          "heed quantize at every bit width, evaluates each (validation loss; test MSE and\n"
          "pair-attention score), logs the table to HDF5 and plots quality against bits per weight.",
          RunOptions("runs/compression.h5").checkpoint_every(1).progress_seconds(0));
  run.args()
      .path("charlm", &charlm, "a charlm checkpoint (heed run charlm)")
      .path("shapes", &shapes, "a shapes checkpoint holding the attention model (heed run shapes)")
      .path("text", &text,
            "the text the --charlm run trained on, where it is now (default: that run's --text; a text other "
            "than the run's is refused, as by heed quantize --text)")
      .choices("methods", &methods_s, quant::method_names(), "the quantizers to compare")
      .text("bits", &bits_s, "bit widths, comma-separated (2..16)")
      .choice("range", &range, {"row", "tensor"}, "one range per row or per matrix")
      .integer("rank", &rank, "lplr: the factors' rank (0: half of each matrix's smaller side)", 0, kMaxWidth)
      .integer("seed", &seed, "seed of the signs, rotations and sketches", 0)
      .flag("no-plot", &no_plot, "leave out the figure (heed plot LOG draws it later)");
  // Run's --init-from starts a trained model from given weights; this run
  // trains none (it quantizes those of --charlm and --shapes).
  run.args().withhold("init-from", "does not apply: run compression trains no model, it quantizes the trained ones "
                                   "of --charlm and --shapes");
  run.reads_file("charlm");
  run.reads_file("shapes");
  run.reads_file("text");  // resumed, it may name where the text is now, as --charlm and --shapes may
  if (!run.parse(args, command_line)) return 0;
  const std::vector<quant::Method> methods = parse_methods(methods_s);
  const std::vector<int> bits = parse_bits(bits_s);
  if (charlm.empty() && shapes.empty())
    throw UsageError("run compression: expected --charlm CHECKPOINT and/or --shapes CHECKPOINT (trained with heed run "
                     "charlm / heed run shapes --model attention)");
  if (!text.empty() && charlm.empty())
    throw UsageError(fmt::format("run compression: --text '{}' gives the text of the --charlm checkpoint's run, and "
                                 "no --charlm is given; expected --charlm CHECKPOINT with it, or no --text",
                                 text));
  if (rank > 0 && std::find(methods.begin(), methods.end(), quant::Method::lplr) == methods.end())
    throw UsageError(fmt::format("run compression: --rank {} applies to the lplr method, which --methods leaves out",
                                 rank));

  // The figure at the end needs a Python that can draw it: a HEED_PYTHON
  // that cannot is a mistake said before the sweep's work; without Debian's
  // Python or its packages the sweep runs and says now that it will draw none.
  bool plot = !no_plot && dist::is_main();
  if (plot) {
    if (const std::string why = plot_problem(); !why.empty()) {
      const char* chosen = std::getenv("HEED_PYTHON");
      if (chosen && *chosen)
        throw UsageError(fmt::format("run compression: {}; or give --no-plot (heed plot LOG draws the figure later)",
                                     why));
      fmt::print(stderr, "heed: note: run compression will draw no plot: {}; heed plot LOG draws it later\n", why);
      plot = false;
    }
  }

  QuantizeSettings base;
  base.range = range == "row" ? quant::Range::row : quant::Range::tensor;
  base.rank = rank;
  base.seed = static_cast<uint64_t>(seed);

  // Resumed: the models' identities the sweep began with (none in a
  // checkpoint from before heed recorded them).
  std::unique_ptr<Checkpoint> resumed;
  if (run.resuming()) resumed = std::make_unique<Checkpoint>(load_checkpoint(run.args().value("resume"), "compression"));
  std::vector<SweepModel> models;
  for (const auto& [label, path] : {std::pair<std::string, std::string>{"charlm", charlm}, {"shapes", shapes}}) {
    if (path.empty()) continue;
    SweepModel m;
    m.label = label;
    m.path = path;
    Checkpoint ck;
    try {  // its messages name the file, not the option
      ck = load_checkpoint(path, label);
    } catch (const UsageError& e) {
      throw UsageError(fmt::format("run compression: --{}: {}", label, e.what()));
    } catch (const Error& e) {
      fail("run compression: --{}: {}", label, e.what());
    }
    refuse_quantized(ck, "run compression", fmt::format("--{} '{}'", label, path));
    m.tm = label == "charlm" ? trained_models(ck, path, "run compression", text, "--text")
                             : trained_models(ck, path, "run compression");
    if (label == "shapes") {
      std::vector<std::string> n = m.tm->names();
      if (std::find(n.begin(), n.end(), "attention") == n.end())
        throw UsageError(fmt::format("run compression: --shapes '{}' holds no attention model (it has {}; train one "
                                     "with heed run shapes --model attention)",
                                     path, fmt::join(n, ", ")));
      m.model = "attention";
    }
    // Matrices some method of the sweep cannot quantize stay float32 for every
    // method, so that all of them quantize the same weights: rows e8's blocks
    // of 8 do not divide, and a matrix whose smaller side is below --rank
    // (the shapes model's last convolution, [1, 320], has rank 1 at most).
    const bool e8 = std::find(methods.begin(), methods.end(), quant::Method::e8) != methods.end();
    std::vector<std::string> by_e8, by_rank;
    int64_t matrices = 0, widest = 0;  // widest: the largest smaller side of a matrix kept for --rank
    for (const auto& [name, p] : m.tm->model(m.model).named_parameters()) {
      if (p.dim() < 2) continue;
      ++matrices;
      const int64_t rows = p.size(0), cols = p.numel() / rows;
      if (e8 && cols % 8 != 0) by_e8.push_back(name);
      else if (rank > 0 && std::min(rows, cols) < rank) {
        by_rank.push_back(fmt::format("{} {}", name, shape_str(p.shape())));
        widest = std::max(widest, std::min(rows, cols));
      } else {
        continue;
      }
      m.auto_keep.push_back(name);
    }
    if (matrices > 0 && static_cast<int64_t>(m.auto_keep.size()) == matrices && !by_rank.empty())
      throw UsageError(fmt::format("run compression: --rank {} leaves no matrix of --{} '{}' to quantize: {} {} a "
                                   "smaller side below it{}; expected --rank {} or less",
                                   rank, label, path, fmt::join(by_rank, ", "), by_rank.size() == 1 ? "has" : "have",
                                   by_e8.empty() ? "" : " (the rest have rows e8 cannot take)", widest));
    for (quant::Method method : methods) {  // every plan checked before the run starts
      QuantizeSettings s = base;
      s.method = method;
      s.bits = bits.front();
      s.keep = m.auto_keep;
      if (method != quant::Method::lplr) s.rank = 0;
      plan_quantization(*m.tm, {m.model}, s, "run compression");
    }
    for (const auto& [k, t] : m.tm->model(m.model).state_dict()) m.float_weights[k] = kernel::clone(t);
    m.identity = model_identity(m.float_weights, ck);
    if (resumed) {
      const auto saved = resumed->tensors.find("inputs/" + label);
      if (saved != resumed->tensors.end() && saved->second.dtype() == DType::i64 &&
          saved->second.to_vector<int64_t>() != m.identity) {
        const std::vector<int64_t> was = saved->second.to_vector<int64_t>();
        const std::string steps =
            was.size() == 2 && was[1] != m.identity[1]
                ? fmt::format(" (it holds step {} of its run, the sweep began with step {})", m.identity[1], was[1])
                : std::string();
        fail("run compression: --{} '{}' is not the model this run started with: its weights differ from those "
             "checkpoint '{}' recorded{}; expected that model's checkpoint as it was, or a new run (without --resume)",
             label, path, run.args().value("resume"), steps);
      }
    }
    run.track_constant("inputs/" + label, Tensor::from_i64(m.identity, {2}), false);
    m.baseline = m.tm->evaluate(m.model);
    fmt::print("{} ({}{}): float32", label, path, m.model.empty() ? "" : ", model " + m.model);
    for (const auto& [k, v] : m.baseline) fmt::print(" {} {:.4f}", metric_label(k), v);
    fmt::print("\n");
    if (!by_e8.empty())
      fmt::print("{}: kept in float32 by every method: {} (rows not a multiple of 8, which e8 needs)\n", label,
                 fmt::join(by_e8, ", "));
    if (!by_rank.empty())
      fmt::print("{}: kept in float32 by every method: {} (a smaller side below --rank {}, which lplr needs)\n", label,
                 fmt::join(by_rank, ", "), rank);
    models.push_back(std::move(m));
  }

  const int64_t cells = static_cast<int64_t>(models.size() * methods.size() * bits.size());
  run.set_steps(cells);
  run.begin([&](RunLog& log) {
    std::vector<std::string> bit_names;
    for (int b : bits) bit_names.push_back(std::to_string(b));
    std::vector<std::string> method_names;
    for (quant::Method m : methods) method_names.push_back(quant::method_name(m));
    log.set_attr("methods", fmt::format("{}", fmt::join(method_names, ",")));
    log.set_attr("bits", fmt::format("{}", fmt::join(bit_names, ",")));
    std::vector<std::string> labels;
    for (const SweepModel& m : models) {
      labels.push_back(m.label);
      log.set_attr(m.label + "_checkpoint", m.path);
      log.set_attr(m.label + "_kept", fmt::format("{}", fmt::join(m.auto_keep, ",")));
      for (const auto& [k, v] : m.baseline) log.write_tensor("baseline/" + m.label + "/" + k, Tensor::from_f64({v}, {1}));
      for (const std::string& method : method_names)
        for (const std::string& metric : {std::string("bits"), std::string("bits_per_weight"),
                                          std::string("bits_per_parameter"), std::string("rel_error"),
                                          std::string("row_peak")})
          log.declare_scalar(m.label + "/" + method + "/" + metric);
      for (const std::string& method : method_names)
        for (const auto& [k, v] : m.baseline) log.declare_scalar(m.label + "/" + method + "/" + k);
    }
    log.set_attr("models", fmt::format("{}", fmt::join(labels, ",")));
  });

  while (run.next()) {
    const int64_t cell = run.step() - 1;
    const int64_t per_model = static_cast<int64_t>(methods.size() * bits.size());
    SweepModel& m = models[static_cast<size_t>(cell / per_model)];
    QuantizeSettings s = base;
    s.method = methods[static_cast<size_t>((cell % per_model) / static_cast<int64_t>(bits.size()))];
    s.bits = bits[static_cast<size_t>(cell % static_cast<int64_t>(bits.size()))];
    s.keep = m.auto_keep;
    if (s.method != quant::Method::lplr) s.rank = 0;
    std::map<std::string, Tensor> now = m.tm->model(m.model).state_dict();
    for (const auto& [k, t] : m.float_weights) kernel::copy_(now.at(k), t);
    ModelQuantization mq = plan_quantization(*m.tm, {m.model}, s, "run compression");
    quantize_planned(*m.tm, mq, s, false);
    const std::vector<std::pair<std::string, double>> eval = m.tm->evaluate(m.model);
    const std::string key = m.label + "/" + quant::method_name(s.method) + "/";
    RunLog& log = run.log();
    log.scalar(key + "bits", run.step(), s.bits);
    log.scalar(key + "bits_per_weight", run.step(), mq.bits_per_weight());
    log.scalar(key + "bits_per_parameter", run.step(), mq.bits_per_parameter());
    log.scalar(key + "rel_error", run.step(), mq.rel_error());
    log.scalar(key + "row_peak", run.step(), mq.peak_quantized());
    std::string shown;
    for (const auto& [k, v] : eval) {
      log.scalar(key + k, run.step(), v);
      shown += fmt::format(", {} {:.4f}", metric_label(k), v);
    }
    fmt::print("[{}/{}] {} {} {} bits: {:.3f} bits per weight, relative error {:.4f}{}\n", run.step(), cells, m.label,
               quant::method_name(s.method), s.bits, mq.bits_per_weight(), mq.rel_error(), shown);
    std::fflush(stdout);
  }
  if (int rc = run.finish()) return rc;
  if (!dist::is_main()) return 0;  // the log and its table are rank 0's (another rank found it still open)

  // The table, from the log (a resumed run printed only its own cells).
  h5::File f(run.log_path(), h5::File::Mode::read);
  for (const SweepModel& m : models) {
    const std::string metric = m.baseline.front().first;
    fmt::print("\n{}: {} (bits per weight in brackets); float32 {:.4f}\n", m.label, metric_label(metric),
               m.baseline.front().second);
    std::string header = fmt::format("| {:<9} |", "method");
    for (int b : bits) header += fmt::format(" {:>18} |", fmt::format("{} bits", b));
    std::string rule = "| --- |";
    for (size_t i = 0; i < bits.size(); ++i) rule += " --- |";
    fmt::print("{}\n{}\n", header, rule);
    for (quant::Method method : methods) {
      const std::string key = "metrics/" + m.label + "/" + quant::method_name(method) + "/";
      std::vector<double> v = f.read_tensor(key + metric).to_vector<double>();
      std::vector<double> bpw = f.read_tensor(key + "bits_per_weight").to_vector<double>();
      std::string row = fmt::format("| {:<9} |", quant::method_name(method));
      for (size_t i = 0; i < bits.size(); ++i)
        row += i * 3 + 1 < v.size() ? fmt::format(" {:>9.4f} ({:>5.2f}) |", v[i * 3 + 1], bpw[i * 3 + 1])
                                    : fmt::format(" {:>18} |", "-");
      fmt::print("{}\n", row);
    }
  }
  f.close();
  fmt::print("\nlog: {}\n", run.log_path());
  if (!plot) return 0;
  try {
    for (const auto& file : plot_log(run.log_path(), "", false)) fmt::print("plot: {}\n", file);
  } catch (const Error& e) {
    fmt::print("note: no plot was drawn: {}\n", e.what());
  }
  return 0;
}

}  // namespace heed::experiments
