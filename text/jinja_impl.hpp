// Internals of the chat-template interpreter (text/jinja.hpp): the syntax tree the parser
// (jinja_parse.cpp) builds, operators resolved to Op and filters, tests and methods to their
// index in the tables, and the evaluator (jinja_eval.cpp, jinja_ops.cpp, jinja_filters.cpp,
// jinja_methods.cpp) walks, and the value helpers with Python's semantics (jinja_value.cpp).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "text/jinja.hpp"

namespace kktrain::text::jinja {

// Throws InputError "<name> line <line>: <msg>".
[[noreturn]] void fail(const std::string& name, int line, const std::string& msg);

// Operators, resolved from their spelling once, when the template is parsed.
enum class Op {
  none,
  add,       // +
  sub,       // -
  mul,       // *
  div,       // /
  floordiv,  // //
  mod,       // %
  pow,       // **
  concat,    // ~
  eq,        // ==
  ne,        // !=
  lt,        // <
  le,        // <=
  gt,        // >
  ge,        // >=
  in,        // in
  not_in,    // not in
  and_,      // and
  or_,       // or
  not_,      // not (unary)
  pos,       // + (unary)
  neg,       // - (unary)
};
// The operator spelled `spelling` (unary: as a prefix); Op::none when there is none.
Op op_of(const std::string& spelling, bool unary);
const char* op_spelling(Op op);

// Built-in filters and tests (the tables in jinja_filters.cpp and jinja_ops.cpp): the index of
// `name`, -1 when it is none of them.
int filter_index(const std::string& name);
int test_index(const std::string& name);
// Python's methods of str, list and dict (the table in jinja_methods.cpp, those kktrain refuses
// included): the index of `name`, -1 when it is none of them.
int method_index(const std::string& name);
// Their names, in table order (for documentation and error messages; methods: those supported).
std::vector<std::string> filter_names();
std::vector<std::string> test_names();
std::vector<std::string> method_names();

struct Expr;
using ExprP = std::shared_ptr<Expr>;

struct Expr {
  enum class Kind {
    literal,  // value
    name,     // name
    attr,     // args[0].name (builtin: the method `name` names, if any)
    item,     // args[0][args[1]]
    slice,    // args[0][args[1]:args[2]:args[3]] (null parts absent)
    call,     // args[0](args[1..], kwargs)
    filter,   // args[0] | name(args[1..], kwargs)
    test,     // args[0] is [not: negate] name(args[1..])
    unary,    // name ("-", "+", "not") args[0]
    binary,   // args[0] name args[1]: + - * / // % ** ~ == != < <= > >= in "not in" and or
    cond,     // args[0] if args[1] else args[2] (null: undefined)
    list,     // [args...]
    tuple,    // (args...) and bare a, b
    dict,     // {args[0]: args[1], ...}
  };
  Kind kind;
  int line = 0;
  int depth = 1;  // 1 + the deepest argument (bounded by Limits::max_nesting)
  std::string name;
  Op op = Op::none;  // unary and binary
  int builtin = -1;  // filter, test and attr: its index in the table (filters, tests, methods;
                     // -1: none, a filter or test refused when run, an attr looked up as a key)
  Value value;
  bool negate = false;
  std::vector<ExprP> args;
  std::vector<std::pair<std::string, ExprP>> kwargs;
};

struct Node;
using NodeP = std::shared_ptr<Node>;
using Body = std::vector<NodeP>;

struct Node {
  enum class Kind {
    text,        // text
    print,       // {{ expr }}
    if_,         // if expr: body else else_body (elif: an if_ in else_body)
    for_,        // for targets in expr [if cond]: body else else_body
    set,         // set targets = expr (attr non-empty: set targets[0].attr = expr)
    set_block,   // set targets[0] %}body{% endset (filters: cond chain, may be null)
    macro,       // macro targets[0](params = defaults)
    break_,      // break
    continue_,   // continue
    generation,  // generation %}body{% endgeneration
  };
  Kind kind;
  int line = 0;
  std::string text, attr;
  ExprP expr, cond;
  std::vector<std::string> targets;
  std::vector<std::string> params;
  std::vector<ExprP> defaults;  // one per param, null when it has none
  Body body, else_body;
};

struct Token {
  enum class Kind { name, string, integer, number, op, end } kind;
  std::string text;
  Value value;
  int line;
};

struct Piece {
  enum class Kind { text, print, block } kind;
  std::string text;
  std::vector<Token> toks;
  int line;
};

// The template as pieces (jinja_lex.cpp); InputError naming the line of a lexical error.
std::vector<Piece> lex_template(const std::string& source, const std::string& name);

// The template source as a tree; InputError naming the line for syntax outside the subset, a
// block left open or closed by the wrong tag, and nesting beyond limits.max_nesting.
Body parse_template(const std::string& source, const std::string& name, const Limits& limits);

// Arguments of a call: positional, then keyword.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

struct Callable {
  std::string name;
  std::function<Value(Args&, int line)> call;
};

// Python semantics of values (jinja_value.cpp).
bool truthy(const Value& v);
std::string to_str(const Value& v);  // str(v) (Undefined: "")
std::string repr(const Value& v);    // repr(v)
// a == b; *work (when given) counts the values compared
bool equal(const Value& a, const Value& b, std::int64_t* work = nullptr);
bool is_number(const Value& v);  // bool, int or float
double as_double(const Value& v);
// json.dumps(v, ensure_ascii, indent (<0: None), separators, sort_keys); false when v holds
// something JSON cannot (undefined, a callable, a namespace); InputError when the text would be
// longer than max_bytes.
struct JsonStyle {
  bool ensure_ascii = false;
  int indent = -1;
  std::string item_sep, key_sep;
  bool sort_keys = false;
  std::size_t max_bytes = static_cast<std::size_t>(-1);
};
bool to_json(const Value& v, const JsonStyle& style, std::string* out);
// Unicode code points of UTF-8 text (invalid bytes pass through as single units).
std::vector<std::string> code_points(const std::string& s);
// Without making them: the bytes of the code point at s[k], and how many s holds.
std::size_t code_point_len(const std::string& s, std::size_t k);
std::size_t code_point_count(const std::string& s);
std::string type_name(const Value& v);  // Python's type name
std::string seq_name(Value::Seq seq);   // "list", "tuple", "range", "dict_items", ...
bool is_py_space(const std::string& cp);
// The origins of a + b (strings); null when neither has any.
std::shared_ptr<const std::vector<ContentSpan>> concat_origins(const Value& a, const Value& b);
// The origins of the bytes [begin, end) of v, shifted to start at 0 (null when none).
std::shared_ptr<const std::vector<ContentSpan>> sub_origins(const Value& v, std::size_t begin,
                                                            std::size_t end);

// c appended to spans (in order, c no earlier than the last): merged into the last span when it
// continues it (the same message and string, the next bytes of both) or is an empty span at its
// end.
void append_span(std::vector<ContentSpan>* spans, const ContentSpan& c);

// The origins of a string made part by part, in order, from bytes of other strings (the origin
// rule of Value::origins): each part's bytes keep the origins they had where they land. A part
// [begin, end) of v takes v's spans that overlap it, cut to it, and v's empty spans within it;
// an empty part takes an empty span for each of v's spans that touch its place. A span that
// continues the last one (the same message and string, the next bytes of both) extends it: a
// slice of step 1, or the characters of a string joined again, make one span. O(log spans + the
// spans taken) a part.
class OriginsBuilder {
 public:
  // max_spans: it holds no more than max_spans + 1 spans, the parts added after that dropped (the
  // caller, seeing more than max_spans, refuses the string: Evaluator::take_origins)
  explicit OriginsBuilder(std::size_t max_spans = static_cast<std::size_t>(-1))
      : max_spans_(max_spans) {}
  // bytes [begin, end) of the string v, placed at byte `at` of the new string (at no less than
  // the previous part's place)
  void add(const Value& v, std::size_t begin, std::size_t end, std::size_t at);
  std::size_t size() const { return spans_.size(); }
  // the origins made (null when no part had any); the builder is empty after
  std::shared_ptr<const std::vector<ContentSpan>> take();

 private:
  void push(const ContentSpan& c);
  std::size_t max_spans_;
  std::vector<ContentSpan> spans_;
};

}  // namespace kktrain::text::jinja
