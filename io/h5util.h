/* Small HDF5 helpers shared by the io/ modules that write or read strings and attributes. */
#ifndef SI_H5UTIL_H
#define SI_H5UTIL_H

#include <hdf5.h>

/* A variable-length UTF-8 string type; caller closes it with H5Tclose. */
hid_t si_h5_utf8_type(void);
/* IEEE 754 half, little-endian (numpy's float16): the file and memory type of a float16
 * column, whose values are in memory as the bits src/base/half.h makes. Caller closes it with
 * H5Tclose; negative on failure. */
hid_t si_h5_f16_type(void);
/* Writes a scalar attribute `name` on obj (file type ftype, memory type mtype). */
herr_t si_h5_attr(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *v);
/* Reads string attribute `name` of obj (caller frees), or NULL when it is not there or unreadable.
 */
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

/* Before any other HDF5 call (the CLI's main): no HDF5 exit handler. HDF5 1.10 keeps a file
 * whose H5Fclose failed (a full disk) half closed, and its exit handler then crashes closing it
 * again (SIGSEGV in H5F__close_cb); every file here is closed explicitly, and a failed final
 * step is undone from its undo record (io/result.h), so nothing needs that handler. */
void si_h5_init(void);

#endif
