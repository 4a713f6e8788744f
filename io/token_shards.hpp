// Token shards in llm.c's format, written as a stream of documents (`kktrain tokenize`).
//
// A shard is a header of 256 little-endian int32 ([0] magic, [1] version, [2] the token count,
// the rest 0) followed by the ids, little-endian:
//   uint16   magic 20240520, version 1: llm.c's GPT-2 shards (every id of the vocabulary < 65536)
//   uint32   magic 20240801, version 7: llm.c's Llama 3 shards (HEADERS_INFO["llama-3"] in
//            karpathy/llm.c dev/data/data_common.py: {"magic": 20240801, "version": 7,
//            "token_dtype": np.uint32})
// The format is chosen once from the tokenizer's vocabulary size, so every shard of one run has
// the same one.
//
// Files: PREFIX_val_000000.bin first when val_tokens > 0 (whole documents until it holds at least
// val_tokens tokens), then PREFIX_000000.bin, PREFIX_000001.bin, ... of at most shard_tokens
// tokens each. A document never straddles two shards: one that does not fit in the current shard
// starts the next, and a document longer than shard_tokens gets a shard of its own (longer than
// shard_tokens). Each shard is written under a temporary name beside its final one
// (io/durable.hpp) and synced when complete; the shards take their final names together when the
// writer finishes, so a run killed at any moment (SIGKILL included) leaves no shard under a final
// name, only temporaries (remove_stale_shard_temporaries). A failure (a full disk) or discard()
// removes every shard of this writer, so a failed or stopped run leaves no shard of its own.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/files.hpp"
#include "io/durable.hpp"
#include "io/token_file.hpp"  // the headers' magic and version

namespace kktrain {

enum class ShardIds { uint16, uint32 };

// The largest token count a shard header holds (int32).
constexpr int64_t kMaxShardTokens = 0x7fffffff;

// uint16 when every id of a vocabulary of `vocab_size` ids (0 .. vocab_size - 1) fits 16 bits.
ShardIds shard_ids_for_vocab(int64_t vocab_size);
const char* shard_ids_name(ShardIds ids);  // "uint16", "uint32"

// The final names of shards: PREFIX_000003.bin, PREFIX_val_000000.bin.
std::string train_shard_name(const std::string& prefix, int64_t index);
std::string val_shard_name(const std::string& prefix, int64_t index);

// Existing files named as the shards of `prefix` would be (PREFIX_NNNNNN.bin,
// PREFIX_val_NNNNNN.bin, six or more digits), sorted: an earlier run's shards, which a new run
// must not mix with.
std::vector<std::string> existing_shards(const std::string& prefix);

// Removes the temporaries that killed runs left beside the shards of `prefix` (io/durable.hpp
// remove_stale_temporaries for each shard name that has one).
RemovedTemporaries remove_stale_shard_temporaries(const std::string& prefix);

struct ShardPlan {
  std::string prefix;
  ShardIds ids = ShardIds::uint16;
  int64_t shard_tokens = 100000000;  // per training shard (1 .. kMaxShardTokens)
  int64_t val_tokens = 0;            // at least this many tokens into the val shard; 0: none
};

class ShardWriter {
 public:
  // InternalError for a plan out of range (the command checks its options first).
  explicit ShardWriter(ShardPlan plan);
  // Removes the shard being written and, unless finish() returned, the shards completed.
  ~ShardWriter();
  // Stops: removes every shard of this writer now (completed or being written); returns how many
  // files it removed. The writer takes no more documents.
  int64_t discard();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Appends one document (ids in [0, 2^16) or [0, 2^32) by the plan's ids; an empty one writes
  // nothing). InputError when the document alone has more than kMaxShardTokens tokens or an id
  // does not fit; RuntimeFailure naming the file and the system's reason when a write fails.
  void add_document(const int32_t* ids, int64_t n);
  // Completes the last shard and gives every shard its final name. Returns the final names of
  // every shard written, val first.
  std::vector<std::string> finish();

  int64_t tokens() const { return tokens_; }                   // all shards
  int64_t val_tokens_written() const { return val_written_; }  // the val shard's
  int64_t train_shards() const { return next_train_; }         // started so far
  bool val_done() const { return plan_.val_tokens == 0 || val_written_ >= plan_.val_tokens; }

 private:
  ShardPlan plan_;
  int width_ = 2;
  // The shard being written: its final and temporary names, descriptor, token count, and the
  // ids not yet written to it.
  std::string final_, tmp_;
  FileDescriptor fd_;
  int64_t shard_n_ = 0;
  bool shard_is_val_ = false;
  std::vector<unsigned char> buf_;
  // Completed shards: (temporary, final name), renamed by finish() (the temporary then "").
  std::vector<std::pair<std::string, std::string>> done_;
  int64_t tokens_ = 0, val_written_ = 0, next_train_ = 0;
  bool finished_ = false, discarded_ = false;

  void open_shard(bool val);
  void close_shard();    // header, sync (finish() renames)
  int64_t remove_all();  // this writer's files; how many there were
  void flush();
  void write_at(const unsigned char* p, int64_t n, int64_t at);  // pwrite all, or throw
  [[noreturn]] void fail(const std::string& what, int err);
};

}  // namespace kktrain
