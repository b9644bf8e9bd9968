/* A chunk: the unit of work and of results. The index space [0, N) is cut into chunks of `size`
 * images (the last may be shorter), each a whole number of batches, so a chunk's results do not
 * depend on which rank computed it. A chunk's results travel as one message to rank 0, which
 * writes the fixed-size rows into the result and appends the rest (statuses, messages,
 * detections: the "tail") to the journal, the record that the chunk is complete.
 *
 * The tail's layout is a file format (the journal keeps it): io/tail.h.
 * A message to rank 0 is: si_chunk_msg_header, rows[n * row_bytes] (8-aligned), tail; the framing
 * is here (si_chunk_msg_*), the sending in mpi/gather and the job (src/job). */
#ifndef SI_CHUNK_H
#define SI_CHUNK_H

#include "io/tail.h"
#include "post/post.h"

#define SI_MSG_LEN 256 /* one failed image's message, truncated */

typedef struct {
    uint64_t id, first;
    uint32_t n, cap;         /* images in it; room for */
    size_t row_bytes;        /* the plan's */
    bool detect;             /* dets_per_image and dets are kept */
    int32_t *status;         /* [cap] */
    uint8_t *rows;           /* [cap * row_bytes] */
    char (*msg)[SI_MSG_LEN]; /* [cap]: why an image failed ("" while it is fine) */
    uint32_t *hash;          /* [cap]: each image's bytes as read, hashed (si_source_hash) */
    uint32_t *n_dets;        /* [cap] detect only */
    si_detection *dets;      /* [det_cap], grows to the largest chunk's and stays */
    uint64_t n_det_total, det_cap;
} si_chunk;

/* The images of chunk `id` of N images cut into chunks of `size`. */
static inline uint32_t si_chunk_len(uint64_t id, uint64_t n, uint32_t size) {
    uint64_t first = id * size;
    return (uint32_t)(n - first < size ? n - first : size);
}

/* Allocates a chunk for up to cap images under plan p; free with si_chunk_free. */
void si_chunk_init(si_chunk *c, uint32_t cap, const si_post_plan *p);
void si_chunk_free(si_chunk *c);
/* Starts chunk (id, first, n): statuses NOT_PROCESSED, rows filled with the plan's fill values
 * (template row `empty`), no detections, no messages. */
void si_chunk_reset(si_chunk *c, uint64_t id, uint64_t first, uint32_t n, const uint8_t *empty);
/* Appends dets for image j (images must be appended in ascending order). */
void si_chunk_add_dets(si_chunk *c, uint32_t j, const si_detection *d, int n);

#define SI_CHUNK_MSG_MAGIC 0x5349434bu /* "KCIS" */

/* Per-rank cumulative stage times carried by every message, for the progress line. */
typedef struct {
    uint32_t magic, rank;
    uint64_t id;
    uint64_t rows_bytes, tail_bytes;
    double elapsed; /* since the rank started working */
    double busy[6]; /* read, decode, compute, post, write, starved: seconds */
} si_chunk_msg_header;

/* A chunk's message, parsed: the header, then pointers into the borrowed message. */
typedef struct {
    si_chunk_msg_header h;
    const uint8_t *rows; /* h.rows_bytes (0 when the rows were written by the rank itself) */
    const uint8_t *tail; /* h.tail_bytes */
} si_chunk_msg;

/* The header of chunk c's message from `rank`: rows travel unless the rank wrote them into the
 * file itself (with_rows false); elapsed and busy (SI_STAGES seconds) are the rank's, for rank 0's
 * progress line. Returns the message's bytes (header, rows padded to 8, tail). */
size_t si_chunk_msg_header_make(const si_chunk *c, bool with_rows, uint32_t rank, double elapsed,
                                const double *busy, si_chunk_msg_header *h);
/* Writes the message of c under header h (si_chunk_msg_header_make's bytes) into dst. */
void si_chunk_msg_pack(const si_chunk *c, const si_chunk_msg_header *h, uint8_t *dst);
/* Splits a message of len bytes (borrowed by *m). Messages come from the job's own ranks, so a
 * malformed one is a broken invariant (SI_ASSERT), not an input error. */
void si_chunk_msg_parse(const uint8_t *msg, size_t len, si_chunk_msg *m);

/* Bytes of the tail of c. */
size_t si_chunk_tail_size(const si_chunk *c);
/* Writes the tail of c into dst (si_chunk_tail_size bytes). */
void si_chunk_tail_pack(const si_chunk *c, uint8_t *dst);

#endif
