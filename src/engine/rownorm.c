/* L2 normalisation of rows as one node. Swin V2's cosine attention normalises q and k as
 * torch's F.normalize exports it, x / Expand(Clip(ReduceL2(x, last axis), min = eps)), four
 * passes over q or k (the Expand a full copy of the norms); the attention's per-head logit scale
 * then multiplies q once more (attention.c moves it there). Here the four become one
 * SI_OP_ROWNORM node, y = x s[(row / div) % mod] / max(|x row|, eps), and attention.c folds the
 * per-head scale into its s. Run on inferred shapes, before the attention fusion, which then
 * takes q's and k's RowNorm into the attention node itself where it can
 * (si_rownorm_into_attention: the kernels normalise q and k as they load them). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"
#include "import.h"

/* Whether s is x's shape with the last dim 1. */
static bool row_shape(const si_shape *s, const si_shape *x) {
    if (s->ndim != x->ndim || s->dims[s->ndim - 1] != 1) return false;
    for (int d = 0; d < x->ndim - 1; d++)
        if (s->dims[d] != x->dims[d]) return false;
    return true;
}

/* Div node dv = x / [Expand](Clip(ReduceL2(x, last axis, keepdims), min eps > 0)): *eps. */
static bool match(si_graph *g, const si_gnode *dv, float *eps) {
    if (dv->op != SI_OP_BINARY || dv->binop != SI_BIN_DIV || dv->act.kind || dv->n_in != 2)
        return false;
    int x = dv->in[0], e = dv->in[1];
    const si_shape *xs = &g->values[x].shape;
    if (g->values[x].kind != SI_VAL_RUNTIME || xs->ndim < 2 || g->values[e].uses != 1) return false;
    si_gnode *p = si_graph_producer(g, e);
    if (p && p->op == SI_OP_EXPAND && row_shape(&g->values[p->in[0]].shape, xs)) {
        e = p->in[0];
        if (g->values[e].uses != 1) return false;
        p = si_graph_producer(g, e);
    }
    if (!p || !row_shape(&g->values[e].shape, xs) || p->op != SI_OP_ACTIVATION ||
        p->act.kind != SI_ACT_CLIP || p->n_in != 1 || !(p->act.lo > 0.f) || p->act.hi != INFINITY)
        return false;
    *eps = p->act.lo;
    int n = p->in[0];
    si_gnode *r = si_graph_producer(g, n);
    if (!r || g->values[n].uses != 1 || r->op != SI_OP_REDUCE || r->reduce_op != SI_REDUCE_L2 ||
        r->in[0] != x || !row_shape(&g->values[n].shape, xs))
        return false;
    for (int d = 0; d < xs->ndim; d++)
        if (r->reduce_mask[d] != (d == xs->ndim - 1)) return false;
    return true;
}

int si_fuse_rownorm(si_graph *g) {
    int fused = 0;
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *dv = &g->nodes[j];
        float eps;
        if (!match(g, dv, &eps)) continue;
        int x = dv->in[0];
        free(dv->op_type);
        dv->op_type = si_xstrdup("RowNorm(ReduceL2+Clip+Div)");
        dv->op = SI_OP_ROWNORM;
        dv->n_in = 1;
        dv->in[0] = x;
        dv->epsilon = eps;
        dv->rn_div = 1;
        dv->rn_mod = 0;
        fused++;
    }
    return fused; /* the Reduce, Clip and Expand die unread (the caller removes them) */
}

bool si_rownorm_take_scale(si_graph *g, int q, int c) {
    si_gnode *n = si_graph_producer(g, q);
    const si_value *cv = &g->values[c];
    if (!n || n->op != SI_OP_ROWNORM || n->n_in != 1 || g->values[q].uses != 1 ||
        cv->kind != SI_VAL_CONST || cv->dtype != SI_DT_FLOAT || !cv->data)
        return false;
    /* c over the rows' axes (q's but the last), right-aligned: the axes where it is not 1 must
     * be one run a..b, each as long as q's; then row r takes c[(r / div) % mod] */
    const si_shape *qs = &g->values[q].shape, *s = &cv->shape;
    int nr = qs->ndim - 1, off = nr - (s->ndim - 1), a = -1, b = -1;
    if (s->ndim < 1 || s->dims[s->ndim - 1] != 1 || off < 0) return false;
    for (int d = 0; d < s->ndim - 1; d++) {
        if (s->dims[d] == 1) continue;
        if (s->dims[d] != qs->dims[off + d] || (b >= 0 && b != off + d - 1)) return false;
        if (a < 0) a = off + d;
        b = off + d;
    }
    if (a < 0) return false; /* a scalar: the attention's scale takes it */
    int64_t div = 1, mod = 1;
    for (int d = b + 1; d < nr; d++) div *= qs->dims[d];
    for (int d = a; d <= b; d++) mod *= qs->dims[d];
    n->rn_div = div;
    n->rn_mod = mod;
    si_node_add_input(n, c);
    return true;
}

bool si_rownorm_into_attention(si_graph *g, si_gnode *att) {
    si_gnode *rq = si_graph_producer(g, att->in[0]), *rk = si_graph_producer(g, att->in[1]);
    if (!att->trans_b || att->qk_norm || !rq || !rk || rq == rk || rq->op != SI_OP_ROWNORM ||
        rk->op != SI_OP_ROWNORM || rq->aview || rk->aview || rk->n_in != 1 ||
        g->values[att->in[0]].uses != 1 || g->values[att->in[1]].uses != 1 ||
        rq->epsilon != rk->epsilon)
        return false;
    const si_shape *qs = &g->values[att->in[0]].shape;
    int64_t t = qs->ndim >= 3 ? qs->dims[qs->ndim - 2] : 0;
    bool scaled = rq->n_in > 1 && rq->rn_mod > 0;
    if (t < 1 || (scaled && rq->rn_div % t != 0)) return false; /* a scale within a matrix */
    att->in[0] = rq->in[0];
    att->in[1] = rk->in[0];
    att->epsilon = rq->epsilon;
    att->qk_norm = scaled ? 2 : 1;
    if (scaled) {
        att->rn_div = rq->rn_div / t;
        att->rn_mod = rq->rn_mod;
        si_node_add_input(att, rq->in[1]);
    }
    rq->op = rk->op = -1;
    return true;
}

si_status si_infer_rownorm(si_graph *g, si_gnode *n, const si_shape *x, si_shape *y) {
    si_attn_view v; /* the rows as read: x itself, or x through the view */
    si_status st = si_view_input(g, n, 0, &v);
    if (st != SI_OK) return st;
    if (n->aview) x = &v.shape;
    if (x->ndim < 2 || x->ndim > SI_INDEX_MAXD || n->rn_div < 1 || n->rn_mod < 0 ||
        (n->n_in > 1 && si_shape_numel(&g->values[n->in[1]].shape) != n->rn_mod))
        return si_node_error(g, n, SI_ERR_FORMAT, "row normalisation does not fit its input");
    *y = *x;
    return SI_OK;
}
