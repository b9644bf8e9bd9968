/* Rotary position embeddings as one node. EVA-02 (timm) rotates q and k before attention as
 *   y = concat(x[..., :n, :], r(x[..., n:, :]))   (n tokens, the class token, left alone)
 *   r(x) = x * C + rot(x) * S                     (C, S: constant (T - n, D) tables)
 * with rot(x) = stack(-x[..., 1::2], x[..., ::2]).reshape(x.shape) (pairs, "interleaved") or
 * concat(-x[..., D/2:], x[..., :D/2]) (halves, Hugging Face's rotate_half). As exported that is
 * a dozen Slices, Neg, Unsqueeze, Concat, Reshape, Mul and Add per operand, each a pass over q or
 * k; here the whole of it becomes one SI_OP_ROTARY node reading x once:
 *   y[.., t, d] = t < n ? x[.., t, d] : x[.., t, d] C[t - n, d] + s(d) x[.., t, p(d)] S[t - n, d]
 * with p(d) the partner (d ^ 1, or d +- D/2) and s(d) -1 for the first of a pair. Run after the
 * shapes are inferred and before the attention fusion (whose q and k it then makes). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"
#include "import.h"

/* Node n a Slice of its input along the last-but-k axis only (k 0: the last), starting at
 * start with step: *x its input. The other axes pass whole. */
static bool slice_of(const si_graph *g, const si_gnode *n, int k, int64_t start, int64_t step,
                     int *x) {
    if (!n || n->op != SI_OP_SLICE) return false;
    const si_shape *xs = &g->values[n->in[0]].shape, *ys = &g->values[n->out].shape;
    int nd = xs->ndim, a = nd - 1 - k;
    if (ys->ndim != nd || a < 0) return false;
    for (int d = 0; d < nd; d++)
        if (d != a && (ys->dims[d] != xs->dims[d] || n->starts[d] != 0 || n->steps[d] != 1))
            return false;
    if (n->starts[a] != start || n->steps[a] != step) return false;
    *x = n->in[0];
    return true;
}

/* v = Neg(u) alone: u */
static bool negated(si_graph *g, int v, int *u) {
    si_gnode *n = si_graph_producer(g, v);
    if (!n || n->op != SI_OP_ACTIVATION || n->act.kind != SI_ACT_NEG || n->residual >= 0 ||
        g->values[v].uses != 1)
        return false;
    *u = n->in[0];
    return true;
}

/* v = Unsqueeze(u) of a trailing axis: u */
static bool unsqueezed_last(si_graph *g, int v, int *u) {
    si_gnode *n = si_graph_producer(g, v);
    if (!n || n->op != SI_OP_VIEW || n->view_kind != SI_VIEW_UNSQUEEZE) return false;
    const si_shape *us = &g->values[n->in[0]].shape, *vs = &g->values[v].shape;
    if (vs->ndim != us->ndim + 1 || vs->dims[vs->ndim - 1] != 1 ||
        memcmp(vs->dims, us->dims, sizeof(int64_t) * (size_t)us->ndim) != 0)
        return false;
    *u = n->in[0];
    return true;
}

/* v = rot(x) for some x: *x, and *half (true: halves; false: interleaved pairs). */
static bool rotated(si_graph *g, int v, int *x, bool *half) {
    si_gnode *n = si_graph_producer(g, v);
    if (!n) return false;
    int a, b, u;
    /* interleaved: Reshape(Concat(Unsqueeze(Neg(x[..., 1::2])), Unsqueeze(x[..., ::2]), -1)) */
    if (n->op == SI_OP_VIEW && n->view_kind == SI_VIEW_RESHAPE) {
        si_gnode *c = si_graph_producer(g, n->in[0]);
        const si_shape *cs = c ? &g->values[c->out].shape : NULL;
        const si_shape *vs = &g->values[v].shape;
        int nd = vs->ndim;
        if (nd < 2 || !c || c->op != SI_OP_CONCAT || c->n_in != 2 || cs->ndim != nd + 1 ||
            si_imp_norm_axis(c->axis, g->values[c->out].shape.ndim) != nd || cs->dims[nd] != 2 ||
            cs->dims[nd - 1] * 2 != vs->dims[nd - 1] ||
            memcmp(cs->dims, vs->dims, sizeof(int64_t) * (size_t)(nd - 1)) != 0 ||
            !unsqueezed_last(g, c->in[0], &a) || !unsqueezed_last(g, c->in[1], &b) ||
            !negated(g, a, &u) || !slice_of(g, si_graph_producer(g, u), 0, 1, 2, x) ||
            !slice_of(g, si_graph_producer(g, b), 0, 0, 2, &u) || u != *x ||
            !si_shape_same(&g->values[v].shape, &g->values[*x].shape))
            return false;
        *half = false;
        return true;
    }
    /* halves: Concat(Neg(x[..., D/2:]), x[..., :D/2], -1) */
    const si_shape *vs = &g->values[v].shape;
    if (vs->ndim < 2 || n->op != SI_OP_CONCAT || n->n_in != 2 ||
        si_imp_norm_axis(n->axis, g->values[n->out].shape.ndim) != vs->ndim - 1 ||
        vs->dims[vs->ndim - 1] % 2 || !negated(g, n->in[0], &u))
        return false;
    int64_t h = vs->dims[vs->ndim - 1] / 2;
    if (g->values[u].shape.dims[vs->ndim - 1] != h ||
        !slice_of(g, si_graph_producer(g, u), 0, h, 1, x) ||
        !slice_of(g, si_graph_producer(g, n->in[1]), 0, 0, 1, &u) || u != *x ||
        g->values[n->in[1]].shape.dims[vs->ndim - 1] != h ||
        !si_shape_same(vs, &g->values[*x].shape))
        return false;
    *half = true;
    return true;
}

/* Value v as a constant: v itself, or the part of a constant that a Split gives (timm's sin
 * and cos halves of one table; Split runs on the device, not folded), made a constant now
 * (once). -1 when v is neither. */
static int constant(si_graph *g, int v) {
    if (g->values[v].kind == SI_VAL_CONST) return v;
    si_gnode *sp = si_graph_producer(g, v);
    if (!sp || sp->op != SI_OP_SPLIT || g->values[sp->in[0]].kind != SI_VAL_CONST ||
        g->values[sp->in[0]].dtype != SI_DT_FLOAT || !g->values[sp->in[0]].data)
        return -1;
    const si_shape xs = g->values[sp->in[0]].shape, ys = g->values[v].shape;
    int ax = sp->axis < 0 ? sp->axis + xs.ndim : sp->axis, k = 0;
    if (ax < 0 || ax >= xs.ndim || ys.ndim != xs.ndim) return -1;
    int64_t start = 0;
    while (k < sp->n_out && sp->outs[k] != v) start += g->values[sp->outs[k++]].shape.dims[ax];
    if (k == sp->n_out) return -1;
    char name[160];
    snprintf(name, sizeof name, "%.120s/const", g->values[v].name);
    for (int u = 0; u < g->n_values; u++) /* made already, by an earlier match */
        if (g->values[u].kind == SI_VAL_CONST && !strcmp(g->values[u].name, name)) return u;
    int64_t outer = 1, inner = 1, n = si_shape_numel(&ys);
    for (int d = 0; d < ax; d++) outer *= xs.dims[d];
    for (int d = ax + 1; d < xs.ndim; d++) inner *= xs.dims[d];
    float *data = si_xmalloc(sizeof(float) * (size_t)(n ? n : 1));
    const float *src = g->values[sp->in[0]].data;
    for (int64_t o = 0; o < outer; o++)
        memcpy(data + o * ys.dims[ax] * inner, src + (o * xs.dims[ax] + start) * inner,
               sizeof(float) * (size_t)(ys.dims[ax] * inner));
    return si_graph_add_const(g, name, &ys, data);
}

/* c a constant table for x (rank >= 2): (T, D) as x's last two dims, any leading 1s. */
static bool table_for(const si_graph *g, int c, int x) {
    const si_value *cv = &g->values[c];
    const si_shape *xs = &g->values[x].shape;
    if (cv->kind != SI_VAL_CONST || cv->dtype != SI_DT_FLOAT || !cv->data || cv->shape.ndim < 2 ||
        xs->ndim < 2 || cv->shape.ndim > xs->ndim)
        return false;
    int nd = cv->shape.ndim;
    for (int d = 0; d < nd - 2; d++)
        if (cv->shape.dims[d] != 1) return false;
    return cv->shape.dims[nd - 2] == xs->dims[xs->ndim - 2] &&
           cv->shape.dims[nd - 1] == xs->dims[xs->ndim - 1];
}

/* v = Mul(a, b) of a computed value and a table: *x and *c. */
static bool times_table(si_graph *g, int v, int *x, int *c) {
    si_gnode *n = si_graph_producer(g, v);
    if (!n || n->op != SI_OP_BINARY || n->binop != SI_BIN_MUL || n->act.kind || n->residual >= 0 ||
        g->values[v].uses != 1)
        return false;
    for (int side = 0; side < 2; side++) {
        int k = n->in[1 - side], u = n->in[side];
        if (g->values[u].kind != SI_VAL_RUNTIME) continue;
        int kc = constant(g, k);
        if (kc < 0 || !table_for(g, kc, u)) continue;
        *x = u;
        *c = kc;
        return true;
    }
    return false;
}

typedef struct {
    int x, cos, sin, skip;
    bool half;
} rope;

/* Add node ad = x C + rot(x) S: the rope over x. */
static bool match_add(si_graph *g, const si_gnode *ad, rope *r) {
    if (ad->op != SI_OP_BINARY || ad->binop != SI_BIN_ADD || ad->act.kind || ad->residual >= 0)
        return false;
    for (int side = 0; side < 2; side++) {
        int x, c, rx, s, xr;
        bool half;
        if (!times_table(g, ad->in[side], &x, &c) || !times_table(g, ad->in[1 - side], &rx, &s) ||
            !rotated(g, rx, &xr, &half) || xr != x || x == rx)
            continue;
        *r = (rope){.x = x, .cos = c, .sin = s, .skip = 0, .half = half};
        return true;
    }
    return false;
}

/* The rope's x a Slice X[..., n:, :] read by this pattern and one Concat(X[..., :n, :], y) along
 * the tokens, y the rope's output read by that Concat alone: the Concat's node, r over X. */
static si_gnode *skipped_tokens(si_graph *g, int y, rope *r) {
    int X, X0;
    si_gnode *s = si_graph_producer(g, r->x);
    const si_shape *xs = &g->values[r->x].shape;
    int nd = xs->ndim;
    if (g->values[y].uses != 1 || !s || s->op != SI_OP_SLICE) return NULL;
    const si_shape *Xs = &g->values[s->in[0]].shape;
    int64_t n = Xs->ndim == nd ? Xs->dims[nd - 2] - xs->dims[nd - 2] : 0;
    if (n <= 0 || !slice_of(g, s, 1, n, 1, &X)) return NULL;
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *c = &g->nodes[j];
        if (c->op != SI_OP_CONCAT || c->n_in != 2 || c->in[1] != y ||
            si_imp_norm_axis(c->axis, g->values[c->out].shape.ndim) != nd - 2)
            continue;
        if (!slice_of(g, si_graph_producer(g, c->in[0]), 1, 0, 1, &X0) || X0 != X ||
            g->values[c->in[0]].shape.dims[nd - 2] != n)
            return NULL;
        r->x = X;
        r->skip = (int)n;
        return c;
    }
    return NULL;
}

int si_fuse_rotary(si_graph *g) {
    int fused = 0;
    for (int j = 0; j < g->n_nodes; j++) {
        rope r;
        if (!match_add(g, &g->nodes[j], &r)) continue;
        si_gnode *n = skipped_tokens(g, g->nodes[j].out, &r);
        if (!n) n = &g->nodes[j];
        /* the node that gives the result becomes the rope; the rest dies unread */
        int out = n->out;
        char *name = si_xstrdup(n->name);
        si_gnode fresh = {
            .op = SI_OP_ROTARY, .name = name, .residual = -1, .premul = -1, .bias = -1};
        for (int s = 0; s < 4; s++) fresh.pslot[s] = -1;
        fresh.op_type = si_xstrdup(r.half ? "Rotary(halves)" : "Rotary(pairs)");
        si_node_add_input(&fresh, r.x);
        si_node_add_input(&fresh, r.cos);
        si_node_add_input(&fresh, r.sin);
        fresh.out = fresh.outs[0] = out;
        fresh.n_out = 1;
        fresh.rot_skip = r.skip;
        fresh.rot_half = r.half;
        free(n->name);
        free(n->op_type);
        free(n->in);
        *n = fresh;
        fused++;
    }
    return fused;
}

/* Whether table c is (t, d), behind leading 1s. */
static bool table_is(const si_shape *c, int64_t t, int64_t d) {
    if (c->ndim < 2) return false;
    for (int k = 0; k < c->ndim - 2; k++)
        if (c->dims[k] != 1) return false;
    return c->dims[c->ndim - 2] == t && c->dims[c->ndim - 1] == d;
}

si_status si_infer_rotary(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    si_attn_view v; /* the rows as read: x itself, or x through the view */
    si_status st = si_view_input(g, n, 0, &v);
    if (st != SI_OK) return st;
    if (n->aview) x = &v.shape;
    int nd = x->ndim;
    if (nd < 2 || x->dims[nd - 1] % 2 || x->dims[nd - 2] < n->rot_skip ||
        !table_is(&g->values[n->in[1]].shape, x->dims[nd - 2] - n->rot_skip, x->dims[nd - 1]) ||
        !table_is(&g->values[n->in[2]].shape, x->dims[nd - 2] - n->rot_skip, x->dims[nd - 1]))
        return si_node_error(g, n, SI_ERR_FORMAT, "rotary tables do not fit the tokens");
    *y = *x;
    return SI_OK;
}
