/* Rank 0's writer thread (job_internal.h): a queue of a few chunk copies, main thread -> writer,
 * and the thread that puts them into the result and flushes it. Every entry's buffer is kept and
 * reused, so the steady state allocates nothing. One mutex and one condition variable guard the
 * queue's head, count and the failure; an entry's bytes belong to whichever side holds it (the
 * main thread from the tail of the queue until it counts the entry in, the thread from the head
 * until it takes the entry out). */
#include <hdf5.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "job/signals.h"
#include "job_internal.h"

#define WRITER_SLOTS 8
/* the rows the queue may hold: 64 MiB keeps 8 entries for chunks of 8 MiB of rows and at least
 * 2 for the largest ones (si_job_chunk_size caps a chunk's rows at 256 MB) */
#define WRITER_QUEUE_BYTES ((size_t)64 << 20)
/* how often an idle thread looks at the clock (the flush interval) and for a stop signal */
#define WRITER_TICK_NS 20000000L

typedef struct {
    si_bytes buf; /* the rows (padded to 8), then the tail (8-aligned: io/tail.h) */
    bool rows;    /* false: the rank wrote its rows itself (--writer parallel) */
    size_t tail_at, tail_len;
    const char *what; /* the step, for a failure's message; static */
} entry;

struct si_writer {
    si_result *res; /* the thread's until si_writer_close */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* an entry counted in or taken out, closing, a failure */
    entry q[WRITER_SLOTS];
    int depth, head, count; /* under mu */
    bool closing;           /* under mu */
    si_status st;           /* under mu: the thread's first failure; it writes nothing after */
    const char *what;       /* under mu, with st */
    char err[1024];         /* under mu, with st */
    atomic_uint_fast64_t images_done;
    bool flushed_on_signal; /* the thread's */
    int slow_ms;            /* tests */
    double t_start;
    si_writer_stats stats; /* busy, flush, chunks: the thread's; the rest the main thread's */
};

/* Thread: records the first failure (the message from this thread's error buffer) and wakes a
 * main thread waiting for room. */
static void fail(si_writer *w, si_status st, const char *what) {
    pthread_mutex_lock(&w->mu);
    if (w->st == SI_OK) {
        w->st = st;
        w->what = what;
        snprintf(w->err, sizeof w->err, "%s", si_error_msg());
    }
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Thread: flushes when the interval has passed; at once the first time a stop signal is seen (a
 * signal may be followed by SIGKILL: what is finished goes to disk now). */
static si_status flush(si_writer *w) {
    bool force = si_signals_stop() != 0 && !w->flushed_on_signal;
    w->flushed_on_signal |= force;
    double t = si_now();
    si_status st = si_result_flush(w->res, force);
    double dt = si_now() - t;
    w->stats.busy += dt;
    if (dt > 1e-4) w->stats.flush += dt; /* a flush that was not due returns at once */
    return st;
}

/* Thread: one queued chunk into the result. */
static si_status put(si_writer *w, const entry *e) {
    double t = si_now();
    if (w->slow_ms > 0)
        nanosleep(&(struct timespec){w->slow_ms / 1000, (long)(w->slow_ms % 1000) * 1000000L},
                  NULL);
    si_status st =
        si_result_put(w->res, e->rows ? e->buf.data : NULL, e->buf.data + e->tail_at, e->tail_len);
    atomic_store(&w->images_done, si_result_images_done(w->res));
    w->stats.busy += si_now() - t;
    w->stats.chunks++;
    return st;
}

/* Under mu. Tests (slow_ms): nothing is written until the main thread has found the queue full,
 * so that it waits for room however fast or slow the machine is. */
static bool held(const si_writer *w) {
    return w->slow_ms > 0 && !w->stats.full && !w->closing;
}

/* Thread: the head entry, waiting up to a tick for one; NULL when there is none (*stop: none
 * will come). */
static entry *next(si_writer *w, bool *stop) {
    pthread_mutex_lock(&w->mu);
    if ((!w->count || held(w)) && !w->closing) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += WRITER_TICK_NS;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&w->cv, &w->mu, &ts);
    }
    entry *e = w->count && !held(w) ? &w->q[w->head] : NULL;
    *stop = !e && w->closing;
    pthread_mutex_unlock(&w->mu);
    return e;
}

static void *writer_main(void *arg) {
    si_writer *w = arg;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* HDF5's error printing is per thread */
    for (;;) {
        bool stop;
        entry *e = next(w, &stop);
        if (stop) return NULL;
        si_status st = e ? put(w, e) : SI_OK;
        if (st != SI_OK) {
            fail(w, st, e->what);
            return NULL;
        }
        if ((st = flush(w)) != SI_OK) {
            fail(w, st, "rank 0: cannot write the results");
            return NULL;
        }
        if (!e) continue;
        pthread_mutex_lock(&w->mu);
        w->head = (w->head + 1) % w->depth;
        w->count--;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
}

si_writer *si_writer_start(si_result *res, size_t chunk_rows, int slow_ms) {
    si_writer *w = si_xcalloc(1, sizeof *w);
    w->res = res;
    size_t fit = WRITER_QUEUE_BYTES / (chunk_rows + 1);
    w->depth = fit < 2 ? 2 : fit > WRITER_SLOTS ? WRITER_SLOTS : (int)fit;
    w->stats.depth = w->depth;
    w->t_start = si_now();
    w->slow_ms = slow_ms;
    atomic_init(&w->images_done, si_result_images_done(res));
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, writer_main, w) != 0)
        si_fatal(__FILE__, __LINE__, "pthread_create", "rank 0's writer thread");
    return w;
}

/* Under mu: the thread's failure, its message put into the calling thread's error buffer. */
static si_status failure(const si_writer *w, const char **what) {
    if (what) *what = w->what;
    return w->st == SI_OK ? SI_OK : si_error(w->st, "%s", w->err);
}

/* Main thread: fills e with copies of rows and tail. */
static si_status fill(entry *e, const uint8_t *rows, size_t rows_len, const uint8_t *tail,
                      size_t tail_len, const char *what) {
    size_t at = rows ? (rows_len + 7) & ~(size_t)7 : 0;
    si_status st = si_bytes_reserve(&e->buf, at + tail_len);
    if (st != SI_OK) return st;
    if (rows) memcpy(e->buf.data, rows, rows_len);
    memcpy(e->buf.data + at, tail, tail_len);
    e->rows = rows != NULL;
    e->tail_at = at;
    e->tail_len = tail_len;
    e->what = what;
    return SI_OK;
}

si_status si_writer_put(si_writer *w, const uint8_t *rows, size_t rows_len, const uint8_t *tail,
                        size_t tail_len, const char *what) {
    pthread_mutex_lock(&w->mu);
    if (w->count == w->depth && w->st == SI_OK) { /* counted in the hook's write time too */
        double t = si_now();
        w->stats.full++;
        pthread_cond_broadcast(&w->cv); /* for a held thread (tests) */
        while (w->count == w->depth && w->st == SI_OK) pthread_cond_wait(&w->cv, &w->mu);
        w->stats.waited += si_now() - t;
    }
    si_status st = failure(w, NULL);
    /* the entry after the last is the main thread's: the thread reads only [head, head+count) */
    entry *e = &w->q[(w->head + w->count) % w->depth];
    pthread_mutex_unlock(&w->mu);
    if (st == SI_OK) st = fill(e, rows, rows_len, tail, tail_len, what);
    if (st != SI_OK) return st;
    pthread_mutex_lock(&w->mu);
    w->count++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return SI_OK;
}

si_status si_writer_check(si_writer *w, const char **what) {
    pthread_mutex_lock(&w->mu);
    si_status st = failure(w, what);
    pthread_mutex_unlock(&w->mu);
    return st;
}

uint64_t si_writer_images_done(si_writer *w) {
    return atomic_load(&w->images_done);
}

si_status si_writer_close(si_writer *w, si_writer_stats *stats, const char **what) {
    if (!w) return SI_OK;
    double t = si_now();
    pthread_mutex_lock(&w->mu);
    w->closing = true; /* the thread writes what is queued, then ends */
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    w->stats.drain = si_now() - t;
    w->stats.alive = si_now() - w->t_start;
    si_status st = failure(w, what);
    if (stats) *stats = w->stats;
    for (int i = 0; i < WRITER_SLOTS; i++) si_bytes_free(&w->q[i].buf);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
    return st;
}
