/* The streaming gather (mpi/gather.c) under mpirun with several ranks: every message of every
 * sender reaches rank 0 once, whole, each sender's final message after its chunks; and rank 0
 * never waits in a poll for a sender that is busy elsewhere. Each sender posts a message far over
 * MPI's eager limit, then stays out of MPI for a while (as a rank does while it decodes a batch);
 * a poll that waited for such a message (MPI_Recv after the probe: the message moves only while
 * its sender calls MPI, where the transport cannot pull it alone) held rank 0 that long. */
#include "mpi/gather.h"
#include "tests/test_util.h"

#include <string.h>
#include <time.h>

#define BIG    ((size_t)8 << 20) /* a large message: 8 MiB */
#define MSGS   6                 /* per sender, the first BIG */
#define AWAY_S 1.0               /* a sender's time out of MPI after its first message */

typedef struct {
    int size;
    int *seen;  /* [size]: chunk messages from each rank */
    int *final; /* [size]: the order at which each rank's final message came (its count then) */
    int bad;
} tally;

static uint8_t byte_at(int src, int k, size_t i) {
    return (uint8_t)(src * 31 + k * 7 + i * 13);
}

static si_status on_msg(void *ctx, int src, int kind, const uint8_t *msg, size_t len) {
    tally *t = ctx;
    if (kind == 1) {
        t->final[src] = t->seen[src];
        return SI_OK;
    }
    int k = t->seen[src]++;
    size_t want = k == 0 ? BIG : 1000 + (size_t)k;
    bool ok = len == want;
    for (size_t i = 0; ok && i < len; i += 4099) ok = msg[i] == byte_at(src, k, i);
    t->bad += !ok;
    return SI_OK;
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
    si_mpi m;
    si_mpi_init(&argc, &argv, &m);
    si_gather *g = si_gather_create(&m);
    if (m.rank != 0) {
        uint8_t *buf = malloc(BIG);
        for (int k = 0; k < MSGS; k++) {
            size_t len = k == 0 ? BIG : 1000 + (size_t)k;
            for (size_t i = 0; i < len; i++) buf[i] = byte_at(m.rank, k, i);
            si_gather_send(g, buf, len);
            if (k == 0) sleep_s(AWAY_S); /* busy elsewhere, out of MPI */
        }
        int fin = m.rank;
        si_gather_finish(g, &fin, sizeof fin);
        free(buf);
    } else {
        tally t = {.size = m.size};
        t.seen = calloc((size_t)m.size, sizeof(int));
        t.final = calloc((size_t)m.size, sizeof(int));
        double longest = 0, t0 = si_now();
        while (si_gather_finished(g) < m.size - 1 && si_now() - t0 < 60) {
            double a = si_now();
            CHECK(si_gather_poll(g, on_msg, &t) == SI_OK);
            double d = si_now() - a;
            if (d > longest) longest = d;
            sleep_s(0.001);
        }
        CHECK_MSG(si_gather_finished(g) == m.size - 1, "%d of %d final messages",
                  si_gather_finished(g), m.size - 1);
        for (int r = 1; r < m.size; r++) {
            CHECK_MSG(t.seen[r] == MSGS, "rank %d: %d of %d messages", r, t.seen[r], MSGS);
            CHECK_MSG(t.final[r] == MSGS, "rank %d: its final message after %d of its %d", r,
                      t.final[r], MSGS);
        }
        CHECK_MSG(t.bad == 0, "%d messages with wrong bytes", t.bad);
        CHECK_MSG(longest < AWAY_S / 4, "a poll waited %.3f s for a sender out of MPI", longest);
        printf("gather: %d senders x %d messages (the first %zu MiB), longest poll %.4f s\n",
               m.size - 1, MSGS, BIG >> 20, longest);
        free(t.seen);
        free(t.final);
    }
    si_gather_free(g);
    si_mpi_finalize();
    return m.rank == 0 ? test_finish() : 0;
}
