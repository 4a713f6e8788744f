// Examples for supervised fine-tuning (data.format chat or prompt_completion), tokenized once
// into a cache (apps/dataprep/example_cache.hpp writes it as the run starts) and drawn from it in
// epochs.
//
// The cache, per split (train, val), two files:
//   <prefix>.tokens  uint32 little-endian per token: id | (1 << 31) when the token is a loss
//                    target (its prediction from the token before it counts in the loss)
//                    | (1 << 30) at a preference pair's rejected side's first token
//   <prefix>.index   a header of 4 uint64 (magic, version, examples, tokens), then per example
//                    {uint64 first token, uint32 length, uint32 loss tokens}
// The index is mapped read-only (16 bytes per example in the page cache, which the kernel may
// drop; only packed rows take heap memory per example, see Rows); an example's tokens are read with
// pread when it is drawn.
//
// Rows. A row holds data.seq_len (T) positions. An example of n tokens takes n consecutive
// positions p..p+n-1: ids are its tokens, the target at p+i is token i+1 when that token is a
// loss target (else -1), the target at p+n-1 is -1, and every position's row start is p (its
// attention sees only its own example, its rotary position is the offset in it). Positions after
// the last example are padding: id 0, target -1, and one start for all of them (the position after
// the last example). A split's rows are made once, as the data opens:
//   Packing::one_per_row  one example a row: row r is example r (no memory).
//   Packing::first_fit    examples in file order, each into the first of the open rows where it
//                         fits, else a new row; when more than kOpenRows rows are open the oldest
//                         is closed (first fit over a window of kOpenRows rows); at the end the
//                         open rows close in order. The rows are kept (4 bytes an example and 4 a
//                         row of heap), as TRL packs a dataset once before training.
// Epochs. Epoch e orders the training rows (R) by a seeded permutation of (data.seed, e) (a
// Feistel bijection: no per-row memory) and cuts them into steps of data.global_batch_size (G)
// rows; the last step of an epoch is filled with empty rows. Every example is seen once an epoch,
// and every epoch is ceil(R / G) steps: the steps of any number of epochs, and the epoch of any
// step, are a product and a division (constant time whatever the epoch count). A step's rows
// are a pure function of (seed, step), so a resume draws exactly the batches an uninterrupted
// run would, on any rank count; rank r of W takes micro-batch m as rows first = r * (G / W) +
// m * B, like windows (io/data.hpp).
// The loss of a step is the mean over the loss tokens of all its G rows: every rank counts them
// from the index (no communication) and Batch::loss_tokens carries the count.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/files.hpp"
#include "io/data.hpp"

namespace kktrain {

enum class Packing { one_per_row, first_fit };
// ExampleWriter::add's and ExampleFile::read's loss value at a preference pair's rejected side's
// first token (stored as bit 30 of its word; the side starts a sequence of its own in a row).
constexpr uint8_t kSideStartMark = 2;
// The loss value at a pair's chosen side's first own token when the pair's sides share their
// prompt (the tokens before it; stored as bits 31 and 30): the rejected side then sees the
// prompt and not the chosen side.
constexpr uint8_t kSharedPromptMark = 3;
constexpr int64_t kOpenRows = 64;

// Writes one split of the cache: add() examples in order, then finish() (durable; until then
// the files are <prefix>.*.part).
class ExampleWriter {
 public:
  explicit ExampleWriter(std::string prefix);
  ~ExampleWriter();
  ExampleWriter(const ExampleWriter&) = delete;
  ExampleWriter& operator=(const ExampleWriter&) = delete;
  // ids (n, each < 2^30) and loss (n, 0/1: token i is a loss target; kSideStartMark: a pair's
  // rejected side starts at token i; loss[0] is ignored).
  void add(const std::vector<int32_t>& ids, const std::vector<uint8_t>& loss);
  void finish();
  int64_t examples() const { return examples_; }
  int64_t tokens() const { return tokens_; }
  int64_t loss_tokens() const { return loss_tokens_; }

 private:
  struct Files;
  std::string prefix_;
  std::unique_ptr<Files> files_;
  int64_t examples_ = 0, tokens_ = 0, loss_tokens_ = 0;
};

// One split of the cache, read as described above. Errors name the file.
class ExampleFile {
 public:
  explicit ExampleFile(const std::string& prefix);
  ~ExampleFile();
  ExampleFile(const ExampleFile&) = delete;
  ExampleFile& operator=(const ExampleFile&) = delete;
  int64_t size() const { return n_; }
  int64_t tokens() const { return tokens_; }
  int64_t length(int64_t i) const;
  int64_t loss_tokens(int64_t i) const;
  // ids[0, length(i)) and loss[0, length(i)) of example i.
  void read(int64_t i, int32_t* ids, uint8_t* loss) const;
  const std::string& prefix() const { return prefix_; }

 private:
  const unsigned char* entry(int64_t i) const;
  std::string prefix_;
  int64_t n_ = 0, tokens_ = 0;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
  FileDescriptor tokens_fd_;
};

// Position k of epoch e's order of n examples: a bijection of [0, n) keyed by (seed, e).
int64_t epoch_position(uint64_t seed, int64_t epoch, int64_t n, int64_t k);

// Rows of examples from one order (the examples' indices per row), as described above.
class RowPacker {
 public:
  // order(k): the example at position k of n; rows of T positions.
  RowPacker(const ExampleFile& file, Packing packing, int64_t T, uint64_t seed, int64_t epoch,
            bool shuffled);
  // The next row's examples; false at the order's end.
  bool next(std::vector<int64_t>* row);
  int64_t rows_made() const { return rows_; }

 private:
  struct Open {
    int64_t used = 0;
    std::vector<int64_t> examples;
  };
  int64_t example_at(int64_t k) const;
  const ExampleFile& file_;
  Packing packing_;
  int64_t T_;
  uint64_t seed_;
  int64_t epoch_;
  bool shuffled_;
  int64_t next_ = 0, rows_ = 0;
  std::vector<Open> open_;  // oldest first, at most kOpenRows + 1
};

class ExampleData {
 public:
  // The cache's splits under `dir` (train; val when present), rows of cfg.seq_len, packing.
  ExampleData(const std::string& dir, const DataConfig& cfg);
  ~ExampleData();
  ExampleData(ExampleData&&) noexcept;

  int64_t train_examples() const;
  int64_t val_examples() const;
  // Steps of epoch e (ceil(rows / global batch), the same for every epoch).
  int64_t steps_in_epoch(int64_t epoch) const;
  // Steps of the first `epochs` epochs; -1 when they overflow int64.
  int64_t steps_for_epochs(int64_t epochs) const;
  // The epoch and its step that step `step` is.
  void locate(int64_t step, int64_t* epoch, int64_t* step_in_epoch) const;

  // Rows [first, first + B) of step `step`'s global batch (ids, targets, starts; loss_tokens:
  // the loss tokens of all the step's rows).
  Batch train_batch(int64_t step, int64_t first, int64_t B) const;
  // Validation rows [first, first + count) of the validation split in file order (packed like
  // training; rows past the split's are empty), padded to B rows with empty ones; loss_tokens 0
  // (each batch's own mean).
  Batch val_rows(int64_t first, int64_t count, int64_t B) const;
  // Validation rows in all.
  int64_t val_row_count() const;
  // Rows [first, first + count) of a split in file order (packed as data.packing says; the
  // training split's rows before any epoch's order), padded to B rows with empty ones: a pass
  // over every example (preference pairs' reference log-probabilities). loss_tokens 0.
  enum class Split { train, val };
  int64_t split_row_count(Split split) const;
  Batch split_rows(Split split, int64_t first, int64_t count, int64_t B) const;
  std::string source() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace kktrain
