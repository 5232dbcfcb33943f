// data/run.cpp
#include "data/run.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <climits>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "core/dist.h"
#include "core/env.h"
#include "core/error.h"
#include "core/files.h"
#include "core/kernels.h"
#include "core/safetensors.h"
#include "core/quantize.h"
#include "core/random.h"
#include "data/h5.h"

// HEED_GIT_COMMIT: written at every build (cmake/git_commit.cmake).
#if __has_include("heed_git_commit.h")
#include "heed_git_commit.h"
#endif
#ifndef HEED_GIT_COMMIT
#define HEED_GIT_COMMIT "unknown"
#endif
#ifndef HEED_VERSION
#define HEED_VERSION "0.1.0"
#endif

namespace heed {

namespace fs = std::filesystem;

std::string heed_version() { return HEED_VERSION; }
std::string git_commit() { return HEED_GIT_COMMIT; }

std::string cpu_model() {
  // Virtual machines often say only "AMD EPYC": the family and model tell
  // the generation (AMD: family 25 is Zen 3 or, with AVX-512, Zen 4; 26 is Zen 5).
  std::ifstream in("/proc/cpuinfo");
  std::string line, name = "unknown", vendor;
  int family = -1, model = -1;
  bool avx512 = false;
  auto value = [](const std::string& l) {
    const auto p = l.find(':');
    return p == std::string::npos || p + 2 > l.size() ? std::string() : l.substr(p + 2);
  };
  while (std::getline(in, line)) {
    if (line.empty()) break;  // the first processor is enough
    if (line.rfind("model name", 0) == 0) name = value(line);
    else if (line.rfind("vendor_id", 0) == 0) vendor = value(line);
    else if (line.rfind("cpu family", 0) == 0) family = std::atoi(value(line).c_str());
    else if (line.rfind("model", 0) == 0 && line.find("name") == std::string::npos) model = std::atoi(value(line).c_str());
    else if (line.rfind("flags", 0) == 0) avx512 = line.find(" avx512f") != std::string::npos;
  }
  if (family < 0) return name;
  std::string gen;
  if (vendor == "AuthenticAMD") gen = family == 26 ? ", Zen 5" : family == 25 ? (avx512 ? ", Zen 4" : ", Zen 3") : "";
  return fmt::format("{} (family {} model {}{})", name, family, model, gen);
}

std::string default_checkpoint_path(const std::string& out) {
  bool h5 = out.size() > 3 && out.compare(out.size() - 3, 3, ".h5") == 0;
  return (h5 ? out.substr(0, out.size() - 3) : out) + ".ckpt.h5";
}

namespace {
// The kernel's pseudo-filesystem at path ("proc", "sysfs", ...), whose files
// are views of the kernel's state: nothing a program writes is kept there
// (creating a file fails, writing one of its files fails or changes the
// kernel). nullptr for any other filesystem, or when statfs fails.
const char* pseudo_filesystem(const std::string& path) {
  struct statfs sf {};
  if (::statfs(path.c_str(), &sf) != 0) return nullptr;
  struct Known {
    unsigned long magic;
    const char* name;
  };
  static const Known known[] = {{0x9fa0, "proc"},          {0x62656572, "sysfs"},     {0x27e0eb, "cgroup"},
                                {0x63677270, "cgroup2"},   {0x64626720, "debugfs"},   {0x74726163, "tracefs"},
                                {0x73636673, "securityfs"}, {0xcafe4a11, "bpf"},       {0xde5e81e4, "efivarfs"},
                                {0x6165676c, "pstore"},    {0x1cd1, "devpts"},        {0x62656570, "configfs"},
                                {0x65735543, "fusectl"}};
  for (const Known& k : known)
    if (static_cast<unsigned long>(sf.f_type) == k.magic) return k.name;
  return nullptr;
}

// A name of any length, as a message shows it: its start and end.
std::string shown(const std::string& s) {
  return s.size() <= 60 ? s : s.substr(0, 32) + "..." + s.substr(s.size() - 16);
}

// The longest suffix heed puts on an output's name for a file beside it:
// "<file>.lock" (OutputLock) and "<file>.tmp" (the file being replaced).
constexpr size_t kBesideSuffix = 5;

// Names too long for the filesystem, refused before any directory is made
// (else the directories were made, and the write failed after them with
// "File name too long" from HDF5, or a lock file named nothing heed wrote).
void check_name_lengths(const std::string& path, const std::string& in, const std::string& flag) {
  const std::string named = in + (flag.empty() ? "" : flag + " ") + "'" + shown(path) + "'";
  const fs::path p(path);
  // The filesystem's limit, read from the nearest directory that exists.
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  while (!fs::is_directory(dir, ec) && dir.has_parent_path() && dir.parent_path() != dir) dir = dir.parent_path();
  if (!fs::is_directory(dir, ec)) dir = ".";
  const long got = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  const size_t name_max = got > 0 ? static_cast<size_t>(got) : 255;
  for (const fs::path& part : p.parent_path())
    if (part.string().size() > name_max)
      throw UsageError(fmt::format("{}: the directory name '{}' has {} bytes; expected at most {}, the filesystem's "
                                   "limit", named, shown(part.string()), part.string().size(), name_max));
  const std::string file = p.filename().string();
  if (file.size() + kBesideSuffix > name_max)
    throw UsageError(fmt::format("{}: the file name '{}' has {} bytes; expected at most {} (the filesystem's limit "
                                 "of {}, less {} for the '.lock' file heed writes beside it)",
                                 named, shown(file), file.size(), name_max - kBesideSuffix, name_max, kBesideSuffix));
  if (path.size() + kBesideSuffix >= PATH_MAX)
    throw UsageError(fmt::format("{}: the path has {} bytes; expected fewer than {} (the system's limit of {}, less "
                                 "{} for the '.lock' file heed writes beside it)",
                                 named, path.size(), PATH_MAX - kBesideSuffix, PATH_MAX, kBesideSuffix));
}
}  // namespace

void check_output_path(const std::string& path, const std::string& command, const std::string& flag,
                       const std::string& example) {
  // "run copy: " and "--out 'x.h5'": messages read "run copy: --out 'x.h5' is ..." or "run copy: cannot write --out ...".
  const std::string in = command.empty() ? "" : command + ": ";
  const std::string target = (flag.empty() ? "" : flag + " ") + "'" + path + "'";
  const std::string named = in + target;
  fs::path p(path);
  std::error_code ec;
  if (!p.has_filename() || p.filename() == "." || p.filename() == "..")  // "out/" names a directory, not a file
    throw UsageError(fmt::format("{} is a directory; expected a file path like {}", named, example));
  // "<file>.lock" is the lock heed keeps beside a file it writes, and the
  // next run on that file removes it: output written there was lost.
  if (const std::string name = p.filename().string(); name.size() > 5 && name.ends_with(".lock"))
    throw UsageError(fmt::format("{} ends in '.lock', the name of the lock file heed keeps beside '{}' while it writes "
                                 "it (and removes after); expected another name",
                                 named, name.substr(0, name.size() - 5)));
  check_name_lengths(path, in, flag);
  const fs::file_status st = fs::status(p, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    throw UsageError(fmt::format("{}cannot write {}: {}", in, target, ec.message()));
  if (fs::is_directory(st))
    throw UsageError(fmt::format("{} is a directory; expected a file path like {}", named, example));
  // HDF5 would wait on a FIFO forever, and cannot write a device or socket.
  if (fs::exists(st) && !fs::is_regular_file(st))
    throw UsageError(fmt::format(
        "{} is not a regular file (a FIFO, device or socket); expected a file path like {}", named, example));
  // Refused before anything is made: a dangling symbolic link where a
  // directory goes, and a '..' after a directory that does not exist yet
  // ("nd/.." reaches no file until nd is made, so every check here would
  // pass it, and made, it names what they never saw: a file where a
  // directory goes, an existing file to replace; a refusal then left nd).
  {
    fs::path existing;  // the part of the path that exists, as given
    fs::path missing;   // the first directory that does not exist
    fs::path rest;      // the parts from there on
    bool back = false;  // a '..' among them
    for (const fs::path& part : p.parent_path()) {
      if (missing.empty()) {
        const fs::path next = existing / part;
        const bool there = fs::exists(fs::symlink_status(next, ec));
        // A link to nothing, where a directory goes: no directory can be made there.
        if (there && part != "." && part != ".." && !part.has_root_path() && !fs::exists(next, ec))
          throw UsageError(fmt::format("{} goes through '{}', a symbolic link to '{}', which does not exist; expected "
                                       "a path through directories that exist or can be made",
                                       named, next.string(), fs::read_symlink(next, ec).string()));
        if (part == "." || part == ".." || part.has_root_path() || there) {
          existing = next;
          continue;
        }
        missing = next;
      }
      rest /= part;
      back = back || part == "..";
    }
    if (back)
      throw UsageError(fmt::format("{} has '..' after '{}', a directory that does not exist; expected a path "
                                   "without '..' after a directory to be made (e.g. '{}')",
                                   named, missing.string(),
                                   (existing / (rest / p.filename()).lexically_normal()).string()));
  }
  // The directories to be made later: the nearest one that exists must be a
  // directory, and writable (probed with a file of a unique name, so that
  // no file of the user's is ever touched).
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  // A symbolic link to no file yet: the file is written where the link
  // leads (files::replace_target), and no directory is made for it there,
  // so that directory must exist (else every writer failed with a bare "No
  // such file or directory").
  if (fs::is_symlink(fs::symlink_status(p, ec)) && !fs::exists(st)) {
    std::string to;
    try {
      to = files::replace_target(path, "output");
    } catch (const Error& e) {
      throw UsageError(fmt::format("{}cannot write {}: {}", in, target, e.what()));
    }
    const fs::path to_dir = fs::path(to).has_parent_path() ? fs::path(to).parent_path() : fs::path(".");
    if (!fs::is_directory(to_dir, ec))
      throw UsageError(fmt::format("{} is a symbolic link to '{}', whose directory '{}' does not exist; expected a "
                                   "link to a file in an existing directory, or another path",
                                   named, to, to_dir.string()));
    dir = to_dir;
  }
  const fs::path wanted = dir;  // where the file goes
  while (!fs::exists(dir, ec) && dir.has_parent_path() && dir.parent_path() != dir) dir = dir.parent_path();
  if (!fs::exists(dir, ec)) dir = ".";
  if (!fs::is_directory(dir, ec))
    throw UsageError(fmt::format("{}cannot create the directory for {}: '{}' is a file, not a directory", in,
                                 target, dir.string()));
  std::string probe = (dir / ".heed-probe-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  const int err = fd < 0 ? errno : 0;
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
  }
  // What the probe did: create a file in dir, or (directories to be made
  // first) the first of them there.
  const fs::path below = wanted.lexically_relative(dir);
  const std::string tried =
      dir == wanted || below.empty()
          ? fmt::format("creating a file in '{}'", dir.string())
          : fmt::format("creating the directory '{}' in '{}'", (dir / *below.begin()).string(), dir.string());
  // /proc/version is a regular file, /proc a directory: without this, the
  // probe's failure read "No such file or directory (in '/proc')".
  if (const char* pseudo = pseudo_filesystem(fs::exists(st) ? path : dir.string()))
    throw UsageError(fmt::format("{}cannot write {}: it is on the kernel's {} filesystem ('{}'), whose files are the "
                                 "kernel's{}; expected a path on an ordinary filesystem",
                                 in, target, pseudo, dir.string(),
                                 err ? fmt::format(" ({} fails: {})", tried, std::strerror(err)) : std::string()));
  if (err) throw UsageError(fmt::format("{}cannot write {}: {} fails: {}", in, target, tried, std::strerror(err)));
}

std::vector<std::string> prepare_output_path(const std::string& path, const std::string& command,
                                             const std::string& flag, const std::string& example) {
  check_output_path(path, command, flag, example);
  const fs::path p(path);
  std::error_code ec;
  std::vector<fs::path> wanted;  // the directories missing, innermost first
  if (p.has_parent_path())
    for (fs::path d = p.parent_path(); !d.empty() && !fs::exists(d, ec); d = d.parent_path()) {
      wanted.push_back(d);
      if (!d.has_relative_path() || d.parent_path() == d) break;
    }
  // One at a time, outermost first; a failure removes those made before it.
  std::vector<std::string> made;
  for (auto d = wanted.rbegin(); d != wanted.rend(); ++d) {
    if (::mkdir(d->c_str(), 0777) == 0) {
      made.push_back(d->string());
      continue;
    }
    const int err = errno;
    if (err == EEXIST && fs::is_directory(*d, ec)) continue;  // made meanwhile
    remove_directories(made);
    const std::string in = command.empty() ? "" : command + ": ";
    fail("{}cannot create the directory '{}' for {}'{}': {}", in, d->string(), flag.empty() ? "" : flag + " ", path,
         std::strerror(err));
  }
  return made;
}

void remove_directories(const std::vector<std::string>& made) noexcept {
  for (auto d = made.rbegin(); d != made.rend(); ++d) ::rmdir(d->c_str());  // only while empty
}

std::string ExistingFile::describe() const {
  switch (kind) {
    case Kind::none: return "no file";
    case Kind::unreadable: return "a damaged HDF5 file";
    case Kind::not_hdf5:
      if (!safetensors) return "a file that is not heed's (neither HDF5 nor safetensors)";
      return experiment.empty() ? "a safetensors file heed did not write (its metadata names no heed_experiment)"
                                : fmt::format("a safetensors file heed wrote (of the '{}' experiment)",
                                              safetensors::printable(experiment));
    case Kind::hdf5: return "an HDF5 file that is not heed's";
    case Kind::log: return fmt::format("a heed run log of the '{}' experiment", safetensors::printable(experiment));
    case Kind::checkpoint:
      return fmt::format("a heed {}checkpoint of the '{}' experiment", quantized ? "quantized " : "",
                         safetensors::printable(experiment));
  }
  return "?";
}

ExistingFile existing_file(const std::string& path) {
  ExistingFile e;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec) || fs::file_size(path, ec) == 0) return e;
  if (!h5::has_signature(path)) {
    std::ifstream in(path, std::ios::binary);
    char head[9] = {};
    e.kind = ExistingFile::Kind::not_hdf5;
    e.safetensors = in.read(head, 9) && head[8] == '{';
    // Whose weights: heed export names the run's experiment in the header's
    // metadata; a file without it (a PyTorch user's own), or not a valid
    // safetensors file, is no one's to replace. Only the header is read.
    if (e.safetensors) {
      try {
        const std::map<std::string, std::string> meta = safetensors::metadata(path);
        if (auto it = meta.find("heed_experiment"); it != meta.end()) e.experiment = it->second;
      } catch (const Error&) {
      }
    }
    return e;
  }
  std::map<std::string, h5::Attr> root;
  try {
    const h5::File f(path, h5::File::Mode::read_any);
    root = f.attrs("/");
    e.quantized = f.exists("tensors/quantized");
  } catch (const Error&) {
    e.kind = ExistingFile::Kind::unreadable;
    return e;
  }
  e.kind = root.count("heed_checkpoint_format") ? ExistingFile::Kind::checkpoint
           : root.count("heed_log_format")      ? ExistingFile::Kind::log
                                                : ExistingFile::Kind::hdf5;
  if (e.kind != ExistingFile::Kind::hdf5)
    e.experiment = root.count("experiment") ? h5::attr_str(root.at("experiment")) : "?";
  return e;
}

void refuse_replacing(const std::string& command, const std::string& flag, const std::string& path,
                      const std::string& writes, const std::string& again,
                      const std::function<bool(const ExistingFile&)>& replaceable) {
  const ExistingFile e = existing_file(path);
  if (e.kind == ExistingFile::Kind::none || e.kind == ExistingFile::Kind::unreadable || replaceable(e)) return;
  throw UsageError(fmt::format("{}: {} '{}' is {}, which this would replace with {}; expected a new file (or {})",
                               command, flag, path, e.describe(), writes, again));
}

std::string format_seconds(double s) {
  if (!(s >= 60)) return fmt::format("{:.1f}s", s);
  // An ETA from a rate of almost nothing (a first step that took minutes of
  // a run of millions) would be a number of days no one can use.
  if (s >= 1000.0 * 86400.0) return "over 999 days";
  const auto t = static_cast<int64_t>(s);  // whole seconds
  const int64_t days = t / 86400, hours = t / 3600 % 24, minutes = t / 60 % 60, seconds = t % 60;
  if (days > 0) return fmt::format("{}d{:02d}h{:02d}m", days, hours, minutes);
  if (hours > 0) return fmt::format("{}h{:02d}m{:02d}s", hours, minutes, seconds);
  return fmt::format("{}m{:02d}s", minutes, seconds);
}

// ---- Ctrl-C ----

namespace {
// The first SIGINT or SIGTERM while a StopRequest lives (0: none); a signal
// handler may only touch lock-free atomics.
std::atomic<int> g_stop{0};
static_assert(std::atomic<int>::is_always_lock_free);

extern "C" void on_stop_signal(int sig) {
  if (g_stop.exchange(sig) != 0) {  // the second one: end now, as if no handler were installed
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

using files::same_file;

// A running Run holds a write lock on its log: an open file description
// (OFD) lock of the whole file, which HDF5's own flock() locks neither see
// nor disturb (HDF5 drops its lock once a writer turns to SWMR, after which
// a second writer could truncate the file under the first). The kernel
// releases it when the process ends, however it ends.
bool log_in_use(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO there: no wait for a writer
  if (fd < 0) return false;
  struct flock l {};
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;
  const bool busy = ::fcntl(fd, F_OFD_GETLK, &l) == 0 && l.l_type != F_UNLCK;
  ::close(fd);
  return busy;
}

// Takes the whole-file write lock on fd for this open file description (the
// kernel drops it when the process dies): true, or false (fd closed) when
// another holds it.
bool try_lock(int fd) {
  struct flock l {};
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;
  if (::fcntl(fd, F_OFD_SETLK, &l) == 0) return true;
  ::close(fd);
  return false;
}

// The lock on path for this run (the descriptor holding it), or -1 when
// another holds it. Creates an empty file when there is none (the log's
// writer replaces it at once).
int lock_log(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot open '{}' to lock it: {}", path, std::strerror(errno));
  return try_lock(fd) ? fd : -1;
}

// A running Run also holds a lock on its checkpoint, through a file beside
// it, "<checkpoint>.lock" (the checkpoint itself is replaced by a rename at
// every write, which a lock on it would not survive): an OFD write lock too,
// dropped by the kernel when the process ends however it ends, so a run
// killed with SIGKILL leaves no stale lock, only the file, which the next run
// takes over. The holder writes its process id and its log's path in it
// (for the message that refuses another run) and removes the file when done.
std::string lock_path_of(const std::string& checkpoint) { return checkpoint + ".lock"; }

struct LockHolder {
  bool held = false;
  long pid = 0;     // 0: not known
  std::string log;  // the holder's log, "" when not known
  std::string what;  // a command that is not a run ("heed quantize"), "" for a run
};

// The process holding an OFD lock on the file at path, or 0 when none is
// found. The lock itself cannot tell: an OFD lock belongs to an open file
// description, not to a process, and F_OFD_GETLK reports its l_pid as -1.
// So the open files of the processes this one may look into (a user's own)
// are searched: a descriptor of that file (/proc/<pid>/fd) whose
// /proc/<pid>/fdinfo lists an OFD lock. Only for a refusal's message.
long ofd_lock_owner(const std::string& path) {
  struct stat want {};
  if (::stat(path.c_str(), &want) != 0) return 0;
  const std::string inode = fmt::format(":{} ", static_cast<unsigned long>(want.st_ino));
  std::error_code ec;
  for (fs::directory_iterator p("/proc", ec), end; !ec && p != end; p.increment(ec)) {
    const std::string name = p->path().filename().string();
    long pid = 0;
    const auto [stop, err] = std::from_chars(name.data(), name.data() + name.size(), pid);
    if (err != std::errc() || stop != name.data() + name.size()) continue;
    std::error_code fd_ec;  // another user's process: not readable, skipped
    for (fs::directory_iterator f(p->path() / "fd", fd_ec), fend; !fd_ec && f != fend; f.increment(fd_ec)) {
      struct stat st {};
      if (::stat(f->path().c_str(), &st) != 0 || st.st_dev != want.st_dev || st.st_ino != want.st_ino) continue;
      std::ifstream info(p->path() / "fdinfo" / f->path().filename());
      for (std::string line; std::getline(info, line);)  // "lock:\t1: OFDLCK ADVISORY  WRITE -1 fe:00:1234 0 EOF"
        if (line.rfind("lock:", 0) == 0 && line.find("OFDLCK") != std::string::npos &&
            line.find(inode) != std::string::npos)
          return pid;
    }
  }
  return 0;
}

// Who holds the lock file at path (nobody when there is no such file). The
// file holds the holder's process id, its log (a run's; an empty line for
// another command) and, for a command that is not a run, what it is.
LockHolder lock_holder(const std::string& path) {
  LockHolder h;
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return h;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return h;
  struct flock l {};
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;
  h.held = ::fcntl(fd, F_OFD_GETLK, &l) == 0 && l.l_type != F_UNLCK;
  if (h.held) {
    char buf[4096];
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    std::vector<std::string> lines;
    std::istringstream text(std::string(buf, static_cast<size_t>(std::max<ssize_t>(n, 0))));
    for (std::string line; lines.size() < 3 && std::getline(text, line);) lines.push_back(line);
    if (!lines.empty()) {
      long pid = 0;
      const std::string& first = lines[0];
      const auto [end, err] = std::from_chars(first.data(), first.data() + first.size(), pid);
      if (err == std::errc() && end == first.data() + first.size() && pid > 0) h.pid = pid;
    }
    if (lines.size() > 1) h.log = lines[1];
    if (lines.size() > 2) h.what = lines[2];
  }
  ::close(fd);
  // Taken but not yet written (or written by a heed before the process id
  // was): the process is found by its lock.
  if (h.held && h.pid == 0) h.pid = ofd_lock_owner(path);
  return h;
}

// " (process 1234)" or " (another process)", for messages.
std::string holder_words(const LockHolder& h) {
  return h.pid > 0 ? fmt::format(" (process {})", h.pid) : std::string(" (another process)");
}

// Who writes a locked file, for messages: "a run that is still going
// (process 1234), whose log is '/home/me/a.h5'", or "heed quantize (process
// 1234)".
std::string writer_words(const LockHolder& h) {
  if (!h.what.empty()) return h.what + holder_words(h);
  return "a run that is still going" + holder_words(h) +
         (h.log.empty() ? std::string() : fmt::format(", whose log is '{}'", h.log));
}
// "that run" or "that command", for messages.
std::string writer_noun(const LockHolder& h) { return h.what.empty() ? "that run" : "that command"; }

// Takes the lock file at path for this process, writing `log` (and `what`,
// for a command that is not a run) in it: the descriptor holding it, or -1
// when another holds it (then *holder tells who). *created: the file was
// not there before.
int take_lock_file(const std::string& path, const std::string& log, bool* created, LockHolder* holder,
                   const std::string& what = "") {
  for (int attempt = 0;; ++attempt) {
    *created = false;
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd >= 0) {
      *created = true;
    } else if (errno == EEXIST) {
      fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
      if (fd < 0 && errno == ENOENT && attempt < 100) continue;  // its holder removed it meanwhile
    }
    if (fd < 0) fail("cannot open the lock file '{}': {}", path, std::strerror(errno));
    struct stat held {};
    if (::fstat(fd, &held) != 0 || !S_ISREG(held.st_mode)) {
      ::close(fd);
      fail("cannot use the lock file '{}': not a regular file", path);
    }
    if (!try_lock(fd)) {
      *holder = lock_holder(path);
      return -1;
    }
    // Locked; but the file may have been removed (by its previous holder,
    // done) between the open and the lock: the lock is then on a file
    // nobody else will open. Again, on the file at path.
    struct stat now {};
    if (::stat(path.c_str(), &now) != 0 || now.st_dev != held.st_dev || now.st_ino != held.st_ino) {
      ::close(fd);
      if (attempt < 100) continue;
      fail("cannot lock '{}': the file keeps being replaced", path);
    }
    const std::string text = fmt::format("{}\n{}\n{}", ::getpid(), log, what.empty() ? what : what + "\n");
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
      // The lock holds without the words: messages then say "another process".
    }
    return fd;
  }
}

// Who holds the lock of the checkpoint at path (through a symbolic link: of
// the file it leads to, as the writer locks it).
LockHolder checkpoint_holder(const std::string& path) {
  std::string target = path;
  try {
    target = files::replace_target(path, "checkpoint");
  } catch (const Error&) {  // refused later, for what it is
  }
  return lock_holder(lock_path_of(target));
}

// What is known of the run writing the log at path (locked: log_in_use): the
// holder of the checkpoint lock of its default checkpoint, when that run's
// log is this one; else nothing.
LockHolder log_writer(const std::string& path) {
  const LockHolder h = checkpoint_holder(default_checkpoint_path(path));
  if (h.held && !h.log.empty() && same_file(h.log, path)) return h;
  // A run with another --checkpoint: found by the lock on its log.
  LockHolder w;
  w.held = true;
  w.pid = ofd_lock_owner(path);
  return w;
}

// The log a checkpoint's run wrote (its config.out), or "" when the file is
// not a readable heed checkpoint.
std::string checkpoint_log(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec) || !h5::has_signature(path)) return "";
  try {
    h5::File f(path, h5::File::Mode::read);
    if (!f.has_attr("/", "heed_checkpoint_format") || !f.has_attr("/", "config.out")) return "";
    return h5::attr_str(f.get_attr("/", "config.out"));
  } catch (const Error&) {
    return "";
  }
}
}  // namespace

StopRequest::StopRequest() {
  g_stop = 0;
  previous_ = std::signal(SIGINT, on_stop_signal);
  previous_term_ = std::signal(SIGTERM, on_stop_signal);
  // A process started with a signal ignored (SIGINT in a background job of
  // a script, nohup) keeps ignoring it, as its starter asked.
  if (previous_ == SIG_IGN) std::signal(SIGINT, SIG_IGN);
  if (previous_term_ == SIG_IGN) std::signal(SIGTERM, SIG_IGN);
}

StopRequest::~StopRequest() {
  std::signal(SIGINT, previous_);
  std::signal(SIGTERM, previous_term_);
}

int pending_stop_signal() { return g_stop.load(); }
bool StopRequest::requested() const { return g_stop.load() != 0; }
int StopRequest::signal() const { return g_stop.load(); }

struct Run::StopGuard {
  StopRequest request;
};

// ---- Run ----

namespace {
// The name under which a Run tracks the default generator itself.
const std::string kDefaultGenerator = "rng/default";
}  // namespace

const std::vector<std::string>& bundled_experiments() {
  static const std::vector<std::string> names = {"attend",  "charlm", "compression", "copy",      "crossattn",
                                                 "scaling", "shapes", "sine",        "timeseries"};
  return names;
}

namespace {
// A program's own experiment name, checked before the Run takes it.
std::string own_experiment_name(std::string name) {
  if (name.empty())
    fail("heed::Run: the experiment name is empty; expected the program's name (e.g. \"mine\"), which its log and "
         "checkpoints record");
  const std::vector<std::string>& bundled = bundled_experiments();
  if (std::find(bundled.begin(), bundled.end(), name) != bundled.end())
    fail("heed::Run: the experiment name '{}' is one of heed's bundled experiments ({}), whose logs and checkpoints "
         "heed plot, inspect, export, sample and quantize read as theirs; expected a name of the program's own "
         "(e.g. \"my_{}\")",
         name, fmt::join(bundled, ", "), name);
  return name;
}
}  // namespace

Run::Run(std::string experiment, std::string summary, RunOptions defaults)
    : Run(own_experiment_name(std::move(experiment)), std::move(summary), std::move(defaults), Bundled{}) {}

Run::Run(std::string experiment, std::string summary, RunOptions defaults, Bundled)
    : experiment_(std::move(experiment)),
      defaults_(std::move(defaults)),
      args_("run " + experiment_, std::move(summary)),
      program_given_(!defaults_.program_.empty()) {
  if (defaults_.program_.empty()) defaults_.program_ = "heed run " + experiment_;
  out_ = defaults_.out_;
  checkpoint_every_ = defaults_.checkpoint_every_;
  threads_ = defaults_.threads_;
  precision_ = defaults_.precision_;
  steps_ = defaults_.steps_;
  // Declared in parse(), for every run; a program may still give its own words.
  if (!defaults_.init_from_)
    args_.withhold("init-from", "does not apply: this program starts no model from given weights");
  // Dropout and anything else drawing from the default generator.
  track(kDefaultGenerator, default_generator());
}

Run::~Run() { release_log(); }

OutputLock::OutputLock(const std::string& path, const std::string& command, const std::string& option) {
  lock_path_ = lock_path_of(files::replace_target(path, command.c_str()));
  LockHolder holder;
  fd_ = take_lock_file(lock_path_, "", &created_, &holder, "heed " + command);
  if (fd_ < 0)
    fail("{}: {} '{}' is being written by {}; expected another {}, or {} to end (its lock: '{}')", command, option,
         path, writer_words(holder), option, writer_noun(holder), lock_path_);
}

OutputLock::~OutputLock() {
  if (fd_ < 0) return;
  if (created_ || written_) ::unlink(lock_path_.c_str());  // while still held, as a Run removes its own
  ::close(fd_);
}

void Run::release_log() {
  if (log_lock_ >= 0) ::close(log_lock_);
  log_lock_ = -1;
  if (checkpoint_lock_ >= 0) {
    // Removed while still held (a run that opens it meanwhile finds it gone
    // once it has the lock, and makes a new one); a lock file that was there
    // before a refused run stays as it was.
    if (begun_ || checkpoint_lock_created_) ::unlink(checkpoint_lock_path_.c_str());
    ::close(checkpoint_lock_);
  }
  checkpoint_lock_ = -1;
}

void Run::lock_checkpoint() {
  if (!dist::is_main() || checkpoint_lock_ >= 0) return;
  const std::string path = lock_path_of(files::replace_target(checkpoint_, "checkpoint"));
  std::error_code ec;
  LockHolder holder;
  bool created = false;
  const int fd = take_lock_file(path, fs::absolute(out_, ec).string(), &created, &holder);
  if (fd < 0)
    fail("{}: {} '{}' is being written by {}; expected another --checkpoint, or {} to end (its lock: '{}')",
         args_.command(), args_.given("checkpoint") ? "--checkpoint" : "the checkpoint", checkpoint_,
         writer_words(holder), writer_noun(holder), path);
  checkpoint_lock_ = fd;
  checkpoint_lock_path_ = path;
  checkpoint_lock_created_ = created;
}

// A new run's identity: 128 random bits in hex, from the system's entropy
// (never from the run's seeded generators, whose draws it must not move).
std::string new_run_id() {
  std::random_device rd;
  std::string id;
  for (int i = 0; i < 4; ++i) id += fmt::format("{:08x}", static_cast<uint32_t>(rd()));
  return id;
}

namespace {
std::string quote_word(const std::string& word, bool force) {
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_@%+=:,./-", c) != nullptr;
  });
  if (plain && !force) return word;
  std::string q = "'";
  for (char c : word) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
}  // namespace

std::string shell_quote(const std::string& word) { return quote_word(word, false); }

std::string shell_command(const std::vector<std::string>& words) {
  std::string cmd;
  for (const auto& w : words) {
    // A first word with '=' would be read as a variable's assignment.
    const bool assignment = cmd.empty() && w.find('=') != std::string::npos;
    if (!cmd.empty()) cmd += ' ';
    cmd += quote_word(w, assignment);
  }
  return cmd;
}

namespace {
void write_provenance(RunLog& log, const std::string& cmd, const std::string& run_id) {
  std::time_t now = std::time(nullptr);
  char iso[32];
  std::strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  log.set_attr("heed_version", heed_version());
  log.set_attr("git_commit", git_commit());
  log.set_attr("command_line", cmd);
  log.set_attr("start_time", std::string(iso));
  if (!run_id.empty()) log.set_attr("run_id", run_id);
}
}  // namespace

void log_provenance(RunLog& log, const std::vector<std::string>& command_line, const std::string& run_id) {
  write_provenance(log, shell_command(command_line), run_id);
}

void log_machine(RunLog& log, int64_t threads) {
  log.set_attr("threads", threads);
  log.set_attr("processes", static_cast<int64_t>(dist::size()));
  log.set_attr("cpu", cpu_model());
  log.set_attr("backends", heed::backend_info());
}

void Run::before_parse(const std::string& call, const char* parse_did) const {
  // Called after parse(), such a call would change nothing, without a word.
  if (parse_called_) fail("Run::{}: called after parse(), which {}; expected it before parse()", call, parse_did);
}

void Run::may_change_on_resume(const std::string& option) {
  // The resume's options are checked in parse(), and --help listed them.
  before_parse(fmt::format("may_change_on_resume('{}')", option), "has checked a resume's options");
  changeable_.insert(option);
}
void Run::resolved_default(const std::string& option, const std::string& placeholder) {
  before_parse(fmt::format("resolved_default('{}', '{}')", option, placeholder),
               "has restored a resume's options in place of the placeholders");
  placeholders_[option] = placeholder;
}

namespace {
// Why the heed log open in f cannot be reopened to continue its run, found
// by reading what RunLog::resume reads (every root attribute, every
// metric's rows, every series' steps and shape): what HDF5 refused (a
// damaged or truncated file), or a dataset that is not what a log holds.
// "" when it can be, or when f holds no heed log at all (which the caller
// says as such). Reads only: a damaged log stays as it was.
std::string log_damage(const h5::File& f) {
  try {
    if (!f.attrs("/").count("heed_log_format")) return "";
    for (const std::string& p : f.list_datasets("/")) {
      if (p.rfind("metrics/", 0) == 0) {
        const Shape s = f.dataset_shape(p);
        if (s.size() != 2 || s[1] != 3 || !f.is_numeric(p) || f.dataset_dtype(p) != DType::f64)
          return fmt::format("its metric '{}' is not float64 rows of step, value and seconds (its shape: {})",
                             p.substr(8), shape_str(s));
        f.read_tensor(p);
      } else if (p.rfind("series/", 0) == 0 && p.size() > 14 && p.compare(p.size() - 7, 7, "/values") == 0) {
        const std::string steps = p.substr(0, p.size() - 7) + "/step";
        if (f.dataset_shape(p).empty() || !f.exists(steps) || f.dataset_shape(steps).size() != 1 ||
            !f.is_numeric(steps))
          return fmt::format("its series '{}' has no steps a log holds", p.substr(7, p.size() - 14));
        f.read_tensor(steps);
      }
    }
  } catch (const H5Error& e) {
    return e.what();
  }
  return "";
}

// A log's digest as a checkpoint records it (log_digest): 16 hex digits.
std::string digest_text(uint64_t digest) { return fmt::format("{:016x}", digest); }

// The way on from a checkpoint at step `at` whose log cannot take its rows.
std::string new_log_way(int64_t at) {
  return fmt::format("to go on from the checkpoint, give --out NEW.h5: a new log, which holds the steps after {}", at);
}

// The refusal of a damaged log (`damage`: what HDF5 refused) for a run
// resumed at step `at`.
std::string damaged_log(const std::string& command, const std::string& log, const std::string& damage, int64_t at) {
  return fmt::format("{}: the log '{}' is damaged ({}); continue the run in a new log with --out NEW.h5, which holds "
                     "the steps after {} (the damaged log stays as it is)",
                     command, log, damage, at);
}

// The run_id of the log heed can read at path, and reopen to continue its
// run ("" from heeds before it); nothing when there is no such log, when it
// is damaged (log_damage), when its rows end before `step` (cut back since
// by an older checkpoint's resume: not one to go on in), or when `digest`
// (a checkpoint's log_digest; "": not known) is not the digest of its rows
// up to `step` (RunLog::rows_digest, with `redo`): they come from another
// resume of the run, which that checkpoint's resume refuses to continue.
std::optional<std::string> readable_log_run(const std::string& path, int64_t step, const std::string& digest = "",
                                            const std::set<std::string>& redo = {}) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  try {
    h5::File f(path, h5::File::Mode::read_any);
    if (!f.has_attr("/", "heed_log_format") || !RunLog::gap_before(f, step).empty() || !log_damage(f).empty())
      return std::nullopt;
    if (!digest.empty() && digest_text(RunLog::rows_digest(f, step, redo)) != digest) return std::nullopt;
    return f.has_attr("/", "run_id") ? h5::attr_str(f.get_attr("/", "run_id")) : std::string();
  } catch (const Error&) {
    return std::nullopt;
  }
}

// Why the file at path is not the readable log of the run run_id (a log
// truncated or overwritten in place while its run went on), or "".
std::string not_the_log(const std::string& path, const std::string& run_id) {
  try {
    h5::File f(path, h5::File::Mode::read_any);
    if (!f.has_attr("/", "heed_log_format")) return "it is no heed run log any more";
    if (const std::string damage = log_damage(f); !damage.empty()) return damage;
    if (!run_id.empty() && (!f.has_attr("/", "run_id") || h5::attr_str(f.get_attr("/", "run_id")) != run_id))
      return "it is another run's log now";
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// An unfinished run's checkpoint: its step, below its run's length, and
// its run_id ("" from heeds before it).
struct Unfinished {
  int64_t at = -1, length = -1;  // -1: none
  std::string run_id;
};
// The unfinished run whose checkpoint of `experiment` is at path; at -1 when
// there is none there (no file, another experiment's, a finished run's,
// quantized, unreadable, or one whose length is not known). Reads its
// attributes only.
Unfinished unfinished_run(const std::string& path, const std::string& experiment) {
  const ExistingFile e = existing_file(path);
  if (e.kind != ExistingFile::Kind::checkpoint || e.experiment != experiment || e.quantized) return {};
  try {
    const h5::File f(path, h5::File::Mode::read_any);
    const std::map<std::string, h5::Attr> root = f.attrs("/");
    auto integer = [&root](const std::string& name) -> int64_t {
      const auto it = root.find(name);
      if (it == root.end()) return -1;
      if (const auto* i = std::get_if<int64_t>(&it->second)) return *i;
      // A length among the options (a checkpoint from before counter.steps).
      int64_t n = -1;
      const std::string text = h5::attr_str(it->second);
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
      return ec == std::errc() && end == text.data() + text.size() ? n : -1;
    };
    const int64_t at = integer("counter.step");
    const int64_t length = root.count("counter.steps") ? integer("counter.steps") : integer("config.steps");
    if (at >= 0 && length > at)
      return {at, length, root.count("run_id") ? h5::attr_str(root.at("run_id")) : std::string()};
  } catch (const Error&) {
  }
  return {};
}

// The checkpoint of the unfinished run whose log of `experiment` is at path
// (the one the log's config.checkpoint names, or the default one beside it
// when that is empty, whose run_id is the log's), and that run; at -1 when
// the log's run is not unfinished (no such log or checkpoint, another run's
// checkpoint, a finished run's). Reads attributes only.
std::pair<std::string, Unfinished> unfinished_log(const std::string& path, const std::string& experiment) {
  const ExistingFile e = existing_file(path);
  if (e.kind != ExistingFile::Kind::log || e.experiment != experiment) return {};
  try {
    const h5::File f(path, h5::File::Mode::read_any);
    const std::map<std::string, h5::Attr> root = f.attrs("/");
    auto text = [&root](const std::string& name) {
      const auto it = root.find(name);
      return it == root.end() ? std::string() : h5::attr_str(it->second);
    };
    std::string checkpoint = text("config.checkpoint");
    if (checkpoint.empty()) checkpoint = default_checkpoint_path(path);
    const Unfinished run = unfinished_run(checkpoint, experiment);
    if (run.at >= 0 && run.run_id == text("run_id")) return {checkpoint, run};
  } catch (const Error&) {
  }
  return {};
}

// A file's device and inode ({0, 0}: no file there).
std::pair<uint64_t, uint64_t> file_identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {0, 0};
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

// parse_precision's aliases as one name; a name it does not know as it is
// (refused later, naming it).
std::string canonical_precision(const std::string& name) {
  try {
    return precision_name(parse_precision(name));
  } catch (const Error&) {
    return name;
  }
}

}  // namespace

bool Run::parse(int argc, char** argv) {
  std::vector<std::string> line(argv, argv + argc);
  std::vector<std::string> args(line.begin() + (line.empty() ? 0 : 1), line.end());
  // RunOptions::program, when set, says how the program is invoked better
  // than argv[0] does (a subcommand, "mytool train": argv[0] is "mytool",
  // or "train" when the tool passes its subcommand's arguments on).
  if (program_given_) return parse(args);
  if (!line.empty()) defaults_.program_ = line[0];
  return parse(args, line);
}

bool Run::parse(const std::vector<std::string>& argv, std::vector<std::string> command_line) {
  // Its options would be declared again ("option --steps is declared twice").
  if (parse_called_) fail("Run::parse: called twice; a run parses its command line once");
  parse_called_ = true;
  // Ctrl-C and SIGTERM from here on ask the run to stop: loading a
  // checkpoint, the program's own start (its data, its model) and begin()
  // (which may be cutting a resumed log back) go on to the end, and the run
  // stops at its first next(), as it would at the end of a step. Before,
  // a signal killed the process with its default action.
  ctrl_c_ = std::make_unique<StopGuard>();
  // Under mpirun, this process is one of a data-parallel job (core/dist.h):
  // rank 0 prints, logs and checkpoints; the others print only errors.
  dist::init();
  if (dist::size() > 1 && !dist::is_main() && !std::freopen("/dev/null", "w", stdout))
    fail("{}: rank {} could not silence its standard output", args_.command(), dist::rank());
  // The HEED_* variables, before any file is touched: read at their first
  // use, a bad one (HEED_CPU_ISA=bogus) stopped the run after begin() had
  // replaced the log of the run before. (`heed` checks them before its
  // commands too; a program of one's own has only this.)
  if (const std::string bad = env::problem(); !bad.empty())
    throw UsageError(fmt::format("{}: {} (heed's README.md, \"Environment variables\")", args_.command(), bad));
  if (const std::string note = env::unknown_note(); !note.empty() && dist::is_main())
    fmt::print(stderr, "{}: note: {}\n", args_.command(), note);
  if (defaults_.steps_ > 0) args_.integer("steps", &steps_, "training steps (may be raised on --resume to train longer)", 1);
  args_.path("out", &out_, "HDF5 log file")
      .path("checkpoint", &checkpoint_, "checkpoint file (default: the log's name with .ckpt.h5; on --resume: that file)")
      .integer("checkpoint-every", &checkpoint_every_, "write a checkpoint every N steps (0: only at the end and when stopped)", 0)
      .path("resume", &resume_, resume_help())
      .flag("restart", &restart_,
            "start a new run even over the checkpoint or the log of an unfinished one (stopped or killed before its "
            "last step), replacing them; without it, such a new run is refused (--resume continues it)")
      .integer("stop-after", &stop_after_, "stop after step N with a checkpoint, as Ctrl-C does (0: never)", 0)
      .integer("threads", &threads_, "threads for every backend (results do not depend on it)", 1, 1024)
      .choice("precision", &precision_, {"f32", "bf16"},
              "bf16: matrix products (attention's included) with bfloat16 operands and float32 accumulation, "
              "everything else (weights, optimiser, checkpoints) float32; needs a CPU with AVX512-BF16",
              {{"float32", "f32"}, {"bfloat16", "bf16"}})  // read (and recorded, compared on resume) as f32, bf16
      .path("init-from", &init_from_,
            "start the model from the weights in this .safetensors file (heed export writes one; so do "
            "Module::save and PyTorch); for a run that trains one model");
  args_.set_program(defaults_.program_);
  args_.defer_default_check();  // a resume restores them: checked below for a new run
  if (!args_.parse(argv)) return false;
  if (!resuming()) args_.check_defaults();
  // The program's name as RunOptions::program gives it is shell text of the
  // program's own ("mytool train"): as written; every other word quoted.
  command_line_ = command_line.empty() ? defaults_.program_ + (argv.empty() ? "" : " " + shell_command(argv))
                                       : shell_command(command_line);
  if (out_.empty()) throw UsageError(fmt::format("{}: --out expects a log file path", args_.command()));
  if (resuming() && args_.given("restart"))
    throw UsageError(fmt::format("{}: --restart starts a run over; --resume continues one (give one of them)",
                                 args_.command()));
  if (resuming() && args_.given("init-from"))
    throw UsageError(fmt::format("{}: --init-from starts a new run from given weights; --resume continues one "
                                 "(give one of them)",
                                 args_.command()));
  // Another experiment's export, refused before the program reads its data
  // (the model it trains is checked when the run begins: init_model).
  if (!init_from_.empty()) check_init_from(nullptr);
  // An input file is recorded by its absolute path, so that a resume (and
  // heed sample or quantize of the checkpoint) finds it from any directory.
  for (const std::string& k : input_options_)
    if (args_.given(k) && !args_.value(k).empty())
      args_.assign(k, fs::absolute(args_.value(k)).lexically_normal().string());
  if (resuming()) {
    if (same_file(resume_, out_)) {
      // One file given twice: a checkpoint there makes --out the mistake.
      if (args_.given("out") && existing_file(resume_).kind == ExistingFile::Kind::checkpoint)
        throw UsageError(fmt::format("{}: --out '{}' is the checkpoint --resume continues; expected the run's log (or "
                                     "no --out: the log the checkpoint names)",
                                     args_.command(), out_));
      throw UsageError(fmt::format("{}: --resume '{}' is the run's log; expected its checkpoint (e.g. {})",
                                   args_.command(), resume_, default_checkpoint_path(out_)));
    }
    resume_ck_ = std::make_unique<Checkpoint>(load_checkpoint(resume_, experiment_));
    // heed quantize's output (docs/checkpoint-format.md) holds dequantized
    // weights and no optimiser state: said so, not as a list of its keys.
    if (const auto q = resume_ck_->get("quantized"); !q.empty()) {
      std::set<std::string> methods;
      for (const auto& [key, t] : q)
        if ((key == "meta" || (key.size() > 5 && key.compare(key.size() - 5, 5, "/meta") == 0)) && t.numel() == 6 &&
            t.dtype() == DType::i64) {
          const std::vector<int64_t> m = t.to_vector<int64_t>();
          const bool known = m[0] >= 0 && m[0] < static_cast<int64_t>(quant::method_names().size());
          methods.insert(known ? fmt::format("{} {} bits", quant::method_name(static_cast<quant::Method>(m[0])), m[1])
                               : std::string("an unknown method"));
        }
      fail("{}: checkpoint '{}' is a quantized checkpoint ({}; heed quantize wrote it: its weights are the dequantized "
           "ones and it holds no optimiser state); expected the training checkpoint it was made from",
           args_.command(), resume_,
           methods.empty() ? std::string("tensors under quantized/") : fmt::format("{}", fmt::join(methods, ", ")));
    }
    // First: a program checks its options against the process count (a
    // batch that does not divide), and the options come from the checkpoint.
    const Checkpoint& ck = *resume_ck_;
    const int64_t procs = ck.counters.count("processes") ? ck.counters.at("processes") : 1;
    if (procs != dist::size())
      throw UsageError(fmt::format("{}: checkpoint '{}' was written by {} process{}; this job has {} (resume it {})",
                                   args_.command(), resume_, procs, procs == 1 ? "" : "es", dist::size(),
                                   procs == 1 ? std::string("without mpirun")
                                              : fmt::format("with mpirun -np {}", procs)));
    run_id_ = resume_ck_->run_id;
    restore_config();
    // Before the program checks its own options against --steps (charlm's
    // warm-up): a --steps short of the checkpoint is this. (A program that
    // works out its length after parse(), set_steps(), is checked in begin().)
    if (defaults_.steps_ > 0) check_resumed_step(ck.counter("step"));
  }
  check_paths();
  if (resuming()) check_resumed_log();
  heed::set_num_threads(static_cast<int>(threads_));
  const Precision p = parse_precision(precision_);  // one of the choices (Args::choice)
  if (p == Precision::bf16 && !bf16_unsupported_reason().empty()) {
    // A run resumes in the precision it began with: not "use float32".
    if (resuming())
      throw UsageError(fmt::format("{}: the run of checkpoint '{}' has --precision bf16, which it resumes with: {}; "
                                   "resume it where bf16 runs, or start a float32 run from its weights (heed export "
                                   "{}, then --init-from)",
                                   args_.command(), resume_, bf16_unsupported_reason(false), resume_));
    throw UsageError(fmt::format("{}: --precision bf16: {}", args_.command(), bf16_unsupported_reason()));
  }
  heed::set_precision(p);
  parsed_ = true;
  return true;
}

// Options that may differ between a run and its continuation (--out too: a
// log that moved, which check_resumed_log makes sure is this run's), and
// options a resume never restores; the rest of the configuration is the
// checkpoint's.
const std::set<std::string> kResumeMayChange = {"threads", "checkpoint", "checkpoint-every", "steps", "out"};
const std::set<std::string> kNeverRestored = {"resume", "stop-after", "init-from", "restart"};

std::string Run::resume_help() const {
  // The program's own options a resume may change (declared before parse(),
  // as they must be), named beside the run's.
  std::vector<std::string> own;
  for (const std::string& k : changeable_)
    if (args_.has(k) && !kResumeMayChange.count(k)) own.push_back("--" + k);
  return fmt::format("continue the run saved in this checkpoint, appending to its log; its configuration comes back "
                     "with it, and only the run's length{}, --threads, --stop-after, where and how often it "
                     "checkpoints, {}where its log is now (--out, for a log that moved){} may change",
                     defaults_.steps_ > 0 ? " (--steps)" : "", own.empty() ? "and " : "",
                     own.empty() ? std::string() : fmt::format(", and {}", fmt::join(own, ", ")));
}

void Run::restore_config() {
  const std::set<std::string>& never = kNeverRestored;
  std::set<std::string> changeable = kResumeMayChange;
  changeable.insert(changeable_.begin(), changeable_.end());
  std::set<std::string> listed;  // for the message: what a resume of this program may give
  for (const std::string& k : changeable)
    if (args_.has(k)) listed.insert(k);
  listed.insert("stop-after");
  std::map<std::string, std::string> now;
  for (const auto& [k, v] : args_.values()) now[k] = v;
  for (const auto& [k, v] : resume_ck_->config) {
    if (never.count(k)) continue;
    if (!args_.has(k))
      fail("{}: checkpoint '{}' has option --{} {}, which this program does not know (written by another version?)",
           args_.command(), resume_, k, v);
    if (args_.given(k)) {
      // An input given again names the file the run read if it is the same
      // file, or if the one recorded cannot be found from here (a relative
      // path of a run begun elsewhere, or a tree that moved): what the file
      // holds is the experiment's to check (charlm's corpus fingerprint).
      std::error_code ec;
      if (is_input(k) && (same_file(now[k], v) || !fs::exists(v, ec))) continue;
      // A placeholder stands for the value the run worked out when it began
      // (the command line it began with, repeated): restored below, as when
      // the option is left out.
      const auto placeholder = placeholders_.find(k);
      if (placeholder != placeholders_.end() && now[k] == placeholder->second) {
        args_.forget_given(k);
      } else {
        if (!changeable.count(k) && now[k] != (k == "precision" ? canonical_precision(v) : v))
          throw UsageError(fmt::format("{}: --{} {} contradicts the checkpoint's {} (a resumed run keeps its "
                                       "configuration; only --{} may change)",
                                       args_.command(), k, now[k], v, fmt::join(listed, ", --")));
        continue;
      }
    }
    if (k == "checkpoint") continue;  // the resumed file, unless --checkpoint says otherwise
    try {
      args_.assign(k, v);
    } catch (const Error& e) {
      fail("{}: checkpoint '{}' holds a bad configuration: {}", args_.command(), resume_, e.what());
    }
  }
  if (!args_.given("checkpoint")) checkpoint_ = resume_;
  const int64_t at = resume_ck_->counters.count("step") ? resume_ck_->counter("step") : 0;
  if (stop_after_ > 0 && stop_after_ <= at)
    throw UsageError(fmt::format("{}: --stop-after {} is not after step {}, where checkpoint '{}' resumes; expected "
                                 "a later step (or 0: never)",
                                 args_.command(), stop_after_, at, resume_));
  // The log path is kept as it was given, relative to where the run started.
  // Run from elsewhere (or moved with its checkpoint), a log written beside
  // its checkpoint under its default name is found there again.
  std::error_code ec;
  if (!args_.given("out") && !fs::exists(out_, ec)) {
    const auto saved = resume_ck_->config.find("checkpoint");
    const std::string was = saved == resume_ck_->config.end() || saved->second.empty() ? default_checkpoint_path(out_)
                                                                                       : saved->second;
    const fs::path beside = fs::path(resume_).parent_path() / fs::path(out_).filename();
    if (fs::path(was).filename() == fs::path(resume_).filename() &&
        fs::path(default_checkpoint_path(out_)).filename() == fs::path(was).filename() && fs::exists(beside, ec))
      out_ = beside.string();
  }
}

void Run::check_paths() {
  if (checkpoint_.empty()) checkpoint_ = default_checkpoint_path(out_);
  if (same_file(checkpoint_, out_))
    throw UsageError(fmt::format("{}: --checkpoint '{}' is the log --out '{}'; they must be two files",
                                 args_.command(), checkpoint_, out_));
  if (!dist::is_main()) return;  // rank 0 writes both
  // Another process's run: its log (or the log its checkpoint belongs to) is
  // locked, or its checkpoint's lock file is.
  if (log_in_use(out_))
    fail("{}: the log '{}' is being written by a run that is still going{}; expected another --out, or that run to "
         "end",
         args_.command(), out_, holder_words(log_writer(out_)));
  if (const LockHolder h = checkpoint_holder(out_); h.held)
    fail("{}: --out '{}' is {}; expected another --out", args_.command(), out_,
         h.what.empty() ? "the checkpoint of " + writer_words(h) : "being written by " + writer_words(h));
  const std::string owner = checkpoint_log(checkpoint_);
  if (!owner.empty() && !same_file(owner, out_) && log_in_use(owner))
    fail("{}: --checkpoint '{}' is the checkpoint of the run writing '{}', which is still going{}; expected another "
         "--checkpoint",
         args_.command(), checkpoint_, owner, holder_words(log_writer(owner)));
  if (const LockHolder h = checkpoint_holder(checkpoint_); h.held)
    fail("{}: {} '{}' is being written by {}; expected another --checkpoint, or {} to end", args_.command(),
         args_.given("checkpoint") ? "--checkpoint" : "the checkpoint", checkpoint_, writer_words(h), writer_noun(h));
  if (!same_file(checkpoint_, out_) && log_in_use(checkpoint_))
    fail("{}: --checkpoint '{}' is the log of a run that is still going{}; expected another --checkpoint",
         args_.command(), checkpoint_, holder_words(log_writer(checkpoint_)));
  if (!resuming()) check_output_path(out_, args_.command(), "--out");
  check_output_path(checkpoint_, args_.command(), "--checkpoint");  // a device or FIFO refused before the log is begun
  files::replace_target(checkpoint_, "checkpoint");
  // Never over an input, nor over a file that is not what this run writes
  // there (a run's own earlier log or checkpoint is: running again replaces
  // them).
  std::vector<std::string> inputs = input_options_;
  inputs.push_back("init-from");
  for (const auto& [option, value] : args_.values()) {
    if (value.empty() || std::find(inputs.begin(), inputs.end(), option) == inputs.end()) continue;
    for (const auto& [flag, path] : {std::pair<std::string, std::string>{"out", out_}, {"checkpoint", checkpoint_}})
      if (same_file(path, value))
        throw UsageError(fmt::format("{}: --{} '{}' is the file --{} reads; expected another file", args_.command(),
                                     flag, path, option));
  }
  // A run's own earlier files are this experiment's log and checkpoint.
  const std::string again = fmt::format("a {{}} of a '{}' run to replace", experiment_);
  auto own = [this](ExistingFile::Kind kind) {
    return [this, kind](const ExistingFile& e) { return e.kind == kind && e.experiment == experiment_; };
  };
  if (!resuming())
    refuse_replacing(args_.command(), "--out", out_, "a log", fmt::format(fmt::runtime(again), "log"),
                     own(ExistingFile::Kind::log));
  if (!(resuming() && same_file(checkpoint_, resume_)))
    refuse_replacing(args_.command(), "--checkpoint", checkpoint_, "a checkpoint",
                     fmt::format(fmt::runtime(again), "checkpoint"), own(ExistingFile::Kind::checkpoint));
  // A new run where a run of this experiment stopped or was killed before
  // its end would replace its checkpoint (at its first one; its log at
  // once): the steps trained lost. Continued with --resume, or started over
  // when asked to.
  // So would one whose --out is the log of such a run (its checkpoint
  // elsewhere, still there), whose rows would be lost: its checkpoint then
  // resumes into another run's log, or into a new one.
  if (restart_) return;
  if (resuming()) {
    // A resume writes its checkpoints to --checkpoint: not over another
    // unfinished run's (which the new run's check below refuses too).
    if (const Unfinished run = unfinished_run(checkpoint_, experiment_);
        run.at >= 0 && run.run_id != run_id_ && !same_file(checkpoint_, resume_))
      throw UsageError(fmt::format(
          "{}: --checkpoint '{}' holds another unfinished run, at step {} of {}, which this resumed run's checkpoints "
          "would replace; expected another --checkpoint (that run goes on with {} --resume {})",
          args_.command(), checkpoint_, run.at, run.length, defaults_.program_, shell_quote(checkpoint_)));
    return;
  }
  // `holds`: the file, and how it is the unfinished run's; `whose`: its
  // checkpoint, when that is another file.
  auto unfinished = [this](const std::string& holds, const Unfinished& run, const std::string& checkpoint,
                           const std::string& whose) {
    return UsageError(fmt::format(
        "{}: {} an unfinished run, at step {} of {}{}, which this new run would replace; expected --resume to "
        "continue it ({} --resume {}), or --restart to start it over",
        args_.command(), holds, run.at, run.length, whose, defaults_.program_, shell_quote(checkpoint)));
  };
  if (const Unfinished run = unfinished_run(checkpoint_, experiment_); run.at >= 0)
    throw unfinished(fmt::format("{} '{}' holds", args_.given("checkpoint") ? "--checkpoint" : "the checkpoint",
                                 checkpoint_),
                     run, checkpoint_, "");
  if (const auto [checkpoint, run] = unfinished_log(out_, experiment_); run.at >= 0)
    throw unfinished(fmt::format("--out '{}' is the log of", out_), run, checkpoint,
                     fmt::format(" (its checkpoint '{}')", checkpoint));
}

void Run::reads_file(const std::string& option) {
  before_parse(fmt::format("reads_file('{}')", option),
               "has checked --out and --checkpoint against the files read and recorded them");
  input_options_.push_back(option);
}
bool Run::is_input(const std::string& option) const {
  return std::find(input_options_.begin(), input_options_.end(), option) != input_options_.end();
}

void Run::check_resumed_log() {
  if (!dist::is_main()) return;
  std::error_code ec;
  const int64_t at = resume_ck_->counters.count("step") ? resume_ck_->counter("step") : 0;
  const std::string new_log_hint =
      fmt::format("or --out NEW.h5 to continue in a new log, which holds the steps after {}", at);
  const std::string go_on = new_log_way(at);
  if (!fs::exists(out_, ec)) {
    if (!args_.given("out"))
      fail("{}: the log '{}' of the run in '{}' is missing; give --out if it moved, {}", args_.command(), out_,
           resume_, new_log_hint);
    // A checkpoint outlives its log (deleted, lost in a crash, damaged): the
    // run goes on in a new one. Not while its log is still there and
    // readable: a missing --out is then a mistyped path to where it moved.
    // (A log there of another run, which replaced it, is not its log; nor
    // is one whose rows up to the checkpoint's step another resume of the
    // run wrote. Which rows a resume leaves out, the program says later
    // (owed_work): a log that holds more rows than the checkpoint's digest
    // is checked again then, in check_log_rows.)
    const auto own = resume_ck_->config.find("out");
    if (own != resume_ck_->config.end() &&
        readable_log_run(own->second, at, resume_ck_->log_digest) == resume_ck_->run_id)
      refuse_other_log(own->second);
    check_output_path(out_, args_.command(), "--out");
    new_log_ = true;
    return;
  }
  std::optional<h5::File> opened;
  try {
    opened.emplace(out_, h5::File::Mode::read_any);  // the append that follows clears a killed writer's mark
  } catch (const Error& e) {
    fail("{}; to go on from checkpoint '{}', give --out NEW.h5: a new log, which holds the steps after {}", e.what(),
         resume_, at);
  }
  h5::File& f = *opened;
  // Opened, but not to be reopened for the run (a damaged object header,
  // metric or series): said before anything reads it further, with the way on.
  if (const std::string damage = log_damage(f); !damage.empty()) fail("{}", damaged_log(args_.command(), out_, damage, at));
  auto text = [&](const char* name) {
    if (!f.has_attr("/", name)) return std::string();
    h5::Attr a = f.get_attr("/", name);
    return std::holds_alternative<std::string>(a) ? std::get<std::string>(a) : std::string();
  };
  if (!f.has_attr("/", "heed_log_format")) fail("{}: '{}' is not a heed run log", args_.command(), out_);
  const std::string exp = text("experiment");
  if (exp != experiment_)
    fail("{}: the log '{}' is of experiment '{}', not '{}'", args_.command(), out_, exp.empty() ? "?" : exp,
         experiment_);
  // The log must be this run's: a later run at the same --out replaces the
  // log at once but the checkpoint only at its own first one, so a run
  // killed (or diverged) before that leaves the old run's checkpoint beside
  // its own log. Both name the run that wrote them (run_id; none from
  // heeds before it); the configuration the log began with must also be
  // the checkpoint's, but for what a resume may change and where the files
  // are.
  const std::string log_id = text("run_id");
  if (log_id != resume_ck_->run_id)
    fail("{}: the log '{}' is another run's than checkpoint '{}' (the log's run began {} with: {}); a later run at the "
         "same --out replaced the log; {}",
         args_.command(), out_, resume_, text("start_time"), text("command_line"), go_on);
  // Its rows must reach the checkpoint's step (an older checkpoint resumed
  // since cut them back): else the steps between would be missing.
  if (const std::string gap = RunLog::gap_before(f, at); !gap.empty())
    fail("{}: the log '{}' cannot continue from checkpoint '{}' at step {}: {}; {}", args_.command(), out_, resume_, at,
         gap, go_on);
  if (!log_id.empty()) return;  // the same run, named by both
  for (const auto& [k, v] : resume_ck_->config) {
    if (kResumeMayChange.count(k) || kNeverRestored.count(k) || changeable_.count(k)) continue;
    // An option newer than the log (its run began under an older heed; the
    // checkpoint was rewritten since) has nothing to differ from.
    if (!f.has_attr("/", ("config." + k).c_str())) continue;
    const std::string logged = text(("config." + k).c_str());
    if (logged != v)
      fail("{}: the log '{}' is not the run of checkpoint '{}': it began with --{} {}, the checkpoint has {}; {}",
           args_.command(), out_, resume_, k, logged.empty() ? "(none)" : logged, v, go_on);
  }
}

void Run::refuse_other_log(const std::string& own) const {
  fail("{}: the log '{}' is missing, and the run's log is still at '{}' (leave --out out, or give where it moved)",
       args_.command(), out_, own);
}

void Run::check_log_rows() const {
  if (!dist::is_main() || resume_ck_->log_digest.empty()) return;  // rank 0 writes the log; an older checkpoint
  const Checkpoint& ck = *resume_ck_;
  const std::set<std::string> redo = owed_datasets();
  if (new_log_) {
    // The run's own log, missing from --out: readable_log_run in parse()
    // counted the rows of owed work at the checkpoint's step, which a
    // resume leaves out.
    const auto own = ck.config.find("out");
    if (!redo.empty() && own != ck.config.end() && readable_log_run(own->second, step_, ck.log_digest, redo) == ck.run_id)
      refuse_other_log(own->second);
    return;
  }
  // The log's rows up to the checkpoint's step must be the ones the
  // checkpoint was written with. An older checkpoint of the run resumed
  // since cuts the log back to its step and goes on; its rows past that step
  // are another branch of the run (another --lr, say; every row's seconds),
  // which the log would mix with this one's.
  std::string digest;
  try {
    digest = digest_text(RunLog::rows_digest(h5::File(out_, h5::File::Mode::read_any), step_, redo));
  } catch (const H5Error& e) {
    fail("{}", damaged_log(args_.command(), out_, e.what(), step_));
  }
  if (digest != ck.log_digest)
    fail("{}: the log '{}' cannot continue from checkpoint '{}' at step {}: its rows up to step {} come from another "
         "resume of the run, not the one the checkpoint was written in (an older checkpoint resumed since cut the log "
         "back and went on past step {}); {}",
         args_.command(), out_, resume_, step_, step_, step_, new_log_way(step_));
}

std::set<std::string> Run::owed_datasets() const {
  std::set<std::string> redo;
  for (const auto& [pending, datasets] : owed_)
    if (const auto it = counters_.find(pending); it != counters_.end() && *it->second != 0)
      redo.insert(datasets.begin(), datasets.end());
  return redo;
}

void Run::set_steps(int64_t total) {
  if (begun_) fail("Run::set_steps: the run has begun");
  if (total < 0) fail("Run::set_steps: expected a step count >= 0, got {}", total);
  steps_ = total;
}

namespace {
// Whether the checkpoint key `key` lies under the tracked name `name`
// ("model/fc.weight" under "model"; "modelx" is not).
bool under(const std::string& key, const std::string& name) {
  return key.size() > name.size() && key.compare(0, name.size(), name) == 0 && key[name.size()] == '/';
}

// What registered `name`, for a message: heed's own default generator, or the program.
std::string tracked_by(const std::string& name) {
  return name == kDefaultGenerator ? "tracked by heed::Run itself (the default generator, which dropout draws from)"
                                   : "already tracked";
}
}  // namespace

void Run::check_name(const std::string& name, bool tensor) const {
  if (begun_) fail("Run::track: '{}' registered after begin()", shown_name(name));
  // Every name is a path in the checkpoint (tensors/<name>, or an attribute
  // counter.<name>): one HDF5 would store as another name resumes as
  // "missing [g//x], unexpected [g/x]", the run lost.
  if (const std::string problem = hdf5_name_problem(name); !problem.empty())
    fail("Run::track: name '{}' {}; expected parts joined by single '/', none of them empty or '.' (e.g. 'model', "
         "'rng/data')",
         shown_name(name), problem);
  // The counters heed writes itself.
  if (name == "step" || (!tensor && (name == "processes" || name == "steps")))
    fail("Run::track: '{}' is the name of a counter heed::Run keeps itself; expected another name", name);
  // A data-parallel run keeps each process's own state under ranks/<r>/.
  if (tensor && (name == "ranks" || name.starts_with("ranks/")))
    fail("Run::track: '{}' is under 'ranks/', where heed::Run keeps each process's state in a data-parallel run; "
         "expected another name",
         name);
  std::vector<std::string> taken;  // every name tracked so far, counters too
  for (const Entry& e : entries_) taken.push_back(e.name);
  for (const auto& [n, c] : constants_) taken.push_back(n);
  for (const auto& [n, p] : counters_) taken.push_back(n);
  for (const std::string& other : taken)
    if (other == name)
      fail("Run::track: '{}' is registered twice{}", name,
           name == kDefaultGenerator ? "; heed::Run tracks the default generator as 'rng/default' itself" : "");
  if (!tensor) return;  // a counter is an attribute: no other key lies under it
  // A module's or optimiser's state lies under its name ("model/fc.weight"),
  // and HDF5 cannot keep a tensor and a group of the same path: a name under
  // another's, or over it, would overwrite its state or be read back as part
  // of it.
  for (const Entry& e : entries_) {
    if (under(name, e.name))
      fail("Run::track: '{}' lies under '{}', {}, whose checkpoint keys are '{}/...'; expected a name outside it",
           name, e.name, tracked_by(e.name), e.name);
    if (under(e.name, name))
      fail("Run::track: '{}' would hold '{}', {}, among its checkpoint keys '{}/...'; expected a name not above it",
           name, e.name, tracked_by(e.name), name);
  }
  for (const auto& [other, value] : constants_)
    if (under(name, other) || under(other, name))
      fail("Run::track: '{}' and '{}', already tracked, would share a path in the checkpoint; expected a name that is "
           "neither under nor above another",
           name, other);
}

void Run::add_entry(const std::string& name, bool prefix, std::function<Tensor()> save,
                    std::function<void(const Tensor&)> load) {
  check_name(name, true);
  Entry e;
  e.name = name;
  e.prefix = prefix;
  e.save = std::move(save);
  e.load = std::move(load);
  entries_.push_back(std::move(e));
}

void Run::track(const std::string& name, Stateful& s) {
  check_name(name, true);
  // One object under two names would be saved twice and restored twice.
  for (const Entry& other : entries_)
    if (other.object == &s) fail("Run::track: '{}' is already tracked as '{}'", name, other.name);
  Entry e;
  e.object = &s;
  e.name = name;
  e.prefix = true;
  e.save_dict = [&s] { return s.state_dict(); };
  e.load_dict = [&s](const std::map<std::string, Tensor>& m) { s.load_state_dict(m); };
  entries_.push_back(std::move(e));
}

void Run::track(const std::string& name, int64_t& counter, bool required) {
  check_name(name, false);
  counters_[name] = &counter;
  if (!required) optional_counters_.insert(name);
}

void Run::track(const std::string& name, double& value) {
  add_entry(name, false, [&value] { return Tensor::from_f64({value}, {1}); },
            [&value, name](const Tensor& t) {
              if (t.shape() != Shape{1} || t.dtype() != DType::f64)
                fail("'{}' is {} {}, expected float64 [1]", name, dtype_name(t.dtype()), shape_str(t.shape()));
              value = t.to_vector<double>()[0];
            });
}

void Run::track_constant(const std::string& name, const Tensor& value, bool required, const std::string& input) {
  check_name(name, true);
  if (!input.empty() && !is_input(input))
    fail("Run::track_constant('{}'): --{} is not an option declared with reads_file", name, input);
  constants_[name] = value;
  if (!required) optional_constants_.insert(name);
  if (!input.empty()) constant_inputs_[name] = input;
}

void Run::restore_state() {
  const Checkpoint& ck = *resume_ck_;
  const std::string where = fmt::format("{}: checkpoint '{}'", args_.command(), resume_);
  step_ = ck.counter("step");
  check_resumed_step(step_);  // (a program with --steps: already in parse())
  check_unfinished(step_);    // here, where the work a program owes is known
  std::set<std::string> used;
  std::vector<std::string> missing;
  for (const Entry& e : entries_) {
    if (e.prefix) {
      auto m = ck.get(e.name);
      if (m.empty()) {
        missing.push_back(e.name + "/...");
        continue;
      }
      for (const auto& [k, t] : m) used.insert(e.name + "/" + k);
    } else {
      for (int r = 0; r < dist::size(); ++r) {
        const std::string key = rank_key(e.name, r);
        if (!ck.tensors.count(key)) missing.push_back(key);
        used.insert(key);
      }
    }
  }
  for (const auto& [name, t] : constants_) {
    if (!ck.tensors.count(name) && !optional_constants_.count(name)) missing.push_back(name);
    used.insert(name);
  }
  for (const auto& [name, p] : counters_)
    if (!ck.counters.count(name) && !optional_counters_.count(name)) missing.push_back("counter " + name);
  std::vector<std::string> unexpected;
  for (const auto& [k, t] : ck.tensors)
    if (!used.count(k)) unexpected.push_back(k);
  for (const auto& [k, v] : ck.counters)
    if (k != "step" && k != "steps" && k != "processes" && !counters_.count(k)) unexpected.push_back("counter " + k);
  if (!missing.empty() || !unexpected.empty())
    fail("{} does not fit this run: {}{}{}", where,
         missing.empty() ? "" : fmt::format("missing [{}]", fmt::join(missing, ", ")),
         missing.empty() || unexpected.empty() ? "" : ", ",
         unexpected.empty() ? "" : fmt::format("unexpected [{}]", fmt::join(unexpected, ", ")));
  // A diverged run's weights (heed writes no checkpoint after a non-finite
  // loss, but older heeds and other programs did) would train on NaN.
  for (const Entry& e : entries_)
    if (e.prefix)
      for (const auto& [k, t] : ck.get(e.name))
        if (t.is_floating() && !nonfinite_ok_.count(e.name + "/" + k) && !kernel::all_finite(t))
          fail("{}: '{}/{}' holds values that are not finite (NaN or inf): the run had diverged by step {}; start "
               "it again with other settings",
               where, e.name, k, step_);
  for (const auto& [name, value] : constants_) {
    if (!ck.tensors.count(name)) continue;  // optional, and older than the checkpoint
    const Tensor& saved = ck.tensors.at(name);
    const bool ints = saved.dtype() == DType::i64 && value.dtype() == DType::i64;
    if (saved.shape() != value.shape() || (ints ? saved.to_vector<int64_t>() != value.to_vector<int64_t>()
                                                : saved.to_vector<double>() != value.to_vector<double>())) {
      // Derived from a file an option names: said of that file (the one
      // given, or the run's own when none is), which the user can act on.
      if (const auto in = constant_inputs_.find(name); in != constant_inputs_.end()) {
        const std::string file = args_.value(in->second);
        fail("{}: {} is not the file checkpoint '{}' was trained on (its '{}' differs: the file changed since the "
             "checkpoint, or is another one); expected that file",
             args_.command(), file.empty() ? fmt::format("--{}'s default", in->second)
                                           : fmt::format("--{} '{}'", in->second, file),
             resume_, name);
      }
      fail("{}: '{}' differs from this run's (its inputs changed since the checkpoint)", where, name);
    }
  }
  // Every piece validates before it changes anything; a piece that does not
  // fit stops the resume before any file is touched.
  for (const Entry& e : entries_) {
    try {
      if (e.prefix) e.load_dict(ck.get(e.name));
      else e.load(ck.tensors.at(rank_key(e.name, dist::rank())));
    } catch (const Error& err) {
      fail("{}: '{}' does not fit this run: {}", where, e.name, err.what());
    }
  }
  for (const auto& [name, p] : counters_)
    if (auto it = ck.counters.find(name); it != ck.counters.end()) *p = it->second;
  saved_step_ = step_;
  saved_path_ = resume_;
}

void Run::check_init_from(const std::string* model) const {
  std::map<std::string, std::string> meta;
  try {
    meta = safetensors::metadata(init_from_);
  } catch (const Error&) {
    return;  // init_model reports it, naming the file
  }
  const auto exp = meta.find(kExperimentKey);
  // Not heed export's (an empty heed_experiment names none, as for -o's
  // check): its names and shapes are checked as they load.
  if (exp == meta.end() || exp->second.empty()) return;
  const auto m = meta.find(kModelKey);
  const std::string theirs = m == meta.end() ? std::string() : m->second;
  // The file's words, shown with a newline or a terminal escape as \xNN.
  using safetensors::printable;
  if (exp->second != experiment_)
    fail("{}: --init-from '{}' holds a {} model{} (heed export of a {} checkpoint: its {} metadata); expected the "
         "weights of a {} model",
         args_.command(), init_from_, printable(exp->second),
         theirs.empty() ? std::string() : " (" + printable(theirs) + ")", printable(exp->second), kExperimentKey,
         experiment_);
  if (model && !model->empty() && !theirs.empty() && theirs != *model)
    fail("{}: --init-from '{}' holds the {} model of a {} checkpoint (its {} metadata); this run trains the {} model: "
         "expected its weights (heed export --model {})",
         args_.command(), init_from_, printable(theirs), experiment_, kModelKey, *model, *model);
}

// --init-from: the weights of the one model the run registered as "model",
// or as "model/NAME" (shapes --model attention: heed export --model
// attention writes its file).
void Run::init_model() {
  std::vector<const Entry*> models;
  for (const Entry& e : entries_)
    if (e.prefix && (e.name == "model" || e.name.rfind("model/", 0) == 0)) models.push_back(&e);
  if (models.empty())
    throw UsageError(fmt::format("{}: --init-from: this run tracks no model to start from given weights (it "
                                 "starts the module tracked as \"model\" or \"model/NAME\": run.track(\"model\", net))",
                                 args_.command()));
  if (models.size() > 1) {
    std::string names;
    for (const Entry* e : models) names += (names.empty() ? "" : ", ") + e->name.substr(e->name.find('/') + 1);
    throw UsageError(fmt::format("{}: --init-from gives the weights of one model, and this run trains {} ({}): "
                                 "train one of them{}",
                                 args_.command(), models.size(), names,
                                 args_.has("model") ? " (--model)" : ""));
  }
  const Entry* model = models.front();
  const std::string name = model->name == "model" ? std::string() : model->name.substr(6);  // after "model/"
  check_init_from(&name);
  try {
    const std::map<std::string, Tensor> weights = safetensors::load(init_from_).tensors;
    // A diverged run's weights would train on NaN and end with status 0.
    for (const auto& [name, t] : weights) {
      if (t.is_floating() && !kernel::all_finite(t)) fail("'{}' holds NaN or infinite values", name);
      // float64 values beyond float32's range would load as infinities.
      if (t.dtype() == DType::f64) {
        const double* p = t.data<double>();
        for (int64_t i = 0; i < t.numel(); ++i)
          if (std::abs(p[i]) > static_cast<double>(std::numeric_limits<float>::max()))
            fail("'{}' holds {:g}, outside float32's range (largest magnitude {:g}): the model's weights are float32",
                 name, p[i], static_cast<double>(std::numeric_limits<float>::max()));
      }
    }
    model->load_dict(weights);
  } catch (const Error& e) {
    fail("{}: --init-from '{}': {}", args_.command(), init_from_, e.what());
  }
  fmt::print("model initialised from {}\n", init_from_);
}

void Run::begin(const std::function<void(RunLog&)>& schema) {
  if (begun_) fail("Run::begin: called twice");
  if (!parsed_)  // the log and checkpoint paths, --resume and the threads come from parse()
    fail("Run::begin: call parse() first (parse(argc, argv), or parse({{}}) for a program without options): it sets "
         "the log and checkpoint paths and checks them");
  if (steps_ < 1 && !resuming()) fail("{}: the run has no steps (RunOptions::steps or set_steps)", args_.command());
  for (const auto& [pending, datasets] : owed_)
    if (!counters_.count(pending)) fail("Run::owed_work: '{}' is not a counter the run tracks", pending);
  check_same_job();
  // State that is not finite in the program's own model before any step
  // (a mask buffer of -inf, say) is the model's, not a divergence.
  for (const Entry& e : entries_)
    if (e.prefix)
      for (const auto& [k, t] : e.save_dict())
        if (t.is_floating() && !kernel::all_finite(t)) nonfinite_ok_.insert(e.name + "/" + k);
  // The directories parse() checked, made once nothing can refuse the run
  // any more (after the checkpoint's state fits, after --init-from's
  // weights do): a refused run leaves no directory.
  // What it makes is undone when something fails before the run has
  // begun (a name too long for the filesystem, found only once its
  // directory exists): a refused run leaves no directory and no empty log.
  std::vector<std::string> made;  // the directories made, in order
  bool log_made = false;          // the log's file, made by lock()
  auto make_directories = [&] {
    if (!dist::is_main()) return;
    auto add = [&made](const std::vector<std::string>& d) { made.insert(made.end(), d.begin(), d.end()); };
    if (!resuming() || new_log_) add(prepare_output_path(out_, args_.command(), "--out"));
    add(prepare_output_path(checkpoint_, args_.command(), args_.given("checkpoint") ? "--checkpoint" : ""));
  };
  auto undo = [&] {
    log_.reset();
    release_log();  // the checkpoint's lock too (its file removed when this run made it)
    if (log_made) ::unlink(out_.c_str());
    remove_directories(made);
  };
  // The log's lock, taken just before the log is opened (an empty file is
  // created for it when there is none: nothing may fail after that).
  auto lock = [&] {
    std::error_code ec;
    if (dist::is_main() && log_lock_ < 0) log_made = !fs::exists(fs::symlink_status(out_, ec));
    if (dist::is_main() && log_lock_ < 0 && (log_lock_ = lock_log(out_)) < 0) {
      log_made = false;
      release_log();  // the checkpoint's lock too
      fail("{}: the log '{}' is being written by a run that is still going{}", args_.command(), out_,
           holder_words(log_writer(out_)));
    }
  };
  // A new log: the run's metadata, then the program's schema.
  auto start_log = [&](const std::string& continues) {
    lock();
    log_ = std::make_unique<RunLog>(RunLog::create(out_));
    write_metadata();
    if (!continues.empty()) log_->set_attr("continues", continues);
    if (schema) schema(*log_);
    log_->begin();
  };
  if (resuming()) {
    if (!new_log_) lock();
    try {
      restore_state();
      check_log_rows();  // with the work the checkpoint owes known, as restore_state restored it
    } catch (...) {  // refused: the log is free again for the run that is not refused
      release_log();
      throw;
    }
    resume_ck_.reset();
    try {
      make_directories();
      lock_checkpoint();
      if (new_log_) start_log(fmt::format("the run of checkpoint '{}' from step {}", resume_, step_));
    } catch (...) {
      undo();
      throw;
    }
    if (new_log_) {
      fmt::print("resumed from {} at step {}/{} into a new log, {} (it continues the run after step {})\n", resume_, step_,
                 steps_, out_, step_);
    } else {
      // Owed work is done again: its rows at this step go (owed_work()).
      const std::set<std::string> redo = owed_datasets();
      // The log's configuration says what the run is now: the options a
      // resume may change (--steps raised, --checkpoint-every, where the
      // files are) take their new values, as the log of an uninterrupted
      // run with them holds. (The machine's attributes stay the first's.)
      RunLog::Options opt;
      for (const auto& [k, v] : args_.values())
        if (kResumeMayChange.count(k) || changeable_.count(k)) opt.attrs["config." + k] = v;
      try {
        log_ = std::make_unique<RunLog>(dist::is_main() ? RunLog::resume(out_, step_, opt, redo) : RunLog::discard());
      } catch (...) {
        undo();
        throw;
      }
      fmt::print("resumed from {} at step {}/{}\n", resume_, step_, steps_);
    }
  } else {
    if (!init_from_.empty()) init_model();  // before any file or directory: weights that do not fit leave none
    try {
      make_directories();
      lock_checkpoint();
      run_id_ = new_run_id();
      if (dist::is_main())
        start_log("");
      else
        log_ = std::make_unique<RunLog>(RunLog::discard());
    } catch (...) {
      undo();
      throw;
    }
  }
  if (dist::size() > 1) fmt::print("data-parallel: {} processes, rank 0 logs and checkpoints\n", dist::size());
  fmt::print("logging to {}, checkpoints to {}\n", out_, checkpoint_);
  log_file_ = file_identity(out_);
  std::fflush(stdout);
  begun_ = true;
  start_step_ = step_;
  t0_ = std::chrono::steady_clock::now();
  last_progress_ = t0_;
}

void Run::check_same_job() const {
  if (dist::size() == 1) return;
  // Every process must train the same: its options (the threads aside),
  // the data it registered (charlm's corpus fingerprint), its state's
  // shapes. Another --lr or --seed, or another text of the same characters,
  // trained copies that drifted apart while rank 0's alone was kept.
  std::vector<std::string> items, names;
  for (const auto& [k, v] : args_.values())
    if (k != "threads") items.push_back(k + "=" + v), names.push_back("--" + k);
  const size_t options = items.size();
  // The checkpoint --resume names, as each process read it. Node-local
  // copies of one run at other steps were not refused: rank 0 resumed at
  // step 40 and trained to the end while rank 1, resumed at 20, waited in a
  // collective forever, and rank 0's checkpoint said the run had finished.
  if (resume_ck_) {
    const auto step = resume_ck_->counters.find("step");
    items.push_back(fmt::format("step {} of run {} (log digest {})",
                                step == resume_ck_->counters.end() ? 0 : step->second,
                                resume_ck_->run_id.empty() ? "unknown" : resume_ck_->run_id,
                                resume_ck_->log_digest.empty() ? "unknown" : resume_ck_->log_digest));
    names.push_back("checkpoint (--resume)");
  }
  const size_t resumed = items.size();  // options, then the checkpoint's item when resuming
  for (const auto& [name, t] : constants_) {
    const Tensor c = kernel::contiguous(t);
    items.push_back(name + "=" + std::string(static_cast<const char*>(c.raw_data()),
                                             static_cast<size_t>(c.numel()) * dtype_size(c.dtype())));
    names.push_back(name);
  }
  for (const Entry& e : entries_)
    if (e.prefix)
      for (const auto& [k, t] : e.save_dict()) {
        items.push_back(e.name + "/" + k + " " + shape_str(t.shape()) + " " + dtype_name(t.dtype()));
        names.push_back(e.name + "/" + k + "'s shape");
      }
  const size_t shapes = resumed + constants_.size();
  const dist::Difference d = dist::first_difference(items);
  if (d.rank < 0) return;
  size_t i = static_cast<size_t>(d.item);
  // Options: every one that differs, an option given on the command line
  // named first. The first in declaration order may be a default derived
  // from one given later (charlm's --warmup from --steps): another --steps
  // was reported as another --warmup.
  std::string also;
  if (i < options) {
    std::string mine;
    for (size_t j = 0; j < options; ++j)
      mine += (args_.given(names[j].substr(2)) ? "+" : "-") + items[j] + '\0';
    const std::vector<std::string> every = dist::all_gather_text(mine);  // the same on every process
    auto split = [](const std::string& text) {
      std::vector<std::string> out;
      for (size_t at = 0, end; (end = text.find('\0', at)) != std::string::npos; at = end + 1)
        out.push_back(text.substr(at, end - at));
      return out;
    };
    const std::vector<std::string> theirs = split(every[static_cast<size_t>(d.rank)]), first = split(every[0]);
    if (theirs.size() == options && first.size() == options) {
      std::vector<size_t> differ;
      for (size_t j = 0; j < options; ++j)
        if (theirs[j].substr(1) != first[j].substr(1)) differ.push_back(j);
      auto given = [&](size_t j) { return theirs[j][0] == '+' || first[j][0] == '+'; };
      const auto named = std::find_if(differ.begin(), differ.end(), given);
      if (named != differ.end()) i = *named;
      std::vector<std::string> others;  // the given ones first
      for (const bool first_pass : {true, false})
        for (size_t j : differ)
          if (j != i && given(j) == first_pass) others.push_back(names[j]);
      if (!others.empty())
        also = fmt::format(", nor {} its {}", others.size() == 1 ? "is" : "are", fmt::join(others, ", "));
    }
  }
  // An option's or a shape's two values, exchanged (every process knows d);
  // a constant's bytes (a corpus fingerprint) say nothing to a reader.
  // Every process takes part in the exchange, whatever it holds.
  const std::vector<std::string> all = dist::all_gather_text(i < items.size() ? items[i] : std::string());
  std::string values;
  if (i < resumed || (i >= shapes && i < items.size())) {
    auto value = [&](const std::string& item) {
      if (item.empty()) return std::string("none");  // its list is shorter
      if (i >= shapes) return item.substr(item.find(' ') + 1);  // "name [shape] dtype" -> "[shape] dtype"
      if (i >= options) return item;                             // the resumed checkpoint's step and run
      return fmt::format("'{}'", item.substr(item.find('=') + 1));
    };
    values = fmt::format(" (rank {}: {}, rank 0: {})", d.rank, value(all[static_cast<size_t>(d.rank)]), value(all[0]));
  }
  fail("{}: the processes of this job differ: rank {}'s {} is not rank 0's{}{}; every process must run the same "
       "command on the same files",
       args_.command(), d.rank, i < names.size() ? names[i] : std::string("state"), values, also);
}

RunLog& Run::log() {
  if (finished_) fail("Run::log: the run has finished (finish() was called): its log '{}' is closed", out_);
  if (!log_) fail("Run::log: the log exists from begin() on");
  return *log_;
}

void Run::write_metadata() {
  RunLog& log = *log_;
  log.set_attr("experiment", experiment_);
  write_provenance(log, command_line_, run_id_);
  log_machine(log, threads_);
  for (const auto& [k, v] : args_.values()) log.set_attr("config." + k, v);
}

// Rank 0's piece of state under its name, rank r's under ranks/<r>/<name>.
std::string Run::rank_key(const std::string& name, int rank) {
  return rank == 0 ? name : fmt::format("ranks/{}/{}", rank, name);
}

std::string Run::save() const {
  Checkpoint ck;
  // The model and optimiser: the same on every process. Weights a step made
  // non-finite (a loss that overflowed in the backward, before one was
  // shown) are no checkpoint: each process finds the same, and none writes.
  for (const Entry& e : entries_)
    if (e.prefix) {
      const std::map<std::string, Tensor> state = e.save_dict();
      for (const auto& [k, t] : state)
        if (t.is_floating() && !nonfinite_ok_.count(e.name + "/" + k) && !kernel::all_finite(t))
          return fmt::format("{}/{} not finite", e.name, k);
      if (dist::is_main()) ck.put(e.name, state);
    }
  ck.experiment = experiment_;
  ck.run_id = run_id_;
  for (const auto& [k, v] : args_.values()) ck.config[k] = v;
  ck.counters["step"] = step_;
  ck.counters["steps"] = steps_;  // the run's length: whether the work after its last step was done
  if (dist::size() > 1) ck.counters["processes"] = dist::size();
  for (const auto& [name, p] : counters_) ck.counters[name] = *p;
  for (const Entry& e : entries_) {
    if (e.prefix) continue;
    // Generators, data positions, values: every process's own (a collective).
    std::vector<Tensor> all = dist::all_gather(e.save());
    for (int r = 0; r < dist::size(); ++r) ck.tensors[rank_key(e.name, r)] = all[static_cast<size_t>(r)];
  }
  for (const auto& [name, t] : constants_) ck.tensors[name] = t;
  // The digest of the log's rows up to this step, as a resume keeps them (the
  // rows of owed work at this step left out): rank 0's, which writes both.
  if (dist::is_main() && log_)
    if (const std::optional<uint64_t> digest = log_->digest(step_, owed_datasets())) ck.log_digest = digest_text(*digest);
  if (dist::is_main()) save_checkpoint(checkpoint_, ck);
  return "";
}

bool Run::next() {
  if (!begun_) fail("Run::next: call begin() first");
  if (finished_) fail("Run::next: the run has finished (finish() was called)");
  if (!in_step_ && !stopped_ && step_ == start_step_) {
    // A stop asked before the run's first step (from parse() on: while the
    // program started, or during work a resumed run owed first, an
    // evaluation a stop cut short): a resumed run's checkpoint still holds
    // this state, and a new run has nothing to save, so it stops here,
    // writing nothing new.
    if (stop_requested()) {
      log_->flush();
      stopped_ = stopped_unchanged_ = true;
      const bool term = ctrl_c_->request.signal() == SIGTERM;
      bool job_term = term;
      if (dist::size() > 1) {
        Tensor flag = Tensor::from_f64({term ? 1.0 : 0.0}, {1});
        dist::sum_(flag);
        job_term = flag.to_vector<double>()[0] > 0;
      }
      stop_signal_ = job_term ? SIGTERM : SIGINT;
      return false;
    }
  }
  if (in_step_) {
    in_step_ = false;
    bool stop = ctrl_c_->request.requested();
    bool diverged = !diverged_.empty();
    if (dist::size() > 1) {  // Ctrl-C reaches the processes at different steps, a loss one of them: stop together
      // The signal too: SIGTERM to any process is the job's status (143).
      const bool term = ctrl_c_->request.signal() == SIGTERM;
      Tensor flags = Tensor::from_f64({stop ? 1.0 : 0.0, diverged ? 1.0 : 0.0, term ? 1.0 : 0.0}, {3});
      dist::sum_(flags);
      const std::vector<double> f = flags.to_vector<double>();
      stop = f[0] > 0;
      diverged = f[1] > 0;
      job_sigterm_ = f[2] > 0;
      if (diverged && diverged_.empty()) diverged_ = "the loss of another process";
    }
    stop = stop || (stop_after_ > 0 && step_ == stop_after_);
    const bool last = step_ == steps_;
    if (!diverged && (stop || last || (checkpoint_every_ > 0 && step_ % checkpoint_every_ == 0))) {
      log_->flush();  // the log and the checkpoint agree
      const std::string bad = save();
      if (bad.empty()) saved_step_ = step_, saved_path_ = checkpoint_;
      else diverged_ = bad;
      diverged = !bad.empty();
    }
    if (diverged) {  // no checkpoint of weights the step has made non-finite: the last one stays
      log_->flush();
      print_progress(true);
      return false;
    }
    print_progress(last || stop);
    if (stop && !last) {
      stopped_ = true;
      stop_signal_ = job_sigterm_ ? SIGTERM : ctrl_c_->request.signal();  // 0: --stop-after, or another process's signal
      return false;
    }
  }
  if (step_ >= steps_) {
    // A finished run resumed with another --checkpoint does no step, and no
    // step wrote that file: written here, as every run ends with its
    // checkpoint where --checkpoint says (the resumed file holds this state
    // already; no other is written).
    if (!stopped_ && diverged_.empty() && saved_step_ == step_ && !saved_path_.empty() &&
        !same_file(saved_path_, checkpoint_)) {
      log_->flush();
      if (const std::string bad = save(); bad.empty()) saved_path_ = checkpoint_;
      else diverged_ = bad;
    }
    return false;
  }
  ++step_;
  in_step_ = true;
  return true;
}

int64_t Run::resumed_length() const {
  if (!resume_ck_) return -1;
  if (auto it = resume_ck_->counters.find("steps"); it != resume_ck_->counters.end()) return it->second;
  // A checkpoint from before the counter: a program with --steps saved its length among its options.
  if (auto it = resume_ck_->config.find("steps"); defaults_.steps_ > 0 && it != resume_ck_->config.end()) {
    int64_t n = 0;
    const char* end = it->second.data() + it->second.size();
    const auto [p, ec] = std::from_chars(it->second.data(), end, n);
    if (ec == std::errc() && p == end) return n;
  }
  return -1;
}

// The length a resume from step `at` may ask for, as the "expected ..." of
// a refusal: above `at` where the checkpoint's run is longer and the work
// after its last step is not owed (check_unfinished), else `at` or more; in
// --steps, or for a program whose options set its length (shapes:
// --epochs), in those.
std::string Run::resumable_length(int64_t at) const {
  const int64_t length = resumed_length();
  const bool above = length > at && !work_owed_at(at);
  if (defaults_.steps_ > 0)
    return above ? fmt::format("--steps above {} (or no --steps: the run's own {})", at, length)
                 : fmt::format("--steps {} or more", at);
  std::vector<std::string> said;  // the options that set a set_steps() program's length (shapes: --epochs)
  for (const std::string& k : changeable_)
    if (args_.has(k)) said.push_back("--" + k);
  if (!said.empty()) said = {fmt::format("a larger {}", fmt::join(said, " or "))};
  if (length >= 0) said.push_back(fmt::format("the run's own was {}", length));
  return fmt::format("a run {} {} steps{}", above ? "longer than" : "of at least", at,
                     said.empty() ? "" : fmt::format(" ({})", fmt::join(said, "; ")));
}

// Whether the work of step `at` is owed (owed_work(): a stop cut it short),
// which the program does first on resuming there.
bool Run::work_owed_at(int64_t at) const {
  for (const auto& [pending, datasets] : owed_)
    if (auto it = resume_ck_->counters.find(pending); it != resume_ck_->counters.end() && it->second == at) return true;
  return false;
}

void Run::check_resumed_step(int64_t at) const {
  if (at < 0 || at > steps_)
    throw UsageError(fmt::format("{}: checkpoint '{}' is at step {}, beyond this run's {} steps (a resumed run goes "
                                 "on from its step: expected {})",
                                 args_.command(), resume_, at, steps_, resumable_length(at)));
}

void Run::check_unfinished(int64_t at) const {
  // A run stopped at step `at` of a longer run did that step's work but not
  // the work a program does after its last step (a final evaluation, the
  // last attention maps): next() would end the run at once, without it.
  // Unless that step's work is owed (owed_work(): charlm's evaluation a stop
  // cut short), which the program does first, as its last step would.
  const int64_t length = resumed_length();
  if (at != steps_ || length <= at || work_owed_at(at)) return;
  const bool has_steps = defaults_.steps_ > 0;
  throw UsageError(fmt::format("{}: checkpoint '{}' stopped at step {} of {}, before the work a run does after its "
                               "last step (a final evaluation, say); {} would end the run there without it; expected {}",
                               args_.command(), resume_, at, length,
                               has_steps ? fmt::format("--steps {}", steps_) : fmt::format("a run of {} steps", steps_),
                               resumable_length(at)));
}

void Run::owed_work(const std::string& pending, std::vector<std::string> datasets) {
  if (begun_) fail("Run::owed_work: '{}' after begin(); declare owed work before", pending);
  owed_[pending] = std::move(datasets);
}

bool Run::stop_requested() {
  if (!begun_ || finished_) return false;
  bool stop = ctrl_c_->request.requested();
  if (dist::size() > 1) {
    Tensor flag = Tensor::from_f64({stop ? 1.0 : 0.0}, {1});
    dist::sum_(flag);
    stop = flag.to_vector<double>()[0] > 0;
  }
  return stop;
}

void Run::show(const std::string& name, double value) {
  for (auto& [n, v] : shown_)
    if (n == name) {
      v = value;
      return;
    }
  shown_.emplace_back(name, value);
}

void Run::show_loss(const std::string& name, double value) {
  show(name, value);
  if (!std::isfinite(value) && diverged_.empty()) diverged_ = fmt::format("{} {}", name, value);
}

double Run::seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

void Run::print_progress(bool force) {
  if (defaults_.progress_seconds_ <= 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (!force && std::chrono::duration<double>(now - last_progress_).count() < defaults_.progress_seconds_) return;
  last_progress_ = now;
  const double rate = static_cast<double>(step_ - start_step_) / std::max(seconds(), 1e-9);
  std::string values;
  for (const auto& [n, v] : shown_) values += fmt::format(" {} {:.4f}", n, v);
  fmt::print("step {}/{}{} | {:.1f} steps/s ETA {}\n", step_, steps_, values, rate,
             format_seconds(rate > 0 ? static_cast<double>(steps_ - step_) / rate : 0.0));
  std::fflush(stdout);
}

int Run::finish() {
  finished_ = true;
  if (log_) log_->close();
  release_log();
  // The rows went to the file opened at begin(): if out_ is now another
  // file, or none, they went where that file went (deleted: lost; the
  // checkpoint is not). Said, not an error: the training itself is done.
  if (log_ && dist::is_main() && log_file_ != std::pair<uint64_t, uint64_t>{0, 0}) {
    if (file_identity(out_) != log_file_)
      fmt::print(stderr,
                 "{}: warning: the log '{}' was deleted, moved or replaced while the run went on: its rows went with "
                 "the file it was (deleted: lost). The checkpoint '{}' is intact (--resume it with --out NEW.h5 for a "
                 "new log).\n",
                 args_.command(), out_, checkpoint_);
    // The same file, cut short (truncate -s 0) or written over in place: the
    // rows before the cut are lost, and what the run wrote after it is no log.
    else if (const std::string why = not_the_log(out_, run_id_); !why.empty())
      fmt::print(stderr,
                 "{}: warning: the log '{}' was truncated or overwritten while the run went on: it no longer reads "
                 "as this run's log ({}), and its rows are lost. The checkpoint '{}' is intact (--resume it with "
                 "--out NEW.h5 for a new log).\n",
                 args_.command(), out_, why, checkpoint_);
  }
  ctrl_c_.reset();
  if (stopped_) {
    const std::string launcher = dist::size() > 1 ? fmt::format("mpirun -np {} [mpirun options] ", dist::size()) : "";
    if (stopped_unchanged_ && saved_step_ < 0) {
      fmt::print("\nstopped before its first step: nothing was trained, and no checkpoint written.\nstart it again "
                 "with: {}{}\n",
                 launcher, command_line_);
    } else if (stopped_unchanged_)
      fmt::print("\nstopped at step {}/{} before its next step; the checkpoint '{}' holds it, as it was, and the log is "
                 "flushed.\nresume with: {}{} --resume {}\n",
                 step_, steps_, saved_path_, launcher, defaults_.program_, shell_quote(saved_path_));
    else
      fmt::print("\nstopped at step {}/{}; checkpoint written and log flushed.\nresume with: {}{} --resume {}\n",
                 step_, steps_, launcher, defaults_.program_, shell_quote(checkpoint_));
    std::fflush(stdout);
    return stop_signal_ == SIGTERM ? 128 + SIGTERM : 130;
  }
  if (diverged()) {
    if (dist::is_main())
      fmt::print(stderr,
                 "{}: the run diverged at step {}/{} ({}): training stopped there. The log '{}' holds {}; {}. Start "
                 "again with other settings{}.\n",
                 args_.command(), step_, steps_, diverged_, out_,
                 new_log_ ? fmt::format("steps {} to {} (it continues checkpoint '{}')", start_step_ + 1, step_, resume_)
                          : fmt::format("every step up to {}", step_),
                 saved_step_ < 0 ? fmt::format("this run wrote no checkpoint")
                                 : fmt::format("the checkpoint '{}' holds step {}, as it was", saved_path_, saved_step_),
                 args_.has("lr") ? " (a smaller --lr, say)" : "");
    return 1;
  }
  return 0;
}

int guard_main(const char* program, const std::function<int()>& body) {
  auto report = [program](const std::string& what, int status) {
    // Under mpirun every process usually fails alike (the same options, the
    // same files): rank 0 speaks for the job and ends it; the others wait
    // for that, and speak only if it does not come (a failure of their own).
    // A process that never started MPI (a command without collectives, or
    // one that failed before its start) says why and exits: mpirun ends the
    // job on a non-zero status. Starting MPI here would wait forever for
    // peers that finished without it.
    if (dist::in_job()) {
      if (!dist::is_main()) std::this_thread::sleep_for(std::chrono::seconds(3));
      dist::abort_job(what, status, program);  // does not return
    }
    const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
    const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
    if (rank && size && std::atoi(size) > 1)
      fmt::print(stderr, "{}: rank {} of {}: {}\n", program, rank, size, what);
    else
      fmt::print(stderr, "{}: {}\n", program, what);
    return status;
  };
  share_cores();
  int status = 0;
  try {
    status = body();
  } catch (const Stopped& e) {
    status = report(e.what(), 128 + e.signal);
  } catch (const UsageError& e) {
    status = report(e.what(), 2);
  } catch (const std::exception& e) {  // heed::Error, or a library's own
    status = report(e.what(), 1);
  } catch (...) {  // a throw of something else (an int, a string literal)
    status = report("an exception that is not a std::exception", 1);
  }
  // What the program printed must have reached stdout (a full disk, a file
  // system gone): a lost output is an error, not a success.
  errno = 0;
  if ((std::fflush(stdout) != 0 || std::ferror(stdout)) && status == 0)
    status = report(
        fmt::format("cannot write to standard output{}", errno ? ": " + std::string(std::strerror(errno)) : ""), 1);
  return status;
}

}  // namespace heed
