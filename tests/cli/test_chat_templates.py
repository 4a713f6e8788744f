#!/usr/bin/env python3
"""Chat templates rendered by kktrain (text/jinja.hpp through tests/text/render_chat.cpp) against
jinja2 set up as transformers' apply_chat_template (tests/text/render_reference.py), byte for byte.

  test_chat_templates.py RENDER_CHAT NPM_DIR CASE
CASE: constructs (hand-written templates exercising every supported construct), errors (each
refusal one error naming the construct and the line; jinja2 refuses them too), llama3 / gemma3
(the chat templates of @lenml/tokenizer-*; exit 77 when NPM_DIR lacks them).
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
    "{{ 'x'  'y' }}\r{{ 'cr\r\nlf' }}\n",
]

# (template, what kktrain's one error must name[, OUTSIDE: jinja2 renders it, kktrain refuses it as
# outside its subset])
OUTSIDE = "outside the subset"
ERRORS = [
    ("hi\n{{ messages | frobnicate }}", "line 2: unknown filter 'frobnicate'"),
    ("{% for m in messages %}\n{% frob %}{% endfor %}", "line 2: unknown or unsupported statement 'frob'"),
    ("a\nb\n{{ raise_exception('bad roles') }}", "line 3: raise_exception: bad roles"),
    ("{{ 1 is frob }}", "line 1: unknown test 'frob'"),
    ("{% if x %}", "expected 'elif'"),
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


def render_kktrain(binary, cases):
    proc = subprocess.run([binary], input=json.dumps(cases).encode(), capture_output=True,
                          timeout=60, check=True)
    return [json.loads(line) for line in proc.stdout.decode().split("\n") if line]


def cases_for(templates, special):
    return [{"template": t, "messages": conv, "add_generation_prompt": agp,
             "special_tokens": special}
            for t in templates for conv in CONVERSATIONS for agp in (False, True)]


def compare(binary, cases):
    got = render_kktrain(binary, cases)
    assert len(got) == len(cases), f"{len(got)} results for {len(cases)} cases"
    bad = 0
    for case, mine in zip(cases, got):
        want = render_reference.render(case["template"], case["messages"],
                                       case["add_generation_prompt"], case["special_tokens"])
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
        ok = compare(binary, cases_for([template], special))
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
