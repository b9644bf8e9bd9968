/* The formulas the CPU backend (src/cpu/kernels.c) and the CUDA kernels (cuda/kernels.cu,
 * cuda/dwconv.cu) share: activations, the binary ops, pooling windows, Pad's source index and
 * Resize's coordinates and taps. Inline functions that compile for the host and the device, so that
 * the GPU computes the CPU's formula, not a copy of it that could drift. */
#ifndef SI_KERNEL_MATH_H
#define SI_KERNEL_MATH_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/hd.h"
#include "ops.h"

/* log(1 + exp(x)) as max(x, 0) + log1p(exp(-|x|)): the spec's form overflows to inf above
 * x = 88 and loses every digit of small results to the 1 it adds. NaN stays NaN. */
SI_HD static inline float si_softplus(float v) {
    return (v > 0.f ? v : 0.f) + log1pf(expf(-fabsf(v)));
}

SI_HD static inline float si_hardswish(float v) {
    float t = v * (1.f / 6.f) + 0.5f;
    if (t > 1.f) t = 1.f;
    if (t < 0.f) t = 0.f;
    return v * t;
}

/* The activations an attention node applies to Y (graph.c fuses no other kind into it): the
 * GPU kernels' epilogues take these few, not si_act_eval's every case. */
SI_HD static inline bool si_attention_act(int kind) {
    return kind == SI_ACT_RELU || kind == SI_ACT_HARDSWISH;
}

/* The activations, kind for kind. NaN propagates through every kind but RELU. */
SI_HD static inline float si_act_eval(float v, si_act a) {
    switch (a.kind) {
    case SI_ACT_RELU: return v > 0.f ? v : 0.f;
    case SI_ACT_CLIP: /* max then min, as ONNX defines it: min > max yields max */
        v = v < a.lo ? a.lo : v;
        return v > a.hi ? a.hi : v;
    case SI_ACT_SIGMOID: return 1.f / (1.f + expf(-v));
    case SI_ACT_HARDSIGMOID: {
        float t = a.alpha * v + a.beta;
        if (t > 1.f) t = 1.f;
        if (t < 0.f) t = 0.f;
        return t;
    }
    case SI_ACT_HARDSWISH: return si_hardswish(v);
    /* the product the unfused Sigmoid + Mul computes, so fusing changes no bit */
    case SI_ACT_SILU: return v * (1.f / (1.f + expf(-v)));
    case SI_ACT_LEAKYRELU: return v >= 0.f ? v : a.alpha * v;
    case SI_ACT_ERF: return erff(v);
    case SI_ACT_TANH: return tanhf(v);
    case SI_ACT_SQRT: return sqrtf(v);
    case SI_ACT_RECIPROCAL: return 1.f / v;
    /* 1 + erf(z) as erfc(-z) and 1 + tanh(u) as 2 / (1 + exp(-2u)): the spec's values without
     * its cancellation for negative x, where 1 + erf(z) in float loses every digit below 1e-7 */
    case SI_ACT_GELU: return 0.5f * v * erfcf(v * -0.70710678118654752f);
    /* the products the unfused Mul, Sigmoid and Mul compute, in their order */
    case SI_ACT_SWISH: return v * (1.f / (1.f + expf(-(v * a.alpha))));
    case SI_ACT_GELU_TANH: {
        float u = 0.79788456080286536f * (v + 0.044715f * v * v * v); /* sqrt(2 / pi) */
        return v / (1.f + expf(-2.f * u));
    }
    case SI_ACT_EXP: return expf(v);
    case SI_ACT_LOG: return logf(v);
    case SI_ACT_NEG: return -v;
    case SI_ACT_ABS: return fabsf(v);
    case SI_ACT_SIN: return sinf(v);
    case SI_ACT_COS: return cosf(v);
    case SI_ACT_FLOOR: return floorf(v);
    case SI_ACT_CEIL: return ceilf(v);
    /* rintf rounds halves to even in the default rounding mode, which nothing here changes */
    case SI_ACT_ROUND: return rintf(v);
    case SI_ACT_SIGN: return v > 0.f ? 1.f : v < 0.f ? -1.f : v;
    case SI_ACT_SOFTPLUS: return si_softplus(v);
    case SI_ACT_MISH: return v * tanhf(si_softplus(v));
    case SI_ACT_ISNAN: return v != v ? 1.f : 0.f;
    case SI_ACT_ISINF:
        return (a.alpha != 0.f && v == INFINITY) || (a.beta != 0.f && v == -INFINITY);
    case SI_ACT_NAN_TO: return v != v ? a.alpha : v;
    default: return v;
    }
}

/* A sum-like reduction's term and its finish over cnt values (kernel_math.h's callers keep
 * Max and Min apart: they fold by comparison). */
SI_HD static inline double si_reduce_term(int op, double v) {
    return op == SI_REDUCE_L1                                ? fabs(v)
           : op == SI_REDUCE_L2 || op == SI_REDUCE_SUMSQUARE ? v * v
                                                             : v;
}
SI_HD static inline double si_reduce_final(int op, double acc, double cnt) {
    return op == SI_REDUCE_MEAN ? (cnt > 0 ? acc / cnt : NAN)
           : op == SI_REDUCE_L2 ? sqrt(acc)
                                : acc;
}

/* The binary ops (Add, Sub, Mul, Div, Pow, Min, Max) of one pair of values. */
SI_HD static inline float si_bin_eval(int op, float a, float b) {
    switch (op) {
    case SI_BIN_SUB: return a - b;
    case SI_BIN_MUL: return a * b;
    case SI_BIN_DIV: return a / b;
    case SI_BIN_POW: return powf(a, b);
    /* a + b is the NaN when either is one: fminf and fmaxf would return the other value */
    case SI_BIN_MIN: return a != a || b != b ? a + b : a < b ? a : b;
    case SI_BIN_MAX: return a != a || b != b ? a + b : a > b ? a : b;
    default: return a + b;
    }
}

/* Index v of an extent len (negative from the end), or -1 when outside [-len, len). */
SI_HD static inline int64_t si_index_in(int64_t v, int64_t len) {
    if (v < 0) v += len;
    return v >= 0 && v < len ? v : -1;
}

/* The data offset that element i of GatherElements' or ScatterElements' indices, of value v,
 * addresses; -1 when v is out of range (shape inference refuses such indices; a backend that
 * meets one anyway reads 0 or skips the write, never outside the data). */
SI_HD static inline int64_t si_elements_offset(const si_elements_geom *g, int64_t i, int64_t v) {
    int64_t k = si_index_in(v, g->len), off = 0;
    if (k < 0) return -1;
    for (int d = g->nd - 1; d >= 0; d--) {
        int64_t c = i % g->idims[d];
        i /= g->idims[d];
        off += (d == g->axis ? k : c) * g->xstride[d];
    }
    return off;
}

/* The data offset of GatherND's row t, whose k coordinates are tuple[0..k); -1 when one is out
 * of range (as si_elements_offset). */
SI_HD static inline int64_t si_gathernd_offset(const si_gathernd_geom *g, int64_t t,
                                               const int64_t *tuple) {
    int64_t off = t / g->per_batch * g->batch_stride;
    for (int j = 0; j < g->k; j++) {
        int64_t c = si_index_in(tuple[j], g->dims[j]);
        if (c < 0) return -1;
        off += c * g->strides[j];
    }
    return off;
}

/* The first element of row r (rows of d elements) of the value g describes. */
SI_HD static inline int64_t si_row_start(const si_row_geom *g, int64_t r, int64_t d) {
    if (g->nd == 0) return r * d;
    int64_t o = g->off;
    for (int k = g->nd - 1; k >= 0; k--) {
        o += r % g->dims[k] * g->st[k];
        r /= g->dims[k];
    }
    return o;
}

/* ScatterElements' reduction (si_scatter_reduction) of the data's value a with the update b; Max
 * and Min as the Max and Min ops (NaN wins). */
SI_HD static inline float si_scatter_eval(int red, float a, float b) {
    switch (red) {
    case SI_SCATTER_ADD: return a + b;
    case SI_SCATTER_MUL: return a * b;
    case SI_SCATTER_MAX: return si_bin_eval(SI_BIN_MAX, a, b);
    case SI_SCATTER_MIN: return si_bin_eval(SI_BIN_MIN, a, b);
    default: return b;
    }
}

/* Tile as a broadcast: dim d of x (x_dims[d] long, y_dims[d] = r * x_dims[d]) becomes the dims
 * (r, x_dims[d]) of y, where x has (1, x_dims[d]), so the broadcast kernels that Expand uses copy
 * it. Fills the broadcast's dims bx (x's) and by (y's), and for each the dim src[k] it comes from
 * and mult[k], x_dims[d] for the repeat part (y's stride there is x_dims[d] times dim d's) and 1
 * otherwise; a dim repeated once or of length 1 needs no split. Returns the broadcast's rank, or
 * -1 when it exceeds SI_TILE_MAXD (shape inference refuses such a Tile). */
#define SI_TILE_MAXD 8 /* the broadcast kernels' rank: the CPU's MAXD, the GPU's SI_TV_MAXD */
SI_HD static inline int si_tile_split(int nd, const int64_t *x_dims, const int64_t *y_dims,
                                      int64_t *bx, int64_t *by, int *src, int64_t *mult) {
    int k = 0;
    for (int d = 0; d < nd; d++) {
        int64_t xd = x_dims[d], r = xd > 0 ? y_dims[d] / xd : 1;
        int split = r > 1 && xd > 1;
        if (k + 1 + split > SI_TILE_MAXD) return -1;
        if (split) {
            bx[k] = 1, by[k] = r, src[k] = d, mult[k] = xd;
            k++;
        }
        bx[k] = xd, by[k] = split ? xd : y_dims[d], src[k] = d, mult[k] = 1;
        k++;
    }
    return k;
}

/* The taps k in [0, kn) with lo <= start + k * d < hi, as [*k0, *k1). */
SI_HD static inline void si_tap_range(int start, int kn, int d, int lo, int hi, int *k0, int *k1) {
    int a = start >= lo ? 0 : (lo - start + d - 1) / d;
    int b = start >= hi ? 0 : (hi - start + d - 1) / d;
    if (b > kn) b = kn;
    if (a > b) a = b;
    *k0 = a;
    *k1 = b;
}

/* Where padded index s (relative to the kept, uncropped part of length len) reads from, or -1
 * for the constant. Reflect repeats with period 2 (len - 1), as numpy's does for wide pads. */
SI_HD static inline int64_t si_pad_src(int mode, int64_t s, int64_t len) {
    if (s >= 0 && s < len) return s;
    if (len <= 0 || mode == SI_PAD_CONSTANT) return -1;
    switch (mode) {
    case SI_PAD_EDGE: return s < 0 ? 0 : len - 1;
    case SI_PAD_WRAP: return (s % len + len) % len;
    default: { /* SI_PAD_REFLECT */
        if (len == 1) return 0;
        int64_t period = 2 * (len - 1), r = (s % period + period) % period;
        return r < len ? r : period - r;
    }
    }
}

/* Resize's input coordinate of output o (ONNX's coordinate_transformation_mode), in double.
 * length_resized in the spec's formulas is read as scale * input (the reference's
 * output_width, a fraction when scales are given), as ONNX's align_corners node tests require;
 * onnxruntime uses the integer output size there and fails them. pytorch_half_pixel gives the
 * spec's 0 for a length <= 1 (the reference's -0.5 differs from it for cubic only). */
SI_HD static inline double si_resize_coord(int coord, int o, double scale, int in, int out) {
    double xo = o, lr = scale * in;
    switch (coord) {
    case SI_COORD_ASYMMETRIC: return xo / scale;
    case SI_COORD_ALIGN_CORNERS: return lr == 1.0 ? 0.0 : xo * (in - 1) / (lr - 1.0);
    case SI_COORD_PYTORCH_HALF_PIXEL: return lr > 1.0 ? (xo + 0.5) / scale - 0.5 : 0.0;
    case SI_COORD_TF_HALF_PIXEL_FOR_NN: return (xo + 0.5) / scale;
    case SI_COORD_HALF_PIXEL_SYMMETRIC: {
        double off = in / 2.0 * (1.0 - out / lr);
        return off + (xo + 0.5) / scale - 0.5;
    }
    default: return (xo + 0.5) / scale - 0.5; /* SI_COORD_HALF_PIXEL */
    }
}

SI_HD static inline int si_resize_clamp(double v, int in) {
    if (!(v >= 0.0)) return 0; /* NaN too */
    return v > in - 1 ? in - 1 : (int)v;
}

/* The input indices and weights of output o along one axis: 1 (nearest), 2 (linear) or 4
 * (cubic) taps into idx[] and w[]; returns their number. */
SI_HD static inline int si_resize_taps(const si_resize_params *p, int o, double scale, int in,
                                       int out, int *idx, float *w) {
    double xo = si_resize_coord(p->coord, o, scale, in, out), f = floor(xo), t = xo - f;
    if (p->mode == SI_RESIZE_NEAREST) {
        double r;
        switch (p->nearest) {
        case SI_NEAREST_ROUND_PREFER_CEIL: r = t >= 0.5 ? f + 1.0 : f; break;
        case SI_NEAREST_FLOOR: r = f; break;
        case SI_NEAREST_CEIL: r = t > 0.0 ? f + 1.0 : f; break;
        default: r = t > 0.5 ? f + 1.0 : f; break;
        }
        idx[0] = si_resize_clamp(r, in);
        w[0] = 1.f;
        return 1;
    }
    if (p->mode == SI_RESIZE_LINEAR) {
        idx[0] = si_resize_clamp(f, in);
        idx[1] = si_resize_clamp(f + 1.0, in);
        w[0] = (float)(1.0 - t);
        w[1] = (float)t;
        return 2;
    }
    double A = p->cubic_a, u = 1.0 - t, c[4], sum = 0.0;
    c[0] = ((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A;
    c[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
    c[2] = ((A + 2) * u - (A + 3)) * u * u + 1;
    c[3] = ((A * (u + 1) - 5 * A) * (u + 1) + 8 * A) * (u + 1) - 4 * A;
    for (int i = 0; i < 4; i++) {
        double s = f - 1.0 + i;
        if (p->exclude_outside && (s < 0.0 || s > in - 1)) c[i] = 0.0;
        sum += c[i];
        idx[i] = si_resize_clamp(s, in);
    }
    if (p->exclude_outside && sum != 0.0)
        for (int i = 0; i < 4; i++) c[i] /= sum;
    for (int i = 0; i < 4; i++) w[i] = (float)c[i];
    return 4;
}

/* Rotary embedding (rotary.c's SI_OP_ROTARY): the partner of dim d of D, adjacent (d ^ 1) or D/2
 * away (half), and whether d comes first in its pair (its partner enters negated). */
SI_HD static inline int64_t si_rotary_partner(int64_t d, int64_t D, bool half, bool *first) {
    *first = half ? d < D / 2 : d % 2 == 0;
    return half ? (*first ? d + D / 2 : d - D / 2) : d ^ 1;
}
/* y = x c + rot(x) s of one element: xd its value, xp its partner's */
SI_HD static inline float si_rotary(float xd, float xp, float c, float s, bool first) {
    return xd * c + (first ? -xp : xp) * s;
}

#endif
