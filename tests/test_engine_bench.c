/* The engine benchmark's library side (src/engine/bench.c), called without a command line: the
 * seeded input is the same on every fill and never zeros; the timing fills every one of the
 * `iters` entries (poisoned first), sorted; the first run's end is reported; --profile's per-node
 * times cover the timed runs. Usage: test_engine_bench MODEL.onnx */
#include <string.h>

#include "base/common.h"
#include "engine/bench.h"
#include "tests/test_util.h"

#define B     2
#define ITERS 3

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_engine_bench MODEL.onnx\n");
        return 2;
    }
    si_graph *g;
    si_engine *e = NULL;
    if (si_graph_load(argv[1], NULL, &g) != SI_OK || si_engine_create(g, "cpu", B, &e) != SI_OK) {
        fprintf(stderr, "%s\n", si_error_msg());
        return 1;
    }
    const si_graph *G = si_engine_graph(e);
    size_t n = (size_t)si_shape_numel(&G->values[G->inputs[0]].shape);
    float *x = si_engine_input(e, 0), *first = malloc(n * sizeof *first);
    memset(x, 0xff, n * sizeof *x); /* NaN: a fill must overwrite every value */
    si_engine_bench_fill(e);
    memcpy(first, x, n * sizeof *x);
    bool in_range = true, nonzero = false;
    for (size_t i = 0; i < n; i++) {
        in_range = in_range && x[i] > -2.f && x[i] < 2.f;
        nonzero = nonzero || x[i] != 0.f;
    }
    CHECK_MSG(in_range && nonzero, "the seeded input is not noise in (-2, 2)");
    memset(x, 0, n * sizeof *x);
    si_engine_bench_fill(e);
    CHECK_MSG(!memcmp(first, x, n * sizeof *x), "a second fill gives other numbers");

    double ms[ITERS] = {-1, -1, -1}, first_done = 0, t0 = si_now();
    si_engine_bench_cfg c = {.batch = B, .iters = ITERS, .warmup = 1, .profile = true};
    CHECK(si_engine_bench_time(e, &c, ms, &first_done) == SI_OK);
    for (int i = 0; i < ITERS; i++) CHECK_MSG(ms[i] > 0, "run %d: %g ms", i, ms[i]);
    for (int i = 1; i < ITERS; i++) CHECK_MSG(ms[i - 1] <= ms[i], "times not sorted at %d", i);
    CHECK(first_done > t0 && first_done <= si_now());
    CHECK(si_engine_node_seconds(e) != NULL);
    double total = 0;
    const double *ns = si_engine_node_seconds(e);
    for (int j = 0; ns && j < si_engine_graph(e)->n_nodes; j++) total += ns[j];
    CHECK_MSG(total > 0, "profile: %g s over the timed runs", total);
    free(first);
    si_engine_free(e);
    return test_finish();
}
