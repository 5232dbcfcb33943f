// experiments/inspect.h: `heed inspect FILE`, a readable summary of a run
// log (docs/log-format.md), a checkpoint (docs/checkpoint-format.md) or a
// safetensors file (heed export's): for a log or checkpoint, the
// run's metadata and configuration, each metric, each series, the fixed
// datasets and any groups of named parameters. It opens the file as a SWMR
// reader first, so it works on a log whose run is still going.
#pragma once

#include <string>
#include <vector>

namespace heed::experiments {

struct InspectOptions {
  bool full = false;  // print multi-line attributes (model summaries) in full
  // Read every numeric dataset's values too, so that a damaged one (a
  // flipped byte in a series' chunk index or checksummed data) is refused,
  // naming it; heed plot relies on it (h5py's SWMR reader retries a damaged
  // read with sleeps, for many minutes). A checkpoint's tensors are read
  // (and checked against their CRCs) in any case.
  bool read_values = true;
};

// The summary as text (the tests read it). A missing, non-HDF5, truncated or
// unreadable file throws heed::Error naming the path, and so does a dataset
// whose values cannot be read or a checkpoint with a tensor whose data fails
// its CRC (naming that dataset or tensor).
std::string inspect_file(const std::string& path, const InspectOptions& opt = {});

// A safetensors file (heed export's, or anyone's), from its header alone:
// its metadata, then each tensor's name, dtype as stored, shape and count,
// and the totals. A file whose header is not a valid safetensors header
// throws heed::Error naming it and what is wrong.
std::string inspect_safetensors(const std::string& path);

// Whether `heed inspect` reads path as a safetensors file: a regular file
// without HDF5's signature that is named *.safetensors or whose first bytes
// read as a safetensors header.
bool looks_like_safetensors(const std::string& path);

// `heed inspect FILE [--full]`: args are the words after "inspect".
int run_inspect(const std::vector<std::string>& args);

}  // namespace heed::experiments
