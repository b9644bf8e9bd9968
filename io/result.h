/* The result file, written by rank 0 while the run goes on, and the record that lets an
 * interrupted run resume. During a run two files exist beside PATH:
 *   PATH.partial  HDF5 with every fixed-size column (/status and the postprocessor's) allocated
 *                 at creation as contiguous datasets; a finished chunk's rows are written in
 *                 place. After creation no HDF5 metadata changes, so a process killed at any
 *                 moment leaves a file HDF5 can open.
 *   PATH.journal  append-only: a header, then one CRC-checked record per finished chunk (its
 *                 statuses, failure messages and detections: the chunk's tail, io/tail.h).
 *                 A chunk is complete exactly when its record is in the journal. Records are
 *                 appended only after the partial file has been flushed, so the journal never
 *                 names rows that are not on disk; a torn last record is dropped on resume.
 * Flushing (HDF5 flush + fsync, then the pending records + fsync) happens every
 * flush_interval seconds and at the end. When every chunk is there, finish adds /ids, /index,
 * /errors and /detections and the attributes, and renames PATH.partial to PATH. Final layout:
 * docs/output-format.md.
 * The final step changes HDF5 metadata in place, so it first saves PATH.undo: every byte of the
 * partial file outside the rows (io/undo.h). Cut short at any instant (a kill, a full disk, a
 * failed rename), it leaves either PATH whole or the partial file, the complete journal and
 * the undo record, from which --resume restores the partial file and makes the step again. */
#ifndef SI_RESULT_H
#define SI_RESULT_H

#include "io/source.h"

#define SI_RESULT_MAX_COLS 16
#define SI_RESULT_MAX_DIMS 8

/* F16: IEEE half, held in a row as its 16 bits (src/base/half.h) and stored as they are. */
typedef enum { SI_RESULT_I32, SI_RESULT_F32, SI_RESULT_F64, SI_RESULT_F16 } si_result_type;

/* One fixed-size column: the dataset NAME of [N, dims...] values of `type`, whose values for one
 * image sit at `offset` in that image's row (`bytes` = numel * the type's size). */
typedef struct {
    char name[160]; /* the dataset's path in the result, relative to the root: "topk_class" */
    si_result_type type;
    int ndim; /* per-image dims; 0 = one value per image */
    int64_t dims[SI_RESULT_MAX_DIMS];
    size_t offset, bytes;
} si_result_col;

/* What a result holds besides /status, /ids, /index and /errors: told by the postprocessor
 * (si_post_schema, src/post/post.h), so the writer needs no knowledge of postprocessing. */
typedef struct {
    char post[32]; /* the postprocessor's name: the root attribute "post" */
    bool detect;   /* the chunks' tails carry detections: /detections is written */
    int n_cols;
    si_result_col cols[SI_RESULT_MAX_COLS];
    size_t row_bytes; /* one image's row: every column at its offset */
} si_result_schema;

typedef struct {
    const char *model_path;
    const char *model_sha256;
    const char *input_path;
    const char *command_line;
    const char *preprocess;  /* "resize=256 crop=224x224 mean=... std=..." */
    const char *post_params; /* "classify topk=5" */
    /* everything a resumed run must share with the interrupted one (model hash, input, image
     * count, preprocessing, postprocessor, batch size): compared as a string on --resume */
    const char *resume_key;
    /* who the input's files are (si_source_identity): a resume whose input's identity differs
     * checks every image done against what the run read (the journal's hashes) first */
    uint64_t input_identity;
    int ranks;
    int batch_size;
    double elapsed_seconds;
    double flush_interval; /* seconds between flushes */
} si_result_meta;

typedef struct si_result si_result;

/* Creates PATH.partial and PATH.journal for n images in chunks of `chunk` images; an existing
 * partial run at PATH is replaced. Borrows everything. */
si_status si_result_create(const char *path, const si_result_schema *schema, uint64_t n,
                           uint32_t chunk, const si_result_meta *meta, si_result **out);

/* Whether a run at PATH got as far as its journal's header: before that (killed while creating
 * PATH.partial) nothing can have been journaled, and a resume starts afresh. */
bool si_result_started(const char *path);
/* The batch size the run that wrote PATH (partial: PATH.partial) used, from its resume key; 0 when
 * there is no such file or it says none (a run that resumes it without --batch takes this one:
 * the batch is part of the resume key). Never follows a symlink for the partial. */
int si_result_batch_of(const char *path, bool partial);
/* Opens the partial run at PATH to continue it: the resume key, image count and column layout
 * must match (SI_ERR_ARG naming what differs otherwise). When input's files are not the ones
 * the run read (meta->input_identity differs from the partial file's), every image the journal
 * holds is read from input again and must hash as it did then: SI_ERR_ARG naming the first that
 * does not (input may be NULL, for callers that have no source: the check is then skipped).
 * *chunk gets the run's chunk size and *done (allocated here, caller frees) a bitmap of the
 * chunks complete (bit c of byte c/8). Truncates a torn last journal record. */
si_status si_result_resume(const char *path, const si_result_schema *schema, uint64_t n,
                           const si_result_meta *meta, si_source *input, uint32_t *chunk,
                           uint8_t **done, si_result **out);

/* Writes one chunk: rows (its n * row_bytes bytes) and tail (io/tail.h), both borrowed. The
 * tail is checked; a chunk written before is SI_ERR_VERIFY (it would be counted twice). rows
 * NULL: the chunk's statuses and rows were written into the partial file by its rank already
 * (--writer parallel, mpi/pwrite.h); only the journal record is added. */
si_status si_result_put(si_result *r, const uint8_t *rows, const uint8_t *tail, size_t tail_len);

/* Flushes when flush_interval has passed since the last flush, or always when force. */
si_status si_result_flush(si_result *r, bool force);

/* The byte offsets in PATH.partial of /status and of each of the schema's columns (n_cols + 1
 * values; 0 for an empty dataset), for writers that bypass HDF5 (mpi/pwrite.h). */
void si_result_column_offsets(const si_result *r, uint64_t *offsets);

uint64_t si_result_images_done(const si_result *r);
uint64_t si_result_chunks_done(const si_result *r);
uint64_t si_result_chunks(const si_result *r);

/* Seconds each part of the final step took: the last flush and the undo record, errors and
 * detections placed from the journal, ids and index copied from the input, attributes, close,
 * sync and rename. */
typedef struct {
    double begin, records, ids, publish;
} si_result_finish_times;

/* Every chunk is in: writes ids (copied from input in blocks), index, errors, detections and the
 * root attributes, renames PATH.partial to PATH and removes the journal. *failed gets the number
 * of failed images, *times (may be NULL) what each part took. Frees r whatever happens. */
si_status si_result_finish(si_result *r, si_source *input, const si_result_meta *meta,
                           uint64_t *failed, si_result_finish_times *times);

/* Flushes and closes, leaving PATH.partial and PATH.journal for --resume. Frees r. */
si_status si_result_close(si_result *r);

/* The first differing "k=v" item of two resume keys, as "'a' then, 'b' now", into out. */
void si_result_key_difference(const char *then, const char *now, char *out, size_t cap);

/* "PATH.partial" / "PATH.journal" (caller frees). */
char *si_result_partial_path(const char *path);
char *si_result_journal_path(const char *path);
char *si_result_undo_path(const char *path);

#endif
