/* The inference engine: a graph, a backend that executes it, and buffers planned once for the
 * largest batch. A backend is a struct of function pointers filled once (ggml's pattern); the
 * CPU backend is the reference that every other backend is checked against. */
#ifndef SI_ENGINE_H
#define SI_ENGINE_H

#include "graph.h"

typedef struct si_engine si_engine;

typedef struct {
    const char *name;
    /* Shapes are inferred for max_batch when init runs: allocate everything here. */
    si_status (*init)(si_engine *e);
    /* Runs the graph on `batch` rows of the inputs (batch <= max_batch). */
    si_status (*run)(si_engine *e, int batch);
    void (*release)(si_engine *e);
} si_backend;

struct si_engine {
    si_graph *g;
    const si_backend *be;
    void *state; /* backend's own */
    int max_batch;
    float **host_in;         /* [n_inputs] host input buffers, sized for max_batch */
    const float **host_out;  /* [n_outputs] valid after run */
    size_t activation_bytes; /* planned activation memory for max_batch (arena + scratch) */
    size_t naive_bytes;      /* what one buffer per value would cost instead */
    double *node_seconds;    /* if set (n_nodes entries), backends add each node's time */
};

/* Creates an engine over g (ownership of g passes to the engine) on the named backend ("cpu").
 * On failure g is freed too. */
si_status si_engine_create(si_graph *g, const char *backend, int max_batch, si_engine **out);
void si_engine_free(si_engine *e); /* accepts NULL */

/* Host buffer for input i, (max_batch, ...) floats; borrowed. */
float *si_engine_input(si_engine *e, int i);
si_status si_engine_run(si_engine *e, int batch);
/* Output i of the last run and its shape; borrowed until the next run. Outputs computed from
 * shapes alone (a model ending in Shape, say) are int64: see si_engine_output_dtype. */
const float *si_engine_output(si_engine *e, int i, si_shape *shape);
int si_engine_output_dtype(const si_engine *e, int i); /* SI_DT_FLOAT or SI_DT_INT64 */

extern const si_backend si_cpu_backend;

#endif
