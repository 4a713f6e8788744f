"""Preference objectives (train.objective dpo, dpo.loss sigmoid | ipo | simpo | orpo) in plain
torch, float64: the reference that check_dpo_objective.py and check_preference.py compare
kktrain with.

Every objective is a function of one pair's sums, written as TRL computes it:

  S_c, S_r   the policy's summed per-token log-probs over the chosen / rejected completion tokens
  n_c, n_r   the completions' token counts
  R_c, R_r   the reference model's sums over the same tokens (sigmoid and ipo only)
  a = S / n  averaged log-probs (ipo, simpo, orpo; the reference's ra = R / n likewise for ipo)

  sigmoid  z = beta * ((S_c - S_r) - (R_c - R_r))
           loss = -logsigmoid(z) * (1 - eps) - logsigmoid(-z) * eps
           rewards beta * (S - R)
           (TRL's DPOTrainer.dpo_loss, loss_type "sigmoid", eps its label_smoothing: the
           conservative DPO of cDPO)
  ipo      z = (a_c - a_r) - (ra_c - ra_r)
           loss = (z - 1 / (2 beta))^2
           rewards beta * (a - ra)
           (dpo_loss, loss_type "ipo": DPOTrainer.concatenated_forward divides the policy's and
           the reference's sums by the completion's token count for ipo, so dpo_loss and its
           rewards see averages; label_smoothing is ignored)
  simpo    z = beta * (a_c - a_r) - gamma
           loss = -logsigmoid(z) * (1 - eps) - logsigmoid(-z) * eps
           rewards beta * a
           (CPOTrainer.cpo_loss, loss_type "simpo" with cpo_alpha 0, i.e. no NLL term; TRL writes
           z as beta * ((a_c - a_r) - gamma / beta), the same value)
  orpo     log_odds = (a_c - a_r) - (log1mexp(a_c) - log1mexp(a_r)),  log1mexp(a) = log(1 - e^a)
           loss = -a_c - beta * logsigmoid(log_odds)
           rewards beta * a
           (ORPOTrainer.odds_ratio_loss and its NLL term; log1mexp as TRL's stable form:
           log1p(-exp(a)) below -ln 2, log(-expm1(a)) above. kktrain's NLL term is each pair's
           mean over its chosen completion tokens, -a_c; TRL's is the token mean of the chosen
           sequences' cross-entropy over the whole batch, prompt tokens included)

The batch loss is the mean of the pairs' losses. label_smoothing (eps) only enters sigmoid and
simpo; gamma (dpo.simpo_gamma) only simpo.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

KINDS = ("sigmoid", "ipo", "simpo", "orpo")
REFERENCE_FREE = ("simpo", "orpo")  # no reference model: ref sums are absent (NaN in a dump)

LN2 = math.log(2.0)


def log1mexp(x: torch.Tensor) -> torch.Tensor:
    """log(1 - exp(x)) for x < 0, without cancellation (TRL's ORPO helper of the same name):
    log1p(-exp(x)) for x < -ln 2, log(-expm1(x)) for -ln 2 <= x < 0."""
    return torch.where(x < -LN2, torch.log1p(-torch.exp(x)), torch.log(-torch.expm1(x)))


def _smoothed(z: torch.Tensor, eps: float) -> torch.Tensor:
    """-logsigmoid(z) (1 - eps) - logsigmoid(-z) eps (label-smoothed logistic loss)."""
    return -F.logsigmoid(z) * (1.0 - eps) - F.logsigmoid(-z) * eps


def pair_losses(kind: str, beta: float, gamma: float, eps: float, S_c: torch.Tensor,
                S_r: torch.Tensor, R_c: Optional[torch.Tensor], R_r: Optional[torch.Tensor],
                n_c: torch.Tensor, n_r: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(losses, rewards_chosen, rewards_rejected), one value per pair, of the objective `kind`.

    S_c, S_r: the policy's sums (float64 tensors of shape (P,), with autograd if wanted); R_c,
    R_r: the reference's sums (ignored, may be None, for simpo / orpo); n_c, n_r: token counts
    (any numeric tensors, >= 1). Rewards are computed from detached values, as TRL logs them.
    """
    if kind not in KINDS:
        raise ValueError(f"dpo.loss {kind!r} is not one of {KINDS}")
    n_c = n_c.to(torch.float64)
    n_r = n_r.to(torch.float64)
    if kind in ("sigmoid", "ipo") and (R_c is None or R_r is None):
        raise ValueError(f"dpo.loss {kind} needs the reference sums")

    if kind == "sigmoid":
        z = beta * ((S_c - S_r) - (R_c - R_r))
        losses = _smoothed(z, eps)
        rc, rr = beta * (S_c - R_c), beta * (S_r - R_r)
    elif kind == "ipo":
        a_c, a_r = S_c / n_c, S_r / n_r
        ra_c, ra_r = R_c / n_c, R_r / n_r
        z = (a_c - a_r) - (ra_c - ra_r)
        losses = (z - 1.0 / (2.0 * beta)) ** 2
        rc, rr = beta * (a_c - ra_c), beta * (a_r - ra_r)
    elif kind == "simpo":
        a_c, a_r = S_c / n_c, S_r / n_r
        z = beta * (a_c - a_r) - gamma
        losses = _smoothed(z, eps)
        rc, rr = beta * a_c, beta * a_r
    else:  # orpo
        a_c, a_r = S_c / n_c, S_r / n_r
        log_odds = (a_c - a_r) - (log1mexp(a_c) - log1mexp(a_r))
        losses = -a_c - beta * F.logsigmoid(log_odds)
        rc, rr = beta * a_c, beta * a_r
    return losses, rc.detach(), rr.detach()
