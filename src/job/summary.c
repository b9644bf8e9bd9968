/* The end of the job on rank 0: finish the result (or, interrupted, close the partial one), print
 * the summary (totals, a row per rank, rank 0's writer thread, time to first result and steady
 * state), and the --max-errors rule. */
#include <stdio.h>
#include <stdlib.h>

#include "job_internal.h"

si_status si_job_check_errors(const si_job_config *cfg, uint64_t failed, uint64_t n) {
    if (cfg->max_errors < 0) return SI_OK;
    double limit = cfg->max_errors_fraction ? cfg->max_errors * (double)n : cfg->max_errors;
    if ((double)failed <= limit) return SI_OK;
    return si_error(SI_ERR_LIMIT,
                    "%llu of %llu images failed (%.2f%%), more than --max-errors allows "
                    "(%g%s); the result was written to %s for inspection",
                    (unsigned long long)failed, (unsigned long long)n,
                    n ? 100.0 * (double)failed / (double)n : 0.0,
                    cfg->max_errors_fraction ? 100 * cfg->max_errors : cfg->max_errors,
                    cfg->max_errors_fraction ? "%" : "", cfg->output);
}

/* The first line: totals over every rank (images/s counts this run's images only). */
static void print_totals(const si_job_state *J, uint64_t failed, uint64_t done_now, double elapsed,
                         bool complete) {
    const si_rank_stats *ranks = J->final;
    int size = J->m->size, threads = J->threads, post_threads = J->pc.post_threads;
    uint64_t here = 0, n = J->n;
    for (int r = 0; r < size; r++) here += ranks[r].images + ranks[r].failed;
    const char *resumed = J->done_before ? " [resumed]" : "";
    if (complete)
        printf("shardinfer: %llu images (%llu ok, %llu failed)%s on %d rank%s x %d thread%s (+%d "
               "post) in %.2f s: %.1f images/s\n",
               (unsigned long long)n, (unsigned long long)(n - failed), (unsigned long long)failed,
               resumed, size, size > 1 ? "s" : "", threads, threads > 1 ? "s" : "", post_threads,
               elapsed, elapsed > 0 ? (double)here / elapsed : 0.0);
    else
        printf(
            "shardinfer: interrupted: %llu of %llu images done%s on %d rank%s x %d thread%s (+%d "
            "post) in %.2f s: %.1f images/s\n",
            (unsigned long long)done_now, (unsigned long long)n, resumed, size, size > 1 ? "s" : "",
            threads, threads > 1 ? "s" : "", post_threads, elapsed,
            elapsed > 0 ? (double)here / elapsed : 0.0);
    if (J->done_before)
        printf("  %llu images were done before this run; %llu in it\n",
               (unsigned long long)J->done_before, (unsigned long long)here);
}

/* A row per rank, and the slowest. busy: the share of the rank's wall time each stage was
 * working; read and post run in threads of their own, so the shares add up to more than 100%
 * when stages overlap. */
static void print_ranks(const si_rank_stats *ranks, int size) {
    printf("  rank   images  failed  first-result  busy%%: read decode compute  post write  "
           "starved     total  peak-MB\n");
    int slowest = 0;
    for (int r = 0; r < size; r++) {
        const si_rank_stats *s = &ranks[r];
        double T = s->t_total > 0 ? s->t_total : 1;
        if (s->t_total > ranks[slowest].t_total) slowest = r;
        printf("  %4d %8llu %7llu %11.3f s %10.0f %6.0f %7.0f %5.0f %5.0f %8.0f %8.2f s %8.1f\n", r,
               (unsigned long long)(s->images + s->failed), (unsigned long long)s->failed,
               s->t_first, 100 * s->busy[SI_STAGE_READ] / T, 100 * s->busy[SI_STAGE_DECODE] / T,
               100 * s->busy[SI_STAGE_COMPUTE] / T, 100 * s->busy[SI_STAGE_POST] / T,
               100 * s->busy[SI_STAGE_WRITE] / T, 100 * s->busy[SI_STAGE_STARVED] / T, s->t_total,
               (double)s->peak_rss_kb / 1024.0);
    }
    printf("  slowest rank: %d (%.2f s)\n", slowest, ranks[slowest].t_total);
}

/* Time to first result, steady state (each rank's images after its first chunk, over the time
 * after it), the images the GPU resize passed to the CPU, and each rank's GPU. */
static void print_rates(const si_rank_stats *ranks, int size) {
    double steady = 0, first = 0, init = 0;
    for (int r = 0; r < size; r++) {
        const si_rank_stats *s = &ranks[r];
        double dt = s->t_total - s->t_first;
        uint64_t after = s->chunks > 1 ? (s->images + s->failed) * (s->chunks - 1) / s->chunks : 0;
        if (dt > 0 && after > 0) steady += (double)after / dt;
        if (s->t_first > first) first = s->t_first;
        if (s->t_init > init) init = s->t_init;
    }
    printf("  time to first result %.3f s after %.2f s of engine set-up; steady state %.1f "
           "images/s (every rank after its first chunk)\n",
           first, init, steady);
    uint64_t spilled = 0;
    for (int r = 0; r < size; r++) spilled += ranks[r].cpu_resized;
    if (spilled)
        printf("  --resize-on gpu: %llu images resized on the CPU instead (larger than the "
               "slot's buffer had room for, or a filter wider than the GPU's)\n",
               (unsigned long long)spilled);
    uint64_t on_gpu = 0, retried = 0, all = 0;
    double call = 0;
    for (int r = 0; r < size; r++) {
        call += ranks[r].gpu_call_s;
        on_gpu += ranks[r].gpu_decoded;
        retried += ranks[r].gpu_retried;
        all += ranks[r].images + ranks[r].failed;
    }
    if (on_gpu || retried)
        printf("  --decode gpu: %llu images decoded by the GPU's JPEG decoder, the other %llu on "
               "the CPU (failed ones included; %llu from batches the GPU rejected); %.2f s of "
               "the decode stage in nvJPEG's host calls\n",
               (unsigned long long)on_gpu, (unsigned long long)(all - on_gpu),
               (unsigned long long)retried, call);
    /* where each rank's reader and decode stage spend their time, and how much of it on a CPU
     * (the rest waiting: for a core, the storage, the GPU's decoder) */
    for (int r = 0; r < size; r++) {
        const si_rank_stats *s = &ranks[r];
        printf("  rank %d: reads %.2f s (%.2f s on a CPU)", r, s->busy[SI_STAGE_READ],
               s->read_cpu_s);
        if (s->gpu_decoded || s->gpu_retried)
            printf("; decoder calls %.2f s (%.2f s on a CPU), before them %.2f s", s->gpu_call_s,
                   s->gpu_call_cpu_s, s->gpu_plan_s);
        printf("\n");
    }
    for (int r = 0; r < size; r++) {
        const si_rank_stats *s = &ranks[r];
        if (s->gpu < 0) continue;
        /* the device's whole use (cudaMemGetInfo): beside the plan are the CUDA context, the
         * libraries' own buffers (cuDNN, cuBLASLt, nvJPEG's, which take no allocator of ours),
         * and any other process on that GPU */
        printf("  rank %d: GPU %d, %.1f MiB of device memory in use at the end: the planned %.1f "
               "MiB and %.1f MiB beside it (CUDA context, libraries%s, other processes)\n",
               r, s->gpu, (double)s->gpu_mem_kb / 1024.0, (double)s->gpu_plan_kb / 1024.0,
               ((double)s->gpu_mem_kb - (double)s->gpu_plan_kb) / 1024.0,
               s->gpu_decoded ? ", nvJPEG's buffers" : "");
    }
}

/* Rank 0's writer thread: its own busy time, beside the row's write share (which is rank 0's main
 * thread handing chunks over, taking messages in and waiting for room in the queue). */
static void print_writer(const si_writer_stats *w) {
    printf("  rank 0's writer thread: busy %.2f s of %.2f s (%.0f%%): %llu chunks, %.2f s of "
           "flushes; rank 0 waited %.2f s for room in its queue (%d entries, full %llu times) "
           "and %.2f s at the end\n",
           w->busy, w->alive, w->alive > 0 ? 100 * w->busy / w->alive : 0.0,
           (unsigned long long)w->chunks, w->flush, w->waited, w->depth,
           (unsigned long long)w->full, w->drain);
}

static void print_summary(const si_job_state *J, uint64_t failed, uint64_t done_now, double elapsed,
                          bool complete) {
    print_totals(J, failed, done_now, elapsed, complete);
    print_ranks(J->final, J->m->size);
    print_writer(&J->wstats);
    print_rates(J->final, J->m->size);
    printf("  %s: %s\n", complete ? "results" : "partial results", J->cfg->output);
    fflush(stdout);
}

si_status si_job_finish(si_job_state *J) {
    if (J->m->rank != 0) return SI_OK;
    si_job_show_progress(J, true);
    si_progress_free(J->prog);
    J->prog = NULL;
    bool complete = si_result_chunks_done(J->res) == si_result_chunks(J->res);
    uint64_t images_done = si_result_images_done(J->res), failed = 0;
    J->meta.elapsed_seconds = si_now() - J->t_start;
    double t = si_now();
    si_result_finish_times ft = {0};
    si_status st = complete ? si_result_finish(J->res, J->set, &J->meta, &failed, &ft)
                            : si_result_close(J->res);
    J->res = NULL;
    if (st == SI_OK && complete)
        si_log_info("final step %.2f s: last flush and undo record %.2f, errors and detections "
                    "from the journal %.2f, ids %.2f, attributes, sync and rename %.2f",
                    si_now() - t, ft.begin, ft.records, ft.ids, ft.publish);
    if (st == SI_OK) print_summary(J, failed, images_done, si_now() - J->t_start, complete);
    if (st == SI_OK && !complete)
        st = si_error(SI_ERR_INTERRUPTED,
                      "interrupted: %llu of %llu images are done and flushed to %s.partial; "
                      "run the same command with --resume to finish",
                      (unsigned long long)images_done, (unsigned long long)J->n, J->cfg->output);
    if (st == SI_OK) st = si_job_check_errors(J->cfg, failed, J->n);
    return st;
}
