"""The README's commands, as a new user runs them: every fenced block that follows a
`<!-- tested -->` line, in document order, in one scratch directory (so later blocks see the
runs of earlier ones), each command expected to exit 0.

usage: test_readme_commands.py README BUILD_DIR [MPIRUN]

The scratch directory links `build` to BUILD_DIR and `inputs`, `scripts` to the source tree, so
`./build/kktrain`, `inputs/...` and `scripts/...` resolve as in a checkout. What is changed, and
only this:
- `kktrain train` commands get `train.max_steps=STEPS` appended (the README's runs are hundreds
  of steps; a few show the same behaviour);
- a line whose comment says "Ctrl-C" runs 20 x STEPS steps and is interrupted with SIGINT once
  its first step is logged: it must exit 130 with "stopped by signal 2" and a checkpoint, and the
  next line (the same command) must resume from that checkpoint and exit 0;
- `mpirun` gets `--oversubscribe --allow-run-as-root` (ctest runs as root on 2 cores);
- `scripts/*.py` and ```python blocks run with this interpreter (the one with h5py);
- `scripts/setup.sh` lines are skipped (the build exists already).
"""
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

from test_train import Failure, check  # this file's directory is on sys.path

STEPS = 12


def tested_blocks(readme):
    """(language, body) of every fenced block right after a `<!-- tested -->` line."""
    text = open(readme).read()
    blocks = re.findall(r"<!-- tested -->\s*\n```(\w*)\n(.*?)```", text, re.S)
    check(blocks, "README has no '<!-- tested -->' blocks")
    return blocks


def shell_commands(body):
    """(command, comment) per non-empty line; a comment is what follows '  #'."""
    out = []
    for line in body.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cmd, _, comment = line.partition("  #")
        out.append((cmd.strip(), comment.strip()))
    return out


def adapt(cmd, mpirun):
    words = shlex.split(cmd)
    if words and words[0] == "mpirun":
        words = [mpirun or "mpirun", "--oversubscribe", "--allow-run-as-root", *words[1:]]
    if words and words[0].startswith("scripts/") and words[0].endswith(".py"):
        words = [sys.executable, *words]
    if any(a.endswith("kktrain") and b == "train" for a, b in zip(words, words[1:])):
        words.append(f"train.max_steps={STEPS}")
    return words


def run(words, cwd, where):
    # errors="replace": `kktrain generate --prompt` prints a byte-level model's bytes as they are
    p = subprocess.run(words, cwd=cwd, capture_output=True, text=True, errors="replace",
                       timeout=300)
    check(p.returncode == 0, f"{where}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def interrupted(words, cwd, where):
    """Runs `words`, sends SIGINT once a step is logged; returns stderr."""
    err_path = os.path.join(cwd, "interrupted.err")
    with open(err_path, "w") as err:
        p = subprocess.Popen(words, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
    try:
        t0 = time.monotonic()
        while "| loss" not in open(err_path).read():
            check(p.poll() is None, f"{where}: ended before its first step:\n"
                  + open(err_path).read())
            check(time.monotonic() - t0 < 120, f"{where}: no step logged in 120 s")
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    err = open(err_path).read()
    m = re.search(r"stopped by signal 2 after step (\d+);", err)
    check(p.returncode == 130 and m and "checkpoint: step " + m.group(1) in err,
          f"{where}: Ctrl-C gave exit {p.returncode}:\n{err[-3000:]}")
    return int(m.group(1))


def main():
    readme, build = sys.argv[1], sys.argv[2]
    mpirun = sys.argv[3] if len(sys.argv) > 3 else ""
    src = os.path.dirname(os.path.abspath(readme))
    count = 0
    with tempfile.TemporaryDirectory(prefix="kktrain_readme_") as tmp:
        os.symlink(os.path.abspath(build), os.path.join(tmp, "build"))
        for d in ("inputs", "scripts"):
            os.symlink(os.path.join(src, d), os.path.join(tmp, d))
        resume_step = None
        for lang, body in tested_blocks(readme):
            if lang == "python":
                run([sys.executable, "-c", body], tmp, "README python block:\n" + body)
                print(f"ok python block ({len(body.splitlines())} lines)")
                count += 1
                continue
            for cmd, comment in shell_commands(body):
                if cmd.startswith("scripts/setup.sh"):
                    continue
                words = adapt(cmd, mpirun)
                where = f"README command `{cmd}`"
                if "Ctrl-C" in comment and "again" not in comment:
                    # Long enough that SIGINT lands mid-run even if this process waits for the CPU.
                    resume_step = interrupted(words + [f"train.max_steps={20 * STEPS}"], tmp,
                                              where)
                    print(f"ok {cmd}  (interrupted after step {resume_step}, exit 130)")
                    count += 1
                    continue
                p = run(words, tmp, where)
                if resume_step is not None:
                    check(f"at step {resume_step} " in p.stderr and "resumed from" in p.stderr,
                          f"{where}: did not resume from step {resume_step}:\n{p.stderr}")
                    print(f"   resumed from step {resume_step}")
                    resume_step = None
                if "Ctrl-C" in comment:  # "Ctrl-C, then run it again": the run itself
                    check("checkpoint: step" in p.stderr, f"{where}: no checkpoint")
                print(f"ok {cmd}")
                count += 1
    print(f"{count} README commands and blocks ran")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failure as e:
        print(f"FAIL: {e}")
        sys.exit(1)
