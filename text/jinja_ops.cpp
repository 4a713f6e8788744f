// Operators and tests of the chat-template interpreter (text/jinja.hpp lists them), each as
// jinja2 3.1 and Python define it: operators are resolved from their spelling once, when the
// template is parsed (op_of), tests by name from one table (kTests); anything else is one
// InputError naming it and the line.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/errors.hpp"
#include "text/jinja_eval.hpp"

namespace kktrain::text::jinja {

using K = Value::Kind;

namespace {

struct OpName {
  Op op;
  const char* spelling;
  bool unary;
};
constexpr OpName kOps[] = {
    {Op::add, "+", false},         {Op::sub, "-", false},       {Op::mul, "*", false},
    {Op::div, "/", false},         {Op::floordiv, "//", false}, {Op::mod, "%", false},
    {Op::pow, "**", false},        {Op::concat, "~", false},    {Op::eq, "==", false},
    {Op::ne, "!=", false},         {Op::lt, "<", false},        {Op::le, "<=", false},
    {Op::gt, ">", false},          {Op::ge, ">=", false},       {Op::in, "in", false},
    {Op::not_in, "not in", false}, {Op::and_, "and", false},    {Op::or_, "or", false},
    {Op::not_, "not", true},       {Op::pos, "+", true},        {Op::neg, "-", true},
};

}  // namespace

Op op_of(const std::string& spelling, bool unary) {
  for (const auto& o : kOps)
    if (o.unary == unary && spelling == o.spelling) return o.op;
  return Op::none;
}

const char* op_spelling(Op op) {
  for (const auto& o : kOps)
    if (o.op == op) return o.spelling;
  return "?";
}

namespace {

// Python's ordering of a and b (numbers, or strings by bytes), for < <= > >=.
int compare(BuiltinCall& c, Op op, const Value& a, const Value& b) {
  if (is_number(a) && is_number(b))
    return as_double(a) < as_double(b) ? -1 : as_double(a) > as_double(b) ? 1 : 0;
  if (a.kind() == K::string && b.kind() == K::string) return a.str().compare(b.str());
  c.fail(std::string("'") + op_spelling(op) + "' between " + type_name(a) + " and " + type_name(b));
}

bool contains(BuiltinCall& c, const Value& a, const Value& b) {
  if (b.kind() == K::string) {
    if (a.kind() != K::string) c.fail("'in <string>' requires a string");
    return b.str().find(a.str()) != std::string::npos;
  }
  if (b.kind() == K::dict) return a.kind() == K::string && b.dict().find(a.str());
  if (b.kind() == K::list) {
    bool r = false;
    for (auto& x : c.iterate(b)) r = r || c.eq(a, x);
    return r;
  }
  if (b.kind() != K::undefined) c.fail("'in' on a " + type_name(b));
  return false;
}

std::int64_t iv(const Value& v) {
  return v.kind() == K::integer ? v.as_int() : std::int64_t(v.as_bool());
}

// + - * / // % ** of numbers (ints: 64 bits, an overflow refused); null when not numbers.
bool arithmetic(BuiltinCall& c, Op op, const Value& a, const Value& b, Value* out) {
  if (!is_number(a) || !is_number(b)) return false;
  const bool ints = a.kind() != K::number && b.kind() != K::number;
  std::int64_t r = 0;
  auto overflowed = [&] {
    c.fail(std::string("integer overflow in '") + op_spelling(op) + "' (beyond 64 bits)");
  };
  auto checked = [&](bool overflow) {
    if (overflow) overflowed();
    *out = Value::integer(r);
    return true;
  };
  const double x = as_double(a), y = as_double(b);
  switch (op) {
    case Op::add:
      if (ints) return checked(__builtin_add_overflow(iv(a), iv(b), &r));
      return *out = Value::number(x + y), true;
    case Op::sub:
      if (ints) return checked(__builtin_sub_overflow(iv(a), iv(b), &r));
      return *out = Value::number(x - y), true;
    case Op::mul:
      if (ints) return checked(__builtin_mul_overflow(iv(a), iv(b), &r));
      return *out = Value::number(x * y), true;
    case Op::div:
    case Op::floordiv:
    case Op::mod: {
      if (y == 0) c.fail("division by zero");
      if (op == Op::div) return *out = Value::number(x / y), true;
      if (ints && iv(b) == -1) {  // x // -1 is -x (-2^63 // -1 traps in C++), x % -1 is 0
        const bool overflow = __builtin_sub_overflow(std::int64_t(0), iv(a), &r);
        if (op == Op::mod) return *out = Value::integer(0), true;
        return checked(overflow);
      }
      if (ints) {
        const std::int64_t q = py_floordiv(iv(a), iv(b));
        return *out = Value::integer(op == Op::floordiv ? q : iv(a) - q * iv(b)), true;
      }
      if (op == Op::floordiv) return *out = Value::number(std::floor(x / y)), true;
      double m = std::fmod(x, y);
      if (m != 0 && ((m < 0) != (y < 0))) m += y;
      return *out = Value::number(m), true;
    }
    case Op::pow:
      if (ints && iv(b) >= 0) {  // by squaring: 63 steps at most
        r = 1;
        std::int64_t base = iv(a);
        for (std::uint64_t e = static_cast<std::uint64_t>(iv(b)); e; e >>= 1) {
          if ((e & 1) && __builtin_mul_overflow(r, base, &r)) overflowed();
          if (e > 1 && __builtin_mul_overflow(base, base, &base)) overflowed();
        }
        return *out = Value::integer(r), true;
      }
      return *out = Value::number(std::pow(x, y)), true;
    default:
      return false;
  }
}

// str * int (either order); null when not that.
bool repeat(BuiltinCall& c, const Value& a, const Value& b, Value* out) {
  const Value* s = a.kind() == K::string ? &a : b.kind() == K::string ? &b : nullptr;
  const Value* n = s == &a ? &b : &a;
  if (!s || n->kind() == K::number || !is_number(*n)) return false;
  const std::int64_t times = std::max<std::int64_t>(0, iv(*n));
  const std::size_t max = c.limits().max_output_bytes;
  if (!s->str().empty() && static_cast<std::uint64_t>(times) > max / s->str().size())
    c.check_size(max + 1);
  std::string text;
  text.reserve(s->str().size() * static_cast<std::size_t>(times));
  OriginsBuilder kept = c.origins_builder();  // each copy keeps the string's origins
  for (std::int64_t k = 0; k < times; ++k) {
    if (s->origins()) kept.add(*s, 0, s->str().size(), text.size());
    text += s->str();
  }
  *out = Value::string(text, c.take_origins(kept));
  return true;
}

Value concat_strings(BuiltinCall& c, const Value& a, const Value& b) {
  c.check_size(a.str().size() + b.str().size());
  return c.charged(Value::string(a.str() + b.str(), concat_origins(a, b)));
}

}  // namespace

Value Evaluator::unary(Op op, const std::string& spelling, const Value& v, int line) {
  if (op == Op::not_) return Value::boolean(!truthy(v));
  if (v.kind() == K::undefined) undefined_error(v, line);
  if (!is_number(v)) fail(name_, line, "bad operand type for unary " + spelling);
  if (op == Op::pos) return v.kind() == K::boolean ? Value::integer(v.as_bool()) : v;
  if (v.kind() == K::number) return Value::number(-v.as_float());
  if (v.kind() == K::integer && v.as_int() == std::numeric_limits<std::int64_t>::min())
    fail(name_, line, "integer overflow in unary '-' (beyond 64 bits)");
  return Value::integer(-(v.kind() == K::integer ? v.as_int() : v.as_bool()));
}

Value Evaluator::binary(Op op, const Value& a, const Value& b, int line) {
  static const std::string kNoName;
  Args none;
  BuiltinCall c{*this, kNoName, a, none, line};
  if (op == Op::concat)
    return concat_strings(c, a.kind() == K::string ? a : Value::string(to_str(a)),
                          b.kind() == K::string ? b : Value::string(to_str(b)));
  if (op != Op::eq && op != Op::ne && op != Op::in && op != Op::not_in) {
    const std::string what = std::string("'") + op_spelling(op) + "'";
    check_markup(a, what, line);
    check_markup(b, what, line);
  }
  switch (op) {
    case Op::eq:
      return Value::boolean(eq(a, b, line));
    case Op::ne:
      return Value::boolean(!eq(a, b, line));
    case Op::in:
      return Value::boolean(contains(c, a, b));
    case Op::not_in:
      return Value::boolean(!contains(c, a, b));
    default:
      break;
  }
  if (a.kind() == K::undefined) undefined_error(a, line);
  if (b.kind() == K::undefined) undefined_error(b, line);
  switch (op) {
    case Op::lt:
      return Value::boolean(compare(c, op, a, b) < 0);
    case Op::le:
      return Value::boolean(compare(c, op, a, b) <= 0);
    case Op::gt:
      return Value::boolean(compare(c, op, a, b) > 0);
    case Op::ge:
      return Value::boolean(compare(c, op, a, b) >= 0);
    default:
      break;
  }
  Value r;
  if (arithmetic(c, op, a, b, &r)) return r;
  if (op == Op::add && a.kind() == K::string && b.kind() == K::string)
    return concat_strings(c, a, b);
  if (op == Op::add && a.kind() == K::list && b.kind() == K::list && a.seq() == b.seq() &&
      (a.seq() == Value::Seq::list || a.seq() == Value::Seq::tuple)) {
    auto items = a.items();
    items.insert(items.end(), b.items().begin(), b.items().end());
    spend_items(items, line);
    return Value::make_list(std::move(items), a.seq());
  }
  if (op == Op::mul && repeat(c, a, b, &r)) return r;
  fail(name_, line,
       std::string("unsupported operand types for ") + op_spelling(op) + ": " + type_name(a) +
           " and " + type_name(b));
}

namespace {

const Value& arg(BuiltinCall& c) {
  if (c.args.pos.empty()) c.fail("test '" + c.name + "' needs an argument");
  return c.args.pos[0];
}
bool compared(BuiltinCall& c, Op op) {
  return truthy(c.binary(op, c.v, arg(c)));
}
std::int64_t int_subject(BuiltinCall& c) {
  if (c.v.kind() != K::integer && c.v.kind() != K::boolean)
    c.fail("test '" + c.name + "' on a " + type_name(c.v));
  return iv(c.v);
}
bool is_kind(const Value& v, K k) {
  return v.kind() == k;
}

struct TestDef {
  const char* name;
  bool (*fn)(BuiltinCall&);
};
const TestDef kTests[] = {
    {"defined", [](BuiltinCall& c) { return !c.v.is_undefined(); }},
    {"undefined", [](BuiltinCall& c) { return c.v.is_undefined(); }},
    {"none", [](BuiltinCall& c) { return c.v.is_none(); }},
    {"string", [](BuiltinCall& c) { return c.v.is_string(); }},
    {"number", [](BuiltinCall& c) { return is_number(c.v); }},
    {"integer", [](BuiltinCall& c) { return is_kind(c.v, K::integer); }},
    {"float", [](BuiltinCall& c) { return is_kind(c.v, K::number); }},
    {"boolean", [](BuiltinCall& c) { return is_kind(c.v, K::boolean); }},
    {"true", [](BuiltinCall& c) { return is_kind(c.v, K::boolean) && c.v.as_bool(); }},
    {"false", [](BuiltinCall& c) { return is_kind(c.v, K::boolean) && !c.v.as_bool(); }},
    {"mapping", [](BuiltinCall& c) { return c.v.is_dict(); }},
    {"iterable",
     [](BuiltinCall& c) {
       return c.v.is_string() || c.v.is_list() || c.v.is_dict() || c.v.is_undefined();
     }},
    {"sequence",
     [](BuiltinCall& c) {
       return c.v.is_string() || c.v.is_dict() || c.v.is_undefined() || c.v.is_sequence();
     }},
    {"callable", [](BuiltinCall& c) { return is_kind(c.v, K::callable); }},
    {"equalto", [](BuiltinCall& c) { return c.eq(c.v, arg(c)); }},
    {"eq", [](BuiltinCall& c) { return c.eq(c.v, arg(c)); }},
    {"==", [](BuiltinCall& c) { return c.eq(c.v, arg(c)); }},
    {"ne", [](BuiltinCall& c) { return !c.eq(c.v, arg(c)); }},
    {"!=", [](BuiltinCall& c) { return !c.eq(c.v, arg(c)); }},
    {"in", [](BuiltinCall& c) { return compared(c, Op::in); }},
    {"lt", [](BuiltinCall& c) { return compared(c, Op::lt); }},
    {"<", [](BuiltinCall& c) { return compared(c, Op::lt); }},
    {"gt", [](BuiltinCall& c) { return compared(c, Op::gt); }},
    {">", [](BuiltinCall& c) { return compared(c, Op::gt); }},
    {"le", [](BuiltinCall& c) { return compared(c, Op::le); }},
    {"<=", [](BuiltinCall& c) { return compared(c, Op::le); }},
    {"ge", [](BuiltinCall& c) { return compared(c, Op::ge); }},
    {">=", [](BuiltinCall& c) { return compared(c, Op::ge); }},
    {"odd", [](BuiltinCall& c) { return int_subject(c) % 2 != 0; }},
    {"even", [](BuiltinCall& c) { return int_subject(c) % 2 == 0; }},
    {"divisibleby",
     [](BuiltinCall& c) {
       const std::int64_t x = int_subject(c);
       const Value& d = arg(c);
       if (d.kind() != K::integer || d.as_int() == 0) c.fail("divisibleby needs a non-zero int");
       return x % d.as_int() == 0;
     }},
};

}  // namespace

int test_index(const std::string& name) {
  for (std::size_t k = 0; k < std::size(kTests); ++k)
    if (name == kTests[k].name) return static_cast<int>(k);
  return -1;
}

std::vector<std::string> test_names() {
  std::vector<std::string> out;
  for (const auto& t : kTests) out.push_back(t.name);
  return out;
}

bool Evaluator::test(int index, const std::string& n, const Value& v, Args& args, int line) {
  if (index < 0) fail(name_, line, "unknown test '" + n + "'");
  BuiltinCall c{*this, n, v, args, line};
  return kTests[index].fn(c);
}

}  // namespace kktrain::text::jinja
