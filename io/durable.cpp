#include "io/durable.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/errors.hpp"

namespace kktrain {

namespace fs = std::filesystem;

void fsync_path(const std::string& path, FsyncTarget target) {
  const int fd =
      ::open(path.c_str(), target == FsyncTarget::directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
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
  fsync_path(dir.empty() ? "." : dir.string(), FsyncTarget::directory);
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
  fsync_path(tmp, FsyncTarget::file);
  commit_file(tmp, path);
}

void write_new_file_synced(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) throw RuntimeFailure("cannot create '" + path + "': " + std::strerror(errno));
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = w < 0 ? errno : EIO;
      ::close(fd);
      throw RuntimeFailure("cannot write '" + path + "': " + std::strerror(err));
    }
    done += static_cast<std::size_t>(w);
  }
  const bool ok = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) throw RuntimeFailure("cannot sync '" + path + "' to disk: " + std::strerror(err));
}

namespace {

// The pid of a temporary of `name` (".<name>.tmp.<pid>" or ".<name>.tmp.<pid>.old"), or -1.
long temporary_pid(const std::string& entry, const std::string& name) {
  const std::string prefix = "." + name + ".tmp.";
  if (entry.size() <= prefix.size() || entry.compare(0, prefix.size(), prefix) != 0) return -1;
  std::string digits = entry.substr(prefix.size());
  if (digits.size() > 4 && digits.compare(digits.size() - 4, 4, ".old") == 0) {
    digits.resize(digits.size() - 4);
  }
  if (digits.empty() || digits.size() > 9 || digits[0] == '0' ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return -1;
  }
  return std::stol(digits);
}

// True when `p` is what kktrain makes under a temporary name: owned by this user, a regular file
// or a directory holding only regular files an export writes (no link, no subdirectory).
bool made_by_kktrain(const fs::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0 || st.st_uid != ::geteuid()) return false;
  if (S_ISREG(st.st_mode)) return true;
  if (!S_ISDIR(st.st_mode)) return false;
  std::error_code ec;
  for (fs::directory_iterator it(p, ec), end; it != end; it.increment(ec)) {
    if (ec) return false;
    struct stat e {};
    if (::lstat(it->path().c_str(), &e) != 0 || !S_ISREG(e.st_mode) ||
        !export_directory_file(it->path().filename().string())) {
      return false;
    }
  }
  return !ec;
}

// Bytes of the files at and under `p` (not following symbolic links).
int64_t bytes_under(const fs::path& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return 0;
  if (!S_ISDIR(st.st_mode)) return S_ISREG(st.st_mode) ? static_cast<int64_t>(st.st_size) : 0;
  int64_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(p, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) n += st.st_size;
  }
  return n;
}

}  // namespace

RemovedTemporaries remove_stale_temporaries(const std::string& final_path) {
  fs::path p(final_path);
  if (p.filename().empty()) p = p.parent_path();  // "dir/"
  const std::string name = p.filename().string();
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  RemovedTemporaries removed;
  if (name.empty()) return removed;
  std::vector<fs::path> stale;  // listed first, removed after
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const long pid = temporary_pid(e.path().filename().string(), name);
    if (pid > 0 && pid != ::getpid() && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH &&
        made_by_kktrain(e.path())) {
      stale.push_back(e.path());
    }
  }
  // A ".old" with nothing at p: a previous export that stepped aside for a new one when the
  // process was killed (io/export_safetensors.cpp without an atomic swap): put back, not removed.
  for (const fs::path& t : stale) {
    const std::string n = t.filename().string();
    if (n.size() > 4 && n.compare(n.size() - 4, 4, ".old") == 0 &&
        !fs::exists(fs::symlink_status(p, ec))) {
      fs::rename(t, p, ec);
      if (!ec) removed.restored = t.string();
      break;
    }
  }
  for (const fs::path& t : stale) {
    if (t.string() == removed.restored) continue;
    const int64_t bytes = bytes_under(t);
    fs::remove_all(t, ec);
    if (ec) continue;
    removed.paths.push_back(t.string());
    removed.bytes += bytes;
  }
  return removed;
}

bool export_directory_file(const std::string& n) {
  static const char* const kNames[] = {
      "config.json",           "model.safetensors.index.json", "tokenizer.json",
      "tokenizer_config.json", "special_tokens_map.json",      "chat_template.jinja",
      "tokenizer.model",       "adapter_config.json",          "adapter_model.safetensors"};
  for (const char* k : kNames) {
    if (n == k) return true;
  }
  const std::string suffix = ".safetensors";
  return n.size() >= 5 + suffix.size() && n.compare(0, 5, "model") == 0 &&
         n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string export_directory_target(const std::string& out) {
  fs::path p(out);
  if (p.filename().empty()) p = p.parent_path();  // "dir/"
  std::error_code ec;
  if (!fs::is_symlink(fs::symlink_status(p, ec))) return out;
  const fs::path target = fs::canonical(p, ec);
  return ec ? out : target.string();
}

std::string removed_temporaries_text(const RemovedTemporaries& removed) {
  std::string t;
  if (!removed.restored.empty()) {
    t = "put the previous version back from " + removed.restored + " (a killed process left it)";
  }
  if (removed.paths.empty()) return t;
  const std::size_t n = removed.paths.size();
  t += std::string(t.empty() ? "" : "; ") + "removed " + std::to_string(n) +
       (n == 1 ? " stale temporary" : " stale temporaries") + " of killed kktrain processes (" +
       std::to_string(removed.bytes) + " bytes): ";
  for (std::size_t k = 0; k < n; ++k) t += (k ? ", " : "") + removed.paths[k];
  return t;
}

}  // namespace kktrain
