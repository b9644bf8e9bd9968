/* HDF5 helpers shared by pack, result and resultview. */
#include "io/h5util.h"

#include "base/common.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ATTR_STR_MAX (1u << 20) /* bytes of a string attribute read back */

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
    hid_t ft = a >= 0 ? H5Aget_type(a) : H5I_INVALID_HID;
    hid_t sp = a >= 0 ? H5Aget_space(a) : H5I_INVALID_HID;
    /* one string, of a bounded size: an array of strings would overflow the one pointer read
     * into, and a declared length is allocated (and cleared) before it is read */
    bool ok = ft >= 0 && sp >= 0 && H5Tget_class(ft) == H5T_STRING &&
              H5Sget_simple_extent_npoints(sp) == 1;
    if (ok && H5Tis_variable_str(ft) > 0) {
        si_h5_vlen_ref ref = {UINT64_MAX, 0, 0};
        hid_t rt = si_h5_vlen_ref_type();
        bool good = false;
        hid_t file = H5Iget_file_id(obj);
        ok = rt >= 0 && H5Aread(a, rt, &ref) >= 0 && ref.len <= ATTR_STR_MAX && file >= 0 &&
             si_h5_vlen_refs_check(file, &ref, 1, 1, &good) == 0;
        if (file >= 0) H5Fclose(file);
    } else if (ok) {
        ok = H5Tget_size(ft) <= ATTR_STR_MAX;
    }
    hid_t t = si_h5_utf8_type();
    char *v = NULL, *copy = NULL;
    if (ok && H5Aread(a, t, &v) >= 0 && v) {
        copy = si_xstrdup(v);
        H5free_memory(v);
    }
    H5Tclose(t);
    if (sp >= 0) H5Sclose(sp);
    if (ft >= 0) H5Tclose(ft);
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

/* --- files a user hands us ------------------------------------------------------------------ */

typedef struct {
    bool fault;
    char *why;
    size_t cap;
} fault_walk;

/* HDF5's file drivers report a failed read() or lseek() under the major "low-level I/O" class
 * with the system's errno in the text ("file read failed: ... errno = 5, error message =
 * 'Input/output error' ..."). Layers above wrap any failure under that class too ("unable to
 * read raw data chunk" for a chunk whose address in a crafted file lies past its end), and a
 * filter or a checksum fails under others: only the system's own failure is the storage's. */
static herr_t fault_cb(unsigned n, const H5E_error2_t *e, void *data) {
    (void)n;
    fault_walk *w = data;
    if (e->maj_num != H5E_IO || !e->desc || !strstr(e->desc, "errno = ")) return 0;
    w->fault = true;
    const char *m = e->desc ? strstr(e->desc, "error message = '") : NULL;
    if (w->why && w->cap && m) {
        m += strlen("error message = '");
        size_t l = strcspn(m, "'");
        snprintf(w->why, w->cap, "%.*s", (int)l, m);
    }
    return 0;
}

bool si_h5_storage_fault(char *why, size_t cap) {
    fault_walk w = {.why = why, .cap = cap};
    if (why && cap) snprintf(why, cap, "I/O error");
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, fault_cb, &w);
    return w.fault;
}

si_status si_h5_guard_dir(si_h5_guard *g, const char *path) {
    char *real = realpath(path, NULL);
    if (!real) return si_error(SI_ERR_IO, "%s: cannot resolve its path: %s", path, strerror(errno));
    char *slash = strrchr(real, '/');
    if (slash == real)
        snprintf(g->dir, sizeof g->dir, "/");
    else
        snprintf(g->dir, sizeof g->dir, "%.*s", (int)(slash - real), real);
    free(real);
    return SI_OK;
}

/* Whether name (relative names from base_dir) is a regular file whose real path lies in dir. */
static bool inside(const char *dir, const char *base_dir, const char *name) {
    char joined[2 * PATH_MAX + 2];
    if (name[0] == '/')
        snprintf(joined, sizeof joined, "%s", name);
    else
        snprintf(joined, sizeof joined, "%s/%s", base_dir, name);
    char *real = realpath(joined, NULL);
    struct stat sb;
    bool ok = real && stat(real, &sb) == 0 && S_ISREG(sb.st_mode);
    size_t l = strlen(dir);
    if (ok && strcmp(dir, "/") != 0) ok = strncmp(real, dir, l) == 0 && real[l] == '/';
    free(real);
    return ok;
}

/* Asked by HDF5 before it opens the file an external link names. */
static herr_t elink_cb(const char *parent_file, const char *parent_group, const char *child_file,
                       const char *child_object, unsigned *acc_flags, hid_t fapl, void *data) {
    (void)parent_file, (void)parent_group, (void)fapl;
    si_h5_guard *g = data;
    if (g->allow && inside(g->dir, g->dir, child_file)) {
        *acc_flags = H5F_ACC_RDONLY;
        return 0;
    }
    snprintf(g->refused, sizeof g->refused, "an external link to %s:%s", child_file, child_object);
    return -1;
}

hid_t si_h5_guarded_access(si_h5_guard *g) {
    hid_t p = H5Pcreate(H5P_DATASET_ACCESS);
    if (p < 0) return p;
    /* "${ORIGIN}": the directory of the file that names them, not the working directory */
    if (H5Pset_elink_cb(p, elink_cb, g) < 0 || H5Pset_efile_prefix(p, "${ORIGIN}") < 0 ||
        H5Pset_virtual_prefix(p, "${ORIGIN}") < 0 ||
        (g->allow && H5Pset_elink_prefix(p, g->dir) < 0)) {
        H5Pclose(p);
        return H5I_INVALID_HID;
    }
    return p;
}

/* A virtual dataset's source dataset `name` in `file` (resolved, inside g->dir): a plain
 * dataset of that file, itself neither virtual nor stored outside. */
static si_status check_vds_source(const si_h5_guard *g, const char *file, const char *name,
                                  const char *who) {
    si_h5_guard strict = {.allow = false};
    snprintf(strict.dir, sizeof strict.dir, "%s", g->dir);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
#if H5_VERSION_GE(1, 10, 7)
    H5Pset_file_locking(fapl, true, true);
#endif
    char joined[2 * PATH_MAX + 2];
    if (file[0] == '/')
        snprintf(joined, sizeof joined, "%s", file);
    else
        snprintf(joined, sizeof joined, "%s/%s", g->dir, file);
    hid_t f = H5Fopen(joined, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    hid_t dapl = f >= 0 ? si_h5_guarded_access(&strict) : H5I_INVALID_HID;
    hid_t d = dapl >= 0 ? H5Dopen2(f, name, dapl) : H5I_INVALID_HID;
    si_status st = d < 0 ? si_error(SI_ERR_UNSUPPORTED,
                                    "%s: its virtual dataset maps %s:%s, which cannot be opened "
                                    "as a dataset of that file%s%s",
                                    who, file, name, strict.refused[0] ? ": " : "", strict.refused)
                         : si_h5_check_storage(d, &strict, joined, name);
    if (d >= 0) H5Dclose(d);
    if (dapl >= 0) H5Pclose(dapl);
    if (f >= 0) H5Fclose(f);
    return st;
}

/* A virtual dataset: refused, or with g->allow each mapping's source file inside g->dir and
 * its dataset plain. */
static si_status check_virtual(hid_t dcpl, const si_h5_guard *g, const char *who) {
    size_t count = 0;
    if (!g->allow || H5Pget_virtual_count(dcpl, &count) < 0)
        return si_error(SI_ERR_UNSUPPORTED,
                        "%s is a virtual dataset (its bytes come from other datasets, possibly "
                        "of other files): refused; pass --allow-external to read those that "
                        "stay inside the file's own directory",
                        who);
    for (size_t i = 0; i < count; i++) {
        char file[PATH_MAX], name[1024];
        if (H5Pget_virtual_filename(dcpl, i, file, sizeof file) < 0 ||
            H5Pget_virtual_dsetname(dcpl, i, name, sizeof name) < 0)
            return si_error(SI_ERR_FORMAT, "%s: virtual mapping %zu is unreadable", who, i);
        if (strcmp(file, ".") != 0 && !inside(g->dir, g->dir, file))
            return si_error(SI_ERR_UNSUPPORTED,
                            "%s: its virtual dataset maps %s, which is not a regular file "
                            "inside %s: refused",
                            who, file, g->dir);
        if (strcmp(file, ".") != 0) {
            si_status st = check_vds_source(g, file, name, who);
            if (st != SI_OK) return st;
        }
    }
    return SI_OK;
}

si_status si_h5_check_storage(hid_t d, const si_h5_guard *g, const char *file, const char *name) {
    char who[1200];
    snprintf(who, sizeof who, "%s: %s", file, name);
    hid_t dcpl = H5Dget_create_plist(d);
    if (dcpl < 0) return si_error(SI_ERR_FORMAT, "%s: cannot read its storage properties", who);
    si_status st = SI_OK;
    int n_ext = H5Pget_external_count(dcpl);
    if (H5Pget_layout(dcpl) == H5D_VIRTUAL) {
        st = check_virtual(dcpl, g, who);
    } else if (n_ext > 0 && !g->allow) {
        char ext[PATH_MAX] = "?";
        off_t off;
        hsize_t size;
        H5Pget_external(dcpl, 0, sizeof ext, ext, &off, &size);
        st = si_error(SI_ERR_UNSUPPORTED,
                      "%s keeps its bytes in another file (HDF5 external storage: %s): refused; "
                      "pass --allow-external to read such files inside the file's own "
                      "directory",
                      who, ext);
    } else {
        for (int i = 0; i < n_ext && st == SI_OK; i++) {
            char ext[PATH_MAX] = "";
            off_t off;
            hsize_t size;
            if (H5Pget_external(dcpl, (unsigned)i, sizeof ext, ext, &off, &size) < 0 ||
                !inside(g->dir, g->dir, ext))
                st = si_error(SI_ERR_UNSUPPORTED,
                              "%s keeps its bytes in %s, which is not a regular file inside %s: "
                              "refused",
                              who, ext, g->dir);
        }
    }
    H5Pclose(dcpl);
    return st;
}

/* The references of variable-length records, from the records' headers in the file: a
 * conversion HDF5 calls with the file's representation of each element (a 4-byte little-endian
 * length, an 8-byte heap collection address, a 4-byte object index: the file format's, the same
 * in HDF5 1.8 to 1.14), registered for variable-length sources and the opaque type below only. */
static const char vlen_ref_tag[] = "shardinfer:vlen-reference";
static hid_t vlen_ref;

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static herr_t vlen_ref_conv(hid_t src, hid_t dst, H5T_cdata_t *cd, size_t n, size_t stride,
                            size_t bkg_stride, void *buf, void *bkg, hid_t dxpl) {
    (void)bkg_stride, (void)bkg, (void)dxpl;
    switch (cd->command) {
    case H5T_CONV_INIT: {
        bool vlen = H5Tget_class(src) == H5T_VLEN ||
                    (H5Tget_class(src) == H5T_STRING && H5Tis_variable_str(src) > 0);
        if (!vlen || H5Tget_class(dst) != H5T_OPAQUE) return -1;
        char *tag = H5Tget_tag(dst);
        bool ours = tag && strcmp(tag, vlen_ref_tag) == 0 && H5Tget_size(src) >= 16;
        H5free_memory(tag);
        cd->need_bkg = H5T_BKG_NO;
        return ours ? 0 : -1;
    }
    case H5T_CONV_FREE: return 0;
    case H5T_CONV_CONV: {
        /* in place, back to front: element i's 24 bytes go over the 16-byte sources of the
         * elements after it, all read already */
        size_t ss = stride ? stride : H5Tget_size(src), ds = stride ? stride : 24;
        uint8_t *b = buf;
        for (size_t i = n; i-- > 0;) {
            const uint8_t *p = b + i * ss;
            si_h5_vlen_ref r = {le(p, 4), le(p + 4, 8), le(p + 12, 4)};
            memcpy(b + i * ds, &r, sizeof r);
        }
        return 0;
    }
    default: return -1;
    }
}

static void make_vlen_ref(void) {
    hid_t t = H5Tcreate(H5T_OPAQUE, sizeof(si_h5_vlen_ref));
    hid_t src = H5Tvlen_create(H5T_NATIVE_UINT8), str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, H5T_VARIABLE);
    if (t >= 0 && src >= 0 && H5Tset_tag(t, vlen_ref_tag) >= 0 &&
        H5Tregister(H5T_PERS_SOFT, "shardinfer vlen ref", src, t, vlen_ref_conv) >= 0 &&
        H5Tregister(H5T_PERS_SOFT, "shardinfer vstr ref", str, t, vlen_ref_conv) >= 0) {
        vlen_ref = t;
        t = H5I_INVALID_HID;
    } else {
        vlen_ref = H5I_INVALID_HID;
    }
    if (t >= 0) H5Tclose(t);
    if (src >= 0) H5Tclose(src);
    if (str >= 0) H5Tclose(str);
}

hid_t si_h5_vlen_ref_type(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, make_vlen_ref);
    return vlen_ref;
}

/* Reads of a file through a 64 KiB window: a heap collection's object headers lie close together
 * when its objects are small (ids), and one read serves many. */
typedef struct {
    int fd, err; /* err: the errno of a read that failed (not one that found the file's end) */
    uint64_t at, len;
    uint8_t b[1 << 16];
} window;

static bool window_read(window *w, uint64_t off, void *p, size_t len) {
    if (off < w->at || off + len > w->at + w->len) {
        ssize_t g = pread(w->fd, w->b, sizeof w->b, (off_t)off);
        if (g < 0) w->err = errno;
        if (g < (ssize_t)len) return false;
        w->at = off;
        w->len = (uint64_t)g;
    }
    memcpy(p, w->b + (off - w->at), len);
    return true;
}

typedef struct {
    uint64_t idx, size;
} heap_obj;

/* The objects of the global heap collection at addr (file format: "GCOL", version 1, 3 reserved
 * bytes, the collection's size; then objects of a 2-byte index, a 2-byte reference count, 4
 * reserved bytes, an 8-byte size and the data padded to 8; index 0 is the free space that ends
 * them) into *objs (*n of them; grown, the caller frees), or false when it is not well formed. */
static bool heap_objects(window *w, uint64_t eof, uint64_t addr, heap_obj **objs, size_t *n,
                         size_t *cap) {
    uint8_t h[16];
    *n = 0;
    if (addr > eof || eof - addr < 16 || !window_read(w, addr, h, 16) || memcmp(h, "GCOL", 4) ||
        h[4] != 1)
        return false;
    uint64_t size = le(h + 8, 8);
    if (size < 16 || size > eof - addr) return false;
    for (uint64_t at = 16; size - at >= 16;) {
        uint8_t o[16];
        if (!window_read(w, addr + at, o, 16)) return false;
        uint64_t oi = le(o, 2), os = le(o + 8, 8), padded = (os + 7) & ~(uint64_t)7;
        if (oi == 0) break; /* the free space: no more objects */
        if (os > size || padded > size - at - 16) return false;
        if (*n == *cap) {
            *cap = *cap ? 2 * *cap : 64;
            *objs = si_xrealloc(*objs, *cap * sizeof **objs);
        }
        (*objs)[(*n)++] = (heap_obj){oi, os};
        at += 16 + padded;
    }
    return true;
}

/* References by collection, then by object index within it. */
static int by_addr(const void *a, const void *b, void *r) {
    const si_h5_vlen_ref *x = (const si_h5_vlen_ref *)r + *(const size_t *)a;
    const si_h5_vlen_ref *y = (const si_h5_vlen_ref *)r + *(const size_t *)b;
    if (x->heap_addr != y->heap_addr) return x->heap_addr < y->heap_addr ? -1 : 1;
    return x->heap_idx < y->heap_idx ? -1 : x->heap_idx > y->heap_idx;
}

static int by_idx(const void *a, const void *b) {
    uint64_t x = ((const heap_obj *)a)->idx, y = ((const heap_obj *)b)->idx;
    return x < y ? -1 : x > y;
}

size_t si_h5_vlen_refs_check(hid_t file, const si_h5_vlen_ref *r, size_t n, size_t elem_size,
                             bool *ok) {
    /* the bytes are read with pread on the file's descriptor: HDF5's default (sec2) driver, the
     * one every file here is opened with */
    int *fd = NULL;
    struct stat sb;
    hid_t fapl = H5Fget_access_plist(file);
    bool sec2 = fapl >= 0 && H5Pget_driver(fapl) == H5FD_SEC2;
    if (fapl >= 0) H5Pclose(fapl);
    bool usable = sec2 && H5Fget_vfd_handle(file, H5P_DEFAULT, (void **)&fd) >= 0 && fd &&
                  fstat(*fd, &sb) == 0;
    size_t bad = 0, *order = si_xmalloc((n ? n : 1) * sizeof *order), m = 0;
    for (size_t i = 0; i < n; i++) {
        ok[i] = r[i].len == 0; /* nothing to follow */
        if (!ok[i]) order[m++] = i;
    }
    /* each collection walked once, however many references it serves, and its objects and
     * references met in index order (a collection of short ids holds thousands: a search of
     * its objects for each reference was a third of copying a million ids) */
    qsort_r(order, m, sizeof *order, by_addr, (void *)r);
    window *w = usable ? si_xmalloc(sizeof *w) : NULL;
    if (w) w->fd = *fd, w->err = 0, w->at = w->len = 0;
    heap_obj *objs = NULL;
    size_t nobj = 0, cap = 0;
    bool well = false;
    size_t j = 0; /* the first of the collection's objects whose index is not below x's */
    for (size_t k = 0; k < m; k++) {
        const si_h5_vlen_ref *x = &r[order[k]];
        if (w && (k == 0 || x->heap_addr != r[order[k - 1]].heap_addr)) {
            well = heap_objects(w, (uint64_t)sb.st_size, x->heap_addr, &objs, &nobj, &cap);
            if (well) qsort(objs, nobj, sizeof *objs, by_idx);
            j = 0;
        }
        bool found = false;
        while (w && well && j < nobj && objs[j].idx < x->heap_idx) j++;
        /* a crafted collection may repeat an index: any of them may match */
        for (size_t i = j; w && well && i < nobj && objs[i].idx == x->heap_idx && !found; i++)
            found = x->len <= UINT64_MAX / elem_size && objs[i].size == x->len * elem_size;
        ok[order[k]] = found;
        bad += !found;
    }
    int err = w ? w->err : 0;
    free(objs);
    free(w);
    free(order);
    if (err) { /* the storage's fault, not the references' */
        errno = err;
        return SIZE_MAX;
    }
    return bad;
}

void si_h5_init(void) {
    H5dont_atexit();
}
