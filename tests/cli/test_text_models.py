"""Text in and out of models (docs/huggingface.md, "Text and tokenizers"): which models read text
as bytes, which through a tokenizer, which not at all; the tokenizer files of exports; generate
with a text prompt.

usage: test_text_models.py KKTRAIN INPUTS_DIR CASE NPM_DIR    (tests/cli/text_models_tests.cmake)

NPM_DIR holds node_modules/@lenml/tokenizers (the JavaScript port of Hugging Face's tokenizers,
the reference); cases that need it skip (exit 77) with the reason when it or node is absent.

- text_trap: a Hugging Face directory of vocabulary 320 without tokenizer.json and text data
  (data.path my.txt, format auto or text; the embedded corpus) is one error line naming both,
  exit 2, nothing written, for train and grads; generate --prompt refuses it naming --tokenizer;
  a missing model.tokenizer is one line naming the key. The same directory with vocabulary 256
  still trains on the text's bytes.
- export_byte_tokenizer: a byte-level model's safetensors export (the run's and kktrain
  export's) holds tokenizer.json (256 ByteLevel characters = byte values, no merges) and
  tokenizer_config.json; the reference encodes text with it to the UTF-8 bytes and decodes them
  back; the export read back as model.init_from still takes text as bytes; kktrain's own
  tokenizer reading it (kktrain tokenize --ids / --decode, generate --tokenizer) gives the
  bytes as ids, the text back, and the same answer as the bytes.
- export_copies_tokenizer: the export of a model trained from a Hugging Face directory holds
  that directory's tokenizer files, byte for byte, and generate reads the run through them; one
  from a directory without them holds none, nor does that of a kktrain model trained on token
  files (whose --prompt is refused); text data for a model initialized from either run is refused.
- generate_prompt_tokenizer: generate --prompt through a small byte-level BPE tokenizer.json
  (merges, BOS added by its post-processor, EOS ends the answer unprinted) prints what the
  reference decodes of generate --prompt-ids of the reference's ids; --tokenizer gives a directory
  without one the same; a tokenizer larger than the model's vocabulary is one error line.
- train_text_tokenizer: a fine-tune of a Hugging Face directory with a tokenizer on a text file
  (and on a .jsonl file, data.format jsonl, data.jsonl_key) trains on exactly the token shards
  `kktrain tokenize` writes for the same files (byte for byte in <output_dir>/tokens/), with the
  same losses as a run on those shards; a resume reuses them; 2 ranks train on them; refusals:
  the embedded corpus, text and token files mixed, extensions contradicting data.format,
  data.format jsonl for a byte-level model.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "hf"))
sys.path.insert(0, os.path.join(HERE, "..", "text"))
import hf_files as hf  # noqa: E402
from references import bytes_to_unicode  # noqa: E402
import test_train as tt  # noqa: E402
from test_hf import one_error, snapshot, write_config  # noqa: E402
from test_train import check  # noqa: E402

NPM_DIR = ""
TEXT = "Héllo wörld!  \t\n\n  日本語 🙂 the thing's in there, ALL 12345 lo\r\n"


# ---- the reference (node + @lenml/tokenizers) ------------------------------------------------


def reference_module():
    """The path of @lenml/tokenizers, or raise tt.Skip naming what is missing."""
    for p in (os.path.join(NPM_DIR, "node_modules", "@lenml", "tokenizers"),
              os.path.join(NPM_DIR, "@lenml", "tokenizers")):
        if os.path.isdir(p):
            if shutil.which("node") is None:
                raise tt.Skip("node is not installed (the reference tokenizer runs on it)")
            return p
    raise tt.Skip(f"the reference @lenml/tokenizers is not installed under {NPM_DIR!r}")


NODE_SCRIPT = r"""
const {TokenizerLoader} = require(process.argv[1]);
const fs = require('fs');
const req = JSON.parse(fs.readFileSync(0, 'utf8'));
const cfg = fs.existsSync(req.dir + '/tokenizer_config.json')
    ? JSON.parse(fs.readFileSync(req.dir + '/tokenizer_config.json', 'utf8')) : {};
const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(req.dir + '/tokenizer.json', 'utf8')),
  tokenizerConfig: cfg});
const out = {encoded: req.encode.map(t => tok.encode(t, {add_special_tokens: true})),
             decoded: req.decode.map(ids => tok.decode(ids))};
process.stdout.write(JSON.stringify(out));
"""


def reference(directory, encode=(), decode=()):
    """(ids of each text in `encode`, text of each id list in `decode`) by the reference."""
    module = reference_module()
    p = subprocess.run(["node", "-e", NODE_SCRIPT, module], capture_output=True, text=True,
                       input=json.dumps({"dir": directory, "encode": list(encode),
                                         "decode": [list(d) for d in decode]}), timeout=60)
    check(p.returncode == 0, f"the reference failed: {p.stderr[-2000:]}")
    r = json.loads(p.stdout)
    return r["encoded"], r["decoded"]


# ---- tokenizer files -------------------------------------------------------------------------


MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("e", "r"), ("Ġ", "a"), ("l", "l"),
          ("l", "o"), ("Ġ", "Ġ")]
BOS, EOS = 300, 301


def write_bpe_tokenizer(directory):
    """A small byte-level BPE: the 256 byte characters (ids = byte values), 9 merges (ids 256..),
    <s> (300) and </s> (301) special, BOS added by a TemplateProcessing; vocabulary 302."""
    os.makedirs(directory, exist_ok=True)
    vocab = {c: b for b, c in bytes_to_unicode().items()}
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    special = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True} for i, c in ((BOS, "<s>"), (EOS, "</s>"))]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": special,
           "normalizer": None, "pre_tokenizer": byte_level,
           "post_processor": {
               "type": "TemplateProcessing",
               "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                          {"Sequence": {"id": "A", "type_id": 0}}],
               "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                        {"Sequence": {"id": "A", "type_id": 0}},
                        {"Sequence": {"id": "B", "type_id": 1}}],
               "special_tokens": {"<s>": {"id": "<s>", "ids": [BOS], "tokens": ["<s>"]}}},
           "decoder": byte_level,
           "model": {"type": "BPE", "dropout": None, "unk_token": None,
                     "continuing_subword_prefix": None, "end_of_word_suffix": None,
                     "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": vocab, "merges": [f"{a} {b}" for a, b in MERGES]}}
    files = {
        "tokenizer.json": json.dumps(tok, indent=1, ensure_ascii=False),
        "tokenizer_config.json": json.dumps({"tokenizer_class": "PreTrainedTokenizerFast",
                                             "bos_token": "<s>", "eos_token": "</s>",
                                             "clean_up_tokenization_spaces": False}),
        "special_tokens_map.json": json.dumps({"bos_token": "<s>", "eos_token": "</s>"}),
        "chat_template.jinja": "{% for m in messages %}{{ m['content'] }}{% endfor %}\n",
    }
    for name, text in files.items():
        with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
            f.write(text)
    return files


def hf_model(path, V, tokenizer=False):
    cfg = hf.llama_config(V=V, C=32, L=1, H=2, KV=1, F=64, max_pos=64)
    hf.write_llama_dir(path, cfg, hf.random_weights(cfg, seed=5))
    if tokenizer:
        write_bpe_tokenizer(path)
    return path


def write_text(path, text=TEXT * 20):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def write_tokens(path, V, n=4000):
    np.random.default_rng(1).integers(0, V, n).astype("<u2").tofile(path)
    return path


TRAIN = ["data.seq_len=32", "data.micro_batch_size=2", "data.global_batch_size=2",
         "train.max_steps=1", "checkpoint.resume=none", "distributed.mp_policy.param_dtype=float32"]


def train_args(tmp, model, run, *extra):
    conf = os.path.join(tmp, "c.yaml")
    if not os.path.exists(conf):
        write_config(tmp)
    return ["train", conf, f"model.init_from={model}", *TRAIN,
            f"train.output_dir={os.path.join(tmp, run)}", *extra]


def generate(*args):
    p = subprocess.run([tt.KKTRAIN, "generate", *args], capture_output=True)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


# ---- cases -----------------------------------------------------------------------------------


def case_text_trap():
    with tempfile.TemporaryDirectory(prefix="kktrain_text_") as tmp:
        model = hf_model(os.path.join(tmp, "llama"), 320)
        text = write_text(os.path.join(tmp, "my.txt"))
        named = write_text(os.path.join(tmp, "corpus.u16"), "ab" * 400)
        write_config(tmp)
        before = snapshot(tmp)
        for data, needles in (
                ([f"data.path={text}"], (text, "data.format: auto")),
                ([f"data.path={named}", "data.format=text"], (named, "data.format: text")),
                ([], ("embedded default corpus",))):
            args = train_args(tmp, model, "run", *data)
            rc, o, e = tt.run(args)
            one_error(rc, o, e, *needles, model, "320 tokens", "no tokenizer", "model.tokenizer",
                      where=tt.describe(args, rc, o, e))
            check(not os.path.exists(os.path.join(tmp, "run")), "a refused run wrote its directory")
            check(snapshot(tmp) == before, "a refused run changed a file")
        out = os.path.join(tmp, "g.h5")
        args = ["grads", os.path.join(tmp, "c.yaml"), "--out", out, f"model.init_from={model}",
                f"data.path={text}", "data.seq_len=32"]
        rc, o, e = tt.run(args)
        one_error(rc, o, e, text, model, "no tokenizer", where=tt.describe(args, rc, o, e))
        check(not os.path.exists(out), "refused grads wrote --out")
        rc, o, e = generate(model, "--prompt", "hi", "--max-new-tokens", "2")
        one_error(rc, "", e, "--prompt", model, "320 tokens", "--tokenizer", "--prompt-ids")
        args = train_args(tmp, model, "run", f"model.tokenizer={os.path.join(tmp, 'nothing')}")
        rc, o, e = tt.run(args)
        one_error(rc, o, e, "model.tokenizer", "nothing", "does not exist")
        # Token files are what such a model trains on.
        ids = write_tokens(os.path.join(tmp, "ids.u16"), 320)
        rc, o, e = tt.run(train_args(tmp, model, "tokens", f"data.path={ids}"))
        check(rc == 0, "token ids train" + e)
        # kktrain's byte vocabulary (256) still trains on text as bytes.
        bytes_model = hf_model(os.path.join(tmp, "bytes"), 256)
        rc, o, e = tt.run(train_args(tmp, bytes_model, "bytes", f"data.path={text}"))
        check(rc == 0 and "my.txt (text)" in e, "a 256-token model trains on text bytes" + e)


def exported_tokenizer_checks(export):
    with open(os.path.join(export, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    with open(os.path.join(export, "tokenizer_config.json"), encoding="utf-8") as f:
        conf = json.load(f)
    m = tok["model"]
    check(m["type"] == "BPE" and m["merges"] == [] and not m["byte_fallback"], f"model {m}")
    table = bytes_to_unicode()
    check(m["vocab"] == {table[b]: b for b in range(256)}, "vocab is not byte character -> byte")
    for k in ("pre_tokenizer", "decoder"):
        check(tok[k] == {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                         "use_regex": False}, f"{k} {tok[k]}")
    check(tok["post_processor"] is None and tok["normalizer"] is None and tok["added_tokens"] == [],
          "no post-processor, normalizer or added tokens")
    check(conf.get("add_bos_token") is False and conf.get("model_max_length") == 128,
          f"tokenizer_config.json {conf}")


def case_export_byte_tokenizer():
    with tempfile.TemporaryDirectory(prefix="kktrain_text_") as tmp:
        run = os.path.join(tmp, "run")
        rc, o, e = tt.run(["train", tt.config(tt.DEFAULT), *tt.TINY, "train.max_steps=1",
                           "model.max_seq_len=128", f"train.output_dir={run}",
                           "checkpoint.export_format=safetensors"])
        check(rc == 0, "tiny run" + e)
        export = os.path.join(run, "export")
        again = os.path.join(tmp, "again")
        rc, o, e = tt.run(["export", run, "--format", "safetensors", "--out", again])
        check(rc == 0, "kktrain export" + e)
        for d in (export, again):
            names = sorted(os.listdir(d))
            check(names == ["config.json", "model.safetensors", "tokenizer.json",
                            "tokenizer_config.json"], f"{d}: {names}")
            exported_tokenizer_checks(d)
        # Read back as model.init_from, the export still takes text as bytes.
        text = write_text(os.path.join(tmp, "my.txt"))
        args = ["grads", write_config(tmp), "--out", os.path.join(tmp, "g.h5"),
                f"model.init_from={export}", f"data.path={text}", "data.seq_len=32"]
        rc, o, e = tt.run(args)
        check(rc == 0, "grads on text from the export" + tt.describe(args, rc, o, e))
        prompt = "Héllo 日本 🙂"
        rc, by_bytes, e = generate(export, "--prompt", prompt, "--max-new-tokens", "8")
        check(rc == 0 and len(by_bytes) == 9, f"bytes prompt: {by_bytes!r} {e}")
        # kktrain's own tokenizer reading the same vocabulary (a copy that is not the exact text
        # kktrain writes, so it is loaded rather than recognized): the same answer.
        copy = os.path.join(tmp, "copy")
        os.makedirs(copy)
        with open(os.path.join(export, "tokenizer.json"), encoding="utf-8") as f:
            tok = json.load(f)
        with open(os.path.join(copy, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tok, f)
        rc, through, e = generate(export, "--prompt", prompt, "--max-new-tokens", "8",
                                  "--tokenizer", copy)
        check(rc == 0, "generate --tokenizer: " + e)
        decoded = by_bytes[:-1].decode("utf-8", errors="replace").encode() + b"\n"
        check(through == decoded, f"through the tokenizer {through!r} vs bytes {decoded!r}")
        # The reference reads the export: the text's UTF-8 bytes, and back.
        texts = [TEXT, "", " ", "a\u0301 ﬁ \x00\x7f ÿ", "😀" * 5]
        encoded, decoded = reference(export, encode=texts,
                                     decode=[list(t.encode()) for t in texts if t])
        decoded = iter(decoded)  # (the reference decodes non-empty lists only)
        for t, ids in zip(texts, encoded):
            check(ids == list(t.encode()), f"reference ids of {t!r}: {ids}")
            back = next(decoded) if t else ""
            check(back == t, f"reference decode {back!r} vs {t!r}")
        # kktrain's own tokenizer on the exported file: the same ids, and the text back.
        for t in texts:
            if not t or "\x00" in t:  # (a command line holds neither)
                continue
            rc, o, e = tt.run(["tokenize", "--tokenizer", export, "--ids", t])
            check(rc == 0 and o.strip() == ",".join(map(str, t.encode())), f"ids of {t!r}: {o} {e}")
            p = subprocess.run([tt.KKTRAIN, "tokenize", "--tokenizer", export, "--decode",
                                ",".join(map(str, t.encode()))], capture_output=True)
            check(p.returncode == 0 and p.stdout.decode() in (t, t + "\n"),
                  f"decode of {t!r}: {p.stdout!r}")
        print(f"{len(texts)} texts: the reference encodes them to their UTF-8 bytes with the "
              "exported tokenizer.json and decodes them back")


def case_export_copies_tokenizer():
    with tempfile.TemporaryDirectory(prefix="kktrain_text_") as tmp:
        model = hf_model(os.path.join(tmp, "llama"), 320, tokenizer=True)
        ids = write_tokens(os.path.join(tmp, "ids.u16"), 320)
        rc, o, e = tt.run(train_args(tmp, model, "run", f"data.path={ids}",
                                     "checkpoint.export_format=safetensors"))
        check(rc == 0, "train from the directory" + e)
        again = os.path.join(tmp, "again")
        rc, o, e = tt.run(["export", os.path.join(tmp, "run"), "--format", "safetensors",
                           "--out", again])
        check(rc == 0, "kktrain export" + e)
        names = ["chat_template.jinja", "special_tokens_map.json", "tokenizer.json",
                 "tokenizer_config.json"]
        for d in (os.path.join(tmp, "run", "export"), again):
            got = sorted(os.listdir(d))
            check(got == sorted(["config.json", "model.safetensors"] + names), f"{d}: {got}")
            for n in names:
                with open(os.path.join(d, n), "rb") as a, open(os.path.join(model, n), "rb") as b:
                    check(a.read() == b.read(), f"{d}/{n} differs from the source's")
        # generate reads the run's checkpoint through the tokenizer of the directory it was
        # trained from (the config the checkpoint records): <s>, t, he.
        rc, o, e = generate(os.path.join(tmp, "run"), "--prompt", "the", "--max-new-tokens", "2")
        check(rc == 0 and "3 prompt" in e, f"generate a run through its tokenizer: {o!r} {e}")
        # Exporting again over that export replaces it (its tokenizer files are an export's).
        rc, o, e = tt.run(["export", os.path.join(tmp, "run"), "--format", "safetensors",
                           "--out", again])
        check(rc == 0, "export over an export with tokenizer files" + e)
        # A directory without tokenizer files (vocabulary 320): the export has none.
        bare = hf_model(os.path.join(tmp, "bare"), 320)
        rc, o, e = tt.run(train_args(tmp, bare, "run2", f"data.path={ids}",
                                     "checkpoint.export_format=safetensors"))
        check(rc == 0, "train from the bare directory" + e)
        got = sorted(os.listdir(os.path.join(tmp, "run2", "export")))
        check(got == ["config.json", "model.safetensors"], f"bare export: {got}")
        # kktrain's own model trained on token files: its ids are not bytes, so neither its
        # export nor generate --prompt takes it as byte-level.
        run3 = os.path.join(tmp, "run3")
        rc, o, e = tt.run(["train", tt.config(tt.DEFAULT), *tt.TINY, "train.max_steps=1",
                           "model.vocab_size=320", f"data.path={ids}", f"train.output_dir={run3}",
                           "checkpoint.export_format=safetensors"])
        check(rc == 0, "train on token files" + e)
        got = sorted(os.listdir(os.path.join(run3, "export")))
        check(got == ["config.json", "model.safetensors"], f"token-trained export: {got}")
        rc, o, e = generate(run3, "--prompt", "hi")
        one_error(rc, "", e, "--prompt", "320 tokens", "trained on token files", "--tokenizer")
        # Nor does training from those runs take text as bytes (model.init_from a kktrain run).
        text = write_text(os.path.join(tmp, "my.txt"))
        for src, needles in ((run3, ("trained on token files",)),
                             (os.path.join(tmp, "run2"), ("no tokenizer.json", "bare"))):
            args = ["train", tt.config(tt.DEFAULT), *tt.TINY, "model.vocab_size=320",
                    "train.max_steps=1", f"model.init_from={src}", f"data.path={text}",
                    f"train.output_dir={os.path.join(tmp, 'run4')}"]
            rc, o, e = tt.run(args)
            one_error(rc, o, e, text, src, "320 tokens", *needles,
                      where=tt.describe(args, rc, o, e))


def case_generate_prompt_tokenizer():
    with tempfile.TemporaryDirectory(prefix="kktrain_text_") as tmp:
        model = hf_model(os.path.join(tmp, "llama"), 320, tokenizer=True)
        prompts = ["the thing in there", "Héllo  wörld 🙂"]
        encoded, _ = reference(model, encode=prompts)
        for prompt, ids in zip(prompts, encoded):
            check(ids[0] == BOS, f"the reference adds BOS: {ids}")
            rc, o, e = tt.run(["generate", model, "--prompt-ids", ",".join(map(str, ids)),
                               "--max-new-tokens", "12"])
            check(rc == 0, "--prompt-ids" + e)
            answer = [int(x) for x in o.strip().split(",")]
            if EOS in answer:
                answer = answer[:answer.index(EOS) + 1]
            shown = [i for i in answer if i < 302 and i not in (BOS, EOS)]
            want = reference(model, decode=[shown])[1][0] if shown else ""
            rc, got, e = generate(model, "--prompt", prompt, "--max-new-tokens", "12")
            check(rc == 0, "--prompt: " + e)
            check(got.decode(errors="replace") == want + "\n",
                  f"{prompt!r}: printed {got!r}, the reference decodes {want!r} of {answer}")
            print(f"{prompt!r} -> ids {ids} -> answer {answer} -> {want!r}")
        # --tokenizer: a directory without one takes the given tokenizer.
        bare = hf_model(os.path.join(tmp, "bare"), 320)
        rc, got2, e = generate(bare, "--prompt", prompts[1], "--max-new-tokens", "12",
                               "--tokenizer", os.path.join(model, "tokenizer.json"))
        check(rc == 0 and got2 == got, f"--tokenizer: {got2!r} vs {got!r} {e}")
        # The tokenizer's EOS ends the answer: a final norm of zeros makes every logit 0, so
        # greedy decoding picks id 0, which tokenizer_config.json names the EOS.
        stops = os.path.join(tmp, "stops")
        shutil.copytree(model, stops)
        cfg = hf.llama_config(V=320, C=32, L=1, H=2, KV=1, F=64, max_pos=64)
        w = hf.random_weights(cfg, seed=5)
        w["model.norm.weight"][:] = 0
        hf.write_llama_dir(stops, cfg, w)
        with open(os.path.join(stops, "tokenizer_config.json"), "w") as f:
            json.dump({"eos_token": bytes_to_unicode()[0]}, f)
        rc, o, e = tt.run(["generate", stops, "--prompt-ids", "300,104", "--max-new-tokens", "5"])
        check(rc == 0 and o == "0,0,0,0,0\n", f"--prompt-ids does not stop: {o!r} {e}")
        rc, got3, e = generate(stops, "--prompt", "h", "--max-new-tokens", "5")
        check(rc == 0 and got3 == b"\n" and "2 prompt + 1 new tokens" in e,
              f"EOS ends the answer, unprinted: {got3!r} {e}")
        # A tokenizer with more tokens than the model's vocabulary.
        small = hf_model(os.path.join(tmp, "small"), 290)
        rc, o, e = generate(small, "--prompt", "hi", "--tokenizer", model)
        one_error(rc, "", e, "302 tokens", "290", "tokenizer.json")
        text = write_text(os.path.join(tmp, "my.txt"))
        rc, o, e = tt.run(train_args(tmp, small, "run", f"data.path={text}",
                                     f"model.tokenizer={model}"))
        one_error(rc, o, e, "302 tokens", "290")


def losses(run_dir):
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    return [(r["step"], r["loss"]) for r in rows if "loss" in r and "step" in r]


def tokenize(*args):
    p = subprocess.run([tt.KKTRAIN, "tokenize", *args], capture_output=True, text=True)
    check(p.returncode == 0, f"kktrain tokenize {args}: {p.stderr}")


def same_file(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def case_train_text_tokenizer():
    with tempfile.TemporaryDirectory(prefix="kktrain_text_") as tmp:
        model = hf_model(os.path.join(tmp, "llama"), 320, tokenizer=True)
        text = write_text(os.path.join(tmp, "my.txt"))
        ref = os.path.join(tmp, "ref")
        os.makedirs(ref)
        tokenize("--tokenizer", model, text, "--out", os.path.join(ref, "t"))
        steps = ["train.max_steps=2"]
        args = train_args(tmp, model, "run", f"data.path={text}", *steps)
        rc, o, e = tt.run(args)
        check(rc == 0, "training on text through the tokenizer: " + tt.describe(args, rc, o, e))
        made = os.path.join(tmp, "run", "tokens", "data_000000.bin")
        check(same_file(made, os.path.join(ref, "t_000000.bin")),
              "the run's token shard differs from kktrain tokenize's")
        args = train_args(tmp, model, "shards", f"data.path={os.path.join(ref, 't_000000.bin')}",
                          *steps)
        rc, o, e = tt.run(args)
        check(rc == 0, "training on the shard: " + e)
        a, b = losses(os.path.join(tmp, "run")), losses(os.path.join(tmp, "shards"))
        check(a == b and len(a) == 2, f"losses on text {a} and on its shard {b} differ")
        print(f"text and its kktrain tokenize shard: losses {a}")
        # A resume (same output_dir, more steps) reuses the shards.
        args = [x for x in train_args(tmp, model, "run", f"data.path={text}")
                if x != "checkpoint.resume=none"] + ["train.max_steps=3"]
        rc, o, e = tt.run(args)
        check(rc == 0 and "reused" in e and "resumed" in e, "resume: " + e)
        # 2 ranks read the shards rank 0 made.
        mpi = shutil.which("mpirun")
        if mpi:
            cmd = [mpi, "--oversubscribe", "-np", "2"] + (
                ["--allow-run-as-root"] if os.geteuid() == 0 else [])
            args = train_args(tmp, model, "two", f"data.path={text}", "data.global_batch_size=4")
            p = subprocess.run(cmd + [tt.KKTRAIN] + args, capture_output=True, text=True,
                               timeout=120)
            check(p.returncode == 0, "2 ranks: " + p.stderr)
            check(same_file(os.path.join(tmp, "two", "tokens", "data_000000.bin"), made),
                  "2 ranks made other tokens")
        # jsonl documents, another key.
        docs = os.path.join(tmp, "docs.jsonl")
        with open(docs, "w", encoding="utf-8") as f:
            for i in range(30):
                f.write(json.dumps({"body": f"{i}: " + TEXT, "id": i}, ensure_ascii=False) + "\n")
        tokenize("--tokenizer", model, docs, "--jsonl-key", "body", "--out", os.path.join(ref, "j"))
        args = train_args(tmp, model, "jsonl", f"data.path={docs}", "data.format=jsonl",
                          "data.jsonl_key=body")
        rc, o, e = tt.run(args)
        check(rc == 0, "jsonl: " + e)
        check(same_file(os.path.join(tmp, "jsonl", "tokens", "data_000000.bin"),
                        os.path.join(ref, "j_000000.bin")), "jsonl tokens differ")
        # Refusals, one line each, nothing written.
        ids = write_tokens(os.path.join(tmp, "ids.u16"), 320)
        for extra, needles in (
                ([], ("embedded default corpus", "tokenizer")),
                ([f"data.path=[{text},{ids}]"], ("mixes text files and token files",)),
                ([f"data.path={text}", "data.format=jsonl"], ("does not end in .jsonl",)),
                ([f"data.path={docs}", "data.format=text"], ("ends in .jsonl",)),
                ([f"data.path={docs}", "data.jsonl_key=nokey"], (docs, "nokey"))):
            args = train_args(tmp, model, "refused", *extra)
            rc, o, e = tt.run(args)
            one_error(rc, o, e, *needles, where=tt.describe(args, rc, o, e))
            check(not os.path.exists(os.path.join(tmp, "refused", "tokens", "data_000000.bin")),
                  "a refused run left token shards")
        bytes_model = hf_model(os.path.join(tmp, "bytes"), 256)
        args = train_args(tmp, bytes_model, "refused", f"data.path={docs}", "data.format=jsonl")
        rc, o, e = tt.run(args)
        one_error(rc, o, e, "data.format: jsonl", "model.tokenizer")


if __name__ == "__main__":
    if len(sys.argv) == 5:
        NPM_DIR = sys.argv.pop()
    sys.exit(tt.run_case(globals(), __doc__))
