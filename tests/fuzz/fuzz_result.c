/* libFuzzer target for what `shardinfer show` and `shardinfer merge` read: result files, which
 * may come from anyone (edited with h5py, made by hand, another version). Structure-aware: the
 * input is a recipe (fuzz_common.h). Each part is a real result, made through io/result.h as a
 * run makes one (fuzz_run.h: classify's top-k, other columns of any type and shape, detections,
 * failed images with messages, ids that are not UTF-8) and finished; then the recipe edits it
 * with the HDF5 C API: /status, /ids, /index, /topk_class, /topk_prob, the other columns,
 * /errors/index, /errors/message and /detections/... replaced by datasets of another type, rank
 * (up to 24), length or kind, removed, made groups or soft, hard and external links; datasets
 * added (past the limits of what the readers keep); root attributes (resume_key, input,
 * merged_inputs, ranks, merged_parts, format_version, ...) replaced by values of any type and
 * size (strings over 64 bytes, arrays). A labels file with long lines. Then si_result_print
 * with a limit, and si_result_merge of the part with a second part of the same run (or with
 * itself, by its name or another, or a missing file) into a temporary output. Nothing may
 * crash, hang, allocate without bound or leave an HDF5 handle open; a result as a run finished
 * it must show, two such parts must merge, and what merge writes must show.
 * Build and run: scripts/fuzz.sh result [SECONDS] (docs/user-guide.md, "Fuzzing"). */
#include "io/merge.h"
#include "io/resultview.h"
#include "fuzz_common.h"
#include "fuzz_run.h"

#define MAX_N     40   /* images of a part (now and then past show's block of rows) */
#define MAX_ELEMS 4096 /* elements of one dataset the harness writes */
#define MAX_RANK  24

static FILE *devnull;

typedef struct {
    fz_recipe *r;
    hid_t file, lcpl;
    hid_t owned[512];
    int nowned;
} part;

/* t, closed with the part's other types when its edits are done. */
static hid_t own(part *p, hid_t t) {
    if (p->nowned == 512) abort(); /* a recipe makes a few hundred at most */
    if (t >= 0) p->owned[p->nowned++] = t;
    return t;
}

static hid_t vstr(part *p) {
    hid_t t = own(p, H5Tcopy(H5T_C_S1));
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    return t;
}

/* A type of any class: integers, floats (half too), strings, variable-length, compound, enum,
 * array, opaque, bitfield. k = 0 is `def`. */
static hid_t any_type(part *p, int k, hid_t def) {
    switch (k) {
    case 0: return def;
    case 1: return H5T_STD_I8LE;
    case 2: return H5T_STD_U64BE;
    case 3: return H5T_IEEE_F64LE;
    case 4: return H5T_IEEE_F32BE;
    case 5: { /* half, as h5py writes numpy float16 */
        hid_t t = own(p, H5Tcopy(H5T_IEEE_F32LE));
        H5Tset_fields(t, 15, 10, 5, 0, 10);
        H5Tset_size(t, 2);
        H5Tset_ebias(t, 15);
        return t;
    }
    case 6: return vstr(p);
    case 7: {
        hid_t t = own(p, H5Tcopy(H5T_C_S1));
        H5Tset_size(t, (size_t)fz_range(p->r, 1, 200));
        return t;
    }
    case 8: return own(p, H5Tvlen_create(H5T_NATIVE_INT32));
    case 9: {
        hid_t t = own(p, H5Tcreate(H5T_COMPOUND, 12));
        H5Tinsert(t, "a", 0, H5T_NATIVE_INT32);
        H5Tinsert(t, "b", 4, H5T_NATIVE_DOUBLE);
        return t;
    }
    case 10: {
        hid_t t = own(p, H5Tenum_create(H5T_NATIVE_INT32));
        int v = 0;
        H5Tenum_insert(t, "ok", &v);
        return t;
    }
    case 11: {
        hsize_t d = (hsize_t)fz_range(p->r, 1, 40);
        return own(p, H5Tarray_create2(H5T_NATIVE_FLOAT, 1, &d));
    }
    case 12: return own(p, H5Tcreate(H5T_OPAQUE, 3));
    case 13: return H5T_STD_B16LE;
    case 14: return H5T_STD_I32LE;
    default: return H5T_STD_U8LE;
    }
}

/* Bytes to write for elems elements of type t: a pattern, valid strings for string types
 * (vlen strings and sequences point at a static buffer). Caller frees. */
static void *values(hid_t t, size_t elems, uint8_t seed) {
    static char text[] = "img-\xff\xfe-\xc3\xa9t\xc3\xa9";
    static int32_t seq[3] = {1, 2, 3};
    size_t es = H5Tget_size(t);
    uint8_t *b = malloc(elems * es + 1);
    for (size_t i = 0; i < elems * es; i++) b[i] = (uint8_t)(seed + i * 37);
    if (H5Tis_variable_str(t) > 0)
        for (size_t i = 0; i < elems; i++) ((char **)(void *)b)[i] = text + i % 5;
    else if (H5Tget_class(t) == H5T_VLEN)
        for (size_t i = 0; i < elems; i++) ((hvl_t *)(void *)b)[i] = (hvl_t){i % 4, seq};
    else if (H5Tget_class(t) == H5T_STRING)
        for (size_t i = 0; i < elems * es; i++) b[i] = (uint8_t)('a' + i % 26);
    return b;
}

/* Dataset name of type t, rank and dims (missing groups made), filled with values (or buf,
 * when given, in memory type mt). */
static void dataset(part *p, const char *name, hid_t t, int rank, const hsize_t *dims, hid_t mt,
                    const void *buf) {
    size_t elems = 1;
    for (int i = 0; i < rank; i++) elems *= dims[i];
    hid_t sp = rank ? H5Screate_simple(rank, dims, NULL) : H5Screate(H5S_SCALAR);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (rank && elems && fz_pick(p->r, 4) == 3) { /* chunked, compressed, as merge writes */
        hsize_t ch[MAX_RANK];
        for (int i = 0; i < rank; i++) ch[i] = dims[i];
        H5Pset_chunk(dcpl, rank, ch);
        H5Pset_deflate(dcpl, 1);
    }
    hid_t d = H5Dcreate2(p->file, name, t, sp, p->lcpl, dcpl, H5P_DEFAULT);
    if (d >= 0 && elems && fz_pick(p->r, 8) != 7) { /* now and then never written */
        void *v = buf ? NULL : values(t, elems, (uint8_t)fz_bits(p->r, 1));
        H5Dwrite(d, buf ? mt : t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf ? buf : v);
        free(v);
    }
    if (d >= 0) H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
}

/* A per-image dataset as a result holds it (rows of `width` values of type t, width 0 for one
 * value a row), or, by the recipe, of another type, rank, length or kind, or nothing. */
static void column(part *p, const char *name, hid_t t, hsize_t rows, hsize_t width, hid_t mt,
                   const void *buf) {
    fz_recipe *r = p->r;
    hsize_t dims[MAX_RANK] = {rows, width};
    int rank = width ? 2 : 1;
    switch (fz_pick(r, 10)) {
    case 1: t = any_type(p, fz_pick(r, 16), t), buf = NULL; break;
    case 2: { /* any rank up to 24, its dims small */
        rank = (int)fz_range(r, 0, MAX_RANK);
        size_t elems = rows ? rows : 1;
        for (int i = 1; i < rank; i++) {
            dims[i] = fz_range(r, 0, 3);
            if (elems * (dims[i] ? dims[i] : 1) > MAX_ELEMS) dims[i] = 1;
            elems *= dims[i] ? dims[i] : 1;
        }
        buf = NULL;
        break;
    }
    case 3: dims[0] = rows + fz_range(r, 1, 3), buf = NULL; break;
    case 4: dims[0] = rows ? rows - 1 : 0, buf = NULL; break;
    case 5: return; /* missing */
    case 6: {
        hid_t g = H5Gcreate2(p->file, name, p->lcpl, H5P_DEFAULT, H5P_DEFAULT);
        if (g >= 0) H5Gclose(g);
        return;
    }
    case 7: H5Lcreate_soft("/nowhere", p->file, name, p->lcpl, H5P_DEFAULT); return;
    case 8: rank = 0, buf = NULL; break;
    default: break;
    }
    dataset(p, name, t, rank, dims, mt, buf);
}

/* A root attribute name of any type and size: a string (short, over 64 bytes, not UTF-8), a
 * number of any type, an array, or `text` as the attribute the readers expect. */
static void attribute(part *p, hid_t loc, const char *name, const char *text) {
    fz_recipe *r = p->r;
    int k = fz_pick(r, 8);
    if (k == 7) return;
    hid_t t, sp;
    static char big[600];
    const char *s = text;
    const void *v = &s;
    uint8_t num[8 * 40];
    for (size_t i = 0; i < sizeof num; i++) num[i] = (uint8_t)(i * 13 + 1);
    hsize_t n = (hsize_t)fz_range(r, 1, 40);
    switch (k) {
    case 0: t = vstr(p), sp = H5Screate(H5S_SCALAR); break;
    case 1: { /* over 64 bytes */
        size_t len = (size_t)fz_range(r, 60, sizeof big - 1);
        memset(big, 'x', len);
        big[len] = 0;
        s = big;
        t = vstr(p), sp = H5Screate(H5S_SCALAR);
        break;
    }
    case 2: { /* fixed-length string of any size */
        size_t len = (size_t)fz_range(r, 1, sizeof big - 1);
        for (size_t i = 0; i < len; i++) big[i] = text[i % (strlen(text) + 1)];
        t = own(p, H5Tcopy(H5T_C_S1));
        H5Tset_size(t, len);
        v = big, sp = H5Screate(H5S_SCALAR);
        break;
    }
    case 3: { /* bytes from the recipe, NUL and invalid UTF-8 included */
        const uint8_t *b;
        size_t len = fz_blob(r, 100, &b);
        memcpy(big, b, len);
        big[len] = 0;
        s = big;
        t = vstr(p), sp = H5Screate(H5S_SCALAR);
        break;
    }
    case 4:
        t = any_type(p, fz_pick(r, 16), H5T_STD_I32LE), sp = H5Screate(H5S_SCALAR), v = NULL;
        break;
    case 5: t = H5T_STD_I64LE, sp = H5Screate_simple(1, &n, NULL), v = num; break;
    default: t = H5T_STD_I32LE, sp = H5Screate(H5S_SCALAR), v = num; break;
    }
    hid_t a = H5Acreate2(loc, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0) {
        void *vals = v ? NULL : values(t, 1, 7);
        H5Awrite(a, t, v ? v : vals);
        free(vals);
        H5Aclose(a);
    }
    H5Sclose(sp);
}

/* The datasets a result may hold, with the type and width a run writes them in. */
static const struct {
    const char *name;
    int rows; /* 0 images, 1 failed images, 2 images + 1, 3 detections */
    hsize_t width;
} known[] = {{"status", 0, 0},
             {"ids", 0, 0},
             {"index", 0, 0},
             {"topk_class", 0, 3},
             {"topk_prob", 0, 3},
             {"embedding", 0, 2},
             {"score", 0, 0},
             {"errors/index", 1, 0},
             {"errors/message", 1, 0},
             {"detections/offsets", 2, 0},
             {"detections/boxes", 3, 4},
             {"detections/scores", 3, 0},
             {"detections/classes", 3, 0},
             {"ids_escaped", 1, 0}};
#define N_KNOWN (int)(sizeof known / sizeof known[0])

/* The recipe's edits of the finished result at path (u: the run that made it). Returns whether
 * it made any. */
static bool edit_part(fz_recipe *r, const char *path, const fz_run *u, const char *other) {
    int edits = fz_pick(r, 4);
    if (!edits) return false;
    part p = {.r = r};
    p.file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (p.file < 0) abort();
    p.lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(p.lcpl, 1);
    static const char *const attrs[] = {
        "resume_key", "input",  "merged_inputs", "ranks", "merged_parts",     "format_version",
        "images",     "failed", "batch_size",    "post",  "merged_input_fps", "extra"};
    const char *const texts[] = {
        u->key, u->meta.input_path, "a.h5\nb.h5\n\nc.h5", "2", "3", "2", "7", "1",
        "4",    "classify",         "00ff\n12",           "v"};
    for (; edits > 0; edits--) {
        int k = fz_pick(r, N_KNOWN);
        hsize_t rows = known[k].rows == 0   ? u->n
                       : known[k].rows == 1 ? u->failed
                       : known[k].rows == 2 ? u->n + 1
                                            : fz_range(r, 0, 3 * u->n);
        switch (fz_pick(r, 6)) {
        case 0: /* a dataset replaced */
            H5Ldelete(p.file, known[k].name, H5P_DEFAULT);
            column(&p, known[k].name, any_type(&p, fz_pick(r, 16), H5T_STD_I32LE), rows,
                   known[k].width, -1, NULL);
            break;
        case 1: { /* a root attribute replaced */
            int a = fz_pick(r, 12);
            if (H5Aexists(p.file, attrs[a]) > 0) H5Adelete(p.file, attrs[a]);
            attribute(&p, p.file, attrs[a], texts[a]);
            break;
        }
        case 2: /* datasets added, past what a reader keeps */
            for (int e = fz_bool(r) ? 1 : 70; e > 0; e--) {
                char name[32];
                snprintf(name, sizeof name, "%sv%d", fz_bool(r) ? "g/" : "", e);
                column(&p, name, any_type(&p, fz_pick(r, 16), H5T_IEEE_F32LE), u->n,
                       fz_range(r, 0, 3), -1, NULL);
            }
            break;
        case 3: /* a dataset made a link: to another dataset, into the other part, nowhere */
            H5Ldelete(p.file, known[k].name, H5P_DEFAULT);
            switch (fz_pick(r, 3)) {
            case 0: H5Lcreate_soft("/status", p.file, known[k].name, p.lcpl, H5P_DEFAULT); break;
            case 1:
                H5Lcreate_hard(p.file, "/index", p.file, known[k].name, p.lcpl, H5P_DEFAULT);
                break;
            default:
                H5Lcreate_external(other, known[k].name, p.file, known[k].name, p.lcpl,
                                   H5P_DEFAULT);
                break;
            }
            break;
        case 4: /* an attribute on a dataset, a group in the way */
            if (fz_bool(r)) {
                hid_t g = H5Gcreate2(p.file, "errors/sub", p.lcpl, H5P_DEFAULT, H5P_DEFAULT);
                if (g >= 0) H5Gclose(g);
            } else {
                hid_t d = H5Oopen(p.file, known[k].name, H5P_DEFAULT);
                if (d >= 0) {
                    attribute(&p, d, "units", "px");
                    H5Oclose(d);
                }
            }
            break;
        default: /* removed */ H5Ldelete(p.file, known[k].name, H5P_DEFAULT); break;
        }
    }
    for (int i = 0; i < p.nowned; i++) H5Tclose(p.owned[i]);
    H5Pclose(p.lcpl);
    if (H5Fclose(p.file) < 0) abort();
    return true;
}

static void fail(const char *what) {
    fprintf(stderr, "==fuzz== %s: %s\n", what, si_error_msg());
    abort();
}

/* A finished result at path, of a run over the input src made here (like: the run whose
 * schema and batch it shares, or NULL), then edited by the recipe. Returns whether it was. */
static bool make_part(fz_recipe *r, const char *path, const char *src, fz_run *u,
                      const fz_run *like, const char *other) {
    fz_run_begin(r, u, src, fz_pick(r, 32) == 31 ? 4102 : MAX_N, like);
    si_result *res = NULL;
    if (si_result_create(path, &u->schema, u->n, u->chunk, &u->meta, &res) != SI_OK) fail("create");
    for (uint64_t c = 0; c < u->chunks; c++)
        if (fz_run_put(r, res, u, c) != SI_OK) fail("put");
    uint64_t failed = 0;
    if (si_result_finish(res, u->in, &u->meta, &failed, NULL) != SI_OK) fail("finish");
    si_source_close(u->in);
    u->in = NULL;
    return edit_part(r, path, u, other);
}

/* A labels file: class names, one a line, some of them longer than a line buffer. */
static const char *make_labels(fz_recipe *r) {
    if (fz_pick(r, 4) != 3) return NULL;
    const char *path = fz_path(4, "labels.txt");
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    for (int i = (int)fz_range(r, 0, 8); i > 0; i--) {
        if (fz_pick(r, 4) == 3)
            for (size_t j = fz_range(r, 1000, 3000); j > 0; j--) fputc('L', f);
        const uint8_t *b;
        size_t len = fz_blob(r, 24, &b);
        fwrite(b, 1, len, f);
        fputc('\n', f);
    }
    fclose(f);
    return path;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!devnull) {
        devnull = fopen("/dev/null", "w");
        fz_h5_quiet();
        si_log_set_level(SI_LOG_ERROR);
    }
    fz_tmpdir("result");
    fz_recipe rr = {data, size}, *r = &rr;
    fz_h5_counts before;
    fz_h5_count(&before);
    static fz_run u0, u1;
    char a[4200], b[4200], out[4200], in0[4200], in1[4200];
    snprintf(a, sizeof a, "%s", fz_path(0, "part0.h5"));
    snprintf(b, sizeof b, "%s", fz_path(0, "part1.h5"));
    snprintf(out, sizeof out, "%s", fz_path(0, "merged.h5"));
    snprintf(in0, sizeof in0, "%s", fz_path(0, "in0.h5"));
    snprintf(in1, sizeof in1, "%s", fz_path(0, "in1.h5"));
    bool edited = make_part(r, a, in0, &u0, NULL, b);
    const char *labels = make_labels(r);
    long limit = (long)fz_range(r, 0, 64) - 1;
    si_status shown = si_result_print(a, labels, limit, devnull);
    if (shown != SI_OK && !edited) fail("a result as a run finished it cannot be shown");

    /* merge: the part with a second one of the same run, itself (by its name or a link), or a
     * missing file */
    char *parts[2] = {a, b};
    int n_parts = 2;
    bool distinct = false;
    switch (fz_pick(r, 5)) {
    case 1: n_parts = 1; break;
    case 2: parts[1] = a; break;
    case 3:
        snprintf(b, sizeof b, "%s", fz_path(0, "link.h5"));
        if (symlink(a, b) != 0) abort();
        break;
    case 4: snprintf(b, sizeof b, "%s", fz_path(0, "missing.h5")); break;
    default:
        edited |= make_part(r, b, in1, &u1, &u0, a);
        distinct = true;
        break;
    }
    bool there = fz_pick(r, 4) == 3;
    if (there) fz_write_file(out, "old", 3); /* an output there already */
    si_merge_config cfg = {
        .output = out, .parts = parts, .n_parts = n_parts, .overwrite = fz_pick(r, 4) != 3};
    si_status merged = si_result_merge(&cfg);
    if (merged != SI_OK && !edited && distinct && (cfg.overwrite || !there))
        fail("two parts of one run as it finished them do not merge");
    if (merged == SI_OK && si_result_print(out, NULL, limit, devnull) != SI_OK)
        fail("what merge wrote cannot be shown");
    fz_h5_check(&before, "show or merge");
    fz_clean(fz_dir);
    return 0;
}
