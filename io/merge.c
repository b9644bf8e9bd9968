/* Merging results of parts of one multi-file set (a Slurm job array: one part per task) into
 * the result one run over the whole set would have written. Every per-image dataset (first
 * dimension = the part's images) is concatenated in part order; /index is renumbered,
 * /errors/index and /ids_escaped shifted, /detections/offsets rebased; the attributes come from
 * the first part, with images, failed and ranks summed. Parts must agree on the model,
 * preprocessing, postprocessing and batch (their resume keys without the input, its fingerprint
 * and the image count) and on their datasets' types and per-image shapes; every part is read
 * through io/resultview.h's checks first, since a part may have been edited by anyone. Rows are
 * copied in blocks, in the file's own types, so memory does not grow with the number of
 * images. */
#include "io/merge.h"

#include "io/h5util.h"
#include "io/resultview.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK       65536              /* rows a block holds at most */
#define BLOCK_BYTES ((size_t)64 << 20) /* and bytes, for wide rows */
/* one attribute's values in memory (a result's own are a few bytes; a user's added array of
 * 4,096 floats is 16 KiB) */
#define MAX_ATTR_BYTES ((size_t)16 << 20)
/* ranks and merged_parts: counts, summed over the parts */
#define MAX_COUNT (1 << 24)

/* An original input some part holds the results of: its real path (as typed, for parts made
 * before the resume key had it) and the fingerprint of its content (NULL when unknown). */
typedef struct {
    char *path, *fp;
    int part; /* which of our parts holds it */
} input;

/* The parts being merged: their files, checked layouts and sizes, and what the merged file
 * sums over them. */
typedef struct {
    const si_merge_config *cfg;
    hid_t *f;
    si_result_layout *l;
    struct stat *sb;
    char **real; /* each part's real path */
    char *key0;  /* the first part's key */
    uint64_t total, total_err, total_det, total_esc;
    int64_t ranks, merged; /* merged: the original parts in all (a merged part counts its own) */
    input *in;
    int n_in;
} merge;

static bool stopped(const merge *m) {
    return m->cfg->stop && m->cfg->stop();
}

static si_status interrupted(const merge *m) {
    int sig = m->cfg->stop();
    return si_error(SI_ERR_INTERRUPTED, "%s: merge interrupted by signal %d (%s): nothing written",
                    m->cfg->output, sig, strsignal(sig));
}

/* sum += v, false past 2^62 rows (counts from a hostile file must not wrap). */
static bool add_to(uint64_t *sum, uint64_t v) {
    if (v > ((uint64_t)1 << 62) || *sum > ((uint64_t)1 << 62) - v) return false;
    *sum += v;
    return true;
}

/* ---- the inputs a part holds: no input may be merged twice ---- */

/* The first n bytes of s (or fewer: up to its NUL) as a string; caller frees. */
static char *xstrndup(const char *s, size_t n) {
    char *d = strndup(s, n);
    if (!d) si_fatal(__FILE__, __LINE__, "strndup", "no memory");
    return d;
}

static bool is_hex16(const char *s) {
    for (int i = 0; i < 16; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

/* Splits key ("model_sha256=..;input=PATH;input_fp=HEX;images=N;rest") into the key without
 * the input, its fingerprint and the image count (what differs between parts; caller frees),
 * and when path/fp are given, the input's real path and fingerprint (caller frees; NULL when
 * the key has none). The path may hold ';': it ends at the ";input_fp=HEX;images=" after it. */
static char *split_key(const char *key, char **path, char **fp) {
    if (path) *path = NULL;
    if (fp) *fp = NULL;
    const char *in = !strncmp(key, "input=", 6) ? key : strstr(key, ";input=");
    in = in ? in + (*in == ';') : NULL;
    const char *end = NULL, *images = NULL;
    for (const char *s = in ? strstr(in, ";input_fp=") : NULL; s && !end;
         s = strstr(s + 1, ";input_fp=")) {
        bool ok = strlen(s + 10) >= 16 && is_hex16(s + 10) && !strncmp(s + 26, ";images=", 8);
        if (ok) end = s, images = s + 26;
    }
    if (in && !end) images = strstr(in, ";images="); /* older keys had no fingerprint */
    if (!in || !images) return si_xstrdup(key); /* no input in it: the key as it is must match */
    const char *after = images + 8 + strspn(images + 8, "0123456789");
    after += *after == ';';
    const char *path_end = end ? end : images;
    if (path) *path = xstrndup(in + 6, (size_t)(path_end - in - 6));
    if (fp && end) *fp = xstrndup(end + 10, 16);
    char *out = NULL;
    if (asprintf(&out, "%.*s%s", (int)(in - key), key, after) < 0)
        si_fatal(__FILE__, __LINE__, "asprintf", "no memory");
    return out;
}

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

/* Line k of a newline-separated list (empty lines count), or NULL; caller frees. */
static char *line_of(const char *list, int k) {
    for (; list && k > 0; k--) {
        list = strchr(list, '\n');
        list = list ? list + 1 : NULL;
    }
    return list ? xstrndup(list, strcspn(list, "\n")) : NULL;
}

/* Adds one input of part p, refused when an earlier part holds the same one: the same real
 * path, or the same content (fingerprint) under another path. Takes path and fp. */
static si_status add_input(merge *m, int p, char *path, char *fp) {
    normalize_path(path);
    if (fp && !*fp) {
        free(fp);
        fp = NULL;
    }
    si_status st = SI_OK;
    for (int k = 0; k < m->n_in && st == SI_OK; k++) {
        const input *o = &m->in[k];
        bool same_path = !strcmp(o->path, path), same_fp = fp && o->fp && !strcmp(o->fp, fp);
        if (same_path || same_fp)
            st = si_error(SI_ERR_ARG,
                          "%s and %s overlap: both hold the results of %s%s%s%s; each input may "
                          "be merged once",
                          m->cfg->parts[o->part], m->cfg->parts[p], o->path,
                          same_path ? "" : " (the same images as ", same_path ? "" : path,
                          same_path ? "" : ")");
    }
    m->in = si_xrealloc(m->in, sizeof *m->in * (size_t)(m->n_in + 1));
    m->in[m->n_in++] = (input){.path = path, .fp = fp, .part = p};
    return st;
}

/* Part p's original inputs: a merge lists its parts' in merged_inputs (and their fingerprints
 * in merged_input_fps), a run has its input's real path and fingerprint in its resume key. */
static si_status add_inputs(merge *m, int p, const char *key) {
    const char *path = m->cfg->parts[p];
    char *list = NULL, *fps = NULL;
    si_status st = si_resultview_attr_str(m->f[p], path, "merged_inputs", &list);
    if (st == SI_OK && list) st = si_resultview_attr_str(m->f[p], path, "merged_input_fps", &fps);
    if (st == SI_OK && list) {
        for (int k = 0; st == SI_OK; k++) {
            char *in = line_of(list, k);
            if (!in) break;
            st = add_input(m, p, in, line_of(fps, k));
        }
    } else if (st == SI_OK) {
        char *in = NULL, *fp = NULL;
        free(split_key(key, &in, &fp));
        if (!in) st = si_resultview_attr_str(m->f[p], path, "input", &in);
        if (st == SI_OK && !in)
            st = si_error(SI_ERR_FORMAT, "%s: no input recorded (resume_key or input)", path);
        if (st == SI_OK)
            st = add_input(m, p, in, fp);
        else
            free(fp);
    }
    free(list);
    free(fps);
    return st;
}

/* ---- the parts ---- */

/* The same file given twice (by any path: a symlink, ../, an absolute path, a hard link). */
static si_status same_file(const merge *m, int p) {
    for (int k = 0; k < p; k++)
        if ((m->sb[p].st_dev == m->sb[k].st_dev && m->sb[p].st_ino == m->sb[k].st_ino) ||
            (m->real[p] && m->real[k] && !strcmp(m->real[p], m->real[k])))
            return si_error(SI_ERR_ARG, "%s and %s are the same file: each part may be merged once",
                            m->cfg->parts[k], m->cfg->parts[p]);
    return SI_OK;
}

/* Part p has the datasets of the first part, of the same types and per-image shapes
 * (/ids_escaped, present only where an id was escaped, aside). */
static si_status same_datasets(const merge *m, int p) {
    const si_result_layout *a = &m->l[0], *b = &m->l[p];
    const char *pa = m->cfg->parts[0], *pb = m->cfg->parts[p];
    for (int pass = 0; pass < 2; pass++) {
        const si_result_layout *x = pass ? b : a, *y = pass ? a : b;
        for (int k = 0; k < x->n; k++)
            if (strcmp(x->d[k].name, "ids_escaped") && !si_resultview_find(y, x->d[k].name))
                return si_error(SI_ERR_ARG, "%s has /%s, %s has not: not parts of one run",
                                pass ? pb : pa, x->d[k].name, pass ? pa : pb);
    }
    for (int k = 0; k < b->n; k++) {
        const si_result_dataset *y = &b->d[k], *x = si_resultview_find(a, y->name);
        bool same = x && x->rank == y->rank && H5Tequal(x->type, y->type) > 0;
        for (int i = 1; same && i < x->rank; i++) same = x->dims[i] == y->dims[i];
        if (x && !same)
            return si_error(SI_ERR_ARG,
                            "%s: /%s is not of the type and per-image shape it has in %s", pb,
                            y->name, pa);
    }
    return SI_OK;
}

/* A part's /detections/offsets start at 0 and end at its number of detections: they are
 * rebased by adding the detections before the part. */
static si_status check_offsets(const merge *m, int p) {
    const si_result_layout *l = &m->l[p];
    if (!si_resultview_find(l, "detections/offsets")) return SI_OK;
    hid_t d = H5Dopen2(m->f[p], "detections/offsets", H5P_DEFAULT), fs = H5Dget_space(d);
    hsize_t at[2] = {0, l->images}, two = 2;
    uint64_t v[2] = {1, 0};
    hid_t ms = H5Screate_simple(1, &two, NULL);
    herr_t e = H5Sselect_elements(fs, H5S_SELECT_SET, 2, at);
    if (e >= 0) e = H5Dread(d, H5T_NATIVE_UINT64, ms, fs, H5P_DEFAULT, v);
    H5Sclose(ms);
    H5Sclose(fs);
    H5Dclose(d);
    if (e < 0 || v[0] != 0 || v[1] != l->detections)
        return si_error(SI_ERR_FORMAT,
                        "%s: /detections/offsets run from %llu to %llu, not from 0 to its %llu "
                        "detections",
                        m->cfg->parts[p], (unsigned long long)v[0], (unsigned long long)v[1],
                        (unsigned long long)l->detections);
    return SI_OK;
}

/* A count attribute (ranks, merged_parts) of part p: dflt when absent. */
static si_status count_attr(const merge *m, int p, const char *name, int64_t dflt, int64_t *v) {
    bool found = false;
    si_status st = si_resultview_attr_int(m->f[p], m->cfg->parts[p], name, v, &found);
    if (st == SI_OK && !found) *v = dflt;
    if (st == SI_OK && (*v < 0 || *v > MAX_COUNT))
        st = si_error(SI_ERR_FORMAT, "%s: the attribute %s is %lld, not a count", m->cfg->parts[p],
                      name, (long long)*v);
    return st;
}

/* Part p's resume key without its input: the settings every part must share. */
static si_status settings_of(merge *m, int p, char **key) {
    const char *path = m->cfg->parts[p];
    char *raw = NULL;
    si_status st = si_resultview_attr_str(m->f[p], path, "resume_key", &raw);
    if (st == SI_OK && !raw)
        st = si_error(SI_ERR_FORMAT, "%s: no resume_key: not a shardinfer result", path);
    if (st == SI_OK) *key = raw;
    return st;
}

/* Opens part p, checks that it is a result made like the first, and adds up its sizes. */
static si_status open_part(merge *m, int p) {
    const char *path = m->cfg->parts[p];
    si_status st = si_resultview_open(path, &m->f[p]);
    if (st != SI_OK) return st;
    if (stat(path, &m->sb[p]) != 0)
        return si_error(SI_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    m->real[p] = realpath(path, NULL);
    if ((st = same_file(m, p)) != SI_OK) return st;
    if ((st = si_resultview_layout(m->f[p], path, &m->l[p])) != SI_OK) return st;
    char *raw = NULL;
    if ((st = settings_of(m, p, &raw)) != SI_OK) return st;
    char *key = split_key(raw, NULL, NULL);
    if (p == 0) {
        m->key0 = key;
        key = NULL;
    } else if (strcmp(key, m->key0)) {
        st = si_error(SI_ERR_ARG,
                      "%s: made with other settings than %s (model, preprocessing, "
                      "postprocessing or batch): '%s' vs '%s'",
                      path, m->cfg->parts[0], key, m->key0);
    }
    free(key);
    if (st == SI_OK && p > 0) st = same_datasets(m, p);
    if (st == SI_OK) st = check_offsets(m, p);
    const si_result_layout *l = &m->l[p];
    if (st == SI_OK && !(add_to(&m->total, l->images) && add_to(&m->total_err, l->failed) &&
                         add_to(&m->total_det, l->detections) && add_to(&m->total_esc, l->escaped)))
        st = si_error(SI_ERR_FORMAT, "%s: the parts hold more rows than a result can", path);
    int64_t r = 0, mp = 1;
    if (st == SI_OK) st = count_attr(m, p, "ranks", 0, &r);
    if (st == SI_OK) st = count_attr(m, p, "merged_parts", 1, &mp);
    m->ranks += r;
    m->merged += mp;
    if (st == SI_OK) st = add_inputs(m, p, raw);
    free(raw);
    return st;
}

/* The output, when it exists, may be replaced (--overwrite) and is none of the parts. */
static si_status check_output(const merge *m) {
    const char *out = m->cfg->output;
    struct stat lsb, sb;
    if (lstat(out, &lsb) != 0) return SI_OK;
    if (!m->cfg->overwrite)
        return si_error(SI_ERR_ARG, "%s: exists; pass --overwrite to replace it", out);
    if (S_ISDIR(lsb.st_mode)) return si_error(SI_ERR_ARG, "%s: is a directory", out);
    char *real = realpath(out, NULL);
    si_status st = SI_OK;
    for (int p = 0; p < m->cfg->n_parts && st == SI_OK; p++) {
        bool same =
            stat(out, &sb) == 0 && sb.st_dev == m->sb[p].st_dev && sb.st_ino == m->sb[p].st_ino;
        same |= real && m->real[p] && !strcmp(real, m->real[p]);
        if (same)
            st = si_error(SI_ERR_ARG, "%s is the same file as the part %s: merge into another file",
                          out, m->cfg->parts[p]);
    }
    free(real);
    return st;
}

/* One warning when the parts' batches are not those of one run over the whole set: a run
 * computes its images in batches, the CPU backend's values of an image depend (in their last
 * bits) on the images sharing its batch, and a part starts a new batch. */
static void warn_batches(const merge *m) {
    for (int p = 0; p + 1 < m->cfg->n_parts; p++) {
        int64_t batch = 0;
        bool found = false;
        if (si_resultview_attr_int(m->f[p], m->cfg->parts[p], "batch_size", &batch, &found) !=
                SI_OK ||
            !found || batch < 1 || m->l[p].images % (uint64_t)batch == 0)
            continue;
        si_log_warn("%s: %llu images, not a multiple of its batch size %lld: the merged values "
                    "may differ from one run's over the whole set in their last bits (the "
                    "statuses do not); for the same file bit for bit, every part but the last "
                    "must hold a multiple of the batch size",
                    m->cfg->parts[p], (unsigned long long)m->l[p].images, (long long)batch);
        return;
    }
}

/* ---- copying ---- */

/* The memory type rows of file type ft are copied in: the native one, but for a half, which is
 * copied in its own type since HDF5 1.10 has no native half and going through float rewrites
 * the bits of NaN (a failed image's row). Caller closes it. */
static hid_t copy_type(hid_t ft) {
    if (H5Tget_class(ft) == H5T_FLOAT && H5Tget_size(ft) == 2) return H5Tcopy(ft);
    return H5Tget_native_type(ft, H5T_DIR_ASCEND);
}

/* Copies rows [0, n) of src's checked dataset x to rows [at, at + n) of dst's; add is added to
 * every value (x is then uint64: an index or an offset). */
static si_status copy_rows(const merge *m, hid_t src, hid_t dst, const si_result_dataset *x,
                           uint64_t at, uint64_t add, uint64_t n, const char *part) {
    hid_t ds = H5Dopen2(src, x->name, H5P_DEFAULT), dd = H5Dopen2(dst, x->name, H5P_DEFAULT);
    hid_t mt = copy_type(x->type);
    si_status st = SI_OK;
    if (ds < 0 || dd < 0 || mt < 0)
        st = si_error(SI_ERR_FORMAT, "%s: cannot read /%s", part, x->name);
    /* one row in memory: the row's values (row_bytes / the file type's size) in mt */
    size_t row = mt >= 0 ? x->row_bytes / H5Tget_size(x->type) * H5Tget_size(mt) : 0;
    hsize_t rows =
        row && BLOCK_BYTES / row < BLOCK ? (BLOCK_BYTES / row ? BLOCK_BYTES / row : 1) : BLOCK;
    bool vlen = mt >= 0 && H5Tis_variable_str(mt) > 0;
    SI_ASSERT(!add || (mt >= 0 && H5Tget_size(mt) == 8)); /* resultview checked: uint64 */
    uint8_t *buf = st == SI_OK ? malloc(row * rows + 1) : NULL;
    if (st == SI_OK && !buf)
        st = si_error(SI_ERR_NOMEM, "%s: no memory for a block of /%s", part, x->name);
    for (uint64_t r = 0; st == SI_OK && r < n; r += rows) {
        if (stopped(m)) {
            st = interrupted(m);
            break;
        }
        hsize_t c = n - r < rows ? n - r : rows;
        hsize_t start[SI_RESULTVIEW_MAX_RANK] = {r}, cnt[SI_RESULTVIEW_MAX_RANK] = {c},
                dstart[SI_RESULTVIEW_MAX_RANK] = {at + r};
        for (int i = 1; i < x->rank; i++) cnt[i] = x->dims[i];
        hid_t fs = H5Dget_space(ds), ms = H5Screate_simple(x->rank, cnt, NULL);
        hid_t gs = H5Dget_space(dd);
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
            st = si_error(SI_ERR_IO, "%s: cannot copy /%s rows %llu+", part, x->name,
                          (unsigned long long)r);
    }
    free(buf);
    if (mt >= 0) H5Tclose(mt);
    if (ds >= 0) H5Dclose(ds);
    if (dd >= 0) H5Dclose(dd);
    return st;
}

/* Creates dst's dataset like x, with `rows` rows, chunked (a few MiB a chunk) and compressed. */
static si_status create_like(hid_t dst, const si_result_dataset *x, uint64_t rows,
                             const char *tmp) {
    hsize_t dims[SI_RESULTVIEW_MAX_RANK];
    memcpy(dims, x->dims, sizeof dims);
    dims[0] = rows;
    hsize_t chunk = x->row_bytes > ((size_t)4 << 20) / 4096
                        ? (((size_t)4 << 20) / x->row_bytes ? ((size_t)4 << 20) / x->row_bytes : 1)
                        : 4096;
    hid_t dd = si_h5_create_chunked(dst, x->name, x->type, x->rank, dims, chunk);
    if (dd < 0) return si_error(SI_ERR_IO, "%s: cannot create /%s", tmp, x->name);
    H5Dclose(dd);
    return SI_OK;
}

/* Dataset x (as the parts have it) of the merged file: created at its full size, then every
 * part's rows in order. */
static si_status merge_dataset(const merge *m, hid_t out, const si_result_dataset *x,
                               const char *tmp) {
    uint64_t rows = x->rows == SI_RESULT_ROWS_IMAGES    ? m->total
                    : x->rows == SI_RESULT_ROWS_OFFSETS ? m->total + 1
                    : x->rows == SI_RESULT_ROWS_FAILED  ? m->total_err
                    : x->rows == SI_RESULT_ROWS_ESCAPED ? m->total_esc
                                                        : m->total_det;
    si_status st = create_like(out, x, rows, tmp);
    uint64_t at = 0, err_at = 0, det_at = 0, esc_at = 0;
    bool index = !strcmp(x->name, "index"), err_index = !strcmp(x->name, "errors/index");
    for (int p = 0; p < m->cfg->n_parts && st == SI_OK; p++) {
        const si_result_layout *l = &m->l[p];
        const si_result_dataset *y = si_resultview_find(l, x->name);
        const char *part = m->cfg->parts[p];
        hid_t f = m->f[p];
        bool last = p == m->cfg->n_parts - 1;
        if (!y) /* /ids_escaped: this part has none */
            ;
        else if (x->rows == SI_RESULT_ROWS_IMAGES)
            st = copy_rows(m, f, out, y, at, index ? at : 0, l->images, part);
        else if (x->rows == SI_RESULT_ROWS_FAILED)
            st = copy_rows(m, f, out, y, err_at, err_index ? at : 0, l->failed, part);
        else if (x->rows == SI_RESULT_ROWS_ESCAPED)
            st = copy_rows(m, f, out, y, esc_at, at, l->escaped, part);
        else if (x->rows == SI_RESULT_ROWS_OFFSETS) /* N + 1 a part: its last is the next's 0 */
            st = copy_rows(m, f, out, y, at, det_at, l->images + (last ? 1 : 0), part);
        else
            st = copy_rows(m, f, out, y, det_at, 0, l->detections, part);
        at += l->images;
        err_at += l->failed;
        det_at += l->detections;
        esc_at += l->escaped;
    }
    return st;
}

/* Every dataset: the first part's, and /ids_escaped from the first part that has one. */
static si_status merge_datasets(const merge *m, hid_t out, const char *tmp) {
    si_status st = SI_OK;
    for (int k = 0; k < m->l[0].n && st == SI_OK; k++)
        if (strcmp(m->l[0].d[k].name, "ids_escaped"))
            st = merge_dataset(m, out, &m->l[0].d[k], tmp);
    for (int p = 0; p < m->cfg->n_parts && st == SI_OK; p++) {
        const si_result_dataset *esc = si_resultview_find(&m->l[p], "ids_escaped");
        if (esc && m->total_esc) {
            st = merge_dataset(m, out, esc, tmp);
            break;
        }
    }
    return st;
}

/* ---- attributes ---- */

/* The attributes the merged file gets its own values of. */
static const char *const REPLACED[] = {"images",       "failed",        "ranks",
                                       "merged_parts", "merged_inputs", "merged_input_fps"};

/* Copies attribute `name` of src to dst as it is, whatever its type and shape (a user may add
 * any with h5py), within MAX_ATTR_BYTES. */
static si_status copy_attr(hid_t src, hid_t dst, const char *name, const char *part) {
    hid_t a = H5Aopen(src, name, H5P_DEFAULT);
    hid_t ft = a >= 0 ? H5Aget_type(a) : -1, sp = a >= 0 ? H5Aget_space(a) : -1;
    bool ref = ft >= 0 && H5Tget_class(ft) == H5T_REFERENCE;
    hid_t mt = ft >= 0 && !ref ? H5Tget_native_type(ft, H5T_DIR_ASCEND) : -1;
    hssize_t n = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    size_t size = mt >= 0 ? H5Tget_size(mt) : 0;
    si_status st = SI_OK;
    if (ref)
        st = si_error(SI_ERR_FORMAT,
                      "%s: the attribute %s holds references, which mean nothing in another file",
                      part, name);
    else if (mt < 0 || n < 0 || size == 0)
        st = si_error(SI_ERR_FORMAT, "%s: cannot read the attribute %s", part, name);
    else if ((uint64_t)n > MAX_ATTR_BYTES / size)
        st = si_error(SI_ERR_FORMAT,
                      "%s: the attribute %s holds %lld values of %zu bytes: more than the %zu "
                      "MiB an attribute may have",
                      part, name, (long long)n, size, MAX_ATTR_BYTES >> 20);
    uint8_t *buf = st == SI_OK ? calloc((size_t)n * size + 1, 1) : NULL;
    if (st == SI_OK && !buf) st = si_error(SI_ERR_NOMEM, "%s: attribute %s", part, name);
    bool read = st == SI_OK && n > 0 && H5Aread(a, mt, buf) >= 0;
    if (st == SI_OK && n > 0 && !read)
        st = si_error(SI_ERR_FORMAT, "%s: cannot read the attribute %s", part, name);
    hid_t b = st == SI_OK ? H5Acreate2(dst, name, ft, sp, H5P_DEFAULT, H5P_DEFAULT) : -1;
    if (st == SI_OK && (b < 0 || (n > 0 && H5Awrite(b, mt, buf) < 0)))
        st = si_error(SI_ERR_IO, "cannot write the attribute %s (of %s)", name, part);
    if (read) H5Dvlen_reclaim(mt, sp, H5P_DEFAULT, buf); /* the strings a vlen type holds */
    free(buf);
    if (b >= 0) H5Aclose(b);
    if (mt >= 0) H5Tclose(mt);
    if (ft >= 0) H5Tclose(ft);
    if (sp >= 0) H5Sclose(sp);
    if (a >= 0) H5Aclose(a);
    return st;
}

typedef struct {
    hid_t dst;
    const char *part;
    si_status st;
} attr_ctx;

static herr_t copy_attr_cb(hid_t loc, const char *name, const H5A_info_t *info, void *arg) {
    (void)info;
    attr_ctx *c = arg;
    for (size_t k = 0; k < sizeof REPLACED / sizeof *REPLACED; k++)
        if (!strcmp(name, REPLACED[k])) return 0;
    c->st = copy_attr(loc, c->dst, name, c->part);
    return c->st == SI_OK ? 0 : 1;
}

/* The inputs' paths (fps false) or fingerprints ("" where unknown), one per line; caller
 * frees. */
static char *input_list(const merge *m, bool fps) {
    size_t len = 1;
    for (int k = 0; k < m->n_in; k++) {
        const char *s = fps ? m->in[k].fp : m->in[k].path;
        len += (s ? strlen(s) : 0) + 1;
    }
    char *all = si_xcalloc(1, len), *o = all;
    for (int k = 0; k < m->n_in; k++) {
        const char *s = fps ? m->in[k].fp : m->in[k].path;
        o += sprintf(o, "%s%s", k ? "\n" : "", s ? s : "");
    }
    return all;
}

/* The first part's attributes, with images, failed and ranks summed, merged_parts the original
 * parts in all, merged_inputs their inputs' real paths and merged_input_fps their content's
 * fingerprints (a merged part's own are replaced, not kept). */
static si_status merge_attrs(const merge *m, hid_t out, const char *tmp) {
    attr_ctx c = {.dst = out, .part = m->cfg->parts[0], .st = SI_OK};
    herr_t e = H5Aiterate2(m->f[0], H5_INDEX_NAME, H5_ITER_NATIVE, NULL, copy_attr_cb, &c);
    if (c.st != SI_OK) return c.st;
    if (e < 0) return si_error(SI_ERR_FORMAT, "%s: cannot list its attributes", c.part);
    int ranks = (int)m->ranks, merged = (int)m->merged; /* each part's at most MAX_COUNT */
    if (m->ranks > INT32_MAX || m->merged > INT32_MAX)
        return si_error(SI_ERR_FORMAT, "the parts count more than %d ranks or parts", INT32_MAX);
    e = si_h5_attr(out, "images", H5T_STD_U64LE, H5T_NATIVE_UINT64, &m->total);
    if (e >= 0) e = si_h5_attr(out, "failed", H5T_STD_U64LE, H5T_NATIVE_UINT64, &m->total_err);
    if (e >= 0) e = si_h5_attr(out, "ranks", H5T_STD_I32LE, H5T_NATIVE_INT, &ranks);
    if (e >= 0) e = si_h5_attr(out, "merged_parts", H5T_STD_I32LE, H5T_NATIVE_INT, &merged);
    char *paths = input_list(m, false), *fps = input_list(m, true);
    hid_t t = si_h5_utf8_type();
    if (e >= 0) e = si_h5_attr_str(out, "merged_inputs", t, paths);
    if (e >= 0) e = si_h5_attr_str(out, "merged_input_fps", t, fps);
    H5Tclose(t);
    free(paths);
    free(fps);
    if (e < 0) return si_error(SI_ERR_IO, "%s: cannot write the attributes", tmp);
    return SI_OK;
}

/* ---- the temporary file beside the output ---- */

/* Made by mkostemp (O_CREAT | O_EXCL: never an existing file, never through a symlink), unique
 * to this process, so two merges to one output never touch each other's; removed only while
 * the name still is the file made here. */
typedef struct {
    char *path;
    int fd;
    struct stat sb;
} temp;

static si_status temp_create(const char *output, temp *t) {
    if (asprintf(&t->path, "%s.tmp.XXXXXX", output) < 0)
        si_fatal(__FILE__, __LINE__, "asprintf", "no memory");
    t->fd = mkostemp(t->path, O_CLOEXEC);
    if (t->fd < 0 || fstat(t->fd, &t->sb) != 0)
        return si_error(SI_ERR_IO, "%s: cannot create a temporary file beside it: %s", output,
                        strerror(errno));
    mode_t mask = umask(0); /* the mode a file made by open(0666) gets, not mkstemp's 0600 */
    umask(mask);
    if (fchmod(t->fd, 0666 & ~mask) != 0)
        return si_error(SI_ERR_IO, "%s: cannot set its mode: %s", t->path, strerror(errno));
    return SI_OK;
}

static bool temp_is_ours(const temp *t) {
    struct stat sb;
    return lstat(t->path, &sb) == 0 && sb.st_dev == t->sb.st_dev && sb.st_ino == t->sb.st_ino;
}

/* HDF5 opens files by name: through /proc/self/fd the name is the file made here, whatever
 * happens to t->path meanwhile. Caller frees. */
static char *temp_h5_name(const temp *t) {
    char *name = NULL;
    if (access("/proc/self/fd", X_OK) != 0) return si_xstrdup(t->path);
    if (asprintf(&name, "/proc/self/fd/%d", t->fd) < 0)
        si_fatal(__FILE__, __LINE__, "asprintf", "no memory");
    return name;
}

/* The finished temporary, synced, renamed over the output (atomic: readers see the old file or
 * the new one). */
static si_status temp_commit(temp *t, const char *output) {
    if (fsync(t->fd) != 0)
        return si_error(SI_ERR_IO, "%s: cannot sync: %s", t->path, strerror(errno));
    if (!temp_is_ours(t))
        return si_error(SI_ERR_IO, "%s: replaced by another process while merging", t->path);
    if (rename(t->path, output) != 0)
        return si_error(SI_ERR_IO, "%s: cannot rename %s to it: %s", output, t->path,
                        strerror(errno));
    free(t->path);
    t->path = NULL;
    return SI_OK;
}

static void temp_remove(temp *t) {
    if (t->path && t->fd >= 0 && temp_is_ours(t)) unlink(t->path);
    if (t->fd >= 0) close(t->fd);
    free(t->path);
}

/* ---- the merge ---- */

static void merge_free(merge *m) {
    for (int p = 0; p < m->cfg->n_parts; p++) {
        if (m->f[p] >= 0) H5Fclose(m->f[p]);
        si_resultview_layout_free(&m->l[p]);
        free(m->real[p]);
    }
    for (int k = 0; k < m->n_in; k++) {
        free(m->in[k].path);
        free(m->in[k].fp);
    }
    free(m->in);
    free(m->key0);
    free(m->f);
    free(m->l);
    free(m->sb);
    free(m->real);
}

/* Writes the merged file into t. */
static si_status write_merged(const merge *m, temp *t) {
    char *name = temp_h5_name(t);
    hid_t out = H5Fcreate(name, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    free(name);
    si_status st = out < 0 ? si_error(SI_ERR_IO, "%s: cannot create", t->path) : SI_OK;
    if (st == SI_OK) st = merge_datasets(m, out, t->path);
    if (st == SI_OK) st = merge_attrs(m, out, t->path);
    if (st == SI_OK && stopped(m)) st = interrupted(m);
    if (out >= 0 && H5Fclose(out) < 0 && st == SI_OK)
        st = si_error(SI_ERR_IO, "%s: cannot close (disk full?)", t->path);
    return st;
}

si_status si_result_merge(const si_merge_config *cfg) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    if (cfg->n_parts < 1) return si_error(SI_ERR_ARG, "merge: no parts given");
    struct stat sb;
    if (!cfg->overwrite && lstat(cfg->output, &sb) == 0)
        return si_error(SI_ERR_ARG, "%s: exists; pass --overwrite to replace it", cfg->output);
    size_t n = (size_t)cfg->n_parts;
    merge m = {.cfg = cfg,
               .f = si_xmalloc(n * sizeof(hid_t)),
               .l = si_xcalloc(n, sizeof(si_result_layout)),
               .sb = si_xcalloc(n, sizeof(struct stat)),
               .real = si_xcalloc(n, sizeof(char *))};
    for (size_t p = 0; p < n; p++) m.f[p] = H5I_INVALID_HID;
    si_status st = SI_OK;
    for (int p = 0; p < cfg->n_parts && st == SI_OK; p++)
        st = stopped(&m) ? interrupted(&m) : open_part(&m, p);
    if (st == SI_OK) st = check_output(&m);
    if (st == SI_OK) warn_batches(&m);
    temp t = {.fd = -1};
    if (st == SI_OK) st = temp_create(cfg->output, &t);
    if (st == SI_OK) st = write_merged(&m, &t);
    if (st == SI_OK) st = stopped(&m) ? interrupted(&m) : temp_commit(&t, cfg->output);
    temp_remove(&t);
    merge_free(&m);
    return st;
}
