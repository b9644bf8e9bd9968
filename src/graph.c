/* Building the executable graph from ONNX: op conversion with attribute checks, constant
 * conversion, BatchNorm folding, activation fusion and shape inference. */
#include "graph.h"

#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *si_op_name(int op) {
    static const char *names[] = {
        "Conv", "MaxPool", "GlobalAveragePool", "Gemm", "Binary", "Activation", "Affine", "View"};
    return op >= 0 && op < SI_OP_COUNT ? names[op] : "?";
}

int64_t si_shape_numel(const si_shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= s->dims[i];
    return n;
}

/* --- name -> value id: open addressing over FNV-1a -------------------------------------------- */
typedef struct {
    int *slots, cap;
    si_graph *g;
} name_map;

static uint64_t fnv(const char *s) {
    uint64_t h = 1469598103934665603ull;
    while (*s) h = (h ^ (uint8_t)*s++) * 1099511628211ull;
    return h;
}

static int map_find(name_map *mp, const char *name) {
    for (uint64_t i = fnv(name) & (uint64_t)(mp->cap - 1);; i = (i + 1) & (uint64_t)(mp->cap - 1)) {
        int v = mp->slots[i];
        if (v < 0) return -1;
        if (!strcmp(mp->g->values[v].name, name)) return v;
    }
}

static void map_put(name_map *mp, int id) {
    uint64_t i = fnv(mp->g->values[id].name) & (uint64_t)(mp->cap - 1);
    while (mp->slots[i] >= 0) i = (i + 1) & (uint64_t)(mp->cap - 1);
    mp->slots[i] = id;
}

/* --- building -----------------------------------------------------------------------------------
 */
typedef struct {
    si_graph *g;
    name_map map;
    int cap_values;
    const si_model_proto *m;
    char *unsupported; /* accumulated "node (op): reason" list */
    size_t unsup_len;
    int n_unsupported;
} builder;

static int add_value(builder *b, const char *name) {
    si_graph *g = b->g;
    SI_ASSERT(g->n_values < b->cap_values);
    int id = g->n_values++;
    si_value *v = &g->values[id];
    memset(v, 0, sizeof *v);
    v->name = si_xstrdup(name);
    v->producer = -1;
    v->dtype = SI_DT_FLOAT;
    map_put(&b->map, id);
    return id;
}

static void unsupported(builder *b, const si_node_proto *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void unsupported(builder *b, const si_node_proto *n, const char *fmt, ...) {
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    char line[1024];
    int len = snprintf(line, sizeof line, "\n  node '%s' (%s): %s", n->name, n->op_type, reason);
    if (len < 0) return;
    if ((size_t)len >= sizeof line) len = (int)sizeof line - 1;
    b->unsupported = si_xrealloc(b->unsupported, b->unsup_len + (size_t)len + 1);
    memcpy(b->unsupported + b->unsup_len, line, (size_t)len + 1);
    b->unsup_len += (size_t)len;
    b->n_unsupported++;
}

/* Makes a constant value from a tensor: float types become float32, integer types int64. */
static si_status const_from_tensor(builder *b, const si_tensor *t, const char *name, int *out) {
    int id = add_value(b, name);
    si_value *v = &b->g->values[id];
    v->is_const = true;
    v->shape.ndim = t->ndim;
    memcpy(v->shape.dims, t->dims, sizeof(int64_t) * (size_t)t->ndim);
    int64_t n = t->numel;
    switch (t->dtype) {
    case SI_DT_FLOAT:
    case SI_DT_DOUBLE:
    case SI_DT_FLOAT16: {
        v->dtype = SI_DT_FLOAT;
        float *d = si_xmalloc(sizeof(float) * (size_t)(n ? n : 1));
        for (int64_t i = 0; i < n; i++) {
            if (t->dtype == SI_DT_FLOAT)
                d[i] = ((const float *)t->data)[i];
            else if (t->dtype == SI_DT_DOUBLE)
                d[i] = (float)((const double *)t->data)[i];
            else {
                uint16_t h = ((const uint16_t *)t->data)[i];
                int e = (h >> 10) & 31, f = h & 1023;
                float val = e == 0    ? ldexpf((float)f, -24)
                            : e == 31 ? (f ? NAN : INFINITY)
                                      : ldexpf((float)(f | 1024), e - 25);
                d[i] = (h & 0x8000) ? -val : val;
            }
        }
        v->data = d;
        break;
    }
    case SI_DT_INT64:
    case SI_DT_INT32:
    case SI_DT_INT8:
    case SI_DT_UINT8:
    case SI_DT_INT16:
    case SI_DT_BOOL:
    case SI_DT_UINT16:
    case SI_DT_UINT32: {
        v->dtype = SI_DT_INT64;
        int64_t *d = si_xmalloc(sizeof(int64_t) * (size_t)(n ? n : 1));
        for (int64_t i = 0; i < n; i++) {
            switch (t->dtype) {
            case SI_DT_INT64: d[i] = ((const int64_t *)t->data)[i]; break;
            case SI_DT_INT32: d[i] = ((const int32_t *)t->data)[i]; break;
            case SI_DT_INT8: d[i] = ((const int8_t *)t->data)[i]; break;
            case SI_DT_INT16: d[i] = ((const int16_t *)t->data)[i]; break;
            case SI_DT_UINT16: d[i] = ((const uint16_t *)t->data)[i]; break;
            case SI_DT_UINT32: d[i] = ((const uint32_t *)t->data)[i]; break;
            default: d[i] = ((const uint8_t *)t->data)[i];
            }
        }
        v->data = d;
        break;
    }
    default:
        return si_error(SI_ERR_UNSUPPORTED, "%s: constant '%s' has type %s, not supported",
                        b->m->path, name, si_dtype_name(t->dtype));
    }
    *out = id;
    return SI_OK;
}

static int64_t attr_i(const si_node_proto *n, const char *name, int64_t def) {
    const si_attr *a = si_node_attr(n, name);
    return a ? a->i : def;
}

static float attr_f(const si_node_proto *n, const char *name, float def) {
    const si_attr *a = si_node_attr(n, name);
    return a ? a->f : def;
}

/* Reads a 2-element spatial list attribute (kernel_shape, strides, dilations). */
static bool attr_pair(builder *b, const si_node_proto *n, const char *name, int *y, int *x,
                      int def) {
    const si_attr *a = si_node_attr(n, name);
    *y = *x = def;
    if (!a) return true;
    if (a->n != 2) {
        unsupported(b, n, "%s has %d values; only 2-D (N, C, H, W) is supported", name, a->n);
        return false;
    }
    if (a->ints[0] < 1 || a->ints[1] < 1 || a->ints[0] > 65535 || a->ints[1] > 65535) {
        unsupported(b, n, "%s = [%lld, %lld] is out of range", name, (long long)a->ints[0],
                    (long long)a->ints[1]);
        return false;
    }
    *y = (int)a->ints[0];
    *x = (int)a->ints[1];
    return true;
}

/* Conv and MaxPool windows: kernel_shape, strides, dilations, pads, auto_pad. */
static bool parse_window(builder *b, const si_node_proto *n, si_gnode *gn, bool need_kernel) {
    bool ok = attr_pair(b, n, "strides", &gn->win.sh, &gn->win.sw, 1) &&
              attr_pair(b, n, "dilations", &gn->win.dh, &gn->win.dw, 1);
    if (!ok) return false;
    gn->win.kh = gn->win.kw = 0;
    if (si_node_attr(n, "kernel_shape")) {
        if (!attr_pair(b, n, "kernel_shape", &gn->win.kh, &gn->win.kw, 1)) return false;
    } else if (need_kernel) {
        unsupported(b, n, "kernel_shape is required");
        return false;
    }
    const si_attr *pads = si_node_attr(n, "pads");
    memset(gn->win.pads, 0, sizeof gn->win.pads);
    if (pads) {
        if (pads->n != 4) {
            unsupported(b, n, "pads has %d values; only 2-D is supported", pads->n);
            return false;
        }
        /* ONNX order: [top, left, bottom, right] = [x1_begin, x2_begin, x1_end, x2_end] */
        for (int i = 0; i < 4; i++) {
            if (pads->ints[i] < 0 || pads->ints[i] > 65535) {
                unsupported(b, n, "pads value %lld is out of range", (long long)pads->ints[i]);
                return false;
            }
            gn->win.pads[i] = (int)pads->ints[i];
        }
    }
    const si_attr *ap = si_node_attr(n, "auto_pad");
    gn->win.auto_pad = SI_PAD_NOTSET;
    if (ap && ap->s) {
        if (!strcmp(ap->s, "SAME_UPPER"))
            gn->win.auto_pad = SI_PAD_SAME_UPPER;
        else if (!strcmp(ap->s, "SAME_LOWER"))
            gn->win.auto_pad = SI_PAD_SAME_LOWER;
        else if (!strcmp(ap->s, "VALID"))
            gn->win.auto_pad = SI_PAD_VALID;
        else if (strcmp(ap->s, "NOTSET") && ap->s[0]) {
            unsupported(b, n, "auto_pad '%s' is not a valid value", ap->s);
            return false;
        }
    }
    return true;
}

/* Looks up a node input; -1 if it names nothing defined yet (reported by the caller). */
static int input_id(builder *b, const si_node_proto *n, int i) {
    if (i >= n->n_inputs || !n->inputs[i][0]) return -1;
    return map_find(&b->map, n->inputs[i]);
}

static const si_value *const_input(builder *b, const si_node_proto *n, int i) {
    int id = input_id(b, n, i);
    return id >= 0 && b->g->values[id].is_const ? &b->g->values[id] : NULL;
}

/* Scalar of a constant float input (Clip's bounds from opset 11). */
static bool const_scalar(builder *b, const si_node_proto *n, int i, float *out, bool *present) {
    *present = false;
    if (i >= n->n_inputs || !n->inputs[i][0]) return true;
    const si_value *v = const_input(b, n, i);
    if (!v) {
        unsupported(b, n, "input %d ('%s') must be a constant", i, n->inputs[i]);
        return false;
    }
    if (si_shape_numel(&v->shape) != 1 || v->dtype != SI_DT_FLOAT) {
        unsupported(b, n, "input %d ('%s') must be a float scalar", i, n->inputs[i]);
        return false;
    }
    *out = ((const float *)v->data)[0];
    *present = true;
    return true;
}

static si_gnode *new_node(builder *b, const si_node_proto *n, int op) {
    si_graph *g = b->g;
    si_gnode *gn = &g->nodes[g->n_nodes];
    memset(gn, 0, sizeof *gn);
    gn->op = op;
    gn->name = si_xstrdup(n->name);
    gn->op_type = si_xstrdup(n->op_type);
    gn->out = -1;
    return gn;
}

/* Converts one ONNX node. Returns false if unsupported (recorded, building goes on). */
static bool convert_inner(builder *b, const si_node_proto *n);
static bool convert_node(builder *b, const si_node_proto *n) {
    si_gnode *slot = &b->g->nodes[b->g->n_nodes];
    memset(slot, 0, sizeof *slot);
    if (convert_inner(b, n)) return true;
    free(slot->name); /* a node abandoned midway */
    free(slot->op_type);
    memset(slot, 0, sizeof *slot);
    return false;
}

static bool convert_inner(builder *b, const si_node_proto *n) {
    const char *op = n->op_type;
    int64_t opset = b->m->opset;
    if (n->domain[0] && strcmp(n->domain, "ai.onnx")) {
        unsupported(b, n, "operator domain '%s' is not supported", n->domain);
        return false;
    }
    /* every named input must already be defined: ONNX requires topological order, and a cycle
     * or a missing initializer shows up here */
    for (int i = 0; i < n->n_inputs; i++) {
        if (n->inputs[i][0] && input_id(b, n, i) < 0) {
            unsupported(b, n,
                        "input '%s' is not produced by any earlier node, initializer or "
                        "graph input (missing initializer, cycle or unsorted graph)",
                        n->inputs[i]);
            return false;
        }
    }
    si_gnode *gn;
    int x = input_id(b, n, 0);
    if (!strcmp(op, "Conv")) {
        gn = new_node(b, n, SI_OP_CONV);
        if (!parse_window(b, n, gn, false)) return false;
        gn->win.group = (int)attr_i(n, "group", 1);
        int w = input_id(b, n, 1);
        if (x < 0 || w < 0) {
            unsupported(b, n, "needs inputs X and W");
            return false;
        }
        const si_value *wv = &b->g->values[w];
        if (wv->shape.ndim != 4) {
            unsupported(b, n,
                        "weight '%s' has rank %d; only 2-D convolution (rank-4 weights) "
                        "is supported",
                        n->inputs[1], wv->shape.ndim);
            return false;
        }
        if (gn->win.group < 1) {
            unsupported(b, n, "group = %d is invalid", gn->win.group);
            return false;
        }
        if (gn->win.kh && (gn->win.kh != wv->shape.dims[2] || gn->win.kw != wv->shape.dims[3])) {
            unsupported(b, n, "kernel_shape disagrees with the weight's shape");
            return false;
        }
        gn->win.kh = (int)wv->shape.dims[2];
        gn->win.kw = (int)wv->shape.dims[3];
        gn->in[0] = x, gn->in[1] = w, gn->n_in = 2;
        int bias = input_id(b, n, 2);
        if (bias >= 0) gn->in[gn->n_in++] = bias;
    } else if (!strcmp(op, "MaxPool")) {
        gn = new_node(b, n, SI_OP_MAXPOOL);
        if (!parse_window(b, n, gn, true)) return false;
        gn->win.ceil_mode = (int)attr_i(n, "ceil_mode", 0);
        if (attr_i(n, "storage_order", 0) != 0 || (n->n_outputs > 1 && n->outputs[1][0])) {
            unsupported(b, n, "the Indices output is not supported");
            return false;
        }
        gn->in[0] = x, gn->n_in = 1;
    } else if (!strcmp(op, "GlobalAveragePool")) {
        gn = new_node(b, n, SI_OP_GLOBAL_AVGPOOL);
        gn->in[0] = x, gn->n_in = 1;
    } else if (!strcmp(op, "Gemm")) {
        gn = new_node(b, n, SI_OP_GEMM);
        gn->trans_a = (int)attr_i(n, "transA", 0);
        gn->trans_b = (int)attr_i(n, "transB", 0);
        gn->alpha = attr_f(n, "alpha", 1.f);
        gn->beta = attr_f(n, "beta", 1.f);
        gn->in[0] = x, gn->in[1] = input_id(b, n, 1), gn->n_in = 2;
        int c = input_id(b, n, 2);
        if (c >= 0) gn->in[gn->n_in++] = c;
    } else if (!strcmp(op, "Add") || !strcmp(op, "Sub") || !strcmp(op, "Mul") ||
               !strcmp(op, "Div")) {
        if (opset < 7 && attr_i(n, "broadcast", 0) && si_node_attr(n, "axis")) {
            unsupported(b, n, "legacy broadcast with an axis attribute (opset < 7)");
            return false;
        }
        gn = new_node(b, n, SI_OP_BINARY);
        gn->binop = op[0] == 'A'   ? SI_BIN_ADD
                    : op[0] == 'S' ? SI_BIN_SUB
                    : op[0] == 'M' ? SI_BIN_MUL
                                   : SI_BIN_DIV;
        gn->in[0] = x, gn->in[1] = input_id(b, n, 1), gn->n_in = 2;
    } else if (!strcmp(op, "Relu")) {
        gn = new_node(b, n, SI_OP_ACTIVATION);
        gn->act.kind = SI_ACT_RELU;
        gn->in[0] = x, gn->n_in = 1;
    } else if (!strcmp(op, "Clip")) {
        gn = new_node(b, n, SI_OP_ACTIVATION);
        gn->act.kind = SI_ACT_CLIP;
        if (opset < 11) {
            gn->act.lo = attr_f(n, "min", -FLT_MAX);
            gn->act.hi = attr_f(n, "max", FLT_MAX);
        } else {
            bool has;
            gn->act.lo = -INFINITY;
            gn->act.hi = INFINITY;
            if (!const_scalar(b, n, 1, &gn->act.lo, &has)) return false;
            if (!const_scalar(b, n, 2, &gn->act.hi, &has)) return false;
        }
        gn->in[0] = x, gn->n_in = 1;
    } else if (!strcmp(op, "BatchNormalization")) {
        if (attr_i(n, "training_mode", 0) != 0) {
            unsupported(b, n, "training_mode = 1 (only inference is supported)");
            return false;
        }
        for (int i = 1; i < n->n_outputs; i++)
            if (n->outputs[i][0]) {
                unsupported(b, n, "training outputs (running statistics) are not supported");
                return false;
            }
        if (opset < 9 && attr_i(n, "spatial", 1) == 0) {
            unsupported(b, n, "spatial = 0 is not supported");
            return false;
        }
        const si_value *p[4];
        for (int i = 0; i < 4; i++) {
            if (!(p[i] = const_input(b, n, i + 1)) || p[i]->dtype != SI_DT_FLOAT) {
                unsupported(b, n, "scale, B, mean and var must be float constants");
                return false;
            }
        }
        int64_t c = si_shape_numel(&p[0]->shape);
        for (int i = 1; i < 4; i++)
            if (si_shape_numel(&p[i]->shape) != c) {
                unsupported(b, n, "scale, B, mean and var differ in length");
                return false;
            }
        /* fold the statistics into scale and shift now; the Conv folding pass reuses them */
        float eps = attr_f(n, "epsilon", 1e-5f);
        float *scale = si_xmalloc(sizeof(float) * (size_t)c),
              *shift = si_xmalloc(sizeof(float) * (size_t)c);
        const float *gam = p[0]->data, *bet = p[1]->data, *mean = p[2]->data, *var = p[3]->data;
        for (int64_t i = 0; i < c; i++) {
            scale[i] = (float)((double)gam[i] / sqrt((double)var[i] + (double)eps));
            shift[i] = (float)((double)bet[i] - (double)mean[i] * scale[i]);
        }
        char nm[600];
        snprintf(nm, sizeof nm, "%s/scale", n->name);
        int sid = add_value(b, nm);
        snprintf(nm, sizeof nm, "%s/shift", n->name);
        int hid = add_value(b, nm);
        si_value *sv = &b->g->values[sid], *hv = &b->g->values[hid];
        sv->is_const = hv->is_const = true;
        sv->shape.ndim = hv->shape.ndim = 1;
        sv->shape.dims[0] = hv->shape.dims[0] = c;
        sv->data = scale;
        hv->data = shift;
        gn = new_node(b, n, SI_OP_AFFINE);
        gn->in[0] = x, gn->in[1] = sid, gn->in[2] = hid, gn->n_in = 3;
    } else if (!strcmp(op, "Flatten")) {
        gn = new_node(b, n, SI_OP_VIEW);
        gn->is_flatten = true;
        gn->axis = (int)attr_i(n, "axis", 1);
        gn->in[0] = x, gn->n_in = 1;
    } else if (!strcmp(op, "Reshape")) {
        gn = new_node(b, n, SI_OP_VIEW);
        gn->is_reshape = true;
        if (opset < 5) {
            const si_attr *sh = si_node_attr(n, "shape");
            if (!sh || sh->n > SI_MAX_DIMS) {
                unsupported(b, n, "shape attribute missing or too long");
                return false;
            }
            gn->reshape_ndim = sh->n;
            memcpy(gn->reshape, sh->ints, sizeof(int64_t) * (size_t)sh->n);
        } else {
            const si_value *sv = const_input(b, n, 1);
            if (!sv || sv->dtype != SI_DT_INT64 || sv->shape.ndim != 1 ||
                sv->shape.dims[0] > SI_MAX_DIMS) {
                unsupported(b, n,
                            "the target shape must be a constant int64 vector of at most "
                            "%d values",
                            SI_MAX_DIMS);
                return false;
            }
            gn->reshape_ndim = (int)sv->shape.dims[0];
            memcpy(gn->reshape, sv->data, sizeof(int64_t) * (size_t)gn->reshape_ndim);
        }
        gn->allowzero = (int)attr_i(n, "allowzero", 0);
        gn->in[0] = x, gn->n_in = 1;
    } else if (!strcmp(op, "Identity")) {
        gn = new_node(b, n, SI_OP_VIEW);
        gn->in[0] = x, gn->n_in = 1;
    } else {
        unsupported(b, n, "operator not supported");
        return false;
    }
    for (int i = 0; i < gn->n_in; i++) {
        if (gn->in[i] < 0) {
            unsupported(b, n, "a required input is missing");
            return false;
        }
        const si_value *iv = &b->g->values[gn->in[i]];
        if (iv->dtype != SI_DT_FLOAT && !(gn->op == SI_OP_VIEW && i > 0)) {
            unsupported(b, n, "input '%s' has type %s; only float tensors are supported", iv->name,
                        si_dtype_name(iv->dtype));
            return false;
        }
    }
    if (n->n_outputs < 1 || !n->outputs[0][0]) {
        unsupported(b, n, "has no output");
        return false;
    }
    if (map_find(&b->map, n->outputs[0]) >= 0) {
        unsupported(b, n, "output '%s' is produced twice (not a valid SSA graph)", n->outputs[0]);
        return false;
    }
    gn->out = add_value(b, n->outputs[0]);
    b->g->values[gn->out].producer = b->g->n_nodes;
    b->g->n_nodes++;
    return true;
}

bool si_model_input_is_param(const si_model_proto *m, const char *name) {
    bool used = false;
    for (int i = 0; i < m->n_nodes; i++) {
        const si_node_proto *n = &m->nodes[i];
        for (int j = 0; j < n->n_inputs; j++) {
            if (strcmp(n->inputs[j], name)) continue;
            used = true;
            bool param = (!strcmp(n->op_type, "Clip") && j >= 1) ||
                         (!strcmp(n->op_type, "Reshape") && j == 1) ||
                         (!strcmp(n->op_type, "BatchNormalization") && j >= 1);
            if (!param) return false;
        }
    }
    return used;
}

/* --- passes ------------------------------------------------------------------------------------
 */
static void count_uses(si_graph *g) {
    for (int i = 0; i < g->n_values; i++) g->values[i].uses = 0;
    for (int i = 0; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i].n_in; j++) g->values[g->nodes[i].in[j]].uses++;
    for (int i = 0; i < g->n_outputs; i++) g->values[g->outputs[i]].uses++;
}

static char *join_types(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char *s = si_xmalloc(n);
    snprintf(s, n, "%s+%s", a, b);
    return s;
}

/* Node `c` (BatchNorm or activation) is absorbed by its producer p: p writes c's output value
 * (so graph outputs and later readers keep working), and c is marked dead for compact(). */
static void absorb(si_graph *g, si_gnode *p, si_gnode *c) {
    char *t = join_types(p->op_type, c->op_type);
    free(p->op_type);
    p->op_type = t;
    g->values[c->out].producer = g->values[p->out].producer;
    p->out = c->out;
    c->op = -1;
}

/* Conv (constant weights) followed by its only consumer, an inference BatchNormalization:
 * W' = W * scale[m], b' = b * scale[m] + shift[m]. The Conv takes the BN's output name, so
 * graph outputs and later nodes keep working. */
static void fold_batchnorm(si_graph *g) {
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *bn = &g->nodes[j];
        if (bn->op != SI_OP_AFFINE) continue;
        si_value *xv = &g->values[bn->in[0]];
        if (xv->producer < 0 || xv->uses != 1) continue;
        si_gnode *cv = &g->nodes[xv->producer];
        if (cv->op != SI_OP_CONV || cv->act.kind != SI_ACT_NONE) continue;
        si_value *wv = &g->values[cv->in[1]];
        if (!wv->is_const || wv->uses != 1) continue;
        int64_t m = wv->shape.dims[0], per = si_shape_numel(&wv->shape) / (m ? m : 1);
        const float *scale = g->values[bn->in[1]].data, *shift = g->values[bn->in[2]].data;
        if (si_shape_numel(&g->values[bn->in[1]].shape) != m) continue;
        si_value *bv = cv->n_in > 2 ? &g->values[cv->in[2]] : NULL;
        if (bv && (!bv->is_const || bv->uses != 1)) continue;
        float *w = wv->data;
        for (int64_t o = 0; o < m; o++)
            for (int64_t i = 0; i < per; i++) w[o * per + i] *= scale[o];
        if (bv) {
            float *bias = bv->data;
            for (int64_t o = 0; o < m; o++) bias[o] = bias[o] * scale[o] + shift[o];
        } else {
            /* the shift becomes the bias: reuse the BN's shift constant */
            cv->in[cv->n_in++] = bn->in[2];
        }
        absorb(g, cv, bn);
        g->folded_bn++;
    }
}

/* Relu or Clip whose input is produced by a Conv, Gemm or Add with no other reader. */
static void fuse_activations(si_graph *g) {
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *a = &g->nodes[j];
        if (a->op != SI_OP_ACTIVATION) continue;
        si_value *xv = &g->values[a->in[0]];
        if (xv->producer < 0 || xv->uses != 1) continue;
        si_gnode *p = &g->nodes[xv->producer];
        bool can = (p->op == SI_OP_CONV || p->op == SI_OP_BINARY) && p->act.kind == SI_ACT_NONE;
        if (!can) continue;
        p->act = a->act;
        absorb(g, p, a);
        g->fused_act++;
    }
}

static void compact(si_graph *g) {
    int k = 0;
    for (int j = 0; j < g->n_nodes; j++) {
        if (g->nodes[j].op < 0) {
            free(g->nodes[j].name);
            free(g->nodes[j].op_type);
            continue;
        }
        g->nodes[k] = g->nodes[j];
        g->values[g->nodes[k].out].producer = k;
        k++;
    }
    g->n_nodes = k;
}

si_status si_graph_build(const si_model_proto *m, const si_graph_opts *opts, si_graph **out) {
    static const si_graph_opts no_opts;
    if (!opts) opts = &no_opts;
    *out = NULL;
    si_graph *g = si_xcalloc(1, sizeof *g);
    builder b = {.g = g, .m = m};
    g->path = si_xstrdup(m->path);
    g->opset = m->opset;
    /* BatchNorm adds two constants; everything else at most one value per node output */
    b.cap_values = m->n_inits + m->n_inputs + 3 * m->n_nodes + 8;
    g->values = si_xcalloc((size_t)b.cap_values, sizeof *g->values);
    g->nodes = si_xcalloc((size_t)m->n_nodes + 1, sizeof *g->nodes);
    b.map.cap = 16;
    while (b.map.cap < 2 * b.cap_values) b.map.cap *= 2;
    b.map.slots = si_xmalloc(sizeof(int) * (size_t)b.map.cap);
    for (int i = 0; i < b.map.cap; i++) b.map.slots[i] = -1;
    b.map.g = g;
    si_status st = SI_OK;

    for (int i = 0; i < m->n_inits; i++) {
        if (map_find(&b.map, m->inits[i].name ? m->inits[i].name : "") >= 0) continue;
        int id;
        if ((st = const_from_tensor(&b, &m->inits[i], m->inits[i].name ? m->inits[i].name : "",
                                    &id)) != SI_OK)
            goto fail;
    }
    for (int i = 0; i < opts->n_bind; i++) {
        int id;
        if (map_find(&b.map, opts->bind[i].name) >= 0) continue;
        if ((st = const_from_tensor(&b, &opts->bind[i], opts->bind[i].name, &id)) != SI_OK)
            goto fail;
    }
    g->inputs = si_xcalloc((size_t)m->n_inputs + 1, sizeof *g->inputs);
    for (int i = 0; i < m->n_inputs; i++) {
        const si_value_info *vi = &m->inputs[i];
        if (map_find(&b.map, vi->name) >= 0) continue; /* initializer listed as input (IR < 4) */
        if (vi->dtype != SI_DT_FLOAT) {
            st = si_error(SI_ERR_UNSUPPORTED,
                          "%s: graph input '%s' has type %s; only float32 "
                          "tensor inputs are supported",
                          m->path, vi->name, vi->dtype ? si_dtype_name(vi->dtype) : "non-tensor");
            goto fail;
        }
        if (vi->ndim < 0) {
            st = si_error(SI_ERR_UNSUPPORTED, "%s: graph input '%s' has no shape", m->path,
                          vi->name);
            goto fail;
        }
        for (int d = 1; d < vi->ndim; d++)
            if (vi->dims[d] < 0) {
                st = si_error(SI_ERR_UNSUPPORTED,
                              "%s: graph input '%s' has a symbolic dimension '%s' at position %d; "
                              "only the batch dimension (0) may be symbolic",
                              m->path, vi->name, vi->dim_params[d] ? vi->dim_params[d] : "?", d);
                goto fail;
            }
        int id = add_value(&b, vi->name);
        si_value *v = &g->values[id];
        v->is_input = true;
        v->shape.ndim = vi->ndim;
        memcpy(v->shape.dims, vi->dims, sizeof(int64_t) * (size_t)vi->ndim);
        v->batch_dim = vi->ndim > 0 && vi->dims[0] < 0;
        g->inputs[g->n_inputs++] = id;
    }
    for (int i = 0; i < m->n_nodes; i++) convert_node(&b, &m->nodes[i]);
    if (b.n_unsupported) {
        st = si_error(SI_ERR_UNSUPPORTED, "%s: %d unsupported node%s:%s", m->path, b.n_unsupported,
                      b.n_unsupported > 1 ? "s" : "", b.unsupported);
        goto fail;
    }
    g->outputs = si_xcalloc((size_t)m->n_outputs, sizeof *g->outputs);
    for (int i = 0; i < m->n_outputs; i++) {
        int id = map_find(&b.map, m->outputs[i].name);
        if (id < 0) {
            st = si_error(SI_ERR_FORMAT, "%s: graph output '%s' is not produced by any node",
                          m->path, m->outputs[i].name);
            goto fail;
        }
        g->outputs[g->n_outputs++] = id;
    }
    if (g->n_inputs == 0) {
        st = si_error(SI_ERR_UNSUPPORTED, "%s: the graph has no runtime input", m->path);
        goto fail;
    }
    count_uses(g);
    if (!opts->no_fusion) {
        fold_batchnorm(g);
        compact(g);
        count_uses(g);
        fuse_activations(g);
        compact(g);
        count_uses(g);
    }
    g->meta = si_xcalloc((size_t)m->n_meta + 1, sizeof *g->meta);
    for (int i = 0; i < m->n_meta; i++) {
        g->meta[i].key = si_xstrdup(m->meta[i].key);
        g->meta[i].value = si_xstrdup(m->meta[i].value);
    }
    g->n_meta = m->n_meta;
    free(b.map.slots);
    free(b.unsupported);
    *out = g;
    return SI_OK;
fail:
    free(b.map.slots);
    free(b.unsupported);
    si_graph_free(g);
    return st;
}

si_status si_graph_load(const char *path, const si_graph_opts *opts, si_graph **out) {
    si_model_proto *m;
    *out = NULL;
    si_status st = si_model_proto_load(path, &m);
    if (st != SI_OK) return st;
    st = si_graph_build(m, opts, out);
    si_model_proto_free(m);
    return st;
}

void si_graph_free(si_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n_values; i++) {
        free(g->values[i].name);
        free(g->values[i].data);
    }
    for (int i = 0; i < g->n_nodes; i++) {
        free(g->nodes[i].name);
        free(g->nodes[i].op_type);
    }
    for (int i = 0; i < g->n_meta; i++) {
        free(g->meta[i].key);
        free(g->meta[i].value);
    }
    free(g->meta);
    free(g->values);
    free(g->nodes);
    free(g->inputs);
    free(g->outputs);
    free(g->path);
    free(g);
}

const char *si_graph_meta(const si_graph *g, const char *key) {
    for (int i = 0; i < g->n_meta; i++)
        if (!strcmp(g->meta[i].key, key)) return g->meta[i].value;
    return NULL;
}

/* --- shape inference ---------------------------------------------------------------------------
 */
static si_status shape_err(const si_gnode *n, const si_graph *g, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static si_status shape_err(const si_gnode *n, const si_graph *g, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return si_error(SI_ERR_FORMAT, "%s: node '%s' (%s): %s", g->path, n->name, n->op_type, msg);
}

/* Output size and begin/end pads of one spatial axis. */
static bool window_axis(int in, int k, int s, int d, int auto_pad, int ceil_mode, int *pb, int *pe,
                        int *out) {
    int ek = (k - 1) * d + 1;
    if (auto_pad == SI_PAD_SAME_UPPER || auto_pad == SI_PAD_SAME_LOWER) {
        int o = (in + s - 1) / s;
        int total = (o - 1) * s + ek - in;
        if (total < 0) total = 0;
        *pb = auto_pad == SI_PAD_SAME_UPPER ? total / 2 : total - total / 2;
        *pe = total - *pb;
        *out = o;
        return true;
    }
    if (auto_pad == SI_PAD_VALID) *pb = *pe = 0;
    int span = in + *pb + *pe - ek;
    if (span < 0) return false;
    int o = ceil_mode ? (span + s - 1) / s + 1 : span / s + 1;
    /* the last window must start inside the input or its begin padding (PyTorch, onnxruntime) */
    if (ceil_mode && (o - 1) * s >= in + *pb) o--;
    *out = o;
    return true;
}

si_status si_graph_infer(si_graph *g, int batch) {
    for (int i = 0; i < g->n_inputs; i++) {
        si_value *v = &g->values[g->inputs[i]];
        if (v->batch_dim) v->shape.dims[0] = batch;
    }
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *n = &g->nodes[j];
        const si_shape *x = &g->values[n->in[0]].shape;
        si_shape *y = &g->values[n->out].shape;
        switch (n->op) {
        case SI_OP_CONV:
        case SI_OP_MAXPOOL: {
            if (x->ndim != 4)
                return shape_err(n, g, "input has rank %d, expected 4 (N, C, H, W)", x->ndim);
            int pt = n->win.pads[0], pl = n->win.pads[1], pb = n->win.pads[2], pr = n->win.pads[3];
            int oh, ow;
            if (!window_axis((int)x->dims[2], n->win.kh, n->win.sh, n->win.dh, n->win.auto_pad,
                             n->win.ceil_mode, &pt, &pb, &oh) ||
                !window_axis((int)x->dims[3], n->win.kw, n->win.sw, n->win.dw, n->win.auto_pad,
                             n->win.ceil_mode, &pl, &pr, &ow) ||
                oh < 1 || ow < 1)
                return shape_err(n, g, "window %dx%d does not fit the input %lldx%lld", n->win.kh,
                                 n->win.kw, (long long)x->dims[2], (long long)x->dims[3]);
            int64_t m = x->dims[1];
            if (n->op == SI_OP_CONV) {
                const si_shape *w = &g->values[n->in[1]].shape;
                m = w->dims[0];
                if (x->dims[1] % n->win.group || m % n->win.group ||
                    w->dims[1] * n->win.group != x->dims[1])
                    return shape_err(n, g,
                                     "input has %lld channels, weight expects %lld x %d "
                                     "groups",
                                     (long long)x->dims[1], (long long)w->dims[1], n->win.group);
                if (n->n_in > 2 && si_shape_numel(&g->values[n->in[2]].shape) != m)
                    return shape_err(n, g, "bias has %lld values for %lld output channels",
                                     (long long)si_shape_numel(&g->values[n->in[2]].shape),
                                     (long long)m);
                n->conv = (si_conv_shape){(int)x->dims[0],
                                          (int)x->dims[1],
                                          (int)x->dims[2],
                                          (int)x->dims[3],
                                          (int)m,
                                          n->win.kh,
                                          n->win.kw,
                                          n->win.group,
                                          n->win.sh,
                                          n->win.sw,
                                          n->win.dh,
                                          n->win.dw,
                                          pt,
                                          pl,
                                          pb,
                                          pr,
                                          oh,
                                          ow};
            } else {
                n->pool = (si_pool_shape){(int)x->dims[0],
                                          (int)x->dims[1],
                                          (int)x->dims[2],
                                          (int)x->dims[3],
                                          n->win.kh,
                                          n->win.kw,
                                          n->win.sh,
                                          n->win.sw,
                                          n->win.dh,
                                          n->win.dw,
                                          pt,
                                          pl,
                                          pb,
                                          pr,
                                          oh,
                                          ow};
            }
            *y = (si_shape){4, {x->dims[0], m, oh, ow}};
            break;
        }
        case SI_OP_GLOBAL_AVGPOOL:
            if (x->ndim < 3) return shape_err(n, g, "input has rank %d, expected >= 3", x->ndim);
            *y = *x;
            for (int d = 2; d < y->ndim; d++) y->dims[d] = 1;
            break;
        case SI_OP_GEMM: {
            const si_shape *bs = &g->values[n->in[1]].shape;
            if (x->ndim != 2 || bs->ndim != 2)
                return shape_err(n, g, "A and B must be matrices (ranks %d and %d)", x->ndim,
                                 bs->ndim);
            int64_t m = n->trans_a ? x->dims[1] : x->dims[0],
                    k = n->trans_a ? x->dims[0] : x->dims[1];
            int64_t kb = n->trans_b ? bs->dims[1] : bs->dims[0],
                    nn = n->trans_b ? bs->dims[0] : bs->dims[1];
            if (k != kb)
                return shape_err(n, g, "inner dimensions differ (%lld vs %lld)", (long long)k,
                                 (long long)kb);
            if (n->n_in > 2) {
                const si_shape *c = &g->values[n->in[2]].shape;
                int64_t cm = c->ndim == 2 ? c->dims[0] : 1;
                int64_t cn = c->ndim >= 1 ? c->dims[c->ndim - 1] : 1;
                if (c->ndim > 2 || (cm != 1 && cm != m) || (cn != 1 && cn != nn))
                    return shape_err(n, g, "C cannot be broadcast to (%lld, %lld)", (long long)m,
                                     (long long)nn);
            }
            *y = (si_shape){2, {m, nn}};
            break;
        }
        case SI_OP_BINARY: {
            const si_shape *b2 = &g->values[n->in[1]].shape;
            int nd = x->ndim > b2->ndim ? x->ndim : b2->ndim;
            y->ndim = nd;
            for (int d = 0; d < nd; d++) {
                int64_t da = d - (nd - x->ndim) >= 0 ? x->dims[d - (nd - x->ndim)] : 1;
                int64_t db = d - (nd - b2->ndim) >= 0 ? b2->dims[d - (nd - b2->ndim)] : 1;
                if (da != db && da != 1 && db != 1)
                    return shape_err(n, g,
                                     "shapes cannot be broadcast (dimension %d: %lld vs "
                                     "%lld)",
                                     d, (long long)da, (long long)db);
                y->dims[d] = da == 1 ? db : da;
            }
            break;
        }
        case SI_OP_ACTIVATION: *y = *x; break;
        case SI_OP_AFFINE:
            if (x->ndim < 2 || x->dims[1] != si_shape_numel(&g->values[n->in[1]].shape))
                return shape_err(n, g, "channel count differs from the statistics' length");
            *y = *x;
            break;
        case SI_OP_VIEW: {
            int64_t total = si_shape_numel(x);
            if (n->is_flatten) {
                int axis = n->axis < 0 ? n->axis + x->ndim : n->axis;
                if (axis < 0 || axis > x->ndim)
                    return shape_err(n, g, "axis %d out of range for rank %d", n->axis, x->ndim);
                int64_t outer = 1;
                for (int d = 0; d < axis; d++) outer *= x->dims[d];
                *y = (si_shape){2, {outer, outer ? total / outer : 0}};
            } else if (n->is_reshape) {
                y->ndim = n->reshape_ndim;
                int infer = -1;
                int64_t known = 1;
                for (int d = 0; d < n->reshape_ndim; d++) {
                    int64_t v = n->reshape[d];
                    if (v == 0 && !n->allowzero) {
                        if (d >= x->ndim)
                            return shape_err(n, g,
                                             "0 at position %d copies no "
                                             "input dimension",
                                             d);
                        v = x->dims[d];
                        /* a model exported with a fixed batch reshapes to that batch */
                    } else if (v == -1) {
                        if (infer >= 0) return shape_err(n, g, "more than one -1 in the shape");
                        infer = d;
                        v = 1;
                    } else if (v < 0) {
                        return shape_err(n, g, "invalid dimension %lld", (long long)v);
                    }
                    y->dims[d] = v;
                    known *= v;
                }
                if (infer >= 0) {
                    if (known == 0 || total % known)
                        return shape_err(n, g, "cannot infer -1 from %lld elements",
                                         (long long)total);
                    y->dims[infer] = total / known;
                } else if (known != total) {
                    return shape_err(n, g, "target shape holds %lld elements, input %lld",
                                     (long long)known, (long long)total);
                }
            } else {
                *y = *x;
            }
            break;
        }
        default: SI_ASSERT(!"unknown op");
        }
        for (int d = 0; d < y->ndim; d++)
            if (y->dims[d] < 0 || y->dims[d] > ((int64_t)1 << 31))
                return shape_err(n, g, "output dimension %d is out of range", d);
        if (si_shape_numel(y) > ((int64_t)1 << 34))
            return shape_err(n, g, "output of %lld elements is too large",
                             (long long)si_shape_numel(y));
    }
    return SI_OK;
}
