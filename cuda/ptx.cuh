// Single PTX instructions the kernels share (cuda/attention.cu, cuda/attention_sm90.cu,
// cuda/linear_sm90.cu): the MUFU 2^x and 1/x, and cp.async's 16-byte copies into shared memory.
#ifndef SI_CUDA_PTX_CUH
#define SI_CUDA_PTX_CUH

#include <stdint.h>

// 2^x in one MUFU instruction; results below 2^-126 flush to 0 (a probability that small is 0)
static __device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// 1/x in one MUFU instruction, subnormal arguments and results flushed to 0
static __device__ __forceinline__ float rcp(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// one 16-byte chunk global -> shared (a shared-space address) without the registers; zeros
// when !valid (g must still be a valid address)
static __device__ __forceinline__ void cp16s(uint32_t sm, const void *g, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(sm), "l"(g),
                 "r"(valid ? 16 : 0));
}
static __device__ __forceinline__ void cp_commit() {
    asm volatile("cp.async.commit_group;");
}
// every group but the newest N has landed (for this thread)
template <int N> static __device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

#endif
