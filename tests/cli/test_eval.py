"""`kktrain eval` end to end against tests/parity/eval_reference.py (lm-evaluation-harness rules,
float64 PyTorch).

usage: test_eval.py KKTRAIN INPUTS_DIR CASE      (tests/cli/eval.cmake, label "eval")

Every case first trains the same tiny byte-level fp32 model (C 32, L 2, 20 steps on the embedded
corpus, seq_len 32, an fp32 export: model()), then evaluates it at data.seq_len=64 on
inputs/eval_example_tasks.jsonl and three data files written here: inputs/eval_example_text.txt
(text, one document), a .jsonl of two documents (one shorter than L), and an llm.c shard of byte
ids (tokens).

inputs/eval_example_tasks.jsonl (13 hand-written items): contexts ending in a space (with the
default delimiter and with ""), in a tab, and in a no-break space
U+00A0 (Python's str.rstrip() strips it: its 2 bytes move onto every continuation); custom
delimiters ("\nAnswer: ", "\n", ""); choices of 1 to 39 bytes, multi-byte UTF-8 (2- and 4-byte
characters) so that characters, bytes and tokens differ; two contexts longer than L (left
truncation); choices sharing a long prefix; gold first, middle and last. On the test's model
acc, acc_norm and acc_bytes disagree on several items (the last one: acc_norm and acc_bytes).

- parity: each choice's score within SCORE_TOL of the float64 reference computed from the export's
  fp32 parameters; each choice's token count, the items and the truncated items exactly (the
  example holds contexts longer than L); acc / acc_norm / acc_bytes and their stderrs exactly as
  the harness's rules give them from kktrain's own scores, and equal to the reference's own;
  every data figure (tokens, documents, bytes exactly; loss, perplexity, bits_per_byte within
  LOSS_TOL relative). Byte-level text is scored after the prefix token 0 (BYTE_PREFIX): every
  byte predicted once.
- ranks: the same evaluation under `mpirun -np 2` gives the same figures as one rank (scores
  within RANKS_TOL, metrics and counts exactly; the JSON says "ranks": 2).
- training: eval.every's rows equal `kktrain eval` of the same step's checkpoint exactly, and a
  token file's loss equals the run's validation loss on the same tokens; a chat file's loss (the
  assistant's tokens, packed rows) equals a chat run's validation loss on it (case_training).
- refusals: a task line that is not JSON, a gold index out of range, empty choices, a missing
  file: exit 2 before any figure, one stderr line naming FILE:LINE (FILE for the missing file),
  no --json written; a 300 MiB text .jsonl (sparse) is classified by its first line, not read
  whole first: the document reader's refusal of its 300 MiB line, not the 256 MiB file limit.

Tolerances: kktrain computes in fp32; the reference in float64. A plain fp32 PyTorch forward of
the same model and items (the scores are sums of 2-39 log-probabilities, |score| up to ~160) is
within 1.4e-5 of float64 (1.6e-7 relative), so SCORE_TOL = 1e-4 + 1e-6 |score| leaves kktrain
7x the room of another fp32 implementation. Losses are means of hundreds of fp32 log-probabilities
summed in any order: 2e-5 relative. Exit 77 is a skip (no torch / h5py; no mpirun for ranks).
"""

import json
import math
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "parity"))
import test_train as tt  # noqa: E402
from test_train import check  # noqa: E402

FP32 = ["model.dtype=float32", "distributed.mp_policy.param_dtype=float32",
        "distributed.mp_policy.output_dtype=null", "checkpoint.export_dtype=float32"]
SEQ_LEN = 64
SCORE_TOL_ABS, SCORE_TOL_REL = 1e-4, 1e-6
LOSS_TOL = 2e-5
# A byte-level model has no BOS / EOS: the harness's prefix_token_id is 0 (the NUL byte), so every
# byte of a text document is predicted once and bits_per_byte divides by all its bytes.
BYTE_PREFIX = 0
RANKS_TOL = 1e-5
METRICS = ("acc", "acc_norm", "acc_bytes")
TOKEN_TEXT = ("In the spring the orchard was loud with bees, and the path between the trees was "
              "white with fallen petals. The farmer's daughter counted the hives each morning "
              "and wrote the number on a slate by the gate; by June there were eleven, and the "
              "honey that year was dark and tasted faintly of the pines on the hill above.")
JSONL_DOCS = ["A short one.",
              "The second document is longer than the model length, so that its windows roll: "
              "the first predicts sixty-four bytes, the next ones the rest, each once."]


def need_torch():
    try:
        import h5py  # noqa: F401
        import numpy  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        raise tt.Skip(f"the reference needs torch, numpy and h5py ({e})")


def model(tmp):
    """Trains the shared tiny byte-level fp32 model: its run directory (export.h5 inside)."""
    out = os.path.join(tmp, "run")
    tt.Run("default.yaml", out, [*tt.TINY_MODEL, "model.num_layers=2", "data.seq_len=32",
                                 "data.micro_batch_size=2", "data.global_batch_size=2",
                                 "checkpoint.resume=none", "train.max_steps=20", *FP32]).ok()
    check(os.path.exists(os.path.join(out, "export.h5")), "the run wrote no export.h5")
    return out


def data_files(tmp):
    """The three data files: text, a two-document .jsonl, an llm.c shard of byte ids."""
    jl = os.path.join(tmp, "two_docs.jsonl")
    with open(jl, "w", encoding="utf-8") as f:
        for d in JSONL_DOCS:
            f.write(json.dumps({"text": d}) + "\n")
    shard = os.path.join(tmp, "bytes_000000.bin")
    ids = list(TOKEN_TEXT.encode("utf-8"))
    header = [20240520, 1, len(ids)] + [0] * 253
    with open(shard, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(ids)}H", *ids))
    return [os.path.join(tt.INPUTS, "eval_example_text.txt"), jl, shard]


def task_file():
    return os.path.join(tt.INPUTS, "eval_example_tasks.jsonl")


def kk_eval(run_dir, out_json, tasks, data, np_=1, extra=()):
    args = ["eval", run_dir]
    for t in tasks:
        args += ["--task", t]
    for d in data:
        args += ["--data", d]
    args += ["--json", out_json, f"data.seq_len={SEQ_LEN}", *extra]
    if np_ == 1:
        rc, out, err = tt.run(args)
        where = tt.describe(args, rc, out, err)
    else:
        import test_mpi
        rc, out, err, secs = test_mpi.launch(test_mpi.mpirun(np_) + [tt.KKTRAIN, *args])
        where = f"\n(mpirun -np {np_}, {secs:.1f} s)" + tt.describe(args, rc, out, err)
    return rc, out, err, where


def evaluate(run_dir, tmp, name, np_=1):
    out_json = os.path.join(tmp, name + ".json")
    rc, out, err, where = kk_eval(run_dir, out_json, [task_file()], data_files(tmp), np_)
    check(rc == 0, "kktrain eval failed" + where)
    check(os.path.exists(out_json), "kktrain eval wrote no --json file" + where)
    with open(out_json) as f:
        res = json.load(f)
    check(res.get("ranks") == np_, f"\"ranks\": {res.get('ranks')!r}, expected {np_}" + where)
    check(res.get("seq_len") == SEQ_LEN, f"\"seq_len\": {res.get('seq_len')!r}" + where)
    return res, where


def reference(run_dir, tmp):
    import eval_reference as er
    return er.evaluate(os.path.join(run_dir, "export.h5"), SEQ_LEN, [task_file()],
                       data_files(tmp), byte_prefix=BYTE_PREFIX)


def by_name(rows, what):
    out = {}
    for r in rows:
        check("name" in r, f"a {what} entry without \"name\": {r}")
        out[r["name"]] = r
    return out


def close(a, b, abs_tol, rel_tol):
    return abs(a - b) <= abs_tol + rel_tol * abs(b)


def same_stat(a, b):
    """Metric values: exactly equal (None / null for an undefined stderr)."""
    return (a is None and b is None) or (a is not None and b is not None and a == b)


# ---- parity ------------------------------------------------------------------------------------

def compare_task(kt, rt, where):
    import eval_reference as er
    n = rt["items"]
    check(kt["items"] == n, f"items {kt['items']} vs reference {n}" + where)
    check(kt["truncated"] == rt["truncated"],
          f"truncated {kt['truncated']} vs reference {rt['truncated']}" + where)
    check(rt["truncated"] >= 1, "the example tasks should truncate at least one item")
    check(kt["choice_tokens"] == rt["choice_tokens"],
          f"choice_tokens\n{kt['choice_tokens']}\nvs reference\n{rt['choice_tokens']}" + where)
    check(len(kt["scores"]) == n and all(len(a) == len(b) for a, b in zip(kt["scores"],
                                                                            rt["scores"])),
          "scores: not one list per item with one score per choice" + where)
    worst, worst_at = 0.0, None
    for i, (ks, rs) in enumerate(zip(kt["scores"], rt["scores"])):
        for j, (a, b) in enumerate(zip(ks, rs)):
            err = abs(a - b)
            if err > worst:
                worst, worst_at = err, (i + 1, j, a, b)
            check(close(a, b, SCORE_TOL_ABS, SCORE_TOL_REL),
                  f"item {i + 1} choice {j}: score {a!r} vs reference {b!r} (|diff| {err:.3g})"
                  + where)
    print(f"scores: worst |kktrain - reference| {worst:.3g} (item {worst_at[0]} choice "
          f"{worst_at[1]}: {worst_at[2]!r} vs {worst_at[3]!r}); tolerance {SCORE_TOL_ABS} + "
          f"{SCORE_TOL_REL} |score|")
    items = er.read_task(task_file())
    own = er.task_metrics(items, kt["scores"])  # the harness's rules on kktrain's own scores
    for k in METRICS:
        for key in (k, k + "_stderr"):
            check(same_stat(kt.get(key), own[key]),
                  f"{key} {kt.get(key)!r}: the harness's rules on kktrain's scores give "
                  f"{own[key]!r}" + where)
            check(same_stat(kt.get(key), rt[key]),
                  f"{key} {kt.get(key)!r} vs the reference's {rt[key]!r}" + where)
    print("metrics: " + ", ".join(f"{k} {kt[k]:.6g} ± {kt[k + '_stderr']:.6g}" for k in METRICS)
          + f"; items {n}, truncated {kt['truncated']}")
    diff = {}
    for i, (s, it) in enumerate(zip(rt["scores"], items)):
        m = er.choice_metrics(s, it["choices"], it["gold"])
        if len(set(m.values())) > 1:
            diff[i + 1] = tuple(int(m[k]) for k in METRICS)
    print(f"items where acc / acc_norm / acc_bytes disagree (item: the three): {diff}")


def compare_data(kd, rd, where):
    check(kd.get("kind") == rd["kind"], f"{rd['name']}: kind {kd.get('kind')!r} vs "
          f"{rd['kind']!r}" + where)
    if rd["kind"] == "text" and kd.get("tokens") == rd["tokens"] - rd["documents"]:
        where = ("\n(one token fewer a document: a byte-level document's first byte is scored "
                 f"after the prefix token {BYTE_PREFIX}, as the harness scores every token after "
                 "its prefix_token_id; kktrain left it as context)" + where)
    keys = ["tokens"] + (["documents", "bytes"] if rd["kind"] == "text" else [])
    for k in keys:
        check(kd.get(k) == rd[k], f"{rd['name']}: {k} {kd.get(k)!r} vs reference {rd[k]!r}"
              + where)
    worst = 0.0
    for k in ["loss", "perplexity"] + (["bits_per_byte"] if rd["kind"] == "text" else []):
        a, b = kd.get(k), rd[k]
        check(isinstance(a, (int, float)), f"{rd['name']}: {k} {a!r}" + where)
        err = abs(a - b) / abs(b)
        worst = max(worst, err)
        check(err <= LOSS_TOL, f"{rd['name']}: {k} {a!r} vs reference {b!r} (relative "
              f"{err:.3g})" + where)
    print(f"data {rd['name']} ({rd['kind']}): tokens {kd['tokens']}, loss {kd['loss']:.9g} vs "
          f"{rd['loss']:.9g}, perplexity {kd['perplexity']:.9g}"
          + (f", bits_per_byte {kd['bits_per_byte']:.9g} vs {rd['bits_per_byte']:.9g}"
             if rd["kind"] == "text" else "") + f" (worst relative {worst:.3g})")


def case_parity():
    need_torch()
    with tempfile.TemporaryDirectory(prefix="kktrain_eval_") as tmp:
        run_dir = model(tmp)
        res, where = evaluate(run_dir, tmp, "one_rank")
        ref = reference(run_dir, tmp)
        kt, rt = by_name(res.get("tasks", []), "task"), by_name(ref["tasks"], "task")
        check(kt.keys() == rt.keys(), f"tasks {sorted(kt)} vs {sorted(rt)}" + where)
        for name in rt:
            compare_task(kt[name], rt[name], where)
        kd, rd = by_name(res.get("data", []), "data"), by_name(ref["data"], "data")
        check(kd.keys() == rd.keys(), f"data {sorted(kd)} vs {sorted(rd)}" + where)
        for name in rd:
            compare_data(kd[name], rd[name], where)


# ---- ranks -------------------------------------------------------------------------------------

def case_ranks():
    need_torch()
    import test_mpi
    test_mpi.mpirun(2)  # skips without mpirun
    with tempfile.TemporaryDirectory(prefix="kktrain_eval_") as tmp:
        run_dir = model(tmp)
        one, w1 = evaluate(run_dir, tmp, "one_rank")
        two, w2 = evaluate(run_dir, tmp, "two_ranks", np_=2)
        where = w1 + w2
        t1, t2 = by_name(one["tasks"], "task"), by_name(two["tasks"], "task")
        check(t1.keys() == t2.keys(), "different tasks" + where)
        worst, bitwise = 0.0, True
        for name in t1:
            a, b = t1[name], t2[name]
            for k in ("items", "truncated", "choice_tokens"):
                check(a[k] == b[k], f"{name}: {k} differs on 2 ranks" + where)
            for i, (x, y) in enumerate(zip(a["scores"], b["scores"])):
                check(len(x) == len(y), f"{name} item {i + 1}: choice counts differ" + where)
                for j, (u, v) in enumerate(zip(x, y)):
                    worst = max(worst, abs(u - v))
                    bitwise = bitwise and u == v
                    check(abs(u - v) <= RANKS_TOL, f"{name} item {i + 1} choice {j}: {u!r} "
                          f"(1 rank) vs {v!r} (2 ranks)" + where)
            for k in METRICS:
                for key in (k, k + "_stderr"):
                    check(same_stat(a[key], b[key]), f"{name}: {key} {a[key]!r} (1 rank) vs "
                          f"{b[key]!r} (2 ranks)" + where)
        d1, d2 = by_name(one["data"], "data"), by_name(two["data"], "data")
        check(d1.keys() == d2.keys(), "different data entries" + where)
        dworst = 0.0
        for name in d1:
            a, b = d1[name], d2[name]
            for k in ("kind", "tokens", "documents", "bytes"):
                check(a.get(k) == b.get(k), f"{name}: {k} {a.get(k)!r} vs {b.get(k)!r}" + where)
            for k in ("loss", "perplexity", "bits_per_byte"):
                if a.get(k) is None and b.get(k) is None:
                    continue
                err = abs(a[k] - b[k]) / abs(a[k])
                dworst = max(dworst, err)
                check(err <= LOSS_TOL, f"{name}: {k} {a[k]!r} (1 rank) vs {b[k]!r} (2 ranks)"
                      + where)
        exact = "bit for bit" if bitwise else "not bit for bit"
        print(f"2 ranks vs 1: scores worst {worst:.3g} ({exact}), data worst relative "
              f"{dworst:.3g}")


# ---- refusals ----------------------------------------------------------------------------------

GOOD = {"context": "The sky is", "choices": ["blue", "green"], "gold": 0}


def case_refusals():
    with tempfile.TemporaryDirectory(prefix="kktrain_eval_") as tmp:
        run_dir = model(tmp)
        bad_lines = [("not_json", "{\"context\": \"The sky is\", \"choices\": [\"blue\"",
                      ()),
                     ("gold_range", json.dumps(dict(GOOD, gold=2)), ("gold",)),
                     ("gold_negative", json.dumps(dict(GOOD, gold=-1)), ("gold",)),
                     ("empty_choices", json.dumps(dict(GOOD, choices=[])), ("choices",))]
        for name, line, needles in bad_lines:
            path = os.path.join(tmp, name + ".jsonl")
            with open(path, "w") as f:  # the bad item is line 3
                f.write(json.dumps(GOOD) + "\n" + json.dumps(GOOD) + "\n" + line + "\n")
            out_json = os.path.join(tmp, name + ".json")
            rc, out, err, where = kk_eval(run_dir, out_json, [path], [])
            tt.expect_one_error(rc, out, err, f"{path}:3", *needles, where=where)
            check(not os.path.exists(out_json), f"{name}: a refused eval wrote --json" + where)
            print(f"{name}: {tt.startup_lines(err)[0]}")
        # A text .jsonl is classified by its first line, not read whole first: a sparse 300 MiB
        # file (beyond a task file's 256 MiB) whose second line is 300 MiB of NULs gets
        # the document reader's refusal of that line, not the whole-file limit.
        big = os.path.join(tmp, "big_text.jsonl")
        with open(big, "wb") as f:
            f.write(b"\n" + json.dumps({"text": "a first document"}).encode() + b"\n")
            f.truncate(300 << 20)
        rc, out, err, where = kk_eval(run_dir, os.path.join(tmp, "big.json"), [], [big])
        tt.expect_one_error(rc, out, err, big + "':3:", "longer than 64 MiB", where=where)
        print(f"300 MiB text .jsonl: {tt.startup_lines(err)[0]}")
        missing = os.path.join(tmp, "no_such_tasks.jsonl")
        out_json = os.path.join(tmp, "missing.json")
        for flag in ("--task", "--data"):
            args_t = [missing] if flag == "--task" else []
            args_d = [missing] if flag == "--data" else []
            rc, out, err, where = kk_eval(run_dir, out_json, args_t, args_d)
            tt.expect_one_error(rc, out, err, missing, where=where)
            check(not os.path.exists(out_json), "a refused eval wrote --json" + where)
            print(f"missing {flag} file: {tt.startup_lines(err)[0]}")


def case_training():
    """eval.every during training: its rows equal `kktrain eval` of that step's checkpoint (same
    rows, same fp32 arithmetic: exactly), and a token file's loss equals the run's own validation
    loss on the same tokens (the validation split holds exactly one window of T + 1 tokens, so
    every validation window is that one: equal within 1e-6 relative, the order in which 64 fp32
    token losses are summed)."""
    with tempfile.TemporaryDirectory(prefix="kktrain_eval_") as tmp:
        T = SEQ_LEN  # the example tasks' longest choice is 39 bytes
        text = (TOKEN_TEXT * 4).encode("utf-8")[:1000]  # 1000 byte ids; validation: the last 65
        corpus = os.path.join(tmp, "corpus.txt")  # byte-level: its bytes are the ids
        with open(corpus, "wb") as f:
            f.write(text)
        val = os.path.join(tmp, "val.bin")  # the same ids as a token file (headerless: uint16)
        with open(val, "wb") as f:
            f.write(struct.pack(f"<{T + 1}H", *text[-(T + 1):]))
        out = os.path.join(tmp, "run")
        r = tt.Run("default.yaml", out, [
            *tt.TINY_MODEL, "model.num_layers=2", f"data.seq_len={T}", f"data.path={corpus}",
            "data.val_fraction=0.065", "data.micro_batch_size=2", "data.global_batch_size=2",
            "checkpoint.resume=none", "train.max_steps=6", "train.val_every=3",
            "checkpoint.save_every=3", "eval.every=3", f"eval.data=[{val}]",
            f"eval.tasks=[{task_file()}]", *FP32]).ok()
        evals = {row["step"]: row for row in r.rows if "eval/val/loss" in row}
        vals = {row["step"]: row for row in r.rows if "val_loss" in row}
        check(sorted(evals) == [3, 6] and sorted(vals) == [3, 6],
              f"eval rows at {sorted(evals)}, validation rows at {sorted(vals)}" + r.where)
        for step in (3, 6):
            row = evals[step]
            rel = abs(row["eval/val/loss"] - vals[step]["val_loss"]) / vals[step]["val_loss"]
            check(rel < 1e-6, f"step {step}: eval/val/loss {row['eval/val/loss']!r} vs val_loss "
                  f"{vals[step]['val_loss']!r} (relative {rel:.2e})" + r.where)
            ckpt = os.path.join(out, "checkpoints", f"step_{step:08d}")
            out_json = os.path.join(tmp, f"step{step}.json")
            args = ["eval", ckpt, "--task", task_file(), "--data", val, "--json", out_json,
                    f"data.seq_len={T}", "data.micro_batch_size=2"]
            rc, o, err = tt.run(args)
            check(rc == 0, "kktrain eval of the checkpoint failed" + tt.describe(args, rc, o, err))
            with open(out_json) as f:
                res = json.load(f)
            want = {"eval/val/loss": res["data"][0]["loss"],
                    "eval/val/perplexity": res["data"][0]["perplexity"]}
            for m in METRICS:
                want[f"eval/eval_example_tasks/{m}"] = res["tasks"][0][m]
            for k, v in want.items():
                check(row.get(k) == v, f"step {step}: {k} {row.get(k)!r} in the run's row, "
                      f"{v!r} from kktrain eval of {ckpt}")
            print(f"step {step}: eval/val/loss {row['eval/val/loss']:.9f} = kktrain eval; "
                  f"val_loss {vals[step]['val_loss']:.9f} (relative {rel:.1e}); "
                  f"acc {row['eval/eval_example_tasks/acc']:.4f} = kktrain eval")
        # chat data: the loss over the assistant's tokens, as a chat run's validation loss on the
        # same file (every example once: 40 examples in 5 micro-batches of 8)
        chat = os.path.join(tt.INPUTS, "chat_example.jsonl")
        out = os.path.join(tmp, "chat")
        r = tt.Run("default.yaml", out, [
            *tt.TINY_MODEL, f"model.tokenizer={os.path.join(tt.INPUTS, 'chat_tokenizer')}",
            "data.format=chat", f"data.path={chat}", f"data.val_path={chat}", "data.seq_len=128",
            "data.micro_batch_size=8", "data.global_batch_size=8", "train.val_batches=5",
            "train.val_every=4", "train.max_steps=4", "checkpoint.resume=none", *FP32]).ok()
        val = [row for row in r.rows if "val_loss" in row][-1]
        out_json = os.path.join(tmp, "chat.json")
        args = ["eval", out, "--data", chat, "--json", out_json, "data.seq_len=128"]
        rc, o, err = tt.run(args)
        check(rc == 0, "kktrain eval of the chat run failed" + tt.describe(args, rc, o, err))
        with open(out_json) as f:
            d = json.load(f)["data"][0]
        rel = abs(d["loss"] - val["val_loss"]) / val["val_loss"]
        check(d["kind"] == "chat" and d["documents"] == 40 and rel < 1e-6,
              f"chat: {d} vs val_loss {val['val_loss']!r} (relative {rel:.2e})")
        print(f"chat: loss {d['loss']:.9f} over {d['tokens']} assistant tokens, val_loss "
              f"{val['val_loss']:.9f} (relative {rel:.1e})")


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
