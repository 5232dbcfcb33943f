// data/runlog.h: a training run's HDF5 log, readable while the run goes on
// and intact after a crash (HDF5 single-writer/multiple-reader mode).
//
// Layout (documented for users in docs/log-format.md):
//   /                       attributes: run metadata (experiment, config, ...)
//   /metrics/<name>         float64 [n, 3]: step, value, wall-clock seconds
//   /series/<name>/values   float32 [n, ...]: one tensor per logged step
//   /series/<name>/step     int64 [n]
//   anything else           fixed datasets written before the run starts
//
// SWMR allows no new objects once appending starts, so the whole schema is
// declared first, then begin() switches to appending. Rows are flushed at a
// bounded interval, so a killed run loses at most that interval.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "core/tensor.h"
#include "data/h5.h"

namespace heed {

// Why HDF5 would store `name` under another name ("holds '//'", "ends with
// '/'", ...), or "" when it is parts joined by single '/', none of them
// empty or '.', without a NUL. The names of a log's metrics and series and
// of the state a Run tracks (data/run.h) are such paths, and are checked by
// this one rule.
std::string hdf5_name_problem(const std::string& name);
// name as C++ writes it, a NUL as \0 (a message would end at the NUL).
std::string shown_name(const std::string& name);

class RunLog {
 public:
  struct Options {
    double flush_seconds = 1.0;   // flush at least this often while appending
    int64_t flush_rows = 1000;    // ... or after this many rows
    // resume(): text attributes of the root (re)written as the log reopens,
    // before appending starts (a resumed run's options that may change).
    std::map<std::string, std::string> attrs;
  };

  // A new log at path (an existing file is replaced).
  static RunLog create(const std::string& path, const Options& opt);
  static RunLog create(const std::string& path) { return create(path, Options()); }
  // Reopens a log to continue a resumed run: rows whose step is greater than
  // after_step (written after the checkpoint the run resumes from) are
  // dropped, so the continued log is exactly what an uninterrupted run writes.
  // The metrics and series named in `redo` lose their rows at after_step
  // too: work of that step the run does again (an evaluation a stop cut
  // short, which an earlier resume of the same checkpoint may have logged).
  static RunLog resume(const std::string& path, int64_t after_step, const Options& opt,
                       const std::set<std::string>& redo = {});
  static RunLog resume(const std::string& path, int64_t after_step, const std::set<std::string>& redo = {}) {
    return resume(path, after_step, Options(), redo);
  }

  // Why `log` cannot take the rows of a run resumed from a checkpoint at
  // `step`: "" when its rows reach that step, else (it ends before it:
  // an older checkpoint of the run was resumed since, which cut it back)
  // e.g. "it ends at step 300, so steps 301 to 990 would be missing from it
  // (...)". A metric or series logged every k steps (its last two rows k
  // apart) reaches the k - 1 steps after its last row; a log with no rows
  // at all reaches every step (a program that logs nothing loses nothing).
  // resume() refuses such a log before it changes anything.
  static std::string gap_before(const h5::File& log, int64_t step);

  // The digest of the rows RunLog::resume(step, redo) keeps of `log`:
  // those with step <= `step` (<= step - 1 in the metrics and series named
  // in `redo`). 64-bit FNV-1a over each metric's rows (its 24 bytes of step,
  // value, wall_seconds each) and each series' (its int64 step, then its
  // float32 values), combined over the datasets that have such rows, in the
  // order of their paths, each with its path and row count. Every checkpoint
  // records the digest of its log's rows up to its step (log_digest,
  // docs/checkpoint-format.md): a resume whose log gives another one holds
  // rows of another resume of the run there (the seconds of every row
  // differ), which it must not continue. Reads every such row.
  static uint64_t rows_digest(const h5::File& log, int64_t step, const std::set<std::string>& redo = {});
  // The same digest of the rows this log holds (written, or kept when it
  // was resumed): what rows_digest reads from its file once they are
  // flushed. Nothing for a discarding or closed log, or when rows after
  // `step` came at two or more later steps (a step's rows are told apart
  // from the rows after the step before them only).
  std::optional<uint64_t> digest(int64_t step, const std::set<std::string>& redo = {}) const;

  // A log that writes nothing (the processes of a data-parallel job other
  // than rank 0 log through one of these: path() is empty).
  static RunLog discard();

  RunLog(RunLog&&) noexcept;
  RunLog& operator=(RunLog&&) noexcept;
  ~RunLog();

  // ---- schema: before begin() ----
  void set_attr(const std::string& name, const h5::Attr& value, const std::string& object = "/");
  // A metric's or series' name is a path of parts joined by single '/'
  // ("train_loss", "attention/blocks.0.attn"); a name that is empty, starts
  // or ends with '/', holds "//" or a part "." is refused (HDF5 would store
  // it under another name).
  void declare_scalar(const std::string& name);
  void declare_series(const std::string& name, const Shape& item_shape);
  void write_tensor(const std::string& path, const Tensor& t);
  void begin();

  // ---- appending: after begin() ----
  void scalar(const std::string& name, int64_t step, double value);
  void series(const std::string& name, int64_t step, const Tensor& value);
  void flush();
  void close();

  const std::string& path() const;
  bool appending() const;
  // Seconds since the run started (continues across resumes).
  double wall_seconds() const;

 private:
  struct Impl;
  explicit RunLog(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace heed
