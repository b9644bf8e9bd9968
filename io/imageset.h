/* Reading an HDF5 image set in shardinfer's packed layout:
 *   /images/data     uint8 [total_bytes]  encoded files back to back, chunked
 *   /images/offsets  uint64 [N+1]         image i is data[offsets[i] .. offsets[i+1])
 *   /images/ids      variable-length UTF-8 string [N]
 *   /images/labels   int64 [N] (optional)
 * and the attributes of /images: format_version, count, source.
 * A set is opened by each rank on its own (serial HDF5, read-only); nothing here knows of ranks. */
#ifndef SI_IMAGESET_H
#define SI_IMAGESET_H

#include "base/common.h"

#define SI_PACK_FORMAT_VERSION 1

typedef struct si_imageset si_imageset;

/* Opens and validates the layout (datasets present, types and sizes consistent, offsets[0] == 0,
 * offsets[N] == size of data). On failure *out is NULL and the message names file and dataset. */
si_status si_imageset_open(const char *path, si_imageset **out);
/* Accepts NULL. */
void si_imageset_close(si_imageset *s);

uint64_t si_imageset_count(const si_imageset *s);
const char *si_imageset_path(const si_imageset *s); /* borrowed */

/* Reads the encoded bytes of images [first, first+n) with one hyperslab read of /images/data
 * into buf (grown as needed, never shrunk). off receives n+1 offsets relative to buf->data:
 * image j is buf->data[off[j] .. off[j+1]). Caller owns buf and off (n+1 entries). Offsets that
 * are not monotonic or point past the data are reported as SI_ERR_FORMAT naming the index. */
si_status si_imageset_read(si_imageset *s, uint64_t first, uint32_t n, si_bytes *buf,
                           uint64_t *off);

/* Reads ids [first, first+n) into ids[0..n); each string is malloc'ed, caller frees each with
 * free() (or all with si_imageset_free_ids). */
si_status si_imageset_read_ids(si_imageset *s, uint64_t first, uint32_t n, char **ids);
void si_imageset_free_ids(char **ids, uint32_t n);

#endif
