// data/checkpoint.h: a training run's complete state in one HDF5 file, so a
// killed run continues as if nothing had happened.
//
// Layout (docs/checkpoint-format.md):
//   /                     attributes: heed_checkpoint_format, experiment,
//                         run_id, log_digest, config.<option> (text),
//                         counter.<name> (int64)
//   /tensors/<key>        one dataset per tensor; keys are paths such as
//                         "model/attention/4.conv_q.weight" (dotted parameter
//                         names under a model), "optim/attention/<param>/exp_avg",
//                         "rng/data", "sampler/state"
//
// The file only knows names and tensors: modules and optimisers turn
// themselves into state dicts and back (STYLE.md, principle 13).
#pragma once

#include <functional>
#include <map>
#include <string>

#include "core/tensor.h"

namespace heed {

namespace h5 {
class File;
}

struct Checkpoint {
  std::string experiment;
  std::string run_id;  // the identity of the run that wrote it (its log has the same); empty from older heeds
  // The digest of its log's rows up to its step (RunLog::rows_digest), 16
  // hex digits; empty from older heeds, and when the run had no log to tell.
  std::string log_digest;
  std::map<std::string, std::string> config;
  std::map<std::string, int64_t> counters;
  std::map<std::string, Tensor> tensors;

  // Adds every entry of a state dict under prefix + "/" + name.
  void put(const std::string& prefix, const std::map<std::string, Tensor>& state);
  // The entries under prefix + "/", with the prefix removed.
  std::map<std::string, Tensor> get(const std::string& prefix) const;
  int64_t counter(const std::string& name) const;  // throws naming the missing counter
};

// Writes atomically: a temporary file beside path is written, flushed to disk
// (fsync) and renamed over path, so a crash mid-write never destroys the
// previous checkpoint. Through a symbolic link, the file it leads to is
// replaced; a directory, device, FIFO or socket at path is refused
// (files::replace_target).
void save_checkpoint(const std::string& path, const Checkpoint& ck);

// Reads a checkpoint; a missing, truncated or corrupt file, a file that is not
// a heed checkpoint, or one from another experiment is refused with an error
// that names the problem. Shapes are checked by whoever loads the pieces
// (Module::load_state_dict, Optimizer::load_state_dict).
// An empty expected_experiment accepts a checkpoint of any experiment.
Checkpoint load_checkpoint(const std::string& path, const std::string& expected_experiment);

// Reads every tensor under /tensors of an open checkpoint file and checks it
// against the CRC-32 stored with it (its crc32 attribute), then hands it to
// visit (if given). The one check that load_checkpoint and `heed inspect`
// share. Without a visitor, each tensor is read in blocks of a few MB, so a
// checkpoint of any size is checked in bounded memory. Throws heed::Error naming the file and the first bad tensor:
//   checkpoint 'runs/sine.ckpt.h5': tensor 'model/l1.weight' is corrupt (CRC mismatch): ...
// The file is said to be damaged only when HDF5 itself refused it (H5Error,
// data/h5.h); any other failure (memory for a tensor) is said as it is:
//   checkpoint 'runs/sine.ckpt.h5': tensor 'model/l1.weight' cannot be read: out of memory allocating ... bytes
using TensorVisitor = std::function<void(const std::string& key, const Tensor& t)>;
void verify_checkpoint_tensors(const h5::File& f, const TensorVisitor& visit = {});

}  // namespace heed
