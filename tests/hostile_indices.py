#!/usr/bin/env python3
"""Indices that leave the data, in GatherND, GatherElements and ScatterElements: a constant one
is refused when the model loads, naming the node and the index, whether the op runs on image
data or folds a constant table; one that follows from shapes is refused at the batch that puts
it out of range; index tensors larger than the data off the axis are refused too. Tile's repeats
are bounded the same way: a huge, negative or miscounted repeats is refused at load naming the
node (on image data or folding a constant), one that follows from shapes at the batch that makes
the output too large, before anything is allocated. No case may crash or read outside the data
(the unit suites run under AddressSanitizer too).

Usage: hostile_indices.py --shardinfer BIN --work DIR
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def model(path, nodes, inits, x_shape, y_shape):
    x = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)]
    y = [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)]
    g = helper.make_graph(nodes, "g", x, y, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)


def cases():
    i64 = lambda v: np.array(v, np.int64)
    f32 = lambda *s: np.ones(s, np.float32)
    add = lambda a: helper.make_node("Add", ["x", a], ["y"], name="add")
    # (name, nodes, initializers, x shape, y shape, words the message must hold)
    return [
        ("gathernd_device", [helper.make_node("GatherND", ["x", "i"], ["y"], name="gnd")],
         {"i": i64([[0, 5]])}, [2, 3, 4], [1, 4], ["gnd", "index 5", "out of range"]),
        ("gathernd_negative", [helper.make_node("GatherND", ["x", "i"], ["y"], name="gnd")],
         {"i": i64([[-3, 0]])}, [2, 3, 4], [1, 4], ["gnd", "index -3", "out of range"]),
        ("gathernd_folded", [helper.make_node("GatherND", ["t", "i"], ["c"], name="gnd_const"),
                             add("c")],
         {"t": f32(3, 4), "i": i64([[1 << 40]])}, [4], [4], ["gnd_const", "out of range"]),
        ("gathernd_tuple_too_long", [helper.make_node("GatherND", ["x", "i"], ["y"], name="gnd")],
         {"i": i64([[0, 0, 0, 0]])}, [2, 3, 4], [1], ["gnd", "does not fit"]),
        ("gather_elements_device",
         [helper.make_node("GatherElements", ["x", "i"], ["y"], name="ge", axis=1)],
         {"i": i64([[0, 4, 1]])}, [2, 3], [1, 3], ["ge", "index 4", "out of range"]),
        ("gather_elements_wider",
         [helper.make_node("GatherElements", ["x", "i"], ["y"], name="ge", axis=0)],
         {"i": np.zeros((1, 5), np.int64)}, [2, 3], [1, 5], ["ge", "exceeds the data"]),
        ("gather_elements_folded",
         [helper.make_node("GatherElements", ["t", "i"], ["c"], name="ge_const", axis=0), add("c")],
         {"t": f32(2, 3), "i": i64([[0, -3, 1]])}, [1, 3], [1, 3], ["ge_const", "out of range"]),
        ("scatter_elements_device",
         [helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], name="se", axis=0)],
         {"i": i64([[0], [-7]]), "u": f32(2, 1)}, [3, 2], [3, 2], ["se", "index -7", "out of range"]),
        ("scatter_elements_folded",
         [helper.make_node("ScatterElements", ["t", "i", "u"], ["c"], name="se_const", axis=1,
                           reduction="add"), add("c")],
         {"t": f32(2, 2), "i": i64([[2], [0]]), "u": f32(2, 1)}, [2, 2], [2, 2],
         ["se_const", "out of range"]),
        ("scatter_elements_updates_shape",
         [helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], name="se", axis=0)],
         {"i": i64([[0, 1]]), "u": f32(1, 3)}, [3, 2], [3, 2], ["se", "differ in shape"]),
        ("tile_huge_repeats", [helper.make_node("Tile", ["x", "r"], ["y"], name="tile")],
         {"r": i64([1 << 40, 1 << 40])}, [2, 3], [2, 3], ["tile", "repeats", "at most"]),
        ("tile_overflowing_repeats", [helper.make_node("Tile", ["x", "r"], ["y"], name="tile")],
         {"r": i64([(1 << 62) + 1, 4])}, [4, 3], [4, 3], ["tile", "repeats", "at most"]),
        ("tile_many_elements", [helper.make_node("Tile", ["x", "r"], ["y"], name="tile")],
         {"r": i64([1 << 20, 1 << 20])}, [2, 3], [2, 3], ["tile", "elements (at most"]),
        ("tile_negative", [helper.make_node("Tile", ["x", "r"], ["y"], name="tile")],
         {"r": i64([2, -1])}, [2, 3], [2, 3], ["tile", "negative"]),
        ("tile_count", [helper.make_node("Tile", ["x", "r"], ["y"], name="tile")],
         {"r": i64([2, 2, 2])}, [2, 3], [2, 3], ["tile", "repeats must be 2 integers"]),
        ("tile_folded", [helper.make_node("Tile", ["t", "r"], ["c"], name="tile_const"), add("c")],
         {"t": f32(2, 3), "r": i64([1 << 31, 1])}, [2, 3], [2, 3], ["tile_const", "repeats"]),
    ]


def inspect(shardinfer, path, *extra):
    return subprocess.run([shardinfer, "inspect", path, *extra], capture_output=True, text=True,
                          timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardinfer", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    failures = 0
    for name, nodes, inits, xs, ys, words in cases():
        path = os.path.join(a.work, name + ".onnx")
        model(path, nodes, inits, xs, ys)
        r = inspect(a.shardinfer, path)
        good = r.returncode == 1 and all(w in r.stderr for w in words)
        print("%s %s: rc=%d %s" % ("ok  " if good else "FAIL", name, r.returncode,
                                    r.stderr.strip().replace("\n", " | ")))
        failures += not good

    # indices that follow from shapes: the batch size indexes a dim of 3, in range at batch 1
    # and 2, out of it from batch 3 on (inspect plans batches 1 and 8)
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape", start=0, end=1),
             helper.make_node("Reshape", ["s", "shape2"], ["i"], name="to_2d"),
             helper.make_node("Sub", ["i", "one"], ["im1"], name="minus_one"),
             helper.make_node("GatherElements", ["x", "im1"], ["y"], name="ge_batch", axis=1)]
    path = os.path.join(a.work, "gather_elements_from_shape.onnx")
    model(path, nodes, {"shape2": np.array([1, 1], np.int64), "one": np.array(1, np.int64)},
          ["N", 3], ["N", 1])
    ok1 = inspect(a.shardinfer, path, "--batch", "1,2")
    bad = inspect(a.shardinfer, path, "--batch", "1,8")
    good = (ok1.returncode == 0 and bad.returncode == 1 and "ge_batch" in bad.stderr
            and "index 7" in bad.stderr)
    print("%s indices from shapes: batch 2 rc=%d, batch 8 rc=%d %s"
          % ("ok  " if good else "FAIL", ok1.returncode, bad.returncode, bad.stderr.strip()))
    failures += not good

    # Tile's repeats from shapes: (N, 1) tiled N * 2^27 times along dim 1, fine at batch 2
    # (2^29 elements, planned, never allocated by inspect), too large at batch 8
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape", start=0, end=1),
             helper.make_node("Mul", ["s", "k"], ["r1"], name="times_k"),
             helper.make_node("Concat", ["one1", "r1"], ["r"], name="repeats", axis=0),
             helper.make_node("Tile", ["x", "r"], ["y"], name="tile_batch")]
    path = os.path.join(a.work, "tile_from_shape.onnx")
    model(path, nodes, {"k": np.array([1 << 27], np.int64), "one1": np.array([1], np.int64)},
          ["N", 1], ["N", "M"])
    ok1 = inspect(a.shardinfer, path, "--batch", "1,2")
    bad = inspect(a.shardinfer, path, "--batch", "1,8")
    good = (ok1.returncode == 0 and bad.returncode == 1 and "tile_batch" in bad.stderr
            and "repeats" in bad.stderr)
    print("%s Tile repeats from shapes: batch 2 rc=%d, batch 8 rc=%d %s"
          % ("ok  " if good else "FAIL", ok1.returncode, bad.returncode, bad.stderr.strip()))
    failures += not good
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
