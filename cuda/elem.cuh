// The element types' conversions to and from float, for the kernels that load T = float, __half
// or __nv_bfloat16 and compute in float (kernels.cu, attention.cu, dwconv.cu).
#ifndef SI_CUDA_ELEM_CUH
#define SI_CUDA_ELEM_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

__device__ __forceinline__ float si_to_f(float v) {
    return v;
}
__device__ __forceinline__ float si_to_f(__half v) {
    return __half2float(v);
}
__device__ __forceinline__ float si_to_f(__nv_bfloat16 v) {
    return __bfloat162float(v);
}
template <typename T> __device__ __forceinline__ T si_from_f(float v);
template <> __device__ __forceinline__ float si_from_f<float>(float v) {
    return v;
}
template <> __device__ __forceinline__ __half si_from_f<__half>(float v) {
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 si_from_f<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

#endif
