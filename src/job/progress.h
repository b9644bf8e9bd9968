/* Rank 0's progress report: on a terminal a live bar (images done, images/s, ETA, the stage that
 * is the bottleneck), rewritten in place a few times a second; otherwise (batch logs) one line
 * every few seconds. Rates count only this run's images, so a resumed run's ETA is honest. */
#ifndef SI_PROGRESS_H
#define SI_PROGRESS_H

#include <stdio.h>

#include "pipeline/pipeline.h"

typedef enum {
    SI_PROGRESS_AUTO,
    SI_PROGRESS_BAR,
    SI_PROGRESS_LINES,
    SI_PROGRESS_NONE
} si_progress_mode;

typedef struct si_progress si_progress;

/* total: images in the set; done0: of them already done when this run started (resume).
 * AUTO is BAR when out is a terminal, else LINES; interval: seconds between LINES. Borrows out. */
si_progress *si_progress_create(si_progress_mode mode, FILE *out, uint64_t total, uint64_t done0,
                                double interval);
/* done: images done in all (done0 included); busy: each stage's busy fraction (0..1), averaged
 * over the ranks. Prints when it is time to (or always when force). */
void si_progress_update(si_progress *p, uint64_t done, const double busy[SI_STAGES], bool force);
/* Ends the bar's line; frees p (NULL accepted). */
void si_progress_free(si_progress *p);

/* The report as text, without a newline: exposed for tests. bar: with the [####   ] bar. */
void si_progress_format(char *buf, size_t cap, uint64_t done, uint64_t total, double rate,
                        const double busy[SI_STAGES], bool bar);

#endif
