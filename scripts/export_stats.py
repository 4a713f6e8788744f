#!/usr/bin/env python3
"""Post-process a kktrain export with h5py and NumPy only: per-layer weight statistics and a
histogram PNG. An example of reading kktrain's files without kktrain.

    scripts/export_stats.py runs/default/export.h5 [--png weights.png] [--json stats.json]

The export holds /params/<canonical name> (Hugging Face Llama names) in its storage dtype:
float32, or bfloat16 as a 16-bit IEEE-style float that h5py reads as float32. Root attributes
carry the architecture (hidden_size, num_layers, ...) and storage_dtype; a tied weight appears
once, with an 'alias' attribute naming its other names.

Prints one line per layer: parameter count, mean, std, RMS and max |w| over its projections and
norms, then the embedding and final norm; the PNG shows the distribution of every projection
weight per layer (log-scale counts). Needs Debian's python3-h5py, python3-numpy and, for the
PNG, python3-matplotlib (on Debian, /usr/bin/python3).
"""
import argparse
import json
import re
import sys

import h5py
import numpy as np


def text(v):
    return v.decode() if isinstance(v, bytes) else v


def load(path):
    with h5py.File(path, "r") as f:
        attrs = {k: text(v) for k, v in f.attrs.items()}
        params = {name: np.asarray(ds[...], dtype=np.float32) for name, ds in f["params"].items()}
        dtypes = {name: text(ds.attrs.get("dtype", str(ds.dtype))) for name, ds in f["params"].items()}
        aliases = {name: text(ds.attrs["alias"]) for name, ds in f["params"].items()
                   if "alias" in ds.attrs}
    return attrs, params, dtypes, aliases


def stats(arrays):
    x = np.concatenate([a.ravel() for a in arrays]).astype(np.float64)
    return dict(count=int(x.size), mean=float(x.mean()), std=float(x.std()),
                rms=float(np.sqrt((x * x).mean())), max_abs=float(np.abs(x).max()))


def by_layer(params):
    layers = {}
    for name, a in params.items():
        m = re.match(r"model\.layers\.(\d+)\.", name)
        if m:
            layers.setdefault(int(m.group(1)), []).append((name, a))
    return [layers[k] for k in sorted(layers)]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("export")
    p.add_argument("--png", help="write per-layer weight histograms here")
    p.add_argument("--json", help="write the statistics here")
    a = p.parse_args()
    attrs, params, dtypes, aliases = load(a.export)
    print(f"{a.export}: {attrs.get('format')} (step {attrs.get('step')}), storage "
          f"{attrs.get('storage_dtype')}, hidden {attrs.get('hidden_size')}, "
          f"{attrs.get('num_layers')} layers, {sum(v.size for v in params.values())} parameters")
    for name, alias in aliases.items():
        print(f"  {name} is also {alias}")
    rows = []
    for i, layer in enumerate(by_layer(params)):
        rows.append(dict(layer=i, **stats([arr for _, arr in layer])))
    for extra in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"):
        if extra in params:
            rows.append(dict(layer=extra, **stats([params[extra]])))
    print(f"{'layer':>26} {'count':>9} {'mean':>10} {'std':>9} {'rms':>9} {'max|w|':>8}")
    for r in rows:
        print(f"{str(r['layer']):>26} {r['count']:>9} {r['mean']:>10.2e} {r['std']:>9.4f} "
              f"{r['rms']:>9.4f} {r['max_abs']:>8.4f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(file=a.export, dtypes=dtypes, stats=rows), f, indent=1)
    if a.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        layers = by_layer(params)
        fig, ax = plt.subplots(figsize=(8, 4.5))
        bins = np.linspace(-0.15, 0.15, 121)
        for i, layer in enumerate(layers):
            w = np.concatenate([arr.ravel() for n, arr in layer if arr.ndim == 2])
            ax.hist(w, bins=bins, histtype="step", log=True, label=f"layer {i}")
        ax.set_xlabel("weight value (projections)")
        ax.set_ylabel("count")
        ax.set_title(f"{a.export} ({attrs.get('storage_dtype')})")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(a.png, dpi=100)
        print(f"wrote {a.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
