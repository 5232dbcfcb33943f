// data/checkpoint.cpp
#include "data/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "core/files.h"
#include "core/kernels.h"
#include "data/h5.h"

namespace heed {

namespace {
constexpr int64_t kFormat = 1;
// verify_checkpoint_tensors without a visitor reads tensors in blocks of this
// many bytes at most.
constexpr int64_t kCheckBlockBytes = int64_t{16} << 20;

// CRC-32 (IEEE 802.3, reflected, polynomial 0xEDB88320). HDF5 checksums its
// metadata but not raw data, so each tensor carries its own.
// crc32_update(crc, ...) continues a CRC over more bytes: crc32 of a whole is
// crc32_update over its pieces in order, from crc32_update's start, 0.
uint32_t crc32_update(uint32_t crc, const void* data, size_t n) {
  static uint32_t table[256] = {0};
  static bool init = [] {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    return true;
  }();
  (void)init;
  uint32_t c = crc ^ 0xFFFFFFFFu;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}
uint32_t crc32(const void* data, size_t n) { return crc32_update(0, data, n); }

uint32_t tensor_crc(const Tensor& t0) {
  Tensor t = kernel::contiguous(t0);
  return crc32(t.raw_data(), static_cast<size_t>(t.numel()) * dtype_size(t.dtype()));
}

// Whether path's data reached the disk (a file system without fsync for
// directories counts as done).
bool fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return directory;
  const bool ok = ::fsync(fd) == 0 || (directory && (errno == EINVAL || errno == EROFS));
  ::close(fd);
  return ok;
}
}  // namespace

void Checkpoint::put(const std::string& prefix, const std::map<std::string, Tensor>& state) {
  for (const auto& [k, t] : state) tensors[prefix + "/" + k] = t;
}

std::map<std::string, Tensor> Checkpoint::get(const std::string& prefix) const {
  std::map<std::string, Tensor> out;
  std::string p = prefix + "/";
  for (const auto& [k, t] : tensors)
    if (k.compare(0, p.size(), p) == 0) out.emplace(k.substr(p.size()), t);
  return out;
}

int64_t Checkpoint::counter(const std::string& name) const {
  auto it = counters.find(name);
  if (it == counters.end()) fail("checkpoint: counter '{}' is missing", name);
  return it->second;
}

namespace {
// Fault injection for the tests (tests/experiments/test_fault_matrix.cpp):
// with HEED_FAULT_KILL_IN_CHECKPOINT_WRITE=N in the environment, the N-th
// checkpoint this process writes dies by SIGKILL halfway through its
// temporary file, as a kill -9 at the worst moment would.
void fault_point_in_checkpoint_write(h5::File& f) {
  static const long n = [] {
    const char* v = std::getenv("HEED_FAULT_KILL_IN_CHECKPOINT_WRITE");
    return v ? std::atol(v) : 0L;
  }();
  static long count = 0;
  if (n > 0 && ++count == n) {
    f.flush();
    std::raise(SIGKILL);
  }
}
}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& ck) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string target = files::replace_target(path, "checkpoint");
  const std::string tmp = files::temporary_beside(target, ".tmp", "checkpoint");
  // What a failed write left, for its message.
  auto what_is_left = [&] {
    return fs::exists(target, ec) ? fmt::format("the previous checkpoint '{}' is as it was", target)
                                  : fmt::format("no checkpoint was written to '{}'", target);
  };
  try {
    h5::File f(tmp, h5::File::Mode::create);
    f.set_attr("/", "heed_checkpoint_format", kFormat);
    f.set_attr("/", "experiment", ck.experiment);
    if (!ck.run_id.empty()) f.set_attr("/", "run_id", ck.run_id);
    if (!ck.log_digest.empty()) f.set_attr("/", "log_digest", ck.log_digest);
    for (const auto& [k, v] : ck.config) f.set_attr("/", "config." + k, v);
    for (const auto& [k, v] : ck.counters) f.set_attr("/", "counter." + k, v);
    size_t written = 0;
    for (const auto& [k, t] : ck.tensors) {
      if (written++ == ck.tensors.size() / 2) fault_point_in_checkpoint_write(f);
      f.write_tensor("tensors/" + k, t);
      f.set_attr("tensors/" + k, "crc32", static_cast<int64_t>(tensor_crc(t)));
    }
    f.flush();
    if (!f.close()) {  // the metadata it writes last did not fit: never renamed over the previous checkpoint
      const std::string why = h5::system_reason();
      fail("HDF5: could not close '{}'{}{}", tmp, why.empty() ? "" : ": ", why);
    }
  } catch (const Error& e) {
    fs::remove(tmp, ec);  // the previous checkpoint at path is untouched
    fail("{}; {}", e.what(), what_is_left());
  }
  if (!fsync_path(tmp, false)) {  // an error only the write-back found: the previous checkpoint stays
    const std::string why = std::strerror(errno);
    fs::remove(tmp, ec);
    fail("checkpoint: could not write '{}': {}; {}", tmp, why, what_is_left());
  }
  files::keep_mode(tmp, target);
  fs::rename(tmp, target, ec);
  if (ec) fail("checkpoint: could not move '{}' to '{}': {}", tmp, target, ec.message());
  fs::path dir = fs::path(target).parent_path();
  fsync_path(dir.empty() ? "." : dir.string(), true);
}

namespace {
// HDF5 refuses a damaged structure in its own words ("could not open group
// tensors"); what the user needs to hear is that the file is damaged. Only
// what HDF5 itself refused (H5Error) says so: any other error met while
// reading (memory for a tensor that cannot be allocated, a dataset of text)
// is said as it is, naming the checkpoint (`what`: "", or " tensor 'k'"),
// never calling a good file damaged, which its owner might then delete.
[[noreturn]] void unreadable(const std::string& path, const std::string& what, const Error& e) {
  if (dynamic_cast<const H5Error*>(&e))
    fail("checkpoint '{}' is damaged: not a readable heed checkpoint ({})", path, e.what());
  fail("checkpoint '{}':{} cannot be read: {}", path, what, e.what());
}

// The file at path, opened for reading; refuses files that are not HDF5 or
// that HDF5 cannot open, naming them.
h5::File open_checkpoint(const std::string& path) {
  // No permission to read it: the operating system's reason, not "not HDF5".
  if (const std::string why = h5::open_problem(path); !why.empty())
    fail("cannot open checkpoint '{}': {}", path, why);
  try {
    return h5::File(path, h5::File::Mode::read);
  } catch (const H5Error&) {
    if (!h5::has_signature(path)) fail("'{}' is not a heed checkpoint (not an HDF5 file)", path);
    fail("checkpoint '{}' is damaged: not a readable heed checkpoint (truncated, or HDF5's structure is damaged)",
         path);
  }
}
}  // namespace

void verify_checkpoint_tensors(const h5::File& f, const TensorVisitor& visit) {
  const std::string& path = f.path();
  std::vector<std::string> keys;
  try {
    if (f.exists("tensors")) keys = f.list_datasets("tensors");
  } catch (const Error& e) {
    unreadable(path, "", e);
  }
  for (const std::string& k : keys) {
    const std::string object = "tensors/" + k;
    Tensor t;
    Shape shape;
    uint32_t data_crc = 0;
    std::optional<h5::Attr> crc;
    try {
      if (visit) {  // the tensor is wanted whole
        t = f.read_tensor(object);
        shape = t.shape();
        data_crc = tensor_crc(t);
      } else {  // only checked: in bounded memory, whatever its size
        shape = f.dataset_shape(object);
        f.read_in_blocks(object, kCheckBlockBytes, [&data_crc](const Tensor& b) {
          data_crc = crc32_update(data_crc, b.raw_data(), static_cast<size_t>(b.numel()) * dtype_size(b.dtype()));
        });
      }
      if (f.has_attr(object, "crc32")) crc = f.get_attr(object, "crc32");
    } catch (const Error& e) {
      unreadable(path, fmt::format(" tensor '{}'", k), e);
    }
    if (!crc) fail("checkpoint '{}': tensor '{}' has no checksum (not written by heed, or damaged)", path, k);
    const int64_t want =
        h5::attr_as<int64_t>(*crc, fmt::format("checkpoint '{}': tensor '{}': its crc32 attribute", path, k));
    const int64_t got = data_crc;
    if (got != want)
      fail("checkpoint '{}': tensor '{}' is corrupt (CRC mismatch): its data (shape {}) no longer matches the "
           "checksum stored with it (CRC-32 {:08x}, the data gives {:08x})",
           path, k, shape_str(shape), want, got);
    if (visit) visit(k, t);
  }
}

Checkpoint load_checkpoint(const std::string& path, const std::string& expected_experiment) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) fail("checkpoint '{}' does not exist", path);
  if (ec) fail("checkpoint '{}' cannot be read: {}", path, ec.message());
  if (fs::is_directory(st)) fail("checkpoint '{}' is a directory, expected a checkpoint file", path);
  h5::File f = open_checkpoint(path);
  std::map<std::string, h5::Attr> root;
  try {
    root = f.attrs("/");
  } catch (const Error& e) {
    unreadable(path, " its attributes", e);
  }
  if (!root.count("heed_checkpoint_format")) {
    if (root.count("heed_log_format"))
      fail("'{}' is a heed run log, not a heed checkpoint (a run's checkpoint is written beside its log, as "
           "<log name>.ckpt.h5 unless --checkpoint says otherwise)",
           path);
    fail("'{}' is not a heed checkpoint (an HDF5 file without the heed_checkpoint_format attribute)", path);
  }
  const int64_t format = h5::attr_as<int64_t>(root.at("heed_checkpoint_format"),
                                              fmt::format("checkpoint '{}': its heed_checkpoint_format attribute", path));
  if (format != kFormat)
    fail("checkpoint '{}' is in format {}; this heed reads format {} (docs/checkpoint-format.md){}", path, format,
         kFormat, format > kFormat ? ": it was written by a newer heed" : "");
  Checkpoint ck;
  if (!root.count("experiment")) fail("checkpoint '{}' has no experiment attribute", path);
  ck.experiment =
      h5::attr_as<std::string>(root.at("experiment"), fmt::format("checkpoint '{}': its experiment attribute", path));
  if (!expected_experiment.empty() && ck.experiment != expected_experiment)
    fail("checkpoint '{}' is from the '{}' experiment, expected '{}'", path, ck.experiment, expected_experiment);
  if (root.count("run_id"))
    ck.run_id = h5::attr_as<std::string>(root.at("run_id"), fmt::format("checkpoint '{}': its run_id attribute", path));
  if (root.count("log_digest"))
    ck.log_digest =
        h5::attr_as<std::string>(root.at("log_digest"), fmt::format("checkpoint '{}': its log_digest attribute", path));
  for (const auto& [name, value] : root) {
    if (name.rfind("config.", 0) == 0) ck.config[name.substr(7)] = h5::attr_str(value);
    if (name.rfind("counter.", 0) == 0)
      ck.counters[name.substr(8)] = h5::attr_as<int64_t>(value, fmt::format("checkpoint '{}': {}", path, name));
  }
  verify_checkpoint_tensors(f, [&ck](const std::string& k, const Tensor& t) { ck.tensors[k] = t; });
  return ck;
}

}  // namespace heed
