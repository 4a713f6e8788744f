#!/usr/bin/python3
"""Rotary inverse frequencies: kktrain's (ops/rope.cpp, printed by tests/tools/rope_inv_freq)
against Hugging Face's formulas run in PyTorch (torch_reference.py: hf_inv_freq), for the
default rope and llama3 scaling (Llama 3.1 8B's and 3.2 1B's settings, and settings with many
frequencies in each band):

  default   theta^(2j/D) must be the correctly rounded fp32 power of the fp32 operands (computed
            here in float64), and within 1 ulp of PyTorch's, whose fp32 pow is a vectorized
            approximation of about 1 ulp on CPUs (and CUDA's powf on GPUs): the reference itself
            moves by an ulp between platforms, so bit equality with it cannot be asked for.
  llama3    Hugging Face's rescaling applied in PyTorch to kktrain's default frequencies must give
            kktrain's scaled frequencies bit for bit (every fp32 rounding in the reference's
            order), with every band (kept, interpolated, divided by factor) exercised.

usage: check_rope.py ROPE_INV_FREQ_BINARY
"""
import os
import subprocess
import sys

import numpy as np
import torch

import torch_reference as hf  # noqa: E402  (hf_inv_freq, hf_llama3_rescale)

CASES = [  # D, theta, scaling
    (64, 10000.0, None),
    (128, 500000.0, None),
    (256, 1e6, None),
    (128, 500000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    (64, 500000.0, {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}),
    (16, 10000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
    (256, 1e6, {"rope_type": "llama3", "factor": 3.5, "low_freq_factor": 0.7,
                "high_freq_factor": 13.0, "original_max_position_embeddings": 65536}),
]


def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in fp32 units in the last place of positive fp32 values."""
    return np.abs(a.view(np.uint32).astype(np.int64) - b.view(np.uint32).astype(np.int64))


def main() -> int:
    binary = sys.argv[1]
    failures = 0
    bands_total = np.zeros(3, dtype=int)  # frequencies kept, interpolated, divided by factor
    for D, theta, s in CASES:
        args = [binary, str(D), repr(theta)]
        if s:
            args += [repr(s["factor"]), repr(s["low_freq_factor"]), repr(s["high_freq_factor"]),
                     str(s["original_max_position_embeddings"])]
        out = subprocess.run(args, check=True, stdout=subprocess.PIPE, text=True).stdout.split()
        kk_plain = np.array([int(x, 16) for x in out[0::2]], dtype=np.uint32).view(np.float32)
        kk = np.array([int(x, 16) for x in out[1::2]], dtype=np.uint32).view(np.float32)
        # default: the correctly rounded power, and PyTorch's within 1 ulp
        expo = (torch.arange(0, D, 2, dtype=torch.int64).float() / D).numpy()
        power = np.array([np.float32(float(np.float32(theta)) ** float(e)) for e in expo],
                         dtype=np.float32)
        exact = (np.float32(1.0) / power).astype(np.float32)
        torch_plain = hf.hf_inv_freq(D, theta, None).numpy()
        ok_plain = bool(np.all(kk_plain.view(np.uint32) == exact.view(np.uint32)))
        worst = int(np.max(ulps(kk_plain, torch_plain)))
        line = (f"D={D} theta={theta}: default {len(kk_plain)} values "
                f"{'correctly rounded' if ok_plain else 'NOT the correctly rounded power'}, "
                f"{int(np.sum(ulps(kk_plain, torch_plain) > 0))} differ from PyTorch's by "
                f"<= {worst} ulp")
        failures += (not ok_plain) + (worst > 1)
        if s:
            ref = hf.hf_llama3_rescale(torch.from_numpy(kk_plain.copy()), s).numpy()
            same = bool(np.all(kk.view(np.uint32) == ref.view(np.uint32)))
            old = s["original_max_position_embeddings"]
            wavelen = 2 * np.pi / kk_plain.astype(np.float64)
            high = int(np.sum(wavelen < old / s["high_freq_factor"]))
            low = int(np.sum(wavelen > old / s["low_freq_factor"]))
            counts = np.array([high, len(kk) - high - low, low])
            bands_total += counts
            diff = "" if same else f" differ at {np.nonzero(kk != ref)[0].tolist()}"
            line += (f"; llama3 factor {s['factor']} (kept {counts[0]}, interpolated {counts[1]}, "
                     f"divided {counts[2]}): {'bitwise equal' if same else 'MISMATCH'}{diff}")
            failures += not same
        print(line)
    if np.any(bands_total == 0):
        print(f"the llama3 cases leave a band untested: {bands_total.tolist()}")
        failures += 1
    print("PASS" if failures == 0 else "FAIL")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
