// Training data: a byte-level tokenizer, loaders for text and pre-tokenized binary token files,
// the embedded default corpus, a train/validation split and deterministic batch sampling.
//
// Sampling is global: window k of optimizer step s (k in [0, data.global_batch_size)) starts at a
// position drawn from (data.seed, s, k). Each rank and micro-batch takes a contiguous slice of
// those windows, so the global batch is the same samples however it is split into micro-batches
// and ranks, and a run and its resume see the same batches, whatever happened in between.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.hpp"

namespace kktrain {

// Byte-level tokenizer: token id = byte value (vocab 256).
std::vector<int32_t> byte_tokenize(const std::string& text);
std::string byte_detokenize(const std::vector<int32_t>& ids);

// The embedded default corpus: English-like text generated deterministically from `seed` (a
// small grammar over a fixed vocabulary), `bytes` long. No download, same bytes everywhere.
std::string default_corpus(std::size_t bytes, uint64_t seed = 2024);

struct Batch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> ids;      // (B, T)
  std::vector<int32_t> targets;  // (B, T): ids shifted by one
};

class TokenDataset {
 public:
  // Loads data.path (or the default corpus when null) and splits it. Throws InputError naming
  // the file for a missing, unreadable, empty or too short file, or token ids >= vocab_size.
  static TokenDataset load(const DataConfig& cfg, int64_t vocab_size);
  // From an in-memory token stream (tests).
  static TokenDataset from_tokens(std::vector<int32_t> tokens, const DataConfig& cfg,
                                  const std::string& source);

  // Windows [first, first + B) of optimizer step `step`'s global batch: B windows of T + 1
  // tokens from the training split, window k at a position drawn from (seed, step, k). Rank r of
  // W takes micro-batch m as first = r * (global / W) + m * B.
  Batch train_batch(int64_t step, int64_t first, int64_t B, int64_t T) const;
  // Validation windows [first, first + count) (window k at a position drawn from (seed, k)),
  // padded to B rows whose targets are all ignored (-1) when count < B.
  Batch val_windows(int64_t first, int64_t count, int64_t B, int64_t T) const;
  // Validation batch `index`: windows [index * B, (index + 1) * B).
  Batch val_batch(int64_t index, int64_t B, int64_t T) const {
    return val_windows(index * B, B, B, T);
  }

  int64_t train_tokens() const { return n_train_; }
  int64_t val_tokens() const { return static_cast<int64_t>(tokens_.size()) - n_train_; }
  bool has_validation() const { return val_tokens() > 0; }
  const std::string& source() const { return source_; }

 private:
  // Rows [0, count) are windows first.. of the split [begin, begin + len) keyed by (stream, key);
  // rows [count, B) repeat row 0's tokens with ignored targets.
  Batch window_batch(int64_t begin, int64_t len, uint64_t stream, uint64_t key, int64_t first,
                     int64_t count, int64_t B, int64_t T) const;
  std::vector<int32_t> tokens_;
  int64_t n_train_ = 0;
  uint64_t seed_ = 0;
  std::string source_;
};

}  // namespace kktrain
