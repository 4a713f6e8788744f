"""End-to-end tests of `kktrain train` and `kktrain audit` (docs/cli.md).

usage: test_train.py KKTRAIN INPUTS_DIR CASE

KKTRAIN is the built binary, INPUTS_DIR the repository's inputs/ (the example configs, used as
shipped with a tiny model swapped in by overrides). One ctest per CASE (tests/cli/train_tests.cmake,
label "train"). Every training run is a ~20k-parameter model (C 32, L 1-2, H 2, KV 1, F 64) on
sequences of 32 tokens writing into a fresh temporary train.output_dir, so a run takes ~0.1 s.
Exit 77 means "skipped" (mpirun missing). Standard library only.

What the contract says and these cases check:
- exit status: 0 success, 1 run failure (divergence), 2 invalid input with exactly one stderr line
  "kktrain: error: ..." naming what and where; stdout stays empty for `train` (logs -> stderr);
- <train.output_dir>/metrics.jsonl: one JSON object per line; training rows carry step, loss,
  grad_norm, lr, tokens_per_s, ms_per_step; validation rows carry val_loss and no loss; rows of
  skipped (non-finite) steps carry "skipped": true;
- the lr column is the schedule of optim/schedule.cpp, to the last bit;
- two identical runs write bit-identical numbers (all but the timing columns);
- the precision warning (torch AdamW + bf16 storage; docs/precision.md) and its error mode.
`kktrain audit` lives in test_audit.py and LoRA in test_lora.py, both on these helpers.
"""

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

KKTRAIN = ""
INPUTS = ""
LN_VOCAB = math.log(256.0)  # the loss of a uniform prediction over the byte vocabulary

# The tiny model every case trains (overrides on top of the shipped configs).
TINY_MODEL = ["model.hidden_size=32", "model.num_layers=1", "model.num_heads=2",
              "model.num_kv_heads=1", "model.intermediate_size=64"]
# Cases that run again into one train.output_dir start afresh (resume is tested on its own).
TINY = TINY_MODEL + ["data.seq_len=32", "data.micro_batch_size=2", "data.global_batch_size=2",
                     "checkpoint.resume=none"]
# Measurements of how a run ran (time, memory; host synchronizations and kernel launches, which
# depend on the rank count and the sharding settings, not on the numbers; test_host_syncs.py checks them): never
# compared bit for bit. (peak_device_bytes is the GPU's used memory on CUDA/HIP builds, whoever
# else uses that GPU; null on host builds.)
TIMING_KEYS = ("tokens_per_s", "ms_per_step", "comm_ms", "peak_rss_bytes", "peak_device_bytes",
               "host_syncs", "host_syncs_by_cause", "kernel_launches", "deep_copies")
TRAIN_KEYS = ("step", "loss", "grad_norm", "lr", "tokens_per_s", "ms_per_step")

# The precision warning must name the optimizer, the dtype and both recommended patterns.
WARNING_NEEDLES = ("AdamW", "bfloat16", "FusedAdam", "model.dtype: float32")


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def config(name):
    return os.path.join(INPUTS, name)


# `train` prints one info line when training starts: how many threads the process uses
# (parallel/threads.hpp), once, on rank 0 only. Input errors come before it.
THREADS_LINE = "kktrain: threads: "


# Warnings about how the suite itself was launched, not about what a case did: the thread plan's
# two (parallel/threads.cpp: thread settings clamped to a rank's share; threads that share the
# CPUs and so wait by sleeping: run with OMP_NUM_THREADS=4, the OpenMP build's check, every process
# warns that its threads share the CPUs, and every 2-rank job that they were clamped), and on a CUDA
# build with fewer GPUs than ranks, that the ranks share a GPU and so use MPI instead of NCCL
# (parallel/mpi_communicator.cpp). The runners leave them out of the stderr the checks read
# (ThreadPlan.* and mpi.threads_plan check the thread plan's).
LAUNCH_WARNING = re.compile(
    r"^kktrain(\[rank \d+\])?: warning: (the thread settings ask for \d+ compute threads per rank"
    r"|\d+ compute threads \(\d+ ranks? x \d+\) share \d+ CPUs? as the thread settings ask"
    r"|\d+ ranks run on one GPU of a node and NCCL needs a GPU per rank)")


def without_launch_warnings(err):
    return "".join(ln for ln in err.splitlines(keepends=True) if not LAUNCH_WARNING.match(ln))


def blas_split(err):
    """The thread count the run's BLAS splits every product over (rank 0's threads line): 1 where
    products are split by size only (a thread per 64 Mi multiply-adds, so the tests' products run
    on one), N where thread settings (OMP_NUM_THREADS=N, OPENBLAS_NUM_THREADS=N) split every
    product over N, which sums it in another order (README "Threads")."""
    line = next((ln for ln in err.splitlines() if ln.startswith(THREADS_LINE)), "")
    m = re.search(r"OpenBLAS (up to )?(\d+)", line)
    return 1 if m is None or m.group(1) else int(m.group(2))


_KERNELS_RUN_ON = None


def device_build():
    """True when the binary's kernels run on a GPU (`kktrain --version`: "kernels run on: cuda"
    or "hip"): its parameters, gradients and moments live in device memory, so host RSS does not
    show them, and the GPU runtime is part of every process."""
    global _KERNELS_RUN_ON
    if _KERNELS_RUN_ON is None:
        out = subprocess.run([KKTRAIN, "--version"], capture_output=True, text=True,
                             timeout=60).stdout
        m = re.search(r"kernels run on: (\w+)", out)
        check(m is not None, "kktrain --version names no 'kernels run on'\n" + out)
        _KERNELS_RUN_ON = m.group(1).lower()
    return _KERNELS_RUN_ON not in ("serial", "openmp", "threads")


def startup_lines(err):
    """stderr without a leading threads line (there is none before an input error)."""
    lines = without_launch_warnings(err).splitlines()
    if lines and lines[0].startswith(THREADS_LINE):
        lines = lines[1:]
    return lines


DEFAULT = "default.yaml"
PATTERN_A = "pattern_a_fused_adam_bf16.yaml"
PATTERN_B = "pattern_b_adamw_fp32.yaml"
RISKY = "risky_adamw_bf16.yaml"


def run(args, timeout=120):
    p = subprocess.run([KKTRAIN, *args], capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, without_launch_warnings(p.stderr)


def describe(args, rc, out, err):
    return (f"\n$ kktrain {' '.join(args)}\nrc={rc}\nstdout:\n{out[-3000:]}\n"
            f"stderr:\n{err[-3000:]}")


class Run:
    """One `kktrain train` with its exit status, output and parsed metrics.jsonl."""

    def __init__(self, cfg, out_dir, overrides, runner=None):  # runner(args): (rc, out, err)
        self.out_dir = out_dir
        self.metrics_path = os.path.join(out_dir, "metrics.jsonl")
        self.args = ["train", config(cfg), *overrides, f"train.output_dir={out_dir}"]
        self.rc, self.out, self.err = (runner or run)(self.args)
        self.where = describe(self.args, self.rc, self.out, self.err)
        self.raw = []   # each line with numbers kept as their exact text
        self.rows = []  # each line as Python values
        if os.path.exists(self.metrics_path):
            with open(self.metrics_path) as f:
                text = f.read()
            check(text == "" or text.endswith("\n"), "metrics.jsonl does not end with a newline")
            for i, line in enumerate(text.splitlines()):
                try:
                    row = json.loads(line)
                    raw = json.loads(line, parse_float=str, parse_int=str, parse_constant=str)
                except ValueError as e:
                    raise Failure(f"metrics.jsonl line {i + 1} is not JSON ({e}): {line!r}")
                check(isinstance(row, dict), f"metrics.jsonl line {i + 1} is not an object")
                self.rows.append(row)
                self.raw.append(raw)

    def ok(self):
        check(self.rc == 0, "expected exit 0" + self.where)
        check(self.out == "", "train must keep stdout empty (logs go to stderr)" + self.where)
        check(self.rows, "no metrics rows in " + self.metrics_path + self.where)
        return self

    def train_rows(self):
        return [r for r in self.rows if "val_loss" not in r and not r.get("skipped")]

    def val_rows(self):
        return [r for r in self.rows if "val_loss" in r]

    def stderr_lines(self, needle):
        return [ln for ln in self.err.splitlines() if needle in ln]


def train(tmp, name, cfg, *overrides, steps=30):
    return Run(cfg, os.path.join(tmp, name), [*TINY, f"train.max_steps={steps}", *overrides])


def check_train_row(r, where=""):
    for k in TRAIN_KEYS:
        check(k in r, f"training row lacks {k!r}: {r}{where}")
    check(isinstance(r["step"], int) and r["step"] >= 1, f"step {r['step']!r}")
    for k in TRAIN_KEYS[1:]:
        check(isinstance(r[k], float) or isinstance(r[k], int), f"{k} is not a number: {r}")
        check(math.isfinite(r[k]), f"{k} is not finite in a logged (not skipped) step: {r}")
    check(r["grad_norm"] >= 0 and r["lr"] >= 0, f"grad_norm/lr out of range: {r}")
    check(r["tokens_per_s"] > 0 and r["ms_per_step"] > 0, f"timing columns: {r}")
    check("val_loss" not in r and "skipped" not in r, f"training row with val_loss/skipped: {r}")


def check_val_row(r):
    check(set(r) == {"step", "val_loss", "host_syncs", "host_syncs_by_cause", "kernel_launches",
                     "deep_copies"},
          f"validation row should be step + val_loss + its host synchronizations and launches: {r}")
    check(isinstance(r["step"], int), f"validation step {r['step']!r}")
    check(math.isfinite(r["val_loss"]) and r["val_loss"] > 0, f"val_loss {r['val_loss']!r}")


def schedule_lr(step0, base, warmup, min_lr, decay_steps, style):
    """optim/schedule.cpp, operation for operation (the same doubles, the same libm cos)."""
    if step0 < warmup:
        return base * float(step0 + 1) / float(warmup)
    if style == "constant":
        return base
    span = float(max(1, decay_steps - warmup))
    progress = min(1.0, float(step0 - warmup) / span)
    if style == "linear":
        return min_lr + (base - min_lr) * (1.0 - progress)
    return min_lr + (base - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def check_lr_column(rows, **sched):
    for r in rows:
        want = schedule_lr(r["step"] - 1, **sched)  # the lr of step k (1-based) is lr(k - 1)
        check(r["lr"] == want,
              f"step {r['step']}: lr {r['lr']!r}, the schedule gives {want!r} ({sched})")


def mean(xs):
    return sum(xs) / len(xs)


# ---- 1. a full run: metrics.jsonl, validation rows, the loss goes down, the lr schedule --------


def case_full_run():
    """default.yaml (cosine, warmup 20, lr 3e-3, min_lr 3e-4) for 30 steps, every step logged."""
    with tempfile.TemporaryDirectory(prefix="kktrain_train_") as tmp:
        r = train(tmp, "run", DEFAULT, "train.log_every=1", "train.val_every=10",
                  "data.val_fraction=0.05").ok()
        for row in r.rows:
            check("val_loss" in row or "loss" in row, f"row with neither loss nor val_loss: {row}")
        tr, va = r.train_rows(), r.val_rows()
        for row in tr:
            check_train_row(row, r.where)
        for row in va:
            check_val_row(row)
        check([x["step"] for x in tr] == list(range(1, 31)),
              f"log_every=1 should log steps 1..30, got {[x['step'] for x in tr]}")
        check([x["step"] for x in va] == [10, 20, 30],
              f"val_every=10 should validate at 10, 20, 30, got {[x['step'] for x in va]}")
        # A validation row follows the training row of its step.
        for v in va:
            i = r.rows.index(v)
            check(i > 0 and r.rows[i - 1].get("step") == v["step"] and "loss" in r.rows[i - 1],
                  f"validation row of step {v['step']} does not follow that step's training row")
        # Init predicts ~uniformly over 256 bytes; 30 steps on the corpus must clearly learn.
        first = tr[0]["loss"]
        check(abs(first - LN_VOCAB) < 0.1, f"step-1 loss {first}, expected ~ln(256) = {LN_VOCAB}")
        last = mean([x["loss"] for x in tr[-5:]])
        check(last < first - 0.8, f"loss did not decrease: first {first}, mean of last 5 {last}")
        check(va[-1]["val_loss"] < va[0]["val_loss"] - 0.3,
              f"val_loss did not decrease: {[x['val_loss'] for x in va]}")
        check(va[-1]["val_loss"] < first - 0.8, f"final val_loss {va[-1]['val_loss']}")
        # Warmup (steps 1..20) then cosine from 3e-3 to 3e-4 over the remaining 10 steps.
        check_lr_column(tr, base=3.0e-3, warmup=20, min_lr=3.0e-4, decay_steps=30, style="cosine")
        check(tr[19]["lr"] == 3.0e-3 and tr[0]["lr"] == 3.0e-3 / 20, "warmup end points")
        check(all(tr[i]["lr"] > tr[i + 1]["lr"] for i in range(20, 29)), "cosine must decrease")
        # tokens_per_s is tokens per step / step time: 2 sequences x 32 tokens.
        for row in tr:
            tokens = row["tokens_per_s"] * row["ms_per_step"] / 1e3
            check(abs(tokens - 64) < 1e-6 * 64, f"tokens_per_s x ms_per_step = {tokens}, not 64")
        check("done: 30 steps" in r.err, "no final 'done' line" + r.where)


def case_log_cadence():
    """Rows every train.log_every steps plus the first and the last; validation at val_every and
    at the end."""
    with tempfile.TemporaryDirectory(prefix="kktrain_train_") as tmp:
        r = train(tmp, "run", DEFAULT, "train.log_every=7", "train.val_every=8",
                  steps=20).ok()
        got = [x["step"] for x in r.train_rows()]
        check(got == [1, 7, 14, 20], f"log_every=7, 20 steps: logged {got}" + r.where)
        got = [x["step"] for x in r.val_rows()]
        check(got == [8, 16, 20], f"val_every=8, 20 steps: validated at {got}" + r.where)
        # val_every: 0 turns validation off.
        r = train(tmp, "noval", DEFAULT, "train.log_every=7", "train.val_every=0", steps=20).ok()
        check(r.val_rows() == [], "train.val_every=0 still validated" + r.where)
        check(r.stderr_lines("validation") == [], "val_every=0 warns about validation" + r.where)


def case_lr_schedule_variants():
    """linear decay that ends before max_steps (then stays at min_lr), and constant."""
    with tempfile.TemporaryDirectory(prefix="kktrain_train_") as tmp:
        sched = dict(base=1.0e-3, warmup=3, min_lr=1.0e-4, decay_steps=10, style="linear")
        r = train(tmp, "linear", DEFAULT, "train.log_every=1", "optimizer.lr=1e-3",
                  "lr_scheduler.lr_decay_style=linear", "lr_scheduler.lr_warmup_steps=3",
                  "lr_scheduler.lr_decay_steps=10", "lr_scheduler.min_lr=1e-4", steps=14).ok()
        tr = r.train_rows()
        check(len(tr) == 14, f"{len(tr)} rows" + r.where)
        check_lr_column(tr, **sched)
        check([x["lr"] for x in tr[10:]] == [1.0e-4] * 4, "lr after lr_decay_steps != min_lr")
        r = train(tmp, "constant", DEFAULT, "train.log_every=1", "optimizer.lr=2e-3",
                  "lr_scheduler.lr_decay_style=constant", "lr_scheduler.lr_warmup_steps=0",
                  steps=6).ok()
        check([x["lr"] for x in r.train_rows()] == [2.0e-3] * 6, "constant lr" + r.where)


# ---- 2. determinism --------------------------------------------------------------------------


def compare_runs(a, b, what):
    check(len(a.raw) == len(b.raw), f"{what}: {len(a.raw)} vs {len(b.raw)} metrics rows")
    for i, (x, y) in enumerate(zip(a.raw, b.raw)):
        check(set(x) == set(y), f"{what}: row {i + 1} has keys {sorted(x)} vs {sorted(y)}")
        for k in x:
            if k in TIMING_KEYS:
                continue
            check(x[k] == y[k], f"{what}: row {i + 1} {k}: {x[k]} vs {y[k]} (not bit-identical)")


def case_determinism():
    """Two identical runs write identical step/loss/grad_norm/lr/val_loss text (the exact %.17g
    digits); a different data.seed or model.seed changes them (so the comparison can fail)."""
    with tempfile.TemporaryDirectory(prefix="kktrain_train_") as tmp:
        for cfg in (DEFAULT, PATTERN_A):
            common = ["train.log_every=1", "train.val_every=5", "data.global_batch_size=4"]
            a = train(tmp, "a", cfg, *common, steps=20).ok()
            b = train(tmp, "b", cfg, *common, steps=20).ok()
            check(len(a.val_rows()) == 4, f"{cfg}: expected 4 validation rows" + a.where)
            compare_runs(a, b, cfg)
            for seed in ("data.seed=7", "model.seed=7"):
                c = train(tmp, "c", cfg, *common, seed, steps=20).ok()
                check(c.raw[0]["loss"] != a.raw[0]["loss"],
                      f"{cfg}: {seed} did not change the step-1 loss {a.raw[0]['loss']}")
            shutil.rmtree(os.path.join(tmp, "a"))
            shutil.rmtree(os.path.join(tmp, "b"))


def case_thread_counts():
    """Kokkos thread counts 1, 2 and 4 (OpenBLAS held at 1 thread: its sums follow its own thread
    count, README "Threads") give bit-identical losses, learning rates and validation losses: no
    kernel's result depends on scheduling. The gradient norm is a double-precision parallel_reduce
    whose summation order follows the thread count: it must agree to 1e-12 relative (the fp32 clip
    factor made from it then agrees exactly, as the identical losses show). With a Serial Kokkos
    the count changes nothing and this checks plain determinism."""
    def with_threads(n):
        env = dict(os.environ, KOKKOS_NUM_THREADS=str(n), OMP_NUM_THREADS="1",
                   OPENBLAS_NUM_THREADS="1")

        def runner(args):
            p = subprocess.run([KKTRAIN, *args], capture_output=True, text=True, timeout=120,
                               env=env)
            return p.returncode, p.stdout, p.stderr
        return runner

    with tempfile.TemporaryDirectory(prefix="kktrain_train_") as tmp:
        for cfg in (DEFAULT, PATTERN_A):
            common = [*TINY, "train.max_steps=10", "train.log_every=1", "train.val_every=5",
                      "data.global_batch_size=4"]
            runs = {n: Run(cfg, os.path.join(tmp, f"t{n}"), common, runner=with_threads(n)).ok()
                    for n in (1, 2, 4)}
            a = runs[1]
            for n in (2, 4):
                b = runs[n]
                what = f"{cfg}: {n} Kokkos threads vs 1"
                check(len(a.raw) == len(b.raw), f"{what}: {len(a.raw)} vs {len(b.raw)} rows")
                for i, (x, y) in enumerate(zip(a.raw, b.raw)):
                    for k in x:
                        if k in TIMING_KEYS:
                            continue
                        if k == "grad_norm":
                            gx, gy = float(x[k]), float(y[k])
                            check(abs(gx - gy) <= 1e-12 * max(abs(gx), 1e-30),
                                  f"{what}: row {i + 1} grad_norm {gx} vs {gy}")
                        else:
                            check(x[k] == y[k], f"{what}: row {i + 1} {k}: {x[k]} vs {y[k]}")
                shutil.rmtree(b.out_dir)


def case_metrics_kept():
    """A second run into the same train.output_dir keeps the first run's metrics.jsonl (as
    metrics.jsonl.1, then .2), byte for byte: no data is lost."""
    with tempfile.TemporaryDirectory(prefix="kktrain_train_") as tmp:
        first = train(tmp, "run", DEFAULT, steps=3).ok()
        with open(first.metrics_path) as f:
            text = f.read()
        second = train(tmp, "run", DEFAULT, steps=2).ok()
        with open(first.metrics_path + ".1") as f:
            check(f.read() == text, "the first run's metrics.jsonl was not kept as .1" + second.where)
        check(len(second.train_rows()) == 2, "the new metrics.jsonl holds the new run" + second.where)
        train(tmp, "run", DEFAULT, steps=1).ok()
        check(os.path.exists(first.metrics_path + ".2"), "a third run keeps the second as .2")


def case_finished_run_again():
    """The same command again after a finished run trains nothing (one line says so, exit 0, the
    metrics unchanged); a larger train.max_steps continues it and names the changed setting."""
    with tempfile.TemporaryDirectory(prefix="kktrain_train_") as tmp:
        resume = "checkpoint.resume=auto"
        first = train(tmp, "run", DEFAULT, resume, steps=3).ok()
        with open(first.metrics_path) as f:
            text = f.read()
        again = train(tmp, "run", DEFAULT, resume, steps=3).ok()
        check("nothing to train: the checkpoint is at step 3 and train.max_steps is 3" in again.err
              and "done: no steps to train, at step 3" in again.err and
              "changed since the checkpoint" not in again.err, "rerun" + again.where)
        with open(first.metrics_path) as f:
            check(f.read() == text, "a rerun with nothing to train changed metrics.jsonl")
        more = train(tmp, "run", DEFAULT, resume, steps=5).ok()
        check(more.err.count("changed since the checkpoint") == 1 and
              "resumed with 1 setting changed since the checkpoint: train.max_steps: 3 -> 5\n"
              in more.err and "done: 2 steps (steps 4 to 5, resumed)" in more.err,
              "continued" + more.where)
        check([r["step"] for r in more.train_rows()] == [1, 3, 5], f"rows {more.rows}")


# ---- 3. gradient accumulation ----------------------------------------------------------------


def case_grad_accumulation():
    """global_batch_size = 2 x micro_batch_size: two micro-batches per optimizer step.

    Micro-batch 0 of a step is the batch a one-micro-batch run sees (batches are keyed by step,
    rank, micro-batch), so the logged step-1 loss L (the mean over micro-batches) and the
    one-micro-batch loss L0 give micro-batch 1's loss as 2L - L0, which must be a plausible
    initial loss (~ln 256; a sum instead of a mean would make it ~3 ln 256)."""
    with tempfile.TemporaryDirectory(prefix="kktrain_train_") as tmp:
        one = train(tmp, "one", DEFAULT, "train.log_every=1", "data.global_batch_size=2").ok()
        two = train(tmp, "two", DEFAULT, "train.log_every=1", "data.global_batch_size=4").ok()
        check("steps of 128 tokens" in two.err, "2 x 2 x 32 = 128 tokens per step" + two.where)
        t1, t2 = one.train_rows(), two.train_rows()
        check(len(t2) == 30, f"{len(t2)} training rows" + two.where)
        for row in t2:
            check_train_row(row, two.where)
            tokens = row["tokens_per_s"] * row["ms_per_step"] / 1e3
            check(abs(tokens - 128) < 1e-6 * 128, f"tokens_per_s x ms_per_step = {tokens} != 128")
        l0, l = t1[0]["loss"], t2[0]["loss"]
        check(l != l0, f"step-1 loss {l} equals the one-micro-batch loss: no second micro-batch?")
        l1 = 2 * l - l0
        check(abs(l1 - LN_VOCAB) < 0.15,
              f"implied micro-batch-1 loss 2*{l} - {l0} = {l1}, not ~ln(256): not a mean?")
        check(t2[0]["grad_norm"] != t1[0]["grad_norm"], "same grad_norm with two micro-batches")
        first, last = t2[0]["loss"], mean([x["loss"] for x in t2[-5:]])
        check(last < first - 0.5, f"accumulating run did not train: {first} -> {last}")
        # A corpus of exactly seq_len + 1 tokens has one window, so every micro-batch is the same
        # batch: the mean over 2 micro-batches must reproduce the one-micro-batch run bit for bit
        # (each micro-batch's gradient is scaled by 1/2, exact in fp32 and bf16, and the sum of
        # two equal halves is exact; with 4 the partial sum 3g/4 can round, so only 2 here). A
        # sum instead of a mean doubles grad_norm; overwriting instead of accumulating halves it.
        path = os.path.join(tmp, "one_window.txt")
        with open(path, "wb") as f:
            f.write(b"the quick brown fox jumps over the lazy dog"[:33])
        for cfg in (DEFAULT, PATTERN_A):
            one, two = (train(tmp, f"{cfg}_{g}", cfg, f"data.path={path}", "train.log_every=1",
                              f"data.global_batch_size={g}", steps=8).ok() for g in (2, 4))
            compare_runs(one, two, f"{cfg}, one-window corpus, global batch 2 vs 4")
        # A global batch that is not a whole number of micro-batches is refused.
        rc, out, err = run(["train", config(DEFAULT), *TINY, "data.global_batch_size=3",
                            f"train.output_dir={os.path.join(tmp, 'bad')}"])
        expect_one_error(rc, out, err, "data.global_batch_size", where="gbs 3, mbs 2")


# ---- 4. the precision patterns of docs/precision.md ------------------------------------------


def precision_warnings(err):
    return [ln for ln in err.splitlines() if "warning" in ln and "AdamW" in ln]


def run_pattern(cfg, *extra):
    with tempfile.TemporaryDirectory(prefix="kktrain_train_") as tmp:
        r = train(tmp, "run", cfg, "train.log_every=1", "train.val_every=5", *extra, steps=5)
        return r


def check_pattern_runs(cfg, storage, optimizer):
    r = run_pattern(cfg).ok()
    tr = r.train_rows()
    check([x["step"] for x in tr] == [1, 2, 3, 4, 5], f"{cfg}: rows {tr}" + r.where)
    for row in tr:
        check_train_row(row, r.where)
    check(len(r.val_rows()) == 1, f"{cfg}: one validation row expected" + r.where)
    check(f"storage {storage}, compute bfloat16" in r.err, f"{cfg}: storage dtype" + r.where)
    check(f"with {optimizer} on" in r.err, f"{cfg}: optimizer" + r.where)
    return r


def case_pattern_a():
    r = check_pattern_runs(PATTERN_A, "bfloat16",
                           "transformer_engine.pytorch.optimizers.fused_adam.FusedAdam")
    check(r.stderr_lines("warning") == [], "pattern A must not warn" + r.where)


def case_pattern_b():
    r = check_pattern_runs(PATTERN_B, "float32", "torch.optim.AdamW")
    check(r.stderr_lines("warning") == [], "pattern B must not warn" + r.where)


def case_pattern_risky():
    r = check_pattern_runs(RISKY, "bfloat16", "torch.optim.AdamW")
    w = precision_warnings(r.err)
    check(len(w) == 1, f"expected exactly one precision warning line, got {len(w)}" + r.where)
    check(w[0].startswith("kktrain: warning: "), f"warning line format: {w[0]!r}")
    for n in WARNING_NEEDLES:
        check(n in w[0], f"precision warning should mention {n!r}: {w[0]}")
    check(len(r.stderr_lines("warning")) == 1, "other warnings besides the precision one" + r.where)


def case_pattern_risky_fail():
    """train.fail_on_precision_warning: the warning becomes an error: exit 2, one error line
    (after the warning it refers to), no metrics."""
    with tempfile.TemporaryDirectory(prefix="kktrain_train_") as tmp:
        r = train(tmp, "run", RISKY, "train.fail_on_precision_warning=true", steps=5)
        check(r.rc == 2, "expected exit 2" + r.where)
        check(r.out == "", "stdout must be empty" + r.where)
        errors = r.stderr_lines("error")
        check(len(errors) == 1 and errors[0].startswith("kktrain: error: "),
              "expected exactly one 'kktrain: error: ' line" + r.where)
        check("train.fail_on_precision_warning" in errors[0], "error names the key" + r.where)
        check("risky_adamw_bf16.yaml" in errors[0], "error names the config file" + r.where)
        lines = startup_lines(r.err)
        check(len(lines) == 2 and lines[0] in precision_warnings(r.err) and lines[1] == errors[0],
              "stderr should be the precision warning then the error line" + r.where)
        check(not os.path.exists(r.out_dir), "a refused run created train.output_dir" + r.where)
        # The same switch does not refuse the recommended patterns.
        for cfg in (PATTERN_A, PATTERN_B):
            ok = train(tmp, cfg, cfg, "train.fail_on_precision_warning=true", steps=2).ok()
            check(ok.stderr_lines("warning") == [], f"{cfg} warned" + ok.where)


def case_patterns_consistent():
    """Step 1's forward/backward depends on storage, compute and init, not on the optimizer:
    pattern A and the risky pattern (both bf16 storage) log the same step-1 loss and grad_norm,
    pattern B (fp32 storage) a different one; after a few updates A and risky part ways (their
    optimizers differ)."""
    a, b, risky = (run_pattern(c).ok() for c in (PATTERN_A, PATTERN_B, RISKY))
    for k in ("loss", "grad_norm"):
        check(a.raw[0][k] == risky.raw[0][k], f"step-1 {k}: A {a.raw[0][k]} vs risky "
              f"{risky.raw[0][k]} (same storage, same init)")
    check(a.raw[0]["loss"] != b.raw[0]["loss"], "bf16 and fp32 storage gave the same loss")
    a5 = [x for x in a.raw if x.get("step") == "5" and "loss" in x][0]
    r5 = [x for x in risky.raw if x.get("step") == "5" and "loss" in x][0]
    check(a5["loss"] != r5["loss"], "FusedAdam and AdamW gave the same step-5 loss")


# ---- 5. non-finite steps ---------------------------------------------------------------------


def check_nonfinite_run(r, limit, kind):
    check(r.rc == 1, f"expected exit 1 after {limit} non-finite steps" + r.where)
    check(r.out == "", "stdout must be empty" + r.where)
    errors = r.stderr_lines("error")
    check(len(errors) == 1 and errors[0].startswith("kktrain: error: "),
          "expected exactly one error line" + r.where)
    check(f"{limit} non-finite steps in a row" in errors[0], "error line" + r.where)
    check("train.max_nonfinite_steps" in errors[0], "error names the key" + r.where)
    warns = r.stderr_lines("non-finite")[:-1]
    check(len(warns) >= limit, f"expected >= {limit} non-finite warnings" + r.where)
    for w in warns:
        check(w.startswith("kktrain: warning: ") and "skipped" in w, f"warning line {w!r}")
    skipped = [x for x in r.rows if x.get("skipped")]
    check(len(skipped) >= limit, f"{len(skipped)} rows with skipped: true" + r.where)
    for x in skipped:
        check(x["skipped"] is True, f"skipped must be true: {x}")
        check(not (math.isfinite(x["loss"]) and math.isfinite(x["grad_norm"])),
              f"a skipped row with finite loss and grad_norm: {x}")
    for x in r.rows:
        if "loss" in x and not x.get("skipped"):
            check_train_row(x, r.where)
    # The run stops on the limit-th skipped step in a row: the last rows are those.
    tail = r.rows[-limit:]
    check(all(x.get("skipped") for x in tail), f"last {limit} rows are not all skipped" + r.where)
    steps = [x["step"] for x in tail]
    check(steps == list(range(steps[0], steps[0] + limit)), f"not consecutive: {steps}")
    check(f"stopping at step {steps[-1]}:" in errors[0], f"error step vs rows {steps}" + r.where)
    # Each warning names the step and what was non-finite, like its row.
    for x in tail:
        what = "loss" if not math.isfinite(x["loss"]) else "gradient norm"
        check(any(f"step {x['step']}: non-finite {what}; update skipped" in w for w in warns),
              f"no warning 'step {x['step']}: non-finite {what}; update skipped'" + r.where)
    check(any(f"non-finite {kind}" in w for w in warns), f"no 'non-finite {kind}'" + r.where)


def case_nonfinite_grad_norm():
    """lr 1e4 without clipping: the weights blow up, RMSNorm statistics overflow and the
    gradients turn NaN within a few steps; 5 (the default limit) in a row stop the run."""
    with tempfile.TemporaryDirectory(prefix="kktrain_train_") as tmp:
        r = train(tmp, "run", DEFAULT, "optimizer.lr=1e4", "train.grad_clip=0",
                  "lr_scheduler.lr_warmup_steps=0", "train.log_every=1", steps=40)
        check_nonfinite_run(r, 5, "gradient norm")


def case_nonfinite_loss():
    """lr 1e3: AdamW's decoupled decay (p *= 1 - lr*wd = -99) blows the weights up to inf and the
    loss turns NaN; train.max_nonfinite_steps=3 stops the run on the third."""
    with tempfile.TemporaryDirectory(prefix="kktrain_train_") as tmp:
        r = train(tmp, "run", DEFAULT, "optimizer.lr=1e3", "train.grad_clip=0",
                  "lr_scheduler.lr_warmup_steps=0", "lr_scheduler.lr_decay_style=constant",
                  "train.max_nonfinite_steps=3", "train.log_every=1", steps=40)
        check_nonfinite_run(r, 3, "loss")


def expect_one_error(rc, out, err, *needles, where=""):
    where = f"{where}\nrc={rc}\nstdout:\n{out}\nstderr:\n{err}"
    check(rc == 2, "expected exit 2" + where)
    check(out == "", "expected empty stdout" + where)
    lines = startup_lines(err)
    check(len(lines) == 1, "expected exactly one stderr line (besides the threads line)" + where)
    check(lines[0].startswith("kktrain: error: "), "stderr must start 'kktrain: error: '" + where)
    for n in needles:
        check(n in lines[0], f"the error should mention {n!r}" + where)
    return lines[0]



# ---- 7. bad data -----------------------------------------------------------------------------


def bad_data(tmp, path, *needles, extra=()):
    r = train(tmp, "run", DEFAULT, f"data.path={path}", *extra, steps=3)
    line = expect_one_error(r.rc, r.out, r.err, *needles, where=r.where)
    check(not os.path.exists(r.out_dir), "a refused run created train.output_dir" + r.where)
    return line


def write(tmp, name, data):
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def case_data_missing():
    with tempfile.TemporaryDirectory(prefix="kktrain_train_") as tmp:
        missing = os.path.join(tmp, "no_such_corpus.txt")
        bad_data(tmp, missing, "data.path", missing)


def case_data_empty():
    with tempfile.TemporaryDirectory(prefix="kktrain_train_") as tmp:
        path = write(tmp, "empty.txt", b"")
        bad_data(tmp, path, "data.path", path, "empty")


def case_data_directory():
    with tempfile.TemporaryDirectory(prefix="kktrain_train_") as tmp:
        line = bad_data(tmp, tmp, "data.path", tmp)
        check("empty" not in line, f"a directory is not an empty file: {line}")
        check("directory" in line, f"the error should say it is a directory: {line}")


def case_data_short():
    """Fewer tokens than data.seq_len + 1 (32 bytes for seq_len 32) is refused; exactly
    seq_len + 1 trains (one window, no validation split: a warning, not an error)."""
    text = b"the quick brown fox jumps over the lazy dog " * 2
    with tempfile.TemporaryDirectory(prefix="kktrain_train_") as tmp:
        path = write(tmp, "short.txt", text[:32])
        bad_data(tmp, path, path, "data.seq_len + 1 = 33")
        path = write(tmp, "exact.txt", text[:33])
        r = train(tmp, "exact", DEFAULT, f"data.path={path}", steps=2).ok()
        check(len(r.train_rows()) == 2 and r.val_rows() == [], f"{r.rows}" + r.where)
        check(len(r.stderr_lines("no validation split")) == 1, "validation warning" + r.where)


def case_data_vocab():
    """Byte-level text needs vocab_size >= 256; with 100, the first byte >= 100 is refused."""
    with tempfile.TemporaryDirectory(prefix="kktrain_train_") as tmp:
        path = write(tmp, "text.txt", b"ABC hello world\n" * 20)  # 'h' = 104 at position 4
        bad_data(tmp, path, path, "model.vocab_size 100", "token id 104", "position 4",
                 extra=["model.vocab_size=100"])
        # The same file trains with the byte vocabulary.
        r = train(tmp, "ok", DEFAULT, f"data.path={path}", steps=2).ok()
        check(f"on {path} (text)" in r.err, "data source in the start line" + r.where)


def case_data_binary():
    """Pre-tokenized files: a .u16 file with an odd byte count, and ids >= vocab_size."""
    with tempfile.TemporaryDirectory(prefix="kktrain_train_") as tmp:
        path = write(tmp, "tokens.u16", bytes(65))
        bad_data(tmp, path, path, "uint16")
        ids = list(range(64)) + [300]
        path = write(tmp, "big.u16", b"".join(i.to_bytes(2, "little") for i in ids))
        bad_data(tmp, path, path, "token id 300", "position 64", "model.vocab_size 256")
        path = write(tmp, "good.u16", b"".join((i % 256).to_bytes(2, "little") for i in range(400)))
        r = train(tmp, "ok", DEFAULT, f"data.path={path}", steps=2).ok()
        check(f"on {path} (uint16)" in r.err, "format in the start line" + r.where)


# ---- 9. help ---------------------------------------------------------------------------------


def check_help(cmd, *needles):
    for flag in ("--help", "-h"):
        rc, out, err = run([cmd, flag])
        where = describe([cmd, flag], rc, out, err)
        check(rc == 0, "help must exit 0" + where)
        check(out.startswith(f"usage: kktrain {cmd} CONFIG"), "usage line" + where)
        check(err == "", "help writes nothing to stderr" + where)
        for n in needles:
            check(n in out, f"help should mention {n!r}" + where)


def case_train_help():
    check_help("train", "metrics.jsonl", "train.max_nonfinite_steps",
               "train.fail_on_precision_warning")


def case_audit_help():
    check_help("audit", "--json")


def run_case(cases, doc):
    """The command line of this file and of test_audit.py / test_lora.py: KKTRAIN INPUTS_DIR CASE,
    where CASE names a case_<CASE> function of `cases` (a module's globals()). Exit 0 ok, 1 fail,
    2 usage, 77 skip."""
    global KKTRAIN, INPUTS
    if len(sys.argv) != 4:
        print(doc)
        return 2
    KKTRAIN, INPUTS, name = sys.argv[1], sys.argv[2], sys.argv[3]
    fn = cases.get("case_" + name)
    if fn is None:
        print(f"unknown case {name!r}")
        return 2
    try:
        fn()
    except Skip as e:
        print(f"skip {name}: {e}")
        return 77
    except Failure as e:
        print(f"FAIL {name}: {e}")
        return 1
    print(f"ok {name}")
    return 0


if __name__ == "__main__":
    sys.exit(run_case(globals(), __doc__))
