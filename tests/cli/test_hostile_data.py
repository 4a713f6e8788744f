"""Hostile training data (issue 47): examples that cannot crash the trainer, caches keyed on the
content of what they were made from, inputs kept out of the run's cache directories, epochs
planned lazily, loss masks in linear time, and messages that name what happened.

usage: test_hostile_data.py KKTRAIN INPUTS_DIR CASE   (tests/cli/hostile_data.cmake, "hostile")

- empty_example: an example of zero tokens (a chat template that prints nothing for a line, with
  data.loss_on assistant and all; an empty prompt/completion pair through a tokenizer that adds
  nothing) is skipped and counted by `train` and `render`, or (data.truncation: error) one error
  naming FILE:LINE, leaving no temporaries in examples/.
- cache_content: an edit of data.path that keeps its size and modification time invalidates the
  example cache and the text run's token cache; so does a new eos_token in tokenizer_config.json
  for the token cache.
- cache_inputs: an input stored in <output_dir>/examples/ or <output_dir>/tokens/ is refused
  (the run clears those directories); an exit-2 text run creates no output directory.
- epochs_lazy: train.epochs 10^9 with packing: train.max_steps cuts it short at once, and without
  it the first step starts at once (constant time whatever the epoch count).
- masking_linear: a conversation of 10^5 turns renders with its loss mask in seconds (the mask
  was quadratic in turns: 71 s).
- messages: seq_len too short for any assistant token says truncation cut them; a 2-byte text
  file is named as data.path; out of memory tokenizing a document names data.path; a JSONL line
  longer than the limit is one error naming FILE:LINE and the limit; `render` of a directory is
  one error.
- val_ranks: val_loss is the same on 1, 2 and 3 ranks taking a row at a time, and on 1 rank
  taking every row in one batch (validation rows neither overlap nor go missing).
"""

import glob
import json
import os
import resource
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
import test_text_models as ttm  # noqa: E402


def chat_tokenizer():
    return os.path.join(tt.INPUTS, "chat_tokenizer")


def chat_lines():
    with open(os.path.join(tt.INPUTS, "chat_example.jsonl")) as f:
        return f.readlines()


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def sft_args(tmp, run, *extra, steps=1):
    return ["train", tt.config("default.yaml"), *tt.TINY_MODEL, "checkpoint.resume=none",
            f"model.tokenizer={chat_tokenizer()}",
            f"data.path={os.path.join(tt.INPUTS, 'chat_example.jsonl')}", "data.format=chat",
            "data.seq_len=64", "data.micro_batch_size=2", "data.global_batch_size=2",
            "train.log_every=1", "train.val_every=0", "data.val_fraction=0",
            f"train.max_steps={steps}", f"train.output_dir={os.path.join(tmp, run)}", *extra]


def one_error(rc, err, *needles, where=""):
    lines = [ln for ln in err.strip().splitlines() if "error" in ln or "warn" in ln]
    check(rc == 2, f"expected exit 2, got {rc}" + where)
    check(len(lines) == 1, f"expected one error line on stderr, got {len(lines)}" + where)
    for n in needles:
        check(n in err, f"the error does not name {n!r}" + where)


def leftovers(run_dir):
    return glob.glob(os.path.join(run_dir, "examples", ".*tmp*"))


def chat_template():
    with open(os.path.join(chat_tokenizer(), "tokenizer_config.json")) as f:
        return json.load(f)["chat_template"]


# ---- empty examples ---------------------------------------------------------------------------


def case_empty_example():
    with tempfile.TemporaryDirectory(prefix="kktrain_hdata_") as tmp:
        lines = chat_lines()
        data = write(os.path.join(tmp, "d.jsonl"),
                     "".join(lines[:2]) +
                     '{"messages": [{"role": "user", "content": "NOTHING"}, '
                     '{"role": "assistant", "content": ""}]}\n' + "".join(lines[2:6]))
        # The model's template, but nothing at all for a conversation that opens with NOTHING.
        tmpl = write(os.path.join(tmp, "t.jinja"),
                     "{%- if messages[0]['content'] != 'NOTHING' -%}" + chat_template() +
                     "{%- endif -%}")
        for loss_on in ("assistant", "all"):
            common = [f"data.path={data}", f"data.chat_template={tmpl}", f"data.loss_on={loss_on}"]
            run = os.path.join(tmp, "r_" + loss_on)
            args = sft_args(tmp, "r_" + loss_on, *common)
            rc, out, err = tt.run(args)
            where = tt.describe(args, rc, out, err)
            check(rc == 0, f"loss_on {loss_on}: an empty example is skipped" + where)
            check("1 empty" in err, f"loss_on {loss_on}: the log counts the empty example" + where)
            with open(os.path.join(run, "examples", "manifest.json")) as f:
                summary = json.load(f)["summary"]
            check(summary["examples"] == 6 and summary["empty"] == 1, f"summary {summary}")
            check(not leftovers(run), f"temporaries left: {leftovers(run)}")
            rargs = ["render", tt.config("default.yaml"), *args[2:], "--count", "0", "--tokens"]
            rargs = [a for a in rargs if not a.startswith("train.")]
            rc, out, err = tt.run(rargs)
            where = tt.describe(rargs, rc, out, err)
            check(rc == 0, "render shows the empty example" + where)
            shown = [json.loads(ln) for ln in out.splitlines()]
            check(len(shown) == 7 and shown[2].get("empty") is True and shown[2]["ids"] == [],
                  "render marks line 3 empty" + where)
            # data.truncation: error: one line naming the line, nothing left behind.
            args = sft_args(tmp, "e_" + loss_on, *common, "data.truncation=error",
                            "data.seq_len=128")
            rc, out, err = tt.run(args)
            one_error(rc, err, f"{data}:3", "no tokens", "data.truncation",
                      where=tt.describe(args, rc, out, err))
            check(not leftovers(os.path.join(tmp, "e_" + loss_on)), "temporaries left")
        # prompt/completion of empty strings through a tokenizer that adds nothing (no
        # post-processor, no eos_token, no template).
        model = ttm.hf_model(os.path.join(tmp, "m"), 320, tokenizer=True)
        with open(os.path.join(model, "tokenizer.json")) as f:
            tok = json.load(f)
        tok["post_processor"] = None
        write(os.path.join(model, "tokenizer.json"), json.dumps(tok))
        write(os.path.join(model, "tokenizer_config.json"),
              json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
        os.remove(os.path.join(model, "chat_template.jinja"))
        pc = write(os.path.join(tmp, "pc.jsonl"),
                   '{"prompt": "Hello there ", "completion": "general"}\n'
                   '{"prompt": "", "completion": ""}\n'
                   '{"prompt": "the ", "completion": "thing"}\n' * 3)
        common = ["data.format=prompt_completion", f"data.path={pc}", "data.val_fraction=0",
                  "data.seq_len=16"]
        args = ttm.train_args(tmp, model, "pc", *common)
        rc, out, err = tt.run(args)
        check(rc == 0 and "3 empty" in err,
              "an empty prompt/completion pair is skipped and counted" +
              tt.describe(args, rc, out, err))
        args = ttm.train_args(tmp, model, "pc_err", *common, "data.truncation=error")
        rc, out, err = tt.run(args)
        one_error(rc, err, f"{pc}:2", "no tokens", where=tt.describe(args, rc, out, err))
        check(not leftovers(os.path.join(tmp, "pc_err")), "temporaries left")


# ---- caches keyed on content ------------------------------------------------------------------


def same_size_edit(path, old, new):
    """Replaces `old` by `new` (same length) in the file, then restores its modification time."""
    assert len(old) == len(new)
    old, new = old.encode(), new.encode()
    assert len(old) == len(new)
    st = os.stat(path)
    with open(path, "rb") as f:
        data = f.read()
    check(old in data, f"{old!r} not in {path}")
    with open(path, "wb") as f:
        f.write(data.replace(old, new, 1))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    check(os.stat(path).st_size == st.st_size and os.stat(path).st_mtime_ns == st.st_mtime_ns,
          "the edit kept size and mtime")


def case_cache_content():
    with tempfile.TemporaryDirectory(prefix="kktrain_hdata_") as tmp:
        # The example cache.
        data = os.path.join(tmp, "d.jsonl")
        shutil.copy(os.path.join(tt.INPUTS, "chat_example.jsonl"), data)
        args = sft_args(tmp, "ex", f"data.path={data}")
        rc, out, err = tt.run(args)
        check(rc == 0, "first run" + tt.describe(args, rc, out, err))
        rc, out, err = tt.run(args)
        check(rc == 0 and "are reused" in err, "an unchanged input reuses the example cache" +
              tt.describe(args, rc, out, err))
        same_size_edit(data, "Paris", "Lyons")
        rc, out, err = tt.run(args)
        check(rc == 0 and "are reused" not in err and "rendering data.path again" in err,
              "a same-size edit with its mtime restored renders data.path again" +
              tt.describe(args, rc, out, err))
        # The same for data.val_path and data.chat_template.
        val = os.path.join(tmp, "v.jsonl")
        shutil.copy(data, val)
        tmpl = write(os.path.join(tmp, "t.jinja"), chat_template())
        args = sft_args(tmp, "ex2", f"data.path={data}", f"data.val_path={val}",
                        f"data.chat_template={tmpl}")
        rc, out, err = tt.run(args)
        check(rc == 0, "with val_path and chat_template" + tt.describe(args, rc, out, err))
        for path, old, new in ((None, None, None), (val, "Lyons", "Paris"),
                               (tmpl, "trim", "TRIM")):
            if path:
                same_size_edit(path, old, new)
            rc, out, err = tt.run(args)
            if path == tmpl:  # an unknown filter now: the template is read again, and refused
                check(rc == 2 and "TRIM" in err, "the edited template is used" +
                      tt.describe(args, rc, out, err))
            else:
                check(rc == 0 and ("are reused" in err) == (path is None),
                      f"after an edit of {path}" + tt.describe(args, rc, out, err))
        # The text run's token cache: data.path, then tokenizer_config.json's eos_token.
        model = ttm.hf_model(os.path.join(tmp, "m"), 320, tokenizer=True)
        text = ttm.write_text(os.path.join(tmp, "t.txt"))
        args = ttm.train_args(tmp, model, "tx", f"data.path={text}")
        rc, out, err = tt.run(args)
        check(rc == 0, "text run" + tt.describe(args, rc, out, err))
        rc, out, err = tt.run(args)
        check(rc == 0 and "reused" in err, "an unchanged input reuses the token cache" +
              tt.describe(args, rc, out, err))
        same_size_edit(text, "wörld", "wärld")
        rc, out, err = tt.run(args)
        check(rc == 0 and "reused" not in err and "tokenizing data.path again" in err,
              "a same-size edit of data.path tokenizes again" + tt.describe(args, rc, out, err))
        conf = os.path.join(model, "tokenizer_config.json")
        with open(conf) as f:
            c = json.load(f)
        c["eos_token"] = "<s>"  # another special token: every document now ends with id 300
        write(conf, json.dumps(c))
        rc, out, err = tt.run(args)
        check(rc == 0 and "reused" not in err and "tokenizing data.path again" in err,
              "a new eos_token tokenizes again" + tt.describe(args, rc, out, err))
        with open(os.path.join(tmp, "tx", "tokens", "data_000000.bin"), "rb") as f:
            raw = f.read()
        check((300).to_bytes(2, "little") * 2 in raw or raw[-2:] == (300).to_bytes(2, "little"),
              "the new shards end documents with the new eos_token")


# ---- inputs inside the run's cache directories ------------------------------------------------


def case_cache_inputs():
    with tempfile.TemporaryDirectory(prefix="kktrain_hdata_") as tmp:
        run = os.path.join(tmp, "run")
        for sub in ("examples", "tokens"):
            os.makedirs(os.path.join(run, sub), exist_ok=True)
            data = os.path.join(run, sub, "mine.jsonl")
            shutil.copy(os.path.join(tt.INPUTS, "chat_example.jsonl"), data)
            for key in ("data.path", "data.val_path"):
                args = sft_args(tmp, "run", f"{key}={data}")
                rc, out, err = tt.run(args)
                one_error(rc, err, key, data, where=tt.describe(args, rc, out, err))
                check(os.path.exists(data), "the input is kept")
            # The chat template, and a hard link from elsewhere.
            tmpl = write(os.path.join(run, sub, "t.jinja"), chat_template())
            args = sft_args(tmp, "run", f"data.chat_template={tmpl}")
            rc, out, err = tt.run(args)
            one_error(rc, err, "data.chat_template", tmpl, where=tt.describe(args, rc, out, err))
            hard = os.path.join(tmp, f"hard_{sub}.jsonl")
            os.link(data, hard)
            args = sft_args(tmp, "run", f"data.path={hard}")
            rc, out, err = tt.run(args)
            one_error(rc, err, "data.path", where=tt.describe(args, rc, out, err))
            # Through a symbolic link from elsewhere.
            link = os.path.join(tmp, f"link_{sub}.jsonl")
            os.symlink(data, link)
            args = sft_args(tmp, "run", f"data.path={link}")
            rc, out, err = tt.run(args)
            one_error(rc, err, "data.path", where=tt.describe(args, rc, out, err))
        # A text file named like the run's own shard, which tokenizing clears.
        model = ttm.hf_model(os.path.join(tmp, "m"), 320, tokenizer=True)
        shard_named = ttm.write_text(os.path.join(run, "tokens", "data_000000.bin"))
        args = ttm.train_args(tmp, model, "run", f"data.path={shard_named}", "data.format=text")
        rc, out, err = tt.run(args)
        one_error(rc, err, "data.path", shard_named, where=tt.describe(args, rc, out, err))
        check(os.path.exists(shard_named), "the input named like a shard was removed")
        # A text run that fails on its input (not UTF-8) creates no output directory.
        bad = os.path.join(tmp, "bad.txt")
        with open(bad, "wb") as f:
            f.write(b"fine text, then \xff\xfe not UTF-8\n" * 50)
        args = ttm.train_args(tmp, model, "new_run", f"data.path={bad}")
        rc, out, err = tt.run(args)
        one_error(rc, err, bad, where=tt.describe(args, rc, out, err))
        check(not os.path.exists(os.path.join(tmp, "new_run")),
              "an exit-2 run created " + str(list(os.walk(os.path.join(tmp, "new_run")))))
        # The same for examples: a bad line.
        badj = write(os.path.join(tmp, "bad.jsonl"), "".join(chat_lines()[:3]) + "{nope\n")
        args = sft_args(tmp, "new_sft", f"data.path={badj}")
        rc, out, err = tt.run(args)
        one_error(rc, err, f"{badj}:4", where=tt.describe(args, rc, out, err))
        check(not os.path.exists(os.path.join(tmp, "new_sft")),
              "an exit-2 run created " + str(list(os.walk(os.path.join(tmp, "new_sft")))))


# ---- epochs ----------------------------------------------------------------------------------


def without_max_steps(tmp, args):
    """args with a copy of their CONFIG that sets no train.max_steps (default.yaml does)."""
    conf = os.path.join(tmp, "no_max_steps.yaml")
    with open(args[1]) as f:
        lines = [ln for ln in f if not ln.strip().startswith("max_steps:")]
    write(conf, "".join(lines))
    return [args[0], conf] + [a for a in args[2:] if not a.startswith("train.max_steps")]


def case_epochs_lazy():
    with tempfile.TemporaryDirectory(prefix="kktrain_hdata_") as tmp:
        many = ["data.packing=true", "train.epochs=1000000000"]
        args = [a for a in sft_args(tmp, "cut", *many) if not a.startswith("train.max_steps")]
        args.append("train.max_steps=2")
        try:
            rc, out, err = tt.run(args, timeout=60)
        except subprocess.TimeoutExpired:
            check(False, "train.epochs 10^9 with train.max_steps 2 did not end in 60 s")
        check(rc == 0 and "cut to train.max_steps 2" in err,
              "max_steps cuts 10^9 epochs short" + tt.describe(args, rc, out, err))
        # Without max_steps: the first step within 60 s, then SIGTERM ends the run.
        args = without_max_steps(tmp, sft_args(tmp, "long", *many))
        metrics = os.path.join(tmp, "long", "metrics.jsonl")
        p = subprocess.Popen([tt.KKTRAIN, *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        t0, started = time.monotonic(), False
        try:
            while time.monotonic() - t0 < 60 and p.poll() is None:
                if os.path.exists(metrics) and os.path.getsize(metrics) > 0:
                    started = True
                    break
                time.sleep(0.2)
        finally:
            p.send_signal(signal.SIGTERM)
            try:
                out, err = p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
        check(started, f"no step within 60 s of a start with 10^9 epochs (rc {p.returncode})"
              f"\nstderr:\n{err[-2000:]}")
        check("1000000000 epochs of" in err and "cut to" not in err,
              "the start names the epochs, uncut:\n" + err[-2000:])
        # More steps than int64 counts: refused without train.max_steps, cut with it.
        huge = ["data.packing=true", f"train.epochs={2**63 - 1}"]
        args = without_max_steps(tmp, sft_args(tmp, "huge", *huge))
        rc, out, err = tt.run(args, timeout=60)
        one_error(rc, err, "train.epochs", "train.max_steps", where=tt.describe(args, rc, out, err))
        args = sft_args(tmp, "huge", *huge, steps=1)
        rc, out, err = tt.run(args, timeout=60)
        check(rc == 0 and "cut to train.max_steps 1" in err,
              "max_steps cuts 2^63-1 epochs" + tt.describe(args, rc, out, err))


# ---- loss masks in linear time ----------------------------------------------------------------


def case_masking_linear():
    with tempfile.TemporaryDirectory(prefix="kktrain_hdata_") as tmp:
        turns = 100000
        msgs = []
        for i in range(turns // 2):
            msgs.append({"role": "user", "content": f"q{i}"})
            msgs.append({"role": "assistant", "content": f"a{i}"})
        data = write(os.path.join(tmp, "long.jsonl"), json.dumps({"messages": msgs}) + "\n")
        args = ["render", tt.config("default.yaml"), *tt.TINY_MODEL,
                f"model.tokenizer={chat_tokenizer()}", f"data.path={data}", "data.format=chat",
                "data.seq_len=64", "--count", "1", "--tokens"]
        t0 = time.monotonic()
        try:
            rc, out, err = tt.run(args, timeout=60)
        except subprocess.TimeoutExpired:
            check(False, f"{turns} turns: render did not end in 60 s")
        seconds = time.monotonic() - t0
        check(rc == 0, "render" + tt.describe(args, rc, out[-500:], err))
        ex = json.loads(out)
        check(ex.get("truncated", 0) > 600000 and sum(ex["loss_mask"]) > 0,
              f"the example: {ex.get('truncated')} tokens")
        print(f"{turns} turns rendered and masked in {seconds:.2f} s")


# ---- messages --------------------------------------------------------------------------------


def case_messages():
    with tempfile.TemporaryDirectory(prefix="kktrain_hdata_") as tmp:
        # seq_len too short for any assistant token: truncation removed them.
        for seq_len in (1, 2):
            args = sft_args(tmp, f"s{seq_len}", f"data.seq_len={seq_len}")
            rc, out, err = tt.run(args)
            where = tt.describe(args, rc, out, err)
            one_error(rc, err, "data.seq_len", "truncat", where=where)
            check("no assistant message" not in err, "blames missing assistant messages" + where)
        # A 2-byte text file: named as data.path, not as the run's shard.
        model = ttm.hf_model(os.path.join(tmp, "m"), 320, tokenizer=True)
        tiny = write(os.path.join(tmp, "two.txt"), "ab")
        args = ttm.train_args(tmp, model, "tiny", f"data.path={tiny}")
        rc, out, err = tt.run(args)
        where = tt.describe(args, rc, out, err)
        one_error(rc, err, "data.path", tiny, where=where)
        check("data_000000" not in err, "names the internal shard" + where)
        check(not os.path.exists(os.path.join(tmp, "tiny")), "an exit-2 run left its directory")
        # Out of memory tokenizing a 32 MiB document (it takes about 27 times its size: 888 MiB)
        # under a 700 MiB address-space limit (a run on small data needs under 500 MiB): one line
        # naming data.path, not a generic bad_alloc.
        doc = write(os.path.join(tmp, "doc.txt"), "hello world the thing " * ((32 << 20) // 22))
        args = ttm.train_args(tmp, model, "oom", f"data.path={doc}")

        def limit():
            resource.setrlimit(resource.RLIMIT_AS, (700 << 20, 700 << 20))

        p = subprocess.run([tt.KKTRAIN, *args], capture_output=True, text=True, timeout=120,
                           preexec_fn=limit)
        errors = [ln for ln in p.stderr.splitlines() if "error" in ln]
        check(p.returncode == 1 and len(errors) == 1 and "out of memory" in p.stderr and
              doc in p.stderr and "data.path" in p.stderr,
              "out of memory names data.path" + tt.describe(args, p.returncode, "", p.stderr))
        # Out of memory rendering a 15 MiB example line (under the line limit; it needs about
        # 600 MiB) under the same limit: one line naming FILE:LINE, and no directory left.
        line = write(os.path.join(tmp, "line.jsonl"), "".join(chat_lines()[:2]) + json.dumps(
            {"messages": [{"role": "user", "content": "hello world " * ((15 << 20) // 12)},
                          {"role": "assistant", "content": "ok"}]}) + "\n")
        args = sft_args(tmp, "oom_line", f"data.path={line}")
        p = subprocess.run([tt.KKTRAIN, *args], capture_output=True, text=True, timeout=120,
                           preexec_fn=limit)
        errors = [ln for ln in p.stderr.splitlines() if "error" in ln]
        check(p.returncode == 1 and len(errors) == 1 and f"{line}:3: out of memory" in p.stderr,
              "out of memory names FILE:LINE" + tt.describe(args, p.returncode, "", p.stderr))
        check(not os.path.exists(os.path.join(tmp, "oom_line")),
              "the failed run left its directory")
        # A JSONL line over the limit (16 MiB): one error naming FILE:LINE and the limit.
        big = os.path.join(tmp, "big.jsonl")
        with open(big, "w") as f:
            f.writelines(chat_lines()[:2])
            f.write('{"messages": [{"role": "user", "content": "' + "x" * (17 << 20) + '"}]}\n')
        for cmd in ("train", "render"):
            args = sft_args(tmp, "big", f"data.path={big}")
            if cmd == "render":
                args = ["render"] + [a for a in args[1:] if not a.startswith("train.")]
            rc, out, err = tt.run(args)
            one_error(rc, err, f"{big}:3", "16 MiB", where=tt.describe(args, rc, out[-300:], err))
        # render with a directory as data.path.
        args = ["render", tt.config("default.yaml"), *tt.TINY_MODEL,
                f"model.tokenizer={chat_tokenizer()}", f"data.path={tmp}", "data.format=chat"]
        rc, out, err = tt.run(args)
        one_error(rc, err, "data.path", tmp, where=tt.describe(args, rc, out, err))


# ---- validation on several ranks -------------------------------------------------------------


def case_val_ranks():
    """5 validation rows taken by 1, 2 and 3 ranks a row at a time, and by 1 rank in one batch of
    5 rows: the same val_loss (the same global batch of 30 rows trains each run alike). Every row
    has loss tokens at seq_len 128 (at 64 two of them had none, and 2 ranks taking the same rows
    went unnoticed), and their losses differ by 0.1-1%: a row counted twice or left out shows."""
    import test_mpi
    with tempfile.TemporaryDirectory(prefix="kktrain_hdata_") as tmp:
        val = write(os.path.join(tmp, "val.jsonl"), "".join(chat_lines()[:7]))
        over = [a for a in sft_args(tmp, "x", f"data.val_path={val}", "train.val_every=1",
                                    "data.global_batch_size=30", "data.seq_len=128",
                                    "model.dtype=float32",
                                    "distributed.mp_policy.param_dtype=float32",
                                    "distributed.mp_policy.output_dtype=null")[2:]
                if not a.startswith("train.output_dir") and
                not a.startswith("data.micro_batch_size")]
        losses = {}
        for np_, b, batches in ((1, 1, 5), (2, 1, 5), (3, 1, 5), (1, 5, 1)):
            out = os.path.join(tmp, f"np{np_}_b{b}")
            o = over + [f"data.micro_batch_size={b}", f"train.val_batches={batches}"]
            r = (tt.Run("default.yaml", out, o) if np_ == 1 else
                 test_mpi.MpiRun(np_, "default.yaml", out, o)).ok()
            v = r.val_rows()
            check(len(v) == 1, f"{np_} ranks: val rows {v}" + r.where)
            losses[(np_, b)] = v[0]["val_loss"]
        print(f"val_loss by (ranks, rows a batch): {losses}")
        ref = losses[(1, 5)]
        for k, x in losses.items():
            check(abs(x - ref) <= 1e-6 * abs(ref),
                  f"val_loss on {k[0]} rank(s), {k[1]} row(s) a batch: {x!r}; one batch of 5 "
                  f"rows on 1 rank: {ref!r}")


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
