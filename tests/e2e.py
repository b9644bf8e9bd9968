#!/usr/bin/env python3
"""End-to-end tests of the shardinfer binary, driven as a user drives it: pack a directory of
JPEGs, run it under mpirun with 1, 2 and 3 ranks (23 images: no rank count divides it), verify
each result with h5py, compare the results across rank counts, classify the demo photos with
the pretrained model, and feed it bad input of every kind. Every subprocess has a timeout, so a
hanging rank fails the test instead of stalling it.

Usage: e2e.py --shardinfer BIN --dir WORK SUBCOMMAND [...]
  prepare                 make the image set (tests/make_e2e_set.py) and pack it
  run --np N              mpirun -np N shardinfer run, then verify the result
  compare --np N M ...    results of different rank counts are identical
  demo --model M.onnx --labels CLASSES.txt   the demo photos get the right classes
  bad-inputs              each bad input: one clear message, printed once, nonzero exit, no hang
  hostile --io-dir DIR    every kind of hostile image in one set: right statuses, others scored
  gpu-resize              --backend cuda: --resize-on gpu (also with a buffer so small that most
                          images spill to the CPU resize, and on 2 ranks) gives the results of
                          --resize-on cpu and of the CPU backend; so does --interpolation bicubic,
                          DCT-scaled and exact (where more images are too wide for the GPU's
                          filter than with bilinear); skipped (77) without a GPU
  gpu-decode              --decode gpu: the statuses of --decode cpu, close scores, recycled
                          slots bit for bit; skipped (77) without a hardware JPEG decoder
  gpu-decode-fuzz --seconds S   mutated JPEGs through --decode gpu and cpu for S seconds
"""

import argparse
import glob
import re
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = sys.executable
TIMEOUT = 120


def mpi_env():
    env = dict(os.environ)
    # mpirun refuses root (CI, containers) unless told; 3 ranks on 2 cores need oversubscription
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", PMIX_MCA_pcompress_base_silence_warning="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    return env


def sh(cmd, expect_rc=0, timeout=TIMEOUT):
    print("$", " ".join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, errors="backslashreplace",
                           timeout=timeout, env=mpi_env())
    except subprocess.TimeoutExpired:
        sys.exit(f"FAIL: timed out after {timeout} s (a rank hangs?): {' '.join(cmd)}")
    sys.stdout.write(p.stdout)
    sys.stdout.write(p.stderr)
    if expect_rc is not None and p.returncode != expect_rc:
        sys.exit(f"FAIL: exit code {p.returncode}, expected {expect_rc}: {' '.join(cmd)}")
    return p


def prepare(a):
    if os.path.isdir(a.dir):
        shutil.rmtree(a.dir)
    sh([PY, os.path.join(HERE, "make_e2e_set.py"), "--output-dir", a.dir, "--count", "23",
        "--tiny-model", os.path.join(a.dir, "tiny.onnx")])
    sh([a.shardinfer, "pack", os.path.join(a.dir, "images"), "--output",
        os.path.join(a.dir, "set.h5")])
    # the packed bytes and ids are the files' own, read back with h5py
    import h5py
    import numpy as np
    with h5py.File(os.path.join(a.dir, "set.h5"), "r") as f:
        ids = [s.decode() if isinstance(s, bytes) else s for s in f["/images/ids"][:]]
        off = f["/images/offsets"][:]
        data = f["/images/data"]
        for i, rel in enumerate(ids):
            want = open(os.path.join(a.dir, "images", rel), "rb").read()
            got = data[off[i]:off[i + 1]].tobytes()
            if got != want:
                sys.exit(f"FAIL: packed bytes of {rel} differ from the file")
    print(f"prepare: OK: {len(ids)} images packed, bytes and ids read back with h5py")


def check_timeline(path, rank):
    """--timeline: every batch a rank decoded was read, computed and postprocessed, once each,
    in that order, and every interval is well formed. Returns how many batches the rank decoded
    (none is possible: with dynamic scheduling on a busy machine the other ranks may claim every
    chunk first)."""
    rows = [l.rstrip("\n").split(",") for l in open(path)]
    if rows[0] != ["rank", "stage", "batch", "t0", "t1"]:
        sys.exit(f"FAIL: {path}: header {rows[0]}")
    seen = {}
    for r, stage, batch, t0, t1 in rows[1:]:
        if int(r) != rank or not 0 <= float(t0) <= float(t1):
            sys.exit(f"FAIL: {path}: bad row {r},{stage},{batch},{t0},{t1}")
        seen.setdefault(stage, []).append((int(batch), float(t0), float(t1)))
    decoded = sorted(b for b, _, _ in seen.get("decode", []))
    for stage in ("read", "compute", "post"):
        got = sorted(b for b, _, _ in seen.get(stage, []))
        if got != decoded:
            sys.exit(f"FAIL: {path}: {stage} rows for batches {got}, decode rows for {decoded}")
    t = {st: {b: (t0, t1) for b, t0, t1 in v} for st, v in seen.items()}
    for b in decoded:
        if not (t["read"][b][1] <= t["decode"][b][0] and t["decode"][b][1] <= t["post"][b][0]):
            sys.exit(f"FAIL: {path}: batch {b}: stages out of order")
    return len(decoded)


def run(a):
    out = os.path.join(a.dir, f"result_np{a.np}.h5")
    tl = os.path.join(a.dir, f"timeline_np{a.np}.csv")
    p = sh(["mpirun", "-np", str(a.np), a.shardinfer, "run", "--model",
            os.path.join(a.dir, "tiny.onnx"), "--input", os.path.join(a.dir, "set.h5"),
            "--output", out, "--batch", "4", "--overwrite", "--timeline", tl])
    import h5py
    batches = sum(check_timeline(tl if a.np == 1 else f"{tl}.rank{r}", r) for r in range(a.np))
    with h5py.File(os.path.join(a.dir, "set.h5"), "r") as f:
        want = (len(f["/images/ids"]) + 3) // 4
    if batches != want:
        sys.exit(f"FAIL: the ranks' timelines hold {batches} decoded batches, the set has {want}")
    # each failed image is logged once, with its index and id
    for idx, name in ((5, "photo_05_truncated.jpg"), (17, "photo_17_corrupt.jpg")):
        lines = [l for l in p.stderr.splitlines() if f"image {idx} " in l and name in l]
        if len(lines) != 1:
            sys.exit(f"FAIL: image {idx} logged {len(lines)} times, expected once")
    sh([PY, os.path.join(HERE, "check_results.py"), "verify", out, "--input",
        os.path.join(a.dir, "set.h5"), "--expect-status-file",
        os.path.join(a.dir, "expected_status.txt")])


def compare(a):
    first = os.path.join(a.dir, f"result_np{a.np[0]}.h5")
    for n in a.np[1:]:
        sh([PY, os.path.join(HERE, "check_results.py"), "compare", first,
            os.path.join(a.dir, f"result_np{n}.h5")])


def demo(a):
    photos = os.path.join(a.dir, "photos")
    sh([PY, os.path.join(ROOT, "datasets", "make_demo_photos.py"), "--output-dir", photos])
    sset, res = os.path.join(a.dir, "photos.h5"), os.path.join(a.dir, "photos_result.h5")
    sh([a.shardinfer, "pack", photos, "--output", sset, "--overwrite"])
    sh(["mpirun", "-np", "2", a.shardinfer, "run", "--model", a.model, "--input", sset,
        "--output", res, "--batch", "4", "--overwrite"], timeout=600)
    import h5py
    with h5py.File(res, "r") as f:
        ids = [s.decode() if isinstance(s, bytes) else s for s in f["/ids"][:]]
        top1 = dict(zip(ids, f["/topk_class"][:, 0]))
        status = dict(zip(ids, f["/status"][:]))
    # chelsea is a cat (tabby/tiger/Persian/Siamese/Egyptian: 281-285), coffee is espresso/cup/mug
    want = {"chelsea.jpg": set(range(281, 286)), "coffee.jpg": {967, 968, 504}}
    for name, classes in want.items():
        if status.get(name) != 0 or int(top1.get(name, -1)) not in classes:
            sys.exit(f"FAIL: {name}: top-1 class {top1.get(name)}, expected one of "
                     f"{sorted(classes)}")
    sh([a.shardinfer, "show", res, "--labels", a.labels])
    print("demo: OK: chelsea is a cat, coffee is coffee")


def bad_inputs(a):
    d = a.dir
    bad = os.path.join(d, "bad")
    os.makedirs(bad, exist_ok=True)
    tiny, sset = os.path.join(d, "tiny.onnx"), os.path.join(d, "set.h5")
    with open(tiny, "rb") as f:
        model_bytes = f.read()
    trunc = os.path.join(bad, "truncated.onnx")
    open(trunc, "wb").write(model_bytes[: len(model_bytes) // 3])
    notonnx = os.path.join(bad, "photo.onnx")
    shutil.copy(os.path.join(d, "images", "photo_00.jpg"), notonnx)
    text = os.path.join(bad, "notes.h5")
    open(text, "w").write("not an HDF5 file\n")
    import h5py
    import numpy as np
    empty = os.path.join(bad, "no_images.h5")
    with h5py.File(empty, "w") as f:
        f["something"] = np.arange(3)
    exists = os.path.join(bad, "exists.h5")
    open(exists, "w").write("x")
    out = os.path.join(bad, "out.h5")
    outdir = os.path.join(bad, "a_directory")
    os.makedirs(outdir, exist_ok=True)
    run = lambda model, inp, output=out, extra=(): ["mpirun", "-np", "2", a.shardinfer, "run",
                                                    "--model", model, "--input", inp,
                                                    "--output", output, *extra]
    cases = [
        ("missing model", run(os.path.join(bad, "nope.onnx"), sset), 1, "nope.onnx"),
        ("truncated model", run(trunc, sset), 1, "truncated.onnx"),
        ("not an ONNX file", run(notonnx, sset), 1, "photo.onnx"),
        ("missing input", run(tiny, os.path.join(bad, "nope.h5")), 1, "nope.h5"),
        ("input not HDF5", run(tiny, text), 1, "notes.h5"),
        ("HDF5 without the datasets", run(tiny, empty), 1, "no_images.h5"),
        ("output exists", run(tiny, sset, exists), 1, "exists.h5"),
        ("unknown flag", run(tiny, sset, out, ["--frobnicate"]), 2, "--frobnicate"),
        ("bad flag value", run(tiny, sset, out, ["--batch", "zero"]), 2, "--batch"),
        ("output directory missing", run(tiny, sset, os.path.join(bad, "no", "dir", "o.h5")), 1,
         "no/dir"),
        # found before the first image, not at the final rename (issue 15): no .partial is made
        ("output empty", run(tiny, sset, ""), 1, "--output is empty"),
        ("output is a directory", run(tiny, sset, outdir), 1, "is a directory"),
        ("output is a directory, --overwrite", run(tiny, sset, outdir, ["--overwrite"]), 1,
         "is a directory"),
        ("output names a directory", run(tiny, sset, outdir + "/"), 1, "names a directory"),
    ]
    failures = 0
    for name, cmd, rc, must_name in cases:
        p = sh(cmd, expect_rc=None, timeout=60)
        # the message: on stderr, from shardinfer itself, exactly once (not once per rank)
        msgs = [l for l in p.stderr.splitlines() if l.startswith("shardinfer")]
        ok = p.returncode != 0 and len(msgs) == 1 and must_name in msgs[0]
        ok = ok and ("error" in msgs[0] or "shardinfer run:" in msgs[0])
        # mpirun reports the nonzero exit of the first rank; the code must be ours
        own_rc = p.returncode == rc
        print(f"{'ok  ' if ok and own_rc else 'FAIL'} {name}: rc={p.returncode} "
              f"message={msgs[0] if msgs else None!r} ({len(msgs)} lines)")
        failures += not (ok and own_rc)
        if os.path.exists(out):
            sys.exit(f"FAIL: {name}: an output file was left behind")
        if glob.glob(os.path.join(bad, "*.partial")) + glob.glob(os.path.join(bad, "*.journal")):
            sys.exit(f"FAIL: {name}: work started before the output was checked")
    # a model with an unsupported op: every such node named at once
    import onnx
    from onnx import helper, TensorProto
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"], name="ok"),
         helper.make_node("LpNormalization", ["a"], ["b"], name="norm_1"),
         helper.make_node("Hardmax", ["b"], ["y"], name="hardmax_2")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 32, 32])])
    unsup = os.path.join(bad, "unsupported.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), unsup)
    p = sh(run(unsup, sset), expect_rc=None, timeout=60)
    err = p.stderr
    good = p.returncode == 1 and "norm_1" in err and "hardmax_2" in err and "2 unsupported" in err
    print(f"{'ok  ' if good else 'FAIL'} unsupported ops listed together: rc={p.returncode}")
    failures += not good
    # --topk above the class count: kept at the count, and said once (not per rank)
    p = sh(run(tiny, sset, out, ["--topk", "100000", "--overwrite"]), expect_rc=None, timeout=60)
    said = [l for l in p.stderr.splitlines() if "--topk 100000 is more than" in l]
    good = p.returncode == 0 and len(said) == 1
    print(f"{'ok  ' if good else 'FAIL'} --topk above the classes: rc={p.returncode} {said}")
    failures += not good
    if os.path.exists(out):
        os.remove(out)
    # --backend auto, the default: the GPU when every rank sees one, the CPU otherwise, said in
    # the first info line with the reason; CUDA-only options under an auto that chose the CPU
    # are refused naming why (issue 16, item 7)
    want = "backend cuda (auto: every rank sees a CUDA device)" if cuda_devices() else \
        "backend cpu (auto: "
    p = sh(run(tiny, sset, out, ["--overwrite"]), expect_rc=None, timeout=120)
    good = p.returncode == 0 and want in p.stderr
    print(f"{'ok  ' if good else 'FAIL'} --backend auto: rc={p.returncode} "
          f"{[l for l in p.stderr.splitlines() if 'backend' in l][:1]}")
    failures += not good
    if os.path.exists(out):
        os.remove(out)
    if not cuda_devices():
        p = sh(run(tiny, sset, out, ["--precision", "fp16"]), expect_rc=None, timeout=60)
        good = p.returncode == 2 and "--backend auto chose cpu" in p.stderr
        print(f"{'ok  ' if good else 'FAIL'} cuda options, auto chose cpu: rc={p.returncode}")
        failures += not good
    p = sh(run(tiny, sset, out, ["--backend", "gpu"]), expect_rc=None, timeout=60)
    good = p.returncode == 2 and "--backend 'gpu'" in p.stderr
    print(f"{'ok  ' if good else 'FAIL'} --backend gpu (no such backend): rc={p.returncode}")
    failures += not good
    # --max-errors: the set has 2 failing images of 23
    for limit, rc in (("1", 5), ("2", 0), ("5%", 5), ("10%", 0)):
        p = sh(run(tiny, sset, out, ["--max-errors", limit, "--overwrite"]), expect_rc=None,
               timeout=60)
        msgs = [l for l in p.stderr.splitlines() if "max-errors" in l]
        good = p.returncode == rc and (rc == 0) == (len(msgs) == 0) and os.path.exists(out)
        print(f"{'ok  ' if good else 'FAIL'} --max-errors {limit}: rc={p.returncode} {msgs}")
        failures += not good
        if os.path.exists(out):
            os.remove(out)
    if failures:
        sys.exit(f"FAIL: {failures} bad-input cases misbehaved")
    print(f"bad-inputs: OK: {len(cases) + 9} cases")


def hostile(a):
    """Every kind of hostile image (tests/io_ref.py makes them) mixed with good photos in one set:
    each gets its own status under mpirun, every good image its scores, nothing stops the run."""
    io = a.io_dir
    codes = {"ok": 0, "empty": 1, "not_jpeg": 2, "truncated": 3, "corrupt": 4, "too_large": 5}
    entries = []
    good = [l.split("\t")[0] for l in open(os.path.join(io, "jpeg_manifest.tsv")) if l.strip()]
    bad = [l.rstrip("\n").split("\t") for l in open(os.path.join(io, "hostile_manifest.tsv"))
           if l.strip()]
    for i, (name, kind) in enumerate(bad):  # interleave so that every batch holds some of each
        entries.append((name, codes[kind]))
        if i < len(good):
            entries.append((good[i], 0))
    entries += [(g, 0) for g in good[len(bad):]]
    d = os.path.join(a.dir, "hostile")
    os.makedirs(d, exist_ok=True)
    lst, exp = os.path.join(d, "list.txt"), os.path.join(d, "expected_status.txt")
    with open(lst, "w") as f, open(exp, "w") as e:
        for name, code in entries:
            f.write(f"{os.path.join(os.path.abspath(io), name)}\t{name}\n")
            e.write(f"{name}\t{code}\n")
    sset, res = os.path.join(d, "set.h5"), os.path.join(d, "result.h5")
    sh([a.shardinfer, "pack", lst, "--output", sset, "--overwrite"])
    p = sh(["mpirun", "-np", "2", a.shardinfer, "run", "--model", os.path.join(a.dir, "tiny.onnx"),
            "--input", sset, "--output", res, "--batch", "3", "--overwrite"])
    # each failure logged once with its index and id
    for name, code in entries:
        if code == 0:
            continue
        lines = [l for l in p.stderr.splitlines() if f"'{name}'" in l]
        if len(lines) != 1:
            sys.exit(f"FAIL: {name} logged {len(lines)} times, expected once")
    sh([PY, os.path.join(HERE, "check_results.py"), "verify", res, "--input", sset,
        "--expect-status-file", exp])
    print(f"hostile: OK: {len(bad)} hostile and {len(good)} good images, each with its status")


def cuda_devices():
    """CUDA devices the driver sees; 0 without a driver."""
    import ctypes
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    n = ctypes.c_int(0)
    if cu.cuInit(0) != 0 or cu.cuDeviceGetCount(ctypes.byref(n)) != 0:
        return 0
    return n.value


def gpu_resize(a):
    if cuda_devices() == 0:
        print("no CUDA device: skipped")
        sys.exit(77)
    import onnx
    model = os.path.join(a.dir, "tiny.onnx")
    dims = [d.dim_value for d in onnx.load(model).graph.input[0].type.tensor_type.shape.dim]
    crop_kib = (dims[2] * dims[3] * 3 + 1023) // 1024
    sets = [os.path.join(a.dir, "set.h5")]
    hostile_set = os.path.join(a.dir, "hostile", "set.h5")  # e2e_hostile_images made it
    if os.path.exists(hostile_set):
        sets.append(hostile_set)
    for k, sset in enumerate(sets):
        def go(tag, np_, extra):
            out = os.path.join(a.dir, f"gpu_resize_{k}_{tag}.h5")
            p = sh(["mpirun", "-np", str(np_), a.shardinfer, "run", "--model", model, "--input",
                    sset, "--output", out, "--batch", "5", "--overwrite"] + extra)
            return out, p
        ref, _ = go("cpu_backend", 1, ["--backend", "cpu"])
        # the CPU's decoder throughout: these compare resizes, bit for bit (--decode gpu has
        # its own test, gpu-decode)
        dec = ["--decode", "cpu"]
        on_cpu, _ = go("resize_cpu", 1, ["--backend", "cuda", "--precision", "fp32",
                                         "--resize-on", "cpu"])
        on_gpu, _ = go("resize_gpu", 1, ["--backend", "cuda", "--precision", "fp32",
                                         "--resize-on", "gpu"] + dec)
        spill, p = go("spill", 1, ["--backend", "cuda", "--precision", "fp32", "--resize-on", "gpu",
                                   "--pack-kb", str(crop_kib + 1)] + dec)
        if "resized on the CPU instead" not in p.stdout:
            sys.exit("FAIL: a buffer of one crop per image spilled nothing to the CPU resize")
        two, _ = go("np2", 2, ["--backend", "cuda", "--precision", "fp32", "--resize-on", "gpu"] +
                    dec)
        for other in (on_cpu, on_gpu, spill, two):
            sh([PY, os.path.join(HERE, "check_results.py"), "compare", ref, other])
        # exact: full-size decodes in buffers that hold them, to a resize (100) where photos of
        # 350 to 700 pixels are 3.5x to 7x too large: BILINEAR's filter fits the GPU there,
        # BICUBIC's (twice as wide) does not, and those images must go to the CPU resize
        for mode, exact, pack in (("scaled", [], []),
                                  ("exact", ["--exact-preprocess", "--resize", "100"],
                                   ["--pack-kb", "2048"])):
            bic = ["--interpolation", "bicubic"] + exact
            ref, _ = go(f"bicubic_{mode}_cpu_backend", 1, ["--backend", "cpu"] + bic)
            on_gpu, p = go(f"bicubic_{mode}_resize_gpu", 1, ["--backend", "cuda", "--precision",
                                                              "fp32", "--resize-on", "gpu"] + bic +
                           pack + dec)
            if mode == "exact" and "resized on the CPU instead" not in p.stdout:
                sys.exit("FAIL: no image was too wide for the GPU's bicubic filter")
            sh([PY, os.path.join(HERE, "check_results.py"), "compare", ref, on_gpu])
    print(f"gpu-resize: OK: {len(sets)} sets, --resize-on gpu (also spilling, also on 2 ranks, "
          "also bicubic) gives the results of --resize-on cpu and of the CPU backend")


def skip_without_hw_decoder(a, model):
    """Exits 77 (skipped) unless --decode auto picks the GPU's hardware decoder here."""
    probe = sh([a.shardinfer, "run", "--model", model, "--input", os.path.join(a.dir, "set.h5"),
                "--output", os.path.join(a.dir, "gpu_decode_probe.h5"), "--overwrite",
                "--backend", "cuda", "--decode", "auto"])
    if "decode gpu" not in probe.stderr:
        print("this GPU has no hardware JPEG decoder (or nvJPEG is missing): skipped")
        sys.exit(77)
    # CUDA's hardware work queues: 32 from shardinfer's own start (with CUDA's default 8 the
    # decoder's calls wait behind the model's batches), a value the user set kept and named
    if "hardware decoders, 32 CUDA work queues" not in probe.stderr:
        sys.exit(f"FAIL: the decoder's line does not say 32 CUDA work queues:\n{probe.stderr}")
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "4"
    try:
        p = sh([a.shardinfer, "run", "--model", model, "--input", os.path.join(a.dir, "set.h5"),
                "--output", os.path.join(a.dir, "gpu_decode_probe.h5"), "--overwrite",
                "--backend", "cuda", "--decode", "auto"])
    finally:
        del os.environ["CUDA_DEVICE_MAX_CONNECTIONS"]
    if "4 CUDA work queues (CUDA_DEVICE_MAX_CONNECTIONS: below 32" not in p.stderr:
        sys.exit(f"FAIL: a CUDA_DEVICE_MAX_CONNECTIONS the user set is not kept and said:\n"
                 f"{p.stderr}")


def gpu_decode_crops(a):
    """The crops themselves (an Identity model, --post raw) from batches the hardware decodes
    whole (--decode-cpu-share 0, plain baseline photos in 4:2:0, 4:2:2 and 4:4:4 only, so no
    image is left to the CPU), with --exact-preprocess so that the CPU decodes them at full size
    too rather than at a DCT scale: --decode gpu-exact gives libjpeg-turbo's crops to the bit
    (the hardware's planes converted as libjpeg-turbo does, io/yuv.h), and so does --decode gpu
    on these photos (the hardware's RGB with its replicated chroma recovered, io/yuv.h: exact
    wherever no whole block is clamped, and nothing clamps in these fields)."""
    import h5py
    import numpy as np
    from PIL import Image
    d = os.path.join(a.dir, "gpu_decode_crops")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(os.path.join(d, "img"))
    rng = np.random.default_rng(16)
    for i in range(40):  # smooth colour fields with some texture, 4:2:0 and 4:4:4
        w, h = int(rng.integers(96, 320)), int(rng.integers(96, 320))
        y, x = np.mgrid[0:h, 0:w].astype(np.float32)
        c = rng.uniform(0.5, 3, 6)
        px = np.stack([127 + 100 * np.sin(x / (20 * c[0]) + y / (30 * c[1])),
                       127 + 100 * np.cos(x / (25 * c[2]) - y / (15 * c[3])),
                       127 + 100 * np.sin((x + y) / (40 * c[4]) + c[5])], axis=2)
        px += rng.normal(0, 6, px.shape)
        Image.fromarray(np.clip(px, 0, 255).astype(np.uint8)).save(
            os.path.join(d, "img", f"{i:03d}.jpg"), quality=90, subsampling=i % 3)
    sset = os.path.join(d, "set.h5")
    sh([a.shardinfer, "pack", os.path.join(d, "img"), "--output", sset])
    sys.path.insert(0, HERE)
    from make_e2e_set import make_identity_model
    model = os.path.join(d, "pixels.onnx")
    make_identity_model(model, 64, 64)
    px = {}
    for dec in ("cpu", "gpu", "gpu-exact"):
        out = os.path.join(d, f"{dec}.h5")
        hw = [] if dec == "cpu" else ["--decode-cpu-share", "0", "--decode-wait"]
        p = subprocess.run([a.shardinfer, "run", "--model", model, "--input", sset, "--output",
                            out, "--batch", "8", "--backend", "cuda", "--precision", "fp32",
                            "--post", "raw", "--mean", "0,0,0", "--std", "1,1,1", "--decode",
                            dec, "--progress", "none", "--exact-preprocess"] + hw,
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            sys.exit(f"FAIL: --decode {dec}: exit {p.returncode}\n{p.stderr}")
        if dec != "cpu" and "40 images decoded by the GPU" not in p.stdout:
            sys.exit(f"FAIL: with --decode-cpu-share 0 not every photo went to the GPU:\n"
                     f"{p.stdout}")
        with h5py.File(out, "r") as f:
            px[dec] = f["raw/pixels"][()] * 255.0
    for dec in ("gpu", "gpu-exact"):
        diff = np.abs(px["cpu"] - px[dec])
        per_image = diff.reshape(len(diff), -1).mean(axis=1)
        print(f"gpu-decode: crops of 40 photos decoded whole by the hardware, --decode {dec}: "
              f"mean |diff| {diff.mean():.3f} of 255, worst image {per_image.max():.3f}, max "
              f"{diff.max():.1f}")
        # (the hardware's RGB as it comes, before its chroma was recovered: mean 0.90, worst
        # image 5.0 on an H100; a batch whose crops were not resized from the decodes differs by
        # tens)
        if diff.max() != 0:
            sys.exit(f"FAIL: --decode {dec}: the crops of {int(np.sum(per_image > 0))} of 40 "
                     "photos differ from libjpeg-turbo's")


def gpu_decode(a):
    """--decode gpu against --decode cpu on the same GPU: every image the same status (the hostile
    ones included: what the hardware decoder must not take goes to libjpeg-turbo), scores close
    (the hardware's IDCT and chroma upsampling differ from libjpeg-turbo's), the summary counting
    both decoders; and the same batches through 1 and 3 slots bit for bit, many times over, so
    that a slot whose buffers were reused while still in use shows as a difference."""
    if cuda_devices() == 0:
        print("no CUDA device: skipped")
        sys.exit(77)
    import h5py
    import numpy as np
    sys.path.insert(0, HERE)
    from check_results import read_result
    model = os.path.join(a.dir, "tiny.onnx")
    skip_without_hw_decoder(a, model)
    gpu_decode_crops(a)
    sets = [os.path.join(a.dir, "set.h5"), os.path.join(a.dir, "hostile", "set.h5")]
    # the hostile set repeated: many batches through the slots
    big = os.path.join(a.dir, "gpu_decode_big.h5")
    sh([PY, os.path.join(HERE, "..", "bench", "repeat_set.py"), sets[1], big, "--count", "800"])
    sets.append(big)
    for k, sset in enumerate(sets):
        def go(tag, extra, np_=1, wait=True):
            # the decoder set up before the first batch (a run's first batches go to the CPU
            # while it comes up otherwise): these short runs all reach the hardware, and split
            # alike every time
            hw = ["--decode-wait"] if wait and "cpu" not in extra else []
            out = os.path.join(a.dir, f"gpu_decode_{k}_{tag}.h5")
            p = sh(["mpirun", "-np", str(np_), a.shardinfer, "run", "--model", model, "--input",
                    sset, "--output", out, "--batch", "8", "--overwrite", "--backend", "cuda",
                    "--precision", "fp32"] + extra + hw)
            return out, p
        cpu, _ = go("cpu", ["--decode", "cpu"])
        gpu, p = go("gpu", ["--decode", "gpu"])
        m = re.search(r"--decode gpu: (\d+) images decoded by the GPU", p.stdout)
        if not m or int(m.group(1)) == 0:
            sys.exit(f"FAIL: {sset}: no image decoded by the GPU:\n{p.stdout}")
        if not re.search(r"in use at the end: the planned [0-9.]+ MiB and [0-9.]+ MiB beside it "
                         r"\(CUDA context, libraries, nvJPEG's buffers", p.stdout):
            sys.exit(f"FAIL: {sset}: the summary does not say what is in use beside the plan")
        rc, rg = read_result(cpu), read_result(gpu)
        # the one known difference (tests/test_jpeg.c says why): damaged entropy-coded data in an
        # intact structure, corrupt for libjpeg-turbo, decoded as it reads by the hardware
        msgs = {} if rc["err_index"] is None else dict(zip(rc["err_index"].tolist(), rc["err_msg"]))
        gap = [i for i in np.nonzero(rc["status"] != rg["status"])[0].tolist()
               if rc["status"][i] == 4 and rg["status"][i] == 0 and
               "extraneous bytes" in msgs.get(int(rc["index"][i]), "")]
        diff = [i for i in np.nonzero(rc["status"] != rg["status"])[0].tolist() if i not in gap]
        if diff:
            i = diff[0]
            sys.exit(f"FAIL: {sset}: status of {rc['ids'][i]!r}: {rc['status'][i]} with --decode "
                     f"cpu, {rg['status'][i]} with --decode gpu ({len(diff)} differ)")
        if gap:
            print(f"gpu-decode: {len(gap)} image(s) corrupt for libjpeg-turbo (extraneous bytes "
                  "in an intact structure) decoded by the hardware: the documented gap")
        ok = (rc["status"] == 0) & (rg["status"] == 0)
        top1 = float(np.mean(rc["topk_class"][ok, 0] == rg["topk_class"][ok, 0]))
        dp = float(np.max(np.abs(rc["topk_prob"][ok, 0] - rg["topk_prob"][ok, 0])))
        print(f"gpu-decode: {os.path.basename(sset)}: {int(m.group(1))} of {len(rc['ids'])} "
              f"on the GPU, statuses equal, top-1 agreement {top1:.3f}, max |dp| {dp:.4f}")
        if top1 < 0.9 or dp > 0.1:
            sys.exit("FAIL: --decode gpu scores too far from --decode cpu")
        if sset != big:
            # --decode gpu-exact: --decode cpu's file (the hardware's images get libjpeg-turbo's
            # pixels, io/yuv.h; the ones the CPU decodes at a DCT scale stay with it), with and
            # without --exact-preprocess
            for tag, extra in (("", []), ("_full", ["--exact-preprocess"])):
                cpu_x, _ = go(f"cpu_x{tag}", ["--decode", "cpu"] + extra)
                gpu_x, p = go(f"gpu_exact{tag}", ["--decode", "gpu-exact"] + extra)
                m = re.search(r"(\d+) images decoded by the GPU", p.stdout)
                print(f"gpu-decode: --decode gpu-exact{' --exact-preprocess' if extra else ''}: "
                      f"{m.group(1) if m else 0} images on the GPU, --decode cpu's file")
                if extra and not (m and int(m.group(1)) > 0):
                    sys.exit("FAIL: --decode gpu-exact decoded nothing on the GPU")
                if not gap:
                    sh([PY, os.path.join(HERE, "check_results.py"), "compare", cpu_x, gpu_x])
        if sset == big:
            # recycled slots: 1 slot vs 3 vs 3 again, bit for bit, with the split between the
            # hardware and the CPU fixed (it follows measured rates otherwise): all on the
            # hardware, and half of them on the CPU
            ones = {}
            for share in ("0", "0.5"):
                fixed = ["--decode", "gpu", "--decode-cpu-share", share]
                one, _ = go(f"slots1_{share}", fixed + ["--slots", "1"])
                ones[share] = one
                for rep in range(2):
                    three, _ = go(f"slots3_{share}_{rep}", fixed + ["--slots", "3"])
                    with h5py.File(one) as f1, h5py.File(three) as f3:
                        for name in ("status", "topk_class", "topk_prob"):
                            if not np.array_equal(f1[name][()], f3[name][()]):
                                sys.exit(f"FAIL: /{name} differs between --slots 1 and 3 "
                                         f"(CPU share {share})")
            # 2 ranks: other batches, so the same images only with the split fixed at "all the
            # hardware can take" (a share splits each batch's images by their place in it)
            two, _ = go("np2", ["--decode", "gpu", "--decode-cpu-share", "0"], np_=2)
            sh([PY, os.path.join(HERE, "check_results.py"), "compare", ones["0"], two])
            # batches the decoder rejects as a whole are decoded on the CPU after all: every
            # call failed in a pool of one crop per image (no room to spare for the bitstreams
            # beside the reserves), then every third call with the pool's default size; the
            # statuses are libjpeg-turbo's, the scores --decode cpu's
            import onnx
            dims = [d.dim_value for d in onnx.load(model).graph.input[0].type.tensor_type.shape.dim]
            tight = ["--pack-kb", str((dims[2] * dims[3] * 3 + 1023) // 1024)]
            cpu_tight, _ = go("cpu_tight", ["--decode", "cpu"] + tight)
            for every, extra, ref in (("1", tight, cpu_tight), ("3", [], cpu)):
                os.environ["SI_TEST_GPU_DECODE_REJECT"] = every
                rej, p = go(f"reject{every}", ["--decode", "gpu"] + extra)
                del os.environ["SI_TEST_GPU_DECODE_REJECT"]
                if "decoding its images on the CPU" not in p.stderr:
                    sys.exit(f"FAIL: SI_TEST_GPU_DECODE_REJECT={every}: no batch fell back")
                if every == "1":  # all of it libjpeg-turbo's: --decode cpu's file
                    sh([PY, os.path.join(HERE, "check_results.py"), "compare", ref, rej])
                    continue
                sr, sj = read_result(ref)["status"], read_result(rej)["status"]
                odd = [i for i in np.nonzero(sr != sj)[0].tolist() if not (sr[i] == 4 and sj[i] == 0)]
                if odd:
                    sys.exit(f"FAIL: SI_TEST_GPU_DECODE_REJECT=3: {len(odd)} statuses differ from "
                             "--decode cpu")
        if sset == big:
            # as a run goes by default: its first batches on the CPU while the decoder comes up,
            # then the hardware; the same statuses, every image counted once
            lazy, p = go("lazy", ["--decode", "gpu"], wait=False)
            m = re.search(r"--decode gpu: (\d+) images decoded by the GPU's JPEG decoder, the other "
                          r"(\d+) on the CPU", p.stdout)
            sl, sc = read_result(lazy)["status"], rc["status"]
            odd = [i for i in np.nonzero(sl != sc)[0].tolist() if not (sc[i] == 4 and sl[i] == 0)]
            if odd or (m and int(m.group(1)) + int(m.group(2)) != len(sc)):
                sys.exit(f"FAIL: the decoder set up during the run: {len(odd)} statuses differ "
                         f"from --decode cpu, or the images are not all counted:\n{p.stdout}")
            print(f"gpu-decode: decoder set up during the run: "
                  f"{m.group(1) if m else 0} of {len(sc)} on the GPU, statuses equal")
    gpu_decode_absent(a, model, sets[0])
    print("gpu-decode: OK")


def gpu_decode_absent(a, model, sset):
    """A GPU of a kind that has hardware decoders, whose decoder does not come up
    (SI_TEST_NO_HW_JPEG: the probe says no after the engine has planned for it, as on a MIG
    slice without them): --decode auto runs on the CPU's decoder, says why and gives --decode
    cpu's file; --decode gpu stops with one message; 2 ranks agree."""
    def run(tag, extra, np_=1, rc=0):
        out = os.path.join(a.dir, f"gpu_decode_absent_{tag}.h5")
        p = sh(["mpirun", "-np", str(np_), "-x", "SI_TEST_NO_HW_JPEG=1", a.shardinfer, "run",
                "--model", model, "--input", sset, "--output", out, "--batch", "8",
                "--overwrite", "--backend", "cuda", "--precision", "fp32"] + extra, expect_rc=rc)
        return out, p
    cpu, _ = run("cpu", ["--decode", "cpu"])
    for np_ in (1, 2):
        auto, p = run(f"auto{np_}", [], np_=np_)
        if "decode cpu (auto: SI_TEST_NO_HW_JPEG is set)" not in p.stderr:
            sys.exit(f"FAIL: --decode auto without the decoder: no 'decode cpu (auto: ...)' line")
        if "images decoded by the GPU" in p.stdout:
            sys.exit("FAIL: --decode auto without the decoder: images decoded by the GPU")
        sh([PY, os.path.join(HERE, "check_results.py"), "compare", cpu, auto])
    _, p = run("gpu", ["--decode", "gpu"], rc=None)
    if p.returncode == 0 or "--decode gpu on rank 0" not in p.stderr or \
            "SI_TEST_NO_HW_JPEG is set" not in p.stderr:
        sys.exit(f"FAIL: --decode gpu without the decoder: exit {p.returncode}, no clear message")
    print("gpu-decode: a decoder that does not come up: --decode auto on the CPU, --decode gpu "
          "refused")


def gpu_decode_fuzz(a):
    """A bounded fuzz run of --decode gpu: rounds of mutated JPEGs (bits flipped anywhere or in the
    headers, bytes overwritten, inserted or cut, truncations, forged sizes), each round packed
    and run with --decode gpu and --decode cpu. Neither may crash, hang or lose an image; every
    status must be the CPU's, except the documented gap (entropy-coded data that libjpeg-turbo
    calls corrupt, decoded as it reads by the hardware). Runs --seconds, then prints the tally."""
    import random
    import time
    import h5py
    sys.path.insert(0, HERE)
    from check_results import read_result
    if cuda_devices() == 0:
        print("no CUDA device: skipped")
        sys.exit(77)
    seeds = []
    for sset in (os.path.join(a.dir, "set.h5"), os.path.join(a.dir, "hostile", "set.h5")):
        with h5py.File(sset, "r") as f:
            off, data = f["/images/offsets"][:], f["/images/data"][:]
        seeds += [data[off[i]:off[i + 1]].tobytes() for i in range(len(off) - 1)]
    seeds = [s for s in seeds if s[:2] == b"\xff\xd8" and len(s) > 600]
    rng = random.Random(a.seed)

    def mutate(b):
        b = bytearray(b)
        kind = rng.randrange(7)
        if kind == 0:      # bits anywhere
            for _ in range(rng.randint(1, 16)):
                i = rng.randrange(len(b))
                b[i] ^= 1 << rng.randrange(8)
        elif kind == 1:    # bits in the headers
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(min(len(b), 700))
                b[i] ^= 1 << rng.randrange(8)
        elif kind == 2:    # a run overwritten
            i = rng.randrange(len(b))
            n = rng.randint(1, 64)
            b[i:i + n] = bytes(rng.randrange(256) for _ in range(n))
        elif kind == 3:    # a chunk inserted, or one cut out
            i, n = rng.randrange(len(b)), rng.randint(1, 256)
            if rng.random() < 0.5:
                b[i:i] = bytes(rng.randrange(256) for _ in range(n))
            else:
                del b[i:i + n]
        elif kind == 4:    # truncated
            b = b[:rng.randrange(2, len(b))]
        elif kind == 5:    # a forged size in the frame header
            i = b.find(b"\xff\xc0")
            if i > 0 and i + 9 < len(b):
                b[i + 5:i + 9] = rng.randrange(65536).to_bytes(2, "big") + \
                    rng.randrange(65536).to_bytes(2, "big")
        else:              # a marker byte changed
            marks = [i for i in range(len(b) - 1) if b[i] == 0xFF and b[i + 1] not in (0, 0xFF)]
            if marks:
                b[rng.choice(marks) + 1] = rng.randrange(256)
        return bytes(b)

    model = os.path.join(a.dir, "tiny.onnx")
    skip_without_hw_decoder(a, model)
    tally, rounds, images, t_end = {}, 0, 0, time.time() + a.seconds
    while time.time() < t_end:
        d = os.path.join(a.dir, "fuzz", f"r{rounds}")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(os.path.join(d, "img"))
        for i in range(a.count):
            b = seeds[i % len(seeds)] if i % 4 == 0 else mutate(rng.choice(seeds))
            with open(os.path.join(d, "img", f"{i:05d}.jpg"), "wb") as f:
                f.write(b)
        sset = os.path.join(d, "set.h5")
        sh([a.shardinfer, "pack", os.path.join(d, "img"), "--output", sset])
        res = {}
        for dec in ("cpu", "gpu"):
            out = os.path.join(d, f"{dec}.h5")
            # the hardware's RGB (its chroma recovered) and its planes by turns
            mode = dec if dec == "cpu" or rounds % 2 == 0 else "gpu-exact"
            sh([a.shardinfer, "run", "--model", model, "--input", sset, "--output", out,
                "--batch", "64", "--backend", "cuda", "--precision", "fp32", "--decode", mode,
                "--progress", "none"] +
               # every batch within the hardware's reach goes to it
               ([] if mode == "cpu" else ["--decode-wait"]))
            res[dec] = read_result(out)
        rc, rg = res["cpu"], res["gpu"]
        for x, y in zip(rc["status"].tolist(), rg["status"].tolist()):
            tally[(x, y)] = tally.get((x, y), 0) + 1
            if x != y and not (x == 4 and y == 0):
                sys.exit(f"FAIL: round {rounds} (seed {a.seed}, kept in {d}): status {x} with "
                         f"--decode cpu, {y} with --decode gpu")
        # every image once, in order, with the status just compared (and scores where OK)
        for dec in ("cpu", "gpu"):
            exp = os.path.join(d, f"{dec}.status")
            with open(exp, "w") as f:
                for name, code in zip(res[dec]["ids"], res[dec]["status"].tolist()):
                    f.write(f"{name}\t{code}\n")
            sh([PY, os.path.join(HERE, "check_results.py"), "verify", os.path.join(d, f"{dec}.h5"),
                "--input", sset, "--expect-status-file", exp])
        shutil.rmtree(d)
        rounds += 1
        images += a.count
    pairs = ", ".join(f"cpu {x}/gpu {y}: {n}" for (x, y), n in sorted(tally.items()))
    print(f"gpu-decode-fuzz: OK: {rounds} rounds, {images} images (3 in 4 mutated), seed "
          f"{a.seed}; statuses {pairs}")


def layouts(a):
    """The same images in every layout (tests/source_ref.py makes them) give identical results:
    packed, h5py vlen, vlen+gzip, a 3-file split by list, glob and directory; and among the
    pre-decoded sets, dense NHWC, NCHW, NCHW+gzip and a 2-file split."""
    src = a.source_dir
    groups = {
        "encoded": ["packed.h5", "vlen.h5", "vlen_gzip.h5", "vlen_split.txt",
                    os.path.join("vlen_split", "part*.h*5"), "vlen_split"],
        "dense": ["dense_nhwc.h5", "dense_nchw.h5", "dense_gzip.h5", "dense_split"],
    }
    for group, specs in groups.items():
        results = []
        for i, spec in enumerate(specs):
            out = os.path.join(a.dir, f"layout_{group}_{i}.h5")
            sh(["mpirun", "-np", "2", a.shardinfer, "run", "--model",
                os.path.join(a.dir, "tiny.onnx"), "--input", os.path.join(src, spec), "--output",
                out, "--batch", "3", "--overwrite", "--exact-preprocess", "-q"])
            results.append(out)
        for r in results[1:]:  # statuses and scores equal; ids differ only where a layout has none
            sh([PY, os.path.join(HERE, "check_results.py"), "compare", results[0], r,
                "--ignore-ids"])
    print("layouts: OK: every encoded layout and every dense layout gives the same results")


def unescape_id(s):
    """docs/output-format.md: an id listed in /ids_escaped has \\xNN for each byte that was not
    UTF-8 and \\\\ for each backslash."""
    out, i, raw = bytearray(), 0, s.encode()
    while i < len(raw):
        if raw[i:i + 2] == b"\\\\":
            out += b"\\"
            i += 2
        elif raw[i:i + 2] == b"\\x":
            out.append(int(raw[i + 2:i + 4], 16))
            i += 4
        else:
            out.append(raw[i])
            i += 1
    return bytes(out)


def odd_ids(a):
    """Ids that are not UTF-8 (file names in Latin-1) come out readable by h5py, escaped and
    listed in /ids_escaped so that the bytes can be had back; UTF-8 ids stay as they are."""
    import h5py
    import numpy as np
    d = os.path.join(a.dir, "odd_ids")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    photo = np.frombuffer(open(os.path.join(a.dir, "images", "photo_00.jpg"), "rb").read(),
                          np.uint8)
    # ids as bytes in the vlen layout (h5py writes them unchecked; `pack` refuses such names)
    names = [b"plain.jpg", b"caf\xe9.jpg", b"back\\slash.jpg", "na\u00efve.jpg".encode()]
    sset, out = os.path.join(d, "set.h5"), os.path.join(d, "out.h5")
    with h5py.File(sset, "w") as f:
        g = f.create_group("images")
        j = g.create_dataset("jpeg", (len(names),), dtype=h5py.vlen_dtype(np.uint8))
        for i in range(len(names)):
            j[i] = photo
        g.create_dataset("ids", data=np.array(names, dtype=object),
                         dtype=h5py.string_dtype(encoding="ascii"))
    p = sh(["mpirun", "-np", "1", a.shardinfer, "run", "--model", os.path.join(a.dir, "tiny.onnx"),
            "--input", sset, "--output", out, "--overwrite"])
    with h5py.File(out, "r") as f:
        ids = list(f["ids"].asstr()[:])  # fails on bytes that are not UTF-8
        esc = list(f["ids_escaped"][:]) if "ids_escaped" in f else []
        status = f["status"][:]
    got = sorted(unescape_id(ids[i]) if i in esc else ids[i].encode() for i in range(len(ids)))
    want = sorted(names)
    escaped = [ids[i] for i in esc]
    ok = (got == want and escaped == ["caf\\xe9.jpg"] and (status == 0).all()
          and "not UTF-8" in p.stderr)
    print(f"{'ok  ' if ok else 'FAIL'} odd ids: {ids} escaped rows {esc}")
    if not ok:
        sys.exit("FAIL: ids that are not UTF-8")
    print("odd-ids: OK")


def output_lock(a):
    """A second run on the output a running job writes, with --overwrite, plainly or with
    --resume, is refused naming the job (host, pid) and touches nothing: the first job finishes
    its file (issue 15, item 3)."""
    import time
    d = os.path.join(a.dir, "lock")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    out, sset = os.path.join(d, "out.h5"), os.path.join(a.dir, "set.h5")
    first = ["mpirun", "-np", "1", a.shardinfer, "run", "--model", os.path.join(a.dir, "tiny.onnx"),
             "--input", sset, "--output", out, "--batch", "1", "--flush-interval", "0.05",
             "--progress", "none", "--test-slow-rank", "0:400"]
    p1 = subprocess.Popen(first, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=mpi_env())
    t0 = time.time()
    while not os.path.exists(out + ".journal") and time.time() - t0 < 60:
        time.sleep(0.05)
    failures = 0
    for extra in (["--overwrite"], [], ["--resume"]):
        p = sh(["mpirun", "-np", "2", a.shardinfer, "run", "--model",
                os.path.join(a.dir, "tiny.onnx"), "--input", sset, "--output", out, *extra],
               expect_rc=None, timeout=60)
        msgs = [l for l in p.stderr.splitlines() if l.startswith("shardinfer")]
        ok = (p.returncode == 1 and len(msgs) == 1 and "another job is writing it" in msgs[0]
              and "pid " in msgs[0] and p1.poll() is None
              and os.path.exists(out + ".partial") and os.path.exists(out + ".journal"))
        print(f"{'ok  ' if ok else 'FAIL'} second run {extra}: rc={p.returncode} {msgs}")
        failures += not ok
    still = p1.poll() is None
    o, e = p1.communicate(timeout=120)
    ok = p1.returncode == 0 and os.path.exists(out) and not os.path.exists(out + ".lock")
    print(f"{'ok  ' if ok and still else 'FAIL'} the first job: rc={p1.returncode}, "
          f"running while refused: {still}, result written, lock removed: {ok}")
    failures += not (ok and still)
    if failures:
        sys.stdout.write(o.decode(errors="replace") + e.decode(errors="replace"))
        sys.exit(f"FAIL: {failures} lock cases misbehaved")
    print("output-lock: OK")


def thread_counts(a):
    """The same run with 1, 2 and 4 threads, on 1 and 2 ranks, at batch 8 and at batch 1 (where a
    convolution's GEMM is shared among the threads) gives the same file bit for bit: the CPU's
    arithmetic does not depend on how many threads share it (issue 15, item 8)."""
    import h5py
    import numpy as np
    sset, outs = os.path.join(a.dir, "set.h5"), {}
    for batch in ("8", "1"):
        for np_, threads in ((1, "1"), (1, "2"), (1, "4"), (2, "1")):
            out = os.path.join(a.dir, f"threads_b{batch}_np{np_}_t{threads}.h5")
            sh(["mpirun", "-np", str(np_), a.shardinfer, "run", "--model", a.model, "--input", sset,
                "--output", out, "--overwrite", "--post", "raw", "--batch", batch, "--threads",
                threads, "-q"])
            with h5py.File(out, "r") as f:
                outs[(batch, np_, threads)] = (f["raw/logits"][:], f["status"][:])
        base = outs[(batch, 1, "1")]
        for key, (logits, status) in outs.items():
            if key[0] != batch:
                continue
            same = np.array_equal(logits, base[0], equal_nan=True) and np.array_equal(status,
                                                                                      base[1])
            print(f"{'ok  ' if same else 'FAIL'} batch {batch}, {key[1]} rank(s) x {key[2]} "
                  f"thread(s) vs 1 x 1: max |diff| {np.nanmax(np.abs(logits - base[0])):.3g}")
            if not same:
                sys.exit("FAIL: the result depends on the thread or rank count")
    print("thread-counts: OK: bit for bit across threads and ranks")


def autotune(a):
    """The autotune cache (issue 16, item 6): a cold start times the convolutions and writes the
    cache, a warm one takes every choice from it and gives the same file bit for bit, a damaged
    cache is said, ignored and rewritten, and `off` writes nothing."""
    import h5py
    import numpy as np
    if not cuda_devices():
        print("SKIP: no CUDA device")
        sys.exit(77)
    cache = os.path.join(a.dir, "autotune_cache")
    shutil.rmtree(cache, ignore_errors=True)
    sset = os.path.join(a.dir, "set.h5")

    def go(tag, cache_arg):
        out = os.path.join(a.dir, f"autotune_{tag}.h5")
        p = sh([a.shardinfer, "run", "--backend", "cuda", "--model", a.model, "--input", sset,
                "--output", out, "--overwrite", "--post", "raw", "--batch", "8",
                "--autotune-cache", cache_arg])
        m = re.search(r"(\d+) of (\d+) convolutions' and (\d+) of (\d+) matmuls' algorithms "
                      r"and \d+ of \d+ attention choices from the autotune cache", p.stderr)
        if not m:
            sys.exit(f"FAIL: {tag}: the engine line does not say what the cache gave")
        with h5py.File(out, "r") as f:  # --post raw: the model's one output under /raw
            logits = f["raw"][list(f["raw"])[0]][:]
        print(f"{tag}: {m.group(1)} of {m.group(2)} convs, {m.group(3)} of {m.group(4)} matmuls "
              "from the cache")
        return int(m.group(1)) + int(m.group(3)), int(m.group(2)) + int(m.group(4)), logits, p.stderr
    hit, total, cold, _ = go("cold", cache)
    files = os.listdir(cache) if os.path.isdir(cache) else []
    if hit != 0 or total == 0 or len(files) != 1:
        sys.exit(f"FAIL: a cold start must time every conv and write one file: {hit}/{total} "
                 f"{files}")
    hit, total2, warm, _ = go("warm", cache)
    if hit != total or total2 != total or not np.array_equal(cold, warm, equal_nan=True):
        sys.exit(f"FAIL: a warm start must take all {total} choices and give the same logits")
    path = os.path.join(cache, files[0])
    with open(path, "r+b") as f:  # damage an entry
        f.seek(400)
        b = f.read(1)
        f.seek(400)
        f.write(bytes([b[0] ^ 0xFF]))
    hit, _, again, err = go("damaged", cache)
    ok = np.isfinite(cold)
    rel = np.abs(again[ok] - cold[ok]).max() / max(np.abs(cold[ok]).max(), 1e-30)
    said = [line for line in err.splitlines() if "autotune cache" in line and "damaged" in line]
    print(f"damaged: said {said[:1]}, max|diff|/max|ref| vs the cold run {rel:.3g}")
    if hit != 0 or not said or rel > 1e-2:  # another algorithm may be timed fastest: FP16's bound
        sys.exit("FAIL: a damaged cache must be said, ignored and rewritten")
    hit, _, _, _ = go("rewritten", cache)
    if hit != total:
        sys.exit("FAIL: the damaged cache was not rewritten")
    before = sorted(os.listdir(cache))
    hit, _, _, _ = go("off", "off")
    if hit != 0 or sorted(os.listdir(cache)) != before:
        sys.exit("FAIL: --autotune-cache off must neither read nor write")
    print(f"autotune: OK: {total} convolutions; warm start bit for bit; damage detected")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shardinfer", required=True)
    ap.add_argument("--dir", required=True)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("prepare")
    r = sub.add_parser("run")
    r.add_argument("--np", type=int, required=True)
    c = sub.add_parser("compare")
    c.add_argument("--np", type=int, nargs="+", required=True)
    d = sub.add_parser("demo")
    d.add_argument("--model", required=True)
    d.add_argument("--labels", required=True)
    sub.add_parser("bad-inputs")
    lay = sub.add_parser("layouts")
    lay.add_argument("--source-dir", required=True, help="tests/source_ref.py's output directory")
    h = sub.add_parser("hostile")
    h.add_argument("--io-dir", required=True, help="tests/io_ref.py's output directory")
    sub.add_parser("gpu-resize")
    sub.add_parser("gpu-decode")
    fz = sub.add_parser("gpu-decode-fuzz")
    fz.add_argument("--seconds", type=float, default=60)
    fz.add_argument("--count", type=int, default=2000, help="images a round")
    fz.add_argument("--seed", type=int, default=16)
    sub.add_parser("odd-ids")
    sub.add_parser("output-lock")
    tc = sub.add_parser("thread-counts")
    tc.add_argument("--model", required=True)
    at = sub.add_parser("autotune")
    at.add_argument("--model", required=True)
    a = ap.parse_args()
    {"prepare": prepare, "run": run, "compare": compare, "demo": demo,
     "bad-inputs": bad_inputs, "hostile": hostile, "layouts": layouts,
     "gpu-resize": gpu_resize, "gpu-decode": gpu_decode,
     "gpu-decode-fuzz": gpu_decode_fuzz, "odd-ids": odd_ids, "output-lock": output_lock,
     "thread-counts": thread_counts, "autotune": autotune}[a.cmd](a)


if __name__ == "__main__":
    main()
