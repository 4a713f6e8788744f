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
//   tests        defined undefined none string number integer float boolean mapping iterable
//                sequence callable true false equalto eq == ne != lt gt le ge < > <= >= odd even
//                divisibleby in
//   filters      trim length count tojson items default d upper lower title capitalize join
//                replace selectattr rejectattr select reject map first last list string int
//                float abs round indent safe unique reverse sum
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
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kktrain::text::jinja {

struct Value;
struct Callable;  // macros and built-in functions (jinja_impl.hpp)

// Bytes [begin, end) of a string value, or of the output, that came from message `message`'s
// `content` string.
struct ContentSpan {
  std::size_t message = 0;
  std::size_t begin = 0, end = 0;
};

// A dict keeping insertion order (as Python's).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);
};

// A JSON-like value with Python's semantics (None, bool, int, float, str, list, dict), plus
// jinja2's Undefined, namespace() objects (shared, mutable) and callables.
struct Value {
  enum class Kind { undefined, none, boolean, integer, number, string, list, dict, ns, callable };
  Kind kind = Kind::undefined;
  bool b = false;
  std::int64_t i = 0;
  double f = 0;
  // the string; for undefined, the name that was looked up; for a list, what Python type it
  // stands for: "" list, "tuple", "range", "dict_items", "dict_keys", "dict_values", or
  // "generator" (one pass only: filters' results, reversed iterators)
  std::string s;
  std::shared_ptr<const std::vector<Value>> list;
  std::shared_ptr<bool> consumed;  // a generator already iterated
  // For a string: the parts of it that are a message's content (render_chat), kept through
  // + and ~ between strings, trim/strip, `set`, block set and macro output; any other operation
  // makes a string without them.
  std::shared_ptr<const std::vector<ContentSpan>> origins;
  std::shared_ptr<Dict> dict;  // dict and ns
  std::shared_ptr<const Callable> fn;

  static Value none();
  static Value boolean(bool v);
  static Value integer(std::int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value make_list(std::vector<Value> items, std::string type = "");
  static Value make_dict(Dict d);
  static Value undefined(std::string name = "");
};

// A JSON text as a Value (object keys in file order); InputError naming `what` when malformed.
Value parse_json(const std::string& text, const std::string& what);

struct Node;

// A parsed template. InputError "<name> line N: ..." for a syntax error or anything outside the
// supported subset.
class Template {
 public:
  Template(const std::string& source, const std::string& name = "chat template");
  ~Template();
  // The template rendered with these variables (over the globals above).
  std::string render(const Dict& variables) const;
  // As render, also returning the byte ranges [begin, end) of the output that `{% generation %}`
  // blocks produced, in order.
  std::string render(const Dict& variables,
                     std::vector<std::pair<std::size_t, std::size_t>>* generation_spans,
                     std::vector<ContentSpan>* content_spans = nullptr) const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::shared_ptr<const std::vector<std::shared_ptr<Node>>> body_;
};

enum class GenerationPrompt { no, yes };

// The chat rendered as transformers' apply_chat_template(messages, tokenize=False,
// add_generation_prompt) renders it: variables `messages`, `add_generation_prompt`, `tools` and
// `documents` (None) and the special tokens of tokenizer_config.json by name (bos_token, ...).
// content_spans: the output's bytes printed from each message's `content` string (as tracked by
// Value::origins), in output order; a message whose content reached the output through some
// other operation (a slice, replace, a filter other than trim) has no span.
struct RenderedChat {
  std::string text;
  std::vector<std::pair<std::size_t, std::size_t>> generation_spans;  // see Template::render
  std::vector<ContentSpan> content_spans;
};
RenderedChat render_chat(const Template& tmpl, const Value& messages, GenerationPrompt prompt,
                         const std::map<std::string, std::string>& special_tokens);

}  // namespace kktrain::text::jinja
