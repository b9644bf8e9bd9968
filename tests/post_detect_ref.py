"""Reference cases for src/post/detect.c (YOLOv8 detection decoding).

    post_detect_ref.py gen DIR

writes DIR/cases.txt (the number of cases) and DIR/case_NNN.bin, each:
    int32 magic 0x54454450 ('PDET'), classes, anchors, max_detections, class_agnostic
    float32 score_threshold, iou_threshold
    float32 pred[(4 + classes) * anchors]          (row-major, as the ONNX head emits it)
    int32 count
    count x {float32 x1, y1, x2, y2, score; int32 cls}   (expected, in output order)

Expected detections come from torchvision.ops.nms run per class (the same thing as
batched_nms's per-class path, with a stable final sort so equal scores keep anchor order), and
are cross-checked against a plain numpy greedy NMS written here; the script fails if they
disagree. Without torch (the project's .venv), only the numpy reference is used.
"""
import os
import sys

import numpy as np

try:
    import torch
    import torchvision

    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

MAGIC = 0x54454450


def candidates(pred, score_thr):
    """Best class (first on ties), threshold, xywh -> xyxy, all in float32."""
    scores = pred[4:]
    cls = np.argmax(scores, axis=0).astype(np.int32)
    best = scores[cls, np.arange(pred.shape[1])]
    keep = np.nonzero(best >= np.float32(score_thr))[0]
    cx, cy, w, h = pred[0, keep], pred[1, keep], pred[2, keep], pred[3, keep]
    half = np.float32(0.5)
    boxes = np.stack([cx - w * half, cy - h * half, cx + w * half, cy + h * half], axis=1)
    return boxes.astype(np.float32), best[keep].astype(np.float32), cls[keep], keep


def final_order(scores, anchors, idx):
    """Indices idx sorted by score descending, then anchor ascending."""
    return idx[np.lexsort((anchors[idx], -scores[idx].astype(np.float64)))]


def torch_ref(boxes, scores, cls, anchors, iou_thr, agnostic):
    b, s = torch.from_numpy(boxes), torch.from_numpy(scores)
    # A float32 threshold, so torchvision's double compare sees the value the C code gets.
    thr = float(np.float32(iou_thr))
    if agnostic:
        kept = torchvision.ops.nms(b, s, thr).numpy()
    else:
        kept = []
        for c in np.unique(cls):
            sel = np.nonzero(cls == c)[0]
            k = torchvision.ops.nms(b[sel], s[sel], thr).numpy()
            kept.append(sel[k])
        kept = np.concatenate(kept) if kept else np.zeros(0, np.int64)
    return final_order(scores, anchors, kept)


def numpy_ref(boxes, scores, cls, anchors, iou_thr, agnostic):
    order = final_order(scores, anchors, np.arange(len(scores)))
    x1, y1, x2, y2 = boxes.T
    area = (x2 - x1) * (y2 - y1)
    thr = np.float32(iou_thr)
    alive = np.ones(len(scores), bool)
    kept = []
    for i in order:
        if not alive[i]:
            continue
        kept.append(i)
        alive[i] = False
        w = np.maximum(np.float32(0), np.minimum(x2[i], x2) - np.maximum(x1[i], x1))
        h = np.maximum(np.float32(0), np.minimum(y2[i], y2) - np.maximum(y1[i], y1))
        inter = w * h
        with np.errstate(invalid="ignore", divide="ignore"):
            iou = inter / (area[i] + area - inter)
        hit = iou > thr
        if not agnostic:
            hit &= cls == cls[i]
        alive &= ~hit
    return np.array(kept, np.int64)


def expected(pred, score_thr, iou_thr, max_det, agnostic):
    boxes, scores, cls, anchors = candidates(pred, score_thr)
    ref = numpy_ref(boxes, scores, cls, anchors, iou_thr, agnostic)
    if HAVE_TORCH and len(scores):
        tv = torch_ref(boxes, scores, cls, anchors, iou_thr, agnostic)
        if not np.array_equal(tv, ref):
            sys.exit(f"torchvision and numpy references disagree ({len(tv)} vs {len(ref)} kept)")
    ref = ref[:max_det]
    return boxes[ref], scores[ref], cls[ref]


def boxes_xywh(rng, a, size=640.0, min_wh=2.0, max_wh=120.0):
    cx = rng.uniform(0, size, a)
    cy = rng.uniform(0, size, a)
    w = rng.uniform(min_wh, max_wh, a)
    h = rng.uniform(min_wh, max_wh, a)
    return np.stack([cx, cy, w, h])


def clustered_xywh(rng, a, clusters, jitter):
    """Many heavily overlapping boxes: a few centres, jittered."""
    base = boxes_xywh(rng, clusters, min_wh=20, max_wh=200)
    pick = rng.integers(0, clusters, a)
    return base[:, pick] * (1 + rng.uniform(-jitter, jitter, (4, a)))


def sigmoid_scores(rng, c, a, shift):
    return 1 / (1 + np.exp(-(rng.normal(0, 2, (c, a)) + shift)))


def make_cases(rng):
    """(pred, score_thr, iou_thr, max_det, agnostic, what) for each case."""
    cases = []
    # Small scattered cases, both NMS modes.
    for agn in (False, True):
        xywh = boxes_xywh(rng, 50, size=100)
        cases.append((np.vstack([xywh, rng.uniform(0, 1, (3, 50))]), 0.25, 0.45, 300, agn,
                      "small scattered"))
    # Dense overlap, 2 and 5 classes, several IoU thresholds.
    for c, agn, iou in ((2, False, 0.45), (2, True, 0.45), (5, False, 0.7), (5, False, 0.1),
                        (5, True, 0.3)):
        a = 400
        xywh = clustered_xywh(rng, a, 6, 0.15)
        cases.append((np.vstack([xywh, rng.uniform(0, 1, (c, a))]), 0.25, iou, 300, agn,
                      "dense overlap"))
    # Ties: scores from a handful of levels, duplicate boxes, tied best classes.
    for agn in (False, True):
        a, c = 300, 4
        xywh = clustered_xywh(rng, a, 5, 0.05)
        dup = rng.integers(0, a, 60)
        xywh[:, dup[:30]] = xywh[:, dup[30:]]
        sc = rng.integers(0, 8, (c, a)) / 8.0
        cases.append((np.vstack([xywh, sc]), 0.25, 0.45, 300, agn, "score ties"))
    # Zero-size boxes mixed in (0/0 IoU must suppress nothing).
    xywh = clustered_xywh(rng, 200, 4, 0.1)
    xywh[2:, rng.integers(0, 200, 40)] = 0
    cases.append((np.vstack([xywh, rng.uniform(0, 1, (3, 200))]), 0.25, 0.45, 300, False,
                  "zero-size boxes"))
    # Nothing above the threshold.
    cases.append((np.vstack([boxes_xywh(rng, 500), rng.uniform(0, 0.2499, (10, 500))]), 0.25,
                  0.45, 300, False, "nothing above threshold"))
    # More survivors than max_detections.
    for md, agn in ((300, False), (17, True), (1, False)):
        a = 8400
        xywh = boxes_xywh(rng, a, size=4000, max_wh=30)
        cases.append((np.vstack([xywh, rng.uniform(0, 1, (80, a))]), 0.9, 0.45, md, agn,
                      "more than max_detections"))
    # Full-size YOLOv8 head at 640x640: mostly low sigmoid scores, a few confident clusters.
    for agn in (False, True):
        a, c = 8400, 80
        xywh = np.hstack([boxes_xywh(rng, a - 2000), clustered_xywh(rng, 2000, 30, 0.1)])
        cases.append((np.vstack([xywh, sigmoid_scores(rng, c, a, -7)]), 0.25, 0.45, 300, agn,
                      "yolov8 640"))
    # Default thresholds against a low one: many candidates (quadratic NMS stress).
    a = 8400
    cases.append((np.vstack([clustered_xywh(rng, a, 200, 0.2), rng.uniform(0, 1, (80, a))]),
                  0.001, 0.65, 300, False, "low threshold"))
    return cases


def gen(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(20240607)
    cases = make_cases(rng)
    for i, (pred, sthr, ithr, md, agn, what) in enumerate(cases):
        pred = np.ascontiguousarray(pred, dtype=np.float32)
        c, a = pred.shape[0] - 4, pred.shape[1]
        boxes, scores, cls = expected(pred, sthr, ithr, md, agn)
        with open(os.path.join(out_dir, f"case_{i:03d}.bin"), "wb") as f:
            np.array([MAGIC, c, a, md, int(agn)], np.int32).tofile(f)
            np.array([sthr, ithr], np.float32).tofile(f)
            pred.tofile(f)
            np.array([len(scores)], np.int32).tofile(f)
            rec = np.zeros(len(scores), np.dtype([("b", "<f4", 4), ("s", "<f4"), ("c", "<i4")]))
            rec["b"], rec["s"], rec["c"] = boxes, scores, cls
            rec.tofile(f)
        print(f"case {i:3d}: C={c:3d} A={a:5d} agnostic={int(agn)} max_det={md:3d} "
              f"-> {len(scores):3d} kept  ({what})")
    with open(os.path.join(out_dir, "cases.txt"), "w") as f:
        f.write(f"{len(cases)}\n")
    print("reference:", "torchvision.ops.nms " + torchvision.__version__ + " + numpy"
          if HAVE_TORCH else "numpy only")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "gen":
        sys.exit(__doc__)
    gen(sys.argv[2])
