// Text files through a tokenizer into llm.c shards: what `kktrain tokenize` runs, and what
// `kktrain train` runs at start-up to turn text data into token shards for a model with a
// tokenizer (apps/dataprep/text_data.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "text/tokenizer_files.hpp"

namespace kktrain {

// Text read per batch by default (--batch-bytes).
constexpr int64_t kBatchBytes = int64_t(16) << 20;

enum class Eos { from_config, token, none };

struct TokenizeOptions {
  std::vector<std::string> inputs;
  std::string out, jsonl_key = "text";
  Eos eos = Eos::from_config;
  std::string eos_token;
  int64_t shard_tokens = 100000000, val_tokens = 0;
  int threads = 0;                    // 0: the CPUs this process may use
  int64_t batch_bytes = kBatchBytes;  // text read and encoded at a time
  // The signal that asked the run to stop (apps/train/signals.hpp StopSignals::received), else 0;
  // null: never asked. Checked between documents until the shards take their final names.
  std::function<int()> stop_requested;
};

struct TokenizeSummary {
  std::vector<std::string> shards;  // the files written, validation shard first
  int64_t documents = 0, tokens = 0, vocab_size = 0;
  int stopped_by = 0;         // the signal that stopped the run (then no shard is kept), or 0
  int64_t files_removed = 0;  // stopped: this run's shard files it removed
};

// Encodes every document of o.inputs (a text file is one document, a .jsonl line one) with the
// tokenizer at tok_path, each followed by the EOS id per o.eos, into shards o.out_*.bin; logs one
// summary line (a progress line on a terminal). Everything checkable is checked before the first
// write (inputs, the output directory, earlier shards with this prefix, the tokenizer, the EOS
// token): InputError / UsageError naming it. Temporaries that killed runs left beside the shards
// of o.out are removed first (one line says so). A failure later, or a stop request
// (o.stop_requested), leaves no shard of this call: stopped, it returns with stopped_by set.
TokenizeSummary tokenize_to_shards(const TokenizeOptions& o, const text::TokenizerFiles& tokenizer);

}  // namespace kktrain
