"""Training checkpoints end to end (io/checkpoint.hpp, apps/train/checkpointing.hpp): resume, rank
counts, kills during a save, SIGTERM/SIGINT. Damaged files, export, init_from and inspect are in
test_checkpoint_files.py, on the helpers of this file and of test_train.py.

usage: test_checkpoint.py KKTRAIN INPUTS_DIR CASE     (one ctest ckpt.<CASE> each; exit 77: skip)

What is checked, and what was measured (tiny model of test_train.py unless said):
- resume_exact_*: N steps straight vs N/2 + a fresh process resuming for N/2: bit-identical
  metrics (all but tt.TIMING_KEYS) and every dataset of the two final checkpoints bit-identical,
  for patterns A, B, risky, SGD, FusedAdam with bf16 moments, FusedAdam with an fp32 master and
  keep_in_fp32 norms, LoRA; 1 and 2 ranks; with 2 micro-batches per rank.
- resume_other_rank_count: a 2-rank checkpoint resumed on 1 and 3 ranks with max_steps = its step
  saves again a bit-identical file (full logical tensors); continuing, fp32 compute and
  output_dtype null leave only summation order: losses within REL_TOL of the 2-rank run.
- kill_during_save: SIGKILL (the whole mpirun session on 2 ranks) at random moments of a loop of
  save_every=1 runs; `latest` always names a complete checkpoint that loads.
- keep_last_bound: at every moment of a sequence of saves (replayed from inotify), at least
  min(keep_last, saves so far) complete step directories and at most keep_last + 1; a step
  directory appears complete (renamed) and an old one goes only while more than keep_last exist;
  a save over the keep_last + 1 directories an interrupted pruning left adds none beyond them.
- kill_during_resave: saving a step that exists (a run resumed from an earlier step of its own
  root) replaces the directory `latest` names; at no moment may `latest` name an incomplete one.
- signals: SIGTERM / SIGINT stop at a step boundary with a checkpoint (143 / 130), resuming gives
  the uninterrupted run's metrics bit for bit, a second signal exits at once saving nothing.
  Under mpirun the ranks are signalled themselves: Open MPI 4.1's mpirun, when signalled, sends
  SIGTERM to the ranks (SIGINT arrives as SIGTERM), SIGKILLs them odls_base_sigkill_timeout = 1 s
  later and exits 1 instead of the ranks' 143 / 130. Measured with a 63M-parameter model on 2
  ranks (a 2.6 s save): SIGTERM to mpirun left no checkpoint at all; SIGTERM to both ranks saved
  the step and exited 143.
"""

import ctypes
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

import test_train as tt
from test_lora import PEFT

MPIRUN = shutil.which("mpirun")
SGD = "optimizer={_target_: torch.optim.SGD, lr: 0.01, momentum: 0.9}"
FP32_COMPUTE = ["distributed.mp_policy.param_dtype=float32",
                "distributed.mp_policy.output_dtype=null"]


def sched(n):
    """An lr schedule that does not depend on max_steps (a first half runs with max_steps N/2)."""
    return ["lr_scheduler.lr_warmup_steps=2", f"lr_scheduler.lr_decay_steps={n}"]


# ---- running kktrain (under mpirun for np_ > 1) ---------------------------------------------


def command(args, np_=1):
    if np_ == 1:
        return [tt.KKTRAIN, *args]
    if not MPIRUN:
        raise tt.Skip("mpirun is not installed")
    return [MPIRUN, "-np", str(np_), "--oversubscribe", "--allow-run-as-root", tt.KKTRAIN, *args]


def session_pids(sid, name=None):
    """Live processes of session `sid` (mpirun and its ranks; ranks get their own process group
    but stay in the session), optionally only those whose program path ends with `name`."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{d}/cmdline", "rb") as f:
                prog = f.read().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z" and (name is None or prog.endswith(name)):
            pids.append(int(d))
    return pids


def signal_pids(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def kill_session(p):
    """SIGKILL every process of p's session (p was started with start_new_session) and reap p."""
    for _ in range(200):
        pids = session_pids(p.pid)
        if not pids:
            break
        signal_pids(pids, signal.SIGKILL)
        time.sleep(0.01)
    p.wait()


def start(args, np_, err_path):
    err = open(err_path, "w")
    p = subprocess.Popen(command(args, np_), stdout=subprocess.DEVNULL, stderr=err,
                         start_new_session=True)
    err.close()
    return p


def launch(args, np_=1, timeout=120):
    p = subprocess.Popen(command(args, np_), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_session(p)
        p.communicate()
        raise tt.Failure(f"timed out after {timeout} s: {' '.join(command(args, np_))}")
    return p.returncode, out, tt.without_launch_warnings(err)


def wait_for(pred, timeout, what):
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise tt.Failure(f"timed out ({timeout} s) waiting for {what}")
        time.sleep(0.005)


def read(path):
    """A file as written so far ("" while missing); of a run's stderr, the lines the checks read
    (without the launch warnings, tt.LAUNCH_WARNING)."""
    try:
        with open(path) as f:
            return tt.without_launch_warnings(f.read())
    except OSError:
        return ""


class Run(tt.Run):
    """tt.Run (which starts kktrain through tt.run) on np_ ranks, with a timeout."""

    def __init__(self, cfg, out_dir, overrides, np_=1, timeout=120):
        saved = tt.run
        tt.run = lambda args: launch(args, np_, timeout)
        try:
            super().__init__(cfg, out_dir, overrides)
        finally:
            tt.run = saved

    def ok(self, rows=True):
        tt.check(self.rc == 0, "expected exit 0" + self.where)
        tt.check(self.out == "", "train must keep stdout empty" + self.where)
        tt.check(self.rows or not rows, "no metrics rows" + self.where)
        return self


def tiny(np_=1, accum=1):
    """test_train's tiny model; 2-sequence micro-batches, `accum` of them per rank and step."""
    return [*tt.TINY, f"data.global_batch_size={2 * np_ * accum}"]


def train(out_dir, cfg, *overrides, np_=1, accum=1, timeout=120):
    return Run(cfg, out_dir, [*tiny(np_, accum), *overrides], np_, timeout)


def ckpt(run_dir, step):
    return os.path.join(run_dir, "checkpoints", f"step_{step:08d}", "checkpoint.h5")


def latest(root):
    text = read(os.path.join(root, "latest"))
    return text.strip() if text else None


# ---- reading HDF5 files as stored -------------------------------------------------------------


def raw(ds):
    """A dataset's elements as stored (bf16 as its uint16 bits; no conversion)."""
    t = ds.id.get_type()
    a = np.empty(ds.shape, {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[t.get_size()])
    ds.id.read(h5py.h5s.ALL, h5py.h5s.ALL, a, mtype=t)
    return a


def attrs(obj):
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in obj.attrs.items()}


def load_h5(path):
    """(root attributes, {dataset: (type description, raw elements, attributes)})."""
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                t = obj.id.get_type()
                kind = (t.get_class(), t.get_size(),
                        t.get_fields() if isinstance(t, h5py.h5t.TypeFloatID) else None)
                out["/" + name] = (kind, raw(obj), attrs(obj))
        f.visititems(visit)
        return attrs(f), out


def compare_files(a, b, what, skip_root=("config", "world_size")):
    """Every dataset of checkpoint a and b bit-identical (type, shape, elements, attributes), and
    the root attributes but `skip_root` equal."""
    ra, da = load_h5(a)
    rb, db = load_h5(b)
    tt.check(sorted(da) == sorted(db), f"{what}: datasets differ: {sorted(set(da) ^ set(db))}")
    for n in da:
        (ka, xa, aa), (kb, xb, ab) = da[n], db[n]
        tt.check(ka == kb and xa.shape == xb.shape, f"{what}: {n}: type/shape {ka} {xa.shape} vs "
                 f"{kb} {xb.shape}")
        diff = int(np.count_nonzero(xa != xb))
        tt.check(diff == 0, f"{what}: {n}: {diff} of {xa.size} elements differ")
        tt.check(aa == ab, f"{what}: {n}: attributes {aa} vs {ab}")
    for k in set(ra) | set(rb):
        if k not in skip_root:
            tt.check(str(ra.get(k)) == str(rb.get(k)), f"{what}: root attribute {k}: "
                     f"{ra.get(k)!r} vs {rb.get(k)!r}")
    return ra, rb


# ---- 1. resume is exact -----------------------------------------------------------------------

N = 8
VARIANTS = [
    ("pattern_a", tt.PATTERN_A, [], 1),
    ("pattern_b", tt.PATTERN_B, [], 1),
    ("risky", tt.RISKY, [], 1),
    ("sgd", tt.DEFAULT, [SGD], 1),
    ("fused_bf16_moments", tt.PATTERN_A,
     ["optimizer.exp_avg_dtype=torch.bfloat16", "optimizer.exp_avg_sq_dtype=torch.bfloat16"], 1),
    ("fused_fp32_master", tt.PATTERN_A,
     ["optimizer.store_param_remainders=false", 'model.keep_in_fp32=["*norm*"]'], 1),
    ("lora", tt.RISKY, [PEFT], 1),
    ("pattern_a_accum2", tt.PATTERN_A, [], 2),
    ("lora_accum2", tt.RISKY, [PEFT], 2),
]


def resume_exact(np_):
    with tempfile.TemporaryDirectory(prefix="kktrain_ckpt_") as tmp:
        for name, cfg, extra, accum in VARIANTS:
            what = f"{name} on {np_} rank(s)"
            o = ["train.log_every=1", "train.val_every=2", "checkpoint.save_every=0", *sched(N),
                 *extra]
            a, b = os.path.join(tmp, name + "_straight"), os.path.join(tmp, name + "_split")
            straight = train(a, cfg, *o, f"train.max_steps={N}", np_=np_, accum=accum).ok()
            train(b, cfg, *o, f"train.max_steps={N // 2}", np_=np_, accum=accum).ok()
            split = train(b, cfg, *o, f"train.max_steps={N}", "checkpoint.resume=auto", np_=np_,
                          accum=accum).ok()
            tt.check(f"resumed from {ckpt(b, N // 2)} at step {N // 2}" in split.err,
                     f"{what}: no 'resumed' line" + split.where)
            # The one setting that differs from the saved config is named (resume is ignored).
            tt.check(split.err.count(f"resumed with 1 setting changed since the checkpoint: "
                                     f"train.max_steps: {N // 2} -> {N}\n") == 1 and
                     split.err.count("changed since the checkpoint") == 1,
                     f"{what}: changed settings" + split.where)
            tt.check([r["step"] for r in split.train_rows()] == list(range(1, N + 1)) and
                     [r["step"] for r in split.val_rows()] == [2, 4, 6, 8],
                     f"{what}: rows {split.rows}")
            tt.compare_runs(straight, split, what + ": metrics, straight vs resumed")
            compare_files(ckpt(a, N), ckpt(b, N), what + ": final checkpoints", ("config",))
            print(f"{what}: {len(split.rows)} metrics rows and {len(load_h5(ckpt(a, N))[1])} "
                  f"datasets bit-identical")


def case_resume_exact_1rank():
    resume_exact(1)


def case_resume_exact_2ranks():
    resume_exact(2)


# ---- 2. another rank count -------------------------------------------------------------------

# Relative tolerance of loss / grad_norm / val_loss between 1, 2 and 3 ranks over the 6 steps
# after the resume. fp32 compute and output_dtype null leave only the order of the fp32 gradient
# sums (reduce-scatter over ranks vs micro-batch accumulation), a few fp32 roundings (6e-8 each)
# that the optimizer steps carry on. Measured: 4.9e-8 at most (the printed line); 1e-6 is 20x that.
REL_TOL = 1e-6


def case_resume_other_rank_count():
    k, end = 4, 10
    with tempfile.TemporaryDirectory(prefix="kktrain_ckpt_") as tmp:
        for cfg, extra, go_on in ((tt.PATTERN_B, FP32_COMPUTE, True), (tt.PATTERN_A, [], False)):
            o = ["train.log_every=1", "train.val_every=2", "checkpoint.save_every=0", *sched(end),
                 *extra, "data.micro_batch_size=1", "data.global_batch_size=6"]
            d = {n: os.path.join(tmp, f"{cfg}_np{n}") for n in (1, 2, 3)}
            train(d[2], cfg, *o, f"train.max_steps={k}", np_=2).ok()
            src = os.path.dirname(ckpt(d[2], k))
            for n in (1, 3):
                r = train(d[n], cfg, *o, f"train.max_steps={k}", f"checkpoint.resume={src}",
                          np_=n).ok(rows=False)
                tt.check(f"at step {k}" in r.err and f"checkpoint: step {k} -> " in r.err,
                         f"{cfg}: resumed on {n} ranks without saving step {k}" + r.where)
                root, root_n = compare_files(ckpt(d[2], k), ckpt(d[n], k),
                                             f"{cfg}: 2-rank checkpoint saved again on {n} ranks")
                tt.check(root["world_size"] == 2 and root_n["world_size"] == n,
                         f"world_size {root['world_size']} / {root_n['world_size']}")
            if not go_on:
                continue
            runs = {n: train(d[n], cfg, *o, f"train.max_steps={end}", "checkpoint.resume=auto",
                             np_=n).ok() for n in (1, 2, 3)}
            worst = 0.0
            for n in (1, 3):
                a = [r for r in runs[2].rows if r["step"] > k]
                b = [r for r in runs[n].rows if r["step"] > k]
                tt.check([r["step"] for r in a] == [r["step"] for r in b],
                         f"{n} vs 2 ranks: rows {b} vs {a}")
                for x, y in zip(a, b):
                    for key in ("loss", "grad_norm", "val_loss", "lr"):
                        if key in x:
                            rel = abs(x[key] - y[key]) / abs(x[key])
                            worst = max(worst, rel)
                            tt.check(rel <= REL_TOL, f"step {x['step']} {key}: 2 ranks {x[key]!r}, "
                                     f"{n} ranks {y[key]!r}: relative {rel:.3g} > {REL_TOL}")
            print(f"{cfg}: steps {k + 1}..{end} on 1 and 3 ranks vs 2 ranks: max relative "
                  f"difference {worst:.3g} (tolerance {REL_TOL})")


# ---- 3. SIGKILL during saves ------------------------------------------------------------------

# A larger model (1.2M parameters, ~15 MB checkpoints) whose saves (~80 ms) dominate its steps.
BIG = ["model.hidden_size=256", "model.intermediate_size=512", "model.num_layers=2",
       "data.seq_len=8", "data.micro_batch_size=1", "train.val_every=0", "train.log_every=1",
       "checkpoint.save_every=1", "checkpoint.keep_last=2", "train.max_steps=100000",
       "checkpoint.resume=auto"]
KEEP = 2


def step_dirs(root):
    return sorted(int(n[5:]) for n in os.listdir(root) if re.fullmatch(r"step_\d{8}", n))


def state(root):
    """(step directories, latest, leftovers of a killed save: .tmp_ directories and the
    temporary of `latest`, by name and inode)."""
    if not os.path.isdir(root):
        return [], None, set()
    left = {(n, os.stat(os.path.join(root, n)).st_ino) for n in os.listdir(root)
            if n.startswith(".tmp_") or n.startswith(".latest.tmp.")}
    return step_dirs(root), latest(root), left


def written(root, old):
    """Size of the checkpoint file of a save in progress (a .tmp_ directory not in `old`)."""
    size = 0
    for e in os.scandir(root):
        if e.name.startswith(".tmp_") and (e.name, e.inode()) not in old:
            try:
                size = max(size, os.path.getsize(os.path.join(e.path, "checkpoint.h5")))
            except OSError:
                pass
    return size


def save_phase(before, after):
    """Where in a save the kill landed, from what it left behind (None: not inside a save, or
    before the .tmp_ directory was made)."""
    (s0, _, left0), (s1, name, left1) = before, after
    new = left1 - left0
    if any(n.startswith(".tmp_") for n, _ in new):
        return "writing"  # .tmp_step_N/ not yet renamed (HDF5 write, fsync)
    if new:
        return "latest"  # latest.tmp written, not yet renamed
    step = int(name[5:]) if name else -1
    if s1 != s0 and s1 and s1[-1] > step:
        return "renamed"  # step_N/ in place, latest not yet updated
    if s1 != s0 and len(s1) > KEEP:
        return "pruning"  # latest updated, older steps not yet removed
    return None


def kill_trial(run_dir, np_, rng, prev, phases):
    """One run killed at a random moment, then checked; returns the step `latest` names."""
    root = os.path.join(run_dir, "checkpoints")
    before = state(root)
    err_path = os.path.join(run_dir + ".err")
    args = ["train", tt.config(tt.PATTERN_A), *tiny(np_), *BIG,
            f"data.global_batch_size={np_}", f"train.output_dir={run_dir}"]
    # Every other trial waits for a save's file to reach a full checkpoint's size: then the run
    # is in the last ~15 ms of the save (HDF5 close, fsync, renames, latest, pruning).
    full = os.path.getsize(os.path.join(root, before[1], "checkpoint.h5")) if before[1] else 0
    late = full and rng.random() < 0.5
    p = start(args, np_, err_path)
    try:
        wait_for(lambda: "kktrain: step " in read(err_path) or p.poll() is not None, 60,
                 "the first training step")
        if not before[1]:  # a first checkpoint, else every trial may die before one
            wait_for(lambda: latest(root) or p.poll() is not None, 60, "a first checkpoint")
        if late:
            wait_for(lambda: written(root, before[2]) >= full or p.poll() is not None, 60,
                     "a save's file at full size")
            time.sleep(rng.uniform(0.0, 0.01))
        else:
            time.sleep(rng.uniform(0.0, 0.4))
        tt.check(p.poll() is None, "the run ended before it was killed:\n" + read(err_path))
    finally:
        kill_session(p)
    after = state(root)
    steps, name, _ = after
    phase = save_phase(before, after)
    phases[phase] = phases.get(phase, 0) + 1
    tt.check(len(steps) <= KEEP + 1, f"{len(steps)} step directories > keep_last + 1: {steps}")
    if name is None:
        tt.check(prev is None and len(steps) <= 1, f"no latest, steps {steps}")
        return None
    named = int(name[5:]) if re.fullmatch(r"step_\d{8}", name) else None
    tt.check(named is not None, f"latest names {name!r}")
    tt.check(os.path.isfile(os.path.join(root, name, "checkpoint.h5")),
             f"latest names {name}, which is not a complete step directory: {os.listdir(root)}")
    # A step directory is complete once it has its name (the save renames it into place), so the
    # newest one is the checkpoint to continue from; `latest` names it, or the one before when
    # the kill came between the rename and the pointer's update.
    step = steps[-1]
    tt.check(step >= named, f"latest names {name}, newer than every step directory {steps}")
    name = f"step_{step:08d}"
    tt.check(prev is None or step >= prev, f"the newest checkpoint went back from step {prev} "
             f"to {step}")
    rc, out, err = launch(["inspect", root])
    tt.check(rc == 0 and f"  step: {step}\n" in out, f"inspect {root}: rc {rc}\n{err}")
    args = ["train", tt.config(tt.PATTERN_A), *tiny(np_), *BIG, f"data.global_batch_size={np_}",
            f"train.max_steps={step}", f"train.output_dir={run_dir}"]
    rc, out, err = launch(args, np_)
    tt.check(rc == 0 and f"resumed from {os.path.join(root, name, 'checkpoint.h5')} at step "
             f"{step}" in err, f"resume at latest {name} (kill phase {phase}): rc {rc}\n{err}")
    return step


def case_kill_during_save():
    seed = int(os.environ.get("KKTRAIN_KILL_SEED", time.time_ns() % 100000))
    rng = random.Random(seed)
    plan = [(1, 20)] + ([(2, 6)] if MPIRUN else [])
    with tempfile.TemporaryDirectory(prefix="kktrain_ckpt_") as tmp:
        for np_, trials in plan:
            run_dir, prev, phases = os.path.join(tmp, f"np{np_}"), None, {}
            for t in range(trials):
                try:
                    prev = kill_trial(run_dir, np_, rng, prev, phases)
                except tt.Failure as e:
                    raise tt.Failure(f"{np_} rank(s), trial {t + 1} "
                                     f"(KKTRAIN_KILL_SEED={seed}): {e}")
            inside = trials - phases.get(None, 0)
            print(f"{np_} rank(s): {trials} kills, {inside} inside a save by what they left "
                  f"({', '.join(f'{k}: {v}' for k, v in phases.items() if k)}); latest ends at "
                  f"step {prev} (KKTRAIN_KILL_SEED={seed})")
            tt.check(prev is not None, "no trial got as far as a checkpoint")
            # A run to its end clears the debris and keeps exactly the keep_last newest steps.
            end = prev + 3
            rc, out, err = launch(["train", tt.config(tt.PATTERN_A), *tiny(np_), *BIG,
                                   f"data.global_batch_size={np_}", f"train.max_steps={end}",
                                   f"train.output_dir={run_dir}"], np_)
            root = os.path.join(run_dir, "checkpoints")
            tt.check(rc == 0 and state(root) == ([end - 1, end], f"step_{end:08d}", set()),
                     f"after a complete run to step {end}: rc {rc}, {sorted(os.listdir(root))}")


def case_kill_during_resave():
    """A run resumed from an earlier step of its own root (rolling back) moves the later
    checkpoints to earlier_1/ (never replacing or pruning them) and saves its own. A kill at any
    moment must leave `latest` naming a complete checkpoint. The old directory gets 20000 extra
    files (as on a slow file system); the run is watched and killed at the first moment `latest`
    names no complete checkpoint, if there is one; the moved checkpoint keeps every file."""
    with tempfile.TemporaryDirectory(prefix="kktrain_ckpt_") as tmp:
        d = os.path.join(tmp, "run")
        root = os.path.join(d, "checkpoints")
        o = ["checkpoint.save_every=2", "train.max_steps=4", "train.val_every=0"]
        train(d, tt.PATTERN_A, *o).ok()
        old = os.path.dirname(ckpt(d, 4))
        for i in range(20000):
            open(os.path.join(old, f"pad_{i:05d}"), "w").close()

        def complete():
            # The pointer may move on between reading it and looking at what it named (it is
            # rewritten before the directory it named moves): only a look during which it stayed
            # the same counts.
            name = latest(root)
            ok = bool(name) and os.path.isfile(os.path.join(root, name, "checkpoint.h5"))
            return ok or latest(root) != name

        p = start(["train", tt.config(tt.PATTERN_A), *tiny(), *o, f"train.output_dir={d}",
                   f"checkpoint.resume={os.path.dirname(ckpt(d, 2))}"], 1, d + ".err")
        seen, polls = None, 0
        try:
            while p.poll() is None and seen is None:
                polls += 1
                if not complete():
                    seen = (f"latest names {latest(root)!r}; the root holds "
                            f"{sorted(os.listdir(root))}")
        finally:
            kill_session(p)
        rc, out, err = launch(["inspect", root])
        tt.check(seen is None and rc == 0, f"while step 4 was saved again, {seen}; killed then, "
                 f"the checkpoint root does not load: inspect rc {rc}: {err}")
        moved = os.path.join(root, "earlier_1", "step_00000004")
        tt.check(p.returncode == 0 and "checkpoint: step 4 -> " in read(d + ".err") and
                 latest(root) == "step_00000004" and os.listdir(old) == ["checkpoint.h5"] and
                 len(os.listdir(moved)) == 20001 and "moved to" in read(d + ".err"),
                 f"the run did not move the later step 4 aside and save its own: rc "
                 f"{p.returncode}\n{read(d + '.err')}")
        print(f"step 4 saved again after the earlier one was moved aside: `latest` named a complete "
              f"checkpoint at each of {polls} looks")


class DirEvents:
    """The kernel's record (inotify) of entries made and removed in one directory, in order: a
    window of a millisecond cannot be missed, however loaded the machine."""

    MADE, GONE = 0x100 | 0x80, 0x200 | 0x40  # IN_CREATE | IN_MOVED_TO, IN_DELETE | IN_MOVED_FROM
    MOVED_TO = 0x80

    def __init__(self, path):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK)
        tt.check(self.fd >= 0 and self.libc.inotify_add_watch(
            self.fd, path.encode(), self.MADE | self.GONE) >= 0, f"inotify on {path}")

    def read(self):
        data = b""
        while True:
            try:
                data += os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
        os.close(self.fd)
        out = []
        while data:
            _, mask, _, n = struct.unpack("iIII", data[:16])
            out.append((mask, data[16:16 + n].rstrip(b"\0").decode()))
            data = data[16 + n:]
        return out


def replay(events, steps, keep_last):
    """Replays the step directories' appearances and removals (DirEvents) from the set `steps`
    present before. Returns (most present at any moment, the changes as "+N" / "-N", the bound
    violations). The bounds, after every event:
    - at least min(keep_last, saves so far) complete step directories (a directory named step_N
      is complete: a save writes .tmp_step_N and renames it), so no moment of a save, however
      short, leaves fewer checkpoints than keep_last asks for;
    - a step directory appears by a rename (IN_MOVED_TO), complete, never made in place;
    - one is removed only while more than keep_last are present: an old checkpoint goes only
      once the new one is complete (or as the surplus an interrupted pruning left)."""
    steps, saves = set(steps), len(steps)
    most, seen, bad = len(steps), [], []
    for mask, name in events:
        if not re.fullmatch(r"step_\d{8}", name):
            continue
        made = bool(mask & DirEvents.MADE)
        change = ("+" if made else "-") + name[5:].lstrip("0")
        if made:
            saves += name not in steps
            steps.add(name)
            if not mask & DirEvents.MOVED_TO:
                bad.append(f"{change} was made in place, not renamed complete")
        else:
            if len(steps) <= keep_last:
                bad.append(f"{change} with only {len(steps)} step directories present "
                           f"(keep_last {keep_last}): removed before a newer one was complete")
            steps.discard(name)
        seen.append(change)
        most = max(most, len(steps))
        if len(steps) < min(keep_last, saves):
            bad.append(f"after {change}: {len(steps)} complete step directories, fewer than "
                       f"min(keep_last {keep_last}, {saves} saves)")
    return most, seen, bad, steps


def violations(bad, seen):
    more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
    return "; ".join(bad[:3]) + more + f"; changes {' '.join(seen)}"


def case_keep_last_bound():
    """Pruning keeps the number of complete step directories within [min(keep_last, saves so
    far), keep_last + 1] at every moment, saves in progress included, replayed from the kernel's
    record of the root's changes (inotify: no window is too short to be seen, however loaded the
    machine). 1. A fresh root, keep_last=2, a save every step for 6 steps: never fewer than
    min(2, saves) (a pruning before the new directory is complete would leave 1), never more than
    3. 2. A save killed after its rename and before its pruning leaves keep_last + 1 step
    directories; the next save must not add one more on top (else repeated kills at the end of
    saves pile them up: ckpt.kill_during_save saw [8, 9, 10, 11] with keep_last 2). Such a root
    is made by a keep_last=3 run; a keep_last=2 run then saves one step: never more than
    keep_last + 1 step directories, never fewer than keep_last."""
    with tempfile.TemporaryDirectory(prefix="kktrain_ckpt_") as tmp:
        d = os.path.join(tmp, "fresh")
        root = os.path.join(d, "checkpoints")
        os.makedirs(root)
        events = DirEvents(root)
        r = train(d, tt.PATTERN_A, "checkpoint.save_every=1", "train.val_every=0",
                  "train.max_steps=6", f"checkpoint.keep_last={KEEP}").ok()
        most, seen, bad, steps = replay(events.read(), set(), KEEP)
        print(f"a save every step, keep_last {KEEP}: changes {' '.join(seen)}")
        tt.check(not bad, violations(bad, seen) + r.where)
        tt.check(most <= KEEP + 1, f"up to {most} step directories (changes {' '.join(seen)})")
        tt.check(steps == {f"step_{s:08d}" for s in step_dirs(root)} ==
                 {"step_00000005", "step_00000006"},
                 f"replayed {sorted(steps)}, listed {os.listdir(root)}" + r.where)

        d = os.path.join(tmp, "run")
        root = os.path.join(d, "checkpoints")
        o = ["checkpoint.save_every=2", "train.val_every=0", "checkpoint.resume=auto"]
        train(d, tt.PATTERN_A, *o, "train.max_steps=6", "checkpoint.keep_last=3").ok()
        steps = {f"step_{s:08d}" for s in step_dirs(root)}
        tt.check(len(steps) == 3, f"keep_last=3: {os.listdir(root)}")
        events = DirEvents(root)
        r = train(d, tt.PATTERN_A, *o, "train.max_steps=8", "checkpoint.keep_last=2").ok()
        most, seen, bad, steps = replay(events.read(), steps, KEEP)
        tt.check(not bad, violations(bad, seen) + r.where)
        tt.check(steps == {f"step_{s:08d}" for s in step_dirs(root)} ==
                 {"step_00000006", "step_00000008"},
                 f"replayed {sorted(steps)}, listed {os.listdir(root)}")
        tt.check(most <= KEEP + 1, f"up to {most} step directories while step 8 was saved with "
                 f"keep_last 2 (changes {' '.join(seen)})" + r.where)
        print(f"saving over keep_last + 1 steps: at most {most} step directories "
              f"(changes {' '.join(seen)})")


# ---- 5. SIGTERM / SIGINT ----------------------------------------------------------------------

STEPS = 200
# 4 micro-batches per rank and step: the run must still be going when the test has seen step 5
# and signalled it, also on an oversubscribed machine (2 ranks x 4 OpenMP threads on 2 cores).
SIG_ACCUM = 4
SIG_O = ["train.log_every=1", "train.val_every=50", "checkpoint.save_every=0",
         "checkpoint.resume=auto", *sched(STEPS), f"train.max_steps={STEPS}"]


LONGER = 100  # an interrupted run's max_steps, in STEPS


def logged_step(run_dir):
    """The last training step in <run_dir>/metrics.jsonl (0 before the first row)."""
    last = 0
    for line in read(os.path.join(run_dir, "metrics.jsonl")).splitlines():
        try:
            row = json.loads(line)
        except ValueError:  # a row being written
            continue
        if "loss" in row:
            last = max(last, row["step"])
    return last


def interrupted(run_dir, np_, sig, after, twice=False):
    """Starts a run, sends `sig` to the ranks themselves once step `after` is logged (`twice`:
    again once rank 0 announced the stop: signals sent together would merge into one delivery);
    returns (exit status, stderr, seconds from the last signal to the exit)."""
    err_path = run_dir + ".err"
    # Twice: 1024 micro-batches per step (~0.3 s idle, ~1 s when the machine is oversubscribed;
    # not part of what a checkpoint must match) leave the second signal time to arrive before
    # the step ends (256 were not enough with 2 ranks x 2 OpenMP threads on 2 cores once the
    # model's kernels got faster; 64 not with 4 threads).
    slow = [f"data.global_batch_size={2048 * np_}"] if twice else []
    # The run must outlast the test's reaction: 200 tiny steps take under 4 s, and a tiny step
    # with OpenMP threads that sleep instead of spinning can take 0.3 ms (parallel/threads.hpp).
    # A run 100x as long (the schedule is fixed by sched(STEPS)) is stopped long before its end;
    # the run that resumes it sets its own train.max_steps.
    longer = [f"train.max_steps={LONGER * STEPS}"]
    p = start(["train", tt.config(tt.PATTERN_A), *tiny(np_, SIG_ACCUM), *SIG_O, *slow, *longer,
               f"train.output_dir={run_dir}"], np_, err_path)
    try:
        # Generous: a slow (`twice`) step with 2 ranks x 2 OpenMP threads on 2 cores, beside
        # Open MPI's busy polling, has taken over 30 s.
        # Progress is read from rank 0's metrics.jsonl, which it writes itself: mpirun forwards
        # the ranks' stderr late when the ranks keep the cores busy (measured: step 5's line
        # reached the file when rank 0 was at step 1871, 0.5 s later).
        wait_for(lambda: logged_step(run_dir) >= after or p.poll() is not None, 180,
                 f"step {after}")
        tt.check(p.poll() is None, f"the run ended before step {after}:\n{read(err_path)}")
        pids = [p.pid] if np_ == 1 else session_pids(p.pid, "kktrain")
        tt.check(len(pids) == np_, f"rank processes {pids}")
        signal_pids(pids, sig)
        if twice:
            wait_for(lambda: "stop requested" in read(err_path) or p.poll() is not None, 60,
                     "the stop announcement")
            time.sleep(0.01)
            signal_pids(pids, sig)
        t0 = time.monotonic()
        p.wait(timeout=60)
        return p.returncode, read(err_path), time.monotonic() - t0
    finally:
        kill_session(p)


def signals(np_):
    with tempfile.TemporaryDirectory(prefix="kktrain_ckpt_") as tmp:
        for sig in (signal.SIGTERM, signal.SIGINT):
            d = os.path.join(tmp, sig.name)
            root = os.path.join(d, "checkpoints")
            rc, err, _ = interrupted(d, np_, sig, 5)
            m = re.search(rf"stopped by signal {int(sig)} after step (\d+);", err)
            tt.check(rc == 128 + sig and m is not None and "stop requested: saving" in err,
                     f"{sig.name}: rc {rc}\n{err[-2000:]}")
            s = int(m.group(1))
            tt.check(5 <= s < LONGER * STEPS and latest(root) == f"step_{s:08d}" and
                     os.path.isfile(ckpt(d, s)) and f"checkpoint: step {s} -> " in err,
                     f"{sig.name}: no checkpoint of step {s}: {os.listdir(root)}\n{err[-2000:]}")
            # A second signal: exit at once with the first one's status, no new checkpoint.
            before = (step_dirs(root), latest(root))
            # The resumed run's first step (one slow step to wait for, not two).
            rc2, err2, dt = interrupted(d, np_, sig, s + 1, twice=True)
            tt.check(rc2 == 128 + sig and "stopped by signal" not in err2 and
                     "checkpoint: step" not in err2 and (step_dirs(root), latest(root)) == before,
                     f"{sig.name} twice: rc {rc2}, {os.listdir(root)} vs {before}\n"
                     f"{err2[-2000:]}")
            # The same command resumes; its metrics are those of a run never interrupted (the
            # schedule is sched(STEPS) whatever max_steps is, so both end a few steps after s).
            end = [f"train.max_steps={s + 8}"]
            rest = train(d, tt.PATTERN_A, *SIG_O, *end, np_=np_, accum=SIG_ACCUM).ok()
            tt.check(f"resumed from {ckpt(d, s)} at step {s}" in rest.err and
                     rest.err.count("changed since the checkpoint") == 1 and
                     "resumed with 1 setting changed since the checkpoint: train.max_steps: "
                     f"{LONGER * STEPS} -> {s + 8}\n" in rest.err, rest.where)
            ref = train(os.path.join(tmp, sig.name + "_ref"), tt.PATTERN_A, *SIG_O, *end, np_=np_,
                        accum=SIG_ACCUM).ok()
            tt.compare_runs(ref, rest, f"{sig.name} at step {s} on {np_} rank(s), resumed")
            print(f"{np_} rank(s), {sig.name}: stopped after step {s} (exit {rc}); a second signal "
                  f"exited {rc2} {dt:.3f} s after it; the resumed run's metrics are the "
                  f"uninterrupted run's")


def case_signals_1rank():
    signals(1)


def case_signals_2ranks():
    signals(2)


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
