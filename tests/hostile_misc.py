#!/usr/bin/env python3
"""`shardinfer run` against operator mistakes and crafted inputs that earlier slipped through:
each case builds its input in a fresh directory, runs the binary as a user would (every run with
a timeout, so a hang is a failure) and checks the exit code, the messages and the result with
h5py.

  options         non-finite or out-of-range values of --mean, --std, --max-errors, the
                  thresholds and the intervals: exit 2, one line naming the option, no output
  metadata        a model whose 'mean' or 'std' metadata is NaN, infinite or a std of 0: exit 1,
                  one line naming the key; --mean / --std given instead are used
  log-forging     image ids with newlines and other control bytes: every stderr line is one of
                  shardinfer's own (the bytes escaped), /ids keeps the ids as they are
  too-large       JPEGs declaring more than libjpeg-turbo's 65500 a side: too_large, however few
                  pixels they declare, never not_jpeg
  failure-lines   hundreds of failed images: the first 20 of each status logged in full, one line
                  saying the others are not, their count at the end; every one in /errors
  mpirun-sigterm  SIGTERM to mpirun -np 2 mid-run: Open MPI's mpirun ends the job with exit 1
                  (not 6: docs/user-guide.md, Interruptions), the ranks drain as long as it lets
                  them, and --resume finishes into the file of an uninterrupted run
  mpirun-sigusr1  SIGUSR1 to mpirun: forwarded to the ranks, which drain and exit 6; --resume
                  finishes the same file
  double-sigterm  SIGTERM twice to every rank (what a Slurm time limit delivers): the drain
                  goes on, exit 6, --resume finishes the same file; Ctrl-C twice still ends a
                  run at once

Usage: hostile_misc.py --shardinfer BIN --work DIR [CASE ...]   (no CASE: all of them)
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cluster  # noqa: E402  (mpi_env, same_files, chunks_journaled, rank_pids, wait_gone)
import io_ref  # noqa: E402  (sof_offset)

TIMEOUT = 120
BIN = None
WORK = None


def fail(msg):
    sys.exit(f"FAIL: {msg}")


def env():
    """mpirun's environment for root (tests/e2e.py), one thread a rank, and ASan's leak report
    off in a sanitizer build: HDF5 and Open MPI keep memory to exit, and a leak is not what these
    cases test."""
    e = cluster.mpi_env()
    e["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "detect_leaks=0")
    return e


def run(*args, timeout=TIMEOUT):
    """`shardinfer run ARGS` on one rank; (rc, stdout, stderr lines)."""
    cmd = [BIN, "run", *args]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="backslashreplace",
                           timeout=timeout, env=env())
    except subprocess.TimeoutExpired:
        fail(f"no answer after {timeout} s: {' '.join(cmd)}")
    return p.returncode, p.stdout, [l for l in p.stderr.splitlines() if l.strip()]


def fresh(name):
    d = os.path.join(WORK, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def base_data():
    """The e2e photos and tiny model (tests/make_e2e_set.py), made once under WORK."""
    d = os.path.join(WORK, "base")
    if not os.path.exists(os.path.join(d, "tiny.onnx")):
        shutil.rmtree(d, ignore_errors=True)
        subprocess.run([sys.executable, os.path.join(HERE, "make_e2e_set.py"), "--output-dir", d,
                        "--count", "23", "--tiny-model", os.path.join(d, "tiny.onnx")],
                       check=True, capture_output=True, timeout=300)
    good = sorted(os.path.join(r, f) for r, _, fs in os.walk(os.path.join(d, "images"))
                  for f in fs if "truncated" not in f and "corrupt" not in f)
    return d, [open(p, "rb").read() for p in good]


def write_set(path, blobs, ids):
    """A packed set (docs/output-format.md) written with h5py, as a user's script would."""
    lens = np.array([len(b) for b in blobs], dtype=np.uint64)
    with h5py.File(path, "w") as f:
        g = f.create_group("images")
        g["data"] = np.frombuffer(b"".join(blobs), dtype=np.uint8)
        g["offsets"] = np.concatenate([[0], np.cumsum(lens)]).astype(np.uint64)
        g.create_dataset("ids", data=ids, dtype=h5py.string_dtype())


def case_options():
    d = fresh("options")
    base, photos = base_data()
    sset = os.path.join(d, "set.h5")
    write_set(sset, photos[:4], [f"p{i}" for i in range(4)])
    common = ["--model", os.path.join(base, "tiny.onnx"), "--input", sset, "--quiet"]
    bad = [("--mean", "nan,0,0"), ("--mean", "0,inf,0"), ("--mean", "0,0,-nan"),
           ("--mean", "1e30,0,0"), ("--std", "0,1,1"), ("--std", "0.2,-0.1,0.2"),
           ("--std", "inf,1,1"), ("--std", "nan,nan,nan"), ("--std", "1e-40,1,1"),
           ("--max-errors", "nan"), ("--max-errors", "nan%"), ("--max-errors", "inf"),
           ("--max-errors", "-1"), ("--max-errors", "101%"),
           ("--score-threshold", "nan"), ("--score-threshold", "1.5"),
           ("--iou-threshold", "nan"), ("--iou-threshold", "-0.1"),
           ("--flush-interval", "nan"), ("--flush-interval", "0"), ("--flush-interval", "inf"),
           ("--drain-timeout", "nan"), ("--drain-timeout", "-1"), ("--drain-timeout", "inf"),
           ("--progress-interval", "nan"), ("--crop", "0" * 70 + "32"),
           ("--decode-parts", "0"), ("--decode-parts", "65"), ("--decode-cpu-share", "1.5"),
           ("--decode-cpu-share", "nan"), ("--decode-cpu-share", "-0.1")]
    for opt, val in bad:
        out = os.path.join(d, "out.h5")
        rc, _, err = run(*common, "--output", out, opt, val)
        if rc != 2 or len(err) != 1 or opt not in err[0] or val not in err[0]:
            fail(f"{opt} {val}: exit {rc} with {err[-3:]}; expected exit 2 and one line naming "
                 f"the option and the value")
        if os.path.exists(out) or os.path.exists(out + ".partial"):
            fail(f"{opt} {val}: an output was written")
    # what a user may mean: pixels fed as 0..255 (std 1/255), a mean outside [0, 1]
    out = os.path.join(d, "ok.h5")
    rc, _, err = run(*common, "--output", out, "--std", "0.00392,0.00392,0.00392", "--mean",
                     "-0.5,1.5,0.5", "--max-errors", "0.5%")
    if rc != 0:
        fail(f"valid --std 1/255 and --mean: exit {rc}: {err[-3:]}")
    print(f"options: OK: {len(bad)} bad values refused, each with one line naming it")


def case_default_batch():
    """Without --batch: a model whose batch dimension is fixed runs at it (not refused for the
    default's sake); --resume of an interrupted run takes that run's batch (part of its resume
    key) and finishes to the file of an uninterrupted run; --resume of the finished file is
    "complete already". Each line says where the batch came from."""
    import onnx
    d = fresh("default_batch")
    base, photos = base_data()
    sset = os.path.join(d, "set.h5")
    write_set(sset, photos[:20], [f"p{i}" for i in range(20)])
    fixed = os.path.join(d, "fixed4.onnx")
    m = onnx.load(os.path.join(base, "tiny.onnx"))
    dim = m.graph.input[0].type.tensor_type.shape.dim[0]
    dim.ClearField("dim_param")
    dim.dim_value = 4
    for o in m.graph.output:
        od = o.type.tensor_type.shape.dim
        if od and od[0].dim_param:
            od[0].ClearField("dim_param")
            od[0].dim_value = 4
    onnx.save(m, fixed)
    out = os.path.join(d, "fixed.h5")
    rc, _, err = run("--model", fixed, "--input", sset, "--output", out, "--backend", "cpu",
                     "--progress", "none")
    if rc != 0 or not any("batch 4 (the model's fixed batch)" in l for l in err):
        fail(f"a model fixed at batch 4, no --batch: exit {rc}: {err[-3:]}")
    model = os.path.join(base, "tiny.onnx")
    common = ["--model", model, "--input", sset, "--backend", "cpu", "--progress", "none"]
    ref = os.path.join(d, "ref.h5")
    rc, _, err = run(*common, "--output", ref, "--batch", "4", "--quiet")
    if rc != 0:
        fail(f"the reference run: exit {rc}: {err[-3:]}")
    out = os.path.join(d, "resumed.h5")
    cmd = [BIN, "run", *common, "--output", out, "--batch", "4"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT,
                       env=dict(env(), SI_TEST_KILL_AT="finish:begin"))
    if p.returncode == 0 or not os.path.exists(out + ".partial"):
        fail(f"SI_TEST_KILL_AT=finish:begin: exit {p.returncode}, no partial result")
    rc, _, err = run(*common, "--output", out, "--resume")
    if rc != 0 or not any("batch 4 (the interrupted run's)" in l for l in err):
        fail(f"--resume without --batch: exit {rc}: {err[-3:]}")
    cluster.same_files(ref, out)
    rc, _, err = run(*common, "--output", out, "--resume")
    if rc != 0 or not any("complete already" in l for l in err):
        fail(f"--resume of the finished run without --batch: exit {rc}: {err[-3:]}")
    print("default-batch: OK: a fixed batch taken from the model, a resumed run's from its file")


def with_metadata(src, dst, props):
    import onnx
    m = onnx.load(src)
    keep = {p.key: p.value for p in m.metadata_props}
    keep.update(props)
    del m.metadata_props[:]
    for k, v in keep.items():
        m.metadata_props.add(key=k, value=v)
    onnx.save(m, dst)


def case_metadata():
    d = fresh("metadata")
    base, photos = base_data()
    sset = os.path.join(d, "set.h5")
    write_set(sset, photos[:4], [f"p{i}" for i in range(4)])
    for key, val in (("mean", "nan,0,0"), ("mean", "0,inf,0"), ("std", "0,1,1"),
                     ("std", "inf,1,1"), ("std", "0.2,-0.2,0.2")):
        model = os.path.join(d, "m.onnx")
        with_metadata(os.path.join(base, "tiny.onnx"), model, {key: val})
        out = os.path.join(d, "out.h5")
        rc, _, err = run("--model", model, "--input", sset, "--output", out, "--quiet")
        lines = [l for l in err if "error" in l]
        if rc != 1 or len(lines) != 1 or f"metadata '{key}'" not in lines[0] or val not in lines[0]:
            fail(f"metadata {key}={val}: exit {rc} with {err[-3:]}; expected exit 1 and one "
                 f"line naming the key")
        if os.path.exists(out):
            fail(f"metadata {key}={val}: an output was written")
        rc, _, err = run("--model", model, "--input", sset, "--output", out, "--quiet",
                         f"--{key}", "0.5,0.5,0.5")
        if rc != 0:
            fail(f"metadata {key}={val} with --{key} given: exit {rc}: {err[-3:]}")
        os.remove(out)
    print("metadata: OK: a NaN, infinite or non-positive mean/std in the model is refused")


def case_log_forging():
    d = fresh("log_forging")
    base, photos = base_data()
    ids = ["ok-0", "evil\nshardinfer: error: forged line", "cr\rshardinfer: error: forged too",
           "esc\x1b[2K\x1b[1Gshardinfer: error: cleared", "bell\x07del\x7ftab\t", "ok-5",
           "nl-at-end\n", "  indented\n  shardinfer: error: under"]
    blobs = [photos[0], b"", b"\x00\x01junk", b"", b"\xff\xd8\xff", photos[1], b"", b"xx"]
    sset = os.path.join(d, "set.h5")
    write_set(sset, blobs, ids)
    out = os.path.join(d, "out.h5")
    rc, _, err = run("--model", os.path.join(base, "tiny.onnx"), "--input", sset, "--output", out,
                     "--progress", "none")
    if rc != 0:
        fail(f"exit {rc}: {err[-3:]}")
    # every line is one of shardinfer's own, or the indented continuation a message may carry
    # (a newline followed by two spaces stays, for the lists of unsupported operators): no id
    # can start a line that reads as a message
    for line in err:
        if not (line.startswith("shardinfer") or line.startswith("  ")):
            fail(f"a line that is not one of shardinfer's own messages: {line!r}")
        if re.match(r"shardinfer\S*:? (error|warning): (forged|cleared)", line) or \
                re.match(r"shardinfer: error: (forged|cleared|under)", line):
            fail(f"a forged line: {line!r}")
    if any(re.search(r"[\x00-\x08\x0b-\x1f\x7f]", line) for line in err):
        fail("a control byte reached the log")
    for want in ("'evil\\nshardinfer: error: forged line'",
                 "'cr\\rshardinfer: error: forged too'",
                 "'esc\\x1b[2K\\x1b[1Gshardinfer: error: cleared'", "'bell\\x07del\\x7ftab\\t'",
                 "'nl-at-end\\n'"):
        if not any(want in line for line in err):
            fail(f"no line holds the escaped id {want}")
    k = next((i for i, l in enumerate(err) if l.endswith("'  indented")), None)
    if k is None or k + 1 == len(err) or not err[k + 1].startswith("  shardinfer: error: under'"):
        fail("the id with an indented continuation is not logged as one")
    # the data keep the ids as they are: /ids is the set's, /errors/message is the decoder's
    with h5py.File(out, "r") as f:
        got = [x.decode() if isinstance(x, bytes) else x for x in f["/ids"][:]]
        msgs = [x.decode() if isinstance(x, bytes) else x for x in f["/errors/message"][:]]
        idx = list(f["/errors/index"][:])
    if got != ids:
        fail(f"/ids differ from the set's: {got!r}")
    if idx != [1, 2, 3, 4, 6, 7] or any("forged" in m for m in msgs):
        fail(f"/errors: index {idx}, messages {msgs!r}")
    print(f"log-forging: OK: {len(err)} stderr lines, each shardinfer's own; /ids unchanged")


def case_too_large():
    d = fresh("too_large")
    base, photos = base_data()
    src = bytearray(photos[0])
    sof = io_ref.sof_offset(src)
    sizes = [(65535, 65535), (65501, 16), (16, 65501), (65500, 65500), (20000, 20000)]
    blobs, ids = [bytes(src)], ["good"]
    for w, h in sizes:
        b = bytearray(src)
        b[sof + 5:sof + 9] = bytes([h >> 8, h & 255, w >> 8, w & 255])
        blobs.append(bytes(b))
        ids.append(f"{w}x{h}")
    sset = os.path.join(d, "set.h5")
    write_set(sset, blobs, ids)
    out = os.path.join(d, "out.h5")
    for extra in ([], ["--max-pixels", str(1 << 40)]):
        rc, _, err = run("--model", os.path.join(base, "tiny.onnx"), "--input", sset, "--output",
                         out, "--progress", "none", "--overwrite", *extra)
        if rc != 0:
            fail(f"exit {rc}: {err[-3:]}")
        with h5py.File(out, "r") as f:
            status = list(f["/status"][:])
        # with no cap to speak of, the two under the decoder's limit are decoded (and are
        # corrupt: their scan is a small photo's, cut short by its EOI), the three over it stay
        # too_large
        want = [0, 5, 5, 5, 5, 5] if not extra else [0, 5, 5, 5, 4, 4]
        if status != want:
            fail(f"statuses {status}, expected {want} ({' '.join(extra) or 'default cap'})")
        lines = [l for l in err if ": too_large: " in l]
        if not all("declared size" in l for l in lines):
            fail(f"a too_large line does not give the declared size: {lines}")
    print("too-large: OK: over 65500 a side is too_large with or without --max-pixels")


def case_failure_lines():
    d = fresh("failure_lines")
    base, photos = base_data()
    blobs, ids, kinds = [], [], []
    for i in range(330):
        k = "ok" if i % 11 == 0 else "empty" if i % 3 else "not_jpeg"
        blobs.append(photos[i % len(photos)] if k == "ok" else b"" if k == "empty" else b"\x00junk")
        ids.append(f"img{i:04d}")
        kinds.append(k)
    sset = os.path.join(d, "set.h5")
    write_set(sset, blobs, ids)
    out = os.path.join(d, "out.h5")
    rc, _, err = run("--model", os.path.join(base, "tiny.onnx"), "--input", sset, "--output", out,
                     "--progress", "none", "--batch", "8")
    if rc != 0:
        fail(f"exit {rc}: {err[-3:]}")
    for kind in ("empty", "not_jpeg"):
        n = kinds.count(kind)
        full = [l for l in err if re.search(rf"image \d+ 'img\d+': {kind}: ", l)]
        more = [l for l in err if f"more than 20 images failed with status {kind} " in l]
        count = [l for l in err if f"{n} images failed with status {kind} on this rank, "
                 f"{n - 20} of them not logged" in l]
        if len(full) != 20 or len(more) != 1 or len(count) != 1:
            fail(f"{kind}: {len(full)} full lines (20 expected), {len(more)} 'more than' and "
                 f"{len(count)} count lines (1 each expected)")
    if len(err) > 60:
        fail(f"{len(err)} stderr lines for {len(blobs)} images")
    with h5py.File(out, "r") as f:
        idx = list(f["/errors/index"][:])
    if idx != [i for i, k in enumerate(kinds) if k != "ok"]:
        fail("/errors does not hold every failed image")
    print(f"failure-lines: OK: {len(idx)} failures in {len(err)} stderr lines, all in /errors")


# ---- mpirun and signals -------------------------------------------------------------------------

def signal_set():
    """2,000 images (the e2e photos repeated) and the tiny model, made once."""
    base, photos = base_data()
    sset = os.path.join(WORK, "set2000.h5")
    if not os.path.exists(sset):
        write_set(sset, [photos[i % len(photos)] for i in range(2000)],
                  [f"{i:06d}" for i in range(2000)])
    return os.path.join(base, "tiny.onnx"), sset


def mpirun_cmd(model, sset, out, *extra, mca=()):
    return ["mpirun", *mca, "-np", "2", BIN, "run", "--model", model, "--input", sset, "--output",
            out, "--batch", "4", "--chunk", "8", "--progress", "none", *extra]


def reference(model, sset):
    ref = os.path.join(WORK, "uninterrupted.h5")
    if not os.path.exists(ref):
        p = subprocess.run(mpirun_cmd(model, sset, ref, "--quiet"), capture_output=True,
                           text=True, timeout=300, env=env())
        if p.returncode != 0:
            fail(f"the uninterrupted run failed: {p.stderr[-500:]}")
    return ref


def interrupt_mpirun(model, sset, out, sig, mca=(), slow="20"):
    """Starts mpirun -np 2, waits until rank 0 has flushed some chunks, sends sig to mpirun
    itself; returns (exit code, stdout, stderr, seconds from the signal to mpirun's exit)."""
    cmd = mpirun_cmd(model, sset, out, "--flush-interval", "0.05", "--schedule", "static",
                     "--test-slow-rank", f"0:{slow}", "--drain-timeout", "30", "--overwrite", mca=mca)
    print("$", " ".join(cmd), flush=True)
    cluster.clean(out)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env())
    t = time.time()
    while cluster.chunks_journaled(out) < 2000 and time.time() - t < 60 and p.poll() is None:
        time.sleep(0.05)
    pids = cluster.rank_pids(p.pid)
    if len(pids) != 2:
        p.kill()
        fail(f"found rank pids {pids}, expected 2")
    t0 = time.time()
    os.kill(p.pid, sig)
    try:
        so, se = p.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        p.kill()
        fail(f"mpirun did not end within 90 s of {signal.Signals(sig).name}")
    dt = time.time() - t0
    cluster.wait_gone(pids.values())
    print(f"{signal.Signals(sig).name} to mpirun: exit {p.returncode} after {dt:.1f} s")
    return p.returncode, so, se, dt


def resume_same(model, sset, out):
    if not os.path.exists(out + ".partial"):
        fail("no partial result to resume")
    p = subprocess.run(mpirun_cmd(model, sset, out, "--resume"), capture_output=True, text=True,
                       timeout=300, env=env())
    if p.returncode != 0 or "[resumed]" not in p.stdout:
        fail(f"--resume: exit {p.returncode}: {p.stderr[-800:]}")
    cluster.same_files(reference(model, sset), out)


def case_mpirun_sigterm():
    model, sset = signal_set()
    out = os.path.join(WORK, "sigterm.h5")
    # Open MPI 4.1's mpirun: SIGCONT to the ranks, SIGTERM a second later, SIGKILL a second
    # after that, and exit 1 whatever the ranks did
    rc, so, se, dt = interrupt_mpirun(model, sset, out, signal.SIGTERM)
    if rc != 1:
        fail(f"SIGTERM to mpirun: exit {rc}; the documented code under Open MPI's mpirun is 1")
    resume_same(model, sset, out)
    # with odls_base_sigkill_timeout T the ranks get SIGTERM T seconds after mpirun did and
    # have T seconds to drain: rank 0 says what is flushed; mpirun's own code stays 1 (a run
    # of about 25 s, so that it is still going when the SIGTERM comes)
    rc, so, se, dt = interrupt_mpirun(model, sset, out, signal.SIGTERM,
                                      mca=("--mca", "odls_base_sigkill_timeout", "3"), slow="100")
    if rc != 1 or not re.search(r"interrupted: \d+ of 2000 images are done and flushed", se) \
            or not 3 <= dt < 15:
        fail(f"SIGTERM to mpirun with odls_base_sigkill_timeout 3: exit {rc} after {dt:.1f} s, "
             f"the ranks' drain {'reported' if 'flushed' in se else 'not reported'}: "
             f"{se[-600:]}")
    resume_same(model, sset, out)
    print("mpirun-sigterm: OK: mpirun exits 1, the ranks drain within its grace, --resume "
          "finishes the same file")


def case_mpirun_sigusr1():
    model, sset = signal_set()
    out = os.path.join(WORK, "sigusr1.h5")
    rc, so, se, dt = interrupt_mpirun(model, sset, out, signal.SIGUSR1)
    if rc == 0 and "Forwarding signal 10" not in se:
        print("mpirun-sigusr1: this mpirun does not forward SIGUSR1 (the job ran to its end): "
              "signal the ranks instead, as docs/user-guide.md says")
        return
    if rc != 6:
        fail(f"SIGUSR1 to mpirun: exit {rc}, expected 6: {se[-600:]}")
    resume_same(model, sset, out)
    print("mpirun-sigusr1: OK: forwarded, the ranks drain, exit 6, --resume finishes the file")


def case_double_sigterm():
    """At a Slurm time limit every task gets SIGTERM twice within milliseconds (measured with
    Slurm 22.05): the second is no reason to give up the drain. A second Ctrl-C still is."""
    model, sset = signal_set()
    out = os.path.join(WORK, "double.h5")
    cmd = mpirun_cmd(model, sset, out, "--flush-interval", "0.05", "--schedule", "static",
                     "--test-slow-rank", "0:20", "--drain-timeout", "30", "--overwrite")
    print("$", " ".join(cmd), flush=True)
    cluster.clean(out)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env())
    t = time.time()
    while cluster.chunks_journaled(out) < 2000 and time.time() - t < 60 and p.poll() is None:
        time.sleep(0.05)
    pids = cluster.rank_pids(p.pid)
    if len(pids) != 2:
        p.kill()
        fail(f"found rank pids {pids}, expected 2")
    for _ in range(2):
        for pid in pids.values():
            os.kill(pid, signal.SIGTERM)
        time.sleep(0.01)
    try:
        so, se = p.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        p.kill()
        fail("the job did not end within 90 s of two SIGTERMs")
    cluster.wait_gone(pids.values())
    if p.returncode != 6 or "run the same command with --resume" not in se:
        fail(f"two SIGTERMs to every rank: exit {p.returncode}, expected 6 after a drain: "
             f"{se[-600:]}")
    resume_same(model, sset, out)
    # one process, Ctrl-C twice: the second ends it at once, by SIGINT
    out = os.path.join(WORK, "ctrl_c.h5")
    cluster.clean(out)
    p = subprocess.Popen([BIN, "run", "--model", model, "--input", sset, "--output", out,
                          "--progress", "none", "--test-slow-rank", "0:200", "--drain-timeout",
                          "30", "--batch", "4", "--chunk", "8"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, env=env())
    t = time.time()
    while cluster.chunks_journaled(out) < 200 and time.time() - t < 60 and p.poll() is None:
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    try:
        p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        fail("a second Ctrl-C did not end the run")
    if p.returncode != -signal.SIGINT:
        fail(f"a second Ctrl-C: exit {p.returncode}, expected death by SIGINT")
    print("double-sigterm: OK: a repeated SIGTERM lets the drain finish (exit 6, resumed into "
          "the same file); a second Ctrl-C ends the run at once")


CASES = {"options": case_options, "metadata": case_metadata, "log-forging": case_log_forging,
         "too-large": case_too_large, "failure-lines": case_failure_lines,
         "default-batch": case_default_batch,
         "mpirun-sigterm": case_mpirun_sigterm, "mpirun-sigusr1": case_mpirun_sigusr1,
         "double-sigterm": case_double_sigterm}


def main():
    global BIN, WORK
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardinfer", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("cases", nargs="*", help=" ".join(CASES))
    a = ap.parse_args()
    for c in a.cases:
        if c not in CASES:
            ap.error(f"unknown case {c} (cases: {' '.join(CASES)})")
    BIN, WORK = os.path.abspath(a.shardinfer), os.path.abspath(a.work)
    os.makedirs(WORK, exist_ok=True)
    for name in a.cases or list(CASES):
        CASES[name]()
    print("hostile_misc: OK")


if __name__ == "__main__":
    main()
