/* The --timeline record (timeline.h). */
#include "timeline.h"

#include <stdlib.h>

static const char *const stage_names[SI_TL_STAGES] = {"read",      "decode", "compute",
                                                      "in_flight", "post",   "write"};

void si_timeline_init(si_timeline *tl, uint64_t cap) {
    tl->t0 = si_now();
    tl->e = si_xcalloc(cap ? cap : 1, sizeof *tl->e);
    tl->cap = cap;
    tl->n = tl->dropped = 0;
}

void si_timeline_free(si_timeline *tl) {
    if (!tl) return;
    free(tl->e);
    tl->e = NULL;
    tl->cap = tl->n = 0;
}

void si_timeline_add(si_timeline *tl, int stage, int64_t batch, double t0, double t1) {
    if (!tl || !tl->e) return;
    uint64_t i = __atomic_fetch_add(&tl->n, 1, __ATOMIC_RELAXED);
    if (i >= tl->cap) {
        __atomic_fetch_add(&tl->dropped, 1, __ATOMIC_RELAXED);
        return;
    }
    tl->e[i] = (struct si_tl_entry){t0 - tl->t0, t1 - tl->t0, batch, stage};
}

si_status si_timeline_write(const si_timeline *tl, int rank, FILE *f, bool header) {
    if (header) fprintf(f, "rank,stage,batch,t0,t1\n");
    uint64_t n = tl->n < tl->cap ? tl->n : tl->cap;
    for (uint64_t i = 0; i < n; i++)
        fprintf(f, "%d,%s,%lld,%.6f,%.6f\n", rank, stage_names[tl->e[i].stage],
                (long long)tl->e[i].batch, tl->e[i].t0, tl->e[i].t1);
    if (ferror(f)) return si_error(SI_ERR_IO, "--timeline: write error");
    if (tl->dropped)
        si_log_warn("--timeline: %llu entries did not fit and were left out",
                    (unsigned long long)tl->dropped);
    return SI_OK;
}
