/* Elementwise neighbours of a LayerNorm taken into it. A LayerNorm reads its row once and writes
 * it once; the Mul before it and the Add after it each cost a full pass of their own over the
 * same rows:
 *   - EVA-02's SwiGLU normalises the gate product: LayerNorm(silu(x Wg) * (x Wx)), 2048 wide;
 *   - Swin V2's post-norm blocks add the shortcut after the norm: x + LayerNorm(f(x)).
 * Mul(a, b) -> LayerNorm becomes LayerNorm(a, premul b), and LayerNorm -> Add(., r) becomes
 * LayerNorm(residual r): the kernels read a and b (or write y + r) in the row pass they make
 * anyway. Same-shape runtime operands only (no broadcast), the Mul and the LayerNorm's output
 * read by that one node alone. Run on inferred shapes, after the Linear layers took their Adds. */
#include <stdlib.h>

#include "graph_internal.h"
#include "import.h"

/* LayerNorm n, not yet fused, over runtime rows. */
static bool plain_layernorm(const si_graph *g, const si_gnode *n) {
    return n->op == SI_OP_LAYERNORM && n->residual < 0 && n->premul < 0 && !n->act.kind &&
           g->values[n->in[0]].kind == SI_VAL_RUNTIME;
}

/* Binary node b of kind op, no activation, two runtime operands of the shape s. */
static bool same_shape_binary(const si_graph *g, const si_gnode *b, si_binop op,
                              const si_shape *s) {
    if (b->op != SI_OP_BINARY || b->binop != op || b->act.kind || b->n_in != 2 || b->n_out != 1)
        return false;
    for (int i = 0; i < 2; i++) {
        const si_value *v = &g->values[b->in[i]];
        if (v->kind != SI_VAL_RUNTIME || !si_shape_same(&v->shape, s)) return false;
    }
    return true;
}

/* Mul(a, b) read by LayerNorm n alone: n normalises a * b. */
static bool take_mul(si_graph *g, si_gnode *n) {
    int x = n->in[0];
    si_gnode *m = si_graph_producer(g, x);
    if (!m || g->values[x].uses != 1 || !same_shape_binary(g, m, SI_BIN_MUL, &g->values[x].shape))
        return false;
    if (si_graph_is_output(g, x)) return false;
    n->in[0] = m->in[0];
    n->premul = m->in[1];
    si_node_add_input(n, m->in[1]);
    char *t = si_graph_join_types(m->op_type, n->op_type);
    free(n->op_type);
    n->op_type = t;
    m->op = -1;
    return true;
}

/* Add(y, r) the only reader of LayerNorm n's output y, r computed before n runs: n adds r. */
static bool take_add(si_graph *g, int j) {
    si_gnode *n = &g->nodes[j];
    int y = n->out;
    if (g->values[y].uses != 1) return false;
    if (si_graph_is_output(g, y)) return false;
    for (int k = j + 1; k < g->n_nodes; k++) {
        si_gnode *a = &g->nodes[k];
        if (a->op < 0 || (a->in[0] != y && (a->n_in < 2 || a->in[1] != y))) continue;
        if (!same_shape_binary(g, a, SI_BIN_ADD, &g->values[y].shape)) return false;
        int r = a->in[a->in[0] == y ? 1 : 0];
        if (r == y || g->values[r].producer >= j) return false; /* r must exist before n runs */
        n->residual = r;
        si_node_add_input(n, r);
        si_graph_absorb(g, n, a);
        return true;
    }
    return false;
}

int si_fuse_layernorm_neighbours(si_graph *g) {
    int fused = 0;
    for (int j = 0; j < g->n_nodes; j++) {
        if (g->nodes[j].op < 0 || !plain_layernorm(g, &g->nodes[j])) continue;
        fused += take_mul(g, &g->nodes[j]);
        fused += take_add(g, j);
    }
    if (fused) si_graph_compact(g);
    return fused;
}
