/* One token taken early. ViT, DeiT, CLIP and DINOv2 heads read the class token alone (a Gather
 * of token k on axis 1 after the final LayerNorm), yet as exported the last block's projection,
 * LayerNorms and MLP run over every token. Those nodes are row-wise (LayerNorm over the last
 * axis, Linear layers with constant weights, elementwise ops on same-shape operands), so the
 * Gather can move up to where the rows come from: each value entering that region (the last
 * attention's output, the residual stream) is gathered first, the region computes one row an
 * image, and the old Gather takes row 0 of it. Exact: each row's arithmetic is unchanged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"
#include "import.h"

/* Node p keeps rows along axis ax (0 or 1) apart (rank-3 output with t rows there): an output
 * row depends on the same row of each computed input alone. */
static bool row_wise(const si_graph *g, const si_gnode *p, int ax, int64_t t) {
    const si_shape *y = &g->values[p->out].shape;
    if (p->n_out != 1 || y->ndim != 3 || y->dims[ax] != t) return false;
    for (int i = 0; i < p->n_in; i++) {
        const si_value *v = &g->values[p->in[i]];
        if (v->kind == SI_VAL_RUNTIME) {
            if (v->shape.ndim != 3 || v->shape.dims[0] != y->dims[0] ||
                v->shape.dims[1] != y->dims[1])
                return false;
        } else if (p->op == SI_OP_BINARY && v->shape.ndim > 1) {
            return false; /* a constant over the rows (a position table) ties them */
        }
    }
    switch (p->op) {
    case SI_OP_LAYERNORM: return p->axis == 2;
    case SI_OP_MATMUL: {
        const si_value *w = &g->values[p->in[1]];
        return w->kind == SI_VAL_CONST && w->shape.ndim == 2;
    }
    case SI_OP_BINARY:
    case SI_OP_ACTIVATION: return true;
    default: return false;
    }
}

/* How many of node n's inputs read value v. */
static int reads(const si_gnode *n, int v) {
    int k = 0;
    for (int i = 0; i < n->n_in; i++) k += n->in[i] == v;
    return k;
}

/* A one-element int64 constant. */
static int index_const(si_graph *g, const char *base, int ndim, int64_t k) {
    size_t len = strlen(base) + 16;
    char *name = si_xmalloc(len);
    snprintf(name, len, "%s/token%lld", base, (long long)k);
    int64_t *data = si_xmalloc(sizeof *data);
    *data = k;
    si_shape s = {.ndim = ndim, .dims = {1}};
    int id = si_graph_add_const(g, name, &s, (float *)data);
    g->values[id].dtype = SI_DT_INT64;
    free(name);
    return id;
}

/* Moves Gather node sj (already checked) up through its row-wise producers: its index after
 * the Gathers inserted before it, or -1 if it did not move. */
static int move_up(si_graph *g, int sj, int64_t k) {
    const int x = g->nodes[sj].in[0], ax = g->nodes[sj].axis;
    const int64_t t = g->values[x].shape.dims[ax];
    bool *in = si_xcalloc((size_t)g->n_nodes, sizeof *in);
    int first = sj, members = 0;
    /* grow the region while a value it reads (or x) has a row-wise producer outside it and
     * every reader of that value is inside */
    for (bool grew = true; grew;) {
        grew = false;
        for (int r = first; r <= sj; r++) {
            if (r != sj && !in[r]) continue;
            for (int i = 0; i < (r == sj ? 1 : g->nodes[r].n_in); i++) {
                int v = g->nodes[r].in[i], p = g->values[v].producer;
                if (p < 0 || in[p] || g->values[v].kind != SI_VAL_RUNTIME) continue;
                int inside = v == x ? 1 : 0;
                for (int j = first; j < sj; j++)
                    if (in[j]) inside += reads(&g->nodes[j], v);
                if (inside != g->values[v].uses || !row_wise(g, &g->nodes[p], ax, t)) continue;
                in[p] = grew = true;
                members++;
                if (p < first) first = p;
            }
        }
    }
    /* the values entering it: gathered before its first node (so computed before that) */
    int entries[32], n_entries = 0;
    bool ok = members > 0;
    for (int j = first; j < sj && ok; j++) {
        if (!in[j]) continue;
        for (int i = 0; i < g->nodes[j].n_in && ok; i++) {
            int v = g->nodes[j].in[i], p = g->values[v].producer;
            if (g->values[v].kind != SI_VAL_RUNTIME || (p >= 0 && in[p])) continue;
            bool seen = false;
            for (int e = 0; e < n_entries; e++) seen |= entries[e] == v;
            if (seen) continue;
            ok = p < first && n_entries < 32;
            if (ok) entries[n_entries++] = v;
        }
    }
    if (!ok) {
        free(in);
        return -1;
    }
    /* a Gather of token k per entry, inserted at `first` */
    int gathered[32];
    for (int e = 0; e < n_entries; e++) {
        const si_value *ev = &g->values[entries[e]];
        size_t len = strlen(ev->name) + 16;
        char *name = si_xmalloc(len);
        snprintf(name, len, "%s/token%lld", ev->name, (long long)k);
        si_shape s = ev->shape;
        s.dims[ax] = 1;
        int id = si_graph_add_const(g, name, &s, NULL);
        g->values[id].kind = SI_VAL_RUNTIME;
        gathered[e] = id;
        free(name);
    }
    in = si_xrealloc(in, sizeof *in * (size_t)(g->n_nodes + n_entries));
    memmove(&in[first + n_entries], &in[first], sizeof *in * (size_t)(g->n_nodes - first));
    memset(&in[first], 0, sizeof *in * (size_t)n_entries);
    si_graph_insert_nodes(g, first, n_entries);
    sj += n_entries;
    for (int e = 0; e < n_entries; e++) {
        si_gnode *n = &g->nodes[first + e];
        n->op = SI_OP_GATHER;
        n->name = si_xstrdup(g->values[gathered[e]].name);
        n->op_type = si_xstrdup("Gather(token, moved up)");
        n->out = n->outs[0] = gathered[e];
        n->n_out = 1;
        n->axis = ax;
        si_node_add_input(n, entries[e]);
        n->pslot[0] = n->n_in;
        si_node_add_input(n, index_const(g, g->values[entries[e]].name, 1, k));
        g->values[gathered[e]].producer = first + e;
    }
    /* the region reads the gathered rows; the old Gather takes row 0 of its one-row input */
    for (int j = first + n_entries; j < sj; j++) {
        if (!in[j]) continue;
        si_gnode *n = &g->nodes[j];
        for (int e = 0; e < n_entries; e++) {
            for (int i = 0; i < n->n_in; i++)
                if (n->in[i] == entries[e]) n->in[i] = gathered[e];
            if (n->residual == entries[e]) n->residual = gathered[e];
            if (n->premul == entries[e]) n->premul = gathered[e];
        }
    }
    si_gnode *s = &g->nodes[sj];
    s->in[s->pslot[0]] = index_const(g, s->name, g->values[s->in[s->pslot[0]]].shape.ndim, 0);
    free(in);
    return sj;
}

/* A sequence-first model (nn.MultiheadAttention's (T, N, D), OpenAI's CLIP) takes its class
 * token as Gather(Transpose(y, 1 0 2), k, axis 1) with a scalar k: that is Gather(y, k, axis 0),
 * which node s (the Gather) becomes, so the token moves up along axis 0. */
static bool gather_before_transpose(si_graph *g, si_gnode *s, const si_value *iv) {
    const si_value *x = &g->values[s->in[0]];
    si_gnode *t = x->producer >= 0 ? &g->nodes[x->producer] : NULL;
    if (!t || t->op != SI_OP_TRANSPOSE || x->uses != 1 || s->axis != 1 || iv->shape.ndim != 0 ||
        x->shape.ndim != 3 || t->perm[0] != 1 || t->perm[1] != 0 || t->perm[2] != 2)
        return false;
    s->in[0] = t->in[0];
    s->axis = 0;
    t->op = -1; /* read by s alone */
    return true;
}

int si_select_token_early(si_graph *g) {
    int moved = 0;
    for (int j = 0; j < g->n_nodes; j++) {
        si_gnode *s = &g->nodes[j];
        if (s->op != SI_OP_GATHER || s->pslot[0] < 0) continue;
        const si_value *iv = si_imp_param(g, s, 0);
        if (!iv || iv->kind != SI_VAL_CONST || si_value_numel(iv) != 1) continue;
        if (gather_before_transpose(g, s, iv)) {
            si_graph_compact(g); /* the Transpose goes: indices move, uses are recounted */
            j = -1;
            continue;
        }
        const si_value *x = &g->values[s->in[0]];
        int ax = s->axis;
        if (x->kind != SI_VAL_RUNTIME || x->dtype != SI_DT_FLOAT || x->shape.ndim != 3 ||
            (ax != 1 && ax != 0) || x->uses != 1 || x->producer < 0 || x->shape.dims[ax] < 2)
            continue;
        int64_t k = si_value_i64(iv, 0);
        if (k < 0) k += x->shape.dims[ax];
        if (k < 0 || k >= x->shape.dims[ax]) continue;
        int at = move_up(g, j, k);
        if (at < 0) continue;
        moved++;
        j = at; /* on after it: its input's shape is the one-row one only after the infer */
        si_graph_compact(g); /* recounts uses */
    }
    return moved;
}
