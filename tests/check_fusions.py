#!/usr/bin/env python3
"""The load-time fusions that make transformer-family models fast, held on the real exports
(tests/export_models.py --models transformers, both exporters): `shardinfer inspect` must report
the attention patterns fused into Attention nodes (their Q, K, V and Y read and written in place
of the head split and merge), the Linear layers' bias and residual Adds in
their GEMMs, and no Softmax, Erf or Sigmoid left on its own where the model's attention and
GELU/QuickGELU should have been fused, and in the ViTs whose head reads the class token alone
the Gather of it moved up through the last block (which then runs for that token). A change that silently stops a fusion keeps every result
right and loses the speed; this catches it without a GPU.

  check_fusions.py --shardinfer build/shardinfer --models DIR
"""
import argparse
import os
import re
import subprocess
import sys

# per model (or per export, "name.exporter"): the least each count of the "passes:" line must
# reach, and the node types that must not remain on their own ("Type>n": no more than n)
EXPECT = {
    # every attention reads Q, K, V from the packed projection and writes the merged heads in
    # place ("operands"): no Split, and no Transpose but the patch embedding's; the class
    # token's Gather moved up ("token")
    "vit_b_16": ({"attention": 12, "operands": 48, "bias": 48, "residual": 24, "token": 1},
                 ["Softmax", "Erf", "Split"]),
    "deit_s": ({"attention": 12, "operands": 48, "bias": 48, "residual": 24, "token": 1},
               ["Softmax", "Erf", "Split"]),
    "clip_vit_b_16": ({"attention": 12, "operands": 48, "bias": 48, "residual": 24, "token": 1},
                      ["Softmax", "Sigmoid", "Split"]),
    # LayerScale folded into fc2/proj, so the residual Adds fuse as well
    "dinov2_s_14": ({"attention": 12, "operands": 48, "bias": 48, "scales": 24, "residual": 24,
                     "token": 1}, ["Softmax", "Erf", "Split"]),
    # 5 of Swin-T's 12 blocks add the shifted-window mask through a Reshape, fused as well; its
    # window padding and crop (none at 224) cost nothing; torch.roll's Concats read the Slices'
    # inputs (2 halves x 2 axes x 2 rolls x 5 shifted blocks)
    "swin_t": ({"attention": 12, "operands": 48, "bias": 48, "residual": 12, "views": 15,
                "rolled": 40}, ["Softmax", "Erf", "Pad", "Slice"]),
    # nn.MultiheadAttention (torchvision's ViT, OpenAI CLIP's tower: tests/clip_openai.py), from
    # the dynamo exporter: the heads read from and written to the projections in place, the
    # sequence-first (T, N, E) layout as strides; the out-projection's Gemm a Linear layer with
    # the residual in its GEMM; torchvision's Transposes around each attention moved across the
    # projections until none is left ("moves": Gemms made Linear, Reshape pairs merged,
    # Transposes moved)
    "tv_vit_b_16.dynamo": ({"attention": 12, "operands": 48, "residual": 24, "token": 1,
                            "moves": 61}, ["Softmax", "Erf", "Transpose>1"]),
    "clip_mha_b_16.dynamo": ({"attention": 12, "operands": 48, "residual": 24, "moves": 24,
                              "token": 1}, ["Softmax", "Sigmoid"]),
    # the legacy exporter computes their Reshapes' shapes from the tensors (Shape nodes read
    # them), which keeps the Gemm's Reshapes and torchvision's Transposes: fast attention still
    "tv_vit_b_16.legacy": ({"attention": 12, "operands": 48, "residual": 12, "moves": 13},
                           ["Softmax", "Erf"]),
    "clip_mha_b_16.legacy": ({"attention": 12, "operands": 48, "residual": 12, "moves": 12,
                              "token": 1}, ["Softmax", "Sigmoid"]),
    # EVA-02: rotary embeddings on q and k, one Rotary node each, which reads q or k from its
    # projection in place and writes it as the attention reads it (no head-split Transpose
    # left); V and Y in place; its SwiGLU's gate product normalised by the LayerNorm that reads
    # both factors ("norm")
    "eva02_b_14": ({"attention": 12, "operands": 60, "bias": 72, "residual": 24, "rotary": 24,
                    "norm": 12}, ["Softmax", "Neg", "Split", "Unsqueeze", "Mul", "Transpose>1"]),
    # BEiT and LeViT: the relative-position bias gathered from its table at load, added in the
    # fused node
    "beit_b_16": ({"attention": 12, "operands": 48, "bias": 48, "residual": 24}, ["Softmax"]),
    # LeViT: head size 16 with V twice or four times as wide; its Linear layers' BatchNorm1d
    # folds into them (the BatchNorms before its two heads stay); the HardSwish on the merged
    # heads runs in the attention node as it stores them
    "levit_128": ({"attention": 14, "operands": 56, "residual": 26},
                  ["Softmax", "BatchNormalization>2", "HardSwish"]),
    # Swin V2's cosine attention: q and k's L2 normalisation and the per-head logit scale run in
    # the attention node (no RowNorm left), which reads q, k and v from the packed projection in
    # place (so no head-split Transpose, Slice or Squeeze is left); its relative-position MLP
    # over constant coordinates (MatMul, Relu, GatherND, Sigmoid) folds at load, so no such node
    # runs per batch; its post-norm blocks' Adds run in their LayerNorms
    "swinv2_t": ({"attention": 12, "operands": 48, "bias": 48, "norm": 24},
                 ["Softmax", "Sigmoid", "GatherND", "Relu", "Exp", "ReduceL2", "Clip", "Expand",
                  "Div", "Mul", "Add", "Slice", "Squeeze", "Transpose>28",
                  "RowNorm(ReduceL2+Clip+Div)"]),
    # Hugging Face's towers (tests/hf_models.py: 4 blocks), eager and SDPA attention: separate
    # q/k/v projections read in place through their (N, T, H, D) Reshapes; ViT's eager mask of
    # zeros dropped ("zero masks"), so the kernels without a bias run
    "hf_vit_eager": ({"attention": 4, "operands": 16, "bias": 24, "residual": 8, "zero": 4},
                     ["Softmax"]),
    # torch's SDPA decomposition zeroes the Softmax's NaN (Where(IsNaN(p), 0, p)): absorbed
    "hf_vit_sdpa": ({"attention": 4, "operands": 16, "bias": 24, "residual": 8, "zero": 4},
                    ["Softmax", "IsNaN", "Where"]),
    "hf_clip_eager": ({"attention": 4, "operands": 16, "bias": 24, "residual": 8, "token": 1},
                      ["Softmax", "Sigmoid"]),
    "hf_clip_sdpa": ({"attention": 4, "operands": 16, "bias": 24, "residual": 8, "token": 1},
                     ["Softmax", "Sigmoid"]),
    # SigLIP: the attention-pooling head's one query (a Tiled probe) fuses too in the dynamo
    # export; the legacy one folds the probe's projection to a constant, whose attention stays
    # unfused (warned at load; one query a batch)
    "hf_siglip_eager.dynamo": ({"attention": 5, "operands": 18, "residual": 9}, ["Softmax"]),
    "hf_siglip_sdpa.dynamo": ({"attention": 5, "operands": 18, "residual": 9}, ["Softmax"]),
    "hf_siglip_eager.legacy": ({"attention": 4, "operands": 16, "residual": 9}, ["Softmax>1"]),
    "hf_siglip_sdpa.legacy": ({"attention": 4, "operands": 16, "residual": 9}, ["Softmax>1"]),
    "hf_dinov2_eager": ({"attention": 4, "operands": 16, "bias": 24, "residual": 8, "token": 1},
                        ["Softmax"]),
    "hf_dinov2_sdpa": ({"attention": 4, "operands": 16, "bias": 24, "residual": 8, "token": 1},
                       ["Softmax"]),
    # LayerScale folded into fc2 through the Transpose back to (N, C, H, W), and the residual
    # added by fc2's GEMM (read through a Transpose of the same bytes on the GPU)
    "convnext_t": ({"bias": 36, "scales": 18, "residual": 18}, ["Erf"]),
    "convnextv2_t": ({"bias": 36, "residual": 18}, ["Erf"]),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shardinfer", required=True)
    ap.add_argument("--models", required=True)
    a = ap.parse_args()
    bad, seen = [], 0
    for case in sorted(os.listdir(a.models)):
        base = case if case in EXPECT else case.split(".")[0]
        if base not in EXPECT:
            continue
        seen += 1
        p = subprocess.run([a.shardinfer, "inspect", os.path.join(a.models, case, "model.onnx")],
                           capture_output=True, text=True, timeout=300)
        line = next((l for l in p.stdout.splitlines() if l.startswith("passes:")), "")
        got = {k: int(v) for v, k in re.findall(
            r"(\d+) (activations|residual|bias|attention|scales)(?! operands| masks)", line)}
        got["operands"] = int((re.findall(r"(\d+) attention operands in place", line) or [0])[0])
        got["views"] = int((re.findall(r"(\d+) Pads/Slices that move nothing", line) or [0])[0])
        got["rolled"] = int((re.findall(r"(\d+) Concat inputs read through", line) or [0])[0])
        got["token"] = int((re.findall(r"(\d+) one-token Gathers moved up", line) or [0])[0])
        got["moves"] = int((re.findall(r"(\d+) Gemms made Linear", line) or [0])[0])
        got["zero"] = int((re.findall(r"(\d+) attention masks of zeros dropped", line) or [0])[0])
        got["rotary"] = int((re.findall(r"(\d+) rotary embeddings made one", line) or [0])[0])
        got["norm"] = int((re.findall(r"(\d+) Muls and Adds fused into LayerNorm", line) or [0])[0])
        counts = {t: int(c) for c, t in
                  re.findall(r"^\s+(\d+)\s+(\S+)(?!.*on the host)", p.stdout, re.M)}
        mins, banned = EXPECT[base]
        short = [f"{k} {got.get(k, 0)} < {v}" for k, v in mins.items() if got.get(k, 0) < v]
        # "Type" may not remain; "Type>n": no more than n of it
        left = [t for t in banned
                if counts.get(t.split(">")[0], 0) > (int(t.split(">")[1]) if ">" in t else 0)]
        status = "ok" if p.returncode == 0 and not short and not left else "FAIL"
        print(f"{status:4} {case}: {line[len('passes: '):]}"
              + (f"; short: {', '.join(short)}" if short else "")
              + (f"; left unfused: {', '.join(left)}" if left else ""))
        if status != "ok":
            bad.append(case)
    if seen == 0:
        sys.exit("check_fusions: no transformer exports in " + a.models)
    print(f"{seen - len(bad)} of {seen} exports fused as expected")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
