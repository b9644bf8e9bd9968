/* A per-rank record of when each stage worked on each batch (--timeline FILE), for a picture of
 * the overlap without a profiler (bench/plot_perf.py draws it). Entries live in one array sized
 * at start; threads append with an atomic counter, and what does not fit is counted, not
 * grown into. */
#ifndef SI_TIMELINE_H
#define SI_TIMELINE_H

#include <stdint.h>
#include <stdio.h>

#include "base/common.h"

typedef enum {
    SI_TL_READ,
    SI_TL_DECODE,
    SI_TL_COMPUTE,  /* the model (CPU); upload, resize, model, download as the GPU ran them */
    SI_TL_INFLIGHT, /* GPU: from submit until the pipeline collected the batch */
    SI_TL_POST,
    SI_TL_WRITE,
    SI_TL_STAGES
} si_tl_stage;

typedef struct {
    double t0; /* si_now() of the pipeline's start */
    struct si_tl_entry {
        double t0, t1;
        int64_t batch;
        int stage;
    } * e;
    uint64_t cap, n, dropped; /* n and dropped: atomic */
} si_timeline;

/* An empty timeline of cap entries; free with si_timeline_free. */
void si_timeline_init(si_timeline *tl, uint64_t cap);
void si_timeline_free(si_timeline *tl); /* accepts NULL */
/* Records [t0, t1] (si_now() times) of `stage` on `batch`; any thread. tl may be NULL. */
void si_timeline_add(si_timeline *tl, int stage, int64_t batch, double t0, double t1);
/* Writes "rank,stage,batch,t0,t1" CSV rows (seconds since tl->t0), with a header when
 * header is true. */
si_status si_timeline_write(const si_timeline *tl, int rank, FILE *f, bool header);

#endif
