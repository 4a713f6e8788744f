// Methods (str, dict) and globals (raise_exception, strftime_now, namespace, dict, range) of the
// chat-template interpreter, as Python and jinja2 define them (text/jinja.hpp lists them), from
// two tables: kMethods (name, the Python types that have it, its function: null for a method
// Python has and kktrain refuses) and kGlobals (name, function). A method is resolved to its
// index in kMethods once, when the template is parsed (`x.name`), or by one lookup (`x["name"]`).
#include <ctime>
#include <unordered_map>

#include "core/errors.hpp"
#include "text/jinja_eval.hpp"

namespace kktrain::text::jinja {

using K = Value::Kind;

// The most items range() makes, as jinja2's sandbox (jinja2.sandbox.MAX_RANGE).
constexpr std::int64_t kMaxRange = 100000;

namespace {

// ---- methods: the subject is c.v, a str or a dict ------------------------------------------

Value dict_get(BuiltinCall& c) {
  if (c.args.pos.empty()) c.fail("get needs a key");
  const Value& key = c.args.pos[0];
  const Value* v = key.kind() == K::string ? c.v.dict().find(key.str()) : nullptr;
  return v ? *v : c.args.pos.size() > 1 ? c.args.pos[1] : Value::none();
}

// keys(), values(), items(): a view of the dict's entries
template <Value::Seq view>
Value dict_view(BuiltinCall& c) {
  std::vector<Value> out;
  for (auto& kv : c.v.dict().items)
    out.push_back(view == Value::Seq::dict_keys ? Value::string(kv.first)
                  : view == Value::Seq::dict_values
                      ? kv.second
                      : Value::make_list({Value::string(kv.first), kv.second}, Value::Seq::tuple));
  c.spend_items(out);
  return Value::make_list(std::move(out), view);
}

// startswith / endswith (an argument may be a tuple or list of alternatives)
template <bool at_start>
Value affix(BuiltinCall& c) {
  if (c.args.pos.empty()) c.fail(c.name + " needs an argument");
  const std::string& s = c.v.str();
  const Value& arg = c.args.pos[0];
  std::vector<Value> opts = arg.kind() == K::list ? arg.items() : std::vector<Value>{arg};
  for (auto& o : opts) {
    const std::string p = c.str_arg(o, c.name);
    if (at_start ? s.compare(0, p.size(), p) == 0 && s.size() >= p.size()
                 : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0)
      return Value::boolean(true);
  }
  return Value::boolean(false);
}

template <StripEnds ends>
Value strip_method(BuiltinCall& c) {
  return c.charged(strip_value(c.v, c.args.pos.empty() ? nullptr : &c.args.pos[0], ends));
}

Value split_method(BuiltinCall& c) {
  const Value* sep = kwarg(c.args, "sep", 0);
  const Value* mx = kwarg(c.args, "maxsplit", 1);
  if (sep && sep->kind() == K::string && sep->str().empty()) c.fail("split: empty separator");
  // at most as many pieces as the steps left (each costs one)
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  if (!split(c.v.str(), sep, mx && mx->kind() == K::integer ? mx->as_int() : -1, c.steps_left(),
             &ranges))
    c.spend(c.limits().max_steps);
  std::vector<Value> pieces;  // each with the origins of its bytes
  for (const auto& r : ranges)
    pieces.push_back(c.charged(Value::string(c.v.str().substr(r.first, r.second - r.first),
                                             sub_origins(c.v, r.first, r.second))));
  c.spend_items(pieces);
  return Value::make_list(std::move(pieces));
}

Value replace_method(BuiltinCall& c) {
  const auto& pos = c.args.pos;
  if (pos.size() < 2) c.fail("replace needs old and new");
  std::string out;
  OriginsBuilder kept = c.origins_builder();
  const std::size_t max = c.limits().max_output_bytes;
  c.str_arg(pos[1], c.name);
  if (!replace(c.v, c.str_arg(pos[0], c.name), pos[1], pos.size() > 2 ? pos[2].as_int() : -1, max,
               &out, &kept))
    c.check_size(max + 1);
  return Value::string(out, c.take_origins(kept));
}

// upper, lower, capitalize, title: ASCII case mapping, each character by `map(c, k, prev_alpha)`
template <char (*map)(char, std::size_t, bool)>
Value case_method(BuiltinCall& c) {
  if (non_ascii(c.v.str())) c.fail("str." + c.name + " on non-ASCII text");
  std::string out = c.v.str();
  bool prev_alpha = false;
  for (std::size_t k = 0; k < out.size(); ++k) {
    const bool is_a = alpha(out[k]);
    out[k] = map(out[k], k, prev_alpha);
    prev_alpha = is_a;
  }
  return Value::string(out);
}
char upper_char(char c, std::size_t, bool) {
  return up(c);
}
char lower_char(char c, std::size_t, bool) {
  return low(c);
}
char capitalize_char(char c, std::size_t k, bool) {
  return k ? low(c) : up(c);
}
// title: a letter after a non-letter is upper, other letters lower
char title_char(char c, std::size_t, bool prev_alpha) {
  return alpha(c) ? (prev_alpha ? low(c) : up(c)) : c;
}

// The Python types that have a method (a bit set).
constexpr unsigned kStr = 1, kList = 2, kDict = 4;

struct MethodDef {
  const char* name;
  unsigned on;                // the Python types that have it
  Value (*fn)(BuiltinCall&);  // null: refused ("method 'str.center' is not supported")
};

// kMethods: Python's methods of str, list and dict that jinja2 would find (getattr comes before
// the item for `x.name`); those with a function are kktrain's (each on one type), the others are
// refused rather than read as a missing key.
const std::vector<MethodDef>& methods() {
  static const std::vector<MethodDef> kMethods{
      // str, supported
      {"startswith", kStr, affix<true>},
      {"endswith", kStr, affix<false>},
      {"split", kStr, split_method},
      {"strip", kStr, strip_method<StripEnds::both>},
      {"lstrip", kStr, strip_method<StripEnds::left>},
      {"rstrip", kStr, strip_method<StripEnds::right>},
      {"upper", kStr, case_method<upper_char>},
      {"lower", kStr, case_method<lower_char>},
      {"replace", kStr, replace_method},
      {"title", kStr, case_method<title_char>},
      {"capitalize", kStr, case_method<capitalize_char>},
      // dict, supported
      {"get", kDict, dict_get},
      {"keys", kDict, dict_view<Value::Seq::dict_keys>},
      {"values", kDict, dict_view<Value::Seq::dict_values>},
      {"items", kDict, dict_view<Value::Seq::dict_items>},
      // refused
      {"casefold", kStr, nullptr},
      {"center", kStr, nullptr},
      {"count", kStr | kList, nullptr},
      {"encode", kStr, nullptr},
      {"expandtabs", kStr, nullptr},
      {"find", kStr, nullptr},
      {"format", kStr, nullptr},
      {"format_map", kStr, nullptr},
      {"index", kStr | kList, nullptr},
      {"isalnum", kStr, nullptr},
      {"isalpha", kStr, nullptr},
      {"isascii", kStr, nullptr},
      {"isdecimal", kStr, nullptr},
      {"isdigit", kStr, nullptr},
      {"isidentifier", kStr, nullptr},
      {"islower", kStr, nullptr},
      {"isnumeric", kStr, nullptr},
      {"isprintable", kStr, nullptr},
      {"isspace", kStr, nullptr},
      {"istitle", kStr, nullptr},
      {"isupper", kStr, nullptr},
      {"join", kStr, nullptr},
      {"ljust", kStr, nullptr},
      {"maketrans", kStr, nullptr},
      {"partition", kStr, nullptr},
      {"removeprefix", kStr, nullptr},
      {"removesuffix", kStr, nullptr},
      {"rfind", kStr, nullptr},
      {"rindex", kStr, nullptr},
      {"rjust", kStr, nullptr},
      {"rpartition", kStr, nullptr},
      {"rsplit", kStr, nullptr},
      {"splitlines", kStr, nullptr},
      {"swapcase", kStr, nullptr},
      {"translate", kStr, nullptr},
      {"zfill", kStr, nullptr},
      {"append", kList, nullptr},
      {"clear", kList | kDict, nullptr},
      {"copy", kList | kDict, nullptr},
      {"extend", kList, nullptr},
      {"insert", kList, nullptr},
      {"pop", kList | kDict, nullptr},
      {"remove", kList, nullptr},
      {"reverse", kList, nullptr},
      {"sort", kList, nullptr},
      {"fromkeys", kDict, nullptr},
      {"popitem", kDict, nullptr},
      {"setdefault", kDict, nullptr},
      {"update", kDict, nullptr},
  };
  return kMethods;
}

unsigned on_bit(K kind) {
  return kind == K::string ? kStr : kind == K::list ? kList : kind == K::dict ? kDict : 0;
}

// ---- globals -------------------------------------------------------------------------------

Value raise_exception(BuiltinCall& c) {
  c.fail("raise_exception: " + (c.args.pos.empty() ? "" : to_str(c.args.pos[0])));
}

Value strftime_now(BuiltinCall& c) {
  if (c.args.pos.empty()) c.fail("strftime_now needs a format");
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[512];
  const std::size_t n =
      std::strftime(buf, sizeof buf, c.str_arg(c.args.pos[0], "strftime_now").c_str(), &tm);
  return Value::string(std::string(buf, n));
}

Value namespace_(BuiltinCall& c) {
  Dict attributes;
  for (auto& kv : c.args.kw) {
    c.check_value_depth(kv.second);
    c.check_not_namespace(kv.second);
    attributes.set(kv.first, kv.second);
  }
  return Value::make_namespace(std::move(attributes));
}

Value dict_(BuiltinCall& c) {
  Dict d;
  for (auto& kv : c.args.kw) d.set(kv.first, kv.second);
  Value v = Value::make_dict(std::move(d));
  c.check_value_depth(v);
  return v;
}

Value range(BuiltinCall& c) {
  const auto& pos = c.args.pos;
  std::int64_t lo = 0, hi = 0, step = 1;
  for (auto& p : pos)
    if (p.kind() != K::integer) c.fail("range expects ints");
  if (pos.size() == 1)
    hi = pos[0].as_int();
  else if (pos.size() >= 2)
    lo = pos[0].as_int(), hi = pos[1].as_int();
  if (pos.size() == 3) step = pos[2].as_int();
  if (pos.empty() || pos.size() > 3 || step == 0) c.fail("bad range()");
  // len(range(lo, hi, step)), in 128 bits: the bounds may be any int64
  const __int128 span = step > 0 ? __int128(hi) - lo : __int128(lo) - hi;
  const __int128 by = step > 0 ? __int128(step) : -__int128(step);
  const __int128 count = span <= 0 ? 0 : (span - 1) / by + 1;
  if (count > kMaxRange)
    c.fail("range() of more than " + std::to_string(kMaxRange) +
           " items (the limit of jinja2's sandbox, MAX_RANGE)");
  std::vector<Value> out;
  for (__int128 k = 0; k < count; ++k)
    out.push_back(Value::integer(static_cast<std::int64_t>(lo + k * step)));
  c.spend_items(out);
  return Value::make_list(std::move(out), Value::Seq::range);
}

struct GlobalDef {
  const char* name;
  Value (*fn)(BuiltinCall&);
};

// kGlobals: the functions every template sees (transformers' globals and jinja2's).
constexpr GlobalDef kGlobals[] = {
    {"raise_exception", raise_exception},
    {"strftime_now", strftime_now},
    {"namespace", namespace_},
    {"dict", dict_},
    {"range", range},
};

}  // namespace

int method_index(const std::string& name) {
  static const std::unordered_map<std::string, int> by_name = [] {
    std::unordered_map<std::string, int> m;
    const auto& all = methods();
    for (std::size_t k = 0; k < all.size(); ++k) m.emplace(all[k].name, static_cast<int>(k));
    return m;
  }();
  const auto it = by_name.find(name);
  return it == by_name.end() ? -1 : it->second;
}

std::vector<std::string> method_names() {
  std::vector<std::string> out;
  for (const auto& m : methods())
    if (m.fn) out.push_back(m.name);
  return out;
}

Value Evaluator::attr(const Value& obj, const std::string& n, int index, int line) {
  if (obj.kind() == K::undefined) undefined_error(obj, line);
  const MethodDef* m = index >= 0 ? &methods()[static_cast<std::size_t>(index)] : nullptr;
  if (m && !(m->on & on_bit(obj.kind()))) m = nullptr;  // not a method of obj's type
  if (obj.kind() == K::dict && m && !m->fn)
    fail(name_, line, "method 'dict." + n + "' is not supported");
  if (obj.kind() == K::dict || obj.kind() == K::ns) {
    if (m) return method(obj, index, line);
    const Value* v = obj.dict().find(n);
    return v ? *v : Value::undefined(n);
  }
  if (m && m->fn) {
    check_markup(obj, "method '" + n + "'", line);
    return method(obj, index, line);
  }
  if (m) fail(name_, line, "method '" + type_name(obj) + "." + n + "' is not supported");
  return Value::undefined(n);
}

Value Evaluator::method(const Value& obj, int index, int /*line*/) {
  const MethodDef& m = methods()[static_cast<std::size_t>(index)];
  Value self = obj;
  return builtin(m.name, [this, self, &m](Args& a, int l) -> Value {
    const std::string n = m.name;
    BuiltinCall c{*this, n, self, a, l};
    return m.fn(c);
  });
}

Dict Evaluator::globals() {
  Dict g;
  for (const GlobalDef& def : kGlobals)
    g.set(def.name, builtin(def.name, [this, &def](Args& a, int line) -> Value {
            static const Value kNoSubject;
            const std::string n = def.name;
            BuiltinCall c{*this, n, kNoSubject, a, line};
            return def.fn(c);
          }));
  return g;
}

}  // namespace kktrain::text::jinja
