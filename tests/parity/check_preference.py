#!/usr/bin/python3
"""Parity check of a `kktrain grads` dump of a preference batch (train.objective dpo) against
the PyTorch reference.

usage: check_preference.py DUMP.h5 MODE        MODE: float32 (fp32 compute) | bf16_autocast
                                                (bf16 compute), as check_grads.py's modes

The dump is an examples dump (/params, /grads, /batch/input_ids, /batch/targets, /batch/starts,
/loss, the model's root attributes) plus a group /dpo:

  pairs                  int64 (P, 4): row, chosen_begin, rejected_begin, end. In row `row`
                         the chosen side (prompt + chosen completion) is [chosen_begin,
                         rejected_begin), the rejected side [rejected_begin, end); /batch/starts
                         makes each side its own sequence (block-diagonal attention, rotary
                         positions restarting at the side's first token).
  logps_chosen, logps_rejected   float64 (P): the policy's sums S of per-token log-probs over a
                         side's completion tokens: the positions q of its span with
                         targets[row, q] >= 0, each counting log_softmax(logits[q])[targets[q]]
                         (fp32 log-softmax of the head's logits, soft-capped when the model
                         caps them).
  tokens_chosen, tokens_rejected int64 (P): those token counts n.
  ref_chosen, ref_rejected       float64 (P): the reference model's sums (sigmoid, ipo); the dump
                         is taken at the starting weights, so they equal the policy's own sums.
                         NaN for the reference-free simpo and orpo.
  losses                 float64 (P): per-pair losses; /loss is their mean.
  attributes             loss (sigmoid | ipo | simpo | orpo), beta, simpo_gamma, label_smoothing.

/grads holds the gradients of /loss (plus moe_aux_loss_coef times the load-balancing loss for a
sparse model, as for every other objective).

The reference (torch_reference.Reference: the same model, packed-row masks and rotary restarts
as check_grads.py) computes the per-token log-probs in float64 and in MODE, the sums S and
counts n over each side's completion tokens (summed in float64), the per-pair losses with
dpo_reference.pair_losses (R = the dumped reference sums for sigmoid / ipo), their mean, and
its gradients by autograd. Compared:

  token counts                 exactly
  S, reference sums, losses    relative error against both references: fp32 compute 1e-5
                               (check_grads' LOSS_TOL_FP32), bf16 compute LOSS_TOL_BF16 and, for
                               S and the mean loss, its ratio to torch autocast's own error
                               (check_grads' RATIO, floor 2^-8 / sqrt(tokens)); the reference
                               sums are compared with the policy sums S the reference computes
  /loss                        the mean of /dpo/losses (1e-12 relative) and the tolerance above
  gradients                    check_grads' rules: max-norm relative error, fp32 GRAD_TOL_FP32
                               (here 1e-5: the objective adds a handful of double operations per
                               pair to the SFT gradient; measured worst 9.5e-7 on the tiny model)
                               (bf16 storage: plus one bf16 rounding), bf16 compute its caps and
                               its fairness ratio against torch autocast

and the batch's structure: spans inside their row, not overlapping, each side one sequence in
/batch/starts, at least one completion token a side, reference sums NaN exactly for simpo /
orpo. Prints a per-pair table and the worst errors; exit 0 pass, 1 fail, 2 usage.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import h5py
import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_grads as cg  # noqa: E402
import dpo_reference as dr  # noqa: E402
import torch_reference as tr  # noqa: E402

MODES = ("float32", "bf16_autocast")
CONSISTENCY_TOL = 1e-12  # /loss against the mean of /dpo/losses (both written by kktrain)

# The fp32 gradient tolerance, max-norm relative: tighter than check_grads' own 2e-5.
GRAD_TOL_FP32 = 1e-5


@dataclass
class Pref:
    """The /dpo group of a dump."""

    kind: str
    beta: float
    gamma: float
    eps: float
    pairs: np.ndarray  # (P, 4) int64: row, chosen_begin, rejected_begin, end
    logps: Tuple[np.ndarray, np.ndarray]  # chosen, rejected (P,) float64
    refs: Tuple[np.ndarray, np.ndarray]
    tokens: Tuple[np.ndarray, np.ndarray]
    losses: np.ndarray

    @property
    def P(self) -> int:
        return int(self.pairs.shape[0])


def load_pref(path: str) -> Pref:
    with h5py.File(path, "r") as f:
        if "dpo" not in f:
            raise ValueError("no /dpo group (not a preference dump)")
        g = f["dpo"]
        a = lambda k: np.asarray(g[k][()])  # noqa: E731
        return Pref(kind=tr._text(g.attrs["loss"]), beta=float(g.attrs["beta"]),
                    gamma=float(g.attrs["simpo_gamma"]), eps=float(g.attrs["label_smoothing"]),
                    pairs=a("pairs").astype(np.int64).reshape(-1, 4),
                    logps=(a("logps_chosen").astype(np.float64),
                           a("logps_rejected").astype(np.float64)),
                    refs=(a("ref_chosen").astype(np.float64), a("ref_rejected").astype(np.float64)),
                    tokens=(a("tokens_chosen").astype(np.int64),
                            a("tokens_rejected").astype(np.int64)),
                    losses=a("losses").astype(np.float64))


def sides(pref: Pref) -> List[Tuple[int, int, int, int, int]]:
    """(pair, side 0 chosen / 1 rejected, row, begin, end) of every side."""
    out = []
    for p, (row, cb, rb, end) in enumerate(pref.pairs.tolist()):
        out.append((p, 0, row, cb, rb))
        out.append((p, 1, row, rb, end))
    return out


def check_structure(d: tr.Dump, pref: Pref, chk: cg.Checker) -> bool:
    """The batch is what the format says; False when the reference cannot be computed."""
    B, T = d.input_ids.shape
    ok = True
    if pref.kind not in dr.KINDS:
        chk.failures.append(f"/dpo loss attribute {pref.kind!r} is not one of {dr.KINDS}")
        return False
    if d.starts is None:
        chk.failures.append("no /batch/starts: a preference batch packs each side as a sequence")
        return False
    if d.K > 0 and d.compute_mtp:
        chk.failures.append("an MTP head in a preference dump: not defined")
        return False
    for name, arr in (("logps", pref.logps), ("ref", pref.refs), ("tokens", pref.tokens)):
        for s, v in zip(("chosen", "rejected"), arr):
            if v.shape != (pref.P,):
                chk.failures.append(f"/dpo/{name}_{s} has shape {v.shape}, pairs {pref.P}")
                ok = False
    if pref.losses.shape != (pref.P,) or pref.P == 0:
        chk.failures.append(f"/dpo/losses shape {pref.losses.shape} for {pref.P} pairs")
        ok = False
    if not ok:
        return False
    used = np.zeros((B, T), dtype=bool)
    for p, s, row, b, e in sides(pref):
        what = f"pair {p} {'chosen' if s == 0 else 'rejected'} [{b}, {e}) of row {row}"
        if not (0 <= row < B and 0 <= b < e <= T):
            chk.failures.append(f"{what}: outside the batch ({B} x {T}) or empty")
            ok = False
            continue
        if used[row, b:e].any():
            chk.failures.append(f"{what}: overlaps another side")
            ok = False
        used[row, b:e] = True
        # Its own sequence: every token's start is the side's first token, or (a shared prompt,
        # /batch/gaps) the pair's first token: the chosen side follows the prompt, the rejected
        # side sees the prompt and not the chosen side ([chosen_begin, rejected_begin) its gap).
        cb, rb = pref.pairs[p][1], pref.pairs[p][2]
        st = np.unique(d.starts[row, b:e]).tolist()
        gap = None if d.gaps is None else d.gaps[row, b:e]
        shared = gap is not None and len(st) == 1 and st[0] < b
        if shared:
            want_gap = (0, 0) if s == 0 else (cb, rb)
            if not (np.all(gap[:, 0] == want_gap[0]) and np.all(gap[:, 1] == want_gap[1])):
                chk.failures.append(f"{what}: with a shared prompt [{st[0]}, {cb}) its gaps "
                                    f"should be {want_gap}")
                ok = False
            if s == 1 and not np.all(d.starts[row, cb:rb] == st[0]):
                chk.failures.append(f"{what}: the chosen side does not share its prompt")
                ok = False
        elif not (len(st) == 1 and st[0] == b) or (gap is not None and np.any(gap[:, 1] != gap[:, 0])):
            chk.failures.append(f"{what}: /batch/starts does not make it one sequence "
                                f"(starts {st})")
            ok = False
        if not np.any(d.targets[row, b:e] >= 0):
            chk.failures.append(f"{what}: no completion token")
            ok = False
    free = pref.kind in dr.REFERENCE_FREE
    for s, v in zip(("chosen", "rejected"), pref.refs):
        if free and not np.all(np.isnan(v)):
            chk.failures.append(f"/dpo/ref_{s}: {pref.kind} is reference-free, expected NaN")
        if not free and not np.all(np.isfinite(v)):
            chk.failures.append(f"/dpo/ref_{s}: {pref.kind} needs finite reference sums")
            ok = False
    return ok


@dataclass
class PrefResult:
    mode: str
    S: Tuple[np.ndarray, np.ndarray]  # policy sums, chosen / rejected
    n: Tuple[np.ndarray, np.ndarray]  # completion token counts
    losses: np.ndarray
    loss: float
    grads: Dict[str, np.ndarray] = field(default_factory=dict)


def token_logps(ref: tr.Reference, d: tr.Dump) -> torch.Tensor:
    """(B, T) float64: log_softmax(logits[b, q])[targets[b, q]] (0 where targets < 0), the
    logits as Reference.head_logits gives them (soft-capped), the log-softmax in the statistics
    dtype (fp32; float64 in the float64 reference)."""
    ids = torch.from_numpy(d.input_ids)
    tgt = torch.from_numpy(d.targets)
    starts = torch.from_numpy(d.starts)
    gaps = None if d.gaps is None else torch.from_numpy(d.gaps)
    bf16 = ref.mode == "bf16_autocast"
    with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
        h = ref.hidden(ids, starts, gaps)
        logits = ref.head_logits(h, "model.norm.weight")
    logp = F.log_softmax(logits.to(ref.stat), dim=-1)
    tok = logp.gather(-1, tgt.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return torch.where(tgt >= 0, tok, torch.zeros_like(tok)).to(torch.float64)


def reference_pref(d: tr.Dump, pref: Pref, mode: str) -> PrefResult:
    """The reference's sums, losses and the gradients of their mean (+ the MoE aux loss)."""
    ref = tr.Reference(d, mode)
    tok = token_logps(ref, d)
    tgt = torch.from_numpy(d.targets)
    S = ([], [])
    n = ([], [])
    for _, s, row, b, e in sides(pref):
        S[s].append(tok[row, b:e].sum())
        n[s].append(int((tgt[row, b:e] >= 0).sum()))
    S_c, S_r = torch.stack(S[0]), torch.stack(S[1])
    n_c, n_r = torch.tensor(n[0], dtype=torch.float64), torch.tensor(n[1], dtype=torch.float64)
    R_c = R_r = None
    if pref.kind not in dr.REFERENCE_FREE:
        R_c, R_r = (torch.from_numpy(pref.refs[0]), torch.from_numpy(pref.refs[1]))
    losses, _, _ = dr.pair_losses(pref.kind, pref.beta, pref.gamma, pref.eps, S_c, S_r, R_c, R_r,
                                  n_c, n_r)
    loss = losses.mean()
    total = loss
    aux = ref.aux_loss()
    if aux is not None:
        total = total + float(d.attrs["moe_aux_loss_coef"]) * aux
    total.backward()
    grads = {}
    for name in d.params:
        t = ref.w[name]
        grads[name] = (np.zeros(t.shape, dtype=np.float64) if t.grad is None
                       else t.grad.detach().to(torch.float64).numpy())
    return PrefResult(mode=mode, S=(S_c.detach().numpy(), S_r.detach().numpy()),
                      n=(np.array(n[0], dtype=np.int64), np.array(n[1], dtype=np.int64)),
                      losses=losses.detach().numpy(), loss=float(loss.detach()), grads=grads)


def check_values(what: str, kk: float, r64: float, rot: float, n_tokens: int, bf16: bool,
                 on: str, chk: cg.Checker, ratio: bool) -> Tuple[float, float]:
    """One scalar against both references (LOSS_TOL_FP32 / LOSS_TOL_BF16 and, with `ratio`, the
    bf16 fairness ratio); returns (error vs float64, error vs the MODE reference)."""
    e64, eot, t64 = cg.rel(kk, r64), cg.rel(kk, rot), cg.rel(rot, r64)
    tol = cg.LOSS_TOL_BF16 if bf16 else cg.LOSS_TOL_FP32
    kind = what.split()[-1]
    chk.check(what, f"{kind}/f64", e64, tol)
    chk.check(what, f"{kind}/{on}", eot, tol)
    if bf16 and ratio:
        chk.check(what, f"{kind} ratio vs torch",
                  e64 / max(t64, cg.ratio_floor_loss(n_tokens)), cg.RATIO)
    return e64, eot


def check_grads_like(d: tr.Dump, r64: PrefResult, rot: PrefResult, chk: cg.Checker, on: str
                     ) -> List[Tuple[float, str]]:
    """check_grads.compare's gradient rules; returns (error vs float64, name) per tensor."""
    bf16_compute = d.compute_dtype == "bfloat16"
    bf16_storage = d.storage_dtype == "bfloat16"
    if bf16_compute:
        gtol64, gtolot = cg.GRAD_TOL_BF16_F64, cg.GRAD_TOL_BF16_AUTOCAST
    else:
        gtol64 = gtolot = GRAD_TOL_FP32
    out = []
    for name in sorted(d.grads):
        if name not in r64.grads:
            chk.failures.append(f"{name}: gradient in the file but no such parameter")
            continue
        g = d.grads[name]
        if g.shape != r64.grads[name].shape:
            chk.failures.append(f"{name}: shape {g.shape} != reference {r64.grads[name].shape}")
            continue
        e64, n64 = cg.rel_max(g, r64.grads[name])
        eot, _ = cg.rel_max(g, rot.grads[name])
        t64, _ = cg.rel_max(rot.grads[name], r64.grads[name])
        if n64 == 0.0:
            chk.check(name, "grad nonzero (ref 0)", float(np.max(np.abs(g))) if g.size else 0.0,
                      0.0)
            continue
        if bf16_storage and not bf16_compute:
            gtol64 = gtolot = cg.grad_tol_bf16_storage(cg.n_grad_roundings(d, name))
        chk.check(name, "grad/f64", e64, gtol64)
        chk.check(name, f"grad/{on}", eot, gtolot)
        if bf16_compute:
            chk.check(name, "grad ratio vs torch", e64 / max(t64, cg.RATIO_FLOOR_GRAD), cg.RATIO)
        out.append((e64, name))
    missing = [n for n in d.params if n not in d.grads]
    if missing:
        print(f"no gradient in the file (frozen?) for: {', '.join(missing)}")
    return out


def compare(path: str, mode: str) -> int:
    d = tr.load_dump(path)
    pref = load_pref(path)
    bf16 = d.compute_dtype == "bfloat16"
    if (mode == "bf16_autocast") != bf16:
        print(f"MODE {mode} does not fit the dump's compute dtype {d.compute_dtype} "
              f"(float32 for fp32 compute, bf16_autocast for bf16)")
        return 2
    on = "autocast" if bf16 else "f32"
    print(f"model: V={d.V} C={d.C} L={d.L} H={d.H} KV={d.KV} B,T={tuple(d.input_ids.shape)} "
          f"storage={d.storage_dtype} compute={d.compute_dtype}; dpo.loss={pref.kind} "
          f"beta={pref.beta} simpo_gamma={pref.gamma} label_smoothing={pref.eps}, "
          f"{pref.P} pairs")
    chk = cg.Checker()
    if not check_structure(d, pref, chk):
        print("\nFAIL:")
        for f in chk.failures:
            print("  " + f)
        return 1
    r64 = reference_pref(d, pref, "float64")
    rot = reference_pref(d, pref, mode)
    free = pref.kind in dr.REFERENCE_FREE

    # ---- per pair: counts exactly, sums, reference sums, losses
    print(f"\n{'pair':>4} {'row':>3} {'n_c':>4} {'n_r':>4} {'S_c kktrain':>14} {'S_r kktrain':>14} "
          f"{'S/f64':>8} {'ref/f64':>8} {'loss kktrain':>13} {'loss/f64':>8}")
    for p in range(pref.P):
        row = int(pref.pairs[p, 0])
        worst = {"S": 0.0, "ref": 0.0, "loss": 0.0}
        for s, side in enumerate(("chosen", "rejected")):
            n = int(r64.n[s][p])
            chk.check(f"pair {p} {side} tokens", "token count", float(abs(
                int(pref.tokens[s][p]) - n)), 0.0)
            e, _ = check_values(f"pair {p} {side} S", pref.logps[s][p], r64.S[s][p], rot.S[s][p],
                                n, bf16, on, chk, ratio=True)
            worst["S"] = max(worst["S"], e)
            if not free:  # the reference model at the starting weights: the policy's own sums
                e, _ = check_values(f"pair {p} {side} ref", pref.refs[s][p], r64.S[s][p],
                                    rot.S[s][p], n, bf16, on, chk, ratio=True)
                worst["ref"] = max(worst["ref"], e)
        worst["loss"], _ = check_values(f"pair {p} loss", pref.losses[p], r64.losses[p],
                                        rot.losses[p], int(r64.n[0][p] + r64.n[1][p]), bf16, on,
                                        chk, ratio=False)
        print(f"{p:4d} {row:3d} {int(pref.tokens[0][p]):4d} {int(pref.tokens[1][p]):4d} "
              f"{pref.logps[0][p]:14.7f} {pref.logps[1][p]:14.7f} {worst['S']:8.1e} "
              f"{'-' if free else format(worst['ref'], '8.1e'):>8} {pref.losses[p]:13.9f} "
              f"{worst['loss']:8.1e}")

    # ---- the mean loss
    chk.check("/loss", "loss vs mean of /dpo/losses",
              cg.rel(d.loss, float(np.mean(pref.losses))), CONSISTENCY_TOL)
    n_all = int(sum(r64.n[0]) + sum(r64.n[1]))
    e64, eot = check_values("mean loss", d.loss, r64.loss, rot.loss, n_all, bf16, on, chk,
                            ratio=True)
    print(f"\nloss: kktrain {d.loss:.9f}, float64 {r64.loss:.9f}, {mode} {rot.loss:.9f} "
          f"(kk/f64 {e64:.2e}, kk/{on} {eot:.2e}); {n_all} completion tokens of "
          f"{int(np.sum(d.targets >= 0))} targets in the batch")

    # ---- gradients
    per_tensor = check_grads_like(d, r64, rot, chk, on)
    per_tensor.sort(reverse=True)
    print("gradients, worst kk/f64: " + ", ".join(f"{n} {e:.2e}" for e, n in per_tensor[:3]))

    print("\nworst:")
    for kind, (v, what) in sorted(chk.worst.items()):
        print(f"  {kind:26} {v:.3e}  ({what})")
    print(f"tolerances: sums and losses {cg.LOSS_TOL_BF16 if bf16 else cg.LOSS_TOL_FP32:.1e}, "
          f"grads {cg.GRAD_TOL_BF16_F64 if bf16 else GRAD_TOL_FP32:.1e}"
          + (" (+ 2^-8 for bf16 storage)" if d.storage_dtype == "bfloat16" and not bf16 else "")
          + (f", ratio {cg.RATIO}" if bf16 else ""))
    if chk.failures:
        print("\nFAIL:")
        for f in chk.failures:
            print("  " + f)
        return 1
    print("\nPASS")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dump", help="kktrain grads file of a preference batch")
    ap.add_argument("mode", choices=MODES, help="float32 (fp32 compute) | bf16_autocast")
    a = ap.parse_args()
    try:
        return compare(a.dump, a.mode)
    except (OSError, KeyError, ValueError) as e:  # not a readable preference dump
        print(f"{a.dump}: {e}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
