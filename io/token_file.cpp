// Token files read in place with pread (io/token_file.hpp).
#include "io/token_file.hpp"

#include <fcntl.h>
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

}  // namespace

TokenFile::TokenFile(std::vector<int32_t> ids, const std::string& name)
    : path_(name),
      format_("int32"),
      width_(4),
      n_(static_cast<int64_t>(ids.size())),
      owned_(std::move(ids)) {}

TokenFile::TokenFile(const std::string& path, const std::string& format) : path_(path) {
  // Only regular files, opened without blocking: a FIFO would block, a directory reads nothing.
  struct stat st {};
  if (auto why = open_regular_file(&fd_, path, &st)) {
    if (why->rfind("is ", 0) == 0) refuse(path, *why);
    throw InputError("data.path: cannot open '" + path + "': " + *why);
  }
  file_bytes_ = static_cast<int64_t>(st.st_size);
  mtime_s_ = static_cast<int64_t>(st.st_mtim.tv_sec);
  mtime_ns_ = static_cast<int64_t>(st.st_mtim.tv_nsec);
  if (file_bytes_ == 0) refuse(path, "is empty");
  ::posix_fadvise(fd_.get(), 0, 0, POSIX_FADV_RANDOM);  // windows, not a scan

  unsigned char head[12] = {};
  const int64_t head_bytes = std::min<int64_t>(file_bytes_, sizeof(head));
  pread_bytes(head, 0, head_bytes);
  format_ = format == "auto" ? format_by_name(path) : format;
  const int32_t magic_word = head_bytes >= 4 ? le_i32(head) : 0;
  const bool magic = magic_word == kLlmcMagic || magic_word == kLlmcMagicU32;
  if (format_ == "bin") format_ = magic ? "llmc" : "uint16";
  if (format_ == "llmc") {
    const int64_t header = kLlmcHeaderInts * 4;
    if (!magic || file_bytes_ < header) {
      refuse(path, "is not an llm.c token shard (no " + std::to_string(header) +
                       "-byte header starting with " + std::to_string(kLlmcMagic) + " or " +
                       std::to_string(kLlmcMagicU32) +
                       "; data.format: uint16 reads headerless tokens)");
    }
    // GPT-2 shards (uint16 ids) are version 1 of the first magic, Llama 3 shards (uint32 ids)
    // version 7 of the second (llm.c's dev/data/data_common.py).
    const bool u32 = magic_word == kLlmcMagicU32;
    const int32_t want = u32 ? kLlmcVersionU32 : kLlmcVersion;
    const int32_t version = le_i32(head + 4), count = le_i32(head + 8);
    if (version != want) {
      refuse(path, "is an llm.c token shard (magic " + std::to_string(magic_word) +
                       ") of version " + std::to_string(version) + "; kktrain reads version " +
                       std::to_string(want) + (u32 ? " (uint32 tokens)" : " (uint16 tokens)"));
    }
    width_ = u32 ? 4 : 2;
    const int64_t expect = header + width_ * static_cast<int64_t>(count);
    if (count < 0 || expect != file_bytes_) {
      refuse(path, "is an llm.c token shard whose header says " + std::to_string(count) +
                       " tokens (" + std::to_string(expect) +
                       " bytes with the header) but the file has " + std::to_string(file_bytes_) +
                       " bytes");
    }
    offset_ = header;
  } else {
    width_ = format_ == "uint32" ? 4 : format_ == "uint16" ? 2 : 1;
    if (file_bytes_ % width_ != 0) {
      refuse(path, "has " + std::to_string(file_bytes_) + " bytes, not a whole number of " +
                       format_ + " tokens (data.format: " + format_ + ")");
    }
  }
  n_ = (file_bytes_ - offset_) / width_;
  if (n_ == 0) refuse(path, "holds no tokens");
}

TokenFile::~TokenFile() = default;

int64_t TokenFile::max_id() const {
  if (!owned_.empty() || !fd_.valid()) return 0x7fffffff;
  return width_ == 1 ? 255 : width_ == 2 ? 65535 : 0xffffffffLL;
}

void TokenFile::check_unchanged() const {
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0) {
    throw RuntimeFailure("data file '" + path_ + "': cannot stat: " + std::strerror(errno));
  }
  const int64_t bytes = static_cast<int64_t>(st.st_size);
  const bool resized = bytes != file_bytes_;
  if (!resized && st.st_mtim.tv_sec == mtime_s_ && st.st_mtim.tv_nsec == mtime_ns_) return;
  throw RuntimeFailure(
      "data file '" + path_ + "' changed during the run (" +
      (resized ? "size " + std::to_string(file_bytes_) + " -> " + std::to_string(bytes) + " bytes"
               : "same size, " + std::to_string(bytes) + " bytes, rewritten") +
      "): token files are read in place and must not change while a run reads them; restore it "
      "(or point data.path at the new file) and resume from the last checkpoint");
}

void TokenFile::pread_bytes(unsigned char* out, int64_t at, int64_t bytes) const {
  int64_t done = 0;
  while (done < bytes) {
    const ssize_t r = ::pread(fd_.get(), out + done, static_cast<std::size_t>(bytes - done),
                              static_cast<off_t>(at + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      check_unchanged();
      throw RuntimeFailure("data file '" + path_ + "': cannot read: " + std::strerror(err));
    }
    if (r == 0) break;  // shorter than when opened: check_unchanged says so
    done += r;
  }
  check_unchanged();
  if (done < bytes) {
    throw RuntimeFailure("data file '" + path_ + "' ends at byte " + std::to_string(at + done) +
                         ", before the " + std::to_string(file_bytes_) +
                         " bytes it had when opened");
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
  const int64_t chunk = kTokenReadChunkBytes / width_;  // tokens per pread
  std::vector<unsigned char> raw(static_cast<std::size_t>(std::min(n, chunk) * width_));
  for (int64_t at = 0; at < n; at += chunk) {
    const int64_t m = std::min(chunk, n - at);
    pread_bytes(raw.data(), offset_ + (begin + at) * width_, m * width_);
    for (int64_t i = 0; i < m; ++i) {
      const unsigned char* q = raw.data() + i * width_;
      uint32_t v = q[0];
      if (width_ >= 2) v |= static_cast<uint32_t>(q[1]) << 8;
      if (width_ == 4) v |= static_cast<uint32_t>(q[2]) << 16 | static_cast<uint32_t>(q[3]) << 24;
      out[at + i] = v > 0x7fffffffu ? -1 : static_cast<int32_t>(v);  // -1: caught by the id check
    }
  }
}

uint64_t TokenFile::id_at(int64_t i) const {
  if (!owned_.empty()) return static_cast<uint64_t>(owned_.at(i));
  unsigned char q[4] = {};
  pread_bytes(q, offset_ + i * width_, width_);
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
