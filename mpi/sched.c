/* Static and dynamic chunk scheduling (see sched.h). The chunks still to do are kept as the done
 * bitmap plus a count of pending chunks before every block of 64 words, so that the k-th pending
 * chunk is found without a list of them: memory is n_chunks / 8 bytes plus 1/32 of that. */
#include "mpi/sched.h"

#include <stdlib.h>
#include <string.h>

#define BLOCK_WORDS 64 /* 4096 chunks per prefix entry */

struct si_sched {
    si_sched_kind kind;
    MPI_Comm comm;
    int rank;
    uint64_t n_chunks, n_pending;
    uint64_t *done;   /* bitmap as words */
    uint64_t *before; /* pending chunks before each block */
    uint64_t lo, hi;  /* static: this rank's pending positions [lo, hi) */
    uint64_t next;    /* static: the next position */
    uint64_t claimed;
    bool stopped;
    MPI_Win win;
    int64_t *base; /* rank 0: [0] the claim counter, [1] the stop flag */
};

static bool is_done(const si_sched *s, uint64_t c) {
    return s->done[c / 64] >> (c % 64) & 1;
}

uint64_t si_sched_pending_count(const si_sched *s) {
    return s->n_pending;
}

uint64_t si_sched_pending_at(const si_sched *s, uint64_t k) {
    SI_ASSERT(k < s->n_pending);
    uint64_t nb = (s->n_chunks + 64 * BLOCK_WORDS - 1) / (64 * BLOCK_WORDS);
    uint64_t lo = 0, hi = nb; /* the last block with before[b] <= k */
    while (hi - lo > 1) {
        uint64_t mid = (lo + hi) / 2;
        if (s->before[mid] <= k)
            lo = mid;
        else
            hi = mid;
    }
    uint64_t left = k - s->before[lo];
    for (uint64_t c = lo * 64 * BLOCK_WORDS; c < s->n_chunks; c++) {
        if (c % 64 == 0 && c + 64 <= s->n_chunks) { /* skip whole words */
            uint64_t free_bits = 64 - (uint64_t)__builtin_popcountll(s->done[c / 64]);
            if (free_bits <= left) {
                left -= free_bits;
                c += 63;
                continue;
            }
        }
        if (is_done(s, c)) continue;
        if (left-- == 0) return c;
    }
    si_fatal(__FILE__, __LINE__, "si_sched_pending_at", "position %llu not found",
             (unsigned long long)k);
    return 0;
}

si_status si_sched_create(const si_mpi *m, si_sched_kind kind, uint64_t n_chunks,
                          const uint8_t *done, si_sched **out) {
    si_sched *s = si_xcalloc(1, sizeof *s);
    s->kind = kind;
    s->comm = m->comm;
    s->rank = m->rank;
    s->n_chunks = n_chunks;
    uint64_t words = (n_chunks + 63) / 64, nb = (words + BLOCK_WORDS - 1) / BLOCK_WORDS;
    s->done = si_xcalloc(words + 1, sizeof *s->done);
    for (uint64_t c = 0; c < n_chunks; c++)
        if (done && (done[c / 8] >> (c % 8) & 1)) s->done[c / 64] |= 1ull << (c % 64);
    s->before = si_xcalloc(nb + 1, sizeof *s->before);
    uint64_t pending = 0;
    for (uint64_t w = 0; w < words; w++) {
        if (w % BLOCK_WORDS == 0) s->before[w / BLOCK_WORDS] = pending;
        uint64_t bits = w + 1 < words || n_chunks % 64 == 0 ? 64 : n_chunks % 64;
        pending += bits - (uint64_t)__builtin_popcountll(s->done[w]);
    }
    s->n_pending = pending;
    si_mpi_share(pending, m->size, m->rank, &s->lo, &s->hi);
    s->hi += s->lo;
    s->next = s->lo;
    /* the window: two counters on rank 0, nothing elsewhere */
    MPI_Aint bytes = m->rank == 0 ? 2 * sizeof(int64_t) : 0;
    mpiCheck(MPI_Win_allocate(bytes, sizeof(int64_t), MPI_INFO_NULL, m->comm, &s->base, &s->win));
    if (m->rank == 0) s->base[0] = s->base[1] = 0;
    mpiCheck(MPI_Barrier(m->comm)); /* the counters are zero before anyone claims */
    mpiCheck(MPI_Win_lock_all(MPI_MODE_NOCHECK, s->win));
    *out = s;
    return SI_OK;
}

static int64_t fetch_add(si_sched *s, int disp, int64_t add, MPI_Op op) {
    int64_t old = 0;
    mpiCheck(MPI_Fetch_and_op(&add, &old, MPI_INT64_T, 0, disp, op, s->win));
    mpiCheck(MPI_Win_flush(0, s->win));
    return old;
}

bool si_sched_next(si_sched *s, uint64_t *chunk) {
    if (s->stopped) return false;
    if (fetch_add(s, 1, 0, MPI_NO_OP) != 0) { /* someone asked to stop */
        s->stopped = true;
        return false;
    }
    uint64_t k;
    if (s->kind == SI_SCHED_STATIC) {
        if (s->next >= s->hi) return false;
        k = s->next++;
    } else {
        k = (uint64_t)fetch_add(s, 0, 1, MPI_SUM);
        if (k >= s->n_pending) return false;
    }
    *chunk = si_sched_pending_at(s, k);
    s->claimed++;
    return true;
}

void si_sched_stop(si_sched *s) {
    if (s->stopped) return;
    s->stopped = true;
    fetch_add(s, 1, 1, MPI_REPLACE);
}

uint64_t si_sched_claimed(const si_sched *s) {
    return s->claimed;
}

void si_sched_free(si_sched *s) {
    if (!s) return;
    mpiCheck(MPI_Win_unlock_all(s->win));
    mpiCheck(MPI_Win_free(&s->win));
    free(s->done);
    free(s->before);
    free(s);
}
