"""The post-processing example (scripts/export_stats.py) on a real export: train a tiny model,
run the script on <output_dir>/export.h5, and check its statistics against the file and that the
histogram PNG was written.

usage: test_export_example.py KKTRAIN INPUTS_DIR SCRIPTS_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

import h5py
import numpy as np


def main():
    kktrain, inputs, scripts = sys.argv[1:4]
    with tempfile.TemporaryDirectory(prefix="kktrain_example_") as tmp:
        out = os.path.join(tmp, "run")
        subprocess.run([kktrain, "train", os.path.join(inputs, "default.yaml"),
                        "model.hidden_size=32", "model.num_layers=2", "model.num_heads=2",
                        "model.num_kv_heads=1", "model.intermediate_size=64", "data.seq_len=32",
                        "data.micro_batch_size=2", "data.global_batch_size=2", "train.max_steps=3",
                        "checkpoint.resume=none", f"train.output_dir={out}"],
                       check=True, capture_output=True, timeout=120)
        export = os.path.join(out, "export.h5")
        png, js = os.path.join(tmp, "w.png"), os.path.join(tmp, "w.json")
        p = subprocess.run([sys.executable, os.path.join(scripts, "export_stats.py"), export,
                            "--png", png, "--json", js], capture_output=True, text=True,
                           timeout=120)
        if p.returncode != 0:
            print(f"FAIL: export_stats.py exited {p.returncode}\n{p.stdout}\n{p.stderr}")
            return 1
        with open(png, "rb") as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                print("FAIL: no PNG written")
                return 1
        with open(js) as f:
            stats = json.load(f)["stats"]
        with h5py.File(export, "r") as f:
            layer0 = [np.asarray(v[...], np.float64).ravel() for k, v in f["params"].items()
                      if k.startswith("model.layers.0.")]
        want = np.concatenate(layer0)
        got = stats[0]
        if got["count"] != want.size or abs(got["mean"] - want.mean()) > 1e-12 or \
                abs(got["max_abs"] - np.abs(want).max()) > 0:
            print(f"FAIL: layer 0 statistics {got} do not match the file "
                  f"(count {want.size}, mean {want.mean()}, max {np.abs(want).max()})")
            return 1
    print("ok export_stats example")
    return 0


if __name__ == "__main__":
    sys.exit(main())
