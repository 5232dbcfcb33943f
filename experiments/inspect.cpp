// experiments/inspect.cpp
//
// The summary reads the file through heed's HDF5 layer alone and classifies
// every dataset by the log schema (docs/log-format.md):
//   metrics/<name>            [n, 3] rows of (step, value, wall_seconds)
//   series/<name>/{values,step}
//   a group whose datasets have dotted parameter names ("0.weight",
//   "blocks.0.attn.qkv.weight"): a model's parameters, as checkpoints hold them
//   a group of groups with dotted names ("<param>/exp_avg"): per-parameter
//   optimiser state
//   anything else: a fixed dataset
#include "experiments/inspect.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/error.h"
#include "core/quantize.h"
#include "core/safetensors.h"
#include "data/args.h"
#include "data/checkpoint.h"
#include "data/h5.h"

namespace heed::experiments {

namespace {

std::string parent_of(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos ? std::string() : p.substr(0, s);
}
std::string leaf_of(const std::string& p) {
  auto s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}
bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "blocks.0.attn.qkv.weight", "0.weight": identifiers joined by dots.
bool dotted_name(const std::string& s) {
  if (s.find('.') == std::string::npos || s.front() == '.' || s.back() == '.') return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '.' && s[i + 1] == '.') return false;
    if (c != '.' && c != '_' && !std::isalnum(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// Natural order: "2.weight" before "10.weight".
bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t i2 = i, j2 = j;
      while (i2 < a.size() && std::isdigit(static_cast<unsigned char>(a[i2]))) ++i2;
      while (j2 < b.size() && std::isdigit(static_cast<unsigned char>(b[j2]))) ++j2;
      std::string x = a.substr(i, i2 - i), y = b.substr(j, j2 - j);
      x.erase(0, std::min(x.find_first_not_of('0'), x.size()));
      y.erase(0, std::min(y.find_first_not_of('0'), y.size()));
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      i = i2;
      j = j2;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

std::string with_commas(int64_t n) {
  std::string s = std::to_string(n < 0 ? -n : n), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string num(double v) { return fmt::format("{:.6g}", v); }

// One line of text for an attribute value; multi-line text becomes a count.
std::string attr_line(const h5::Attr& a, bool* multiline = nullptr) {
  std::string s = h5::attr_str(a);
  for (size_t at = s.find('\0'); at != std::string::npos; at = s.find('\0', at + 2)) s.replace(at, 1, "\\0");
  while (!s.empty() && s.back() == '\n') s.pop_back();
  bool multi = s.find('\n') != std::string::npos;
  if (multiline) *multiline = multi;
  if (!multi) return s;
  return fmt::format("({} lines; --full prints them)", std::count(s.begin(), s.end(), '\n') + 1);
}

// SWMR reader first (works while a run appends, and on a log whose writer
// was killed), then a plain reader (files written without the latest format),
// then a cleared copy (a writer killed before SWMR began: h5::File::read_any).
h5::File open_for_reading(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) fail("inspect: '{}' does not exist", path);
  if (ec) fail("inspect: '{}' cannot be read: {}", path, ec.message());
  if (fs::is_directory(st)) fail("inspect: '{}' is a directory, expected an HDF5 file", path);
  // No permission to read it: the operating system's reason, not "not HDF5".
  if (const std::string why = h5::open_problem(path); !why.empty()) fail("inspect: cannot open '{}': {}", path, why);
  try {
    return h5::File(path, h5::File::Mode::read_any);
  } catch (const Error&) {
  }
  // A run makes its log's file before HDF5 writes anything in it: killed
  // in between, it leaves it empty.
  if (fs::is_regular_file(st) && fs::file_size(path, ec) == 0 && !ec)
    fail("inspect: '{}' is empty (0 bytes), not yet an HDF5 file: a run killed as it started leaves its log so (or "
         "the run is starting now); there is nothing to inspect",
         path);
  if (!h5::has_signature(path)) fail("inspect: '{}' is not an HDF5 file (no HDF5 signature)", path);
  // Which kind of file it is cannot be read; its name tells (a checkpoint is
  // never open in a writer: it is written beside and renamed).
  if (ends_with(path, ".ckpt.h5"))
    fail("inspect: checkpoint '{}' is damaged: not a readable heed checkpoint (truncated, or HDF5's structure is "
         "damaged)",
         path);
  fail("inspect: '{}' is an HDF5 file that cannot be opened: truncated or damaged, or (a run log) open in a writer "
       "that is not in SWMR mode",
       path);
}

struct Metric {
  std::string name;
  int64_t rows = 0;
  double first_step = 0, last_step = 0, first = NAN, last = NAN, min = NAN, min_step = 0, last_wall = NAN;
};

struct Series {
  std::string name;
  int64_t rows = 0;
  Shape item;
  int64_t first_step = 0, last_step = 0;
};

struct Fixed {
  std::string path;
  Shape shape;
  std::string dtype, value;
};

struct ParamGroup {
  std::string group;
  std::vector<std::pair<std::string, Shape>> params;  // natural order
};

struct StateGroup {
  std::string group;
  std::set<std::string> params, keys;
  int64_t values = 0;
};

// Datasets are read in blocks of at most this many bytes: a log of any size
// is inspected in bounded memory.
constexpr int64_t kBlockBytes = int64_t{16} << 20;

Metric read_metric(const h5::File& f, const std::string& path) {
  Metric m;
  m.name = path.substr(8);
  // [n, 3] rows of (step, value, wall_seconds), in blocks of whole rows.
  const int64_t n = f.dataset_shape(path)[0];
  const int64_t rows = std::max<int64_t>(1, kBlockBytes / (3 * 8));
  for (int64_t at = 0; at < n; at += rows) {
    const std::vector<double> r = f.read_block(path, {at, 0}, {std::min(rows, n - at), 3}).to_vector<double>();
    const int64_t got = static_cast<int64_t>(r.size() / 3);
    if (at == 0 && got > 0) {
      m.first_step = r[0];
      m.first = r[1];
    }
    for (int64_t i = 0; i < got; ++i) {
      double v = r[3 * i + 1];
      if (!std::isnan(v) && (std::isnan(m.min) || v < m.min)) {
        m.min = v;
        m.min_step = r[3 * i];
      }
    }
    if (at + got == n && got > 0) {
      m.last_step = r[3 * (got - 1)];
      m.last = r[3 * (got - 1) + 1];
      m.last_wall = r[3 * (got - 1) + 2];
    }
  }
  m.rows = n;
  return m;
}

Fixed read_fixed(const h5::File& f, const std::string& path) {
  Fixed d;
  d.path = path;
  d.shape = f.dataset_shape(path);
  // The dtype, and the values of small tensors (the rest are read in blocks
  // by the check of every value, when it is asked for).
  if (shape_numel(d.shape) > (int64_t{1} << 24)) return d;
  if (!f.is_numeric(path)) {
    d.dtype = "(not numeric)";
    return d;
  }
  d.dtype = dtype_name(f.dataset_dtype(path));
  if (shape_numel(d.shape) < 1 || shape_numel(d.shape) > 4) return d;
  Tensor t;
  try {
    t = f.read_tensor(path);
  } catch (const Error&) {
    d.dtype = "(not numeric)";
    return d;
  }
  {
    std::vector<std::string> vs;
    if (t.dtype() == DType::i64)
      for (int64_t v : t.to_vector<int64_t>()) vs.push_back(std::to_string(v));
    else
      for (double v : t.to_vector<double>()) vs.push_back(num(v));
    d.value = t.dim() == 0 ? vs[0] : "[" + fmt::format("{}", fmt::join(vs, ", ")) + "]";
  }
  return d;
}

// The summary of an open file whose root attributes have been read.
std::string summary(const h5::File& f, const std::string& path, const std::map<std::string, h5::Attr>& root,
                    const InspectOptions& opt) {
  std::string out;
  auto line = [&out](const std::string& s) { out += s + "\n"; };

  // ---- what the file is, and its root attributes ----
  auto root_str = [&root](const std::string& k) { return root.count(k) ? h5::attr_str(root.at(k)) : std::string(); };
  std::string kind = root.count("heed_log_format")          ? "heed run log, format " + root_str("heed_log_format")
                     : root.count("heed_checkpoint_format") ? "heed checkpoint, format " + root_str("heed_checkpoint_format")
                                                            : "HDF5 file (not a heed log or checkpoint)";
  line(fmt::format("{}: {}", path, kind));
  const bool checkpoint = root.count("heed_checkpoint_format") > 0;
  if (f.from_copy())
    line(checkpoint ? "(still marked open for writing: its writer was killed before closing it; read from a copy "
                      "with the mark cleared, the file itself unchanged)"
                    : "(still marked open for writing: its writer was killed before it finished opening the file; "
                      "read from a copy with the mark cleared, the file itself unchanged; resuming the run clears "
                      "it)");
  if (root.count("experiment")) line(fmt::format("experiment: {}", root_str("experiment")));

  // Root attributes: plain ones first (in a reading order), then the dotted
  // families grouped: config.<option>, counter.<name>, ...
  const std::vector<std::string> order{"command_line", "start_time", "heed_version", "git_commit", "threads",
                                       "cpu",          "backends"};
  std::vector<std::pair<std::string, std::string>> plain;
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> families;
  std::set<std::string> skip{"experiment", "heed_log_format", "heed_checkpoint_format"};
  for (const auto& k : order)
    if (root.count(k)) plain.emplace_back(k, attr_line(root.at(k)));
  for (const auto& [k, v] : root) {
    if (skip.count(k) || std::find(order.begin(), order.end(), k) != order.end()) continue;
    auto dot = k.find('.');
    if (dot != std::string::npos && dot > 0 && dot + 1 < k.size())
      families[k.substr(0, dot)].emplace_back(k.substr(dot + 1), attr_line(v));
    else
      plain.emplace_back(k, attr_line(v));
  }
  if (root.count("start_unix_time") && std::holds_alternative<double>(root.at("start_unix_time"))) {
    // Shown as a date in start_time already; keep the raw number readable.
    for (auto& [k, v] : plain)
      if (k == "start_unix_time") v = fmt::format("{:.3f}", std::get<double>(root.at(k)));
  }
  size_t w = 0;
  for (const auto& [k, v] : plain) w = std::max(w, k.size());
  for (const auto& [k, v] : plain) line(fmt::format("  {:<{}}  {}", k, w, v));
  for (const auto& [family, items] : families) {
    line("");
    line(fmt::format("{}:", family == "counter" ? "counters" : family));
    size_t fw = 0;
    for (const auto& [k, v] : items) fw = std::max(fw, k.size());
    for (const auto& [k, v] : items) line(fmt::format("  {:<{}}  {}", k, fw, v.empty() ? "\"\"" : v));
  }

  // ---- classify every dataset ----
  std::vector<std::string> paths = f.list_datasets("/");
  std::sort(paths.begin(), paths.end(), natural_less);
  std::set<std::string> param_groups, state_groups;
  for (const auto& p : paths) {
    std::string parent = parent_of(p);
    if (dotted_name(leaf_of(p)) && !starts_with(p, "metrics/") && !starts_with(p, "series/"))
      param_groups.insert(parent);
    else if (!parent.empty() && dotted_name(leaf_of(parent)) && !starts_with(p, "metrics/") &&
             !starts_with(p, "series/"))
      state_groups.insert(parent_of(parent));
  }
  std::vector<Metric> metrics;
  std::vector<Series> series;
  std::vector<Fixed> fixed;
  std::map<std::string, ParamGroup> params;
  std::map<std::string, StateGroup> states;
  for (const auto& p : paths) {
    std::string parent = parent_of(p);
    Shape shape = f.dataset_shape(p);
    if (starts_with(p, "metrics/") && shape.size() == 2 && shape[1] == 3) {
      metrics.push_back(read_metric(f, p));
    } else if (starts_with(p, "series/") && ends_with(p, "/values") && !shape.empty() &&
               f.exists(parent + "/step")) {
      Series s;
      s.name = parent.substr(7);
      const Shape step_shape = f.dataset_shape(parent + "/step");
      // A live writer appends the step before the values: count what both hold.
      s.rows = std::min<int64_t>(shape[0], shape_numel(step_shape));
      s.item = Shape(shape.begin() + 1, shape.end());
      if (s.rows > 0) {  // the first and the last step, read alone
        auto step_at = [&](int64_t i) {  // element i in row-major order
          std::vector<int64_t> at(step_shape.size()), one(step_shape.size(), 1);
          for (size_t d = step_shape.size(); d-- > 0;) {
            at[d] = i % step_shape[d];
            i /= step_shape[d];
          }
          return f.read_block(parent + "/step", at, one).to_vector<int64_t>()[0];
        };
        s.first_step = step_at(0);
        s.last_step = step_at(s.rows - 1);
      }
      series.push_back(s);
    } else if (starts_with(p, "series/") && ends_with(p, "/step") && f.exists(parent + "/values")) {
      continue;  // shown with its values
    } else if (param_groups.count(parent)) {
      ParamGroup& g = params[parent];
      g.group = parent;
      g.params.emplace_back(leaf_of(p), shape);
    } else if (!parent.empty() && state_groups.count(parent_of(parent)) && dotted_name(leaf_of(parent))) {
      StateGroup& g = states[parent_of(parent)];
      g.group = parent_of(parent);
      g.params.insert(leaf_of(parent));
      g.keys.insert(leaf_of(p));
      g.values += shape_numel(shape);
    } else {
      fixed.push_back(read_fixed(f, p));
    }
  }

  // ---- metrics ----
  if (!metrics.empty()) {
    double last_wall = NAN;
    for (const auto& m : metrics)
      if (!std::isnan(m.last_wall) && (std::isnan(last_wall) || m.last_wall > last_wall)) last_wall = m.last_wall;
    line("");
    line(fmt::format("metrics ({}; rows of step, value, wall_seconds{}):", metrics.size(),
                     std::isnan(last_wall) ? "" : fmt::format("; last row {:.1f} s after the start", last_wall)));
    size_t nw = 4;
    for (const auto& m : metrics) nw = std::max(nw, m.name.size());
    line(fmt::format("  {:<{}}  {:>6}  {:>13}  {:>11}  {:>11}  {:>11}  {}", "name", nw, "rows", "steps", "first",
                     "last", "min", "at step"));
    for (const auto& m : metrics) {
      if (m.rows == 0) {
        line(fmt::format("  {:<{}}  {:>6}", m.name, nw, 0));
        continue;
      }
      std::string steps = fmt::format("{}..{}", num(m.first_step), num(m.last_step));
      line(fmt::format("  {:<{}}  {:>6}  {:>13}  {:>11}  {:>11}  {:>11}  {}", m.name, nw, m.rows, steps, num(m.first),
                       num(m.last), std::isnan(m.min) ? "nan" : num(m.min),
                       std::isnan(m.min) ? "-" : num(m.min_step)));
    }
  }

  // ---- series ----
  if (!series.empty()) {
    line("");
    line(fmt::format("series ({}; one tensor per logged step):", series.size()));
    size_t nw = 4;
    for (const auto& s : series) nw = std::max(nw, s.name.size());
    line(fmt::format("  {:<{}}  {:>6}  {:<18}  {}", "name", nw, "rows", "item shape", "steps"));
    for (const auto& s : series)
      line(fmt::format("  {:<{}}  {:>6}  {:<18}  {}", s.name, nw, s.rows, shape_str(s.item),
                       s.rows > 0 ? fmt::format("{}..{}", s.first_step, s.last_step) : std::string("-")));
  }

  // ---- fixed datasets ----
  if (!fixed.empty()) {
    line("");
    line(fmt::format("datasets ({}):", fixed.size()));
    size_t nw = 4, sw = 5;
    for (const auto& d : fixed) {
      nw = std::max(nw, d.path.size());
      sw = std::max(sw, shape_str(d.shape).size());
    }
    for (const auto& d : fixed) {
      std::string s = fmt::format("  {:<{}}  {:<{}}  {:<7}", d.path, nw, shape_str(d.shape), sw, d.dtype);
      if (!d.value.empty()) s += "  " + d.value;
      while (!s.empty() && s.back() == ' ') s.pop_back();
      line(s);
    }
  }

  // ---- parameters ----
  for (auto& [name, g] : params) {
    int64_t total = 0;
    size_t nw = 4, sw = 5;
    for (const auto& [n, s] : g.params) {
      total += shape_numel(s);
      nw = std::max(nw, n.size());
      sw = std::max(sw, shape_str(s).size());
    }
    line("");
    line(fmt::format("parameters in {}: {} tensors, {} values", name, g.params.size(), with_commas(total)));
    for (const auto& [n, s] : g.params)
      line(fmt::format("  {:<{}}  {:<{}}  {:>10}", n, nw, shape_str(s), sw, with_commas(shape_numel(s))));
  }
  for (const auto& [name, g] : states) {
    std::vector<std::string> keys(g.keys.begin(), g.keys.end());
    line("");
    if (starts_with(name, "tensors/quantized") && g.keys.count("meta") && g.keys.count("codes")) {
      // heed quantize's stored matrices (docs/checkpoint-format.md): what they
      // hold and the bits they take, as the quantize report counted them.
      std::set<std::string> kinds;
      int64_t weights = 0, bits = 0;
      for (const std::string& param : g.params) {
        const std::string at = name + "/" + param + "/";
        if (!f.exists(at + "meta") || f.dataset_shape(at + "meta") != Shape{6}) continue;
        std::vector<int64_t> meta = f.read_tensor(at + "meta").to_vector<int64_t>();
        kinds.insert(fmt::format("{} {} bits", quant::method_name(static_cast<quant::Method>(meta[0])), meta[1]));
        weights += meta[3] * meta[4];
        for (const char* part : {"codes", "scales", "signs", "seed"})
          if (f.exists(at + part)) bits += (std::string(part) == "scales" ? 32 : 64) * shape_numel(f.dataset_shape(at + part));
      }
      line(fmt::format("quantized matrices in {} (heed quantize): {}, {}; {} weights, {:.3f} bits per weight stored",
                       name, g.params.size(), fmt::join(kinds, ", "), with_commas(weights),
                       weights > 0 ? static_cast<double>(bits) / static_cast<double>(weights) : 0.0));
      continue;
    }
    line(fmt::format("per-parameter state in {}: {} parameters x {{{}}}, {} values", name, g.params.size(),
                     fmt::join(keys, ", "), with_commas(g.values)));
  }

  // ---- attributes of other objects (model summaries, ...) ----
  std::set<std::string> groups;
  for (const auto& p : paths)
    for (std::string q = parent_of(p); !q.empty(); q = parent_of(q)) groups.insert(q);
  std::vector<std::string> objects(groups.begin(), groups.end());
  objects.insert(objects.end(), paths.begin(), paths.end());
  std::sort(objects.begin(), objects.end(), natural_less);
  std::vector<std::string> attr_lines;
  int64_t checksums = 0;
  for (const auto& o : objects) {
    for (const auto& [k, v] : f.attrs(o)) {
      // The metrics' "columns" is the schema's own, shown in the header above.
      if (starts_with(o, "metrics/") && k == "columns") continue;
      // A checkpoint's tensors each carry a CRC-32, all checked before the
      // summary: counted in one line (--full lists them).
      if (checkpoint && starts_with(o, "tensors/") && k == "crc32") {
        ++checksums;
        if (!opt.full) continue;
      }
      bool multi = false;
      std::string one = attr_line(v, &multi);
      attr_lines.push_back(fmt::format("  {} @{}: {}", o, k, multi && opt.full ? "" : one));
      if (multi && opt.full) {
        std::string s = h5::attr_str(v);
        while (!s.empty() && s.back() == '\n') s.pop_back();
        size_t at = 0;
        while (at <= s.size()) {
          size_t nl = s.find('\n', at);
          attr_lines.push_back("      " + s.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
          if (nl == std::string::npos) break;
          at = nl + 1;
        }
      }
    }
  }
  if (checksums > 0) {
    line("");
    line(fmt::format("checksums: {} tensors, each matching the CRC-32 stored with it (crc32 attributes{})", checksums,
                     opt.full ? ", listed below" : "; --full lists them"));
  }
  if (!attr_lines.empty()) {
    line("");
    line("attributes:");
    for (auto& l : attr_lines) {
      while (!l.empty() && l.back() == ' ') l.pop_back();
      line(l);
    }
  }
  return out;
}

}  // namespace

std::string inspect_file(const std::string& path, const InspectOptions& opt) {
  h5::File f = open_for_reading(path);
  std::map<std::string, h5::Attr> root;
  try {
    root = f.attrs("/");
  } catch (const Error& e) {
    fail("inspect: '{}' is damaged: HDF5's structure cannot be read ({})", path, e.what());
  }
  // HDF5 checksums its metadata but not raw data: a checkpoint's tensors are
  // checked against their own CRCs, as loading it would.
  const bool checkpoint = root.count("heed_checkpoint_format") > 0;
  if (checkpoint) {
    try {
      verify_checkpoint_tensors(f);
    } catch (const Error& e) {
      fail("inspect: {}", e.what());
    }
  }
  if (opt.read_values && !checkpoint) {  // (a checkpoint's were read above)
    std::vector<std::string> datasets;
    try {
      datasets = f.list_datasets("/");
    } catch (const Error& e) {
      fail("inspect: '{}' is damaged: HDF5's structure cannot be read ({})", path, e.what());
    }
    for (const std::string& d : datasets) {
      try {
        if (f.is_numeric(d)) f.read_in_blocks(d, kBlockBytes, [](const Tensor&) {});
      } catch (const Error& e) {
        fail("inspect: '{}' is damaged: its dataset '{}' cannot be read ({})", path, d, e.what());
      }
    }
  }
  try {
    return summary(f, path, root, opt);
  } catch (const Error& e) {
    const bool log = root.count("heed_log_format") > 0;
    fail("inspect: {}'{}' is damaged: not a readable {} ({})", checkpoint ? "checkpoint " : log ? "run log " : "",
         path, checkpoint ? "heed checkpoint" : log ? "heed run log" : "HDF5 file", e.what());
  }
}

namespace {
// What is wrong with path's safetensors header ("" when it reads as one), in
// safetensors::header's words without their "safetensors: ".
std::string safetensors_problem(const std::string& path) {
  try {
    safetensors::header(path);
    return "";
  } catch (const Error& e) {
    const std::string what = e.what();
    return what.rfind("safetensors: ", 0) == 0 ? what.substr(13) : what;
  }
}
// A regular file of some bytes without HDF5's signature: a safetensors file
// or neither kind.
bool not_hdf5(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) && std::filesystem::file_size(path, ec) > 0 && !ec &&
         !h5::has_signature(path);
}
}  // namespace

bool looks_like_safetensors(const std::string& path) {
  return not_hdf5(path) && (ends_with(path, ".safetensors") || safetensors_problem(path).empty());
}

std::string inspect_safetensors(const std::string& path) {
  if (const std::string why = safetensors_problem(path); !why.empty()) fail("inspect: {}", why);
  const safetensors::File f = safetensors::header(path);
  int64_t params = 0;
  uint64_t bytes = 0;
  size_t name_width = 4, shape_width = 5;
  for (const auto& [name, e] : f.entries) {
    params += shape_numel(e.shape);
    bytes += e.bytes;
    name_width = std::max(name_width, safetensors::printable(name).size());
    shape_width = std::max(shape_width, shape_str(e.shape).size());
  }
  std::string out = fmt::format("{}: safetensors file, {} tensor{}, {} values, {:.2f} MiB of data\n", path,
                                f.entries.size(), f.entries.size() == 1 ? "" : "s", params,
                                static_cast<double>(bytes) / (1 << 20));
  if (!f.metadata.empty()) {
    size_t key_width = 0;
    for (const auto& [k, v] : f.metadata) key_width = std::max(key_width, safetensors::printable(k).size());
    out += "metadata:\n";
    for (const auto& [k, v] : f.metadata)
      out += fmt::format("  {:<{}}  {}\n", safetensors::printable(k), key_width, safetensors::printable(v));
  }
  if (!f.entries.empty()) {
    out += fmt::format("tensors:\n  {:<{}}  {:<5} {:<{}}  {:>12}\n", "name", name_width, "dtype", "shape", shape_width,
                       "values");
    for (const auto& [name, e] : f.entries)
      out += fmt::format("  {:<{}}  {:<5} {:<{}}  {:>12}\n", safetensors::printable(name), name_width, e.dtype,
                         shape_str(e.shape), shape_width, shape_numel(e.shape));
  }
  return out;
}

int run_inspect(const std::vector<std::string>& args) {
  const char* help =
      "usage: heed inspect FILE [--full]\n"
      "\n"
      "Prints a summary of a run log or a checkpoint: the experiment and its configuration,\n"
      "each metric (rows, steps, first, last, minimum and the step where it was reached),\n"
      "each series (rows, item shape, steps), the fixed datasets and the groups of named\n"
      "parameters. Works on a log whose run is still writing it. Every value is read, so a\n"
      "dataset damaged in its data is refused, naming it. Layout: docs/log-format.md.\n"
      "A safetensors file (heed export's, or a PyTorch user's) is summarised from its header,\n"
      "which is checked whole: its metadata, then each tensor's name, dtype as stored, shape\n"
      "and number of values.\n"
      "\n"
      "options:\n"
      "  --full    print multi-line attributes (model summaries) in full, and each checkpoint\n"
      "            tensor's crc32 (otherwise counted in one line)\n"
      "  --help    show this help\n";
  InspectOptions opt;
  std::string file;
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") {
      fmt::print("{}", help);
      return 0;
    }
    if (a == "--full") {
      opt.full = true;
    } else if (starts_with(a, "--help=")) {
      throw UsageError(fmt::format("inspect: --help takes no value, got '{}'", a));
    } else if (starts_with(a, "-")) {
      throw UsageError(fmt::format("inspect: unknown option '{}' (see heed inspect --help)", a));
    } else if (file.empty()) {
      file = a;
    } else {
      throw UsageError(fmt::format("inspect: expects one file, got '{}' and '{}'", file, a));
    }
  }
  if (file.empty()) throw UsageError("inspect: expects a file: heed inspect FILE (see --help)");
  if (not_hdf5(file)) {
    const std::string why = safetensors_problem(file);
    if (!why.empty() && !ends_with(file, ".safetensors"))
      fail("inspect: '{}' is neither an HDF5 file (no HDF5 signature: not a heed run log or checkpoint) nor a "
           "safetensors file ({})",
           file, why);
    fmt::print("{}", inspect_safetensors(file));
    return 0;
  }
  fmt::print("{}", inspect_file(file, opt));
  return 0;
}

}  // namespace heed::experiments
