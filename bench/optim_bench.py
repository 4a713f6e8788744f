#!/usr/bin/env python3
"""kktrain optimizer step vs a STREAM-style triad (same process) and vs PyTorch's AdamW.

For each precision pattern prints: bytes moved per parameter per step (reads + writes of param,
grad, moments and master the update must do; STREAM convention, no write-allocate), achieved
GB/s and its fraction of the triad's, step time against torch.optim.AdamW (foreach) on the same
parameter count at equal threads, and resident bytes per parameter measured (RSS growth when
creating parameters, gradients and state) against theory (param + grad + moments + master).
Each pattern's step is also timed counting the updates lost to bf16 rounding (what logged
training steps do), alternating step by step with the plain one inside bench_optim: "counted"
is that step's time and "+%" its overhead over the plain step; "cpu ms", "cpu counted" and
"cpu +%" the same in process CPU time, which a busy machine disturbs less than wall time.
Rounds alternate kktrain and PyTorch; medians are reported.

    bench/optim_bench.py [--build build] [--params 16777216] [--rounds 3] [--threads 1]
"""
import argparse
import json
import os
import statistics
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, threads):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    p.add_argument("--params", type=int, default=1 << 24)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--no-torch", action="store_true", help="kktrain only (no PyTorch peer)")
    a = p.parse_args()
    kk_cmd = [os.path.join(a.build, "bench", "bench_optim"), "--params", str(a.params),
              "--iters", str(a.iters)]
    pt_cmd = ["/usr/bin/python3", os.path.join(HERE, "torch_optim.py"), "--params", str(a.params),
              "--threads", str(a.threads), "--iters", str(a.iters)]
    triad, kk, pt = [], {}, {"float32": [], "bfloat16": []}
    for _ in range(a.rounds):
        for rec in run(kk_cmd, a.threads):
            if rec["kind"] == "triad":
                triad.append(rec["gbytes_per_s"])
            else:
                kk.setdefault(rec["pattern"], []).append(rec)
        for dt in pt:
            if not a.no_torch:
                pt[dt].append(run(pt_cmd + ["--dtype", dt], a.threads)[-1]["median_s"])
    tri = statistics.median(triad)
    torch_ms = {k: 1e3 * statistics.median(v) if v else float("nan") for k, v in pt.items()}
    peer_text = ("no PyTorch peer (--no-torch)" if a.no_torch else
                 f"torch.optim.AdamW foreach: fp32 {torch_ms['float32']:.1f} ms/step, bf16 "
                 f"{torch_ms['bfloat16']:.1f} ms/step")
    print(f"{a.params} parameters, {a.threads} thread(s); STREAM-style triad "
          f"(12 B/element): {tri:.1f} GB/s; {peer_text}")
    print(f"{'pattern':<46} {'B/param':>7} {'GB/s':>6} {'of triad':>8} {'ms/step':>8} "
          f"{'counted':>8} {'+%':>6} {'cpu ms':>7} {'cpu counted':>11} {'cpu +%':>6} "
          f"{'vs torch':>8} {'resident B/param':>16} {'theory':>6}")
    for name, recs in kk.items():
        gbs = statistics.median(r["gbytes_per_s"] for r in recs)
        ms = 1e3 * statistics.median(r["median_s"] for r in recs)
        counted = 1e3 * statistics.median(r["counted_median_s"] for r in recs)
        cpu = 1e3 * statistics.median(r["cpu_median_s"] for r in recs)
        cpu_counted = 1e3 * statistics.median(r["counted_cpu_median_s"] for r in recs)
        peer = torch_ms["bfloat16" if "bf16" in name else "float32"]
        print(f"{name:<46} {recs[0]['bytes_moved_per_param']:>7.0f} {gbs:>6.1f} {gbs / tri:>8.0%} "
              f"{ms:>8.2f} {counted:>8.2f} {100 * (counted / ms - 1):>+5.1f}% {cpu:>7.2f} "
              f"{cpu_counted:>11.2f} {100 * (cpu_counted / cpu - 1):>+5.1f}% "
              f"{'-' if a.no_torch else f'{peer / ms:.1f}x':>8} "
              f"{recs[0]['resident_bytes_per_param']:>16.2f} "
              f"{recs[0]['theory_bytes_per_param']:>6.0f}")
    print("vs torch = PyTorch AdamW step time / kktrain step time (PyTorch peer in the parameter "
          "dtype: fp32 for fp32 patterns, bf16 for bf16 ones)")


if __name__ == "__main__":
    main()
