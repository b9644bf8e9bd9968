/* The engine alone on seeded random input: the timing `shardinfer bench` prints, callable by a
 * test or another tool without a command line. */
#ifndef SI_ENGINE_BENCH_H
#define SI_ENGINE_BENCH_H

#include "engine.h"

typedef struct {
    int batch;         /* images per run; at most the batch the engine was created for */
    int iters;         /* timed runs (>= 1) */
    int warmup;        /* untimed runs before them */
    bool compute_only; /* runs after the first are the backend's run_compute alone (no copies) */
    bool profile;      /* si_engine_node_seconds(e) gets each node's time over the timed runs */
} si_engine_bench_cfg;

/* Fills every input of e with seeded, roughly normal noise (like a normalised image); the same
 * numbers on every call. */
void si_engine_bench_fill(si_engine *e);

/* Runs e warmup + iters times; ms (iters entries, the caller's) gets the timed runs in
 * milliseconds, sorted ascending, and *first_done the si_now() at which the first run returned.
 * With c->profile, allocates si_engine_node_seconds(e) (freed with e) and leaves there the per-node
 * times of the timed runs. Stops at the first failing run and returns its status. */
si_status si_engine_bench_time(si_engine *e, const si_engine_bench_cfg *c, double *ms,
                               double *first_done);

#endif
