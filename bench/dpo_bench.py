#!/usr/bin/env python3
"""Preference training: DPO steps against SFT steps on the same tokens, and DPO with each pair's
prompt held once (data.share_prompt) against each side whole, in alternating rounds, medians;
the reference pass's time, and the memory a held reference model would add.

    bench/dpo_bench.py [--kktrain build/kktrain] [--pairs 400] [--rounds 3] [--threads 2]

The data: --pairs pairs made from inputs/chat_example.jsonl's conversations (seeded): the prompt
is 0 to 3 whole conversations then a user question, the chosen reply the question's own answer,
the rejected one another conversation's answer, so prompts run 20..500 tokens and replies
10..100. The SFT run trains on the same sides as chat examples (each pair's prompt + chosen and
prompt + rejected, two conversations), so every run covers the same side tokens. All through
inputs/chat_tokenizer at seq_len 1024, packed, on the quick start's shape (C 128, L 4, H 4, KV 2,
F 344, vocab 256, fp32 weights, bf16 compute), full fine-tuning with AdamW, one epoch, global
batch 16 rows in micro-batches of 8.

Per run: the wall time of the epoch (the median step time x the steps: the start's rendering and
reference pass left out), the side tokens (both sides whole, the SFT cache's count) per second of
it, the tokens the rows hold (the cache's: a shared prompt counted once) and the peak RSS of the
steps. DPO's reference pass is timed from its log line. The memory of a run holding a reference
model is not measured: it is computed as the DPO run's peak plus one more copy of the weights in
the compute dtype (what a frozen reference needs beside the trained model; its forward reuses the
trained model's activation buffers), and said so.
"""

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def make_data(pref_path, sft_path, n, seed):
    with open(os.path.join(ROOT, "inputs", "chat_example.jsonl")) as f:
        convs = [json.loads(line)["messages"] for line in f if line.strip()]
    rng = random.Random(seed)
    with open(pref_path, "w") as fp, open(sft_path, "w") as fs:
        for _ in range(n):
            last, other = rng.sample(convs, 2)
            prompt = []
            for c in rng.sample(convs, rng.randint(0, 3)):
                prompt += [m for m in c if m["role"] != "system" or not prompt]
            prompt += [m for m in last[:-1] if m["role"] != "system" or not prompt]
            chosen, rejected = [last[-1]], [other[-1]]
            fp.write(json.dumps({"prompt": prompt, "chosen": chosen, "rejected": rejected}) + "\n")
            fs.write(json.dumps({"messages": prompt + chosen}) + "\n")
            fs.write(json.dumps({"messages": prompt + rejected}) + "\n")


def common(args, data, out):
    return [args.kktrain, "train", os.path.join(ROOT, "inputs", "default.yaml"),
            f"model.tokenizer={os.path.join(ROOT, 'inputs', 'chat_tokenizer')}",
            f"data.path={data}", "data.packing=true", "data.seq_len=1024",
            "model.max_seq_len=1024", "data.truncation=drop", "data.micro_batch_size=8",
            "data.global_batch_size=16", "data.val_fraction=0", "train.epochs=1",
            "train.log_every=1", "train.val_every=0", "train.progress=off",
            "checkpoint.resume=none", f"train.output_dir={out}"]


def run(args, tmp, data, kind, rnd):
    out = os.path.join(tmp, f"{kind}_{rnd}")
    cmd = common(args, data, out)
    cmd += {"dpo_shared": ["data.format=preference", "train.objective=dpo"],
            "dpo_separate": ["data.format=preference", "train.objective=dpo",
                             "data.share_prompt=false"],
            "sft": ["data.format=chat"]}[kind]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"kktrain failed:\n{p.stderr[-3000:]}")
    rows = [json.loads(x) for x in open(os.path.join(out, "metrics.jsonl"))]
    rows = [r for r in rows if "loss" in r and not r.get("skipped")]
    with open(os.path.join(out, "examples", "manifest.json")) as f:
        summary = json.load(f)["summary"]
    step_ms = statistics.median(r["ms_per_step"] for r in rows[1:])
    ref = re.search(r"reference log-probabilities of \d+ \+ \d+ pairs computed in ([\d.]+) s",
                    p.stderr)
    params = re.search(r"training (\d+) parameters", p.stderr)
    return {"tokens": summary["tokens"], "steps": len(rows), "step_ms": step_ms,
            "epoch_s": step_ms * len(rows) / 1e3,
            "peak_rss": max(r["peak_rss_bytes"] for r in rows),
            "ref_s": float(ref.group(1)) if ref else None,
            "params": int(params.group(1)) if params else 0}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kktrain", default=os.path.join(ROOT, "build", "kktrain"))
    ap.add_argument("--pairs", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    kinds = ("dpo_shared", "dpo_separate", "sft")
    with tempfile.TemporaryDirectory(prefix="kktrain_dpo_bench_") as tmp:
        pref, sft = os.path.join(tmp, "pairs.jsonl"), os.path.join(tmp, "sides.jsonl")
        make_data(pref, sft, args.pairs, args.seed)
        res = {k: [] for k in kinds}
        for rnd in range(args.rounds):
            for kind in kinds if rnd % 2 == 0 else kinds[::-1]:
                r = run(args, tmp, sft if kind == "sft" else pref, kind, rnd)
                res[kind].append(r)
                print(f"round {rnd} {kind}: {r['tokens']} tokens in rows, {r['steps']} steps of "
                      f"{r['step_ms']:.1f} ms, epoch {r['epoch_s']:.2f} s, peak RSS "
                      f"{r['peak_rss'] / 2**20:.1f} MiB" +
                      (f", reference pass {r['ref_s']:.2f} s" if r["ref_s"] is not None else ""))
    side_tokens = res["sft"][0]["tokens"]
    epoch = {k: statistics.median(x["epoch_s"] for x in v) for k, v in res.items()}
    print(f"\nmedians over {args.rounds} rounds, {args.threads} threads; {args.pairs} pairs, "
          f"{side_tokens} side tokens:")
    for k in kinds:
        print(f"  {k:13s} epoch {epoch[k]:6.2f} s, {side_tokens / epoch[k]:8.0f} side tok/s, "
              f"{res[k][0]['tokens']} tokens in rows")
    print(f"  DPO (separate sides) / SFT on the same tokens: time x{epoch['dpo_separate'] / epoch['sft']:.3f}")
    print(f"  shared prompts: {100 * (1 - res['dpo_shared'][0]['tokens'] / side_tokens):.1f}% fewer "
          f"tokens, epoch time x{epoch['dpo_shared'] / epoch['dpo_separate']:.3f} of separate sides")
    for k in ("dpo_shared", "dpo_separate"):
        ref_s = statistics.median(x["ref_s"] for x in res[k])
        print(f"  reference pass ({k}): {ref_s:.2f} s")
    d = res["dpo_shared"][0]
    held = d["peak_rss"] + d["params"] * 2  # one more copy of the weights, bf16 compute
    print(f"  peak RSS: DPO {d['peak_rss'] / 2**20:.1f} MiB, SFT "
          f"{res['sft'][0]['peak_rss'] / 2**20:.1f} MiB; with a held reference model "
          f"{held / 2**20:.1f} MiB (computed: + {d['params']} parameters x 2 bytes)")


if __name__ == "__main__":
    main()
