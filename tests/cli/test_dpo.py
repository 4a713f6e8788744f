"""Preference training end to end (train.objective dpo on data.format preference; model/
preference_loss.hpp, apps/train/preference_data.hpp): the pairs of inputs/preference_example.jsonl
(or pairs written here) through the chat tokenizer and template of inputs/chat_tokenizer, on a
tiny model.

usage: test_dpo.py KKTRAIN INPUTS_DIR CASE      (tests/cli/dpo.cmake, labels "train" / "mpi")

- parity: `kktrain grads` of a packed micro-batch of pairs, every dpo.loss (sigmoid with label
  smoothing, ipo, simpo, orpo) in fp32 and sigmoid in bf16, with shared prompts through both
  attention kernels (small tiles) and without them, checked by tests/parity/check_preference.py
  against PyTorch (the reference sums, each pair's sums and loss, every gradient).
- forms: the explicit (prompt messages), implicit (shared opening) and string forms of one pair
  render the same tokens where they mean the same conversation; each side's mask is its reply's
  tokens and its end of turn; `kktrain render --tokens` prints {"chosen", "rejected"} per pair.
- split_invariance: 1 rank x 1 micro-batch of the whole global batch, 1 x 4 and 2 ranks x 2
  give the same losses, reward columns and weights (fp32, within summation order).
- resume: a run stopped mid-epoch and resumed ends with the uninterrupted run's weights bit for
  bit, on 1 and 2 ranks, reusing the reference log-probabilities; with them removed, the resumed
  run computes them again from the starting weights (loaded into its model before the
  checkpoint's values) and still ends bit for bit; a changed model recomputes them with a
  warning.
- sign: from the tiny model fine-tuned on the conversations, 20 DPO steps on
  inputs/preference_example.jsonl, for beta 0.1 and 0.5: the chosen rewards rise above 0 and the
  rejected fall below 0 (means over steps 2-20), the margin grows, the accuracy is above one
  half, the loss falls, and the validation rows report the same columns.
- exports: LoRA DPO with the adapters in PEFT's format, full DPO with a safetensors export.
- refusals: a bad pair is one error naming FILE:LINE before any step (no cache left); mismatched
  objective and data format, a dpo section without the objective, label smoothing with ipo.
"""

import json
import os
import subprocess
import sys
import tempfile


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_train as tt  # noqa: E402
from test_train import check  # noqa: E402

try:
    import h5py
except ImportError:  # pragma: no cover
    h5py = None

# The fp32 settings, plain SGD and the tolerances of test_sft.py: splitting the same pairs
# differently changes only the fp32 order of sums.
from test_sft import FP32, SGD, LOSS_TOL, compare_weights, run  # noqa: E402

PAIR_COLUMNS = ("rewards_chosen", "rewards_rejected", "reward_margin", "reward_accuracy",
                "logps_chosen", "logps_rejected")


def data_file():
    return os.path.join(tt.INPUTS, "preference_example.jsonl")


def base(*extra, steps=None, path=None):
    inputs = tt.INPUTS
    over = [*tt.TINY_MODEL, "model.num_layers=2", "model.max_seq_len=512",
            "checkpoint.resume=none",
            f"model.tokenizer={os.path.join(inputs, 'chat_tokenizer')}",
            f"data.path={path or data_file()}", "data.format=preference",
            "train.objective=dpo", "data.seq_len=384", "train.log_every=1", "train.val_every=0",
            "lr_scheduler.lr_warmup_steps=0", *extra]
    if steps is not None:
        over.append(f"train.max_steps={steps}")
    return over


def need_h5py():
    if h5py is None:
        raise tt.Skip("h5py is not installed")


def compare_rows(a, b, what, tol=LOSS_TOL):
    ra, rb = a.train_rows(), b.train_rows()
    check(len(ra) == len(rb), f"{what}: {len(ra)} vs {len(rb)} steps")
    worst = 0.0
    for i, (x, y) in enumerate(zip(ra, rb)):
        check(x["pairs"] == y["pairs"], f"{what}: step {i + 1} pairs {x['pairs']} vs {y['pairs']}")
        for k in ("loss",) + PAIR_COLUMNS:
            # rewards are beta (S - R), differences of sums: relative to beta |S|
            scale = (0.1 * max(abs(x["logps_chosen"]), abs(x["logps_rejected"]))
                     if k.startswith("reward") and k != "reward_accuracy" else max(abs(x[k]), 1e-3))
            err = abs(x[k] - y[k]) / scale
            worst = max(worst, err)
            check(err <= tol, f"{what}: step {i + 1} {k} {x[k]!r} vs {y[k]!r}")
    print(f"{what}: losses and reward columns within {worst:.3g}")


# ---- parity ------------------------------------------------------------------------------------

PARITY_BF16 = ["model.dtype=bfloat16", "distributed.mp_policy.param_dtype=bfloat16",
               "checkpoint.export_dtype=bfloat16"]


def case_parity():
    need_h5py()
    check_py = os.path.join(HERE, "..", "parity", "check_preference.py")
    with tempfile.TemporaryDirectory(prefix="kktrain_dpo_") as tmp:
        # small attention tiles: the shared prompts' gaps cross tile and block boundaries
        team = ["model.attention=team", "model.attention_tiles=16x16"]
        tiled = ["model.attention=tiled_gemm", "model.attention_tiles=16x16"]
        cases = [("sigmoid", ["dpo.label_smoothing=0.1", *tiled], FP32, "float32"),
                 ("ipo", ["dpo.beta=0.5", *team], FP32, "float32"),
                 ("simpo", ["dpo.beta=2.0", "dpo.simpo_gamma=0.3"], FP32, "float32"),
                 ("orpo", ["data.share_prompt=false"], FP32, "float32"),
                 ("sigmoid", [], PARITY_BF16, "bf16_autocast")]
        for i, (loss, extra, precision, mode) in enumerate(cases):
            out = os.path.join(tmp, f"{i}_{loss}_{mode}.h5")
            args = ["grads", tt.config("default.yaml"),
                    *base(*precision, "data.packing=true", "data.micro_batch_size=2",
                          f"dpo.loss={loss}", *extra), f"train.output_dir={tmp}/run",
                    "--out", out]
            rc, o, err = tt.run(args)
            check(rc == 0, "kktrain grads" + tt.describe(args, rc, o, err))
            shared = "data.share_prompt=false" not in extra
            with h5py.File(out, "r") as f:
                check(f["dpo/pairs"].shape[0] >= 3, f"{loss}: the micro-batch holds "
                      f"{f['dpo/pairs'].shape[0]} pairs (packing should give several)")
                check(("gaps" in f["batch"]) == shared, f"{loss}: /batch/gaps when (and only "
                      f"when) the pairs share their prompts ({shared})")
            p = subprocess.run([sys.executable, check_py, out, mode], capture_output=True,
                               text=True, timeout=240)
            tail = "\n".join(p.stdout.strip().splitlines()[-12:])
            print(f"--- {loss} {mode} ---\n{tail}")
            check(p.returncode == 0, f"{loss} {mode}: check_preference.py failed:\n"
                  f"{p.stdout[-4000:]}\n{p.stderr[-2000:]}")


# ---- forms -------------------------------------------------------------------------------------

def render(tmp, path, *extra, rc_want=0):
    args = ["render", tt.config("default.yaml"), *base(f"data.path={path}", *extra), "--tokens",
            "--count", "0"]
    rc, out, err = tt.run(args)
    check(rc == rc_want, "kktrain render" + tt.describe(args, rc, out, err))
    return [json.loads(ln) for ln in out.splitlines()] if rc == 0 else err


def write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return path


def msg(role, content):
    return {"role": role, "content": content}


def case_forms():
    with tempfile.TemporaryDirectory(prefix="kktrain_dpo_") as tmp:
        q, c, r = "Name a primary color.", "Red is a primary color.", "Pink."
        explicit = {"prompt": [msg("user", q)], "chosen": [msg("assistant", c)],
                    "rejected": [msg("assistant", r)]}
        implicit = {"chosen": [msg("user", q), msg("assistant", c)],
                    "rejected": [msg("user", q), msg("assistant", r)]}
        strings = {"prompt": q, "chosen": c, "rejected": r}
        # a longer shared opening: the earlier assistant turn is the prompt's, never scored
        turns = [msg("user", "Hi."), msg("assistant", "Hello!"), msg("user", q)]
        multi = {"chosen": turns + [msg("assistant", c)], "rejected": turns + [msg("assistant", r)]}
        out = render(tmp, write_jsonl(os.path.join(tmp, "p.jsonl"),
                                      [explicit, implicit, strings, multi]))
        check(len(out) == 4 and all(set(o) == {"chosen", "rejected"} for o in out),
              f"one {{chosen, rejected}} object a pair: {out}")
        check(out[0] == out[1] == out[2], "explicit, implicit and string forms of one pair render "
              f"the same sides:\n{out[0]}\n{out[1]}\n{out[2]}")
        end = 4  # <|end|>
        for o in out:
            for side, text in (("chosen", c), ("rejected", r)):
                s = o[side]
                check(len(s["ids"]) == len(s["loss_mask"]) and s["loss_mask"][0] == 0,
                      f"{side}: ids and mask")
                scored = [i for i, m in zip(s["ids"], s["loss_mask"]) if m]
                want = list(text.encode()) + [end]
                check(scored == want, f"{side}: the scored tokens are the reply and its end of "
                      f"turn: {bytes(i for i in scored if i > 4)!r} (+{scored[-1:]}) vs {text!r}")
                check(s["text"].endswith(f"<|assistant|>\n{text}<|end|>\n"),
                      f"{side} text: {s['text']!r}")
        check(out[3]["chosen"]["text"].count("Hello!") == 1, "the prompt's turns are rendered")
        print("forms: explicit = implicit = strings; masks are each reply and its <|end|>")


# ---- split invariance --------------------------------------------------------------------------

def case_split_invariance():
    need_h5py()
    with tempfile.TemporaryDirectory(prefix="kktrain_dpo_") as tmp:
        common = base(*FP32, SGD, "data.packing=true", "data.global_batch_size=8",
                      "data.val_fraction=0", steps=3)
        whole = run(1, tmp, "whole", common + ["data.micro_batch_size=8"])
        rows = whole.train_rows()
        check(sum(r["pairs"] for r in rows) > 8 * len(rows), f"packed rows carry several "
              f"pairs: {[r['pairs'] for r in rows]} in steps of 8 rows")
        check(all(k in rows[0] for k in PAIR_COLUMNS), f"reward columns: {rows[0]}")
        for np_, mb in ((1, 2), (2, 2)):
            r = run(np_, tmp, f"np{np_}", common + [f"data.micro_batch_size={mb}"])
            what = f"{np_} rank(s) x {8 // (np_ * mb)} micro-batches vs 1 x 1"
            compare_rows(whole, r, what)
            compare_weights(whole, r, what)


# ---- resume and the reference cache ------------------------------------------------------------

def case_resume():
    need_h5py()
    with tempfile.TemporaryDirectory(prefix="kktrain_dpo_") as tmp:
        for np_ in (1, 2):
            common = base("data.packing=true", "data.global_batch_size=4",
                          "data.micro_batch_size=2", "train.epochs=2",
                          "lr_scheduler.lr_decay_style=constant")
            whole = run(np_, tmp, f"whole{np_}", common)
            check("reference log-probabilities of" in whole.err, "the reference pass is reported"
                  + whole.where)
            steps = len(whole.train_rows())
            cut = steps // 2 - 1
            resumed_common = [o for o in common if o != "checkpoint.resume=none"]
            for how in ("reused", "recomputed"):
                out = f"part{np_}_{how}"
                run(np_, tmp, out, common + [f"train.max_steps={cut}"])
                if how == "recomputed":
                    os.remove(os.path.join(tmp, out, "examples", "reference", "manifest.json"))
                part = run(np_, tmp, out, resumed_common)
                check(any("resumed from" in ln for ln in part.err.splitlines()), "it resumed" +
                      part.where)
                if how == "reused":
                    check("computed at an earlier start are reused" in part.err,
                          "the resumed run reuses the reference log-probabilities" + part.where)
                else:
                    check("reference log-probabilities of" in part.err,
                          "without them the resumed run computes them again" + part.where)
                got = [r["loss"] for r in part.train_rows()]
                want = [r["loss"] for r in whole.train_rows()]
                check(got == want, f"{np_} rank(s), reference {how}: resumed losses differ from "
                      f"the uninterrupted run's:\n{got}\n{want}")
                compare_weights(whole, part, f"{np_} rank(s) resumed, reference {how}", tol=0.0)
        # another model in the same output directory: computed again, with a warning
        again = run(1, tmp, "whole1", base("data.packing=true", "model.seed=7", steps=1))
        check("computed again from the starting weights" in again.err, "a changed model recomputes the reference "
              "log-probabilities with a warning" + again.where)


# ---- the sign of the rewards -------------------------------------------------------------------

def case_sign():
    with tempfile.TemporaryDirectory(prefix="kktrain_dpo_") as tmp:
        # The start: the tiny model fine-tuned on the conversations (60 SFT steps), so that it
        # has learnt the replies' format and DPO moves the two sides apart (from a random model
        # both sides' likelihoods first rise together with the format).
        chat = [*tt.TINY_MODEL, "model.num_layers=2", "model.max_seq_len=512",
                "checkpoint.resume=none",
                f"model.tokenizer={os.path.join(tt.INPUTS, 'chat_tokenizer')}",
                f"data.path={os.path.join(tt.INPUTS, 'chat_example.jsonl')}", "data.format=chat",
                "data.packing=true", "data.seq_len=128", "optimizer.lr=1e-2",
                "train.max_steps=60", "train.log_every=60", "train.val_every=0"]
        sft = run(1, tmp, "sft", chat)
        start = os.path.join(sft.out_dir, "export.h5")
        for beta in (0.1, 0.5):
            r = run(1, tmp, f"beta{beta}", base(f"dpo.beta={beta}", f"model.init_from={start}",
                                                "data.packing=true", "data.micro_batch_size=4",
                                                "data.global_batch_size=8", "optimizer.lr=5e-4",
                                                "data.val_fraction=0.15", "train.val_every=10",
                                                steps=20))
            rows = r.train_rows()
            first = rows[0]
            check(abs(first["rewards_chosen"]) < 1e-9 and abs(first["rewards_rejected"]) < 1e-9,
                  f"beta {beta}: the first step's rewards are 0 (the policy is the reference): "
                  f"{first}")
            later = rows[1:]
            mean = {k: sum(x[k] for x in later) / len(later) for k in PAIR_COLUMNS}
            margins = [x["reward_margin"] for x in rows]
            print(f"beta {beta}: steps 2-20 means {mean}; margins {margins[1]:.3f} -> "
                  f"{margins[-1]:.3f}; loss {first['loss']:.4f} -> {rows[-1]['loss']:.4f}")
            check(mean["rewards_chosen"] > 0 and mean["rewards_rejected"] < 0,
                  f"beta {beta}: chosen rewards rise, rejected fall: {mean}")
            check(sum(margins[-5:]) > sum(margins[1:6]) > 0 and mean["reward_accuracy"] > 0.5,
                  f"beta {beta}: the margin grows ({margins}), accuracy {mean['reward_accuracy']}")
            check(rows[-1]["loss"] < first["loss"], f"beta {beta}: the loss falls")
            v = r.val_rows()
            check(len(v) == 2 and all(f"val_{k}" in v[0] for k in PAIR_COLUMNS) and
                  v[0]["val_pairs"] > 0, f"validation rows report the pairs' columns: {v}")


# ---- exports -----------------------------------------------------------------------------------

def case_exports():
    with tempfile.TemporaryDirectory(prefix="kktrain_dpo_") as tmp:
        lora = run(1, tmp, "lora", base("peft.dim=4", "peft.alpha=8",
                                        "peft.target_modules=[q_proj,v_proj]",
                                        "checkpoint.export_format=peft", "data.packing=true",
                                        steps=3))
        adapter = os.path.join(lora.out_dir, "adapter")
        for f in ("adapter_config.json", "adapter_model.safetensors"):
            check(os.path.isfile(os.path.join(adapter, f)), f"LoRA DPO writes adapter/{f}" +
                  lora.where)
        check(os.path.isfile(os.path.join(lora.out_dir, "export.h5")), "and the merged export")
        check("reference log-probabilities of" in lora.err, "LoRA DPO computes its reference "
              "with the adapters at zero (the base model)" + lora.where)
        full = run(1, tmp, "full", base("checkpoint.export_format=safetensors", "data.packing=true",
                                        steps=3))
        check(os.path.isfile(os.path.join(full.out_dir, "export", "model.safetensors")),
              "full DPO writes a safetensors export" + full.where)


# ---- refusals ----------------------------------------------------------------------------------

def case_refusals():
    with tempfile.TemporaryDirectory(prefix="kktrain_dpo_") as tmp:
        good = {"prompt": [msg("user", "Hi?")], "chosen": [msg("assistant", "Hello.")],
                "rejected": [msg("assistant", "Go away.")]}
        bad_pairs = [
            ({"chosen": [msg("user", "A?"), msg("assistant", "x")],
              "rejected": [msg("user", "B?"), msg("assistant", "y")]}, "prompts differ"),
            ({**good, "chosen": [msg("assistant", "")]}, "chosen completion is empty"),
            ({**good, "rejected": [msg("user", "no")]}, "is the user's"),
            ({**good, "chosen": "a string"}, "both strings or both lists"),
            ({"prompt": "Hi?", "chosen": "a"}, "no \"rejected\""),
            ({"prompt": "Hi?", "chosen": [msg("assistant", "a")],
              "rejected": [msg("assistant", "b")]}, "\"prompt\" is a string"),
            ({"prompt": 3, "chosen": "a", "rejected": "b"}, "\"prompt\" is a number"),
        ]
        for i, (pair, needle) in enumerate(bad_pairs):
            path = write_jsonl(os.path.join(tmp, f"bad{i}.jsonl"), [good, good, pair, good])
            out = os.path.join(tmp, f"bad{i}")
            args = ["train", tt.config("default.yaml"), *base(steps=2, path=path),
                    f"train.output_dir={out}"]
            rc, _, err = tt.run(args)
            check(rc == 2 and f"{path}:3" in err and needle in err and
                  len(err.strip().splitlines()) == 1,
                  f"pair {pair}: one line naming FILE:LINE and {needle!r}" +
                  tt.describe(args, rc, "", err))
            check(not os.path.exists(os.path.join(out, "examples", "manifest.json")),
                  "no cache manifest after a failed render")
        for extra, needle in ((["train.objective=sft"], "set train.objective: dpo"),
                              (["data.format=chat"], "set data.format: preference"),
                              (["train.objective=sft", "data.format=chat", "dpo.beta=0.2"],
                               "remove the dpo section"),
                              (["dpo.loss=ipo", "dpo.label_smoothing=0.1"],
                               "dpo.label_smoothing"),
                              (["dpo.loss=sigmoid", "dpo.simpo_gamma=0.1"], "dpo.simpo_gamma"),
                              (["data.loss_on=all"], "data.loss_on")):
            args = ["train", tt.config("default.yaml"), *base(*extra, steps=2),
                    f"train.output_dir={os.path.join(tmp, 'r')}"]
            if "data.format=chat" in extra:
                args = [a for a in args if a != "data.format=preference"]
            rc, _, err = tt.run(args)
            check(rc == 2 and needle in err and len(err.strip().splitlines()) == 1,
                  f"{extra}: one line naming {needle}" + tt.describe(args, rc, "", err))


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
