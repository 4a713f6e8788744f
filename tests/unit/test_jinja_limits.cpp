// The chat-template interpreter (text/jinja.hpp) on hostile templates: a template is code from an
// untrusted download, so nesting, recursion, loops, evaluation steps, output and source size are
// bounded (jinja::Limits), each overrun one InputError naming the template, the line and the
// limit, in bounded time; never a signal, a hang or an allocation without bound.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "core/errors.hpp"
#include "text/jinja.hpp"

namespace kktrain::text::jinja {
namespace {

// The InputError rendering `source` raises ("(rendered)" when it renders).
std::string error_of(const std::string& source, const Limits& limits = {}) {
  try {
    const Template t(source, "hostile.jinja", limits);
    t.render(Dict{});
  } catch (const InputError& e) {
    return e.what();
  }
  return "(rendered)";
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int k = 0; k < n; ++k) out += s;
  return out;
}

// `what` holds every one of `parts`.
::testing::AssertionResult names(const std::string& what,
                                 std::initializer_list<const char*> parts) {
  for (const char* p : parts)
    if (what.find(p) == std::string::npos)
      return ::testing::AssertionFailure() << "'" << what << "' does not name '" << p << "'";
  if (what.find('\n') != std::string::npos)
    return ::testing::AssertionFailure() << "'" << what << "' is more than one line";
  return ::testing::AssertionSuccess();
}

// ---- recursion: the parser's nesting and the evaluator's depth ----------------------------------

TEST(JinjaLimits, SelfRecursiveMacro) {
  EXPECT_TRUE(names(error_of("{% macro f() %}{{ f() }}{% endmacro %}\n{{ f() }}"),
                    {"hostile.jinja line 1: ", "depth limit"}));
}

TEST(JinjaLimits, MutuallyRecursiveMacrosWithArguments) {
  EXPECT_TRUE(names(error_of("{% macro a(n) %}{{ b(n + 1) }}{% endmacro %}\n"
                             "{% macro b(n) %}{% if n > -1 %}{{ a(n) }}{% endif %}{% endmacro %}\n"
                             "{{ a(0) }}"),
                    {"hostile.jinja line ", "depth limit"}));
}

TEST(JinjaLimits, MacroRecursingThroughABlockSet) {
  EXPECT_TRUE(names(error_of("{% macro f() %}{% set x %}{{ f() }}{% endset %}{% endmacro %}"
                             "{{ f() }}"),
                    {"hostile.jinja line 1: ", "depth limit"}));
}

TEST(JinjaLimits, NestedParentheses) {
  const std::string e = error_of("{{ " + repeat("(", 100000) + "1" + repeat(")", 100000) + " }}");
  EXPECT_TRUE(names(e, {"hostile.jinja line 1: ", "nesting limit"}));
}

TEST(JinjaLimits, NestedListsDictsAndCalls) {
  EXPECT_TRUE(names(error_of("{{ " + repeat("[", 20000) + repeat("]", 20000) + " }}"),
                    {"hostile.jinja line 1: ", "nesting limit"}));
  EXPECT_TRUE(names(error_of("{{ " + repeat("{'a': ", 20000) + "1" + repeat("}", 20000) + " }}"),
                    {"hostile.jinja line 1: ", "nesting limit"}));
  EXPECT_TRUE(names(error_of("{{ " + repeat("dict(a=", 20000) + "1" + repeat(")", 20000) + " }}"),
                    {"hostile.jinja line 1: ", "nesting limit"}));
  EXPECT_TRUE(names(error_of("{{ x" + repeat("[x", 20000) + repeat("]", 20000) + " }}"),
                    {"hostile.jinja line 1: ", "nesting limit"}));
}

TEST(JinjaLimits, LongUnaryAndBinaryChains) {
  // built in a loop by the parser, walked recursively by the evaluator (and freed recursively)
  for (const std::string& e :
       {repeat("not ", 20000) + "1", repeat("- ", 20000) + "1", repeat("1 + ", 20000) + "1",
        "'a'" + repeat(" ~ 'a'", 20000), "x" + repeat(".a", 20000), "x" + repeat("[0]", 20000),
        "'a'" + repeat(" | trim", 20000), repeat("1 if x else ", 20000) + "2",
        repeat("1 ** ", 20000) + "1", repeat("x is defined and ", 20000) + "1",
        "f" + repeat("()", 20000)}) {
    EXPECT_TRUE(names(error_of("{{ " + e + " }}"), {"hostile.jinja line 1: ", "nesting limit"}))
        << e.substr(0, 20);
  }
}

TEST(JinjaLimits, NestedBlocks) {
  // one block a line: the error names the line where the nesting goes past the limit
  EXPECT_TRUE(names(error_of(repeat("{% if true %}\n", 20000) + repeat("{% endif %}", 20000)),
                    {"hostile.jinja line ", "nesting limit"}));
  EXPECT_TRUE(names(error_of(repeat("{% for x in [1] %}", 20000) + repeat("{% endfor %}", 20000)),
                    {"hostile.jinja line 1: ", "nesting limit"}));
  EXPECT_TRUE(names(error_of("{% if false %}" + repeat("{% elif false %}", 20000) + "{% endif %}"),
                    {"hostile.jinja line 1: ", "nesting limit"}));
  EXPECT_TRUE(names(error_of(repeat("{% set x %}", 20000) + repeat("{% endset %}", 20000)),
                    {"hostile.jinja line 1: ", "nesting limit"}));
  EXPECT_TRUE(names(error_of(repeat("{% macro m() %}", 20000) + repeat("{% endmacro %}", 20000)),
                    {"hostile.jinja line 1: ", "nesting limit"}));
}

TEST(JinjaLimits, ValuesNestedByTheTemplate) {
  // a list wrapped in a list 10^5 times: printing, comparing, tojson and freeing it recurse
  EXPECT_TRUE(
      names(error_of("{% set ns = namespace(x=1) %}{% for i in range(100000) %}"
                     "{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x | tojson }}{{ ns.x == ns.x }}"),
            {"hostile.jinja line 1: ", "limit"}));
  EXPECT_TRUE(names(error_of("{% set ns = namespace(x=1) %}{% for i in range(100000) %}"
                             "{% set ns.x = {'k': ns.x} %}{% endfor %}{{ ns.x }}"),
                    {"hostile.jinja line 1: ", "limit"}));
}

// ---- budgets: work, loops, output, source -------------------------------------------------------

TEST(JinjaLimits, PowerBySquaring) {
  // 2^63 - 1 multiplications before; now 63 squarings
  EXPECT_EQ(Template("{{ 0 ** 9223372036854775807 }} {{ 1 ** 9223372036854775807 }} "
                     "{{ (-1) ** 9223372036854775807 }} {{ (-1) ** 9223372036854775806 }} "
                     "{{ 2 ** 62 }} {{ (-2) ** 63 }} {{ 3 ** 39 }} {{ 7 ** 0 }} {{ 0 ** 0 }}")
                .render(Dict{}),
            "0 1 -1 1 4611686018427387904 -9223372036854775808 4052555153018976267 1 1");
  EXPECT_TRUE(names(error_of("{{ 2 ** 63 }}"), {"hostile.jinja line 1: ", "beyond 64 bits"}));
  EXPECT_TRUE(names(error_of("{{ 3 ** 9223372036854775807 }}"),
                    {"hostile.jinja line 1: ", "beyond 64 bits"}));
}

TEST(JinjaLimits, IntegerEdges) {
  // -2^63 // -1 traps (SIGFPE) in C++; Python's result needs 65 bits
  for (const char* e : {"(-9223372036854775807 - 1) // -1", "-(-9223372036854775807 - 1)",
                        "(-9223372036854775807 - 1) | abs", "1e300 | int", "'-1e19' | int"}) {
    EXPECT_TRUE(names(error_of(std::string("{{ ") + e + " }}"),
                      {"hostile.jinja line 1: ", "beyond 64 bits"}))
        << e;
  }
  EXPECT_EQ(Template("{{ (-9223372036854775807 - 1) // 1 }} {{ -7 // 2 }} {{ -7 % 3 }} "
                     "{{ (-9223372036854775807 - 1) % -1 }} {{ 7 // -1 }} {{ -7 % -1 }}")
                .render(Dict{}),
            "-9223372036854775808 -4 2 0 -7 0");
}

TEST(JinjaLimits, NestedRangeLoops) {
  EXPECT_TRUE(names(error_of("{% for i in range(100000) %}\n{% for j in range(100000) %}"
                             "{% endfor %}{% endfor %}"),
                    {"hostile.jinja line 2: ", "loop limit"}));
}

TEST(JinjaLimits, RangeAsTheSandboxBoundsIt) {
  // jinja2's sandbox: at most 100000 items (MAX_RANGE), however large the bounds
  EXPECT_EQ(Template("{{ range(100000) | length }} {{ range(0, 9223372036854775807, "
                     "9223372036854775807) | list }}")
                .render(Dict{}),
            "100000 [0]");
  EXPECT_TRUE(
      names(error_of("{{ range(100001) | length }}"), {"hostile.jinja line 1: ", "100000"}));
}

TEST(JinjaLimits, HugeStringRepetition) {
  EXPECT_TRUE(names(error_of("{{ 'x' * 10**10 }}"), {"hostile.jinja line 1: ", "output limit"}));
  EXPECT_TRUE(names(error_of("{{ 'x' * 134217729 }}"),
                    {"hostile.jinja line 1: ", "longer than 134217728 bytes (the output limit)"}));
  EXPECT_TRUE(names(error_of("{{ 'xy' * 9223372036854775807 }}"),
                    {"hostile.jinja line 1: ", "output limit"}));
}

TEST(JinjaLimits, StringsDoubledInALoop) {
  Limits small;  // the defaults would double up to 128 MiB first
  small.max_output_bytes = 1 << 20;
  for (const char* doubled :
       {"ns.s ~ ns.s", "ns.s + ns.s", "[ns.s, ns.s] | join", "ns.s.replace('x', 'xx')",
        "ns.s | replace('x', 'xx')", "ns.s * 2", "(ns.s ~ '\\n' ~ ns.s) | indent(1000)",
        "[ns.s] | tojson(indent=1000000)"}) {
    EXPECT_TRUE(names(error_of("{% set ns = namespace(s='x') %}\n{% for i in range(100) %}"
                               "{% set ns.s = " +
                                   std::string(doubled) + " %}{% endfor %}",
                               small),
                      {"hostile.jinja line 2: ", "1048576 bytes (the output limit)"}))
        << doubled;
  }
}

TEST(JinjaLimits, DefaultsForWorkAndOutput) {
  // what the defaults are measured against (text/jinja.hpp): far above real templates' needs
  const Limits d;
  EXPECT_GE(d.max_steps, 100 * 362004);
  EXPECT_GE(d.max_loop_iterations, 1000 * 902);
  EXPECT_GE(d.max_output_bytes, 100u * 1147309u);
  EXPECT_GE(d.max_depth, 50 * 18);
}

TEST(JinjaLimits, OutputOfALoop) {
  Limits small;
  small.max_output_bytes = 1000;
  EXPECT_TRUE(names(error_of("{% for i in range(100000) %}\nxx{% endfor %}", small),
                    {"hostile.jinja line 2: ", "output longer than 1000 bytes"}));
  EXPECT_TRUE(names(error_of("{% macro m() %}{% for i in range(1000) %}xx{% endfor %}{% endmacro %}"
                             "\n{{ m() }}",
                             small),
                    {"hostile.jinja line 1: ", "output limit"}));
}

TEST(JinjaLimits, QuadraticListAppend) {
  Limits limits;  // the default: a second or two to reach in a Release build
#if defined(__SANITIZE_ADDRESS__)
  // Under AddressSanitizer the default limit takes 100 s to reach: the sanitized build checks the
  // same copying under a smaller limit (the Release build checks the default).
  limits.max_steps = 2'000'000;
#endif
  EXPECT_TRUE(names(error_of("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
                             "{% set ns.l = ns.l + [i] %}{% endfor %}{{ ns.l | length }}",
                             limits),
                    {"hostile.jinja line 1: ", "step limit"}));
}

TEST(JinjaLimits, HundredMegabytesOfText) {
  const std::string source(100u << 20, 'a');
  EXPECT_TRUE(names(error_of(source), {"hostile.jinja: ", "size limit (1048576 bytes)"}));
  Limits small;
  small.max_source_bytes = 10;
  EXPECT_TRUE(names(error_of("{{ 12345 }}", small), {"hostile.jinja: 11 bytes", "(10 bytes)"}));
  EXPECT_EQ(Template("{{ 1234 }}", "t", small).render(Dict{}), "1234");
}

TEST(JinjaLimits, StepsOfQuadraticWork) {
  // each a few thousand loop iterations, each iteration's work growing with the last ones
  Limits small;  // the default step limit takes a second or two to reach
  small.max_steps = 1000000;
  for (const char* body : {"{% set ns.l = ns.l + [i] %}",
                           "{% set ns.s = ns.s ~ 'xxxxxxxxxxxxxxxxxxxx' %}{{ ns.s | length }}",
                           "{% if ns.l == ns.l %}{% endif %}{% set ns.l = ns.l + [[i]] %}",
                           "{% set ns.l = (ns.l + [i]) | unique | list %}",
                           "{{ i in ns.l }}{% set ns.l = ns.l + [i] %}"}) {
    EXPECT_TRUE(names(error_of("{% set ns = namespace(l=[], s='') %}{% for i in range(100000) %}" +
                                   std::string(body) + "{% endfor %}",
                               small),
                      {"hostile.jinja line 1: ", "more than 1000000 evaluation steps"}))
        << body;
  }
}

TEST(JinjaLimits, LongStringsAreNotCutIntoCodePoints) {
  // length, an index and strip walk the string; a list of its code points costs steps first
  // (kStepsPerCutByte a byte, before they are made)
  EXPECT_EQ(Template("{% set s = 'é' * 1000000 %}{{ s | length }} {{ s[999999] }} "
                     "{{ (' ' ~ s ~ ' ') | trim | length }} {{ (s ~ 'x').rstrip('x') | length }}")
                .render(Dict{}),
            "1000000 é 1000000 1000000");
  // split, tojson, strip(chars) and replace('') walk it too
  EXPECT_EQ(
      Template(
          "{% set s = 'é ' * 100000 %}{{ s.split() | length }} {{ s.split(' ') | length }} "
          "{{ s | tojson | length }} {{ s.strip(s) | length }} {{ s.replace('', '') | length }}")
          .render(Dict{}),
      "100000 100001 200002 0 200000");
  Limits small;
  small.max_steps = 200000;
  for (const char* e : {"s | list | length", "s[::-1] | length", "s | reverse | length",
                        "s[1:] | length", "s.split() | length", "s.split(',') | length"}) {
    EXPECT_TRUE(names(error_of(std::string("{% set s = 'x ,' * 200000 %}{{ ") + e + " }}", small),
                      {"hostile.jinja line 1: ", "(the step limit)"}))
        << e;
  }
}

TEST(JinjaLimits, LoopIterationsCountEveryLoop) {
  Limits small;
  small.max_loop_iterations = 1000;
  EXPECT_EQ(Template("{% for i in range(10) %}{% for j in range(99) %}{% endfor %}{% endfor %}",
                     "t", small)
                .render(Dict{}),
            "");
  EXPECT_TRUE(names(error_of("{% for i in range(10) %}{% for j in range(100) %}\n{% endfor %}"
                             "{% endfor %}",
                             small),
                    {"hostile.jinja line 1: ", "more than 1000 loop iterations"}));
  EXPECT_TRUE(names(error_of("\n{% for i in range(2000) if i > 1990 %}{% endfor %}", small),
                    {"hostile.jinja line 2: ", "(the loop limit)"}));
}

TEST(JinjaLimits, NamespacesDoNotChain) {
  // a namespace holding a namespace could chain them without end (freed recursively)
  EXPECT_TRUE(names(error_of("{% set a = namespace() %}{% set b = namespace(x=a) %}"),
                    {"hostile.jinja line 1: ", "a namespace inside a namespace"}));
  EXPECT_TRUE(names(error_of("{% set a = namespace() %}\n{% set a.x = [{'k': a}] %}"),
                    {"hostile.jinja line 2: ", "a namespace inside a namespace"}));
  EXPECT_TRUE(names(error_of("{% set ns = namespace(p=none) %}{% for i in range(100000) %}"
                             "{% set n = namespace(v=1) %}{% set n.v = ns.p %}{% set ns.p = n %}"
                             "{% endfor %}"),
                    {"hostile.jinja line 1: ", "a namespace inside a namespace"}));
}

TEST(JinjaLimits, DeepMessages) {
  const std::string deep = repeat("[", 100000) + repeat("]", 100000);
  try {
    parse_json(deep, "data.jsonl:7");
    ADD_FAILURE() << "parsed";
  } catch (const InputError& e) {
    EXPECT_TRUE(
        names(e.what(), {"data.jsonl:7: ", "nested deeper than 256 (the value depth limit)"}));
  }
  const Value ok = parse_json(repeat("[", 256) + repeat("]", 256), "x");
  EXPECT_EQ(ok.depth(), 256);
}

// unique lower-cases each string once: linear in its length (before: the whole string checked for
// non-ASCII once per character, O(n^2): 20 s for these three 120 KB strings). A generous bound.
TEST(JinjaLimits, UniqueIsLinearInTheStringLength) {
  const Template t(
      "{% set s = 'aB' * 60000 %}{{ [s, s | lower, s ~ 'x'] | unique | list | length }}",
      "unique.jinja");
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(t.render(Dict{}), "2");
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took.count(), 2.0);
  EXPECT_TRUE(names(error_of("{{ ['é'] | unique | list }}"),
                    {"hostile.jinja line 1: ", "filter 'unique' on non-ASCII text"}));
}

}  // namespace
}  // namespace kktrain::text::jinja
