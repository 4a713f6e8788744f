// The manifest of a derived cache (apps/dataprep/cache_manifest.hpp).
#include "apps/dataprep/cache_manifest.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/errors.hpp"
#include "core/files.hpp"

namespace kktrain {

using Json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full,
                   kP3 = 0x165667B19E3779F9ull, kP4 = 0x85EBCA77C2B2AE63ull,
                   kP5 = 0x27D4EB2F165667C5ull;

uint64_t rotl(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}
uint64_t round64(uint64_t acc, uint64_t input) {
  return rotl(acc + input * kP2, 31) * kP1;
}
uint64_t merge(uint64_t acc, uint64_t lane) {
  return (acc ^ round64(0, lane)) * kP1 + kP4;
}
uint64_t load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);  // little-endian hosts (as the caches' own files)
  return v;
}
uint32_t load32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

ContentHash::ContentHash() : lanes_{kP1 + kP2, kP2, 0, 0ull - kP1} {}

void ContentHash::update(const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  total_ += n;
  if (tail_n_ > 0) {
    const std::size_t take = std::min(n, 32 - tail_n_);
    std::memcpy(tail_ + tail_n_, p, take);
    tail_n_ += take;
    p += take;
    n -= take;
    if (tail_n_ < 32) return;
    for (int i = 0; i < 4; ++i) lanes_[i] = round64(lanes_[i], load64(tail_ + 8 * i));
    tail_n_ = 0;
  }
  for (; n >= 32; p += 32, n -= 32) {
    for (int i = 0; i < 4; ++i) lanes_[i] = round64(lanes_[i], load64(p + 8 * i));
  }
  std::memcpy(tail_, p, n);
  tail_n_ = n;
}

uint64_t ContentHash::digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = rotl(lanes_[0], 1) + rotl(lanes_[1], 7) + rotl(lanes_[2], 12) + rotl(lanes_[3], 18);
    for (int i = 0; i < 4; ++i) h = merge(h, lanes_[i]);
  } else {
    h = lanes_[2] + kP5;  // the seed (0) + P5
  }
  h += total_;
  const unsigned char* p = tail_;
  std::size_t n = tail_n_;
  for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ round64(0, load64(p)), 27) * kP1 + kP4;
  if (n >= 4) {
    h = rotl(h ^ (uint64_t(load32(p)) * kP1), 23) * kP2 + kP3;
    p += 4;
    n -= 4;
  }
  for (; n > 0; ++p, --n) h = rotl(h ^ (uint64_t(*p) * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

std::string ContentHash::hex() const {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(digest()));
  return hex;
}

std::string file_content_hash(const std::string& path, const std::string& key) {
  FileDescriptor fd;
  if (auto why = open_regular_file(&fd, path)) {  // "is a directory, not a file", ...
    throw InputError(key + " '" + path + "' " +
                     (why->rfind("is ", 0) == 0 ? *why : "cannot be read: " + *why));
  }
  ContentHash h;
  std::vector<unsigned char> buf(std::size_t(1) << 20);
  for (;;) {
    const ssize_t r = ::read(fd.get(), buf.data(), buf.size());
    if (r == 0) break;
    if (r < 0) {
      if (errno == EINTR) continue;
      throw InputError(key + " '" + path + "' cannot be read: " + std::strerror(errno));
    }
    h.update(buf.data(), static_cast<std::size_t>(r));
  }
  return h.hex();
}

Json manifest_file_stat(const std::string& path, const std::string& key) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw InputError(key + " '" + path + "' cannot be read: " + std::strerror(errno));
  }
  return Json::array({path, int64_t(st.st_size),
                      int64_t(st.st_mtim.tv_sec) * 1000000000 + int64_t(st.st_mtim.tv_nsec)});
}

Json manifest_file_entry(const std::string& path, const std::string& key) {
  Json e = manifest_file_stat(path, key);
  e.push_back(file_content_hash(path, key));
  return e;
}

Json read_manifest(const std::string& path) {
  // a regular file (core/files.hpp) of at most 64 MiB: a manifest lists a few hundred bytes a
  // data file; anything else is no manifest (the cache is made again)
  std::string text;
  if (read_regular_file(&text, path, std::size_t(64) << 20)) return nullptr;
  try {
    return Json::parse(text);
  } catch (const Json::exception&) {
    return nullptr;
  }
}

bool manifest_matches(const Json& have, const Json& want,
                      std::initializer_list<const char*> results) {
  if (!have.is_object()) return false;
  Json same = have;
  for (const char* k : results) same.erase(k);
  return same == want;
}

MadeDirectories::MadeDirectories(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> missing;
  for (fs::path p = fs::absolute(dir, ec).lexically_normal();
       p.has_relative_path() && !fs::exists(fs::symlink_status(p, ec)); p = p.parent_path()) {
    if (p.filename().empty()) continue;
    missing.push_back(p.string());
  }
  fs::create_directories(dir, ec);
  if (ec) throw RuntimeFailure("cannot create '" + dir + "': " + ec.message());
  made_ = std::move(missing);
}

MadeDirectories::~MadeDirectories() {
  std::error_code ec;
  for (const auto& d : made_) {
    if (fs::is_empty(d, ec)) fs::remove(d, ec);  // a directory with anything in it stays
  }
}

}  // namespace kktrain
