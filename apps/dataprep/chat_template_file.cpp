// The chat template a model's text is rendered with (apps/dataprep/chat_template_file.hpp).
#include "apps/dataprep/chat_template_file.hpp"

#include "core/errors.hpp"
#include "core/files.hpp"

namespace kktrain {

namespace {

// The most a chat template file may hold: real ones are a few KB (Llama 3.1's tool-calling
// template about 5 KB).
constexpr std::size_t kMaxTemplateFileBytes = std::size_t(1) << 20;

ChatTemplateText read_template(const std::string& path, const std::string& what) {
  ChatTemplateText t;
  if (auto why = read_regular_file(&t.text, path, kMaxTemplateFileBytes)) {
    throw InputError(what + " '" + path + "' " +
                     (why->rfind("is ", 0) == 0 ? *why : "cannot be read: " + *why));
  }
  t.source = what + " '" + path + "'";
  return t;
}

}  // namespace

std::optional<ChatTemplateText> find_chat_template(const text::Tokenizer& tok,
                                                   const std::string& key,
                                                   const std::optional<std::string>& named) {
  if (named) return read_template(*named, key);
  const text::TokenizerFiles& files = tok.files();
  if (!files.chat_template.empty())
    return read_template(files.chat_template, "chat_template.jinja");
  if (tok.config().chat_template.empty()) return std::nullopt;
  return ChatTemplateText{"tokenizer_config.json '" + tok.config().path + "'",
                          tok.config().chat_template};
}

}  // namespace kktrain
