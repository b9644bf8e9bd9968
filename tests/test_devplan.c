/* The GPU's memory plan, held on the CPU: a Transpose between an image stored NHWC and its
 * row-major (N, H, W, C) twin (ConvNeXt's block), or to (N, H W, C) tokens after a Reshape that
 * merges H and W (a ViT's patch embedding), holds the same bytes as its input, so it gets no
 * storage of its own and no kernel; any other Transpose still copies.
 *   test_devplan MODEL.onnx TRANSPOSES_SAME [MODEL.onnx TRANSPOSES_SAME ...] */
#include <stdio.h>
#include <stdlib.h>

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

int main(int argc, char **argv) {
    if (argc < 3 || argc % 2 == 0) {
        fprintf(stderr, "usage: test_devplan MODEL.onnx TRANSPOSES_SAME ...\n");
        return 2;
    }
    for (int i = 1; i + 1 < argc; i += 2) check_model(argv[i], atoi(argv[i + 1]));
    return test_finish();
}
