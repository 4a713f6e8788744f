// Chat templates: a Jinja interpreter for the subset Hugging Face chat templates use, rendering
// exactly as transformers' apply_chat_template does (jinja2's ImmutableSandboxedEnvironment with
// trim_blocks, lstrip_blocks and the loopcontrols extension; transformers' `tojson` filter
// (json.dumps with ensure_ascii=False, indent, separators, sort_keys), globals
// raise_exception(msg) and strftime_now(fmt); `{% generation %}` blocks render their body).
//
// Supported:
//   statements   if/elif/else, for (loop.index/index0/revindex/revindex0/first/last/length/
//                previtem/nextitem, `else`, `if` filters, tuple targets), break/continue, set
//                (names, tuples, namespace attributes, block set), macro (positional and keyword
//                arguments with defaults), generation, comments, whitespace control (- and +)
//   expressions  literals (strings with Python escapes, ints, floats, true/false/none in either
//                case, lists, tuples, dicts), names, attributes, subscripts, slices, calls,
//                + - * / // % ** ~, comparisons, and/or/not, in/not in, `a if c else b`
//   tests        one table, kTests in text/jinja_ops.cpp (test_names()): defined, none, string,
//                mapping, sequence, equalto, lt, odd, divisibleby, in, ...
//   filters      one table, kFilters in text/jinja_filters.cpp (filter_names()), each with its
//                named parameters and defaults: trim, length, tojson, default, join, map,
//                selectattr, indent, unique, ...
//   methods      str: startswith endswith split strip lstrip rstrip upper lower replace title
//                capitalize; dict: get keys values items
//   globals      range namespace dict raise_exception strftime_now
// Anything else (a statement, filter, test, method or syntax outside the subset, an operation
// jinja2 would refuse, upper/lower/title on non-ASCII letters, ints beyond 64 bits, printing
// what Python would print as an object address, a `safe` (Markup) string where jinja2 would
// HTML-escape) is one kktrain::InputError "<template name> line N: <what>", never a wrong
// rendering. Undefined values behave as jinja2's default Undefined: printed as "", falsy, empty
// when iterated, an error when an attribute, item or arithmetic is asked of them. Python's
// sequence types are kept apart where jinja2 shows the difference: tuples print as (a, b),
// dict.items() as dict_items([...]), and filters' results (select, map, unique, items, ...) are
// one-pass generators: always true, without a length, refused when printed or used twice.
// The source's newlines are normalized to \n and one final newline dropped, as jinja2 does.
//
// A template is code from an untrusted download: what it may cost is bounded (Limits), each
// overrun one InputError "<template name> line N: ... (the <what> limit)", in bounded time and
// memory; never a signal, a hang or an allocation without bound.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kktrain::text::jinja {

class Value;
struct Callable;  // macros and built-in functions (jinja_impl.hpp)

// What one template may cost. Measured ("cost" of tests/text/render_chat.cpp) on the largest
// real chat templates: Llama 3.1's tool-calling template (4.6 KB), Qwen3's (4.1 KB),
// DeepSeek-R1's (2.8 KB), Gemma 3's (1.5 KB) and Llama 3's, each rendering (equal to jinja2's
// rendering) a long conversation of about 1 MB of JSON: 100 turns of a question, a tool call, an
// 8 KB tool result and an answer with its reasoning (401 messages; Gemma 3 and Llama 3: 200
// turns without tools):
//   steps             246,000 - 362,000 (Llama 3: 362,004)
//   loop iterations   200 - 902 (Qwen3, DeepSeek-R1: 902)
//   output            0.95 - 1.15 MB (DeepSeek-R1: 1,147,309 bytes)
//   evaluation depth  7 - 18 (Qwen3, DeepSeek-R1: 18)
// The defaults are about 100x those (loop iterations: 1000x, for conversations of many short
// messages). jinja2's own limit on recursion (Python's, 1000 frames) stops a self-recursive
// macro after about 200 calls, 70 nested parentheses or 98 nested ifs; the depth limits here are
// above those and far below what would exhaust a thread's stack.
struct Limits {
  std::size_t max_source_bytes = std::size_t(1) << 20;  // the template's text (real: < 20 KB)
  int max_nesting = 256;      // parser: blocks in blocks, brackets in brackets, operator chains
  int max_depth = 1000;       // evaluator: nested evaluations (a macro calling itself)
  int max_value_depth = 256;  // lists and dicts inside each other (also the messages' JSON)
  std::size_t max_output_bytes = std::size_t(128) << 20;  // a render's output; any one string
  std::int64_t max_loop_iterations = 1'000'000;           // per render, every loop together
  std::int64_t max_steps = 50'000'000;  // per render: expressions, statements, values copied
};

// What one render cost (for measuring templates against Limits).
struct RenderCost {
  std::int64_t steps = 0, loop_iterations = 0;
  std::size_t output_bytes = 0;
  int max_depth = 0;
};

// Which string of a message a ContentSpan came from.
enum class ContentField : std::uint8_t { content, reasoning_content };

// Bytes [begin, end) of a string value, or of the output, that came from message `message`'s
// `content` (or `reasoning_content`) string: its bytes [offset, offset + end - begin). An empty
// span marks where an empty piece of it (an empty content, what strip left of a blank one) was
// placed.
struct ContentSpan {
  std::size_t message = 0;
  std::size_t begin = 0, end = 0;
  ContentField field = ContentField::content;
  std::size_t offset = 0;
};

// A dict keeping insertion order (as Python's).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);
};

// A JSON-like value with Python's semantics (None, bool, int, float, str, list, dict), plus
// jinja2's Undefined, namespace() objects (shared, mutable) and callables. A plain value type:
// made by the named constructors, read through kind()/is_*() and the typed accessors (each
// meaningful for its kind only, as the comments say); copying it copies the string and shares
// the list, dict, namespace and callable.
class Value {
 public:
  enum class Kind { undefined, none, boolean, integer, number, string, list, dict, ns, callable };
  // The Python sequence type a list stands for; a generator is one pass only (filters' results,
  // reversed iterators).
  enum class Seq { list, tuple, range, dict_items, dict_keys, dict_values, generator };
  using Origins = std::shared_ptr<const std::vector<ContentSpan>>;

  Value() = default;  // Undefined, without a name
  static Value none();
  static Value boolean(bool v);
  static Value integer(std::int64_t v);
  static Value number(double v);
  static Value string(std::string v, Origins origins = nullptr);
  static Value make_list(std::vector<Value> items, Seq seq = Seq::list);
  static Value make_dict(Dict d);
  static Value make_namespace(Dict attributes);
  static Value function(std::shared_ptr<const Callable> fn);
  static Value undefined(std::string name = "");
  // This string with other origins (see origins()); marked safe (jinja2's Markup).
  Value with_origins(Origins origins) const {
    Value v = *this;
    v.origins_ = std::move(origins);
    return v;
  }
  Value as_safe() const {
    Value v = *this;
    v.safe_ = true;
    return v;
  }

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::undefined; }
  bool is_none() const { return kind_ == Kind::none; }
  bool is_bool() const { return kind_ == Kind::boolean; }
  bool is_int() const { return kind_ == Kind::integer; }
  bool is_float() const { return kind_ == Kind::number; }
  bool is_string() const { return kind_ == Kind::string; }
  bool is_list() const { return kind_ == Kind::list; }
  bool is_dict() const { return kind_ == Kind::dict; }
  bool is_namespace() const { return kind_ == Kind::ns; }
  bool is_callable() const { return kind_ == Kind::callable; }
  bool is_generator() const { return kind_ == Kind::list && seq_ == Seq::generator; }
  // list, tuple or range: what may be indexed, sliced and measured
  bool is_sequence() const {
    return kind_ == Kind::list && (seq_ == Seq::list || seq_ == Seq::tuple || seq_ == Seq::range);
  }

  bool as_bool() const { return b_; }            // a bool's value
  std::int64_t as_int() const { return i_; }     // an int's
  double as_float() const { return f_; }         // a float's
  const std::string& str() const { return s_; }  // a string's
  const std::string& undefined_name() const {
    return s_;
  }                                       // the name an Undefined was looked up by
  bool is_safe() const { return safe_; }  // a string marked safe: refused where jinja2 would escape
  // For a string: the parts of it that are a message's content or reasoning_content
  // (render_chat), in order. The origin rule: every operation that keeps bytes of a string keeps
  // their origins, wherever the bytes land: + and ~ between strings, str * int, `set`, block set
  // and macro output, strip/lstrip/rstrip and trim, split (each piece its own), slices and
  // indexing (per code point, any step), iterating a string (each character), the first, last,
  // list and reverse filters on strings, replace (the kept parts; the inserted text has the
  // origins it had, none for a literal), join (each item; the separator as it had), indent (each
  // line). Operations that make other bytes make a string without origins: upper, lower, title,
  // capitalize (method and filter), tojson, repr of a list or dict, str() of a non-string.
  const Origins& origins() const { return origins_; }
  Seq seq() const { return seq_; }  // a list's sequence type
  // A list's items (none for anything else).
  const std::vector<Value>& items() const { return kind_ == Kind::list ? *list_ : no_items(); }
  // A dict's or namespace's entries (only for those).
  const Dict& dict() const { return *dict_; }
  // A dict's (or namespace's) value for key; null when absent or not a dict.
  const Value* find(const std::string& key) const;
  // A namespace's attribute set (shared: every copy of the namespace sees it).
  void set_attribute(const std::string& key, Value v) const;
  const Callable& fn() const { return *fn_; }  // a callable's function
  // A generator taken for iteration: false when it was taken before (by any copy of it).
  bool consume() const {
    if (*consumed_) return false;
    *consumed_ = true;
    return true;
  }
  // The same list, namespace or callable object (Python's `is`).
  bool same_object(const Value& o) const {
    return list_ == o.list_ && dict_ == o.dict_ && fn_ == o.fn_;
  }
  // lists and dicts: 1 + the deepest item (a namespace counts 0: it never holds another one),
  // and whether a namespace is among the items, at any depth
  int depth() const { return depth_; }
  bool holds_ns() const { return holds_ns_; }

 private:
  static const std::vector<Value>& no_items();
  void contain(const Value& item);  // depth and holds_ns from an item

  Kind kind_ = Kind::undefined;
  bool b_ = false;
  std::int64_t i_ = 0;
  double f_ = 0;
  std::string s_;        // the string; for undefined, the name that was looked up
  bool safe_ = false;    // a string marked safe (jinja2's Markup)
  Seq seq_ = Seq::list;  // for a list
  std::shared_ptr<const std::vector<Value>> list_;
  std::shared_ptr<bool> consumed_;  // a generator already iterated
  Origins origins_;
  std::shared_ptr<Dict> dict_;  // dict and ns
  std::shared_ptr<const Callable> fn_;
  int depth_ = 0;
  bool holds_ns_ = false;
};

// A JSON text as a Value (object keys in file order); InputError naming `what` when malformed
// or nested deeper than max_depth.
Value parse_json(const std::string& text, const std::string& what,
                 int max_depth = Limits{}.max_value_depth);

struct Node;

// A parsed template. InputError "<name> line N: ..." for a syntax error, anything outside the
// supported subset or a source beyond limits.max_source_bytes or limits.max_nesting; a render
// beyond the other limits is one InputError naming the limit.
class Template {
 public:
  Template(const std::string& source, const std::string& name = "chat template",
           const Limits& limits = {});
  ~Template();
  // The template rendered with these variables (over the globals above).
  std::string render(const Dict& variables) const;
  // As render, also returning the byte ranges [begin, end) of the output that `{% generation %}`
  // blocks produced, in order.
  std::string render(const Dict& variables,
                     std::vector<std::pair<std::size_t, std::size_t>>* generation_spans,
                     std::vector<ContentSpan>* content_spans = nullptr,
                     RenderCost* cost = nullptr) const;
  const std::string& name() const { return name_; }
  const Limits& limits() const { return limits_; }

 private:
  std::string name_;
  Limits limits_;
  std::shared_ptr<const std::vector<std::shared_ptr<Node>>> body_;
};

enum class GenerationPrompt { no, yes };

// The chat rendered as transformers' apply_chat_template(messages, tokenize=False,
// add_generation_prompt) renders it: variables `messages`, `add_generation_prompt`, `tools` and
// `documents` (None) and the special tokens of tokenizer_config.json by name (bos_token, ...).
// content_spans: the output's bytes printed from each message's `content` and
// `reasoning_content` strings (as tracked by Value::origins, the origin rule there), in output
// order; bytes that reached the output only through operations that make other bytes (upper,
// tojson, ...) have none, nor have the template's literals (Qwen3's '<think>\n' tags).
struct RenderedChat {
  std::string text;
  std::vector<std::pair<std::size_t, std::size_t>> generation_spans;  // see Template::render
  std::vector<ContentSpan> content_spans;
  RenderCost cost;
};
RenderedChat render_chat(const Template& tmpl, const Value& messages, GenerationPrompt prompt,
                         const std::map<std::string, std::string>& special_tokens);

}  // namespace kktrain::text::jinja
