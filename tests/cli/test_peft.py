"""LoRA adapters in Hugging Face PEFT's format (io/peft.hpp) end to end: `kktrain export RUN
--format peft`, checkpoint.export_format: peft, and peft.init_from. Every file is read here from
the formats' descriptions (tests/hf/hf_files.py parses safetensors with json + numpy), never with
kktrain's code; Debian ships neither python3-peft nor python3-transformers nor
python3-safetensors, so the adapter_config.json keys and tensor names are checked against PEFT's
documented ones (LoraConfig; `get_peft_model_state_dict` names).

usage: test_peft.py KKTRAIN INPUTS_DIR CASE      (tests/cli/peft.cmake, label "peft")

- export: adapter_config.json and adapter_model.safetensors as PEFT writes them (keys, values,
  tensor names base_model.model.<module>.lora_A/B.weight, shapes A (r, in) and B (out, r), the
  adapters' dtype or --dtype), target_modules as PEFT matches them (suffix or exact names) selecting
  exactly the adapted modules; a run without LoRA is refused in one line.
- merged: the independent reader: base + (lora_alpha / r) B A from the PEFT files equals the merged
  export.h5 (bf16: within one bf16 rounding; float32: one fp32 rounding), and a float64 PyTorch
  forward of base + adapters equals the merged model's forward (and `kktrain generate` on the
  merged export picks the same tokens).
- roundtrip: the PEFT directory of a run -> a new run with peft.init_from: its adapters at step 0
  (`kktrain grads` dump) equal the file's bit for bit; it trains on from them; resuming, the
  checkpoint wins.
- own_output: peft.init_from naming the run's own adapter output (<output_dir>/adapter with
  checkpoint.export_format: peft; also through a symbolic link) is refused in one line before
  anything is read or written, as every other input the run writes is; the directory is unchanged.
- init_only: a peft section holding only init_from is a LoRA run with the adapter's r,
  lora_alpha and target_modules (a list, or a regular expression string): its adapters at step 0
  equal the file's; a missing directory or a hostile adapter_config.json value is one line naming
  the file and the key (was: a full fine-tune, exit 0, the path never checked).
- regex: target_modules as a string is PEFT's re.fullmatch on the module name (not a search;
  alternatives backtracked into); a pattern that backtracks exponentially ("(.|.)*[XY]") or does
  not compile is one line naming the file and the key, in bounded time.
- export_readme: a re-export (`kktrain export`, a run's end) keeps the user's README.md; any other
  file of the user's is refused in one line.
- export_symlink: --out naming a symbolic link to a directory writes into the target and keeps the
  link (peft and safetensors); a dangling link is refused in one line.
- export_stale_dir: a user's directory named like a dead process's temporary beside --out is kept;
  a dead export's temporary directory (only an export's files) is removed, one line saying so.
- refusals: rank, alpha, target modules, tensor shape, missing file, truncated safetensors: each one
  line naming the file and the key or tensor, exit 2.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "hf"))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
import hf_files as hf  # noqa: E402
import test_train as tt  # noqa: E402
from test_train import check  # noqa: E402

CONFIG = "data:\n  seq_len: 32\n  micro_batch_size: 2\n  global_batch_size: 2\n"
# q_proj and down_proj of every layer (PEFT's short names), o_proj of layer 1 only (a full name).
TARGETS = '["q_proj", "model.layers.1.self_attn.o_proj", "*.mlp.down_proj"]'
R, ALPHA = 4, 8.0
PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
PEFT_KEYS = {"peft_type", "task_type", "base_model_name_or_path", "r", "lora_alpha",
             "lora_dropout", "target_modules", "bias", "fan_in_fan_out", "inference_mode",
             "init_lora_weights", "modules_to_save", "use_rslora", "use_dora",
             "layers_to_transform", "layers_pattern", "rank_pattern", "alpha_pattern", "revision"}


def peft_arg(targets=TARGETS, r=R, alpha=ALPHA, extra=""):
    return f"peft={{target_modules: {targets}, dim: {r}, alpha: {alpha}{extra}}}"


def setup(tmp, dtype="BF16"):
    """A bf16 Llama directory (2 layers) and the config; returns (model dir, conf, hf config)."""
    cfg = hf.llama_config(V=256, C=32, L=2, H=2, KV=1, F=64, max_pos=64,
                          torch_dtype={"BF16": "bfloat16", "F32": "float32"}[dtype])
    w = hf.random_weights(cfg, seed=5)
    model = os.path.join(tmp, "model")
    hf.write_llama_dir(model, cfg, w, dtype)
    conf = os.path.join(tmp, "c.yaml")
    with open(conf, "w") as f:
        f.write(CONFIG)
    return model, conf, cfg


def kk(args, ok=True):
    rc, out, err = tt.run(args)
    where = tt.describe(args, rc, out, err)
    if ok:
        check(rc == 0, "expected exit 0" + where)
    return rc, out, err, where


def train(conf, model, out_dir, *over, steps=4):
    return kk(["train", conf, f"model.init_from={model}", f"train.output_dir={out_dir}",
               f"train.max_steps={steps}", "optimizer.lr=2e-2", "checkpoint.resume=none", *over])


def read_peft(d):
    """(adapter_config, {name: (dtype, shape, fp32 values)}, metadata)."""
    with open(os.path.join(d, "adapter_config.json")) as f:
        conf = json.load(f)
    meta, t, _ = hf.read_safetensors(os.path.join(d, "adapter_model.safetensors"))
    return conf, t, meta


def peft_selects(targets, module):
    """PEFT's rule for a target_modules list: the module's name equals a target or ends with
    '.' + target (a str would be a regex full match; kktrain writes lists)."""
    return any(module == t or module.endswith("." + t) for t in targets)


def linear_modules(L):
    return [f"model.layers.{i}.{'self_attn' if p[0] in 'qkvo' else 'mlp'}.{p}"
            for i in range(L) for p in PROJ]


def adapted(tensors):
    """{module: (A values, B values)} of PEFT tensor names."""
    out = {}
    for n, (_, _, v) in tensors.items():
        check(n.startswith("base_model.model.") and (n.endswith(".lora_A.weight") or
                                                      n.endswith(".lora_B.weight")),
              f"not a PEFT LoRA tensor name: {n}")
        module, ab = n[len("base_model.model."):-len(".lora_A.weight")], n[-8]
        out.setdefault(module, {})[ab] = v
    return {m: (p["A"], p["B"]) for m, p in out.items()}


def check_peft_dir(d, cfg, model, dtype):
    conf, tensors, meta = read_peft(d)
    check(set(conf) == PEFT_KEYS, f"adapter_config.json keys {sorted(conf)}")
    want = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": R, "lora_alpha": ALPHA,
            "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False, "use_rslora": False,
            "use_dora": False, "modules_to_save": None, "layers_to_transform": None,
            "layers_pattern": None, "rank_pattern": {}, "alpha_pattern": {},
            "init_lora_weights": True, "inference_mode": True}
    for k, v in want.items():
        check(conf[k] == v and type(conf[k]) is type(v), f"adapter_config.json {k}: {conf[k]!r}")
    check(os.path.samefile(conf["base_model_name_or_path"], model),
          f"base_model_name_or_path {conf['base_model_name_or_path']!r}, not {model}")
    check(sorted(conf["target_modules"]) == ["down_proj", "model.layers.1.self_attn.o_proj",
                                             "q_proj"], f"target_modules {conf['target_modules']}")
    check(meta == {"format": "pt"}, f"__metadata__ {meta}")
    ad = adapted(tensors)
    selected = [m for m in linear_modules(cfg["num_hidden_layers"])
                if peft_selects(conf["target_modules"], m)]
    check(sorted(selected) == sorted(ad), f"PEFT would adapt {selected}, the file holds {sorted(ad)}")
    C, F = cfg["hidden_size"], cfg["intermediate_size"]
    for n, (dt, shape, _) in tensors.items():
        check(dt == dtype, f"{n} stored as {dt}, expected {dtype}")
        module = n[len("base_model.model."):-len(".lora_A.weight")]
        out_f, in_f = hf.weight_shape(cfg, module + ".weight")
        want_shape = (R, in_f) if ".lora_A." in n else (out_f, R)
        check(shape == want_shape, f"{n} shape {shape}, expected {want_shape}")
    print(f"{d}: {len(tensors)} tensors {sorted(tensors)[:2]}..., target_modules "
          f"{conf['target_modules']}; C={C} F={F}")
    return conf, tensors


def case_export():
    with tempfile.TemporaryDirectory(prefix="kktrain_peft_") as tmp:
        model, conf, cfg = setup(tmp)
        run = os.path.join(tmp, "run")
        # bf16 adapters (inherited from the bf16 base), written in their own dtype at the end.
        _, _, err, where = train(conf, model, run, peft_arg(), "checkpoint.export_format=peft")
        check(os.path.isfile(os.path.join(run, "export.h5")), "the merged export.h5 stays" + where)
        _, t16 = check_peft_dir(os.path.join(run, "adapter"), cfg, model, "BF16")
        # `kktrain export --format peft --dtype float32`: the same values widened exactly.
        out = os.path.join(tmp, "ad32")
        kk(["export", run, "--format", "peft", "--out", out, "--dtype", "float32"])
        _, t32 = check_peft_dir(out, cfg, model, "F32")
        for n, (_, _, v) in t16.items():
            check(np.array_equal(v, t32[n][2]), f"{n}: float32 export differs from the bf16 one")
        check(any(np.abs(v).max() > 0 for n, (_, _, v) in t16.items() if ".lora_B." in n),
              "every lora_B is zero: the run trained nothing")
        # A run without LoRA: one line.
        plain = os.path.join(tmp, "plain")
        train(conf, model, plain, steps=1)
        rc, o, e, where = kk(["export", plain, "--format", "peft", "--out",
                              os.path.join(tmp, "x")], ok=False)
        tt.expect_one_error(rc, o, e, "LoRA", where=where)
        check(not os.path.exists(os.path.join(tmp, "x")), "a refused export wrote --out")


def reference_logits(cfg, weights, lora, scale, ids):
    """float64 logits of a Llama (tests/parity/torch_reference.py's layers) whose linear layers
    add scale * (x A^T) B^T for each module in `lora` ({module: (A, B)})."""
    import torch
    import torch.nn.functional as F
    import torch_reference as tr

    d = tr.Dump(attrs={"rms_norm_eps": cfg["rms_norm_eps"], "rope_theta": cfg["rope_theta"],
                       "rope_scaling": None, "vocab_size": cfg["vocab_size"],
                       "hidden_size": cfg["hidden_size"], "num_layers": cfg["num_hidden_layers"],
                       "num_heads": cfg["num_attention_heads"],
                       "num_kv_heads": cfg["num_key_value_heads"]},
                params=weights, storage={n: "float32" for n in weights}, aliases={}, grads={},
                input_ids=ids, targets=ids, loss=0.0)

    class WithLora(tr.Reference):
        def linear(self, x, name, bias=None):
            y = F.linear(x, self.p(name), None if bias is None else self.p(bias))
            m = name[:-len(".weight")]
            if m in lora:
                a, b = (torch.from_numpy(v.astype(np.float64)) for v in lora[m])
                y = y + scale * F.linear(F.linear(x, a), b)
            return y

    ref = WithLora(d, "float64")
    with torch.no_grad():
        t = torch.from_numpy(ids)
        h = F.embedding(t, ref.p("model.embed_tokens.weight"))
        cos, sin = tr.rope_tables(t.shape[1], ref.D, ref.theta, h.dtype, None)
        for i in range(d.L):
            h = ref.block(h, f"model.layers.{i}.", cos, sin)
        return ref.linear(ref.norm(h, "model.norm.weight"), "lm_head.weight").numpy()


def export_params(path):
    import h5py
    with h5py.File(path, "r") as f:
        return {n: np.asarray(f[f"params/{n}"][()], dtype=np.float32) for n in f["params"]}


def case_merged():
    with tempfile.TemporaryDirectory(prefix="kktrain_peft_") as tmp:
        model, conf, cfg = setup(tmp)
        run = os.path.join(tmp, "run")
        train(conf, model, run, peft_arg(extra=", lora_dtype: float32"),
              "checkpoint.export_format=peft")
        pconf, tensors = check_peft_dir(os.path.join(run, "adapter"), cfg, model, "F32")
        lora = adapted(tensors)
        scale = pconf["lora_alpha"] / pconf["r"]
        _, base, _ = hf.read_llama_dir(model)
        base = {n: v for n, (_, v) in base.items()}  # bf16 values, exact in float32
        m32 = os.path.join(tmp, "merged32.h5")
        kk(["export", run, "--dtype", "float32", "--out", m32])
        merged = {"bfloat16": export_params(os.path.join(run, "export.h5")),
                  "float32": export_params(m32)}
        # Elementwise, ref = W + scale * B A in float64. One rounding to nearest of a format with
        # p significant bits is at most 2^-p |ref| (bf16 p = 8, fp32 p = 24); the bf16 export is
        # rounded from the fp32 sum (kktrain rounds W + scale B A once to fp32, then once to
        # bf16): |merged - ref| <= 2^-8 (1 + 2^-24) |ref| + 2^-24 |ref| < (2^-8 + 2^-23) |ref|.
        tol = {"bfloat16": 2.0 ** -8 + 2.0 ** -23, "float32": 2.0 ** -24}
        largest_delta = 0.0
        for kind, params in merged.items():
            check(set(params) == set(base), f"{kind} merged export names {sorted(params)}")
            for n, w in base.items():
                ref = w.astype(np.float64)
                m = n[:-len(".weight")]
                if m in lora:
                    a, b = (v.astype(np.float64) for v in lora[m])
                    delta = scale * (b @ a)
                    ref = ref + delta
                    largest_delta = max(largest_delta, float(np.abs(delta).max()))
                err = np.abs(params[n].astype(np.float64) - ref)
                bound = tol[kind] * np.abs(ref)
                worst = float((err - bound).max())
                check(worst <= 0, f"{kind} {n}: |merged - (W + s B A)| exceeds one {kind} rounding "
                      f"by {worst:.3e}")
        check(largest_delta > 1e-3, f"adapters too small to test the merge ({largest_delta:.2e})")
        print(f"merged export = W + {scale} B A within one rounding; largest |s B A| "
              f"{largest_delta:.3e}")
        # Forward: base + adapters vs the merged model (float64 on the fp32 merged values).
        ids = np.random.default_rng(0).integers(0, 256, size=(2, 24), dtype=np.int64)
        with_adapters = reference_logits(cfg, base, lora, scale, ids)
        of_merged = reference_logits(cfg, merged["float32"], {}, scale, ids)
        without = reference_logits(cfg, base, {}, scale, ids)
        diff = float(np.abs(with_adapters - of_merged).max())
        size = float(np.abs(with_adapters).max())
        moved = float(np.abs(with_adapters - without).max())
        print(f"forward: max |logits(base + adapters) - logits(merged)| {diff:.3e} (largest logit "
              f"{size:.3f}; the adapters move logits by up to {moved:.3e})")
        check(diff <= 1e-5 * size, f"forward differs by {diff:.3e}")
        check(moved > 1e3 * diff, "the adapters barely change the forward: nothing tested")
        # kktrain's own forward of the merged export picks the tokens the reference picks.
        prompt = [int(x) for x in ids[0, :8]]
        _, out, _, _ = kk(["generate", m32, "--prompt-ids", ",".join(map(str, prompt)),
                           "--max-new-tokens", "8"])
        got = [int(x) for x in out.strip().split(",")]
        seq = list(prompt)
        for _ in range(8):
            logits = reference_logits(cfg, base, lora, scale, np.array([seq]))[0, -1]
            seq.append(int(np.argmax(logits)))
        check(got == seq[len(prompt):], f"generate on the merged export {got}, reference "
              f"(base + adapters) {seq[len(prompt):]}")


def grads_dump(conf, model, dump, *over):
    kk(["grads", conf, "--out", dump, f"model.init_from={model}", *over])
    import h5py
    with h5py.File(dump, "r") as f:
        return {n: np.asarray(f[f"params/{n}"][()], dtype=np.float32) for n in f["params"]
                if ".lora_" in n}


def case_roundtrip():
    with tempfile.TemporaryDirectory(prefix="kktrain_peft_") as tmp:
        model, conf, cfg = setup(tmp)
        run = os.path.join(tmp, "run")
        train(conf, model, run, peft_arg(), "checkpoint.export_format=peft")
        adapter = os.path.join(run, "adapter")
        _, tensors = check_peft_dir(adapter, cfg, model, "BF16")
        # Step 0 of a run from the directory: its adapters are the file's, bit for bit.
        got = grads_dump(conf, model, os.path.join(tmp, "g.h5"),
                         peft_arg(extra=f", init_from: {adapter}"))
        names = {"base_model.model." + n: n for n in got}
        check(set(names) == set(tensors), f"adapters {sorted(got)} vs file {sorted(tensors)}")
        for pn, n in names.items():
            check(np.array_equal(got[n].view(np.uint32), tensors[pn][2].view(np.uint32)),
                  f"{n} at step 0 differs from {pn} in the file")
        fresh = grads_dump(conf, model, os.path.join(tmp, "g0.h5"), peft_arg())
        check(any(not np.array_equal(fresh[n], got[n]) for n in got), "init_from changed nothing")
        # Training goes on from them; resumed, the checkpoint's adapters win (a line says so).
        run2 = os.path.join(tmp, "run2")
        _, _, err, where = train(conf, model, run2, peft_arg(extra=f", init_from: {adapter}"),
                                 steps=2)
        check(f"peft.init_from: {adapter}" in err, "the load is logged" + where)
        _, _, err, where = kk(["train", conf, f"model.init_from={model}",
                               f"train.output_dir={run2}", "train.max_steps=3",
                               peft_arg(extra=f", init_from: {adapter}")])
        check("resumed from" in err and "peft.init_from" in err and "checkpoint" in err,
              "resuming says the checkpoint's adapters win" + where)


def write_bad(src, dst, conf_edit=None, tensors_edit=None, truncate=0, drop=None):
    shutil.copytree(src, dst)
    if conf_edit:
        p = os.path.join(dst, "adapter_config.json")
        with open(p) as f:
            c = json.load(f)
        c.update(conf_edit)
        with open(p, "w") as f:
            json.dump(c, f)
    st = os.path.join(dst, "adapter_model.safetensors")
    if tensors_edit:
        _, t, _ = hf.read_safetensors(st)
        items = [(n, d, tensors_edit.get(n, v)) for n, (d, _, v) in t.items()]
        hf.write_safetensors(st, items, {"format": "pt"})
    if truncate:
        size = os.path.getsize(st)
        with open(st, "r+b") as f:
            f.truncate(size - truncate)
    if drop:
        os.remove(os.path.join(dst, drop))
    return dst


def case_refusals():
    with tempfile.TemporaryDirectory(prefix="kktrain_peft_") as tmp:
        model, conf, cfg = setup(tmp)
        run = os.path.join(tmp, "run")
        train(conf, model, run, peft_arg(), "checkpoint.export_format=peft", steps=1)
        good = os.path.join(run, "adapter")
        acj = "adapter_config.json"
        ams = "adapter_model.safetensors"
        q_a = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
        cases = [
            ("rank", good, peft_arg(r=8), [acj, "r", "4", "peft.dim 8"]),
            ("alpha", good, peft_arg(alpha=16.0), [acj, "lora_alpha", "peft.alpha"]),
            ("targets", good, peft_arg(targets='["q_proj"]'),
             [acj, "target_modules", "model.layers.0.mlp.down_proj"]),
            ("shape", write_bad(good, os.path.join(tmp, "shape"), tensors_edit={
                q_a: np.zeros((R, 31), np.float32)}), peft_arg(), [ams, q_a, "[4, 31]"]),
            ("missing", write_bad(good, os.path.join(tmp, "missing"), drop=ams), peft_arg(),
             [ams]),
            ("truncated", write_bad(good, os.path.join(tmp, "trunc"), truncate=5), peft_arg(),
             [ams]),
            ("no_config", write_bad(good, os.path.join(tmp, "noconf"), drop=acj), peft_arg(),
             [acj]),
            ("rslora", write_bad(good, os.path.join(tmp, "rslora"), conf_edit={"use_rslora": True}),
             peft_arg(), [acj, "use_rslora"]),
        ]
        for what, d, parg, needles in cases:
            before = hf_snapshot(d)
            out_dir = os.path.join(tmp, "r_" + what)
            args = ["train", conf, f"model.init_from={model}", f"train.output_dir={out_dir}",
                    "train.max_steps=1", parg.replace("}", f", init_from: {d}}}")]
            rc, o, e = tt.run(args)
            line = tt.expect_one_error(rc, o, e, "peft.init_from", *needles,
                                       where=tt.describe(args, rc, o, e))
            check(hf_snapshot(d) == before, f"{what}: the adapter directory changed")
            print(f"{what}: {line}")
        # The run's end is checked before its first step: an adapter/ it could not replace.
        stray = os.path.join(tmp, "r_end", "adapter")
        os.makedirs(stray)
        with open(os.path.join(stray, "notes.txt"), "w") as f:
            f.write("mine")
        args = ["train", conf, f"model.init_from={model}", f"train.output_dir={tmp}/r_end",
                "train.max_steps=1", peft_arg(), "checkpoint.export_format=peft"]
        rc, o, e = tt.run(args)
        line = tt.expect_one_error(rc, o, e, "checkpoint.export_format", stray, "notes.txt",
                                   where=tt.describe(args, rc, o, e))
        check(not os.path.exists(os.path.join(tmp, "r_end", "metrics.jsonl")),
              "the run trained before refusing its end")
        print(f"run end: {line}")


def run_bounded(args, timeout=60):
    """(rc, out, err, where, seconds) of a kktrain run that must end within `timeout` seconds."""
    t0 = time.time()
    try:
        rc, out, err = tt.run(args, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise tt.Failure(f"still running after {timeout} s (killed): $ kktrain {' '.join(args)}")
    return rc, out, err, tt.describe(args, rc, out, err), time.time() - t0


def run_with(conf, model, out_dir, *over, steps=1):
    return ["train", conf, f"model.init_from={model}", f"train.output_dir={out_dir}",
            f"train.max_steps={steps}", "checkpoint.resume=none", *over]


def case_own_output():
    with tempfile.TemporaryDirectory(prefix="kktrain_peft_") as tmp:
        model, conf, cfg = setup(tmp)
        run = os.path.join(tmp, "run")
        train(conf, model, run, peft_arg(), "checkpoint.export_format=peft", steps=1)
        adapter = os.path.join(run, "adapter")
        before = hf_snapshot(adapter)
        link = os.path.join(tmp, "link")
        os.symlink(adapter, link)
        for what, init in (("the directory", adapter), ("with a trailing /", adapter + "/"),
                           ("a symbolic link to it", link)):
            for parg in (peft_arg(extra=f", init_from: {init}"), f"peft={{init_from: {init}}}"):
                args = run_with(conf, model, run, parg, "checkpoint.export_format=peft", steps=2)
                rc, o, e = tt.run(args)
                line = tt.expect_one_error(rc, o, e, "peft.init_from", "adapter",
                                           "refusing to touch an input",
                                           where=tt.describe(args, rc, o, e))
                check(hf_snapshot(adapter) == before, f"{what}: the adapter directory changed")
                print(f"{what}: {line}")
        # Another output directory: the same adapter is read, and left alone.
        run2 = os.path.join(tmp, "run2")
        train(conf, model, run2, peft_arg(extra=f", init_from: {link}"),
              "checkpoint.export_format=peft", steps=1)
        check(hf_snapshot(adapter) == before, "a run into another directory changed the input")


def dump_matches_file(got, tensors, what):
    names = {"base_model.model." + n: n for n in got}
    check(set(names) == set(tensors), f"{what}: adapters {sorted(got)} vs file {sorted(tensors)}")
    for pn, n in names.items():
        check(np.array_equal(got[n].view(np.uint32), tensors[pn][2].view(np.uint32)),
              f"{what}: {n} at step 0 differs from {pn} in the file")


def case_init_only():
    with tempfile.TemporaryDirectory(prefix="kktrain_peft_") as tmp:
        model, conf, cfg = setup(tmp)
        run = os.path.join(tmp, "run")
        train(conf, model, run, peft_arg(), "checkpoint.export_format=peft", steps=1)
        adapter = os.path.join(run, "adapter")
        _, tensors = check_peft_dir(adapter, cfg, model, "BF16")
        dump = os.path.join(tmp, "g.h5")
        # A directory that does not exist: one line (was: a full fine-tune, exit 0).
        for over in (f"peft.init_from={tmp}/does/not/exist", f"peft={{init_from: {tmp}/nope}}"):
            args = ["grads", conf, "--out", dump, f"model.init_from={model}", over]
            rc, o, e, where, _ = run_bounded(args)
            line = tt.expect_one_error(rc, o, e, "peft.init_from", where=where)
            check("does/not/exist" in line or "nope" in line, "the path is named" + where)
            print(f"missing: {line}")
        # The adapter's r, lora_alpha and target_modules (a list; a regular expression string).
        regex = write_bad(adapter, os.path.join(tmp, "regex"), conf_edit={
            "target_modules": r".*\.(q_proj|down_proj)|model\.layers\.1\.self_attn\.o_proj"})
        for what, over in (("peft.init_from=", f"peft.init_from={adapter}"),
                           ("peft={init_from}", f"peft={{init_from: {adapter}}}"),
                           ("a regex string", f"peft.init_from={regex}")):
            got = grads_dump(conf, model, dump, over)
            dump_matches_file(got, tensors, what)
            print(f"{what}: {len(got)} adapters equal the file's at step 0")
        # Trains on as a LoRA run; its adapter export has the same r, alpha and modules.
        run2 = os.path.join(tmp, "run2")
        train(conf, model, run2, f"peft.init_from={adapter}", "checkpoint.export_format=peft",
              steps=2)
        c2, t2, _ = read_peft(os.path.join(run2, "adapter"))
        check((c2["r"], c2["lora_alpha"]) == (R, ALPHA) and set(t2) == set(tensors),
              f"the run's adapters: r {c2['r']} alpha {c2['lora_alpha']} {sorted(t2)}")
        # Hostile adapter_config.json values: one line naming the file and the key each.
        acj = "adapter_config.json"
        bad = [("r0", {"r": 0}, "r"), ("r_text", {"r": "4"}, "r"), ("r_huge", {"r": 10 ** 12}, "r"),
               ("r_float", {"r": 4.5}, "r"), ("alpha_neg", {"lora_alpha": -1}, "lora_alpha"),
               ("alpha_text", {"lora_alpha": "8"}, "lora_alpha"),
               ("targets_number", {"target_modules": 5}, "target_modules"),
               ("targets_empty", {"target_modules": []}, "target_modules"),
               ("targets_none", {"target_modules": ["nothing_here"]}, "target_modules"),
               ("targets_glob", {"target_modules": ["*_proj"]}, "target_modules"),
               ("targets_regex", {"target_modules": "(.|.)*[XY]"}, "target_modules"),
               ("dora", {"use_dora": True}, "use_dora"),
               ("not_lora", {"peft_type": "IA3"}, "peft_type")]
        for what, edit, key in bad:
            d = write_bad(adapter, os.path.join(tmp, what), conf_edit=edit)
            args = ["grads", conf, "--out", dump, f"model.init_from={model}", f"peft.init_from={d}"]
            rc, o, e, where, s = run_bounded(args)
            line = tt.expect_one_error(rc, o, e, "peft.init_from", acj, key, where=where)
            print(f"{what} ({s:.1f} s): {line}")
        d = write_bad(adapter, os.path.join(tmp, "noconf"), drop=acj)
        args = ["grads", conf, "--out", dump, f"model.init_from={model}", f"peft.init_from={d}"]
        rc, o, e, where, _ = run_bounded(args)
        print("no config:", tt.expect_one_error(rc, o, e, "peft.init_from", acj, where=where))
        # Settings the config gives must agree with the adapter's.
        args = ["grads", conf, "--out", dump, f"model.init_from={model}",
                f"peft={{init_from: {adapter}, dim: 8}}"]
        rc, o, e, where, _ = run_bounded(args)
        print("dim 8:", tt.expect_one_error(rc, o, e, "peft.init_from", acj, "peft.dim 8",
                                            where=where))


def case_regex():
    with tempfile.TemporaryDirectory(prefix="kktrain_peft_") as tmp:
        model, conf, cfg = setup(tmp)
        run = os.path.join(tmp, "run")
        train(conf, model, run, peft_arg(), "checkpoint.export_format=peft", steps=1)
        adapter = os.path.join(run, "adapter")
        dump = os.path.join(tmp, "g.h5")
        o_proj = r"model\.layers\.1\.self_attn\.o_proj"
        good = [
            ("fullmatch", r".*\.(q_proj|down_proj)|" + o_proj),
            # re.fullmatch backtracks into the alternatives: ".*\.q_pro" matches a prefix only
            ("alternatives", r".*\.q_pro|.*\.q_proj|.*\.down_proj|" + o_proj),
        ]
        for k, (what, pattern) in enumerate(good):
            d = write_bad(adapter, os.path.join(tmp, f"good{k}"),
                          conf_edit={"target_modules": pattern})
            grads_dump(conf, model, dump, peft_arg(extra=f", init_from: {d}"))
            print(f"{what}: {pattern!r} selects the run's modules")
        acj = "adapter_config.json"
        bad = [
            # a search would select every q_proj and down_proj: PEFT's full match selects only
            # layer 1's o_proj
            ("not a search", "q_proj|down_proj|" + o_proj, ["does not select",
                                                          "model.layers.0.self_attn.q_proj"]),
            ("search prefix", r"model\.layers\.\d+\.self_attn", ["does not select"]),
            ("exponential", "(.|.)*z", []),
            ("exponential class", "(.|.)*[XY]", []),
            ("nested", "((a|a)*)*(.|.)*[XY]", []),
            ("not compiling", "(q_proj", []),
            ("huge repeat", "a{99999999}", []),
        ]
        for k, (what, pattern, needles) in enumerate(bad):
            d = write_bad(adapter, os.path.join(tmp, f"bad{k}"),
                          conf_edit={"target_modules": pattern})
            args = ["train", conf, f"model.init_from={model}",
                    f"train.output_dir={tmp}/r_bad{k}", "train.max_steps=1",
                    peft_arg(extra=f", init_from: {d}")]
            rc, o, e, where, s = run_bounded(args)
            line = tt.expect_one_error(rc, o, e, "peft.init_from", acj, "target_modules",
                                       *needles, where=where)
            print(f"{what} {pattern!r} ({s:.1f} s): {line}")


def exported_run(tmp):
    model, conf, cfg = setup(tmp)
    run = os.path.join(tmp, "run")
    train(conf, model, run, peft_arg(), "checkpoint.export_format=peft", steps=1)
    out = os.path.join(tmp, "ad")
    kk(["export", run, "--format", "peft", "--out", out])
    return model, conf, cfg, run, out


def case_export_readme():
    with tempfile.TemporaryDirectory(prefix="kktrain_peft_") as tmp:
        model, conf, cfg, run, out = exported_run(tmp)
        # A re-export keeps the user's README.md (kktrain writes none), by `kktrain export` and
        # at the end of a run.
        for d, again in ((out, ["export", run, "--format", "peft", "--out", out]),
                         (os.path.join(run, "adapter"),
                          ["train", conf, f"model.init_from={model}", f"train.output_dir={run}",
                           "train.max_steps=2", peft_arg(), "checkpoint.export_format=peft"])):
            with open(os.path.join(d, "README.md"), "w") as f:
                f.write("# my adapter\n")
            _, _, err, where = kk(again)
            check(sorted(os.listdir(d)) == ["README.md", "adapter_config.json",
                                            "adapter_model.safetensors"],
                  f"{d} holds {sorted(os.listdir(d))}" + where)
            with open(os.path.join(d, "README.md")) as f:
                check(f.read() == "# my adapter\n", "README.md changed" + where)
            check_peft_dir(d, cfg, model, "BF16")
        # Any other file of the user's: refused in one line, nothing changed.
        with open(os.path.join(out, "notes.txt"), "w") as f:
            f.write("mine")
        before = hf_snapshot(out)
        rc, o, e, where = kk(["export", run, "--format", "peft", "--out", out], ok=False)
        tt.expect_one_error(rc, o, e, "--out", "notes.txt", where=where)
        check(hf_snapshot(out) == before, "a refused export changed --out")


def case_export_symlink():
    with tempfile.TemporaryDirectory(prefix="kktrain_peft_") as tmp:
        model, conf, cfg, run, out = exported_run(tmp)
        # --out a symbolic link to a directory: written into the target, the link kept.
        for fmt, files in (("peft", "adapter_config.json"), ("safetensors", "config.json")):
            target = os.path.join(tmp, "target_" + fmt)
            os.mkdir(target)
            link = os.path.join(tmp, "link_" + fmt)
            os.symlink(target, link)
            _, _, err, where = kk(["export", run, "--format", fmt, "--out", link])
            check(os.path.islink(link) and os.readlink(link) == target,
                  f"--out {link}: the symbolic link was replaced" + where)
            check(os.path.isfile(os.path.join(target, files)),
                  f"the target {target} holds {os.listdir(target)}" + where)
            kk(["export", run, "--format", fmt, "--out", link])  # again: replaced in the target
            check(os.path.islink(link) and os.path.isfile(os.path.join(target, files)),
                  f"--out {link} again" + where)
            print(f"{fmt}: --out {link} -> {target}: written into the target, the link kept")
        # A symbolic link that leads nowhere: one line, nothing made.
        dangling = os.path.join(tmp, "dangling")
        os.symlink(os.path.join(tmp, "nowhere"), dangling)
        rc, o, e, where = kk(["export", run, "--format", "peft", "--out", dangling], ok=False)
        print("dangling:", tt.expect_one_error(rc, o, e, "--out", "nowhere", where=where))
        check(os.path.islink(dangling) and not os.path.exists(os.path.join(tmp, "nowhere")),
              "a refused export changed the link" + where)


def case_export_stale_dir():
    with tempfile.TemporaryDirectory(prefix="kktrain_peft_") as tmp:
        model, conf, cfg, run, out = exported_run(tmp)
        # Beside --out: a user's directory named like a dead process's temporary is kept (and
        # what it holds); a dead export's temporary directory (only an export's files) goes.
        dead = dead_pid()
        user = os.path.join(tmp, f".ad.tmp.{dead}")
        os.mkdir(user)
        with open(os.path.join(user, "notes.txt"), "w") as f:
            f.write("mine")
        dead2 = dead_pid()
        stale = os.path.join(tmp, f".ad.tmp.{dead2}")
        shutil.copytree(os.path.join(run, "adapter"), stale)
        # Kept too: a symbolic link so named, a directory holding a subdirectory beside an
        # export's file.
        link = os.path.join(tmp, f".ad.tmp.{dead_pid()}")
        os.symlink(user, link)
        nested = os.path.join(tmp, f".ad.tmp.{dead_pid()}")
        os.makedirs(os.path.join(nested, "sub"))
        shutil.copy(os.path.join(out, "adapter_config.json"), nested)
        _, _, err, where = kk(["export", run, "--format", "peft", "--out", out])
        check(os.path.isfile(os.path.join(user, "notes.txt")),
              f"the user's directory {user} was removed" + where)
        check(os.path.islink(link) and os.path.isdir(os.path.join(nested, "sub")),
              f"a symbolic link or a directory with a subdirectory was removed" + where)
        check(not os.path.exists(stale), f"the dead export's temporary {stale} stayed" + where)
        lines = [ln for ln in err.splitlines() if "stale" in ln]
        check(len(lines) == 1 and stale in lines[0] and user not in lines[0],
              f"the line saying what was removed: {lines}" + where)
        print(lines[0])


def dead_pid():
    """The PID of a process that has exited (and been reaped)."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def hf_snapshot(d):
    out = {}
    for n in sorted(os.listdir(d)):
        with open(os.path.join(d, n), "rb") as f:
            out[n] = f.read()
    return out


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
