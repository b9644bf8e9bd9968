/* Fused attention's operands read and written in place. Exporters split a packed QKV projection
 * into heads with Reshape -> Transpose -> Split (or Slice) -> Squeeze, and merge the heads after
 * attention with Transpose -> Reshape; run as written, each of those copies the whole activation
 * (a fifth of ViT-B's time). Here the attention node reads Q, K and V straight from the
 * projection's output through strides, and writes Y in the order the next layer reads, when the
 * strides can say it; the layout ops then have no readers and die.
 *
 * A view is composed by walking from an operand back through layout ops to a value that is
 * stored row-major. Each logical dim keeps the sub-dims it was built from (a CuTe-style
 * hierarchical layout), so a Reshape that merges two axes whose strides do not chain (the
 * dynamo exporter's (N * heads, T, D) for K) can still be split back by a later Reshape. */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

#define SUBS 16 /* sub-dims one view may carry */

typedef struct {
    int src, nd, nsub;
    int64_t off;
    int first[SI_MAX_DIMS + 1]; /* logical dim d: sub-dims first[d] .. first[d + 1] - 1 */
    int64_t e[SUBS], s[SUBS];   /* sub-dim extents and strides, outermost first */
} lview;

static void row_major(const si_graph *g, int v, lview *w) {
    const si_shape *sh = &g->values[v].shape;
    *w = (lview){.src = v, .nd = sh->ndim, .nsub = sh->ndim};
    int64_t acc = 1;
    for (int d = sh->ndim - 1; d >= 0; d--) {
        w->e[d] = sh->dims[d];
        w->s[d] = acc;
        acc = si_mul_sat(acc, sh->dims[d]);
    }
    for (int d = 0; d <= sh->ndim; d++) w->first[d] = d;
}

/* Logical dim d as one (extent, stride), when its sub-dims chain (outer stride = inner stride x
 * inner extent); extent-1 sub-dims do not count. */
static bool merged(const lview *w, int d, int64_t *e, int64_t *s) {
    *e = 1;
    *s = 0;
    bool any = false;
    for (int k = w->first[d]; k < w->first[d + 1]; k++) {
        if (w->e[k] == 1) continue;
        if (any && *s != w->s[k] * w->e[k]) return false;
        *e = any ? *e * w->e[k] : w->e[k];
        *s = w->s[k];
        any = true;
    }
    return true;
}

static bool flat(const lview *w, int64_t *dims, int64_t *st) {
    for (int d = 0; d < w->nd; d++)
        if (!merged(w, d, &dims[d], &st[d])) return false;
    return true;
}

/* The view covers its source's bytes in row-major order (the value viewed aliases them). */
static bool covers_row_major(const si_graph *g, const lview *w) {
    int64_t dims[SI_MAX_DIMS], st[SI_MAX_DIMS], acc = 1;
    if (w->off != 0 || !flat(w, dims, st)) return false;
    for (int d = w->nd - 1; d >= 0; d--) {
        if (dims[d] != 1 && st[d] != acc) return false;
        acc *= dims[d];
    }
    return acc == si_shape_numel(&g->values[w->src].shape);
}

static bool push(lview *w, int64_t e, int64_t s) {
    if (w->nsub >= SUBS) return false;
    w->e[w->nsub] = e;
    w->s[w->nsub++] = s;
    return true;
}

static bool lv_transpose(lview *w, const int *perm) {
    lview t = *w;
    t.nsub = 0;
    for (int d = 0; d < w->nd; d++) {
        t.first[d] = t.nsub;
        for (int k = w->first[perm[d]]; k < w->first[perm[d] + 1]; k++) push(&t, w->e[k], w->s[k]);
    }
    t.first[w->nd] = t.nsub;
    *w = t;
    return true;
}

/* Regroups the sub-dims (extent-1 ones dropped) into the new dims, splitting a sub-dim where a
 * new dim ends inside it (its extent must divide). */
static bool lv_reshape(lview *w, const si_shape *to) {
    int64_t e[SUBS], s[SUBS];
    int n = 0, k = 0;
    for (int j = 0; j < w->nsub; j++) {
        if (w->e[j] <= 0) return false;
        if (w->e[j] != 1) e[n] = w->e[j], s[n++] = w->s[j];
    }
    lview r = *w;
    r.nd = to->ndim;
    r.nsub = 0;
    for (int d = 0; d < to->ndim; d++) {
        r.first[d] = r.nsub;
        int64_t want = to->dims[d], have = 1;
        if (want <= 0) return false;
        while (have < want) {
            int64_t need = want / have;
            if (k >= n) return false;
            if (e[k] <= need) {
                if (need % e[k] || !push(&r, e[k], s[k])) return false;
                have *= e[k++];
            } else {
                if (e[k] % need || !push(&r, need, s[k] * (e[k] / need))) return false;
                e[k] /= need;
                have = want;
            }
        }
    }
    r.first[to->ndim] = r.nsub;
    if (k != n) return false;
    *w = r;
    return true;
}

/* Logical dim a as a single sub-dim (for the ops that offset along it). */
static bool single(lview *w, int a) {
    int64_t e, s;
    if (!merged(w, a, &e, &s)) return false;
    lview t = *w;
    t.nsub = 0;
    for (int d = 0; d < w->nd; d++) {
        t.first[d] = t.nsub;
        if (d == a)
            push(&t, e, s);
        else
            for (int k = w->first[d]; k < w->first[d + 1]; k++) push(&t, w->e[k], w->s[k]);
    }
    t.first[w->nd] = t.nsub;
    *w = t;
    return true;
}

/* Along axis a: skip `start` elements, keep `extent`, every `step`-th. */
static bool lv_narrow(lview *w, int a, int64_t start, int64_t extent, int64_t step) {
    if (a < 0 || a >= w->nd || step <= 0 || !single(w, a)) return false;
    int k = w->first[a];
    w->off += start * w->s[k];
    w->e[k] = extent;
    w->s[k] *= step;
    return true;
}

static bool lv_split(const si_graph *g, const si_gnode *p, int x, lview *w) {
    int64_t start = 0;
    for (int o = 0; o < p->n_out; o++) {
        const si_shape *os = &g->values[p->outs[o]].shape;
        if (p->outs[o] == x) return lv_narrow(w, p->axis, start, os->dims[p->axis], 1);
        start += os->dims[p->axis];
    }
    return false;
}

static bool lv_slice(const si_graph *g, const si_gnode *p, int x, lview *w) {
    const si_shape *xs = &g->values[x].shape;
    if (xs->ndim != w->nd) return false;
    for (int d = 0; d < w->nd; d++) {
        int64_t e, s;
        bool whole =
            p->starts[d] == 0 && p->steps[d] == 1 && merged(w, d, &e, &s) && e == xs->dims[d];
        if (!whole && !lv_narrow(w, d, p->starts[d], xs->dims[d], p->steps[d])) return false;
    }
    return true;
}

/* Gather of one constant index: an offset, and the axis gone (or kept at 1 for a [1] index). */
static bool lv_gather(const si_graph *g, const si_gnode *p, lview *w) {
    const si_value *iv = &g->values[p->in[1]];
    if (iv->kind == SI_VAL_RUNTIME || !iv->data || si_shape_numel(&iv->shape) != 1) return false;
    int a = p->axis;
    int64_t e, s, i = si_value_i64(iv, 0);
    if (a < 0 || a >= w->nd || !merged(w, a, &e, &s)) return false;
    if (i < 0) i += e;
    if (!lv_narrow(w, a, i, 1, 1)) return false;
    if (iv->shape.ndim > 0) return true;
    for (int d = a; d < w->nd; d++) w->first[d] = w->first[d + 1];
    w->nd--;
    return true;
}

static bool layout_op(int op) {
    return op == SI_OP_VIEW || op == SI_OP_TRANSPOSE || op == SI_OP_SPLIT || op == SI_OP_SLICE ||
           op == SI_OP_GATHER;
}

/* x as a view of the nearest value up its layout ops that is stored row-major (x itself when
 * its producer computes, or when a step cannot be said with strides). */
static void walk(const si_graph *g, int x, lview *w, int depth) {
    row_major(g, x, w);
    int pj = g->values[x].producer;
    if (pj < 0 || depth > 32) return;
    const si_gnode *p = &g->nodes[pj];
    if (!layout_op(p->op) || p->n_in < 1 || g->values[p->in[0]].kind != SI_VAL_RUNTIME) return;
    lview in;
    walk(g, p->in[0], &in, depth + 1);
    bool ok = false;
    switch (p->op) {
    case SI_OP_VIEW:
        /* x aliases row-major bytes: x is the source, unless it has rank 4 (a backend may store
         * such a value channel-last: the view reads the value before, Hugging Face's
         * (N, T, E) projection rather than its (N, T, H, D) Reshape) */
        if (covers_row_major(g, &in) && g->values[x].shape.ndim != 4) return;
        ok = lv_reshape(&in, &g->values[x].shape);
        break;
    case SI_OP_TRANSPOSE: ok = lv_transpose(&in, p->perm); break;
    case SI_OP_SPLIT: ok = lv_split(g, p, x, &in); break;
    case SI_OP_SLICE: ok = lv_slice(g, p, x, &in); break;
    case SI_OP_GATHER: ok = lv_gather(g, p, &in); break;
    default: break;
    }
    if (ok) *w = in;
}

/* --- the per-node plan ----------------------------------------------------------------------- */
/* An operand's strided form at one batch size. A source of rank 4 is never taken: backends may
 * store those channel-last. */
typedef struct {
    bool taken, to_trans_b; /* to_trans_b: K^T viewed turns out to be K with rows of stride 1 */
    int src, nd;
    int64_t off, dims[SI_MAX_DIMS], st[SI_MAX_DIMS];
} operand;

static void plan_input(const si_graph *g, const si_gnode *n, int i, operand *o) {
    memset(o, 0, sizeof *o);
    lview w;
    walk(g, n->in[i], &w, 0);
    const si_shape *src = &g->values[w.src].shape;
    if (w.src == n->in[i] || src->ndim == 4 || !flat(&w, o->dims, o->st)) return;
    o->nd = w.nd;
    int nd = w.nd;
    if (i == 1 && !n->trans_b && o->st[nd - 2] == 1 && o->st[nd - 1] != 1) { /* K^T -> K */
        int64_t t = o->dims[nd - 1], u = o->st[nd - 1];
        o->dims[nd - 1] = o->dims[nd - 2], o->st[nd - 1] = o->st[nd - 2];
        o->dims[nd - 2] = t, o->st[nd - 2] = u;
        o->to_trans_b = true;
    }
    if (o->st[nd - 1] != 1) return;
    o->src = w.src;
    o->off = w.off;
    o->taken = true;
}

/* Whether node r reads value v only as a view or for its shape (the legacy exporter's Shape of
 * the merged heads, for the Reshape after). */
static bool reads_as_layout(const si_gnode *r) {
    return r->op == SI_OP_VIEW || si_reads_shape_only(r);
}

/* Y read once, by a Transpose that keeps the last axis in place, whose result only Reshape-like
 * views read (and Shape): Y is written straight into that result. */
static void plan_output(const si_graph *g, const si_gnode *n, operand *o) {
    memset(o, 0, sizeof *o);
    const si_value *y = &g->values[n->out];
    if (y->uses != 1) return;
    const si_gnode *t = NULL;
    for (int j = 0; j < g->n_nodes && !t; j++)
        for (int k = 0; k < g->nodes[j].n_in; k++)
            if (g->nodes[j].in[k] == n->out) t = &g->nodes[j];
    int nd = y->shape.ndim;
    if (!t || t->op != SI_OP_TRANSPOSE || t->perm[nd - 1] != nd - 1) return;
    const si_value *w = &g->values[t->out];
    for (int j = 0; j < g->n_nodes; j++)
        for (int k = 0; k < g->nodes[j].n_in; k++)
            if (g->nodes[j].in[k] == t->out && !reads_as_layout(&g->nodes[j])) return;
    int64_t acc = 1, sw[SI_MAX_DIMS];
    for (int d = nd - 1; d >= 0; d--) sw[d] = acc, acc *= w->shape.dims[d];
    for (int d = 0; d < nd; d++) o->st[t->perm[d]] = sw[d];
    memcpy(o->dims, y->shape.dims, sizeof(int64_t) * (size_t)nd);
    o->nd = nd;
    o->src = t->out;
    o->taken = true;
}

/* The batch sizes a plan is made at: every offset, stride and extent of a view is a product of
 * its source's extents, of which the batch is one, so it is a polynomial in the batch; where it
 * is linear at four sizes it is linear at every size (a cubic would need three axes of the
 * batch's extent). */
static const int SAMPLE[] = {2, 3, 5, 7};
#define N_SAMPLE (int)(sizeof SAMPLE / sizeof SAMPLE[0])

/* x at batch b as x0 + xb * b, from its values at the sample sizes; false where it is not. */
static bool linear(const int64_t *x, int64_t *x0, int64_t *xb) {
    *xb = (x[1] - x[0]) / (SAMPLE[1] - SAMPLE[0]);
    *x0 = x[0] - *xb * SAMPLE[0];
    for (int k = 0; k < N_SAMPLE; k++)
        if (x[k] != *x0 + *xb * SAMPLE[k]) return false;
    return true;
}

/* Operand i's plans at the sample sizes as one view that holds at every batch: the same source
 * and rank; the logical dim 0 a multiple of the batch (Swin's windows of every image) or fixed,
 * as every other dim is; the source's extents fixed but on one axis, a multiple of the batch;
 * offsets and strides linear in the batch. A growing extent is stored per image. */
static bool combine(const operand *o, const si_shape *srcs, si_attn_view *a) {
    for (int k = 0; k < N_SAMPLE; k++)
        if (!o[k].taken || o[k].src != o[0].src || o[k].nd != o[0].nd ||
            o[k].to_trans_b != o[0].to_trans_b || srcs[k].ndim != srcs[0].ndim)
            return false;
    int nd = o[0].nd;
    int64_t x[N_SAMPLE], x0, xb;
    *a = (si_attn_view){.src = srcs[0], .src_batch = -1, .taken = true};
    a->shape.ndim = nd;
    for (int d = 0; d < nd; d++) {
        for (int k = 0; k < N_SAMPLE; k++) x[k] = o[k].dims[d];
        if (!linear(x, &x0, &xb) || (xb != 0 && (xb < 0 || x0 != 0 || d != 0))) return false;
        a->shape.dims[d] = xb ? xb : x0;
        for (int k = 0; k < N_SAMPLE; k++) x[k] = o[k].st[d];
        if (!linear(x, &a->st[d], &a->st_b[d])) return false;
    }
    for (int k = 0; k < N_SAMPLE; k++) x[k] = o[k].off;
    if (!linear(x, &a->off, &a->off_b)) return false;
    bool grows = o[1].dims[0] != o[0].dims[0];
    for (int d = 0; d < srcs[0].ndim; d++) {
        for (int k = 0; k < N_SAMPLE; k++) x[k] = srcs[k].dims[d];
        if (!linear(x, &x0, &xb) || (xb != 0 && (xb < 0 || x0 != 0 || a->src_batch >= 0)))
            return false;
        if (xb) a->src_batch = d;
        a->src.dims[d] = xb ? xb : x0;
    }
    /* a fixed logical batch reads a fixed source; a growing one, a growing source */
    return grows == (a->src_batch >= 0);
}

/* Rewires node j: inputs to the views' sources, the output to the Transpose's result (the
 * Transpose dies); operands not taken stay their own values, row-major. */
static int apply(si_graph *g, int j, const si_attn_view *view, const operand *o) {
    si_gnode *n = &g->nodes[j];
    int taken = 0;
    n->aview = si_xcalloc(4, sizeof *n->aview);
    for (int i = 0; i < 4; i++) {
        if (!view[i].taken) continue;
        n->aview[i] = view[i];
        if (i < 3) {
            n->in[i] = o[i].src;
            if (o[i].to_trans_b) n->trans_b = 1;
        } else {
            g->nodes[g->values[o[i].src].producer].op = -1; /* the Transpose */
            n->out = n->outs[0] = o[i].src;
            g->values[o[i].src].producer = j;
        }
        taken++;
    }
    return taken;
}

/* Nodes that read their input as rows of its last axis, each row on its own, and can read them
 * through a view (si_node_rows): q's and k's normalisation (Swin V2) and rotary embedding
 * (EVA-02) before an attention. */
static bool row_wise(const si_gnode *n) {
    return n->op == SI_OP_ROWNORM || n->op == SI_OP_ROTARY;
}

/* Every attention node's four operands (a row-wise node's input) planned at every sample size:
 * node j's operand i at size k in o[(4 * j + i) * N_SAMPLE + k], its source's shape in srcs at
 * the same place. */
static bool plan_samples(si_graph *g, operand *o, si_shape *srcs) {
    for (int k = 0; k < N_SAMPLE; k++) {
        if (si_graph_infer(g, SAMPLE[k]) != SI_OK) {
            si_error_clear();
            return false;
        }
        for (int j = 0; j < g->n_nodes; j++) {
            const si_gnode *n = &g->nodes[j];
            if (n->op != SI_OP_ATTENTION && !row_wise(n)) continue;
            for (int i = 0; i < (row_wise(n) ? 1 : 4); i++) {
                size_t at = (size_t)(4 * j + i) * N_SAMPLE + (size_t)k;
                if (i < 3)
                    plan_input(g, n, i, &o[at]);
                else
                    plan_output(g, n, &o[at]);
                srcs[at] = o[at].taken ? g->values[o[at].src].shape : (si_shape){0};
            }
        }
    }
    return true;
}

/* Row-wise node j reads its input through view (q and k straight from the projection, as the
 * attention reads v). */
static void apply_row_wise(si_graph *g, int j, const si_attn_view *view, const operand *o) {
    si_gnode *n = &g->nodes[j];
    n->aview = si_xcalloc(1, sizeof *n->aview);
    n->aview[0] = *view;
    n->in[0] = o->src;
}

int si_fuse_attention_views(si_graph *g) {
    int n_att = 0, taken = 0;
    for (int j = 0; j < g->n_nodes; j++) n_att += g->nodes[j].op == SI_OP_ATTENTION;
    if (!n_att) return 0;
    size_t cells = (size_t)(4 * N_SAMPLE) * (size_t)g->n_nodes;
    operand *o = si_xcalloc(cells, sizeof *o);
    si_shape *srcs = si_xcalloc(cells, sizeof *srcs);
    bool planned = plan_samples(g, o, srcs);
    for (int j = 0; planned && j < g->n_nodes; j++) {
        if (row_wise(&g->nodes[j])) {
            si_attn_view view;
            size_t at = (size_t)(4 * j) * N_SAMPLE;
            if (combine(o + at, srcs + at, &view)) {
                apply_row_wise(g, j, &view, &o[at]);
                taken++;
            }
            continue;
        }
        if (g->nodes[j].op != SI_OP_ATTENTION) continue;
        si_attn_view view[4];
        operand first[4];
        bool any = false;
        for (int i = 0; i < 4; i++) {
            size_t at = (size_t)(4 * j + i) * N_SAMPLE;
            if (!combine(o + at, srcs + at, &view[i])) view[i] = (si_attn_view){0};
            first[i] = o[at];
            any |= view[i].taken;
        }
        if (any) taken += apply(g, j, view, first);
    }
    free(o);
    free(srcs);
    si_graph_compact(g);
    g->inferred_batch = -1;
    return taken;
}

static si_attn_view row_major_view(const si_shape *s) {
    si_attn_view v = {.shape = *s, .src = *s, .src_batch = 0};
    int64_t acc = 1;
    for (int d = s->ndim - 1; d >= 0; d--) v.st[d] = acc, acc *= s->dims[d];
    return v;
}

/* A taken view at a batch of nb images. */
static void at_batch(si_attn_view *a, int64_t nb) {
    if (a->src_batch >= 0) {
        a->shape.dims[0] *= nb;
        a->src.dims[a->src_batch] *= nb;
    }
    a->off += a->off_b * nb;
    for (int d = 0; d < a->shape.ndim; d++) a->st[d] += a->st_b[d] * nb;
    a->off_b = 0;
    memset(a->st_b, 0, sizeof a->st_b);
}

static si_status misfit(const si_graph *g, const si_gnode *n, int i) {
    return si_node_error(g, n, SI_ERR_UNSUPPORTED,
                         "operand %d no longer has the shape its strided view was made for", i);
}

si_status si_view_input(const si_graph *g, const si_gnode *n, int i, si_attn_view *op) {
    const si_attn_view *a = n->aview ? &n->aview[i] : NULL;
    const si_shape *s = &g->values[n->in[i]].shape;
    if (!a || !a->taken) {
        *op = row_major_view(s);
        return SI_OK;
    }
    int ax = a->src_batch;
    bool fits = s->ndim == a->src.ndim && (ax < 0 || s->dims[ax] % a->src.dims[ax] == 0);
    for (int d = 0; d < s->ndim && fits; d++) fits = d == ax || s->dims[d] == a->src.dims[d];
    if (!fits) return misfit(g, n, i);
    *op = *a;
    at_batch(op, ax >= 0 ? s->dims[ax] / a->src.dims[ax] : 0);
    return SI_OK;
}

si_status si_attention_view_shapes(const si_graph *g, const si_gnode *n, si_attn_view op[4]) {
    for (int i = 0; i < 3; i++) {
        si_status st = si_view_input(g, n, i, &op[i]);
        if (st != SI_OK) return st;
        if (op[i].shape.dims[0] != op[0].shape.dims[0]) return misfit(g, n, i);
    }
    op[3] = n->aview[3];
    if (op[3].taken) { /* its dim 0 per image divides Q's */
        int64_t per = op[3].src_batch >= 0 ? op[3].shape.dims[0] : 0;
        if (per && op[0].shape.dims[0] % per) return misfit(g, n, 3);
        at_batch(&op[3], per ? op[0].shape.dims[0] / per : 0);
    } else { /* Y row-major: (..., T, Dv) of Q's batch dims */
        si_shape y = op[0].shape;
        y.dims[y.ndim - 1] = op[2].shape.dims[op[2].shape.ndim - 1];
        op[3] = row_major_view(&y);
    }
    return SI_OK;
}

void si_attention_operands(const si_graph *g, const si_gnode *n, si_attn_view op[4]) {
    if (!n->aview || si_attention_view_shapes(g, n, op) != SI_OK)
        for (int i = 0; i < 4; i++)
            op[i] = row_major_view(&g->values[i < 3 ? n->in[i] : n->out].shape);
    /* a matrix of one row (SigLIP's probe query) may be viewed with any stride between its rows,
     * 0 too, which BLAS and the kernels take for a row pitch shorter than the row: give it the
     * row's own length */
    for (int i = 0; i < 4; i++) {
        int nd = op[i].shape.ndim;
        if (nd >= 2 && op[i].shape.dims[nd - 2] == 1 && op[i].st[nd - 1] == 1)
            op[i].st[nd - 2] = op[i].shape.dims[nd - 1];
    }
}

si_status si_node_rows(const si_graph *g, const si_gnode *n, si_row_geom *rg, int64_t *rows,
                       int64_t *d) {
    const si_shape *y = &g->values[n->out].shape;
    *d = y->dims[y->ndim - 1];
    *rows = si_shape_numel(y) / (*d ? *d : 1);
    *rg = (si_row_geom){0};
    if (!n->aview) return SI_OK;
    si_attn_view v;
    si_status st = si_view_input(g, n, 0, &v);
    if (st != SI_OK) return st;
    rg->nd = v.shape.ndim - 1;
    rg->off = v.off;
    for (int k = 0; k < rg->nd; k++) {
        rg->dims[k] = v.shape.dims[k];
        rg->st[k] = v.st[k];
    }
    return SI_OK;
}
