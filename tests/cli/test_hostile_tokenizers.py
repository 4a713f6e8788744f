"""A hostile tokenizer directory or chat data line (issue 47) through the commands users run:
one line on stderr naming the file, the key or line and the limit, exit 2, never a signal, a
hang, an internal error or shards written.

usage: test_hostile_tokenizers.py KKTRAIN CASE  (tests/cli/hostile_tokenizers.cmake, "hostile")

- chat_nesting: `kktrain render` of a chat line whose extra key holds 10^5 nested arrays (200 KB;
  was a SIGSEGV), and of one nested 129 deep (refused) and 128 deep (rendered): FILE:LINE and
  the limit.
- not_files: a directory or a FIFO as tokenizer.json or tokenizer_config.json under `kktrain
  tokenize` ("internal error: basic_filebuf::underflow", or a hang): "is a directory, not a file",
  "is a FIFO"; in bounded time.
- emitted_ids: TemplateProcessing ids that are no token (70000, -5, 60000 with a vocabulary of
  306, 2^40): the key and the vocabulary's range; no shard written (60000 was, with exit 0).
- huge_ids: one vocabulary id of 2^28 in a 6 KB file (was 26 s and 4.5 GB) and 2^31-1 (a
  generic out-of-memory line): the key and the limit, at once.
- eos_not_a_token: tokenizer_config.json's eos_token naming no token is said to be no token of
  the vocabulary (was: "names no eos_token").
- regex_failure: a pre-tokenizer regex that backtracks past PCRE2's match limit on a document:
  the key, the pattern and the text's length and first bytes (was: neither key nor input, exit
  1).
"""

import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_tokenize as tk  # noqa: E402
import test_train as tt  # noqa: E402
from test_train import check  # noqa: E402

KKTRAIN = ""
ERROR = "kktrain: error: "


def run(args, timeout=60):
    """(exit status, stdout, the stderr lines) of kktrain ARGS; a hang fails the test."""
    try:
        p = subprocess.run([KKTRAIN, *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise tt.Failure(f"kktrain {' '.join(args)}: still running after {timeout} s")
    return p.returncode, p.stdout, tt.startup_lines(tt.without_launch_warnings(p.stderr))


def one_error(args, *needles, timeout=60):
    """kktrain ARGS exits 2 with one error line naming every needle; the line."""
    rc, out, lines = run(args, timeout)
    where = f"\n$ kktrain {' '.join(args)}\nrc={rc}\n" + "\n".join(lines)
    check(rc == 2, "expected exit 2" + where)
    check(len(lines) == 1 and lines[0].startswith(ERROR), "one error line" + where)
    for n in needles:
        check(n in lines[0], f"the error should name {n!r}" + where)
    print("ok:", lines[0][:300])
    return lines[0]


def model_dir(tmp, name, tok, config=None):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    if config is not None:
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f)
    return d


def doc(tmp, text="the cat sat\n"):
    p = os.path.join(tmp, "doc.txt")
    with open(p, "w", encoding="utf-8") as f:
        f.write(text)
    return p


def tokenize(d, tmp, *extra):
    os.makedirs(os.path.join(tmp, "out"), exist_ok=True)
    return ["tokenize", "--tokenizer", d, doc(tmp), "--out", os.path.join(tmp, "out", "s"),
            "--no-eos", *extra]


def no_shards(tmp):
    out = os.path.join(tmp, "out")
    left = sorted(os.listdir(out)) if os.path.isdir(out) else []
    check(not left, f"shards written: {left}")


# ---- cases ---------------------------------------------------------------------------------


CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
          "{% endfor %}")


def case_chat_nesting():
    with tempfile.TemporaryDirectory(prefix="kktrain_hostile_tok_") as tmp:
        tok, _ = tk.byte_level()
        n = max(tok["model"]["vocab"].values()) + 1
        tok["added_tokens"] += [tk.added("<|im_start|>", n), tk.added("<|im_end|>", n + 1)]
        tok["model"]["vocab"].update({"<|im_start|>": n, "<|im_end|>": n + 1})
        d = model_dir(tmp, "model", tok, {"eos_token": tk.EOS, "chat_template": CHATML})
        msgs = '{"messages": [{"role": "user", "content": "hi"}, ' \
               '{"role": "assistant", "content": "yo"}]'
        data = os.path.join(tmp, "chat.jsonl")
        cfg = os.path.join(tmp, "cfg.yaml")
        with open(cfg, "w") as f:
            f.write("model: {vocab_size: 512, max_seq_len: 256}\n")

        def render(extra_value):
            with open(data, "w") as f:
                f.write(msgs + "}\n" + msgs + ', "extra": ' + extra_value + "}\n")
            return ["render", cfg, f"model.tokenizer={d}", f"data.path={data}",
                    "data.format=chat", "data.seq_len=256", "--count", "0"]

        deep = "[" * 100000 + "]" * 100000
        one_error(render(deep), f"{data}:2", "nested deeper than 128 levels")
        # Inside the line's object: 127 arrays make 128 levels, the 128th array is refused.
        column = len(msgs + ', "extra": ') + 128
        one_error(render("[" * 128 + "]" * 128), f"{data}:2", "nested deeper than 128 levels",
                  f"at column {column}")
        rc, out, lines = run(render("[" * 127 + "]" * 127))
        check(rc == 0, f"128 levels: exit {rc}: {lines}")


def case_not_files():
    with tempfile.TemporaryDirectory(prefix="kktrain_hostile_tok_") as tmp:
        tok, _ = tk.byte_level()
        d = os.path.join(tmp, "dir_json")
        os.makedirs(os.path.join(d, "tokenizer.json"))
        one_error(tokenize(d, tmp), "tokenizer.json' is a directory, not a file")
        d = model_dir(tmp, "dir_config", tok)
        os.makedirs(os.path.join(d, "tokenizer_config.json"))
        one_error(tokenize(d, tmp), "tokenizer_config.json' is a directory, not a file")
        for name in ("tokenizer.json", "tokenizer_config.json"):
            d = model_dir(tmp, "fifo_" + name, tok)
            os.remove(os.path.join(d, "tokenizer.json"))
            if name == "tokenizer_config.json":
                with open(os.path.join(d, "tokenizer.json"), "w") as f:
                    json.dump(tok, f)
            os.mkfifo(os.path.join(d, name))
            start = time.monotonic()
            one_error(tokenize(d, tmp), f"{name}' is a FIFO (named pipe), not a regular file",
                      timeout=30)
            check(time.monotonic() - start < 20, "the FIFO took too long")
        no_shards(tmp)


def case_emitted_ids():
    with tempfile.TemporaryDirectory(prefix="kktrain_hostile_tok_") as tmp:
        tok, _ = tk.byte_level()
        ids = [*tok["model"]["vocab"].values(), *(a["id"] for a in tok["added_tokens"])]
        vocab_size = max(ids) + 1
        for k, bad in enumerate((70000, -5, 60000, 2 ** 40, vocab_size)):
            t = json.loads(json.dumps(tok))
            t["post_processor"]["special_tokens"][tk.BOS]["ids"] = [bad]
            d = model_dir(tmp, f"m{k}", t)
            one_error(tokenize(d, tmp),
                      f"key 'post_processor.special_tokens.{tk.BOS}.ids[0]': id {bad} is not a "
                      f"token of the vocabulary (ids 0..{vocab_size - 1})")
            no_shards(tmp)


def case_huge_ids():
    with tempfile.TemporaryDirectory(prefix="kktrain_hostile_tok_") as tmp:
        tok, _ = tk.byte_level()
        for k, bad in enumerate((2 ** 28, 2 ** 31 - 1)):
            t = json.loads(json.dumps(tok))
            t["model"]["vocab"]["Ġcat"] = bad
            d = model_dir(tmp, f"m{k}", t)
            start = time.monotonic()
            one_error(tokenize(d, tmp), "key 'model.vocab.Ġcat'", f"id {bad} is out of range",
                      "ids below")
            check(time.monotonic() - start < 20, f"id {bad}: {time.monotonic() - start:.1f} s")
            no_shards(tmp)


def case_eos_not_a_token():
    with tempfile.TemporaryDirectory(prefix="kktrain_hostile_tok_") as tmp:
        tok, _ = tk.byte_level()
        d = model_dir(tmp, "model", tok, {"eos_token": "<|nope|>"})
        os.makedirs(os.path.join(tmp, "out"))
        args = ["tokenize", "--tokenizer", d, doc(tmp), "--out", os.path.join(tmp, "out", "s")]
        one_error(args, "eos_token '<|nope|>'", "tokenizer_config.json",
                  "is not a token of the vocabulary", "--eos TOKEN", "--no-eos")
        no_shards(tmp)


def case_regex_failure():
    with tempfile.TemporaryDirectory(prefix="kktrain_hostile_tok_") as tmp:
        tok, _ = tk.byte_level()
        tok["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(a|aa)+$"}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]}
        d = model_dir(tmp, "model", tok)
        os.makedirs(os.path.join(tmp, "out"))
        args = ["tokenize", "--tokenizer", d, doc(tmp, "b" + "a" * 300 + "!\n"), "--out",
                os.path.join(tmp, "out", "s"), "--no-eos"]
        one_error(args, "key 'pre_tokenizer.pretokenizers[0].pattern.Regex'", "(a|aa)+$",
                  "match limit", "a text of 303 bytes starting \"baaaa")
        no_shards(tmp)


def main():
    global KKTRAIN
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    KKTRAIN, name = sys.argv[1:]
    tt.KKTRAIN = KKTRAIN
    tk.tt.KKTRAIN = KKTRAIN
    fn = globals().get("case_" + name)
    if fn is None:
        print(f"unknown case {name!r}")
        return 2
    try:
        fn()
    except tt.Failure as e:
        print(f"FAIL {name}: {e}")
        return 1
    print(f"ok {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
