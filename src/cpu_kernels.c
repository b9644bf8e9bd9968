/* CPU kernels. Parallelism: an outer OpenMP loop over independent (image, group) or (image,
 * channel) planes; OpenBLAS (its OpenMP build) runs single-threaded inside those regions and
 * threads by itself when there are too few planes to share out (batch 1, no groups). */
#include "cpu_kernels.h"

#include <cblas.h>
#include <stdbool.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <string.h>

static inline float act_apply(float v, si_act a) {
    switch (a.kind) {
    case SI_ACT_RELU: return v > 0.f ? v : 0.f;
    case SI_ACT_CLIP: /* max then min, as ONNX defines it: min > max yields max */
        v = v < a.lo ? a.lo : v;
        return v > a.hi ? a.hi : v;
    default: return v;
    }
}

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

static void bias_act(float *y, int64_t hw, float b, si_act act) {
    for (int64_t i = 0; i < hw; i++) y[i] = act_apply(y[i] + b, act);
}

/* Depthwise (one input channel per group, one output per group): direct loops, the interior
 * without bounds checks. */
static void depthwise_plane(const si_conv_shape *s, const float *x, const float *w, float b,
                            si_act act, float *y) {
    for (int oy = 0; oy < s->oh; oy++) {
        for (int ox = 0; ox < s->ow; ox++) {
            int iy0 = oy * s->sh - s->pt, ix0 = ox * s->sw - s->pl;
            float acc = 0.f;
            bool inside = iy0 >= 0 && ix0 >= 0 && iy0 + (s->kh - 1) * s->dh < s->h &&
                          ix0 + (s->kw - 1) * s->dw < s->w;
            if (inside) {
                for (int ky = 0; ky < s->kh; ky++) {
                    const float *row = x + (size_t)(iy0 + ky * s->dh) * s->w + ix0;
                    const float *wk = w + ky * s->kw;
                    for (int kx = 0; kx < s->kw; kx++) acc += row[kx * s->dw] * wk[kx];
                }
            } else {
                for (int ky = 0; ky < s->kh; ky++) {
                    int iy = iy0 + ky * s->dh;
                    if (iy < 0 || iy >= s->h) continue;
                    for (int kx = 0; kx < s->kw; kx++) {
                        int ix = ix0 + kx * s->dw;
                        if (ix < 0 || ix >= s->w) continue;
                        acc += x[(size_t)iy * s->w + ix] * w[ky * s->kw + kx];
                    }
                }
            }
            y[(size_t)oy * s->ow + ox] = act_apply(acc + b, act);
        }
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
    int64_t tasks = (int64_t)s->n * g;
    /* enough independent (image, group) tasks: one per thread, single-threaded BLAS inside */
    bool outer = tasks >= omp_get_max_threads();
#pragma omp parallel for schedule(dynamic, 1) if (outer)
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
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mg, (int)ohw, kdim, 1.f,
                    w + (size_t)gi * mg * kdim, kdim, col, (int)ohw, 0.f, yg, (int)ohw);
        for (int mi = 0; mi < mg; mi++)
            bias_act(yg + mi * ohw, ohw, bias ? bias[gi * mg + mi] : 0.f, act);
    }
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
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, trans_a ? m : k, b,
                trans_b ? k : n, beta, y, n);
}

static inline float binop(si_binop op, float a, float b) {
    switch (op) {
    case SI_BIN_ADD: return a + b;
    case SI_BIN_SUB: return a - b;
    case SI_BIN_MUL: return a * b;
    default: return a / b;
    }
}

void si_cpu_binary(si_binop op, int ndim, const int64_t *ad, const float *a, const int64_t *bd,
                   const float *b, const int64_t *yd, float *y, si_act act) {
    int64_t total = 1, an = 1, bn = 1;
    for (int i = 0; i < ndim; i++) total *= yd[i], an *= ad[i], bn *= bd[i];
    if (an == total && bn == total) {
#pragma omp parallel for schedule(static) if (total > 65536)
        for (int64_t i = 0; i < total; i++) y[i] = act_apply(binop(op, a[i], b[i]), act);
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
            yr[j] = act_apply(binop(op, a[ao + j * sai], b[bo + j * sbi]), act);
    }
}

void si_cpu_activation(const float *x, int64_t n, si_act act, float *y) {
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; i++) y[i] = act_apply(x[i], act);
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
