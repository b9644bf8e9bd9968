#!/usr/bin/env python3
"""PyTorch at its best on the compute alone, for the comparisons in docs/performance.md: the
model in FP16 (or --precision), channels_last where it has convolutions, cudnn.benchmark on,
timed in each of --modes and the fastest reported:
  eager    the module called as is (timm's attention is F.scaled_dot_product_attention, i.e.
           FlashAttention / memory-efficient SDPA kernels);
  graph    the forward pass captured once as a CUDA Graph and replayed;
  compile  torch.compile (its default mode: Inductor's fused kernels), then captured as a CUDA
           Graph.
Prints one line per model and mode, then a `best` line: images/s over the timed iterations
(median of --repeats). Models are torchvision names or the transformer names of
tests/export_models.py (timm; same architecture and arguments as the exported ONNX).

  torch_compute.py --models resnet50,vit_b_16,swin_t --batch 256 [--iters 20] [--modes eager,graph]

--profile then lists the GPU kernels of each mode's forward pass (torch.profiler, kernels summed
per iteration, the slowest first): where PyTorch spends its time, beside `shardinfer bench
--profile --verbose`.
"""
import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))


def build(name):
    """The module and its input side: a transformer of tests/export_models.py (timm's, or
    another model code's), torchvision otherwise."""
    from export_models import ALL_TRANSFORMERS, BENCH_TRANSFORMERS, transformer_module

    base = name.split(".")[0]
    if base in ALL_TRANSFORMERS or base in BENCH_TRANSFORMERS:
        return transformer_module(base)
    import torchvision

    return getattr(torchvision.models, name)(weights=None), 224


def time_it(fn, batch, iters, repeats):
    rates = []
    for _ in range(repeats):
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        for _ in range(iters):
            fn()
        t1.record()
        torch.cuda.synchronize()
        rates.append(batch * iters / (t0.elapsed_time(t1) / 1e3))
    return statistics.median(rates)


def as_graph(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up: cudnn.benchmark and autotuning pick algorithms here
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    graph.replay()
    torch.cuda.synchronize()
    return graph.replay


def kernel_table(fn, name, mode, iters=5, top=15):
    """The GPU kernels of fn() summed over iters calls, per call, the slowest first."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    rows = [(e.device_time_total / iters / 1e3, e.count // iters, e.key)
            for e in prof.key_averages() if e.device_time_total > 0]
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    print(f"torch_profile: model={name} mode={mode} gpu_ms_per_call={total:.2f}", flush=True)
    for ms, count, key in rows[:top]:
        print(f"  {ms:8.3f} ms  x{count:<4d} {key[:110]}", flush=True)


def bench(name, batch, iters, repeats, precision, modes, prof=False):
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[precision]
    model, side = build(name)
    model = model.eval().cuda().to(dtype=dtype, memory_format=torch.channels_last)
    x = torch.randn(batch, 3, side, side, device="cuda", dtype=dtype)
    x = x.contiguous(memory_format=torch.channels_last)
    out = {}
    with torch.inference_mode():
        for mode in modes:
            t = time.perf_counter()
            try:
                if mode == "eager":
                    for _ in range(3):
                        model(x)
                    torch.cuda.synchronize()
                    fn = lambda: model(x)  # noqa: E731
                    plain = fn
                elif mode == "graph":
                    plain = lambda: model(x)  # noqa: E731
                    fn = as_graph(plain)
                else:
                    cm = torch.compile(model)
                    plain = lambda: cm(x)  # noqa: E731; the kernels without the graph around them
                    try:
                        fn = as_graph(plain)
                    except RuntimeError:  # not capturable (below): Inductor's kernels alone
                        torch.cuda.synchronize()
                        plain()
                        fn = plain
            except RuntimeError as e:  # Hugging Face's towers copy from the host while captured
                print(f"torch_compute: model={name} mode={mode} failed: {str(e)[:160]}",
                      flush=True)
                torch.cuda.synchronize()
                continue
            setup = time.perf_counter() - t
            out[mode] = time_it(fn, batch, iters, repeats)
            print(f"torch_compute: model={name} mode={mode} batch={batch} precision={precision} "
                  f"images_per_s={out[mode]:.1f} setup_s={setup:.1f}", flush=True)
            if prof:
                kernel_table(plain, name, mode)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="resnet50,mobilenet_v2,efficientnet_b0")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--precision", default="fp16", choices=["fp16", "bf16", "fp32"])
    ap.add_argument("--modes", default="graph", help="comma-separated: eager,graph,compile")
    ap.add_argument("--profile", action="store_true", help="list each mode's GPU kernels")
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = True
    modes = a.modes.split(",")
    for name in a.models.split(","):
        r = bench(name, a.batch, a.iters, a.repeats, a.precision, modes, a.profile)
        best = max(r, key=r.get)
        print(f"torch_compute: model={name} batch={a.batch} precision={a.precision} "
              f"images_per_s={r[best]:.1f} best_mode={best} "
              f"({torch.cuda.get_device_name()}, torch {torch.__version__})", flush=True)


if __name__ == "__main__":
    main()
