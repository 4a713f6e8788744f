"""Sharded training end to end where the shard geometry and the reduce precision are at their
edges, on the helpers of test_mpi.py. One ctest `mpi.<case>` per case (tests/cli/mpi_tests.cmake).

usage: test_mpi_geometry.py KKTRAIN INPUTS_DIR CASE

- empty_shards: a model whose every layer tensor has dim 0 of 1 or 4 rows, so on 3 ranks its
  shards are 1, 0, 0 or 2, 2, 0 rows (the last ranks hold nothing but padding), trained on 3 ranks
  and on 1: losses, gradient norms and the parameters after 10 steps agree within the sharding
  tolerances of mpi.trajectories.
  (Where an empty shard's row_begin points is read by no data path: no rows are copied, written
  or keyed from it. tests/tools/mpi_collectives_check.cpp checks the registry's geometry itself.)
- bf16_reduce_sum: on 2 ranks, the step-1 parameters after a bf16 gradient reduce-scatter equal,
  bit for bit, an expectation built from each rank's own gradient computed on one rank
  (`kktrain grads` on that rank's window): every rank's gradient rounded to bf16, the two summed
  in fp32 and rounded once to bf16, halved, one SGD step (docs/sharding.md, "Dtypes on the
  wire"); on 3 ranks over one window (every rank's gradient the same, so the sum's order does not
  matter) the mean is rne(3 rne(g)) / 3. The same with an fp32 reduce checks the premise (a
  rank's gradient is the one-rank gradient of its window, bit for bit). Measured: bitwise; a sum
  rounded twice (through an 11-bit intermediate) moves 98 of 17504 step-1 parameters on 2 ranks,
  a mean rounded to bf16 again 10951 on 3 ranks.
"""

import os
import sys
import tempfile

import h5py
import numpy

import test_mpi as tm
import test_train as tt
from test_train import check

F32 = numpy.float32

# ---- 1. empty shards on 3 ranks ----------------------------------------------------------------

# hidden 4 with one head of 4: q, k, v, o, norms and down_proj have 4 rows (2, 2, 0 on 3 ranks);
# intermediate 1: gate_proj and up_proj have 1 row (1, 0, 0: rank 2 follows an empty shard).
EMPTY_SHAPE = ["model.hidden_size=4", "model.num_heads=1", "model.num_kv_heads=1",
               "model.intermediate_size=1", "model.num_layers=2"]


def shard_rows(rows, world):
    chunk = -(-rows // world)
    return [max(0, min(rows, chunk * (r + 1)) - min(rows, chunk * r)) for r in range(world)]


def case_empty_shards():
    """The same 10 AdamW steps (fp32, global batch 6) on 1 rank (3 micro-batches of 2) and 3
    ranks (one each) of a model whose layer tensors leave the last rank (and for 1-row tensors
    the last two) an empty shard: loss and grad_norm within test_mpi.REL_TOL, every parameter
    within test_mpi.PARAM_TOL of its tensor's scale after 10 steps."""
    common = [*tm.FP32, *EMPTY_SHAPE, "data.global_batch_size=6", "data.micro_batch_size=2",
              "train.log_every=1", "train.val_every=0"]
    with tempfile.TemporaryDirectory(prefix="kktrain_mpi_") as tmp:
        # The geometry the case is about, as kktrain shards it.
        _, by_name, _, where = tm.audit_doc(tt.config(tt.DEFAULT), *common, "--world-size", "3")
        empty = {}
        for name, p in by_name.items():
            rows = p["shape"][0]
            check(p["shard_rows"] == -(-rows // 3), f"shard_rows of {name}: {p}" + where)
            empty[name] = shard_rows(rows, 3).count(0)
        layers = [n for n in by_name if n.startswith("model.layers.")]
        check(all(empty[n] >= 1 for n in layers) and
              sum(empty[n] == 2 for n in layers) == 4,
              f"expected every layer tensor to leave rank 2 empty and four (gate/up) ranks 1 and "
              f"2: {empty}")
        runs = {"1 rank": tm.mpi_train(0, tmp, "w1", tt.DEFAULT, *common, steps=10).ok(),
                "3 ranks": tm.mpi_train(3, tmp, "w3", tt.DEFAULT, *common, steps=10).ok()}
        worst, where = tm.max_rel(runs, "1 rank", ("loss", "grad_norm"), lambda r: r.train_rows())
        print(f"measured: worst loss/grad_norm {worst:.3g} ({where})")
        check(worst <= tm.REL_TOL, f"3 ranks changed the run by {worst:.3g} > {tm.REL_TOL:g}: "
              f"{where}")
        ref, got = tm.final_params(runs["1 rank"]), tm.final_params(runs["3 ranks"])
        check(sorted(ref) == sorted(got), f"parameters {sorted(got)} vs {sorted(ref)}")
        worst_p, where_p = 0.0, "nothing compared"
        for name in ref:
            scale = max(float(numpy.abs(ref[name]).max()), 1e-30)
            d = float(numpy.abs(got[name] - ref[name]).max()) / scale
            if d >= worst_p:
                worst_p, where_p = d, name
        print(f"measured: parameters after 10 steps: worst {worst_p:.3g} of the tensor scale "
              f"({where_p})")
        check(worst_p <= tm.PARAM_TOL, f"parameters after 10 steps on 3 ranks differ by "
              f"{worst_p:.3g} of their tensor's scale > {tm.PARAM_TOL:g}: {where_p}")


# ---- 2. the bf16 reduce-scatter, bit for bit ---------------------------------------------------


def bits(x):
    return numpy.ascontiguousarray(x, F32).view(numpy.uint32)


def bf16_rne(x):
    """fp32 -> nearest bf16 (ties to even), as fp32."""
    u = bits(x).astype(numpy.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(numpy.uint32).view(F32)


def grads_dump(tmp, name, *overrides):
    """`kktrain grads` on one rank: ({param: fp32 params}, {param: fp32 grads}, ids, targets)."""
    out = os.path.join(tmp, name + ".h5")
    args = ["grads", tt.config(tt.DEFAULT), "--out", out, *overrides]
    rc, so, se = tt.run(args)
    check(rc == 0, "grads failed" + tt.describe(args, rc, so, se))
    with h5py.File(out, "r") as f:
        params = {n: f["params/" + n][...] for n in f["params"]}
        grads = {n: f["grads/" + n][...] for n in f["grads"]}
        return params, grads, f["batch/input_ids"][...], f["batch/targets"][...]


def case_bf16_reduce_sum():
    """2 ranks, one window each, fp32 storage and compute, no output cast, SGD without momentum
    or weight decay, no clipping, one step. Rank r's gradient g_r is `kktrain grads` on one rank
    over a data file holding exactly rank r's window (T + 1 tokens). Expected step-1 parameters:
    p0 + (-lr) G with G = (g_0 + g_1) / 2 for an fp32 reduce and G = rne(rne(g_0) + rne(g_1)) / 2
    for a bf16 one (the sum of two bf16 values in fp32, rounded once; halving is exact; one
    addition, so its order does not matter). Both must match bit for bit. Then 3 ranks on a data
    file of window 0 alone: G = fl(fl(2 g_0 + g_0) / 3) and rne(3 rne(g_0)) / 3."""
    T = 32
    model = [*tt.TINY_MODEL, *tm.FP32, f"data.seq_len={T}", "train.grad_clip=0",
             "optimizer={_target_: torch.optim.SGD, lr: 0.5, momentum: 0.0, weight_decay: 0.0}"]
    with tempfile.TemporaryDirectory(prefix="kktrain_mpi_") as tmp:
        # The two windows of step 1 (windows 0 and 1 of the global batch of 2).
        _, _, ids, targets = grads_dump(tmp, "both", *model, "data.micro_batch_size=2")
        windows = [list(ids[r]) + [int(targets[r][-1])] for r in range(2)]
        check(windows[0] != windows[1], "both ranks got the same window: nothing to sum")
        p0, g, paths = None, [], []
        for r, w in enumerate(windows):
            path = os.path.join(tmp, f"window{r}.u16")
            numpy.asarray(w, numpy.uint16).tofile(path)
            paths.append(path)
            p0, gr, ids_r, _ = grads_dump(tmp, f"g{r}", *model, "data.micro_batch_size=1",
                                          f"data.path={path}", "data.val_fraction=0")
            check(list(ids_r[0]) == w[:T], f"window {r}: the one-rank dump read another window")
            g.append(gr)
        inexact = sum(int((bits(bf16_rne(g[0][n]) + bf16_rne(g[1][n])) & 0xFFFF != 0).sum())
                      for n in g[0])
        total = sum(v.size for v in g[0].values())
        print(f"measured: the bf16 sum of the two gradients needs rounding in {inexact} of "
              f"{total} elements")
        check(inexact > total // 10, "too few bf16 sums need rounding to test it")
        two = {"float32": {n: (g[0][n] + g[1][n]) * F32(0.5) for n in g[0]},
               "bfloat16": {n: bf16_rne(bf16_rne(g[0][n]) + bf16_rne(g[1][n])) * F32(0.5)
                            for n in g[0]}}
        # 3 ranks on a data file of window 0 alone: every rank's gradient is g_0, so the sum is
        # order-free (2 g exact, then one rounding) and the mean over 3 ranks is inexact.
        g0 = g[0]
        three = {"float32": {n: (g0[n] + g0[n] + g0[n]) / F32(3) for n in g0},
                 "bfloat16": {n: bf16_rne(bf16_rne(g0[n]) * F32(3)) / F32(3) for n in g0}}
        for np_, expected, data in ((2, two, []), (3, three, [f"data.path={paths[0]}",
                                                             "data.val_fraction=0"])):
            for reduce in ("float32", "bfloat16"):
                r = tm.mpi_train(np_, tmp, f"r{np_}_{reduce}", tt.DEFAULT, *model, *data,
                                 "data.micro_batch_size=1", f"data.global_batch_size={np_}",
                                 f"distributed.mp_policy.reduce_dtype={reduce}",
                                 "train.log_every=1", "train.val_every=0", steps=1).ok()
                check(f"reduce {reduce}" in r.err, f"start line: reduce {reduce}" + r.where)
                compare_step1(r, p0, expected[reduce], f"{reduce} reduce on {np_} ranks")


def compare_step1(r, p0, grad, what):
    """The step-1 parameters of run r (its final checkpoint) against p0 + (-lr) grad, bitwise."""
    lr = F32(r.train_rows()[0]["lr"])
    got = tm.final_params(r)
    bad, n_all = [], 0
    for n, G in grad.items():
        # SGD: param.add_(d_p, alpha=-lr): lr x d_p rounded, then the sum (this build compiles
        # with -ffp-contract=off), or one rounding where a backend contracts it into an FMA (the
        # product of two floats is exact in double).
        want = p0[n] + (-lr) * G
        fma = (p0[n].astype(numpy.float64) + numpy.float64(-lr) * G.astype(numpy.float64))
        g32 = got[n].astype(F32)
        diff = (bits(g32) != bits(want)) & (bits(g32) != bits(fma.astype(F32)))
        n_all += diff.size
        if diff.any():
            i = numpy.unravel_index(numpy.argmax(diff), diff.shape)
            bad.append(f"{n}: {int(diff.sum())} of {diff.size} differ, first at "
                       f"{tuple(int(k) for k in i)}: {got[n][i]!r} vs {want[i]!r}")
    print(f"measured: {what}, step-1 parameters vs the expectation: "
          f"{'bitwise' if not bad else 'DIFFER'} ({n_all} elements)")
    check(not bad, f"{what}: step-1 parameters differ from the expected reduce: " +
          "; ".join(bad[:4]) + r.where)


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
