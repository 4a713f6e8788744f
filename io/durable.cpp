#include "io/durable.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/errors.hpp"

namespace kktrain {

namespace fs = std::filesystem;

void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) {
    throw RuntimeFailure("cannot open '" + path + "' to sync it: " + std::strerror(errno));
  }
  const int r = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (r != 0) {
    throw RuntimeFailure("cannot sync '" + path + "' to disk: " + std::strerror(err));
  }
}

std::string temporary_name(const std::string& final_path) {
  const fs::path p(final_path);
  return (p.parent_path() / ("." + p.filename().string() + ".tmp." + std::to_string(::getpid())))
      .string();
}

void commit_file(const std::string& tmp, const std::string& final_path) {
  std::error_code ec;
  fs::rename(tmp, final_path, ec);
  if (ec) {
    throw RuntimeFailure("cannot rename '" + tmp + "' to '" + final_path + "': " + ec.message());
  }
  const fs::path dir = fs::path(final_path).parent_path();
  fsync_path(dir.empty() ? "." : dir.string(), true);
}

void write_text_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = temporary_name(path);
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      const int err = errno;
      std::error_code ec;
      fs::remove(tmp, ec);
      throw RuntimeFailure("cannot write '" + tmp + "': " + std::strerror(err));
    }
  }
  fsync_path(tmp, false);
  commit_file(tmp, path);
}

}  // namespace kktrain
