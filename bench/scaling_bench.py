#!/usr/bin/env python3
"""Sharded data-parallel scaling: `kktrain train` at 1 and 2 ranks (1 thread each) on the same
global batch, and what the ranks exchange.

For each rank count, reduce dtype (fp32, bf16), collective mode (blocking, or non-blocking
reduce-scatters completed while the next unit's backward runs: distributed.nonblocking_collectives)
and, on 2 ranks, who runs the reductions (distributed.collectives: kktrain's ring, through a
shared-memory window on one node, or the MPI library's: the before and after of kktrain's ring)
it runs a short training job, alternating the configurations for several rounds, and reads
metrics.jsonl: tokens/s (median over the steps after the first), the payload bytes each rank sent
per step (comm_bytes: all-gathers in the compute dtype plus reduce-scatters in the reduce dtype,
counted as a ring algorithm sends them), the fraction of the step spent inside collectives
(comm_ms / ms_per_step) and the host synchronizations a step (host_syncs; collective waits apart).
Prints medians over rounds and the speedup of 2 ranks over 1. --before BUILD runs a second build
(an earlier commit) in the same rounds, blocking only, and prints its tokens/s beside.

    bench/scaling_bench.py [--build build] [--before BUILD] [--rounds 3] [--steps 6] [--small]
                           [--collectives kktrain,mpi]

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


def run(build, ranks, reduce_dtype, nonblocking, collectives, steps, small, out_dir):
    kk = os.path.join(build, "kktrain")
    cmd = [kk, "train", os.path.join(ROOT, "inputs", "default.yaml"), *shape_overrides(small),
           f"train.max_steps={steps}", "train.log_every=1", "train.val_every=0",
           "train.progress=off", f"distributed.mp_policy.reduce_dtype={reduce_dtype}",
           f"train.output_dir={out_dir}"]
    if nonblocking:
        cmd.append("distributed.nonblocking_collectives=true")
    if collectives != "auto":
        cmd.append(f"distributed.collectives={collectives}")
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
    syncs = statistics.median(r.get("host_syncs", float("nan")) for r in rows)
    waits = statistics.median(r.get("host_syncs_by_cause", {}).get("collective", float("nan"))
                              for r in rows)
    return tps, comm, frac, peak, syncs, waits


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--small", action="store_true", help="a tiny shape (smoke test)")
    p.add_argument("--before", help="an earlier build to run beside (blocking configurations)")
    p.add_argument("--collectives", default="kktrain,mpi",
                   help="distributed.collectives values to run on 2 ranks (comma-separated)")
    a = p.parse_args()
    colls = a.collectives.split(",")
    if shutil.which("mpirun") is None:
        print("mpirun not found")
        return 2
    configs = [(1, "float32", False, "auto")]
    configs += [(2, red, nb, c) for red in ("float32", "bfloat16") for nb in (False, True)
                for c in colls]
    builds = {"this": a.build}
    if a.before:
        builds["before"] = a.before
    runs = [(b, c) for c in configs for b in builds
            if b == "this" or (not c[2] and c[3] in ("auto", colls[0]))]
    results = {k: [] for k in runs}
    tmp = tempfile.mkdtemp(prefix="kktrain_scaling_")
    try:
        for r in range(a.rounds):
            for b, (ranks, red, nb, c) in runs:
                out = os.path.join(tmp, f"{b}_{ranks}_{red}_{nb}_{c}_{r}")
                # an earlier build may not know distributed.collectives: it runs its default
                results[(b, (ranks, red, nb, c))].append(
                    run(builds[b], ranks, red, nb, c if b == "this" else "auto", a.steps, a.small,
                        out))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("model:", " ".join(shape_overrides(a.small)), "| bf16 compute, 1 thread per rank")
    print(f"{'build':>6} {'ranks':>5} {'reduce':>9} {'mode':>9} {'reductions':>10} {'tok/s':>9} "
          f"{'speedup':>8} {'comm MB/step/rank':>18} {'comm % of step':>15} "
          f"{'host syncs':>11} {'coll. waits':>12} {'peak RSS MiB':>13}")
    med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
    base = med(results[("this", (1, "float32", False, "auto"))], 0)
    for b, (ranks, red, nb, c) in runs:
        xs = results[(b, (ranks, red, nb, c))]
        tps = med(xs, 0)
        mode = "non-block" if nb else "blocking"
        who = c if b == "this" and ranks > 1 else "-"
        print(f"{b:>6} {ranks:>5} {red:>9} {mode:>9} {who:>10} {tps:>9.1f} {tps / base:>7.2f}x "
              f"{med(xs, 1) / 1e6:>18.2f} {med(xs, 2):>14.1%} {med(xs, 4):>11.0f} "
              f"{med(xs, 5):>12.0f} {med(xs, 3) / 2**20:>13.1f}", flush=True)
    print("reductions = distributed.collectives (kktrain: its ring, through a shared window on one "
          "node; mpi: "
          "MPI_Reduce_scatter_block); speedup = tokens/s over this build's 1-rank median; comm MB = payload each rank sends "
          "per step (ring volume); host syncs = global host synchronizations a step (nan: a build "
          "without the column); coll. waits = host waits for buffer collectives; peak RSS of the "
          "largest rank; medians over rounds.")


if __name__ == "__main__":
    sys.exit(main())
