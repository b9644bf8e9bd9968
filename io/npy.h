/* NumPy .npy files: the tensor exchange format of `shardinfer exec`. Reads format versions 1.0,
 * 2.0 and 3.0 with little-endian (or byte-sized) dtypes float32, float64, float16, int64, int32,
 * int8, uint8 and bool, in C order, rank 0..SI_MAX_DIMS; writes version 1.0. The header is a
 * Python dict literal parsed by hand (never evaluated), and the element count it declares must
 * equal the bytes that follow it, so a hostile file yields SI_ERR_FORMAT naming the file, never
 * a crash or an allocation larger than the file. */
#ifndef SI_NPY_H
#define SI_NPY_H

#include "engine/onnx.h"

/* Reads path into *out (dtype as si_dtype, dims, numel; name NULL). On success the caller owns
 * out's members and frees them with si_tensor_free_data; on failure *out is zeroed. */
si_status si_npy_read(const char *path, si_tensor *out);

/* Writes a tensor (dtype one of those read above) as a version 1.0 file, replacing path.
 * Borrows t. */
si_status si_npy_write(const char *path, const si_tensor *t);

/* The same from loose parts: numel is the product of dims (1 for ndim 0). Borrows data. */
si_status si_npy_write_data(const char *path, int dtype, int ndim, const int64_t *dims,
                            const void *data);

/* The .npy descr ("<f4") of an si_dtype, or NULL when .npy files of it are not supported. */
const char *si_npy_descr(int dtype);

#endif
