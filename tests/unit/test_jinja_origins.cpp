// The origin rule of the chat-template interpreter (text/jinja.hpp, Value::origins): every
// operation that keeps bytes of a message's content (or reasoning_content) keeps where they came
// from, wherever they land, and the rendered chat's content spans say so; operations that make
// other bytes keep nothing. One test per operation: each span's bytes of the output are exactly
// its message's string at the span's offset (checked for every span of every render here).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/errors.hpp"
#include "text/jinja.hpp"

namespace kktrain::text::jinja {
namespace {

// A span as the tests spell it: the message, which string ('c' content, 'r' reasoning_content),
// the output's bytes and where they sit in the message's string.
struct Span {
  std::size_t message;
  char field;
  std::string text;
  std::size_t offset;
  bool operator==(const Span& o) const {
    return message == o.message && field == o.field && text == o.text && offset == o.offset;
  }
};

std::ostream& operator<<(std::ostream& os, const Span& s) {
  return os << "{" << s.message << s.field << " '" << s.text << "' @" << s.offset << "}";
}

struct Rendered {
  std::string text;
  std::vector<Span> spans;
};

// `source` rendered over `messages` (JSON); each span checked against its message's string.
Rendered render(const std::string& source, const std::string& messages, const Limits& limits = {}) {
  const Template t(source, "origins.jinja", limits);
  const Value m = parse_json(messages, "messages");
  const RenderedChat rc = render_chat(t, m, GenerationPrompt::no, {});
  Rendered out{rc.text, {}};
  std::size_t last = 0;
  for (const ContentSpan& c : rc.content_spans) {
    EXPECT_LE(last, c.begin);
    EXPECT_LE(c.begin, c.end);
    EXPECT_LE(c.end, rc.text.size());
    last = c.end;
    const bool reasoning = c.field == ContentField::reasoning_content;
    const Value* s = m.items().at(c.message).find(reasoning ? "reasoning_content" : "content");
    const std::string piece = rc.text.substr(c.begin, c.end - c.begin);
    EXPECT_TRUE(s && s->str().compare(c.offset, piece.size(), piece) == 0 &&
                c.offset + piece.size() <= s->str().size())
        << "span '" << piece << "' is not message " << c.message << "'s bytes at " << c.offset;
    out.spans.push_back({c.message, reasoning ? 'r' : 'c', piece, c.offset});
  }
  return out;
}

// One assistant message with this content.
std::string one(const std::string& content_json) {
  return R"([{"role": "assistant", "content": )" + content_json + "}]";
}

using Spans = std::vector<Span>;

TEST(JinjaOrigins, ConcatenationAndSet) {
  const auto r = render(
      "{% set c = messages[0].content %}{{ '<' ~ c ~ '>' }}{{ '[' + c + ']' }}"
      "{{ c[:2] ~ c[2:] }}",
      one(R"("abcd")"));
  EXPECT_EQ(r.text, "<abcd>[abcd]abcd");
  // a string cut in two and joined again: one span
  EXPECT_EQ(r.spans, (Spans{{0, 'c', "abcd", 0}, {0, 'c', "abcd", 0}, {0, 'c', "abcd", 0}}));
}

TEST(JinjaOrigins, Split) {
  const auto r = render(
      "{% set p = messages[0].content.split(',') %}{{ p[1] }}|{{ p[-1] }}|{{ p | length }}|"
      "{{ messages[0].content.split()[1] }}|{{ messages[0].content.split(',', 1)[1] }}",
      one(R"("a,b c,,d")"));
  EXPECT_EQ(r.text, "b c|d|4|c,,d|b c,,d");
  EXPECT_EQ(
      r.spans,
      (Spans{{0, 'c', "b c", 2}, {0, 'c', "d", 7}, {0, 'c', "c,,d", 4}, {0, 'c', "b c,,d", 2}}));
  // an empty piece marks its place: an empty span at the piece's offset
  const auto e = render("{{ messages[0].content.split(',')[1] }}", one(R"("a,,b")"));
  EXPECT_EQ(e.spans, (Spans{{0, 'c', "", 2}}));
}

TEST(JinjaOrigins, SlicesAndIndexing) {
  const auto r = render(
      "{% set c = messages[0].content %}{{ c[1:3] }}|{{ c[-2:] }}|{{ c[::2] }}|{{ c[::-1] }}|"
      "{{ c[0] }}{{ c[-1] }}",
      one(R"("abcdé")"));
  EXPECT_EQ(r.text, "bc|dé|acé|édcba|aé");
  // per code point: steps other than 1 make a span of each (é is two bytes, one code point)
  EXPECT_EQ(r.spans, (Spans{{0, 'c', "bc", 1},
                            {0, 'c', "dé", 3},
                            {0, 'c', "a", 0},
                            {0, 'c', "c", 2},
                            {0, 'c', "é", 4},
                            {0, 'c', "é", 4},
                            {0, 'c', "d", 3},
                            {0, 'c', "c", 2},
                            {0, 'c', "b", 1},
                            {0, 'c', "a", 0},
                            {0, 'c', "a", 0},
                            {0, 'c', "é", 4}}));
  // a slice of the template's own bytes beside the content claims nothing
  const auto t = render("{{ (messages[0].content ~ 'tail')[2:] }}", one(R"("ab")"));
  EXPECT_EQ(t.text, "tail");
  EXPECT_EQ(t.spans, Spans{});
}

TEST(JinjaOrigins, Replace) {
  const auto r = render(
      "{% set c = messages[0].content %}{{ c.replace('-', '+') }}|{{ c | replace('-', '') }}|"
      "{{ c.replace('-', c[0], 1) }}",
      one(R"("a-b-c")"));
  EXPECT_EQ(r.text, "a+b+c|abc|aab-c");
  // the kept parts keep theirs, the literal inserted has none, inserted content keeps its own
  EXPECT_EQ(r.spans, (Spans{{0, 'c', "a", 0},
                            {0, 'c', "b", 2},
                            {0, 'c', "c", 4},
                            {0, 'c', "a", 0},
                            {0, 'c', "b", 2},
                            {0, 'c', "c", 4},
                            {0, 'c', "a", 0},
                            {0, 'c', "a", 0},
                            {0, 'c', "b-c", 2}}));
  const auto empty = render("{{ messages[0].content.replace('', '.') }}", one(R"("ab")"));
  EXPECT_EQ(empty.text, ".a.b.");
  EXPECT_EQ(empty.spans, (Spans{{0, 'c', "a", 0}, {0, 'c', "b", 1}}));
}

TEST(JinjaOrigins, StripAndTrim) {
  const auto r = render(
      "{% set c = messages[0].content %}[{{ c.strip() }}][{{ c.lstrip() }}][{{ c.rstrip() }}]"
      "[{{ c | trim }}][{{ c.strip(' x') }}][{{ c | trim('x ') }}]",
      one(R"(" x ab x ")"));
  EXPECT_EQ(r.text, "[x ab x][x ab x ][ x ab x][x ab x][ab][ab]");
  EXPECT_EQ(r.spans, (Spans{{0, 'c', "x ab x", 1},
                            {0, 'c', "x ab x ", 1},
                            {0, 'c', " x ab x", 0},
                            {0, 'c', "x ab x", 1},
                            {0, 'c', "ab", 3},
                            {0, 'c', "ab", 3}}));
  // a blank content stripped to nothing marks where it was printed
  const auto blank = render("<{{ messages[0].content | trim }}>", one(R"("  \n ")"));
  EXPECT_EQ(blank.text, "<>");
  EXPECT_EQ(blank.spans, (Spans{{0, 'c', "", 4}}));
}

TEST(JinjaOrigins, JoinAndRepeat) {
  const auto r = render(
      "{% set c = messages[0].content %}{{ c.split(' ') | join('_') }}|"
      "{{ ['<', c, '>'] | join }}|{{ ['x', 'y'] | join(c) }}|{{ c * 2 }}",
      one(R"("a b")"));
  EXPECT_EQ(r.text, "a_b|<a b>|xa by|a ba b");
  EXPECT_EQ(r.spans, (Spans{{0, 'c', "a", 0},
                            {0, 'c', "b", 2},
                            {0, 'c', "a b", 0},
                            {0, 'c', "a b", 0},
                            {0, 'c', "a b", 0},
                            {0, 'c', "a b", 0}}));
}

TEST(JinjaOrigins, CharactersFirstLastListReverse) {
  const auto r = render(
      "{% set c = messages[0].content %}{% for ch in c %}{{ ch }}{% endfor %}|{{ c | first }}"
      "{{ c | last }}|{{ c | list | join }}|{{ c | reverse }}",
      one(R"("aé")"));
  EXPECT_EQ(r.text, "aé|aé|aé|éa");
  // characters printed or joined one after another are one span again
  EXPECT_EQ(r.spans, (Spans{{0, 'c', "aé", 0},
                            {0, 'c', "aé", 0},
                            {0, 'c', "aé", 0},
                            {0, 'c', "é", 1},
                            {0, 'c', "a", 0}}));
}

TEST(JinjaOrigins, Indent) {
  const auto r = render(
      "{{ messages[0].content | indent(2) }}|{{ messages[0].content | indent(2, "
      "true) }}",
      one(R"("a\nb")"));
  EXPECT_EQ(r.text, "a\n  b|  a\n  b");
  EXPECT_EQ(r.spans,
            (Spans{{0, 'c', "a\n", 0}, {0, 'c', "b", 2}, {0, 'c', "a\n", 0}, {0, 'c', "b", 2}}));
}

TEST(JinjaOrigins, OperationsMakingOtherBytesKeepNothing) {
  const auto r = render(
      "{% set c = messages[0].content %}{{ c.upper() }}{{ c.lower() }}{{ c.title() }}"
      "{{ c.capitalize() }}{{ c | upper }}{{ c | lower }}{{ c | title }}{{ c | capitalize }}"
      "{{ c | tojson }}{{ [c] }}{{ c | length }}",
      one(R"("aB")"));
  EXPECT_EQ(r.text, "ABabAbAbABabAbAb\"aB\"['aB']2");
  EXPECT_EQ(r.spans, Spans{});
}

TEST(JinjaOrigins, MacrosBlockSetAndNamespaces) {
  const auto r = render(
      "{% macro show(x) %}({{ x.split('|')[1] }}){% endmacro %}{% set ns = namespace(t='') %}"
      "{% for m in messages %}{% set ns.t = ns.t ~ show(m.content) %}{% endfor %}"
      "{% set b %}{{ ns.t }}{% endset %}{{ b[1:] }}",
      R"([{"role": "user", "content": "u|one"}, {"role": "assistant", "content": "a|two"}])");
  EXPECT_EQ(r.text, "one)(two)");
  EXPECT_EQ(r.spans, (Spans{{0, 'c', "one", 2}, {1, 'c', "two", 2}}));
}

TEST(JinjaOrigins, ReasoningContent) {
  const auto r = render(
      "{% for m in messages %}<think>{{ m.reasoning_content.strip() }}</think>"
      "{{ m.content }}{% endfor %}",
      R"([{"role": "assistant", "content": "yes", "reasoning_content": " because "}])");
  EXPECT_EQ(r.text, "<think>because</think>yes");
  EXPECT_EQ(r.spans, (Spans{{0, 'r', "because", 1}, {0, 'c', "yes", 0}}));
}

// Qwen3's expressions: the reasoning in the content's <think> tags and the answer after them.
TEST(JinjaOrigins, Qwen3ThinkTags) {
  const auto r = render(
      "{% set m = messages[0] %}"
      "{% set content = m.content.split('</think>')[-1].lstrip('\\n') %}"
      "{% set reasoning = m.content.split('</think>')[0].rstrip('\\n').split('<think>')[-1]"
      ".lstrip('\\n') %}"
      "{{ '<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}",
      one(R"("<think>\n\nWhy.\n</think>\n\nSo.")"));
  EXPECT_EQ(r.text, "<think>\nWhy.\n</think>\n\nSo.");
  EXPECT_EQ(r.spans, (Spans{{0, 'c', "Why.", 9}, {0, 'c', "So.", 24}}));
}

TEST(JinjaOrigins, SpansCostSteps) {
  Limits limits;
  limits.max_steps = 200000;
  try {
    render("{{ (messages[0].content * 1000000) | length }}", one(R"("a")"), limits);
    FAIL() << "a million spans within 200000 steps";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("the step limit"), std::string::npos) << e.what();
  }
  // without origins the same repetition is within the limit
  const auto r = render("{{ ('a' * 1000000) | length }}", one(R"("a")"), limits);
  EXPECT_EQ(r.text, "1000000");
}

}  // namespace
}  // namespace kktrain::text::jinja
