/* HDF5 helpers shared by pack, result and resultview. */
#include "io/h5util.h"

#include "base/common.h"

#include <stdbool.h>
#include <stdlib.h>

hid_t si_h5_utf8_type(void) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    return t;
}

/* HDF5 1.14.4 predefines IEEE half; before it, the type is made as h5py makes it (so h5py
 * reads it as numpy float16): float32's layout narrowed to 1 sign, 5 exponent and 10 mantissa
 * bits with bias 15. Little-endian either way, as every column of a result is. */
hid_t si_h5_f16_type(void) {
#if H5_VERSION_GE(1, 14, 4)
    return H5Tcopy(H5T_IEEE_F16LE);
#else
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    if (t < 0) return t;
    if (H5Tset_fields(t, 15, 10, 5, 0, 10) < 0 || H5Tset_size(t, 2) < 0 ||
        H5Tset_ebias(t, 15) < 0) {
        H5Tclose(t);
        return H5I_INVALID_HID;
    }
    return t;
#endif
}

herr_t si_h5_attr(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *v) {
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = sp >= 0 ? H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT) : -1;
    herr_t e = a >= 0 ? H5Awrite(a, mtype, v) : -1;
    if (a >= 0) H5Aclose(a);
    if (sp >= 0) H5Sclose(sp);
    return e;
}

herr_t si_h5_attr_str(hid_t obj, const char *name, hid_t strtype, const char *s) {
    const char *v = s ? s : "";
    return si_h5_attr(obj, name, strtype, strtype, &v);
}

hid_t si_h5_create_chunked(hid_t loc, const char *name, hid_t ftype, int ndim, const hsize_t *dims,
                           hsize_t chunk_rows) {
    hsize_t chunk[H5S_MAX_RANK];
    bool empty = false;
    for (int i = 0; i < ndim; i++) {
        chunk[i] = i == 0 ? (dims[0] < chunk_rows ? dims[0] : chunk_rows) : dims[i];
        empty |= dims[i] == 0;
    }
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    if (!empty) {
        H5Pset_chunk(dcpl, ndim, chunk);
        if (H5Tget_class(ftype) != H5T_STRING && H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) {
            H5Pset_shuffle(dcpl);
            H5Pset_deflate(dcpl, 4);
        }
    }
    hid_t sp = H5Screate_simple(ndim, dims, NULL);
    hid_t d = H5Dcreate2(loc, name, ftype, sp, lcpl, dcpl, H5P_DEFAULT);
    H5Sclose(sp);
    H5Pclose(dcpl);
    H5Pclose(lcpl);
    return d;
}

char *si_h5_attr_read_str(hid_t obj, const char *name) {
    if (H5Aexists(obj, name) <= 0) return NULL;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t t = si_h5_utf8_type();
    char *v = NULL, *copy = NULL;
    if (a >= 0 && H5Aread(a, t, &v) >= 0 && v) {
        copy = si_xstrdup(v);
        H5free_memory(v);
    }
    H5Tclose(t);
    if (a >= 0) H5Aclose(a);
    return copy;
}

static void *vlen_alloc(size_t n, void *info) {
    (void)info;
    return malloc(n);
}

static void vlen_free(void *p, void *info) {
    (void)info;
    free(p);
}

herr_t si_h5_malloc_vlen(hid_t dxpl) {
    return H5Pset_vlen_mem_manager(dxpl, vlen_alloc, NULL, vlen_free, NULL);
}

void si_h5_init(void) {
    H5dont_atexit();
}
