/* CPU kernels: plain functions over float32 arrays in NCHW layout, parallel with OpenMP, GEMM
 * through OpenBLAS. They know nothing of graphs; the CPU backend (backend.c) calls them and
 * the GPU backend's kernels are checked against them. */
#ifndef SI_CPU_KERNELS_H
#define SI_CPU_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/ops.h"

/* Floats of scratch the conv needs per thread (0 if it needs none). */
size_t si_cpu_conv2d_scratch(const si_conv_shape *s);
/* y = act(conv(x, w) + bias). bias may be NULL. scratch: nthreads * si_cpu_conv2d_scratch floats,
 * where nthreads = omp_get_max_threads() at the call. x, w, bias borrowed; writes y. */
void si_cpu_conv2d(const si_conv_shape *s, const float *x /* (N,C,H,W) */,
                   const float *w /* (M,C/g,kh,kw) */, const float *bias /* (M) */, si_act act,
                   float *y /* (N,M,oh,ow) */, float *scratch);

/* Max pooling; padded positions never win. */
void si_cpu_maxpool2d(const si_pool_shape *s, const float *x, float *y);
/* (N, C, H, W) -> (N, C, 1, 1) mean. */
void si_cpu_global_avgpool(const float *x, int64_t nc, int64_t hw, float *y);

/* y (M,N) = alpha * op(a) * op(b) + beta * c, with c broadcast from (cm, cn) where cm is 1 or M
 * and cn is 1 or N (c may be NULL). op(a) is (M,K): a is (K,M) if trans_a. */
void si_cpu_gemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                 const float *b, float beta, const float *c, int cm, int cn, float *y);

/* Elementwise with numpy broadcasting: shapes are right-aligned to ndim (pad with 1s). */
void si_cpu_binary(si_binop op, int ndim, const int64_t *a_dims, const float *a,
                   const int64_t *b_dims, const float *b, const int64_t *y_dims, float *y,
                   si_act act);

void si_cpu_activation(const float *x, int64_t n, si_act act, float *y);
/* Per-channel affine over dim 1: y = x * scale[c] + shift[c] (inference BatchNormalization). */
void si_cpu_channel_affine(const float *x, int64_t n, int64_t c, int64_t inner, const float *scale,
                           const float *shift, float *y);

/* Row-wise softmax of (rows, cols). */
void si_cpu_softmax(const float *x, int64_t rows, int64_t cols, float *y);

/* --- the rest of the engine's ops (opsets 7-22); dims are int64, tensors contiguous --------- */

/* LayerNormalization of (rows, len): each row to mean 0 and variance 1 (statistics in double),
 * then times scale[j % ns] plus bias[j % nb] (bias may be NULL). Fused neighbours, NULL if
 * none: x times mul first, res (rows, len) added last. */
void si_cpu_layernorm(const float *x, const float *mul, int64_t rows, int64_t len,
                      const float *scale, int64_t ns, const float *bias, int64_t nb,
                      const float *res, float eps, float *y);

/* InstanceNormalization of (n, c, inner): each (n, c) plane normalised like a LayerNorm row,
 * then times scale[c] plus bias[c]. */
void si_cpu_instancenorm(const float *x, int64_t n, int64_t c, int64_t inner, const float *scale,
                         const float *bias, float eps, float *y);

/* Average pooling; count_include_pad as ONNX defines it (padded cells count in the divisor, the
 * cells added by ceil_mode never do). */
void si_cpu_avgpool2d(const si_pool_shape *s, int count_include_pad, const float *x, float *y);

/* Softmax over one axis: x viewed as (outer, len, inner). */
void si_cpu_softmax_axis(const float *x, int64_t outer, int64_t len, int64_t inner, float *y);

/* Concat along an axis: inputs viewed as (outer, sizes[i], inner); y is (outer, sum, inner). */
void si_cpu_concat(int n, const float *const *xs, const int64_t *sizes, int64_t outer,
                   int64_t inner, float *y);
/* Split: the inverse of concat. */
void si_cpu_split(const float *x, int64_t outer, int64_t inner, int n, const int64_t *sizes,
                  float *const *ys);

/* y[i] = x[start[d] + i[d] * step[d]] for every dim d (starts already clamped, steps != 0). */
void si_cpu_slice(int ndim, const int64_t *x_dims, const float *x, const int64_t *starts,
                  const int64_t *steps, const int64_t *y_dims, float *y);

/* y = x transposed: y_dims[d] = x_dims[perm[d]]. */
void si_cpu_transpose(int ndim, const int64_t *x_dims, const int *perm, const float *x, float *y);

/* Tile: y_dims[d] = x_dims[d] times a whole repeat, copied as the broadcast of
 * si_tile_split (kernel_math.h), which shape inference checked fits. */
void si_cpu_tile(int ndim, const int64_t *x_dims, const float *x, const int64_t *y_dims, float *y);

/* Broadcast x to y_dims (numpy rules, shapes right-aligned to ndim): Expand. */
void si_cpu_broadcast(int ndim, const int64_t *x_dims, const float *x, const int64_t *y_dims,
                      float *y);

/* Gather along an axis: x viewed as (outer, len, inner), idx (n) in [-len, len). */
void si_cpu_gather(const float *x, int64_t outer, int64_t len, int64_t inner, const int64_t *idx,
                   int64_t n, float *y);

/* GatherND, GatherElements and ScatterElements by their geometry (engine/ops.h), idx the
 * indices as int64 (geo->rows * geo->k of GatherND's, the product of geo->idims otherwise).
 * Shape inference checked every index; one out of range anyway gives 0 (gathers) or is skipped
 * (scatter), never an access outside x or y. ScatterElements copies x (nx values) into y, then
 * reduces the updates in index order, one column along the axis at a time. */
void si_cpu_gather_nd(const si_gathernd_geom *geo, const float *x, const int64_t *idx, float *y);
/* Rotary embedding over (rows, T, D) x into y: tokens t < skip copied, the others rotated with
 * row t - skip of c and s (T - skip, D); half: partners D/2 apart (kernel_math.h). */
void si_cpu_rotary(const float *x, const si_row_geom *rg, int64_t rows, int64_t t, int64_t d,
                   int64_t skip, bool half, const float *c, const float *s, float *y);
/* Rows of d, each where rg says it starts in x: y = x s[(r / div) % mod] / max(|x row|_2, eps),
 * s NULL (or mod 0) for 1; y row-major. */
void si_cpu_rownorm(const float *x, const si_row_geom *rg, int64_t rows, int64_t d, float eps,
                    const float *s, int64_t div, int64_t mod, float *y);
void si_cpu_gather_elements(const si_elements_geom *geo, const float *x, const int64_t *idx,
                            float *y);
void si_cpu_scatter_elements(const si_elements_geom *geo, int red, const float *x, int64_t nx,
                             const int64_t *idx, const float *upd, float *y);

/* Attention over nb matrices: y[b] = softmax(scale * q[b] k[b]^T + bias) v[b], q (t, d),
 * k (s, d) (trans_b) or k^T (d, s), v (s, dv), y (t, dv). Matrix b of operand i (q, k, v, y)
 * starts at off[i][b], its rows ld[i] apart (a row's elements adjacent). bias: NULL or read at
 * bias_off[b] + i * bst_t + j * bst_s (broadcast strides may be 0). qk_eps > 0: cosine
 * attention, each row of q and of k (trans_b) divided by max(|row|, qk_eps) first, q's then
 * multiplied by qk_scale[(b / qs_div) % qs_mod] (qk_scale NULL: 1). act: applied to y. */
typedef struct {
    int64_t nb, t, s, d, dv;
    float scale;
    int trans_b;
    const int64_t *off[4];
    int64_t ld[4];
    const float *bias;
    const int64_t *bias_off;
    int64_t bst_t, bst_s;
    float qk_eps;
    const float *qk_scale;
    int64_t qs_div, qs_mod;
    si_act act;
} si_cpu_attn;
void si_cpu_attention(const si_cpu_attn *p, const float *q, const float *k, const float *v,
                      float *y);
/* numpy matmul on shapes already promoted to rank >= 2: a (..., M, K), b (..., K, N), batch
 * dims broadcast to y (..., M, N); all three padded to the same ndim. */
void si_cpu_matmul(int ndim, const int64_t *a_dims, const float *a, const int64_t *b_dims,
                   const float *b, const int64_t *y_dims, float *y);

/* The part of x at starts, every steps, of part_dims, written into y (whole dims y_dims) from
 * index `at` along `axis`: one input of a Concat, straight from the Slice's input. */
void si_cpu_slice_into(int ndim, const int64_t *x_dims, const float *x, const int64_t *starts,
                       const int64_t *steps, const int64_t *part_dims, int axis, int64_t at,
                       const int64_t *y_dims, float *y);

/* pads: begin[ndim] then end[ndim], negative values crop. */
void si_cpu_pad(int mode, int ndim, const int64_t *x_dims, const float *x, const int64_t *pads,
                float value, const int64_t *y_dims, float *y);

/* Reduces the dims with reduce[d] != 0; y has x's shape with those dims set to 1. */
void si_cpu_reduce(int op, int ndim, const int64_t *x_dims, const float *x, const uint8_t *reduce,
                   float *y);

/* Resizes the last two dims of (nc, ih, iw) to (oh, ow) with the given scales (output/input,
 * as ONNX's coordinate transforms use them), per ONNX Resize-11..19 semantics. */
void si_cpu_resize2d(const si_resize_params *p, int64_t nc, int ih, int iw, int oh, int ow,
                     float scale_h, float scale_w, const float *x, float *y);

#endif
