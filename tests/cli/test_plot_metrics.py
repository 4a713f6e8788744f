"""scripts/plot_metrics.py on synthetic metrics.jsonl files (no training; a few seconds):

- load_series (imported from the script): training, validation and evaluation rows sharing steps
  give each column its own steps; flat `eval/tasks/acc` and nested {"eval": {"wiki": {...}}}
  columns; a resumed run's repeated steps keep their last value per column; NaN/null/string
  values are left out; non-objects, rows without a numeric step and broken lines are counted as
  skipped (blank lines are not);
- default_columns / chosen_columns: loss, val_loss, then the eval columns; --metrics names and
  globs, an unknown one an error; run labels are directory names;
- the command: a PNG with the PNG signature that matplotlib reads back (height, width > 0), one
  warning line for the skipped rows; --metrics with a glob; a missing metrics.jsonl, an unknown
  column and a missing matplotlib (a stub package that fails to import) are each exit 2 with one
  stderr line and no image.

usage: test_plot_metrics.py SCRIPTS_DIR      (tests/CMakeLists.txt; exit 77 without matplotlib)
"""
import importlib
import json
import os
import subprocess
import sys
import tempfile

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def write_rows(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        for r in rows:
            f.write(r if isinstance(r, str) else json.dumps(r))
            f.write("\n")


def train_row(step, loss):
    return {"step": step, "loss": loss, "grad_norm": 1.0 / step, "lr": 1e-3,
            "tokens_per_s": 1000.0, "host_syncs_by_cause": {"validation": 0, "step_end": 1}}


def run_a_rows():
    """Steps 1..8 every step, validation at 4 and 8, evaluation at 4 and 8; a resume from step 5
    repeats steps 6..8 with other values; junk lines."""
    rows = [train_row(s, 10.0 - s) for s in range(1, 9)]
    rows.insert(4, {"step": 4, "val_loss": 6.5, "host_syncs_by_cause": {"validation": 4}})
    rows.insert(5, {"step": 4, "eval/tasks/acc": 0.25, "eval": {"wiki": {"loss": 7.0}}})
    rows += [{"step": 8, "val_loss": 3.5}, {"step": 8, "eval/tasks/acc": 0.40}]
    # the resumed run: steps 6..8 again (training values 100 + step), validation and evaluation
    rows += [train_row(s, 100.0 + s) for s in (6, 7, 8)]
    rows += [{"step": 8, "val_loss": 3.25}, {"step": 8, "eval/tasks/acc": 0.5,
                                             "eval": {"wiki": {"loss": 5.0}}}]
    rows += ['{"step": 9, "loss": NaN, "grad_norm": Infinity, "skipped": true}',
             '{"step": 10, "loss": null, "lr": "high", "grad_norm": true}']
    rows += ["not json", "[1, 2, 3]", '{"loss": 1.0}', '{"step": "3", "loss": 1.0}',
             '{"step": 11, "loss": 1', ""]
    return rows


def check_loading(pm, run_a, run_b):
    series, skipped = pm.load_series(os.path.join(run_a, "metrics.jsonl"))
    check(skipped == 5, f"skipped rows: {skipped}, expected 5 (blank lines do not count)")
    want = {
        "loss": ([1, 2, 3, 4, 5, 6, 7, 8], [9.0, 8.0, 7.0, 6.0, 5.0, 106.0, 107.0, 108.0]),
        "val_loss": ([4, 8], [6.5, 3.25]),
        "eval/tasks/acc": ([4, 8], [0.25, 0.5]),
        "eval/wiki/loss": ([4, 8], [7.0, 5.0]),
        "host_syncs_by_cause/validation": ([1, 2, 3, 4, 5, 6, 7, 8], [0, 0, 0, 4, 0, 0, 0, 0]),
        "grad_norm": ([1, 2, 3, 4, 5, 6, 7, 8], [1.0 / s for s in range(1, 9)]),
    }
    for col, (steps, values) in want.items():
        got = series.get(col)
        check(got is not None, f"no series {col!r}: {sorted(series)}")
        check(list(got[0]) == steps and list(got[1]) == values,
              f"{col}: got {got}, expected {(steps, values)}")
    check("skipped" not in series and "step" not in series,
          f"non-numeric or step columns: {sorted(series)}")
    check(series["lr"][0] == [1, 2, 3, 4, 5, 6, 7, 8], f"lr steps {series['lr'][0]}")
    b, skipped_b = pm.load_series(os.path.join(run_b, "metrics.jsonl"))
    check(skipped_b == 0 and sorted(b) != [] and "val_loss" not in b, f"run b: {sorted(b)}")

    check(pm.default_columns([series, b]) == ["loss", "val_loss", "eval/tasks/acc",
                                               "eval/wiki/loss"],
          f"default columns {pm.default_columns([series, b])}")
    check(pm.default_columns([b]) == ["loss"], f"default columns of b {pm.default_columns([b])}")
    got = pm.chosen_columns("lr, eval/*,loss,eval/tasks/acc", [series, b])
    check(got == ["lr", "eval/tasks/acc", "eval/wiki/loss", "loss"], f"--metrics columns {got}")
    try:
        pm.chosen_columns("loss,nope", [series, b])
        check(False, "an unknown --metrics column was accepted")
    except pm.MetricsError as e:
        check("nope" in str(e), f"unknown column error: {e}")
    try:
        pm.load_series(os.path.join(run_b, "missing", "metrics.jsonl"))
        check(False, "a missing metrics.jsonl loaded")
    except pm.MetricsError as e:
        check("metrics.jsonl" in str(e), f"missing file error: {e}")
    labels = pm.run_labels([run_a, run_b + "/", os.path.join(run_a, "metrics.jsonl")])
    check(labels[1] == "run_b", f"labels {labels}")
    check(labels[0] != labels[2] and all(labels), f"colliding labels kept apart: {labels}")
    print("ok load_series, default and chosen columns, labels")


def cli(script, args, env=None):
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                          timeout=60, env=env)


def check_png(path, where):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with open(path, "rb") as f:
        check(f.read(8) == PNG_SIGNATURE, f"{where}: {path} is not a PNG")
    img = plt.imread(path)
    check(img.ndim == 3 and img.shape[0] > 0 and img.shape[1] > 0, f"{where}: image {img.shape}")
    return img.shape


def check_error(p, where, *needles):
    lines = p.stderr.splitlines()
    check(p.returncode == 2, f"{where}: exit {p.returncode}, expected 2\n{p.stdout}{p.stderr}")
    check(len(lines) == 1 and lines[0].startswith("plot_metrics.py: error: "),
          f"{where}: expected one error line, got {lines}")
    for n in needles:
        check(n in lines[0], f"{where}: {n!r} not in {lines[0]!r}")


def check_cli(script, tmp, run_a, run_b):
    out = os.path.join(tmp, "curves.png")
    p = cli(script, [run_a, run_b, "--out", out])
    check(p.returncode == 0, f"plot: exit {p.returncode}\n{p.stdout}{p.stderr}")
    warnings = p.stderr.splitlines()
    check(len(warnings) == 1 and "warning" in warnings[0] and "5 row" in warnings[0],
          f"plot: expected one warning for 5 skipped rows, got {warnings}")
    check("4 panel" in p.stdout, f"plot: stdout {p.stdout!r}")
    shape = check_png(out, "plot")
    print(f"ok plot: 2 runs, 4 panels, {shape[1]}x{shape[0]} PNG")

    out2 = os.path.join(tmp, "chosen.png")
    p = cli(script, [run_b, "--out", out2, "--metrics", "grad_norm,host_syncs_by_cause/*"])
    check(p.returncode == 0 and p.stderr == "", f"--metrics: exit {p.returncode}\n{p.stderr}")
    check("3 panel" in p.stdout, f"--metrics: stdout {p.stdout!r}")
    check_png(out2, "--metrics")
    print("ok --metrics with a glob")

    missing = os.path.join(tmp, "no_such_run")
    out3 = os.path.join(tmp, "missing.png")
    p = cli(script, [run_a, missing, "--out", out3])
    check_error(p, "missing metrics.jsonl", os.path.join(missing, "metrics.jsonl"))
    check(not os.path.exists(out3), "an image was written for a missing run")
    p = cli(script, [run_b, "--out", out3, "--metrics", "loss,val_los"])
    check_error(p, "unknown column", "val_los")
    check(not os.path.exists(out3), "an image was written for an unknown column")
    print("ok errors: missing metrics.jsonl, unknown column (exit 2, one line)")

    stub = os.path.join(tmp, "stub", "matplotlib")
    os.makedirs(stub)
    with open(os.path.join(stub, "__init__.py"), "w") as f:
        f.write("raise ImportError('no matplotlib here')\n")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(stub))
    p = cli(script, [run_b, "--out", out3], env=env)
    check_error(p, "no matplotlib", "python3-matplotlib")
    check(not os.path.exists(out3), "an image was written without matplotlib")
    print("ok no matplotlib: exit 2, one line naming python3-matplotlib")


def main():
    scripts = sys.argv[1]
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        print("SKIP: python3-matplotlib is not installed")
        return 77
    sys.path.insert(0, scripts)
    import plot_metrics as pm
    script = os.path.join(scripts, "plot_metrics.py")
    with tempfile.TemporaryDirectory(prefix="kktrain_plot_") as tmp:
        run_a, run_b = os.path.join(tmp, "run_a"), os.path.join(tmp, "run_b")
        write_rows(os.path.join(run_a, "metrics.jsonl"), run_a_rows())
        write_rows(os.path.join(run_b, "metrics.jsonl"),
                   [train_row(s, 9.5 - s) for s in (1, 3, 5, 7, 9)])
        try:
            check_loading(pm, run_a, run_b)
            check_cli(script, tmp, run_a, run_b)
        except Failure as e:
            print(f"FAIL: {e}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
