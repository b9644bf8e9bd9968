/* The load-time check (si_engine_check): a picky test backend that refuses every Softmax and Pad of
 * a small model must get one message grouping the refused nodes by op type and reason, with the
 * count and the first node's name; the CPU backend, the reference, refuses nothing. */
#include <stdio.h>
#include <string.h>

#include "engine/backend.h"
#include "test_util.h"

/* Refuses Softmax with a reason naming its axis (so one type gives two groups) and every Pad. */
static bool picky_supports_op(const si_graph *g, const si_gnode *n, const si_engine_opts *opts,
                              char *why, size_t cap) {
    (void)g;
    (void)opts;
    if (n->op == SI_OP_SOFTMAX) {
        snprintf(why, cap, "axis %d not supported", n->axis);
        return false;
    }
    if (n->op == SI_OP_PAD) {
        snprintf(why, cap, "no pads here");
        return false;
    }
    return true;
}

static const si_backend picky = {.name = "picky", .supports_op = picky_supports_op};
static const si_backend accepting = {.name = "accepting"}; /* no supports_op: runs every node */

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_engine_check MODEL.onnx (tests/make_check_model.py)\n");
        return 2;
    }
    si_graph *g;
    if (si_graph_load(argv[1], NULL, &g) != SI_OK) {
        fprintf(stderr, "%s\n", si_error_msg());
        return 1;
    }
    CHECK(g->inferred_batch < 0); /* the check infers shapes itself when none are */
    si_status st = si_engine_check_backend(g, &picky, NULL);
    CHECK(st == SI_ERR_UNSUPPORTED);
    char want[1024];
    snprintf(want, sizeof want,
             "the picky backend cannot run 2 operator types of %s:\n"
             "  Pad ×2 (first: pad_a): no pads here\n"
             "  Softmax ×2 (first: sm_a): axis 1 not supported\n"
             "  Softmax ×1 (first: sm_c): axis 3 not supported",
             argv[1]);
    CHECK_MSG(!strcmp(si_error_msg(), want), "got\n%s\nwant\n%s", si_error_msg(), want);
    CHECK(g->inferred_batch == 1);

    CHECK(si_engine_check_backend(g, &accepting, NULL) == SI_OK);
    CHECK(si_engine_check(g, "cpu", NULL) == SI_OK);
    CHECK(si_engine_check(g, "nosuch", NULL) == SI_ERR_ARG);
    CHECK(strstr(si_error_msg(), "unknown backend 'nosuch'") != NULL);

    /* the CPU answers from its run table: an op it has no run for is refused with a reason */
    si_gnode host = g->nodes[0];
    char why[128] = "";
    host.op = SI_OP_HOST;
    CHECK(!si_cpu_backend.supports_op(g, &host, NULL, why, sizeof why) && why[0]);
    for (int j = 0; j < g->n_nodes; j++)
        CHECK(si_cpu_backend.supports_op(g, &g->nodes[j], NULL, why, sizeof why));

    /* engine creation asks the same question and loads the model on the CPU */
    si_engine *e;
    CHECK(si_engine_create(g, "cpu", 4, &e) == SI_OK);
    si_engine_free(e);
    return test_finish();
}
