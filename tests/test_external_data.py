#!/usr/bin/env python3
"""Models whose weights sit in a side file (ONNX external data): a case saved by onnx with
save_as_external_data must give the same outputs as the same model with embedded weights, and
a location that leaves the model's directory (.., an absolute path, a symlink pointing out) or a
side file too short for the tensor must be refused with one clear message naming the tensor.

Usage: test_external_data.py --runner RUN_ONNX_CASES --shardinfer BIN --cases DIR --work DIR
"""
import argparse
import os
import shutil
import subprocess
import sys

import onnx


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
    r = subprocess.run([a.runner, "--atol", "1e-5", d], capture_output=True, text=True)
    print(r.stdout, end="")
    if r.returncode != 0 or "PASS si_small_cnn_external" not in r.stdout:
        sys.exit("FAIL: the external-data model does not match its embedded twin")

    outside = os.path.join(a.work, "outside.bin")
    shutil.copy(os.path.join(d, "weights.bin"), outside)
    os.symlink(os.path.abspath(outside), os.path.join(d, "link.bin"))
    with open(os.path.join(d, "weights.bin"), "rb") as f:
        short = f.read()[:100]
    open(os.path.join(d, "short.bin"), "wb").write(short)
    cases = [("../outside.bin", "not a path inside"), ("/etc/hostname", "not a path inside"),
             ("sub/../../outside.bin", "not a path inside"), ("link.bin", "outside the model"),
             ("short.bin", "the tensor needs"), ("missing.bin", "missing.bin")]
    failures = 0
    for loc, expect in cases:
        mm = onnx.load(os.path.join(d, "model.onnx"), load_external_data=False)
        for t in mm.graph.initializer:
            for e in t.external_data:
                if e.key == "location":
                    e.value = loc
        bad = os.path.join(d, "bad.onnx")
        onnx.save(mm, bad)
        r = subprocess.run([a.shardinfer, "inspect", bad], capture_output=True, text=True,
                           timeout=60)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        ok = r.returncode == 1 and len(lines) == 1 and expect in lines[0] and "tensor '" in lines[0]
        print(f"{'ok  ' if ok else 'FAIL'} location {loc!r}: rc={r.returncode} {lines}")
        failures += not ok
    if failures:
        sys.exit(f"FAIL: {failures} hostile locations misbehaved")
    print("external data: OK")


if __name__ == "__main__":
    main()
