/* The job's streaming phase: the pipeline's hooks (claim a chunk, hand a finished one on, pump
 * between batches), rank 0 taking the other ranks' messages in and queueing every chunk for its
 * writer thread (writer.c), and the drain at the end. A failure of the run itself here ends the
 * job with MPI_Abort, on the main thread: the partial result keeps every chunk flushed so far. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "job/signals.h"
#include "job_internal.h"
#ifdef SI_HAVE_CUDA
#include "cuda/cuda.h"
#endif

static uint64_t peak_rss_kb(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (uint64_t)ru.ru_maxrss : 0;
}

/* Ends the job: a failure of the run itself while chunks stream (a write error on rank 0, an
 * engine failure on a rank). The partial result keeps everything flushed. */
static void job_fail(const si_job_state *J, si_status st, const char *what) {
    si_log_error("%s: %s; the job stops here. The partial result keeps the finished chunks: fix "
                 "the cause and run again with --resume",
                 what, si_error_msg());
    fflush(NULL);
    MPI_Abort(MPI_COMM_WORLD, st == SI_ERR_VERIFY ? SI_EXIT_VERIFY : SI_EXIT_FAIL);
}

static void note_busy(si_job_state *J, int rank, const double *busy, double elapsed) {
    memcpy(J->busy[rank], busy, sizeof(double) * SI_STAGES);
    J->elapsed[rank] = elapsed;
}

void si_job_show_progress(si_job_state *J, bool force) {
    if (!J->prog) return;
    double avg[SI_STAGES] = {0};
    int k = 0;
    for (int r = 0; r < J->m->size; r++) {
        if (J->elapsed[r] <= 0) continue;
        for (int s = 0; s < SI_STAGES; s++) avg[s] += J->busy[r][s] / J->elapsed[r];
        k++;
    }
    for (int s = 0; s < SI_STAGES && k; s++) avg[s] /= k;
    /* while chunks stream the result is the writer thread's: its count is read instead */
    uint64_t done = J->writer ? si_writer_images_done(J->writer) : si_result_images_done(J->res);
    si_progress_update(J->prog, done, avg, force);
}

/* Rank 0: a failure of the writer thread ends the job here, on the thread that may call MPI. */
static void check_writer(si_job_state *J) {
    const char *what = NULL;
    si_status st = si_writer_check(J->writer, &what);
    if (st != SI_OK) job_fail(J, st, what);
}

/* Rank 0: a copy of a chunk for the writer thread (rows NULL or not, as si_writer_put); its
 * failure, or no memory for the copy, ends the job. */
static void queue_chunk(si_job_state *J, const uint8_t *rows, size_t rows_len, const uint8_t *tail,
                        size_t tail_len, const char *what) {
    si_status st = si_writer_put(J->writer, rows, rows_len, tail, tail_len, what);
    if (st == SI_OK) return;
    check_writer(J); /* named by the step that failed in the thread */
    job_fail(J, st, what);
}

/* Rank 0: a message from another rank (si_gather_fn): a chunk, or the rank's final statistics. */
static si_status on_message(void *ctx, int src, int kind, const uint8_t *msg, size_t len) {
    si_job_state *J = ctx;
    if (kind == 1) {
        SI_ASSERT(len == sizeof(si_rank_stats));
        memcpy(&J->final[src], msg, sizeof(si_rank_stats));
        note_busy(J, src, J->final[src].busy, J->final[src].t_total);
        return SI_OK;
    }
    si_chunk_msg cm;
    si_chunk_msg_parse(msg, len, &cm);
    note_busy(J, src, cm.h.busy, cm.h.elapsed);
    /* the gather's buffer is reused at the next message: the writer gets a copy */
    queue_chunk(J, J->pwrite ? NULL : cm.rows, cm.h.rows_bytes, cm.tail, cm.h.tail_bytes,
                "rank 0: cannot take a chunk in");
    return SI_OK;
}

static bool hook_next(void *ctx, uint64_t *id) {
    si_job_state *J = ctx;
    if (si_signals_stop() && !J->stop_seen) {
        J->stop_seen = true;
        si_log_warn("%s: no new work is taken; the chunks in flight are finished and flushed, then "
                    "the run exits with code %d (resume with --resume)",
                    si_signals_name(si_signals_stop()), SI_EXIT_INTERRUPTED);
        si_sched_stop(J->sched);
    }
    return si_sched_next(J->sched, id);
}

static si_status hook_chunk(void *ctx, const si_chunk *c, const si_rank_stats *s) {
    si_job_state *J = ctx;
    if (J->pwrite) {
        si_status st = si_pwriter_put(J->pwrite, c);
        if (st != SI_OK) job_fail(J, st, "cannot write a chunk's rows with MPI-IO");
    }
    if (J->m->rank == 0) { /* its own chunk: the tail is packed, the rows go as they are */
        check_writer(J);
        size_t tail = si_chunk_tail_size(c);
        if (si_bytes_reserve(&J->msg, tail) != SI_OK) job_fail(J, SI_ERR_NOMEM, "chunk tail");
        si_chunk_tail_pack(c, J->msg.data);
        note_busy(J, 0, s->busy, s->t_total);
        queue_chunk(J, J->pwrite ? NULL : c->rows, c->row_bytes * c->n, J->msg.data, tail,
                    "rank 0: cannot write a chunk");
        si_job_show_progress(J, false);
        return SI_OK;
    }
    /* with the parallel writer the rows are in the file already: only the tail travels */
    si_chunk_msg_header h;
    size_t total =
        si_chunk_msg_header_make(c, !J->pwrite, (uint32_t)J->m->rank, s->t_total, s->busy, &h);
    if (si_bytes_reserve(&J->msg, total) != SI_OK) job_fail(J, SI_ERR_NOMEM, "chunk message");
    si_chunk_msg_pack(c, &h, J->msg.data);
    si_gather_send(J->gather, J->msg.data, total);
    return SI_OK;
}

static si_status hook_pump(void *ctx, const si_rank_stats *s) {
    si_job_state *J = ctx;
    if (J->m->rank != 0) {
        si_gather_progress(J->gather);
        return SI_OK;
    }
    note_busy(J, 0, s->busy, s->t_total);
    check_writer(J); /* the writer thread flushes, on the interval and at a signal */
    si_status st = si_gather_poll(J->gather, on_message, J);
    if (st != SI_OK) job_fail(J, st, "rank 0: cannot take a chunk in");
    si_job_show_progress(J, false);
    return SI_OK;
}

/* Signals, the gather, and on rank 0 the tables of every rank's times, the progress line and
 * the writer thread, which owns the result from here until the drain's end. */
static void start_streaming(si_job_state *J) {
    const si_job_config *cfg = J->cfg;
    si_signals_install(cfg->drain_timeout, SI_EXIT_INTERRUPTED,
                       "(a peer is gone?) what was flushed stays, finish with --resume");
    J->gather = si_gather_create(J->m);
    if (J->m->rank != 0) return;
    J->busy = si_xcalloc((size_t)J->m->size, sizeof *J->busy);
    J->elapsed = si_xcalloc((size_t)J->m->size, sizeof *J->elapsed);
    J->final = si_xcalloc((size_t)J->m->size, sizeof *J->final);
    /* with the parallel writer only tails are queued */
    size_t rows = J->pwrite ? 0 : (size_t)J->chunk * J->pc.plan.row_bytes;
    J->writer = si_writer_start(J->res, rows, cfg->slow_write_ms);
    if (si_log_get_level() >= SI_LOG_INFO)
        J->prog =
            si_progress_create(cfg->progress, stderr, J->n, J->done_before, cfg->progress_interval);
}

/* --timeline: rank R of several writes FILE.rankR. A failure to write it is a warning: the
 * results are still written. */
static void write_timeline(const si_job_state *J, si_timeline *tl) {
    const char *name = J->cfg->timeline;
    char path[4096];
    if (J->m->size > 1)
        snprintf(path, sizeof path, "%s.rank%d", name, J->m->rank);
    else
        snprintf(path, sizeof path, "%s", name);
    FILE *f = fopen(path, "w");
    si_status ts = f ? si_timeline_write(tl, J->m->rank, f, true)
                     : si_error(SI_ERR_IO, "--timeline %s: cannot create", path);
    if (f && fclose(f) != 0) ts = si_error(SI_ERR_IO, "--timeline %s: write error", path);
    if (ts != SI_OK) si_log_warn("%s", si_error_msg());
}

/* This rank's pipeline over the chunks it claims; J->mine gets its statistics. */
static void run_pipeline(si_job_state *J) {
    si_pipeline_hooks hooks = {
        .ctx = J, .next_chunk = hook_next, .chunk_done = hook_chunk, .pump = hook_pump};
    si_timeline tl = {0};
    if (J->cfg->timeline) { /* a rank sees at most every batch; chunks add a short batch each */
        uint64_t batches = J->n / (uint64_t)J->pc.batch + J->n / J->pc.chunk + 16;
        si_timeline_init(&tl, batches * SI_TL_STAGES);
        J->pc.timeline = &tl;
    }
    si_status st = si_pipeline_run(&J->pc, J->e, J->set, &hooks, &J->mine);
    if (st != SI_OK) job_fail(J, st, "the pipeline failed");
    if (J->cfg->timeline) {
        write_timeline(J, &tl);
        si_timeline_free(&tl);
        J->pc.timeline = NULL;
    }
    si_rank_stats *mine = &J->mine;
    si_log_debug("decode buffer: %s", mine->pinned ? "pinned (CUDA host memory)" : "pageable");
    mine->peak_rss_kb = peak_rss_kb();
    mine->t_init = si_engine_mem(J->e)->init_seconds;
    mine->gpu = -1;
#ifdef SI_HAVE_CUDA
    if (si_engine_on_gpu(J->e)) {
        mine->gpu = si_cuda_node_gpu(J->gpu, NULL);
        size_t used = 0, total = 0;
        if (si_cuda_mem_info(&used, &total) == SI_OK) mine->gpu_mem_kb = used / 1024;
        mine->gpu_plan_kb = si_engine_mem(J->e)->device_total / 1024;
    }
#endif
}

/* The end of streaming: every other rank sends its statistics once its chunks are sent; rank 0
 * keeps taking messages in until every rank's statistics have come, then lets its writer thread
 * write (and flush) everything queued and ends it: the result is the main thread's again. */
static void drain(si_job_state *J) {
    if (J->m->rank != 0) {
        si_gather_finish(J->gather, &J->mine, sizeof J->mine);
        return;
    }
    J->final[0] = J->mine;
    while (si_gather_finished(J->gather) < J->m->size - 1) {
        hook_pump(J, &J->mine);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    const char *what = NULL;
    si_status st = si_writer_close(J->writer, &J->wstats, &what);
    J->writer = NULL;
    if (st != SI_OK) job_fail(J, st, what);
}

/* Collective: the parallel writer's rows are all written once every rank has closed it. */
static void close_parallel_writer(si_job_state *J) {
    uint64_t pbytes = si_pwriter_bytes(J->pwrite), pbytes_all = 0;
    si_pwriter_close(J->pwrite);
    J->pwrite = NULL;
    mpiCheck(MPI_Reduce(&pbytes, &pbytes_all, 1, MPI_UINT64_T, MPI_SUM, 0, J->m->comm));
    if (J->m->rank == 0 && J->cfg->parallel_writer)
        si_log_info("parallel writer: the ranks wrote %.1f MB of rows with MPI-IO",
                    (double)pbytes_all / 1e6);
}

void si_job_stream(si_job_state *J) {
    start_streaming(J);
    run_pipeline(J);
    drain(J);
    si_sched_free(J->sched);
    J->sched = NULL;
    close_parallel_writer(J);
}
