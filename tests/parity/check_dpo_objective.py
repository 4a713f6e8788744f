#!/usr/bin/python3
"""kktrain's preference objectives, pair by pair, against dpo_reference.py (float64 torch).

usage: check_dpo_objective.py [--seed N] [--cases N] TOOL [TOOL_ARG ...]

Generates random pairs for every dpo.loss (sigmoid, ipo, simpo, orpo) and several beta,
simpo_gamma and label_smoothing values (label smoothing > 0 for sigmoid and simpo, where TRL
applies it; 0 for ipo and orpo, where it ignores it), and writes them to TOOL's stdin, one JSON
object a line:

  {"loss": "sigmoid", "beta": .., "simpo_gamma": .., "label_smoothing": ..,
   "chosen": S_c, "rejected": S_r, "ref_chosen": R_c, "ref_rejected": R_r,
   "chosen_tokens": n_c, "rejected_tokens": n_r}

(S: summed log-probs of a completion's tokens, n: its token count, R: the reference model's
sums; ref_* are null for the reference-free simpo and orpo). TOOL answers one JSON object a line,
in order:

  {"loss": .., "d_chosen": .., "d_rejected": .., "reward_chosen": .., "reward_rejected": ..}

d_* being the derivatives of that one pair's loss with respect to the sums S_c, S_r (printed
with round-trip precision, %.17g). The reference values are dpo_reference.pair_losses and its
torch autograd derivatives, in float64; the formulas are TRL's (see dpo_reference.py).

Cases: S in [-80, -0.5] with n in [1, 40], plus averaged log-probs near 0 (-1e-9 .. -0.03:
ORPO's log(1 - e^a) must then be computed without cancellation, log(-expm1(a)) as TRL does; the
plain log1p(-exp(a)) fails here, its losses off by up to 4e-9) and around -ln 2 (where TRL switches
between its two forms); reference sums equal to the policy's (the starting point), near them,
or far; beta 0.01 .. 2 (z up to ~300); every case sends a simpo_gamma, which only simpo may use.

Tolerance: both sides compute in double, so each value must agree to RTOL = 1e-12 relative,
|kk - ref| <= RTOL * max(|ref|, 1e-3 * scale), where scale is the natural size of the
quantity's terms (so that cancellation in a difference that happens to be near 0 does not count
as an error): losses 1 (ipo: M^2, M the largest of the averages and 1 / (2 beta)); derivatives
beta (sigmoid), beta / n (simpo), 2 M / n (ipo), max(1, beta) / n (orpo); rewards beta times the
largest |sum| or |average| entering them. Measured with a correct independent double
implementation (closed-form derivatives, other operation orders), 10 seeds x 4000 cases: worst
1.4e-13 (ipo rewards, where (S - R) / n and S / n - R / n differ by rounding; sigmoid
derivatives at large z).

Exit 0 with one summary line; 1 with the list of mismatches; 2 when TOOL fails or answers
malformed lines.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
from typing import Dict, List, Tuple

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dpo_reference as dr  # noqa: E402

RTOL = 1e-12
FLOOR = 1e-3  # fraction of a quantity's natural scale below which errors count absolutely
FIELDS = ("loss", "d_chosen", "d_rejected", "reward_chosen", "reward_rejected")


def make_cases(n_cases: int, seed: int) -> List[Dict]:
    rng = random.Random(seed)
    cases = []
    for i in range(n_cases):
        kind = dr.KINDS[i % len(dr.KINDS)]
        beta = rng.choice([0.01, 0.1, 0.1, 0.25, 0.5, 1.0, 2.0])
        gamma = rng.choice([0.0, 0.5, 0.5, 1.6])
        eps = rng.choice([0.0, 0.0, 0.1, 0.3]) if kind in ("sigmoid", "simpo") else 0.0
        n = [rng.randint(1, 40), rng.randint(1, 40)]
        S = []
        for side in range(2):
            u = rng.random()
            if kind != "sigmoid" and u < 0.2:  # averaged log-prob near 0
                S.append(-(10.0 ** rng.uniform(-9.0, -1.5)) * n[side])
            elif kind == "orpo" and u < 0.35:  # around -ln 2, the switch of log1mexp
                S.append(rng.uniform(-0.8, -0.6) * n[side])
            else:
                S.append(-rng.uniform(0.5, 80.0))
        case = {"loss": kind, "beta": beta, "simpo_gamma": gamma, "label_smoothing": eps,
                "chosen": S[0], "rejected": S[1], "ref_chosen": None, "ref_rejected": None,
                "chosen_tokens": n[0], "rejected_tokens": n[1]}
        if kind not in dr.REFERENCE_FREE:
            R = []
            for s in S:
                u = rng.random()
                if u < 0.15:
                    r = s  # the starting weights: reference = policy
                elif u < 0.85:
                    r = s + rng.uniform(-5.0, 5.0)
                else:
                    r = s + rng.uniform(-30.0, 30.0)
                R.append(r if r < 0 else -rng.uniform(1e-3, 0.5))
            case["ref_chosen"], case["ref_rejected"] = R
        cases.append(case)
    return cases


def reference(case: Dict) -> Dict[str, float]:
    """The reference's loss, derivatives (autograd w.r.t. the sums) and rewards of one case."""
    t = lambda v: torch.tensor([v], dtype=torch.float64)  # noqa: E731
    S_c = t(case["chosen"]).requires_grad_(True)
    S_r = t(case["rejected"]).requires_grad_(True)
    free = case["loss"] in dr.REFERENCE_FREE
    R_c = None if free else t(case["ref_chosen"])
    R_r = None if free else t(case["ref_rejected"])
    losses, rc, rr = dr.pair_losses(case["loss"], case["beta"], case["simpo_gamma"],
                                    case["label_smoothing"], S_c, S_r, R_c, R_r,
                                    t(case["chosen_tokens"]), t(case["rejected_tokens"]))
    d_c, d_r = torch.autograd.grad(losses.sum(), (S_c, S_r))
    return {"loss": float(losses), "d_chosen": float(d_c), "d_rejected": float(d_r),
            "reward_chosen": float(rc), "reward_rejected": float(rr)}


def scales(case: Dict) -> Dict[str, float]:
    """Each quantity's natural scale (the size of the terms it is made of)."""
    kind, b = case["loss"], case["beta"]
    n_c, n_r = case["chosen_tokens"], case["rejected_tokens"]
    S_c, S_r = case["chosen"], case["rejected"]
    if kind == "sigmoid":
        d_c, d_r = b, b
        r_c = b * max(abs(S_c), abs(case["ref_chosen"]))
        r_r = b * max(abs(S_r), abs(case["ref_rejected"]))
        loss = 1.0
    elif kind == "ipo":  # z - 1/(2 beta), z a difference of averages as large as M
        M = max(abs(S_c) / n_c, abs(S_r) / n_r, abs(case["ref_chosen"]) / n_c,
                abs(case["ref_rejected"]) / n_r, 1.0 / (2.0 * b))
        d_c, d_r = 2.0 * M / n_c, 2.0 * M / n_r
        r_c = b * max(abs(S_c), abs(case["ref_chosen"])) / n_c
        r_r = b * max(abs(S_r), abs(case["ref_rejected"])) / n_r
        loss = M * M
    else:
        d_c, d_r = (b / n_c, b / n_r) if kind == "simpo" else (max(1.0, b) / n_c,
                                                              max(1.0, b) / n_r)
        r_c, r_r = b * abs(S_c) / n_c, b * abs(S_r) / n_r
        loss = 1.0
    return {"loss": loss, "d_chosen": d_c, "d_rejected": d_r, "reward_chosen": r_c,
            "reward_rejected": r_r}


def rel_err(kk: float, ref: float, scale: float) -> float:
    if not (isinstance(kk, (int, float)) and math.isfinite(kk)):
        return float("inf")
    return abs(kk - ref) / max(abs(ref), FLOOR * scale)


def run_tool(cmd: List[str], cases: List[Dict]) -> List[Dict]:
    stdin = "".join(json.dumps(c) + "\n" for c in cases)
    try:
        p = subprocess.run(cmd, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"FAIL: could not run {' '.join(cmd)}: {e}")
        sys.exit(2)
    if p.returncode != 0:
        print(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stderr}")
        sys.exit(2)
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    if len(lines) != len(cases):
        print(f"FAIL: {len(cases)} cases sent, {len(lines)} lines answered\n{p.stderr}")
        sys.exit(2)
    out = []
    for i, ln in enumerate(lines):
        try:
            obj = json.loads(ln)
        except json.JSONDecodeError as e:
            print(f"FAIL: answer {i} is not JSON ({e}): {ln!r}")
            sys.exit(2)
        missing = [k for k in FIELDS if k not in obj]
        if missing:
            print(f"FAIL: answer {i} lacks {missing}: {ln!r}")
            sys.exit(2)
        out.append(obj)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("tool", help="the command that evaluates pairs (JSON lines in, JSON lines out)")
    ap.add_argument("tool_args", nargs=argparse.REMAINDER)
    a = ap.parse_args()

    cases = make_cases(a.cases, a.seed)
    answers = run_tool([a.tool] + a.tool_args, cases)
    failures: Dict[int, List[str]] = {}
    worst: Dict[str, Tuple[float, int]] = {}
    for i, (case, ans) in enumerate(zip(cases, answers)):
        ref, sc = reference(case), scales(case)
        for k in FIELDS:
            e = rel_err(ans[k], ref[k], sc[k])
            if k not in worst or e > worst[k][0]:
                worst[k] = (e, i)
            if not e <= RTOL:  # NaN fails
                failures.setdefault(i, []).append(f"{k} {ans[k]!r}, reference {ref[k]!r} "
                                                  f"(rel {e:.2e})")
    summary = ", ".join(f"{k} {worst[k][0]:.1e}" for k in FIELDS)
    if failures:
        n = sum(len(v) for v in failures.values())
        print(f"FAIL: {n} mismatches in {len(failures)} of {len(cases)} cases (tolerance "
              f"{RTOL:.0e} relative)")
        for i, msgs in failures.items():
            print(f"  case {i}: {json.dumps(cases[i])}")
            for m in msgs:
                print(f"    {m}")
        print(f"worst: {summary}")
        return 1
    counts = {k: sum(c["loss"] == k for c in cases) for k in dr.KINDS}
    print(f"PASS: {len(cases)} cases ({', '.join(f'{k} {v}' for k, v in counts.items())}), "
          f"worst relative errors {summary} (tolerance {RTOL:.0e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
