#!/usr/bin/env python3
"""Exports real PyTorch models (torchvision classifiers, ultralytics' YOLOv8n and timm's
vision transformers, Swin, ConvNeXt, MobileViT and FastViT) to ONNX and
writes each as a test case in ONNX's backend node-test layout, for shardinfer's run_onnx_cases:
DIR/<name>/model.onnx + DIR/<name>/test_data_set_0/{input_0,output_0}.pb.

The models are what users will feed the engine: the graphs torch's TorchScript ("legacy")
exporter writes at opset 17 with do_constant_folding=True and a dynamic batch axis "N" on input
"input" and on every output. Weights are random (weights=None; nothing is downloaded) but seeded,
and every BatchNorm gets realistic running statistics (every LayerNorm, GRN and LayerScale a
realistic spread), so the graph computes with values of the size trained models see instead of
an untouched BN's identity. The expected outputs are
onnxruntime's (CPU provider, all graph optimizations off, so it computes the graph as exported)
on a seeded normal(0, 1) batch of 2; torch's own output is checked against them as well.

Needs torch, torchvision, timm, onnxscript (dynamo exports) and ultralytics: run it with .venv-torch/bin/python
(scripts/setup_torch.sh). Usage:
  export_models.py --output-dir DIR [--models resnet50,yolov8n,...|transformers] [--narrow]
                   [--yolo-size 640]
"""

import argparse
import os
import sys
import tempfile
import time
import zlib
from collections import Counter

# ultralytics checks connectivity (DNS look-ups) when imported and keeps a settings file in the
# user's config dir; neither is wanted in a test. Set before anything imports it.
os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("YOLO_VERBOSE", "False")
os.environ.setdefault("YOLO_CONFIG_DIR", os.path.join(tempfile.gettempdir(), "si-ultralytics-cfg"))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
from onnx import numpy_helper  # noqa: E402

OPSET = 17
BATCH = 2  # the test batch; export traces with batch 1 so a batch baked into the graph shows up
CLASSIFIERS = [
    "resnet50",
    "mobilenet_v2",
    "mobilenet_v3_large",
    "efficientnet_b0",
    "shufflenet_v2_x1_0",
    "squeezenet1_1",
    "densenet121",
    "regnet_y_400mf",
]
# timm's transformer-family models (and ConvNeXt, the CNN that borrows their blocks), each
# exported twice: "<name>.legacy" (TorchScript exporter, opset 17) and "<name>.dynamo"
# (dynamo=True, torch's default exporter since 2.9: its own opset, Gelu as one op, weights in
# an external-data file). timm name, constructor arguments, input side.
TRANSFORMERS = {
    "vit_b_16": ("vit_base_patch16_224", {}, 224),
    "deit_s": ("deit_small_patch16_224", {}, 224),
    # CLIP's image tower: pre-norm, QuickGELU, class-token pooling, a 512-wide projection
    "clip_vit_b_16": ("vit_base_patch16_clip_quickgelu_224", {"num_classes": 512}, 224),
    # DINOv2 at 224 (its native 518 grid interpolated), LayerScale, embedding output
    "dinov2_s_14": ("vit_small_patch14_dinov2", {"img_size": 224, "num_classes": 0}, 224),
    "swin_t": ("swin_tiny_patch4_window7_224", {}, 224),
    "convnext_t": ("convnext_tiny", {}, 224),
    "convnextv2_t": ("convnextv2_tiny", {}, 224),
    # rotary position embeddings applied to q and k before attention (Neg, Mul, Add)
    "eva02_b_14": ("eva02_base_patch14_224", {}, 224),
    # relative-position biases gathered from tables by constant indices (GatherND), folded at
    # load; BEiT's table starts at zero, so its bias goes as a mask of zeros
    "beit_b_16": ("beit_base_patch16_224", {}, 224),
    "levit_128": ("levit_128", {}, 224),
    # cosine attention: q and k L2-normalised, the scores scaled per head by exp(clamp(p))
    # (folded), a relative-position bias from an MLP over a coordinate table (folded)
    "swinv2_t": ("swinv2_tiny_window8_256", {}, 256),
    "mobilevitv2": ("mobilevitv2_050", {}, 256),
    "fastvit": ("fastvit_t8", {}, 256),
}


# --narrow (the test set): the towers of 768 (12 heads of 64) exported 384 wide (6 heads of 64),
# depth, head size, patch and every op as before. The graph is the same one with a quarter of the
# weights: those ten exports take 0.86 GB of disk, not 3.3 (the whole set 2.7 GB, not 5.1), and
# export and run faster. Benchmarks export them at full width (no --narrow).
NARROW = {"embed_dim": 384, "num_heads": 6}
NARROWED = {"vit_b_16", "clip_vit_b_16", "eva02_b_14", "beit_b_16", "tv_vit_b_16",
            "clip_mha_b_16"}


def tv_vit_b_16(narrow=False):
    """torchvision's ViT-B/16: nn.MultiheadAttention (batch_first, its packed in-projection run
    sequence-first inside). Its head starts at zero: given weights, so the output says something."""
    import torchvision

    if narrow:  # vit_b_16's own constructor fixes the width
        from torchvision.models.vision_transformer import VisionTransformer

        model = VisionTransformer(image_size=224, patch_size=16, num_layers=12,
                                  num_heads=NARROW["num_heads"], hidden_dim=NARROW["embed_dim"],
                                  mlp_dim=4 * NARROW["embed_dim"])
    else:
        model = torchvision.models.vit_b_16(weights=None)
    torch.nn.init.normal_(model.heads.head.weight, std=0.02)
    return model


def clip_mha_b_16(narrow=False):
    """OpenAI CLIP's ViT-B/16 image tower, from its own code (tests/clip_openai.py)."""
    from clip_openai import VisionTransformer

    if narrow:
        return VisionTransformer(width=NARROW["embed_dim"], heads=NARROW["num_heads"])
    return VisionTransformer()


def hf(kind, attn, full=False):
    """A Hugging Face transformers tower (tests/hf_models.py), its attention eager or SDPA; full:
    the base model (12 blocks of 768) rather than the tests' 4 of 384."""
    def builder():
        import hf_models

        return hf_models.build(kind, attn, full)
    return builder


# transformers from other code than timm's, treated as TRANSFORMERS: builder, input side
OTHER_TRANSFORMERS = {
    "tv_vit_b_16": (tv_vit_b_16, 224),
    "clip_mha_b_16": (clip_mha_b_16, 224),
    "hf_vit_eager": (hf("vit", "eager"), 224),
    "hf_vit_sdpa": (hf("vit", "sdpa"), 224),
    "hf_clip_eager": (hf("clip", "eager"), 224),
    "hf_clip_sdpa": (hf("clip", "sdpa"), 224),
    "hf_dinov2_eager": (hf("dinov2", "eager"), 224),
    "hf_dinov2_sdpa": (hf("dinov2", "sdpa"), 224),
    # SigLIP's attention-pooling head: a learned probe Tiled over the batch, one query
    "hf_siglip_eager": (hf("siglip", "eager"), 224),
    "hf_siglip_sdpa": (hf("siglip", "sdpa"), 224),
}
# the base-size Hugging Face towers, for the benchmarks (bench/torch_compute.py and
# `--models hf_vit_b_16_eager` here); the tests export the small ones above
BENCH_TRANSFORMERS = {
    f"hf_{k}_b_{p}_{a}": (hf(k, a, True), 224)
    for k, p in (("vit", 16), ("clip", 16), ("siglip", 16), ("dinov2", 14)) for a in ("eager", "sdpa")
}
OTHER_TRANSFORMERS_ALL = {**OTHER_TRANSFORMERS, **BENCH_TRANSFORMERS}
ALL_TRANSFORMERS = list(TRANSFORMERS) + list(OTHER_TRANSFORMERS)
EXPORTERS = ["legacy", "dynamo"]


def exporters_of(name):
    """BEiT from the legacy exporter alone, EVA-02 from the dynamo one (the other fails in torch
    2.11); Hugging Face's towers from the dynamo one alone
    (torch's default since 2.9): the
    legacy one writes their shape arithmetic with GreaterOrEqual (ViT) and casts of sizes taken
    from the image to int64 (DINOv2), which shardinfer does not run yet."""
    if name == "beit_b_16":  # torch 2.11's dynamo exporter fails to decompose it
        return ["legacy"]
    if name == "eva02_b_14":  # its legacy export passes a tensor as SDPA's is_causal
        return ["dynamo"]
    return EXPORTERS
ALL_MODELS = CLASSIFIERS + ["yolov8n"] + ALL_TRANSFORMERS


def transformer_module(base, narrow=False):
    """A transformer of either table, random weights, and its input side; narrow: at NARROW's
    width if it is one of NARROWED."""
    narrow = narrow and base in NARROWED
    if base in OTHER_TRANSFORMERS_ALL:
        builder, side = OTHER_TRANSFORMERS_ALL[base]
        return (builder(narrow) if narrow else builder()), side
    import timm

    arch, kwargs, side = TRANSFORMERS[base]
    kwargs = {**kwargs, **NARROW} if narrow else kwargs
    return timm.create_model(arch, pretrained=False, **kwargs), side


def seed_for(name, what):
    """A seed per model and purpose, so adding a model or a step does not shift the others."""
    return zlib.crc32(f"{name}/{what}".encode()) & 0x7FFFFFFF


def set_bn_statistics(model, seed):
    """Gives every BatchNorm the statistics of a trained network: running_mean ~ N(0, 0.1),
    running_var ~ U(0.5, 2), gamma ~ U(0.5, 1.5), beta ~ N(0, 0.1). A fresh BN (mean 0, var 1,
    gamma 1, beta 0) is an identity in eval mode, which would leave the normalization arithmetic
    (and its folding into Conv) untested. Returns how many BN layers were set."""
    g = torch.Generator().manual_seed(seed)
    n = 0
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                c = m.num_features
                m.running_mean.copy_(torch.randn(c, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(c, generator=g) * 1.5 + 0.5)
                if m.affine:
                    m.weight.copy_(torch.rand(c, generator=g) + 0.5)
                    m.bias.copy_(torch.randn(c, generator=g) * 0.1)
                n += 1
    return n


def build_classifier(name):
    import torchvision

    torch.manual_seed(seed_for(name, "weights"))
    model = getattr(torchvision.models, name)(weights=None)
    nbn = set_bn_statistics(model, seed_for(name, "bn"))
    return model.eval(), (1, 3, 224, 224), ["output"], nbn


def set_norm_statistics(model, seed):
    """Gives every LayerNorm/GroupNorm/GRN and LayerScale the spread of a trained network:
    gamma ~ U(0.5, 1.5), beta ~ N(0, 0.1) (an untouched LayerNorm has gamma 1, beta 0, which
    leaves its scale and shift untested; a zero-initialised GRN or LayerScale would drop its
    block). BatchNorms get set_bn_statistics'. Returns how many layers were set."""
    g = torch.Generator().manual_seed(seed)
    n = set_bn_statistics(model, seed)
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, (torch.nn.LayerNorm, torch.nn.GroupNorm)) and m.weight is not None:
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                if m.bias is not None:
                    m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
                n += 1
            # relative-position bias tables (BEiT, Swin; LeViT's attention_biases) start at
            # zero, which would leave the gathered bias untested (it goes as a mask of zeros)
            for pn in ("relative_position_bias_table", "attention_biases"):
                p = getattr(m, pn, None)
                if isinstance(p, torch.nn.Parameter):
                    p.copy_(torch.randn(p.shape, generator=g) * 0.5)
                    n += 1
            for pn in ("gamma", "beta"):  # timm's LayerScale (gamma) and GRN (gamma, beta)
                p = getattr(m, pn, None)
                if isinstance(p, torch.nn.Parameter) and p.dim() >= 1:
                    p.copy_(torch.rand(p.shape, generator=g) * 0.5 + 0.25
                            if pn == "gamma" else torch.randn(p.shape, generator=g) * 0.1)
                    n += 1
    return n


def build_transformer(name, narrow=False):
    torch.manual_seed(seed_for(name.split(".")[0], "weights"))
    model, side = transformer_module(name.split(".")[0], narrow)
    n = set_norm_statistics(model, seed_for(name.split(".")[0], "norm"))
    return model.eval(), (1, 3, side, side), ["output"], n


def build_yolov8n(size):
    """YOLOv8n from ultralytics' own yaml and modules, prepared the way its ONNX exporter
    (ultralytics/engine/exporter.py) prepares it for format='onnx': BN fused into the convs,
    C2f's split forward, Detect in export mode returning the decoded (N, 84, anchors) tensor with
    the DFL (Softmax + 1x1 Conv) and the anchor/stride arithmetic in the graph. We call
    torch.onnx.export ourselves rather than YOLO.export() only to use this suite's input/axis
    names (its exporter names the input "images" and, with dynamic=True, makes H and W dynamic
    too, which turns the constant anchors into shape arithmetic)."""
    from ultralytics.nn.modules import C2f, Detect
    from ultralytics.nn.tasks import DetectionModel

    torch.manual_seed(seed_for("yolov8n", "weights"))
    model = DetectionModel("yolov8n.yaml", nc=80, verbose=False)
    nbn = set_bn_statistics(model, seed_for("yolov8n", "bn"))
    for p in model.parameters():
        p.requires_grad = False
    model.eval().float()
    model = model.fuse(verbose=False)
    for m in model.modules():
        if isinstance(m, Detect):
            m.dynamic = False  # anchors computed once for the export size: constants in the graph
            m.export = True
            m.format = "onnx"
            m.shape = None
        elif isinstance(m, C2f):
            m.forward = m.forward_split  # Split instead of chunk, as ultralytics exports it
    shape = (1, 3, size, size)
    with torch.no_grad():
        for _ in range(2):  # dry runs, as the exporter does: caches anchors/strides for `shape`
            model(torch.zeros(shape))
    return model, shape, ["output0"], nbn


def export(model, shape, out_names, path, exporter="legacy"):
    dummy = torch.zeros(shape)
    axes = {"input": {0: "N"}}
    axes.update({o: {0: "N"} for o in out_names})
    if exporter == "dynamo":  # as torch's default writes it: its opset, external data
        torch.onnx.export(model, (dummy,), path, input_names=["input"], output_names=out_names,
                          dynamic_axes=axes, dynamo=True, external_data=True)
        return
    torch.onnx.export(
        model,
        (dummy,),
        path,
        opset_version=OPSET,
        input_names=["input"],
        output_names=out_names,
        dynamic_axes=axes,
        do_constant_folding=True,
        dynamo=False,
    )


def run_ort(path, x):
    so = ort.SessionOptions()
    # Unfused graph: the reference is the exported graph's own arithmetic, not ORT's rewrite of it.
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return names, sess.run(None, {sess.get_inputs()[0].name: x})


def write_case(case_dir, model_path, in_name, x, out_names, outs):
    data = os.path.join(case_dir, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    if os.path.abspath(model_path) != os.path.join(os.path.abspath(case_dir), "model.onnx"):
        os.replace(model_path, os.path.join(case_dir, "model.onnx"))
    with open(os.path.join(data, "input_0.pb"), "wb") as f:
        f.write(numpy_helper.from_array(x, in_name).SerializeToString())
    for k, (n, y) in enumerate(zip(out_names, outs)):
        with open(os.path.join(data, f"output_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.ascontiguousarray(y), n).SerializeToString())


def rel_err(a, b):
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-30))


def export_one(name, out_dir, yolo_size, narrow=False):
    t0 = time.perf_counter()
    exporter = name.split(".")[1] if "." in name else "legacy"
    if name == "yolov8n":
        model, shape, out_names, nbn = build_yolov8n(yolo_size)
    elif name.split(".")[0] in ALL_TRANSFORMERS or name.split(".")[0] in BENCH_TRANSFORMERS:
        model, shape, out_names, nbn = build_transformer(name, narrow)
    else:
        model, shape, out_names, nbn = build_classifier(name)
    t_build = time.perf_counter() - t0

    case_dir = os.path.join(out_dir, name)
    os.makedirs(case_dir, exist_ok=True)
    path = os.path.join(case_dir, "model.onnx")
    t0 = time.perf_counter()
    if exporter == "dynamo" and name.split(".")[0] in OTHER_TRANSFORMERS_ALL:
        # torch.export specialises a batch of 1, and nn.MultiheadAttention's reshapes then keep
        # it (ONNX Runtime refuses batch 2 too): traced at 2, as a user of these must
        shape = (2,) + tuple(shape[1:])
    export(model, shape, out_names, path, exporter)
    t_export = time.perf_counter() - t0

    proto = onnx.load(path)
    onnx.checker.check_model(proto)
    ops = Counter(n.op_type for n in proto.graph.node)
    in_name = proto.graph.input[0].name
    dims = [d.dim_param or d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    assert in_name == "input" and dims[0] == "N", (in_name, dims)

    rng = np.random.default_rng(seed_for(name, "input"))
    x = rng.standard_normal((BATCH,) + tuple(shape[1:]), dtype=np.float32)
    t0 = time.perf_counter()
    onames, outs = run_ort(path, x)
    t_ort = time.perf_counter() - t0
    # torch's own forward on the same batch, with the RMS of every conv/BN/Linear/LN output recorded: with
    # random weights, "realistic" BN statistics are only realistic if activations stay O(0.01..100)
    # through the network instead of exploding or vanishing; the summary line shows that they do.
    rms = []
    hooks = [m.register_forward_hook(lambda m, i, o: rms.append(float(o.pow(2).mean().sqrt())))
             for m in model.modules()
             if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear, torch.nn.LayerNorm,
                               torch.nn.modules.batchnorm._BatchNorm))]
    with torch.no_grad():
        ref = model(torch.from_numpy(x))
    for h in hooks:
        h.remove()
    ref = [ref] if isinstance(ref, torch.Tensor) else list(ref)
    errs = [rel_err(r.numpy(), o) for r, o in zip(ref, outs)]
    write_case(case_dir, path, in_name, x, onames, outs)

    size_mb = os.path.getsize(os.path.join(case_dir, "model.onnx")) / 1e6
    # The declared output dims matter to an engine: the legacy exporter leaves some symbolic
    # (YOLO's (N, 84, 8400) is declared (N, ?, ?)) when shapes depend on the dynamic batch.
    declared = ", ".join(
        f"{o.name}[{', '.join(str(d.dim_param or d.dim_value) for d in o.type.tensor_type.shape.dim)}]"
        for o in proto.graph.output)
    oshapes = ", ".join(f"{list(o.shape)}" for o in outs)
    print(f"== {name}: {size_mb:.1f} MB, {len(proto.graph.node)} nodes, {nbn} norm layers set; "
          f"input {list(x.shape)} -> {oshapes}, declared {declared}")
    print(f"   times: build {t_build:.1f}s, export {t_export:.1f}s, ORT run {t_ort:.1f}s")
    print(f"   conv/BN/Linear/LN output RMS over {len(rms)} layers: min {min(rms):.3g}, "
          f"median {float(np.median(rms)):.3g}, max {max(rms):.3g}; output |max| "
          f"{max(float(np.abs(o).max()) for o in outs):.3g}; torch vs ORT rel err "
          + ", ".join(f"{e:.2e}" for e in errs))
    print("   ops: " + " ".join(f"{k}:{v}" for k, v in sorted(ops.items())))
    sys.stdout.flush()
    return max(errs), all(np.isfinite(o).all() for o in outs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--output-dir", required=True)
    ap.add_argument("--models", default=",".join(CLASSIFIERS + ["yolov8n"]),
                    help="comma-separated subset of: " + ",".join(ALL_MODELS)
                    + "; 'transformers' for all of those from timm (each with both exporters)")
    ap.add_argument("--narrow", action="store_true",
                    help="the towers of 768 (" + ", ".join(sorted(NARROWED))
                    + ") at 384 wide, 6 heads of 64: the test set's size")
    ap.add_argument("--yolo-size", type=int, default=640, help="YOLOv8n input side (multiple of 32)")
    ap.add_argument("--max-rel", type=float, default=1e-4,
                    help="fail when torch and ORT differ by more than this (max|a-b|/max|b|)")
    args = ap.parse_args()
    names = []
    for n in (n for n in args.models.split(",") if n):
        if n == "transformers":  # every transformer-family model, both exporters
            names += [f"{t}.{e}" for t in ALL_TRANSFORMERS for e in exporters_of(t)]
        elif n in ALL_TRANSFORMERS:
            names += [f"{n}.{e}" for e in exporters_of(n)]
        elif n in BENCH_TRANSFORMERS:
            names.append(f"{n}.dynamo")
        elif n.split(".")[0] in ALL_TRANSFORMERS and n.split(".")[1:] in ([e] for e in EXPORTERS):
            names.append(n)
        elif n in ALL_MODELS:
            names.append(n)
        else:
            ap.error(f"unknown model {n!r}; known: {ALL_MODELS}, 'transformers', "
                     f"or a transformer with .legacy/.dynamo")
    if args.yolo_size % 32:
        ap.error("--yolo-size must be a multiple of 32 (YOLOv8's largest stride)")
    os.makedirs(args.output_dir, exist_ok=True)
    print(f"torch {torch.__version__}, onnx {onnx.__version__}, onnxruntime {ort.__version__}, "
          f"{torch.get_num_threads()} threads")

    failed = []
    t_all = time.perf_counter()
    for n in names:
        try:
            err, finite = export_one(n, args.output_dir, args.yolo_size, args.narrow)
            if not finite or not err <= args.max_rel:
                failed.append(f"{n} (rel err {err:.2e}{'' if finite else ', non-finite output'})")
        except Exception as e:  # report every model, then fail at the end
            print(f"== {n}: FAILED: {type(e).__name__}: {e}")
            failed.append(n)
    print(f"total {time.perf_counter() - t_all:.1f}s; exported {len(names) - len(failed)}/{len(names)}")
    if failed:
        print("failed: " + ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
