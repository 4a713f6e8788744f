// Operators, filters and tests of the chat-template interpreter
// (text/jinja.hpp lists them), each as jinja2 3.1 and Python define it; anything else is one
// InputError naming it and the line.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "core/errors.hpp"
#include "text/jinja_eval.hpp"

namespace kktrain::text::jinja {

using K = Value::Kind;

std::string Evaluator::str_arg(const Value& v, const std::string& what, int line) {
  if (v.kind != K::string) fail(name_, line, what + " expects a string, got " + type_name(v));
  return v.s;
}

Value Evaluator::binary(const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "~") {
    const Value sa = a.kind == K::string ? a : Value::string(to_str(a));
    const Value sb = b.kind == K::string ? b : Value::string(to_str(b));
    check_size(sa.s.size() + sb.s.size(), line);
    Value r = Value::string(sa.s + sb.s);
    r.origins = concat_origins(sa, sb);
    return r;
  }
  static const std::set<std::string> markup_ok{"==", "!=", "in", "not in"};
  if (!markup_ok.count(op)) {
    check_markup(a, "'" + op + "'", line);
    check_markup(b, "'" + op + "'", line);
  }
  if (op == "==") return Value::boolean(eq(a, b, line));
  if (op == "!=") return Value::boolean(!eq(a, b, line));
  if (op == "in" || op == "not in") {
    bool r = false;
    if (b.kind == K::string) {
      r = a.kind == K::string ? b.s.find(a.s) != std::string::npos
                              : (fail(name_, line, "'in <string>' requires a string"), false);
    } else if (b.kind == K::dict) {
      r = a.kind == K::string && b.dict->find(a.s);
    } else if (b.kind == K::list) {
      for (auto& x : iterate(b, line)) r = r || eq(a, x, line);
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
  std::int64_t r = 0;
  auto checked = [&](bool overflow, std::int64_t x, int l) {
    if (overflow) fail(name_, l, "integer overflow in '" + op + "' (beyond 64 bits)");
    return Value::integer(x);
  };
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
    if (ints) {
      const bool overflow = __builtin_add_overflow(iv(a), iv(b), &r);
      return checked(overflow, r, line);
    }
    if (nums) return Value::number(as_double(a) + as_double(b));
    if (a.kind == K::string && b.kind == K::string) {
      check_size(a.s.size() + b.s.size(), line);
      Value r = Value::string(a.s + b.s);
      r.origins = concat_origins(a, b);
      return r;
    }
    if (a.kind == K::list && b.kind == K::list && a.s == b.s && (a.s.empty() || a.s == "tuple")) {
      auto items = *a.list;
      items.insert(items.end(), b.list->begin(), b.list->end());
      spend_items(items, line);
      return Value::make_list(std::move(items), a.s);
    }
  } else if (op == "-" && nums) {
    if (ints) {
      const bool overflow = __builtin_sub_overflow(iv(a), iv(b), &r);
      return checked(overflow, r, line);
    }
    return Value::number(as_double(a) - as_double(b));
  } else if (op == "*") {
    if (ints) {
      const bool overflow = __builtin_mul_overflow(iv(a), iv(b), &r);
      return checked(overflow, r, line);
    }
    if (nums) return Value::number(as_double(a) * as_double(b));
    const Value* s = a.kind == K::string ? &a : b.kind == K::string ? &b : nullptr;
    const Value* n = s == &a ? &b : &a;
    if (s && n->kind != K::number && is_number(*n)) {
      const std::int64_t times = std::max<std::int64_t>(0, iv(*n));
      if (!s->s.empty() &&
          static_cast<std::uint64_t>(times) > limits_.max_output_bytes / s->s.size())
        check_size(limits_.max_output_bytes + 1, line);
      std::string out;
      out.reserve(s->s.size() * static_cast<std::size_t>(times));
      for (std::int64_t k = 0; k < times; ++k) out += s->s;
      return Value::string(out);
    }
  } else if (nums && (op == "/" || op == "//" || op == "%")) {
    if (as_double(b) == 0) fail(name_, line, "division by zero");
    if (op == "/") return Value::number(as_double(a) / as_double(b));
    if (ints && iv(b) == -1) {  // x // -1 is -x (-2^63 // -1 traps in C++), x % -1 is 0
      const bool overflow = __builtin_sub_overflow(std::int64_t(0), iv(a), &r);
      return op == "//" ? checked(overflow, r, line) : Value::integer(0);
    }
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
    if (ints && iv(b) >= 0) {  // by squaring: 63 steps at most
      r = 1;
      std::int64_t base = iv(a);
      for (std::uint64_t e = static_cast<std::uint64_t>(iv(b)); e; e >>= 1) {
        if ((e & 1) && __builtin_mul_overflow(r, base, &r)) return checked(true, r, line);
        if (e > 1 && __builtin_mul_overflow(base, base, &base)) return checked(true, r, line);
      }
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
  if (n == "sequence")
    return v.kind == K::string || v.kind == K::dict || v.kind == K::undefined ||
           (v.kind == K::list && (v.s.empty() || v.s == "tuple" || v.s == "range"));
  if (n == "callable") return v.kind == K::callable;
  if (n == "equalto" || n == "eq" || n == "==") return eq(v, arg(), line);
  if (n == "ne" || n == "!=") return !eq(v, arg(), line);
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
  return Value::make_list(std::move(out), "generator");
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
    return Value::make_list(std::move(out), "generator");
  }
  if (args.pos.empty()) fail(name_, line, "map needs a filter name or attribute=");
  const std::string f = str_arg(args.pos[0], "map", line);
  Args fargs;
  fargs.pos.assign(args.pos.begin() + 1, args.pos.end());
  fargs.kw = args.kw;
  for (auto& x : iterate(v, line)) out.push_back(filter(f, x, fargs, line));
  return Value::make_list(std::move(out), "generator");
}

void Evaluator::check_markup(const Value& v, const std::string& what, int line) {
  if (v.kind == K::string && v.b)
    fail(name_, line, what + " on a safe (Markup) string is not supported");
}

namespace {

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

}  // namespace

Value Evaluator::filter(const std::string& n, const Value& v, Args& args, int line) {
  static const std::set<std::string> markup_ok{"safe",   "string",  "length", "count",
                                               "tojson", "default", "d"};
  if (!markup_ok.count(n)) check_markup(v, "filter '" + n + "'", line);
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
    if (non_ascii(s)) fail(name_, line, "filter '" + n + "' on non-ASCII text");
    return s;
  };
  if (n == "trim") {
    const Value s = v.kind == K::string ? v : Value::string(text());
    return strip_value(s, kwarg(args, "chars", 0), true, true);
  }
  if (n == "safe" || n == "string") {  // safe: a Markup string (b), refused where it would escape
    Value s = v.kind == K::string ? v : Value::string(text());
    if (n == "safe") s.b = true;
    return s;
  }
  if (n == "length" || n == "count") {
    if (v.kind == K::string) return Value::integer(code_point_count(v.s));
    if (v.kind == K::list && v.s != "generator") return Value::integer(v.list->size());
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
      st.indent = static_cast<int>(std::clamp<std::int64_t>(indent->i, 0, 1 << 30));
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
    st.max_bytes = limits_.max_output_bytes;
    std::string out;
    bool ok = false;
    try {
      ok = to_json(v, st, &out);
    } catch (const InputError& e) {
      fail(name_, line, e.what());
    }
    if (!ok) fail(name_, line, "tojson of a value JSON cannot hold");
    return Value::string(out);
  }
  if (n == "items") {
    std::vector<Value> out;
    if (v.kind == K::dict)
      for (auto& kv : v.dict->items)
        out.push_back(Value::make_list({Value::string(kv.first), kv.second}, "tuple"));
    else if (v.kind != K::undefined)
      fail(name_, line, "items of a " + type_name(v));
    spend_items(out, line);
    return Value::make_list(std::move(out), "generator");
  }
  if (n == "join") {
    const Value* sep = kwarg(args, "d", 0);
    const Value* attribute = kwarg(args, "attribute", 1);
    std::string out;
    bool first = true;
    const std::string separator = sep ? to_str(*sep) : "";
    for (auto& x : iterate(v, line)) {
      const std::string piece =
          (first ? "" : separator) + to_str(attribute ? item(x, *attribute, line) : x);
      first = false;
      check_size(out.size() + piece.size(), line);
      spend(static_cast<std::int64_t>(piece.size() / kBytesPerStep), line);
      out += piece;
    }
    return Value::string(out);
  }
  if (n == "replace") {
    if (args.pos.size() < 2) fail(name_, line, "replace needs old and new");
    const Value* count = kwarg(args, "count", 2);
    std::string out;
    if (!replace(text(), to_str(args.pos[0]), to_str(args.pos[1]),
                 count && count->kind == K::integer ? count->i : -1, limits_.max_output_bytes,
                 &out))
      check_size(limits_.max_output_bytes + 1, line);
    return Value::string(out);
  }
  if (n == "selectattr" || n == "rejectattr" || n == "select" || n == "reject")
    return select(n, v, args, line);
  if (n == "map") return map(v, args, line);
  if (n == "list") return Value::make_list(iterate(v, line));
  if (n == "first" || n == "last") {
    if (n == "last" && v.kind == K::list && v.s == "generator")
      fail(name_, line, "filter 'last' of a generator (reversed() refuses it)");
    auto items = iterate(v, line);
    if (items.empty()) return Value::undefined();
    return n == "first" ? items.front() : items.back();
  }
  if (n == "reverse") {
    if (v.kind == K::string) {
      auto cps = explode(v.s, line);
      std::string out;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
      return Value::string(out);
    }
    const bool was_generator = v.kind == K::list && v.s == "generator";
    auto items = iterate(v, line);  // reversed(list) is an iterator; a generator becomes a list
    return Value::make_list(std::vector<Value>(items.rbegin(), items.rend()),
                            was_generator ? "" : "generator");
  }
  if (n == "unique") {
    std::vector<Value> out;
    std::vector<Value> seen;
    for (auto& x : iterate(v, line)) {
      Value key = x;
      if (key.kind == K::string) {
        ascii_only(key.s);  // once: linear in the string's length
        for (char& c : key.s) c = low(c);
      }
      bool dup = false;
      for (auto& s : seen) dup = dup || eq(s, key, line);
      if (!dup) {
        seen.push_back(key);
        out.push_back(x);
      }
    }
    return Value::make_list(std::move(out), "generator");
  }
  if (n == "sum") {
    Value total = Value::integer(0);
    for (auto& x : iterate(v, line)) total = binary("+", total, x, line);
    return total;
  }
  if (n == "abs") {
    if (v.kind == K::integer) {
      if (v.i == std::numeric_limits<std::int64_t>::min())
        fail(name_, line, "integer overflow in 'abs' (beyond 64 bits)");
      return Value::integer(std::llabs(v.i));
    }
    if (v.kind == K::number) return Value::number(std::fabs(v.f));
    if (v.kind == K::boolean) return Value::integer(v.b);
    fail(name_, line, "abs of a " + type_name(v));
  }
  if (n == "int") {
    const Value* dflt = kwarg(args, "default", 0);
    const Value d = dflt ? *dflt : Value::integer(0);
    if (v.kind == K::integer) return v;
    if (v.kind == K::boolean) return Value::integer(v.b);
    // int(f) for |f| >= 2^63 needs more than 64 bits (and the C++ cast is undefined)
    auto truncated = [&](double f) {
      if (std::fabs(f) >= 9223372036854775808.0)
        fail(name_, line, "filter 'int' of " + repr(Value::number(f)) + " (beyond 64 bits)");
      return Value::integer(static_cast<std::int64_t>(f));
    };
    if (v.kind == K::number) return std::isfinite(v.f) ? truncated(v.f) : d;
    if (v.kind == K::string) {
      std::string s = strip(v.s, nullptr, true, true);
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
    const std::int64_t spaces = std::max<std::int64_t>(0, width ? width->i : 4);  // ' ' * -1: ''
    check_size(width && width->kind == K::string ? 0 : static_cast<std::uint64_t>(spaces), line);
    std::string pad = width && width->kind == K::string
                          ? width->s
                          : std::string(static_cast<std::size_t>(spaces), ' ');
    std::string s = text();
    const std::size_t lines_in = static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')) + 1;
    if (!pad.empty() &&
        lines_in >
            (limits_.max_output_bytes - std::min(s.size(), limits_.max_output_bytes)) / pad.size())
      check_size(limits_.max_output_bytes + 1, line);
    // jinja2 splits with str.splitlines(); only \n is split here
    if (other_line_breaks(s))
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

}  // namespace kktrain::text::jinja
