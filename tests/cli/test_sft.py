"""Supervised fine-tuning end to end (`kktrain train` on data.format chat; io/example_data.hpp,
apps/dataprep/example_cache.hpp): the conversations of inputs/chat_example.jsonl through the chat
tokenizer and template of inputs/chat_tokenizer, on a tiny model.

usage: test_sft.py KKTRAIN INPUTS_DIR CASE      (tests/cli/sft.cmake, labels "train" / "mpi")

- split_invariance: the loss is the mean over the global batch's loss tokens however the batch is
  split: 1 rank x 4 micro-batches, 2 ranks x 2, 4 ranks x 1 and 1 rank x 1 micro-batch of the
  whole batch give the same losses and weights (fp32, within summation order: see TOL).
- packed_equals_unpacked: with the global batch holding every example (an epoch is one step),
  packed rows and one example a row give the same loss and the same updated weights (fp32,
  within summation order), and the packed run has fewer rows.
- epochs_resume: train.epochs sets the steps (each example once an epoch: the loss tokens of an
  epoch's steps add up to the cache's), and a run stopped mid-epoch and resumed ends with the
  weights of the uninterrupted one bit for bit, on 1 and 2 ranks, reusing the example cache.
- validation: data.val_path's examples give the val_loss rows; held-out examples otherwise.
- refusals: a bad example line is one error naming FILE:LINE before any step, nothing cached;
  train.epochs with token data, MTP with examples, a missing data.val_path, an empty file, every
  example dropped, no loss token in any example, a directory: one line each.
"""

import json
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_train as tt  # noqa: E402
from test_train import check  # noqa: E402

try:
    import h5py
except ImportError:  # pragma: no cover
    h5py = None

FP32 = ["model.dtype=float32", "distributed.mp_policy.param_dtype=float32",
        "distributed.mp_policy.output_dtype=null", "checkpoint.export_dtype=float32"]
# Plain SGD: the weights after a step are the start's minus lr x the gradient, so differences
# in the gradient show as they are (AdamW's first steps move every element by ~lr whatever its
# gradient, and a gradient near zero whose rounding differs flips its sign).
SGD = "optimizer={_target_: torch.optim.SGD, lr: 0.5}"
# Losses and weights of the same examples split differently differ only in the fp32 order of sums
# (GEMM blocking, accumulation over micro-batches, the ranks' reduce-scatter, the attention's
# tiles) and the double-precision order of the loss shares: losses within LOSS_TOL relative,
# weights within TOL of each tensor's largest value (measured: see the closing numbers printed
# by each case).
LOSS_TOL = 1e-7
TOL = 1e-6


def base(tmp, *extra, steps=None):
    inputs = tt.INPUTS
    over = [*tt.TINY_MODEL, "checkpoint.resume=none", SGD,
            f"model.tokenizer={os.path.join(inputs, 'chat_tokenizer')}",
            f"data.path={os.path.join(inputs, 'chat_example.jsonl')}", "data.format=chat",
            "data.seq_len=128", "train.log_every=1", "train.val_every=0",
            "lr_scheduler.lr_warmup_steps=0", *extra]
    if steps is not None:
        over.append(f"train.max_steps={steps}")
    return over


def run(np_, tmp, name, over):
    out = os.path.join(tmp, name)
    if np_ == 1:
        return tt.Run("default.yaml", out, over).ok()
    import test_mpi
    return test_mpi.MpiRun(np_, "default.yaml", out, over).ok()


def export_params(run_dir):
    with h5py.File(os.path.join(run_dir, "export.h5"), "r") as f:
        return {n: np.asarray(f[f"params/{n}"][()], dtype=np.float64) for n in f["params"]}


def compare_weights(a, b, what, tol=TOL):
    """The exports' weights, and (to show the comparison is not vacuous) their change from the
    start is checked to be far larger than the tolerance."""
    pa, pb = export_params(a.out_dir), export_params(b.out_dir)
    check(pa.keys() == pb.keys(), what + ": different parameters")
    worst = 0.0
    for n in pa:
        scale = max(np.abs(pa[n]).max(), 1e-30)
        err = np.abs(pa[n] - pb[n]).max() / scale
        worst = max(worst, err)
        check(err <= tol, f"{what}: {n} differs by {err:.3g} of its largest value (tol {tol})")
    print(f"{what}: weights within {worst:.3g} of each tensor's largest value")


def losses(r):
    return [row["loss"] for row in r.train_rows()]


def compare_losses(a, b, what, tol=LOSS_TOL):
    la, lb = losses(a), losses(b)
    check(len(la) == len(lb), f"{what}: {len(la)} vs {len(lb)} steps")
    for i, (x, y) in enumerate(zip(la, lb)):
        check(abs(x - y) <= tol * abs(x), f"{what}: step {i + 1} loss {x!r} vs {y!r}")
    print(f"{what}: losses within {max(abs(x - y) / abs(x) for x, y in zip(la, lb)):.3g}")


def need_h5py():
    if h5py is None:
        raise tt.Skip("h5py is not installed")


def case_split_invariance():
    need_h5py()
    with tempfile.TemporaryDirectory(prefix="kktrain_sft_") as tmp:
        common = base(tmp, *FP32, "data.packing=true", "data.global_batch_size=8", steps=3)
        whole = run(1, tmp, "whole", common + ["data.micro_batch_size=8"])
        rows = whole.train_rows()
        check(all(r["loss_tokens"] > 0 for r in rows), "rows carry loss_tokens")
        for np_, mb in ((1, 2), (2, 2), (4, 2)):
            r = run(np_, tmp, f"np{np_}", common + [f"data.micro_batch_size={mb}"])
            what = f"{np_} rank(s) x {8 // (np_ * mb)} micro-batches vs 1 x 1"
            check([x["loss_tokens"] for x in r.train_rows()] == [x["loss_tokens"] for x in rows],
                  what + ": loss_tokens differ")
            compare_losses(whole, r, what)
            compare_weights(whole, r, what)


def case_packed_equals_unpacked():
    need_h5py()
    with tempfile.TemporaryDirectory(prefix="kktrain_sft_") as tmp:
        # 40 examples, 36 or so for training: a global batch of 40 rows holds an epoch.
        common = base(tmp, *FP32, "data.global_batch_size=40", "data.micro_batch_size=40",
                      "data.val_fraction=0", steps=1)
        packed = run(1, tmp, "packed", common + ["data.packing=true"])
        unpacked = run(1, tmp, "unpacked", common + ["data.packing=false"])
        check(packed.train_rows()[0]["loss_tokens"] == unpacked.train_rows()[0]["loss_tokens"],
              "the same examples give the same loss tokens")
        compare_losses(packed, unpacked, "packed vs unpacked")
        compare_weights(packed, unpacked, "packed vs unpacked")


def manifest(run_dir):
    with open(os.path.join(run_dir, "examples", "manifest.json")) as f:
        return json.load(f)


def case_epochs_resume():
    need_h5py()
    with tempfile.TemporaryDirectory(prefix="kktrain_sft_") as tmp:
        for np_ in (1, 2):
            # A constant learning rate: the cut run's schedule is the whole run's.
            common = base(tmp, "data.packing=true", "data.global_batch_size=4",
                          "data.micro_batch_size=2", "train.epochs=2",
                          "lr_scheduler.lr_decay_style=constant")
            whole = run(np_, tmp, f"whole{np_}", common)
            rows = whole.train_rows()
            m = manifest(whole.out_dir)["summary"]
            # Each epoch's steps hold every training example once: loss tokens add up.
            lines = [ln for ln in whole.err.splitlines() if "2 epochs of" in ln]
            check(lines, "the start names the epochs" + whole.where)
            steps = len(rows)
            check(steps == int(lines[0].split(": ")[-1].split(" steps")[0]),
                  f"{steps} rows vs the announced steps: {lines[0]}")
            check(sum(r["loss_tokens"] for r in rows) == 2 * m["loss_tokens"],
                  f"loss tokens of 2 epochs {sum(r['loss_tokens'] for r in rows)} vs the cache's "
                  f"{m['loss_tokens']} x 2")
            # Stopped mid-epoch (a step inside the first epoch), then resumed to the end.
            out = f"part{np_}"
            cut = steps // 2 - 1
            run(np_, tmp, out, common + [f"train.max_steps={cut}"])
            part = run(np_, tmp, out, [o for o in common if o != "checkpoint.resume=none"])
            check(any("resumed from" in ln for ln in part.err.splitlines()), "it resumed" +
                  part.where)
            check("at an earlier start are reused" in part.err,
                  "the resumed run reuses the example cache (examples/manifest.json)" + part.where)
            got = [r["loss"] for r in part.train_rows()]
            check(got == [r["loss"] for r in rows],
                  f"{np_} rank(s): resumed losses differ from the uninterrupted run's")
            compare_weights(whole, part, f"{np_} rank(s) resumed", tol=0.0)


def case_validation():
    with tempfile.TemporaryDirectory(prefix="kktrain_sft_") as tmp:
        val = os.path.join(tmp, "val.jsonl")
        with open(os.path.join(tt.INPUTS, "chat_example.jsonl")) as f:
            lines = f.readlines()
        with open(val, "w") as f:
            f.writelines(lines[:6])
        r = run(1, tmp, "val", base(tmp, f"data.val_path={val}", "train.val_every=2",
                                    "data.global_batch_size=4", "data.micro_batch_size=4",
                                    steps=4))
        check(manifest(r.out_dir)["summary"]["val_examples"] == 6, "6 validation examples")
        v = r.val_rows()
        check(len(v) == 2 and all(math_ok(x["val_loss"]) for x in v), f"val rows {v}")
        held = run(1, tmp, "held", base(tmp, "data.val_fraction=0.2", "train.val_every=2",
                                        "data.global_batch_size=4", "data.micro_batch_size=4",
                                        steps=2))
        n = manifest(held.out_dir)["summary"]
        check(n["val_examples"] > 0 and n["examples"] + n["val_examples"] == 40,
              f"held-out split {n}")
        check(len(held.val_rows()) == 1, "a val_loss row")


def math_ok(x):
    return isinstance(x, float) and 0.0 < x < 20.0


def case_refusals():
    with tempfile.TemporaryDirectory(prefix="kktrain_sft_") as tmp:
        bad = os.path.join(tmp, "bad.jsonl")
        with open(os.path.join(tt.INPUTS, "chat_example.jsonl")) as f:
            lines = f.readlines()
        with open(bad, "w") as f:
            f.writelines(lines[:3] + ['{"messages": [{"role": "user"}]}\n'] + lines[3:5])
        out = os.path.join(tmp, "bad")
        args = ["train", tt.config("default.yaml"), *base(tmp, f"data.path={bad}", steps=2),
                f"train.output_dir={out}"]
        rc, _, err = tt.run(args)
        check(rc == 2 and f"{bad}:4" in err and len(err.strip().splitlines()) == 1,
              "a bad example: one line naming FILE:LINE" + tt.describe(args, rc, "", err))
        check(not os.path.exists(os.path.join(out, "examples", "manifest.json")),
              "no cache manifest after a failed render")
        empty = os.path.join(tmp, "empty.jsonl")
        open(empty, "w").close()
        no_answer = os.path.join(tmp, "no_answer.jsonl")
        with open(no_answer, "w") as f:
            f.write('{"messages": [{"role": "user", "content": "hi"}]}\n')
        for extra, needle in ((["data.format=auto", "data.path=null", "train.epochs=2"],
                               "train.epochs"),
                              ([f"data.path={empty}"], "gives no training examples: 0 read"),
                              (["data.seq_len=8", "data.truncation=drop"], "40 dropped"),
                              ([f"data.path={no_answer}"], "has a loss token"),
                              ([f"data.path={tmp}"], "is a directory"),
                              (["model.mtp_num_layers=1"], "model.mtp_num_layers"),
                              ([f"data.val_path={tmp}/missing.jsonl"], "missing.jsonl")):
            args = ["train", tt.config("default.yaml"), *base(tmp, *extra, steps=2),
                    f"train.output_dir={os.path.join(tmp, 'r')}"]
            rc, _, err = tt.run(args)
            check(rc == 2 and needle in err and len(err.strip().splitlines()) == 1,
                  f"{extra}: one line naming {needle}" + tt.describe(args, rc, "", err))


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
