// String helpers of the chat-template interpreter with Python's semantics (str.strip, replace,
// split over Unicode whitespace; ASCII case mapping) and keyword arguments (jinja_eval.hpp).
#include <set>

#include "text/jinja_eval.hpp"

namespace kktrain::text::jinja {

using K = Value::Kind;

const Value* kwarg(Args& a, const std::string& n, std::size_t pos) {
  for (auto& kv : a.kw)
    if (kv.first == n) return &kv.second;
  return pos < a.pos.size() ? &a.pos[pos] : nullptr;
}

bool non_ascii(const std::string& s) {
  for (const char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return true;
  return false;
}

char up(char c) {
  return c >= 'a' && c <= 'z' ? c - 32 : c;
}
char low(char c) {
  return c >= 'A' && c <= 'Z' ? c + 32 : c;
}
bool alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

std::string strip(const std::string& s, const Value* chars, StripEnds ends) {
  const auto r = strip_bounds(s, chars, ends);
  return s.substr(r.first, r.second - r.first);
}

Value strip_value(const Value& v, const Value* chars, StripEnds ends) {
  const auto r = strip_bounds(v.str(), chars, ends);
  return Value::string(v.str().substr(r.first, r.second - r.first),
                       sub_origins(v, r.first, r.second));
}

std::pair<std::size_t, std::size_t> strip_bounds(const std::string& s, const Value* chars,
                                                 StripEnds ends) {
  const bool left = ends != StripEnds::right, right = ends != StripEnds::left;
  std::set<std::string> set;  // the distinct code points of chars (at most 0x110000 + 256)
  if (chars && chars->kind() == K::string)
    for (std::size_t k = 0, n; k < chars->str().size(); k += n) {
      n = code_point_len(chars->str(), k);
      set.insert(chars->str().substr(k, n));
    }
  auto drop = [&](const std::string& cp) {
    if (!chars || chars->kind() == K::none) return is_py_space(cp);
    return set.count(cp) > 0;
  };
  // one pass, one code point at a time: the first kept one and the end of the last
  std::size_t first = std::string::npos, last_end = 0;
  for (std::size_t k = 0, n; k < s.size(); k += n) {
    n = code_point_len(s, k);
    if (drop(s.substr(k, n))) continue;
    if (first == std::string::npos) first = k;
    last_end = k + n;
    if (!right) break;
  }
  if (first == std::string::npos) {  // every code point dropped
    const std::size_t at = left ? s.size() : 0;
    return {at, at};
  }
  return {left ? first : 0, right ? last_end : s.size()};
}

bool replace(const Value& s, const std::string& from, const Value& to, std::int64_t count,
             std::size_t max_bytes, std::string* result, OriginsBuilder* kept) {
  std::string out;
  // each replacement checked before it is made: the result never grows past max_bytes
  auto add = [&](const Value& v, std::size_t begin, std::size_t end) {
    if (end - begin > max_bytes - out.size()) return false;
    kept->add(v, begin, end, out.size());
    out.append(v.str(), begin, end - begin);
    return true;
  };
  const std::string& text = s.str();
  const std::size_t to_size = to.str().size();
  if (from.empty()) {
    std::int64_t n = 0;
    for (std::size_t k = 0, len; k < text.size(); k += len) {
      len = code_point_len(text, k);
      if ((count < 0 || n++ < count) && !add(to, 0, to_size)) return false;
      if (!add(s, k, k + len)) return false;
    }
    if ((count < 0 || n < count) && !add(to, 0, to_size)) return false;
  } else {
    std::size_t p = 0;
    std::int64_t n = 0;
    while (count < 0 || n < count) {
      const std::size_t q = text.find(from, p);
      if (q == std::string::npos) break;
      if (!add(s, p, q) || !add(to, 0, to_size)) return false;
      p = q + from.size();
      ++n;
    }
    if (!add(s, p, text.size())) return false;
  }
  *result = std::move(out);
  return true;
}

bool split(const std::string& s, const Value* sep, std::int64_t maxsplit, std::size_t max_items,
           std::vector<std::pair<std::size_t, std::size_t>>* result) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  auto add = [&](std::size_t begin, std::size_t end) {
    if (out.size() >= max_items) return false;
    out.emplace_back(begin, end);
    return true;
  };
  if (!sep || sep->kind() == K::none) {  // a code point at a time, none stored
    auto space = [&](std::size_t k) { return is_py_space(s.substr(k, code_point_len(s, k))); };
    std::size_t k = 0;
    while (true) {
      while (k < s.size() && space(k)) k += code_point_len(s, k);
      if (k >= s.size()) break;
      if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) >= maxsplit) {
        if (!add(k, s.size())) return false;  // the rest keeps its trailing whitespace
        break;
      }
      const std::size_t begin = k;
      while (k < s.size() && !space(k)) k += code_point_len(s, k);
      if (!add(begin, k)) return false;
    }
    *result = std::move(out);
    return true;
  }
  std::size_t p = 0;
  while (maxsplit < 0 || static_cast<std::int64_t>(out.size()) < maxsplit) {
    const std::size_t q = s.find(sep->str(), p);
    if (q == std::string::npos) break;
    if (!add(p, q)) return false;
    p = q + sep->str().size();
  }
  if (!add(p, s.size())) return false;
  *result = std::move(out);
  return true;
}

Value builtin(const std::string& name, std::function<Value(Args&, int)> f) {
  auto c = std::make_shared<Callable>();
  c->name = name;
  c->call = std::move(f);
  return Value::function(std::move(c));
}

std::int64_t py_floordiv(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace kktrain::text::jinja
