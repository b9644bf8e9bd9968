#!/usr/bin/env python3
"""The PyTorch pipeline a user would write instead of shardinfer, run the way they would run it:
one process per GPU under torchrun, DataLoader workers decoding the JPEGs with Pillow
(torchvision's Resize (bilinear or bicubic) + CenterCrop + Normalize), the model in FP16
channels_last with cudnn.benchmark, softmax + top-K (--post classify) or L2-normalised
embeddings (--post embed, stored float32 or float16) on the GPU, the results gathered to rank 0
and written to HDF5 with the fields of shardinfer's result (/ids, /index, /status, /topk_class,
/topk_prob or /embedding, /errors).
A failed image gets a status like shardinfer's (1 empty, 2 not an image, 3 truncated, 4 corrupt)
and never stops the run. On a machine without GPUs it runs on the CPU in FP32 (gloo).

  torchrun --nproc-per-node G bench/torch_peer.py --arch resnet50 --input SET.h5 \
      --output R.h5 [--batch 256] [--workers W] [--resize 256] [--crop 224] [--topk 5]
  python bench/torch_peer.py --arch resnet50 --export-onnx M.onnx   # the same model for shardinfer
  torchrun ... bench/torch_peer.py --arch clip_vit_b_16 --post embed --embed-dtype float16 \
      --interpolation bicubic --resize 224 --mean 0.4815,0.4578,0.4082 --std 0.2686,0.2613,0.2758 ...

The model is torchvision's architecture with seeded random weights and realistic BatchNorm
statistics, or one of tests/export_models.py's transformer-family models (timm, same seeds),
so that shardinfer can be given exactly the same network; nothing is downloaded.
"""

import argparse
import io
import os
import sys
import time

import h5py
import numpy as np
import torch
import torch.distributed as dist
import torchvision
from PIL import Image, UnidentifiedImageError
from torchvision import transforms

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))


def build(arch, seed, narrow=False):
    """The network: a transformer-family model of tests/export_models.py (timm, seeded by its
    name; narrow: at the tests' width) or torchvision's `arch` (seeded_model)."""
    import export_models

    if arch in export_models.ALL_TRANSFORMERS:
        return export_models.build_transformer(arch, narrow)[0]
    return seeded_model(arch, seed)


def seeded_model(arch, seed):
    """torchvision's `arch` with seeded weights and BatchNorm statistics estimated on seeded
    random inputs, as training would have left them: activations keep the sizes of a trained
    network's instead of growing layer after layer (which overflows FP16 in deep networks)."""
    torch.manual_seed(seed)
    m = torchvision.models.__dict__[arch](weights=None)
    g = torch.Generator().manual_seed(seed + 1)
    bns = [mod for mod in m.modules() if isinstance(mod, torch.nn.BatchNorm2d)]
    for mod in bns:
        n = mod.num_features
        mod.weight.data.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
        mod.bias.data.copy_(torch.randn(n, generator=g) * 0.1)
        mod.reset_running_stats()
        mod.momentum = None  # a cumulative average over the calibration batches
    if bns:
        m.train()
        with torch.no_grad():
            for _ in range(4):
                m(torch.randn(8, 3, 224, 224, generator=g))
    return m.eval()


class PackedSet(torch.utils.data.Dataset):
    """Images [lo, hi) of a shardinfer packed set (/images/data, /images/offsets, /images/ids),
    the file opened once per DataLoader worker."""

    def __init__(self, path, lo, hi, tf):
        self.path, self.lo, self.hi, self.tf, self.f = path, lo, hi, tf, None

    def __len__(self):
        return self.hi - self.lo

    def __getitem__(self, k):
        if self.f is None:
            self.f = h5py.File(self.path, "r")
            self.off, self.data = self.f["/images/offsets"], self.f["/images/data"]
        i = self.lo + k
        o0, o1 = int(self.off[i]), int(self.off[i + 1])
        status, msg = 0, ""
        try:
            if o1 == o0:
                raise ValueError("empty")
            im = Image.open(io.BytesIO(self.data[o0:o1].tobytes()))
            im.load()
            x = self.tf(im.convert("RGB"))
        except Exception as e:  # one bad image costs only itself
            status = (1 if str(e) == "empty" else 2 if isinstance(e, UnidentifiedImageError)
                      else 3 if "truncated" in str(e) else 4)
            msg = str(e) or type(e).__name__
            x = torch.zeros(3, *self.tf.transforms[1].size)
        return x, i, status, msg


def export_onnx(arch, seed, path, narrow=False):
    m = build(arch, seed, narrow)
    x = torch.randn(1, 3, 224, 224)
    torch.onnx.export(m, x, path, input_names=["input"], output_names=["logits"], opset_version=17,
                      dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}}, do_constant_folding=True,
                      dynamo=False)
    print(f"torch_peer: {arch} (seed {seed}) exported to {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--arch", default="resnet50")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--narrow", action="store_true",
                    help="a 768-wide transformer 384 wide, as tests/export_models.py --narrow")
    ap.add_argument("--export-onnx")
    ap.add_argument("--input")
    ap.add_argument("--output")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--workers", type=int, default=None, help="per rank (default: cores / ranks)")
    ap.add_argument("--resize", type=int, default=256)
    ap.add_argument("--crop", type=int, default=224)
    ap.add_argument("--topk", type=int, default=5)
    ap.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    ap.add_argument("--precision", choices=["fp16", "fp32"], default="fp16",
                    help="on a GPU (the CPU runs fp32)")
    ap.add_argument("--post", choices=["classify", "embed"], default="classify")
    ap.add_argument("--embed-dtype", choices=["float32", "float16"], default="float32")
    ap.add_argument("--interpolation", choices=["bilinear", "bicubic"], default="bilinear")
    ap.add_argument("--mean", default=",".join(map(str, MEAN)))
    ap.add_argument("--std", default=",".join(map(str, STD)))
    a = ap.parse_args()
    if a.export_onnx:
        export_onnx(a.arch, a.seed, a.export_onnx, a.narrow)
        return
    if not a.input or not a.output:
        sys.exit("torch_peer: --input and --output are needed")
    t0 = time.time()
    cuda = a.device == "cuda" or (a.device == "auto" and torch.cuda.is_available())
    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("nccl" if cuda else "gloo")
    rank, size = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    local = int(os.environ.get("LOCAL_RANK", 0))
    dev = torch.device(f"cuda:{local}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(dev)
        torch.backends.cudnn.benchmark = True
    with h5py.File(a.input, "r") as f:
        n = len(f["/images/offsets"]) - 1
    lo, hi = n * rank // size, n * (rank + 1) // size
    interp = (transforms.InterpolationMode.BICUBIC if a.interpolation == "bicubic"
              else transforms.InterpolationMode.BILINEAR)
    mean, std = [float(v) for v in a.mean.split(",")], [float(v) for v in a.std.split(",")]
    tf = transforms.Compose([transforms.Resize(a.resize, interpolation=interp),
                             transforms.CenterCrop(a.crop), transforms.ToTensor(),
                             transforms.Normalize(mean, std)])
    workers = a.workers if a.workers is not None else max(1, (os.cpu_count() or 1) // size - 1)
    loader = torch.utils.data.DataLoader(PackedSet(a.input, lo, hi, tf), batch_size=a.batch,
                                         num_workers=workers, pin_memory=cuda,
                                         persistent_workers=False, prefetch_factor=4 if workers else None)
    model = build(a.arch, a.seed, a.narrow).to(dev)
    half = cuda and a.precision == "fp16"
    if cuda:
        model = model.to(memory_format=torch.channels_last)
    if half:
        model = model.half()
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // size))
    idx, status, cls, prob, errs = [], [], [], [], []
    t_first = None
    with torch.inference_mode():
        for x, i, st, msg in loader:
            x = x.to(dev, non_blocking=True)
            if cuda:
                x = x.contiguous(memory_format=torch.channels_last)
            if half:
                x = x.half()
            bad = st != 0
            if a.post == "embed":  # x / max(||x||, 1e-12), as shardinfer's embed; NaN rows failed
                v = torch.nn.functional.normalize(model(x).float().flatten(1), dim=1).cpu()
                v[bad] = float("nan")
                c = torch.zeros((len(v), 0), dtype=torch.int64)
            else:
                p = torch.softmax(model(x).float(), dim=1)
                v, c = p.topk(a.topk, dim=1)
                c, v = c.cpu(), v.cpu()
                c[bad], v[bad] = -1, 0.0
            idx.append(i.numpy())
            status.append(st.numpy())
            cls.append(c.numpy())
            prob.append(v.numpy())
            errs += [(int(ii), m) for ii, s, m in zip(i, st, msg) if s != 0]
            if t_first is None:
                t_first = time.time() - t0
    k = a.topk if a.post == "classify" else 0
    mine = (np.concatenate(idx) if idx else np.zeros(0, np.int64),
            np.concatenate(status) if status else np.zeros(0, np.int64),
            np.concatenate(cls) if cls else np.zeros((0, k), np.int64),
            np.concatenate(prob) if prob else np.zeros((0, 1), np.float32), errs)
    parts = [None] * size
    if distributed:
        dist.all_gather_object(parts, mine)
    else:
        parts = [mine]
    elapsed = time.time() - t0
    if rank == 0:
        index = np.concatenate([q[0] for q in parts]).astype(np.uint64)
        order = np.argsort(index, kind="stable")
        st = np.concatenate([q[1] for q in parts]).astype(np.int32)[order]
        cl = np.concatenate([q[2] for q in parts]).astype(np.int32)[order]
        pr = np.concatenate([q[3] for q in parts]).astype(np.float32)[order]
        errors = sorted(e for q in parts for e in q[4])
        if not np.array_equal(index[order], np.arange(n)):
            sys.exit("torch_peer: an image is missing or counted twice")
        with h5py.File(a.input, "r") as f:
            ids = f["/images/ids"][:]
        with h5py.File(a.output, "w") as f:
            f.create_dataset("ids", data=ids, dtype=h5py.string_dtype())
            f["index"] = np.arange(n, dtype=np.uint64)
            f["status"] = st
            if a.post == "embed":
                f["embedding"] = pr.astype(np.float16 if a.embed_dtype == "float16" else np.float32)
            else:
                f["topk_class"] = cl
                f["topk_prob"] = pr
            f["errors/index"] = np.array([e[0] for e in errors], dtype=np.uint64)
            f.create_dataset("errors/message", data=[e[1] for e in errors],
                             dtype=h5py.string_dtype())
            f.attrs.update(format_version=2, model=f"{a.arch} seed {a.seed}",
                           input=a.input, ranks=size, batch_size=a.batch, images=n,
                           failed=int((st != 0).sum()), elapsed_seconds=elapsed, post=a.post,
                           producer="bench/torch_peer.py")
        print(f"torch_peer: {n} images ({int((st != 0).sum())} failed) on {size} rank(s) "
              f"({'cuda ' + a.precision + ' channels_last' if cuda else 'cpu fp32'}, {workers} "
              f"workers each) in "
              f"{elapsed:.2f} s: {n / elapsed:.1f} images/s; first batch after {t_first or 0:.2f} s",
              flush=True)
    if distributed:
        dist.barrier()  # every rank leaves after rank 0 has written; exiting closes the group


if __name__ == "__main__":
    main()
