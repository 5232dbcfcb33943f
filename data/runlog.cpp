// data/runlog.cpp
#include "data/runlog.h"

#include <hdf5.h>

#include <sys/time.h>

#include <algorithm>
#include <functional>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/kernels.h"

namespace heed {

// docs/log-format.md: what a reader of this version finds.
constexpr int64_t kLogFormat = 1;

// A name under metrics/, series/ or a checkpoint's tensors/ is an HDF5 path.
// HDF5 reads "a//b", "a/./b" and a trailing '/' as "a/b" (the root's
// attention layer's "attention/" + "" would be stored as "attention"), and a
// '\0' ends the name: such a name would be stored under another one.
std::string hdf5_name_problem(const std::string& name) {
  if (name.empty()) return "is empty";
  if (name.find('\0') != std::string::npos) return "holds a NUL character";
  if (name.front() == '/') return "starts with '/'";
  if (name.back() == '/') return "ends with '/'";
  if (name.find("//") != std::string::npos) return "holds '//'";
  if (name == "." || name.starts_with("./") || name.ends_with("/.") || name.find("/./") != std::string::npos)
    return "has a part '.'";
  return "";
}

std::string shown_name(const std::string& name) {
  std::string shown;  // a message ends at a NUL
  for (char c : name) shown += c == '\0' ? std::string("\\0") : std::string(1, c);
  return shown;
}

namespace {
double unix_now() {
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  return static_cast<double>(tv.tv_sec) + 1e-6 * static_cast<double>(tv.tv_usec);
}

// The digest of a log's rows (RunLog::rows_digest): 64-bit FNV-1a.
constexpr uint64_t kFnvBasis = 14695981039346656037ull, kFnvPrime = 1099511628211ull;
uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnvPrime;
  return h;
}

}  // namespace

namespace runlog_detail {
// One metric's or series' rows as the digest sees them, row by row in step
// order, and what it needs to leave out the rows of the last step. Not in
// the anonymous namespace: RunLog::Impl holds one, and a member of a type
// with internal linkage draws -Wsubobject-linkage where this file is
// compiled inside a unity source (the sanitized build).
struct RowHash {
  uint64_t all = kFnvBasis, before = kFnvBasis;  // every row; the rows before those of the last step
  int64_t rows = 0, rows_before = 0;
  int64_t last = INT64_MIN, prev = INT64_MIN;  // the last step hashed; the step of the rows before it
  bool known = true;  // false: rows that could not be read (the digest is not known)
  void add(int64_t step, const void* a, size_t na, const void* b = nullptr, size_t nb = 0) {
    if (rows == 0 || step != last) {
      before = all;
      rows_before = rows;
      prev = rows == 0 ? INT64_MIN : last;
      last = step;
    }
    all = fnv1a(all, a, na);
    if (nb > 0) all = fnv1a(all, b, nb);
    ++rows;
  }
  // The hash and count of the rows with step <= bound; false when they are
  // not told apart (rows after bound at two or more steps).
  bool upto(int64_t bound, uint64_t* h, int64_t* n) const {
    if (!known) return false;
    if (rows == 0 || last <= bound) {
      *h = all, *n = rows;
      return true;
    }
    if (rows_before == 0 || prev <= bound) {
      *h = before, *n = rows_before;
      return true;
    }
    return false;
  }
};
}  // namespace runlog_detail

namespace {
using runlog_detail::RowHash;

// The datasets' hashes (path -> hash, rows) as one digest: those with rows,
// in the order of their paths.
uint64_t combine(const std::map<std::string, std::pair<uint64_t, int64_t>>& parts) {
  uint64_t h = kFnvBasis;
  for (const auto& [path, part] : parts) {
    if (part.second == 0) continue;
    h = fnv1a(h, path.c_str(), path.size() + 1);  // with its NUL: no path runs into the next
    h = fnv1a(h, &part.first, sizeof part.first);
    h = fnv1a(h, &part.second, sizeof part.second);
  }
  return h;
}

// The rows of a metric ([n, 3] float64) up to the first with a step above
// `last`: how many, and their hash.
RowHash hash_metric(const Tensor& rows, int64_t last) {
  RowHash rh;
  const double* r = rows.data<double>();
  for (int64_t k = 0; k < rows.size(0) && r[k * 3] <= static_cast<double>(last); ++k)
    rh.add(static_cast<int64_t>(r[k * 3]), r + k * 3, 3 * sizeof(double));
  return rh;
}

// The same for a series: its steps (int64 [n]) up to the first above `last`,
// each with its row of values, read from `values` in f.
RowHash hash_series(const h5::File& f, const std::string& values, const Tensor& steps, int64_t last) {
  RowHash rh;
  const int64_t* st = steps.data<int64_t>();
  int64_t keep = 0;
  while (keep < steps.numel() && st[keep] <= last) ++keep;
  if (keep == 0) return rh;
  // Read in blocks of rows of up to 64 MiB: a long run's maps can take
  // gigabytes in all.
  const Shape shape = f.dataset_shape(values);
  int64_t row_elems = 1;
  for (size_t i = 1; i < shape.size(); ++i) row_elems *= shape[i];
  const int64_t block = std::max<int64_t>(1, (int64_t{64} << 20) / std::max<int64_t>(1, row_elems * 4));
  std::vector<int64_t> start(shape.size(), 0), count(shape.begin(), shape.end());
  for (int64_t first = 0; first < keep; first += block) {
    start[0] = first;
    count[0] = std::min(block, keep - first);
    const Tensor v = kernel::contiguous(f.read_block(values, start, count));
    const size_t row = static_cast<size_t>(v.numel() / count[0]) * dtype_size(v.dtype());
    const auto* bytes = static_cast<const unsigned char*>(v.raw_data());
    for (int64_t k = 0; k < count[0]; ++k)
      rh.add(st[first + k], &st[first + k], sizeof(int64_t), bytes + static_cast<size_t>(k) * row, row);
  }
  return rh;
}

void check_name(const std::string& log, const char* kind, const std::string& name) {
  const std::string problem = hdf5_name_problem(name);
  if (problem.empty()) return;
  fail("RunLog{}: {} name '{}' {}; expected parts joined by single '/', none of them empty or '.' (e.g. "
       "'train_loss', 'attention/blocks.0.attn')",
       log.empty() ? "" : " '" + log + "'", kind, shown_name(name), problem);
}
}  // namespace

// A name that would make a dataset of one declared before a group, or the
// other way round. A metric is one dataset, metrics/<name>: no metric may lie
// under or above another ("loss/train" beside "loss"). A series is a group
// holding two, series/<name>/{values,step}: one may lie under another (the
// series "attention" beside "attention/maps"), but not at or under those two
// ("attention/values").
template <class Declared>
void check_not_nested(const std::string& log, const char* kind, const std::string& name, const Declared& declared) {
  const bool series = std::string_view(kind) == "series";
  auto clash = [&](const std::string& a, const std::string& b) {  // a lies under b where b's datasets are
    if (a.size() <= b.size() || a.compare(0, b.size(), b) != 0 || a[b.size()] != '/') return false;
    if (!series) return true;
    const size_t from = b.size() + 1, to = std::min(a.find('/', from), a.size());
    const std::string_view part(a.data() + from, to - from);  // the first part of a below b
    return part == "values" || part == "step";
  };
  for (const auto& [other, ds] : declared)
    if (clash(name, other) || clash(other, name))
      fail("RunLog '{}': {} '{}' lies {} the {} '{}' declared before: {}; expected another name",
           log, kind, name, clash(name, other) ? "under" : "above", kind, other,
           series ? "a series' values and step datasets cannot also be another series' group"
                  : "a metric's dataset cannot also be another metric's group");
}

struct RunLog::Impl {
  h5::File file;
  Options opt;
  bool appending = false;
  // Why the log takes no more rows ("close() was called"), or null. Its
  // datasets are gone then: a row would read as one of an undeclared metric.
  const char* closed = nullptr;
  double start_unix = 0;
  std::chrono::steady_clock::time_point last_flush = std::chrono::steady_clock::now();
  int64_t rows_since_flush = 0;
  struct Ds {
    hid_t id = -1;
    hid_t step_id = -1;  // series only
    Shape item;           // series only
    int64_t rows = 0;
    int64_t last_step = INT64_MIN;  // steps never decrease within a metric or series
    RowHash hash;                   // its rows, for digest()
  };
  std::map<std::string, Ds> metrics, series;

  Impl(h5::File f, Options o) : file(std::move(f)), opt(o) {}

  // A step before the last one logged to d is refused (docs/log-format.md:
  // steps never decrease, which resume's trimming and every reader rely on).
  void check_step(Ds& d, const char* kind, const std::string& name, int64_t step) const {
    if (step < d.last_step)
      fail("RunLog '{}': {} '{}' at step {} after step {}; expected steps that never decrease", file.path(), kind,
           name, step, d.last_step);
    d.last_step = step;
  }
  ~Impl() { close(false); }

  // Why the first write that failed failed ("No space left on device"):
  // read from HDF5's error stack at once, as the next call clears it.
  std::string failure;

  // Writes every dataset's rows that HDF5 still holds; false when a write
  // failed (a full disk: the rows were left as zeros, silently, before).
  // The first failure's reason is kept: every dataset is flushed still, and
  // a later flush that succeeds (a dataset whose rows fit where it had room)
  // clears HDF5's error stack.
  bool write_rows() {
    bool ok = true;
    auto flush = [&](hid_t id) {
      if (H5Dflush(id) >= 0) return;
      if (ok) failure = h5::system_reason();
      ok = false;
    };
    for (auto& [n, d] : metrics) flush(d.id);
    for (auto& [n, d] : series) {
      flush(d.id);
      flush(d.step_id);
    }
    return ok;
  }
  // After a failed write, no more writes (data/h5.h, File::abandon): the
  // log stays as its last flush left it, readable as a killed writer's.
  void abandon() {
    closed = "a write failed";
    metrics.clear();
    series.clear();
    file.abandon();
  }
  [[noreturn]] void write_failed() {
    const std::string why = failure.empty() ? h5::system_reason() : failure;
    abandon();
    fail("RunLog '{}': could not write the log{}{}; the rows logged since its last flush are lost", file.path(),
         why.empty() ? "" : ": ", why);
  }

  // report: throw when the last rows could not be written (not from a
  // destructor).
  void close(bool report = true) {
    if (file.id() < 0) return;
    closed = "close() was called";
    if (appending && !write_rows()) {
      if (report) write_failed();
      abandon();
      return;
    }
    for (auto& [n, d] : metrics) H5Dclose(d.id);
    for (auto& [n, d] : series) {
      H5Dclose(d.id);
      H5Dclose(d.step_id);
    }
    metrics.clear();
    series.clear();
    const bool done = file.close();  // writes the file's metadata
    if (!done && report) write_failed();
  }

  void require(bool want_appending, const char* what) const {
    if (closed) fail("RunLog '{}': {} after the log was closed ({})", file.path(), what, closed);
    if (appending == want_appending) return;
    if (std::string(what) == "begin")
      fail("RunLog '{}': begin() was already called (a log from RunLog::resume is appending already)", file.path());
    fail("RunLog '{}': {} {} begin()", file.path(), what, want_appending ? "needs" : "must come before");
  }

  hid_t create_extendible(const std::string& path, hid_t type, const Shape& item, int64_t chunk_rows) {
    std::vector<hsize_t> dims{0}, maxdims{H5S_UNLIMITED}, chunk{static_cast<hsize_t>(chunk_rows)};
    for (int64_t d : item) {
      dims.push_back(static_cast<hsize_t>(d));
      maxdims.push_back(static_cast<hsize_t>(d));
      chunk.push_back(static_cast<hsize_t>(d));
    }
    hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), maxdims.data());
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t ds = H5Dcreate2(file.id(), path.c_str(), type, space, lcpl, dcpl, H5P_DEFAULT);
    H5Pclose(lcpl);
    H5Pclose(dcpl);
    H5Sclose(space);
    if (ds < 0) fail("RunLog '{}': could not create dataset '{}' (declared twice?)", file.path(), path);
    return ds;
  }

  hid_t open_ds(const std::string& path) {
    hid_t ds = H5Dopen2(file.id(), path.c_str(), H5P_DEFAULT);
    if (ds < 0) fail("RunLog '{}': could not open dataset '{}'", file.path(), path);
    return ds;
  }

  static int64_t rows_of(hid_t ds) {
    hid_t space = H5Dget_space(ds);
    int nd = H5Sget_simple_extent_ndims(space);
    std::vector<hsize_t> dims(static_cast<size_t>(std::max(nd, 1)));
    H5Sget_simple_extent_dims(space, dims.data(), nullptr);
    H5Sclose(space);
    return static_cast<int64_t>(dims[0]);
  }

  // Appends one row (item_shape elements of `type`) to ds.
  void append(hid_t ds, int64_t& rows, hid_t type, const Shape& item, const void* data) {
    std::vector<hsize_t> dims{static_cast<hsize_t>(rows + 1)}, start{static_cast<hsize_t>(rows)}, count{1};
    for (int64_t d : item) {
      dims.push_back(static_cast<hsize_t>(d));
      start.push_back(0);
      count.push_back(static_cast<hsize_t>(d));
    }
    if (H5Dset_extent(ds, dims.data()) < 0) {
      const std::string why = h5::system_reason();
      fail("RunLog '{}': could not grow a dataset to {} rows{}{}", file.path(), rows + 1, why.empty() ? "" : ": ", why);
    }
    hid_t fspace = H5Dget_space(ds);
    H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr);
    hid_t mspace = H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr);
    herr_t r = H5Dwrite(ds, type, mspace, fspace, H5P_DEFAULT, data);
    H5Sclose(mspace);
    H5Sclose(fspace);
    if (r < 0) write_failed();
    ++rows;
  }

  void maybe_flush() {
    ++rows_since_flush;
    auto now = std::chrono::steady_clock::now();
    if (rows_since_flush >= opt.flush_rows ||
        std::chrono::duration<double>(now - last_flush).count() >= opt.flush_seconds)
      flush();
  }

  void flush() {
    if (!write_rows()) write_failed();
    rows_since_flush = 0;
    last_flush = std::chrono::steady_clock::now();
  }
};

RunLog::RunLog(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RunLog::RunLog(RunLog&&) noexcept = default;
RunLog& RunLog::operator=(RunLog&&) noexcept = default;
RunLog::~RunLog() = default;

RunLog RunLog::create(const std::string& path, const Options& opt) {
  auto impl = std::make_unique<Impl>(h5::File(path, h5::File::Mode::create), opt);
  impl->start_unix = unix_now();
  impl->file.set_attr("/", "heed_log_format", kLogFormat);
  impl->file.set_attr("/", "start_unix_time", impl->start_unix);
  return RunLog(std::move(impl));
}

std::string RunLog::gap_before(const h5::File& log, int64_t step) {
  bool any = false;
  int64_t last = INT64_MIN, reach = INT64_MIN;  // the latest step logged; the latest step the rows account for
  auto rows_of = [&](const std::vector<int64_t>& steps) {
    if (steps.empty()) return;
    any = true;
    const int64_t end = steps.back(), every = steps.size() > 1 ? end - steps[steps.size() - 2] : 1;
    last = std::max(last, end);
    reach = std::max(reach, every > 1 ? end + every - 1 : end);
  };
  // The steps of a dataset's last two rows (column 0 of a metric's).
  auto last_two = [&](const std::string& p, bool metric) {
    const Shape s = log.dataset_shape(p);
    if (s.size() != (metric ? 2u : 1u) || (metric && s[1] != 3)) return std::vector<int64_t>{};
    const int64_t n = std::min<int64_t>(s[0], 2);
    const Tensor t = metric ? log.read_block(p, {s[0] - n, 0}, {n, 1}) : log.read_block(p, {s[0] - n}, {n});
    std::vector<int64_t> steps;
    for (int64_t i = 0; i < n; ++i) steps.push_back(static_cast<int64_t>(metric ? t.at({i, 0}) : t.at({i})));
    return steps;
  };
  for (const std::string& p : log.list_datasets("/")) {
    if (p.rfind("metrics/", 0) == 0)
      rows_of(last_two(p, true));
    else if (p.rfind("series/", 0) == 0 && p.size() > 12 && p.substr(p.size() - 5) == "/step")
      rows_of(last_two(p, false));
  }
  if (!any || reach >= step) return "";
  return fmt::format("it ends at step {}, so steps {} to {} would be missing from it (an older checkpoint of the run "
                     "was resumed since, which cut the log back to its step)",
                     last, last + 1, step);
}

uint64_t RunLog::rows_digest(const h5::File& log, int64_t step, const std::set<std::string>& redo) {
  std::map<std::string, std::pair<uint64_t, int64_t>> parts;
  for (const std::string& p : log.list_datasets("/")) {
    RowHash rh;
    std::string key;
    if (p.rfind("metrics/", 0) == 0) {
      const std::string name = p.substr(8);
      rh = hash_metric(log.read_tensor(p), redo.count(name) ? step - 1 : step);
      key = p;
    } else if (p.rfind("series/", 0) == 0 && p.size() > 14 && p.substr(p.size() - 7) == "/values") {
      const std::string name = p.substr(7, p.size() - 7 - 7);
      rh = hash_series(log, p, log.read_tensor("series/" + name + "/step"), redo.count(name) ? step - 1 : step);
      key = "series/" + name;
    } else {
      continue;
    }
    parts[key] = {rh.all, rh.rows};
  }
  return combine(parts);
}

std::optional<uint64_t> RunLog::digest(int64_t step, const std::set<std::string>& redo) const {
  if (!impl_ || impl_->closed) return std::nullopt;
  std::map<std::string, std::pair<uint64_t, int64_t>> parts;
  for (const auto* group : {&impl_->metrics, &impl_->series})
    for (const auto& [name, d] : *group) {
      uint64_t h = 0;
      int64_t n = 0;
      if (!d.hash.upto(redo.count(name) ? step - 1 : step, &h, &n)) return std::nullopt;
      parts[(group == &impl_->metrics ? "metrics/" : "series/") + name] = {h, n};
    }
  return combine(parts);
}

RunLog RunLog::resume(const std::string& path, int64_t after_step, const Options& opt,
                      const std::set<std::string>& redo) {
  auto impl = std::make_unique<Impl>(h5::File(path, h5::File::Mode::append), opt);
  h5::File& f = impl->file;
  if (!f.has_attr("/", "heed_log_format")) fail("'{}' is not a heed run log (no heed_log_format attribute)", path);
  const int64_t format = h5::attr_as<int64_t>(f.get_attr("/", "heed_log_format"),
                                              fmt::format("run log '{}': its heed_log_format attribute", path));
  if (format != kLogFormat)
    fail("run log '{}' is in format {}; this heed appends to format {} (docs/log-format.md){}", path, format, kLogFormat,
         format > kLogFormat ? ": it was written by a newer heed" : "");
  // Before any row goes: a log cut back by the resume of an older checkpoint
  // would go on from this one's step with the steps between missing.
  if (const std::string gap = gap_before(f, after_step); !gap.empty())
    fail("run log '{}' cannot continue a run resumed at step {}: {}; continue in a new log", path, after_step, gap);
  impl->start_unix = h5::attr_as<double>(f.get_attr("/", "start_unix_time"),
                                         fmt::format("run log '{}': its start_unix_time attribute", path));
  // Every dataset is read before any is cut back: a read that fails leaves the log as it was.
  std::vector<std::function<void()>> cuts;
  for (const std::string& p : f.list_datasets("/")) {
    if (p.rfind("metrics/", 0) == 0) {
      Impl::Ds d;
      d.id = impl->open_ds(p);
      Tensor rows = f.read_tensor(p);  // [n, 3]
      const int64_t last = redo.count(p.substr(8)) ? after_step - 1 : after_step;  // the last step kept
      d.hash = hash_metric(rows, last);  // the rows kept: the first ones up to `last`
      const int64_t keep = d.hash.rows;
      const double* r = rows.data<double>();
      cuts.push_back([id = d.id, keep] {
        hsize_t dims[2] = {static_cast<hsize_t>(keep), 3};
        H5Dset_extent(id, dims);
      });
      d.rows = keep;
      if (keep > 0) d.last_step = static_cast<int64_t>(r[(keep - 1) * 3]);
      impl->metrics.emplace(p.substr(8), d);
    } else if (p.rfind("series/", 0) == 0 && p.size() > 12 && p.substr(p.size() - 7) == "/values") {
      std::string name = p.substr(7, p.size() - 7 - 7);
      Impl::Ds d;
      d.id = impl->open_ds(p);
      d.step_id = impl->open_ds("series/" + name + "/step");
      Shape s = f.dataset_shape(p);
      d.item = Shape(s.begin() + 1, s.end());
      Tensor steps = f.read_tensor("series/" + name + "/step");
      const int64_t last = redo.count(name) ? after_step - 1 : after_step;
      int64_t keep = 0;
      const int64_t* st = steps.data<int64_t>();
      while (keep < steps.numel() && st[keep] <= last) ++keep;
      try {
        d.hash = hash_series(f, p, steps, last);  // the rows kept
      } catch (const H5Error&) {  // values HDF5 cannot read: kept as they are, of a digest not known
        d.hash.known = false;
      }
      std::vector<hsize_t> dims{static_cast<hsize_t>(keep)};
      for (int64_t x : d.item) dims.push_back(static_cast<hsize_t>(x));
      cuts.push_back([id = d.id, step_id = d.step_id, dims] {
        H5Dset_extent(id, dims.data());
        H5Dset_extent(step_id, dims.data());
      });
      d.rows = keep;
      if (keep > 0) d.last_step = st[keep - 1];
      impl->series.emplace(name, d);
    }
  }
  for (const auto& cut : cuts) cut();
  for (const auto& [name, value] : opt.attrs) f.set_attr("/", name, value);
  RunLog log(std::move(impl));
  log.begin();
  return log;
}

void RunLog::set_attr(const std::string& name, const h5::Attr& value, const std::string& object) {
  if (!impl_) return;  // a discarding log
  impl_->require(false, "set_attr");
  impl_->file.set_attr(object, name, value);
}

void RunLog::declare_scalar(const std::string& name) {
  check_name(path(), "metric", name);  // on every process of a job alike, a discarding log's too
  if (!impl_) return;  // a discarding log
  impl_->require(false, "declare_scalar");
  if (impl_->metrics.count(name)) fail("RunLog '{}': metric '{}' is declared twice", path(), name);
  check_not_nested(path(), "metric", name, impl_->metrics);
  Impl::Ds d;
  d.id = impl_->create_extendible("metrics/" + name, H5T_NATIVE_DOUBLE, {3}, 256);
  impl_->metrics.emplace(name, d);
  impl_->file.set_attr("metrics/" + name, "columns", std::string("step, value, wall_seconds"));
}

void RunLog::declare_series(const std::string& name, const Shape& item) {
  check_name(path(), "series", name);  // on every process of a job alike, a discarding log's too
  // One row of a series is one HDF5 chunk: it holds at least one value and
  // stays under HDF5's 4 GiB chunk limit.
  int64_t values = 1;
  for (int64_t d : item) {
    if (d < 1) fail("RunLog '{}': series '{}' declared with item shape {}; expected every size >= 1", path(), name,
                    shape_str(item));
    values = values > (int64_t{1} << 40) / d ? (int64_t{1} << 40) : values * d;
  }
  if (values * 4 >= (int64_t{1} << 32))
    fail("RunLog '{}': series '{}' declared with item shape {} ({} float32 values a row); expected a row of less than "
         "4 GiB (HDF5's largest chunk)",
         path(), name, shape_str(item), values);
  if (!impl_) return;  // a discarding log
  impl_->require(false, "declare_series");
  if (impl_->series.count(name)) fail("RunLog '{}': series '{}' is declared twice", path(), name);
  check_not_nested(path(), "series", name, impl_->series);
  Impl::Ds d;
  d.item = item;
  d.id = impl_->create_extendible("series/" + name + "/values", H5T_NATIVE_FLOAT, item, 1);
  d.step_id = impl_->create_extendible("series/" + name + "/step", H5T_NATIVE_INT64, {}, 64);
  impl_->series.emplace(name, d);
}

void RunLog::write_tensor(const std::string& path, const Tensor& t) {
  if (!impl_) return;  // a discarding log
  impl_->require(false, "write_tensor");
  impl_->file.write_tensor(path, t);
}

void RunLog::begin() {
  if (!impl_) return;  // a discarding log
  impl_->require(false, "begin");
  impl_->file.flush();
  impl_->file.start_swmr_write();
  impl_->appending = true;
}

void RunLog::scalar(const std::string& name, int64_t step, double value) {
  if (!impl_) return;  // a discarding log
  impl_->require(true, "scalar");
  auto it = impl_->metrics.find(name);
  if (it == impl_->metrics.end()) fail("RunLog '{}': metric '{}' was not declared", impl_->file.path(), name);
  impl_->check_step(it->second, "metric", name, step);
  double row[3] = {static_cast<double>(step), value, wall_seconds()};
  impl_->append(it->second.id, it->second.rows, H5T_NATIVE_DOUBLE, {3}, row);
  it->second.hash.add(step, row, sizeof row);
  impl_->maybe_flush();
}

void RunLog::series(const std::string& name, int64_t step, const Tensor& value) {
  if (!impl_) return;  // a discarding log
  impl_->require(true, "series");
  auto it = impl_->series.find(name);
  if (it == impl_->series.end()) fail("RunLog '{}': series '{}' was not declared", impl_->file.path(), name);
  if (!value.defined())
    fail("RunLog '{}': series '{}' at step {} got an undefined tensor (attention maps: keep_attention(true) before "
         "the forward that makes them?)",
         impl_->file.path(), name, step);
  Impl::Ds& d = it->second;
  if (value.shape() != d.item)
    fail("RunLog '{}': series '{}' expects shape {}, got {}", impl_->file.path(), name, shape_str(d.item),
         shape_str(value.shape()));
  impl_->check_step(d, "series", name, step);
  Tensor v = kernel::contiguous(kernel::to_dtype(value, DType::f32));
  int64_t rows = d.rows;
  impl_->append(d.step_id, rows, H5T_NATIVE_INT64, {}, &step);
  impl_->append(d.id, d.rows, H5T_NATIVE_FLOAT, d.item, v.raw_data());
  d.hash.add(step, &step, sizeof step, v.raw_data(), static_cast<size_t>(v.numel()) * sizeof(float));
  impl_->maybe_flush();
}

void RunLog::flush() {
  if (impl_ && impl_->appending) impl_->flush();
}

void RunLog::close() {
  if (impl_) impl_->close();
}

const std::string& RunLog::path() const {
  static const std::string none;
  return impl_ ? impl_->file.path() : none;
}
bool RunLog::appending() const { return impl_ && impl_->appending; }
double RunLog::wall_seconds() const { return impl_ ? unix_now() - impl_->start_unix : 0.0; }

RunLog RunLog::discard() { return RunLog(nullptr); }

}  // namespace heed
