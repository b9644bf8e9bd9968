/* The job's state and the steps job.c calls in turn, shared by job.c (setting up), stream.c
 * (the streaming phase: hooks, rank 0's drain loop), writer.c (rank 0's writer thread) and
 * summary.c (the end: result, summary, --max-errors). Not for use outside src/job. */
#ifndef SI_JOB_INTERNAL_H
#define SI_JOB_INTERNAL_H

#include "io/result.h"
#include "job.h"
#include "mpi/gather.h"
#include "mpi/pwrite.h"

#include <pthread.h>

/* The start-up's steps, timed for the "start-up" line: MPI and options (before the job), the
 * model, the input and output, the GPU's context, the engine, the resume key's fingerprint and
 * the result file. */
#define SI_JOB_STEPS 6

/* writer.c: rank 0's writer thread. While chunks stream it alone owns the result: it writes each
 * chunk (si_result_put) and flushes every flush interval, and at once after a stop signal (one
 * may be followed by SIGKILL). Rank 0's main thread, which also decodes and submits its own
 * batches and is the only thread that may call MPI (THREAD_FUNNELED), only copies each finished
 * chunk, its own or one received, into a bounded queue and goes on; it waits only while the queue
 * is full. A failure is recorded, not acted on: MPI_Abort is the main thread's (si_writer_check).
 */
typedef struct si_writer si_writer;
typedef struct {
    double alive;  /* seconds from the thread's start to its end */
    double busy;   /* of them, writing chunks and flushing */
    double flush;  /* of busy, in flushes that wrote (HDF5 flush and fsync, the journal's) */
    double waited; /* the main thread's seconds waiting for room in the queue */
    double drain;  /* the main thread's seconds waiting, at the end, for the queue to be written */
    uint64_t chunks; /* chunks written */
    uint64_t full;   /* times the main thread found the queue full */
    int depth;       /* the queue's entries */
} si_writer_stats;

/* Starts the thread over res, which it owns until si_writer_close (the caller must not touch it
 * meanwhile). chunk_rows: the bytes of rows a queued chunk may carry (0 when only tails are
 * queued): large chunks get fewer entries, so the queue's memory stays bounded. slow_ms: tests
 * only, a writer slower than the pipeline on any machine: the thread writes nothing until the
 * main thread has found the queue full, then sleeps that long before each chunk. */
si_writer *si_writer_start(si_result *res, size_t chunk_rows, int slow_ms);
/* Main thread: queues a copy of a chunk's rows (rows_len bytes; NULL when its rank wrote them
 * into the file itself, --writer parallel) and tail (io/tail.h), both borrowed for the call;
 * waits while the queue is full. what names the step for a failure's message ("rank 0: cannot
 * write a chunk"; static). A failure of the thread (si_writer_check) is returned instead. */
si_status si_writer_put(si_writer *w, const uint8_t *rows, size_t rows_len, const uint8_t *tail,
                        size_t tail_len, const char *what);
/* Main thread: SI_OK, or the thread's failure with its message in the caller's error buffer
 * and *what the step that failed. */
si_status si_writer_check(si_writer *w, const char **what);
/* Images done in the result so far (the thread's count; any thread may ask). */
uint64_t si_writer_images_done(si_writer *w);
/* Main thread: waits until every queued chunk is written, ends the thread and frees w; the
 * result is the caller's again. *stats (may be NULL) gets the times. Returns the thread's
 * failure as si_writer_check does (*what may be NULL). Accepts NULL. */
si_status si_writer_close(si_writer *w, si_writer_stats *stats, const char **what);

typedef struct {
    const si_job_config *cfg; /* borrowed */
    const si_mpi *m;          /* borrowed */
    si_pipeline_config pc;    /* cfg->pc completed: the model's norm, threads, chunk, timeline */
    si_engine_opts eo;        /* cfg->eo completed for the CUDA engine */
    double t_start;
    double t_step[SI_JOB_STEPS]; /* seconds of each start-up step (si_job_run) */
    char host[256];
    int threads;
    si_graph *g; /* until the engine owns it */
    si_engine *e;
    si_source *set;
    uint64_t n, n_chunks, done_before; /* images, chunks; images done before (rank 0) */
    uint32_t chunk;
    uint8_t *done; /* the done-chunks bitmap until the scheduler has it */
    char sha[65], pre[512], post_params[256];
    pthread_t sha_thread; /* rank 0: the model's hash, beside the engine's set-up */
    bool sha_running;
    si_status sha_st;
    char sha_err[512];
    char *key;
    si_result_meta meta;
    si_result *res;         /* rank 0; the writer thread's while it runs */
    si_writer *writer;      /* rank 0 while chunks stream */
    si_writer_stats wstats; /* rank 0: its writer thread's, once closed */
    struct si_lock *lock;   /* rank 0: the output's lock, held for the whole job */
    si_sched *sched;
    si_gather *gather;
    si_pwriter *pwrite;        /* --writer parallel */
    si_progress *prog;         /* rank 0 */
    si_bytes msg;              /* the chunk message being packed */
    double (*busy)[SI_STAGES]; /* rank 0: every rank's latest busy seconds, and elapsed */
    double *elapsed;
    si_rank_stats *final; /* rank 0: every rank's final statistics */
    si_rank_stats mine;   /* this rank's, once the pipeline is done */
    bool stop_seen;
    bool complete;        /* --resume of a whole result: nothing to do */
    int gpu;              /* --backend cuda: this rank's device */
    char decode_why[256]; /* where JPEGs decode and why, for the first info line */
    struct si_hwjpeg *hw; /* --decode gpu: the GPU's hardware JPEG decoder (src/decode) */
    char batch_why[128];  /* how the batch was chosen without --batch, for the first info line */
} si_job_state;

/* stream.c: the streaming phase. Runs this rank's pipeline, writes the timeline, then drains:
 * the ranks send their statistics and rank 0 takes every message in; closes the parallel
 * writer. A failure while streaming ends the job (MPI_Abort). */
void si_job_stream(si_job_state *J);
/* Rank 0: the progress line from every rank's latest busy times (force: print now). */
void si_job_show_progress(si_job_state *J, bool force);

/* summary.c: rank 0 finishes (or, interrupted, closes) the result, prints the summary and
 * applies --max-errors; the others return SI_OK. */
si_status si_job_finish(si_job_state *J);

#endif
