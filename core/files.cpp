#include "core/files.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kktrain {

std::optional<std::string> unreadable_regular_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::string(std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return std::string("is a directory, not a file");
  if (S_ISFIFO(st.st_mode)) return std::string("is a FIFO (named pipe), not a regular file");
  if (S_ISSOCK(st.st_mode)) return std::string("is a socket, not a regular file");
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
    return std::string("is a device, not a regular file");
  }
  if (!S_ISREG(st.st_mode)) return std::string("is not a regular file");
  if (::access(path.c_str(), R_OK) != 0) return std::string(std::strerror(errno));
  return std::nullopt;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

}  // namespace kktrain
