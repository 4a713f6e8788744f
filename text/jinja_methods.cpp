// Methods (str, dict) and globals (raise_exception, strftime_now, namespace, dict, range) of the
// chat-template interpreter, as Python and jinja2 define them (text/jinja.hpp lists them).
#include <ctime>
#include <set>

#include "core/errors.hpp"
#include "text/jinja_eval.hpp"

namespace kktrain::text::jinja {

using K = Value::Kind;

// The most items range() makes, as jinja2's sandbox (jinja2.sandbox.MAX_RANGE).
constexpr std::int64_t kMaxRange = 100000;

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
                                      : Value::make_list({Value::string(kv.first), kv.second},
                                                         Value::Seq::tuple));
      spend_items(out, l);
      return Value::make_list(std::move(out), n == "keys"     ? Value::Seq::dict_keys
                                              : n == "values" ? Value::Seq::dict_values
                                                              : Value::Seq::dict_items);
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
      return strip_value(self, a.pos.empty() ? nullptr : &a.pos[0],
                         n == "lstrip"   ? StripEnds::left
                         : n == "rstrip" ? StripEnds::right
                                         : StripEnds::both);
    if (n == "split") {
      const Value* sep = kwarg(a, "sep", 0);
      const Value* mx = kwarg(a, "maxsplit", 1);
      if (sep && sep->kind == K::string && sep->s.empty()) fail(name_, l, "split: empty separator");
      // at most as many pieces as the steps left (each costs one)
      std::vector<Value> pieces;
      if (!split(s, sep, mx && mx->kind == K::integer ? mx->i : -1, steps_left(), &pieces))
        spend(limits_.max_steps, l);
      spend_items(pieces, l);
      return Value::make_list(std::move(pieces));
    }
    if (n == "replace") {
      if (a.pos.size() < 2) fail(name_, l, "replace needs old and new");
      std::string out;
      if (!replace(s, str_arg(a.pos[0], n, l), str_arg(a.pos[1], n, l),
                   a.pos.size() > 2 ? a.pos[2].i : -1, limits_.max_output_bytes, &out))
        check_size(limits_.max_output_bytes + 1, l);
      return Value::string(out);
    }
    if (non_ascii(s)) fail(name_, l, "str." + n + " on non-ASCII text");
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
  g.set("namespace", builtin("namespace", [this](Args& a, int line) {
          Value v;
          v.kind = K::ns;
          v.dict = std::make_shared<Dict>();
          for (auto& kv : a.kw) {
            check_value_depth(kv.second, line);
            check_not_namespace(kv.second, line);
            v.dict->set(kv.first, kv.second);
          }
          return v;
        }));
  g.set("dict", builtin("dict", [this](Args& a, int line) {
          Dict d;
          for (auto& kv : a.kw) d.set(kv.first, kv.second);
          Value v = Value::make_dict(std::move(d));
          check_value_depth(v, line);
          return v;
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
          // len(range(lo, hi, step)), in 128 bits: the bounds may be any int64
          const __int128 span = step > 0 ? __int128(hi) - lo : __int128(lo) - hi;
          const __int128 by = step > 0 ? __int128(step) : -__int128(step);
          const __int128 count = span <= 0 ? 0 : (span - 1) / by + 1;
          if (count > kMaxRange)
            fail(name_, line,
                 "range() of more than " + std::to_string(kMaxRange) +
                     " items (the limit of jinja2's sandbox, MAX_RANGE)");
          std::vector<Value> out;
          for (__int128 k = 0; k < count; ++k)
            out.push_back(Value::integer(static_cast<std::int64_t>(lo + k * step)));
          spend_items(out, line);
          return Value::make_list(std::move(out), Value::Seq::range);
        }));
  return g;
}

}  // namespace kktrain::text::jinja
