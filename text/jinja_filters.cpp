// Filters of the chat-template interpreter (text/jinja.hpp lists them), each as jinja2 3.1 and
// Python define it, from one table (kFilters: name, function, named parameters with their
// defaults, whether a safe (Markup) string passes as it is), as jinja2's FILTERS: dispatch, the
// "unknown filter" error and filter_names() all come from it. Anything else is one InputError
// naming it and the line.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "core/errors.hpp"
#include "text/jinja_eval.hpp"

namespace kktrain::text::jinja {

using K = Value::Kind;

std::string Evaluator::str_arg(const Value& v, const std::string& what, int line) {
  if (v.kind() != K::string) fail(name_, line, what + " expects a string, got " + type_name(v));
  return v.str();
}

void Evaluator::check_markup(const Value& v, const std::string& what, int line) {
  if (v.kind() == K::string && v.is_safe())
    fail(name_, line, what + " on a safe (Markup) string is not supported");
}

namespace {

// str(subject), refused for what Python would print as an object address.
std::string text(BuiltinCall& c) {
  if (c.v.kind() == K::ns || c.v.kind() == K::callable)
    c.fail("filter '" + c.name + "' on a " + type_name(c.v));
  try {
    return to_str(c.v);
  } catch (const InputError& e) {
    c.fail(e.what());
  }
}

// s, refused when it holds non-ASCII text (case mapping is ASCII only here).
std::string ascii_only(BuiltinCall& c, std::string s) {
  if (non_ascii(s)) c.fail("filter '" + c.name + "' on non-ASCII text");
  return s;
}

// c.v as a string: itself (with its origins), or str() of it (without)
Value as_string(BuiltinCall& c) {
  return c.v.kind() == K::string ? c.v : Value::string(text(c));
}

Value trim(BuiltinCall& c) {
  return c.charged(strip_value(as_string(c), c.p[0], StripEnds::both));
}

Value string_(BuiltinCall& c) {
  return c.v.kind() == K::string ? c.v : Value::string(text(c));
}

Value safe(BuiltinCall& c) {  // a Markup string, refused where jinja2 would escape it
  return string_(c).as_safe();
}

Value length(BuiltinCall& c) {
  const Value& v = c.v;
  if (v.kind() == K::string) return Value::integer(code_point_count(v.str()));
  if (v.kind() == K::list && !v.is_generator()) return Value::integer(v.items().size());
  if (v.kind() == K::dict) return Value::integer(v.dict().items.size());
  if (v.kind() == K::undefined) return Value::integer(0);
  c.fail("length of a " + type_name(v));
}

Value upper(BuiltinCall& c) {
  std::string s = ascii_only(c, text(c));
  for (char& ch : s) ch = up(ch);
  return Value::string(s);
}

Value lower(BuiltinCall& c) {
  std::string s = ascii_only(c, text(c));
  for (char& ch : s) ch = low(ch);
  return Value::string(s);
}

Value capitalize(BuiltinCall& c) {
  std::string s = ascii_only(c, text(c));
  for (std::size_t k = 0; k < s.size(); ++k) s[k] = k ? low(s[k]) : up(s[k]);
  return Value::string(s);
}

Value title(BuiltinCall& c) {  // jinja2: each item after a run of [-\s({\[<] capitalized
  std::string s = ascii_only(c, text(c));
  bool start = true;
  for (char& ch : s) {
    const bool sep = ch == '-' || ch == ' ' || (ch >= 9 && ch <= 13) ||
                     (ch >= 0x1c && ch <= 0x1f) || ch == '(' || ch == '{' || ch == '[' || ch == '<';
    ch = sep ? ch : start ? up(ch) : low(ch);
    start = sep;
  }
  return Value::string(s);
}

Value default_(BuiltinCall& c) {
  const bool use = c.v.kind() == K::undefined || (truthy(*c.p[1]) && !truthy(c.v));
  return use ? *c.p[0] : c.v;
}

Value tojson(BuiltinCall& c) {
  JsonStyle st;
  const Value& indent = *c.p[1];
  const Value& seps = *c.p[2];
  st.ensure_ascii = truthy(*c.p[0]);
  if (indent.kind() == K::integer)
    st.indent = static_cast<int>(std::clamp<std::int64_t>(indent.as_int(), 0, 1 << 30));
  else if (indent.kind() != K::none)
    c.fail("tojson indent must be an int");
  st.item_sep = st.indent >= 0 ? "," : ", ";
  st.key_sep = ": ";
  if (seps.kind() == K::list && seps.items().size() == 2) {
    st.item_sep = c.str_arg(seps.items()[0], "tojson separators");
    st.key_sep = c.str_arg(seps.items()[1], "tojson separators");
  } else if (seps.kind() != K::none) {
    c.fail("tojson separators must be a pair of strings");
  }
  st.sort_keys = truthy(*c.p[3]);
  st.max_bytes = c.limits().max_output_bytes;
  std::string out;
  bool ok = false;
  try {
    ok = to_json(c.v, st, &out);
  } catch (const InputError& e) {
    c.fail(e.what());
  }
  if (!ok) c.fail("tojson of a value JSON cannot hold");
  return Value::string(out);
}

Value items(BuiltinCall& c) {
  std::vector<Value> out;
  if (c.v.kind() == K::dict)
    for (auto& kv : c.v.dict().items)
      out.push_back(Value::make_list({Value::string(kv.first), kv.second}, Value::Seq::tuple));
  else if (c.v.kind() != K::undefined)
    c.fail("items of a " + type_name(c.v));
  c.spend_items(out);
  return Value::make_list(std::move(out), Value::Seq::generator);
}

// v as a string: itself (with its origins), or str(v) (without)
Value stringified(const Value& v) {
  return v.kind() == K::string ? v : Value::string(to_str(v));
}

Value join(BuiltinCall& c) {
  const Value* attribute = c.p[1];
  std::string out;
  OriginsBuilder kept = c.origins_builder();  // each item's and the separator's
  bool first = true;
  const Value separator = stringified(*c.p[0]);
  const std::string& sep = separator.str();
  for (auto& x : c.iterate(c.v)) {
    const Value item = stringified(attribute ? c.item(x, *attribute) : x);
    const std::size_t size = (first ? 0 : sep.size()) + item.str().size();
    c.check_size(out.size() + size);
    c.spend(static_cast<std::int64_t>(size / kBytesPerStep));
    if (!first) {
      kept.add(separator, 0, sep.size(), out.size());
      out += sep;
    }
    first = false;
    kept.add(item, 0, item.str().size(), out.size());
    out += item.str();
  }
  return Value::string(out, c.take_origins(kept));
}

Value replace_(BuiltinCall& c) {
  if (c.args.pos.size() < 2) c.fail("replace needs old and new");
  const Value& count = *c.p[2];
  std::string out;
  OriginsBuilder kept = c.origins_builder();
  const std::size_t max = c.limits().max_output_bytes;
  if (!replace(as_string(c), to_str(c.args.pos[0]), stringified(c.args.pos[1]),
               count.kind() == K::integer ? count.as_int() : -1, max, &out, &kept))
    c.check_size(max + 1);
  return Value::string(out, c.take_origins(kept));
}

// The value at attribute (dotted: "a.b" is x.a.b) of x.
Value attribute_of(BuiltinCall& c, Value x, const std::string& attribute) {
  for (std::size_t p = 0, q; p <= attribute.size(); p = q + 1) {
    q = attribute.find('.', p);
    if (q == std::string::npos) q = attribute.size();
    x = c.item(x, Value::string(attribute.substr(p, q - p)));
  }
  return x;
}

// What select and its kin test: the item itself (select, reject) or an attribute of it
// (selectattr, rejectattr).
enum class Subject { item, attribute };
// Which items they keep: those passing the test (select, selectattr) or those failing it.
enum class Keep { passing, failing };

Value select(BuiltinCall& c, Subject what, Keep which) {
  const bool by_attr = what == Subject::attribute, keep = which == Keep::passing;
  Args& args = c.args;
  std::size_t k = 0;
  std::string attribute;
  if (by_attr) {
    if (args.pos.empty()) c.fail(c.name + " needs an attribute");
    attribute = c.str_arg(args.pos[k++], c.name);
  }
  std::string test_name;
  if (k < args.pos.size()) test_name = c.str_arg(args.pos[k++], c.name);
  Args targs;
  targs.pos.assign(args.pos.begin() + k, args.pos.end());
  std::vector<Value> out;
  for (auto& x : c.iterate(c.v)) {
    const Value subject = by_attr ? attribute_of(c, x, attribute) : x;
    const bool r = test_name.empty() ? truthy(subject) : c.test(test_name, subject, targs);
    if (r == keep) out.push_back(x);
  }
  return Value::make_list(std::move(out), Value::Seq::generator);
}
Value select(BuiltinCall& c) {
  return select(c, Subject::item, Keep::passing);
}
Value reject(BuiltinCall& c) {
  return select(c, Subject::item, Keep::failing);
}
Value selectattr(BuiltinCall& c) {
  return select(c, Subject::attribute, Keep::passing);
}
Value rejectattr(BuiltinCall& c) {
  return select(c, Subject::attribute, Keep::failing);
}

Value map(BuiltinCall& c) {
  std::vector<Value> out;
  Args& args = c.args;
  const Value* attribute = kwarg(args, "attribute", 99);
  if (attribute) {
    const Value* dflt = kwarg(args, "default", 99);
    for (auto& x : c.iterate(c.v)) {
      Value r = c.item(x, *attribute);
      out.push_back(r.kind() == K::undefined && dflt ? *dflt : r);
    }
    return Value::make_list(std::move(out), Value::Seq::generator);
  }
  if (args.pos.empty()) c.fail("map needs a filter name or attribute=");
  const std::string f = c.str_arg(args.pos[0], "map");
  Args fargs;
  fargs.pos.assign(args.pos.begin() + 1, args.pos.end());
  fargs.kw = args.kw;
  for (auto& x : c.iterate(c.v)) out.push_back(c.filter(f, x, fargs));
  return Value::make_list(std::move(out), Value::Seq::generator);
}

Value list(BuiltinCall& c) {
  return Value::make_list(c.iterate(c.v));
}

Value first(BuiltinCall& c) {
  auto items = c.iterate(c.v);
  return items.empty() ? Value::undefined() : items.front();
}

Value last(BuiltinCall& c) {
  if (c.v.is_generator()) c.fail("filter 'last' of a generator (reversed() refuses it)");
  auto items = c.iterate(c.v);
  return items.empty() ? Value::undefined() : items.back();
}

Value reverse(BuiltinCall& c) {
  if (c.v.kind() == K::string) {  // each code point keeps its origins
    auto cps = c.explode(c.v.str());
    std::string out;
    OriginsBuilder kept = c.origins_builder();
    std::size_t end = c.v.str().size();
    for (auto it = cps.rbegin(); it != cps.rend(); ++it) {
      if (c.v.origins()) kept.add(c.v, end - it->size(), end, out.size());
      end -= it->size();
      out += *it;
    }
    return Value::string(out, c.take_origins(kept));
  }
  const bool was_generator = c.v.is_generator();
  auto items = c.iterate(c.v);  // reversed(list) is an iterator; a generator becomes a list
  return Value::make_list(std::vector<Value>(items.rbegin(), items.rend()),
                          was_generator ? Value::Seq::list : Value::Seq::generator);
}

// Items in order, each once, strings compared lower-cased (jinja2's case_sensitive=False).
Value unique(BuiltinCall& c) {
  std::vector<Value> out;
  std::vector<Value> seen;
  for (auto& x : c.iterate(c.v)) {
    Value key = x;
    if (key.kind() == K::string) {
      std::string lowered = ascii_only(c, x.str());  // one pass over the string
      for (char& ch : lowered) ch = low(ch);
      key = Value::string(std::move(lowered));
    }
    bool dup = false;
    for (auto& s : seen) dup = dup || c.eq(s, key);
    if (!dup) {
      seen.push_back(key);
      out.push_back(x);
    }
  }
  return Value::make_list(std::move(out), Value::Seq::generator);
}

Value sum(BuiltinCall& c) {
  Value total = Value::integer(0);
  for (auto& x : c.iterate(c.v)) total = c.binary(Op::add, total, x);
  return total;
}

Value abs_(BuiltinCall& c) {
  const Value& v = c.v;
  if (v.kind() == K::integer) {
    if (v.as_int() == std::numeric_limits<std::int64_t>::min())
      c.fail("integer overflow in 'abs' (beyond 64 bits)");
    return Value::integer(std::llabs(v.as_int()));
  }
  if (v.kind() == K::number) return Value::number(std::fabs(v.as_float()));
  if (v.kind() == K::boolean) return Value::integer(v.as_bool());
  c.fail("abs of a " + type_name(v));
}

Value int_(BuiltinCall& c) {
  const Value& v = c.v;
  const Value& d = *c.p[0];
  if (v.kind() == K::integer) return v;
  if (v.kind() == K::boolean) return Value::integer(v.as_bool());
  // int(f) for |f| >= 2^63 needs more than 64 bits (and the C++ cast is undefined)
  auto truncated = [&](double f) {
    if (std::fabs(f) >= 9223372036854775808.0)
      c.fail("filter 'int' of " + repr(Value::number(f)) + " (beyond 64 bits)");
    return Value::integer(static_cast<std::int64_t>(f));
  };
  if (v.kind() == K::number) return std::isfinite(v.as_float()) ? truncated(v.as_float()) : d;
  if (v.kind() == K::string) {
    std::string s = strip(v.str(), nullptr, StripEnds::both);
    try {
      std::size_t used = 0;
      const long long x = std::stoll(s, &used, 10);
      if (used == s.size()) return Value::integer(x);
      const double f = std::stod(s, &used);
      if (used == s.size() && std::isfinite(f)) return truncated(f);
    } catch (const std::out_of_range&) {
    } catch (const std::invalid_argument&) {
    }
  }
  return d;
}

Value float_(BuiltinCall& c) {
  const Value& v = c.v;
  if (is_number(v)) return Value::number(as_double(v));
  if (v.kind() == K::string) {
    std::string s = strip(v.str(), nullptr, StripEnds::both);
    try {
      std::size_t used = 0;
      const double f = std::stod(s, &used);
      if (used == s.size()) return Value::number(f);
    } catch (const std::exception&) {
    }
  }
  return *c.p[0];
}

Value round_(BuiltinCall& c) {
  const Value& v = c.v;
  const Value& prec = *c.p[0];
  const Value& how = *c.p[1];
  if (!(how.kind() == K::string && how.str() == "common"))
    c.fail("round: only method 'common' is supported");
  const std::int64_t p = prec.kind() == K::integer ? prec.as_int() : 0;
  if (v.kind() == K::integer || v.kind() == K::boolean)
    return v.kind() == K::integer ? v : Value::integer(v.as_bool());
  if (v.kind() != K::number) c.fail("round of a " + type_name(v));
  if (p == 0) return Value::number(std::nearbyint(v.as_float()));
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::min<std::int64_t>(p, 300)),
                v.as_float());
  return Value::number(std::stod(buf));
}

// Whether s holds a line break str.splitlines() splits on other than \n: \r \v \f \x1c-\x1e and
// U+0085, U+2028, U+2029 (UTF-8 C2 85, E2 80 A8, E2 80 A9).
bool other_line_breaks(const std::string& s) {
  for (std::size_t k = 0; k < s.size(); ++k) {
    const auto b = static_cast<unsigned char>(s[k]);
    if (b == '\r' || b == '\v' || b == '\f' || (b >= 0x1c && b <= 0x1e)) return true;
    if (b == 0xC2 && k + 1 < s.size() && static_cast<unsigned char>(s[k + 1]) == 0x85) return true;
    if (b == 0xE2 && k + 2 < s.size() && static_cast<unsigned char>(s[k + 1]) == 0x80 &&
        (static_cast<unsigned char>(s[k + 2]) == 0xA8 ||
         static_cast<unsigned char>(s[k + 2]) == 0xA9))
      return true;
  }
  return false;
}

Value indent(BuiltinCall& c) {
  const Value& width = *c.p[0];
  const std::int64_t spaces = std::max<std::int64_t>(0, width.as_int());  // ' ' * -1: ''
  const bool pad_text = width.kind() == K::string;
  c.check_size(pad_text ? 0 : static_cast<std::uint64_t>(spaces));
  const std::string pad =
      pad_text ? width.str() : std::string(static_cast<std::size_t>(spaces), ' ');
  const std::string s = text(c);
  const std::size_t max = c.limits().max_output_bytes;
  const std::size_t lines_in = static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')) + 1;
  if (!pad.empty() && lines_in > (max - std::min(s.size(), max)) / pad.size())
    c.check_size(max + 1);
  // jinja2 splits with str.splitlines(); only \n is split here
  if (other_line_breaks(s)) c.fail("indent of text with line separators other than \\n");
  std::vector<std::pair<std::size_t, std::size_t>> lines;  // each line's bytes in s
  std::size_t p = 0;
  for (std::size_t q; (q = s.find('\n', p)) != std::string::npos; p = q + 1)
    lines.emplace_back(p, q);
  lines.emplace_back(p, s.size());  // s + "\n" then splitlines: the last piece is this one
  const bool blank = truthy(*c.p[2]);
  // the subject's lines and newlines keep their origins, a pad string its own
  const Value subject = c.v.kind() == K::string ? c.v : Value::string(s);
  OriginsBuilder kept = c.origins_builder();
  std::string out;
  auto add_pad = [&] {
    if (pad_text) kept.add(width, 0, pad.size(), out.size());
    out += pad;
  };
  if (truthy(*c.p[1])) add_pad();
  for (std::size_t k = 0; k < lines.size(); ++k) {
    const auto [begin, end] = lines[k];
    if (k) {
      kept.add(subject, begin - 1, begin, out.size());
      out += '\n';
      if (blank || begin < end) add_pad();
    }
    kept.add(subject, begin, end, out.size());
    out.append(s, begin, end - begin);
  }
  return Value::string(out, c.take_origins(kept));
}

struct Param {
  const char* name;
  std::optional<Value> dflt;  // none: absent stays null
};

struct FilterDef {
  const char* name;
  Value (*fn)(BuiltinCall&);
  std::vector<Param> params;  // each by name, else by position
  bool on_safe = false;       // a safe (Markup) subject passes; the others refuse it
};

// kFilters: the builtin filters (jinja2's FILTERS, the subset chat templates use).
std::vector<FilterDef> make_filters() {
  const Value none = Value::none(), no = Value::boolean(false);
  return {
      {"trim", trim, {{"chars", none}}},
      {"safe", safe, {}, true},
      {"string", string_, {}, true},
      {"length", length, {}, true},
      {"count", length, {}, true},
      {"upper", upper, {}},
      {"lower", lower, {}},
      {"capitalize", capitalize, {}},
      {"title", title, {}},
      {"default", default_, {{"default_value", Value::string("")}, {"boolean", no}}, true},
      {"d", default_, {{"default_value", Value::string("")}, {"boolean", no}}, true},
      {"tojson",
       tojson,
       {{"ensure_ascii", no}, {"indent", none}, {"separators", none}, {"sort_keys", no}},
       true},
      {"items", items, {}},
      {"join", join, {{"d", Value::string("")}, {"attribute", std::nullopt}}},
      {"replace", replace_, {{"old", std::nullopt}, {"new", std::nullopt}, {"count", none}}},
      {"select", select, {}},
      {"reject", reject, {}},
      {"selectattr", selectattr, {}},
      {"rejectattr", rejectattr, {}},
      {"map", map, {}},
      {"list", list, {}},
      {"first", first, {}},
      {"last", last, {}},
      {"reverse", reverse, {}},
      {"unique", unique, {}},
      {"sum", sum, {}},
      {"abs", abs_, {}},
      {"int", int_, {{"default", Value::integer(0)}}},
      {"float", float_, {{"default", Value::number(0)}}},
      {"round", round_, {{"precision", Value::integer(0)}, {"method", Value::string("common")}}},
      {"indent", indent, {{"width", Value::integer(4)}, {"first", no}, {"blank", no}}},
  };
}

const std::vector<FilterDef>& filters() {
  static const std::vector<FilterDef> kFilters = make_filters();
  return kFilters;
}

}  // namespace

int filter_index(const std::string& name) {
  const auto& all = filters();
  for (std::size_t k = 0; k < all.size(); ++k)
    if (name == all[k].name) return static_cast<int>(k);
  return -1;
}

std::vector<std::string> filter_names() {
  std::vector<std::string> out;
  for (const auto& f : filters()) out.push_back(f.name);
  return out;
}

Value Evaluator::filter(int index, const std::string& n, const Value& v, Args& args, int line) {
  if (index < 0) {
    check_markup(v, "filter '" + n + "'", line);
    fail(name_, line, "unknown filter '" + n + "'");
  }
  const FilterDef& def = filters()[static_cast<std::size_t>(index)];
  if (!def.on_safe) check_markup(v, "filter '" + n + "'", line);
  BuiltinCall c{*this, n, v, args, line};
  for (std::size_t k = 0; k < def.params.size(); ++k) {
    c.p[k] = kwarg(args, def.params[k].name, k);
    if (!c.p[k] && def.params[k].dflt) c.p[k] = &*def.params[k].dflt;
  }
  return def.fn(c);
}

}  // namespace kktrain::text::jinja
