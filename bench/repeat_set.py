#!/usr/bin/env python3
"""Makes a large image set from a small one by repeating its images (ids get a '#k' suffix so
they stay unique): benchmark sets of any size from datasets/make_bench_set.py's photos, without
carrying gigabytes to the GPU machine.

  repeat_set.py SRC.h5 DST.h5 --count 20000
"""
import argparse

import h5py
import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--count", type=int, required=True)
    a = ap.parse_args()
    with h5py.File(a.src, "r") as f:
        data, offs = f["images/data"][:], f["images/offsets"][:]
        ids = [i.decode() if isinstance(i, bytes) else i for i in f["images/ids"][:]]
    n = len(offs) - 1
    sizes = np.diff(offs)
    pick = np.arange(a.count) % n
    new_offs = np.zeros(a.count + 1, dtype=np.uint64)
    new_offs[1:] = np.cumsum(sizes[pick])
    out = np.empty(int(new_offs[-1]), dtype=np.uint8)
    for k, i in enumerate(pick):
        out[new_offs[k]:new_offs[k + 1]] = data[offs[i]:offs[i + 1]]
    with h5py.File(a.dst, "w") as g:
        grp = g.create_group("images")
        grp.create_dataset("data", data=out)
        grp.create_dataset("offsets", data=new_offs)
        grp.create_dataset("ids", data=[f"{ids[i]}#{k // n}" for k, i in enumerate(pick)],
                           dtype=h5py.string_dtype())
        grp.attrs["count"] = np.uint64(a.count)
        grp.attrs["format_version"] = np.int32(1)
        grp.attrs["source"] = f"{a.src} repeated to {a.count}"
    print(f"repeat_set: {a.count} images ({out.nbytes / 1e6:.1f} MB) in {a.dst}")


if __name__ == "__main__":
    main()
