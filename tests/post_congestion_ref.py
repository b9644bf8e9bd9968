"""Reference cases for src/post/congestion.c, written once as a fixture.

usage: post_congestion_ref.py gen DIR

For each case DIR/NAME.* holds the float32 map, a uint8 label map (this script's port of the C
sampling and k-means, same generator, so labels should match exactly), cv2.Canny(labels, 100, 200) and cv2.GaussianBlur of those
edges (float64 and uint8, 71x71, sigma 7, BORDER_REPLICATE), plus this script's whole score.
DIR/cases.txt lists "name h w score map_mean has_cv". OpenCV comes from opencv-python-headless in
/tmp/cvlib (pip install --target) or the environment; without it the Canny/blur stages fall back to
numpy for the blur only and the C test skips the Canny comparison (has_cv = 0).
"""
import math
import os
import sys

import numpy as np

for extra in ("/tmp/cvlib",):
    if os.path.isdir(extra):
        sys.path.append(extra)
try:
    import cv2

    cv2.setUseOptimized(False)  # the plain C++ paths; IPP/SIMD must agree anyway
except ImportError:
    cv2 = None

K, FRACTION, LO, HI, KSIZE, SIGMA = 4, 0.05, 100, 200, 71, 7.0


def normalize(m):
    lo, hi = float(m.min()), float(m.max())
    scale = 255.0 / (hi - lo) if hi > lo else 0.0
    return np.clip(np.floor((m.astype(np.float64) - lo) * scale), 0, 255).astype(np.uint8)


M64 = (1 << 64) - 1


class SplitMix64:
    """The C module's generator, so that this script draws the same sample and init."""

    def __init__(self, seed):
        self.s = seed & M64

    def uniform01(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & M64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return ((z ^ (z >> 31)) >> 11) * (1.0 / 9007199254740992.0)


def pick_bin(wgt, r):
    last = -1
    for v in range(256):
        if wgt[v] <= 0.0:
            continue
        last = v
        if r < wgt[v]:
            return v
        r -= wgt[v]
    return last


def labels_of(u8, seed=12345):
    """Selection sampling, k-means++ and Lloyd on the sample's histogram, in the C order of
    operations, so the labels (and the whole score) should match the C module exactly."""
    flat = u8.ravel().tolist()
    n = len(flat)
    ns = min(max(int(math.floor(FRACTION * n + 0.5)), min(K, n)), n)
    rng = SplitMix64(seed)
    hist = [0] * 256
    taken = 0
    for i in range(n):
        if taken >= ns:
            break
        if (n - i) * rng.uniform01() < (ns - taken):
            hist[flat[i]] += 1
            taken += 1
    wgt = [float(c) for c in hist]
    centers = [float(pick_bin(wgt, rng.uniform01() * sum(wgt)))]
    for c in range(1, K):
        wsum = 0.0
        for v in range(256):
            best = min((v - x) * (v - x) for x in centers)
            wgt[v] = hist[v] * best if hist[v] else 0.0
            wsum += wgt[v]
        centers.append(float(pick_bin(wgt, rng.uniform01() * wsum)) if wsum > 0 else centers[-1])
    assign = [-1] * 256
    for _ in range(100):
        changed = False
        s, cnt = [0.0] * K, [0.0] * K
        for v in range(256):
            if not hist[v]:
                continue
            best = 0
            for j in range(1, K):
                if abs(v - centers[j]) < abs(v - centers[best]):
                    best = j
            changed |= best != assign[v]
            assign[v] = best
            s[best] += float(hist[v]) * v
            cnt[best] += hist[v]
        if not changed:
            break
        centers = [s[j] / cnt[j] if cnt[j] > 0 else centers[j] for j in range(K)]
    c = sorted(centers)
    rank = [0] * K
    for j in range(1, K):
        rank[j] = rank[j - 1] + (c[j] > c[j - 1])
    lut = []
    for v in range(256):
        best = 0
        for j in range(1, K):
            if abs(v - c[j]) < abs(v - c[best]):
                best = j
        lut.append(rank[best] * 255 // (K - 1))
    return np.array(lut, dtype=np.uint8)[u8]


def blur_np(e):
    r = KSIZE // 2
    k = np.exp(-((np.arange(KSIZE) - r) ** 2) / (2 * SIGMA * SIGMA))
    k /= k.sum()
    h, w = e.shape
    ex = e.astype(np.float64)[:, np.clip(np.arange(w)[:, None] + np.arange(KSIZE) - r, 0, w - 1)]
    t = ex @ k
    ey = t[np.clip(np.arange(h)[:, None] + np.arange(KSIZE) - r, 0, h - 1), :]
    return np.einsum("ikw,k->iw", ey, k)


def smooth_map(rng, h, w):
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    m = np.zeros((h, w))
    for _ in range(6):
        cy, cx, s = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(6, max(h, w) / 3)
        m += rng.uniform(-1, 1) * np.exp(-((y - cy) ** 2 + (x - cx) ** 2) / (2 * s * s))
    return (m + 0.01 * rng.standard_normal((h, w))).astype(np.float32)


def main():
    if len(sys.argv) != 3 or sys.argv[1] != "gen":
        sys.exit(__doc__)
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(20240611)
    cases = []
    for i, (h, w) in enumerate([(224, 224), (97, 131), (64, 64), (40, 300), (224, 224)]):
        m = smooth_map(rng, h, w)
        cases.append((f"smooth{i}", m, labels_of(normalize(m))))
    # Harder label maps for the stages: random blocky levels and full-range noise.
    h, w = 80, 96
    lv = rng.integers(0, 4, size=(h // 8, w // 8)).repeat(8, 0).repeat(8, 1)
    lv = np.where(rng.random((h, w)) < 0.05, rng.integers(0, 4, size=(h, w)), lv)
    cases.append(("blocky", lv.astype(np.float32), (lv * 85).astype(np.uint8)))
    noise = rng.integers(0, 256, size=(50, 70)).astype(np.uint8)
    cases.append(("noise", noise.astype(np.float32), noise))
    with open(os.path.join(out, "cases.txt"), "w") as f:
        for name, m, lab in cases:
            if cv2 is not None:
                edges = cv2.Canny(lab, LO, HI, apertureSize=3, L2gradient=False)
                bl = cv2.GaussianBlur(edges.astype(np.float64), (KSIZE, KSIZE), SIGMA,
                                      borderType=cv2.BORDER_REPLICATE)
                bl8 = cv2.GaussianBlur(edges, (KSIZE, KSIZE), SIGMA, borderType=cv2.BORDER_REPLICATE)
            else:
                edges = np.zeros_like(lab)
                bl = blur_np(edges)
                bl8 = np.clip(np.rint(bl), 0, 255).astype(np.uint8)
            m.tofile(os.path.join(out, name + ".map.f32"))
            lab.tofile(os.path.join(out, name + ".labels.u8"))
            edges.tofile(os.path.join(out, name + ".canny.u8"))
            bl.astype(np.float64).tofile(os.path.join(out, name + ".blur.f64"))
            bl8.tofile(os.path.join(out, name + ".blur8.u8"))
            f.write(f"{name} {m.shape[0]} {m.shape[1]} {bl.mean():.17g} "
                    f"{m.astype(np.float64).mean():.17g} {int(cv2 is not None)}\n")
    print(f"wrote {len(cases)} cases to {out} (opencv: {cv2.__version__ if cv2 else 'absent'})")


if __name__ == "__main__":
    main()
