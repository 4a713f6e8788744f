"""End-to-end LoRA (peft) cases of `kktrain train` / `kktrain audit`, on the helpers of
test_train.py.

usage: test_lora.py KKTRAIN INPUTS_DIR CASE
"""

import sys
import tempfile

import test_audit
import test_train as tt

PEFT = 'peft={target_modules: ["*.q_proj", "*.v_proj", "*mlp*"], dim: 4, alpha: 8}'


def adapters(by_name):
    return {n: p for n, p in by_name.items() if ".lora_" in n}


def case_lora_audit_dtypes():
    """Adapters appear for the targeted projections only, inherit the base storage dtype (null
    lora_dtype) or take peft.lora_dtype; the base model is frozen (no grad, no state)."""
    for lora_dtype, expect in (("null", "bfloat16"), ("float32", "float32")):
        doc, by_name, where = test_audit.audit(tt.RISKY, PEFT.replace("}", f", lora_dtype: {lora_dtype}}}"))
        ad = adapters(by_name)
        # 1 layer: q, v, gate, up, down -> 5 projections x (A, B)
        tt.check(len(ad) == 10, f"expected 10 adapter tensors, got {sorted(ad)}" + where)
        tt.check("model.layers.0.self_attn.k_proj.lora_A.weight" not in by_name, "k_proj targeted")
        for n, p in by_name.items():
            if n in ad:
                tt.check(p["trainable"] and p["storage_dtype"] == expect, f"{n}: {p}" + where)
                tt.check(p["exp_avg_dtype"] == expect, f"{n}: AdamW moments follow it: {p}")
            else:
                tt.check(not p["trainable"] and p["grad_dtype"] is None and p["exp_avg_dtype"] is None,
                         f"base parameter {n} should be frozen: {p}" + where)
        a = by_name["model.layers.0.mlp.down_proj.lora_A.weight"]
        b = by_name["model.layers.0.mlp.down_proj.lora_B.weight"]
        tt.check(a["shape"] == [4, 64] and b["shape"] == [32, 4], f"adapter shapes {a} {b}")
        warned = [w for w in doc["warnings"] if "LoRA adapters" in w]
        # The bf16-moment warning covers adapters too (docs/precision.md, "LoRA adapters").
        tt.check(bool(warned) == (expect == "bfloat16"), f"adapter warning: {doc['warnings']}")


def case_lora_train():
    """A LoRA run trains the adapters only: the loss goes down, the precision warning is printed
    for bf16 adapters with AdamW and not for fp32 ones."""
    with tempfile.TemporaryDirectory(prefix="kktrain_lora_") as tmp:
        r = tt.train(tmp, "bf16", tt.RISKY, PEFT, "train.val_every=0", "train.log_every=1",
                     "optimizer.lr=1.0e-2",
                     steps=40).ok()
        rows = r.train_rows()
        tt.check(tt.mean([x["loss"] for x in rows[-5:]]) < rows[0]["loss"] - 0.1,
                 "LoRA loss did not go down" + r.where)
        tt.check(len(r.stderr_lines("LoRA adapters")) == 1, "one adapter warning" + r.where)
        f = tt.train(tmp, "fp32", tt.RISKY, PEFT.replace("}", ", lora_dtype: float32}"),
                     "train.val_every=0", steps=3).ok()
        tt.check(not tt.precision_warnings(f.err), "fp32 adapters must not warn" + f.where)
        tt.check("trainable" in f.err, f.where)


def case_lora_bad_targets():
    """peft.target_modules that select no projection exit 2 with one line naming the key."""
    rc, out, err = tt.run(["audit", tt.config(tt.DEFAULT), *tt.TINY_MODEL,
                           'peft={target_modules: ["*.nothing"]}'])
    tt.expect_one_error(rc, out, err, "peft.target_modules", "selects no projection")



if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
