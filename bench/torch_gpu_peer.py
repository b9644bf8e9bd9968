#!/usr/bin/env python3
"""The second PyTorch peer (issue 16): what a capable user writes to decode on the GPU too, in
one process on one GPU. The JPEG bytes are read from the HDF5 set in bulk (one read per batch),
decoded on the GPU by torchvision.io.decode_jpeg(list, device="cuda") (nvJPEG) a whole batch at
a time, resized with antialiasing (the shorter side to --resize, bilinear) and center-cropped on
the GPU, normalised, and run through the model in FP16 channels_last at PyTorch's best on this
machine (torch.compile, captured as a CUDA graph, for the fixed batch; the last short batch
eagerly); top-5 of the softmax to HDF5 like shardinfer's result. A batch whose decode fails
falls back to one image at a time, and an image that fails alone gets status 4.
A background thread reads the next batch while the GPU works on this one.

  torch_gpu_peer.py --arch resnet50 --input SET.h5 --output R.h5 [--batch 256] [--no-compile]
Prints `torch_gpu_peer: images=N seconds=S images_per_s=R` (the whole run after start-up, and
the start-up separately).
"""

import argparse
import os
import queue
import sys
import threading
import time

import h5py
import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torchvision.io import decode_jpeg, ImageReadMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_peer import MEAN, STD, build  # noqa: E402  the same seeded networks


def reader(path, batch, q):
    """Batches of (first index, list of uint8 tensors of the encoded bytes), read in bulk."""
    with h5py.File(path, "r") as f:
        offs = f["images/offsets"][:]
        data = f["images/data"]
        n = len(offs) - 1
        for b0 in range(0, n, batch):
            b1 = min(n, b0 + batch)
            raw = data[offs[b0]:offs[b1]]
            base = offs[b0]
            q.put((b0, [torch.from_numpy(raw[offs[i] - base:offs[i + 1] - base])
                        for i in range(b0, b1)]))
    q.put(None)


def preprocess(imgs, resize, crop, mean, std):
    """Decoded (3, H, W) uint8 CUDA tensors -> (N, 3, crop, crop) normalised FP16 NCHW."""
    out = torch.empty((len(imgs), 3, crop, crop), device="cuda", dtype=torch.float16)
    for k, im in enumerate(imgs):
        h, w = im.shape[1:]
        if h <= w:
            nh, nw = resize, int(resize * w / h)
        else:
            nh, nw = int(resize * h / w), resize
        r = F.interpolate(im[None].float(), size=(nh, nw), mode="bilinear", antialias=True,
                          align_corners=False)
        top, left = int(round((nh - crop) / 2.0)), int(round((nw - crop) / 2.0))
        out[k] = r[0, :, top:top + crop, left:left + crop].clamp_(0, 255).half()
    return ((out / 255.0) - mean) / std


def decode_batch(raw):
    """The batch decoded at once; on a failure each image alone (None for those that fail)."""
    try:
        return decode_jpeg(raw, mode=ImageReadMode.RGB, device="cuda"), 0
    except RuntimeError:
        out, bad = [], 0
        for r in raw:
            try:
                out.append(decode_jpeg(r, mode=ImageReadMode.RGB, device="cuda"))
            except RuntimeError:
                out.append(None)
                bad += 1
        return out, bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="resnet50")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--resize", type=int, default=256)
    ap.add_argument("--crop", type=int, default=224)
    ap.add_argument("--topk", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    t0 = time.perf_counter()
    torch.backends.cudnn.benchmark = True
    model = build(a.arch, a.seed).eval().cuda().half().to(memory_format=torch.channels_last)
    mean = torch.tensor(MEAN, device="cuda", dtype=torch.float16).view(1, 3, 1, 1)
    std = torch.tensor(STD, device="cuda", dtype=torch.float16).view(1, 3, 1, 1)
    static_x = torch.zeros((a.batch, 3, a.crop, a.crop), device="cuda", dtype=torch.float16)
    static_x = static_x.contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        fwd = model if a.no_compile else torch.compile(model)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fwd(static_x)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = torch.softmax(fwd(static_x).float(), dim=1)
    with h5py.File(a.input, "r") as f:
        n = len(f["images/offsets"]) - 1
    status = np.zeros(n, np.int32)
    tk_class = np.zeros((n, a.topk), np.int32)
    tk_prob = np.zeros((n, a.topk), np.float32)
    torch.cuda.synchronize()
    t_ready = time.perf_counter()
    q = queue.Queue(maxsize=2)
    th = threading.Thread(target=reader, args=(a.input, a.batch, q), daemon=True)
    th.start()
    failed = 0
    with torch.inference_mode():
        while True:
            item = q.get()
            if item is None:
                break
            b0, raw = item
            imgs, bad = decode_batch(raw)
            good = [k for k, im in enumerate(imgs) if im is not None]
            for k, im in enumerate(imgs):
                if im is None:
                    status[b0 + k] = 4
            failed += bad
            x = preprocess([imgs[k] for k in good], a.resize, a.crop, mean, std)
            if len(good) == a.batch:
                static_x.copy_(x)
                graph.replay()
                y = static_y
            else:
                y = torch.softmax(model(x.contiguous(memory_format=torch.channels_last)).float(),
                                  dim=1)
            p, c = torch.topk(y[:len(good)], a.topk, dim=1)
            idx = np.array(good) + b0
            tk_prob[idx] = p.cpu().numpy()
            tk_class[idx] = c.cpu().numpy().astype(np.int32)
    t_end = time.perf_counter()
    with h5py.File(a.output, "w") as f:
        f["index"] = np.arange(n, dtype=np.uint64)
        f["status"] = status
        f["topk_class"] = tk_class
        f["topk_prob"] = tk_prob
    t_all = time.perf_counter()
    print(f"torch_gpu_peer: images={n} failed={failed} seconds={t_end - t_ready:.2f} "
          f"images_per_s={n / (t_end - t_ready):.1f} startup_s={t_ready - t0:.1f} "
          f"whole_s={t_all - t0:.1f} whole_images_per_s={n / (t_all - t0):.1f} "
          f"(torch {torch.__version__}, torchvision {torchvision.__version__}, "
          f"{'eager' if a.no_compile else 'compile'} + CUDA graph)", flush=True)


if __name__ == "__main__":
    main()
