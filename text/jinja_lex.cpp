// The chat-template lexer (text/jinja_impl.hpp): jinja2's with trim_blocks and lstrip_blocks
// (whitespace control - and +): the template as text, {{ print }} and {% block %} pieces, the tags
// cut into tokens (string literals unescaped as Python's unicode-escape does; an escape that is
// not a Unicode scalar value, a lone surrogate or beyond U+10FFFF, is refused). Newlines are
// normalized and a final newline dropped first, as jinja2 does.
#include <cctype>

#include "text/jinja_impl.hpp"

namespace kktrain::text::jinja {
namespace {

// Bytes of Unicode whitespace (Python's \s) ending text[from:], and the length of the one
// whitespace character at text[at] (0 if none).
std::size_t trailing_space(const std::string& text, std::size_t from) {
  const auto cps = code_points(text.substr(from));
  std::size_t n = 0;
  for (auto it = cps.rbegin(); it != cps.rend() && is_py_space(*it); ++it) n += it->size();
  return n;
}
std::size_t leading_space(const std::string& text, std::size_t at) {
  const auto c = static_cast<unsigned char>(text[at]);
  const std::size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
  const std::string cp = text.substr(at, len);
  return is_py_space(cp) ? cp.size() : 0;
}

bool ws(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Whether the end of a tag takes trim_blocks' one newline after it (block and comment tags; a
// print tag does not).
enum class TrimBlocks { applies, not_here };

class Lexer {
 public:
  Lexer(const std::string& src, const std::string& name) : src_(src), name_(name) {}

  std::vector<Piece> run() {
    while (pos_ < src_.size()) {
      std::size_t start = src_.find('{', pos_);
      while (start != std::string::npos && start + 1 < src_.size() && !opener(src_[start + 1]))
        start = src_.find('{', start + 1);
      if (start == std::string::npos || start + 1 >= src_.size()) {
        emit_text(src_.substr(pos_), pos_);
        break;
      }
      const char kind = src_[start + 1];
      const char sign = start + 2 < src_.size() ? src_[start + 2] : 0;
      std::string text = src_.substr(pos_, start - pos_);
      if (sign == '-') {
        text.resize(text.size() - trailing_space(text, 0));
      } else if (sign != '+' && kind != '{') {
        const std::size_t l = text.rfind('\n') + 1;  // npos + 1 == 0
        const bool only_ws = l < text.size() && trailing_space(text, l) == text.size() - l;
        if ((l > 0 || line_starting_) && only_ws) text.resize(l);
      }
      emit_text(text, pos_);
      advance_to(start + 2 + ((sign == '-' || sign == '+') ? 1 : 0));
      if (kind == '#')
        comment();
      else
        tag(kind == '{' ? Piece::Kind::print : Piece::Kind::block);
    }
    return std::move(out_);
  }

 private:
  static bool opener(char c) { return c == '{' || c == '%' || c == '#'; }

  void advance_to(std::size_t p) {
    for (std::size_t k = pos_; k < p; ++k) line_ += src_[k] == '\n';
    pos_ = p;
  }

  void emit_text(const std::string& text, std::size_t at) {
    int line = line_;
    (void)at;
    if (!text.empty()) out_.push_back({Piece::Kind::text, text, {}, line});
  }

  // After an end marker at pos_ (its length n): - eats all whitespace, trim_blocks one newline.
  void finish_tag(std::size_t n, char sign, TrimBlocks trim_blocks) {
    const bool trim = trim_blocks == TrimBlocks::applies;
    std::size_t p = pos_ + n;
    if (sign == '-') {
      while (p < src_.size()) {
        const std::size_t n = leading_space(src_, p);
        if (n == 0) break;
        p += n;
      }
    } else if (trim && sign != '+' && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    advance_to(p);
    line_starting_ = src_[p - 1] == '\n';
  }

  void comment() {
    const int line = line_;
    const std::size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) fail(name_, line, "unterminated comment");
    char sign = end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
    advance_to(end);
    finish_tag(2, sign, TrimBlocks::applies);
  }

  void tag(Piece::Kind kind) {
    Piece piece{kind, "", {}, line_};
    const char close = kind == Piece::Kind::print ? '}' : '%';
    int depth = 0;
    while (true) {
      while (pos_ < src_.size() && ws(src_[pos_])) advance_to(pos_ + 1);
      if (pos_ >= src_.size()) fail(name_, piece.line, "unterminated tag");
      const char c = src_[pos_];
      for (const char sign : {'-', '+', char(0)}) {
        const std::size_t at = pos_ + (sign ? 1 : 0);
        if (depth == 0 && (sign == 0 || c == sign) && at + 1 < src_.size() && src_[at] == close &&
            src_[at + 1] == '}') {
          if (sign == '+' && close == '}') break;
          piece.toks.push_back({Token::Kind::end, "", {}, line_});
          out_.push_back(std::move(piece));
          finish_tag(at + 2 - pos_, sign,
                     close == '%' ? TrimBlocks::applies : TrimBlocks::not_here);
          return;
        }
      }
      Token t = token();
      if (t.kind == Token::Kind::op) {
        if (t.text == "(" || t.text == "[" || t.text == "{") ++depth;
        if (t.text == ")" || t.text == "]" || t.text == "}") --depth;
      }
      piece.toks.push_back(std::move(t));
    }
  }

  Token token() {
    const int line = line_;
    const char c = src_[pos_];
    std::size_t p = pos_;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (p < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[p])) || src_[p] == '_'))
        ++p;
      Token t{Token::Kind::name, src_.substr(pos_, p - pos_), {}, line};
      advance_to(p);
      return t;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) return number();
    if (c == '\'' || c == '"') return string_literal();
    static const char* const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                      "/",  "%",  "~",  "<",  ">",  "(",  ")", "[", "]",
                                      "{",  "}",  ",",  ".",  ":",  "|",  "="};
    for (const char* op : ops)
      if (src_.compare(pos_, std::string(op).size(), op) == 0) {
        advance_to(pos_ + std::string(op).size());
        return {Token::Kind::op, op, {}, line};
      }
    fail(name_, line, std::string("unexpected character '") + c + "'");
  }

  Token number() {
    const int line = line_;
    std::size_t p = pos_;
    std::string digits;
    bool is_float = false;
    auto run = [&] {
      while (p < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_'))
        if (src_[p++] != '_') digits += src_[p - 1];
    };
    run();
    if (p + 1 < src_.size() && src_[p] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
      is_float = true;
      digits += src_[p++];
      run();
    }
    if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      std::size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
        is_float = true;
        digits += src_.substr(p, q - p);
        p = q;
        run();
      }
    }
    advance_to(p);
    Token t{is_float ? Token::Kind::number : Token::Kind::integer, digits, {}, line};
    try {
      t.value = is_float ? Value::number(std::stod(digits)) : Value::integer(std::stoll(digits));
    } catch (const std::exception&) {
      fail(name_, line, "number out of range: " + digits);
    }
    return t;
  }

  static void put_utf8(unsigned v, std::string* out) {
    if (v < 0x80) {
      *out += static_cast<char>(v);
    } else if (v < 0x800) {
      *out += static_cast<char>(0xc0 | (v >> 6));
      *out += static_cast<char>(0x80 | (v & 0x3f));
    } else if (v < 0x10000) {
      *out += static_cast<char>(0xe0 | (v >> 12));
      *out += static_cast<char>(0x80 | ((v >> 6) & 0x3f));
      *out += static_cast<char>(0x80 | (v & 0x3f));
    } else {
      *out += static_cast<char>(0xf0 | (v >> 18));
      *out += static_cast<char>(0x80 | ((v >> 12) & 0x3f));
      *out += static_cast<char>(0x80 | ((v >> 6) & 0x3f));
      *out += static_cast<char>(0x80 | (v & 0x3f));
    }
  }

  // Python's unicode-escape decoding of the literal's body.
  Token string_literal() {
    const int line = line_;
    const char q = src_[pos_];
    std::size_t p = pos_ + 1;
    std::string s;
    while (true) {
      if (p >= src_.size()) fail(name_, line, "unterminated string literal");
      const char c = src_[p];
      if (c == q) break;
      if (c != '\\' || p + 1 >= src_.size()) {
        s += c;
        ++p;
        continue;
      }
      const char e = src_[p + 1];
      p += 2;
      static const std::string simple = "\\'\"abfnrtv\n";
      static const std::string mapped = "\\'\"\a\b\f\n\r\t\v";
      const auto k = simple.find(e);
      if (e == '\n') continue;  // line continuation
      if (k != std::string::npos) {
        s += mapped[k];
      } else if (e == 'x' || e == 'u' || e == 'U') {
        const std::size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        if (p + n > src_.size()) fail(name_, line, "truncated \\" + std::string(1, e) + " escape");
        const std::string hex = src_.substr(p, n);
        for (const char h : hex)
          if (!std::isxdigit(static_cast<unsigned char>(h)))
            fail(name_, line, "bad \\" + std::string(1, e) + " escape");
        const unsigned long v = std::stoul(hex, nullptr, 16);
        const std::string escape = "\\" + std::string(1, e) + hex;
        if (v > 0x10ffff) fail(name_, line, escape + " is beyond U+10FFFF");
        // Python keeps a lone surrogate in a str, which then cannot be encoded (transformers'
        // tokenizer refuses it): refused here, where the template and line are known.
        if (v >= 0xd800 && v <= 0xdfff)
          fail(name_, line,
               "string literal with the lone surrogate " + escape +
                   ", which is not text (UTF-8 cannot encode it)");
        put_utf8(static_cast<unsigned>(v), &s);
        p += n;
      } else if (e >= '0' && e <= '7') {
        unsigned v = e - '0';
        for (int k2 = 0; k2 < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++k2)
          v = v * 8 + (src_[p++] - '0');
        put_utf8(v, &s);
      } else if (e == 'N') {
        fail(name_, line, "\\N{...} escapes are not supported");
      } else {
        s += '\\';
        s += e;
      }
    }
    advance_to(p + 1);
    Token t{Token::Kind::string, s, Value::string(s), line};
    return t;
  }

  const std::string& src_;
  const std::string& name_;
  std::size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Piece> out_;
};

}  // namespace

std::vector<Piece> lex_template(const std::string& source, const std::string& name) {
  // jinja2 first makes every \r\n, \r and \n a \n, and (keep_trailing_newline=False) drops one
  // newline that ends the template.
  std::string src;
  src.reserve(source.size());
  for (std::size_t k = 0; k < source.size(); ++k) {
    if (source[k] != '\r') {
      src += source[k];
      continue;
    }
    src += '\n';
    if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(src, name).run();
}

}  // namespace kktrain::text::jinja
