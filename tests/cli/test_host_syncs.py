"""The training step's host synchronizations (core/host_sync.hpp, apps/train/step_sync.hpp): every
step row of metrics.jsonl says how many times the host waited for the device or for every rank
(host_syncs) and why (host_syncs_by_cause); the step waits twice at most, however many layers,
units and micro-batches it has, on 1, 2 and 3 ranks. On the helpers of test_mpi.py; one ctest
`sync.<case>` per case.

usage: test_host_syncs.py KKTRAIN INPUTS_DIR CASE

A step's two waits are `step_scalars` (loss, multi-token loss and gradient sum of squares read
back and reduced over ranks together, before the optimizer) and `step_end` (stop signals, errors,
the next step's windows and, on logged steps, the metrics' reductions and the lost-update counts'
readback, together). On the MPI path each buffer collective is a host wait of its own (MPI moves
host memory only inside its calls): those are counted apart, as `collective`, and grow with units
and micro-batches. A loss read back per micro-batch, or a norm reduced on its own, shows up as a
third wait and fails these cases. Beside them each row says how many kernels the step launched
(kernel_launches, case `launches`).
"""

import sys
import tempfile

import test_mpi as tm
import test_train as tt
from test_train import check

CAUSES = ("step_scalars", "step_end", "collective", "routing", "setup", "io", "validation",
          "profiling")
# 3 layers and the multi-token-prediction head: several units; 6 windows a step in micro-batches
# of 1, 2 or 6 (6, 3 or 1 micro-batches on one rank).
SHAPE = ["model.num_layers=3", "data.global_batch_size=6", "train.log_every=1", "train.val_every=3"]


def syncs(row, where):
    check("host_syncs" in row and "host_syncs_by_cause" in row, f"no sync columns: {row}" + where)
    by = row["host_syncs_by_cause"]
    check(tuple(by) == CAUSES, f"causes {list(by)}, expected {list(CAUSES)}" + where)
    check(row["host_syncs"] == sum(v for k, v in by.items() if k != "collective"),
          f"host_syncs is not the sum of the global causes: {row}" + where)
    return by


def check_run(r, np, micro):
    rows = r.train_rows()
    check(len(rows) == 6, f"{len(rows)} step rows" + r.where)
    collective = []
    for row in rows:
        by = syncs(row, r.where)
        check(row["host_syncs"] <= 2,
              f"{np} ranks, {micro} micro-batches, step {row['step']}: {row['host_syncs']} host "
              f"synchronizations > 2: {by}" + r.where)
        check(by["step_scalars"] == 1 and by["step_end"] == 1,
              f"step {row['step']}: one wait of each kind expected: {by}" + r.where)
        if np <= 1:
            check(by["collective"] == 0, f"one rank waited for collectives: {by}" + r.where)
        collective.append(by["collective"])
    for v in r.val_rows():
        by = syncs(v, r.where)
        check(by["validation"] > 0 and v["host_syncs"] == by["validation"],
              f"a validation row's waits are validation's: {v}" + r.where)
    check(len(set(collective)) == 1, f"collective waits differ between steps: {collective}")
    return collective[0]


def case_syncs_one_rank():
    """One rank, 6 / 3 / 1 micro-batches of 3 layers and an MTP head: 2 waits a step."""
    with tempfile.TemporaryDirectory(prefix="kktrain_sync_") as tmp:
        for micro in (1, 2, 6):
            r = tm.mpi_train(0, tmp, f"m{micro}", tt.DEFAULT, *SHAPE,
                             f"data.micro_batch_size={micro}", steps=6).ok()
            check_run(r, 1, 6 // micro)
        print("1 rank: 2 host synchronizations a step at 6, 3 and 1 micro-batches")


def case_syncs_sharded():
    """2 and 3 ranks, 3 / 1 micro-batches per rank (and 2 / 1 on 3 ranks): 2 global waits a step;
    the collectives' own waits grow with the micro-batches."""
    with tempfile.TemporaryDirectory(prefix="kktrain_sync_") as tmp:
        for np, micros in ((2, (1, 3)), (3, (1, 2))):
            seen = {}
            for micro in micros:
                r = tm.mpi_train(np, tmp, f"w{np}m{micro}", tt.DEFAULT, *SHAPE,
                                 f"data.micro_batch_size={micro}", steps=6).ok()
                per_rank = 6 // np // micro
                seen[per_rank] = check_run(r, np, per_rank)
            few, many = min(seen), max(seen)
            check(seen[many] > seen[few] > 0,
                  f"{np} ranks: collective waits {seen} (micro-batches per rank: waits)")
            print(f"{np} ranks: 2 global host synchronizations a step; collective waits by "
                  f"micro-batches per rank: {seen}")


def launches(r, where):
    """Each step row's kernel_launches (this rank's Kokkos kernels during the step)."""
    rows = r.train_rows()
    for row in rows:
        check(isinstance(row.get("kernel_launches"), int) and row["kernel_launches"] > 0,
              f"step {row.get('step')}: kernel_launches {row.get('kernel_launches')!r}, a "
              f"positive count expected" + where)
        check(isinstance(row.get("deep_copies"), int) and row["deep_copies"] >= 0,
              f"step {row.get('step')}: deep_copies {row.get('deep_copies')!r}" + where)
    return [row["kernel_launches"] for row in rows]


def case_launches():
    """Kernel launches a step (core/launch_count.hpp): positive, the same for identical steps (2
    and 3 of 4: the first allocates, the last may write), more with more layers; on 2 ranks the
    same for identical steps too, and more than on 1 (the sharded path's collectives add
    kernels)."""
    with tempfile.TemporaryDirectory(prefix="kktrain_launch_") as tmp:
        seen = {}
        # One micro-batch of 2 windows per rank, on 1 and 2 ranks.
        for np, layers in ((0, 1), (0, 3), (2, 1)):
            r = tm.mpi_train(np, tmp, f"n{np}l{layers}", tt.DEFAULT, f"model.num_layers={layers}",
                             f"data.global_batch_size={2 * max(np, 1)}", "train.log_every=1",
                             steps=4).ok()
            counts = launches(r, r.where)
            check(len(counts) == 4, f"{len(counts)} step rows" + r.where)
            check(counts[1] == counts[2], f"identical steps 2 and 3 launched {counts[1:3]}"
                  + r.where)
            seen[(max(np, 1), layers)] = counts[1]
        check(seen[(1, 3)] > seen[(1, 1)],
              f"3 layers launched {seen[(1, 3)]} kernels a step, 1 layer {seen[(1, 1)]}")
        # Not equal: 2 ranks run the same model kernels and their collectives' packing besides.
        check(seen[(2, 1)] > seen[(1, 1)],
              f"2 ranks launched {seen[(2, 1)]} kernels a step, 1 rank {seen[(1, 1)]}")
        print("kernel launches a step (ranks, layers): "
              + ", ".join(f"{k}: {v}" for k, v in seen.items()))


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
