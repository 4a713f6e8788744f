#include "text/unicode.hpp"

#include <utf8proc.h>

#include <array>
#include <cstdlib>

#include "core/errors.hpp"
#include "text/tokenizer.hpp"

namespace kktrain::text {

CodePoint decode_at(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const int len = utf8_len(b);
  char32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return {cp, len};
}

void append_utf8(std::string* out, char32_t cp) {
  if (cp < 0x80) {
    out->push_back(char(cp));
  } else if (cp < 0x800) {
    out->push_back(char(0xC0 | (cp >> 6)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(char(0xE0 | (cp >> 12)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(char(0xF0 | (cp >> 18)));
    out->push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  }
}

namespace {

// The length of the well-formed sequence at s[i] (> 0), or minus the length of the maximal
// ill-formed subpart there (Unicode's "maximal subpart" rule: the longest prefix of a
// well-formed sequence, at least one byte).
int sequence_at(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return 1;
  int need;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2;
    if (b == 0xE0) lo = 0xA0;  // no overlong forms
    if (b == 0xED) hi = 0x9F;  // no surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3;
    if (b == 0xF0) lo = 0x90;  // no overlong forms
    if (b == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return -1;
  }
  for (int k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return -k;
    const auto c = static_cast<unsigned char>(s[i + k]);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (c < l || c > h) return -k;
  }
  return need + 1;
}

}  // namespace

int64_t first_invalid_utf8(std::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    // ASCII runs eight bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      w &= 0x8080808080808080ULL;
      if (w) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        i += size_t(__builtin_ctzll(w)) / 8;  // on to the first of the eight that is not ASCII
#endif
        break;
      }
      i += 8;
    }
    if (i >= n) break;
    const int len = sequence_at(s, i);
    if (len < 0) return int64_t(i);
    i += size_t(len);
  }
  return -1;
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const int len = sequence_at(s, i);
    if (len > 0) {
      out.append(s.data() + i, size_t(len));
      i += size_t(len);
    } else {
      out += "\xEF\xBF\xBD";
      i += size_t(-len);
    }
  }
  return out;
}

size_t complete_utf8_prefix(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const int len = sequence_at(s, i);
    // An ill-formed subpart that reaches the end may be a character still arriving.
    if (len < 0 && i + size_t(-len) >= s.size()) {
      const auto b = static_cast<unsigned char>(s[i]);
      if (b >= 0xC2 && b <= 0xF4) return i;
    }
    i += size_t(len > 0 ? len : -len);
  }
  return i;
}

namespace {

struct ByteAlphabet {
  std::array<std::string, 256> to_unicode;
  std::array<int16_t, 324> from_unicode;  // code points 0..323 (the alphabet's largest is 323)
  ByteAlphabet() {
    from_unicode.fill(-1);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t cp = printable ? char32_t(b) : char32_t(256 + extra++);
      append_utf8(&to_unicode[size_t(b)], cp);
      from_unicode[cp] = int16_t(b);
    }
  }
};
const ByteAlphabet& alphabet() {
  static const ByteAlphabet a;
  return a;
}

}  // namespace

const std::string& byte_to_unicode(unsigned char b) {
  return alphabet().to_unicode[b];
}

int unicode_to_byte(char32_t cp) {
  return cp < alphabet().from_unicode.size() ? alphabet().from_unicode[cp] : -1;
}

bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool is_numeric(char32_t cp) {
  const auto cat = utf8proc_category(utf8proc_int32_t(cp));
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

bool is_alphanumeric(char32_t cp) {
  // Rust's is_alphabetic is the Alphabetic property: letters, Nl, and Other_Alphabetic marks;
  // utf8proc has no property table for it, so letters, Nl and combining marks (Mn, Mc) that are
  // Other_Alphabetic in practice stand in (used only for added tokens' single_word).
  const auto cat = utf8proc_category(utf8proc_int32_t(cp));
  switch (cat) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return true;
    default:
      return is_numeric(cp);
  }
}

bool is_starter(char32_t cp) {
  return utf8proc_get_property(utf8proc_int32_t(cp))->combining_class == 0;
}

std::string normalize(std::string_view s, NormalForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::nfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalForm::nfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalForm::nfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalForm::nfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), utf8proc_ssize_t(s.size()),
                   &out, utf8proc_option_t(options));
  if (n < 0) {
    throw InputError(std::string("text could not be normalized: ") +
                     utf8proc_errmsg(utf8proc_ssize_t(n)));
  }
  std::string r(reinterpret_cast<const char*>(out), size_t(n));
  std::free(out);
  return r;
}

}  // namespace kktrain::text
