#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/regex.hpp"

#include <pcre2.h>

#include "core/errors.hpp"
#include "text/unicode.hpp"

namespace kktrain::text {

Regex::Regex(const std::string& pattern, const std::string& where) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE at = 0;
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
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
  size_t at = 0;
  while (at <= s.size()) {
    const int rc =
        pcre2_match(re_->code(), subject, s.size(), at, PCRE2_NO_UTF_CHECK, md_, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw RuntimeFailure("regular expression '" + re_->pattern() +
                           "' failed while matching: " + reinterpret_cast<const char*>(msg));
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

std::string regex_escape(std::string_view literal) {
  std::string out = "\\Q";
  size_t i = 0;
  while (i < literal.size()) {  // \Q...\E, with any \E inside written as \E\\E\Q
    const size_t e = literal.find("\\E", i);
    if (e == std::string_view::npos) {
      out.append(literal.substr(i));
      break;
    }
    out.append(literal.substr(i, e - i));
    out += "\\E\\\\E\\Q";
    i = e + 2;
  }
  out += "\\E";
  return out;
}

}  // namespace kktrain::text
