/* `shardinfer merge`: the results of parts of one set (a job array's tasks, each over a range of
 * the set's files) made into the result of one run over the whole set. */
#ifndef SI_MERGE_H
#define SI_MERGE_H

#include "base/common.h"

typedef struct {
    const char *output;
    char *const *parts; /* in the order their rows go to the output */
    int n_parts;
    bool overwrite;
    /* asked between blocks of rows: nonzero (the number of the signal the caller caught) stops
     * the merge, which removes its temporary file and returns SI_ERR_INTERRUPTED; NULL when
     * nothing stops it */
    int (*stop)(void);
} si_merge_config;

/* Writes cfg->output from the parts, through a temporary file of its own beside the output
 * (created exclusively, never through a symlink, removed by this call whatever happens) and an
 * atomic rename. Each part must be a finished result (si_resultview_open's checks), made with
 * the same model, preprocessing, postprocessing and batch size, over inputs no other part
 * holds; the output may not be one of the parts. Refusals are SI_ERR_ARG or SI_ERR_FORMAT naming
 * the part (both parts when two overlap). Warns once when a part other than the last holds a
 * number of images that is not a multiple of the batch size: the merged values may then differ
 * from one run's in the last bits. Borrows everything. */
si_status si_result_merge(const si_merge_config *cfg);

#endif
