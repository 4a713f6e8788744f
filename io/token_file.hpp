// One token file, memory-mapped read-only and read in place: nothing of it is copied or widened
// up front, so a corpus of any size costs a mapping, and ranks on one node share its pages
// through the page cache.
//
//   text     bytes are the tokens (byte-level tokenizer, ids 0..255)
//   uint16   little-endian 2-byte ids (.u16, .uint16, headerless .bin)
//   uint32   little-endian 4-byte ids (.u32, .uint32)
//   llmc     llm.c / modded-nanogpt shards: a header of 256 little-endian int32 ([0] = 20240520,
//            [1] = version 1 (uint16 tokens), [2] = the token count), then the uint16 tokens
//
// A window is copied out of the mapping as int32 ids and the pages around it are dropped from
// this process's mapping right away (madvise DONTNEED over the aligned 2 MiB blocks it touched:
// the kernel maps neighbouring pages on a fault too; the pages stay in the page cache), so a long
// run's resident memory does not grow with the part of the corpus it has read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kktrain {

class TokenFile {
 public:
  // Maps `path` read as `format` (text, uint16, uint32, llmc; "auto" picks by extension, and a
  // .bin whose first int32 is llm.c's magic is an llm.c shard). InputError naming data.path, the
  // file and the reason: missing, not a regular file, empty, a size that is not a whole number
  // of tokens, an llm.c header of another version or a token count that disagrees with the size.
  TokenFile(const std::string& path, const std::string& format);
  // An in-memory stream (the embedded corpus, tests): int32 ids, owned.
  TokenFile(std::vector<int32_t> ids, const std::string& name);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  const std::string& format() const { return format_; }  // the format it was read as
  int64_t size() const { return n_; }                    // tokens
  int64_t max_id() const;  // the largest id the format can hold (255 for text)
  // out[0, n) = tokens [begin, begin + n) as int32; then drops the pages read from this process.
  void read(int64_t begin, int64_t n, int32_t* out) const;
  // The id at position i as the file stores it (for messages).
  uint64_t id_at(int64_t i) const;
  // The first position in [begin, begin + n) whose id is >= vocab, or -1 (reads in pieces,
  // dropping each piece's pages).
  int64_t first_at_least(int64_t begin, int64_t n, int64_t vocab) const;

 private:
  std::string path_, format_;
  int width_ = 1;        // bytes per token
  int64_t offset_ = 0;   // bytes before the first token (the llm.c header)
  int64_t n_ = 0;        // tokens
  void* map_ = nullptr;  // the whole file, read-only
  int64_t map_bytes_ = 0;
  std::vector<int32_t> owned_;  // in-memory streams
  const unsigned char* bytes() const;
  void release(int64_t byte_begin, int64_t byte_end) const;
};

// llm.c's shard header: magic, version, and its length in int32.
constexpr int32_t kLlmcMagic = 20240520;
constexpr int32_t kLlmcVersion = 1;
constexpr int64_t kLlmcHeaderInts = 256;

}  // namespace kktrain
