// The chat-template evaluator's state (text/jinja_eval.cpp: statements and expressions;
// text/jinja_ops.cpp: operators and tests; text/jinja_filters.cpp: filters; text/jinja_methods.cpp:
// methods and globals) and its budget (Limits): evaluation depth, steps, loop iterations, the size
// of strings and of the output. BuiltinCall is what a filter, test, method or global of the tables
// sees.
#pragma once

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "text/jinja_impl.hpp"

namespace kktrain::text::jinja {

struct Scope;
using ScopeP = std::shared_ptr<Scope>;
struct Scope {
  Dict vars;
  ScopeP parent;
  Value get(const std::string& n) const;  // Undefined(n) when no scope has it
};

enum class Flow { normal, brk, cont };

// Helpers with Python's semantics (jinja_strings.cpp).
const Value* kwarg(Args& a, const std::string& n, std::size_t pos);  // by name, else position
bool non_ascii(const std::string& s);
char up(char c);  // ASCII case mapping
char low(char c);
bool alpha(char c);
// Which ends str.strip (both), lstrip (left) and rstrip (right) strip.
enum class StripEnds { both, left, right };
// str.strip / lstrip / rstrip (chars: null or None for Unicode whitespace)
std::string strip(const std::string& s, const Value* chars, StripEnds ends);
// the bytes [first, second) that strip keeps
std::pair<std::size_t, std::size_t> strip_bounds(const std::string& s, const Value* chars,
                                                 StripEnds ends);
Value strip_value(const Value& v, const Value* chars, StripEnds ends);  // keeps origins
using Origins = std::shared_ptr<const std::vector<ContentSpan>>;
// str.replace of the strings s and to (count < 0: all); false, and *out untouched, when the
// result would be longer than max_bytes. *kept gets the result's origins: s's kept bytes keep
// theirs, each copy of `to` has to's (the origin rule, Value::origins).
bool replace(const Value& s, const std::string& from, const Value& to, std::int64_t count,
             std::size_t max_bytes, std::string* out, OriginsBuilder* kept);
// str.split (sep null or None: on runs of Unicode whitespace; maxsplit < 0: no limit): the
// pieces' bytes [begin, end) in s; false, and *out untouched, when it would make more than
// max_items pieces
bool split(const std::string& s, const Value* sep, std::int64_t maxsplit, std::size_t max_items,
           std::vector<std::pair<std::size_t, std::size_t>>* out);
Value builtin(const std::string& name, std::function<Value(Args&, int)> f);  // a callable
std::int64_t py_floordiv(std::int64_t a, std::int64_t b);

// Steps a string costs per byte copied (Value strings are copied with the value).
constexpr std::size_t kBytesPerStep = 16;
// Steps each content span of a string's origins costs when the string is made or printed.
constexpr std::int64_t kStepsPerSpan = 1;
constexpr std::int64_t kStepsPerCutByte = 4;

class Evaluator {
 public:
  Evaluator(const std::string& name, const Limits& limits,
            std::vector<std::pair<std::size_t, std::size_t>>* spans)
      : name_(name), limits_(limits), spans_(spans) {}
  RenderCost cost() const { return {steps_, loops_, out_.size(), deepest_}; }
  std::vector<ContentSpan> take_content_spans() { return std::move(content_); }
  Dict globals();
  Flow exec(const Body& body, const ScopeP& sc);
  std::string take_output() { return std::move(out_); }

 private:
  Flow exec(const Node& n, const ScopeP& sc);
  Flow exec_for(const Node& n, const ScopeP& sc);
  void assign(const std::vector<std::string>& targets, const Value& v, Scope* sc, int line);
  Value make_macro(const Node& n, const ScopeP& defining);
  Value eval(const Expr& e, const ScopeP& sc);
  Value eval_kind(const Expr& e, const ScopeP& sc);
  Args eval_args(const Expr& e, const ScopeP& sc, std::size_t from);
  Value apply_chain(const Expr& e, const Value& v, const ScopeP& sc);
  // obj.n; method: method_index(n), resolved by the parser (jinja_methods.cpp)
  Value attr(const Value& obj, const std::string& n, int method, int line);
  Value item(const Value& obj, const Value& key, int line);
  Value slice(const Expr& e, const ScopeP& sc);
  std::vector<Value> iterate(const Value& v, int line);
  [[noreturn]] void undefined_error(const Value& v, int line);

  friend struct BuiltinCall;
  // jinja_ops.cpp: operators and tests (index: test_index(n))
  Value binary(Op op, const Value& a, const Value& b, int line);
  Value unary(Op op, const std::string& spelling, const Value& v, int line);
  bool test(int index, const std::string& n, const Value& v, Args& args, int line);
  // jinja_filters.cpp (index: filter_index(n))
  Value filter(int index, const std::string& n, const Value& v, Args& args, int line);
  // jinja_methods.cpp: obj's method kMethods[index], bound to obj (a callable)
  Value method(const Value& obj, int index, int line);
  // v's string, else InputError "<what> expects a string" (jinja_filters.cpp)
  std::string str_arg(const Value& v, const std::string& what, int line);

  // The budget: each refusal names the line and the limit.
  void spend(std::int64_t steps, int line);
  std::size_t steps_left() const {
    return static_cast<std::size_t>(std::max<std::int64_t>(0, limits_.max_steps - steps_));
  }
  void spend_items(const std::vector<Value>& items, int line);  // a copy of these values
  // s cut into code points (code_points), its cost spent first: kStepsPerCutByte a byte, as each
  // code point becomes a string of its own (about 32 bytes)
  std::vector<std::string> explode(const std::string& s, int line);
  void check_size(std::size_t bytes, int line);  // a string of `bytes`
  void check_value_depth(const Value& v, int line);
  void check_not_namespace(const Value& v, int line);  // what a namespace attribute may hold
  void count_iteration(int line);                      // one more for-loop iteration
  // The origins of a string made of parts: a builder holding no more spans than the steps left
  // pay for; its origins taken, their spans spent (the step limit's error when too many).
  OriginsBuilder origins_builder() const;
  Origins take_origins(OriginsBuilder& b, int line);
  Value charged(Value v, int line);                   // v, the spans of its origins spent
  bool eq(const Value& a, const Value& b, int line);  // equal(a, b), its work spent
  void emit(const std::string& text, int line);       // text appended to the output
  // One level of the evaluator's recursion (an expression or statement inside another).
  class Deeper {
   public:
    Deeper(Evaluator* ev, int line);
    ~Deeper() { --ev_->depth_; }
    Deeper(const Deeper&) = delete;
    Deeper& operator=(const Deeper&) = delete;

   private:
    Evaluator* ev_;
  };

  // Output of body run into a string (block set, macros): content spans printed meanwhile
  // become the string's origins.
  Value capture(const Body& body, const ScopeP& sc);
  void check_markup(const Value& v, const std::string& what, int line);

  std::string name_;
  const Limits& limits_;
  std::int64_t steps_ = 0, loops_ = 0;
  int depth_ = 0, deepest_ = 0;
  std::vector<std::pair<std::size_t, std::size_t>>* spans_;
  std::vector<ContentSpan> content_;  // spans printed so far (relative to out_)
  int capturing_ = 0;
  std::size_t capture_mark_ = 0;  // where the innermost capture's spans start in content_
  std::string out_;
};

// One call of a built-in filter, test, method (v: the object) or global: what its function (in the
// tables) sees, and the evaluator's services it may use.
struct BuiltinCall {
  Evaluator& ev;
  const std::string& name;  // as the template spells it ("d" for default)
  const Value& v;           // the subject
  Args& args;
  int line;
  std::array<const Value*, 4> p{};  // a filter's named parameters, bound (null: absent)

  [[noreturn]] void fail(const std::string& msg) const { jinja::fail(ev.name_, line, msg); }
  const Limits& limits() const { return ev.limits_; }
  std::vector<Value> iterate(const Value& x) { return ev.iterate(x, line); }
  Value item(const Value& obj, const Value& key) { return ev.item(obj, key, line); }
  bool eq(const Value& a, const Value& b) { return ev.eq(a, b, line); }
  Value binary(Op op, const Value& a, const Value& b) { return ev.binary(op, a, b, line); }
  bool test(const std::string& n, const Value& x, Args& a) {
    return ev.test(test_index(n), n, x, a, line);
  }
  Value filter(const std::string& n, const Value& x, Args& a) {
    return ev.filter(filter_index(n), n, x, a, line);
  }
  std::string str_arg(const Value& x, const std::string& what) { return ev.str_arg(x, what, line); }
  void spend(std::int64_t steps) { ev.spend(steps, line); }
  std::size_t steps_left() const { return ev.steps_left(); }
  void check_value_depth(const Value& x) { ev.check_value_depth(x, line); }
  void check_not_namespace(const Value& x) { ev.check_not_namespace(x, line); }
  void spend_items(const std::vector<Value>& items) { ev.spend_items(items, line); }
  std::vector<std::string> explode(const std::string& s) { return ev.explode(s, line); }
  void check_size(std::size_t bytes) { ev.check_size(bytes, line); }
  void check_markup(const Value& x, const std::string& what) { ev.check_markup(x, what, line); }
  OriginsBuilder origins_builder() const { return ev.origins_builder(); }
  Origins take_origins(OriginsBuilder& b) { return ev.take_origins(b, line); }
  Value charged(Value x) { return ev.charged(std::move(x), line); }
};

}  // namespace kktrain::text::jinja
