/* Streaming gather to rank 0 (see gather.h). Chunk messages are plain bytes of any length up to
 * INT_MAX; the receiver learns the length with a matched probe's count, so nothing is sized
 * ahead. Rank 0 never waits in a receive: a message larger than MPI's eager limit (a chunk of
 * 2,048 rows is 80 KB of ResNet-50's classes, 2 MB of CLIP's embeddings) moves only while its
 * sender calls MPI, between the sender's batches, and a blocking MPI_Recv after the probe held
 * rank 0's own pipeline that long (4 H200s, CLIP: rank 0 took 20,480 of 1,000,000 images, its
 * hooks 90% of its time). So each matched message gets an MPI_Imrecv that later polls test. */
#include "mpi/gather.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum { TAG_CHUNK = 41, TAG_FINAL = 42 };

/* rank 0: messages being received at once, at most one per sender, so that a rank's final
 * message is handed on after its chunks (matching keeps a sender's order, completion need not) */
#define RECV_INFLIGHT 8

struct si_gather {
    MPI_Comm comm;
    int rank, size;
    MPI_Request req[SI_GATHER_INFLIGHT];
    si_bytes buf[SI_GATHER_INFLIGHT]; /* senders: one per request */
    /* rank 0: the receives in flight, their buffers (kept for reuse), sources, tags, lengths */
    MPI_Request rreq[RECV_INFLIGHT];
    si_bytes rbuf[RECV_INFLIGHT];
    int rsrc[RECV_INFLIGHT], rtag[RECV_INFLIGHT], rlen[RECV_INFLIGHT];
    uint8_t *receiving; /* [size]: a receive from that rank is in flight */
    int next_src;       /* where the next round of probes starts (fairness) */
    int finished;
    uint64_t bytes;
};

si_gather *si_gather_create(const si_mpi *m) {
    si_gather *g = si_xcalloc(1, sizeof *g);
    g->comm = m->comm;
    g->rank = m->rank;
    g->size = m->size;
    for (int i = 0; i < SI_GATHER_INFLIGHT; i++) g->req[i] = MPI_REQUEST_NULL;
    for (int i = 0; i < RECV_INFLIGHT; i++) g->rreq[i] = MPI_REQUEST_NULL;
    g->receiving = si_xcalloc((size_t)m->size, 1);
    return g;
}

void si_gather_free(si_gather *g) {
    if (!g) return;
    for (int i = 0; i < SI_GATHER_INFLIGHT; i++) {
        if (g->req[i] != MPI_REQUEST_NULL) MPI_Wait(&g->req[i], MPI_STATUS_IGNORE);
        si_bytes_free(&g->buf[i]);
    }
    for (int i = 0; i < RECV_INFLIGHT; i++) { /* a job ending early: its senders are gone too */
        if (g->rreq[i] != MPI_REQUEST_NULL) {
            MPI_Cancel(&g->rreq[i]);
            MPI_Request_free(&g->rreq[i]);
        }
        si_bytes_free(&g->rbuf[i]);
    }
    free(g->receiving);
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

/* Rank 0: receives from senders that have none in flight, into free slots; whether one began. */
static bool start_receives(si_gather *g) {
    bool began = false;
    for (int k = 0; k < g->size - 1; k++) {
        int i = 0;
        while (i < RECV_INFLIGHT && g->rreq[i] != MPI_REQUEST_NULL) i++;
        if (i == RECV_INFLIGHT) break;
        const int src = 1 + (g->next_src + k) % (g->size - 1);
        if (g->receiving[src]) continue;
        int flag = 0, count = 0;
        MPI_Message msg;
        MPI_Status st;
        mpiCheck(MPI_Improbe(src, MPI_ANY_TAG, g->comm, &flag, &msg, &st));
        if (!flag) continue;
        if (st.MPI_TAG != TAG_CHUNK && st.MPI_TAG != TAG_FINAL)
            si_fatal(__FILE__, __LINE__, "si_gather_poll", "unexpected message tag %d from rank %d",
                     st.MPI_TAG, src);
        mpiCheck(MPI_Get_count(&st, MPI_BYTE, &count));
        if (si_bytes_reserve(&g->rbuf[i], (size_t)count + 8) != SI_OK)
            si_fatal(__FILE__, __LINE__, "si_gather_poll", "%s", si_error_msg());
        mpiCheck(MPI_Imrecv(g->rbuf[i].data, count, MPI_BYTE, &msg, &g->rreq[i]));
        g->rsrc[i] = src;
        g->rtag[i] = st.MPI_TAG;
        g->rlen[i] = count;
        g->receiving[src] = 1;
        began = true;
    }
    if (g->size > 1) g->next_src = (g->next_src + 1) % (g->size - 1);
    return began;
}

si_status si_gather_poll(si_gather *g, si_gather_fn fn, void *ctx) {
    SI_ASSERT(g->rank == 0);
    for (;;) {
        bool moved = start_receives(g);
        for (int i = 0; i < RECV_INFLIGHT; i++) {
            int done = 0;
            if (g->rreq[i] == MPI_REQUEST_NULL) continue;
            mpiCheck(MPI_Test(&g->rreq[i], &done, MPI_STATUS_IGNORE));
            if (!done) continue;
            moved = true;
            g->receiving[g->rsrc[i]] = 0;
            g->bytes += (uint64_t)g->rlen[i];
            int kind = g->rtag[i] == TAG_FINAL;
            g->finished += kind;
            si_status s = fn(ctx, g->rsrc[i], kind, g->rbuf[i].data, (size_t)g->rlen[i]);
            if (s != SI_OK) return s;
        }
        if (!moved) return SI_OK;
    }
}

int si_gather_finished(const si_gather *g) {
    return g->finished;
}
uint64_t si_gather_bytes(const si_gather *g) {
    return g->bytes;
}
