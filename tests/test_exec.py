#!/usr/bin/env python3
"""Tests `shardinfer exec` end to end on the reference cases that make_ref_cases.py writes
(DIR/<case>/model.onnx + test_data_set_0/input_K.pb, output_K.pb): each case's inputs are
converted to .npy with onnx.numpy_helper (written as .npy format 1.0, 2.0 and 3.0 in turn), the
model is run through the command line, and every output .npy is compared with the reference:
max|out - ref| / max|ref| <= 1e-4 for the si_* and efficientnet cases (onnxruntime references),
numpy.allclose(rtol=1e-3, atol=1e-7) for ONNX's own test_* node tests. Cases listed in
onnx_node_unsupported.txt must be refused with exit 1 and one line. Then bad invocations (missing
or unknown input, wrong shape or dtype, files that are not .npy, ...) must exit nonzero with one
line naming the problem, and output names with path characters must be sanitised.

Usage: test_exec.py --shardinfer PATH --cases DIR [--expect-unsupported FILE]
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
failures = []


def fail(what):
    failures.append(what)
    print("FAIL " + what)


def sanitise(name):
    """The file name exec gives an output (see output_paths in src/cli/exec.c)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def exec_cmd(args, shardinfer):
    r = subprocess.run([shardinfer, "exec"] + args, capture_output=True, text=True, timeout=600)
    return r.returncode, r.stdout, r.stderr


def save_npy(path, a, version):
    # not np.ascontiguousarray: it turns a 0-d array into shape (1,)
    with open(path, "wb") as f:
        np.lib.format.write_array(f, np.require(a, requirements="C"), version=version, allow_pickle=False)


def load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t


def graph_inputs(model):
    inits = {i.name for i in model.graph.initializer}
    return [i.name for i in model.graph.input if i.name not in inits]


def read_unsupported(path):
    names = set()
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                names.add(line.split()[0])
    return names


def compare(case, name, out, ref):
    if out.shape != ref.shape:
        return "output '%s': shape %s, reference %s" % (name, out.shape, ref.shape)
    # the engine computes floats in float32 and every integer or bool type as int64, but a bool
    # computed from image data (IsNaN, IsInf), which is float32 0 or 1
    want = np.float32 if ref.dtype.kind == "f" else np.int64
    if out.dtype != want and not (ref.dtype == np.bool_ and out.dtype == np.float32):
        return "output '%s': dtype %s, expected %s" % (name, out.dtype, np.dtype(want))
    a, b = out.astype(np.float64), ref.astype(np.float64)
    if case.startswith("test_"):
        if not np.allclose(a, b, rtol=1e-3, atol=1e-7, equal_nan=True):
            bad = ~np.isclose(a, b, rtol=1e-3, atol=1e-7, equal_nan=True)
            return "output '%s': %d of %d values off (rtol 1e-3, atol 1e-7)" % (
                name, int(bad.sum()), a.size)
        return None
    if a.size == 0:
        return None
    diff, mref = np.max(np.abs(a - b)), np.max(np.abs(b))
    rel = diff / mref if mref > 0 else diff
    if not rel <= 1e-4:
        return "output '%s': max|diff|/max|ref| = %.3g > 1e-4" % (name, rel)
    return None


def run_case(shardinfer, case_dir, tmp, index, unsupported):
    case = os.path.basename(case_dir)
    model = onnx.load(os.path.join(case_dir, "model.onnx"))
    names = graph_inputs(model)
    data = os.path.join(case_dir, "test_data_set_0")
    work = os.path.join(tmp, case)
    os.makedirs(work)
    args = [os.path.join(case_dir, "model.onnx")]
    version = [(1, 0), (2, 0), (3, 0)][index % 3]
    k = 0
    while os.path.exists(os.path.join(data, "input_%d.pb" % k)):
        t = load_pb(os.path.join(data, "input_%d.pb" % k))
        name = t.name or names[k]
        path = os.path.join(work, "input_%d.npy" % k)
        save_npy(path, numpy_helper.to_array(t), version)
        args += ["--input", "%s=%s" % (name, path)]
        k += 1
    out_dir = os.path.join(work, "out")
    args += ["--output-dir", out_dir, "--threads", "2"]
    rc, out, err = exec_cmd(args, shardinfer)
    lines = err.strip().splitlines()
    if case in unsupported:
        if rc != 1 or len(lines) != 1:
            fail("%s: listed as unsupported, but exec gave exit %d with %d stderr lines%s" % (
                case, rc, len(lines), ": update the list" if rc == 0 else ""))
        else:
            print("UNSUPPORTED (expected) %s: %s" % (case, lines[0]))
        return
    if rc != 0:
        fail("%s: exit %d: %s" % (case, rc, err.strip()))
        return
    outputs = [o.name for o in model.graph.output]
    if len(out.strip().splitlines()) != len(outputs):
        fail("%s: %d summary lines for %d outputs:\n%s" % (case, len(out.splitlines()),
                                                           len(outputs), out))
        return
    problems = []
    for k, name in enumerate(outputs):
        ref_path = os.path.join(data, "output_%d.pb" % k)
        if not os.path.exists(ref_path):
            continue
        ref = numpy_helper.to_array(load_pb(ref_path))
        path = os.path.join(out_dir, sanitise(name) + ".npy")
        if not os.path.exists(path):
            problems.append("output '%s': %s was not written" % (name, path))
            continue
        p = compare(case, name, np.load(path, allow_pickle=False), ref)
        if p:
            problems.append(p)
    if problems:
        fail("%s: %s" % (case, "; ".join(problems)))
    else:
        print("PASS %s" % case)


def check_bad(shardinfer, label, args, want_rc, needles):
    """One bad invocation: exit want_rc (or any nonzero if None), one stderr line holding every
    needle."""
    rc, out, err = exec_cmd(args, shardinfer)
    lines = err.strip().splitlines()
    problems = []
    if rc == 0 or (want_rc is not None and rc != want_rc):
        problems.append("exit %d, expected %s" % (rc, want_rc if want_rc is not None else "nonzero"))
    if len(lines) != 1:
        problems.append("%d stderr lines, expected one" % len(lines))
    for n in needles:
        if n not in err:
            problems.append("message does not name %r" % n)
    if problems:
        fail("bad invocation '%s': %s; stderr: %s" % (label, ", ".join(problems), err.strip()))
    else:
        print("PASS bad invocation '%s' (exit %d): %s" % (label, rc, lines[0]))


def make_model(path):
    """x (N, 3, 4, 4) -> Relu -> "feat/relu:0" and x + x -> "feat_relu:0": the two names sanitise
    alike, so the second output must get a suffix."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 4])
    y1 = helper.make_tensor_value_info("feat/relu:0", TensorProto.FLOAT, ["N", 3, 4, 4])
    y2 = helper.make_tensor_value_info("feat_relu:0", TensorProto.FLOAT, ["N", 3, 4, 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["feat/relu:0"], name="relu"),
                           helper.make_node("Add", ["x", "x"], ["feat_relu:0"], name="add")],
                          "names", [x], [y1, y2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)


def bad_invocations(shardinfer, tmp):
    model = os.path.join(tmp, "names.onnx")
    make_model(model)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 3, 4, 4)).astype(np.float32)
    good = os.path.join(tmp, "x.npy")
    np.save(good, x)
    out_dir = os.path.join(tmp, "names_out", "nested")

    # the good run first: symbolic batch 3, sanitised and disambiguated names
    rc, out, err = exec_cmd([model, "--input", "x=" + good, "--output-dir", out_dir], shardinfer)
    f1, f2 = os.path.join(out_dir, "feat_relu_0.npy"), os.path.join(out_dir, "feat_relu_0_1.npy")
    if rc != 0:
        fail("names model: exit %d: %s" % (rc, err.strip()))
    elif not (os.path.exists(f1) and os.path.exists(f2)):
        fail("names model: outputs not at %s and %s (dir holds %s)" % (f1, f2,
                                                                        os.listdir(out_dir)))
    elif not (np.array_equal(np.load(f1), np.maximum(x, 0)) and np.array_equal(np.load(f2), x + x)):
        fail("names model: wrong output values")
    elif len(out.strip().splitlines()) != 2 or "feat/relu:0" not in out or "(3, 3, 4, 4)" not in out:
        fail("names model: summary should be one line per output with name and shape:\n" + out)
    else:
        print("PASS names model: outputs written as feat_relu_0.npy, feat_relu_0_1.npy")

    def npy(name, a, **kw):
        p = os.path.join(tmp, name)
        np.save(p, a, **kw)
        return p

    wrong_shape = npy("wrong_shape.npy", x[:, :, :, :3])
    wrong_dtype = npy("wrong_dtype.npy", x.astype(np.float64))
    fortran = npy("fortran.npy", np.asfortranarray(x))
    truncated = os.path.join(tmp, "truncated.npy")
    with open(good, "rb") as f, open(truncated, "wb") as g:
        g.write(f.read()[:200])
    missing = os.path.join(tmp, "no_such.npy")
    od = ["--output-dir", os.path.join(tmp, "bad_out")]
    cases = [
        ("missing --input", [model] + od, 1, ["'x'"]),
        ("unknown input name", [model, "--input", "x=" + good, "--input", "bogus=" + good] + od, 1,
         ["bogus"]),
        ("wrong shape", [model, "--input", "x=" + wrong_shape] + od, 1,
         ["'x'", "(3, 3, 4, 3)", "(N, 3, 4, 4)"]),
        ("wrong dtype", [model, "--input", "x=" + wrong_dtype] + od, 1, ["'x'", "float64"]),
        ("non-.npy file", [model, "--input", "x=" + model] + od, 1, [model, ".npy"]),
        ("missing file", [model, "--input", "x=" + missing] + od, 1, [missing]),
        ("truncated .npy", [model, "--input", "x=" + truncated] + od, 1, [truncated]),
        ("Fortran-order .npy", [model, "--input", "x=" + fortran] + od, 1, [fortran, "Fortran"]),
        ("missing model", [os.path.join(tmp, "none.onnx"), "--input", "x=" + good] + od, 1,
         ["none.onnx"]),
        ("input given twice", [model, "--input", "x=" + good, "--input", "x=" + good] + od, 2,
         ["'x'"]),
        ("--input without '='", [model, "--input", good] + od, 2, ["NAME=FILE"]),
        ("missing --output-dir", [model, "--input", "x=" + good], 2, ["--output-dir"]),
        ("missing MODEL", ["--input", "x=" + good] + od, 2, ["MODEL"]),
        ("unknown option", [model, "--input", "x=" + good, "--bogus"] + od, 2, ["--bogus"]),
        ("unknown backend", [model, "--input", "x=" + good, "--backend", "tpu"] + od, 2, ["tpu"]),
        ("bad --threads", [model, "--input", "x=" + good, "--threads", "0"] + od, 2,
         ["--threads"]),
    ]
    for label, args, rc, needles in cases:
        check_bad(shardinfer, label, args, rc, needles)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shardinfer", required=True)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--expect-unsupported",
                    default=os.path.join(HERE, "onnx_node_unsupported.txt"))
    a = ap.parse_args()
    unsupported = read_unsupported(a.expect_unsupported)
    cases = sorted(d for d in os.listdir(a.cases)
                   if os.path.exists(os.path.join(a.cases, d, "model.onnx")))
    if not cases:
        sys.exit("no cases (DIR/<case>/model.onnx) under %s" % a.cases)
    with tempfile.TemporaryDirectory(prefix="si_test_exec_") as tmp:
        for i, case in enumerate(cases):
            run_case(a.shardinfer, os.path.join(a.cases, case), tmp, i, unsupported)
        bad_invocations(a.shardinfer, tmp)
    print("%d cases, %d failures" % (len(cases), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
