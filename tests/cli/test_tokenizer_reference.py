"""kktrain's tokenizer (text/tokenizer.hpp) against the reference implementations on a varied
corpus (tests/text/make_corpus.py): Llama 3 (byte-level BPE, ignore_merges), Llama 2 (BPE with
byte fallback) and Gemma 3 (262k vocabulary), the tokenizer.json files shipped in the npm
packages @lenml/tokenizer-{llama3,llama2,gemma3}.

usage: test_tokenizer_reference.py TOKENIZE_IDS KKTRAIN NPM_DIR WORK_DIR CASE
       (tests/cli/tokenizer_reference_tests.cmake, label "text"; exit 77: skip)

References (tests/text/reference_tokenize.js; versions pinned in tests/text/package.json):
@lenml's JavaScript (a port of transformers.js: the reference the issue names) and Hugging Face's
Rust `tokenizers` in its Node binding (what text/tokenizer.hpp promises to equal). They agree on
every document of the corpus but its divergent ones (characters the JavaScript regular expressions
class differently, make_corpus.DIVERGENT, for Llama 3): there kktrain must equal the Rust library,
and the JavaScript ids are printed as a note. kktrain's one known limit: its regular expressions
(PCRE2 10.42, Debian 12) class characters by Unicode 14.0, the references by Unicode 16, so the
documents of characters assigned in Unicode 15 and 16 (make_corpus "kktrain_limit") may differ
under Llama 3's regex: a difference there is printed as a note, and they stay out of the shards.

Cases (NAME: llama3, llama2, gemma3):
- ids_NAME: tests/text/tokenize_ids.cpp (kktrain::text) on every document: the ids of
  encode(text, add_special_tokens) equal the reference's; decode keeping and skipping special
  tokens equals the reference's decode; decode(encode(text)) skipping special tokens gives the
  text back wherever the reference's does (all documents but those with special tokens written
  in them). A failure names the document, the first differing position with the token strings
  on both sides, and where in the text it is.
- shards_NAME: `kktrain tokenize --tokenizer DIR DOC... --out PREFIX` with --no-eos and with the
  tokenizer_config.json's EOS equals, byte for byte, llm.c's format written here from the
  reference's ids (256-int32 header [magic, version, count]; uint16 ids with magic 20240520
  version 1 for vocabularies under 65536, else uint32 ids with magic 20240801 version 7, as
  llm.c's dev/data/data_common.py writes them).
The reference runs are cached in WORK_DIR/cache (by digest of corpus, script and pins): ids_ and
shards_ of one tokenizer share one node run. Skips (77) only when node or the pinned packages
are missing, with setup's reason (scripts/setup.sh --tests installs them).
"""

import json
import os
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "text"))
import make_corpus  # noqa: E402
import references  # noqa: E402

TOKENIZE_IDS = KKTRAIN = NPM = WORK = ""
MAX_REPORTED = 25  # failures printed in full; the rest are counted


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def corpus(case):
    """The corpus written for this case: (manifest entries, their paths, their texts)."""
    out = os.path.join(WORK, case, "corpus")
    make_corpus.write_docs(_fresh(out), make_corpus.documents(make_corpus.repo_root()))
    with open(os.path.join(out, "corpus.json"), encoding="utf-8") as f:
        docs = json.load(f)
    paths = [os.path.join(out, d["file"]) for d in docs]
    texts = []
    for p in paths:
        with open(p, encoding="utf-8", newline="") as f:
            texts.append(f.read())
    return docs, paths, texts


def _fresh(path):
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)
    return path


def setup(case, name):
    why = references.unavailable(NPM)
    if why:
        raise Skip(why)
    docs, paths, texts = corpus(case)
    ref = references.reference_ids(NPM, name, paths, os.path.join(WORK, "cache"))
    model = references.model_dir(NPM, name)
    vocab = references.Vocabulary(os.path.join(model, "tokenizer.json"))
    return docs, paths, texts, ref, model, vocab


def where_in_text(vocab, ids, i, text):
    """'near byte B (line L, col C): «...»' for the text before reference token i."""
    b = sum(len(vocab.surface(t)) for t in ids[:i])
    raw = text.encode("utf-8")
    b = min(b, len(raw))
    before = raw[:b].decode("utf-8", "replace")
    line, col = before.count("\n") + 1, len(before) - (before.rfind("\n") + 1) + 1
    ctx = raw[max(0, b - 30):b].decode("utf-8", "ignore") + "⟨here⟩" + \
        raw[b:b + 30].decode("utf-8", "ignore")  # characters cut at either end left out
    return f"near byte {b} (line {line}, col {col}): {ctx!r}"


def diff_ids(label, got, want, vocab, text, got_name="kktrain", want_name="reference"):
    """None when equal, else a readable report of the first differing position."""
    if got == want:
        return None
    i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    return (f"{label}: ids differ at position {i} ({got_name} {len(got)} ids, {want_name} "
            f"{len(want)}), {where_in_text(vocab, want, i, text)}\n"
            f"    {want_name + ':':10s} {vocab.show(want, i - 4, i + 6, i)}\n"
            f"    {got_name + ':':10s} {vocab.show(got, i - 4, i + 6, i)}")


def diff_text(label, got, want, what):
    if got == want:
        return None
    i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    return (f"{label}: {what} differs at character {i} (kktrain {len(got)} characters, "
            f"reference {len(want)}):\n    reference: {want[max(0, i - 30):i + 30]!r}\n"
            f"    kktrain:   {got[max(0, i - 30):i + 30]!r}")


def kktrain_ids(model, paths):
    p = subprocess.run([TOKENIZE_IDS, model, *paths], capture_output=True, text=True,
                       timeout=300)
    if p.returncode != 0:
        raise Failure(f"tokenize_ids exited {p.returncode}: {p.stderr.strip()[-2000:]}")
    out = {}
    for line in p.stdout.split("\n")[:-1]:
        d = json.loads(line)
        out[d.pop("file")] = d
    return out


def check_references(name, doc, r, vocab, text, failures, notes):
    """The two references agree (ids and decodes) on common documents and differ on the ids of
    documented ones."""
    label = f"{name} {doc['file']}"
    d = diff_ids(label, r["lenml"]["ids"], r["hf"]["ids"], vocab, text, "lenml", "hf")
    if name in doc["divergent"]:
        if d is None:
            failures.append(f"{label}: the references now agree on a document make_corpus.py "
                            "lists as divergent: move it to the common ones")
        else:
            notes.append(f"known divergence ({doc['note']}): {d}")
    elif d is not None and name in doc.get("kktrain_limit", []):
        # Characters of Unicode 15 and 16: the JavaScript reference's classes follow Node's ICU
        # (Debian 12's Node 18: Unicode 15), the Rust library's its own tables.
        notes.append(f"the references' Unicode versions differ ({doc['note'].strip()}): {d}")
    elif d is not None:
        failures.append("the references disagree (classify the document as divergent in "
                        f"make_corpus.py, with the reason): {d}")
    else:
        for key in ("decoded", "decoded_skip"):
            if r["lenml"][key] != r["hf"][key]:
                failures.append(f"{label}: the references' {key} differ: lenml "
                                f"{r['lenml'][key][:200]!r}, hf {r['hf'][key][:200]!r}")


def case_ids(name):
    docs, paths, texts, ref, model, vocab = setup("ids_" + name, name)
    kk = kktrain_ids(model, paths)
    failures, notes, errors, exact = [], [], {}, 0
    for doc, path, text in zip(docs, paths, texts):
        r, k, label = ref[path], kk[path], f"{name} {doc['file']}"
        check_references(name, doc, r, vocab, text, failures, notes)
        want = r["hf"]
        exact += want["decoded_skip"] == text
        if "error" in k:
            errors.setdefault(k["error"], []).append(doc["file"])
            continue
        if name in doc.get("kktrain_limit", []):
            d = diff_ids(label, k["ids"], want["ids"], vocab, text)
            if d:
                notes.append("kktrain's known limit (PCRE2 10.42 classes characters by Unicode "
                             f"14.0; the references by Unicode 16): {d}")
                continue
        failures += filter(None, [
            diff_ids(label, k["ids"], want["ids"], vocab, text),
            diff_text(label, k["decoded"], want["decoded"], "decode (special tokens kept)"),
            diff_text(label, k["decoded_skip"], want["decoded_skip"],
                      "decode (special tokens skipped)")])
        if want["decoded_skip"] == text and k["decoded_skip"] != text:
            failures.append(diff_text(label, k["decoded_skip"], text,
                                      "decode(encode(text)) against the text"))
    for err, files in errors.items():
        failures.insert(0, f"{name}: kktrain failed on {len(files)} document(s) "
                           f"({', '.join(files[:4])}{' ...' if len(files) > 4 else ''}): {err}")
    for n in notes:
        print("note: " + n)
    ids = sum(len(ref[p]["hf"]["ids"]) for p in paths)
    print(f"{name}: {len(docs)} documents, {ids} reference ids, {sum(map(len, texts))} "
          f"characters; decode(encode(text)) == text on {exact} (as the reference; the others "
          "hold special tokens)")
    report(failures)


def report(failures):
    if not failures:
        return
    shown = "\n".join(failures[:MAX_REPORTED])
    more = len(failures) - MAX_REPORTED
    raise Failure(f"{len(failures)} mismatch(es):\n{shown}" +
                  (f"\n... and {more} more" if more > 0 else ""))


def llmc_shard(ids, vocab_size):
    """llm.c's .bin: 256 int32 [magic, version, count, 0...] then the ids."""
    magic, version, fmt = (20240520, 1, "H") if vocab_size < 65536 else (20240801, 7, "I")
    header = struct.pack("<256i", magic, version, len(ids), *([0] * 253))
    return header + struct.pack(f"<{len(ids)}{fmt}", *ids)


def compare_shard(label, got, want, docs, doc_ids, vocab, texts):
    if got == want:
        return None
    header = f"header [magic, version, count] {list(struct.unpack('<3i', got[:12]))}, " \
        f"expected {list(struct.unpack('<3i', want[:12]))}" if len(got) >= 1024 else "no header"
    if len(got) < 1024 or got[:8] != want[:8] or got[12:1024] != want[12:1024]:
        return f"{label}: {header}"
    width = 2 if struct.unpack("<i", want[:4])[0] == 20240520 else 4
    fmt = "<" + ("H" if width == 2 else "I")
    g = [x[0] for x in struct.iter_unpack(fmt, got[1024:len(got) - (len(got) - 1024) % width])]
    w = [x[0] for x in struct.iter_unpack(fmt, want[1024:])]
    i = next((k for k, (a, b) in enumerate(zip(g, w)) if a != b), min(len(g), len(w)))
    head = f"{label}: {header}; first differing id at {i}"
    show = (f"\n    expected: {vocab.show(w, i - 4, i + 6, i)}"
            f"\n    kktrain:  {vocab.show(g, i - 4, i + 6, i)}")
    start = 0
    for doc, ids, text in zip(docs, doc_ids, texts):  # the document holding position i
        if i < start + len(ids):
            return (f"{head}, position {i - start} of {doc['file']} "
                    f"({where_in_text(vocab, ids, i - start, text)}){show}")
        start += len(ids)
    return f"{head}, after the last document's ids{show}"


def case_shards(name):
    docs, paths, texts, ref, model, vocab = setup("shards_" + name, name)
    keep = [i for i, d in enumerate(docs) if name not in d.get("kktrain_limit", [])]
    docs, paths, texts = ([x[i] for i in keep] for x in (docs, paths, texts))
    meta = ref[None]  # tokenizer_config.json's eos_token, its id and the vocabulary's size
    eos, vocab_size = meta["eos_id"], meta["vocab_size"]
    print(f"{name}: eos {meta['eos_token']!r} = {eos}, vocabulary of {vocab_size} ids")
    out_dir = _fresh(os.path.join(WORK, "shards_" + name, "out"))
    failures = []
    for mode, extra, tail in (("no_eos", ["--no-eos"], []), ("eos", [], [eos])):
        prefix = os.path.join(out_dir, mode)
        args = [KKTRAIN, "tokenize", "--tokenizer", model, *paths, "--out", prefix, *extra]
        p = subprocess.run(args, capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            raise Failure(f"kktrain tokenize ({mode}) exited {p.returncode}: "
                          f"{p.stderr.strip()[-2000:]}")
        written = sorted(f for f in os.listdir(out_dir) if f.startswith(mode + "_"))
        if written != [mode + "_000000.bin"]:
            failures.append(f"{name} {mode}: wrote {written}, expected one shard "
                            f"{mode}_000000.bin")
            continue
        doc_ids = [ref[p]["hf"]["ids"] + tail for p in paths]
        want = llmc_shard([t for ids in doc_ids for t in ids], vocab_size)
        with open(os.path.join(out_dir, written[0]), "rb") as f:
            got = f.read()
        failures.append(compare_shard(f"{name} {mode}", got, want, docs, doc_ids, vocab, texts))
        print(f"{name} {mode}: {len(want)} bytes expected, {len(got)} written")
    report([f for f in failures if f])


def main():
    global TOKENIZE_IDS, KKTRAIN, NPM, WORK
    if len(sys.argv) != 6:
        print(__doc__)
        return 2
    TOKENIZE_IDS, KKTRAIN, NPM, WORK, case = sys.argv[1:]
    kind, _, name = case.partition("_")
    fn = {"ids": case_ids, "shards": case_shards}.get(kind)
    if fn is None or name not in references.TOKENIZERS:
        print(f"unknown case {case!r}")
        return 2
    try:
        fn(name)
    except Skip as e:
        print(f"skip {case}: {e}")
        return 77
    except Failure as e:
        print(f"FAIL {case}: {e}")
        return 1
    print(f"ok {case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
