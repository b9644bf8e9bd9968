/* The op vocabulary: activations, convolution and pooling geometry, elementwise, Pad, Reduce and
 * Resize modes. The graph describes its nodes with these types and every backend reads them, so
 * they live in the engine rather than in one backend's kernel header. */
#ifndef SI_OPS_H
#define SI_OPS_H

#include <stdint.h>

/* An activation, standalone or fused into the op that precedes it. */
typedef enum {
    SI_ACT_NONE = 0,
    SI_ACT_RELU,
    SI_ACT_CLIP,        /* min(max(x, lo), hi) */
    SI_ACT_SIGMOID,     /* 1 / (1 + exp(-x)) */
    SI_ACT_HARDSIGMOID, /* max(0, min(1, alpha * x + beta)) */
    SI_ACT_HARDSWISH,   /* x * max(0, min(1, x / 6 + 1/2)) */
    SI_ACT_SILU,        /* x * sigmoid(x) (exported as Sigmoid + Mul) */
    SI_ACT_LEAKYRELU,   /* x >= 0 ? x : alpha * x */
    SI_ACT_ERF,
    SI_ACT_TANH,
    SI_ACT_SQRT,
    SI_ACT_RECIPROCAL, /* 1 / x */
    SI_ACT_GELU,       /* x / 2 * (1 + erf(x / sqrt(2))): Gelu, approximate = "none" */
    SI_ACT_GELU_TANH,  /* x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))): "tanh" */
    SI_ACT_SWISH,      /* x * sigmoid(alpha * x): CLIP's QuickGELU (alpha 1.702), exported as
                          Mul(x, Sigmoid(Mul(x, alpha))) */
    SI_ACT_EXP,
    SI_ACT_LOG,
    SI_ACT_NEG,
    SI_ACT_ABS,
    SI_ACT_SIN,
    SI_ACT_COS,
    SI_ACT_FLOOR,
    SI_ACT_CEIL,
    SI_ACT_ROUND,    /* to nearest, halves to even (ONNX Round) */
    SI_ACT_SIGN,     /* -1, 0 or 1 (NaN stays NaN) */
    SI_ACT_SOFTPLUS, /* log(1 + exp(x)) */
    SI_ACT_MISH,     /* x * tanh(softplus(x)) */
    SI_ACT_ISNAN,    /* 1 where x is NaN, else 0 (IsNaN; its bool as float) */
    SI_ACT_ISINF,    /* 1 where x is +inf (if alpha) or -inf (if beta), else 0 (IsInf) */
    SI_ACT_NAN_TO    /* x, or alpha where x is NaN: Where(IsNaN(x), alpha, x) */
} si_act_kind;
typedef struct {
    int kind;
    float lo, hi;      /* SI_ACT_CLIP bounds */
    float alpha, beta; /* SI_ACT_HARDSIGMOID, SI_ACT_LEAKYRELU, SI_ACT_ISINF, SI_ACT_NAN_TO */
} si_act;

/* The activation of one value (the same formula every backend must implement). */
float si_act_apply(float v, si_act a);

typedef struct {
    int n, c, h, w; /* input (N, C, H, W) */
    int m, kh, kw;  /* weight (M, C/group, kh, kw) */
    int group;
    int sh, sw, dh, dw;
    int pt, pl, pb, pr; /* pads: top, left, bottom, right */
    int oh, ow;         /* output (N, M, oh, ow) */
} si_conv_shape;

typedef struct {
    int n, c, h, w;
    int kh, kw, sh, sw, dh, dw;
    int pt, pl, pb, pr;
    int oh, ow;
} si_pool_shape;

/* Elementwise with numpy broadcasting. */
typedef enum {
    SI_BIN_ADD = 0,
    SI_BIN_SUB,
    SI_BIN_MUL,
    SI_BIN_DIV,
    SI_BIN_POW, /* powf(a, b) */
    SI_BIN_MIN, /* Min and Max of two inputs: NaN if either is NaN, as numpy's minimum */
    SI_BIN_MAX
} si_binop;

/* The indexing ops' geometry, filled at shape inference (the indices checked against the data
 * there) and read by every backend through kernel_math.h's si_elements_offset and
 * si_gathernd_offset. SI_INDEX_MAXD is the graph's SI_MAX_DIMS (graph.c checks). */
#define SI_INDEX_MAXD 8

/* Rows of a value's last axis (contiguous), as RowNorm and Rotary read them (kernel_math.h's
 * si_row_start): row-major rows (nd 0), or a strided view's, its leading nd logical dims
 * (innermost last) at strides st, from element off: the head split of a packed projection read
 * in place. */
typedef struct {
    int nd;
    int64_t dims[SI_INDEX_MAXD], st[SI_INDEX_MAXD], off;
} si_row_geom;

/* GatherElements and ScatterElements: element i of the index tensor (row-major over idims, the
 * rank of the data) addresses the data at its own coordinates but along axis, where the index's
 * value (in [-len, len)) is the coordinate. No other dim of idims exceeds the data's. */
typedef struct {
    int nd, axis;
    int64_t len;                    /* the data's extent along axis */
    int64_t idims[SI_INDEX_MAXD];   /* indices' shape (updates', the gathered output's) */
    int64_t xstride[SI_INDEX_MAXD]; /* the data's row-major strides */
} si_elements_geom;

/* GatherND: rows rows of slice elements each; row t reads batch t / per_batch of the data
 * (batch_stride apart) at the k coordinates indices[t * k ...], each in [-dims[j], dims[j]). */
typedef struct {
    int k;
    int64_t rows, per_batch, slice, batch_stride;
    int64_t dims[SI_INDEX_MAXD], strides[SI_INDEX_MAXD];
} si_gathernd_geom;

/* ScatterElements' (and ScatterND's) reduction of the data's value a with the update b. */
typedef enum {
    SI_SCATTER_NONE = 0, /* b: the last update of an element wins */
    SI_SCATTER_ADD,
    SI_SCATTER_MUL,
    SI_SCATTER_MAX,
    SI_SCATTER_MIN
} si_scatter_reduction;

typedef enum { SI_PAD_CONSTANT = 0, SI_PAD_REFLECT, SI_PAD_EDGE, SI_PAD_WRAP } si_pad_mode;

/* The sum-like reductions add si_reduce_term(x) and finish with si_reduce_final (kernel_math.h):
 * L1 sums |x|, L2 and SumSquare sum x^2 (L2 then takes the square root). */
typedef enum {
    SI_REDUCE_MEAN = 0,
    SI_REDUCE_SUM,
    SI_REDUCE_MAX,
    SI_REDUCE_MIN,
    SI_REDUCE_L1,
    SI_REDUCE_L2,
    SI_REDUCE_SUMSQUARE
} si_reduce_op;

typedef enum { SI_RESIZE_NEAREST = 0, SI_RESIZE_LINEAR, SI_RESIZE_CUBIC } si_resize_mode;
typedef enum {
    SI_COORD_HALF_PIXEL = 0,
    SI_COORD_ASYMMETRIC,
    SI_COORD_ALIGN_CORNERS,
    SI_COORD_PYTORCH_HALF_PIXEL,
    SI_COORD_TF_HALF_PIXEL_FOR_NN,
    SI_COORD_HALF_PIXEL_SYMMETRIC
} si_coord_mode;
typedef enum {
    SI_NEAREST_ROUND_PREFER_FLOOR = 0,
    SI_NEAREST_ROUND_PREFER_CEIL,
    SI_NEAREST_FLOOR,
    SI_NEAREST_CEIL
} si_nearest_mode;
/* Resize as ONNX Resize-11..19 defines it. */
typedef struct {
    int mode, coord, nearest;
    float cubic_a; /* cubic_coeff_a, default -0.75 */
    int exclude_outside;
} si_resize_params;

#endif
