/* Image sources (layouts in source.h). Opening does all the checking: every file is opened once,
 * its layout detected (or the forced one verified), its dataset names resolved, its count and
 * shape read and compared with the first file's, so that a read never meets a surprise it could
 * have been told about at start. The packed layout with its default names is read through
 * imageset.c; the other layouts (and packed sets with other dataset names) are read here.
 * A source belongs to one thread: its scratch buffers and open-file cache are not locked. */
#include "io/source.h"

#include "io/h5util.h"
#include "io/imageset.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

/* HDF5's default (sec2) driver holds one file descriptor per open file, and a set split into
 * thousands of files would exceed the usual limit of 1024 descriptors. Files beyond this many
 * are closed, least recently used first, and reopened by their resolved dataset names. */
#define DEFAULT_MAX_OPEN 64
#define DESCRIBE_SAMPLE  1000 /* images whose encoded size inspect samples */
#define DESCRIBE_FILES   5    /* file names inspect lists */
#define MAX_CANDIDATES   8    /* dataset names kept for the "several candidates" message */

#if H5_VERSION_GE(1, 12, 0)
#define vlen_reclaim(t, sp, dxpl, buf) H5Treclaim(t, sp, dxpl, buf)
#else
#define vlen_reclaim(t, sp, dxpl, buf) H5Dvlen_reclaim(t, sp, dxpl, buf)
#endif

enum { IDS_INDEX = 0, IDS_SET, IDS_VSTR, IDS_FSTR, IDS_INT };
enum { DENSE_UNDECIDED = -1 }; /* a 4-D dataset found, the order of its axes not yet known */

typedef struct {
    char *path;
    int line;        /* line in the list file, 0 otherwise: for messages */
    hsize_t dims[4]; /* dense: the data dataset's dims when first opened */
    uint64_t start;  /* global index of this file's first image */
    uint64_t n;      /* images */
    char *data_name; /* resolved at open, so a reopen needs no detection */
    char *offsets_name;
    char *ids_name; /* NULL: ids are the global index */
    int ids_kind;
    size_t ids_size; /* fixed-length strings: bytes per id */
    H5T_cset_t ids_cset;
    H5T_sign_t ids_sign;
    bool use_set;   /* packed with the default names: read through imageset.c */
    uint64_t total; /* packed read here: bytes in the data dataset */
    /* open state: is_open counts in s->nopen from the first handle tried to the close */
    bool is_open;
    si_imageset *set;
    hid_t file, data, offsets, ids;
    uint64_t last_use;
} src_file;

struct si_source {
    char *spec;
    char *origin; /* "list file", "directory", "pattern" or "file": for describe */
    int layout;
    bool forced, ambiguous;
    int h, w, c; /* dense pixel shape */
    src_file *files;
    int nfiles;
    uint64_t total;
    int max_open, nopen;
    uint64_t tick;
    hid_t vlen_u8;  /* memory type of one encoded record */
    hid_t ids_dxpl; /* malloc/free for variable-length id strings the caller frees */
    hvl_t *vl;      /* per-read scratch, reused: the per-batch path allocates nothing */
    size_t vl_cap;
    si_bytes scratch; /* NCHW transposes, packed appends, fixed-length ids */
};

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

static bool is_dense(int layout) {
    return layout == SI_LAYOUT_DENSE_NHWC || layout == SI_LAYOUT_DENSE_NCHW;
}

/* A malloc'ed absolute dataset path: h5py and users both write names with and without '/'. */
static char *abs_name(const char *name) {
    if (name[0] == '/') return si_xstrdup(name);
    size_t n = strlen(name);
    char *r = si_xmalloc(n + 2);
    r[0] = '/';
    memcpy(r + 1, name, n + 1);
    return r;
}

/* "/group/data" -> "/group/ids": where a user who stores ids beside the images puts them. */
static char *sibling_ids(const char *data) {
    const char *slash = strrchr(data, '/');
    size_t dir = slash ? (size_t)(slash - data) : 0;
    char *r = si_xmalloc(dir + 5);
    memcpy(r, data, dir);
    memcpy(r + dir, "/ids", 5);
    return r;
}

/* H5Lexists fails (rather than saying no) when a middle component is missing, and a name whose
 * middle component is a dataset is not an error either: walk the path one component at a time. */
static bool path_exists(hid_t file, const char *name) {
    size_t n = strlen(name);
    char *p = si_xmalloc(n + 1);
    memcpy(p, name, n + 1);
    bool ok = true;
    for (size_t i = 1; ok && i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        char saved = p[i];
        p[i] = '\0';
        ok = H5Lexists(file, p, H5P_DEFAULT) > 0 && H5Oexists_by_name(file, p, H5P_DEFAULT) > 0;
        p[i] = saved;
    }
    free(p);
    return ok;
}

/* Writes a type description ("uint8", "variable-length int32", "fixed-length string of 16 bytes
 * (ASCII)") into b. */
static void type_str(hid_t t, char *b, size_t cap) {
    size_t size = H5Tget_size(t);
    switch (H5Tget_class(t)) {
    case H5T_INTEGER:
        snprintf(b, cap, "%sint%zu", H5Tget_sign(t) == H5T_SGN_NONE ? "u" : "", size * 8);
        break;
    case H5T_FLOAT: snprintf(b, cap, "float%zu", size * 8); break;
    case H5T_STRING: {
        const char *cs = H5Tget_cset(t) == H5T_CSET_UTF8 ? "UTF-8" : "ASCII";
        if (H5Tis_variable_str(t) > 0)
            snprintf(b, cap, "variable-length string (%s)", cs);
        else
            snprintf(b, cap, "fixed-length string of %zu bytes (%s)", size, cs);
        break;
    }
    case H5T_VLEN: {
        char inner[96];
        hid_t super = H5Tget_super(t);
        if (super >= 0) {
            type_str(super, inner, sizeof inner);
            H5Tclose(super);
        } else {
            snprintf(inner, sizeof inner, "?");
        }
        snprintf(b, cap, "variable-length %s", inner);
        break;
    }
    case H5T_COMPOUND: snprintf(b, cap, "compound"); break;
    case H5T_ENUM: snprintf(b, cap, "enum"); break;
    case H5T_ARRAY: snprintf(b, cap, "array"); break;
    case H5T_OPAQUE: snprintf(b, cap, "opaque (%zu bytes)", size); break;
    case H5T_REFERENCE: snprintf(b, cap, "reference"); break;
    case H5T_BITFIELD: snprintf(b, cap, "bitfield"); break;
    default: snprintf(b, cap, "unknown type"); break;
    }
}

static bool is_u8(hid_t t) {
    return H5Tget_class(t) == H5T_INTEGER && H5Tget_size(t) == 1 && H5Tget_sign(t) == H5T_SGN_NONE;
}

/* Rank (or -1) and up to 4 dims of d. */
static int dims_of(hid_t d, hsize_t dims[4]) {
    hid_t sp = H5Dget_space(d);
    if (sp < 0) return -1;
    int r = H5Sget_simple_extent_ndims(sp);
    if (r >= 0 && r <= 4) H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    return r;
}

enum { CAND_NONE = 0, CAND_VLEN, CAND_DENSE };

/* What dataset d could be: a vlen or a dense image dataset, or neither; `why` describes it and
 * *near says whether it looks like what a user meant as images (a vlen of another type, a 4-D
 * array of another type), for the message that lists near misses. */
static int classify(hid_t d, char *why, size_t cap, bool *near) {
    hid_t t = H5Dget_type(d);
    hsize_t dims[4] = {0};
    int rank = dims_of(d, dims);
    int kind = CAND_NONE;
    char ts[128] = "unreadable type";
    if (t >= 0) type_str(t, ts, sizeof ts);
    bool vlen = t >= 0 && H5Tget_class(t) == H5T_VLEN;
    if (vlen) {
        hid_t super = H5Tget_super(t);
        bool u8 = super >= 0 && is_u8(super);
        if (super >= 0) H5Tclose(super);
        if (u8 && rank == 1) kind = CAND_VLEN;
    } else if (t >= 0 && is_u8(t) && rank == 4) {
        kind = CAND_DENSE;
    }
    if (near) *near = kind == CAND_NONE && (vlen || rank == 4);
    snprintf(why, cap, "%s, rank %d", ts, rank);
    if (t >= 0) H5Tclose(t);
    return kind;
}

/* --- candidate search ------------------------------------------------------------------------- */

typedef struct {
    bool want_vlen, want_dense;
    int n;                       /* candidates */
    char *names[MAX_CANDIDATES]; /* the first few */
    int kinds[MAX_CANDIDATES];
    char misses[512]; /* near misses: vlen or 4-D datasets of the wrong kind */
} cand_search;

static herr_t visit_one(hid_t obj, const char *name, H5O_type_t type, cand_search *cs) {
    if (type != H5O_TYPE_DATASET) return 0;
    hid_t d = H5Dopen2(obj, name, H5P_DEFAULT);
    if (d < 0) return 0;
    char why[160];
    bool near = false;
    int kind = classify(d, why, sizeof why, &near);
    H5Dclose(d);
    bool want = (kind == CAND_VLEN && cs->want_vlen) || (kind == CAND_DENSE && cs->want_dense);
    if (want) {
        if (cs->n < MAX_CANDIDATES) {
            cs->names[cs->n] = abs_name(name);
            cs->kinds[cs->n] = kind;
        }
        cs->n++;
    } else if (near || kind != CAND_NONE) {
        /* name it, so that the message says why the dataset the user meant was not taken */
        size_t used = strlen(cs->misses);
        if (used < sizeof cs->misses - 1)
            snprintf(cs->misses + used, sizeof cs->misses - used, "%s/%s (%s)", used ? "; " : "",
                     name, why);
    }
    return 0;
}

#if H5_VERSION_GE(1, 12, 0)
static herr_t visit_cb(hid_t obj, const char *name, const H5O_info2_t *info, void *op) {
    return visit_one(obj, name, info->type, op);
}
#else
static herr_t visit_cb(hid_t obj, const char *name, const H5O_info_t *info, void *op) {
    return visit_one(obj, name, info->type, op);
}
#endif

static void cand_free(cand_search *cs) {
    for (int i = 0; i < cs->n && i < MAX_CANDIDATES; i++) free(cs->names[i]);
}

/* --- opening one HDF5 file -------------------------------------------------------------------- */

/* Opens path read-only into *fid, with a message for each way it can fail. */
static si_status h5_open(const char *path, hid_t *fid) {
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

static void mark_open(si_source *s, src_file *f) {
    if (!f->is_open) s->nopen++;
    f->is_open = true;
    f->last_use = ++s->tick;
}

static void close_handles(si_source *s, src_file *f) {
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
    if (!path_exists(f->file, name))
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
    int rank = dims_of(f->ids, dims);
    hid_t t = H5Dget_type(f->ids);
    char ts[128] = "unreadable type";
    if (t >= 0) type_str(t, ts, sizeof ts);
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

/* Opens the datasets of f by the names probe resolved and checks them. Used both by the first
 * open and by a reopen after eviction; n_expected is UINT64_MAX the first time, else the count
 * seen then: a file rewritten in between is an error, not a wrong answer (nor, for dense sets
 * whose images grew, a read past the end of the caller's buffer). */
static si_status open_handles(si_source *s, src_file *f, int layout, uint64_t n_expected) {
    si_status st = SI_OK;
    char ts[160];
    uint64_t n = 0;
    mark_open(s, f);
    if (layout == SI_LAYOUT_PACKED && f->use_set) {
        if ((st = si_imageset_open(f->path, &f->set)) != SI_OK) return st;
        n = si_imageset_count(f->set);
    } else {
        hsize_t dims[4] = {0};
        if (f->file < 0 && (st = h5_open(f->path, &f->file)) != SI_OK) return st;
        if (!path_exists(f->file, f->data_name))
            return si_error(SI_ERR_FORMAT, "%s: no dataset %s", f->path, f->data_name);
        f->data = is_dense(layout) ? open_dense(f->file, f->data_name)
                                   : H5Dopen2(f->file, f->data_name, H5P_DEFAULT);
        if (f->data < 0)
            return si_error(SI_ERR_FORMAT, "%s: %s is not a dataset", f->path, f->data_name);
        int kind = classify(f->data, ts, sizeof ts, NULL);
        int rank = dims_of(f->data, dims);
        if (layout == SI_LAYOUT_PACKED) {
            hid_t t = H5Dget_type(f->data);
            bool u8 = t >= 0 && is_u8(t);
            if (t >= 0) H5Tclose(t);
            if (!u8 || rank != 1)
                return si_error(SI_ERR_FORMAT,
                                "%s: packed data dataset %s is %s: expected 1-D uint8", f->path,
                                f->data_name, ts);
            f->total = dims[0];
            if ((st = open_dataset(f, f->offsets_name, &f->offsets)) != SI_OK) return st;
            hid_t ot = H5Dget_type(f->offsets);
            bool oint = ot >= 0 && H5Tget_class(ot) == H5T_INTEGER;
            if (ot >= 0) H5Tclose(ot);
            hsize_t od[4] = {0};
            if (!oint || dims_of(f->offsets, od) != 1 || od[0] < 1)
                return si_error(SI_ERR_FORMAT,
                                "%s: offsets dataset %s must be 1-D integers (N+1 entries)",
                                f->path, f->offsets_name);
            n = od[0] - 1;
            uint64_t first = 1, last = 0;
            if (read_u64(f->offsets, 0, &first) < 0 || read_u64(f->offsets, n, &last) < 0)
                return si_error(SI_ERR_IO, "%s: cannot read %s", f->path, f->offsets_name);
            if (first != 0 || last != f->total)
                return si_error(SI_ERR_FORMAT,
                                "%s: %s runs from %llu to %llu, expected 0 to %llu (the size of "
                                "%s)",
                                f->path, f->offsets_name, (unsigned long long)first,
                                (unsigned long long)last, (unsigned long long)f->total,
                                f->data_name);
        } else if (layout == SI_LAYOUT_VLEN) {
            if (kind != CAND_VLEN)
                return si_error(SI_ERR_FORMAT,
                                "%s: %s is %s: a vlen image set needs a 1-D variable-length uint8 "
                                "dataset (h5py.vlen_dtype(numpy.uint8))",
                                f->path, f->data_name, ts);
            n = dims[0];
        } else {
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
            memcpy(f->dims, dims, sizeof dims);
            n = dims[0];
        }
    }
    if (n_expected != UINT64_MAX && n != n_expected)
        return si_error(SI_ERR_FORMAT, "%s: %s now holds %llu images, %llu when the set was opened",
                        f->path, f->data_name, (unsigned long long)n,
                        (unsigned long long)n_expected);
    f->n = n;
    if (f->ids_name && f->ids_kind != IDS_SET) {
        if (f->file < 0 && (st = h5_open(f->path, &f->file)) != SI_OK) return st;
        if ((st = open_ids(f)) != SI_OK) return st;
    }
    return SI_OK;
}

/* Closes the least recently used open files until fewer than max_open are open, sparing keep. */
static void evict(si_source *s, const src_file *keep) {
    while (s->nopen >= s->max_open) {
        src_file *lru = NULL;
        for (int i = 0; i < s->nfiles; i++) {
            src_file *f = &s->files[i];
            if (f == keep || !f->is_open) continue;
            if (!lru || f->last_use < lru->last_use) lru = f;
        }
        if (!lru) return;
        close_handles(s, lru);
    }
}

/* Makes sure f is open (reopening it if evicted). */
static si_status touch(si_source *s, src_file *f) {
    if (f->is_open) {
        f->last_use = ++s->tick;
        return SI_OK;
    }
    evict(s, f);
    si_status st = open_handles(s, f, s->layout, f->n);
    if (st != SI_OK) close_handles(s, f);
    return st;
}

/* --- detection -------------------------------------------------------------------------------- */

/* Finds out the layout of f (or checks the forced one), resolves its dataset names and opens it.
 * *layout: in, the wanted layout (AUTO or forced); out, the one found. dense shape in dd. */
static si_status probe(si_source *s, src_file *f, const si_source_opts *o, int *layout,
                       hsize_t dd[4]) {
    mark_open(s, f);
    si_status st = h5_open(f->path, &f->file);
    if (st != SI_OK) return st;
    int want = *layout;
    f->offsets_name = abs_name(o->offsets_dataset ? o->offsets_dataset : "/images/offsets");
    bool packed = want == SI_LAYOUT_PACKED;
    if (want == SI_LAYOUT_AUTO && o->offsets_dataset) {
        packed = true;
    } else if (want == SI_LAYOUT_AUTO && path_exists(f->file, f->offsets_name)) {
        /* a packed file may hold other datasets too: a named data dataset that is itself an
         * image dataset is read as one, the packed bytes otherwise */
        packed = true;
        if (o->data_dataset && path_exists(f->file, o->data_dataset)) {
            hid_t d = H5Dopen2(f->file, o->data_dataset, H5P_DEFAULT);
            char why[160];
            if (d >= 0 && classify(d, why, sizeof why, NULL) != CAND_NONE) packed = false;
            if (d >= 0) H5Dclose(d);
        }
    }
    if (packed) {
        *layout = SI_LAYOUT_PACKED;
        f->data_name = abs_name(o->data_dataset ? o->data_dataset : "/images/data");
        f->use_set = strcmp(f->data_name, "/images/data") == 0 &&
                     strcmp(f->offsets_name, "/images/offsets") == 0;
    } else if (o->data_dataset) {
        f->data_name = abs_name(o->data_dataset);
        if (!path_exists(f->file, f->data_name))
            return si_error(SI_ERR_FORMAT, "%s: no dataset %s (given with --data-dataset)", f->path,
                            f->data_name);
        hid_t d = H5Dopen2(f->file, f->data_name, H5P_DEFAULT);
        if (d < 0) return si_error(SI_ERR_FORMAT, "%s: %s is not a dataset", f->path, f->data_name);
        char why[160];
        int kind = classify(d, why, sizeof why, NULL);
        H5Dclose(d);
        if (kind == CAND_NONE)
            return si_error(SI_ERR_FORMAT,
                            "%s: %s is %s: expected variable-length uint8 (rank 1: encoded "
                            "images) or uint8 of rank 4 (pixels)",
                            f->path, f->data_name, why);
        if (want == SI_LAYOUT_AUTO) *layout = kind == CAND_VLEN ? SI_LAYOUT_VLEN : DENSE_UNDECIDED;
    } else {
        cand_search cs = {.want_vlen = want == SI_LAYOUT_AUTO || want == SI_LAYOUT_VLEN,
                          .want_dense = want == SI_LAYOUT_AUTO || is_dense(want)};
        herr_t e;
#if H5_VERSION_GE(1, 12, 0)
        e = H5Ovisit3(f->file, H5_INDEX_NAME, H5_ITER_INC, visit_cb, &cs, H5O_INFO_BASIC);
#else
        e = H5Ovisit2(f->file, H5_INDEX_NAME, H5_ITER_INC, visit_cb, &cs, H5O_INFO_BASIC);
#endif
        if (e < 0) {
            cand_free(&cs);
            return si_error(SI_ERR_FORMAT, "%s: cannot list the datasets in the file", f->path);
        }
        if (cs.n == 0) {
            const char *what = want == SI_LAYOUT_VLEN ? "a 1-D variable-length uint8 dataset"
                               : is_dense(want)
                                   ? "a 4-D uint8 dataset"
                                   : "/images/offsets (packed), a 1-D variable-length uint8 "
                                     "dataset (vlen) or a 4-D uint8 dataset (dense)";
            return si_error(SI_ERR_FORMAT, "%s: no image dataset: looked for %s%s%s", f->path, what,
                            cs.misses[0] ? "; not usable: " : "", cs.misses);
        }
        if (cs.n > 1) {
            char list[1024] = "";
            for (int i = 0; i < cs.n && i < MAX_CANDIDATES; i++) {
                size_t used = strlen(list);
                snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", cs.names[i]);
            }
            st = si_error(SI_ERR_ARG,
                          "%s: file has %d candidate image datasets: %s%s - pick one with "
                          "--data-dataset",
                          f->path, cs.n, list, cs.n > MAX_CANDIDATES ? ", ..." : "");
            cand_free(&cs);
            return st;
        }
        f->data_name = cs.names[0];
        if (want == SI_LAYOUT_AUTO)
            *layout = cs.kinds[0] == CAND_VLEN ? SI_LAYOUT_VLEN : DENSE_UNDECIDED;
    }
    /* dense: the order of the axes, from the dims unless forced */
    if (*layout == DENSE_UNDECIDED || is_dense(*layout)) {
        hid_t d = H5Dopen2(f->file, f->data_name, H5P_DEFAULT);
        int rank = d >= 0 ? dims_of(d, dd) : -1;
        if (d >= 0) H5Dclose(d);
        if (rank != 4)
            return si_error(SI_ERR_FORMAT, "%s: %s has rank %d: a dense set needs rank 4", f->path,
                            f->data_name, rank);
        bool last = dd[3] == 1 || dd[3] == 3, second = dd[1] == 1 || dd[1] == 3;
        if (*layout == DENSE_UNDECIDED) {
            if (!last && !second)
                return si_error(
                    SI_ERR_FORMAT,
                    "%s: %s is [%llu, %llu, %llu, %llu]: neither dim 3 (NHWC) nor dim 1 "
                    "(NCHW) is 1 or 3 channels",
                    f->path, f->data_name, (unsigned long long)dd[0], (unsigned long long)dd[1],
                    (unsigned long long)dd[2], (unsigned long long)dd[3]);
            *layout = last ? SI_LAYOUT_DENSE_NHWC : SI_LAYOUT_DENSE_NCHW;
            if (last && second) s->ambiguous = true;
        } else if ((*layout == SI_LAYOUT_DENSE_NHWC && !last) ||
                   (*layout == SI_LAYOUT_DENSE_NCHW && !second)) {
            return si_error(SI_ERR_FORMAT,
                            "%s: %s is [%llu, %llu, %llu, %llu]: %s needs %s of 1 or 3 channels",
                            f->path, f->data_name, (unsigned long long)dd[0],
                            (unsigned long long)dd[1], (unsigned long long)dd[2],
                            (unsigned long long)dd[3], si_source_layout_name(*layout),
                            *layout == SI_LAYOUT_DENSE_NHWC ? "dim 3" : "dim 1");
        }
    }
    /* ids: the named dataset (must exist), else an "ids" beside the images if there is one */
    if (o->ids_dataset) {
        f->ids_name = abs_name(o->ids_dataset);
        if (!path_exists(f->file, f->ids_name))
            return si_error(SI_ERR_FORMAT, "%s: no ids dataset %s", f->path, f->ids_name);
    } else {
        char *sib = sibling_ids(f->data_name);
        if (strcmp(sib, f->data_name) != 0 && path_exists(f->file, sib))
            f->ids_name = sib;
        else
            free(sib);
    }
    if (f->use_set && f->ids_name && strcmp(f->ids_name, "/images/ids") == 0) f->ids_kind = IDS_SET;
    if (f->use_set && (f->ids_kind == IDS_SET || !f->ids_name)) {
        H5Fclose(f->file); /* imageset.c opens its own */
        f->file = H5I_INVALID_HID;
    }
    return open_handles(s, f, *layout, UINT64_MAX);
}

/* --- the list of files ------------------------------------------------------------------------ */

typedef struct {
    char **paths;
    int *lines;
    int n, cap;
} path_list;

static void list_add(path_list *l, char *path, int line) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->paths = si_xrealloc(l->paths, (size_t)l->cap * sizeof *l->paths);
        l->lines = si_xrealloc(l->lines, (size_t)l->cap * sizeof *l->lines);
    }
    l->paths[l->n] = path;
    l->lines[l->n++] = line;
}

static void list_free(path_list *l) {
    for (int i = 0; i < l->n; i++) free(l->paths[i]);
    free(l->paths);
    free(l->lines);
}

static char *join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *r = si_xmalloc(a + b + 2);
    memcpy(r, dir, a);
    r[a] = '/';
    memcpy(r + a + 1, name, b + 1);
    return r;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool has_suffix(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a > b && strcasecmp(s + a - b, suf) == 0;
}

static si_status list_dir(const char *dir, path_list *l) {
    DIR *d = opendir(dir);
    if (!d) return si_error(SI_ERR_IO, "%s: cannot read the directory: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (!has_suffix(e->d_name, ".h5") && !has_suffix(e->d_name, ".hdf5")) continue;
        char *p = join(dir, e->d_name);
        struct stat sb;
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode))
            list_add(l, p, 0);
        else
            free(p);
    }
    closedir(d);
    if (l->n == 0) return si_error(SI_ERR_IO, "%s: directory has no *.h5 or *.hdf5 files", dir);
    qsort(l->paths, (size_t)l->n, sizeof *l->paths, cmp_str);
    return SI_OK;
}

/* A text file of paths: anything else (a JPEG given by mistake) is refused before its bytes
 * become a confusing "no such file" about a line of binary. */
static si_status list_file(const char *path, path_list *l) {
    FILE *fp = fopen(path, "r");
    if (!fp) return si_error(SI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    const char *slash = strrchr(path, '/');
    char *dir = NULL;
    if (slash) {
        dir = si_xmalloc((size_t)(slash - path) + 2);
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
        if (slash == path) strcpy(dir, "/");
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0;
    si_status st = SI_OK;
    while ((len = getline(&line, &cap, fp)) >= 0) {
        lineno++;
        if ((size_t)len != strlen(line) || len > 4096) {
            st = si_error(SI_ERR_FORMAT,
                          "%s: neither an HDF5 file nor a list file of HDF5 paths (line %d is "
                          "not text)",
                          path, lineno);
            break;
        }
        char *b = line, *e = line + len;
        while (b < e && (*b == ' ' || *b == '\t')) b++;
        while (e > b && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t')) e--;
        *e = '\0';
        if (*b == '\0' || *b == '#') continue;
        list_add(l, *b == '/' || !dir ? si_xstrdup(b) : join(dir, b), lineno);
    }
    free(line);
    free(dir);
    fclose(fp);
    if (st == SI_OK && l->n == 0)
        st = si_error(SI_ERR_FORMAT, "%s: list file names no HDF5 file", path);
    return st;
}

/* Expands spec into files; *origin gets what spec was. */
static si_status expand(const char *spec, path_list *l, const char **origin) {
    struct stat sb;
    if (stat(spec, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) {
            *origin = "directory";
            return list_dir(spec, l);
        }
        htri_t is = H5Fis_hdf5(spec);
        if (is > 0) {
            *origin = "file";
            list_add(l, si_xstrdup(spec), 0);
            return SI_OK;
        }
        *origin = "list file";
        return list_file(spec, l);
    }
    if (errno != ENOENT) return si_error(SI_ERR_IO, "%s: cannot open: %s", spec, strerror(errno));
    if (!strpbrk(spec, "*?[")) return si_error(SI_ERR_IO, "%s: no such file", spec);
    *origin = "pattern";
    glob_t g;
    int r = glob(spec, 0, NULL, &g);
    if (r == GLOB_NOMATCH) return si_error(SI_ERR_IO, "%s: pattern matches no file", spec);
    if (r != 0) {
        globfree(&g);
        return si_error(SI_ERR_IO, "%s: cannot expand the pattern", spec);
    }
    for (size_t i = 0; i < g.gl_pathc; i++) list_add(l, si_xstrdup(g.gl_pathv[i]), 0);
    globfree(&g);
    return SI_OK;
}

/* --- open / close ----------------------------------------------------------------------------- */

/* Borrows spec and opts; on success *out owns everything and the caller closes it. */
si_status si_source_open(const char *spec, const si_source_opts *opts, si_source **out) {
    *out = NULL;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    si_source_opts defaults = {0};
    const si_source_opts *o = opts ? opts : &defaults;
    if (o->layout < SI_LAYOUT_AUTO || o->layout > SI_LAYOUT_DENSE_NCHW)
        return si_error(SI_ERR_ARG, "%s: unknown layout %d", spec, o->layout);
    path_list l = {0};
    const char *origin = "file";
    si_status st = expand(spec, &l, &origin);
    if (st != SI_OK) {
        list_free(&l);
        return st;
    }

    si_source *s = si_xcalloc(1, sizeof *s);
    s->spec = si_xstrdup(spec);
    s->origin = si_xstrdup(origin);
    s->forced = o->layout != SI_LAYOUT_AUTO;
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
        evict(s, NULL);
        int layout = o->layout;
        hsize_t dd[4] = {0};
        st = probe(s, f, o, &layout, dd);
        if (st != SI_OK) {
            close_handles(s, f);
            goto fail_file;
        }
        int h = 0, w = 0, c = 0;
        if (layout == SI_LAYOUT_DENSE_NHWC) h = (int)dd[1], w = (int)dd[2], c = (int)dd[3];
        if (layout == SI_LAYOUT_DENSE_NCHW) c = (int)dd[1], h = (int)dd[2], w = (int)dd[3];
        /* an image must fit an int-sized buffer; each dim is at most 2^31 here, so the first
         * product cannot overflow and the second is checked by division */
        if (is_dense(layout) &&
            (dd[1] == 0 || dd[2] == 0 || dd[1] > INT32_MAX || dd[2] > INT32_MAX ||
             dd[1] * dd[2] > (uint64_t)INT32_MAX / dd[3])) {
            st = si_error(SI_ERR_UNSUPPORTED,
                          "%s: %s: images of [%llu, %llu, %llu] bytes: empty or over 2 GiB",
                          f->path, f->data_name, (unsigned long long)dd[1],
                          (unsigned long long)dd[2], (unsigned long long)dd[3]);
            goto fail_file;
        }
        if (i == 0) {
            s->layout = layout;
            s->h = h, s->w = w, s->c = c;
        } else {
            const src_file *f0 = &s->files[0];
            if (layout != s->layout) {
                st = si_error(SI_ERR_FORMAT,
                              "%s: layout %s (%s), but %s (the first file) is %s (%s): all files "
                              "of one source must share one layout",
                              f->path, si_source_layout_name(layout), f->data_name, f0->path,
                              si_source_layout_name(s->layout), f0->data_name);
                goto fail_file;
            }
            if (h != s->h || w != s->w || c != s->c) {
                st = si_error(SI_ERR_FORMAT,
                              "%s: %s holds %dx%dx%d images (HxWxC), but %s (the first file) "
                              "holds %dx%dx%d: all files of one source must share the pixel "
                              "shape",
                              f->path, f->data_name, h, w, c, f0->path, s->h, s->w, s->c);
                goto fail_file;
            }
            if (!f->ids_name != !f0->ids_name) {
                st = si_error(SI_ERR_FORMAT,
                              "%s: %s, but %s (the first file) %s: ids would mix stored names and "
                              "indices (name the ids dataset with --ids-dataset)",
                              f->path, f->ids_name ? "has ids" : "has no ids dataset", f0->path,
                              f0->ids_name ? "has them" : "has none");
                goto fail_file;
            }
        }
        f->start = s->total;
        s->total += f->n;
    }
    list_free(&l);
    *out = s;
    return SI_OK;
fail_file:
    if (s->files[s->nfiles - 1].line > 0)
        si_error_prefix(st, "%s line %d: ", spec, s->files[s->nfiles - 1].line);
    else if (l.n > 1 || strcmp(origin, "file") != 0)
        si_error_prefix(st, "%s: ", spec);
fail:
    list_free(&l);
    si_source_close(s);
    return st;
}

/* Borrows s; closes files at once if more than max_open are open. */
void si_source_set_max_open(si_source *s, int max_open) {
    s->max_open = max_open < 1 ? 1 : max_open;
    evict(s, NULL);
}

/* Closes every file and frees s; accepts NULL. */
void si_source_close(si_source *s) {
    if (!s) return;
    for (int i = 0; i < s->nfiles; i++) {
        src_file *f = &s->files[i];
        close_handles(s, f);
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
    free(s);
}

uint64_t si_source_count(const si_source *s) {
    return s->total;
}
int si_source_kind(const si_source *s) {
    return is_dense(s->layout) ? SI_SRC_PIXELS : SI_SRC_ENCODED;
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
    if (!is_dense(s->layout)) return false;
    if (h) *h = s->h;
    if (w) *w = s->w;
    if (c) *c = s->c;
    return true;
}

/* --- reading ---------------------------------------------------------------------------------- */

/* The file holding global index i (i < total): the last one starting at or before i, which skips
 * empty files since they start where the next one does. */
static int file_of(const si_source *s, uint64_t i) {
    int lo = 0, hi = s->nfiles; /* first file with start > i is in [lo, hi] */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (s->files[mid].start <= i)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo - 1;
}

static si_status check_range(const si_source *s, uint64_t first, uint64_t n) {
    if (first > s->total || n > s->total - first)
        return si_error(SI_ERR_ARG, "%s: images [%llu, %llu) requested, the source has %llu",
                        s->spec, (unsigned long long)first, (unsigned long long)(first + n),
                        (unsigned long long)s->total);
    return SI_OK;
}

/* Selects [lo, lo+m) along dim 0 of d (rank dims, the rest whole); caller closes *fs and *ms. */
static herr_t select_rows(hid_t d, int rank, uint64_t lo, uint64_t m, hid_t *fs, hid_t *ms) {
    hsize_t start[4] = {lo, 0, 0, 0}, count[4] = {m, 0, 0, 0};
    *fs = H5Dget_space(d);
    *ms = H5I_INVALID_HID;
    if (*fs < 0) return -1;
    if (rank > 1) {
        hsize_t dims[4];
        H5Sget_simple_extent_dims(*fs, dims, NULL);
        for (int k = 1; k < rank; k++) count[k] = dims[k];
    }
    *ms = H5Screate_simple(rank, count, NULL);
    if (*ms < 0) return -1;
    return H5Sselect_hyperslab(*fs, H5S_SELECT_SET, start, NULL, count, NULL);
}

static si_status read_fail(const src_file *f, const char *what, uint64_t lo, uint64_t m) {
    return si_error(SI_ERR_IO, "%s: cannot read %s[%llu..%llu] (global images %llu..%llu)", f->path,
                    what, (unsigned long long)lo, (unsigned long long)(lo + m - 1),
                    (unsigned long long)(f->start + lo),
                    (unsigned long long)(f->start + lo + m - 1));
}

/* Packed through imageset.c; appends at buf->len (a first segment is read in place). */
static si_status read_set(si_source *s, src_file *f, uint64_t lo, uint32_t m, si_bytes *buf,
                          uint64_t *off) {
    if (buf->len == 0) return si_imageset_read(f->set, lo, m, buf, off);
    si_status st = si_imageset_read(f->set, lo, m, &s->scratch, off);
    if (st != SI_OK) return st;
    size_t base = buf->len;
    if ((st = si_bytes_reserve(buf, base + s->scratch.len)) != SI_OK) return st;
    memcpy(buf->data + base, s->scratch.data, s->scratch.len);
    buf->len += s->scratch.len;
    for (uint32_t j = 0; j <= m; j++) off[j] += base;
    return SI_OK;
}

/* Packed with other dataset names: the same reads as imageset.c, appended at buf->len. */
static si_status read_packed(src_file *f, uint64_t lo, uint32_t m, si_bytes *buf, uint64_t *off) {
    hid_t fs, ms;
    herr_t e = select_rows(f->offsets, 1, lo, (uint64_t)m + 1, &fs, &ms);
    if (e >= 0) e = H5Dread(f->offsets, H5T_NATIVE_UINT64, ms, fs, H5P_DEFAULT, off);
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (e < 0) return read_fail(f, f->offsets_name, lo, (uint64_t)m + 1);
    for (uint32_t j = 0; j < m; j++)
        if (off[j + 1] < off[j])
            return si_error(SI_ERR_FORMAT, "%s: %s is not monotonic at image %llu", f->path,
                            f->offsets_name, (unsigned long long)(lo + j));
    if (off[m] > f->total)
        return si_error(SI_ERR_FORMAT, "%s: image %llu ends past the end of %s", f->path,
                        (unsigned long long)(lo + m - (m > 0)), f->data_name);
    uint64_t first = off[0], len = off[m] - first;
    size_t base = buf->len;
    si_status st = si_bytes_reserve(buf, base + (size_t)len);
    if (st != SI_OK) return st;
    if (len > 0) {
        e = select_rows(f->data, 1, first, len, &fs, &ms);
        if (e >= 0) e = H5Dread(f->data, H5T_NATIVE_UINT8, ms, fs, H5P_DEFAULT, buf->data + base);
        if (ms >= 0) H5Sclose(ms);
        if (fs >= 0) H5Sclose(fs);
        if (e < 0) return read_fail(f, f->data_name, lo, m);
    }
    buf->len = base + (size_t)len;
    for (uint32_t j = 0; j <= m; j++) off[j] = off[j] - first + base;
    return SI_OK;
}

/* vlen: one H5Dread of the range into hvl_t records, copied out and reclaimed. */
static si_status read_vlen(si_source *s, src_file *f, uint64_t lo, uint32_t m, si_bytes *buf,
                           uint64_t *off) {
    if (m > s->vl_cap) {
        free(s->vl);
        s->vl = si_xmalloc((size_t)m * sizeof *s->vl);
        s->vl_cap = m;
    }
    memset(s->vl, 0, (size_t)m * sizeof *s->vl);
    hid_t fs, ms;
    herr_t e = select_rows(f->data, 1, lo, m, &fs, &ms);
    if (e >= 0) e = H5Dread(f->data, s->vlen_u8, ms, fs, H5P_DEFAULT, s->vl);
    si_status st = SI_OK;
    if (e < 0) {
        /* what a failed read left allocated is unknown: leak rather than risk a double free */
        st = read_fail(f, f->data_name, lo, m);
    } else {
        size_t total = buf->len;
        for (uint32_t j = 0; j < m; j++) total += s->vl[j].len;
        st = si_bytes_reserve(buf, total);
        if (st == SI_OK) {
            size_t pos = buf->len;
            for (uint32_t j = 0; j < m; j++) {
                off[j] = pos;
                if (s->vl[j].len) memcpy(buf->data + pos, s->vl[j].p, s->vl[j].len);
                pos += s->vl[j].len;
            }
            off[m] = pos;
            buf->len = pos;
        }
        vlen_reclaim(s->vlen_u8, ms, H5P_DEFAULT, s->vl);
    }
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    return st;
}

/* dense: one hyperslab read of m images, NHWC straight into buf, NCHW through scratch. */
static si_status read_dense(si_source *s, src_file *f, uint64_t lo, uint32_t m, si_bytes *buf,
                            uint64_t *off) {
    size_t img = (size_t)s->h * s->w * s->c, base = buf->len;
    if (m > (SIZE_MAX - base) / (img ? img : 1))
        return si_error(SI_ERR_NOMEM, "%s: %u images of %zu bytes", f->path, m, img);
    size_t bytes = (size_t)m * img;
    si_status st = si_bytes_reserve(buf, base + bytes);
    if (st != SI_OK) return st;
    bool nchw = s->layout == SI_LAYOUT_DENSE_NCHW;
    if (nchw && (st = si_bytes_reserve(&s->scratch, bytes)) != SI_OK) return st;
    uint8_t *dst = nchw ? s->scratch.data : buf->data + base;
    hid_t fs, ms;
    herr_t e = select_rows(f->data, 4, lo, m, &fs, &ms);
    if (e >= 0 && m > 0) e = H5Dread(f->data, H5T_NATIVE_UINT8, ms, fs, H5P_DEFAULT, dst);
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (e < 0) return read_fail(f, f->data_name, lo, m);
    if (nchw) {
        size_t hw = (size_t)s->h * s->w;
        int c = s->c;
        for (uint32_t j = 0; j < m; j++) {
            const uint8_t *src = s->scratch.data + j * img; /* (C, H, W) */
            uint8_t *out = buf->data + base + j * img;      /* (H, W, C) */
            /* RGB: the planes read in step and written in sequence, faster than the strided
             * loop below */
            if (c == 3) {
                const uint8_t *r = src, *g = src + hw, *bl = src + 2 * hw;
                for (size_t p = 0; p < hw; p++) {
                    out[3 * p] = r[p];
                    out[3 * p + 1] = g[p];
                    out[3 * p + 2] = bl[p];
                }
            } else {
                for (int k = 0; k < c; k++)
                    for (size_t p = 0; p < hw; p++) out[p * c + k] = src[k * hw + p];
            }
        }
    }
    for (uint32_t j = 0; j <= m; j++) off[j] = base + j * img;
    buf->len = base + bytes;
    return SI_OK;
}

/* Borrows s; grows buf and fills off[0..n] (both owned by the caller). */
si_status si_source_read(si_source *s, uint64_t first, uint32_t n, si_bytes *buf, uint64_t *off) {
    si_status st = check_range(s, first, n);
    if (st != SI_OK) return st;
    buf->len = 0;
    off[0] = 0;
    uint32_t done = 0;
    while (done < n) {
        uint64_t i = first + done;
        src_file *f = &s->files[file_of(s, i)];
        uint64_t lo = i - f->start, avail = f->n - lo;
        uint32_t m = avail < n - done ? (uint32_t)avail : n - done;
        if ((st = touch(s, f)) != SI_OK) return st;
        /* off + done: this segment's first offset lands on the previous one's last, which has
         * the same value (buf->len) */
        switch (s->layout) {
        case SI_LAYOUT_PACKED:
            st = f->use_set ? read_set(s, f, lo, m, buf, off + done)
                            : read_packed(f, lo, m, buf, off + done);
            break;
        case SI_LAYOUT_VLEN: st = read_vlen(s, f, lo, m, buf, off + done); break;
        default: st = read_dense(s, f, lo, m, buf, off + done); break;
        }
        if (st != SI_OK) return st;
        done += m;
    }
    return SI_OK;
}

/* ids [lo, lo+m) of f into ids (the caller's strings). */
static si_status read_ids_file(si_source *s, src_file *f, uint64_t lo, uint32_t m, char **ids) {
    if (f->ids_kind == IDS_INDEX) {
        for (uint32_t j = 0; j < m; j++) {
            char b[24];
            snprintf(b, sizeof b, "%llu", (unsigned long long)(f->start + lo + j));
            ids[j] = si_xstrdup(b);
        }
        return SI_OK;
    }
    if (f->ids_kind == IDS_SET) return si_imageset_read_ids(f->set, lo, m, ids);
    hid_t fs, ms;
    herr_t e = select_rows(f->ids, 1, lo, m, &fs, &ms);
    if (f->ids_kind == IDS_VSTR) {
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, H5T_VARIABLE);
        H5Tset_cset(mt, f->ids_cset);
        if (e >= 0) e = H5Dread(f->ids, mt, ms, fs, s->ids_dxpl, ids);
        H5Tclose(mt);
        if (e < 0)
            for (uint32_t j = 0; j < m; j++) ids[j] = NULL; /* unknown state: leak, not free */
        for (uint32_t j = 0; e >= 0 && j < m; j++)
            if (!ids[j]) ids[j] = si_xstrdup("");
    } else if (f->ids_kind == IDS_FSTR) {
        /* one byte more per string: the terminator HDF5 adds converting to NULLTERM */
        size_t w = f->ids_size + 1;
        si_status st = si_bytes_reserve(&s->scratch, (size_t)m * w);
        if (st != SI_OK) e = -1;
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, w);
        H5Tset_strpad(mt, H5T_STR_NULLTERM);
        H5Tset_cset(mt, f->ids_cset);
        if (e >= 0) e = H5Dread(f->ids, mt, ms, fs, H5P_DEFAULT, s->scratch.data);
        H5Tclose(mt);
        for (uint32_t j = 0; e >= 0 && j < m; j++)
            ids[j] = strndup((const char *)s->scratch.data + j * w, w - 1);
    } else {
        int64_t *v = NULL;
        si_status st = si_bytes_reserve(&s->scratch, (size_t)m * 8);
        if (st == SI_OK) v = (int64_t *)(void *)s->scratch.data;
        bool u = f->ids_sign == H5T_SGN_NONE;
        if (e >= 0 && v)
            e = H5Dread(f->ids, u ? H5T_NATIVE_UINT64 : H5T_NATIVE_INT64, ms, fs, H5P_DEFAULT, v);
        else
            e = -1;
        for (uint32_t j = 0; e >= 0 && j < m; j++) {
            char b[24];
            if (u)
                snprintf(b, sizeof b, "%llu", (unsigned long long)(uint64_t)v[j]);
            else
                snprintf(b, sizeof b, "%lld", (long long)v[j]);
            ids[j] = si_xstrdup(b);
        }
    }
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (e < 0) return read_fail(f, f->ids_name, lo, m);
    return SI_OK;
}

/* Borrows s; ids[0..n) receive malloc'ed strings the caller frees with si_source_free_ids. */
si_status si_source_read_ids(si_source *s, uint64_t first, uint32_t n, char **ids) {
    for (uint32_t j = 0; j < n; j++) ids[j] = NULL;
    si_status st = check_range(s, first, n);
    if (st != SI_OK) return st;
    uint32_t done = 0;
    while (done < n) {
        uint64_t i = first + done;
        src_file *f = &s->files[file_of(s, i)];
        uint64_t lo = i - f->start, avail = f->n - lo;
        uint32_t m = avail < n - done ? (uint32_t)avail : n - done;
        if (f->ids_kind != IDS_INDEX && (st = touch(s, f)) != SI_OK) break;
        if ((st = read_ids_file(s, f, lo, m, ids + done)) != SI_OK) break;
        done += m;
    }
    if (st != SI_OK) si_source_free_ids(ids, n);
    return st;
}

/* Frees ids[0..n) and sets them to NULL; accepts NULL and NULL entries. */
void si_source_free_ids(char **ids, uint32_t n) {
    si_imageset_free_ids(ids, n); /* the same strings, however they were read */
}

/* --- describe --------------------------------------------------------------------------------- */

static void print_dims(FILE *out, hid_t sp) {
    hsize_t dims[H5S_MAX_RANK];
    int r = H5Sget_simple_extent_ndims(sp);
    if (r < 0 || H5Sget_simple_extent_dims(sp, dims, NULL) < 0) {
        fputs("?", out);
        return;
    }
    fputc('[', out);
    for (int k = 0; k < r; k++) fprintf(out, "%s%llu", k ? ", " : "", (unsigned long long)dims[k]);
    fputc(']', out);
}

/* One dataset: type, shape, storage (chunks or contiguous) and the filter pipeline. */
static void describe_dataset(FILE *out, hid_t file, const char *role, const char *name) {
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    if (d < 0) {
        fprintf(out, "  %-8s %s: cannot open\n", role, name);
        return;
    }
    hid_t t = H5Dget_type(d), sp = H5Dget_space(d), dcpl = H5Dget_create_plist(d);
    char ts[128] = "?";
    if (t >= 0) type_str(t, ts, sizeof ts);
    fprintf(out, "  %-8s %s: %s, shape ", role, name, ts);
    if (sp >= 0) print_dims(out, sp);
    H5D_layout_t lay = dcpl >= 0 ? H5Pget_layout(dcpl) : H5D_LAYOUT_ERROR;
    if (lay == H5D_CHUNKED) {
        hsize_t ch[H5S_MAX_RANK];
        int r = H5Pget_chunk(dcpl, H5S_MAX_RANK, ch);
        fputs(", chunks [", out);
        for (int k = 0; k < r; k++)
            fprintf(out, "%s%llu", k ? ", " : "", (unsigned long long)ch[k]);
        fputc(']', out);
    } else {
        fputs(lay == H5D_COMPACT ? ", compact" : ", contiguous", out);
    }
    int nf = dcpl >= 0 ? H5Pget_nfilters(dcpl) : 0;
    fputs(nf > 0 ? ", filters: " : ", no filters", out);
    for (int k = 0; k < nf; k++) {
        unsigned flags = 0, cd[8] = {0}, fcfg = 0;
        size_t ncd = 8;
        char fname[64] = "";
        H5Z_filter_t id =
            H5Pget_filter2(dcpl, (unsigned)k, &flags, &ncd, cd, sizeof fname, fname, &fcfg);
        if (k) fputs(", ", out);
        switch (id) {
        case H5Z_FILTER_DEFLATE: fprintf(out, "gzip level %u", ncd ? cd[0] : 0); break;
        case H5Z_FILTER_SHUFFLE: fputs("shuffle", out); break;
        case H5Z_FILTER_FLETCHER32: fputs("fletcher32", out); break;
        case H5Z_FILTER_SZIP: fputs("szip", out); break;
        case H5Z_FILTER_NBIT: fputs("nbit", out); break;
        case H5Z_FILTER_SCALEOFFSET: fputs("scaleoffset", out); break;
        default:
            fprintf(out, "filter %d (%s%s)", (int)id, fname[0] ? fname : "unknown",
                    H5Zfilter_avail(id) > 0 ? "" : ", NOT AVAILABLE: reads will fail");
            break;
        }
    }
    fputc('\n', out);
    if (nf > 0 && t >= 0 && H5Tget_class(t) == H5T_VLEN)
        fprintf(out, "           (filters of a variable-length dataset compress only its heap "
                     "references, not the records)\n");
    if (dcpl >= 0) H5Pclose(dcpl);
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    H5Dclose(d);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sizes of up to DESCRIBE_SAMPLE images spread over the whole set, read one by one. */
static si_status describe_sample(si_source *s, FILE *out) {
    uint64_t m = s->total < DESCRIBE_SAMPLE ? s->total : DESCRIBE_SAMPLE;
    if (m == 0) return SI_OK;
    uint64_t *sz = si_xmalloc(m * sizeof *sz), off[2];
    si_bytes b = {0};
    uint64_t soi = 0;
    si_status st = SI_OK;
    for (uint64_t k = 0; k < m && st == SI_OK; k++) {
        uint64_t i = (uint64_t)((double)k * (double)s->total / (double)m);
        st = si_source_read(s, i, 1, &b, off);
        sz[k] = off[1] - off[0];
        if (st == SI_OK && sz[k] >= 2 && b.data[0] == 0xFF && b.data[1] == 0xD8) soi++;
    }
    if (st == SI_OK) {
        qsort(sz, m, sizeof *sz, cmp_u64);
        fprintf(out, "encoded size: min %llu, median %llu, max %llu bytes (%s %llu images)\n",
                (unsigned long long)sz[0], (unsigned long long)sz[m / 2],
                (unsigned long long)sz[m - 1], m == s->total ? "all" : "a sample of",
                (unsigned long long)m);
        fprintf(out, "JPEG SOI marker: %llu of %llu%s\n", (unsigned long long)soi,
                (unsigned long long)m, soi == m ? "" : " (the others will be reported not_jpeg)");
    }
    free(sz);
    si_bytes_free(&b);
    return st;
}

/* Borrows s and out. */
si_status si_source_describe(si_source *s, FILE *out) {
    fprintf(out, "source: %s (%s)\n", s->spec, s->origin);
    fprintf(out, "files: %d\n", s->nfiles);
    for (int i = 0; i < s->nfiles && i < DESCRIBE_FILES; i++)
        fprintf(out, "  %s: %llu images\n", s->files[i].path, (unsigned long long)s->files[i].n);
    if (s->nfiles > DESCRIBE_FILES) fprintf(out, "  ... and %d more\n", s->nfiles - DESCRIBE_FILES);
    fprintf(out, "layout: %s (%s)\n", si_source_layout_name(s->layout),
            s->forced ? "forced" : "detected");
    if (s->ambiguous && !s->forced)
        fprintf(out, "  ambiguous: dims 1 and 3 are both 1 or 3, read as NHWC; if the images "
                     "are stored (N, C, H, W) force --layout dense-nchw\n");
    fprintf(out, "images: %llu\n", (unsigned long long)s->total);
    if (s->nfiles == 0) return SI_OK;
    const src_file *f = &s->files[0];
    hid_t file;
    si_status st = h5_open(f->path, &file);
    if (st != SI_OK) return st;
    fprintf(out, "datasets%s:\n", s->nfiles > 1 ? " (of the first file)" : "");
    describe_dataset(out, file, "images", f->data_name);
    if (s->layout == SI_LAYOUT_PACKED) describe_dataset(out, file, "offsets", f->offsets_name);
    if (f->ids_name) describe_dataset(out, file, "ids", f->ids_name);
    H5Fclose(file);
    if (f->ids_name)
        fprintf(out, "ids: dataset %s%s\n", f->ids_name,
                s->nfiles > 1 ? ", as stored in each file (duplicates across files are possible)"
                              : "");
    else
        fprintf(out, "ids: none stored; the global image index in decimal\n");
    if (is_dense(s->layout)) {
        fprintf(out, "pixels: H %d, W %d, C %d (%d bytes an image; read as HWC%s)\n", s->h, s->w,
                s->c, s->h * s->w * s->c,
                s->layout == SI_LAYOUT_DENSE_NCHW ? ", transposed from CHW" : "");
        return SI_OK;
    }
    return describe_sample(s, out);
}
