"""Vision towers from Hugging Face transformers' own model code, built from their configs with
random weights (nothing is downloaded): ViT, CLIP's vision tower with its projection, SigLIP's
and DINOv2, each with the eager attention (matmul, softmax, matmul written out) and the SDPA one.
Their widths are ViT-S's and their depth 4 blocks in the tests (TEST_SIZE: every attention form is
there, exported in seconds); --full gives the base models (ViT-B/16 and its peers) for the
benchmarks."""
import torch

TEST_SIZE = {"hidden_size": 384, "num_hidden_layers": 4, "num_attention_heads": 6,
             "intermediate_size": 1536}
FULL_SIZE = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
             "intermediate_size": 3072}


class Tower(torch.nn.Module):
    """pixel_values -> the model's image output: the projected embedding where it has one, else
    the pooled output, else the last hidden states."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        out = self.model(pixel_values=x)
        for name in ("image_embeds", "pooler_output", "last_hidden_state"):
            y = getattr(out, name, None)
            if y is not None:
                return y
        raise RuntimeError("no image output")


def build(kind, attn, full=False):
    import transformers as T

    size = dict(FULL_SIZE if full else TEST_SIZE)
    if kind == "vit":
        cfg, cls = T.ViTConfig(image_size=224, patch_size=16, **size), T.ViTModel
        kw = {"add_pooling_layer": False}
    elif kind == "clip":
        cfg = T.CLIPVisionConfig(image_size=224, patch_size=16, projection_dim=512, **size)
        cls, kw = T.CLIPVisionModelWithProjection, {}
    elif kind == "siglip":
        cfg, cls, kw = T.SiglipVisionConfig(image_size=224, patch_size=16, **size), \
            T.SiglipVisionModel, {}
    elif kind == "dinov2":
        size.pop("intermediate_size")
        cfg, cls, kw = T.Dinov2Config(image_size=224, patch_size=14, **size), T.Dinov2Model, {}
    else:
        raise ValueError(kind)
    cfg._attn_implementation = attn
    return Tower(cls(cfg, **kw))
