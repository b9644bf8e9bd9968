"""OpenAI CLIP's image tower as its own code writes it (github.com/openai/CLIP, model.py):
nn.MultiheadAttention with batch_first=False, the residual stream sequence-first (L, N, D)
through every block, QuickGELU, a class token and a projection matrix. open_clip's towers are
built the same way. Random weights (nothing is downloaded); the test exports it with both of
torch's exporters to check that shardinfer runs this form of attention on its fast path."""
from collections import OrderedDict

import torch
from torch import nn


class LayerNorm(nn.LayerNorm):
    """CLIP's: computed in float32 whatever the input's type (its convert_weights leaves the
    LayerNorms in float32 when the rest goes to float16; here the weights are cast instead, so
    that model.half() runs too)."""

    def forward(self, x):
        w = self.weight.float() if self.weight is not None else None
        b = self.bias.float() if self.bias is not None else None
        y = nn.functional.layer_norm(x.float(), self.normalized_shape, w, b, self.eps)
        return y.type(x.dtype)


class QuickGELU(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(1.702 * x)


class ResidualAttentionBlock(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(width, heads)
        self.ln_1 = LayerNorm(width)
        self.mlp = nn.Sequential(OrderedDict([
            ("c_fc", nn.Linear(width, width * 4)),
            ("gelu", QuickGELU()),
            ("c_proj", nn.Linear(width * 4, width)),
        ]))
        self.ln_2 = LayerNorm(width)

    def forward(self, x):  # (L, N, D)
        y = self.ln_1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class VisionTransformer(nn.Module):
    def __init__(self, resolution=224, patch=16, width=768, layers=12, heads=12, output_dim=512):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, kernel_size=patch, stride=patch, bias=False)
        scale = width ** -0.5
        self.class_embedding = nn.Parameter(scale * torch.randn(width))
        self.positional_embedding = nn.Parameter(
            scale * torch.randn((resolution // patch) ** 2 + 1, width))
        self.ln_pre = LayerNorm(width)
        self.transformer = nn.Sequential(*[ResidualAttentionBlock(width, heads)
                                           for _ in range(layers)])
        self.ln_post = LayerNorm(width)
        self.proj = nn.Parameter(scale * torch.randn(width, output_dim))

    def forward(self, x):
        x = self.conv1(x)
        x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)  # (N, grid ** 2, D)
        cls = self.class_embedding.to(x.dtype) + torch.zeros(
            x.shape[0], 1, x.shape[-1], dtype=x.dtype, device=x.device)
        x = torch.cat([cls, x], dim=1) + self.positional_embedding.to(x.dtype)
        x = self.ln_pre(x).permute(1, 0, 2)  # NLD -> LND
        x = self.transformer(x).permute(1, 0, 2)  # LND -> NLD
        return self.ln_post(x[:, 0, :]) @ self.proj
