#!/usr/bin/env python3
"""Writes reference test cases for shardinfer's CPU/GPU engine in the layout of ONNX's backend
node tests: DIR/<case>/model.onnx plus DIR/<case>/test_data_set_0/input_<k>.pb and output_<k>.pb
(serialized TensorProtos named like the graph's inputs/outputs). The C test runner loads each
model, feeds the inputs and compares with the outputs.

Three sources:
  (a) ONNX's own node tests for the ops shardinfer claims, copied from the installed onnx package
      (their expected outputs come from ONNX's reference implementation);
  (b) "si_*" cases generated here with seeded random data and checked with onnxruntime's CPU
      provider, covering what the node tests miss: groups/depthwise, asymmetric pads, batch > 1,
      Conv+BN+activation chains with realistic statistics, broadcasting, a small CNN;
  (c) with --demo-model: "efficientnet_lite0_photo", two real photos preprocessed exactly as the
      C pipeline does, with onnxruntime's logits as the expected output.

Usage: make_ref_cases.py --output-dir DIR [--demo-model M.onnx]
"""

import argparse
import functools
import importlib.util
import math
import os
import re
import shutil
import sys
import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
IR_VERSION = 8

# --------------------------------------------------------------------------------------------
# Preprocessing shared with the demo case and scripts/torch_crosscheck.py
# --------------------------------------------------------------------------------------------


def preprocess(path, mean, std, resize=256, crop=224):
    """One image -> float32 CHW, exactly as shardinfer's C pipeline (io/jpeg.h) and torchvision's
    Resize(256) + CenterCrop(224) + ToTensor + Normalize compute it: RGB, shorter side to `resize`
    with Pillow's (antialiased) BILINEAR, other side int(resize*long/short), center crop with
    top = int(round((H - crop) / 2.0)), x/255, then (x - mean)/std, all in float32."""
    from PIL import Image

    with Image.open(path) as im:
        im = im.convert("RGB")
        w, h = im.size
        if w <= h:
            nw, nh = resize, int(resize * h / w)
        else:
            nw, nh = int(resize * w / h), resize
        im = im.resize((nw, nh), Image.BILINEAR)
        top = int(round((nh - crop) / 2.0))
        left = int(round((nw - crop) / 2.0))
        im = im.crop((left, top, left + crop, top + crop))
        x = np.asarray(im, dtype=np.uint8)
    x = x.astype(np.float32) / np.float32(255.0)
    x = (x - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1), dtype=np.float32)


def model_mean_std(model):
    """The "mean"/"std" metadata_props (comma-separated R,G,B in [0,1] units)."""
    props = {p.key: p.value for p in model.metadata_props}
    try:
        mean = [float(v) for v in props["mean"].split(",")]
        std = [float(v) for v in props["std"].split(",")]
    except KeyError as e:
        sys.exit("model has no %s metadata_prop" % e)
    if len(mean) != 3 or len(std) != 3:
        sys.exit("model metadata mean/std must have 3 values each")
    return mean, std


# --------------------------------------------------------------------------------------------
# (a) ONNX node tests
# --------------------------------------------------------------------------------------------

# Whole-name patterns of the node tests whose ops shardinfer implements. AveragePool is not
# claimed. Add/Clip integer variants are left out (the engine is float32 only); MaxPool is copied
# whole, uint8, 1-D and 3-D included, so the runner documents what it reports as unsupported.
NODE_TEST_PATTERNS = [
    r"test_conv_.*",            # not test_convinteger_*/test_convtranspose_* (no underscore)
    r"test_basic_conv_.*",      # not test_basic_deform_conv_*
    r"test_relu",
    r"test_clip(_.*)?",
    r"test_add", r"test_add_bcast",
    r"test_maxpool_[123]d_.*",  # not test_maxpool_with_argmax_* (second output)
    r"test_globalaveragepool(_precomputed)?",
    r"test_flatten_.*",
    r"test_gemm_.*",
    r"test_identity",           # not _opt/_sequence: optional and sequence types
    r"test_reshape_.*",
    r"test_batchnorm_epsilon", r"test_batchnorm_example",  # inference mode only
    # the engine's other ops (docs/operators.md); integer-typed variants are left out below
    r"test_averagepool_.*", r"test_sigmoid(_example)?", r"test_hardsigmoid(_.*)?",
    r"test_hardswish", r"test_leakyrelu(_.*)?", r"test_mul(_bcast|_example)?",
    r"test_sub(_bcast|_example)?", r"test_div(_bcast|_example)?", r"test_concat_.*",
    r"test_split_.*", r"test_slice(_.*)?", r"test_transpose_.*", r"test_squeeze(_.*)?",
    r"test_unsqueeze_.*", r"test_resize_.*", r"test_upsample_nearest", r"test_softmax_.*",
    r"test_matmul_.*", r"test_constant_pad(_.*)?", r"test_edge_pad", r"test_reflect_pad",
    r"test_wrap_pad", r"test_reduce_(mean|sum|max|min|l1|l2|sum_square)_.*",
    r"test_globalmaxpool(_.*)?",
    r"test_dropout_default(_ratio)?", r"test_gather_[0-9].*", r"test_gather_negative_indices",
    r"test_erf", r"test_tanh(_example)?", r"test_sqrt(_example)?", r"test_reciprocal(_example)?",
    r"test_gelu_(default|tanh)_[0-9]", r"test_pow(_.*)?",
    r"test_exp(_example)?", r"test_log(_example)?", r"test_neg(_example)?", r"test_abs",
    r"test_sin(_example)?", r"test_cos(_example)?", r"test_floor(_example)?",
    r"test_ceil(_example)?", r"test_round", r"test_sign", r"test_softplus(_example)?",
    r"test_mish(_expanded)?", r"test_(min|max)_(example|one_input|two_inputs|float32|float64)",
    r"test_isnan", r"test_isinf(_negative|_positive)?",
    # indexing; GatherND's int32 tests run as constants on the host (the tables it indexes in
    # vision transformers are constants)
    r"test_gathernd_.*", r"test_gather_elements_.*", r"test_scatter_elements_.*",
    r"test_tile(_precomputed)?",
    # Einsum: ONNX's tests are float64, so they run as constants on the host (any form, the
    # batch diagonal included); the si_einsum_* cases run the forms exporters emit on image data
    r"test_einsum_.*",
    # shape arithmetic, evaluated on the host
    r"test_shape(_.*)?", r"test_size(_example)?", r"test_constantofshape_.*", r"test_range_.*",
    r"test_equal(_bcast)?", r"test_where_.*", r"test_expand_.*", r"test_constant",
    r"test_scatternd(_add|_multiply|_max|_min)?", r"test_not_.*",
    r"test_(greater|less)_equal(_bcast)?", r"test_(and|or|xor)([234]d|_bcast.*)",
    # normalisations (vision transformers); every LayerNormalization test also asks for the
    # training outputs Mean and InvStdDev (listed unsupported), so each is also written Y only
    r"test_layer_normalization_.*", r"test_instancenorm_(epsilon|example)",
    # Attention-23 in its plain 4-D form (float mask, no causal, softcap, GQA or past key/values)
    r"test_attention_4d(_scaled|_attn_mask(_3d|_4d)?|_diff_heads_sizes(_scaled|_attn_mask)?)?",
]


def node_test_dir():
    spec = importlib.util.find_spec("onnx")
    root = os.path.dirname(spec.origin)
    d = os.path.join(root, "backend", "test", "data", "node")
    if not os.path.isdir(d):
        sys.exit("onnx package has no node test data at %s" % d)
    return d


# expanded function bodies are left out (their ops are tested on their own), but for these,
# whose bodies run the engine's ops unfused
EXPANDED_NODE_TESTS = {"test_mish_expanded"}


def wanted_node_test(name):
    if ("_expanded" in name and name not in EXPANDED_NODE_TESTS) or "training" in name:
        return False
    # float16/bfloat16 tensors and integer image data are outside what the engine claims; shape
    # arithmetic ops keep their integer tests (their inputs come from shapes in real models)
    if re.search(r"float16", name) or name.startswith(("test_reduce_sum_square",
                                                         "test_split_to_sequence")):
        return False
    if re.search(r"_u?int(8|16|32)\b|_u?int(8|16|32)_|_bool|_string", name) and not name.startswith(
            ("test_range", "test_equal", "test_where", "test_constantofshape", "test_shape",
             "test_size", "test_gathernd")):
        return False
    return any(re.fullmatch(p, name) for p in NODE_TEST_PATTERNS)


def write_y_only(test_dir):
    """<test>_y_only beside a copied node test: the same model, data and expected Y, with the
    node's extra outputs (Mean, InvStdDev) dropped, so ONNX's own reference data checks Y."""
    name = os.path.basename(test_dir) + "_y_only"
    dst = os.path.join(os.path.dirname(test_dir), name)
    if os.path.exists(dst):
        shutil.rmtree(dst)
    m = onnx.load(os.path.join(test_dir, "model.onnx"))
    keep = m.graph.output[0].name
    for nd in m.graph.node:
        del nd.output[1:]
    del m.graph.output[1:]
    assert m.graph.node[-1].output[0] == keep
    os.makedirs(dst)
    onnx.save(m, os.path.join(dst, "model.onnx"))
    for ds in os.listdir(test_dir):
        d = os.path.join(test_dir, ds)
        if not os.path.isdir(d):
            continue
        os.makedirs(os.path.join(dst, ds))
        for f in os.listdir(d):
            if f.startswith("input_") or f == "output_0.pb":
                shutil.copy(os.path.join(d, f), os.path.join(dst, ds, f))
    return name


def copy_node_tests(out_dir):
    src = node_test_dir()
    copied = []
    for name in sorted(os.listdir(src)):
        if not wanted_node_test(name):
            continue
        dst = os.path.join(out_dir, name)
        if os.path.exists(dst):
            shutil.rmtree(dst)
        shutil.copytree(os.path.join(src, name), dst)
        copied.append(name)
        if name.startswith("test_layer_normalization_"):
            copied.append(write_y_only(dst))
    print("copied %d ONNX node tests (onnx %s):" % (len(copied), onnx.__version__))
    for i in range(0, len(copied), 4):
        print("  " + "  ".join(copied[i:i + 4]))
    return copied


# --------------------------------------------------------------------------------------------
# (b) random cases checked with onnxruntime
# --------------------------------------------------------------------------------------------


def rng_for(name):
    # Seed per case (not one global stream) so adding a case never changes the others' data.
    return np.random.default_rng(zlib.crc32(name.encode()))


def nonzero(x, eps=1e-3):
    """Moves values off zero: an all-zero or zero-heavy input hides indexing bugs."""
    x = np.asarray(x, dtype=np.float32)
    small = np.abs(x) < eps
    x[small] = np.where(x[small] < 0, -eps, eps)
    return x


def uniform(rng, shape, lo=-1.0, hi=1.0):
    return nonzero(rng.uniform(lo, hi, size=shape).astype(np.float32))


def normal(rng, shape, scale=1.0):
    return nonzero((rng.standard_normal(size=shape) * scale).astype(np.float32))


def conv_weight(rng, cout, cin_per_group, kh, kw):
    # He-like scale keeps activations O(1) through chained layers.
    fan_in = cin_per_group * kh * kw
    return normal(rng, (cout, cin_per_group, kh, kw), scale=np.sqrt(2.0 / fan_in))


def bn_params(rng, c, prefix):
    """Realistic inference statistics: gamma around 1, small beta, mean within +-0.5,
    var in [0.5, 2]."""
    return {
        prefix + ".weight": uniform(rng, (c,), 0.5, 1.5),
        prefix + ".bias": uniform(rng, (c,), -0.3, 0.3),
        prefix + ".running_mean": uniform(rng, (c,), -0.5, 0.5),
        prefix + ".running_var": uniform(rng, (c,), 0.5, 2.0),
    }


# An independent float64 evaluator for the ops used in the si_* cases. onnxruntime is the
# reference, but a second, naive implementation catches the day an ORT build or an ORT
# optimisation computes something else (onnx.reference is no help here: for opset 9-13
# BatchNormalization it switches to training-mode statistics when momentum is set, and its Conv
# mishandles auto_pad with strides).

def _np_conv(x, w, b, a):
    n, _, h, wd = x.shape
    m, cg, kh, kw = w.shape
    g = a.get("group", 1)
    s = a.get("strides", [1, 1])
    d = a.get("dilations", [1, 1])
    ap = a.get("auto_pad", b"NOTSET")
    ap = ap.decode() if isinstance(ap, bytes) else ap
    ekh, ekw = (kh - 1) * d[0] + 1, (kw - 1) * d[1] + 1
    if ap in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for size, ek, st in ((h, ekh, s[0]), (wd, ekw, s[1])):
            p = max((-(-size // st) - 1) * st + ek - size, 0)
            pads.append((p // 2, p - p // 2) if ap == "SAME_UPPER" else (p - p // 2, p // 2))
        (pt, pb), (pl, pr) = pads
    elif ap == "VALID":
        pt = pb = pl = pr = 0
    else:
        pt, pl, pb, pr = a.get("pads", [0, 0, 0, 0])
    xp = np.zeros((n, x.shape[1], h + pt + pb, wd + pl + pr))
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    oh = (h + pt + pb - ekh) // s[0] + 1
    ow = (wd + pl + pr - ekw) // s[1] + 1
    out = np.zeros((n, m, oh, ow))
    mg = m // g
    for gi in range(g):
        xs = xp[:, gi * cg:(gi + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * d[0]:i * d[0] + s[0] * (oh - 1) + 1:s[0],
                           j * d[1]:j * d[1] + s[1] * (ow - 1) + 1:s[1]]
                out[:, gi * mg:(gi + 1) * mg] += np.einsum(
                    "nchw,mc->nmhw", patch, w[gi * mg:(gi + 1) * mg, :, i, j])
    if b is not None:
        out += b[None, :, None, None]
    return out


def _np_maxpool(x, a):
    k, s = a["kernel_shape"], a.get("strides", [1, 1])
    p, ceil = a.get("pads", [0, 0, 0, 0]), a.get("ceil_mode", 0)
    n, c, h, w = x.shape
    rnd = (lambda v: -(-v // 1)) if ceil else (lambda v: v // 1)
    oh = int(rnd((h + p[0] + p[2] - k[0]) / s[0])) + 1
    ow = int(rnd((w + p[1] + p[3] - k[1]) / s[1])) + 1
    if ceil:  # a window may not start inside the end padding
        oh -= (oh - 1) * s[0] >= h + p[0]
        ow -= (ow - 1) * s[1] >= w + p[1]
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * s[0] - p[0], j * s[1] - p[1]
            out[:, :, i, j] = x[:, :, max(h0, 0):min(h0 + k[0], h),
                                max(w0, 0):min(w0 + k[1], w)].max(axis=(2, 3))
    return out


def _softplus(x):
    return np.logaddexp(x, 0)


UNARY_NP = {
    "Exp": np.exp, "Log": np.log, "Neg": np.negative, "Abs": np.abs, "Sin": np.sin,
    "Cos": np.cos, "Floor": np.floor, "Ceil": np.ceil, "Round": np.round, "Sign": np.sign,
    "Softplus": _softplus, "Mish": lambda x: x * np.tanh(_softplus(x)),
    "HardSwish": lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
}


def _np_gathernd(x, idx, b):
    idx = np.where(idx < 0, idx + np.array(x.shape[b:b + idx.shape[-1]]), idx)
    bs = int(np.prod(x.shape[:b]))
    xb = x.reshape((bs,) + x.shape[b:])
    ib = idx.reshape((bs, -1, idx.shape[-1]))
    rows = [[xb[n][tuple(t)] for t in ib[n]] for n in range(bs)]
    return np.array(rows).reshape(idx.shape[:-1] + x.shape[b + idx.shape[-1]:])


def _np_gather_elements(x, idx, axis):
    # element by element: take_along_axis would need the indices' other dims to equal the data's
    y = np.empty(idx.shape, x.dtype)
    for pos in np.ndindex(*idx.shape):
        src = list(pos)
        src[axis] = idx[pos] % x.shape[axis]
        y[pos] = x[tuple(src)]
    return y


def _np_scatter_elements(x, idx, upd, axis, red):
    y = x.copy()
    idx = np.where(idx < 0, idx + x.shape[axis], idx)
    for pos in np.ndindex(*idx.shape):
        dst = list(pos)
        dst[axis] = idx[pos]
        dst = tuple(dst)
        y[dst] = {"add": y[dst] + upd[pos], "mul": y[dst] * upd[pos], "max": max(y[dst], upd[pos]),
                  "min": min(y[dst], upd[pos])}.get(red, upd[pos])
    return y


def numpy_reference(model, feeds):
    env = {}
    for t in model.graph.initializer:
        env[t.name] = numpy_helper.to_array(t)
    env.update(feeds)
    env = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in env.items()}
    for nd in model.graph.node:
        a = {at.name: helper.get_attribute_value(at) for at in nd.attribute}
        i = [env[v] if v else None for v in nd.input]
        op = nd.op_type
        if op == "Conv":
            y = _np_conv(i[0], i[1], i[2] if len(i) > 2 else None, a)
        elif op == "BatchNormalization":
            sh = (1, -1, 1, 1)
            y = ((i[0] - i[3].reshape(sh)) / np.sqrt(i[4].reshape(sh) + a.get("epsilon", 1e-5))
                 * i[1].reshape(sh) + i[2].reshape(sh))
        elif op == "LayerNormalization":
            axes = tuple(range(a.get("axis", -1) % i[0].ndim, i[0].ndim))
            d = i[0] - i[0].mean(axis=axes, keepdims=True)
            y = d / np.sqrt((d * d).mean(axis=axes, keepdims=True) + a.get("epsilon", 1e-5)) * i[1]
            if len(i) > 2 and i[2] is not None:
                y = y + i[2]
        elif op == "MatMul":
            y = i[0] @ i[1]
        elif op == "InstanceNormalization":
            axes = tuple(range(2, i[0].ndim))
            sh = (1, -1) + (1,) * len(axes)
            d = i[0] - i[0].mean(axis=axes, keepdims=True)
            y = (d / np.sqrt((d * d).mean(axis=axes, keepdims=True) + a.get("epsilon", 1e-5))
                 * i[1].reshape(sh) + i[2].reshape(sh))
        elif op == "Relu":
            y = np.maximum(i[0], 0)
        elif op == "LeakyRelu":
            y = np.where(i[0] >= 0, i[0], a.get("alpha", 0.01) * i[0])
        elif op == "Sigmoid":
            y = 1.0 / (1.0 + np.exp(-i[0]))
        elif op == "Mul":
            y = i[0] * i[1]
        elif op == "Clip":  # either bound may be absent
            y = i[0]
            if len(i) > 1 and i[1] is not None:
                y = np.maximum(y, i[1])
            if len(i) > 2 and i[2] is not None:
                y = np.minimum(y, i[2])
        elif op == "Shape":
            y = np.array(i[0].shape, np.int64)
        elif op == "Cast" and a["to"] == TensorProto.FLOAT:
            y = i[0].astype(np.float64)
        elif op == "Unsqueeze":
            y = np.expand_dims(i[0], tuple(int(v) for v in i[1]))
        elif op == "Expand":
            y = i[0] * np.ones([int(v) for v in i[1]], i[0].dtype)
        elif op == "ReduceMean":
            y = i[0].mean(axis=tuple(a["axes"]), keepdims=bool(a.get("keepdims", 1)))
        elif op == "Einsum":
            y = np.einsum(a["equation"].decode(), *i)
        elif op == "Tile":
            y = np.tile(i[0], [int(v) for v in i[1]])
        elif op == "GatherND":
            y = _np_gathernd(i[0], i[1], a.get("batch_dims", 0))
        elif op == "GatherElements":
            y = _np_gather_elements(i[0], i[1], a.get("axis", 0))
        elif op == "ScatterElements":
            red = a.get("reduction", b"none")
            y = _np_scatter_elements(i[0], i[1], i[2], a.get("axis", 0), red.decode())
        elif op in UNARY_NP:
            y = UNARY_NP[op](i[0])
        elif op == "ReduceL2":
            y = np.sqrt((i[0] * i[0]).sum(axis=tuple(int(v) for v in i[1]),
                                          keepdims=bool(a.get("keepdims", 1))))
        elif op == "IsNaN":
            y = np.isnan(i[0])
        elif op == "IsInf":
            y = ((np.isposinf(i[0]) & bool(a.get("detect_positive", 1)))
                 | (np.isneginf(i[0]) & bool(a.get("detect_negative", 1))))
        elif op == "Where":
            y = np.where(i[0], i[1], i[2])
        elif op == "HardSigmoid":
            y = np.clip(a.get("alpha", 0.2) * i[0] + a.get("beta", 0.5), 0, 1)
        elif op == "Min":
            y = functools.reduce(np.minimum, i)
        elif op == "Max":
            y = functools.reduce(np.maximum, i)
        elif op == "Add":
            y = i[0] + i[1]
        elif op == "Pow":
            y = np.power(i[0], i[1])
        elif op == "Erf":
            y = np.vectorize(math.erf)(i[0])
        elif op == "Tanh":
            y = np.tanh(i[0])
        elif op == "Sqrt":
            y = np.sqrt(i[0])
        elif op == "Reciprocal":
            y = 1.0 / i[0]
        elif op == "Gelu" and a.get("approximate", b"none") == b"tanh":
            x = i[0]
            y = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
        elif op == "Gelu":
            y = 0.5 * i[0] * (1 + np.vectorize(math.erf)(i[0] / np.sqrt(2)))
        elif op == "MaxPool":
            y = _np_maxpool(i[0], a)
        elif op == "GlobalAveragePool":
            y = i[0].mean(axis=(2, 3), keepdims=True)
        elif op == "Flatten":
            ax = a.get("axis", 1)
            y = i[0].reshape(int(np.prod(i[0].shape[:ax])), -1)
        elif op == "Reshape":
            y = i[0].reshape([i[0].shape[k] if v == 0 else int(v) for k, v in enumerate(i[1])])
        elif op == "Transpose":
            y = np.transpose(i[0], a["perm"])
        elif op == "Split":  # equal parts (the packed QKV projection's three)
            for name, part in zip(nd.output, np.split(i[0], len(nd.output), axis=a.get("axis", 0))):
                env[name] = part
            continue
        elif op == "Concat":
            y = np.concatenate(i, axis=a["axis"])
        elif op == "Squeeze":
            y = np.squeeze(i[0], axis=tuple(int(v) for v in i[1]))
        elif op == "Slice":
            sl = [slice(None)] * i[0].ndim
            steps = i[4] if len(i) > 4 and i[4] is not None else [1] * len(i[1])
            for st, en, ax, sp in zip(i[1], i[2], i[3], steps):
                sl[int(ax)] = slice(int(st), int(en), int(sp))
            y = i[0][tuple(sl)]
        elif op == "Gather":
            y = np.take(i[0], i[1], axis=a.get("axis", 0))
        elif op == "Div":
            y = i[0] / i[1]
        elif op == "Softmax":
            e = np.exp(i[0] - i[0].max(axis=a.get("axis", -1), keepdims=True))
            y = e / e.sum(axis=a.get("axis", -1), keepdims=True)
        elif op == "Gemm":
            A = i[0].T if a.get("transA", 0) else i[0]
            B = i[1].T if a.get("transB", 0) else i[1]
            y = a.get("alpha", 1.0) * (A @ B)
            if len(i) > 2 and i[2] is not None:
                y = y + a.get("beta", 1.0) * i[2]
        else:
            raise NotImplementedError(op)
        env[nd.output[0]] = y
    return [env[o.name] for o in model.graph.output]


def crosscheck(name, model, feeds, results, tol=1e-5):
    for o, want, got in zip(model.graph.output, numpy_reference(model, feeds), results):
        if want.shape != got.shape:
            raise RuntimeError("%s: onnxruntime gives %s %s, numpy %s"
                               % (name, o.name, got.shape, want.shape))
        rel = float(np.max(np.abs(want - got)) / max(np.max(np.abs(want)), 1e-12))
        if rel > tol:
            raise RuntimeError("%s: onnxruntime and numpy differ on %s: rel %.3g" % (name, o.name, rel))


class Case:
    """Accumulates nodes, graph inputs (fed data) and initializers (weights) of one model."""

    def __init__(self, name):
        self.name = name
        self.rng = rng_for(name)
        self.nodes, self.inits, self.inputs, self.feeds = [], [], [], {}
        self.outputs = []
        self.more_feeds = []  # further data sets (another batch), each checked like the first
        self.opset = OPSET  # a case of a newer op (LayerNormalization: 17, Gelu: 20) raises it

    def input(self, name, value, dims=None):
        value = np.asarray(value)
        dt = helper.np_dtype_to_tensor_dtype(value.dtype)
        self.inputs.append(helper.make_tensor_value_info(name, dt, dims or list(value.shape)))
        self.feeds[name] = value
        return name

    def init(self, name, value):
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op, ins, outs, name=None, **attrs):
        self.nodes.append(helper.make_node(op, ins, outs, name=name or outs[0], **attrs))
        return outs[0]

    def output(self, name):
        self.outputs.append(name)

    def run(self, m, feeds):
        import onnxruntime as ort

        so = ort.SessionOptions()
        # The plain op-by-op computation is the reference: no fusion of Conv+BN etc.
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        results = sess.run(self.outputs, feeds)
        for o, r in zip(self.outputs, results):
            if not np.all(np.isfinite(r)):
                raise RuntimeError("%s: non-finite output %s" % (self.name, o))
        return results

    def conv(self, x, prefix, cin, cout, k, group=1, bias=True, **attrs):
        kh, kw = (k, k) if isinstance(k, int) else k
        w = self.init(prefix + ".weight", conv_weight(self.rng, cout, cin // group, kh, kw))
        ins = [x, w]
        if bias:
            ins.append(self.init(prefix + ".bias", uniform(self.rng, (cout,), -0.2, 0.2)))
        if "kernel_shape" not in attrs:
            attrs["kernel_shape"] = [kh, kw]
        if attrs["kernel_shape"] is None:
            del attrs["kernel_shape"]
        return self.node("Conv", ins, [prefix + "_out"], name=prefix, group=group, **attrs)

    def bn(self, x, prefix, c, eps=1e-5):
        p = bn_params(self.rng, c, prefix)
        ins = [self.init(k, v) for k, v in p.items()]
        return self.node("BatchNormalization", [x] + ins, [prefix + "_out"], name=prefix,
                         epsilon=eps)

    def clip(self, x, name, lo=0.0, hi=6.0):
        mn = self.init(name + ".min", np.array(lo, np.float32))
        mx = self.init(name + ".max", np.array(hi, np.float32))
        return self.node("Clip", [x, mn, mx], [name + "_out"], name=name)

    def relu(self, x, name):
        return self.node("Relu", [x], [name + "_out"], name=name)

    def model(self):
        import onnxruntime as ort

        # Output shapes come from onnxruntime's result, so every output ends up fully typed; the
        # checker runs once they are there (it refuses shapeless outputs).
        proto_outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in self.outputs]
        graph = helper.make_graph(self.nodes, self.name, self.inputs, proto_outs,
                                  initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                              producer_name="shardinfer make_ref_cases.py")
        m.ir_version = max(IR_VERSION, helper.find_min_ir_version_for(m.opset_import))
        results = self.run(m, self.feeds)
        del graph.output[:]
        for o, r in zip(self.outputs, results):
            graph.output.append(helper.make_tensor_value_info(o, TensorProto.FLOAT, list(r.shape)))
        m.graph.CopyFrom(graph)
        onnx.checker.check_model(m, full_check=True)
        return m, results


def write_case(out_dir, name, model, feeds, outputs, set_index=0):
    """feeds: ordered {input name: array} in graph input order; outputs: list matching
    graph.output. A set_index > 0 adds test_data_set_<set_index> beside the first."""
    d = os.path.join(out_dir, name)
    if os.path.exists(d) and set_index == 0:
        shutil.rmtree(d)
    data = os.path.join(d, "test_data_set_%d" % set_index)
    os.makedirs(data)
    if set_index == 0:
        onnx.save(model, os.path.join(d, "model.onnx"))
    names = [i.name for i in model.graph.input]
    assert names == list(feeds), (names, list(feeds))
    for k, n in enumerate(names):
        with open(os.path.join(data, "input_%d.pb" % k), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(feeds[n]), n).SerializeToString())
    for k, (o, r) in enumerate(zip(model.graph.output, outputs)):
        with open(os.path.join(data, "output_%d.pb" % k), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(r), o.name).SerializeToString())


# Each c_<name> builder fills one Case, written as si_<name>; the name says what it covers.
# Conv cases use batch 3.

def c_conv_3x3_pad1_bias(c):
    x = c.input("images", uniform(c.rng, (3, 4, 9, 11)))
    c.output(c.conv(x, "conv1", 4, 8, 3, pads=[1, 1, 1, 1]))


def c_conv_3x3_stride2_nobias(c):
    x = c.input("features", normal(c.rng, (3, 6, 10, 13)))
    c.output(c.conv(x, "conv_down", 6, 10, 3, bias=False, strides=[2, 2], pads=[1, 1, 1, 1]))


def c_conv_5x5_asym_pads(c):
    x = c.input("features", uniform(c.rng, (3, 5, 12, 9)))
    c.output(c.conv(x, "conv5", 5, 7, 5, pads=[1, 2, 2, 0]))


def c_conv_tf_same_stride2_pads(c):
    # What TF "SAME" with stride 2 gives on even inputs: nothing top/left, one row/col after.
    x = c.input("images", uniform(c.rng, (3, 3, 32, 32)))
    c.output(c.conv(x, "stem_conv", 3, 16, 3, bias=False, strides=[2, 2], pads=[0, 0, 1, 1]))


def c_conv_group2_dilation2(c):
    x = c.input("features", normal(c.rng, (3, 8, 15, 14)))
    c.output(c.conv(x, "conv_grouped", 8, 12, 3, group=2, dilations=[2, 2], pads=[2, 2, 2, 2]))


def c_conv_group4_stride2_nobias(c):
    x = c.input("features", normal(c.rng, (3, 16, 11, 11)))
    c.output(c.conv(x, "conv_g4", 16, 16, 3, group=4, bias=False, strides=[2, 2],
                    pads=[1, 1, 1, 1]))


def c_conv_depthwise_3x3(c):
    x = c.input("features", normal(c.rng, (3, 24, 14, 14)))
    c.output(c.conv(x, "dw_conv", 24, 24, 3, group=24, pads=[1, 1, 1, 1]))


def c_conv_depthwise_3x3_stride2_asym(c):
    x = c.input("features", normal(c.rng, (3, 32, 16, 16)))
    c.output(c.conv(x, "dw_conv_s2", 32, 32, 3, group=32, bias=False, strides=[2, 2],
                    pads=[0, 0, 1, 1]))


def c_conv_depthwise_5x5_stride2_asym(c):
    x = c.input("features", normal(c.rng, (3, 20, 14, 14)))
    c.output(c.conv(x, "dw_conv5_s2", 20, 20, 5, group=20, bias=False, strides=[2, 2],
                    pads=[1, 1, 2, 2]))


def c_conv_depthwise_multiplier2(c):
    x = c.input("features", normal(c.rng, (3, 6, 9, 9)))
    c.output(c.conv(x, "dw_conv_x2", 6, 12, 3, group=6, pads=[1, 1, 1, 1]))


def c_conv_depthwise_dilation2(c):
    x = c.input("features", normal(c.rng, (3, 10, 13, 13)))
    c.output(c.conv(x, "dw_conv_dil", 10, 10, 3, group=10, dilations=[2, 2], pads=[2, 2, 2, 2]))


def c_conv_autopad_same_upper_stride2(c):
    x = c.input("features", uniform(c.rng, (3, 4, 10, 11)))
    c.output(c.conv(x, "conv_same_upper", 4, 6, 4, strides=[2, 2], auto_pad="SAME_UPPER"))


def c_conv_autopad_same_lower_stride2(c):
    x = c.input("features", uniform(c.rng, (3, 4, 10, 11)))
    c.output(c.conv(x, "conv_same_lower", 4, 6, 4, strides=[2, 2], auto_pad="SAME_LOWER"))


def c_conv_autopad_same_upper_depthwise(c):
    x = c.input("features", uniform(c.rng, (3, 8, 12, 12)))
    c.output(c.conv(x, "dw_same_upper", 8, 8, 3, group=8, bias=False, strides=[2, 2],
                    auto_pad="SAME_UPPER"))


def c_conv_autopad_valid(c):
    x = c.input("features", uniform(c.rng, (3, 4, 10, 11)))
    c.output(c.conv(x, "conv_valid", 4, 5, 3, strides=[2, 1], auto_pad="VALID"))


def c_conv_1x1_pointwise(c):
    x = c.input("features", normal(c.rng, (3, 32, 7, 7)))
    c.output(c.conv(x, "pw_conv", 32, 48, 1))


def c_conv_rect_kernel(c):
    x = c.input("features", normal(c.rng, (3, 5, 12, 10)))
    c.output(c.conv(x, "conv_3x1", 5, 6, (3, 1), strides=[2, 1], dilations=[1, 2],
                    pads=[1, 0, 1, 0]))


def c_conv_no_kernel_shape_attr(c):
    # kernel_shape is optional in ONNX: the engine must take it from W.
    x = c.input("features", normal(c.rng, (3, 4, 8, 8)))
    c.output(c.conv(x, "conv_noks", 4, 6, 3, pads=[1, 1, 1, 1], kernel_shape=None))


def c_conv_wide(c):
    # Enough channels and pixels to cross any blocking/tiling boundary of the engine.
    x = c.input("features", normal(c.rng, (3, 40, 15, 15)))
    c.output(c.conv(x, "conv_wide", 40, 72, 3, strides=[1, 1], pads=[1, 1, 1, 1]))


def c_conv_bn_relu(c):
    x = c.input("images", uniform(c.rng, (3, 3, 16, 16)))
    y = c.conv(x, "features.0", 3, 16, 3, bias=False, pads=[1, 1, 1, 1])
    y = c.bn(y, "features.1", 16)
    c.output(c.relu(y, "features.2"))


def c_conv_bias_bn_relu_stride2(c):
    x = c.input("features", normal(c.rng, (3, 8, 13, 13)))
    y = c.conv(x, "layer1.conv", 8, 12, 3, strides=[2, 2], pads=[1, 1, 1, 1])
    y = c.bn(y, "layer1.bn", 12, eps=1e-3)
    c.output(c.relu(y, "layer1.relu"))


def c_conv_depthwise_bn_relu(c):
    x = c.input("features", normal(c.rng, (3, 16, 10, 10)))
    y = c.conv(x, "block.dw", 16, 16, 3, group=16, bias=False, pads=[1, 1, 1, 1])
    y = c.bn(y, "block.dw_bn", 16, eps=1e-3)
    c.output(c.relu(y, "block.relu"))


def c_conv_clip6(c):
    x = c.input("features", normal(c.rng, (3, 8, 9, 9), scale=2.0))
    y = c.conv(x, "conv_act", 8, 8, 3, pads=[1, 1, 1, 1])
    c.output(c.clip(y, "relu6"))


def c_conv_stem_hardswish(c):
    # LeViT's stem cut small: three narrow convs at stride 2, each with a HardSwish cuDNN cannot
    # fuse (the GPU's narrow-channel kernel applies it, cuda/narrowconv.cu)
    c.opset = 14  # HardSwish
    x = c.input("images", uniform(c.rng, (3, 3, 24, 24)))
    y = x
    for i, (cin, cout) in enumerate(((3, 16), (16, 32), (32, 64))):
        y = c.conv(y, "stem.%d.c" % i, cin, cout, 3, strides=[2, 2], pads=[1, 1, 1, 1])
        y = c.node("HardSwish", [y], ["stem.%d.act" % i], name="stem.%d.act" % i)
    c.output(y)


def c_conv_narrow_residual_relu(c):
    x = c.input("features", normal(c.rng, (3, 24, 9, 10)))
    y = c.conv(x, "block.conv", 24, 24, 3, pads=[1, 1, 1, 1])
    y = c.node("Add", [y, x], ["block.add"], name="block.add")
    c.output(c.relu(y, "block.relu"))


def c_conv_bn_clip6_depthwise(c):
    x = c.input("features", normal(c.rng, (3, 24, 12, 12), scale=2.0))
    y = c.conv(x, "_depthwise_conv", 24, 24, 5, group=24, bias=False, strides=[2, 2],
               pads=[1, 1, 2, 2])
    y = c.bn(y, "_bn1", 24, eps=1e-3)
    c.output(c.clip(y, "relu6"))


def c_maxpool_3x3_s2_p1(c):
    x = c.input("features", normal(c.rng, (3, 8, 14, 15)))
    c.output(c.node("MaxPool", [x], ["pooled"], kernel_shape=[3, 3], strides=[2, 2],
                    pads=[1, 1, 1, 1]))


def c_maxpool_3x3_s2_ceil(c):
    # 10 -> floor((10-3)/2)+1 = 4 but ceil gives 5: the last window hangs over the edge.
    x = c.input("features", normal(c.rng, (3, 6, 10, 12)))
    c.output(c.node("MaxPool", [x], ["pooled"], kernel_shape=[3, 3], strides=[2, 2],
                    ceil_mode=1))


def c_maxpool_2x2_s2(c):
    x = c.input("features", normal(c.rng, (3, 5, 8, 9)))
    c.output(c.node("MaxPool", [x], ["pooled"], kernel_shape=[2, 2], strides=[2, 2]))


def c_maxpool_negative_inputs_padded(c):
    # All-negative input: a pad value of 0 instead of -inf would show up at the borders.
    x = c.input("features", uniform(c.rng, (3, 4, 7, 7), -2.0, -0.1))
    c.output(c.node("MaxPool", [x], ["pooled"], kernel_shape=[3, 3], strides=[1, 1],
                    pads=[1, 1, 1, 1]))


def c_globalaveragepool(c):
    x = c.input("features", normal(c.rng, (3, 16, 7, 7)))
    c.output(c.node("GlobalAveragePool", [x], ["pooled"]))


def c_globalaveragepool_nonsquare(c):
    x = c.input("features", uniform(c.rng, (2, 5, 5, 9)))
    c.output(c.node("GlobalAveragePool", [x], ["pooled"]))


def c_gemm_transB_bias_n(c):
    a = c.input("flat", normal(c.rng, (3, 20)))
    w = c.init("fc.weight", normal(c.rng, (10, 20), 0.3))
    b = c.init("fc.bias", uniform(c.rng, (10,)))
    c.output(c.node("Gemm", [a, w, b], ["logits"], name="fc", transB=1))


def c_gemm_transA_alpha_beta_c1n(c):
    a = c.input("features_t", normal(c.rng, (12, 4)))  # [K, M], used transposed
    w = c.init("proj.weight", normal(c.rng, (12, 7), 0.3))
    b = c.init("proj.bias", uniform(c.rng, (1, 7)))
    c.output(c.node("Gemm", [a, w, b], ["proj_out"], name="proj", transA=1, alpha=0.75,
                    beta=1.5))


def c_gemm_c_mn(c):
    a = c.input("x", normal(c.rng, (5, 6)))
    w = c.init("dense.weight", normal(c.rng, (6, 8), 0.3))
    b = c.init("dense.bias_full", uniform(c.rng, (5, 8)))
    c.output(c.node("Gemm", [a, w, b], ["dense_out"], name="dense", alpha=2.0, beta=0.5))


def c_gemm_transA_transB(c):
    a = c.input("x_t", normal(c.rng, (9, 3)))
    w = c.init("head.weight", normal(c.rng, (11, 9), 0.3))
    b = c.init("head.bias", uniform(c.rng, (11,)))
    c.output(c.node("Gemm", [a, w, b], ["head_out"], name="head", transA=1, transB=1, alpha=1.25))


def c_gemm_no_c(c):
    a = c.input("x", normal(c.rng, (4, 16)))
    w = c.init("classifier.weight", normal(c.rng, (10, 16), 0.3))
    c.output(c.node("Gemm", [a, w], ["scores"], name="classifier", transB=1))


def c_add_bcast_channel(c):
    x = c.input("features", normal(c.rng, (3, 6, 5, 7)))
    b = c.init("channel_bias", uniform(c.rng, (1, 6, 1, 1)))
    c.output(c.node("Add", [x, b], ["biased"]))


def c_add_scalar(c):
    x = c.input("features", normal(c.rng, (3, 4, 5, 5)))
    s = c.init("offset", np.array(0.625, np.float32))
    c.output(c.node("Add", [x, s], ["shifted"]))


def c_add_two_inputs(c):
    x = c.input("branch_a", normal(c.rng, (3, 8, 6, 6)))
    y = c.input("branch_b", normal(c.rng, (3, 8, 6, 6)))
    c.output(c.node("Add", [x, y], ["merged"]))


def c_add_two_inputs_bcast(c):
    x = c.input("features", normal(c.rng, (3, 8, 6, 6)))
    y = c.input("per_channel", normal(c.rng, (1, 8, 1, 1)))
    c.output(c.node("Add", [x, y], ["merged"]))


def c_flatten_axis1(c):
    x = c.input("pooled", normal(c.rng, (3, 16, 1, 1)))
    c.output(c.node("Flatten", [x], ["flat"], axis=1))


def c_flatten_axis2(c):
    x = c.input("features", normal(c.rng, (3, 4, 5, 6)))
    c.output(c.node("Flatten", [x], ["flat"], axis=2))


def c_reshape_zero_neg1(c):
    x = c.input("features", normal(c.rng, (3, 8, 2, 2)))
    s = c.init("flat_shape", np.array([0, -1], np.int64))
    c.output(c.node("Reshape", [x, s], ["flat"]))


def c_reshape_zero_zero_neg1(c):
    x = c.input("features", normal(c.rng, (3, 4, 5, 6)))
    s = c.init("merge_hw", np.array([0, 0, -1], np.int64))
    c.output(c.node("Reshape", [x, s], ["merged_hw"]))


def c_reshape_explicit(c):
    x = c.input("features", normal(c.rng, (3, 12)))
    s = c.init("to_nchw", np.array([3, 3, 2, 2], np.int64))
    c.output(c.node("Reshape", [x, s], ["nchw"]))


def c_small_cnn(c):
    """conv-bn-relu stem, depthwise conv-bn-clip, pointwise conv-bn with a residual add, conv-bn-
    relu, maxpool, conv-relu, GlobalAveragePool, Flatten, Gemm: batch 4, 10 classes."""
    x = c.input("images", uniform(c.rng, (4, 3, 20, 20)))
    y = c.conv(x, "stem.conv", 3, 8, 3, bias=False, strides=[2, 2], pads=[0, 0, 1, 1])
    y = c.bn(y, "stem.bn", 8)
    stem = c.relu(y, "stem.relu")
    y = c.conv(stem, "block1.dw", 8, 8, 3, group=8, bias=False, pads=[1, 1, 1, 1])
    y = c.bn(y, "block1.dw_bn", 8, eps=1e-3)
    y = c.clip(y, "block1.relu6")
    y = c.conv(y, "block1.pw", 8, 8, 1, bias=False)
    y = c.bn(y, "block1.pw_bn", 8, eps=1e-3)
    y = c.node("Add", [y, stem], ["block1.out"], name="block1.add")
    y = c.conv(y, "layer2.conv", 8, 16, 3, bias=False, pads=[1, 1, 1, 1])
    y = c.bn(y, "layer2.bn", 16)
    y = c.relu(y, "layer2.relu")
    y = c.node("MaxPool", [y], ["layer2.pool"], kernel_shape=[3, 3], strides=[2, 2],
               pads=[1, 1, 1, 1])
    y = c.conv(y, "layer3.conv", 16, 32, 1)
    y = c.relu(y, "layer3.relu")
    y = c.node("GlobalAveragePool", [y], ["avgpool"])
    y = c.node("Flatten", [y], ["flatten"], axis=1)
    w = c.init("fc.weight", normal(c.rng, (10, 32), 0.3))
    b = c.init("fc.bias", uniform(c.rng, (10,), -0.1, 0.1))
    c.output(c.node("Gemm", [y, w, b], ["logits"], name="fc", transB=1))


# Depthwise convs for the CUDA backend's own kernel (cuda/dwconv.cu): its specialised 3/5/7-wide
# kernels at strides 1 and 2, the generic one, 16-byte channel vectors and the scalar path (C
# not a multiple of 8 halves or 4 floats), partial tiles, asymmetric pads, a residual; and the
# producer -> depthwise chains of MobileNet and EfficientNet blocks, where the producer's bias and
# activation are applied by the depthwise conv as it loads its input (prologue fusion). On the
# CPU they are plain cases; the GPU parity tests hold the CUDA backend to the CPU on them.

def c_dwconv_3x3_s1_c64(c):
    x = c.input("features", normal(c.rng, (3, 64, 19, 21)))
    c.output(c.conv(x, "dw3", 64, 64, 3, group=64, pads=[1, 1, 1, 1]))


def c_dwconv_3x3_s2_c48_nobias(c):
    x = c.input("features", normal(c.rng, (3, 48, 17, 16)))
    c.output(c.conv(x, "dw3_s2", 48, 48, 3, group=48, bias=False, strides=[2, 2],
                    pads=[1, 1, 1, 1]))


def c_dwconv_5x5_s2_c32_asym(c):
    x = c.input("features", normal(c.rng, (3, 32, 15, 18)))
    c.output(c.conv(x, "dw5_s2", 32, 32, 5, group=32, strides=[2, 2], pads=[1, 2, 2, 1]))


def c_dwconv_7x7_s1_c16_asym(c):
    x = c.input("features", normal(c.rng, (3, 16, 11, 13)))
    c.output(c.conv(x, "dw7", 16, 16, 7, group=16, pads=[3, 2, 2, 4]))


def c_dwconv_3x3_c13(c):
    # 13 channels: no vector width divides them, every type takes the scalar path
    x = c.input("features", normal(c.rng, (3, 13, 10, 12)))
    c.output(c.conv(x, "dw3_c13", 13, 13, 3, group=13, pads=[1, 1, 1, 1]))


def c_dwconv_5x5_s2_c12(c):
    # 12 channels: vectors of 4 floats in FP32, scalars in FP16
    x = c.input("features", normal(c.rng, (3, 12, 13, 11)))
    c.output(c.conv(x, "dw5_c12", 12, 12, 5, group=12, strides=[2, 2], pads=[2, 2, 2, 2]))


def c_dwconv_3x4_stride1x3_generic(c):
    # a width and stride with no specialised kernel: the generic one
    x = c.input("features", normal(c.rng, (3, 24, 9, 14)))
    c.output(c.conv(x, "dw3x4", 24, 24, (3, 4), group=24, strides=[1, 3], pads=[1, 2, 0, 1]))


def c_dwconv_residual_relu(c):
    x = c.input("features", normal(c.rng, (3, 32, 10, 10)))
    y = c.conv(x, "dw_res", 32, 32, 3, group=32, pads=[1, 1, 1, 1])
    y = c.node("Add", [y, x], ["dw_res_add"], name="dw_res_add")
    c.output(c.relu(y, "dw_res_relu"))


def c_pw_clip6_dw_chain(c):
    """MobileNetV2's inverted residual: expand 1x1 + BN + ReLU6, depthwise 3x3 + BN + ReLU6,
    project 1x1 + BN, with the block's residual."""
    x = c.input("features", normal(c.rng, (3, 16, 14, 14)))
    y = c.conv(x, "block.expand", 16, 96, 1, bias=False)
    y = c.bn(y, "block.expand_bn", 96)
    y = c.clip(y, "block.expand_relu6")
    y = c.conv(y, "block.dw", 96, 96, 3, group=96, bias=False, pads=[1, 1, 1, 1])
    y = c.bn(y, "block.dw_bn", 96)
    y = c.clip(y, "block.dw_relu6")
    y = c.conv(y, "block.project", 96, 16, 1, bias=False)
    y = c.bn(y, "block.project_bn", 16)
    c.output(c.node("Add", [y, x], ["block.out"], name="block.add"))


def silu(c, x, name):
    s = c.node("Sigmoid", [x], [name + ".sigmoid_out"], name=name + ".sigmoid")
    return c.node("Mul", [x, s], [name + "_out"], name=name)


def c_pw_silu_dw_chain(c):
    """EfficientNet's MBConv: expand 1x1 + BN + SiLU (Sigmoid * Mul), depthwise 5x5 stride 2 +
    BN + SiLU."""
    x = c.input("features", normal(c.rng, (3, 16, 13, 13)))
    y = c.conv(x, "mb.expand", 16, 64, 1, bias=False)
    y = c.bn(y, "mb.expand_bn", 64, eps=1e-3)
    y = silu(c, y, "mb.expand_silu")
    y = c.conv(y, "mb.dw", 64, 64, 5, group=64, bias=False, strides=[2, 2], pads=[2, 2, 2, 2])
    y = c.bn(y, "mb.dw_bn", 64, eps=1e-3)
    c.output(silu(c, y, "mb.dw_silu"))


def c_stem_clip6_dw_chain(c):
    # the first conv (3 input channels, padded to 8 on the GPU in FP16) as the producer
    x = c.input("images", uniform(c.rng, (3, 3, 24, 24)))
    y = c.conv(x, "stem", 3, 32, 3, bias=False, strides=[2, 2], pads=[1, 1, 1, 1])
    y = c.bn(y, "stem_bn", 32)
    y = c.clip(y, "stem_relu6")
    y = c.conv(y, "dw", 32, 32, 3, group=32, bias=False, pads=[1, 1, 1, 1])
    y = c.bn(y, "dw_bn", 32)
    c.output(c.clip(y, "dw_relu6"))


def c_pw_nobias_leakyrelu_dw_chain(c):
    # a producer with an activation but no bias; 40 channels: 5 vectors of 8 halves
    x = c.input("features", normal(c.rng, (3, 8, 12, 11)))
    y = c.conv(x, "pw", 8, 40, 1, bias=False)
    y = c.node("LeakyRelu", [y], ["pw_lrelu_out"], name="pw_lrelu", alpha=0.1)
    y = c.conv(y, "dw", 40, 40, 3, group=40, strides=[2, 2], pads=[0, 0, 1, 1])
    c.output(c.relu(y, "dw_relu"))


def c_pw_relu_dw_shared_input(c):
    # the producer's output is also the depthwise conv's residual: two readers, so it must be
    # written activated (no prologue fusion)
    x = c.input("features", normal(c.rng, (3, 8, 10, 10)))
    y = c.conv(x, "pw", 8, 32, 1)
    y = c.relu(y, "pw_relu")
    d = c.conv(y, "dw", 32, 32, 3, group=32, pads=[1, 1, 1, 1])
    c.output(c.node("Add", [d, y], ["dw_add"], name="dw_add"))


def c_dwconv_5x5_s1_c40_tiles_silu_chain(c):
    """An image larger than one tile of the register-blocked kernel, tiles cut at both edges, a
    channel slice half past C (40), and a SiLU producer applied as the tile is loaded."""
    x = c.input("features", normal(c.rng, (2, 8, 37, 33)))
    y = c.conv(x, "pw", 8, 40, 1, bias=False)
    y = c.bn(y, "pw_bn", 40, eps=1e-3)
    y = silu(c, y, "pw_silu")
    y = c.conv(y, "dw5", 40, 40, 5, group=40, bias=False, pads=[2, 1, 2, 3])
    y = c.bn(y, "dw5_bn", 40, eps=1e-3)
    c.output(silu(c, y, "dw5_silu"))


def c_dwconv_3x3_s2_c24_tiles(c):
    # several tiles at stride 2 over odd sizes, 24 channels (the slice's last 8 idle)
    x = c.input("features", normal(c.rng, (2, 24, 45, 39)))
    c.output(c.conv(x, "dw3_s2", 24, 24, 3, group=24, strides=[2, 2], pads=[1, 0, 0, 1]))


def c_dwconv_5x5_s1_residual_clip(c):
    x = c.input("features", normal(c.rng, (2, 64, 9, 7)))
    y = c.conv(x, "dw5_res", 64, 64, 5, group=64, pads=[2, 2, 2, 2])
    y = c.node("Add", [y, x], ["dw5_res_add"], name="dw5_res_add")
    c.output(c.clip(y, "dw5_res_clip", 0.0, 6.0))


# LayerNormalization (opset 17) as vision transformers use it: (N, tokens, D) rows, the mean
# offset from 0 so the statistics' rounding shows; InstanceNormalization on NCHW

def layernorm(c, x, name, shape, bias=True, **attrs):
    c.opset = 17
    ins = [x, c.init(name + ".scale", uniform(c.rng, shape, 0.5, 1.5))]
    if bias:
        ins.append(c.init(name + ".bias", uniform(c.rng, shape, -0.5, 0.5)))
    return c.node("LayerNormalization", ins, [name + "_out"], name=name, **attrs)


def c_layernorm_vit_last_axis_bias(c):
    x = c.input("tokens", normal(c.rng, (2, 197, 64)) + 3.0)
    c.output(layernorm(c, x, "ln", (64,)))


def c_layernorm_deit_width(c):
    # DeiT-S's and DINOv2-S's 384-wide rows: in FP16 and BF16 the GPU gives each row 16 lanes
    # (three 16-byte chunks each, two rows a warp); in FP32 32 lanes
    x = c.input("tokens", normal(c.rng, (2, 37, 384), 2.0) + 5.0)
    c.output(layernorm(c, x, "ln", (384,)))


def c_layernorm_wide(c):
    # EVA-02's 2048-wide LayerNorm inside its MLP and a 3072-wide one: wider than a warp holds,
    # so the GPU gives each row a block (two 16-byte chunks a thread; FP32: 768 threads)
    x = c.input("hidden", normal(c.rng, (2, 9, 2048), 2.0) + 1.0)
    c.output(layernorm(c, x, "ln", (2048,)))
    h = c.input("wider", normal(c.rng, (3, 5, 3072)) - 2.0)
    c.output(layernorm(c, h, "ln_w", (3072,), bias=False))


def c_layernorm_vit_last_axis_nobias_eps(c):
    x = c.input("tokens", normal(c.rng, (2, 197, 64), 4.0) - 1.0)
    c.output(layernorm(c, x, "ln", (64,), bias=False, epsilon=1e-6))


def c_layernorm_last_two_axes(c):
    x = c.input("tokens", normal(c.rng, (3, 17, 48)) + 0.5)
    c.output(layernorm(c, x, "ln", (17, 48), axis=1))


def c_layernorm_negative_axis_4d(c):
    # axis -2 of (N, C, H, W): rows over (H, W)
    x = c.input("features", normal(c.rng, (2, 8, 7, 9)))
    c.output(layernorm(c, x, "ln", (7, 9), axis=-2))


def c_layernorm_after_matmul(c):
    # a transformer block's shape of use: MatMul then LayerNorm then Add
    x = c.input("tokens", normal(c.rng, (2, 50, 32)))
    w = c.init("proj.weight", normal(c.rng, (32, 64), 0.2))
    y = c.node("MatMul", [x, w], ["proj_out"], name="proj")
    c.output(layernorm(c, y, "ln", (64,), epsilon=1e-6))


def c_layernorm_fused_mul(c):
    # EVA-02's SwiGLU normalises the gate product, LayerNorm(silu(x Wg) * (x Wx)): the Mul is
    # taken into the LayerNorm (norm_fusion.c), which reads both factors. Rows the GPU gives a
    # block (2048), a warp of 16-byte chunks (768), a warp of scalars (100: not 16-byte rows in
    # FP16) and a block of scalars (1100: wider than a warp holds, not 16-byte rows)
    for d, shape, bias in ((2048, (2, 9, 2048), True), (768, (2, 7, 768), False),
                           (100, (3, 5, 100), True), (1100, (2, 3, 1100), True)):
        g = c.input(f"gate{d}", normal(c.rng, shape, 1.5))
        v = c.input(f"value{d}", normal(c.rng, shape) + 0.5)
        p = c.node("Mul", [g, v], [f"prod{d}"])
        c.output(layernorm(c, p, f"ln{d}", (d,), bias=bias))


def c_layernorm_fused_add(c):
    # Swin V2's post-norm blocks, x + LayerNorm(f(x)) on (N, H, W, C): the Add is taken into the
    # LayerNorm, the shortcut on either side; with a fused Mul before it as well (2048 wide).
    # Left alone: a LayerNorm whose output is a graph output too, and one whose Add reads a
    # value computed after it (the LayerNorm would run before its residual exists)
    x = c.input("features", normal(c.rng, (2, 8, 8, 96), 2.0))
    w = c.init("f.weight", normal(c.rng, (96, 96), 0.15))
    h = c.node("MatMul", [x, w], ["f_out"])
    c.output(c.node("Add", [x, layernorm(c, h, "ln_post", (96,))], ["block_out"]))
    r = c.input("shortcut", normal(c.rng, (2, 7, 768)))
    t = c.input("tokens", normal(c.rng, (2, 7, 768), 3.0) + 1.0)
    c.output(c.node("Add", [layernorm(c, t, "ln_right", (768,), bias=False), r], ["right_out"]))
    g = c.input("gate", normal(c.rng, (2, 5, 2048)))
    v = c.input("value", normal(c.rng, (2, 5, 2048)) - 0.5)
    s = c.input("stream", normal(c.rng, (2, 5, 2048)))
    p = c.node("Mul", [g, v], ["gated"])
    c.output(c.node("Add", [s, layernorm(c, p, "ln_both", (2048,))], ["both_out"]))
    u = c.input("odd", normal(c.rng, (3, 4, 100)) + 2.0)
    n = layernorm(c, u, "ln_shown", (100,))
    c.output(n)
    c.output(c.node("Add", [n, u], ["shown_out"]))
    k = c.input("late", normal(c.rng, (2, 6, 64)))
    m = layernorm(c, k, "ln_early", (64,))
    late = c.node("Sigmoid", [k], ["late_sig"])
    c.output(c.node("Add", [m, late], ["late_out"]))


def c_instancenorm_2x8x7x9(c):
    x = c.input("features", normal(c.rng, (2, 8, 7, 9), 2.0) + 1.0)
    s = c.init("in.scale", uniform(c.rng, (8,), 0.5, 1.5))
    b = c.init("in.bias", uniform(c.rng, (8,), -0.5, 0.5))
    c.output(c.node("InstanceNormalization", [x, s, b], ["in_out"], name="in", epsilon=1e-4))


# The elementwise math of vision transformers: values reach each function's tails.

def c_erf(c):
    x = c.input("features", normal(c.rng, (3, 4, 5, 6), 1.5))
    c.output(c.node("Erf", [x], ["erf"]))


def c_tanh(c):
    x = c.input("features", normal(c.rng, (3, 4, 5, 6), 2.0))
    c.output(c.node("Tanh", [x], ["tanh"]))


def c_sqrt(c):
    x = c.input("variance", uniform(c.rng, (3, 4, 5, 6), 1e-3, 9.0))
    c.output(c.node("Sqrt", [x], ["std"]))


def c_reciprocal(c):
    sign = np.where(c.rng.uniform(size=(3, 4, 5, 6)) < 0.5, -1.0, 1.0).astype(np.float32)
    x = c.input("std", sign * uniform(c.rng, (3, 4, 5, 6), 0.05, 4.0))
    c.output(c.node("Reciprocal", [x], ["inv_std"]))


def c_gelu_erf(c):
    c.opset = 20
    x = c.input("hidden", uniform(c.rng, (2, 7, 48), -6.0, 6.0))
    c.output(c.node("Gelu", [x], ["gelu"]))


def c_gelu_none_explicit(c):
    c.opset = 20
    x = c.input("hidden", uniform(c.rng, (2, 7, 48), -6.0, 6.0))
    c.output(c.node("Gelu", [x], ["gelu"], approximate="none"))


def c_gelu_tanh(c):
    c.opset = 20
    x = c.input("hidden", uniform(c.rng, (2, 7, 48), -6.0, 6.0))
    c.output(c.node("Gelu", [x], ["gelu"], approximate="tanh"))


def _sdpa(c, q, k, v, scale_split=True, bias=None, kt_given=None, out=True, d=None):
    """The pattern torch's exporters write for scaled_dot_product_attention: Q and K^T each
    scaled by sqrt(scale) (TorchScript exporter) or the scores scaled once, an optional additive
    bias, Softmax over the keys, then the product with V. shardinfer fuses it into one
    Attention node; onnxruntime (optimizations off) computes it op by op."""
    d = d or c.feeds[q].shape[-1]
    sc = 1.0 / np.sqrt(d)
    kt = kt_given or c.node("Transpose", [k], ["k_t"], perm=[0, 1, 3, 2])
    if scale_split:
        r = c.init("sqrt_scale", np.array(np.sqrt(sc), np.float32))
        qs = c.node("Mul", [q, r], ["q_scaled"])
        ks = c.node("Mul", [kt, r], ["k_scaled"])
        scores = c.node("MatMul", [qs, ks], ["scores"])
    else:
        scores = c.node("MatMul", [q, kt], ["scores_raw"])
        scores = c.node("Div", [scores, c.init("sqrt_d", np.array(np.sqrt(d), np.float32))],
                        ["scores"])
    if bias is not None:
        scores = c.node("Add", [scores, bias], ["scores_biased"])
    p = c.node("Softmax", [scores], ["probs"], axis=-1)
    y = c.node("MatMul", [p, v], ["attn"])
    if out:
        c.output(y)
    return y


def _packed_qkv(c, t, h, d):
    """A transformer block's packed projection, x (N, t, h*d) W + b -> (N, t, 3, h, d) with a
    symbolic batch, and the head axes moved ahead: (3, N, h, t, d)."""
    x = c.input("tokens", normal(c.rng, (2, t, h * d)), dims=["N", t, h * d])
    w = c.init("qkv.weight", normal(c.rng, (h * d, 3 * h * d), 1.0 / np.sqrt(h * d)))
    y = c.node("MatMul", [x, w], ["qkv_mm"])
    y = c.node("Add", [y, c.init("qkv.bias", normal(c.rng, (3 * h * d,), 0.1))], ["qkv"])
    y = c.node("Reshape", [y, c.init("qkv_shape", np.array([0, t, 3, h, d], np.int64))], ["qkv5"])
    return c.node("Transpose", [y], ["qkv_t"], perm=[2, 0, 3, 1, 4])


def _merge_heads(c, y, t, h, d, proj=True):
    """(N, h, t, d) -> (N, t, h*d), then the output projection."""
    y = c.node("Transpose", [y], ["heads_t"], perm=[0, 2, 1, 3])
    y = c.node("Reshape", [y, c.init("merge_shape", np.array([0, t, h * d], np.int64))], ["merged"])
    if proj:
        w = c.init("proj.weight", normal(c.rng, (h * d, h * d), 1.0 / np.sqrt(h * d)))
        y = c.node("MatMul", [y, w], ["proj"])
    return y


def c_attention_packed_split(c):
    # the TorchScript exporter's ViT block: Split + Squeeze take Q, K and V out of the packed
    # projection, Transpose + Reshape merge the heads; shardinfer reads and writes them in place
    t, h, d = 50, 2, 64
    qkv = _packed_qkv(c, t, h, d)
    parts = c.node("Split", [qkv], ["q5", "k5", "v5"], axis=0)
    q, k, v = (c.node("Squeeze", [p, c.init(p + "_axes", np.array([0], np.int64))], [p + "_sq"])
               for p in ("q5", "k5", "v5"))
    del parts
    c.output(_merge_heads(c, _sdpa(c, q, k, v, out=False, d=d), t, h, d))


def c_attention_packed_slice(c):
    # the dynamo exporter's: Slice + Squeeze per operand, and K^T made by merging the batch and
    # head axes, transposing and splitting them back (strides that only a layout keeping both
    # axes can say)
    t, h, d = 33, 3, 32
    qkv = _packed_qkv(c, t, h, d)
    ops = []
    for i, n in enumerate("qkv"):
        sl = c.node("Slice", [qkv, c.init(n + "_start", np.array([i], np.int64)),
                              c.init(n + "_end", np.array([i + 1], np.int64)),
                              c.init(n + "_axis", np.array([0], np.int64))], [n + "_sl"])
        ops.append(c.node("Squeeze", [sl, c.init(n + "_sq_axes", np.array([0], np.int64))],
                          [n + "_sq"]))
    q, k, v = ops
    k3 = c.node("Reshape", [k, c.init("k3_shape", np.array([-1, t, d], np.int64))], ["k3"])
    k3t = c.node("Transpose", [k3], ["k3t"], perm=[0, 2, 1])
    kt = c.node("Reshape", [k3t, c.init("kt_shape", np.array([-1, h, d, t], np.int64))], ["kt4"])
    y = _sdpa(c, q, None, v, scale_split=False, kt_given=kt, out=False, d=d)
    c.output(_merge_heads(c, y, t, h, d, proj=False))


def c_attention_packed_gather(c):
    # Gather picks the operands; head size 24 (the one-block-per-row kernel on the GPU, strided
    # too); the merged heads also feed an Add, so Y is not written in place
    t, h, d = 20, 2, 24
    qkv = _packed_qkv(c, t, h, d)
    q, k, v = (c.node("Gather", [qkv, c.init(n + "_idx", np.array(i, np.int64))], [n + "_g"],
                      axis=0) for i, n in enumerate("qkv"))
    y = c.node("Transpose", [_sdpa(c, q, k, v, out=False, d=d)], ["heads_t"], perm=[0, 2, 1, 3])
    c.output(c.node("Add", [y, c.init("after", normal(c.rng, (t, h, d)))], ["after_add"]))


def c_attention_vit_b(c):
    # ViT-B's shape, 197 tokens of head size 64: the GPU's flash kernel, 4 tiles of keys
    q, k, v = (c.input(n, normal(c.rng, (2, 3, 197, 64))) for n in ("q", "k", "v"))
    _sdpa(c, q, k, v)


def c_attention_dinov2(c):
    # DINOv2-S/14's shape at 224: 256 patches and a class token, head size 64 (cuDNN's SDPA
    # spends a whole tile of query rows on the class token)
    q, k, v = (c.input(n, normal(c.rng, (2, 6, 257, 64))) for n in ("q", "k", "v"))
    _sdpa(c, q, k, v)


def c_attention_rel_bias(c):
    # Swin's window attention: 49 tokens of head size 32 and a relative-position bias per head
    q, k, v = (c.input(n, normal(c.rng, (4, 3, 49, 32))) for n in ("q", "k", "v"))
    b = c.init("rel_pos_bias", normal(c.rng, (1, 3, 49, 49)))
    _sdpa(c, q, k, v, scale_split=False, bias=b)


def c_attention_beit(c):
    # BEiT's: ViT-B's shape with a relative-position bias per head (one table for every image):
    # on an H100 the wgmma kernel, the bias added as the scores leave the MMA
    q, k, v = (c.input(n, normal(c.rng, (2, 3, 197, 64))) for n in ("q", "k", "v"))
    _sdpa(c, q, k, v, scale_split=False, bias=c.init("rel_pos_bias",
                                                       normal(c.rng, (1, 3, 197, 197))))


def c_attention_bias_240(c):
    # a bias per image and head over 240 keys (the wgmma kernel's 256-key tile), 100 queries
    q = c.input("q", normal(c.rng, (2, 2, 100, 64)))
    k, v = (c.input(n, normal(c.rng, (2, 2, 240, 64))) for n in ("k", "v"))
    _sdpa(c, q, k, v, bias=c.input("bias", normal(c.rng, (2, 2, 100, 240))))


def c_attention_window_mask(c):
    # Swin's shifted windows: the scores plus the relative-position bias, viewed per image as
    # (images, windows, heads, T, S), plus a 0/-100 mask per window, viewed back; fused with the
    # two biases as one tiled over the windows of every image
    w, h, t, d = 4, 2, 16, 32
    win = c.init("windows", np.array([-1, h, t, d], np.int64))
    q, k, v = (c.node("Reshape", [c.input(n, normal(c.rng, (2, w, h, t, d)), dims=["N", w, h, t, d]),
                                  win], [n + "_windows"]) for n in "qkv")
    kt = c.node("Transpose", [k], ["k_t"], perm=[0, 1, 3, 2])
    qs = c.node("Mul", [q, c.init("scale", np.array(d ** -0.5, np.float32))], ["q_scaled"])
    sc = c.node("MatMul", [qs, kt], ["scores"])
    sc = c.node("Add", [sc, c.init("rel_pos_bias", normal(c.rng, (1, h, t, t)))], ["biased"])
    sc = c.node("Reshape", [sc, c.init("per_image", np.array([-1, w, h, t, t], np.int64))],
                ["per_image_scores"])
    mask = np.where(c.rng.random((1, w, 1, t, t)) < 0.3, -100.0, 0.0).astype(np.float32)
    sc = c.node("Add", [sc, c.init("window_mask", mask)], ["masked"])
    sc = c.node("Reshape", [sc, c.init("per_window", np.array([-1, h, t, t], np.int64))], ["back"])
    p = c.node("Softmax", [sc], ["probs"], axis=-1)
    c.output(c.node("MatMul", [p, v], ["attn"]))


def c_attention_cosine(c):
    # Swin V2's cosine attention: q and k L2-normalised (F.normalize: x / max(|x|, eps)), the
    # scores scaled per head by exp(min(p, log 100)) and biased by 16 sigmoid of an MLP over a
    # table of coordinates; the scale and the bias fold at load, the scale moves onto q, and
    # the pattern fuses (attention_cosine_fused checks)
    c.opset = 18  # ReduceL2's axes as an input
    b, h, t, d = 4, 3, 36, 32
    eps = c.init("eps", np.array(1e-12, np.float32))
    axes = c.init("last", np.array([-1], np.int64))
    ops = []
    for n in "qk":
        x = c.input(n, normal(c.rng, (b, h, t, d)))
        nrm = c.node("Clip", [c.node("ReduceL2", [x, axes], [n + "_l2"]), eps], [n + "_norm"])
        nrm = c.node("Expand", [nrm, c.init(n + "_full", np.array([b, h, t, d], np.int64))],
                     [n + "_norm_x"])
        ops.append(c.node("Div", [x, nrm], [n + "_unit"]))
    v = c.input("v", normal(c.rng, (b, h, t, d)))
    # scales of 4.5 to 20 (Swin V2 starts at 10); towards the clamp at 100, BF16's 8 bits of q
    # and k alone move the scores by more than its bound here
    logit = c.init("logit_scale", uniform(c.rng, (h, 1, 1), 1.5, 3.0))
    scale = c.node("Exp", [c.node("Min", [logit, c.init("log100", np.array(np.log(100.0),
                                                                              np.float32))],
                                  ["logit_clamped"])], ["head_scale"])
    table = c.init("coords", uniform(c.rng, (1, t, t, 2), -1.0, 1.0))
    hid = c.node("Relu", [c.node("Add", [c.node("MatMul", [table, c.init(
        "cpb.w1", normal(c.rng, (2, 16), 0.7))], ["cpb_mm1"]), c.init(
        "cpb.b1", normal(c.rng, (16,), 0.1))], ["cpb_h"])], ["cpb_relu"])
    rel = c.node("MatMul", [hid, c.init("cpb.w2", normal(c.rng, (16, h), 0.3))], ["cpb_out"])
    rel = c.node("Transpose", [rel], ["cpb_heads"], perm=[0, 3, 1, 2])
    bias = c.node("Mul", [c.node("Sigmoid", [rel], ["cpb_sig"]),
                          c.init("sixteen", np.array(16.0, np.float32))], ["rel_bias"])
    kt = c.node("Transpose", [ops[1]], ["k_t"], perm=[0, 1, 3, 2])
    scores = c.node("Mul", [c.node("MatMul", [ops[0], kt], ["cos"]), scale], ["scaled"])
    p = c.node("Softmax", [c.node("Add", [scores, bias], ["biased"])], ["probs"], axis=-1)
    c.output(c.node("MatMul", [p, v], ["attn"]))


def c_attention_cosine_packed(c):
    # Swin V2's cosine attention as its blocks write it: q, k and v Gathered from one packed
    # projection reshaped to (B, T, 3, H, D) and Transposed to (3, B, H, T, D). q and k's
    # normalisation runs in the attention node, which reads them from the projection in place
    # (attention_views.c), so the Transpose dies; head size 32 (16-byte rows in FP16: the tiled
    # kernel), 20 (the row-by-row kernel) and 64 (the tiled one, not the wgmma or resident ones);
    # a scale per head or one for all (then the attention's own). Where k's unit vectors are also
    # an output, q and k's RowNorms stay, each reading its rows in place
    c.opset = 18
    eps = c.init("eps", np.array(1e-12, np.float32))
    axes = c.init("last", np.array([-1], np.int64))
    for b, t, h, d, per_head, k_out in ((4, 36, 3, 32, True, False), (3, 25, 2, 20, True, False),
                                        (2, 40, 2, 64, False, False), (2, 16, 2, 32, True, True)):
        e, tag = h * d, f"{d}{'k' if k_out else ''}"
        x = c.input(f"x{tag}", normal(c.rng, (b, t, e)))
        qkv = c.node("Add", [c.node("MatMul", [x, c.init(f"qkv{tag}.w", normal(c.rng, (e, 3 * e),
                                                                                e ** -0.5))],
                                    [f"qkv{tag}_mm"]),
                             c.init(f"qkv{tag}.b", normal(c.rng, (3 * e,), 0.1))], [f"qkv{tag}"])
        qkv = c.node("Reshape", [qkv, c.init(f"split{tag}", np.array([b, t, 3, h, d], np.int64))],
                     [f"qkv{tag}_5d"])
        qkv = c.node("Transpose", [qkv], [f"qkv{tag}_heads"], perm=[2, 0, 3, 1, 4])
        parts = [c.node("Gather", [qkv, c.init(f"which{tag}{i}", np.array(i, np.int64))],
                        [f"{n}{tag}"], axis=0) for i, n in enumerate("qkv")]
        unit = []
        for n, part in zip("qk", parts):
            nrm = c.node("Clip", [c.node("ReduceL2", [part, axes], [f"{n}{tag}_l2"], keepdims=1),
                                  eps], [f"{n}{tag}_norm"])
            unit.append(c.node("Div", [part, nrm], [f"{n}{tag}_unit"]))
        if k_out:
            c.output(unit[1])
        logit = c.init(f"logit{tag}", uniform(c.rng, (h, 1, 1) if per_head else (), 1.5, 3.0))
        scale = c.node("Exp", [logit], [f"head_scale{tag}"])
        kt = c.node("Transpose", [unit[1]], [f"k{tag}_t"], perm=[0, 1, 3, 2])
        scores = c.node("Mul", [c.node("MatMul", [unit[0], kt], [f"cos{tag}"]), scale],
                        [f"scaled{tag}"])
        bias = c.init(f"bias{tag}", normal(c.rng, (1, h, t, t), 0.5))
        p = c.node("Softmax", [c.node("Add", [scores, bias], [f"biased{tag}"])], [f"probs{tag}"],
                   axis=-1)
        y = c.node("Transpose", [c.node("MatMul", [p, parts[2]], [f"attn{tag}"])], [f"merged{tag}"],
                   perm=[0, 2, 1, 3])
        c.output(c.node("Reshape", [y, c.init(f"back{tag}", np.array([b, t, e], np.int64))],
                        [f"out{tag}"]))


def _rotate_pairs(c, x, name):
    # timm's rot(): stack(-x[..., 1::2], x[..., ::2], -1).reshape(x.shape)
    ax = lambda v: c.init(name + v, np.array([-1], np.int64))
    big = c.init(name + "_end", np.array([1 << 30], np.int64))
    two = c.init(name + "_two", np.array([2], np.int64))
    odd = c.node("Slice", [x, c.init(name + "_one", np.array([1], np.int64)), big, ax("_ax1"), two],
                 [name + "_odd"])
    even = c.node("Slice", [x, c.init(name + "_zero", np.array([0], np.int64)), big, ax("_ax0"),
                            two], [name + "_even"])
    pair = c.node("Concat", [c.node("Unsqueeze", [c.node("Neg", [odd], [name + "_neg"]), ax("_u0")],
                                    [name + "_neg1"]),
                             c.node("Unsqueeze", [even, ax("_u1")], [name + "_even1"])],
                  [name + "_pairs"], axis=-1)
    return c.node("Reshape", [pair, c.node("Shape", [x], [name + "_shape"])], [name + "_rot"])


def c_rotary_pairs_class_token(c):
    # EVA-02's rotary embedding of q and k: the class token left alone, the other 12 tokens
    # rotated by pairs with sin and cos halves of one table (Split on the device as exported):
    # one Rotary node each (rotary_fused checks), then the attention
    b, h, t, d = 2, 3, 13, 16
    table = c.init("rope_table", normal(c.rng, (t - 1, 2 * d)))
    c.node("Split", [table], ["rope_sin", "rope_cos"], axis=1, num_outputs=2)
    sin, cos = "rope_sin", "rope_cos"
    ops = []
    for n in "qk":
        x = c.input(n, normal(c.rng, (b, h, t, d)))
        cls = c.node("Slice", [x, c.init(n + "_s0", np.array([0], np.int64)),
                               c.init(n + "_s1", np.array([1], np.int64)),
                               c.init(n + "_sax", np.array([2], np.int64))], [n + "_cls"])
        rest = c.node("Slice", [x, c.init(n + "_r0", np.array([1], np.int64)),
                                c.init(n + "_r1", np.array([t], np.int64)),
                                c.init(n + "_rax", np.array([2], np.int64))], [n + "_rest"])
        r = c.node("Add", [c.node("Mul", [rest, cos], [n + "_xc"]),
                           c.node("Mul", [_rotate_pairs(c, rest, n), sin], [n + "_rs"])],
                   [n + "_roped"])
        ops.append(c.node("Concat", [cls, r], [n + "_rotated"], axis=2))
    v = c.input("v", normal(c.rng, (b, h, t, d)))
    _sdpa(c, ops[0], ops[1], v, scale_split=False, d=d)
    c.opset = 18  # Split's num_outputs


def c_rotary_halves(c):
    # Hugging Face's rotate_half, concat(-x[..., D/2:], x[..., :D/2]), every token rotated
    x = c.input("x", normal(c.rng, (2, 4, 10, 12)))
    cos = c.init("cos", normal(c.rng, (10, 12)))
    sin = c.init("sin", normal(c.rng, (1, 10, 12)))
    sl = lambda a, b, n: c.node("Slice", [x, c.init(n + "_a", np.array([a], np.int64)),
                                          c.init(n + "_b", np.array([b], np.int64)),
                                          c.init(n + "_ax", np.array([-1], np.int64))], [n])
    rot = c.node("Concat", [c.node("Neg", [sl(6, 12, "hi")], ["neg_hi"]), sl(0, 6, "lo")], ["rot"],
                 axis=-1)
    c.output(c.node("Add", [c.node("Mul", [cos, x], ["xc"]), c.node("Mul", [rot, sin], ["rs"])],
                    ["roped"]))


def _projected_heads(c, x, name, e, h, t):
    # a Linear projection split into heads, (N, T, E) -> (N, H, T, D), as timm writes q and k
    w = c.init(name + ".w", normal(c.rng, (e, e), e ** -0.5))
    y = c.node("Add", [c.node("MatMul", [x, w], [name + "_mm"]),
                       c.init(name + ".b", normal(c.rng, (e,), 0.1))], [name + "_proj"])
    y = c.node("Reshape", [y, c.init(name + "_split", np.array([0, t, h, e // h], np.int64))],
               [name + "_4d"])
    return c.node("Transpose", [y], [name + "_heads"], perm=[0, 2, 1, 3])


def _rotary_projected(c, h, t, d, half, skip):
    # q and k from their projections' head split, rotated (by pairs, or by halves as Hugging
    # Face's rotate_half does) behind skip class tokens, then the attention: the Rotary nodes
    # read their rows from the projections in place (attention_views.c), so no Transpose is left
    x = c.input("tokens", normal(c.rng, (2, t, h * d)))
    cos = c.init("rope_cos", normal(c.rng, (t - skip, d)))
    sin = c.init("rope_sin", normal(c.rng, (t - skip, d)))
    ax = lambda m, v: c.init(m, np.array([v], np.int64))
    ops = []
    for n in "qk":
        hx = _projected_heads(c, x, n, h * d, h, t)
        rest = hx
        if skip:
            rest = c.node("Slice", [hx, ax(n + "_r0", skip), ax(n + "_r1", t), ax(n + "_rax", 2)],
                          [n + "_rest"])
        if half:
            sl = lambda a, z, m: c.node("Slice", [rest, ax(m + "_a", a), ax(m + "_b", z),
                                                  ax(m + "_ax", -1)], [m])
            rot = c.node("Concat", [c.node("Neg", [sl(d // 2, d, n + "_hi")], [n + "_neg_hi"]),
                                    sl(0, d // 2, n + "_lo")], [n + "_rot"], axis=-1)
        else:
            rot = _rotate_pairs(c, rest, n)
        r = c.node("Add", [c.node("Mul", [rest, cos], [n + "_xc"]),
                           c.node("Mul", [rot, sin], [n + "_rs"])], [n + "_roped"])
        if skip:
            cls = c.node("Slice", [hx, ax(n + "_s0", 0), ax(n + "_s1", skip), ax(n + "_sax", 2)],
                         [n + "_cls"])
            r = c.node("Concat", [cls, r], [n + "_rotated"], axis=2)
        ops.append(r)
    v = _projected_heads(c, x, "v", h * d, h, t)
    _sdpa(c, ops[0], ops[1], v, scale_split=False, d=d)


def c_rotary_projected_pairs(c):
    # EVA-02's: by pairs behind a class token, head size 64 (16-byte chunks in every type)
    _rotary_projected(c, 2, 17, 64, half=False, skip=1)


def c_rotary_projected_halves(c):
    # by halves, every token, head size 32 (a 16-byte chunk of each half in FP16 and BF16)
    _rotary_projected(c, 3, 11, 32, half=True, skip=0)


def c_rotary_projected_odd(c):
    # by pairs behind a class token, head size 20 (rows not whole 16-byte chunks): the GPU's
    # pair-a-thread kernel through the view
    _rotary_projected(c, 3, 9, 20, half=False, skip=1)


def c_rownorm_narrow(c):
    # F.normalize over rows of 10 (not a whole number of 16-byte chunks) and of 24, one
    # RowNorm node each: the GPU's warp-a-row and chunked kernels
    c.opset = 18
    for n, w in (("a", 10), ("b", 24)):
        x = c.input(n, normal(c.rng, (3, 7, w)))
        nrm = c.node("Clip", [c.node("ReduceL2", [x, c.init(n + "_ax", np.array([-1], np.int64))],
                                     [n + "_l2"]), c.init(n + "_eps", np.array(1e-12, np.float32))],
                     [n + "_norm"])
        full = c.node("Expand", [nrm, c.init(n + "_shape", np.array([3, 7, w], np.int64))],
                      [n + "_full"])
        c.output(c.node("Div", [x, full], [n + "_unit"]))


def c_attention_k_transposed(c):
    # K arrives as K^T (N, H, D, S) from its own layout and large scores: the online softmax
    q, v = c.input("q", normal(c.rng, (2, 2, 70, 64), 3.0)), c.input("v", normal(c.rng, (2, 2, 90, 64)))
    kt = c.input("kt", normal(c.rng, (2, 2, 64, 90), 3.0))
    _sdpa(c, q, None, v, kt_given=kt)


def c_attention_head_40(c):
    # head size 40 (no tensor-core kernel): the one-block-per-row kernel on the GPU
    q, k, v = (c.input(n, normal(c.rng, (2, 2, 33, 40))) for n in ("q", "k", "v"))
    _sdpa(c, q, k, v, scale_split=False)


def c_attention_head_80(c):
    # head size 80, ViT-H/14's (OpenCLIP's LAION towers): the flash kernel, 5 k-steps of 16
    q, k, v = (c.input(n, normal(c.rng, (2, 2, 257, 80))) for n in ("q", "k", "v"))
    _sdpa(c, q, k, v)


def c_attention_levit(c):
    # LeViT's: Q and K of head size 16, V twice as wide, 196 tokens, a learned bias per head
    q, k = (c.input(n, normal(c.rng, (2, 4, 196, 16))) for n in ("q", "k"))
    v = c.input("v", normal(c.rng, (2, 4, 196, 32)))
    _sdpa(c, q, k, v, scale_split=False, bias=c.init("attention_biases",
                                                       normal(c.rng, (4, 196, 196))))


def c_attention_levit_subsample(c):
    # LeViT's downsampling attention: 49 queries of 16 against 196 keys, V four times as wide
    q = c.input("q", normal(c.rng, (2, 8, 49, 16)))
    k = c.input("k", normal(c.rng, (2, 8, 196, 16)))
    v = c.input("v", normal(c.rng, (2, 8, 196, 64)))
    _sdpa(c, q, k, v, bias=c.init("attention_biases", normal(c.rng, (8, 49, 196))))


def c_attention_levit_act(c):
    # LeViT's block: the merged heads through a HardSwish before the projection, which the
    # attention node applies as it stores Y (written in place of the head merge)
    c.opset = 14  # HardSwish
    q, k = (c.input(n, normal(c.rng, (2, 4, 49, 16))) for n in ("q", "k"))
    v = c.input("v", normal(c.rng, (2, 4, 49, 32)))
    y = _sdpa(c, q, k, v, scale_split=False, out=False,
              bias=c.init("attention_biases", normal(c.rng, (4, 49, 49))))
    y = c.node("HardSwish", [_merge_heads(c, y, 49, 4, 32, proj=False)], ["act"])
    w = c.init("proj.weight", normal(c.rng, (128, 64), 1.0 / np.sqrt(128)))
    c.output(c.node("MatMul", [y, w], ["proj"]))


def c_attention_act_head64(c):
    # an activation on Y at head size 64 without a bias, whose plain attention goes to the
    # wgmma or the resident kernel: with it, the tiled one
    q, k, v = (c.input(n, normal(c.rng, (2, 3, 100, 64))) for n in ("q", "k", "v"))
    c.output(c.node("Relu", [_sdpa(c, q, k, v, out=False)], ["act"]))


def c_attention_head_128(c):
    # head size 128 (the widest towers'): the flash kernel's widest head, and cuDNN's SDPA
    # where init picks it
    q, k, v = (c.input(n, normal(c.rng, (2, 2, 77, 128))) for n in ("q", "k", "v"))
    _sdpa(c, q, k, v)


def c_attention_not_fused(c):
    # scale after the bias add scales the bias: not the fused form, so it runs op by op
    q, k, v = (c.input(n, normal(c.rng, (2, 2, 17, 16))) for n in ("q", "k", "v"))
    kt = c.node("Transpose", [k], ["k_t"], perm=[0, 1, 3, 2])
    s_ = c.node("MatMul", [q, kt], ["scores"])
    s_ = c.node("Add", [s_, c.init("bias", normal(c.rng, (17, 17)))], ["biased"])
    s_ = c.node("Mul", [s_, c.init("scale", np.array(0.25, np.float32))], ["scaled"])
    p = c.node("Softmax", [s_], ["probs"], axis=-1)
    c.output(c.node("MatMul", [p, v], ["attn"]))


def c_convnext_block(c):
    # ConvNeXt's block: depthwise 7x7, then to channels-last (N, H, W, C) for LayerNorm and the
    # MLP, back to (N, C, H, W), LayerScale and the residual. On the GPU the image is stored
    # NHWC, so both Transposes are the same bytes as their inputs and cost nothing
    # (test_devplan holds that)
    c.opset = 17
    ch = 32
    x = c.input("image", normal(c.rng, (2, ch, 6, 6)))
    y = c.conv(x, "dw", ch, ch, 7, group=ch, pads=[3, 3, 3, 3])
    y = c.node("Transpose", [y], ["to_nhwc"], perm=[0, 2, 3, 1])
    y = c.node("LayerNormalization", [y, c.init("ln.w", uniform(c.rng, (ch,), 0.5, 1.5)),
                                      c.init("ln.b", uniform(c.rng, (ch,), -0.2, 0.2))],
               ["ln"], axis=-1, epsilon=1e-6)
    y = c.node("MatMul", [y, c.init("fc1.w", normal(c.rng, (ch, 4 * ch), 1 / np.sqrt(ch)))], ["fc1"])
    y = c.node("Add", [y, c.init("fc1.b", uniform(c.rng, (4 * ch,), -0.2, 0.2))], ["fc1b"])
    y = c.node("Relu", [y], ["act"])
    y = c.node("MatMul", [y, c.init("fc2.w", normal(c.rng, (4 * ch, ch), 0.5 / np.sqrt(ch)))], ["fc2"])
    y = c.node("Add", [y, c.init("fc2.b", uniform(c.rng, (ch,), -0.2, 0.2))], ["fc2b"])
    y = c.node("Transpose", [y], ["to_nchw"], perm=[0, 3, 1, 2])
    y = c.node("Mul", [y, c.init("gamma", uniform(c.rng, (ch, 1, 1), 0.1, 1.0))], ["scaled"])
    c.output(c.node("Add", [y, x], ["residual"]))


def c_roll_2d(c):
    # torch.roll over H and W as the exporters write it (Swin's shifted windows): per axis two
    # Slices and a Concat, which reads the Slices' input in place; then a crop that keeps
    # everything (a view), and one Slice read twice (kept: its Concat reads the copy)
    x = c.input("tokens", normal(c.rng, (2, 6, 7, 8)), dims=["N", 6, 7, 8])
    def sl(v, start, end, axis, name):
        return c.node("Slice", [v, c.init(name + "_s", np.array([start], np.int64)),
                                c.init(name + "_e", np.array([end], np.int64)),
                                c.init(name + "_a", np.array([axis], np.int64))], [name])
    y = c.node("Concat", [sl(x, 3, 6, 1, "h_tail"), sl(x, 0, 3, 1, "h_head")], ["roll_h"], axis=1)
    y = c.node("Concat", [sl(y, 2, 7, 2, "w_tail"), sl(y, 0, 2, 2, "w_head")], ["roll_w"], axis=2)
    y = sl(y, 0, 6, 1, "crop")
    twice = sl(x, 0, 4, 3, "channels")
    z = c.node("Concat", [twice, twice], ["doubled"], axis=3)
    c.output(c.node("Add", [y, z], ["out"]))


def c_linear_layerscale(c):
    # DINOv2's blocks: x + gamma * (x W + b), the bias initializer shared by two layers (the
    # dynamo exporter merges equal initializers): gamma folds into each layer's own W and b
    x = c.input("tokens", normal(c.rng, (2, 9, 16)))
    b = c.init("shared_bias", uniform(c.rng, (16,), -0.5, 0.5))
    for k in range(2):
        w = c.init(f"w{k}", normal(c.rng, (16, 16), 0.25))
        y = c.node("MatMul", [x, w], [f"mm{k}"])
        y = c.node("Add", [y, b], [f"lin{k}"])
        y = c.node("Mul", [y, c.init(f"gamma{k}", uniform(c.rng, (16,), 0.1, 1.0))], [f"ls{k}"])
        x = c.node("Add", [x, y], [f"res{k}"])
    c.output(x)


def _mlp(c, approximate, d=64, hidden=256, tokens=37):
    # a transformer's MLP: Linear + bias + activation, then Linear + bias. On an H100 the first
    # runs as one CUTLASS GEMM with the activation in its epilogue; 2 x 37 = 74 rows fill no tile.
    c.opset = 20
    x = c.input("tokens", normal(c.rng, (2, tokens, d)))
    h = c.node("MatMul", [x, c.init("fc1_w", normal(c.rng, (d, hidden), d ** -0.5))], ["fc1_mm"])
    h = c.node("Add", [h, c.init("fc1_b", uniform(c.rng, (hidden,), -0.5, 0.5))], ["fc1"])
    if approximate == "quick":  # CLIP's QuickGELU as exported: x * Sigmoid(x * 1.702)
        s = c.node("Mul", [h, c.init("quick", np.array(1.702, np.float32))], ["scaled"])
        h = c.node("Mul", [h, c.node("Sigmoid", [s], ["gate"])], ["quick_gelu"])
    elif approximate == "silu":
        h = c.node("Mul", [h, c.node("Sigmoid", [h], ["gate"])], ["silu"])
    else:
        h = c.node("Gelu", [h], ["gelu"], approximate=approximate)
    y = c.node("MatMul", [h, c.init("fc2_w", normal(c.rng, (hidden, d), hidden ** -0.5))],
               ["fc2_mm"])
    c.output(c.node("Add", [y, c.init("fc2_b", uniform(c.rng, (d,), -0.5, 0.5))], ["fc2"]))


def c_linear_gelu_mlp(c):
    _mlp(c, "none")


def c_linear_gelu_tanh_mlp(c):
    _mlp(c, "tanh")


def c_linear_gelu_quick_mlp(c):
    _mlp(c, "quick")


def c_linear_gelu_silu_mlp(c):
    _mlp(c, "silu")


def c_linear_gelu_mlp_k36(c):
    # 36 features: rows of 72 bytes, which TMA cannot load; cuBLASLt and the pass run it
    _mlp(c, "none", d=36, hidden=144, tokens=5)


def _token_block(c, a, x0, d, name):
    # a pre-norm block's second half: the projection with its residual, LayerNorm, the MLP with
    # its residual; every node row-wise
    lin = lambda v, k, n, o: c.node("Add", [c.node("MatMul", [v, c.init(n + "_w", normal(
        c.rng, (k, o), k ** -0.5))], [n + "_mm"]), c.init(n + "_b", uniform(c.rng, (o,), -0.3, 0.3))],
        [n])
    y = c.node("Add", [lin(a, d, name + "proj", d), x0], [name + "res1"])
    h = c.node("Gelu", [lin(layernorm(c, y, name + "ln2", (d,)), d, name + "fc1", 2 * d)],
               [name + "gelu"])
    return c.node("Add", [lin(h, 2 * d, name + "fc2", d), y], [name + "res2"])


def c_token_select_last_block(c):
    # a ViT's head reads one token (here the third: the index is not 0) after the final
    # LayerNorm: the Gather moves up through the block's row-wise nodes to its two entries (the
    # attention's output and the residual stream), which are gathered first
    a = c.input("attn_out", normal(c.rng, (2, 9, 16)))
    x0 = c.input("stream", normal(c.rng, (2, 9, 16)))
    z = layernorm(c, _token_block(c, a, x0, 16, "b_"), "norm", (16,))
    t = c.node("Gather", [z, c.init("tok", np.array(2, np.int64))], ["token"], axis=1)
    head = c.node("MatMul", [t, c.init("head_w", normal(c.rng, (16, 5), 0.25))], ["head_mm"])
    c.output(c.node("Add", [head, c.init("head_b", uniform(c.rng, (5,), -0.2, 0.2))], ["logits"]))
    c.opset = 20  # Gelu (layernorm() set 17)


def c_token_select_partial(c):
    # the Gather (a negative index, kept as a one-element axis) moves up only as far as every
    # reader is on its path: the block's output is a graph output too, so only the final
    # LayerNorm runs for one token; before the block a Softmax over the tokens mixes them
    x = c.input("tokens", normal(c.rng, (2, 7, 8)))
    mixed = c.node("Softmax", [x], ["mixed"], axis=1)
    blk = _token_block(c, mixed, x, 8, "p_")
    z = layernorm(c, blk, "norm", (8,))
    c.output(c.node("Gather", [z, c.init("tok", np.array([-1], np.int64))], ["last"], axis=1))
    c.output(blk)
    c.opset = 20


def c_token_select_seq_first(c):
    # OpenAI CLIP's tower runs its blocks sequence-first, (T, N, D), and takes the class token
    # as x.permute(1, 0, 2)[:, 0, :]: Gather(Transpose) of a scalar index, which becomes a Gather
    # on axis 0 and moves up the same way
    a = c.node("Transpose", [c.input("attn_out", normal(c.rng, (2, 9, 16)))], ["a_tnd"],
               perm=[1, 0, 2])
    x0 = c.node("Transpose", [c.input("stream", normal(c.rng, (2, 9, 16)))], ["x_tnd"],
                perm=[1, 0, 2])
    blk = c.node("Transpose", [_token_block(c, a, x0, 16, "s_")], ["blk_ntd"], perm=[1, 0, 2])
    t = c.node("Gather", [blk, c.init("tok", np.array(0, np.int64))], ["token"], axis=1)
    c.output(layernorm(c, t, "ln_post", (16,)))
    c.opset = 20


def c_conv_patchify_vit(c):
    # a ViT's patch embedding (kernel = stride = 8 on 3 channels): the GPU runs it as one GEMM
    x = c.input("images", uniform(c.rng, (2, 3, 32, 40)))
    c.output(c.conv(x, "patch_embed", 3, 24, 8, strides=[8, 8]))


def c_conv_patchify_dinov2(c):
    # DINOv2's 14 x 14 patches of 3 channels: 588 taps a patch, not a multiple of 8, so the GPU
    # pads each patch's channels to 4 (784 taps, the padding zero) for aligned GEMM rows; then
    # flatten(2) and transpose(1, 2) to tokens, the same bytes as the NHWC-stored patch grid
    x = c.input("images", uniform(c.rng, (2, 3, 28, 42)))
    y = c.conv(x, "patch_embed", 3, 24, 14, strides=[14, 14])
    y = c.node("Reshape", [y, c.init("flat", np.array([0, 24, -1], np.int64))], ["flat_tokens"])
    c.output(c.node("Transpose", [y], ["tokens"], perm=[0, 2, 1]))


def c_conv_patchify_downsample(c):
    # ConvNeXt's downsampler (2x2, stride 2) with an odd edge left over, then ReLU
    x = c.input("feat", uniform(c.rng, (2, 16, 9, 12)))
    c.output(c.relu(c.conv(x, "down", 16, 32, 2, strides=[2, 2]), "relu"))


def c_conv_gelu(c):
    # the Gelu is fused into the Conv: the GPU applies it in the epilogue, not in cuDNN
    c.opset = 20
    x = c.input("images", uniform(c.rng, (3, 4, 9, 11)))
    y = c.conv(x, "conv", 4, 8, 3, pads=[1, 1, 1, 1])
    c.output(c.node("Gelu", [y], ["gelu"], name="gelu", approximate="tanh"))


def c_add_tanh(c):
    # the Tanh is fused into the Add
    x = c.input("branch_a", normal(c.rng, (3, 8, 6, 6)))
    y = c.input("branch_b", normal(c.rng, (1, 8, 1, 1)))
    s = c.node("Add", [x, y], ["sum"])
    c.output(c.node("Tanh", [s], ["tanh"]))


def c_pow_bcast(c):
    x = c.input("base", uniform(c.rng, (3, 4, 5, 6), 0.05, 3.0))
    e = c.input("exponent", uniform(c.rng, (1, 4, 1, 6), -2.0, 3.0))
    c.output(c.node("Pow", [x, e], ["power"]))


def c_pow_square(c):
    # LayerNorm as exported: (x - mean)^2, negative bases with the constant exponent 2
    x = c.input("centered", normal(c.rng, (2, 7, 48)))
    e = c.init("two", np.array(2.0, np.float32))
    c.output(c.node("Pow", [x, e], ["squared"]))


def c_pow_sqrt(c):
    x = c.input("variance", uniform(c.rng, (2, 7, 48), 1e-3, 5.0))
    e = c.init("half", np.array(0.5, np.float32))
    c.output(c.node("Pow", [x, e], ["std"]))


def c_fold_elementwise(c):
    # every elementwise op with a host row, on constants: all fold at load, so the engine runs
    # the two Adds alone (tests/CMakeLists.txt's fold_elementwise checks that); values reach
    # Round's halves, Swin V2's logit scale exp(clamp(p, max = log 100)) is the first row
    c.opset = 18  # Mish (HardSwish: 14)
    p = c.rng.uniform(-6.0, 6.0, size=(3, 8)).astype(np.float32)
    p[0, :4] = [0.5, 1.5, 2.5, -2.5]
    p[1, 0] = 5.0  # above log 100: clamped
    p = nonzero(p)
    pc = c.init("p", p)
    top = c.init("log100", np.array(math.log(100.0), np.float32))
    rows = [c.node("Exp", [c.node("Clip", [pc, "", top], ["clamped"])], ["logit_scale"]),
            c.node("Log", [c.node("Abs", [pc], ["abs"])], ["log"])]
    for op in ("Sin", "Cos", "Floor", "Ceil", "Round", "Softplus", "Mish", "Sigmoid",
               "HardSwish"):
        rows.append(c.node(op, [pc], [op.lower()]))
    rows.append(c.node("Sign", [c.node("Neg", [pc], ["neg"])], ["sign"]))
    rows.append(c.node("HardSigmoid", [pc], ["hardsigmoid"], alpha=0.3, beta=0.4))
    rows.append(c.node("Min", [pc, rows[2], rows[3]], ["min3"]))
    rows.append(c.node("Max", [rows[4], rows[5]], ["max2"]))
    lo, hi = c.init("lo", np.array(-0.5, np.float32)), c.init("hi", np.array(0.75, np.float32))
    rows.append(c.node("Clip", [pc, lo, hi], ["clip"]))
    table = c.node("Concat", rows, ["table"], axis=0)
    x = c.input("features", normal(c.rng, (len(rows) * 3, 8)))
    c.output(c.node("Add", [x, table], ["sum"]))
    # a Clip whose bounds are folded constants (Neg of an initializer) runs on image data
    y = c.input("more", uniform(c.rng, (3, 8), -2.0, 2.0))
    half = c.init("half", np.array(1.25, np.float32))
    c.output(c.node("Clip", [y, c.node("Neg", [half], ["neg_half"]), half], ["clipped"]))


def c_clip_bounds_from_shape(c):
    # bounds that follow from shapes (+-the batch size, 2 here): read at the batch being run,
    # not folded at load
    x = c.input("features", uniform(c.rng, (2, 3, 4, 5), -5.0, 5.0), ["batch", 3, 4, 5])
    n = c.node("Gather", [c.node("Shape", [x], ["shape"]), c.init("zero", np.array(0, np.int64))],
               ["n"], axis=0)
    hi = c.node("Cast", [n], ["hi"], to=TensorProto.FLOAT)
    c.output(c.node("Clip", [x, c.node("Neg", [hi], ["lo"]), hi], ["clipped"]))


def c_max_bcast_exp(c):
    # Max broadcast on both sides, the Exp after it fused into the binary op
    x = c.input("a", normal(c.rng, (3, 1, 5, 6)))
    y = c.input("b", normal(c.rng, (1, 4, 5, 1)))
    c.output(c.node("Exp", [c.node("Max", [x, y], ["max"])], ["exp"]))


def c_min_chan_softplus(c):
    # a per-channel Min against an image (the GPU's squeeze-and-excitation path, the channel
    # operand first), Softplus fused after it
    x = c.input("scale", normal(c.rng, (2, 8, 1, 1)))
    y = c.input("images", normal(c.rng, (2, 8, 5, 7)))
    c.output(c.node("Softplus", [c.node("Min", [x, y], ["min"])], ["softplus"]))


def c_conv_mish(c):
    # the Mish of YOLOv4-style backbones, fused into the Conv
    c.opset = 18  # Mish (HardSwish: 14)
    x = c.input("images", uniform(c.rng, (3, 4, 9, 11)))
    y = c.conv(x, "conv", 4, 8, 3, pads=[1, 1, 1, 1])
    c.output(c.node("Mish", [y], ["mish"], name="mish"))


def c_unary_ops(c):
    # the unary ops on image data, each alone; inputs FP16 and BF16 can hold exactly (8 bits of
    # mantissa, none below FP16's normal range), so that Floor, Ceil, Round and Sign give the
    # same integers on the GPU's FP16 and BF16 runs (halves among them)
    c.opset = 18  # Mish (HardSwish: 14)
    v = uniform(c.rng, (2, 3, 4, 5), -4.0, 4.0).astype(np.float32)
    v = (v.view(np.uint32) + 0x8000 & 0xFFFF0000).view(np.float32)  # to BF16, nearest
    v[np.abs(v) < 2.0 ** -14] = 0.0
    v.flat[:4] = [0.5, 1.5, 2.5, -2.5]
    x = c.input("features", v)
    for op in ("Exp", "Neg", "Abs", "Sin", "Cos", "Floor", "Ceil", "Round", "Sign", "Softplus",
               "Mish"):
        c.output(c.node(op, [x], [op.lower()]))
    c.output(c.node("Log", [c.node("Abs", [x], ["abs_for_log"])], ["log"]))


def c_nan_tests(c):
    # IsNaN and IsInf on image data (Log of numbers below and at 0), their bools as float, and
    # torch's SDPA form Where(IsNaN(x), c, x), which runs as one node replacing NaN by c
    v = uniform(c.rng, (2, 3, 5, 7), -1.0, 1.0)
    v.flat[:3] = [0.0, -0.0, 1.0]
    x = c.input("features", v)
    log = c.node("Log", [x], ["log"])  # NaN below 0, -inf at 0
    nan = c.node("IsNaN", [log], ["nan"])
    c.output(c.node("Cast", [nan], ["nan_f"], to=TensorProto.FLOAT))
    for name, attrs in (("inf", {}), ("inf_pos", {"detect_negative": 0}),
                        ("inf_neg", {"detect_positive": 0})):
        inf = c.node("IsInf", [log], [name], **attrs)
        c.output(c.node("Cast", [inf], [name + "_f"], to=TensorProto.FLOAT))
    zeroed = c.node("Where", [nan, c.init("fill", np.array(0.25, np.float32)), log], ["zeroed"])
    c.output(c.node("Max", [zeroed, c.init("floor", np.array(-50.0, np.float32))], ["clamped"]))


def index_table(rng, shape, extent, negative=True):
    """int64 indices in [-extent, extent) (or [0, extent)), as the indexing ops take them."""
    return rng.integers(-extent if negative else 0, extent, size=shape).astype(np.int64)


def c_gathernd_rows(c):
    # (image, channel) pairs pick (5, 4) planes of an image (stored NHWC on the GPU)
    x = c.input("images", normal(c.rng, (3, 7, 5, 4)))
    idx = c.init("tuples", index_table(c.rng, (4, 2, 2), 3))
    c.output(c.node("GatherND", [x, idx], ["rows"]))


def c_gathernd_batch_dims(c):
    # batch_dims 1: each image's own table of positions
    x = c.input("tokens", normal(c.rng, (2, 9, 6)))
    idx = c.init("positions", index_table(c.rng, (2, 5, 1), 9))
    c.output(c.node("GatherND", [x, idx], ["picked"], batch_dims=1))


def c_gather_elements_4d(c):
    # along the channels of an image, the indices smaller than the data off the axis
    x = c.input("images", normal(c.rng, (2, 5, 6, 4)))
    idx = c.init("picks", index_table(c.rng, (2, 7, 6, 3), 5))
    c.output(c.node("GatherElements", [x, idx], ["picked"], axis=1))


def c_scatter_elements_add(c):
    # duplicates along the last axis summed in order; the updates computed too
    c.opset = 18
    x = c.input("acc", normal(c.rng, (3, 8)))
    u = c.input("updates", normal(c.rng, (3, 6)))
    idx = c.init("slots", index_table(c.rng, (3, 6), 4))
    c.output(c.node("ScatterElements", [x, idx, u], ["summed"], axis=-1, reduction="add"))


def c_scatter_elements_image(c):
    # into an image along H, no duplicates (the last of them would win), then max and min
    c.opset = 18
    x = c.input("images", normal(c.rng, (2, 3, 6, 5)))
    u = c.input("updates", normal(c.rng, (2, 3, 4, 5)))
    perm = np.stack([np.stack([np.stack([c.rng.permutation(6)[:4] for _ in range(5)], 1)
                               for _ in range(3)]) for _ in range(2)]).astype(np.int64)
    idx = c.init("rows", perm)
    y = c.node("ScatterElements", [x, idx, u], ["placed"], axis=2)
    y = c.node("ScatterElements", [y, idx, u], ["maxed"], axis=2, reduction="max")
    c.output(c.node("ScatterElements", [y, idx, u], ["mined"], axis=-2, reduction="min"))


def c_fold_index_tables(c):
    # relative-position tables indexed by constant index tables (BEiT, Swin V2, LeViT write
    # them with Gather; GatherND, GatherElements and ScatterElements do the same on constants):
    # all fold at load, int64 ones included, so one Add runs (fold_index_tables checks)
    c.opset = 18
    table = c.init("bias_table", normal(c.rng, (13, 4)))
    pairs = c.init("pairs", index_table(c.rng, (6, 6, 1), 13))
    bias = c.node("GatherND", [table, pairs], ["bias"])  # (6, 6, 4)
    order = c.init("order", index_table(c.rng, (6, 6, 4), 6, negative=False))
    bias = c.node("GatherElements", [bias, order], ["shuffled"], axis=1)
    ids = c.init("ids", np.arange(24, dtype=np.int64).reshape(6, 4) * 3)
    cols = c.init("cols", np.array([[1, 0], [2, 1], [0, 3]], np.int64))
    taken = c.node("GatherND", [ids, cols], ["taken"])  # int64 (3,)
    zeros = c.init("zeros", np.zeros((6, 6, 4), np.float32))
    where = c.init("where", index_table(c.rng, (3, 6, 4), 6))
    upd = c.node("Cast", [c.node("Unsqueeze", [taken, c.init("axes", np.array([1, 2]))],
                                 ["taken3"])], ["takenf"], to=TensorProto.FLOAT)
    upd = c.node("Expand", [upd, c.init("shape", np.array([3, 6, 4], np.int64))], ["upd"])
    marks = c.node("ScatterElements", [zeros, where, upd], ["marks"], axis=0, reduction="add")
    table = c.node("Add", [bias, marks], ["table"])
    x = c.input("scores", normal(c.rng, (2, 6, 6, 4)))
    c.output(c.node("Add", [x, table], ["biased"]))


def c_tile_probe_from_shape(c):
    # SigLIP's attention-pooling head: a learned probe (1, 1, D) repeated over the batch with
    # repeats Concat(Shape(x)[0:1], [1, 1]) (torch's probe.repeat(batch_size, 1, 1)); the
    # repeats follow from the batch, checked at batch 3 and at batch 2 (a second data set)
    x = c.input("tokens", normal(c.rng, (3, 5, 8)), dims=["N", 5, 8])
    c.more_feeds.append({"tokens": normal(c.rng, (2, 5, 8))})
    n = c.node("Slice", [c.node("Shape", [x], ["shape"]), c.init("zero", np.array([0])),
                         c.init("one", np.array([1])), c.init("axis", np.array([0]))], ["batch"])
    reps = c.node("Concat", [n, c.init("ones", np.array([1, 1], np.int64))], ["reps"], axis=0)
    probe = c.node("Tile", [c.init("probe", normal(c.rng, (1, 1, 8))), reps], ["probes"])
    kt = c.node("Transpose", [x], ["keys_t"], perm=[0, 2, 1])
    c.output(c.node("MatMul", [probe, kt], ["scores"]))  # (N, 1, 5)
    c.output(c.node("Add", [probe, x], ["probed"]))  # (N, 5, 8)


def c_tile_image_4d(c):
    # an image tiled along C and W (stored NHWC on the GPU), then one with dims of 1 tiled
    # (broadcast without a split) beside a dim that is split
    x = c.input("images", normal(c.rng, (2, 3, 5, 4)))
    c.output(c.node("Tile", [c.node("Relu", [x], ["act"]),
                             c.init("reps", np.array([1, 2, 1, 3], np.int64))], ["tiled"]))
    m = c.node("ReduceMean", [x], ["pooled"], axes=[1, 3], keepdims=1)  # (2, 1, 5, 1)
    c.output(c.node("Tile", [m, c.init("reps_m", np.array([2, 3, 2, 4], np.int64))], ["tiled_m"]))


def c_tile_rank5_deep(c):
    # three dims split and two not: the broadcast's rank is 8, the kernels' most
    x = c.input("volume", normal(c.rng, (2, 3, 1, 2, 3)))
    c.output(c.node("Tile", [x, c.init("reps", np.array([2, 2, 3, 1, 2], np.int64))], ["tiled"]))


def einsum_case(c, equation, *shapes, const=()):
    """One Einsum of fresh inputs (operands listed in const become initializers)."""
    c.opset = 12 if "opset12" in c.name else OPSET
    ins = [c.init("w%d" % k, normal(c.rng, s)) if k in const else
           c.input("x%d" % k, normal(c.rng, s)) for k, s in enumerate(shapes)]
    return c.node("Einsum", ins, ["y"], equation=equation)


def c_einsum_attention_scores(c):
    # q k^T per head, as torch.einsum writes attention: a MatMul by a transposed operand
    c.output(einsum_case(c, "bhid,bhjd->bhij", (2, 3, 5, 4), (2, 3, 6, 4)))


def c_einsum_attention_values(c):
    c.output(einsum_case(c, "bhij,bhjd->bhid", (2, 3, 5, 6), (2, 3, 6, 4)))


def c_einsum_linear(c):
    # a constant (j, k) operand: a Linear layer after lowering
    c.output(einsum_case(c, "bij,jk->bik", (2, 5, 6), (6, 3), const=(1,)))


def c_einsum_outer(c):
    c.output(einsum_case(c, "i,j->ij", (5,), (4,)))


def c_einsum_channel_mix(c):
    # an image's channels mixed by per-image weights: h and w ride as batch dims of the MatMul
    c.output(einsum_case(c, "bchw,bkc->bkhw", (2, 3, 5, 4), (2, 6, 3)))


def c_einsum_transpose(c):
    c.output(einsum_case(c, "ij->ji", (5, 4)))


def c_einsum_row_sums(c):
    c.output(einsum_case(c, "ij->i", (5, 4)))


def c_einsum_implicit_ellipsis(c):
    # no "->": numpy's implicit output, the ellipsis, then the letters used once in order
    # ("...ik"); the ellipsis' dims are batch dims of the MatMul
    c.output(einsum_case(c, "...ij,...jk", (2, 3, 4, 5), (2, 3, 5, 6)))


def c_einsum_two_contracted(c):
    # two contracted labels: one the MatMul's K, the other a batch dim summed after
    c.output(einsum_case(c, "bpq,bpqk->bk", (2, 3, 4), (2, 3, 4, 5)))


def c_einsum_three_operands_opset12(c):
    # chained left to right; opset 12 takes Unsqueeze's, Squeeze's and ReduceSum's axes as
    # attributes; the elementwise pair is a Mul
    c.output(einsum_case(c, "bi,bi,ij->bj", (3, 4), (3, 4), (4, 5)))


def c_einsum_sum_only_operand(c):
    # a label one operand has alone and the output drops: summed first (ReduceSum)
    c.output(einsum_case(c, "bij,bk->bik", (2, 3, 4), (2, 5)))


def c_einsum_eight_operands(c):
    # the most operands and dims the lowering takes: seven elementwise pairs (Muls), the labels
    # kept for later operands at their most
    c.output(einsum_case(c, ",".join(["abcdefgh"] * 8) + "->abcdefgh", *[(2,) * 8] * 8))


def c_einsum_ellipsis_computed(c):
    # an ellipsis over a computed tensor, whose rank the lowering learns by inferring the graph
    # built so far; its weight a constant (a Linear layer over the last dim)
    x = c.input("tokens", normal(c.rng, (2, 3, 4, 6)), dims=["N", 3, 4, 6])
    r = c.node("Relu", [x], ["act"])
    w = c.init("w", normal(c.rng, (6, 5)))
    c.output(c.node("Einsum", [r, w], ["y"], equation="...d,de->...e"))


def c_fold_tile(c):
    # a constant table tiled by constant repeats (int64 ones too, into the repeats of another):
    # both fold at load, so one Add runs (fold_tile checks)
    table = c.init("pos_table", normal(c.rng, (1, 3, 2)))
    reps = c.node("Tile", [c.init("reps_row", np.array([1, 2], np.int64)),
                           c.init("reps_twice", np.array([2], np.int64))], ["reps"])  # 1,2,1,2
    reps = c.node("Slice", [reps, c.init("at1", np.array([1])), c.init("to4", np.array([4])),
                            c.init("axis0", np.array([0]))], ["reps3"])  # (2, 1, 2)
    table = c.node("Tile", [table, reps], ["tiled"])  # (2, 3, 4)
    x = c.input("tokens", normal(c.rng, (2, 3, 4)))
    c.output(c.node("Add", [x, table], ["biased"]))


def random_cases():
    return [(name[2:], fn) for name, fn in globals().items()
            if name.startswith("c_") and callable(fn)]


def write_random_cases(out_dir):
    written = []
    for short, fn in random_cases():
        name = "si_" + short
        c = Case(name)
        fn(c)
        model, results = c.model()
        crosscheck(name, model, c.feeds, results)
        write_case(out_dir, name, model, c.feeds, results)
        for k, feeds in enumerate(c.more_feeds, 1):
            more = c.run(model, feeds)
            crosscheck(name, model, feeds, more)
            write_case(out_dir, name, model, feeds, more, set_index=k)
        written.append(name)
    print("wrote %d random cases (onnxruntime outputs, confirmed by a float64 numpy evaluation):" % len(written))
    for i in range(0, len(written), 3):
        print("  " + "  ".join(written[i:i + 3]))
    return written


# --------------------------------------------------------------------------------------------
# (c) the demo model on real photos
# --------------------------------------------------------------------------------------------


def write_demo_case(out_dir, model_path):
    import onnxruntime as ort

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "datasets"))
    from make_demo_photos import photo_paths

    model = onnx.load(model_path)
    mean, std = model_mean_std(model)
    sources = {os.path.basename(p): p for p in photo_paths()}
    batch = np.stack([preprocess(sources[n], mean, std) for n in ("chelsea.png", "coffee.png")])
    in_name = model.graph.input[0].name
    out_name = model.graph.output[0].name
    sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    (logits,) = sess.run([out_name], {in_name: batch})
    name = "efficientnet_lite0_photo"
    write_case(out_dir, name, model, {in_name: batch}, [logits])
    print("wrote %s: chelsea top-1 %d, coffee top-1 %d" % (name, int(np.argmax(logits[0])),
                                                           int(np.argmax(logits[1]))))
    return name


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output-dir", required=True)
    ap.add_argument("--demo-model", help="EfficientNet-Lite0 ONNX from datasets/efficientnet_lite0_to_onnx.py")
    ap.add_argument("--no-node-tests", action="store_true",
                    help="only the si_* cases (an onnx package without its node test data)")
    args = ap.parse_args()
    os.makedirs(args.output_dir, exist_ok=True)
    if not args.no_node_tests:
        copy_node_tests(args.output_dir)
    write_random_cases(args.output_dir)
    if args.demo_model:
        write_demo_case(args.output_dir, args.demo_model)


if __name__ == "__main__":
    main()
