"""The files of training checkpoints: damaged or foreign ones, `kktrain export`, model.init_from,
`kktrain inspect` (io/checkpoint.hpp, apps/model_export.hpp, apps/train/app_model.cpp,
apps/cli/cmd_inspect.cpp), read back with h5py, NumPy and h5dump. On the helpers of
test_checkpoint.py and test_train.py.

usage: test_checkpoint_files.py KKTRAIN INPUTS_DIR CASE     (one ctest ckpt.<CASE> each)

- corruption: truncation, a flipped bit, another architecture / format version / optimizer, not
  HDF5: exit 2, one stderr line naming the problem (the dataset for the flipped bit), and the
  run directory byte-for-byte as it was. (A damaged `latest` pointer: test_run_safety.py.)
- export: bf16 values are round-to-nearest-even of the fp32 master, rebuilt here from the bf16
  parameter + int16 remainder (pattern A; a copy with crafted exact ties, where the master rounds
  to the even neighbour but TE's split stores the odd one) or the fp32 parameter (pattern B);
  --dtype float32 gives the masters bit for bit; keep_in_fp32 parameters stay fp32; the tied
  embedding appears once with an 'alias'; LoRA merged = fp32(W + alpha/r * B A in float64, the
  rank sum in order) then RNE, exactly; --lora separate keeps the adapters; every checksum
  attribute is the documented sum of mix64(bits ^ index * golden) mod 2^64; h5dump reads both
  files and shows bf16 as a 16-bit float; --out equal to the input and non-checkpoints are
  refused.
- init_from: LoRA from an export (base = the export, adapters = a fresh run's init); a pattern-A
  checkpoint into fp32 storage gives the rebuilt masters exactly; model.dtype auto takes the
  file's dtype; a missing file / another shape: exit 2 naming model.init_from.
- inspect: datasets with dtypes and shapes, step and config of a checkpoint; an export; a grads
  dump.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import yaml

import test_checkpoint as ck
import test_train as tt
from test_lora import PEFT

U64 = np.uint64


def mix64(x):
    x = x + U64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> U64(30))) * U64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> U64(27))) * U64(0x94D049BB133111EB)
    return x ^ (x >> U64(31))


def checksum(bits):
    """io/checkpoint.hpp: sum mod 2^64 of mix64(element bits ^ index * 0x9e3779b97f4a7c15)."""
    b = bits.ravel().astype(U64)
    with np.errstate(over="ignore"):
        index = np.arange(b.size, dtype=U64) * U64(0x9E3779B97F4A7C15)
        h = mix64(b ^ index)
        return f"{int(h.sum(dtype=U64)):016x}"


def rne(f32):
    """float32 -> bf16 bits, round to nearest even (no NaNs here)."""
    b = np.asarray(f32, np.float32).view(np.uint32).astype(U64)
    return ((b + U64(0x7FFF) + ((b >> U64(16)) & U64(1))) >> U64(16)).astype(np.uint16)


def widen(bits):
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def rebuild(p, r):
    """TE's fp32 master from the bf16 parameter bits and the int16 remainder (as uint16 bits)."""
    p = p.astype(np.uint32)
    p = np.where(r.view(np.int16) < 0, (p - np.uint32(1)) & np.uint32(0xFFFF), p)
    return ((p << np.uint32(16)) | r.astype(np.uint32)).view(np.float32)


def masters(path):
    """{parameter: fp32 master} of a checkpoint, from its datasets as stored."""
    _, ds = ck.load_h5(path)
    out = {}
    for n, (_, bits, a) in ds.items():
        if not n.startswith("/params/"):
            continue
        opt = "/optim/" + n[len("/params/"):]
        if opt + "/master" in ds:
            out[n] = ds[opt + "/master"][1].view(np.float32)
        elif opt + "/remainder" in ds:
            out[n] = rebuild(bits, ds[opt + "/remainder"][1])
        else:
            out[n] = widen(bits) if a["dtype"] == "bfloat16" else bits.view(np.float32)
    return out


def kk(*args):
    rc, out, err = ck.launch(list(args))
    return rc, out, err, tt.describe(list(args), rc, out, err)


def export(src, out, *opts):
    rc, o, err, where = kk("export", src, "--out", out, *opts)
    tt.check(rc == 0 and "export: " in err, "export failed" + where)
    return ck.load_h5(out)


def check_checksums(path):
    _, ds = ck.load_h5(path)
    for n, (_, bits, a) in ds.items():
        tt.check(a.get("checksum") == checksum(bits), f"{path}: {n}: checksum attribute "
                 f"{a.get('checksum')}, the documented sum gives {checksum(bits)}")
    return len(ds)


def craft_ties(src, dst, name, count=16):
    """A copy of checkpoint `src` where `count` elements of parameter `name` hold a master exactly
    halfway between two bf16 values with an even lower neighbour: TE's split stores the upper
    (odd) bf16 value and the remainder -32768; the nearest-even rounding of the master is the
    lower one. Checksums are recomputed, so the file is valid."""
    with open(src, "rb") as f, open(dst, "wb") as g:
        g.write(f.read())
    with h5py.File(dst, "r+") as f:
        for ds, fn in ((f["/params/" + name], lambda p: (p & np.uint16(0xFFFE)) + np.uint16(1)),
                       (f["/optim/" + name + "/remainder"], lambda r: np.uint16(0x8000))):
            bits = ck.raw(ds)
            flat = bits.reshape(-1)
            flat[:count] = fn(flat[:count])
            ds.id.write(h5py.h5s.ALL, h5py.h5s.ALL, bits, mtype=ds.id.get_type())
            ds.attrs.modify("checksum", np.bytes_(checksum(bits)))
    return dst


# ---- 4. corruption ----------------------------------------------------------------------------


def snapshot(d):
    out = {}
    for base, _, files in os.walk(d):
        for n in files:
            with open(os.path.join(base, n), "rb") as f:
                out[os.path.relpath(os.path.join(base, n), d)] = f.read()
    return out


def flip_bit(path, dataset, byte=101):
    with h5py.File(path, "r") as f:
        off = f[dataset].id.get_offset()
    tt.check(off is not None, f"{dataset} has no contiguous storage")
    with open(path, "r+b") as f:
        f.seek(off + byte)
        b = f.read(1)[0]
        f.seek(off + byte)
        f.write(bytes([b ^ 0x10]))


def case_corruption():
    flipped = "/params/model.layers.0.mlp.up_proj.weight"
    o = ["checkpoint.save_every=2", "train.val_every=0"]

    def truncate(p):
        os.truncate(p, os.path.getsize(p) // 2)

    def version(p):
        with h5py.File(p, "r+") as f:
            f.attrs.modify("format_version", 2)

    def not_hdf5(p):
        with open(p, "w") as f:
            f.write("this is not an HDF5 file\n")

    variants = [  # name, damage to step 4's file, config, overrides, needles of the error line
        ("truncated", truncate, tt.PATTERN_A, [], ["step_00000004/checkpoint.h5"]),
        ("bit_flip", lambda p: flip_bit(p, flipped), tt.PATTERN_A, [], [flipped, "checksum"]),
        ("architecture", None, tt.PATTERN_A, ["model.hidden_size=48"],
         ["model.hidden_size", "32", "48"]),
        ("format_version", version, tt.PATTERN_A, [], ["format version 2"]),
        ("optimizer", None, tt.PATTERN_B, [], ["FusedAdam", "torch.optim.AdamW"]),
        ("not_hdf5", not_hdf5, tt.PATTERN_A, [], ["step_00000004/checkpoint.h5"]),
    ]
    with tempfile.TemporaryDirectory(prefix="kktrain_ckpt_") as tmp:
        good = os.path.join(tmp, "good")
        ck.train(good, tt.PATTERN_A, *o, "train.max_steps=4").ok()
        for name, damage, cfg, extra, needles in variants:
            d = os.path.join(tmp, name)
            shutil.copytree(good, d)
            if damage:
                damage(ck.ckpt(d, 4))
            before = snapshot(d)
            r = ck.train(d, cfg, *o, *extra, "train.max_steps=6", "checkpoint.resume=auto")
            line = tt.expect_one_error(r.rc, r.out, r.err, *needles, where=f"{name}{r.where}")
            tt.check(snapshot(d) == before, f"{name}: the refused run changed {d}")
            print(f"{name}: {line}")
        if ck.MPIRUN:  # the same refusal agreed by 2 ranks: one error line, exit 2
            r = ck.train(os.path.join(tmp, "bit_flip"), tt.PATTERN_A, *o, "train.max_steps=6",
                      "checkpoint.resume=auto", np_=2)
            lines = [ln for ln in r.err.splitlines() if ln.startswith("kktrain")]
            tt.check(r.rc == 2 and len(lines) == 1 and flipped in lines[0],
                     "2 ranks, bit flip" + r.where)


# ---- 6. export ---------------------------------------------------------------------------------


def check_export(src, e16, e32, what):
    """The bf16 export is RNE of the masters (fp32 where keep_in_fp32), the fp32 export the
    masters; the tied embedding once, with its alias. Returns the number of ties checked."""
    m = masters(src)
    (_, d16), (_, d32) = e16, e32
    _, dsrc = ck.load_h5(src)
    tt.check(sorted(d16) == sorted(m) == sorted(d32), f"{what}: parameters {sorted(d16)}")
    ties = 0
    for n, master in m.items():
        keep = dsrc[n][2].get("keep_in_fp32") == "1"
        got = d16[n][1]
        want = master.view(np.uint32) if keep else rne(master)
        tt.check(d16[n][2]["dtype"] == ("float32" if keep else "bfloat16"), f"{what}: {n} dtype")
        bad = int(np.count_nonzero(got != want))
        tt.check(bad == 0, f"{what}: {n}: {bad} bf16 values are not RNE of the master")
        tt.check(np.array_equal(d32[n][1], master.view(np.uint32)), f"{what}: {n}: --dtype "
                 "float32 is not the master")
        if not keep and dsrc[n][2]["dtype"] == "bfloat16":
            ties += int(np.count_nonzero(got != dsrc[n][1]))
    emb = "/params/model.embed_tokens.weight"
    tt.check("/params/lm_head.weight" not in d16 and d16[emb][2].get("alias") == "lm_head.weight",
             f"{what}: tied embedding: {d16[emb][2]}")
    return ties


def merged(ds, scale):
    """{base: expected bf16 bits}: fp32(W + scale * sum_k B[:, k] A[k, :] in float64), RNE."""
    out = {}
    for n in ds:
        if n.endswith(".lora_A.weight"):
            base = n[: -len(".lora_A.weight")]
            w = widen(ds[base + ".weight"][1]).astype(np.float64)
            a = widen(ds[n][1]).astype(np.float64)
            b = widen(ds[base + ".lora_B.weight"][1]).astype(np.float64)
            acc = np.zeros_like(w)
            for k in range(a.shape[0]):
                acc += np.outer(b[:, k], a[k, :])
            out[base + ".weight"] = rne((w + scale * acc).astype(np.float32))
    return out


def case_export():
    name = "model.layers.0.mlp.up_proj.weight"
    with tempfile.TemporaryDirectory(prefix="kktrain_ckpt_") as tmp:
        j = lambda *p: os.path.join(tmp, *p)
        ck.train(j("a"), tt.PATTERN_A, 'model.keep_in_fp32=["*norm*"]', "train.max_steps=6",
                 "train.val_every=0").ok()
        src = ck.ckpt(j("a"), 6)
        n = check_checksums(src)
        e16, e32 = export(src, j("a16.h5")), export(src, j("a32.h5"), "--dtype", "float32")
        check_export(src, e16, e32, "pattern A")
        tt.check(ck.load_h5(j("a", "export.h5"))[1].keys() == e16[1].keys() and all(
            np.array_equal(ck.load_h5(j("a", "export.h5"))[1][k][1], v[1])
            for k, v in e16[1].items()), "training's export.h5 differs from kktrain export")
        tied = craft_ties(src, j("ties.h5"), name)
        ties = check_export(tied, export(tied, j("t16.h5")), export(tied, j("t32.h5"), "--dtype",
                                                                       "float32"), "crafted ties")
        tt.check(ties == 16, f"{ties} exported values differ from the stored bf16 parameter, "
                 "expected the 16 crafted ties")
        n += check_checksums(j("a16.h5"))
        # h5dump reads both; bf16 is a 16-bit float (8-bit exponent, bias 127, 7-bit mantissa)
        for f in (src, j("a16.h5")):
            p = subprocess.run(["h5dump", "-H", f], capture_output=True, text=True, timeout=60)
            tt.check(p.returncode == 0, f"h5dump -H {f}: {p.stderr}")
        p = subprocess.run(["h5dump", "-d", "/params/" + name, j("a16.h5")], capture_output=True,
                           text=True, timeout=60)
        tt.check(p.returncode == 0 and "16-bit little-endian floating-point" in p.stdout,
                 f"h5dump of a bf16 dataset:\n{p.stdout[:800]}")
        body = re.sub(r"\(\d+(,\d+)*\):", " ", p.stdout.split("DATA {", 1)[1].split("}", 1)[0])
        shown = [float(x) for x in body.replace(",", " ").split()]
        want = widen(e16[1]["/params/" + name][1]).ravel()
        tt.check(len(shown) == want.size and np.allclose(shown, want, rtol=1e-5, atol=0),
                 "h5dump's values are not the bf16 values")
        with h5py.File(j("a16.h5"), "r") as f:
            t = f["/params/" + name].id.get_type()
            tt.check(t.get_size() == 2 and t.get_fields() == (15, 7, 8, 0, 7) and
                     t.get_ebias() == 127, f"bf16 layout {t.get_fields()} bias {t.get_ebias()}")
            tt.check(np.array_equal(f["/params/" + name][...], want.reshape(64, 32)),
                     "h5py's conversion of bf16 to float32")
        # pattern B: the fp32 parameter is the master
        ck.train(j("b"), tt.PATTERN_B, "train.max_steps=3", "train.val_every=0").ok()
        check_export(ck.ckpt(j("b"), 3), export(ck.ckpt(j("b"), 3), j("b16.h5")),
                     export(ck.ckpt(j("b"), 3), j("b32.h5"), "--dtype", "float32"), "pattern B")
        # LoRA: merged and separate
        ck.train(j("l"), tt.RISKY, PEFT, "optimizer.lr=1e-2", "train.max_steps=5",
                 "train.val_every=0").ok()
        lsrc = ck.ckpt(j("l"), 5)
        _, dl = ck.load_h5(lsrc)
        want = merged(dl, 8 / 4)
        tt.check(len(want) == 5, f"adapted modules {sorted(want)}")
        _, dm = export(lsrc, j("lm.h5"))
        tt.check(not any(".lora_" in k for k in dm), "merged export kept adapters")
        for k, v in want.items():
            bad = int(np.count_nonzero(dm[k][1] != v))
            tt.check(bad == 0, f"LoRA merged {k}: {bad} of {v.size} values differ from "
                     "RNE(fp32(W + alpha/r B A))")
            tt.check(not np.array_equal(v, dl[k][1]), f"{k}: the merge changed nothing")
        tt.check(all(np.array_equal(ck.load_h5(j("l", "export.h5"))[1][k][1], v[1])
                     for k, v in dm.items()), "training's export.h5 is not the merged export")
        root, ds = export(lsrc, j("ls.h5"), "--lora", "separate")
        tt.check(sorted(ds) == sorted(k for k in dl if k.startswith("/params/")) and
                 all(np.array_equal(ds[k][1], dl[k][1]) for k in ds) and root["lora_dim"] == 4 and
                 root["lora_alpha"] == 8.0, "--lora separate: adapters and base as stored")
        # refusals
        for args, needles in (((src, "--out", src), ["--out", src]),
                              ((j("a16.h5"), "--out", j("x.h5")), ["not a kktrain training"]),
                              ((j("a", "metrics.jsonl"), "--out", j("x.h5")), ["metrics.jsonl"])):
            rc, out, err, where = kk("export", *args)
            tt.expect_one_error(rc, out, err, *needles, where=where)
        tt.check(not os.path.exists(j("x.h5")), "a refused export wrote its --out")
        print(f"export: {n} checksums recomputed; pattern A, crafted ties (16), pattern B, LoRA "
              "merged/separate bit-exact")


# ---- 7. model.init_from -------------------------------------------------------------------------


def grads(tmp, name, cfg, *overrides):
    out = os.path.join(tmp, name + ".h5")
    rc, o, err, where = kk("grads", tt.config(cfg), *tt.TINY_MODEL, "data.seq_len=32",
                           "data.micro_batch_size=2", *overrides, "--out", out)
    tt.check(rc == 0, "grads failed" + where)
    return ck.load_h5(out)[1], err


def case_init_from():
    with tempfile.TemporaryDirectory(prefix="kktrain_ckpt_") as tmp:
        j = lambda *p: os.path.join(tmp, *p)
        ck.train(j("r"), tt.RISKY, "train.max_steps=4", "train.val_every=0").ok()
        exp = j("r", "export.h5")
        _, de = ck.load_h5(exp)
        d1, err = grads(tmp, "lora_init", tt.RISKY, PEFT, f"model.init_from={exp}")
        d0, _ = grads(tmp, "lora_fresh", tt.RISKY, PEFT)
        tt.check("10 LoRA adapter tensors are not in the file" in err, err)
        for k, (_, bits, _) in d1.items():
            if not k.startswith("/params/"):
                continue
            want = d0[k][1] if ".lora_" in k else widen(de[k][1]).view(np.uint32)
            tt.check(np.array_equal(bits, want), f"LoRA from an export: {k} is not "
                     + ("its fresh init" if ".lora_" in k else "the export's value"))
        tt.check(not np.array_equal(d1["/loss"][1], d0["/loss"][1]), "the base was not loaded")
        ck.train(j("ft"), tt.RISKY, PEFT, f"model.init_from={exp}", "train.max_steps=3").ok()
        # a pattern-A checkpoint (bf16 + remainders) into fp32 storage: the masters exactly
        ck.train(j("a"), tt.PATTERN_A, "train.max_steps=4", "train.val_every=0").ok()
        m = masters(ck.ckpt(j("a"), 4))
        d, _ = grads(tmp, "a_fp32", tt.PATTERN_B, f"model.init_from={j('a')}")
        for k, v in m.items():
            tt.check(np.array_equal(d[k][1], v.view(np.uint32)), f"{k}: not the rebuilt master")
        # model.dtype: auto takes the file's dtype
        export(ck.ckpt(j("a"), 4), j("a32.h5"), "--dtype", "float32")
        for f, want in ((exp, "bfloat16"), (j("a32.h5"), "float32"), (j("a"), "bfloat16")):
            rc, out, err, where = kk("config", tt.config(tt.DEFAULT), *tt.TINY_MODEL,
                                     "model.dtype=auto", f"model.init_from={f}")
            tt.check(rc == 0 and f"  storage_dtype: {want}\n" in out and
                     re.search(r"storage_dtype_source: model.dtype -> auto -> " + want, out),
                     f"dtype auto from {f}: want {want}" + where)
        # errors name model.init_from
        missing = j("no_such.h5")
        r = ck.train(j("e1"), tt.DEFAULT, f"model.init_from={missing}")
        tt.expect_one_error(r.rc, r.out, r.err, "model.init_from", missing, where=r.where)
        r = ck.train(j("e2"), tt.DEFAULT, "model.hidden_size=48", f"model.init_from={exp}")
        tt.expect_one_error(r.rc, r.out, r.err, "model.init_from", "shape", where=r.where)
        tt.check(not os.path.exists(j("e1")) and not os.path.exists(j("e2")),
                 "a refused run created its output directory")
        print(f"init_from: LoRA from an export, {len(m)} masters into fp32 storage, dtype auto, "
              "errors: ok")


# ---- 8. kktrain inspect -------------------------------------------------------------------------


def check_listing(path, out, what):
    lines = out.splitlines()
    with h5py.File(path, "r") as f:
        names = []
        f.visititems(lambda n, o: names.append("/" + n) if isinstance(o, h5py.Dataset) else None)
        for n in names:
            ds = f[n]
            t = ds.id.get_type()
            dt = ck.attrs(ds).get("dtype") or (
                f"float{8 * t.get_size()}" if isinstance(t, h5py.h5t.TypeFloatID) else
                f"{'u' if t.get_sign() == 0 else ''}int{8 * t.get_size()}")
            shape = str(tuple(ds.shape))
            row = [ln for ln in lines if ln.split()[:1] == [n]]
            tt.check(len(row) == 1 and row[0].split()[1] == dt and
                     row[0].split(None, 2)[2].startswith(shape),
                     f"{what}: {n} should be listed as {dt} {shape}: {row}\n{out[:3000]}")
    return len(names)


def case_inspect():
    with tempfile.TemporaryDirectory(prefix="kktrain_ckpt_") as tmp:
        j = lambda *p: os.path.join(tmp, *p)
        ck.train(j("a"), tt.PATTERN_A, "train.max_steps=3", "train.val_every=0").ok()
        src = ck.ckpt(j("a"), 3)
        for arg in (src, os.path.dirname(src), j("a", "checkpoints"), j("a")):
            rc, out, err, where = kk("inspect", arg)
            tt.check(rc == 0 and out.startswith(f"file: {src}\n"), "inspect" + where)
            tt.check("  format: kktrain-checkpoint\n" in out and "  step: 3\n" in out and
                     "  optimizer_steps: 3\n" in out, "root attributes" + where)
            cfg = yaml.safe_load(out.split("\nconfig:\n", 1)[1])
            tt.check(cfg["train"]["max_steps"] == 3 and cfg["model"]["hidden_size"] == 32,
                     f"config section: {cfg.get('train')}" + where)
        n = check_listing(src, out, "checkpoint")
        tt.check(re.search(r"^/optim/model\.norm\.weight/remainder +int16 +\(32,\) +checksum=",
                           out, re.M), "remainder line" + where)
        rc, out, err, where = kk("inspect", j("a", "export.h5"))
        tt.check(rc == 0 and "  format: kktrain-export\n" in out and "config:" not in out and
                 "alias=lm_head.weight" in out, "inspect export" + where)
        n += check_listing(j("a", "export.h5"), out, "export")
        grads(tmp, "g", tt.PATTERN_A)
        rc, out, err, where = kk("inspect", j("g.h5"))
        tt.check(rc == 0 and "  storage_dtype: bfloat16\n" in out, "inspect grads dump" + where)
        n += check_listing(j("g.h5"), out, "grads dump")
        rc, out, err, where = kk("inspect", j("none.h5"))
        tt.expect_one_error(rc, out, err, "inspect", j("none.h5"), where=where)
        print(f"inspect: {n} dataset lines of a checkpoint, an export and a grads dump")


if __name__ == "__main__":
    sys.exit(tt.run_case(globals(), __doc__))
