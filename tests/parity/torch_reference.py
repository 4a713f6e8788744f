"""Independent PyTorch reference for kktrain's model (Hugging Face LlamaForCausalLM semantics,
the Qwen2ForCausalLM / Qwen3ForCausalLM attention variants, SmolLM3ForCausalLM's layers without
rotary and the MixtralForCausalLM / Qwen3MoeForCausalLM sparse MLPs when the dump asks for
them).

Reads a `kktrain grads` dump (parameters, batch, hyperparameters) and recomputes the loss, the
multi-token-prediction loss and every parameter gradient with autograd, in one of three modes:

  float64        the "ideal" reference: parameters (their exact stored values) and all math in
                 float64 (only the rotary angles are fp32, as the model defines them).
  float32        everything in fp32, no autocast.
  bf16_autocast  parameters as tensors of their storage dtype (fp32 or bf16), forward under
                 torch.autocast("cpu", dtype=torch.bfloat16), written the Hugging Face way:
                 RMSNorm statistics in fp32 and the result cast back to the input dtype before
                 the weight multiply; rotary cos/sin cast to the hidden-state dtype; attention
                 scores from a bf16 matmul, softmax in fp32 cast back to the query dtype;
                 logits upcast to fp32 for the loss (after Gemma 2's final-logit soft-capping
                 cap * tanh(logits / cap), in the logits' dtype, when the dump sets a cap).

Attention family features, read from root attributes of the dump (an absent attribute is
Llama's choice, so older dumps read as before):

  head_dim        int (absent: hidden_size / num_heads): q_proj (H*head_dim, C), k_proj and
                  v_proj (KV*head_dim, C), o_proj (C, H*head_dim); scores scaled by
                  head_dim^-0.5; rotary over head_dim.
  attention_bias  "none" | "qkv" | "qkvo" (absent: "none"): biases
                  `<layer>.self_attn.{q,k,v}_proj.bias` (Qwen2), plus `o_proj.bias` for "qkvo"
                  (Qwen3 / Llama with attention_bias true), added by the projection itself
                  (F.linear(x, W, b): under autocast a bf16 product with the bias cast to bf16).
  qk_norm         "none" | "per_head" | "whole" (absent: "none"): Qwen3's
                  `<layer>.self_attn.q_norm.weight` and `k_norm.weight` (head_dim,): an RMSNorm
                  over each head's head_dim values (same formula, eps and dtype handling as the
                  other RMSNorms), applied after the projection (+ bias) and the split into heads,
                  before rotary. "whole" (OLMo 2): q_norm.weight (H*head_dim,) and k_norm.weight
                  (KV*head_dim,), an RMSNorm over the whole q (k) projection output, before the
                  split into heads (statistics over all H*head_dim values of a token).
  rotary_dim      int (absent: head_dim; Phi-3's int(head_dim * partial_rotary_factor)): rotary
                  on the first rotary_dim values of each query / key head (rotate_half over those
                  values: pairs i and i + rotary_dim/2), inv_freq over rotary_dim, the other
                  head_dim - rotary_dim values pass through unrotated.
  rope_scaling    JSON (absent / null: plain rotary): llama3 (the rescaled frequencies), linear
                  (inv_freq / factor, below), or longrope {"short_factor", "long_factor"
                  (rotary_dim/2 each), "original_max_position_embeddings" n, "attention_factor"
                  a} (Phi-3):
                  inv_freq = 1 / (factors * theta ** (arange(0, R, 2) / R)) in fp32 with the long
                  factors when the forward's sequence length (transformers' max(position_ids) + 1
                  over the batch: T, or with packed rows the longest example's length) exceeds n,
                  else the short ones (one choice for the whole batch); cos
                  and sin (fp32) times a, rounded to fp32 (torch multiplies an fp32 tensor by the
                  Python float a as fp32(a)), then cast to the hidden-state dtype.
  family "phi3"   picks Phi-3's fused tensors: `<layer>.self_attn.qkv_proj.weight`
                  ((H + 2 KV) * head_dim, C) whose output rows are [q | k | v], and
                  `<layer>.mlp.gate_up_proj.weight` (2F, C), rows [gate | up]: one projection, its
                  output split (Phi3Attention / Phi3MLP), so the gradient lands on the fused tensor.
  sliding_window  int (absent or 0: none): W > 0 limits a sliding layer's query at position q to
                  the keys k with q - W < k <= q (W keys, itself included; Hugging Face's
                  masking_utils sliding_window_overlay on top of the causal mask), on top of the
                  packed-row block-diagonal mask below.
  window_layers   a string of '0' / '1', one per layer ("0011": layers 2 and 3 slide, 0 and 1
                  see every earlier key); absent with sliding_window > 0: every layer slides.
                  Ignored without a window.
  rope_layers     a string of '0' / '1', one per layer (absent: "1" * L, every layer rotates):
                  '1' applies rotary to the layer's queries and keys, '0' leaves them as
                  projected (SmolLM3's NoPE layers: config no_rope_layers[i] == 0, transformers'
                  SmolLM3Attention use_rope false); nothing else of the layer changes (same
                  scale, mask and window). The MTP blocks always rotate.

Layer-form features (Gemma 2 / Gemma 3, OLMo 2), read from root attributes the same way (an
absent attribute is Llama's choice):

  norm_weight     "plain" | "fp32" | "one_plus_fp32" (absent: "plain"), every RMSNorm (layer
                  norms, final norm, q/k norms, MTP norms): plain = Llama, rnd(x * rstd, input
                  dtype) * w; fp32 = OLMo 2, rnd(w * (x * rstd), input dtype) with the weight cast
                  to the statistics dtype; one_plus_fp32 = Gemma, rnd((x * rstd) * (1 + w), input
                  dtype) with 1 + w formed in the statistics dtype. (Statistics dtype: fp32, or
                  float64 in the float64 reference.)
  norm_placement  "pre" | "sandwich" | "post" (absent: "pre"): pre = Llama; sandwich = Gemma,
                  h = x + post_attention_layernorm(attn(input_layernorm(x))),
                  out = h + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(h)));
                  post = OLMo 2, h = x + post_attention_layernorm(attn(x)),
                  out = h + post_feedforward_layernorm(mlp(h)) (no input_layernorm).
  mlp_activation  "silu" | "gelu_tanh" (absent: "silu"): act(gate) * up. gelu_tanh is
                  F.gelu(x, approximate="tanh") (transformers' gelu_pytorch_tanh) computed in fp32
                  from the bf16 gate and rounded once to bf16 under autocast (what the CUDA kernel
                  and recent CPU kernels do; the CPU bf16 kernel of old torch versions rounds
                  inside and is off by up to 100% near its zeros).
  embed_scale     "none" | "sqrt_hidden" (absent: "none"): the input embeddings (never the tied
                  LM head) times sqrt(hidden_size), the factor a tensor of the embedding's storage
                  dtype (transformers: torch.tensor(sqrt(C), dtype=embedding output dtype), the
                  embedding output having the weight's dtype; bf16 storage: sqrt(C) rounded to
                  bf16, e.g. sqrt(3072) -> 55.5), the same value in every mode.
  query_pre_attn_scalar  float (absent or 0: head_dim): scores scaled by its ** -0.5.
  attn_logit_softcapping float (absent or 0: none): scores = tanh(scores / cap) * cap, after the
                  scaling and before the mask, each step in the scores' dtype (bf16 under
                  autocast), as transformers' eager attention writes it.
  rope_layers     may also hold '2': rotary with rope_local_theta (float attribute), unscaled
                  (Gemma 3's sliding layers); '1' layers use rope_theta with rope_scaling (llama3,
                  linear: {"rope_type": "linear", "factor": f}, inv_freq / f, or longrope).

Mixture of experts (moe_num_experts E > 0: every layer's MLP sparse; attributes moe_top_k,
moe_intermediate_size, moe_norm_topk_prob, moe_shared_expert_intermediate_size,
moe_aux_loss_coef): the router, the k experts and the load-balancing loss are computed the same
way for both families; the attribute `family` picks the tensor names:

  family "qwen3_moe"  Qwen3MoeForCausalLM: router `<layer>.mlp.gate.weight` (E, C), expert e
                      `<layer>.mlp.experts.{e}.gate_proj.weight` (F, C), `up_proj` (F, C),
                      `down_proj` (C, F) (F = moe_intermediate_size); no shared expert.
  any other           Mixtral's: `<layer>.block_sparse_moe.gate.weight`, experts `w1` (gate),
                      `w3` (up), `w2` (down), and kktrain's optional
                      `block_sparse_moe.shared_expert.{gate,up,down}_proj.weight`.

Both are Hugging Face's routing (softmax over all E in fp32, top-k, the k probabilities
divided by their sum only with moe_norm_topk_prob; Mixtral always sets it) at kktrain's
documented precision (router input, logits, weights and the combine in fp32 in every mode;
transformers casts the weights to the hidden dtype and sums the experts in it, which only a
bf16 model changes). The total differentiated is loss + moe_aux_loss_coef * aux_loss (the
dump's coefficient: 0 for a Qwen3-MoE config with output_router_logits false); the aux loss
itself is reported unweighted, like the file's /aux_loss.

Packed rows (a dump with /batch/starts, from examples data): token t of a row belongs to the
example that begins at starts[b, t]; its attention sees keys [start, t] of its row only (a
block-diagonal causal mask) and its rotary position is t - start (cos/sin gathered per token).
Targets < 0 (padding, tokens outside the loss) are ignored. Without /batch/starts every row is
one sequence. A sliding layer's window counts row positions (starts only narrow it further).

Plain torch only (no transformers import). Usable as a library (`load_dump`, `reference`) or
from the command line: `torch_reference.py FILE.h5 [--mode float64]` prints the losses.
"""
from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import h5py
import numpy as np
import torch
import torch.nn.functional as F

MODES = ("float64", "float32", "bf16_autocast")
ATTENTION_BIAS = ("none", "qkv", "qkvo")  # dump attribute attention_bias
QK_NORM = ("none", "per_head", "whole")  # dump attribute qk_norm
NORM_WEIGHT = ("plain", "fp32", "one_plus_fp32")  # dump attribute norm_weight
NORM_PLACEMENT = ("pre", "sandwich", "post")  # dump attribute norm_placement
MLP_ACTIVATION = ("silu", "gelu_tanh")  # dump attribute mlp_activation
EMBED_SCALE = ("none", "sqrt_hidden")  # dump attribute embed_scale
IGNORE = -100


def _text(v) -> str:
    return v.decode() if isinstance(v, (bytes, np.bytes_)) else str(v)


@dataclass
class Dump:
    """The contents of a `kktrain grads` file."""

    attrs: Dict[str, object]
    params: Dict[str, np.ndarray]  # canonical name -> fp32 values
    storage: Dict[str, str]  # canonical name -> "float32" / "bfloat16"
    aliases: Dict[str, str]  # alias name -> owner name (e.g. lm_head.weight -> embed)
    grads: Dict[str, np.ndarray]  # canonical name -> fp32 gradient (trainable parameters)
    input_ids: np.ndarray  # (B, T) int
    targets: np.ndarray  # (B, T) int
    loss: float
    mtp_loss: Optional[float] = None
    aux_loss: Optional[float] = None  # mixture of experts: the load-balancing loss
    choices: List[np.ndarray] = field(default_factory=list)  # per sparse layer (B*T, K) experts
    starts: Optional[np.ndarray] = None  # (B, T) int: each token's example start (packed rows)
    # (B, T, 2) int: keys [g0, g1) a token does not see (a preference pair's rejected side after
    # its chosen side, sharing their prompt); rotary positions skip them too
    gaps: Optional[np.ndarray] = None

    # hyperparameters
    @property
    def V(self) -> int:
        return int(self.attrs["vocab_size"])

    @property
    def C(self) -> int:
        return int(self.attrs["hidden_size"])

    @property
    def L(self) -> int:
        return int(self.attrs["num_layers"])

    @property
    def H(self) -> int:
        return int(self.attrs["num_heads"])

    @property
    def KV(self) -> int:
        return int(self.attrs["num_kv_heads"])

    @property
    def K(self) -> int:
        return int(self.attrs.get("mtp_num_layers", 0))

    @property
    def E(self) -> int:  # experts of a sparse MLP (0: dense)
        return int(self.attrs.get("moe_num_experts", 0))

    @property
    def family(self) -> str:
        """model.family ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe"; absent: llama)."""
        return _text(self.attrs.get("family", "llama"))

    @property
    def softcap(self) -> Optional[float]:
        """model.final_logit_softcapping (None: off; kktrain writes the attribute only when on)."""
        v = float(self.attrs.get("final_logit_softcapping", 0.0))
        return v if v > 0 else None

    @property
    def head_dim(self) -> int:
        """Per-head width (attribute head_dim; absent: hidden_size / num_heads)."""
        if "head_dim" not in self.attrs:
            return self.C // self.H
        v = int(self.attrs["head_dim"])
        if v <= 0 or v % 2:
            raise ValueError(f"head_dim {v}: must be a positive even number (rotary pairs)")
        return v

    @property
    def attention_bias(self) -> str:
        """Which attention projections carry a bias: none | qkv (Qwen2) | qkvo."""
        v = _text(self.attrs.get("attention_bias", "none"))
        if v not in ATTENTION_BIAS:
            raise ValueError(f"attention_bias {v!r} is not one of {ATTENTION_BIAS}")
        return v

    @property
    def qk_norm(self) -> str:
        """none | per_head (Qwen3: RMSNorm of each query / key head before rotary) | whole
        (OLMo 2: RMSNorm of the whole q / k projection output, before the split into heads)."""
        v = _text(self.attrs.get("qk_norm", "none"))
        if v not in QK_NORM:
            raise ValueError(f"qk_norm {v!r} is not one of {QK_NORM}")
        return v

    @property
    def rotary_dim(self) -> int:
        """How many of each head's values rotate (attribute rotary_dim; absent: head_dim)."""
        if "rotary_dim" not in self.attrs:
            return self.head_dim
        v = int(self.attrs["rotary_dim"])
        if v <= 0 or v % 2 or v > self.head_dim:
            raise ValueError(f"rotary_dim {v}: must be a positive even number <= head_dim "
                             f"{self.head_dim}")
        return v

    @property
    def sliding_window(self) -> int:
        """W > 0: sliding layers see the last W keys (themselves included); 0: no window."""
        v = int(self.attrs.get("sliding_window", 0))
        if v < 0:
            raise ValueError(f"sliding_window {v}: must be >= 0 (0: none)")
        return v

    @property
    def window_layers(self) -> str:
        """'0'/'1' per layer: which layers slide ("0" * L without a window; "1" * L for a
        window without the attribute)."""
        if self.sliding_window == 0:
            return "0" * self.L
        v = _text(self.attrs.get("window_layers", "1" * self.L))
        if len(v) != self.L or set(v) - set("01"):
            raise ValueError(f"window_layers {v!r}: must be {self.L} characters of 0 / 1")
        return v

    @property
    def rope_layers(self) -> str:
        """'0'/'1'/'2' per layer: no rotary / rotary with rope_theta and rope_scaling / rotary
        with rope_local_theta unscaled ("1" * L without the attribute)."""
        v = _text(self.attrs.get("rope_layers", "1" * self.L))
        if len(v) != self.L or set(v) - set("012"):
            raise ValueError(f"rope_layers {v!r}: must be {self.L} characters of 0 / 1 / 2")
        return v

    @property
    def rope_local_theta(self) -> Optional[float]:
        """Gemma 3's rope_local_base_freq: the theta of the rope_layers '2' layers (None: absent)."""
        v = float(self.attrs.get("rope_local_theta", 0.0))
        return v if v > 0 else None

    def _choice(self, key: str, choices, default: str) -> str:
        v = _text(self.attrs.get(key, default))
        if v not in choices:
            raise ValueError(f"{key} {v!r} is not one of {choices}")
        return v

    @property
    def norm_weight(self) -> str:
        """plain (Llama) | fp32 (OLMo 2) | one_plus_fp32 (Gemma): how every RMSNorm applies its
        weight."""
        return self._choice("norm_weight", NORM_WEIGHT, "plain")

    @property
    def norm_placement(self) -> str:
        """pre (Llama) | sandwich (Gemma 2/3) | post (OLMo 2): where a layer's norms sit."""
        return self._choice("norm_placement", NORM_PLACEMENT, "pre")

    @property
    def mlp_activation(self) -> str:
        """silu | gelu_tanh: the activation of the gated MLP's gate."""
        return self._choice("mlp_activation", MLP_ACTIVATION, "silu")

    @property
    def embed_scale(self) -> str:
        """none | sqrt_hidden: the input embeddings times sqrt(hidden_size) (Gemma)."""
        return self._choice("embed_scale", EMBED_SCALE, "none")

    @property
    def query_pre_attn_scalar(self) -> Optional[float]:
        """Scores scale = query_pre_attn_scalar ** -0.5 (None: absent or 0, head_dim's)."""
        v = float(self.attrs.get("query_pre_attn_scalar", 0.0))
        if v < 0:
            raise ValueError(f"query_pre_attn_scalar {v}: must be positive (0: head_dim)")
        return v if v > 0 else None

    @property
    def attn_softcap(self) -> Optional[float]:
        """attn_logit_softcapping (None: absent or 0, no attention soft-capping)."""
        v = float(self.attrs.get("attn_logit_softcapping", 0.0))
        if v < 0:
            raise ValueError(f"attn_logit_softcapping {v}: must be positive (0: none)")
        return v if v > 0 else None

    @property
    def compute_mtp(self) -> bool:
        return bool(int(self.attrs.get("compute_mtp", 1)))

    @property
    def compute_dtype(self) -> str:
        return _text(self.attrs["compute_dtype"])

    @property
    def storage_dtype(self) -> str:
        return _text(self.attrs["storage_dtype"])


def load_dump(path: str) -> Dump:
    with h5py.File(path, "r") as f:
        attrs = {k: (_text(v) if isinstance(v, (bytes, np.bytes_, str)) else v.item()
                     if hasattr(v, "item") else v) for k, v in f.attrs.items()}
        params, storage, aliases, grads = {}, {}, {}, {}
        for name, ds in f["params"].items():
            params[name] = np.asarray(ds[()], dtype=np.float32)
            storage[name] = _text(ds.attrs.get("storage_dtype", attrs["storage_dtype"]))
            if "alias" in ds.attrs:
                aliases[_text(ds.attrs["alias"])] = name
        if "grads" in f:
            for name, ds in f["grads"].items():
                grads[name] = np.asarray(ds[()], dtype=np.float32)
        mtp_loss = float(f["mtp_loss"][()]) if "mtp_loss" in f else None
        aux_loss = float(f["aux_loss"][()]) if "aux_loss" in f else None
        choices = []
        if "moe" in f:
            n = len(f["moe"].keys())
            choices = [np.asarray(f[f"moe/choice_layer_{i}"][()]) for i in range(n)]
        starts = (np.asarray(f["batch/starts"][()], dtype=np.int64) if "batch/starts" in f
                   else None)
        gaps = (np.asarray(f["batch/gaps"][()], dtype=np.int64) if "batch/gaps" in f else None)
        return Dump(attrs=attrs, params=params, storage=storage, aliases=aliases, grads=grads,
                    input_ids=np.asarray(f["batch/input_ids"][()], dtype=np.int64),
                    targets=np.asarray(f["batch/targets"][()], dtype=np.int64),
                    loss=float(f["loss"][()]), mtp_loss=mtp_loss, aux_loss=aux_loss,
                    choices=choices, starts=starts, gaps=gaps)


# ---- building blocks -------------------------------------------------------------------------


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float, stat_dtype: torch.dtype):
    """HF LlamaRMSNorm: statistics in (at least) fp32, cast back to the input dtype, times w."""
    in_dtype = x.dtype
    xs = x.to(stat_dtype)
    rstd = torch.rsqrt(xs.pow(2).mean(-1, keepdim=True) + eps)
    return w * (xs * rstd).to(in_dtype)


def rms_norm_fp32_weight(x: torch.Tensor, w: torch.Tensor, eps: float, stat_dtype: torch.dtype):
    """HF Olmo2RMSNorm: statistics in (at least) fp32, the weight (cast to that dtype) times the
    normalized values there, then one rounding to the input dtype."""
    in_dtype = x.dtype
    xs = x.to(stat_dtype)
    rstd = torch.rsqrt(xs.pow(2).mean(-1, keepdim=True) + eps)
    return (w.to(stat_dtype) * (xs * rstd)).to(in_dtype)


def rms_norm_one_plus(x: torch.Tensor, w: torch.Tensor, eps: float, stat_dtype: torch.dtype):
    """HF Gemma2RMSNorm / Gemma3RMSNorm: statistics in (at least) fp32, times (1 + w) formed in
    that dtype, then one rounding to the input dtype."""
    in_dtype = x.dtype
    xs = x.to(stat_dtype)
    rstd = torch.rsqrt(xs.pow(2).mean(-1, keepdim=True) + eps)
    return ((xs * rstd) * (1.0 + w.to(stat_dtype))).to(in_dtype)


def rope_type(scaling: Optional[dict]) -> Optional[str]:
    """The rope_scaling dict's type (rope_type, or the older key type); None for no scaling
    (null, or the type "default")."""
    if not scaling:
        return None
    t = scaling.get("rope_type", scaling.get("type"))
    return None if t in (None, "default") else t


def hf_inv_freq(D: int, theta: float, scaling: Optional[dict]) -> torch.Tensor:
    """modeling_rope_utils: _compute_default_rope_parameters, then _compute_linear_scaling_rope_
    parameters (inv_freq / factor) or _compute_llama3_parameters, written from their formulas
    (fp32 tensors, Python scalars)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    kind = rope_type(scaling)
    if kind == "linear":
        return inv_freq / float(scaling["factor"])
    if kind not in (None, "llama3"):
        raise ValueError(f"rope_scaling {scaling}: type {kind!r} is not supported")
    return hf_llama3_rescale(inv_freq, scaling)


def hf_llama3_rescale(inv_freq: torch.Tensor, scaling: Optional[dict]) -> torch.Tensor:
    """_compute_llama3_parameters' rescaling of the default frequencies (unchanged without
    llama3 scaling)."""
    if not scaling or scaling.get("rope_type", scaling.get("type")) in (None, "default"):
        return inv_freq
    factor = scaling["factor"]
    low_freq_factor = scaling["low_freq_factor"]
    high_freq_factor = scaling["high_freq_factor"]
    old_context_len = scaling["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor -
                                                                      low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def is_longrope(scaling: Optional[dict]) -> bool:
    """A longrope rope_scaling (Phi-3; its older names "su" and "yarn" are read as longrope by
    Phi3Config, but a dump carries the resolved name)."""
    return bool(scaling) and scaling.get("rope_type", scaling.get("type")) == "longrope"


def hf_longrope_inv_freq(D: int, theta: float, scaling: dict, seq_len: int) -> torch.Tensor:
    """_compute_longrope_parameters' frequencies for a forward of sequence length seq_len
    (transformers' dynamic update: max(position_ids) + 1): the long factors when seq_len >
    original_max_position_embeddings, else the short ones, over the D rotary values, all fp32:
    1 / (factors * theta ** (arange(0, D, 2) / D))."""
    n = int(scaling["original_max_position_embeddings"])
    factors = scaling["long_factor"] if seq_len > n else scaling["short_factor"]
    ext = torch.tensor([float(f) for f in factors], dtype=torch.float32)
    if ext.numel() != D // 2:
        raise ValueError(f"longrope factors: {ext.numel()} values, rotary_dim {D} needs {D // 2}")
    shape = torch.arange(0, D, 2, dtype=torch.int64).float() / D
    return 1.0 / (ext * theta ** shape)


def rope_tables(T: int, D: int, theta: float, dtype: torch.dtype, scaling: Optional[dict] = None,
                positions: Optional[torch.Tensor] = None):
    """cos, sin (T, D): inv_freq and angles in fp32 (HF LlamaRotaryEmbedding; llama3 scaling
    when given). `positions` (B, T) int: per-token positions instead, giving (B, 1, T, D).
    D is the rotary width (head_dim, or Phi-3's rotary_dim). Longrope scaling: the factors of
    sequence length max(positions) + 1 (T without positions), cos and sin times the resolved
    attention_factor in fp32 (float64 in the float64 reference), then cast to `dtype`."""
    longrope = is_longrope(scaling)
    if longrope:
        seq_len = T if positions is None else int(positions.max()) + 1
        inv_freq = hf_longrope_inv_freq(D, theta, scaling, seq_len)  # fp32
    else:
        inv_freq = hf_inv_freq(D, theta, scaling)  # fp32
    pos = torch.arange(T, dtype=torch.int64).float() if positions is None else positions.float()
    angle = pos[..., None] * inv_freq  # (.., T, D/2) fp32, one rounding (HF: K=1 matmul)
    if positions is not None:
        angle = angle[:, None]  # (B, 1, T, D/2): broadcast over heads
    emb = torch.cat((angle, angle), dim=-1)  # (T, D)
    if longrope:
        a = float(scaling["attention_factor"])
        if dtype == torch.float64:
            return emb.double().cos() * a, emb.double().sin() * a
        return (emb.cos() * a).to(dtype), (emb.sin() * a).to(dtype)  # fp32 product, then cast
    if dtype == torch.float64:
        return emb.double().cos(), emb.double().sin()
    return emb.cos().to(dtype), emb.sin().to(dtype)  # HF: computed in fp32, cast to x.dtype


def attention_mask(T: int, starts: Optional[torch.Tensor], window: int = 0,
                   gaps: Optional[torch.Tensor] = None) -> torch.Tensor:
    """True where query t may read key s: causal (s <= t), with a window W > 0 also s > t - W
    (the last W keys, t itself included), and with per-token example starts (B, T) also
    s >= starts[b, t] (block-diagonal). (T, T), or (B, 1, T, T) with starts."""
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    if window > 0:
        pos = torch.arange(T)
        causal = causal & (pos[None, :] > pos[:, None] - window)  # [query, key]
    if starts is None:
        return causal
    key = torch.arange(T)
    own = key[None, None, :] >= starts[:, :, None]  # (B, T query, T key)
    if gaps is not None:  # keys [g0, g1) of a query's gap are not seen
        own = own & ~((key[None, None, :] >= gaps[:, :, 0:1]) & (key[None, None, :] < gaps[:, :, 1:2]))
    return (causal[None] & own)[:, None]


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Reference:
    """The model as a function of a dict of parameter tensors."""

    def __init__(self, dump: Dump, mode: str):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        self.d, self.mode = dump, mode
        self.eps = float(dump.attrs["rms_norm_eps"])
        self.theta = float(dump.attrs["rope_theta"])
        # llama3, linear, longrope (attention_factor resolved) or None
        self.scaling = json.loads(dump.attrs.get("rope_scaling") or "null")
        self.D = dump.head_dim
        self.R = dump.rotary_dim  # each head's rotated values (Phi-3 partial rotary: < D)
        self.bias = dump.attention_bias  # which projections add a bias
        self.qk_norm = dump.qk_norm == "per_head"
        self.qk_norm_whole = dump.qk_norm == "whole"  # OLMo 2
        self.fused = dump.family == "phi3"  # qkv_proj / gate_up_proj tensor names
        # statistics (norm, softmax, loss) dtype: fp32 except in the float64 reference
        self.stat = torch.float64 if mode == "float64" else torch.float32
        self.w: Dict[str, torch.Tensor] = {}
        self.router_probs: List[torch.Tensor] = []  # per sparse layer: (N, E) softmax
        self.router_choice: List[torch.Tensor] = []  # per sparse layer: (N, K) chosen experts
        # the sparse MLP's module and its experts' (gate, up, down) names, by family
        if dump.family == "qwen3_moe":
            self.moe_module, self.expert_names = "mlp.", ("gate_proj", "up_proj", "down_proj")
        else:
            self.moe_module, self.expert_names = "block_sparse_moe.", ("w1", "w3", "w2")
        for name, values in dump.params.items():
            if mode == "float64":
                dt = torch.float64
            elif mode == "float32":
                dt = torch.float32
            else:
                dt = torch.bfloat16 if dump.storage[name] == "bfloat16" else torch.float32
            t = torch.from_numpy(values.copy()).to(dt)  # bf16 values convert exactly
            self.w[name] = t.requires_grad_(True)
        for alias, owner in dump.aliases.items():
            self.w.setdefault(alias, self.w[owner])  # a tied LM head is the embedding tensor

    def p(self, name: str) -> torch.Tensor:
        return self.w[name]

    # -- layers --
    def linear(self, x, name, bias: Optional[str] = None):
        """x W^T (+ b): nn.Linear's one F.linear call, so under autocast the bias is cast to
        bf16 and added inside the bf16 product, as Hugging Face's biased projections do."""
        return F.linear(x, self.p(name), None if bias is None else self.p(bias))

    def proj(self, x, prefix, which):
        """The attention projection `which` (q, k, v, o) with its bias when the dump has one."""
        has_bias = (self.bias == "qkvo") or (self.bias == "qkv" and which != "o")
        name = f"{prefix}{which}_proj."
        if not has_bias:  # linear(x, name): the form subclasses (test_peft's LoRA) override
            return self.linear(x, name + "weight")
        return self.linear(x, name + "weight", name + "bias")

    def norm(self, x, name):
        """The RMSNorm `name` (its weight applied as the dump's norm_weight says)."""
        kind = self.d.norm_weight
        if kind == "one_plus_fp32":
            return rms_norm_one_plus(x, self.p(name), self.eps, self.stat)
        if kind == "fp32":
            return rms_norm_fp32_weight(x, self.p(name), self.eps, self.stat)
        return rms_norm(x, self.p(name), self.eps, self.stat)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """The input embeddings of `ids` (B, T): the embedding rows, times sqrt(hidden_size) with
        embed_scale sqrt_hidden. The factor is sqrt(C) as an fp32 tensor rounded to the
        embedding's storage dtype (transformers' Gemma 2 torch.tensor(C ** 0.5, dtype=h.dtype)
        and Gemma 3 embed_scale.to(weight.dtype), h having the weight's dtype), so a bf16
        embedding's factor is bf16 in every mode; the product is in the embedding output's
        dtype."""
        name = "model.embed_tokens.weight"
        h = F.embedding(ids, self.p(name))
        if self.d.embed_scale == "none":
            return h
        stored = torch.bfloat16 if self.d.storage.get(name) == "bfloat16" else torch.float32
        factor = torch.tensor(self.d.C ** 0.5, dtype=torch.float32).to(stored).to(h.dtype)
        return h * factor

    def rope(self, kind: str, T: int, dtype: torch.dtype, positions=None):
        """cos, sin (over the rotary_dim values) of the rope_layers kind '1' (rope_theta,
        rope_scaling: llama3, linear, or longrope with its factors chosen by this forward's
        length) or '2' (rope_local_theta, unscaled: Gemma 3's local rotary)."""
        if kind == "1":
            return rope_tables(T, self.R, self.theta, dtype, self.scaling, positions)
        if kind == "2":
            if self.d.rope_local_theta is None:
                raise ValueError("a rope_layers '2' layer without rope_local_theta")
            return rope_tables(T, self.R, self.d.rope_local_theta, dtype, None, positions)
        raise ValueError(f"rope kind {kind!r}")

    def layer_tables(self, T: int, dtype: torch.dtype, positions=None) -> List[tuple]:
        """Each layer's rotary tables (cos, sin) as the dump's rope_layers says ('0': (None,
        None), attention then skips the rotation), in `dtype` (the hidden state's, as transformers
        casts them); `positions` (B, T) for packed rows."""
        kinds = self.d.rope_layers
        tables = {k: self.rope(k, T, dtype, positions) for k in sorted(set(kinds) - {"0"})}
        return [tables.get(k, (None, None)) for k in kinds]

    def layer_masks(self, T: int, starts: Optional[torch.Tensor] = None,
                    gaps: Optional[torch.Tensor] = None) -> List[torch.Tensor]:
        """Each layer's attention mask: the sliding one for the dump's window_layers, else the
        full causal (block-diagonal with starts, without gaps' keys) one."""
        full = attention_mask(T, starts, 0, gaps)
        W, which = self.d.sliding_window, self.d.window_layers
        slide = attention_mask(T, starts, W, gaps) if "1" in which else None
        return [slide if c == "1" else full for c in which]

    def qkv(self, n, prefix):
        """The q, k, v projections (B, T, H*D / KV*D each): three (with their biases), or Phi-3's
        one fused qkv_proj whose output is split [q | k | v] (as Phi3Attention slices it)."""
        if not self.fused:
            return (self.proj(n, prefix, "q"), self.proj(n, prefix, "k"),
                    self.proj(n, prefix, "v"))
        if self.bias != "none":
            raise ValueError("attention biases with Phi-3's fused qkv_proj: not defined")
        nq, nkv = self.d.H * self.D, self.d.KV * self.D
        qkv = self.linear(n, prefix + "qkv_proj.weight")
        return qkv[..., :nq], qkv[..., nq:nq + nkv], qkv[..., nq + nkv:]

    def rotary(self, x, cos, sin):
        """x (B, heads, T, D) rotated by cos / sin (.., T, R): all D values when R == D, else
        the first R (rotate_half over those R) with the other D - R passed through (Phi-3)."""
        if self.R == self.D:
            return x * cos + rotate_half(x) * sin
        x_rot, x_pass = x[..., :self.R], x[..., self.R:]
        return torch.cat((x_rot * cos + rotate_half(x_rot) * sin, x_pass), dim=-1)

    def attention(self, n, prefix, cos, sin, mask=None):
        B, T, _ = n.shape
        H, KV, D = self.d.H, self.d.KV, self.D
        q, k, v = self.qkv(n, prefix)
        if self.qk_norm_whole:  # OLMo 2: the whole projection output, before the heads' split
            q = self.norm(q, prefix + "q_norm.weight")
            k = self.norm(k, prefix + "k_norm.weight")
        q = q.view(B, T, H, D)
        k = k.view(B, T, KV, D)
        v = v.view(B, T, KV, D).transpose(1, 2)
        if self.qk_norm:  # Qwen3: each head normalized over its D values, before rotary
            q = self.norm(q, prefix + "q_norm.weight")
            k = self.norm(k, prefix + "k_norm.weight")
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        if cos is not None:  # None: a layer without rotary (rope_layers '0')
            q = self.rotary(q, cos, sin)
            k = self.rotary(k, cos, sin)
        rep = H // KV  # query head h reads kv head h // rep (HF repeat_kv)
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        scalar = self.d.query_pre_attn_scalar  # Gemma; None: head_dim
        scale = D ** -0.5 if scalar is None else scalar ** -0.5  # HF: a Python float
        scores = torch.matmul(q, k.transpose(2, 3)) * scale
        cap = self.d.attn_softcap
        if cap is not None:  # Gemma 2's eager attention: after the scaling, before the mask
            scores = scores / cap
            scores = torch.tanh(scores)
            scores = scores * cap
        if mask is None:  # every row one sequence
            mask = attention_mask(T, None)
        scores = scores.masked_fill(~mask, float("-inf"))
        probs = F.softmax(scores, dim=-1, dtype=self.stat).to(q.dtype)
        o = torch.matmul(probs, v)  # (B, H, T, D)
        o = o.transpose(1, 2).reshape(B, T, H * D)
        return self.proj(o, prefix, "o")

    def act(self, g):
        """The gate's activation: SiLU, or tanh-approximated GELU (computed in fp32 from a bf16
        gate and rounded once, as the CUDA kernel does)."""
        if self.d.mlp_activation == "gelu_tanh":
            if g.dtype in (torch.float32, torch.float64):
                return F.gelu(g, approximate="tanh")
            return F.gelu(g.float(), approximate="tanh").to(g.dtype)
        return F.silu(g)

    def gate_up(self, x, prefix):
        """The MLP's gate and up projections: two, or Phi-3's one fused gate_up_proj whose output
        is split [gate | up] (Phi3MLP's chunk(2))."""
        if not self.fused:
            return (self.linear(x, prefix + "gate_proj.weight"),
                    self.linear(x, prefix + "up_proj.weight"))
        g, u = self.linear(x, prefix + "gate_up_proj.weight").chunk(2, dim=-1)
        return g, u

    def mlp(self, x, prefix):
        g, u = self.gate_up(x, prefix)
        return self.linear(self.act(g) * u, prefix + "down_proj.weight")

    def sparse_mlp(self, x, prefix):
        """Mixtral's / Qwen3-MoE's sparse MLP written plainly (a loop over experts), with
        kktrain's documented precision: the router in fp32 (autocast off), the combine weights
        and the sum over the k experts in fp32, the experts in the compute dtype. Returns y in
        the statistics dtype. `prefix` is the module (`<layer>.block_sparse_moe.` or
        `<layer>.mlp.`); the expert projections are named by self.expert_names."""
        a = self.d.attrs
        E, K = int(a["moe_num_experts"]), int(a["moe_top_k"])
        B, T, C = x.shape
        xf = x.reshape(B * T, C)
        with torch.autocast("cpu", enabled=False):
            logits = F.linear(xf.to(self.stat), self.p(prefix + "gate.weight").to(self.stat))
            probs = F.softmax(logits, dim=-1)
        w, sel = torch.topk(probs, K, dim=-1)  # (N, K), best first
        if int(a["moe_norm_topk_prob"]):
            w = w / w.sum(dim=-1, keepdim=True)
        self.router_probs.append(probs)
        self.router_choice.append(sel)
        outs = {}  # (token, choice) -> its expert's output, expert by expert
        ye = None
        for e in range(E):
            tok, kk = torch.nonzero(sel == e, as_tuple=True)
            if tok.numel() == 0:
                continue
            ex = f"{prefix}experts.{e}."
            gate, up, down = self.expert_names
            g = self.linear(xf[tok], ex + gate + ".weight")
            u = self.linear(xf[tok], ex + up + ".weight")
            out = self.linear(F.silu(g) * u, ex + down + ".weight")
            if ye is None:
                ye = torch.zeros(B * T, K, C, dtype=out.dtype)
            ye = ye.index_put((tok, kk), out)
        y = torch.zeros(B * T, C, dtype=self.stat)
        if int(a.get("moe_shared_expert_intermediate_size", 0)) > 0:
            if self.d.family == "qwen3_moe":
                raise ValueError("a shared expert in a qwen3_moe dump: Qwen3-MoE has none")
            y = y + self.mlp(xf, prefix + "shared_expert.").to(self.stat)
        for k in range(K):
            y = y + w[:, k:k + 1] * ye[:, k].to(self.stat)
        return y.reshape(B, T, C)

    def aux_loss(self):
        """Mixtral's (and Qwen3-MoE's, the same function) load-balancing loss over all layers'
        router outputs pooled, unweighted."""
        if not self.router_probs:
            return None
        E = self.d.E
        probs = torch.cat(self.router_probs, dim=0)  # (L N, E)
        sel = torch.cat(self.router_choice, dim=0)  # (L N, K)
        mask = F.one_hot(sel, E).to(probs.dtype)  # (L N, K, E)
        tokens_per_expert = mask.mean(dim=0)  # (K, E)
        prob_per_expert = probs.mean(dim=0)  # (E)
        return E * torch.sum(tokens_per_expert * prob_per_expert.unsqueeze(0))

    def block(self, h, prefix, cos, sin, mask=None):
        place = self.d.norm_placement
        if place != "pre":  # Gemma's sandwich, OLMo 2's post: each sublayer's output normalized
            if self.d.E > 0:
                raise ValueError(f"norm_placement {place} with a sparse MLP: not defined")
            x = h if place == "post" else self.norm(h, prefix + "input_layernorm.weight")
            a = self.attention(x, prefix + "self_attn.", cos, sin, mask)
            h = h + self.norm(a, prefix + "post_attention_layernorm.weight")
            x = h if place == "post" else self.norm(h, prefix + "pre_feedforward_layernorm.weight")
            return h + self.norm(self.mlp(x, prefix + "mlp."),
                                 prefix + "post_feedforward_layernorm.weight")
        h = h + self.attention(self.norm(h, prefix + "input_layernorm.weight"), prefix + "self_attn.",
                               cos, sin, mask)
        n = self.norm(h, prefix + "post_attention_layernorm.weight")
        if self.d.E > 0:
            # the fp32 combine joins the residual stream with one rounding to the stream dtype
            return (h.to(self.stat) + self.sparse_mlp(n, prefix + self.moe_module)).to(h.dtype)
        h = h + self.mlp(n, prefix + "mlp.")
        return h

    def head_logits(self, h, norm_name):
        """Logits of the final hidden states h: norm, LM head, then Gemma's final-logit
        soft-capping in the logits' dtype (bf16 under autocast) when the dump sets a cap."""
        logits = self.linear(self.norm(h, norm_name), "lm_head.weight")
        cap = self.d.softcap
        if cap is not None:  # Gemma2ForCausalLM / Gemma3ForCausalLM
            logits = torch.tanh(logits / cap) * cap
        return logits

    def head_loss(self, h, norm_name, targets):
        logits = self.head_logits(h, norm_name)
        logits = logits.to(self.stat)  # HF: logits.float() before the loss
        targets = torch.where(targets < 0, torch.full_like(targets, IGNORE), targets)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                               ignore_index=IGNORE, reduction="mean")

    # -- model --
    def hidden(self, ids: torch.Tensor, starts: Optional[torch.Tensor] = None,
               gaps: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The last layer's hidden states (before the final norm) for token ids (B, T): input
        embeddings, then every layer with its rotary tables (layer_tables) and mask (layer_masks);
        `starts` (B, T): packed rows (per-example positions and block-diagonal masks); `gaps`
        (B, T, 2): keys each token does not see, which its position does not count either."""
        T = ids.shape[1]
        h = self.embed(ids)
        positions = None if starts is None else torch.arange(T)[None, :] - starts
        if gaps is not None:
            positions = positions - (gaps[:, :, 1] - gaps[:, :, 0])
        tables = self.layer_tables(T, h.dtype, positions)
        masks = self.layer_masks(T, starts, gaps)
        for i in range(self.d.L):
            h = self.block(h, f"model.layers.{i}.", *tables[i], masks[i])
        return h

    def forward(self):
        d = self.d
        ids = torch.from_numpy(d.input_ids)
        tgt = torch.from_numpy(d.targets)
        B, T = ids.shape
        starts = None if d.starts is None else torch.from_numpy(d.starts)
        if d.K > 0 and d.compute_mtp:
            if starts is not None:
                raise ValueError("packed rows (/batch/starts) with an MTP head: not defined")
            if "1" in d.window_layers:
                raise ValueError("a sliding window with an MTP head: not defined")
            if d.norm_placement != "pre" or d.embed_scale != "none":
                raise ValueError(f"an MTP head with norm_placement {d.norm_placement} / "
                                 f"embed_scale {d.embed_scale}: not defined")
        h = self.hidden(ids, starts)
        loss = self.head_loss(h, "model.norm.weight", tgt)
        mtp_loss = None
        if d.K > 0 and d.compute_mtp:
            emb = self.p("model.embed_tokens.weight")
            cos, sin = self.rope("1", T, emb.dtype)  # the MTP blocks always rotate, no window
            mask = attention_mask(T, None)
            # window tokens[0..T]: input_ids then the last target
            tokens = torch.cat([ids, tgt[:, -1:]], dim=1)  # (B, T+1)
            h_prev = h
            losses = []
            t = torch.arange(T)
            for k in range(1, d.K + 1):
                pre = f"mtp.layers.{k - 1}."
                has_in = (t + k) <= T
                inp = torch.where(has_in, tokens[:, torch.clamp(t + k, max=T)], torch.zeros_like(ids))
                has_tgt = (t + k + 1) <= T
                tk = torch.where(has_tgt, tokens[:, torch.clamp(t + k + 1, max=T)],
                                 torch.full_like(ids, IGNORE))
                e = self.norm(F.embedding(inp, self.p("model.embed_tokens.weight")),
                              pre + "enorm.weight")
                hn = self.norm(h_prev, pre + "hnorm.weight")
                cat = torch.cat([e, hn], dim=-1)
                h_in = self.linear(cat, pre + "eh_proj.weight")
                h_out = self.block(h_in, pre, cos, sin, mask)
                losses.append(self.head_loss(h_out, pre + "norm.weight", tk))
                h_prev = h_out
            mtp_loss = torch.stack([x.to(self.stat) for x in losses]).mean()
        return loss, mtp_loss


@dataclass
class Result:
    mode: str
    loss: float
    mtp_loss: Optional[float]
    grads: Dict[str, np.ndarray] = field(default_factory=dict)  # float64 numpy copies
    aux_loss: Optional[float] = None
    choices: List[np.ndarray] = field(default_factory=list)  # per sparse layer (N, K)
    router_probs: List[np.ndarray] = field(default_factory=list)  # per sparse layer (N, E)


def reference(dump: Dump, mode: str) -> Result:
    """Loss, MTP loss and the gradients of loss + mtp_loss_weight * mtp_loss."""
    ref = Reference(dump, mode)
    if mode == "bf16_autocast":
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, mtp_loss = ref.forward()
    else:
        loss, mtp_loss = ref.forward()
    total = loss
    if mtp_loss is not None:
        total = loss + float(dump.attrs["mtp_loss_weight"]) * mtp_loss
    aux = ref.aux_loss()
    if aux is not None:
        total = total + float(dump.attrs["moe_aux_loss_coef"]) * aux
    total.backward()
    grads = {}
    for name in dump.params:  # owners only; an alias shares the owner's tensor and .grad
        t = ref.w[name]
        g = t.grad
        grads[name] = (np.zeros(t.shape, dtype=np.float64) if g is None
                       else g.detach().to(torch.float64).numpy())
    return Result(mode=mode, loss=float(loss.detach()),
                  mtp_loss=None if mtp_loss is None else float(mtp_loss.detach()), grads=grads,
                  aux_loss=None if aux is None else float(aux.detach()),
                  choices=[c.numpy() for c in ref.router_choice],
                  router_probs=[p.detach().to(torch.float64).numpy() for p in ref.router_probs])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dump")
    ap.add_argument("--mode", choices=MODES, default="float64")
    a = ap.parse_args()
    d = load_dump(a.dump)
    r = reference(d, a.mode)
    print(f"{a.mode}: loss {r.loss:.10f} (file {d.loss:.10f})"
          + ("" if r.mtp_loss is None else f", mtp_loss {r.mtp_loss:.10f} (file {d.mtp_loss:.10f})"))


if __name__ == "__main__":
    main()
