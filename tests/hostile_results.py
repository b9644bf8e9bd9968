#!/usr/bin/env python3
"""`shardinfer merge` and `shardinfer show` against hostile result files and operator mistakes
(issue 36): each way a crafted part, a mistyped path or an interrupted merge could make either
crash, hang, merge images twice, destroy a file that is not its own or leave a temporary behind,
reproduced and checked to be refused with one message naming the file (and the dataset or
attribute), or handled. The parts are real results of `shardinfer run` on a tiny set, edited with
h5py where the edit is the point. Every subprocess has a timeout and a memory limit; a sanitizer
report on stderr is a failure.

Usage: hostile_results.py --shardinfer BIN --dir WORK CASE
  prepare        the tiny set (tests/make_e2e_set.py), files of 20, 3, 21 and 2 of its images,
                 and the results of runs over them (--batch 4)
  overlap        one input typed three ways (relative, absolute, symlink, ../) or copied is
                 merged once; two inputs both typed part.h5 in two folders are two inputs
  attributes     root attributes of any type, shape and size are copied (4,096 floats, a
                 72-byte string, arrays, compounds, empty); an absurd one is refused by name
  ranks          datasets of rank 3 and 20 (a top-K, a column) and scalar ones: refused by name
  datasets       rows that disagree, wrong types, external links, virtual datasets, external
                 storage: refused by name, never followed
  partial        the partial file of an unfinished run (as RESULT.h5.partial, renamed, or only
                 beside a missing RESULT.h5): "finish it with --resume"
  output         another merge's temporary is left alone (also as a symlink to a victim), the
                 output may not be a part, no temporary remains
  interrupt      SIGINT / SIGTERM during a merge: exit 6, no temporary, no output
  show-inputs    show's labels from a FIFO, /dev/zero or with an endless line, and a FIFO as the
                 result: refused at once
  escaped-ids    parts with /ids_escaped merge, the rows shifted
  many-datasets  a part with 70 more per-image datasets (one with a 200-character name) merges
                 all of them
  batch          parts of a multiple of the batch merge into one run's file bit for bit; others
                 warn once, keep the statuses and the values within float rounding
"""

import argparse
import glob
import hashlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable
TIMEOUT = 120
MEMORY = 4 << 30  # address space of each shardinfer: /dev/zero as labels must not reach it
BATCH = 4
SANITIZER = ("AddressSanitizer", "LeakSanitizer", "runtime error:", "UndefinedBehaviorSanitizer")

failures = []


def check(ok, what):
    print(("ok:   " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


def env():
    e = dict(os.environ)
    # a singleton MPI run as root (CI, containers); ASan's leak report off: HDF5 and Open MPI
    # keep memory to exit, and a leak is not what these cases test
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             PMIX_MCA_pcompress_base_silence_warning="1", OMP_NUM_THREADS="1",
             ASAN_OPTIONS=e.get("ASAN_OPTIONS", "detect_leaks=0"))
    return e


ASAN = False  # set in main: ASan reserves terabytes of address space, so no limit for it


def limit_memory():
    if not ASAN:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


class Result:
    def __init__(self, rc, out, err, timed_out=False):
        self.rc, self.out, self.err, self.timed_out = rc, out, err, timed_out

    def crashed(self):
        return self.rc is not None and (self.rc < 0 or any(s in self.err for s in SANITIZER))

    def __str__(self):
        if self.timed_out:
            return "timed out (hangs)"
        return f"rc {self.rc}: {self.err.strip()[-600:]}"


def sh(cmd, timeout=TIMEOUT, cwd=None, extra_env=None):
    """Runs cmd; a hang or a crash is a Result, not an exception."""
    print("$", " ".join(cmd), flush=True)
    e = env()
    e.update(extra_env or {})
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="backslashreplace",
                           timeout=timeout, cwd=cwd, env=e, preexec_fn=limit_memory)
    except subprocess.TimeoutExpired as t:
        return Result(None, "", str(t.stderr or ""), timed_out=True)
    return Result(p.returncode, p.stdout, p.stderr)


def refused(r, what, *names):
    """r failed cleanly: exit 1, one error line naming each of names, no crash or hang."""
    errors = [l for l in r.err.splitlines() if "error:" in l]
    ok = (not r.timed_out and not r.crashed() and r.rc == 1 and len(errors) == 1
          and all(n in errors[0] for n in names))
    return check(ok, f"{what}: refused with one message naming {', '.join(names)} ({r})")


def succeeded(r, what):
    return check(not r.timed_out and r.rc == 0 and not r.crashed(), f"{what} ({r})")


def run(a, inp, out, cwd=None, extra=(), extra_env=None):
    r = sh([a.shardinfer, "run", "--model", os.path.join(a.dir, "tiny.onnx"), "--input", inp,
            "--output", out, "--batch", str(BATCH), "--quiet", "--progress", "none",
            "--overwrite", *extra], cwd=cwd, extra_env=extra_env)
    return r


def merge(a, out, *parts, overwrite=True):
    return sh([a.shardinfer, "merge", "--output", out, *(["--overwrite"] if overwrite else []),
               *parts])


def R(a, name):
    return os.path.join(a.dir, "r", name)


def W(a, *names):
    """A path under the work folder, nothing there yet (an earlier run's file is removed)."""
    p = os.path.join(a.dir, "work", *names)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    if os.path.lexists(p) and not os.path.isdir(p):
        os.remove(p)
    return p


def read_all(path):
    data = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                v = obj[()]
                if obj.dtype.kind == "O":
                    v = np.array([x.decode() if isinstance(x, bytes) else x for x in v.ravel()])
                data[name] = v
        f.visititems(visit)
    return data


def same_data(x, y):
    if sorted(x) != sorted(y):
        return False
    for k in x:
        u, v = x[k], y[k]
        if u.shape != v.shape:
            return False
        if not (np.array_equal(u, v, equal_nan=True) if u.dtype.kind == "f"
                else np.array_equal(u, v)):
            return False
    return True


def rows(path):
    with h5py.File(path, "r") as f:
        return len(f["status"])


def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def retarget(f, name):
    """Gives the open result f an input of its own, /crafted/NAME (so it overlaps no other part):
    in its resume key (input, input_fp) and its input attribute."""
    key = f.attrs["resume_key"]
    key = key.decode() if isinstance(key, bytes) else key
    fp = hashlib.sha256(name.encode()).hexdigest()[:16]
    f.attrs["resume_key"] = ";".join(
        f"input=/crafted/{name}" if i.startswith("input=") else
        f"input_fp={fp}" if i.startswith("input_fp=") else i for i in key.split(";"))
    f.attrs["input"] = f"/crafted/{name}"


def crafted(a, src, name):
    """A copy of result src to edit, with an input of its own."""
    dst = W(a, name)
    shutil.copy(src, dst)
    with h5py.File(dst, "a") as f:
        retarget(f, name)
    return dst


# --------------------------------------------------------------------------------------------


def split(src, dst, lo, hi):
    with h5py.File(src, "r") as f:
        off, data, ids = f["/images/offsets"][:], f["/images/data"][:], f["/images/ids"][:]
    with h5py.File(dst, "w") as g:
        grp = g.create_group("images")
        grp["data"] = data[off[lo]:off[hi]]
        grp["offsets"] = (off[lo:hi + 1] - off[lo]).astype(np.uint64)
        grp.create_dataset("ids", data=ids[lo:hi], dtype=h5py.string_dtype())


def prepare(a):
    if os.path.isdir(a.dir):
        shutil.rmtree(a.dir)
    os.makedirs(os.path.join(a.dir, "sets"))
    os.makedirs(os.path.join(a.dir, "r"))
    p = sh([PY, os.path.join(HERE, "make_e2e_set.py"), "--output-dir", os.path.join(a.dir, "e2e"),
            "--count", "23", "--tiny-model", os.path.join(a.dir, "tiny.onnx")], timeout=300)
    if p.rc != 0:
        sys.exit(f"FAIL: make_e2e_set.py: {p}")
    s = os.path.join(a.dir, "set.h5")
    p = sh([a.shardinfer, "pack", os.path.join(a.dir, "e2e", "images"), "--output", s])
    if p.rc != 0:
        sys.exit(f"FAIL: pack: {p}")
    for name, lo, hi in (("a20", 0, 20), ("b3", 20, 23), ("c21", 0, 21), ("d2", 21, 23)):
        split(s, os.path.join(a.dir, "sets", f"{name}.h5"), lo, hi)
    for pair in ("ab", "cd"):
        with open(os.path.join(a.dir, "sets", f"{pair}.txt"), "w") as f:
            f.write("".join(os.path.join(a.dir, "sets", f"{n}.h5") + "\n"
                            for n in ({"ab": ("a20", "b3"), "cd": ("c21", "d2")}[pair])))
    jobs = [(s, "whole.h5")] + [(os.path.join(a.dir, "sets", f"{n}.h5"), f"{n}.h5")
                                for n in ("a20", "b3", "c21", "d2")]
    jobs += [(os.path.join(a.dir, "sets", f"{n}.txt"), f"list_{n}.h5") for n in ("ab", "cd")]
    for inp, out in jobs:
        p = run(a, inp, R(a, out))
        if p.rc != 0:
            sys.exit(f"FAIL: run {inp}: {p}")
    print("prepare: OK")


# --------------------------------------------------------------------------------------------


def overlap(a):
    d = W(a, "overlap", "x")
    d = os.path.dirname(d)
    s = os.path.join(a.dir, "set.h5")
    os.makedirs(os.path.join(d, "sub"), exist_ok=True)
    link = os.path.join(d, "link.h5")
    if not os.path.lexists(link):
        os.symlink(s, link)
    shutil.copy(s, os.path.join(d, "copy.h5"))
    spelled = {"relative": ("set.h5", a.dir), "symlink": (link, None),
               "dotdot": (os.path.join("..", "..", "..", "set.h5"), os.path.join(d, "sub")),
               "copy": (os.path.join(d, "copy.h5"), None)}
    for how, (inp, cwd) in spelled.items():
        out = os.path.join(d, f"by_{how}.h5")
        if not succeeded(run(a, inp, out, cwd=cwd), f"run with the input typed {how}"):
            continue
        m = W(a, "overlap", f"merged_{how}.h5")
        r = merge(a, m, R(a, "whole.h5"), out)
        refused(r, f"merge of the set's result with one of its input typed {how}", "overlap",
                "whole.h5", f"by_{how}.h5")
        check(not os.path.exists(m), f"{how}: no output left")
    # two different inputs, both typed part.h5 in their own folders
    parts = []
    for k, n in enumerate(("a20", "b3")):
        dk = os.path.join(d, f"dir{k}")
        os.makedirs(dk, exist_ok=True)
        shutil.copy(os.path.join(a.dir, "sets", f"{n}.h5"), os.path.join(dk, "part.h5"))
        parts.append(os.path.join(dk, "result.h5"))
        succeeded(run(a, "part.h5", parts[-1], cwd=dk), f"run over dir{k}/part.h5")
    m = os.path.join(d, "two_part_h5.h5")
    r = merge(a, m, *parts)
    if succeeded(r, "two inputs both typed part.h5 (two folders) merge"):
        whole = read_all(R(a, "whole.h5"))
        got = read_all(m)
        check(list(got["ids"]) == list(whole["ids"]) and
              np.array_equal(got["index"], np.arange(23)),
              "their merge holds the 23 images in order")
        with h5py.File(m, "r") as f:
            ins = f.attrs["merged_inputs"]
            ins = (ins.decode() if isinstance(ins, bytes) else ins).split("\n")
        check(ins == [os.path.realpath(os.path.join(d, f"dir{k}", "part.h5")) for k in (0, 1)],
              f"merged_inputs lists their real paths: {ins}")
        r = merge(a, os.path.join(d, "again.h5"), m, parts[1])
        refused(r, "a merge and one of its own parts", "overlap", "two_part_h5.h5", "dir1")


def attributes(a):
    p = crafted(a, R(a, "a20.h5"), "attrs.h5")
    added = {"user_floats": np.arange(4096, dtype=np.float32),
             "user_note72": np.bytes_(b"n" * 72),
             "user_matrix": np.arange(12, dtype=np.int64).reshape(3, 4),
             "user_strings": np.array(["one", "two" * 40, ""], dtype=h5py.string_dtype()),
             "user_compound": np.array([(1, 2.5), (3, 4.5)], dtype=[("a", "<i4"), ("b", "<f8")]),
             "user_text": "t" * 5000}
    with h5py.File(p, "a") as f:
        for k, v in added.items():
            f.attrs[k] = v
        f.attrs["user_empty"] = h5py.Empty("f4")
    out = W(a, "attrs_merged.h5")
    if succeeded(merge(a, out, p, R(a, "b3.h5")), "merge of a part with large attributes"):
        with h5py.File(out, "r") as f, h5py.File(p, "r") as g:
            for k in list(added) + ["user_empty", "model", "preprocess"]:
                x, y = f.attrs.get(k), g.attrs.get(k)
                same = (isinstance(x, h5py.Empty) and isinstance(y, h5py.Empty)) or \
                    (x is not None and np.array_equal(np.asarray(x), np.asarray(y)))
                check(same, f"attribute {k} copied as it is")
            check(int(f.attrs["images"]) == 23, "images summed")
    # attributes over 64 KiB need a file made with the latest format (dense attribute storage)
    small = crafted(a, R(a, "a20.h5"), "huge_attr_base.h5")
    huge = W(a, "huge_attr.h5")
    with h5py.File(small, "r") as g, h5py.File(huge, "w", libver="latest") as f:
        for k in g:
            g.copy(g[k], f, k)
        for k, v in g.attrs.items():
            f.attrs[k] = v
        f.attrs.create("user_huge", np.zeros(17 << 20, dtype=np.uint8))
    out = W(a, "huge_merged.h5")
    refused(merge(a, out, huge, R(a, "b3.h5")), "a 17 MiB attribute", "huge_attr.h5",
            "user_huge")
    check(not os.path.exists(out), "no output left")
    os.remove(huge)  # 17 MB


def replace(path, name, data=None, shape=None, dtype=None):
    with h5py.File(path, "a") as f:
        del f[name]
        if shape is not None:
            f.create_dataset(name, shape=shape, dtype=dtype)
        else:
            f[name] = data


def ranks(a):
    cases = []
    p = crafted(a, R(a, "a20.h5"), "rank20_topk.h5")
    replace(p, "topk_class", np.zeros((20, 5) + (1,) * 18, dtype=np.int32))
    cases.append((p, "/topk_class"))
    p = crafted(a, R(a, "a20.h5"), "rank3_topk.h5")
    replace(p, "topk_class", np.zeros((20, 5, 2), dtype=np.int32))
    cases.append((p, "/topk_class"))
    p = crafted(a, R(a, "a20.h5"), "scalar_status.h5")
    replace(p, "status", np.int32(0))
    cases.append((p, "/status"))
    for p, ds in cases:
        name = os.path.basename(p)
        refused(sh([a.shardinfer, "show", p]), f"show {name}", name, ds)
        out = W(a, "rank_merged.h5")
        refused(merge(a, out, p, R(a, "b3.h5")), f"merge {name}", name, ds)
    # a column of rank 20 in a result show prints generically (no top-K)
    p = crafted(a, R(a, "a20.h5"), "rank20_column.h5")
    with h5py.File(p, "a") as f:
        del f["topk_class"], f["topk_prob"]
        f["embedding"] = np.ones((20, 2) + (1,) * 18, dtype=np.float32)
    name = os.path.basename(p)
    refused(sh([a.shardinfer, "show", p]), f"show {name}", name, "/embedding")
    refused(merge(a, W(a, "rank_merged.h5"), p, R(a, "b3.h5")), f"merge {name}", name,
            "/embedding")


def datasets(a):
    other = W(a, "other.h5")
    with h5py.File(other, "w") as f:
        f["data"] = np.full((20, 5), 7.25, dtype=np.float32)  # no probability is > 1
    raw = W(a, "raw.bin")
    np.full((20, 5), 8.5, dtype=np.float32).tofile(raw)
    cases = []

    def case(name, ds, edit):
        p = crafted(a, R(a, "a20.h5"), name)
        with h5py.File(p, "a") as f:
            edit(f)
        cases.append((p, ds))

    def short(f):
        v = f["topk_prob"][:19]
        del f["topk_prob"]
        f["topk_prob"] = v
    case("short_prob.h5", "/topk_prob", short)

    def int_ids(f):
        del f["ids"]
        f["ids"] = np.arange(20, dtype=np.int64)
    case("int_ids.h5", "/ids", int_ids)

    def ext_link(f):
        del f["topk_prob"]
        f["topk_prob"] = h5py.ExternalLink(other, "/data")
    case("external_link.h5", "/topk_prob", ext_link)

    def virtual(f):
        del f["topk_prob"]
        lay = h5py.VirtualLayout(shape=(20, 5), dtype=np.float32)
        lay[:] = h5py.VirtualSource(other, "data", shape=(20, 5))
        f.create_virtual_dataset("topk_prob", lay)
    case("virtual.h5", "/topk_prob", virtual)

    def external_storage(f):
        del f["topk_prob"]
        f.create_dataset("topk_prob", shape=(20, 5), dtype=np.float32,
                         external=[(raw, 0, 20 * 5 * 4)])
    case("external_storage.h5", "/topk_prob", external_storage)

    def soft_group(f):
        f["errors_copy"] = h5py.SoftLink("/errors")
    case("soft_link.h5", "/errors_copy", soft_group)
    for p, ds in cases:
        name = os.path.basename(p)
        r = sh([a.shardinfer, "show", p])
        refused(r, f"show {name}", name, ds)
        check("7.250" not in r.out and "8.500" not in r.out,
              f"show {name}: nothing read from another file")
        out = W(a, "datasets_merged.h5")
        refused(merge(a, out, p, R(a, "b3.h5")), f"merge {name}", name, ds)
        check(not os.path.exists(out), f"merge {name}: no output left")


def partial(a):
    res = W(a, "unfinished.h5")
    for f in glob.glob(res + "*"):
        os.remove(f)
    r = run(a, os.path.join(a.dir, "sets", "b3.h5"), res,
            extra_env={"SI_TEST_KILL_AT": "finish:begin"})
    if not check(os.path.exists(res + ".partial") and not os.path.exists(res),
                 f"a run killed at its final step leaves {os.path.basename(res)}.partial ({r})"):
        return
    renamed = W(a, "renamed_partial.h5")
    shutil.copy(res + ".partial", renamed)
    for what, part in (("RESULT.h5.partial", res + ".partial"),
                       ("RESULT.h5 with only its .partial there", res),
                       ("a partial file renamed", renamed)):
        out = W(a, "partial_merged.h5")
        r = merge(a, out, R(a, "a20.h5"), part)
        refused(r, f"merge of {what}", os.path.basename(part), "--resume")
        check("finish" in r.err, f"merge of {what}: says to finish the run")
        if part != res:
            refused(sh([a.shardinfer, "show", part]), f"show {what}", os.path.basename(part),
                    "--resume")


def leftovers(out):
    return [p for p in glob.glob(out + ".tmp*") if not p.endswith(".tmp")]


def output(a):
    d = os.path.dirname(W(a, "output", "x"))
    out = os.path.join(d, "merged.h5")
    other = out + ".tmp"  # what another merge (or the version before) made there
    with open(other, "wb") as f:
        f.write(b"another merge's temporary")
    r = merge(a, out, R(a, "a20.h5"), os.path.join(d, "missing.h5"))
    check(r.rc == 1 and os.path.exists(other),
          f"a failed merge leaves another's {os.path.basename(other)} alone ({r})")
    r = merge(a, out, R(a, "a20.h5"), R(a, "b3.h5"))
    succeeded(r, "merge beside another's temporary")
    check(os.path.exists(other) and open(other, "rb").read() == b"another merge's temporary",
          "a merge leaves another's temporary alone")
    check(os.path.exists(out) and rows(out) == 23, "and writes its output")
    # the temporary's name as a symlink to a file of the user's: never followed
    victim = os.path.join(d, "victim.txt")
    with open(victim, "w") as f:
        f.write("precious")
    if os.path.lexists(other):
        os.remove(other)
    os.symlink(victim, other)
    r = merge(a, out, R(a, "a20.h5"), R(a, "b3.h5"))
    succeeded(r, "merge beside a symlink named like a temporary")
    check(open(victim, "rb").read() == b"precious", "a symlink beside the output is never followed")
    if os.path.lexists(other):
        os.remove(other)
    check(leftovers(out) == [], f"no temporary left: {leftovers(out)}")
    # the output is one of the parts (by its name, or through a symlink)
    part = os.path.join(d, "part_a20.h5")
    shutil.copy(R(a, "a20.h5"), part)
    before = sha(part)
    r = merge(a, part, part, R(a, "b3.h5"))
    refused(r, "--output a part", "part_a20.h5", "same file")
    link = os.path.join(d, "link_to_part.h5")
    if not os.path.lexists(link):
        os.symlink(part, link)
    r = merge(a, link, part, R(a, "b3.h5"))
    refused(r, "--output a symlink to a part", "link_to_part.h5", "part_a20.h5")
    check(sha(part) == before and os.path.islink(link), "the part is unchanged")
    # two merges to one output at once: both finish, the output is whole, nothing left behind
    cmd = [a.shardinfer, "merge", "--output", out, "--overwrite", R(a, "a20.h5"), R(a, "b3.h5")]
    ps = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env())
          for _ in range(2)]
    rcs = [p.wait(timeout=TIMEOUT) for p in ps]
    check(rcs == [0, 0] and rows(out) == 23 and leftovers(out) == [],
          f"two merges to one output at once: {rcs}, left {leftovers(out)}")


def big_part(a, path, n, tag):
    """A classify result of n images, as a run writes it (its attributes those of a20)."""
    rng = np.random.default_rng(len(tag))
    with h5py.File(R(a, "a20.h5"), "r") as g, h5py.File(path, "w") as f:
        for k, v in g.attrs.items():
            f.attrs[k] = v
        f.attrs["images"] = np.uint64(n)
        f.attrs["failed"] = np.uint64(0)
        retarget(f, tag)
        f.create_dataset("ids", data=np.array([f"{tag}_{i:08d}.jpg" for i in range(n)],
                                              dtype=object), dtype=h5py.string_dtype())
        f["index"] = np.arange(n, dtype=np.uint64)
        f["status"] = np.zeros(n, dtype=np.int32)
        f["topk_class"] = rng.integers(0, 10, (n, 5), dtype=np.int32)
        f["topk_prob"] = rng.random((n, 5), dtype=np.float32)
        f["errors/index"] = np.zeros(0, dtype=np.uint64)
        f.create_dataset("errors/message", shape=(0,), dtype=h5py.string_dtype())


def interrupt(a):
    d = os.path.dirname(W(a, "interrupt", "x"))
    parts = [os.path.join(d, f"big{k}.h5") for k in range(2)]
    for k, p in enumerate(parts):  # about a second of merging, 50 MB each
        big_part(a, p, 500_000, f"big{k}")
    for sig in (signal.SIGINT, signal.SIGTERM):
        out = os.path.join(d, f"merged_{sig.name}.h5")
        for f in glob.glob(out + "*"):
            os.remove(f)
        cmd = [a.shardinfer, "merge", "--output", out, *parts]
        print("$", " ".join(cmd), f"(then {sig.name})", flush=True)
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env())
        t0 = time.time()
        while not glob.glob(out + ".tmp*") and p.poll() is None and time.time() - t0 < TIMEOUT:
            time.sleep(0.002)
        writing = bool(glob.glob(out + ".tmp*"))
        time.sleep(0.02)
        if not check(writing and p.poll() is None,
                     f"{sig.name}: the merge runs, its temporary made ({time.time() - t0:.1f} s)"):
            p.kill()
            p.communicate()
            continue
        p.send_signal(sig)
        try:
            _, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            check(False, f"{sig.name}: the merge did not stop within 60 s")
            continue
        left = glob.glob(out + "*")
        check(p.returncode == 6 and left == [],
              f"{sig.name}: exit 6 with nothing left behind: rc {p.returncode}, left {left}, "
              f"{err.strip()[-300:]}")
    for p in parts:
        os.remove(p)


def show_inputs(a):
    d = os.path.dirname(W(a, "show", "x"))
    res = R(a, "a20.h5")
    fifo = os.path.join(d, "fifo")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    for what, lab, names in (("a FIFO", fifo, ("fifo",)), ("/dev/zero", "/dev/zero", ("zero",))):
        r = sh([a.shardinfer, "show", res, "--labels", lab], timeout=20)
        refused(r, f"show --labels {what}", *names)
    long_line = os.path.join(d, "long_line.txt")
    with open(long_line, "w") as f:
        f.write("cat\n" + "x" * 10000 + "\ndog\n")
    refused(sh([a.shardinfer, "show", res, "--labels", long_line]),
            "show --labels with a 10,000-byte line", "long_line.txt")
    refused(sh([a.shardinfer, "show", fifo], timeout=20), "show of a FIFO", "fifo",
            "regular file")
    good = os.path.join(d, "labels.txt")
    with open(good, "w") as f:
        f.write("".join(f"class_{i}\n" for i in range(10)))
    r = sh([a.shardinfer, "show", res, "--labels", good, "--limit", "3"])
    check(r.rc == 0 and "class_" in r.out and len(r.out.splitlines()) == 4,
          f"show --labels of a good file names the classes ({r})")


def escaped_ids(a):
    p0 = crafted(a, R(a, "a20.h5"), "escaped0.h5")
    p1 = crafted(a, R(a, "b3.h5"), "escaped1.h5")
    for p, rows_ in ((p0, [3]), (p1, [0, 2])):
        with h5py.File(p, "a") as f:
            f["ids_escaped"] = np.array(rows_, dtype=np.uint64)
    out = W(a, "escaped_merged.h5")
    if succeeded(merge(a, out, p0, p1), "merge of parts with /ids_escaped"):
        with h5py.File(out, "r") as f:
            got = [int(x) for x in f["ids_escaped"][:]]
        check(got == [3, 20, 22], f"/ids_escaped shifted: {got}")
    out = W(a, "escaped_merged_one.h5")
    if succeeded(merge(a, out, R(a, "a20.h5"), p1), "merge where one part has /ids_escaped"):
        with h5py.File(out, "r") as f:
            got = [int(x) for x in f["ids_escaped"][:]] if "ids_escaped" in f else None
        check(got == [20, 22], f"its /ids_escaped kept, the rows shifted: {got}")


def many_datasets(a):
    p = crafted(a, R(a, "a20.h5"), "many.h5")
    q = crafted(a, R(a, "b3.h5"), "many_b.h5")
    long_name = "extra/" + "n" * 200
    for path, n in ((p, 20), (q, 3)):
        with h5py.File(path, "a") as f:
            for k in range(70):
                f[f"extra/d{k:02d}"] = np.full(n, k, dtype=np.float32)
            f[long_name] = np.arange(n, dtype=np.float64)
    out = W(a, "many_merged.h5")
    if succeeded(merge(a, out, p, q), "merge of parts with 72 more datasets"):
        got = read_all(out)
        ok = all(f"extra/d{k:02d}" in got and np.all(got[f"extra/d{k:02d}"] == k) and
                 len(got[f"extra/d{k:02d}"]) == 23 for k in range(70))
        check(ok, "all 70 extra datasets merged")
        check(long_name in got and np.array_equal(got[long_name],
                                                  np.r_[np.arange(20), np.arange(3)]),
              "the dataset with a 200-character name merged")


def batch(a):
    out = W(a, "aligned.h5")
    r = merge(a, out, R(a, "a20.h5"), R(a, "b3.h5"))
    if succeeded(r, "merge of parts of 20 and 3 images (batch 4)"):
        check("batch" not in r.err, f"no warning when every part but the last is whole batches")
        check(same_data(read_all(out), read_all(R(a, "list_ab.h5"))),
              "== one run over both files, bit for bit")
    out = W(a, "unaligned.h5")
    r = merge(a, out, R(a, "c21.h5"), R(a, "d2.h5"))
    if succeeded(r, "merge of parts of 21 and 2 images (batch 4)"):
        warns = [l for l in r.err.splitlines() if "warning" in l and "batch" in l]
        check(len(warns) == 1 and "c21.h5" in warns[0],
              f"one warning naming the part that is not whole batches: {warns}")
        got, one = read_all(out), read_all(R(a, "list_cd.h5"))
        check(np.array_equal(got["status"], one["status"]) and
              list(got["ids"]) == list(one["ids"]), "the same statuses and ids as one run")
        ok = got["status"] == 0
        check(np.allclose(got["topk_prob"][ok], one["topk_prob"][ok], rtol=1e-5, atol=1e-6),
              "the values within float rounding of one run's")


CASES = {"prepare": prepare, "overlap": overlap, "attributes": attributes, "ranks": ranks,
         "datasets": datasets, "partial": partial, "output": output, "interrupt": interrupt,
         "show-inputs": show_inputs, "escaped-ids": escaped_ids, "many-datasets": many_datasets,
         "batch": batch}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardinfer", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("case", nargs="+", choices=list(CASES) + ["all"])
    a = ap.parse_args()
    a.shardinfer = os.path.abspath(a.shardinfer)
    a.dir = os.path.abspath(a.dir)
    global ASAN
    ASAN = b"__asan_init" in open(a.shardinfer, "rb").read()
    names = [c for c in CASES if c != "prepare"] if a.case == ["all"] else a.case
    for c in names:
        print(f"--- {c}", flush=True)
        CASES[c](a)
    if failures:
        print(f"\n{len(failures)} FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print(f"OK: {' '.join(names)}")


if __name__ == "__main__":
    main()
