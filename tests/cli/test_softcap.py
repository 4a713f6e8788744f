"""Final-logit soft-capping (model.final_logit_softcapping, Gemma 2's logits = cap * tanh(l / cap))
through the files and formats a model travels in. The math (loss and gradients against PyTorch,
main and MTP heads, fp32 and bf16 compute) is tests/parity (parity.*.softcap_*); generation's
capped logits are tests/unit/test_generate.cpp.

usage: test_softcap.py KKTRAIN INPUTS_DIR CASE       (tests/cli/softcap_tests.cmake, label "cli")

- files: a run with a cap records it in its checkpoint and its HDF5 export; `kktrain generate`
  applies the file's cap (the export with the attribute removed samples other tokens) and
  refuses a forged one, and generates from the checkpoint; a resume with another cap or none is
  one error naming the key.
- hf_refusals: Hugging Face's Llama has no soft-capping, so a config.json that sets
  final_logit_softcapping is refused on import (null is accepted), a run that would export
  safetensors is refused before its first step, and `kktrain export --format safetensors` of a
  capped checkpoint is refused and leaves nothing; one error line each, exit 2.
"""

import os
import shutil
import sys
import tempfile

import h5py

HERE = os.path.dirname(os.path.abspath(__file__))
import test_hf as th  # noqa: E402
import test_train as tt  # noqa: E402
from test_train import check  # noqa: E402

KEY = "model.final_logit_softcapping"
CAP = 0.1


def capped_run(tmp, name="run", *extra):
    run_dir = os.path.join(tmp, name)
    args = ["train", tt.config(tt.DEFAULT), *tt.TINY, "train.max_steps=1",
            f"train.output_dir={run_dir}", f"{KEY}={CAP}", *extra]
    rc, o, e = tt.run(args)
    check(rc == 0, "capped run" + tt.describe(args, rc, o, e))
    return run_dir


def root_attr(path, name):
    with h5py.File(path, "r") as f:
        return f.attrs.get(name)


def case_files():
    with tempfile.TemporaryDirectory(prefix="kktrain_softcap_") as tmp:
        run_dir = capped_run(tmp)
        ckpt = os.path.join(run_dir, "checkpoints", "step_00000001", "checkpoint.h5")
        export = os.path.join(run_dir, "export.h5")
        for path in (ckpt, export):
            got = root_attr(path, "final_logit_softcapping")
            check(got is not None and float(got) == CAP, f"{path}: final_logit_softcapping {got}")
        # Generation reads the cap from the file: the same file with the attribute removed
        # samples other tokens (a cap of 0.1 flattens the distribution), one with a forged cap
        # is one error naming the key.
        plain, forged = os.path.join(tmp, "plain.h5"), os.path.join(tmp, "forged.h5")
        for path, edit in ((plain, lambda a: a.__delitem__("final_logit_softcapping")),
                           (forged, lambda a: a.__setitem__("final_logit_softcapping", -1.0))):
            shutil.copyfile(export, path)
            with h5py.File(path, "r+") as f:
                edit(f.attrs)
        answers = []
        for path in (export, plain):
            args = ["generate", path, "--prompt-ids", "1,2,3", "--max-new-tokens", "16",
                    "--temperature", "1", "--seed", "2"]
            rc, o, e = tt.run(args)
            check(rc == 0 and len(o.strip().split(",")) == 16, tt.describe(args, rc, o, e))
            answers.append(o.strip())
        check(answers[0] != answers[1], f"the cap changed no sampled token: {answers[0]}")
        rc, o, e = tt.run(["generate", forged, "--prompt-ids", "1", "--max-new-tokens", "1"])
        th.one_error(rc, o, e, KEY, "got -1.0")
        # Resume with another cap, or none: one error naming the key.
        for other in ("2.0", "null"):
            args = ["train", tt.config(tt.DEFAULT), *tt.TINY_MODEL, "data.seq_len=32",
                    "data.micro_batch_size=2", "data.global_batch_size=2", "train.max_steps=2",
                    f"train.output_dir={run_dir}", "checkpoint.resume=auto", f"{KEY}={other}"]
            rc, o, e = tt.run(args)
            th.one_error(rc, o, e, KEY, where=tt.describe(args, rc, o, e))
        rc, o, e = tt.run(["generate", run_dir, "--prompt-ids", "1,2,3", "--max-new-tokens", "16",
                           "--temperature", "1", "--seed", "2"])
        check(rc == 0 and len(o.strip().split(",")) == 16, "generate from the checkpoint" + o + e)


def case_hf_refusals():
    with tempfile.TemporaryDirectory(prefix="kktrain_softcap_") as tmp:
        conf = th.write_config(tmp)
        model = os.path.join(tmp, "capped")
        th.make_model(model, shards=1, final_logit_softcapping=30.0)
        rc, o, e = tt.run(["config", conf, f"model.init_from={model}"])
        th.one_error(rc, o, e, "final_logit_softcapping", "config.json")
        plain = os.path.join(tmp, "plain")
        th.make_model(plain, shards=1, final_logit_softcapping=None)
        rc, o, e = tt.run(["config", conf, f"model.init_from={plain}"])
        check(rc == 0, "final_logit_softcapping: null is Llama's own" + e)
        # A run that would export safetensors: refused before its first step, nothing written.
        refused = os.path.join(tmp, "refused")
        args = ["train", tt.config(tt.DEFAULT), *tt.TINY, "train.max_steps=1",
                f"train.output_dir={refused}", f"{KEY}={CAP}",
                "checkpoint.export_format=safetensors"]
        rc, o, e = tt.run(args)
        th.one_error(rc, o, e, KEY, "before the first step", where=tt.describe(args, rc, o, e))
        check(not os.path.exists(os.path.join(refused, "checkpoints")), "the refused run trained")
        # `kktrain export --format safetensors` of a capped checkpoint.
        run_dir = capped_run(tmp)
        before = sorted(os.listdir(tmp))
        rc, o, e = tt.run(["export", run_dir, "--format", "safetensors", "--out",
                           os.path.join(tmp, "x")])
        th.one_error(rc, o, e, KEY)
        check(sorted(os.listdir(tmp)) == before, "a refused export left files")


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
