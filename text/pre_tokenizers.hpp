// The pre-tokenizers of tokenizer.json, one type each (as huggingface/tokenizers'
// pre_tokenizers/*.rs): ByteLevel, Split, Metaspace, Digits; a Sequence is flattened into its
// steps when loaded. Each reads its step (from_json: InputError naming the key and the file) and
// splits one piece of a PreTokenizedString into pieces, appending to its arena what it rewrites
// (ByteLevel's alphabet and prefix space, Metaspace's replacement) and, when tracked, where each
// new byte came from in the original text. Private to text/.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "text/pattern.hpp"
#include "text/tokenizer.hpp"

namespace kktrain::text {

// A piece of text on its way through the pipeline: bytes [begin, end) of the arena; `origin`:
// it starts at the start of the original text (Metaspace's prepend_scheme "first").
struct Piece {
  size_t begin, end;
  bool origin;
};

// Part [begin, end) of a piece and whether it is a match of the pattern splitting it.
struct SplitRange {
  size_t begin, end;
  bool match;
};

// The text of a segment being pre-tokenized and its pieces. When tracked, align[i] is the range
// of the original text that arena byte i came from (empty for what a step added in front).
struct PreTokenizedString {
  std::string arena;
  std::vector<ByteRange> align;
  bool tracked = false;
  std::vector<Piece> pieces, next;
  Matches matches;  // scratch of the steps
  std::vector<SplitRange> ranges;
  std::string mapped;

  std::string_view view(const Piece& p) const {
    return std::string_view(arena).substr(p.begin, p.end - p.begin);
  }
  // Starts over: `text` one piece (`origin`: it starts the text); `from` its bytes' ranges when
  // tracked.
  void reset(std::string_view text, const ByteRange* from, bool origin);
  // Appends `prefix` + the text of p to the arena as a new piece; the prefix covers no byte.
  Piece prepended(const Piece& p, std::string_view prefix);
  // Where a byte put in front of p stands (an empty range at p's first original byte).
  ByteRange before(const Piece& p) const;
};

enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits p (a piece of s) into s->next.
  virtual void split(PreTokenizedString* s, const Piece& p,
                     std::vector<RegexMatcher>& matchers) const = 0;
  // Told by the loader whether it is the last step.
  virtual void set_last(bool) {}
  // The last step leaves its pieces as raw bytes that BPE maps to the byte-level alphabet only
  // when it runs (a cache miss): ByteLevel.
  virtual bool leaves_raw_bytes() const { return false; }
  // The step leaves every piece as it is (ByteLevel last, without regex or prefix space: Llama 3's
  // after its Split), so pre_tokenize skips it.
  virtual bool passes_through() const { return false; }
  // The step of type `type` at w (not a Sequence), or nullptr when kktrain does not read it.
  static std::unique_ptr<PreTokenizer> from_json(const std::string& type, const Json& j,
                                                 const Where& w, Regexes* regexes);
  static constexpr const char* kSupported = "ByteLevel, Split, Metaspace, Digits, Sequence";
};

// Runs the steps over s->pieces in order.
void pre_tokenize(const std::vector<std::unique_ptr<PreTokenizer>>& steps, PreTokenizedString* s,
                  std::vector<RegexMatcher>& matchers);

// ByteLevel: a prefix space (add_prefix_space) when the piece does not start with one, GPT-2's
// regex (use_regex), and its bytes in the byte-level alphabet (done by BPE when it is the last
// step).
class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  static std::unique_ptr<ByteLevelPreTokenizer> from_json(const Json& j, const Where& w,
                                                          Regexes* regexes);
  void split(PreTokenizedString* s, const Piece& p,
             std::vector<RegexMatcher>& matchers) const override;
  void set_last(bool last) override { map_ = !last; }
  bool leaves_raw_bytes() const override { return !map_; }
  bool passes_through() const override { return !add_prefix_space_ && !use_regex_ && !map_; }

 private:
  bool add_prefix_space_ = true, use_regex_ = true;
  Pattern regex_;     // GPT-2's, when use_regex
  bool map_ = false;  // map to the alphabet here: a later step reads the mapped text
};

// Split: by a pattern's matches with a SplitDelimiterBehavior (invert: the matches are kept).
class SplitPreTokenizer final : public PreTokenizer {
 public:
  static std::unique_ptr<SplitPreTokenizer> from_json(const Json& j, const Where& w,
                                                      Regexes* regexes);
  void split(PreTokenizedString* s, const Piece& p,
             std::vector<RegexMatcher>& matchers) const override;

 private:
  Pattern pattern_;
  SplitBehavior behavior_ = SplitBehavior::isolated;
  bool invert_ = false;
};

// Metaspace: spaces become the replacement character, which is put in front (prepend_scheme)
// and, with split, starts each piece.
class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  static std::unique_ptr<MetaspacePreTokenizer> from_json(const Json& j, const Where& w);
  void split(PreTokenizedString* s, const Piece& p,
             std::vector<RegexMatcher>& matchers) const override;

 private:
  std::string replacement_;  // one character, UTF-8
  PrependScheme prepend_ = PrependScheme::always;
  bool split_ = true;
};

// Digits: numeric characters apart, each alone (individual_digits) or in runs.
class DigitsPreTokenizer final : public PreTokenizer {
 public:
  static std::unique_ptr<DigitsPreTokenizer> from_json(const Json& j, const Where& w);
  void split(PreTokenizedString* s, const Piece& p,
             std::vector<RegexMatcher>& matchers) const override;

 private:
  bool individual_digits_ = false;
};

}  // namespace kktrain::text
