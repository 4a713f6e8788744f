#!/usr/bin/env python3
"""kktrain vs PyTorch on one GPU: training-step tokens/s, MFU, and the optimizer's share of HBM.

Needs a CUDA (or HIP) build of kktrain (`--build`) and a Python whose torch sees the GPU (the one
running this script, or `--peer-python`). Three parts, each kktrain and its peer alternating over
`--rounds`, medians reported:

  step       bench_model and torch_llama.py --device cuda on GPU-sized Llama shapes (medium,
             wide, and 1b: Llama-3.2-1B's widths at T 2048): a training step (forward + backward
             + torch-style AdamW on fp32 parameters) in bf16 compute, kktrain once per
             --attention choice (model.attention; a row each).
             PyTorch runs autocast bf16, F.scaled_dot_product_attention (causal: its flash
             kernels) and AdamW(foreach) and AdamW(fused). MFU = model FLOP/s (6 x matmul
             parameters x tokens + 6 L T C per token for causal attention, as model_bench.py)
             over --peak-tflops (the GPU's dense bf16 peak by its datasheet; H200/H100 SXM:
             989) and over the best rate of one bf16 GEMM through kktrain's gemm() measured in
             the same process.
  optimizer  bench_optim (one flat buffer of --optim-params parameters per pattern, each step
             fenced) against a STREAM-style triad on the device in the same process and against
             --peak-hbm-gbs (H200: 4800), and torch.optim.AdamW (foreach and fused) on the same
             count in fp32.
  sync       not here: a training run's metrics.jsonl carries host_syncs per step
             (tests/cli/test_host_syncs.py checks it on every build).

    bench/gpu_step_bench.py --build build-cuda [--rounds 3] [--shapes medium,wide,1b]
                            [--attention auto,tiled_gemm,team]
                            [--peak-tflops 989] [--peak-hbm-gbs 4800] [--optim-params 268435456]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

SHAPES = {
    # about 160M parameters, 8192 tokens a step
    "medium": dict(hidden=1024, layers=8, heads=16, kv_heads=8, ffn=2816, vocab=32000, seq=1024,
                   batch=8),
    # about 510M parameters (Llama-like widths), 8192 tokens a step at T 2048
    "wide": dict(hidden=2048, layers=8, heads=16, kv_heads=8, ffn=5632, vocab=32000, seq=2048,
                 batch=4),
    # Llama-3.2-1B's shape (1.24B parameters with its tied embedding; untied here as the other
    # shapes, so 1.50B), 8192 tokens a step at T 2048
    "1b": dict(hidden=2048, layers=16, heads=32, kv_heads=8, ffn=8192, vocab=128256, seq=2048,
               batch=4),
    "small": dict(hidden=256, layers=2, heads=4, kv_heads=2, ffn=688, vocab=256, seq=256, batch=4),
}


def run(cmd, timeout):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-3000:]}")
    return [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]


def model_flops(s, matmul_params):
    tokens = s["batch"] * s["seq"]
    return 6.0 * matmul_params * tokens + 6.0 * s["layers"] * s["seq"] * s["hidden"] * tokens


def matmul_params(s):
    d, kvd = s["hidden"] // s["heads"], s["hidden"] // s["heads"] * s["kv_heads"]
    per_layer = 2 * s["hidden"] * s["heads"] * d + 2 * s["hidden"] * kvd + 3 * s["hidden"] * s["ffn"]
    return s["layers"] * per_layer + s["vocab"] * s["hidden"]  # untied head; embedding is a lookup


def step_part(a):
    print(f"== training step, bf16 compute, fp32 parameters and AdamW; {a.rounds} rounds, "
          f"{a.iters} timed steps each after {a.warmup} warm-up")
    print(f"{'shape':<7} {'attention':<10} {'params':>7} {'kktrain tok/s':>14} "
          f"{'torch foreach':>14} {'torch fused':>12} {'ratio':>6} {'kk TFLOP/s':>10} "
          f"{'MFU peak':>8} {'GEMM TFLOP/s':>12} {'MFU GEMM':>8} {'torch MFU':>9}")
    kernels = a.attention.split(",")
    for name in a.shapes.split(","):
        s = SHAPES[name]
        args = []
        for k, v in s.items():
            args += ["--" + k.replace("_", "-"), str(v)]
        args += ["--warmup", str(a.warmup), "--iters", str(a.iters), "--compute", "bfloat16"]
        kk_cmd = [os.path.join(a.build, "bench", "bench_model")] + args
        pt_cmd = [a.peer_python, os.path.join(HERE, "torch_llama.py"), "--device", a.device] + args
        kk = {kernel: [] for kernel in kernels}
        pt_foreach, pt_fused, peaks = [], [], []
        for _ in range(a.rounds):
            for kernel in kernels:  # one bench_model run per model.attention choice
                for rec in run(kk_cmd + ["--attention", kernel], a.timeout):
                    if rec["kind"] == "gemm_peak":
                        if rec["dtype"] == "bfloat16":
                            peaks.append(rec["gflops"] / 1e3)
                    else:
                        kk[kernel].append(rec["tokens_per_s"])
            rec = run(pt_cmd, a.timeout)[-1]
            pt_foreach.append(rec["tokens_per_s"])
            if a.device == "cuda":  # (AdamW(fused) on CPUs needs a newer PyTorch than Debian's)
                pt_fused.append(run(pt_cmd + ["--fused", "1"], a.timeout)[-1]["tokens_per_s"])
            else:
                pt_fused.append(float("nan"))
        tf, tu = statistics.median(pt_foreach), statistics.median(pt_fused)
        best = tf if tu != tu else max(tf, tu)
        mp = matmul_params(s)
        per_token = model_flops(s, mp) / (s["batch"] * s["seq"])
        pt_tflops = best * per_token / 1e12
        gemm = statistics.median(peaks)
        for kernel in kernels:
            k = statistics.median(kk[kernel])
            kk_tflops = k * per_token / 1e12
            print(f"{name:<7} {kernel:<10} {mp / 1e6:>6.0f}M {k:>14.0f} {tf:>14.0f} {tu:>12.0f} "
                  f"{k / best:>6.2f} {kk_tflops:>10.1f} {kk_tflops / a.peak_tflops:>8.1%} "
                  f"{gemm:>12.1f} {kk_tflops / gemm:>8.1%} {pt_tflops / a.peak_tflops:>9.1%}",
                  flush=True)
    print(f"ratio = kktrain / the faster PyTorch AdamW; MFU peak = model TFLOP/s / "
          f"{a.peak_tflops:.0f}; MFU GEMM = over kktrain's best bf16 GEMM in the same process "
          f"((B*T, C) x (C, 4C)); torch MFU: the faster PyTorch over the same peak")


def optim_part(a):
    n = a.optim_params
    print(f"== optimizer step over {n} parameters (one flat buffer per pattern), {a.rounds} rounds")
    kk_cmd = [os.path.join(a.build, "bench", "bench_optim"), "--params", str(n), "--iters",
              str(a.iters * 3), "--plain-only", "1"]
    pt_cmd = [a.peer_python, os.path.join(HERE, "torch_optim.py"), "--params", str(n), "--device",
              a.device, "--iters", str(a.iters * 3)]
    triad, kk, pt = [], {}, {"foreach": [], "fused": []}
    for _ in range(a.rounds):
        for rec in run(kk_cmd, a.timeout):
            if rec["kind"] == "triad":
                triad.append(rec["gbytes_per_s"])
            else:
                kk.setdefault(rec["pattern"], []).append(rec)
        pt["foreach"].append(run(pt_cmd, a.timeout)[-1]["median_s"])
        pt["fused"].append(run(pt_cmd + ["--fused", "1"], a.timeout)[-1]["median_s"]
                           if a.device == "cuda" else float("nan"))
    tri = statistics.median(triad)
    fe, fu = (1e3 * statistics.median(pt[k]) for k in ("foreach", "fused"))
    print(f"device triad (12 B/element): {tri:.0f} GB/s = {tri / a.peak_hbm_gbs:.0%} of "
          f"{a.peak_hbm_gbs:.0f}; torch.optim.AdamW fp32: foreach {fe:.2f} ms/step "
          f"({28 * n / fe / 1e6:.0f} GB/s), fused {fu:.2f} ms/step ({28 * n / fu / 1e6:.0f} GB/s)")
    print(f"{'pattern':<46} {'B/param':>7} {'ms/step':>8} {'GB/s':>6} {'of HBM':>6} "
          f"{'of triad':>8} {'vs foreach':>10} {'vs fused':>8}")
    for name, recs in kk.items():
        ms = 1e3 * statistics.median(r["median_s"] for r in recs)
        gbs = statistics.median(r["gbytes_per_s"] for r in recs)
        print(f"{name:<46} {recs[0]['bytes_moved_per_param']:>7.0f} {ms:>8.2f} {gbs:>6.0f} "
              f"{gbs / a.peak_hbm_gbs:>6.0%} {gbs / tri:>8.0%} {fe / ms:>9.2f}x {fu / ms:>7.2f}x",
              flush=True)
    print("B/param: bytes the update must read and write per parameter (no write-allocate); "
          "vs foreach / fused = torch AdamW(foreach / fused) fp32 ms / kktrain ms")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", default=os.path.join(HERE, "..", "build-cuda"))
    p.add_argument("--peer-python", default=sys.executable)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--shapes", default="medium,wide,1b")
    p.add_argument("--attention", default="auto",
                   help="kktrain's model.attention choices, comma-separated (a row each)")
    p.add_argument("--parts", default="step,optimizer")
    p.add_argument("--peak-tflops", type=float, default=989.0)
    p.add_argument("--peak-hbm-gbs", type=float, default=4800.0)
    p.add_argument("--optim-params", type=int, default=1 << 28)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds for one program run")
    p.add_argument("--device", default="cuda", help="the peer's device (cpu: a dry run of this "
                   "script against a CPU build)")
    a = p.parse_args()
    if "step" in a.parts:
        step_part(a)
    if "optimizer" in a.parts:
        optim_part(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
