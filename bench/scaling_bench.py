#!/usr/bin/env python3
"""Sharded data-parallel scaling: `kktrain train` at 1 and 2 ranks (1 thread each) on the same
global batch, and what the ranks exchange.

For each rank count and reduce dtype (fp32, bf16) it runs a short training job, alternating the
configurations for several rounds, and reads metrics.jsonl: tokens/s (median over the steps after
the first), the payload bytes each rank sent per step (comm_bytes: all-gathers in the compute
dtype plus reduce-scatters in the reduce dtype, counted as a ring algorithm sends them) and the
fraction of the step spent inside collectives (comm_ms / ms_per_step). Prints medians over
rounds and the speedup of 2 ranks over 1.

    bench/scaling_bench.py [--build build] [--rounds 3] [--steps 6] [--small]

The model is d=384, 6 layers, 6 heads, F=1024, vocab 256, T=256, global batch 8 in micro-batches
of 4 (two per step on one rank, one per rank on two), bf16 compute and fp32 storage (pattern B).
There is no peer here: Debian's PyTorch 1.13 has no FSDP2 (fully_shard) to compare with.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")


def shape_overrides(small):
    if small:
        m = dict(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=4, intermediate_size=160)
        d = dict(seq_len=32, micro_batch_size=2, global_batch_size=4)
    else:
        m = dict(hidden_size=384, num_layers=6, num_heads=6, num_kv_heads=6, intermediate_size=1024)
        d = dict(seq_len=256, micro_batch_size=4, global_batch_size=8)
    out = [f"model.{k}={v}" for k, v in m.items()] + [f"data.{k}={v}" for k, v in d.items()]
    return out + ["model.vocab_size=256", "model.max_seq_len=256", "model.dtype=float32"]


def run(build, ranks, reduce_dtype, steps, small, out_dir):
    kk = os.path.join(build, "kktrain")
    cmd = [kk, "train", os.path.join(ROOT, "inputs", "default.yaml"), *shape_overrides(small),
           f"train.max_steps={steps}", "train.log_every=1", "train.val_every=0",
           "train.progress=off", f"distributed.mp_policy.reduce_dtype={reduce_dtype}",
           f"train.output_dir={out_dir}"]
    if ranks > 1:
        mpirun = ["mpirun", "-np", str(ranks), "--oversubscribe"]
        if os.geteuid() == 0:
            mpirun.append("--allow-run-as-root")
        cmd = mpirun + cmd
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, timeout=1800)
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f if '"loss"' in line]
    rows = rows[1:] or rows  # the first step pays for allocations
    tps = statistics.median(r["tokens_per_s"] for r in rows)
    comm = statistics.median(r.get("comm_bytes", 0.0) for r in rows)
    frac = statistics.median(r.get("comm_ms", 0.0) / r["ms_per_step"] for r in rows)
    peak = rows[-1]["peak_rss_bytes"]
    return tps, comm, frac, peak


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--small", action="store_true", help="a tiny shape (smoke test)")
    a = p.parse_args()
    if shutil.which("mpirun") is None:
        print("mpirun not found")
        return 2
    configs = [(1, "float32"), (2, "float32"), (2, "bfloat16")]
    results = {c: [] for c in configs}
    tmp = tempfile.mkdtemp(prefix="kktrain_scaling_")
    try:
        for r in range(a.rounds):
            for ranks, red in configs:
                out = os.path.join(tmp, f"{ranks}_{red}_{r}")
                results[(ranks, red)].append(run(a.build, ranks, red, a.steps, a.small, out))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("model:", " ".join(shape_overrides(a.small)), "| bf16 compute, 1 thread per rank")
    print(f"{'ranks':>5} {'reduce':>9} {'tok/s':>9} {'speedup':>8} {'comm MB/step/rank':>18} "
          f"{'comm % of step':>15} {'peak RSS MiB':>13}")
    base = statistics.median(x[0] for x in results[(1, "float32")])
    for ranks, red in configs:
        xs = results[(ranks, red)]
        tps = statistics.median(x[0] for x in xs)
        comm = statistics.median(x[1] for x in xs) / 1e6
        frac = statistics.median(x[2] for x in xs)
        peak = statistics.median(x[3] for x in xs) / 2**20
        print(f"{ranks:>5} {red:>9} {tps:>9.1f} {tps / base:>7.2f}x {comm:>18.2f} "
              f"{frac:>14.1%} {peak:>13.1f}", flush=True)
    print("speedup = tokens/s over the 1-rank median; comm MB = payload each rank sends per step "
          "(ring volume); peak RSS of the largest rank; medians over rounds.")


if __name__ == "__main__":
    sys.exit(main())
