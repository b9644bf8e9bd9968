/* Streaming gather to rank 0 (see gather.h). Chunk messages are plain bytes of any length up to
 * INT_MAX; the receiver learns the length with MPI_Probe's count, so nothing is sized ahead. */
#include "mpi/gather.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum { TAG_CHUNK = 41, TAG_FINAL = 42 };

struct si_gather {
    MPI_Comm comm;
    int rank;
    MPI_Request req[SI_GATHER_INFLIGHT];
    si_bytes buf[SI_GATHER_INFLIGHT]; /* senders: one per request; rank 0: buf[0] receives */
    int finished;
    uint64_t bytes;
};

si_gather *si_gather_create(const si_mpi *m) {
    si_gather *g = si_xcalloc(1, sizeof *g);
    g->comm = m->comm;
    g->rank = m->rank;
    for (int i = 0; i < SI_GATHER_INFLIGHT; i++) g->req[i] = MPI_REQUEST_NULL;
    return g;
}

void si_gather_free(si_gather *g) {
    if (!g) return;
    for (int i = 0; i < SI_GATHER_INFLIGHT; i++) {
        if (g->req[i] != MPI_REQUEST_NULL) MPI_Wait(&g->req[i], MPI_STATUS_IGNORE);
        si_bytes_free(&g->buf[i]);
    }
    free(g);
}

static void post(si_gather *g, int tag, const void *msg, size_t len) {
    SI_ASSERT(g->rank != 0 && len <= INT_MAX);
    int i = 0, done = 0;
    while (i < SI_GATHER_INFLIGHT && g->req[i] != MPI_REQUEST_NULL) i++;
    if (i == SI_GATHER_INFLIGHT) { /* completed ones first, else wait for one (backpressure) */
        mpiCheck(MPI_Testany(SI_GATHER_INFLIGHT, g->req, &i, &done, MPI_STATUS_IGNORE));
        if (!done) mpiCheck(MPI_Waitany(SI_GATHER_INFLIGHT, g->req, &i, MPI_STATUS_IGNORE));
    }
    if (si_bytes_reserve(&g->buf[i], len) != SI_OK)
        si_fatal(__FILE__, __LINE__, "si_gather_send", "%s", si_error_msg());
    memcpy(g->buf[i].data, msg, len);
    mpiCheck(MPI_Isend(g->buf[i].data, (int)len, MPI_BYTE, 0, tag, g->comm, &g->req[i]));
    g->bytes += len;
}

void si_gather_send(si_gather *g, const void *msg, size_t len) {
    post(g, TAG_CHUNK, msg, len);
}

void si_gather_progress(si_gather *g) {
    int flag;
    mpiCheck(MPI_Testall(SI_GATHER_INFLIGHT, g->req, &flag, MPI_STATUSES_IGNORE));
}

void si_gather_finish(si_gather *g, const void *msg, size_t len) {
    mpiCheck(MPI_Waitall(SI_GATHER_INFLIGHT, g->req, MPI_STATUSES_IGNORE));
    post(g, TAG_FINAL, msg, len);
    mpiCheck(MPI_Waitall(SI_GATHER_INFLIGHT, g->req, MPI_STATUSES_IGNORE));
}

si_status si_gather_poll(si_gather *g, si_gather_fn fn, void *ctx) {
    SI_ASSERT(g->rank == 0);
    for (;;) {
        int flag = 0;
        MPI_Status st;
        mpiCheck(MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, g->comm, &flag, &st));
        if (!flag) return SI_OK;
        if (st.MPI_TAG != TAG_CHUNK && st.MPI_TAG != TAG_FINAL)
            si_fatal(__FILE__, __LINE__, "si_gather_poll", "unexpected message tag %d from rank %d",
                     st.MPI_TAG, st.MPI_SOURCE);
        int count = 0;
        mpiCheck(MPI_Get_count(&st, MPI_BYTE, &count));
        if (si_bytes_reserve(&g->buf[0], (size_t)count + 8) != SI_OK)
            si_fatal(__FILE__, __LINE__, "si_gather_poll", "%s", si_error_msg());
        mpiCheck(MPI_Recv(g->buf[0].data, count, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, g->comm,
                          MPI_STATUS_IGNORE));
        g->bytes += (uint64_t)count;
        int kind = st.MPI_TAG == TAG_FINAL;
        g->finished += kind;
        si_status s = fn(ctx, st.MPI_SOURCE, kind, g->buf[0].data, (size_t)count);
        if (s != SI_OK) return s;
    }
}

int si_gather_finished(const si_gather *g) {
    return g->finished;
}
uint64_t si_gather_bytes(const si_gather *g) {
    return g->bytes;
}
