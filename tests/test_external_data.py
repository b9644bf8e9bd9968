#!/usr/bin/env python3
"""Models whose weights sit in a side file (ONNX external data): a case saved by onnx with
save_as_external_data must give the same outputs as the same model with embedded weights, and
a location that leaves the model's directory (.., an absolute path, a symlink pointing out), a
side file too short for the tensor, a FIFO in place of the side file or of the model (which
must not block), a malformed offset or length, and an initializer too large for the memory
limit must each be refused with one clear message naming the tensor (and, for the allocation,
its size and the model). Every run has a timeout: a hang is a failure.

Usage: test_external_data.py --runner RUN_ONNX_CASES --shardinfer BIN --cases DIR --work DIR
"""
import argparse
import os
import resource
import shutil
import subprocess
import sys

import onnx
from onnx import TensorProto, helper

TIMEOUT = 30


def inspect(shardinfer, model, **kw):
    """rc and non-empty stderr lines of `shardinfer inspect MODEL`; a hang is rc 'timeout'."""
    try:
        r = subprocess.run([shardinfer, "inspect", model], capture_output=True, text=True,
                           timeout=TIMEOUT, **kw)
    except subprocess.TimeoutExpired:
        return "timeout", [f"(no answer after {TIMEOUT} s: blocked?)"]
    return r.returncode, [l for l in r.stderr.splitlines() if l.strip()]


def huge_initializer(a, d):
    """A 16 GiB external initializer (a sparse side file) under a 6 GiB address-space limit: the
    allocation must fail with a message naming the tensor, its size and the model, not abort.
    AddressSanitizer needs terabytes of address space, so there its allocator is capped instead."""
    n = 4 << 30  # float32 elements: 16 GiB
    with open(os.path.join(d, "huge.bin"), "wb") as f:
        f.truncate(n * 4)
    w = TensorProto(name="huge_w", data_type=TensorProto.FLOAT, dims=[4, 1 << 30],
                    data_location=TensorProto.EXTERNAL)
    for k, v in (("location", "huge.bin"), ("offset", "0"), ("length", str(n * 4))):
        e = w.external_data.add()
        e.key, e.value = k, v
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 1 << 30])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 1 << 30])
    g = helper.make_graph([helper.make_node("Add", ["x", "huge_w"], ["y"])], "huge", [x], [y],
                          initializer=[w])
    model = os.path.join(d, "huge.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), model)
    with open(a.shardinfer, "rb") as f:
        asan = b"__asan_init" in f.read()
    if asan:
        env = dict(os.environ, ASAN_OPTIONS="allocator_may_return_null=1:"
                                            "max_allocation_size_mb=6144")
        rc, lines = inspect(a.shardinfer, model, env=env)
        # its allocator says so itself, even when told to return NULL
        lines = [l for l in lines if "AddressSanitizer failed to allocate" not in l]
    else:
        lim = 6 << 30
        rc, lines = inspect(a.shardinfer, model,
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (lim, lim)))
    os.unlink(os.path.join(d, "huge.bin"))
    ok = (rc == 1 and len(lines) == 1 and "huge_w" in lines[0] and str(n * 4) in lines[0] and
          "huge.onnx" in lines[0])
    print(f"{'ok  ' if ok else 'FAIL'} 16 GiB initializer under a memory limit: rc={rc} {lines}")
    return not ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runner", required=True)
    ap.add_argument("--shardinfer", required=True)
    ap.add_argument("--cases", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    src = os.path.join(a.cases, "si_small_cnn")
    d = os.path.join(a.work, "si_small_cnn_external")
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(d)
    m = onnx.load(os.path.join(src, "model.onnx"))
    onnx.save_model(m, os.path.join(d, "model.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    shutil.copytree(os.path.join(src, "test_data_set_0"), os.path.join(d, "test_data_set_0"))
    r = subprocess.run([a.runner, "--atol", "1e-5", d], capture_output=True, text=True,
                       timeout=120)
    print(r.stdout, end="")
    if r.returncode != 0 or "PASS si_small_cnn_external" not in r.stdout:
        sys.exit("FAIL: the external-data model does not match its embedded twin")

    outside = os.path.join(a.work, "outside.bin")
    shutil.copy(os.path.join(d, "weights.bin"), outside)
    os.symlink(os.path.abspath(outside), os.path.join(d, "link.bin"))
    with open(os.path.join(d, "weights.bin"), "rb") as f:
        short = f.read()[:100]
    open(os.path.join(d, "short.bin"), "wb").write(short)
    os.mkfifo(os.path.join(d, "fifo.bin"))  # open() of a FIFO waits for a writer unless told not to
    # (location, offset, length, expected in the message); None leaves the saved value
    cases = [("../outside.bin", None, None, "not a path inside"),
             ("/etc/hostname", None, None, "not a path inside"),
             ("sub/../../outside.bin", None, None, "not a path inside"),
             ("link.bin", None, None, "outside the model"),
             ("short.bin", None, None, "the tensor needs"),
             ("missing.bin", None, None, "missing.bin"),
             ("fifo.bin", None, None, "not a regular file"),
             ("weights.bin", "12abc", None, "offset is not a number"),
             ("weights.bin", None, "-1", "length is not a number")]
    failures = 0
    for loc, offset, length, expect in cases:
        mm = onnx.load(os.path.join(d, "model.onnx"), load_external_data=False)
        for t in mm.graph.initializer:
            for e in t.external_data:
                new = {"location": loc, "offset": offset, "length": length}.get(e.key)
                if new is not None:
                    e.value = new
        bad = os.path.join(d, "bad.onnx")
        onnx.save(mm, bad)
        rc, lines = inspect(a.shardinfer, bad)
        ok = rc == 1 and len(lines) == 1 and expect in lines[0] and "tensor '" in lines[0]
        what = f"location {loc!r}" + (f" offset {offset!r}" if offset else "") + \
            (f" length {length!r}" if length else "")
        print(f"{'ok  ' if ok else 'FAIL'} {what}: rc={rc} {lines}")
        failures += not ok
    # the model itself a FIFO: refused at once, not waited on
    os.mkfifo(os.path.join(d, "fifo.onnx"))
    rc, lines = inspect(a.shardinfer, os.path.join(d, "fifo.onnx"))
    ok = rc == 1 and len(lines) == 1 and "not a regular file" in lines[0]
    print(f"{'ok  ' if ok else 'FAIL'} the model a FIFO: rc={rc} {lines}")
    failures += not ok
    failures += huge_initializer(a, d)
    if failures:
        sys.exit(f"FAIL: {failures} hostile cases misbehaved")
    print("external data: OK")


if __name__ == "__main__":
    main()
