/* Import of the arithmetic ops: Gemm, MatMul, the broadcasting binaries, the activations,
 * BatchNormalization (statistics folded into scale and shift at load), Softmax and the
 * reductions (GlobalMaxPool among them). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "import.h"

static bool convert_gemm(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    gn->trans_a = (int)si_attr_int(n, "transA", 0);
    gn->trans_b = (int)si_attr_int(n, "transB", 0);
    gn->alpha = si_attr_float(n, "alpha", 1.f);
    gn->beta = si_attr_float(n, "beta", 1.f);
    int bb = si_b_input(b, n, 1), c = si_b_input(b, n, 2);
    if (bb < 0) {
        si_b_unsupported(b, n, "needs inputs A and B");
        return false;
    }
    si_node_add_input(gn, x);
    si_node_add_input(gn, bb);
    if (c >= 0) si_node_add_input(gn, c);
    return true;
}

static bool convert_matmul(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    int bb = si_b_input(b, n, 1);
    if (bb < 0) {
        si_b_unsupported(b, n, "needs inputs A and B");
        return false;
    }
    si_node_add_input(gn, x);
    si_node_add_input(gn, bb);
    return true;
}

/* The broadcasting binary ops, by ONNX name. */
static const struct {
    const char *onnx;
    si_binop op;
} binary_ops[] = {
    {"Add", SI_BIN_ADD}, {"Sub", SI_BIN_SUB}, {"Mul", SI_BIN_MUL}, {"Div", SI_BIN_DIV},
    {"Pow", SI_BIN_POW}, {"Min", SI_BIN_MIN}, {"Max", SI_BIN_MAX},
};

static bool convert_binary(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    if (b->m->opset < 7 && si_attr_int(n, "broadcast", 0) && si_node_attr(n, "axis")) {
        si_b_unsupported(b, n, "legacy broadcast with an axis attribute (opset < 7)");
        return false;
    }
    for (size_t i = 0; i < sizeof binary_ops / sizeof binary_ops[0]; i++)
        if (!strcmp(n->op_type, binary_ops[i].onnx)) gn->binop = binary_ops[i].op;
    int y = si_b_input(b, n, 1);
    if (y < 0) {
        si_b_unsupported(b, n, "needs two inputs");
        return false;
    }
    si_node_add_input(gn, x);
    si_node_add_input(gn, y);
    return true;
}

/* Min and Max take any number of inputs: one is its own result (a view), two a binary op. More
 * would need a node per pair, which conversion (one node in, one out) cannot make; no vision
 * model we know of writes them on image data (the host row folds any number). */
static bool convert_minmax(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    int count = 0;
    for (int i = 0; i < n->n_inputs; i++) count += n->inputs[i][0] != 0;
    if (count > 2) {
        si_b_unsupported(b, n, "more than two inputs on image data (%d)", count);
        return false;
    }
    if (count == 2) return convert_binary(b, n, gn, x);
    gn->op = SI_OP_VIEW;
    gn->view_kind = SI_VIEW_IDENTITY;
    si_node_add_input(gn, x);
    return true;
}

static bool convert_relu(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    (void)b;
    (void)n;
    si_node_add_input(gn, x);
    gn->act.kind = SI_ACT_RELU;
    return true;
}

static bool convert_sigmoid(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    (void)b;
    (void)n;
    si_node_add_input(gn, x);
    gn->act.kind = SI_ACT_SIGMOID;
    return true;
}

static bool convert_hardswish(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    (void)b;
    (void)n;
    si_node_add_input(gn, x);
    gn->act.kind = SI_ACT_HARDSWISH;
    return true;
}

static bool convert_hardsigmoid(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    (void)b;
    si_node_add_input(gn, x);
    gn->act.kind = SI_ACT_HARDSIGMOID;
    gn->act.alpha = si_attr_float(n, "alpha", 0.2f);
    gn->act.beta = si_attr_float(n, "beta", 0.5f);
    return true;
}

static bool convert_leakyrelu(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    (void)b;
    si_node_add_input(gn, x);
    gn->act.kind = SI_ACT_LEAKYRELU;
    gn->act.alpha = si_attr_float(n, "alpha", 0.01f);
    return true;
}

/* The elementwise functions without attributes, by ONNX name. */
static const struct {
    const char *onnx;
    si_act_kind kind;
} unary_kinds[] = {
    {"Erf", SI_ACT_ERF},           {"Tanh", SI_ACT_TANH},
    {"Sqrt", SI_ACT_SQRT},         {"Reciprocal", SI_ACT_RECIPROCAL},
    {"Exp", SI_ACT_EXP},           {"Log", SI_ACT_LOG},
    {"Neg", SI_ACT_NEG},           {"Abs", SI_ACT_ABS},
    {"Sin", SI_ACT_SIN},           {"Cos", SI_ACT_COS},
    {"Floor", SI_ACT_FLOOR},       {"Ceil", SI_ACT_CEIL},
    {"Round", SI_ACT_ROUND},       {"Sign", SI_ACT_SIGN},
    {"Softplus", SI_ACT_SOFTPLUS}, {"Mish", SI_ACT_MISH},
    {"IsNaN", SI_ACT_ISNAN},
};

static bool convert_unary(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    (void)b;
    si_node_add_input(gn, x);
    for (size_t i = 0; i < sizeof unary_kinds / sizeof unary_kinds[0]; i++)
        if (!strcmp(n->op_type, unary_kinds[i].onnx)) gn->act.kind = unary_kinds[i].kind;
    SI_ASSERT(gn->act.kind != SI_ACT_NONE); /* only the rows below name this converter */
    return true;
}

static bool convert_gelu(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    const si_attr *ap = si_node_attr(n, "approximate");
    const char *mode = ap && ap->s ? ap->s : "none";
    if (!strcmp(mode, "none"))
        gn->act.kind = SI_ACT_GELU;
    else if (!strcmp(mode, "tanh"))
        gn->act.kind = SI_ACT_GELU_TANH;
    else {
        si_b_unsupported(b, n, "approximate '%s' is not a valid value (none or tanh)", mode);
        return false;
    }
    si_node_add_input(gn, x);
    return true;
}

static bool convert_isinf(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    (void)b;
    si_node_add_input(gn, x);
    gn->act.kind = SI_ACT_ISINF;
    gn->act.alpha = si_attr_int(n, "detect_positive", 1) != 0;
    gn->act.beta = si_attr_int(n, "detect_negative", 1) != 0;
    return true;
}

/* Where on image data, in the one form exporters write there: Where(IsNaN(x), c, x) with c a
 * scalar constant (torch's SDPA decomposition zeroes the NaN of a fully masked row so), which
 * is x with its NaN replaced by c. Its IsNaN dies unread. */
static bool convert_where(si_builder *b, const si_node_proto *n, si_gnode *gn, int cond) {
    const si_graph *g = b->g;
    int c = si_b_input(b, n, 1), y = si_b_input(b, n, 2);
    int p = g->values[cond].producer;
    const si_gnode *isnan = p >= 0 ? &g->nodes[p] : NULL;
    const si_value *cv = c >= 0 ? &g->values[c] : NULL;
    if (!isnan || isnan->op != SI_OP_ACTIVATION || isnan->act.kind != SI_ACT_ISNAN ||
        isnan->in[0] != y || !cv || cv->kind != SI_VAL_CONST || !cv->data ||
        si_shape_numel(&cv->shape) != 1) {
        si_b_unsupported(b, n,
                         "on image data only Where(IsNaN(x), c, x) with c a scalar constant "
                         "(NaN replaced by c) is supported");
        return false;
    }
    gn->op = SI_OP_ACTIVATION;
    gn->act.kind = SI_ACT_NAN_TO;
    gn->act.alpha = (float)si_value_f64(cv, 0);
    si_node_add_input(gn, y);
    return true;
}

/* Clip's bound i (1 min, 2 max): a constant (folded ones too) is read now; a value that follows
 * from shapes becomes parameter slot i - 1, read at every shape inference (infer_act); one
 * computed from image data is refused. */
static bool clip_bound(si_builder *b, const si_node_proto *n, si_gnode *gn, int i, float *out) {
    int id = si_b_input(b, n, i);
    if (id < 0) return true;
    const si_value *v = &b->g->values[id];
    if (v->kind == SI_VAL_HOST) return si_imp_add_param(b, n, gn, i, &gn->pslot[i - 1]);
    if (v->kind != SI_VAL_CONST || si_shape_numel(&v->shape) != 1) {
        si_b_unsupported(b, n,
                         "bound %d ('%s') must be a scalar that is a constant or follows "
                         "from shapes, not one computed from image data",
                         i, n->inputs[i]);
        return false;
    }
    *out = (float)si_value_f64(v, 0);
    return true;
}

/* Clip's bounds: attributes before opset 11, scalar inputs after. */
static bool convert_clip(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    si_node_add_input(gn, x);
    gn->act.kind = SI_ACT_CLIP;
    if (b->m->opset < 11) {
        gn->act.lo = si_attr_float(n, "min", -FLT_MAX);
        gn->act.hi = si_attr_float(n, "max", FLT_MAX);
        return true;
    }
    gn->act.lo = -INFINITY;
    gn->act.hi = INFINITY;
    return clip_bound(b, n, gn, 1, &gn->act.lo) && clip_bound(b, n, gn, 2, &gn->act.hi);
}

/* The attributes and outputs of a BatchNormalization that only inference supports. */
static bool batchnorm_is_inference(si_builder *b, const si_node_proto *n) {
    if (si_attr_int(n, "training_mode", 0) != 0) {
        si_b_unsupported(b, n, "training_mode = 1 (only inference is supported)");
        return false;
    }
    for (int i = 1; i < n->n_outputs; i++)
        if (n->outputs[i][0]) {
            si_b_unsupported(b, n, "training outputs (running statistics) are not supported");
            return false;
        }
    if (b->m->opset < 9 && si_attr_int(n, "spatial", 1) == 0) {
        si_b_unsupported(b, n, "spatial = 0 is not supported");
        return false;
    }
    return true;
}

/* A constant of the builder: `name` with c floats (owned by the value from now on). */
static int add_const_vector(si_builder *b, const char *name, float *data, int64_t c) {
    int id = si_b_add_value(b, name);
    si_value *v = &b->g->values[id];
    v->kind = SI_VAL_CONST;
    v->shape = (si_shape){.ndim = 1, .dims = {c}};
    v->data = data;
    return id;
}

/* Statistics folded into scale and shift now; the Conv folding pass reuses them. */
static bool convert_batchnorm(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    if (!batchnorm_is_inference(b, n)) return false;
    const si_value *p[4];
    for (int i = 0; i < 4; i++)
        if (!(p[i] = si_imp_const_in(b, n, i + 1)) || p[i]->dtype != SI_DT_FLOAT) {
            si_b_unsupported(b, n, "scale, B, mean and var must be float constants");
            return false;
        }
    int64_t c = si_shape_numel(&p[0]->shape);
    for (int i = 1; i < 4; i++)
        if (si_shape_numel(&p[i]->shape) != c) {
            si_b_unsupported(b, n, "scale, B, mean and var differ in length");
            return false;
        }
    float eps = si_attr_float(n, "epsilon", 1e-5f);
    float *scale = si_xmalloc(sizeof(float) * (size_t)(c ? c : 1));
    float *shift = si_xmalloc(sizeof(float) * (size_t)(c ? c : 1));
    const float *gam = p[0]->data, *bet = p[1]->data, *mean = p[2]->data, *var = p[3]->data;
    for (int64_t i = 0; i < c; i++) {
        scale[i] = (float)((double)gam[i] / sqrt((double)var[i] + (double)eps));
        shift[i] = (float)((double)bet[i] - (double)mean[i] * scale[i]);
    }
    char nm[600];
    snprintf(nm, sizeof nm, "%s/scale", n->name);
    int sid = add_const_vector(b, nm, scale, c);
    snprintf(nm, sizeof nm, "%s/shift", n->name);
    int hid = add_const_vector(b, nm, shift, c);
    si_node_add_input(gn, x);
    si_node_add_input(gn, sid);
    si_node_add_input(gn, hid);
    return true;
}

static bool convert_softmax(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    int64_t opset = b->m->opset;
    gn->legacy_axis = opset < 13;
    gn->axis = (int)si_attr_int(n, "axis", opset < 13 ? 1 : -1);
    si_node_add_input(gn, x);
    return true;
}

static bool convert_reduce(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    const char *op = n->op_type;
    gn->reduce_op = !strcmp(op, "ReduceMean")        ? SI_REDUCE_MEAN
                    : !strcmp(op, "ReduceSum")       ? SI_REDUCE_SUM
                    : !strcmp(op, "ReduceMax")       ? SI_REDUCE_MAX
                    : !strcmp(op, "ReduceL1")        ? SI_REDUCE_L1
                    : !strcmp(op, "ReduceL2")        ? SI_REDUCE_L2
                    : !strcmp(op, "ReduceSumSquare") ? SI_REDUCE_SUMSQUARE
                                                     : SI_REDUCE_MIN;
    gn->keepdims = (int)si_attr_int(n, "keepdims", 1);
    gn->noop_with_empty_axes = (int)si_attr_int(n, "noop_with_empty_axes", 0);
    si_node_add_input(gn, x);
    int64_t opset = b->m->opset;
    bool axes_input = gn->reduce_op == SI_REDUCE_SUM ? opset >= 13 : opset >= 18;
    if (axes_input) return si_imp_add_param(b, n, gn, 1, &gn->pslot[0]);
    if (!si_imp_store_attr_ints(b, n, gn, "axes")) return false;
    gn->split_from_attr = si_node_attr_ints(n, "axes") != NULL;
    return true;
}

static bool convert_global_maxpool(si_builder *b, const si_node_proto *n, si_gnode *gn, int x) {
    (void)b;
    (void)n;
    gn->reduce_op = SI_REDUCE_MAX;
    gn->keepdims = 1;
    gn->axis = -2; /* all spatial dims, resolved at infer */
    si_node_add_input(gn, x);
    return true;
}

/* --- shape inference ------------------------------------------------------------------------ */
static si_status infer_gemm(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    const si_shape *bs = &g->values[n->in[1]].shape;
    if (x->ndim != 2 || bs->ndim != 2)
        return si_node_error(g, n, SI_ERR_FORMAT, "A and B must be matrices (ranks %d, %d)",
                             x->ndim, bs->ndim);
    int64_t m = n->trans_a ? x->dims[1] : x->dims[0], k = n->trans_a ? x->dims[0] : x->dims[1];
    int64_t kb = n->trans_b ? bs->dims[1] : bs->dims[0];
    int64_t nn = n->trans_b ? bs->dims[0] : bs->dims[1];
    if (k != kb)
        return si_node_error(g, n, SI_ERR_FORMAT, "inner dimensions differ (%lld vs %lld)",
                             (long long)k, (long long)kb);
    if (n->n_in > 2) {
        const si_shape *c = &g->values[n->in[2]].shape;
        int64_t cm = c->ndim == 2 ? c->dims[0] : 1;
        int64_t cn = c->ndim >= 1 ? c->dims[c->ndim - 1] : 1;
        if (c->ndim > 2 || (cm != 1 && cm != m) || (cn != 1 && cn != nn))
            return si_node_error(g, n, SI_ERR_FORMAT, "C cannot be broadcast to (%lld, %lld)",
                                 (long long)m, (long long)nn);
    }
    *y = (si_shape){.ndim = 2, .dims = {m, nn}};
    return SI_OK;
}

/* Numpy matmul: 1-D operands promoted and the added dim dropped, batch dims broadcast. */
static si_status infer_matmul(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    si_shape a = *x, b2 = g->values[n->in[1]].shape;
    if (a.ndim < 1 || b2.ndim < 1) return si_node_error(g, n, SI_ERR_FORMAT, "MatMul of a scalar");
    bool a1 = a.ndim == 1, b1 = b2.ndim == 1;
    if (a1) a = (si_shape){.ndim = 2, .dims = {1, a.dims[0]}};
    if (b1) b2 = (si_shape){.ndim = 2, .dims = {b2.dims[0], 1}};
    if (a.dims[a.ndim - 1] != b2.dims[b2.ndim - 2])
        return si_node_error(g, n, SI_ERR_FORMAT, "inner dimensions differ (%lld vs %lld)",
                             (long long)a.dims[a.ndim - 1], (long long)b2.dims[b2.ndim - 2]);
    si_shape ab = a, bb = b2, yb;
    ab.ndim -= 2;
    bb.ndim -= 2;
    si_status st = si_imp_broadcast(g, n, &ab, &bb, &yb);
    if (st != SI_OK) return st;
    *y = yb;
    if (!a1) y->dims[y->ndim++] = a.dims[a.ndim - 2];
    if (!b1) y->dims[y->ndim++] = b2.dims[b2.ndim - 1];
    return SI_OK;
}

static si_status infer_binary(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    return si_imp_broadcast(g, n, x, &g->values[n->in[1]].shape, y);
}

/* An activation: its input's shape; Clip's bounds that follow from shapes (parameter slots 0
 * and 1) read for this batch. */
static si_status infer_act(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    float *bound[2] = {&n->act.lo, &n->act.hi};
    for (int k = 0; k < 2; k++) {
        const si_value *v = si_imp_param(g, n, k);
        if (!v) continue;
        if (si_value_numel(v) != 1 || !v->data)
            return si_node_error(g, n, SI_ERR_FORMAT, "bound %d has %lld values, not one", k + 1,
                                 (long long)si_value_numel(v));
        *bound[k] = (float)si_value_f64(v, 0);
    }
    *y = *x;
    return SI_OK;
}

static si_status infer_affine(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    if (x->ndim < 2 || x->dims[1] != si_shape_numel(&g->values[n->in[1]].shape))
        return si_node_error(g, n, SI_ERR_FORMAT,
                             "channel count differs from the statistics' length");
    *y = *x;
    return SI_OK;
}

static si_status infer_softmax(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    int a = si_imp_norm_axis(n->axis, x->ndim);
    if (a < 0 || a >= x->ndim)
        return si_node_error(g, n, SI_ERR_FORMAT, "axis %d out of range", n->axis);
    *y = *x;
    return SI_OK;
}

static si_status infer_reduce(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    int64_t axes[2 * SI_MAX_DIMS];
    int k;
    memset(n->reduce_mask, 0, sizeof n->reduce_mask);
    if (n->axis == -2) { /* GlobalMaxPool: every spatial dim */
        k = 0;
        for (int d = 2; d < x->ndim; d++) axes[k++] = d;
    } else {
        k = si_imp_read_axes(g, n, axes);
    }
    if (k <= 0) {
        if (n->noop_with_empty_axes) {
            *y = *x;
            return SI_OK;
        }
        for (int d = 0; d < x->ndim; d++) n->reduce_mask[d] = 1;
    }
    for (int i = 0; i < k; i++) {
        int a = si_imp_norm_axis(axes[i], x->ndim);
        if (a < 0 || a >= x->ndim)
            return si_node_error(g, n, SI_ERR_FORMAT, "invalid axis %lld", (long long)axes[i]);
        n->reduce_mask[a] = 1;
    }
    y->ndim = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (!n->reduce_mask[d])
            y->dims[y->ndim++] = x->dims[d];
        else if (n->keepdims)
            y->dims[y->ndim++] = 1;
    }
    return SI_OK;
}

#define ACT(name, fn)                                                                              \
    { .onnx = name, .kind = SI_OP_ACTIVATION, .convert = fn, .infer = infer_act }
#define BIN(name)                                                                                  \
    { .onnx = name, .kind = SI_OP_BINARY, .convert = convert_binary, .infer = infer_binary }
#define REDUCE(name)                                                                               \
    { .onnx = name, .kind = SI_OP_REDUCE, .convert = convert_reduce, .infer = infer_reduce }

const si_import_row si_import_math_rows[] = {
    {.onnx = "Gemm", .kind = SI_OP_GEMM, .convert = convert_gemm, .infer = infer_gemm},
    {.onnx = "MatMul", .kind = SI_OP_MATMUL, .convert = convert_matmul, .infer = infer_matmul},
    BIN("Add"),
    BIN("Sub"),
    BIN("Mul"),
    BIN("Div"),
    BIN("Pow"),
    {.onnx = "Min", .kind = SI_OP_BINARY, .convert = convert_minmax, .infer = infer_binary},
    {.onnx = "Max", .kind = SI_OP_BINARY, .convert = convert_minmax, .infer = infer_binary},
    ACT("Relu", convert_relu),
    ACT("Sigmoid", convert_sigmoid),
    ACT("HardSigmoid", convert_hardsigmoid),
    ACT("HardSwish", convert_hardswish),
    ACT("LeakyRelu", convert_leakyrelu),
    ACT("Clip", convert_clip),
    ACT("Erf", convert_unary),
    ACT("Tanh", convert_unary),
    ACT("Sqrt", convert_unary),
    ACT("Reciprocal", convert_unary),
    ACT("Exp", convert_unary),
    ACT("Log", convert_unary),
    ACT("Neg", convert_unary),
    ACT("Abs", convert_unary),
    ACT("Sin", convert_unary),
    ACT("Cos", convert_unary),
    ACT("Floor", convert_unary),
    ACT("Ceil", convert_unary),
    ACT("Round", convert_unary),
    ACT("Sign", convert_unary),
    ACT("Softplus", convert_unary),
    ACT("Mish", convert_unary),
    ACT("IsNaN", convert_unary),
    ACT("IsInf", convert_isinf),
    ACT("Where", convert_where),
    ACT("Gelu", convert_gelu),
    {.onnx = "BatchNormalization",
     .kind = SI_OP_AFFINE,
     .convert = convert_batchnorm,
     .infer = infer_affine},
    {.onnx = "Softmax", .kind = SI_OP_SOFTMAX, .convert = convert_softmax, .infer = infer_softmax},
    REDUCE("ReduceMean"),
    REDUCE("ReduceSum"),
    REDUCE("ReduceMax"),
    REDUCE("ReduceMin"),
    REDUCE("ReduceL1"),
    REDUCE("ReduceL2"),
    REDUCE("ReduceSumSquare"),
    {.onnx = "GlobalMaxPool",
     .kind = SI_OP_REDUCE,
     .convert = convert_global_maxpool,
     .infer = infer_reduce},
    {.onnx = NULL},
};
