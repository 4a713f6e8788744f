// Values of the chat-template interpreter with Python's semantics: truth, str(), repr(),
// equality, json.dumps, and JSON text in (text/jinja_impl.hpp).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/errors.hpp"
#include "text/jinja_impl.hpp"

namespace kktrain::text::jinja {

const Value* Dict::find(const std::string& key) const {
  for (const auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  for (auto& kv : items)
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::none;
  return v;
}
Value Value::boolean(bool x) {
  Value v;
  v.kind_ = Kind::boolean;
  v.b_ = x;
  return v;
}
Value Value::integer(std::int64_t x) {
  Value v;
  v.kind_ = Kind::integer;
  v.i_ = x;
  return v;
}
Value Value::number(double x) {
  Value v;
  v.kind_ = Kind::number;
  v.f_ = x;
  return v;
}
Value Value::string(std::string x, Origins origins) {
  Value v;
  v.kind_ = Kind::string;
  v.s_ = std::move(x);
  v.origins_ = std::move(origins);
  return v;
}
void Value::contain(const Value& item) {
  depth_ = std::max(depth_, item.depth_ + 1);
  holds_ns_ = holds_ns_ || item.holds_ns_ || item.kind_ == Kind::ns;
}
Value Value::make_list(std::vector<Value> items, Seq seq) {
  Value v;
  v.kind_ = Kind::list;
  v.depth_ = 1;
  for (const auto& item : items) v.contain(item);
  v.seq_ = seq;
  if (seq == Seq::generator) v.consumed_ = std::make_shared<bool>(false);
  v.list_ = std::make_shared<const std::vector<Value>>(std::move(items));
  return v;
}
Value Value::make_dict(Dict d) {
  Value v;
  v.kind_ = Kind::dict;
  v.depth_ = 1;
  for (const auto& kv : d.items) v.contain(kv.second);
  v.dict_ = std::make_shared<Dict>(std::move(d));
  return v;
}
Value Value::make_namespace(Dict attributes) {
  Value v;
  v.kind_ = Kind::ns;
  v.dict_ = std::make_shared<Dict>(std::move(attributes));
  return v;
}
Value Value::function(std::shared_ptr<const Callable> fn) {
  Value v;
  v.kind_ = Kind::callable;
  v.fn_ = std::move(fn);
  return v;
}
Value Value::undefined(std::string name) {
  Value v;
  v.s_ = std::move(name);
  return v;
}

const std::vector<Value>& Value::no_items() {
  static const std::vector<Value> kNone;
  return kNone;
}
const Value* Value::find(const std::string& key) const {
  return (kind_ == Kind::dict || kind_ == Kind::ns) ? dict_->find(key) : nullptr;
}
void Value::set_attribute(const std::string& key, Value v) const {
  dict_->set(key, std::move(v));
}

std::string seq_name(Value::Seq seq) {
  switch (seq) {
    case Value::Seq::list:
      return "list";
    case Value::Seq::tuple:
      return "tuple";
    case Value::Seq::range:
      return "range";
    case Value::Seq::dict_items:
      return "dict_items";
    case Value::Seq::dict_keys:
      return "dict_keys";
    case Value::Seq::dict_values:
      return "dict_values";
    case Value::Seq::generator:
      break;
  }
  return "generator";
}

void fail(const std::string& name, int line, const std::string& msg) {
  throw InputError(name + " line " + std::to_string(line) + ": " + msg);
}

bool truthy(const Value& v) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::undefined:
    case K::none:
      return false;
    case K::boolean:
      return v.as_bool();
    case K::integer:
      return v.as_int() != 0;
    case K::number:
      return v.as_float() != 0;
    case K::string:
      return !v.str().empty();
    case K::list:
      return v.is_generator() || !v.items().empty();
    case K::dict:
      return !v.dict().items.empty();
    default:
      return true;
  }
}

namespace {

// Python's repr(float): the shortest digits that round-trip, fixed notation for exponents in
// [-4, 16), scientific otherwise.
std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const auto epos = sci.find('e');
  std::string digits = sci.substr(0, 1) + (epos > 2 ? sci.substr(2, epos - 2) : "");
  const int exp = std::stoi(sci.substr(epos + 1));
  if (exp >= -4 && exp < 16) {
    std::string out;
    if (exp < 0) {
      out = "0." + std::string(-exp - 1, '0') + digits;
    } else if (static_cast<int>(digits.size()) <= exp + 1) {
      out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
    return sign + out;
  }
  std::string mant = digits.size() > 1 ? digits.substr(0, 1) + "." + digits.substr(1) : digits;
  char e[16];
  std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return sign + mant + e;
}

std::string str_repr(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x80) throw InputError("printing a list or dict holding non-ASCII text");
    if (ch == q || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += ch;
    }
  }
  return out + q;
}

void json_string(const std::string& s, bool ensure_ascii, std::string* out) {
  static const char hex[] = "0123456789abcdef";
  *out += '"';
  auto u4 = [&](unsigned v) {
    *out += "\\u";
    for (int k = 12; k >= 0; k -= 4) *out += hex[(v >> k) & 15];
  };
  for (std::size_t at = 0, n; at < s.size(); at += n) {  // a code point at a time, none stored
    n = code_point_len(s, at);
    const std::string cp = s.substr(at, n);
    const auto c = static_cast<unsigned char>(cp[0]);
    if (cp.size() == 1 && c < 0x80) {
      switch (cp[0]) {
        case '"':
          *out += "\\\"";
          break;
        case '\\':
          *out += "\\\\";
          break;
        case '\n':
          *out += "\\n";
          break;
        case '\r':
          *out += "\\r";
          break;
        case '\t':
          *out += "\\t";
          break;
        case '\b':
          *out += "\\b";
          break;
        case '\f':
          *out += "\\f";
          break;
        default:
          if (c < 0x20)
            u4(c);
          else
            *out += cp;
      }
    } else if (!ensure_ascii || cp.size() == 1) {
      *out += cp;
    } else {
      unsigned v = cp.size() == 2 ? c & 0x1f : cp.size() == 3 ? c & 0x0f : c & 0x07;
      for (std::size_t k = 1; k < cp.size(); ++k) v = (v << 6) | (cp[k] & 0x3f);
      if (v >= 0x10000) {
        v -= 0x10000;
        u4(0xd800 + (v >> 10));
        u4(0xdc00 + (v & 0x3ff));
      } else {
        u4(v);
      }
    }
  }
  *out += '"';
}

bool json_value(const Value& v, const JsonStyle& st, int depth, std::string* out) {
  using K = Value::Kind;
  const auto newline = [&](int d) {
    if (st.indent < 0) return;
    const std::size_t pad = static_cast<std::size_t>(st.indent) * static_cast<std::size_t>(d);
    if (pad >= st.max_bytes - std::min(out->size(), st.max_bytes))
      throw InputError("tojson text longer than " + std::to_string(st.max_bytes) +
                       " bytes (the output limit)");
    *out += "\n" + std::string(pad, ' ');
  };
  switch (v.kind()) {
    case K::none:
      *out += "null";
      return true;
    case K::boolean:
      *out += v.as_bool() ? "true" : "false";
      return true;
    case K::integer:
      *out += std::to_string(v.as_int());
      return true;
    case K::number:
      if (std::isnan(v.as_float()))
        *out += "NaN";
      else if (std::isinf(v.as_float()))
        *out += v.as_float() > 0 ? "Infinity" : "-Infinity";
      else
        *out += float_repr(v.as_float());
      return true;
    case K::string:
      json_string(v.str(), st.ensure_ascii, out);
      return true;
    case K::list: {
      if (v.seq() != Value::Seq::list && v.seq() != Value::Seq::tuple) return false;
      if (v.items().empty()) return *out += "[]", true;
      *out += '[';
      for (std::size_t k = 0; k < v.items().size(); ++k) {
        if (k) *out += st.item_sep;
        newline(depth + 1);
        if (!json_value(v.items()[k], st, depth + 1, out)) return false;
      }
      newline(depth);
      *out += ']';
      return true;
    }
    case K::dict: {
      if (v.dict().items.empty()) return *out += "{}", true;
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict().items) items.push_back(&kv);
      if (st.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      *out += '{';
      for (std::size_t k = 0; k < items.size(); ++k) {
        if (k) *out += st.item_sep;
        newline(depth + 1);
        json_string(items[k]->first, st.ensure_ascii, out);
        *out += st.key_sep;
        if (!json_value(items[k]->second, st, depth + 1, out)) return false;
      }
      newline(depth);
      *out += '}';
      return true;
    }
    default:
      return false;
  }
}

// j as a Value; false when j is nested deeper than max_depth - depth.
Value from_json(const nlohmann::ordered_json& j, int depth, int max_depth, bool* too_deep) {
  if (j.is_structured() && depth >= max_depth) {
    *too_deep = true;
    return Value::none();
  }
  if (j.is_null()) return Value::none();
  if (j.is_boolean()) return Value::boolean(j.get<bool>());
  if (j.is_number_integer()) return Value::integer(j.get<std::int64_t>());
  if (j.is_number()) return Value::number(j.get<double>());
  if (j.is_string()) return Value::string(j.get<std::string>());
  if (j.is_array()) {
    std::vector<Value> items;
    for (const auto& e : j) items.push_back(from_json(e, depth + 1, max_depth, too_deep));
    return Value::make_list(std::move(items));
  }
  Dict d;
  for (const auto& kv : j.items())
    d.items.emplace_back(kv.key(), from_json(kv.value(), depth + 1, max_depth, too_deep));
  return Value::make_dict(std::move(d));
}

}  // namespace

std::string to_str(const Value& v) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::undefined:
      return "";
    case K::string:
      return v.str();
    default:
      return repr(v);
  }
}

std::string repr(const Value& v) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::undefined:
      return "Undefined";
    case K::none:
      return "None";
    case K::boolean:
      return v.as_bool() ? "True" : "False";
    case K::integer:
      return std::to_string(v.as_int());
    case K::number:
      return float_repr(v.as_float());
    case K::string:
      if (v.is_safe()) throw InputError("printing a safe (Markup) string inside a list or dict");
      return str_repr(v.str());
    case K::list: {
      if (v.seq() == Value::Seq::range || v.seq() == Value::Seq::generator)
        throw InputError(std::string("printing a ") + seq_name(v.seq()) + " is not supported");
      const bool tuple = v.seq() == Value::Seq::tuple;
      std::string out = tuple ? "(" : "[";
      for (std::size_t k = 0; k < v.items().size(); ++k)
        out += (k ? ", " : "") + repr(v.items()[k]);
      out += tuple ? (v.items().size() == 1 ? ",)" : ")") : "]";
      return v.seq() == Value::Seq::list || tuple ? out : seq_name(v.seq()) + ("(" + out + ")");
    }
    case K::dict: {
      std::string out = "{";
      for (std::size_t k = 0; k < v.dict().items.size(); ++k)
        out += (k ? ", " : "") + str_repr(v.dict().items[k].first) + ": " +
               repr(v.dict().items[k].second);
      return out + "}";
    }
    default:
      throw InputError("printing a " + type_name(v) + " is not supported");
  }
}

bool is_number(const Value& v) {
  using K = Value::Kind;
  return v.kind() == K::boolean || v.kind() == K::integer || v.kind() == K::number;
}

double as_double(const Value& v) {
  using K = Value::Kind;
  return v.kind() == K::number    ? v.as_float()
         : v.kind() == K::integer ? static_cast<double>(v.as_int())
                                  : v.as_bool();
}

bool equal(const Value& a, const Value& b, std::int64_t* work) {
  using K = Value::Kind;
  if (work) ++*work;
  if (is_number(a) && is_number(b)) {
    if (a.kind() != K::number && b.kind() != K::number)
      return (a.kind() == K::integer ? a.as_int() : a.as_bool()) ==
             (b.kind() == K::integer ? b.as_int() : b.as_bool());
    return as_double(a) == as_double(b);
  }
  if (a.kind() != b.kind()) return false;
  if (a.kind() == K::list && (a.seq() != b.seq() || a.is_generator())) return a.same_object(b);
  switch (a.kind()) {
    case K::undefined:
    case K::none:
      return true;
    case K::string:
      return a.str() == b.str();
    case K::list:
      if (a.items().size() != b.items().size()) return false;
      for (std::size_t k = 0; k < a.items().size(); ++k)
        if (!equal(a.items()[k], b.items()[k], work)) return false;
      return true;
    case K::dict:
      if (a.dict().items.size() != b.dict().items.size()) return false;
      for (const auto& kv : a.dict().items) {
        const Value* o = b.dict().find(kv.first);
        if (!o || !equal(kv.second, *o, work)) return false;
      }
      return true;
    default:
      return a.same_object(b);
  }
}

bool to_json(const Value& v, const JsonStyle& style, std::string* out) {
  return json_value(v, style, 0, out);
}

std::size_t code_point_len(const std::string& s, std::size_t k) {
  const auto c = static_cast<unsigned char>(s[k]);
  const std::size_t n = c < 0x80         ? 1
                        : (c >> 5) == 6  ? 2
                        : (c >> 4) == 14 ? 3
                        : (c >> 3) == 30 ? 4
                                         : 1;
  return k + n > s.size() ? 1 : n;
}

std::size_t code_point_count(const std::string& s) {
  std::size_t count = 0;
  for (std::size_t k = 0; k < s.size(); k += code_point_len(s, k)) ++count;
  return count;
}

std::vector<std::string> code_points(const std::string& s) {
  std::vector<std::string> out;
  for (std::size_t k = 0, n; k < s.size(); k += n) {
    n = code_point_len(s, k);
    out.push_back(s.substr(k, n));
  }
  return out;
}

bool is_py_space(const std::string& cp) {
  static const char* const wide[] = {"\xc2\x85",     "\xc2\xa0",     "\xe1\x9a\x80",
                                     "\xe2\x80\xa8", "\xe2\x80\xa9", "\xe2\x80\xaf",
                                     "\xe2\x81\x9f", "\xe3\x80\x80"};
  if (cp.size() == 1) {
    const auto c = static_cast<unsigned char>(cp[0]);
    return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
  }
  if (cp.size() == 3 && cp[0] == '\xe2' && cp[1] == '\x80' &&
      static_cast<unsigned char>(cp[2]) >= 0x80 && static_cast<unsigned char>(cp[2]) <= 0x8a)
    return true;  // U+2000..U+200A
  for (const char* w : wide)
    if (cp == w) return true;
  return false;
}

std::string type_name(const Value& v) {
  using K = Value::Kind;
  switch (v.kind()) {
    case K::undefined:
      return "Undefined";
    case K::none:
      return "NoneType";
    case K::boolean:
      return "bool";
    case K::integer:
      return "int";
    case K::number:
      return "float";
    case K::string:
      return "str";
    case K::list:
      return "list";
    case K::dict:
      return "dict";
    case K::ns:
      return "Namespace";
    default:
      return "function";
  }
}

std::shared_ptr<const std::vector<ContentSpan>> concat_origins(const Value& a, const Value& b) {
  if (!a.origins() && !b.origins()) return nullptr;
  OriginsBuilder out;
  out.add(a, 0, a.str().size(), 0);
  out.add(b, 0, b.str().size(), a.str().size());
  return out.take();
}

std::shared_ptr<const std::vector<ContentSpan>> sub_origins(const Value& v, std::size_t begin,
                                                            std::size_t end) {
  if (!v.origins()) return nullptr;
  OriginsBuilder b;
  b.add(v, begin, end, 0);
  return b.take();
}

void OriginsBuilder::add(const Value& v, std::size_t begin, std::size_t end, std::size_t at) {
  if (!v.origins()) return;
  const std::vector<ContentSpan>& spans = *v.origins();
  // spans are in order, each ending no earlier than the one before: the first that may touch
  // [begin, end) is the first ending at or after begin
  auto k = static_cast<std::size_t>(
      std::partition_point(spans.begin(), spans.end(),
                           [begin](const ContentSpan& c) { return c.end < begin; }) -
      spans.begin());
  for (; k < spans.size() && spans[k].begin <= end && spans_.size() <= max_spans_; ++k) {
    const ContentSpan& c = spans[k];
    const bool taken = begin == end ? c.begin <= begin                                // touches it
                                    : (c.begin < end && c.end > begin)                // overlaps it
                                          || (c.begin == c.end && c.begin >= begin);  // in it
    if (!taken) continue;
    const std::size_t b = std::max(c.begin, begin), e = std::max(b, std::min(c.end, end));
    push({c.message, at + (b - begin), at + (e - begin), c.field, c.offset + (b - c.begin)});
  }
}

void append_span(std::vector<ContentSpan>* spans, const ContentSpan& c) {
  if (!spans->empty()) {
    ContentSpan& last = spans->back();
    if (last.message == c.message && last.field == c.field && c.begin == last.end) {
      if (c.begin == c.end) return;  // an empty span where the last one ends: nothing new
      if (last.begin == last.end) {  // an empty span, then bytes at its place
        last = c;
        return;
      }
      if (c.offset == last.offset + (last.end - last.begin)) {  // the next bytes of the string
        last.end = c.end;
        return;
      }
    }
  }
  spans->push_back(c);
}

void OriginsBuilder::push(const ContentSpan& c) {
  append_span(&spans_, c);
}

std::shared_ptr<const std::vector<ContentSpan>> OriginsBuilder::take() {
  if (spans_.empty()) return nullptr;
  auto out = std::make_shared<const std::vector<ContentSpan>>(std::move(spans_));
  spans_.clear();
  return out;
}

Value parse_json(const std::string& text, const std::string& what, int max_depth) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(what + ": not valid JSON (" + e.what() + ")");
  }
  bool too_deep = false;
  Value v = from_json(j, 0, max_depth, &too_deep);
  if (too_deep)
    throw InputError(what + ": lists and objects nested deeper than " + std::to_string(max_depth) +
                     " (the value depth limit)");
  return v;
}

}  // namespace kktrain::text::jinja
