"""Hugging Face model directories for the tests, written and read from the safetensors format's
description, not from kktrain's code:

  bytes [0, 8)        N, little-endian unsigned 64-bit: the header's length
  bytes [8, 8 + N)    UTF-8 JSON {name: {"dtype", "shape", "data_offsets": [begin, end]},
                      "__metadata__": {str: str}}
  bytes [8 + N, EOF)  the tensors, little-endian, C order, at [begin, end) of this section,
                      contiguous from 0 and ending exactly at the end of the file

plus config.json (LlamaForCausalLM (SmolLM2's variant included), MixtralForCausalLM,
MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, SmolLM3ForCausalLM,
Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3ForConditionalGeneration, Olmo2ForCausalLM or
Phi3ForCausalLM (Phi-3 and Phi-4-mini) keys)
and, for sharded checkpoints, model.safetensors.index.json
({"metadata": {"total_size"}, "weight_map": {name: file}}).

The families' tensors (Hugging Face's modeling_*.py): Llama and Mixtral attention
{q,k,v,o}_proj.weight (+ {q,k,v,o}_proj.bias with attention_bias true); Qwen2 always
{q,k,v}_proj.bias and no o_proj bias; Qwen3 q_norm.weight and k_norm.weight (head_dim,) per layer,
{q,k,v,o}_proj.bias with attention_bias true, and an explicit head_dim (q_proj (H*head_dim, C));
SmolLM3 Llama's tensors and names exactly; OLMo 2 no input_layernorm, post_attention_layernorm
and post_feedforward_layernorm (C,) after the attention and the MLP, q_norm.weight (H*head_dim,)
and k_norm.weight (KV*head_dim,) over the whole projections; Phi-3 self_attn.qkv_proj.weight
((H + 2 KV) * head_dim, C), rows [q | k | v], and mlp.gate_up_proj.weight (2F, C), rows
[gate | up], beside Llama's norms, o_proj and down_proj.
`reference_attrs(cfg)` says the same in the attributes tests/parity/torch_reference.py reads, and
`rope_scaling(cfg)` the rotary scaling a dump carries (Phi-3's longrope resolved: its
original_max_position_embeddings and attention_factor; `rotary_dim(cfg)` its partial rotary).

Gemma 2 and Gemma 3 (transformers' modeling_gemma2.py / modeling_gemma3.py): four RMSNorms a
layer around the sublayers (input_layernorm, post_attention_layernorm on the attention output,
pre_feedforward_layernorm, post_feedforward_layernorm on the MLP output), each applying 1 + w in
fp32 (the stored weights sit around 0); gelu_pytorch_tanh MLP (hidden_activation; hidden_act is
not read); input embeddings times sqrt(hidden_size); scores scaled by query_pre_attn_scalar^-0.5;
tied embeddings (tie_word_embeddings absent = true, unlike Llama). Gemma 2: attention logits
soft-capped (attn_logit_softcapping), layers 0, 2, ... slide. Gemma 3: per-head q_norm / k_norm
(head_dim, 1 + w), layer_types or sliding_window_pattern pick the sliding layers, which rotate
with rope_local_base_freq unscaled while the others use rope_theta and rope_scaling (linear on
the 4B+ models); attn_logit_softcapping is read by the config but never applied by
Gemma3Attention. Both: final_logit_softcapping. Keys a file leaves out take the config class's
defaults (`text_config(cfg)`: Gemma2Config's soft-caps 50 / 30, Gemma3TextConfig's
query_pre_attn_scalar 256, rope_theta 1e6, rope_local_base_freq 1e4, sliding_window_pattern 6, ...;
a Gemma3ForConditionalGeneration's text_config; transformers 5's rope_parameters). A
Gemma3ForConditionalGeneration directory holds the text weights under `language_model.model.`
(transformers 4) or `model.language_model.` (5) beside vision_tower / multi_modal_projector
tensors (`write_model_dir`, `text_tensors`).

Layers without rotary, SmolLM3 only (`rope_layers(cfg)`, transformers' SmolLM3Config and
SmolLM3Attention): no_rope_layers[i] is layer i's use_rope, so 1 = the layer applies rotary and
0 = a NoPE layer (the key's name says the opposite of its values); the list may be longer than
num_hidden_layers (only the first L are read). When no_rope_layers is null or absent it is
[int((i + 1) % no_rope_layer_interval != 0) for i in range(L)] (interval default 4: layers
3, 7, 11, ... have no rotary). Every other family rotates in every layer.

Sparse MLPs (every layer's, as kktrain reads them):
  Mixtral     block_sparse_moe.gate.weight (E, C), block_sparse_moe.experts.{e}.w1 / w3 (F, C)
              and w2 (C, F), F = intermediate_size, E = num_local_experts; always renormalized.
  Qwen3-MoE   Qwen3's attention, then mlp.gate.weight (E, C), mlp.experts.{e}.gate_proj /
              up_proj (F, C) and down_proj (C, F), F = moe_intermediate_size, E = num_experts;
              renormalized when norm_topk_prob. A layer is sparse unless it is in mlp_only_layers
              or (i + 1) % decoder_sparse_step != 0 (then a dense mlp.{gate,up,down}_proj of
              intermediate_size; these tests write every layer sparse). transformers adds
              router_aux_loss_coef * aux to the loss only when output_router_logits is true.
`moe_attrs(cfg)` gives the dump's moe_* attributes such a config means.

Sliding windows, as transformers reads each family's config (`window(cfg)`):
  Mistral, Mixtral, Phi-3
                    sliding_window an int W: every layer attends to its last W keys; null: none.
                    A layer_types key is not read (MistralConfig only warns about it).
  Qwen2, Qwen3      the window exists only with use_sliding_window true (else the config sets
                    sliding_window to None, whatever the file says). layer_types, when given,
                    decides per layer ("sliding_attention" / "full_attention"); absent, layers
                    with index >= max_window_layers slide. A sliding layer with no window is an
                    error in transformers (create_sliding_window_causal_mask), here too.
  SmolLM3           layer_types, when given, decides per layer; absent, a layer slides when
                    use_sliding_window is true, sliding_window is not null and the layer is a NoPE
                    one (no_rope_layers[i] == 0). The sliding layers' mask uses sliding_window
                    (SmolLM3Config leaves it as written even with use_sliding_window false, but the
                    attention's own window, which only flash-attention reads, is set only with
                    use_sliding_window true): sliding layers with use_sliding_window false are
                    refused here as ambiguous. max_window_layers (in SmolLM3-3B's file) is not read.
  Gemma 2           sliding_window W on layers 0, 2, ... (layer_types, when given, decides).
  Gemma 3           sliding_window W on the sliding_attention layers of layer_types, else of
                    sliding_window_pattern n: layer i slides when (i + 1) % n != 0 (default 6).
                    use_bidirectional_attention true is refused.
  Llama             none.

`read_safetensors` checks every rule of the format and raises AssertionError naming the broken
one, so a test that reads kktrain's files with it checks that kktrain writes valid ones.
"""
from __future__ import annotations

import json
import math
import os
import struct
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "parity"))
from torch_reference import hf_inv_freq, hf_llama3_rescale  # noqa: E402,F401

ELEM_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
              "U8": 1, "BOOL": 1}
MAX_HEADER = 100_000_000


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even bf16 bits (uint16) of float32 values (via torch's conversion)."""
    t = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).to(torch.bfloat16)
    return t.view(torch.int16).numpy().view(np.uint16)


def bf16_values(bits: np.ndarray) -> np.ndarray:
    """float32 values of bf16 bits (exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def encode(values: np.ndarray, dtype: str) -> bytes:
    """Little-endian bytes of float32 `values` stored as dtype (F32 exact, BF16/F16 rounded to
    nearest even)."""
    if dtype == "F32":
        return np.ascontiguousarray(values, dtype="<f4").tobytes()
    if dtype == "BF16":
        return bf16_bits(values).astype("<u2").tobytes()
    if dtype == "F16":
        return np.ascontiguousarray(values, dtype=np.float32).astype("<f2").tobytes()
    raise ValueError(dtype)


def decode(data: bytes, dtype: str, shape) -> np.ndarray:
    """float32 values of stored elements (exact widening)."""
    if dtype == "F32":
        v = np.frombuffer(data, dtype="<f4").astype(np.float32)
    elif dtype == "BF16":
        v = bf16_values(np.frombuffer(data, dtype="<u2"))
    elif dtype == "F16":
        v = np.frombuffer(data, dtype="<f2").astype(np.float32)
    else:
        raise ValueError(f"unsupported dtype {dtype}")
    return v.reshape(shape)


def write_safetensors(path: str, tensors: List[Tuple[str, str, np.ndarray]],
                      metadata: Optional[Dict[str, str]] = None,
                      header_override: Optional[bytes] = None, tail: bytes = b"") -> None:
    """tensors: (name, dtype, float32 values) in data order. header_override replaces the JSON
    (malformed-file tests); tail is appended after the data."""
    header: Dict[str, object] = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    blobs, offset = [], 0
    for name, dtype, values in tensors:
        b = encode(values, dtype)
        header[name] = {"dtype": dtype, "shape": list(values.shape),
                        "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    text = header_override if header_override is not None else json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
        f.write(tail)


def read_safetensors(path: str):
    """(metadata, {name: (dtype, shape, float32 values)}, header_len), checking every rule."""
    with open(path, "rb") as f:
        raw = f.read()
    assert len(raw) >= 8, f"{path}: shorter than the length prefix"
    (n,) = struct.unpack("<Q", raw[:8])
    assert n <= MAX_HEADER, f"{path}: header length {n} over the limit"
    assert 8 + n <= len(raw), f"{path}: header runs past the end"
    text = raw[8:8 + n].decode("utf-8")
    assert text.lstrip().startswith("{"), f"{path}: header is not an object"
    pairs_seen: List[str] = []

    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        assert len(keys) == len(set(keys)), f"{path}: duplicate names in the header"
        pairs_seen.extend(keys)
        return dict(pairs)

    header = json.loads(text, object_pairs_hook=no_duplicates)
    metadata = header.pop("__metadata__", None)
    if metadata is not None:
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    data = raw[8 + n:]
    spans = []
    out = {}
    for name, e in header.items():
        assert set(e) == {"dtype", "shape", "data_offsets"}, f"{path}: {name} fields {set(e)}"
        dtype, shape, (b, end) = e["dtype"], e["shape"], e["data_offsets"]
        assert dtype in ELEM_BYTES, f"{path}: {name} dtype {dtype}"
        assert all(isinstance(d, int) and d >= 0 for d in shape), f"{path}: {name} shape"
        assert 0 <= b <= end, f"{path}: {name} offsets"
        assert end - b == math.prod(shape) * ELEM_BYTES[dtype], f"{path}: {name} size"
        spans.append((b, end, name))
        out[name] = (dtype, tuple(shape), decode(data[b:end], dtype, shape))
    at = 0
    for b, end, name in sorted(spans):
        assert b == at, f"{path}: {name} begins at {b}, expected {at} (gap or overlap)"
        at = end
    assert at == len(data), f"{path}: tensors end at {at}, data section has {len(data)} bytes"
    return metadata, out, n


# ---- model directories ---------------------------------------------------------------------------


def llama_config(V=256, C=64, L=2, H=4, KV=2, F=160, max_pos=128, tied=False, theta=10000.0,
                 eps=1e-5, rope_scaling=None, torch_dtype="float32", **extra) -> Dict[str, object]:
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V,
         "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L,
         "num_attention_heads": H, "num_key_value_heads": KV, "hidden_act": "silu",
         "rms_norm_eps": eps, "rope_theta": theta, "max_position_embeddings": max_pos,
         "tie_word_embeddings": tied, "rope_scaling": rope_scaling, "attention_bias": False,
         "mlp_bias": False, "torch_dtype": torch_dtype}
    c.update(extra)
    return c


LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 32}


def mixtral_config(E=4, top_k=2, aux=0.02, router_jitter_noise=0.0, **kw) -> Dict[str, object]:
    """A Mixtral (MixtralForCausalLM): every MLP a sparse one of E experts of intermediate_size."""
    c = llama_config(**kw)
    c.update({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
              "num_local_experts": E, "num_experts_per_tok": top_k, "router_aux_loss_coef": aux,
              "router_jitter_noise": router_jitter_noise, "sliding_window": None})
    return c


def mistral_config(V=256, C=64, L=2, H=4, KV=2, F=160, head_dim=None, max_pos=128, tied=False,
                   theta=10000.0, eps=1e-5, sliding_window=4096, torch_dtype="float32",
                   **extra) -> Dict[str, object]:
    """A Mistral (MistralForCausalLM): Llama's tensors (no biases) with sliding_window W (an int:
    every layer sees its last W keys; None: full attention) and an explicit head_dim (C / H when
    not given), the key set of the Mistral-7B config.json files."""
    c = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "vocab_size": V,
         "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L,
         "num_attention_heads": H, "num_key_value_heads": KV,
         "head_dim": C // H if head_dim is None else head_dim, "hidden_act": "silu",
         "rms_norm_eps": eps, "rope_theta": theta, "max_position_embeddings": max_pos,
         "sliding_window": sliding_window, "tie_word_embeddings": tied,
         "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
         "initializer_range": 0.02, "use_cache": True, "torch_dtype": torch_dtype,
         "transformers_version": "4.42.0"}
    c.update(extra)
    return c


def qwen2_config(V=256, C=64, L=2, H=4, KV=2, F=160, max_pos=128, tied=False, theta=1000000.0,
                 eps=1e-6, sliding_window=4096, max_window_layers=None, use_sliding_window=False,
                 layer_types=None, torch_dtype="float32", **extra) -> Dict[str, object]:
    """A Qwen2 / Qwen2.5 (Qwen2ForCausalLM): Llama with q, k, v biases (o_proj has none), the key
    set of the Qwen2.5 config.json files. use_sliding_window false: Qwen2Config then sets
    sliding_window to None whatever the file says, so `sliding_window` and `max_window_layers`
    (default L) are inert; use_sliding_window true: layers i >= max_window_layers attend to
    the last sliding_window keys, or the layers layer_types names "sliding_attention" when
    the list is given (it wins over max_window_layers)."""
    c = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": V,
         "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L,
         "num_attention_heads": H, "num_key_value_heads": KV, "hidden_act": "silu",
         "rms_norm_eps": eps, "rope_theta": theta, "max_position_embeddings": max_pos,
         "tie_word_embeddings": tied, "use_sliding_window": use_sliding_window,
         "sliding_window": sliding_window,
         "max_window_layers": L if max_window_layers is None else max_window_layers,
         "attention_dropout": 0.0, "bos_token_id": V - 2, "eos_token_id": V - 1,
         "initializer_range": 0.02, "use_cache": True, "use_mrope": False,
         "torch_dtype": torch_dtype, "transformers_version": "4.43.1"}
    if layer_types is not None:
        c["layer_types"] = list(layer_types)
    c.update(extra)
    return c


def qwen3_config(V=256, C=64, L=2, H=4, KV=2, F=160, head_dim=32, max_pos=128, tied=False,
                 theta=1000000.0, eps=1e-6, attention_bias=False, sliding_window=None,
                 max_window_layers=None, use_sliding_window=False, layer_types=None,
                 torch_dtype="float32", **extra) -> Dict[str, object]:
    """A Qwen3 (Qwen3ForCausalLM): per-head q_norm / k_norm, an explicit head_dim (here 32,
    not C / H = 16, as Qwen3-0.6B's 128 is not 1024 / 16), optional biases on all four
    projections; the key set of the Qwen3 config.json files (use_sliding_window false by
    default; the window keys as Qwen2's, layer_types included)."""
    c = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": V,
         "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L,
         "num_attention_heads": H, "num_key_value_heads": KV, "head_dim": head_dim,
         "hidden_act": "silu", "rms_norm_eps": eps, "rope_theta": theta, "rope_scaling": None,
         "max_position_embeddings": max_pos, "tie_word_embeddings": tied,
         "attention_bias": attention_bias, "attention_dropout": 0.0,
         "use_sliding_window": use_sliding_window, "sliding_window": sliding_window,
         "max_window_layers": L if max_window_layers is None else max_window_layers,
         "bos_token_id": V - 2, "eos_token_id": V - 1, "initializer_range": 0.02,
         "use_cache": True, "torch_dtype": torch_dtype, "transformers_version": "4.51.0"}
    if layer_types is not None:
        c["layer_types"] = list(layer_types)
    c.update(extra)
    return c


def qwen3_moe_config(V=256, C=64, L=2, H=4, KV=2, F=160, E=4, top_k=2, moe_intermediate_size=48,
                     norm_topk_prob=True, output_router_logits=False, router_aux_loss_coef=0.001,
                     decoder_sparse_step=1, mlp_only_layers=(), head_dim=32, max_pos=128,
                     tied=False, theta=1000000.0, eps=1e-6, attention_bias=False,
                     sliding_window=None, use_sliding_window=False, torch_dtype="float32",
                     **extra) -> Dict[str, object]:
    """A Qwen3-MoE (Qwen3MoeForCausalLM): Qwen3's attention (q_norm / k_norm, explicit head_dim,
    optional biases) and sparse MLPs of E experts of moe_intermediate_size, top_k per token; the
    key set of the Qwen3-30B-A3B config.json (intermediate_size F is the dense MLP's size, used
    only by the layers decoder_sparse_step / mlp_only_layers leave dense; max_window_layers is
    written as there but Qwen3MoeConfig does not read it)."""
    c = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": V,
         "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L,
         "num_attention_heads": H, "num_key_value_heads": KV, "head_dim": head_dim,
         "hidden_act": "silu", "rms_norm_eps": eps, "rope_theta": theta, "rope_scaling": None,
         "max_position_embeddings": max_pos, "tie_word_embeddings": tied,
         "attention_bias": attention_bias, "attention_dropout": 0.0,
         "use_sliding_window": use_sliding_window, "sliding_window": sliding_window,
         "max_window_layers": L, "decoder_sparse_step": decoder_sparse_step,
         "mlp_only_layers": list(mlp_only_layers), "num_experts": E,
         "num_experts_per_tok": top_k, "moe_intermediate_size": moe_intermediate_size,
         "norm_topk_prob": norm_topk_prob, "output_router_logits": output_router_logits,
         "router_aux_loss_coef": router_aux_loss_coef, "bos_token_id": V - 2,
         "eos_token_id": V - 1, "initializer_range": 0.02, "use_cache": True,
         "torch_dtype": torch_dtype, "transformers_version": "4.51.0"}
    c.update(extra)
    return c


def smollm2_config(V=256, C=64, L=2, H=4, KV=2, F=160, max_pos=128, tied=True, theta=100000,
                   eps=1e-5, torch_dtype="bfloat16", **extra) -> Dict[str, object]:
    """A SmolLM2 (plain LlamaForCausalLM, model_type llama) with the key set of the SmolLM2
    config.json files: llama_config's keys plus the ones its converter wrote: is_llama_config,
    rope_interleaved false (no LlamaConfig field: transformers keeps it as an attribute nobody
    reads; its Llama rotary is the half-split one, which is what false means), pad_token_id,
    pretraining_tp and transformers.js_config (a dict). rope_theta an integer, as there."""
    c = llama_config(V=V, C=C, L=L, H=H, KV=KV, F=F, max_pos=max_pos, tied=tied, theta=theta,
                     eps=eps, torch_dtype=torch_dtype)
    c.update({"attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 0,
              "initializer_range": 0.041666666666666664, "is_llama_config": True,
              "pad_token_id": 0, "pretraining_tp": 1, "rope_interleaved": False,
              "transformers.js_config": {"kv_cache_dtype": {"q4f16": "float16",
                                                            "fp16": "float16"}},
              "transformers_version": "4.42.3", "use_cache": True})
    c.update(extra)
    return c


_INTERVAL_LIST = object()  # smollm3_config's default no_rope_layers: the interval's list


def smollm3_config(V=256, C=64, L=4, H=4, KV=2, F=160, max_pos=128, tied=True,
                   theta=5000000.0, eps=1e-6, no_rope_layers=_INTERVAL_LIST,
                   no_rope_layer_interval=4, use_sliding_window=False, sliding_window=None,
                   layer_types=None, attention_bias=False, torch_dtype="bfloat16",
                   **extra) -> Dict[str, object]:
    """A SmolLM3 (SmolLM3ForCausalLM): Llama's tensors, some layers without rotary; the key set
    of the SmolLM3-3B config.json (SmolLM3Config's keys plus max_window_layers and
    pretraining_tp, which it does not read). no_rope_layers: a list (1 = the layer rotates),
    None (written as null: derived from no_rope_layer_interval) or, by default, the explicit
    list the interval means (as SmolLM3-3B writes it). layer_types only when given (the
    SmolLM3-3B file may write its all-"full_attention" list; absent, transformers derives it)."""
    if no_rope_layers is _INTERVAL_LIST:
        no_rope_layers = [int((i + 1) % no_rope_layer_interval != 0) for i in range(L)]
    c = {"architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3", "vocab_size": V,
         "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L,
         "num_attention_heads": H, "num_key_value_heads": KV, "hidden_act": "silu",
         "rms_norm_eps": eps, "rope_theta": theta, "rope_scaling": None,
         "max_position_embeddings": max_pos, "tie_word_embeddings": tied,
         "attention_bias": attention_bias, "attention_dropout": 0.0, "mlp_bias": False,
         "no_rope_layers": None if no_rope_layers is None else list(no_rope_layers),
         "no_rope_layer_interval": no_rope_layer_interval,
         "use_sliding_window": use_sliding_window, "sliding_window": sliding_window,
         "max_window_layers": L, "bos_token_id": None, "eos_token_id": V - 1,
         "pad_token_id": V - 2, "initializer_range": 0.02, "pretraining_tp": 2,
         "use_cache": False, "torch_dtype": torch_dtype, "transformers_version": "4.54.0.dev0"}
    if layer_types is not None:
        c["layer_types"] = list(layer_types)
    c.update(extra)
    return c


def gemma2_config(V=256, C=64, L=4, H=4, KV=2, F=160, head_dim=32, max_pos=128, tied=True,
                  theta=10000.0, eps=1e-6, sliding_window=8, query_pre_attn_scalar=16,
                  attn_logit_softcapping=50.0, final_logit_softcapping=30.0, layer_types=None,
                  torch_dtype="float32", **extra) -> Dict[str, object]:
    """A Gemma 2 (Gemma2ForCausalLM) with the key set of the gemma-2-2b config.json files
    (hidden_act and hidden_activation both gelu_pytorch_tanh: Gemma2MLP reads
    hidden_activation; query_pre_attn_scalar, both soft-capping values, sliding_window,
    cache_implementation, an explicit head_dim, eos_token_id a list). Gemma 2 ties its embeddings
    and the files say so by leaving tie_word_embeddings out (Gemma2Config's default is true):
    the key is written only for tied=False. Layers 0, 2, ... slide (layer_types, when given,
    decides instead). Defaults: 4 layers, head_dim 32 (not C / H = 16), query_pre_attn_scalar 16
    (Gemma-2-27B's kind: hidden / heads, not head_dim), the real soft-caps 50 / 30."""
    c = {"architectures": ["Gemma2ForCausalLM"], "attention_bias": False,
         "attention_dropout": 0.0, "attn_logit_softcapping": attn_logit_softcapping,
         "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": [1, 107],
         "final_logit_softcapping": final_logit_softcapping, "head_dim": head_dim,
         "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
         "hidden_size": C, "initializer_range": 0.02, "intermediate_size": F,
         "max_position_embeddings": max_pos, "model_type": "gemma2", "num_attention_heads": H,
         "num_hidden_layers": L, "num_key_value_heads": KV, "pad_token_id": 0,
         "query_pre_attn_scalar": query_pre_attn_scalar, "rms_norm_eps": eps,
         "rope_theta": theta, "sliding_window": sliding_window, "torch_dtype": torch_dtype,
         "transformers_version": "4.42.4", "use_cache": True, "vocab_size": V}
    if not tied:
        c["tie_word_embeddings"] = False
    if layer_types is not None:
        c["layer_types"] = list(layer_types)
    c.update(extra)
    return c


def gemma3_config(V=256, C=64, L=4, H=4, KV=2, F=160, head_dim=32, max_pos=128, tied=True,
                  theta=1000000.0, local_theta=10000.0, eps=1e-6, sliding_window=8,
                  sliding_window_pattern=2, query_pre_attn_scalar=64, rope_scaling=None,
                  attn_logit_softcapping=None, final_logit_softcapping=None, layer_types=None,
                  torch_dtype="float32", **extra) -> Dict[str, object]:
    """A Gemma 3 text model (Gemma3ForCausalLM, model_type gemma3_text) with the key set of the
    gemma-3-1b config.json (rope_local_base_freq, sliding_window_pattern, rope_scaling null, both
    soft-caps null, eos_token_id [1, 106], no tie_word_embeddings key: tied, as Gemma3TextConfig
    defaults; written only for tied=False). Per-head q_norm / k_norm. Layer i slides when
    (i + 1) % sliding_window_pattern != 0 (layer_types, when given, decides instead); sliding
    layers rotate with rope_local_base_freq unscaled, the others with rope_theta and
    rope_scaling. Defaults: 4 layers, pattern 2 (layers 0 and 2 slide, 1 and 3 full),
    head_dim 32 (not C / H), query_pre_attn_scalar 64 (not head_dim; its ** -0.5 exact in
    bf16). transformers' Gemma3Attention never applies attn_logit_softcapping (it passes no
    softcap to the attention function), so a value written here means nothing."""
    c = {"architectures": ["Gemma3ForCausalLM"], "attention_bias": False,
         "attention_dropout": 0.0, "attn_logit_softcapping": attn_logit_softcapping,
         "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": [1, 106],
         "final_logit_softcapping": final_logit_softcapping, "head_dim": head_dim,
         "hidden_activation": "gelu_pytorch_tanh", "hidden_size": C, "initializer_range": 0.02,
         "intermediate_size": F, "max_position_embeddings": max_pos, "model_type": "gemma3_text",
         "num_attention_heads": H, "num_hidden_layers": L, "num_key_value_heads": KV,
         "pad_token_id": 0, "query_pre_attn_scalar": query_pre_attn_scalar, "rms_norm_eps": eps,
         "rope_local_base_freq": local_theta, "rope_scaling": rope_scaling, "rope_theta": theta,
         "sliding_window": sliding_window, "sliding_window_pattern": sliding_window_pattern,
         "torch_dtype": torch_dtype, "transformers_version": "4.50.0.dev0", "use_cache": True,
         "vocab_size": V}
    if not tied:
        c["tie_word_embeddings"] = False
    if layer_types is not None:
        c["layer_types"] = list(layer_types)
    c.update(extra)
    return c


GEMMA3_LINEAR_SCALING = {"factor": 8.0, "rope_type": "linear"}  # Gemma 3 4B / 12B / 27B


def gemma3_conditional_config(V=256, C=64, L=4, H=4, KV=2, F=160, head_dim=32, max_pos=128,
                              tied=True, theta=1000000.0, local_theta=10000.0, eps=1e-6,
                              sliding_window=8, sliding_window_pattern=2,
                              query_pre_attn_scalar=None, rope_scaling=GEMMA3_LINEAR_SCALING,
                              final_logit_softcapping=None, layer_types=None, v5=False,
                              torch_dtype="bfloat16", **extra) -> Dict[str, object]:
    """A Gemma 3 with vision (Gemma3ForConditionalGeneration, model_type gemma3): the text model's
    keys nested in text_config (the form of the gemma-3-4b / 12b / 27b files: only the keys that
    differ from Gemma3TextConfig's defaults, here the tiny sizes, the window and its pattern, and
    the global layers' linear rope_scaling; query_pre_attn_scalar, rope_theta,
    rope_local_base_freq, rms_norm_eps and the soft-caps are left out, so their defaults (256,
    1e6, 1e4, 1e-6, null) hold unless a value is given), a small SigLIP vision_config, the image
    token indices (inside the tiny vocabulary) and mm_tokens_per_image. Tied (the default of both
    Gemma3Config and Gemma3TextConfig; tie_word_embeddings written only for tied=False).

    v5: the transformers 5 form: text_config's rope_theta / rope_local_base_freq / rope_scaling
    become rope_parameters per layer type ({"full_attention": {"rope_type": "linear", "factor",
    "rope_theta"}, "sliding_attention": {"rope_type": "default", "rope_theta"}}), layer_types is
    written out (given, or the pattern's), torch_dtype becomes dtype, transformers_version 5.x.
    `write_model_dir` writes the text weights under `language_model.model.` (the files' names
    before transformers 5) or, with a 5.x transformers_version, `model.language_model.`, plus a
    few vision_tower / multi_modal_projector tensors the text model must ignore."""
    text = {"hidden_size": C, "intermediate_size": F, "model_type": "gemma3_text",
            "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": KV,
            "head_dim": head_dim, "vocab_size": V, "max_position_embeddings": max_pos,
            "sliding_window": sliding_window}
    if query_pre_attn_scalar is not None:
        text["query_pre_attn_scalar"] = query_pre_attn_scalar
    if final_logit_softcapping is not None:
        text["final_logit_softcapping"] = final_logit_softcapping
    if theta != 1000000.0 and not v5:
        text["rope_theta"] = theta
    if local_theta != 10000.0 and not v5:
        text["rope_local_base_freq"] = local_theta
    if eps != 1e-6:
        text["rms_norm_eps"] = eps
    if not tied:
        text["tie_word_embeddings"] = False
    if v5:
        if layer_types is None:
            layer_types = ["sliding_attention" if (i + 1) % sliding_window_pattern else
                           "full_attention" for i in range(L)]
        full = {"rope_type": "default"} if rope_scaling is None else dict(rope_scaling)
        full["rope_theta"] = theta
        text["rope_parameters"] = {"full_attention": full,
                                   "sliding_attention": {"rope_type": "default",
                                                         "rope_theta": local_theta}}
        text["dtype"] = torch_dtype
    else:
        text["rope_scaling"] = rope_scaling
        text["sliding_window_pattern"] = sliding_window_pattern
    if layer_types is not None:
        text["layer_types"] = list(layer_types)
    vision = {"hidden_size": 32, "image_size": 28, "intermediate_size": 64,
              "model_type": "siglip_vision_model", "num_attention_heads": 2,
              "num_hidden_layers": 1, "patch_size": 14, "vision_use_head": False}
    c = {"architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": V - 3,
         "eoi_token_index": V - 2, "eos_token_id": [1, 106], "image_token_index": V - 1,
         "initializer_range": 0.02, "mm_tokens_per_image": 4, "model_type": "gemma3",
         "text_config": text, ("dtype" if v5 else "torch_dtype"): torch_dtype,
         "transformers_version": "5.0.0" if v5 else "4.50.0.dev0", "vision_config": vision}
    if not tied:
        c["tie_word_embeddings"] = False
    c.update(extra)
    return c


def olmo2_config(V=256, C=64, L=2, H=4, KV=2, F=160, max_pos=128, tied=False, theta=500000,
                 eps=1e-6, attention_bias=False, rope_scaling=None, torch_dtype="float32",
                 **extra) -> Dict[str, object]:
    """An OLMo 2 (Olmo2ForCausalLM), the key set of allenai/OLMo-2-0425-1B's config.json (rope_theta
    the integer 500000 as there): norms after the attention and the MLP
    (post_attention_layernorm, post_feedforward_layernorm; no input_layernorm), q_norm over the
    whole q projection (H * head_dim) and k_norm over the whole k projection (KV * head_dim),
    every RMSNorm multiplying its weight in fp32 (Olmo2RMSNorm). No head_dim key (C / H)."""
    c = {"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": V,
         "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L,
         "num_attention_heads": H, "num_key_value_heads": KV, "hidden_act": "silu",
         "rms_norm_eps": eps, "rope_theta": theta, "rope_scaling": rope_scaling,
         "max_position_embeddings": max_pos, "tie_word_embeddings": tied,
         "attention_bias": attention_bias, "attention_dropout": 0.0, "eos_token_id": V - 3,
         "pad_token_id": V - 2, "initializer_range": 0.02, "use_cache": True,
         "torch_dtype": torch_dtype, "transformers_version": "4.51.3"}
    c.update(extra)
    return c


def phi3_config(V=256, C=64, L=2, H=4, KV=2, F=160, max_pos=128, original_max_pos=None,
                tied=False, theta=10000.0, eps=1e-5, sliding_window=None, rope_scaling=None,
                partial_rotary_factor=None, torch_dtype="bfloat16", **extra) -> Dict[str, object]:
    """A Phi-3 (Phi3ForCausalLM), the key set of microsoft/Phi-3-mini-4k-instruct's config.json:
    fused self_attn.qkv_proj (rows [q | k | v]) and mlp.gate_up_proj (rows [gate | up]), no
    head_dim key (C / H), original_max_position_embeddings (default: max_pos, as there, 4096 =
    4096), sliding_window (an int: every layer sees its last W keys; None: none; the 4k model's
    2047), resid_pdrop / embd_pdrop / attention_dropout 0 (dropout, inert in a deterministic
    gradient), rope_scaling null or {"type": "longrope", "short_factor", "long_factor"} (the
    128k models and Phi-4-mini), partial_rotary_factor only when given (Phi-4-mini's 0.75)."""
    c = {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "vocab_size": V,
         "hidden_size": C, "intermediate_size": F, "num_hidden_layers": L,
         "num_attention_heads": H, "num_key_value_heads": KV, "hidden_act": "silu",
         "rms_norm_eps": eps, "rope_theta": theta, "rope_scaling": rope_scaling,
         "max_position_embeddings": max_pos,
         "original_max_position_embeddings": max_pos if original_max_pos is None
         else original_max_pos,
         "sliding_window": sliding_window, "tie_word_embeddings": tied,
         "attention_bias": False, "attention_dropout": 0.0, "embd_pdrop": 0.0,
         "resid_pdrop": 0.0, "bos_token_id": 1, "eos_token_id": V - 2, "pad_token_id": V - 2,
         "initializer_range": 0.02, "use_cache": True,
         "auto_map": {"AutoConfig": "configuration_phi3.Phi3Config",
                      "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM"},
         "torch_dtype": torch_dtype, "transformers_version": "4.40.2"}
    if partial_rotary_factor is not None:
        c["partial_rotary_factor"] = partial_rotary_factor
    c.update(extra)
    return c


def longrope_factors(n: int) -> Dict[str, List[float]]:
    """n short and n long longrope factors shaped like Phi-4-mini's (short near 1, long rising
    from 1 to tens over the lower frequencies), so that the two choices give clearly different
    rotations at a few dozen positions."""
    short = [round(1.0 + 0.08 * i / max(n - 1, 1), 6) for i in range(n)]
    long = [round(1.0 + 39.0 * (i / max(n - 1, 1)) ** 2, 6) for i in range(n)]
    return {"short_factor": short, "long_factor": long}


def phi4mini_config(V=256, C=64, L=2, H=4, KV=2, F=160, max_pos=128, original_max_pos=None,
                    tied=True, theta=10000.0, eps=1e-5, sliding_window=None,
                    partial_rotary_factor=0.75, torch_dtype="bfloat16",
                    **extra) -> Dict[str, object]:
    """A Phi-4-mini (model_type phi3), the key set of microsoft/Phi-4-mini-instruct's
    config.json: Phi-3's tensors with partial_rotary_factor 0.75 (rotary on 12 of head_dim 16
    here, 96 of 128 there), rope_scaling {"type": "longrope", "short_factor", "long_factor"}
    (rotary_dim / 2 values each), original_max_position_embeddings below max_position_embeddings
    (4096 of 131072 there; default max_pos / 4 here), tied embeddings, and the keys
    Phi3Config does not read (full_attn_mod, interpolate_factor, lm_head_bias, mlp_bias).
    sliding_window: 262144 there (longer than any sequence); None by default here."""
    D = C // H
    rotary = int(D * partial_rotary_factor)
    c = phi3_config(V=V, C=C, L=L, H=H, KV=KV, F=F, max_pos=max_pos,
                    original_max_pos=max_pos // 4 if original_max_pos is None else original_max_pos,
                    tied=tied, theta=theta, eps=eps, sliding_window=sliding_window,
                    rope_scaling=dict(type="longrope", **longrope_factors(rotary // 2)),
                    partial_rotary_factor=partial_rotary_factor, torch_dtype=torch_dtype)
    c.update({"bos_token_id": V - 1, "eos_token_id": V - 1, "pad_token_id": V - 1,
              "full_attn_mod": 1, "interpolate_factor": 1, "lm_head_bias": False,
              "mlp_bias": False, "transformers_version": "4.45.0"})
    c.update(extra)
    return c


# Gemma2Config's and Gemma3TextConfig's defaults (transformers' configuration_gemma2.py /
# configuration_gemma3.py), for the keys these tests read: a file may leave any of them out.
GEMMA2_DEFAULTS = {"vocab_size": 256000, "hidden_size": 2304, "intermediate_size": 9216,
                   "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
                   "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
                   "max_position_embeddings": 8192, "rms_norm_eps": 1e-6,
                   "tie_word_embeddings": True, "rope_theta": 10000.0, "attention_bias": False,
                   "query_pre_attn_scalar": 256, "sliding_window": 4096,
                   "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0,
                   "rope_scaling": None}
GEMMA3_TEXT_DEFAULTS = {"vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216,
                        "num_hidden_layers": 26, "num_attention_heads": 8,
                        "num_key_value_heads": 4, "head_dim": 256,
                        "hidden_activation": "gelu_pytorch_tanh",
                        "max_position_embeddings": 131072, "rms_norm_eps": 1e-6,
                        "tie_word_embeddings": True, "rope_theta": 1000000.0,
                        "attention_bias": False, "query_pre_attn_scalar": 256,
                        "sliding_window": 4096, "final_logit_softcapping": None,
                        "attn_logit_softcapping": None, "rope_scaling": None,
                        "rope_local_base_freq": 10000.0, "sliding_window_pattern": 6,
                        "use_bidirectional_attention": False}


def _flatten_rope_parameters(c: Dict[str, object]) -> None:
    """transformers 5's rope_parameters into the keys these tests read (rope_theta,
    rope_scaling, and for per-layer-type parameters rope_local_base_freq): one dict
    {"rope_type", "rope_theta", ...} for every layer, or one per layer type (Gemma 3: the
    full_attention layers' with their scaling, the sliding_attention layers' unscaled theta)."""
    rp = c.pop("rope_parameters", None)
    if rp is None:
        return

    def split(d):
        d = dict(d)
        theta = d.pop("rope_theta")
        return theta, (None if d.get("rope_type", d.get("type")) in (None, "default") else d)

    if "full_attention" in rp or "sliding_attention" in rp:
        if "full_attention" in rp:
            c["rope_theta"], c["rope_scaling"] = split(rp["full_attention"])
        if "sliding_attention" in rp:
            local, scaling = split(rp["sliding_attention"])
            if scaling is not None:
                raise ValueError(f"rope_parameters sliding_attention {rp['sliding_attention']}: "
                                 "scaled local rotary is not supported")
            c["rope_local_base_freq"] = local
    else:
        c["rope_theta"], c["rope_scaling"] = split(rp)


def text_config(cfg) -> Dict[str, object]:
    """The text model's config as the other functions here read it: a Gemma3ForConditional-
    Generation's text_config (tie_word_embeddings from it, else the outer config's, else true);
    Gemma 2 / Gemma 3 keys a file leaves out filled with their config class's defaults;
    transformers 5's rope_parameters as rope_theta / rope_scaling (/ rope_local_base_freq).
    Other families' configs are returned as they are."""
    t = cfg.get("model_type")
    if t == "gemma3":
        inner = dict(cfg.get("text_config") or {})
        inner.setdefault("tie_word_embeddings", cfg.get("tie_word_embeddings", True))
        inner["model_type"] = "gemma3_text"
        c = dict(GEMMA3_TEXT_DEFAULTS)
        c.update(inner)
    elif t == "gemma3_text":
        c = dict(GEMMA3_TEXT_DEFAULTS)
        c.update(cfg)
    elif t == "gemma2":
        c = dict(GEMMA2_DEFAULTS)
        c.update(cfg)
    else:
        return cfg
    _flatten_rope_parameters(c)
    return c


def gemma_layer_types(cfg) -> List[str]:
    """A Gemma 2 / 3 text config's layer_types: as given, else Gemma 2's (layer i slides when
    (i + 1) % 2 != 0) or Gemma 3's ((i + 1) % sliding_window_pattern != 0, pattern default 6)."""
    c = text_config(cfg)
    L = c["num_hidden_layers"]
    types = c.get("layer_types")
    if types is None:
        n = 2 if c["model_type"] == "gemma2" else int(c.get("sliding_window_pattern") or 6)
        types = ["sliding_attention" if (i + 1) % n else "full_attention" for i in range(L)]
    if len(types) != L or set(types) - set(LAYER_TYPES):
        raise ValueError(f"layer_types {types}: {L} of {LAYER_TYPES}")
    return list(types)


GEMMA = ("gemma2", "gemma3_text")  # text_config(cfg)["model_type"] of the Gemma families


def rope_layers(cfg) -> str:
    """'0'/'1' per layer, '1' = the layer applies rotary: SmolLM3's no_rope_layers (its first L
    values; any nonzero value rotates, as `if self.use_rope` reads it), or the list
    no_rope_layer_interval (default 4) means when it is null; Gemma 3: '2' (local rotary,
    rope_local_base_freq unscaled) for the sliding layers, '1' (rope_theta, rope_scaling) for
    the others; every layer '1' for other families."""
    cfg = text_config(cfg)
    L = cfg["num_hidden_layers"]
    if cfg.get("model_type") == "gemma3_text":
        return "".join("2" if t == "sliding_attention" else "1" for t in gemma_layer_types(cfg))
    if cfg.get("model_type") != "smollm3":
        return "1" * L
    values = cfg.get("no_rope_layers")
    if values is None:
        n = int(cfg.get("no_rope_layer_interval", 4))
        if n <= 0:
            raise ValueError(f"no_rope_layer_interval {n}: must be positive")
        values = [int((i + 1) % n != 0) for i in range(L)]
    if len(values) < L:
        raise ValueError(f"no_rope_layers {values}: shorter than num_hidden_layers {L}")
    return "".join("1" if v else "0" for v in values[:L])


def family(cfg) -> str:
    """kktrain's model.family for this config (its dump attribute `family`): a Mixtral is a Llama
    with a sparse MLP; Gemma 3 (gemma3_text, or gemma3 with vision) is gemma3; the other
    model_types are their own."""
    t = cfg.get("model_type", "llama")
    return {"mixtral": "llama", "gemma3_text": "gemma3"}.get(t, t)


def num_experts(cfg) -> int:
    """Experts per sparse layer (0: a dense model)."""
    if cfg.get("model_type") == "qwen3_moe":
        return int(cfg["num_experts"])
    return int(cfg.get("num_local_experts", 0))


def sparse_layers(cfg) -> List[bool]:
    """Which layers' MLP is sparse: all of a Mixtral's; a Qwen3-MoE's unless in mlp_only_layers
    or (i + 1) % decoder_sparse_step != 0 (Qwen3MoeDecoderLayer); none of a dense model's."""
    L = cfg["num_hidden_layers"]
    if cfg.get("model_type") != "qwen3_moe":
        return [num_experts(cfg) > 0] * L
    step = int(cfg.get("decoder_sparse_step", 1))
    only = set(cfg.get("mlp_only_layers") or [])
    return [num_experts(cfg) > 0 and i not in only and (i + 1) % step == 0 for i in range(L)]


def moe_attrs(cfg) -> Dict[str, object]:
    """The moe_* attributes of a `kktrain grads` dump of this config ({} for a dense model).
    moe_aux_loss_coef is the weight transformers gives the load-balancing loss in the training
    loss: a Qwen3-MoE's router_aux_loss_coef only with output_router_logits true (else 0); a
    Mixtral's router_aux_loss_coef (kktrain adds it whatever output_router_logits says)."""
    E = num_experts(cfg)
    if E == 0:
        return {}
    qwen = cfg.get("model_type") == "qwen3_moe"
    coef = float(cfg.get("router_aux_loss_coef", 0.001))
    if qwen and not cfg.get("output_router_logits", False):
        coef = 0.0
    return {"moe_num_experts": E, "moe_top_k": int(cfg["num_experts_per_tok"]),
            "moe_intermediate_size": int(cfg["moe_intermediate_size"] if qwen
                                         else cfg["intermediate_size"]),
            "moe_norm_topk_prob": int(bool(cfg.get("norm_topk_prob", False))) if qwen else 1,
            "moe_shared_expert_intermediate_size": 0, "moe_aux_loss_coef": coef}


def head_dim(cfg) -> int:
    """Per-head width: config head_dim when given (Qwen3 always), else C / H."""
    return int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])


def attention_bias(cfg) -> str:
    """Which attention projections carry a bias: "qkv" (Qwen2, always), "qkvo" (attention_bias
    true: Llama, Qwen3, OLMo 2) or "none" (always for Phi-3: Phi3Attention's qkv_proj and o_proj
    have none, whatever an attention_bias key says)."""
    if cfg.get("model_type") == "qwen2":
        return "qkv"
    if cfg.get("model_type") == "phi3":
        return "none"
    return "qkvo" if cfg.get("attention_bias", False) else "none"


def qk_norm(cfg) -> str:
    """"per_head" for Qwen3, Qwen3-MoE and Gemma 3 (q_norm / k_norm over head_dim), "whole" for
    OLMo 2 (q_norm over the whole q projection, H * head_dim values; k_norm over KV * head_dim),
    else "none"."""
    t = text_config(cfg).get("model_type")
    if t == "olmo2":
        return "whole"
    return "per_head" if t in ("qwen3", "qwen3_moe", "gemma3_text") else "none"


def rotary_dim(cfg) -> int:
    """How many of each head's values rotate: Phi-3's int(head_dim * partial_rotary_factor)
    (Phi-4-mini: 0.75; top-level key, or inside rope_scaling as transformers 5 writes it),
    head_dim for every other family (they do not read partial_rotary_factor)."""
    cfg = text_config(cfg)
    D = head_dim(cfg)
    if cfg.get("model_type") != "phi3":
        return D
    f = cfg.get("partial_rotary_factor")
    if f is None:
        f = (cfg.get("rope_scaling") or {}).get("partial_rotary_factor", 1.0)
    R = int(D * float(f))
    if R <= 0 or R % 2 or R > D:
        raise ValueError(f"partial_rotary_factor {f}: rotary_dim {R} of head_dim {D} must be a "
                         "positive even number")
    return R


def rope_scaling(cfg) -> Optional[Dict[str, object]]:
    """The dump's rope_scaling for this config: None for none (or rope_type "default"); a
    llama3 dict as the config writes it; Phi-3's longrope resolved to {"rope_type": "longrope",
    "short_factor", "long_factor", "original_max_position_embeddings" n, "attention_factor" a}
    (Phi3Config reads the old names "su" and "yarn" as longrope): n the top-level
    original_max_position_embeddings (Phi-3 writes it there; else the dict's; else
    max_position_embeddings); a the dict's attention_factor, else 1 when factor =
    max_position_embeddings / n <= 1, else sqrt(1 + ln(factor) / ln(n))
    (_compute_longrope_parameters). A dict "factor" beside a top-level n that disagrees with
    max_position_embeddings / n is refused: transformers 4 uses the ratio, 5 the factor. Each
    factor list must have rotary_dim / 2 values (Phi3Config's rule). A Gemma 3 config's is its
    text config's (`text_config`: transformers 5's rope_parameters read as rope_scaling)."""
    cfg = text_config(cfg)
    s = cfg.get("rope_scaling")
    if s is None:
        return None
    t = s.get("rope_type", s.get("type", "default"))
    if cfg.get("model_type") == "phi3" and t in ("su", "yarn"):
        t = "longrope"
    if t == "default":
        return None
    if t != "longrope":
        return s
    max_pos = int(cfg["max_position_embeddings"])
    n = cfg.get("original_max_position_embeddings")
    top = n is not None
    if n is None:
        n = s.get("original_max_position_embeddings", max_pos)
    n = int(n)
    factor = max_pos / n
    if s.get("factor") is not None:
        if top and not math.isclose(float(s["factor"]), factor, rel_tol=1e-9):
            raise ValueError(f"longrope factor {s['factor']} beside original_max_position_"
                             f"embeddings {n}: max_position_embeddings / n = {factor} (ambiguous "
                             "between transformers versions)")
        factor = float(s["factor"])
    a = s.get("attention_factor")
    if a is None:
        a = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(n))
    R = rotary_dim(cfg)
    for key in ("short_factor", "long_factor"):
        if len(s[key]) != R // 2:
            raise ValueError(f"longrope {key}: {len(s[key])} values, rotary_dim {R} needs {R // 2}")
    return {"rope_type": "longrope", "short_factor": [float(x) for x in s["short_factor"]],
            "long_factor": [float(x) for x in s["long_factor"]],
            "original_max_position_embeddings": n, "attention_factor": float(a)}


LAYER_TYPES = ("full_attention", "sliding_attention")


def window(cfg) -> Tuple[int, str]:
    """(W, layers): the sliding window as transformers reads this config (see the top of this
    file) and a '0'/'1' per layer saying which layers use it; (0, "0" * L) when no layer
    slides."""
    cfg = text_config(cfg)
    L = cfg["num_hidden_layers"]
    family = cfg.get("model_type")
    W = cfg.get("sliding_window")
    if family in GEMMA:
        if cfg.get("use_bidirectional_attention"):
            raise ValueError("use_bidirectional_attention true: not a causal model")
        slides = [t == "sliding_attention" for t in gemma_layer_types(cfg)]
        if any(slides) and W is None:
            raise ValueError("sliding_attention layers without a sliding_window")
    elif family in ("mistral", "mixtral", "phi3"):
        slides = [W is not None] * L  # every layer; layer_types is not read
    elif family == "qwen3_moe":
        if not cfg.get("use_sliding_window", False):
            W = None
        slides = [W is not None] * L  # every layer; max_window_layers, layer_types not read
    elif family == "smollm3":
        nope = [c == "0" for c in rope_layers(cfg)]
        on = cfg.get("use_sliding_window", False)
        types = cfg.get("layer_types")
        if types is None:
            types = ["sliding_attention" if on and W is not None and nope[i] else
                     "full_attention" for i in range(L)]
        if len(types) != L or set(types) - set(LAYER_TYPES):
            raise ValueError(f"layer_types {types}: {L} of {LAYER_TYPES}")
        slides = [t == "sliding_attention" for t in types]
        if any(slides) and W is None:
            raise ValueError("sliding_attention layers without a sliding_window")
        if any(slides) and not on:
            raise ValueError("sliding_attention layers with use_sliding_window false: "
                             "transformers' mask slides, its flash-attention path does not")
    elif family in ("qwen2", "qwen3"):
        if not cfg.get("use_sliding_window", False):
            W = None
        types = cfg.get("layer_types")
        if types is None:
            types = ["sliding_attention" if W is not None and i >= cfg["max_window_layers"]
                     else "full_attention" for i in range(L)]
        if len(types) != L or set(types) - set(LAYER_TYPES):
            raise ValueError(f"layer_types {types}: {L} of {LAYER_TYPES}")
        slides = [t == "sliding_attention" for t in types]
        if any(slides) and W is None:
            raise ValueError("sliding_attention layers without a sliding_window "
                             "(use_sliding_window false or sliding_window null)")
    else:
        slides = [False] * L
    if W is not None and int(W) <= 0:
        raise ValueError(f"sliding_window {W}: must be a positive int or null")
    if not any(slides):
        return 0, "0" * L
    return int(W), "".join("1" if x else "0" for x in slides)


def norm_weight(cfg) -> str:
    """How every RMSNorm applies its weight: "one_plus_fp32" for Gemma 2 / 3 ((1 + w) times the
    fp32 normalized values, then one rounding), "fp32" for OLMo 2 (Olmo2RMSNorm: the weight
    times the fp32 normalized values, then one rounding to the input dtype), else "plain"
    (Llama's: cast, then weight times)."""
    t = text_config(cfg).get("model_type")
    if t in GEMMA:
        return "one_plus_fp32"
    return "fp32" if t == "olmo2" else "plain"


def norm_placement(cfg) -> str:
    """Where a layer's norms sit: "sandwich" for Gemma 2 / 3 (input_layernorm,
    post_attention_layernorm on the attention output, pre_feedforward_layernorm,
    post_feedforward_layernorm on the MLP output), "post" for OLMo 2 (h = x +
    post_attention_layernorm(attn(x)); out = h + post_feedforward_layernorm(mlp(h)); no
    input_layernorm), else "pre" (Llama's)."""
    t = text_config(cfg).get("model_type")
    if t in GEMMA:
        return "sandwich"
    return "post" if t == "olmo2" else "pre"


def mlp_activation(cfg) -> str:
    """The gated MLP's activation: Gemma 2 / 3 read hidden_activation (default
    gelu_pytorch_tanh: "gelu_tanh"; hidden_act is not read); the other families "silu"."""
    c = text_config(cfg)
    if c.get("model_type") not in GEMMA:
        return "silu"
    act = c.get("hidden_activation") or "gelu_pytorch_tanh"
    if act != "gelu_pytorch_tanh":
        raise ValueError(f"hidden_activation {act!r}: only gelu_pytorch_tanh is supported")
    return "gelu_tanh"


def gemma_attrs(cfg) -> Dict[str, object]:
    """The Gemma attributes of a dump as this config means them (0.0: absent / none): embed_scale
    sqrt_hidden; query_pre_attn_scalar; attn_logit_softcapping for Gemma 2 only (transformers'
    Gemma3Attention passes no softcap to the attention function: a Gemma 3 value means
    nothing); final_logit_softcapping (both: Gemma2ForCausalLM / Gemma3ForCausalLM, null =
    none); rope_local_theta = Gemma 3's rope_local_base_freq. For other families the Llama
    values."""
    c = text_config(cfg)
    t = c.get("model_type")
    if t not in GEMMA:
        return {"embed_scale": "none", "query_pre_attn_scalar": 0.0,
                "attn_logit_softcapping": 0.0,
                "final_logit_softcapping": float(c.get("final_logit_softcapping") or 0.0),
                "rope_local_theta": 0.0}
    return {"embed_scale": "sqrt_hidden",
            "query_pre_attn_scalar": float(c["query_pre_attn_scalar"]),
            "attn_logit_softcapping": float((c.get("attn_logit_softcapping") or 0.0)
                                            if t == "gemma2" else 0.0),
            "final_logit_softcapping": float(c.get("final_logit_softcapping") or 0.0),
            "rope_local_theta": float(c["rope_local_base_freq"]) if t == "gemma3_text" else 0.0}


def reference_attrs(cfg) -> Dict[str, object]:
    """The attention and layer-form attributes of a `kktrain grads` dump that torch_reference.py
    reads, as this config means them (sliding_window 0 and window_layers all '0' without a
    sliding layer; rope_layers '1' for each layer that applies rotary with rope_theta, '2' for
    Gemma 3's local rotary; family as kktrain names it, which picks the sparse MLP's tensor
    names and Phi-3's fused ones; rotary_dim the rotated values of a head; norm_weight and
    norm_placement as every RMSNorm applies its weight and where the layer's norms sit; floats
    0.0 where absent). rope_scaling (resolved): `rope_scaling(cfg)`."""
    W, layers = window(cfg)
    a = {"family": family(cfg), "head_dim": head_dim(text_config(cfg)),
         "attention_bias": attention_bias(text_config(cfg)), "qk_norm": qk_norm(cfg),
         "sliding_window": W, "window_layers": layers, "rope_layers": rope_layers(cfg),
         "rotary_dim": rotary_dim(cfg), "norm_weight": norm_weight(cfg),
         "norm_placement": norm_placement(cfg), "mlp_activation": mlp_activation(cfg)}
    a.update(gemma_attrs(cfg))
    return a


def weight_names(cfg) -> List[str]:
    """The text model's tensor names as kktrain's dump names them (a Gemma3ForConditional-
    Generation's too: write_model_dir gives them the file's prefix)."""
    cfg = text_config(cfg)
    names = ["model.embed_tokens.weight"]
    E = num_experts(cfg)
    sparse = sparse_layers(cfg)
    qwen_moe = cfg.get("model_type") == "qwen3_moe"
    bias = attention_bias(cfg)
    place = norm_placement(cfg)
    fused = cfg.get("model_type") == "phi3"  # qkv_proj [q | k | v], gate_up_proj [gate | up]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        names += [] if place == "post" else [p + "input_layernorm.weight"]
        if fused:
            names += [p + "self_attn.qkv_proj.weight", p + "self_attn.o_proj.weight"]
        else:
            names += [p + f"self_attn.{x}_proj.weight" for x in "qkvo"]
        if bias != "none":
            names += [p + f"self_attn.{x}_proj.bias" for x in bias]
        if qk_norm(cfg) != "none":  # per_head (head_dim,) or whole (H*head_dim / KV*head_dim)
            names += [p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"]
        names += [p + "post_attention_layernorm.weight"]
        if place == "sandwich":  # random_weights draws in this order: Gemma's norms first
            names += [p + "pre_feedforward_layernorm.weight",
                      p + "post_feedforward_layernorm.weight"]
        if sparse[i] and qwen_moe:  # Qwen3-MoE: router, each expert's gate, up, down
            names += [p + "mlp.gate.weight"] + [
                p + f"mlp.experts.{e}.{w}_proj.weight" for e in range(E)
                for w in ("gate", "up", "down")]
        elif sparse[i]:  # Mixtral: router, then each expert's w1 (gate), w2 (down), w3 (up)
            names += [p + "block_sparse_moe.gate.weight"] + [
                p + f"block_sparse_moe.experts.{e}.{w}.weight" for e in range(E)
                for w in ("w1", "w2", "w3")]
        elif fused:
            names += [p + "mlp.gate_up_proj.weight", p + "mlp.down_proj.weight"]
        else:
            names += [p + f"mlp.{x}_proj.weight" for x in ("gate", "up", "down")]
        if place == "post":  # OLMo 2's after its MLP (the order random_weights draws in)
            names += [p + "post_feedforward_layernorm.weight"]
    names.append("model.norm.weight")
    if not cfg["tie_word_embeddings"]:
        names.append("lm_head.weight")
    return names


def weight_shape(cfg, name) -> Tuple[int, ...]:
    cfg = text_config(cfg)
    V, C, F = cfg["vocab_size"], cfg["hidden_size"], cfg["intermediate_size"]
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = head_dim(cfg)
    if qk_norm(cfg) == "whole" and name.endswith("self_attn.q_norm.weight"):
        return (H * D,)
    if qk_norm(cfg) == "whole" and name.endswith("self_attn.k_norm.weight"):
        return (KV * D,)
    if name.endswith(("self_attn.q_norm.weight", "self_attn.k_norm.weight")):
        return (D,)
    if name.endswith("self_attn.qkv_proj.weight"):
        return ((H + 2 * KV) * D, C)
    if name.endswith("mlp.gate_up_proj.weight"):
        return (2 * F, C)
    if name.endswith("norm.weight"):
        return (C,)
    if name.endswith("_proj.bias"):
        return {"q_proj": (H * D,), "k_proj": (KV * D,), "v_proj": (KV * D,),
                "o_proj": (C,)}[name.split(".")[-2]]
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        return (V, C)
    last = name.split(".")[-2]
    if name.endswith(("block_sparse_moe.gate.weight", "mlp.gate.weight")):
        return (num_experts(cfg), C)
    if cfg.get("model_type") == "qwen3_moe" and ".mlp.experts." in name:
        F = cfg["moe_intermediate_size"]  # the experts' size (intermediate_size: dense layers)
    return {"w1": (F, C), "w3": (F, C), "w2": (C, F), "q_proj": (H * D, C), "k_proj": (KV * D, C), "v_proj": (KV * D, C),
            "o_proj": (C, H * D), "gate_proj": (F, C), "up_proj": (F, C),
            "down_proj": (C, F)}[last]


def random_weights(cfg, seed=0, std=0.1) -> Dict[str, np.ndarray]:
    """float32 weights (norms around 1, so a kernel that ignored a norm weight is seen; Gemma's
    around 0, as they act as 1 + w; biases small, std / 2, but far from zero)."""
    rng = np.random.default_rng(seed)
    w = {}
    center = 0.0 if norm_weight(cfg) == "one_plus_fp32" else 1.0
    for n in weight_names(cfg):
        s = weight_shape(cfg, n)
        if n.endswith("norm.weight"):
            w[n] = (center + 0.2 * rng.standard_normal(s)).astype(np.float32)
        elif n.endswith(".bias"):
            w[n] = (0.5 * std * rng.standard_normal(s)).astype(np.float32)
        else:
            w[n] = (std * rng.standard_normal(s)).astype(np.float32)
    return w


def conditional_prefixes(cfg) -> Tuple[str, str]:
    """(text prefix, outer prefix) of a Gemma3ForConditionalGeneration's files: the text model's
    `model.X` is `language_model.model.X` and the other modules sit at the top
    (`vision_tower.`, `multi_modal_projector.`; an untied head `language_model.lm_head.weight`)
    before transformers 5; `model.language_model.X` and `model.vision_tower.` /
    `model.multi_modal_projector.` (head `lm_head.weight`) from transformers 5 on (read from the
    config's transformers_version)."""
    major = int(str(cfg.get("transformers_version", "4")).split(".")[0])
    return ("model.language_model.", "model.") if major >= 5 else ("language_model.model.", "")


def file_name(cfg, name: str) -> str:
    """The file's name of the text tensor `name` (kktrain's dump name)."""
    if cfg.get("model_type") != "gemma3":
        return name
    text, outer = conditional_prefixes(cfg)
    if name == "lm_head.weight":
        return "lm_head.weight" if outer else "language_model.lm_head.weight"
    assert name.startswith("model."), name
    return text + name[len("model."):]


def text_tensors(cfg, tensors: Dict[str, object]) -> Dict[str, object]:
    """{dump name: value} of the text model's tensors among a directory's `tensors` (a
    Gemma3ForConditionalGeneration's renamed, its vision tower and projector left out; other
    families' as they are)."""
    if cfg.get("model_type") != "gemma3":
        return dict(tensors)
    back = {file_name(cfg, n): n for n in weight_names(cfg)}
    back.setdefault(file_name(cfg, "lm_head.weight"), "lm_head.weight")
    return {back[n]: v for n, v in tensors.items() if n in back}


def vision_tensors(cfg, seed=0) -> Dict[str, np.ndarray]:
    """A few SigLIP vision tower and multi-modal projector tensors of a Gemma3ForConditional-
    Generation config (its vision_config's sizes), under the file's names: a text-only reader
    must leave them alone (the projector's mm_soft_emb_norm.weight ends like a norm weight)."""
    v = cfg["vision_config"]
    Cv, P, C = v["hidden_size"], v["patch_size"], text_config(cfg)["hidden_size"]
    n_pos = (v["image_size"] // P) ** 2
    _, outer = conditional_prefixes(cfg)
    tower = outer + "vision_tower.vision_model."
    shapes = {tower + "embeddings.patch_embedding.weight": (Cv, 3, P, P),
              tower + "embeddings.patch_embedding.bias": (Cv,),
              tower + "embeddings.position_embedding.weight": (n_pos, Cv),
              tower + "encoder.layers.0.self_attn.q_proj.weight": (Cv, Cv),
              tower + "encoder.layers.0.mlp.fc1.weight": (v["intermediate_size"], Cv),
              tower + "post_layernorm.weight": (Cv,),
              outer + "multi_modal_projector.mm_input_projection_weight": (Cv, C),
              outer + "multi_modal_projector.mm_soft_emb_norm.weight": (Cv,)}
    rng = np.random.default_rng(seed + 1)
    return {n: (0.1 * rng.standard_normal(s)).astype(np.float32) for n, s in shapes.items()}


def write_model_dir(path: str, cfg, weights: Dict[str, np.ndarray], dtype="F32",
                    shards: int = 1, extra_tensors=()) -> None:
    """config.json plus model.safetensors (shards == 1) or `shards` files with an index; any
    family (the tensors are the `weights` given, e.g. random_weights(cfg)). A
    Gemma3ForConditionalGeneration config (model_type gemma3): the text weights (named as the
    dump names them, `model.X`) are written under the file's names (file_name) and followed by
    vision_tensors(cfg)."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    items = [(file_name(cfg, n), dtype, weights[n]) for n in weights] + list(extra_tensors)
    if cfg.get("model_type") == "gemma3":
        items += [(n, dtype, v) for n, v in vision_tensors(cfg).items()]
    if shards == 1:
        write_safetensors(os.path.join(path, "model.safetensors"), items, {"format": "pt"})
        return
    per = math.ceil(len(items) / shards)
    weight_map, total = {}, 0
    for k in range(shards):
        name = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = items[k * per:(k + 1) * per]
        write_safetensors(os.path.join(path, name), part, {"format": "pt"})
        for n, d, v in part:
            weight_map[n] = name
            total += v.size * ELEM_BYTES[d]
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def read_model_dir(path: str):
    """(config, {name: (dtype, float32 values)}, files checked) of a Hugging Face directory of
    any family."""
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    single = os.path.join(path, "model.safetensors")
    index = os.path.join(path, "model.safetensors.index.json")
    tensors, files = {}, []
    if os.path.exists(single):
        files = [single]
    else:
        with open(index) as f:
            idx = json.load(f)
        files = sorted({os.path.join(path, v) for v in idx["weight_map"].values()})
    for file in files:
        meta, t, _ = read_safetensors(file)
        assert meta == {"format": "pt"}, f"{file}: __metadata__ {meta}"
        for n, (d, s, v) in t.items():
            assert n not in tensors, f"{n} in two files"
            tensors[n] = (d, v)
    if not os.path.exists(single):
        assert set(idx["weight_map"]) == set(tensors), "index and files disagree"
        total = sum(v.size * ELEM_BYTES[d] for d, v in tensors.values())
        assert idx["metadata"]["total_size"] == total, "index total_size"
    return cfg, tensors, files


# The names the tests used when every directory was a Llama (same functions).
write_llama_dir = write_model_dir
read_llama_dir = read_model_dir
