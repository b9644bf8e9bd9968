#!/usr/bin/env python3
"""Reference image sets for test_source, written with tools we did not write (Pillow, h5py).

  source_ref.py gen OUTDIR SHARDINFER

From the same 20 JPEGs (random crops of skimage's photos, seeded) it writes every layout
io/source.h reads: packed (by `SHARDINFER pack`), vlen (h5py.vlen_dtype(np.uint8)) plain and
chunked + gzip, the vlen set split in files (a list file, a glob, a directory), dense NHWC and
NCHW of Pillow's decoded pixels (resized to one size first, since dense needs one shape), dense
chunked + gzip and split in two files; 100 files of one image; and the hostile files. The pixels Pillow decoded are in
pixels.rgb, Pillow's resize + center crop of them (torchvision's arithmetic, as io_ref.py) in
dense_crop.rgb, the ids in ids.txt; manifest.txt gives the numbers test_source needs.
"""
import os
import random
import shutil
import subprocess
import sys

import h5py
import numpy as np
from PIL import Image

SKIMAGE = "/usr/lib/python3/dist-packages/skimage/data"
N = 20
DENSE_W, DENSE_H = 300, 260
CROP = (64, 56, 48)  # resize, crop_h, crop_w for dense_crop.rgb
MANY = 100  # files of one image each in vlen_many/


def resized_size(w, h, size):
    """torchvision.transforms.functional._compute_resized_output_size for an int size."""
    short, long_ = (w, h) if w <= h else (h, w)
    new_short, new_long = size, int(size * long_ / short)
    return (new_short, new_long) if w <= h else (new_long, new_short)


def resize_crop(im, resize, crop_h, crop_w):
    nw, nh = resized_size(im.width, im.height, resize)
    im = im.resize((nw, nh), Image.BILINEAR)
    top = int(round((nh - crop_h) / 2.0))
    left = int(round((nw - crop_w) / 2.0))
    return im.crop((left, top, left + crop_w, top + crop_h)).tobytes()


def make_jpegs(rng, outdir):
    photos = ["chelsea.png", "coffee.png", "astronaut.png", "motorcycle_left.png", "rocket.jpg",
              "hubble_deep_field.jpg", "retina.jpg", "camera.png", "coins.png"]
    names, ids = [], []
    for i in range(N):
        photo = photos[i % len(photos)]
        im = Image.open(os.path.join(SKIMAGE, photo))
        im = im.convert("L" if im.mode in ("L", "I", "I;16") else "RGB")
        bw = rng.randint(im.width // 3, im.width)
        bh = rng.randint(im.height // 3, im.height)
        x, y = rng.randint(0, im.width - bw), rng.randint(0, im.height - bh)
        w, h = rng.randint(90, 520), rng.randint(90, 520)
        im = im.crop((x, y, x + bw, y + bh)).resize((w, h), Image.LANCZOS)
        name = os.path.join(outdir, "jpeg", f"img{i:02d}.jpg")
        kw = dict(quality=rng.randint(60, 95), progressive=(i % 7 == 3))
        if im.mode == "RGB":
            kw["subsampling"] = rng.choice(["4:2:0", "4:2:2", "4:4:4"])
        im.save(name, "JPEG", **kw)
        names.append(name)
        stem = photo.split(".")[0]
        ids.append(f"img{i:02d}-{stem}" + ("-café" if i == 5 else ""))
    return names, ids


def vlen_file(path, records, ids, chunks=None, group="data", extra=None):
    with h5py.File(path, "w") as f:
        g = f.require_group(group) if group else f
        kw = dict(chunks=chunks, compression="gzip", compression_opts=6, shuffle=True) \
            if chunks else {}
        d = g.create_dataset("jpeg", (len(records),), dtype=h5py.vlen_dtype(np.uint8), **kw)
        for i, r in enumerate(records):
            d[i] = np.frombuffer(r, dtype=np.uint8)
        if ids is not None:
            g.create_dataset("ids", data=ids, dtype=h5py.string_dtype())
        if extra:
            extra(f)


def dense_file(path, pix, ids=None, nchw=False, name="pixels", chunks=None):
    with h5py.File(path, "w") as f:
        a = pix.transpose(0, 3, 1, 2) if nchw else pix
        kw = dict(chunks=chunks, compression="gzip", compression_opts=4, shuffle=True) \
            if chunks else {}
        d = f.create_dataset(name, data=np.ascontiguousarray(a), **kw)
        if ids is not None:
            # fixed-length byte strings, as np.array([...], dtype="S") users write (UTF-8 inside)
            enc = [s.encode() for s in ids]
            d.parent.create_dataset("ids", data=np.array(enc, dtype=f"S{max(map(len, enc))}"))


def gen(out, shardinfer):
    rng = random.Random(20240611)
    nprng = np.random.default_rng(20240611)
    if os.path.isdir(out):
        shutil.rmtree(out)
    for d in ("jpeg", "vlen_split", "vlen_split/skipme.h5", "dense_split", "empty_dir", "bad"):
        os.makedirs(os.path.join(out, d), exist_ok=True)
    names, ids = make_jpegs(rng, out)
    records = [open(n, "rb").read() for n in names]
    with open(os.path.join(out, "ids.txt"), "w", encoding="utf-8") as f:
        f.writelines(i + "\n" for i in ids)

    # packed, by shardinfer itself
    listing = os.path.join(out, "pack_list.tsv")
    with open(listing, "w", encoding="utf-8") as f:
        f.writelines(f"jpeg/img{i:02d}.jpg\t{ids[i]}\n" for i in range(N))
    subprocess.run([shardinfer, "pack", listing, "--output", os.path.join(out, "packed.h5"),
                    "--overwrite", "--chunk-bytes", "8192"], check=True, stdout=subprocess.DEVNULL)

    # a copy of it with the ids stored a second time elsewhere (the ids_dataset option on a
    # packed set read with its default dataset names)
    shutil.copy(os.path.join(out, "packed.h5"), os.path.join(out, "packed_extra.h5"))
    with h5py.File(os.path.join(out, "packed_extra.h5"), "r+") as f:
        f.create_dataset("extra/names", data=ids, dtype=h5py.string_dtype())

    # packed with other dataset names (offsets_dataset / data_dataset / ids_dataset options)
    with h5py.File(os.path.join(out, "packed_custom.h5"), "w") as f:
        off = np.zeros(N + 1, dtype=np.uint64)
        off[1:] = np.cumsum([len(r) for r in records])
        f.create_dataset("x/bytes", data=np.frombuffer(b"".join(records), dtype=np.uint8))
        f.create_dataset("x/off", data=off)
        f.create_dataset("x/names", data=ids, dtype=h5py.string_dtype())

    vlen_file(os.path.join(out, "vlen.h5"), records, ids)
    vlen_file(os.path.join(out, "vlen_gzip.h5"), records, ids, chunks=(4,))
    parts = [(0, 7), (7, 13), (13, 13), (13, N)]  # one empty file in the middle
    pnames = ["part0.h5", "part1.h5", "part1b_empty.h5", "part2.hdf5"]
    for (a, b), pn in zip(parts, pnames):
        vlen_file(os.path.join(out, "vlen_split", pn), records[a:b], ids[a:b])
    with open(os.path.join(out, "vlen_split", "README.txt"), "w") as f:
        f.write("not an HDF5 file: a directory source skips it\n")
    with open(os.path.join(out, "vlen_split.txt"), "w") as f:
        f.write("# the vlen set in parts: relative, indented, absolute\n\n")
        f.write("vlen_split/part0.h5\n  vlen_split/part1.h5  \n")
        f.write("vlen_split/part1b_empty.h5\r\n")
        f.write(os.path.abspath(os.path.join(out, "vlen_split", "part2.hdf5")) + "\n")

    # many small files: more than the source keeps open at once
    os.makedirs(os.path.join(out, "vlen_many"))
    for k in range(MANY):
        vlen_file(os.path.join(out, "vlen_many", f"m{k:03d}.h5"), [records[k % N]], [ids[k % N]])

    # two image datasets in one file: auto-detection must refuse, --data-dataset picks
    vlen_file(os.path.join(out, "two_candidates.h5"), records, None, group="a",
              extra=lambda f: (f.create_dataset("b/jpeg", data=f["a/jpeg"][:],
                                                dtype=h5py.vlen_dtype(np.uint8)),
                               f.create_dataset("b/ids", data=ids, dtype=h5py.string_dtype())))

    # dense: Pillow's decode, converted to RGB, resized to one size
    pix = np.stack([np.asarray(Image.open(n).convert("RGB").resize((DENSE_W, DENSE_H),
                                                                  Image.BILINEAR))
                    for n in names])  # (N, H, W, 3)
    assert pix.shape == (N, DENSE_H, DENSE_W, 3) and pix.dtype == np.uint8
    pix.tofile(os.path.join(out, "pixels.rgb"))
    with open(os.path.join(out, "dense_crop.rgb"), "wb") as f:
        for k in range(N):
            f.write(resize_crop(Image.fromarray(pix[k]), *CROP))
    dense_file(os.path.join(out, "dense_nhwc.h5"), pix, ids)
    dense_file(os.path.join(out, "dense_nchw.h5"), pix, None, nchw=True, name="images/pixels")
    dense_file(os.path.join(out, "dense_gzip.h5"), pix, ids, chunks=(4, DENSE_H, DENSE_W, 3))
    dense_file(os.path.join(out, "dense_split", "a.h5"), pix[:12])
    dense_file(os.path.join(out, "dense_split", "b.hdf5"), pix[12:])

    # hostile
    bad = os.path.join(out, "bad")
    with open(os.path.join(bad, "list_missing.txt"), "w") as f:
        f.write("../vlen_split/part0.h5\n# the next one does not exist\nnope.h5\n")
    with open(os.path.join(bad, "list_mixed.txt"), "w") as f:
        f.write("../vlen.h5\n../dense_nhwc.h5\n")
    dense_file(os.path.join(bad, "dense_small.h5"), pix[:3, :200], ids[:3])
    with open(os.path.join(bad, "list_odd.txt"), "w") as f:
        f.write("../dense_nhwc.h5\ndense_small.h5\n")
    with h5py.File(os.path.join(bad, "vlen_int32.h5"), "w") as f:
        d = f.create_dataset("images", (3,), dtype=h5py.vlen_dtype(np.int32))
        for i in range(3):
            d[i] = np.arange(i + 2, dtype=np.int32)
    vlen_file(os.path.join(bad, "vlen_noids.h5"), records[:3], None)
    vlen_file(os.path.join(bad, "int_ids.h5"), records[:3], None, group=None,
              extra=lambda f: f.create_dataset("ids", data=np.array([-5, 7, 12345678901])))
    with open(os.path.join(bad, "list_mixed_ids.txt"), "w") as f:
        f.write("../vlen.h5\nvlen_noids.h5\n")
    dense_file(os.path.join(bad, "dense_wide.h5"), pix[:12, :, :200])  # as a.h5, narrower
    amb = nprng.integers(0, 256, (2, 3, 5, 3), dtype=np.uint8)
    amb.tofile(os.path.join(bad, "ambiguous.raw"))
    with h5py.File(os.path.join(bad, "ambiguous.h5"), "w") as f:
        f.create_dataset("pixels", data=amb)
    gray = nprng.integers(0, 256, (3, 1, 4, 5), dtype=np.uint8)  # (N, C, H, W), one channel
    gray.tofile(os.path.join(bad, "gray_nchw.raw"))
    with h5py.File(os.path.join(bad, "gray_nchw.h5"), "w") as f:
        f.create_dataset("gray", data=gray)
    with open(os.path.join(bad, "not_a_list.bin"), "wb") as f:
        f.write(records[0])

    with open(os.path.join(out, "manifest.txt"), "w") as f:
        f.write(f"{N} {DENSE_H} {DENSE_W} {CROP[0]} {CROP[1]} {CROP[2]} {MANY}\n")
    print(f"source_ref.py: {N} JPEGs and every layout in {out}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "gen":
        gen(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
