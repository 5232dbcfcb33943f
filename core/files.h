// core/files.h: what heed's file writers check before they write.
#pragma once

#include <string>

namespace heed::files {

// Whether two paths name the same file, existing or not (symbolic links and
// "." / ".." resolved as far as the paths exist).
bool same_file(const std::string& a, const std::string& b);

// The file a writer that replaces path atomically (a temporary file, then a
// rename over path) must write: path itself when nothing or a regular file
// is there; the file a symbolic link at path leads to (so the link stays a
// link and its target gets the new contents). Refuses, naming path and what
// it is, a directory, a device, a FIFO or a socket, which a rename would
// replace with a regular file. `what` starts the message ("checkpoint").
std::string replace_target(const std::string& path, const char* what);

// target + suffix (".tmp"), with nothing there: a file a killed writer left
// or a symbolic link is removed first (the link itself: a writer opening
// the name would otherwise write where the link leads). Refuses a directory
// there, naming it. `what` starts the message.
std::string temporary_beside(const std::string& target, const char* suffix, const char* what);

// Gives the temporary file tmp the permissions of the file at target, when
// there is one, before tmp is renamed over it: a replaced file keeps its
// mode (a 600 checkpoint stays 600) rather than taking the umask's (also
// when the permissions cannot be set: the file is still written).
void keep_mode(const std::string& tmp, const std::string& target) noexcept;

}  // namespace heed::files
