"""`kktrain tokenize` end to end (apps/cli/cmd_tokenize.cpp, io/token_shards.hpp).

usage: test_tokenize.py KKTRAIN INPUTS_DIR CASE    (tests/cli/tokenize_tests.cmake, label "tokenize")

The tokenizers are tiny tokenizer.json files written here (no npm needed): a byte-level BPE with
a few merges and a BOS template (GPT-2 / Llama 3 style) and a SentencePiece-style BPE with a
normalizer and byte_fallback (Llama 2 style). The expected shards come from a small Python writer
of llm.c's format fed with the ids `kktrain tokenize --ids` gives for each document, plus the EOS.

- shards_uint16: text and .jsonl inputs (--jsonl-key), --val-tokens and --shard-tokens: the shards
  equal the Python writer's byte for byte (headers: magic 20240520, version 1); a document longer
  than a shard gets one of its own; the same bytes with --threads 1 and 2 and with batches of one
  document; no temporaries left; --eos TOKEN and --no-eos.
- shards_uint32: a vocabulary of 65537 ids gives uint32 shards (magic 20240801, version 7), one of
  65536 uint16; a model trains on the uint32 shard through data.path.
- byte_fallback: the SentencePiece-style tokenizer's shards and --ids / --decode round trips.
- errors: each is one line, exit 2 (1 for a full disk), and no shard (nor temporary) left: a
  missing input, a directory input, a bad .jsonl line, a line without the key, a line nested
  10^5 deep, a line longer than 64 MiB (refused before it is held whole), invalid UTF-8 in a
  text file and in a .jsonl file (byte offset), an unknown --eos token, no EOS known, shards of
  an earlier run, a full disk (tmpfs, root only) after shards were completed.
- out_dirs: --out's missing directories (three levels) are made and the shards written there; a
  missing directory under a file is refused (exit 2) and an error found after the --out check
  (an unknown --eos token) makes no directory.
- signals: SIGINT / SIGTERM while shards are being written: the run stops, removes every shard of
  its own (and its temporaries), says so in one line, and exits 130 / 143; a second signal exits
  at once leaving no shard under a final name (temporaries only, which the next run with that
  --out removes).
- decode_nul: --decode prints every byte of the text, a NUL included.
- val_boundary: --val-tokens N when a document ends exactly at N tokens: the val shard holds
  exactly the documents up to it (the next starts the training shards).
- shard_boundary: --shard-tokens exactly filled by whole documents: the shard holds them all (the
  next document starts the next shard).
"""

import glob
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_train as tt  # noqa: E402
from test_train import check  # noqa: E402

BOS, EOS = "<|bos|>", "<|eos|>"

DOCS = [
    "the cat sat on the mat.\nThe end?",
    "héllo wörld — naïve café, 東京 and emoji 🎉🙂 here",
    "  leading spaces\ttabs\t\tand\n\n\nnewlines   ",
    "digits 12345 67 8, contractions: it's I'm we'll THEY'RE",
    "x",
    "the " * 120 + "long one",
]
JSONL = [
    {"content": "first line of the jsonl", "text": "the text key's"},
    {"content": "second\nwith a newline and \u00e9 and \U0001f600", "text": "ok"},
    {"text": "\u00e9t\u00e9 \"quoted\"", "content": "the third in the other in the"},
]


def run(*args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([tt.KKTRAIN, *args], capture_output=True, text=True, timeout=120, env=e)
    return p.returncode, p.stdout, tt.without_launch_warnings(p.stderr)


# ---- tokenizers written by hand --------------------------------------------------------------


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (the ByteLevel pre-tokenizer's alphabet)."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def added(content, i):
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def template(token, i):
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": token, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": token, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {token: {"id": token, "ids": [i], "tokens": [token]}}}


def bpe(vocab, merges, **kw):
    m = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
         "ignore_merges": False, "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]}
    m.update(kw)
    return m


def byte_level(vocab_size=None):
    """A byte-level BPE (GPT-2 regex, a few merges), BOS by its template; vocab_size pads the
    vocabulary with tokens no merge makes, the two special tokens last."""
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"),
              ("a", "t"), ("Ġ", "c"), ("Ġc", "at"), ("o", "n")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    if vocab_size:
        for k in range(vocab_size - 2 - len(vocab)):
            vocab[f"<pad{k}>"] = len(vocab)
    bos, eos = len(vocab), len(vocab) + 1
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [added(BOS, bos), added(EOS, eos)], "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                              "use_regex": True},
            "post_processor": template(BOS, bos),
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                        "use_regex": True},
            "model": bpe(vocab, merges)}, eos


def sentencepiece_like():
    """Prepend + Replace normalizer, no pre-tokenizer, BPE with byte_fallback (Llama 2 style)."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for c in "▁abcdefghijklmnopqrstuvwxyz.,é":
        vocab[c] = len(vocab)
    merges = [("▁", "t"), ("h", "e"), ("▁t", "he"), ("i", "n"), ("▁", "a"), ("e", "r")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": [added("<unk>", 0), added("<s>", 1), added("</s>", 2)],
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "▁"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
            "pre_tokenizer": None,
            "post_processor": template("<s>", 1),
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "model": bpe(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True)}, 2


def tokenizer_dir(tmp, name, tok, eos_token):
    """A model directory holding tokenizer.json and (eos_token not None) tokenizer_config.json."""
    d = os.path.join(tmp, name)
    os.makedirs(d)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    if eos_token is not None:
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump({"bos_token": None, "eos_token": eos_token}, f)
    return d


# ---- the expected shards ---------------------------------------------------------------------


def ids_of(tok, text):
    rc, out, err = run("tokenize", "--tokenizer", tok, "--ids", text)
    check(rc == 0 and out.endswith("\n"), f"--ids {text!r}: rc={rc}\n{out}{err}")
    return [int(x) for x in out.strip().split(",")] if out.strip() else []


def llmc_shard(ids, u32):
    header = struct.pack("<3i", 20240801 if u32 else 20240520, 7 if u32 else 1, len(ids))
    return header + bytes(4 * 253) + struct.pack(f"<{len(ids)}{'I' if u32 else 'H'}", *ids)


def expected_shards(docs_ids, shard_tokens, val_tokens, u32):
    """{file suffix: bytes}: whole documents into the val shard until it holds val_tokens, then
    training shards of at most shard_tokens (a longer document alone)."""
    val, shards, cur = [], [], []
    for d in docs_ids:
        if not d:
            continue
        if len(val) < val_tokens:
            val += d
            continue
        if cur and len(cur) + len(d) > shard_tokens:
            shards.append(cur)
            cur = []
        cur += d
    if cur:
        shards.append(cur)
    files = {f"_{k:06d}.bin": llmc_shard(s, u32) for k, s in enumerate(shards)}
    if val:
        files["_val_000000.bin"] = llmc_shard(val, u32)
    return files


def written(prefix):
    """{file suffix: bytes} of the shards of prefix; fails on a temporary left beside them."""
    d, base = os.path.split(prefix)
    left = [n for n in os.listdir(d) if ".tmp." in n or n.startswith(".kktrain-probe")]
    check(not left, f"temporaries left: {left}")
    out = {}
    for p in sorted(glob.glob(prefix + "_*.bin")):
        with open(p, "rb") as f:
            out[p[len(prefix):]] = f.read()
    return out


def write_inputs(tmp, docs=DOCS, rows=JSONL):
    paths = []
    for k, text in enumerate(docs):
        paths.append(os.path.join(tmp, f"doc{k}.txt"))
        with open(paths[-1], "w", encoding="utf-8") as f:
            f.write(text)
    paths.append(os.path.join(tmp, "rows.jsonl"))
    with open(paths[-1], "w", encoding="utf-8") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    return paths


def tokenize_ok(*args, env=None):
    rc, out, err = run("tokenize", *args, env=env)
    where = f"\n$ kktrain tokenize {' '.join(args)}\nrc={rc}\n{out}{err}"
    check(rc == 0, "expected exit 0" + where)
    check(out == "", "stdout must stay empty" + where)
    summary = [ln for ln in err.splitlines() if ln.startswith("kktrain: tokenize: ")]
    check(len(summary) == 1 and "peak RSS" in summary[0], "one summary line" + where)
    return summary[0]


def compare(got, want, what):
    check(sorted(got) == sorted(want), f"{what}: files {sorted(got)} != {sorted(want)}")
    for k in want:
        check(got[k] == want[k], f"{what}: {k} differs ({len(got[k])} vs {len(want[k])} bytes; "
                                 f"header {struct.unpack('<3i', got[k][:12])} vs "
                                 f"{struct.unpack('<3i', want[k][:12])})")


# ---- cases -----------------------------------------------------------------------------------


def case_shards_uint16():
    with tempfile.TemporaryDirectory(prefix="kktrain_tok_") as tmp:
        tok_json, eos = byte_level()
        tok = tokenizer_dir(tmp, "model", tok_json, EOS)
        inputs = write_inputs(tmp)
        docs = [ids_of(tok, t) + [eos] for t in DOCS + [r["content"] for r in JSONL]]
        longest = max(len(d) for d in docs)
        shard, val = 60, 40
        check(longest > shard, f"the long document ({longest} tokens) must exceed a shard")
        want = expected_shards(docs, shard, val, False)
        check(len(want) >= 4, f"too few shards to test splitting: {len(want)}")
        common = ["--tokenizer", tok, *inputs, "--jsonl-key", "content",
                  "--shard-tokens", str(shard), "--val-tokens", str(val)]
        for name, extra, env in (("t1", ["--threads", "1"], None),
                                 ("t2", ["--threads", "2"], None),
                                 ("t2_small_batches", ["--threads", "2", "--batch-bytes", "1"],
                                  None)):
            out = os.path.join(tmp, name, "corpus")
            os.makedirs(os.path.dirname(out))
            line = tokenize_ok(*common, "--out", out, *extra, env=env)
            compare(written(out), want, name)
            print(f"{name}: {line}")
        # --eos TOKEN (here the BOS) and --no-eos
        plain = [d[:-1] for d in docs]
        for name, flag, tail in (("eos_bos", ["--eos", BOS], [eos - 1]), ("no_eos", ["--no-eos"], [])):
            out = os.path.join(tmp, name, "corpus")
            os.makedirs(os.path.dirname(out))
            tokenize_ok(*common, "--out", out, *flag)
            compare(written(out), expected_shards([p + tail for p in plain], shard, val, False),
                    name)


def case_shards_uint32():
    with tempfile.TemporaryDirectory(prefix="kktrain_tok_") as tmp:
        texts, rows = DOCS[:2] + DOCS[-1:], JSONL[:1]  # loading 65k tokens takes 0.2 s a call
        inputs = write_inputs(tmp, texts, rows)
        for vocab, u32 in ((65536, False), (65537, True)):
            tok_json, eos = byte_level(vocab)
            tok = tokenizer_dir(tmp, f"model{vocab}", tok_json, EOS)
            docs = [ids_of(tok, t) + [eos] for t in texts + [r["text"] for r in rows]]
            check(eos == vocab - 1, f"EOS id {eos}")
            out = os.path.join(tmp, f"v{vocab}", "c")
            os.makedirs(os.path.dirname(out))
            tokenize_ok("--tokenizer", tok, *inputs, "--out", out)
            got = written(out)
            compare(got, expected_shards(docs, 10 ** 8, 0, u32), f"vocabulary {vocab}")
            magic = struct.unpack("<2i", got["_000000.bin"][:8])
            check(magic == ((20240801, 7) if u32 else (20240520, 1)), f"header {magic}")
        # a model trains on the uint32 shard (ids up to 65536)
        shard = out + "_000000.bin"
        t0 = time.time()
        r = tt.train(tmp, "run", tt.DEFAULT, f"data.path={shard}", "model.vocab_size=65537",
                     steps=2).ok()
        print(f"trained 2 steps on {shard} in {time.time() - t0:.1f} s")
        check(f"{shard} (llmc)" in r.err, "source line" + r.where)


def case_byte_fallback():
    with tempfile.TemporaryDirectory(prefix="kktrain_tok_") as tmp:
        tok_json, eos = sentencepiece_like()
        tok = tokenizer_dir(tmp, "model", tok_json, "</s>")
        inputs = write_inputs(tmp)
        texts = DOCS + [r["text"] for r in JSONL]
        docs = []
        for t in texts:
            ids = ids_of(tok, t)
            check(ids[0] == 1, f"no BOS <s> in {ids[:5]} for {t!r}")
            check(any(3 <= i <= 258 for i in ids) or t.isascii(), f"no byte fallback: {t!r}")
            rc, out, err = run("tokenize", "--tokenizer", tok, "--decode",
                               ",".join(map(str, ids[1:])))
            check(rc == 0 and out == t + "\n", f"--decode round trip of {t!r}: {out!r} {err}")
            docs.append(ids + [eos])
        out = os.path.join(tmp, "o", "c")
        os.makedirs(os.path.dirname(out))
        tokenize_ok("--tokenizer", tok, *inputs, "--out", out, "--shard-tokens", "100",
                    "--threads", "2")
        compare(written(out), expected_shards(docs, 100, 0, False), "byte fallback")

        # One document larger than a batch (1.5 MB): its pieces spread over 2 threads give the
        # bytes one thread writes.
        big = os.path.join(tmp, "big.txt")
        with open(big, "w", encoding="utf-8") as f:
            f.write("".join(texts) * (1500000 // len("".join(texts)) + 1))
        shards = {}
        for threads in ("1", "2"):
            out = os.path.join(tmp, "big" + threads, "c")
            os.makedirs(os.path.dirname(out))
            tokenize_ok("--tokenizer", tok, big, "--out", out, "--threads", threads,
                        "--batch-bytes", "1000")
            shards[threads] = written(out)
        compare(shards["2"], shards["1"], "one long document on 2 threads")


def case_memory_bounded():
    """Streaming: the peak RSS tokenizing 64 MB is that of 8 MB (within 24 MiB), batches of 1 MiB;
    bench/tokenize_bench.py --rss-gib measures it on several GiB."""
    with tempfile.TemporaryDirectory(prefix="kktrain_tok_") as tmp:
        tok_json, _ = byte_level()
        tok = tokenizer_dir(tmp, "model", tok_json, EOS)
        rss = {}
        for mb in (8, 64):
            corpus = os.path.join(tmp, f"c{mb}.jsonl")
            with open(corpus, "w", encoding="utf-8") as f:
                written_bytes, k = 0, 0
                while written_bytes < mb * 1000000:
                    line = json.dumps({"text": f"{k} " + " ".join(DOCS)}, ensure_ascii=False) + "\n"
                    f.write(line)
                    written_bytes += len(line.encode())
                    k += 1
            out = os.path.join(tmp, f"o{mb}", "c")
            os.makedirs(os.path.dirname(out))
            line = tokenize_ok("--tokenizer", tok, corpus, "--out", out, "--batch-bytes", "1048576",
                               "--shard-tokens", "4000000")
            rss[mb] = float(re.search(r"peak RSS ([0-9.]+) MiB", line).group(1))
            print(f"{mb} MB: {line}")
            shutil.rmtree(os.path.dirname(out))
            os.remove(corpus)
        check(rss[64] <= rss[8] + 24, f"peak RSS grows with the corpus: {rss}")


def shard_docs(path, u32=False):
    """The token count in the header of shard `path` and its ids."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<3i", data[:12])[2]
    return n, list(struct.unpack(f"<{n}{'I' if u32 else 'H'}", data[1024:]))


def boundary_docs(tmp):
    """A tokenizer, five text inputs and each one's ids (EOS included)."""
    tok_json, eos = byte_level()
    tok = tokenizer_dir(tmp, "model", tok_json, EOS)
    texts = DOCS[:5]
    inputs = write_inputs(tmp, texts, [])[:-1]  # the text files only
    docs = [ids_of(tok, t) + [eos] for t in texts]
    check(len({len(d) for d in docs}) > 1, f"document lengths {[len(d) for d in docs]}")
    return tok, inputs, docs


def case_val_boundary():
    with tempfile.TemporaryDirectory(prefix="kktrain_tok_") as tmp:
        tok, inputs, docs = boundary_docs(tmp)
        for k in (1, 2):
            n = sum(len(d) for d in docs[:k])  # a document ends exactly at n
            out = os.path.join(tmp, f"val{k}", "c")
            os.makedirs(os.path.dirname(out))
            tokenize_ok("--tokenizer", tok, *inputs, "--out", out, "--val-tokens", str(n))
            got_n, ids = shard_docs(out + "_val_000000.bin")
            check(got_n == n and ids == sum(docs[:k], []),
                  f"--val-tokens {n} (documents 0..{k - 1} end there): the val shard holds "
                  f"{got_n} tokens, expected exactly those {n}")
            _, train_ids = shard_docs(out + "_000000.bin")
            check(train_ids == sum(docs[k:], []), f"--val-tokens {n}: training shard "
                                                  f"{len(train_ids)} tokens")
            compare(written(out), expected_shards(docs, 10 ** 8, n, False), f"val {n}")
            print(f"--val-tokens {n}: the val shard holds documents 0..{k - 1} exactly")


def case_shard_boundary():
    with tempfile.TemporaryDirectory(prefix="kktrain_tok_") as tmp:
        tok, inputs, docs = boundary_docs(tmp)
        for k in (1, 2, 3):
            n = sum(len(d) for d in docs[:k])  # shard 0 exactly filled by documents 0..k-1
            out = os.path.join(tmp, f"shard{k}", "c")
            os.makedirs(os.path.dirname(out))
            tokenize_ok("--tokenizer", tok, *inputs, "--out", out, "--shard-tokens", str(n))
            got_n, ids = shard_docs(out + "_000000.bin")
            check(got_n == n and ids == sum(docs[:k], []),
                  f"--shard-tokens {n} (documents 0..{k - 1} fill it exactly): the first shard "
                  f"holds {got_n} tokens")
            compare(written(out), expected_shards(docs, n, 0, False), f"shard {n}")
            print(f"--shard-tokens {n}: shard 0 holds documents 0..{k - 1} exactly")


def case_decode_nul():
    with tempfile.TemporaryDirectory(prefix="kktrain_tok_") as tmp:
        tok_json, _ = byte_level()
        tok = tokenizer_dir(tmp, "model", tok_json, EOS)
        for ids, want in (("104,0,105", b"h\0i\n"), ("0", b"\0\n"), ("0,0,104", b"\0\0h\n"),
                          ("104,255,0", b"h\xef\xbf\xbd\0\n")):  # a lone 0xff: U+FFFD
            p = subprocess.run([tt.KKTRAIN, "tokenize", "--tokenizer", tok, "--decode", ids],
                               capture_output=True, timeout=60)
            check(p.returncode == 0 and p.stdout == want,
                  f"--decode {ids}: rc={p.returncode} stdout {p.stdout!r}, expected {want!r}\n"
                  f"{p.stderr.decode(errors='replace')}")
            print(f"--decode {ids}: {p.stdout!r}")


def big_corpus(tmp, mb):
    path = os.path.join(tmp, "big.jsonl")
    line = (json.dumps({"text": " ".join(DOCS)}, ensure_ascii=False) + "\n").encode()
    with open(path, "wb") as f:
        f.write(line * (mb * 1000000 // len(line) + 1))
    return path


def ours(d, base):
    return sorted(n for n in os.listdir(d) if n.startswith(base + "_") or
                  n.startswith("." + base + "_"))


def start_and_wait(args, d, base, files=3, timeout=60):
    """Starts kktrain tokenize; returns the process once `files` of its shards (final or
    temporary) exist."""
    p = subprocess.Popen([tt.KKTRAIN, "tokenize", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    while len(ours(d, base)) < files:
        if p.poll() is not None:
            out, err = p.communicate()
            raise tt.Failure(f"tokenize ended (rc={p.returncode}) before {files} shards were "
                             f"written; make the corpus bigger\n{err}")
        check(time.time() - t0 < timeout, f"no {files} shards after {timeout} s")
        time.sleep(0.02)
    return p


def case_signals():
    with tempfile.TemporaryDirectory(prefix="kktrain_tok_") as tmp:
        tok_json, _ = byte_level()
        tok = tokenizer_dir(tmp, "model", tok_json, EOS)
        corpus = big_corpus(tmp, 48)
        for sig in (signal.SIGINT, signal.SIGTERM):
            d = os.path.join(tmp, sig.name)
            os.makedirs(d)
            out = os.path.join(d, "c")
            args = ["--tokenizer", tok, corpus, "--out", out, "--shard-tokens", "20000",
                    "--batch-bytes", "65536", "--val-tokens", "1000"]
            p = start_and_wait(args, d, "c")
            seen = ours(d, "c")
            t0 = time.time()
            p.send_signal(sig)
            try:
                stdout, err = p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                raise tt.Failure(f"{sig.name}: still running 60 s after the signal")
            s = time.time() - t0
            where = (f"\n$ kktrain tokenize {' '.join(args)}\n{sig.name} after {seen}\n"
                     f"rc={p.returncode} ({s:.2f} s)\n{stdout}{err}")
            check(p.returncode == 128 + sig, f"{sig.name}: exit {p.returncode}, expected "
                                             f"{128 + sig}" + where)
            left = ours(d, "c") + [n for n in os.listdir(d) if ".tmp." in n]
            check(not left, f"{sig.name}: left {left[:5]} ({len(left)} files)" + where)
            lines = tt.startup_lines(err)
            check(len(lines) == 1 and sig.name in lines[0] and "removed" in lines[0],
                  f"{sig.name}: expected one line saying the run stopped and what it removed" +
                  where)
            print(f"{sig.name} ({s:.2f} s after it): {lines[0]}")
        # A second signal exits at once: never a shard under its final name; the next run with
        # that --out removes the temporaries (their process is gone).
        d = os.path.join(tmp, "twice")
        os.makedirs(d)
        out = os.path.join(d, "c")
        args = ["--tokenizer", tok, corpus, "--out", out, "--shard-tokens", "20000",
                "--batch-bytes", "65536"]
        p = start_and_wait(args, d, "c")
        p.send_signal(signal.SIGINT)
        p.send_signal(signal.SIGINT)
        stdout, err = p.communicate(timeout=60)
        check(p.returncode == 130, f"twice: exit {p.returncode}\n{err}")
        finals = [n for n in os.listdir(d) if n.startswith("c_")]
        check(not finals, f"twice: shards under their final names: {finals[:5]}\n{err}")
        small = os.path.join(tmp, "doc.txt")
        with open(small, "w") as f:
            f.write(DOCS[0])
        line = tokenize_ok("--tokenizer", tok, small, "--out", out)
        names = sorted(os.listdir(d))
        check(names == ["c_000000.bin"], f"after the next run: {names[:6]}")
        print(f"twice: exit 130, no final shard; the next run: {line}")


def expect_error(tmp, prefix, rc_want, needles, *args):
    rc, out, err = run("tokenize", *args)
    where = f"\n$ kktrain tokenize {' '.join(args)}\nrc={rc}\n{out}{err}"
    lines = tt.startup_lines(err)
    check(rc == rc_want and out == "", f"expected exit {rc_want}" + where)
    check(len(lines) == 1 and lines[0].startswith("kktrain: error: "), "one error line" + where)
    for n in needles:
        check(n in lines[0], f"the error should name {n!r}" + where)
    d = os.path.dirname(prefix)
    left = sorted(n for n in os.listdir(d) if n.startswith(os.path.basename(prefix) + "_")
                  or ".tmp." in n) if os.path.isdir(d) else []
    check(not left, f"left behind: {left}" + where)
    print("ok:", lines[0])


def case_errors():
    with tempfile.TemporaryDirectory(prefix="kktrain_tok_") as tmp:
        tok_json, _ = byte_level()
        tok = tokenizer_dir(tmp, "model", tok_json, EOS)
        bare = os.path.join(tokenizer_dir(tmp, "bare", tok_json, None), "tokenizer.json")
        out_dir = os.path.join(tmp, "out")
        os.makedirs(out_dir)
        out = os.path.join(out_dir, "c")
        good = write_inputs(tmp)
        # many shards complete before the bad input: all of them are removed again
        many = ["--tokenizer", tok, *good, "--shard-tokens", "20", "--batch-bytes", "1",
                "--out", out]

        def bad(name, data):
            p = os.path.join(tmp, name)
            with open(p, "wb") as f:
                f.write(data)
            return p

        missing = os.path.join(tmp, "missing.txt")
        expect_error(tmp, out, 2, ("input", missing), *many, missing)
        expect_error(tmp, out, 2, ("input", tmp, "directory"), *many, tmp)
        p = bad("notjson.jsonl", b'{"text": "ok"}\n\n{"text": broken}\n')
        expect_error(tmp, out, 2, (p + "':3", "not a JSON line"), *many, p)
        p = bad("nokey.jsonl", b'{"text": "ok"}\n{"body": "x"}\n')
        expect_error(tmp, out, 2, (p + "':2", "no key 'text'", "--jsonl-key"), *many, p)
        p = bad("deep.jsonl", b'{"text": "ok"}\n{"text": "x", "y": ' + b"[" * 100000 +
                b"]" * 100000 + b"}\n")
        expect_error(tmp, out, 2, (p + "':2", "nested deeper than 128"), *many, p)
        # refused once 64 MiB of the line are read, never held whole (nor tokenized: 30x its size)
        p = bad("long.jsonl", b'{"text": "ok"}\n{"text": "' + b"ab " * (22 << 20) + b'"}\n')
        expect_error(tmp, out, 2, (p + "':2", "longer than 64 MiB", "split the document"), *many, p)
        os.remove(p)
        p = bad("bad.txt", "héllo".encode() + b"\xff rest")
        expect_error(tmp, out, 2, (p, "invalid UTF-8 at byte 6"), *many, p)
        p = bad("bad.jsonl", b'{"text": "ok"}\n{"text": "ab\xc3("}\n')
        expect_error(tmp, out, 2, (p + "':2", "invalid UTF-8 at byte 27"), *many, p)
        expect_error(tmp, out, 2, ("--eos", "<nope>", "not a token"), *many, "--eos", "<nope>")
        expect_error(tmp, out, 2, (bare, "eos_token", "--eos TOKEN", "--no-eos"),
                     "--tokenizer", bare, *good, "--out", out)
        with open(out + "_000003.bin", "wb") as f:
            f.write(b"an earlier run")
        rc, _, err = run("tokenize", *many)
        check(rc == 2 and "_000003.bin' exists" in err and
              sorted(os.listdir(out_dir)) == ["c_000003.bin"], f"earlier shards: {rc} {err}")
        os.remove(out + "_000003.bin")
        if os.geteuid() != 0:
            print("skip the full disk: mounting a tmpfs needs root")
            return
        disk = os.path.join(tmp, "disk")
        os.makedirs(disk)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", disk],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"skip the full disk: cannot mount a tmpfs: {r.stderr.strip()}")
            return
        try:
            big = bad("big.txt", ("the cat in the hat " * 16000).encode())
            prefix = os.path.join(disk, "c")
            expect_error(tmp, prefix, 1, ("No space left on device", "no shard"),
                         "--tokenizer", tok, *good, big, "--shard-tokens", "200",
                         "--out", prefix)
        finally:
            subprocess.run(["umount", disk])


def case_out_dirs():
    with tempfile.TemporaryDirectory(prefix="kktrain_tok_") as tmp:
        tok_json, eos = byte_level()
        tok = tokenizer_dir(tmp, "model", tok_json, EOS)
        inputs = write_inputs(tmp, DOCS[:2], JSONL[:1])
        docs = [ids_of(tok, t) + [eos] for t in DOCS[:2] + [JSONL[0]["text"]]]
        out = os.path.join(tmp, "new", "deeper", "deepest", "c")
        line = tokenize_ok("--tokenizer", tok, *inputs, "--out", out)
        compare(written(out), expected_shards(docs, 10 ** 8, 0, False), "made directories")
        print(f"made {os.path.dirname(out)}: {line}")
        # a missing directory under a file cannot be made
        under_file = os.path.join(inputs[0], "sub", "c")
        expect_error(tmp, under_file, 2, ("--out", inputs[0], "is not a directory"),
                     "--tokenizer", tok, *inputs, "--out", under_file)
        # an error found once --out was checked: nothing made
        later = os.path.join(tmp, "never", "made", "c")
        expect_error(tmp, later, 2, ("--eos", "<nope>", "not a token"), "--tokenizer", tok,
                     *inputs, "--out", later, "--eos", "<nope>")
        check(not os.path.exists(os.path.join(tmp, "never")), "an error left 'never/' made")


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
