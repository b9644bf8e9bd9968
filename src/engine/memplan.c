/* Greedy offset assignment by liveness (largest first, lowest non-conflicting offset). */
#include "memplan.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int value;
    int first, last; /* node indices: defined at first, last read at last */
    size_t bytes, offset;
} interval;

static int by_size_desc(const void *a, const void *b) {
    const interval *x = a, *y = b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    return x->value - y->value;
}

static int by_offset(const void *a, const void *b) {
    const interval *x = *(interval *const *)a, *y = *(interval *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

void si_memplan_build(const si_graph *g, size_t align, si_memplan *p) {
    si_memplan_build_ex(g, align, sizeof(float), NULL, p);
}

void si_memplan_build_ex(const si_graph *g, size_t align, size_t elem, const uint8_t *same_bytes,
                         si_memplan *p) {
    int nv = g->n_values;
    p->root = si_xmalloc(sizeof(int) * (size_t)nv);
    p->offset = si_xmalloc(sizeof(size_t) * (size_t)nv);
    p->arena_bytes = p->naive_bytes = 0;
    int *first = si_xmalloc(sizeof(int) * (size_t)nv), *last = si_xmalloc(sizeof(int) * (size_t)nv);
    for (int i = 0; i < nv; i++) {
        p->root[i] = i;
        p->offset[i] = SIZE_MAX;
        first[i] = g->values[i].is_input ? -1 : INT32_MAX;
        last[i] = -2;
    }
    for (int j = 0; j < g->n_nodes; j++) {
        const si_gnode *n = &g->nodes[j];
        if (n->op == SI_OP_HOST) continue;
        bool shares = same_bytes
                          ? same_bytes[j]
                          : n->op == SI_OP_VIEW && g->values[n->in[0]].kind == SI_VAL_RUNTIME;
        if (shares) p->root[n->out] = p->root[n->in[0]];
        for (int o = 0; o < n->n_out; o++)
            if (first[n->outs[o]] > j) first[n->outs[o]] = j;
        for (int i = 0; i < n->n_in; i++) last[p->root[n->in[i]]] = j;
        for (int o = 0; o < n->n_out; o++) /* an unread output still needs its bytes */
            if (last[p->root[n->outs[o]]] < j) last[p->root[n->outs[o]]] = j;
    }
    for (int i = 0; i < g->n_outputs; i++) last[p->root[g->outputs[i]]] = g->n_nodes;
    interval *iv = si_xmalloc(sizeof *iv * (size_t)(nv ? nv : 1));
    int k = 0;
    for (int i = 0; i < nv; i++) {
        const si_value *v = &g->values[i];
        if (v->kind != SI_VAL_RUNTIME || p->root[i] != i || first[i] == INT32_MAX) continue;
        size_t bytes = (size_t)si_shape_numel(&v->shape) * elem;
        bytes = (bytes + align - 1) / align * align;
        p->naive_bytes += bytes;
        iv[k++] = (interval){i, first[i], last[i] < first[i] ? first[i] : last[i], bytes, 0};
    }
    qsort(iv, (size_t)k, sizeof *iv, by_size_desc);
    interval **placed = si_xmalloc(sizeof *placed * (size_t)(k ? k : 1));
    int np = 0;
    for (int a = 0; a < k; a++) {
        /* the placed intervals that are alive at the same time, in address order */
        int nc = 0;
        interval **conf = si_xmalloc(sizeof *conf * (size_t)(np ? np : 1));
        for (int b = 0; b < np; b++)
            if (placed[b]->first <= iv[a].last && iv[a].first <= placed[b]->last)
                conf[nc++] = placed[b];
        qsort(conf, (size_t)nc, sizeof *conf, by_offset);
        size_t off = 0;
        for (int c = 0; c < nc; c++) {
            if (off + iv[a].bytes <= conf[c]->offset) break;
            size_t end = conf[c]->offset + conf[c]->bytes;
            if (end > off) off = end;
        }
        free(conf);
        iv[a].offset = off;
        placed[np++] = &iv[a];
        if (off + iv[a].bytes > p->arena_bytes) p->arena_bytes = off + iv[a].bytes;
    }
    for (int a = 0; a < k; a++) p->offset[iv[a].value] = iv[a].offset;
    for (int i = 0; i < nv; i++)
        if (p->root[i] != i) p->offset[i] = p->offset[p->root[i]];
    free(placed);
    free(iv);
    free(first);
    free(last);
}

void si_memplan_free(si_memplan *p) {
    if (!p) return;
    free(p->root);
    free(p->offset);
    p->root = NULL;
    p->offset = NULL;
}
