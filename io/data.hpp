// Training data: a byte-level tokenizer, token files of any size read in place (io/token_file.hpp:
// text, uint16, uint32, llm.c shards; one file, a list or globs), the embedded default corpus, a
// train/validation split and deterministic batch sampling.
//
// Each file is split on its own: its last data.val_fraction of tokens are validation. Windows of
// T + 1 tokens never straddle two files: the window starts of all files form one range, a draw
// picks a start in it, and the start falls in one file.
//
// Sampling is global: window k of optimizer step s (k in [0, data.global_batch_size)) starts at a
// position drawn from (data.seed, s, k). Each rank and micro-batch takes a contiguous slice of
// those windows, so the global batch is the same samples however it is split into micro-batches
// and ranks, and a run and its resume see the same batches, whatever happened in between.
//
// Token ids are checked against model.vocab_size as windows are drawn (and, for files of up to
// kValidateAtLoadTokens tokens, once at load, so a bad small file is refused before any work);
// a start never reads a whole large corpus.
#pragma once

#include <cstdint>
#include <memory>
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

// A preference pair in a batch's rows (io/example_data.hpp): in row `row`, its chosen side
// (prompt + chosen completion) at positions [chosen, rejected), its rejected side at
// [rejected, end); `example` is its index in its split of the cache.
struct BatchPair {
  int64_t example = 0;
  int32_t row = 0, chosen = 0, rejected = 0, end = 0;
};

struct Batch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> ids;      // (B, T)
  std::vector<int32_t> targets;  // (B, T): ids shifted by one
  // Examples (io/example_data.hpp): (B, T) the position in its row where each token's example
  // begins (empty: every row is one sequence), and the loss tokens of the whole global batch the
  // rows belong to (0: the loss is this micro-batch's own mean).
  std::vector<int32_t> starts;
  int64_t loss_tokens = 0;
  // Preference pairs: the rows' pairs in row order, and the examples (pairs) of the whole global
  // batch the rows belong to (0: these rows' own).
  std::vector<BatchPair> pairs;
  int64_t step_examples = 0;
  // Shared prompts (ForwardOptions::row_gaps): (B, T, 2) the keys each token does not see, or
  // empty when no pair of the rows shares its prompt.
  std::vector<int32_t> gaps;
};

class TokenFile;

// Files of at most this many tokens have every id checked when they are opened (by default).
constexpr int64_t kValidateAtLoadTokens = int64_t(16) << 20;

// How TokenDataset::load opens token files.
struct TokenLoadOptions {
  // Files of at most this many tokens have every id checked when they are opened; larger ones
  // only as windows are drawn (kktrain train and grads pass data.validate_at_load_tokens, whose
  // default is this one).
  int64_t validate_at_load_tokens = kValidateAtLoadTokens;
};

// data.path's files in order: globs expanded (sorted), each matching at least one file.
// InputError naming the pattern otherwise.
std::vector<std::string> data_files(const DataConfig& cfg);

// Bytes the data path keeps resident on one of `world` ranks: the embedded corpus when data.path
// is unset (kEmbeddedCorpusBytes), a step's windows (ids and targets of global_batch_size /
// world windows of seq_len tokens), the piece buffer of the check at load and the buffer of one
// read (kTokenReadChunkBytes). Token files cost no resident memory beyond the window being read
// (io/token_file.hpp).
int64_t data_resident_bytes(const DataConfig& cfg, int world);
// The embedded corpus as int32 ids.
constexpr int64_t kEmbeddedCorpusBytes = int64_t(4) << 20;

namespace test_hooks {
struct TokenDatasetAccess;  // io/data_testing.hpp: datasets from in-memory tokens
}

class TokenDataset {
 public:
  // Maps data.path's files (or makes the default corpus when data.path is unset) and splits
  // them. Throws InputError naming the file for a missing, unreadable, empty or too short file,
  // a malformed llm.c header, or (files up to options.validate_at_load_tokens) a token id >=
  // vocab_size.
  static TokenDataset load(const DataConfig& cfg, int64_t vocab_size,
                           const TokenLoadOptions& options = {});

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

  int64_t train_tokens() const;
  int64_t val_tokens() const;
  bool has_validation() const { return val_tokens() > 0; }
  // True when some file's validation split holds a window of T + 1 tokens.
  bool has_validation_windows(int64_t T) const { return starts(Split::val, T) > 0; }
  const std::string& source() const { return source_; }

 private:
  friend struct test_hooks::TokenDatasetAccess;
  struct Part {
    std::shared_ptr<const TokenFile> file;
    int64_t n_train = 0, n_val = 0;  // tokens [0, n_train) train, [n_train, n_train + n_val) val
  };
  // Which split of each file a window is drawn from.
  enum class Split { train, val };
  // Window starts of T + 1 tokens over all files' train (or validation) splits.
  int64_t starts(Split split, int64_t T) const;
  // Rows [0, count) are windows first.. of the split keyed by (stream, key); rows [count, B)
  // repeat row 0's tokens with ignored targets.
  Batch window_batch(Split split, uint64_t stream, uint64_t key, int64_t first, int64_t count,
                     int64_t B, int64_t T) const;
  // tokens [begin, begin + n) of part p into out, each id checked against vocab_.
  void read_checked(const Part& p, int64_t begin, int64_t n, int32_t* out) const;
  void add_part(std::shared_ptr<const TokenFile> f, const DataConfig& cfg);
  std::vector<Part> parts_;
  uint64_t seed_ = 0;
  int64_t vocab_ = 0;
  std::string source_;
  bool text_ = false;  // byte-level text (for the vocab message)
};

}  // namespace kktrain
