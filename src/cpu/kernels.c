/* CPU kernels. Parallelism: an outer OpenMP loop over independent (image, group) or (image,
 * channel) planes, or over fixed blocks of a GEMM's output columns; OpenBLAS (its OpenMP build)
 * runs single-threaded inside those regions, so no result depends on the thread count. */
#include "kernels.h"

#include "base/common.h"
#include "engine/kernel_math.h"

#include <cblas.h>
#include <stdbool.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Threads share a GEMM by blocks of its output columns, each a single-threaded sgemm, never by
 * rows: OpenBLAS's own threaded split moves the last bits of a row with the thread count, while
 * a column's value is the same whichever block holds it (e2e_thread_counts holds this). */
enum { GEMM_COLS = 256, GEMM_ROWS = 128 };

/* SI_MAX_DIMS (onnx.h): the most dims a tensor has, so index arrays can live on the stack. */
#define MAXD 8
/* Below this many elements a parallel region costs more than it saves. */
#define PAR_MIN 65536

size_t si_cpu_conv2d_scratch(const si_conv_shape *s) {
    int cg = s->c / s->group;
    bool pointwise = s->kh == 1 && s->kw == 1 && s->sh == 1 && s->sw == 1 && s->pt == 0 &&
                     s->pl == 0 && s->pb == 0 && s->pr == 0;
    bool depthwise = cg == 1 && s->m == s->group;
    if (pointwise || depthwise) return 0;
    return (size_t)cg * s->kh * s->kw * s->oh * s->ow;
}

/* col (C/g*kh*kw, oh*ow) for one image and group. */
static void im2col(const si_conv_shape *s, const float *x, float *col) {
    int cg = s->c / s->group, ohw = s->oh * s->ow;
    for (int ci = 0; ci < cg; ci++)
        for (int ky = 0; ky < s->kh; ky++)
            for (int kx = 0; kx < s->kw; kx++) {
                float *dst = col + ((size_t)(ci * s->kh + ky) * s->kw + kx) * ohw;
                const float *src = x + (size_t)ci * s->h * s->w;
                for (int oy = 0; oy < s->oh; oy++) {
                    int iy = oy * s->sh - s->pt + ky * s->dh;
                    float *d = dst + (size_t)oy * s->ow;
                    if (iy < 0 || iy >= s->h) {
                        memset(d, 0, sizeof(float) * s->ow);
                        continue;
                    }
                    const float *row = src + (size_t)iy * s->w;
                    int ix0 = -s->pl + kx * s->dw;
                    if (s->sw == 1 && ix0 >= 0 && ix0 + s->ow <= s->w) {
                        memcpy(d, row + ix0, sizeof(float) * s->ow);
                        continue;
                    }
                    for (int ox = 0; ox < s->ow; ox++) {
                        int ix = ix0 + ox * s->sw;
                        d[ox] = ix >= 0 && ix < s->w ? row[ix] : 0.f;
                    }
                }
            }
}

/* The switch hoisted out of the loop for the common kinds, so those loops vectorise. */
static void bias_act(float *y, int64_t hw, float b, si_act act) {
    switch (act.kind) {
    case SI_ACT_NONE:
        for (int64_t i = 0; i < hw; i++) y[i] += b;
        break;
    case SI_ACT_RELU:
        for (int64_t i = 0; i < hw; i++) {
            float v = y[i] + b;
            y[i] = v > 0.f ? v : 0.f;
        }
        break;
    case SI_ACT_CLIP: /* ReLU6 and friends: as common as Relu in mobile nets */
        for (int64_t i = 0; i < hw; i++) {
            float v = y[i] + b;
            v = v < act.lo ? act.lo : v;
            y[i] = v > act.hi ? act.hi : v;
        }
        break;
    default:
        for (int64_t i = 0; i < hw; i++) y[i] = si_act_eval(y[i] + b, act);
    }
}

/* Depthwise (one input channel per group, one output per group). Row accumulation: for each
 * output row and each kernel tap, one multiply-add over the span of output columns whose input
 * column is inside the image. With stride 1 that span is contiguous in both rows, so the inner
 * loop vectorises; no per-pixel bounds checks. The bias and activation finish each row. */
/* An AVX2+FMA (haswell) clone picked at run time: the binary stays portable across x86-64 machines
 */
__attribute__((target_clones("arch=haswell", "default"))) static void
depthwise_plane(const si_conv_shape *s, const float *x, const float *w, float b, si_act act,
                float *y) {
    for (int oy = 0; oy < s->oh; oy++) {
        float *yr = y + (size_t)oy * s->ow;
        for (int ox = 0; ox < s->ow; ox++) yr[ox] = 0.f;
        for (int ky = 0; ky < s->kh; ky++) {
            int iy = oy * s->sh - s->pt + ky * s->dh;
            if (iy < 0 || iy >= s->h) continue;
            const float *xr = x + (size_t)iy * s->w;
            for (int kx = 0; kx < s->kw; kx++) {
                float wv = w[ky * s->kw + kx];
                int off = kx * s->dw - s->pl; /* ix = ox * sw + off */
                /* ox in [lo, hi): 0 <= ox * sw + off < w */
                int lo = off >= 0 ? 0 : (-off + s->sw - 1) / s->sw;
                int hi = s->w - off <= 0 ? 0 : (s->w - off + s->sw - 1) / s->sw;
                if (hi > s->ow) hi = s->ow;
                if (s->sw == 1) {
                    const float *xs = xr + off;
                    for (int ox = lo; ox < hi; ox++) yr[ox] += wv * xs[ox];
                } else {
                    for (int ox = lo; ox < hi; ox++) yr[ox] += wv * xr[ox * s->sw + off];
                }
            }
        }
        bias_act(yr, s->ow, b, act);
    }
}

/* y (m, n) = w (m, k) x col (k, n) in fixed GEMM_ROWS x GEMM_COLS blocks, a single-threaded sgemm
 * each; par: the blocks shared by this function's threads (the caller is not in a parallel
 * region), else taken in turn by the calling thread. */
static void group_gemm(const float *w, int m, int k, int64_t n, const float *col, float *y,
                       bool par) {
    const int64_t rb = (m + GEMM_ROWS - 1) / GEMM_ROWS, cb = (n + GEMM_COLS - 1) / GEMM_COLS;
#pragma omp parallel for schedule(dynamic, 1) if (par)
    for (int64_t b = 0; b < rb * cb; b++) {
        int64_t i0 = b / cb * GEMM_ROWS, j0 = b % cb * GEMM_COLS;
        int64_t h = m - i0 < GEMM_ROWS ? m - i0 : GEMM_ROWS,
                wd = n - j0 < GEMM_COLS ? n - j0 : GEMM_COLS;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)h, (int)wd, k, 1.f, w + i0 * k,
                    k, col + j0, (int)n, 0.f, y + i0 * n + j0, (int)n);
    }
}

void si_cpu_conv2d(const si_conv_shape *s, const float *x, const float *w, const float *bias,
                   si_act act, float *y, float *scratch) {
    int g = s->group, cg = s->c / g, mg = s->m / g;
    int64_t ihw = (int64_t)s->h * s->w, ohw = (int64_t)s->oh * s->ow;
    int kdim = cg * s->kh * s->kw;
    size_t scr = si_cpu_conv2d_scratch(s);
    if (cg == 1 && s->m == g) {
        int64_t planes = (int64_t)s->n * s->m;
#pragma omp parallel for schedule(static)
        for (int64_t p = 0; p < planes; p++) {
            int64_t c = p % s->m;
            depthwise_plane(s, x + p * ihw, w + c * s->kh * s->kw, bias ? bias[c] : 0.f, act,
                            y + p * ohw);
        }
        return;
    }
    /* y(ni, gi) = w(gi) * col: (M/g, kdim) x (kdim, oh*ow) */
#define GROUP_GEMM(gi, col, yg, par)                                                               \
    group_gemm(w + (size_t)(gi)*mg * kdim, mg, kdim, ohw, (col), (yg), (par))
    int64_t tasks = (int64_t)s->n * g;
    if (tasks >= omp_get_max_threads()) {
        /* enough independent (image, group) tasks: one per thread, single-threaded BLAS inside */
#pragma omp parallel for schedule(dynamic, 1)
        for (int64_t t = 0; t < tasks; t++) {
            int64_t ni = t / g, gi = t % g;
            const float *xg = x + (ni * s->c + gi * cg) * ihw;
            float *yg = y + (ni * s->m + gi * mg) * ohw;
            const float *col = xg;
            if (scr) {
                float *mine = scratch + (size_t)omp_get_thread_num() * scr;
                im2col(s, xg, mine);
                col = mine;
            }
            GROUP_GEMM(gi, col, yg, 0);
            for (int mi = 0; mi < mg; mi++)
                bias_act(yg + mi * ohw, ohw, bias ? bias[gi * mg + mi] : 0.f, act);
        }
        return;
    }
    /* Few tasks (batch 1): the threads share each GEMM's column blocks (the same blocks as
     * above, so a result does not depend on the thread count), im2col and the epilogue. */
    for (int64_t t = 0; t < tasks; t++) {
        int64_t ni = t / g, gi = t % g;
        const float *xg = x + (ni * s->c + gi * cg) * ihw;
        float *yg = y + (ni * s->m + gi * mg) * ohw;
        const float *col = xg;
        if (scr) {
            int kk = s->kh * s->kw;
#pragma omp parallel for schedule(static)
            for (int ci = 0; ci < cg; ci++) { /* one input channel's kh*kw rows each */
                si_conv_shape one = *s;
                one.c = 1;
                one.group = 1;
                im2col(&one, xg + (size_t)ci * ihw, scratch + (size_t)ci * kk * ohw);
            }
            col = scratch;
        }
        GROUP_GEMM(gi, col, yg, 1);
#pragma omp parallel for schedule(static)
        for (int mi = 0; mi < mg; mi++)
            bias_act(yg + mi * ohw, ohw, bias ? bias[gi * mg + mi] : 0.f, act);
    }
#undef GROUP_GEMM
}

void si_cpu_maxpool2d(const si_pool_shape *s, const float *x, float *y) {
    int64_t planes = (int64_t)s->n * s->c;
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < planes; p++) {
        const float *xp = x + p * s->h * s->w;
        float *yp = y + p * s->oh * s->ow;
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++) {
                float best = -INFINITY;
                for (int ky = 0; ky < s->kh; ky++) {
                    int iy = oy * s->sh - s->pt + ky * s->dh;
                    if (iy < 0 || iy >= s->h) continue;
                    for (int kx = 0; kx < s->kw; kx++) {
                        int ix = ox * s->sw - s->pl + kx * s->dw;
                        if (ix < 0 || ix >= s->w) continue;
                        float v = xp[(size_t)iy * s->w + ix];
                        if (v > best || isnan(v)) best = v;
                    }
                }
                yp[oy * s->ow + ox] = best;
            }
    }
}

void si_cpu_global_avgpool(const float *x, int64_t nc, int64_t hw, float *y) {
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < nc; p++) {
        const float *xp = x + p * hw;
        double acc = 0.0;
        for (int64_t i = 0; i < hw; i++) acc += xp[i];
        y[p] = (float)(acc / (double)hw);
    }
}

void si_cpu_gemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a,
                 const float *b, float beta, const float *c, int cm, int cn, float *y) {
    if (c && beta != 0.f) {
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++)
                y[(size_t)i * n + j] = c[(size_t)(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)];
    } else {
        beta = 0.f;
    }
    if (k == 0) { /* sgemm with k == 0 leaves y scaled by beta, which is what ONNX means */
        for (size_t i = 0; i < (size_t)m * n; i++) y[i] *= beta;
        return;
    }
    /* columns in fixed blocks, one single-threaded sgemm each: how OpenBLAS would split the
     * product among threads would otherwise change the last bits with the thread count */
    const int nb = (n + GEMM_COLS - 1) / GEMM_COLS;
#pragma omp parallel for schedule(dynamic, 1)
    for (int j = 0; j < nb; j++) {
        int j0 = j * GEMM_COLS, w = n - j0 < GEMM_COLS ? n - j0 : GEMM_COLS;
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, m, w, k, alpha, a, trans_a ? m : k,
                    trans_b ? b + (size_t)j0 * k : b + j0, trans_b ? k : n, beta, y + j0, n);
    }
}

void si_cpu_binary(si_binop op, int ndim, const int64_t *ad, const float *a, const int64_t *bd,
                   const float *b, const int64_t *yd, float *y, si_act act) {
    int64_t total = 1, an = 1, bn = 1;
    for (int i = 0; i < ndim; i++) total *= yd[i], an *= ad[i], bn *= bd[i];
    if (an == total && bn == total) {
#pragma omp parallel for schedule(static) if (total > 65536)
        for (int64_t i = 0; i < total; i++) y[i] = si_act_eval(si_bin_eval(op, a[i], b[i]), act);
        return;
    }
    /* general broadcasting: strides of 0 on broadcast dimensions */
    int64_t as[16], bs[16], sa = 1, sb = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        as[i] = ad[i] == 1 ? 0 : sa;
        bs[i] = bd[i] == 1 ? 0 : sb;
        sa *= ad[i];
        sb *= bd[i];
    }
    int64_t inner = yd[ndim - 1];
#pragma omp parallel for schedule(static) if (total > 65536)
    for (int64_t row = 0; row < total / (inner ? inner : 1); row++) {
        int64_t rem = row, ao = 0, bo = 0;
        for (int i = ndim - 2; i >= 0; i--) {
            int64_t idx = rem % yd[i];
            rem /= yd[i];
            ao += idx * as[i];
            bo += idx * bs[i];
        }
        float *yr = y + row * inner;
        int64_t sai = as[ndim - 1], sbi = bs[ndim - 1];
        for (int64_t j = 0; j < inner; j++)
            yr[j] = si_act_eval(si_bin_eval(op, a[ao + j * sai], b[bo + j * sbi]), act);
    }
}

void si_cpu_activation(const float *x, int64_t n, si_act act, float *y) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) y[i] = si_act_eval(x[i], act);
}

void si_cpu_channel_affine(const float *x, int64_t n, int64_t c, int64_t inner, const float *scale,
                           const float *shift, float *y) {
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < n * c; p++) {
        int64_t ci = p % c;
        const float *xp = x + p * inner;
        float *yp = y + p * inner;
        for (int64_t i = 0; i < inner; i++) yp[i] = xp[i] * scale[ci] + shift[ci];
    }
}

void si_cpu_softmax(const float *x, int64_t rows, int64_t cols, float *y) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float *yr = y + r * cols;
        float mx = -INFINITY;
        for (int64_t j = 0; j < cols; j++) mx = xr[j] > mx ? xr[j] : mx;
        double sum = 0.0;
        for (int64_t j = 0; j < cols; j++) sum += (yr[j] = expf(xr[j] - mx));
        float inv = (float)(1.0 / sum);
        for (int64_t j = 0; j < cols; j++) yr[j] *= inv;
    }
}

/* max(|x|_2, eps) of n elements, summed in double: F.normalize's divisor (RowNorm's, and a
 * cosine attention's of q and k) */
static double row_norm(const float *x, int64_t n, float eps) {
    double q = 0;
    for (int64_t i = 0; i < n; i++) q += (double)x[i] * x[i];
    return fmax(sqrt(q), eps);
}

/* Matrix b's scores q k^T made those of q and k's rows normalised (and q's scaled):
 * sc[i][j] times q_i's factor and k_j's; fk: s floats of scratch for the keys' */
static void cosine_scores(const si_cpu_attn *p, int64_t b, const float *q, const float *k,
                          float *sc, float *fk) {
    int64_t t = p->t, s = p->s, d = p->d;
    double qs = p->qk_scale ? p->qk_scale[(b / p->qs_div) % p->qs_mod] : 1.0;
    for (int64_t j = 0; j < s; j++)
        fk[j] = (float)(1.0 / row_norm(k + p->off[1][b] + j * p->ld[1], d, p->qk_eps));
    for (int64_t i = 0; i < t; i++) {
        float fq = (float)(qs / row_norm(q + p->off[0][b] + i * p->ld[0], d, p->qk_eps));
        for (int64_t j = 0; j < s; j++) sc[i * s + j] *= fq * fk[j];
    }
}

void si_cpu_attention(const si_cpu_attn *p, const float *q, const float *k, const float *v,
                      float *y) {
    int64_t t = p->t, s = p->s, d = p->d, dv = p->dv;
    if (p->nb <= 0 || t <= 0 || dv <= 0) return;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t b = 0; b < p->nb; b++) { /* the scores of one matrix, on the heap: T x S, and
                                             a cosine attention's S key factors after them */
        const int64_t rows = t + (p->qk_eps > 0.f);
        float *sc = si_xmalloc(sizeof(float) * (size_t)(rows * (s > 0 ? s : 1)));
        cblas_sgemm(CblasRowMajor, CblasNoTrans, p->trans_b ? CblasTrans : CblasNoTrans, (int)t,
                    (int)s, (int)d, p->scale, q + p->off[0][b], (int)p->ld[0], k + p->off[1][b],
                    (int)p->ld[1], 0.f, sc, (int)s);
        if (p->qk_eps > 0.f) cosine_scores(p, b, q, k, sc, sc + t * s);
        if (p->bias)
            for (int64_t i = 0; i < t; i++)
                for (int64_t j = 0; j < s; j++)
                    sc[i * s + j] += p->bias[p->bias_off[b] + i * p->bst_t + j * p->bst_s];
        si_cpu_softmax(sc, t, s, sc);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)t, (int)dv, (int)s, 1.f, sc,
                    (int)s, v + p->off[2][b], (int)p->ld[2], 0.f, y + p->off[3][b], (int)p->ld[3]);
        if (p->act.kind)
            for (int64_t i = 0; i < t; i++) {
                float *yr = y + p->off[3][b] + i * p->ld[3];
                for (int64_t j = 0; j < dv; j++) yr[j] = si_act_eval(yr[j], p->act);
            }
        free(sc);
    }
}

/* --- the rest of the engine's ops ----------------------------------------------------------- */

void si_cpu_avgpool2d(const si_pool_shape *s, int count_include_pad, const float *x, float *y) {
    int64_t planes = (int64_t)s->n * s->c;
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < planes; p++) {
        const float *xp = x + p * s->h * s->w;
        float *yp = y + p * s->oh * s->ow;
        for (int oy = 0; oy < s->oh; oy++) {
            int iy0 = oy * s->sh - s->pt, ky0, ky1, py0, py1;
            si_tap_range(iy0, s->kh, s->dh, 0, s->h, &ky0, &ky1);
            /* the divisor counts taps inside the padded input, never those ceil_mode adds */
            si_tap_range(iy0, s->kh, s->dh, -s->pt, s->h + s->pb, &py0, &py1);
            for (int ox = 0; ox < s->ow; ox++) {
                int ix0 = ox * s->sw - s->pl, kx0, kx1, px0, px1;
                si_tap_range(ix0, s->kw, s->dw, 0, s->w, &kx0, &kx1);
                si_tap_range(ix0, s->kw, s->dw, -s->pl, s->w + s->pr, &px0, &px1);
                float acc = 0.f;
                for (int ky = ky0; ky < ky1; ky++) {
                    const float *row = xp + (size_t)(iy0 + ky * s->dh) * s->w;
                    for (int kx = kx0; kx < kx1; kx++) acc += row[ix0 + kx * s->dw];
                }
                int cnt = count_include_pad ? (py1 - py0) * (px1 - px0) : (ky1 - ky0) * (kx1 - kx0);
                yp[(size_t)oy * s->ow + ox] = cnt > 0 ? acc / (float)cnt : 0.f;
            }
        }
    }
}

/* Softmax down columns: (len, inner) rows of stride inner, a chunk of inner columns at a time
 * with the running max and sum on the stack. */
#define SM_CHUNK 64
void si_cpu_softmax_axis(const float *x, int64_t outer, int64_t len, int64_t inner, float *y) {
    if (outer <= 0 || len <= 0 || inner <= 0) return;
    if (inner == 1) {
#pragma omp parallel for schedule(static) if (outer * len > PAR_MIN)
        for (int64_t o = 0; o < outer; o++) si_cpu_softmax(x + o * len, 1, len, y + o * len);
        return;
    }
    int64_t nch = (inner + SM_CHUNK - 1) / SM_CHUNK;
#pragma omp parallel for schedule(static) if (outer * len * inner > PAR_MIN)
    for (int64_t t = 0; t < outer * nch; t++) {
        int64_t o = t / nch, c0 = t % nch * SM_CHUNK;
        int cn = (int)(inner - c0 < SM_CHUNK ? inner - c0 : SM_CHUNK);
        const float *xb = x + o * len * inner + c0;
        float *yb = y + o * len * inner + c0;
        float mx[SM_CHUNK];
        double sum[SM_CHUNK];
        for (int i = 0; i < cn; i++) mx[i] = -INFINITY, sum[i] = 0.0;
        for (int64_t j = 0; j < len; j++) {
            const float *xr = xb + j * inner;
            for (int i = 0; i < cn; i++) mx[i] = xr[i] > mx[i] ? xr[i] : mx[i];
        }
        for (int64_t j = 0; j < len; j++) {
            const float *xr = xb + j * inner;
            float *yr = yb + j * inner;
            for (int i = 0; i < cn; i++) sum[i] += (yr[i] = expf(xr[i] - mx[i]));
        }
        for (int i = 0; i < cn; i++) mx[i] = (float)(1.0 / sum[i]); /* now the reciprocal */
        for (int64_t j = 0; j < len; j++) {
            float *yr = yb + j * inner;
            for (int i = 0; i < cn; i++) yr[i] *= mx[i];
        }
    }
}

/* Mean and 1/sqrt(var + eps) of one row, two passes in double: a ViT row is a few hundred
 * values of similar size, where float32 sums would already cost a few ulps of the result. */
static void row_stats(const float *x, int64_t len, float eps, double *mean, double *inv) {
    double s = 0.0;
    for (int64_t j = 0; j < len; j++) s += x[j];
    double m = s / (double)len, v = 0.0;
    for (int64_t j = 0; j < len; j++) v += ((double)x[j] - m) * ((double)x[j] - m);
    *mean = m;
    *inv = 1.0 / sqrt(v / (double)len + (double)eps);
}

void si_cpu_layernorm(const float *x, const float *mul, int64_t rows, int64_t len,
                      const float *scale, int64_t ns, const float *bias, int64_t nb,
                      const float *res, float eps, float *y) {
    if (rows <= 0 || len <= 0) return;
#pragma omp parallel for schedule(static) if (rows * len > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * len;
        float *yr = y + r * len;
        if (mul) { /* the product in float, as the Mul wrote it, normalised from y's row */
            for (int64_t j = 0; j < len; j++) yr[j] = xr[j] * mul[r * len + j];
            xr = yr;
        }
        double mean, inv;
        row_stats(xr, len, eps, &mean, &inv);
        for (int64_t j = 0; j < len; j++) {
            double v = ((double)xr[j] - mean) * inv * scale[j % ns];
            float o = (float)(bias ? v + bias[j % nb] : v);
            yr[j] = res ? o + res[r * len + j] : o; /* LayerNorm's float output, then the Add */
        }
    }
}

void si_cpu_instancenorm(const float *x, int64_t n, int64_t c, int64_t inner, const float *scale,
                         const float *bias, float eps, float *y) {
    if (n <= 0 || c <= 0 || inner <= 0) return;
#pragma omp parallel for schedule(static) if (n * c * inner > PAR_MIN)
    for (int64_t p = 0; p < n * c; p++) {
        const float *xp = x + p * inner;
        float *yp = y + p * inner;
        double mean, inv, s = scale[p % c], b = bias[p % c];
        row_stats(xp, inner, eps, &mean, &inv);
        for (int64_t i = 0; i < inner; i++) yp[i] = (float)(((double)xp[i] - mean) * inv * s + b);
    }
}

void si_cpu_concat(int n, const float *const *xs, const int64_t *sizes, int64_t outer,
                   int64_t inner, float *y) {
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += sizes[i];
    int64_t yrow = total * inner;
#pragma omp parallel for schedule(static) if (outer * yrow > PAR_MIN && outer > 1)
    for (int64_t o = 0; o < outer; o++) {
        float *d = y + o * yrow;
        for (int i = 0; i < n; i++) {
            int64_t blk = sizes[i] * inner;
            if (blk > 0) memcpy(d, xs[i] + o * blk, sizeof(float) * (size_t)blk);
            d += blk;
        }
    }
}

void si_cpu_split(const float *x, int64_t outer, int64_t inner, int n, const int64_t *sizes,
                  float *const *ys) {
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += sizes[i];
    int64_t xrow = total * inner;
#pragma omp parallel for schedule(static) if (outer * xrow > PAR_MIN && outer > 1)
    for (int64_t o = 0; o < outer; o++) {
        const float *s = x + o * xrow;
        for (int i = 0; i < n; i++) {
            int64_t blk = sizes[i] * inner;
            if (blk > 0) memcpy(ys[i] + o * blk, s, sizeof(float) * (size_t)blk);
            s += blk;
        }
    }
}

/* Row-major strides of dims. Returns the element count. */
static int64_t strides_of(int ndim, const int64_t *dims, int64_t *st) {
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        st[d] = s;
        s *= dims[d];
    }
    return s;
}

void si_cpu_slice_into(int ndim, const int64_t *x_dims, const float *x, const int64_t *starts,
                       const int64_t *steps, const int64_t *part_dims, int axis, int64_t at,
                       const int64_t *y_dims, float *y) {
    SI_ASSERT(ndim >= 1 && ndim <= MAXD && axis >= 0 && axis < ndim);
    int64_t xs[MAXD], ys[MAXD], ps[MAXD];
    strides_of(ndim, x_dims, xs);
    strides_of(ndim, y_dims, ys);
    int64_t total = strides_of(ndim, part_dims, ps);
    if (total == 0) return;
    int64_t xbase = 0, inner = part_dims[ndim - 1], rows = total / inner;
    for (int d = 0; d < ndim; d++) xbase += starts[d] * xs[d];
    const int64_t ybase = at * ys[axis], step = steps[ndim - 1];
#pragma omp parallel for schedule(static) if (total > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t rem = r, xo = xbase, yo = ybase;
        for (int d = ndim - 2; d >= 0; d--) {
            int64_t i = rem % part_dims[d];
            rem /= part_dims[d];
            xo += i * steps[d] * xs[d];
            yo += i * ys[d];
        }
        for (int64_t k = 0; k < inner; k++) y[yo + k] = x[xo + k * step];
    }
}

void si_cpu_slice(int ndim, const int64_t *x_dims, const float *x, const int64_t *starts,
                  const int64_t *steps, const int64_t *y_dims, float *y) {
    SI_ASSERT(ndim >= 0 && ndim <= MAXD);
    int64_t xs[MAXD], ys[MAXD];
    strides_of(ndim, x_dims, xs);
    int64_t total = strides_of(ndim, y_dims, ys);
    if (total == 0) return;
    if (ndim == 0) {
        y[0] = x[0];
        return;
    }
    int64_t base = 0;
    for (int d = 0; d < ndim; d++) base += starts[d] * xs[d];
    int64_t inner = y_dims[ndim - 1], rows = total / inner, step = steps[ndim - 1];
#pragma omp parallel for schedule(static) if (total > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t rem = r, off = base;
        for (int d = ndim - 2; d >= 0; d--) {
            off += rem % y_dims[d] * steps[d] * xs[d];
            rem /= y_dims[d];
        }
        float *yr = y + r * inner;
        if (step == 1)
            memcpy(yr, x + off, sizeof(float) * (size_t)inner);
        else
            for (int64_t j = 0; j < inner; j++) yr[j] = x[off + j * step];
    }
}

/* Drops size-1 dims and merges runs of dims that stay adjacent and in order, so NCHW -> NHWC
 * becomes (N, C, HW) -> (N, HW, C). Writes the reduced x dims and perm; returns their rank. */
static int transpose_canon(int ndim, const int64_t *x_dims, const int *perm, int64_t *xd, int *pm) {
    int kept[MAXD], nk = 0, order[MAXD], ny = 0;
    int64_t ks[MAXD];
    for (int d = 0; d < ndim; d++) {
        kept[d] = x_dims[d] == 1 ? -1 : nk;
        if (x_dims[d] != 1) ks[nk++] = x_dims[d];
    }
    for (int k = 0; k < ndim; k++)
        if (kept[perm[k]] >= 0) order[ny++] = kept[perm[k]];
    int gs[MAXD], gl[MAXD], ng = 0; /* runs, in y order: first x dim, length */
    for (int k = 0; k < ny; k++) {
        if (k > 0 && order[k] == order[k - 1] + 1) {
            gl[ng - 1]++;
        } else {
            gs[ng] = order[k];
            gl[ng++] = 1;
        }
    }
    for (int g = 0; g < ng; g++) {
        int pos = 0; /* the run's place in x order */
        for (int h = 0; h < ng; h++) pos += gs[h] < gs[g];
        int64_t sz = 1;
        for (int i = 0; i < gl[g]; i++) sz *= ks[gs[g] + i];
        xd[pos] = sz;
        pm[g] = pos;
    }
    return ng;
}

#define TR_TILE 32
void si_cpu_transpose(int ndim, const int64_t *x_dims, const int *perm, const float *x, float *y) {
    SI_ASSERT(ndim >= 0 && ndim <= MAXD);
    int64_t total = 1;
    for (int d = 0; d < ndim; d++) total *= x_dims[d];
    if (total == 0) return;
    int64_t xd[MAXD], yd[MAXD], xs[MAXD], ys[MAXD];
    int pm[MAXD];
    int n = transpose_canon(ndim, x_dims, perm, xd, pm);
    if (n <= 1) { /* an identity after canonicalising */
        memcpy(y, x, sizeof(float) * (size_t)total);
        return;
    }
    strides_of(n, xd, xs);
    for (int k = 0; k < n; k++) yd[k] = xd[pm[k]];
    strides_of(n, yd, ys);
    if (pm[n - 1] == n - 1) { /* the innermost dim stays: contiguous rows */
        int64_t row = yd[n - 1], rows = total / row;
#pragma omp parallel for schedule(static) if (total > PAR_MIN)
        for (int64_t r = 0; r < rows; r++) {
            int64_t rem = r, off = 0;
            for (int k = n - 2; k >= 0; k--) {
                off += rem % yd[k] * xs[pm[k]];
                rem /= yd[k];
            }
            memcpy(y + r * row, x + off, sizeof(float) * (size_t)row);
        }
        return;
    }
    /* Tiled 2-D transposes between y's innermost dim (x stride sj) and x's innermost dim (at
     * y position q, y stride si), one per index of the other dims. */
    int q = 0;
    while (pm[q] != n - 1) q++;
    int64_t ni = yd[q], nj = yd[n - 1], si = ys[q], sj = xs[pm[n - 1]];
    int od[MAXD], no = 0; /* the other y dims */
    for (int k = 0; k < n - 1; k++)
        if (k != q) od[no++] = k;
    int64_t nib = (ni + TR_TILE - 1) / TR_TILE, njb = (nj + TR_TILE - 1) / TR_TILE;
    int64_t tiles = nib * njb, tasks = total / (ni * nj) * tiles;
#pragma omp parallel for schedule(static) if (total > PAR_MIN)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t rem = t / tiles, xo = 0, yo = 0;
        for (int k = no - 1; k >= 0; k--) {
            int64_t idx = rem % yd[od[k]];
            rem /= yd[od[k]];
            xo += idx * xs[pm[od[k]]];
            yo += idx * ys[od[k]];
        }
        int64_t i0 = t % tiles / njb * TR_TILE, j0 = t % njb * TR_TILE;
        int64_t i1 = i0 + TR_TILE < ni ? i0 + TR_TILE : ni,
                j1 = j0 + TR_TILE < nj ? j0 + TR_TILE : nj;
        for (int64_t i = i0; i < i1; i++) {
            float *yr = y + yo + i * si;
            const float *xr = x + xo + i;
            for (int64_t j = j0; j < j1; j++) yr[j] = xr[j * sj];
        }
    }
}

void si_cpu_broadcast(int ndim, const int64_t *x_dims, const float *x, const int64_t *y_dims,
                      float *y) {
    SI_ASSERT(ndim >= 0 && ndim <= MAXD);
    int64_t xs[MAXD], ys[MAXD];
    strides_of(ndim, x_dims, xs);
    int64_t total = strides_of(ndim, y_dims, ys);
    if (total == 0) return;
    /* the trailing dims x already has are copied as blocks */
    int k = ndim;
    int64_t blk = 1;
    while (k > 0 && x_dims[k - 1] == y_dims[k - 1]) blk *= y_dims[--k];
    if (k == 0) {
        memcpy(y, x, sizeof(float) * (size_t)total);
        return;
    }
    /* dim k-1 is broadcast (x has 1 there): each row of it repeats one block */
    int64_t reps = y_dims[k - 1], rows = total / (reps * blk);
#pragma omp parallel for schedule(static) if (total > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t rem = r, xo = 0;
        for (int d = k - 2; d >= 0; d--) {
            if (x_dims[d] != 1) xo += rem % y_dims[d] * xs[d];
            rem /= y_dims[d];
        }
        float *yr = y + r * reps * blk;
        if (blk == 1) {
            float v = x[xo];
            for (int64_t j = 0; j < reps; j++) yr[j] = v;
        } else {
            for (int64_t j = 0; j < reps; j++)
                memcpy(yr + j * blk, x + xo, sizeof(float) * (size_t)blk);
        }
    }
}

_Static_assert(SI_TILE_MAXD <= MAXD, "a Tile's broadcast must fit si_cpu_broadcast");
void si_cpu_tile(int ndim, const int64_t *x_dims, const float *x, const int64_t *y_dims, float *y) {
    int64_t bx[SI_TILE_MAXD], by[SI_TILE_MAXD], mult[SI_TILE_MAXD];
    int src[SI_TILE_MAXD];
    int k = si_tile_split(ndim, x_dims, y_dims, bx, by, src, mult);
    SI_ASSERT(k >= 0 && k <= MAXD);
    si_cpu_broadcast(k, bx, x, by, y);
}

void si_cpu_gather(const float *x, int64_t outer, int64_t len, int64_t inner, const int64_t *idx,
                   int64_t n, float *y) {
    if (inner <= 0) return;
#pragma omp parallel for schedule(static) if (outer * n * inner > PAR_MIN)
    for (int64_t t = 0; t < outer * n; t++) {
        int64_t o = t / n, i = idx[t % n];
        if (i < 0) i += len;
        float *d = y + t * inner;
        if (i < 0 || i >= len) /* the caller checks indices; this keeps memory safe if not */
            for (int64_t j = 0; j < inner; j++) d[j] = 0.f;
        else
            memcpy(d, x + (o * len + i) * inner, sizeof(float) * (size_t)inner);
    }
}

void si_cpu_gather_nd(const si_gathernd_geom *geo, const float *x, const int64_t *idx, float *y) {
#pragma omp parallel for schedule(static) if (geo->rows * geo->slice > PAR_MIN)
    for (int64_t t = 0; t < geo->rows; t++) {
        int64_t off = si_gathernd_offset(geo, t, idx + t * geo->k);
        float *d = y + t * geo->slice;
        if (off < 0)
            for (int64_t e = 0; e < geo->slice; e++) d[e] = 0.f;
        else
            memcpy(d, x + off, sizeof(float) * (size_t)geo->slice);
    }
}

static int64_t idims_numel(const si_elements_geom *geo) {
    int64_t n = 1;
    for (int d = 0; d < geo->nd; d++) n *= geo->idims[d];
    return n;
}

void si_cpu_rotary(const float *x, const si_row_geom *rg, int64_t rows, int64_t t, int64_t d,
                   int64_t skip, bool half, const float *c, const float *s, float *y) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows * t; r++) {
        const float *xr = x + si_row_start(rg, r, d);
        float *yr = y + r * d;
        int64_t tok = r % t;
        if (tok < skip) {
            memcpy(yr, xr, sizeof(float) * (size_t)d);
            continue;
        }
        const float *cr = c + (tok - skip) * d, *sr = s + (tok - skip) * d;
        for (int64_t i = 0; i < d; i++) {
            bool first;
            int64_t p = si_rotary_partner(i, d, half, &first);
            yr[i] = si_rotary(xr[i], xr[p], cr[i], sr[i], first);
        }
    }
}

void si_cpu_rownorm(const float *x, const si_row_geom *rg, int64_t rows, int64_t d, float eps,
                    const float *s, int64_t div, int64_t mod, float *y) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + si_row_start(rg, r, d);
        double f = (s && mod > 0 ? s[(r / div) % mod] : 1.0) / row_norm(xr, d, eps);
        for (int64_t i = 0; i < d; i++) y[r * d + i] = (float)(xr[i] * f);
    }
}

void si_cpu_gather_elements(const si_elements_geom *geo, const float *x, const int64_t *idx,
                            float *y) {
    int64_t n = idims_numel(geo);
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        int64_t off = si_elements_offset(geo, i, idx[i]);
        y[i] = off < 0 ? 0.f : x[off];
    }
}

/* Two updates of one element share their coordinates off the axis, so each column along the
 * axis (outer x inner of them) is reduced in order by one thread: duplicates meet in index
 * order, as the GPU's kernel has them. */
void si_cpu_scatter_elements(const si_elements_geom *geo, int red, const float *x, int64_t nx,
                             const int64_t *idx, const float *upd, float *y) {
    if (y != x) memcpy(y, x, sizeof(float) * (size_t)nx);
    int64_t len = geo->idims[geo->axis], inner = 1, n = idims_numel(geo);
    for (int d = geo->axis + 1; d < geo->nd; d++) inner *= geo->idims[d];
    if (n == 0) return;
#pragma omp parallel for schedule(static) if (n > PAR_MIN)
    for (int64_t c = 0; c < n / len; c++)
        for (int64_t j = 0; j < len; j++) {
            int64_t i = (c / inner * len + j) * inner + c % inner;
            int64_t off = si_elements_offset(geo, i, idx[i]);
            if (off >= 0) y[off] = si_scatter_eval(red, y[off], upd[i]);
        }
}

void si_cpu_matmul(int ndim, const int64_t *a_dims, const float *a, const int64_t *b_dims,
                   const float *b, const int64_t *y_dims, float *y) {
    SI_ASSERT(ndim >= 2 && ndim <= MAXD);
    int64_t m = a_dims[ndim - 2], k = a_dims[ndim - 1], n = b_dims[ndim - 1];
    int nb = ndim - 2;
    int64_t batch = 1, as[MAXD], bs[MAXD], sa = m * k, sb = k * n;
    bool b_shared = true, a_full = true;
    for (int d = nb - 1; d >= 0; d--) {
        batch *= y_dims[d];
        as[d] = a_dims[d] == 1 ? 0 : sa;
        bs[d] = b_dims[d] == 1 ? 0 : sb;
        sa *= a_dims[d];
        sb *= b_dims[d];
        b_shared &= b_dims[d] == 1;
        a_full &= a_dims[d] == y_dims[d];
    }
    if (batch == 0 || m == 0 || n == 0) return;
    if (k == 0) {
        memset(y, 0, sizeof(float) * (size_t)(batch * m * n));
        return;
    }
    if (b_shared && a_full) { /* one b for every a: a's batches stack into rows, and the
                               * columns go in fixed blocks (as in si_cpu_gemm) */
        const int64_t blocks = (n + GEMM_COLS - 1) / GEMM_COLS;
#pragma omp parallel for schedule(dynamic, 1)
        for (int64_t j = 0; j < blocks; j++) {
            int64_t j0 = j * GEMM_COLS, w = n - j0 < GEMM_COLS ? n - j0 : GEMM_COLS;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(batch * m), (int)w, (int)k,
                        1.f, a, (int)k, b + j0, (int)n, 0.f, y + j0, (int)n);
        }
        return;
    }
    /* every product's column blocks, a single-threaded sgemm each, shared by the threads */
    const int64_t blocks = (n + GEMM_COLS - 1) / GEMM_COLS;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t tj = 0; tj < batch * blocks; tj++) {
        int64_t t = tj / blocks, j0 = tj % blocks * GEMM_COLS;
        int64_t wd = n - j0 < GEMM_COLS ? n - j0 : GEMM_COLS, rem = t, ao = 0, bo = 0;
        for (int d = nb - 1; d >= 0; d--) {
            int64_t idx = rem % y_dims[d];
            rem /= y_dims[d];
            ao += idx * as[d];
            bo += idx * bs[d];
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)wd, (int)k, 1.f, a + ao,
                    (int)k, b + bo + j0, (int)n, 0.f, y + t * m * n + j0, (int)n);
    }
}

void si_cpu_pad(int mode, int ndim, const int64_t *x_dims, const float *x, const int64_t *pads,
                float value, const int64_t *y_dims, float *y) {
    SI_ASSERT(ndim >= 0 && ndim <= MAXD);
    int64_t xs[MAXD], ys[MAXD], crop[MAXD], lead[MAXD], len[MAXD];
    strides_of(ndim, x_dims, xs);
    int64_t total = strides_of(ndim, y_dims, ys);
    if (total == 0) return;
    if (ndim == 0) {
        y[0] = x[0];
        return;
    }
    /* negative pads crop first; positive pads then pad what is left */
    for (int d = 0; d < ndim; d++) {
        int64_t b = pads[d], e = pads[ndim + d];
        crop[d] = b < 0 ? -b : 0;
        lead[d] = b > 0 ? b : 0;
        len[d] = x_dims[d] - crop[d] - (e < 0 ? -e : 0);
        if (len[d] < 0) len[d] = 0;
    }
    int l = ndim - 1;
    int64_t inner = y_dims[l], rows = total / inner;
    int64_t mid0 = lead[l] < inner ? lead[l] : inner;
    int64_t mid1 = lead[l] + len[l] < inner ? lead[l] + len[l] : inner;
#pragma omp parallel for schedule(static) if (total > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t rem = r, off = 0;
        bool fill = false;
        for (int d = l - 1; d >= 0; d--) {
            int64_t s = si_pad_src(mode, rem % y_dims[d] - lead[d], len[d]);
            rem /= y_dims[d];
            if (s < 0) fill = true;
            off += (crop[d] + s) * xs[d];
        }
        float *yr = y + r * inner;
        if (fill) {
            for (int64_t j = 0; j < inner; j++) yr[j] = value;
            continue;
        }
        const float *xr = x + off + crop[l];
        for (int64_t j = 0; j < mid0; j++) {
            int64_t s = si_pad_src(mode, j - lead[l], len[l]);
            yr[j] = s < 0 ? value : xr[s];
        }
        if (mid1 > mid0) memcpy(yr + mid0, xr, sizeof(float) * (size_t)(mid1 - mid0));
        for (int64_t j = mid1; j < inner; j++) {
            int64_t s = si_pad_src(mode, j - lead[l], len[l]);
            yr[j] = s < 0 ? value : xr[s];
        }
    }
}

static inline double reduce_init(int op) {
    return op == SI_REDUCE_MAX ? -INFINITY : op == SI_REDUCE_MIN ? INFINITY : 0.0;
}

/* Folds n values at stride st into acc; max and min let NaN through, as numpy's do. */
static inline double reduce_run(int op, double acc, const float *p, int64_t n, int64_t st) {
    switch (op) {
    case SI_REDUCE_MAX:
        for (int64_t i = 0; i < n; i++) {
            double v = p[i * st];
            acc = v > acc || v != v ? v : acc;
        }
        return acc;
    case SI_REDUCE_MIN:
        for (int64_t i = 0; i < n; i++) {
            double v = p[i * st];
            acc = v < acc || v != v ? v : acc;
        }
        return acc;
    case SI_REDUCE_MEAN:
    case SI_REDUCE_SUM:
        for (int64_t i = 0; i < n; i++) acc += p[i * st];
        return acc;
    default:
        for (int64_t i = 0; i < n; i++) acc += si_reduce_term(op, p[i * st]);
        return acc;
    }
}

/* Folds len rows of stride inner, cn columns each, into acc[cn]. */
static void reduce_cols(int op, double *acc, const float *xb, int64_t len, int64_t inner, int cn) {
    for (int64_t j = 0; j < len; j++) {
        const float *xr = xb + j * inner;
        switch (op) {
        case SI_REDUCE_MAX:
            for (int i = 0; i < cn; i++) {
                double v = xr[i];
                acc[i] = v > acc[i] || v != v ? v : acc[i];
            }
            break;
        case SI_REDUCE_MIN:
            for (int i = 0; i < cn; i++) {
                double v = xr[i];
                acc[i] = v < acc[i] || v != v ? v : acc[i];
            }
            break;
        case SI_REDUCE_MEAN:
        case SI_REDUCE_SUM:
            for (int i = 0; i < cn; i++) acc[i] += xr[i];
            break;
        default:
            for (int i = 0; i < cn; i++) acc[i] += si_reduce_term(op, xr[i]);
        }
    }
}

#define RD_CHUNK 64
void si_cpu_reduce(int op, int ndim, const int64_t *x_dims, const float *x, const uint8_t *reduce,
                   float *y) {
    SI_ASSERT(ndim >= 0 && ndim <= MAXD);
    int64_t ny = 1, nx = 1;
    for (int d = 0; d < ndim; d++) {
        nx *= x_dims[d];
        if (!reduce[d]) ny *= x_dims[d];
    }
    if (ny == 0) return;
    double cnt = (double)(nx / ny);
    if (nx == 0) { /* reductions over nothing: ONNX's identities (mean: 0 / 0) */
        float v = op == SI_REDUCE_MEAN ? NAN : (float)reduce_init(op); /* L1, L2: 0 */
        for (int64_t i = 0; i < ny; i++) y[i] = v;
        return;
    }
    /* drop size-1 dims and merge neighbours with the same flag */
    int64_t cd[MAXD];
    bool cr[MAXD];
    int n = 0;
    for (int d = 0; d < ndim; d++) {
        if (x_dims[d] == 1) continue;
        bool r = reduce[d] != 0;
        if (n > 0 && cr[n - 1] == r) {
            cd[n - 1] *= x_dims[d];
        } else {
            cd[n] = x_dims[d];
            cr[n++] = r;
        }
    }
    bool any = false;
    for (int d = 0; d < n; d++) any |= cr[d];
    if (!any) { /* every reduced dim has size 1: each output is its one term, finished */
        for (int64_t i = 0; i < nx; i++)
            y[i] = op <= SI_REDUCE_MIN ? x[i]
                                       : (float)si_reduce_final(op, si_reduce_term(op, x[i]), 1);
        return;
    }
    if (n == 1 || n == 2 || (n == 3 && !cr[0])) {
        /* (outer, len, inner) with len reduced: [R], [K R], [R K], [K R K] */
        int ri = cr[0] ? 0 : 1;
        int64_t outer = ri ? cd[0] : 1, len = cd[ri], inner = ri + 1 < n ? cd[ri + 1] : 1;
        if (inner == 1) {
#pragma omp parallel for schedule(static) if (nx > PAR_MIN && outer > 1)
            for (int64_t o = 0; o < outer; o++) {
                double acc = reduce_run(op, reduce_init(op), x + o * len, len, 1);
                y[o] = (float)si_reduce_final(op, acc, cnt);
            }
            return;
        }
        int64_t nch = (inner + RD_CHUNK - 1) / RD_CHUNK;
#pragma omp parallel for schedule(static) if (nx > PAR_MIN)
        for (int64_t t = 0; t < outer * nch; t++) {
            int64_t o = t / nch, c0 = t % nch * RD_CHUNK;
            int cn = (int)(inner - c0 < RD_CHUNK ? inner - c0 : RD_CHUNK);
            const float *xb = x + o * len * inner + c0;
            double acc[RD_CHUNK];
            for (int i = 0; i < cn; i++) acc[i] = reduce_init(op);
            reduce_cols(op, acc, xb, len, inner, cn);
            float *yb = y + o * inner + c0;
            for (int i = 0; i < cn; i++) yb[i] = (float)si_reduce_final(op, acc[i], cnt);
        }
        return;
    }
    /* general: per output, an odometer over the reduced dims */
    int64_t xs[MAXD], kd[MAXD], ks[MAXD], rd[MAXD], rs[MAXD];
    int nk = 0, nr = 0;
    strides_of(n, cd, xs);
    for (int d = 0; d < n; d++) {
        if (cr[d]) {
            rd[nr] = cd[d];
            rs[nr++] = xs[d];
        } else {
            kd[nk] = cd[d];
            ks[nk++] = xs[d];
        }
    }
    /* the innermost reduced dim runs as a strided loop */
    int64_t rlen = rd[nr - 1], rst = rs[nr - 1], rrows = nx / ny / rlen;
#pragma omp parallel for schedule(static) if (nx > PAR_MIN)
    for (int64_t o = 0; o < ny; o++) {
        int64_t rem = o, base = 0;
        for (int d = nk - 1; d >= 0; d--) {
            base += rem % kd[d] * ks[d];
            rem /= kd[d];
        }
        double acc = reduce_init(op);
        for (int64_t r = 0; r < rrows; r++) {
            int64_t rr = r, off = base;
            for (int d = nr - 2; d >= 0; d--) {
                off += rr % rd[d] * rs[d];
                rr /= rd[d];
            }
            acc = reduce_run(op, acc, x + off, rlen, rst);
        }
        y[o] = (float)si_reduce_final(op, acc, cnt);
    }
}

/* Resize's coordinates and taps are kernel_math.h's si_resize_taps, shared with the GPU. */

/* Work splits into (plane, block of rows, chunk of columns) tasks; each computes its columns'
 * taps once into stack tables and each row's taps once per row. */
#define RS_COLS 256
#define RS_ROWS 32
void si_cpu_resize2d(const si_resize_params *p, int64_t nc, int ih, int iw, int oh, int ow,
                     float scale_h, float scale_w, const float *x, float *y) {
    if (nc <= 0 || oh <= 0 || ow <= 0 || ih <= 0 || iw <= 0) return;
    int64_t ncb = (ow + RS_COLS - 1) / RS_COLS, nrb = (oh + RS_ROWS - 1) / RS_ROWS;
    int64_t tasks = nc * nrb * ncb;
#pragma omp parallel for schedule(static) if (nc * oh * ow > PAR_MIN / 4)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t pl = t / (nrb * ncb);
        int r0 = (int)(t / ncb % nrb) * RS_ROWS, c0 = (int)(t % ncb) * RS_COLS;
        int r1 = r0 + RS_ROWS < oh ? r0 + RS_ROWS : oh, cn = ow - c0 < RS_COLS ? ow - c0 : RS_COLS;
        int xi[RS_COLS * 4], nt = 1;
        float xw[RS_COLS * 4];
        for (int c = 0; c < cn; c++)
            nt = si_resize_taps(p, c0 + c, scale_w, iw, ow, xi + c * 4, xw + c * 4);
        const float *xp = x + pl * ih * iw;
        for (int oy = r0; oy < r1; oy++) {
            int yi[4] = {0}; /* the taps past nt are never read; zeros quiet GCC's inlined view */
            float yw[4] = {0};
            si_resize_taps(p, oy, scale_h, ih, oh, yi, yw);
            float *yr = y + (pl * oh + oy) * ow + c0;
            if (nt == 1) {
                const float *row = xp + (size_t)yi[0] * iw;
                for (int c = 0; c < cn; c++) yr[c] = row[xi[c * 4]];
            } else if (nt == 2) {
                const float *ra = xp + (size_t)yi[0] * iw, *rb = xp + (size_t)yi[1] * iw;
                for (int c = 0; c < cn; c++) {
                    const int *i = xi + c * 4;
                    const float *w = xw + c * 4;
                    yr[c] = yw[0] * (w[0] * ra[i[0]] + w[1] * ra[i[1]]) +
                            yw[1] * (w[0] * rb[i[0]] + w[1] * rb[i[1]]);
                }
            } else {
                for (int c = 0; c < cn; c++) {
                    const int *i = xi + c * 4;
                    const float *w = xw + c * 4;
                    float acc = 0.f;
                    for (int k = 0; k < 4; k++) {
                        const float *row = xp + (size_t)yi[k] * iw;
                        acc += yw[k] * (w[0] * row[i[0]] + w[1] * row[i[1]] + w[2] * row[i[2]] +
                                        w[3] * row[i[3]]);
                    }
                    yr[c] = acc;
                }
            }
        }
    }
}
