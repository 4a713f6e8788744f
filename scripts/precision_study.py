#!/usr/bin/python3
"""The precision study: one model, one text, five precision patterns, one or more seeds.

Trains kktrain's default model (inputs/default.yaml: 0.76M parameters, byte-level) on real text
that every Debian machine ships (the licence texts in /usr/share/common-licenses, from the
essential base-files package), the same seeds and schedule for every pattern:

  A            TE FusedAdam, bf16 storage, fp32 master as bf16 + int16 remainder, fp32 moments
  A-bf16-mom   the same with bf16 moments
  B            torch AdamW, fp32 storage (fp32 moments)
  risky        torch AdamW, bf16 storage (so bf16 moments, no master): the warned pattern
  SR           torch AdamW, bf16 storage with stochastic rounding of the parameter update

The learning rate decays (cosine) to min_lr late in the run, where an update is a small fraction
of a bf16 weight's spacing: that is where rounding updates away shows, and kktrain measures it as
it happens: every logged step's metrics row carries update_lost_frac (the share of bf16
parameters without an fp32 master whose nonzero update rounding left unchanged) and
ema_lost_frac (the same for bf16 moments), counted inside the optimizer's update. The study logs
100 steps of each run. Writes, under --out: study.md (final and best validation loss, final
training loss, update_lost_frac and ema_lost_frac over the run and at its end, bytes per
parameter of the allocated parameters, gradients and optimizer state as `kktrain audit` plans
them (equal to what train allocates, a tested invariant), measured peak RSS and tokens/s per
pattern), study.png (validation loss, training loss and the lost fractions over the steps, the
learning rate beside them), study.json (everything), and each run's directory. With several seeds (--seeds) the table gives
each pattern's mean over the seeds and their range, the plot the mean curve and the range as a
band: differences between patterns smaller than the spread between seeds are trajectory noise.

    scripts/precision_study.py [--steps 600] [--lr 2e-3] [--min-lr 2e-5] [--out runs/precision_study]
    scripts/precision_study.py --seeds 1234,1235,1236 --jobs 2   # three seeds, two runs at a time
    scripts/precision_study.py --long          # 3000 steps
    scripts/precision_study.py --steps 40 --patterns A,risky   # a smoke run (CI)

--jobs N runs N trainings at once (default: as many as the CPUs this process may use), each
limited to one thread (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, KOKKOS_NUM_THREADS = 1); the
default model's products run on one thread anyway (kktrain splits a product only from 64M
multiply-adds), so the losses are the same bits as with --jobs 1, and only tokens/s changes.
The default setting (5 patterns, 600 steps, one seed) takes about 7 minutes on 2 cores.
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FUSED = "transformer_engine.pytorch.optimizers.fused_adam.FusedAdam"
# The metrics columns of updates lost to bf16 rounding (docs/cli.md, metrics.jsonl).
LOST_KEYS = ("update_lost_frac", "ema_lost_frac", "sr_unchanged_frac", "master_held_frac")

PATTERNS = {
    "A": ("FusedAdam, bf16 + int16 remainder master, fp32 moments",
          ["model.dtype=bfloat16", f"optimizer._target_={FUSED}", "optimizer.master_weights=true",
           "optimizer.store_param_remainders=true"]),
    "A-bf16-mom": ("FusedAdam, bf16 + remainder master, bf16 moments",
                   ["model.dtype=bfloat16", f"optimizer._target_={FUSED}",
                    "optimizer.master_weights=true", "optimizer.store_param_remainders=true",
                    "optimizer.exp_avg_dtype=bfloat16", "optimizer.exp_avg_sq_dtype=bfloat16"]),
    "B": ("AdamW, fp32 storage", ["model.dtype=float32"]),
    "risky": ("AdamW, bf16 storage (bf16 moments, no master)", ["model.dtype=bfloat16"]),
    "SR": ("AdamW, bf16 storage, stochastic rounding",
           ["model.dtype=bfloat16", "optimizer.stochastic_rounding=true"]),
}


def corpus(path):
    """The licence texts of /usr/share/common-licenses, each file once (symlinks resolved)."""
    src = "/usr/share/common-licenses"
    seen, parts = set(), []
    for name in sorted(os.listdir(src)):
        real = os.path.realpath(os.path.join(src, name))
        if real in seen or not os.path.isfile(real):
            continue
        seen.add(real)
        with open(real, "rb") as f:
            parts.append(f.read())
    data = b"\n".join(parts)
    with open(path, "wb") as f:
        f.write(data)
    return len(data), len(parts)


def run(cmd, env):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"precision_study: {' '.join(cmd)} failed (exit {p.returncode}):\n{p.stderr}")
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=os.path.join(ROOT, "runs", "precision_study"))
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--long", action="store_true", help="3000 steps")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr", type=float, default=2e-5)
    ap.add_argument("--seeds", default="1234", help="comma-separated model and data seeds")
    ap.add_argument("--seed", type=int, help="one seed (the same as --seeds SEED)")
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)),
                    help="trainings run at once, 1 thread each (default: the CPUs this process "
                         "may use)")
    ap.add_argument("--patterns", default=",".join(PATTERNS))
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--check", action="store_true",
                    help="fail unless every run gave finite losses and each pattern's bytes per "
                         "parameter is its arithmetic (docs/precision.md): the CI smoke test")
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite study.md and study.png from the study.json under --out, "
                         "without training")
    a = ap.parse_args()
    if a.report_only:
        with open(os.path.join(a.out, "study.json")) as f:
            d = json.load(f)
        report(d["results"], d["meta"], a.out)
        plot(d["results"], d["meta"], os.path.join(a.out, "study.png"))
        return
    steps = 3000 if a.long else a.steps
    names = a.patterns.split(",")
    for n in names:
        if n not in PATTERNS:
            sys.exit(f"precision_study: unknown pattern {n!r} (known: {', '.join(PATTERNS)})")
    kk = os.path.join(a.build, "kktrain")
    os.makedirs(a.out, exist_ok=True)
    text = os.path.join(a.out, "corpus.txt")
    nbytes, nfiles = corpus(text)
    config = os.path.join(ROOT, "inputs", "default.yaml")
    val_every = max(1, steps // 20)
    seeds = [a.seed] if a.seed is not None else [int(x) for x in a.seeds.split(",")]
    common = [f"data.path={text}", "data.format=text", f"train.max_steps={steps}",
              f"train.val_every={val_every}", f"train.log_every={max(1, steps // 100)}",
              f"optimizer.lr={a.lr}", f"lr_scheduler.min_lr={a.min_lr}",
              "lr_scheduler.lr_decay_style=cosine", f"lr_scheduler.lr_warmup_steps={steps // 20}",
              "checkpoint.save_every=0"]
    env = dict(os.environ)
    if a.jobs > 1:
        env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", KOKKOS_NUM_THREADS="1")

    def one(n, seed):
        desc, ov = PATTERNS[n]
        out = os.path.join(a.out, n if len(seeds) == 1 else f"{n}_seed{seed}")
        sv = [f"model.seed={seed}", f"data.seed={seed}"]
        run([kk, "train", config, *common, *sv, *ov, f"train.output_dir={out}",
             "checkpoint.resume=none"], env)
        rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if l.strip()]
        val = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
        train = [r for r in rows if "loss" in r]
        audit = json.loads(run([kk, "audit", config, *common, *sv, *ov, "--json"], env).stdout)
        t = audit["totals"]
        state = t["bytes_params"] + t["bytes_grads"] + t["bytes_moments"] + t["bytes_master"]
        tail = train[len(train) - max(1, len(train) // 10):]  # the last tenth of the logged steps
        r = {"seed": seed, "val": val, "final_val": val[-1][1], "best_val": min(v for _, v in val),
             "final_train": train[-1]["loss"], "elements": t["elements"],
             "train": [(x["step"], x["loss"]) for x in train],
             "lr": [(x["step"], x["lr"]) for x in train],
             "lost": {k: [x[k] for x in train] for k in LOST_KEYS},
             "lost_mean": {k: statistics.mean(x[k] for x in train) for k in LOST_KEYS},
             "lost_end": {k: statistics.mean(x[k] for x in tail) for k in LOST_KEYS},
             "bytes_per_param": state / t["elements"],
             "peak_rss_mib": max(r["peak_rss_bytes"] for r in train) / 2**20,
             "tokens_per_s": statistics.median(r["tokens_per_s"] for r in train[len(train) // 10:])}
        print(f"[{n} seed {seed}] final val {r['final_val']:.4f}, best {r['best_val']:.4f}, "
              f"{r['bytes_per_param']:.2f} B/param, peak RSS {r['peak_rss_mib']:.1f} MiB, "
              f"{r['tokens_per_s']:.0f} tok/s", flush=True)
        return r

    print(f"{len(names)} patterns x {len(seeds)} seeds, {steps} steps each, {a.jobs} at a time",
          flush=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        futures = {(n, s): pool.submit(one, n, s) for n in names for s in seeds}
        runs = {key: f.result() for key, f in futures.items()}
    results = {}
    for n in names:
        per = [runs[(n, s)] for s in seeds]
        finals, bests = [r["final_val"] for r in per], [r["best_val"] for r in per]
        steps_v = [s for s, _ in per[0]["val"]]
        results[n] = {
            "description": PATTERNS[n][0], "overrides": PATTERNS[n][1], "runs": per,
            "val": [(st, statistics.mean(r["val"][i][1] for r in per)) for i, st in
                    enumerate(steps_v)],
            "val_min": [min(r["val"][i][1] for r in per) for i in range(len(steps_v))],
            "val_max": [max(r["val"][i][1] for r in per) for i in range(len(steps_v))],
            "final_val": statistics.mean(finals), "final_val_range": [min(finals), max(finals)],
            "best_val": statistics.mean(bests), "best_val_range": [min(bests), max(bests)],
            "final_train": statistics.mean(r["final_train"] for r in per),
            "train": [(st, statistics.mean(r["train"][i][1] for r in per))
                      for i, (st, _) in enumerate(per[0]["train"])],
            "lr": per[0]["lr"],
            "lost": {k: [statistics.mean(r["lost"][k][i] for r in per)
                         for i in range(len(per[0]["train"]))] for k in LOST_KEYS},
            "lost_mean": {k: statistics.mean(r["lost_mean"][k] for r in per) for k in LOST_KEYS},
            "lost_end": {k: statistics.mean(r["lost_end"][k] for r in per) for k in LOST_KEYS},
            "bytes_per_param": per[0]["bytes_per_param"],
            "peak_rss_mib": max(r["peak_rss_mib"] for r in per),
            "tokens_per_s": statistics.median(r["tokens_per_s"] for r in per),
        }
    meta = {"steps": steps, "lr": a.lr, "min_lr": a.min_lr, "seeds": seeds, "jobs": a.jobs,
            "corpus": f"/usr/share/common-licenses: {nfiles} files, {nbytes} bytes",
            "parameters": runs[(names[0], seeds[0])]["elements"]}
    with open(os.path.join(a.out, "study.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    report(results, meta, a.out)
    if a.check:
        # param + grad + moments + master bytes per parameter, every parameter trainable.
        theory = {"A": 2 + 2 + 8 + 2, "A-bf16-mom": 2 + 2 + 4 + 2, "B": 4 + 4 + 8, "risky": 2 + 2 + 4,
                  "SR": 2 + 2 + 4}
        for n, r in results.items():
            ok = all(v == v and v < 1e30 for run_ in r["runs"] for _, v in run_["val"]) and \
                r["tokens_per_s"] > 0
            if not ok or abs(r["bytes_per_param"] - theory[n]) > 1e-9:
                sys.exit(f"precision_study --check: {n}: losses {r['val']}, "
                         f"{r['bytes_per_param']} bytes/param (theory {theory[n]})")
            # Only the risky pattern can lose parameter updates; bf16 moments only where kept.
            lost = r["lost_mean"]
            if (lost["update_lost_frac"] > 0) != (n == "risky") or \
                    (lost["ema_lost_frac"] > 0) != (n in ("risky", "SR", "A-bf16-mom")):
                sys.exit(f"precision_study --check: {n}: lost fractions {lost}")
    if not a.no_plot:
        plot(results, meta, os.path.join(a.out, "study.png"))


def report(results, meta, out):
    """study.md (and stdout): the table; with several seeds also each pattern's difference from
    pattern A seed by seed (the same initialization and data order: a paired comparison)."""
    seeds = meta["seeds"]
    several = len(seeds) > 1
    seed_text = (f"seeds {', '.join(map(str, seeds))} (mean, and the range over seeds)" if several
                 else f"seed {seeds[0]}")
    lines = [f"Default model ({meta['parameters']} parameters), {meta['corpus']}, "
             f"{meta['steps']} steps, lr {meta['lr']:g} cosine to {meta['min_lr']:g}, {seed_text}, "
             "bf16 compute. Lost fractions: mean over the logged steps / over the last tenth of "
             "them.", "",
             "| pattern | what | final val loss | best val loss | final train loss | "
             "update_lost_frac | ema_lost_frac | bytes/param | peak RSS MiB | tok/s |",
             "|---|---|---|---|---|---|---|---|---|---|"]

    def cell(r, key):
        lo, hi = r.get(key + "_range", (None, None))
        return f"{r[key]:.4f}" + (f" ({lo:.4f}-{hi:.4f})" if several else "")

    def lost(r, key):
        if "lost_mean" not in r:  # a study.json from before the lost-update columns
            return "-"
        return f"{r['lost_mean'][key]:.4f} / {r['lost_end'][key]:.4f}"

    for n, r in results.items():
        lines.append(f"| {n} | {r['description']} | {cell(r, 'final_val')} | "
                     f"{cell(r, 'best_val')} | {r['final_train']:.4f} | "
                     f"{lost(r, 'update_lost_frac')} | {lost(r, 'ema_lost_frac')} | "
                     f"{r['bytes_per_param']:.2f} | {r['peak_rss_mib']:.1f} | "
                     f"{r['tokens_per_s']:.0f} |")
    if several and "A" in results:
        lines += ["", f"Minus pattern A's, seed by seed ({', '.join(map(str, seeds))}):", "",
                  "| pattern | final val loss | final train loss |", "|---|---|---|"]
        base = results["A"]["runs"]
        for n, r in results.items():
            if n == "A":
                continue
            d = {k: " ".join(f"{x[k] - b[k]:+.4f}" for x, b in zip(r["runs"], base))
                 for k in ("final_val", "final_train")}
            lines.append(f"| {n} | {d['final_val']} | {d['final_train']} |")
    with open(os.path.join(out, "study.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def smooth(values, k=5):
    """Running mean over k logged steps (the step loss is one batch's: noisy)."""
    out = []
    for i in range(len(values)):
        window = values[max(0, i - k + 1):i + 1]
        out.append(sum(window) / len(window))
    return out


def plot(results, meta, path):
    """Outcome and mechanism side by side: validation loss (one line per pattern, the mean over
    seeds, the range over seeds as a band), training loss over the second half of the run, where
    the patterns part (mean over seeds, a running mean over 5 logged steps), and the fractions of updates lost to bf16 rounding (update_lost_frac solid,
    ema_lost_frac dashed; patterns that lose nothing are 0 and drawn only in the legend's note)
    with the learning rate behind them."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    several = len(meta["seeds"]) > 1
    has_lost = all("lost" in r for r in results.values())
    fig, axes = plt.subplots(1, 3 if has_lost else 1, figsize=(16, 4.4) if has_lost else (7, 4.2),
                             dpi=110, squeeze=False)
    axes = axes[0]
    color = {n: f"C{list(PATTERNS).index(n)}" for n in results}  # the same colour in every plot
    ax = axes[0]
    for n, r in results.items():
        xs = [s for s, _ in r["val"]]
        ax.plot(xs, [v for _, v in r["val"]], color=color[n], label=f"{n}: {r['description']}")
        if several:
            ax.fill_between(xs, r["val_min"], r["val_max"], color=color[n], alpha=0.15)
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (nats/byte)" + (", mean over seeds" if several else ""))
    ax.set_title(f"{meta['steps']} steps, lr {meta['lr']:g} -> {meta['min_lr']:g}, "
                 + (f"{len(meta['seeds'])} seeds (band: their range)" if several
                    else f"seed {meta['seeds'][0]}"), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    if has_lost:
        ax = axes[1]
        half = meta["steps"] // 2
        for n, r in results.items():
            xs, ys = [s for s, _ in r["train"]], smooth([v for _, v in r["train"]])
            ax.plot([x for x in xs if x >= half], [y for x, y in zip(xs, ys) if x >= half],
                    color=color[n], label=n)
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (running mean of 5 logged steps)")
        ax.set_title(f"outcome: training loss, steps {half} to {meta['steps']}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        ax = axes[2]
        zero = []
        for n, r in results.items():
            xs = [s for s, _ in r["train"]]
            drawn = False
            for key, style in (("update_lost_frac", "-"), ("ema_lost_frac", "--")):
                if max(r["lost"][key]) > 0:
                    ax.plot(xs, r["lost"][key], style, color=color[n], label=f"{n}: {key}")
                    drawn = True
            if not drawn:
                zero.append(n)
        ax.set_ylim(0, 1)
        ax.set_xlabel("step")
        ax.set_ylabel("fraction of updates rounded away")
        ax.set_title("mechanism: updates lost to bf16 rounding"
                     + (f" ({', '.join(zero)}: 0)" if zero else ""), fontsize=10)
        ax.grid(alpha=0.3)
        lr_ax = ax.twinx()
        first = next(iter(results.values()))
        lr_ax.plot([s for s, _ in first["lr"]], [v for _, v in first["lr"]], ":", color="gray",
                   label="learning rate")
        lr_ax.set_ylabel("learning rate", color="gray")
        lines, labels = ax.get_legend_handles_labels()
        lr_lines, lr_labels = lr_ax.get_legend_handles_labels()
        ax.legend(lines + lr_lines, labels + lr_labels, fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    print("wrote", path)


if __name__ == "__main__":
    main()
