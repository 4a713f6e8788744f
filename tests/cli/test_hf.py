"""Hugging Face model directories end to end: model.init_from of a directory (config.json +
safetensors), the safetensors export, and `kktrain generate`'s command line. The files are written
and read by tests/hf/hf_files.py, from the format's description (not kktrain's code).

usage: test_hf.py KKTRAIN INPUTS_DIR CASE       (tests/cli/train_tests.cmake, label "hf")

- config_from_file: a config without model shape keys takes config.json's; `kktrain config` marks
  each with the file; a YAML value that contradicts the file is one error naming both.
- refusals: every malformed directory kind (config.json, index, safetensors header, tensors) is
  refused with exit 2 and one line naming the file, the key or tensor; no input file changes.
- roundtrip: train from an imported directory (FusedAdam with an fp32 master over bf16 weights,
  and AdamW over fp32 weights), export to safetensors: float32 is the master bit for bit, bf16
  its nearest-even rounding; config.json carries the source's architecture; the export loads
  back (init_from) to the same values.
- export_shards: --max-shard-size splits the tensors into shards no larger than it (a larger
  tensor alone), with the index; a previous export is replaced whole, a directory with other
  files is refused untouched.
- export_killed: exports killed with SIGKILL at random moments leave the previous export or
  nothing at --out, never a partial directory.
- generate_cli: wrong prompts are one-line errors; a text prompt round-trips through a byte model.
"""

import hashlib
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "hf"))
import hf_files as hf  # noqa: E402
import test_train as tt  # noqa: E402
from test_train import check  # noqa: E402

CONFIG = "data:\n  seq_len: 32\n  micro_batch_size: 2\n  global_batch_size: 2\n"


def write_config(tmp, text=CONFIG, name="c.yaml"):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def snapshot(root):
    """Every file under root: (sha256, size, mtime_ns)."""
    out = {}
    for d, _, files in os.walk(root):
        for n in files:
            p = os.path.join(d, n)
            st = os.stat(p)
            with open(p, "rb") as f:
                out[p] = (hashlib.sha256(f.read()).hexdigest(), st.st_size, st.st_mtime_ns)
    return out


def one_error(rc, out, err, *needles, where=""):
    lines = tt.startup_lines(err)
    check(rc == 2, f"expected exit 2, got {rc}{where}")
    check(len(lines) == 1 and lines[0].startswith("kktrain: error: "),
          f"expected one error line{where}")
    for n in needles:
        check(n in lines[0], f"the error should name {n!r}: {lines[0]}")
    return lines[0]


def make_model(path, tied=False, shards=2, dtype="F32", llama3=True, **cfg_extra):
    cfg = hf.llama_config(tied=tied, max_pos=64, torch_dtype={"F32": "float32",
                                                              "BF16": "bfloat16",
                                                              "F16": "float16"}[dtype],
                          rope_scaling=hf.LLAMA3_SCALING if llama3 else None, **cfg_extra)
    w = hf.random_weights(cfg, seed=3)
    hf.write_llama_dir(path, cfg, w, dtype, shards=shards)
    return cfg, w


# ---- config.json into the config -------------------------------------------------------------


def case_config_from_file():
    with tempfile.TemporaryDirectory(prefix="kktrain_hf_") as tmp:
        model = os.path.join(tmp, "model")
        cfg, _ = make_model(model)
        conf = write_config(tmp)
        args = ["config", conf, f"model.init_from={model}"]
        rc, out, err = tt.run(args)
        where = tt.describe(args, rc, out, err)
        check(rc == 0, "config" + where)
        src = os.path.join(model, "config.json")
        for key, value in (("vocab_size", "256"), ("hidden_size", "64"), ("num_layers", "2"),
                           ("num_heads", "4"), ("num_kv_heads", "2"), ("intermediate_size", "160"),
                           ("max_seq_len", "64"), ("tie_word_embeddings", "false"),
                           ("rms_norm_eps", "1.0e-05"), ("rope_theta", "10000.0")):
            check(f"  {key}: {value}  # from {src}\n" in out, f"model.{key} from the file" + where)
        check(f"  rope_scaling:  # from {src}\n    rope_type: llama3\n    factor: 8.0\n" in out,
              "rope_scaling from the file" + where)
        check("  dtype: float32\n" in out, "model.dtype: auto takes torch_dtype" + where)
        # The printed config reads back (the values now equal the file's).
        printed = write_config(tmp, out, "printed.yaml")
        rc2, out2, err2 = tt.run(["config", printed])
        same = lambda text: [ln for ln in text.splitlines() if "storage_dtype_source" not in ln]  # noqa: E731
        check(rc2 == 0 and same(out2) == same(out), "the printed config reads back" + err2)
        # A value the config sets equal to the file's is fine; another is one error naming both.
        rc, out, err = tt.run(["config", conf, f"model.init_from={model}", "model.num_heads=4"])
        check(rc == 0, "an equal value" + err)
        rc, out, err = tt.run(["config", conf, f"model.init_from={model}", "model.num_layers=3"])
        one_error(rc, out, err, "model.num_layers", "3 contradicts", src,
                  "num_hidden_layers: 2", "override 'model.num_layers=3'")
        conf3 = write_config(tmp, CONFIG + "model:\n  rope_scaling: null\n", "c3.yaml")
        rc, out, err = tt.run(["config", conf3, f"model.init_from={model}"])
        check(rc == 0, "rope_scaling: null leaves it to the file" + err)
        conf4 = write_config(tmp, CONFIG + "model:\n  rope_theta: 500000.0\n", "c4.yaml")
        rc, out, err = tt.run(["config", conf4, f"model.init_from={model}"])
        one_error(rc, out, err, "model.rope_theta", "contradicts", "c4.yaml:6")


def case_config_v5():
    """transformers 5 writes the rotary settings under rope_parameters and the dtype as `dtype`:
    both are read (a v5 Llama once trained with RoPE base 10000 instead of its own), and a file
    that says the same thing in both forms twice, or contradicts itself, is refused by name."""
    with tempfile.TemporaryDirectory(prefix="kktrain_hf_") as tmp:
        model = os.path.join(tmp, "model")
        make_model(model, llama3=False)
        src = os.path.join(model, "config.json")

        def v5(j):
            for k in ("rope_theta", "rope_scaling", "torch_dtype"):
                j.pop(k, None)
            j["rope_parameters"] = dict(hf.LLAMA3_SCALING, rope_theta=500000.0)
            j["dtype"] = "float32"
        edit_json(src, v5)
        conf = write_config(tmp)
        args = ["config", conf, f"model.init_from={model}"]
        rc, out, err = tt.run(args)
        where = tt.describe(args, rc, out, err)
        check(rc == 0, "config" + where)
        check(f"  rope_theta: 500000.0  # from {src}\n" in out, "rope_theta from rope_parameters"
              + where)
        check(f"  rope_scaling:  # from {src}\n    rope_type: llama3\n    factor: 8.0\n" in out,
              "rope_scaling from rope_parameters" + where)
        check("  dtype: float32\n" in out, "model.dtype: auto takes `dtype`" + where)
        # The two forms at once, disagreeing: refused naming both keys.
        edit_json(src, lambda j: j.update(rope_theta=10000.0))
        rc, out, err = tt.run(args)
        one_error(rc, out, err, "rope_theta", "rope_parameters", where=tt.describe(args, rc, out,
                                                                                  err))
        edit_json(src, lambda j: (j.pop("rope_theta"), j.update(torch_dtype="bfloat16")))
        rc, out, err = tt.run(args)
        one_error(rc, out, err, "torch_dtype", "dtype", where=tt.describe(args, rc, out, err))
        # A key no family has is refused by name, never ignored.
        edit_json(src, lambda j: (j.pop("torch_dtype"), j.update(kv_lora_rank=512)))
        rc, out, err = tt.run(args)
        one_error(rc, out, err, "kv_lora_rank", src, where=tt.describe(args, rc, out, err))


# ---- malformed directories -------------------------------------------------------------------


def header_of(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_raw(path, header_bytes, data):
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)) + header_bytes + data)


def edit_header(path, fn, data_fn=None):
    """Rewrites a shard with fn(header dict) applied (and data_fn(data bytes))."""
    h, data = header_of(path)
    fn(h)
    write_raw(path, json.dumps(h).encode(), data_fn(data) if data_fn else data)


def edit_json(path, fn):
    with open(path) as f:
        j = json.load(f)
    fn(j)
    with open(path, "w") as f:
        json.dump(j, f)


SHARD1 = "model-00001-of-00002.safetensors"
SHARD2 = "model-00002-of-00002.safetensors"
EMBED = "model.embed_tokens.weight"


def first_tensor(h):
    return min((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][0])


def refusal_cases():
    """(name, mutate(dir), needles, extra overrides). Every directory starts as the good one:
    F32, untied, two shards, llama3 scaling."""
    cfgp = lambda d: os.path.join(d, "config.json")  # noqa: E731
    s1 = lambda d: os.path.join(d, SHARD1)  # noqa: E731
    s2 = lambda d: os.path.join(d, SHARD2)  # noqa: E731
    index = lambda d: os.path.join(d, "model.safetensors.index.json")  # noqa: E731

    def cfg_set(**kv):
        return lambda d: edit_json(cfgp(d), lambda j: j.update(kv))

    def hdr(fn, data_fn=None, which=s1):
        return lambda d: edit_header(which(d), fn, data_fn)

    def set_first(field, value):
        def f(h):
            h[first_tensor(h)][field] = value
        return f

    def raw_header(text):
        return lambda d: write_raw(s1(d), text, b"")

    def long_length(n):
        def f(d):
            with open(s1(d), "r+b") as fh:
                fh.write(struct.pack("<Q", n))
        return f

    def dup(d):
        h, data = header_of(s1(d))
        k = first_tensor(h)
        text = json.dumps(h)
        entry = json.dumps({k: h[k]})[1:-1]
        write_raw(s1(d), (text[:-1] + ", " + entry + "}").encode(), data)

    def gap(h):
        for k, e in h.items():
            if k != "__metadata__" and e["data_offsets"][0] > 0:
                e["data_offsets"] = [e["data_offsets"][0] + 4, e["data_offsets"][1] + 4]

    def overlap(h):
        last = max((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][0])
        b, e = h[last]["data_offsets"]
        h[last]["data_offsets"] = [b - 4, e - 4]

    def drop_tensor(name):
        def f(d):
            for p in (s1(d), s2(d)):
                h, data = header_of(p)
                if name in h:
                    b, e = h.pop(name)["data_offsets"]
                    for k, x in h.items():
                        if k != "__metadata__" and x["data_offsets"][0] >= e:
                            x["data_offsets"] = [x["data_offsets"][0] - (e - b),
                                                 x["data_offsets"][1] - (e - b)]
                    write_raw(p, json.dumps(h).encode(), data[:b] + data[e:])
            edit_json(index(d), lambda j: j["weight_map"].pop(name, None))
        return f

    def move_to_both(d):  # the same tensor in the second shard too
        h1, data1 = header_of(s1(d))
        k = first_tensor(h1)
        b, e = h1[k]["data_offsets"]
        h2, data2 = header_of(s2(d))
        h2[k] = {**h1[k], "data_offsets": [len(data2), len(data2) + e - b]}
        write_raw(s2(d), json.dumps(h2).encode(), data2 + data1[b:e])

    def extra_tensor(d):
        h2, data2 = header_of(s2(d))
        h2["model.layers.0.self_attn.q_proj.bias"] = {"dtype": "F32", "shape": [64],
                                                      "data_offsets": [len(data2),
                                                                       len(data2) + 256]}
        write_raw(s2(d), json.dumps(h2).encode(), data2 + bytes(256))
        edit_json(index(d), lambda j: j["weight_map"].update(
            {"model.layers.0.self_attn.q_proj.bias": SHARD2}))

    def wrong_shape(h):
        k = first_tensor(h)
        s = h[k]["shape"]
        h[k]["shape"] = [s[1], s[0]] if len(s) == 2 else s

    def lm_head_tied(d):
        edit_json(cfgp(d), lambda j: j.update(tie_word_embeddings=True))

    def mistral(d):  # a window is Mistral's, not Llama's
        edit_json(cfgp(d), lambda j: j.update(sliding_window=16))

    def as_float16(d):  # the same model stored as F16, torch_dtype float16
        cfg, tensors, _ = hf.read_llama_dir(d)
        for f in os.listdir(d):
            os.remove(os.path.join(d, f))
        cfg["torch_dtype"] = "float16"
        hf.write_llama_dir(d, cfg, {n: v for n, (_, v) in tensors.items()}, "F16", shards=2)

    def no_weights(d):
        for p in (s1(d), s2(d), index(d)):
            os.remove(p)

    return [
        ("architecture", cfg_set(architectures=["GPT2LMHeadModel"]),
         ("config.json", "architectures", "GPT2LMHeadModel"), []),
        ("model_type", cfg_set(model_type="gpt2"), ("model_type", "gpt2"), []),
        # attention_bias: true is a Llama with q/k/v/o biases: these files have none
        ("attention_bias", cfg_set(attention_bias=True), ("has no parameter",
                                                          "self_attn.q_proj.bias"), []),
        ("mlp_bias", cfg_set(mlp_bias=True), ("mlp_bias = true",), []),
        ("hidden_act", cfg_set(hidden_act="gelu"), ("hidden_act", "gelu"), []),
        ("rope_type", cfg_set(rope_scaling={"rope_type": "yarn", "factor": 4.0}),
         ("rope_scaling.rope_type", "yarn"), []),
        ("llama3_incomplete", cfg_set(rope_scaling={"rope_type": "llama3", "factor": 8.0}),
         ("rope_scaling.low_freq_factor", "llama3"), []),
        ("sliding_window", mistral, ("sliding_window = 16", "LlamaForCausalLM"), []),
        # an explicit head_dim is read: these files' projections are for head_dim 16
        ("head_dim", cfg_set(head_dim=32), ("q_proj.weight has shape (64, 64)",
                                            "expects (128, 64)"), []),
        ("heads_divide", cfg_set(num_attention_heads=3), ("hidden_size", "num_attention_heads"),
         []),
        ("config_not_json", lambda d: open(cfgp(d), "w").write("{not json"),
         ("config.json", "not valid JSON"), []),
        ("no_weights", no_weights, ("neither model.safetensors nor",), []),
        ("header_too_long", long_length(200_000_000), (SHARD1, "exceeds the limit"), []),
        ("header_past_eof", long_length(10_000_000), (SHARD1, "runs past the end"), []),
        ("header_not_json", raw_header(b"{\"a\": [1, 2"), (SHARD1, "not valid JSON"), []),
        ("header_not_object", raw_header(b"[1, 2, 3]       "), (SHARD1, "not a JSON object"), []),
        ("duplicate_name", dup, (SHARD1, "twice"), []),
        ("size_mismatch", hdr(set_first("shape", [3])), (SHARD1, "but its shape and dtype"), []),
        ("gap", hdr(gap, lambda data: data + bytes(4)), (SHARD1, "a gap before it"), []),
        ("overlap", hdr(overlap), (SHARD1, "overlaps"), []),
        ("trailing_bytes", hdr(lambda h: None, lambda data: data + bytes(8)),
         (SHARD1, "trailing bytes"), []),
        ("truncated", hdr(lambda h: None, lambda data: data[:-8]), (SHARD1, "truncated"), []),
        ("unknown_dtype", hdr(set_first("dtype", "F8")), (SHARD1, "unknown dtype \"F8\""), []),
        ("integer_dtype", hdr(lambda h: h[first_tensor(h)].update(
            dtype="I32")), (SHARD1, "is I32"), []),
        ("metadata_not_strings", hdr(lambda h: h.update(__metadata__={"format": 1})),
         (SHARD1, "__metadata__"), []),
        ("index_missing_file", lambda d: edit_json(index(d), lambda j: j["weight_map"].update(
            {EMBED: "model-00009-of-00009.safetensors"})),
         ("model-00009-of-00009.safetensors",), []),
        ("index_wrong_shard", lambda d: edit_json(index(d), lambda j: j["weight_map"].update(
            {"model.norm.weight": SHARD1 if j["weight_map"]["model.norm.weight"] == SHARD2
             else SHARD2})), ("model.norm.weight", "mapped to"), []),
        ("index_unlisted", lambda d: edit_json(index(d), lambda j: j["weight_map"].pop(
            "model.norm.weight")), ("model.norm.weight", "not in"), []),
        ("index_phantom", lambda d: edit_json(index(d), lambda j: j["weight_map"].update(
            {"model.phantom.weight": SHARD1})), ("model.phantom.weight", "does not hold it"), []),
        ("tensor_twice", move_to_both, ("model.embed_tokens.weight", "mapped to"), []),
        ("missing_tensor", drop_tensor("lm_head.weight"), ("has no parameter lm_head.weight",),
         []),
        ("wrong_shape", hdr(wrong_shape), ("has shape",), []),
        ("unused_tensor", extra_tensor, ("q_proj.bias", "does not use"), []),
        ("tied_but_present", lm_head_tied, ("lm_head.weight", "tie_word_embeddings: true"), []),
        ("torch_dtype_disagrees", cfg_set(torch_dtype="bfloat16"),
         ("torch_dtype bfloat16", "no tensor is stored in it"), []),
        ("float16_auto", as_float16, ("float16 weights", "set model.dtype"), []),
    ]


def case_refusals():
    with tempfile.TemporaryDirectory(prefix="kktrain_hf_") as tmp:
        good = os.path.join(tmp, "good")
        make_model(good)
        conf = write_config(tmp)
        out = os.path.join(tmp, "grads.h5")
        rc, o, e = tt.run(["grads", conf, "--out", out, f"model.init_from={good}"])
        check(rc == 0, "the good directory loads" + e)
        os.remove(out)
        for name, mutate, needles, extra in refusal_cases():
            d = os.path.join(tmp, name)
            shutil.copytree(good, d)
            mutate(d)
            before = snapshot(d)
            args = ["grads", conf, "--out", out, f"model.init_from={d}", *extra]
            rc, o, e = tt.run(args)
            line = one_error(rc, o, e, *needles, where=tt.describe(args, rc, o, e))
            check(d in line, f"{name}: the error should name the directory or its file: {line}")
            check(not os.path.exists(out), f"{name}: an output was written")
            check(snapshot(d) == before, f"{name}: an input file changed")
            print(f"{name}: {line[len('kktrain: error: '):]}")


# ---- round trip ------------------------------------------------------------------------------


def checkpoint_values(run_dir):
    """{name: fp32 value} of the latest checkpoint: the master where it keeps one."""
    import h5py
    with open(os.path.join(run_dir, "checkpoints", "latest")) as f:
        step = f.read().strip()
    out = {}
    with h5py.File(os.path.join(run_dir, "checkpoints", step, "checkpoint.h5"), "r") as f:
        for name in f["params"]:
            if f"optim/{name}/master" in f:
                out[name] = np.asarray(f[f"optim/{name}/master"][()], dtype=np.float32)
            else:
                out[name] = np.asarray(f[f"params/{name}"][()], dtype=np.float32)
    return out


ARCH_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
             "num_attention_heads", "num_key_value_heads", "rms_norm_eps", "rope_theta",
             "max_position_embeddings", "tie_word_embeddings", "rope_scaling")


def case_roundtrip():
    with tempfile.TemporaryDirectory(prefix="kktrain_hf_") as tmp:
        model = os.path.join(tmp, "model")
        src_cfg, _ = make_model(model, tied=False, shards=2)
        before = snapshot(model)
        conf = write_config(tmp)
        variants = {
            "fused_master": ["model.dtype=bfloat16", "optimizer._target_=FusedAdam",
                             "optimizer.master_weights=true", "optimizer.lr=1e-2"],
            "adamw_fp32": ["optimizer.lr=1e-2"],
        }
        for vname, over in variants.items():
            run_dir = os.path.join(tmp, vname)
            args = ["train", conf, f"model.init_from={model}", f"train.output_dir={run_dir}",
                    "train.max_steps=3", "checkpoint.export_format=safetensors",
                    "checkpoint.export_dtype=float32", "distributed.mp_policy.param_dtype=float32",
                    *over]
            rc, o, e = tt.run(args)
            check(rc == 0, "train from the directory" + tt.describe(args, rc, o, e))
            master = checkpoint_values(run_dir)
            exports = {"float32": os.path.join(run_dir, "export")}
            bf = os.path.join(tmp, vname + "_bf16")
            args = ["export", run_dir, "--format", "safetensors", "--dtype", "bfloat16", "--out", bf]
            rc, o, e = tt.run(args)
            check(rc == 0, "export bf16" + tt.describe(args, rc, o, e))
            exports["bfloat16"] = bf
            for dtype, path in exports.items():
                cfg, tensors, files = hf.read_llama_dir(path)  # every rule of the format
                check(cfg["torch_dtype"] == dtype and cfg["architectures"] == ["LlamaForCausalLM"]
                      and cfg["model_type"] == "llama", f"{path}: config.json {cfg}")
                for k in ARCH_KEYS:
                    check(cfg[k] == src_cfg[k], f"{path}: config.json {k} {cfg[k]} vs the "
                          f"source's {src_cfg[k]}")
                check(set(tensors) == set(master), f"{path}: tensors {sorted(tensors)}")
                for name, (d, v) in tensors.items():
                    want = master[name]
                    if dtype == "bfloat16":
                        check(d == "BF16", f"{name} stored as {d}")
                        ok = np.array_equal(hf.bf16_bits(want), hf.bf16_bits(v))  # v is bf16
                        check(ok and np.array_equal(v, hf.bf16_values(hf.bf16_bits(want))),
                              f"{vname} {name}: bf16 export is not the master rounded to nearest "
                              "even")
                    else:
                        check(d == "F32" and np.array_equal(v.view(np.uint32),
                                                            want.view(np.uint32)),
                              f"{vname} {name}: float32 export is not the master bit for bit")
                print(f"{vname}: {dtype} export of {len(tensors)} tensors in "
                      f"{[os.path.basename(f) for f in files]} matches the checkpoint")
            # The export loads back to the same values.
            dump = os.path.join(tmp, vname + "_back.h5")
            args = ["grads", conf, "--out", dump, f"model.init_from={exports['float32']}",
                    "distributed.mp_policy.param_dtype=float32"]
            rc, o, e = tt.run(args)
            check(rc == 0, "init_from the export" + tt.describe(args, rc, o, e))
            import h5py
            with h5py.File(dump, "r") as f:
                for name, want in master.items():
                    got = np.asarray(f[f"params/{name}"][()], dtype=np.float32)
                    check(np.array_equal(got.view(np.uint32), want.view(np.uint32)),
                          f"{name} loaded back differs")
        check(snapshot(model) == before, "the imported directory changed")


# ---- export: shards, replacing, refusing -----------------------------------------------------


def tiny_checkpoint(tmp, *extra):
    run_dir = os.path.join(tmp, "run")
    rc, o, e = tt.run(["train", tt.config(tt.DEFAULT), *tt.TINY, "train.max_steps=1",
                       f"train.output_dir={run_dir}", *extra])
    check(rc == 0, "tiny run" + e)
    return run_dir


def case_export_shards():
    with tempfile.TemporaryDirectory(prefix="kktrain_hf_") as tmp:
        run_dir = tiny_checkpoint(tmp)
        out = os.path.join(tmp, "export")
        limit = 20000
        args = ["export", run_dir, "--format", "safetensors", "--dtype", "float32", "--out", out,
                "--max-shard-size", f"{limit}B"]
        rc, o, e = tt.run(args)
        check(rc == 0, "sharded export" + tt.describe(args, rc, o, e))
        cfg, tensors, files = hf.read_llama_dir(out)
        check(len(files) > 2, f"expected several shards, got {files}")
        names = [f"model-{k + 1:05d}-of-{len(files):05d}.safetensors" for k in range(len(files))]
        check([os.path.basename(f) for f in files] == names, f"shard names {files}")
        for f in files:
            _, t, n = hf.read_safetensors(f)
            data = sum(v.size * 4 for _, _, v in t.values())
            check(data <= limit or len(t) == 1, f"{f}: {data} bytes of tensors over {limit}")
            check(n % 8 == 0, f"{f}: header of {n} bytes is not padded to 8")
        check("lm_head.weight" not in tensors, "a tied lm_head.weight was written")
        check(cfg["tie_word_embeddings"] is True, "tie_word_embeddings")
        # Again into the same directory, as one file: the shards are gone, the file is there.
        rc, o, e = tt.run(["export", run_dir, "--format", "safetensors", "--out", out])
        check(rc == 0, "re-export" + e)
        check(sorted(os.listdir(out)) == ["config.json", "model.safetensors", "tokenizer.json",
                                          "tokenizer_config.json"],
              f"after re-export: {sorted(os.listdir(out))}")
        # A directory holding anything else is not replaced; nor is a file.
        with open(os.path.join(out, "notes.txt"), "w") as f:
            f.write("mine")
        before = snapshot(out)
        rc, o, e = tt.run(["export", run_dir, "--format", "safetensors", "--out", out])
        one_error(rc, o, e, "--out", "notes.txt", "refusing to replace")
        check(snapshot(out) == before, "a refused export touched the directory")
        rc, o, e = tt.run(["export", run_dir, "--format", "safetensors", "--out",
                           os.path.join(out, "notes.txt")])
        one_error(rc, o, e, "--out", "not a directory")
        for bad in ("0B", "five", "-3GB", "0.5B"):
            rc, o, e = tt.run(["export", run_dir, "--format", "safetensors", "--out",
                               os.path.join(tmp, "x"), "--max-shard-size", bad])
            one_error(rc, o, e, "--max-shard-size", bad)
        rc, o, e = tt.run(["export", run_dir, "--format", "onnx", "--out", os.path.join(tmp, "x")])
        one_error(rc, o, e, "--format", "onnx")
        # The run's own export as safetensors, and an input that is that export is refused.
        run2 = os.path.join(tmp, "run2")
        rc, o, e = tt.run(["train", tt.config(tt.DEFAULT), *tt.TINY, "train.max_steps=1",
                           f"train.output_dir={run2}", "checkpoint.export_format=safetensors"])
        check(rc == 0 and os.path.isdir(os.path.join(run2, "export")), "export_format" + e)
        hf.read_llama_dir(os.path.join(run2, "export"))
        rc, o, e = tt.run(["train", tt.config(tt.DEFAULT), *tt.TINY, "train.max_steps=2",
                           f"train.output_dir={run2}", "checkpoint.export_format=safetensors",
                           f"model.init_from={os.path.join(run2, 'export')}",
                           "checkpoint.resume=none"])
        one_error(rc, o, e, "model.init_from", "export directory", "refusing to touch an input")


def case_export_killed():
    """SIGKILL during exports of a 50 MB float32 model at random moments: --out is always the
    previous complete export or absent, never part of one."""
    with tempfile.TemporaryDirectory(prefix="kktrain_hf_") as tmp:
        run_dir = os.path.join(tmp, "run")
        big = ["model.hidden_size=512", "model.num_layers=4", "model.num_heads=8",
               "model.num_kv_heads=8", "model.intermediate_size=1376", "model.dtype=float32",
               "data.seq_len=32", "data.micro_batch_size=1", "data.global_batch_size=1",
               "checkpoint.resume=none"]
        rc, o, e = tt.run(["train", tt.config(tt.DEFAULT), *big, "train.max_steps=0",
                           f"train.output_dir={run_dir}"], timeout=300)
        check(rc == 0, "the checkpoint" + e)
        out = os.path.join(tmp, "export")
        cmd = [tt.KKTRAIN, "export", run_dir, "--format", "safetensors", "--dtype", "float32",
               "--out", out, "--max-shard-size", "20MB"]
        t0 = time.monotonic()
        subprocess.run(cmd, check=True, capture_output=True)
        full = time.monotonic() - t0
        ref = snapshot(out)
        rng = random.Random(7)
        complete = absent = 0
        for k in range(12):
            if k == 6:  # the second half starts without a previous export
                shutil.rmtree(out)
            p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(rng.uniform(0.0, full))
            p.send_signal(signal.SIGKILL)
            p.wait()
            if not os.path.exists(out):
                check(k >= 6, "a killed export removed the previous one")
                absent += 1
                continue
            got = {os.path.basename(x): v[0] for x, v in snapshot(out).items()}
            check(got == {os.path.basename(x): v[0] for x, v in ref.items()},
                  f"after a kill, {out} is not a complete export: {sorted(os.listdir(out))}")
            hf.read_llama_dir(out)
            complete += 1
        print(f"an export of {full:.2f} s killed 12 times at random moments (6 over a previous "
              f"export, 6 without): {complete} times a complete export at --out, {absent} times "
              "none, never a partial one")


# ---- generate's command line -----------------------------------------------------------------


def case_generate_cli():
    with tempfile.TemporaryDirectory(prefix="kktrain_hf_") as tmp:
        model = os.path.join(tmp, "model")
        make_model(model, shards=1)
        small = os.path.join(tmp, "small")
        cfg = hf.llama_config(V=100, max_pos=16)
        hf.write_llama_dir(small, cfg, hf.random_weights(cfg, 1))
        g = ["generate"]
        p = subprocess.run([tt.KKTRAIN, *g, model, "--prompt", "hi", "--max-new-tokens", "5"],
                           capture_output=True)
        check(p.returncode == 0 and len(p.stdout) == 6 and p.stdout.endswith(b"\n"),
              f"a text prompt answers 5 bytes and a newline: {p.stdout!r} {p.stderr!r}")
        rc, o, e = tt.run(g + [model, "--prompt-ids", "1,2,3", "--max-new-tokens", "5"])
        check(rc == 0 and len(o.strip().split(",")) == 5, "ids prompt" + o + e)
        ids = o.strip()
        rc, o2, e = tt.run(g + [model, "--prompt-ids", "1,2,3", "--max-new-tokens", "5",
                                "--temperature", "0.9", "--top-k", "10", "--seed", "4"])
        rc3, o3, e3 = tt.run(g + [model, "--prompt-ids", "1,2,3", "--max-new-tokens", "5",
                                  "--temperature", "0.9", "--top-k", "10", "--seed", "4"])
        check(rc == 0 and o2 == o3, "the same seed gives the same tokens")
        errors = [
            ([small, "--prompt", "hi"], ("--prompt", "vocab_size >= 256", "100")),
            ([model, "--prompt", "hi", "--prompt-ids", "1"], ("one of them",)),
            ([model], ("--prompt TEXT, --chat MESSAGE or --prompt-ids",)),
            ([model, "--chat", "hi"], ("--chat",)),
            ([model, "--prompt-ids", "1", "--system", "be brief"], ("--system", "--chat")),
            ([model, "--prompt-ids", "1,256"], ("token id 256", "vocab_size 256")),
            ([model, "--prompt-ids", "1,x"], ("--prompt-ids", "'x'")),
            ([model, "--prompt-ids", "1", "--max-new-tokens", "64"], ("max_seq_len 64",)),
            ([model, "--prompt-ids", "1", "--temperature", "-1"], ("--temperature",)),
            ([os.path.join(tmp, "nothing"), "--prompt-ids", "1"], ("generate", "nothing")),
        ]
        for args, needles in errors:
            rc, o, e = tt.run(g + args)
            one_error(rc, o, e, *needles, where=tt.describe(g + args, rc, o, e))
        print(f"greedy answer to 1,2,3: {ids}")


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
