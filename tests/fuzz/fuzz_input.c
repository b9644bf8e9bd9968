/* libFuzzer target for the image sources (io/source.h), structure-aware: the input is a recipe
 * (fuzz_common.h) from which this harness writes one to four HDF5 files with the HDF5 C API,
 * in every layout a source reads (packed, vlen, dense NHWC/NCHW) and in the ways such files go
 * wrong: other dtypes, ranks and lengths, offsets that are not monotonic, out of range or of
 * another integer type, ids of every kind (variable and fixed strings, integers, floats, wrong
 * length, missing), the attributes of /images, chunking (very large chunks included), gzip,
 * shuffle and fletcher32 with chunk bytes corrupted after writing, compact and external raw
 * storage, storage left unwritten or declared far larger than written, soft, hard, external,
 * dangling and looping links, and datasets that compete with the images. The spec opened is one
 * file, a list file (with missing files, the directory, the list itself, blank and comment lines,
 * over-long and binary lines), a directory or a glob pattern, with default or forced layouts and
 * dataset names, record caps and external files allowed or not. Then it does what the program
 * does with a source: every image read in batches (si_source_read, with and without the record
 * cap's report), as a run reads them (si_source_read_batch) and one by one; ids, fingerprint,
 * identity, describe. Nothing may crash, hang, allocate without bound or leave an HDF5 handle
 * open; and what reads back must be consistent: a batch that reads gives the bytes its images
 * give one by one, read_batch's statuses and hashes agree with them, a record over the cap has
 * no bytes, a file written without a flaw reads back as written, nothing is read from a file
 * outside the set's directory (every such file holds a marker), and the fingerprint is the same
 * twice.
 * Build and run: scripts/fuzz.sh input [SECONDS] (docs/user-guide.md, "Fuzzing"). */
#include "io/source.h"
#include "fuzz_common.h"

#include <fcntl.h>
#include <sys/stat.h>

#define MAX_N       40         /* images written per file */
#define MAX_REC     80         /* bytes per encoded record */
#define MAX_FILES   4          /* files per set */
#define CHUNK_CAP   (1u << 20) /* bytes in one chunk the harness creates */
#define MAX_CHUNKS  256        /* chunks the harness writes per dataset */
#define DENSE_CAP   (1u << 20) /* bytes of pixels written per dense file */
#define READ_CAP    64         /* images read per source */
#define MAX_SPANS   16         /* raw storage spans that may be corrupted, per file */
#define MAX_OWNED   128        /* datatypes made per file */
#define HUGE_ROWS() ((hsize_t)1 << fz_range(g->r, 31, 44))
#ifndef FZ_POKE_VLEN
#define FZ_POKE_VLEN 0
#endif

/* What the harness wrote into one file, for the check of a flawless one. */
typedef struct {
    int layout;     /* as written: SI_LAYOUT_PACKED, VLEN or DENSE_NHWC (either dense order) */
    bool nchw;      /* dense written (N, C, H, W) */
    bool clean;     /* every image reads back as written (no flaw anywhere on their way) */
    uint32_t n;     /* images written */
    uint64_t count; /* images the file declares (more than n when its data is declared larger) */
    uint8_t bytes[MAX_N * MAX_REC]; /* packed/vlen: the records back to back */
    uint64_t off[MAX_N + 1];
    uint8_t *pixels; /* dense: the array as written (malloc'ed) */
    hsize_t dims[4];
    char data_name[64], offsets_name[64], ids_name[64]; /* where they are, for the options */
} written;

typedef struct {
    uint64_t addr, len;
} raw_span;

/* One file being written. */
typedef struct {
    fz_recipe *r;
    hid_t file, lcpl;
    int index; /* the file's number in the set: names its side files */
    int sides; /* side files made (external links, external storage) */
    hid_t owned[MAX_OWNED];
    int nowned;
    raw_span spans[MAX_SPANS];
    int nspans;
    char last_ds[64]; /* the last dataset made, for hard links */
    written *w;
} gen;

static FILE *devnull;

/* t, closed with the file's other types when the file is written. */
static hid_t own(gen *g, hid_t t) {
    if (g->nowned == MAX_OWNED) abort(); /* a recipe makes a few dozen at most */
    if (t >= 0) g->owned[g->nowned++] = t;
    return t;
}

/* What every file outside the set's directory holds (external raw storage, the datasets of
 * side files reached by external links): a read that returns it has read outside the input. */
static const char marker[] = "SI-FUZZ-OUTSIDE!";

/* A buffer of n elements of memory type mt that reads as the marker (a pattern of it for
 * numbers, records and strings of it for variable-length types). Static; n is bounded by the
 * harness's own sizes. */
static const void *marked(hid_t mt, size_t n) {
    static uint8_t b[MAX_N * MAX_REC * 16 + (1u << 20)];
    size_t es = H5Tget_size(mt);
    if (H5Tis_variable_str(mt) > 0)
        for (size_t i = 0; i < n; i++) ((const char **)(void *)b)[i] = marker;
    else if (H5Tget_class(mt) == H5T_VLEN)
        for (size_t i = 0; i < n; i++) ((hvl_t *)(void *)b)[i] = (hvl_t){16, (void *)marker};
    else
        for (size_t i = 0; i < n * es && i < sizeof b; i++) b[i] = (uint8_t)marker[i % 16];
    return b;
}

/* Rewrites the file at path with the marker, its size kept. */
static void mark_file(const char *path) {
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    for (long i = 0; i < size; i++) fputc(marker[i % 16], f);
    fclose(f);
}

/* --- types ------------------------------------------------------------------------------------ */

/* An integer type of any width, sign and byte order, or now and then not an integer at all. */
static hid_t int_type(gen *g, int k) {
    switch (k) {
    case 0: return H5T_STD_U64LE;
    case 1: return H5T_STD_I64LE;
    case 2: return H5T_STD_U32LE;
    case 3: return H5T_STD_I32LE;
    case 4: return H5T_STD_U16LE;
    case 5: return H5T_STD_I8LE;
    case 6: return H5T_STD_U64BE;
    case 7: return H5T_STD_I32BE;
    case 8: return H5T_STD_U8LE;
    case 9: return H5T_IEEE_F64LE;
    case 10: return H5T_STD_B64LE;
    default: {
        hid_t t = own(g, H5Tcopy(H5T_C_S1));
        H5Tset_size(t, 8);
        return t;
    }
    }
}

/* The largest value an integer file type holds, for knowing whether a value survives. */
static uint64_t int_max(hid_t t) {
    if (H5Tget_class(t) != H5T_INTEGER) return 0;
    size_t bits = 8 * H5Tget_size(t);
    bool sgn = H5Tget_sign(t) == H5T_SGN_2;
    if (bits >= 64) return sgn ? INT64_MAX : UINT64_MAX;
    return sgn ? ((uint64_t)1 << (bits - 1)) - 1 : ((uint64_t)1 << bits) - 1;
}

static hid_t str_type(gen *g, size_t size, int pad, bool utf8) {
    hid_t t = own(g, H5Tcopy(H5T_C_S1));
    H5Tset_size(t, size ? size : H5T_VARIABLE);
    if (size)
        H5Tset_strpad(t, pad == 0   ? H5T_STR_NULLTERM
                         : pad == 1 ? H5T_STR_NULLPAD
                                    : H5T_STR_SPACEPAD);
    H5Tset_cset(t, utf8 ? H5T_CSET_UTF8 : H5T_CSET_ASCII);
    return t;
}

/* --- datasets --------------------------------------------------------------------------------- */

static void record_spans(gen *g, hid_t ds) {
    hid_t dcpl = H5Dget_create_plist(ds);
    H5D_layout_t lay = dcpl >= 0 ? H5Pget_layout(dcpl) : H5D_LAYOUT_ERROR;
    if (dcpl >= 0) H5Pclose(dcpl);
    if (lay == H5D_CONTIGUOUS) {
        haddr_t a = H5Dget_offset(ds);
        hsize_t len = H5Dget_storage_size(ds);
        if (a != HADDR_UNDEF && len && g->nspans < MAX_SPANS)
            g->spans[g->nspans++] = (raw_span){a, len};
    } else if (lay == H5D_CHUNKED) {
        hid_t sp = H5Dget_space(ds);
        hsize_t nc = 0;
        if (sp >= 0 && H5Dget_num_chunks(ds, sp, &nc) >= 0)
            for (hsize_t i = 0; i < nc && i < 4 && g->nspans < MAX_SPANS; i++) {
                unsigned mask = 0;
                haddr_t a = HADDR_UNDEF;
                hsize_t size = 0, at[8];
                if (H5Dget_chunk_info(ds, sp, i, at, &mask, &a, &size) >= 0 && a != HADDR_UNDEF &&
                    size)
                    g->spans[g->nspans++] = (raw_span){a, size};
            }
        if (sp >= 0) H5Sclose(sp);
    }
}

/* Writes rows [a, b) of buf (memory type mt; `row` elements a row) into ds. */
static herr_t write_rows(hid_t ds, hid_t mt, int rank, const hsize_t *dims, hsize_t a, hsize_t b,
                         const void *buf) {
    if (rank == 0) return H5Dwrite(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
    if (b <= a) return 0;
    hsize_t start[8] = {a}, count[8] = {b - a};
    size_t row = 1;
    for (int i = 1; i < rank; i++) count[i] = dims[i], row *= dims[i];
    hid_t fs = H5Dget_space(ds), ms = H5Screate_simple(rank, count, NULL);
    herr_t e = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
    const uint8_t *p = (const uint8_t *)buf + (size_t)a * row * H5Tget_size(mt);
    if (e >= 0) e = H5Dwrite(ds, mt, ms, fs, H5P_DEFAULT, p);
    H5Sclose(ms);
    H5Sclose(fs);
    return e;
}

/* Chunk dims for dims, each from the recipe (or far past the dataset, "very large"), their
 * bytes capped and the chunks the `rows` rows written span too, so that a case stays fast. */
static void chunk_dims(gen *g, int rank, const hsize_t *dims, hsize_t rows, size_t esize,
                       bool large, hsize_t *ch) {
    for (int i = 0; i < rank; i++) {
        hsize_t lim = dims[i] ? dims[i] : 1;
        if (lim > CHUNK_CAP) lim = CHUNK_CAP;
        ch[i] =
            large ? lim * fz_range(g->r, 1, 64) + fz_range(g->r, 0, 255) : fz_range(g->r, 1, lim);
    }
    for (;;) { /* at most MAX_CHUNKS chunks written: the widest ratio doubled until then */
        uint64_t count = 1;
        int wide = 0;
        hsize_t wide_n = 0;
        for (int i = 0; i < rank; i++) {
            hsize_t ext = i == 0 ? rows : dims[i], n = ext ? (ext + ch[i] - 1) / ch[i] : 1;
            count = count * n > MAX_CHUNKS ? MAX_CHUNKS + 1 : count * n;
            if (n > wide_n) wide = i, wide_n = n;
        }
        if (count <= MAX_CHUNKS) break;
        ch[wide] *= 2;
    }
    for (;;) {
        uint64_t bytes = esize;
        int big = 0;
        for (int i = 0; i < rank; i++) {
            bytes = bytes * ch[i] > CHUNK_CAP ? CHUNK_CAP + 1 : bytes * ch[i];
            if (ch[i] > ch[big]) big = i;
        }
        if (bytes <= CHUNK_CAP || ch[big] == 1) break;
        ch[big] = (ch[big] + 1) / 2;
    }
}

/* Creates dataset name under loc (missing groups made): file type ft of rank dims, dims[0] of
 * which may be far more rows than the `rows` rows buf holds (memory type mt). Storage, filters,
 * allocation and how much is written come from the recipe. Returns whether rows [0, rows) read
 * back as they are in buf. */
static bool make_ds(gen *g, hid_t loc, bool main_file, const char *name, hid_t ft, hid_t mt,
                    int rank, const hsize_t *dims, hsize_t rows, const void *buf) {
    fz_recipe *r = g->r;
    size_t esize = H5Tget_size(ft);
    bool vlen = H5Tget_class(ft) == H5T_VLEN || H5Tis_variable_str(ft) > 0;
    uint64_t elems = 1;
    for (int i = 0; i < rank; i++)
        elems = dims[i] && elems > UINT64_MAX / dims[i] ? UINT64_MAX : elems * dims[i];
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t maxd[8];
    bool chunked = false, clean = true, cut[2] = {false, false};
    char ext[2][4096 + 256] = {"", ""};
    int storage = fz_pick(r, 9);
    if (rank > 0 && storage >= 1 && storage <= 4) chunked = true;
    if (rank > 0 && storage == 8) chunked = true;
    /* storage declared far past what is written: chunked, allocated as written (contiguous or
     * allocated at once, HDF5 would write all of it) */
    bool huge = elems > (8u << 20) / (esize ? esize : 1);
    if (rank > 0 && huge) chunked = true;
    if (chunked) {
        hsize_t ch[8];
        chunk_dims(g, rank, dims, rows, esize, storage == 8, ch);
        for (int i = 0; i < rank; i++) maxd[i] = H5S_UNLIMITED;
        H5Pset_chunk(dcpl, rank, ch);
        if (storage == 2 || storage == 8) H5Pset_deflate(dcpl, (unsigned)fz_range(r, 0, 9));
        if (storage == 3) {
            H5Pset_shuffle(dcpl);
            H5Pset_deflate(dcpl, 6);
            H5Pset_fletcher32(dcpl);
        }
        if (storage == 4) H5Pset_fletcher32(dcpl);
    } else if (storage == 5 && elems * esize <= 8192) {
        H5Pset_layout(dcpl, H5D_COMPACT);
    } else if (storage == 6 && !vlen && rank > 0 && elems * esize <= (1u << 20)) {
        /* external raw storage in one or two files of the temporary directory */
        uint64_t total = elems * esize, first = fz_range(r, 0, total);
        int segs = fz_bool(r) ? 2 : 1;
        for (int k = 0; k < segs; k++) {
            snprintf(ext[k], sizeof ext[k], "%s",
                     fz_path(2, "f%d-ext%d.bin", g->index, g->sides++));
            off_t at = (off_t)fz_range(r, 0, 64);
            hsize_t size = segs == 1 ? total : k == 0 ? first : total - first;
            if (k == segs - 1 && fz_bool(r)) size = H5F_UNLIMITED;
            H5Pset_external(dcpl, ext[k], at, size);
            cut[k] = fz_pick(r, 4) == 3; /* the file shorter than its segment: reads zeros */
        }
    }
    int alloc = fz_pick(r, 4);
    if (alloc && !(huge && alloc != 3))
        H5Pset_alloc_time(dcpl, alloc == 1   ? H5D_ALLOC_TIME_EARLY
                                : alloc == 2 ? H5D_ALLOC_TIME_LATE
                                             : H5D_ALLOC_TIME_INCR);
    if (!vlen && fz_pick(r, 4) == 3) {
        uint8_t fill[16];
        memset(fill, (int)fz_bits(r, 1), sizeof fill);
        if (esize <= sizeof fill) H5Pset_fill_value(dcpl, ft, fill);
    }
    hid_t sp = rank ? H5Screate_simple(rank, dims, chunked ? maxd : NULL) : H5Screate(H5S_SCALAR);
    hid_t ds = H5Dcreate2(loc, name, ft, sp, g->lcpl, dcpl, H5P_DEFAULT);
    if (ds < 0 && !huge) { /* a combination HDF5 refuses: plain storage instead */
        H5Sclose(sp);
        sp = rank ? H5Screate_simple(rank, dims, NULL) : H5Screate(H5S_SCALAR);
        ds = H5Dcreate2(loc, name, ft, sp, g->lcpl, H5P_DEFAULT, H5P_DEFAULT);
    }
    H5Sclose(sp);
    H5Pclose(dcpl);
    if (ds < 0) return false;
    snprintf(g->last_ds, sizeof g->last_ds, "%s", name);
    int how = fz_pick(r, 4); /* all rows, none, the first half, all in two writes */
    hsize_t half = rows / 2;
    herr_t e = 0;
    if (how == 0) e = write_rows(ds, mt, rank, dims, 0, rows, buf);
    if (how == 2) e = write_rows(ds, mt, rank, dims, 0, half, buf);
    if (how == 3) {
        e = write_rows(ds, mt, rank, dims, 0, half, buf);
        if (e >= 0) e = write_rows(ds, mt, rank, dims, half, rows, buf);
    }
    if (e < 0 || how == 1 || (how == 2 && half < rows)) clean = false;
    for (int k = 0; k < 2 && ext[k][0]; k++) { /* outside the set: never to be read */
        if (cut[k]) truncate(ext[k], (off_t)fz_range(r, 0, 16));
        mark_file(ext[k]);
        clean = false;
    }
    /* the raw bytes of fixed-size data only: a corrupted heap reference of variable-length data
     * crashes HDF5 1.10.8 itself (SIGSEGV in H5HG_read), which no check of ours can prevent;
     * -DFZ_POKE_VLEN=1 corrupts those too, for an HDF5 that survives them */
    bool fixed = !vlen && H5Tdetect_class(ft, H5T_VLEN) <= 0;
    if (main_file && (fixed || FZ_POKE_VLEN) && H5Dflush(ds) >= 0) record_spans(g, ds);
    H5Dclose(ds);
    return clean;
}

/* Puts a dataset at path: there, or elsewhere behind a soft, hard or external link, or nothing
 * but a link that leads nowhere (or back to itself), or a group. Returns make_ds's answer
 * (false when there is no such dataset). */
static bool put_ds(gen *g, const char *path, hid_t ft, hid_t mt, int rank, const hsize_t *dims,
                   hsize_t rows, const void *buf) {
    fz_recipe *r = g->r;
    char target[96];
    switch (fz_pick(r, 12)) {
    case 1:
        snprintf(target, sizeof target, "/hidden/%s", path + 1);
        if (!make_ds(g, g->file, true, target, ft, mt, rank, dims, rows, buf)) return false;
        return H5Lcreate_soft(target, g->file, path, g->lcpl, H5P_DEFAULT) >= 0;
    case 2: {
        int k = g->sides++;
        const char *side = fz_path(3, "f%d-side%d.h5", g->index, k);
        hid_t f = H5Fcreate(side, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        if (f < 0) return false;
        size_t elems = rank ? rows : 1;
        for (int i = 1; i < rank; i++) elems *= dims[i];
        make_ds(g, f, false, "/d", ft, mt, rank, dims, rows, marked(mt, elems));
        H5Fclose(f);
        /* by its absolute path, or by its name (HDF5 then looks beside the file linking it) */
        const char *name = fz_bool(r) ? side : strrchr(side, '/') + 1;
        H5Lcreate_external(name, "/d", g->file, path, g->lcpl, H5P_DEFAULT);
        return false; /* outside the set: refused, never read */
    }
    case 3: H5Lcreate_soft("/nowhere/at/all", g->file, path, g->lcpl, H5P_DEFAULT); return false;
    case 4:
        H5Lcreate_external("missing.h5", "/d", g->file, path, g->lcpl, H5P_DEFAULT);
        return false;
    case 5: H5Lcreate_soft(path, g->file, path, g->lcpl, H5P_DEFAULT); return false;
    case 6:
        if (g->last_ds[0] && strcmp(g->last_ds, path) != 0) {
            H5Lcreate_hard(g->file, g->last_ds, g->file, path, g->lcpl, H5P_DEFAULT);
            return false;
        }
        break;
    case 7: {
        hid_t grp = H5Gcreate2(g->file, path, g->lcpl, H5P_DEFAULT, H5P_DEFAULT);
        if (grp >= 0) H5Gclose(grp);
        return false;
    }
    case 8: /* an external link to the file itself */
        snprintf(target, sizeof target, "/hidden/%s", path + 1);
        make_ds(g, g->file, true, target, ft, mt, rank, dims, rows, buf);
        H5Lcreate_external(fz_path(4, "set/f%d.h5", g->index), target, g->file, path, g->lcpl,
                           H5P_DEFAULT);
        return false;     /* read only when external links are allowed */
    case 9: return false; /* missing */
    default: break;
    }
    return make_ds(g, g->file, true, path, ft, mt, rank, dims, rows, buf);
}

/* --- attributes ------------------------------------------------------------------------------- */

static void put_attr(hid_t obj, const char *name, hid_t ft, hid_t mt, const void *v, hsize_t n) {
    hid_t sp = n ? H5Screate_simple(1, &n, NULL) : H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, ft, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0) {
        H5Awrite(a, mt, v);
        H5Aclose(a);
    }
    H5Sclose(sp);
}

/* format_version and count on /images, of their types or others, right or wrong. */
static void images_attrs(gen *g, uint64_t n) {
    fz_recipe *r = g->r;
    if (H5Lexists(g->file, "/images", H5P_DEFAULT) <= 0) return;
    hid_t grp = H5Oopen(g->file, "/images", H5P_DEFAULT);
    if (grp < 0) return;
    int64_t v[2] = {1, 1};
    double d = 1.0;
    const char *s = "1";
    hid_t st = str_type(g, 0, 0, true);
    switch (fz_pick(r, 6)) {
    case 1: put_attr(grp, "format_version", H5T_STD_I32LE, H5T_NATIVE_INT64, v, 0); break;
    case 2:
        v[0] = (int64_t)fz_edge_u64(r);
        put_attr(grp, "format_version", int_type(g, fz_pick(r, 12)), H5T_NATIVE_INT64, v, 0);
        break;
    case 3: put_attr(grp, "format_version", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &d, 0); break;
    case 4: put_attr(grp, "format_version", st, st, &s, 0); break;
    case 5: put_attr(grp, "format_version", H5T_STD_I64LE, H5T_NATIVE_INT64, v, 2); break;
    default: break;
    }
    uint64_t c = n;
    switch (fz_pick(r, 5)) {
    case 1: put_attr(grp, "count", H5T_STD_U64LE, H5T_NATIVE_UINT64, &c, 0); break;
    case 2:
        c = fz_edge_u64(r);
        put_attr(grp, "count", int_type(g, fz_pick(r, 12)), H5T_NATIVE_UINT64, &c, 0);
        break;
    case 3: put_attr(grp, "count", st, st, &s, 0); break;
    case 4: put_attr(grp, "count", H5T_STD_U64LE, H5T_NATIVE_UINT64, v, 2); break;
    default: break;
    }
    H5Oclose(grp);
}

/* --- ids -------------------------------------------------------------------------------------- */

/* An ids dataset of n entries at path, of a kind from the recipe (def: the default kind). */
static void put_ids(gen *g, const char *path, uint32_t n, int def) {
    fz_recipe *r = g->r;
    static char names[MAX_N + 4][24];
    static const char *ptrs[MAX_N + 4];
    static int64_t nums[MAX_N + 4];
    static char fixed[(MAX_N + 4) * 40];
    int style = fz_pick(r, 3);
    for (uint32_t i = 0; i < MAX_N + 4; i++) {
        if (style == 0) {
            snprintf(names[i], sizeof names[i], "img-%u", i);
        } else if (style == 1) {
            const uint8_t *b;
            size_t len = fz_blob(r, 16, &b);
            memcpy(names[i], b, len);
            names[i][len] = 0;
        } else {
            names[i][0] = 0;
        }
        ptrs[i] = names[i];
        nums[i] = (int64_t)i - (style == 1 ? 3 : 0);
    }
    int kind = fz_pick(r, 11);
    if (kind == 0) kind = def;
    hsize_t len = n;
    int rank = 1;
    switch (fz_pick(r, 6)) {
    case 1: len = n + 1; break;
    case 2: len = n ? n - 1 : 0; break;
    case 3: rank = 2; break;
    case 4: rank = 0; break;
    default: break;
    }
    if (len > MAX_N + 4) len = MAX_N + 4;
    hsize_t dims[2] = {len, 1};
    hsize_t rows = rank ? len : 1;
    switch (kind) {
    case 1: /* variable-length strings */
    case 2: {
        hid_t t = str_type(g, 0, 0, kind == 1);
        put_ds(g, path, t, t, rank, dims, rows, ptrs);
        break;
    }
    case 3: { /* fixed-length strings */
        size_t w = fz_range(r, 1, 40);
        hid_t t = str_type(g, w, fz_pick(r, 3), fz_bool(r));
        for (hsize_t i = 0; i < rows; i++) strncpy(fixed + i * w, names[i], w);
        put_ds(g, path, t, t, rank, dims, rows, fixed);
        break;
    }
    case 4: put_ds(g, path, H5T_STD_I64LE, H5T_NATIVE_INT64, rank, dims, rows, nums); break;
    case 5: put_ds(g, path, H5T_STD_U8LE, H5T_NATIVE_INT64, rank, dims, rows, nums); break;
    case 6: put_ds(g, path, H5T_STD_I32BE, H5T_NATIVE_INT64, rank, dims, rows, nums); break;
    case 7: put_ds(g, path, H5T_STD_U64LE, H5T_NATIVE_INT64, rank, dims, rows, nums); break;
    case 8: put_ds(g, path, H5T_IEEE_F32LE, H5T_NATIVE_INT64, rank, dims, rows, nums); break;
    case 9: { /* variable-length sequence of bytes: neither string nor integer */
        hid_t t = own(g, H5Tvlen_create(H5T_NATIVE_UINT8));
        hvl_t vl[MAX_N + 4];
        for (hsize_t i = 0; i < rows; i++) vl[i] = (hvl_t){strlen(names[i]), names[i]};
        put_ds(g, path, t, t, rank, dims, rows, vl);
        break;
    }
    case 10: break; /* none */
    default: break;
    }
}

/* --- the layouts ------------------------------------------------------------------------------ */

static void record_bytes(gen *g, uint32_t n) {
    written *w = g->w;
    uint8_t seed = (uint8_t)fz_bits(g->r, 1);
    w->n = n;
    w->off[0] = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t len = (uint32_t)((fz_bits(g->r, 1) + 16) % (MAX_REC + 1));
        uint8_t *p = w->bytes + w->off[i];
        for (uint32_t k = 0; k < len; k++) p[k] = (uint8_t)(seed + i * 31 + k * 7);
        if (len >= 2) p[0] = 0xFF, p[1] = 0xD8;
        w->off[i + 1] = w->off[i] + len;
    }
}

static void gen_packed(gen *g) {
    fz_recipe *r = g->r;
    written *w = g->w;
    w->layout = SI_LAYOUT_PACKED;
    uint32_t n = (uint32_t)((fz_range(r, 0, MAX_N) + 3) % (MAX_N + 1));
    record_bytes(g, n);
    uint64_t total = w->off[n];
    static const char *const groups[] = {"/images", "/pk", "/g/h"};
    const char *grp = groups[fz_pick(r, 3)];
    snprintf(w->data_name, sizeof w->data_name, "%s/data", grp);
    snprintf(w->offsets_name, sizeof w->offsets_name, "%s/offsets", grp);
    snprintf(w->ids_name, sizeof w->ids_name, "%s/ids", grp);
    hid_t gr = H5Gcreate2(g->file, grp, g->lcpl, H5P_DEFAULT, H5P_DEFAULT);
    if (gr >= 0) H5Gclose(gr);

    /* the data: 1-D uint8 of the records' bytes, or of another type, rank or length */
    hid_t ft = H5T_STD_U8LE;
    bool clean = true;
    switch (fz_pick(r, 7)) {
    case 1: ft = H5T_STD_I8LE, clean = false; break;
    case 2: ft = H5T_STD_U16LE, clean = false; break;
    case 3: ft = H5T_IEEE_F32LE, clean = false; break;
    case 4: ft = str_type(g, 4, 0, false), clean = false; break;
    case 5: ft = H5T_STD_U8BE; break;
    case 6: ft = H5T_NATIVE_B8, clean = false; break;
    default: break;
    }
    hsize_t dims[2] = {total, 1};
    int rank = 1;
    bool declared_end = false; /* the last record runs to the end of data declared huge */
    switch (fz_pick(r, 6)) {
    case 1: rank = 2, clean = false; break;
    case 2: rank = 0, clean = false; break;
    case 3: dims[0] = total + fz_range(r, 1, 64); break;
    case 4: dims[0] = HUGE_ROWS(), declared_end = fz_bool(r); break;
    case 5: { /* variable-length records instead of packed bytes */
        hvl_t vl[MAX_N];
        for (uint32_t i = 0; i < n; i++)
            vl[i] = (hvl_t){w->off[i + 1] - w->off[i], w->bytes + w->off[i]};
        hid_t t = own(g, H5Tvlen_create(H5T_NATIVE_UINT8));
        hsize_t vd = n;
        put_ds(g, w->data_name, t, t, 1, &vd, n, vl);
        rank = -1, clean = false;
        break;
    }
    default: break;
    }
    if (rank >= 0)
        clean &=
            put_ds(g, w->data_name, ft, H5T_NATIVE_UINT8, rank, dims, rank ? total : 1, w->bytes);

    /* the offsets: N+1 integers from 0 to the data's size, or not */
    int64_t off[MAX_N + 3];
    for (uint32_t i = 0; i <= n; i++) off[i] = (int64_t)w->off[i];
    off[n + 1] = off[n + 2] = (int64_t)total;
    if (declared_end) off[n] = (int64_t)dims[0], clean = false;
    hid_t ot = fz_pick(r, 3) == 2 ? int_type(g, fz_pick(r, 12)) : H5T_STD_U64LE;
    for (uint32_t i = 0; i <= n; i++) clean &= (uint64_t)off[i] <= int_max(ot);
    hsize_t olen = n + 1;
    switch (fz_pick(r, 6)) {
    case 1: olen = n, clean = false; break;
    case 2: olen = n + 2, clean = false; break;
    case 3: olen = 0, clean = false; break;
    case 4: olen = 1, clean = false; break;
    default: break;
    }
    for (int k = fz_pick(r, 4); k > 0; k--) { /* values out of order, out of range, negative */
        uint32_t i = (uint32_t)fz_range(r, 0, n);
        switch (fz_pick(r, 4)) {
        case 0: off[i] = (int64_t)fz_edge_u64(r); break;
        case 1: off[i] -= 1; break;
        case 2: off[i] = (int64_t)total + (int64_t)fz_range(r, 1, 1000); break;
        default: off[i] = -(int64_t)fz_range(r, 1, 1u << 20); break;
        }
        clean = false;
    }
    if (!put_ds(g, w->offsets_name, ot, H5T_NATIVE_INT64, 1, &olen, olen, off)) clean = false;
    w->count = olen ? olen - 1 : 0;
    put_ids(g, w->ids_name, n, 1);
    if (fz_pick(r, 4) == 3) { /* labels: integers, one per image, or not */
        int64_t lab[MAX_N + 2] = {0};
        hsize_t ll = n + (fz_bool(r) ? 1 : 0);
        char name[80];
        snprintf(name, sizeof name, "%s/labels", grp);
        put_ds(g, name, fz_bool(r) ? H5T_STD_I64LE : H5T_IEEE_F32LE, H5T_NATIVE_INT64, 1, &ll, ll,
               lab);
    }
    images_attrs(g, n);
    w->clean = clean;
}

static void gen_vlen(gen *g) {
    fz_recipe *r = g->r;
    written *w = g->w;
    w->layout = SI_LAYOUT_VLEN;
    uint32_t n = (uint32_t)((fz_range(r, 0, MAX_N) + 3) % (MAX_N + 1));
    record_bytes(g, n);
    static const char *const names[] = {"/images", "/jpegs/all", "/x", "/a/b/c/d/e"};
    snprintf(w->data_name, sizeof w->data_name, "%s", names[fz_pick(r, 4)]);
    bool clean = true;
    hid_t super = H5T_NATIVE_UINT8;
    switch (fz_pick(r, 6)) {
    case 1: super = H5T_STD_I8LE, clean = false; break;
    case 2: super = H5T_STD_U16BE, clean = false; break;
    case 3: super = H5T_IEEE_F32LE, clean = false; break;
    case 4: super = H5T_STD_U8BE; break;
    case 5: super = own(g, H5Tvlen_create(H5T_NATIVE_UINT8)), clean = false; break;
    default: break;
    }
    hid_t ft = own(g, H5Tvlen_create(super)), mt = own(g, H5Tvlen_create(H5T_NATIVE_UINT8));
    hvl_t vl[MAX_N];
    for (uint32_t i = 0; i < n; i++)
        vl[i] = (hvl_t){w->off[i + 1] - w->off[i], w->bytes + w->off[i]};
    hsize_t dims[2] = {n, 1};
    int rank = 1;
    switch (fz_pick(r, 5)) {
    case 1: rank = 2, clean = false; break;
    case 2: rank = 0, clean = false; break;
    case 3: dims[0] = HUGE_ROWS(); break;
    case 4: dims[0] = n + fz_range(r, 1, 8); break;
    default: break;
    }
    if (rank == 0 && n == 0) vl[0] = (hvl_t){0, NULL};
    w->count = rank ? dims[0] : 1;
    clean &= put_ds(g, w->data_name, ft, mt, rank, dims, rank ? n : 1, vl);
    /* ids beside the images, where the source looks for them */
    const char *slash = strrchr(w->data_name, '/');
    snprintf(w->ids_name, sizeof w->ids_name, "%.*s/ids", (int)(slash - w->data_name),
             w->data_name);
    put_ids(g, w->ids_name, n, 10);
    w->clean = clean;
}

static void gen_dense(gen *g) {
    fz_recipe *r = g->r;
    written *w = g->w;
    w->layout = SI_LAYOUT_DENSE_NHWC;
    w->nchw = fz_bool(r);
    static const hsize_t sizes[] = {4, 5, 1, 0, 2, 3, 7, 16, 33, 64, 255, 1024};
    uint32_t n = (uint32_t)((fz_range(r, 0, 8) + 2) % 9);
    hsize_t h = sizes[fz_pick(r, 12)], wd = sizes[(fz_pick(r, 12) + 1) % 12];
    static const hsize_t chans[] = {3, 1, 4, 2, 0};
    hsize_t c = chans[fz_pick(r, 5)];
    w->dims[0] = n;
    w->dims[1] = w->nchw ? c : h;
    w->dims[2] = w->nchw ? h : wd;
    w->dims[3] = w->nchw ? wd : c;
    uint64_t bytes = (uint64_t)n * h * wd * c;
    bool clean = true;
    while (bytes > DENSE_CAP) n = n / 2, bytes = (uint64_t)n * h * wd * c, clean = false;
    w->dims[0] = n;
    w->n = n;
    free(w->pixels);
    w->pixels = malloc(bytes ? bytes : 1);
    uint8_t seed = (uint8_t)fz_bits(r, 1);
    for (uint64_t i = 0; i < bytes; i++) w->pixels[i] = (uint8_t)(seed + i * 13 + (i >> 8));
    static const char *const names[] = {"/pixels", "/images", "/g/dense"};
    snprintf(w->data_name, sizeof w->data_name, "%s", names[fz_pick(r, 3)]);
    hid_t ft = H5T_STD_U8LE;
    switch (fz_pick(r, 5)) {
    case 1: ft = H5T_STD_U16LE, clean = false; break;
    case 2: ft = H5T_STD_I8LE, clean = false; break;
    case 3: ft = H5T_IEEE_F32BE, clean = false; break;
    case 4: ft = H5T_STD_U8BE; break;
    default: break;
    }
    hsize_t dims[5] = {w->dims[0], w->dims[1], w->dims[2], w->dims[3], 1};
    int rank = 4;
    switch (fz_pick(r, 5)) {
    case 1: rank = 3, dims[2] *= dims[3], clean = false; break; /* the same bytes */
    case 2: rank = 5, clean = false; break;
    case 3: dims[0] = HUGE_ROWS(); break;
    case 4: dims[0] = n + fz_range(r, 1, 4); break;
    default: break;
    }
    clean &= put_ds(g, w->data_name, ft, H5T_NATIVE_UINT8, rank, dims, n, w->pixels);
    w->count = dims[0];
    const char *slash = strrchr(w->data_name, '/');
    snprintf(w->ids_name, sizeof w->ids_name, "%.*s/ids", (int)(slash - w->data_name),
             w->data_name);
    put_ids(g, w->ids_name, n, 10);
    w->clean = clean;
}

/* Datasets and objects beside the images: more candidates (ambiguity), near misses, a
 * committed datatype, a group that holds itself. */
static void distractors(gen *g) {
    fz_recipe *r = g->r;
    for (int k = fz_pick(r, 4); k > 0; k--) {
        char name[32];
        snprintf(name, sizeof name, "/extra%d", k);
        static uint8_t px[2 * 2 * 2 * 3];
        hsize_t d4[4] = {2, 2, 2, 3}, d1 = 2;
        hvl_t vl[2] = {{3, px}, {0, NULL}};
        switch (fz_pick(r, 7)) {
        case 0: {
            hid_t t = own(g, H5Tvlen_create(H5T_NATIVE_UINT8));
            make_ds(g, g->file, true, name, t, t, 1, &d1, 2, vl);
            break;
        }
        case 1:
            make_ds(g, g->file, true, name, H5T_STD_U8LE, H5T_NATIVE_UINT8, 4, d4, 2, px);
            break;
        case 2: {
            hid_t t = own(g, H5Tvlen_create(H5T_NATIVE_INT32)),
                  mt = own(g, H5Tvlen_create(H5T_NATIVE_UINT8));
            make_ds(g, g->file, true, name, t, mt, 1, &d1, 2, vl);
            break;
        }
        case 3:
            make_ds(g, g->file, true, name, H5T_IEEE_F32LE, H5T_NATIVE_UINT8, 4, d4, 2, px);
            break;
        case 4: {
            hid_t t = H5Tcopy(H5T_STD_I32LE);
            H5Tcommit2(g->file, name, t, g->lcpl, H5P_DEFAULT, H5P_DEFAULT);
            H5Tclose(t);
            break;
        }
        case 5: H5Lcreate_hard(g->file, "/", g->file, name, g->lcpl, H5P_DEFAULT); break;
        default: H5Lcreate_soft("/", g->file, name, g->lcpl, H5P_DEFAULT); break;
        }
    }
}

/* Flips bytes of the raw storage written (chunks, contiguous data), after the file is closed:
 * checksums and decompression must catch it, or the bytes read change. */
static void corrupt(gen *g, const char *path) {
    fz_recipe *r = g->r;
    int pokes = fz_pick(r, 4);
    if (!pokes || !g->nspans) return;
    int fd = open(path, O_RDWR);
    if (fd < 0) return;
    for (; pokes > 0; pokes--) {
        const raw_span *s = &g->spans[fz_range(r, 0, (uint64_t)g->nspans - 1)];
        uint64_t at = s->addr + fz_range(r, 0, s->len - 1);
        uint8_t b = 0, x = (uint8_t)(fz_bits(r, 1) | 1);
        if (pread(fd, &b, 1, (off_t)at) == 1) {
            b ^= x;
            if (pwrite(fd, &b, 1, (off_t)at) == 1) g->w->clean = false;
        }
    }
    close(fd);
}

/* Writes file k of the set as layout (0 packed, 1 vlen, 2 dense) from the recipe. */
static void gen_file(fz_recipe *r, int k, int layout, written *w) {
    gen g = {.r = r, .index = k, .w = w};
    const char *path = fz_path(5, "set/f%d.h5", k);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fz_pick(r, 4) == 3) H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    g.file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (g.file < 0) abort();
    g.lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(g.lcpl, 1);
    if (layout == 0)
        gen_packed(&g);
    else if (layout == 1)
        gen_vlen(&g);
    else
        gen_dense(&g);
    distractors(&g);
    for (int i = 0; i < g.nowned; i++) H5Tclose(g.owned[i]);
    H5Pclose(g.lcpl);
    if (H5Fclose(g.file) < 0) abort();
    corrupt(&g, path);
}

/* --- the spec --------------------------------------------------------------------------------- */

/* A list file naming the set's files (order[] gets the file of each line that names one, -1 for
 * the lines that name something else), with every kind of line a user's list may have. */
static int write_list(fz_recipe *r, int nfiles, int *order, int cap) {
    FILE *f = fopen(fz_path(6, "list.txt"), "wb");
    if (!f) abort();
    int nl = 0;
    bool extra = fz_pick(r, 3) == 2;
    int lines = extra ? (int)fz_range(r, 1, 12) : nfiles;
    for (int i = 0; i < lines && nl < cap; i++) {
        int kind = extra ? fz_pick(r, 14) : 0;
        int k = extra ? (int)fz_range(r, 0, (uint64_t)nfiles - 1) : i;
        switch (kind) {
        case 0: fprintf(f, "set/f%d.h5\n", k), order[nl++] = k; break;
        case 1: fprintf(f, "%s\n", fz_path(7, "set/f%d.h5", k)), order[nl++] = k; break;
        case 2: fprintf(f, "  ./set//f%d.h5 \t\r\n", k), order[nl++] = k; break;
        case 3: fprintf(f, "set/missing%d.h5\n", k), order[nl++] = -1; break;
        case 4: fprintf(f, "set\n"), order[nl++] = -1; break;
        case 5: fprintf(f, "list.txt\n"), order[nl++] = -1; break;
        case 6: fprintf(f, "\n   \n\t\n"); break;
        case 7: fprintf(f, "# set/f%d.h5\n", k); break;
        case 8: { /* an over-long line */
            size_t len = fz_range(r, 4000, 5000);
            for (size_t j = 0; j < len; j++) fputc('a' + (int)(j % 26), f);
            fputc('\n', f);
            order[nl++] = -1;
            break;
        }
        case 9: { /* binary bytes, NUL included */
            const uint8_t *b;
            size_t len = fz_blob(r, 32, &b);
            fwrite(b, 1, len, f);
            fputc('\n', f);
            order[nl++] = -1;
            break;
        }
        case 10: fprintf(f, "set/f%d.h5", k), order[nl++] = k; break; /* no newline at the end */
        case 11: fprintf(f, "%s/set/f%d.h5\n", fz_dir, k), order[nl++] = k; break;
        case 12: fprintf(f, "f%d-side0.h5\n", k), order[nl++] = -1; break;
        default: fprintf(f, "/\n"), order[nl++] = -1; break;
        }
    }
    fclose(f);
    return nl;
}

/* --- reading ---------------------------------------------------------------------------------- */

static void fail(const char *what, uint64_t i) {
    fprintf(stderr, "==fuzz== %s (image %llu)\n", what, (unsigned long long)i);
    abort();
}

/* The bytes image i of a flawless set must read as: HWC pixels for dense, the record otherwise.
 * Returns the length, or -1 when i is not in a flawless file. */
static long expected(written *const *files, int nfiles, int layout, uint64_t i, const uint8_t **p,
                     uint8_t *tmp) {
    for (int k = 0; k < nfiles; k++) {
        const written *w = files[k];
        if (!w || !w->clean) return -1; /* a flawed file's count is not known here either */
        if (i >= w->count) {
            i -= w->count;
            continue;
        }
        if (i >= w->n) return -1;
        if ((w->layout == SI_LAYOUT_DENSE_NHWC) !=
                (layout == SI_LAYOUT_DENSE_NHWC || layout == SI_LAYOUT_DENSE_NCHW) ||
            (w->layout != SI_LAYOUT_DENSE_NHWC && w->layout != layout))
            return -1;
        if (w->layout != SI_LAYOUT_DENSE_NHWC) {
            *p = w->bytes + w->off[i];
            return (long)(w->off[i + 1] - w->off[i]);
        }
        size_t img = (size_t)w->dims[1] * w->dims[2] * w->dims[3];
        const uint8_t *src = w->pixels + i * img;
        if (layout == SI_LAYOUT_DENSE_NHWC && !w->nchw) {
            *p = src;
            return (long)img;
        }
        if (layout != SI_LAYOUT_DENSE_NCHW || !w->nchw) return -1; /* read in the other order */
        size_t c = w->dims[1], hw = (size_t)w->dims[2] * w->dims[3];
        for (size_t ch = 0; ch < c; ch++)
            for (size_t q = 0; q < hw; q++) tmp[q * c + ch] = src[ch * hw + q];
        *p = tmp;
        return (long)img;
    }
    return -1;
}

static void check_offsets(const si_bytes *buf, const uint64_t *off, uint32_t m, uint64_t first) {
    if (off[0] != 0) fail("first offset is not 0", first);
    for (uint32_t j = 0; j < m; j++)
        if (off[j + 1] < off[j]) fail("offsets go backwards", first + j);
    if (off[m] != buf->len) fail("last offset is not the length read", first + m);
}

/* Whether p holds the whole marker: a plain loop, not memmem, whose arguments libFuzzer would
 * take into its dictionary and write into the recipes' own ids and records. */
static bool has_marker(const uint8_t *p, size_t len) {
    const size_t m = sizeof marker - 1;
    for (size_t i = 0; i + m <= len; i++) {
        size_t k = 0;
        while (k < m && p[i + k] == (uint8_t)marker[k]) k++;
        if (k == m) return true;
    }
    return false;
}

/* Bytes that came from outside the set's directory. */
static void check_inside(const uint8_t *p, size_t len, uint64_t i) {
    if (has_marker(p, len)) fail("bytes of a file outside the set's directory were read", i);
}

/* The bytes at o of b (NULL while b holds nothing: no arithmetic on a null pointer). */
static const uint8_t *at(const si_bytes *b, uint64_t o) {
    return b->data ? b->data + o : NULL;
}

static bool same(const uint8_t *a, uint64_t alen, const uint8_t *b, uint64_t blen) {
    return alen == blen && (!alen || !memcmp(a, b, (size_t)alen));
}

/* Reads images [0, lim) in batches of `batch` as the program does: si_source_read (with or
 * without the record cap's report), si_source_read_batch (a run's read, image by image where
 * the batch fails), and images alone (each batch's first and last, all of a failed batch). A batch
 * that reads gives each image's bytes as it reads alone; read_batch's statuses, messages and hashes
 * agree with the reads alone; a record over the cap has no bytes; a flawless file reads back as
 * written; nothing comes from outside the set. */
static void read_all(si_source *s, uint64_t lim, uint32_t batch, bool with_big, uint64_t cap,
                     written *const *files, int nfiles) {
    enum { MSG = 128 };
    int layout = si_source_layout(s);
    si_bytes buf = {0}, run = {0}, one = {0};
    uint64_t off[READ_CAP + 1], roff[READ_CAP + 1], off1[2], big[READ_CAP], big1[1];
    int32_t status[READ_CAP];
    uint32_t hash[READ_CAP];
    static char msg[READ_CAP * MSG];
    static uint8_t tmp[DENSE_CAP];
    for (uint64_t first = 0; first < lim; first += batch) {
        uint32_t m = (uint32_t)(lim - first < batch ? lim - first : batch);
        memset(big, 0xA5, sizeof big);
        bool batch_ok = si_source_read(s, first, m, &buf, off, with_big ? big : NULL) == SI_OK;
        if (batch_ok) {
            check_offsets(&buf, off, m, first);
            check_inside(buf.data, buf.len, first);
        }
        for (uint32_t j = 0; batch_ok && with_big && j < m; j++)
            if (big[j] && (big[j] <= cap || off[j + 1] != off[j]))
                fail("a record over the cap is reported wrong, or has bytes", first + j);
        memset(msg, 0, sizeof msg);
        bool run_ok =
            si_source_read_batch(s, first, m, &run, roff, status, msg, MSG, hash, true) == SI_OK;
        if (run_ok) check_offsets(&run, roff, m, first);
        for (uint32_t j = 0; j < m; j++) {
            uint64_t i = first + j;
            /* alone: the batch's first and last image, and every image of a batch that failed
             * (a run then reads them so); the others are the batch's bytes. A read image by
             * image can cost a whole chunk row each (a dense set chunked across its pixels,
             * its chunks never written: HDF5 fills each anew), bounded but slow, and what it
             * checks is the same for every image of a batch */
            big1[0] = batch_ok && with_big ? big[j] : 0;
            si_status st = SI_OK;
            const uint8_t *p1;
            if (!batch_ok || !run_ok || j == 0 || j + 1 == m) {
                big1[0] = 0;
                st = si_source_read(s, i, 1, &one, off1, big1);
                p1 = one.data;
                if (st == SI_OK) {
                    check_offsets(&one, off1, 1, i);
                    check_inside(p1, off1[1], i);
                }
            } else {
                p1 = at(&buf, off[j]);
                off1[0] = 0;
                off1[1] = off[j + 1] - off[j];
            }
            if (batch_ok && st != SI_OK) fail("an image of a batch that reads does not", i);
            if (batch_ok && (!same(p1, off1[1], at(&buf, off[j]), off[j + 1] - off[j]) ||
                             (with_big && big[j] != big1[0])))
                fail("an image reads otherwise alone than in its batch", i);
            if (run_ok) {
                int32_t rs = status[j];
                const uint8_t *rp = at(&run, roff[j]);
                uint64_t rlen = roff[j + 1] - roff[j];
                if (rs != SI_IMG_OK && rs != SI_IMG_READ_ERROR && rs != SI_IMG_TOO_LARGE)
                    fail("read_batch gives a status it does not give", i);
                if (rs != SI_IMG_OK && (!msg[j * MSG] || rlen))
                    fail("an image read_batch fails has no message, or bytes", i);
                if (rs == SI_IMG_OK && hash[j] != si_source_hash(rp, (size_t)rlen))
                    fail("read_batch's hash is not the hash of the bytes it gives", i);
                if (rs == SI_IMG_OK && (st != SI_OK || big1[0] || !same(p1, off1[1], rp, rlen)))
                    fail("an image read_batch reads is not the image read alone", i);
                if (rs == SI_IMG_TOO_LARGE && (st != SI_OK || !big1[0]))
                    fail("an image read_batch finds too large is not so alone", i);
                check_inside(rp, rlen, i);
            }
            const uint8_t *want;
            long len = expected(files, nfiles, layout, i, &want, tmp);
            if (len < 0 || (uint64_t)len > cap) continue;
            if (st != SI_OK) fail("a flawless image does not read", i);
            if (!same(p1, off1[1], want, (uint64_t)len))
                fail("a flawless image reads back other bytes than written", i);
        }
    }
    si_bytes_free(&buf);
    si_bytes_free(&run);
    si_bytes_free(&one);
}

static void read_ids(si_source *s, uint64_t lim, uint32_t batch) {
    char *ids[READ_CAP];
    for (uint64_t first = 0; first < lim; first += batch) {
        uint32_t m = (uint32_t)(lim - first < batch ? lim - first : batch);
        if (si_source_read_ids(s, first, m, ids) == SI_OK)
            for (uint32_t j = 0; j < m; j++) {
                if (!ids[j]) fail("an id read is NULL", first + j);
                check_inside((const uint8_t *)ids[j], strlen(ids[j]), first + j);
            }
        si_source_free_ids(ids, m);
    }
}

/* What the program does with a source: count, shape, files, every image, ids, fingerprint,
 * identity, inspect. */
static void use_source(fz_recipe *r, const char *spec, const si_source_opts *o,
                       written *const *files, int nfiles) {
    si_source *s = NULL;
    if (si_source_open(spec, o, &s) != SI_OK) {
        if (s) fail("a failed open returns a source", 0);
        return;
    }
    uint64_t n = si_source_count(s);
    int h = 0, w = 0, c = 0;
    if (si_source_pixel_shape(s, &h, &w, &c) && (h <= 0 || w <= 0 || c <= 0))
        fail("a dense source with an empty pixel shape", 0);
    (void)si_source_kind(s), (void)si_source_spec(s);
    for (int k = 0; k < si_source_files(s); k++)
        if (!si_source_file_path(s, k)) fail("a file of the source has no path", (uint64_t)k);
    int max_open = fz_pick(r, 3);
    if (max_open) si_source_set_max_open(s, max_open);
    uint32_t batch = (uint32_t)((fz_bits(r, 1) + 7) % READ_CAP + 1);
    uint64_t lim = n < READ_CAP ? n : READ_CAP;
    uint64_t cap = o && o->max_record ? o->max_record : SI_SOURCE_MAX_RECORD;
    read_all(s, lim, batch, !fz_bool(r), cap, files, nfiles);
    si_bytes buf = {0};
    uint64_t off[2], big[1];
    if (n > lim) { /* the last image of a set declared huge */
        si_source_read(s, n - 1, 1, &buf, off, big);
        char *id = NULL;
        si_source_read_ids(s, n - 1, 1, &id);
        si_source_free_ids(&id, 1);
    }
    if (si_source_read(s, n, 1, &buf, off, big) == SI_OK) fail("a read past the end works", n);
    si_bytes_free(&buf);
    read_ids(s, lim, batch);
    uint64_t f1 = 1, f2 = 2;
    si_status s1 = si_source_fingerprint(s, &f1), s2 = si_source_fingerprint(s, &f2);
    if (s1 != s2 || (s1 == SI_OK && f1 != f2)) fail("the fingerprint changes between two calls", 0);
    if (si_source_identity(s) != si_source_identity(s)) fail("the identity changes", 0);
    si_source_describe(s, devnull);
    si_source_close(s);
}

/* A dataset name for an option: the one written, none, or one that misleads. */
static const char *name_opt(fz_recipe *r, const char *written_name, bool needed) {
    switch (fz_pick(r, 8)) {
    case 0: return needed ? written_name : NULL;
    case 1: return written_name;
    case 2: return written_name + 1; /* without the leading '/' */
    case 3: return "/nonexistent";
    case 4: return "/";
    case 5: return "";
    case 6: return "/images/data/";
    default: return NULL;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int home = -1; /* libFuzzer's own directory: its corpus paths may be relative */
    if (!devnull) {
        devnull = fopen("/dev/null", "w");
        home = open(".", O_RDONLY | O_DIRECTORY);
        fz_h5_quiet();
        si_log_set_level(SI_LOG_ERROR);
    }
    const char *dir = fz_tmpdir("input");
    if (chdir(dir) != 0) abort(); /* relative paths in lists and links resolve here */
    /* the recipe never spells the marker itself (into an id, say): only files outside the set
     * hold it */
    static uint8_t own[1 << 16];
    size = size < sizeof own ? size : sizeof own;
    memcpy(own, data, size);
    for (size_t i = 0; i + 8 <= size; i++)
        if (!memcmp(own + i, "SI-FUZZ-", 8)) own[i] = 's';
    fz_recipe rr = {own, size}, *r = &rr;
    fz_h5_counts before;
    fz_h5_count(&before);
    mkdir(fz_path(0, "set"), 0755);

    int spec_kind = fz_pick(r, 5); /* file, list, directory, pattern, nonexistent */
    int nfiles = spec_kind == 0 || spec_kind == 4 ? 1 : (int)fz_range(r, 1, MAX_FILES);
    int layout = fz_pick(r, 3);
    bool mixed = fz_pick(r, 8) == 7;
    static written w[MAX_FILES];
    for (int k = 0; k < nfiles; k++) {
        uint8_t *px = w[k].pixels;
        memset(&w[k], 0, sizeof w[k]);
        w[k].pixels = px;
        gen_file(r, k, mixed ? fz_pick(r, 3) : layout, &w[k]);
    }
    written *files[16] = {0};
    int nf = 0, order[16];
    const char *spec = fz_path(1, "set/f0.h5");
    if (spec_kind == 0) {
        files[nf++] = &w[0];
    } else if (spec_kind == 1) {
        int nl = write_list(r, nfiles, order, 16);
        for (int i = 0; i < nl; i++) files[nf++] = order[i] >= 0 ? &w[order[i]] : NULL;
        spec = fz_bool(r) ? fz_path(1, "list.txt") : fz_path(1, "./list.txt");
        if (fz_pick(r, 4) == 3) spec = "list.txt"; /* relative to the current directory */
    } else if (spec_kind == 2 || spec_kind == 3) {
        for (int k = 0; k < nfiles; k++) files[nf++] = &w[k];
        if (fz_pick(r, 4) == 3) { /* things a directory also holds */
            mkdir(fz_path(0, "set/sub.h5"), 0755);
            symlink("f0.h5", fz_path(0, "set/z-link.h5"));
            symlink("gone.h5", fz_path(0, "set/zz-dangling.h5"));
            fz_write_file(fz_path(0, "set/notes.txt"), "x", 1);
            files[nf++] = &w[0];
        }
        spec = spec_kind == 2 ? fz_path(1, "set") : fz_path(1, "set/f*.h5");
    } else {
        spec = fz_bool(r) ? fz_path(1, "set/none.h5") : fz_path(1, "set/none*.h5");
    }
    /* the files a directory or pattern names come sorted; this harness names them in order */
    si_source_opts o = {0};
    int forced = fz_pick(r, 8);
    o.layout = forced <= 3 ? SI_LAYOUT_AUTO : forced - 3;
    if (forced == 7 && fz_pick(r, 4) == 3) o.layout = fz_bool(r) ? -1 : 7;
    bool default_names = !strcmp(w[0].data_name, "/images/data");
    o.data_dataset = name_opt(r, w[0].data_name, w[0].layout == SI_LAYOUT_PACKED && !default_names);
    o.offsets_dataset =
        name_opt(r, w[0].offsets_name, w[0].layout == SI_LAYOUT_PACKED && !default_names);
    o.ids_dataset = name_opt(r, w[0].ids_name, false);
    static const uint64_t caps[] = {0, 1, 16, 17, 40, 79, 80, 1u << 20};
    o.max_record = caps[fz_pick(r, 8)];
    o.allow_external = fz_bool(r);
    /* a file is flawless only as written with the names and layout it was written with */
    bool as_written = o.layout == SI_LAYOUT_AUTO || o.layout == w[0].layout ||
                      (w[0].layout == SI_LAYOUT_DENSE_NHWC && o.layout == SI_LAYOUT_DENSE_NCHW);
    if (!as_written || (o.data_dataset && strcmp(o.data_dataset, w[0].data_name)) ||
        (o.offsets_dataset && strcmp(o.offsets_dataset, w[0].offsets_name)))
        nf = 0;
    use_source(r, spec, fz_pick(r, 4) == 3 ? NULL : &o, files, nf);

    fz_h5_check(&before, "the source");
    fz_clean(dir);
    if (fchdir(home) != 0) abort();
    return 0;
}
