// The manifest beside a cache kktrain derives from its inputs as a run starts (the token shards of
// a text corpus, apps/dataprep/text_data.hpp; the rendered examples,
// apps/dataprep/example_cache.hpp): what the cache was made from, each input file by path, size,
// modification time and a 64-bit hash of its content, so that a restart reuses the cache exactly
// while nothing it was made from changed (an edit that keeps the size and restores the modification
// time, as `cp -p`, `rsync -t` or `touch -d` do, changes the hash).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace kktrain {

// A 64-bit hash of a byte stream, fed in pieces of any size (the result depends only on the
// bytes): XXH64's rounds over 32-byte stripes (4 lanes), then its avalanche. Not cryptographic: it
// tells an edited file from the one a cache was made from, not a forged one.
class ContentHash {
 public:
  ContentHash();
  void update(const void* data, std::size_t n);
  uint64_t digest() const;
  std::string hex() const;  // digest() as 16 hex digits

 private:
  uint64_t lanes_[4];
  unsigned char tail_[32];
  std::size_t tail_n_ = 0;
  uint64_t total_ = 0;
};

// The hash of a regular file's content as 16 hex digits (read in 1 MiB pieces). InputError
// "KEY 'PATH' is a directory, not a file" (a FIFO, a device: never waited on) or "KEY 'PATH'
// cannot be read: WHY" when it is not a readable regular file.
std::string file_content_hash(const std::string& path, const std::string& key);

// A file's identity: [path, size, modification time in ns, content hash]. InputError as
// file_content_hash's when it cannot be read (`key` names the setting the path came
// from).
nlohmann::json manifest_file_entry(const std::string& path, const std::string& key);
// The same without the hash ([path, size, modification time in ns]), for an input whose reader
// hashes it while it reads it anyway (append ContentHash::hex() of what it read). InputError
// "KEY 'PATH' cannot be read: WHY" when stat fails.
nlohmann::json manifest_file_stat(const std::string& path, const std::string& key);
// The manifest at `path`, or null when it is absent or not JSON.
nlohmann::json read_manifest(const std::string& path);
// Whether `have` (a manifest read back) describes what `want` does, ignoring the keys in
// `results` (what making the cache added: counts, file lists).
bool manifest_matches(const nlohmann::json& have, const nlohmann::json& want,
                      std::initializer_list<const char*> results);

// The directories a cache makes for itself (`dir` and every missing directory above it), removed
// again (each only while empty) unless keep() is called: a run that fails before its cache is
// made leaves no output directory behind.
class MadeDirectories {
 public:
  // Creates `dir` and the missing directories above it; RuntimeFailure naming `dir` when it cannot.
  explicit MadeDirectories(const std::string& dir);
  ~MadeDirectories();
  MadeDirectories(const MadeDirectories&) = delete;
  MadeDirectories& operator=(const MadeDirectories&) = delete;
  void keep() { made_.clear(); }

 private:
  std::vector<std::string> made_;  // deepest first
};

}  // namespace kktrain
