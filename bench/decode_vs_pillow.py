#!/usr/bin/env python3
"""CPU preprocessing throughput, shardinfer against Pillow, on the same JPEG bytes.

Usage: decode_vs_pillow.py SET [--cores 1,2] [--seconds 5] [--resize 256] [--crop 224]
                           [--shardinfer build/shardinfer] [--repeat 1]
SET is a folder of JPEGs (packed into a temporary set with `shardinfer pack`) or a packed .h5.

Work per image, on bytes already in memory (no I/O in the timing):
  Pillow         Image.open(BytesIO) -> convert("RGB") -> resize shorter side to --resize
                 (torchvision's size rule, BILINEAR) -> center crop (torchvision's rounding) ->
                 numpy array; P processes for P cores, every worker holding all the bytes, started
                 together at a barrier, each running for --seconds (round robin over the set).
  Pillow+draft   the same after im.draft("RGB", resized size): libjpeg's DCT-domain scaling by
                 1/2, 1/4 or 1/8 when the image is large enough (none for 500x375 at 256).
  shardinfer     `shardinfer bench decode SET.h5 --threads P [--exact]`: the same work in C with
                 an OpenMP loop over images, exact (bit-exact with Pillow) and scaled.
Before timing, every Pillow crop is compared with shardinfer's exact crops (a position-weighted
sum per image, printed by the C benchmark as digest=), so the two really do the same work.
Prints a table: img/s per implementation and core count, per-core ratios against Pillow, and
scaling efficiency from 1 core to P cores (img/s at P / (P * img/s at 1)).
"""

import argparse
import io
import multiprocessing as mp
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def resized_size(w, h, size):
    """torchvision's _compute_resized_output_size for an int size."""
    if w <= h:
        return size, int(size * h / w)
    return int(size * w / h), size


def preprocess(data, resize, crop, draft):
    im = Image.open(io.BytesIO(data))
    if draft:
        im.draft("RGB", resized_size(im.width, im.height, resize))
    im = im.convert("RGB")
    nw, nh = resized_size(im.width, im.height, resize)
    im = im.resize((nw, nh), Image.BILINEAR)
    top, left = int(round((nh - crop) / 2.0)), int(round((nw - crop) / 2.0))
    return np.asarray(im.crop((left, top, left + crop, top + crop)))


def crop_digest(a):
    """The C benchmark's crop_digest: sum of byte[k] * (k + 1) mod 2^64."""
    flat = a.reshape(-1).astype(np.uint64)
    return int((flat * np.arange(1, flat.size + 1, dtype=np.uint64)).sum(dtype=np.uint64))


def read_set(h5path):
    import h5py

    with h5py.File(h5path, "r") as f:
        data = f["images/data"][:].tobytes()
        off = f["images/offsets"][:]
    return [data[off[i]:off[i + 1]] for i in range(len(off) - 1)]


_BLOBS = None


def _worker(args):
    """One Pillow process: waits at the barrier, then preprocesses round robin for `seconds`."""
    barrier, seconds, resize, crop, draft = args
    blobs = _BLOBS  # preloaded in this process's memory (inherited through fork)
    for b in blobs[:4]:  # warm caches and Pillow's lazy imports outside the timing
        preprocess(b, resize, crop, draft)
    barrier.wait()
    t0 = time.perf_counter()
    n, i = 0, 0
    while True:
        preprocess(blobs[i], resize, crop, draft)
        n += 1
        i = (i + 1) % len(blobs)
        t = time.perf_counter()
        if t - t0 >= seconds:
            return n, t - t0


def pillow_rate(procs, seconds, resize, crop, draft):
    ctx = mp.get_context("fork")
    barrier = ctx.Manager().Barrier(procs)
    with ctx.Pool(procs) as pool:
        res = pool.map(_worker, [(barrier, seconds, resize, crop, draft)] * procs, chunksize=1)
    return sum(n / dt for n, dt in res)


def shardinfer_rates(exe, h5, cores, seconds, resize, crop, exact):
    cmd = [exe, "bench", "decode", h5, "--threads", ",".join(map(str, cores)), "--seconds",
           str(seconds), "--resize", str(resize), "--crop", str(crop)] + (["--exact"] if exact
                                                                         else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rates, digest, extra = {}, None, []
    for line in out.splitlines():
        m = re.search(r"threads=(\d+) images_per_s=([\d.]+).* failed=(\d+) digest=(\w+)", line)
        if m:
            rates[int(m[1])] = float(m[2])
            digest = int(m[4], 16)
            if int(m[3]):
                sys.exit(f"shardinfer failed on {m[3]} images: {line}")
        elif "scaled-vs-exact" in line:
            extra.append(line.split("bench-decode: ")[1])
    return rates, digest, " ".join(cmd), extra


def main():
    global _BLOBS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("set")
    ap.add_argument("--cores", default=None, help="comma list; default 1..all cores")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--resize", type=int, default=256)
    ap.add_argument("--crop", type=int, default=224)
    ap.add_argument("--shardinfer", default=os.path.join(ROOT, "build", "shardinfer"))
    ap.add_argument("--repeat", type=int, default=1,
                    help="run everything this many times and keep each cell's best")
    args = ap.parse_args()
    ncpu = os.cpu_count() or 1
    cores = ([int(c) for c in args.cores.split(",")] if args.cores else
             list(range(1, ncpu + 1)))

    tmp = None
    h5 = args.set
    if os.path.isdir(args.set):
        tmp = tempfile.TemporaryDirectory()
        h5 = os.path.join(tmp.name, "set.h5")
        subprocess.run([args.shardinfer, "pack", args.set, "--output", h5], check=True,
                       capture_output=True)
    _BLOBS = read_set(h5)
    n = len(_BLOBS)
    print(f"set: {args.set}: {n} images, mean {np.mean([len(b) for b in _BLOBS]) / 1024:.1f} KiB;"
          f" resize {args.resize}, crop {args.crop}; cores {cores}; {args.seconds:g} s per cell;"
          f" Pillow {Image.__version__}")

    # the same work: Pillow's crops against shardinfer's exact ones
    t = time.perf_counter()
    want = 0
    for i, b in enumerate(_BLOBS):
        want = (want + (i + 1) * crop_digest(preprocess(b, args.resize, args.crop, False))) % 2**64
    print(f"Pillow reference pass: {n / (time.perf_counter() - t):.1f} img/s (one process, "
          f"includes the digest)")

    best = {}
    cmds = []
    for rep in range(args.repeat):
        cell = {}
        for exact in (True, False):
            rates, digest, cmd, extra = shardinfer_rates(
                args.shardinfer, h5, cores, args.seconds, args.resize, args.crop, exact)
            if rep == 0:
                cmds.append(cmd)
                for e in extra:
                    print("shardinfer " + e)
            if exact and digest != want:
                sys.exit(f"shardinfer's exact crops differ from Pillow's (digest {digest:016x}, "
                         f"Pillow {want:016x})")
            cell["si_exact" if exact else "si_scaled"] = rates
        for draft in (False, True):
            cell["pil_draft" if draft else "pil"] = {
                p: pillow_rate(p, args.seconds, args.resize, args.crop, draft) for p in cores}
        for k, v in cell.items():
            for p, r in v.items():
                best[k, p] = max(best.get((k, p), 0.0), r)
    print("shardinfer's exact crops == Pillow's on all %d images (digest %016x)" % (n, want))
    for c in cmds:
        print("ran: " + c)

    hdr = ("cores", "Pillow", "Pillow+draft", "si exact", "si scaled", "exact/Pillow",
           "scaled/Pillow", "scaled/Pil+draft")
    print("\nimg/s (best of %d)" % args.repeat)
    print("%5s %9s %13s %9s %10s %13s %14s %17s" % hdr)
    for p in cores:
        pil, pdr = best["pil", p], best["pil_draft", p]
        se, ss = best["si_exact", p], best["si_scaled", p]
        print("%5d %9.1f %13.1f %9.1f %10.1f %12.2fx %13.2fx %16.2fx" % (
            p, pil, pdr, se, ss, se / pil, ss / pil, ss / pdr))
    print("\nper core (img/s / cores)")
    for p in cores:
        print("%5d %9.1f %13.1f %9.1f %10.1f" % (
            p, best["pil", p] / p, best["pil_draft", p] / p, best["si_exact", p] / p,
            best["si_scaled", p] / p))
    if len(cores) > 1 and cores[0] == 1:
        print("\nscaling efficiency 1 -> P cores: img/s at P / (P x img/s at 1)")
        for p in cores[1:]:
            print("%5d %8.0f%% %12.0f%% %8.0f%% %9.0f%%" % tuple(
                [p] + [100 * best[k, p] / (p * best[k, 1])
                       for k in ("pil", "pil_draft", "si_exact", "si_scaled")]))
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
