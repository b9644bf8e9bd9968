/* NumPy .npy files: the tensor exchange format of `shardinfer exec`. Reads format versions 1.0,
 * 2.0 and 3.0 with little-endian (or byte-sized) dtypes float32, float64, float16, int64, int32,
 * int8, uint8 and bool, in C order, rank 0..SI_NPY_MAX_DIMS; writes version 1.0. The header is a
 * Python dict literal parsed by hand (never evaluated), and the element count it declares must
 * equal the bytes that follow it, so a hostile file yields SI_ERR_FORMAT naming the file, never
 * a crash or an allocation larger than the file. */
#ifndef SI_NPY_H
#define SI_NPY_H

#include "base/common.h"

#define SI_NPY_MAX_DIMS 8

/* The element types read and written, numbered as ONNX's TensorProto.DataType (the engine's
 * si_dtype, src/engine/onnx.h), so that a caller passes its dtype through unchanged. */
enum {
    SI_NPY_FLOAT32 = 1,
    SI_NPY_UINT8 = 2,
    SI_NPY_INT8 = 3,
    SI_NPY_INT32 = 6,
    SI_NPY_INT64 = 7,
    SI_NPY_BOOL = 9,
    SI_NPY_FLOAT16 = 10,
    SI_NPY_FLOAT64 = 11,
};

/* An array in C order, its data in the native little-endian layout of its dtype. */
typedef struct {
    int dtype; /* SI_NPY_* */
    int ndim;
    int64_t dims[SI_NPY_MAX_DIMS];
    int64_t numel;
    void *data; /* numel elements */
} si_npy_array;

/* Reads path into *out. On success the caller owns out->data (si_npy_free); on failure *out is
 * zeroed. */
si_status si_npy_read(const char *path, si_npy_array *out);

/* Frees a's data and zeroes it; accepts NULL. */
void si_npy_free(si_npy_array *a);

/* Writes an array (dtype one of those read above) as a version 1.0 file, replacing path.
 * Borrows a. */
si_status si_npy_write(const char *path, const si_npy_array *a);

/* The same from loose parts: numel is the product of dims (1 for ndim 0). Borrows data. */
si_status si_npy_write_data(const char *path, int dtype, int ndim, const int64_t *dims,
                            const void *data);

/* The .npy descr ("<f4") of a dtype, or NULL when .npy files of it are not supported. */
const char *si_npy_descr(int dtype);

#endif
