"""Command-line contract of `kktrain` (docs/cli.md).

usage: test_cli.py KKTRAIN DATA_DIR CASE

Runs the built binary and checks exit status, stdout and stderr. Bad input of any kind must exit 2
with exactly one stderr line starting "kktrain: error: " that names what was wrong and where.
One ctest per CASE (see tests/CMakeLists.txt). Uses only the standard library, plus PyYAML when
the interpreter has it (Debian's python3-yaml) to parse `kktrain config` output.
"""

import os
import subprocess
import sys
import tempfile

try:
    import yaml  # type: ignore
except ImportError:  # pragma: no cover - fall back to line checks
    yaml = None

KKTRAIN = ""
DATA = ""


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def run(*args):
    p = subprocess.run([KKTRAIN, *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def data(name):
    return os.path.join(DATA, name)


def expect_error(args, *needles):
    """Exit 2, nothing on stdout, one stderr line "kktrain: error: ..." containing each needle."""
    rc, out, err = run(*args)
    where = f"kktrain {' '.join(args)}: rc={rc}\nstdout:\n{out}\nstderr:\n{err}"
    check(rc == 2, "expected exit 2; " + where)
    check(out == "", "expected empty stdout; " + where)
    lines = err.splitlines()
    check(len(lines) == 1, "expected exactly one stderr line; " + where)
    check(lines[0].startswith("kktrain: error: "), "stderr must start 'kktrain: error: '; " + where)
    for n in needles:
        check(n in lines[0], f"stderr should mention {n!r}; " + where)
    return lines[0]


def parse_config_output(out):
    if yaml is not None:
        doc = yaml.safe_load(out)
        check(isinstance(doc, dict), "config output is not a YAML mapping")
        return doc
    return None


# ---- cases ---------------------------------------------------------------------------------------


def case_help():
    rc, out, err = run("--help")
    check(rc == 0, f"--help exit {rc}")
    check(out.startswith("usage: kktrain"), "help should start with usage:\n" + out)
    check("config" in out, "help should list the config command")
    check(err == "", "help writes nothing to stderr: " + err)


def case_no_args():
    expect_error([], "no command", "--help")


def case_unknown_command():
    expect_error(["frobnicate"], "unknown command", "frobnicate")


def case_version():
    rc, out, _ = run("--version")
    check(rc == 0 and out.startswith("kktrain "), f"--version: rc={rc} out={out!r}")


def case_config_help():
    for flag in ("--help", "-h"):
        rc, out, err = run("config", flag)
        check(rc == 0, f"config {flag} exit {rc}")
        check(out.startswith("usage: kktrain config CONFIG"), "config help:\n" + out)
        check(err == "", "config help writes nothing to stderr")


def case_config_good():
    rc, out, err = run("config", data("cli_good.yaml"))
    check(rc == 0, f"config exit {rc}; stderr:\n{err}")
    check("error" not in err, "stderr: " + err)
    # Canonical dtype spellings only.
    for alias in (": bf16", ": fp32", ": torch.float32", ": torch.bfloat16"):
        check(alias not in out, f"alias {alias!r} printed:\n{out}")
    for line in ("  hidden_size: 64\n", "  dtype: bfloat16\n", "    reduce_dtype: float32\n",
                 "  exp_avg_sq_dtype: bfloat16\n",
                 "  _target_: transformer_engine.pytorch.optimizers.fused_adam.FusedAdam\n"):
        check(line in out, f"missing line {line!r} in:\n{out}")
    doc = parse_config_output(out)
    if doc is not None:
        check(doc["model"]["hidden_size"] == 64, "hidden_size")
        check(doc["model"]["num_kv_heads"] == 2, "num_kv_heads")
        check(doc["optimizer"]["master_weights"] is True, "master_weights")
        check(doc["optimizer"]["exp_avg_dtype"] == "float32", "exp_avg_dtype")
        check(doc["optimizer"]["lr"] == 3.0e-4, f"lr {doc['optimizer']['lr']!r}")
        check(doc["peft"] is None, "peft")
        rp = doc["resolved_precision"]
        check(rp["storage_dtype"] == "bfloat16", "storage_dtype")
        check(rp["compute_dtype"] == "bfloat16", "compute_dtype")
        check(rp["reduce_dtype"] == "float32", "reduce_dtype")
        check(rp["output_dtype_applied"] is False, "output_dtype_applied")
        check("model.dtype" in rp["storage_dtype_source"], "storage_dtype_source")


def case_config_roundtrip():
    rc, first, err = run("config", data("cli_good.yaml"))
    check(rc == 0, err)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "resolved.yaml")
        with open(path, "w") as f:
            f.write(first)
        rc, second, err = run("config", path)
    check(rc == 0, "printed config does not read back: " + err)
    check(first == second, f"round trip differs:\n{first}\n---\n{second}")


def case_config_overrides():
    rc, out, err = run("config", data("cli_good.yaml"), "model.hidden_size=128",
                       "optimizer.lr=0.01", "model.dtype=null", "model.torch_dtype=float32",
                       "freeze_config.freeze_modules=[{glob: \"*\"}]")
    check(rc == 0, err)
    check("  hidden_size: 128\n" in out, out)
    check("  freeze_modules: [\"*\"]\n" in out or "  freeze_modules: ['*']\n" in out, out)
    check("  storage_dtype: float32\n" in out, out)
    check("deprecated" in err, "model.torch_dtype should warn on stderr: " + err)
    doc = parse_config_output(out)
    if doc is not None:
        check(doc["optimizer"]["lr"] == 0.01, "lr")
        check(doc["freeze_config"]["freeze_modules"] == ["*"], "freeze_modules")


def case_config_missing_file():
    expect_error(["config", data("does_not_exist.yaml")], "does_not_exist.yaml")


def case_config_missing_argument():
    expect_error(["config"], "CONFIG")


def case_config_bad_key():
    expect_error(["config", data("cli_bad_key.yaml")], "model.num_hedas",
                 "did you mean 'model.num_heads'", "cli_bad_key.yaml:3:3")


def case_config_bad_value():
    expect_error(["config", data("cli_bad_value.yaml")], "optimizer.betas",
                 "cli_bad_value.yaml:3:10")


def case_config_invalid_yaml():
    expect_error(["config", data("cli_invalid_yaml.yaml")], "invalid YAML",
                 "cli_invalid_yaml.yaml")


def case_config_bad_override():
    expect_error(["config", data("cli_good.yaml"), "model.hidden_size=abc"], "model.hidden_size",
                 "override 'model.hidden_size=abc'")
    expect_error(["config", data("cli_good.yaml"), "model.hidden_size=[1,"],
                 "override 'model.hidden_size=[1,'")
    expect_error(["config", data("cli_good.yaml"), "=1"], "override '=1'")
    # Without '=' an extra argument is not an override.
    expect_error(["config", data("cli_good.yaml"), "model.hidden_size"], "model.hidden_size")


def case_config_unknown_option():
    expect_error(["config", data("cli_good.yaml"), "--frobnicate"], "--frobnicate")


def case_config_floats_parse_as_floats():
    """Scripts read `kktrain config` with PyYAML (YAML 1.1), where 1e-05 is a string."""
    check(yaml is not None, "PyYAML is not available")
    rc, out, err = run("config", data("cli_good.yaml"))
    check(rc == 0, err)
    doc = yaml.safe_load(out)
    for section, key in (("model", "rms_norm_eps"), ("optimizer", "eps")):
        v = doc[section][key]
        check(isinstance(v, float), f"{section}.{key} reads as {v!r} ({type(v).__name__})")


# ---- hostile inputs and outputs ----------------------------------------------------------------

DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "inputs",
                              "default.yaml")


def case_special_files():
    """A directory or a FIFO as the config or data.path: a prompt error, never a hang."""
    with tempfile.TemporaryDirectory() as d:
        expect_error(["config", d], "is a directory", d)
        fifo = os.path.join(d, "pipe")
        os.mkfifo(fifo)
        expect_error(["config", fifo], "FIFO", fifo)
        expect_error(["grads", DEFAULT_CONFIG, "data.path=" + fifo, "--out",
                      os.path.join(d, "g.h5")], "data.path", "FIFO")
        expect_error(["grads", DEFAULT_CONFIG, "data.path=" + d, "--out",
                      os.path.join(d, "g.h5")], "data.path", "directory")


def case_yaml_shapes():
    """Several YAML documents, or nesting no config has: located errors, nothing dropped."""
    with tempfile.TemporaryDirectory() as d:
        multi = os.path.join(d, "multi.yaml")
        with open(multi, "w") as f:
            f.write("model:\n  hidden_size: 64\n---\ntrain:\n  lr: 1\n")
        expect_error(["config", multi], "2 YAML documents", "multi.yaml:4")
        stray = os.path.join(d, "stray.yaml")  # an empty extra document holds nothing
        with open(stray, "w") as f:
            f.write("---\nmodel:\n  hidden_size: 64\n---\n")
        rc, out, err = run("config", stray)
        check(rc == 0, f"a stray '---' is not a second document: rc={rc} {err}")
        deep = os.path.join(d, "deep.yaml")
        with open(deep, "w") as f:
            f.write("model: " + "[" * 10000 + "]" * 10000 + "\n")
        expect_error(["config", deep], "nested more than", "deep.yaml:1:")


def case_output_failures():
    """A failed write is a failed run (exit 1, the reason on stderr); outputs never replace inputs
    and are checked before any work."""
    with open("/dev/full", "w") as full:
        p = subprocess.run([KKTRAIN, "config", DEFAULT_CONFIG], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=120)
    lines = p.stderr.splitlines()
    check(p.returncode == 1, f"writing to /dev/full must fail: rc={p.returncode} {p.stderr}")
    check(len(lines) == 1 and "standard output" in lines[0] and "No space" in lines[0],
          "one line naming stdout and the reason: " + p.stderr)
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, "cfg.yaml")
        with open(DEFAULT_CONFIG) as src, open(cfg, "w") as dst:
            dst.write(src.read())
        before = open(cfg).read()
        expect_error(["grads", cfg, "--out", cfg], "--out", "config file", "input")
        check(open(cfg).read() == before, "the config was written over")
        link = os.path.join(d, "link.yaml")
        os.symlink(cfg, link)
        expect_error(["grads", cfg, "--out", link], "config file")
        expect_error(["grads", cfg, "--out", os.path.join(d, "none", "g.h5")], "does not exist")
        expect_error(["grads", cfg, "--out", d], "is a directory")


def case_override_blame():
    """A rule between two keys blames the one an override set."""
    expect_error(["config", DEFAULT_CONFIG, "model.hidden_size=66"], "model.hidden_size",
                 "override 'model.hidden_size=66'")
    expect_error(["config", DEFAULT_CONFIG, "model.num_kv_heads=3"], "model.num_kv_heads",
                 "override 'model.num_kv_heads=3'")


def case_override_located():
    """Errors found after loading name the override that set the key, and a key repeated in the
    YAML file is located in the file even when an override sets it."""
    expect_error(["audit", DEFAULT_CONFIG, "freeze_config.freeze_parameters=[nope.weight]"],
                 "freeze_config", "override 'freeze_config.freeze_parameters=[nope.weight]'")
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, "twice.yaml")
        with open(cfg, "w") as f:
            f.write("model:\n  hidden_size: 64\n  hidden_size: 32\n")
        line = expect_error(["config", cfg, "model.hidden_size=16"], "duplicate key",
                            "model.hidden_size", "twice.yaml:3:3")
        check("override" not in line, "a repetition in the file is blamed on the file: " + line)
        expect_error(["config", DEFAULT_CONFIG, "model={hidden_size: 8, hidden_size: 8}"],
                     "duplicate key", "override 'model={hidden_size: 8, hidden_size: 8}'")


def case_config_size_bound():
    """A config file larger than the bound (4 MiB) is refused before it is parsed, promptly and
    with the bound named; one just under it still parses."""
    with tempfile.TemporaryDirectory() as d:
        big = os.path.join(d, "big.yaml")
        with open(big, "w") as f:
            f.write("data:\n  path:\n")
            item = "    - shard.bin\n"
            f.write(item * ((4 << 20) // len(item) + 1))
        expect_error(["config", big], "big.yaml", "4 MiB")
        near = os.path.join(d, "near.yaml")
        with open(near, "w") as f:
            f.write("model:\n  hidden_size: 64\n" + "#" * ((4 << 20) - 100) + "\n")
        rc, out, err = run("config", near)
        check(rc == 0, f"a config under the bound is read: rc={rc} {err}")


def case_empty_paths():
    """An empty path where a config names a file or directory is refused by `kktrain config`
    (before: accepted, then 'is not a directory' / 'no checkpoint at' only when training)."""
    for key, needle in (("checkpoint.dir", "train.output_dir>/checkpoints"),
                        ("model.init_from", "model.seed"), ("data.path", "empty file name")):
        expect_error(["config", DEFAULT_CONFIG, f'{key}=""'], key, needle,
                     f"override '{key}=\"\"'")


def case_kokkos_never_sees_arguments():
    """Kokkos' own argument parser never sees kktrain's arguments: '--help' as a prompt prints no
    Kokkos help text and '--threads' as one does not stop Kokkos ('expecting an =INT'); the
    command's own error (the model does not exist) is the one line."""
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "none")
        for value in ("--help", "--kokkos-help", "--threads", "--kokkos-threads"):
            line = expect_error(["generate", model, "--prompt", value], "generate", model)
            check("Kokkos" not in line and "kokkos" not in line, line)


def case_keep_in_fp32_unmatched():
    expect_error(["audit", DEFAULT_CONFIG, 'model.keep_in_fp32=["*nomatch*"]'],
                 "model.keep_in_fp32", "*nomatch*", "matches no parameter")


def case_attention_options():
    """model.attention and model.attention_tiles (README): a bad value is one error line, exit 2,
    naming the key, the value and the choices or the form, before anything runs; good values are
    accepted (they replaced KKTRAIN_ATTENTION and KKTRAIN_ATTENTION_TILES)."""
    for key, value, needle in (("attention", "flash", "is not one of: auto, tiled_gemm, team"),
                               ("attention_tiles", "64", "expected QxK"),
                               ("attention_tiles", "0x16", "both >= 1"),
                               ("attention_tiles", "16x32x2", "expected QxK")):
        expect_error(["audit", DEFAULT_CONFIG, f"model.{key}={value}"], "model." + key, value,
                     needle)
    for good in (["model.attention=team", "model.attention_tiles=16x32"],
                 ["model.attention=tiled_gemm"], ["model.attention=auto"]):
        rc, _, err = run("audit", DEFAULT_CONFIG, *good)
        check(rc == 0, f"good attention settings {good} refused: {err}")
    # The environment is no longer read: the old variables with bad values change nothing.
    p = subprocess.run([KKTRAIN, "audit", DEFAULT_CONFIG], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "KKTRAIN_ATTENTION": "flash",
                                         "KKTRAIN_ATTENTION_TILES": "0x0"})
    check(p.returncode == 0, f"KKTRAIN_ATTENTION* still read: {p.stderr}")


def case_gemm_options():
    """model.gemm and model.gemm_fp32 (README): a bad value is one error line, exit 2, naming the
    key, the value and the choices; good values are accepted. They replaced KKTRAIN_GEMM and
    KKTRAIN_GEMM_FP32, which are no longer read: a bad value there changes nothing."""
    for key, value, needle in (("gemm", "reference", "is not one of: auto, widened"),
                               ("gemm_fp32", "blas", "is not one of: auto, kokkos-kernels, onednn")):
        expect_error(["audit", DEFAULT_CONFIG, f"model.{key}={value}"], "model." + key, value,
                     needle)
    for good in (["model.gemm=widened", "model.gemm_fp32=kokkos-kernels"],
                 ["model.gemm=auto", "model.gemm_fp32=onednn"], ["model.gemm_fp32=auto"]):
        rc, _, err = run("audit", DEFAULT_CONFIG, *good)
        check(rc == 0, f"good gemm settings {good} refused: {err}")
    p = subprocess.run([KKTRAIN, "--version"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "KKTRAIN_GEMM": "reference",
                            "KKTRAIN_GEMM_FP32": "nonsense"})
    check(p.returncode == 0 and "KKTRAIN_GEMM" not in p.stdout and "widened" not in p.stdout,
          f"KKTRAIN_GEMM* still read: {p.stdout} {p.stderr}")


def case_schema_in_readme():
    """README's configuration reference is `kktrain config --schema`, and every key of the
    shipped configs is in it."""
    rc, out, err = run("config", "--schema")
    check(rc == 0 and err == "", f"config --schema: rc={rc} {err}")
    readme = open(os.path.join(os.path.dirname(DEFAULT_CONFIG), "..", "README.md")).read()
    begin, end = "<!-- schema:begin -->\n", "<!-- schema:end -->"
    check(begin in readme and end in readme, "README has no schema markers")
    table = readme.split(begin, 1)[1].split(end, 1)[0]
    check(table == out, "README's configuration reference differs from `kktrain config --schema`;"
          " regenerate it")
    keys = {line.split("`")[1] for line in out.splitlines()[2:]}
    check(yaml is not None, "PyYAML is not available")
    inputs = os.path.dirname(DEFAULT_CONFIG)
    for name in sorted(os.listdir(inputs)):
        if not name.endswith(".yaml"):
            continue
        doc = yaml.safe_load(open(os.path.join(inputs, name))) or {}

        def walk(node, prefix):
            for k, v in node.items():
                path = prefix + k
                if isinstance(v, dict) and path not in keys:
                    walk(v, path + ".")
                else:
                    check(path in keys, f"{name}: key {path} is not in the schema")
        walk(doc, "")
    rc, _, err = run("config", "--schema", DEFAULT_CONFIG)
    check(rc == 2 and "takes no other arguments" in err, "--schema with a CONFIG: " + err)


def main():
    global KKTRAIN, DATA
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    KKTRAIN, DATA, name = sys.argv[1], sys.argv[2], sys.argv[3]
    fn = globals().get("case_" + name)
    if fn is None:
        print(f"unknown case {name!r}")
        return 2
    try:
        fn()
    except Failure as e:
        print(f"FAIL {name}: {e}")
        return 1
    print(f"ok {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
