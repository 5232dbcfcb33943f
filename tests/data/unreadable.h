// tests/data/unreadable.h: a file this process really cannot open, also when
// the tests run as root (whose CAP_DAC_OVERRIDE opens any file whatever its
// mode): the file gets mode 000 and, while a NoFileOverride is in scope,
// the calling thread works without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH
// in its effective set (still permitted: they come back at the scope's end).
#pragma once

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include <doctest/doctest.h>

namespace heed::test {

class NoFileOverride {
 public:
  NoFileOverride() {
    if (syscall(SYS_capget, &header_, saved_) != 0) return;  // no capabilities to drop
    __user_cap_data_struct less[2] = {saved_[0], saved_[1]};
    less[0].effective &= ~((1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH));
    dropped_ = syscall(SYS_capset, &header_, less) == 0;
  }
  ~NoFileOverride() {
    if (dropped_) syscall(SYS_capset, &header_, saved_);
  }
  NoFileOverride(const NoFileOverride&) = delete;
  NoFileOverride& operator=(const NoFileOverride&) = delete;

 private:
  __user_cap_header_struct header_{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct saved_[2] = {};
  bool dropped_ = false;
};

// Takes every permission from path (chmod 000) and checks, under a
// NoFileOverride the caller holds, that opening it really fails with EACCES:
// otherwise the case under test does not arise and the test fails here.
inline void make_unreadable(const std::string& path) {
  REQUIRE(::chmod(path.c_str(), 0) == 0);
  const int fd = ::open(path.c_str(), O_RDONLY);
  const int err = errno;
  if (fd >= 0) ::close(fd);
  INFO("open of a mode-000 file: " << (fd >= 0 ? "succeeded" : std::strerror(err)));
  REQUIRE((fd < 0 && err == EACCES));
}

}  // namespace heed::test
