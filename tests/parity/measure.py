#!/usr/bin/python3
"""Measures the parity errors behind the tolerances of check_grads.py (a developer tool, not a
test): runs `kktrain grads` over a grid of shapes, seeds and dtypes and prints, per precision
case, the worst errors against the float64 reference and the other torch reference.

usage: measure.py KKTRAIN_BIN [--config CONFIG]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_grads as cg  # noqa: E402
import torch_reference as tr  # noqa: E402

SHAPES = [
    [],
    ["model.num_kv_heads=4"],
    ["model.num_kv_heads=1", "model.seed=7"],
    ["model.tie_word_embeddings=true", "model.vocab_size=259", "data.seq_len=17"],
    ["data.seq_len=33", "data.micro_batch_size=1", "model.seed=99", "data.seed=3"],
    ["model.mtp_num_layers=1", "data.seq_len=17"],
    ["model.mtp_num_layers=2", "model.tie_word_embeddings=true", "model.vocab_size=301",
     "data.seq_len=33", "model.seed=5"],
    ["model.mtp_num_layers=2", "model.compute_mtp=false"],
    ["model.init_std=0.1", "model.seed=11", "data.seq_len=33"],
    ["model.init_std=0.1", "model.mtp_num_layers=1", "model.tie_word_embeddings=true",
     "model.seed=12", "data.seed=5"],
    ["model.hidden_size=96", "model.num_heads=6", "model.num_kv_heads=3",
     "model.intermediate_size=200", "model.num_layers=3", "model.seed=21"],
    ["model.num_kv_heads=1", "model.vocab_size=259", "data.seq_len=33",
     "data.micro_batch_size=1", "model.init_std=0.1"],
    ["model.num_kv_heads=4", "model.tie_word_embeddings=true", "data.seq_len=17"],
    ["model.mtp_num_layers=2", "model.tie_word_embeddings=true", "model.vocab_size=301",
     "data.seq_len=33"],
    ["model.mtp_num_layers=1", "model.tie_word_embeddings=true", "model.compute_mtp=false",
     "data.seq_len=17"],
    ["model.vocab_size=259", "data.seq_len=17", "data.micro_batch_size=1"],
    ["model.num_kv_heads=4", "model.tie_word_embeddings=true", "model.init_std=0.1"],
    ["model.mtp_num_layers=2"],
    ["model.mtp_num_layers=1"],
    ["model.tie_word_embeddings=true", "model.vocab_size=259", "data.seq_len=17"],
    ["model.init_std=0.2", "model.seed=31", "data.seed=8"],
    ["model.init_std=0.2", "model.mtp_num_layers=2", "model.seed=32", "data.seq_len=33"],
    ["model.seed=41", "data.seed=41"],
    ["model.num_kv_heads=1", "model.seed=7", "data.seq_len=33"],
    ["model.seed=42", "data.seed=42", "model.tie_word_embeddings=true", "data.seq_len=33"],
]
DTYPES = {
    "fp32/fp32": ["model.dtype=float32", "distributed.mp_policy.param_dtype=float32"],
    "bf16 storage/fp32": ["model.dtype=bfloat16", "distributed.mp_policy.param_dtype=float32"],
    "fp32 storage/bf16": ["model.dtype=float32", "distributed.mp_policy.param_dtype=bfloat16"],
    "bf16/bf16": ["model.dtype=bfloat16", "distributed.mp_policy.param_dtype=bfloat16"],
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kktrain")
    ap.add_argument("--config", default=cg.DEFAULT_CONFIG)
    a = ap.parse_args()
    keys = ["loss/f64", "loss/oth", "loss oth/f64", "loss ratio(raw)", "loss ratio(floored)",
            "grad/f64", "grad/oth", "grad oth/f64", "grad ratio(raw)", "grad ratio(floored)",
            "grad/f64 1 rounding", "grad/f64 / bf16 bound"]
    with tempfile.TemporaryDirectory() as tmp:
        for case, dt in DTYPES.items():
            worst = {k: (0.0, "") for k in keys}
            for shape in SHAPES:
                out = os.path.join(tmp, "g.h5")
                cg.run_kktrain(a.kktrain, a.config, dt + shape, out)
                d = tr.load_dump(out)
                r64 = tr.reference(d, "float64")
                ro = tr.reference(d, "bf16_autocast" if d.compute_dtype == "bfloat16"
                                  else "float32")
                tag = " ".join(shape) or "base"

                def upd(k, v):
                    if v > worst[k][0]:
                        worst[k] = (v, tag)

                B, T = d.input_ids.shape
                pairs = [(d.loss, r64.loss, ro.loss, B * T)]
                if d.K and d.compute_mtp:
                    pairs.append((d.mtp_loss, r64.mtp_loss, ro.mtp_loss, B * (T - d.K)))
                for kk, ref, oth, ntok in pairs:
                    e64, eo, t64 = cg.rel(kk, ref), cg.rel(kk, oth), cg.rel(oth, ref)
                    upd("loss/f64", e64)
                    upd("loss/oth", eo)
                    upd("loss oth/f64", t64)
                    upd("loss ratio(raw)", e64 / max(t64, 1e-12))
                    upd("loss ratio(floored)", e64 / max(t64, cg.ratio_floor_loss(ntok)))
                for n, g in d.grads.items():
                    e64, nb = cg.rel_max(g, r64.grads[n])
                    if nb == 0:
                        continue
                    eo, _ = cg.rel_max(g, ro.grads[n])
                    t64, _ = cg.rel_max(ro.grads[n], r64.grads[n])
                    upd("grad/f64", e64)
                    upd("grad/oth", eo)
                    upd("grad oth/f64", t64)
                    upd("grad ratio(raw)", e64 / max(t64, 1e-30))
                    upd("grad ratio(floored)", e64 / max(t64, cg.RATIO_FLOOR_GRAD))
                    nr = cg.n_grad_roundings(d, n)
                    if nr == 1:
                        upd("grad/f64 1 rounding", e64)
                    if d.storage_dtype == "bfloat16" and d.compute_dtype == "float32":
                        upd("grad/f64 / bf16 bound", e64 / cg.grad_tol_bf16_storage(nr))
            print(f"== {case}  (oth = {'bf16_autocast' if 'bf16' in case.split('/')[1] else 'float32'})")
            for k in keys:
                print(f"  {k:24} {worst[k][0]:.3e}   [{worst[k][1]}]")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
