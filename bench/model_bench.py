#!/usr/bin/env python3
"""kktrain vs PyTorch: training-step tokens/s of the same Llama-style model, side by side.

A step is forward + backward + a torch-style AdamW update of fp32 parameters (kktrain's optimizer
against torch.optim.AdamW(foreach=True)).

Runs bench_model (kktrain) and torch_llama.py (PyTorch peer) alternately for several rounds at
equal thread counts (OPENBLAS_NUM_THREADS / OMP_NUM_THREADS / torch.set_num_threads), for fp32
and bf16 compute, and prints medians, the kktrain/PyTorch throughput ratio (wall time; and CPU
time per step, which other processes on a shared machine disturb less), and kktrain's model FLOP
utilization: model GFLOP/s (6 x matmul parameters x tokens + 6 L T C per token for the causal
attention) against the best rate of one GEMM of the same dtype measured in the same run.
Alternating rounds keeps slow drifts of a shared, noisy machine from favouring one side.

    bench/model_bench.py [--build build] [--rounds 3] [--threads 1,2] [--small]
                         [--peer-env OPENBLAS_CORETYPE=SKYLAKEX]
Needs Debian's /usr/bin/python3 (torch) for the peer.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PEER_PYTHON = "/usr/bin/python3"


def run(cmd, threads, extra_env=None):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    env.update(extra_env or {})
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="1")
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--small", action="store_true", help="a tiny shape (smoke test)")
    p.add_argument("--peer-env", action="append", default=[], metavar="KEY=VALUE",
                   help="environment for the PyTorch peer only, e.g. OPENBLAS_CORETYPE=SKYLAKEX")
    a = p.parse_args()
    shape = dict(hidden=384, layers=6, heads=6, kv_heads=6, ffn=1024, vocab=256, seq=256, batch=8)
    if a.small:
        shape = dict(hidden=64, layers=2, heads=4, kv_heads=2, ffn=160, vocab=256, seq=32, batch=2)
    args = []
    for k, v in shape.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    args += ["--warmup", "1", "--iters", str(a.iters)]
    kk = [os.path.join(a.build, "bench", "bench_model")] + args
    pt = [PEER_PYTHON, os.path.join(HERE, "torch_llama.py")] + args
    print("model:", ", ".join(f"{k}={v}" for k, v in shape.items()),
          "| untied head, a full training step: forward + backward + AdamW (fp32 storage)")
    print(f"{'threads':>7} {'compute':>9} {'kktrain tok/s':>14} {'pytorch tok/s':>14} "
          f"{'ratio':>6} {'cpu ratio':>9} {'kk GFLOP/s':>10} {'GEMM peak':>9} {'MFU':>5}")
    for threads in [int(t) for t in a.threads.split(",")]:
        for compute in ("float32", "bfloat16"):
            kk_tps, pt_tps, kk_cpu, pt_cpu, gflops, peaks = [], [], [], [], [], []
            for _ in range(a.rounds):
                for rec in run(kk + ["--compute", compute], threads):
                    if rec["kind"] == "gemm_peak":
                        if rec["dtype"] == compute:
                            peaks.append(rec["gflops"])
                    else:
                        kk_tps.append(rec["tokens_per_s"])
                        kk_cpu.append(rec["cpu_median_s"])
                        gflops.append(rec["gflops"])
                rec = run(pt + ["--compute", compute, "--threads", str(threads)], threads,
                          dict(kv.split("=", 1) for kv in a.peer_env))[-1]
                pt_tps.append(rec["tokens_per_s"])
                pt_cpu.append(rec["cpu_median_s"])
            k, t = statistics.median(kk_tps), statistics.median(pt_tps)
            cr = statistics.median(pt_cpu) / statistics.median(kk_cpu)
            g, pk = statistics.median(gflops), statistics.median(peaks)
            print(f"{threads:>7} {compute:>9} {k:>14.1f} {t:>14.1f} {k / t:>6.2f} {cr:>9.2f} "
                  f"{g:>10.1f} {pk:>9.1f} {g / pk:>5.0%}", flush=True)
    print("ratio = kktrain / PyTorch throughput (median over rounds); cpu ratio = PyTorch / "
          "kktrain CPU seconds per step; MFU = kktrain's model GFLOP/s / the best in-run GEMM "
          "rate of the compute dtype. PyTorch bf16 is CPU autocast (oneDNN bf16 kernels where the "
          "CPU has them).")


if __name__ == "__main__":
    sys.exit(main())
