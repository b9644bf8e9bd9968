#!/usr/bin/env python3
"""Writes the real photographs that Debian's python3-skimage ships as RGB JPEGs (quality 90), so
the demo and the end-to-end tests have genuine camera images to classify without any download.
Synthetic patterns, grayscale images and palette/alpha test files are left out on purpose: they
say nothing about whether the classifier is right.

Usage: make_demo_photos.py --output-dir DIR [--source-dir SKIMAGE_DATA]
Writes DIR/<name>.jpg (e.g. chelsea.jpg from chelsea.png) and prints one line per file.
"""

import argparse
import os
import sys

from PIL import Image

SKIMAGE_DATA = "/usr/lib/python3/dist-packages/skimage/data"

# The colour photographs among skimage's data files (checked by eye and by mode == RGB):
# chelsea (a cat), coffee (a cup of espresso), astronaut (Eileen Collins), rocket (a launch),
# motorcycle_left/right (a stereo pair), hubble_deep_field (a telescope image), retina (a fundus
# photograph), ihc (a stained tissue micrograph). Excluded: camera/coins/moon/page/text/brick/
# grass/gravel/cell/clock_motion (grayscale), color/logo/phantom/chessboard/horse/block/palette
# files (synthetic), truncated.jpg (a deliberately broken test file).
PHOTOS = [
    "chelsea.png",
    "coffee.png",
    "astronaut.png",
    "rocket.jpg",
    "motorcycle_left.png",
    "motorcycle_right.png",
    "hubble_deep_field.jpg",
    "retina.jpg",
    "ihc.png",
]

QUALITY = 90


def photo_paths(source_dir=SKIMAGE_DATA):
    """Full paths of the source photos; exits with a clear message when skimage is missing."""
    paths = [os.path.join(source_dir, p) for p in PHOTOS]
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        sys.exit("missing skimage photos (apt-get install python3-skimage): %s" % ", ".join(missing))
    return paths


def load_rgb(path):
    """Opens a source photo as 8-bit RGB; refuses anything that is not a colour image so that a
    changed skimage release cannot slip a grayscale file into the set unnoticed."""
    with Image.open(path) as im:
        if im.mode != "RGB":
            raise SystemExit("%s: mode %s, expected an RGB photograph" % (path, im.mode))
        return im.convert("RGB")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output-dir", required=True)
    ap.add_argument("--source-dir", default=SKIMAGE_DATA)
    args = ap.parse_args()
    os.makedirs(args.output_dir, exist_ok=True)
    for src in photo_paths(args.source_dir):
        im = load_rgb(src)
        name = os.path.splitext(os.path.basename(src))[0] + ".jpg"
        dst = os.path.join(args.output_dir, name)
        tmp = dst + ".tmp"
        # 4:2:0 subsampling and no progressive mode: the most common JPEG a camera or web page
        # produces, and what the decoder path is tuned for.
        im.save(tmp, "JPEG", quality=QUALITY, subsampling="4:2:0", optimize=False)
        os.replace(tmp, dst)
        print("%s  %dx%d  %d bytes" % (dst, im.width, im.height, os.path.getsize(dst)))


if __name__ == "__main__":
    main()
