/* An undo record for a file about to be changed in place, where the change leaves known byte
 * ranges alone: the result's final step adds datasets and attributes to the partial HDF5 file
 * (HDF5 rewrites its metadata in place, so a process killed meanwhile can leave a file HDF5
 * cannot open) but never touches the rows, which are nearly all of it. So the record holds only
 * the bytes outside the rows (kilobytes) and the file's size; written back, they return the file
 * to the state the change began from, bit for bit, and the change can be made again. */
#ifndef SI_IO_UNDO_H
#define SI_IO_UNDO_H

#include <stdbool.h>

#include "base/common.h"

typedef struct {
    uint64_t off, len;
} si_span;

/* Saves the bytes of `path` outside the n `keep` spans, and its size, to undo_path. Written to
 * undo_path.tmp, synced, then renamed: undo_path exists only whole. Borrows everything. */
si_status si_undo_save(const char *path, const char *undo_path, const si_span *keep, int n);
/* When undo_path exists: writes its bytes back into `path`, truncates `path` to the saved size,
 * syncs it and removes undo_path (*restored = true). A leftover undo_path.tmp (the save was cut
 * short, so the change never began) is removed. A record that does not check out is an error:
 * the file is left as it is. */
si_status si_undo_restore(const char *path, const char *undo_path, bool *restored);
/* The change is complete: removes undo_path. */
void si_undo_drop(const char *undo_path);
/* fsync of the directory holding `path`, so that a rename or unlink in it is durable. */
si_status si_sync_dir_of(const char *path);

#endif
