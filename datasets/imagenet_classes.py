#!/usr/bin/env python3
"""Writes the 1000 ImageNet-1k class names in model output order (index 0 first), one per line,
for shardinfer's --classes option and the demo. The names come from the `timm` wheel on PyPI,
which carries the synset list in class-index order (timm/data/_info/imagenet_synsets.txt) and the
WordNet lemmas of each synset (imagenet_synset_to_lemma.txt). The wheel is only downloaded
(pip download --no-deps) and read with zipfile: timm is never installed, so torch is not needed.

Usage: imagenet_classes.py --output classes.txt [--cache-dir DIR]
The wheel is kept in the cache dir (default ~/.cache/shardinfer), so a second run is offline.
"""

import argparse
import glob
import os
import subprocess
import sys
import zipfile

TIMM_VERSION = "1.0.15"  # pinned: the files are stable, but the output must not drift
SYNSETS = "timm/data/_info/imagenet_synsets.txt"
LEMMAS = "timm/data/_info/imagenet_synset_to_lemma.txt"
MAX_SYNONYMS = 2  # "giant panda, panda, panda bear, coon bear, Ailuropoda..." -> "giant panda, panda"


def default_cache():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "shardinfer")


def timm_wheel(cache_dir):
    pattern = os.path.join(cache_dir, "timm-%s-*.whl" % TIMM_VERSION)
    found = sorted(glob.glob(pattern))
    if found:
        return found[0]
    os.makedirs(cache_dir, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-q", "timm==%s" % TIMM_VERSION, "-d", cache_dir]
    print("imagenet_classes: fetching timm %s wheel into %s" % (TIMM_VERSION, cache_dir),
          file=sys.stderr)
    r = subprocess.run(cmd)
    found = sorted(glob.glob(pattern))
    if r.returncode != 0 or not found:
        sys.exit("imagenet_classes: could not download timm==%s (%s)" % (TIMM_VERSION, " ".join(cmd)))
    return found[0]


def short_name(lemma):
    """Keeps the first synonyms: enough to recognise the class ("tabby, tabby cat") without the
    long tails of Latin names. WordNet's own ambiguity stays: 134 (the bird) and 517 (the machine)
    are both just "crane"."""
    parts = [p.strip() for p in lemma.split(",") if p.strip()]
    return ", ".join(parts[:MAX_SYNONYMS])


def class_names(wheel):
    with zipfile.ZipFile(wheel) as z:
        synsets = z.read(SYNSETS).decode("utf-8").split()
        lemma_of = {}
        for line in z.read(LEMMAS).decode("utf-8").splitlines():
            if "\t" in line:
                wnid, lemma = line.split("\t", 1)
                lemma_of[wnid] = lemma
    if len(synsets) != 1000:
        sys.exit("imagenet_classes: %s has %d synsets, expected 1000" % (SYNSETS, len(synsets)))
    missing = [s for s in synsets if s not in lemma_of]
    if missing:
        sys.exit("imagenet_classes: no lemma for %s" % missing[:5])
    return [short_name(lemma_of[s]) for s in synsets]


def check(names):
    """Spot checks that catch a wrong file or a shifted order."""
    expect = {0: "tench", 281: "tabby", 285: "Egyptian cat", 504: "coffee mug", 967: "espresso",
              968: "cup", 999: "toilet tissue"}
    for i, want in expect.items():
        if want not in names[i]:
            sys.exit("imagenet_classes: index %d is %r, expected it to contain %r" % (i, names[i], want))
    if any("\n" in n or not n for n in names):
        sys.exit("imagenet_classes: empty or multi-line class name")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output", required=True)
    ap.add_argument("--cache-dir", default=default_cache())
    args = ap.parse_args()
    names = class_names(timm_wheel(args.cache_dir))
    check(names)
    tmp = args.output + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(names) + "\n")
    os.replace(tmp, args.output)
    print("wrote %s: %d classes (281 %r, 967 %r)" % (args.output, len(names), names[281], names[967]))


if __name__ == "__main__":
    main()
