// experiments/common.cpp
#include "experiments/common.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string_view>

#include "core/allocator.h"
#include "core/files.h"
#include "core/safetensors.h"
#include "data/h5.h"
#include "experiments/charlm.h"
#include "experiments/quantize.h"
#include "experiments/copy.h"
#include "experiments/crossattn.h"
#include "experiments/scaling.h"
#include "experiments/shapes.h"
#include "experiments/sine.h"
#include "experiments/timeseries.h"
#include "layers/module.h"

namespace heed::experiments {

namespace {
// text as a whole as a number >= 0, or -1: empty, not a number (a sign, a
// unit, "max"), or past int64 (std::stoll threw there, out of a memory check).
int64_t count_or_minus_one(std::string_view text) {
  int64_t v = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return ec == std::errc() && end == text.data() + text.size() && v >= 0 ? v : -1;
}
// A cgroup file's number: -1 when it is missing or not a count.
int64_t cgroup_number(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string word;
  return in >> word ? count_or_minus_one(word) : -1;
}
}  // namespace

int64_t cgroup_memory_left(const std::string& proc_cgroup, const std::string& root, std::string* limit_file,
                           int64_t* limit) {
  namespace fs = std::filesystem;
  std::ifstream in(proc_cgroup);
  std::string line;
  int64_t left = -1;
  while (std::getline(in, line)) {
    // "hierarchy-id:controllers:path"; v2's hierarchy is "0::path".
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    fs::path base;
    const char *max_name = nullptr, *used_name = nullptr;
    if (controllers.empty() && line.compare(0, a, "0") == 0) {
      base = fs::path(root);
      max_name = "memory.max";
      used_name = "memory.current";
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      base = fs::path(root) / "memory";
      max_name = "memory.limit_in_bytes";
      used_name = "memory.usage_in_bytes";
    } else {
      continue;
    }
    // The process's cgroup, then each one above it up to the hierarchy's root.
    const fs::path top = base.lexically_normal(), below = fs::path(path).relative_path().lexically_normal();
    if (!below.empty() && *below.begin() == "..") continue;  // outside this cgroup namespace: not below `root`
    for (fs::path dir = below.empty() || below == "." ? top : top / below;; dir = dir.parent_path()) {
      const int64_t max = cgroup_number(dir / max_name);
      // cgroup v1 writes "no limit" as the largest multiple of the page size.
      if (max >= 0 && max < (int64_t{1} << 62)) {
        const int64_t here = std::max<int64_t>(0, max - std::max<int64_t>(0, cgroup_number(dir / used_name)));
        if (left < 0 || here < left) {
          left = here;
          if (limit_file) *limit_file = (dir / max_name).string();
          if (limit) *limit = max;
        }
      }
      if (dir.string().size() <= top.string().size() || dir.parent_path() == dir) break;
    }
  }
  return left;
}

int64_t processes_on_this_machine() {
  const char* n = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return n ? std::max<int64_t>(1, count_or_minus_one(n)) : 1;
}

int64_t memory_available(std::string* source) {
  int64_t avail = -1;
  {
    std::ifstream in("/proc/meminfo");
    std::string key;
    int64_t kb = 0;
    std::string unit;
    while (in >> key >> kb) {
      std::getline(in, unit);
      if (key == "MemAvailable:") {
        avail = kb * 1024;
        if (source) *source = "available memory (MemAvailable)";
        break;
      }
    }
  }
  {
    std::string file;
    int64_t limit = 0;
    const int64_t left = cgroup_memory_left("/proc/self/cgroup", "/sys/fs/cgroup", &file, &limit);
    if (left >= 0 && (avail < 0 || left < avail)) {
      avail = left;
      if (source)
        *source = fmt::format("memory left under the cgroup limit of {:.1f} GiB ({})",
                              static_cast<double>(limit) / double(int64_t{1} << 30), file);
    }
  }
  // Under mpirun, the processes it started on this machine share its
  // memory (and a cgroup's: they run in mpirun's): each counts on its share.
  // They check at the same moment, each seeing all of it free, and each
  // allocates what it asks for (data-parallel training holds the whole data
  // set and model in every process), so a run that fits once would be
  // started on every rank and killed on all.
  if (const int64_t local = processes_on_this_machine(); local > 1 && avail >= 0) {
    if (source)
      *source = fmt::format("{}, this process's share of {:.1f} GiB among the {} processes mpirun started on this "
                            "machine", *source,
                            static_cast<double>(avail) / double(int64_t{1} << 30), local);
    avail /= local;
  }
  // ulimit -v is each process's own.
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
    // What the limit leaves: the limit less the address space mapped now.
    std::ifstream statm("/proc/self/statm");
    int64_t pages = 0;
    if (statm >> pages) {
      const int64_t mapped = pages * static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
      const int64_t left = std::max<int64_t>(0, static_cast<int64_t>(lim.rlim_cur) - mapped);
      if (avail < 0 || left < avail) {
        avail = left;
        if (source) *source = "address space left under ulimit -v";
      }
    }
  }
  return avail;
}

void check_memory(const std::string& command, const std::string& option, int64_t value, const std::string& what,
                  double bytes) {
  check_memory_needed(command, fmt::format("--{} {}", option, value), "for " + what, option, bytes);
}

void check_memory_needed(const std::string& command, const std::string& subject, const std::string& need,
                         const std::string& option, double bytes) {
  std::string source;
  const int64_t avail = memory_available(&source);
  if (avail < 0 || bytes <= static_cast<double>(avail)) return;
  auto gib = [](double b) { return fmt::format("{:.1f} GiB", b / double(int64_t{1} << 30)); };
  throw UsageError(fmt::format("{}: {} needs {} ({:.0f} bytes) {}, more than the {} of {}; expected a smaller --{}",
                               command, subject, gib(bytes), bytes, need, gib(static_cast<double>(avail)), source,
                               option));
}

double tensor_memory(const std::vector<LiveBlocks>& moments) {
  // Blocks are rounded up to the allocator's 64 bytes, and cached by that size.
  auto rounded = [](double bytes) { return std::ceil(bytes / 64) * 64; };
  // What core/allocator.cpp keeps cached at most (kMaxCachedBytes).
  constexpr double kMaxCached = double(int64_t{4} << 30);
  double largest = 0;
  std::map<double, double> most;  // block size -> the most blocks of it alive at one moment
  for (const LiveBlocks& moment : moments) {
    std::map<double, double> count;
    double sum = 0;
    for (const auto& [bytes, n] : moment) {
      if (n <= 0 || bytes <= 0) continue;
      count[rounded(bytes)] += n;
      sum += rounded(bytes) * n;
    }
    largest = std::max(largest, sum);
    for (const auto& [bytes, n] : count) most[bytes] = std::max(most[bytes], n);
  }
  if (!alloc::caching_enabled()) return largest;
  double held = 0;
  for (const auto& [bytes, n] : most) held += bytes * n;
  return std::min(held, largest + kMaxCached);
}

void check_output(const std::string& command, const std::string& out, const std::string& input,
                  const std::string& writes, const std::string& log_experiment) {
  if (files::same_file(out, input))
    throw UsageError(fmt::format("{}: --out '{}' is the checkpoint being read; expected another file", command, out));
  // A safetensors file without heed export's metadata may still be heed's:
  // a program's own Module::save writes none. Refused all the same (it may
  // be a PyTorch user's only copy), in words that do not say whose it is.
  if (writes == "safetensors") {
    const ExistingFile e = existing_file(out);
    if (e.kind == ExistingFile::Kind::not_hdf5 && e.safetensors && e.experiment.empty())
      throw UsageError(fmt::format("{}: --out '{}' is a safetensors file {} did not write (its metadata names no "
                                   "heed_experiment: a PyTorch file, or weights a program saved with Module::save); "
                                   "expected a new file (or remove that one first)",
                                   command, out, command));
  }
  const std::string what = writes == "safetensors" ? "a safetensors file"
                           : writes == "checkpoint" ? "a quantized checkpoint"
                                                    : "a log of its own";
  refuse_replacing(command, "--out", out, what, "one " + command + " wrote before", [&](const ExistingFile& e) {
    if (writes == "safetensors") return e.kind == ExistingFile::Kind::not_hdf5 && e.safetensors && !e.experiment.empty();
    if (writes == "checkpoint") return e.kind == ExistingFile::Kind::checkpoint && e.quantized;
    return e.kind == ExistingFile::Kind::log && !log_experiment.empty() && e.experiment == log_experiment;
  });
}

void log_model(RunLog& log, const std::string& name, const nn::Module& model) {
  log.write_tensor("models/" + name + "/nb_parameters",
                   Tensor::scalar(static_cast<double>(model.num_parameters()), DType::i64));
  log.set_attr("summary", model.summary(), "models/" + name);
  std::string params;
  for (const auto& [n, p] : model.named_parameters()) params += n + " " + shape_str(p.shape()) + "\n";
  log.set_attr("parameters", params, "models/" + name);
}

const std::vector<Experiment>& experiments() {
  static const std::vector<Experiment> table = {
      {"charlm", "a character-level GPT on the King James Bible (or --text FILE)", run_charlm},
      {"compression", "every quantizer of heed quantize at every bit width, on trained models", run_compression},
      {"copy", "one attention layer learns to copy the previous token", run_copy},
      {"crossattn", "signal positions cross-attend to tokens that describe the signal's shapes", run_crossattn},
      {"scaling", "why attention divides its scores by sqrt(d_k): saturation, then training with and without", run_scaling},
      {"shapes", "the CNN-versus-attention toy experiment (the demo)", run_shapes},
      {"sine", "fit sin(x) with a small MLP (seconds)", run_sine},
      {"timeseries", "forecast periodic signals with anomalies: attention looks one period back, vs a CNN",
       run_timeseries},
  };
  return table;
}

std::string config_text(const Checkpoint& ck, const std::string& path, const std::string& key) {
  auto it = ck.config.find(key);
  if (it == ck.config.end()) fail("checkpoint '{}': config.{} is missing", path, key);
  return it->second;
}

int64_t config_int(const Checkpoint& ck, const std::string& path, const std::string& key, int64_t min) {
  const std::string v = config_text(ck, path, key);
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0 || x < min)
    fail("checkpoint '{}': config.{} is '{}', expected an integer >= {}", path, key, v, min);
  return x;
}

double config_real(const Checkpoint& ck, const std::string& path, const std::string& key) {
  const std::string v = config_text(ck, path, key);
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno != 0 || x != x)
    fail("checkpoint '{}': config.{} is '{}', expected a number", path, key, v);
  return x;
}

bool config_flag(const Checkpoint& ck, const std::string& path, const std::string& key) {
  const std::string v = config_text(ck, path, key);
  if (v != "true" && v != "false") fail("checkpoint '{}': config.{} is '{}', expected true or false", path, key, v);
  return v == "true";
}

std::unique_ptr<TrainedModels> trained_models(const Checkpoint& ck, const std::string& path, const std::string& who,
                                              const std::string& text, const std::string& text_option) {
  if (ck.experiment == "charlm") return charlm_trained_models(ck, path, who, text, text_option);
  if (!text.empty())
    throw UsageError(fmt::format("{}: {} '{}' gives the text of a charlm checkpoint; checkpoint '{}' is of experiment "
                                 "'{}', which reads none",
                                 who, text_option, text, path, ck.experiment));
  if (ck.experiment == "shapes") return shapes_trained_models(ck, path);
  fail("{}: checkpoint '{}' is of experiment '{}'; expected a charlm or shapes checkpoint (the models it can "
       "evaluate)",
       who, path, ck.experiment);
}

int with_command_prefix(const std::string& command, const std::function<int()>& body) {
  const std::string p = command + ": ";
  auto prefixed = [&p](const std::string& what) { return what.rfind(p, 0) == 0 ? what : p + what; };
  // A bad command line's message on one line: a value's newline or tab
  // (quoted in it) escaped, as attend_printable shows a prompt's.
  auto one_line = [](const std::string& what) {
    std::string s;
    for (const char c : what) {
      const auto b = static_cast<unsigned char>(c);
      if (c == '\n') s += "\\n";
      else if (c == '\r') s += "\\r";
      else if (c == '\t') s += "\\t";
      else if (b < 0x20 || b == 0x7f) s += fmt::format("\\x{:02x}", b);
      else s += c;
    }
    return s;
  };
  try {
    return body();
  } catch (const UsageError& e) {
    throw UsageError(prefixed(one_line(e.what())));
  } catch (const Error& e) {
    throw Error(prefixed(e.what()));
  }
}

}  // namespace heed::experiments
