/* The engine alone on seeded random input (bench.h): the measurement behind `shardinfer bench`. */
#include "bench.h"

#include "backend.h"

#include <stdlib.h>
#include <string.h>

void si_engine_bench_fill(si_engine *e) {
    unsigned seed = 12345;
    for (int i = 0; i < e->g->n_inputs; i++) {
        int64_t n = si_shape_numel(&e->g->values[e->g->inputs[i]].shape);
        float *x = si_engine_input(e, i);
        for (int64_t k = 0; k < n; k++) { /* the sum of two uniforms: roughly normal */
            seed = seed * 1664525u + 1013904223u;
            float u = (float)(seed >> 8) / (float)(1 << 24);
            seed = seed * 1664525u + 1013904223u;
            float v = (float)(seed >> 8) / (float)(1 << 24);
            x[k] = 2.f * (u + v - 1.f);
        }
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

si_status si_engine_bench_time(si_engine *e, const si_engine_bench_cfg *c, double *ms,
                               double *first_done) {
    si_status st = SI_OK;
    if (c->profile) si_engine_profile(e);
    for (int i = 0; i < c->warmup + c->iters && st == SI_OK; i++) {
        double t = si_now();
        st = c->compute_only && i > 0 ? e->be->run_compute(e) : si_engine_run(e, c->batch);
        double dt = (si_now() - t) * 1e3;
        if (i == 0) *first_done = si_now();
        if (i >= c->warmup) ms[i - c->warmup] = dt;
        if (i + 1 == c->warmup && e->node_seconds) /* profile the timed runs only */
            memset(e->node_seconds, 0, sizeof(double) * (size_t)e->g->n_nodes);
    }
    if (st == SI_OK) qsort(ms, (size_t)c->iters, sizeof *ms, cmp_double);
    return st;
}
