/* The GPU's memory plan, held on the CPU: a Transpose between an image stored NHWC and its
 * row-major (N, H, W, C) twin (ConvNeXt's block), or to (N, H W, C) tokens after a Reshape that
 * merges H and W (a ViT's patch embedding), holds the same bytes as its input, so it gets no
 * storage of its own and no kernel; any other Transpose still copies. With ln:MODEL.onnx, the
 * LayerNorms folded into the Linear layers after them (the CUDA backend's plan on sm_90 in
 * FP16/BF16): their outputs hold their inputs' bytes, their row statistics lie past the scratch
 * the nodes use, each reader has its column sums among the weights; none without g->fold_ln.
 *   test_devplan [ln:]MODEL.onnx WANT [[ln:]MODEL.onnx WANT ...] */
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/devplan.h"
#include "test_util.h"

static void check_model(const char *path, int want) {
    si_graph *g;
    si_status st = si_graph_load(path, NULL, &g);
    CHECK_MSG(st == SI_OK, "%s does not load", path);
    if (st != SI_OK) return;
    si_devplan p;
    st = si_devplan_build(g, 2, 2, 1, 0, false, 0, 0, &p);
    CHECK_MSG(st == SI_OK, "%s: no plan", path);
    if (st == SI_OK) {
        int same = 0;
        for (int j = 0; j < g->n_nodes; j++) {
            const si_gnode *n = &g->nodes[j];
            if (n->op != SI_OP_TRANSPOSE) continue;
            bool shared = p.acts.root[n->out] == p.acts.root[n->in[0]];
            CHECK_MSG(shared == (p.same_bytes[j] != 0), "%s: node %s's storage", path, n->name);
            same += p.same_bytes[j] != 0;
        }
        CHECK_MSG(same == want, "%s: %d Transposes hold their input's bytes, want %d", path, same,
                  want);
        si_devplan_free(&p);
    }
    si_graph_free(g);
}

static void check_ln_fold(const char *path, int want) {
    si_graph *g;
    si_status st = si_graph_load(path, NULL, &g);
    CHECK_MSG(st == SI_OK, "%s does not load", path);
    if (st != SI_OK) return;
    for (int on = 0; on < 2; on++) {
        g->fold_ln = on;
        si_devplan p, q;
        st = si_devplan_build(g, 2, 2, 1, 0, false, 0, 0, &p);
        CHECK_MSG(st == SI_OK, "%s: no plan", path);
        if (st != SI_OK) break;
        int folded = 0, readers = 0;
        for (int j = 0; j < g->n_nodes; j++) {
            const si_gnode *n = &g->nodes[j];
            if (p.ln_src[j] >= 0) {
                readers++;
                CHECK_MSG(p.aux_off[j] != SIZE_MAX && p.aux_off[j] < p.weights,
                          "%s: %s has no column sums", path, n->name);
                CHECK_MSG(g->nodes[p.ln_src[j]].out == n->in[0], "%s: %s reads another node", path,
                          n->name);
            }
            if (p.ln_off[j] == SIZE_MAX) continue;
            folded++;
            const si_shape *xs = &g->values[n->in[0]].shape;
            size_t rows = (size_t)(si_shape_numel(xs) / xs->dims[xs->ndim - 1]);
            CHECK_MSG(p.same_bytes[j] && p.acts.root[n->out] == p.acts.root[n->in[0]],
                      "%s: folded %s has storage of its own", path, n->name);
            CHECK_MSG(p.ln_off[j] + 2 * rows * sizeof(float) <= p.scratch,
                      "%s: %s's statistics outside the scratch", path, n->name);
        }
        CHECK_MSG(folded == (on ? want : 0), "%s: %d LayerNorms folded (fold_ln %d), want %d", path,
                  folded, on, on ? want : 0);
        CHECK_MSG(!on || !want || readers >= want, "%s: %d readers", path, readers);
        if (on) { /* the statistics come after the scratch the plan without them has */
            g->fold_ln = false;
            if (si_devplan_build(g, 2, 2, 1, 0, false, 0, 0, &q) == SI_OK) {
                for (int j = 0; j < g->n_nodes; j++)
                    if (p.ln_off[j] != SIZE_MAX)
                        CHECK_MSG(p.ln_off[j] >= q.scratch, "%s: statistics inside the scratch",
                                  path);
                si_devplan_free(&q);
            }
        }
        si_devplan_free(&p);
    }
    si_graph_free(g);
}

int main(int argc, char **argv) {
    if (argc < 3 || argc % 2 == 0) {
        fprintf(stderr, "usage: test_devplan [ln:]MODEL.onnx WANT ...\n");
        return 2;
    }
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strncmp(argv[i], "ln:", 3))
            check_ln_fold(argv[i] + 3, atoi(argv[i + 1]));
        else
            check_model(argv[i], atoi(argv[i + 1]));
    }
    return test_finish();
}
