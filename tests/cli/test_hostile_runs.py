"""Run directories under hostile use (issue 33, "Files lost" and "Too late"): exports into the
checkpoint root, `latest` naming a damaged step directory, pruning beside a user's files, the
temporaries of killed exports, and everything the end of a run needs checked before its first
step.

usage: test_hostile_runs.py KKTRAIN INPUTS_DIR CASE  (ctest hostile.<CASE>, tests/cli/hostile_runs.cmake)

Every run is test_train's tiny model (~0.2 s a run). What each case checks:
- export_into_checkpoint_root: `kktrain export RUN --out` anywhere inside the checkpoint root (a
  step directory, the root itself, through a symbolic link) and a run whose own export or metrics
  file would lie in its checkpoint root (or whose checkpoint root is its export directory) are
  refused up front: exit 2, one line, nothing written; an export beside the root works.
- damaged_latest: `latest` names a step directory whose checkpoint.h5 is missing, a directory or
  a FIFO, with a user's file in it. With no other complete checkpoint the run refuses to start
  (exit 2, one line naming `latest`, the step and what it found, promptly: a FIFO is never
  opened), and so does `kktrain export RUN`; with checkpoint.resume=none it starts afresh and
  moves the directory aside whole; with an older complete checkpoint it resumes from that one
  and says why. The user's file survives.
- prune_foreign_files: pruning a step directory that holds a user's file removes only the
  checkpoint file, leaves the directory and the user's file, and warns naming both.
- stale_temporaries: temporaries of killed exports (.NAME.tmp.PID, files and directories) whose
  PID is not a live process are removed by the next export and at the start of the next run,
  with one line saying what; a live process's and names not of that exact pattern are kept; a
  previous export that a killed one had moved aside (.NAME.tmp.PID.old, nothing at NAME) is put
  back.
- preflight: an export the model cannot be written to (safetensors of a Mixtral without
  renormalized top-k weights), export.h5 a directory or a FIFO, an export target that is a
  dangling symbolic link, a metrics.jsonl that is a FIFO (a resumed run reads the earlier rows
  back), a checkpoint.dir that is a file: exit 2 before the first step (no
  metrics rows), within a few seconds.
"""

import os
import shutil
import subprocess
import sys
import tempfile

import test_checkpoint as ck
import test_checkpoint_files as cf
import test_mpi as tm
import test_train as tt
from test_train import check

PROMPT_S = 10  # every refusal here comes before any training: measured well under 1 s
O_RESUME = ["checkpoint.save_every=2", "train.val_every=0", "train.log_every=1",
            "checkpoint.resume=auto"]


def kk(args, timeout=60):
    """(rc, stdout, stderr, seconds) of one kktrain process (killed, failing, past timeout)."""
    return tm.launch([tt.KKTRAIN, *args], timeout=timeout)


def train(out_dir, *extra):
    return ["train", tt.config(tt.PATTERN_A), *ck.tiny(), *O_RESUME, f"train.output_dir={out_dir}",
            *extra]


def one_error(res, status, *needles, where=""):
    """Exactly one 'kktrain: error:' line holding every needle, exit `status`, promptly."""
    rc, out, err, s = res
    info = f"{where}\nrc={rc} ({s:.1f} s)\nstdout:\n{out[-2000:]}\nstderr:\n{err[-3000:]}"
    check(rc == status, f"expected exit {status}" + info)
    errors = [ln for ln in err.splitlines() if ln.startswith("kktrain") and ": error: " in ln]
    check(len(errors) == 1, f"expected one error line, got {len(errors)}" + info)
    for n in needles:
        check(n in errors[0], f"the error should mention {n!r}" + info)
    check(s < PROMPT_S, f"took {s:.1f} s" + info)
    return errors[0]


def ok(res, where=""):
    rc, out, err, s = res
    check(rc == 0, f"{where}: rc={rc}\nstderr:\n{err[-3000:]}")
    return err


def metrics_rows(run_dir):
    p = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(p):  # absent, or the FIFO a case put there (never opened)
        return 0
    with open(p) as f:
        return sum(1 for ln in f if ln.strip())


def dead_pid():
    """The PID of a process that has exited (and been reaped)."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


# ---- 1. outputs inside the checkpoint root -----------------------------------------------------


def case_export_into_checkpoint_root():
    with tempfile.TemporaryDirectory(prefix="kktrain_hostile_") as tmp:
        run = os.path.join(tmp, "run")
        ok(kk(train(run, "train.max_steps=2")), "first run")
        root = os.path.join(run, "checkpoints")
        os.symlink(root, os.path.join(tmp, "link"))
        before = cf.snapshot(run)
        for out, fmt in ((os.path.join(root, "step_00000002", "hf"), "safetensors"),
                         (os.path.join(root, "step_00000002", "w.h5"), "hdf5"),
                         (os.path.join(root, "hf"), "safetensors"),
                         (os.path.join(tmp, "link", "w.h5"), "hdf5")):
            line = one_error(kk(["export", run, "--out", out, "--format", fmt]), 2, "--out",
                             "checkpoint", where=out)
            check(not os.path.lexists(out), f"{out} was written")
            print(f"refused: {line}")
        check(cf.snapshot(run) == before, "the run directory changed")
        ok(kk(["export", run, "--out", os.path.join(run, "hf"), "--format", "safetensors"]),
           "an export beside the checkpoint root")
        # A run's own outputs in its checkpoint root: refused before anything is written.
        for name, out, extra, needle in (
                ("checkpoint.dir the export directory", "own1",
                 ["checkpoint.export_format=safetensors", "checkpoint.dir={out}/export"], "export"),
                ("checkpoint.dir the output directory", "own2", ["checkpoint.dir={out}"],
                 "export.h5"),
                ("output_dir inside a step directory", "r3/step_00000002/out",
                 ["checkpoint.dir={tmp}/r3"], "step_00000002")):
            out = os.path.join(tmp, out)
            args = train(out, "train.max_steps=2", *[e.format(out=out, tmp=tmp) for e in extra])
            line = one_error(kk(args), 2, "checkpoint", needle, where=name)
            check(not os.path.exists(out) or os.listdir(out) == [], f"{name}: wrote {out}")
            print(f"{name}: {line}")


# ---- 2. `latest` naming a damaged step directory -----------------------------------------------


def damage(step_dir, kind):
    """checkpoint.h5 of step_dir made missing, a directory or a FIFO; a user's file beside it."""
    f = os.path.join(step_dir, "checkpoint.h5")
    os.remove(f)
    if kind == "directory":
        os.mkdir(f)
    elif kind == "FIFO":
        os.mkfifo(f)
    with open(os.path.join(step_dir, "notes.txt"), "w") as n:
        n.write("a user's notes\n")


def notes_survive(run_dir, step):
    """The user's notes of step_dir, wherever the run put the directory (moved aside whole)."""
    for base, _, files in os.walk(os.path.join(run_dir, "checkpoints")):
        if os.path.basename(base) == f"step_{step:08d}" and "notes.txt" in files:
            with open(os.path.join(base, "notes.txt")) as f:
                return f.read() == "a user's notes\n"
    return False


def case_damaged_latest():
    with tempfile.TemporaryDirectory(prefix="kktrain_hostile_") as tmp:
        one = os.path.join(tmp, "one")  # step 2 only
        ok(kk(train(one, "train.max_steps=2")), "first run")
        two = os.path.join(tmp, "two")  # steps 2 and 4
        ok(kk(train(two, "train.max_steps=4", "checkpoint.keep_last=3")), "first run")
        found = {"missing": "missing", "directory": "directory", "FIFO": "FIFO"}
        for kind in ("missing", "directory", "FIFO"):
            # No other complete checkpoint: refused, nothing touched, promptly.
            d = os.path.join(tmp, f"one_{kind}")
            shutil.copytree(one, d, symlinks=True)
            damage(os.path.join(d, "checkpoints", "step_00000002"), kind)
            rows = metrics_rows(d)
            line = one_error(kk(train(d, "train.max_steps=4")), 2, "latest", "step_00000002",
                             found[kind], "checkpoint.resume=none", where=kind)
            check(notes_survive(d, 2) and metrics_rows(d) == rows, f"{kind}: files changed")
            print(f"{kind}, nothing else: {line}")
            # kktrain export of the run says the same.
            one_error(kk(["export", d, "--out", os.path.join(tmp, "x.h5")]), 2, "latest",
                      "step_00000002", found[kind], where=f"export, {kind}")
            # Starting afresh on purpose: the directory is moved aside whole, never deleted.
            err = ok(kk(train(d, "train.max_steps=4", "checkpoint.resume=none")), kind)
            check(notes_survive(d, 2), f"{kind}: the user's file is gone\n{err}")
            check(ck.latest(os.path.join(d, "checkpoints")) == "step_00000004", f"{kind}: latest")
            # An older complete checkpoint: resumed from, with a warning saying why.
            d = os.path.join(tmp, f"two_{kind}")
            shutil.copytree(two, d, symlinks=True)
            damage(os.path.join(d, "checkpoints", "step_00000004"), kind)
            # kktrain export of the run takes step 2 too, and says why.
            err = ok(kk(["export", d, "--out", os.path.join(tmp, "y.h5")]), f"export, {kind}")
            warn = [ln for ln in err.splitlines() if "warning" in ln and "step_00000004" in ln]
            check(len(warn) == 1 and found[kind] in warn[0] and "step_00000002" in warn[0],
                  f"export, {kind}: warnings {warn}\n{err}")
            res = kk(train(d, "train.max_steps=6", "checkpoint.keep_last=3"))
            err = ok(res, kind)
            warn = [ln for ln in err.splitlines() if "warning" in ln and "step_00000004" in ln]
            check(len(warn) == 1 and found[kind] in warn[0] and "step_00000002" in warn[0],
                  f"{kind}: warnings {warn}\n{err}")
            check("resumed from " + os.path.join(d, "checkpoints", "step_00000002") in err,
                  f"{kind}: not resumed from step 2\n{err}")
            check(notes_survive(d, 4), f"{kind}: the user's file is gone\n{err}")
            print(f"{kind}, step 2 intact ({res[3]:.1f} s): {warn[0]}")


# ---- 3. pruning beside a user's files ----------------------------------------------------------


def case_prune_foreign_files():
    with tempfile.TemporaryDirectory(prefix="kktrain_hostile_") as tmp:
        d = os.path.join(tmp, "run")
        ok(kk(train(d, "train.max_steps=2", "checkpoint.keep_last=1")), "first run")
        step2 = os.path.join(d, "checkpoints", "step_00000002")
        with open(os.path.join(step2, "notes.txt"), "w") as f:
            f.write("a user's notes\n")
        err = ok(kk(train(d, "train.max_steps=6", "checkpoint.keep_last=1")), "second run")
        warn = [ln for ln in err.splitlines() if "warning" in ln and "notes.txt" in ln]
        check(len(warn) == 1 and step2 in warn[0], f"warnings {warn}\n{err}")
        check(sorted(os.listdir(step2)) == ["notes.txt"], f"step 2 holds {os.listdir(step2)}")
        check(notes_survive(d, 2), "the user's file changed")
        root = os.path.join(d, "checkpoints")
        check(ck.latest(root) == "step_00000006" and not os.path.exists(
            os.path.join(root, "step_00000004")), f"pruning: {sorted(os.listdir(root))}")
        print(warn[0])


# ---- 4. temporaries of killed exports ----------------------------------------------------------


def make_temporaries(directory, name, directories=False):
    """A dead process's temporaries of `name` (kktrain's pattern), a live one's, and look-alikes;
    returns (the dead ones, the ones to keep)."""
    dead, live = dead_pid(), os.getpid()
    stale = [f".{name}.tmp.{dead}"] + ([f".{name}.tmp.{dead}.old"] if directories else [])
    keep = [f".{name}.tmp.{live}", f".{name}.tmp.{dead}x", f".{name}.tmp.{dead}.bak",
            f"{name}.tmp.{dead}", f".{name}.tmp.-{dead}", f".other.tmp.{dead}x"]
    for n in stale + keep:
        p = os.path.join(directory, n)
        if directories and n in stale:
            os.mkdir(p)
            p = os.path.join(p, "model.safetensors")
        with open(p, "wb") as f:
            f.write(b"\0" * 4096)
    return stale, keep


def check_cleaned(directory, stale, keep, err, where):
    names = set(os.listdir(directory))
    check(not names & set(stale), f"{where}: left {sorted(names & set(stale))}\n{err}")
    check(set(keep) <= names, f"{where}: removed {sorted(set(keep) - names)}\n{err}")
    lines = [ln for ln in err.splitlines() if "stale" in ln]
    check(len(lines) == 1 and all(n in lines[0] for n in stale), f"{where}: {lines}\n{err}")
    return lines[0]


def case_stale_temporaries():
    with tempfile.TemporaryDirectory(prefix="kktrain_hostile_") as tmp:
        run = os.path.join(tmp, "run")
        ok(kk(train(run, "train.max_steps=2")), "first run")
        out = os.path.join(tmp, "out")
        os.mkdir(out)
        stale, keep = make_temporaries(out, "w.h5")
        err = ok(kk(["export", run, "--out", os.path.join(out, "w.h5")]), "export")
        print(check_cleaned(out, stale, keep, err, "kktrain export (hdf5)"))
        hf = ["export", run, "--out", os.path.join(out, "hf"), "--format", "safetensors"]
        ok(kk(hf), "export")  # a previous export at hf: a dead one's .old is a stale copy
        stale, keep = make_temporaries(out, "hf", directories=True)
        print(check_cleaned(out, stale, keep, ok(kk(hf), "export"), "kktrain export (safetensors)"))
        # Nothing at hf2 but a dead one's .old: the previous export that stepped aside when it was
        # killed (file systems without an atomic swap) is put back, not removed.
        old = os.path.join(out, f".hf2.tmp.{dead_pid()}.old")
        shutil.copytree(os.path.join(out, "hf"), old)
        err = ok(kk(["export", run, "--out", os.path.join(out, "hf2"), "--format", "safetensors"]),
                 "export")
        back = [ln for ln in err.splitlines() if "put the previous version back from " + old in ln]
        check(len(back) == 1 and not os.path.exists(old), f"{old}:\n{err}")
        print(back[0])
        # The next run removes them when it starts, before its first step.
        stale, keep = make_temporaries(run, "export.h5")
        err = ok(kk(train(run, "train.max_steps=3")), "second run")
        line = check_cleaned(run, stale, keep, err, "train")
        first_step = next(i for i, ln in enumerate(err.splitlines()) if "step 3/3" in ln)
        check(err.splitlines().index(line) < first_step, f"removed after the first step\n{err}")
        print(line)


# ---- 5. what the end of a run needs, checked before its first step ----------------------------


def case_preflight():
    moe = ["model.moe.num_experts=4", "model.moe.top_k=2", "model.moe.intermediate_size=32"]
    with tempfile.TemporaryDirectory(prefix="kktrain_hostile_") as tmp:
        def export_dir(d):
            os.makedirs(os.path.join(d, "export.h5"))

        def export_fifo(d):
            os.mkfifo(os.path.join(d, "export.h5"))

        def dangling_h5(d):
            os.symlink(os.path.join(tmp, "nowhere", "x.h5"), os.path.join(d, "export.h5"))

        def dangling_dir(d):
            os.symlink(os.path.join(tmp, "nowhere", "hf"), os.path.join(d, "export"))

        def metrics_fifo(d):
            os.mkfifo(os.path.join(d, "metrics.jsonl"))

        def ckpt_file(d):
            with open(os.path.join(tmp, "ckfile"), "w") as f:
                f.write("not a directory\n")

        cases = [
            ("safetensors of a Mixtral without norm_topk_prob", None,
             [*moe, "model.moe.norm_topk_prob=false", "checkpoint.export_format=safetensors"],
             ["checkpoint.export_format", "norm_topk_prob"]),
            ("export.h5 a directory", export_dir, [], ["export.h5", "directory"]),
            ("export.h5 a FIFO", export_fifo, [], ["export.h5", "FIFO"]),
            ("export.h5 a dangling symbolic link", dangling_h5, [], ["export.h5", "nowhere"]),
            ("export/ a dangling symbolic link", dangling_dir,
             ["checkpoint.export_format=safetensors"], ["export", "nowhere"]),
            ("metrics.jsonl a FIFO", metrics_fifo, [], ["metrics.jsonl", "FIFO"]),
            ("checkpoint.dir a file", ckpt_file, ["checkpoint.dir={tmp}/ckfile"],
             ["checkpoint.dir", "ckfile"]),
        ]
        for name, prepare, extra, needles in cases:
            d = os.path.join(tmp, name.replace(" ", "_").replace("/", ""))
            os.makedirs(d)
            if prepare:
                prepare(d)
            args = train(d, "train.max_steps=4", "checkpoint.save_every=0",
                         *[e.format(tmp=tmp) for e in extra])
            line = one_error(kk(args, timeout=120), 2, *needles, where=name)
            check(metrics_rows(d) == 0, f"{name}: {metrics_rows(d)} metrics rows written")
            print(f"{name}: {line}")


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
