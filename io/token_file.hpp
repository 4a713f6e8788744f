// One token file, read in place with pread: nothing of it is copied or widened up front, so a
// corpus of any size costs an open file, and ranks on one node share its pages through the page
// cache.
//
//   text     bytes are the tokens (byte-level tokenizer, ids 0..255)
//   uint16   little-endian 2-byte ids (.u16, .uint16, headerless .bin)
//   uint32   little-endian 4-byte ids (.u32, .uint32)
//   llmc     llm.c / modded-nanogpt shards: a header of 256 little-endian int32 ([0] magic,
//            [1] version, [2] the token count), then the tokens: 20240520 version 1 for uint16
//            tokens (GPT-2), 20240801 version 7 for uint32 tokens (Llama 3; io/token_shards.hpp)
//
// A window is read (pread, in pieces of at most kTokenReadChunkBytes) and widened to int32 ids;
// no page of the file is mapped into the process, so a long run's resident memory does not grow
// with the part of the corpus it has read. A file truncated or rewritten while it is read (a
// corpus replaced under a long run) cannot fault the process as a mapping would (SIGBUS): each
// read checks the file's size and modification time against those it was opened with, and a
// change is a RuntimeFailure naming the file, before any token read after the change is used.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/files.hpp"

namespace kktrain {

// The largest piece of a token file one pread reads (the buffer a read holds besides its output).
constexpr int64_t kTokenReadChunkBytes = int64_t(64) << 10;

class TokenFile {
 public:
  // Opens `path` read as `format` (text, uint16, uint32, llmc; "auto" picks by extension, and a
  // .bin whose first int32 is llm.c's magic is an llm.c shard). InputError naming data.path, the
  // file and the reason: missing, not a regular file (opened without blocking: a FIFO is refused,
  // core/files.hpp), empty, a size that is not a whole number of tokens, an llm.c header of
  // another version or a token count that disagrees with the size.
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
  // out[0, n) = tokens [begin, begin + n) as int32. RuntimeFailure naming the file when it
  // changed since it was opened (size or modification time; "data file 'X' changed during the
  // run (size A -> B bytes): ...") or cannot be read.
  void read(int64_t begin, int64_t n, int32_t* out) const;
  // The id at position i as the file stores it (for messages; errors as read).
  uint64_t id_at(int64_t i) const;
  // The first position in [begin, begin + n) whose id is >= vocab, or -1 (reads in pieces).
  int64_t first_at_least(int64_t begin, int64_t n, int64_t vocab) const;

 private:
  std::string path_, format_;
  int width_ = 1;                       // bytes per token
  int64_t offset_ = 0;                  // bytes before the first token (the llm.c header)
  int64_t n_ = 0;                       // tokens
  FileDescriptor fd_;                   // the file, opened as a regular file
  int64_t file_bytes_ = 0;              // its size when opened
  int64_t mtime_s_ = 0, mtime_ns_ = 0;  // its modification time when opened
  std::vector<int32_t> owned_;          // in-memory streams
  // out[0, bytes) = file bytes [at, at + bytes); RuntimeFailure when the file changed or
  // cannot be read (checked after reading, so no byte read after a change is returned).
  void pread_bytes(unsigned char* out, int64_t at, int64_t bytes) const;
  // RuntimeFailure when the file's size or modification time differs from when it was opened.
  void check_unchanged() const;
};

// llm.c's shard header: magic, version, and its length in int32 (GPT-2: uint16 tokens; Llama 3:
// uint32 tokens, llm.c's dev/data/data_common.py HEADERS_INFO).
constexpr int32_t kLlmcMagic = 20240520;
constexpr int32_t kLlmcVersion = 1;
constexpr int32_t kLlmcMagicU32 = 20240801;
constexpr int32_t kLlmcVersionU32 = 7;
constexpr int64_t kLlmcHeaderInts = 256;

}  // namespace kktrain
