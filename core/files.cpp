#include "core/files.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/errors.hpp"
#include "core/strings.hpp"

namespace kktrain {

namespace {

// Why a file of mode `mode` is not a regular file, or nullopt when it is.
std::optional<std::string> not_regular(mode_t mode) {
  if (S_ISREG(mode)) return std::nullopt;
  if (S_ISDIR(mode)) return std::string("is a directory, not a file");
  if (S_ISFIFO(mode)) return std::string("is a FIFO (named pipe), not a regular file");
  if (S_ISSOCK(mode)) return std::string("is a socket, not a regular file");
  if (S_ISCHR(mode) || S_ISBLK(mode)) return std::string("is a device, not a regular file");
  return std::string("is not a regular file");
}

}  // namespace

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void FileDescriptor::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::optional<std::string> open_regular_file(FileDescriptor* out, const std::string& path,
                                             struct stat* st) {
  out->reset();
  int fd = -1;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return std::string(std::strerror(errno));
  FileDescriptor held(fd);
  struct stat s {};
  if (::fstat(fd, &s) != 0) return std::string(std::strerror(errno));
  if (auto why = not_regular(s.st_mode)) return why;
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return std::string(std::strerror(errno));
  }
  if (st) *st = s;
  *out = std::move(held);
  return std::nullopt;
}

std::optional<std::string> read_regular_file(std::string* out, const std::string& path,
                                             std::size_t max_bytes) {
  out->clear();
  FileDescriptor f;
  struct stat st {};
  if (auto why = open_regular_file(&f, path, &st)) return why;
  const auto too_large = [&] {
    out->clear();
    return max_bytes % (std::size_t(1) << 20) == 0
               ? "is larger than " + std::to_string(max_bytes >> 20) + " MiB"
               : "is larger than " + std::to_string(max_bytes) + " bytes";
  };
  if (static_cast<uint64_t>(st.st_size) > max_bytes) return too_large();
  out->reserve(static_cast<std::size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t r = ::read(f.get(), buf, sizeof(buf));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return std::string(std::strerror(errno));
    if (r == 0) return std::nullopt;
    out->append(buf, static_cast<std::size_t>(r));
    if (out->size() > max_bytes) return too_large();  // it grew after the fstat
  }
}

std::optional<std::string> FileLines::open(const std::string& path) {
  if (auto why = open_regular_file(&fd_, path)) return why;
  path_ = path;
  block_.resize(std::size_t(1) << 16);
  return std::nullopt;
}

bool FileLines::next(std::string* line, std::size_t max_bytes) {
  line->clear();
  if (!fd_.valid()) return false;
  bool started = false;  // bytes of this line (or its '\n') consumed
  for (;;) {
    if (pos_ == len_) {
      if (at_end_) break;
      const ssize_t n = ::read(fd_.get(), block_.data(), block_.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw RuntimeFailure("cannot read '" + path_ + "': " + std::strerror(errno));
      if (n == 0) {
        at_end_ = true;
        break;
      }
      pos_ = 0;
      len_ = static_cast<std::size_t>(n);
    }
    started = true;
    const char* begin = block_.data() + pos_;
    const void* nl = std::memchr(begin, '\n', len_ - pos_);
    const std::size_t take =
        nl ? static_cast<std::size_t>(static_cast<const char*>(nl) - begin) : len_ - pos_;
    if (take > max_bytes - line->size()) {
      throw InputError("'" + path_ + "':" + std::to_string(line_no_ + 1) +
                       ": the line is longer than " + byte_count(static_cast<int64_t>(max_bytes)));
    }
    line->append(begin, take);
    pos_ += take + (nl ? 1 : 0);
    if (nl) break;
  }
  if (!started) return false;
  ++line_no_;
  return true;
}

std::optional<std::string> unreadable_regular_file(const std::string& path) {
  FileDescriptor f;
  return open_regular_file(&f, path);
}

std::optional<uint64_t> make_room_for_open_files(uint64_t count) {
  const uint64_t need = count + 256;
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return std::nullopt;  // unknown: let open() say
  if (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur >= need) return std::nullopt;
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < need) return lim.rlim_max;
  lim.rlim_cur = need;
  ::setrlimit(RLIMIT_NOFILE, &lim);
  return std::nullopt;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  if (::stat(a.c_str(), &sa) != 0 || ::stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

void check_output_file(const std::string& opt, const std::string& out,
                       const std::vector<std::pair<std::string, std::string>>& inputs) {
  std::error_code ec;
  const std::filesystem::path p(out);
  if (out.empty()) throw UsageError(opt + ": an output file name is required");
  if (std::filesystem::is_directory(p, ec)) {
    throw UsageError(opt + ": '" + out + "' is a directory; give a file name");
  }
  for (const auto& [what, path] : inputs) {
    if (!path.empty() && same_file(out, path)) {
      throw UsageError(opt + ": '" + out + "' is the " + what +
                       "; refusing to write over an input");
    }
  }
  const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : ".";
  if (!std::filesystem::is_directory(dir, ec)) {
    throw UsageError(opt + ": cannot write '" + out + "': directory '" + dir.string() +
                     "' does not exist");
  }
  const bool exists = std::filesystem::exists(p, ec);
  if (exists && !std::filesystem::is_regular_file(p, ec)) {
    throw UsageError(opt + ": '" + out + "' exists and is not a regular file");
  }
  if (::access(exists ? out.c_str() : dir.c_str(), W_OK) != 0) {
    throw UsageError(opt + ": cannot write '" + out + "': " + std::strerror(errno));
  }
  // The file is written under a temporary name beside it and renamed over it: the directory must
  // take a new file (not so in /proc or /sys, whose files can only be written in place).
  const std::string probe = (dir / (".kktrain-probe." + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw UsageError(opt + ": cannot create a file in '" + dir.string() + "' to write '" + out +
                     "': " + std::strerror(errno));
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

std::string unwritable_dir(const std::string& dir) {
  std::error_code ec;
  const std::filesystem::path d = std::filesystem::absolute(dir, ec).lexically_normal();
  std::filesystem::path p = d;
  while (p.has_relative_path() && !std::filesystem::exists(p, ec)) p = p.parent_path();
  const std::string where =
      p == d ? "'" + dir + "'" : "'" + dir + "' cannot be made: '" + p.string() + "'";
  if (!std::filesystem::is_directory(p, ec)) return where + " is not a directory";
  if (::access(p.c_str(), W_OK | X_OK) != 0) {
    return where + " takes no new entries: " + std::strerror(errno);
  }
  return "";
}

}  // namespace kktrain
