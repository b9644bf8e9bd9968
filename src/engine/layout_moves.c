/* Layout ops moved out of the way of the fused paths. nn.MultiheadAttention (torchvision's ViT,
 * OpenAI CLIP and open_clip) writes its out-projection as Gemm on rows flattened by a Reshape
 * and unflattened by another, and torchvision's runs it sequence-first between two Transposes
 * of the whole (N, T, E) activation. Here, before attention is fused:
 *   - a Gemm by a constant matrix becomes a Linear layer (MatMul and bias), the form whose bias,
 *     residual and activation ride in the GEMM;
 *   - Reshape -> Linear -> Reshape that only flattens and restores the leading axes becomes one
 *     Linear over them;
 *   - a Transpose that keeps the last axis moves across the Linear layers next to it (a Linear
 *     works row by row, so the order of its rows is free): up through the out-projection to
 *     the Transpose that merges the heads, with which it composes; down below the in-projection,
 *     where the attention's views read it as strides.
 * Then the heads are split and merged in place (attention_views.c) and the residual Add rides
 * in the out-projection's GEMM, as for timm's ViT: no copy of an activation is left. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

/* The node reading value v, when exactly one does (NULL otherwise). */
static si_gnode *only_reader(si_graph *g, int v) {
    if (g->values[v].uses != 1) return NULL;
    for (int j = 0; j < g->n_nodes; j++)
        for (int k = 0; k < g->nodes[j].n_in; k++)
            if (g->nodes[j].in[k] == v) return &g->nodes[j];
    return NULL; /* a graph output */
}

static bool keeps_last_axis(const si_gnode *t, int nd) {
    return t->op == SI_OP_TRANSPOSE && nd >= 2 && t->perm[nd - 1] == nd - 1;
}

static bool plain_linear(const si_graph *g, const si_gnode *n) {
    return si_graph_is_linear(g, n) && n->residual < 0;
}

/* --- Gemm as a Linear layer ------------------------------------------------------------------ */
/* Gemm(A, B, C) with A computed, not transposed, B a constant matrix and C absent or a constant
 * of one value per column: MatMul(A, alpha op(B)) with bias beta C. */
static int gemm_as_linear(si_graph *g) {
    int done = 0;
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *n = &g->nodes[j];
        if (n->op != SI_OP_GEMM || n->trans_a || n->act.kind || n->residual >= 0) continue;
        const si_value *a = &g->values[n->in[0]], *b = &g->values[n->in[1]];
        const si_value *c = n->n_in > 2 ? &g->values[n->in[2]] : NULL;
        if (a->kind != SI_VAL_RUNTIME || a->shape.ndim != 2 || b->kind != SI_VAL_CONST ||
            b->dtype != SI_DT_FLOAT || b->shape.ndim != 2 || !b->data)
            continue;
        int64_t k = b->shape.dims[n->trans_b ? 1 : 0], m = b->shape.dims[n->trans_b ? 0 : 1];
        if (c && (c->kind != SI_VAL_CONST || c->dtype != SI_DT_FLOAT || !c->data ||
                  si_shape_numel(&c->shape) != m || c->shape.dims[c->shape.ndim - 1] != m))
            continue;
        float *w = si_xmalloc(sizeof(float) * (size_t)(k * m));
        const float *bd = b->data, *cd = c ? c->data : NULL;
        for (int64_t r = 0; r < k; r++)
            for (int64_t q = 0; q < m; q++)
                w[r * m + q] = n->alpha * (n->trans_b ? bd[q * k + r] : bd[r * m + q]);
        size_t len = strlen(b->name) + 8;
        char *wname = si_xmalloc(len), *bname = si_xmalloc(len);
        snprintf(wname, len, "%s/linear", b->name);
        snprintf(bname, len, "%s/bias", b->name);
        float *bias = NULL;
        if (cd) {
            bias = si_xmalloc(sizeof(float) * (size_t)m);
            for (int64_t q = 0; q < m; q++) bias[q] = n->beta * cd[q];
        }
        /* a, b and c point into g->values, which adding a value may move */
        int wid = si_graph_add_const(g, wname, &(si_shape){.ndim = 2, .dims = {k, m}}, w);
        int bid =
            bias ? si_graph_add_const(g, bname, &(si_shape){.ndim = 1, .dims = {m}}, bias) : -1;
        free(wname);
        free(bname);
        n->op = SI_OP_MATMUL;
        n->trans_a = n->trans_b = 0;
        n->alpha = n->beta = 1.f;
        n->in[1] = wid;
        n->n_in = 2;
        if (bid >= 0) {
            n->bias = bid;
            si_node_add_input(n, bid);
        }
        done++;
    }
    si_graph_compact(g);
    return done;
}

/* --- Reshape -> Linear -> Reshape as one Linear ---------------------------------------------- */
/* r as a Reshape to its input's first `lead` dims (copied: 0 keeps an input dim) and one more of
 * k: right at every batch, and after its input is permuted among those dims. */
static void reshape_keeping(si_gnode *r, int lead, int64_t k) {
    r->view_kind = SI_VIEW_RESHAPE;
    r->pslot[0] = -1;
    r->n_in = 1;
    r->win.count_include_pad = 0; /* allowzero off: 0 copies */
    r->n_attr_ints = lead + 1;
    for (int d = 0; d < lead; d++) r->attr_ints[d] = 0;
    r->attr_ints[lead] = k;
}

/* Whether x's first `lead` dims are l's and the rest multiply to k. */
static bool leads(const si_shape *x, const int64_t *l, int lead, int64_t k) {
    if (x->ndim <= lead) return false;
    int64_t rest = 1;
    for (int d = 0; d < x->ndim; d++)
        if (d < lead ? x->dims[d] != l[d] : (rest *= x->dims[d], false)) return false;
    return rest == k;
}

/* Reshape(x -> (R, K)), Linear -> (R, N), Reshape -> (L..., N) where x is (L..., ...) with the
 * rest K: the first Reshape goes to (L..., K) and the Linear writes the second's output. */
static int merge_flattened_linear(si_graph *g) {
    int done = 0;
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *m = &g->nodes[j];
        if (!plain_linear(g, m) || g->values[m->in[0]].shape.ndim != 2) continue;
        si_gnode *r1 = si_graph_producer(g, m->in[0]), *r2 = only_reader(g, m->out);
        if (!r1 || r1->op != SI_OP_VIEW || g->values[r1->out].uses != 1 || !r2 ||
            r2->op != SI_OP_VIEW)
            continue;
        const si_shape *x = &g->values[r1->in[0]].shape, *y = &g->values[r2->out].shape;
        int64_t k = g->values[m->in[0]].shape.dims[1], n = g->values[m->out].shape.dims[1];
        int lead = y->ndim - 1;
        if (lead < 1 || y->dims[lead] != n || !leads(x, y->dims, lead, k)) continue;
        reshape_keeping(r1, lead, k);
        int out = r2->out;
        r2->op = -1;
        m->out = m->outs[0] = out;
        g->values[out].producer = j;
        done++;
    }
    si_graph_compact(g);
    return done;
}

/* --- Transposes across Linear layers --------------------------------------------------------- */
/* A new Transpose at node position at, of value x by perm (rank nd), into a new value. */
static int insert_transpose(si_graph *g, int at, int x, const int *perm, int nd) {
    si_shape s = g->values[x].shape;
    for (int d = 0; d < nd; d++) s.dims[d] = g->values[x].shape.dims[perm[d]];
    size_t len = strlen(g->values[x].name) + 12;
    char *name = si_xmalloc(len);
    snprintf(name, len, "%s/permuted", g->values[x].name);
    int v = si_graph_add_runtime(g, name, &s);
    si_gnode *t = si_graph_insert_nodes(g, at, 1);
    t->op = SI_OP_TRANSPOSE;
    t->name = name;
    t->op_type = si_xstrdup("Transpose");
    t->n_attr_ints = nd;
    for (int d = 0; d < nd; d++) t->attr_ints[d] = t->perm[d] = perm[d];
    si_node_add_input(t, x);
    t->out = t->outs[0] = v;
    t->n_out = 1;
    g->values[v].producer = at;
    return v;
}

/* Transpose(Linear(z)) keeping the last axis, the Linear read by it alone: the Transpose moves
 * before the Linear, onto z, or through a Reshape that made z from x keeping z's leading axes,
 * onto x (the Reshape then copies those axes, so it holds permuted), where x is itself made by
 * a Transpose that it then composes with. */
static int hoist_transposes(si_graph *g) {
    int done = 0;
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *t = &g->nodes[j];
        int nd = t->op == SI_OP_TRANSPOSE ? g->values[t->out].shape.ndim : 0;
        si_gnode *m = nd ? si_graph_producer(g, t->in[0]) : NULL;
        if (!keeps_last_axis(t, nd) || !m || !plain_linear(g, m) || g->values[t->in[0]].uses != 1)
            continue;
        int mi = (int)(m - g->nodes), z = m->in[0], perm[SI_MAX_DIMS];
        si_gnode *r = si_graph_producer(g, z);
        const si_shape *zs = &g->values[z].shape;
        bool through = r && r->op == SI_OP_VIEW && g->values[z].uses == 1 &&
                       leads(&g->values[r->in[0]].shape, zs->dims, nd - 1, zs->dims[nd - 1]);
        int x = through ? r->in[0] : z, xn = g->values[x].shape.ndim;
        si_gnode *px = si_graph_producer(g, x); /* moved only to compose: never a copy more */
        if (!px || px->op != SI_OP_TRANSPOSE || g->values[x].uses != 1) continue;
        for (int d = 0; d < xn; d++) perm[d] = d < nd - 1 ? t->perm[d] : d;
        int at = through ? (int)(r - g->nodes) : mi, out = t->out;
        t->op = -1;
        int v = insert_transpose(g, at, x, perm, xn); /* moves the nodes from at on by one */
        m = &g->nodes[mi + 1];
        if (through) {
            r = &g->nodes[at + 1];
            reshape_keeping(r, nd - 1, zs->dims[nd - 1]);
            r->in[0] = v;
            g->values[z].shape = g->values[out].shape; /* the Linear's input, permuted */
            g->values[z].shape.dims[nd - 1] = zs->dims[nd - 1];
        } else {
            m->in[0] = v;
        }
        m->out = m->outs[0] = out;
        g->values[out].producer = mi + 1;
        j++;
        done++;
    }
    si_graph_compact(g);
    return done;
}

/* Transpose(Transpose(x)), the inner one read by the outer alone: one Transpose of x. */
static int compose_transposes(si_graph *g) {
    int done = 0;
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *t2 = &g->nodes[j],
                 *t1 = t2->op == SI_OP_TRANSPOSE ? si_graph_producer(g, t2->in[0]) : 0;
        if (!t1 || t1->op != SI_OP_TRANSPOSE || g->values[t2->in[0]].uses != 1) continue;
        int nd = g->values[t2->out].shape.ndim;
        for (int d = 0; d < nd; d++) t2->attr_ints[d] = t2->perm[d] = t1->perm[t2->perm[d]];
        t2->n_attr_ints = nd;
        t2->in[0] = t1->in[0];
        t1->op = -1;
        done++;
    }
    si_graph_compact(g);
    return done;
}

/* Whether value v is read, and only by Reshape-like views (the head split of a projection). */
static bool read_by_views(const si_graph *g, int v) {
    int readers = 0;
    for (int j = 0; j < g->n_nodes; j++)
        for (int k = 0; k < g->nodes[j].n_in; k++)
            if (g->nodes[j].in[k] == v) {
                if (g->nodes[j].op != SI_OP_VIEW) return false;
                readers++;
            }
    return readers > 0;
}

/* Linear(Transpose(x)) keeping the last axis, the Transpose read by it alone and the Linear's
 * output split by views (a packed projection): the Linear runs on x and the Transpose after it,
 * where the fused attention's views read it as strides (a Transpose of the wider output that
 * they did not take would cost more than the one moved). */
static int sink_transposes(si_graph *g) {
    int done = 0;
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *m = &g->nodes[j];
        si_gnode *t = plain_linear(g, m) ? si_graph_producer(g, m->in[0]) : NULL;
        int nd = g->values[m->out].shape.ndim;
        if (!t || !keeps_last_axis(t, nd) || g->values[m->in[0]].uses != 1 ||
            !read_by_views(g, m->out))
            continue;
        int ti = (int)(t - g->nodes);
        si_shape s = g->values[t->in[0]].shape;
        s.dims[nd - 1] = g->values[m->out].shape.dims[nd - 1];
        size_t len = strlen(g->values[m->out].name) + 12;
        char *name = si_xmalloc(len);
        snprintf(name, len, "%s/unpermuted", g->values[m->out].name);
        int v = si_graph_add_runtime(g, name, &s);
        free(name);
        m = &g->nodes[j];
        t = &g->nodes[ti];
        /* the Linear reads x and writes v; the Transpose reads v and writes the old output */
        m->in[0] = t->in[0];
        t->in[0] = v;
        int out = m->out;
        m->out = m->outs[0] = v;
        t->out = t->outs[0] = out;
        si_gnode moved = *t; /* the Transpose after the Linear, in topological order */
        memmove(&g->nodes[ti], &g->nodes[ti + 1], sizeof *g->nodes * (size_t)(j - ti));
        g->nodes[j] = moved;
        for (int k = ti; k <= j; k++)
            for (int o = 0; o < g->nodes[k].n_out; o++) g->values[g->nodes[k].outs[o]].producer = k;
        done++;
    }
    si_graph_compact(g);
    return done;
}

/* The shapes at batch 1 after a pass moved values; false (nothing more moved) where they fail. */
static bool reinfer(si_graph *g) {
    g->inferred_batch = -1;
    if (si_graph_infer(g, 1) == SI_OK) return true;
    si_error_clear();
    return false;
}

int si_linear_from_gemm(si_graph *g) {
    int n = reinfer(g) ? gemm_as_linear(g) : 0;
    if (reinfer(g)) n += merge_flattened_linear(g);
    g->inferred_batch = -1;
    return n;
}

int si_move_transposes(si_graph *g) {
    int n = reinfer(g) ? hoist_transposes(g) : 0;
    if (reinfer(g)) n += compose_transposes(g);
    if (reinfer(g)) n += sink_transposes(g);
    g->inferred_batch = -1;
    return n;
}
