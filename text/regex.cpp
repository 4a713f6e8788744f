#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/regex.hpp"

#include <pcre2.h>

#include <algorithm>

#include "core/errors.hpp"
#include "core/json_text.hpp"
#include "text/unicode.hpp"

namespace kktrain::text {

namespace {

// The pattern in PCRE2's terms where its syntax differs from Oniguruma's (what Hugging Face's
// tokenizers compile with): \s and \S are Unicode's White_Space property (PCRE2's \s also
// matches U+180E, which Unicode 6.3 took out of White_Space), \h and \H hexadecimal digits
// (Oniguruma's Ruby syntax; horizontal space in PCRE2). Escaped backslashes and \Q...\E are
// copied as they are.
std::string pcre2_pattern(const std::string& p) {
  std::string out;
  out.reserve(p.size() + 32);
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] != '\\' || i + 1 == p.size()) {
      out += p[i];
      continue;
    }
    const char c = p[++i];
    if (c == 's') {
      out += "\\p{White_Space}";
    } else if (c == 'S') {
      out += "\\P{White_Space}";
    } else if (c == 'h') {
      out += "\\p{AHex}";
    } else if (c == 'H') {
      out += "\\P{AHex}";
    } else if (c == 'Q') {
      const size_t e = p.find("\\E", i + 1);
      const size_t end = e == std::string::npos ? p.size() : e + 2;
      out.append(p, i - 1, end - (i - 1));
      i = end - 1;
    } else {
      out += '\\';
      out += c;
    }
  }
  return out;
}

// The first bytes of s (at most 40, whole characters) as a JSON string: one line, any bytes.
std::string excerpt(std::string_view s) {
  size_t n = 0;
  while (n < s.size() && n < 40) n += size_t(utf8_len(static_cast<unsigned char>(s[n])));
  const std::string head(s.substr(0, std::min(n, s.size())));
  return json_quoted(head) + (head.size() < s.size() ? "..." : "");
}

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& where)
    : pattern_(pattern), where_(where) {
  int err = 0;
  PCRE2_SIZE at = 0;
  const std::string translated = pcre2_pattern(pattern);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                        PCRE2_UTF | PCRE2_UCP, &err, &at, nullptr);
  if (!code_) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw InputError(where + ": regular expression '" + pattern + "' does not compile: " +
                     reinterpret_cast<const char*>(msg) + " at offset " + std::to_string(at));
  }
  jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;  // else the interpreter
}

Regex::~Regex() {
  pcre2_code_free(code_);
}

RegexMatcher::RegexMatcher(const Regex& re)
    : re_(&re), md_(pcre2_match_data_create_from_pattern(re.code(), nullptr)) {
  if (!md_) throw RuntimeFailure("out of memory creating regex match data");
}

RegexMatcher::~RegexMatcher() {
  pcre2_match_data_free(md_);
}

void RegexMatcher::find_all(std::vector<std::pair<size_t, size_t>>* out, std::string_view s) {
  const auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  // A JIT-compiled pattern through PCRE2's fast path: pcre2_match would run the same JIT code
  // after checking its arguments (valid here: s is UTF-8, `at` within it, no options) on every
  // call, and there is a call per match (per piece of a Split).
  const bool jit = re_->jit() && subject != nullptr;
  size_t at = 0;
  while (at <= s.size()) {
    const int rc =
        jit ? pcre2_jit_match(re_->code(), subject, s.size(), at, 0, md_, nullptr)
            : pcre2_match(re_->code(), subject, s.size(), at, PCRE2_NO_UTF_CHECK, md_, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw InputError(re_->where() + ": regular expression '" + re_->pattern() +
                       "' failed on a text of " + std::to_string(s.size()) + " bytes starting " +
                       excerpt(s) + ": " + reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md_);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      out->emplace_back(b, e);
      at = e;
    } else {  // empty: skip one character
      if (b >= s.size()) return;
      at = b + size_t(utf8_len(static_cast<unsigned char>(s[b])));
    }
  }
}

}  // namespace kktrain::text
