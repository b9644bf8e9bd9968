/* What a backend implements and what it sees of the engine: the table of its entry points and
 * the engine's state. For src/engine, the backends (src/cpu, cuda/) and tests that bring a
 * backend of their own; everything else uses engine.h. */
#ifndef SI_ENGINE_BACKEND_H
#define SI_ENGINE_BACKEND_H

#include "engine.h"

struct si_backend {
    const char *name;
    /* Shapes are inferred for max_batch when init runs: allocate everything here. */
    si_status (*init)(si_engine *e);
    /* Runs the graph on `batch` rows of the inputs (batch <= max_batch). */
    si_status (*run)(si_engine *e, int batch);
    void (*release)(si_engine *e);
    /* --- the slot ring, one interface for every backend: a batch goes in through a slot's
     * pixels (or packed buffer), submit, then collect. A GPU has opts.slots slots in flight at
     * once; the CPU is one synchronous slot (submit runs the batch before it returns). The
     * pixel path needs opts.pixels (input 0 is (N, 3, H, W) float, fed normalised from uint8
     * pixels with opts.mean and opts.std). --- */
    /* the slot's (max_batch, H, W, 3) uint8 input to decode into (page-locked on a GPU); NULL
     * without opts.pixels */
    uint8_t *(*pixels)(si_engine *e, int slot);
    /* with opts.pack_per_image: the slot's packed buffer (si_slot_pack). false where the
     * backend has no resize of its own (the CPU: NULL) */
    bool (*pack)(si_engine *e, int slot, si_slot_pack *p);
    /* starts the slot's batch: preprocessing (normalisation; with `packed`, the resize of
     * items[0, rows) from the packed buffer's device side, whose first `upload` bytes are copied
     * from the host side first; else the rows are crops in pixels), the model, the outputs' way
     * back. Asynchronous on a GPU (upload and download included), synchronous on the CPU */
    si_status (*submit)(si_engine *e, int slot, int rows, bool packed, size_t upload);
    /* waits for the slot; outs[o] = its host outputs (max_batch rows), valid until resubmitted */
    si_status (*collect)(si_engine *e, int slot, const float **outs);
    /* after collect: when the backend began and finished running the slot's batch (si_now()
     * clock; on a GPU the device's own times, upload to download) */
    si_status (*times)(si_engine *e, int slot, double *t0, double *t1);
    /* replays the model alone on inputs already on the device (compute-only benchmarks) */
    si_status (*run_compute)(si_engine *e);
    /* Load-time check, before init and before anything is allocated: whether this backend runs
     * node n of g (shapes inferred) with these options. false: a short reason in why[cap].
     * NULL: every op the graph can hold. */
    bool (*supports_op)(const si_graph *g, const si_gnode *n, const si_engine_opts *opts, char *why,
                        size_t cap);
};

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
    si_engine_opts opts;
    int n_slots;          /* slots of the ring, set by init (1 on the CPU) */
    bool synchronous;     /* submit returns with the batch finished (the CPU): nothing stays in
                             flight, collect never waits */
    si_engine_memory mem; /* filled by GPU backends */
};

extern const si_backend si_cpu_backend;
#ifdef SI_HAVE_CUDA
extern const si_backend si_cuda_backend;
#endif

#endif
