/* Host evaluation of shape arithmetic: the Shape -> Gather -> Unsqueeze -> Concat -> Reshape
 * chains and constant subgraphs that exporters emit. Values are small (a handful of elements),
 * so clarity wins over speed here. Each node is evaluated once at load when its inputs are
 * constants (constant folding), or whenever the batch size changes when it depends on a shape.
 * One row per ONNX op type: its attribute converter and its evaluator. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"
#include "kernel_math.h"

/* gn->host_op: the row of the op in host_rows. */
enum {
    H_CONSTANT = 0,
    H_SHAPE,
    H_SIZE,
    H_GATHER,
    H_UNSQUEEZE,
    H_SQUEEZE,
    H_CONCAT,
    H_CAST,
    H_CONSTANT_OF_SHAPE,
    H_EXPAND,
    H_RANGE,
    H_EQUAL,
    H_LESS,
    H_GREATER,
    H_NOT,
    H_WHERE,
    H_SLICE,
    H_RESHAPE,
    H_FLATTEN,
    H_IDENTITY,
    H_ADD,
    H_SUB,
    H_MUL,
    H_DIV,
    H_MIN,
    H_MAX,
    H_MOD,
    H_NEG,
    H_ABS,
    H_FLOOR,
    H_CEIL,
    H_SQRT,
    H_TRANSPOSE,
    H_SCATTERND,
    H_EXP,
    H_LOG,
    H_SIN,
    H_COS,
    H_ROUND,
    H_SIGN,
    H_SOFTPLUS,
    H_MISH,
    H_SIGMOID,
    H_HARDSIGMOID,
    H_HARDSWISH,
    H_CLIP,
    H_GATHER_ND,
    H_GATHER_ELEMENTS,
    H_SCATTER_ELEMENTS,
    H_GREATER_EQ,
    H_LESS_EQ,
    H_AND,
    H_OR,
    H_XOR,
    H_ISNAN,
    H_ISINF,
    H_POW,
    H_RELU,
    H_MATMUL,
    H_TILE,
    H_EINSUM,
    H_COUNT
};

/* double -> float saturating to +-inf: out-of-range conversions are undefined in C */
static float d2f(double v) {
    return v > FLT_MAX ? INFINITY : v < -FLT_MAX ? -INFINITY : (float)v;
}

int64_t si_value_numel(const si_value *v) {
    return si_shape_numel(&v->shape);
}

int64_t si_value_i64(const si_value *v, int64_t i) {
    return v->dtype == SI_DT_INT64 ? ((const int64_t *)v->data)[i]
                                   : si_f2i_sat(((const float *)v->data)[i]);
}

double si_value_f64(const si_value *v, int64_t i) {
    return v->dtype == SI_DT_INT64 ? (double)((const int64_t *)v->data)[i]
                                   : (double)((const float *)v->data)[i];
}

/* Constant's value in any of its attribute forms, as a tensor. */
static bool constant_value(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    si_tensor *t = si_xcalloc(1, sizeof *t);
    const si_attr *a;
    if ((a = si_node_attr(n, "value")) && a->t) {
        *t = *a->t;
        t->name = NULL;
        size_t bytes = (size_t)t->numel * si_dtype_size(t->dtype);
        t->data = si_xmalloc(bytes ? bytes : 1);
        memcpy(t->data, a->t->data, bytes);
    } else if ((a = si_node_attr(n, "value_float"))) {
        *t = (si_tensor){.dtype = SI_DT_FLOAT, .ndim = 0, .numel = 1};
        t->data = si_xmalloc(4);
        memcpy(t->data, &a->f, 4);
    } else if ((a = si_node_attr(n, "value_int"))) {
        *t = (si_tensor){.dtype = SI_DT_INT64, .ndim = 0, .numel = 1};
        t->data = si_xmalloc(8);
        memcpy(t->data, &a->i, 8);
    } else if (((a = si_node_attr(n, "value_floats")) && a->type == SI_ATTR_FLOATS) ||
               (a = si_node_attr_ints(n, "value_ints"))) {
        bool f = a->type == SI_ATTR_FLOATS;
        *t = (si_tensor){.dtype = f ? SI_DT_FLOAT : SI_DT_INT64, .ndim = 1, .numel = a->n};
        t->dims[0] = a->n;
        t->data = si_xmalloc((size_t)(a->n ? a->n : 1) * (f ? 4 : 8));
        memcpy(t->data, f ? (void *)a->floats : (void *)a->ints, (size_t)a->n * (f ? 4 : 8));
    } else {
        free(t);
        si_b_unsupported(b, n, "Constant without a supported value attribute");
        return false;
    }
    gn->host_t = t;
    return true;
}

/* --- conversion: attributes into the node ------------------------------------------------- */
static bool conv_shape(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    (void)b;
    gn->host_i[0] = si_attr_int(n, "start", 0);
    gn->host_i[1] = si_node_attr(n, "end") ? si_attr_int(n, "end", 0) : INT64_MAX;
    return true;
}

static bool conv_axis0(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    (void)b;
    gn->host_i[0] = si_attr_int(n, "axis", 0);
    return true;
}

static bool conv_flatten(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    (void)b;
    gn->host_i[0] = si_attr_int(n, "axis", 1);
    return true;
}

static bool conv_cast(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    (void)b;
    gn->host_i[0] = si_attr_int(n, "to", SI_DT_FLOAT);
    return true;
}

static bool conv_reshape(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    (void)b;
    gn->host_i[0] = si_attr_int(n, "allowzero", 0);
    return true;
}

/* ScatterND's reduction: host_i[0], an si_scatter_reduction. */
static bool conv_scatternd(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    int red;
    if (!si_scatter_reduction_of(b, n, &red)) return false;
    gn->host_i[0] = red;
    return true;
}

/* ScatterElements: host_i[0] the axis, host_i[1] the reduction. */
static bool conv_scatter_elements(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    int red;
    if (!si_scatter_reduction_of(b, n, &red)) return false;
    gn->host_i[0] = si_attr_int(n, "axis", 0);
    gn->host_i[1] = red;
    return true;
}

static bool conv_batch_dims(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    (void)b;
    gn->host_i[0] = si_attr_int(n, "batch_dims", 0);
    return true;
}

/* Tile-1's tiles and axis inputs (opset 1 to 5) are not Tile-6's repeats. */
static bool conv_tile(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    (void)gn;
    if (b->m->opset >= 6) return true;
    si_b_unsupported(b, n, "Tile before opset 6 (tiles and axis inputs) is not supported");
    return false;
}

static bool conv_einsum(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    const si_attr *a = si_node_attr(n, "equation");
    if (!a || !a->s) {
        si_b_unsupported(b, n, "the equation attribute is missing");
        return false;
    }
    gn->equation = si_xstrdup(a->s);
    return true;
}

/* HardSigmoid's alpha and beta, kept in gn->act as the device op keeps them. */
static bool conv_hardsigmoid(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    (void)b;
    gn->act.alpha = si_attr_float(n, "alpha", 0.2f);
    gn->act.beta = si_attr_float(n, "beta", 0.5f);
    return true;
}

/* Clip before opset 11 has its bounds as attributes (host_i[0] = 1, the bounds in gn->act);
 * from 11 on they are inputs 1 and 2, either optional. */
static bool conv_clip(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    gn->host_i[0] = b->m->opset < 11;
    gn->act.lo = si_attr_float(n, "min", -FLT_MAX);
    gn->act.hi = si_attr_float(n, "max", FLT_MAX);
    return true;
}

static bool conv_mod(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    (void)b;
    gn->host_i[0] = si_attr_int(n, "fmod", 0);
    return true;
}

/* IsInf's signs, as the activation's: act.alpha +inf, act.beta -inf. */
static bool conv_isinf(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    (void)b;
    gn->act.alpha = si_attr_int(n, "detect_positive", 1) != 0;
    gn->act.beta = si_attr_int(n, "detect_negative", 1) != 0;
    return true;
}

/* ConstantOfShape's fill value: host_i[0] its dtype, host_f or host_i[1] the value. */
static bool conv_constant_of_shape(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    (void)b;
    const si_attr *a = si_node_attr(n, "value");
    gn->host_f = 0;
    gn->host_i[0] = SI_DT_FLOAT;
    if (!a || !a->t || a->t->numel != 1) return true;
    int dt = a->t->dtype;
    if (dt == SI_DT_FLOAT)
        gn->host_f = *(const float *)a->t->data;
    else if (dt == SI_DT_DOUBLE)
        gn->host_f = d2f(*(const double *)a->t->data);
    else if (dt == SI_DT_INT64)
        gn->host_i[1] = *(const int64_t *)a->t->data;
    else if (dt == SI_DT_INT32)
        gn->host_i[1] = *(const int32_t *)a->t->data;
    else
        gn->host_i[1] = *(const uint8_t *)a->t->data;
    gn->host_i[0] = dt == SI_DT_FLOAT || dt == SI_DT_DOUBLE ? SI_DT_FLOAT : SI_DT_INT64;
    return true;
}

/* The axes (Squeeze, Unsqueeze, Slice) or perm (Transpose) attribute; n_attr_ints -1 if none. */
static bool conv_axes_attr(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    const char *name = gn->host_op == H_TRANSPOSE ? "perm" : "axes";
    const si_attr *a = si_node_attr_ints(n, name);
    gn->n_attr_ints = -1;
    if (!a) return true;
    if (a->n > 2 * SI_MAX_DIMS) {
        si_b_unsupported(b, n, "attribute %s is too long", name);
        return false;
    }
    gn->n_attr_ints = a->n;
    memcpy(gn->attr_ints, a->ints, sizeof(int64_t) * (size_t)a->n);
    return true;
}

/* Slice: before opset 10 starts and ends are attributes, kept in starts and steps. */
static bool conv_slice(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    if (!conv_axes_attr(b, n, gn)) return false;
    if (b->m->opset >= 10) return true;
    const si_attr *s = si_node_attr_ints(n, "starts"), *e = si_node_attr_ints(n, "ends");
    if (!s || !e || s->n != e->n || s->n > SI_MAX_DIMS) {
        si_b_unsupported(b, n, "starts/ends attributes are missing or inconsistent");
        return false;
    }
    gn->host_i[0] = s->n;
    memcpy(gn->starts, s->ints, sizeof(int64_t) * (size_t)s->n);
    memcpy(gn->steps, e->ints, sizeof(int64_t) * (size_t)s->n); /* ends */
    gn->host_i[1] = 1;                                          /* attribute form */
    return true;
}

/* --- evaluation --------------------------------------------------------------------------------
 */
static const si_value *hin(const si_graph *g, const si_gnode *n, int k) {
    if (!(n->host_present & (1u << k))) return NULL;
    int pos = __builtin_popcount(n->host_present & ((1u << k) - 1));
    return &g->values[n->in[pos]];
}

/* Host tensors are shapes and small constants; a model asking for more (an Expand or
 * ConstantOfShape to a huge shape) is refused instead of exhausting memory. */
#define HOST_MAX_ELEMS (1 << 24)

/* (Re)allocates the output's data for its shape and dtype; NULL when over the cap. */
static void *alloc_out(si_value *y) {
    free(y->data);
    y->data = NULL;
    int64_t n = si_shape_numel(&y->shape);
    if (n < 0 || n > HOST_MAX_ELEMS) return NULL;
    y->data = si_xcalloc((size_t)(n ? n : 1), y->dtype == SI_DT_INT64 ? 8 : 4);
    return y->data;
}

#define ALLOC_OR_FAIL(y)                                                                           \
    do {                                                                                           \
        if (!alloc_out(y))                                                                         \
            return si_node_error(g, n, SI_ERR_UNSUPPORTED,                                         \
                                 "a shape-arithmetic result of %lld elements is too large",        \
                                 (long long)si_shape_numel(&(y)->shape));                          \
    } while (0)

static void put(si_value *y, int64_t i, double v) {
    if (y->dtype == SI_DT_INT64)
        ((int64_t *)y->data)[i] = si_f2i_sat(v);
    else
        ((float *)y->data)[i] = d2f(v);
}

/* Copies element i of x into element j of y, keeping int64 exact. */
static void copy_elem(si_value *y, int64_t j, const si_value *x, int64_t i) {
    if (y->dtype == SI_DT_INT64)
        ((int64_t *)y->data)[j] = si_value_i64(x, i);
    else
        ((float *)y->data)[j] = (float)si_value_f64(x, i);
}

/* Broadcast index: offset into a tensor of shape s for flat index i of shape y (right-aligned). */
static int64_t bcast_offset(const si_shape *s, const si_shape *y, int64_t i) {
    int64_t off = 0, stride = 1;
    for (int d = y->ndim - 1, e = s->ndim - 1; d >= 0; d--, e--) {
        int64_t idx = i % y->dims[d];
        i /= y->dims[d];
        if (e >= 0) {
            if (s->dims[e] != 1) off += idx * stride;
            stride *= s->dims[e];
        }
    }
    return off;
}

static bool bcast_shape(const si_shape *a, const si_shape *b, si_shape *y) {
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    y->ndim = nd;
    for (int d = 0; d < nd; d++) {
        int64_t da = d - (nd - a->ndim) >= 0 ? a->dims[d - (nd - a->ndim)] : 1;
        int64_t db = d - (nd - b->ndim) >= 0 ? b->dims[d - (nd - b->ndim)] : 1;
        if (da != db && da != 1 && db != 1) return false;
        y->dims[d] = da == 1 ? db : da;
    }
    return true;
}

static int norm(int64_t a, int nd) {
    return (int)(a < 0 ? a + nd : a);
}

static si_status eval_slice(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    int64_t st[SI_MAX_DIMS], en[SI_MAX_DIMS], ax[SI_MAX_DIMS], sp[SI_MAX_DIMS];
    int k;
    if (n->host_i[1]) {
        k = (int)n->host_i[0];
        for (int i = 0; i < k; i++) {
            st[i] = n->starts[i];
            en[i] = n->steps[i];
            ax[i] = n->n_attr_ints > 0 ? n->attr_ints[i] : i;
            sp[i] = 1;
        }
    } else {
        const si_value *sv = hin(g, n, 1), *ev = hin(g, n, 2), *av = hin(g, n, 3),
                       *tv = hin(g, n, 4);
        if (!sv || !ev) return si_node_error(g, n, SI_ERR_FORMAT, "starts and ends are required");
        k = (int)si_value_numel(sv);
        if (k > SI_MAX_DIMS || si_value_numel(ev) != k || (av && si_value_numel(av) != k) ||
            (tv && si_value_numel(tv) != k))
            return si_node_error(g, n, SI_ERR_FORMAT, "inconsistent slice parameters");
        for (int i = 0; i < k; i++) {
            st[i] = si_value_i64(sv, i);
            en[i] = si_value_i64(ev, i);
            ax[i] = av ? si_value_i64(av, i) : i;
            sp[i] = tv ? si_value_i64(tv, i) : 1;
        }
    }
    int nd = x->shape.ndim;
    int64_t start[SI_MAX_DIMS], step[SI_MAX_DIMS];
    y->shape = x->shape;
    for (int d = 0; d < nd; d++) start[d] = 0, step[d] = 1;
    for (int i = 0; i < k; i++) {
        int a = norm(ax[i], nd);
        if (a < 0 || a >= nd || sp[i] == 0)
            return si_node_error(g, n, SI_ERR_FORMAT, "invalid slice axis or step");
        int64_t dim = x->shape.dims[a], s = st[i], e = en[i];
        if (s < 0) s += dim;
        if (e < 0) e += dim;
        if (sp[i] > 0) {
            s = s < 0 ? 0 : s > dim ? dim : s;
            e = e < 0 ? 0 : e > dim ? dim : e;
        } else {
            s = s < 0 ? -1 : s > dim - 1 ? dim - 1 : s;
            e = e < -1 ? -1 : e > dim - 1 ? dim - 1 : e;
        }
        int64_t len = sp[i] > 0 ? (e - s + sp[i] - 1) / sp[i] : (s - e - sp[i] - 1) / -sp[i];
        y->shape.dims[a] = len > 0 ? len : 0;
        start[a] = s;
        step[a] = sp[i];
    }
    y->dtype = x->dtype; /* else a Slice of int64 shape arithmetic came out float */
    ALLOC_OR_FAIL(y);
    int64_t total = si_shape_numel(&y->shape);
    for (int64_t i = 0; i < total; i++) {
        int64_t rem = i, off = 0, stride = 1;
        for (int d = nd - 1; d >= 0; d--) {
            int64_t idx = rem % y->shape.dims[d];
            rem /= y->shape.dims[d];
            off += (start[d] + idx * step[d]) * stride;
            stride *= x->shape.dims[d];
        }
        copy_elem(y, i, x, off);
    }
    return SI_OK;
}

static si_status eval_constant(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    (void)x;
    si_tensor *t = n->host_t;
    y->dtype = t->dtype == SI_DT_FLOAT || t->dtype == SI_DT_DOUBLE || t->dtype == SI_DT_FLOAT16
                   ? SI_DT_FLOAT
                   : SI_DT_INT64;
    y->shape.ndim = t->ndim;
    memcpy(y->shape.dims, t->dims, sizeof(int64_t) * (size_t)t->ndim);
    ALLOC_OR_FAIL(y);
    for (int64_t i = 0; i < t->numel; i++) {
        double v;
        switch (t->dtype) {
        case SI_DT_FLOAT: v = ((const float *)t->data)[i]; break;
        case SI_DT_DOUBLE: v = ((const double *)t->data)[i]; break;
        case SI_DT_INT64: ((int64_t *)y->data)[i] = ((const int64_t *)t->data)[i]; continue;
        case SI_DT_INT32: v = ((const int32_t *)t->data)[i]; break;
        case SI_DT_INT8: v = ((const int8_t *)t->data)[i]; break;
        case SI_DT_UINT8:
        case SI_DT_BOOL: v = ((const uint8_t *)t->data)[i]; break;
        default:
            return si_node_error(g, n, SI_ERR_UNSUPPORTED, "constant of type %s",
                                 si_dtype_name(t->dtype));
        }
        put(y, i, v);
    }
    return SI_OK;
}

static si_status eval_shape(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    int nd = x->shape.ndim;
    int64_t s = n->host_i[0], e = n->host_i[1];
    if (s < 0) s += nd;
    if (e < 0) e += nd;
    s = s < 0 ? 0 : s > nd ? nd : s;
    e = e < 0 ? 0 : e > nd ? nd : e;
    y->dtype = SI_DT_INT64;
    y->shape = (si_shape){.ndim = 1, .dims = {e > s ? e - s : 0}};
    ALLOC_OR_FAIL(y);
    int64_t *d = y->data;
    for (int64_t i = s; i < e; i++) d[i - s] = x->shape.dims[i];
    return SI_OK;
}

static si_status eval_size(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    y->dtype = SI_DT_INT64;
    y->shape.ndim = 0;
    ALLOC_OR_FAIL(y);
    *(int64_t *)y->data = si_shape_numel(&x->shape);
    return SI_OK;
}

static si_status eval_identity(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    y->dtype = x->dtype;
    y->shape = x->shape;
    ALLOC_OR_FAIL(y);
    for (int64_t i = 0; i < si_value_numel(x); i++) copy_elem(y, i, x, i);
    return SI_OK;
}

static si_status eval_cast(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    int to = (int)n->host_i[0];
    y->dtype = (to == SI_DT_FLOAT || to == SI_DT_DOUBLE || to == SI_DT_FLOAT16) ? SI_DT_FLOAT
                                                                                : SI_DT_INT64;
    y->shape = x->shape;
    ALLOC_OR_FAIL(y);
    for (int64_t i = 0; i < si_value_numel(x); i++) {
        double v = si_value_f64(x, i);
        if (to == SI_DT_BOOL) v = v != 0;
        if (y->dtype == SI_DT_INT64 && x->dtype == SI_DT_INT64)
            ((int64_t *)y->data)[i] = si_value_i64(x, i);
        else
            put(y, i, y->dtype == SI_DT_INT64 ? trunc(v) : v);
    }
    return SI_OK;
}

static si_status eval_gather(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    const si_value *x1 = hin(g, n, 1);
    if (!x1) return si_node_error(g, n, SI_ERR_FORMAT, "indices missing");
    int nd = x->shape.ndim, a = norm(n->host_i[0], nd);
    if (a < 0 || a >= nd || nd - 1 + x1->shape.ndim > SI_MAX_DIMS)
        return si_node_error(g, n, SI_ERR_FORMAT, "invalid axis");
    int64_t outer = 1, inner = 1, len = x->shape.dims[a], ni = si_value_numel(x1);
    for (int d = 0; d < a; d++) outer = si_mul_sat(outer, x->shape.dims[d]);
    for (int d = a + 1; d < nd; d++) inner *= x->shape.dims[d];
    y->dtype = x->dtype;
    y->shape.ndim = 0;
    for (int d = 0; d < a; d++) y->shape.dims[y->shape.ndim++] = x->shape.dims[d];
    for (int d = 0; d < x1->shape.ndim; d++) y->shape.dims[y->shape.ndim++] = x1->shape.dims[d];
    for (int d = a + 1; d < nd; d++) y->shape.dims[y->shape.ndim++] = x->shape.dims[d];
    ALLOC_OR_FAIL(y);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < ni; j++) {
            int64_t k = si_value_i64(x1, j);
            if (k < 0) k += len;
            if (k < 0 || k >= len)
                return si_node_error(g, n, SI_ERR_FORMAT, "index %lld out of range",
                                     (long long)si_value_i64(x1, j));
            for (int64_t i = 0; i < inner; i++)
                copy_elem(y, (o * ni + j) * inner + i, x, (o * len + k) * inner + i);
        }
    return SI_OK;
}

/* Squeeze/Unsqueeze axes from input 1 or the attribute; -1 when neither gives any. */
static si_status squeeze_axes(si_graph *g, si_gnode *n, int64_t *axes, int *naxes) {
    const si_value *x1 = hin(g, n, 1);
    if (x1) {
        *naxes = (int)si_value_numel(x1);
        if (*naxes > 2 * SI_MAX_DIMS) return si_node_error(g, n, SI_ERR_FORMAT, "too many axes");
        for (int i = 0; i < *naxes; i++) axes[i] = si_value_i64(x1, i);
    } else if (n->n_attr_ints >= 0) {
        *naxes = n->n_attr_ints;
        memcpy(axes, n->attr_ints, sizeof(int64_t) * (size_t)*naxes);
    } else {
        *naxes = -1;
    }
    return SI_OK;
}

static si_status eval_unsqueeze(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    int64_t axes[2 * SI_MAX_DIMS];
    int naxes;
    si_status st = squeeze_axes(g, n, axes, &naxes);
    if (st != SI_OK) return st;
    y->dtype = x->dtype;
    int ynd = x->shape.ndim + naxes;
    if (naxes < 1 || ynd > SI_MAX_DIMS) return si_node_error(g, n, SI_ERR_FORMAT, "invalid axes");
    uint8_t ins[SI_MAX_DIMS] = {0};
    for (int i = 0; i < naxes; i++) {
        int a = norm(axes[i], ynd);
        if (a < 0 || a >= ynd || ins[a]) return si_node_error(g, n, SI_ERR_FORMAT, "invalid axis");
        ins[a] = 1;
    }
    y->shape.ndim = ynd;
    for (int d = 0, s = 0; d < ynd; d++) y->shape.dims[d] = ins[d] ? 1 : x->shape.dims[s++];
    ALLOC_OR_FAIL(y);
    for (int64_t i = 0; i < si_value_numel(x); i++) copy_elem(y, i, x, i);
    return SI_OK;
}

static si_status eval_squeeze(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    int64_t axes[2 * SI_MAX_DIMS];
    int naxes;
    si_status st = squeeze_axes(g, n, axes, &naxes);
    if (st != SI_OK) return st;
    y->dtype = x->dtype;
    int nd = x->shape.ndim;
    uint8_t drop[SI_MAX_DIMS] = {0};
    for (int i = 0; i < naxes; i++) {
        int a = norm(axes[i], nd);
        if (a < 0 || a >= nd || x->shape.dims[a] != 1)
            return si_node_error(g, n, SI_ERR_FORMAT, "cannot squeeze that axis");
        drop[a] = 1;
    }
    y->shape.ndim = 0;
    for (int d = 0; d < nd; d++)
        if (naxes >= 0 ? !drop[d] : x->shape.dims[d] != 1)
            y->shape.dims[y->shape.ndim++] = x->shape.dims[d];
    ALLOC_OR_FAIL(y);
    for (int64_t i = 0; i < si_value_numel(x); i++) copy_elem(y, i, x, i);
    return SI_OK;
}

static si_status eval_flatten(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    int64_t total = si_value_numel(x);
    y->dtype = x->dtype;
    int a = norm(n->host_i[0], x->shape.ndim);
    if (a < 0 || a > x->shape.ndim) return si_node_error(g, n, SI_ERR_FORMAT, "invalid axis");
    int64_t outer = 1;
    for (int d = 0; d < a; d++) outer = si_mul_sat(outer, x->shape.dims[d]);
    y->shape = (si_shape){.ndim = 2, .dims = {outer, outer ? total / outer : 0}};
    ALLOC_OR_FAIL(y);
    for (int64_t i = 0; i < total; i++) copy_elem(y, i, x, i);
    return SI_OK;
}

/* Reshape's target: 0 copies the input dim (unless allowzero), -1 is inferred. */
static si_status eval_reshape(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    const si_value *x1 = hin(g, n, 1);
    int64_t total = si_value_numel(x);
    y->dtype = x->dtype;
    if (!x1 || si_value_numel(x1) > SI_MAX_DIMS)
        return si_node_error(g, n, SI_ERR_FORMAT, "invalid target shape");
    int nd = (int)si_value_numel(x1), inf = -1;
    int64_t known = 1;
    y->shape.ndim = nd;
    for (int d = 0; d < nd; d++) {
        int64_t v = si_value_i64(x1, d);
        if (v == 0 && !n->host_i[0]) v = d < x->shape.ndim ? x->shape.dims[d] : -2;
        if (v == -1) {
            inf = d;
            v = 1;
        }
        if (v < 0) return si_node_error(g, n, SI_ERR_FORMAT, "invalid target shape");
        y->shape.dims[d] = v;
        known = si_mul_sat(known, v);
    }
    if (inf >= 0) {
        if (!known || total % known) return si_node_error(g, n, SI_ERR_FORMAT, "cannot infer -1");
        y->shape.dims[inf] = total / known;
    } else if (known != total) {
        return si_node_error(g, n, SI_ERR_FORMAT, "element counts differ");
    }
    ALLOC_OR_FAIL(y);
    for (int64_t i = 0; i < total; i++) copy_elem(y, i, x, i);
    return SI_OK;
}

static si_status eval_concat(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    int nd = x->shape.ndim, a = norm(n->host_i[0], nd);
    if (a < 0 || a >= nd) return si_node_error(g, n, SI_ERR_FORMAT, "invalid axis");
    y->dtype = x->dtype;
    y->shape = x->shape;
    y->shape.dims[a] = 0;
    for (int i = 0; i < n->n_in; i++) {
        const si_value *v = &g->values[n->in[i]];
        if (v->shape.ndim != nd) return si_node_error(g, n, SI_ERR_FORMAT, "ranks differ");
        for (int d = 0; d < nd; d++) /* else the copy below read past the smaller input */
            if (d != a && v->shape.dims[d] != x->shape.dims[d])
                return si_node_error(g, n, SI_ERR_FORMAT,
                                     "input %d's dim %d (%lld) differs from input 0's (%lld)", i, d,
                                     (long long)v->shape.dims[d], (long long)x->shape.dims[d]);
        y->shape.dims[a] += v->shape.dims[a];
        if (v->dtype == SI_DT_FLOAT) y->dtype = SI_DT_FLOAT;
    }
    ALLOC_OR_FAIL(y);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < a; d++) outer = si_mul_sat(outer, x->shape.dims[d]);
    for (int d = a + 1; d < nd; d++) inner *= x->shape.dims[d];
    int64_t j = 0;
    for (int64_t o = 0; o < outer; o++)
        for (int i = 0; i < n->n_in; i++) {
            const si_value *v = &g->values[n->in[i]];
            int64_t cnt = v->shape.dims[a] * inner;
            for (int64_t e = 0; e < cnt; e++) copy_elem(y, j++, v, o * cnt + e);
        }
    return SI_OK;
}

static si_status eval_constant_of_shape(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    int nd = (int)si_value_numel(x);
    if (nd > SI_MAX_DIMS) return si_node_error(g, n, SI_ERR_FORMAT, "rank too high");
    y->dtype = (int)n->host_i[0];
    y->shape.ndim = nd;
    for (int d = 0; d < nd; d++) y->shape.dims[d] = si_value_i64(x, d);
    ALLOC_OR_FAIL(y);
    for (int64_t i = 0; i < si_shape_numel(&y->shape); i++)
        put(y, i, y->dtype == SI_DT_INT64 ? (double)n->host_i[1] : (double)n->host_f);
    return SI_OK;
}

static si_status eval_expand(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    const si_value *x1 = hin(g, n, 1);
    if (!x1 || si_value_numel(x1) > SI_MAX_DIMS)
        return si_node_error(g, n, SI_ERR_FORMAT, "invalid shape");
    si_shape t = {.ndim = (int)si_value_numel(x1)};
    for (int d = 0; d < t.ndim; d++) t.dims[d] = si_value_i64(x1, d);
    if (!bcast_shape(&x->shape, &t, &y->shape))
        return si_node_error(g, n, SI_ERR_FORMAT, "cannot expand");
    y->dtype = x->dtype;
    ALLOC_OR_FAIL(y);
    /* row by row of the last dim (a class token expanded to a batch of 16,384 is 12.6M values,
     * which `plan` folds at each batch it tries): a copy where x has the whole row, else one
     * value repeated; the same values as element by element (y's type is x's) */
    const int nd = y->shape.ndim;
    const int64_t inner = nd ? y->shape.dims[nd - 1] : 1, numel = si_shape_numel(&y->shape);
    if (numel == 0) return SI_OK;
    const int64_t rows = numel / inner;
    const bool whole = x->shape.ndim == 0 ? inner == 1 : x->shape.dims[x->shape.ndim - 1] == inner;
    const size_t es = y->dtype == SI_DT_INT64 ? 8 : 4;
    for (int64_t r = 0; r < rows; r++) {
        int64_t from = bcast_offset(&x->shape, &y->shape, r * inner);
        uint8_t *dst = (uint8_t *)y->data + (size_t)(r * inner) * es;
        const uint8_t *src = (const uint8_t *)x->data + (size_t)from * es;
        if (whole)
            memcpy(dst, src, (size_t)inner * es);
        else
            for (int64_t e = 0; e < inner; e++) memcpy(dst + (size_t)e * es, src, es);
    }
    return SI_OK;
}

/* Tile: element i of y copies x at its coordinates modulo x's dims, row by row of the last dim
 * (the copies of a row are x's row, repeated). */
static si_status eval_tile(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    si_status st = si_tile_shape_of(g, n, &x->shape, hin(g, n, 1), &y->shape);
    if (st != SI_OK) return st;
    y->dtype = x->dtype;
    ALLOC_OR_FAIL(y);
    const int nd = y->shape.ndim;
    const int64_t numel = si_shape_numel(&y->shape), inner = nd ? x->shape.dims[nd - 1] : 1;
    if (numel == 0) return SI_OK;
    const size_t es = y->dtype == SI_DT_INT64 ? 8 : 4;
    uint8_t *dst = y->data;
    for (int64_t i = 0; i < numel; i += inner) { /* y's rows of x's width */
        int64_t rem = i, off = 0, stride = 1;
        for (int d = nd - 1; d >= 0; d--) {
            off += rem % y->shape.dims[d] % x->shape.dims[d] * stride;
            rem /= y->shape.dims[d];
            stride *= x->shape.dims[d];
        }
        memcpy(dst + (size_t)i * es, (const uint8_t *)x->data + (size_t)off * es,
               (size_t)inner * es);
    }
    return SI_OK;
}

static si_status eval_einsum(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    const si_value *in[SI_EINSUM_MAX_IN];
    (void)x;
    if (n->n_in > SI_EINSUM_MAX_IN || n->host_present != (1u << n->n_in) - 1)
        return si_node_error(g, n, SI_ERR_UNSUPPORTED, "an omitted input or more than %d",
                             SI_EINSUM_MAX_IN);
    for (int k = 0; k < n->n_in; k++)
        if (!(in[k] = &g->values[n->in[k]])->data)
            return si_node_error(g, n, SI_ERR_INTERNAL, "input %d has no host data", k);
    return si_einsum_eval(g, n, in, y, HOST_MAX_ELEMS);
}

static si_status eval_range(si_graph *g, si_gnode *n, const si_value *s, si_value *y) {
    const si_value *l = hin(g, n, 1), *dl = hin(g, n, 2);
    if (!s || !l || !dl) return si_node_error(g, n, SI_ERR_FORMAT, "start, limit, delta");
    if (si_value_numel(s) != 1 || si_value_numel(l) != 1 || si_value_numel(dl) != 1)
        return si_node_error(g, n, SI_ERR_FORMAT, "start, limit and delta must be scalars");
    double a = si_value_f64(s, 0), lim = si_value_f64(l, 0), d = si_value_f64(dl, 0);
    if (d == 0) return si_node_error(g, n, SI_ERR_FORMAT, "delta is 0");
    int64_t cnt = si_f2i_sat(ceil((lim - a) / d));
    if (cnt < 0) cnt = 0;
    if (cnt > (1 << 24)) return si_node_error(g, n, SI_ERR_UNSUPPORTED, "range too long");
    y->dtype = s->dtype;
    y->shape = (si_shape){.ndim = 1, .dims = {cnt}};
    ALLOC_OR_FAIL(y);
    for (int64_t i = 0; i < cnt; i++) put(y, i, a + (double)i * d);
    return SI_OK;
}

/* The unary ops of a float value, in double (a constant folded once at load: Swin V2's logit
 * scale exp(clamp(p, max = log 100)) is one of these). */
static double unary_f64(int op, double v, const si_act *a) {
    switch (op) {
    case H_NOT: return v == 0;
    case H_ISNAN: return v != v;
    case H_RELU: return v < 0 ? 0 : v;
    case H_ISINF: return (a->alpha != 0 && v == INFINITY) || (a->beta != 0 && v == -INFINITY);
    case H_NEG: return -v;
    case H_ABS: return fabs(v);
    case H_FLOOR: return floor(v);
    case H_CEIL: return ceil(v);
    case H_SQRT: return sqrt(v);
    case H_EXP: return exp(v);
    case H_LOG: return log(v);
    case H_SIN: return sin(v);
    case H_COS: return cos(v);
    case H_ROUND: return nearbyint(v); /* halves to even in the default rounding mode */
    case H_SIGN: return v > 0 ? 1 : v < 0 ? -1 : v;
    case H_SOFTPLUS: return (v > 0 ? v : 0) + log1p(exp(-fabs(v)));
    case H_MISH: return v * tanh((v > 0 ? v : 0) + log1p(exp(-fabs(v))));
    case H_SIGMOID: return 1 / (1 + exp(-v));
    case H_HARDSIGMOID: return fmax(0, fmin(1, a->alpha * v + a->beta));
    case H_HARDSWISH: return v * fmax(0, fmin(1, v / 6 + 0.5));
    default: SI_ASSERT(!"a unary host row without its formula"); return v;
    }
}

/* The unary ops that map integers to integers, exactly on int64 (above 2^53 a double would
 * round); false for the others. */
static bool unary_i64(int op, int64_t v, int64_t *r) {
    switch (op) {
    case H_NEG: *r = v == INT64_MIN ? v : -v; return true; /* -INT64_MIN overflows: wraps */
    case H_ABS: *r = v < 0 && v != INT64_MIN ? -v : v; return true;
    case H_SIGN: *r = (v > 0) - (v < 0); return true;
    case H_RELU: *r = v < 0 ? 0 : v; return true;
    case H_FLOOR:
    case H_CEIL:
    case H_ROUND: *r = v; return true;
    default: return false;
    }
}

/* Not, Neg, Abs, Floor, Ceil, Sqrt, Exp, Log, Sin, Cos, Round, Sign, Softplus, Mish, Sigmoid,
 * HardSigmoid, HardSwish. */
static si_status eval_unary(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    int op = n->host_op;
    bool to_bool = op == H_NOT || op == H_ISNAN || op == H_ISINF;
    y->dtype = to_bool ? SI_DT_INT64 : x->dtype;
    y->shape = x->shape;
    ALLOC_OR_FAIL(y);
    for (int64_t i = 0; i < si_value_numel(x); i++) {
        int64_t r;
        if (x->dtype == SI_DT_INT64 && !to_bool && unary_i64(op, si_value_i64(x, i), &r))
            ((int64_t *)y->data)[i] = r;
        else
            put(y, i, unary_f64(op, si_value_f64(x, i), &n->act));
    }
    return SI_OK;
}

/* One bound of a Clip from opset 11 (input k, a scalar), or the attribute's; *has false when
 * neither gives one. */
static si_status clip_bound(si_graph *g, si_gnode *n, int k, double attr, double *v, bool *has) {
    const si_value *b = n->host_i[0] ? NULL : hin(g, n, k);
    *has = n->host_i[0] || b;
    *v = attr;
    if (!b) return SI_OK;
    if (si_value_numel(b) != 1)
        return si_node_error(g, n, SI_ERR_FORMAT, "bound %d has %lld values, not one", k,
                             (long long)si_value_numel(b));
    *v = si_value_f64(b, 0);
    return SI_OK;
}

/* max then min, as ONNX defines it (min > max yields max); int64 data stays exact. */
static si_status eval_clip(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    double lo, hi;
    bool has_lo, has_hi;
    si_status st = clip_bound(g, n, 1, n->act.lo, &lo, &has_lo);
    if (st == SI_OK) st = clip_bound(g, n, 2, n->act.hi, &hi, &has_hi);
    if (st != SI_OK) return st;
    y->dtype = x->dtype;
    y->shape = x->shape;
    ALLOC_OR_FAIL(y);
    for (int64_t i = 0; i < si_value_numel(x); i++) {
        if (x->dtype == SI_DT_INT64) {
            int64_t v = si_value_i64(x, i);
            if (has_lo && v < si_f2i_sat(ceil(lo))) v = si_f2i_sat(ceil(lo));
            if (has_hi && v > si_f2i_sat(floor(hi))) v = si_f2i_sat(floor(hi));
            ((int64_t *)y->data)[i] = v;
            continue;
        }
        double v = si_value_f64(x, i);
        if (has_lo && v < lo) v = lo;
        if (has_hi && v > hi) v = hi;
        put(y, i, v);
    }
    return SI_OK;
}

static si_status eval_transpose(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    int nd = x->shape.ndim;
    int perm[SI_MAX_DIMS];
    /* a perm of the wrong length or with a repeated axis read and wrote past the tensors */
    si_status st = si_transpose_perm(g, n, nd, perm);
    if (st != SI_OK) return st;
    for (int d = 0; d < nd; d++) y->shape.dims[d] = x->shape.dims[perm[d]];
    y->shape.ndim = nd;
    y->dtype = x->dtype;
    ALLOC_OR_FAIL(y);
    int64_t total = si_value_numel(x), xs[SI_MAX_DIMS], s = 1;
    for (int d = nd - 1; d >= 0; d--) xs[d] = s, s *= x->shape.dims[d];
    for (int64_t i = 0; i < total; i++) {
        int64_t rem = i, off = 0;
        for (int d = nd - 1; d >= 0; d--) {
            off += (rem % y->shape.dims[d]) * xs[perm[d]];
            rem /= y->shape.dims[d];
        }
        copy_elem(y, i, x, off);
    }
    return SI_OK;
}

static si_status eval_where(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    const si_value *x1 = hin(g, n, 1), *x2 = hin(g, n, 2);
    if (!x1 || !x2) return si_node_error(g, n, SI_ERR_FORMAT, "Where needs 3 inputs");
    si_shape t;
    if (!bcast_shape(&x->shape, &x1->shape, &t) || !bcast_shape(&t, &x2->shape, &y->shape))
        return si_node_error(g, n, SI_ERR_FORMAT, "shapes cannot be broadcast");
    y->dtype = x1->dtype == SI_DT_FLOAT || x2->dtype == SI_DT_FLOAT ? SI_DT_FLOAT : SI_DT_INT64;
    ALLOC_OR_FAIL(y);
    for (int64_t i = 0; i < si_shape_numel(&y->shape); i++) {
        bool c = si_value_f64(x, bcast_offset(&x->shape, &y->shape, i)) != 0;
        const si_value *src = c ? x1 : x2;
        copy_elem(y, i, src, bcast_offset(&src->shape, &y->shape, i));
    }
    return SI_OK;
}

/* y[j] reduced with (si_scatter_reduction red) element i of up: exact on int64 (wrapping, not
 * undefined, where a hostile constant overflows), in double for float; Max and Min let a NaN
 * win, as the device's. */
static void scatter_elem(si_value *y, int64_t j, const si_value *up, int64_t i, int64_t red) {
    if (y->dtype == SI_DT_INT64) {
        int64_t a = ((int64_t *)y->data)[j], b = si_value_i64(up, i);
        ((int64_t *)y->data)[j] = red == SI_SCATTER_ADD   ? (int64_t)((uint64_t)a + (uint64_t)b)
                                  : red == SI_SCATTER_MUL ? (int64_t)((uint64_t)a * (uint64_t)b)
                                  : red == SI_SCATTER_MAX ? (a > b ? a : b)
                                  : red == SI_SCATTER_MIN ? (a < b ? a : b)
                                                          : b;
        return;
    }
    double a = si_value_f64(y, j), b = si_value_f64(up, i), r = b;
    bool nan = a != a || b != b;
    switch (red) {
    case SI_SCATTER_ADD: r = a + b; break;
    case SI_SCATTER_MUL: r = a * b; break;
    case SI_SCATTER_MAX: r = nan ? a + b : a > b ? a : b; break;
    case SI_SCATTER_MIN: r = nan ? a + b : a < b ? a : b; break;
    default: break;
    }
    put(y, j, r);
}

/* ScatterND: a copy of data with the slices data[indices[i]] replaced by (or reduced with)
 * updates[i], in order; indices' last dim k addresses data's first k dims. */
static si_status eval_scatternd(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    const si_value *ix = hin(g, n, 1), *up = hin(g, n, 2);
    if (!ix || !up || !ix->data || !up->data)
        return si_node_error(g, n, SI_ERR_FORMAT, "ScatterND needs data, indices and updates");
    const si_shape *ds = &x->shape, *is = &ix->shape;
    int64_t k = is->ndim ? is->dims[is->ndim - 1] : 0, slice = 1, count = 1;
    if (is->ndim < 1 || k < 1 || k > ds->ndim)
        return si_node_error(g, n, SI_ERR_FORMAT,
                             "indices' last dimension %lld does not fit "
                             "data of rank %d",
                             (long long)k, ds->ndim);
    for (int d = (int)k; d < ds->ndim; d++) slice *= ds->dims[d];
    for (int d = 0; d < is->ndim - 1; d++) count *= is->dims[d];
    if (si_shape_numel(&up->shape) != count * slice)
        return si_node_error(g, n, SI_ERR_FORMAT, "updates have %lld elements, %lld expected",
                             (long long)si_shape_numel(&up->shape), (long long)(count * slice));
    y->shape = *ds;
    y->dtype = x->dtype == SI_DT_FLOAT || up->dtype == SI_DT_FLOAT ? SI_DT_FLOAT : SI_DT_INT64;
    ALLOC_OR_FAIL(y);
    for (int64_t i = 0; i < si_shape_numel(ds); i++) copy_elem(y, i, x, i);
    for (int64_t c = 0; c < count; c++) {
        int64_t off = 0;
        for (int64_t d = 0; d < k; d++) {
            int64_t v = si_value_i64(ix, c * k + d), dim = ds->dims[d];
            if (v < 0) v += dim;
            if (v < 0 || v >= dim)
                return si_node_error(g, n, SI_ERR_FORMAT,
                                     "index %lld is out of range for a "
                                     "dimension of %lld",
                                     (long long)si_value_i64(ix, c * k + d), (long long)dim);
            off = off * dim + v;
        }
        off *= slice;
        for (int64_t e = 0; e < slice; e++)
            scatter_elem(y, off + e, up, c * slice + e, n->host_i[0]);
    }
    return SI_OK;
}

/* The error for GatherND's row t, whose tuple leaves the data. */
static si_status gathernd_range_error(si_graph *g, si_gnode *n, const si_gathernd_geom *geo,
                                      const int64_t *tuple, int64_t t) {
    int j = 0;
    while (j < geo->k - 1 && si_index_in(tuple[j], geo->dims[j]) >= 0) j++;
    return si_node_error(g, n, SI_ERR_FORMAT,
                         "index %lld (element %lld) is out of range for a dimension of %lld",
                         (long long)tuple[j], (long long)(t * geo->k + j), (long long)geo->dims[j]);
}

/* GatherND of host tensors (a constant table indexed by constant tuples), any dtype. */
static si_status eval_gather_nd(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    const si_value *ix = hin(g, n, 1);
    si_gathernd_geom geo;
    if (!ix || !ix->data) return si_node_error(g, n, SI_ERR_FORMAT, "the indices are missing");
    si_status st = si_gathernd_geom_of(g, n, &x->shape, &ix->shape, n->host_i[0], &geo, &y->shape);
    if (st != SI_OK) return st;
    y->dtype = x->dtype;
    ALLOC_OR_FAIL(y);
    for (int64_t t = 0; t < geo.rows; t++) {
        int64_t tuple[SI_MAX_DIMS], off;
        for (int j = 0; j < geo.k; j++) tuple[j] = si_value_i64(ix, t * geo.k + j);
        if ((off = si_gathernd_offset(&geo, t, tuple)) < 0)
            return gathernd_range_error(g, n, &geo, tuple, t);
        for (int64_t e = 0; e < geo.slice; e++) copy_elem(y, t * geo.slice + e, x, off + e);
    }
    return SI_OK;
}

/* Element i of GatherElements' or ScatterElements' indices as a data offset, or an error. */
static si_status elements_offset(si_graph *g, si_gnode *n, const si_elements_geom *geo,
                                 const si_value *ix, int64_t i, int64_t *off) {
    if ((*off = si_elements_offset(geo, i, si_value_i64(ix, i))) >= 0) return SI_OK;
    return si_node_error(
        g, n, SI_ERR_FORMAT, "index %lld (element %lld) is out of range for axis %d of length %lld",
        (long long)si_value_i64(ix, i), (long long)i, geo->axis, (long long)geo->len);
}

static si_status eval_gather_elements(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    const si_value *ix = hin(g, n, 1);
    si_elements_geom geo;
    if (!ix || !ix->data) return si_node_error(g, n, SI_ERR_FORMAT, "the indices are missing");
    si_status st = si_elements_geom_of(g, n, &x->shape, &ix->shape, n->host_i[0], &geo);
    if (st != SI_OK) return st;
    y->dtype = x->dtype;
    y->shape = ix->shape;
    ALLOC_OR_FAIL(y);
    for (int64_t i = 0, off; i < si_value_numel(ix); i++) {
        if ((st = elements_offset(g, n, &geo, ix, i, &off)) != SI_OK) return st;
        copy_elem(y, i, x, off);
    }
    return SI_OK;
}

/* ScatterElements: a copy of data, then each update reduced into the element its index
 * addresses, in order (the last of duplicates wins without a reduction). */
static si_status eval_scatter_elements(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    const si_value *ix = hin(g, n, 1), *up = hin(g, n, 2);
    si_elements_geom geo;
    if (!ix || !up || !ix->data || !up->data)
        return si_node_error(g, n, SI_ERR_FORMAT, "ScatterElements needs data, indices, updates");
    si_status st = si_elements_geom_of(g, n, &x->shape, &ix->shape, n->host_i[0], &geo);
    if (st != SI_OK) return st;
    if (up->shape.ndim != ix->shape.ndim ||
        memcmp(up->shape.dims, ix->shape.dims, sizeof(int64_t) * (size_t)up->shape.ndim))
        return si_node_error(g, n, SI_ERR_FORMAT, "updates and indices differ in shape");
    y->shape = x->shape;
    y->dtype = x->dtype == SI_DT_FLOAT || up->dtype == SI_DT_FLOAT ? SI_DT_FLOAT : SI_DT_INT64;
    ALLOC_OR_FAIL(y);
    for (int64_t i = 0; i < si_value_numel(x); i++) copy_elem(y, i, x, i);
    for (int64_t i = 0, off; i < si_value_numel(ix); i++) {
        if ((st = elements_offset(g, n, &geo, ix, i, &off)) != SI_OK) return st;
        scatter_elem(y, off, up, i, n->host_i[1]);
    }
    return SI_OK;
}

/* Exact integer arithmetic for shapes: NULL, or why there is no result (a division or modulo
 * by 0, or an overflow of int64, which a hostile file's constants can ask for). */
static const char *int_binary(int op, int64_t fmod_flag, int64_t a, int64_t b, int64_t *r) {
    switch (op) {
    case H_ADD: return __builtin_add_overflow(a, b, r) ? "integer overflow" : NULL;
    case H_SUB: return __builtin_sub_overflow(a, b, r) ? "integer overflow" : NULL;
    case H_MUL: return __builtin_mul_overflow(a, b, r) ? "integer overflow" : NULL;
    case H_DIV:
        if (!b) return "integer division by 0";
        if (a == INT64_MIN && b == -1) return "integer overflow";
        *r = a / b;
        return NULL;
    case H_POW: /* by squaring; a negative exponent leaves 1 / a^|b|, 0 but for a = +-1 */
        if (b < 0) {
            *r = a == 1 ? 1 : a == -1 ? (b % 2 ? -1 : 1) : 0;
            if (!a) return "integer division by 0";
            return NULL;
        }
        for (*r = 1; b; b >>= 1) {
            if ((b & 1) && __builtin_mul_overflow(*r, a, r)) return "integer overflow";
            if (b > 1 && __builtin_mul_overflow(a, a, &a)) return "integer overflow";
        }
        return NULL;
    default: /* Mod: fmod=0 takes the divisor's sign, as Python */
        if (!b) return "modulo by 0";
        *r = b == -1 ? 0 : a % b;
        if (!fmod_flag && *r && ((*r < 0) != (b < 0))) *r += b;
        return NULL;
    }
}

static double float_binary(int op, int64_t fmod_flag, double a, double b) {
    switch (op) {
    case H_ADD: return a + b;
    case H_SUB: return a - b;
    case H_MUL: return a * b;
    case H_DIV: return a / b;
    case H_POW: return pow(a, b);
    case H_EQUAL: return a == b;
    case H_LESS: return a < b;
    case H_GREATER: return a > b;
    case H_GREATER_EQ: return a >= b;
    case H_LESS_EQ: return a <= b;
    case H_AND: return a != 0 && b != 0;
    case H_OR: return a != 0 || b != 0;
    case H_XOR: return (a != 0) != (b != 0);
    default: return fmod_flag ? fmod(a, b) : a - b * floor(a / b);
    }
}

/* Add, Sub, Mul, Div, Pow, Mod and the comparisons and logical ops (bools as int64 0 and 1) with
 * broadcasting. */
static si_status eval_binary(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    const si_value *x1 = hin(g, n, 1);
    int op = n->host_op;
    if (!x1) return si_node_error(g, n, SI_ERR_FORMAT, "needs two inputs");
    if (!bcast_shape(&x->shape, &x1->shape, &y->shape))
        return si_node_error(g, n, SI_ERR_FORMAT, "shapes cannot be broadcast");
    bool cmp = op == H_EQUAL || op == H_LESS || op == H_GREATER || op == H_GREATER_EQ ||
               op == H_LESS_EQ || op == H_AND || op == H_OR || op == H_XOR;
    bool ints = x->dtype == SI_DT_INT64 && x1->dtype == SI_DT_INT64;
    y->dtype = cmp || ints ? SI_DT_INT64 : SI_DT_FLOAT;
    ALLOC_OR_FAIL(y);
    for (int64_t i = 0; i < si_shape_numel(&y->shape); i++) {
        int64_t ia = bcast_offset(&x->shape, &y->shape, i),
                ib = bcast_offset(&x1->shape, &y->shape, i);
        if (ints && !cmp) {
            int64_t r;
            const char *why =
                int_binary(op, n->host_i[0], si_value_i64(x, ia), si_value_i64(x1, ib), &r);
            if (why) return si_node_error(g, n, SI_ERR_FORMAT, "%s", why);
            ((int64_t *)y->data)[i] = r;
            continue;
        }
        put(y, i, float_binary(op, n->host_i[0], si_value_f64(x, ia), si_value_f64(x1, ib)));
    }
    return SI_OK;
}

/* The most multiply-adds a MatMul of constants is folded with at load (~0.3 s). */
#define HOST_MAX_MACS 2.7e8

/* MatMul of constants (Swin V2's relative-position MLP over its table of coordinates), by
 * numpy's rules: a 1-D operand is promoted and its axis dropped after, batch dims broadcast.
 * In double; int64 results saturate. */
static si_status eval_matmul(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    const si_value *w = hin(g, n, 1);
    if (!w) return si_node_error(g, n, SI_ERR_FORMAT, "needs two inputs");
    si_shape a = x->shape, b = w->shape;
    if (a.ndim == 0 || b.ndim == 0) return si_node_error(g, n, SI_ERR_FORMAT, "a scalar operand");
    bool a1 = a.ndim == 1, b1 = b.ndim == 1;
    if (a1) a = (si_shape){.ndim = 2, .dims = {1, a.dims[0]}};
    if (b1) b = (si_shape){.ndim = 2, .dims = {b.dims[0], 1}};
    int64_t m = a.dims[a.ndim - 2], k = a.dims[a.ndim - 1], nn = b.dims[b.ndim - 1];
    if (b.dims[b.ndim - 2] != k)
        return si_node_error(g, n, SI_ERR_FORMAT, "inner dims differ (%lld and %lld)", (long long)k,
                             (long long)b.dims[b.ndim - 2]);
    si_shape ab = a, bb = b, batch;
    ab.ndim -= 2;
    bb.ndim -= 2;
    if (!bcast_shape(&ab, &bb, &batch))
        return si_node_error(g, n, SI_ERR_FORMAT, "batch dims cannot be broadcast");
    int64_t nb = si_shape_numel(&batch);
    if ((double)nb * (double)m * (double)nn * (double)k > HOST_MAX_MACS)
        return si_node_error(g, n, SI_ERR_UNSUPPORTED,
                             "a MatMul of constants too large to fold at load (%.3g multiply-adds)",
                             (double)nb * (double)m * (double)nn * (double)k);
    y->shape = batch;
    if (!a1) y->shape.dims[y->shape.ndim++] = m;
    if (!b1) y->shape.dims[y->shape.ndim++] = nn;
    y->dtype = x->dtype == SI_DT_INT64 && w->dtype == SI_DT_INT64 ? SI_DT_INT64 : SI_DT_FLOAT;
    ALLOC_OR_FAIL(y);
    for (int64_t ib = 0; ib < nb; ib++) {
        int64_t oa = bcast_offset(&ab, &batch, ib) * m * k,
                ob = bcast_offset(&bb, &batch, ib) * k * nn;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < nn; j++) {
                double acc = 0;
                for (int64_t q = 0; q < k; q++)
                    acc += si_value_f64(x, oa + i * k + q) * si_value_f64(w, ob + q * nn + j);
                put(y, (ib * m + i) * nn + j, acc);
            }
    }
    return SI_OK;
}

/* Min and Max of any number of inputs with broadcasting: int64 when every input is, exactly;
 * in float a NaN anywhere gives NaN, as numpy's minimum and maximum. */
static si_status eval_minmax(si_graph *g, si_gnode *n, const si_value *x, si_value *y) {
    bool ints = true, is_max = n->host_op == H_MAX;
    y->shape = x->shape;
    for (int k = 0; k < n->n_in; k++) {
        const si_value *v = &g->values[n->in[k]];
        si_shape t = y->shape;
        if (!v->data) return si_node_error(g, n, SI_ERR_INTERNAL, "input has no host data");
        if (!bcast_shape(&t, &v->shape, &y->shape))
            return si_node_error(g, n, SI_ERR_FORMAT, "shapes cannot be broadcast");
        ints &= v->dtype == SI_DT_INT64;
    }
    y->dtype = ints ? SI_DT_INT64 : SI_DT_FLOAT;
    ALLOC_OR_FAIL(y);
    for (int64_t i = 0; i < si_shape_numel(&y->shape); i++) {
        const si_value *v = &g->values[n->in[0]];
        int64_t off = bcast_offset(&v->shape, &y->shape, i), ri = si_value_i64(v, off);
        double rf = si_value_f64(v, off);
        for (int k = 1; k < n->n_in; k++) {
            v = &g->values[n->in[k]];
            off = bcast_offset(&v->shape, &y->shape, i);
            int64_t bi = si_value_i64(v, off);
            double bf = si_value_f64(v, off);
            if (is_max ? bi > ri : bi < ri) ri = bi;
            if (bf != bf || (rf == rf && (is_max ? bf > rf : bf < rf))) rf = bf;
        }
        if (ints)
            ((int64_t *)y->data)[i] = ri;
        else
            put(y, i, rf);
    }
    return SI_OK;
}

/* --- the table ------------------------------------------------------------------------------ */
typedef struct {
    const char *onnx;
    /* reads the node's attributes (NULL: none); inputs are already attached */
    bool (*convert)(si_builder *b, const si_node_proto *n, si_gnode *gn);
    /* (re)computes the output from the inputs' data; x is ONNX input 0 (NULL when absent) */
    si_status (*eval)(si_graph *g, si_gnode *n, const si_value *x, si_value *y);
    bool no_x;       /* input 0 is optional (Constant has none, Range checks its own) */
    bool shape_only; /* reads only input 0's shape, so it may be a runtime value */
} host_row;

#define BINARY(name)                                                                               \
    { .onnx = name, .eval = eval_binary }
#define UNARY(name)                                                                                \
    { .onnx = name, .eval = eval_unary }

static const host_row host_rows[H_COUNT] = {
    [H_CONSTANT] = {.onnx = "Constant",
                    .convert = constant_value,
                    .eval = eval_constant,
                    .no_x = true},
    [H_SHAPE] = {.onnx = "Shape", .convert = conv_shape, .eval = eval_shape, .shape_only = true},
    [H_SIZE] = {.onnx = "Size", .eval = eval_size, .shape_only = true},
    [H_GATHER] = {.onnx = "Gather", .convert = conv_axis0, .eval = eval_gather},
    [H_UNSQUEEZE] = {.onnx = "Unsqueeze", .convert = conv_axes_attr, .eval = eval_unsqueeze},
    [H_SQUEEZE] = {.onnx = "Squeeze", .convert = conv_axes_attr, .eval = eval_squeeze},
    [H_CONCAT] = {.onnx = "Concat", .convert = conv_axis0, .eval = eval_concat},
    [H_CAST] = {.onnx = "Cast", .convert = conv_cast, .eval = eval_cast},
    [H_CONSTANT_OF_SHAPE] = {.onnx = "ConstantOfShape",
                             .convert = conv_constant_of_shape,
                             .eval = eval_constant_of_shape},
    [H_EXPAND] = {.onnx = "Expand", .eval = eval_expand},
    [H_RANGE] = {.onnx = "Range", .eval = eval_range, .no_x = true},
    [H_EQUAL] = BINARY("Equal"),
    [H_LESS] = BINARY("Less"),
    [H_GREATER] = BINARY("Greater"),
    [H_NOT] = UNARY("Not"),
    [H_GREATER_EQ] = BINARY("GreaterOrEqual"),
    [H_LESS_EQ] = BINARY("LessOrEqual"),
    [H_AND] = BINARY("And"),
    [H_OR] = BINARY("Or"),
    [H_XOR] = BINARY("Xor"),
    [H_ISNAN] = UNARY("IsNaN"),
    [H_POW] = BINARY("Pow"),
    [H_RELU] = UNARY("Relu"),
    [H_MATMUL] = {.onnx = "MatMul", .eval = eval_matmul},
    [H_ISINF] = {.onnx = "IsInf", .convert = conv_isinf, .eval = eval_unary},
    [H_WHERE] = {.onnx = "Where", .eval = eval_where},
    [H_SLICE] = {.onnx = "Slice", .convert = conv_slice, .eval = eval_slice},
    [H_RESHAPE] = {.onnx = "Reshape", .convert = conv_reshape, .eval = eval_reshape},
    [H_FLATTEN] = {.onnx = "Flatten", .convert = conv_flatten, .eval = eval_flatten},
    [H_IDENTITY] = {.onnx = "Identity", .eval = eval_identity},
    [H_ADD] = BINARY("Add"),
    [H_SUB] = BINARY("Sub"),
    [H_MUL] = BINARY("Mul"),
    [H_DIV] = BINARY("Div"),
    [H_MIN] = {.onnx = "Min", .eval = eval_minmax},
    [H_MAX] = {.onnx = "Max", .eval = eval_minmax},
    [H_MOD] = {.onnx = "Mod", .convert = conv_mod, .eval = eval_binary},
    [H_NEG] = UNARY("Neg"),
    [H_ABS] = UNARY("Abs"),
    [H_FLOOR] = UNARY("Floor"),
    [H_CEIL] = UNARY("Ceil"),
    [H_SQRT] = UNARY("Sqrt"),
    [H_TRANSPOSE] = {.onnx = "Transpose", .convert = conv_axes_attr, .eval = eval_transpose},
    [H_SCATTERND] = {.onnx = "ScatterND", .convert = conv_scatternd, .eval = eval_scatternd},
    [H_EXP] = UNARY("Exp"),
    [H_LOG] = UNARY("Log"),
    [H_SIN] = UNARY("Sin"),
    [H_COS] = UNARY("Cos"),
    [H_ROUND] = UNARY("Round"),
    [H_SIGN] = UNARY("Sign"),
    [H_SOFTPLUS] = UNARY("Softplus"),
    [H_MISH] = UNARY("Mish"),
    [H_SIGMOID] = UNARY("Sigmoid"),
    [H_HARDSIGMOID] = {.onnx = "HardSigmoid", .convert = conv_hardsigmoid, .eval = eval_unary},
    [H_HARDSWISH] = UNARY("HardSwish"),
    [H_CLIP] = {.onnx = "Clip", .convert = conv_clip, .eval = eval_clip},
    [H_GATHER_ND] = {.onnx = "GatherND", .convert = conv_batch_dims, .eval = eval_gather_nd},
    [H_GATHER_ELEMENTS] = {.onnx = "GatherElements",
                           .convert = conv_axis0,
                           .eval = eval_gather_elements},
    [H_SCATTER_ELEMENTS] = {.onnx = "ScatterElements",
                            .convert = conv_scatter_elements,
                            .eval = eval_scatter_elements},
    [H_TILE] = {.onnx = "Tile", .convert = conv_tile, .eval = eval_tile},
    [H_EINSUM] = {.onnx = "Einsum", .convert = conv_einsum, .eval = eval_einsum},
};

static int host_op_of(const char *op) {
    for (int i = 0; i < H_COUNT; i++)
        if (!strcmp(op, host_rows[i].onnx)) return i;
    return -1;
}

bool si_host_supports(const char *op_type) {
    return host_op_of(op_type) >= 0;
}

bool si_convert_host_op(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    int op = host_op_of(n->op_type);
    gn->op = SI_OP_HOST;
    gn->host_op = op;
    for (int k = 0; k < 4; k++) gn->pslot[k] = -1;
    for (int i = 0; i < n->n_inputs && i < 31; i++) {
        int id = si_b_input(b, n, i);
        if (id < 0) continue;
        gn->host_present |= 1u << i;
        si_node_add_input(gn, id);
    }
    return !host_rows[op].convert || host_rows[op].convert(b, n, gn);
}

si_status si_host_eval(si_graph *g, si_gnode *n) {
    const host_row *row = &host_rows[n->host_op];
    const si_value *x = hin(g, n, 0);
    if (!row->no_x && !x) return si_node_error(g, n, SI_ERR_FORMAT, "the first input is missing");
    if (!row->no_x && !row->shape_only && !x->data)
        return si_node_error(g, n, SI_ERR_INTERNAL, "input has no host data");
    return row->eval(g, n, x, &g->values[n->out]);
}
