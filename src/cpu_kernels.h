/* CPU kernels: plain functions over float32 arrays in NCHW layout, parallel with OpenMP, GEMM
 * through OpenBLAS. They know nothing of graphs; the CPU backend (cpu_backend.c) calls them and
 * the GPU backend's kernels are checked against them. */
#ifndef SI_CPU_KERNELS_H
#define SI_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* An activation fused into the op that precedes it. */
typedef enum { SI_ACT_NONE = 0, SI_ACT_RELU, SI_ACT_CLIP } si_act_kind;
typedef struct {
    int kind;
    float lo, hi; /* SI_ACT_CLIP bounds */
} si_act;

typedef struct {
    int n, c, h, w; /* input (N, C, H, W) */
    int m, kh, kw;  /* weight (M, C/group, kh, kw) */
    int group;
    int sh, sw, dh, dw;
    int pt, pl, pb, pr; /* pads: top, left, bottom, right */
    int oh, ow;         /* output (N, M, oh, ow) */
} si_conv_shape;

/* Floats of scratch the conv needs per thread (0 if it needs none). */
size_t si_cpu_conv2d_scratch(const si_conv_shape *s);
/* y = act(conv(x, w) + bias). bias may be NULL. scratch: nthreads * si_cpu_conv2d_scratch floats,
 * where nthreads = omp_get_max_threads() at the call. x, w, bias borrowed; writes y. */
void si_cpu_conv2d(const si_conv_shape *s, const float *x /* (N,C,H,W) */,
                   const float *w /* (M,C/g,kh,kw) */, const float *bias /* (M) */, si_act act,
                   float *y /* (N,M,oh,ow) */, float *scratch);

typedef struct {
    int n, c, h, w;
    int kh, kw, sh, sw, dh, dw;
    int pt, pl, pb, pr;
    int oh, ow;
} si_pool_shape;
/* Max pooling; padded positions never win. */
void si_cpu_maxpool2d(const si_pool_shape *s, const float *x, float *y);
/* (N, C, H, W) -> (N, C, 1, 1) mean. */
void si_cpu_global_avgpool(const float *x, int64_t nc, int64_t hw, float *y);

/* y (M,N) = alpha * op(a) * op(b) + beta * c, with c broadcast from (cm, cn) where cm is 1 or M
 * and cn is 1 or N (c may be NULL). op(a) is (M,K): a is (K,M) if trans_a. */
void si_cpu_gemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                 const float *b, float beta, const float *c, int cm, int cn, float *y);

/* Elementwise with numpy broadcasting: shapes are right-aligned to ndim (pad with 1s). */
typedef enum { SI_BIN_ADD = 0, SI_BIN_SUB, SI_BIN_MUL, SI_BIN_DIV } si_binop;
void si_cpu_binary(si_binop op, int ndim, const int64_t *a_dims, const float *a,
                   const int64_t *b_dims, const float *b, const int64_t *y_dims, float *y,
                   si_act act);

void si_cpu_activation(const float *x, int64_t n, si_act act, float *y);
/* Per-channel affine over dim 1: y = x * scale[c] + shift[c] (inference BatchNormalization). */
void si_cpu_channel_affine(const float *x, int64_t n, int64_t c, int64_t inner, const float *scale,
                           const float *shift, float *y);

/* Row-wise softmax of (rows, cols). */
void si_cpu_softmax(const float *x, int64_t rows, int64_t cols, float *y);

#endif
