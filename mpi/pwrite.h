/* --writer parallel: every rank writes its own chunks' fixed-size rows straight into the partial
 * result with MPI-IO, instead of sending them to rank 0. The partial file's columns are
 * contiguous HDF5 datasets allocated at creation, so a row's place is the dataset's byte offset
 * (H5Dget_offset, looked up once by rank 0) plus index * row size, and no HDF5 call is needed to
 * write it. This works with any HDF5 build: Debian's MPI-IO-enabled HDF5 is not thread-safe,
 * which the reader thread needs, so HDF5's own MPI-IO driver is not used. Only the chunks' tails
 * (statuses, messages, detections) still go to rank 0, for the journal. Main thread only. */
#ifndef SI_PWRITE_H
#define SI_PWRITE_H

#include "mpi/ranks.h"
#include "pipeline/chunk.h"

typedef struct si_pwriter si_pwriter;

/* Collective. offsets: on rank 0, the byte offset of /status and of each of the plan's columns
 * in the partial file (n_cols + 1 values), broadcast from there. */
si_status si_pwriter_open(const si_mpi *m, const char *partial, const si_post_plan *plan,
                          const uint64_t *offsets, si_pwriter **w);
/* Writes chunk c's statuses and rows at their places and syncs them to disk; independent (a rank
 * writes when its chunk is done, without waiting for the others). Every piece's transferred
 * count is checked: SI_OK means every byte is written and synced, so the chunk may be journaled;
 * otherwise the message names the file and the OS error (a full disk: "No space left on device"). */
si_status si_pwriter_put(si_pwriter *w, const si_chunk *c);
uint64_t si_pwriter_bytes(const si_pwriter *w);
/* Collective. */
void si_pwriter_close(si_pwriter *w);

#endif
