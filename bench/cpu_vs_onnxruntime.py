#!/usr/bin/env python3
"""Times shardinfer's CPU engine against onnxruntime's CPU provider on the same ONNX models, batch
sizes and thread counts, in one run on one machine, and prints images/s for both and the ratio.

onnxruntime is timed in-process: intra_op_num_threads=T, inter_op_num_threads=1, sequential
execution, its default graph optimizations (all on), warm-up runs, then the median of N runs on
seeded normal(0, 1) input. shardinfer is timed through its own command,
`shardinfer bench --model M --batch B --threads T --iters N --warmup W`, which prints
`bench: model=... batch=B threads=T ... median_ms=X ... images_per_s=Y ...`; so both sides measure
the engine alone (no decoding or I/O) with the same warm-up and median rule.

Usage (models as .onnx files or as case directories holding model.onnx, e.g. from
tests/export_models.py):
  .venv/bin/python bench/cpu_vs_onnxruntime.py build/models/resnet50 build/models/mobilenet_v2 \
      [--batch 32[,8,...]] [--threads T[,1,...]] [--iters 10] [--warmup 2] \
      [--shardinfer build/shardinfer] [--json results.json]
"""

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def model_path_and_name(arg):
    """A case directory (DIR/model.onnx) is named after the directory, a file after itself."""
    if os.path.isdir(arg):
        return os.path.join(arg, "model.onnx"), os.path.basename(os.path.normpath(arg))
    base = os.path.splitext(os.path.basename(arg))[0]
    if base == "model":
        base = os.path.basename(os.path.dirname(os.path.abspath(arg)))
    return arg, base


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def ort_bench(path, batch, threads, iters, warmup, seed):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # graph_optimization_level left at its default (ORT_ENABLE_ALL): ORT as users run it.
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in sess.get_inputs():
        if isinstance(inp.shape[0], int) and inp.shape[0] > 0 and inp.shape[0] != batch:
            raise ValueError(f"input {inp.name} has a fixed batch of {inp.shape[0]}, not {batch}")
        dims = [batch]  # axis 0 is the (dynamic) batch axis, "N" in tests/export_models.py
        for d in inp.shape[1:]:
            if not (isinstance(d, int) and d > 0):
                raise ValueError(f"input {inp.name} has a dynamic non-batch dim {d!r}")
            dims.append(d)
        feeds[inp.name] = rng.standard_normal(dims, dtype=np.float32)
    ms = []
    for i in range(warmup + iters):
        t = time.perf_counter()
        sess.run(None, feeds)
        if i >= warmup:
            ms.append((time.perf_counter() - t) * 1e3)
    med = statistics.median(ms)
    return {"median_ms": med, "min_ms": min(ms), "max_ms": max(ms), "images_per_s": batch * 1e3 / med}


BENCH_RE = re.compile(r"\b(batch|threads|median_ms|min_ms|max_ms|images_per_s|first_result_ms|"
                      r"arena_mb)=([0-9.]+)")


def shardinfer_bench(binary, path, batch, threads, iters, warmup, timeout):
    """Runs `shardinfer bench` and parses its `bench:` line. Returns (result, None) or
    (None, reason) so a missing or failing command leaves a hole in the table instead of
    stopping the ORT half."""
    if not os.path.exists(binary):
        return None, f"{binary} not found (build it first)"
    cmd = [binary, "bench", "--model", path, "--batch", str(batch), "--threads", str(threads),
           "--iters", str(iters), "--warmup", str(warmup)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout}s"
    line = next((l for l in p.stdout.splitlines() if l.startswith("bench:")), None)
    if p.returncode != 0 or line is None:
        err = (p.stderr.strip() or p.stdout.strip()).splitlines()
        return None, f"exit {p.returncode}: {err[-1] if err else 'no bench: line'}"
    r = {k: (int(float(v)) if k in ("batch", "threads") else float(v))
         for k, v in BENCH_RE.findall(line)}
    if not r.get("median_ms"):
        return None, f"could not parse: {line}"
    # images/s from the median itself: the printed one is rounded to 0.1, too coarse for a ratio
    # on large models.
    r["printed_images_per_s"] = r.get("images_per_s")
    r["images_per_s"] = batch * 1e3 / r["median_ms"]
    # The engine reports the thread count it actually used (OpenMP may cap it): show a mismatch.
    if int(r.get("threads", threads)) != threads or int(r.get("batch", batch)) != batch:
        r["note"] = f"ran batch={int(r.get('batch', batch))} threads={int(r.get('threads', threads))}"
    r["line"] = line
    return r, None


def fmt(v, spec):
    return format(v, spec) if v is not None else "-"


def print_table(rows):
    head = ["model", "batch", "threads", "ORT ms", "ORT img/s", "shardinfer ms", "shardinfer img/s",
            "shardinfer/ORT"]
    body = []
    for r in rows:
        o, s = r.get("ort"), r.get("shardinfer")
        ratio = s["images_per_s"] / o["images_per_s"] if o and s else None
        body.append([r["model"], str(r["batch"]), str(r["threads"]),
                     fmt(o and o["median_ms"], ".1f"), fmt(o and o["images_per_s"], ".1f"),
                     fmt(s and s["median_ms"], ".1f"), fmt(s and s["images_per_s"], ".1f"),
                     fmt(ratio, ".2f")])
    w = [max(len(x[i]) for x in [head] + body) for i in range(len(head))]
    line = lambda cells: "  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i])
                                   for i, c in enumerate(cells))
    print(line(head))
    print("  ".join("-" * x for x in w))
    for b in body:
        print(line(b))
    for r in rows:
        for side in ("ort", "shardinfer"):
            if r.get(side + "_error"):
                print(f"note: {r['model']} batch {r['batch']} threads {r['threads']}: {side}: "
                      f"{r[side + '_error']}")
        if r.get("shardinfer", {}) and r["shardinfer"].get("note"):
            print(f"note: {r['model']}: shardinfer {r['shardinfer']['note']}")


def int_list(s):
    return [int(x) for x in s.split(",") if x]


def main():
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help="ONNX files or case directories holding model.onnx")
    ap.add_argument("--batch", type=int_list, default=[32], help="batch size(s), comma-separated")
    ap.add_argument("--threads", type=int_list, default=[ncpu],
                    help=f"thread count(s), comma-separated (default: all cores, {ncpu})")
    ap.add_argument("--iters", type=int, default=10, help="timed runs (median reported)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed runs first")
    ap.add_argument("--shardinfer", default=os.environ.get("SHARDINFER",
                                                           os.path.join(ROOT, "build", "shardinfer")),
                    help="the shardinfer binary (default: $SHARDINFER or build/shardinfer)")
    ap.add_argument("--no-shardinfer", action="store_true", help="time onnxruntime only")
    ap.add_argument("--no-ort", action="store_true", help="time shardinfer only")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per shardinfer bench run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = ap.parse_args()
    if args.no_ort and args.no_shardinfer:
        ap.error("--no-ort and --no-shardinfer leave nothing to time")
    if args.iters < 1 or args.warmup < 0:
        ap.error("--iters must be >= 1 and --warmup >= 0")

    models = [model_path_and_name(m) for m in args.models]
    for path, _ in models:
        if not os.path.isfile(path):
            ap.error(f"no model at {path}")
    print(f"{cpu_name()}, {ncpu} cores; onnxruntime {ort.__version__}; "
          f"shardinfer {'(skipped)' if args.no_shardinfer else args.shardinfer}; "
          f"{args.warmup} warm-up + median of {args.iters} runs", flush=True)

    rows = []
    for path, name in models:
        for batch in args.batch:
            for threads in args.threads:
                row = {"model": name, "path": path, "batch": batch, "threads": threads}
                # One side after the other, never both at once: each gets the whole machine.
                if not args.no_ort:
                    try:
                        row["ort"] = ort_bench(path, batch, threads, args.iters, args.warmup,
                                               args.seed)
                    except Exception as e:  # e.g. an op or shape ORT refuses: keep going
                        row["ort_error"] = f"{type(e).__name__}: {e}"
                if not args.no_shardinfer:
                    r, err = shardinfer_bench(args.shardinfer, path, batch, threads, args.iters,
                                              args.warmup, args.timeout)
                    if r:
                        row["shardinfer"] = r
                    else:
                        row["shardinfer_error"] = err
                if row.get("ort") and row.get("shardinfer"):
                    row["ratio"] = row["shardinfer"]["images_per_s"] / row["ort"]["images_per_s"]
                rows.append(row)
                o, s = row.get("ort"), row.get("shardinfer")
                print(f"  {name} batch {batch} threads {threads}: ORT "
                      f"{fmt(o and o['images_per_s'], '.1f')} img/s, shardinfer "
                      f"{fmt(s and s['images_per_s'], '.1f')} img/s", flush=True)
    print()
    print_table(rows)

    if args.json:
        doc = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "host": {"cpu": cpu_name(), "cores": ncpu, "machine": platform.machine()},
            "onnxruntime": {"version": ort.__version__, "inter_op_num_threads": 1, "execution_mode": "sequential",
                            "graph_optimization_level": "default (ORT_ENABLE_ALL)"},
            "shardinfer": None if args.no_shardinfer else args.shardinfer,
            "iters": args.iters,
            "warmup": args.warmup,
            "results": rows,
        }
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
        print(f"wrote {args.json}")
    # Failing runs are reported, not fatal, unless nothing at all could be timed.
    return 0 if any(r.get("ort") or r.get("shardinfer") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
