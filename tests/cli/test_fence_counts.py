"""Every global fence of a training step is a host wait kktrain reports: the step's device
drains, counted by a Kokkos Tools library (tests/tools/fence_counter.cpp, loaded through
KOKKOS_PROFILE_LIBRARY / KOKKOS_TOOLS_LIBS, and LD_PRELOAD on Kokkos < 3.5 where fences do not
reach tools), equal metrics.jsonl's host_syncs + host_syncs_by_cause.collective of that step.
A raw Kokkos::fence() that bypasses host_sync() (core/host_sync.hpp) drains the queue uncounted
and fails these cases; the sync.* cases of test_host_syncs.py cannot see it. One ctest
`sync.fences_<case>` per case.

usage: KKTRAIN_FENCE_COUNTER=libkktrain_fence_counter.so test_fence_counts.py KKTRAIN INPUTS CASE

The first step is not compared: it builds the FSDP units' tensor tables (parallel/, TensorTable:
a host-to-device deep_copy without an execution-space instance, a global fence) and reports none
of those waits (4 on one rank); every later step must match exactly.

While the tool is loaded gemm() closes a profile region around each product with a counted wait
(cause `profiling`), so host_syncs is larger than in a plain run; the equality holds either way.
"""

import glob
import os
import sys
import tempfile

import test_mpi as tm
import test_train as tt
from test_train import check

# 2 layers and an MTP head (several units), every step logged (its row says its waits).
SHAPE = ["model.num_layers=2", "model.mtp_num_layers=1", "data.global_batch_size=4",
         "train.log_every=1", "train.val_every=1000"]
STEPS = 3


def with_counter(tmp, name):
    """Environment for the runs: the counter loaded, its counts to tmp/name.fences[.rank]."""
    lib = os.environ.get("KKTRAIN_FENCE_COUNTER", "")
    check(os.path.isfile(lib), f"KKTRAIN_FENCE_COUNTER={lib!r} is not the counter library")
    out = os.path.join(tmp, name + ".fences")
    os.environ.update(KOKKOS_PROFILE_LIBRARY=lib, KOKKOS_TOOLS_LIBS=lib, LD_PRELOAD=lib,
                      KKTRAIN_FENCE_COUNTS=out)
    return out


def counts(path):
    """Per step: (drains, fences)."""
    with open(path) as f:
        return [tuple(int(x) for x in line.split()) for line in f if line.strip()]


def check_run(r, files, what):
    rows = r.train_rows()
    check(len(rows) == STEPS, f"{what}: {len(rows)} step rows" + r.where)
    check(files, f"{what}: the fence counter wrote nothing (not loaded?)" + r.where)
    for path in files:
        per_step = counts(path)
        check(len(per_step) == STEPS,
              f"{what}: {len(per_step)} steps counted in {path}, expected {STEPS}" + r.where)
        for row, (drains, fences) in list(zip(rows, per_step))[1:]:
            by = row["host_syncs_by_cause"]
            reported = row["host_syncs"] + by["collective"]
            check(drains == reported,
                  f"{what}, {os.path.basename(path)}, step {row['step']}: the device drained "
                  f"{drains} times ({fences} global fences) but the step reports {reported} "
                  f"waits: {by}" + r.where)
    return rows[0]["host_syncs"], rows[0]["host_syncs_by_cause"]["collective"]


def run(np, tmp, name, micro):
    out = with_counter(tmp, name)
    r = tm.mpi_train(np, tmp, name, tt.DEFAULT, *SHAPE, f"data.micro_batch_size={micro}",
                     steps=STEPS).ok()
    return check_run(r, sorted(glob.glob(out + "*")), f"{max(np, 1)} rank(s), micro_batch_size {micro}")


def case_one_rank():
    """One rank, 1 and 4 micro-batches a step (micro_batch_size 4 and 1)."""
    with tempfile.TemporaryDirectory(prefix="kktrain_fences_") as tmp:
        for micro in (4, 1):
            syncs, coll = run(0, tmp, f"m{micro}", micro)
            print(f"1 rank, micro_batch_size {micro}: every step's drains = its {syncs} + {coll} waits")


def case_two_ranks():
    """Two ranks, 2 micro-batches a step each: the collectives' waits included."""
    with tempfile.TemporaryDirectory(prefix="kktrain_fences_") as tmp:
        syncs, coll = run(2, tmp, "w2", 1)
        print(f"2 ranks: every step's drains = its {syncs} + {coll} waits, on each rank")


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
