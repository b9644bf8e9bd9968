#!/usr/bin/env python3
"""Cross-checks datasets/efficientnet_lite0_to_onnx.py against the real PyTorch reference, on a
machine that has torch (the project's own machines do not). It builds
EfficientNet.from_pretrained('efficientnet-lite0', weights_path=...) from the
efficientnet-lite-pytorch 0.1.0 sources in eval mode and compares it with onnxruntime on our
ONNX model:
  1. the torch.load'ed weights against our pickle-free loader (must be bit-identical);
  2. the logits of a seeded random batch and of the demo photos (preprocessed exactly as the C
     pipeline does, with the mean/std from the model's metadata): max|diff| / max|ref|;
  3. the top-5 of each photo from both.
Exits 1 if any relative error exceeds 1e-4 or a weight differs. Last run (torch 2.11.0,
onnxruntime 1.30.0): weights identical, relative error 8.7e-7 on a random batch and 6.5e-7 on
six skimage photos, identical top-5 everywhere.

Usage: torch_crosscheck.py [--pkg-dir DIR] [--onnx M.onnx] [--weights PTH] [--classes classes.txt]
                           [--photos P1.jpg ...]
  --pkg-dir   folder holding efficientnet_lite_pytorch/ (an unpacked wheel) or that package
              folder itself; without it the installed package is used
  --onnx      the converted model; default: converted in memory from --weights
  --photos    default: chelsea.png and coffee.png from python3-skimage, plus any other
              make_demo_photos.py sources present
"""

import argparse
import os
import sys

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "datasets"))
sys.path.insert(0, os.path.join(ROOT, "tests"))

TOL = 1e-4


def rel_err(ref, got):
    ref = np.asarray(ref, np.float64)
    got = np.asarray(got, np.float64)
    return float(np.max(np.abs(ref - got)) / max(np.max(np.abs(ref)), 1e-12))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pkg-dir")
    ap.add_argument("--onnx")
    ap.add_argument("--weights")
    ap.add_argument("--classes")
    ap.add_argument("--photos", nargs="*")
    ap.add_argument("--batch", type=int, default=4, help="random batch size")
    args = ap.parse_args()

    if args.pkg_dir:
        d = os.path.abspath(args.pkg_dir)
        if os.path.basename(d.rstrip("/")) == "efficientnet_lite_pytorch":
            d = os.path.dirname(d)
        sys.path.insert(0, d)

    import onnx
    import onnxruntime as ort
    import torch
    from efficientnet_lite_pytorch import EfficientNet

    from efficientnet_lite0_to_onnx import build_model, default_weights, load_legacy_torch
    from make_ref_cases import model_mean_std, preprocess

    import efficientnet_lite_pytorch
    print("reference package: %s" % os.path.dirname(efficientnet_lite_pytorch.__file__))
    print("torch %s, onnxruntime %s" % (torch.__version__, ort.__version__))

    weights = args.weights or default_weights()
    ours = load_legacy_torch(weights)
    if args.onnx:
        model_proto = onnx.load(args.onnx)
    else:
        model_proto = build_model(ours)
    mean, std = model_mean_std(model_proto)
    print("ONNX: %s; preprocessing mean %s std %s"
          % (args.onnx or "converted in memory", mean, std))

    # The reference exactly as its README says to build it. from_pretrained calls torch.load
    # without weights_only; newer torch defaults to weights_only=True, which still accepts a
    # plain legacy state_dict (OrderedDict of tensors).
    torch.set_grad_enabled(False)
    ref_model = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=weights)
    ref_model.eval()

    failures = []

    # 1. Weights: torch.load vs our pickle+numpy loader.
    sd = ref_model.state_dict()
    missing = sorted(set(sd) ^ set(ours))
    if missing:
        failures.append("state_dict keys differ: %s" % missing[:8])
    for k, v in sd.items():
        if k in ours and not np.array_equal(v.cpu().numpy(), ours[k]):
            failures.append("weight %s differs between torch.load and our loader" % k)
    print("weights: %d tensors compared, %s" % (len(sd), "identical" if not failures else "DIFFERENT"))

    sess = ort.InferenceSession(model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    in_name = sess.get_inputs()[0].name

    def both(batch):
        ref = ref_model(torch.from_numpy(batch)).cpu().numpy()
        got = sess.run(None, {in_name: batch})[0]
        return ref, got

    # 2a. Random batch: normal data in the range of normalised pixels.
    rng = np.random.default_rng(2024)
    batch = rng.standard_normal((args.batch, 3, 224, 224)).astype(np.float32)
    ref, got = both(batch)
    e = rel_err(ref, got)
    print("random batch %s: max|diff| / max|ref| = %.3g (max|ref| %.3g)"
          % (batch.shape, e, float(np.max(np.abs(ref)))))
    if e > TOL:
        failures.append("random batch: relative error %.3g > %g" % (e, TOL))

    # 2b. Photos.
    photos = args.photos
    if photos is None:
        try:
            from make_demo_photos import photo_paths
            photos = photo_paths()
        except SystemExit as ex:
            print("no photos: %s" % ex)
            photos = []
    names = None
    if args.classes:
        with open(args.classes, encoding="utf-8") as f:
            names = f.read().splitlines()
    if photos:
        batch = np.stack([preprocess(p, mean, std) for p in photos])
        ref, got = both(batch)
        e = rel_err(ref, got)
        print("photos %s: max|diff| / max|ref| = %.3g" % (batch.shape, e))
        if e > TOL:
            failures.append("photos: relative error %.3g > %g" % (e, TOL))

        def top5(logits):
            p = np.exp(logits - logits.max())
            p /= p.sum()
            idx = np.argsort(-p)[:5]
            return ", ".join("%d%s %.3f" % (i, " " + names[i] if names else "", p[i]) for i in idx)

        for k, path in enumerate(photos):
            print("%s\n  torch: %s\n  ort:   %s" % (os.path.basename(path), top5(ref[k]), top5(got[k])))
            if np.argmax(ref[k]) != np.argmax(got[k]):
                failures.append("%s: top-1 differs (torch %d, ort %d)"
                                % (path, np.argmax(ref[k]), np.argmax(got[k])))

    if failures:
        for f in failures:
            print("FAIL: " + f)
        sys.exit(1)
    print("OK: the ONNX model matches the PyTorch reference within %g" % TOL)


if __name__ == "__main__":
    main()
