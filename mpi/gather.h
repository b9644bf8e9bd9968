/* Streaming gather: every rank sends each finished chunk to rank 0 as soon as it is complete, and
 * rank 0 takes them in whenever it polls, between its own batches. A sender keeps at most
 * SI_GATHER_INFLIGHT messages in flight and waits when all are (backpressure), so a rank's
 * memory is bounded whatever the number of images; rank 0 receives up to 8 messages at once, one
 * per sender, without ever waiting for one. At the end each rank sends one final message (its
 * statistics). Main thread only. */
#ifndef SI_GATHER_H
#define SI_GATHER_H

#include "mpi/ranks.h"

#define SI_GATHER_INFLIGHT 3

typedef struct si_gather si_gather;

/* A message that reached rank 0: kind 0 = a chunk, 1 = a rank's final message. The bytes are
 * borrowed for the call. */
typedef si_status (*si_gather_fn)(void *ctx, int src, int kind, const uint8_t *msg, size_t len);

si_gather *si_gather_create(const si_mpi *m);
void si_gather_free(si_gather *g);

/* rank != 0. Sends len bytes, copied into a send buffer; while every buffer is in flight it
 * waits for one to complete (rank 0 must be polling). */
void si_gather_send(si_gather *g, const void *msg, size_t len);
/* rank != 0. Lets the sends in flight progress; never waits. */
void si_gather_progress(si_gather *g);
/* rank != 0. Waits for every send, then sends the final message. */
void si_gather_finish(si_gather *g, const void *msg, size_t len);

/* rank 0. Receives every message that has arrived and hands each to fn; never waits for one.
 * Returns the first failure of fn (the rest of the messages stay queued). */
si_status si_gather_poll(si_gather *g, si_gather_fn fn, void *ctx);
/* rank 0: how many ranks have sent their final message. */
int si_gather_finished(const si_gather *g);
/* Bytes received (rank 0) or sent (others) so far. */
uint64_t si_gather_bytes(const si_gather *g);

#endif
