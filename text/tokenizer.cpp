// The Tokenizer (its vocabulary, special tokens and decode) and StreamDecoder; the encode
// pipeline is text/encoder.cpp.
#include "core/errors.hpp"
#include "text/tokenizer_impl.hpp"

namespace kktrain::text {

// ---------------------------------------------------------------------------------------------
// Tokenizer
// ---------------------------------------------------------------------------------------------
Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::~Tokenizer() = default;

std::shared_ptr<const Tokenizer> Tokenizer::load(const std::string& path) {
  return load(locate_tokenizer(path));
}

std::shared_ptr<const Tokenizer> Tokenizer::load(const TokenizerFiles& files) {
  std::shared_ptr<Tokenizer> t(new Tokenizer());
  load_tokenizer(t->impl_.get(), files);
  return t;
}

const std::string& Tokenizer::path() const {
  return impl_->path;
}
const TokenizerFiles& Tokenizer::files() const {
  return impl_->files;
}
const TokenizerConfig& Tokenizer::config() const {
  return impl_->config;
}
int64_t Tokenizer::vocab_size() const {
  return impl_->vocab_size;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& a : impl_->added)
    if (a.content == token) return a.id;
  const auto it = impl_->vocab.find(token);
  if (it == impl_->vocab.end()) return std::nullopt;
  return it->second;
}

std::string_view Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= int32_t(impl_->id_to_token.size())) return {};
  return impl_->id_to_token[size_t(id)];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < int32_t(impl_->special.size()) && impl_->special[size_t(id)];
}

namespace {
std::optional<int32_t> config_token(const Tokenizer& t, const char* name) {
  const auto& m = t.config().special_tokens;
  const auto it = m.find(name);
  if (it == m.end()) return std::nullopt;
  return t.token_to_id(it->second);
}
}  // namespace

std::optional<int32_t> Tokenizer::eos_id() const {
  return config_token(*this, "eos_token");
}
std::optional<int32_t> Tokenizer::bos_id() const {
  return config_token(*this, "bos_token");
}

std::string Tokenizer::decode(const int32_t* ids, int64_t n, SkipSpecial skip) const {
  std::vector<std::string> tokens;
  tokens.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= impl_->vocab_size) {
      throw InputError("token id " + std::to_string(id) + " is outside the vocabulary of '" +
                       impl_->path + "' (0.." + std::to_string(impl_->vocab_size - 1) + ")");
    }
    if (skip == SkipSpecial::yes && impl_->special[size_t(id)]) continue;
    tokens.emplace_back(impl_->id_to_token[size_t(id)]);
  }
  if (!impl_->has_decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  decode_tokens(impl_->decoders, impl_->regexes, &tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return utf8_lossy(out);
}

// ---------------------------------------------------------------------------------------------
// StreamDecoder
// ---------------------------------------------------------------------------------------------
std::string StreamDecoder::push(int32_t id) {
  ids_.push_back(id);
  // Decode the raw bytes without replacing an incomplete tail: decode() replaces ill-formed
  // bytes by U+FFFD, so decode all ids and hold back a trailing U+FFFD that the next id may
  // still complete.
  const std::string text = tok_.decode(ids_);
  size_t keep = text.size();
  const std::string_view fffd = "\xEF\xBF\xBD";
  while (keep >= fffd.size() &&
         std::string_view(text).substr(keep - fffd.size(), fffd.size()) == fffd)
    keep -= fffd.size();
  if (keep <= emitted_) return {};
  std::string out = text.substr(emitted_, keep - emitted_);
  emitted_ = keep;
  return out;
}

std::string StreamDecoder::finish() {
  const std::string text = tok_.decode(ids_);
  std::string out = text.size() > emitted_ ? text.substr(emitted_) : std::string();
  emitted_ = text.size();
  return out;
}

}  // namespace kktrain::text
