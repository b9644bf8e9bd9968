#!/usr/bin/env python3
"""PyTorch at its best on the compute alone: the torchvision model in FP16, channels_last,
cudnn.benchmark on, the forward pass captured once as a CUDA Graph and replayed. Prints one line
per model: images/s over the timed replays (median of --repeats), for bench/compute_vs_torch.sh.

  torch_compute.py --models resnet50,mobilenet_v2,efficientnet_b0 --batch 256 [--iters 20]
"""
import argparse
import statistics

import torch
import torchvision


def bench(name, batch, iters, repeats, precision):
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[precision]
    model = getattr(torchvision.models, name)(weights=None).eval().cuda()
    model = model.to(dtype=dtype, memory_format=torch.channels_last)
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=dtype)
    x = x.contiguous(memory_format=torch.channels_last)
    with torch.inference_mode():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up: cudnn.benchmark picks its algorithms here
            for _ in range(3):
                model(x)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = model(x)
        graph.replay()
        torch.cuda.synchronize()
        rates = []
        for _ in range(repeats):
            t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            t0.record()
            for _ in range(iters):
                graph.replay()
            t1.record()
            torch.cuda.synchronize()
            rates.append(batch * iters / (t0.elapsed_time(t1) / 1e3))
    del y
    return statistics.median(rates)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet50,mobilenet_v2,efficientnet_b0")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--precision", default="fp16", choices=["fp16", "bf16", "fp32"])
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    for name in a.models.split(","):
        r = bench(name, a.batch, a.iters, a.repeats, a.precision)
        print(f"torch_compute: model={name} batch={a.batch} precision={a.precision} "
              f"images_per_s={r:.1f} ({torch.cuda.get_device_name()}, torch {torch.__version__})",
              flush=True)


if __name__ == "__main__":
    main()
