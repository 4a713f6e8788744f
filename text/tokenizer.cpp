// Work in progress: replaced by the implementation in the next commits.
#include "text/tokenizer.hpp"

#include "core/errors.hpp"

namespace kktrain::text {
struct Tokenizer::Impl {};
struct Encoder::State {};
Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;
std::shared_ptr<const Tokenizer> Tokenizer::load(const std::string& path) {
  throw InputError("tokenizer '" + path + "': not implemented yet");
}
const std::string& Tokenizer::path() const {
  throw InputError("not implemented");
}
const TokenizerConfig& Tokenizer::config() const {
  throw InputError("not implemented");
}
int64_t Tokenizer::vocab_size() const {
  return 0;
}
std::optional<int32_t> Tokenizer::token_to_id(std::string_view) const {
  return {};
}
std::string_view Tokenizer::id_to_token(int32_t) const {
  return {};
}
bool Tokenizer::is_special(int32_t) const {
  return false;
}
std::optional<int32_t> Tokenizer::eos_id() const {
  return {};
}
std::optional<int32_t> Tokenizer::bos_id() const {
  return {};
}
std::string Tokenizer::decode(const int32_t*, int64_t, SkipSpecial) const {
  return {};
}
Encoder::Encoder(std::shared_ptr<const Tokenizer> t) : tokenizer_(std::move(t)) {}
Encoder::~Encoder() = default;
Encoder::Encoder(Encoder&&) noexcept = default;
Encoder& Encoder::operator=(Encoder&&) noexcept = default;
void Encoder::encode(std::vector<int32_t>*, std::string_view, SpecialTokens) {}
std::string StreamDecoder::push(int32_t) {
  return {};
}
std::string StreamDecoder::finish() {
  return {};
}
int64_t first_invalid_utf8(std::string_view) {
  return -1;
}
}  // namespace kktrain::text
