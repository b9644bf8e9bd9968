/* A chunk's tail: the part of a chunk's results whose size varies (statuses, failure messages,
 * detections), as bytes. The pipeline writes it (src/pipeline/chunk.h), it travels to rank 0
 * after the chunk's fixed-size rows, and the result journal keeps it as the record that the chunk
 * is complete (io/result.h), read back on --resume and at finish. It is defined here, beside the
 * journal, because it is a file format: io/ reads it without knowing the pipeline.
 *
 * Layout (native byte order, every section 8-byte aligned):
 *   u64 id, u64 first, u32 n, u32 n_errors, u64 n_dets   (SI_TAIL_HEAD bytes)
 *   i32 status[n]
 *   u32 input_hash[n]              (each image's bytes as read: io/source.h's si_source_hash)
 *   u32 dets_per_image[n]          (only when the run detects)
 *   si_tail_det dets[n_dets]       (image order)
 *   errors: n_errors x (u64 index, u16 length, bytes), ascending index */
#ifndef SI_TAIL_H
#define SI_TAIL_H

#include "base/common.h"

#define SI_TAIL_HEAD 32u

/* One detection as the tail stores it (the layout of src/post/detect.h's si_detection). */
typedef struct {
    float x1, y1, x2, y2, score;
    int32_t cls;
} si_tail_det;

/* A parsed tail: pointers into the borrowed bytes. */
typedef struct {
    uint64_t id, first, n_dets;
    uint32_t n, n_errors;
    const int32_t *status;
    const uint32_t *input_hash;
    const uint32_t *dets_per_image; /* NULL unless detect */
    const si_tail_det *dets;
    const uint8_t *errors; /* n_errors records */
    size_t errors_bytes;
} si_tail;

/* Parses and checks a tail (bounds of every section and record, id/first/n against N images cut
 * into chunks of `size`, statuses failing exactly where messages are). Returns SI_ERR_FORMAT with
 * a message saying what is wrong; the bytes are borrowed by *t. */
si_status si_tail_parse(const uint8_t *b, size_t len, bool detect, uint64_t n_images, uint32_t size,
                        si_tail *t);

/* Iterates the error records of t: *pos starts at 0; returns false at the end. msg is not
 * NUL-terminated: len bytes. */
bool si_tail_error(const si_tail *t, size_t *pos, uint64_t *index, const char **msg, uint16_t *len);

#endif
