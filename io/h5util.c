/* HDF5 helpers shared by pack, result and resultview. */
#include "h5util.h"

#include <stdlib.h>

hid_t si_h5_utf8_type(void) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    return t;
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
