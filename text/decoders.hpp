// The decoders of tokenizer.json, one type each (as huggingface/tokenizers' decoders/*.rs):
// ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace; a Sequence is flattened into its
// steps when loaded. Each reads its step (from_json: InputError naming the key and the file)
// and runs as the Rust library's Decoder::decode_chain over the token strings. Private to text/.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "text/pattern.hpp"

namespace kktrain::text {

// A tokenizer's regex matchers, made when a decoder first needs one (decode runs on any thread,
// so each decode has its own).
class LazyMatchers {
 public:
  explicit LazyMatchers(const Regexes& regexes) : regexes_(regexes) {}
  std::vector<RegexMatcher>& get() {
    if (matchers_.empty())
      for (const Regex* r : regexes_) matchers_.emplace_back(*r);
    return matchers_;
  }

 private:
  const Regexes& regexes_;
  std::vector<RegexMatcher> matchers_;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // The token strings in place.
  virtual void decode_chain(std::vector<std::string>* tokens, LazyMatchers& matchers) const = 0;
  // The most this step can multiply a text's length by (the loader bounds the product).
  virtual double growth() const { return 1.0; }
  // The step of type `type` at w (not a Sequence), or nullptr when kktrain does not read it.
  static std::unique_ptr<Decoder> from_json(const std::string& type, const Json& j, const Where& w,
                                            Regexes* regexes);
  static constexpr const char* kSupported =
      "ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence";
};

// Runs the steps over the token strings in order.
void decode_tokens(const std::vector<std::unique_ptr<Decoder>>& steps, const Regexes& regexes,
                   std::vector<std::string>* tokens);

// ByteLevel: the tokens' byte-level alphabet back to bytes (a token outside it stays as it is),
// joined into one string, ill-formed UTF-8 as U+FFFD.
class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>* tokens, LazyMatchers& matchers) const override;
};

// Metaspace: the replacement character back to a space, the first token's dropped unless the
// prepend scheme is "never".
class MetaspaceDecoder final : public Decoder {
 public:
  static std::unique_ptr<MetaspaceDecoder> from_json(const Json& j, const Where& w);
  void decode_chain(std::vector<std::string>* tokens, LazyMatchers& matchers) const override;

 private:
  std::string replacement_;
  PrependScheme prepend_ = PrependScheme::always;
};

// ByteFallback: runs of <0xXX> tokens to their bytes (U+FFFD for each byte when not UTF-8).
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>* tokens, LazyMatchers& matchers) const override;
};

// Fuse: all tokens into one.
class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>* tokens, LazyMatchers& matchers) const override;
};

// Strip: up to `start` leading and `stop` trailing `content` characters off each token.
class StripDecoder final : public Decoder {
 public:
  static std::unique_ptr<StripDecoder> from_json(const Json& j, const Where& w);
  void decode_chain(std::vector<std::string>* tokens, LazyMatchers& matchers) const override;

 private:
  char32_t strip_char_ = U' ';
  int start_ = 0, stop_ = 0;
};

// Replace: each match of `pattern` in each token by `content`.
class ReplaceDecoder final : public Decoder {
 public:
  static std::unique_ptr<ReplaceDecoder> from_json(const Json& j, const Where& w, Regexes* regexes);
  void decode_chain(std::vector<std::string>* tokens, LazyMatchers& matchers) const override;
  double growth() const override { return rule_.growth(); }

 private:
  Replacement rule_;
};

}  // namespace kktrain::text
