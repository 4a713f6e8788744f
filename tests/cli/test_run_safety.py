"""A run at scale fails cleanly and never loses a file: full disks, one rank's fault, damaged
`latest` pointers, inputs inside the output directory, forged checkpoint attributes, model files
the model cannot take, signals after the last step, and memory limits (cgroups, rlimits).

usage: test_run_safety.py KKTRAIN INPUTS_DIR FAIL_IO_SO STUCK_PEER CASE   (ctest safety.<CASE>)

FAIL_IO_SO is tests/tools/fail_io.c (LD_PRELOAD: reads or writes under a directory fail on one
rank with a chosen errno, or are slowed down); STUCK_PEER tests/tools/mpi_stuck_peer.cpp. Full
disks are small tmpfs mounts and memory limits child memory cgroups: both need root (CI runs as
root); without it those cases skip (exit 77). Every failure must be exactly one "kktrain...:
error:" line naming the file and the reason, the documented exit status, the job ended within
PROMPT_S seconds on every rank, and the files that were there before byte-for-byte the same.
"""

import contextlib
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

import test_checkpoint as ck
import test_checkpoint_files as cf
import test_mpi as tm
import test_train as tt
from test_lora import PEFT

FAIL_IO = ""
STUCK_PEER = ""
PROMPT_S = 30  # a failure ends the whole job within this (measured: 1-5 s; see the prints)
ENOSPC = os.strerror(28)
EIO = os.strerror(5)
O_CKPT = ["checkpoint.save_every=2", "train.val_every=0", "train.log_every=1",
          "checkpoint.resume=auto"]  # test_train's TINY starts afresh; these continue


# ---- running kktrain with faults -------------------------------------------------------------


def run(args, np_=1, env=None, timeout=120):
    """(rc, stdout, stderr, seconds) of kktrain on np_ ranks; env: extra variables for every rank
    (exported through mpirun)."""
    env = dict(env or {})
    cmd = [tt.KKTRAIN, *args]
    if np_ > 1:
        cmd = tm.mpirun(np_) + [x for k in env for x in ("-x", k)] + cmd
    saved = os.environ.copy()
    os.environ.update(env)  # tm.launch's processes inherit it (mpirun exports it to the ranks)
    try:
        return tm.launch(cmd, timeout=timeout)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def faults(under, ops="write", errno=5, rank=None, after=0, delay_ms=0):
    env = {"LD_PRELOAD": FAIL_IO, "KKTRAIN_FAIL_IO_UNDER": under, "KKTRAIN_FAIL_IO_OPS": ops,
           "KKTRAIN_FAIL_IO_ERRNO": str(errno), "KKTRAIN_FAIL_IO_AFTER_BYTES": str(after),
           "KKTRAIN_FAIL_IO_DELAY_MS": str(delay_ms)}
    if rank is not None:
        env["KKTRAIN_FAIL_IO_RANK"] = str(rank)
    return env


def one_error(rc, out, err, status, *needles, seconds=0.0):
    """Exactly one kktrain error line holding every needle; the exit status; promptly."""
    where = f"\nrc={rc}\nstdout:\n{out[-2000:]}\nstderr:\n{err[-4000:]}"
    tt.check(rc == status, f"expected exit {status}" + where)
    errors = [ln for ln in err.splitlines() if ln.startswith("kktrain") and ": error: " in ln]
    tt.check(len(errors) == 1, f"expected one kktrain error line, got {len(errors)}" + where)
    for n in needles:
        tt.check(n in errors[0], f"the error should mention {n!r}" + where)
    tt.check(seconds < PROMPT_S, f"the job took {seconds:.1f} s to end" + where)
    return errors[0]


def train_args(out_dir, cfg=tt.PATTERN_A, *extra, np_=1):
    return ["train", tt.config(cfg), *ck.tiny(np_), *O_CKPT, f"train.output_dir={out_dir}", *extra]


@contextlib.contextmanager
def tmpfs(size_kib):
    """A tmpfs of size_kib KiB mounted at a new directory (root only)."""
    if os.geteuid() != 0:
        raise tt.Skip("mounting a tmpfs needs root")
    d = tempfile.mkdtemp(prefix="kktrain_tmpfs_")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", d],
                       capture_output=True, text=True)
    if r.returncode != 0:
        os.rmdir(d)
        raise tt.Skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    try:
        yield d
    finally:
        subprocess.run(["umount", "-l", d])
        os.rmdir(d)


def fill(directory):
    """Takes every free byte of the file system of `directory`."""
    fd = os.open(os.path.join(directory, "filler"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        for size in (1 << 20, 4096, 1):
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * size) == size:
                    pass
    finally:
        os.close(fd)


# ---- 1. full disks -------------------------------------------------------------------------


def case_full_disk_save():
    """A save that does not fit: the free-space check refuses it before writing (tmpfs), and a
    disk filling during the write (ENOSPC from pwrite after 64 KiB, on rank 1 of 2): exit 1, one
    line naming the file and 'No space left on device', the step-2 checkpoint untouched."""
    with tempfile.TemporaryDirectory(prefix="kktrain_safe_") as tmp, tmpfs(6144) as disk:
        for np_ in (1, 2):
            out, root = os.path.join(tmp, f"run{np_}"), os.path.join(disk, f"ck{np_}")
            args = train_args(out, tt.PATTERN_A, f"checkpoint.dir={root}", np_=np_)
            rc, o, e, s = run(args + ["train.max_steps=2"], np_)
            tt.check(rc == 0, f"first run: rc {rc}\n{e}")
            before = cf.snapshot(root)
            # The disk fills up during the write of step 4 (rank 1 on 2 ranks).
            rc, o, e, s = run(args + ["train.max_steps=4"], np_,
                              faults(root, errno=28, after=65536, rank=np_ - 1))
            line = one_error(rc, o, e, 1, "step_00000004", ENOSPC, seconds=s)
            print(f"{np_} rank(s), ENOSPC during the write: {s:.1f} s: {line}")
            after = cf.snapshot(root)
            tt.check({k: after.get(k) for k in before} == before, "the step-2 checkpoint changed")
            tt.check(ck.latest(root) == "step_00000002" and not os.path.exists(
                os.path.join(root, "step_00000004")), f"{sorted(os.listdir(root))}")
            # The file system itself full: refused before anything is written.
            fill(disk)
            rc, o, e, s = run(args + ["train.max_steps=4"], np_)
            line = one_error(rc, o, e, 1, "step_00000004", ENOSPC, "free", seconds=s)
            print(f"{np_} rank(s), full tmpfs: {s:.1f} s: {line}")
            os.remove(os.path.join(disk, "filler"))
            tt.check(ck.latest(root) == "step_00000002", "latest moved")
            with open(os.path.join(root, "step_00000002", "checkpoint.h5"), "rb") as f:
                tt.check(f.read() == before["step_00000002/checkpoint.h5"], "step 2 changed")


def case_full_disk_save_repeated():
    """A disk filling during a 2-rank checkpoint save, again and again (blocking and non-blocking
    collectives): every run ends with exit 1 and the one error line, never a signal. HDF5 must
    not touch the file it gave up at exit (its close callback inside MPI_Finalize crashed about
    one run in three)."""
    runs = 10
    with tempfile.TemporaryDirectory(prefix="kktrain_safe_") as tmp:
        out, root = os.path.join(tmp, "run"), os.path.join(tmp, "ck")
        args = train_args(out, tt.PATTERN_A, f"checkpoint.dir={root}", np_=2)
        rc, o, e, s = run(args + ["train.max_steps=2"], 2)
        tt.check(rc == 0, f"first run: rc {rc}\n{e}")
        worst = 0.0
        for i in range(runs):
            mode = f"distributed.nonblocking_collectives={'true' if i % 2 else 'false'}"
            # Rank 0 writes the file's HDF5 metadata: 2 KiB in, HDF5's own flush fails (the file
            # is given up); on rank 1 its rows fail instead.
            rank, after = (0, 2048) if i % 3 != 2 else (1, 65536)
            rc, o, e, s = run(args + ["train.max_steps=4", mode], 2,
                              faults(root, errno=28, after=after, rank=rank))
            one_error(rc, o, e, 1, "step_00000004", ENOSPC, seconds=s)
            tt.check(ck.latest(root) == "step_00000002", f"run {i}: latest moved")
            worst = max(worst, s)
        print(f"{runs} runs on 2 ranks, ENOSPC during the step-4 save: exit 1 each, the slowest "
              f"{worst:.1f} s")


def case_mpmd_configs():
    """Ranks started with different configurations (an MPMD launch: `mpirun -np 1 kktrain train
    A : -np 1 kktrain train B`) agree on the resolved config before anything else: one line
    naming the first key that differs, exit 2, nothing trained; a config only one rank can read
    stops the job with that rank's error, said once."""
    with tempfile.TemporaryDirectory(prefix="kktrain_safe_") as tmp:
        out = os.path.join(tmp, "run")
        base = train_args(out, tt.PATTERN_A, "train.max_steps=2", np_=2)
        mpirun = tm.mpirun(1)
        cases = [
            (["model.hidden_size=64"], ("rank 1", "rank 0", "model.hidden_size", "32", "64")),
            (["train.max_steps=3"], ("different configurations", "train.max_steps")),
            (["model.hidden_sise=64"], ("model.hidden_sise", "hidden_size")),  # rank 1 only
        ]
        for extra, needles in cases:
            cmd = (mpirun + [tt.KKTRAIN, *base] + [":"] + ["-np", "1", tt.KKTRAIN, *base, *extra])
            rc, o, e, s = tm.launch(cmd)
            line = one_error(rc, o, e, 2, *needles, seconds=s)
            tt.check(not os.path.exists(os.path.join(out, "metrics.jsonl")),
                     "a run with mismatched ranks wrote metrics")
            print(f"{extra}: {s:.1f} s: {line}")


def case_full_disk_export():
    """The end-of-run export (rank 0, 1 and 2 ranks), `kktrain export` and `kktrain eval --json`
    on a full disk: exit 1, one line naming the file and the reason; no partial file or temporary
    left; an earlier export or report stays as it was (both are written atomically)."""
    with tempfile.TemporaryDirectory(prefix="kktrain_safe_") as tmp:
        for np_ in (1, 2):
            out = os.path.join(tmp, f"run{np_}")
            rc, o, e, s = run(train_args(out, tt.PATTERN_A, "train.max_steps=2", np_=np_), np_,
                              faults(os.path.join(out, ".export.h5"), errno=28))
            line = one_error(rc, o, e, 1, "export.h5", ENOSPC, seconds=s)
            print(f"{np_} rank(s), end-of-run export: {s:.1f} s: {line}")
            left = [n for n in os.listdir(out) if "export" in n]
            tt.check(left == [], f"export debris: {left}")
            tt.check(ck.latest(os.path.join(out, "checkpoints")) == "step_00000002", "no ckpt")
        with tmpfs(1024) as disk:
            dst, report = os.path.join(disk, "e.h5"), os.path.join(disk, "eval.json")
            for path, text in ((dst, b"an earlier export\n"), (report, b"an earlier report\n")):
                with open(path, "wb") as f:
                    f.write(text)
            fill(disk)
            rc, o, e, s = tm.launch([tt.KKTRAIN, "export", os.path.join(tmp, "run1"), "--out",
                                     dst])
            line = one_error(rc, o, e, 1, dst, ENOSPC, seconds=s)
            print(f"kktrain export to a full tmpfs: {line}")
            with open(dst, "rb") as f:
                tt.check(f.read() == b"an earlier export\n", "the earlier export changed")
            rc, o, e, s = tm.launch([tt.KKTRAIN, "eval", os.path.join(tmp, "run1"), "--data",
                                     tt.config("eval_example_text.txt"), "--json", report])
            line = one_error(rc, o, e, 1, "eval.json", ENOSPC, seconds=s)
            print(f"kktrain eval --json to a full tmpfs: {line}")
            with open(report, "rb") as f:
                tt.check(f.read() == b"an earlier report\n", "the earlier report changed")
            tt.check(sorted(os.listdir(disk)) == ["e.h5", "eval.json", "filler"],
                     f"{os.listdir(disk)}")


def case_full_disk_metrics():
    """metrics.jsonl (1 and 2 ranks), and the TensorBoard event file beside it (logging.
    tensorboard), on a full file system: exit 1, one line naming it. A DPO run's reference
    log-probabilities on a disk filling during their write: the same, and nothing of them left."""
    with tempfile.TemporaryDirectory(prefix="kktrain_safe_") as tmp, tmpfs(512) as disk:
        for np_, tb in ((1, False), (2, False), (1, True)):
            out = os.path.join(disk, f"run{np_}{'_tb' if tb else ''}")
            os.makedirs(out)
            fill(disk)
            rc, o, e, s = run(train_args(out, tt.PATTERN_A, "train.max_steps=4",
                                         f"checkpoint.dir={os.path.join(tmp, str(np_))}",
                                         f"logging.tensorboard={str(tb).lower()}",
                                         np_=np_), np_)
            name = os.path.join(out, "tb", "events.out.tfevents.") if tb else os.path.join(
                out, "metrics.jsonl")
            line = one_error(rc, o, e, 1, name, ENOSPC, seconds=s)
            print(f"{np_} rank(s){', TensorBoard' if tb else ''}: {line}")
            os.remove(os.path.join(disk, "filler"))
    # A DPO run's reference log-probabilities (examples/reference/logps.bin, written before the
    # first step): the disk fills during the write; no file of it is left to be reused, and the
    # same command on a disk with room computes it again and trains.
    import test_dpo
    with tempfile.TemporaryDirectory(prefix="kktrain_safe_") as tmp:
        out = os.path.join(tmp, "dpo")
        args = ["train", tt.config(tt.DEFAULT), *test_dpo.base(steps=1),
                f"train.output_dir={out}"]
        ref = os.path.join(out, "examples", "reference")
        rc, o, e, s = run(args, 1, faults(ref, errno=28))
        line = one_error(rc, o, e, 1, "logps.bin", ENOSPC, seconds=s)
        left = os.listdir(ref) if os.path.isdir(ref) else []
        tt.check(left == [], f"the failed reference write left {left}")
        print(f"DPO reference log-probabilities: {line}")
        rc, o, e, s = run(args, 1)
        tt.check(rc == 0 and os.path.exists(os.path.join(ref, "logps.bin")),
                 f"the rerun: rc {rc}\n{e[-3000:]}")


def export_peak_rss(out, dest, dtype):
    """Peak RSS (bytes) of `kktrain export` of the run in `out`, as its line reports it (VmHWM of
    its own image: wait4's ru_maxrss would count this Python harness it was forked from)."""
    rc, o, e, s = run(["export", out, "--out", dest, "--dtype", dtype])
    tt.check(rc == 0, f"export {dtype} of {out}: rc {rc}\n{e}")
    m = re.search(r"peak RSS ([0-9.]+) MiB\)$", e.strip())
    tt.check(m is not None, f"the export's line reports no peak RSS\n{e}")
    return float(m.group(1)) * (1 << 20)


def case_export_memory():
    """`kktrain export` streams: its peak RSS (its line reports it) stays within what the same
    export of a tiny model takes (the program, HDF5 and, on GPU builds, the GPU runtime: 24 MiB
    on the Serial build) plus 16 MiB plus half the model's fp32 bytes (a 25.4M-parameter model:
    97 MiB in fp32, of which an export holding every tensor in fp32 keeps all; the streaming one
    adds 10-13 MiB here)."""
    model = ["model.hidden_size=512", "model.num_layers=8", "model.num_heads=8",
             "model.num_kv_heads=8", "model.intermediate_size=1376"]
    with tempfile.TemporaryDirectory(prefix="kktrain_safe_") as tmp:
        runs = {}
        for name, shape in (("tiny", tt.TINY_MODEL), ("big", model)):
            runs[name] = os.path.join(tmp, name)
            rc, o, e, s = run(["train", tt.config(tt.PATTERN_A), *shape, "data.seq_len=16",
                               "data.micro_batch_size=1", "data.global_batch_size=1",
                               "train.max_steps=1", "train.val_every=0",
                               f"train.output_dir={runs[name]}"])
            tt.check(rc == 0, e)
        n = h5py.File(os.path.join(runs["big"], "export.h5"), "r")
        params = sum(math.prod(d.shape) for d in n["params"].values())
        n.close()
        for dtype in ("bfloat16", "float32"):
            base = export_peak_rss(runs["tiny"], os.path.join(tmp, "t.h5"), dtype)
            rss = export_peak_rss(runs["big"], os.path.join(tmp, "e.h5"), dtype)
            limit = base + (16 << 20) + params * 4 // 2
            print(f"export {dtype}: {params} parameters ({params * 4 / 2**20:.1f} MiB in fp32), "
                  f"peak RSS {rss / 2**20:.1f} MiB (a tiny model's {base / 2**20:.1f} MiB), "
                  f"limit {limit / 2**20:.1f} MiB")
            tt.check(rss <= limit, f"{dtype}: peak RSS {rss} > {limit}")


# ---- 2. one rank's fault -------------------------------------------------------------------


def case_one_rank_faults():
    """An I/O error on rank 1 only (2 and 3 ranks) while saving, resuming and loading
    model.init_from, and on the only rank of `kktrain export`: every rank ends promptly, one line
    from the failing rank naming the file and the system's reason; nothing earlier changes."""
    with tempfile.TemporaryDirectory(prefix="kktrain_safe_") as tmp:
        base = os.path.join(tmp, "base")
        rc, o, e, s = run(train_args(base, tt.PATTERN_A, "train.max_steps=2"))
        tt.check(rc == 0, e)
        for np_ in (2, 3):
            out = os.path.join(tmp, f"run{np_}")
            root = os.path.join(out, "checkpoints")
            args = train_args(out, tt.PATTERN_A, np_=np_)
            tt.check(run(args + ["train.max_steps=2"], np_)[0] == 0, "first run")
            before = cf.snapshot(root)
            cases = [("save", root, "write", args + ["train.max_steps=4"], 1,
                      ["rank 1", "step_00000004", EIO]),
                     ("resume", root, "read", args + ["train.max_steps=4"], 2,
                      ["rank 1", "step_00000002", EIO]),
                     ("init_from", base, "read",
                      train_args(os.path.join(tmp, f"i{np_}"), tt.PATTERN_A, "train.max_steps=2",
                                 f"model.init_from={os.path.join(base, 'export.h5')}", np_=np_),
                      2, ["rank 1", "model.init_from", "export.h5", EIO])]
            for what, under, ops, a, status, needles in cases:
                rc, o, e, s = run(a, np_, faults(under, ops, rank=1))
                line = one_error(rc, o, e, status, *needles, seconds=s)
                print(f"{np_} ranks, {what}: the job ended in {s:.1f} s: {line}")
                tt.check({k: v for k, v in cf.snapshot(root).items() if k in before} == before,
                         f"{what}: the checkpoint changed")
        rc, o, e, s = run(["export", base, "--out", os.path.join(tmp, "e.h5")], 1,
                          faults(os.path.join(base, "checkpoints"), "read"))
        one_error(rc, o, e, 2, "checkpoint.h5", EIO, seconds=s)
        tt.check(not [n for n in os.listdir(tmp) if n.startswith((".e.h5", "e.h5"))], "debris")


def case_stuck_peer():
    """The last resort: rank 1 fails while the others wait in a collective it never joins; it
    aborts the job after distributed.failed_rank_wait_s (2 s here) with its message. Also with
    a non-blocking reduce-scatter in flight and the others waiting for the next one."""
    for np_ in (2, 3):
        for how in ("barrier", "in_flight"):
            rc, o, e, s = tm.launch(tm.mpirun(np_) + [STUCK_PEER, "2", how], timeout=60)
            tt.check(rc != 0 and "rank 1 cannot write its shard" in e and "aborting the job" in e,
                     f"{how}: rc {rc}\n{e}")
            tt.check(2.0 <= s < 15, f"{np_} ranks, {how}: the job ended after {s:.1f} s")
            print(f"{np_} ranks, {how}: aborted {s:.1f} s after rank 1's failure (wait 2 s)")


# ---- 3. the checkpoint root: damaged pointers, other runs' checkpoints ----------------------


def steps_of(root):
    return sorted(n for n in os.listdir(root) if n.startswith("step_"))


def case_latest_pointer():
    """A missing, dangling, garbage, looping or directory `latest` (and a stale one): the run
    resumes from the newest complete step directory (step 4) and says so; no checkpoint is lost."""
    def remove(p):
        os.remove(p)

    def dangling(p):
        with open(p, "w") as f:
            f.write("step_00000006\n")

    def garbage(p):
        with open(p, "w") as f:
            f.write("\x00\x01 not a step\n")

    def loop(p):
        os.remove(p)
        os.symlink("latest", p)

    def directory(p):
        os.remove(p)
        os.makedirs(os.path.join(p, "inside"))

    def stale(p):
        with open(p, "w") as f:
            f.write("step_00000002\n")

    with tempfile.TemporaryDirectory(prefix="kktrain_safe_") as tmp:
        good = os.path.join(tmp, "good")
        extra = ["checkpoint.keep_last=3"]
        tt.check(run(train_args(good, tt.PATTERN_A, "train.max_steps=4", *extra))[0] == 0, "run")
        for name, damage in (("missing", remove), ("dangling", dangling), ("garbage", garbage),
                             ("loop", loop), ("directory", directory), ("stale", stale)):
            d = os.path.join(tmp, name)
            shutil.copytree(good, d, symlinks=True)
            root = os.path.join(d, "checkpoints")
            damage(os.path.join(root, "latest"))
            kept = {n: cf.snapshot(os.path.join(root, n)) for n in steps_of(root)}
            rc, o, e, s = run(train_args(d, tt.PATTERN_A, "train.max_steps=6", *extra))
            tt.check(rc == 0 and "resumed from " + os.path.join(root, "step_00000004") in e,
                     f"{name}: rc {rc}\n{e}")
            warn = [ln for ln in e.splitlines() if "using the newest complete checkpoint" in ln]
            tt.check(len(warn) == 1 and "step_00000004" in warn[0] and "latest" in warn[0],
                     f"{name}: warnings {warn}\n{e}")
            for n, files in kept.items():
                tt.check(cf.snapshot(os.path.join(root, n)) == files, f"{name}: {n} changed")
            tt.check(steps_of(root) == ["step_00000002", "step_00000004", "step_00000006"] and
                     ck.latest(root) == "step_00000006", f"{name}: {os.listdir(root)}")
            print(f"{name}: {warn[0]}")


def case_other_runs_checkpoints():
    """A fresh run (checkpoint.resume: none) into a root holding checkpoints, and a run resumed
    from an earlier step of its root: the checkpoints it did not continue from move to
    earlier_1/ with every byte; its saves and pruning never replace or remove them."""
    with tempfile.TemporaryDirectory(prefix="kktrain_safe_") as tmp:
        d = os.path.join(tmp, "run")
        root = os.path.join(d, "checkpoints")
        tt.check(run(train_args(d, tt.PATTERN_A, "train.max_steps=4"))[0] == 0, "first run")
        first = cf.snapshot(root)
        rc, o, e, s = run(train_args(d, tt.PATTERN_A, "train.max_steps=6",
                                     "checkpoint.resume=none"))
        tt.check(rc == 0 and "moved to" in e, f"fresh run: rc {rc}\n{e}")
        aside = cf.snapshot(os.path.join(root, "earlier_1"))
        tt.check(aside == first, f"earlier_1 holds {sorted(aside)}, not the first run's files")
        tt.check(steps_of(root) == ["step_00000004", "step_00000006"], f"{os.listdir(root)}")
        step6 = cf.snapshot(os.path.join(root, "step_00000006"))
        rc, o, e, s = run(train_args(d, tt.PATTERN_A, "train.max_steps=8",
                                     f"checkpoint.resume={os.path.join(root, 'step_00000004')}"))
        tt.check(rc == 0 and "continues from step 4" in e, f"rewind: rc {rc}\n{e}")
        tt.check(os.listdir(os.path.join(root, "earlier_2")) == ["step_00000006"] and
                 cf.snapshot(os.path.join(root, "earlier_2", "step_00000006")) == step6 and
                 cf.snapshot(os.path.join(root, "earlier_1")) == first and
                 steps_of(root) == ["step_00000006", "step_00000008"], f"{os.listdir(root)}")


def case_inputs_in_output():
    """An input that is a file the run writes, moves or removes (any name for it: the path, a
    hard link, a symbolic link): exit 2, one line naming the key and the file; nothing changed."""
    with tempfile.TemporaryDirectory(prefix="kktrain_safe_") as tmp:
        d = os.path.join(tmp, "run")
        tt.check(run(train_args(d, tt.PATTERN_A, "train.max_steps=2"))[0] == 0, "first run")
        export, metrics = os.path.join(d, "export.h5"), os.path.join(d, "metrics.jsonl")
        step2 = os.path.join(d, "checkpoints", "step_00000002")
        os.link(export, os.path.join(tmp, "hard.h5"))
        os.symlink(export, os.path.join(tmp, "soft.h5"))
        yaml_in_out = os.path.join(d, "config.yaml")
        shutil.copy(tt.config(tt.PATTERN_A), yaml_in_out)
        cases = [
            ("init_from the run's export", ["model.init_from=" + export,
                                            "checkpoint.resume=none"], "model.init_from"),
            ("init_from its own checkpoint", ["model.init_from=" + step2,
                                              "checkpoint.resume=none"], "model.init_from"),
            ("init_from a hard link", ["model.init_from=" + os.path.join(tmp, "hard.h5"),
                                       "checkpoint.resume=none"], "hard.h5"),
            ("init_from a symbolic link", ["model.init_from=" + os.path.join(tmp, "soft.h5"),
                                           "checkpoint.resume=none"], "soft.h5"),
            ("data.path the export", ["data.path=" + export], "data.path"),
            ("data.path metrics.jsonl", ["data.path=" + metrics], "metrics.jsonl"),
        ]
        before = cf.snapshot(d)
        for name, extra, needle in cases:
            rc, o, e, s = run(train_args(d, tt.PATTERN_A, "train.max_steps=4", *extra))
            tt.expect_one_error(rc, o, e, needle, "refusing", where=name)
            tt.check(cf.snapshot(d) == before, f"{name}: the run directory changed")
        # The CONFIG file itself at the export's path.
        shutil.copy(tt.config(tt.PATTERN_A), os.path.join(tmp, "cfg.yaml"))
        os.replace(export, os.path.join(tmp, "export.bak"))
        shutil.copy(tt.config(tt.PATTERN_A), export)
        rc, o, e, s = run(["train", export, *ck.tiny(), *O_CKPT, f"train.output_dir={d}",
                           "train.max_steps=4"])
        tt.expect_one_error(rc, o, e, "CONFIG", "export.h5", where="CONFIG at export.h5")
        with open(export) as f, open(tt.config(tt.PATTERN_A)) as g:
            tt.check(f.read() == g.read(), "the CONFIG file was overwritten")


# ---- 4. files that must be refused -----------------------------------------------------------


def case_forged_attributes():
    """Checkpoint progress attributes that cannot be (a negative step, more updates than steps,
    a non-finite learning rate, ...): exit 2 naming the attribute; the file unchanged."""
    forged = [("step", -5), ("optimizer_steps", -1), ("optimizer_steps", 3),
              ("nonfinite_in_row", -1), ("nonfinite_in_row", 2), ("next_lr", float("nan")),
              ("next_lr", -1.0), ("world_size", 0)]
    with tempfile.TemporaryDirectory(prefix="kktrain_safe_") as tmp:
        good = os.path.join(tmp, "good")
        tt.check(run(train_args(good, tt.PATTERN_A, "train.max_steps=2"))[0] == 0, "run")
        for attr, value in forged:
            d = os.path.join(tmp, f"{attr}_{value}")
            shutil.copytree(good, d)
            path = os.path.join(d, "checkpoints", "step_00000002", "checkpoint.h5")
            with h5py.File(path, "r+") as f:
                f.attrs.modify(attr, value)
            with open(path, "rb") as f:
                data = f.read()
            rc, o, e, s = run(train_args(d, tt.PATTERN_A, "train.max_steps=4"))
            line = tt.expect_one_error(rc, o, e, attr, "invalid", where=f"{attr}={value}")
            with open(path, "rb") as f:
                tt.check(f.read() == data, f"{attr}: the checkpoint changed")
            print(f"{attr}={value}: {line}")


def case_model_file_refusals():
    """model.init_from files the model cannot take: trained LoRA adapters into a model without
    them, a tensor the model does not use, integer data, a tied weight given separately; and
    `export --out /proc/version`, an override before CONFIG: exit 2, one line each."""
    with tempfile.TemporaryDirectory(prefix="kktrain_safe_") as tmp:
        j = lambda *p: os.path.join(tmp, *p)
        rc, o, e, s = run(train_args(j("lora"), tt.PATTERN_B, "train.max_steps=2", PEFT))
        tt.check(rc == 0, f"LoRA run: {e}")
        rc, o, e, s = run(["export", j("lora"), "--out", j("sep.h5"), "--lora", "separate"])
        tt.check(rc == 0, e)
        for src in (j("lora", "checkpoints", "step_00000002"), j("sep.h5")):
            rc, o, e, s = run(train_args(j("x"), tt.PATTERN_B, "train.max_steps=2",
                                         f"model.init_from={src}"))
            tt.expect_one_error(rc, o, e, "LoRA", "--lora merged", where=src)
        export = j("lora", "export.h5")
        shutil.copy(export, j("extra.h5"))
        with h5py.File(j("extra.h5"), "r+") as f:
            f["/params/model.layers.0.extra.weight"] = np.zeros((4, 4), np.float32)
        with h5py.File(j("ints.h5"), "w") as f, h5py.File(export, "r") as g:
            for n, ds in g["params"].items():
                f["params/" + n] = np.zeros(ds.shape, np.int32)
        tt.check(run(train_args(j("untied"), tt.PATTERN_B, "train.max_steps=2",
                                "model.tie_word_embeddings=false"))[0] == 0, "untied run")
        cases = [(j("extra.h5"), ["model.layers.0.extra.weight", "does not use"]),
                 (j("ints.h5"), ["int32", "ints.h5"]),
                 (j("untied", "export.h5"), ["lm_head.weight", "tie_word_embeddings"])]
        for path, needles in cases:
            before = cf.snapshot(tmp)
            rc, o, e, s = run(train_args(j("y"), tt.PATTERN_B, "train.max_steps=2",
                                         f"model.init_from={path}"))
            line = tt.expect_one_error(rc, o, e, "model.init_from", *needles, where=path)
            tt.check(cf.snapshot(tmp).keys() >= before.keys(), "an input was removed")
            print(line)
        rc, o, e, s = run(["export", j("lora"), "--out", "/proc/version"])
        tt.expect_one_error(rc, o, e, "--out", "/proc", where="export --out /proc/version")
        rc, o, e, s = run(["config", "model.dtype=bfloat16", tt.config(tt.PATTERN_B)])
        tt.expect_one_error(rc, o, e, "model.dtype=bfloat16", "before CONFIG", where="override")


# ---- 5. signals after the last step ----------------------------------------------------------


def case_signal_after_last_step():
    """SIGTERM while a finished run writes its export again (the export's writes slowed down):
    exit 143, the late-stop message, never 'saving a checkpoint at the end of this step'."""
    with tempfile.TemporaryDirectory(prefix="kktrain_safe_") as tmp:
        d = os.path.join(tmp, "run")
        tt.check(run(train_args(d, tt.PATTERN_A, "train.max_steps=2"))[0] == 0, "first run")
        env = {**os.environ, **faults(os.path.join(d, ".export.h5"), delay_ms=100)}
        err_path = os.path.join(tmp, "err")
        with open(err_path, "w") as err:
            p = subprocess.Popen([tt.KKTRAIN, *train_args(d, tt.PATTERN_A, "train.max_steps=2")],
                                 stdout=subprocess.DEVNULL, stderr=err, env=env)
        ck.wait_for(lambda: "nothing to train" in ck.read(err_path) or p.poll() is not None, 60,
                    "the 'nothing to train' line")
        p.send_signal(signal.SIGTERM)
        rc = p.wait(60)
        e = ck.read(err_path)
        tt.check(rc == 143 and "after the last step" in e and "end of this step" not in e,
                 f"rc {rc}\n{e}")
        print([ln for ln in e.splitlines() if "signal" in ln])


# ---- 6. memory limits ------------------------------------------------------------------------

BIG_MODEL = ["model.intermediate_size=400000"]  # ~22 GiB predicted


def case_memory_limits():
    """The up-front check uses RLIMIT_AS (ulimit -v) and a memory cgroup's limit (shared by the
    ranks of the node): exit 2 within seconds naming the limit; and the audit's gradient
    accumulators follow distributed.grad_sync. On GPU builds, whose check is against the device's
    free memory: the GPU runtime does not start under an 8 GiB RLIMIT_AS (an H200 with CUDA 13:
    cudaGetDeviceCount "out of memory"), which is one line naming the limit, exit 2."""
    with tempfile.TemporaryDirectory(prefix="kktrain_safe_") as tmp:
        args = ["train", tt.config(tt.DEFAULT), *BIG_MODEL, f"train.output_dir={tmp}/r",
                "train.max_steps=2"]

        def limit_as():
            resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))

        t0 = time.monotonic()
        p = subprocess.run([tt.KKTRAIN, *args], capture_output=True, text=True, timeout=60,
                           preexec_fn=limit_as)
        gpu = tt.device_build()
        line = tt.expect_one_error(p.returncode, p.stdout, p.stderr, "RLIMIT_AS (ulimit -v)",
                                   "did not start" if gpu else "exceeds", where="ulimit -v")
        tt.check(time.monotonic() - t0 < 10, "the refusal took too long")
        print(line)
        if gpu:
            print("cgroup check skipped: a GPU build checks the device's free memory")
        else:
            check_cgroup(args)
        check_grad_sync_memory()


def check_cgroup(args):
    if os.geteuid() != 0:
        print("cgroup check skipped: not root")
        return
    for base, limit_file in (("/sys/fs/cgroup/memory", "memory.limit_in_bytes"),
                             ("/sys/fs/cgroup", "memory.max")):
        cg = os.path.join(base, f"kktrain_test_{os.getpid()}")
        try:
            os.mkdir(cg)
            with open(os.path.join(cg, limit_file), "w") as f:
                f.write(str(1 << 30))
        except OSError as e:
            with contextlib.suppress(OSError):
                os.rmdir(cg)
            print(f"no memory cgroup at {base}: {e}")
            continue
        try:
            for np_ in (1, 2):
                launcher = [tt.KKTRAIN] if np_ == 1 else tm.mpirun(2) + [tt.KKTRAIN]
                shell = f"echo $$ > {cg}/cgroup.procs && exec \"$@\""
                rc, o, e, s = tm.launch(["sh", "-c", shell, "sh", *launcher,
                                         *args, *([] if np_ == 1 else ["data.global_batch_size=16"])])
                errors = [ln for ln in e.splitlines() if ": error: " in ln]
                tt.check(rc == 2 and len(errors) == 1 and limit_file in errors[0] and
                         (np_ == 1 or "shared by the 2 ranks" in errors[0]), f"rc {rc}\n{e}")
                print(f"{np_} rank(s) in a 1 GiB cgroup: {errors[0]}")
        finally:
            with contextlib.suppress(OSError):
                os.rmdir(cg)
        return
    print("cgroup check skipped: no writable memory cgroup")


def check_grad_sync_memory():
    """2 ranks, 4 micro-batches each: last_micro_batch keeps the whole gradient in the reduce
    dtype (fp32) on every rank; every_micro_batch nothing for fp32 shards (pattern B) and a
    shard-sized fp32 sum for bf16 ones (pattern A)."""
    def peak(cfg, *extra):
        rc, o, e, s = tm.launch([tt.KKTRAIN, "audit", tt.config(cfg), *ck.tiny(2, 4),
                                 "--world-size", "2", "--json", *extra])
        tt.check(rc == 0, e)
        import json
        doc = json.loads(o)
        return doc["totals"]["bytes_peak_predicted"], doc
    for cfg in (tt.PATTERN_B, tt.PATTERN_A):
        every, doc = peak(cfg)
        last, _ = peak(cfg, "distributed.grad_sync=last_micro_batch")
        n = doc["totals"]["trainable_elements"]
        shard = sum(math.ceil(p["shape"][0] / 2) * (math.prod(p["shape"]) // p["shape"][0])
                    for p in doc["parameters"]
                    if p["trainable"] and p["storage_dtype"] != "float32")
        want = 4 * n - (0 if cfg == tt.PATTERN_B else 4 * shard)
        tt.check(last - every == want, f"{cfg}: last_micro_batch - every_micro_batch = "
                 f"{last - every} bytes, expected {want}")
        print(f"{cfg}: grad_sync last_micro_batch predicts {last - every} bytes more")


if __name__ == "__main__":
    if len(sys.argv) == 6:
        FAIL_IO, STUCK_PEER = sys.argv[3], sys.argv[4]
        sys.argv = [sys.argv[0], sys.argv[1], sys.argv[2], sys.argv[5]]
    sys.exit(tt.run_case(globals(), __doc__))
