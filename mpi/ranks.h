/* Ranks: start-up, node-local rank, contiguous shares, agreement on errors. Everything MPI lives
 * in mpi/ (ranks, sched: who computes what, gather: results to rank 0); the engine, io and
 * pipeline never see a communicator. */
#ifndef SI_RANKS_H
#define SI_RANKS_H

#include <mpi.h>

#include "base/common.h"

/* one checking macro for MPI calls: a failure here is a broken invariant of the job */
#define mpiCheck(call)                                                                             \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS) {                                                                  \
            char s_[MPI_MAX_ERROR_STRING];                                                         \
            int l_ = 0;                                                                            \
            MPI_Error_string(rc_, s_, &l_);                                                        \
            si_fatal(__FILE__, __LINE__, #call, "%s", s_);                                         \
        }                                                                                          \
    } while (0)

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

/* Collective: whether `mine` holds on every rank (nothing printed). */
bool si_mpi_all(const si_mpi *m, bool mine);

/* Threads this rank should use: OMP_NUM_THREADS if set, else the CPUs it is bound to, shared
 * with the node's other ranks when they are not bound apart. */
int si_mpi_threads(const si_mpi *m);

#endif
