/* `shardinfer pack`: builds a packed HDF5 image set (see source.h) from a directory of JPEG
 * files, walked recursively in sorted order, or from a list file. Streams: memory does not grow
 * with the number of images (chunked, extendible datasets appended to in blocks). */
#ifndef SI_PACK_H
#define SI_PACK_H

#include "base/common.h"

/* Far above any real JPEG; a file over it is refused, so /dev/zero-like surprises end early. */
#define SI_PACK_DEFAULT_MAX_FILE_BYTES ((uint64_t)256 << 20)

typedef struct {
    const char *source; /* a directory, or a list file (one image per line, see below) */
    const char *output; /* the .h5 to create; refused if it exists unless overwrite */
    bool overwrite;
    size_t chunk_bytes;      /* chunk size of /images/data; 0 = default (1 MiB) */
    uint64_t max_file_bytes; /* per-file cap; 0 = SI_PACK_DEFAULT_MAX_FILE_BYTES */
    bool follow_links;       /* directory mode: also follow symlinks that leave the tree */
    /* NULL, or polled between files and blocks: nonzero (the signal number) asks pack to stop;
     * it then removes its temporary and returns SI_ERR_INTERRUPTED */
    int (*stop)(void);
} si_pack_opts;

/* List file lines: `PATH`, `PATH<TAB>ID` or `PATH<TAB>ID<TAB>LABEL`; blank lines and lines
 * starting with '#' are skipped; relative paths resolve against the list file's directory.
 * In directory mode ids are paths relative to the directory, and files whose names end in
 * .jpg/.jpeg (any case) are taken. Labels are stored only if every line of a list has one.
 *
 * Only regular files are read. Every file that should be packed but cannot be (unreadable, not
 * a regular file, over max_file_bytes, the output itself, or in directory mode a symlink whose
 * target leaves the tree without follow_links) fails the whole pack with one message naming
 * it. A symlink named in a list is the user's choice and is followed. */
typedef struct {
    uint64_t count;    /* images written */
    uint64_t bytes;    /* encoded bytes written */
    uint64_t not_jpeg; /* records without a JPEG SOI marker (stored anyway; run reports them) */
    double seconds;
} si_pack_stats;

/* Borrows o; fills *st. The output appears only when complete (a unique temporary beside it,
 * renamed); on any failure, including a stop request, no output or temporary is left. */
si_status si_pack(const si_pack_opts *o, si_pack_stats *st);

#endif
