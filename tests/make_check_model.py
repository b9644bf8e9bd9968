"""Writes the small model test_engine_check asks a picky test backend about: two Pads, three Softmaxes
(two over axis 1, one over axis 3) and a Transpose between them, every node named, batch
symbolic."""
import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ap = argparse.ArgumentParser()
ap.add_argument("--output", required=True)
args = ap.parse_args()

pads = numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "pads")
nodes = [
    helper.make_node("Pad", ["x", "pads"], ["a"], name="pad_a"),
    helper.make_node("Softmax", ["a"], ["b"], name="sm_a", axis=1),
    helper.make_node("Transpose", ["b"], ["c"], name="tr", perm=[0, 1, 3, 2]),
    helper.make_node("Softmax", ["c"], ["d"], name="sm_b", axis=1),
    helper.make_node("Pad", ["d", "pads"], ["e"], name="pad_b"),
    helper.make_node("Softmax", ["e"], ["y"], name="sm_c", axis=3),
]
graph = helper.make_graph(
    nodes, "engine_check",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 4])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 8, 8])],
    [pads])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
onnx.checker.check_model(model)
onnx.save(model, args.output)
