// Hand-written tokenizer.json files for the tokenizer's unit tests (test_tokenizer.cpp,
// test_tokenizer_limits.cpp, test_tokenizer_pins.cpp): a BPE model over given characters and
// words, and a fixture that writes a model directory per load and reports load errors.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/errors.hpp"
#include "tests/unit/scratch_dir.hpp"
#include "text/tokenizer.hpp"
#include "text/unicode.hpp"

namespace kktrain::text {

using Json = nlohmann::json;
using V = std::vector<std::string>;

// A BPE tokenizer.json: every character of `chars` and every token of `words` in the vocabulary
// (ids in that order), the given merges, ignore_merges so that a piece in the vocabulary comes out
// whole (which makes the pre-tokenizer's pieces visible).
inline Json bpe(const std::vector<std::string>& chars, const std::vector<std::string>& words,
                const std::vector<std::string>& merges = {}, bool ignore_merges = true) {
  Json vocab = Json::object();
  int id = 0;
  for (const auto& c : chars) vocab[c] = id++;
  for (const auto& w : words)
    if (!vocab.contains(w)) vocab[w] = id++;
  return {{"version", "1.0"},
          {"added_tokens", Json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", nullptr},
          {"post_processor", nullptr},
          {"decoder", nullptr},
          {"model",
           {{"type", "BPE"},
            {"vocab", vocab},
            {"merges", merges},
            {"ignore_merges", ignore_merges},
            {"unk_token", nullptr}}}};
}

// The distinct characters of s, in order of first appearance.
inline std::vector<std::string> letters(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const int n = utf8_len(uint8_t(s[i]));
    const std::string c = s.substr(i, size_t(n));
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
    i += size_t(n);
  }
  return out;
}

// The 256 byte-fallback tokens <0x00>..<0xFF> added to j's vocabulary from id `first`, and
// byte_fallback on.
inline void add_byte_fallback(Json* j, int first) {
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    (*j)["model"]["vocab"][name] = first + b;
  }
  (*j)["model"]["byte_fallback"] = true;
}

class TokenizerTest : public ::testing::Test {
 protected:
  ScratchDir dir_{"kktrain_tok_"};
  int n_ = 0;
  // A new model directory (empty).
  std::string new_dir() {
    const std::string d = dir_.path("t" + std::to_string(n_++));
    std::filesystem::create_directory(d);
    return d;
  }
  std::shared_ptr<const Tokenizer> load(const Json& j, const Json& config = nullptr) {
    const std::string d = new_dir();
    std::ofstream(d + "/tokenizer.json") << j.dump();
    if (!config.is_null()) std::ofstream(d + "/tokenizer_config.json") << config.dump();
    return Tokenizer::load(d);
  }
  // The token strings text encodes to.
  static std::vector<std::string> pieces(const std::shared_ptr<const Tokenizer>& t,
                                         const std::string& text,
                                         SpecialTokens s = SpecialTokens::add) {
    Encoder e(t);
    std::vector<std::string> out;
    for (int32_t id : e.encode(text, s)) out.emplace_back(t->id_to_token(id));
    return out;
  }
  // The InputError loading j (and config) gives, or "no error".
  std::string error_of(const Json& j, const Json& config = nullptr) {
    try {
      load(j, config);
    } catch (const InputError& e) {
      return e.what();
    }
    return "no error";
  }
};

}  // namespace kktrain::text
