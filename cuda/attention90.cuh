// Fused attention on Hopper's warp-group MMAs (cuda/attention_sm90.cu, CUTLASS's CuTe): the
// interface cuda/attention.cu uses. Built where CUTLASS's headers were found (SI_HAVE_ATTN90);
// a caller still asks si_cuda_attn90_ok for each call, on an sm_90 device only.
#pragma once
#include "cuda/attention.cuh"

#ifdef SI_HAVE_ATTN90
// 1 if the kernel runs p with element type t (FP16/BF16, head size 64, K as rows, 65 to 272 keys,
// 16-byte rows; a bias (NULL: none) of the element type) at these addresses; 0 if not
int si_cuda_attn90_ok(int t, const si_k_attn *p, const void *q, const void *k, const void *v,
                      const void *bias, const void *y);
// enqueues Y = softmax(scale Q K^T + bias) V on s (capturable into a graph); borrows all
cudaError_t si_cuda_attn90_run(cudaStream_t s, int t, const si_k_attn *p, const void *q,
                               const void *k, const void *v, const void *bias, void *y);
#else // built without CUTLASS
static inline int si_cuda_attn90_ok(int t, const si_k_attn *p, const void *q, const void *k,
                                    const void *v, const void *bias, const void *y) {
    return 0;
}
static inline cudaError_t si_cuda_attn90_run(cudaStream_t s, int t, const si_k_attn *p,
                                             const void *q, const void *k, const void *v,
                                             const void *bias, void *y) {
    return cudaErrorNotSupported;
}
#endif
