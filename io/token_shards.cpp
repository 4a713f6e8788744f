// llm.c-format token shards written as a stream of documents (io/token_shards.hpp).
#include "io/token_shards.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/errors.hpp"
#include "io/durable.hpp"
#include "io/token_file.hpp"

namespace kktrain {

namespace fs = std::filesystem;

namespace {

// The ids a shard buffers before writing them.
constexpr std::size_t kShardBufferBytes = std::size_t(1) << 20;

void put_le(unsigned char* p, uint32_t v, int width) {
  for (int b = 0; b < width; ++b) p[b] = static_cast<unsigned char>(v >> (8 * b));
}

std::string numbered(const std::string& prefix, const char* middle, int64_t index) {
  char digits[32];
  std::snprintf(digits, sizeof(digits), "%06lld", static_cast<long long>(index));
  return prefix + middle + digits + ".bin";
}

// True when `name` is `stem` followed by six or more digits and ".bin".
bool is_numbered(const std::string& name, const std::string& stem) {
  if (name.size() < stem.size() + 6 + 4 || name.compare(0, stem.size(), stem) != 0) return false;
  if (name.compare(name.size() - 4, 4, ".bin") != 0) return false;
  const std::string digits = name.substr(stem.size(), name.size() - stem.size() - 4);
  return digits.find_first_not_of("0123456789") == std::string::npos;
}

}  // namespace

ShardIds shard_ids_for_vocab(int64_t vocab_size) {
  return vocab_size <= 65536 ? ShardIds::uint16 : ShardIds::uint32;
}

const char* shard_ids_name(ShardIds ids) {
  return ids == ShardIds::uint16 ? "uint16" : "uint32";
}

std::string train_shard_name(const std::string& prefix, int64_t index) {
  return numbered(prefix, "_", index);
}

std::string val_shard_name(const std::string& prefix, int64_t index) {
  return numbered(prefix, "_val_", index);
}

std::vector<std::string> existing_shards(const std::string& prefix) {
  const fs::path p(prefix);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const std::string base = p.filename().string();
  std::vector<std::string> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (is_numbered(name, base + "_") || is_numbered(name, base + "_val_")) {
      found.push_back((p.has_parent_path() ? dir / name : fs::path(name)).string());
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

ShardWriter::ShardWriter(ShardPlan plan) : plan_(std::move(plan)) {
  if (plan_.shard_tokens < 1 || plan_.shard_tokens > kMaxShardTokens || plan_.val_tokens < 0 ||
      plan_.val_tokens > kMaxShardTokens || plan_.prefix.empty()) {
    throw InternalError("shard plan out of range");
  }
  width_ = plan_.ids == ShardIds::uint16 ? 2 : 4;
  buf_.reserve(kShardBufferBytes);
}

RemovedTemporaries remove_stale_shard_temporaries(const std::string& prefix) {
  const fs::path p(prefix);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const std::string base = p.filename().string();
  std::vector<std::string> finals;  // the shard names that have a temporary
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::size_t tmp = name.rfind(".tmp.");
    if (name.size() < 2 || name[0] != '.' || tmp == std::string::npos) continue;
    const std::string shard = name.substr(1, tmp - 1);
    if (is_numbered(shard, base + "_") || is_numbered(shard, base + "_val_")) {
      finals.push_back((p.has_parent_path() ? dir / shard : fs::path(shard)).string());
    }
  }
  std::sort(finals.begin(), finals.end());
  finals.erase(std::unique(finals.begin(), finals.end()), finals.end());
  RemovedTemporaries all;
  for (const auto& f : finals) {
    RemovedTemporaries r = remove_stale_temporaries(f);
    all.paths.insert(all.paths.end(), r.paths.begin(), r.paths.end());
    all.bytes += r.bytes;
  }
  return all;
}

ShardWriter::~ShardWriter() {
  remove_all();
}

int64_t ShardWriter::remove_all() {
  fd_.reset();
  int64_t n = 0;
  if (!tmp_.empty()) n += ::unlink(tmp_.c_str()) == 0;
  tmp_.clear();
  for (const auto& [tmp, final_name] : done_) {
    if (!tmp.empty()) {
      n += ::unlink(tmp.c_str()) == 0;
    } else if (!finished_) {
      n += ::unlink(final_name.c_str()) == 0;
    }
  }
  if (!finished_) done_.clear();
  return n;
}

int64_t ShardWriter::discard() {
  const int64_t n = remove_all();
  finished_ = true;  // nothing left to remove, no more documents
  discarded_ = true;
  return n;
}

void ShardWriter::fail(const std::string& what, int err) {
  throw RuntimeFailure("cannot " + what + " '" + tmp_ + "' (the shard '" + final_ +
                       "' being written): " + std::strerror(err) +
                       "; no shard of this run was kept");
}

void ShardWriter::write_at(const unsigned char* p, int64_t n, int64_t at) {
  int64_t done = 0;
  while (done < n) {
    const ssize_t w = ::pwrite(fd_.get(), p + done, static_cast<std::size_t>(n - done),
                               static_cast<off_t>(at + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail("write", w < 0 ? errno : ENOSPC);
    done += w;
  }
}

void ShardWriter::open_shard(bool val) {
  shard_is_val_ = val;
  final_ = val ? val_shard_name(plan_.prefix, 0) : train_shard_name(plan_.prefix, next_train_++);
  tmp_ = temporary_name(final_);
  const int fd = ::open(tmp_.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    const std::string tmp = tmp_;
    tmp_.clear();  // nothing of ours to remove
    throw RuntimeFailure("cannot create '" + tmp + "' (the shard '" + final_ +
                         "'): " + std::strerror(err));
  }
  fd_ = FileDescriptor(fd);
  shard_n_ = 0;
  const std::vector<unsigned char> header(static_cast<std::size_t>(kLlmcHeaderInts * 4), 0);
  write_at(header.data(), int64_t(header.size()), 0);  // the real one when complete
}

void ShardWriter::flush() {
  if (buf_.empty()) return;
  const int64_t at = kLlmcHeaderInts * 4 + (shard_n_ * width_ - int64_t(buf_.size()));
  write_at(buf_.data(), int64_t(buf_.size()), at);
  buf_.clear();
}

void ShardWriter::close_shard() {
  flush();
  unsigned char head[12];
  const bool u16 = plan_.ids == ShardIds::uint16;
  put_le(head, uint32_t(u16 ? kLlmcMagic : kLlmcMagicU32), 4);
  put_le(head + 4, uint32_t(u16 ? kLlmcVersion : kLlmcVersionU32), 4);
  put_le(head + 8, uint32_t(shard_n_), 4);
  write_at(head, sizeof(head), 0);
  if (::fsync(fd_.get()) != 0) fail("sync", errno);  // the data is on disk: close cannot lose it
  fd_.reset();
  done_.emplace_back(tmp_, final_);
  tmp_.clear();
}

void ShardWriter::add_document(const int32_t* ids, int64_t n) {
  if (discarded_) throw InternalError("a document added to a discarded shard writer");
  if (n <= 0) return;
  if (n > kMaxShardTokens) {
    throw InputError("a document of " + std::to_string(n) + " tokens does not fit one shard (" +
                     "an llm.c header counts at most " + std::to_string(kMaxShardTokens) +
                     " tokens): split it into smaller documents");
  }
  const bool val = !val_done();
  if (fd_.valid() && shard_is_val_ != val) close_shard();
  if (fd_.valid() && !val && shard_n_ + n > plan_.shard_tokens) close_shard();
  if (fd_.valid() && val && shard_n_ + n > kMaxShardTokens) {
    throw InputError("the val shard would exceed " + std::to_string(kMaxShardTokens) +
                     " tokens: lower --val-tokens");
  }
  if (!fd_.valid()) open_shard(val);
  const uint32_t limit = plan_.ids == ShardIds::uint16 ? 0xffffu : 0xffffffffu;
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || uint32_t(ids[i]) > limit) {
      throw InternalError("token id " + std::to_string(ids[i]) + " does not fit a " +
                          shard_ids_name(plan_.ids) + " shard");
    }
    if (buf_.size() + 4 > kShardBufferBytes) flush();  // counted in shard_n_ already
    const std::size_t at = buf_.size();
    buf_.resize(at + std::size_t(width_));
    put_le(buf_.data() + at, uint32_t(ids[i]), width_);
    ++shard_n_;
  }
  tokens_ += n;
  if (val) val_written_ += n;
}

std::vector<std::string> ShardWriter::finish() {
  if (discarded_) throw InternalError("finish() of a discarded shard writer");
  if (fd_.valid()) close_shard();
  std::vector<std::string> names;
  for (auto& [tmp, final_name] : done_) {
    std::error_code ec;
    fs::rename(tmp, final_name, ec);
    if (ec) {
      throw RuntimeFailure("cannot rename '" + tmp + "' to '" + final_name + "': " + ec.message() +
                           "; no shard of this run was kept");
    }
    tmp.clear();
    names.push_back(final_name);
  }
  const fs::path dir = fs::path(plan_.prefix).parent_path();
  fsync_path(dir.empty() ? "." : dir.string(), FsyncTarget::directory);
  finished_ = true;
  return names;
}

}  // namespace kktrain
