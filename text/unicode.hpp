// UTF-8 and Unicode helpers for the tokenizer: code point iteration, well-formedness, lossy
// conversion (U+FFFD for each maximal ill-formed subpart, as Rust's from_utf8_lossy and
// WHATWG's decoder do), the byte-level alphabet (GPT-2's bytes_to_unicode), character classes
// (Rust's char::is_whitespace / is_alphanumeric / is_numeric) and normalization forms through
// utf8proc. Every function takes well-formed UTF-8 unless it says otherwise.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kktrain::text {

// The code point starting at s[i] and its byte length (s well-formed).
struct CodePoint {
  char32_t cp;
  int len;
};
CodePoint decode_at(std::string_view s, size_t i);
// Appends cp's UTF-8 bytes.
void append_utf8(std::string* out, char32_t cp);
// The byte length of the UTF-8 sequence led by byte b (1 for ASCII and for a stray byte).
inline int utf8_len(unsigned char b) {
  return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

// Whether byte b continues a UTF-8 sequence (10xxxxxx).
inline bool is_continuation(unsigned char b) {
  return (b & 0xC0) == 0x80;
}
// The start of the character holding byte `at` of s: `at` moved back over continuation bytes,
// never below `floor`.
inline size_t char_start(std::string_view s, size_t at, size_t floor = 0) {
  while (at > floor && is_continuation(static_cast<unsigned char>(s[at]))) --at;
  return at;
}
// The first character start at or after byte `at` (s.size() when none).
inline size_t next_char_start(std::string_view s, size_t at) {
  while (at < s.size() && is_continuation(static_cast<unsigned char>(s[at]))) ++at;
  return at;
}

// s as well-formed UTF-8: each maximal ill-formed subpart becomes U+FFFD. Any bytes in.
std::string utf8_lossy(std::string_view s);
// The length of the longest prefix of s that ends on a complete UTF-8 sequence or an ill-formed
// subpart (so a prefix cut inside a character that may still be completed is left out).
size_t complete_utf8_prefix(std::string_view s);

// GPT-2's byte-level alphabet: byte b as a printable code point (UTF-8), and back.
const std::string& byte_to_unicode(unsigned char b);
// The byte a code point stands for, or -1 when it is not in the alphabet.
int unicode_to_byte(char32_t cp);

// Character classes as Rust's char methods define them.
bool is_whitespace(char32_t cp);    // White_Space property
bool is_numeric(char32_t cp);       // general categories Nd, Nl, No
bool is_alphanumeric(char32_t cp);  // Alphabetic or numeric

// Whether cp's canonical combining class is 0 (a starter: normalization does not move a mark
// across it, so text can be normalized in pieces that each begin with one).
bool is_starter(char32_t cp);

enum class NormalForm { nfc, nfd, nfkc, nfkd };
// s in the normal form (utf8proc). InputError for text utf8proc refuses (not well-formed).
std::string normalize(std::string_view s, NormalForm form);

}  // namespace kktrain::text
