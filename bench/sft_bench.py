#!/usr/bin/env python3
"""Supervised fine-tuning: a packed run against the same run unpacked (one example a row,
padded), in alternating rounds, medians.

    bench/sft_bench.py [--kktrain build/kktrain] [--examples 1200] [--rounds 3] [--threads 2]

The data: --examples conversations made by joining 1 to 6 of inputs/chat_example.jsonl's
conversations (seeded), so their lengths spread over 40..600 tokens, through inputs/chat_tokenizer
(byte-level with special tokens) at seq_len 512 (longer ones dropped). The model: the quick start's
shape (C 128, L 4, H 4, KV 2, F 344, vocab 256, fp32 weights, bf16 compute), full fine-tuning with
AdamW, one epoch, global batch 16 rows in micro-batches of 8.

Per run: the rows an epoch takes, the share of their positions that are padding, the wall time of
the epoch (the median step time x the steps, so the start's tokenization and the first step's
allocations are left out), and the example tokens (not padding) trained per second. The ratio of
the two example-token rates is what packing buys: nearly the padding share it avoids, less what
packed rows cost (longer attention spans within a row).
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def make_data(path, n, seed):
    with open(os.path.join(ROOT, "inputs", "chat_example.jsonl")) as f:
        convs = [json.loads(line)["messages"] for line in f if line.strip()]
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(n):
            msgs = []
            for c in rng.sample(convs, rng.randint(1, 6)):
                msgs += [m for m in c if m["role"] != "system" or not msgs]
            f.write(json.dumps({"messages": msgs}) + "\n")


def run(args, tmp, data, packing, rnd):
    out = os.path.join(tmp, f"{'packed' if packing else 'unpacked'}_{rnd}")
    cmd = [args.kktrain, "train", os.path.join(ROOT, "inputs", "default.yaml"),
           f"model.tokenizer={os.path.join(ROOT, 'inputs', 'chat_tokenizer')}",
           f"data.path={data}", "data.format=chat", f"data.packing={str(packing).lower()}",
           "data.seq_len=512", "model.max_seq_len=512", "data.truncation=drop",
           "data.micro_batch_size=8", "data.global_batch_size=16", "data.val_fraction=0",
           "train.epochs=1", "train.log_every=1", "train.val_every=0", "train.progress=off",
           "checkpoint.resume=none", f"train.output_dir={out}"]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"kktrain failed:\n{p.stderr[-3000:]}")
    rows = [json.loads(x) for x in open(os.path.join(out, "metrics.jsonl"))]
    rows = [r for r in rows if "loss" in r and not r.get("skipped")]
    with open(os.path.join(out, "examples", "manifest.json")) as f:
        summary = json.load(f)["summary"]
    steps = len(rows)
    ms = statistics.median(r["ms_per_step"] for r in rows[1:] or rows)
    positions = steps * 16 * 512
    return {"steps": steps, "rows": steps * 16, "padding": 1 - summary["tokens"] / positions,
            "seconds": ms * steps / 1e3, "tokens": summary["tokens"],
            "examples": summary["examples"], "loss_tokens": summary["loss_tokens"],
            "example_tok_s": summary["tokens"] / (ms * steps / 1e3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kktrain", default=os.path.join(ROOT, "build", "kktrain"))
    ap.add_argument("--examples", type=int, default=1200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kktrain_sft_bench_") as tmp:
        data = os.path.join(tmp, "chat.jsonl")
        make_data(data, args.examples, args.seed)
        res = {True: [], False: []}
        for rnd in range(args.rounds):
            for packing in ((True, False) if rnd % 2 == 0 else (False, True)):
                res[packing].append(run(args, tmp, data, packing, rnd))
    first = res[True][0]
    print(f"{first['examples']} examples, {first['tokens']} tokens ({first['loss_tokens']} loss "
          f"tokens), seq_len 512, global batch 16 rows, {args.threads} threads, "
          f"{args.rounds} rounds (medians)")
    print("| run | rows an epoch | padding | epoch s | example tokens/s |")
    print("|---|---|---|---|---|")
    med = {}
    for packing in (False, True):
        r = res[packing]
        med[packing] = statistics.median(x["example_tok_s"] for x in r)
        print(f"| {'packed' if packing else 'unpacked'} | {r[0]['rows']} | "
              f"{100 * r[0]['padding']:.1f}% | {statistics.median(x['seconds'] for x in r):.2f} | "
              f"{med[packing]:.0f} |")
    avoided = 1 - res[True][0]["rows"] / res[False][0]["rows"]
    print(f"packed / unpacked example tokens/s: {med[True] / med[False]:.2f}; "
          f"rows (and padding positions) avoided: {100 * avoided:.1f}% of the unpacked rows")


if __name__ == "__main__":
    main()
