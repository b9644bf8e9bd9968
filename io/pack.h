/* `shardinfer pack`: builds a packed HDF5 image set (see imageset.h) from a directory of JPEG
 * files, walked recursively in sorted order, or from a list file. Streams: memory does not grow
 * with the number of images (chunked, extendible datasets appended to in blocks). */
#ifndef SI_PACK_H
#define SI_PACK_H

#include "base/common.h"

typedef struct {
    const char *source; /* a directory, or a list file (one image per line, see below) */
    const char *output; /* the .h5 to create; refused if it exists unless overwrite */
    bool overwrite;
    size_t chunk_bytes; /* chunk size of /images/data; 0 = default (1 MiB) */
} si_pack_opts;

/* List file lines: `PATH`, `PATH<TAB>ID` or `PATH<TAB>ID<TAB>LABEL`; blank lines and lines
 * starting with '#' are skipped; relative paths resolve against the list file's directory.
 * In directory mode ids are paths relative to the directory, and files whose names end in
 * .jpg/.jpeg (any case) are taken. Labels are stored only if every line of a list has one. */
typedef struct {
    uint64_t count;    /* images written */
    uint64_t bytes;    /* encoded bytes written */
    uint64_t not_jpeg; /* records without a JPEG SOI marker (stored anyway; run reports them) */
    double seconds;
} si_pack_stats;

si_status si_pack(const si_pack_opts *o, si_pack_stats *st);

#endif
