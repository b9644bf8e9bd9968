/* `shardinfer merge`: the results of parts of one set (a job array's tasks, each over a range of
 * the set's files) made into the result of one run over the whole set. */
#ifndef SI_MERGE_H
#define SI_MERGE_H

#include "base/common.h"

/* Writes OUTPUT (via OUTPUT.tmp and a rename) from the parts, in the order given. The parts must
 * have been made with the same model, preprocessing, postprocessing and batch size (SI_ERR_ARG
 * naming the part otherwise). Borrows everything. */
si_status si_result_merge(const char *output, char *const *parts, int n_parts, bool overwrite);

#endif
