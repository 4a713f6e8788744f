"""Mixtral (MixtralForCausalLM) Hugging Face directories end to end: the sparse MLP's config.json
keys into model.moe, its weights under Mixtral's names, the PyTorch reference on the imported
weights, training, the safetensors export and its re-import. The files are written and read by
tests/hf/hf_files.py from the format's description.

usage: test_hf_moe.py KKTRAIN INPUTS_DIR CASE       (tests/cli/train_tests.cmake, label "hf")

- import: `kktrain config` takes num_local_experts, num_experts_per_tok, intermediate_size and
  router_aux_loss_coef from config.json (marked with the file); a contradicting YAML value is one
  error; `kktrain grads` loads every tensor bit for bit and its loss, load-balancing loss, routing
  and gradients pass the PyTorch parity check (tests/parity/check_grads.py).
- roundtrip: train 3 steps from the directory, export float32 safetensors: config.json says
  MixtralForCausalLM with the same keys, every tensor is the checkpoint's bit for bit under its
  Mixtral name, and the export loads back to the same values.
- refusals: a router with jitter noise, an export of a model Mixtral cannot hold (a shared
  expert), and generating from a sparse model (no KV-cache decoder for it yet) are one error line
  each, exit 2.
"""

import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "hf"))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
import check_grads  # noqa: E402
import hf_files as hf  # noqa: E402
import test_hf as th  # noqa: E402
import test_train as tt  # noqa: E402
import torch_reference as tr  # noqa: E402
from test_train import check  # noqa: E402

F32 = ["distributed.mp_policy.param_dtype=float32"]


def make_mixtral(path, **extra):
    cfg = hf.mixtral_config(E=4, top_k=2, aux=0.02, F=48, max_pos=64, **extra)
    w = hf.random_weights(cfg, seed=5)
    hf.write_llama_dir(path, cfg, w, "F32", shards=2)
    return cfg, w


def grads_params(dump):
    import h5py
    with h5py.File(dump, "r") as f:
        return {n: np.asarray(ds[()], dtype=np.float32) for n, ds in f["params"].items()}


def case_import():
    with tempfile.TemporaryDirectory(prefix="kktrain_hf_moe_") as tmp:
        model = os.path.join(tmp, "model")
        _, w = make_mixtral(model)
        conf = th.write_config(tmp)
        rc, o, e = tt.run(["config", conf, f"model.init_from={model}"])
        check(rc == 0, "config" + tt.describe(["config"], rc, o, e))
        for line in ("num_experts: 4", "top_k: 2", "intermediate_size: 48",
                     "aux_loss_coef: 0.02"):
            check(line in o, f"resolved config lacks {line!r}:\n{o}")
        args = ["config", conf, f"model.init_from={model}", "model.moe.num_experts=8"]
        rc, o, e = tt.run(args)
        th.one_error(rc, o, e, "model.moe.num_experts", "num_local_experts")
        dump = os.path.join(tmp, "g.h5")
        args = ["grads", conf, "--out", dump, f"model.init_from={model}", *F32]
        rc, o, e = tt.run(args)
        check(rc == 0, "grads" + tt.describe(args, rc, o, e))
        got = grads_params(dump)
        check(set(got) == set(w), f"parameters {sorted(set(got) ^ set(w))}")
        for n, v in w.items():
            check(np.array_equal(got[n].view(np.uint32), v.view(np.uint32)), f"{n} not loaded "
                  "bit for bit")
        check(check_grads.compare(tr.load_dump(dump)) == 0, "parity of the imported Mixtral")


def case_roundtrip():
    with tempfile.TemporaryDirectory(prefix="kktrain_hf_moe_") as tmp:
        model = os.path.join(tmp, "model")
        src, _ = make_mixtral(model)
        conf = th.write_config(tmp)
        run_dir = os.path.join(tmp, "run")
        args = ["train", conf, f"model.init_from={model}", f"train.output_dir={run_dir}",
                "train.max_steps=3", "checkpoint.export_format=safetensors",
                "checkpoint.export_dtype=float32", "optimizer.lr=1e-2", *F32]
        rc, o, e = tt.run(args)
        check(rc == 0, "train" + tt.describe(args, rc, o, e))
        master = th.checkpoint_values(run_dir)
        export = os.path.join(run_dir, "export")
        cfg, tensors, _ = hf.read_llama_dir(export)
        for k in ("architectures", "model_type", "num_local_experts", "num_experts_per_tok",
                  "router_aux_loss_coef", "intermediate_size", "hidden_size",
                  "num_hidden_layers"):
            check(cfg[k] == src[k], f"config.json {k}: {cfg[k]} vs the source's {src[k]}")
        check(set(tensors) == set(master) == set(hf.weight_names(src)),
              f"tensor names {sorted(set(tensors) ^ set(hf.weight_names(src)))}")
        moved = 0
        for n, (d, v) in tensors.items():
            check(d == "F32" and np.array_equal(v.view(np.uint32), master[n].view(np.uint32)),
                  f"{n}: export is not the checkpoint bit for bit")
        dump = os.path.join(tmp, "back.h5")
        args = ["grads", conf, "--out", dump, f"model.init_from={export}", *F32]
        rc, o, e = tt.run(args)
        check(rc == 0, "init_from the export" + tt.describe(args, rc, o, e))
        back = grads_params(dump)
        _, before = hf.read_llama_dir(model)[:2]
        for n, want in master.items():
            check(np.array_equal(back[n].view(np.uint32), want.view(np.uint32)),
                  f"{n} loaded back differs")
            moved += not np.array_equal(before[n][1], want)
        check(moved > 0, "training changed nothing")
        print(f"roundtrip: {len(tensors)} Mixtral tensors, {moved} trained, exported and loaded "
              "back bit for bit")


def case_refusals():
    with tempfile.TemporaryDirectory(prefix="kktrain_hf_moe_") as tmp:
        model = os.path.join(tmp, "jitter")
        make_mixtral(model, router_jitter_noise=0.01)
        conf = th.write_config(tmp)
        rc, o, e = tt.run(["config", conf, f"model.init_from={model}"])
        th.one_error(rc, o, e, "router_jitter_noise")
        run_dir = os.path.join(tmp, "run")
        args = ["train", os.path.join(tt.INPUTS, "default.yaml"), f"train.output_dir={run_dir}",
                "train.max_steps=1", "model.moe.num_experts=4",
                "model.moe.shared_expert_intermediate_size=32"]
        rc, o, e = tt.run(args)
        check(rc == 0, "train" + tt.describe(args, rc, o, e))
        args = ["export", run_dir, "--format", "safetensors", "--out", os.path.join(tmp, "x")]
        rc, o, e = tt.run(args)
        th.one_error(rc, o, e, "Mixtral", "shared_expert_intermediate_size")
        check(not os.path.exists(os.path.join(tmp, "x")), "a refused export left files")
        rc, o, e = tt.run(["generate", run_dir, "--prompt", "ab", "--max-new-tokens", "2"])
        th.one_error(rc, o, e, "generate", "mixture-of-experts")


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
