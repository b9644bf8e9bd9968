/* What the parts of an image source (io/source*.c) share: a source's state (the files, their
 * resolved dataset names and open handles) and the calls one part makes into another. The parts:
 * source.c (open, close, the open-file cache), source_probe.c (layout detection and the dataset
 * checks it needs), source_paths.c (the list of files a spec names), source_read.c (the readers)
 * and source_describe.c (`shardinfer inspect`). Not for use outside io/source*.c. */
#ifndef SI_SOURCE_INTERNAL_H
#define SI_SOURCE_INTERNAL_H

#include "io/h5util.h"
#include "io/source.h"

#include <hdf5.h>
#include <pthread.h>
#include <sys/stat.h>

/* HDF5's default (sec2) driver holds one file descriptor per open file, and a set split into
 * thousands of files would exceed the usual limit of 1024 descriptors. Files beyond this many
 * are closed, least recently used first, and reopened by their resolved dataset names. */
#define DEFAULT_MAX_OPEN 64
#define DESCRIBE_SAMPLE  1000 /* images whose encoded size inspect samples */
#define DESCRIBE_FILES   5    /* file names inspect lists */
#define MAX_CANDIDATES   8    /* dataset names kept for the "several candidates" message */
/* A chunked dataset is read a whole chunk at a time (decompressed, then cut), so one chunk is
 * the least a read of one image costs in time and memory: larger chunks are refused at open
 * (a 4 MB file can declare 1 GiB chunks of zeros). The chunk caches (per dataset, per open
 * file) are bounded too: a chunk that does not fit is decompressed again by the next read. */
#define MAX_CHUNK_BYTES   ((size_t)64 << 20)
#define DATA_CACHE_BYTES  ((size_t)16 << 20) /* the images' dataset */
#define INDEX_CACHE_BYTES ((size_t)64 << 20) /* offsets and ids: a batch's worth is small */
#define READ_RETRIES      3 /* a read that meets an I/O error is retried on a reopened file */

enum { IDS_INDEX = 0, IDS_VSTR, IDS_FSTR, IDS_INT };
enum { DENSE_UNDECIDED = -1 }; /* a 4-D dataset found, the order of its axes not yet known */

typedef struct {
    char *path;
    int line;        /* line in the list file, 0 otherwise: for messages */
    hsize_t dims[4]; /* dense: the data dataset's dims when first opened */
    uint64_t start;  /* global index of this file's first image */
    uint64_t n;      /* images */
    char *data_name; /* resolved at open, so a reopen needs no detection */
    char *offsets_name;
    char *ids_name; /* NULL: ids are the global index */
    int ids_kind;
    size_t ids_size; /* fixed-length strings: bytes per id */
    H5T_cset_t ids_cset;
    H5T_sign_t ids_sign;
    char *dir;      /* the real path of its directory: what --allow-external confines to */
    uint64_t total; /* packed: bytes in the data dataset */
    /* open state: is_open counts in s->nopen from the first handle tried to the close */
    bool is_open;
    hid_t file, data, offsets, ids;
    uint64_t last_use;
    struct stat id; /* the file as first opened: a read checks it is still that file */
} src_file;

struct si_source {
    char *spec;
    char *origin; /* "list file", "directory", "pattern" or "file": for describe */
    int layout;
    bool forced, ambiguous;
    int h, w, c; /* dense pixel shape */
    src_file *files;
    int nfiles;
    uint64_t total;
    int max_open, nopen;
    uint64_t tick;
    uint64_t max_record; /* bytes: a record declaring more is not read (too_large) */
    bool allow_external; /* external storage inside a file's own directory is followed */
    hid_t vlen_u8;       /* memory type of one encoded record */
    hid_t vlen_ref;      /* memory type of a vlen record's reference, not its bytes (h5util.h) */
    si_h5_guard guard;   /* asked before an external link is followed (h5util.h) */
    char fault[256];     /* the system's words for an I/O error met while opening (src_fault) */
    hid_t dapl;          /* every dataset and link access goes through it: carries the guard */
    /* variable-length reads (records, id strings) allocate through `live`, which holds every
     * buffer HDF5 made and has not freed, so that what a failed read left is freed, never
     * leaked nor freed twice */
    hid_t vl_dxpl;
    struct {
        void **p;
        size_t n, cap;
    } live;
    hvl_t *vl; /* per-read scratch, reused: the per-batch path allocates nothing */
    size_t vl_cap;
    si_bytes scratch;     /* NCHW transposes, fixed-length ids */
    si_bytes one;         /* one record, when a batch read failed and images are read one by one */
    uint64_t *big;        /* [big_cap]: declared sizes of records over the cap, per image */
    si_h5_vlen_ref *refs; /* [big_cap]: vlen records' and ids' references */
    bool *fine;           /* [big_cap]: which of them lead to their bytes */
    uint32_t big_cap;
    /* held by si_source_read and si_source_read_ids: the reader thread reads images while the
     * main thread reads a failed image's id for its message, and both use scratch, vl and the
     * open-file cache */
    pthread_mutex_t mu;
};

enum { CAND_NONE = 0, CAND_VLEN, CAND_DENSE }; /* what src_classify finds */

static inline bool src_is_dense(int layout) {
    return layout == SI_LAYOUT_DENSE_NHWC || layout == SI_LAYOUT_DENSE_NCHW;
}

/* --- source_probe.c: dataset checks and layout detection --- */

/* Whether every component of name exists in file (H5Lexists alone fails on a missing middle).
 * An external link is not followed (a dataset behind one is refused when opened). */
bool src_path_exists(si_source *s, hid_t file, const char *name);
/* A type description ("uint8", "variable-length int32", ...) written into b. */
void src_type_str(hid_t t, char *b, size_t cap);
bool src_is_u8(hid_t t);
/* Rank (or -1) and up to 4 dims of dataset d. */
int src_dims_of(hid_t d, hsize_t dims[4]);
/* CAND_VLEN, CAND_DENSE or CAND_NONE for dataset d; why gets its description, *near (may be
 * NULL) whether it looks like what a user meant as images. */
int src_classify(hid_t d, char *why, size_t cap, bool *near);
/* Finds out the layout of f (or checks the forced one), resolves its dataset names and opens it.
 * *layout: in, the wanted layout (AUTO or forced); out, the one found. dense shape in dd. */
si_status src_probe(si_source *s, src_file *f, const si_source_opts *o, int *layout, hsize_t dd[4]);

/* --- source.c: opening files, the open-file cache --- */

/* Opens path (a regular file) read-only into *fid, with a message for each way it can fail. */
si_status src_h5_open(const char *path, hid_t *fid);
/* Opens dataset `name` of f's open file into *d, after checking that every byte of it comes from
 * the file itself (or, with allow_external, from files in its own directory: h5util.h) and that
 * its chunks are within MAX_CHUNK_BYTES; the chunk cache holds up to cache_bytes. */
si_status src_open_dataset(si_source *s, const src_file *f, const char *name, size_t cache_bytes,
                           hid_t *d);
/* Right after an HDF5 call of opening failed: whether the storage failed under it (EIO), its
 * words then in s->fault. src_io_error makes the message of such a failure, naming f: an I/O
 * error, not a file that "has no dataset". */
bool src_fault(si_source *s);
si_status src_io_error(const si_source *s, const src_file *f, const char *what);
/* The transfer list of variable-length reads (s->vl_dxpl) and the end of one: frees every buffer
 * HDF5 handed out (keep false: after a failure or once copied), or keeps them as the caller's
 * (the id strings of a read that worked). */
hid_t src_vl_dxpl(si_source *s);
void src_vl_done(si_source *s, bool keep);
/* Points the source's guard at f's directory (every access to f goes through it). */
si_status src_guard_file(si_source *s, const src_file *f);
void src_mark_open(si_source *s, src_file *f);
void src_close_handles(si_source *s, src_file *f);
/* Opens the datasets of f by the names probe resolved and checks them; n_expected is UINT64_MAX
 * on the first open, else the image count seen then. */
si_status src_open_handles(si_source *s, src_file *f, int layout, uint64_t n_expected);
/* Closes the least recently used open files until fewer than max_open are open, sparing keep. */
void src_evict(si_source *s, const src_file *keep);
/* Makes sure f is open (reopening it if evicted). */
si_status src_touch(si_source *s, src_file *f);
/* SI_ERR_FAULT, naming what changed, when f's path is no longer the file first opened (another
 * size, inode or modification time: truncated, replaced, rewritten). After every read, so that
 * bytes read from a changed file never reach an image's status. */
si_status src_check_unchanged(const src_file *f);

/* --- source_paths.c: the files a spec names --- */

typedef struct {
    char **paths;
    int *lines;
    int n, cap;
} src_path_list;

/* Expands spec (a file, a list file, a directory or a glob pattern) into files; *origin gets
 * which of those spec was. The caller frees l with src_list_free, also on failure. */
si_status src_expand(const char *spec, src_path_list *l, const char **origin);
void src_list_free(src_path_list *l);

#endif
