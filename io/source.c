/* Image sources (layouts in source.h): opening and closing a source, and the open-file cache.
 * Opening does all the checking: every file is opened once, its layout detected (or the forced
 * one verified, source_probe.c), its dataset names resolved, its count and shape read and
 * compared with the first file's, so that a read (source_read.c) never meets a surprise it could
 * have been told about at start. Every dataset is opened through the source's guarded access
 * list (h5util.h): nothing outside the file (or, when allowed, its directory) is ever read. */
#include "io/source_internal.h"

#include "io/h5util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* Opens path read-only into *fid, with a message for each way it can fail. Only a regular file
 * is opened: HDF5 would block forever opening a FIFO, and read a device without end. */
si_status src_h5_open(const char *path, hid_t *fid) {
    *fid = H5I_INVALID_HID;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT) return si_error(SI_ERR_IO, "%s: no such file", path);
        return si_error(SI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    if (S_ISDIR(sb.st_mode)) return si_error(SI_ERR_IO, "%s: is a directory", path);
    if (!S_ISREG(sb.st_mode)) return si_error(SI_ERR_IO, "%s: not a regular file", path);
    char why[256];
    htri_t is = H5Fis_hdf5(path);
    if (is < 0)
        return si_error(SI_ERR_IO, "%s: cannot read the file%s%s", path,
                        si_h5_storage_fault(why, sizeof why) ? ": " : "",
                        si_h5_storage_fault(why, sizeof why) ? why : "");
    if (is == 0) {
        /* H5Fis_hdf5 says "no" when reading the signature failed too: ask read() itself */
        int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        char b[8];
        ssize_t got = fd >= 0 ? read(fd, b, sizeof b) : -1;
        int err = errno;
        if (fd >= 0) close(fd);
        if (got < 0)
            return si_error(SI_ERR_IO, "%s: cannot read the file: %s", path, strerror(err));
        return si_error(SI_ERR_FORMAT, "%s: not an HDF5 file", path);
    }
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
#if H5_VERSION_GE(1, 10, 7)
    /* Lustre mounted without flock fails HDF5's lock; read-only loses nothing */
    H5Pset_file_locking(fapl, true, true);
#endif
    *fid = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    bool fault = *fid < 0 && si_h5_storage_fault(why, sizeof why);
    H5Pclose(fapl);
    if (*fid < 0 && fault) return si_error(SI_ERR_IO, "%s: cannot read the file: %s", path, why);
    if (*fid < 0) return si_error(SI_ERR_IO, "%s: HDF5 cannot open the file", path);
    return SI_OK;
}

static uint64_t mul_sat(uint64_t a, uint64_t b) {
    return b && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

/* The bytes d declares (its extent times its type's size), saturating; 0 for a dataset whose
 * storage is not in its own file (external raw storage, virtual: HDF5 counts none there). */
static uint64_t declared_bytes(hid_t d) {
    hid_t dcpl = H5Dget_create_plist(d);
    bool own = dcpl >= 0 && H5Pget_external_count(dcpl) == 0 && H5Pget_layout(dcpl) != H5D_VIRTUAL;
    if (dcpl >= 0) H5Pclose(dcpl);
    if (!own) return 0;
    hid_t t = H5Dget_type(d), sp = H5Dget_space(d);
    hsize_t dims[H5S_MAX_RANK];
    int r = sp >= 0 ? H5Sget_simple_extent_dims(sp, dims, NULL) : -1;
    size_t es = t >= 0 ? H5Tget_size(t) : 0;
    uint64_t bytes = r >= 0 ? es : 0;
    for (int i = 0; i < r; i++) bytes = mul_sat(bytes, dims[i]);
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    return bytes;
}

/* Bytes of one chunk of d (0 when it is not chunked), saturating; *span: the bytes of the chunks
 * one row of d (one image: its index along the first dimension) lies in. */
static uint64_t chunk_bytes(hid_t d, uint64_t *span) {
    hid_t dcpl = H5Dget_create_plist(d), t = H5Dget_type(d), sp = H5Dget_space(d);
    uint64_t bytes = 0, per_row = 1;
    if (dcpl >= 0 && t >= 0 && sp >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED) {
        hsize_t ch[H5S_MAX_RANK], dims[H5S_MAX_RANK];
        int r = H5Pget_chunk(dcpl, H5S_MAX_RANK, ch);
        int rd = H5Sget_simple_extent_dims(sp, dims, NULL);
        bytes = H5Tget_size(t);
        for (int i = 0; i < r; i++) {
            bytes = mul_sat(bytes, ch[i]);
            if (i > 0 && i < rd && ch[i]) per_row = mul_sat(per_row, (dims[i] + ch[i] - 1) / ch[i]);
        }
    }
    *span = mul_sat(bytes, per_row);
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    if (dcpl >= 0) H5Pclose(dcpl);
    return bytes;
}

si_status src_open_dataset(si_source *s, const src_file *f, const char *name, size_t cache_bytes,
                           hid_t *d) {
    s->guard.refused[0] = '\0';
    *d = H5Dopen2(f->file, name, s->dapl);
    if (*d < 0 && src_fault(s)) return src_io_error(s, f, name);
    if (*d < 0 && s->guard.refused[0])
        return si_error(SI_ERR_UNSUPPORTED,
                        "%s: %s is reached through %s: refused (pass --allow-external to follow "
                        "links to files inside the file's own directory)",
                        f->path, name, s->guard.refused);
    if (*d < 0) return si_error(SI_ERR_FORMAT, "%s: %s is not a dataset", f->path, name);
    si_status st = si_h5_check_storage(*d, &s->guard, f->path, name);
    uint64_t span = 0, chunk = st == SI_OK ? chunk_bytes(*d, &span) : 0;
    if (chunk > MAX_CHUNK_BYTES)
        st = si_error(SI_ERR_UNSUPPORTED,
                      "%s: %s is stored in chunks of %.1f MiB (uncompressed), and reading one "
                      "image decompresses a whole chunk: at most %zu MiB are read; rewrite it in "
                      "smaller chunks (h5repack -l %s:CHUNK=...)",
                      f->path, name, (double)chunk / 1048576.0, MAX_CHUNK_BYTES >> 20, name);
    /* A dataset that declares far more than it stores was mostly never written: HDF5 would make
     * up each unwritten element from the fill value, as images and ids, at the cost of whole
     * chunks per image (a set declaring 4 trillion images in 63 KB: 60 MiB of fill for each).
     * gzip, the most any HDF5 filter here compresses, stays under 1:1100. */
    uint64_t declared = st == SI_OK ? declared_bytes(*d) : 0, stored = H5Dget_storage_size(*d);
    if (st == SI_OK && declared > ((uint64_t)64 << 20) && declared / 4096 > stored)
        st = si_error(SI_ERR_FORMAT,
                      "%s: %s declares %.3g bytes and stores %llu: most of it was never written "
                      "(an export cut short, or a file made to look larger)",
                      f->path, name, (double)declared, (unsigned long long)stored);
    if (st != SI_OK) {
        H5Dclose(*d);
        *d = H5I_INVALID_HID;
        return st;
    }
    /* HDF5's default cache (1 MiB) keeps no bigger chunk, and a chunk that straddles two
     * batches would be decompressed twice: room for two; and where an image lies in several
     * chunks (dense sets chunked across the pixels: h5py's default for 224x224 photos is
     * (3125, 7, 14, 1)), room for all of them up to MAX_CHUNK_BYTES, so that the next image's
     * read finds them (a read image by image otherwise reads them all again each time). */
    if (chunk <= (1u << 19) && span <= (1u << 20)) return SI_OK;
    size_t want = 2 * (size_t)chunk;
    if (span > want)
        want = span < MAX_CHUNK_BYTES ? (size_t)span : MAX_CHUNK_BYTES;
    else if (want > cache_bytes)
        want = cache_bytes;
    hid_t dapl = H5Pcopy(s->dapl);
    if (dapl >= 0 && H5Pset_chunk_cache(dapl, 12503, want, 0.75) >= 0) {
        hid_t d2 = H5Dopen2(f->file, name, dapl);
        if (d2 >= 0) {
            H5Dclose(*d);
            *d = d2;
        }
    }
    if (dapl >= 0) H5Pclose(dapl);
    return SI_OK;
}

void src_mark_open(si_source *s, src_file *f) {
    if (!f->is_open) s->nopen++;
    f->is_open = true;
    f->last_use = ++s->tick;
}

void src_close_handles(si_source *s, src_file *f) {
    if (f->data >= 0) H5Dclose(f->data);
    if (f->offsets >= 0) H5Dclose(f->offsets);
    if (f->ids >= 0) H5Dclose(f->ids);
    if (f->file >= 0) H5Fclose(f->file);
    f->data = f->offsets = f->ids = f->file = H5I_INVALID_HID;
    if (f->is_open) s->nopen--;
    f->is_open = false;
}

/* Opens dataset `name` of f (whose file is open) into *d. */
static si_status open_dataset(si_source *s, src_file *f, const char *name, size_t cache, hid_t *d) {
    if (!src_path_exists(s, f->file, name)) {
        if (s->fault[0]) return src_io_error(s, f, name);
        return si_error(SI_ERR_FORMAT, "%s: no dataset %s", f->path, name);
    }
    return src_open_dataset(s, f, name, cache, d);
}

/* Opens and checks the ids dataset f->ids_name (set by the caller), which must hold f->n
 * strings or integers; fills ids_kind and what reading needs. */
static si_status open_ids(si_source *s, src_file *f) {
    si_status st = open_dataset(s, f, f->ids_name, INDEX_CACHE_BYTES, &f->ids);
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
    if (f->ids_kind == IDS_FSTR && f->ids_size > 4096)
        return si_error(SI_ERR_UNSUPPORTED,
                        "%s: ids dataset %s holds strings of %zu bytes each (ids are names: at "
                        "most 4096 bytes)",
                        f->path, f->ids_name, f->ids_size);
    return SI_OK;
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

/* shardinfer's own /images group: a newer format than ours, or a count that disagrees with the
 * offsets, is refused rather than misread. */
static si_status check_pack_attrs(src_file *f, uint64_t n) {
    if (strcmp(f->data_name, "/images/data") != 0) return SI_OK;
    static const char *const names[2] = {"format_version", "count"};
    for (int i = 0; i < 2; i++) {
        if (H5Aexists_by_name(f->file, "/images", names[i], H5P_DEFAULT) <= 0) continue;
        int64_t v = -1;
        hid_t a = H5Aopen_by_name(f->file, "/images", names[i], H5P_DEFAULT, H5P_DEFAULT);
        hid_t sp = a >= 0 ? H5Aget_space(a) : H5I_INVALID_HID;
        bool scalar = sp >= 0 && H5Sget_simple_extent_npoints(sp) == 1;
        herr_t e = a >= 0 && scalar ? H5Aread(a, H5T_NATIVE_INT64, &v) : -1;
        if (sp >= 0) H5Sclose(sp);
        if (a >= 0) H5Aclose(a);
        if (e < 0)
            return si_error(SI_ERR_FORMAT, "%s: /images attribute %s is not an integer", f->path,
                            names[i]);
        if (i == 0 && v > SI_PACK_FORMAT_VERSION)
            return si_error(SI_ERR_UNSUPPORTED,
                            "%s: image set format_version %lld is newer than this shardinfer's "
                            "(%d)",
                            f->path, (long long)v, SI_PACK_FORMAT_VERSION);
        if (i == 1 && (v < 0 || (uint64_t)v != n))
            return si_error(SI_ERR_FORMAT,
                            "%s: /images attribute count (%lld) disagrees with %s (%llu images)",
                            f->path, (long long)v, f->offsets_name, (unsigned long long)n);
    }
    return SI_OK;
}

/* Packed: a 1-D uint8 data dataset and N+1 integer offsets from 0 to its size. *n gets the
 * image count. */
static si_status check_packed(si_source *s, src_file *f, int rank, const hsize_t dims[4],
                              const char *ts, uint64_t *n) {
    hid_t t = H5Dget_type(f->data);
    bool u8 = t >= 0 && src_is_u8(t);
    if (t >= 0) H5Tclose(t);
    if (!u8 || rank != 1)
        return si_error(SI_ERR_FORMAT, "%s: packed data dataset %s is %s: expected 1-D uint8",
                        f->path, f->data_name, ts);
    f->total = dims[0];
    si_status st = open_dataset(s, f, f->offsets_name, INDEX_CACHE_BYTES, &f->offsets);
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
    if (read_u64(f->offsets, 0, &first) < 0 || read_u64(f->offsets, *n, &last) < 0) {
        if (src_fault(s)) return src_io_error(s, f, f->offsets_name);
        return si_error(SI_ERR_IO, "%s: cannot read %s", f->path, f->offsets_name);
    }
    if (first != 0 || last != f->total)
        return si_error(SI_ERR_FORMAT,
                        "%s: %s runs from %llu to %llu, expected 0 to %llu (the size of "
                        "%s)",
                        f->path, f->offsets_name, (unsigned long long)first,
                        (unsigned long long)last, (unsigned long long)f->total, f->data_name);
    return check_pack_attrs(f, *n);
}

/* Dense: a 4-D uint8 dataset of non-empty images of at most the record cap, whose per-image
 * shape has not changed since the first open. */
static si_status check_dense(const si_source *s, src_file *f, int kind, const hsize_t dims[4],
                             const char *ts, uint64_t n_expected) {
    if (kind != CAND_DENSE)
        return si_error(SI_ERR_FORMAT,
                        "%s: %s is %s: a dense image set needs a 4-D uint8 dataset "
                        "(N, H, W, C) or (N, C, H, W)",
                        f->path, f->data_name, ts);
    uint64_t img = 1;
    for (int i = 1; i < 4; i++)
        img = dims[i] && img > UINT64_MAX / dims[i] ? UINT64_MAX : img * dims[i];
    if (img == 0 || img > s->max_record)
        return si_error(SI_ERR_UNSUPPORTED, "%s: %s holds images of [%llu, %llu, %llu] bytes: %s",
                        f->path, f->data_name, (unsigned long long)dims[1],
                        (unsigned long long)dims[2], (unsigned long long)dims[3],
                        img == 0 ? "empty" : "each over the record cap (--max-record-bytes)");
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
static si_status open_data(si_source *s, src_file *f, int layout, uint64_t n_expected,
                           uint64_t *n) {
    si_status st = SI_OK;
    char ts[160];
    hsize_t dims[4] = {0};
    if (f->file < 0 && (st = src_h5_open(f->path, &f->file)) != SI_OK) return st;
    if ((st = open_dataset(s, f, f->data_name, DATA_CACHE_BYTES, &f->data)) != SI_OK) return st;
    int kind = src_classify(f->data, ts, sizeof ts, NULL);
    int rank = src_dims_of(f->data, dims);
    if (layout == SI_LAYOUT_PACKED) return check_packed(s, f, rank, dims, ts, n);
    if (layout == SI_LAYOUT_VLEN) {
        if (kind != CAND_VLEN)
            return si_error(SI_ERR_FORMAT,
                            "%s: %s is %s: a vlen image set needs a 1-D variable-length uint8 "
                            "dataset (h5py.vlen_dtype(numpy.uint8))",
                            f->path, f->data_name, ts);
        *n = dims[0];
        return SI_OK;
    }
    if ((st = check_dense(s, f, kind, dims, ts, n_expected)) != SI_OK) return st;
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
    if ((st = src_guard_file(s, f)) != SI_OK) return st;
    if ((st = open_data(s, f, layout, n_expected, &n)) != SI_OK) return st;
    if (n_expected != UINT64_MAX && n != n_expected)
        return si_error(SI_ERR_FORMAT, "%s: %s now holds %llu images, %llu when the set was opened",
                        f->path, f->data_name, (unsigned long long)n,
                        (unsigned long long)n_expected);
    f->n = n;
    if (f->ids_name && (st = open_ids(s, f)) != SI_OK) return st;
    return SI_OK;
}

/* HDF5's allocator for variable-length data: each buffer is noted in s->live until freed. */
static void *vl_alloc(size_t size, void *info) {
    si_source *s = info;
    if (s->live.n == s->live.cap) {
        size_t cap = s->live.cap ? 2 * s->live.cap : 256;
        void **p = realloc(s->live.p, cap * sizeof *p);
        if (!p) return NULL;
        s->live.p = p;
        s->live.cap = cap;
    }
    void *b = malloc(size ? size : 1);
    if (b) s->live.p[s->live.n++] = b;
    return b;
}

static void vl_free(void *b, void *info) {
    si_source *s = info;
    if (!b) return;
    for (size_t i = s->live.n; i-- > 0;) {
        if (s->live.p[i] != b) continue;
        s->live.p[i] = s->live.p[--s->live.n];
        break;
    }
    free(b);
}

hid_t src_vl_dxpl(si_source *s) {
    hid_t x = H5Pcreate(H5P_DATASET_XFER);
    if (x >= 0 && H5Pset_vlen_mem_manager(x, vl_alloc, s, vl_free, s) < 0) {
        H5Pclose(x);
        return H5I_INVALID_HID;
    }
    return x;
}

void src_vl_done(si_source *s, bool keep) {
    for (size_t i = 0; !keep && i < s->live.n; i++) free(s->live.p[i]);
    s->live.n = 0;
}

bool src_fault(si_source *s) {
    bool fault = si_h5_storage_fault(s->fault, sizeof s->fault);
    if (!fault) s->fault[0] = '\0';
    return fault;
}

si_status src_io_error(const si_source *s, const src_file *f, const char *what) {
    return si_error(SI_ERR_FAULT, "%s: I/O error reading %s: %s", f->path, what, s->fault);
}

si_status src_guard_file(si_source *s, const src_file *f) {
    s->fault[0] = '\0';
    snprintf(s->guard.dir, sizeof s->guard.dir, "%s", f->dir);
    if (s->guard.allow && H5Pset_elink_prefix(s->dapl, f->dir) < 0)
        return si_error(SI_ERR_INTERNAL, "%s: cannot set HDF5's external link prefix", f->path);
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
    si_h5_guard g = {0};
    si_status st = si_h5_guard_dir(&g, f->path);
    if (st != SI_OK) return st;
    f->dir = si_xstrdup(g.dir);
    st = src_probe(s, f, o, &layout, dd);
    if (st != SI_OK) {
        src_close_handles(s, f);
        return st;
    }
    int h = 0, w = 0, c = 0;
    /* check_dense bounded each image by the record cap, so the dims fit an int */
    if (layout == SI_LAYOUT_DENSE_NHWC) h = (int)dd[1], w = (int)dd[2], c = (int)dd[3];
    if (layout == SI_LAYOUT_DENSE_NCHW) c = (int)dd[1], h = (int)dd[2], w = (int)dd[3];
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
    s->max_record = o->max_record ? o->max_record : SI_SOURCE_MAX_RECORD;
    s->guard.allow = o->allow_external;
    s->files = si_xcalloc((size_t)l.n, sizeof *s->files);
    s->vlen_u8 = H5Tvlen_create(H5T_NATIVE_UINT8);
    s->vlen_ref = si_h5_vlen_ref_type();
    s->vl_dxpl = src_vl_dxpl(s);
    s->dapl = si_h5_guarded_access(&s->guard);
    if (s->vlen_u8 < 0 || s->vlen_ref < 0 || s->vl_dxpl < 0 || s->dapl < 0) {
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
        free(f->dir);
    }
    free(s->files);
    if (s->vlen_u8 >= 0) H5Tclose(s->vlen_u8);
    src_vl_done(s, false);
    free(s->live.p);
    if (s->vl_dxpl >= 0) H5Pclose(s->vl_dxpl);
    if (s->dapl >= 0) H5Pclose(s->dapl);
    free(s->vl);
    free(s->big);
    free(s->refs);
    free(s->fine);
    si_bytes_free(&s->scratch);
    si_bytes_free(&s->one);
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
