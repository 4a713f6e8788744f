// Token files mapped read-only (io/token_file.hpp).
#include "io/token_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/errors.hpp"
#include "core/files.hpp"
#include "core/strings.hpp"

namespace kktrain {

namespace {

[[noreturn]] void refuse(const std::string& path, const std::string& what) {
  throw InputError("data.path: '" + path + "' " + what);
}

int32_t le_i32(const unsigned char* p) {
  return static_cast<int32_t>(static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                              static_cast<uint32_t>(p[2]) << 16 |
                              static_cast<uint32_t>(p[3]) << 24);
}

std::string format_by_name(const std::string& p) {
  if (ends_with(p, ".u32") || ends_with(p, ".uint32")) return "uint32";
  if (ends_with(p, ".u16") || ends_with(p, ".uint16")) return "uint16";
  if (ends_with(p, ".bin")) return "bin";  // llm.c shard or headerless uint16: by its magic
  return "text";
}

// What a window's read may have mapped: the kernel maps the pages around a faulting one too
// ("fault-around", 64 KiB aligned blocks by default; huge pages of 2 MiB where the file system
// gives them), so the whole aligned 2 MiB blocks around a window are dropped, not only its pages.
constexpr int64_t kReleaseBlock = int64_t(2) << 20;

}  // namespace

TokenFile::TokenFile(std::vector<int32_t> ids, const std::string& name)
    : path_(name),
      format_("int32"),
      width_(4),
      n_(static_cast<int64_t>(ids.size())),
      owned_(std::move(ids)) {}

TokenFile::TokenFile(const std::string& path, const std::string& format) : path_(path) {
  // Only regular files: a FIFO would block, a directory maps to nothing.
  if (auto why = unreadable_regular_file(path)) {
    if (why->rfind("is ", 0) == 0) refuse(path, *why);
    throw InputError("data.path: cannot open '" + path + "': " + *why);
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError("data.path: cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  const int r = ::fstat(fd, &st);
  const int err = errno;
  if (r != 0) {
    ::close(fd);
    throw InputError("data.path: cannot stat '" + path + "': " + std::strerror(err));
  }
  map_bytes_ = static_cast<int64_t>(st.st_size);
  if (map_bytes_ == 0) {
    ::close(fd);
    refuse(path, "is empty");
  }
  map_ = ::mmap(nullptr, static_cast<std::size_t>(map_bytes_), PROT_READ, MAP_SHARED, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw InputError("data.path: cannot map '" + path + "': " + std::strerror(map_err));
  }
  ::madvise(map_, static_cast<std::size_t>(map_bytes_), MADV_RANDOM);  // windows, not a scan

  format_ = format == "auto" ? format_by_name(path) : format;
  const bool magic = map_bytes_ >= 4 && le_i32(bytes()) == kLlmcMagic;
  if (format_ == "bin") format_ = magic ? "llmc" : "uint16";
  if (format_ == "llmc") {
    const int64_t header = kLlmcHeaderInts * 4;
    if (!magic || map_bytes_ < header) {
      refuse(path, "is not an llm.c token shard (no " + std::to_string(header) +
                       "-byte header starting with " + std::to_string(kLlmcMagic) +
                       "; data.format: uint16 reads headerless tokens)");
    }
    const int32_t version = le_i32(bytes() + 4), count = le_i32(bytes() + 8);
    if (version != kLlmcVersion) {
      refuse(path, "is an llm.c token shard of version " + std::to_string(version) +
                       "; kktrain reads version 1 (uint16 tokens)");
    }
    if (count < 0 || header + 2 * static_cast<int64_t>(count) != map_bytes_) {
      refuse(path, "is an llm.c token shard whose header says " + std::to_string(count) +
                       " tokens (" + std::to_string(header + 2 * static_cast<int64_t>(count)) +
                       " bytes with the header) but the file has " + std::to_string(map_bytes_) +
                       " bytes");
    }
    width_ = 2;
    offset_ = header;
  } else {
    width_ = format_ == "uint32" ? 4 : format_ == "uint16" ? 2 : 1;
    if (map_bytes_ % width_ != 0) {
      refuse(path, "has " + std::to_string(map_bytes_) + " bytes, not a whole number of " +
                       format_ + " tokens (data.format: " + format_ + ")");
    }
  }
  n_ = (map_bytes_ - offset_) / width_;
  if (n_ == 0) refuse(path, "holds no tokens");
}

TokenFile::~TokenFile() {
  if (map_) ::munmap(map_, static_cast<std::size_t>(map_bytes_));
}

const unsigned char* TokenFile::bytes() const {
  return static_cast<const unsigned char*>(map_);
}

int64_t TokenFile::max_id() const {
  if (!owned_.empty() || map_ == nullptr) return 0x7fffffff;
  return width_ == 1 ? 255 : width_ == 2 ? 65535 : 0xffffffffLL;
}

void TokenFile::release(int64_t byte_begin, int64_t byte_end) const {
  const int64_t lo = byte_begin / kReleaseBlock * kReleaseBlock;
  const int64_t hi =
      std::min(map_bytes_, (byte_end + kReleaseBlock - 1) / kReleaseBlock * kReleaseBlock);
  if (hi > lo) {
    ::madvise(static_cast<char*>(map_) + lo, static_cast<std::size_t>(hi - lo), MADV_DONTNEED);
  }
}

void TokenFile::read(int64_t begin, int64_t n, int32_t* out) const {
  if (begin < 0 || n < 0 || begin + n > n_) {
    throw InternalError("tokens [" + std::to_string(begin) + ", " + std::to_string(begin + n) +
                        ") of '" + path_ + "' with " + std::to_string(n_));
  }
  if (!owned_.empty()) {
    std::copy(owned_.begin() + begin, owned_.begin() + begin + n, out);
    return;
  }
  const unsigned char* p = bytes() + offset_ + begin * width_;
  for (int64_t i = 0; i < n; ++i) {
    const unsigned char* q = p + i * width_;
    uint32_t v = q[0];
    if (width_ >= 2) v |= static_cast<uint32_t>(q[1]) << 8;
    if (width_ == 4) v |= static_cast<uint32_t>(q[2]) << 16 | static_cast<uint32_t>(q[3]) << 24;
    out[i] = v > 0x7fffffffu ? -1 : static_cast<int32_t>(v);  // -1: caught by the id check
  }
  release(offset_ + begin * width_, offset_ + (begin + n) * width_);
}

uint64_t TokenFile::id_at(int64_t i) const {
  if (!owned_.empty()) return static_cast<uint64_t>(owned_.at(i));
  const unsigned char* q = bytes() + offset_ + i * width_;
  uint64_t v = 0;
  for (int b = 0; b < width_; ++b) v |= static_cast<uint64_t>(q[b]) << (8 * b);
  return v;
}

int64_t TokenFile::first_at_least(int64_t begin, int64_t n, int64_t vocab) const {
  std::vector<int32_t> piece;
  const int64_t step = int64_t(1) << 18;
  for (int64_t at = begin; at < begin + n; at += step) {
    const int64_t m = std::min(step, begin + n - at);
    piece.resize(static_cast<std::size_t>(m));
    read(at, m, piece.data());
    for (int64_t i = 0; i < m; ++i) {
      if (piece[i] < 0 || piece[i] >= vocab) return at + i;
    }
  }
  return -1;
}

}  // namespace kktrain
