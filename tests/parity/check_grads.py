#!/usr/bin/python3
"""Parity check of `kktrain grads` against an independent PyTorch reference.

usage: check_grads.py --kktrain BIN [--config CONFIG] [--dump FILE.h5] [--keep FILE.h5]
                      [--report-only] [--rows packed|padded] [key.path=VALUE ...]

Runs `BIN grads CONFIG --out FILE.h5 key.path=VALUE ...` (or reads an existing --dump), then
recomputes loss, MTP loss and every gradient with tests/parity/torch_reference.py and compares:

  loss      relative error |L_kk - L_ref| / |L_ref|
  gradient  max-norm relative error ||g_kk - g_ref||_inf / ||g_ref||_inf per parameter
            (a parameter whose reference gradient is exactly zero, e.g. the MTP head with
            compute_mtp false, must have an exactly zero kktrain gradient)

fp32 compute is compared with the float64 and float32 references; bf16 compute with the
float64 reference and with a torch.autocast(bfloat16) run, plus a fairness ratio: kktrain's error
against float64 may not exceed RATIO x torch-autocast's own error against float64. Prints a
per-tensor table and the worst case; exit status 0 pass, 1 fail, 2 usage / kktrain failure.

Examples data (a dump with /batch/starts) is compared the same way, the reference masking
attention per example and restarting rotary positions (torch_reference.py). --rows says what the
batch must be, so that a test sees what it means to test: `packed` (some row holds two or more
examples), `padded` (every row one example, some rows padded).
"""
from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference as tr  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CONFIG = os.path.join(HERE, "configs", "tiny.yaml")

BF16_U = 2.0 ** -8  # unit roundoff of bf16 (8-bit significand, round to nearest even)

# ---- tolerances --------------------------------------------------------------------------------
# Measured with tests/parity/measure.py over 25 shapes/seeds x 4 dtype combinations (GQA, MHA,
# MQA, tied/untied, V 256/259/301, T 17/32/33, B 1/2, L 2/3, MTP 0/1/2, compute_mtp false,
# init_std 0.02/0.1/0.2); the numbers are the worst over all parameters and cases, see
# tests/parity/README.md.
#
# fp32 compute. kktrain and torch differ only in fp32 accumulation order (GEMM blocking, the
# order of the B*T-term sums in weight gradients and of the V-term log-sum-exp).
#   loss: measured <= 3.7e-8 vs float64 (torch fp32 itself: <= 1.3e-7)          -> 1e-5
LOSS_TOL_FP32 = 1e-5
#   grads (max-norm relative): measured <= 2.8e-6 vs float64, <= 2.6e-6 vs torch fp32 (torch fp32
#   vs float64: <= 4.8e-6). sqrt(B*T) * 2^-24 ~ 5e-7 per sum, times the cancellation and depth of
#   the backward pass. 2e-5 is a 7x margin over the worst (init_std 0.2) and 17x over
#   init_std <= 0.1, and still far below any real bug (a wrong scale, a dropped term, a wrong head
#   mapping or rotary sign gives errors of 1e-2 .. 1).
GRAD_TOL_FP32 = 2e-5


def grad_tol_bf16_storage(n_roundings: int) -> float:
    """bf16 storage with fp32 compute: the fp32 gradient is rounded to bf16 when it is stored,
    each rounding adding at most BF16_U relative (so n_roundings * BF16_U over the tensor's
    max-norm, plus the fp32 noise). Measured: <= 3.75e-3 (bound 3.9e-3), also for the embedding
    tied and shared with 2 MTP depths (6 contributions summed in fp32, then one rounding: 2.6e-3).
    The loss is not rounded: LOSS_TOL_FP32."""
    return GRAD_TOL_FP32 + n_roundings * BF16_U


# bf16 compute. Matmul inputs/outputs, rotary output, SwiGLU and (with bf16 storage) the
# residual stream are rounded to bf16 (BF16_U = 3.9e-3 each); kktrain and HF-style autocast
# round at slightly different places (kktrain scales the scores in fp32, keeps rotary cos/sin in
# fp32, keeps the MTP block's residual in the storage dtype), so each differs from the exact
# result by its own rounding noise, amplified through the backward pass. Measured worst:
#   loss     vs float64 1.0e-3 (torch autocast vs float64: 5.9e-4), vs autocast 8.8e-4
#   grads    vs float64 7.4e-2 (torch autocast vs float64: 8.3e-2), vs autocast 7.3e-2
# (the worst cases are all at init_std 0.2; with init_std <= 0.1 the worst are grads 2.0e-2,
# loss 2.1e-4).
# Absolute caps at ~2-3x the worst:
LOSS_TOL_BF16 = 2.5e-3
GRAD_TOL_BF16_F64 = 0.15
GRAD_TOL_BF16_AUTOCAST = 0.15
# The sharp test is the fairness ratio: kktrain's error against float64 must stay within RATIO x
# torch autocast's own error against float64, per tensor and for each loss. Measured worst ratio
# 1.87 (grads) and 1.75 (losses, with the floor below). The floors keep a lucky near-zero torch
# error from making the ratio meaningless: a gradient error below one bf16 unit roundoff counts
# as that unit roundoff, and a loss error below BF16_U / sqrt(N) (the noise of a mean of N
# per-token losses that each carry ~one bf16 rounding; 4.9e-4 for N = 64 tokens) as that value.
RATIO = 3.0
RATIO_FLOOR_GRAD = BF16_U


def ratio_floor_loss(n_tokens: int) -> float:
    return BF16_U / math.sqrt(max(n_tokens, 1))


def n_grad_roundings(d: tr.Dump, name: str) -> int:
    """How many times kktrain rounds parameter `name`'s gradient to bf16 in one backward: once.
    Parameters with several contributions (the embedding's lookups, main and MTP, plus the LM
    heads when tied; an untied lm_head shared with MTP depths) are summed in fp32 and rounded
    once at the end (model/units.cpp, staged gradients)."""
    del d, name
    return 1


def rel_max(a: np.ndarray, b: np.ndarray) -> Tuple[float, float]:
    """(||a - b||_inf / ||b||_inf, ||b||_inf); inf when b is zero and a is not, 0 when both."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    nb = float(np.max(np.abs(b))) if b.size else 0.0
    diff = float(np.max(np.abs(a - b))) if b.size else 0.0
    if not np.isfinite(diff):
        return float("inf"), nb
    if nb == 0.0:
        return (0.0 if diff == 0.0 else float("inf")), nb
    return diff / nb, nb


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b) if b != 0 else (0.0 if a == b else float("inf"))


class Checker:
    def __init__(self):
        self.failures: List[str] = []
        self.worst: Dict[str, Tuple[float, str]] = {}

    def check(self, what: str, kind: str, value: float, tol: float):
        if kind not in self.worst or value > self.worst[kind][0]:
            self.worst[kind] = (value, what)
        ok = value <= tol  # NaN fails
        if not ok:
            self.failures.append(f"{what}: {kind} {value:.3e} > {tol:.3e}")
        return ok


def run_kktrain(binary: str, config: str, overrides: List[str], out: str) -> None:
    cmd = [binary, "grads", config, "--out", out] + overrides
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.stderr.write(f"kktrain failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}{p.stderr}")
        sys.exit(2)


def row_examples(d: tr.Dump) -> Tuple[List[int], int]:
    """(examples per row, padding positions) of a dump with /batch/starts: the positions sharing
    a start are one example, or the row's padding when all their ids are 0 and no target counts
    (io/example_data.hpp: the padding after a row's last example shares one start)."""
    per_row, padding = [], 0
    for starts, ids, targets in zip(d.starts, d.input_ids, d.targets):
        n = 0
        for s in np.unique(starts):
            at = starts == s
            if np.all(ids[at] == 0) and np.all(targets[at] < 0):
                padding += int(np.sum(at))
            else:
                n += 1
        per_row.append(n)
    return per_row, padding


def check_rows(d: tr.Dump, rows: str, chk: Checker) -> None:
    """--rows: the batch has /batch/starts and the layout `rows` asks for."""
    if d.starts is None:
        chk.failures.append(f"--rows {rows}: the file has no /batch/starts")
        return
    per_row, padding = row_examples(d)
    print(f"rows: examples per row {per_row}, {padding} padding positions, "
          f"{int(np.sum(d.targets >= 0))} loss tokens of {d.targets.size}")
    if rows == "packed" and max(per_row) < 2:
        chk.failures.append(f"--rows packed: no row holds two examples ({per_row})")
    if rows == "padded" and (any(n != 1 for n in per_row) or padding == 0):
        chk.failures.append(f"--rows padded: not one example a row with padding ({per_row}, "
                            f"{padding} padding positions)")


def compare(d: tr.Dump, report_only: bool = False, rows: Optional[str] = None) -> int:
    bf16_compute = d.compute_dtype == "bfloat16"
    bf16_storage = d.storage_dtype == "bfloat16"
    chk = Checker()
    print(f"model: V={d.V} C={d.C} L={d.L} H={d.H} KV={d.KV} F={d.attrs['intermediate_size']} "
          f"tied={int(d.attrs['tie_word_embeddings'])} mtp={d.K} compute_mtp={int(d.compute_mtp)} "
          f"B,T={tuple(d.input_ids.shape)} storage={d.storage_dtype} compute={d.compute_dtype} "
          f"stream_bf16={int(d.attrs.get('stream_bf16', 0))} head_dim={d.head_dim} "
          f"attention_bias={d.attention_bias} qk_norm={d.qk_norm}")

    if rows:
        check_rows(d, rows, chk)
    r64 = tr.reference(d, "float64")
    other_mode = "bf16_autocast" if bf16_compute else "float32"
    rot = tr.reference(d, other_mode)
    on = "autocast" if bf16_compute else "f32"

    # ---- losses
    B, T = d.input_ids.shape
    losses = [("loss", d.loss, r64.loss, rot.loss, int(np.sum(d.targets >= 0)))]
    if d.K > 0 and d.compute_mtp:
        if d.mtp_loss is None:
            chk.failures.append("file has an MTP head but no /mtp_loss")
        else:
            losses.append(("mtp_loss", d.mtp_loss, r64.mtp_loss, rot.mtp_loss, B * (T - d.K)))
    if d.E > 0:
        if d.aux_loss is None or r64.aux_loss is None:
            chk.failures.append("sparse model without an /aux_loss in the file or the reference")
        else:
            losses.append(("aux_loss", d.aux_loss, r64.aux_loss, rot.aux_loss, B * T))
        # The router is fp32 in every compute dtype, so kktrain's experts are the float64
        # reference's wherever the router's input agrees to more than the gap between the k-th
        # and the next probability. With a bf16 residual stream the input carries bf16 noise, so
        # a case needs a seed without near-ties (the smallest gap is printed on a mismatch: a
        # flipped expert also spoils that expert's gradients, which no tolerance would cover).
        if len(d.choices) != d.L:
            chk.failures.append(f"the file has routing for {len(d.choices)} of {d.L} layers")
        for layer, (kk, ref) in enumerate(zip(d.choices, r64.choices)):
            bad = np.nonzero(np.any(kk.reshape(ref.shape) != ref, axis=1))[0]
            chk.check(f"layer {layer} routing", "experts chosen differently", float(bad.size), 0.0)
            if bad.size:
                p = np.sort(r64.router_probs[layer][bad], axis=1)[:, ::-1]
                K = ref.shape[1]
                gap = float(np.min((p[:, K - 1] - p[:, K]) / p[:, K - 1]))
                print(f"layer {layer}: {bad.size} tokens routed differently; smallest relative "
                      f"gap between choice {K} and {K + 1} there {gap:.2e}")
        for layer, (oth, ref) in enumerate(zip(rot.choices, r64.choices)):
            n_oth = int(np.sum(np.any(oth != ref, axis=1)))
            if n_oth:  # the other reference's own flip: its expert gradients cannot agree
                print(f"layer {layer}: the {other_mode} reference routes {n_oth} tokens unlike "
                      "float64 (a near-tie at its precision; pick another seed)")
        print(f"routing: {d.L} layers x {d.input_ids.size} tokens x top-{d.attrs['moe_top_k']} "
              f"of {d.E} experts compared with the float64 reference")
    print(f"\n{'':9} {'kktrain':>14} {'float64':>14} {other_mode:>14} {'kk/f64':>9} "
          f"{'kk/' + on:>11} {on + '/f64':>11}")
    for name, kk, ref, oth, n_tokens in losses:
        e64, eot, t64 = rel(kk, ref), rel(kk, oth), rel(oth, ref)
        print(f"{name:9} {kk:14.9f} {ref:14.9f} {oth:14.9f} {e64:9.2e} {eot:11.2e} {t64:11.2e}")
        if bf16_compute:
            chk.check(name, "loss/f64", e64, LOSS_TOL_BF16)
            chk.check(name, "loss/autocast", eot, LOSS_TOL_BF16)
            chk.check(name, "loss ratio vs torch", e64 / max(t64, ratio_floor_loss(n_tokens)), RATIO)
        else:
            chk.check(name, "loss/f64", e64, LOSS_TOL_FP32)
            chk.check(name, "loss/f32", eot, LOSS_TOL_FP32)

    # ---- gradients
    if bf16_compute:
        gtol64, gtolot = GRAD_TOL_BF16_F64, GRAD_TOL_BF16_AUTOCAST
    else:
        gtol64 = gtolot = GRAD_TOL_FP32
    missing = [n for n in d.params if n not in d.grads]
    if missing:
        print(f"\nno gradient in the file (frozen?) for: {', '.join(missing)}")
    unknown = [n for n in d.grads if n not in r64.grads]
    for n in unknown:
        chk.failures.append(f"{n}: gradient in the file but no such parameter in the reference")
    width = max(len(n) for n in d.grads) if d.grads else 10
    print(f"\n{'gradient':{width}} {'|g_f64|inf':>10} {'kk/f64':>9} {'kk/' + on:>11} "
          f"{on + '/f64':>11}" + (f" {'ratio':>6}" if bf16_compute else ""))
    for name in sorted(d.grads):
        if name in unknown:
            continue
        g = d.grads[name]
        if g.shape != r64.grads[name].shape:
            chk.failures.append(f"{name}: shape {g.shape} != reference {r64.grads[name].shape}")
            continue
        e64, n64 = rel_max(g, r64.grads[name])
        eot, _ = rel_max(g, rot.grads[name])
        t64, _ = rel_max(rot.grads[name], r64.grads[name])
        line = f"{name:{width}} {n64:10.3e} {e64:9.2e} {eot:11.2e} {t64:11.2e}"
        if n64 == 0.0:
            # no path from the loss (e.g. MTP head with compute_mtp false): must be exactly zero
            ok = chk.check(name, "grad nonzero (ref 0)",
                           float(np.max(np.abs(g))) if g.size else 0.0, 0.0)
            print(line + ("   (zero, as expected)" if ok else "   NONZERO"))
            continue
        if bf16_storage and not bf16_compute:
            gtol64 = gtolot = grad_tol_bf16_storage(n_grad_roundings(d, name))
        chk.check(name, "grad/f64", e64, gtol64)
        chk.check(name, f"grad/{on}", eot, gtolot)
        if bf16_compute:
            ratio = e64 / max(t64, RATIO_FLOOR_GRAD)
            chk.check(name, "grad ratio vs torch", ratio, RATIO)
            line += f" {ratio:6.2f}"
        print(line)

    print("\nworst:")
    for kind, (v, what) in sorted(chk.worst.items()):
        print(f"  {kind:24} {v:.3e}  ({what})")
    gt = (f"{GRAD_TOL_BF16_F64:.1e}" if bf16_compute else
          f"{GRAD_TOL_FP32:.1e} + n_roundings * 2^-8" if bf16_storage else f"{GRAD_TOL_FP32:.1e}")
    print(f"tolerances: loss {LOSS_TOL_BF16 if bf16_compute else LOSS_TOL_FP32:.1e}, grad {gt}"
          + (f", ratio {RATIO} (floors: grad {RATIO_FLOOR_GRAD:.1e}, loss 2^-8/sqrt(tokens))"
             if bf16_compute else ""))
    if chk.failures:
        print("\nFAIL:")
        for f in chk.failures:
            print("  " + f)
        return 0 if report_only else 1
    print("\nPASS")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description="Parity of kktrain grads against PyTorch.")
    ap.add_argument("--kktrain", help="path to the kktrain binary")
    ap.add_argument("--config", default=DEFAULT_CONFIG, help="config file (default: %(default)s)")
    ap.add_argument("--dump", help="compare an existing grads file instead of running kktrain")
    ap.add_argument("--keep", help="also keep the grads file here")
    ap.add_argument("--report-only", action="store_true", help="print, never fail")
    ap.add_argument("--rows", choices=("packed", "padded"),
                    help="examples data: the batch must be packed / one example a row, padded")
    ap.add_argument("overrides", nargs="*", help="key.path=VALUE overrides for kktrain")
    a = ap.parse_args()
    if a.dump:
        return compare(tr.load_dump(a.dump), a.report_only, a.rows)
    if not a.kktrain:
        ap.error("--kktrain or --dump is required")
    print("kktrain grads " + a.config + " " + " ".join(a.overrides))
    with tempfile.TemporaryDirectory(prefix="kk_parity_") as tmp:
        out = a.keep or os.path.join(tmp, "grads.h5")
        run_kktrain(a.kktrain, a.config, a.overrides, out)
        left = sorted(set(os.listdir(tmp)) - {"grads.h5"})
        if left:  # e.g. the scratch cache of examples data, which grads must remove
            print(f"FAIL: kktrain grads left {left} beside --out")
            return 1
        return compare(tr.load_dump(out), a.report_only, a.rows)


if __name__ == "__main__":
    sys.exit(main())
