#!/usr/bin/env python3
"""shardinfer against the PyTorch pipeline a user would write (bench/torch_peer.py), in one
command: the same machine, the same image set, the same network (torchvision's architecture
with seeded weights, or a transformer of tests/export_models.py, exported to ONNX for
shardinfer), the same number of ranks. Prints each one's images/s (wall time of the whole
command, start-up included), the ratio, and how often their top-1 classes agree (--post
classify) or how close their embeddings are (--post embed: cosine similarity) on the images
both scored.

  bench/peer_harness.py --set SET.h5 --arch resnet50 --ranks G [--batch 256] [--workers W]
      [--shardinfer build/shardinfer] [--torch-python .venv-torch/bin/python] [--exact]
      [--work DIR] [--device auto|cuda|cpu] [--threads T] [--si-args '--backend cuda']
      [--post embed --embed-dtype float16 --interpolation bicubic --resize 224 --mean .. --std ..]

--exact gives shardinfer --exact-preprocess (full-size decode, bit-exact with torchvision on
Pillow), so that the comparison of classes is exact too; without it shardinfer decodes large
photos at 1/2, 1/4 or 1/8 scale, as it does by default.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run(cmd, env=None, timeout=3600):
    print("$", " ".join(cmd), flush=True)
    t = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    wall = time.time() - t
    if p.returncode != 0:
        sys.stdout.write(p.stdout[-3000:])
        sys.stdout.write(p.stderr[-3000:])
        sys.exit(f"peer_harness: exit {p.returncode}: {' '.join(cmd)}")
    return p, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--set", required=True)
    ap.add_argument("--arch", default="resnet50")
    ap.add_argument("--narrow", action="store_true",
                    help="a 768-wide transformer 384 wide, as tests/export_models.py --narrow")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", type=int)
    ap.add_argument("--threads", type=int, help="shardinfer threads per rank (default: its own)")
    ap.add_argument("--shardinfer", default=os.path.join(ROOT, "build", "shardinfer"))
    ap.add_argument("--torch-python", default=sys.executable)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("--si-args", default="",
                    help="more shardinfer run options, e.g. '--backend cuda --precision fp16'")
    ap.add_argument("--work", default="/tmp/peer_harness")
    ap.add_argument("--min-agreement", type=float, default=None,
                    help="exit 1 when top-1 agreement (percent) or equal statuses fall below it")
    ap.add_argument("--post", choices=["classify", "embed"], default="classify")
    ap.add_argument("--embed-dtype", choices=["float32", "float16"], default="float32")
    ap.add_argument("--interpolation", choices=["bilinear", "bicubic"], default="bilinear")
    ap.add_argument("--resize", type=int, default=256, help="shorter side before the crop")
    ap.add_argument("--mean", default="0.485,0.456,0.406")
    ap.add_argument("--std", default="0.229,0.224,0.225")
    ap.add_argument("--min-cosine", type=float, default=None,
                    help="--post embed: exit 1 when an image's cosine similarity falls below it")
    a = ap.parse_args()
    pre = ["--interpolation", a.interpolation, "--resize", str(a.resize), "--mean", a.mean,
           "--std", a.std]
    post = ["--post", a.post] + (["--embed-dtype", a.embed_dtype] if a.post == "embed" else [])
    os.makedirs(a.work, exist_ok=True)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    peer = os.path.join(HERE, "torch_peer.py")
    narrow = ["--narrow"] if a.narrow else []
    onnx_path = os.path.join(a.work, f"{a.arch}{'.narrow' if a.narrow else ''}.onnx")
    if not os.path.exists(onnx_path):
        run([a.torch_python, peer, "--arch", a.arch, *narrow, "--export-onnx", onnx_path], env)
    with h5py.File(a.set, "r") as f:
        n = len(f["/images/offsets"]) - 1

    torchrun = os.path.join(os.path.dirname(a.torch_python), "torchrun")
    if not os.path.exists(torchrun):
        torchrun = shutil.which("torchrun") or "torchrun"
    t_out = os.path.join(a.work, "torch.h5")
    cmd = [torchrun, "--standalone", f"--nproc-per-node={a.ranks}", peer, "--arch", a.arch,
           *narrow, "--input", a.set, "--output", t_out, "--batch", str(a.batch), "--device", a.device,
           *pre, *post]
    if a.workers is not None:
        cmd += ["--workers", str(a.workers)]
    p, t_wall = run(cmd, env)
    print(p.stdout.strip().splitlines()[-1])

    s_out = os.path.join(a.work, "shardinfer.h5")
    cmd = ["mpirun", "-np", str(a.ranks), "--bind-to", "none", a.shardinfer, "run", "--model",
           onnx_path, "--input", a.set, "--output", s_out, "--batch", str(a.batch), "--overwrite",
           "--progress", "none", *pre, *post]
    if a.exact:
        cmd.append("--exact-preprocess")
    if a.threads:
        cmd += ["--threads", str(a.threads)]
    cmd += a.si_args.split()
    p, s_wall = run(cmd, env)
    print(next(l for l in p.stdout.splitlines() if l.startswith("shardinfer:")))

    with h5py.File(t_out, "r") as f, h5py.File(s_out, "r") as g:
        ts, ss = f["status"][:], g["status"][:]
        both = (ts == 0) & (ss == 0)
        if a.post == "embed":  # both L2-normalised: the dot product is the cosine
            te = f["embedding"][:].astype(np.float64)[both]
            se = g["embedding"][:].astype(np.float64)[both]
            cos = np.sum(te * se, axis=1)
            agree = float(np.mean(cos >= 0.99)) if both.any() else float("nan")
        else:
            tc, sc = f["topk_class"][:, 0], g["topk_class"][:, 0]
            agree = float(np.mean(tc[both] == sc[both])) if both.any() else float("nan")
    print(f"\n{'':22}{'images/s':>10}{'wall s':>9}")
    print(f"{'PyTorch peer':22}{n / t_wall:10.1f}{t_wall:9.2f}")
    print(f"{'shardinfer':22}{n / s_wall:10.1f}{s_wall:9.2f}")
    what = (f"embeddings with cosine >= 0.99: {100 * agree:.2f}% (min {cos.min():.5f}, mean "
            f"{cos.mean():.5f})" if a.post == "embed" and both.any() else
            f"top-1 agreement {100 * agree:.2f}%")
    print(f"shardinfer / PyTorch = {t_wall / s_wall:.2f}x; {n} images, {a.ranks} rank(s); "
          f"{what} on the {int(both.sum())} images both scored; "
          f"statuses equal on {100 * float(np.mean(ts == ss)):.1f}%")
    if a.min_cosine is not None and a.post == "embed" and not (both.any() and
                                                               cos.min() >= a.min_cosine):
        sys.exit(f"peer_harness: an embedding's cosine similarity is below {a.min_cosine}")
    same_status = 100 * float(np.mean(ts == ss))
    if a.min_agreement is not None and not (100 * agree >= a.min_agreement and
                                            same_status >= a.min_agreement):
        sys.exit(f"peer_harness: agreement below {a.min_agreement}%")


if __name__ == "__main__":
    main()
