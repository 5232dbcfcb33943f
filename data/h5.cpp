// data/h5.cpp
#include "data/h5.h"

#include <hdf5.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

extern char** environ;

#include "core/error.h"
#include "core/kernels.h"

namespace heed::h5 {

namespace {
// Throws H5Error (data/h5.h): HDF5 itself refused.
template <class... Args>
[[noreturn]] void refused(fmt::format_string<Args...> f, Args&&... args) {
  throw H5Error(fmt::format(f, std::forward<Args>(args)...));
}
}  // namespace

void silence_errors() {
  static std::once_flag once;
  std::call_once(once, [] {
    // First of all, no cleanup by HDF5 at exit: heed closes every file it
    // opens, and a file HDF5 failed to close (its last flush hit a full disk)
    // stays open inside HDF5, whose exit cleanup then crashed on it: SIGSEGV
    // after heed had reported the error and chosen its exit status.
    H5dont_atexit();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  });
}

std::string system_reason() {
  // The file drivers record a failed read or write as "... errno = 28,
  // error message = 'No space left on device', ..." on the error stack.
  std::string reason;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
        const std::string d = e && e->desc ? e->desc : "";
        const std::string key = "error message = '";
        const size_t at = d.find(key);
        if (at == std::string::npos) return 0;
        const size_t from = at + key.size(), to = d.find('\'', from);
        *static_cast<std::string*>(out) = d.substr(from, to == std::string::npos ? std::string::npos : to - from);
        return 1;  // the innermost one is enough
      },
      &reason);
  return reason;
}

namespace {

// Closes an HDF5 handle on scope exit.
struct Handle {
  hid_t id;
  herr_t (*closer)(hid_t);
  Handle(hid_t i, herr_t (*c)(hid_t)) : id(i), closer(c) {}
  ~Handle() {
    if (id >= 0) closer(id);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  operator hid_t() const { return id; }
};

// ": No space left on device" when HDF5's last failure has a system reason.
std::string because() {
  const std::string r = system_reason();
  return r.empty() ? "" : ": " + r;
}
hid_t check(hid_t id, const std::string& what, const std::string& path) {
  if (id < 0) refused("HDF5: could not {} in '{}'{}", what, path, because());
  return id;
}
void check_ok(herr_t r, const std::string& what, const std::string& path) {
  if (r < 0) refused("HDF5: could not {} in '{}'{}", what, path, because());
}

hid_t h5_type(DType t) {
  switch (t) {
    case DType::f32: return H5T_NATIVE_FLOAT;
    case DType::f64: return H5T_NATIVE_DOUBLE;
    case DType::i64: return H5T_NATIVE_INT64;
  }
  return H5T_NATIVE_FLOAT;
}

hid_t link_props() {
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  return lcpl;
}

struct Visit {
  std::vector<std::string> datasets;
  std::string unreadable;  // the first object that could not be opened
};

// Soft and external links are not followed; an object that cannot be opened
// stops the walk (a damaged object header must not make a dataset vanish).
herr_t visit_cb(hid_t group, const char* name, const H5L_info_t* info, void* data) {
  auto* v = static_cast<Visit*>(data);
  if (info->type != H5L_TYPE_HARD) return 0;
  hid_t obj = H5Oopen(group, name, H5P_DEFAULT);
  if (obj < 0) {
    v->unreadable = name;
    return -1;
  }
  if (H5Iget_type(obj) == H5I_DATASET) v->datasets.push_back(name);
  H5Oclose(obj);
  return 0;
}

// Runs `h5clear -s --increment path` (no shell): -s clears the "open for
// writing" mark, --increment moves the recorded end of file past the data a
// SWMR writer appended (without it the last rows read as unreadable).
// False when the tool is missing or fails.
bool clear_status_flags(const std::string& path) {
  if (!has_signature(path)) return false;
  pid_t pid = 0;
  std::string tool = "h5clear", flag = "-s", inc = "--increment";
  char* argv[] = {tool.data(), flag.data(), inc.data(), const_cast<char*>(path.c_str()), nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  int rc = posix_spawnp(&pid, "h5clear", &fa, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return false;
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// A FIFO, device or socket: never an HDF5 file (HDF5 seeks), and opening a
// FIFO to read it would wait for a writer, for ever when there is none.
bool special_file(const std::string& path) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  return !ec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st) &&
         !std::filesystem::is_directory(st);
}

// True when path's superblock (version 2 or 3, at offset 0) carries a
// writer's "open for writing" mark and the file is as long as the end of
// file it records: a file its writer left open, not one cut short. Only such
// a file is worth reading through a cleared copy (read_any); clearing a
// truncated one would make its missing bytes read as zeros.
bool marked_open_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char sb[36] = {};
  if (!in.read(reinterpret_cast<char*>(sb), sizeof sb)) return false;
  if (std::memcmp(sb, "\x89HDF\r\n\x1a\n", 8) != 0 || sb[8] < 2 || sb[9] != 8) return false;
  if (sb[11] == 0) return false;  // file consistency flags: none set
  uint64_t eof = 0;
  for (int i = 7; i >= 0; --i) eof = eof << 8 | sb[28 + i];  // end-of-file address, little-endian
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return !ec && size >= eof;
}

// HDF5 locks a file it opens (this build of it, and h5py's: flock()): shared
// to read, for as long as the file is open (SWMR readers too), exclusive to
// write until a writer turns to SWMR. A writer's open fails on another
// program's lock, but only after it opened the file: H5Fcreate had already
// truncated it (O_TRUNC), so a reader left open on a log made a new run at
// its --out empty the log, then fail. So heed takes that lock itself before
// HDF5 opens a file to create it, and holds it in HDF5's place.
//
// HDF5_USE_FILE_LOCKING in the environment overrides a file access property
// list: "FALSE" or "0", no locks at all (heed takes none either); "TRUE",
// "1" or "BEST_EFFORT", HDF5 locks whatever heed asks (then heed only looks
// before HDF5 opens: its own lock would make HDF5's fail).
enum class EnvLocking { unset, off, on };
EnvLocking env_locking() {
  const char* v = std::getenv("HDF5_USE_FILE_LOCKING");
  if (!v) return EnvLocking::unset;
  const std::string s = v;
  if (s == "FALSE" || s == "0") return EnvLocking::off;
  if (s == "TRUE" || s == "1" || s == "BEST_EFFORT") return EnvLocking::on;
  return EnvLocking::unset;
}

// How long a writer waits for another program's HDF5 lock to go: a reader
// that polls a log (opens it, reads, closes it, again and again) holds it a
// few milliseconds at a time, and must not refuse a run that starts then.
constexpr auto kLockWait = std::chrono::seconds(2);

// Takes the exclusive lock on fd, waiting up to kLockWait while another
// program holds one: 0, or errno (EWOULDBLOCK: still held; another: the file
// system takes no locks, as HDF5 then does without).
int take_lock(int fd) {
  const auto until = std::chrono::steady_clock::now() + kLockWait;
  for (;;) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return 0;
    const int err = errno;
    if (err == EINTR) continue;
    if (err != EWOULDBLOCK || std::chrono::steady_clock::now() >= until) return err;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Whether another program holds an HDF5 lock on the file at path (an open
// refused for that is not a damaged file).
bool locked_elsewhere(const std::string& path) {
  if (env_locking() == EnvLocking::off) return false;  // HDF5 refuses nothing for a lock then
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // drops the lock if it was taken
  return held;
}

// The refusal of a file another program has open (its HDF5 lock held past
// kLockWait), for `what` ("cannot create HDF5 file 'x.h5'").
[[noreturn]] void in_use(const std::string& what) {
  fail("{}: it is open in another program, which holds HDF5's lock on it (a reader such as h5py, h5dump or heed "
       "inspect); close it and try again, or have the reader open it without the lock (HDF5_USE_FILE_LOCKING=FALSE "
       "in its environment, or h5py.File(..., locking=False)); the file is as it was",
       what);
}

}  // namespace

std::string open_problem(const std::string& path, bool for_writing) {
  // O_NONBLOCK: opening a FIFO that has no writer returns at once.
  const int fd = ::open(path.c_str(), (for_writing ? O_RDWR : O_RDONLY) | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    // A directory opens read-only, but not for writing (EISDIR): one answer.
    return std::strerror(errno);
  }
  struct stat st {};
  const bool dir = ::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
  ::close(fd);
  return dir ? std::strerror(EISDIR) : std::string();
}

bool has_signature(const std::string& path) {
  // Only a regular file: opening a FIFO to read waits for a writer, and a
  // directory opens as a stream whose end lies at 2^63 - 1: the loop below
  // then doubled its offset for ever.
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  // The superblock sits at 0, 512, 1024, 2048, ... (after an optional user block).
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  for (std::streamoff at = 0; at + 8 <= size; at = at == 0 ? 512 : at * 2) {
    char sig[8] = {};
    in.seekg(at);
    in.read(sig, 8);
    if (in.gcount() == 8 && std::memcmp(sig, "\x89HDF\r\n\x1a\n", 8) == 0) return true;
  }
  return false;
}

File::File(const std::string& path, Mode mode) : path_(path) {
  if (special_file(path))
    fail("'{}' is not a regular file (a FIFO, device or socket); expected an HDF5 file", path);
  if (mode != Mode::create) {
    // Refused by the operating system (no permission, a directory, a loop of
    // symbolic links): said in its words, not as "not an HDF5 file".
    const std::string why = open_problem(path, mode == Mode::append);
    if (!why.empty()) fail("cannot open '{}': {}", path, why);
  }
  silence_errors();
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  // The latest format is what SWMR needs; readers of heed files are 1.10+.
  H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  // A SWMR reader retries metadata that fails its checksum (a writer may be
  // mid-flush), sleeping 1, 2, 4, ... ns between tries: HDF5's default of 100
  // tries makes a damaged file hang the reader for ever. 30 tries wait about
  // a second in all, then report the damage.
  if (mode == Mode::read_swmr || mode == Mode::read_any) H5Pset_metadata_read_attempts(fapl, 30);
  switch (mode) {
    case Mode::read_any: {
      id_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl);
      if (id_ < 0) id_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl);
      if (id_ < 0 && marked_open_whole(path)) {
        // Still marked open for writing: read a copy with the mark cleared.
        namespace fs = std::filesystem;
        std::error_code ec;
        const fs::path copy = fs::temp_directory_path(ec) /
                              fmt::format("heed-read-{}-{}.h5", getpid(), fs::path(path).filename().string());
        if (!ec && fs::copy_file(path, copy, fs::copy_options::overwrite_existing, ec) && !ec) {
          copy_ = copy.string();
          if (clear_status_flags(copy_)) id_ = H5Fopen(copy_.c_str(), H5F_ACC_RDONLY, fapl);
          if (id_ < 0) close();
        }
      }
      break;
    }
    case Mode::create: {
      // The lock first, without truncating (see kLockWait). A file that
      // cannot be opened here is left to H5Fcreate, which says why.
      const EnvLocking env = env_locking();
      const int fd = env == EnvLocking::off ? -1 : ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
      if (fd >= 0) {
        const int err = take_lock(fd);
        if (err == EWOULDBLOCK) {
          ::close(fd);
          in_use(fmt::format("cannot create HDF5 file '{}'", path));
        }
        if (err == 0 && env == EnvLocking::unset) {
          lock_fd_ = fd;  // held in HDF5's place: HDF5 takes none of its own
          H5Pset_file_locking(fapl, false, true);
        } else {
          ::close(fd);  // HDF5 locks by itself (or the file system takes no locks)
        }
      }
      id_ = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
      break;
    }
    case Mode::read: id_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl); break;
    case Mode::read_swmr: id_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl); break;
    case Mode::append: {
      // Another program's lock (a reader) refuses the open: waited for as
      // create waits, then named as what it is, not as a damaged file.
      const auto until = std::chrono::steady_clock::now() + kLockWait;
      while ((id_ = H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl)) < 0 && locked_elsewhere(path)) {
        if (std::chrono::steady_clock::now() >= until) in_use(fmt::format("cannot open '{}' to write to it", path));
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      // A writer killed in SWMR mode leaves the superblock marked "open for
      // writing"; HDF5's own h5clear resets that mark (the data is intact).
      if (id_ < 0 && clear_status_flags(path)) id_ = H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl);
      break;
    }
  }
  if (id_ < 0) {
    unlock();
    if (mode == Mode::create) {
      const std::string why = system_reason();
      refused("cannot create HDF5 file '{}': {}", path, why.empty() ? "is the directory writable?" : why);
    }
    refused("cannot open '{}' as an HDF5 file (missing, not HDF5, truncated, or still open for writing; "
         "a file left by a killed writer may need `h5clear -s --increment`)",
         path);
  }
}

File::~File() { close(); }

File::File(File&& o) noexcept
    : path_(std::move(o.path_)), id_(o.id_), copy_(std::move(o.copy_)), lock_fd_(o.lock_fd_) {
  o.id_ = -1;
  o.copy_.clear();
  o.lock_fd_ = -1;
}
File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    close();
    path_ = std::move(o.path_);
    id_ = o.id_;
    copy_ = std::move(o.copy_);
    lock_fd_ = o.lock_fd_;
    o.id_ = -1;
    o.copy_.clear();
    o.lock_fd_ = -1;
  }
  return *this;
}

void File::unlock() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // closing the descriptor drops its lock
  lock_fd_ = -1;
}

void File::abandon() {
  id_ = -1;
  unlock();  // as a killed writer's goes
}

bool File::close() {
  const bool ok = id_ < 0 || H5Fclose(id_) >= 0;
  id_ = -1;
  unlock();
  if (!copy_.empty()) {
    std::error_code ec;
    std::filesystem::remove(copy_, ec);
    copy_.clear();
  }
  return ok;
}

bool File::exists(const std::string& object) const {
  if (object == "/" || object.empty()) return true;
  // Check each prefix: H5Lexists fails on a missing intermediate group.
  size_t pos = 0;
  std::string parent;
  while (true) {
    pos = object.find('/', pos + 1);
    std::string prefix = object.substr(0, pos);
    if (!prefix.empty() && prefix != "/") {
      htri_t r = H5Lexists(id_, prefix.c_str(), H5P_DEFAULT);
      if (r == 0) return false;
      if (r < 0) {
        // Below a dataset nothing exists; in a group, the group is damaged.
        if (!parent.empty()) {
          Handle p(H5Oopen(id_, parent.c_str(), H5P_DEFAULT), H5Oclose);
          if (p.id >= 0 && H5Iget_type(p) == H5I_DATASET) return false;
        }
        refused("HDF5: could not look up {} in '{}'", prefix, path_);
      }
      parent = prefix;
    }
    if (pos == std::string::npos) return true;
  }
}

std::vector<std::string> File::list_datasets(const std::string& group) const {
  Visit v;
  Handle g(check(H5Gopen2(id_, group.c_str(), H5P_DEFAULT), "open group " + group, path_), H5Gclose);
  if (H5Lvisit(g, H5_INDEX_NAME, H5_ITER_INC, visit_cb, &v) < 0)
    refused("HDF5: could not list group {} in '{}'{}", group, path_,
         v.unreadable.empty() ? std::string() : fmt::format(" (cannot open {})", v.unreadable));
  return v.datasets;
}

void File::write_tensor(const std::string& path, const Tensor& t0) {
  check_defined(t0, "h5 write_tensor");
  Tensor t = kernel::contiguous(t0);
  std::vector<hsize_t> dims(t.shape().begin(), t.shape().end());
  Handle space(t.dim() == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
               H5Sclose);
  Handle lcpl(link_props(), H5Pclose);
  Handle ds(check(H5Dcreate2(id_, path.c_str(), h5_type(t.dtype()), space, lcpl, H5P_DEFAULT, H5P_DEFAULT),
                  "create dataset " + path, path_),
            H5Dclose);
  if (t.numel() > 0)
    check_ok(H5Dwrite(ds, h5_type(t.dtype()), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw_data()), "write " + path, path_);
}

Shape File::dataset_shape(const std::string& path) const {
  if (!exists(path)) fail("'{}' has no dataset '{}'", path_, path);
  Handle ds(check(H5Dopen2(id_, path.c_str(), H5P_DEFAULT), "open dataset " + path, path_), H5Dclose);
  Handle space(H5Dget_space(ds), H5Sclose);
  int nd = H5Sget_simple_extent_ndims(space);
  if (nd < 0) refused("'{}': dataset '{}' has an unreadable shape", path_, path);
  std::vector<hsize_t> dims(static_cast<size_t>(nd));
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  return Shape(dims.begin(), dims.end());
}

bool File::is_numeric(const std::string& path) const {
  Handle ds(check(H5Dopen2(id_, path.c_str(), H5P_DEFAULT), "open dataset " + path, path_), H5Dclose);
  Handle ftype(H5Dget_type(ds), H5Tclose);
  const H5T_class_t cls = H5Tget_class(ftype);
  return cls == H5T_FLOAT || cls == H5T_INTEGER;
}

DType File::dataset_dtype(const std::string& path) const {
  Handle ds(check(H5Dopen2(id_, path.c_str(), H5P_DEFAULT), "open dataset " + path, path_), H5Dclose);
  Handle ftype(H5Dget_type(ds), H5Tclose);
  H5T_class_t cls = H5Tget_class(ftype);
  if (cls == H5T_FLOAT) return H5Tget_size(ftype) == 8 ? DType::f64 : DType::f32;
  if (cls == H5T_INTEGER) return DType::i64;
  fail("'{}': dataset '{}' is not numeric", path_, path);
}

Tensor File::read_block(const std::string& path, const std::vector<int64_t>& start,
                        const std::vector<int64_t>& count) const {
  const Shape shape = dataset_shape(path);
  const DType dt = dataset_dtype(path);
  if (start.size() != shape.size() || count.size() != shape.size())
    fail("'{}': dataset '{}' has {} dimensions, got a block of {} and {}", path_, path, shape.size(), start.size(),
         count.size());
  for (size_t d = 0; d < shape.size(); ++d)
    if (start[d] < 0 || count[d] < 0 || start[d] > shape[d] || count[d] > shape[d] - start[d])
      fail("'{}': dataset '{}' of shape {}: a block from {} of {} lies outside it", path_, path, shape_str(shape),
           shape_str(Shape(start.begin(), start.end())), shape_str(Shape(count.begin(), count.end())));
  Tensor t = Tensor::empty(Shape(count.begin(), count.end()), dt);
  if (t.numel() == 0) return t;
  Handle ds(check(H5Dopen2(id_, path.c_str(), H5P_DEFAULT), "open dataset " + path, path_), H5Dclose);
  if (shape.empty()) {  // a scalar: the whole of it
    check_ok(H5Dread(ds, h5_type(dt), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw_data()),
             "read dataset " + path + " (truncated or corrupt file?)", path_);
    return t;
  }
  std::vector<hsize_t> at(start.begin(), start.end()), n(count.begin(), count.end());
  Handle fspace(check(H5Dget_space(ds), "read the shape of " + path, path_), H5Sclose);
  check_ok(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, at.data(), nullptr, n.data(), nullptr),
           "select a block of " + path, path_);
  Handle mspace(check(H5Screate_simple(static_cast<int>(n.size()), n.data(), nullptr), "make a block's shape", path_),
                H5Sclose);
  check_ok(H5Dread(ds, h5_type(dt), mspace, fspace, H5P_DEFAULT, t.raw_data()),
           "read dataset " + path + " (truncated or corrupt file?)", path_);
  return t;
}

void File::read_in_blocks(const std::string& path, int64_t max_bytes,
                          const std::function<void(const Tensor& block)>& visit) const {
  const Shape shape = dataset_shape(path);
  const DType dt = dataset_dtype(path);
  const int64_t total = shape_numel(shape);
  if (total == 0) return;
  if (shape.empty()) {
    visit(read_tensor(path).reshape({1}));
    return;
  }
  const int64_t elements = std::max<int64_t>(1, max_bytes / static_cast<int64_t>(dtype_size(dt)));
  // The first dimension k whose trailing elements (those after it) fit in a
  // block: blocks are then runs along k of whole trailing slices, one index
  // of each dimension before k at a time.
  const size_t nd = shape.size();
  std::vector<int64_t> trailing(nd, 1);  // elements after dimension d
  for (size_t d = nd - 1; d-- > 0;) trailing[d] = trailing[d + 1] * shape[d + 1];
  size_t k = 0;
  while (trailing[k] > elements) ++k;
  const int64_t run = std::max<int64_t>(1, elements / trailing[k]);
  std::vector<int64_t> start(nd, 0), count(shape.begin(), shape.end());
  for (size_t d = 0; d < k; ++d) count[d] = 1;
  for (;;) {
    for (int64_t i = 0; i < shape[k]; i += run) {
      start[k] = i;
      count[k] = std::min(run, shape[k] - i);
      Tensor b = read_block(path, start, count);
      visit(b.reshape({b.numel()}));
    }
    // The next index of the dimensions before k, the last one fastest.
    size_t d = k;
    while (d > 0 && ++start[d - 1] == shape[d - 1]) start[--d] = 0;
    if (d == 0) return;
  }
}

Tensor File::read_tensor(const std::string& path) const {
  Shape shape = dataset_shape(path);
  Handle ds(check(H5Dopen2(id_, path.c_str(), H5P_DEFAULT), "open dataset " + path, path_), H5Dclose);
  Handle ftype(H5Dget_type(ds), H5Tclose);
  DType dt;
  H5T_class_t cls = H5Tget_class(ftype);
  if (cls == H5T_FLOAT) dt = H5Tget_size(ftype) == 8 ? DType::f64 : DType::f32;
  else if (cls == H5T_INTEGER) dt = DType::i64;
  else fail("'{}': dataset '{}' is not numeric", path_, path);
  Tensor t = Tensor::empty(shape, dt);
  if (t.numel() > 0)
    check_ok(H5Dread(ds, h5_type(dt), H5S_ALL, H5S_ALL, H5P_DEFAULT, t.raw_data()),
             "read dataset " + path + " (truncated or corrupt file?)", path_);
  return t;
}

void File::remove_attr(const std::string& object, const std::string& name) {
  Handle obj(check(H5Oopen(id_, object.c_str(), H5P_DEFAULT), "open " + object, path_), H5Oclose);
  if (H5Aexists(obj, name.c_str()) > 0) check_ok(H5Adelete(obj, name.c_str()), "remove attribute " + name, path_);
}

void File::set_attr(const std::string& object, const std::string& name, const Attr& value) {
  Handle obj(check(H5Oopen(id_, object.c_str(), H5P_DEFAULT), "open " + object, path_), H5Oclose);
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  if (auto* s = std::get_if<std::string>(&value)) {
    // Fixed-length UTF-8 text of exactly the string's bytes: NUL bytes
    // survive (a variable-length string is a C string, cut at the first NUL),
    // and the text sits in the object header under HDF5's checksum (variable-
    // length strings live in a global heap that has none: a flipped byte there
    // crashed HDF5). HDF5 has no zero-length type, so "" is one NUL byte marked
    // NUL-terminated. h5py reads these as bytes.
    Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
    check_ok(H5Tset_size(type, s->empty() ? 1 : s->size()), "size the text of attribute " + name, path_);
    H5Tset_strpad(type, s->empty() ? H5T_STR_NULLTERM : H5T_STR_NULLPAD);
    H5Tset_cset(type, H5T_CSET_UTF8);
    Handle a(check(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), "create attribute " + name,
                   path_),
             H5Aclose);
    const char nul = '\0';
    check_ok(H5Awrite(a, type, s->empty() ? &nul : s->data()), "write attribute " + name, path_);
  } else if (auto* i = std::get_if<int64_t>(&value)) {
    Handle a(check(H5Acreate2(obj, name.c_str(), H5T_NATIVE_INT64, space, H5P_DEFAULT, H5P_DEFAULT),
                   "create attribute " + name, path_),
             H5Aclose);
    check_ok(H5Awrite(a, H5T_NATIVE_INT64, i), "write attribute " + name, path_);
  } else {
    double d = std::get<double>(value);
    Handle a(check(H5Acreate2(obj, name.c_str(), H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, H5P_DEFAULT),
                   "create attribute " + name, path_),
             H5Aclose);
    check_ok(H5Awrite(a, H5T_NATIVE_DOUBLE, &d), "write attribute " + name, path_);
  }
}

bool File::has_attr(const std::string& object, const std::string& name) const {
  if (!exists(object)) return false;
  htri_t r = H5Aexists_by_name(id_, object.c_str(), name.c_str(), H5P_DEFAULT);
  if (r < 0) refused("HDF5: could not look up attribute {} of {} in '{}'", name, object, path_);
  return r > 0;
}

Attr File::get_attr(const std::string& object, const std::string& name) const {
  if (!has_attr(object, name)) fail("'{}': '{}' has no attribute '{}'", path_, object, name);
  Handle a(check(H5Aopen_by_name(id_, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT),
                 "open attribute " + name, path_),
           H5Aclose);
  Handle type(H5Aget_type(a), H5Tclose);
  {
    // heed reads single values; reading an array into one would overrun it.
    Handle space(H5Aget_space(a), H5Sclose);
    hssize_t n = H5Sget_simple_extent_npoints(space);
    if (n != 1) fail("'{}': attribute '{}' of '{}' holds {} values, expected one", path_, name, object, n);
  }
  switch (H5Tget_class(type)) {
    case H5T_STRING: {
      if (H5Tis_variable_str(type) > 0) {  // written by h5py, or by heed before fixed-length text
        Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
        H5Tset_size(mem, H5T_VARIABLE);
        // In the file's own character set: HDF5 converts no text between
        // ASCII (h5py's for a bytes value) and UTF-8.
        H5Tset_cset(mem, H5Tget_cset(type));
        char* p = nullptr;
        check_ok(H5Aread(a, mem, &p), "read attribute " + name, path_);
        std::string s = p ? p : "";
        Handle space(H5Aget_space(a), H5Sclose);
        H5Dvlen_reclaim(mem, space, H5P_DEFAULT, &p);
        return s;
      }
      // Every byte, NULs included, unless the type says NUL-terminated.
      size_t n = H5Tget_size(type);
      std::string s(n, '\0');
      check_ok(H5Aread(a, type, s.data()), "read attribute " + name, path_);
      if (H5Tget_strpad(type) == H5T_STR_NULLTERM) s.resize(std::min(s.find('\0'), n));
      return s;
    }
    case H5T_INTEGER: {
      int64_t v = 0;
      check_ok(H5Aread(a, H5T_NATIVE_INT64, &v), "read attribute " + name, path_);
      return v;
    }
    case H5T_FLOAT: {
      double v = 0;
      check_ok(H5Aread(a, H5T_NATIVE_DOUBLE, &v), "read attribute " + name, path_);
      return v;
    }
    default: fail("'{}': attribute '{}' of '{}' has an unsupported type", path_, name, object);
  }
}

std::map<std::string, Attr> File::attrs(const std::string& object) const {
  std::map<std::string, Attr> out;
  Handle obj(check(H5Oopen(id_, object.c_str(), H5P_DEFAULT), "open " + object, path_), H5Oclose);
  std::vector<std::string> names;
  hsize_t idx = 0;
  check_ok(H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx,
                       [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
                         static_cast<std::vector<std::string>*>(data)->push_back(name);
                         return 0;
                       },
                       &names),
           "list the attributes of " + object, path_);
  for (const auto& n : names) out.emplace(n, get_attr(object, n));
  return out;
}

void File::start_swmr_write() {
  check_ok(H5Fstart_swmr_write(id_), "start SWMR writing", path_);
  unlock();  // HDF5 drops its own lock here too: SWMR readers may open the file now
}

void File::flush() { check_ok(H5Fflush(id_, H5F_SCOPE_GLOBAL), "flush", path_); }

std::string attr_str(const Attr& a) {
  if (auto* s = std::get_if<std::string>(&a)) return *s;
  if (auto* i = std::get_if<int64_t>(&a)) return std::to_string(*i);
  return fmt::format("{}", std::get<double>(a));
}

std::string attr_kind(const Attr& a) {
  static const char* const kinds[] = {"text", "an integer", "a real number"};  // in Attr's order
  static_assert(std::variant_size_v<Attr> == std::size(kinds));
  return kinds[a.index()];
}

template <class T>
T attr_as(const Attr& a, const std::string& what) {
  if (const T* v = std::get_if<T>(&a)) return *v;
  std::string shown = attr_str(a);
  if (std::holds_alternative<std::string>(a)) shown = fmt::format("\"{}\"", shown.size() > 40 ? shown.substr(0, 40) + "..." : shown);
  fail("{} is {} ({}), expected {}", what, attr_kind(a), shown, attr_kind(Attr(T{})));
}
template std::string attr_as<std::string>(const Attr&, const std::string&);
template int64_t attr_as<int64_t>(const Attr&, const std::string&);
template double attr_as<double>(const Attr&, const std::string&);

}  // namespace heed::h5
