/* Concat reading its inputs through the Slices that made them. Exporters write torch.roll (Swin's
 * shifted windows) as two Slices and a Concat per axis; run as written, each Slice copies its
 * part and the Concat copies it again. Here the Concat reads each part from the Slice's input at
 * the Slice's starts and steps, so only the Concat moves bytes. The view is kept in logical
 * terms (starts, steps) and each backend maps it through its own storage of the input. */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

/* Input i of Concat n as a Slice of a computed value that keeps the batch axis whole and steps
 * forward: *v (on = false otherwise). */
static void plan_input(const si_graph *g, const si_gnode *n, int i, si_slice_view *v) {
    memset(v, 0, sizeof *v);
    int x = n->in[i], pj = g->values[x].producer;
    if (pj < 0 || g->values[x].uses != 1) return;
    const si_gnode *sl = &g->nodes[pj];
    if (sl->op != SI_OP_SLICE || g->values[sl->in[0]].kind != SI_VAL_RUNTIME) return;
    const si_shape *src = &g->values[sl->in[0]].shape, *part = &g->values[x].shape;
    if (src->ndim != part->ndim || src->ndim < 1 || sl->starts[0] != 0 || sl->steps[0] != 1 ||
        part->dims[0] != src->dims[0])
        return;
    for (int d = 0; d < src->ndim; d++)
        if (sl->steps[d] <= 0) return;
    v->on = true;
    v->src = *src;
    v->shape = *part;
    memcpy(v->starts, sl->starts, sizeof v->starts);
    memcpy(v->steps, sl->steps, sizeof v->steps);
}

/* The same Slice at batch 2 and 1, but for the batch's extent. */
static bool same_view(const si_slice_view *a, const si_slice_view *b) {
    int nd = a->src.ndim;
    return a->on && b->on && nd == b->src.ndim &&
           !memcmp(a->src.dims + 1, b->src.dims + 1, sizeof(int64_t) * (size_t)(nd - 1)) &&
           !memcmp(a->shape.dims + 1, b->shape.dims + 1, sizeof(int64_t) * (size_t)(nd - 1)) &&
           !memcmp(a->starts, b->starts, sizeof a->starts) &&
           !memcmp(a->steps, b->steps, sizeof a->steps);
}

static int concat_inputs(const si_graph *g) {
    int k = 0;
    for (int j = 0; j < g->n_nodes; j++)
        if (g->nodes[j].op == SI_OP_CONCAT) k += g->nodes[j].n_in;
    return k;
}

/* Rewires the Concat at j: each input taken reads the Slice's input. */
static int apply(si_graph *g, int j, const si_slice_view *v) {
    si_gnode *n = &g->nodes[j];
    int taken = 0;
    for (int i = 0; i < n->n_in; i++) taken += v[i].on;
    if (!taken) return 0;
    n->sview = si_xcalloc((size_t)n->n_in, sizeof *n->sview);
    for (int i = 0; i < n->n_in; i++) {
        if (!v[i].on) continue;
        n->sview[i] = v[i];
        n->in[i] = g->nodes[g->values[n->in[i]].producer].in[0];
    }
    return taken;
}

int si_fuse_concat_slices(si_graph *g) {
    int total = concat_inputs(g), taken = 0, k = 0;
    if (!total) return 0;
    si_slice_view *at2 = si_xcalloc((size_t)total, sizeof *at2),
                  *at1 = si_xcalloc((size_t)total, sizeof *at1);
    if (si_graph_infer(g, 2) == SI_OK) {
        for (int j = 0; j < g->n_nodes; j++)
            for (int i = 0; g->nodes[j].op == SI_OP_CONCAT && i < g->nodes[j].n_in; i++)
                plan_input(g, &g->nodes[j], i, &at2[k++]);
        k = 0;
        if (si_graph_infer(g, 1) == SI_OK)
            for (int j = 0; j < g->n_nodes; j++) {
                si_gnode *n = &g->nodes[j];
                if (n->op != SI_OP_CONCAT) continue;
                for (int i = 0; i < n->n_in; i++, k++) {
                    plan_input(g, n, i, &at1[k]);
                    at1[k].on = same_view(&at2[k], &at1[k]);
                }
                taken += apply(g, j, &at1[k - n->n_in]);
            }
    }
    free(at2);
    free(at1);
    g->inferred_batch = -1;
    return taken;
}

si_status si_concat_input_shape(const si_graph *g, const si_gnode *n, int i, si_shape *s) {
    const si_shape *x = &g->values[n->in[i]].shape;
    if (!n->sview || !n->sview[i].on) {
        *s = *x;
        return SI_OK;
    }
    const si_slice_view *v = &n->sview[i];
    if (x->ndim != v->src.ndim ||
        memcmp(x->dims + 1, v->src.dims + 1, sizeof(int64_t) * (size_t)(x->ndim - 1)))
        return si_node_error(g, n, SI_ERR_UNSUPPORTED,
                             "input %d no longer has the shape its Slice was read from", i);
    *s = v->shape;
    s->dims[0] = x->dims[0];
    return SI_OK;
}
