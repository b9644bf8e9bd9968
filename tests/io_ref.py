#!/usr/bin/env python3
"""Reference data and checks for the io/ tests, from tools we did not write (Pillow, h5py).

  io_ref.py gen OUTDIR             test JPEGs cut from real photos (skimage's data), Pillow's
                                   decode and resize+crop of each, random RGB images with Pillow's
                                   resize of them, and hostile files; JPEGs with each EXIF
                                   orientation and Pillow's exif_transpose of them; Pillow's
                                   draft() (DCT-scaled) preprocessing of all of them; manifests
                                   *.tsv in OUTDIR. The resizes are BILINEAR, and BICUBIC too
                                   (files *.bicubic.rgb beside the BILINEAR ones) for the good
                                   JPEGs, the random images and the DCT-scaled ones.
  io_ref.py check-pack H5 LISTING  reads a packed set with h5py and compares it with LISTING
                                   (lines: id TAB source-file [TAB label]).
  io_ref.py check-result H5 EXPECTED  reads a result file with h5py and compares it with the
                                   text the C test wrote (same format as dump_result below).
  io_ref.py make-set H5 N          writes an image set the way a user would with h5py (image i:
                                   bytes (i*7 + j) % 251 for j < 13*i + 5, id "h5py-é-i").

The reference preprocessing is torchvision's Resize(int) + CenterCrop on a PIL image, written
out here (torchvision is not a dependency): Resize computes the long side with int(), then
calls Image.resize(..., BILINEAR), or BICUBIC with interpolation=BICUBIC (CLIP, DINOv2);
CenterCrop rounds with Python's round(). The EXIF
orientation is applied first with ImageOps.exif_transpose, as torchvision users are told to.
"""
import ctypes
import ctypes.util
import io
import os
import random
import sys

import numpy as np
from PIL import Image, ImageOps

SKIMAGE = "/usr/lib/python3/dist-packages/skimage/data"


def resized_size(w, h, size):
    """torchvision.transforms.functional._compute_resized_output_size for an int size."""
    short, long_ = (w, h) if w <= h else (h, w)
    new_short, new_long = size, int(size * long_ / short)
    return (new_short, new_long) if w <= h else (new_long, new_short)


# the filters the C code offers: name (its si_interp_name, the file suffix) -> Pillow's resample
FILTERS = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC}


def suffix(interp):
    """What the reference files of a filter add before .rgb: nothing for the default."""
    return "" if interp == "bilinear" else "." + interp


def reference(im, resize, crop_h, crop_w, interp="bilinear"):
    im = im.convert("RGB")
    nw, nh = resized_size(im.width, im.height, resize)
    im = im.resize((nw, nh), FILTERS[interp])
    top = int(round((nh - crop_h) / 2.0))
    left = int(round((nw - crop_w) / 2.0))
    return im.crop((left, top, left + crop_w, top + crop_h)).tobytes()


def scale_denom(w, h, resize, crop_h, crop_w):
    """The DCT scale io/jpeg.c picks outside exact mode: the largest s of 8, 4, 2 whose
    ceil-scaled shorter side is still >= resize and whose resized image still holds the crop."""
    for s in (8, 4, 2):
        sw, sh = -(-w // s), -(-h // s)
        nw, nh = resized_size(sw, sh, resize)
        if min(sw, sh) >= resize and crop_h <= nh and crop_w <= nw:
            return s
    return 1


def drafted(data, resize, crop_h, crop_w, interp="bilinear"):
    """Pillow's own DCT-scaled path: draft() asks libjpeg for 1/s scaling, the same libjpeg
    feature io/jpeg.c uses outside exact mode; then exif_transpose, resize and crop.
    Returns (s, crop bytes)."""
    im = Image.open(io.BytesIO(data))
    w, h = im.size
    swap = im.getexif().get(0x0112, 1) in (5, 6, 7, 8)
    s = scale_denom(h if swap else w, w if swap else h, resize, crop_h, crop_w)
    if s > 1:
        im.draft("RGB", (w // s, h // s))
        assert im.size == (-(-w // s), -(-h // s)), (im.size, w, h, s)
    return s, reference(ImageOps.exif_transpose(im), resize, crop_h, crop_w, interp)


def pick_preproc(rng, w, h):
    """Random resize and crop; odd differences exercise the banker's rounding of the crop."""
    resize = rng.choice([224, 232, 256, 257, 300, 64, 33])
    crop_h = rng.randint(max(1, resize // 2), resize)
    crop_w = rng.choice([crop_h, rng.randint(max(1, resize // 2), resize)])
    return resize, crop_h, crop_w


class TurboJPEG:
    """The system libturbojpeg through ctypes, to prove that a corrupted file is reported as
    corrupt by libjpeg (Pillow silences libjpeg's warnings, so it cannot tell)."""

    def __init__(self):
        name = ctypes.util.find_library("turbojpeg") or "libturbojpeg.so.0"
        self.lib = ctypes.CDLL(name)
        self.lib.tjInitDecompress.restype = ctypes.c_void_p
        self.lib.tjGetErrorStr2.restype = ctypes.c_char_p
        self.lib.tjGetErrorStr2.argtypes = [ctypes.c_void_p]
        self.lib.tjDecompress2.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_ulong,
                                           ctypes.c_char_p, ctypes.c_int, ctypes.c_int,
                                           ctypes.c_int, ctypes.c_int, ctypes.c_int]
        self.h = self.lib.tjInitDecompress()

    def decode_error(self, data, w, h):
        out = ctypes.create_string_buffer(w * h * 3)
        TJPF_RGB, TJFLAG_STOPONWARNING = 0, 8192
        r = self.lib.tjDecompress2(self.h, data, len(data), out, w, 0, h, TJPF_RGB,
                                   TJFLAG_STOPONWARNING)
        return self.lib.tjGetErrorStr2(self.h).decode() if r != 0 else None


def scan_start(data):
    """Offset of the first byte of entropy-coded data after the first SOS marker."""
    i = 2
    while i < len(data):
        assert data[i] == 0xFF, "marker expected"
        m = data[i + 1]
        seglen = (data[i + 2] << 8) | data[i + 3]
        if m == 0xDA:
            return i + 2 + seglen
        i += 2 + seglen
    raise ValueError("no SOS")


def sof_offset(data):
    i = 2
    while i < len(data):
        m = data[i + 1]
        if m in (0xC0, 0xC1, 0xC2):
            return i
        i += 2 + ((data[i + 2] << 8) | data[i + 3])
    raise ValueError("no SOF")


def save(im, **kw):
    buf = io.BytesIO()
    im.save(buf, "JPEG", **kw)
    return buf.getvalue()


def noise_refs(out, name, a, resize, ch, cw):
    """A random image's pixels and Pillow's resize + crop of them with each filter."""
    with open(os.path.join(out, name + ".src.rgb"), "wb") as f:
        f.write(a.tobytes())
    for interp in FILTERS:
        with open(os.path.join(out, name + f".crop{suffix(interp)}.rgb"), "wb") as f:
            f.write(reference(Image.fromarray(a), resize, ch, cw, interp))


def gen(out):
    rng = random.Random(20240501)
    nprng = np.random.default_rng(20240501)
    os.makedirs(out, exist_ok=True)

    def photo(name):
        return Image.open(os.path.join(SKIMAGE, name))

    def cut(im, w, h):
        """A random box of the photo, scaled to w x h (LANCZOS only to make the test image)."""
        bw = rng.randint(im.width // 2, im.width)
        bh = rng.randint(im.height // 2, im.height)
        x, y = rng.randint(0, im.width - bw), rng.randint(0, im.height - bh)
        return im.crop((x, y, x + bw, y + bh)).resize((w, h), Image.LANCZOS)

    q = lambda: rng.randint(50, 95)
    good = []  # (name, bytes)
    rgb = lambda n: photo(n).convert("RGB")
    good.append(("chelsea_420.jpg", save(cut(rgb("chelsea.png"), 401, 287), quality=q(),
                                         subsampling="4:2:0")))
    good.append(("coffee_444.jpg", save(cut(rgb("coffee.png"), 512, 341), quality=q(),
                                        subsampling="4:4:4")))
    good.append(("astronaut_422.jpg", save(cut(rgb("astronaut.png"), 383, 450), quality=q(),
                                           subsampling="4:2:2")))
    good.append(("motorcycle_progressive.jpg",
                 save(cut(rgb("motorcycle_left.png"), 640, 433), quality=q(), progressive=True)))
    good.append(("retina_restart.jpg", save(cut(rgb("retina.jpg"), 700, 523), quality=q(),
                                            restart_marker_blocks=7)))
    good.append(("camera_gray.jpg", save(cut(photo("camera.png"), 333, 401), quality=q())))
    good.append(("coins_gray_progressive.jpg",
                 save(cut(photo("coins.png"), 300, 250), quality=q(), progressive=True)))
    good.append(("coffee_cmyk.jpg", save(cut(rgb("coffee.png"), 420, 300).convert("CMYK"),
                                         quality=q())))
    good.append(("odd_301x227.jpg", save(cut(rgb("chelsea.png"), 301, 227), quality=q())))
    good.append(("odd_1000x50.jpg", save(cut(rgb("coffee.png"), 1000, 50), quality=q())))
    good.append(("odd_50x1000.jpg", save(cut(rgb("astronaut.png"), 50, 1000), quality=q())))
    good.append(("small_17x13.jpg", save(cut(rgb("chelsea.png"), 17, 13), quality=q())))
    good.append(("tiny_3x2.jpg", save(cut(rgb("coffee.png"), 3, 2), quality=q())))
    good.append(("square_256.jpg", save(cut(rgb("astronaut.png"), 256, 256), quality=q(),
                                        optimize=True)))
    good.append(("hubble_1000x872_q95.jpg", save(rgb("hubble_deep_field.jpg"), quality=95)))
    for name in ("rocket.jpg", "retina.jpg"):  # real camera/encoder output, as shipped
        with open(os.path.join(SKIMAGE, name), "rb") as f:
            good.append(("orig_" + name, f.read()))

    with open(os.path.join(out, "jpeg_manifest.tsv"), "w") as man:
        for name, data in good:
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
            im = Image.open(os.path.join(out, name))
            im.load()
            w, h = im.size
            with open(os.path.join(out, name + ".dec.rgb"), "wb") as f:
                f.write(im.convert("RGB").tobytes())
            # the square one gets resize == its size too, the path where Pillow copies
            resize, ch, cw = (256, 224, 224) if name == "square_256.jpg" else \
                pick_preproc(rng, w, h)
            for interp in FILTERS:
                with open(os.path.join(out, name + f".crop{suffix(interp)}.rgb"), "wb") as f:
                    f.write(reference(im, resize, ch, cw, interp))
            man.write(f"{name}\t{w}\t{h}\t{resize}\t{ch}\t{cw}\n")

    # random RGB: no JPEG in the way, and noise is where rounding differences show
    sizes = [(640, 480), (481, 367), (37, 2000), (2000, 37), (9, 7), (256, 256), (3000, 2000)]
    with open(os.path.join(out, "resize_manifest.tsv"), "w") as man:
        for i, (w, h) in enumerate(sizes):
            a = nprng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            name = f"noise{i}_{w}x{h}"
            resize, ch, cw = pick_preproc(rng, w, h)
            if (w, h) == (256, 256):  # resize to its own size: Pillow's copy path
                resize, ch, cw = 256, 255, 256
            noise_refs(out, name, a, resize, ch, cw)
            man.write(f"{name}\t{w}\t{h}\t{resize}\t{ch}\t{cw}\n")
        # where the filter's width matters (their own generator, so the images above stay
        # as they were): images 1 and 2 pixels wide or high, where the windows are cut by both
        # edges; downscales by exactly 2 (BICUBIC's 9 taps) and 3.5 (its widest that the GPU
        # takes: 15 taps), and by a hair more (17 taps: the CPU's; BILINEAR's 9 still fit)
        wide = np.random.default_rng(20261124)
        for w, h, resize, ch, cw in [(1, 5, 33, 40, 33), (2, 3, 33, 45, 20), (5, 2, 33, 33, 64),
                                     (512, 384, 192, 192, 181), (896, 896, 256, 224, 224),
                                     (899, 640, 182, 182, 150)]:
            a = wide.integers(0, 256, (h, w, 3), dtype=np.uint8)
            name = f"edge_{w}x{h}"
            noise_refs(out, name, a, resize, ch, cw)
            man.write(f"{name}\t{w}\t{h}\t{resize}\t{ch}\t{cw}\n")

    # EXIF orientation: every value on a non-square photo (both TIFF byte orders, the tag after
    # others so its offset matters), then on the other kinds of JPEG; XMP-only orientation
    def exif_bytes(orientation, endian, extra=True):
        ex = Image.Exif()
        ex.endian = endian
        if extra:
            ex[0x010F] = "shardinfer test camera"  # Make: a string stored out of line
            ex[0x0110] = "io_ref"                  # Model
        ex[0x0112] = orientation
        return ex.tobytes()

    xmp = lambda o: (b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF><rdf:Description '
                     b'xmlns:tiff="http://ns.adobe.com/tiff/1.0/" tiff:Orientation="%d"/>'
                     b'</rdf:RDF></x:xmpmeta>' % o)
    orient = []  # (name, bytes)
    base_im = cut(rgb("chelsea.png"), 331, 229)
    for o in range(1, 9):
        endian = "<" if o % 2 else ">"
        orient.append((f"orient{o}_{'II' if o % 2 else 'MM'}.jpg",
                       save(base_im, quality=90, exif=exif_bytes(o, endian, extra=o != 3))))
    orient.append(("orient6_gray.jpg", save(cut(photo("camera.png"), 240, 301), quality=85,
                                            exif=exif_bytes(6, "<"))))
    orient.append(("orient8_cmyk.jpg", save(cut(rgb("coffee.png"), 280, 200).convert("CMYK"),
                                            quality=85, exif=exif_bytes(8, ">"))))
    orient.append(("orient5_progressive.jpg", save(cut(rgb("astronaut.png"), 260, 333),
                                                   quality=85, progressive=True,
                                                   exif=exif_bytes(5, "<"))))
    orient.append(("orient7_restart.jpg", save(cut(rgb("retina.jpg"), 350, 280), quality=85,
                                               restart_marker_blocks=3, exif=exif_bytes(7, ">"))))
    orient.append(("orient6_xmp_only.jpg", save(base_im, quality=88, xmp=xmp(6))))
    # an Exif orientation 1 wins over XMP, as in Pillow's getexif()
    orient.append(("orient1_exif_over_xmp8.jpg", save(base_im, quality=88, xmp=xmp(8),
                                                      exif=exif_bytes(1, "<"))))
    orient.append(("orient9_invalid.jpg", save(base_im, quality=88, exif=exif_bytes(9, ">"))))
    # big enough for 1/2 at resize 256, with a quarter turn: the scale must use the short side
    orient.append(("orient6_scaled.jpg", save(cut(rgb("motorcycle_left.png"), 741, 540),
                                              quality=90, exif=exif_bytes(6, "<"))))

    with open(os.path.join(out, "orient_manifest.tsv"), "w") as man:
        for name, data in orient:
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
            im = Image.open(io.BytesIO(data))
            im.load()
            with open(os.path.join(out, name + ".plain.rgb"), "wb") as f:
                f.write(im.convert("RGB").tobytes())  # what --no-exif must give
            t = ImageOps.exif_transpose(im)
            with open(os.path.join(out, name + ".dec.rgb"), "wb") as f:
                f.write(t.convert("RGB").tobytes())
            resize, ch, cw = pick_preproc(rng, t.width, t.height)
            if name == "orient6_scaled.jpg":
                resize, ch, cw = 256, 224, 224
            with open(os.path.join(out, name + ".crop.rgb"), "wb") as f:
                f.write(reference(t, resize, ch, cw))
            man.write(f"{name}\t{t.width}\t{t.height}\t{im.width}\t{im.height}\t{resize}"
                      f"\t{ch}\t{cw}\n")

    # DCT-scaled decoding (not exact mode) against Pillow's draft(): sizes where 1/2, 1/4 and
    # 1/8 apply at resize 256, and every file above with its own preprocessing (the small
    # resizes of pick_preproc reach 1/8 on small images too)
    big = []
    big.append(("scale2_700x560.jpg", save(cut(rgb("motorcycle_right.png"), 700, 560),
                                           quality=90)))
    big.append(("scale4_1200x1100_444.jpg", save(cut(rgb("coffee.png"), 1200, 1100), quality=92,
                                                 subsampling="4:4:4")))
    big.append(("scale4_1024x1100_422.jpg", save(cut(rgb("astronaut.png"), 1024, 1100),
                                                 quality=80, subsampling="4:2:2")))
    big.append(("scale8_2400x2100.jpg", save(cut(rgb("hubble_deep_field.jpg"), 2400, 2100),
                                             quality=85)))
    big.append(("scale2_gray_progressive.jpg", save(cut(photo("camera.png"), 600, 520),
                                                    quality=85, progressive=True)))
    big.append(("scale2_cmyk.jpg", save(cut(rgb("coffee.png"), 640, 600).convert("CMYK"),
                                        quality=85)))
    big.append(("scale4_restart.jpg", save(cut(rgb("retina.jpg"), 1100, 1030), quality=85,
                                           restart_marker_blocks=5)))
    for name, data in big:
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    man_rows = [(name, data, 256, 224, 224) for name, data in big]
    for name, data in orient:
        if name == "orient6_scaled.jpg":
            man_rows.append((name, data, 256, 224, 224))
    for mname, files in (("jpeg_manifest.tsv", dict(good)), ("orient_manifest.tsv",
                                                             dict(orient))):
        for line in open(os.path.join(out, mname)):
            f = line.split("\t")
            man_rows.append((f[0], files[f[0]], int(f[-3]), int(f[-2]), int(f[-1])))
    with open(os.path.join(out, "scaled_manifest.tsv"), "w") as man:
        for name, data, resize, ch, cw in man_rows:
            for interp in FILTERS:
                s, crop = drafted(data, resize, ch, cw, interp)
                with open(os.path.join(out, name + f".r{resize}_{ch}x{cw}.draft{suffix(interp)}"
                                       ".rgb"), "wb") as f:
                    f.write(crop)
            man.write(f"{name}\t{resize}\t{ch}\t{cw}\t{s}\n")

    hostile = []
    base = dict(good)["chelsea_420.jpg"]
    prog = dict(good)["motorcycle_progressive.jpg"]
    png = io.BytesIO()
    photo("coffee.png").save(png, "PNG")
    hostile.append(("empty.jpg", b"", "empty"))
    hostile.append(("png_bytes.jpg", png.getvalue(), "not_jpeg"))
    hostile.append(("soi_then_junk.jpg", b"\xff\xd8" + bytes(nprng.integers(0, 256, 3000,
                                                                           dtype=np.uint8)),
                    "not_jpeg"))
    hostile.append(("header_cut.jpg", base[:100], "not_jpeg"))
    hostile.append(("truncated.jpg", base[:int(len(base) * 0.6)], "truncated"))
    hostile.append(("progressive_truncated.jpg", prog[:int(len(prog) * 0.6)], "truncated"))

    # corrupt: overwrite a few bytes in the middle of the entropy-coded data (never with 0xFF,
    # which would start a marker) until libjpeg says "Corrupt JPEG data"; EOI stays in place.
    tj = TurboJPEG()
    im = Image.open(io.BytesIO(base))
    w, h = im.size
    start = scan_start(base)
    for attempt in range(200):
        bad = bytearray(base)
        pos = rng.randint(start + 64, start + (len(base) - start) // 2)
        for k in range(4):
            if bad[pos + k] != 0xFF and bad[pos + k - 1] != 0xFF:
                bad[pos + k] = rng.choice([v for v in range(255) if v != bad[pos + k]])
        err = tj.decode_error(bytes(bad), w, h)
        if err and "Corrupt JPEG data" in err:
            break
    else:
        sys.exit("io_ref.py: could not make a corrupt JPEG that libjpeg rejects")
    assert bad[-2:] == b"\xff\xd9"
    try:  # Pillow does not complain, but its pixels must show the damage
        damaged = Image.open(io.BytesIO(bytes(bad))).convert("RGB").tobytes()
        assert damaged != Image.open(io.BytesIO(base)).convert("RGB").tobytes()
    except OSError:
        pass
    hostile.append(("corrupt.jpg", bytes(bad), "corrupt"))

    huge = bytearray(base)
    sof = sof_offset(huge)
    huge[sof + 5:sof + 9] = bytes([20000 >> 8, 20000 & 255, 20000 >> 8, 20000 & 255])
    hostile.append(("huge_20000x20000.jpg", bytes(huge), "too_large"))
    # over libjpeg-turbo's 65500 a side (which it refuses without telling the size): too_large
    # however few pixels, never not_jpeg
    for w, h in ((65535, 65535), (65501, 16), (16, 65501)):
        over = bytearray(base)
        over[sof + 5:sof + 9] = bytes([h >> 8, h & 255, w >> 8, w & 255])
        hostile.append((f"huge_{w}x{h}.jpg", bytes(over), "too_large"))

    with open(os.path.join(out, "hostile_manifest.tsv"), "w") as man:
        for name, data, status in hostile:
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
            man.write(f"{name}\t{status}\n")
    print(f"io_ref.py: {len(good)} JPEGs, {len(sizes)} noise images, {len(hostile)} hostile "
          f"files, {len(orient)} oriented and {len(big)} large JPEGs in {out}")


def fail(msg):
    print("io_ref.py: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def check_pack(h5path, listing):
    import h5py

    rows = [line.rstrip("\n").split("\t") for line in open(listing, encoding="utf-8")
            if line.strip()]
    with h5py.File(h5path, "r") as f:
        g = f["images"]
        ids = g["ids"].asstr()[:]  # users read ids as str; fails if not valid UTF-8
        raw_ids = g["ids"][:]
        if len(raw_ids) and not isinstance(g["ids"].asstr()[0], str):
            fail("ids do not read as str")
        off = g["offsets"][:]
        data = g["data"]
        if g["offsets"].dtype != np.uint64 or data.dtype != np.uint8:
            fail(f"dtypes {g['offsets'].dtype} {data.dtype}")
        if len(ids) != len(rows) or len(off) != len(rows) + 1:
            fail(f"{len(ids)} ids, {len(off)} offsets, expected {len(rows)} images")
        if int(g.attrs["count"]) != len(rows) or int(g.attrs["format_version"]) != 1:
            fail(f"attributes {dict(g.attrs)}")
        if not isinstance(g.attrs["source"], str) or not g.attrs["source"]:
            fail("source attribute is not a non-empty str")
        if data.chunks is None or g["ids"].chunks is None:
            fail("datasets are not chunked")
        blob = data[:].tobytes()
        files = {}
        for i, row in enumerate(rows):
            if ids[i] != row[0]:
                fail(f"id {i}: {ids[i]!r} != {row[0]!r}")
            if row[1] not in files:
                with open(row[1], "rb") as src:
                    files[row[1]] = src.read()
            want = files[row[1]]
            if blob[off[i]:off[i + 1]] != want:
                fail(f"image {i} ({row[0]}): bytes differ from {row[1]}")
        has_labels = len(rows) > 0 and len(rows[0]) > 2
        if has_labels != ("labels" in g):
            fail(f"labels present: {'labels' in g}, expected {has_labels}")
        if has_labels:
            lab = g["labels"][:]
            if g["labels"].dtype != np.int64:
                fail(f"labels dtype {g['labels'].dtype}")
            for i, row in enumerate(rows):
                if int(lab[i]) != int(row[2]):
                    fail(f"label {i}: {lab[i]} != {row[2]}")
    print(f"io_ref.py: {h5path}: {len(rows)} images match")


def fmt_attr(v):
    if isinstance(v, bytes):
        v = v.decode()
    if isinstance(v, (float, np.floating)):
        return repr(float(v))
    return str(v.item() if hasattr(v, "item") else v)


def dump_result(h5path):
    import h5py

    lines = []
    with h5py.File(h5path, "r") as f:
        for k in sorted(f.attrs):
            lines.append(f"attr\t{k}\t{fmt_attr(f.attrs[k])}")
        ids = f["ids"].asstr()[:]
        idx, st = f["index"][:], f["status"][:]
        cls, prob = f["topk_class"][:], f["topk_prob"][:]
        want = {"index": np.uint64, "status": np.int32, "topk_class": np.int32,
                "topk_prob": np.float32}
        for k, t in want.items():
            if f[k].dtype != t:
                fail(f"{k} has dtype {f[k].dtype}, expected {np.dtype(t)}")
        lines.append(f"shape\t{len(ids)}\t{cls.shape[1] if cls.ndim == 2 else -1}")
        for i in range(len(ids)):
            c = ",".join(str(int(v)) for v in cls[i])
            p = ",".join("%.9g" % float(v) for v in prob[i])
            lines.append(f"row\t{ids[i]}\t{int(idx[i])}\t{int(st[i])}\t{c}\t{p}")
        for i, m in zip(f["errors/index"][:], f["errors/message"].asstr()[:]):
            lines.append(f"error\t{int(i)}\t{m}")
    return lines


def check_result(h5path, expected):
    got = dump_result(h5path)
    want = [line.rstrip("\n") for line in open(expected, encoding="utf-8") if line.strip()]
    if got != want:
        for g, w in zip(got + [""] * len(want), want + [""] * len(got)):
            if g != w:
                fail(f"{h5path}: got {g!r}, expected {w!r}")
    print(f"io_ref.py: {h5path}: {len(got)} lines match")


def make_set(h5path, n):
    import h5py

    blobs = [bytes((i * 7 + j) % 251 for j in range(13 * i + 5)) for i in range(n)]
    off = np.concatenate([[0], np.cumsum([len(b) for b in blobs])]).astype(np.uint64)
    with h5py.File(h5path, "w") as f:
        g = f.create_group("images")
        g["data"] = np.frombuffer(b"".join(blobs), dtype=np.uint8)
        g["offsets"] = off
        g.create_dataset("ids", data=[f"h5py-\u00e9-{i}" for i in range(n)],
                         dtype=h5py.string_dtype())
        g["labels"] = np.arange(n, dtype=np.int64)
        g.attrs["format_version"] = 1
        g.attrs["count"] = n


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "gen":
        gen(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "check-pack":
        check_pack(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "make-set":
        make_set(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) == 4 and sys.argv[1] == "check-result":
        check_result(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
