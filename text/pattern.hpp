// A Split / Replace pattern of tokenizer.json (a literal string or a regular expression), its
// matches in a text, and the Replace of them. Private to text/.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/regex.hpp"
#include "text/tokenizer_json.hpp"

namespace kktrain::text {

// Every Regex of a tokenizer, by matcher index: each thread's encoder makes one RegexMatcher for
// each.
using Regexes = std::vector<const Regex*>;
// [begin, end) byte ranges of matches.
using Matches = std::vector<std::pair<size_t, size_t>>;

struct Pattern {
  std::string literal;           // when !regex
  std::unique_ptr<Regex> regex;  // when set
  int matcher = -1;              // index of the encoder's RegexMatcher for `regex`

  // {"String": ...} or {"Regex": ...} at w; a regex is added to *regexes.
  static Pattern from_json(const Json& v, const Where& w, Regexes* regexes);
  // A regex of kktrain's own (ByteLevel's), compiled with `where` for its messages.
  static Pattern own_regex(const char* pattern, const std::string& where, Regexes* regexes);
  // *out = the successive non-overlapping matches in s.
  void find(Matches* out, std::string_view s, std::vector<RegexMatcher>& matchers) const;
  // How much a Replace of it by `content` can multiply a text's length.
  double growth(const std::string& content) const;
};

// Replace's rule (the normalizer's and the decoder's): each match of `pattern` becomes `content`.
struct Replacement {
  Pattern pattern;
  std::string content;
  // {"pattern": ..., "content": ...} at w; a regex is added to *regexes.
  static Replacement from_json(const Json& j, const Where& w, Regexes* regexes);
  double growth() const { return pattern.growth(content); }
};

// s with each match replaced by `with`.
std::string replace_all(std::string_view s, const Matches& m, std::string_view with);

// The scheme of Metaspace (pre-tokenizer and decoder): `prepend_scheme`, or the older
// `add_prefix_space` (true: always, false: never).
enum class PrependScheme { always, first, never };
PrependScheme read_prepend(const Json& obj, const Where& w);

}  // namespace kktrain::text
