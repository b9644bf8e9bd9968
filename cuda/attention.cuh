/* Fused attention on the GPU (cuda/attention.cu): the CUDA backend's SI_OP_ATTENTION. */
#ifndef SI_CUDA_ATTENTION_CUH
#define SI_CUDA_ATTENTION_CUH

#include "cuda/kernels.cuh"

/* nb matrices Q (t, d), K (s, d) (trans_b) or K^T (d, s), V (s, dv), Y (t, dv); a row's
 * elements adjacent. Matrix b (decoded over the batch dims bdims[0..nbd)) of operand i (Q, K, V,
 * Y) starts at the batch offset from ost[i] and has its rows ld[i] apart, so the operands may be
 * strided views of a packed QKV projection and of the merged heads. The bias (or NULL) is read
 * at the offset of batch index (i_d mod bmod[d]) over bst (bmod 1 where it broadcasts, the
 * window count where a Swin mask tiles) + i * bst_t + j * bst_s. */
typedef struct {
    int64_t nb, t, s, d, dv;
    float scale;
    int trans_b;
    int nbd;
    int64_t bdims[SI_TV_MAXD], bst[SI_TV_MAXD], bmod[SI_TV_MAXD];
    int64_t bst_t, bst_s;
    int64_t ost[4][SI_TV_MAXD], ld[4];
} si_k_attn;

cudaError_t si_k_attention(cudaStream_t s, int t, const si_k_attn *p, const void *q, const void *k,
                           const void *v, const void *bias, void *y);
/* Whether the one-block-per-row kernel (FP32, or head sizes other than 32/64/128) has the shared
 * memory for a row of s scores. */
bool si_k_attention_fits(int64_t d, int64_t s);

#endif
