"""Hostile inputs to kktrain's readers (issue 33): special files where a file is expected, a token
corpus changed under a running job, safetensors shards of the wrong size, an empty data.path.

usage: test_hostile_readers.py KKTRAIN INPUTS_DIR CASE   (tests/cli/hostile_readers.cmake, label
                                                        "hostile")

- fifo_model: a FIFO as model.safetensors (`kktrain generate DIR`, `kktrain train` with
  model.init_from=DIR on 1 and 2 ranks), as one shard of a sharded directory, and as the YAML
  config: each ends within a few seconds, non-zero, with one error line naming the file and
  saying FIFO (every reader opens its files without blocking and checks their type; nothing
  waits for a writer).
- corpus_changed_1rank, corpus_changed_2ranks: the token file of a running job truncated, and
  rewritten with `cp`, after its first checkpoint: exit 1 (never a signal), one error line naming
  the file and "changed during the run", within distributed.failed_rank_wait_s of the change,
  and the last checkpoint intact (`latest` names it and a run resumes from it). On 2 ranks also a
  read error on rank 1 only (tests/tools/fail_io.c, KKTRAIN_FAIL_IO_SO): the same, one line from
  rank 1.
- safetensors_exact_size: a shard one byte shorter or longer than its header says is refused by
  `kktrain config` with model.init_from (headers only, no tensor read); the exact size passes.
- deep_json: config.json, the index and a safetensors header holding JSON nested 10^5 deep under
  a key kktrain never reads: one error naming the file and the limit of 128 levels.
- many_files: a corpus of more files than the soft limit on open files trains (the limit is
  raised to the hard one); past the hard limit, one error naming both.
- data_path_empty: `data.path: []` (in the YAML or as an override) is one error naming
  data.path; null still means the embedded corpus.
"""

import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

import test_checkpoint as ck
import test_mpi as tm
import test_train as tt
from test_train import check

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = "data:\n  seq_len: 32\n  micro_batch_size: 1\n  global_batch_size: 2\n"
PROMPT_S = 10  # a refusal must end the job within this (measured: well under 1 s)
WAIT_S = 10  # distributed.failed_rank_wait_s of the corpus runs


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def hf_model(path, shards):
    """A tiny Llama directory (tests/hf/hf_files.py; imported here: it loads torch)."""
    sys.path.insert(0, os.path.join(HERE, "..", "hf"))
    import hf_files as hf  # noqa: E402
    cfg = hf.llama_config(V=256, C=32, L=1, H=2, KV=1, F=64, max_pos=64)
    hf.write_llama_dir(path, cfg, hf.random_weights(cfg, seed=1), "F32", shards=shards)


def launch(args, np_=1, timeout=PROMPT_S + 20):
    """(rc, stdout, stderr, seconds) of kktrain on np_ ranks; killed (a failure) after timeout."""
    cmd = [tt.KKTRAIN, *args]
    return tm.launch(tm.mpirun(np_) + cmd if np_ > 1 else cmd, timeout=timeout)


def error_lines(err):
    """The kktrain error lines of stderr (a load error every rank meets is printed once, by the
    lowest failing rank)."""
    return [ln for ln in err.splitlines() if ln.startswith("kktrain") and ": error: " in ln]


def one_error(rc, out, err, seconds, *needles, status=None, where=""):
    """Exit non-zero (or `status`), no signal, one kktrain error line holding every needle."""
    where = f"{where}\nrc={rc}\nstdout:\n{out[-2000:]}\nstderr:\n{err[-4000:]}"
    check(rc > 0 and rc < 128, "expected a non-zero exit status, not a signal" + where)
    check(status is None or rc == status, f"expected exit {status}" + where)
    lines = error_lines(err)
    check(len(lines) == 1, f"expected one error line, got {len(lines)}" + where)
    for n in needles:
        check(n in lines[0], f"the error should name {n!r}" + where)
    check(seconds < PROMPT_S, f"took {seconds:.1f} s" + where)
    return lines[0]


# ---- special files ---------------------------------------------------------------------------


def case_fifo_model():
    with tempfile.TemporaryDirectory(prefix="kktrain_hostile_") as tmp:
        conf = write(os.path.join(tmp, "c.yaml"), CONFIG)
        single, sharded = os.path.join(tmp, "single"), os.path.join(tmp, "sharded")
        hf_model(single, 1)
        hf_model(sharded, 2)
        st = os.path.join(single, "model.safetensors")
        os.remove(st)
        os.mkfifo(st)
        shard = os.path.join(sharded, "model-00002-of-00002.safetensors")
        os.remove(shard)
        os.mkfifo(shard)
        yaml_fifo = os.path.join(tmp, "fifo.yaml")
        os.mkfifo(yaml_fifo)

        def train(model, np_):
            return (["train", conf, f"model.init_from={model}", "train.max_steps=1",
                     f"train.output_dir={os.path.join(tmp, f'out{np_}')}"], np_)

        cases = [("generate", (["generate", single, "--prompt-ids", "1,2",
                                "--max-new-tokens", "2"], 1), st),
                 ("train, 1 rank", train(single, 1), st),
                 ("train, 2 ranks", train(single, 2), st),
                 ("generate, a sharded directory", (["generate", sharded, "--prompt-ids", "1",
                                                     "--max-new-tokens", "2"], 1), shard),
                 ("train, a sharded directory, 2 ranks", train(sharded, 2), shard),
                 ("train, the YAML config", (["train", yaml_fifo], 1), yaml_fifo),
                 ("config, the YAML config", (["config", yaml_fifo], 1), yaml_fifo)]
        for what, (args, np_), path in cases:
            rc, o, e, s = launch(args, np_)
            line = one_error(rc, o, e, s, path, "FIFO", where=f"\n{what}: kktrain {args}")
            print(f"{what}: exit {rc} in {s:.1f} s: {line}")


# ---- a corpus that changes under a run -------------------------------------------------------


def corpus(path, seed, size=1 << 18):
    """size bytes of byte-level text (any byte is a token id < 256)."""
    with open(path, "wb") as f:
        f.write(os.urandom(size) if seed is None else bytes((i * seed) % 251 for i in range(size)))


def start_run(tmp, name, data, np_, env=None):
    """A long 2-sequence-per-rank run on `data` saving every 3 steps (env: extra variables for
    every rank)."""
    out = os.path.join(tmp, name)
    args = ["train", tt.config(tt.DEFAULT), *ck.tiny(np_), f"data.path={data}",
            "data.format=text", "data.val_fraction=0", "train.max_steps=1000000",
            "train.log_every=100000", "train.val_every=0", "checkpoint.save_every=3",
            "checkpoint.resume=auto", f"distributed.failed_rank_wait_s={WAIT_S}",
            f"train.output_dir={out}"]
    cmd = [tt.KKTRAIN, *args]
    env = dict(env or {})
    if np_ > 1:
        cmd = tm.mpirun(np_) + [x for k in env for x in ("-x", k)] + cmd
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, env={**os.environ, **env})
    return p, out


def kill_session(p):
    for pid in tm.session_pids(p.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def wait_for_checkpoint(p, root, timeout=60):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if ck.latest(root):
            return
        if p.poll() is not None:
            out, err = p.communicate()
            raise tt.Failure(f"the run ended before its first checkpoint: rc={p.returncode}\n{err}")
        time.sleep(0.05)
    kill_session(p)
    raise tt.Failure("no checkpoint within 60 s")


def check_corpus_fault(np_, how):
    with tempfile.TemporaryDirectory(prefix="kktrain_hostile_") as tmp:
        data = os.path.join(tmp, "corpus.txt")
        corpus(data, 7)
        env = {}
        if how == "read error on rank 1":  # its 12 header bytes, then ~12 steps' windows
            env = {"LD_PRELOAD": os.environ["KKTRAIN_FAIL_IO_SO"], "KKTRAIN_FAIL_IO_UNDER": data,
                   "KKTRAIN_FAIL_IO_OPS": "read", "KKTRAIN_FAIL_IO_RANK": "1",
                   "KKTRAIN_FAIL_IO_AFTER_BYTES": str(12 + 12 * 2 * 33)}
        t_fault = time.monotonic()
        p, out = start_run(tmp, "run", data, np_, env)
        root = os.path.join(out, "checkpoints")
        wait_for_checkpoint(p, root)
        if how == "read error on rank 1":
            pass  # the fault comes by itself; the time is counted from the start
        elif how == "truncate":
            time.sleep(0.3)  # some steps on the file as it was
            t_fault = time.monotonic()
            os.truncate(data, 1 << 12)
        else:  # cp writes over it in place: truncated to 0, then the new bytes
            time.sleep(0.3)
            t_fault = time.monotonic()
            other = os.path.join(tmp, "other.txt")
            corpus(other, 13, size=(1 << 18) + 4096)
            subprocess.run(["cp", other, data], check=True)
        try:
            o, e = p.communicate(timeout=WAIT_S + 20)
        except subprocess.TimeoutExpired:
            kill_session(p)
            o, e = p.communicate()
            raise tt.Failure(f"{how}, {np_} ranks: still running {WAIT_S + 20} s after the "
                             f"change\n{e[-3000:]}")
        seconds = time.monotonic() - t_fault
        e = tt.without_launch_warnings(e)
        where = f"\n{how}, {np_} ranks"
        check(p.returncode == 1, f"expected exit 1, got {p.returncode}" + where + "\n" + e[-3000:])
        lines = error_lines(e)
        needle = "rank 1]: error: data file '" + data + "': cannot read: " + os.strerror(5) \
            if env else "error: data file '" + data + "' changed during the run"
        check(len(lines) == 1 and needle in lines[0],
              f"expected one error line holding {needle!r}" + where + "\n" + e[-3000:])
        check(seconds < WAIT_S, f"the job ended {seconds:.1f} s after the change" + where)
        # The last checkpoint is intact: `latest` names a step, and a run resumes from it (on the
        # corpus as it was).
        step_dir = ck.latest(root)
        check(step_dir is not None, "latest is gone" + where)
        step = int(step_dir.rsplit("_", 1)[-1])
        corpus(data, 7)
        args = ["train", tt.config(tt.DEFAULT), *ck.tiny(np_), f"data.path={data}",
                "data.format=text", "data.val_fraction=0", f"train.max_steps={step + 1}",
                "train.val_every=0", "checkpoint.resume=auto", f"train.output_dir={out}"]
        rc, o2, e2, _ = launch(args, np_, timeout=120)
        check(rc == 0 and f"at step {step} " in e2,
              f"resuming from step {step} after the fault" + where + "\n" + e2[-3000:])
        print(f"{how}, {np_} ranks: exit 1 {seconds:.1f} s after the "
              f"{'start' if env else 'change'}, checkpoint step {step} resumes: {lines[0]}")


def case_corpus_changed_1rank():
    check_corpus_fault(1, "truncate")
    check_corpus_fault(1, "cp")


def case_corpus_changed_2ranks():
    check_corpus_fault(2, "truncate")
    check_corpus_fault(2, "cp")
    # Only one rank meets the fault: the others learn it at the step's end agreement.
    check_corpus_fault(2, "read error on rank 1")


# ---- safetensors sizes -----------------------------------------------------------------------


def case_safetensors_exact_size():
    with tempfile.TemporaryDirectory(prefix="kktrain_hostile_") as tmp:
        conf = write(os.path.join(tmp, "c.yaml"), CONFIG)
        good = os.path.join(tmp, "good")
        hf_model(good, 2)
        for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
            for delta, needle in ((-1, "truncated"), (0, None), (1, "trailing bytes")):
                d = os.path.join(tmp, f"d{delta}")
                shutil.rmtree(d, ignore_errors=True)
                shutil.copytree(good, d)
                path = os.path.join(d, name)
                exact = os.path.getsize(path)
                if delta < 0:
                    os.truncate(path, exact - 1)
                elif delta > 0:
                    with open(path, "ab") as f:
                        f.write(b"\0")
                args = ["config", conf, f"model.init_from={d}"]
                rc, o, e, s = launch(args)
                if needle is None:
                    check(rc == 0, f"the exact size {exact} of {name} is valid\n{e}")
                    continue
                line = one_error(rc, o, e, s, path, needle, status=2,
                                 where=f"\n{name}: {exact + delta} bytes, exact {exact}")
                print(f"{name}, exact {delta:+d}: {line}")


def case_deep_json():
    """JSON nested 10^5 deep in config.json, the safetensors index and a safetensors header, each
    under a key kktrain never reads: one error naming the file and the depth limit (128)."""
    deep = b"[" * 100000 + b"]" * 100000
    with tempfile.TemporaryDirectory(prefix="kktrain_hostile_") as tmp:
        conf = write(os.path.join(tmp, "c.yaml"), CONFIG)
        good = os.path.join(tmp, "good")
        hf_model(good, 2)
        for name in ("config.json", "model.safetensors.index.json"):
            d = os.path.join(tmp, name.split(".")[0])
            shutil.copytree(good, d)
            path = os.path.join(d, name)
            with open(path, "rb") as f:
                text = f.read().rstrip()
            with open(path, "wb") as f:
                f.write(text[:-1] + b', "extra": ' + deep + b"}")
            rc, o, e, s = launch(["config", conf, f"model.init_from={d}"])
            print(name + ": " + one_error(rc, o, e, s, path, "nested deeper than 128", status=2))
        d = os.path.join(tmp, "header")
        shutil.copytree(good, d)
        path = os.path.join(d, "model-00002-of-00002.safetensors")
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header, data = f.read(n).rstrip(b" "), f.read()
        header = header[:-1] + b', "__metadata__": {"x": "y"}, "extra": ' + deep + b"}"
        header += b" " * (-len(header) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(header)) + header + data)
        rc, o, e, s = launch(["config", conf, f"model.init_from={d}"])
        print("header: " + one_error(rc, o, e, s, path, "nested deeper than 128", status=2))


# ---- data.path -------------------------------------------------------------------------------


def case_many_files():
    """A corpus of more files than the soft limit on open files (ulimit -n; Debian's default is
    1024) trains: token files stay open while a run reads them, so the limit is raised to the hard
    limit; a corpus past the hard limit is one error naming the count and the limit."""
    import array
    import resource
    n = 300
    with tempfile.TemporaryDirectory(prefix="kktrain_hostile_") as tmp:
        shards = os.path.join(tmp, "shards")
        os.makedirs(shards)
        for i in range(n):
            with open(os.path.join(shards, f"train_{i:04d}.bin"), "wb") as f:
                f.write(array.array("H", [(i + k) % 256 for k in range(128)]).tobytes())
        for soft, hard, status in ((128, resource.getrlimit(resource.RLIMIT_NOFILE)[1], 0),
                                   (128, 128, 2)):
            def limit(soft=soft, hard=hard):
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            args = ["grads", os.path.join(tt.INPUTS, "default.yaml"),
                    f"data.path={shards}/train_*.bin", "data.format=uint16", "data.seq_len=32",
                    "--out", os.path.join(tmp, "g.h5")]
            p = subprocess.run([tt.KKTRAIN, *args], capture_output=True, text=True, timeout=120,
                               preexec_fn=limit)
            where = f"ulimit -n {soft} (hard {hard}): rc={p.returncode}\n{p.stderr[-2000:]}"
            if status == 0:
                check(p.returncode == 0, f"{n} files did not train" + where)
            else:
                lines = error_lines(p.stderr)
                check(p.returncode == 2 and len(lines) == 1 and "data.path" in lines[0]
                      and str(n) in lines[0] and "ulimit -n" in lines[0], where)
                print(f"hard limit {hard}: {lines[0]}")
        print(f"{n} token files under a soft limit of 128 open files: trained")


def case_data_path_empty():
    with tempfile.TemporaryDirectory(prefix="kktrain_hostile_") as tmp:
        listed = write(os.path.join(tmp, "listed.yaml"), CONFIG + "  path: []\n")
        out = os.path.join(tmp, "out")
        for args in (["config", listed], ["train", listed, f"train.output_dir={out}"],
                     ["config", write(os.path.join(tmp, "c.yaml"), CONFIG), "data.path=[]"]):
            rc, o, e, s = launch(args)
            line = one_error(rc, o, e, s, "data.path", "empty list", status=2,
                             where=f"\nkktrain {args}")
            print(f"kktrain {args[0]} {args[1:]}: {line}")
        check(not os.path.exists(os.path.join(out, "metrics.jsonl")), "the run trained")
        for value in ("null", "~"):
            rc, o, e = tt.run(["config", write(os.path.join(tmp, "n.yaml"),
                                               CONFIG + f"  path: {value}\n")])
            check(rc == 0 and "  path: null\n" in o, f"data.path: {value} is the embedded corpus"
                  + e)


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
