#!/usr/bin/env python3
"""The message for a model shardinfer cannot run: unsupported operators grouped by op type with
their counts and first node, and no line for the supported nodes that only read an unsupported
node's output (they would otherwise cascade into hundreds of "not produced by any earlier node"
lines). A genuinely broken graph (an input nobody produces) is still reported as such. An Einsum
that cannot be lowered onto image data is named with its equation and the reason.

Usage: test_unsupported_message.py --shardinfer BIN --work DIR
"""
import argparse
import os
import shutil
import subprocess
import sys

import onnx
from onnx import TensorProto, helper

SHAPE = ["N", 8, 4, 4]


def save(path, nodes, inits=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)],
                          list(inits))
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def inspect(shardinfer, path):
    r = subprocess.run([shardinfer, "inspect", path], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stderr.strip().splitlines()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardinfer", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    failures = 0

    # 3 GroupNormalization and 1 Hardmax between supported ops, each reading the previous output
    scale = helper.make_tensor("scale", TensorProto.FLOAT, [4], [1.0] * 4)
    ln = lambda i, src, dst: helper.make_node("GroupNormalization", [src, "scale"], [dst],
                                              name="/blocks.%d/norm1" % i)
    chain = [helper.make_node("Relu", ["x"], ["r0"], name="relu0"), ln(0, "r0", "l0"),
             helper.make_node("Relu", ["l0"], ["r1"], name="relu1"), ln(1, "r1", "l1"),
             helper.make_node("Hardmax", ["l1"], ["e"], name="/mlp/Hardmax"),
             helper.make_node("Add", ["e", "r0"], ["s"], name="add"), ln(2, "s", "l2"),
             helper.make_node("Sigmoid", ["l2"], ["y"], name="sigmoid")]
    path = os.path.join(a.work, "unsupported.onnx")
    save(path, chain, [scale])
    rc, lines = inspect(a.shardinfer, path)
    want = ["shardinfer: error: %s: 2 unsupported operator types (4 nodes):" % path,
            "  GroupNormalization \u00d73 (first: /blocks.0/norm1)",
            "  Hardmax \u00d71 (first: /mlp/Hardmax)"]
    good = rc != 0 and lines == want
    print("%s grouped unsupported operators: rc=%d" % ("ok  " if good else "FAIL", rc))
    if not good:
        print("  got:\n    " + "\n    ".join(lines) + "\n  want:\n    " + "\n    ".join(want))
    failures += not good
    if any("not produced by any earlier node" in s for s in lines):
        print("FAIL a cascade line is reported")
        failures += 1

    # a real broken graph: an input that no node, initializer or graph input defines
    broken = [helper.make_node("Relu", ["x"], ["r0"], name="relu0"),
              helper.make_node("Add", ["r0", "nowhere"], ["y"], name="add_missing")]
    path = os.path.join(a.work, "broken.onnx")
    save(path, broken)
    rc, lines = inspect(a.shardinfer, path)
    good = (rc != 0 and len(lines) == 2 and "add_missing" in lines[1] and "'nowhere'" in lines[1]
            and "not produced by any earlier node" in lines[1])
    print("%s a missing input is still reported: %s" % ("ok  " if good else "FAIL", lines))
    failures += not good

    # Einsum forms not lowered onto image data: the node, the equation and why, one per model
    refused = [("bcii->bci", 1, ["label 'i' repeats within operand 0", "diagonal"]),
               ("abcd," * 8 + "abcd->abcd", 9, ["9 operands (at most 8)"]),
               ("ab1d->abd", 1, ["character '1' is not a label"]),
               ("abcd->abce", 1, ["output label 'e' is in no input"]),
               ("abc->ab", 1, ["operand 0 has rank 4 but 3 labels"]),
               ("...d->d", 1, ["the output drops the ellipsis' dims"])]
    for k, (eq, n_in, words) in enumerate(refused):
        nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
                 helper.make_node("Einsum", ["r"] * n_in, ["e"], name="mix%d" % k, equation=eq),
                 helper.make_node("Relu", ["e"], ["y"], name="after")]
        path = os.path.join(a.work, "einsum%d.onnx" % k)
        save(path, nodes)
        rc, lines = inspect(a.shardinfer, path)
        text = "\n".join(lines)
        good = (rc != 0 and len(lines) == 2 and "Einsum (equation '%s': " % eq in lines[1]
                and "(first: mix%d)" % k in lines[1] and all(w in text for w in words))
        print("%s Einsum '%s' refused: %s" % ("ok  " if good else "FAIL", eq, text))
        failures += not good
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
