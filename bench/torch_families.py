"""The PyTorch peers of bench/model_bench.py's families other than Llama (torch_llama.py
--family NAME builds FAMILIES[NAME](args)): the decoders of Hugging Face's Qwen3ForCausalLM,
Gemma3ForCausalLM and Phi3ForCausalLM as transformers' modeling_qwen3.py / modeling_gemma3.py /
modeling_phi3.py compute them, written plainly in eager PyTorch at the bench's shapes (no cache,
no padding, no dropout), for the same forward + backward + AdamW step as the Llama peer (bf16
compute: the caller's CPU autocast).

  qwen3   Llama's layer (RMSNorm w * rnd(x_hat), rotate-half rotary, GQA, SwiGLU, untied head)
          with q_norm / k_norm: an RMSNorm of each query and key head (over head_dim, its own
          weight) after the projections and before the rotary embedding.
  gemma3  Gemma 3's layer: every RMSNorm rnd((1 + w) * x_hat) in fp32 (weights start at 0), four
          a layer (input, post-attention, pre- and post-feedforward: x + norm(attn(norm(x))),
          then the MLP likewise), GeGLU with tanh GELU, the embeddings scaled by sqrt(hidden)
          (the factor rounded to the embedding's dtype), per-head q/k norms of the same (1 + w)
          form, scores scaled by query_pre_attn_scalar^-1/2 (= head_dim here), five sliding layers
          of every six (keys q - window < k <= q, window seq / 2 unless --window says otherwise)
          rotated with the local base 1e4 and the others with 1e6, the LM head tied to the
          embedding, no soft-caps (Gemma 3's defaults).
  phi3    Phi-3's layer as Phi-4-mini has it: Llama's (RMSNorm w * rnd(x_hat), eps 1e-5, GQA,
          SwiGLU) with one fused qkv_proj (rows [q | k | v], its output split so) and one fused
          gate_up_proj (output chunked [gate | up]), rotary on the first int(head_dim * 0.75)
          values of each query and key head (rotate-half over those values, inv_freq over that
          width, base 1e4; the rest pass through), the LM head tied to the embedding. Rotary
          unscaled (rope_scaling null, as Phi-3-mini-4k's): Phi-4-mini's longrope switches to its
          long factors only past original_max_position_embeddings (4096), beyond the bench's T.

Weights start as Hugging Face's _init_weights leaves them for a fresh model: normal(0, 0.02)
matrices and embedding, norm weights 1 (Qwen3, Phi-3) or 0 (Gemma's 1 + w). Attention is the
explicit (T, T) masked softmax on every device (no fused kernel: Llama's peer uses
F.scaled_dot_product_attention on a GPU, these do not).
"""
import math

import torch
import torch.nn.functional as F


def head_dim(a):
    return a.head_dim or a.hidden // a.heads


def rotary_tables(d, theta, seq):
    """cos, sin of shape (seq, d): position t times theta^(-2i/d), each frequency twice."""
    inv = 1.0 / (theta ** (torch.arange(0, d, 2).float() / d))
    ang = torch.outer(torch.arange(seq).float(), inv)
    ang = torch.cat((ang, ang), -1)
    return ang.cos(), ang.sin()


def rotate(z, cos, sin):
    """The rotate-half rotary embedding of (..., T, d) z."""
    half = z.shape[-1] // 2
    return z * cos + torch.cat((-z[..., half:], z[..., :half]), -1) * sin


def additive_mask(seq, window):
    """(T, T): 0 where query q sees key k (k <= q; q - window < k if window > 0), else -inf."""
    q = torch.arange(seq).unsqueeze(1)
    k = torch.arange(seq).unsqueeze(0)
    sees = k <= q
    if window > 0:
        sees = sees & (k > q - window)
    return torch.zeros(seq, seq).masked_fill(~sees, float("-inf"))


def attend(q, k, v, scale, mask):
    """softmax(q k^T scale + mask) v for (B, H, T, D) queries and (B, KV, T, D) keys and values
    (each KV head serving H / KV query heads); returns (B, T, H * D)."""
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    scores = (q @ k.transpose(-1, -2)) * scale + mask
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    y = probs @ v
    b, h, t, d = y.shape
    return y.transpose(1, 2).reshape(b, t, h * d)


class RMSNorm(torch.nn.Module):
    """Llama's and Qwen3's: the normalized row in fp32, rounded to the input's dtype, times w."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class GemmaRMSNorm(torch.nn.Module):
    """Gemma's: (1 + w) times the normalized row, in fp32, rounded once to the input's dtype."""

    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * (1.0 + self.weight.float())).to(x.dtype)


class Attention(torch.nn.Module):
    """q, k, v, o projections without biases and a norm of each query and key head (norm: the
    family's RMSNorm class) before the rotary embedding."""

    def __init__(self, c, h, kv, d, eps, norm):
        super().__init__()
        self.h, self.kv, self.d = h, kv, d
        self.q_proj = torch.nn.Linear(c, h * d, bias=False)
        self.k_proj = torch.nn.Linear(c, kv * d, bias=False)
        self.v_proj = torch.nn.Linear(c, kv * d, bias=False)
        self.o_proj = torch.nn.Linear(h * d, c, bias=False)
        self.q_norm = norm(d, eps)
        self.k_norm = norm(d, eps)

    def forward(self, x, cos, sin, mask, scale):
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, self.h, self.d)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, self.kv, self.d)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv, self.d).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        return self.o_proj(attend(q, k, v, scale, mask))


class Mlp(torch.nn.Module):
    def __init__(self, c, ffn, act):
        super().__init__()
        self.act = act
        self.gate_proj = torch.nn.Linear(c, ffn, bias=False)
        self.up_proj = torch.nn.Linear(c, ffn, bias=False)
        self.down_proj = torch.nn.Linear(ffn, c, bias=False)

    def forward(self, x):
        return self.down_proj(self.act(self.gate_proj(x)) * self.up_proj(x))


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


class Qwen3Layer(torch.nn.Module):
    def __init__(self, a, eps):
        super().__init__()
        c = a.hidden
        self.input_layernorm = RMSNorm(c, eps)
        self.self_attn = Attention(c, a.heads, a.kv_heads, head_dim(a), eps, RMSNorm)
        self.post_attention_layernorm = RMSNorm(c, eps)
        self.mlp = Mlp(c, a.ffn, F.silu)

    def forward(self, x, cos, sin, mask, scale):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, scale)
        return x + self.mlp(self.post_attention_layernorm(x))


class Gemma3Layer(torch.nn.Module):
    def __init__(self, a, eps):
        super().__init__()
        c = a.hidden
        self.input_layernorm = GemmaRMSNorm(c, eps)
        self.self_attn = Attention(c, a.heads, a.kv_heads, head_dim(a), eps, GemmaRMSNorm)
        self.post_attention_layernorm = GemmaRMSNorm(c, eps)
        self.pre_feedforward_layernorm = GemmaRMSNorm(c, eps)
        self.mlp = Mlp(c, a.ffn, gelu_tanh)
        self.post_feedforward_layernorm = GemmaRMSNorm(c, eps)

    def forward(self, x, cos, sin, mask, scale):
        h = self.self_attn(self.input_layernorm(x), cos, sin, mask, scale)
        x = x + self.post_attention_layernorm(h)
        h = self.mlp(self.pre_feedforward_layernorm(x))
        return x + self.post_feedforward_layernorm(h)


def init_like_hf(model, std=0.02):
    """Hugging Face's _init_weights for a fresh model: normal(0, std) matrices and embeddings (the
    norms keep their constructors' 1 or 0)."""
    for m in model.modules():
        if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
            torch.nn.init.normal_(m.weight, 0.0, std)


class Qwen3(torch.nn.Module):
    """Qwen3ForCausalLM: untied head, rope_theta 1e4 (Qwen3Config's default), rms_norm_eps 1e-6;
    --window > 0 slides every layer."""

    def __init__(self, a):
        super().__init__()
        eps, d = 1e-6, head_dim(a)
        self.embed_tokens = torch.nn.Embedding(a.vocab, a.hidden)
        self.layers = torch.nn.ModuleList(Qwen3Layer(a, eps) for _ in range(a.layers))
        self.norm = RMSNorm(a.hidden, eps)
        self.lm_head = torch.nn.Linear(a.hidden, a.vocab, bias=False)
        self.scale = 1.0 / math.sqrt(d)
        cos, sin = rotary_tables(d, 10000.0, a.seq)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)
        self.register_buffer("mask", additive_mask(a.seq, max(a.window, 0)))
        init_like_hf(self)

    def forward(self, ids, targets):
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin, self.mask, self.scale)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


class Gemma3(torch.nn.Module):
    """Gemma3ForCausalLM (gemma-3-1b's layout at the bench's sizes): layer l slides when
    (l + 1) % 6 != 0."""

    def __init__(self, a):
        super().__init__()
        eps, d = 1e-6, head_dim(a)
        window = a.window if a.window >= 0 else a.seq // 2
        self.sliding = [(l + 1) % 6 != 0 for l in range(a.layers)]
        self.embed_tokens = torch.nn.Embedding(a.vocab, a.hidden)
        self.register_buffer("embed_scale", torch.tensor(a.hidden ** 0.5), persistent=False)
        self.layers = torch.nn.ModuleList(Gemma3Layer(a, eps) for _ in range(a.layers))
        self.norm = GemmaRMSNorm(a.hidden, eps)
        self.scale = d ** -0.5  # query_pre_attn_scalar = head_dim
        for name, theta in (("global", 1e6), ("local", 1e4)):
            cos, sin = rotary_tables(d, theta, a.seq)
            self.register_buffer(f"cos_{name}", cos)
            self.register_buffer(f"sin_{name}", sin)
        self.register_buffer("mask_global", additive_mask(a.seq, 0))
        self.register_buffer("mask_local", additive_mask(a.seq, window))
        init_like_hf(self)

    def forward(self, ids, targets):
        x = self.embed_tokens(ids) * self.embed_scale.to(self.embed_tokens.weight.dtype)
        for layer, slides in zip(self.layers, self.sliding):
            if slides:
                x = layer(x, self.cos_local, self.sin_local, self.mask_local, self.scale)
            else:
                x = layer(x, self.cos_global, self.sin_global, self.mask_global, self.scale)
        logits = F.linear(self.norm(x), self.embed_tokens.weight)  # tied head
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def rotate_partial(z, cos, sin):
    """The rotary embedding of the first cos.shape[-1] values of (..., T, d) z (rotate-half over
    those values); the others pass through."""
    r = cos.shape[-1]
    if r == z.shape[-1]:
        return rotate(z, cos, sin)
    return torch.cat((rotate(z[..., :r], cos, sin), z[..., r:]), -1)


class Phi3Attention(torch.nn.Module):
    """One qkv_proj (no bias) whose output is split [q | k | v], partial rotary, o_proj."""

    def __init__(self, c, h, kv, d):
        super().__init__()
        self.h, self.kv, self.d = h, kv, d
        self.qkv_proj = torch.nn.Linear(c, (h + 2 * kv) * d, bias=False)
        self.o_proj = torch.nn.Linear(h * d, c, bias=False)

    def forward(self, x, cos, sin, mask, scale):
        b, t, _ = x.shape
        q, k, v = self.qkv_proj(x).split((self.h * self.d, self.kv * self.d, self.kv * self.d),
                                         dim=-1)
        q = q.view(b, t, self.h, self.d).transpose(1, 2)
        k = k.view(b, t, self.kv, self.d).transpose(1, 2)
        v = v.view(b, t, self.kv, self.d).transpose(1, 2)
        q, k = rotate_partial(q, cos, sin), rotate_partial(k, cos, sin)
        return self.o_proj(attend(q, k, v, scale, mask))


class Phi3Mlp(torch.nn.Module):
    """One gate_up_proj (no bias) whose output is chunked [gate | up]: down(up * silu(gate))."""

    def __init__(self, c, ffn):
        super().__init__()
        self.gate_up_proj = torch.nn.Linear(c, 2 * ffn, bias=False)
        self.down_proj = torch.nn.Linear(ffn, c, bias=False)

    def forward(self, x):
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(up * F.silu(gate))


class Phi3Layer(torch.nn.Module):
    def __init__(self, a, eps):
        super().__init__()
        c = a.hidden
        self.input_layernorm = RMSNorm(c, eps)
        self.self_attn = Phi3Attention(c, a.heads, a.kv_heads, head_dim(a))
        self.post_attention_layernorm = RMSNorm(c, eps)
        self.mlp = Phi3Mlp(c, a.ffn)

    def forward(self, x, cos, sin, mask, scale):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, scale)
        return x + self.mlp(self.post_attention_layernorm(x))


class Phi3(torch.nn.Module):
    """Phi3ForCausalLM laid out as Phi-4-mini: partial_rotary_factor 0.75, rope_theta 1e4,
    rms_norm_eps 1e-5, tied head; --window > 0 slides every layer (Phi3Config's
    sliding_window)."""

    def __init__(self, a):
        super().__init__()
        eps, d = 1e-5, head_dim(a)
        rotary = int(d * 0.75)
        if rotary < 2 or rotary % 2:
            raise SystemExit(f"torch_families.py: phi3 needs int(head_dim * 0.75) even ({d})")
        self.embed_tokens = torch.nn.Embedding(a.vocab, a.hidden)
        self.layers = torch.nn.ModuleList(Phi3Layer(a, eps) for _ in range(a.layers))
        self.norm = RMSNorm(a.hidden, eps)
        self.scale = d ** -0.5
        cos, sin = rotary_tables(rotary, 10000.0, a.seq)
        self.register_buffer("cos", cos)
        self.register_buffer("sin", sin)
        self.register_buffer("mask", additive_mask(a.seq, max(a.window, 0)))
        init_like_hf(self)

    def forward(self, ids, targets):
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin, self.mask, self.scale)
        logits = F.linear(self.norm(x), self.embed_tokens.weight)  # tied head
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


# --family NAME: the model class (its constructor takes torch_llama.py's parsed arguments).
FAMILIES = {"qwen3": Qwen3, "gemma3": Gemma3, "phi3": Phi3}
