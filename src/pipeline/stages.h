/* Internal to src/pipeline/: the state the pipeline's threads share (one mutex and one
 * condition variable guard every queue), and the stages pipeline.c runs: the reader thread
 * (reader.c) and the decode of a batch into an engine slot (decode.c). */
#ifndef SI_PIPELINE_STAGES_H
#define SI_PIPELINE_STAGES_H

#include <pthread.h>

#include "pipeline.h"

#define READ_SLOTS  3 /* the batch being decoded + up to two read ahead */
#define POST_SLOTS  2 /* batches waiting for or in the postprocessor */
#define CHUNK_SLOTS 4 /* being filled, in post, finished and not yet handed over */
#define CLAIM_AHEAD 2 /* chunks claimed beyond the one being read */

/* A batch's encoded bytes, reader -> main. */
typedef struct {
    si_bytes buf;
    uint64_t *off;           /* [B+1] */
    int32_t *status;         /* [B]: SI_IMG_READ_ERROR for records that could not be read */
    char (*msg)[SI_MSG_LEN]; /* [B]: why, for those */
    uint32_t *hash;          /* [B]: what was read, hashed (the journal keeps it: io/tail.h);
                                the readable images' by the decode stage (keep_hashes) */
    uint64_t chunk, first;   /* the batch's chunk and first image */
    uint32_t n;
    bool chunk_start, chunk_end;
} si_read_slot;

/* A computed batch, main -> post. */
typedef struct {
    float *out[SI_MAX_OUTPUTS]; /* [B * out_numel[o]]: the packed rows' outputs */
    int32_t *rowmap;            /* [B]: row -> position in the batch */
    int rows;
    uint64_t b0;
    si_chunk *c;
    bool last; /* the chunk's last batch */
    int64_t k;
} si_post_slot;

typedef struct {
    const si_pipeline_config *cfg;
    const si_pipeline_hooks *h;
    si_source *set;
    uint64_t n_images;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* claimed chunks, main -> reader */
    uint64_t claims[CLAIM_AHEAD + 1];
    int c_head, c_count;
    bool claims_closed;
    /* read batches, reader -> main */
    si_read_slot rs[READ_SLOTS];
    int r_filled;
    bool reader_done;
    /* batches to postprocess, main -> post */
    si_post_slot ps[POST_SLOTS];
    int p_head, p_count;
    bool post_closed, post_exited;
    /* chunks: free ones, and finished ones, post -> main */
    si_chunk chunks[CHUNK_SLOTS];
    si_chunk *free_c[CHUNK_SLOTS], *done_c[CHUNK_SLOTS];
    int n_free, d_head, d_count;
    bool abort; /* the main thread gave up: the threads leave */
    /* a fault of the storage or the machine met by the reader (SI_ERR_FAULT), and its message:
     * the run stops with it */
    si_status fault;
    char fault_msg[1024];
    /* the post pool's buffers */
    uint8_t *scratch;   /* [post_threads * scratch_bytes] */
    si_detection *dets; /* [B * max_dets] */
    int *n_dets;        /* [B] */
    si_rank_stats st;   /* read and post times under mu, the rest main-thread only */
    double t0;
} si_pipe;

static inline void pipe_lock(si_pipe *R) {
    pthread_mutex_lock(&R->mu);
}
static inline void pipe_unlock(si_pipe *R) {
    pthread_mutex_unlock(&R->mu);
}
static inline void pipe_signal(si_pipe *R) {
    pthread_cond_broadcast(&R->cv);
}

/* reader.c: the read slots' buffers for batches of cfg->batch (freed by si_reader_free), and
 * the reader thread: takes claimed chunks, reads them batch by batch into the ring of read
 * slots, sets reader_done when the claims are closed and read, or at abort. */
void si_reader_init(si_pipe *R);
void si_reader_free(si_pipe *R);
void *si_reader_main(void *arg);

/* faillog.c: the per-image failure lines (decode's, post's, the reader's). The first
 * SI_FAILLOG_FULL failures of each status are logged in full (index, id, status, why), the next
 * one logs that the others of that status are not, and the rest only count: a million bad records
 * cost a few lines, and each is still in the result's /errors. The counts are this process's (one
 * rank's), from si_faillog_reset at the pipeline's start; si_faillog_report logs, at its end, the
 * count of each status that was cut short. Thread-safe. */
#define SI_FAILLOG_FULL 20
void si_faillog_reset(void);
/* Image `image` failed with `status` (an si_image_status, not OK) because of msg. Its id is read
 * from set (NULL: none) only for a line that is printed. Borrows set and msg. */
void si_faillog(si_source *set, uint64_t image, int status, const char *msg);
void si_faillog_report(void);

/* decode.c: one rank's decoders (libjpeg-turbo, one per OpenMP thread; cfg->hw_jpeg, the GPU's
 * hardware decoder, where given) and the batch's way into an engine slot, picked once at start:
 * pre-decoded pixels resized and cropped, JPEGs decoded into the slot's packed buffer for the
 * GPU's resize (when the engine has one and cfg->gpu_resize), the same with the hardware decoder
 * taking the images it can (cfg->hw_jpeg: --decode gpu), or JPEGs decoded and cropped. Borrows
 * cfg, e and set; free with si_decode_free. */
typedef struct si_decode si_decode;
si_decode *si_decode_create(const si_pipeline_config *cfg, si_engine *e, si_source *set);
void si_decode_free(si_decode *d); /* accepts NULL */
/* Whether batches go in through the engine slots' packed buffers (si_engine_submit_packed). */
bool si_decode_packed(const si_decode *d);
/* Decodes read slot sl's images into engine slot `slot` (free). status/msgs (sl->n entries)
 * come in with the read's verdicts and leave with the decode's (failures logged). The good
 * rows go to the front, in order: rowmap[r] is row r's position in the batch. Returns the
 * number of rows; *packed = the packed buffer's bytes to upload (0 with crops in the slot's
 * pixels, or where every image decoded on the device). Adds to st: cpu_resized (images resized
 * here although the GPU was to) and, with the hardware decoder, gpu_decoded (the images it decodes,
 * queued on the slot's stream), gpu_retried (those of batches it rejected, decoded here instead),
 * gpu_call_s, gpu_call_cpu_s and gpu_plan_s. */
int si_decode_batch(si_decode *d, int slot, const si_read_slot *sl, int32_t *status,
                    char (*msgs)[SI_MSG_LEN], int32_t *rowmap, size_t *packed, si_rank_stats *st);

#endif
