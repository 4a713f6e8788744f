// Text data for a model with a tokenizer: `kktrain train` tokenizes data.path's text files (a
// text file is one document, a .jsonl line one: data.jsonl_key) as it starts, into llm.c shards
// in <train.output_dir>/tokens/ (what `kktrain tokenize` would write for the same files: each
// document encoded with the tokenizer's special tokens, then tokenizer_config.json's eos_token),
// and trains on those. tokens/manifest.json records what the shards were made from (the
// tokenizer.json, the tokenizer_config.json beside it and every input, each by path, size,
// modification time and content hash: apps/dataprep/cache_manifest.hpp): a later run of the same
// output_dir (a resume) reuses them while it matches, and makes them again otherwise, saying so.
// Documents of fewer than data.seq_len + 1 tokens in all are one error naming data.path (the
// shards made are removed, and so is a tokens/ directory this run made).
//
// Rank 0 writes the shards; the other ranks wait for it, then every rank reads them.
#pragma once

#include <string>
#include <vector>

#include "core/config.hpp"
#include "text/tokenizer_files.hpp"

namespace kktrain {

class Communicator;

// What a run reads through its tokenizer (TextTokens::files empty: nothing; the data is token
// files, or text read as bytes).
struct TextTokens {
  std::vector<std::string> files;  // data.path's files, in order
  text::TokenizerFiles tokenizer;  // found once (text/tokenizer_files.hpp)
  std::string jsonl_key = "text";
};

// The data a run trains on when `t` has files: their shards (made or reused by rank 0 as above,
// then agreed on by every rank), format llmc; else cfg.data unchanged. Errors (an input that
// cannot be read or is not UTF-8, no eos_token, a full disk) are one line on every rank.
DataConfig tokenized_data(const Config& cfg, const TextTokens& t, Communicator& comm);

}  // namespace kktrain
