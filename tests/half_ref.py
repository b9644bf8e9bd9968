#!/usr/bin/env python3
"""Reference data for tests/test_half.c: float32 values and numpy's astype(float16) of them, the
conversion --embed-dtype float16 must reproduce bit for bit (round to nearest, ties to even).

Usage: half_ref.py gen DIR   writes DIR/half_in.npy (float32) and DIR/half_want.npy (float16):
  every half as a float32 (the round trip), the midpoint of every pair of neighbouring finite
  halves and the float32 on either side of it (the ties and the values that must not round as
  ties), the overflow and underflow edges, float32 subnormals, a million random float32 bit
  patterns (every exponent) and a million values in [-1, 1] as unit vectors hold them.
"""

import os
import sys

import numpy as np


def inputs():
    rng = np.random.default_rng(20240611)
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    halves = every.astype(np.float32)
    fin = np.sort(np.unique(np.abs(every[np.isfinite(every)]).astype(np.float64)))
    mid = ((fin[:-1] + fin[1:]) / 2).astype(np.float32)  # exact: halves have 11 bits
    assert np.all(mid.astype(np.float64) == (fin[:-1] + fin[1:]) / 2)
    ties = np.concatenate([mid, np.nextafter(mid, np.float32(np.inf)),
                           np.nextafter(mid, np.float32(0))])
    edges = np.array([65504, 65519.99, 65520, 65520.01, 65536, 1e5, 3.4e38, np.inf, 2.0 ** -24,
                      2.0 ** -25, 2.0 ** -25 * 1.0000001, 2.0 ** -26, 1e-30, 0.0, 6.1e-5,
                      2.0 ** -14, 2.0 ** -14 * (1 - 2.0 ** -12)], np.float32)
    edges = np.concatenate([edges, np.nextafter(edges, np.float32(0)),
                            np.nextafter(edges, np.float32(np.inf))])
    sub = np.array([1, 2, 0x7fffff, 0x400000], np.uint32).view(np.float32)
    bits = rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(np.float32)
    unit = rng.uniform(-1, 1, 1 << 20).astype(np.float32)
    unit[::7] *= np.float32(1e-3)  # small components, as in a wide embedding
    x = np.concatenate([halves, ties, -ties, edges, -edges, sub, -sub, bits, unit])
    return x.astype(np.float32)


def gen(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    x = inputs()
    with np.errstate(over="ignore", invalid="ignore"):
        want = x.astype(np.float16)
    np.save(os.path.join(out_dir, "half_in.npy"), x)
    np.save(os.path.join(out_dir, "half_want.npy"), want)
    print(f"half_ref: {len(x)} values (numpy {np.__version__}) in {out_dir}")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "gen":
        sys.exit(__doc__)
    gen(sys.argv[2])
