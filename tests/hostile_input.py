#!/usr/bin/env python3
"""`shardinfer run` against hostile inputs, flaky storage and operator mistakes (issue 36): each
way a crafted set, a failing disk or a wrong command line made a run corrupt its result, crash,
hang, or read or write where it should not, reproduced as a user would meet it and checked to be
refused with a message naming the cause, or handled. Every run has a timeout (a hang is a
failure) and, but under ASan, a memory limit; a crash or a sanitizer report is a failure.

  prepare         the shared inputs: 23 real-photo JPEGs and a tiny classifier
                  (make_e2e_set.py), a second model (another seed), a packed set of 200 of them
                  under distinct ids in 64 KiB chunks, and its undisturbed result (--batch 4)
  eio             reads of the set failing with EIO (tests/eio_shim.c, LD_PRELOAD), never with
                  wrong bytes: 3 failures in a row are retried (a warning says the file was
                  reopened) into the undisturbed result; failures that never stop end the run
                  naming "I/O error" and the file, no image charged with read_error, and
                  --resume on healthy storage gives the undisturbed result; EIO on the very
                  first read, or on the metadata behind it, says the file cannot be read (not
                  "not an HDF5 file"); failures from the start-up on end the run within a
                  minute; a failed read at start-up never makes a later --resume refuse
  resume-changed  an interrupted run (SI_TEST_KILL_AT=finish:begin) whose input changes before
                  --resume: bytes of an unsampled image flipped in place (also with the mtime
                  put back), or a re-export with 2 images replaced: refused naming the image,
                  the partial result kept; an identical copy put in place: accepted, the
                  uninterrupted run's result
  output-clash    --output naming the input, the model, a file of a list input, the list file,
                  or the input through a symbolic link, a hard link or a/../: refused naming
                  the clash, nothing changed
  resume-foreign  --resume onto a complete file that is not this run's (another model's
                  result, a copy of the input, a text file): refused, the file unchanged; this
                  run's own complete result: "complete already", exit 0
  empty-dims      dense sets of shape (N, 3, 32, 0) and (N, 0, 32, 3): exit 1 with a message
  external        /images/data in HDF5 external storage outside the set's directory (packed and
                  dense, also through a link or a ../ name): refused, its bytes in no output
                  file; external storage, an external link and a virtual dataset inside the
                  directory: refused by default, accepted with --allow-external (the inline
                  set's result; a relative name never resolves to a decoy in the working
                  directory); outside it: refused still
  planted-links   symbolic links to a victim planted at OUT.lock, OUT.partial, OUT.journal:
                  refused naming the link; at OUT.undo.tmp and OUT.undo (before the run and
                  while it works), dangling ones, and OUT itself with --overwrite: the victim
                  untouched, no file created through a link
  chunk-bomb      /images/offsets gzip-compressed as one 128 MiB chunk of a file of 135 KB:
                  refused within seconds naming the chunk size, peak memory far below 128 MiB
  big-record      a packed record and a vlen record declaring 3 GiB (files of a few hundred KB):
                  that image too_large (logged once), every other the result it gets in an
                  honest set, memory far below 3 GiB; --max-record-bytes 1000: exactly the
                  images over it too_large, counted once
  corrupt-chunk   a damaged gzip chunk of /images/data: its images read_error, the others their
                  results, exit 0, and no HDF5-DIAG text on stderr

Usage: hostile_input.py --shardinfer BIN --eio-shim LIB.so --work DIR CASE ...
  (CASE all: every case but prepare; a case prepares the shared inputs itself when missing)
"""
import argparse
import glob
import hashlib
import io
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_results  # noqa: E402  (compare: the rows of two results)

PY = sys.executable
TIMEOUT = 120
MEMORY = 4 << 30  # address space of each run but under ASan (which reserves terabytes)
BATCH = 4
N200 = 200
MIB = 1 << 20
SANITIZER = ("AddressSanitizer", "LeakSanitizer", "runtime error:", "UndefinedBehaviorSanitizer")
STATUS_TOO_LARGE, STATUS_READ_ERROR = 5, 7  # src/base/common.h (SI_IMG_...)

BIN = SHIM = WORK = BASE = TMP = None
ASAN = False
failures = []


def check(ok, what):
    print(("ok:   " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


# --- running shardinfer ------------------------------------------------------------------------


class Result:
    def __init__(self, cmd, rc, err, timed_out, seconds, maxrss_kb):
        self.cmd, self.rc, self.err, self.timed_out = cmd, rc, err, timed_out
        self.seconds, self.maxrss_kb = seconds, maxrss_kb

    def crashed(self):
        return self.timed_out or self.rc < 0 or self.rc >= 128 or \
            any(s in self.err for s in SANITIZER)

    def errors(self):
        return [l for l in self.err.splitlines() if "error:" in l]

    def __str__(self):
        if self.timed_out:
            last = self.err.strip().splitlines()[-2:]
            return f"timed out after {self.seconds:.0f} s (a hang), its last lines: " + \
                " | ".join(l[:300] for l in last)
        lines = [l for l in self.err.splitlines()
                 if ("error:" in l or "warning:" in l) and "warning: image" not in l]
        if self.rc != 0 and not lines:
            lines = self.err.strip().splitlines()[-3:]
        tail = " | ".join(lines[-3:])
        return f"rc {self.rc}" + (f": {tail[:900]}" if tail else "")


def env(extra=None):
    e = dict(os.environ)
    # a singleton MPI run as root (CI, containers), in its own session directory (another test
    # cleaning /tmp must not take it away); ASan's leak report off: HDF5 and Open MPI keep memory
    # to exit, and a leak is not what these cases test
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             PMIX_MCA_pcompress_base_silence_warning="1", OMP_NUM_THREADS="1", TMPDIR=TMP,
             ASAN_OPTIONS=e.get("ASAN_OPTIONS", "detect_leaks=0"))
    e.pop("SI_TEST_KILL_AT", None)
    e.update(extra or {})
    return e


def shardinfer(*args, timeout=TIMEOUT, extra_env=None, memory=MEMORY, cwd=None):
    """Runs BIN ARGS; a hang or a crash is a Result, not an exception. The child's own peak RSS
    comes from wait4 (RUSAGE_CHILDREN would be the largest of every child so far)."""
    cmd = [BIN, *map(str, args)]
    print("$", " ".join(cmd), flush=True)

    def limits():
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if memory and not ASAN:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    with tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=err, env=env(extra_env), cwd=cwd, preexec_fn=limits)
        timed_out = False
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - t0 > timeout:
                timed_out = True
                p.kill()
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.02)
        p.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait
        seconds = time.monotonic() - t0
        err.seek(0)
        text = err.read().decode("utf-8", "backslashreplace")
    return Result(cmd, p.returncode, text, timed_out, seconds, ru.ru_maxrss)


def run(model, inp, out, *extra, **kw):
    return shardinfer("run", "--model", model, "--input", inp, "--output", out, "--batch", BATCH,
                      "--progress", "none", *extra, **kw)


def with_shim(**settings):
    e = {"LD_PRELOAD": SHIM, "SI_EIO_TIMES": "0"}
    e.update({f"SI_EIO_{k.upper()}": str(v) for k, v in settings.items()})
    if ASAN:  # the shim comes before libasan in the preload list
        e["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "detect_leaks=0") + \
            ":verify_asan_link_order=0"
    return e


def refused(r, what, *words, rc=1):
    """r failed cleanly with exit rc and an error line holding every word."""
    lines = r.errors()
    ok = not r.crashed() and r.rc == rc and any(all(w in l for w in words) for l in lines)
    return check(ok, f"{what}: exit {rc}, a message naming {', '.join(map(repr, words))} ({r})")


def succeeded(r, what):
    return check(not r.crashed() and r.rc == 0, f"{what}: exit 0 ({r})")


def same_result(a, b, what):
    try:
        check_results.compare(a, b)
        return check(True, f"{what}: the same rows as {os.path.basename(b)}")
    except (check_results.Failure, OSError) as e:
        return check(False, f"{what}: {e}")


def read_rows(path):
    with h5py.File(path, "r") as f:
        return {k: f[k][()] for k in ("status", "topk_class", "topk_prob")}


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def contents(path):
    """A digest of an HDF5 file's datasets and attributes: a file that HDF5 merely opened for
    writing and closed again (its superblock's flags) has the same."""
    h = hashlib.sha256()

    def visit(name, obj):
        h.update(name.encode())
        for k in sorted(obj.attrs):
            h.update(k.encode() + repr(obj.attrs[k]).encode())
        if isinstance(obj, h5py.Dataset):
            h.update(np.ascontiguousarray(obj[()]).tobytes())

    with h5py.File(path, "r") as f:
        visit("/", f)
        f.visititems(visit)
    return h.hexdigest()


def fresh(name):
    d = os.path.join(WORK, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def clean(out):
    for s in ("", ".partial", ".journal", ".undo", ".undo.tmp", ".lock"):
        if os.path.lexists(out + s):
            os.remove(out + s)


def B(name):
    return os.path.join(BASE, name)


# --- the shared inputs -------------------------------------------------------------------------


def jpegs():
    """The e2e set's 23 files, in its packed order (sorted relative paths)."""
    root = B("e2e/images")
    return sorted(glob.glob(os.path.join(root, "**", "*.jpg"), recursive=True),
                  key=lambda p: os.path.relpath(p, root))


def write_list(path, files):
    with open(path, "w") as f:
        for k, p in enumerate(files):
            f.write(f"{p}\tid{k:03d}\n")


def pack(src, out):
    r = shardinfer("pack", src, "--output", out, "--chunk-bytes", 65536, "--overwrite")
    if r.rc != 0:
        sys.exit(f"FAIL: cannot pack {src}: {r}")


def prepare(_a=None):
    """Always remade when asked for (the references are the binary's own); a case that finds
    them missing makes them first (CTest runs this as the cases' fixture, so parallel cases
    never race to write them)."""
    os.makedirs(BASE, exist_ok=True)
    done = B("prepared")
    if os.path.exists(done):
        os.remove(done)
    mk = os.path.join(HERE, "make_e2e_set.py")
    for cmd in ([PY, mk, "--output-dir", B("e2e"), "--count", "23", "--tiny-model",
                 B("e2e/tiny.onnx")],
                [PY, mk, "--tiny-model", B("other.onnx"), "--seed", "8"]):
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            sys.exit(f"FAIL: {' '.join(cmd)}: {p.stderr.strip()[-500:]}")
    files = jpegs()
    write_list(B("list200.txt"), [files[k % len(files)] for k in range(N200)])
    pack(B("list200.txt"), B("set200.h5"))
    write_list(B("list23.txt"), files)
    pack(B("list23.txt"), B("set23.h5"))
    for s in ("200", "23"):
        r = run(B("e2e/tiny.onnx"), B(f"set{s}.h5"), B(f"ref{s}.h5"), "--overwrite")
        if r.rc != 0:
            sys.exit(f"FAIL: the undisturbed run over set{s}.h5 failed: {r}")
    open(done, "w").close()
    print(f"prepared {BASE}")


def tiny():
    return B("e2e/tiny.onnx")


def blobs23():
    return [open(p, "rb").read() for p in jpegs()]


def packed_set(path, blobs, ids=None, data_kw=None, data=True):
    """A packed set written with h5py: /images/{ids,offsets,data}; data_kw for create_dataset."""
    ids = ids or [f"id{k:03d}" for k in range(len(blobs))]
    off = np.concatenate([[0], np.cumsum([len(b) for b in blobs])]).astype(np.uint64)
    with h5py.File(path, "w") as f:
        g = f.create_group("images")
        g.create_dataset("ids", data=ids, dtype=h5py.string_dtype())
        g.create_dataset("offsets", data=off)
        if data:
            g.create_dataset("data", data=np.frombuffer(b"".join(blobs), np.uint8),
                             **(data_kw or {}))
    return off


# --- 1. transient storage errors ---------------------------------------------------------------


def eio(a):
    d = fresh("eio")
    s = os.path.join(d, "set.h5")
    shutil.copy(B("set200.h5"), s)
    with h5py.File(s, "r") as f:  # only reads of /images/data (after its first chunk) fail
        min_off = f["/images/data"].id.get_chunk_info(1).byte_offset
    out = os.path.join(d, "r.h5")
    count = os.path.join(d, "count")
    r = run(tiny(), s, out, extra_env=with_shim(path=s, min_offset=min_off, count_file=count))
    if not succeeded(r, "a run through the shim, no read failing"):
        return
    reads = int(open(count).read())
    after = reads * 2 // 3  # among the images' reads, whatever the start-up reads before them
    print(f"{reads} reads of /images/data's chunks: the failures start at read {after}")

    clean(out)
    r = run(tiny(), s, out, extra_env=with_shim(path=s, min_offset=min_off, after=after, times=3))
    if succeeded(r, "(a) 3 reads in a row failing with EIO"):
        same_result(out, B("ref200.h5"), "(a) the run through 3 failed reads")
    check("reopen" in r.err, "(a) a warning says the file was reopened to read again")
    check("HDF5-DIAG" not in r.err, "(a) no HDF5-DIAG text on stderr")

    clean(out)
    r = run(tiny(), s, out, extra_env=with_shim(path=s, min_offset=min_off, after=after,
                                                 times=10**12))
    refused(r, "(b) reads failing for good", "I/O error", s)
    bad = [l for l in r.err.splitlines() if "read_error" in l or "read error" in l]
    check(not bad, f"(b) no image charged with read_error: {bad[:2]}")
    if os.path.exists(out + ".partial"):
        with h5py.File(out + ".partial", "r") as f:
            n7 = int(np.sum(f["status"][()] == STATUS_READ_ERROR)) if "status" in f else 0
        check(n7 == 0, f"(b) the partial result holds no read_error status ({n7} do)")
    r = run(tiny(), s, out, "--resume")
    if succeeded(r, "(b) --resume on healthy storage"):
        same_result(out, B("ref200.h5"), "(b) the resumed run")

    clean(out)
    r = run(tiny(), s, out, extra_env=with_shim(path=s, after=0, times=10**12))
    refused(r, "(c) EIO from the first read on", s, "cannot read", "Input/output error")
    check("not an HDF5 file" not in r.err and "list file" not in r.err,
          "(c) the message does not call the file something else (not HDF5, a list file)")

    # the superblock reads, the metadata behind the first chunk of /images/data does not
    clean(out)
    r = run(tiny(), s, out, extra_env=with_shim(path=s, min_offset=min_off, times=10**12))
    check(not r.crashed() and r.rc == 1 and
          any(s in l and ("Input/output error" in l or "I/O error" in l) for l in r.errors()),
          f"(c) EIO on the metadata after the superblock: exit 1, a message naming the file and "
          f"the I/O error ({r})")

    # failing for good from the start-up's reads of the images on (the input fingerprint):
    # the run must stop as soon, not retry each sampled image with pauses for minutes
    clean(out)
    r = run(tiny(), s, out, timeout=90,
            extra_env=with_shim(path=s, min_offset=min_off, after=5, times=10**12))
    refused(r, "(d) reads failing for good from the start-up on", "I/O error", s)
    check(r.seconds < 60, f"(d) ... and within a minute ({r.seconds:.0f} s)")

    # one read of the start-up failing once more than it is retried, in a run interrupted
    # before its final step: the run stops on the fault, or what it goes on with is the input's
    # own fingerprint, which --resume on healthy storage then accepts
    clean(out)
    r = run(tiny(), s, out, timeout=90, extra_env=dict(
        with_shim(path=s, min_offset=min_off, after=5, times=4), SI_TEST_KILL_AT="finish:begin"))
    if r.rc == 1 and any("I/O error" in l for l in r.errors()):
        check(True, f"(e) 4 failed reads in a row at start-up: the run stops on the fault ({r})")
    else:
        check(r.rc == -signal.SIGKILL and os.path.exists(out + ".partial"),
              f"(e) 4 failed reads in a row at start-up: the run stops on the fault or goes on "
              f"to its final step ({r})")
        os.remove(out + ".lock") if os.path.lexists(out + ".lock") else None
        r = run(tiny(), s, out, "--resume")
        if succeeded(r, "(e) --resume on healthy storage after 4 failed reads at start-up"):
            same_result(out, B("ref200.h5"), "(e) the resumed run")


# --- 2. the input changed between the interrupted run and --resume -----------------------------


def sampled(n):
    """The images the input fingerprint reads (io/source_read.c: k*(n-1)/63, k < 64)."""
    return {k * (n - 1) // 63 for k in range(64)}


def interrupted(s, out):
    clean(out)
    r = run(tiny(), s, out, extra_env={"SI_TEST_KILL_AT": "finish:begin"})
    ok = r.rc != 0 and os.path.exists(out + ".partial") and os.path.exists(out + ".journal")
    return check(ok, f"an interrupted run leaves a partial result and its journal ({r})")


def resume_changed(a):
    d = fresh("resume_changed")
    s, out = os.path.join(d, "set.h5"), os.path.join(d, "r.h5")
    victim = 100
    assert victim not in sampled(N200)

    # (a) bytes inside image 100's record flipped in place: same size, same inode
    shutil.copy(B("set200.h5"), s)
    if interrupted(s, out):
        size = os.path.getsize(s)
        with h5py.File(s, "r+") as f:
            off = f["/images/offsets"][:]
            mid = (int(off[victim]) + int(off[victim + 1])) // 2
            data = f["/images/data"]
            data[mid:mid + 8] = data[mid:mid + 8] ^ 0x5A
        assert os.path.getsize(s) == size
        part, journal = contents(out + ".partial"), sha(out + ".journal")
        r = run(tiny(), s, out, "--resume")
        refused(r, "(a) --resume after an image was edited in place", f"image {victim}")
        check(os.path.exists(out + ".partial") and contents(out + ".partial") == part and
              os.path.exists(out + ".journal") and sha(out + ".journal") == journal and
              not os.path.exists(out),
              "(a) the partial result and its journal kept as they were, no result")

    # (a2) the same with the file's modification time put back (touch -r, cp -p, rsync -t):
    # size, inode and mtime as the interrupted run saw them, the bytes not
    shutil.copy(B("set200.h5"), s)
    if interrupted(s, out):
        st = os.stat(s)
        with h5py.File(s, "r+") as f:
            off = f["/images/offsets"][:]
            mid = (int(off[victim]) + int(off[victim + 1])) // 2
            data = f["/images/data"]
            data[mid:mid + 8] = data[mid:mid + 8] ^ 0x5A
        os.utime(s, ns=(st.st_atime_ns, st.st_mtime_ns))
        r = run(tiny(), s, out, "--resume")
        refused(r, "(a2) --resume after an in-place edit whose mtime was put back",
                f"image {victim}")

    # (b) a re-export with images 100 and 130 replaced by others, put in place with os.replace
    shutil.copy(B("set200.h5"), s)
    if interrupted(s, out):
        files = jpegs()
        picks = [files[k % len(files)] for k in range(N200)]
        for k in (victim, 130):
            assert k not in sampled(N200)
            picks[k] = files[(k + 1) % len(files)]
        lst = os.path.join(d, "list_b.txt")
        write_list(lst, picks)
        pack(lst, os.path.join(d, "new.h5"))
        os.replace(os.path.join(d, "new.h5"), s)
        part = contents(out + ".partial")
        r = run(tiny(), s, out, "--resume")
        refused(r, "(b) --resume after a re-export with 2 images replaced", f"image {victim}")
        check(os.path.exists(out + ".partial") and contents(out + ".partial") == part and
              not os.path.exists(out), "(b) the partial result kept as it was, no result")

    # (c) an identical copy put in place (another inode, the same bytes): accepted
    shutil.copy(B("set200.h5"), s)
    if interrupted(s, out):
        shutil.copy(B("set200.h5"), os.path.join(d, "copy.h5"))
        os.replace(os.path.join(d, "copy.h5"), s)
        r = run(tiny(), s, out, "--resume")
        if succeeded(r, "(c) --resume on an identical copy of the input"):
            same_result(out, B("ref200.h5"), "(c) the resumed run")


# --- 3. --output naming an input ---------------------------------------------------------------


def output_clash(a):
    d = fresh("output_clash")
    s, m = os.path.join(d, "set.h5"), os.path.join(d, "model.onnx")
    sets = os.path.join(d, "sets.txt")
    link = os.path.join(d, "link.h5")
    hard = os.path.join(d, "hard.h5")
    os.makedirs(os.path.join(d, "sub"))
    other = os.path.join(d, "sub", "..", "set.h5")

    def setup():
        shutil.copy(B("set23.h5"), s)
        shutil.copy(tiny(), m)
        with open(sets, "w") as f:
            f.write(s + "\n")
        if not os.path.lexists(link):
            os.symlink("set.h5", link)
        if os.path.lexists(hard):
            os.remove(hard)
        os.link(s, hard)
        return {p: sha(p) for p in (s, m, sets)}

    cases = [("--output = --input", s, s, "input"),
             ("--output = --model", s, m, "model"),
             ("--output = a file of the list file input", sets, s, "input"),
             ("--output = the list file input", sets, sets, "input"),
             ("--output = a symbolic link to the input", s, link, "input"),
             ("--output = a hard link to the input", s, hard, "input"),
             ("--output = the input by another path (dir/../set.h5)", s, other, "input")]
    for what, inp, out, word in cases:
        before = setup()
        r = run(m, inp, out, "--overwrite")
        refused(r, what, out, word)
        changed = [os.path.basename(p) for p, h in before.items() if sha(p) != h]
        check(not changed and os.path.islink(link),
              f"{what}: the input, model and list file unchanged (changed: {changed})")


# --- 4. --resume onto a complete file that is not this run's -----------------------------------


def resume_foreign(a):
    d = fresh("resume_foreign")
    s = os.path.join(d, "set.h5")
    shutil.copy(B("set23.h5"), s)
    other = os.path.join(d, "other.h5")
    if not succeeded(run(B("other.onnx"), s, other), "the other model's run"):
        return
    text = os.path.join(d, "notes.h5")
    with open(text, "w") as f:
        f.write("a text file, not a result\n")
    copy = os.path.join(d, "copy_of_input.h5")
    shutil.copy(s, copy)
    for what, out in (("another model's complete result", other),
                      ("a copy of the input set", copy), ("a text file", text)):
        before = sha(out)
        r = run(tiny(), s, out, "--resume")
        check(not r.crashed() and r.rc not in (0,) and "complete already" not in r.err,
              f"--resume onto {what}: refused, not 'complete already' ({r})")
        check(sha(out) == before and not os.path.exists(out + ".partial"),
              f"--resume onto {what}: the file unchanged, no partial result")
    own = os.path.join(d, "own.h5")
    if succeeded(run(tiny(), s, own), "this command's run"):
        before = sha(own)
        r = run(tiny(), s, own, "--resume")
        check(r.rc == 0 and "complete already" in r.err and sha(own) == before,
              f"--resume onto this command's complete result: 'complete already', exit 0 ({r})")


# --- 8. dense sets with an empty dimension -----------------------------------------------------


def empty_dims(a):
    d = fresh("empty_dims")
    for shape in ((5, 3, 32, 0), (5, 0, 32, 3)):
        s = os.path.join(d, "set_" + "x".join(map(str, shape)) + ".h5")
        with h5py.File(s, "w") as f:
            f.create_dataset("images", shape=shape, dtype=np.uint8)
        out = os.path.join(d, "r.h5")
        clean(out)
        r = run(tiny(), s, out)
        refused(r, f"a dense set of shape {shape}", s)
        check(not os.path.exists(out), f"shape {shape}: no result written")


# --- 9. HDF5 external storage, external links and virtual datasets -----------------------------


def external(a):
    d = fresh("indirect")  # (no "external" in the paths the messages name)
    inside = os.path.join(d, "set_dir")
    outside = os.path.join(d, "elsewhere")  # not below inside: another directory
    os.makedirs(inside)
    os.makedirs(outside)
    blobs = blobs23()
    n = len(blobs)
    marker = b"SI-OUTSIDE-SECRET-" + os.urandom(8).hex().encode()
    # the outside file: the JPEGs, then a record of the marker (a reader that followed the
    # storage would meet it), so its bytes are known
    secret = b"".join(blobs) + marker * 4
    records = blobs + [marker * 4]
    ids = [f"id{k:03d}" for k in range(len(records))]
    inline = os.path.join(d, "inline.h5")
    packed_set(inline, records, ids)
    ref = os.path.join(d, "ref_inline.h5")
    if not succeeded(run(tiny(), inline, ref), "the set stored inline"):
        return
    outs = os.path.join(d, "outs")
    os.makedirs(outs)

    def ext_packed(path, raw_path, name=None):
        """A packed set at path whose /images/data is raw_path's bytes, named name in the
        file (default: raw_path)."""
        with open(raw_path, "wb") as f:
            f.write(secret)
        packed_set(path, records, ids, data=False)
        with h5py.File(path, "a") as f:
            f["images"].create_dataset("data", shape=(len(secret),), dtype=np.uint8,
                                       external=[(name or raw_path, 0, len(secret))])

    def go(what, inp, allow, accept, cwd=None):
        out = os.path.join(outs, what.replace(" ", "_").replace("/", "_") + ".h5")
        clean(out)
        r = run(tiny(), inp, out, *(["--allow-external"] if allow else []), cwd=cwd)
        flag = " with --allow-external" if allow else ""
        if accept is None:  # either, but never another file's bytes
            accept = r.rc == 0
        if accept:
            if succeeded(r, f"{what}{flag}: accepted"):
                same_result(out, ref, f"{what}{flag}")
        else:
            refused(r, f"{what}{flag}: refused", inp)
            check(not os.path.exists(out), f"{what}{flag}: no result written")
        return r

    def says_external(r, what):
        check(any("external" in l for l in r.errors()),
              f"{what}: the message says external storage")

    # external storage outside the set's directory, packed and dense: refused, also when allowed
    # (then naming the file it will not read)
    s = os.path.join(inside, "ext_out.h5")
    raw = os.path.join(outside, "secret.bin")
    ext_packed(s, raw)
    says_external(go("external storage outside", s, False, False), "external storage outside")
    r = go("external storage outside", s, True, False)
    check(any(raw in l for l in r.errors()), f"external storage outside with --allow-external: "
          f"the message names {raw}")
    # ... also when named from inside: a symbolic link in the directory, or a name with ../
    s = os.path.join(inside, "ext_via_link.h5")
    os.symlink(raw, os.path.join(inside, "via_link.bin"))
    ext_packed(s, raw, os.path.join(inside, "via_link.bin"))
    go("external storage through a symbolic link to a file outside", s, True, False)
    s = os.path.join(inside, "ext_dotdot.h5")
    ext_packed(s, raw, "../elsewhere/secret.bin")
    go("external storage named ../elsewhere/secret.bin", s, True, False)
    dense_raw = os.path.join(outside, "pixels.bin")
    pix = np.frombuffer((marker * (3 * 32 * 32 * 4 // len(marker) + 1))[:3 * 32 * 32 * 4],
                        np.uint8)
    with open(dense_raw, "wb") as f:
        f.write(pix.tobytes())
    s = os.path.join(inside, "ext_dense_out.h5")
    with h5py.File(s, "w") as f:
        f.create_dataset("images", shape=(4, 32, 32, 3), dtype=np.uint8,
                         external=[(dense_raw, 0, pix.size)])
    says_external(go("dense external storage outside", s, False, False),
                  "dense external storage outside")
    go("dense external storage outside", s, True, False)

    # external storage inside the set's own directory
    s = os.path.join(inside, "ext_in.h5")
    ext_packed(s, os.path.join(inside, "data.bin"))
    r = go("external storage inside", s, False, False)
    says_external(r, "external storage inside")
    check(any("--allow-external" in l for l in r.errors()),
          "external storage inside: the message says how to allow it (--allow-external)")
    go("external storage inside", s, True, True)
    # a relative name, run from another directory holding a decoy of that name: the set's
    # own file is read, or none (HDF5 alone would open the one in the working directory)
    s = os.path.join(inside, "ext_rel.h5")
    ext_packed(s, os.path.join(inside, "rel.bin"), "rel.bin")
    with open(os.path.join(outside, "rel.bin"), "wb") as f:
        f.write(marker * (len(secret) // len(marker) + 1))
    go("external storage named rel.bin, run from a directory with a decoy rel.bin", s, True,
       None, cwd=outside)

    # an external link for /images
    target = os.path.join(inside, "target.h5")
    shutil.copy(inline, target)
    s = os.path.join(inside, "link_in.h5")
    with h5py.File(s, "w") as f:
        f["images"] = h5py.ExternalLink("target.h5", "/images")
    go("an external link inside", s, False, False)
    go("an external link inside", s, True, True)
    shutil.copy(inline, os.path.join(outside, "target.h5"))
    s = os.path.join(inside, "link_out.h5")
    with h5py.File(s, "w") as f:
        f["images"] = h5py.ExternalLink(os.path.join(outside, "target.h5"), "/images")
    go("an external link outside", s, True, False)
    s = os.path.join(inside, "link_up.h5")
    with h5py.File(s, "w") as f:
        f["images"] = h5py.ExternalLink("../elsewhere/target.h5", "/images")
    go("an external link ../ out of the directory", s, True, False)

    # a virtual dataset assembling /images/data from two files
    def vds(path, src_dir):
        data = np.frombuffer(b"".join(records), np.uint8)
        half = len(data) // 2
        parts = []
        for k, (lo, hi) in enumerate(((0, half), (half, len(data)))):
            p = os.path.join(src_dir, f"{os.path.basename(path)}.part{k}.h5")
            with h5py.File(p, "w") as f:
                f["data"] = data[lo:hi]
            parts.append((p, lo, hi))
        layout = h5py.VirtualLayout(shape=(len(data),), dtype=np.uint8)
        for p, lo, hi in parts:
            layout[lo:hi] = h5py.VirtualSource(p, "data", shape=(hi - lo,))
        packed_set(path, records, ids, data=False)
        with h5py.File(path, "a") as f:
            f["images"].create_virtual_dataset("data", layout)

    s = os.path.join(inside, "vds_in.h5")
    vds(s, inside)
    go("a virtual dataset from two files inside", s, False, False)
    go("a virtual dataset from two files inside", s, True, True)
    s = os.path.join(inside, "vds_out.h5")
    vds(s, outside)
    go("a virtual dataset from two files outside", s, True, False)

    leaks = []
    for p in glob.glob(os.path.join(outs, "*")):
        with open(p, "rb") as f:
            if marker in f.read():
                leaks.append(os.path.basename(p))
    check(not leaks, f"the outside file's bytes appear in no output file (found in {leaks})")


# --- 10. symbolic links planted beside the output ----------------------------------------------


def planted_links(a):
    d = fresh("planted")  # (no "link" in the paths the messages name)
    keep = os.path.join(d, "precious")
    os.makedirs(keep)
    victim = os.path.join(keep, "victim.txt")
    s = os.path.join(d, "set.h5")
    shutil.copy(B("set23.h5"), s)
    out = os.path.join(d, "out.h5")
    for suffix, must_refuse, flags in ((".lock", True, ()), (".partial", True, ()),
                                       (".partial", True, ("--overwrite",)),
                                       (".journal", True, ()),
                                       (".journal", True, ("--overwrite",)),
                                       (".undo.tmp", False, ()), (".undo", False, ())):
        clean(out)
        with open(victim, "w") as f:
            f.write("a file the run must never write\n")
        before = sha(victim)
        os.symlink(victim, out + suffix)
        r = run(tiny(), s, out, *flags)
        what = f"a symbolic link planted at OUT{suffix}" + "".join(" " + f for f in flags)
        if must_refuse:
            refused(r, what, out + suffix, "link")
        else:
            check(not r.crashed() and r.rc in (0, 1),
                  f"{what}: the run ends cleanly, refused or done ({r})")
        check(sha(victim) == before, f"{what}: the victim unchanged")

    # a dangling link: following it would create the file it names
    for suffix in (".lock", ".partial", ".journal", ".undo.tmp"):
        clean(out)
        made = os.path.join(keep, "created" + suffix)
        if os.path.exists(made):
            os.remove(made)
        os.symlink(made, out + suffix)
        r = run(tiny(), s, out)
        what = f"a dangling symbolic link planted at OUT{suffix}"
        check(not r.crashed() and r.rc in (0, 1), f"{what}: the run ends cleanly ({r})")
        check(not os.path.exists(made), f"{what}: the file it names is not created")

    # the result's own name a link to the victim, with --overwrite: the link is replaced
    clean(out)
    with open(victim, "w") as f:
        f.write("a file the run must never write\n")
    before = sha(victim)
    os.symlink(victim, out)
    r = run(tiny(), s, out, "--overwrite")
    check(not r.crashed() and r.rc in (0, 1), f"OUT a symbolic link to the victim, --overwrite: "
          f"the run ends cleanly ({r})")
    check(sha(victim) == before, "OUT a symbolic link to the victim, --overwrite: the victim "
          "unchanged")

    # the final step's files planted while the run works, after every check at its start
    files = jpegs()
    lst = os.path.join(d, "list1000.txt")
    write_list(lst, [files[k % len(files)] for k in range(1000)])
    big = os.path.join(d, "set1000.h5")
    pack(lst, big)
    for attempt in range(3):
        clean(out)
        for x in (".undo.tmp", ".undo"):
            if os.path.lexists(out + x):
                os.remove(out + x)
        with open(victim, "w") as f:
            f.write("a file the run must never write\n")
        before = sha(victim)
        cmd = [BIN, "run", "--model", tiny(), "--input", big, "--output", out, "--batch",
               str(BATCH), "--threads", "1", "--progress", "none"]
        print("$", " ".join(cmd), "(links planted at OUT.undo.tmp and OUT.undo mid-run)")
        with tempfile.TemporaryFile() as err:
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=err, env=env())
            t0 = time.monotonic()
            while (not os.path.exists(out + ".partial") and p.poll() is None and
                   time.monotonic() - t0 < 60):
                time.sleep(0.002)
            planted = False
            if p.poll() is None:
                p.send_signal(signal.SIGSTOP)
                if not os.path.exists(out) and not os.path.lexists(out + ".undo"):
                    os.symlink(victim, out + ".undo.tmp")
                    os.symlink(victim, out + ".undo")
                    planted = True
                p.send_signal(signal.SIGCONT)
            try:
                rc = p.wait(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                p.kill()
                rc = "timeout"
            err.seek(0)
            text = err.read().decode("utf-8", "backslashreplace")
        if not planted:
            print(f"the run ended before the links could be planted (rc {rc}); again")
            continue
        tail = " | ".join(l for l in text.splitlines() if "error:" in l)[-500:]
        check(rc in (0, 1) and not any(x in text for x in SANITIZER),
              f"links planted at OUT.undo.tmp and OUT.undo mid-run: the run ends cleanly, "
              f"refused or done (rc {rc}: {tail})")
        check(sha(victim) == before,
              "links planted at OUT.undo.tmp and OUT.undo mid-run: the victim unchanged")
        break
    else:
        check(False, "links planted mid-run: the run never lasted long enough to plant them")


# --- 13. a decompression bomb in /images/offsets -----------------------------------------------


_base_rss = []


def base_rss_kb():
    """The peak RSS of a run that stops at its input (no such file): the binary's libraries and
    runtime (a CUDA build's alone take a few hundred MiB), against which a bound is set."""
    if not _base_rss:
        r = run(tiny(), os.path.join(B(""), "no_such_set.h5"), B("no_such_out.h5"), timeout=60)
        _base_rss.append(r.maxrss_kb)
    return _base_rss[0]


def chunk_bomb(a):
    d = fresh("chunk_bomb")
    n = (1 << 24) + 1  # 16M + 1 offsets, all 0: one 128 MiB chunk of a few hundred KB
    for with_ids in (False, True):
        s = os.path.join(d, "bomb_ids.h5" if with_ids else "bomb.h5")
        with h5py.File(s, "w") as f:
            g = f.create_group("images")
            g.create_dataset("offsets", shape=(n,), dtype=np.uint64, chunks=(n,),
                             compression="gzip", compression_opts=9, fillvalue=0)
            g["offsets"][...] = 0
            g.create_dataset("data", shape=(0,), dtype=np.uint8)
            if with_ids:  # never written: empty strings, no bytes in the file
                g.create_dataset("ids", shape=(n - 1,), dtype=h5py.string_dtype(),
                                 chunks=(1 << 16,), compression="gzip")
        what = f"offsets in one gzip chunk of 128 MiB ({os.path.getsize(s) // 1024} KB file" + \
            (", ids never written)" if with_ids else ", no ids)")
        out = os.path.join(d, "r.h5")
        clean(out)
        r = run(tiny(), s, out, timeout=60)
        refused(r, what, s, "/images/offsets", "chunk")
        check(r.seconds < 20, f"{what}: answered in {r.seconds:.1f} s (< 20)")
        cap = base_rss_kb() // 1024 + (512 if ASAN else 64)
        check(r.maxrss_kb < cap * 1024,
              f"{what}: peak RSS {r.maxrss_kb // 1024} MiB (< {cap} MiB: the binary's own "
              f"{base_rss_kb() // 1024} MiB plus 64)")


def never_written(a):
    """Found by the input fuzzer: a dense set declaring 2^40 images of 60 bytes, chunked (2^20, 1,
    1, 1), two of them written. HDF5 makes each unwritten image up from the fill value, 60 chunks
    of 1 MiB for each: refused at once. A dense set chunked by h5py's defaults and written whole
    still runs, its results those of the same pixels unchunked."""
    d = fresh("never_written")
    s = os.path.join(d, "declared.h5")
    with h5py.File(s, "w") as f:
        ds = f.create_dataset("images", shape=(1 << 40, 4, 5, 3), dtype=np.uint8,
                              chunks=(1 << 20, 1, 1, 1), compression="gzip")
        ds[:2] = np.arange(120, dtype=np.uint8).reshape(2, 4, 5, 3)
    out = os.path.join(d, "r.h5")
    clean(out)
    r = run(tiny(), s, out, timeout=60)
    refused(r, "a dense set declaring 2^40 images, 2 written", s, "never written")
    check(r.seconds < 20, f"declared, never written: answered in {r.seconds:.1f} s (< 20)")
    rng = np.random.default_rng(7)
    px = rng.integers(0, 256, size=(300, 32, 32, 3), dtype=np.uint8)
    sets = {}
    for name, kw in (("auto", {"chunks": True, "compression": "gzip"}), ("plain", {})):
        sets[name] = os.path.join(d, f"dense_{name}.h5")
        with h5py.File(sets[name], "w") as f:
            f.create_dataset("images", data=px, **kw)
    outs = {}
    for name, path in sets.items():
        outs[name] = os.path.join(d, f"r_{name}.h5")
        clean(outs[name])
        succeeded(run(tiny(), path, outs[name]), f"a dense set, {name} chunks")
    same_result(outs["auto"], outs["plain"], "h5py's default chunks vs none")


# --- 14. records declaring 3 GiB -----------------------------------------------------------------


BIG = 3 << 30


def rows_but(got, ref, skip, what):
    """Every row of got but those in skip is ref's: the same statuses and classes, the
    probabilities within check_results' tolerance (another batch's neighbours move the last
    bits)."""
    keep = np.array([i not in skip for i in range(len(ref["status"]))])
    diff = np.abs(got["topk_prob"][keep].astype(np.float64) - ref["topk_prob"][keep])
    ok = (np.array_equal(got["status"][keep], ref["status"][keep]) and
          np.array_equal(got["topk_class"][keep], ref["topk_class"][keep]) and
          bool(np.all(diff <= check_results.PROB_TOL)))
    return check(ok, f"{what}: every other image has the result it gets in the honest set "
                 f"(statuses {got['status'][keep].tolist()} vs {ref['status'][keep].tolist()}, "
                 f"max |dprob| {diff.max() if diff.size else 0:.2g})")


def big_record(a):
    d = fresh("big_record")
    blobs = blobs23()
    k = 3
    ref = B("ref23.h5")
    refrows = read_rows(ref)
    cap = base_rss_kb() * 1024 + (1024 if ASAN else 128) * MIB

    # a packed set whose record k declares 3 GiB: /images/data 3 GiB long in 64 KiB chunks,
    # only those of the real records written
    sizes = [len(b) for b in blobs]
    sizes[k] = BIG
    off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.uint64)
    s = os.path.join(d, "big_packed.h5")
    with h5py.File(s, "w") as f:
        g = f.create_group("images")
        g.create_dataset("ids", data=[f"id{i:03d}" for i in range(len(blobs))],
                         dtype=h5py.string_dtype())
        g.create_dataset("offsets", data=off)
        data = g.create_dataset("data", shape=(int(off[-1]),), dtype=np.uint8, chunks=(1 << 16,))
        for i, b in enumerate(blobs):
            if i != k:
                data[int(off[i]):int(off[i + 1])] = np.frombuffer(b, np.uint8)
    for what, path in (("a packed record declaring 3 GiB", s),):
        check_big(what, path, os.path.join(d, "r_packed.h5"), k, refrows, cap)

    # a vlen set whose element k declares 3 GiB (its length patched in the raw file)
    s = os.path.join(d, "big_vlen.h5")
    with h5py.File(s, "w") as f:
        g = f.create_group("images")
        g.create_dataset("ids", data=[f"id{i:03d}" for i in range(len(blobs))],
                         dtype=h5py.string_dtype())
        v = g.create_dataset("data", shape=(len(blobs),), dtype=h5py.vlen_dtype(np.uint8))
        for i, b in enumerate(blobs):
            v[i] = np.frombuffer(b, np.uint8)
        at = v.id.get_offset()
    with open(s, "r+b") as f:  # each element: a 4-byte length, then the heap reference
        f.seek(at + 16 * k)
        assert int.from_bytes(f.read(4), "little") == len(blobs[k])
        f.seek(at + 16 * k)
        f.write(BIG.to_bytes(4, "little"))
    check_big("a vlen record declaring 3 GiB", s, os.path.join(d, "r_vlen.h5"), k, refrows, cap)

    # --max-record-bytes 1000 on the set with one small JPEG (16x16) among them
    small = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 40, 90)).save(small, "JPEG", quality=60)
    small = small.getvalue()
    assert len(small) < 1000
    records = blobs + [small]
    s = os.path.join(d, "with_small.h5")
    packed_set(s, records)
    out, plain = os.path.join(d, "r_cap.h5"), os.path.join(d, "r_nocap.h5")
    if succeeded(run(tiny(), s, plain), "the set with a small JPEG, no cap"):
        r = run(tiny(), s, out, "--max-record-bytes", 1000)
        if succeeded(r, "--max-record-bytes 1000"):
            got, want = read_rows(out), read_rows(plain)
            over = np.array([len(b) > 1000 for b in records])
            check(np.all(got["status"][over] == STATUS_TOO_LARGE),
                  f"--max-record-bytes 1000: the {int(over.sum())} images over 1000 bytes "
                  f"too_large (statuses {got['status'].tolist()})")
            rows_but(got, want, set(np.nonzero(over)[0].tolist()), "--max-record-bytes 1000")
            said = r"warning: (\d+) images failed with status too_large"
            counts = [int(m) for m in re.findall(said, r.err)]
            check(all(c == int(over.sum()) for c in counts),
                  f"--max-record-bytes 1000: the failures counted once each (the log says "
                  f"{counts}, {int(over.sum())} failed)")


def check_big(what, path, out, k, refrows, cap):
    clean(out)
    r = run(tiny(), path, out, memory=2 << 30, timeout=180)
    if not succeeded(r, what):
        return
    logged = [l for l in r.err.splitlines() if f"image {k} " in l]
    check(len(logged) == 1, f"{what}: image {k}'s failure logged once ({len(logged)} lines)")
    got = read_rows(out)
    check(got["status"][k] == STATUS_TOO_LARGE,
          f"{what}: image {k} too_large (status {got['status'][k]})")
    rows_but(got, refrows, {k}, what)
    check(r.maxrss_kb * 1024 < cap, f"{what}: peak RSS {r.maxrss_kb // 1024} MiB "
          f"(< {cap // MIB} MiB)")


# --- a damaged gzip chunk ------------------------------------------------------------------------


def corrupt_chunk(a):
    d = fresh("corrupt_chunk")
    blobs = blobs23()
    s = os.path.join(d, "gz.h5")
    off = packed_set(s, blobs, data_kw=dict(chunks=(1 << 16,), compression="gzip"))
    c = 5
    with h5py.File(s, "r") as f:
        info = f["/images/data"].id.get_chunk_info(c)
    lo, hi = info.chunk_offset[0], info.chunk_offset[0] + (1 << 16)
    hit = {i for i in range(len(blobs)) if off[i] < hi and off[i + 1] > lo}
    with open(s, "r+b") as f:
        at = info.byte_offset + info.size // 2
        f.seek(at)
        b = f.read(16)
        f.seek(at)
        f.write(bytes(x ^ 0xFF for x in b))
    out = os.path.join(d, "r.h5")
    r = run(tiny(), s, out)
    what = f"gzip chunk {c} of /images/data damaged (images {sorted(hit)})"
    check("HDF5-DIAG" not in r.err, f"{what}: no HDF5-DIAG text on stderr")
    if not succeeded(r, what):
        return
    got = read_rows(out)
    check(all(got["status"][i] == STATUS_READ_ERROR for i in hit),
          f"{what}: those images read_error (statuses {got['status'][sorted(hit)].tolist()})")
    rows_but(got, read_rows(B("ref23.h5")), hit, what)


CASES = {"prepare": prepare, "eio": eio, "resume-changed": resume_changed,
         "output-clash": output_clash, "resume-foreign": resume_foreign,
         "empty-dims": empty_dims, "external": external, "planted-links": planted_links,
         "chunk-bomb": chunk_bomb, "big-record": big_record, "corrupt-chunk": corrupt_chunk,
         "never-written": never_written}


def main():
    global BIN, SHIM, WORK, BASE, TMP, ASAN
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shardinfer", required=True)
    ap.add_argument("--eio-shim", help="the LD_PRELOAD library of tests/eio_shim.c (case eio)")
    ap.add_argument("--work", required=True)
    ap.add_argument("case", nargs="+", choices=list(CASES) + ["all"])
    a = ap.parse_args()
    BIN = os.path.abspath(a.shardinfer)
    SHIM = os.path.abspath(a.eio_shim) if a.eio_shim else None
    WORK = os.path.abspath(a.work)
    BASE = os.path.join(WORK, "base")
    ASAN = b"__asan_init" in open(BIN, "rb").read()
    names = []
    for c in a.case:
        names += [n for n in CASES if n != "prepare"] if c == "all" else [c]
    if "eio" in names and not (SHIM and os.path.exists(SHIM)):
        sys.exit("FAIL: case eio needs --eio-shim LIB.so (tests/eio_shim.c)")
    os.makedirs(WORK, exist_ok=True)
    TMP = tempfile.mkdtemp(prefix="si-hostile-")  # short: Open MPI's socket paths live here
    try:
        if "prepare" in names or not os.path.exists(B("prepared")):
            prepare()
        for c in names:
            if c == "prepare":
                continue
            print(f"--- {c}", flush=True)
            CASES[c](a)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
    if failures:
        print(f"FAIL: {len(failures)} check(s) of {' '.join(names)} failed; the first: "
              f"{failures[0]}")
        sys.exit(1)
    print(f"OK: {' '.join(names)}")


if __name__ == "__main__":
    main()
