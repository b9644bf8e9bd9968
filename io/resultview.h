/* Reading a result file back for display (`shardinfer show`): one line per image with its id,
 * status and top-K classes, with class names when a labels file is given. */
#ifndef SI_RESULTVIEW_H
#define SI_RESULTVIEW_H

#include <stdio.h>

#include "base/common.h"

/* Prints up to `limit` images (all if limit < 0) of the result at `path` to `out`. labels may
 * be NULL. Reads in blocks: memory does not grow with the number of images. */
si_status si_result_print(const char *path, const char *labels, long limit, FILE *out);

#endif
