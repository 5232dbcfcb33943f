// experiments/inspect.h: `heed inspect FILE.h5`, a readable summary of a run
// log (docs/log-format.md) or a checkpoint (docs/checkpoint-format.md): the
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

// `heed inspect FILE.h5 [--full]`: args are the words after "inspect".
int run_inspect(const std::vector<std::string>& args);

}  // namespace heed::experiments
