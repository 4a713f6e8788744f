// Examples data (data.format chat or prompt_completion): `kktrain train` renders and tokenizes
// every example of data.path (and data.val_path) once, as it starts, with
// apps/dataprep/example_renderer.hpp's renderer, into the cache io/example_data.hpp reads:
// <train.output_dir>/examples/{train,val}.*. The rendering runs on the CPUs this process may use,
// in blocks of lines; the cache's bytes are the same for any thread count.
//
// Validation: data.val_path's examples; without it, each example of data.path is held out with
// probability data.val_fraction, decided by a hash of (data.seed, its ordinal in data.path).
//
// examples/manifest.json records what the cache was made from (the inputs' paths, sizes,
// modification times and content hashes, apps/dataprep/cache_manifest.hpp, each input hashed as it
// is rendered; the tokenizer's and template's files, and the data settings that change the tokens:
// format, loss_on, truncation, seq_len, seed, val_fraction): a later run of the same output_dir (a
// resume) reuses the cache while they match, and makes it again otherwise.
//
// Rank 0 writes the cache; the other ranks wait for it, then every rank reads it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "apps/dataprep/text_model.hpp"
#include "core/config.hpp"

namespace kktrain {

class Communicator;

// What making the cache found (for the log and tests).
struct ExampleCacheSummary {
  int64_t examples = 0, val_examples = 0, truncated = 0, dropped = 0;
  int64_t empty = 0;  // examples of no tokens, skipped (data.truncation truncate or drop)
  int64_t tokens = 0, loss_tokens = 0;
  // The content hashes (ContentHash::hex) of data.path's files, then data.val_path, of the bytes
  // read while rendering them.
  std::vector<std::string> input_hashes;
};

// The cache directory of cfg's examples (made or reused by rank 0, then agreed on by every
// rank). Errors (an example that cannot be rendered, an input that cannot be read, a full disk)
// are one line on every rank, and leave no cache behind a manifest.
std::string example_cache(const Config& cfg, const ModelText& text, Communicator& comm);

// Renders data.path's (and data.val_path's) examples into `dir` (no manifest, no reuse): the
// cache builder on its own.
ExampleCacheSummary make_example_cache(const Config& cfg, const ModelText& text,
                                       const std::string& dir);

}  // namespace kktrain
