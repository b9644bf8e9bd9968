#!/usr/bin/env python3
"""Faults that must not lose or corrupt a result (issue 15), under mpirun with CPU ranks: a disk
that fills under either writer or during the final step, the final step cut short at each of its
instants, and a seeded chaos run that interrupts the same job many times at random instants and
resumes it, possibly on another rank count, until it is done. Every final file must equal an
uninterrupted run's bit for bit (cluster.py's same_files: every dataset, every attribute but the
run's own: command line, time, rank count, number of runs).

Full disks are real: a small tmpfs mounted over the output directory, remounted larger before
the resume. That needs root (CI runs as root); elsewhere those parts are skipped (exit 77) with
the reason. Exact instants of the final step come from SI_TEST_KILL_AT=POINT (src/base/common.h),
which makes rank 0 SIGKILL itself there.

Usage: faults.py --shardinfer BIN --dir CLUSTER_DIR --e2e-dir E2E SUBCOMMAND [--runs N --seed S]
  disk-full   the disk fills mid-run with --writer parallel (each rank's MPI-IO writes) and with
              --writer gather (rank 0's HDF5 writes), and during the final step: each run fails
              naming the file and the error, never exits 0 with lost rows and never crashes;
              --resume after room is made gives the uninterrupted file
  final-step  rank 0 killed at each instant of the final step, and the final rename failing:
              --resume (on another rank count) gives the uninterrupted file; --resume of a
              finished result says so and exits 0
  storage     the input truncated, and replaced by another file, while a run reads it, and memory
              running out while an image is read: the run stops naming the file and the fault,
              no image gets a status for it, and --resume (the file restored, or the memory
              there) gives the uninterrupted file
  chaos       N seeded jobs, each interrupted one to three times (SIGTERM or SIGKILL, to one rank
              or all, at a random instant of the run or of its final step, or a full disk), then
              resumed until done; reports the interruptions and instants covered
"""

import argparse
import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster  # noqa: E402  (the sets, mpirun's environment, file comparison)
from cluster import fail, same_files  # noqa: E402

SKIP = 77
FINISH_POINTS = ["finish:begin", "finish:undo", "finish:lists", "finish:records", "finish:ids",
                 "finish:closed", "finish:renamed"]


def job(a, np_, out, n, model, *extra):
    """The job every part runs: --post raw of the 12 KB-per-image pixels model (or classify with
    the tiny one), small batches and chunks so that there are many chunks to lose."""
    cmd = ["mpirun", "-np", str(np_), a.shardinfer, "run", "--model", model, "--input",
           os.path.join(a.dir, f"set{n}.h5"), "--output", out, "--batch", "4", "--chunk", "8",
           "--quiet", *extra]
    if model.endswith("pixels.onnx"):
        cmd += ["--post", "raw"]
    return cmd


def run(cmd, env=None, timeout=300):
    e = dict(cluster.mpi_env(), **(env or {}))
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="backslashreplace",
                           timeout=timeout, env=e)
    except subprocess.TimeoutExpired:
        fail(f"timed out after {timeout} s (a hang): {' '.join(cmd)}")
    return p


def lines(text, keep=6):
    """shardinfer's own lines but its per-image warnings, for the log."""
    ls = [x for x in text.splitlines() if x.startswith("shardinfer") and "warning: image" not in x]
    return "\n".join(ls[-keep:])


def clean(out):
    for s in ("", ".partial", ".journal", ".undo", ".undo.tmp", ".lock"):
        if os.path.lexists(out + s):
            if os.path.isdir(out + s):
                os.rmdir(out + s)
            else:
                os.remove(out + s)


def reference(a, n, model, name, *extra):
    ref = os.path.join(a.dir, f"faults_ref_{name}{''.join(extra)}.h5")
    if not os.path.exists(ref):
        p = run(job(a, 2, ref, n, model, "--overwrite", *extra))
        if p.returncode != 0:
            fail(f"the reference run failed: {lines(p.stderr)}")
    return ref


def resume_until_done(a, out, n, model, *extra, rng=None):
    """--resume, which must finish: nothing interrupts it."""
    np_ = rng.choice((1, 2, 3)) if rng else 2
    p = run(job(a, np_, out, n, model, "--resume", *extra))
    if p.returncode != 0:
        fail(f"--resume on {np_} ranks exited {p.returncode}: {lines(p.stderr)}")
    for s in (".partial", ".journal", ".undo"):
        if os.path.exists(out + s):
            fail(f"{out + s} left behind by a finished run")
    return np_


class Tmpfs:
    """A tmpfs over DIR whose size can change between runs (root only)."""

    def __init__(self, path):
        self.path = path
        os.makedirs(path, exist_ok=True)
        self.mounted = False

    def mount(self, size):
        if os.geteuid() != 0:
            return "not root"
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", self.path],
                           capture_output=True, text=True)
        self.mounted = p.returncode == 0
        return None if self.mounted else (p.stderr.strip() or f"mount exited {p.returncode}")

    def resize(self, size):
        subprocess.run(["mount", "-o", f"remount,size={size}", self.path], check=True)

    def umount(self):
        if self.mounted:
            subprocess.run(["umount", "-l", self.path])
            self.mounted = False


def with_tmpfs(a, fn):
    fs = Tmpfs(os.path.join(a.dir, "faults_mnt"))
    why = fs.mount("64m")
    if why:
        print(f"SKIP: cannot mount a tmpfs for the full-disk cases ({why}); run as root")
        sys.exit(SKIP)
    try:
        fn(fs)
    finally:
        fs.umount()


def disk_full(a):
    pixels = os.path.join(a.dir, "pixels.onnx")
    tiny = os.path.join(a.e2e_dir, "tiny.onnx")

    def cases(fs):
        out = os.path.join(fs.path, "full.h5")
        # 2,000 rows of 12 KB: 24 MB of rows on a 6 MB disk, under either writer
        ref = reference(a, 2000, pixels, "pixels2000")
        for writer in ("parallel", "gather"):
            clean(out)
            fs.resize("6m")
            p = run(job(a, 2, out, 2000, pixels, "--writer", writer, "--flush-interval", "0.2"))
            print(f"--writer {writer}, disk full: exit {p.returncode}\n{lines(p.stderr)}")
            if p.returncode in (0, 6) or p.returncode < 0 or p.returncode >= 128:
                fail(f"--writer {writer}: a full disk must fail the run (exit 1), got "
                     f"{p.returncode}")
            if "No space left on device" not in p.stderr and "disk full" not in p.stderr:
                fail(f"--writer {writer}: the message does not name the full disk")
            if ".partial" not in p.stderr:
                fail(f"--writer {writer}: the message does not name the file")
            if "--resume" not in p.stderr:
                fail(f"--writer {writer}: the message does not say how to go on")
            fs.resize("64m")
            resume_until_done(a, out, 2000, pixels)
            same_files(ref, out)
        # the final step on a full disk: 20,000 small rows fit, their ids do not
        big = ("--chunk", "64", "--batch", "16")
        ref = reference(a, 20000, tiny, "tiny20000", *big)
        clean(out)
        fs.resize("1200k")
        p = run(job(a, 1, out, 20000, tiny, *big))
        print(f"final step, disk full: exit {p.returncode}\n{lines(p.stderr)}")
        if p.returncode != 1:
            fail(f"a full disk in the final step must fail the run with exit 1 (no crash), got "
                 f"{p.returncode}")
        if "the final step failed" not in p.stderr or "--resume" not in p.stderr:
            fail("the final step's failure does not say that the results are kept and how to go on")
        fs.resize("64m")
        resume_until_done(a, out, 20000, tiny, *big)
        same_files(ref, out)
        print("disk-full: OK: both writers and the final step fail naming the file, and --resume "
              "gives the uninterrupted file")

    with_tmpfs(a, cases)


def final_step(a):
    tiny = os.path.join(a.e2e_dir, "tiny.onnx")
    ref = reference(a, 2000, tiny, "tiny2000")
    out = os.path.join(a.dir, "faults_final.h5")
    for k, point in enumerate(FINISH_POINTS):
        clean(out)
        p = run(job(a, 2, out, 2000, tiny), env={"SI_TEST_KILL_AT": point})
        if p.returncode == 0:
            fail(f"SI_TEST_KILL_AT={point}: the run was not killed")
        left = [s for s in ("", ".partial", ".journal", ".undo") if os.path.exists(out + s)]
        np_ = 1 + k % 3
        p = run(job(a, np_, out, 2000, tiny, "--resume"))
        if p.returncode != 0:
            fail(f"killed at {point}, --resume on {np_} ranks exited {p.returncode}: "
                 f"{lines(p.stderr)}")
        print(f"killed at {point} (left {', '.join('PATH' + s for s in left)}): --resume on "
              f"{np_} rank(s) finished")
        same_files(ref, out)
    # the final rename fails: the output's name is taken by a directory while the job runs
    clean(out)
    cmd = job(a, 2, out, 2000, tiny, "--test-slow-rank", "0:5")
    pr = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          errors="backslashreplace", env=cluster.mpi_env())
    t0 = time.time()
    while not os.path.exists(out + ".journal") and time.time() - t0 < 60:
        time.sleep(0.02)
    os.mkdir(out)
    so, se = pr.communicate(timeout=300)
    print(f"the rename fails: exit {pr.returncode}\n{lines(se)}")
    if pr.returncode != 1 or "cannot rename" not in se:
        fail(f"a failed rename must fail the run naming it (exit 1), got {pr.returncode}")
    os.rmdir(out)
    resume_until_done(a, out, 2000, tiny)
    same_files(ref, out)
    p = run(job(a, 3, out, 2000, tiny, "--resume"))
    if p.returncode != 0 or "complete already" not in p.stderr + p.stdout:
        p2 = run(job(a, 3, out, 2000, tiny, "--resume"))  # --quiet hides the info line
        if p2.returncode != 0:
            fail(f"--resume of a finished result must exit 0, got {p2.returncode}")
    print("final-step: OK: killed at each of its instants, or with a failed rename, --resume gives "
          "the uninterrupted file")


def storage(a):
    import resource
    import shutil
    import h5py
    import numpy as np
    tiny = os.path.join(a.e2e_dir, "tiny.onnx")
    staged = os.path.join(a.dir, "faults_input.h5")
    keep = os.path.join(a.dir, "faults_input.keep.h5")
    other = os.path.join(a.dir, "faults_input.other.h5")
    shutil.copyfile(os.path.join(a.dir, "set2000.h5"), staged)
    shutil.copyfile(staged, keep)
    with h5py.File(other, "w") as f:  # the same images in another order: another set
        with h5py.File(keep, "r") as g:
            off, data, ids = g["/images/offsets"][:], g["/images/data"][:], g["/images/ids"][:]
        blobs = [data[off[i]:off[i + 1]] for i in range(len(ids))][::-1]
        f["/images/data"] = np.concatenate(blobs)
        lens = np.array([len(b) for b in blobs], dtype=np.uint64)
        f["/images/offsets"] = np.concatenate([[0], np.cumsum(lens)]).astype(np.uint64)
        f.create_dataset("/images/ids", data=list(ids[::-1]), dtype=h5py.string_dtype())

    def cmd(np_, out, *extra):
        c = job(a, np_, out, 2000, tiny, *extra)
        c[c.index("--input") + 1] = staged
        return c
    ref = os.path.join(a.dir, "faults_ref_storage.h5")
    clean(ref)
    p = run(cmd(2, ref))
    if p.returncode != 0:
        fail(f"the reference run failed: {lines(p.stderr)}")
    out = os.path.join(a.dir, "faults_storage.h5")
    for how in ("truncated", "replaced"):
        clean(out)
        shutil.copyfile(keep, staged)
        c = cmd(2, out, "--schedule", "static", "--test-slow-rank", "0:20", "--flush-interval",
                "0.05")
        pr = subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              errors="backslashreplace", env=cluster.mpi_env())
        t0 = time.time()
        while cluster.chunks_journaled(out) < 2000 and time.time() - t0 < 60:
            time.sleep(0.02)
        if how == "truncated":  # a tenth left: HDF5 reads zeros past the end
            os.truncate(staged, os.path.getsize(staged) // 10)
        else:
            os.rename(other, staged)
        so, se = pr.communicate(timeout=300)
        wait_ranks_gone(out)
        print(f"input {how} mid-run: exit {pr.returncode}\n{lines(se)}")
        want = "its size changed" if how == "truncated" else "another file was put in its place"
        if pr.returncode == 0 or "the input changed under the run" not in se or want not in se \
                or staged not in se:
            fail(f"input {how}: the run must stop naming the file and the change ('{want}')")
        if "not_jpeg" in se or "read error" in se:
            fail(f"input {how}: images were charged with the storage's fault")
        if how == "replaced":
            os.rename(staged, other)
        shutil.copyfile(keep, staged)
        p = run(cmd(3, out, "--resume"))
        if p.returncode != 0:
            fail(f"input {how}, restored: --resume exited {p.returncode}: {lines(p.stderr)}")
        same_files(ref, out)
    # memory: a record of 3 GiB (an unallocated chunked dataset: no disk). Over the default
    # record cap (256 MiB) it is not read: that image is too_large, the others scored. With the
    # cap raised past it, under a 2.5 GB address-space limit, the read runs out of memory:
    # the machine's fault, which stops the run (without the limit the record is read, and is
    # an image's not_jpeg)
    huge = os.path.join(a.dir, "faults_huge.h5")
    with h5py.File(keep, "r") as g:
        off, data, ids = g["/images/offsets"][:41], g["/images/data"][:], g["/images/ids"][:40]
    with h5py.File(huge, "w") as f:
        total = int(off[40]) + (3 << 30)
        d = f.create_dataset("/images/data", shape=(total,), dtype=np.uint8, chunks=(1 << 20,))
        d[:off[40]] = data[:off[40]]
        f["/images/offsets"] = np.concatenate([off[:41], [total]]).astype(np.uint64)
        f.create_dataset("/images/ids", data=list(ids) + [b"huge"], dtype=h5py.string_dtype())
    out = os.path.join(a.dir, "faults_huge_out.h5")
    clean(out)
    c = [a.shardinfer, "run", "--model", tiny, "--input", huge, "--output", out, "--batch", "4",
         "--chunk", "8", "--quiet"]
    limit = 2_500_000_000
    p = subprocess.run(c, capture_output=True, text=True, errors="backslashreplace", timeout=300,
                       env=dict(cluster.mpi_env(), OMP_NUM_THREADS="1"))
    print(f"a record declaring 3 GiB, default cap: exit {p.returncode}\n{lines(p.stderr)}")
    if p.returncode != 0:
        fail("a record over the cap must cost only its own image")
    with h5py.File(out, "r") as f:
        st = f["status"][:]
    if st[40] != 5 or (st[:40] == 5).any():
        fail(f"the 3 GiB record must be too_large (5) and only it: {st.tolist()}")
    clean(out)
    c += ["--max-record-bytes", str(4 << 30)]

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    p = subprocess.run(c, capture_output=True, text=True, errors="backslashreplace", timeout=300,
                       env=dict(cluster.mpi_env(), OMP_NUM_THREADS="1"), preexec_fn=cap)
    print(f"out of memory reading a 3 GiB record: exit {p.returncode}\n{lines(p.stderr)}")
    if p.returncode == 0 or "out of memory reading images 40..40" not in p.stderr:
        fail("running out of memory while reading must stop the run, naming it")
    if "read error" in p.stderr:
        fail("the image was charged with the machine's fault")
    for f in (huge, keep, other):
        if os.path.exists(f):
            os.remove(f)
    print("storage: OK: a truncated or replaced input and exhausted memory stop the run naming "
          "them; after the fix --resume gives the uninterrupted file")


def chaos(a):
    rng = random.Random(a.seed)
    pixels = os.path.join(a.dir, "pixels.onnx")
    n = 1000
    ref = reference(a, n, pixels, "pixels1000")
    t = time.time()
    run(job(a, 2, os.path.join(a.dir, "faults_timing.h5"), n, pixels, "--overwrite"))
    t_run = time.time() - t
    print(f"chaos: seed {a.seed}, {a.runs} jobs of {n} images (--post raw, 12 MB of rows), an "
          f"uninterrupted run takes {t_run:.2f} s")
    counts, instants = {}, []

    def jobs(fs):
        out = os.path.join(fs.path, "chaos.h5")
        for j in range(a.runs):
            clean(out)
            first = True
            for _ in range(rng.choice((1, 1, 2, 3))):
                np_ = rng.choice((1, 2, 3))
                extra = ["--writer", rng.choice(("gather", "parallel")), "--flush-interval",
                         str(rng.choice((0.05, 0.2, 1.0))), "--drain-timeout",
                         str(rng.choice((1, 10))), "--schedule", rng.choice(("static", "dynamic"))]
                extra.append("--overwrite" if first else "--resume")
                cmd = job(a, np_, out, n, pixels, *extra)
                kind = rng.choice(("sigterm-all", "sigterm-one", "sigkill-one", "sigkill-all",
                                   "final-step", "disk-full"))
                env = {}
                if kind == "final-step":
                    env["SI_TEST_KILL_AT"] = rng.choice(FINISH_POINTS)
                if kind == "disk-full":  # room for 1 MB to 11 MB more than is there now
                    used = fs_used_mb(fs)
                    fs.resize(f"{used + rng.randint(1, 11)}m")
                p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, errors="backslashreplace",
                                     env=dict(cluster.mpi_env(), **env))
                at = rng.uniform(0.1, 1.1) * t_run
                what = kind
                if kind.startswith("sig"):
                    time.sleep(at)
                    pids = cluster.rank_pids(p.pid)
                    sig = signal.SIGTERM if kind.startswith("sigterm") else signal.SIGKILL
                    targets = list(pids.values()) if kind.endswith("all") else (
                        [pids[rng.choice(sorted(pids))]] if pids else [])
                    for pid in targets:
                        try:
                            os.kill(pid, sig)
                        except ProcessLookupError:
                            pass
                    what = f"{kind} at {at / t_run:.2f} of a run" + ("" if pids else " (done)")
                    instants.append(at / t_run)
                elif kind == "final-step":
                    what = f"killed at {env['SI_TEST_KILL_AT']}"
                try:
                    so, se = p.communicate(timeout=300)
                except subprocess.TimeoutExpired:
                    fail(f"job {j}: {what}: no end within 300 s (a hang); {hang_report(p, out)}")
                wait_ranks_gone(out)
                if kind == "disk-full":
                    what = f"disk of {fs_size(fs)} full" if p.returncode else "disk large enough"
                    fs.resize("64m")
                if p.returncode < 0 or p.returncode in (3, 139):
                    fail(f"job {j}: {what}: crashed (exit {p.returncode}): {lines(se)}")
                counts[kind] = counts.get(kind, 0) + 1
                print(f"job {j}: {'run' if first else 'resume'} on {np_} rank(s) {extra[1]}: "
                      f"{what}: exit {p.returncode}")
                if os.path.exists(out + ".partial") or os.path.exists(out + ".journal"):
                    first = False  # something to resume; else the next run starts afresh
                elif not os.path.exists(out):
                    first = True
            np_ = resume_until_done(a, out, n, pixels, rng=rng) if not os.path.exists(out) or \
                os.path.exists(out + ".partial") else 0
            same_files(ref, out)
            print(f"job {j}: finished{f' by a resume on {np_} rank(s)' if np_ else ''}")

    with_tmpfs(a, jobs)
    instants.sort()
    spread = (f"{instants[0]:.2f}..{instants[-1]:.2f} of a run's time" if instants else "none")
    print(f"chaos: OK: {a.runs} jobs, {sum(counts.values())} interruptions "
          f"({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}), signal instants "
          f"{spread}; every final file == the uninterrupted run's")


def hang_report(p, out):
    """What was still running when a job hung (its ranks under mpirun, each with its state and
    where its main thread waits, any other process holding the output), then mpirun's stderr
    once it is killed: for the log, so that a rare hang can be told apart from mpirun's own."""
    parts = []
    for rank, pid in sorted(cluster.rank_pids(p.pid).items()):
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            with open(f"/proc/{pid}/wchan") as f:
                wchan = f.read().strip() or "-"
        except OSError:
            state, wchan = "gone", "-"
        parts.append(f"rank {rank} pid {pid} state {state} wchan {wchan}")
    parts += [f"pid {pid} still holds the output" for pid in holders(out) if pid != p.pid]
    p.kill()
    _, se = p.communicate()
    said = " | ".join((se or "").strip().splitlines()[-8:]) or "nothing"
    return "; ".join(parts or ["no rank left under mpirun"]) + f"; its stderr's end: {said}"


def holders(out):
    """The live processes (but this one) with the output file in their command line."""
    busy = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != os.getpid():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if out.encode() in f.read() and cluster.alive(int(d)):
                        busy.append(int(d))
            except OSError:
                pass
    return busy


def wait_ranks_gone(out, limit=30):
    """mpirun may return before a killed job's other ranks have exited (they still hold the
    files): wait until no process runs with this output in its command line."""
    t = time.time()
    while True:
        busy = holders(out)
        if not busy:
            return
        if time.time() - t > limit:
            fail(f"processes {busy} still run on {out} {limit} s after the job ended (a hang)")
        time.sleep(0.05)


def fs_used_mb(fs):
    st = os.statvfs(fs.path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize // (1 << 20) + 1


def fs_size(fs):
    st = os.statvfs(fs.path)
    return f"{st.f_blocks * st.f_frsize / 1e6:.0f} MB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardinfer", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--e2e-dir", required=True)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("cmd", choices=["disk-full", "final-step", "storage", "chaos"])
    a = ap.parse_args()
    {"disk-full": disk_full, "final-step": final_step, "storage": storage, "chaos": chaos}[a.cmd](a)


if __name__ == "__main__":
    main()
