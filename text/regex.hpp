// A compiled PCRE2 pattern in UTF + UCP mode (\p{L}, \s, \w over all of Unicode; look-ahead,
// case-insensitive groups), JIT-compiled when the platform allows. Patterns are written for
// Oniguruma (Hugging Face's engine); the few escapes whose meaning differs are translated.
// Character classes follow the Unicode version of PCRE2's tables (10.42: Unicode 14.0). Matching
// needs per-thread match data (RegexMatcher), so one Regex is shared by every thread's encoder.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct pcre2_real_code_8;
struct pcre2_real_match_data_8;

namespace kktrain::text {

class Regex {
 public:
  // InputError "<where>: regular expression '<pattern>' does not compile: <reason> at offset N".
  // `where` names the pattern's file and key ("tokenizer file 'F': key 'K'"), kept for the
  // errors of matching too.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  pcre2_real_code_8* code() const { return code_; }
  const std::string& pattern() const { return pattern_; }
  const std::string& where() const { return where_; }
  bool jit() const { return jit_; }

 private:
  pcre2_real_code_8* code_ = nullptr;
  bool jit_ = false;
  std::string pattern_;
  std::string where_;
};

// One thread's matcher for one Regex.
class RegexMatcher {
 public:
  explicit RegexMatcher(const Regex& re);
  ~RegexMatcher();
  RegexMatcher(RegexMatcher&& o) noexcept : re_(o.re_), md_(o.md_) { o.md_ = nullptr; }
  RegexMatcher(const RegexMatcher&) = delete;
  RegexMatcher& operator=(const RegexMatcher&) = delete;
  // Appends to *out the [begin, end) byte ranges of the successive non-overlapping, non-empty
  // matches in s (s well-formed UTF-8; an empty match moves the search on by one character).
  // A match PCRE2 gives up on (its match limit: a pattern that backtracks without end on this
  // text) is an InputError naming the regex's file and key, the pattern, the text's length and
  // its first bytes, and PCRE2's reason.
  void find_all(std::vector<std::pair<size_t, size_t>>* out, std::string_view s);

 private:
  const Regex* re_;
  pcre2_real_match_data_8* md_ = nullptr;
};

}  // namespace kktrain::text
