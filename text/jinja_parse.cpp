// The chat-template parser (text/jinja_impl.hpp): statements over the lexer's pieces, and
// expressions with jinja2's precedence (conditional < or < and < not < comparisons < + - < ~ <
// * / // % < ** < unary < filters and tests < postfix). Anything outside the subset is one
// InputError naming it and its line; so is a block left open or closed by the wrong end tag
// (naming the block and the line it opened on) and nesting beyond Limits::max_nesting, counted
// as the parser's recursion (brackets in brackets, blocks in blocks, elif chains) and as the depth
// of the expression tree it builds (operator chains: `1 + 1 + ...`), which the evaluator walks
// recursively.
#include <algorithm>
#include <set>

#include "text/jinja_impl.hpp"

namespace kktrain::text::jinja {
namespace {

using TK = Token::Kind;
using EK = Expr::Kind;

[[noreturn]] void too_deep(const std::string& name, int line, int limit) {
  fail(name, line,
       "nested deeper than " + std::to_string(limit) +
           " (the nesting limit: blocks in blocks, brackets in brackets or operator chains)");
}

// Whether a unary operand takes the filters that follow it, or leaves them to the expression it
// is part of (`-x|abs` filters `-x`: the operand of the minus leaves them).
enum class Filters { taken, left };

class ExprParser {
 public:
  ExprParser(const std::vector<Token>& toks, const std::string& name, int max_nesting)
      : t_(toks), name_(name), max_nesting_(max_nesting) {}

  // One level of the parser's recursion (an expression in brackets, an operator's operand).
  class Nest {
   public:
    explicit Nest(ExprParser* p) : p_(p) {
      if (++p_->depth_ > p_->max_nesting_) too_deep(p_->name_, p_->peek().line, p_->max_nesting_);
    }
    ~Nest() { --p_->depth_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    ExprParser* p_;
  };

  const Token& peek(std::size_t ahead = 0) const {
    return t_[std::min(pos_ + ahead, t_.size() - 1)];
  }
  bool at_op(const char* op) const { return peek().kind == TK::op && peek().text == op; }
  bool at_name(const char* n, std::size_t ahead = 0) const {
    return peek(ahead).kind == TK::name && peek(ahead).text == n;
  }
  bool at_end() const { return peek().kind == TK::end; }
  const Token& next() { return t_[pos_ < t_.size() - 1 ? pos_++ : pos_]; }
  [[noreturn]] void error(const std::string& msg) const { fail(name_, peek().line, msg); }
  std::string describe() const { return at_end() ? "end of tag" : "'" + peek().text + "'"; }
  void expect_op(const char* op) {
    if (!at_op(op)) error(std::string("expected '") + op + "', got " + describe());
    next();
  }
  std::string expect_name() {
    if (peek().kind != TK::name) error("expected a name, got " + describe());
    return next().text;
  }
  void expect_end() {
    if (!at_end()) error("unexpected " + describe());
  }

  static ExprP node(EK kind, int line) {
    auto e = std::make_shared<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  ExprP make(EK kind, int line, std::string name = "", std::vector<ExprP> args = {}) {
    auto e = node(kind, line);
    e->name = std::move(name);
    e->args = std::move(args);
    if (kind == EK::unary || kind == EK::binary) e->op = op_of(e->name, kind == EK::unary);
    if (kind == EK::filter) e->builtin = filter_index(e->name);
    if (kind == EK::test) e->builtin = test_index(e->name);
    if (kind == EK::attr) e->builtin = method_index(e->name);
    return deepened(e);
  }
  // e with its depth from its arguments, refused beyond the limit.
  ExprP deepened(ExprP e) const {
    for (const auto& a : e->args)
      if (a) e->depth = std::max(e->depth, a->depth + 1);
    for (const auto& kv : e->kwargs) e->depth = std::max(e->depth, kv.second->depth + 1);
    if (e->depth > max_nesting_) too_deep(name_, e->line, max_nesting_);
    return e;
  }

  // expression with an optional bare tuple (`a, b`), as for-targets and set values allow
  ExprP tuple_or_expr() {
    ExprP first = expr();
    if (!at_op(",")) return first;
    std::vector<ExprP> items{first};
    while (at_op(",")) {
      next();
      if (at_end() || at_op("=") || at_op(")") || at_name("in")) break;
      items.push_back(expr());
    }
    return make(EK::tuple, first->line, "", items);
  }

  ExprP expr() {
    const Nest nest(this);
    ExprP e = or_expr();
    while (at_name("if")) {
      const int line = next().line;
      ExprP c = or_expr();
      ExprP other;
      if (at_name("else")) {
        next();
        other = expr();
      }
      e = make(EK::cond, line, "", {e, c, other});
    }
    return e;
  }

  ExprP or_expr() {
    ExprP e = and_expr();
    while (at_name("or")) {
      const int line = next().line;
      e = make(EK::binary, line, "or", {e, and_expr()});
    }
    return e;
  }
  ExprP and_expr() {
    ExprP e = not_expr();
    while (at_name("and")) {
      const int line = next().line;
      e = make(EK::binary, line, "and", {e, not_expr()});
    }
    return e;
  }
  ExprP not_expr() {
    if (at_name("not")) {
      const Nest nest(this);
      const int line = next().line;
      return make(EK::unary, line, "not", {not_expr()});
    }
    return compare();
  }
  ExprP compare() {
    ExprP e = math1();
    static const std::set<std::string> ops{"==", "!=", "<", "<=", ">", ">="};
    while (true) {
      const int line = peek().line;
      if (peek().kind == TK::op && ops.count(peek().text)) {
        std::string op = next().text;
        e = make(EK::binary, line, op, {e, math1()});
      } else if (at_name("in")) {
        next();
        e = make(EK::binary, line, "in", {e, math1()});
      } else if (at_name("not") && at_name("in", 1)) {
        next();
        next();
        e = make(EK::binary, line, "not in", {e, math1()});
      } else {
        return e;
      }
    }
  }
  ExprP math1() {
    ExprP e = concat();
    while (at_op("+") || at_op("-")) {
      const Token& t = next();
      e = make(EK::binary, t.line, t.text, {e, concat()});
    }
    return e;
  }
  ExprP concat() {
    ExprP e = math2();
    while (at_op("~")) {
      const int line = next().line;
      e = make(EK::binary, line, "~", {e, math2()});
    }
    return e;
  }
  ExprP math2() {
    ExprP e = pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const Token& t = next();
      e = make(EK::binary, t.line, t.text, {e, pow()});
    }
    return e;
  }
  ExprP pow() {
    ExprP e = unary(Filters::taken);
    while (at_op("**")) {
      const int line = next().line;
      e = make(EK::binary, line, "**", {e, unary(Filters::taken)});
    }
    return e;
  }
  ExprP unary(Filters filters_after) {
    ExprP e;
    if (at_op("-") || at_op("+")) {
      const Nest nest(this);
      const Token& t = next();
      e = make(EK::unary, t.line, t.text, {unary(Filters::left)});
    } else {
      e = postfix(primary());
    }
    return filters_after == Filters::taken ? filters(e) : e;
  }

  ExprP primary() {
    const Token& t = peek();
    if (t.kind == TK::name) {
      next();
      if (t.text == "true" || t.text == "True") return literal(Value::boolean(true), t.line);
      if (t.text == "false" || t.text == "False") return literal(Value::boolean(false), t.line);
      if (t.text == "none" || t.text == "None") return literal(Value::none(), t.line);
      return make(EK::name, t.line, t.text);
    }
    if (t.kind == TK::string) {
      std::string s;
      while (peek().kind == TK::string) s += next().text;
      return literal(Value::string(s), t.line);
    }
    if (t.kind == TK::integer || t.kind == TK::number) {
      next();
      return literal(t.value, t.line);
    }
    if (at_op("(")) {
      next();
      if (at_op(")")) {
        next();
        return make(EK::tuple, t.line);
      }
      ExprP e = tuple_or_expr();
      expect_op(")");
      return e;
    }
    if (at_op("[")) {
      next();
      std::vector<ExprP> items;
      while (!at_op("]")) {
        if (!items.empty()) expect_op(",");
        if (at_op("]")) break;
        items.push_back(expr());
      }
      next();
      return make(EK::list, t.line, "", items);
    }
    if (at_op("{")) {
      next();
      std::vector<ExprP> items;
      while (!at_op("}")) {
        if (!items.empty()) expect_op(",");
        if (at_op("}")) break;
        items.push_back(expr());
        expect_op(":");
        items.push_back(expr());
      }
      next();
      return make(EK::dict, t.line, "", items);
    }
    error("unexpected " + describe());
  }

  ExprP literal(Value v, int line) {
    ExprP e = node(EK::literal, line);
    e->value = std::move(v);
    return e;
  }

  ExprP postfix(ExprP e) {
    while (true) {
      const int line = peek().line;
      if (at_op(".")) {
        next();
        if (peek().kind == TK::integer) {
          e = make(EK::item, line, "", {e, literal(next().value, line)});
        } else {
          e = make(EK::attr, line, expect_name(), {e});
        }
      } else if (at_op("[")) {
        next();
        e = subscript(e, line);
      } else if (at_op("(")) {
        e = call_args(make(EK::call, line, "", {e}));
      } else {
        return e;
      }
    }
  }

  ExprP subscript(ExprP e, int line) {
    ExprP parts[3];
    int part = 0;
    bool is_slice = false;
    while (!at_op("]")) {
      if (at_op(":")) {
        next();
        is_slice = true;
        if (++part > 2) error("too many ':' in a slice");
        continue;
      }
      if (at_op(",")) error("tuple subscripts are not supported");
      parts[part] = expr();
    }
    next();
    if (!is_slice) {
      if (!parts[0]) error("empty subscript");
      return make(EK::item, line, "", {e, parts[0]});
    }
    return make(EK::slice, line, "", {e, parts[0], parts[1], parts[2]});
  }

  // (args, name=value, ...) appended to e's args / kwargs
  ExprP call_args(ExprP e) {
    expect_op("(");
    bool first = true;
    while (!at_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (at_op(")")) break;
      if (at_op("*") || at_op("**")) error("*args and **kwargs in calls are not supported");
      if (peek().kind == TK::name && peek(1).kind == TK::op && peek(1).text == "=") {
        std::string key = next().text;
        next();
        e->kwargs.emplace_back(key, expr());
      } else {
        if (!e->kwargs.empty()) error("positional argument after keyword argument");
        e->args.push_back(expr());
      }
    }
    next();
    return deepened(e);
  }

  ExprP filters(ExprP e) {
    while (true) {
      if (at_op("|")) {
        const int line = next().line;
        std::string n = expect_name();
        while (at_op(".")) {
          next();
          n += "." + expect_name();
        }
        e = make(EK::filter, line, n, {e});
        if (at_op("(")) e = call_args(e);
      } else if (at_name("is")) {
        const int line = next().line;
        const bool negate = at_name("not");
        if (negate) next();
        const std::string n = expect_name();
        e = make(EK::test, line, n, {e});
        e->negate = negate;
        const Token& a = peek();
        if (at_op("(")) {
          e = call_args(e);
        } else if ((a.kind == TK::name && a.text != "else" && a.text != "or" && a.text != "and") ||
                   a.kind == TK::string || a.kind == TK::integer || a.kind == TK::number ||
                   at_op("[") || at_op("{")) {
          e->args.push_back(postfix(primary()));
          e = deepened(e);
        }
      } else {
        return e;
      }
    }
  }

 private:
  const std::vector<Token>& t_;
  const std::string& name_;
  const int max_nesting_;
  int depth_ = 0;
  std::size_t pos_ = 0;
};

// The tags that end or continue a block, and what they belong to.
const std::set<std::string>& closing_tags() {
  static const std::set<std::string> tags{"elif",   "else",     "endif",        "endfor",
                                          "endset", "endmacro", "endgeneration"};
  return tags;
}

// "'endfor' closes no open 'for'" for a closing tag outside any block.
std::string stray(const std::string& kw) {
  if (kw == "else") return "'else' outside an 'if' or 'for'";
  if (kw == "elif") return "'elif' outside an 'if'";
  return "'" + kw + "' closes no open '" + kw.substr(3) + "'";
}

class StmtParser {
 public:
  StmtParser(std::vector<Piece> pieces, const std::string& name, int last_line, int max_nesting)
      : p_(std::move(pieces)), name_(name), last_line_(last_line), max_nesting_(max_nesting) {}

  Body all() {
    std::string end;
    return body({}, &end);
  }

 private:
  // A block being parsed: its tag, the line it opened on and the tag that closes it.
  struct Open {
    std::string tag;
    int line;
    std::string closer;
  };
  // One block open for as long as it lives (blocks in blocks count toward the nesting limit).
  class Opened {
   public:
    Opened(StmtParser* p, Open o) : p_(p) {
      if (static_cast<int>(p_->open_.size()) >= p_->max_nesting_)
        too_deep(p_->name_, o.line, p_->max_nesting_);
      p_->open_.push_back(std::move(o));
    }
    ~Opened() { p_->open_.pop_back(); }
    Opened(const Opened&) = delete;
    Opened& operator=(const Opened&) = delete;

   private:
    StmtParser* p_;
  };

  static std::string keyword(const Piece& p) {
    return p.toks.empty() || p.toks[0].kind != TK::name ? "" : p.toks[0].text;
  }

  ExprParser expr_parser(const Piece& p) const { return ExprParser(p.toks, name_, max_nesting_); }

  // Nodes up to a block whose keyword is in `ends` (left unconsumed; *end names it). A closing
  // tag that is not in `ends`, or the template's end while a block is open, is an error naming
  // the innermost open block.
  Body body(const std::set<std::string>& ends, std::string* end) {
    Body out;
    while (i_ < p_.size()) {
      const Piece& p = p_[i_];
      if (p.kind == Piece::Kind::text) {
        auto n = node(Node::Kind::text, p.line);
        n->text = p.text;
        out.push_back(n);
        ++i_;
        continue;
      }
      if (p.kind == Piece::Kind::print) {
        ExprParser ep = expr_parser(p);
        auto n = node(Node::Kind::print, p.line);
        n->expr = ep.tuple_or_expr();
        ep.expect_end();
        out.push_back(n);
        ++i_;
        continue;
      }
      const std::string kw = keyword(p);
      if (ends.count(kw)) {
        *end = kw;
        return out;
      }
      if (closing_tags().count(kw)) {
        if (open_.empty()) fail(name_, p.line, stray(kw));
        const Open& o = open_.back();
        fail(name_, p.line,
             "'" + kw + "' inside the '" + o.tag + "' of line " + std::to_string(o.line) +
                 ", which '" + o.closer + "' must close first");
      }
      out.push_back(statement(kw));
    }
    if (!open_.empty()) {
      const Open& o = open_.back();
      fail(name_, o.line,
           "'" + o.tag + "' is never closed (the template ends on line " +
               std::to_string(last_line_) + " without '" + o.closer + "')");
    }
    return out;
  }

  NodeP node(Node::Kind k, int line) {
    auto n = std::make_shared<Node>();
    n->kind = k;
    n->line = line;
    return n;
  }

  // The block at i_ (keyword kw) and everything up to its end tag.
  NodeP statement(const std::string& kw) {
    const Piece& p = p_[i_++];
    ExprParser ep = expr_parser(p);
    if (kw.empty()) ep.error("expected a statement, got " + ep.describe());
    ep.next();
    if (kw == "if") return if_stmt(ep, p.line);
    if (kw == "for") return for_stmt(ep, p.line);
    if (kw == "set") return set_stmt(ep, p.line);
    if (kw == "macro") return macro_stmt(ep, p.line);
    if (kw == "generation") {
      ep.expect_end();
      auto n = node(Node::Kind::generation, p.line);
      const Opened open(this, {"generation", p.line, "endgeneration"});
      n->body = closed("endgeneration");
      return n;
    }
    if (kw == "break" || kw == "continue") {
      ep.expect_end();
      if (loops_ == 0) fail(name_, p.line, "'" + kw + "' outside a loop");
      return node(kw == "break" ? Node::Kind::break_ : Node::Kind::continue_, p.line);
    }
    fail(name_, p.line, "unknown or unsupported statement '" + kw + "'");
  }

  // The body up to `end` (consumed, and checked to hold nothing more).
  Body closed(const std::string& end) {
    std::string got;
    Body b = body({end}, &got);
    end_tag();
    return b;
  }
  void end_tag() {
    ExprParser ep = expr_parser(p_[i_]);
    ep.next();
    ep.expect_end();
    ++i_;
  }

  // An if (its elif chain nested as ifs in else_body: each counts toward the nesting limit).
  NodeP if_stmt(ExprParser& ep, int line) {
    auto n = node(Node::Kind::if_, line);
    n->expr = ep.expr();
    ep.expect_end();
    const Opened open(this, {"if", line, "endif"});
    std::string end;
    n->body = body({"elif", "else", "endif"}, &end);
    if (end == "elif") {
      const Piece& p = p_[i_++];
      ExprParser e2 = expr_parser(p);
      e2.next();
      n->else_body.push_back(if_stmt(e2, line));
      n->else_body.back()->line = p.line;
      return n;  // the nested if consumed the endif
    }
    if (end == "else") {
      end_tag();
      n->else_body = closed("endif");
      return n;
    }
    end_tag();
    return n;
  }

  std::vector<std::string> targets(ExprParser& ep) {
    std::vector<std::string> names{ep.expect_name()};
    while (ep.at_op(",")) {
      ep.next();
      names.push_back(ep.expect_name());
    }
    return names;
  }

  NodeP for_stmt(ExprParser& ep, int line) {
    auto n = node(Node::Kind::for_, line);
    const bool paren = ep.at_op("(");
    if (paren) ep.next();
    n->targets = targets(ep);
    if (paren) ep.expect_op(")");
    if (!ep.at_name("in")) ep.error("expected 'in', got " + ep.describe());
    ep.next();
    n->expr = ep.or_expr();  // jinja2: no conditional expression here, `if` filters
    if (ep.at_op(",")) ep.error("tuples as loop iterables are not supported");
    if (ep.at_name("if")) {
      ep.next();
      n->cond = ep.expr();
    }
    if (ep.at_name("recursive")) ep.error("recursive loops are not supported");
    ep.expect_end();
    const Opened open(this, {"for", line, "endfor"});
    ++loops_;
    std::string end;
    n->body = body({"else", "endfor"}, &end);
    --loops_;
    end_tag();
    if (end == "else") n->else_body = closed("endfor");
    return n;
  }

  NodeP set_stmt(ExprParser& ep, int line) {
    auto n = node(Node::Kind::set, line);
    n->targets = targets(ep);
    if (n->targets.size() == 1 && ep.at_op(".")) {
      ep.next();
      n->attr = ep.expect_name();
    }
    if (!ep.at_op("=")) {
      if (n->targets.size() != 1 || !n->attr.empty())
        ep.error("expected '=', got " + ep.describe());
      n->kind = Node::Kind::set_block;
      if (ep.at_op("|")) {  // {% set x | filter %}: the filters applied to the body
        n->cond = ep.filters(ExprParser::node(EK::literal, line));
      }
      ep.expect_end();
      const Opened open(this, {"set", line, "endset"});
      n->body = closed("endset");
      return n;
    }
    ep.next();
    n->expr = ep.tuple_or_expr();
    ep.expect_end();
    return n;
  }

  NodeP macro_stmt(ExprParser& ep, int line) {
    auto n = node(Node::Kind::macro, line);
    n->targets = {ep.expect_name()};
    ep.expect_op("(");
    while (!ep.at_op(")")) {
      if (!n->params.empty()) ep.expect_op(",");
      n->params.push_back(ep.expect_name());
      ExprP def;
      if (ep.at_op("=")) {
        ep.next();
        def = ep.expr();
      }
      n->defaults.push_back(def);
    }
    ep.next();
    ep.expect_end();
    const int saved = loops_;
    loops_ = 0;
    const Opened open(this, {"macro", line, "endmacro"});
    n->body = closed("endmacro");
    loops_ = saved;
    return n;
  }

  std::vector<Piece> p_;
  const std::string& name_;
  const int last_line_;
  const int max_nesting_;
  std::size_t i_ = 0;
  int loops_ = 0;
  std::vector<Open> open_;
};

// The line the template's last character is on (lines counted as the lexer counts them).
int last_line(const std::string& source) {
  int line = 1;
  for (std::size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r' && k + 1 < source.size() && source[k + 1] == '\n') ++k;
    if ((source[k] == '\n' || source[k] == '\r') && k + 1 < source.size()) ++line;
  }
  return line;
}

}  // namespace

Body parse_template(const std::string& source, const std::string& name, const Limits& limits) {
  return StmtParser(lex_template(source, name), name, last_line(source), limits.max_nesting).all();
}

}  // namespace kktrain::text::jinja
