/* Reading a result file back: `shardinfer show` prints it, `shardinfer merge` reads its parts
 * through the same checks. A result may come from anyone (edited with h5py, truncated, made by
 * hand), so it is opened only when it is a regular file holding a finished result, and every
 * dataset is checked against what a result holds (hard links only, its data in the file itself,
 * rank, shape, type, row counts that agree) before any of its dimensions is used. */
#ifndef SI_RESULTVIEW_H
#define SI_RESULTVIEW_H

#include <hdf5.h>
#include <stdio.h>

#include "base/common.h"
#include "io/result.h"

/* A dataset of a result has its rows first, then at most the per-image dims a column has. */
#define SI_RESULTVIEW_MAX_RANK (SI_RESULT_MAX_DIMS + 1)

/* What the first dimension of a result's dataset counts. */
typedef enum {
    SI_RESULT_ROWS_IMAGES,     /* /ids, /index, /status and every postprocessor column */
    SI_RESULT_ROWS_OFFSETS,    /* images + 1: /detections/offsets */
    SI_RESULT_ROWS_FAILED,     /* /errors/index, /errors/message */
    SI_RESULT_ROWS_ESCAPED,    /* /ids_escaped */
    SI_RESULT_ROWS_DETECTIONS, /* /detections/boxes, /detections/scores, /detections/classes */
} si_result_rows;

/* One checked dataset: its shape is within SI_RESULTVIEW_MAX_RANK and its type one a result
 * uses (a variable-length string, an integer, or a float of 2, 4 or 8 bytes). */
typedef struct {
    char *name; /* relative to the root: "errors/index" */
    si_result_rows rows;
    int rank;
    hsize_t dims[SI_RESULTVIEW_MAX_RANK]; /* (rows, per-image dims...) */
    hid_t type;                           /* the file type */
    size_t row_bytes;                     /* one row in the file type; bounded */
} si_result_dataset;

/* Every dataset of a result, in the file's name order, and the counts they agree on. */
typedef struct {
    si_result_dataset *d;
    int n;
    uint64_t images, failed, escaped, detections;
} si_result_layout;

/* Opens the finished result at path read-only into *file (caller closes it with H5Fclose).
 * Refused (SI_ERR_FORMAT or SI_ERR_IO, naming path): not a regular file, not HDF5, the partial
 * file of an unfinished run or a result whose run has not finished (saying to finish it with
 * --resume), not a format 2 result. Borrows path. */
si_status si_resultview_open(const char *path, hid_t *file);

/* Checks every link and dataset of the open result `file` (named path in messages) and fills
 * *out (caller frees with si_resultview_layout_free, also after a failure). Refused, naming
 * the file and the dataset: an external, soft or user-defined link, a virtual dataset or one
 * stored outside the file, a rank, shape, type or chunk a result does not have, row counts that
 * do not agree with /status, a missing /ids, /index, /status or /errors dataset. */
si_status si_resultview_layout(hid_t file, const char *path, si_result_layout *out);
void si_resultview_layout_free(si_result_layout *l);
/* The dataset `name` of a checked layout, or NULL. Borrowed from l. */
const si_result_dataset *si_resultview_find(const si_result_layout *l, const char *name);

/* Root attributes of a file that may be hostile. Each is absent (SI_OK: *out NULL, *found
 * false) or one value of the expected class; an array, another class or an absurd size is
 * SI_ERR_FORMAT naming path and the attribute. The string is the caller's to free. */
si_status si_resultview_attr_str(hid_t obj, const char *path, const char *name, char **out);
si_status si_resultview_attr_int(hid_t obj, const char *path, const char *name, int64_t *out,
                                 bool *found);

/* Prints up to `limit` images (all if limit < 0) of the result at `path` to `out`. labels, a
 * regular file of at most SI_RESULTVIEW_MAX_LABELS lines, may be NULL. Reads in blocks: memory
 * does not grow with the number of images. Borrows everything. */
si_status si_result_print(const char *path, const char *labels, long limit, FILE *out);

#define SI_RESULTVIEW_MAX_LABELS (1 << 20)

#endif
