// Test seams of io/data.hpp. Included by tests only, never by production code (a run's data comes
// from data.path's files or the embedded corpus, TokenDataset::load).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/data.hpp"
#include "io/token_file.hpp"

namespace kktrain {
namespace test_hooks {

struct TokenDatasetAccess {
  // A dataset of one in-memory token stream named `source`, split as cfg says, every id accepted.
  static TokenDataset from_tokens(std::vector<int32_t> tokens, const DataConfig& cfg,
                                  const std::string& source) {
    TokenDataset d;
    d.seed_ = cfg.seed;
    d.vocab_ = int64_t(1) << 31;
    d.source_ = source;
    d.add_part(std::make_shared<TokenFile>(std::move(tokens), source), cfg);
    return d;
  }
};

inline TokenDataset token_dataset(std::vector<int32_t> tokens, const DataConfig& cfg,
                                  const std::string& source) {
  return TokenDatasetAccess::from_tokens(std::move(tokens), cfg, source);
}

}  // namespace test_hooks
}  // namespace kktrain
