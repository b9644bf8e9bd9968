/* Unit tests of the CPU kernels against naive references written here: plain index arithmetic,
 * double accumulation, one output element at a time. Inputs are seeded random, outputs poisoned
 * with NaN before each call. A few cases carry expected values from ONNX's own node tests, so a
 * misreading of the spec shared by a kernel and its naive reference still shows. */
#include "cpu/kernels.h"
#include "tests/test_util.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXD 8

static unsigned seed = 12345u;

static int ri(int lo, int hi) { /* uniform in [lo, hi] */
    return lo + (int)(test_rand(&seed) % (unsigned)(hi - lo + 1));
}

static float *frand(size_t n) { /* random values in [-1, 1), never exactly zero */
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        p[i] = test_randf(&seed);
        if (p[i] == 0.f) p[i] = 0.5f;
    }
    return p;
}

static float *fpoison(size_t n) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

static double *dalloc(size_t n) {
    return calloc(n ? n : 1, sizeof(double));
}

static int64_t prod(int n, const int64_t *d) {
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= d[i];
    return p;
}

/* Compares got with want (NaN in want means NaN expected); one CHECK per array, naming the
 * first mismatch. */
static void check_arr(const char *what, const float *got, const double *want, int64_t n,
                      double rtol, double atol) {
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        bool ok = isnan(want[i])   ? isnan(got[i])
                  : isinf(want[i]) ? got[i] == want[i]
                                   : fabs(got[i] - want[i]) <= atol + rtol * fabs(want[i]);
        if (!ok && bad++ == 0) first = i;
    }
    CHECK_MSG(bad == 0, "%s: %lld of %lld differ, first [%lld] got %.9g want %.9g", what,
              (long long)bad, (long long)n, (long long)first, first >= 0 ? got[first] : 0.f,
              first >= 0 ? want[first] : 0.0);
}

static void check_exact(const char *what, const float *got, const float *want, int64_t n) {
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0 && bad++ == 0) first = i;
    CHECK_MSG(bad == 0, "%s: %lld of %lld differ, first [%lld] got %.9g want %.9g", what,
              (long long)bad, (long long)n, (long long)first, first >= 0 ? got[first] : 0.f,
              first >= 0 ? want[first] : 0.f);
}

/* Unravels linear index i over dims into idx. */
static void unravel(int64_t i, int n, const int64_t *dims, int64_t *idx) {
    for (int d = n - 1; d >= 0; d--) {
        idx[d] = dims[d] ? i % dims[d] : 0;
        i = dims[d] ? i / dims[d] : 0;
    }
}

static int64_t ravel(int n, const int64_t *dims, const int64_t *idx) {
    int64_t off = 0;
    for (int d = 0; d < n; d++) off = off * dims[d] + idx[d];
    return off;
}

/* --- activations ------------------------------------------------------------------------------ */

static double act_ref(double v, si_act a) {
    switch (a.kind) {
    case SI_ACT_RELU: return v > 0 ? v : 0;
    case SI_ACT_CLIP: return fmin(fmax(v, a.lo), a.hi);
    case SI_ACT_SIGMOID: return 1 / (1 + exp(-v));
    case SI_ACT_HARDSIGMOID: return fmax(0, fmin(1, a.alpha * v + a.beta));
    case SI_ACT_HARDSWISH: return v * fmax(0, fmin(1, v / 6 + 0.5));
    case SI_ACT_SILU: return v / (1 + exp(-v));
    case SI_ACT_LEAKYRELU: return v >= 0 ? v : a.alpha * v;
    case SI_ACT_ERF: return erf(v);
    case SI_ACT_TANH: return tanh(v);
    case SI_ACT_SQRT: return sqrt(v); /* NaN below 0 */
    case SI_ACT_RECIPROCAL: return 1 / v;
    /* the spec's formulas as written (kernel_math.h rearranges them) */
    case SI_ACT_GELU: return 0.5 * v * (1 + erf(v / sqrt(2.0)));
    case SI_ACT_GELU_TANH: return 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    case SI_ACT_SWISH: return v / (1 + exp(-a.alpha * v));
    case SI_ACT_EXP: return exp(v);
    case SI_ACT_LOG: return log(v); /* NaN below 0 */
    case SI_ACT_NEG: return -v;
    case SI_ACT_ABS: return fabs(v);
    case SI_ACT_SIN: return sin(v);
    case SI_ACT_COS: return cos(v);
    case SI_ACT_FLOOR: return floor(v);
    case SI_ACT_CEIL: return ceil(v);
    case SI_ACT_ROUND: return nearbyint(v);
    case SI_ACT_SIGN: return v > 0 ? 1 : v < 0 ? -1 : 0;
    case SI_ACT_SOFTPLUS: return log(1 + exp(v));
    case SI_ACT_MISH: return v * tanh(log(1 + exp(v)));
    default: return v;
    }
}

static void test_activations(void) {
    si_act acts[] = {
        {.kind = SI_ACT_NONE},
        {.kind = SI_ACT_RELU},
        {.kind = SI_ACT_CLIP, .lo = -0.3f, .hi = 0.6f},
        {.kind = SI_ACT_SIGMOID},
        {.kind = SI_ACT_HARDSIGMOID, .alpha = 0.2f, .beta = 0.5f},
        {.kind = SI_ACT_HARDSIGMOID, .alpha = 0.7f, .beta = 0.1f},
        {.kind = SI_ACT_HARDSWISH},
        {.kind = SI_ACT_SILU},
        {.kind = SI_ACT_LEAKYRELU, .alpha = 0.01f},
        {.kind = SI_ACT_LEAKYRELU, .alpha = 0.3f},
        {.kind = SI_ACT_ERF},
        {.kind = SI_ACT_TANH},
        {.kind = SI_ACT_SQRT},
        {.kind = SI_ACT_RECIPROCAL},
        {.kind = SI_ACT_GELU},
        {.kind = SI_ACT_GELU_TANH},
        {.kind = SI_ACT_SWISH, .alpha = 1.702f},
        {.kind = SI_ACT_EXP},
        {.kind = SI_ACT_LOG},
        {.kind = SI_ACT_NEG},
        {.kind = SI_ACT_ABS},
        {.kind = SI_ACT_SIN},
        {.kind = SI_ACT_COS},
        {.kind = SI_ACT_FLOOR},
        {.kind = SI_ACT_CEIL},
        {.kind = SI_ACT_ROUND},
        {.kind = SI_ACT_SIGN},
        {.kind = SI_ACT_SOFTPLUS},
        {.kind = SI_ACT_MISH},
    };
    int64_t n = 4000;
    float *x = frand(n);
    for (int64_t i = 0; i < n; i++) x[i] *= 8.f; /* reach the saturated parts */
    double *want = dalloc(n);
    for (size_t k = 0; k < sizeof acts / sizeof acts[0]; k++) {
        float *y = fpoison(n), *z = fpoison(n);
        for (int64_t i = 0; i < n; i++) {
            want[i] = act_ref(x[i], acts[k]);
            z[i] = si_act_apply(x[i], acts[k]);
        }
        si_cpu_activation(x, n, acts[k], y);
        char what[64];
        snprintf(what, sizeof what, "si_act_apply kind %d", acts[k].kind);
        check_arr(what, z, want, n, 1e-6, 1e-7);
        snprintf(what, sizeof what, "si_cpu_activation kind %d", acts[k].kind);
        check_exact(what, y, z, n);
        free(y);
        free(z);
    }
    /* Clip with min > max yields max (max(x, lo) first, then min(., hi)) */
    si_act bad = {.kind = SI_ACT_CLIP, .lo = 1.f, .hi = -1.f};
    CHECK(si_act_apply(0.f, bad) == -1.f && si_act_apply(5.f, bad) == -1.f);
    si_act hs = {.kind = SI_ACT_HARDSWISH};
    CHECK(si_act_apply(-3.f, hs) == 0.f && si_act_apply(3.f, hs) == 3.f);
    CHECK(isnan(si_act_apply(NAN, (si_act){.kind = SI_ACT_SIGMOID})));
    /* Round: halves to even, as ONNX's (and numpy's) */
    si_act rd = {.kind = SI_ACT_ROUND};
    CHECK(si_act_apply(2.5f, rd) == 2.f && si_act_apply(3.5f, rd) == 4.f &&
          si_act_apply(-2.5f, rd) == -2.f && si_act_apply(0.5f, rd) == 0.f);
    CHECK(isnan(si_act_apply(NAN, (si_act){.kind = SI_ACT_SIGN})));
    /* Softplus and Mish far out: no overflow to inf above 88, no NaN from inf - inf */
    for (int k = SI_ACT_SOFTPLUS; k <= SI_ACT_MISH; k++) {
        si_act sp = {.kind = k};
        CHECK(si_act_apply(1000.f, sp) == 1000.f && si_act_apply(INFINITY, sp) == INFINITY);
        CHECK(fabsf(si_act_apply(-1000.f, sp)) == 0.f && isnan(si_act_apply(NAN, sp)));
    }
    CHECK(si_act_apply(-20.f, (si_act){.kind = SI_ACT_SOFTPLUS}) > 2e-9f); /* exp(-20), not 0 */
    /* Gelu's tails: exact limits (at -inf the spec's formula, too, is NaN: -inf * 0) */
    for (int k = SI_ACT_GELU; k <= SI_ACT_GELU_TANH; k++) {
        si_act g = {.kind = k};
        CHECK(si_act_apply(30.f, g) == 30.f && si_act_apply(-30.f, g) == 0.f);
        CHECK(si_act_apply(INFINITY, g) == INFINITY);
        CHECK(isnan(si_act_apply(NAN, g)));
    }
    free(x);
    free(want);
}

/* The fused activation in the conv epilogue equals conv without it followed by si_act_apply,
 * bit for bit, on each conv path (im2col, pointwise, depthwise). */
static void test_conv_fused_act(void) {
    si_conv_shape shapes[] = {
        {.n = 2,
         .c = 6,
         .h = 9,
         .w = 7,
         .m = 4,
         .kh = 3,
         .kw = 3,
         .group = 2,
         .sh = 1,
         .sw = 2,
         .dh = 1,
         .dw = 1,
         .pt = 1,
         .pl = 1,
         .pb = 1,
         .pr = 0},
        {.n = 1,
         .c = 5,
         .h = 6,
         .w = 6,
         .m = 7,
         .kh = 1,
         .kw = 1,
         .group = 1,
         .sh = 1,
         .sw = 1,
         .dh = 1,
         .dw = 1},
        {.n = 2,
         .c = 4,
         .h = 8,
         .w = 5,
         .m = 4,
         .kh = 3,
         .kw = 3,
         .group = 4,
         .sh = 2,
         .sw = 1,
         .dh = 1,
         .dw = 2,
         .pt = 1,
         .pl = 2,
         .pb = 1,
         .pr = 2},
    };
    si_act acts[] = {{.kind = SI_ACT_RELU},
                     {.kind = SI_ACT_CLIP, .lo = 0.f, .hi = 0.5f},
                     {.kind = SI_ACT_SIGMOID},
                     {.kind = SI_ACT_HARDSIGMOID, .alpha = 0.2f, .beta = 0.5f},
                     {.kind = SI_ACT_HARDSWISH},
                     {.kind = SI_ACT_SILU},
                     {.kind = SI_ACT_LEAKYRELU, .alpha = 0.1f},
                     {.kind = SI_ACT_GELU},
                     {.kind = SI_ACT_TANH}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        si_conv_shape s = shapes[si];
        s.oh = (s.h + s.pt + s.pb - s.dh * (s.kh - 1) - 1) / s.sh + 1;
        s.ow = (s.w + s.pl + s.pr - s.dw * (s.kw - 1) - 1) / s.sw + 1;
        size_t nx = (size_t)s.n * s.c * s.h * s.w, nw = (size_t)s.m * (s.c / s.group) * s.kh * s.kw;
        size_t ny = (size_t)s.n * s.m * s.oh * s.ow;
        float *x = frand(nx), *w = frand(nw), *b = frand(s.m);
        float *scr = malloc(sizeof(float) * (si_cpu_conv2d_scratch(&s) * 64 + 1));
        float *plain = fpoison(ny);
        si_cpu_conv2d(&s, x, w, b, (si_act){.kind = SI_ACT_NONE}, plain, scr);
        for (size_t k = 0; k < sizeof acts / sizeof acts[0]; k++) {
            float *y = fpoison(ny), *want = malloc(sizeof(float) * ny);
            si_cpu_conv2d(&s, x, w, b, acts[k], y, scr);
            for (size_t i = 0; i < ny; i++) want[i] = si_act_apply(plain[i], acts[k]);
            char what[64];
            snprintf(what, sizeof what, "conv shape %zu fused act %d", si, acts[k].kind);
            check_exact(what, y, want, (int64_t)ny);
            free(y);
            free(want);
        }
        free(x);
        free(w);
        free(b);
        free(scr);
        free(plain);
    }
}

/* --- pooling ---------------------------------------------------------------------------------- */

static int pool_out(int in, int k, int s, int d, int pb, int pe, int ceil_mode) {
    int span = in + pb + pe - d * (k - 1) - 1;
    if (span < 0) return 0;
    int o = span / s + 1;
    if (ceil_mode && span % s) {
        o++;
        if ((o - 1) * s >= in + pb) o--; /* the last window must start inside input or pad */
    }
    return o;
}

static void avgpool_ref(const si_pool_shape *s, int cip, const float *x, double *y) {
    for (int p = 0; p < s->n * s->c; p++)
        for (int oy = 0; oy < s->oh; oy++)
            for (int ox = 0; ox < s->ow; ox++) {
                double sum = 0;
                int cnt = 0;
                for (int ky = 0; ky < s->kh; ky++)
                    for (int kx = 0; kx < s->kw; kx++) {
                        int iy = oy * s->sh - s->pt + ky * s->dh;
                        int ix = ox * s->sw - s->pl + kx * s->dw;
                        bool in = iy >= 0 && iy < s->h && ix >= 0 && ix < s->w;
                        bool padded =
                            iy >= -s->pt && iy < s->h + s->pb && ix >= -s->pl && ix < s->w + s->pr;
                        if (in) sum += x[((size_t)p * s->h + iy) * s->w + ix];
                        if (cip ? padded : in) cnt++;
                    }
                y[((size_t)p * s->oh + oy) * s->ow + ox] = cnt ? sum / cnt : 0.0;
            }
}

static void test_avgpool(void) {
    /* ONNX node tests: averagepool_2d_ceil, _dilations, _ceil_last_window_starts_on_pad */
    float x16[16];
    for (int i = 0; i < 16; i++) x16[i] = (float)(i + 1);
    float y4[4];
    si_pool_shape a = {.n = 1,
                       .c = 1,
                       .h = 4,
                       .w = 4,
                       .kh = 3,
                       .kw = 3,
                       .sh = 2,
                       .sw = 2,
                       .dh = 1,
                       .dw = 1,
                       .oh = 2,
                       .ow = 2};
    si_cpu_avgpool2d(&a, 0, x16, y4);
    CHECK(y4[0] == 6.f && y4[1] == 7.5f && y4[2] == 12.f && y4[3] == 13.5f);
    si_pool_shape b = {.n = 1,
                       .c = 1,
                       .h = 4,
                       .w = 4,
                       .kh = 2,
                       .kw = 2,
                       .sh = 1,
                       .sw = 1,
                       .dh = 2,
                       .dw = 2,
                       .oh = 2,
                       .ow = 2};
    si_cpu_avgpool2d(&b, 0, x16, y4);
    CHECK(y4[0] == 6.f && y4[1] == 7.f && y4[2] == 10.f && y4[3] == 11.f);
    const float xc[12] = {0.858f,  0.0786f, 0.2692f, 0.1537f, 0.8816f, 0.4353f,
                          0.5772f, 0.6623f, 0.9067f, 0.9483f, 0.597f,  0.763f};
    const double yc[3] = {0.1511, 0.2841, 0.3572};
    si_pool_shape c = {.n = 1,
                       .c = 3,
                       .h = 2,
                       .w = 2,
                       .kh = 3,
                       .kw = 3,
                       .sh = 3,
                       .sw = 3,
                       .dh = 1,
                       .dw = 1,
                       .pt = 1,
                       .pl = 1,
                       .pb = 1,
                       .pr = 1};
    c.oh = pool_out(2, 3, 3, 1, 1, 1, 1);
    c.ow = pool_out(2, 3, 3, 1, 1, 1, 1);
    CHECK(c.oh == 1 && c.ow == 1);
    float y3[3];
    si_cpu_avgpool2d(&c, 1, xc, y3);
    /* the node test holds 4-digit values and compares at rtol 1e-3 */
    check_arr("avgpool ceil last window starts on pad", y3, yc, 3, 1e-3, 0);

    int cases = 0;
    for (int it = 0; it < 400; it++) {
        si_pool_shape s = {.n = ri(1, 2), .c = ri(1, 3), .h = ri(1, 9), .w = ri(1, 9)};
        s.kh = ri(1, 4), s.kw = ri(1, 4), s.sh = ri(1, 3), s.sw = ri(1, 3);
        s.dh = ri(1, 2), s.dw = ri(1, 2);
        s.pt = ri(0, s.kh - 1), s.pb = ri(0, s.kh - 1), s.pl = ri(0, s.kw - 1),
        s.pr = ri(0, s.kw - 1);
        int ceil_mode = ri(0, 1), cip = ri(0, 1);
        s.oh = pool_out(s.h, s.kh, s.sh, s.dh, s.pt, s.pb, ceil_mode);
        s.ow = pool_out(s.w, s.kw, s.sw, s.dw, s.pl, s.pr, ceil_mode);
        if (s.oh <= 0 || s.ow <= 0) continue;
        size_t nx = (size_t)s.n * s.c * s.h * s.w, ny = (size_t)s.n * s.c * s.oh * s.ow;
        float *x = frand(nx), *y = fpoison(ny);
        double *want = dalloc(ny);
        avgpool_ref(&s, cip, x, want);
        si_cpu_avgpool2d(&s, cip, x, y);
        char what[160];
        snprintf(what, sizeof what,
                 "avgpool %dx%d k%dx%d s%dx%d d%dx%d pads %d,%d,%d,%d ceil %d cip %d", s.h, s.w,
                 s.kh, s.kw, s.sh, s.sw, s.dh, s.dw, s.pt, s.pl, s.pb, s.pr, ceil_mode, cip);
        check_arr(what, y, want, (int64_t)ny, 1e-5, 1e-6);
        cases++;
        free(x);
        free(y);
        free(want);
    }
    CHECK(cases > 200);
}

/* --- softmax ---------------------------------------------------------------------------------- */

static void test_softmax_axis(void) {
    int64_t shapes[][3] = {{3, 7, 1}, {1, 10, 1}, {4, 5, 3}, {2, 9, 70}, {1, 1, 5}, {3, 130, 129}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int64_t outer = shapes[k][0], len = shapes[k][1], inner = shapes[k][2];
        int64_t n = outer * len * inner;
        float *x = frand(n), *y = fpoison(n);
        for (int64_t i = 0; i < n; i++) x[i] *= 30.f; /* large logits: needs the max shift */
        double *want = dalloc(n);
        double worst_sum = 0;
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j < len; j++) mx = fmax(mx, x[(o * len + j) * inner + i]);
                for (int64_t j = 0; j < len; j++) sum += exp(x[(o * len + j) * inner + i] - mx);
                for (int64_t j = 0; j < len; j++) {
                    int64_t at = (o * len + j) * inner + i;
                    want[at] = exp(x[at] - mx) / sum;
                }
            }
        si_cpu_softmax_axis(x, outer, len, inner, y);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                double s = 0;
                for (int64_t j = 0; j < len; j++) s += y[(o * len + j) * inner + i];
                worst_sum = fmax(worst_sum, fabs(s - 1));
            }
        char what[96];
        snprintf(what, sizeof what, "softmax (%lld, %lld, %lld)", (long long)outer, (long long)len,
                 (long long)inner);
        check_arr(what, y, want, n, 1e-5, 1e-9);
        CHECK_MSG(worst_sum < 1e-5, "%s: sums off by %g", what, worst_sum);
        free(x);
        free(y);
        free(want);
    }
    float big[3] = {1000.f, 1000.f, -1000.f}, out[3];
    si_cpu_softmax_axis(big, 1, 3, 1, out);
    CHECK(out[0] == 0.5f && out[1] == 0.5f && out[2] == 0.f);
}

/* --- concat / split --------------------------------------------------------------------------- */

static void test_concat_split(void) {
    for (int it = 0; it < 100; it++) {
        int n = ri(1, 4);
        int64_t outer = ri(1, 5), inner = ri(1, 6), sizes[4], total = 0;
        float *xs[4], *ys[4];
        for (int i = 0; i < n; i++) {
            sizes[i] = ri(0, 5);
            total += sizes[i];
            xs[i] = frand((size_t)(outer * sizes[i] * inner));
            ys[i] = fpoison((size_t)(outer * sizes[i] * inner));
        }
        int64_t ny = outer * total * inner;
        float *y = fpoison(ny);
        double *want = dalloc(ny);
        for (int64_t o = 0; o < outer; o++) {
            int64_t at = 0;
            for (int i = 0; i < n; i++)
                for (int64_t j = 0; j < sizes[i]; j++, at++)
                    for (int64_t k = 0; k < inner; k++)
                        want[(o * total + at) * inner + k] = xs[i][(o * sizes[i] + j) * inner + k];
        }
        si_cpu_concat(n, (const float *const *)xs, sizes, outer, inner, y);
        check_arr("concat", y, want, ny, 0, 0);
        si_cpu_split(y, outer, inner, n, sizes, ys);
        for (int i = 0; i < n; i++) {
            check_exact("split(concat(x)) == x", ys[i], xs[i], outer * sizes[i] * inner);
            free(xs[i]);
            free(ys[i]);
        }
        free(y);
        free(want);
    }
}

/* --- slice ------------------------------------------------------------------------------------ */

static void test_slice(void) {
    int neg = 0;
    for (int it = 0; it < 300; it++) {
        int nd = ri(1, 5);
        int64_t xd[MAXD], yd[MAXD], st[MAXD], sp[MAXD];
        for (int d = 0; d < nd; d++) {
            xd[d] = ri(1, 7);
            do sp[d] = ri(-3, 3);
            while (sp[d] == 0);
            st[d] = ri(0, (int)xd[d] - 1);
            int64_t most = sp[d] > 0 ? (xd[d] - 1 - st[d]) / sp[d] + 1 : st[d] / -sp[d] + 1;
            yd[d] = ri(it % 7 == 0 ? 0 : 1, (int)most);
            neg += sp[d] < 0;
        }
        int64_t nx = prod(nd, xd), ny = prod(nd, yd);
        float *x = frand(nx), *y = fpoison(ny);
        double *want = dalloc(ny);
        for (int64_t i = 0; i < ny; i++) {
            int64_t idx[MAXD];
            unravel(i, nd, yd, idx);
            for (int d = 0; d < nd; d++) idx[d] = st[d] + idx[d] * sp[d];
            want[i] = x[ravel(nd, xd, idx)];
        }
        si_cpu_slice(nd, xd, x, st, sp, yd, y);
        check_arr("slice", y, want, ny, 0, 0);
        free(x);
        free(y);
        free(want);
    }
    CHECK(neg > 100);
}

/* --- transpose -------------------------------------------------------------------------------- */

static void transpose_case(int nd, const int64_t *xd, const int *perm, const char *what) {
    int64_t n = prod(nd, xd), yd[MAXD];
    for (int d = 0; d < nd; d++) yd[d] = xd[perm[d]];
    float *x = frand(n), *y = fpoison(n);
    double *want = dalloc(n);
    for (int64_t i = 0; i < n; i++) {
        int64_t yi[MAXD], xi[MAXD];
        unravel(i, nd, yd, yi);
        for (int d = 0; d < nd; d++) xi[perm[d]] = yi[d];
        want[i] = x[ravel(nd, xd, xi)];
    }
    si_cpu_transpose(nd, xd, perm, x, y);
    char buf[160];
    int at = snprintf(buf, sizeof buf, "transpose %s dims", what);
    for (int d = 0; d < nd && at < 140; d++)
        at += snprintf(buf + at, sizeof buf - at, " %lld", (long long)xd[d]);
    at += snprintf(buf + at, sizeof buf - at, " perm");
    for (int d = 0; d < nd && at < 150; d++)
        at += snprintf(buf + at, sizeof buf - at, " %d", perm[d]);
    check_arr(buf, y, want, n, 0, 0);
    free(x);
    free(y);
    free(want);
}

static void test_transpose(void) {
    for (int it = 0; it < 300; it++) {
        int nd = ri(2, 5), perm[MAXD];
        int64_t xd[MAXD];
        for (int d = 0; d < nd; d++) {
            xd[d] = ri(1, 7);
            perm[d] = d;
        }
        for (int d = nd - 1; d > 0; d--) { /* Fisher-Yates */
            int j = ri(0, d), t = perm[d];
            perm[d] = perm[j];
            perm[j] = t;
        }
        transpose_case(nd, xd, perm, "random");
    }
    /* big enough for the tiled and parallel paths */
    int nchw_nhwc[4] = {0, 2, 3, 1}, nhwc_nchw[4] = {0, 3, 1, 2}, t2[2] = {1, 0};
    int mixed[5] = {3, 0, 4, 2, 1}, ident[3] = {0, 1, 2};
    transpose_case(4, (int64_t[]){2, 35, 33, 17}, nchw_nhwc, "NCHW->NHWC");
    transpose_case(4, (int64_t[]){2, 33, 17, 35}, nhwc_nchw, "NHWC->NCHW");
    transpose_case(2, (int64_t[]){300, 257}, t2, "2-D");
    transpose_case(2, (int64_t[]){1, 257}, t2, "2-D row");
    transpose_case(5, (int64_t[]){3, 9, 2, 40, 37}, mixed, "5-D");
    transpose_case(3, (int64_t[]){4, 5, 6}, ident, "identity");
    transpose_case(3, (int64_t[]){1, 1, 1}, (int[]){2, 0, 1}, "all ones");
}

/* --- broadcast -------------------------------------------------------------------------------- */

static void test_broadcast(void) {
    for (int it = 0; it < 300; it++) {
        int nd = ri(1, 5);
        int64_t xd[MAXD], yd[MAXD];
        for (int d = 0; d < nd; d++) {
            yd[d] = ri(1, 6);
            xd[d] = ri(0, 1) ? yd[d] : 1;
        }
        if (it == 0) yd[0] = 200, xd[0] = 1; /* the parallel path */
        int64_t nx = prod(nd, xd), ny = prod(nd, yd);
        float *x = frand(nx), *y = fpoison(ny);
        double *want = dalloc(ny);
        for (int64_t i = 0; i < ny; i++) {
            int64_t idx[MAXD];
            unravel(i, nd, yd, idx);
            for (int d = 0; d < nd; d++)
                if (xd[d] == 1) idx[d] = 0;
            want[i] = x[ravel(nd, xd, idx)];
        }
        si_cpu_broadcast(nd, xd, x, yd, y);
        check_arr("broadcast", y, want, ny, 0, 0);
        free(x);
        free(y);
        free(want);
    }
}

/* Tile against coordinates modulo x's dims: ranks 1 to 4, any dims repeated (1 included), x's
 * dims of 1 among them (no split), a 0 repeat (nothing written), the parallel path once. */
static void test_tile(void) {
    for (int it = 0; it < 300; it++) {
        int nd = ri(1, 4);
        int64_t xd[MAXD], yd[MAXD];
        for (int d = 0; d < nd; d++) {
            xd[d] = ri(1, 5);
            yd[d] = xd[d] * ri(1, 4);
        }
        if (it == 0) xd[0] = 300, yd[0] = 600; /* the parallel path */
        if (it == 1) yd[nd - 1] = 0;
        int64_t nx = prod(nd, xd), ny = prod(nd, yd);
        float *x = frand(nx), *y = fpoison(ny ? ny : 1);
        double *want = dalloc(ny ? ny : 1);
        for (int64_t i = 0; i < ny; i++) {
            int64_t idx[MAXD];
            unravel(i, nd, yd, idx);
            for (int d = 0; d < nd; d++) idx[d] %= xd[d];
            want[i] = x[ravel(nd, xd, idx)];
        }
        si_cpu_tile(nd, xd, x, yd, y);
        check_arr("tile", y, want, ny, 0, 0);
        free(x);
        free(y);
        free(want);
    }
}

/* --- binary ops ------------------------------------------------------------------------------- */

static double bin_ref(si_binop op, double a, double b) {
    switch (op) {
    case SI_BIN_ADD: return a + b;
    case SI_BIN_SUB: return a - b;
    case SI_BIN_MUL: return a * b;
    case SI_BIN_DIV: return a / b;
    case SI_BIN_MIN: return fmin(a, b); /* no NaN among the random values */
    case SI_BIN_MAX: return fmax(a, b);
    default: return pow(a, b);
    }
}

/* Every op with numpy broadcasting on either side. Pow: positive bases with any exponent, and
 * negative bases with whole exponents (x^2 as exporters write it), where powf must not give NaN. */
static void test_binary(void) {
    for (int it = 0; it < 200; it++) {
        si_binop op = (si_binop)(it % (SI_BIN_MAX + 1));
        int nd = ri(1, 4);
        int64_t ad[MAXD], bd[MAXD], yd[MAXD];
        for (int d = 0; d < nd; d++) {
            yd[d] = ri(1, 5);
            ad[d] = ri(0, 2) ? yd[d] : 1;
            bd[d] = ri(0, 2) ? yd[d] : 1;
        }
        int64_t na = prod(nd, ad), nb = prod(nd, bd), ny = prod(nd, yd);
        float *a = frand(na), *b = frand(nb), *y = fpoison(ny);
        bool whole = op == SI_BIN_POW && it % 2;
        for (int64_t i = 0; i < na; i++)
            if (op == SI_BIN_POW && !whole) a[i] = fabsf(a[i]) * 3.f;
        for (int64_t i = 0; i < nb; i++)
            if (op == SI_BIN_POW) b[i] = whole ? (float)ri(-2, 3) : b[i] * 3.f;
        double *want = dalloc(ny);
        for (int64_t i = 0; i < ny; i++) {
            int64_t idx[MAXD], ia[MAXD], ib[MAXD];
            unravel(i, nd, yd, idx);
            for (int d = 0; d < nd; d++) {
                ia[d] = ad[d] == 1 ? 0 : idx[d];
                ib[d] = bd[d] == 1 ? 0 : idx[d];
            }
            want[i] = bin_ref(op, a[ravel(nd, ad, ia)], b[ravel(nd, bd, ib)]);
        }
        si_cpu_binary(op, nd, ad, a, bd, b, yd, y, (si_act){.kind = SI_ACT_NONE});
        char what[64];
        snprintf(what, sizeof what, "binary op %d (iteration %d)", op, it);
        check_arr(what, y, want, ny, 1e-6, 1e-7);
        free(a);
        free(b);
        free(y);
        free(want);
    }
    /* Min and Max: a NaN on either side gives NaN, as numpy's minimum (fminf would drop it) */
    int64_t d2[1] = {2};
    float a2[2] = {NAN, 1.f}, b2[2] = {1.f, NAN}, y2[2];
    for (int op = SI_BIN_MIN; op <= SI_BIN_MAX; op++) {
        si_cpu_binary((si_binop)op, 1, d2, a2, d2, b2, d2, y2, (si_act){.kind = SI_ACT_NONE});
        CHECK(isnan(y2[0]) && isnan(y2[1]));
    }
}

/* --- gather ----------------------------------------------------------------------------------- */

static void test_gather(void) {
    int negs = 0;
    for (int it = 0; it < 200; it++) {
        int64_t outer = ri(1, 4), len = ri(1, 8), inner = ri(1, 5), n = ri(0, 9);
        int64_t idx[9];
        for (int64_t j = 0; j < n; j++) {
            idx[j] = ri(-(int)len, (int)len - 1);
            negs += idx[j] < 0;
        }
        float *x = frand(outer * len * inner), *y = fpoison(outer * n * inner);
        double *want = dalloc(outer * n * inner);
        for (int64_t o = 0; o < outer; o++)
            for (int64_t j = 0; j < n; j++)
                for (int64_t k = 0; k < inner; k++) {
                    int64_t i = idx[j] < 0 ? idx[j] + len : idx[j];
                    want[(o * n + j) * inner + k] = x[(o * len + i) * inner + k];
                }
        si_cpu_gather(x, outer, len, inner, idx, n, y);
        check_arr("gather", y, want, outer * n * inner, 0, 0);
        free(x);
        free(y);
        free(want);
    }
    CHECK(negs > 100);
}

/* The indexing kernels on ONNX's own examples (GatherElements' test_gather_elements_0, GatherND's
 * example with batch_dims 1 on floats, ScatterElements' duplicates added), then an index out of
 * range, which shape inference refuses but the kernels must survive: 0 gathered, nothing
 * written. */
static void test_indexing(void) {
    const float x[4] = {1, 2, 3, 4};
    int64_t ge_idx[4] = {0, 0, 1, 0};
    si_elements_geom ge = {.nd = 2, .axis = 1, .len = 2, .idims = {2, 2}, .xstride = {2, 1}};
    float y[4];
    si_cpu_gather_elements(&ge, x, ge_idx, y);
    CHECK(y[0] == 1 && y[1] == 1 && y[2] == 4 && y[3] == 3);
    /* data (2, 2, 2), indices (2, 1), batch_dims 1: y = [[2, 3], [4, 5]] */
    const float d[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    int64_t nd_idx[2] = {1, 0};
    si_gathernd_geom gn = {.k = 1,
                           .rows = 2,
                           .per_batch = 1,
                           .slice = 2,
                           .batch_stride = 4,
                           .dims = {2},
                           .strides = {2}};
    si_cpu_gather_nd(&gn, d, nd_idx, y);
    CHECK(y[0] == 2 && y[1] == 3 && y[2] == 4 && y[3] == 5);
    /* data (1, 5), indices [[1, 1]] along axis 1, updates [[1.1, 2.1]] added: 1 + 1.1 + 2.1 */
    const float s[5] = {1, 2, 3, 4, 5}, u[2] = {1.1f, 2.1f};
    int64_t se_idx[2] = {1, 1};
    si_elements_geom se = {.nd = 2, .axis = 1, .len = 5, .idims = {1, 2}, .xstride = {5, 1}};
    float z[5];
    si_cpu_scatter_elements(&se, SI_SCATTER_ADD, s, 5, se_idx, u, z);
    CHECK(z[0] == 1 && z[1] == (2.f + 1.1f) + 2.1f && z[2] == 3 && z[4] == 5);
    ge_idx[1] = 2;
    nd_idx[0] = -3;
    se_idx[0] = 5;
    si_cpu_gather_elements(&ge, x, ge_idx, y);
    CHECK(y[0] == 1 && y[1] == 0 && y[2] == 4 && y[3] == 3);
    si_cpu_gather_nd(&gn, d, nd_idx, y);
    CHECK(y[0] == 0 && y[1] == 0 && y[2] == 4 && y[3] == 5);
    si_cpu_scatter_elements(&se, SI_SCATTER_NONE, s, 5, se_idx, u, z);
    CHECK(z[0] == 1 && z[1] == 2.1f && z[2] == 3 && z[3] == 4 && z[4] == 5);
}

/* --- matmul ----------------------------------------------------------------------------------- */

static void test_matmul(void) {
    int shared = 0;
    for (int it = 0; it < 200; it++) {
        int nd = ri(2, 5);
        int64_t ad[MAXD], bd[MAXD], yd[MAXD];
        int64_t m = ri(1, 9), k = it % 25 == 0 ? 0 : ri(1, it % 5 == 0 ? 70 : 9), n = ri(1, 9);
        int pattern = ri(0, 3); /* 0 random, 1 b shared, 2 a shared, 3 same */
        for (int d = 0; d < nd - 2; d++) {
            yd[d] = ri(1, 4);
            ad[d] = pattern == 2 ? 1 : pattern == 3 || ri(0, 1) ? yd[d] : 1;
            bd[d] = pattern == 1 ? 1 : pattern == 3 || ri(0, 1) ? yd[d] : 1;
            if (ad[d] == 1 && bd[d] == 1) yd[d] = 1;
        }
        shared += pattern == 1;
        ad[nd - 2] = m, ad[nd - 1] = k, bd[nd - 2] = k, bd[nd - 1] = n, yd[nd - 2] = m,
                yd[nd - 1] = n;
        int64_t na = prod(nd, ad), nb = prod(nd, bd), ny = prod(nd, yd);
        float *a = frand(na), *b = frand(nb), *y = fpoison(ny);
        double *want = dalloc(ny);
        for (int64_t i = 0; i < ny; i++) {
            int64_t idx[MAXD], ai[MAXD], bi[MAXD];
            unravel(i, nd, yd, idx);
            for (int d = 0; d < nd - 2; d++) {
                ai[d] = ad[d] == 1 ? 0 : idx[d];
                bi[d] = bd[d] == 1 ? 0 : idx[d];
            }
            double s = 0;
            for (int64_t p = 0; p < k; p++) {
                ai[nd - 2] = idx[nd - 2], ai[nd - 1] = p;
                bi[nd - 2] = p, bi[nd - 1] = idx[nd - 1];
                s += (double)a[ravel(nd, ad, ai)] * b[ravel(nd, bd, bi)];
            }
            want[i] = s;
        }
        si_cpu_matmul(nd, ad, a, bd, b, yd, y);
        char what[64];
        snprintf(what, sizeof what, "matmul rank %d pattern %d k %lld", nd, pattern, (long long)k);
        check_arr(what, y, want, ny, 1e-5, 1e-5);
        free(a);
        free(b);
        free(y);
        free(want);
    }
    CHECK(shared > 20);
}

/* --- pad -------------------------------------------------------------------------------------- */

/* Reflect by mirroring again and again until inside [0, len), the way numpy pads wide. */
static int64_t reflect_ref(int64_t s, int64_t len) {
    if (len == 1) return 0;
    while (s < 0 || s >= len) s = s < 0 ? -s : 2 * (len - 1) - s;
    return s;
}

static void test_pad(void) {
    int negs = 0;
    for (int it = 0; it < 400; it++) {
        int nd = ri(1, 4), mode = it % 4;
        int64_t xd[MAXD], yd[MAXD], pads[2 * MAXD], lo[MAXD], len[MAXD];
        for (int d = 0; d < nd; d++) {
            xd[d] = ri(1, 6);
            int64_t b = ri(-2, 7), e = ri(-2, 7);
            while (xd[d] + (b < 0 ? b : 0) + (e < 0 ? e : 0) < 1) b++, e++; /* keep >= 1 */
            pads[d] = b, pads[nd + d] = e;
            negs += b < 0 || e < 0;
            lo[d] = b < 0 ? -b : 0; /* first kept x index */
            len[d] = xd[d] - lo[d] - (e < 0 ? -e : 0);
            yd[d] = xd[d] + b + e;
        }
        int64_t nx = prod(nd, xd), ny = prod(nd, yd);
        float *x = frand(nx), *y = fpoison(ny), value = 0.25f;
        double *want = dalloc(ny);
        for (int64_t i = 0; i < ny; i++) {
            int64_t idx[MAXD];
            unravel(i, nd, yd, idx);
            bool constant = false;
            for (int d = 0; d < nd; d++) {
                int64_t s = idx[d] - (pads[d] > 0 ? pads[d] : 0); /* into the cropped part */
                if (s < 0 || s >= len[d]) {
                    if (mode == SI_PAD_CONSTANT) constant = true;
                    if (mode == SI_PAD_EDGE) s = s < 0 ? 0 : len[d] - 1;
                    if (mode == SI_PAD_WRAP)
                        while (s < 0 || s >= len[d]) s += s < 0 ? len[d] : -len[d];
                    if (mode == SI_PAD_REFLECT) s = reflect_ref(s, len[d]);
                }
                idx[d] = lo[d] + s;
            }
            want[i] = constant ? value : x[ravel(nd, xd, idx)];
        }
        si_cpu_pad(mode, nd, xd, x, pads, value, yd, y);
        char what[64];
        snprintf(what, sizeof what, "pad mode %d rank %d", mode, nd);
        check_arr(what, y, want, ny, 0, 0);
        free(x);
        free(y);
        free(want);
    }
    CHECK(negs > 100);
    /* numpy.pad([1, 2, 3], (5, 0), 'reflect') */
    float x3[3] = {1, 2, 3}, y8[8];
    const double r8[8] = {2, 1, 2, 3, 2, 1, 2, 3};
    si_cpu_pad(SI_PAD_REFLECT, 1, (int64_t[]){3}, x3, (int64_t[]){5, 0}, 0.f, (int64_t[]){8}, y8);
    check_arr("pad reflect wider than the input", y8, r8, 8, 0, 0);
}

/* --- reduce ----------------------------------------------------------------------------------- */

static void reduce_case(int op, int nd, const int64_t *xd, const uint8_t *mask, const char *what) {
    int64_t yd[MAXD];
    for (int d = 0; d < nd; d++) yd[d] = mask[d] ? 1 : xd[d];
    int64_t nx = prod(nd, xd), ny = prod(nd, yd);
    float *x = frand(nx), *y = fpoison(ny);
    double *want = dalloc(ny);
    double init = op == SI_REDUCE_MAX ? -INFINITY : op == SI_REDUCE_MIN ? INFINITY : 0;
    for (int64_t i = 0; i < ny; i++) want[i] = init;
    for (int64_t i = 0; i < nx; i++) {
        int64_t idx[MAXD];
        unravel(i, nd, xd, idx);
        for (int d = 0; d < nd; d++)
            if (mask[d]) idx[d] = 0;
        double *w = &want[ravel(nd, yd, idx)];
        if (op == SI_REDUCE_MAX)
            *w = fmax(*w, x[i]);
        else if (op == SI_REDUCE_MIN)
            *w = fmin(*w, x[i]);
        else
            *w += x[i];
    }
    if (op == SI_REDUCE_MEAN)
        for (int64_t i = 0; i < ny; i++) want[i] = ny ? want[i] / ((double)nx / ny) : 0;
    if (op == SI_REDUCE_MEAN && nx == 0)
        for (int64_t i = 0; i < ny; i++) want[i] = NAN;
    si_cpu_reduce(op, nd, xd, x, mask, y);
    char buf[128];
    snprintf(buf, sizeof buf, "reduce %s op %d", what, op);
    check_arr(buf, y, want, ny, 1e-6, 1e-6);
    free(x);
    free(y);
    free(want);
}

static void test_reduce(void) {
    for (int it = 0; it < 400; it++) {
        int nd = ri(1, 5);
        int64_t xd[MAXD];
        uint8_t mask[MAXD];
        for (int d = 0; d < nd; d++) {
            xd[d] = ri(1, 5);
            mask[d] = (uint8_t)ri(0, 1);
        }
        reduce_case(it % 4, nd, xd, mask, "random");
    }
    for (int op = 0; op < 4; op++) {
        reduce_case(op, 3, (int64_t[]){2, 3, 130}, (uint8_t[]){0, 1, 0}, "(K R K) chunks");
        reduce_case(op, 4, (int64_t[]){8, 16, 30, 30}, (uint8_t[]){0, 0, 1, 1}, "NCHW over HW");
        reduce_case(op, 4, (int64_t[]){4, 16, 30, 30}, (uint8_t[]){0, 1, 0, 0}, "NCHW over C");
        reduce_case(op, 4, (int64_t[]){5, 3, 4, 7}, (uint8_t[]){1, 0, 1, 0}, "(R K R K)");
        reduce_case(op, 3, (int64_t[]){3, 4, 5}, (uint8_t[]){1, 1, 1}, "all");
        reduce_case(op, 3, (int64_t[]){3, 4, 5}, (uint8_t[]){0, 0, 0}, "none");
        reduce_case(op, 3, (int64_t[]){3, 0, 5}, (uint8_t[]){0, 1, 0}, "empty");
    }
}

/* --- resize ----------------------------------------------------------------------------------- */

/* ONNX Resize, one output element at a time, straight from the operator's formulas. */
static double coord_ref(int coord, int o, double scale, int in, int out) {
    double lr = scale * in; /* the spec's length_resized as the reference computes it */
    switch (coord) {
    case SI_COORD_ASYMMETRIC: return o / scale;
    case SI_COORD_ALIGN_CORNERS: return lr == 1 ? 0 : o * (in - 1) / (lr - 1);
    case SI_COORD_PYTORCH_HALF_PIXEL: return lr > 1 ? (o + 0.5) / scale - 0.5 : 0;
    case SI_COORD_TF_HALF_PIXEL_FOR_NN: return (o + 0.5) / scale;
    case SI_COORD_HALF_PIXEL_SYMMETRIC: return in / 2.0 * (1 - out / lr) + (o + 0.5) / scale - 0.5;
    default: return (o + 0.5) / scale - 0.5;
    }
}

static int clampi(int64_t v, int in) {
    return v < 0 ? 0 : v >= in ? in - 1 : (int)v;
}

static double keys(double d, double A) { /* the cubic convolution kernel */
    d = fabs(d);
    if (d <= 1) return (A + 2) * d * d * d - (A + 3) * d * d + 1;
    if (d < 2) return A * d * d * d - 5 * A * d * d + 8 * A * d - 4 * A;
    return 0;
}

/* The taps of one axis: indices (clamped: edge padding) and weights. Returns the count. */
static int taps_ref(const si_resize_params *p, int o, double scale, int in, int out, int *idx,
                    double *w) {
    double x = coord_ref(p->coord, o, scale, in, out);
    if (p->mode == SI_RESIZE_NEAREST) {
        double r;
        if (p->nearest == SI_NEAREST_FLOOR)
            r = floor(x);
        else if (p->nearest == SI_NEAREST_CEIL)
            r = ceil(x);
        else if (x - floor(x) == 0.5)
            r = p->nearest == SI_NEAREST_ROUND_PREFER_CEIL ? ceil(x) : floor(x);
        else
            r = round(x);
        idx[0] = clampi((int64_t)r, in);
        w[0] = 1;
        return 1;
    }
    int64_t f = (int64_t)floor(x);
    if (p->mode == SI_RESIZE_LINEAR) {
        idx[0] = clampi(f, in), idx[1] = clampi(f + 1, in);
        w[0] = 1 - (x - f), w[1] = x - f;
        return 2;
    }
    double sum = 0;
    for (int i = 0; i < 4; i++) {
        int64_t s = f - 1 + i;
        w[i] = keys(x - s, p->cubic_a);
        if (p->exclude_outside && (s < 0 || s >= in)) w[i] = 0;
        sum += w[i];
        idx[i] = clampi(s, in);
    }
    if (p->exclude_outside)
        for (int i = 0; i < 4; i++) w[i] /= sum;
    return 4;
}

static void resize_ref(const si_resize_params *p, int64_t nc, int ih, int iw, int oh, int ow,
                       float sh, float sw, const float *x, double *y) {
    for (int64_t c = 0; c < nc; c++)
        for (int oy = 0; oy < oh; oy++)
            for (int ox = 0; ox < ow; ox++) {
                int yi[4], xi[4];
                double yw[4], xw[4], acc = 0;
                int ny = taps_ref(p, oy, sh, ih, oh, yi, yw);
                int nx = taps_ref(p, ox, sw, iw, ow, xi, xw);
                for (int a = 0; a < ny; a++)
                    for (int b = 0; b < nx; b++)
                        acc += yw[a] * xw[b] * x[(c * ih + yi[a]) * iw + xi[b]];
                y[(c * oh + oy) * ow + ox] = acc;
            }
}

static void test_resize(void) {
    /* ONNX node tests resize_downsample_scales_{nearest,linear,linear_align_corners} on
     * [[1 2 3 4] [5 6 7 8]] with scales 0.6: align_corners there needs length 0.6 * 4 = 2.4 */
    float x8[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y2[2];
    si_resize_params pn = {.mode = SI_RESIZE_NEAREST,
                           .coord = SI_COORD_HALF_PIXEL,
                           .nearest = SI_NEAREST_ROUND_PREFER_FLOOR,
                           .cubic_a = -0.75f};
    si_cpu_resize2d(&pn, 1, 2, 4, 1, 2, 0.6f, 0.6f, x8, y2);
    CHECK(y2[0] == 1.f && y2[1] == 3.f);
    si_resize_params pl = {
        .mode = SI_RESIZE_LINEAR, .coord = SI_COORD_HALF_PIXEL, .cubic_a = -0.75f};
    si_cpu_resize2d(&pl, 1, 2, 4, 1, 2, 0.6f, 0.6f, x8, y2);
    check_arr("resize node test linear", y2, (double[]){2.6666665, 4.333333}, 2, 1e-6, 0);
    pl.coord = SI_COORD_ALIGN_CORNERS;
    si_cpu_resize2d(&pl, 1, 2, 4, 1, 2, 0.6f, 0.6f, x8, y2);
    check_arr("resize node test linear align_corners", y2, (double[]){1, 3.142857}, 2, 1e-6, 0);
    /* resize_downsample_scales_cubic_A_n0p5_exclude_outside: 1..16 (4x4), scales 0.8 */
    float x16[16], y9[9];
    for (int i = 0; i < 16; i++) x16[i] = (float)(i + 1);
    si_resize_params pc = {.mode = SI_RESIZE_CUBIC,
                           .coord = SI_COORD_HALF_PIXEL,
                           .cubic_a = -0.5f,
                           .exclude_outside = 1};
    si_cpu_resize2d(&pc, 1, 4, 4, 3, 3, 0.8f, 0.8f, x16, y9);
    const double c9[9] = {1.3681267, 2.6695013, 4.0133367, 6.5736251, 7.875,
                          9.2188349, 11.948966, 13.250341, 14.594176};
    check_arr("resize node test cubic A -0.5 exclude_outside", y9, c9, 9, 1e-5, 0);

    const float scales[] = {0.5f, 0.6f, 0.75f, 0.8f, 1.f, 1.25f, 1.5f, 2.f, 2.5f, 3.f, 1.f / 3.f};
    const int ns = sizeof scales / sizeof scales[0];
    int cases = 0;
    for (int it = 0; it < 1500; it++) {
        si_resize_params p = {.mode = ri(0, 2), .coord = ri(0, 5), .nearest = ri(0, 3)};
        if (p.coord == SI_COORD_TF_HALF_PIXEL_FOR_NN && p.mode != SI_RESIZE_NEAREST) continue;
        p.cubic_a = ri(0, 1) ? -0.75f : -0.5f;
        p.exclude_outside = p.mode == SI_RESIZE_CUBIC ? ri(0, 1) : 0;
        int ih = ri(1, 9), iw = ri(1, 9);
        float sh = scales[ri(0, ns - 1)], sw = scales[ri(0, ns - 1)];
        int oh = (int)floor(ih * (double)sh), ow = (int)floor(iw * (double)sw);
        if (it < 4) ih = 70, iw = 300, oh = 140, ow = 600, sh = sw = 2.f; /* chunks, threads */
        if (oh == 0 || ow == 0) continue;
        int64_t nc = ri(1, 3);
        float *x = frand(nc * ih * iw), *y = fpoison(nc * oh * ow);
        double *want = dalloc(nc * oh * ow);
        resize_ref(&p, nc, ih, iw, oh, ow, sh, sw, x, want);
        si_cpu_resize2d(&p, nc, ih, iw, oh, ow, sh, sw, x, y);
        char what[128];
        snprintf(what, sizeof what, "resize mode %d coord %d nearest %d A %g excl %d %dx%d->%dx%d",
                 p.mode, p.coord, p.nearest, p.cubic_a, p.exclude_outside, ih, iw, oh, ow);
        check_arr(what, y, want, nc * oh * ow, 1e-5, 1e-5);
        cases++;
        free(x);
        free(y);
        free(want);
    }
    CHECK(cases > 1000);
}

int main(void) {
    test_activations();
    test_conv_fused_act();
    test_avgpool();
    test_softmax_axis();
    test_concat_split();
    test_slice();
    test_transpose();
    test_broadcast();
    test_tile();
    test_binary();
    test_gather();
    test_indexing();
    test_matmul();
    test_pad();
    test_reduce();
    test_resize();
    return test_finish();
}
