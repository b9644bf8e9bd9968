/* The activation formulas on the device: kernel_math.h's si_act_eval, the CPU backend's own
 * function, for the kernels that fuse an activation (kernels.cu's epilogues and maps, dwconv.cu's
 * depthwise convolution). */
#ifndef SI_CUDA_ACT_CUH
#define SI_CUDA_ACT_CUH

#include "engine/kernel_math.h"

__device__ __forceinline__ float act_apply(float v, const si_act &a) {
    return si_act_eval(v, a);
}

#endif
