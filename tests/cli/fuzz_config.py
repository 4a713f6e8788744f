"""Fuzz test of config and override handling (docs/cli.md, "Exit status and errors").

usage: fuzz_config.py KKTRAIN SEED_CONFIG... [--cases N] [--seed S]

Mutates valid configs (line deletions and duplications, values swapped for hostile ones, keys
renamed, indentation broken, documents split, bytes flipped, files truncated) and adds random
overrides of real and invented keys, then runs `kktrain config` and `kktrain audit` on each. Every
run must end within its timeout with exit 0 or 2; stderr may hold warning lines, and with exit 2
exactly one line "kktrain: error: ..." and nothing on stdout. A crash (signal, exit 1, sanitizer
report), a hang, or a multi-line or missing error fails the test; the failing input is printed so
it can be replayed. A fixed seed and budget keep CI runs reproducible (a few seconds).
"""

import os
import random
import subprocess
import sys
import tempfile

HOSTILE = [
    "", "~", "null", "-1", "0", "1", "3", "7", "-0.0", "1e309", "-1e309", ".nan", ".inf", "nan",
    "2147483648", "9223372036854775808", "99999999999999999999", "0x10", "1_000", "true", "yes",
    "[]", "{}", "[1, 2]", "[0.9]", "[0.9, 0.999, 0.5]", "{a: b}", "'quoted'", '"x"', "bfloat16",
    "float16", "torch.float16", "fp8", "auto", "int8", "*", "[\"*\"]", "[\"*norm*\"]", "/", "/dev/null",
    "/nonexistent/file", ".", "runs", "é", "\u2028", "a" * 5000, "!!binary AA==", "&a 1", "*a",
    "{{", "]]", "- x", ": y", "\t3", "'", '"', "#", "@", "`",
]

KEYS = [
    "model.hidden_size", "model.num_layers", "model.num_heads", "model.num_kv_heads",
    "model.intermediate_size", "model.vocab_size", "model.max_seq_len", "model.dtype",
    "model.torch_dtype", "model.keep_in_fp32", "model.init_from", "model.mtp_num_layers",
    "model.tie_word_embeddings", "model.rms_norm_eps", "model.rope_theta", "optimizer._target_",
    "optimizer.lr", "optimizer.betas", "optimizer.eps", "optimizer.weight_decay",
    "optimizer.master_weights", "optimizer.exp_avg_dtype", "optimizer.store_param_remainders",
    "optimizer.momentum", "optimizer.stochastic_rounding", "optimizer.weight_decay_exclude",
    "lr_scheduler.lr_decay_style", "lr_scheduler.min_lr", "lr_scheduler.lr_warmup_steps",
    "distributed.strategy", "distributed.mp_policy.param_dtype",
    "distributed.mp_policy.reduce_dtype", "distributed.mp_policy.output_dtype",
    "distributed.mp_policy.cast_forward_inputs", "data.path", "data.seq_len",
    "data.micro_batch_size", "data.global_batch_size", "data.format", "train.max_steps",
    "train.grad_clip", "train.output_dir", "train.log_every", "checkpoint.resume",
    "checkpoint.every", "peft.dim", "peft.alpha", "peft.target_modules", "peft._target_",
    "freeze_config.freeze", "freeze_config.unfreeze", "model", "optimizer", "nonsense",
    "model.nonsense", "optimizer.betas.0", "..", "model..hidden_size", "",
]


def mutate(text, rng):
    lines = text.splitlines()
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(9)
        i = rng.randrange(len(lines)) if lines else 0
        if not lines:
            lines = ["model:"]
        elif op == 0:  # delete a line
            del lines[i]
        elif op == 1:  # duplicate a line (duplicate keys)
            lines.insert(i, lines[i])
        elif op == 2 and ":" in lines[i]:  # hostile value
            key = lines[i].split(":", 1)[0]
            lines[i] = key + ": " + rng.choice(HOSTILE)
        elif op == 3 and ":" in lines[i]:  # rename a key
            rest = lines[i].split(":", 1)[1]
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            lines[i] = indent + rng.choice(["x", "hidden_sise", "_target_", "lr", "model", "é"]) + ":" + rest
        elif op == 4:  # break the indentation
            lines[i] = " " * rng.randint(0, 7) + lines[i].lstrip()
        elif op == 5:  # split into documents
            lines.insert(i, rng.choice(["---", "...", "--- !!map", "%YAML 1.2"]))
        elif op == 6:  # a tab, a NUL or a stray character
            s = lines[i]
            j = rng.randint(0, len(s))
            lines[i] = s[:j] + rng.choice(["\t", "\x00", "\x7f", "{", "[", "&", "*", "!", "|"]) + s[j:]
        elif op == 7:  # truncate
            out = "\n".join(lines)
            return out[: rng.randint(0, len(out))]
        else:  # nest deeper
            lines[i] = lines[i] + " " + "[" * rng.randint(1, 200)
    return "\n".join(lines) + "\n"


def overrides(rng):
    out = []
    for _ in range(rng.randint(0, 3)):
        key = rng.choice(KEYS)
        form = rng.randrange(6)
        if form == 0:
            out.append(key)  # no '='
        elif form == 1:
            out.append("=" + rng.choice(HOSTILE))
        else:
            out.append(key + "=" + rng.choice(HOSTILE))
    return out


def check_run(kktrain, args, case):
    try:
        p = subprocess.run([kktrain, *args], capture_output=True, timeout=20)
    except subprocess.TimeoutExpired:
        return f"hang (over 20 s): {case}", None
    err = p.stderr.decode("utf-8", "replace")
    out = p.stdout.decode("utf-8", "replace")
    lines = err.split("\n")  # lines end at \n only (not at U+2028 and the like)
    if lines and lines[-1] == "":
        lines.pop()
    errors = [l for l in lines if l.startswith("kktrain: error: ")]
    others = [l for l in lines if not l.startswith("kktrain: warning: ")
              and not l.startswith("kktrain: error: ")]
    rc = p.returncode
    if rc not in (0, 2):
        return f"exit {rc}: {case}\nstderr:\n{err}", rc
    if others:
        return f"stderr lines that are neither warnings nor the error: {case}\nstderr:\n{err}", rc
    if rc == 2 and (len(errors) != 1 or out != ""):
        return f"exit 2 needs exactly one error line and empty stdout: {case}\nstderr:\n{err}", rc
    if rc == 0 and errors:
        return f"exit 0 with an error line: {case}\nstderr:\n{err}", rc
    return None, rc


def main():
    args = sys.argv[1:]
    cases, seed = 300, 1
    if "--cases" in args:
        k = args.index("--cases")
        cases = int(args[k + 1])
        del args[k : k + 2]
    if "--seed" in args:
        k = args.index("--seed")
        seed = int(args[k + 1])
        del args[k : k + 2]
    if len(args) < 2:
        print(__doc__)
        return 2
    kktrain, seeds = args[0], args[1:]
    texts = [open(s).read() for s in seeds]
    rng = random.Random(seed)
    failures, outcomes = [], {0: 0, 2: 0}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "fuzz.yaml")
        for n in range(cases):
            text = mutate(rng.choice(texts), rng) if rng.random() < 0.85 else rng.choice(texts)
            with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
                f.write(text)
            ov = overrides(rng)
            command = "config" if n % 3 else "audit"
            case = f"case {n}: kktrain {command} fuzz.yaml {ov!r}\n--- fuzz.yaml ---\n{text}---"
            why, rc = check_run(kktrain, [command, path, *ov], case)
            if why:
                failures.append(why)
            else:
                outcomes[rc] += 1
    print(f"{cases} cases (seed {seed}): exit 0 x{outcomes[0]}, exit 2 x{outcomes[2]}, "
          f"{len(failures)} failures")
    for f in failures[:5]:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
