#!/usr/bin/env python3
"""PyTorch's causal attention, forward + backward, timed the way bench/attention_bench.cpp times
kktrain's: the peer of `bench_attention` in tools/gpu_check.sh and bench/README.md.

torch.nn.functional.scaled_dot_product_attention(is_causal=True) on q (B, H, T, D) and k, v
(B, KV, T, D) of random normal values in the compute dtype (grouped-query heads through
enable_gqa where this PyTorch has it, else k and v repeated per group inside the timed region,
as a user of an older PyTorch would), then backward from a random output gradient. One JSON line
as attention_bench prints: {"kind": "attention", "impl": "torch_sdpa", "compute", "T",
"median_s", "gflops"} (GFLOP/s counting the causal products only: 6 B H T^2 D, the same count).
The first round warms up; on a GPU each round ends with torch.cuda.synchronize(). A PyTorch
without scaled_dot_product_attention (before 2.0, as Debian 12's) runs the plain formula
instead, "impl": "torch_math" (a dry run on CPUs, not a peer).

    torch_attention.py --batch 8 --seq 2048 --heads 16 --kv-heads 8 --head-dim 128
                       --compute bfloat16 --iters 10 [--device cuda|cpu]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--kv-heads", type=int, default=6)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--compute", choices=("bfloat16", "float32"), default="bfloat16")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = p.parse_args()
    if a.heads % a.kv_heads:
        raise SystemExit("torch_attention.py: --heads must be a multiple of --kv-heads")
    dt = torch.bfloat16 if a.compute == "bfloat16" else torch.float32
    g = torch.Generator(device="cpu").manual_seed(1)

    def rand(*shape):
        return torch.randn(*shape, generator=g).to(device=a.device, dtype=dt)

    q = rand(a.batch, a.heads, a.seq, a.head_dim).requires_grad_()
    k = rand(a.batch, a.kv_heads, a.seq, a.head_dim).requires_grad_()
    v = rand(a.batch, a.kv_heads, a.seq, a.head_dim).requires_grad_()
    dout = rand(a.batch, a.heads, a.seq, a.head_dim)
    group = a.heads // a.kv_heads
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    gqa = False
    if sdpa is not None and group > 1:
        try:  # enable_gqa: PyTorch 2.5 and later
            sdpa(q[:1, :, :2].detach(), k[:1, :, :2].detach(), v[:1, :, :2].detach(),
                 is_causal=True, enable_gqa=True)
            gqa = True
        except TypeError:
            pass
    mask = torch.ones(a.seq, a.seq, dtype=torch.bool, device=a.device).tril()

    def attend(q, k, v):
        if sdpa is None:  # PyTorch before 2.0 (Debian 12's): the plain formula
            s = (q @ k.transpose(-1, -2)) * a.head_dim ** -0.5
            return torch.softmax(s.masked_fill(~mask, float("-inf")).float(), -1).to(dt) @ v
        if gqa:
            return sdpa(q, k, v, is_causal=True, enable_gqa=True)
        return sdpa(q, k, v, is_causal=True)

    def step():
        if group == 1 or gqa:
            out = attend(q, k, v)
        else:
            out = attend(q, k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1))
        out.backward(dout)

    def sync():
        if a.device.startswith("cuda"):
            torch.cuda.synchronize()

    times = []
    for it in range(a.iters + 1):  # the first round warms up
        q.grad = k.grad = v.grad = None
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        if it > 0:
            times.append(time.perf_counter() - t0)
    m = statistics.median(times)
    flops = 6.0 * a.batch * a.heads * a.seq * a.seq * a.head_dim
    impl = "torch_sdpa" if sdpa is not None else "torch_math"
    print(json.dumps({"kind": "attention", "impl": impl, "compute": a.compute, "T": a.seq,
                      "median_s": round(m, 6), "gflops": round(flops / m / 1e9, 2),
                      "device": a.device, "gqa": "enable_gqa" if gqa else "repeat"}))


if __name__ == "__main__":
    main()
