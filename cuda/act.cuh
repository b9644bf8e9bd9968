/* The activation formulas on the device: kernel_math.h's si_act_eval, the CPU backend's own
 * function, for the kernels that fuse an activation (kernels.cu's epilogues and maps, dwconv.cu's
 * depthwise and narrowconv.cu's narrow convolutions). */
#ifndef SI_CUDA_ACT_CUH
#define SI_CUDA_ACT_CUH

#include "engine/kernel_math.h"

__device__ __forceinline__ float act_apply(float v, const si_act &a) {
    return si_act_eval(v, a);
}

// act_apply on V values with the switch on the kind taken once, outside the loop: inside each
// case the kind is a constant, so act_apply's own switch folds away (one formula, no copy of it).
// FAST (16-bit tensors): Sigmoid and SiLU as x / (1 + 2^(-x log2 e)) with the hardware's
// approximate exp2 and reciprocal, a few 1e-7 off the CPU's expf and division, far below the
// 16-bit rounding of the result, and about a quarter of the instructions. In the prologue of an
// EfficientNet block that is one SiLU per loaded element, which otherwise bounds the kernel.
// The rarer kinds through one call: inlined into every instantiation of the depthwise kernels,
// the transcendental ones (Sin, Cos, Log, Mish, ...) grew dwconv.cu's object from 5 to 14 MB.
static __device__ __noinline__ float si_act_rare(float v, si_act a) {
    return act_apply(v, a);
}

template <bool FAST, int V>
__device__ __forceinline__ void si_act_vec(float (&f)[V], const si_act &a) {
#define SI_ACT_CASE(K)                                                                             \
    case K: {                                                                                      \
        si_act k = a;                                                                              \
        k.kind = K;                                                                                \
        _Pragma("unroll") for (int i = 0; i < V; i++) f[i] = act_apply(f[i], k);                   \
        return;                                                                                    \
    }
    if (FAST && a.kind == SI_ACT_SILU) {
#pragma unroll
        for (int i = 0; i < V; i++) f[i] = __fdividef(f[i], 1.f + __expf(-f[i]));
        return;
    }
    if (FAST && a.kind == SI_ACT_SIGMOID) {
#pragma unroll
        for (int i = 0; i < V; i++) f[i] = __fdividef(1.f, 1.f + __expf(-f[i]));
        return;
    }
    switch (a.kind) {
    case SI_ACT_NONE:
        return;
        SI_ACT_CASE(SI_ACT_RELU)
        SI_ACT_CASE(SI_ACT_CLIP)
        SI_ACT_CASE(SI_ACT_SIGMOID)
        SI_ACT_CASE(SI_ACT_HARDSIGMOID)
        SI_ACT_CASE(SI_ACT_HARDSWISH)
        SI_ACT_CASE(SI_ACT_SILU)
        SI_ACT_CASE(SI_ACT_LEAKYRELU)
    default:
#pragma unroll
        for (int i = 0; i < V; i++) f[i] = si_act_rare(f[i], a);
    }
#undef SI_ACT_CASE
}

#endif
