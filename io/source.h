/* Image sources: every HDF5 layout users store images in, seen as one index space.
 *   packed      shardinfer's own, written by `shardinfer pack`:
 *                 /images/data     uint8 [total_bytes]  encoded files back to back, chunked
 *                 /images/offsets  uint64 [N+1]         image i is data[offsets[i] .. offsets[i+1])
 *                 /images/ids      variable-length UTF-8 string [N]
 *               and the attributes of /images: format_version, count, source; other dataset
 *               names with --data-dataset/--offsets-dataset/--ids-dataset
 *   vlen        a 1-D dataset of variable-length uint8 (h5py.vlen_dtype(np.uint8)): one
 *               encoded file per element, as Python users usually store JPEGs
 *   dense-nhwc  uint8 [N, H, W, C] (C = 1 or 3) pre-decoded pixels: no JPEG at all
 *   dense-nchw  uint8 [N, C, H, W]
 * Any of them chunked and/or gzip-compressed (HDF5 filters are transparent to reads). A set may
 * span many files: a list file (one .h5 path per line), a glob pattern, or a directory (every
 * *.h5 / *.hdf5 inside, sorted) is one source whose indices run through the files in order.
 * Nothing here knows of ranks; each rank opens its own source (serial HDF5, read-only). */
#ifndef SI_SOURCE_H
#define SI_SOURCE_H

#include <stdio.h>

#include "base/common.h"

#define SI_PACK_FORMAT_VERSION 1
/* A record (one encoded image) declaring more bytes than this is not read: its image gets
 * too_large. Far above any real JPEG; a crafted set declares terabytes in a 4 MB file. */
#define SI_SOURCE_MAX_RECORD (256ull << 20)

/* (named si_src_kind: a type called si_source_kind would collide with the function below) */
typedef enum { SI_SRC_ENCODED = 0, SI_SRC_PIXELS } si_src_kind;

typedef enum {
    SI_LAYOUT_AUTO =
        0, /* detect: /images/offsets -> packed; vlen uint8 -> vlen; 4-D uint8 -> dense */
    SI_LAYOUT_PACKED,
    SI_LAYOUT_VLEN,
    SI_LAYOUT_DENSE_NHWC,
    SI_LAYOUT_DENSE_NCHW
} si_layout;

typedef struct {
    int layout;                  /* si_layout */
    const char *data_dataset;    /* the images: default per layout (/images/data, or the only
                                    vlen-uint8 / 4-D uint8 dataset found) */
    const char *ids_dataset;     /* string ids: default /images/ids if present; else ids are
                                    the global index in decimal */
    const char *offsets_dataset; /* packed only: default /images/offsets */
    uint64_t max_record;         /* bytes; 0: SI_SOURCE_MAX_RECORD */
    /* HDF5 can take a dataset's bytes from other files (external links, external raw storage,
     * virtual datasets). Refused unless allowed, and then only files inside the directory of
     * the file that names them, never outside it. */
    bool allow_external;
} si_source_opts;

typedef struct si_source si_source;

/* Opens `spec`: an HDF5 file, a list file of HDF5 paths, a glob pattern or a directory. Every
 * file must have the same layout (and, for dense, the same H, W, C). opts may be NULL (all
 * defaults). On failure *out is NULL and the message names the file and dataset. */
si_status si_source_open(const char *spec, const si_source_opts *opts, si_source **out);
void si_source_close(si_source *s); /* accepts NULL */

uint64_t si_source_count(const si_source *s);
int si_source_kind(const si_source *s);         /* si_src_kind */
int si_source_layout(const si_source *s);       /* the detected si_layout */
int si_source_files(const si_source *s);        /* number of files */
const char *si_source_spec(const si_source *s); /* borrowed */
/* Dense sources: pixel size; returns false for encoded sources. */
bool si_source_pixel_shape(const si_source *s, int *h, int *w, int *c);

/* Reads images [first, first+n) into buf (grown, never shrunk); off gets n+1 offsets relative to
 * buf->data, image j being buf->data[off[j] .. off[j+1]). Encoded sources give the encoded bytes
 * (one hyperslab read per file the range touches for packed sets); dense sources give uint8
 * pixels in HWC order (NCHW is transposed here), H*W*C bytes each. A record declaring more than
 * the record cap is not read: its span is empty and big[j] gets its declared size (0 for the
 * others; big may be NULL when the caller wants such a record to fail the call). A record that
 * cannot be read makes the whole call fail with a message naming the file and index (the caller
 * then retries image by image); an I/O error of the storage that persists after the file is
 * reopened and the read retried is SI_ERR_FAULT (no image is to blame). Caller owns buf, off
 * and big. */
si_status si_source_read(si_source *s, uint64_t first, uint32_t n, si_bytes *buf, uint64_t *off,
                         uint64_t *big);

/* One batch as a run reads it: the one read of si_source_read, and where it fails for an
 * image's own sake, image by image, so that a bad record costs only itself. status[j] gets
 * SI_IMG_OK, SI_IMG_READ_ERROR or SI_IMG_TOO_LARGE, msg + j * msg_len (msg_len bytes each) why
 * for the others, and hash[j] the image's si_source_hash (a stand-in derived from its declared
 * size or its failure for the others), so that what a run read can be checked against the input
 * later; with ok_hashes false the SI_IMG_OK records' hashes are left to the caller (each is
 * si_source_hash over its bytes), so that a reader thread can hand that work to others. Returns
 * SI_OK, or SI_ERR_FAULT (message set) for a fault of the storage or the machine that no image
 * is charged with. Caller owns everything. */
si_status si_source_read_batch(si_source *s, uint64_t first, uint32_t n, si_bytes *buf,
                               uint64_t *off, int32_t *status, char *msg, size_t msg_len,
                               uint32_t *hash, bool ok_hashes);

/* The content hash of one record as si_source_read_batch takes it (XXH3, 32 bits). */
uint32_t si_source_hash(const uint8_t *p, size_t len);

/* Who the files are: a hash of each file's device, inode, size, modification and change times.
 * Equal identities mean the files were not touched since; a different one means they may have
 * been (a copy, an edit, a re-export, an mtime set back) and what a run read must be checked
 * against them again. */
uint64_t si_source_identity(const si_source *s);

/* File i (< si_source_files) of the source: its path as given (borrowed) and its stat at open. */
const char *si_source_file_path(const si_source *s, int i);
bool si_source_file_is(const si_source *s, int i, uint64_t dev, uint64_t ino);

/* A cheap fingerprint of the set (which set a partial result or a merged part was made from;
 * what a resumed run read is checked image by image, io/tail.h): the image count, the ids of 64
 * images spread evenly over it and the bytes of the first 64 (spread ones would each read whole
 * chunks of their own: a dense set chunked by h5py's defaults, (3125, 7, 14, 1) for 224x224
 * photos, reads 470 MB for one image), FNV-1a hashed, into *fp. A record that cannot
 * be read counts as its error message; a fault of the storage stops it: SI_ERR_FAULT, message
 * set. */
si_status si_source_fingerprint(si_source *s, uint64_t *fp);

/* Reads ids [first, first+n); each string malloc'ed, caller frees with si_source_free_ids. */
si_status si_source_read_ids(si_source *s, uint64_t first, uint32_t n, char **ids);
void si_source_free_ids(char **ids, uint32_t n);

/* Layout names as the command line spells them: auto, packed, vlen, dense-nhwc, dense-nchw.
 * si_source_layout_name returns a static string ("unknown" for a bad value); parse returns
 * SI_ERR_ARG (message set) for an unknown name. */
const char *si_source_layout_name(int layout);
si_status si_source_layout_parse(const char *name, int *layout);

/* At most max_open files of s stay open (default 64; HDF5 holds a file descriptor per open
 * file); the least recently used are closed and reopened when read again. */
void si_source_set_max_open(si_source *s, int max_open);

/* `shardinfer inspect SET.h5`: files, layout, datasets (type, shape, chunking, filters), count,
 * ids, encoded-size statistics of a sample, pixel shape for dense sets. */
si_status si_source_describe(si_source *s, FILE *out);

#endif
