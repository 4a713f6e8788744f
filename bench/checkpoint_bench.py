#!/usr/bin/env python3
"""Checkpoint save and load throughput at 1 and 2 ranks, and `kktrain export`'s throughput and
peak memory, against a plain sequential write and read of the same number of bytes to the same
disk, in the same run.

kktrain's side: `kktrain train` on a parameter-heavy model (pattern A: bf16 parameters, fp32
moments, int16 remainders: 12 bytes per parameter on disk) for one step, which saves a
checkpoint at the end and logs "checkpoint: ... in S s"; then a second run resumes from it and
logs "resumed from ... (S s)". The save time covers everything a save does: device-to-host
copies, checksums, rank 0's HDF5 metadata, every rank's pwrite of its rows, fsync of the file and
directories, renames, the `latest` pointer. The peer: Python writes the same byte count in 8 MiB
blocks and fsyncs it, then reads it back (page cache warm, as kktrain's load right after its save
is). Then `kktrain export` of the 1-rank checkpoint (bf16 and float32): wall time and the
process's peak RSS (wait4), the export file's bytes per second against the same plain write.

    bench/checkpoint_bench.py [--build build] [--rounds 3] [--dir /tmp] [--small]
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")


def model_overrides(small):
    if small:
        return ["model.hidden_size=64", "model.num_layers=2", "model.num_heads=4",
                "model.num_kv_heads=4", "model.intermediate_size=160"]
    return ["model.hidden_size=512", "model.num_layers=8", "model.num_heads=8",
            "model.num_kv_heads=8", "model.intermediate_size=1376"]


def kktrain(build, ranks, out, extra):
    cmd = [os.path.join(build, "kktrain"), "train",
           os.path.join(ROOT, "inputs", "pattern_a_fused_adam_bf16.yaml"), *extra,
           "data.seq_len=16", "data.micro_batch_size=1", "data.global_batch_size=2",
           "train.val_every=0", "train.progress=off", f"train.output_dir={out}"]
    if ranks > 1:
        cmd = ["mpirun", "-np", str(ranks), "--oversubscribe"] + (
            ["--allow-run-as-root"] if os.geteuid() == 0 else []) + cmd
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(f"kktrain failed ({p.returncode}):\n{p.stderr[-2000:]}")
    return p.stderr


def seconds(pattern, log):
    m = re.search(pattern, log)
    if not m:
        raise RuntimeError(f"no {pattern!r} in the log:\n{log[-2000:]}")
    return float(m.group(1))


def plain_io(path, nbytes):
    block = os.urandom(8 << 20)
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        left = nbytes
        while left > 0:
            n = min(left, len(block))
            f.write(block[:n])
            left -= n
        f.flush()
        os.fsync(f.fileno())
    t1 = time.perf_counter()
    with open(path, "rb") as f:
        while f.read(8 << 20):
            pass
    t2 = time.perf_counter()
    os.remove(path)
    return t1 - t0, t2 - t1


def export_run(build, ckpt_dir, out, extra):
    """(seconds, peak RSS bytes, file bytes) of one `kktrain export`."""
    cmd = [os.path.join(build, "kktrain"), "export", ckpt_dir, "--out", out, *extra]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    s = time.perf_counter() - t0
    err = p.stderr.read().decode()
    p.stderr.close()
    if status != 0:
        raise RuntimeError(f"kktrain export failed ({status}):\n{err[-2000:]}")
    return s, usage.ru_maxrss * 1024, os.path.getsize(out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dir", default=tempfile.gettempdir(), help="where files are written")
    p.add_argument("--small", action="store_true", help="a tiny model (smoke test)")
    a = p.parse_args()
    rows = {1: [], 2: []}
    exports = {"bfloat16": [], "float32": []}
    for _ in range(a.rounds):
        for ranks in (1, 2):
            tmp = tempfile.mkdtemp(prefix="kktrain_ckbench_", dir=a.dir)
            try:
                out = os.path.join(tmp, "run")
                log = kktrain(a.build, ranks, out,
                              model_overrides(a.small) + ["train.max_steps=1",
                                                          "checkpoint.resume=none"])
                save_s = seconds(r"checkpoint: step 1 -> .* in ([0-9.]+) s\)", log)
                ck = os.path.join(out, "checkpoints", "step_00000001", "checkpoint.h5")
                nbytes = os.path.getsize(ck)
                log = kktrain(a.build, ranks, out,
                              model_overrides(a.small) + ["train.max_steps=1",
                                                          "checkpoint.resume=auto"])
                load_s = seconds(r"resumed from .* \(([0-9.]+) s\)", log)
                w_s, r_s = plain_io(os.path.join(tmp, "plain.bin"), nbytes)
                rows[ranks].append((nbytes, save_s, load_s, w_s, r_s))
                if ranks == 1:
                    for dtype in exports:
                        e_s, rss, ebytes = export_run(a.build, out, os.path.join(tmp, "e.h5"),
                                                      ["--dtype", dtype])
                        pw_s, _ = plain_io(os.path.join(tmp, "plain_e.bin"), ebytes)
                        exports[dtype].append((ebytes, e_s, rss, pw_s))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    print("model:", " ".join(model_overrides(a.small)), "| pattern A (12 bytes/param on disk)")
    print(f"{'ranks':>5} {'MB':>8} {'save MB/s':>10} {'plain write':>12} {'ratio':>6} "
          f"{'load MB/s':>10} {'plain read':>11} {'ratio':>6}")
    for ranks, xs in rows.items():
        mb = statistics.median(x[0] for x in xs) / 1e6
        save = statistics.median(x[0] / x[1] for x in xs) / 1e6
        load = statistics.median(x[0] / x[2] for x in xs) / 1e6
        pw = statistics.median(x[0] / x[3] for x in xs) / 1e6
        pr = statistics.median(x[0] / x[4] for x in xs) / 1e6
        print(f"{ranks:>5} {mb:>8.1f} {save:>10.1f} {pw:>12.1f} {save / pw:>6.2f} "
              f"{load:>10.1f} {pr:>11.1f} {load / pr:>6.2f}", flush=True)
    print("MB/s = checkpoint file bytes / seconds (medians over rounds); plain = Python "
          "sequential write+fsync and read of the same bytes in the same directory.")
    print(f"{'export':>8} {'MB':>8} {'MB/s':>8} {'plain write':>12} {'ratio':>6} "
          f"{'peak RSS MiB':>13}")
    for dtype, xs in exports.items():
        mb = statistics.median(x[0] for x in xs) / 1e6
        rate = statistics.median(x[0] / x[1] for x in xs) / 1e6
        pw = statistics.median(x[0] / x[3] for x in xs) / 1e6
        rss = statistics.median(x[2] for x in xs) / (1 << 20)
        print(f"{dtype:>8} {mb:>8.1f} {rate:>8.1f} {pw:>12.1f} {rate / pw:>6.2f} {rss:>13.1f}")
    print("export: `kktrain export` of the 1-rank checkpoint (whole process: start, checksums, "
          "conversion, write, fsync, rename); peak RSS from wait4.")


if __name__ == "__main__":
    sys.exit(main())
