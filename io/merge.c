/* Merging results of parts of one multi-file set (a Slurm job array: one part per task) into
 * the result one run over the whole set would have written. Every per-image dataset (first
 * dimension = the part's images) is concatenated in part order; /index is renumbered,
 * /errors/index shifted, /detections/offsets rebased; the attributes come from the first part
 * with images, failed and ranks summed. Parts must agree on the model, preprocessing and
 * postprocessing (their resume keys without the input, its fingerprint and the image count).
 * Rows are copied in
 * blocks, in the file's own types, so memory does not grow with the number of images. */
#include "io/merge.h"

#include "io/h5util.h"

#include <errno.h>
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK 65536

typedef struct {
    char name[192];
    int kind; /* 0 per image, 1 errors/index, 2 errors/message, 3 detections/offsets, 4 per det */
} dset;

typedef struct {
    dset d[64];
    int n;
    uint64_t images;
} walk;

static uint64_t rows_of(hid_t file, const char *name) {
    hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
    hsize_t dims[8] = {0};
    if (d >= 0) {
        hid_t s = H5Dget_space(d);
        H5Sget_simple_extent_dims(s, dims, NULL);
        H5Sclose(s);
        H5Dclose(d);
    }
    return dims[0];
}

static herr_t visit(hid_t loc, const char *name, const H5O_info_t *info, void *arg) {
    walk *w = arg;
    if (info->type != H5O_TYPE_DATASET || w->n == 64) return 0;
    dset *d = &w->d[w->n++];
    snprintf(d->name, sizeof d->name, "%s", name);
    d->kind = !strcmp(name, "errors/index")         ? 1
              : !strcmp(name, "errors/message")     ? 2
              : !strcmp(name, "detections/offsets") ? 3
              : !strncmp(name, "detections/", 11)   ? 4
                                                    : 0;
    return 0;
}

/* The resume key without what differs between parts (input and image count). */
static char *part_key(hid_t file) {
    char *key = si_h5_attr_read_str(file, "resume_key");
    if (!key) return NULL;
    /* drop the input=...;, input_fp=...; and images=...; items */
    char *out = si_xcalloc(strlen(key) + 1, 1);
    for (char *p = key; *p;) {
        size_t l = strcspn(p, ";");
        if (strncmp(p, "input=", 6) && strncmp(p, "input_fp=", 9) && strncmp(p, "images=", 7)) {
            strncat(out, p, l);
            strcat(out, ";");
        }
        p += l + (p[l] == ';');
    }
    free(key);
    return out;
}

/* The memory type rows of file type ft are copied in: the native one, but for a half, which is
 * copied in its own type since HDF5 1.10 has no native half and going through float rewrites
 * the bits of NaN (a failed image's row). Caller closes it. */
static hid_t copy_type(hid_t ft) {
    if (H5Tget_class(ft) == H5T_FLOAT && H5Tget_size(ft) == 2) return H5Tcopy(ft);
    return H5Tget_native_type(ft, H5T_DIR_ASCEND);
}

/* Copies rows [0, n) of src's dataset `name` to rows [at, at + n) of dst's; add is added to
 * every value (for index-like uint64 columns), drop_last leaves out the last source row. */
static si_status copy_rows(hid_t src, hid_t dst, const char *name, uint64_t at, uint64_t add,
                           uint64_t n, const char *part) {
    hid_t ds = H5Dopen2(src, name, H5P_DEFAULT), dd = H5Dopen2(dst, name, H5P_DEFAULT);
    hid_t ft = ds >= 0 ? H5Dget_type(ds) : -1, mt = ft >= 0 ? copy_type(ft) : -1;
    hid_t sp = ds >= 0 ? H5Dget_space(ds) : -1;
    hsize_t dims[8] = {0};
    int nd = sp >= 0 ? H5Sget_simple_extent_dims(sp, dims, NULL) : -1;
    si_status st = SI_OK;
    if (ds < 0 || dd < 0 || nd < 1) st = si_error(SI_ERR_FORMAT, "%s: cannot read /%s", part, name);
    size_t row = mt >= 0 ? H5Tget_size(mt) : 0;
    for (int i = 1; i < nd; i++) row *= dims[i];
    bool vlen = mt >= 0 && H5Tis_variable_str(mt) > 0;
    uint8_t *buf = st == SI_OK ? si_xmalloc(row * BLOCK + 1) : NULL;
    for (uint64_t r = 0; st == SI_OK && r < n; r += BLOCK) {
        hsize_t c = n - r < BLOCK ? n - r : BLOCK;
        hsize_t start[8] = {r}, cnt[8] = {c}, dstart[8] = {at + r};
        for (int i = 1; i < nd; i++) cnt[i] = dims[i];
        hid_t fs = H5Dget_space(ds), ms = H5Screate_simple(nd, cnt, NULL), gs = H5Dget_space(dd);
        herr_t e = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
        if (e >= 0) e = H5Dread(ds, mt, ms, fs, H5P_DEFAULT, buf);
        if (e >= 0 && add)
            for (hsize_t k = 0; k < c; k++) ((uint64_t *)buf)[k] += add;
        if (e >= 0) e = H5Sselect_hyperslab(gs, H5S_SELECT_SET, dstart, NULL, cnt, NULL);
        if (e >= 0) e = H5Dwrite(dd, mt, ms, gs, H5P_DEFAULT, buf);
        if (vlen) H5Dvlen_reclaim(mt, ms, H5P_DEFAULT, buf);
        H5Sclose(fs);
        H5Sclose(ms);
        H5Sclose(gs);
        if (e < 0)
            st = si_error(SI_ERR_IO, "%s: cannot copy /%s rows %llu+", part, name,
                          (unsigned long long)r);
    }
    free(buf);
    if (sp >= 0) H5Sclose(sp);
    if (mt >= 0) H5Tclose(mt);
    if (ft >= 0) H5Tclose(ft);
    if (ds >= 0) H5Dclose(ds);
    if (dd >= 0) H5Dclose(dd);
    return st;
}

/* Creates dst's dataset `name` like src's, with `rows` rows, chunked and compressed. */
static si_status create_like(hid_t src, hid_t dst, const char *name, uint64_t rows) {
    hid_t ds = H5Dopen2(src, name, H5P_DEFAULT);
    if (ds < 0) return si_error(SI_ERR_FORMAT, "cannot open /%s", name);
    hid_t ft = H5Dget_type(ds), sp = H5Dget_space(ds);
    hsize_t dims[8] = {0};
    int nd = H5Sget_simple_extent_dims(sp, dims, NULL);
    dims[0] = rows;
    hid_t dd = si_h5_create_chunked(dst, name, ft, nd, dims, 4096);
    H5Sclose(sp);
    H5Tclose(ft);
    H5Dclose(ds);
    if (dd < 0) return si_error(SI_ERR_IO, "cannot create /%s", name);
    H5Dclose(dd);
    return SI_OK;
}

static herr_t copy_attr(hid_t loc, const char *name, const H5A_info_t *info, void *dst) {
    (void)info;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t ft = H5Aget_type(a), sp = H5Aget_space(a), mt = H5Tget_native_type(ft, H5T_DIR_ASCEND);
    uint8_t buf[64];
    char *s = NULL;
    bool vlen = H5Tis_variable_str(ft) > 0;
    herr_t e = vlen ? H5Aread(a, ft, &s) : H5Aread(a, mt, buf);
    if (e >= 0 && H5Aexists(*(hid_t *)dst, name) <= 0) {
        hid_t b = H5Acreate2(*(hid_t *)dst, name, ft, sp, H5P_DEFAULT, H5P_DEFAULT);
        e = b >= 0 ? H5Awrite(b, vlen ? ft : mt, vlen ? (void *)&s : (void *)buf) : -1;
        if (b >= 0) H5Aclose(b);
    }
    if (vlen && s) H5free_memory(s);
    H5Tclose(mt);
    H5Tclose(ft);
    H5Sclose(sp);
    H5Aclose(a);
    return e < 0 ? -1 : 0;
}

static herr_t set_u64(hid_t file, const char *name, uint64_t v) {
    if (H5Aexists(file, name) > 0) H5Adelete(file, name);
    return si_h5_attr(file, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v);
}

/* The parts being merged: their files and sizes, and what the merged file sums over them. */
typedef struct {
    char *const *parts;
    int n_parts;
    hid_t *f;
    uint64_t *images, *errs, *dets; /* per part */
    walk w;                         /* the first part's datasets */
    char *key0;                     /* the first part's key */
    uint64_t total, total_err, total_det, failed;
    int ranks, merged; /* merged: the original parts in all (a merged part counts its own) */
    char **inputs;     /* every original part's input, in order */
    int *input_part;   /* which of our parts each came from */
    int n_inputs;
} merge;

/* The same input written two ways ("./a/b.h5", "a//b.h5") compares equal. */
static void normalize_path(char *p) {
    char *o = p;
    for (const char *s = p; *s;) {
        if (s[0] == '.' && s[1] == '/' && (s == p || s[-1] == '/')) {
            s += 2;
        } else if (s[0] == '/' && s[1] == '/') {
            s++;
        } else {
            *o++ = *s++;
        }
    }
    *o = 0;
}

/* Part p's original inputs (a merge lists its parts' in merged_inputs, one per line), each
 * refused when an earlier part covered it already: overlapping parts would count images
 * twice. */
static si_status add_inputs(merge *m, int p) {
    char *list = si_h5_attr_read_str(m->f[p], "merged_inputs");
    if (!list) list = si_h5_attr_read_str(m->f[p], "input");
    if (!list) return si_error(SI_ERR_FORMAT, "%s: no input attribute", m->parts[p]);
    si_status st = SI_OK;
    char *save = NULL;
    for (char *in = strtok_r(list, "\n", &save); in && st == SI_OK;
         in = strtok_r(NULL, "\n", &save)) {
        normalize_path(in);
        for (int k = 0; k < m->n_inputs && st == SI_OK; k++)
            if (!strcmp(m->inputs[k], in))
                st = si_error(SI_ERR_ARG,
                              "%s and %s overlap: both hold the results of %s; each input may "
                              "be merged once",
                              m->parts[m->input_part[k]], m->parts[p], in);
        m->inputs = si_xrealloc(m->inputs, sizeof *m->inputs * (size_t)(m->n_inputs + 1));
        m->input_part = si_xrealloc(m->input_part, sizeof(int) * (size_t)(m->n_inputs + 1));
        m->inputs[m->n_inputs] = si_xstrdup(in);
        m->input_part[m->n_inputs++] = p;
    }
    free(list);
    return st;
}

/* The same file given twice (by any path) is refused before its inputs are even compared. */
static si_status same_file(const merge *m, int p) {
    struct stat a, b;
    if (stat(m->parts[p], &a) != 0) return SI_OK;
    for (int k = 0; k < p; k++)
        if (stat(m->parts[k], &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
            return si_error(SI_ERR_ARG, "%s and %s are the same file: each part may be merged once",
                            m->parts[k], m->parts[p]);
    return SI_OK;
}

/* Opens part p, checks that it is a result made like the first, and adds up its sizes. */
static si_status open_part(merge *m, int p) {
    const char *path = m->parts[p];
    si_status dup = same_file(m, p);
    if (dup != SI_OK) return dup;
    m->f[p] = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (m->f[p] < 0) return si_error(SI_ERR_FORMAT, "%s: missing or not an HDF5 file", path);
    char *key = part_key(m->f[p]);
    if (!key || H5Lexists(m->f[p], "status", H5P_DEFAULT) <= 0) {
        free(key);
        return si_error(SI_ERR_FORMAT, "%s: not a shardinfer result (format 2)", path);
    }
    si_status st = SI_OK;
    if (p == 0) {
        m->key0 = key;
        H5Ovisit(m->f[0], H5_INDEX_NAME, H5_ITER_NATIVE, visit, &m->w);
    } else {
        if (strcmp(key, m->key0))
            st = si_error(SI_ERR_ARG,
                          "%s: made with other settings than %s (model, preprocessing, "
                          "postprocessing or batch): '%s' vs '%s'",
                          path, m->parts[0], key, m->key0);
        free(key);
    }
    m->images[p] = rows_of(m->f[p], "status");
    m->errs[p] = rows_of(m->f[p], "errors/index");
    m->dets[p] = H5Lexists(m->f[p], "detections", H5P_DEFAULT) > 0
                     ? rows_of(m->f[p], "detections/scores")
                     : 0;
    m->total += m->images[p];
    m->total_err += m->errs[p];
    m->total_det += m->dets[p];
    m->failed += m->errs[p];
    int r = 0, mp = 1;
    hid_t a = H5Aexists(m->f[p], "ranks") > 0 ? H5Aopen(m->f[p], "ranks", H5P_DEFAULT) : -1;
    if (a >= 0 && H5Aread(a, H5T_NATIVE_INT, &r) >= 0) m->ranks += r;
    if (a >= 0) H5Aclose(a);
    a = H5Aexists(m->f[p], "merged_parts") > 0 ? H5Aopen(m->f[p], "merged_parts", H5P_DEFAULT) : -1;
    if (a >= 0 && H5Aread(a, H5T_NATIVE_INT, &mp) < 0) mp = 1;
    if (a >= 0) H5Aclose(a);
    m->merged += mp;
    if (st == SI_OK) st = add_inputs(m, p);
    return st;
}

/* Dataset d of the merged file: created at its full size, then every part's rows in order. */
static si_status merge_dataset(const merge *m, hid_t out, const dset *d) {
    uint64_t rows = d->kind == 0   ? m->total
                    : d->kind <= 2 ? m->total_err
                    : d->kind == 3 ? m->total + 1
                                   : m->total_det;
    si_status st = create_like(m->f[0], out, d->name, rows);
    uint64_t at = 0, err_at = 0, det_at = 0;
    for (int p = 0; p < m->n_parts && st == SI_OK; p++) {
        const char *name = d->name, *path = m->parts[p];
        hid_t f = m->f[p];
        if (d->kind == 0)
            st = copy_rows(f, out, name, at, !strcmp(name, "index") ? at : 0, m->images[p], path);
        else if (d->kind == 1)
            st = copy_rows(f, out, name, err_at, at, m->errs[p], path);
        else if (d->kind == 2)
            st = copy_rows(f, out, name, err_at, 0, m->errs[p], path);
        else if (d->kind == 3) /* offsets: N + 1 per part, the last one is the next part's 0 */
            st = copy_rows(f, out, name, at, det_at, m->images[p] + (p == m->n_parts - 1 ? 1 : 0),
                           path);
        else
            st = copy_rows(f, out, name, det_at, 0, m->dets[p], path);
        at += m->images[p];
        err_at += m->errs[p];
        det_at += m->dets[p];
    }
    return st;
}

/* The first part's attributes, with images, failed and ranks summed, merged_parts the original
 * parts in all and merged_inputs their inputs (a merged part's own are replaced, not kept). */
static si_status merge_attrs(const merge *m, hid_t out, const char *tmp) {
    H5Aiterate2(m->f[0], H5_INDEX_NAME, H5_ITER_NATIVE, NULL, copy_attr, &out);
    herr_t e = set_u64(out, "images", m->total);
    if (e >= 0) e = set_u64(out, "failed", m->failed);
    static const char *const replaced[] = {"ranks", "merged_parts", "merged_inputs"};
    for (int k = 0; k < 3 && e >= 0; k++)
        if (H5Aexists(out, replaced[k]) > 0) e = H5Adelete(out, replaced[k]);
    if (e >= 0) e = si_h5_attr(out, "ranks", H5T_STD_I32LE, H5T_NATIVE_INT, &m->ranks);
    if (e >= 0) e = si_h5_attr(out, "merged_parts", H5T_STD_I32LE, H5T_NATIVE_INT, &m->merged);
    size_t len = 1;
    for (int k = 0; k < m->n_inputs; k++) len += strlen(m->inputs[k]) + 1;
    char *all = si_xcalloc(1, len);
    for (int k = 0; k < m->n_inputs; k++) {
        if (k) strcat(all, "\n");
        strcat(all, m->inputs[k]);
    }
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    if (e >= 0) e = si_h5_attr_str(out, "merged_inputs", t, all);
    H5Tclose(t);
    free(all);
    if (e < 0) return si_error(SI_ERR_IO, "%s: cannot write the attributes", tmp);
    return SI_OK;
}

si_status si_result_merge(const char *output, char *const *parts, int n_parts, bool overwrite) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (n_parts < 1) return si_error(SI_ERR_ARG, "merge: no parts given");
    if (!overwrite && access(output, F_OK) == 0)
        return si_error(SI_ERR_ARG, "%s: exists; pass --overwrite to replace it", output);
    merge m = {.parts = parts,
               .n_parts = n_parts,
               .f = si_xcalloc((size_t)n_parts, sizeof(hid_t)),
               .images = si_xcalloc((size_t)n_parts, sizeof(uint64_t)),
               .errs = si_xcalloc((size_t)n_parts, sizeof(uint64_t)),
               .dets = si_xcalloc((size_t)n_parts, sizeof(uint64_t))};
    si_status st = SI_OK;
    for (int p = 0; p < n_parts && st == SI_OK; p++) st = open_part(&m, p);
    char *tmp = NULL;
    if (asprintf(&tmp, "%s.tmp", output) < 0) si_fatal(__FILE__, __LINE__, "asprintf", NULL);
    hid_t out = st == SI_OK ? H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT) : -1;
    if (st == SI_OK && out < 0) st = si_error(SI_ERR_IO, "%s: cannot create", tmp);
    for (int k = 0; k < m.w.n && st == SI_OK; k++) st = merge_dataset(&m, out, &m.w.d[k]);
    if (st == SI_OK) st = merge_attrs(&m, out, tmp);
    if (out >= 0 && H5Fclose(out) < 0 && st == SI_OK)
        st = si_error(SI_ERR_IO, "%s: cannot close (disk full?)", tmp);
    if (st == SI_OK && rename(tmp, output) != 0)
        st = si_error(SI_ERR_IO, "%s: cannot rename %s to it: %s", output, tmp, strerror(errno));
    if (st != SI_OK) unlink(tmp);
    for (int p = 0; p < n_parts; p++)
        if (m.f[p] >= 0) H5Fclose(m.f[p]);
    free(tmp);
    for (int k = 0; k < m.n_inputs; k++) free(m.inputs[k]);
    free(m.inputs);
    free(m.input_part);
    free(m.key0);
    free(m.f);
    free(m.images);
    free(m.errs);
    free(m.dets);
    return st;
}
