/* Image sources (layouts in source.h): opening and closing a source, and the open-file cache.
 * Opening does all the checking: every file is opened once, its layout detected (or the forced
 * one verified, source_probe.c), its dataset names resolved, its count and shape read and
 * compared with the first file's, so that a read (source_read.c) never meets a surprise it could
 * have been told about at start. The packed layout with its default names is read through
 * imageset.c; the other layouts (and packed sets with other dataset names) are read here.
 * A source belongs to one thread: its scratch buffers and open-file cache are not locked. */
#include "io/source_internal.h"

#include "io/h5util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* --- names ------------------------------------------------------------------------------------ */

const char *si_source_layout_name(int layout) {
    switch (layout) {
    case SI_LAYOUT_AUTO: return "auto";
    case SI_LAYOUT_PACKED: return "packed";
    case SI_LAYOUT_VLEN: return "vlen";
    case SI_LAYOUT_DENSE_NHWC: return "dense-nhwc";
    case SI_LAYOUT_DENSE_NCHW: return "dense-nchw";
    default: return "unknown";
    }
}

/* Borrows name; *layout gets the value. */
si_status si_source_layout_parse(const char *name, int *layout) {
    for (int l = SI_LAYOUT_AUTO; l <= SI_LAYOUT_DENSE_NCHW; l++) {
        if (strcmp(name, si_source_layout_name(l)) == 0) {
            *layout = l;
            return SI_OK;
        }
    }
    return si_error(SI_ERR_ARG,
                    "layout '%s': expected auto, packed, vlen, dense-nhwc or dense-nchw", name);
}

/* --- opening one HDF5 file -------------------------------------------------------------------- */

/* Opens path read-only into *fid, with a message for each way it can fail. */
si_status src_h5_open(const char *path, hid_t *fid) {
    *fid = H5I_INVALID_HID;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT) return si_error(SI_ERR_IO, "%s: no such file", path);
        return si_error(SI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    if (S_ISDIR(sb.st_mode)) return si_error(SI_ERR_IO, "%s: is a directory", path);
    htri_t is = H5Fis_hdf5(path);
    if (is < 0) return si_error(SI_ERR_IO, "%s: cannot read the file", path);
    if (is == 0) return si_error(SI_ERR_FORMAT, "%s: not an HDF5 file", path);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
#if H5_VERSION_GE(1, 10, 7)
    /* as in imageset.c: Lustre mounted without flock fails HDF5's lock; read-only loses nothing */
    H5Pset_file_locking(fapl, true, true);
#endif
    *fid = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (*fid < 0) return si_error(SI_ERR_IO, "%s: HDF5 cannot open the file", path);
    return SI_OK;
}

void src_mark_open(si_source *s, src_file *f) {
    if (!f->is_open) s->nopen++;
    f->is_open = true;
    f->last_use = ++s->tick;
}

void src_close_handles(si_source *s, src_file *f) {
    si_imageset_close(f->set);
    f->set = NULL;
    if (f->data >= 0) H5Dclose(f->data);
    if (f->offsets >= 0) H5Dclose(f->offsets);
    if (f->ids >= 0) H5Dclose(f->ids);
    if (f->file >= 0) H5Fclose(f->file);
    f->data = f->offsets = f->ids = f->file = H5I_INVALID_HID;
    if (f->is_open) s->nopen--;
    f->is_open = false;
}

/* Opens dataset `name` of f (whose file is open) into *d. */
static si_status open_dataset(src_file *f, const char *name, hid_t *d) {
    if (!src_path_exists(f->file, name))
        return si_error(SI_ERR_FORMAT, "%s: no dataset %s", f->path, name);
    *d = H5Dopen2(f->file, name, H5P_DEFAULT);
    if (*d < 0) return si_error(SI_ERR_FORMAT, "%s: %s is not a dataset", f->path, name);
    return SI_OK;
}

/* Opens and checks the ids dataset f->ids_name (set by the caller), which must hold f->n
 * strings or integers; fills ids_kind and what reading needs. */
static si_status open_ids(src_file *f) {
    si_status st = open_dataset(f, f->ids_name, &f->ids);
    if (st != SI_OK) return st;
    hsize_t dims[4] = {0};
    int rank = src_dims_of(f->ids, dims);
    hid_t t = H5Dget_type(f->ids);
    char ts[128] = "unreadable type";
    if (t >= 0) src_type_str(t, ts, sizeof ts);
    H5T_class_t cls = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
    if (cls == H5T_STRING) {
        f->ids_cset = H5Tget_cset(t);
        if (H5Tis_variable_str(t) > 0) {
            f->ids_kind = IDS_VSTR;
        } else {
            f->ids_kind = IDS_FSTR;
            f->ids_size = H5Tget_size(t);
        }
    } else if (cls == H5T_INTEGER) {
        f->ids_kind = IDS_INT;
        f->ids_sign = H5Tget_sign(t);
    }
    if (t >= 0) H5Tclose(t);
    if (cls != H5T_STRING && cls != H5T_INTEGER)
        return si_error(SI_ERR_FORMAT, "%s: ids dataset %s is %s: expected strings or integers",
                        f->path, f->ids_name, ts);
    if (rank != 1 || dims[0] != f->n)
        return si_error(SI_ERR_FORMAT,
                        "%s: ids dataset %s has %llu entries (rank %d), expected %llu (one per "
                        "image of %s)",
                        f->path, f->ids_name, (unsigned long long)dims[0], rank,
                        (unsigned long long)f->n, f->data_name);
    return SI_OK;
}

/* Opens a dense image dataset with a chunk cache that holds at least two chunks: HDF5's default
 * of 1 MiB keeps no chunk bigger than that, and a chunk that straddles two batches would then be
 * decompressed twice. Capped, since up to max_open files keep theirs. */
static hid_t open_dense(hid_t file, const char *name) {
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    if (d < 0) return d;
    hid_t dcpl = H5Dget_create_plist(d);
    size_t chunk_bytes = 0;
    if (dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED) {
        hsize_t ch[4] = {0};
        if (H5Pget_chunk(dcpl, 4, ch) == 4) chunk_bytes = ch[0] * ch[1] * ch[2] * ch[3];
    }
    if (dcpl >= 0) H5Pclose(dcpl);
    if (chunk_bytes <= (1u << 19)) return d;
    size_t want = 2 * chunk_bytes, cap = (size_t)16 << 20;
    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
    if (dapl >= 0 && H5Pset_chunk_cache(dapl, 521, want < cap ? want : cap, 0.75) >= 0) {
        hid_t d2 = H5Dopen2(file, name, dapl);
        if (d2 >= 0) {
            H5Dclose(d);
            d = d2;
        }
    }
    if (dapl >= 0) H5Pclose(dapl);
    return d;
}

/* Reads element i of the 1-D integer dataset d as uint64. */
static herr_t read_u64(hid_t d, uint64_t i, uint64_t *v) {
    hsize_t start = i, count = 1;
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1, &count, NULL);
    herr_t e = fs >= 0 && ms >= 0 ? 0 : -1;
    if (e >= 0) e = H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL);
    if (e >= 0) e = H5Dread(d, H5T_NATIVE_UINT64, ms, fs, H5P_DEFAULT, v);
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return e;
}

/* Packed data read here (not through imageset.c): a 1-D uint8 data dataset and N+1 integer
 * offsets from 0 to its size. *n gets the image count. */
static si_status check_packed(src_file *f, int rank, const hsize_t dims[4], const char *ts,
                              uint64_t *n) {
    hid_t t = H5Dget_type(f->data);
    bool u8 = t >= 0 && src_is_u8(t);
    if (t >= 0) H5Tclose(t);
    if (!u8 || rank != 1)
        return si_error(SI_ERR_FORMAT, "%s: packed data dataset %s is %s: expected 1-D uint8",
                        f->path, f->data_name, ts);
    f->total = dims[0];
    si_status st = open_dataset(f, f->offsets_name, &f->offsets);
    if (st != SI_OK) return st;
    hid_t ot = H5Dget_type(f->offsets);
    bool oint = ot >= 0 && H5Tget_class(ot) == H5T_INTEGER;
    if (ot >= 0) H5Tclose(ot);
    hsize_t od[4] = {0};
    if (!oint || src_dims_of(f->offsets, od) != 1 || od[0] < 1)
        return si_error(SI_ERR_FORMAT, "%s: offsets dataset %s must be 1-D integers (N+1 entries)",
                        f->path, f->offsets_name);
    *n = od[0] - 1;
    uint64_t first = 1, last = 0;
    if (read_u64(f->offsets, 0, &first) < 0 || read_u64(f->offsets, *n, &last) < 0)
        return si_error(SI_ERR_IO, "%s: cannot read %s", f->path, f->offsets_name);
    if (first != 0 || last != f->total)
        return si_error(SI_ERR_FORMAT,
                        "%s: %s runs from %llu to %llu, expected 0 to %llu (the size of "
                        "%s)",
                        f->path, f->offsets_name, (unsigned long long)first,
                        (unsigned long long)last, (unsigned long long)f->total, f->data_name);
    return SI_OK;
}

/* Dense: a 4-D uint8 dataset whose per-image shape has not changed since the first open. */
static si_status check_dense(src_file *f, int kind, const hsize_t dims[4], const char *ts,
                             uint64_t n_expected) {
    if (kind != CAND_DENSE)
        return si_error(SI_ERR_FORMAT,
                        "%s: %s is %s: a dense image set needs a 4-D uint8 dataset "
                        "(N, H, W, C) or (N, C, H, W)",
                        f->path, f->data_name, ts);
    if (n_expected != UINT64_MAX &&
        (dims[1] != f->dims[1] || dims[2] != f->dims[2] || dims[3] != f->dims[3]))
        return si_error(SI_ERR_FORMAT,
                        "%s: %s changed shape since the set was opened: [%llu, %llu, "
                        "%llu] per image, was [%llu, %llu, %llu]",
                        f->path, f->data_name, (unsigned long long)dims[1],
                        (unsigned long long)dims[2], (unsigned long long)dims[3],
                        (unsigned long long)f->dims[1], (unsigned long long)f->dims[2],
                        (unsigned long long)f->dims[3]);
    memcpy(f->dims, dims, sizeof f->dims);
    return SI_OK;
}

/* The data dataset of f opened here and checked for its layout; *n gets the image count. */
static si_status open_data(src_file *f, int layout, uint64_t n_expected, uint64_t *n) {
    si_status st = SI_OK;
    char ts[160];
    hsize_t dims[4] = {0};
    if (f->file < 0 && (st = src_h5_open(f->path, &f->file)) != SI_OK) return st;
    if (!src_path_exists(f->file, f->data_name))
        return si_error(SI_ERR_FORMAT, "%s: no dataset %s", f->path, f->data_name);
    f->data = src_is_dense(layout) ? open_dense(f->file, f->data_name)
                                   : H5Dopen2(f->file, f->data_name, H5P_DEFAULT);
    if (f->data < 0)
        return si_error(SI_ERR_FORMAT, "%s: %s is not a dataset", f->path, f->data_name);
    int kind = src_classify(f->data, ts, sizeof ts, NULL);
    int rank = src_dims_of(f->data, dims);
    if (layout == SI_LAYOUT_PACKED) return check_packed(f, rank, dims, ts, n);
    if (layout == SI_LAYOUT_VLEN) {
        if (kind != CAND_VLEN)
            return si_error(SI_ERR_FORMAT,
                            "%s: %s is %s: a vlen image set needs a 1-D variable-length uint8 "
                            "dataset (h5py.vlen_dtype(numpy.uint8))",
                            f->path, f->data_name, ts);
        *n = dims[0];
        return SI_OK;
    }
    if ((st = check_dense(f, kind, dims, ts, n_expected)) != SI_OK) return st;
    *n = dims[0];
    return SI_OK;
}

/* Opens the datasets of f by the names probe resolved and checks them. Used both by the first
 * open and by a reopen after eviction; n_expected is UINT64_MAX the first time, else the count
 * seen then: a file rewritten in between is an error, not a wrong answer (nor, for dense sets
 * whose images grew, a read past the end of the caller's buffer). */
si_status src_open_handles(si_source *s, src_file *f, int layout, uint64_t n_expected) {
    si_status st = SI_OK;
    uint64_t n = 0;
    src_mark_open(s, f);
    if (layout == SI_LAYOUT_PACKED && f->use_set) {
        if ((st = si_imageset_open(f->path, &f->set)) != SI_OK) return st;
        n = si_imageset_count(f->set);
    } else if ((st = open_data(f, layout, n_expected, &n)) != SI_OK) {
        return st;
    }
    if (n_expected != UINT64_MAX && n != n_expected)
        return si_error(SI_ERR_FORMAT, "%s: %s now holds %llu images, %llu when the set was opened",
                        f->path, f->data_name, (unsigned long long)n,
                        (unsigned long long)n_expected);
    f->n = n;
    if (f->ids_name && f->ids_kind != IDS_SET) {
        if (f->file < 0 && (st = src_h5_open(f->path, &f->file)) != SI_OK) return st;
        if ((st = open_ids(f)) != SI_OK) return st;
    }
    return SI_OK;
}

/* Closes the least recently used open files until fewer than max_open are open, sparing keep. */
void src_evict(si_source *s, const src_file *keep) {
    while (s->nopen >= s->max_open) {
        src_file *lru = NULL;
        for (int i = 0; i < s->nfiles; i++) {
            src_file *f = &s->files[i];
            if (f == keep || !f->is_open) continue;
            if (!lru || f->last_use < lru->last_use) lru = f;
        }
        if (!lru) return;
        src_close_handles(s, lru);
    }
}

si_status src_check_unchanged(const src_file *f) {
    struct stat now;
    const struct stat *was = &f->id;
    char what[160];
    if (stat(f->path, &now) != 0)
        snprintf(what, sizeof what, "it is gone (%s)", strerror(errno));
    else if (now.st_dev != was->st_dev || now.st_ino != was->st_ino)
        snprintf(what, sizeof what, "another file was put in its place (inode %llu, was %llu)",
                 (unsigned long long)now.st_ino, (unsigned long long)was->st_ino);
    else if (now.st_size != was->st_size)
        snprintf(what, sizeof what, "its size changed from %lld to %lld bytes",
                 (long long)was->st_size, (long long)now.st_size);
    else if (now.st_mtim.tv_sec != was->st_mtim.tv_sec ||
             now.st_mtim.tv_nsec != was->st_mtim.tv_nsec)
        snprintf(what, sizeof what, "it was modified while the run read it");
    else
        return SI_OK;
    return si_error(SI_ERR_FAULT,
                    "%s: the input changed under the run: %s (a fault of the storage, not of "
                    "its images: nothing read since is kept; restore the file)",
                    f->path, what);
}

/* Makes sure f is open (reopening it if evicted). */
si_status src_touch(si_source *s, src_file *f) {
    if (f->is_open) {
        f->last_use = ++s->tick;
        return SI_OK;
    }
    src_evict(s, f);
    si_status st = src_open_handles(s, f, s->layout, f->n);
    if (st != SI_OK) src_close_handles(s, f);
    return st;
}

/* --- open / close ----------------------------------------------------------------------------- */

/* A file after the first must agree with the first on layout, pixel shape and whether ids are
 * stored. */
static si_status check_same(const si_source *s, const src_file *f, int layout, int h, int w,
                            int c) {
    const src_file *f0 = &s->files[0];
    if (layout != s->layout)
        return si_error(SI_ERR_FORMAT,
                        "%s: layout %s (%s), but %s (the first file) is %s (%s): all files "
                        "of one source must share one layout",
                        f->path, si_source_layout_name(layout), f->data_name, f0->path,
                        si_source_layout_name(s->layout), f0->data_name);
    if (h != s->h || w != s->w || c != s->c)
        return si_error(SI_ERR_FORMAT,
                        "%s: %s holds %dx%dx%d images (HxWxC), but %s (the first file) "
                        "holds %dx%dx%d: all files of one source must share the pixel "
                        "shape",
                        f->path, f->data_name, h, w, c, f0->path, s->h, s->w, s->c);
    if (!f->ids_name != !f0->ids_name)
        return si_error(SI_ERR_FORMAT,
                        "%s: %s, but %s (the first file) %s: ids would mix stored names and "
                        "indices (name the ids dataset with --ids-dataset)",
                        f->path, f->ids_name ? "has ids" : "has no ids dataset", f0->path,
                        f0->ids_name ? "has them" : "has none");
    return SI_OK;
}

/* Probes file i of s (its path already set) and adds its images; the first file sets the
 * source's layout and pixel shape. */
static si_status add_file(si_source *s, int i, const si_source_opts *o) {
    src_file *f = &s->files[i];
    int layout = o->layout;
    hsize_t dd[4] = {0};
    if (stat(f->path, &f->id) != 0)
        return si_error(SI_ERR_IO, "%s: cannot stat: %s", f->path, strerror(errno));
    si_status st = src_probe(s, f, o, &layout, dd);
    if (st != SI_OK) {
        src_close_handles(s, f);
        return st;
    }
    int h = 0, w = 0, c = 0;
    if (layout == SI_LAYOUT_DENSE_NHWC) h = (int)dd[1], w = (int)dd[2], c = (int)dd[3];
    if (layout == SI_LAYOUT_DENSE_NCHW) c = (int)dd[1], h = (int)dd[2], w = (int)dd[3];
    /* an image must fit an int-sized buffer; each dim is at most 2^31 here, so the first
     * product cannot overflow and the second is checked by division */
    if (src_is_dense(layout) && (dd[1] == 0 || dd[2] == 0 || dd[1] > INT32_MAX ||
                                 dd[2] > INT32_MAX || dd[1] * dd[2] > (uint64_t)INT32_MAX / dd[3]))
        return si_error(SI_ERR_UNSUPPORTED,
                        "%s: %s: images of [%llu, %llu, %llu] bytes: empty or over 2 GiB", f->path,
                        f->data_name, (unsigned long long)dd[1], (unsigned long long)dd[2],
                        (unsigned long long)dd[3]);
    if (i == 0) {
        s->layout = layout;
        s->h = h, s->w = w, s->c = c;
    } else if ((st = check_same(s, f, layout, h, w, c)) != SI_OK) {
        return st;
    }
    f->start = s->total;
    s->total += f->n;
    return SI_OK;
}

/* Borrows spec and opts; on success *out owns everything and the caller closes it. */
si_status si_source_open(const char *spec, const si_source_opts *opts, si_source **out) {
    *out = NULL;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    si_source_opts defaults = {0};
    const si_source_opts *o = opts ? opts : &defaults;
    if (o->layout < SI_LAYOUT_AUTO || o->layout > SI_LAYOUT_DENSE_NCHW)
        return si_error(SI_ERR_ARG, "%s: unknown layout %d", spec, o->layout);
    src_path_list l = {0};
    const char *origin = "file";
    si_status st = src_expand(spec, &l, &origin);
    if (st != SI_OK) {
        src_list_free(&l);
        return st;
    }

    si_source *s = si_xcalloc(1, sizeof *s);
    s->spec = si_xstrdup(spec);
    s->origin = si_xstrdup(origin);
    s->forced = o->layout != SI_LAYOUT_AUTO;
    pthread_mutex_init(&s->mu, NULL);
    s->max_open = DEFAULT_MAX_OPEN;
    s->files = si_xcalloc((size_t)l.n, sizeof *s->files);
    s->vlen_u8 = H5Tvlen_create(H5T_NATIVE_UINT8);
    s->ids_dxpl = H5Pcreate(H5P_DATASET_XFER);
    if (s->vlen_u8 < 0 || s->ids_dxpl < 0 || si_h5_malloc_vlen(s->ids_dxpl) < 0) {
        st = si_error(SI_ERR_INTERNAL, "%s: cannot set up HDF5 types", spec);
        goto fail;
    }
    for (int i = 0; i < l.n; i++) {
        src_file *f = &s->files[i];
        f->path = l.paths[i];
        l.paths[i] = NULL;
        f->line = l.lines[i];
        f->file = f->data = f->offsets = f->ids = H5I_INVALID_HID;
        s->nfiles = i + 1;
        src_evict(s, NULL);
        if ((st = add_file(s, i, o)) != SI_OK) goto fail_file;
    }
    src_list_free(&l);
    *out = s;
    return SI_OK;
fail_file:
    if (s->files[s->nfiles - 1].line > 0)
        si_error_prefix(st, "%s line %d: ", spec, s->files[s->nfiles - 1].line);
    else if (l.n > 1 || strcmp(origin, "file") != 0)
        si_error_prefix(st, "%s: ", spec);
fail:
    src_list_free(&l);
    si_source_close(s);
    return st;
}

/* Borrows s; closes files at once if more than max_open are open. */
void si_source_set_max_open(si_source *s, int max_open) {
    s->max_open = max_open < 1 ? 1 : max_open;
    src_evict(s, NULL);
}

/* Closes every file and frees s; accepts NULL. */
void si_source_close(si_source *s) {
    if (!s) return;
    for (int i = 0; i < s->nfiles; i++) {
        src_file *f = &s->files[i];
        src_close_handles(s, f);
        free(f->path);
        free(f->data_name);
        free(f->offsets_name);
        free(f->ids_name);
    }
    free(s->files);
    if (s->vlen_u8 >= 0) H5Tclose(s->vlen_u8);
    if (s->ids_dxpl >= 0) H5Pclose(s->ids_dxpl);
    free(s->vl);
    si_bytes_free(&s->scratch);
    free(s->spec);
    free(s->origin);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

uint64_t si_source_count(const si_source *s) {
    return s->total;
}
int si_source_kind(const si_source *s) {
    return src_is_dense(s->layout) ? SI_SRC_PIXELS : SI_SRC_ENCODED;
}
int si_source_layout(const si_source *s) {
    return s->layout;
}
int si_source_files(const si_source *s) {
    return s->nfiles;
}
const char *si_source_spec(const si_source *s) {
    return s->spec;
}
bool si_source_pixel_shape(const si_source *s, int *h, int *w, int *c) {
    if (!src_is_dense(s->layout)) return false;
    if (h) *h = s->h;
    if (w) *w = s->w;
    if (c) *c = s->c;
    return true;
}
