/* Files the program makes or opens beside its output (RESULT.h5.partial, .journal, .lock, .undo
 * and their temporaries). The output's directory may be shared, and a file planted there under
 * such a name (a symbolic link to the user's ~/.bashrc, a FIFO, a hard link to another file)
 * must never be written through, nor block the run: a file is opened only as a regular file of
 * one link reached without following a symbolic link, and a file the program makes is made new
 * (O_EXCL) after what had its name is removed. */
#ifndef SI_IO_BESIDE_H
#define SI_IO_BESIDE_H

#include "base/common.h"

/* Opens the regular file path into *fd (caller closes) with open()'s flags: O_RDONLY, O_WRONLY
 * or O_RDWR, with O_APPEND, and O_CREAT to make it when absent (mode 0644). SI_ERR_ARG naming
 * the path when it is a symbolic link, not a regular file or a file of several links; SI_ERR_IO
 * with the system's words when it cannot be opened. */
si_status si_beside_open(const char *path, int flags, int *fd);
/* Makes path anew into *fd (caller closes): removes what has the name (a file of an earlier
 * run, or a planted link), then creates it exclusively with flags O_WRONLY or O_RDWR (with
 * O_APPEND), mode 0644. */
si_status si_beside_create(const char *path, int flags, int *fd);
/* For a file another library opens by name (HDF5): SI_OK when path does not exist or is a
 * regular file of one link that is not a symbolic link; SI_ERR_ARG naming it otherwise. */
si_status si_beside_check(const char *path);

#endif
