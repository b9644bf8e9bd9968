/* Small HDF5 helpers shared by the io/ modules that write or read strings and attributes. */
#ifndef SI_H5UTIL_H
#define SI_H5UTIL_H

#include <hdf5.h>
#include <stdbool.h>

#include "base/common.h"

/* A variable-length UTF-8 string type; caller closes it with H5Tclose. */
hid_t si_h5_utf8_type(void);
/* IEEE 754 half, little-endian (numpy's float16): the file and memory type of a float16
 * column, whose values are in memory as the bits src/base/half.h makes. Caller closes it with
 * H5Tclose; negative on failure. */
hid_t si_h5_f16_type(void);
/* Writes a scalar attribute `name` on obj (file type ftype, memory type mtype). */
herr_t si_h5_attr(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *v);
/* Reads string attribute `name` of obj (caller frees), or NULL when it is not there, unreadable,
 * not one string, or over 1 MiB (a file's attributes may be crafted). */
char *si_h5_attr_read_str(hid_t obj, const char *name);
/* Writes a variable-length string attribute (NULL writes ""); strtype from si_h5_utf8_type. */
herr_t si_h5_attr_str(hid_t obj, const char *name, hid_t strtype, const char *s);

/* Creates dataset `name` of ndim dims under loc (missing groups too), chunked by `chunk_rows`
 * rows (all of the other dims), shuffled and deflated where the filter exists (not strings);
 * contiguous when a dim is 0, since a chunk cannot have a zero dimension. Caller closes it. */
hid_t si_h5_create_chunked(hid_t loc, const char *name, hid_t ftype, int ndim, const hsize_t *dims,
                           hsize_t chunk_rows);

/* Makes variable-length reads through the transfer list `dxpl` allocate with malloc, so the
 * strings and buffers HDF5 hands back are plain malloc'ed memory the caller can free(). */
herr_t si_h5_malloc_vlen(hid_t dxpl);

/* --- files a user hands us ---------------------------------------------------------------- */

/* Whether the call that just failed met an I/O error of the storage (a read() below HDF5 that
 * failed: EIO, a lost mount) rather than a fault of the file's content (a checksum, a filter, a
 * bad record). why (may be NULL) gets the system's words where HDF5 kept them. Call it right
 * after the failing call: the next HDF5 call clears what it reads (HDF5's error stack). */
bool si_h5_storage_fault(char *why, size_t cap);

/* The guard a link-access (or dataset-access) list carries while a user's file is read: HDF5
 * follows external links (to other files), external raw storage (bytes in other files) and
 * virtual datasets (mappings onto other files' datasets), any of which lets a crafted file read
 * whatever the user can (/etc/passwd into a result). With allow false every external link met
 * is refused; with allow true one is followed only to a regular file inside dir. refused gets
 * the last refused target, for the message. */
typedef struct {
    bool allow;
    char dir[4096]; /* the real path of the user's file's directory */
    char refused[512];
} si_h5_guard;

/* A dataset-access list (usable as a link-access list) that asks g before following an
 * external link, and resolves external raw files and virtual datasets' source files in the
 * directory of the file that names them. g is borrowed for the list's life; caller closes. */
hid_t si_h5_guarded_access(si_h5_guard *g);
/* Sets g->dir to the real path of path's directory. SI_ERR_IO when it cannot be resolved. */
si_status si_h5_guard_dir(si_h5_guard *g, const char *path);
/* Whether dataset d (opened through a guarded list) reads only its own file: external raw
 * storage and virtual datasets are refused, or with g->allow checked to name regular files
 * inside g->dir (a virtual dataset's sources then plain datasets of those files). SI_ERR_
 * UNSUPPORTED naming the file, the dataset and what it points to otherwise. */
si_status si_h5_check_storage(hid_t d, const si_h5_guard *g, const char *file, const char *name);

/* A variable-length record (or string) as the file holds it: its declared length, and where
 * its bytes are (an object's index in the global heap collection at an address). */
typedef struct {
    uint64_t len, heap_addr, heap_idx;
} si_h5_vlen_ref;
/* A memory type that reads a variable-length dataset (or a variable-length string dataset or
 * attribute) as each element's si_h5_vlen_ref, without reading the records: sizes are checked
 * before anything of that size is allocated (HDF5 converting a record allocates and clears its
 * declared size first), and references before HDF5 follows them. Made once per process; do not
 * close it. Negative when HDF5 refuses. */
hid_t si_h5_vlen_ref_type(void);
/* Checks each of the n references against the HDF5 file open as `file`: ok[i] tells whether
 * reference i names an object of exactly its length (times elem_size, the bytes of one
 * element) in a well-formed global heap collection (one of length 0 needs none). HDF5 1.10
 * follows a reference without these checks: a crafted index reads out of bounds, an object
 * longer than declared overflows the buffer sized by the declared length. Returns how many are
 * not, or SIZE_MAX (errno set) when reading the file failed (EIO: no answer about the
 * references). Each collection is walked once. */
size_t si_h5_vlen_refs_check(hid_t file, const si_h5_vlen_ref *r, size_t n, size_t elem_size,
                             bool *ok);

/* Before any other HDF5 call (the CLI's main): no HDF5 exit handler. HDF5 1.10 keeps a file
 * whose H5Fclose failed (a full disk) half closed, and its exit handler then crashes closing it
 * again (SIGSEGV in H5F__close_cb); every file here is closed explicitly, and a failed final
 * step is undone from its undo record (io/result.h), so nothing needs that handler. */
void si_h5_init(void);

#endif
