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
    /* qk_eps > 0: cosine attention (trans_b), each row of Q and K divided by max(|row|, qk_eps)
     * as it is loaded, Q's then multiplied by qk_scale[(b / qs_div) % qs_mod] (element type T;
     * NULL: 1) */
    float qk_eps;
    const void *qk_scale;
    int64_t qs_div, qs_mod;
    si_act act; /* applied to Y as it is stored (LeViT's HardSwish on the merged heads) */
} si_k_attn;

cudaError_t si_k_attention(cudaStream_t s, int t, const si_k_attn *p, const void *q, const void *k,
                           const void *v, const void *bias, void *y);
/* Which of our kernels si_k_attention runs for these operands of element type t: Hopper's wgmma
 * one (attention_sm90.cu), the resident or the tiled flash kernel (mma.sync), or one block a row.
 * The autotune cache keys an attention node's timed choice against cuDNN's SDPA on it too. */
enum { SI_ATTN_ROWS = 1, SI_ATTN_FLASH, SI_ATTN_RESIDENT, SI_ATTN_WGMMA };
int si_k_attention_kernel(int t, const si_k_attn *p, const void *q, const void *k, const void *v,
                          const void *bias, const void *y);
const char *si_k_attention_kernel_name(int kernel);
/* Why si_k_attention_kernel chose the one-block-per-row kernel for these operands (in buf, or a
 * static string). */
const char *si_k_attention_rows_why(int t, const si_k_attn *p, const void *q, const void *k,
                                    const void *v, const void *y, char *buf, size_t cap);
/* Whether the one-block-per-row kernel (FP32, or head sizes other than 32/64/128) has the shared
 * memory for a row of s scores. */
bool si_k_attention_fits(int64_t d, int64_t s);

/* Whether operand i (0..3: Q, K, V, Y) at base, of es-byte elements, starts every matrix and
 * every row on a multiple of unit bytes (the kernels' copies move 16-byte chunks) */
static inline bool si_attn_aligned(const si_k_attn *p, int i, const void *base, size_t es,
                                   size_t unit) {
    if ((uintptr_t)base % unit || (p->ld[i] * es) % unit) return false;
    for (int d = 0; d < p->nbd; d++)
        if ((p->ost[i][d] * es) % unit) return false;
    return true;
}

/* Matrix b's offsets in Q, K, V and Y (off[i] from ost[i]): b decoded over the batch dims once,
 * its 64-bit divisions shared by the four operands */
__device__ inline void si_attn_offsets(const si_k_attn &p, int64_t b, int64_t off[4]) {
    off[0] = off[1] = off[2] = off[3] = 0;
    for (int d = p.nbd - 1; d >= 0; d--) {
        const int64_t i = b % p.bdims[d];
        for (int o = 0; o < 4; o++) off[o] += i * p.ost[o][d];
        b /= p.bdims[d];
    }
}

/* Matrix b's offset in the bias: b decoded over the batch dims, the bias's index on each dim
 * modulo its own extent (bmod) */
__device__ inline int64_t si_attn_bias_off(const si_k_attn &p, int64_t b) {
    int64_t off = 0;
    for (int d = p.nbd - 1; d >= 0; d--) {
        int64_t i = b % p.bdims[d];
        off += i % p.bmod[d] * p.bst[d];
        b /= p.bdims[d];
    }
    return off;
}

#endif
