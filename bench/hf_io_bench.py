#!/usr/bin/python3
"""Hugging Face model I/O and the data loader, each against its plain peer, in one run:

  load     a ~110M-parameter Llama safetensors directory (bf16, two shards; made here with
           tests/hf/hf_files.py) loaded by `kktrain train ... model.init_from=DIR` on 1 and 2
           ranks (its log line: bytes read, seconds, peak RSS of the largest rank), against
           `cat` of the same files to /dev/null; cold (page cache dropped first, as root) and warm.
  export   `kktrain export RUN --format safetensors` of that model's checkpoint (bytes of tensor
           data and seconds from its log line), against a plain sequential write of the same
           number of bytes in 8 MiB blocks with fsync, to the same disk.
  data     bench_data: windows of T + 1 tokens drawn by io/data.hpp from a 3 GiB uint16 file of
           random tokens, against numpy.memmap windows (nanoGPT's get_batch) of the same file;
           cold (page cache dropped) and warm.

    bench/hf_io_bench.py [--build build] [--dir /tmp] [--skip-data] [--steps 200]

Cold runs need root (echo 3 > /proc/sys/vm/drop_caches); without it only warm numbers print.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "hf"))

MODEL = dict(V=32000, C=768, L=12, H=12, KV=12, F=2048, max_pos=128, tied=True)


def drop_caches():
    if os.geteuid() != 0:
        return False
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    return True


def timed(cmd, **kw):
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return time.monotonic() - t0, p


def make_model(path):
    import numpy as np
    import hf_files as hf
    cfg = hf.llama_config(**MODEL, torch_dtype="bfloat16")
    rng = np.random.default_rng(0)
    weights = {}
    for n in hf.weight_names(cfg):
        shape = hf.weight_shape(cfg, n)
        weights[n] = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)
    hf.write_llama_dir(path, cfg, weights, "BF16", shards=2)
    return sum(v.size for v in weights.values())


def kktrain_load(build, ranks, model, out):
    conf = os.path.join(out, "c.yaml")
    os.makedirs(out, exist_ok=True)
    with open(conf, "w") as f:
        f.write("data:\n  seq_len: 16\n  micro_batch_size: 1\n"
                "optimizer:\n  _target_: SGD\n  lr: 0.0\n"
                "train:\n  max_steps: 0\n  val_every: 0\n  progress: 'off'\n")
    cmd = [os.path.join(build, "kktrain"), "train", conf, f"model.init_from={model}",
           f"data.global_batch_size={ranks}", f"train.output_dir={os.path.join(out, 'run')}",
           "checkpoint.resume=none"]
    if ranks > 1:
        cmd = ["mpirun", "-np", str(ranks), "--oversubscribe"] + (
            ["--allow-run-as-root"] if os.geteuid() == 0 else []) + cmd
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    _, p = timed(cmd, env=env, timeout=3600)
    m = re.search(r"model.init_from: .*?: ([\d.]+) MiB of weights read by \d+ ranks? in ([\d.]+) s"
                  r" \(\d+ MiB/s\); peak RSS ([\d.]+) MiB", p.stderr)
    if not m:
        raise RuntimeError("no load line:\n" + p.stderr[-3000:])
    return float(m.group(1)), float(m.group(2)), float(m.group(3)), os.path.join(out, "run")


def cat_files(model):
    files = [os.path.join(model, f) for f in sorted(os.listdir(model)) if f.endswith(".safetensors")]
    t, _ = timed(["sh", "-c", "cat \"$@\" > /dev/null", "cat", *files])
    return t, sum(os.path.getsize(f) for f in files)


def bench_load(build, tmp):
    model = os.path.join(tmp, "model")
    t0 = time.monotonic()
    params = make_model(model)
    print(f"model: {params / 1e6:.1f}M parameters, bf16, 2 shards (written in "
          f"{time.monotonic() - t0:.0f} s)")
    rows = []
    run_dir = None
    for cold in (True, False):
        if cold and not drop_caches():
            continue
        tc, nbytes = cat_files(model)
        rows.append(("cat > /dev/null", "cold" if cold else "warm", nbytes / 2**20, tc, None))
        for ranks in (1, 2):
            if cold:
                drop_caches()
            mib, secs, rss, run_dir = kktrain_load(build, ranks, model,
                                                   os.path.join(tmp, f"load{ranks}"))
            rows.append((f"kktrain {ranks} rank{'s' if ranks > 1 else ''}",
                         "cold" if cold else "warm", mib, secs, rss))
    print("\n| load | cache | MiB | seconds | MiB/s | peak RSS MiB (largest rank) | vs cat |")
    print("|---|---|---|---|---|---|---|")
    cat = {r[1]: r[3] for r in rows if r[0].startswith("cat")}
    for who, cache, mib, secs, rss in rows:
        ratio = f"{secs / cat[cache]:.2f}x the time" if not who.startswith("cat") else ""
        print(f"| {who} | {cache} | {mib:.1f} | {secs:.2f} | {mib / secs:.0f} | "
              f"{'' if rss is None else f'{rss:.1f}'} | {ratio} |")
    return run_dir


def bench_export(build, tmp, run_dir):
    out = os.path.join(tmp, "export")
    _, p = timed([os.path.join(build, "kktrain"), "export", run_dir, "--format", "safetensors",
                  "--out", out], timeout=3600)
    m = re.search(r"(\d+) bytes of weights in ([\d.]+) s", p.stderr)
    nbytes, secs = int(m.group(1)), float(m.group(2))
    path = os.path.join(tmp, "plain.bin")
    block = os.urandom(8 << 20)
    t0 = time.monotonic()
    with open(path, "wb") as f:
        left = nbytes
        while left > 0:
            f.write(block[:min(left, len(block))])
            left -= len(block)
        f.flush()
        os.fsync(f.fileno())
    plain = time.monotonic() - t0
    os.remove(path)
    print("\n| export (safetensors, bf16) | MiB | seconds | MiB/s |\n|---|---|---|---|")
    print(f"| kktrain export | {nbytes / 2**20:.1f} | {secs:.2f} | {nbytes / 2**20 / secs:.0f} |")
    print(f"| plain write + fsync | {nbytes / 2**20:.1f} | {plain:.2f} | "
          f"{nbytes / 2**20 / plain:.0f} |")
    print(f"kktrain export throughput / plain write: {plain / secs:.2f}")


def numpy_windows(path, T, B, steps):
    import numpy as np
    code = (
        "import numpy as np, time, sys\n"
        f"path, T, B, steps = {path!r}, {T}, {B}, {steps}\n"
        "t0 = time.monotonic(); s = 0\n"
        "for k in range(steps):\n"
        "    data = np.memmap(path, dtype=np.uint16, mode='r')\n"
        "    rng = np.random.default_rng(k)\n"
        "    ix = rng.integers(0, len(data) - T - 1, B)\n"
        "    x = np.stack([data[i:i + T].astype(np.int64) for i in ix])\n"
        "    y = np.stack([data[i + 1:i + 1 + T].astype(np.int64) for i in ix])\n"
        "    s += int(x[0, 0])\n"
        "t = time.monotonic() - t0\n"
        "print(f'windows {B * steps} seconds {t:.6f} windows_per_s {B * steps / t:.1f}')\n")
    del np
    _, p = timed([sys.executable, "-c", code], timeout=3600)
    return float(re.search(r"windows_per_s ([\d.]+)", p.stdout).group(1))


def bench_data(build, tmp, steps):
    path = os.path.join(tmp, "tokens.u16")
    t0 = time.monotonic()
    with open(path, "wb") as f:
        chunk = 64 << 20
        for _ in range((3 << 30) // chunk):
            f.write(os.urandom(chunk))
    print(f"\ndata: 3 GiB of random uint16 tokens (written in {time.monotonic() - t0:.0f} s)")
    T, B = 1024, 8
    exe = os.path.join(build, "bench", "bench_data")
    print(f"\n| data loader, T={T}, B={B}, {steps} batches | cache | kktrain windows/s | "
          "numpy.memmap windows/s | ratio |\n|---|---|---|---|---|")
    for cold in (True, False):
        if cold and not drop_caches():
            continue
        _, p = timed([exe, path, "65536", str(T), str(B), str(steps)], timeout=3600)
        kk = float(re.search(r"windows_per_s ([\d.]+)", p.stdout).group(1))
        if cold:
            drop_caches()
        peer = numpy_windows(path, T, B, steps)
        print(f"| | {'cold' if cold else 'warm'} | {kk:.0f} | {peer:.0f} | {kk / peer:.2f} |")
    os.remove(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--skip-data", action="store_true")
    ap.add_argument("--steps", type=int, default=200)
    a = ap.parse_args()
    print("load average before: " + open("/proc/loadavg").read().strip())
    tmp = tempfile.mkdtemp(prefix="kk_hf_bench_", dir=a.dir)
    try:
        run_dir = bench_load(a.build, tmp)
        bench_export(a.build, tmp, run_dir)
        if not a.skip_data:
            bench_data(a.build, tmp, a.steps)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("load average after: " + open("/proc/loadavg").read().strip())


if __name__ == "__main__":
    main()
