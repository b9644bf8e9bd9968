/* Ranks: start-up, node-local rank, contiguous shares, agreement on errors, and gathering each
 * rank's results to rank 0 with a check that every input index arrives exactly once.
 * Everything MPI lives here; the engine, io and pipeline never see a communicator. */
#ifndef SI_RANKS_H
#define SI_RANKS_H

#include <mpi.h>

#include "src/pipeline.h"

typedef struct {
    int rank, size;
    int local_rank, local_size; /* within the node (shared-memory communicator) */
    MPI_Comm comm;
} si_mpi;

/* MPI_Init (works as a singleton without mpirun), rank-aware logging, and an abort hook so that
 * a fatal error on any rank ends the whole job with MPI_Abort instead of leaving ranks hanging. */
si_status si_mpi_init(int *argc, char ***argv, si_mpi *m);
void si_mpi_finalize(void);

/* Contiguous, balanced share of n items for `rank` of `size`: the first n % size ranks take one
 * more. Any n (also n < size), no padding, no duplicates. */
void si_mpi_share(uint64_t n, int size, int rank, uint64_t *first, uint64_t *count);

/* Collective. Every rank passes its own status; all return the same: SI_OK if every rank was
 * fine, else the status of the lowest failing rank, whose message that rank alone prints (so a
 * bad file named on every rank is reported once). */
si_status si_mpi_agree(const si_mpi *m, si_status st);

/* Collective. Sends each rank's share to rank 0, which places rows by their index into the
 * arrays of `all` (n rows, allocated here on rank 0) and verifies that every index in [0, n)
 * arrived exactly once (SI_ERR_VERIFY with the first missing or duplicated index otherwise).
 * Statistics of every rank are gathered to stats_all (size entries, rank 0 only). */
si_status si_mpi_gather(const si_mpi *m, uint64_t n, int k, const si_share_result *mine,
                        si_share_result *all, si_share_result *stats_all);

/* Threads this rank should use: OMP_NUM_THREADS if set, else the CPUs it is bound to, shared
 * with the node's other ranks when they are not bound apart. */
int si_mpi_threads(const si_mpi *m);

#endif
