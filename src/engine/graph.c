/* Building the executable graph from ONNX: values, node conversion (device ops through the
 * import table, import.h; shape arithmetic in ops_host.c), then the passes: constant folding
 * (during conversion), dead-node removal, BatchNorm folding, SiLU/activation fusion, residual
 * fusion. And per-batch shape inference. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import.h"
#include "kernel_math.h"

/* By designator: an op added to si_op without its name here is "?" (and, last, fails the
 * count). */
const char *si_op_name(int op) {
    static const char *names[] = {
        [SI_OP_CONV] = "Conv",
        [SI_OP_MAXPOOL] = "MaxPool",
        [SI_OP_AVGPOOL] = "AveragePool",
        [SI_OP_GLOBAL_AVGPOOL] = "GlobalAveragePool",
        [SI_OP_GEMM] = "Gemm",
        [SI_OP_MATMUL] = "MatMul",
        [SI_OP_BINARY] = "Binary",
        [SI_OP_ACTIVATION] = "Activation",
        [SI_OP_AFFINE] = "Affine",
        [SI_OP_VIEW] = "View",
        [SI_OP_CONCAT] = "Concat",
        [SI_OP_SPLIT] = "Split",
        [SI_OP_SLICE] = "Slice",
        [SI_OP_TRANSPOSE] = "Transpose",
        [SI_OP_EXPAND] = "Expand",
        [SI_OP_GATHER] = "Gather",
        [SI_OP_RESIZE] = "Resize",
        [SI_OP_SOFTMAX] = "Softmax",
        [SI_OP_PAD] = "Pad",
        [SI_OP_REDUCE] = "Reduce",
        [SI_OP_HOST] = "Host",
        [SI_OP_LAYERNORM] = "LayerNorm",
        [SI_OP_INSTANCENORM] = "InstanceNorm",
        [SI_OP_ATTENTION] = "Attention",
        [SI_OP_GATHER_ND] = "GatherND",
        [SI_OP_GATHER_ELEMENTS] = "GatherElements",
        [SI_OP_SCATTER_ELEMENTS] = "ScatterElements",
        [SI_OP_ROTARY] = "Rotary",
        [SI_OP_TILE] = "Tile",
        [SI_OP_ROWNORM] = "RowNorm",
    };
    _Static_assert(sizeof names / sizeof names[0] == SI_OP_COUNT, "an si_op without a name");
    _Static_assert(SI_INDEX_MAXD == SI_MAX_DIMS, "the indexing ops' geometry has the graph's rank");
    return op >= 0 && op < SI_OP_COUNT && names[op] ? names[op] : "?";
}

int64_t si_mul_sat(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
    return r;
}

int64_t si_f2i_sat(double v) {
    if (v != v) return 0; /* NaN */
    if (v >= 9.2e18) return INT64_MAX;
    if (v <= -9.2e18) return INT64_MIN;
    return (int64_t)v;
}

int64_t si_shape_numel(const si_shape *s) {
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n = si_mul_sat(n, s->dims[i]);
    return n;
}

si_status si_node_error(const si_graph *g, const si_gnode *n, si_status code, const char *fmt,
                        ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return si_error(code, "%s: node '%s' (%s): %s", g->path, n->name, n->op_type, msg);
}

/* --- name -> value id: open addressing over FNV-1a -------------------------------------------- */
static uint64_t fnv(const char *s) {
    uint64_t h = 1469598103934665603ull;
    while (*s) h = (h ^ (uint8_t)*s++) * 1099511628211ull;
    return h;
}

int si_b_find(si_builder *b, const char *name) {
    si_name_map *mp = &b->map;
    for (uint64_t i = fnv(name) & (uint64_t)(mp->cap - 1);; i = (i + 1) & (uint64_t)(mp->cap - 1)) {
        int v = mp->slots[i];
        if (v < 0) return -1;
        if (!strcmp(mp->g->values[v].name, name)) return v;
    }
}

int si_b_add_value(si_builder *b, const char *name) {
    si_graph *g = b->g;
    SI_ASSERT(g->n_values < g->cap_values);
    int id = g->n_values++;
    si_value *v = &g->values[id];
    memset(v, 0, sizeof *v);
    v->name = si_xstrdup(name);
    v->producer = -1;
    v->dtype = SI_DT_FLOAT;
    si_name_map *mp = &b->map;
    uint64_t i = fnv(name) & (uint64_t)(mp->cap - 1);
    while (mp->slots[i] >= 0) i = (i + 1) & (uint64_t)(mp->cap - 1);
    mp->slots[i] = id;
    return id;
}

/* Records node n as unsupported, grouped by op type (or "OpType (reason)") for the message. */
void si_b_unsupported(si_builder *b, const si_node_proto *n, const char *fmt, ...) {
    char reason[512], key[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    if (b->last_unsup == n) return;
    b->last_unsup = n;
    b->n_unsupported++;
    if (!strcmp(reason, SI_UNSUPPORTED_OP))
        snprintf(key, sizeof key, "%s", n->op_type);
    else
        snprintf(key, sizeof key, "%s (%s)", n->op_type, reason);
    for (int i = 0; i < b->n_groups; i++)
        if (!strcmp(b->unsup[i].key, key)) {
            b->unsup[i].count++;
            return;
        }
    b->unsup = si_xrealloc(b->unsup, sizeof *b->unsup * (size_t)(b->n_groups + 1));
    b->unsup[b->n_groups++] =
        (si_unsup_group){.key = si_xstrdup(key), .first = si_xstrdup(n->name), .count = 1};
}

/* The message for a model with unsupported nodes: one line per group, first appearance first. */
static si_status unsupported_error(const si_builder *b) {
    size_t len = 0, cap = 256;
    char *lines = si_xmalloc(cap);
    lines[0] = 0;
    for (int i = 0; i < b->n_groups; i++) {
        const si_unsup_group *u = &b->unsup[i];
        size_t need = strlen(u->key) + strlen(u->first) + 64;
        if (len + need >= cap) lines = si_xrealloc(lines, cap = 2 * (len + need));
        len += (size_t)snprintf(lines + len, cap - len, "\n  %s \u00d7%d (first: %s)", u->key,
                                u->count, u->first);
    }
    si_status st = si_error(SI_ERR_UNSUPPORTED, "%s: %d unsupported operator type%s (%d node%s):%s",
                            b->m->path, b->n_groups, b->n_groups > 1 ? "s" : "", b->n_unsupported,
                            b->n_unsupported > 1 ? "s" : "", lines);
    free(lines);
    return st;
}

int si_b_input(si_builder *b, const si_node_proto *n, int i) {
    if (i >= n->n_inputs || !n->inputs[i][0]) return -1;
    return si_b_find(b, n->inputs[i]);
}

int si_b_param(si_builder *b, const si_node_proto *n, int i) {
    int id = si_b_input(b, n, i);
    if (id < 0) return -2;
    if (b->g->values[id].kind == SI_VAL_RUNTIME) {
        si_b_unsupported(b, n,
                         "parameter input %d ('%s') is computed from image data; it must be "
                         "a constant or follow from shapes",
                         i, n->inputs[i]);
        return -1;
    }
    return id;
}

int64_t si_attr_int(const si_node_proto *n, const char *name, int64_t def) {
    const si_attr *a = si_node_attr(n, name);
    return a ? a->i : def;
}

float si_attr_float(const si_node_proto *n, const char *name, float def) {
    const si_attr *a = si_node_attr(n, name);
    return a ? a->f : def;
}

void si_node_add_input(si_gnode *gn, int id) {
    gn->in = si_xrealloc(gn->in, sizeof *gn->in * (size_t)(gn->n_in + 1));
    gn->in[gn->n_in++] = id;
}

/* Makes a constant value from a tensor: float types become float32, integer types int64. take:
 * t's float32 data becomes the value's (t->data NULL after): a model's weights are not copied. */
static si_status const_from_tensor(si_builder *b, si_tensor *t, const char *name, bool take,
                                   int *out) {
    int id = si_b_add_value(b, name);
    si_value *v = &b->g->values[id];
    v->kind = SI_VAL_CONST;
    v->shape.ndim = t->ndim;
    memcpy(v->shape.dims, t->dims, sizeof(int64_t) * (size_t)t->ndim);
    int64_t n = t->numel;
    switch (t->dtype) {
    case SI_DT_FLOAT:
    case SI_DT_DOUBLE:
    case SI_DT_FLOAT16: {
        v->dtype = SI_DT_FLOAT;
        if (take && t->dtype == SI_DT_FLOAT && n > 0 && t->data) {
            v->data = t->data;
            t->data = NULL;
            break;
        }
        float *d = si_xmalloc(sizeof(float) * (size_t)(n ? n : 1));
        for (int64_t i = 0; i < n; i++) {
            if (t->dtype == SI_DT_FLOAT)
                d[i] = ((const float *)t->data)[i];
            else if (t->dtype == SI_DT_DOUBLE) { /* saturate: out-of-range casts are undefined */
                double dv = ((const double *)t->data)[i];
                d[i] = dv > FLT_MAX ? INFINITY : dv < -FLT_MAX ? -INFINITY : (float)dv;
            } else {
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
    case SI_DT_UINT32:
    case SI_DT_UINT64: {
        v->dtype = SI_DT_INT64;
        int64_t *d = si_xmalloc(sizeof(int64_t) * (size_t)(n ? n : 1));
        for (int64_t i = 0; i < n; i++) {
            switch (t->dtype) {
            case SI_DT_INT64:
            case SI_DT_UINT64: d[i] = ((const int64_t *)t->data)[i]; break;
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

static void free_node(si_gnode *n) {
    free(n->name);
    free(n->op_type);
    free(n->in);
    free(n->aview);
    free(n->sview);
    free(n->equation);
    if (n->host_t) {
        si_tensor_free_data(n->host_t);
        free(n->host_t);
    }
    memset(n, 0, sizeof *n);
}

/* Every named input must already be defined: ONNX requires topological order, and a cycle or
 * a missing initializer shows up here (recorded, returns -1). Returns 0 when an input comes
 * from an unsupported node, 1 when all are defined; *all_known: none is a RUNTIME value. */
static int check_inputs(si_builder *b, const si_node_proto *n, bool *all_known) {
    bool after_unsupported = false;
    *all_known = true;
    for (int i = 0; i < n->n_inputs; i++) {
        if (!n->inputs[i][0]) continue;
        int id = si_b_find(b, n->inputs[i]);
        if (id < 0) {
            si_b_unsupported(b, n,
                             "input '%s' is not produced by any earlier node, initializer "
                             "or graph input (missing initializer, cycle or unsorted graph)",
                             n->inputs[i]);
            return -1;
        }
        after_unsupported |= b->from_unsupported[id];
        if (b->g->values[id].kind == SI_VAL_RUNTIME) *all_known = false;
    }
    return after_unsupported ? 0 : 1;
}

/* Outputs the node may not have: a second value of the same name, none at all, or optional
 * outputs other than Split's. Recorded; returns false. */
static bool check_outputs(si_builder *b, const si_node_proto *n, const si_gnode *gn, int n_out) {
    if (n_out > SI_MAX_OUTPUTS) {
        si_b_unsupported(b, n, "%d outputs (at most %d)", n_out, SI_MAX_OUTPUTS);
        return false;
    }
    for (int i = 1; i < n->n_outputs && !(gn->op == SI_OP_SPLIT); i++)
        if (n->outputs[i][0]) {
            si_b_unsupported(b, n, "optional output '%s' is not supported", n->outputs[i]);
            return false;
        }
    return true;
}

/* A host node whose inputs are all CONST: evaluated once now and dropped (constant folding).
 * Returns false when the evaluation fails (recorded). */
static bool fold_host_node(si_builder *b, const si_node_proto *n, si_gnode *gn) {
    si_graph *g = b->g;
    si_status st = si_host_eval(g, gn);
    if (st != SI_OK) {
        si_b_unsupported(b, n, "%s", si_error_msg());
        g->values[gn->out].kind = SI_VAL_RUNTIME;
        b->from_unsupported[gn->out] = true;
        free_node(gn);
        return false;
    }
    g->values[gn->out].kind = SI_VAL_CONST;
    g->values[gn->out].producer = -1;
    free_node(gn);
    g->folded_consts++;
    return true;
}

/* Converts one ONNX node: a host node when it is shape arithmetic on known values (folded now
 * when every input is CONST), else a device node. Returns false if unsupported (recorded) or
 * if it reads the output of an unsupported node (not recorded). */
static bool convert_node_checked(si_builder *b, const si_node_proto *n) {
    si_graph *g = b->g;
    if (n->domain[0] && strcmp(n->domain, "ai.onnx")) {
        si_b_unsupported(b, n, "operator domain '%s' is not supported", n->domain);
        return false;
    }
    bool all_known;
    int inputs = check_inputs(b, n, &all_known);
    if (inputs <= 0) {
        /* after an unsupported node only a missing op type is worth reporting */
        if (inputs == 0 && !si_import_device(n->op_type) && !si_host_supports(n->op_type))
            si_b_unsupported(b, n, SI_UNSUPPORTED_OP);
        return false;
    }
    for (int i = 0; i < n->n_outputs; i++)
        if (n->outputs[i][0] && si_b_find(b, n->outputs[i]) >= 0) {
            si_b_unsupported(b, n, "output '%s' is produced twice (not a valid SSA graph)",
                             n->outputs[i]);
            return false;
        }
    if (n->n_outputs < 1 || !n->outputs[0][0]) {
        si_b_unsupported(b, n, "has no output");
        return false;
    }
    if (!all_known && !strcmp(n->op_type, "Einsum")) return si_einsum_lower(b, n);
    si_gnode *gn = &g->nodes[g->n_nodes];
    *gn = (si_gnode){.name = si_xstrdup(n->name),
                     .op_type = si_xstrdup(n->op_type),
                     .residual = -1,
                     .premul = -1,
                     .bias = -1};
    bool is_shape = !strcmp(n->op_type, "Shape") || !strcmp(n->op_type, "Size");
    bool host = si_host_supports(n->op_type) && (all_known || is_shape);
    bool ok = host ? si_convert_host_op(b, n, gn) : si_convert_device_op(b, n, gn);
    int n_out = gn->op == SI_OP_SPLIT ? n->n_outputs : 1;
    if (!ok || !check_outputs(b, n, gn, n_out)) {
        free_node(gn);
        return false;
    }
    gn->n_out = n_out;
    for (int i = 0; i < n_out; i++) {
        int id = si_b_add_value(b, n->outputs[i][0] ? n->outputs[i] : "");
        g->values[id].producer = g->n_nodes;
        gn->outs[i] = id;
    }
    gn->out = gn->outs[0];
    if (host) {
        bool known_now = true; /* Shape of a runtime value depends on the batch */
        for (int i = 0; i < gn->n_in; i++)
            if (g->values[gn->in[i]].kind != SI_VAL_CONST) known_now = false;
        g->values[gn->out].kind = SI_VAL_HOST;
        if (known_now) return fold_host_node(b, n, gn);
    }
    g->n_nodes++;
    return true;
}

bool si_b_convert(si_builder *b, const si_node_proto *n) {
    return convert_node_checked(b, n);
}

/* The outputs of a node that was not converted get values marked as coming from an unsupported
 * node, so that nodes reading them are not reported: they fail only because of it. */
static void convert_node(si_builder *b, const si_node_proto *n) {
    if (convert_node_checked(b, n)) return;
    for (int i = 0; i < n->n_outputs; i++)
        if (n->outputs[i][0] && si_b_find(b, n->outputs[i]) < 0)
            b->from_unsupported[si_b_add_value(b, n->outputs[i])] = true;
}

bool si_model_input_is_param(const si_model_proto *m, const char *name) {
    static const struct {
        const char *op;
        int first; /* inputs from this index on are parameters */
    } params[] = {{"Clip", 1},      {"Reshape", 1},   {"BatchNormalization", 1}, {"Slice", 1},
                  {"Pad", 1},       {"Resize", 1},    {"Upsample", 1},           {"Expand", 1},
                  {"Split", 1},     {"Squeeze", 1},   {"Unsqueeze", 1},          {"ReduceMean", 1},
                  {"ReduceSum", 1}, {"ReduceMax", 1}, {"ReduceMin", 1},          {"Gather", 1},
                  {"Tile", 1}};
    bool used = false;
    for (int i = 0; i < m->n_nodes; i++) {
        const si_node_proto *n = &m->nodes[i];
        for (int j = 0; j < n->n_inputs; j++) {
            if (strcmp(n->inputs[j], name)) continue;
            used = true;
            bool param = false;
            for (size_t k = 0; k < sizeof params / sizeof params[0]; k++)
                if (!strcmp(n->op_type, params[k].op) && j >= params[k].first) param = true;
            if (!param) return false;
        }
    }
    return used;
}

bool si_model_input_host_only(const si_model_proto *m, const char *name) {
    /* Sqrt, Neg, Abs, Floor, Ceil, Min and Max are not here: they run on image data too (a
     * LayerNorm written out as ReduceMean, Pow, Sqrt, Div), so an input that feeds them is
     * image data */
    static const char *host_only[] = {"Shape",
                                      "Size",
                                      "ConstantOfShape",
                                      "Range",
                                      "Equal",
                                      "Less",
                                      "Greater",
                                      "GreaterOrEqual",
                                      "LessOrEqual",
                                      "And",
                                      "Or",
                                      "Xor",
                                      "Not",
                                      "Where",
                                      "Mod",
                                      "ScatterND"};
    bool used = false;
    for (int i = 0; i < m->n_nodes; i++)
        for (int j = 0; j < m->nodes[i].n_inputs; j++) {
            if (strcmp(m->nodes[i].inputs[j], name)) continue;
            bool host = false;
            for (size_t k = 0; k < sizeof host_only / sizeof host_only[0]; k++)
                host |= !strcmp(m->nodes[i].op_type, host_only[k]);
            if (!host) return false;
            used = true;
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

char *si_graph_join_types(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char *s = si_xmalloc(n);
    snprintf(s, n, "%s+%s", a, b);
    return s;
}

void si_graph_absorb(si_graph *g, si_gnode *p, si_gnode *c) {
    char *t = si_graph_join_types(p->op_type, c->op_type);
    free(p->op_type);
    p->op_type = t;
    g->values[c->out].producer = g->values[p->out].producer;
    p->out = p->outs[0] = c->out;
    c->op = -1;
}

void si_graph_compact(si_graph *g) {
    int k = 0;
    for (int j = 0; j < g->n_nodes; j++) {
        if (g->nodes[j].op < 0) {
            free_node(&g->nodes[j]);
            continue;
        }
        g->nodes[k] = g->nodes[j];
        for (int o = 0; o < g->nodes[k].n_out; o++) g->values[g->nodes[k].outs[o]].producer = k;
        k++;
    }
    g->n_nodes = k;
    count_uses(g);
}

/* Nodes whose outputs no graph output depends on. */
static void remove_dead(si_graph *g) {
    bool *live = si_xcalloc((size_t)g->n_values, sizeof *live);
    for (int i = 0; i < g->n_outputs; i++) live[g->outputs[i]] = true;
    for (int j = g->n_nodes - 1; j >= 0; j--) {
        si_gnode *n = &g->nodes[j];
        bool needed = false;
        for (int o = 0; o < n->n_out; o++) needed |= live[n->outs[o]];
        if (!needed) {
            n->op = -1;
            g->removed_nodes++;
            continue;
        }
        for (int i = 0; i < n->n_in; i++) live[n->in[i]] = true;
    }
    free(live);
    si_graph_compact(g);
}

/* Conv (constant weights) followed by its only consumer, an inference BatchNormalization:
 * W' = W * scale[m], b' = b * scale[m] + shift[m]. */
static void fold_batchnorm(si_graph *g) {
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *bn = &g->nodes[j];
        if (bn->op != SI_OP_AFFINE) continue;
        si_value *xv = &g->values[bn->in[0]];
        if (xv->producer < 0 || xv->uses != 1) continue;
        si_gnode *cv = &g->nodes[xv->producer];
        if (cv->op != SI_OP_CONV || cv->act.kind != SI_ACT_NONE || cv->residual >= 0) continue;
        si_value *wv = &g->values[cv->in[1]];
        if (wv->kind != SI_VAL_CONST || wv->uses != 1) continue;
        int64_t m = wv->shape.dims[0], per = si_shape_numel(&wv->shape) / (m ? m : 1);
        const float *scale = g->values[bn->in[1]].data, *shift = g->values[bn->in[2]].data;
        if (si_shape_numel(&g->values[bn->in[1]].shape) != m) continue;
        si_value *bv = cv->n_in > 2 ? &g->values[cv->in[2]] : NULL;
        if (bv && (bv->kind != SI_VAL_CONST || bv->uses != 1)) continue;
        float *w = wv->data;
        for (int64_t o = 0; o < m; o++)
            for (int64_t i = 0; i < per; i++) w[o * per + i] *= scale[o];
        if (bv) {
            float *bias = bv->data;
            for (int64_t o = 0; o < m; o++) bias[o] = bias[o] * scale[o] + shift[o];
        } else {
            si_node_add_input(cv, bn->in[2]); /* the shift becomes the bias */
        }
        si_graph_absorb(g, cv, bn);
        g->folded_bn++;
    }
    si_graph_compact(g);
}

/* A Linear layer: MatMul of a runtime tensor by a constant (K, N) matrix, one GEMM of all its
 * rows on a GPU; bias, residual and activation can ride along. */
bool si_graph_is_linear(const si_graph *g, const si_gnode *p) {
    if (p->op != SI_OP_MATMUL || p->n_in < 2) return false; /* in[1] exists only then */
    const si_value *w = &g->values[p->in[1]];
    return w->kind == SI_VAL_CONST && w->shape.ndim == 2 && g->values[p->in[0]].shape.ndim >= 2;
}

/* Attention too, for the kinds its kernels apply (si_attention_act): LeViT's HardSwish on the
 * merged heads, before its projection, is elementwise, so it applies to Y as it is stored. */
static bool fusable_producer(const si_graph *g, const si_gnode *p, int kind) {
    return (p->op == SI_OP_CONV || p->op == SI_OP_BINARY || p->op == SI_OP_GEMM ||
            (p->op == SI_OP_ATTENTION && si_attention_act(kind)) || si_graph_is_linear(g, p)) &&
           p->act.kind == SI_ACT_NONE;
}

/* Binary node a = op(Linear(x), c), either order, with c a float constant of one value per
 * output column: the Linear node (read by a only), and c's value id in *c; NULL otherwise. */
static si_gnode *linear_by_column(si_graph *g, const si_gnode *a, si_binop op, int *c) {
    if (a->op != SI_OP_BINARY || a->binop != op || a->act.kind) return NULL;
    for (int side = 0; side < 2; side++) {
        const si_value *mv = &g->values[a->in[side]], *cv = &g->values[a->in[1 - side]];
        if (mv->producer < 0 || mv->uses != 1 || cv->kind != SI_VAL_CONST ||
            cv->dtype != SI_DT_FLOAT)
            continue;
        si_gnode *m = &g->nodes[mv->producer];
        if (!si_graph_is_linear(g, m) || m->residual >= 0 || m->act.kind) continue;
        int64_t n = g->values[m->in[1]].shape.dims[1];
        const si_shape *cs = &cv->shape;
        if (cs->ndim < 1 || cs->dims[cs->ndim - 1] != n || si_shape_numel(cs) != n ||
            cs->ndim > mv->shape.ndim)
            continue;
        *c = a->in[1 - side];
        return m;
    }
    return NULL;
}

/* Add(MatMul(x, W), b) with W a constant (K, N) and b a constant of N values along the last
 * axis: the MatMul adds b (cuBLASLt's bias epilogue on the GPU). */
/* Linear (a MatMul by a constant (K, N) weight), a Reshape of its rows to (M, N), then an
 * inference BatchNormalization over N: LeViT's Linear + BatchNorm1d on the flattened tokens. The
 * scale folds into W's columns and the shift becomes the Linear's bias; the BatchNormalization
 * goes (an identity view where it gives a graph output). Before fuse_linear_bias, on inferred
 * shapes. */
/* The readers of value v that read its data: all but the host's Shape and Size (the legacy
 * exporter's shapes for a Reshape back). */
static int data_readers(const si_graph *g, int v) {
    int n = g->values[v].uses;
    for (int j = 0; j < g->n_nodes; j++)
        if (si_reads_shape_only(&g->nodes[j]))
            for (int i = 0; i < g->nodes[j].n_in; i++) n -= g->nodes[j].in[i] == v;
    return n;
}

static void fold_linear_batchnorm(si_graph *g) {
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *bn = &g->nodes[j];
        if (bn->op != SI_OP_AFFINE || bn->n_in < 3) continue;
        const si_value *xv = &g->values[bn->in[0]];
        si_gnode *r = xv->producer >= 0 ? &g->nodes[xv->producer] : NULL;
        if (!r || r->op != SI_OP_VIEW || xv->uses != 1 || xv->shape.ndim != 2) continue;
        const si_value *uv = &g->values[r->in[0]];
        si_gnode *m = uv->producer >= 0 ? &g->nodes[uv->producer] : NULL;
        if (!m || m->op != SI_OP_MATMUL || data_readers(g, r->in[0]) != 1 || m->act.kind ||
            m->residual >= 0 || m->bias >= 0 || m->trans_a || m->trans_b || m->n_in != 2)
            continue;
        si_value *wv = &g->values[m->in[1]];
        const si_value *sv = &g->values[bn->in[1]], *hv = &g->values[bn->in[2]];
        int64_t n = xv->shape.dims[1];
        if (wv->kind != SI_VAL_CONST || wv->uses != 1 || wv->shape.ndim != 2 ||
            wv->shape.dims[1] != n || uv->shape.dims[uv->shape.ndim - 1] != n ||
            sv->kind != SI_VAL_CONST || hv->kind != SI_VAL_CONST || !sv->data || !hv->data ||
            si_shape_numel(&sv->shape) != n || si_shape_numel(&hv->shape) != n)
            continue;
        float *w = wv->data;
        const float *scale = sv->data;
        for (int64_t k = 0; k < wv->shape.dims[0]; k++)
            for (int64_t c = 0; c < n; c++) w[k * n + c] *= scale[c];
        m->bias = bn->in[2];
        si_node_add_input(m, bn->in[2]);
        /* its readers read the Reshape's rows; a graph output keeps it, as an identity view */
        if (si_graph_is_output(g, bn->out)) {
            bn->op = SI_OP_VIEW;
            bn->view_kind = SI_VIEW_IDENTITY;
            bn->n_in = 1;
        } else {
            si_graph_replace_reads(g, bn->out, bn->in[0]);
            bn->op = -1;
        }
        char *t = si_graph_join_types(m->op_type, "BatchNormalization(folded)");
        free(m->op_type);
        m->op_type = t;
        g->folded_bn++;
    }
    si_graph_compact(g);
}

static void fuse_linear_bias(si_graph *g) {
    for (int j = 0; j < g->n_nodes; j++) {
        int c;
        si_gnode *a = &g->nodes[j], *m = linear_by_column(g, a, SI_BIN_ADD, &c);
        if (!m || m->bias >= 0) continue;
        m->bias = c;
        si_node_add_input(m, c);
        si_graph_absorb(g, m, a);
        g->fused_bias++;
    }
    si_graph_compact(g);
}

/* A private copy of constant v (its own data and name), for a pass that rewrites it. */
int si_graph_add_const(si_graph *g, const char *name, const si_shape *shape, float *data) {
    if (g->n_values == g->cap_values) {
        int cap = 2 * g->cap_values + 8;
        g->values = si_xrealloc(g->values, sizeof *g->values * (size_t)cap);
        memset(g->values + g->cap_values, 0, sizeof *g->values * (size_t)(cap - g->cap_values));
        g->cap_values = cap;
    }
    int id = g->n_values++;
    g->values[id] = (si_value){.name = si_xstrdup(name),
                               .kind = SI_VAL_CONST,
                               .dtype = SI_DT_FLOAT,
                               .shape = *shape,
                               .data = data,
                               .producer = -1};
    return id;
}

static int const_copy(si_graph *g, int v) {
    const si_value *src = &g->values[v];
    SI_ASSERT(src->dtype == SI_DT_FLOAT);
    size_t len = strlen(src->name) + 8, n = (size_t)si_shape_numel(&src->shape);
    char *name = si_xmalloc(len);
    snprintf(name, len, "%s/copy", src->name);
    float *data = si_xmalloc(n ? n * sizeof(float) : 1);
    memcpy(data, src->data, n * sizeof(float));
    int id = si_graph_add_const(g, name, &src->shape, data);
    free(name);
    return id;
}

/* Mul(Transpose(Linear(x)), c), either order, where the Transpose (read by the Mul alone) moves
 * the Linear's columns to axis k and c is a float constant of one value per column along axis k
 * (ConvNeXt's LayerScale, after its MLP's way back to (N, C, H, W)): the Linear, with the
 * Transpose in *t and c's value id in *c; NULL otherwise. */
static si_gnode *linear_through_transpose(si_graph *g, const si_gnode *a, int *c, si_gnode **t) {
    if (a->op != SI_OP_BINARY || a->binop != SI_BIN_MUL || a->act.kind) return NULL;
    for (int side = 0; side < 2; side++) {
        const si_value *tv = &g->values[a->in[side]], *cv = &g->values[a->in[1 - side]];
        if (tv->producer < 0 || tv->uses != 1 || cv->kind != SI_VAL_CONST ||
            cv->dtype != SI_DT_FLOAT || !si_shape_same(&tv->shape, &g->values[a->out].shape))
            continue;
        si_gnode *tr = &g->nodes[tv->producer];
        if (tr->op != SI_OP_TRANSPOSE) continue;
        const si_value *mv = &g->values[tr->in[0]];
        if (mv->producer < 0 || mv->uses != 1) continue;
        si_gnode *m = &g->nodes[mv->producer];
        if (!si_graph_is_linear(g, m) || m->residual >= 0 || m->act.kind) continue;
        int r = tv->shape.ndim, k = -1;
        for (int d = 0; d < r; d++)
            if (tr->perm[d] == r - 1) k = d;
        int64_t n = g->values[m->in[1]].shape.dims[1];
        const si_shape *cs = &cv->shape;
        int ck = k - (r - cs->ndim); /* axis k among c's axes, aligned from the right */
        if (k < 0 || cs->ndim > r || ck < 0 || cs->dims[ck] != n || si_shape_numel(cs) != n)
            continue;
        *c = a->in[1 - side];
        *t = tr;
        return m;
    }
    return NULL;
}

/* Mul(Linear(x), g) with g a constant per output column (LayerScale in DINOv2, CaiT, ConvNeXt):
 * W' = W * g per column and b' = b * g, so the Mul goes and the residual Add after it can fuse
 * into the GEMM. Also through a Transpose between them (ConvNeXt): the Transpose then takes
 * the Mul's output. Only when W and b are read by nothing else. */
static void fold_linear_scale(si_graph *g) {
    for (int j = 0; j < g->n_nodes; j++) {
        int sid;
        si_gnode *a = &g->nodes[j], *t = NULL, *m = linear_by_column(g, a, SI_BIN_MUL, &sid);
        if (!m) m = linear_through_transpose(g, a, &sid, &t);
        if (!m || g->values[m->in[1]].uses != 1) continue;
        if (m->bias >= 0 && g->values[m->bias].uses != 1) { /* shared by other layers: a copy */
            int b2 = const_copy(g, m->bias);
            for (int i = 0; i < m->n_in; i++)
                if (m->in[i] == m->bias) m->in[i] = b2;
            m->bias = b2;
            g->values[b2].uses = 1;
        }
        const si_value *sv = &g->values[sid], *wv = &g->values[m->in[1]];
        int64_t k = wv->shape.dims[0], n = wv->shape.dims[1];
        const float *s = sv->data;
        float *w = wv->data;
        for (int64_t r = 0; r < k; r++)
            for (int64_t c = 0; c < n; c++) w[r * n + c] *= s[c];
        if (m->bias >= 0)
            for (int64_t c = 0; c < n; c++) ((float *)g->values[m->bias].data)[c] *= s[c];
        si_graph_absorb(g, t ? t : m, a);
        g->folded_scale++;
    }
    si_graph_compact(g);
}

static bool const_is(const si_graph *g, int v, float want, float tol) {
    const si_value *c = &g->values[v];
    return c->kind == SI_VAL_CONST && c->dtype == SI_DT_FLOAT && si_shape_numel(&c->shape) == 1 &&
           fabsf(((const float *)c->data)[0] - want) <= tol;
}

/* The only reader of value v, or NULL. */
static si_gnode *sole_reader(si_graph *g, int v, int from) {
    if (g->values[v].uses != 1) return NULL;
    for (int k = from; k < g->n_nodes; k++)
        for (int i = 0; i < g->nodes[k].n_in; i++)
            if (g->nodes[k].in[i] == v) return &g->nodes[k];
    return NULL;
}

static bool binop_with(const si_gnode *n, si_binop op, int v, int *other) {
    if (!n || n->op != SI_OP_BINARY || n->binop != op || n->act.kind) return false;
    if (n->in[0] == v)
        *other = n->in[1];
    else if (n->in[1] == v)
        *other = n->in[0];
    else
        return false;
    return true;
}

/* Node n, retyped by a pattern fusion, takes over the output of the pattern's last node (absorb)
 * and is named after the pattern. */
static void take_over(si_graph *g, si_gnode *n, si_gnode *last, const char *pattern) {
    si_graph_absorb(g, n, last);
    free(n->op_type);
    n->op_type = si_xstrdup(pattern);
    g->fused_act++;
}

/* GELU as the TorchScript exporter writes it: Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)
 * (or x * 0.7071.. in place of the Div): one Gelu activation, exact erf, as ONNX's Gelu with
 * approximate = "none". */
static void fuse_gelu(si_graph *g) {
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *d = &g->nodes[j];
        if (d->op != SI_OP_BINARY || d->act.kind) continue;
        bool scaled = (d->binop == SI_BIN_DIV && const_is(g, d->in[1], 1.41421356f, 1e-6f)) ||
                      (d->binop == SI_BIN_MUL && const_is(g, d->in[1], 0.70710678f, 1e-7f));
        if (!scaled) continue;
        int x = d->in[0], c, o, h;
        si_gnode *e = sole_reader(g, d->out, j + 1);
        if (!e || e->op != SI_OP_ACTIVATION || e->act.kind != SI_ACT_ERF) continue;
        si_gnode *ad = sole_reader(g, e->out, j + 1);
        if (!binop_with(ad, SI_BIN_ADD, e->out, &c) || !const_is(g, c, 1.f, 0.f)) continue;
        si_gnode *m1 = sole_reader(g, ad->out, j + 1);
        if (!binop_with(m1, SI_BIN_MUL, ad->out, &o) || o != x) continue;
        si_gnode *m2 = sole_reader(g, m1->out, j + 1);
        if (!binop_with(m2, SI_BIN_MUL, m1->out, &h) || !const_is(g, h, 0.5f, 0.f)) continue;
        /* the Erf becomes the Gelu of x and takes the last Mul's output */
        e->in[0] = x;
        e->act.kind = SI_ACT_GELU;
        take_over(g, e, m2, "Gelu(Div+Erf+Add+Mul+Mul)");
        d->op = ad->op = m1->op = -1;
        si_graph_compact(g); /* uses and producers moved */
        j = -1;
    }
}

/* SiLU as exported: y = Mul(x, Sigmoid(x)) with x read by nothing else: an activation. */
static void fuse_silu(si_graph *g) {
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *s = &g->nodes[j];
        if (s->op != SI_OP_ACTIVATION || s->act.kind != SI_ACT_SIGMOID) continue;
        int x = s->in[0];
        if (g->values[s->out].uses != 1 || g->values[x].uses != 2) continue;
        for (int k = j + 1; k < g->n_nodes; k++) {
            si_gnode *m = &g->nodes[k];
            if (m->op != SI_OP_BINARY || m->binop != SI_BIN_MUL || m->act.kind) continue;
            bool pair =
                (m->in[0] == x && m->in[1] == s->out) || (m->in[1] == x && m->in[0] == s->out);
            if (!pair) continue;
            /* the Sigmoid becomes SiLU and takes the Mul's output */
            s->act.kind = SI_ACT_SILU;
            si_graph_absorb(g, s, m);
            break;
        }
    }
    si_graph_compact(g);
}

/* QuickGELU as exported: Mul(x, Sigmoid(Mul(x, a))) with a a scalar constant: one Swish. */
static void fuse_swish(si_graph *g) {
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *s = &g->nodes[j];
        if (s->op != SI_OP_ACTIVATION || s->act.kind != SI_ACT_SIGMOID) continue;
        si_value *tv = &g->values[s->in[0]];
        if (tv->producer < 0 || tv->uses != 1 || g->values[s->out].uses != 1) continue;
        si_gnode *m0 = &g->nodes[tv->producer];
        if (m0->op != SI_OP_BINARY || m0->binop != SI_BIN_MUL || m0->act.kind) continue;
        int x = -1, c = -1, o;
        for (int side = 0; side < 2 && x < 0; side++)
            if (const_is(g, m0->in[1 - side], 0.f, FLT_MAX)) { /* any finite scalar */
                x = m0->in[side];
                c = m0->in[1 - side];
            }
        if (x < 0) continue;
        si_gnode *m = sole_reader(g, s->out, j + 1);
        if (!binop_with(m, SI_BIN_MUL, s->out, &o) || o != x) continue;
        s->act.kind = SI_ACT_SWISH;
        s->act.alpha = ((const float *)g->values[c].data)[0];
        s->in[0] = x;
        take_over(g, s, m, "Swish(Mul+Sigmoid+Mul)");
        m0->op = -1;
        si_graph_compact(g);
        j = -1;
    }
}

/* The attention behind view node v (LeViT's Reshape merging the heads), each read once: an
 * activation after v applies to the attention's Y as well. NULL otherwise. */
static si_gnode *attention_behind_view(si_graph *g, const si_gnode *v) {
    if (v->op != SI_OP_VIEW || v->n_in < 1) return NULL;
    const si_value *yv = &g->values[v->in[0]];
    if (yv->producer < 0 || yv->uses != 1 || yv->kind != SI_VAL_RUNTIME) return NULL;
    si_gnode *p = &g->nodes[yv->producer];
    return p->op == SI_OP_ATTENTION ? p : NULL;
}

/* An activation whose input comes from a Conv, Add, Gemm or attention with no other reader
 * (the attention's also through a view). */
static void fuse_activations(si_graph *g) {
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *a = &g->nodes[j];
        /* a Clip whose bounds follow from shapes keeps them as inputs of its own */
        if (a->op != SI_OP_ACTIVATION || a->n_in > 1) continue;
        si_value *xv = &g->values[a->in[0]];
        if (xv->producer < 0 || xv->uses != 1 || xv->kind != SI_VAL_RUNTIME) continue;
        si_gnode *p = &g->nodes[xv->producer], *att = attention_behind_view(g, p);
        if (att && fusable_producer(g, att, a->act.kind) && !si_graph_is_output(g, a->out)) {
            att->act = a->act; /* act(view(y)) = view(act(y)): the view's readers read a's */
            char *t = si_graph_join_types(att->op_type, a->op_type);
            free(att->op_type);
            att->op_type = t;
            si_graph_replace_reads(g, a->out, p->out);
            a->op = -1;
            g->fused_act++;
            continue;
        }
        if (!fusable_producer(g, p, a->act.kind)) continue;
        if (p->op == SI_OP_GEMM && a->act.kind != SI_ACT_RELU) continue;
        p->act = a->act;
        si_graph_absorb(g, p, a);
        g->fused_act++;
    }
    si_graph_compact(g);
}

/* Add(conv, r) where the conv's output has no other reader and no activation yet: the conv adds
 * r before its (later fused) activation, saving a pass over the tensor. */
/* View r2 of view r1's output, r1's read by r2 alone, giving back r1's input shape (LeViT's
 * Linear -> Flatten (for BatchNorm1d, folded) -> Reshape back): r2's readers read r1's input,
 * so its producer's epilogue can take their activation and residual Add. Both are views of
 * row-major bytes, so nothing moves; a graph output keeps its views. */
static void cancel_view_round_trips(si_graph *g) {
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *r2 = &g->nodes[j];
        if (r2->op != SI_OP_VIEW || r2->n_in < 1) continue;
        const si_value *mid = &g->values[r2->in[0]];
        si_gnode *r1 = mid->producer >= 0 ? &g->nodes[mid->producer] : NULL;
        if (!r1 || r1->op != SI_OP_VIEW || data_readers(g, r2->in[0]) != 1 ||
            !si_shape_same(&g->values[r1->in[0]].shape, &g->values[r2->out].shape) ||
            g->values[r1->in[0]].kind != SI_VAL_RUNTIME)
            continue;
        if (si_graph_is_output(g, r2->out)) continue;
        si_graph_replace_reads(g, r2->out, r1->in[0]);
        r2->op = -1;
        r1->op = -1;
        g->dropped_copies++;
    }
    si_graph_compact(g); /* recounts the uses */
}

static void fuse_residual(si_graph *g) {
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *a = &g->nodes[j];
        if (a->op != SI_OP_BINARY || a->binop != SI_BIN_ADD || a->act.kind) continue;
        for (int side = 0; side < 2; side++) {
            si_value *cv = &g->values[a->in[side]];
            int other = a->in[1 - side];
            if (cv->producer < 0 || cv->uses != 1 || cv->kind != SI_VAL_RUNTIME) continue;
            si_gnode *c = &g->nodes[cv->producer];
            bool conv = c->op == SI_OP_CONV;
            if ((!conv && !si_graph_is_linear(g, c)) || c->act.kind || c->residual >= 0) continue;
            /* same shape only: the conv or GEMM writes each element once */
            const si_value *ov = &g->values[other];
            if (ov->kind != SI_VAL_RUNTIME || (conv && ov->shape.ndim != 4)) continue;
            if (!si_shape_same(&ov->shape, &cv->shape)) continue;
            if (ov->producer >= cv->producer) continue; /* r must exist before the conv runs */
            c->residual = other;
            si_node_add_input(c, other);
            si_graph_absorb(g, c, a);
            g->fused_residual++;
            break;
        }
    }
    si_graph_compact(g);
}

si_gnode *si_graph_insert_nodes(si_graph *g, int at, int count) {
    g->nodes = si_xrealloc(g->nodes, sizeof *g->nodes * (size_t)(g->n_nodes + count + 1));
    memmove(&g->nodes[at + count], &g->nodes[at], sizeof *g->nodes * (size_t)(g->n_nodes - at));
    g->n_nodes += count;
    for (int k = at; k < at + count; k++) {
        g->nodes[k] = (si_gnode){.residual = -1, .premul = -1, .bias = -1};
        for (int s = 0; s < 4; s++) g->nodes[k].pslot[s] = -1;
    }
    for (int k = at + count; k < g->n_nodes; k++) /* the nodes after moved count places on */
        for (int o = 0; o < g->nodes[k].n_out; o++) g->values[g->nodes[k].outs[o]].producer = k;
    return &g->nodes[at];
}

void si_graph_replace_reads(si_graph *g, int from, int to) {
    for (int k = 0; k < g->n_nodes; k++) {
        si_gnode *n = &g->nodes[k];
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i] == from) n->in[i] = to;
        if (n->residual == from) n->residual = to;
        if (n->premul == from) n->premul = to;
    }
}

int si_graph_add_runtime(si_graph *g, const char *name, const si_shape *shape) {
    int id = si_graph_add_const(g, name, shape, NULL);
    g->values[id].kind = SI_VAL_RUNTIME;
    return id;
}

/* Add(Transpose(Linear(x), perm 0,3,1,2), z), z a 4-D image computed before the Linear (the end
 * of a ConvNeXt block: the MLP's rows back to (N, C, H, W), then the residual): the residual
 * is added by the Linear's GEMM instead, read as Transpose(z, perm 0,2,3,1), a node inserted
 * before the Linear, and the Transpose after it takes the Add's output. On the GPU both
 * Transposes hold the same bytes as their inputs (an image is stored NHWC), so the Add's pass
 * over the tensor goes; on the CPU one copy of z replaces it. */
static void fuse_residual_through_transpose(si_graph *g) {
    static const int to_nchw[4] = {0, 3, 1, 2};
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *a = &g->nodes[j];
        if (a->op != SI_OP_BINARY || a->binop != SI_BIN_ADD || a->act.kind) continue;
        for (int side = 0; side < 2; side++) {
            const si_value *tv = &g->values[a->in[side]], *zv = &g->values[a->in[1 - side]];
            if (tv->producer < 0 || tv->uses != 1 || zv->kind != SI_VAL_RUNTIME ||
                zv->shape.ndim != 4 || !si_shape_same(&zv->shape, &tv->shape))
                continue;
            int ti = tv->producer;
            if (g->nodes[ti].op != SI_OP_TRANSPOSE ||
                memcmp(g->nodes[ti].perm, to_nchw, sizeof to_nchw))
                continue;
            const si_value *yv = &g->values[g->nodes[ti].in[0]];
            int mi = yv->producer;
            if (mi < 0 || yv->uses != 1 || zv->producer >= mi) continue;
            const si_gnode *m = &g->nodes[mi];
            if (!si_graph_is_linear(g, m) || m->act.kind || m->residual >= 0) continue;
            /* the new value and node: z as (N, H, W, C), inserted at mi */
            int z = a->in[1 - side];
            size_t len = strlen(g->values[z].name) + 8;
            char *name = si_xmalloc(len);
            snprintf(name, len, "%s/nhwc", g->values[z].name);
            si_shape nhwc = yv->shape; /* adding a value may move g->values */
            int z2 = si_graph_add_runtime(g, name, &nhwc);
            si_gnode *t2 = si_graph_insert_nodes(g, mi, 1);
            t2->op = SI_OP_TRANSPOSE;
            t2->name = name;
            t2->op_type = si_xstrdup("Transpose");
            t2->out = t2->outs[0] = z2;
            t2->n_out = 1;
            t2->n_attr_ints = 4;
            memcpy(t2->attr_ints, (const int64_t[]){0, 2, 3, 1}, 4 * sizeof(int64_t));
            memcpy(t2->perm, (const int[]){0, 2, 3, 1}, 4 * sizeof(int));
            si_node_add_input(t2, z);
            g->values[z2].producer = mi;
            si_gnode *m2 = &g->nodes[mi + 1], *tr = &g->nodes[ti + 1], *a2 = &g->nodes[j + 1];
            m2->residual = z2;
            si_node_add_input(m2, z2);
            si_graph_absorb(g, tr, a2);
            g->fused_residual++;
            j++; /* a moved one place on */
            break;
        }
    }
    si_graph_compact(g);
}

static bool spatial_seed(const si_graph *g, const si_gnode *n) {
    switch (n->op) {
    case SI_OP_CONV:
    case SI_OP_MAXPOOL:
    case SI_OP_AVGPOOL:
    case SI_OP_RESIZE:
    case SI_OP_AFFINE:
    case SI_OP_INSTANCENORM: return true;
    case SI_OP_GLOBAL_AVGPOOL: return g->values[n->in[0]].shape.ndim == 4;
    default: return false;
    }
}

/* Ops through which image-ness spreads: elementwise on same-layout operands. */
static bool spatial_joins(int op) {
    return op == SI_OP_BINARY || op == SI_OP_ACTIVATION || op == SI_OP_CONCAT ||
           op == SI_OP_SPLIT || op == SI_OP_SLICE || op == SI_OP_PAD;
}

static bool mark(si_value *v) {
    if (v->spatial || v->kind != SI_VAL_RUNTIME || v->shape.ndim != 4) return false;
    v->spatial = true;
    return true;
}

/* Sets si_value.spatial (see graph.h): seeds from the spatial ops and 4-D inputs, then spreads
 * through elementwise ops until nothing changes. Needs the ranks (si_graph_infer). */
static void mark_spatial(si_graph *g) {
    g->spatial_marked = true;
    for (int i = 0; i < g->n_values; i++) g->values[i].spatial = false;
    for (int i = 0; i < g->n_inputs; i++) mark(&g->values[g->inputs[i]]);
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *n = &g->nodes[j];
        if (n->op == SI_OP_TRANSPOSE && n->perm[0] == 0 && n->perm[1] == 3 && n->perm[2] == 1 &&
            n->perm[3] == 2) /* rows (N, H, W, C) back to an image: stored as one, NHWC */
            mark(&g->values[n->out]);
        if (!spatial_seed(g, n)) continue;
        mark(&g->values[n->in[0]]);
        for (int o = 0; o < n->n_out; o++) mark(&g->values[n->outs[o]]);
        if (n->op == SI_OP_CONV && n->residual >= 0) mark(&g->values[n->residual]);
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (int j = 0; j < g->n_nodes; j++) {
            si_gnode *n = &g->nodes[j];
            if (!spatial_joins(n->op)) continue;
            bool any = false;
            for (int k = 0; k < n->n_in; k++) any |= g->values[n->in[k]].spatial;
            for (int o = 0; o < n->n_out; o++) any |= g->values[n->outs[o]].spatial;
            if (!any) continue;
            for (int k = 0; k < n->n_in; k++)
                if (n->pslot[0] != k && n->pslot[1] != k && n->pslot[2] != k && n->pslot[3] != k)
                    changed |= mark(&g->values[n->in[k]]);
            for (int o = 0; o < n->n_out; o++) changed |= mark(&g->values[n->outs[o]]);
        }
    }
}

/* The graph and the builder's name map, sized for every value the model can define. */
static void builder_init(si_builder *b, const si_model_proto *m, const si_graph_opts *opts) {
    si_graph *g = si_xcalloc(1, sizeof *g);
    *b = (si_builder){.g = g, .m = m};
    g->path = si_xstrdup(m->path);
    g->opset = m->opset;
    g->inferred_batch = -1;
    int max_out = 0, lowered = 0; /* lowered: the nodes an Einsum may become */
    for (int i = 0; i < m->n_nodes; i++) {
        max_out += m->nodes[i].n_outputs + 3;
        lowered += si_einsum_max_nodes(&m->nodes[i]);
    }
    g->cap_values = m->n_inits + m->n_inputs + opts->n_bind + max_out + 2 * lowered + 8;
    g->values = si_xcalloc((size_t)g->cap_values, sizeof *g->values);
    g->nodes = si_xcalloc((size_t)m->n_nodes + lowered + 1, sizeof *g->nodes);
    b->from_unsupported = si_xcalloc((size_t)g->cap_values, sizeof *b->from_unsupported);
    b->map.cap = 16;
    while (b->map.cap < 2 * g->cap_values) b->map.cap *= 2;
    b->map.slots = si_xmalloc(sizeof(int) * (size_t)b->map.cap);
    for (int i = 0; i < b->map.cap; i++) b->map.slots[i] = -1;
    b->map.g = g;
}

static void builder_free(si_builder *b) {
    for (int i = 0; i < b->n_groups; i++) {
        free(b->unsup[i].key);
        free(b->unsup[i].first);
    }
    free(b->unsup);
    free(b->from_unsupported);
    free(b->map.slots);
}

/* Initializers, then constants bound to graph inputs; the first of a name wins. take: the
 * initializers' float32 data moves into the graph (m is the caller's to free, and no longer
 * holds them); the bound ones are always copied. */
static si_status add_constants(si_builder *b, const si_model_proto *m, const si_graph_opts *opts,
                               bool take) {
    si_status st;
    int id;
    for (int i = 0; i < m->n_inits; i++) {
        const char *nm = m->inits[i].name ? m->inits[i].name : "";
        if (si_b_find(b, nm) >= 0) continue;
        if ((st = const_from_tensor(b, &m->inits[i], nm, take, &id)) != SI_OK) return st;
    }
    for (int i = 0; i < opts->n_bind; i++) {
        if (si_b_find(b, opts->bind[i].name) >= 0) continue;
        si_tensor t = opts->bind[i]; /* a copy of the descriptor: the data is copied, not taken */
        if ((st = const_from_tensor(b, &t, t.name, false, &id)) != SI_OK) return st;
    }
    return SI_OK;
}

/* A runtime graph input must be float32 with a known shape, only dim 0 symbolic. */
static si_status check_input(const si_model_proto *m, const si_value_info *vi) {
    if (vi->dtype != SI_DT_FLOAT)
        return si_error(SI_ERR_UNSUPPORTED,
                        "%s: graph input '%s' has type %s; only float32 tensor inputs are "
                        "supported",
                        m->path, vi->name, vi->dtype ? si_dtype_name(vi->dtype) : "non-tensor");
    if (vi->ndim < 0)
        return si_error(SI_ERR_UNSUPPORTED, "%s: graph input '%s' has no shape", m->path, vi->name);
    for (int d = 1; d < vi->ndim; d++)
        if (vi->dims[d] < 0)
            return si_error(SI_ERR_UNSUPPORTED,
                            "%s: graph input '%s' has a symbolic dimension '%s' at position %d; "
                            "only the batch dimension (0) may be symbolic",
                            m->path, vi->name, vi->dim_params[d] ? vi->dim_params[d] : "?", d);
    return SI_OK;
}

static si_status add_inputs(si_builder *b, const si_model_proto *m) {
    si_graph *g = b->g;
    g->inputs = si_xcalloc((size_t)m->n_inputs + 1, sizeof *g->inputs);
    for (int i = 0; i < m->n_inputs; i++) {
        const si_value_info *vi = &m->inputs[i];
        if (si_b_find(b, vi->name) >= 0) continue; /* initializer listed as input (IR < 4) */
        si_status st = check_input(m, vi);
        if (st != SI_OK) return st;
        int id = si_b_add_value(b, vi->name);
        si_value *v = &g->values[id];
        v->is_input = true;
        v->shape.ndim = vi->ndim;
        memcpy(v->shape.dims, vi->dims, sizeof(int64_t) * (size_t)vi->ndim);
        v->batch_dim = vi->ndim > 0 && vi->dims[0] < 0;
        if (v->batch_dim) v->shape.dims[0] = 1;
        g->inputs[g->n_inputs++] = id;
    }
    return SI_OK;
}

static si_status find_outputs(si_builder *b, const si_model_proto *m) {
    si_graph *g = b->g;
    g->outputs = si_xcalloc((size_t)m->n_outputs, sizeof *g->outputs);
    for (int i = 0; i < m->n_outputs; i++) {
        int id = si_b_find(b, m->outputs[i].name);
        if (id < 0)
            return si_error(SI_ERR_FORMAT, "%s: graph output '%s' is not produced by any node",
                            m->path, m->outputs[i].name);
        g->outputs[g->n_outputs++] = id;
    }
    return SI_OK;
}

/* A Pad that adds nothing (Swin pads its windows to a multiple of 7 with sizes computed from
 * shapes, zero at 224 x 224) or a Slice that keeps everything (its crop back) would copy its
 * input: it becomes an identity view. */
static bool copies_nothing(const si_graph *g, const si_gnode *n) {
    if (n->op == SI_OP_PAD) {
        for (int d = 0; d < 2 * SI_MAX_DIMS; d++)
            if (n->pads[d]) return false;
        return true;
    }
    if (n->op != SI_OP_SLICE) return false;
    const si_shape *x = &g->values[n->in[0]].shape, *y = &g->values[n->out].shape;
    if (x->ndim != y->ndim) return false;
    for (int d = 0; d < x->ndim; d++)
        if (n->starts[d] != 0 || n->steps[d] != 1 || x->dims[d] != y->dims[d]) return false;
    return true;
}

/* The Pads and Slices that move nothing at batch 2 (none2) and at the batch inferred now. */
static void drop_identity_copies(si_graph *g, const bool *none2) {
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *n = &g->nodes[j];
        if (!none2[j] || !copies_nothing(g, n)) continue;
        const char *what = n->op == SI_OP_PAD ? "Pad(empty: a view)" : "Slice(whole: a view)";
        n->op = SI_OP_VIEW;
        n->view_kind = SI_VIEW_IDENTITY;
        free(n->op_type);
        n->op_type = si_xstrdup(what);
        n->n_in = 1;
        for (int k = 0; k < 4; k++) n->pslot[k] = -1;
        g->dropped_copies++;
    }
    count_uses(g);
}

/* Dead-node removal, then (unless opts->no_fusion) BatchNorm folding and the fusions. */
static si_status run_passes(si_graph *g, const si_graph_opts *opts) {
    count_uses(g);
    remove_dead(g);
    if (opts->no_fusion) return SI_OK;
    fold_batchnorm(g);
    fuse_silu(g);
    fuse_swish(g);
    /* residual first: Add then Relu becomes conv(+r) then relu, fused next */
    fuse_gelu(g);
    float *at2 = si_xmalloc(sizeof(float) * (size_t)(g->n_values + 1));
    bool *none2 = si_xcalloc((size_t)g->n_nodes + 1, sizeof *none2);
    si_status st = si_graph_infer(g, 2);
    for (int j = 0; j < g->n_nodes && st == SI_OK; j++) none2[j] = copies_nothing(g, &g->nodes[j]);
    for (int v = 0; v < g->n_values && st == SI_OK; v++) {
        const si_value *h = &g->values[v];
        at2[v] = h->kind == SI_VAL_HOST && h->dtype == SI_DT_FLOAT && h->data &&
                         si_shape_numel(&h->shape) == 1
                     ? ((const float *)h->data)[0]
                     : NAN;
    }
    if (st == SI_OK) st = si_graph_infer(g, 1);
    if (st == SI_OK) drop_identity_copies(g, none2);
    free(none2);
    if (st != SI_OK) {
        free(at2);
        return st;
    }
    g->linear_moves = si_linear_from_gemm(g);
    fold_linear_batchnorm(g);
    fuse_linear_bias(g);                 /* before Transposes move across the Linear layers */
    g->fused_rotary = si_fuse_rotary(g); /* before attention: they make q and k */
    int rownorms = si_fuse_rownorm(g);
    if (g->fused_rotary || rownorms) remove_dead(g);
    g->fused_attention = si_fuse_attention(g, at2);
    free(at2);
    if (g->fused_attention) g->zero_masks = si_attention_drop_zero_bias(g);
    if (g->fused_attention) g->linear_moves += si_move_transposes(g);
    int removed = g->removed_nodes; /* the layout ops the views replace die (not the model's) */
    if (g->fused_attention) g->attention_views = si_fuse_attention_views(g);
    g->concat_slices = si_fuse_concat_slices(g);
    if (g->attention_views || g->concat_slices) remove_dead(g);
    g->removed_nodes = removed;
    fold_linear_scale(g);
    int removed_before = g->removed_nodes;
    cancel_view_round_trips(g);
    remove_dead(g); /* the shape arithmetic of the views gone (the legacy exporter's Shapes) */
    g->removed_nodes = removed_before;
    fuse_residual(g);
    fuse_residual_through_transpose(g);
    fuse_activations(g);
    g->fused_norm = si_fuse_layernorm_neighbours(g);
    g->inferred_batch = -1; /* the fusions moved values */
    st = si_graph_infer(g, 1);
    if (st != SI_OK) return st;
    g->token_early = si_select_token_early(g);
    g->inferred_batch = -1;
    g->spatial_marked = false; /* the fusions moved values: mark again at the next infer */
    return SI_OK;
}

static void copy_meta(si_graph *g, const si_model_proto *m) {
    g->meta = si_xcalloc((size_t)m->n_meta + 1, sizeof *g->meta);
    for (int i = 0; i < m->n_meta; i++) {
        g->meta[i].key = si_xstrdup(m->meta[i].key);
        g->meta[i].value = si_xstrdup(m->meta[i].value);
    }
    g->n_meta = m->n_meta;
}

static si_status graph_build(si_model_proto *m, const si_graph_opts *opts, bool take,
                             si_graph **out) {
    static const si_graph_opts no_opts;
    if (!opts) opts = &no_opts;
    *out = NULL;
    si_builder b;
    builder_init(&b, m, opts);
    si_status st = add_constants(&b, m, opts, take);
    if (st == SI_OK) st = add_inputs(&b, m);
    if (st == SI_OK) {
        for (int i = 0; i < m->n_nodes; i++) convert_node(&b, &m->nodes[i]);
        if (b.n_unsupported) st = unsupported_error(&b);
    }
    if (st == SI_OK) st = find_outputs(&b, m);
    if (st == SI_OK) st = run_passes(b.g, opts);
    builder_free(&b);
    if (st != SI_OK) {
        si_graph_free(b.g);
        return st;
    }
    copy_meta(b.g, m);
    *out = b.g;
    return SI_OK;
}

si_status si_graph_build(const si_model_proto *m, const si_graph_opts *opts, si_graph **out) {
    return graph_build((si_model_proto *)m, opts, false, out); /* take false: m is not written */
}

si_status si_graph_load(const char *path, const si_graph_opts *opts, si_graph **out) {
    si_model_proto *m;
    *out = NULL;
    si_status st = si_model_proto_load(path, &m);
    if (st != SI_OK) return st;
    st = graph_build(m, opts, true, out); /* the weights move from m into the graph */
    si_model_proto_free(m);
    return st;
}

void si_graph_free(si_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n_values; i++) {
        free(g->values[i].name);
        free(g->values[i].data);
    }
    for (int i = 0; i < g->n_nodes; i++) free_node(&g->nodes[i]);
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

si_status si_graph_infer(si_graph *g, int batch) {
    if (g->inferred_batch == batch) return SI_OK;
    g->inferred_batch = -1;
    for (int i = 0; i < g->n_inputs; i++) {
        si_value *v = &g->values[g->inputs[i]];
        if (v->batch_dim) v->shape.dims[0] = batch;
        for (int d = 0; d < v->shape.ndim; d++)
            if (v->shape.dims[d] > ((int64_t)1 << 31) ||
                si_shape_numel(&v->shape) > ((int64_t)1 << 34))
                return si_error(SI_ERR_UNSUPPORTED, "%s: input '%s' is too large", g->path,
                                v->name);
    }
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *n = &g->nodes[j];
        si_status st = n->op == SI_OP_HOST ? si_host_eval(g, n) : si_graph_infer_node(g, n);
        if (st != SI_OK) return st;
        for (int o = 0; o < n->n_out; o++) {
            const si_shape *y = &g->values[n->outs[o]].shape;
            for (int d = 0; d < y->ndim; d++)
                if (y->dims[d] < 0 || y->dims[d] > ((int64_t)1 << 31))
                    return si_node_error(g, n, SI_ERR_FORMAT,
                                         "output dimension %d is out of "
                                         "range",
                                         d);
            if (si_shape_numel(y) > ((int64_t)1 << 34))
                return si_node_error(g, n, SI_ERR_FORMAT, "output of %lld elements is too large",
                                     (long long)si_shape_numel(y));
        }
    }
    g->inferred_batch = batch;
    if (!g->spatial_marked) mark_spatial(g); /* ranks only: once per graph */
    return SI_OK;
}
