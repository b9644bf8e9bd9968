#!/usr/bin/env python3
"""`shardinfer pack` against hostile trees, lists and operator mistakes: each case builds its
input in a fresh directory, runs the binary as a user would (every run with a timeout, so a hang
is a failure, and a file-size limit, so a pack that reads without end fails instead of filling
the disk) and checks the exit code, the one error line, and that no output or temporary is
left where none should be.

  link-out        a directory with a symlink to / and one to a file outside: refused, named
  follow-links    --follow-links packs the outside file; links inside the tree are followed
  dir-cycle       directories linking to each other and to an ancestor: packed once, no loop
  fifo-list       a FIFO named in a list file: refused at once, no hang
  fifo-dir        a FIFO named x.jpg in a directory: refused, named
  device          /dev/zero in a list: refused at once, nothing read
  max-file-bytes  a file over --max-file-bytes, and a 300 MiB one over the default: refused
  same-file       the output is the list file, or one of the images: refused, both left intact
  planted-link    a symlink planted where the old fixed temporary name was: never written through
  concurrent      two packs to one output: neither deletes the other's temporary; one wins
  signal          SIGINT and SIGTERM mid-pack: exit 6, temporary removed, no output

Usage: hostile_pack.py --shardinfer BIN --work DIR [CASE ...]   (no CASE: all of them)
"""
import argparse
import glob
import os
import resource
import shutil
import signal
import subprocess
import sys
import time

TIMEOUT = 30
FSIZE = 64 << 20  # no case packs more; a pack that reads /dev/zero dies of SIGXFSZ here

BIN = None
WORK = None


def limits():
    resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE, FSIZE))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def pack(*args, timeout=TIMEOUT):
    """Runs `shardinfer pack ARGS`; returns (rc, stderr lines). A hang is rc 'timeout'."""
    try:
        p = subprocess.run([BIN, "pack", *args], capture_output=True, text=True,
                           errors="backslashreplace", timeout=timeout, preexec_fn=limits)
    except subprocess.TimeoutExpired:
        return "timeout", [f"(no answer after {timeout} s)"]
    return p.returncode, [l for l in p.stderr.splitlines() if l.strip()]


def fresh(name):
    d = os.path.join(WORK, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def jpeg(path, n=1000, seed=1):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"\xff\xd8" + bytes((seed * 7 + i) % 251 for i in range(n - 2)))


def leftovers(out):
    return sorted(set(glob.glob(out + "*.tmp") + glob.glob(out + ".tmp")))


def refused(rc, lines, out, *words):
    """'' if the run failed with exit 1, one error line holding every word, and left nothing."""
    if rc != 1:
        return f"exit {rc}, expected 1: {lines}"
    if len(lines) != 1 or not all(w in lines[0] for w in words):
        return f"expected one line with {words}: {lines}"
    if os.path.lexists(out) or leftovers(out):
        return f"left {[out] if os.path.lexists(out) else []} {leftovers(out)}"
    return ""


def read_set(out):
    import h5py
    with h5py.File(out, "r") as f:
        ids = [s.decode() if isinstance(s, bytes) else s for s in f["/images/ids"][:]]
        off = f["/images/offsets"][:]
        data = f["/images/data"][:]
    return {i: data[off[k]:off[k + 1]].tobytes() for k, i in enumerate(ids)}


def case_link_out():
    d = fresh("link_out")
    jpeg(f"{d}/tree/a.jpg")
    os.symlink("/", f"{d}/tree/root")
    out = f"{d}/o1.h5"
    rc, lines = pack(f"{d}/tree", "--output", out)
    why = refused(rc, lines, out, "tree/root", "outside")
    if why:
        return "link to /: " + why
    jpeg(f"{d}/outside/secret.jpg", seed=9)
    os.chmod(f"{d}/outside/secret.jpg", 0o600)
    os.makedirs(f"{d}/tree2")
    jpeg(f"{d}/tree2/a.jpg")
    os.symlink("../outside/secret.jpg", f"{d}/tree2/secret.jpg")
    out = f"{d}/o2.h5"
    rc, lines = pack(f"{d}/tree2", "--output", out)
    why = refused(rc, lines, out, "tree2/secret.jpg", "outside")
    return "link to a file outside: " + why if why else ""


def case_follow_links():
    d = fresh("follow_links")
    jpeg(f"{d}/outside/secret.jpg", seed=9)
    jpeg(f"{d}/tree/a.jpg", seed=1)
    jpeg(f"{d}/tree/sub/b.jpg", seed=2)
    os.symlink("../outside/secret.jpg", f"{d}/tree/secret.jpg")
    os.symlink("sub/b.jpg", f"{d}/tree/c.jpg")  # inside: followed without the option
    os.symlink("sub", f"{d}/tree/sublink")
    out = f"{d}/o.h5"
    rc, lines = pack(f"{d}/tree", "--output", out, "--follow-links")
    if rc != 0:
        return f"--follow-links: exit {rc}: {lines}"
    got = read_set(out)
    want = {k: open(f"{d}/{p}", "rb").read() for k, p in
            [("a.jpg", "tree/a.jpg"), ("c.jpg", "tree/sub/b.jpg"),
             ("secret.jpg", "outside/secret.jpg"), ("sub/b.jpg", "tree/sub/b.jpg"),
             ("sublink/b.jpg", "tree/sub/b.jpg")]}
    if got != want:
        return f"--follow-links packed {sorted(got)}, expected {sorted(want)} with their bytes"
    os.unlink(f"{d}/tree/secret.jpg")
    out = f"{d}/o2.h5"
    rc, lines = pack(f"{d}/tree", "--output", out)
    if rc != 0 or sorted(read_set(out)) != ["a.jpg", "c.jpg", "sub/b.jpg", "sublink/b.jpg"]:
        return f"links inside the tree: exit {rc}: {lines}"
    return ""


def case_dir_cycle():
    d = fresh("dir_cycle")
    jpeg(f"{d}/tree/x/1.jpg")
    jpeg(f"{d}/tree/y/2.jpg")
    os.symlink("../y", f"{d}/tree/x/toy")
    os.symlink("../x", f"{d}/tree/y/tox")
    os.symlink("..", f"{d}/tree/x/up")
    for extra in ([], ["--follow-links"]):
        out = f"{d}/o{len(extra)}.h5"
        rc, lines = pack(f"{d}/tree", "--output", out, *extra)
        if rc != 0:
            return f"{extra}: exit {rc}: {lines}"
        ids = sorted(read_set(out))
        if ids != ["x/1.jpg", "x/toy/2.jpg", "y/2.jpg", "y/tox/1.jpg"]:
            return f"{extra}: packed {ids}"
    return ""


def case_fifo_list():
    d = fresh("fifo_list")
    os.mkfifo(f"{d}/fifo.jpg")
    jpeg(f"{d}/a.jpg")
    with open(f"{d}/list.txt", "w") as f:
        f.write("a.jpg\nfifo.jpg\n")
    out = f"{d}/o.h5"
    rc, lines = pack(f"{d}/list.txt", "--output", out, timeout=15)
    why = refused(rc, lines, out, "list.txt:2", "fifo.jpg", "FIFO")
    if why:
        return why
    # a symlink named in a list is followed, but to a regular file only
    os.symlink("fifo.jpg", f"{d}/link.jpg")
    with open(f"{d}/list2.txt", "w") as f:
        f.write("link.jpg\n")
    rc, lines = pack(f"{d}/list2.txt", "--output", out, timeout=15)
    return refused(rc, lines, out, "link.jpg", "FIFO")


def case_fifo_dir():
    d = fresh("fifo_dir")
    jpeg(f"{d}/tree/a.jpg")
    os.mkfifo(f"{d}/tree/b.jpg")
    out = f"{d}/o.h5"
    rc, lines = pack(f"{d}/tree", "--output", out, timeout=15)
    return refused(rc, lines, out, "tree/b.jpg", "FIFO")


def case_device():
    d = fresh("device")
    with open(f"{d}/list.txt", "w") as f:
        f.write("/dev/zero\n")
    out = f"{d}/o.h5"
    rc, lines = pack(f"{d}/list.txt", "--output", out, timeout=15)
    return refused(rc, lines, out, "/dev/zero", "character device")


def case_max_file_bytes():
    d = fresh("max_file_bytes")
    jpeg(f"{d}/tree/a.jpg", 1000)
    jpeg(f"{d}/tree/b.jpg", 2000)
    out = f"{d}/o.h5"
    rc, lines = pack(f"{d}/tree", "--output", out, "--max-file-bytes", "1000")
    why = refused(rc, lines, out, "tree/b.jpg", "--max-file-bytes")
    if why:
        return "--max-file-bytes 1000: " + why
    rc, lines = pack(f"{d}/tree", "--output", out, "--max-file-bytes", "2000")
    if rc != 0:
        return f"--max-file-bytes 2000 (both fit): exit {rc}: {lines}"
    os.unlink(out)
    with open(f"{d}/tree/big.jpg", "wb") as f:  # sparse: no disk used
        f.write(b"\xff\xd8")
        f.truncate(300 << 20)
    rc, lines = pack(f"{d}/tree", "--output", out)
    why = refused(rc, lines, out, "tree/big.jpg", "268435456")
    return "300 MiB under the default cap: " + why if why else ""


def case_same_file():
    d = fresh("same_file")
    jpeg(f"{d}/tree/a.jpg", seed=3)
    with open(f"{d}/list.txt", "w") as f:
        f.write("tree/a.jpg\n")
    before_list = open(f"{d}/list.txt", "rb").read()
    before_jpg = open(f"{d}/tree/a.jpg", "rb").read()
    problems = []
    for src, out in ((f"{d}/list.txt", f"{d}/list.txt"), (f"{d}/tree", f"{d}/tree/a.jpg"),
                     (f"{d}/list.txt", f"{d}/tree/a.jpg")):
        rc, lines = pack(src, "--output", out, "--overwrite")
        if rc != 1 or len(lines) != 1 or leftovers(out):
            problems.append(f"{os.path.basename(src)} -> {os.path.basename(out)}: exit {rc} "
                            f"{lines} {leftovers(out)}")
    if open(f"{d}/list.txt", "rb").read() != before_list:
        problems.append("the list file was overwritten")
    if open(f"{d}/tree/a.jpg", "rb").read() != before_jpg:
        problems.append("the image was overwritten")
    return "; ".join(problems)


def case_planted_link():
    d = fresh("planted_link")
    jpeg(f"{d}/tree/a.jpg")
    with open(f"{d}/victim", "wb") as f:
        f.write(b"precious")
    out = f"{d}/o.h5"
    os.symlink(f"{d}/victim", out + ".tmp")
    rc, lines = pack(f"{d}/tree", "--output", out)
    if open(f"{d}/victim", "rb").read() != b"precious":
        return "the file behind the planted link was overwritten"
    if rc != 0 or os.path.islink(out) or not os.path.islink(out + ".tmp"):
        return f"exit {rc} {lines}; output a link: {os.path.islink(out)}"
    return ""


def big_list(d, n=30000):
    """A list slow enough to pack (many small records) that a test can catch it mid-way."""
    jpeg(f"{d}/img/a.jpg", 500)
    with open(f"{d}/list.txt", "w") as f:
        for i in range(n):
            f.write(f"img/a.jpg\tid{i}\n")
    return f"{d}/list.txt"


def start_caught(args, out, env=None):
    """Starts `pack ARGS` and stops it (SIGSTOP) once its temporary exists; returns the Popen and
    the temporaries seen, or (p, None) if it finished first."""
    p = subprocess.Popen([BIN, "pack", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, preexec_fn=limits, env=env)
    t0 = time.time()
    while time.time() - t0 < TIMEOUT:
        os.kill(p.pid, signal.SIGSTOP)
        tmps = leftovers(out)
        if tmps:
            return p, tmps
        if p.poll() is not None:
            return p, None
        os.kill(p.pid, signal.SIGCONT)
        time.sleep(0.002)
    return p, None


def finish(p):
    try:
        err = p.communicate(timeout=TIMEOUT)[1]
        return p.returncode, [l for l in err.splitlines() if l.strip()]
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return "timeout", []


def case_concurrent():
    d = fresh("concurrent")
    lst = big_list(d)
    out = f"{d}/o.h5"
    a, tmps = start_caught([lst, "--output", out], out)
    if tmps is None:
        finish(a)
        return "the first pack could not be caught with its temporary on disk"
    try:
        rc_b, lines_b = pack(lst, "--output", out)
        kept = [t for t in tmps if os.path.exists(t)]
    finally:
        os.kill(a.pid, signal.SIGCONT)
    rc_a, lines_a = finish(a)
    problems = []
    if kept != tmps:
        problems.append(f"the second pack (exit {rc_b}, {lines_b}) deleted the first's "
                        f"temporary {tmps}")
    # exactly one of them made the output, and it is complete
    if sorted([rc_a, rc_b]) != [0, 1]:
        problems.append(f"exits {rc_a} {lines_a} and {rc_b} {lines_b}, expected one 0, one 1")
    elif not os.path.exists(out) or len(read_set(out)) != 30000:
        problems.append("the output is missing or incomplete")
    if leftovers(out):
        problems.append(f"left {leftovers(out)}")
    return "; ".join(problems)


def case_signal():
    problems = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        d = fresh(f"signal_{sig.name}")
        lst = big_list(d)
        out = f"{d}/o.h5"
        p, tmps = start_caught([lst, "--output", out], out)
        if tmps is None:
            finish(p)
            problems.append(f"{sig.name}: the pack could not be caught mid-way")
            continue
        os.kill(p.pid, sig)
        os.kill(p.pid, signal.SIGCONT)
        rc, lines = finish(p)
        if rc != 6 or not lines or "interrupted" not in lines[-1]:
            problems.append(f"{sig.name}: exit {rc}, expected 6 and a message: {lines}")
        if os.path.exists(out) or leftovers(out):
            problems.append(f"{sig.name}: left {leftovers(out)} {os.path.exists(out)}")
    return "; ".join(problems)


CASES = {
    "link-out": case_link_out,
    "follow-links": case_follow_links,
    "dir-cycle": case_dir_cycle,
    "fifo-list": case_fifo_list,
    "fifo-dir": case_fifo_dir,
    "device": case_device,
    "max-file-bytes": case_max_file_bytes,
    "same-file": case_same_file,
    "planted-link": case_planted_link,
    "concurrent": case_concurrent,
    "signal": case_signal,
}


def main():
    global BIN, WORK
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardinfer", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("cases", nargs="*")
    a = ap.parse_args()
    unknown = [c for c in a.cases if c not in CASES]
    if unknown:
        ap.error(f"unknown cases {unknown}; known: {' '.join(CASES)}")
    BIN, WORK = os.path.abspath(a.shardinfer), os.path.abspath(a.work)
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    failed = []
    for name in a.cases or CASES:
        t = time.time()
        why = CASES[name]()
        verdict = f"FAIL {name}: {why}" if why else f"ok   {name}"
        print(f"{verdict} ({time.time() - t:.1f} s)", flush=True)
        if why:
            failed.append(name)
    shutil.rmtree(WORK, ignore_errors=True)  # a sparse 300 MiB file and such: not kept
    if failed:
        sys.exit(f"FAIL: {len(failed)} of {len(a.cases or CASES)} cases: {' '.join(failed)}")
    print("hostile pack: OK")


if __name__ == "__main__":
    main()
