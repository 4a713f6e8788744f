#!/usr/bin/env python3
"""Mixture of experts: training tokens/s of an 8-expert top-2 model with kktrain at 1 and 2 ranks,
against the dense model of the same active parameters (one SwiGLU MLP of intermediate size
top_k x the experts') and against PyTorch running the same sparse model plainly (a loop over the
experts, bench/torch_moe.py), alternating rounds, medians.

kktrain's side is `kktrain train` (fp32 storage and compute, AdamW, steps after the first): its
metrics rows' tokens_per_s and, on 2 ranks, comm_bytes (all bytes a rank sent per step: FSDP's
all-gathers and reduce-scatters, and the token all-to-alls) and alltoall_bytes (the token
all-to-alls alone). The sparse model runs on 2 ranks with expert_parallel_size 1 (experts
FSDP-sharded) and 2 (each rank holds 4 experts, tokens exchanged). Each rank of a 2-rank run
trains its own micro-batch of the same size, so its tokens/s counts both ranks' tokens.

    bench/moe_bench.py [--build build] [--rounds 3] [--steps 6] [--small]
Needs Debian's /usr/bin/python3 (torch) for the peer; prints the load (uptime) before and after.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
PEER_PYTHON = "/usr/bin/python3"


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def kktrain(build, ranks, shape, moe, steps, tmp, ep=1):
    E, K, Fe = shape["experts"], shape["top_k"], shape["expert_ffn"]
    over = [f"model.hidden_size={shape['hidden']}", f"model.num_layers={shape['layers']}",
            f"model.num_heads={shape['heads']}", f"model.num_kv_heads={shape['heads']}",
            f"model.max_seq_len={shape['seq']}", f"data.seq_len={shape['seq']}",
            f"data.micro_batch_size={shape['batch']}",
            f"data.global_batch_size={shape['batch'] * ranks}",
            "model.dtype=float32", "distributed.mp_policy.param_dtype=float32",
            "model.tie_word_embeddings=false", f"train.max_steps={steps}", "train.log_every=1",
            "train.val_every=0", "train.progress=off"]
    if moe:
        over += [f"model.moe.num_experts={E}", f"model.moe.top_k={K}",
                 f"model.moe.intermediate_size={Fe}", f"model.intermediate_size={Fe}",
                 f"distributed.expert_parallel_size={ep}"]
    else:
        over += [f"model.intermediate_size={K * Fe}"]
    out = tempfile.mkdtemp(prefix="moe_bench_", dir=tmp)
    cmd = [os.path.join(build, "kktrain"), "train", os.path.join(ROOT, "inputs", "default.yaml"),
           *over, f"train.output_dir={out}"]
    if ranks > 1:
        cmd = ["mpirun", "-np", str(ranks), "--oversubscribe"] + (
            ["--allow-run-as-root"] if os.geteuid() == 0 else []) + cmd
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, timeout=1800)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(l) for l in f if '"tokens_per_s"' in l]
    rows = [r for r in rows if r["step"] > 1]  # the first step builds caches
    return (statistics.median(r["tokens_per_s"] for r in rows),
            statistics.median(r.get("comm_bytes", 0) for r in rows),
            statistics.median(r.get("alltoall_bytes", 0) for r in rows))


def torch_peer(shape, steps):
    args = [PEER_PYTHON, os.path.join(HERE, "torch_moe.py"), "--threads", "1", "--warmup", "1",
            "--iters", str(steps - 1)]
    for k in ("hidden", "layers", "heads", "experts", "top_k", "expert_ffn", "seq", "batch"):
        args += ["--" + k.replace("_", "-"), str(shape[k])]
    args += ["--kv-heads", str(shape["heads"])]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    out = subprocess.run(args, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["tokens_per_s"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--small", action="store_true", help="a tiny shape (smoke test)")
    a = p.parse_args()
    shape = dict(hidden=256, layers=4, heads=4, experts=8, top_k=2, expert_ffn=256, seq=128,
                 batch=4)
    if a.small:
        shape.update(hidden=64, layers=2, expert_ffn=64, seq=32, batch=2)
    print("model:", ", ".join(f"{k}={v}" for k, v in shape.items()),
          f"| dense peer: intermediate_size {shape['top_k'] * shape['expert_ffn']}, fp32, AdamW")
    print("load before:", uptime())
    cases = [("kktrain moe", 1, True, 1), ("kktrain moe", 2, True, 1), ("kktrain moe", 2, True, 2),
             ("kktrain dense", 1, False, 1), ("kktrain dense", 2, False, 1)]
    tps = {c: [] for c in cases}
    comm = {c: [] for c in cases}
    a2a = {c: [] for c in cases}
    peer = []
    with tempfile.TemporaryDirectory(prefix="moe_bench_") as tmp:
        for _ in range(a.rounds):
            for c in cases:
                t, b, x = kktrain(a.build, c[1], shape, c[2], a.steps, tmp, c[3])
                tps[c].append(t)
                comm[c].append(b)
                a2a[c].append(x)
            peer.append(torch_peer(shape, a.steps))
    print("load after: ", uptime())
    pt = statistics.median(peer)
    moe1 = statistics.median(tps[cases[0]])
    print(f"\n{'run':16} {'ranks':>5} {'EP':>3} {'tokens/s':>10} {'vs kk moe 1 rank':>16} "
          f"{'vs pytorch moe':>14} {'sent/rank/step':>15} {'all-to-all':>10}")
    for c in cases:
        t = statistics.median(tps[c])
        print(f"{c[0]:16} {c[1]:>5} {c[3]:>3} {t:>10.1f} {t / moe1:>16.2f} {t / pt:>14.2f} "
              f"{statistics.median(comm[c]):>15.0f} {statistics.median(a2a[c]):>10.0f}")
    print(f"{'pytorch moe':16} {1:>5} {'-':>3} {pt:>10.1f} {pt / moe1:>16.2f} {1.0:>14.2f} "
          f"{0:>15} {'-':>10}")
    print(f"\nmedians of {a.rounds} alternating rounds; per-round tokens/s:")
    for c in cases:
        print(f"  {c[0]} x{c[1]} EP {c[3]}: {[round(x, 1) for x in tps[c]]}")
    print(f"  pytorch moe: {[round(x, 1) for x in peer]}")


if __name__ == "__main__":
    main()
