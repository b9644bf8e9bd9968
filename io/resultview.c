/* `shardinfer show`: reads a result in blocks and prints a line per image: the top-K classes of a
 * classify result; for the other postprocessors the per-image values (an embedding's first
 * values, the congestion score, the detections). Also the checks every reader of a result
 * (show, merge) makes before it trusts a dimension, a type or an attribute of the file. */
#include "io/resultview.h"

#include "io/h5util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BLOCK 4096
/* Bounds on what a hostile file may make a reader allocate: one image's row of a column (a raw
 * output of 2048 x 2048 x 16 floats is 256 MiB), one chunk (HDF5 allocates a whole chunk to
 * read any part of it), a string attribute, the objects walked, the classes of a top-K. */
#define MAX_ROW_BYTES   ((size_t)256 << 20)
#define MAX_CHUNK_BYTES ((uint64_t)256 << 20)
#define MAX_ATTR_BYTES  ((size_t)64 << 20)
#define MAX_LINKS       4096
#define MAX_TOPK        (1 << 20)
/* A labels file: a class name per line. */
#define MAX_LABEL_LINE  4096
#define MAX_LABEL_BYTES ((size_t)64 << 20)

/* ---- checks of a result's attributes, links and datasets ---- */

si_status si_resultview_attr_str(hid_t obj, const char *path, const char *name, char **out) {
    *out = NULL;
    htri_t ex = H5Aexists(obj, name);
    if (ex == 0) return SI_OK;
    hid_t a = ex > 0 ? H5Aopen(obj, name, H5P_DEFAULT) : -1;
    hid_t ft = a >= 0 ? H5Aget_type(a) : -1, sp = a >= 0 ? H5Aget_space(a) : -1;
    hid_t mt = ft >= 0 ? H5Tcopy(ft) : -1; /* read as stored: no cset or padding conversion */
    si_status st = SI_OK;
    bool vlen = mt >= 0 && H5Tis_variable_str(mt) > 0;
    size_t size = mt >= 0 ? H5Tget_size(mt) : 0;
    if (mt < 0 || sp < 0)
        st = si_error(SI_ERR_FORMAT, "%s: cannot read the attribute %s", path, name);
    else if (H5Tget_class(ft) != H5T_STRING || H5Sget_simple_extent_npoints(sp) != 1)
        st = si_error(SI_ERR_FORMAT, "%s: the attribute %s is not one string", path, name);
    else if (!vlen && size > MAX_ATTR_BYTES)
        st = si_error(SI_ERR_FORMAT, "%s: the attribute %s is a string of %zu bytes: too long",
                      path, name, size);
    if (st == SI_OK && vlen) {
        char *v = NULL;
        if (H5Aread(a, mt, &v) < 0)
            st = si_error(SI_ERR_FORMAT, "%s: cannot read the attribute %s", path, name);
        else if (v && strnlen(v, MAX_ATTR_BYTES + 1) > MAX_ATTR_BYTES)
            st = si_error(SI_ERR_FORMAT, "%s: the attribute %s is longer than %zu bytes", path,
                          name, MAX_ATTR_BYTES);
        else
            *out = si_xstrdup(v ? v : "");
        H5free_memory(v);
    } else if (st == SI_OK) {
        char *v = si_xcalloc(size + 1, 1); /* fixed length: not always NUL-terminated */
        if (H5Aread(a, mt, v) < 0) {
            free(v);
            st = si_error(SI_ERR_FORMAT, "%s: cannot read the attribute %s", path, name);
        } else {
            *out = v;
        }
    }
    if (mt >= 0) H5Tclose(mt);
    if (ft >= 0) H5Tclose(ft);
    if (sp >= 0) H5Sclose(sp);
    if (a >= 0) H5Aclose(a);
    return st;
}

si_status si_resultview_attr_int(hid_t obj, const char *path, const char *name, int64_t *out,
                                 bool *found) {
    *found = false;
    htri_t ex = H5Aexists(obj, name);
    if (ex == 0) return SI_OK;
    hid_t a = ex > 0 ? H5Aopen(obj, name, H5P_DEFAULT) : -1;
    hid_t ft = a >= 0 ? H5Aget_type(a) : -1, sp = a >= 0 ? H5Aget_space(a) : -1;
    si_status st = SI_OK;
    if (ft < 0 || sp < 0 || H5Tget_class(ft) != H5T_INTEGER ||
        H5Sget_simple_extent_npoints(sp) != 1 || H5Aread(a, H5T_NATIVE_INT64, out) < 0)
        st = si_error(SI_ERR_FORMAT, "%s: the attribute %s is not one integer", path, name);
    else
        *found = true;
    if (ft >= 0) H5Tclose(ft);
    if (sp >= 0) H5Sclose(sp);
    if (a >= 0) H5Aclose(a);
    return st;
}

/* The datasets a result may hold, by name; any other must be a postprocessor column: numbers,
 * one row per image (rank 0 here: any rank up to SI_RESULTVIEW_MAX_RANK). */
typedef enum { T_STRING, T_U64, T_INT, T_FLOAT, T_NUMBER } value_kind;
static const struct {
    const char *name;
    si_result_rows rows;
    value_kind kind;
    int rank;
    hsize_t width; /* dims[1] when not 0 */
} KNOWN[] = {
    {"ids", SI_RESULT_ROWS_IMAGES, T_STRING, 1, 0},
    {"index", SI_RESULT_ROWS_IMAGES, T_U64, 1, 0},
    {"status", SI_RESULT_ROWS_IMAGES, T_INT, 1, 0},
    {"ids_escaped", SI_RESULT_ROWS_ESCAPED, T_U64, 1, 0},
    {"errors/index", SI_RESULT_ROWS_FAILED, T_U64, 1, 0},
    {"errors/message", SI_RESULT_ROWS_FAILED, T_STRING, 1, 0},
    {"detections/offsets", SI_RESULT_ROWS_OFFSETS, T_U64, 1, 0},
    {"detections/boxes", SI_RESULT_ROWS_DETECTIONS, T_FLOAT, 2, 4},
    {"detections/scores", SI_RESULT_ROWS_DETECTIONS, T_FLOAT, 1, 0},
    {"detections/classes", SI_RESULT_ROWS_DETECTIONS, T_INT, 1, 0},
    {"topk_class", SI_RESULT_ROWS_IMAGES, T_INT, 2, 0},
    {"topk_prob", SI_RESULT_ROWS_IMAGES, T_FLOAT, 2, 0},
};
static const char *const KIND_NAMES[] = {"a variable-length string", "uint64", "an integer",
                                         "a float", "integers or floats"};

static bool kind_ok(value_kind k, hid_t t) {
    H5T_class_t c = H5Tget_class(t);
    size_t size = H5Tget_size(t);
    bool integer = c == H5T_INTEGER && size >= 1 && size <= 8;
    bool real = c == H5T_FLOAT && (size == 2 || size == 4 || size == 8);
    switch (k) {
    case T_STRING: return c == H5T_STRING && H5Tis_variable_str(t) > 0;
    case T_U64: return integer && size == 8 && H5Tget_sign(t) == H5T_SGN_NONE;
    case T_INT: return integer;
    case T_FLOAT: return real;
    case T_NUMBER: return integer || real;
    }
    return false;
}

/* The dataset's data is in this file, in chunks a reader can afford. */
static si_status check_storage(hid_t d, const char *path, const char *name, size_t elem) {
    hid_t dcpl = H5Dget_create_plist(d);
    if (dcpl < 0) return si_error(SI_ERR_FORMAT, "%s: /%s: cannot read its layout", path, name);
    H5D_layout_t lay = H5Pget_layout(dcpl);
    si_status st = SI_OK;
    if (lay == H5D_VIRTUAL)
        st = si_error(SI_ERR_FORMAT, "%s: /%s is a virtual dataset (its data is in other files)",
                      path, name);
    else if (H5Pget_external_count(dcpl) != 0)
        st = si_error(SI_ERR_FORMAT, "%s: /%s is stored in external files", path, name);
    else if (lay == H5D_CHUNKED) {
        hsize_t ch[H5S_MAX_RANK];
        int r = H5Pget_chunk(dcpl, H5S_MAX_RANK, ch);
        uint64_t bytes = elem;
        for (int i = 0; i < r && bytes <= MAX_CHUNK_BYTES; i++)
            bytes = ch[i] && bytes > MAX_CHUNK_BYTES / ch[i] ? MAX_CHUNK_BYTES + 1 : bytes * ch[i];
        if (r < 1 || bytes > MAX_CHUNK_BYTES)
            st = si_error(SI_ERR_FORMAT, "%s: /%s: chunks of more than %llu MiB", path, name,
                          (unsigned long long)(MAX_CHUNK_BYTES >> 20));
    } else if (lay != H5D_CONTIGUOUS && lay != H5D_COMPACT) {
        st = si_error(SI_ERR_FORMAT, "%s: /%s: unknown storage layout", path, name);
    }
    H5Pclose(dcpl);
    return st;
}

/* Fills x from the open dataset d (rank, dims and type checked against the rule for its name).
 * x->type is set only on success. */
static si_status check_dataset(hid_t d, const char *path, const char *name, si_result_dataset *x) {
    int rule = -1;
    for (size_t k = 0; k < sizeof KNOWN / sizeof *KNOWN && rule < 0; k++)
        if (!strcmp(name, KNOWN[k].name)) rule = (int)k;
    if (rule < 0 && (!strncmp(name, "errors/", 7) || !strncmp(name, "detections/", 11)))
        return si_error(SI_ERR_FORMAT, "%s: /%s: not a dataset a result has", path, name);
    value_kind kind = rule >= 0 ? KNOWN[rule].kind : T_NUMBER;
    int want_rank = rule >= 0 ? KNOWN[rule].rank : 0;
    x->rows = rule >= 0 ? KNOWN[rule].rows : SI_RESULT_ROWS_IMAGES;
    hid_t sp = H5Dget_space(d);
    int rank = sp >= 0 && H5Sget_simple_extent_type(sp) == H5S_SIMPLE
                   ? H5Sget_simple_extent_ndims(sp)
                   : -1;
    /* the rank first: the dims are read into an array of SI_RESULTVIEW_MAX_RANK */
    bool rank_ok = rank >= 1 && rank <= SI_RESULTVIEW_MAX_RANK && (!want_rank || rank == want_rank);
    if (rank_ok) H5Sget_simple_extent_dims(sp, x->dims, NULL);
    if (sp >= 0) H5Sclose(sp);
    if (rank < 0)
        return si_error(SI_ERR_FORMAT, "%s: /%s is not an array (a scalar or empty dataspace)",
                        path, name);
    if (!rank_ok)
        return si_error(SI_ERR_FORMAT, "%s: /%s has rank %d; a result's has %s", path, name, rank,
                        want_rank == 1   ? "rank 1"
                        : want_rank == 2 ? "rank 2"
                                         : "rank 1 to 9 (rows, then the per-image dims)");
    x->rank = rank;
    if (rule >= 0 && KNOWN[rule].width && x->dims[1] != KNOWN[rule].width)
        return si_error(SI_ERR_FORMAT, "%s: /%s has %llu columns, not %llu", path, name,
                        (unsigned long long)x->dims[1], (unsigned long long)KNOWN[rule].width);
    if (!strcmp(name, "topk_class") && x->dims[1] > MAX_TOPK)
        return si_error(SI_ERR_FORMAT, "%s: /%s: a top-%llu: more than %d classes", path, name,
                        (unsigned long long)x->dims[1], MAX_TOPK);
    hid_t t = H5Dget_type(d);
    if (t < 0 || !kind_ok(kind, t)) {
        if (t >= 0) H5Tclose(t);
        return si_error(SI_ERR_FORMAT, "%s: /%s is not %s", path, name, KIND_NAMES[kind]);
    }
    size_t row = H5Tget_size(t);
    for (int i = 1; i < rank && row <= MAX_ROW_BYTES; i++)
        row = x->dims[i] && row > MAX_ROW_BYTES / x->dims[i] ? MAX_ROW_BYTES + 1
                                                             : row * (size_t)x->dims[i];
    si_status st = row > MAX_ROW_BYTES
                       ? si_error(SI_ERR_FORMAT, "%s: /%s: more than %zu MiB per row", path, name,
                                  MAX_ROW_BYTES >> 20)
                       : check_storage(d, path, name, H5Tget_size(t));
    if (st != SI_OK) {
        H5Tclose(t);
        return st;
    }
    x->row_bytes = row;
    x->type = t;
    return SI_OK;
}

typedef struct {
    si_result_layout *l;
    const char *path;
    si_status st;
    int links;
} walk_ctx;

static herr_t visit_link(hid_t root, const char *name, const H5L_info_t *info, void *arg) {
    walk_ctx *w = arg;
    if (++w->links > MAX_LINKS) {
        w->st = si_error(SI_ERR_FORMAT, "%s: more than %d objects: not a shardinfer result",
                         w->path, MAX_LINKS);
        return 1;
    }
    if (info->type != H5L_TYPE_HARD) {
        w->st = si_error(SI_ERR_FORMAT, "%s: /%s is %s link; a result holds its datasets itself",
                         w->path, name,
                         info->type == H5L_TYPE_EXTERNAL ? "an external"
                         : info->type == H5L_TYPE_SOFT   ? "a soft"
                                                         : "a user-defined");
        return 1;
    }
    hid_t o = H5Oopen(root, name, H5P_DEFAULT);
    if (o < 0) {
        w->st = si_error(SI_ERR_FORMAT, "%s: /%s: cannot open it (damaged?)", w->path, name);
        return 1;
    }
    if (H5Iget_type(o) == H5I_DATASET) {
        si_result_dataset x = {.type = H5I_INVALID_HID};
        w->st = check_dataset(o, w->path, name, &x);
        if (w->st == SI_OK) {
            si_result_layout *l = w->l;
            l->d = si_xrealloc(l->d, sizeof *l->d * (size_t)(l->n + 1));
            x.name = si_xstrdup(name);
            l->d[l->n++] = x;
        }
    }
    H5Oclose(o);
    return w->st == SI_OK ? 0 : 1;
}

const si_result_dataset *si_resultview_find(const si_result_layout *l, const char *name) {
    for (int k = 0; k < l->n; k++)
        if (!strcmp(l->d[k].name, name)) return &l->d[k];
    return NULL;
}

/* Every dataset's rows agree with the counts /status and the lists set. */
static si_status check_counts(si_result_layout *l, const char *path) {
    static const char *const needed[] = {"ids", "index", "status", "errors/index",
                                         "errors/message"};
    for (size_t k = 0; k < sizeof needed / sizeof *needed; k++)
        if (!si_resultview_find(l, needed[k]))
            return si_error(SI_ERR_FORMAT, "%s: no dataset /%s: not a shardinfer result", path,
                            needed[k]);
    const si_result_dataset *det = si_resultview_find(l, "detections/scores");
    l->images = si_resultview_find(l, "status")->dims[0];
    l->failed = si_resultview_find(l, "errors/index")->dims[0];
    l->detections = det ? det->dims[0] : 0;
    l->escaped = 0;
    bool any_det = false;
    for (int k = 0; k < l->n; k++) {
        const si_result_dataset *x = &l->d[k];
        uint64_t want = 0;
        switch (x->rows) {
        case SI_RESULT_ROWS_IMAGES: want = l->images; break;
        case SI_RESULT_ROWS_OFFSETS: want = l->images + 1; break;
        case SI_RESULT_ROWS_FAILED: want = l->failed; break;
        case SI_RESULT_ROWS_ESCAPED: want = l->escaped = x->dims[0]; break;
        case SI_RESULT_ROWS_DETECTIONS: want = l->detections; break;
        }
        any_det |= x->rows == SI_RESULT_ROWS_OFFSETS || x->rows == SI_RESULT_ROWS_DETECTIONS;
        if (x->dims[0] != want)
            return si_error(SI_ERR_FORMAT, "%s: /%s has %llu rows, not %llu as /%s says", path,
                            x->name, (unsigned long long)x->dims[0], (unsigned long long)want,
                            x->rows == SI_RESULT_ROWS_FAILED       ? "errors/index"
                            : x->rows == SI_RESULT_ROWS_DETECTIONS ? "detections/scores"
                                                                   : "status");
    }
    if (l->failed > l->images || l->escaped > l->images || l->images == UINT64_MAX)
        return si_error(SI_ERR_FORMAT, "%s: more failed or escaped rows than images", path);
    static const char *const det_sets[] = {"detections/offsets", "detections/boxes",
                                           "detections/scores", "detections/classes"};
    for (size_t k = 0; any_det && k < 4; k++)
        if (!si_resultview_find(l, det_sets[k]))
            return si_error(SI_ERR_FORMAT, "%s: no dataset /%s beside the other detections", path,
                            det_sets[k]);
    const si_result_dataset *cls = si_resultview_find(l, "topk_class"),
                            *prob = si_resultview_find(l, "topk_prob");
    if (!cls != !prob || (cls && cls->dims[1] != prob->dims[1]))
        return si_error(SI_ERR_FORMAT, "%s: /topk_class and /topk_prob do not match", path);
    return SI_OK;
}

si_status si_resultview_layout(hid_t file, const char *path, si_result_layout *out) {
    *out = (si_result_layout){0};
    walk_ctx w = {.l = out, .path = path, .st = SI_OK};
    herr_t e = H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, visit_link, &w);
    if (w.st != SI_OK) return w.st;
    if (e < 0) return si_error(SI_ERR_FORMAT, "%s: cannot list its datasets (damaged?)", path);
    return check_counts(out, path);
}

void si_resultview_layout_free(si_result_layout *l) {
    if (!l) return;
    for (int k = 0; k < l->n; k++) {
        free(l->d[k].name);
        if (l->d[k].type >= 0) H5Tclose(l->d[k].type);
    }
    free(l->d);
    *l = (si_result_layout){0};
}

/* path names the partial file of an unfinished run: say how to finish it. */
static si_status unfinished(const char *path, size_t keep) {
    return si_error(SI_ERR_FORMAT,
                    "%s: the partial result of an unfinished run: finish it by running the same "
                    "`shardinfer run` command with --resume, which writes %.*s",
                    path, (int)keep, path);
}

si_status si_resultview_open(const char *path, hid_t *file) {
    *file = H5I_INVALID_HID;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    size_t len = strlen(path), sfx = strlen(".partial");
    if (len > sfx && !strcmp(path + len - sfx, ".partial")) return unfinished(path, len - sfx);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int err = errno;
        char *partial = NULL;
        if (asprintf(&partial, "%s.partial", path) < 0) si_fatal(__FILE__, __LINE__, "asprintf", 0);
        bool left = stat(partial, &sb) == 0;
        si_status st = left ? si_error(SI_ERR_FORMAT,
                                       "%s: not complete: an interrupted run left %s; finish it "
                                       "by running the same command with --resume",
                                       path, partial)
                            : si_error(SI_ERR_IO, "%s: %s", path, strerror(err));
        free(partial);
        return st;
    }
    /* a FIFO or a device would block or never end */
    if (!S_ISREG(sb.st_mode)) return si_error(SI_ERR_FORMAT, "%s: not a regular file", path);
    if (H5Fis_hdf5(path) <= 0) return si_error(SI_ERR_FORMAT, "%s: not an HDF5 file", path);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return si_error(SI_ERR_FORMAT, "%s: cannot open it as HDF5 (damaged?)", path);
    int64_t version = 0;
    bool found = false;
    si_status st = si_resultview_attr_int(f, path, "format_version", &version, &found);
    /* a partial file has its resume key from the start, format_version only once finished */
    if (st == SI_OK && !found && H5Aexists(f, "resume_key") > 0)
        st = si_error(SI_ERR_FORMAT,
                      "%s: the result of a run that has not finished (the partial file of an "
                      "interrupted run?): finish it by running the same `shardinfer run` command "
                      "with --resume",
                      path);
    else if (st == SI_OK && !found)
        st = si_error(SI_ERR_FORMAT, "%s: not a shardinfer result (no format_version)", path);
    else if (st == SI_OK && version != 2)
        st = si_error(SI_ERR_FORMAT, "%s: format_version %lld; results of format 2 expected", path,
                      (long long)version);
    if (st != SI_OK) {
        H5Fclose(f);
        return st;
    }
    *file = f;
    return SI_OK;
}

/* ---- show ---- */

/* The labels file's lines (caller frees each and the array), or NULL with the message set. */
static char **read_labels(const char *path, int *n) {
    *n = 0;
    /* O_NONBLOCK: opening a FIFO without a writer would wait forever */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat sb;
    if (fd < 0) {
        si_error(SI_ERR_IO, "%s: cannot open the labels file: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || (size_t)sb.st_size > MAX_LABEL_BYTES) {
        if (S_ISREG(sb.st_mode))
            si_error(SI_ERR_FORMAT, "%s: the labels file is over %zu MiB", path,
                     MAX_LABEL_BYTES >> 20);
        else
            si_error(SI_ERR_FORMAT, "%s: the labels file is not a regular file", path);
        close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "r");
    if (!f) si_fatal(__FILE__, __LINE__, "fdopen", "%s", strerror(errno));
    char **names = NULL, line[MAX_LABEL_LINE + 2];
    size_t total = 0;
    bool bad = false;
    /* bounded as it is read too: a file may grow, and /proc's files say they are empty */
    while (!bad && fgets(line, sizeof line, f)) {
        size_t l = strlen(line);
        total += l;
        bad = (l > MAX_LABEL_LINE && line[l - 1] != '\n') || *n == SI_RESULTVIEW_MAX_LABELS ||
              total > MAX_LABEL_BYTES;
        if (bad) break;
        line[strcspn(line, "\r\n")] = 0;
        names = si_xrealloc(names, sizeof *names * (size_t)(*n + 1));
        names[(*n)++] = si_xstrdup(line);
    }
    bad |= ferror(f) != 0;
    fclose(f);
    if (bad) {
        for (int i = 0; i < *n; i++) free(names[i]);
        free(names);
        si_error(SI_ERR_FORMAT,
                 "%s: not a labels file: a class name per line, at most %d bytes a line and %d "
                 "lines (line %d)",
                 path, MAX_LABEL_LINE, SI_RESULTVIEW_MAX_LABELS, *n + 1);
        *n = 0;
        return NULL;
    }
    if (!names) names = si_xcalloc(1, sizeof *names); /* an empty file: no names, not a failure */
    return names;
}

/* Reads rows [first, first+count) of a checked dataset of rank 1 or 2 into buf. */
static herr_t read_rows(hid_t ds, hid_t memtype, hsize_t first, hsize_t count, hsize_t width,
                        void *buf) {
    hid_t fs = H5Dget_space(ds);
    int rank = H5Sget_simple_extent_ndims(fs);
    SI_ASSERT(rank == 1 || rank == 2); /* the layout was checked */
    hsize_t start[2] = {first, 0}, cnt[2] = {count, width};
    herr_t rc = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
    hid_t ms = H5Screate_simple(rank, cnt, NULL);
    if (rc >= 0) rc = H5Dread(ds, memtype, ms, fs, H5P_DEFAULT, buf);
    H5Sclose(ms);
    H5Sclose(fs);
    return rc;
}

/* The first `max` values (in row-major order) of image `row` of a checked column, as text. */
static void print_values(FILE *out, hid_t ds, const si_result_dataset *x, hsize_t row, int max) {
    hsize_t per = 1;
    for (int d = 1; d < x->rank; d++) per *= x->dims[d]; /* bounded by row_bytes */
    hsize_t m = per < (hsize_t)max ? per : (hsize_t)max;
    if (m) {
        /* each value's coordinates: the flat index spread over the per-image dims */
        hsize_t coord[8 * SI_RESULTVIEW_MAX_RANK];
        double v[8];
        SI_ASSERT(max <= 8);
        for (hsize_t j = 0; j < m; j++) {
            hsize_t flat = j;
            coord[j * (hsize_t)x->rank] = row;
            for (int d = x->rank - 1; d >= 1; d--) {
                coord[j * (hsize_t)x->rank + (hsize_t)d] = flat % x->dims[d];
                flat /= x->dims[d];
            }
        }
        hid_t fs = H5Dget_space(ds), ms = H5Screate_simple(1, &m, NULL);
        herr_t e = H5Sselect_elements(fs, H5S_SELECT_SET, (size_t)m, coord);
        if (e >= 0) e = H5Dread(ds, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, v);
        for (hsize_t j = 0; e >= 0 && j < m; j++) fprintf(out, "%s%.4g", j ? " " : "", v[j]);
        if (e < 0) fputs("(unreadable)", out);
        H5Sclose(ms);
        H5Sclose(fs);
    }
    if (per > (hsize_t)max) fprintf(out, " ... (%llu values)", (unsigned long long)per);
}

/* The open datasets of a result show prints. */
typedef struct {
    hid_t ids, sta, cls, prob; /* classify: /topk_class and /topk_prob */
    hid_t off, box, sco, cla;  /* detect: /detections/... */
    hid_t *val;                /* the other per-image columns, as in layout */
    const si_result_dataset **val_x;
    int n_val;
    char **lab;
    int nlab;
} view;

/* One image of a result that is not classify: its values, then its first detections. */
static void print_generic_row(const view *v, hsize_t i, FILE *out) {
    for (int k = 0; k < v->n_val; k++) {
        fprintf(out, " %s: ", v->val_x[k]->name);
        print_values(out, v->val[k], v->val_x[k], i, 4);
    }
    uint64_t o[2];
    if (v->off < 0 || read_rows(v->off, H5T_NATIVE_UINT64, i, 2, 1, o) < 0) return;
    fprintf(out, " %llu detections", o[1] >= o[0] ? (unsigned long long)(o[1] - o[0]) : 0ULL);
    for (uint64_t d = o[0]; d < o[1] && d < o[0] + 3; d++) {
        float b[4], sc;
        int32_t c;
        if (read_rows(v->box, H5T_NATIVE_FLOAT, d, 1, 4, b) < 0 ||
            read_rows(v->sco, H5T_NATIVE_FLOAT, d, 1, 1, &sc) < 0 ||
            read_rows(v->cla, H5T_NATIVE_INT32, d, 1, 1, &c) < 0)
            break;
        fprintf(out, "%s class %d %.3f [%.1f %.1f %.1f %.1f]", d == o[0] ? ":" : " |", c, sc, b[0],
                b[1], b[2], b[3]);
    }
}

/* The non-classify results: every per-image dataset's first values, and detections. */
static si_status print_generic(const view *v, const char *path, hsize_t n, FILE *out) {
    hid_t strtype = si_h5_utf8_type();
    si_status st = SI_OK;
    for (hsize_t i = 0; i < n && st == SI_OK; i++) {
        char *id = NULL;
        int32_t s = -1;
        if (read_rows(v->ids, strtype, i, 1, 1, &id) < 0 ||
            read_rows(v->sta, H5T_NATIVE_INT32, i, 1, 1, &s) < 0) {
            st = si_error(SI_ERR_IO, "%s: read error at row %llu", path, (unsigned long long)i);
            break;
        }
        fprintf(out, "%-28s %-10s", id ? id : "?", si_image_status_name(s));
        H5free_memory(id);
        if (s == 0) print_generic_row(v, i, out);
        fputc('\n', out);
    }
    H5Tclose(strtype);
    return st;
}

/* One line per image of rows [b, b + c): id, status and, for an image that is ok, its top-k. */
static void print_block(const view *v, hsize_t c, hsize_t k, char **idbuf, const int32_t *sbuf,
                        const int32_t *cbuf, const float *pbuf, FILE *out) {
    for (hsize_t i = 0; i < c; i++) {
        fprintf(out, "%-28s %-10s", idbuf[i] ? idbuf[i] : "?", si_image_status_name(sbuf[i]));
        for (hsize_t j = 0; sbuf[i] == 0 && j < k; j++) {
            int32_t cl = cbuf[i * k + j];
            if (cl >= 0 && cl < v->nlab)
                fprintf(out, "%s %s %.3f", j ? " |" : "", v->lab[cl], pbuf[i * k + j]);
            else
                fprintf(out, "%s %d %.3f", j ? " |" : "", cl, pbuf[i * k + j]);
        }
        fputc('\n', out);
    }
}

/* The classify table: n images, k classes each (k <= MAX_TOPK), read in blocks. */
static si_status print_topk(const view *v, const char *path, hsize_t n, hsize_t k, FILE *out) {
    /* a block's top-k of a few MiB whatever k is */
    hsize_t rows = k > (1 << 20) / BLOCK ? ((1 << 20) / k ? (1 << 20) / k : 1) : BLOCK;
    hid_t strtype = si_h5_utf8_type();
    char **idbuf = si_xcalloc(rows, sizeof(char *));
    int32_t *sbuf = si_xmalloc(sizeof(int32_t) * rows);
    int32_t *cbuf = si_xmalloc(sizeof(int32_t) * rows * (k ? k : 1));
    float *pbuf = si_xmalloc(sizeof(float) * rows * (k ? k : 1));
    si_status st = SI_OK;
    fprintf(out, "%-28s %-10s top-%llu\n", "image", "status", (unsigned long long)k);
    for (hsize_t b = 0; b < n && st == SI_OK; b += rows) {
        hsize_t c = n - b < rows ? n - b : rows;
        if (read_rows(v->ids, strtype, b, c, 1, idbuf) < 0 ||
            read_rows(v->sta, H5T_NATIVE_INT32, b, c, 1, sbuf) < 0 ||
            read_rows(v->cls, H5T_NATIVE_INT32, b, c, k, cbuf) < 0 ||
            read_rows(v->prob, H5T_NATIVE_FLOAT, b, c, k, pbuf) < 0) {
            st = si_error(SI_ERR_IO, "%s: read error at row %llu", path, (unsigned long long)b);
            break;
        }
        print_block(v, c, k, idbuf, sbuf, cbuf, pbuf, out);
        hid_t ms = H5Screate_simple(1, &c, NULL);
        H5Dvlen_reclaim(strtype, ms, H5P_DEFAULT, idbuf);
        H5Sclose(ms);
    }
    free(idbuf);
    free(sbuf);
    free(cbuf);
    free(pbuf);
    H5Tclose(strtype);
    return st;
}

/* Opens dataset name of the checked layout l into *d; -1 and SI_OK when l has none. */
static si_status open_if(hid_t f, const si_result_layout *l, const char *path, const char *name,
                         hid_t *d) {
    *d = H5I_INVALID_HID;
    if (!si_resultview_find(l, name)) return SI_OK;
    *d = H5Dopen2(f, name, H5P_DEFAULT);
    return *d < 0 ? si_error(SI_ERR_IO, "%s: cannot open /%s", path, name) : SI_OK;
}

/* Opens what show prints of the checked layout l: ids, status, then the classify pair or the
 * other per-image columns and the detections. */
static si_status open_view(hid_t f, const si_result_layout *l, const char *path, view *v) {
    const char *names[] = {"ids",
                           "status",
                           "topk_class",
                           "topk_prob",
                           "detections/offsets",
                           "detections/boxes",
                           "detections/scores",
                           "detections/classes"};
    hid_t *ds[] = {&v->ids, &v->sta, &v->cls, &v->prob, &v->off, &v->box, &v->sco, &v->cla};
    si_status st = SI_OK;
    for (size_t k = 0; k < sizeof ds / sizeof *ds && st == SI_OK; k++)
        st = open_if(f, l, path, names[k], ds[k]);
    v->val = si_xcalloc((size_t)l->n + 1, sizeof *v->val);
    v->val_x = si_xcalloc((size_t)l->n + 1, sizeof *v->val_x);
    for (int k = 0; k < l->n && st == SI_OK && v->cls < 0; k++) {
        const si_result_dataset *x = &l->d[k];
        if (x->rows != SI_RESULT_ROWS_IMAGES || !strcmp(x->name, "ids") ||
            !strcmp(x->name, "index") || !strcmp(x->name, "status"))
            continue;
        v->val_x[v->n_val] = x;
        st = open_if(f, l, path, x->name, &v->val[v->n_val++]);
    }
    return st;
}

static void close_view(view *v) {
    hid_t all[] = {v->ids, v->sta, v->cls, v->prob, v->off, v->box, v->sco, v->cla};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++)
        if (all[k] >= 0) H5Dclose(all[k]);
    for (int k = 0; k < v->n_val; k++)
        if (v->val[k] >= 0) H5Dclose(v->val[k]);
    free(v->val);
    free(v->val_x);
    for (int i = 0; i < v->nlab; i++) free(v->lab[i]);
    free(v->lab);
}

si_status si_result_print(const char *path, const char *labels, long limit, FILE *out) {
    view v = {
        .ids = -1, .sta = -1, .cls = -1, .prob = -1, .off = -1, .box = -1, .sco = -1, .cla = -1};
    if (labels && !(v.lab = read_labels(labels, &v.nlab))) return SI_ERR_FORMAT;
    hid_t f = -1;
    si_result_layout l = {0};
    si_status st = si_resultview_open(path, &f);
    if (st == SI_OK) st = si_resultview_layout(f, path, &l);
    if (st == SI_OK) st = open_view(f, &l, path, &v);
    hsize_t n = l.images;
    if (limit >= 0 && (hsize_t)limit < n) n = (hsize_t)limit;
    if (st == SI_OK && v.cls >= 0)
        st = print_topk(&v, path, n, si_resultview_find(&l, "topk_class")->dims[1], out);
    else if (st == SI_OK)
        st = print_generic(&v, path, n, out);
    close_view(&v);
    si_resultview_layout_free(&l);
    if (f >= 0) H5Fclose(f);
    return st;
}
