"""The PyTorch peer for bench/model_bench.py: the same Llama-style decoder as kktrain (RMSNorm,
GQA attention with rotate-half rotary, SwiGLU, untied LM head), written the way a PyTorch user
would, timed forward+backward at a fixed thread count. bf16 compute uses autocast (CPU or CUDA).
With --device cuda the model runs on the GPU, attention through
F.scaled_dot_product_attention (causal, the flash kernels on a GPU: what a PyTorch user runs there),
and each timed step ends with torch.cuda.synchronize().

    torch_llama.py --hidden 384 --layers 6 --heads 6 --kv-heads 6 --ffn 1024 --vocab 256 \
                   --seq 256 --batch 8 --compute bfloat16 --threads 1 --warmup 2 --iters 5
Prints one JSON line like bench_model: wall and process CPU seconds per step, tokens/s, peak RSS,
the RSS before the model was built (the interpreter and torch itself), the parameter count and
the first step's loss.

--family qwen3 | gemma3 | phi3 runs bench/torch_families.py's decoder of that family instead of
the Llama one (the families bench_model's --family builds); --head-dim D an explicit head size
(0: hidden / heads); --window W a sliding window (-1: the family's default: none for llama, qwen3
and phi3, every layer when given; gemma3: seq / 2 on its sliding layers).
"""
import argparse
import json
import math
import resource
import statistics
import time

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, c, h, kv, ffn, eps, d=None):
        super().__init__()
        self.h, self.kv, self.d, self.eps = h, kv, d or c // h, eps
        self.ln1 = torch.nn.Parameter(torch.ones(c))
        self.ln2 = torch.nn.Parameter(torch.ones(c))
        self.q = torch.nn.Linear(c, h * self.d, bias=False)
        self.k = torch.nn.Linear(c, kv * self.d, bias=False)
        self.v = torch.nn.Linear(c, kv * self.d, bias=False)
        self.o = torch.nn.Linear(h * self.d, c, bias=False)
        self.gate = torch.nn.Linear(c, ffn, bias=False)
        self.up = torch.nn.Linear(c, ffn, bias=False)
        self.down = torch.nn.Linear(ffn, c, bias=False)

    def norm(self, x, w):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * xf.to(x.dtype)

    def forward(self, x, cos, sin, mask):
        h = self.attention_half(x, cos, sin, mask)
        n = self.norm(h, self.ln2)
        return h + self.down(F.silu(self.gate(n)) * self.up(n))

    def attention_half(self, x, cos, sin, mask):
        """x plus the attention of its norm (the block up to the MLP's residual input)."""
        b, t, _ = x.shape
        n = self.norm(x, self.ln1)
        q = self.q(n).view(b, t, self.h, self.d).transpose(1, 2)
        k = self.k(n).view(b, t, self.kv, self.d).transpose(1, 2)
        v = self.v(n).view(b, t, self.kv, self.d).transpose(1, 2)

        def rot(z):
            z1, z2 = z[..., : self.d // 2], z[..., self.d // 2:]
            return z * cos + torch.cat((-z2, z1), -1) * sin

        q, k = rot(q), rot(k)
        if self.kv != self.h:
            k = k.repeat_interleave(self.h // self.kv, dim=1)
            v = v.repeat_interleave(self.h // self.kv, dim=1)
        if mask is None:  # on a GPU: the fused causal kernels
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-1, -2)) / math.sqrt(self.d) + mask
            att = torch.softmax(att, dim=-1, dtype=torch.float32).to(q.dtype)
            y = att @ v
        y = y.transpose(1, 2).reshape(b, t, self.h * self.d)
        return x + self.o(y)


class Llama(torch.nn.Module):
    def __init__(self, a, sdpa=False):
        super().__init__()
        self.emb = torch.nn.Embedding(a.vocab, a.hidden)
        d = getattr(a, "head_dim", 0) or a.hidden // a.heads
        self.blocks = torch.nn.ModuleList(
            Block(a.hidden, a.heads, a.kv_heads, a.ffn, 1e-5, d) for _ in range(a.layers))
        self.norm = torch.nn.Parameter(torch.ones(a.hidden))
        self.head = torch.nn.Linear(a.hidden, a.vocab, bias=False)
        inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2).float() / d))
        ang = torch.outer(torch.arange(a.seq).float(), inv)
        self.register_buffer("cos", torch.cat((ang, ang), -1).cos())
        self.register_buffer("sin", torch.cat((ang, ang), -1).sin())
        # sdpa: F.scaled_dot_product_attention's causal kernels instead of a (T, T) mask
        mask = None if sdpa else torch.full((a.seq, a.seq), float("-inf")).triu(1)
        window = getattr(a, "window", -1)
        if window > 0:  # every layer sees keys q - window < k <= q (Mistral's window)
            if sdpa:
                raise SystemExit("torch_llama.py: --window runs on the CPU path only")
            mask = mask + torch.full((a.seq, a.seq), float("-inf")).tril(-window)
        self.register_buffer("mask", mask)

    def forward(self, ids, targets):
        x = self.emb(ids)
        for blk in self.blocks:
            x = blk(x, self.cos, self.sin, self.mask)
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5)
        logits = self.head(self.norm * xf.to(x.dtype))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def main():
    p = argparse.ArgumentParser()
    for k, v in dict(hidden=384, layers=6, heads=6, kv_heads=6, ffn=1024, vocab=256, seq=256,
                     batch=8, threads=1, warmup=2, iters=5, head_dim=0, window=-1).items():
        p.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    p.add_argument("--family", default="llama", help="llama, or one of torch_families.FAMILIES")
    p.add_argument("--compute", default="float32")
    p.add_argument("--storage", default="float32")
    p.add_argument("--optimizer", type=int, default=1, help="1: each step also runs AdamW")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--fused", type=int, default=0, help="1: AdamW(fused=True) instead of foreach")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    base_rss = rss_mib()
    dev = torch.device(a.device)
    if a.family == "llama":
        model = Llama(a, sdpa=a.device == "cuda").to(dev)
    else:
        import torch_families
        if a.family not in torch_families.FAMILIES:
            p.error(f"unknown family {a.family} (llama, {', '.join(torch_families.FAMILIES)})")
        model = torch_families.FAMILIES[a.family](a).to(dev)
    if a.storage == "bfloat16":
        model = model.to(torch.bfloat16)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq)).to(dev)
    targets = torch.randint(0, a.vocab, (a.batch, a.seq)).to(dev)
    opt = None
    if a.optimizer:
        kind = dict(fused=True) if a.fused else dict(foreach=True)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, **kind)
    cuda = a.device == "cuda"
    times, cpu_times = [], []
    first_loss = None
    for it in range(a.warmup + a.iters):
        model.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        t0, c0 = time.perf_counter(), time.process_time()
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.compute == "bfloat16"):
            loss = model(ids, targets)
        loss.backward()
        if first_loss is None:
            first_loss = loss.item()
        if opt is not None:
            opt.step()
        if cuda:
            torch.cuda.synchronize()
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        if it >= a.warmup:
            times.append(dt)
            cpu_times.append(dc)
    med = statistics.median(times)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    device_peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else 0.0
    print(json.dumps(dict(kind="step", impl="pytorch", compute=a.compute, storage=a.storage,
                          median_s=med, min_s=min(times), cpu_median_s=statistics.median(cpu_times),
                          tokens_per_s=a.batch * a.seq / med, peak_rss_mib=peak,
                          base_rss_mib=base_rss, iters=a.iters, threads=torch.get_num_threads(),
                          device=a.device, device_peak_mib=device_peak, torch=torch.__version__,
                          family=a.family, params=sum(t.numel() for t in model.parameters()),
                          first_loss=first_loss)))


if __name__ == "__main__":
    main()
