/* The output's lock: while a job writes RESULT.h5, RESULT.h5.lock holds an fcntl lock on its
 * open file description, which the kernel drops when the process dies (a killed job leaves no
 * stale lock), which NFS (through lockd) and Lustre (mounted with flock) honour across nodes,
 * and which names its holder (host, pid, start time) for the run that finds it taken. */
#ifndef SI_IO_LOCK_H
#define SI_IO_LOCK_H

#include "base/common.h"

typedef struct si_lock si_lock;

/* Takes the lock of `output` (*out owned by the caller, si_lock_release). SI_ERR_ARG naming the
 * holder when another process has it; on a file system without locks, a warning and a lock
 * that holds nothing. */
si_status si_lock_take(const char *output, si_lock **out);
/* Removes the lock file, then drops the lock (in that order: a run that opened the old file
 * meanwhile finds it gone and takes a new one). NULL is fine. */
void si_lock_release(si_lock *l);

#endif
