#!/usr/bin/env python3
"""The same result file at every GPU count: `shardinfer run --backend cuda` over one packed set on
1, 2, 4 ... GPUs of this machine (as many as it has), with --decode cpu and --decode gpu-exact,
must write the same file bit for bit (every dataset; attributes but the run's own: command line,
time, ranks). Chunks are whole batches whatever the rank count, so only the libraries could
differ: cuDNN's and cuBLASLt's algorithms are fixed by the autotune cache, which the first run
fills. The default decoder (--decode gpu) with --decode-wait must give one file at every count
too: the hardware then takes every image it can from the first batch on, and which it can take
depends on the image and its batch alone. Without --decode-wait a slot's first batches go to the
CPU while the hardware sets up, so an image's pixels depend on which decoder took it (they differ
only in blocks the hardware clamped whole); those runs' agreement with --decode cpu is printed.

  gpu_counts.py --shardinfer BIN --model M.onnx --set SET.h5 --work DIR [--batch 64]
                [--repeat N: SET's images repeated to N first (bench/repeat_set.py)]

Exits 77 (skipped) with fewer than 2 GPUs, 1 naming the first difference."""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cluster  # noqa: E402  (same_files, mpi_env)
import e2e  # noqa: E402  (cuda_devices)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardinfer", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--set", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--repeat", type=int, default=0)
    a = ap.parse_args()
    gpus = e2e.cuda_devices()
    if gpus < 2:
        print(f"gpu_counts: {gpus} GPU(s): skipped")
        sys.exit(77)
    counts = [g for g in (1, 2, 4, 8, 16) if g <= gpus]
    os.makedirs(a.work, exist_ok=True)
    if a.repeat:
        big = os.path.join(a.work, f"set{a.repeat}.h5")
        subprocess.run([sys.executable, os.path.join(HERE, "..", "bench", "repeat_set.py"), a.set,
                        big, "--count", str(a.repeat)], check=True, capture_output=True)
        a.set = big
    cache = os.path.join(a.work, "autotune")
    threads = max(1, (os.cpu_count() or 2) // gpus)

    def run(dec, g):
        out = os.path.join(a.work, f"{dec}_g{g}.h5")
        cmd = ["mpirun", "-np", str(g), "--bind-to", "none", "-x", f"OMP_NUM_THREADS={threads}",
               a.shardinfer, "run", "--model", a.model, "--input", a.set, "--output", out,
               "--overwrite", "--backend", "cuda", "--precision", a.precision, "--batch",
               str(a.batch), "--threads", str(threads), "--progress", "none", "--decode", dec,
               "--autotune-cache", cache] + (["--decode-wait"] if dec == "gpu" else [])
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                           env=cluster.mpi_env())
        if p.returncode != 0:
            cluster.fail(f"--decode {dec} on {g} GPU(s): exit {p.returncode}\n{p.stderr[-1500:]}")
        return out

    run("cpu", 1)  # fills the autotune cache: every later run takes its algorithms
    for dec in ("cpu", "gpu-exact", "gpu"):
        first = run(dec, 1)
        for g in counts[1:]:
            cluster.same_files(first, run(dec, g))
        print(f"gpu_counts: --decode {dec}: the same file at {', '.join(map(str, counts))} GPUs")
    import h5py
    import numpy as np
    ref = run("cpu", 1)
    with h5py.File(ref) as f:
        rs, rc = f["status"][()], f["topk_class"][()]
    for g in counts:
        with h5py.File(run("auto", g)) as f:
            s, c = f["status"][()], f["topk_class"][()]
        print(f"gpu_counts: --decode auto on {g} GPU(s): statuses equal to --decode cpu's for "
              f"{100 * np.mean(s == rs):.2f}%, top-1 for {100 * np.mean(c[:, 0] == rc[:, 0]):.2f}%"
              f" of images")
    print("gpu_counts: OK")


if __name__ == "__main__":
    main()
