"""Every option that names a file, given something that is not a regular file (issue 47).

usage: test_hostile_paths.py KKTRAIN INPUTS_DIR CASE   (tests/cli/hostile_paths.cmake, "hostile")

Each config key and command-line option whose value is a path, and the files kktrain finds
beside them (tokenizer.json, tokenizer_config.json, chat_template.jinja beside a tokenizer;
adapter_config.json in a PEFT directory), is given a FIFO without a writer, a directory (empty,
or where a file is expected), /dev/null and /dev/zero (where the path is read). Each command
must end within PROMPT_S, non-zero and never by a signal, with one error line naming the file:
every reader opens user-named files through core/files.hpp (open_regular_file /
read_regular_file), which never blocks on a FIFO, never reads a device and bounds what it reads.

- config_keys: model.init_from, model.tokenizer (and the files beside it), peft.init_from (and
  adapter_config.json), data.path (text, jsonl, chat; train and render), data.chat_template,
  data.val_path, checkpoint.resume, and the written train.output_dir and checkpoint.dir.
- command_options: CONFIG of train, config, audit, grads and render; export's CHECKPOINT and
  --out; grads --out; inspect's FILE; generate's MODEL, --tokenizer and --chat-template (and
  chat_template.jinja beside the tokenizer); tokenize's INPUT, --tokenizer and --out.
- coverage: every string key of `kktrain config --schema` and every option of every command's
  --help is listed below as a path (with its cases above) or as not a path; a new one that is
  in neither list fails here until it is classified (and, for a path, given cases).
"""

import inspect
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_train as tt  # noqa: E402
from test_train import check  # noqa: E402

PROMPT_S = 10  # a refusal takes well under a second; a hang is killed at LIMIT_S
LIMIT_S = 30

# Config keys whose value is a path: what kktrain does with it. Every other string key of the
# schema is in NOT_PATH_KEYS.
PATH_KEYS = {
    "model.init_from": "read",
    "model.tokenizer": "read",
    "peft.init_from": "read",
    "data.path": "read",
    "data.chat_template": "read",
    "data.val_path": "read",
    "eval.data": "read",
    "eval.tasks": "read",
    "checkpoint.resume": "read",
    "train.output_dir": "written",
    "checkpoint.dir": "written",
}
NOT_PATH_KEYS = {
    "model.keep_in_fp32", "freeze_config.freeze_modules", "freeze_config.unfreeze_modules",
    "freeze_config.freeze_parameters", "freeze_config.unfreeze_parameters", "peft._target_",
    "peft.target_modules", "optimizer._target_", "optimizer.weight_decay_exclude",
    "distributed.strategy", "distributed.mp_policy._target_", "data.jsonl_key",
    "model.attention_tiles", "model.layer_types", "model.layer_rope",
}
# Each command's positional arguments and options that name files, and those that do not.
PATH_ARGS = {
    "train": {"CONFIG"}, "config": {"CONFIG"}, "audit": {"CONFIG"},
    "grads": {"CONFIG", "--out"}, "render": {"CONFIG"},
    "export": {"CHECKPOINT", "--out"}, "inspect": {"FILE.h5"},
    "generate": {"MODEL", "--tokenizer", "--chat-template"},
    "tokenize": {"INPUT", "--tokenizer", "--out"},
    "eval": {"MODEL", "--data", "--task", "--json", "--tokenizer"},
}
NOT_PATH_OPTIONS = {
    "config": {"--schema"}, "audit": {"--json", "--world-size"}, "render": {"--count", "--tokens"},
    "export": {"--dtype", "--lora", "--format", "--max-shard-size"},
    "generate": {"--prompt", "--prompt-ids", "--max-new-tokens", "--temperature", "--top-k",
                 "--seed", "--chat", "--system"},
    "tokenize": {"--jsonl-key", "--eos", "--no-eos", "--shard-tokens", "--val-tokens",
                 "--threads", "--batch-bytes", "--ids", "--decode"},
}


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def run(args, timeout=LIMIT_S):
    """(rc, stderr, seconds) of kktrain args in a session of its own; killed after timeout."""
    t0 = time.monotonic()
    p = subprocess.Popen([tt.KKTRAIN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        _, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        _, err = p.communicate()
        return None, err, time.monotonic() - t0
    return p.returncode, err, time.monotonic() - t0


class Fixture:
    """What the cases point at: special files, a tokenizer copy, a tiny run's checkpoint and
    export, a chat config."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.fifo = os.path.join(tmp, "fifo")
        os.mkfifo(self.fifo)
        self.dir = os.path.join(tmp, "a_dir")
        os.mkdir(self.dir)
        self.tok = os.path.join(tmp, "tok")
        shutil.copytree(os.path.join(tt.INPUTS, "chat_tokenizer"), self.tok)
        self.chat = os.path.join(tt.INPUTS, "chat_example.jsonl")
        self.cfg = os.path.join(tmp, "c.yaml")
        write(self.cfg, "data:\n  seq_len: 32\n  micro_batch_size: 1\n  global_batch_size: 1\n")
        base = os.path.join(tmp, "base")
        rc, err, _ = run(["train", tt.config(tt.DEFAULT), *tt.TINY, "train.max_steps=1",
                          "checkpoint.save_every=1", f"train.output_dir={base}"], timeout=120)
        check(rc == 0, f"the base run failed: {err[-2000:]}")
        self.export = os.path.join(base, "export.h5")
        self.ckpt_dir = os.path.join(base, "checkpoints", "step_00000001")
        self.hf = os.path.join(tmp, "hf")  # a Hugging Face directory: what PEFT runs start from
        rc, err, _ = run(["export", self.ckpt_dir, "--out", self.hf, "--format", "safetensors",
                          "--dtype", "float32"], timeout=120)
        check(rc == 0, f"the export failed: {err[-2000:]}")
        self.n = 0

    def out(self):
        self.n += 1
        return os.path.join(self.tmp, f"out{self.n}")

    def named(self, p, name):
        """A special file like p (a FIFO, a directory, a link to a device) named `name`."""
        q = os.path.join(self.tmp, name)
        if not os.path.lexists(q):
            if p == self.fifo:
                os.mkfifo(q)
            elif p == self.dir:
                os.mkdir(q)
            else:
                os.symlink(p, q)
        return q

    def specials(self, read=True, null=False, dir_ok=False):
        """(name, path, word) of the special files a path is given: a FIFO and a directory,
        /dev/zero where it is read, /dev/null where an empty file would pass unnoticed; word:
        what the error must call it (none for a directory where one is accepted: it names what
        the directory lacks)."""
        s = [("a FIFO", self.fifo, "FIFO"), ("a directory", self.dir, None if dir_ok else
                                                 "directory")]
        if read:
            s.append(("/dev/zero", "/dev/zero", "device"))
        if null:
            s.append(("/dev/null", "/dev/null", "device"))
        return s

    def tokenizer_with(self, name, path):
        """A copy of the tokenizer directory whose `name` is a link to (or, for a FIFO or a
        directory, is) `path`."""
        self.n += 1
        d = os.path.join(self.tmp, f"tok{self.n}")
        shutil.copytree(self.tok, d)
        target = os.path.join(d, name)
        if os.path.exists(target):
            os.remove(target)
        if path == self.fifo:
            os.mkfifo(target)
        elif path == self.dir:
            os.mkdir(target)
        else:
            os.symlink(path, target)
        return d, target


def expect_refusal(args, needle, what, word=None):
    rc, err, s = run(args)
    where = f"\n{what}: kktrain {' '.join(args)}\nrc={rc}\nstderr:\n{err[-3000:]}"
    check(rc is not None, f"still running after {LIMIT_S} s (killed)" + where)
    check(0 < rc < 128, "expected a non-zero exit status, not a signal" + where)
    lines = [ln for ln in err.splitlines() if ln.startswith("kktrain") and ": error: " in ln]
    check(len(lines) == 1, f"expected one error line, got {len(lines)}" + where)
    check(needle in lines[0], f"the error should name {needle!r}" + where)
    check(word is None or word in lines[0], f"the error should say {word!r}" + where)
    check(s < PROMPT_S, f"took {s:.1f} s" + where)
    print(f"{what}: exit {rc} in {s:.1f} s: {lines[0]}")


def render_args(f, *extra):
    return ["render", f.cfg, f"model.tokenizer={f.tok}", f"data.path={f.chat}",
            "data.format=chat", "data.seq_len=128", "--count", "1", *extra]


def chat_train_args(f, *extra):
    return ["train", tt.config(tt.DEFAULT), *tt.TINY, "train.max_steps=1",
            f"model.tokenizer={f.tok}", f"data.path={f.chat}", "data.format=chat",
            "data.seq_len=64", f"train.output_dir={f.out()}", *extra]


def peft_args(f, adapter):
    return train_args(f, f"model.init_from={f.hf}",
                      f"peft={{target_modules: [q_proj], dim: 4, alpha: 8, init_from: {adapter}}}")


def train_args(f, *extra):
    return ["train", tt.config(tt.DEFAULT), *tt.TINY, "train.max_steps=1",
            f"train.output_dir={f.out()}", *extra]


def case_config_keys():
    with tempfile.TemporaryDirectory(prefix="kktrain_paths_") as tmp:
        f = Fixture(tmp)
        for kind, p, word in f.specials(dir_ok=True):  # a directory is a valid kind of these
            expect_refusal(train_args(f, f"model.init_from={p}"), p, f"model.init_from: {kind}",
                           word)
            expect_refusal(render_args(f, f"model.tokenizer={p}"), p, f"model.tokenizer: {kind}",
                           word)
            expect_refusal(peft_args(f, p), p, f"peft.init_from: {kind}")  # "not a directory"
            expect_refusal(train_args(f, f"checkpoint.resume={p}"), p,
                           f"checkpoint.resume: {kind}", word)
        for kind, p, word in f.specials():
            for fmt in ("text", "jsonl", "uint16"):
                q = f.named(p, f"{os.path.basename(p)}.{fmt}")  # jsonl wants a .jsonl name
                expect_refusal(train_args(f, f"data.path={q}", f"data.format={fmt}",
                                          f"model.tokenizer={f.tok}"), q,
                               f"data.path ({fmt}, train): {kind}", word)
            expect_refusal(chat_train_args(f, f"data.path={p}"), p, f"data.path (chat): {kind}",
                           word)
            expect_refusal(render_args(f, f"data.path={p}"), p, f"data.path (render): {kind}",
                           word)
            expect_refusal(chat_train_args(f, f"data.val_path={p}"), p, f"data.val_path: {kind}",
                           word)
        for kind, p, word in f.specials(null=True):
            expect_refusal(render_args(f, f"data.chat_template={p}"), p,
                           f"data.chat_template (render): {kind}", word)
            expect_refusal(chat_train_args(f, f"data.chat_template={p}"), p,
                           f"data.chat_template (train): {kind}", word)
        # the files found beside model.tokenizer and in peft.init_from
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            for kind, p, word in f.specials(null=name == "chat_template.jinja"):
                d, target = f.tokenizer_with(name, p)
                expect_refusal(render_args(f, f"model.tokenizer={d}"), target,
                               f"model.tokenizer's {name}: {kind}", "is a " + word)
        for kind, p, word in f.specials():
            adapter = f.out()
            os.mkdir(adapter)
            target = os.path.join(adapter, "adapter_config.json")
            if p == f.fifo:
                os.mkfifo(target)
            elif p == f.dir:
                os.mkdir(target)
            else:
                os.symlink(p, target)
            expect_refusal(peft_args(f, adapter), target,
                           f"peft.init_from's adapter_config.json: {kind}", "is a " + word)
        # the config.json of a Hugging Face model.init_from
        for kind, p, word in f.specials():
            d = f.out()
            shutil.copytree(f.hf, d)
            target = os.path.join(d, "config.json")
            os.remove(target)
            f.named(p, os.path.relpath(target, tmp))
            expect_refusal(train_args(f, f"model.init_from={d}"), target,
                           f"model.init_from's config.json: {kind}", "is a " + word)
        # a file beside model.init_from larger than any real one: refused unread
        big = os.path.join(tmp, "big_hf")
        shutil.copytree(f.hf, big)
        os.truncate(os.path.join(big, "config.json"), (64 << 20) + 1)  # sparse: no disk used
        expect_refusal(train_args(f, f"model.init_from={big}"), os.path.join(big, "config.json"),
                       "model.init_from's config.json: over 64 MiB", "larger than 64 MiB")
        for kind, p, word in f.specials():  # eval.every's files, read as the run starts
            expect_refusal(train_args(f, "eval.every=1", f"eval.data=[{p}]"), p,
                           f"eval.data: {kind}", word)
            expect_refusal(train_args(f, "eval.every=1", f"eval.tasks=[{p}]"), p,
                           f"eval.tasks: {kind}", word)
        # written paths: a FIFO where a directory is written
        expect_refusal(train_args(f, f"train.output_dir={f.fifo}"), f.fifo,
                       "train.output_dir: a FIFO")
        expect_refusal(train_args(f, f"checkpoint.dir={f.fifo}", "checkpoint.save_every=1"),
                       f.fifo, "checkpoint.dir: a FIFO")


def case_command_options():
    with tempfile.TemporaryDirectory(prefix="kktrain_paths_") as tmp:
        f = Fixture(tmp)
        for kind, p, word in f.specials():
            for cmd in ("train", "config", "audit", "render"):
                expect_refusal([cmd, p], p, f"{cmd} CONFIG: {kind}", word)
            expect_refusal(["grads", p, "--out", os.path.join(tmp, "g.h5")], p,
                           f"grads CONFIG: {kind}", word)
            expect_refusal(["tokenize", "--tokenizer", f.tok, p, "--out", f.out()], p,
                           f"tokenize INPUT: {kind}", word)
        for kind, p, word in f.specials(dir_ok=True):  # a directory is a valid kind of these
            expect_refusal(["export", p, "--out", os.path.join(tmp, "e.h5")], p,
                           f"export CHECKPOINT: {kind}", word)
            expect_refusal(["generate", p, "--prompt-ids", "1,2", "--max-new-tokens", "2"], p,
                           f"generate MODEL: {kind}", word)
            expect_refusal(["generate", f.export, "--tokenizer", p, "--prompt", "hi",
                            "--max-new-tokens", "2"], p, f"generate --tokenizer: {kind}", word)
            expect_refusal(["tokenize", "--tokenizer", p, "--ids", "hi"], p,
                           f"tokenize --tokenizer: {kind}", word)
            expect_refusal(["inspect", p], p, f"inspect FILE.h5: {kind}", word)
            expect_refusal(["eval", p, "--task", f.chat], p, f"eval MODEL: {kind}", word)
            expect_refusal(["eval", f.export, "--tokenizer", p, "--data", f.chat], p,
                           f"eval --tokenizer: {kind}", word)
        for kind, p, word in f.specials():
            for opt in ("--data", "--task"):
                expect_refusal(["eval", f.export, opt, p], p, f"eval {opt}: {kind}", word)
        for kind, p, word in f.specials(null=True):
            expect_refusal(["generate", f.export, "--tokenizer", f.tok, "--chat", "hi",
                            "--chat-template", p, "--max-new-tokens", "2"], p,
                           f"generate --chat-template: {kind}", word)
            d, target = f.tokenizer_with("chat_template.jinja", p)
            expect_refusal(["generate", f.export, "--tokenizer", d, "--chat", "hi",
                            "--max-new-tokens", "2"], target,
                           f"generate's chat_template.jinja: {kind}", word)
        # written files: a FIFO or a directory where a file is written
        for kind, p, word in f.specials(read=False):
            expect_refusal(["grads", tt.config(tt.DEFAULT), *tt.TINY, "--out", p], p,
                           f"grads --out: {kind}")
            expect_refusal(["export", f.ckpt_dir, "--out", p], p, f"export --out: {kind}")
            expect_refusal(["eval", f.export, "--data", f.chat, "--json", p], p,
                           f"eval --json: {kind}")
        shard = os.path.join(tmp, "p_000000.bin")  # the first shard tokenize --out p writes
        os.mkfifo(shard)
        expect_refusal(["tokenize", "--tokenizer", f.tok, f.chat, "--out",
                        os.path.join(tmp, "p")], shard, "tokenize --out: a FIFO as its shard")


def help_options(cmd):
    p = subprocess.run([tt.KKTRAIN, cmd, "--help"], capture_output=True, text=True, timeout=60)
    return set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", p.stdout + p.stderr)) - {"--help"}


def case_coverage():
    p = subprocess.run([tt.KKTRAIN, "config", "--schema"], capture_output=True, text=True,
                       timeout=60)
    check(p.returncode == 0, p.stderr)
    rows = re.findall(r"^\| `([\w.]+)` \| ([^|]+) \|", p.stdout, re.M)
    check(len(rows) > 50, f"no schema table in `kktrain config --schema`:\n{p.stdout[:2000]}")
    strings = {k for k, t in rows if t.strip() in ("string", "list of strings")}
    unknown = strings - set(PATH_KEYS) - NOT_PATH_KEYS
    check(not unknown, f"string config keys that are neither in PATH_KEYS (with cases in "
          f"case_config_keys) nor in NOT_PATH_KEYS: {sorted(unknown)}")
    gone = (set(PATH_KEYS) | NOT_PATH_KEYS) - {k for k, _ in rows}
    check(not gone, f"keys listed here that the schema no longer has: {sorted(gone)}")
    h = subprocess.run([tt.KKTRAIN, "--help"], capture_output=True, text=True, timeout=60)
    commands = set(re.findall(r"^  (\w+) ", h.stdout + h.stderr, re.M))
    check(commands == set(PATH_ARGS), f"commands {sorted(commands)}, listed here: "
          f"{sorted(PATH_ARGS)}")
    for cmd in sorted(commands):
        listed = {a for a in PATH_ARGS[cmd] if a.startswith("--")} | \
            NOT_PATH_OPTIONS.get(cmd, set())
        found = help_options(cmd)
        check(found == listed, f"kktrain {cmd} --help: options {sorted(found)}; listed here "
              f"(PATH_ARGS, NOT_PATH_OPTIONS): {sorted(listed)}")
    # ... and each path key and option has cases
    keys_src = inspect.getsource(case_config_keys)
    opts_src = inspect.getsource(case_command_options)
    for k in PATH_KEYS:
        check(f"{k}=" in keys_src or k == "peft.init_from" and "peft_args" in keys_src, f"case_config_keys gives {k} no special file")
    for cmd, args in PATH_ARGS.items():
        for a in args:
            check(a.startswith("--") and f'"{a}"' in opts_src or
                  not a.startswith("--") and f'"{cmd}"' in opts_src,
                  f"case_command_options gives kktrain {cmd} {a} no special file")
    print(f"{len(PATH_KEYS)} path keys of {len(strings)} string keys, "
          f"{sum(len(v) for v in PATH_ARGS.values())} path arguments of {len(commands)} commands: "
          f"each has cases")


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
