#!/usr/bin/python3
"""Training curves from one or more runs' metrics.jsonl, without TensorBoard.

    scripts/plot_metrics.py RUN_DIR [RUN_DIR...] --out plot.png [--metrics loss,val_loss,...]

Reads <RUN_DIR>/metrics.jsonl (or RUN_DIR itself when it is a file) of each run and draws one
panel per column, step on x, one line per run labelled by its directory's name. Default panels:
the training loss (`loss`), the validation loss (`val_loss`) when a run has one, and each
evaluation column (`eval/<name>/<metric>`, e.g. `eval/tasks/acc`, `eval/wiki/loss`) in its own
panel. --metrics names the columns instead, comma-separated; a name may be a glob (`eval/*`,
`update_groups/*/unchanged_frac`). Nested objects are columns "key/inner", as in the TensorBoard
event files (`host_syncs_by_cause/validation`).

Columns appear on some rows only (training, validation and evaluation rows share steps), so each
column keeps the steps where it has a finite number, and where a step repeats (the rows after a
resume) the last value wins. Rows that are not JSON objects or lack a numeric "step" are skipped
and counted in one warning per file, printed with the plot (a failed run prints only its error
line). The output format follows --out's extension (png, pdf,
svg). Exit status 0, or 2 with one line on stderr (a missing metrics.jsonl, an unknown column,
no matplotlib: install python3-matplotlib). Needs python3-matplotlib (Debian's /usr/bin/python3).
"""
import argparse
import fnmatch
import json
import math
import os
import sys

PROG = "plot_metrics.py"
TRAIN_LOSS, VAL_LOSS, EVAL_PREFIX = "loss", "val_loss", "eval/"


class MetricsError(Exception):
    """An input that cannot be plotted: main prints one line and exits 2."""


def metrics_path(run):
    """The metrics.jsonl of a run directory (or the file itself)."""
    return run if os.path.isfile(run) else os.path.join(run, "metrics.jsonl")


def flatten(obj, prefix=""):
    """A row's (column, value) pairs, a nested object's as "key/inner"."""
    for k, v in obj.items():
        name = prefix + str(k)
        if isinstance(v, dict):
            yield from flatten(v, name + "/")
        else:
            yield name, v


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def load_series(path):
    """Read one metrics.jsonl: (series, skipped). series maps each column to (steps, values),
    ascending steps, for the rows where the column is a finite number; a repeated step keeps its
    last value. skipped counts the rows that are not JSON objects or have no numeric step (blank
    lines are ignored). Raises MetricsError when the file cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except FileNotFoundError:
        raise MetricsError(f"{path}: no such file (is this a kktrain run directory?)")
    except OSError as e:
        raise MetricsError(f"{path}: cannot read: {e.strerror or e}")
    by_column, skipped = {}, 0
    for line in lines:
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if not isinstance(row, dict) or not is_number(row.get("step")):
            skipped += 1
            continue
        step = row["step"]
        step = int(step) if float(step).is_integer() else step
        for name, v in flatten(row):
            if name != "step" and is_number(v):
                by_column.setdefault(name, {})[step] = v  # a later row at this step wins
    series = {}
    for name, points in by_column.items():
        steps = sorted(points)
        series[name] = (steps, [points[s] for s in steps])
    return series, skipped


def run_labels(runs):
    """Each run's directory name; the path as given where two names collide."""
    def name(r):
        r = os.path.normpath(os.path.abspath(r))
        if os.path.isfile(r):
            r = os.path.dirname(r)
        return os.path.basename(r) or r
    names = [name(r) for r in runs]
    return [n if names.count(n) == 1 else os.path.normpath(r) for n, r in zip(names, runs)]


def default_columns(all_series):
    columns = set().union(*(s.keys() for s in all_series))
    out = [c for c in (TRAIN_LOSS, VAL_LOSS) if c in columns]
    return out + sorted(c for c in columns if c.startswith(EVAL_PREFIX))


def chosen_columns(spec, all_series):
    """--metrics: names or globs, in the order given, each column once. Raises MetricsError
    for a name no run has."""
    columns = set().union(*(s.keys() for s in all_series))
    out = []
    for want in (w.strip() for w in spec.split(",")):
        if not want:
            continue
        if any(ch in want for ch in "*?["):
            hits = sorted(c for c in columns if fnmatch.fnmatchcase(c, want))
        else:
            hits = [want] if want in columns else []
        if not hits:
            raise MetricsError(f"--metrics: no run has a column {want!r} (columns: "
                               f"{', '.join(sorted(columns)) or 'none'})")
        out += [c for c in hits if c not in out]
    return out


def plot(all_series, labels, columns, out):
    """One panel per column, one line per run; writes out. Raises MetricsError without
    matplotlib or when out cannot be written."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MetricsError("matplotlib is missing: install python3-matplotlib "
                           "(apt-get install python3-matplotlib)")
    ncols = 1 if len(columns) <= 2 else 2
    nrows = (len(columns) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(7 * ncols, 3.4 * nrows), dpi=100,
                             squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax, column in zip(flat, columns):
        for i, (series, label) in enumerate(zip(all_series, labels)):
            if column in series:
                steps, values = series[column]
                ax.plot(steps, values, color=f"C{i % 10}", label=label,
                        marker="." if len(steps) < 30 else None)
        ax.set_title(column)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in flat[len(columns):]:
        ax.set_visible(False)
    fig.tight_layout()
    try:
        fig.savefig(out)
    except (OSError, ValueError) as e:
        raise MetricsError(f"{out}: cannot write: {getattr(e, 'strerror', None) or e}")
    finally:
        plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(prog=PROG, description="Plot kktrain metrics.jsonl curves "
                                "(step on x, one line per run, one panel per column).")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR",
                   help="a run's train.output_dir (or its metrics.jsonl)")
    p.add_argument("--out", required=True, help="output image (png, pdf, svg)")
    p.add_argument("--metrics", help="comma-separated columns or globs (default: loss, "
                   "val_loss and every eval/<name>/<metric> column present)")
    a = p.parse_args(argv)
    try:
        all_series, warnings = [], []  # warnings only when the plot is written: else one line
        for run in a.runs:
            path = metrics_path(run)
            series, skipped = load_series(path)
            if skipped:
                warnings.append(f"{PROG}: warning: {path}: {skipped} row(s) skipped (not a JSON "
                                f"object or no numeric step)")
            all_series.append(series)
        columns = (chosen_columns(a.metrics, all_series) if a.metrics
                   else default_columns(all_series))
        if not columns:
            raise MetricsError("nothing to plot: no run has a loss, val_loss or eval/ column "
                               "(choose columns with --metrics)")
        plot(all_series, run_labels(a.runs), columns, a.out)
    except MetricsError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    for w in warnings:
        print(w, file=sys.stderr)
    print(f"{PROG}: wrote {a.out} ({len(columns)} panel(s), {len(a.runs)} run(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
