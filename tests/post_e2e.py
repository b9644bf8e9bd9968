#!/usr/bin/env python3
"""End-to-end tests of `shardinfer run --post MODE` for every postprocessor, against references
this project did not write: onnxruntime for the model outputs; numpy, OpenCV (through
tests/post_congestion_ref.py) and torchvision.ops.nms (through tests/post_detect_ref.py) for the
postprocessing. Each mode runs under `mpirun -np 2` on 20 real-photo JPEGs, one truncated and one
corrupt among them, with --exact-preprocess so that the model input is reproducible here (Pillow
resize + crop as in tests/io_ref.py, then the C code's float32 normalization).

Two comparisons per mode where a discrete step is involved (top-K order, k-means labels, NMS):
  1. the engine's raw outputs (--post raw on the same model) against onnxruntime, within float
     tolerance;
  2. the postprocessor against the Python reference applied to the engine's own raw outputs,
     exactly (or to 1e-9), which isolates the postprocessing from engine rounding;
and the postprocessor against the reference applied to onnxruntime's outputs, within tolerance.
Model weights are chosen (seed search in `prepare`) so that no top-K order, score threshold,
class choice or IoU threshold is within rounding distance of a tie on onnxruntime's outputs.

Usage: post_e2e.py --shardinfer BIN --dir WORK [--ref-python PY] SUBCOMMAND
  prepare     images (tests/make_e2e_set.py), pack, models, reference inputs and onnxruntime
              outputs in WORK
  classify    top-K classes and probabilities (K = 5 and --topk 3) against onnxruntime's softmax
  embed       L2-normalized vectors against onnxruntime's output normalized in float64
  embed-f16   --embed-dtype float16: numpy's astype(float16) of the float32 run's embeddings, bit
              for bit, through the gathering and the parallel writer, a SIGTERM and --resume
              (refused with float32), `shardinfer merge` of two parts and `shardinfer show`
  congestion  score and map mean against post_congestion_ref.py (OpenCV Canny and blur)
  raw         two outputs, one named "head/logits", against onnxruntime; -np 1 and -np 2 give
              identical results
  detect      YOLOv8 decoding + class-wise NMS against post_detect_ref.py (torchvision), with the
              default parameters (also -np 1: identical results) and with --score-threshold/
              --iou-threshold/--max-detections/--class-agnostic
  bad-post    a model that does not fit --post: exit 1 and one message naming the output and the
              shape expected; an unknown --post: exit 2
  interpolation  the model input itself (an Identity model, --post raw) with --interpolation
              bicubic equals Pillow's BICUBIC resize + crop, exact and DCT-scaled (Pillow's
              draft()); the model's metadata 'interpolation' is used, and the flag wins over it;
              a bad value of either is one clear error
  ref KIND IN.npz OUT.npz   (internal) the reference postprocessing, run under --ref-python,
              which has OpenCV and torchvision (the .venv-torch) but not h5py
Exit 77 (skipped) where the reference python lacks OpenCV for the congestion test.
"""

import argparse
import io
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

TIMEOUT = 120
COUNT, SEED = 20, 11  # 20 images: index 5 truncated, 15 corrupt, 10 grayscale (make_e2e_set)
MEAN = np.array([0.485, 0.456, 0.406], np.float32)  # ImageNet: the models carry no metadata
STD = np.array([0.229, 0.224, 0.225], np.float32)
SMALL, SMALL_RESIZE = 32, 36  # input size and --resize of the classify/embed/raw/detect models
BIG, BIG_RESIZE = 64, 72      # the congestion model
DETECT_C, DETECT_A = 3, 64
DETECT_RUNS = {  # name: (CLI flags, score threshold, IoU threshold, max detections, agnostic)
    "default": ([], 0.25, 0.45, 300, False),
    "custom": (["--score-threshold", "0.35", "--iou-threshold", "0.3", "--max-detections", "4",
                "--class-agnostic"], 0.35, 0.3, 4, True),
}
SKIP = 77


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


# --------------------------------------------------------------------------------------------
# Running things
# --------------------------------------------------------------------------------------------


def mpi_env():
    import e2e  # mpirun's environment for root and oversubscription

    return dict(e2e.mpi_env(), OMP_NUM_THREADS="1")


def sh(cmd, expect_rc=0, timeout=TIMEOUT, quiet=False):
    print("$", " ".join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=mpi_env())
    except subprocess.TimeoutExpired:
        raise Fail(f"timed out after {timeout} s (a rank hangs?): {' '.join(cmd)}")
    if not quiet or (expect_rc is not None and p.returncode != expect_rc):
        sys.stdout.write(p.stdout)
        sys.stdout.write(p.stderr)
    if expect_rc is not None and p.returncode != expect_rc:
        raise Fail(f"exit code {p.returncode}, expected {expect_rc}: {' '.join(cmd)}")
    return p


def run_post(a, model, out, post, np_=2, extra=(), resize=SMALL_RESIZE, set_path=None,
             exact=True):
    """mpirun -np np_ shardinfer run --post post; returns the result's path."""
    path = os.path.join(a.dir, out)
    sh(["mpirun", "-np", str(np_), a.shardinfer, "run", "--model",
        os.path.join(a.dir, "models", model), "--input", set_path or os.path.join(a.dir, "set.h5"),
        "--output", path, "--post", post, "--batch", "3", "--resize", str(resize)] +
       (["--exact-preprocess"] if exact else []) +
       ["--schedule", "static", "--threads", "1", "--progress", "none", "--overwrite", *extra],
       quiet=True)
    return path


def ref_call(a, kind, arrays):
    """The reference postprocessing under --ref-python (OpenCV, torchvision); arrays in and out
    through .npz files."""
    d = os.path.join(a.dir, "refcall")
    os.makedirs(d, exist_ok=True)
    inp, out = os.path.join(d, f"{kind}_{os.getpid()}_in.npz"), os.path.join(d, f"{kind}_"
                                                                          f"{os.getpid()}_out.npz")
    np.savez(inp, **arrays)
    p = sh([a.ref_python, os.path.abspath(__file__), "ref", kind, inp, out], expect_rc=None)
    if p.returncode == SKIP:
        print(f"SKIP: the reference python {a.ref_python} cannot run the {kind} reference")
        sys.exit(SKIP)
    check(p.returncode == 0, f"the {kind} reference failed (rc {p.returncode})")
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


# --------------------------------------------------------------------------------------------
# Reference side (runs under --ref-python; numpy, cv2, torch only, no h5py)
# --------------------------------------------------------------------------------------------


def ref_main(kind, inp, out):
    z = dict(np.load(inp))
    if kind == "congestion":
        import post_congestion_ref as pc
        if pc.cv2 is None:
            print("post_e2e ref: no OpenCV in this python", file=sys.stderr)
            sys.exit(SKIP)
        maps = z["maps"]  # (N, H, W) float32, only ok images
        score, mean, labels = [], [], []
        for m in maps:
            lab = pc.labels_of(pc.normalize(m))
            edges = pc.cv2.Canny(lab, pc.LO, pc.HI, apertureSize=3, L2gradient=False)
            bl = pc.cv2.GaussianBlur(edges.astype(np.float64), (pc.KSIZE, pc.KSIZE), pc.SIGMA,
                                     borderType=pc.cv2.BORDER_REPLICATE)
            score.append(bl.mean())
            mean.append(m.astype(np.float64).mean())
            labels.append(lab)
        np.savez(out, score=np.array(score), map_mean=np.array(mean), labels=np.array(labels),
                 u8=np.array([pc.normalize(m) for m in maps]),
                 cv=np.array(pc.cv2.__version__))
    elif kind == "detect":
        import post_detect_ref as pd
        res = {"torch": np.array(pd.HAVE_TORCH)}
        for j in range(int(z["jobs"])):  # one process for every job: importing torch takes seconds
            thr, iou, md, agn = z[f"params{j}"].tolist()
            boxes, scores, classes, offsets = [], [], [], [0]
            for pred in z[f"preds{j}"]:  # (4 + C, A) float32, only ok images
                b, s, c = pd.expected(np.ascontiguousarray(pred, np.float32), thr, iou,
                                      int(md), bool(agn))
                boxes.append(b.reshape(-1, 4))
                scores.append(s)
                classes.append(c)
                offsets.append(offsets[-1] + len(s))
            res[f"boxes{j}"] = np.concatenate(boxes).astype(np.float32)
            res[f"scores{j}"] = np.concatenate(scores).astype(np.float32)
            res[f"classes{j}"] = np.concatenate(classes).astype(np.int32)
            res[f"offsets{j}"] = np.array(offsets, np.int64)
        np.savez(out, **res)
    else:
        sys.exit(f"post_e2e ref: unknown kind {kind}")


# --------------------------------------------------------------------------------------------
# Models (onnx.helper, seeded random weights, symbolic batch)
# --------------------------------------------------------------------------------------------


class Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []

    def init(self, name, value):
        from onnx import numpy_helper
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op, ins, out, **attrs):
        from onnx import helper
        self.nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def conv(self, x, name, cin, cout, k, stride=1, bias_lo=-0.1, bias_hi=0.1):
        w = self.rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / (cin * k * k))
        b = self.rng.uniform(bias_lo, bias_hi, cout)
        p = k // 2
        return self.node("Conv", [x, self.init(name + ".w", w.astype(np.float32)),
                                  self.init(name + ".b", b.astype(np.float32))], name,
                         kernel_shape=[k, k], strides=[stride, stride], pads=[p, p, p, p])

    def gemm(self, x, name, w, b):
        return self.node("Gemm", [x, self.init(name + ".w", np.asarray(w, np.float32)),
                                  self.init(name + ".b", np.asarray(b, np.float32))], name,
                         transB=1)

    def model(self, name, size, outputs):
        """outputs: [(name, shape without the batch)]"""
        import onnx
        from onnx import TensorProto, helper
        g = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, size, size])],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["N", *s]) for o, s in outputs],
            initializer=self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="shardinfer post_e2e.py")
        m.ir_version = 8
        onnx.checker.check_model(m, full_check=True)
        return m


def ort_run(model, x):
    """All outputs of model (ModelProto or path) on x, onnxruntime CPU, graph as written."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    src = model if isinstance(model, str) else model.SerializeToString()
    sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"input": x})


def features(b):
    """conv 3->8 stride 2 + relu + conv 8->16 stride 2 + relu + GAP + Flatten: (N, 16)."""
    x = b.conv("input", "c1", 3, 8, 3, stride=2)
    x = b.node("Relu", [x], "c1.relu")
    x = b.conv(x, "c2", 8, 16, 3, stride=2, bias_lo=0.0, bias_hi=0.2)
    x = b.node("Relu", [x], "c2.relu")
    x = b.node("GlobalAveragePool", [x], "gap")
    return b.node("Flatten", [x], "flat", axis=1)


def standardizer(xs, seed):
    """(mean, std) of the (N, 16) features on the reference images, so that a head on the
    standardized features varies from image to image (random features share a big common part)."""
    b = Builder(seed)
    features(b)
    f = ort_run(b.model("feat", SMALL, [("flat", [16])]), xs)[0].astype(np.float64)
    return f.mean(axis=0), np.maximum(f.std(axis=0), 1e-3)


def make_classify(seed, xs):
    mu, sd = standardizer(xs, seed)
    b = Builder(seed)
    f = features(b)
    w = b.rng.standard_normal((10, 16)) * 0.6 / sd
    bias = b.rng.uniform(-0.5, 0.5, 10) - w @ mu
    b.gemm(f, "logits", w, bias)
    return b.model("classify", SMALL, [("logits", [10])])


def make_embed(seed):
    b = Builder(seed)
    x = b.conv("input", "c1", 3, 16, 3, bias_lo=0.0, bias_hi=0.3)
    x = b.node("Relu", [x], "relu")
    x = b.node("GlobalAveragePool", [x], "gap")
    b.node("Flatten", [x], "embedding", axis=1)
    return b.model("embed", SMALL, [("embedding", [16])])


def make_raw(seed):
    b = Builder(seed)
    x = b.conv("input", "c1", 3, 4, 3, bias_lo=0.0, bias_hi=0.2)
    r = b.node("Relu", [x], "relu")
    b.node("MaxPool", [r], "feat", kernel_shape=[16, 16], strides=[16, 16])
    g = b.node("GlobalAveragePool", [r], "gap")
    g = b.node("Flatten", [g], "flat", axis=1)
    b.gemm(g, "head/logits", b.rng.standard_normal((10, 4)), b.rng.uniform(-1, 1, 10))
    return b.model("raw", SMALL, [("head/logits", [10]), ("feat", [4, 2, 2])])


def make_congestion(seed):
    """A dense (N, 1, 64, 64) map from three convs: responds to colour and edges, so the k-means
    levels form regions whose borders Canny finds."""
    b = Builder(seed)
    x = b.conv("input", "c1", 3, 8, 5)
    x = b.node("Relu", [x], "c1.relu")
    x = b.conv(x, "c2", 8, 8, 5)
    x = b.node("Relu", [x], "c2.relu")
    b.conv(x, "density", 8, 1, 3)
    return b.model("congestion", BIG, [("density", [1, BIG, BIG])])


def make_detect(seed, xs):
    """A YOLOv8-layout head (N, 4 + C, A) that is a deterministic function of the image:
    standardized GAP features -> Gemm -> Reshape (N, 4 + C, A); box rows through a sigmoid scaled
    to input pixels (centres in [0, 32], sizes in [3, 23]), class rows through a sigmoid."""
    mu, sd = standardizer(xs, seed)
    b = Builder(seed)
    f = features(b)
    rows = 4 + DETECT_C
    # pre-activations: std ~1.5 for the boxes; ~1 around -2.2 for the classes, so that about a
    # third of the anchors pass 0.25 and few sigmoids saturate (float32 ties at 1.0)
    w = b.rng.standard_normal((rows, DETECT_A, 16)) / sd
    w[:4] *= 1.0 / 4
    w[4:] *= 0.7 / 4
    bias = b.rng.standard_normal((rows, DETECT_A))
    bias[4:] = bias[4:] * 0.7 - 2.2
    bias -= w @ mu
    x = b.gemm(f, "head", w.reshape(rows * DETECT_A, 16), bias.reshape(-1))
    x = b.node("Reshape", [x, b.init("shape", np.array([-1, rows, DETECT_A], np.int64))], "grid")
    bx = b.node("Slice", [x, b.init("s0", np.array([0], np.int64)),
                          b.init("s4", np.array([4], np.int64)),
                          b.init("ax1", np.array([1], np.int64))], "box_raw")
    cl = b.node("Slice", [x, "s4", b.init("s7", np.array([rows], np.int64)), "ax1"], "cls_raw")
    bx = b.node("Sigmoid", [bx], "box_sig")
    bx = b.node("Mul", [bx, b.init("box_scale", np.array([SMALL, SMALL, 20, 20],
                                                         np.float32).reshape(1, 4, 1))],
                "box_scaled")
    bx = b.node("Add", [bx, b.init("box_off", np.array([0, 0, 3, 3],
                                                       np.float32).reshape(1, 4, 1))], "box")
    cl = b.node("Sigmoid", [cl], "cls")
    b.node("Concat", [bx, cl], "output0", axis=1)
    return b.model("detect", SMALL, [("output0", [rows, DETECT_A])])


# --------------------------------------------------------------------------------------------
# Near-tie margins on onnxruntime's outputs (the engine differs from it by ~1e-6)
# --------------------------------------------------------------------------------------------


def classify_margin(logits, k):
    s = -np.sort(-logits.astype(np.float64), axis=1)
    return float(np.min(s[:, :k] - s[:, 1:k + 1]))


def iou_matrix(bx):
    x1, y1, x2, y2 = bx.T
    area = (x2 - x1) * (y2 - y1)
    w = np.maximum(0, np.minimum(x2[:, None], x2) - np.maximum(x1[:, None], x1))
    h = np.maximum(0, np.minimum(y2[:, None], y2) - np.maximum(y1[:, None], y1))
    inter = w * h
    return inter / (area[:, None] + area - inter)


def detect_margins(preds, thr, iou_thr):
    """(score margin, IoU margin, candidates, max candidates) over all images: distance of every
    best score from the threshold, of every candidate's best from its second-best class, between
    candidate scores, and of every candidate pair's IoU from the IoU threshold."""
    sm, im, cands, most = np.inf, np.inf, 0, 0
    for p in preds.astype(np.float64):
        s = np.sort(p[4:], axis=0)
        best, second = s[-1], s[-2]
        sm = min(sm, np.min(np.abs(best - thr)))
        keep = best >= thr
        cands += int(keep.sum())
        most = max(most, int(keep.sum()))
        if keep.sum() < 2:
            continue
        sc = np.sort(best[keep])
        sm = min(sm, np.min(best[keep] - second[keep]), np.min(np.diff(sc)))
        cx, cy, w, h = p[0, keep], p[1, keep], p[2, keep], p[3, keep]
        m = iou_matrix(np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1))
        iu = np.triu_indices(len(m), 1)
        im = min(im, np.min(np.abs(m[iu] - iou_thr)))
    return sm, im, cands, most


# --------------------------------------------------------------------------------------------
# prepare
# --------------------------------------------------------------------------------------------


def reference_input(data, size, resize, interp="bilinear", exact=True):
    """The model input shardinfer computes with --exact-preprocess: Pillow decode, EXIF turn,
    torchvision-style Resize + CenterCrop (tests/io_ref.py) with Pillow's filter `interp`, then
    io/jpeg.c's float32 (v / 255 - mean) / std through a per-value table, CHW. exact=False:
    without --exact-preprocess, where Pillow's draft() decodes at the same DCT scale."""
    from PIL import Image, ImageOps
    from io_ref import drafted, reference
    if exact:
        im = ImageOps.exif_transpose(Image.open(io.BytesIO(data)))
        crop = reference(im, resize, size, size, interp)
    else:
        crop = drafted(data, resize, size, size, interp)[1]
    hwc = np.frombuffer(crop, np.uint8).reshape(size, size, 3)
    lut = (np.arange(256, dtype=np.float32)[:, None] / np.float32(255.0) - MEAN) / STD
    return np.ascontiguousarray(lut[hwc, np.arange(3)].transpose(2, 0, 1), np.float32)


def prepare(a):
    import h5py
    import make_e2e_set as mk
    if os.path.isdir(a.dir):
        shutil.rmtree(a.dir)
    os.makedirs(os.path.join(a.dir, "models"))
    mk.make_images(a.dir, COUNT, SEED, mk.load_turbojpeg())
    sh([a.shardinfer, "pack", os.path.join(a.dir, "images"), "--output",
        os.path.join(a.dir, "set.h5")])
    status = np.array([int(l.split("\t")[1]) for l in open(os.path.join(a.dir,
                                                                     "expected_status.txt"))])
    with h5py.File(os.path.join(a.dir, "set.h5"), "r") as f:
        ids = f["/images/ids"].asstr()[:]
        off, data = f["/images/offsets"][:], f["/images/data"][:]
    ok = status == 0
    check(len(ids) == COUNT and (~ok).sum() == 2, f"expected {COUNT} images, 2 failing")
    blobs = [data[off[i]:off[i + 1]].tobytes() for i in range(COUNT)]
    xs = np.stack([reference_input(blobs[i], SMALL, SMALL_RESIZE) for i in np.nonzero(ok)[0]])
    xb = np.stack([reference_input(blobs[i], BIG, BIG_RESIZE) for i in np.nonzero(ok)[0]])
    np.savez(os.path.join(a.dir, "inputs.npz"), ok=ok, status=status,
             ids=np.array([str(i) for i in ids], dtype=str), small=xs, big=xb)

    def save(name, model, x):
        import onnx
        path = os.path.join(a.dir, "models", name + ".onnx")
        onnx.save(model, path)
        outs = ort_run(path, x)
        np.savez(os.path.join(a.dir, f"ort_{name}.npz"), *outs)
        print(f"wrote {path} and onnxruntime's outputs " +
              ", ".join(f"{o.name} {list(v.shape)}" for o, v in zip(model.graph.output, outs)))
        return outs

    # classify: no two of the top K + 1 logits within 1e-3 (probabilities differ by ~1e-7)
    for seed in range(100, 200):
        m = make_classify(seed, xs)
        lg = ort_run(m, xs)[0]
        top1 = len(set(np.argmax(lg, axis=1)))
        if classify_margin(lg, 5) > 1e-3 and top1 >= 3:
            break
    else:
        raise Fail("no classify seed without near-ties")
    save("classify", m, xs)
    print(f"classify: seed {seed}, top-6 logit margin {classify_margin(lg, 5):.3g}, "
          f"{top1} distinct top-1 classes")
    save("embed", make_embed(21), xs)
    save("raw", make_raw(22), xs)
    save("congestion", make_congestion(23), xb)
    # detect: every threshold decision at least 2e-5 (scores) / 1e-4 (IoU) from a tie, with both
    # parameter sets, and NMS must suppress something
    for seed in range(300, 600):
        m = make_detect(seed, xs)
        pr = ort_run(m, xs)[0]
        good = True
        for flags, thr, iou, md, agn in DETECT_RUNS.values():
            sm, im, cands, most = detect_margins(pr, thr, iou)
            good &= sm > 2e-5 and im > 1e-4 and cands > 0
        if good:
            break
    else:
        raise Fail("no detect seed without near-ties")
    save("detect", m, xs)
    print(f"detect: seed {seed}, " + "; ".join(
        "%s: score margin %.3g, IoU margin %.3g, %d candidates (at most %d per image)" %
        ((k,) + detect_margins(pr, v[1], v[2])) for k, v in DETECT_RUNS.items()))
    print(f"prepare: OK: {COUNT} images ({int((~ok).sum())} failing), 5 models in {a.dir}")


# --------------------------------------------------------------------------------------------
# Result checks shared by every mode
# --------------------------------------------------------------------------------------------


def load_inputs(a):
    with np.load(os.path.join(a.dir, "inputs.npz")) as z:
        return {k: z[k] for k in z.files}


def load_ort(a, name):
    with np.load(os.path.join(a.dir, f"ort_{name}.npz")) as z:
        return [z[f"arr_{i}"] for i in range(len(z.files))]


def read_result(path):
    import h5py
    r = {"datasets": {}, "attrs": {}}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                v = obj[()]
                if obj.dtype.kind == "O" or h5py.check_string_dtype(obj.dtype):
                    v = obj.asstr()[()]
                r["datasets"][name] = v
        f.visititems(visit)
        for k, v in f.attrs.items():
            r["attrs"][k] = v.decode() if isinstance(v, bytes) else v
    return r


def check_common(r, inp, post, params_has=()):
    """ids, index, status, errors and the root attributes; returns the datasets."""
    d, at = r["datasets"], r["attrs"]
    n = len(inp["ids"])
    check(list(d["ids"]) == list(inp["ids"]), "/ids differ from the set's")
    check(d["index"].dtype == np.uint64 and np.array_equal(d["index"], np.arange(n)),
          f"/index is not 0..{n - 1} u64")
    check(d["status"].dtype == np.int32, f"/status is {d['status'].dtype}")
    check(np.array_equal(d["status"], inp["status"]),
          f"/status {d['status'].tolist()}, expected {inp['status'].tolist()}")
    bad = np.nonzero(~inp["ok"])[0]
    check(np.array_equal(np.sort(d["errors/index"]), bad),
          f"/errors/index {d['errors/index'].tolist()}, expected {bad.tolist()}")
    check(len(d["errors/message"]) == len(bad), "one error message per failed image")
    check(int(at["format_version"]) == 2, f"format_version {at['format_version']}")
    check(at["post"] == post, f"attribute post is {at['post']!r}, expected {post!r}")
    for s in params_has:
        check(s in at["post_params"], f"post_params {at['post_params']!r} lacks {s!r}")
    return d


def allclose(name, got, want, rtol, atol):
    try:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    except AssertionError as e:
        raise Fail(f"{name}: {e}")
    print(f"  {name}: max abs diff {np.max(np.abs(got.astype(np.float64) - want)):.3g} "
          f"(rtol {rtol}, atol {atol})")


def ok_rows(x, inp):
    return x[inp["ok"]]


def check_nan_rows(name, x, inp):
    bad = x[~inp["ok"]]
    check(np.all(np.isnan(bad)), f"{name}: failed images' rows are not all NaN: {bad}")
    check(not np.any(np.isnan(ok_rows(x, inp))), f"{name}: NaN in an ok image's row")


def same_results(r1, r2):
    """Results of -np 1 and -np 2: every dataset identical (NaN where NaN), every attribute too
    but for those that say how the run went."""
    d1, d2 = r1["datasets"], r2["datasets"]
    check(set(d1) == set(d2), f"datasets differ: {sorted(set(d1) ^ set(d2))}")
    for k in d1:
        same = (np.array_equal(d1[k], d2[k], equal_nan=True) if d1[k].dtype.kind == "f"
                else np.array_equal(d1[k], d2[k]))
        check(same and d1[k].dtype == d2[k].dtype, f"/{k} differs between -np 1 and -np 2")
    # what a run with another rank count may set differently; the default chunk size depends on
    # the rank count, and the results do not depend on it
    varies = {"ranks", "elapsed_seconds", "command_line", "chunk_size"}
    a1, a2 = r1["attrs"], r2["attrs"]
    check(set(a1) == set(a2), f"attributes differ: {sorted(set(a1) ^ set(a2))}")
    for k in set(a1) - varies:
        check(str(a1[k]) == str(a2[k]), f"attribute {k}: {a1[k]!r} (np 1) vs {a2[k]!r} (np 2)")
    check(int(a1["ranks"]) == 1 and int(a2["ranks"]) == 2, "ranks attribute")
    print(f"  -np 1 and -np 2: {len(d1)} datasets identical")


# --------------------------------------------------------------------------------------------
# The modes
# --------------------------------------------------------------------------------------------


def softmax64(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def t_classify(a):
    inp = load_inputs(a)
    prob = softmax64(load_ort(a, "classify")[0])
    for k, extra in ((5, []), (3, ["--topk", "3"])):
        d = check_common(read_result(run_post(a, "classify.onnx", f"classify_k{k}.h5",
                                              "classify", extra=extra)), inp, "classify",
                         [f"topk={k}"])
        cls, pr = d["topk_class"], d["topk_prob"]
        check(cls.dtype == np.int32 and pr.dtype == np.float32 and cls.shape == (COUNT, k),
              f"topk_class {cls.dtype} {cls.shape}, topk_prob {pr.dtype}")
        check(np.all(cls[~inp["ok"]] == -1) and np.all(pr[~inp["ok"]] == 0),
              "failed images: classes not -1 or probabilities not 0")
        want = np.argsort(-prob, axis=1, kind="stable")[:, :k]
        got = ok_rows(cls, inp)
        check(np.array_equal(got, want),
              f"K={k}: top-K classes differ from onnxruntime's at images "
              f"{np.nonzero(np.any(got != want, axis=1))[0].tolist()} (ok-image order)")
        allclose(f"K={k} topk_prob", ok_rows(pr, inp),
                 np.take_along_axis(prob, want, axis=1), 0, 1e-5)
    print("classify: OK: top-5 and top-3 classes equal onnxruntime's, probabilities within 1e-5")


def t_embed(a):
    inp = load_inputs(a)
    ref = load_ort(a, "embed")[0].astype(np.float64)
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    d = check_common(read_result(run_post(a, "embed.onnx", "embed.h5", "embed")), inp, "embed")
    e = d["embedding"]
    check(e.dtype == np.float32 and e.shape == (COUNT, 16), f"embedding {e.dtype} {e.shape}")
    check_nan_rows("embedding", e, inp)
    allclose("embedding", ok_rows(e, inp), ref, 0, 1e-5)
    nrm = np.linalg.norm(ok_rows(e, inp).astype(np.float64), axis=1)
    check(np.all(np.abs(nrm - 1) < 1e-6), f"norms {nrm}")
    print("embed: OK: within 1e-5 of onnxruntime's output normalized in float64")


def half_bits(x):
    """A float16 array's bit patterns, so NaN rows compare exactly too."""
    check(x.dtype == np.float16, f"dtype {x.dtype}, expected float16")
    return np.ascontiguousarray(x).view(np.uint16)


def interrupted_f16(a, out, args):
    """A float16 run stopped by SIGTERM once its first chunk is journaled: exit 6 and a partial
    result to resume. Runs without mpirun so the signal reaches the one rank directly."""
    for f in (out, out + ".partial", out + ".journal"):
        if os.path.exists(f):
            os.remove(f)
    cmd = [a.shardinfer, "run", *args, "--output", out, "--schedule", "static",
           "--flush-interval", "0.05", "--test-slow-rank", "0:300"]
    print("$", " ".join(cmd), flush=True)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=mpi_env())
    t0 = time.time()
    while time.time() - t0 < 60 and p.poll() is None:
        if os.path.exists(out + ".journal") and os.path.getsize(out + ".journal") > 40:
            break  # the 40-byte header and at least one chunk's record
        time.sleep(0.02)
    p.send_signal(signal.SIGTERM)
    try:
        so, se = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        raise Fail("the interrupted run did not end within 60 s of SIGTERM")
    check(p.returncode == 6, f"SIGTERM: exit code {p.returncode}, expected 6\n{se}")
    with h5py_file(out + ".partial") as f:
        check(f["embedding"].dtype == np.float16, "the partial result's embedding is not float16")


def h5py_file(path):
    import h5py
    return h5py.File(path, "r")


def split_set(a, sizes):
    """set.h5 cut into files of these sizes (a job array's parts); their paths and a list file."""
    with h5py_file(os.path.join(a.dir, "set.h5")) as f:
        off, data, ids = f["images/offsets"][:], f["images/data"][:], f["images/ids"][:]
    import h5py
    paths, lo = [], 0
    for k, n in enumerate(sizes):
        paths.append(os.path.join(a.dir, f"f16_part{k}.h5"))
        with h5py.File(paths[-1], "w") as g:
            g["images/data"] = data[off[lo]:off[lo + n]]
            g["images/offsets"] = (off[lo:lo + n + 1] - off[lo]).astype(np.uint64)
            g.create_dataset("images/ids", data=ids[lo:lo + n], dtype=h5py.string_dtype())
        lo += n
    lst = os.path.join(a.dir, "f16_parts.txt")
    with open(lst, "w") as f:
        f.write("\n".join(paths) + "\n")
    return paths, lst


def t_embed_f16(a):
    inp = load_inputs(a)
    f16 = ["--embed-dtype", "float16"]
    r32 = read_result(run_post(a, "embed.onnx", "embed_f32.h5", "embed"))
    r16 = read_result(run_post(a, "embed.onnx", "embed_f16.h5", "embed", extra=f16))
    e32 = check_common(r32, inp, "embed")["embedding"]
    e16 = check_common(r16, inp, "embed", ["dtype=float16"])["embedding"]
    check(r32["attrs"]["post_params"] == "embed", f"float32 post_params {r32['attrs']['post_params']!r}")
    check(r16["attrs"]["post_params"] == "embed dtype=float16",
          f"float16 post_params {r16['attrs']['post_params']!r}")
    check(e32.dtype == np.float32 and e16.shape == e32.shape, f"embedding {e16.dtype} {e16.shape}")
    # 1. numpy's conversion of the float32 run, every row (NaN ones too) bit for bit
    want = half_bits(e32.astype(np.float16))
    got = half_bits(e16)
    check(np.array_equal(got, want),
          f"{int((got != want).sum())} values differ from numpy's astype(float16) of the float32 "
          "run")
    check_nan_rows("embedding", e16, inp)
    D = e16.shape[1]
    nrm = np.linalg.norm(ok_rows(e16, inp).astype(np.float64), axis=1)
    tol = 2.0 ** -11 + np.sqrt(D) * 2.0 ** -25  # a half's relative rounding, subnormals' absolute
    check(np.all(np.abs(nrm - 1) <= tol), f"norms {nrm} not 1 within {tol:.3g}")
    print(f"  float16 == numpy astype(float16) of the float32 run ({got.size} values); "
          f"norms within {np.abs(nrm - 1).max():.2g} of 1")
    # 2. the parallel writer (each rank's rows written with MPI-IO) and one rank: the same bits
    for name, extra in (("parallel", ["--writer", "parallel"]), ("np1", [])):
        r = read_result(run_post(a, "embed.onnx", f"embed_f16_{name}.h5", "embed",
                                 np_=1 if name == "np1" else 2, extra=f16 + extra))
        check(np.array_equal(half_bits(r["datasets"]["embedding"]), got),
              f"{name}: float16 embeddings differ from the gathering writer's")
    print("  --writer parallel and -np 1: identical")
    # 3. SIGTERM, then --resume: refused with float32, completed with float16 into the same file;
    # chunks of one image, so that the chunks the pipeline has claimed when the signal comes
    # leave most of the 20 to the resumed run
    base = ["--model", os.path.join(a.dir, "models", "embed.onnx"), "--input",
            os.path.join(a.dir, "set.h5"), "--post", "embed", "--batch", "1", "--chunk", "1",
            "--resize", str(SMALL_RESIZE), "--exact-preprocess", "--threads", "1", "--progress",
            "none"]
    out, ref = (os.path.join(a.dir, f"embed_f16_{n}.h5") for n in ("resumed", "uninterrupted"))
    interrupted_f16(a, out, base + f16)
    p = sh([a.shardinfer, "run", *base, "--output", out, "--resume"], expect_rc=1, quiet=True)
    msg = [l for l in p.stderr.splitlines() if "--resume" in l]
    check(len(msg) == 1 and "different settings" in msg[0] and "dtype=float16" in msg[0],
          f"the refusal of a float32 resume does not name the dtype: {p.stderr}")
    check(os.path.exists(out + ".partial"), "a refused resume removed the partial result")
    print(f"  float32 resume of a float16 run refused: {msg[0]}")
    p = sh([a.shardinfer, "run", *base, *f16, "--output", out, "--resume"])
    check("[resumed]" in p.stdout, "the summary does not say the run was resumed")
    sh([a.shardinfer, "run", *base, *f16, "--output", ref, "--overwrite"], quiet=True)
    rr, ru = read_result(out), read_result(ref)
    check(np.array_equal(half_bits(rr["datasets"]["embedding"]),
                         half_bits(ru["datasets"]["embedding"])) and
          np.array_equal(rr["datasets"]["status"], inp["status"]),
          "the resumed float16 run differs from the uninterrupted one")
    print("  SIGTERM + --resume (float16) == the uninterrupted run")
    # 4. two parts merged == one run over both; float16 kept
    paths, lst = split_set(a, [8, COUNT - 8])
    whole = read_result(run_post(a, "embed.onnx", "embed_f16_whole.h5", "embed", extra=f16,
                                 set_path=lst))
    parts = [run_post(a, "embed.onnx", f"embed_f16_part{k}.h5", "embed", extra=f16, set_path=p)
             for k, p in enumerate(paths)]
    merged = os.path.join(a.dir, "embed_f16_merged.h5")
    sh([a.shardinfer, "merge", "--output", merged, "--overwrite", *parts], quiet=True)
    rm = read_result(merged)
    check(np.array_equal(half_bits(rm["datasets"]["embedding"]),
                         half_bits(whole["datasets"]["embedding"])) and
          np.array_equal(half_bits(rm["datasets"]["embedding"]), got),
          "merged float16 embeddings differ from one run over the set")
    check(rm["attrs"]["post_params"] == "embed dtype=float16", "merge lost post_params")
    part32 = run_post(a, "embed.onnx", "embed_f32_part1.h5", "embed", set_path=paths[1])
    bad = os.path.join(a.dir, "embed_mixed_merged.h5")
    p = sh([a.shardinfer, "merge", "--output", bad, "--overwrite", parts[0], part32],
           expect_rc=1, quiet=True)
    check("other settings" in p.stderr and not os.path.exists(bad),
          f"merging a float32 part with a float16 one was not refused: {p.stderr}")
    print("  2 parts merged == one run over both (float16 kept); float32 + float16 refused")
    # 5. show prints the halves' values
    p = sh([a.shardinfer, "show", os.path.join(a.dir, "embed_f16.h5"), "--limit", "1"], quiet=True)
    first = float(e16[0, 0]) if inp["ok"][0] else None
    check(first is None or f"embedding: {first:.4g} " in p.stdout, f"show: {p.stdout!r}")
    print("embed-f16: OK: numpy's float16 of the float32 embeddings, through both writers, a "
          "resume (a float32 one refused) and a merge")


def t_raw(a):
    inp = load_inputs(a)
    logits, feat = load_ort(a, "raw")
    paths = {np_: run_post(a, "raw.onnx", f"raw_np{np_}.h5", "raw", np_=np_) for np_ in (2, 1)}
    res = {np_: read_result(p) for np_, p in paths.items()}
    d = check_common(res[2], inp, "raw")
    check(set(k for k in d if k.startswith("raw/")) == {"raw/head_logits", "raw/feat"},
          f"raw datasets {[k for k in d if k.startswith('raw/')]}, expected raw/head_logits "
          f"(from 'head/logits') and raw/feat")
    for name, ref in (("raw/head_logits", logits), ("raw/feat", feat)):
        x = d[name]
        check(x.dtype == np.float32 and x.shape == (COUNT,) + ref.shape[1:],
              f"{name}: {x.dtype} {x.shape}")
        check_nan_rows(name, x.reshape(COUNT, -1), inp)
        allclose(name, ok_rows(x, inp), ref, 1e-4, 1e-5)
    same_results(res[1], res[2])
    print("raw: OK: both outputs within rtol 1e-4/atol 1e-5 of onnxruntime, NaN rows for failed "
          "images, 'head/logits' stored as raw/head_logits; -np 1 and -np 2 identical")


def t_congestion(a):
    inp = load_inputs(a)
    ort_map = load_ort(a, "congestion")[0][:, 0]  # (n_ok, 64, 64)
    kw = dict(resize=BIG_RESIZE)
    rc = read_result(run_post(a, "congestion.onnx", "congestion.h5", "congestion", **kw))
    rr = read_result(run_post(a, "congestion.onnx", "congestion_raw.h5", "raw", **kw))
    d = check_common(rc, inp, "congestion", ["k=4", "sample=0.05", "seed=12345",
                                            "canny=100,200", "blur=71", "sigma=7"])
    dr = check_common(rr, inp, "raw")
    score, mmean = d["congestion/score"], d["congestion/map_mean"]
    check(score.dtype == np.float64 and mmean.dtype == np.float64 and score.shape == (COUNT,),
          f"score {score.dtype} {score.shape}, map_mean {mmean.dtype}")
    check_nan_rows("congestion/score", score, inp)
    check_nan_rows("congestion/map_mean", mmean, inp)
    eng_map = ok_rows(dr["raw/density"], inp)[:, 0]
    allclose("engine map (--post raw) vs onnxruntime", eng_map, ort_map, 1e-4, 1e-5)
    s_ok, m_ok = ok_rows(score, inp), ok_rows(mmean, inp)
    # 1. the postprocessor on the engine's own map against the reference on that same map
    re = ref_call(a, "congestion", {"maps": eng_map})
    print(f"  reference: post_congestion_ref.py with OpenCV {re['cv']}")
    check(np.all(s_ok > 0) and len(np.unique(np.round(s_ok, 6))) > len(s_ok) // 2,
          f"the scores do not vary enough to test anything: {s_ok}")
    allclose("score vs reference on the engine's map", s_ok, re["score"], 1e-9, 0)
    allclose("map_mean vs reference on the engine's map", m_ok, re["map_mean"], 1e-9, 0)
    # 2. against the reference on onnxruntime's map: equal where the uint8 maps are (labels, and
    # so the score, depend only on them); elsewhere only rounding at a level boundary may differ
    ro = ref_call(a, "congestion", {"maps": ort_map})
    same_u8 = np.all(ro["u8"] == re["u8"], axis=(1, 2))
    same_lab = np.all(ro["labels"] == re["labels"], axis=(1, 2))
    print(f"  onnxruntime vs engine map: uint8 levels equal for {int(same_u8.sum())} of "
          f"{len(same_u8)} images, labels for {int(same_lab.sum())}")
    for i in np.nonzero(~same_u8)[0]:
        diff = np.abs(ro["u8"][i].astype(int) - re["u8"][i])
        check(diff.max() <= 1, f"ok image {i}: uint8 levels differ by {diff.max()}")
    allclose("score vs reference on onnxruntime's map (same labels)", s_ok[same_lab],
             ro["score"][same_lab], 1e-6, 0)
    allclose("map_mean vs reference on onnxruntime's map", m_ok, ro["map_mean"], 1e-6, 1e-6)
    check(same_lab.sum() >= len(same_lab) - 1,
          f"labels differ on {int((~same_lab).sum())} images between onnxruntime's and the "
          f"engine's maps: more near-ties than rounding explains")
    print("congestion: OK: scores equal the reference on the engine's maps (1e-9) and on "
          "onnxruntime's (1e-6), map means too")


def detect_rows(d, inp):
    off = d["detections/offsets"]
    check(off.dtype == np.uint64 and off.shape == (COUNT + 1,) and off[0] == 0 and
          np.all(np.diff(off.astype(np.int64)) >= 0), f"bad offsets {off}")
    n = int(off[-1])
    b, s, c = d["detections/boxes"], d["detections/scores"], d["detections/classes"]
    check(b.dtype == np.float32 and b.shape == (n, 4) and s.dtype == np.float32 and
          s.shape == (n,) and c.dtype == np.int32 and c.shape == (n,),
          f"detections: boxes {b.dtype} {b.shape}, scores {s.dtype} {s.shape}, "
          f"classes {c.dtype} {c.shape}, offsets end {n}")
    counts = np.diff(off.astype(np.int64))
    check(np.all(counts[~inp["ok"]] == 0), "a failed image has detections")
    return counts[inp["ok"]], b, s, c


def t_detect(a):
    inp = load_inputs(a)
    ort_pred = load_ort(a, "detect")[0]
    rr = read_result(run_post(a, "detect.onnx", "detect_raw.h5", "raw"))
    eng_pred = ok_rows(check_common(rr, inp, "raw")["raw/output0"], inp)
    allclose("engine head (--post raw) vs onnxruntime", eng_pred, ort_pred, 1e-4, 1e-5)
    heads = (("the engine's head", eng_pred), ("onnxruntime's head", ort_pred))
    jobs = [(name, what, pred) for name in DETECT_RUNS for what, pred in heads]
    arrays = {"jobs": len(jobs)}
    for j, (name, what, pred) in enumerate(jobs):
        arrays[f"preds{j}"] = pred
        arrays[f"params{j}"] = np.array(DETECT_RUNS[name][1:], np.float64)
    ref = ref_call(a, "detect", arrays)
    for name, (flags, thr, iou, md, agn) in DETECT_RUNS.items():
        r = read_result(run_post(a, "detect.onnx", f"detect_{name}.h5", "detect", extra=flags))
        if name == "default":  # the ragged detection lists gathered from one rank or two
            same_results(read_result(run_post(a, "detect.onnx", "detect_np1.h5", "detect",
                                              np_=1, extra=flags)), r)
        d = check_common(r, inp, "detect", [f"score_threshold={thr:g}", f"iou_threshold={iou:g}",
                                           f"max_detections={md}", f"class_agnostic={int(agn)}"])
        counts, b, s, c = detect_rows(d, inp)
        for j, (jname, what, _) in enumerate(jobs):
            if jname != name:
                continue
            rc = np.diff(ref[f"offsets{j}"])
            check(np.array_equal(counts, rc),
                  f"{name}: detections per ok image {counts.tolist()}, reference on {what} "
                  f"{rc.tolist()}")
            check(np.array_equal(c, ref[f"classes{j}"]),
                  f"{name}: classes differ from the reference on {what}")
            tol = 0 if what == "the engine's head" else 1e-4
            allclose(f"{name}: boxes vs reference on {what}", b, ref[f"boxes{j}"], 0, tol)
            allclose(f"{name}: scores vs reference on {what}", s, ref[f"scores{j}"], 0, tol)
        cand = np.array([(p[4:].max(axis=0) >= np.float32(thr)).sum() for p in eng_pred])
        print(f"  {name}: {int(counts.sum())} detections of {int(cand.sum())} candidates")
        check(np.any(counts < np.minimum(cand, md)), f"{name}: NMS suppressed nothing")
        if md < 300:
            check(counts.max() == md, f"{name}: --max-detections {md} never reached")
    how = "torchvision.ops.nms, cross-checked by numpy" if ref["torch"] else "numpy only"
    print("detect: OK: default and custom parameters; exact on the engine's head, within 1e-4 on "
          f"onnxruntime's; -np 1 and -np 2 identical (reference: {how})")


def t_bad_post(a):
    m = lambda n: os.path.join(a.dir, "models", n)
    sset, out = os.path.join(a.dir, "set.h5"), os.path.join(a.dir, "bad_post_out.h5")
    if os.path.exists(out):
        os.remove(out)
    cases = [  # (what, model, --post, exit code, strings the one message must hold)
        ("classify model, --post congestion", "classify.onnx", "congestion", 1,
         ["'logits'", "(10)", "--post congestion", "(height, width) or (1, height, width)"]),
        ("classify model, --post detect", "classify.onnx", "detect", 1,
         ["'logits'", "--post detect", "(4 + classes, anchors)"]),
        ("congestion model, --post embed", "congestion.onnx", "embed", 1,
         ["'density'", "(1, 64, 64)", "--post embed", "(dim) or (dim, 1, 1)"]),
        ("unknown --post", "classify.onnx", "segment", 2, ["segment"]),
    ]
    failures = 0
    for what, model, post, rc, must in cases:
        p = sh(["mpirun", "-np", "2", a.shardinfer, "run", "--model", m(model), "--input", sset,
                "--output", out, "--post", post, "--progress", "none"], expect_rc=None,
               timeout=60, quiet=True)
        msgs = [l for l in p.stderr.splitlines() if l.startswith("shardinfer")]
        good = p.returncode == rc and len(msgs) == 1 and all(s in msgs[0] for s in must)
        good = good and not os.path.exists(out)
        print(f"{'ok  ' if good else 'FAIL'} {what}: rc={p.returncode} (want {rc}), "
              f"{len(msgs)} message line(s): {msgs}")
        if not good:
            print(p.stderr)
            failures += 1
    check(failures == 0, f"{failures} bad --post cases misbehaved")
    print(f"bad-post: OK: {len(cases)} cases")


def t_interpolation(a):
    """--interpolation through the whole run: an Identity model under --post raw returns the
    normalized crops, which must be Pillow's to the bit."""
    import h5py
    from make_e2e_set import make_identity_model
    inp = load_inputs(a)
    with h5py.File(os.path.join(a.dir, "set.h5"), "r") as f:
        off, data = f["/images/offsets"][:], f["/images/data"][:]
    blobs = [data[off[i]:off[i + 1]].tobytes() for i in range(COUNT)]
    for name, meta in (("pixels", None), ("pixels_bicubic", "bicubic"), ("pixels_bad", "cubic")):
        make_identity_model(os.path.join(a.dir, "models", name + ".onnx"), SMALL, SMALL,
                            {"interpolation": meta} if meta else None, name)
    refs = {}
    for interp in ("bilinear", "bicubic"):
        for exact in (True, False):
            refs[interp, exact] = np.stack([reference_input(blobs[i], SMALL, SMALL_RESIZE, interp,
                                                            exact)
                                            for i in np.nonzero(inp["ok"])[0]])
    differ = np.any(refs["bilinear", True] != refs["bicubic", True], axis=(1, 2, 3))
    check(differ.sum() >= len(differ) - 1, f"only {differ.sum()} of {len(differ)} images tell "
          "the filters apart")
    runs = [  # (model, extra flags, filter expected, exact, preprocess attribute holds)
        ("pixels", ["--interpolation", "bicubic"], "bicubic", True, "interpolation=bicubic"),
        ("pixels", ["--interpolation", "bicubic"], "bicubic", False, "interpolation=bicubic"),
        ("pixels", [], "bilinear", True, None),
        ("pixels_bicubic", [], "bicubic", True, "interpolation=bicubic"),
        ("pixels_bicubic", ["--interpolation", "bilinear"], "bilinear", True, None),
    ]
    for k, (model, extra, interp, exact, attr) in enumerate(runs):
        r = read_result(run_post(a, model + ".onnx", f"interp_{k}.h5", "raw", extra=extra,
                                 exact=exact))
        d = check_common(r, inp, "raw")
        x = d["raw/pixels"]
        check(x.shape == (COUNT, 3, SMALL, SMALL), f"raw/pixels {x.shape}")
        check_nan_rows("raw/pixels", x.reshape(COUNT, -1), inp)
        bad = np.nonzero(np.any(ok_rows(x, inp) != refs[interp, exact], axis=(1, 2, 3)))[0]
        check(len(bad) == 0, f"{model} {extra} ({'exact' if exact else 'DCT-scaled'}): the "
              f"inputs of ok images {bad.tolist()} differ from Pillow's {interp.upper()}")
        pre = str(r["attrs"]["preprocess"])
        check((attr in pre) if attr else "interpolation" not in pre,
              f"preprocess attribute {pre!r}")
        print(f"  {model} {' '.join(extra) or '(no flag)'}, "
              f"{'exact' if exact else 'DCT-scaled'}: Pillow's {interp.upper()} to the bit")
    sset, out = os.path.join(a.dir, "set.h5"), os.path.join(a.dir, "interp_bad.h5")
    for model, extra, rc, must in (
            ("pixels_bad", [], 1, ["pixels_bad.onnx", "'interpolation'", "'cubic'",
                                   "bilinear or bicubic"]),
            ("pixels", ["--interpolation", "lanczos"], 2, ["--interpolation", "'lanczos'",
                                                           "bilinear or bicubic"])):
        p = sh(["mpirun", "-np", "2", a.shardinfer, "run", "--model",
                os.path.join(a.dir, "models", model + ".onnx"), "--input", sset, "--output", out,
                "--post", "raw", "--progress", "none", *extra], expect_rc=None, timeout=60,
               quiet=True)
        msgs = [l for l in p.stderr.splitlines() if l.startswith("shardinfer")]
        good = p.returncode == rc and len(msgs) == 1 and all(s in msgs[0] for s in must)
        check(good and not os.path.exists(out),
              f"{model} {extra}: rc {p.returncode} (want {rc}), messages {msgs}")
        print(f"  {model} {' '.join(extra)}: rc {rc}, {msgs[0]}")
    print(f"interpolation: OK: {len(runs)} runs give Pillow's pixels, 2 bad values refused")


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "ref":
        ref_main(*sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shardinfer", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--ref-python", default=sys.executable,
                    help="python with OpenCV and torchvision for the references")
    ap.add_argument("cmd", choices=["prepare", "classify", "embed", "embed-f16", "congestion",
                                    "raw", "detect", "bad-post", "interpolation"])
    a = ap.parse_args()
    fn = {"prepare": prepare, "classify": t_classify, "embed": t_embed, "embed-f16": t_embed_f16,
          "raw": t_raw, "congestion": t_congestion, "detect": t_detect, "bad-post": t_bad_post,
          "interpolation": t_interpolation}[a.cmd]
    try:
        fn(a)
    except Fail as e:
        sys.exit(f"FAIL: {a.cmd}: {e}")


if __name__ == "__main__":
    main()
