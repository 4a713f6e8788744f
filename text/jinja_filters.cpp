// Operators, filters, tests, methods and globals of the chat-template interpreter
// (text/jinja.hpp lists them), each as jinja2 3.1 and Python define it; anything else is one
// InputError naming it and the line.
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>

#include "core/errors.hpp"
#include "text/jinja_eval.hpp"

namespace kktrain::text::jinja {

using K = Value::Kind;

namespace {

const Value* kwarg(Args& a, const std::string& n, std::size_t pos) {
  for (auto& kv : a.kw)
    if (kv.first == n) return &kv.second;
  return pos < a.pos.size() ? &a.pos[pos] : nullptr;
}

bool has_upper_lower_unicode(const std::string& s) {
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

std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  auto cps = code_points(s);
  std::vector<std::string> set;
  if (chars && chars->kind == K::string) set = code_points(chars->s);
  auto drop = [&](const std::string& cp) {
    if (!chars || chars->kind == K::none) return is_py_space(cp);
    for (auto& c : set)
      if (c == cp) return true;
    return false;
  };
  std::size_t a = 0, b = cps.size();
  if (left)
    while (a < b && drop(cps[a])) ++a;
  if (right)
    while (b > a && drop(cps[b - 1])) --b;
  std::string out;
  for (std::size_t k = a; k < b; ++k) out += cps[k];
  return out;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to,
                    std::int64_t count) {
  std::string out;
  if (from.empty()) {
    auto cps = code_points(s);
    std::int64_t n = 0;
    for (auto& cp : cps) {
      if (count < 0 || n++ < count) out += to;
      out += cp;
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  std::size_t p = 0;
  std::int64_t n = 0;
  while (count < 0 || n < count) {
    const std::size_t q = s.find(from, p);
    if (q == std::string::npos) break;
    out += s.substr(p, q - p) + to;
    p = q + from.size();
    ++n;
  }
  return out + s.substr(p);
}

std::vector<Value> split(const std::string& s, const Value* sep, std::int64_t maxsplit) {
  std::vector<Value> out;
  if (!sep || sep->kind == K::none) {
    auto cps = code_points(s);
    std::size_t k = 0;
    while (true) {
      while (k < cps.size() && is_py_space(cps[k])) ++k;
      if (k >= cps.size()) break;
      std::string word;
      if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) >= maxsplit) {
        std::size_t e = cps.size();
        while (e > k && is_py_space(cps[e - 1])) --e;
        for (; k < e; ++k) word += cps[k];
        out.push_back(Value::string(word));
        break;
      }
      while (k < cps.size() && !is_py_space(cps[k])) word += cps[k++];
      out.push_back(Value::string(word));
    }
    return out;
  }
  std::size_t p = 0;
  while (maxsplit < 0 || static_cast<std::int64_t>(out.size()) < maxsplit) {
    const std::size_t q = s.find(sep->s, p);
    if (q == std::string::npos) break;
    out.push_back(Value::string(s.substr(p, q - p)));
    p = q + sep->s.size();
  }
  out.push_back(Value::string(s.substr(p)));
  return out;
}

Value builtin(const std::string& name, std::function<Value(Args&, int)> f) {
  auto c = std::make_shared<Callable>();
  c->name = name;
  c->call = std::move(f);
  Value v;
  v.kind = K::callable;
  v.fn = c;
  return v;
}

std::int64_t py_floordiv(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

std::string Evaluator::str_arg(const Value& v, const std::string& what, int line) {
  if (v.kind != K::string) fail(name_, line, what + " expects a string, got " + type_name(v));
  return v.s;
}

Value Evaluator::binary(const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "~") return Value::string(to_str(a) + to_str(b));
  if (op == "==") return Value::boolean(equal(a, b));
  if (op == "!=") return Value::boolean(!equal(a, b));
  if (op == "in" || op == "not in") {
    bool r = false;
    if (b.kind == K::string) {
      r = a.kind == K::string ? b.s.find(a.s) != std::string::npos
                              : (fail(name_, line, "'in <string>' requires a string"), false);
    } else if (b.kind == K::dict) {
      r = a.kind == K::string && b.dict->find(a.s);
    } else if (b.kind == K::list) {
      for (auto& x : *b.list) r = r || equal(a, x);
    } else if (b.kind != K::undefined) {
      fail(name_, line, "'in' on a " + type_name(b));
    }
    return Value::boolean(op == "in" ? r : !r);
  }
  if (a.kind == K::undefined) undefined_error(a, line);
  if (b.kind == K::undefined) undefined_error(b, line);
  const bool nums = is_number(a) && is_number(b);
  const bool ints = nums && a.kind != K::number && b.kind != K::number;
  auto iv = [](const Value& v) { return v.kind == K::integer ? v.i : std::int64_t(v.b); };
  if (op == "<" || op == "<=" || op == ">" || op == ">=") {
    int c = 0;
    if (nums)
      c = as_double(a) < as_double(b) ? -1 : as_double(a) > as_double(b) ? 1 : 0;
    else if (a.kind == K::string && b.kind == K::string)
      c = a.s.compare(b.s);
    else
      fail(name_, line, "'" + op + "' between " + type_name(a) + " and " + type_name(b));
    return Value::boolean(op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0);
  }
  if (op == "+") {
    if (ints) return Value::integer(iv(a) + iv(b));
    if (nums) return Value::number(as_double(a) + as_double(b));
    if (a.kind == K::string && b.kind == K::string) return Value::string(a.s + b.s);
    if (a.kind == K::list && b.kind == K::list) {
      auto items = *a.list;
      items.insert(items.end(), b.list->begin(), b.list->end());
      return Value::make_list(std::move(items));
    }
  } else if (op == "-" && nums) {
    return ints ? Value::integer(iv(a) - iv(b)) : Value::number(as_double(a) - as_double(b));
  } else if (op == "*") {
    if (ints) return Value::integer(iv(a) * iv(b));
    if (nums) return Value::number(as_double(a) * as_double(b));
    const Value* s = a.kind == K::string ? &a : b.kind == K::string ? &b : nullptr;
    const Value* n = s == &a ? &b : &a;
    if (s && n->kind != K::number && is_number(*n)) {
      std::string out;
      for (std::int64_t k = 0; k < iv(*n); ++k) out += s->s;
      return Value::string(out);
    }
  } else if (nums && (op == "/" || op == "//" || op == "%")) {
    if (as_double(b) == 0) fail(name_, line, "division by zero");
    if (op == "/") return Value::number(as_double(a) / as_double(b));
    if (ints) {
      const std::int64_t q = py_floordiv(iv(a), iv(b));
      return op == "//" ? Value::integer(q) : Value::integer(iv(a) - q * iv(b));
    }
    const double q = std::floor(as_double(a) / as_double(b));
    if (op == "//") return Value::number(q);
    double m = std::fmod(as_double(a), as_double(b));
    if (m != 0 && ((m < 0) != (as_double(b) < 0))) m += as_double(b);
    return Value::number(m);
  } else if (op == "**" && nums) {
    if (ints && iv(b) >= 0) {
      std::int64_t r = 1;
      for (std::int64_t k = 0; k < iv(b); ++k) r *= iv(a);
      return Value::integer(r);
    }
    return Value::number(std::pow(as_double(a), as_double(b)));
  }
  fail(name_, line,
       "unsupported operand types for " + op + ": " + type_name(a) + " and " + type_name(b));
}

bool Evaluator::test(const std::string& n, const Value& v, Args& args, int line) {
  auto arg = [&]() -> const Value& {
    if (args.pos.empty()) fail(name_, line, "test '" + n + "' needs an argument");
    return args.pos[0];
  };
  if (n == "defined") return v.kind != K::undefined;
  if (n == "undefined") return v.kind == K::undefined;
  if (n == "none") return v.kind == K::none;
  if (n == "string") return v.kind == K::string;
  if (n == "number") return is_number(v);
  if (n == "integer") return v.kind == K::integer;
  if (n == "float") return v.kind == K::number;
  if (n == "boolean") return v.kind == K::boolean;
  if (n == "true") return v.kind == K::boolean && v.b;
  if (n == "false") return v.kind == K::boolean && !v.b;
  if (n == "mapping") return v.kind == K::dict;
  if (n == "iterable")
    return v.kind == K::string || v.kind == K::list || v.kind == K::dict || v.kind == K::undefined;
  if (n == "sequence") return v.kind == K::string || v.kind == K::list || v.kind == K::dict;
  if (n == "callable") return v.kind == K::callable;
  if (n == "equalto" || n == "eq" || n == "==") return equal(v, arg());
  if (n == "ne" || n == "!=") return !equal(v, arg());
  if (n == "in") return truthy(binary("in", v, arg(), line));
  static const std::set<std::string> cmp{"lt", "gt", "le", "ge", "<", ">", "<=", ">="};
  if (cmp.count(n)) {
    std::string op = n == "lt" ? "<" : n == "gt" ? ">" : n == "le" ? "<=" : n == "ge" ? ">=" : n;
    return truthy(binary(op, v, arg(), line));
  }
  if (n == "odd" || n == "even" || n == "divisibleby") {
    if (v.kind != K::integer && v.kind != K::boolean)
      fail(name_, line, "test '" + n + "' on a " + type_name(v));
    const std::int64_t x = v.kind == K::integer ? v.i : v.b;
    if (n == "odd") return x % 2 != 0;
    if (n == "even") return x % 2 == 0;
    const Value& d = arg();
    if (d.kind != K::integer || d.i == 0) fail(name_, line, "divisibleby needs a non-zero int");
    return x % d.i == 0;
  }
  fail(name_, line, "unknown test '" + n + "'");
}

Value Evaluator::select(const std::string& n, const Value& v, Args& args, int line) {
  const bool by_attr = n == "selectattr" || n == "rejectattr";
  const bool keep = n == "select" || n == "selectattr";
  std::size_t k = 0;
  std::string attribute;
  if (by_attr) {
    if (args.pos.empty()) fail(name_, line, n + " needs an attribute");
    attribute = str_arg(args.pos[k++], n, line);
  }
  std::string test_name;
  if (k < args.pos.size()) test_name = str_arg(args.pos[k++], n, line);
  Args targs;
  targs.pos.assign(args.pos.begin() + k, args.pos.end());
  std::vector<Value> out;
  for (auto& x : iterate(v, line)) {
    Value subject = x;
    if (by_attr) {
      for (std::size_t p = 0, q; p <= attribute.size(); p = q + 1) {
        q = attribute.find('.', p);
        if (q == std::string::npos) q = attribute.size();
        subject = item(subject, Value::string(attribute.substr(p, q - p)), line);
      }
    }
    const bool r = test_name.empty() ? truthy(subject) : test(test_name, subject, targs, line);
    if (r == keep) out.push_back(x);
  }
  return Value::make_list(std::move(out));
}

Value Evaluator::map(const Value& v, Args& args, int line) {
  std::vector<Value> out;
  const Value* attribute = kwarg(args, "attribute", 99);
  if (attribute) {
    const Value* dflt = kwarg(args, "default", 99);
    for (auto& x : iterate(v, line)) {
      Value r = item(x, *attribute, line);
      out.push_back(r.kind == K::undefined && dflt ? *dflt : r);
    }
    return Value::make_list(std::move(out));
  }
  if (args.pos.empty()) fail(name_, line, "map needs a filter name or attribute=");
  const std::string f = str_arg(args.pos[0], "map", line);
  Args fargs;
  fargs.pos.assign(args.pos.begin() + 1, args.pos.end());
  fargs.kw = args.kw;
  for (auto& x : iterate(v, line)) out.push_back(filter(f, x, fargs, line));
  return Value::make_list(std::move(out));
}

Value Evaluator::filter(const std::string& n, const Value& v, Args& args, int line) {
  auto text = [&]() {
    if (v.kind == K::ns || v.kind == K::callable)
      fail(name_, line, "filter '" + n + "' on a " + type_name(v));
    try {
      return to_str(v);
    } catch (const InputError& e) {
      fail(name_, line, e.what());
    }
  };
  auto ascii_only = [&](const std::string& s) {
    if (has_upper_lower_unicode(s)) fail(name_, line, "filter '" + n + "' on non-ASCII text");
    return s;
  };
  if (n == "trim") return Value::string(strip(text(), kwarg(args, "chars", 0), true, true));
  if (n == "safe") return v;
  if (n == "string") return Value::string(text());
  if (n == "length" || n == "count") {
    if (v.kind == K::string) return Value::integer(code_points(v.s).size());
    if (v.kind == K::list) return Value::integer(v.list->size());
    if (v.kind == K::dict) return Value::integer(v.dict->items.size());
    if (v.kind == K::undefined) return Value::integer(0);
    fail(name_, line, "length of a " + type_name(v));
  }
  if (n == "upper" || n == "lower") {
    std::string s = ascii_only(text());
    for (char& c : s) c = n == "upper" ? up(c) : low(c);
    return Value::string(s);
  }
  if (n == "capitalize") {
    std::string s = ascii_only(text());
    for (std::size_t k = 0; k < s.size(); ++k) s[k] = k ? low(s[k]) : up(s[k]);
    return Value::string(s);
  }
  if (n == "title") {  // jinja2: each item after a run of [-\s({\[<] capitalized
    std::string s = ascii_only(text());
    bool start = true;
    for (char& c : s) {
      const bool sep = c == '-' || c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f) ||
                       c == '(' || c == '{' || c == '[' || c == '<';
      c = sep ? c : start ? up(c) : low(c);
      start = sep;
    }
    return Value::string(s);
  }
  if (n == "default" || n == "d") {
    const Value* dflt = kwarg(args, "default_value", 0);
    const Value* boolean = kwarg(args, "boolean", 1);
    const bool use = v.kind == K::undefined || (boolean && truthy(*boolean) && !truthy(v));
    return use ? (dflt ? *dflt : Value::string("")) : v;
  }
  if (n == "tojson") {
    JsonStyle st;
    const Value* ea = kwarg(args, "ensure_ascii", 0);
    const Value* indent = kwarg(args, "indent", 1);
    const Value* seps = kwarg(args, "separators", 2);
    const Value* sk = kwarg(args, "sort_keys", 3);
    st.ensure_ascii = ea && truthy(*ea);
    if (indent && indent->kind == K::integer)
      st.indent = static_cast<int>(std::max<std::int64_t>(0, indent->i));
    else if (indent && indent->kind != K::none)
      fail(name_, line, "tojson indent must be an int");
    st.item_sep = st.indent >= 0 ? "," : ", ";
    st.key_sep = ": ";
    if (seps && seps->kind == K::list && seps->list->size() == 2) {
      st.item_sep = str_arg((*seps->list)[0], "tojson separators", line);
      st.key_sep = str_arg((*seps->list)[1], "tojson separators", line);
    } else if (seps && seps->kind != K::none) {
      fail(name_, line, "tojson separators must be a pair of strings");
    }
    st.sort_keys = sk && truthy(*sk);
    std::string out;
    if (!to_json(v, st, &out)) fail(name_, line, "tojson of a value JSON cannot hold");
    return Value::string(out);
  }
  if (n == "items") {
    std::vector<Value> out;
    if (v.kind == K::dict)
      for (auto& kv : v.dict->items)
        out.push_back(Value::make_list({Value::string(kv.first), kv.second}));
    else if (v.kind != K::undefined)
      fail(name_, line, "items of a " + type_name(v));
    return Value::make_list(std::move(out));
  }
  if (n == "join") {
    const Value* sep = kwarg(args, "d", 0);
    const Value* attribute = kwarg(args, "attribute", 1);
    std::string out;
    bool first = true;
    for (auto& x : iterate(v, line)) {
      if (!first) out += sep ? to_str(*sep) : "";
      first = false;
      out += to_str(attribute ? item(x, *attribute, line) : x);
    }
    return Value::string(out);
  }
  if (n == "replace") {
    if (args.pos.size() < 2) fail(name_, line, "replace needs old and new");
    const Value* count = kwarg(args, "count", 2);
    return Value::string(replace(text(), to_str(args.pos[0]), to_str(args.pos[1]),
                                 count && count->kind == K::integer ? count->i : -1));
  }
  if (n == "selectattr" || n == "rejectattr" || n == "select" || n == "reject")
    return select(n, v, args, line);
  if (n == "map") return map(v, args, line);
  if (n == "list") return Value::make_list(iterate(v, line));
  if (n == "first" || n == "last") {
    auto items = iterate(v, line);
    if (items.empty()) return Value::undefined();
    return n == "first" ? items.front() : items.back();
  }
  if (n == "reverse") {
    if (v.kind == K::string) {
      auto cps = code_points(v.s);
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
      return Value::string(out);
    }
    auto items = iterate(v, line);
    return Value::make_list(std::vector<Value>(items.rbegin(), items.rend()));
  }
  if (n == "unique") {
    std::vector<Value> out;
    std::vector<Value> seen;
    for (auto& x : iterate(v, line)) {
      Value key = x;
      if (key.kind == K::string)
        for (char& c : key.s) c = low(ascii_only(key.s).empty() ? c : c);
      bool dup = false;
      for (auto& s : seen) dup = dup || equal(s, key);
      if (!dup) {
        seen.push_back(key);
        out.push_back(x);
      }
    }
    return Value::make_list(std::move(out));
  }
  if (n == "sum") {
    Value total = Value::integer(0);
    for (auto& x : iterate(v, line)) total = binary("+", total, x, line);
    return total;
  }
  if (n == "abs") {
    if (v.kind == K::integer) return Value::integer(std::llabs(v.i));
    if (v.kind == K::number) return Value::number(std::fabs(v.f));
    if (v.kind == K::boolean) return Value::integer(v.b);
    fail(name_, line, "abs of a " + type_name(v));
  }
  if (n == "int") {
    const Value* dflt = kwarg(args, "default", 0);
    const Value d = dflt ? *dflt : Value::integer(0);
    if (v.kind == K::integer) return v;
    if (v.kind == K::boolean) return Value::integer(v.b);
    if (v.kind == K::number)
      return std::isfinite(v.f) ? Value::integer(static_cast<std::int64_t>(v.f)) : d;
    if (v.kind == K::string) {
      std::string s = strip(v.s, nullptr, true, true);
      try {
        std::size_t used = 0;
        const long long x = std::stoll(s, &used, 10);
        if (used == s.size()) return Value::integer(x);
        const double f = std::stod(s, &used);
        if (used == s.size() && std::isfinite(f))
          return Value::integer(static_cast<std::int64_t>(f));
      } catch (const std::exception&) {
      }
    }
    return d;
  }
  if (n == "float") {
    const Value* dflt = kwarg(args, "default", 0);
    if (is_number(v)) return Value::number(as_double(v));
    if (v.kind == K::string) {
      std::string s = strip(v.s, nullptr, true, true);
      try {
        std::size_t used = 0;
        const double f = std::stod(s, &used);
        if (used == s.size()) return Value::number(f);
      } catch (const std::exception&) {
      }
    }
    return dflt ? *dflt : Value::number(0);
  }
  if (n == "round") {
    const Value* prec = kwarg(args, "precision", 0);
    const Value* how = kwarg(args, "method", 1);
    if (how && !(how->kind == K::string && how->s == "common"))
      fail(name_, line, "round: only method 'common' is supported");
    const std::int64_t p = prec && prec->kind == K::integer ? prec->i : 0;
    if (v.kind == K::integer || v.kind == K::boolean)
      return v.kind == K::integer ? v : Value::integer(v.b);
    if (v.kind != K::number) fail(name_, line, "round of a " + type_name(v));
    if (p == 0) return Value::number(std::nearbyint(v.f));
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::min<std::int64_t>(p, 300)), v.f);
    return Value::number(std::stod(buf));
  }
  if (n == "indent") {
    const Value* width = kwarg(args, "width", 0);
    const Value* first = kwarg(args, "first", 1);
    const Value* blank = kwarg(args, "blank", 2);
    std::string pad = width && width->kind == K::string
                          ? width->s
                          : std::string(width ? static_cast<std::size_t>(width->i) : 4, ' ');
    std::string s = text();
    for (const char c : s)
      if (c == '\r' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e) ||
          static_cast<unsigned char>(c) >= 0x80)
        if (c != '\n' && (static_cast<unsigned char>(c) < 0x80))
          fail(name_, line, "indent of text with line separators other than \\n");
    std::vector<std::string> lines;
    std::size_t p = 0;
    for (std::size_t q; (q = s.find('\n', p)) != std::string::npos; p = q + 1)
      lines.push_back(s.substr(p, q - p));
    lines.push_back(s.substr(p));  // s + "\n" then splitlines: the last piece is this one
    std::string out = lines[0];
    for (std::size_t k = 1; k < lines.size(); ++k)
      out += "\n" + ((blank && truthy(*blank)) || !lines[k].empty() ? pad + lines[k] : lines[k]);
    if (first && truthy(*first)) out = pad + out;
    return Value::string(out);
  }
  fail(name_, line, "unknown filter '" + n + "'");
}

bool Evaluator::is_dict_method(const std::string& n) {
  return n == "get" || n == "keys" || n == "values" || n == "items";
}
bool Evaluator::is_str_method(const std::string& n) {
  static const std::set<std::string> m{"startswith", "endswith", "split",     "strip",
                                       "lstrip",     "rstrip",   "upper",     "lower",
                                       "replace",    "title",    "capitalize"};
  return m.count(n) > 0;
}

Value Evaluator::method(const Value& obj, const std::string& n, int /*line*/) {
  Value self = obj;
  return builtin(n, [this, self, n](Args& a, int l) -> Value {
    if (self.kind == K::dict) {
      if (n == "get") {
        if (a.pos.empty()) fail(name_, l, "get needs a key");
        const Value* v = a.pos[0].kind == K::string ? self.dict->find(a.pos[0].s) : nullptr;
        return v ? *v : a.pos.size() > 1 ? a.pos[1] : Value::none();
      }
      std::vector<Value> out;
      for (auto& kv : self.dict->items)
        out.push_back(n == "keys"     ? Value::string(kv.first)
                      : n == "values" ? kv.second
                                      : Value::make_list({Value::string(kv.first), kv.second}));
      return Value::make_list(std::move(out));
    }
    const std::string& s = self.s;
    if (n == "startswith" || n == "endswith") {
      if (a.pos.empty()) fail(name_, l, n + " needs an argument");
      std::vector<Value> opts =
          a.pos[0].kind == K::list ? *a.pos[0].list : std::vector<Value>{a.pos[0]};
      for (auto& o : opts) {
        const std::string p = str_arg(o, n, l);
        if (n == "startswith"
                ? s.compare(0, p.size(), p) == 0 && s.size() >= p.size()
                : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0)
          return Value::boolean(true);
      }
      return Value::boolean(false);
    }
    if (n == "strip" || n == "lstrip" || n == "rstrip")
      return Value::string(
          strip(s, a.pos.empty() ? nullptr : &a.pos[0], n != "rstrip", n != "lstrip"));
    if (n == "split") {
      const Value* sep = kwarg(a, "sep", 0);
      const Value* mx = kwarg(a, "maxsplit", 1);
      if (sep && sep->kind == K::string && sep->s.empty()) fail(name_, l, "split: empty separator");
      return Value::make_list(split(s, sep, mx && mx->kind == K::integer ? mx->i : -1));
    }
    if (n == "replace") {
      if (a.pos.size() < 2) fail(name_, l, "replace needs old and new");
      return Value::string(replace(s, str_arg(a.pos[0], n, l), str_arg(a.pos[1], n, l),
                                   a.pos.size() > 2 ? a.pos[2].i : -1));
    }
    if (has_upper_lower_unicode(s)) fail(name_, l, "str." + n + " on non-ASCII text");
    std::string out = s;
    bool prev_alpha = false;
    for (std::size_t k = 0; k < out.size(); ++k) {
      char& c = out[k];
      if (n == "upper")
        c = up(c);
      else if (n == "lower")
        c = low(c);
      else if (n == "capitalize")
        c = k ? low(c) : up(c);
      else {  // title: a letter after a non-letter is upper, others lower
        const bool is_a = alpha(c);
        c = is_a ? (prev_alpha ? low(c) : up(c)) : c;
        prev_alpha = is_a;
      }
    }
    return Value::string(out);
  });
}

Dict Evaluator::globals() {
  Dict g;
  g.set("raise_exception", builtin("raise_exception", [this](Args& a, int line) -> Value {
          fail(name_, line, "raise_exception: " + (a.pos.empty() ? "" : to_str(a.pos[0])));
        }));
  g.set("strftime_now", builtin("strftime_now", [this](Args& a, int line) -> Value {
          if (a.pos.empty()) fail(name_, line, "strftime_now needs a format");
          const std::time_t t = std::time(nullptr);
          std::tm tm{};
          localtime_r(&t, &tm);
          char buf[512];
          const std::size_t n =
              std::strftime(buf, sizeof buf, str_arg(a.pos[0], "strftime_now", line).c_str(), &tm);
          return Value::string(std::string(buf, n));
        }));
  g.set("namespace", builtin("namespace", [](Args& a, int) {
          Value v;
          v.kind = K::ns;
          v.dict = std::make_shared<Dict>();
          for (auto& kv : a.kw) v.dict->set(kv.first, kv.second);
          return v;
        }));
  g.set("dict", builtin("dict", [](Args& a, int) {
          Dict d;
          for (auto& kv : a.kw) d.set(kv.first, kv.second);
          return Value::make_dict(std::move(d));
        }));
  g.set("range", builtin("range", [this](Args& a, int line) {
          std::int64_t lo = 0, hi = 0, step = 1;
          for (auto& p : a.pos)
            if (p.kind != K::integer) fail(name_, line, "range expects ints");
          if (a.pos.size() == 1)
            hi = a.pos[0].i;
          else if (a.pos.size() >= 2)
            lo = a.pos[0].i, hi = a.pos[1].i;
          if (a.pos.size() == 3) step = a.pos[2].i;
          if (a.pos.empty() || a.pos.size() > 3 || step == 0) fail(name_, line, "bad range()");
          std::vector<Value> out;
          for (std::int64_t k = lo; step > 0 ? k < hi : k > hi; k += step) {
            if (out.size() > 100000) fail(name_, line, "range() too long");
            out.push_back(Value::integer(k));
          }
          return Value::make_list(std::move(out));
        }));
  return g;
}

}  // namespace kktrain::text::jinja
