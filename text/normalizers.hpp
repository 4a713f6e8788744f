// The normalizers of tokenizer.json, one type each (as huggingface/tokenizers'
// normalizers/*.rs): NFC / NFD / NFKC / NFKD, Prepend, Replace, Strip; a Sequence is flattened
// into its steps when loaded. Each reads its step (from_json: InputError naming the key and the
// file) and runs on a NormalizedString, carrying, when it is tracked, each byte's range of the
// original text (the Rust library's alignments) so that encode_with_offsets maps tokens back
// through a normalizer that changes the text. Private to text/.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/pattern.hpp"
#include "text/tokenizer.hpp"
#include "text/unicode.hpp"

namespace kktrain::text {

// The bytes [b, e) of the original text that ranges a[0..n) come from: from the least begin to
// the greatest end of the non-empty ones; an empty range (a byte a step put in, which stands for
// no original byte) marks only a place, used when all are empty ([a[0].begin, a[0].begin)).
ByteRange covering(const ByteRange* a, size_t n);

// Whether a NormalizedString keeps, for each byte, where in the original text it came from
// (offsets were asked for) or only the text.
enum class Alignment { tracked, untracked };

// A text on its way through the normalizer. When `tracked`, align[i] is the range of the
// original text that byte i of `text` came from: one byte of it for a byte no step changed, the
// range of what a step replaced for what it put there, an empty range for what Prepend added.
struct NormalizedString {
  std::string text;
  std::vector<ByteRange> align;  // one per byte of text, when tracked
  bool tracked = false;
  // s unchanged: byte i came from byte at + i (when tracked).
  NormalizedString(std::string_view s, size_t at, Alignment alignment);
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void run(NormalizedString* s, std::vector<RegexMatcher>& matchers) const = 0;
  // The most this step can multiply a text's length by (the loader bounds the product).
  virtual double growth() const = 0;
  // The step of type `type` at w (not a Sequence), or nullptr when kktrain does not read it.
  static std::unique_ptr<Normalizer> from_json(const std::string& type, const Json& j,
                                               const Where& w, Regexes* regexes);
  static constexpr const char* kSupported =
      "NFC, NFD, NFKC, NFKD, Prepend, Replace, Strip, Sequence";
};

// NFC, NFD, NFKC, NFKD (utf8proc). Tracked: the text is cut before each starter into runs that
// normalize on their own (runs that compose across the cut, such as Hangul jamo, are joined);
// a run normalization leaves alone keeps its bytes' ranges, the bytes of a changed one all have
// the run's range (the Rust library gives a composed character its first character's range).
class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  void run(NormalizedString* s, std::vector<RegexMatcher>& matchers) const override;
  double growth() const override;

 private:
  NormalForm form_;
};

// Prepend: `prepend` before a text that is not empty; what it adds covers no original byte.
class PrependNormalizer final : public Normalizer {
 public:
  static std::unique_ptr<PrependNormalizer> from_json(const Json& j, const Where& w);
  void run(NormalizedString* s, std::vector<RegexMatcher>& matchers) const override;
  double growth() const override { return 1.0 + double(prepend_.size()); }

 private:
  std::string prepend_;
};

// Replace: each match of `pattern` by `content`; the content has the range of the match's last
// character (as the Rust library's NormalizedString::replace).
class ReplaceNormalizer final : public Normalizer {
 public:
  static std::unique_ptr<ReplaceNormalizer> from_json(const Json& j, const Where& w,
                                                      Regexes* regexes);
  void run(NormalizedString* s, std::vector<RegexMatcher>& matchers) const override;
  double growth() const override { return rule_.growth(); }

 private:
  Replacement rule_;
};

// Strip: white space (Rust's char::is_whitespace) off the left and / or the right.
class StripNormalizer final : public Normalizer {
 public:
  static std::unique_ptr<StripNormalizer> from_json(const Json& j, const Where& w);
  void run(NormalizedString* s, std::vector<RegexMatcher>& matchers) const override;
  double growth() const override { return 1.0; }

 private:
  bool left_ = true, right_ = true;
};

}  // namespace kktrain::text
