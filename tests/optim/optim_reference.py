"""References for tests/optim/check_optim.py: running optim_runner, bf16 bit tricks, NumPy
emulations of kktrain's documented update semantics, torch.optim trajectories, error measures.

The emulations are written from docs/precision.md ("Optimizers") and the comments of
optim/update_kernels.hpp, not from the kernels: every line is one fp32 operation (NumPy float32
arrays times np.float32 scalars round once per operation, no FMA), and each stored value (moment,
parameter, master) is rounded once to its dtype. Host scalars follow torch / Transformer Engine:
torch casts Python doubles (1 - beta1, lr / (1 - beta1^t), ...) to fp32; TE passes beta1, lr, eps,
wd and the bias corrections as fp32 kernel arguments and forms 1 - beta1 in fp32.
"""
import math
import os
import subprocess
import tempfile

import h5py
import numpy as np

F32 = np.float32

# ---- bf16 ---------------------------------------------------------------------------------------


def bits(x):
    return np.ascontiguousarray(x, dtype=F32).view(np.uint32)


def from_bits(u):
    return np.ascontiguousarray(u, dtype=np.uint32).view(F32)


def bf16_rne(x):
    """fp32 -> nearest bf16 (ties to even), returned as fp32 (no NaN in these tests)."""
    u = bits(x).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return from_bits(u.astype(np.uint32))


def bf16_te_split(x):
    """The bf16 half of Transformer Engine's remainder split: high 16 bits, +1 if low >= 0x8000."""
    u = bits(x)
    hi = (u >> 16) + (u & 0xFFFF >= 0x8000).astype(np.uint32)
    return from_bits(hi << 16)


def is_bf16(x):
    return np.all(bits(x) & 0xFFFF == 0)


def ident(x):
    return x


def rounder(dtype):
    return bf16_rne if dtype == "bfloat16" else ident


# ---- errors -------------------------------------------------------------------------------------


def traj_ulp(got, ref, init, unit="float32", rms=False):
    """Max error of a trajectory (steps, ...) in units of the spacing at the largest |value| the
    element has had so far (initial value included). A plain ulp at the current value blows up
    where a parameter passes near zero: an error of one ulp made while |p| was 0.5 is 10^4 ulp
    once p is 5e-5, without any new error; the running maximum keeps the unit of the error made.
    rms: the root mean square over all elements and steps instead of the max."""
    ref = np.asarray(ref, F32)
    mags = np.abs(np.concatenate([np.asarray(init, F32)[None], ref]))
    scale = np.maximum.accumulate(mags, axis=0)[1:]
    sp = np.spacing(scale).astype(np.float64) * (65536.0 if unit == "bfloat16" else 1.0)
    err = np.abs(np.asarray(got, np.float64) - ref) / sp
    return float(np.sqrt(np.mean(err ** 2)) if rms else err.max())


def final_ulp(got, ref_hist):
    """Max |got - ref_hist[-1]| in fp32 ulps of the largest |value| each element had over the
    reference history (for final states, such as moments, whose elements sum terms of either sign:
    an error made while |m| was large is not an error of many ulp once m has shrunk)."""
    ref_hist = np.asarray(ref_hist, F32)
    sp = np.spacing(np.abs(ref_hist).max(axis=0)).astype(np.float64)
    return float((np.abs(np.asarray(got, np.float64) - ref_hist[-1]) / sp).max())


def rel_err(got, ref):
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    nz = ref != 0
    return float((np.abs(got - ref)[nz] / np.abs(ref[nz])).max()) if nz.any() else 0.0


def bitwise_equal(a, b):
    a = np.ascontiguousarray(a, F32)
    b = np.ascontiguousarray(b, F32)
    return a.shape == b.shape and np.array_equal(bits(a), bits(b))


# ---- optim_runner -------------------------------------------------------------------------------


class Param:
    def __init__(self, init, dtype="float32", trainable=True):
        self.init = np.asarray(init, F32)
        self.dtype = dtype
        self.trainable = trainable


def run_kktrain(runner, yaml, params, grads, lrs, seed=1234, grad_scale=None):
    """Runs optim_runner. params: {name: Param}; grads: {name: (steps, *shape)}.
    Returns (history {name: (steps, *shape)}, state {name: {state: array}}, optimizer name)."""
    steps = len(lrs)
    with tempfile.TemporaryDirectory(prefix="kk_optim_") as d:
        fin, fout = os.path.join(d, "in.h5"), os.path.join(d, "out.h5")
        with h5py.File(fin, "w") as f:
            f.attrs["optimizer_yaml"] = np.bytes_(yaml)  # fixed-length ASCII
            f.attrs["steps"] = np.int64(steps)
            f.attrs["seed"] = np.int64(seed)
            for n, p in params.items():
                ds = f.create_dataset("params/" + n, data=p.init)
                ds.attrs["dtype"] = np.bytes_(p.dtype)
                ds.attrs["trainable"] = np.int64(1 if p.trainable else 0)
                f.create_dataset("grads/" + n, data=np.asarray(grads[n], F32))
            f.create_dataset("lr", data=np.asarray(lrs, np.float64))
            if grad_scale is not None:
                f.create_dataset("grad_scale", data=np.asarray(grad_scale, F32))
        r = subprocess.run([runner, fin, fout], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("optim_runner failed (%d): %s%s" %
                               (r.returncode, r.stdout, r.stderr))
        with h5py.File(fout, "r") as f:
            hist = {n: f["params/" + n][...] for n in f["params"]}
            state = {}
            if "state" in f:
                for n in f["state"]:
                    state[n] = {k: f["state/" + n + "/" + k][...] for k in f["state/" + n]}
            return hist, state, str(f.attrs["optimizer"])


# ---- schedules and data -------------------------------------------------------------------------


def warmup_cosine(steps, peak, warmup=10, floor=0.1):
    out = []
    for s in range(steps):
        if s < warmup:
            out.append(peak * (s + 1) / warmup)
        else:
            t = (s - warmup) / max(1, steps - warmup - 1)
            out.append(peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t))))
    return out


def random_problem(shapes, steps, seed, p_scale=0.5):
    """Random initial params and per-step grads: magnitudes spread over 4 decades, a few zeros."""
    rng = np.random.default_rng(seed)
    init, grads = {}, {}
    for n, shape in shapes.items():
        init[n] = (rng.standard_normal(shape) * p_scale).astype(F32)
        g = rng.standard_normal((steps,) + tuple(shape))
        g *= 10.0 ** rng.uniform(-3, 1, size=(1,) + tuple(shape))  # per-element scale
        g[rng.random(g.shape) < 0.03] = 0.0
        grads[n] = g.astype(F32)
    return init, grads


# ---- emulations of kktrain's semantics ----------------------------------------------------------


def _scale(grad_scale, t):
    return F32(1) if grad_scale is None else F32(grad_scale[t - 1])


def emul_torch_adam(p0, grads, lrs, b1, b2, eps, wd, decoupled, dtype, p_given=None,
                    grad_scale=None):
    """torch Adam/AdamW with moments of the param dtype, fp32 math, one rounding per stored value.
    p_given (steps, ...): start step t from p_given[t-1] instead of the emulated param (to check
    stochastic rounding). grad_scale (steps,): multiplies the (rounded) gradient in fp32.
    Returns (params per step, pre-rounding params per step, m, v)."""
    r = rounder(dtype)
    p = r(np.asarray(p0, F32))
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    hist, pre = [], []
    for t, lr in enumerate(lrs, start=1):
        if p_given is not None and t > 1:
            p = np.asarray(p_given[t - 2], F32)
        g = r(np.asarray(grads[t - 1], F32)) * _scale(grad_scale, t)
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        if decoupled:
            p = p * F32(1 - lr * wd)
        elif wd != 0:
            g = g + F32(wd) * p
        m = r(m * F32(b1) + F32(1 - b1) * g)
        v = r(v * F32(b2) + F32(1 - b2) * g * g)
        denom = np.sqrt(v) / F32(math.sqrt(bc2)) + F32(eps)
        x = p + F32(-(lr / bc1)) * m / denom
        pre.append(x)
        p = r(x)
        hist.append(p)
    return np.stack(hist), np.stack(pre), m, v


def emul_fused_adam(p0, grads, lrs, b1, b2, eps, wd, pdtype, adam_w_mode=True,
                    bias_correction=True, master=True, m_dtype="float32", v_dtype="float32",
                    grad_scale=None):
    """TE FusedAdam: fp32 math on the master, moments of their own dtypes.
    Returns (params per step, masters per step, m, v)."""
    rp, rm, rv = rounder(pdtype), rounder(m_dtype), rounder(v_dtype)
    p = rp(np.asarray(p0, F32))  # the master starts as the (rounded) parameter
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    beta1, beta2 = F32(b1), F32(b2)
    hist, masters = [], []
    for t, lr in enumerate(lrs, start=1):
        g = rp(np.asarray(grads[t - 1], F32)) * _scale(grad_scale, t)
        # TE's host code: bias_correction1 = 1 - std::pow(beta1, step) with beta1 a float: the
        # fp32 beta, raised in double, the difference rounded to fp32.
        bc1 = F32(1 - float(beta1) ** t) if bias_correction else F32(1)
        bc2 = F32(1 - float(beta2) ** t) if bias_correction else F32(1)
        if not adam_w_mode:
            g = g + F32(wd) * p
        mf = beta1 * m + (F32(1) - beta1) * g
        vf = beta2 * v + (F32(1) - beta2) * g * g
        denom = np.sqrt(vf / bc2) + F32(eps)
        update = (mf / bc1) / denom
        if adam_w_mode:
            update = update + F32(wd) * p
        p = p - F32(lr) * update
        m, v = rm(mf), rv(vf)
        masters.append(p)
        hist.append(rp(p))
        if not master:
            p = rp(p)
    return np.stack(hist), np.stack(masters), m, v


def emul_sgd(p0, grads, lrs, momentum, dampening, wd, nesterov, dtype, grad_scale=None):
    """torch SGD: L2 decay, momentum buffer of the param dtype (a copy of d_p on the first step),
    Nesterov. Returns (params per step, final momentum buffer or None)."""
    r = rounder(dtype)
    p = r(np.asarray(p0, F32))
    buf = None
    hist = []
    for t, lr in enumerate(lrs, start=1):
        d = r(np.asarray(grads[t - 1], F32)) * _scale(grad_scale, t)
        if wd != 0:
            d = d + F32(wd) * p
        if momentum != 0:
            buf = r(d) if buf is None else r(buf * F32(momentum) + F32(1 - dampening) * d)
            d = d + F32(momentum) * buf if nesterov else buf
        p = r(p + F32(-lr) * d)
        hist.append(p)
    return np.stack(hist), buf


# ---- torch.optim ------------------------------------------------------------------------------

_torch = None


def torch():
    global _torch
    if _torch is None:
        import torch as t
        t.set_num_threads(1)
        _torch = t
    return _torch


def torch_run(opt_name, kwargs, inits, grads, lrs, dtype="float32", groups=None, grad_scale=None):
    """torch.optim.<opt_name> (single-tensor path, foreach=False) on tensors of `dtype`.
    groups: {name: extra options} per-parameter group overrides (e.g. weight_decay 0).
    Returns ({name: params per step as fp32}, {name: {state: per step as fp32}})."""
    T = torch()
    tdt = {"float32": T.float32, "bfloat16": T.bfloat16}[dtype]
    names = list(inits)
    ps = {n: T.nn.Parameter(T.from_numpy(np.array(inits[n], F32)).to(tdt)) for n in names}
    param_groups = [{"params": [ps[n]], **((groups or {}).get(n, {}))} for n in names]
    opt = getattr(T.optim, opt_name)(param_groups, lr=lrs[0], foreach=False, **kwargs)
    hist = {n: [] for n in names}
    shist = {n: {} for n in names}
    for s, lr in enumerate(lrs):
        for n in names:
            g = np.asarray(grads[n][s], F32)
            if grad_scale is not None:
                g = g * F32(grad_scale[s])
            ps[n].grad = T.from_numpy(np.array(g, F32)).to(tdt)
        for grp in opt.param_groups:
            grp["lr"] = lr
        opt.step()
        for n in names:
            hist[n].append(ps[n].detach().float().numpy().copy())
            for k, v in opt.state[ps[n]].items():
                if T.is_tensor(v) and v.dim() > 0:
                    shist[n].setdefault(k, []).append(v.float().numpy().copy())
    return ({n: np.stack(h) for n, h in hist.items()},
            {n: {k: np.stack(v) for k, v in st.items()} for n, st in shist.items()})
