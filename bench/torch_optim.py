"""The PyTorch peer for bench/optim_bench.py: torch.optim.AdamW on the same number of parameters,
timed per step at a fixed thread count. The parameters are split into 64 tensors (a model has
many), with random gradients.

    torch_optim.py --params 16777216 --threads 1 --iters 10 [--dtype bfloat16] [--foreach 0|1]
                   [--device cuda] [--fused 1]
Prints one JSON line. On a GPU each timed step ends with torch.cuda.synchronize().
"""
import argparse
import json
import statistics
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--params", type=int, default=1 << 24)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--foreach", type=int, default=1)
    p.add_argument("--fused", type=int, default=0, help="1: AdamW(fused=True)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    a = p.parse_args()
    cuda = a.device == "cuda"
    torch.set_num_threads(a.threads)
    dtype = dict(float32=torch.float32, bfloat16=torch.bfloat16)[a.dtype]
    chunks = 64
    sizes = [a.params // chunks] * chunks
    sizes[-1] += a.params - sum(sizes)
    params = [torch.randn(s, dtype=dtype, device=a.device) * 0.02 for s in sizes]
    for t in params:
        t.requires_grad_(True)
        t.grad = torch.randn_like(t) * 1e-3
    kind = dict(fused=True) if a.fused else dict(foreach=bool(a.foreach))
    opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, **kind)
    times = []
    for it in range(a.iters + 2):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if it >= 2:
            times.append(dt)
    print(json.dumps(dict(kind="optim", impl="pytorch", dtype=a.dtype, foreach=bool(a.foreach), fused=bool(a.fused),
                          device=a.device,
                          median_s=statistics.median(times), threads=torch.get_num_threads())))


if __name__ == "__main__":
    main()
