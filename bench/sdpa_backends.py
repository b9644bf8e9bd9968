"""What PyTorch's attention backends reach on the vision transformers' shapes (issue 14).

For ViT-B/16, DeiT-S, DINOv2-S/14 and a Swin-T window stage at batch 256, FP16 and BF16:
torch.nn.functional.scaled_dot_product_attention with each backend forced (FlashAttention-2,
cuDNN, memory-efficient, math), Q, K and V strided views of a packed (N, T, 3, H, D) projection
as a ViT block makes them. Median of 30 after a warm-up, TFLOP/s (4 N H T^2 D per call), and
each output's max |diff| against the first backend's. Needs a GPU.

  python3 bench/sdpa_backends.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [(256, 12, 197, 64, "vit_b_16"), (256, 6, 197, 64, "deit_s"),
          (256, 6, 257, 64, "dinov2_s_14"), (256 * 64, 3, 49, 32, "swin_t stage 1")]
BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION,
            SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def median_ms(fn, reps=30):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[reps // 2]


def main():
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"{torch.cuda.get_device_name()}")
    for n, h, t, d, name in SHAPES:
        for dt in (torch.float16, torch.bfloat16):
            qkv = torch.randn(n, t, 3, h, d, device="cuda", dtype=dt)
            q, k, v = (x.transpose(1, 2) for x in qkv.unbind(2))
            flop, ref = 4.0 * n * h * t * t * d, None
            for be in BACKENDS:
                try:
                    with sdpa_kernel([be]):
                        out = F.scaled_dot_product_attention(q, k, v)
                        ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v))
                except RuntimeError as e:
                    print(f"{name:15s} {str(dt)[6:]:9s} {be.name:20s} refused: {str(e)[:80]}")
                    continue
                ref = out.float() if ref is None else ref
                diff = (out.float() - ref).abs().max().item()
                print(f"{name:15s} {str(dt)[6:]:9s} {be.name:20s} {ms:7.3f} ms "
                      f"{flop / ms / 1e9:6.1f} TFLOP/s  max|diff| {diff:.2e}", flush=True)


if __name__ == "__main__":
    main()
