/* The activation formulas on the device, shared by the kernels that fuse an activation
 * (kernels.cu's epilogues and maps, dwconv.cu's depthwise convolution): one body, so every fused
 * path computes what the CPU backend's act_apply (src/cpu_kernels.c) computes, kind for kind. */
#ifndef SI_CUDA_ACT_CUH
#define SI_CUDA_ACT_CUH

#include "src/cpu_kernels.h"

__device__ __forceinline__ float act_apply(float v, const si_act &a) {
    switch (a.kind) {
    case SI_ACT_RELU: return v > 0.f ? v : 0.f;
    case SI_ACT_CLIP: v = v < a.lo ? a.lo : v; return v > a.hi ? a.hi : v;
    case SI_ACT_SIGMOID: return 1.f / (1.f + expf(-v));
    case SI_ACT_HARDSIGMOID: {
        float t = a.alpha * v + a.beta;
        t = t > 1.f ? 1.f : t;
        return t < 0.f ? 0.f : t;
    }
    case SI_ACT_HARDSWISH: {
        float t = v * (1.f / 6.f) + 0.5f;
        t = t > 1.f ? 1.f : t;
        t = t < 0.f ? 0.f : t;
        return v * t;
    }
    case SI_ACT_SILU: return v * (1.f / (1.f + expf(-v)));
    case SI_ACT_LEAKYRELU: return v >= 0.f ? v : a.alpha * v;
    default: return v;
    }
}

#endif
