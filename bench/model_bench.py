#!/usr/bin/env python3
"""kktrain vs PyTorch: training-step tokens/s of the same model, side by side, per model family.

A step is forward + backward + a torch-style AdamW update of fp32 parameters (kktrain's optimizer
against torch.optim.AdamW(foreach=True)).

Runs bench_model (kktrain) and torch_llama.py (PyTorch peer) alternately for several rounds at
equal thread counts (OPENBLAS_NUM_THREADS / OMP_NUM_THREADS / torch.set_num_threads), for fp32
and bf16 compute, and prints medians, the kktrain/PyTorch throughput ratio (wall time; and CPU
time per step, which other processes on a shared machine disturb less), and kktrain's model FLOP
utilization: model GFLOP/s against the best rate of one GEMM of the same dtype measured in the
same run. Model FLOPs count the matrix products only: 6 x matmul parameters x tokens (a tied
head's product included) plus the attention's QK^T and PV, 12 H D per (query, key) pair a layer
attends to (T (T + 1) / 2 causal, fewer under a sliding window); the norms, q/k norms,
activations, rotary, softmax and embedding scale are not counted. Alternating rounds keeps slow
drifts of a shared, noisy machine from favouring one side.

One block of rows per family (--families; both sides build the family from --family: bench_model
sets the ModelConfig fields kktrain's Hugging Face reader sets for that architecture,
torch_families.py writes the transformers model in plain PyTorch). After its rows each family
prints both sides' parameter counts (they must be equal) and first-step losses (different random
weights: both should be near ln(vocab) and finite). A family is one entry in FAMILIES below, one
branch of bench_model.cpp's family_config and one class in torch_families.FAMILIES.

    bench/model_bench.py [--build build] [--rounds 3] [--threads 1,2] [--small]
                         [--families llama,qwen3,gemma3,phi3]
                         [--peer-env OPENBLAS_CORETYPE=SKYLAKEX]
Needs Debian's /usr/bin/python3 (torch) for the peer.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PEER_PYTHON = "/usr/bin/python3"

# --family NAME on both sides: what the model is beyond the shape.
FAMILIES = {
    "llama": "RMSNorm, rotary (theta 1e4), SwiGLU, untied head",
    "qwen3": "Llama's layer + an RMSNorm of each q and k head before rotary (eps 1e-6), untied "
             "head",
    "gemma3": "four (1 + w) fp32 RMSNorms a layer (sandwich), GeGLU (tanh), embeddings x "
              "sqrt(hidden), (1 + w) q/k head norms, scores x query_pre_attn_scalar^-1/2 "
              "(= head_dim), 5 of 6 layers sliding (window seq/2, rotary base 1e4; the others "
              "1e6), tied head",
    "phi3": "Llama's layer with fused qkv_proj and gate_up_proj, rotary on 3/4 of each head "
            "(partial_rotary_factor 0.75, as Phi-4-mini; unscaled), rms_norm_eps 1e-5, tied head",
}


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
    p.add_argument("--families", default=",".join(FAMILIES),
                   help="comma-separated, of: " + ", ".join(FAMILIES))
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
    families = a.families.split(",")
    for f in families:
        if f not in FAMILIES:
            p.error(f"unknown family {f} (known: {', '.join(FAMILIES)})")
    kk = [os.path.join(a.build, "bench", "bench_model")] + args
    pt = [PEER_PYTHON, os.path.join(HERE, "torch_llama.py")] + args
    print("model:", ", ".join(f"{k}={v}" for k, v in shape.items()),
          "| a full training step: forward + backward + AdamW (fp32 storage)")
    for f in families:
        print(f"  {f}: {FAMILIES[f]}")
    print(f"{'family':>7} {'threads':>7} {'compute':>9} {'kktrain tok/s':>14} "
          f"{'pytorch tok/s':>14} {'ratio':>6} {'cpu ratio':>9} {'kk GFLOP/s':>10} "
          f"{'GEMM peak':>9} {'MFU':>5}")
    mismatch = False
    for threads in [int(t) for t in a.threads.split(",")]:
        for f in families:
            fam = ["--family", f]
            checks = {}  # compute -> (kk params, pt params, kk loss, pt loss) of the first round
            for compute in ("float32", "bfloat16"):
                kk_tps, pt_tps, kk_cpu, pt_cpu, gflops, peaks = [], [], [], [], [], []
                for _ in range(a.rounds):
                    for rec in run(kk + fam + ["--compute", compute], threads):
                        if rec["kind"] == "gemm_peak":
                            if rec["dtype"] == compute:
                                peaks.append(rec["gflops"])
                        else:
                            kk_tps.append(rec["tokens_per_s"])
                            kk_cpu.append(rec["cpu_median_s"])
                            gflops.append(rec["gflops"])
                            kk_rec = rec
                    rec = run(pt + fam + ["--compute", compute, "--threads", str(threads)],
                              threads, dict(kv.split("=", 1) for kv in a.peer_env))[-1]
                    pt_tps.append(rec["tokens_per_s"])
                    pt_cpu.append(rec["cpu_median_s"])
                    checks.setdefault(compute, (kk_rec["params"], rec["params"],
                                                kk_rec["first_loss"], rec["first_loss"]))
                k, t = statistics.median(kk_tps), statistics.median(pt_tps)
                cr = statistics.median(pt_cpu) / statistics.median(kk_cpu)
                g, pk = statistics.median(gflops), statistics.median(peaks)
                print(f"{f:>7} {threads:>7} {compute:>9} {k:>14.1f} {t:>14.1f} {k / t:>6.2f} "
                      f"{cr:>9.2f} {g:>10.1f} {pk:>9.1f} {g / pk:>5.0%}", flush=True)
            for compute, (kp, tp, kl, tl) in checks.items():
                ok = kp == tp and all(math.isfinite(x) and abs(x - math.log(shape["vocab"])) < 1.0
                                      for x in (kl, tl))
                mismatch = mismatch or not ok
                print(f"{'':>7} {f} {compute}: params kktrain {kp} pytorch {tp}; first loss "
                      f"kktrain {kl:.4f} pytorch {tl:.4f} (ln vocab {math.log(shape['vocab']):.4f})"
                      f"{'' if ok else '  <-- MISMATCH'}", flush=True)
    print("ratio = kktrain / PyTorch throughput (median over rounds); cpu ratio = PyTorch / "
          "kktrain CPU seconds per step; MFU = kktrain's model GFLOP/s / the best in-run GEMM "
          "rate of the compute dtype. PyTorch bf16 is CPU autocast (oneDNN bf16 kernels where the "
          "CPU has them).")
    return 1 if mismatch else 0


if __name__ == "__main__":
    sys.exit(main())
