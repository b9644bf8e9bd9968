#!/usr/bin/env python3
"""Makes a folder of ImageNet-like JPEGs for the decode benchmark (bench/decode_vs_pillow.py,
`shardinfer bench decode`): real photographs from Debian's python3-skimage, cut and scaled to
about 500x375 (ImageNet's most common size), seeded, so every machine benchmarks the same bytes.

Usage: make_bench_set.py --output-dir DIR [--count 512] [--seed 1] [--size-scale 1] [--no-grain]
                         [--source-dir SKIMAGE_DATA]
Writes DIR/bench_NNNNN.jpg and prints a summary (sizes, qualities, subsamplings).
--size-scale multiplies every target size (2 gives ~1000x750, where libjpeg's 1/2 DCT scaling
applies at resize 256); --no-grain leaves out the grain described below.

The mix, meant to look like ImageNet's validation set rather than like a test suite:
  - a random box of one of the colour photos at the target aspect ratio, from 80% of the target
    size (or the whole photo when it is smaller) up to the largest that fits, scaled with
    LANCZOS to the target size;
  - sizes: 70% exactly 500x375, the rest a long side of 400-640 with an aspect of 4:3 or 3:2;
    about 10% portrait (the same sizes transposed);
  - quality 75..95 (triangular, mode 92: web photos lean high); subsampling 4:2:0 for 85%,
    4:4:4 for 15%; baseline, not optimized;
  - an unsharp mask and seeded sensor-like grain (Gaussian, luma sigma 6-10 plus a third of that
    per channel): skimage's photos are small (most at most 741 pixels wide), so the boxes are
    often upscaled and far smoother than camera output; without texture the files would be
    ~45 KiB instead of ImageNet's ~110 KiB and would decode faster than real photos do (fewer
    non-zero DCT coefficients to Huffman-decode). With it they average about 90 KiB.
"""

import argparse
import io
import os
import random
import sys

import numpy as np
from PIL import Image, ImageFilter

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_demo_photos import SKIMAGE_DATA, load_rgb, photo_paths  # noqa: E402


def target_size(rng, scale):
    if rng.random() < 0.7:
        w, h = 500, 375
    else:
        w = rng.randint(400, 640)
        h = round(w * rng.choice([3 / 4, 2 / 3]))
    if rng.random() < 0.1:
        w, h = h, w
    return max(1, round(w * scale)), max(1, round(h * scale))


def cut(rng, im, w, h):
    """A random box of im with the aspect ratio w:h, scaled to w x h."""
    aspect = w / h
    bw_max = min(im.width, int(im.height * aspect))
    bw = rng.randint(min(bw_max, int(w * 0.8)), bw_max)
    bh = max(1, min(im.height, round(bw / aspect)))
    x, y = rng.randint(0, im.width - bw), rng.randint(0, im.height - bh)
    return im.crop((x, y, x + bw, y + bh)).resize((w, h), Image.LANCZOS)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output-dir", required=True)
    ap.add_argument("--count", type=int, default=512)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--size-scale", type=float, default=1.0)
    ap.add_argument("--no-grain", action="store_true")
    ap.add_argument("--source-dir", default=None,
                    help="the skimage photos' folder (default: Debian's python3-skimage data)")
    args = ap.parse_args()
    if args.count < 1 or not 0.05 <= args.size_scale <= 8:
        sys.exit("make_bench_set.py: --count must be >= 1 and --size-scale in [0.05, 8]")
    rng = random.Random(args.seed)
    nprng = np.random.default_rng(args.seed)
    photos = [load_rgb(p) for p in (photo_paths(args.source_dir or SKIMAGE_DATA))]
    os.makedirs(args.output_dir, exist_ok=True)
    sizes, subs, portrait, quals = [], {"4:2:0": 0, "4:4:4": 0}, 0, []
    for i in range(args.count):
        w, h = target_size(rng, args.size_scale)
        im = cut(rng, rng.choice(photos), w, h)
        sigma = rng.uniform(6.0, 10.0)  # drawn either way, so --no-grain keeps the same cuts
        if not args.no_grain:
            im = im.filter(ImageFilter.UnsharpMask(radius=2, percent=120, threshold=2))
            a = (np.asarray(im, dtype=np.float32) + nprng.normal(0.0, sigma, (h, w, 1)) +
                 nprng.normal(0.0, sigma / 3, (h, w, 3)))
            im = Image.fromarray(np.clip(np.rint(a), 0, 255).astype(np.uint8))
        q = int(round(rng.triangular(75, 95, 92)))
        sub = "4:4:4" if rng.random() < 0.15 else "4:2:0"
        buf = io.BytesIO()
        im.save(buf, "JPEG", quality=q, subsampling=sub)
        data = buf.getvalue()
        path = os.path.join(args.output_dir, "bench_%05d.jpg" % i)
        with open(path + ".tmp", "wb") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
        sizes.append(len(data))
        subs[sub] += 1
        portrait += h > w
        quals.append(q)
    print("make_bench_set.py: %d JPEGs in %s: mean %.1f KiB (min %.1f, max %.1f), quality %d-%d, "
          "%d 4:2:0 / %d 4:4:4, %d portrait" % (
              args.count, args.output_dir, np.mean(sizes) / 1024, min(sizes) / 1024,
              max(sizes) / 1024, min(quals), max(quals), subs["4:2:0"], subs["4:4:4"], portrait))


if __name__ == "__main__":
    main()
