"""End-to-end cases of the updates lost to bf16 rounding as `kktrain train` reports them
(optim/lost_updates.hpp, docs/precision.md "Updates lost to rounding"): the metrics.jsonl columns
of every training row per pattern, the log line, the runtime warning and its error mode, and the
validation of its config keys. On the helpers of test_train.py.

usage: test_lost_updates.py KKTRAIN INPUTS_DIR CASE

The counts themselves are checked against crafted values in tests/unit/test_update_counts.cpp;
here: which columns each pattern has, what can and cannot be non-zero, that counting (done on
logged steps only) leaves the run bit for bit as it was, and when the warning fires.
"""

import os
import sys
import tempfile

import test_train as tt
from test_train import check

COLUMNS = ("update_lost_frac", "ema_lost_frac", "sr_unchanged_frac", "master_held_frac")
FUSED = "transformer_engine.pytorch.optimizers.fused_adam.FusedAdam"
# FusedAdam on bf16 parameters without a master: loses updates like the risky pattern but has no
# startup warning (that one is about torch Adam's bf16 moments), so only the runtime one speaks.
FUSED_NO_MASTER = [f"optimizer._target_={FUSED}", "optimizer.master_weights=false",
                   "model.dtype=bfloat16"]


def fractions(r):
    """The training rows' lost-update columns, checked for shape: every row has all of them, in
    [0, 1], and update_groups with one entry per dtype group."""
    rows = r.train_rows()
    check(rows, "no training rows" + r.where)
    for x in rows:
        for k in COLUMNS:
            check(k in x and isinstance(x[k], (int, float)) and 0.0 <= x[k] <= 1.0,
                  f"row {x['step']}: {k} missing or outside [0, 1]: {x}" + r.where)
        check(isinstance(x.get("update_groups"), dict) and x["update_groups"],
              f"row {x['step']}: update_groups: {x}" + r.where)
        for name, g in x["update_groups"].items():
            check(name in ("float32", "bfloat16"), f"group {name!r}" + r.where)
            check(g["rounding"] in ("float32", "nearest", "stochastic", "master"), f"{g}")
            check(0.0 <= g["unchanged_frac"] <= 1.0, f"{g}")
    return rows


def lost_lines(r):
    return r.stderr_lines("update_lost ")


def case_lost_update_columns():
    """Every training row of every pattern carries the columns; the risky pattern loses updates
    (update_lost_frac > 0 on some step, its bf16 moments too) and its log lines say so; patterns A
    and B lose nothing (0 in every row, no update_lost in the log), A's master holds changes;
    stochastic rounding loses nothing and rounds some updates back to the old value."""
    with tempfile.TemporaryDirectory(prefix="kktrain_lost_") as tmp:
        common = ["train.log_every=1", "train.val_every=0"]
        risky = tt.train(tmp, "risky", tt.RISKY, *common, steps=10).ok()
        rows = fractions(risky)
        check(max(x["update_lost_frac"] for x in rows) > 0, "risky lost nothing" + risky.where)
        check(max(x["ema_lost_frac"] for x in rows) > 0, "risky moments lost nothing")
        g = rows[-1]["update_groups"]
        check(list(g) == ["bfloat16"] and g["bfloat16"]["rounding"] == "nearest", f"groups {g}")
        check(g["bfloat16"]["unchanged_frac"] == rows[-1]["update_lost_frac"], f"groups {g}")
        check(set(g["bfloat16"]) >= {"elements", "exp_avg_lost_frac", "exp_avg_sq_lost_frac"}, f"{g}")
        check(len(lost_lines(risky)) == 10 and len(risky.stderr_lines("ema_lost ")) == 10,
              "every risky log line shows update_lost and ema_lost" + risky.where)
        for cfg, rounding in ((tt.PATTERN_A, "master"), (tt.PATTERN_B, "float32")):
            r = tt.train(tmp, cfg, cfg, *common, steps=10).ok()
            for x in fractions(r):
                for k in ("update_lost_frac", "ema_lost_frac", "sr_unchanged_frac"):
                    check(x[k] == 0, f"{cfg} step {x['step']}: {k} {x[k]}" + r.where)
                check([g["rounding"] for g in x["update_groups"].values()] == [rounding], f"{x}")
            held = [x["master_held_frac"] for x in r.train_rows()]
            check((max(held) > 0) == (cfg == tt.PATTERN_A), f"{cfg}: master_held_frac {held}")
            check(lost_lines(r) == [] and r.stderr_lines("ema_lost") == [],
                  f"{cfg}: nothing can be lost, the log line should not say so" + r.where)
        sr = tt.train(tmp, "sr", tt.RISKY, *common, "optimizer.stochastic_rounding=true",
                      steps=10).ok()
        rows = fractions(sr)
        check(all(x["update_lost_frac"] == 0 for x in rows), "SR counted updates as lost")
        check(max(x["sr_unchanged_frac"] for x in rows) > 0, "SR rounded nothing back")
        check(lost_lines(sr) == [], "SR log lines show update_lost" + sr.where)


def case_lost_update_counting_changes_nothing():
    """Counting runs on logged steps only and must not change the update: a run logging every
    step and one logging every 5th have bit-identical losses, and the same fractions at the
    steps both log."""
    with tempfile.TemporaryDirectory(prefix="kktrain_lost_") as tmp:
        every = tt.train(tmp, "every", tt.RISKY, "train.log_every=1", "train.val_every=0",
                         steps=15).ok()
        fifth = tt.train(tmp, "fifth", tt.RISKY, "train.log_every=5", "train.val_every=0",
                         steps=15).ok()
        by_step = {x["step"]: x for x in every.raw}
        check([x["step"] for x in fifth.raw] == ["1", "5", "10", "15"], f"{fifth.raw}")
        for x in fifth.raw:
            y = by_step[x["step"]]
            for k in ("loss", "grad_norm", *COLUMNS):
                check(x[k] == y[k], f"step {x['step']} {k}: {x[k]} logging every 5th step, "
                      f"{y[k]} logging every step")


def warning_lines(r):
    return r.stderr_lines("update_lost_frac stayed above")


def case_lost_update_warning():
    """update_lost_frac above train.update_lost_warn_frac for train.update_lost_warn_steps steps
    warns once, at the first logged step that completes the window (a logged step standing for
    the steps since the previous one), naming pattern A and B; the same run with a window longer
    than the run, or pattern A, does not warn."""
    with tempfile.TemporaryDirectory(prefix="kktrain_lost_") as tmp:
        # The tiny model's risky run loses 0.7% to 4% of its updates a step: above 0.001 always.
        low = ["train.update_lost_warn_frac=0.001", "train.val_every=0"]
        r = tt.train(tmp, "w", tt.RISKY, *low, "train.update_lost_warn_steps=5",
                     "train.log_every=2", steps=12).ok()
        w = warning_lines(r)
        check(len(w) == 1 and w[0].startswith("kktrain: warning: "), f"{w}" + r.where)
        # Logged steps 1, 2, 4, 6: the window 1..6 is the first of at least 5 steps.
        check("at step 6)" in w[0] and "for 6 steps" in w[0], f"{w[0]}")
        for needle in ("pattern A", "master_weights: true", "pattern B", "model.dtype: float32",
                       "torch.optim.AdamW", "train.update_lost_warn_frac"):
            check(needle in w[0], f"the warning should mention {needle!r}: {w[0]}")
        lines = r.err.splitlines()
        at = lines.index(w[0])
        check(lines[at - 1].startswith("kktrain: step 6/12"), "warned after step 6's log line")
        long = tt.train(tmp, "long", tt.RISKY, *low, "train.update_lost_warn_steps=13",
                        "train.log_every=1", steps=12).ok()
        check(warning_lines(long) == [], "warned before the window was full" + long.where)
        a = tt.train(tmp, "a", tt.PATTERN_A, *low, "train.update_lost_warn_steps=1",
                     "train.log_every=1", steps=5).ok()
        check(warning_lines(a) == [], "pattern A warned" + a.where)
        off = tt.train(tmp, "off", tt.RISKY, *low, "train.update_lost_warn_steps=0",
                       "train.log_every=1", steps=5).ok()
        check(warning_lines(off) == [], "update_lost_warn_steps=0 warned" + off.where)


def case_lost_update_fail():
    """With train.fail_on_precision_warning the runtime warning is an error: FusedAdam without a
    master (no startup warning) stops at the step that completes the window with exit 2 and one
    error line naming the key, after writing that step's metrics row and a checkpoint of it."""
    with tempfile.TemporaryDirectory(prefix="kktrain_lost_") as tmp:
        r = tt.train(tmp, "f", tt.DEFAULT, *FUSED_NO_MASTER, "train.fail_on_precision_warning=true",
                     "train.update_lost_warn_frac=0.001", "train.update_lost_warn_steps=3",
                     "train.log_every=1", "train.val_every=0", steps=10)
        check(r.rc == 2, "expected exit 2" + r.where)
        errors = r.stderr_lines("error")
        check(len(errors) == 1 and errors[0].startswith("kktrain: error: "), f"{errors}" + r.where)
        for needle in ("train.fail_on_precision_warning", "stopped at step 3",
                       "update_lost_frac stayed above", "FusedAdam", "pattern A"):
            check(needle in errors[0], f"the error should mention {needle!r}: {errors[0]}")
        check(r.stderr_lines("kktrain: warning:") == [], "warned besides the error" + r.where)
        check([x["step"] for x in r.train_rows()] == [1, 2, 3], f"rows {r.rows}" + r.where)
        with open(os.path.join(r.out_dir, "checkpoints", "latest")) as f:
            check(f.read().strip() == "step_00000003", "the checkpoint of step 3 is the latest")


def case_lost_update_config():
    """The warning's keys: train.update_lost_warn_frac in [0, 1], train.update_lost_warn_steps an
    integer >= 0; anything else is one error line naming the key, exit 2. `train --help` names
    the columns and the keys."""
    for override, needle in (("train.update_lost_warn_frac=1.5", "update_lost_warn_frac"),
                             ("train.update_lost_warn_frac=-0.1", "update_lost_warn_frac"),
                             ("train.update_lost_warn_frac=lots", "update_lost_warn_frac"),
                             ("train.update_lost_warn_steps=-1", "update_lost_warn_steps"),
                             ("train.update_lost_warn_steps=2.5", "update_lost_warn_steps")):
        args = ["config", tt.config(tt.DEFAULT), override]
        rc, out, err = tt.run(args)
        tt.expect_one_error(rc, out, err, "train." + needle, where=tt.describe(args, rc, out, err))
    rc, out, err = tt.run(["config", tt.config(tt.DEFAULT)])
    check(rc == 0 and "update_lost_warn_frac: 0.5" in out and "update_lost_warn_steps: 100" in out,
          "the defaults in the resolved config\n" + out)
    tt.check_help("train", "update_lost_frac", "ema_lost_frac", "train.update_lost_warn_frac",
                  "train.update_lost_warn_steps")


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
