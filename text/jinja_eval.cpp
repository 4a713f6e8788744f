// The chat-template evaluator (text/jinja.hpp): statements and expressions over jinja2's scoping
// (a for-loop iteration and a macro call are scopes; `set` writes the innermost; namespaces are
// shared), with the operators and tests of jinja_ops.cpp, the filters of jinja_filters.cpp and the
// methods of jinja_methods.cpp, within the render's budget
// (Limits: every expression and statement is a step and one level of depth, every value copied a
// step per item or per kBytesPerStep bytes, every for-loop iteration counts, every string and the
// output are bounded in size).
#include <chrono>
#include <cmath>
#include <ctime>

#include "core/errors.hpp"
#include "text/jinja_eval.hpp"

namespace kktrain::text::jinja {

using K = Value::Kind;
using EK = Expr::Kind;

Value Scope::get(const std::string& n) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    const Value* v = s->vars.find(n);
    if (v) return *v;
  }
  return Value::undefined(n);
}

Value Evaluator::item(const Value& obj, const Value& key, int line) {
  if (obj.kind() == K::undefined) undefined_error(obj, line);
  if (obj.kind() == K::dict || obj.kind() == K::ns) {
    if (key.kind() != K::string) return Value::undefined();
    const Value* v = obj.dict().find(key.str());
    if (v) return *v;
    return obj.kind() == K::dict ? attr(obj, key.str(), method_index(key.str()), line)
                                 : Value::undefined(key.str());
  }
  const bool indexable = obj.kind() == K::string || obj.is_sequence();
  if (indexable && (key.kind() == K::integer || key.kind() == K::boolean)) {
    const auto n = static_cast<std::int64_t>(obj.kind() == K::list ? obj.items().size()
                                                                   : code_point_count(obj.str()));
    std::int64_t k = key.kind() == K::integer ? key.as_int() : key.as_bool();
    if (k < 0) k += n;
    if (k < 0 || k >= n) return Value::undefined();
    if (obj.kind() == K::list) return obj.items()[k];
    std::size_t at = 0;
    for (; k > 0; --k) at += code_point_len(obj.str(), at);
    const std::size_t len = code_point_len(obj.str(), at);
    return charged(Value::string(obj.str().substr(at, len), sub_origins(obj, at, at + len)), line);
  }
  if (key.kind() == K::string) return attr(obj, key.str(), method_index(key.str()), line);
  return Value::undefined();
}

void Evaluator::undefined_error(const Value& v, int line) {
  fail(name_, line,
       v.undefined_name().empty() ? "an undefined value was used"
                                  : "'" + v.undefined_name() + "' is undefined");
}

namespace {

// Python's slice indices over a sequence of n.
std::vector<std::int64_t> slice_indices(std::int64_t n, const Value* a, const Value* b,
                                        const Value* c) {
  const std::int64_t step = c ? c->as_int() : 1;
  std::int64_t lo, hi;
  auto adjust = [&](const Value* v, std::int64_t dflt, std::int64_t min, std::int64_t max) {
    if (!v) return dflt;
    std::int64_t x = v->as_int();
    if (x < 0) x += n;
    return std::max(min, std::min(max, x));
  };
  if (step > 0) {
    lo = adjust(a, 0, 0, n);
    hi = adjust(b, n, 0, n);
  } else {
    lo = adjust(a, n - 1, -1, n - 1);
    hi = adjust(b, -1, -1, n - 1);
  }
  std::vector<std::int64_t> out;
  for (std::int64_t k = lo; step > 0 ? k < hi : k > hi; k += step) out.push_back(k);
  return out;
}

}  // namespace

Value Evaluator::slice(const Expr& e, const ScopeP& sc) {
  Value obj = eval(*e.args[0], sc);
  Value parts[3];
  const Value* ptr[3] = {nullptr, nullptr, nullptr};
  for (int k = 0; k < 3; ++k) {
    if (!e.args[k + 1]) continue;
    parts[k] = eval(*e.args[k + 1], sc);
    if (parts[k].kind() == K::none) continue;
    if (parts[k].kind() != K::integer) fail(name_, e.line, "slice indices must be integers");
    ptr[k] = &parts[k];
  }
  if (ptr[2] && ptr[2]->as_int() == 0) fail(name_, e.line, "slice step cannot be zero");
  if (obj.is_sequence()) {
    std::vector<Value> out;
    for (auto k : slice_indices(obj.items().size(), ptr[0], ptr[1], ptr[2]))
      out.push_back(obj.items()[k]);
    spend_items(out, e.line);
    return Value::make_list(std::move(out), obj.seq());
  }
  if (obj.kind() == K::string) {  // each code point keeps its origins
    const auto cps = explode(obj.str(), e.line);
    std::vector<std::size_t> starts;  // each code point's first byte (for the origins)
    if (obj.origins()) {
      starts.reserve(cps.size());
      for (std::size_t k = 0, at = 0; k < cps.size(); at += cps[k++].size()) starts.push_back(at);
    }
    std::string out;
    OriginsBuilder kept = origins_builder();
    for (auto k : slice_indices(cps.size(), ptr[0], ptr[1], ptr[2])) {
      if (obj.origins()) kept.add(obj, starts[k], starts[k] + cps[k].size(), out.size());
      out += cps[k];
    }
    return Value::string(out, take_origins(kept, e.line));
  }
  if (obj.kind() == K::undefined) undefined_error(obj, e.line);
  fail(name_, e.line, "cannot slice a " + type_name(obj));
}

Value Evaluator::eval(const Expr& e, const ScopeP& sc) {
  const Deeper deeper(this, e.line);
  Value v = eval_kind(e, sc);
  spend(1 + static_cast<std::int64_t>(v.kind() == K::string ? v.str().size() / kBytesPerStep : 0),
        e.line);
  return v;
}

Value Evaluator::eval_kind(const Expr& e, const ScopeP& sc) {
  switch (e.kind) {
    case EK::literal:
      return e.value;
    case EK::name:
      return sc->get(e.name);
    case EK::attr:
      return attr(eval(*e.args[0], sc), e.name, e.builtin, e.line);
    case EK::item:
      return item(eval(*e.args[0], sc), eval(*e.args[1], sc), e.line);
    case EK::slice:
      return slice(e, sc);
    case EK::call: {
      Value f = eval(*e.args[0], sc);
      if (f.kind() != K::callable) {
        if (f.kind() == K::undefined) undefined_error(f, e.line);
        fail(name_, e.line, "a " + type_name(f) + " is not callable");
      }
      Args args = eval_args(e, sc, 1);
      return f.fn().call(args, e.line);
    }
    case EK::filter: {
      Value subject = eval(*e.args[0], sc);
      Args args = eval_args(e, sc, 1);
      return filter(e.builtin, e.name, subject, args, e.line);
    }
    case EK::test: {
      Value subject = eval(*e.args[0], sc);
      Args args = eval_args(e, sc, 1);
      const bool r = test(e.builtin, e.name, subject, args, e.line);
      return Value::boolean(e.negate ? !r : r);
    }
    case EK::unary:
      return unary(e.op, e.name, eval(*e.args[0], sc), e.line);
    case EK::binary: {
      if (e.op == Op::and_) {
        Value a = eval(*e.args[0], sc);
        return truthy(a) ? eval(*e.args[1], sc) : a;
      }
      if (e.op == Op::or_) {
        Value a = eval(*e.args[0], sc);
        return truthy(a) ? a : eval(*e.args[1], sc);
      }
      return binary(e.op, eval(*e.args[0], sc), eval(*e.args[1], sc), e.line);
    }
    case EK::cond:
      if (truthy(eval(*e.args[1], sc))) return eval(*e.args[0], sc);
      return e.args[2] ? eval(*e.args[2], sc) : Value::undefined();
    case EK::list:
    case EK::tuple: {
      std::vector<Value> items;
      for (const auto& a : e.args) items.push_back(eval(*a, sc));
      return Value::make_list(std::move(items),
                              e.kind == EK::tuple ? Value::Seq::tuple : Value::Seq::list);
    }
    case EK::dict: {
      Dict d;
      for (std::size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Value key = eval(*e.args[k], sc);
        if (key.kind() != K::string)
          fail(name_, e.line, "dict keys other than strings are not supported");
        d.set(key.str(), eval(*e.args[k + 1], sc));
      }
      return Value::make_dict(std::move(d));
    }
  }
  fail(name_, e.line, "unsupported expression");
}

Args Evaluator::eval_args(const Expr& e, const ScopeP& sc, std::size_t from) {
  Args a;
  for (std::size_t k = from; k < e.args.size(); ++k) a.pos.push_back(eval(*e.args[k], sc));
  for (const auto& kv : e.kwargs) a.kw.emplace_back(kv.first, eval(*kv.second, sc));
  return a;
}

// ---- statements ----------------------------------------------------------------------------

Flow Evaluator::exec(const Body& body, const ScopeP& sc) {
  for (const auto& n : body) {
    const Flow f = exec(*n, sc);
    if (f != Flow::normal) return f;
  }
  return Flow::normal;
}

void Evaluator::assign(const std::vector<std::string>& targets, const Value& v, Scope* sc,
                       int line) {
  if (targets.size() == 1) {
    sc->vars.set(targets[0], v);
    return;
  }
  std::vector<Value> items = iterate(v, line);
  if (items.size() != targets.size())
    fail(name_, line,
         "cannot unpack " + std::to_string(items.size()) + " values into " +
             std::to_string(targets.size()) + " names");
  for (std::size_t k = 0; k < targets.size(); ++k) sc->vars.set(targets[k], items[k]);
}

Flow Evaluator::exec(const Node& n, const ScopeP& sc) {
  const Deeper deeper(this, n.line);
  spend(1, n.line);
  switch (n.kind) {
    case Node::Kind::text:
      emit(n.text, n.line);
      return Flow::normal;
    case Node::Kind::print: {
      Value v = eval(*n.expr, sc);
      if (v.kind() == K::ns || v.kind() == K::callable)
        fail(name_, n.line, "printing a " + type_name(v) + " is not supported");
      std::string text;
      try {
        text = to_str(v);
      } catch (const InputError& err) {
        fail(name_, n.line, err.what());
      }
      if (v.origins())
        spend(static_cast<std::int64_t>(v.origins()->size()) * kStepsPerSpan, n.line);
      if (v.origins())
        for (ContentSpan c : *v.origins()) {
          c.begin += out_.size();
          c.end += out_.size();
          if (content_.size() > capture_mark_)
            append_span(&content_, c);  // merged with the last span printed here
          else
            content_.push_back(c);  // the first here (a capture's spans start at its mark)
        }
      emit(text, n.line);
      return Flow::normal;
    }
    case Node::Kind::if_:
      return exec(truthy(eval(*n.expr, sc)) ? n.body : n.else_body, sc);
    case Node::Kind::for_:
      return exec_for(n, sc);
    case Node::Kind::set: {
      Value v = eval(*n.expr, sc);
      check_value_depth(v, n.line);
      if (n.attr.empty()) {
        assign(n.targets, v, sc.get(), n.line);
        return Flow::normal;
      }
      Value ns = sc->get(n.targets[0]);
      if (ns.kind() != K::ns) fail(name_, n.line, "can only set attributes of a namespace()");
      check_not_namespace(v, n.line);
      ns.set_attribute(n.attr, v);
      return Flow::normal;
    }
    case Node::Kind::set_block: {
      Value v = capture(n.body, sc);
      if (n.cond) v = apply_chain(*n.cond, v, sc);
      sc->vars.set(n.targets[0], v);
      return Flow::normal;
    }
    case Node::Kind::macro:
      sc->vars.set(n.targets[0], make_macro(n, sc));
      return Flow::normal;
    case Node::Kind::break_:
      return Flow::brk;
    case Node::Kind::continue_:
      return Flow::cont;
    case Node::Kind::generation: {
      if (capturing_)
        fail(name_, n.line, "a generation block inside a macro or block set is not supported");
      const std::size_t begin = out_.size();
      const Flow f = exec(n.body, sc);
      if (spans_) spans_->emplace_back(begin, out_.size());
      return f;
    }
  }
  return Flow::normal;
}

Value Evaluator::capture(const Body& body, const ScopeP& sc) {
  std::string saved;
  saved.swap(out_);
  const std::size_t mark = content_.size(), outer_mark = capture_mark_;
  capture_mark_ = mark;
  ++capturing_;
  exec(body, sc);
  --capturing_;
  capture_mark_ = outer_mark;
  saved.swap(out_);
  Value v = Value::string(saved);
  if (content_.size() > mark) {
    v = v.with_origins(
        std::make_shared<const std::vector<ContentSpan>>(content_.begin() + mark, content_.end()));
    content_.resize(mark);
  }
  return v;
}

Value Evaluator::apply_chain(const Expr& e, const Value& v, const ScopeP& sc) {
  if (e.kind == EK::literal) return v;
  Value subject = apply_chain(*e.args[0], v, sc);
  Args args = eval_args(e, sc, 1);
  return filter(e.builtin, e.name, subject, args, e.line);
}

std::vector<Value> Evaluator::iterate(const Value& v, int line) {
  switch (v.kind()) {
    case K::undefined:
      return {};
    case K::list:
      if (v.is_generator() && !v.consume())
        fail(name_, line, "a generator (a filter's result) used a second time");
      spend_items(v.items(), line);
      return v.items();
    case K::dict: {
      std::vector<Value> keys;
      for (const auto& kv : v.dict().items) keys.push_back(Value::string(kv.first));
      spend_items(keys, line);
      return keys;
    }
    case K::string: {  // each character with the origins of its bytes
      std::vector<Value> chars;
      std::size_t at = 0;
      for (auto& cp : explode(v.str(), line)) {
        chars.push_back(charged(Value::string(cp, sub_origins(v, at, at + cp.size())), line));
        at += cp.size();
      }
      spend_items(chars, line);
      return chars;
    }
    default:
      fail(name_, line, "a " + type_name(v) + " is not iterable");
  }
}

Flow Evaluator::exec_for(const Node& n, const ScopeP& sc) {
  std::vector<Value> all = iterate(eval(*n.expr, sc), n.line);
  std::vector<Value> items;
  for (auto& v : all) {
    count_iteration(n.line);
    if (!n.cond) {
      items.push_back(v);
      continue;
    }
    auto probe = std::make_shared<Scope>();
    probe->parent = sc;
    assign(n.targets, v, probe.get(), n.line);
    if (truthy(eval(*n.cond, probe))) items.push_back(v);
  }
  bool completed = false;  // jinja2 3.1: `else` runs unless some iteration ran to its end
  const auto len = static_cast<std::int64_t>(items.size());
  for (std::int64_t k = 0; k < len; ++k) {
    if (n.cond) count_iteration(n.line);  // the body's run; each item's filter probe counted too
    auto it = std::make_shared<Scope>();
    it->parent = sc;
    Dict loop;
    loop.items = {{"index", Value::integer(k + 1)},
                  {"index0", Value::integer(k)},
                  {"revindex", Value::integer(len - k)},
                  {"revindex0", Value::integer(len - k - 1)},
                  {"first", Value::boolean(k == 0)},
                  {"last", Value::boolean(k == len - 1)},
                  {"length", Value::integer(len)},
                  {"depth", Value::integer(1)},
                  {"depth0", Value::integer(0)},
                  {"previtem", k > 0 ? items[k - 1] : Value::undefined("previtem")},
                  {"nextitem", k + 1 < len ? items[k + 1] : Value::undefined("nextitem")}};
    it->vars.set("loop", Value::make_dict(std::move(loop)));
    assign(n.targets, items[k], it.get(), n.line);
    const Flow f = exec(n.body, it);
    if (f == Flow::brk) break;
    completed = completed || f == Flow::normal;
  }
  return completed ? Flow::normal : exec(n.else_body, sc);
}

Value Evaluator::make_macro(const Node& n, const ScopeP& defining) {
  auto fn = std::make_shared<Callable>();
  fn->name = n.targets[0];
  const Node* node = &n;
  // The defining scope holds the macro: a weak reference, so that the two do not keep each other
  // alive after the render (a shared one leaked every template with a macro).
  const std::weak_ptr<Scope> weak_defining = defining;
  fn->call = [this, node, weak_defining](Args& args, int line) {
    auto sc = std::make_shared<Scope>();
    sc->parent = weak_defining.lock();
    if (!sc->parent)
      fail(name_, line,
           "macro '" + node->targets[0] + "' called after the scope defining it ended");
    if (args.pos.size() > node->params.size())
      fail(name_, line,
           "macro '" + node->targets[0] + "' takes " + std::to_string(node->params.size()) +
               " arguments");
    for (std::size_t k = 0; k < node->params.size(); ++k) {
      Value v = k < args.pos.size() ? args.pos[k] : Value::undefined(node->params[k]);
      for (auto& kv : args.kw)
        if (kv.first == node->params[k]) v = kv.second;
      if (v.kind() == K::undefined && k >= args.pos.size() && node->defaults[k])
        v = eval(*node->defaults[k], sc);
      sc->vars.set(node->params[k], v);
    }
    for (auto& kv : args.kw) {
      bool known = false;
      for (auto& p : node->params) known = known || p == kv.first;
      if (!known)
        fail(name_, line, "macro '" + node->targets[0] + "' has no argument '" + kv.first + "'");
    }
    return capture(node->body, sc);
  };
  return Value::function(fn);
}

// ---- the template ----------------------------------------------------------------------------

namespace {

const std::string& within_size(const std::string& source, const std::string& name,
                               const Limits& limits) {
  if (source.size() > limits.max_source_bytes)
    throw InputError(name + ": " + std::to_string(source.size()) +
                     " bytes, more than the template size limit (" +
                     std::to_string(limits.max_source_bytes) + " bytes)");
  return source;
}

}  // namespace

Template::Template(const std::string& source, const std::string& name, const Limits& limits)
    : name_(name),
      limits_(limits),
      body_(std::make_shared<const Body>(
          parse_template(within_size(source, name, limits), name, limits))) {}

Template::~Template() = default;

std::string Template::render(const Dict& variables) const {
  return render(variables, nullptr);
}

std::string Template::render(const Dict& variables,
                             std::vector<std::pair<std::size_t, std::size_t>>* spans,
                             std::vector<ContentSpan>* content_spans, RenderCost* cost) const {
  Evaluator ev(name_, limits_, spans);
  auto globals = std::make_shared<Scope>();
  globals->vars = ev.globals();
  auto top = std::make_shared<Scope>();
  top->parent = globals;
  top->vars = variables;
  ev.exec(*body_, top);
  if (content_spans) *content_spans = ev.take_content_spans();
  if (cost) *cost = ev.cost();
  return ev.take_output();
}

namespace {

// messages with each message's `content` and `reasoning_content` strings marked as coming from
// it (Value::origins)
Value with_origins(const Value& messages) {
  if (messages.kind() != Value::Kind::list) return messages;
  static const std::pair<const char*, ContentField> kFields[] = {
      {"content", ContentField::content}, {"reasoning_content", ContentField::reasoning_content}};
  std::vector<Value> out;
  for (std::size_t k = 0; k < messages.items().size(); ++k) {
    Value m = messages.items()[k];
    if (m.kind() == Value::Kind::dict) {
      Dict d = m.dict();
      for (const auto& [key, field] : kFields) {
        const Value* s = d.find(key);
        if (!s || s->kind() != Value::Kind::string) continue;
        d.set(key, s->with_origins(std::make_shared<const std::vector<ContentSpan>>(
                       std::vector<ContentSpan>{{k, 0, s->str().size(), field, 0}})));
      }
      m = Value::make_dict(std::move(d));
    }
    out.push_back(m);
  }
  return Value::make_list(std::move(out), messages.seq());
}

}  // namespace

RenderedChat render_chat(const Template& tmpl, const Value& messages, GenerationPrompt prompt,
                         const std::map<std::string, std::string>& special_tokens) {
  Dict vars;
  for (const auto& kv : special_tokens) vars.set(kv.first, Value::string(kv.second));
  vars.set("messages", with_origins(messages));
  vars.set("tools", Value::none());
  vars.set("documents", Value::none());
  vars.set("add_generation_prompt", Value::boolean(prompt == GenerationPrompt::yes));
  RenderedChat out;
  out.text = tmpl.render(vars, &out.generation_spans, &out.content_spans, &out.cost);
  return out;
}

}  // namespace kktrain::text::jinja
