// A tokenizer's files, found once from the path a user gives (model.tokenizer, --tokenizer, a
// model directory) and passed down, so that every reader of a run reads the same files: the
// tokenizer.json (the path itself, or the one in a directory) and, beside it, the files that go
// with it. Finding them only looks at names (stat); nothing is read here, and nothing throws:
// Tokenizer::load says what is wrong with a path that names no tokenizer.json, and each reader
// reads through core/files.hpp (regular files only, bounded), so a FIFO or a directory at one of
// these names is named and refused there.
#pragma once

#include <string>
#include <string_view>

namespace kktrain::text {

struct TokenizerFiles {
  std::string given;          // the path as given
  std::string json;           // the tokenizer.json it names: `given`, or given/tokenizer.json
  std::string dir;            // the folder holding `json`
  std::string config;         // dir/tokenizer_config.json when something is there, else ""
  std::string chat_template;  // dir/chat_template.jinja when something is there, else ""

  // dir/name: a companion of the tokenizer (special_tokens_map.json, tokenizer.model).
  std::string beside(std::string_view name) const;
  // Something is at `json` (not necessarily a readable file).
  bool present() const;
};

// The files of the tokenizer at `path` (a tokenizer.json, or a directory holding one).
TokenizerFiles locate_tokenizer(const std::string& path);

}  // namespace kktrain::text
