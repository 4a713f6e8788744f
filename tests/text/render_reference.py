"""Chat templates rendered as transformers' apply_chat_template renders them, on Debian's jinja2.

transformers is not imported: its environment is rebuilt by hand from its documented settings
(utils/chat_template_utils.py _compile_jinja_template): ImmutableSandboxedEnvironment with
trim_blocks, lstrip_blocks and the loopcontrols extension, a `tojson` filter that is
json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False), globals
raise_exception (a TemplateError) and strftime_now, and render(messages=..., tools=None,
documents=None, add_generation_prompt=..., **special_tokens).
"""
import json
from datetime import datetime

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Generation(Extension):
    """{% generation %}...{% endgeneration %} renders its body (transformers' AssistantTracker)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(template, messages, add_generation_prompt, special_tokens):
    """{"text": ...} or {"error": ...} (any exception jinja2 raises)."""
    try:
        t = environment().from_string(template)
        return {"text": t.render(messages=messages, tools=None, documents=None,
                                 add_generation_prompt=add_generation_prompt, **special_tokens)}
    except Exception as e:  # noqa: BLE001 - the reference's refusal, whatever its type
        return {"error": f"{type(e).__name__}: {e}"}
