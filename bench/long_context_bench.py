#!/usr/bin/env python3
"""kktrain vs PyTorch at long context: training-step tokens/s and peak RSS at several T.

The same Llama-style model on both sides (bench_model and torch_llama.py, as in model_bench.py),
one sequence per step (B = 1), at T = 512, 2048, 8192 by default, equal thread counts. kktrain
runs its tiled causal attention and chunked loss; PyTorch 1.13 (Debian's python3-torch) runs the
plain materialized attention, which is what that version has: (B, H, T, T) scores, softmax and
their gradients, and a (T, T) mask. A step is forward + backward + AdamW. For each T the two run
one after the other in every round (kktrain first), and the table shows medians over rounds:

  tok/s         tokens per second of the step (wall clock), and the kktrain / PyTorch ratio
  cpu ratio     PyTorch / kktrain process CPU seconds per step (less disturbed by other load)
  peak MiB      the process's peak RSS over the run, and the PyTorch / kktrain ratio
  +model MiB    peak RSS minus the RSS right before the model was built (the interpreter and
                torch import, or Kokkos/oneDNN start-up, taken out)

    bench/long_context_bench.py [--build build] [--seqs 512,2048,8192] [--rounds 1]
                                [--threads 1] [--compute bfloat16]
Needs Debian's /usr/bin/python3 (torch) for the peer. At T = 8192 PyTorch needs several GiB
(this model: about 6 GiB in fp32) and a few minutes on one thread.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PEER_PYTHON = "/usr/bin/python3"
MODEL = dict(hidden=256, layers=2, heads=4, kv_heads=2, ffn=688, vocab=256)


def run(cmd, threads):
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")][-1]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    p.add_argument("--seqs", default="512,2048,8192")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--compute", default="bfloat16", choices=["float32", "bfloat16"])
    p.add_argument("--iters", type=int, default=2)
    a = p.parse_args()
    print("model:", ", ".join(f"{k}={v}" for k, v in MODEL.items()),
          f"| B=1, {a.compute} compute, fp32 storage, {a.threads} thread(s), AdamW; "
          f"medians of {a.rounds} round(s)")
    print(f"{'T':>5} {'kk tok/s':>9} {'pt tok/s':>9} {'ratio':>6} {'cpu ratio':>9} "
          f"{'kk peak MiB':>11} {'pt peak MiB':>11} {'pt/kk':>6} {'kk +model':>9} "
          f"{'pt +model':>9} {'pt/kk':>6}")
    for T in [int(t) for t in a.seqs.split(",")]:
        args = []
        for k, v in dict(MODEL, seq=T, batch=1).items():
            args += ["--" + k.replace("_", "-"), str(v)]
        args += ["--warmup", "1", "--iters", str(a.iters), "--compute", a.compute]
        kk_cmd = [os.path.join(a.build, "bench", "bench_model"), *args, "--gemm-peak", "0"]
        pt_cmd = [PEER_PYTHON, os.path.join(HERE, "torch_llama.py"), *args,
                  "--threads", str(a.threads)]
        kk, pt = [], []
        for _ in range(a.rounds):
            kk.append(run(kk_cmd, a.threads))
            pt.append(run(pt_cmd, a.threads))

        def med(runs, key):
            return statistics.median(r[key] for r in runs)

        def above(runs):
            return statistics.median(r["peak_rss_mib"] - r["base_rss_mib"] for r in runs)

        kt, pt_t = med(kk, "tokens_per_s"), med(pt, "tokens_per_s")
        kp, pp = med(kk, "peak_rss_mib"), med(pt, "peak_rss_mib")
        ka, pa = above(kk), above(pt)
        cr = med(pt, "cpu_median_s") / med(kk, "cpu_median_s")
        print(f"{T:>5} {kt:>9.1f} {pt_t:>9.1f} {kt / pt_t:>6.2f} {cr:>9.2f} {kp:>11.1f} "
              f"{pp:>11.1f} {pp / kp:>6.2f} {ka:>9.1f} {pa:>9.1f} {pa / ka:>6.2f}", flush=True)
    print("ratio = kktrain / PyTorch tokens/s; cpu ratio = PyTorch / kktrain CPU s per step; "
          "pt/kk = PyTorch / kktrain memory.")


if __name__ == "__main__":
    sys.exit(main())
