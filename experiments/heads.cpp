// experiments/heads.cpp: per-head attention statistics and `heed attend`.
#include "experiments/heads.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "data/args.h"
#include "data/checkpoint.h"
#include "data/runlog.h"
#include "data/text.h"
#include "experiments/charlm.h"
#include "experiments/common.h"
#include "experiments/plot.h"
#include "heed.h"

namespace heed::experiments {

namespace {

// Adds one query row's numbers to acc (weights w[0..i] of query i).
void add_row(HeadStats& acc, const float* w, int64_t i, const int64_t* ids, int64_t word_start) {
  for (int64_t j = 0; j <= i; ++j) {
    const double a = w[j];
    if (a > 0) acc.entropy -= a * std::log(a);
    acc.distance += a * static_cast<double>(i - j);
    if (j < i && ids[j] == ids[i]) acc.same_char += a;
  }
  acc.prev += w[i - 1];
  acc.first += w[0];
  acc.word_start += w[word_start];
}

void scale(HeadStats& s, double f) {
  s.entropy *= f;
  s.distance *= f;
  s.prev *= f;
  s.first *= f;
  s.same_char *= f;
  s.word_start *= f;
}

}  // namespace

std::vector<HeadStats> head_stats(const Tensor& maps, const Tensor& ids, const std::vector<bool>& boundary,
                                  HeadStats* uniform) {
  if (maps.dim() != 4 || maps.size(2) != maps.size(3))
    fail("head_stats: expected attention maps [B, H, T, T], got {}", shape_str(maps.shape()));
  const int64_t B = maps.size(0), H = maps.size(1), T = maps.size(2);
  if (ids.dim() != 2 || ids.size(0) != B || ids.size(1) != T || ids.dtype() != DType::i64)
    fail("head_stats: expected int64 ids [{}, {}] for maps {}, got {} of {}", B, T, shape_str(maps.shape()),
         dtype_name(ids.dtype()), shape_str(ids.shape()));
  if (T < 2) fail("head_stats: sequences of {} positions have no query with an earlier key (expected T >= 2)", T);
  Tensor m = maps.to(DType::f32).contiguous();
  Tensor idc = ids.contiguous();
  const float* pm = m.data<float>();
  const int64_t* pid = idc.data<int64_t>();
  std::vector<HeadStats> out(static_cast<size_t>(H));
  HeadStats base;
  std::vector<float> flat(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t* row_ids = pid + b * T;
    int64_t word_start = 0;
    for (int64_t i = 0; i < T; ++i) {
      const int64_t id = row_ids[i];
      if (id < 0 || id >= static_cast<int64_t>(boundary.size()))
        fail("head_stats: id {} at [{}, {}] is outside the vocabulary of {}", id, b, i, boundary.size());
      if (i > 0 && boundary[static_cast<size_t>(row_ids[i - 1])]) word_start = i;
      if (i == 0) continue;
      for (int64_t h = 0; h < H; ++h)
        add_row(out[static_cast<size_t>(h)], pm + ((b * H + h) * T + i) * T, i, row_ids, word_start);
      std::fill(flat.begin(), flat.begin() + i + 1, 1.0f / static_cast<float>(i + 1));
      add_row(base, flat.data(), i, row_ids, word_start);
    }
  }
  const double queries = static_cast<double>(B * (T - 1));
  for (auto& s : out) scale(s, 1.0 / queries);
  scale(base, 1.0 / queries);
  if (uniform) *uniform = base;
  return out;
}

HeadStats uniform_head_stats(const Tensor& ids, const std::vector<bool>& boundary) {
  if (ids.dim() != 2) fail("uniform_head_stats: expected ids [B, T], got {}", shape_str(ids.shape()));
  const int64_t B = ids.size(0), T = ids.size(1);
  // Row i of a causal uniform map: 1 / (i + 1) on keys 0..i.
  Tensor row = rdiv(1.0, Tensor::arange(1.0, static_cast<double>(T + 1)));  // [T]
  Tensor maps = where(causal_mask(T), 0.0, expand(unsqueeze(row, 1), {T, T}));
  HeadStats u;
  head_stats(expand(maps, {B, 1, T, T}), ids, boundary, &u);
  return u;
}

std::string head_kind(const HeadStats& s, const HeadStats& u) {
  // A kind is named when the head puts at least half its mass there and at
  // least three times what uniform attention would (the strongest wins).
  struct Candidate {
    const char* name;
    double mass, base;
  };
  const Candidate c[] = {{"previous-token", s.prev, u.prev},
                         {"same-character", s.same_char, u.same_char},
                         {"word-start", s.word_start, u.word_start},
                         {"first-token", s.first, u.first}};
  const Candidate* best = nullptr;
  for (const Candidate& k : c)
    if (k.mass >= 0.5 && k.mass >= 3 * k.base && (!best || k.mass / k.base > best->mass / best->base)) best = &k;
  return best ? best->name : "mixed";
}

const std::vector<std::string>& head_stat_names() {
  static const std::vector<std::string> names = {"entropy", "distance", "prev", "first", "same_char", "word_start"};
  return names;
}

double head_stat(const HeadStats& s, size_t which) {
  switch (which) {
    case 0: return s.entropy;
    case 1: return s.distance;
    case 2: return s.prev;
    case 3: return s.first;
    case 4: return s.same_char;
    case 5: return s.word_start;
  }
  fail("head_stat: no statistic {} (expected 0..{})", which, head_stat_names().size() - 1);
}

std::vector<bool> word_boundaries(const data::CharTokenizer& tok) {
  std::vector<bool> b;
  for (uint32_t cp : tok.chars()) {
    const bool ascii_boundary = cp < 128 && !std::isalnum(static_cast<int>(cp)) && cp != '\'';
    b.push_back(ascii_boundary);
  }
  return b;
}

namespace {

constexpr const char* kAttendPrompt = "And God said unto Moses, I AM THAT I AM";  // for a run on the Bible

// A character that would break a line of output or not show: C0 and C1
// controls, DEL, and the Unicode line and paragraph separators.
bool is_control(uint32_t cp) { return cp < 0x20 || (cp >= 0x7f && cp < 0xa0) || cp == 0x2028 || cp == 0x2029; }

}  // namespace

std::string attend_default_prompt(const std::string& text, int64_t n) {
  const std::vector<uint32_t> cps = data::decode_utf8(text);
  size_t best_at = 0, best_len = 0;
  for (size_t i = 0; i < cps.size();) {
    if (is_control(cps[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && !is_control(cps[j]) && static_cast<int64_t>(j - i) < n) ++j;
    if (j - i > best_len) {
      best_at = i;
      best_len = j - i;
    }
    if (static_cast<int64_t>(best_len) >= n) break;
    while (j < cps.size() && !is_control(cps[j])) ++j;  // the rest of a line too short
    i = j;
  }
  return data::encode_utf8(std::vector<uint32_t>(cps.begin() + static_cast<std::ptrdiff_t>(best_at),
                                                 cps.begin() + static_cast<std::ptrdiff_t>(best_at + best_len)));
}

std::string attend_printable(const std::string& text) {
  std::string s;
  for (uint32_t cp : data::decode_utf8(text)) {
    switch (cp) {
      case '\\': s += "\\\\"; break;
      case '"': s += "\\\""; break;
      case '\n': s += "\\n"; break;
      case '\r': s += "\\r"; break;
      case '\t': s += "\\t"; break;
      default:
        if (is_control(cp)) s += cp < 0x100 ? fmt::format("\\x{:02x}", cp) : fmt::format("\\u{:04x}", cp);
        else s += data::encode_utf8({cp});
    }
  }
  return s;
}

std::string default_prompt(const Checkpoint& ck, const std::string& path, const data::CharTokenizer& tok,
                           const std::string& preferred, int64_t n, int64_t least, const char* command) {
  try {
    tok.encode(preferred);
    return preferred;
  } catch (const Error&) {
  }
  // A line of the run's own text (read and checked as heed quantize reads
  // it), from a stretch long enough to hold many lines.
  const std::string lacks =
      fmt::format("{}: the default --prompt \"{}\" has characters checkpoint '{}' lacks, and ", command, preferred, path);
  std::string prompt;
  try {
    prompt = attend_default_prompt(validation_start(ck, path, tok, command, 1 << 14), n);
  } catch (const Error& e) {
    std::string why = e.what();
    if (const std::string own = std::string(command) + ": "; why.rfind(own, 0) == 0) why = why.substr(own.size());
    throw UsageError(fmt::format("{}no prompt could be taken from its run's text instead ({}); expected --prompt TEXT",
                                 lacks, why));
  }
  if (static_cast<int64_t>(data::decode_utf8(prompt).size()) < least)
    throw UsageError(fmt::format("{}its run's validation text has no line of {} character{} or more to take instead; "
                                 "expected --prompt TEXT",
                                 lacks, least, least == 1 ? "" : "s"));
  return prompt;
}

namespace {

// Whether heed attend's figures of the log `out` can be drawn, asked before
// it writes anything. A HEED_PYTHON that cannot draw them (no such program,
// or one without numpy, h5py or matplotlib) is a bad environment (status 2,
// as every HEED_* variable's), and so is a figures' directory that is
// not one (out without .h5, plus _plots: a file of that name) or cannot be
// written in. Without Debian's Python or its packages, the maps and the
// table are still worth having: false, after a note that says how to draw
// them later.
bool can_plot(const std::string& out) {
  namespace fs = std::filesystem;
  const std::string dir = default_plot_dir(out);
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (fs::exists(st) && !fs::is_directory(st))
    throw UsageError(fmt::format("attend: the figures' directory '{}' (beside --out '{}') exists and is not a "
                                 "directory; expected a directory or nothing there (remove it, or give another --out)",
                                 dir, out));
  if (!fs::exists(st) && fs::exists(fs::symlink_status(dir, ec)))
    throw UsageError(fmt::format("attend: the figures' directory '{}' (beside --out '{}') is a symbolic link to "
                                 "nothing; expected a directory or nothing there (remove it, or give another --out)",
                                 dir, out));
  if (fs::is_directory(st) && access(dir.c_str(), W_OK | X_OK) != 0)
    throw UsageError(fmt::format("attend: cannot write in the figures' directory '{}' (beside --out '{}'): {}; "
                                 "expected a directory heed may write in",
                                 dir, out, std::strerror(errno)));
  std::string why = plot_problem();
  if (why.empty()) return true;
  const char* chosen = std::getenv("HEED_PYTHON");
  if (chosen && *chosen) {
    // Named by the variable, however the interpreter failed.
    if (why.find("HEED_PYTHON") == std::string::npos) why = fmt::format("HEED_PYTHON='{}': {}", chosen, why);
    throw UsageError(fmt::format("attend: {}", why));
  }
  fmt::print(stderr, "heed: note: attend will draw no figure: {}; heed plot {} draws it later\n", why, out);
  return false;
}

int attend(const std::vector<std::string>& args) {
  std::string prompt = kAttendPrompt;
  std::string out;
  // Its messages begin "attend: " as every other of its own (run_attend).
  Args a("attend",
         "Shows what every attention head of a character-level GPT (heed run charlm) does over a prompt:\n"
         "a table of per-head statistics (entropy, mean distance looked back, mass on the previous\n"
         "character, the first position, earlier copies of the same character, the start of the current\n"
         "word) with the kind of head they suggest, and a PNG grid of the maps (layers x heads).");
  a.text("prompt", &prompt,
         "the text whose attention is shown, every character in the model's vocabulary (default: \"" +
             std::string(kAttendPrompt) +
             "\", cut to the model's context; for a run on a text without its characters, the first line of the "
             "run's validation text that is as long, or its longest)")
      .path("out", &out, "HDF5 file for the maps and statistics (default: CHECKPOINT without .ckpt.h5, plus _attend.h5)");
  a.alias("o", "out");
  a.set_program("heed attend CHECKPOINT");
  std::string path;
  if (!a.parse(args, &path, "a checkpoint path")) return 0;

  const Checkpoint ck = load_checkpoint(path, "charlm");
  CharModel cm = charlm_from(ck, path, "attend");
  const int64_t context = cm.model->options.context_;
  if (!a.given("prompt")) {
    // The default is the Bible's: cut to the context, or for a run on a text
    // of other characters, a line of that run's validation text as long, or
    // its longest (a newline or other control character in a prompt would
    // break the one-line output).
    prompt = default_prompt(ck, path, cm.tok, prompt, std::min<int64_t>(40, context), 2, "attend");
    std::vector<uint32_t> cps = data::decode_utf8(prompt);
    if (static_cast<int64_t>(cps.size()) > context) {
      cps.resize(static_cast<size_t>(context));
      prompt = data::encode_utf8(cps);
    }
  }
  std::vector<int64_t> ids = cm.encode_prompt(prompt, "attend", path);
  const int64_t P = static_cast<int64_t>(ids.size());
  if (P < 2)
    throw UsageError(fmt::format("attend: --prompt \"{}\" must hold at least 2 characters", attend_printable(prompt)));
  if (P > cm.model->options.context_)
    throw UsageError(fmt::format("attend: --prompt has {} characters, more than the model's context of {}", P,
                                 cm.model->options.context_));
  if (out.empty()) {
    std::string base = path;
    for (const char* suffix : {".ckpt.h5", ".h5"})
      if (base.ends_with(suffix)) {
        base.resize(base.size() - std::string(suffix).size());
        break;
      }
    out = base + "_attend.h5";
  }
  check_output("attend", out, path, "run log", "attend");
  // The figures are drawn after the file is written: what would keep them
  // from being drawn is said before anything is written (a refused command
  // leaves every file as it was).
  const bool plot = can_plot(out);
  // Before the work: a path that cannot be written is refused at once (its
  // directories removed again if what follows fails).
  MadeDirectories dirs(prepare_output_path(out, "attend", "--out"));

  autograd::NoGradGuard ng;
  cm.model->eval();
  cm.model->keep_attention(true);
  Tensor x = Tensor::from_i64(ids, {1, P});
  cm.model->forward(x);
  std::vector<Tensor> maps = cm.model->attention_maps();  // per layer [1, H, P, P]
  cm.model->keep_attention(false);
  const int64_t L = static_cast<int64_t>(maps.size()), H = cm.model->options.heads_;
  const std::vector<bool> boundary = word_boundaries(cm.tok);

  const auto& names = head_stat_names();
  std::vector<double> stats(names.size() * static_cast<size_t>(L * H));
  std::vector<std::string> kinds;
  HeadStats uniform;
  fmt::print("prompt: \"{}\" ({} characters)\n\n{:>5} {:>4} | {:>7} {:>8} {:>6} {:>6} {:>9} {:>10} | {}\n",
             attend_printable(prompt), P,
             "layer", "head", "entropy", "distance", "prev", "first", "same-char", "word-start", "kind");
  for (int64_t l = 0; l < L; ++l) {
    std::vector<HeadStats> hs = head_stats(maps[static_cast<size_t>(l)], x, boundary, &uniform);
    for (int64_t h = 0; h < H; ++h) {
      const HeadStats& s = hs[static_cast<size_t>(h)];
      for (size_t k = 0; k < names.size(); ++k)
        stats[(k * static_cast<size_t>(L) + static_cast<size_t>(l)) * static_cast<size_t>(H) + static_cast<size_t>(h)] =
            head_stat(s, k);
      kinds.push_back(head_kind(s, uniform));
      fmt::print("{:>5} {:>4} | {:>7.3f} {:>8.2f} {:>6.3f} {:>6.3f} {:>9.3f} {:>10.3f} | {}\n", l, h, s.entropy,
                 s.distance, s.prev, s.first, s.same_char, s.word_start, kinds.back());
    }
  }
  fmt::print("{:>10} | {:>7.3f} {:>8.2f} {:>6.3f} {:>6.3f} {:>9.3f} {:>10.3f} | (uniform attention over the "
             "characters so far)\n",
             "uniform", uniform.entropy, uniform.distance, uniform.prev, uniform.first, uniform.same_char,
             uniform.word_start);

  // The file `heed plot` draws: experiment "attend", the maps and the table.
  {
    RunLog log = RunLog::create(out);
    log.set_attr("experiment", std::string("attend"));
    // What every log says of the heed that wrote it and how (Run's own, data/run.h).
    std::vector<std::string> command_line = {"heed", "attend"};
    command_line.insert(command_line.end(), args.begin(), args.end());
    log_provenance(log, command_line, new_run_id());
    log_machine(log, num_threads());
    for (const auto& [k, v] : a.values()) log.set_attr("config." + k, v);  // the prompt and --out as used
    log.set_attr("checkpoint", path);
    log.set_attr("prompt", prompt);
    std::string kind_lines;
    for (const auto& k : kinds) kind_lines += k + "\n";
    log.set_attr("kinds", kind_lines);
    std::vector<Tensor> per_layer;
    for (const Tensor& m : maps) per_layer.push_back(m.reshape({1, H, P, P}));
    log.write_tensor("attention/maps", concat(per_layer, 0));  // [L, H, P, P]
    for (size_t k = 0; k < names.size(); ++k)
      log.write_tensor("heads/" + names[k],
                       Tensor::from_f64(std::vector<double>(stats.begin() + static_cast<std::ptrdiff_t>(k * L * H),
                                                            stats.begin() + static_cast<std::ptrdiff_t>((k + 1) * L * H)),
                                        {L, H}));
    log.begin();
    log.close();
  }
  dirs.keep();
  fmt::print("\nmaps and statistics: {}\n", out);
  if (plot) plot_log(out, default_plot_dir(out));
  return 0;
}

}  // namespace

int run_attend(const std::vector<std::string>& args) {
  // One prefix for every message: "attend: ", also on those of what it
  // calls (a checkpoint that does not load, a log that cannot be written, the
  // figures), which name no command of their own; a bad command line's
  // message on one line.
  return with_command_prefix("attend", [&] { return attend(args); });
}

}  // namespace heed::experiments
