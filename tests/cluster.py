#!/usr/bin/env python3
"""Runs that survive real clusters, tested under mpirun with 1-4 CPU ranks: static and dynamic
scheduling give identical files; a deliberately slowed rank makes dynamic finish sooner than
static; SIGTERM (what Slurm sends at the time limit) and SIGUSR1 (its early warning, forwarded by
mpirun) drain cleanly and --resume completes the run into the same file; a rank killed with
SIGKILL ends the job with a message naming it, without a hang, and --resume completes it; every
rank's peak memory stays flat when the set grows tenfold. Every subprocess has a timeout.

Usage: cluster.py --shardinfer BIN --dir WORK --e2e-dir E2E SUBCOMMAND
  prepare        sets of 1,000 / 2,000 / 20,000 JPEGs (the e2e set's 23 files repeated, its
                 corrupt and truncated ones included) and the e2e set's tiny model
  schedules      static == dynamic on 1, 2, 3 and 4 ranks, and equal across rank counts
  slow-rank      3 ranks, rank 1 slowed: wall time of static / dynamic (must be > 1)
  sigterm        SIGTERM to every rank mid-run: exit 6, then --resume == an uninterrupted run
  sigusr1        SIGUSR1 to every rank (Slurm's --signal warning): the same
  kill           SIGKILL of rank 1, then of rank 0, mid-run: the job ends naming the rank;
                 --resume == an uninterrupted run
  memory         peak RSS of every rank for 2,000 and 20,000 images: flat
  merge          a set split into 4 files: the 4 parts' results (a job array's) merged with
                 `shardinfer merge` == one run over the list of the 4 files; also for detections
                 (--detect-model); parts made with other settings are refused
  writers        --writer parallel (MPI-IO by every rank) == --writer gather, on 1 and 3 ranks,
                 also after a kill and --resume; the time of each with 12 KB of raw output
                 per image
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

TIMEOUT = 300
VOLATILE = {"command_line", "elapsed_seconds", "runs", "ranks"}


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import e2e  # noqa: E402  (mpirun's environment for root and oversubscription)


def mpi_env():
    return dict(e2e.mpi_env(), OMP_NUM_THREADS="1")


def fail(msg):
    sys.exit(f"FAIL: {msg}")


def sh(cmd, expect_rc=0, timeout=TIMEOUT):
    print("$", " ".join(cmd), flush=True)
    t = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=mpi_env())
    except subprocess.TimeoutExpired:
        fail(f"timed out after {timeout} s (a rank hangs?): {' '.join(cmd)}")
    p.seconds = time.time() - t
    sys.stdout.write(p.stdout[-3000:])
    sys.stdout.write(p.stderr[-3000:])
    if expect_rc is not None and p.returncode != expect_rc:
        fail(f"exit code {p.returncode}, expected {expect_rc}: {' '.join(cmd)}")
    return p


def run_cmd(a, np_, out, n, *extra):
    return ["mpirun", "-np", str(np_), a.shardinfer, "run", "--model",
            os.path.join(a.e2e_dir, "tiny.onnx"), "--input", os.path.join(a.dir, f"set{n}.h5"),
            "--output", out, "--batch", "4", "--chunk", "8", "--progress", "lines",
            "--progress-interval", "1", *extra]


def read_all(path):
    """Every dataset (path -> array) and root attribute of an HDF5 file."""
    data = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                v = obj[()]
                if obj.dtype.kind == "O":
                    v = np.array([x.decode() if isinstance(x, bytes) else x for x in v.ravel()])
                data[name] = v
        f.visititems(visit)
        attrs = {k: f.attrs[k] for k in f.attrs}
    return data, attrs


def same_datasets(a, b, what):
    """Two read_all() dataset dicts hold the same datasets, bit for bit (NaN equal to NaN)."""
    if sorted(a) != sorted(b):
        fail(f"{what}: different datasets: {sorted(a)} vs {sorted(b)}")
    for k in a:
        x, y = a[k], b[k]
        eq = x.shape == y.shape and (np.array_equal(x, y, equal_nan=True) if x.dtype.kind == "f"
                                     else np.array_equal(x, y))
        if not eq:
            fail(f"{what}: /{k} differs")


def same_files(a_path, b_path, ignore=()):
    a, aa = read_all(a_path)
    b, ba = read_all(b_path)
    same_datasets(a, b, f"{a_path} vs {b_path}")
    for k in sorted(set(aa) | set(ba)):
        if k in VOLATILE or k in ignore:
            continue
        if k not in aa or k not in ba or str(aa[k]) != str(ba[k]):
            fail(f"attribute {k} differs: {aa.get(k)!r} vs {ba.get(k)!r}")
    print(f"same: {os.path.basename(a_path)} == {os.path.basename(b_path)} "
          f"({len(a)} datasets, bit for bit)")


def prepare(a):
    os.makedirs(a.dir, exist_ok=True)
    with h5py.File(os.path.join(a.e2e_dir, "set.h5"), "r") as f:
        off = f["/images/offsets"][:]
        data = f["/images/data"][:]
        ids = [s.decode() if isinstance(s, bytes) else s for s in f["/images/ids"][:]]
    blobs = [data[off[i]:off[i + 1]] for i in range(len(ids))]
    for n in (1000, 2000, 20000):
        pick = [i % len(blobs) for i in range(n)]
        lens = np.array([len(blobs[i]) for i in pick], dtype=np.uint64)
        offs = np.concatenate([[0], np.cumsum(lens)]).astype(np.uint64)
        with h5py.File(os.path.join(a.dir, f"set{n}.h5"), "w") as f:
            g = f.create_group("images")
            g["data"] = np.concatenate([blobs[i] for i in pick])
            g["offsets"] = offs
            g.create_dataset("ids", data=[f"{k:06d}/{ids[i]}" for k, i in enumerate(pick)],
                             dtype=h5py.string_dtype())
    # a model whose output is its input (3x32x32 floats, 12 KB per image): --post raw makes the
    # result large enough for the writers to matter
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])
    y = helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["N", 3, 32, 32])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    g = helper.make_graph([helper.make_node("Mul", ["x", "one"], ["pixels"])], "pixels", [x], [y],
                          [one])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              os.path.join(a.dir, "pixels.onnx"))
    print("prepare: OK")


def schedules(a):
    ref = None
    for np_ in (1, 2, 3, 4):
        outs = {}
        for s in ("static", "dynamic"):
            out = os.path.join(a.dir, f"sched_{s}_np{np_}.h5")
            p = sh(run_cmd(a, np_, out, 1000, "--schedule", s, "--overwrite"))
            if "results:" not in p.stdout:
                fail("no summary printed")
            outs[s] = out
        same_files(outs["static"], outs["dynamic"])
        if ref:
            same_files(ref, outs["dynamic"])
        ref = ref or outs["static"]
        with h5py.File(ref, "r") as f:
            st = f["status"][:]
            if len(st) != 1000 or set(np.unique(st)) != {0, 3, 4}:
                fail(f"unexpected statuses {np.unique(st)}")
            if list(f["errors/index"][:]) != list(np.nonzero(st)[0]):
                fail("/errors/index does not list the failed images")
    # the chunk size changes the work units, not the batches: the same results
    out = os.path.join(a.dir, "sched_chunk24.h5")
    sh(run_cmd(a, 2, out, 1000, "--chunk", "24", "--overwrite"))
    same_files(ref, out, ignore={"chunk_size"})
    print("schedules: OK: static == dynamic on 1-4 ranks, and equal across rank counts and chunk "
          "sizes")


def slow_rank(a):
    t = {}
    for s in ("static", "dynamic"):
        out = os.path.join(a.dir, f"slow_{s}.h5")
        p = sh(run_cmd(a, 3, out, 1000, "--schedule", s, "--test-slow-rank", "1:20",
                       "--overwrite"))
        m = re.search(r"in ([0-9.]+) s:", p.stdout)
        t[s] = float(m.group(1))
        rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+\d+\s", p.stdout, re.M)
        print(f"{s}: {t[s]:.2f} s, images per rank: {[int(r[1]) for r in rows]}")
    same_files(os.path.join(a.dir, "slow_static.h5"), os.path.join(a.dir, "slow_dynamic.h5"))
    ratio = t["static"] / t["dynamic"]
    print(f"slow-rank: static {t['static']:.2f} s, dynamic {t['dynamic']:.2f} s: "
          f"dynamic is {ratio:.2f}x faster")
    if ratio <= 1.2:
        fail(f"dynamic scheduling should beat static with a slowed rank (ratio {ratio:.2f})")


def rank_pids(mpirun_pid):
    """{rank: pid} of mpirun's shardinfer children."""
    pids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != mpirun_pid:
                continue
            with open(f"/proc/{d}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            if b"OMPI_COMM_WORLD_RANK" in env:
                pids[int(env[b"OMPI_COMM_WORLD_RANK"])] = int(d)
        except (OSError, ValueError, IndexError):
            pass
    return pids


def clean(out):
    """No journal of an earlier run may be mistaken for this one's progress."""
    for f in (out, out + ".partial", out + ".journal"):
        if os.path.exists(f):
            os.remove(f)


def chunks_journaled(out):
    """Records in the journal: grows as rank 0 flushes."""
    try:
        return max(0, os.path.getsize(out + ".journal") - 40)
    except OSError:
        return 0


def start_run(cmd, out):
    """Starts a run in the background, waits until rank 0 has journaled some chunks, and returns
    the process and its ranks' pids."""
    print("$", " ".join(cmd), flush=True)
    clean(out)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=mpi_env())
    t0 = time.time()
    while chunks_journaled(out) < 2000 and time.time() - t0 < 60:
        time.sleep(0.05)
    return p, rank_pids(p.pid)


def interrupted_run(a, out, np_, how):
    """Starts a run of 2,000 images, waits until some chunks are flushed, interrupts it."""
    # static shares and a slowed rank 0: the run lasts a few seconds whoever is interrupted
    cmd = run_cmd(a, np_, out, 2000, "--flush-interval", "0.05", "--schedule", "static",
                  "--test-slow-rank", "0:20", "--drain-timeout", "10", "--overwrite")
    p, pids = start_run(cmd, out)
    t0 = time.time()
    if len(pids) != np_:
        p.kill()
        fail(f"found rank pids {pids}, expected {np_}")
    if how == "sigterm":  # what Slurm does: every task of the step gets SIGTERM
        for pid in pids.values():
            os.kill(pid, signal.SIGTERM)
    elif how == "sigusr1":  # what srun --signal and scancel --signal=USR1 deliver to the tasks
        for pid in pids.values():
            os.kill(pid, signal.SIGUSR1)
    else:
        os.kill(pids[how], signal.SIGKILL)
    try:
        so, se = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        fail(f"the job did not end within 60 s after {how} (a hang)")
    sys.stdout.write(so[-2000:])
    sys.stdout.write(se[-2000:])
    print(f"interrupted ({how}) after {time.time() - t0:.1f} s: exit code {p.returncode}")
    wait_gone(pids.values())
    return p.returncode, so, se


def alive(pid):
    """A process still there: not gone, and not a zombie whose threads have all ended (a zombie
    leader with live threads still holds its files; a container's init may never reap it)."""
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        return state != "Z" or len(os.listdir(f"/proc/{pid}/task")) > 1
    except (OSError, IndexError):
        return False


def wait_gone(pids, limit=30):
    """The launcher may return before a surviving rank has exited (it still holds the partial
    file): wait for them, within the drain timeout's reach."""
    t = time.time()
    while any(alive(p) for p in pids):
        if time.time() - t > limit:
            fail(f"ranks {list(pids)} still running {limit} s after the job ended (a hang)")
        time.sleep(0.05)
    print(f"every rank gone {time.time() - t:.2f} s after the launcher returned")


def resume_and_compare(a, out, np_):
    if not os.path.exists(out + ".partial") or not os.path.exists(out + ".journal"):
        fail("the partial result is not there to resume")
    with h5py.File(out + ".partial", "r") as f:  # readable although the run was cut short
        n = int(f.attrs["images"])
    p = sh(run_cmd(a, np_, out, 2000, "--resume"))
    if "[resumed]" not in p.stdout:
        fail("the summary does not say the run was resumed")
    done_before = int(re.search(r"(\d+) images were done before", p.stdout).group(1))
    if not 0 < done_before < n:
        fail(f"{done_before} images were done before the resume, expected some but not all")
    ref = os.path.join(a.dir, "uninterrupted.h5")
    if not os.path.exists(ref):
        sh(run_cmd(a, 2, ref, 2000, "--overwrite"))
    same_files(ref, out)
    for leftover in (out + ".partial", out + ".journal"):
        if os.path.exists(leftover):
            fail(f"{leftover} left behind after the run completed")


def signals(a, how):
    out = os.path.join(a.dir, f"{how}.h5")
    rc, so, se = interrupted_run(a, out, 3, how)
    if rc != 6:
        fail(f"a {how} should end the run with exit code 6 (interrupted), got {rc}")
    if "run the same command with --resume" not in se:
        fail("the message does not say how to finish the run")
    if "Traceback" in se or "FATAL" in se:
        fail("an error while draining")
    resume_and_compare(a, out, 3)
    print(f"{how}: OK: drained, exit 6, resumed into the same file")


def kill(a):
    for victim in (1, 0):
        out = os.path.join(a.dir, f"kill{victim}.h5")
        rc, so, se = interrupted_run(a, out, 3, victim)
        if rc == 0:
            fail("the job succeeded although a rank was killed")
        if not re.search(rf"rank {victim}\b.*(signal 9|Killed)", so + se):
            fail(f"no message names rank {victim} as killed")
        resume_and_compare(a, out, 2)  # resumed with another rank count
        print(f"kill: OK: rank {victim} killed, job ended naming it, resumed into the same file")
    # a frozen peer (SIGSTOP: a node that stopped answering) and SIGTERM to rank 0: rank 0 drains,
    # waits for the peer in vain, and its watchdog ends it within --drain-timeout
    out = os.path.join(a.dir, "frozen.h5")
    cmd = run_cmd(a, 2, out, 2000, "--flush-interval", "0.05", "--schedule", "static",
                  "--test-slow-rank", "0:20", "--drain-timeout", "3", "--overwrite")
    p, pids = start_run(cmd, out)
    os.kill(pids[1], signal.SIGSTOP)
    os.kill(pids[0], signal.SIGTERM)
    t1 = time.time()
    try:
        so, se = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.kill(pids[1], signal.SIGKILL)
        p.kill()
        fail("the job hangs on a frozen peer after SIGTERM")
    sys.stdout.write(se[-1500:])
    if "still draining 3 s" not in se:
        fail("rank 0's drain watchdog did not speak")
    print(f"frozen peer: the job ended {time.time() - t1:.1f} s after SIGTERM (drain timeout 3 s), "
          f"exit code {p.returncode}")
    wait_gone(pids.values())
    resume_and_compare(a, out, 2)
    print("kill: OK: a frozen peer cannot hang a draining job")


def memory(a):
    peaks = {}
    for n in (2000, 20000):
        out = os.path.join(a.dir, f"mem{n}.h5")
        p = sh(run_cmd(a, 2, out, n, "--overwrite", "--chunk", "32"))
        rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+\d+\s+[0-9.]+ s.*\s([0-9.]+)$", p.stdout, re.M)
        peaks[n] = {int(r[0]): float(r[2]) for r in rows}
        print(f"{n} images: peak MB per rank {peaks[n]}")
    for r in peaks[2000]:
        small, big = peaks[2000][r], peaks[20000][r]
        print(f"rank {r}: {small:.1f} MB for 2,000 images, {big:.1f} MB for 20,000 "
              f"({big / small:.3f}x)")
        if big > small * 1.10 + 2:
            fail(f"rank {r}'s memory grows with the number of images: {small} -> {big} MB")
    print("memory: OK: flat")


def writers(a):
    def cmd(np_, out, n, *extra):
        c = run_cmd(a, np_, out, n, "--post", "raw", *extra)
        c[c.index("--model") + 1] = os.path.join(a.dir, "pixels.onnx")
        return c
    for np_ in (1, 3):
        outs = {}
        for w in ("gather", "parallel"):
            outs[w] = os.path.join(a.dir, f"writer_{w}_np{np_}.h5")
            p = sh(cmd(np_, outs[w], 1000, "--writer", w, "--overwrite"))
            if w == "parallel" and "parallel writer: the ranks wrote" not in p.stderr:
                fail("the parallel writer did not report its bytes")
        same_files(outs["gather"], outs["parallel"])
        with h5py.File(outs["parallel"], "r") as f:
            px, st = f["raw/pixels"], f["status"][:]
            if px.shape != (1000, 3, 32, 32) or not np.all(np.isnan(px[np.nonzero(st)[0][0]])):
                fail("raw/pixels has the wrong shape or a failed image's row is not NaN")
    # killed with the parallel writer, resumed with the gathering one: the same file
    out = os.path.join(a.dir, "writer_kill.h5")
    c = cmd(3, out, 2000, "--writer", "parallel", "--flush-interval", "0.05", "--schedule",
            "static", "--test-slow-rank", "0:20", "--overwrite")
    p, pids = start_run(c, out)
    os.kill(pids[2], signal.SIGKILL)
    p.communicate(timeout=60)
    wait_gone(pids.values())
    sh(cmd(2, out, 2000, "--resume"))
    ref = os.path.join(a.dir, "writer_ref.h5")
    sh(cmd(2, ref, 2000, "--overwrite"))
    same_files(ref, out)
    # the two writers' times on the same work
    t = {}
    for w in ("gather", "parallel"):
        o = os.path.join(a.dir, f"writer_time_{w}.h5")
        p = sh(cmd(2, o, 20000, "--writer", w, "--overwrite", "--chunk", "64", "--quiet"))
        t[w] = float(re.search(r"in ([0-9.]+) s:", p.stdout).group(1))
    mb = os.path.getsize(os.path.join(a.dir, "writer_time_parallel.h5")) / 1e6
    for w in t:  # 236 MB each, read by nothing else: CI machines can be short of disk
        os.remove(os.path.join(a.dir, f"writer_time_{w}.h5"))
    print(f"writers: {mb:.0f} MB result, 2 ranks: gather {t['gather']:.2f} s, parallel "
          f"{t['parallel']:.2f} s (gather / parallel = {t['gather'] / t['parallel']:.2f})")
    print("writers: OK: parallel == gather, also across a kill and resume")


def split_set(a, n_parts_sizes):
    """set2000.h5 cut into files of the given sizes; returns their paths and a list file."""
    with h5py.File(os.path.join(a.dir, "set2000.h5"), "r") as f:
        off, data = f["/images/offsets"][:], f["/images/data"][:]
        ids = f["/images/ids"][:]
    paths, lo = [], 0
    for k, n in enumerate(n_parts_sizes):
        p = os.path.join(a.dir, f"part{k}.h5")
        with h5py.File(p, "w") as g:
            grp = g.create_group("images")
            grp["data"] = data[off[lo]:off[lo + n]]
            grp["offsets"] = (off[lo:lo + n + 1] - off[lo]).astype(np.uint64)
            grp.create_dataset("ids", data=ids[lo:lo + n], dtype=h5py.string_dtype())
        paths.append(p)
        lo += n
    lst = os.path.join(a.dir, "parts.txt")
    with open(lst, "w") as f:
        f.write("\n".join(os.path.abspath(p) for p in paths) + "\n")
    return paths, lst


def merge(a):
    paths, lst = split_set(a, [400, 600, 500, 500])
    models = [("classify", os.path.join(a.e2e_dir, "tiny.onnx"), [])]
    if a.detect_model:
        models.append(("detect", a.detect_model, ["--post", "detect", "--resize", "36"]))
    for name, model, extra in models:
        def cmd(inp, out, *more):
            return ["mpirun", "-np", "2", a.shardinfer, "run", "--model", model, "--input", inp,
                    "--output", out, "--batch", "4", "--progress", "none", "--quiet", "--overwrite",
                    *extra, *more]
        whole = os.path.join(a.dir, f"whole_{name}.h5")
        sh(cmd(lst, whole))
        parts = []
        for k, p in enumerate(paths):
            parts.append(os.path.join(a.dir, f"part{k}_{name}.h5"))
            sh(cmd(p, parts[-1]))
        merged = os.path.join(a.dir, f"merged_{name}.h5")
        p = sh([a.shardinfer, "merge", "--output", merged, "--overwrite", *parts])
        wd, wa = read_all(whole)
        md, ma = read_all(merged)
        same_datasets(wd, md, f"{name}: the merged parts vs one run over the set")
        for k in ("images", "failed", "post", "post_params", "model_sha256", "preprocess"):
            if str(wa[k]) != str(ma[k]):
                fail(f"{name}: attribute {k}: {ma[k]!r}, one run has {wa[k]!r}")
        if int(ma["merged_parts"]) != 4:
            fail("merged_parts is not 4")
        # merges of merges give the same file; the same part twice, or parts that overlap
        # (a merge and one of its parts), are refused naming both (issue 15, item 7)
        halves = []
        for k, pair in enumerate((parts[:2], parts[2:])):
            halves.append(os.path.join(a.dir, f"half{k}_{name}.h5"))
            sh([a.shardinfer, "merge", "--output", halves[-1], "--overwrite", *pair])
        again = os.path.join(a.dir, f"merged2_{name}.h5")
        sh([a.shardinfer, "merge", "--output", again, "--overwrite", *halves])
        ad, aa = read_all(again)
        same_datasets(wd, ad, f"{name}: a merge of two merges vs one run over the set")
        if int(aa["merged_parts"]) != 4 or len(str(aa["merged_inputs"]).split("\n")) != 4:
            fail(f"{name}: a merge of merges counts {aa['merged_parts']} parts")
        refused = os.path.join(a.dir, "refused.h5")
        for bad, why in (([parts[0], parts[1], parts[0]], "same file"),
                         ([halves[0], parts[1]], "overlap")):
            p = sh([a.shardinfer, "merge", "--output", refused, "--overwrite", *bad], expect_rc=1)
            named = os.path.basename(bad[0]) in p.stderr and os.path.basename(bad[-1]) in p.stderr
            if why not in p.stderr or not named or os.path.exists(refused):
                fail(f"{name}: {why}: not refused with both parts named: {p.stderr.strip()}")
        extra_info = ""
        if name == "detect":
            extra_info = f", {len(md['detections/scores'])} detections"
        print(f"merge: {name}: 4 parts merged == one run over the 4 files "
              f"({len(wd)} datasets{extra_info})")
    # a part made with other settings is refused, naming it
    odd = os.path.join(a.dir, "part_odd.h5")
    sh(["mpirun", "-np", "1", a.shardinfer, "run", "--model", models[0][1], "--input", paths[1],
        "--output", odd, "--batch", "4", "--topk", "3", "--quiet", "--overwrite"])
    p = sh([a.shardinfer, "merge", "--output", os.path.join(a.dir, "bad_merge.h5"),
            os.path.join(a.dir, "part0_classify.h5"), odd], expect_rc=1)
    if "part_odd.h5" not in p.stderr or "other settings" not in p.stderr:
        fail("a part with other settings is not named in the refusal")
    if os.path.exists(os.path.join(a.dir, "bad_merge.h5")):
        fail("a refused merge left a file")
    print("merge: OK")


def restaged(a):
    """--resume after the input was re-staged with other images of the same count under the
    same name is refused, naming the change; the same file given as ./set.h5 is the same input
    (issue 15, item 4)."""
    staged = os.path.join(a.dir, "set2000.h5")
    keep = os.path.join(a.dir, "set2000.keep.h5")
    shutil.copyfile(staged, keep)
    out = os.path.join(a.dir, "restaged.h5")
    rc, so, se = interrupted_run(a, out, 2, "sigterm")
    if rc != 6:
        fail(f"the interrupted run should exit 6, got {rc}")
    try:
        with h5py.File(staged, "r+") as f:  # other images, same count: the order reversed
            off = f["/images/offsets"][:]
            data = f["/images/data"][:]
            ids = list(f["/images/ids"][:])
            blobs = [data[off[i]:off[i + 1]] for i in range(len(ids))][::-1]
            f["/images/data"][:] = np.concatenate(blobs)
            lens = np.array([len(b) for b in blobs], dtype=np.uint64)
            f["/images/offsets"][:] = np.concatenate([[0], np.cumsum(lens)]).astype(np.uint64)
            f["/images/ids"][:] = ids[::-1]
        p = sh(run_cmd(a, 2, out, 2000, "--resume"), expect_rc=1)
        if "the input is not the one" not in p.stderr or "input_fp" not in p.stderr:
            fail(f"a re-staged input is not refused by name: {p.stderr.strip()}")
    finally:
        shutil.copyfile(keep, staged)
        os.remove(keep)
    # the same set spelt ./set2000.h5 (relative, from its folder) resumes
    cmd = run_cmd(a, 2, out, 2000, "--resume")
    cmd[cmd.index("--input") + 1] = "./set2000.h5"
    p = subprocess.run(cmd, capture_output=True, text=True, env=mpi_env(), cwd=a.dir)
    if p.returncode != 0 or "[resumed]" not in p.stdout:
        fail(f"./set2000.h5 is not taken for the same input: {p.stderr.strip()}")
    print("restaged: OK: another set under the same name is refused; ./set2000.h5 resumes")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardinfer", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--e2e-dir", required=True)
    ap.add_argument("--detect-model", help="merge: also merge detections of this YOLO-style model")
    ap.add_argument("cmd", choices=["prepare", "schedules", "slow-rank", "sigterm", "sigusr1",
                                    "kill", "memory", "writers", "merge", "restaged"])
    a = ap.parse_args()
    {"prepare": prepare, "schedules": schedules, "slow-rank": slow_rank,
     "sigterm": lambda a: signals(a, "sigterm"), "sigusr1": lambda a: signals(a, "sigusr1"),
     "kill": kill, "memory": memory, "writers": writers, "merge": merge,
     "restaged": restaged}[a.cmd](a)


if __name__ == "__main__":
    main()
