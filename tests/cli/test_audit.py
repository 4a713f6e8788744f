"""End-to-end tests of `kktrain audit` (docs/cli.md, "kktrain audit"): per-parameter dtypes and
bytes for the three precision patterns of docs/precision.md, freezing (module globs, exact names,
tied aliases, unfreezing), warnings. Built on test_train.py's helpers.

usage: test_audit.py KKTRAIN INPUTS_DIR CASE
"""

import json
import os
import sys
import tempfile

import test_train
from test_train import (PATTERN_A, PATTERN_B, RISKY, TINY_MODEL, WARNING_NEEDLES, Failure, check,
                        config, describe, expect_one_error, run, train)

# ---- 6. kktrain audit ------------------------------------------------------------------------

AUDIT_FIELDS = ("name", "trainable", "shape", "storage_dtype", "grad_dtype", "exp_avg_dtype",
                "exp_avg_sq_dtype", "master", "bytes")
# Canonical names and shapes of the tiny model (C 32, H 2 x head 16, KV 1, F 64, V 256).
LAYER_SHAPES = {"input_layernorm.weight": [32], "self_attn.q_proj.weight": [32, 32],
                "self_attn.k_proj.weight": [16, 32], "self_attn.v_proj.weight": [16, 32],
                "self_attn.o_proj.weight": [32, 32], "post_attention_layernorm.weight": [32],
                "mlp.gate_proj.weight": [64, 32], "mlp.up_proj.weight": [64, 32],
                "mlp.down_proj.weight": [32, 64]}


def expected_shapes(layers, tied=True):
    s = {"model.embed_tokens.weight": [256, 32], "model.norm.weight": [32]}
    for i in range(layers):
        for k, v in LAYER_SHAPES.items():
            s[f"model.layers.{i}.{k}"] = v
    if not tied:
        s["lm_head.weight"] = [256, 32]
    return s


def audit(cfg, *overrides, layers=1):
    args = ["audit", config(cfg), *TINY_MODEL, f"model.num_layers={layers}", *overrides, "--json"]
    rc, out, err = run(args)
    where = describe(args, rc, out, err)
    check(rc == 0, "audit failed" + where)
    try:
        doc = json.loads(out)
    except ValueError as e:
        raise Failure(f"audit --json is not JSON ({e})" + where)
    check(isinstance(doc, dict), "audit --json is not an object")
    for k in ("parameters", "compute_dtype", "reduce_dtype", "output_dtype", "warnings"):
        check(k in doc, f"audit --json lacks {k!r}" + where)
    params = doc["parameters"]
    for p in params:
        for k in AUDIT_FIELDS:
            check(k in p, f"parameter entry lacks {k!r}: {p}")
    return doc, {p["name"]: p for p in params}, where


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def check_audit_common(doc, by_name, layers=1, tied=True):
    names = [p["name"] for p in doc["parameters"]]
    check(len(names) == len(set(names)), f"duplicate parameter names: {names}")
    want = expected_shapes(layers, tied)
    check(set(names) == set(want), f"parameters {sorted(names)} != {sorted(want)}")
    for n, shape in want.items():
        check(by_name[n]["shape"] == shape, f"{n}: shape {by_name[n]['shape']} != {shape}")
    if tied:
        check(by_name["model.embed_tokens.weight"].get("aliases") == ["lm_head.weight"],
              "tied: lm_head.weight should be an alias of model.embed_tokens.weight")
    check(doc["compute_dtype"] == "bfloat16", f"compute_dtype {doc['compute_dtype']}")
    check(doc["reduce_dtype"] == "float32", f"reduce_dtype {doc['reduce_dtype']}")
    check(doc["output_dtype"] == "bfloat16", f"output_dtype {doc['output_dtype']}")
    size = {"float32": 4, "bfloat16": 2, None: 0}
    master_size = {"none": 0, "float32": 4, "remainder": 2, None: 0}
    t_elems = t_bytes = 0
    for p in doc["parameters"]:
        n = numel(p["shape"])
        if p["trainable"]:
            check(p["trainable"] is True, f"trainable must be a JSON bool: {p}")
            check(p["grad_dtype"] == p["storage_dtype"], f"grad dtype != storage dtype: {p}")
            check(p["master"] in ("none", "float32", "remainder"), f"master {p['master']!r}")
            per = (size[p["storage_dtype"]] + size[p["grad_dtype"]] + size[p["exp_avg_dtype"]] +
                   size[p["exp_avg_sq_dtype"]] + master_size[p["master"]])
            t_elems += n
            t_bytes += per * n
        else:
            check(p["trainable"] is False, f"trainable must be a JSON bool: {p}")
            for k in ("grad_dtype", "exp_avg_dtype", "exp_avg_sq_dtype", "master"):
                check(p[k] is None, f"frozen {p['name']}: {k} should be null, is {p[k]!r}")
            per = size[p["storage_dtype"]]
        check(p["bytes"] == per * n, f"{p['name']}: bytes {p['bytes']} != {per} x {n}")
        eb = p["element_bytes"]  # the same bytes per element, component by component
        check(eb["param"] == size[p["storage_dtype"]] and eb["grad"] == size[p["grad_dtype"]]
              and eb["exp_avg"] == size[p["exp_avg_dtype"]]
              and eb["exp_avg_sq"] == size[p["exp_avg_sq_dtype"]]
              and sum(eb.values()) == per == p["bytes_per_element"], f"element_bytes of {p}")
    totals = doc.get("totals", {})
    check(totals.get("trainable_elements") == t_elems, f"totals {totals} vs {t_elems} trainable")
    if t_elems:
        check(abs(totals["bytes_per_trainable_parameter"] - t_bytes / t_elems) < 1e-9,
              f"bytes_per_trainable_parameter {totals} vs {t_bytes / t_elems}")


def check_uniform(by_name, **fields):
    for n, p in by_name.items():
        for k, v in fields.items():
            check(p[k] == v, f"{n}: {k} = {p[k]!r}, expected {v!r}")


def case_audit_pattern_a():
    doc, by_name, where = audit(PATTERN_A)
    check_audit_common(doc, by_name)
    check_uniform(by_name, trainable=True, storage_dtype="bfloat16", grad_dtype="bfloat16",
                  exp_avg_dtype="float32", exp_avg_sq_dtype="float32", master="remainder")
    check(doc["totals"]["bytes_per_trainable_parameter"] == 14, f"{doc['totals']}" + where)
    check(doc["warnings"] == [], f"pattern A warnings: {doc['warnings']}")


def case_audit_pattern_b():
    doc, by_name, where = audit(PATTERN_B)
    check_audit_common(doc, by_name)
    check_uniform(by_name, trainable=True, storage_dtype="float32", grad_dtype="float32",
                  exp_avg_dtype="float32", exp_avg_sq_dtype="float32", master="none")
    check(doc["totals"]["bytes_per_trainable_parameter"] == 16, f"{doc['totals']}" + where)
    check(doc["warnings"] == [], f"pattern B warnings: {doc['warnings']}")


def case_audit_pattern_peaks():
    """The audit predicts the peak of the same model and run under pattern A and pattern B: the
    configured pattern's entry equals the configured prediction, B's state costs 2 more bytes per
    parameter than A's (16 vs 14), and the other terms of the peak are the same model's."""
    peaks = {}
    for name, cfg in (("A", PATTERN_A), ("B", PATTERN_B), ("risky", RISKY)):
        doc, _, where = audit(cfg, layers=2)
        t = doc["totals"]
        pp = t.get("pattern_peaks")
        check(isinstance(pp, dict) and set(pp) == {"A", "B"}, f"pattern_peaks: {pp}" + where)
        for k in ("A", "B"):
            check(isinstance(pp[k]["bytes_peak_predicted"], int) and pp[k]["bytes_peak_predicted"] > 0,
                  f"pattern {k}: {pp[k]}" + where)
        if name in ("A", "B"):
            check(pp[name]["bytes_peak_predicted"] == t["bytes_peak_predicted"],
                  f"pattern {name}'s entry {pp[name]} != the configured peak "
                  f"{t['bytes_peak_predicted']}" + where)
        peaks[name] = (pp["A"]["bytes_peak_predicted"], pp["B"]["bytes_peak_predicted"],
                       t["trainable_elements"])
    a, b, n = peaks["A"]
    # Only the resident state differs between the two (2 bytes a parameter); the compute copies
    # follow the storage dtype (none on one rank where storage equals the compute dtype), so
    # allow that difference on top.
    check(a < b, f"pattern A peak {a} not below pattern B {b}")
    check(b - a >= 2 * n, f"B - A = {b - a} bytes < 2 bytes x {n} parameters")
    check(peaks["risky"][:2] == peaks["A"][:2], f"the comparison depends on the configured "
          f"optimizer: {peaks}")
    rc, out, err = run(["audit", config(PATTERN_A), *TINY_MODEL, "model.num_layers=2"])
    check(rc == 0 and "pattern A (" in out and "pattern B (" in out,
          "the table lacks the per-pattern peaks" + describe(["audit"], rc, out, err))


def case_audit_risky():
    doc, by_name, where = audit(RISKY)
    check_audit_common(doc, by_name)
    check_uniform(by_name, trainable=True, storage_dtype="bfloat16", grad_dtype="bfloat16",
                  exp_avg_dtype="bfloat16", exp_avg_sq_dtype="bfloat16", master="none")
    check(doc["totals"]["bytes_per_trainable_parameter"] == 8, f"{doc['totals']}" + where)
    w = doc["warnings"]
    check(len(w) == 1, f"expected one warning, got {w}")
    for n in WARNING_NEEDLES:
        check(n in w[0], f"warning should mention {n!r}: {w[0]}")
    # Setting model.dtype: float32 (pattern B's fix) removes it; so does FusedAdam (pattern A's).
    doc, _, _ = audit(RISKY, "model.dtype=float32")
    check(doc["warnings"] == [], f"risky + model.dtype=float32 still warns: {doc['warnings']}")


def case_audit_table():
    """The human table: every parameter exactly once (tied aliases on their parameter's row),
    the totals line and, for the risky pattern, the warning."""
    for cfg, per_param in ((PATTERN_A, "14.00"), (PATTERN_B, "16.00"), (RISKY, "8.00")):
        for tied in ("true", "false"):
            over = [*TINY_MODEL, "model.num_layers=2", f"model.tie_word_embeddings={tied}"]
            doc, by_name, _ = audit(cfg, f"model.tie_word_embeddings={tied}", layers=2)
            check_audit_common(doc, by_name, layers=2, tied=tied == "true")
            args = ["audit", config(cfg), *over]
            rc, out, err = run(args)
            where = describe(args, rc, out, err)
            check(rc == 0, "audit (table) failed" + where)
            first_words = [ln.split()[0] for ln in out.splitlines() if ln.strip()]
            for name in by_name:
                check(first_words.count(name) == 1, f"{name} is not on exactly one row" + where)
                check(out.count(name + " ") + out.count(name + ")") == 1,
                      f"{name} mentioned more than once" + where)
            if tied == "true":
                check("model.embed_tokens.weight (=lm_head.weight)" in out, "alias" + where)
            check(f"bytes per trainable parameter: {per_param}\n" in out, "totals" + where)
            warned = [ln for ln in out.splitlines() if ln.startswith("warning:")]
            check(len(warned) == (1 if cfg == RISKY else 0), f"warning lines {warned}" + where)


def case_audit_freeze_modules():
    """A module glob freezes a whole layer: no grad, no moments, no master, storage bytes only."""
    doc, by_name, _ = audit(PATTERN_A, 'freeze_config.freeze_modules=[{glob: "model.layers.0*"}]',
                            layers=2)
    check_audit_common(doc, by_name, layers=2)
    for n, p in by_name.items():
        frozen = n.startswith("model.layers.0.")
        check(p["trainable"] is (not frozen), f"{n}: trainable {p['trainable']}")
        if frozen:
            check(p["bytes"] == 2 * numel(p["shape"]), f"{n}: frozen bf16 bytes {p['bytes']}")
        else:
            check(p["master"] == "remainder" and p["exp_avg_dtype"] == "float32", f"{p}")
    check(doc["totals"]["bytes_per_trainable_parameter"] == 14, f"{doc['totals']}")


def case_audit_freeze_parameters():
    """An exact name freezes only that parameter, and wins over unfreezing (by module or name)."""
    doc, by_name, _ = audit(PATTERN_B, "freeze_config.freeze_parameters=[model.norm.weight]")
    check_audit_common(doc, by_name)
    for n, p in by_name.items():
        check(p["trainable"] is (n != "model.norm.weight"), f"{n}: trainable {p['trainable']}")
    check(by_name["model.norm.weight"]["bytes"] == 4 * 32, "frozen fp32 norm: 128 bytes")
    doc, by_name, _ = audit(PATTERN_A, "freeze_config.freeze_parameters=[model.norm.weight]",
                            "freeze_config.unfreeze_parameters=[model.norm.weight]",
                            'freeze_config.unfreeze_modules=[{glob: "*"}]')
    check_audit_common(doc, by_name)
    check(by_name["model.norm.weight"]["trainable"] is False,
          "exact freezes must win over exact and module unfreezes")
    # Empty lists are a no-op.
    doc, by_name, _ = audit(PATTERN_A, "freeze_config.freeze_parameters=[]")
    check(all(p["trainable"] for p in by_name.values()), "freeze_parameters=[] froze something")


def case_audit_unfreeze_parameters():
    """Freeze every module, then enable exactly one parameter."""
    keep = "model.layers.1.input_layernorm.weight"
    doc, by_name, _ = audit(PATTERN_A, 'freeze_config.freeze_modules=[{glob: "*"}]',
                            f"freeze_config.unfreeze_parameters=[{keep}]", layers=2)
    check_audit_common(doc, by_name, layers=2)
    trainable = [n for n, p in by_name.items() if p["trainable"]]
    check(trainable == [keep], f"trainable parameters {trainable}, expected [{keep}]")
    check(doc["totals"]["trainable_elements"] == 32, f"{doc['totals']}")


def case_audit_freeze_tied_alias():
    """Freezing lm_head.weight when tied freezes the shared model.embed_tokens.weight; untied,
    only the head."""
    doc, by_name, _ = audit(PATTERN_A, "freeze_config.freeze_parameters=[lm_head.weight]")
    check_audit_common(doc, by_name)
    check(by_name["model.embed_tokens.weight"]["trainable"] is False, "tied alias not frozen")
    check(sum(not p["trainable"] for p in by_name.values()) == 1, "froze more than the embedding")
    doc, by_name, _ = audit(PATTERN_A, "freeze_config.freeze_parameters=[lm_head.weight]",
                            "model.tie_word_embeddings=false")
    check_audit_common(doc, by_name, tied=False)
    check(by_name["lm_head.weight"]["trainable"] is False, "untied lm_head not frozen")
    check(by_name["model.embed_tokens.weight"]["trainable"] is True, "untied embedding frozen")


def case_audit_moe():
    """A mixture of experts under pattern A (bf16 storage): each router a protected fp32
    parameter (fp32 storage, gradient, master none needed), listed in "moe" with the expert
    elements each of 2 ranks holds; expert globs freeze whole experts, exact expert names work
    with expert_parallel_size 1."""
    moe = ["model.moe.num_experts=4", "model.moe.top_k=2", "model.moe.intermediate_size=16"]
    glob = 'freeze_config.freeze_modules=[{glob: "model.layers.*.block_sparse_moe.experts.*"}]'
    for world in ("1", "2"):
        doc, by_name, where = audit(PATTERN_A, *moe, glob,
                                    "freeze_config.unfreeze_modules=[model.layers.1.block_sparse_moe.experts.2]",
                                    "freeze_config.freeze_parameters=[model.layers.1.block_sparse_moe.experts.2.w2.weight]",
                                    "--world-size", world, layers=2)
        m = doc.get("moe")
        routers = [f"model.layers.{i}.block_sparse_moe.gate.weight" for i in range(2)]
        check(m is not None and m["routers"] == routers and m["router_dtype"] == "float32",
              f"moe section {m}" + where)
        for r in routers:
            p = by_name[r]
            check(p["protected_fp32"] is True and p["storage_dtype"] == "float32"
                  and p["grad_dtype"] == "float32" and p["shape"] == [4, 32], f"router {p}")
        experts = {n: p for n, p in by_name.items() if ".experts." in n}
        check(len(experts) == 2 * 4 * 3, f"{len(experts)} expert parameters")
        total = sum(numel(p["shape"]) for p in experts.values())
        check(m["expert_elements"] == total, f"expert_elements {m['expert_elements']} vs {total}")
        check(sum(m["expert_elements_per_rank"]) == total
              and len(m["expert_elements_per_rank"]) == int(world), f"per rank {m}")
        trainable = sorted(n for n, p in experts.items() if p["trainable"])
        want = [f"model.layers.1.block_sparse_moe.experts.2.{w}.weight" for w in ("w1", "w3")]
        check(trainable == want, f"trainable experts {trainable}, expected {want}")
        check(all(p["storage_dtype"] == "bfloat16" and not p["protected_fp32"]
                  for p in experts.values()), "expert storage")
    # Expert parallelism over 2 ranks: each rank holds its 2 experts whole (one group), the
    # routers and the rest sharded as usual.
    doc, by_name, where = audit(PATTERN_A, *moe, "distributed.expert_parallel_size=2",
                                "--world-size", "2", layers=2)
    m = doc["moe"]
    half = m["expert_elements"] // 2
    check(m["expert_parallel_size"] == 2 and m["expert_elements_per_rank"] == [half, half],
          f"expert-parallel moe section {m}" + where)
    rc, out, err = run(["audit", config(PATTERN_A), *TINY_MODEL, *moe,
                        "distributed.expert_parallel_size=2", "--world-size", "2",
                        "freeze_config.freeze_parameters="
                        "[model.layers.0.block_sparse_moe.experts.1.w1.weight]"])
    expect_one_error(rc, out, err, "freeze_config.freeze_parameters",
                     "'model.layers.0.block_sparse_moe.experts.1'")


def case_audit_freeze_unknown():
    """Unknown exact names exit 2 with one line (with a suggestion when close); so do
    duplicates."""
    base = ["audit", config(PATTERN_A), *TINY_MODEL, "--json"]
    rc, out, err = run(base + ["freeze_config.freeze_parameters=[model.norm.weigth]"])
    expect_one_error(rc, out, err, "freeze_config.freeze_parameters", "model.norm.weigth",
                     "did you mean 'model.norm.weight'")
    rc, out, err = run(base + ["freeze_config.unfreeze_parameters=[lm_head.wieght]"])
    expect_one_error(rc, out, err, "freeze_config.unfreeze_parameters", "lm_head.wieght",
                     "did you mean 'lm_head.weight'")
    rc, out, err = run(base + ["freeze_config.freeze_parameters=[model.norm.weight, "
                               "model.norm.weight]"])
    expect_one_error(rc, out, err, "freeze_config.freeze_parameters", "duplicate")
    # The same in `train`: refused before anything is written.
    with tempfile.TemporaryDirectory(prefix="kktrain_train_") as tmp:
        r = train(tmp, "run", PATTERN_A, "freeze_config.freeze_parameters=[model.norm.weigth]")
        expect_one_error(r.rc, r.out, r.err, "did you mean 'model.norm.weight'")
        check(not os.path.exists(r.out_dir), "a refused run created train.output_dir")



if __name__ == "__main__":
    sys.exit(test_train.run_case(globals(), __doc__))
