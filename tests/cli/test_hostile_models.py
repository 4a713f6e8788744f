"""Hostile model files (issue 33): every command that reads a model reads it through one loader
and one validation, refuses what it cannot use with one line, and every value a run accepts
round-trips through its own export. The directories are written by tests/hf/hf_files.py and the
mutations of tests/cli/test_hf.py (refusal_cases), from the format's description.

usage: test_hostile_models.py KKTRAIN INPUTS_DIR CASE  (tests/cli/hostile_models.cmake, "hostile")

- generate_like_init_from: every directory model.init_from refuses (test_hf.py's refusal cases,
  fewer or no layers than the file holds, a tensor name with an embedded NUL), generate refuses
  with the same line; max_position_embeddings beyond the config's bound is refused by both.
- nonfinite: a NaN, an infinity, or an fp32 value that rounds to infinity in bfloat16 is refused
  by init_from and generate with one line naming the tensor and the count (the fp32 value loads
  where it stays fp32, and a run or `kktrain export` refuses to export it to bfloat16); on 2 ranks the lowest rank that read a bad row speaks, once.
- messages: a file of a Hugging Face model given for the model, a directory of safetensors
  without config.json, a duplicate key in config.json, a KV cache too large to allocate: one
  line each naming the problem; on 2 ranks a config.json every rank refuses is named once;
  audit refuses what init_from would.
- resume_other_kind: a dense checkpoint resumed with model.moe.num_experts > 0 (and the reverse)
  says so, not that an attribute is missing.
- export_extremes: tiny runs at the extremes of the keys the safetensors export writes
  (aux_loss_coef 0 and 1e300, rms_norm_eps 0 and 1, rope_theta 1e-6 and 1e300, the llama3
  factors, max_seq_len 32 and 4194304, hidden_size 2, intermediate_size 1, no layers, one or
  all KV heads, top_k = num_experts, tied or not), exported and read back: the same values
  (`kktrain config`), the weights load (grads, generate). The largest shapes are not trained.
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "hf"))
import hf_files as hf  # noqa: E402
import test_hf as th  # noqa: E402
import test_train as tt  # noqa: E402
from test_train import check  # noqa: E402

ERROR = "kktrain: error: "
# What the refusals are about when both commands read the model: the prefix names the reader.
PREFIXES = ("model.init_from: ", "generate: ")
# test_hf.py's cases that are about model.dtype: auto (generate keeps the file's dtype).
DTYPE_CASES = {"torch_dtype_disagrees", "float16_auto"}
GEN = ["--prompt-ids", "1,2,3", "--max-new-tokens", "2"]


def reason(line):
    """The refusal without the command's prefix: what both readers must say alike."""
    text = line[len(ERROR):]
    for p in PREFIXES:
        if text.startswith(p):
            return text[len(p):]
    return text


def init_from(tmp, d, *extra):
    out = os.path.join(tmp, "grads.h5")
    args = ["grads", th.write_config(tmp), "--out", out, f"model.init_from={d}", *extra]
    rc, o, e = tt.run(args)
    if os.path.exists(out):
        os.remove(out)
    return args, rc, o, e


def both_refuse(tmp, d, *needles):
    """init_from and generate of directory d: one line each, the same reason, naming needles."""
    args, rc, o, e = init_from(tmp, d)
    a = th.one_error(rc, o, e, *needles, where=tt.describe(args, rc, o, e))
    gargs = ["generate", d, *GEN]
    rc, o, e = tt.run(gargs)
    g = th.one_error(rc, o, e, *needles, where=tt.describe(gargs, rc, o, e))
    check(reason(a) == reason(g), f"init_from and generate disagree:\n  {a}\n  {g}")
    return g


def drop_layer(d):
    """The directory of a model with one layer fewer in config.json than the files hold."""
    th.edit_json(os.path.join(d, "config.json"), lambda j: j.update(num_hidden_layers=1))


def no_layers(d):
    th.edit_json(os.path.join(d, "config.json"), lambda j: j.update(num_hidden_layers=0))


def nul_name(d):
    """A second copy of the final norm under a name with an embedded NUL."""
    p = os.path.join(d, th.SHARD2)
    h, data = th.header_of(p)
    name = "model.norm.weight\x00hidden"
    h[name] = {"dtype": "F32", "shape": [64], "data_offsets": [len(data), len(data) + 256]}
    th.write_raw(p, json.dumps(h).encode(), data + bytes(256))
    th.edit_json(os.path.join(d, "model.safetensors.index.json"),
                 lambda j: j["weight_map"].update({name: th.SHARD2}))


def case_generate_like_init_from():
    with tempfile.TemporaryDirectory(prefix="kktrain_hostile_") as tmp:
        good = os.path.join(tmp, "good")
        th.make_model(good)
        rc, o, e = tt.run(["generate", good, *GEN])
        check(rc == 0, "the good directory generates" + e)
        cases = [(n, m, nd) for n, m, nd, _ in th.refusal_cases() if n not in DTYPE_CASES]
        cases += [
            ("fewer_layers", drop_layer, ("model.layers.1.", "does not use")),
            ("no_layers", no_layers, ("model.layers.0.", "does not use")),
            ("nul_name", nul_name, ("model.norm.weight\\u0000hidden", "does not use")),
            ("nul_name_bad_size", lambda d: (nul_name(d), th.edit_header(
                os.path.join(d, th.SHARD2),
                lambda h: h["model.norm.weight\x00hidden"].update(shape=[3]))),
             ("model.norm.weight\\u0000hidden", "but its shape and dtype")),
            ("max_positions", lambda d: th.edit_json(
                os.path.join(d, "config.json"),
                lambda j: j.update(max_position_embeddings=10**12)),
             ("max_seq_len", "1000000000000", "4194304")),
        ]
        for name, mutate, needles in cases:
            d = os.path.join(tmp, name)
            shutil.copytree(good, d)
            mutate(d)
            line = both_refuse(tmp, d, *needles)
            print(f"{name}: {line[len(ERROR):]}")
        print(f"{len(cases)} directories: init_from and generate refuse each with the same line")


# ---- non-finite weights ----------------------------------------------------------------------

Q1 = "model.layers.1.self_attn.q_proj.weight"


def poisoned(tmp, name, value, rows=(3,)):
    """The good single-file model with `value` in column 0 of the given rows of Q1."""
    d = os.path.join(tmp, name)
    cfg = hf.llama_config(max_pos=64)
    w = hf.random_weights(cfg, seed=3)
    for r in rows:
        w[Q1][r, 0] = value
    hf.write_llama_dir(d, cfg, w, "F32")
    return d


def mpirun(args):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    p = subprocess.run(["mpirun", "-np", "2", tt.KKTRAIN, *args], capture_output=True,
                       text=True, timeout=120, env=env)
    return p.returncode, p.stdout, tt.without_launch_warnings(p.stderr)


def case_nonfinite():
    with tempfile.TemporaryDirectory(prefix="kktrain_hostile_") as tmp:
        for name, value, needle in (("nan", np.nan, "1 NaN"), ("inf", -np.inf, "1 infinite")):
            d = poisoned(tmp, name, value)
            line = both_refuse(tmp, d, Q1, "1 non-finite value", needle)
            print(f"{name}: {line[len(ERROR):]}")
        # 3.4e38 is a float32 but beyond bfloat16's largest value (3.39e38): it loads as fp32
        # and is refused where it would be stored as bf16.
        big = poisoned(tmp, "beyond_bf16", 3.4e38, rows=(0, 5))
        args, rc, o, e = init_from(tmp, big, "model.dtype=float32")
        check(rc == 0, "3.4e38 loads into float32 weights" + tt.describe(args, rc, o, e))
        args, rc, o, e = init_from(tmp, big, "model.dtype=bfloat16")
        line = th.one_error(rc, o, e, Q1, "2 non-finite values", "2 beyond bfloat16's range",
                            where=tt.describe(args, rc, o, e))
        print(f"beyond_bf16: {line[len(ERROR):]}")
        # The edge: 0x7F7F7FFF rounds down to bfloat16's largest value, 0x7F7F8000 (a tie, to
        # even) up to infinity.
        below, tie = (np.array([b], dtype=np.uint32).view(np.float32)[0]
                      for b in (0x7F7F7FFF, 0x7F7F8000))
        args, rc, o, e = init_from(tmp, poisoned(tmp, "below", below), "model.dtype=bfloat16")
        check(rc == 0, "0x7F7F7FFF loads into bfloat16 weights" + tt.describe(args, rc, o, e))
        args, rc, o, e = init_from(tmp, poisoned(tmp, "tie", tie), "model.dtype=bfloat16")
        th.one_error(rc, o, e, Q1, "1 beyond bfloat16's range", where=tt.describe(args, rc, o, e))
        # A run whose fp32 weights hold it: its bfloat16 export is refused (the checkpoint
        # stays), a float32 export is written; `kktrain export` decides the same way.
        run = os.path.join(tmp, "run_fp32")
        args = ["train", th.write_config(tmp), f"model.init_from={big}", "model.dtype=float32",
                "train.max_steps=1", f"train.output_dir={run}"]
        rc, o, e = tt.run(args)
        e = "\n".join(ln for ln in e.splitlines() if "error:" in ln)
        line = th.one_error(rc, o, e, "export", Q1, "refusing to export it",
                            where=tt.describe(args, rc, o, e))
        check(os.path.isdir(os.path.join(run, "checkpoints")), "the checkpoint is kept")
        print(f"run export: {line[len(ERROR):]}")
        out = os.path.join(tmp, "x.h5")
        rc, o, e = tt.run(["export", run, "--out", out])
        th.one_error(rc, o, e, Q1, "2 beyond bfloat16's range", where=e)
        check(not os.path.exists(out), "a refused export left a file")
        rc, o, e = tt.run(["export", run, "--out", out, "--dtype", "float32"])
        check(rc == 0 and os.path.exists(out), "float32 export" + e)
        # Two ranks: rows 0-31 on rank 0, 32-63 on rank 1 (q_proj is 64 x 64).
        conf = th.write_config(tmp)
        for rows, speaker in (((40,), 1), ((3, 40), 0)):
            d = poisoned(tmp, f"ranks_{speaker}_{len(rows)}", np.nan, rows=rows)
            args = ["train", conf, f"model.init_from={d}", "train.max_steps=1",
                    "data.global_batch_size=4",
                    f"train.output_dir={os.path.join(tmp, 'run')}"]
            rc, o, e = mpirun(args)
            lines = [ln for ln in e.splitlines() if "error:" in ln]
            check(rc == 2 and len(lines) == 1, f"2 ranks: one error line, exit 2: rc={rc}\n{e}")
            check(f"[rank {speaker}]" in lines[0] and Q1 in lines[0] and "NaN" in lines[0],
                  f"rank {speaker} should speak: {lines[0]}")
            print(f"2 ranks, NaN in rows {rows}: {lines[0]}")


# ---- messages --------------------------------------------------------------------------------


def case_messages():
    with tempfile.TemporaryDirectory(prefix="kktrain_hostile_") as tmp:
        good = os.path.join(tmp, "good")
        th.make_model(good)
        single = os.path.join(tmp, "single")
        th.make_model(single, shards=1)
        for part in (os.path.join(single, "model.safetensors"), os.path.join(good, "config.json"),
                     os.path.join(good, th.SHARD1)):
            line = both_refuse(tmp, part, part, "is a file of a Hugging Face model",
                               os.path.dirname(part))
            print(f"{os.path.basename(part)}: {line[len(ERROR):]}")
        # The readers of kktrain's files alone say what they were given instead.
        part = os.path.join(single, "model.safetensors")
        for args, needles in ((["inspect", part], ("is a file of a Hugging Face model",)),
                              (["export", part, "--out", os.path.join(tmp, "e.h5")],
                               ("is a file of a Hugging Face model",)),
                              (["export", single, "--out", os.path.join(tmp, "e.h5")],
                               ("is a Hugging Face model directory", "training checkpoint"))):
            rc, o, e = tt.run(args)
            line = th.one_error(rc, o, e, *needles, where=tt.describe(args, rc, o, e))
            print(f"{args[0]}: {line[len(ERROR):]}")
        headless = os.path.join(tmp, "headless")
        shutil.copytree(good, headless)
        os.remove(os.path.join(headless, "config.json"))
        line = both_refuse(tmp, headless, headless, "no config.json")
        print(f"no config.json: {line[len(ERROR):]}")
        dup = os.path.join(tmp, "dup")
        shutil.copytree(good, dup)
        p = os.path.join(dup, "config.json")
        with open(p) as f:
            text = f.read()
        with open(p, "w") as f:  # head_dim twice: 16 (right) then 32
            f.write(text.replace("{", '{"head_dim": 16, "head_dim": 32,', 1))
        line = both_refuse(tmp, dup, "config.json", '"head_dim" appears twice')
        print(f"duplicate key: {line[len(ERROR):]}")
        # Read on every rank while the config loads (head_dim wrong): one line, the lowest rank.
        bad = os.path.join(tmp, "bad_head_dim")
        shutil.copytree(good, bad)
        th.edit_json(os.path.join(bad, "config.json"), lambda j: j.update(head_dim=32))
        for m in (bad, os.path.join(single, "model.safetensors")):
            rc, o, e = mpirun(["train", th.write_config(tmp), f"model.init_from={m}",
                               "data.global_batch_size=4",
                               f"train.output_dir={os.path.join(tmp, 'run2')}"])
            lines = [ln for ln in e.splitlines() if "error:" in ln]
            check(rc == 2 and len(lines) == 1 and lines[0].startswith("kktrain[rank 0]: error: ")
                  and m in lines[0], f"2 ranks: one error line from rank 0, exit 2: rc={rc}\n{e}")
            print(f"2 ranks: {lines[0]}")
        # audit plans the model init_from would fill: the same refusal from the headers alone.
        unused = os.path.join(tmp, "unused")
        shutil.copytree(good, unused)
        dict((n, m) for n, m, _, _ in th.refusal_cases())["unused_tensor"](unused)
        audit = ["audit", th.write_config(tmp), f"model.init_from={unused}"]
        rc, o, e = tt.run(audit)
        line = th.one_error(rc, o, e, "q_proj.bias", "does not use",
                            where=tt.describe(audit, rc, o, e))
        print(f"audit: {line[len(ERROR):]}")
        # A KV cache the process cannot allocate: one line (no literal "\n"), exit 1.
        big = os.path.join(tmp, "long")
        th.make_model(big, shards=1)
        th.edit_json(os.path.join(big, "config.json"),
                     lambda j: j.update(max_position_embeddings=4194304))
        args = [tt.KKTRAIN, "generate", big, "--prompt-ids", "1,2", "--max-new-tokens", "4194300"]
        p = subprocess.run(["bash", "-c", 'ulimit -v 800000; exec "$@"', "sh", *args],
                           capture_output=True, text=True, timeout=120)
        lines = tt.startup_lines(tt.without_launch_warnings(p.stderr))
        check(p.returncode == 1 and len(lines) == 1 and "out of memory" in lines[0] and
              "\\n" not in lines[0], f"an unallocatable KV cache: rc={p.returncode} {lines}")
        print(f"KV cache: {lines[0]}")


def case_resume_other_kind():
    """A dense checkpoint resumed by a mixture-of-experts config, and the reverse."""
    with tempfile.TemporaryDirectory(prefix="kktrain_hostile_") as tmp:
        conf = th.write_config(tmp)
        base = [*tt.TINY_MODEL, "data.seq_len=32"]
        for name, first, then, needles in (
                ("dense", [], ["model.moe.num_experts=2"],
                 ("holds a dense model", "model.moe.num_experts 2")),
                ("sparse", ["model.moe.num_experts=2"], [],
                 ("holds a mixture-of-experts model (2 experts", "dense"))):
            run = os.path.join(tmp, name)
            args = ["train", conf, *base, *first, "train.max_steps=1", f"train.output_dir={run}"]
            rc, o, e = tt.run(args)
            check(rc == 0, "first run" + tt.describe(args, rc, o, e))
            args = ["train", conf, *base, *then, "train.max_steps=2", f"train.output_dir={run}"]
            rc, o, e = tt.run(args)
            # (less the precision warning of bf16 AdamW moments, which comes first)
            e = "\n".join(ln for ln in e.splitlines() if not ln.startswith("kktrain: warning: "))
            line = th.one_error(rc, o, e, *needles, where=tt.describe(args, rc, o, e))
            print(f"{name}: {line[len(ERROR):]}")


# ---- every exported value read back ----------------------------------------------------------

LOW = ["model.hidden_size=2", "model.num_heads=1", "model.intermediate_size=1",
       "model.rms_norm_eps=0", "model.rope_theta=0.000001", "model.num_kv_heads=1",
       "model.max_seq_len=32", "model.moe.num_experts=1", "model.moe.top_k=1",
       "model.moe.aux_loss_coef=0",
       "model.rope_scaling={rope_type: llama3, factor: 0.000001, low_freq_factor: 0.000001, "
       "high_freq_factor: 0.000002, original_max_position_embeddings: 1}"]
HIGH = ["model.rms_norm_eps=1", "model.rope_theta=1e300", "model.num_kv_heads=2",
        "model.max_seq_len=4194304", "model.moe.num_experts=3", "model.moe.top_k=3",
        "model.moe.aux_loss_coef=1e300",
        "model.rope_scaling={rope_type: llama3, factor: 1e300, low_freq_factor: 1e299, "
        "high_freq_factor: 1e300, original_max_position_embeddings: 1073741824}",
        "model.tie_word_embeddings=true"]
DENSE_LOW = [o for o in LOW if ".moe." not in o] + ["model.num_layers=0"]


# The model: section of `kktrain config`, less what the export does not carry (where the weights
# come from, their dtype) and the file markers.
NOT_EXPORTED = ("init_from:", "dtype:", "torch_dtype:")


def model_section(text):
    lines, inside = [], False
    for ln in text.splitlines():
        if not ln.startswith(" "):
            inside = ln == "model:"
            continue
        ln = ln.split("  # from ")[0].rstrip()
        if inside and not ln.strip().startswith(NOT_EXPORTED):
            lines.append(ln.strip())
    return lines


def resolved_model(conf, *overrides):
    rc, o, e = tt.run(["config", conf, *overrides])
    check(rc == 0, "kktrain config" + tt.describe(["config", conf, *overrides], rc, o, e))
    return o


def export_and_read_back(tmp, name, overrides, steps):
    conf = th.write_config(tmp)
    run = os.path.join(tmp, name)
    overrides = [*tt.TINY_MODEL, "model.tie_word_embeddings=false", "data.seq_len=32",
                 *overrides]
    args = ["train", conf, *overrides, f"train.output_dir={run}", f"train.max_steps={steps}",
            "checkpoint.export_format=safetensors"]
    rc, o, e = tt.run(args)
    check(rc == 0, f"{name}: training" + tt.describe(args, rc, o, e))
    export = os.path.join(run, "export")
    given = resolved_model(conf, *overrides)
    back = resolved_model(conf, f"model.init_from={export}", "data.seq_len=32")
    check(model_section(given) == model_section(back),
          f"{name}: read back differs: {sorted(set(model_section(given)) ^ set(model_section(back)))}")
    dump = os.path.join(tmp, name + ".h5")
    args = ["grads", conf, "--out", dump, f"model.init_from={export}", "data.seq_len=32"]
    rc, o, e = tt.run(args)
    check(rc == 0, f"{name}: init_from the export" + tt.describe(args, rc, o, e))
    print(f"{name}: exported and read back: {' '.join(model_section(back))}")
    return export


def case_export_extremes():
    with tempfile.TemporaryDirectory(prefix="kktrain_hostile_") as tmp:
        export_and_read_back(tmp, "moe_low", LOW, steps=1)
        # Values a run accepts but cannot train with (aux_loss_coef 1e300 makes every loss
        # infinite): the run's export at step 0 carries them just the same.
        export_and_read_back(tmp, "moe_high", HIGH, steps=0)
        export = export_and_read_back(tmp, "dense_low", DENSE_LOW, steps=1)
        rc, o, e = tt.run(["generate", export, *GEN])
        check(rc == 0, "generate from the dense export" + tt.describe(["generate"], rc, o, e))


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
