// The chat template a model's text is rendered with, found in transformers' order: the file the
// user names (data.chat_template, generate's --chat-template), else chat_template.jinja beside
// the tokenizer.json (text/tokenizer_files.hpp), else tokenizer_config.json's chat_template. One
// lookup for training data (apps/dataprep/example_renderer.hpp) and generation.
#pragma once

#include <optional>
#include <string>

#include "text/tokenizer.hpp"

namespace kktrain {

struct ChatTemplateText {
  std::string source;  // where it came from, for messages: "data.chat_template 'F'", ...
  std::string text;
};

// The template of `tok`, `named` (the file given under `key`) first; nullopt when there is none.
// A file is read only when it is a regular file of at most 1 MiB (core/files.hpp; real templates
// are a few KB): InputError "KEY 'F' is a directory, not a file" (or why it cannot be read).
std::optional<ChatTemplateText> find_chat_template(const text::Tokenizer& tok,
                                                   const std::string& key,
                                                   const std::optional<std::string>& named);

}  // namespace kktrain
