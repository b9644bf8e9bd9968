/* The job's state and the steps job.c calls in turn, shared by job.c (setting up), stream.c
 * (the streaming phase: hooks, rank 0's drain loop) and summary.c (the end: result, summary,
 * --max-errors). Not for use outside src/job. */
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
    si_result *res;       /* rank 0 */
    struct si_lock *lock; /* rank 0: the output's lock, held for the whole job */
    si_sched *sched;
    si_gather *gather;
    si_pwriter *pwrite;        /* --writer parallel */
    si_progress *prog;         /* rank 0 */
    si_bytes msg;              /* the chunk message being packed */
    double (*busy)[SI_STAGES]; /* rank 0: every rank's latest busy seconds, and elapsed */
    double *elapsed;
    si_rank_stats *final; /* rank 0: every rank's final statistics */
    si_rank_stats mine;   /* this rank's, once the pipeline is done */
    bool stop_seen, flushed_on_signal;
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
