#!/usr/bin/env python3
"""Makes the inputs of shardinfer's end-to-end tests: a folder of real-photo JPEGs with two
hostile files among them, the status each one must get, and a tiny random-weight classifier
that runs in milliseconds, so the whole pipeline (pack, scatter, decode, infer, gather, write)
can be tested on every commit without the 18 MB EfficientNet.

Usage: make_e2e_set.py --output-dir DIR [--count 23] [--seed 7] [--tiny-model M.onnx]
  DIR/images/...          `count` JPEGs: random crops, scales, qualities, subsamplings (a few
                          progressive, one grayscale) of the skimage photos, spread over
                          images/, images/set_a/ and images/set_a/set_b/, named so that sorted
                          relative paths and the numbers in the names agree (photo_05 is
                          index 5 of the packed set);
                          photo_<count//4>_truncated.jpg: the first 55% of a valid JPEG;
                          photo_<3*count//4>_corrupt.jpg: bit flips in the entropy-coded data.
  DIR/expected_status.txt lines "relative/path<TAB>status" in sorted order (0 ok, 3 truncated,
                          4 corrupt), paths relative to DIR/images.
  --tiny-model M.onnx     input [N,3,32,32] (N symbolic) -> logits [N,10], with mean/std
                          metadata; may be given with or without --output-dir.
Every file is checked with Pillow, and with libturbojpeg (the C decoder's library) when it can
be loaded, so a test failure means shardinfer is wrong, not the data.
"""

import argparse
import ctypes
import ctypes.util
import io
import os
import shutil
import sys

import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "datasets"))
from make_demo_photos import load_rgb, photo_paths  # noqa: E402

STATUS_OK, STATUS_TRUNCATED, STATUS_CORRUPT = 0, 3, 4
TRUNCATE_FRACTION = 0.55
FOLDERS = ["", "set_a", os.path.join("set_a", "set_b")]  # a third of the files in each


# --------------------------------------------------------------------------------------------
# Decoder checks
# --------------------------------------------------------------------------------------------


def pillow_error(data):
    """None if Pillow decodes the whole image, else its error message."""
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
        return None
    except Exception as e:  # noqa: BLE001 - any failure is the answer we want to see
        return "%s: %s" % (type(e).__name__, e)


class TurboJPEG:
    """The few TurboJPEG 2.x calls needed to see what the C decoder will see. Optional: the
    checks are skipped where the library cannot be loaded."""

    STOPONWARNING = 8192  # TJFLAG_STOPONWARNING

    def __init__(self):
        name = ctypes.util.find_library("turbojpeg") or "libturbojpeg.so.0"
        lib = ctypes.CDLL(name)
        lib.tjInitDecompress.restype = ctypes.c_void_p
        lib.tjDestroy.argtypes = [ctypes.c_void_p]
        lib.tjGetErrorStr2.restype = ctypes.c_char_p
        lib.tjGetErrorStr2.argtypes = [ctypes.c_void_p]
        ip = ctypes.POINTER(ctypes.c_int)
        lib.tjDecompressHeader3.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_ulong,
                                            ip, ip, ip, ip]
        lib.tjDecompress2.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_ulong,
                                      ctypes.c_void_p] + [ctypes.c_int] * 5
        self.lib = lib

    def error(self, data, flags):
        """None on a clean decode to RGB, else TurboJPEG's message."""
        lib = self.lib
        h = lib.tjInitDecompress()
        try:
            w, ht, ss, cs = (ctypes.c_int() for _ in range(4))
            if lib.tjDecompressHeader3(h, data, len(data), ctypes.byref(w), ctypes.byref(ht),
                                       ctypes.byref(ss), ctypes.byref(cs)):
                return "header: " + lib.tjGetErrorStr2(h).decode()
            buf = ctypes.create_string_buffer(w.value * ht.value * 3)
            if lib.tjDecompress2(h, data, len(data), buf, w.value, 0, ht.value, 0, flags):
                return lib.tjGetErrorStr2(h).decode()
            return None
        finally:
            lib.tjDestroy(h)


def load_turbojpeg():
    try:
        return TurboJPEG()
    except (OSError, AttributeError):
        print("make_e2e_set: libturbojpeg not loadable; checking with Pillow only", file=sys.stderr)
        return None


def check_ok(data, tj, what):
    err = pillow_error(data)
    if err:
        sys.exit("make_e2e_set: %s should decode but Pillow says %s" % (what, err))
    if tj:
        err = tj.error(data, tj.STOPONWARNING)
        if err:
            sys.exit("make_e2e_set: %s should decode but TurboJPEG says %s" % (what, err))


def is_truncated(data, tj):
    err = pillow_error(data)
    if not err or "truncated" not in err:
        return False
    if tj:
        # The C decoder classifies libjpeg's JWRN_JPEG_EOF ("Premature end of JPEG file") as
        # truncated; make sure that is what it will see.
        err = tj.error(data, tj.STOPONWARNING)
        if not err or "Premature end of JPEG file" not in err:
            return False
    return True


def is_corrupt(data, tj):
    """A corrupt-data error, not a truncation: Pillow fails with something other than
    'truncated', and TurboJPEG fails both with and without stop-on-warning (so the file is bad
    whichever way the C code calls it) with a message that is not the end-of-file one."""
    err = pillow_error(data)
    if not err or "truncated" in err:
        return False
    if tj:
        for flags in (tj.STOPONWARNING, 0):
            err = tj.error(data, flags)
            if not err or "Premature end of JPEG file" in err:
                return False
    return True


# --------------------------------------------------------------------------------------------
# Images
# --------------------------------------------------------------------------------------------


def random_jpeg(rng, sources, gray=False):
    """A random crop of a random photo, scaled and JPEG-encoded with random settings."""
    im = sources[int(rng.integers(len(sources)))]
    w, h = im.size
    cw = int(w * rng.uniform(0.45, 1.0))
    ch = int(h * rng.uniform(0.45, 1.0))
    x0 = int(rng.integers(0, w - cw + 1))
    y0 = int(rng.integers(0, h - ch + 1))
    crop = im.crop((x0, y0, x0 + cw, y0 + ch))
    # Shorter side from below the model's input (upscaling) to well above it.
    short = int(rng.integers(90, 520))
    s = short / min(cw, ch)
    crop = crop.resize((max(16, round(cw * s)), max(16, round(ch * s))), Image.BICUBIC)
    if gray:
        crop = crop.convert("L")
    buf = io.BytesIO()
    opts = dict(quality=int(rng.integers(45, 97)),
                progressive=bool(rng.random() < 0.2))
    if not gray:
        opts["subsampling"] = ["4:4:4", "4:2:2", "4:2:0"][int(rng.integers(3))]
    crop.save(buf, "JPEG", **opts)
    return buf.getvalue()


def entropy_segment(data):
    """(start, end) of the first scan's entropy-coded bytes: after the SOS header, before EOI."""
    sos = data.find(b"\xff\xda")
    if sos < 0:
        raise ValueError("no SOS marker")
    start = sos + 2 + (data[sos + 2] << 8 | data[sos + 3])
    return start, len(data) - 2


def make_corrupt(rng, data, tj):
    """Flips a few bits in the middle of the entropy-coded data until the decoders report
    corrupt data (most single flips only garble pixels silently, which is not a detectable
    failure). Seeded, so the same file comes out every time."""
    start, end = entropy_segment(data)
    lo, hi = start + (end - start) // 5, end - (end - start) // 5
    for _ in range(1000):
        d = bytearray(data)
        for p in rng.integers(lo, hi, size=16):
            d[int(p)] ^= 1 << int(rng.integers(8))
        d = bytes(d)
        if is_corrupt(d, tj):
            return d
    sys.exit("make_e2e_set: no corrupt variant found in 1000 tries")


def make_images(out_dir, count, seed, tj):
    if count < 4:
        sys.exit("make_e2e_set: --count must be at least 4")
    img_root = os.path.join(out_dir, "images")
    if os.path.exists(img_root):
        shutil.rmtree(img_root)
    rng = np.random.default_rng(seed)
    sources = [load_rgb(p) for p in photo_paths()]
    i_trunc, i_corrupt = count // 4, (3 * count) // 4
    i_gray = count // 2
    width = max(2, len(str(count - 1)))
    per_folder = -(-count // len(FOLDERS))
    entries = []
    for i in range(count):
        folder = FOLDERS[min(i // per_folder, len(FOLDERS) - 1)]
        data = random_jpeg(rng, sources, gray=(i == i_gray))
        status, suffix = STATUS_OK, ""
        if i == i_trunc:
            check_ok(data, tj, "the source of the truncated file")
            data = data[:int(len(data) * TRUNCATE_FRACTION)]
            if not is_truncated(data, tj):
                sys.exit("make_e2e_set: the truncated file is not seen as truncated")
            status, suffix = STATUS_TRUNCATED, "_truncated"
        elif i == i_corrupt:
            check_ok(data, tj, "the source of the corrupt file")
            data = make_corrupt(rng, data, tj)
            status, suffix = STATUS_CORRUPT, "_corrupt"
        else:
            check_ok(data, tj, "image %d" % i)
        rel = os.path.join(folder, "photo_%0*d%s.jpg" % (width, i, suffix))
        path = os.path.join(img_root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        entries.append((rel.replace(os.sep, "/"), status))
    # The packed set orders files by sorted relative path; the names are built so that this is
    # also the generation order, which keeps "photo_05" == index 5.
    assert [e[0] for e in entries] == sorted(e[0] for e in entries), "names do not sort in order"
    with open(os.path.join(out_dir, "expected_status.txt"), "w", encoding="utf-8") as f:
        for rel, status in entries:
            f.write("%s\t%d\n" % (rel, status))
    print("wrote %d JPEGs under %s (index %d truncated, index %d corrupt, index %d grayscale; "
          "checked with Pillow%s)" % (count, img_root, i_trunc, i_corrupt, i_gray,
                                      " and TurboJPEG" if tj else ""))
    print("wrote %s" % os.path.join(out_dir, "expected_status.txt"))


# --------------------------------------------------------------------------------------------
# Tiny model
# --------------------------------------------------------------------------------------------

def make_identity_model(path, h, w, props=None, name="pixels"):
    """A model whose output "pixels" is its input (N, 3, h, w): under --post raw the result holds
    the normalised crops themselves. props: metadata (e.g. {"interpolation": "bicubic"})."""
    import onnx
    from onnx import TensorProto, helper
    shape = ["N", 3, h, w]
    g = helper.make_graph([helper.make_node("Identity", ["input"], ["pixels"])], name,
                          [helper.make_tensor_value_info("input", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, shape)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    if props:
        helper.set_model_props(m, props)
    onnx.save(m, path)


TINY_MEAN = [0.485, 0.456, 0.406]  # distinct per channel, so a channel-order slip shows
TINY_STD = [0.229, 0.224, 0.225]


def make_tiny_model(path, seed):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from make_ref_cases import bn_params, conv_weight, normal, uniform

    rng = np.random.default_rng(seed)
    nodes, inits = [], []

    def init(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def conv(x, name, cin, cout, k, group=1, stride=1, bias=False):
        ins = [x, init(name + ".weight", conv_weight(rng, cout, cin // group, k, k))]
        if bias:
            ins.append(init(name + ".bias", uniform(rng, (cout,), -0.1, 0.1)))
        p = k // 2
        return node("Conv", ins, name, kernel_shape=[k, k], strides=[stride, stride],
                    pads=[p, p, p, p], group=group)

    def bn(x, name, c):
        ins = [init(k, v) for k, v in bn_params(rng, c, name).items()]
        return node("BatchNormalization", [x] + ins, name, epsilon=1e-5)

    init("relu6.min", np.array(0.0, np.float32))
    init("relu6.max", np.array(6.0, np.float32))
    x = conv("input", "stem.conv", 3, 16, 3)
    x = bn(x, "stem.bn", 16)
    stem = node("Relu", [x], "stem.relu")
    x = conv(stem, "block.dw", 16, 16, 3, group=16)
    x = bn(x, "block.dw_bn", 16)
    x = node("Clip", [x, "relu6.min", "relu6.max"], "block.relu6")
    x = conv(x, "block.pw", 16, 16, 1)
    x = bn(x, "block.pw_bn", 16)
    x = node("Add", [x, stem], "block.add")
    x = node("MaxPool", [x], "pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    x = conv(x, "head.conv", 16, 32, 3, stride=2, bias=True)
    x = node("Relu", [x], "head.relu")
    x = node("GlobalAveragePool", [x], "avgpool")
    x = node("Flatten", [x], "flatten", axis=1)
    fc_w = normal(rng, (10, 32), 0.3)
    fc_b = uniform(rng, (10,), -0.1, 0.1)
    fc_w_name, fc_b_name = init("fc.weight", fc_w), init("fc.bias", fc_b)
    node("Gemm", [x, fc_w_name, fc_b_name], "logits", transB=1)

    graph = helper.make_graph(
        nodes, "tiny_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        initializer=inits)

    def build():
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="shardinfer make_e2e_set.py")
        m.ir_version = 8
        m.doc_string = "Tiny random-weight CNN for shardinfer's end-to-end tests; not a classifier."
        fmt = lambda v: ",".join("%.9g" % c for c in v)
        helper.set_model_props(m, {"mean": fmt(TINY_MEAN), "std": fmt(TINY_STD),
                                   "input_size": "32,32", "resize": "36", "color": "RGB"})
        return m

    # Calibrate the classifier on real photo crops: subtract the mean logit (random features
    # share a large common component, which would give every image the same top-1 and hide a
    # mix-up of images between ranks) and scale the rest to a spread of a few units (near-equal
    # logits would make the top-k order depend on float rounding, and CPU/GPU or 1/N-rank
    # comparisons flaky).
    probe = []
    for k in range(48):
        im = load_rgb(photo_paths()[k % len(photo_paths())])
        w, h = im.size
        c = int(min(w, h) * rng.uniform(0.3, 1.0))
        x0, y0 = int(rng.integers(0, w - c + 1)), int(rng.integers(0, h - c + 1))
        a = np.asarray(im.crop((x0, y0, x0 + c, y0 + c)).resize((32, 32), Image.BILINEAR),
                       np.float32) / 255.0
        probe.append(((a - np.float32(TINY_MEAN)) / np.float32(TINY_STD)).transpose(2, 0, 1))
    sess = ort.InferenceSession(build().SerializeToString(), providers=["CPUExecutionProvider"])
    logits = sess.run(None, {"input": np.stack(probe).astype(np.float32)})[0].astype(np.float64)
    centre = logits.mean(axis=0)
    scale = 2.0 / max(float(np.std(logits - centre)), 1e-6)
    new = {"fc.weight": fc_w * scale, "fc.bias": (fc_b - centre) * scale}
    for t in graph.initializer:
        if t.name in new:
            t.CopyFrom(numpy_helper.from_array(new[t.name].astype(np.float32), t.name))
    model = build()
    onnx.checker.check_model(model, full_check=True)
    tmp = path + ".tmp"
    onnx.save(model, tmp)
    os.replace(tmp, path)
    print("wrote %s: tiny CNN [N,3,32,32] -> [N,10], %d nodes" % (path, len(model.graph.node)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output-dir")
    ap.add_argument("--count", type=int, default=23)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--tiny-model", metavar="M.onnx")
    args = ap.parse_args()
    if not args.output_dir and not args.tiny_model:
        ap.error("give --output-dir, --tiny-model or both")
    if args.output_dir:
        os.makedirs(args.output_dir, exist_ok=True)
        make_images(args.output_dir, args.count, args.seed, load_turbojpeg())
    if args.tiny_model:
        make_tiny_model(args.tiny_model, args.seed)


if __name__ == "__main__":
    main()
