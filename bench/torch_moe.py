"""The PyTorch peer for bench/moe_bench.py: torch_llama.py's decoder with every MLP a Mixtral-style
sparse MLP written plainly (fp32 router, top-k, renormalized weights, a Python loop over the
experts gathering each one's tokens, fp32 combine, the load-balancing loss), timed forward +
backward + AdamW at a fixed thread count.

    torch_moe.py --hidden 256 --layers 4 --heads 4 --kv-heads 4 --experts 8 --top-k 2 \
                 --expert-ffn 256 --vocab 256 --seq 128 --batch 4 --threads 1 --iters 5
Prints one JSON line: wall and CPU seconds per step, tokens/s.
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

import torch_llama


class SparseMlp(torch.nn.Module):
    def __init__(self, c, experts, top_k, ffn):
        super().__init__()
        self.k = top_k
        self.router = torch.nn.Linear(c, experts, bias=False)
        self.w1 = torch.nn.ModuleList(torch.nn.Linear(c, ffn, bias=False) for _ in range(experts))
        self.w3 = torch.nn.ModuleList(torch.nn.Linear(c, ffn, bias=False) for _ in range(experts))
        self.w2 = torch.nn.ModuleList(torch.nn.Linear(ffn, c, bias=False) for _ in range(experts))
        self.aux = None

    def forward(self, x):
        b, t, c = x.shape
        xf = x.reshape(b * t, c)
        with torch.autocast("cpu", enabled=False):
            probs = torch.softmax(self.router(xf.float()), dim=-1)
        w, sel = torch.topk(probs, self.k, dim=-1)
        w = w / w.sum(dim=-1, keepdim=True)
        y = torch.zeros(b * t, c, dtype=torch.float32)
        for e in range(len(self.w1)):
            tok, kk = torch.nonzero(sel == e, as_tuple=True)
            if tok.numel() == 0:
                continue
            xe = xf[tok]
            out = self.w2[e](F.silu(self.w1[e](xe)) * self.w3[e](xe))
            y = y.index_add(0, tok, w[tok, kk].unsqueeze(1) * out.float())
        mask = F.one_hot(sel, probs.shape[1]).float()
        self.aux = probs.shape[1] * torch.sum(mask.mean(0) * probs.mean(0).unsqueeze(0))
        return y.reshape(b, t, c).to(x.dtype)


class MoeBlock(torch_llama.Block):
    def __init__(self, a):
        super().__init__(a.hidden, a.heads, a.kv_heads, 8, 1e-5)
        del self.gate, self.up, self.down
        self.moe = SparseMlp(a.hidden, a.experts, a.top_k, a.expert_ffn)

    def forward(self, x, cos, sin, mask):
        h = self.attention_half(x, cos, sin, mask)
        return h + self.moe(self.norm(h, self.ln2))


def main():
    p = argparse.ArgumentParser()
    for k, v in dict(hidden=256, layers=4, heads=4, kv_heads=4, experts=8, top_k=2,
                     expert_ffn=256, vocab=256, seq=128, batch=4, threads=1, warmup=2,
                     iters=5).items():
        p.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    p.add_argument("--compute", default="float32")
    p.add_argument("--aux-coef", type=float, default=0.001)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    a.ffn = 8
    model = torch_llama.Llama(a)
    model.blocks = torch.nn.ModuleList(MoeBlock(a) for _ in range(a.layers))
    ids = torch.randint(0, a.vocab, (a.batch, a.seq))
    targets = torch.randint(0, a.vocab, (a.batch, a.seq))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    times, cpu_times = [], []
    for it in range(a.warmup + a.iters):
        model.zero_grad(set_to_none=True)
        t0, c0 = time.perf_counter(), time.process_time()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.compute == "bfloat16"):
            loss = model(ids, targets)
            loss = loss + a.aux_coef * sum(b.moe.aux for b in model.blocks) / a.layers
        loss.backward()
        opt.step()
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        if it >= a.warmup:
            times.append(dt)
            cpu_times.append(dc)
    med = statistics.median(times)
    print(json.dumps(dict(kind="step", impl="pytorch_moe", compute=a.compute, median_s=med,
                          cpu_median_s=statistics.median(cpu_times),
                          tokens_per_s=a.batch * a.seq / med, threads=torch.get_num_threads(),
                          torch=torch.__version__)))


if __name__ == "__main__":
    main()
