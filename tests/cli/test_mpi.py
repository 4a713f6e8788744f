"""End-to-end cases of sharded training under mpirun (`mpirun -np N kktrain train ...`, FSDP2
semantics: parameters, gradients and optimizer state sharded over the ranks) and of the per-rank
audit, on the helpers of test_train.py. One ctest `mpi.<case>` per case (tests/cli/mpi_tests.cmake).

usage: test_mpi.py KKTRAIN INPUTS_DIR CASE

Every launch is `mpirun -np N --oversubscribe [--allow-run-as-root when root] KKTRAIN ...` in its
own session with a timeout: a launch that does not end in time is terminated, then every process
of its session is killed, and the case fails (nothing can hang). Exit 77 (skip) when mpirun is
not installed.

What is compared, and why it can be: the global batch of a step is the same windows however it is
split over ranks and micro-batches (rank r of W takes windows [r G/W, (r+1) G/W)). With fp32
storage and compute and no output_dtype cast at unit boundaries (FP32 below), a W-rank run
differs from the one-rank run only in the fp32 summation order of the gradients (the
reduce-scatter adds the ranks' partial sums; accumulation over fewer micro-batches per rank) and
in the double-precision order of the loss means. On one rank output_dtype is not applied, on
several it is (bf16 by default), so the default precision is compared by training quality only.
"""

import json
import math
import re
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy

import test_lora
import test_train as tt
from test_train import check

TIMEOUT = 120  # seconds per launch; the slowest (memory) case takes a few seconds
FP32 = ["model.dtype=float32", "distributed.mp_policy.param_dtype=float32",
        "distributed.mp_policy.output_dtype=null"]
MPI_ABORT = "MPI_ABORT"  # Open MPI's banner when a rank calls MPI_Abort


def aborted(err):
    """For a job that exited non-zero: did it end by MPI_Abort (or a kill) rather than by every
    rank returning on its own? Open MPI prints "MPI_ABORT was invoked ..." (that help text is
    sometimes lost in transit, leaving an ORTE_ERROR_LOG line instead); only when every process
    exited by itself does mpirun say "Primary job terminated normally, but N process(es)
    returned a non-zero exit code"."""
    return MPI_ABORT in err or "ORTE_ERROR_LOG" in err or "terminated normally" not in err


# ---- launching -------------------------------------------------------------------------------


def mpirun(np):
    exe = shutil.which("mpirun")
    if exe is None:
        raise tt.Skip("mpirun is not installed")
    cmd = [exe, "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd + ["-np", str(np)]


def session_pids(sid):
    """Processes of session `sid` (Open MPI puts each rank in its own process group, but they
    stay in mpirun's session)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
            fields = stat[stat.rindex(")") + 2:].split()  # state ppid pgrp session ...
            if int(fields[3]) == sid:
                pids.append(int(d))
        except (OSError, ValueError, IndexError):
            pass
    return pids


def launch(cmd, timeout=TIMEOUT):
    """Runs cmd in a new session: (rc, stdout, stderr, seconds). On timeout: SIGTERM to mpirun
    (it stops its ranks), then SIGKILL to whatever of the session is left; the case fails."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            pass
        for pid in session_pids(p.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        out, err = p.communicate()
        raise tt.Failure(f"no exit within {timeout} s, killed: {' '.join(cmd)}\n"
                         f"stdout:\n{out[-2000:]}\nstderr:\n{err[-3000:]}")
    return p.returncode, out, tt.without_launch_warnings(err), time.monotonic() - t0


class MpiRun(tt.Run):
    """test_train's Run under `mpirun -np np`; seconds: the launch's wall time."""

    def __init__(self, np, cfg, out_dir, overrides, timeout=TIMEOUT):
        self.np, self.seconds = np, 0.0

        def runner(args):
            rc, out, err, self.seconds = launch(mpirun(np) + [tt.KKTRAIN, *args], timeout)
            return rc, out, err

        super().__init__(cfg, out_dir, overrides, runner=runner)
        self.where = f"\n(mpirun -np {np}, {self.seconds:.1f} s)" + self.where

    def ok(self):
        super().ok()
        check(MPI_ABORT not in self.err and "ORTE_ERROR_LOG" not in self.err,
              "a rank aborted the job" + self.where)
        return self


def mpi_train(np, tmp, name, cfg, *overrides, steps=30):
    """np ranks under mpirun; np = 0: the plain one-rank binary (no launcher)."""
    over = [*tt.TINY, f"train.max_steps={steps}", *overrides]
    if np == 0:
        return tt.Run(cfg, os.path.join(tmp, name), over)
    return MpiRun(np, cfg, os.path.join(tmp, name), over)


def kktrain_lines(err):
    """stderr lines of kktrain itself (mpirun adds its own banner when a job exits non-zero)."""
    return [ln for ln in err.splitlines() if ln.startswith("kktrain")]


def rel(a, b):
    return abs(a - b) / abs(b)


def kokkos_threads(err):
    """The Kokkos backend and thread count of the run's threads line ("OpenMP 2", "Serial")."""
    line = next((ln for ln in err.splitlines() if ln.startswith(tt.THREADS_LINE)), "")
    m = re.search(r"Kokkos (\w+)(?: (\d+))?", line)
    return " ".join(g for g in m.groups() if g) if m else ""


def max_rel(runs, ref, keys, rows, ref_run=None):
    """The largest relative difference of `keys` over rows, each run against runs[ref] (or
    ref_run)."""
    worst, where = 0.0, "nothing compared"
    for name, r in runs.items():
        a, b = rows(r), rows(ref_run if ref_run is not None else runs[ref])
        check(len(a) == len(b), f"{name}: {len(a)} rows vs {len(b)} of {ref}")
        for i, (x, y) in enumerate(zip(a, b)):
            for k in keys:
                d = rel(x[k], y[k])
                if d >= worst:
                    worst, where = d, f"{name} vs {ref}, step {x['step']} {k}: {x[k]!r} vs {y[k]!r}"
    return worst, where


def compare_except(a, b, skip, what):
    """test_train.compare_runs, skipping `skip` as well as the timing columns."""
    check(len(a.raw) == len(b.raw), f"{what}: {len(a.raw)} vs {len(b.raw)} metrics rows")
    for i, (x, y) in enumerate(zip(a.raw, b.raw)):
        check(set(x) == set(y), f"{what}: row {i + 1} has keys {sorted(x)} vs {sorted(y)}")
        for k in x:
            if k not in tt.TIMING_KEYS and k not in skip:
                check(x[k] == y[k], f"{what}: row {i + 1} {k}: {x[k]} vs {y[k]} (not bit-identical)")


def check_sharded_columns(r, np):
    """Training rows on several ranks carry comm_bytes (> 0) and comm_ms; every training row
    carries peak_rss_bytes; one-rank rows no comm columns."""
    for x in r.train_rows():
        tt.check_train_row(x, r.where)
        check(x.get("peak_rss_bytes", 0) > 1e6, f"peak_rss_bytes missing or tiny: {x}" + r.where)
        if np > 1:
            check(x.get("comm_bytes", 0) > 0 and x.get("comm_ms", -1) >= 0, f"comm columns: {x}")
        else:
            check("comm_bytes" not in x and "comm_ms" not in x, f"comm columns on one rank: {x}")


def comm_per_step(r):
    vals = {x["comm_bytes"] for x in r.train_rows()}
    check(len(vals) == 1, f"comm_bytes varies from step to step: {sorted(vals)}" + r.where)
    return vals.pop()


def audit_doc(*args, np=0):
    """`kktrain audit ... --json` (under mpirun -np np when np): (doc, by_name, stdout, where)."""
    cmd = ["audit", *args, "--json"]
    if np:
        rc, out, err, _ = launch(mpirun(np) + [tt.KKTRAIN, *cmd])
    else:
        rc, out, err = tt.run(cmd)
    where = tt.describe(cmd, rc, out, err) + (f"\n(mpirun -np {np})" if np else "")
    check(rc == 0, "audit failed" + where)
    try:
        doc = json.loads(out)
    except ValueError as e:
        raise tt.Failure(f"audit --json is not JSON ({e})" + where)
    return doc, {p["name"]: p for p in doc["parameters"]}, out, where


def padded_elements(by_name, world, which):
    """Sum over the parameters `which` selects of shard_rows x row length: what each rank puts on
    the wire for them (shards are padded to ceil(rows / W) rows)."""
    n = 0
    for p in by_name.values():
        if which(p):
            rows = p["shape"][0]
            check(p["shard_rows"] == -(-rows // world), f"shard_rows of {p}")
            n += p["shard_rows"] * (math.prod(p["shape"]) // rows)
    return n


# ---- 1. the same run on 1, 2 and 3 ranks -------------------------------------------------------

# Relative tolerance between fp32 runs that differ only in summation order (see the docstring).
# Measured (2 layers, global batch 12, 20 AdamW steps, validation every 5; 2 and 3 ranks and
# 2 ranks x micro-batch 1, each vs one rank): loss and grad_norm <= 4.7e-8 (the worst a
# grad_norm at 3 ranks; the step-1 grad_norm ~1e-8), val_loss <= 4.8e-9. 1e-6 leaves a 20x
# margin and is still >1000x below what other samples do to the step-1 loss (another data.seed:
# 2.7e-3); every planted sharding bug moved some value by >3e-3.
REL_TOL = 1.0e-6
# The step-1 loss is the same per-micro-batch losses (same parameters, samples, kernels; token
# losses summed in double) averaged in another order: mean over the rank's micro-batches, then
# over ranks, in double. That is within a few double ulps (measured 1.6e-16 at 2 ranks, 0 at 3);
# with one micro-batch per rank on 2 ranks the two orders are the same operations: bit-identical.
STEP1_LOSS_TOL = 1.0e-15
# At another micro-batch size the per-micro-batch losses come from products with another row
# count (micro-batch x seq_len rows), and a BLAS may block, and so sum, a product differently by
# its row count: OpenBLAS' Zen sgemm does (measured 1.8e-9 on an AVX2 EPYC; 2e-16 where oneDNN ran
# the fp32 products). The same holds when thread settings split every product over N threads
# (OMP_NUM_THREADS=2, the OpenMP build's check) and the ranks of a job, clamped to their share of
# the CPUs, split them over fewer than one rank alone does (measured 1.57e-9: OpenBLAS 2 on 1
# rank, 1 on each of 2). Another data.seed moves the step-1 loss by > 1e-4.
STEP1_OTHER_MICRO_BATCH_TOL = 1.0e-7


def step1_loss_tol(run, ref, other_micro_batch=False):
    """STEP1_LOSS_TOL, or STEP1_OTHER_MICRO_BATCH_TOL where the two runs' products may be summed
    in other orders (another micro-batch size, or BLAS splitting products over other counts)."""
    split_differs = tt.blas_split(run.err) != tt.blas_split(ref.err)
    return STEP1_OTHER_MICRO_BATCH_TOL if other_micro_batch or split_differs else STEP1_LOSS_TOL


PARAM_TOL = 1e-5  # measured worst 5.6e-7 (3 ranks), a 18x margin


def final_params(run):
    """{name: float array} of the final checkpoint of a run (written at the end of training)."""
    import h5py
    root = os.path.join(run.out_dir, "checkpoints")
    with open(os.path.join(root, "latest")) as f:
        step_dir = f.read().strip()
    with h5py.File(os.path.join(root, step_dir, "checkpoint.h5"), "r") as f:
        return {n: numpy.asarray(d[...], numpy.float64) for n, d in f["params"].items()}


def case_trajectories():
    """fp32, 2 layers, global batch 12 for 20 steps with validation every 5 steps, on 1 rank
    (micro-batch 2: 6 micro-batches), 2 ranks (3 each), 3 ranks (2 each) and 2 ranks with
    micro-batch 1 (6 each), and 2 and 3 ranks reducing once a step (grad_sync last_micro_batch):
    loss, grad_norm and val_loss agree to REL_TOL, lr to the bit, parameters to PARAM_TOL."""
    common = [*FP32, "model.num_layers=2", "data.global_batch_size=12", "train.log_every=1",
              "train.val_every=5"]
    with tempfile.TemporaryDirectory(prefix="kktrain_mpi_") as tmp:
        runs = {"1 rank": mpi_train(0, tmp, "w1", tt.DEFAULT, *common, steps=20).ok()}
        # Gradients of several micro-batches reach the other ranks every micro-batch (the
        # default) or once a step (distributed.grad_sync=last_micro_batch): both are the 1-rank
        # run up to summation order.
        for np, mb, sync in ((2, 2, ""), (3, 2, ""), (2, 1, ""), (2, 2, "last_micro_batch"),
                             (3, 2, "last_micro_batch")):
            extra = [f"distributed.grad_sync={sync}"] if sync else []
            r = mpi_train(np, tmp, f"w{np}m{mb}{sync}", tt.DEFAULT, *common, *extra,
                          f"data.micro_batch_size={mb}", steps=20).ok()
            check(f"{np} ranks (fsdp2, reshard after forward" in r.err, "start line" + r.where)
            runs[f"{np} ranks x micro-batch {mb}" + (f" ({sync})" if sync else "")] = r
        for name, r in runs.items():
            check([x["step"] for x in r.train_rows()] == list(range(1, 21)), f"{name}" + r.where)
            check([x["step"] for x in r.val_rows()] == [5, 10, 15, 20], f"{name}" + r.where)
            check_sharded_columns(r, 1 if name == "1 rank" else 2)
            for x, y in zip(r.raw, runs["1 rank"].raw):
                check(x.get("lr") == y.get("lr"), f"{name}: lr {x} vs {y}")
        worst_t, where_t = max_rel(runs, "1 rank", ("loss", "grad_norm"), lambda r: r.train_rows())
        # Validation reads windows [0, val_batches x micro-batch): comparable at equal micro-batch.
        same_mb = {k: r for k, r in runs.items() if "micro-batch 1" not in k}
        worst_v, where_v = max_rel(same_mb, "1 rank", ("val_loss",), lambda r: r.val_rows())
        print(f"measured: worst loss/grad_norm {worst_t:.3g} ({where_t}); "
              f"worst val_loss {worst_v:.3g} ({where_v})")
        check(worst_t <= REL_TOL, f"ranks changed the run by {worst_t:.3g} > {REL_TOL:g}: {where_t}")
        check(worst_v <= REL_TOL, f"ranks changed val_loss by {worst_v:.3g} > {REL_TOL:g}: {where_v}")
        l1 = runs["1 rank"].train_rows()[0]["loss"]
        print("measured: step-1 loss vs one rank: " + ", ".join(
            f"{k} {rel(r.train_rows()[0]['loss'], l1):.3g}" for k, r in runs.items()))
        for name, r in runs.items():
            d = rel(r.train_rows()[0]["loss"], l1)
            tol = step1_loss_tol(r, runs["1 rank"], "micro-batch 1" in name)
            check(d <= tol, f"{name}: step-1 loss {r.raw[0]['loss']} vs one rank's "
                  f"{runs['1 rank'].raw[0]['loss']} ({d:.3g} relative): other samples or weights?")
        # The parameters after 20 steps (the final checkpoint of each run, full tensors whatever
        # the rank count): every element of every parameter agrees to PARAM_TOL of its tensor's
        # largest magnitude (20 AdamW steps at lr up to 3e-3 amplify summation-order differences
        # of the gradients to a few fp32 ulps of the weights; an Adam step moves an element by
        # ~lr whatever its gradient's size, so the comparison is relative to the tensor scale).
        worst_p, where_p = 0.0, ""
        ref = final_params(runs["1 rank"])
        for name, r in runs.items():
            for pname, w in final_params(r).items():
                scale = max(float(numpy.abs(ref[pname]).max()), 1e-30)
                d = float(numpy.abs(w - ref[pname]).max()) / scale
                if d > worst_p:
                    worst_p, where_p = d, f"{name}: {pname}"
        print(f"measured: parameters after 20 steps: worst {worst_p:.3g} of the tensor scale "
              f"({where_p})")
        check(worst_p <= PARAM_TOL, f"parameters after 20 steps differ by {worst_p:.3g} of their "
              f"tensor's scale > {PARAM_TOL:g}: {where_p}")
        # The tolerance tells batches apart: another data.seed moves the step-1 loss by far more.
        other = mpi_train(0, tmp, "seed7", tt.DEFAULT, *common, "data.seed=7", steps=1).ok()
        d = rel(other.train_rows()[0]["loss"], l1)
        print(f"measured: data.seed=7 moves the step-1 loss by {d:.3g}")
        check(d > 100 * REL_TOL, f"data.seed=7 moved the step-1 loss by only {d:.3g}")
        # One micro-batch per rank: the loss mean is the same operations, so bit-identical
        # (unless thread settings split the products over other thread counts: step1_loss_tol).
        pair = [mpi_train(np, tmp, f"g4_{np}", tt.DEFAULT, *FP32, "data.global_batch_size=4",
                          steps=1).ok() for np in (0, 2)]
        same = tt.blas_split(pair[0].err) == tt.blas_split(pair[1].err)
        l1, l2 = pair[0].raw[0]["loss"], pair[1].raw[0]["loss"]  # as written (bits)
        d = rel(pair[1].train_rows()[0]["loss"], pair[0].train_rows()[0]["loss"])
        check(l1 == l2 if same else d <= step1_loss_tol(pair[1], pair[0]),
              f"global batch 4: step-1 loss on one rank {l1} vs 2 ranks of one micro-batch {l2} "
              f"(should be bit-identical at equal BLAS splits)")
        # mpirun -np 1 is the one-rank trainer: bit-identical to the plain binary with the same
        # threads. mpirun binds its rank to one core, so on a multi-threaded backend (OpenMP) it
        # runs 1 Kokkos thread where the plain binary runs one per core, and the kernels' sums
        # (the gradient norm) go in another order: then the rows agree to REL_TOL.
        one = mpi_train(1, tmp, "np1", tt.DEFAULT, *common, steps=20).ok()
        if kokkos_threads(one.err) == kokkos_threads(runs["1 rank"].err):
            tt.compare_runs(one, runs["1 rank"], "mpirun -np 1 vs no launcher")
        else:
            worst, where = max_rel({"mpirun -np 1": one}, "no launcher", ("loss", "grad_norm"),
                                   lambda r: r.train_rows(), runs["1 rank"])
            print(f"measured: mpirun -np 1 ({kokkos_threads(one.err)} Kokkos threads) vs no "
                  f"launcher ({kokkos_threads(runs['1 rank'].err)}): worst {worst:.3g}")
            check(worst <= REL_TOL, f"mpirun -np 1 vs no launcher: {where}")
        check_sharded_columns(one, 1)


# ---- 2. reshard_after_forward ------------------------------------------------------------------


def case_nonblocking_collectives():
    """distributed.nonblocking_collectives=true on 2 and 3 ranks (fp32 and bf16 reduce, 2
    micro-batches per rank): each unit's reduce-scatter completes while the next unit's backward
    runs and the next unit's all-gather is prefetched while this one computes; the run is
    bit-identical to the blocking one (the same bytes and sums in the same order, only earlier or
    later), with one collective wait per collective either way. Fails when a prefetched unit is
    not unpacked or a reduction reads the other wire."""
    common = ["model.num_layers=2", "train.log_every=1", "train.val_every=5"]
    with tempfile.TemporaryDirectory(prefix="kktrain_mpi_") as tmp:
        for np_, batch in ((2, 8), (3, 12)):
            for red in ("float32", "bfloat16"):
                o = [*common, f"data.global_batch_size={batch}",
                     f"distributed.mp_policy.reduce_dtype={red}"]
                blocking = mpi_train(np_, tmp, "b", tt.DEFAULT, *o, steps=10).ok()
                overlap = mpi_train(np_, tmp, "nb", tt.DEFAULT, *o,
                                    "distributed.nonblocking_collectives=true", steps=10).ok()
                compare_except(blocking, overlap, (), f"{np_} ranks, {red} reduce: non-blocking")
                waits = [(x["host_syncs_by_cause"]["collective"],
                          y["host_syncs_by_cause"]["collective"])
                         for x, y in zip(blocking.train_rows(), overlap.train_rows())]
                check(all(a == b > 0 for a, b in waits), f"collective waits {waits}")
                shutil.rmtree(blocking.out_dir)
                shutil.rmtree(overlap.out_dir)
        print("measured: 2 and 3 ranks, fp32 and bf16 reduce: non-blocking reduce-scatters give "
              "bit-identical metrics")


def case_collectives_choice():
    """distributed.collectives: kktrain's ring reductions against the MPI library's. At 2 ranks
    every element of a reduce-scatter is one addition (fp32, or bf16 rounded once), whoever adds:
    the runs are bit-identical, fp32 and bf16 reduce. At 3 ranks the ring's order is fixed by the
    rank count: two runs give the same bits. The start line says which collectives run; auto is
    kktrain's on host memory, through a shared window with every rank on this node."""
    common = ["model.num_layers=2", "train.log_every=1", "train.val_every=0"]
    with tempfile.TemporaryDirectory(prefix="kktrain_mpi_") as tmp:
        for red in ("float32", "bfloat16"):
            o = [*common, "data.global_batch_size=8", f"distributed.mp_policy.reduce_dtype={red}"]
            ring = mpi_train(2, tmp, "ring", tt.DEFAULT, *o, "distributed.collectives=kktrain",
                             steps=6).ok()
            lib = mpi_train(2, tmp, "mpi", tt.DEFAULT, *o, "distributed.collectives=mpi",
                            steps=6).ok()
            check("; kktrain ring reduce-scatter and all-reduce through a shared-memory window"
                  in ring.err, "start line of distributed.collectives=kktrain" + ring.where)
            check("; MPI collectives on host buffers)" in lib.err,
                  "start line of distributed.collectives=mpi" + lib.where)
            compare_except(ring, lib, (), f"2 ranks, {red} reduce: kktrain vs MPI collectives")
            shutil.rmtree(ring.out_dir)
            shutil.rmtree(lib.out_dir)
        o = [*common, "data.global_batch_size=12"]
        runs = [mpi_train(3, tmp, f"auto{i}", tt.DEFAULT, *o, steps=6).ok() for i in range(2)]
        check("; kktrain ring reduce-scatter" in runs[0].err, "auto on host memory" + runs[0].where)
        compare_except(runs[0], runs[1], (), "3 ranks, kktrain's ring twice")
        print("measured: 2 ranks, fp32 and bf16 reduce: kktrain's and MPI's reductions give "
              "bit-identical metrics; 3 ranks: the ring gives the same bits twice")


def case_reshard_after_forward():
    """distributed.reshard_after_forward=false at 2 ranks gathers the same values once instead of
    again for backward: metrics bit-identical to the default (true), all but the timing columns
    and comm_bytes, which is smaller by the all-gather of the layers and the final-norm head
    (tied: the embedding is held through forward and not needed by backward) per micro-batch."""
    common = ["model.num_layers=2", "data.global_batch_size=8", "train.log_every=1",
              "train.val_every=5"]  # 2 micro-batches per rank
    with tempfile.TemporaryDirectory(prefix="kktrain_mpi_") as tmp:
        for prec_name, prec in (("default precision", []), ("fp32", FP32)):
            on = mpi_train(2, tmp, "on", tt.DEFAULT, *prec, *common, steps=10).ok()
            off = mpi_train(2, tmp, "off", tt.DEFAULT, *prec, *common,
                            "distributed.reshard_after_forward=false", steps=10).ok()
            check("2 ranks (fsdp2, no reshard after forward" in off.err, "start line" + off.where)
            check(off.stderr_lines("warning") == [], "reshard_after_forward warned" + off.where)
            check(len(on.val_rows()) == 2, "validation rows" + on.where)
            compare_except(on, off, ("comm_bytes",), f"{prec_name}: reshard true vs false")
            b_on, b_off = comm_per_step(on), comm_per_step(off)
            print(f"measured ({prec_name}): comm_bytes per step {b_on:.0f} resharding, "
                  f"{b_off:.0f} not (ratio {b_off / b_on:.3f})")
            check(b_off < b_on, f"{prec_name}: comm_bytes {b_off} without resharding, {b_on} with")
            if prec == FP32:  # fp32 on the wire: the saving is 4 bytes an element, plus alignment
                doc, by_name, _, _ = audit_doc(tt.config(tt.DEFAULT), *tt.TINY_MODEL, *prec,
                                               "model.num_layers=2", "--world-size", "2")
                again = [p for p in by_name.values()
                         if p["name"].startswith("model.layers.") or p["name"] == "model.norm.weight"]
                n = padded_elements({p["name"]: p for p in again}, 2, lambda p: True)
                lo, hi = 2 * 4 * n, 2 * (4 * n + 64 * len(again))  # 2 micro-batches, W - 1 = 1
                check(lo <= b_on - b_off <= hi, f"saving {b_on - b_off} bytes per step, expected "
                      f"the layers' and head's gathers twice: [{lo}, {hi}]")
            shutil.rmtree(on.out_dir)
            shutil.rmtree(off.out_dir)


# ---- 3. the default bf16 precision on 2 ranks, bf16 reduce --------------------------------------

# Final loss (mean of the last 5 of 30 steps): 2 ranks (bf16 unit outputs) vs 1 rank (autocast,
# no output cast), and bf16 vs fp32 reduce. Measured: 9.3e-5 and 1.4e-5 (the largest step-wise
# difference of the two reduces 9.1e-5); "trains as well" is within 1% (>100x margin).
FINAL_TOL = 0.01
# Step-1 grad_norm, 2 ranks vs 1 (bf16 activations at unit boundaries): measured 8.9e-4 (20x
# margin); a gradient summed over ranks instead of averaged is 2x, other windows 16%.
STEP1_GRAD_TOL = 0.02


def case_bf16_training():
    """Default precision (bf16 compute and unit outputs, fp32 reduce) at 2 ranks trains like 1
    rank; reduce_dtype bfloat16 trains too, differs slightly, and sends exactly half the
    reduce-scatter bytes (all-gathers unchanged)."""
    common = ["model.num_layers=2", "data.global_batch_size=4", "train.log_every=1",
              "train.val_every=0"]
    with tempfile.TemporaryDirectory(prefix="kktrain_mpi_") as tmp:
        one = mpi_train(0, tmp, "one", tt.DEFAULT, *common).ok()
        two = mpi_train(2, tmp, "two", tt.DEFAULT, *common).ok()
        r16 = mpi_train(2, tmp, "r16", tt.DEFAULT, *common,
                        "distributed.mp_policy.reduce_dtype=bfloat16").ok()
        check("reduce bfloat16" in r16.err and "reduce float32" in two.err, "start lines")
        finals = {}
        for name, r in (("1 rank", one), ("2 ranks", two), ("2 ranks, bf16 reduce", r16)):
            rows = r.train_rows()
            check(len(rows) == 30, f"{name}: {len(rows)} rows" + r.where)
            first, last = rows[0]["loss"], tt.mean([x["loss"] for x in rows[-5:]])
            check(last < first - 0.5, f"{name} did not train: {first} -> {last}" + r.where)
            finals[name] = last
        print("measured: final losses " + ", ".join(f"{k} {v:.4f}" for k, v in finals.items()))
        d = rel(finals["2 ranks"], finals["1 rank"])
        check(d < FINAL_TOL, f"final loss 2 ranks {finals['2 ranks']} vs 1 rank "
              f"{finals['1 rank']}: {d:.3g} relative")
        g1, g2 = one.train_rows()[0]["grad_norm"], two.train_rows()[0]["grad_norm"]
        print(f"measured: step-1 grad_norm 1 rank {g1}, 2 ranks {g2} ({rel(g2, g1):.3g})")
        check(rel(g2, g1) < STEP1_GRAD_TOL, f"step-1 grad_norm 2 ranks {g2} vs 1 rank {g1}")
        d = rel(finals["2 ranks, bf16 reduce"], finals["2 ranks"])
        worst, _ = max_rel({"r16": r16, "two": two}, "two", ("loss",), lambda r: r.train_rows())
        print(f"measured: final loss 2 vs 1 rank {rel(finals['2 ranks'], finals['1 rank']):.3g}, "
              f"bf16 vs fp32 reduce {d:.3g} (largest step difference {worst:.3g})")
        check(d < FINAL_TOL, f"bf16 reduce final loss off by {d:.3g}")
        check(any(x["loss"] != y["loss"] for x, y in zip(two.raw, r16.raw)),
              "bf16 reduce gave the same losses as fp32 reduce: reduce_dtype ignored?")
        # One reduce-scatter a step (one micro-batch per rank) of the trainable shards, padded:
        # (W - 1) x elements x 4 bytes in fp32, x 2 in bf16; the all-gathers are the same.
        doc, by_name, _, _ = audit_doc(tt.config(tt.DEFAULT), *tt.TINY_MODEL,
                                       "model.num_layers=2", "--world-size", "2")
        n = padded_elements(by_name, 2, lambda p: p["trainable"])
        c32, c16 = comm_per_step(two), comm_per_step(r16)
        print(f"measured: comm_bytes per step fp32 reduce {c32:.0f}, bf16 reduce {c16:.0f} "
              f"(ratio {c16 / c32:.3f}); reduce-scatter {4 * n} -> {2 * n}, all-gather "
              f"{c32 - 4 * n:.0f}")
        check(c32 - c16 == 2 * n, f"comm_bytes {c32} (fp32 reduce) - {c16} (bf16 reduce) = "
              f"{c32 - c16}, expected half the fp32 reduce-scatter: 2 x {n}")
        check(c16 - 2 * n > 0, "no all-gather traffic left")


# ---- 4. the reference's patterns and LoRA, sharded ---------------------------------------------


def check_trains(r, what, drop):
    rows = r.train_rows()
    check(rows and not [x for x in r.rows if x.get("skipped")], f"{what}: skipped steps" + r.where)
    for x in rows:
        tt.check_train_row(x, r.where)
    first, last = rows[0]["loss"], tt.mean([x["loss"] for x in rows[-5:]])
    check(last < first - drop, f"{what}: loss {first} -> {last} (mean of last 5), expected a drop "
          f"of more than {drop}" + r.where)
    return first, last


def case_patterns_sharded():
    """pattern A, pattern B, the risky pattern (its precision warning exactly once, not once a
    rank) and a LoRA run on 2 and 3 ranks: exit 0, every step finite, the loss falls."""
    common = ["data.micro_batch_size=1", "data.global_batch_size=6", "train.log_every=1",
              "train.val_every=0", "lr_scheduler.lr_warmup_steps=5"]
    with tempfile.TemporaryDirectory(prefix="kktrain_mpi_") as tmp:
        for np in (2, 3):
            for cfg in (tt.PATTERN_A, tt.PATTERN_B, tt.RISKY):
                r = mpi_train(np, tmp, f"{cfg}_{np}", cfg, *common, steps=20).ok()
                first, last = check_trains(r, f"{cfg} on {np} ranks", 0.5)
                print(f"measured: {cfg} on {np} ranks: loss {first:.4f} -> {last:.4f}")
                warnings = tt.precision_warnings(r.err)
                check(len(warnings) == (1 if cfg == tt.RISKY else 0),
                      f"{cfg}: {len(warnings)} precision warnings on {np} ranks" + r.where)
                check(len(r.stderr_lines("warning")) == len(warnings), "other warnings" + r.where)
            r = mpi_train(np, tmp, f"lora_{np}", tt.RISKY, test_lora.PEFT, *common,
                          "optimizer.lr=1.0e-2", steps=30).ok()
            first, last = check_trains(r, f"LoRA on {np} ranks", 0.1)
            print(f"measured: LoRA (bf16 adapters) on {np} ranks: loss {first:.4f} -> {last:.4f}")
            check(len(tt.precision_warnings(r.err)) == 1, "one adapter warning" + r.where)
            check("trainable" in r.err, r.where)


# ---- 5. the per-rank audit -----------------------------------------------------------------------


def case_audit_world_size():
    """`audit --world-size 2` prints what `mpirun -np 2 kktrain audit` prints; rank 0 holds
    ceil(rows / 2) rows of every parameter; frozen ordinary parameters are lowered to the compute
    dtype on several ranks (not on one); trainable, keep_in_fp32 and LoRA adapter parameters keep
    their dtype; a bad or mismatched --world-size is one error line, exit 2."""
    # vocab 257: an odd row count (the embedding); two parameters frozen, one of them kept fp32.
    base = [tt.config(tt.PATTERN_B), *tt.TINY_MODEL, "model.vocab_size=257",
            "model.tie_word_embeddings=false", 'model.keep_in_fp32=["*norm*"]',
            "freeze_config.freeze_parameters=[model.layers.0.mlp.up_proj.weight, model.norm.weight]"]
    frozen, kept = "model.layers.0.mlp.up_proj.weight", "model.norm.weight"
    doc2, by2, out2, where = audit_doc(*base, "--world-size", "2")
    _, _, out_mpi, _ = audit_doc(*base, np=2)
    check(out_mpi == out2, "mpirun -np 2 audit differs from audit --world-size 2" + where)
    doc1, by1, _, _ = audit_doc(*base)
    check(doc2["world_size"] == 2 and doc1["world_size"] == 1, "world_size" + where)
    check(by1[frozen]["storage_dtype"] == "float32" and by2[frozen]["storage_dtype"] == "bfloat16",
          f"frozen {frozen}: storage {by1[frozen]['storage_dtype']} on 1 rank, "
          f"{by2[frozen]['storage_dtype']} on 2 (expected float32 -> bfloat16)" + where)
    check(not by2[frozen]["trainable"] and not by2[kept]["trainable"], "freezing" + where)
    for n, p in by2.items():
        if n != frozen:
            check(p["storage_dtype"] == "float32", f"{n} should keep float32 on 2 ranks: {p}")
    # Rank 0 holds ceil(rows / 2) rows of everything: totals / 2 plus half an odd row.
    t, pr = doc2["totals"], doc2["totals"]["per_rank"]
    check(pr["rank"] == 0, f"the largest rank should be rank 0 (ceil rows): {pr}")
    want = {"bytes_params": 0, "bytes_grads": 0, "bytes_moments": 0, "bytes_master": 0}
    for p in doc2["parameters"]:
        rows = p["shape"][0]
        check(p["shard_rows"] == -(-rows // 2), f"shard_rows of {p['name']}: {p['shard_rows']}")
        n, eb = p["shard_rows"] * math.prod(p["shape"]) // rows, p["element_bytes"]
        want["bytes_params"] += eb["param"] * n
        want["bytes_grads"] += eb["grad"] * n
        want["bytes_moments"] += (eb["exp_avg"] + eb["exp_avg_sq"] + eb["momentum"]) * n
        want["bytes_master"] += eb["master"] * n
    for k, v in want.items():
        check(pr[k] == v, f"per_rank {k} {pr[k]}, expected {v}")
        check(t[k] / 2 <= pr[k] <= t[k] / 2 + 32 * 16, f"per_rank {k} {pr[k]} vs totals {t[k]}")
    check(pr["bytes_total"] == sum(want.values()), f"per_rank bytes_total {pr}")
    check(by2["model.embed_tokens.weight"]["shard_rows"] == 129, "257 rows -> 129 on rank 0")
    print(f"measured: per-rank bytes {pr['bytes_total']} of {sum(t[k] for k in want)} in total")
    # LoRA: the frozen base is lowered, adapters keep peft.lora_dtype float32.
    peft = test_lora.PEFT.replace("}", ", lora_dtype: float32}")
    _, by, _, where = audit_doc(tt.config(tt.PATTERN_B), *tt.TINY_MODEL, peft, "--world-size", "2")
    for n, p in by.items():
        want_dtype = "float32" if ".lora_" in n else "bfloat16"
        check(p["storage_dtype"] == want_dtype, f"{n}: {p['storage_dtype']} on 2 ranks, expected "
              f"{want_dtype}" + where)
    # A bad --world-size, and one that contradicts the launch.
    for bad in ("abc", "0", "2x", "-1"):
        rc, out, err = tt.run(["audit", *base, "--world-size", bad])
        tt.expect_one_error(rc, out, err, "--world-size", repr(bad), where=f"--world-size {bad}")
    rc, out, err, _ = launch(mpirun(2) + [tt.KKTRAIN, "audit", *base, "--world-size", "3"])
    expect_one_kktrain_error(rc, out, err, 2, "--world-size 3", "2 ranks")


# ---- 6. failures end the whole job promptly with one line ---------------------------------------

PROMPT_S = 30  # a failure must end the job well within the 60 s launch timeout


def expect_one_kktrain_error(rc, out, err, status, *needles, seconds=0.0):
    where = f"\nrc={rc}\nstdout:\n{out}\nstderr:\n{err}"
    check(rc == status, f"expected exit {status}" + where)
    check(out == "", "expected empty stdout" + where)
    check(not aborted(err), "the job was aborted (the exit must be agreed, not aborted)" + where)
    errors = [ln for ln in kktrain_lines(err) if ": error: " in ln]
    check(len(errors) == 1, f"expected exactly one kktrain error line, got {len(errors)}" + where)
    for n in needles:
        check(n in errors[0], f"the error should mention {n!r}" + where)
    check(seconds < PROMPT_S, f"the job took {seconds:.1f} s to end" + where)
    return errors[0]


def case_fail_data_one_rank():
    """Rank 1 cannot open its data (Open MPI MPMD: rank 0 gets a good corpus): exit 2, one line
    from rank 1 naming data.path and the file, nothing written, no rank left waiting."""
    with tempfile.TemporaryDirectory(prefix="kktrain_mpi_") as tmp:
        good = tt.write(tmp, "good.txt", b"the quick brown fox jumps over the lazy dog\n" * 40)
        missing = os.path.join(tmp, "no_such_corpus.txt")
        out_dir = os.path.join(tmp, "run")
        args = ["train", tt.config(tt.DEFAULT), *tt.TINY, "data.micro_batch_size=1",
                "data.global_batch_size=6", "train.max_steps=3", f"train.output_dir={out_dir}"]
        cmd = mpirun(1) + [tt.KKTRAIN, *args, f"data.path={good}", ":", "-np", "1", tt.KKTRAIN,
                           *args, f"data.path={missing}"]
        rc, out, err, s = launch(cmd, timeout=60)
        print(f"measured: the job ended in {s:.1f} s")
        line = expect_one_kktrain_error(rc, out, err, 2, "data.path", missing, "rank 1", seconds=s)
        check(kktrain_lines(err) == [line], f"other kktrain lines: {kktrain_lines(err)}")
        check(not os.path.exists(os.path.join(out_dir, "metrics.jsonl")), "metrics were written")
        # Ranks 1 and 2 of 3 both fail: the lowest failing rank (1) speaks for both.
        other = os.path.join(tmp, "other_missing.txt")
        rc, out, err, s = launch(cmd + [":", "-np", "1", tt.KKTRAIN, *args, f"data.path={other}"],
                                 timeout=60)
        line = expect_one_kktrain_error(rc, out, err, 2, missing, "rank 1", seconds=s)
        check(other not in line and kktrain_lines(err) == [line], f"3 ranks: {kktrain_lines(err)}")


def case_fail_batch_split():
    """A global batch 3 ranks cannot split (4 windows, micro-batch 2): exit 2, one line."""
    with tempfile.TemporaryDirectory(prefix="kktrain_mpi_") as tmp:
        r = mpi_train(3, tmp, "run", tt.DEFAULT, "data.global_batch_size=4", steps=3)
        expect_one_kktrain_error(r.rc, r.out, r.err, 2, "data.global_batch_size", "2 x 3",
                                 seconds=r.seconds)
        check(not os.path.exists(r.out_dir), "a refused run created train.output_dir" + r.where)


def case_fail_divergence():
    """lr 1e4 without clipping on 2 ranks: the skip decision is taken on loss and grad_norm reduced
    over ranks, so every rank skips the same steps, and the run stops after 5 in a row on every
    rank at once: exit 1, one error line, no abort, no rank left waiting."""
    with tempfile.TemporaryDirectory(prefix="kktrain_mpi_") as tmp:
        r = mpi_train(2, tmp, "run", tt.DEFAULT, "optimizer.lr=1e4", "train.grad_clip=0",
                      "lr_scheduler.lr_warmup_steps=0", "train.log_every=1",
                      "data.global_batch_size=4", steps=40)
        skipped = [x["step"] for x in r.rows if x.get("skipped")]
        check(len(skipped) >= 5 and skipped[-5:] == list(range(skipped[-1] - 4, skipped[-1] + 1)),
              f"skipped steps {skipped}" + r.where)
        warns = r.stderr_lines("non-finite")
        check(len([w for w in warns if "warning" in w]) == len(skipped),
              f"one warning per skipped step (rank 0 only): {len(warns)}" + r.where)
        needles = (f"stopping at step {skipped[-1]}", "train.max_nonfinite_steps")
        expect_one_kktrain_error(r.rc, r.out, r.err, 1, *needles, seconds=r.seconds)


def case_threads_plan():
    """Without the user's thread settings, rank 0 prints the thread plan once, and no rank plans
    more threads than its share of the CPUs (2 ranks on this machine share its CPUs, or mpirun
    bound each to its own)."""
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "KOKKOS_NUM_THREADS"):
        os.environ.pop(k, None)
    with tempfile.TemporaryDirectory(prefix="kktrain_mpi_") as tmp:
        r = mpi_train(2, tmp, "run", tt.DEFAULT, "data.global_batch_size=4", steps=2).ok()
        threads = [ln for ln in r.err.splitlines() if ln.startswith(tt.THREADS_LINE)]
        check(len(threads) == 1, "expected one threads line, from rank 0" + r.where)
        n = int(threads[0][len(tt.THREADS_LINE):].split()[0])
        share = max(1, len(os.sched_getaffinity(0)) // 2)
        check(1 <= n <= share, f"a rank plans {n} threads, its share is {share}" + r.where)


def case_fail_config():
    """distributed.strategy ddp, and cast_forward_inputs false where output_dtype (float32)
    differs from param_dtype (bfloat16), on 2 ranks: exit 2, one line each."""
    with tempfile.TemporaryDirectory(prefix="kktrain_mpi_") as tmp:
        for over, needles in (
                (["distributed.strategy=ddp"], ("distributed.strategy", "ddp", "fsdp2")),
                (["distributed.mp_policy.cast_forward_inputs=false",
                  "distributed.mp_policy.output_dtype=float32"],
                 ("distributed.mp_policy.cast_forward_inputs", "float32", "bfloat16"))):
            r = mpi_train(2, tmp, "run", tt.DEFAULT, "data.global_batch_size=4", *over, steps=3)
            expect_one_kktrain_error(r.rc, r.out, r.err, 2, *needles, seconds=r.seconds)
            check(not os.path.exists(r.out_dir), "a refused run created train.output_dir" + r.where)
        # The same cast_forward_inputs: false is fine where nothing is mixed (output = param).
        r = mpi_train(2, tmp, "ok", tt.DEFAULT, "data.global_batch_size=4",
                      "distributed.mp_policy.cast_forward_inputs=false", steps=2).ok()


# ---- 7. memory ----------------------------------------------------------------------------------

MEM_SHAPE = ["model.hidden_size=512", "model.num_layers=12", "model.num_heads=4",
             "model.num_kv_heads=2", "model.intermediate_size=1376", "data.seq_len=16",
             "data.micro_batch_size=1", "data.global_batch_size=2", "train.log_every=1",
             "train.val_every=0"]
MEM_RATIO = 0.65


def case_memory_per_rank():
    """A parameter-heavy shape (~34M parameters, fp32 storage AdamW: 16 bytes a parameter in
    parameters, gradients and moments) for 3 steps: the largest rank's peak RSS at 2 ranks is at
    most 0.65x the one-rank peak (the state halves; gathered unit buffers, activations and the
    runtime do not). Host builds only: on a GPU build the state lives in device memory (host RSS
    is mostly the GPU runtime's, ~450 MiB at 1 and 2 ranks on an H200), and the device's measured
    use counts every process on the GPU."""
    if tt.device_build():
        raise tt.Skip("the sharded state lives in GPU memory, which is measured device-wide")
    with tempfile.TemporaryDirectory(prefix="kktrain_mpi_") as tmp:
        peaks = {}
        for np in (0, 2):
            r = mpi_train(np, tmp, f"mem{np}", tt.PATTERN_B, *MEM_SHAPE, steps=3)
            r.ok()
            peaks[max(np, 1)] = r.train_rows()[-1]["peak_rss_bytes"]
        doc, _, _, _ = audit_doc(tt.config(tt.PATTERN_B), *MEM_SHAPE[:5], "--world-size", "2")
        state1 = sum(doc["totals"][k] for k in ("bytes_params", "bytes_grads", "bytes_moments"))
        state2 = doc["totals"]["per_rank"]["bytes_total"]
        ratio = peaks[2] / peaks[1]
        mib = 1 << 20
        print(f"measured: peak RSS 1 rank {peaks[1] / mib:.1f} MiB, 2 ranks (largest) "
              f"{peaks[2] / mib:.1f} MiB, ratio {ratio:.3f}; state (audit) {state1 / mib:.1f} "
              f"MiB -> {state2 / mib:.1f} MiB a rank")
        check(ratio <= MEM_RATIO, f"peak RSS at 2 ranks {peaks[2]:.0f} is {ratio:.3f}x the "
              f"one-rank {peaks[1]:.0f} (> {MEM_RATIO})")


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
