// core/files.cpp
#include "core/files.h"

#include <filesystem>
#include <system_error>

#include "core/error.h"

namespace heed::files {

namespace fs = std::filesystem;

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ea, eb;
  // Absolute first: weakly_canonical leaves a relative path none of whose
  // parts exists as it is ("n.h5"), while "./n.h5" became "/cwd/n.h5".
  fs::path ca = fs::weakly_canonical(fs::absolute(a, ea), ea), cb = fs::weakly_canonical(fs::absolute(b, eb), eb);
  if (ea || eb) return fs::absolute(a, ea).lexically_normal() == fs::absolute(b, eb).lexically_normal();
  return ca == cb;
}

std::string replace_target(const std::string& path, const char* what) {
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(path, ec);
  if (ec && link.type() != fs::file_type::not_found) fail("{}: cannot write '{}': {}", what, path, ec.message());
  // Where a symbolic link leads, link by link (the last one may lead to a
  // file that does not exist yet, which weakly_canonical would not follow).
  fs::path target = path;
  for (int hops = 0; fs::is_symlink(fs::symlink_status(target, ec)); ++hops) {
    if (hops == 40)
      fail("{}: cannot write '{}': {}", what, path,
           std::make_error_code(std::errc::too_many_symbolic_link_levels).message());
    const fs::path to = fs::read_symlink(target, ec);
    if (ec) fail("{}: cannot write '{}': {}", what, path, ec.message());
    target = to.is_absolute() ? to : target.parent_path() / to;
  }
  const fs::file_status st = fs::status(target, ec);
  if (ec && st.type() != fs::file_type::not_found) fail("{}: cannot write '{}': {}", what, path, ec.message());
  switch (st.type()) {
    case fs::file_type::not_found:
    case fs::file_type::regular: return target.string();
    case fs::file_type::directory: fail("{}: cannot write '{}': it is a directory", what, path);
    case fs::file_type::block:
    case fs::file_type::character:
      fail("{}: cannot write '{}': it is a device, not a regular file (the file is written whole and then moved "
           "into place, which would replace the device)",
           what, path);
    case fs::file_type::fifo:
    case fs::file_type::socket:
      fail("{}: cannot write '{}': it is a {}, not a regular file (the file is written whole and then moved into "
           "place, which would replace it)",
           what, path, st.type() == fs::file_type::fifo ? "FIFO" : "socket");
    default: fail("{}: cannot write '{}': not a regular file", what, path);
  }
}

std::string temporary_beside(const std::string& target, const char* suffix, const char* what) {
  const std::string tmp = target + suffix;
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(tmp, ec);
  if (st.type() == fs::file_type::not_found) return tmp;
  if (ec) fail("{}: cannot write the temporary file '{}': {}", what, tmp, ec.message());
  if (st.type() == fs::file_type::directory)
    fail("{}: cannot write the temporary file '{}' beside '{}': a directory is there", what, tmp, target);
  // A file left by a writer that was killed, or a link: removed (a link
  // itself, never what it leads to), so the writer creates a new file there.
  fs::remove(tmp, ec);
  if (ec) fail("{}: cannot remove the old temporary file '{}': {}", what, tmp, ec.message());
  return tmp;
}

void keep_mode(const std::string& tmp, const std::string& target) noexcept {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(target, ec);
  if (ec || !fs::is_regular_file(st)) return;  // nothing there yet: the umask's mode
  fs::permissions(tmp, st.permissions(), fs::perm_options::replace, ec);  // failing, the umask's mode
}

}  // namespace heed::files
