/* Reading a packed image set (layout in imageset.h). Opening checks everything that can be
 * checked without reading N values (datasets, types, ranks, sizes, the first and last offset);
 * the offsets in between are checked when a range of them is read, so a bad one is reported with
 * its index instead of crashing a read. HDF5's own error printing is silenced: every failure
 * becomes one message naming the file and the dataset. */
#include "io/imageset.h"

#include "io/h5util.h"

#include <errno.h>
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct si_imageset {
    char *path;
    hid_t file, data, offsets, ids, dxpl;
    H5T_cset_t ids_cset; /* ids are read in the file's character set: no conversion asked */
    uint64_t n;          /* images */
    uint64_t total;      /* bytes in /images/data */
};

static const char *hint = "not a shardinfer image set (make one with `shardinfer pack`)";

/* Free functions as HDF5 wants them for variable-length data, so that the id strings it
 * allocates are plain malloc'ed strings the caller can free() whatever HDF5's own allocator. */

/* Opens `name` as a dataset of rank 1 and returns its length in *len; checks its type class (and
 * size, when size > 0). Returns the dataset or H5I_INVALID_HID with the message set. */
static hid_t open_1d(si_imageset *s, const char *name, H5T_class_t cls, size_t size,
                     const char *what, uint64_t *len, si_status *st) {
    *st = SI_ERR_FORMAT;
    htri_t ex = H5Lexists(s->file, name, H5P_DEFAULT);
    if (ex <= 0) {
        si_error(SI_ERR_FORMAT, "%s: no dataset %s: %s", s->path, name, hint);
        return H5I_INVALID_HID;
    }
    hid_t d = H5Dopen2(s->file, name, H5P_DEFAULT);
    if (d < 0) {
        si_error(SI_ERR_FORMAT, "%s: %s is not a dataset: %s", s->path, name, hint);
        return H5I_INVALID_HID;
    }
    hid_t t = H5Dget_type(d), sp = H5Dget_space(d);
    bool ok_type = t >= 0 && H5Tget_class(t) == cls && (size == 0 || H5Tget_size(t) == size);
    if (ok_type && cls == H5T_INTEGER && size == 1) ok_type = H5Tget_sign(t) == H5T_SGN_NONE;
    if (ok_type && cls == H5T_STRING) ok_type = H5Tis_variable_str(t) > 0;
    int rank = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    hsize_t dim = 0;
    if (rank == 1) H5Sget_simple_extent_dims(sp, &dim, NULL);
    if (t >= 0) H5Tclose(t);
    if (sp >= 0) H5Sclose(sp);
    if (!ok_type) {
        si_error(SI_ERR_FORMAT, "%s: %s has the wrong type, expected %s", s->path, name, what);
    } else if (rank != 1) {
        si_error(SI_ERR_FORMAT, "%s: %s has rank %d, expected 1", s->path, name, rank);
    } else {
        *len = dim;
        *st = SI_OK;
        return d;
    }
    H5Dclose(d);
    return H5I_INVALID_HID;
}

/* Reads offsets[i] into *v. */
static si_status read_offset(si_imageset *s, uint64_t i, uint64_t *v) {
    hsize_t start = i, count = 1;
    hid_t fs = H5Dget_space(s->offsets), ms = H5Screate_simple(1, &count, NULL);
    herr_t e = H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL);
    if (e >= 0) e = H5Dread(s->offsets, H5T_NATIVE_UINT64, ms, fs, H5P_DEFAULT, v);
    H5Sclose(ms);
    H5Sclose(fs);
    if (e < 0)
        return si_error(SI_ERR_IO, "%s: cannot read /images/offsets[%llu]", s->path,
                        (unsigned long long)i);
    return SI_OK;
}

/* Checks the optional parts: a newer format_version than ours, and a count attribute or a
 * labels dataset that disagree with the ids. */
static si_status check_extras(si_imageset *s) {
    if (H5Aexists_by_name(s->file, "/images", "format_version", H5P_DEFAULT) > 0) {
        int v = 0;
        hid_t a = H5Aopen_by_name(s->file, "/images", "format_version", H5P_DEFAULT, H5P_DEFAULT);
        herr_t e = a >= 0 ? H5Aread(a, H5T_NATIVE_INT, &v) : -1;
        if (a >= 0) H5Aclose(a);
        if (e < 0)
            return si_error(SI_ERR_FORMAT, "%s: /images attribute format_version is not an integer",
                            s->path);
        if (v > SI_PACK_FORMAT_VERSION)
            return si_error(SI_ERR_UNSUPPORTED,
                            "%s: image set format_version %d is newer than this shardinfer's (%d)",
                            s->path, v, SI_PACK_FORMAT_VERSION);
    }
    if (H5Aexists_by_name(s->file, "/images", "count", H5P_DEFAULT) > 0) {
        uint64_t c = 0;
        hid_t a = H5Aopen_by_name(s->file, "/images", "count", H5P_DEFAULT, H5P_DEFAULT);
        herr_t e = a >= 0 ? H5Aread(a, H5T_NATIVE_UINT64, &c) : -1;
        if (a >= 0) H5Aclose(a);
        if (e < 0 || c != s->n)
            return si_error(SI_ERR_FORMAT,
                            "%s: /images attribute count (%llu) disagrees with /images/ids (%llu)",
                            s->path, (unsigned long long)c, (unsigned long long)s->n);
    }
    if (H5Lexists(s->file, "/images/labels", H5P_DEFAULT) > 0) {
        si_status st;
        uint64_t nl = 0;
        hid_t l = open_1d(s, "/images/labels", H5T_INTEGER, 0, "integers", &nl, &st);
        if (l < 0) return st;
        H5Dclose(l);
        if (nl != s->n)
            return si_error(SI_ERR_FORMAT, "%s: /images/labels has %llu entries, ids have %llu",
                            s->path, (unsigned long long)nl, (unsigned long long)s->n);
    }
    return SI_OK;
}

/* On success *out owns the open file; the caller closes it with si_imageset_close. Borrows path. */
si_status si_imageset_open(const char *path, si_imageset **out) {
    *out = NULL;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT) return si_error(SI_ERR_IO, "%s: no such file", path);
        return si_error(SI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    if (S_ISDIR(sb.st_mode))
        return si_error(SI_ERR_IO, "%s: is a directory, not an HDF5 image set", path);
    htri_t is = H5Fis_hdf5(path);
    if (is < 0) return si_error(SI_ERR_IO, "%s: cannot read the file", path);
    if (is == 0) return si_error(SI_ERR_FORMAT, "%s: not an HDF5 file: %s", path, hint);

    si_imageset *s = si_xcalloc(1, sizeof *s);
    s->path = si_xstrdup(path);
    s->data = s->offsets = s->ids = s->dxpl = H5I_INVALID_HID;
    si_status st = SI_OK;
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
#if H5_VERSION_GE(1, 10, 7)
    /* parallel file systems mounted without flock (Lustre often is) make HDF5's lock fail the
     * open; a file opened read-only by every rank loses nothing without it */
    H5Pset_file_locking(fapl, true, true);
#endif
    s->file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (s->file < 0) {
        st = si_error(SI_ERR_IO, "%s: HDF5 cannot open the file", path);
        goto fail;
    }
    if (H5Lexists(s->file, "/images", H5P_DEFAULT) <= 0) {
        st = si_error(SI_ERR_FORMAT, "%s: no group /images: %s", path, hint);
        goto fail;
    }
    uint64_t noff = 0;
    s->offsets = open_1d(s, "/images/offsets", H5T_INTEGER, 0, "integers (uint64)", &noff, &st);
    if (s->offsets < 0) goto fail;
    s->ids = open_1d(s, "/images/ids", H5T_STRING, 0, "variable-length strings", &s->n, &st);
    if (s->ids < 0) goto fail;
    hid_t it = H5Dget_type(s->ids);
    s->ids_cset = H5Tget_cset(it);
    H5Tclose(it);
    s->data = open_1d(s, "/images/data", H5T_INTEGER, 1, "uint8", &s->total, &st);
    if (s->data < 0) goto fail;
    if (noff != s->n + 1) {
        st =
            si_error(SI_ERR_FORMAT, "%s: /images/offsets has %llu entries, expected %llu (ids + 1)",
                     path, (unsigned long long)noff, (unsigned long long)s->n + 1);
        goto fail;
    }
    uint64_t first, last;
    if ((st = read_offset(s, 0, &first)) != SI_OK) goto fail;
    if ((st = read_offset(s, s->n, &last)) != SI_OK) goto fail;
    if (first != 0) {
        st = si_error(SI_ERR_FORMAT, "%s: /images/offsets[0] is %llu, expected 0", path,
                      (unsigned long long)first);
        goto fail;
    }
    if (last != s->total) {
        st = si_error(
            SI_ERR_FORMAT, "%s: /images/offsets[%llu] is %llu but /images/data has %llu bytes",
            path, (unsigned long long)s->n, (unsigned long long)last, (unsigned long long)s->total);
        goto fail;
    }
    if ((st = check_extras(s)) != SI_OK) goto fail;
    s->dxpl = H5Pcreate(H5P_DATASET_XFER);
    if (s->dxpl < 0 || si_h5_malloc_vlen(s->dxpl) < 0) {
        st = si_error(SI_ERR_INTERNAL, "%s: cannot set up HDF5 transfer properties", path);
        goto fail;
    }
    *out = s;
    return SI_OK;
fail:
    si_imageset_close(s);
    return st;
}

/* Closes every handle and frees s; accepts NULL. */
void si_imageset_close(si_imageset *s) {
    if (!s) return;
    if (s->dxpl >= 0) H5Pclose(s->dxpl);
    if (s->data >= 0) H5Dclose(s->data);
    if (s->offsets >= 0) H5Dclose(s->offsets);
    if (s->ids >= 0) H5Dclose(s->ids);
    if (s->file >= 0) H5Fclose(s->file);
    free(s->path);
    free(s);
}

uint64_t si_imageset_count(const si_imageset *s) {
    return s->n;
}

const char *si_imageset_path(const si_imageset *s) {
    return s->path;
}

/* Reads elements [start, start+count) of the 1-D dataset d into buf as memory type mt. */
static herr_t read_range(hid_t d, hid_t mt, hid_t dxpl, uint64_t start, uint64_t count, void *buf) {
    hsize_t st = start, cn = count;
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1, &cn, NULL);
    herr_t e = fs >= 0 && ms >= 0 ? 0 : -1;
    if (e >= 0) e = H5Sselect_hyperslab(fs, H5S_SELECT_SET, &st, NULL, &cn, NULL);
    if (e >= 0) e = H5Dread(d, mt, ms, fs, dxpl, buf);
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return e;
}

static si_status check_range(const si_imageset *s, uint64_t first, uint64_t n) {
    if (first > s->n || n > s->n - first)
        return si_error(SI_ERR_ARG, "%s: images [%llu, %llu) requested, the set has %llu", s->path,
                        (unsigned long long)first, (unsigned long long)(first + n),
                        (unsigned long long)s->n);
    return SI_OK;
}

/* Borrows s; grows buf (caller owns it) and fills off[0..n] (caller owns, n+1 entries). */
si_status si_imageset_read(si_imageset *s, uint64_t first, uint32_t n, si_bytes *buf,
                           uint64_t *off) {
    si_status st = check_range(s, first, n);
    if (st != SI_OK) return st;
    if (read_range(s->offsets, H5T_NATIVE_UINT64, H5P_DEFAULT, first, (uint64_t)n + 1, off) < 0)
        return si_error(SI_ERR_IO, "%s: cannot read /images/offsets[%llu..%llu]", s->path,
                        (unsigned long long)first, (unsigned long long)(first + n));
    for (uint32_t j = 0; j < n; j++) {
        if (off[j + 1] < off[j])
            return si_error(SI_ERR_FORMAT,
                            "%s: /images/offsets is not monotonic at image %llu (%llu < %llu)",
                            s->path, (unsigned long long)(first + j),
                            (unsigned long long)off[j + 1], (unsigned long long)off[j]);
    }
    if (off[n] > s->total)
        return si_error(SI_ERR_FORMAT,
                        "%s: image %llu ends at byte %llu, past the end of /images/data (%llu)",
                        s->path, (unsigned long long)(first + n - (n > 0)),
                        (unsigned long long)off[n], (unsigned long long)s->total);
    uint64_t base = off[0], len = off[n] - base;
    if (len > SIZE_MAX)
        return si_error(SI_ERR_NOMEM, "%s: images [%llu, %llu) hold %llu bytes", s->path,
                        (unsigned long long)first, (unsigned long long)(first + n),
                        (unsigned long long)len);
    if ((st = si_bytes_reserve(buf, (size_t)len)) != SI_OK)
        return si_error_prefix(st, "%s: images [%llu, %llu): ", s->path, (unsigned long long)first,
                               (unsigned long long)(first + n));
    if (len > 0 && read_range(s->data, H5T_NATIVE_UINT8, H5P_DEFAULT, base, len, buf->data) < 0)
        return si_error(SI_ERR_IO,
                        "%s: cannot read /images/data bytes [%llu, %llu) (images %llu..%llu)",
                        s->path, (unsigned long long)base, (unsigned long long)(base + len),
                        (unsigned long long)first, (unsigned long long)(first + n - 1));
    buf->len = (size_t)len;
    for (uint64_t j = 0; j <= n; j++) off[j] -= base;
    return SI_OK;
}

/* Borrows s; ids[0..n) receive malloc'ed strings the caller frees (NULL on failure). */
si_status si_imageset_read_ids(si_imageset *s, uint64_t first, uint32_t n, char **ids) {
    for (uint32_t j = 0; j < n; j++) ids[j] = NULL;
    si_status st = check_range(s, first, n);
    if (st != SI_OK || n == 0) return st;
    hid_t mt = H5Tcopy(H5T_C_S1);
    H5Tset_size(mt, H5T_VARIABLE);
    H5Tset_cset(mt, s->ids_cset);
    herr_t e = read_range(s->ids, mt, s->dxpl, first, n, ids);
    H5Tclose(mt);
    if (e < 0) {
        /* what a failed read left in ids is unknown (freed or not): forget it, a leak on a
         * broken file being better than a double free */
        for (uint32_t j = 0; j < n; j++) ids[j] = NULL;
        return si_error(SI_ERR_IO, "%s: cannot read /images/ids[%llu..%llu]", s->path,
                        (unsigned long long)first, (unsigned long long)(first + n - 1));
    }
    /* an element never written reads as NULL; callers get "" rather than a NULL to check */
    for (uint32_t j = 0; j < n; j++)
        if (!ids[j]) ids[j] = si_xstrdup("");
    return SI_OK;
}

/* Frees ids[0..n) and sets them to NULL; accepts NULL entries. */
void si_imageset_free_ids(char **ids, uint32_t n) {
    if (!ids) return;
    for (uint32_t j = 0; j < n; j++) {
        free(ids[j]);
        ids[j] = NULL;
    }
}
