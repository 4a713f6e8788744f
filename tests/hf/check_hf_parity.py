#!/usr/bin/python3
"""A Hugging Face directory loaded by kktrain (model.init_from) against an independent PyTorch
Llama loaded from the same safetensors files (tests/parity/torch_reference.py; the files read by
tests/hf/hf_files.py, written from the format's description):

  weights   every parameter kktrain holds equals the file's value in the storage dtype (fp32
            exactly; bf16: the file's bf16 bits, or an F32/F16 value rounded once to nearest even)
  loss, gradients   one forward/backward of `kktrain grads` on the first batch, compared with
            tests/parity/check_grads.py's tolerances (fp32 compute: 1e-5 loss, 2e-5 grads; bf16
            storage: + one bf16 rounding of the gradient; bf16 compute: 2.5e-3 / 0.15 and the
            ratio test against torch autocast)
  generation   `kktrain generate DIR --prompt-ids ...` greedy tokens equal the PyTorch model's
            greedy tokens (a full fp32 forward of the whole sequence at each step, on the file's
            values as stored), with the smallest argmax margin printed (a near tie would make
            the comparison meaningless; the smallest is 9e-4 of the largest logit)

usage: check_hf_parity.py KKTRAIN CASE   (CASE: one of CASES)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
sys.path.insert(0, HERE)
import check_grads as cg  # noqa: E402
import hf_files as hf  # noqa: E402
import torch_reference as tr  # noqa: E402

# name: (file dtype, torch_dtype, tied, shards, llama3, kktrain overrides)
CASES = {
    "f32_tied_single_llama3": ("F32", "float32", True, 1, True,
                               ["distributed.mp_policy.param_dtype=float32"]),
    "f32_untied_sharded": ("F32", "float32", False, 3, False,
                           ["distributed.mp_policy.param_dtype=float32"]),
    "bf16_untied_single": ("BF16", "bfloat16", False, 1, False,
                           ["distributed.mp_policy.param_dtype=float32"]),
    "bf16_tied_sharded_llama3": ("BF16", "bfloat16", True, 2, True, []),
    "f16_into_f32": ("F16", "float16", False, 1, False,
                     ["model.dtype=float32", "distributed.mp_policy.param_dtype=float32"]),
    "f32_into_bf16": ("F32", "float32", False, 2, True,
                      ["model.dtype=bfloat16", "distributed.mp_policy.param_dtype=float32"]),
}

CONFIG = "data:\n  seq_len: 32\n  micro_batch_size: 2\n"


def stored_values(file_dtype: str, values: np.ndarray, storage: str) -> np.ndarray:
    """The value kktrain must hold: the file's value, rounded once to bf16 for bf16 storage."""
    if storage == "bfloat16":
        return hf.bf16_values(hf.bf16_bits(values))
    return values


def run(cmd, **kw):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if p.returncode != 0:
        sys.stderr.write(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}{p.stderr}")
        sys.exit(2)
    return p


class Greedy(tr.Reference):
    """The reference model's logits for any token sequence (fp32, no autocast)."""

    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        T = ids.shape[1]
        h = F.embedding(ids, self.p("model.embed_tokens.weight"))
        cos, sin = tr.rope_tables(T, self.D, self.theta, h.dtype, self.scaling)
        for i in range(self.d.L):
            h = self.block(h, f"model.layers.{i}.", cos, sin)
        return self.linear(self.norm(h, "model.norm.weight"), "lm_head.weight")


def check_generation(kktrain: str, d: tr.Dump, path: str, tensors, failures: list) -> None:
    """generate reads the directory as stored (its values widened exactly to fp32, whatever
    model.dtype the training config had): the reference runs on the same values."""
    import copy
    d = copy.copy(d)
    d.params = {n: tensors[n][1] for n in d.params}
    d.storage = {n: "float32" for n in d.params}
    prompt = [int(x) for x in d.input_ids[0, :8]]
    n_new = 12
    out = run([kktrain, "generate", path, "--prompt-ids", ",".join(map(str, prompt)),
               "--max-new-tokens", str(n_new)]).stdout.strip()
    kk = [int(x) for x in out.split(",")]
    ref = Greedy(d, "float32")
    seq, margins = list(prompt), []
    with torch.no_grad():
        for _ in range(n_new):
            logits = ref.logits(torch.tensor([seq]))[0, -1]
            top = torch.topk(logits, 2).values
            margins.append(float((top[0] - top[1]) / logits.abs().max()))
            seq.append(int(torch.argmax(logits)))
    torch_tokens = seq[len(prompt):]
    print(f"\ngenerate --prompt-ids {','.join(map(str, prompt))} --max-new-tokens {n_new}")
    print(f"  kktrain  {kk}\n  pytorch  {torch_tokens}\n  smallest argmax margin "
          f"{min(margins):.2e} of the largest logit")
    if kk != torch_tokens:
        failures.append(f"generated tokens differ: kktrain {kk}, pytorch {torch_tokens}")


def main() -> int:
    kktrain, case = sys.argv[1], sys.argv[2]
    file_dtype, torch_dtype, tied, shards, llama3, overrides = CASES[case]
    cfg = hf.llama_config(tied=tied, max_pos=64, torch_dtype=torch_dtype,
                          rope_scaling=hf.LLAMA3_SCALING if llama3 else None)
    weights = hf.random_weights(cfg, seed=zlib.crc32(case.encode()) % 1000)
    with tempfile.TemporaryDirectory(prefix="kk_hf_parity_") as tmp:
        path = os.path.join(tmp, "model")
        hf.write_llama_dir(path, cfg, weights, file_dtype, shards=shards)
        _, tensors, files = hf.read_llama_dir(path)
        conf = os.path.join(tmp, "c.yaml")
        with open(conf, "w") as f:
            f.write(CONFIG)
        dump_path = os.path.join(tmp, "grads.h5")
        cmd = [kktrain, "grads", conf, "--out", dump_path, f"model.init_from={path}"] + overrides
        print(f"case {case}: {file_dtype} file(s) {[os.path.basename(x) for x in files]}, "
              f"tied={tied}, llama3={llama3}\n" + " ".join(cmd[1:]))
        run(cmd)
        d = tr.load_dump(dump_path)
        failures = []
        # The weights kktrain holds are the file's, in its storage dtype.
        params = {}
        for name, values in d.params.items():
            dtype, file_values = tensors[name]
            want = stored_values(dtype, file_values, d.storage[name])
            params[name] = want
            if not np.array_equal(values.view(np.uint32), want.astype(np.float32).view(np.uint32)):
                bad = int(np.sum(values != want))
                failures.append(f"{name}: {bad} values differ from the file's in "
                                f"{d.storage[name]}")
        print(f"weights: {len(params)} tensors, every value the file's in its storage dtype"
              if not failures else "weights: MISMATCH")
        expect = set(tensors) - ({"lm_head.weight"} if tied else set())
        if set(d.params) != expect:
            failures.append(f"parameters {sorted(set(d.params) ^ expect)} differ from the file's")
        d.params = params  # the reference runs on the file's values
        rc = cg.compare(d)
        check_generation(kktrain, d, path, tensors, failures)
        for f in failures:
            print("FAIL: " + f)
        return 1 if failures or rc else 0


if __name__ == "__main__":
    sys.exit(main())
