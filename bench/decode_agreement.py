#!/usr/bin/env python3
"""How far `--decode gpu` and `--decode gpu-exact` (nvJPEG's hardware decoder: its RGB with the
chroma recovered, or its planes converted as libjpeg-turbo does) are from `--decode cpu` (libjpeg-turbo), on one GPU
(issue 16, item 3): the same folder of JPEGs packed once, classified with each decoder by the
same model, and the crops themselves compared on the first --crops photos (an Identity model at
the model's input size under --post raw, mean 0 and std 1, so the raw output is the crop in
0..1).

  decode_agreement.py --shardinfer BIN --model M.onnx --images DIR --work W [--crops 400]

Prints statuses equal, top-1 agreement, top-5 sets equal, top-1 within the other's top-5, and
the crops' mean and max |diff| (in 0..255 units), per-image median and worst mean |diff|, and
the share of values that are equal. Both runs fix the CPU's share of the hardware's images at
0 (--decode-cpu-share 0): every image the hardware can take is decoded there.
"""

import argparse
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np


def sh(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"decode_agreement: {' '.join(cmd)}: exit {p.returncode}\n{p.stderr[-2000:]}")
    return p


def run(a, model, sset, out, dec, extra):
    hw = [] if dec == "cpu" else ["--decode-cpu-share", "0"]
    p = sh([a.shardinfer, "run", "--model", model, "--input", sset, "--output", out,
            "--overwrite", "--backend", "cuda", "--decode", dec, "--progress", "none",
            "--batch", "64"] + extra + hw)
    on_gpu = [ln for ln in p.stdout.splitlines() if "decoded by the GPU" in ln]
    return on_gpu[0].strip() if on_gpu else ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardinfer", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--images", required=True, help="a folder of JPEGs")
    ap.add_argument("--work", required=True)
    ap.add_argument("--crops", type=int, default=400)
    a = ap.parse_args()
    import onnx
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
    from make_e2e_set import make_identity_model
    os.makedirs(a.work, exist_ok=True)
    sset = os.path.join(a.work, "set.h5")
    sh([a.shardinfer, "pack", a.images, "--output", sset, "--overwrite"])
    r = {}
    for dec in ("cpu", "gpu", "gpu-exact"):
        out = os.path.join(a.work, f"classify_{dec}.h5")
        note = run(a, a.model, sset, out, dec, ["--topk", "5"])
        with h5py.File(out, "r") as f:
            r[dec] = {k: f[k][()] for k in ("status", "topk_class")}
        if note:
            print(f"decode_agreement: {note}")
    for dec in ("gpu", "gpu-exact"):
        st_eq = r["cpu"]["status"] == r[dec]["status"]
        ok = (r["cpu"]["status"] == 0) & (r[dec]["status"] == 0)
        c, g = r["cpu"]["topk_class"][ok], r[dec]["topk_class"][ok]
        top1 = np.mean(c[:, 0] == g[:, 0])
        sets = np.mean([set(x) == set(y) for x, y in zip(c.tolist(), g.tolist())])
        within = np.mean([x[0] in y and y[0] in x for x, y in zip(c.tolist(), g.tolist())])
        print(f"decode_agreement: --decode {dec}: {len(st_eq)} images, statuses equal "
              f"{st_eq.mean() * 100:.2f}%; on the {ok.sum()} ok: top-1 agreement "
              f"{top1 * 100:.2f}%, top-5 sets equal {sets * 100:.2f}%, each top-1 within the "
              f"other's top-5 {within * 100:.2f}%")

    # the crops: the first --crops images, through an Identity model of the model's input size
    m = onnx.load(a.model, load_external_data=False)
    dims = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    # the model's preprocessing (resize, interpolation), but mean 0 and std 1
    meta = {p.key: p.value for p in m.metadata_props if p.key not in ("mean", "std")}
    ident = os.path.join(a.work, "pixels.onnx")
    make_identity_model(ident, dims[2], dims[3], meta or None)
    sub = os.path.join(a.work, "crops_img")
    shutil.rmtree(sub, ignore_errors=True)
    os.makedirs(sub)
    for name in sorted(os.listdir(a.images))[:a.crops]:
        shutil.copy(os.path.join(a.images, name), sub)
    cset = os.path.join(a.work, "crops.h5")
    sh([a.shardinfer, "pack", sub, "--output", cset, "--overwrite"])
    px = {}
    for dec in ("cpu", "gpu", "gpu-exact"):
        out = os.path.join(a.work, f"crops_{dec}.h5")
        run(a, ident, cset, out, dec, ["--post", "raw", "--mean", "0,0,0", "--std", "1,1,1"])
        with h5py.File(out, "r") as f:
            px[dec] = f["raw/pixels"][()].astype(np.float64) * 255.0
    for dec in ("gpu", "gpu-exact"):
        d = np.abs(px["cpu"] - px[dec])
        ok = ~np.isnan(d).reshape(len(d), -1).any(axis=1)
        d = d[ok]
        per = d.reshape(len(d), -1).mean(axis=1)
        print(f"decode_agreement: --decode {dec}: crops of {len(d)} images ({dims[2]}x{dims[3]}): "
              f"mean |diff| {d.mean():.3f}, max {d.max():.0f} (of 255); per image median "
              f"{np.median(per):.3f}, worst {per.max():.3f}; values equal "
              f"{np.mean(d < 0.5) * 100:.1f}%")


if __name__ == "__main__":
    main()
