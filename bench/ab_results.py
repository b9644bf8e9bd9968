#!/usr/bin/env python3
"""Two builds of shardinfer, the same runs, the same files: a refactoring's proof that results
did not change. Every case runs with each binary on every rank count given, and each pair of
result files must be equal bit for bit (tests/cluster.py's comparison: every dataset, every
attribute but the volatile ones such as elapsed time and the command line). The runs of the two
binaries alternate, so a machine that drifts affects both alike.

Usage: ab_results.py --a OLD_BIN --b NEW_BIN --dir WORK [--np 1 2 3] [--backend cpu]
                     --case NAME MODEL INPUT [ARGS...] [--case ...]
  ARGS are extra `shardinfer run` arguments of that case, given as one string
  (e.g. --case raw tiny.onnx set.h5 "--post raw --writer parallel").
Prints one line per comparison and "N passed, N failed" last; exit 1 on any difference.
"""

import argparse
import os
import shlex
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import cluster  # noqa: E402  (read_all, same_datasets, the volatile attributes)
import e2e  # noqa: E402  (mpirun's environment for root and oversubscription)


def run(binary, np_, model, inp, out, extra, backend):
    cmd = ["mpirun", "-np", str(np_), "--bind-to", "none", binary, "run", "--model", model,
           "--input", inp, "--output", out, "--overwrite", "--progress", "none",
           "--backend", backend] + extra
    p = subprocess.run(cmd, env=cluster.mpi_env(), capture_output=True, text=True, timeout=600)
    return p.returncode, (p.stdout + p.stderr).strip().splitlines()[-1:] or [""]


def how_far(x, y):
    """How far two same-shaped datasets are apart: the largest difference of floats, the share of
    rows that differ otherwise ('' for other shapes)."""
    if x.shape != y.shape or x.size == 0:
        return ""
    if x.dtype.kind == "f":
        ok = ~(np.isnan(x) & np.isnan(y))
        return f" (max |diff| {np.abs(x[ok].astype(np.float64) - y[ok]).max():.3g})"
    rows = (x != y).reshape(len(x), -1).any(axis=1)
    return f" ({rows.sum()} of {len(x)} rows)"


def same(a_path, b_path):
    """'' when equal bit for bit, else what differs."""
    a, aa = cluster.read_all(a_path)
    b, ba = cluster.read_all(b_path)
    if sorted(a) != sorted(b):
        return f"datasets {sorted(a)} vs {sorted(b)}"
    for k in a:
        x, y = a[k], b[k]
        eq = x.shape == y.shape and (np.array_equal(x, y, equal_nan=True)
                                     if x.dtype.kind == "f" else np.array_equal(x, y))
        if not eq:
            return f"/{k} differs{how_far(x, y)}"
    for k in sorted(set(aa) | set(ba)):
        if k in cluster.VOLATILE:
            continue
        if k not in aa or k not in ba or str(aa[k]) != str(ba[k]):
            return f"attribute {k}: {aa.get(k)!r} vs {ba.get(k)!r}"
    return ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--np", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--case", nargs="+", action="append", required=True)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    passed = failed = 0
    for case in a.case:
        name, model, inp = case[:3]
        extra = shlex.split(" ".join(case[3:]))
        for np_ in a.np:
            outs = []
            for tag, binary in (("a", a.a), ("b", a.b)):
                out = os.path.join(a.dir, f"{name}_np{np_}_{tag}.h5")
                rc, last = run(binary, np_, model, inp, out, extra, a.backend)
                outs.append((rc, out, last[0]))
            (ra, fa, la), (rb, fb, lb) = outs
            if ra != rb:
                why = f"exit {ra} vs {rb} ({la} | {lb})"
            elif ra not in (0, 5):
                why = f"both failed with exit {ra}: {la}"
            else:
                why = same(fa, fb)
            ok = not why
            passed += ok
            failed += not ok
            print(f"{'same' if ok else 'DIFF'}: {name} -np {np_} --backend {a.backend}"
                  f"{'' if ok else ': ' + why}", flush=True)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
