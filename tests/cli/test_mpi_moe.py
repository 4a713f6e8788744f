"""A mixture-of-experts model trained on several ranks (docs/moe.md), with the experts
FSDP-sharded like every other parameter (expert_parallel_size 1) or split over groups of ranks
with their tokens exchanged all-to-all (expert_parallel_size P): every layout must follow the
one-rank run up to summation order, the load-balancing loss included.

usage: test_mpi_moe.py KKTRAIN INPUTS_DIR CASE        (tests/cli/mpi_tests.cmake, label "mpi")

- trajectories: fp32, 2 layers of 12 experts (top-2, a shared expert, aux_loss_coef 0.05),
  global batch 12 (micro-batches of 1) for 12 steps on 1 rank, 2 ranks (P 1 and 2), 3 ranks (P 1
  and 3) and 4 ranks (P 2: each expert sharded over 2 ranks; and P 4): loss, grad_norm and aux_loss agree to test_mpi's REL_TOL, the
  parameters after 12 steps to MOE_PARAM_TOL (routing depends on values, so a summation-order
  difference could flip a near-tie and show here: the tolerances were met with margin, measured
  below); the expert-parallel runs report all-to-all traffic, the others none.
- resume: a 2-rank P 2 run checkpointed at step 6 and resumed to 12 is bit for bit the
  uninterrupted run; the same checkpoint resumed on 3 ranks with P 3 and on 1 rank follows it
  within MOE_PARAM_TOL (the experts reshard across rank counts and expert-parallel sizes).
- wire_dtype: bf16 compute sends half the all-to-all bytes of fp32 compute.
- refusals: expert_parallel_size that does not divide the ranks or the experts, and an exact
  freeze of an expert parameter with P 2, are one error line each, exit 2.
"""

import os
import sys
import tempfile

import numpy

import test_mpi as tm
import test_train as tt
from test_train import check

MOE = ["model.moe.num_experts=12", "model.moe.top_k=2", "model.moe.intermediate_size=32",
       "model.moe.shared_expert_intermediate_size=16", "model.moe.aux_loss_coef=0.05"]


# The parameters after 12 steps, relative to their tensor's scale. Dense models meet test_mpi's
# PARAM_TOL (1e-5); an expert that few tokens chose has gradient elements that are sums of few
# terms, some near cancellation, and Adam's update m / (sqrt(v) + eps) turns their
# summation-order noise into a visible fraction of a step: measured worst 1.45e-5 with 6 experts
# and 9.7e-6 with the 12 below (3 ranks P 1). 1e-4 leaves a 7x margin; a wrong exchange, expert numbering or load-balancing
# gradient moves the parameters by > 1e-3 (and the losses by > 1e-3).
MOE_PARAM_TOL = 1e-4
COMMON = [*tm.FP32, *MOE, "model.num_layers=2", "data.global_batch_size=12",
          "data.micro_batch_size=1", "train.log_every=1"]


def worst_params(runs, ref_name):
    ref = tm.final_params(runs[ref_name])
    check(any(".block_sparse_moe.experts.11.w2.weight" in n for n in ref), "no experts")
    worst, where = 0.0, ""
    for name, r in runs.items():
        got = tm.final_params(r)
        check(set(got) == set(ref), f"{name}: parameters {sorted(set(got) ^ set(ref))}")
        for pname, w in got.items():
            scale = max(float(numpy.abs(ref[pname]).max()), 1e-30)
            d = float(numpy.abs(w - ref[pname]).max()) / scale
            if d > worst:
                worst, where = d, f"{name}: {pname}"
    return worst, where


def case_trajectories():
    with tempfile.TemporaryDirectory(prefix="kktrain_mpi_moe_") as tmp:
        runs = {"1 rank": tm.mpi_train(0, tmp, "w1", tt.DEFAULT, *COMMON, steps=12).ok()}
        for np, ep in ((2, 1), (2, 2), (3, 1), (3, 3), (4, 2), (4, 4)):
            runs[f"{np} ranks P {ep}"] = tm.mpi_train(
                np, tmp, f"w{np}p{ep}", tt.DEFAULT, *COMMON,
                f"distributed.expert_parallel_size={ep}", steps=12).ok()
        for name, r in runs.items():
            rows = r.train_rows()
            check([x["step"] for x in rows] == list(range(1, 13)), name + r.where)
            check(all(x["aux_loss"] > 0 for x in rows), f"{name}: aux_loss {rows}")
            a2a = [x.get("alltoall_bytes", 0) for x in rows]
            if " P 1" in name or name == "1 rank":
                check(all(b == 0 for b in a2a), f"{name}: all-to-all bytes {a2a}")
            else:
                check(all(b > 0 for b in a2a), f"{name}: no all-to-all bytes {a2a}")
        worst, where = tm.max_rel(runs, "1 rank", ("loss", "grad_norm", "aux_loss"),
                                  lambda r: r.train_rows())
        print(f"measured: worst loss/grad_norm/aux_loss {worst:.3g} ({where})")
        check(worst <= tm.REL_TOL, f"ranks changed the run by {worst:.3g} > {tm.REL_TOL:g}: "
              f"{where}")
        worst_p, where_p = worst_params(runs, "1 rank")
        print(f"measured: parameters after 12 steps: worst {worst_p:.3g} of the tensor scale "
              f"({where_p})")
        check(worst_p <= MOE_PARAM_TOL, f"parameters differ by {worst_p:.3g} > {MOE_PARAM_TOL:g}: "
              f"{where_p}")


def case_resume():
    ck = ["checkpoint.save_every=6"]
    ep2 = "distributed.expert_parallel_size=2"
    with tempfile.TemporaryDirectory(prefix="kktrain_mpi_moe_") as tmp:
        full = tm.mpi_train(2, tmp, "full", tt.DEFAULT, *COMMON, *ck, ep2, steps=12).ok()
        half = tm.mpi_train(2, tmp, "split", tt.DEFAULT, *COMMON, *ck, ep2, steps=6).ok()
        step6 = os.path.join(half.out_dir, "checkpoints")
        # The step-6 checkpoint on other layouts (before the split run continues past it).
        runs = {"uninterrupted 2 ranks P 2": full}
        for np, ep in ((3, 3), (0, 1)):
            runs[f"resumed on {max(np, 1)} ranks P {ep}"] = tm.mpi_train(
                np, tmp, f"r{np}", tt.DEFAULT, *COMMON, *ck,
                f"distributed.expert_parallel_size={ep}", f"checkpoint.resume={step6}",
                steps=12).ok()
        again = tm.mpi_train(2, tmp, "split", tt.DEFAULT, *COMMON, *ck, ep2,
                             "checkpoint.resume=auto", steps=12).ok()
        check([x["step"] for x in again.train_rows()][-6:] == list(range(7, 13)), again.where)
        a, b = tm.final_params(full), tm.final_params(again)
        for n in a:
            check(numpy.array_equal(a[n], b[n]), f"{n}: resumed run differs from the "
                  "uninterrupted one")
        worst_p, where_p = worst_params(runs, "uninterrupted 2 ranks P 2")
        print(f"measured: resumed on other layouts, parameters after 12 steps: worst {worst_p:.3g}"
              f" ({where_p})")
        check(worst_p <= MOE_PARAM_TOL, f"resharded resume differs by {worst_p:.3g}: {where_p}")


def case_wire_dtype():
    """The token all-to-all moves compute-dtype rows: the same first step at bf16 compute sends
    half the bytes of fp32 compute (the routing of step 1 may differ by a near-tie between the
    two compute dtypes, so the ratio is checked to 5%, and each side is a whole number of rows
    of hidden_size elements of its dtype)."""
    with tempfile.TemporaryDirectory(prefix="kktrain_mpi_moe_") as tmp:
        sent = {}
        for dt in ("float32", "bfloat16"):
            r = tm.mpi_train(2, tmp, dt, tt.DEFAULT, *MOE, "model.num_layers=2",
                             "model.dtype=float32", f"distributed.mp_policy.param_dtype={dt}",
                             "distributed.expert_parallel_size=2", "data.global_batch_size=4",
                             "train.log_every=1", steps=1).ok()
            sent[dt] = r.train_rows()[0]["alltoall_bytes"]
        C = int(next(o.split("=")[1] for o in tt.TINY if o.startswith("model.hidden_size=")))
        check(sent["float32"] % (4 * C) == 0 and sent["bfloat16"] % (2 * C) == 0, f"{sent}")
        ratio = sent["float32"] / sent["bfloat16"]
        print(f"measured: step-1 all-to-all bytes {sent}, ratio {ratio:.3f}")
        check(abs(ratio - 2.0) <= 0.1, f"fp32 / bf16 all-to-all bytes {ratio:.3f}, expected 2")


def case_refusals():
    with tempfile.TemporaryDirectory(prefix="kktrain_mpi_moe_") as tmp:
        cases = [(2, ["distributed.expert_parallel_size=4"], "does not divide the 2 ranks"),
                 (2, ["distributed.expert_parallel_size=2", "model.moe.num_experts=3"],
                  "does not divide model.moe.num_experts 3"),
                 (2, ["distributed.expert_parallel_size=2",
                      "freeze_config.freeze_parameters=[model.layers.0.block_sparse_moe.experts"
                      ".4.w2.weight]"], "'model.layers.0.block_sparse_moe.experts.4'")]
        for i, (np, extra, needle) in enumerate(cases):
            r = tm.mpi_train(np, tmp, f"bad{i}", tt.DEFAULT, *MOE, *extra,
                             "data.global_batch_size=4", steps=1)
            lines = [ln for ln in tm.kktrain_lines(r.err) if "error" in ln]
            check(r.rc == 2, f"expected exit 2, got {r.rc}" + r.where)
            check(len(set(lines)) == 1 and needle in lines[0], f"error lines {lines}" + r.where)


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
