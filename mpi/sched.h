/* Which chunks a rank computes. static: each rank takes a contiguous, balanced share of the
 * chunks still to do. dynamic: ranks claim the next chunk from a counter on rank 0 with MPI
 * one-sided atomics (MPI_Fetch_and_op), so a fast rank takes more. Either way each chunk is
 * handed out exactly once, and a chunk's results do not depend on who computed it, so the two
 * give identical outputs. A stop flag beside the counter lets one rank's signal end the claiming
 * on every rank. Called from the main thread only (MPI is initialised FUNNELED). */
#ifndef SI_SCHED_H
#define SI_SCHED_H

#include "mpi/ranks.h"

typedef enum { SI_SCHED_STATIC, SI_SCHED_DYNAMIC } si_sched_kind;

typedef struct si_sched si_sched;

/* Collective. done: a bitmap of n_chunks bits (bit c of byte c/8 set = chunk c is complete
 * already), the same on every rank; copied. */
si_status si_sched_create(const si_mpi *m, si_sched_kind kind, uint64_t n_chunks,
                          const uint8_t *done, si_sched **s);
/* The next chunk for this rank; false when there is none left or a stop was requested. */
bool si_sched_next(si_sched *s, uint64_t *chunk);
/* Asks every rank to stop claiming (one-sided, no matching call needed elsewhere). */
void si_sched_stop(si_sched *s);
/* Chunks this rank has been handed. */
uint64_t si_sched_claimed(const si_sched *s);
/* Collective. */
void si_sched_free(si_sched *s);

/* Chunks not yet done (pending), and the k-th of them (k < si_sched_pending_count): exposed for
 * tests. */
uint64_t si_sched_pending_count(const si_sched *s);
uint64_t si_sched_pending_at(const si_sched *s, uint64_t k);

#endif
