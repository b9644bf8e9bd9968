/* Layout detection for an image source (io/source.h): which datasets of a file hold images, in
 * which layout, and the checks on datasets that opening needs. */
#include "io/source_internal.h"

#include <stdlib.h>
#include <string.h>

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
bool src_path_exists(si_source *s, hid_t file, const char *name) {
    size_t n = strlen(name);
    char *p = si_xmalloc(n + 1);
    memcpy(p, name, n + 1);
    bool ok = true;
    s->guard.refused[0] = s->fault[0] = '\0';
    for (size_t i = 1; ok && i <= n && !s->guard.refused[0]; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        char saved = p[i];
        p[i] = '\0';
        htri_t link = H5Lexists(file, p, s->dapl);
        htri_t obj = link > 0 ? H5Oexists_by_name(file, p, s->dapl) : 0;
        if ((link < 0 || obj < 0) && src_fault(s)) { /* s->fault says why */
            ok = false;
            break;
        }
        /* a refused external link "exists": opening it says why it is refused */
        ok = link > 0 && (obj > 0 || s->guard.refused[0]);
        p[i] = saved;
    }
    free(p);
    return ok;
}

/* Writes a type description ("uint8", "variable-length int32", "fixed-length string of 16 bytes
 * (ASCII)") into b. */
void src_type_str(hid_t t, char *b, size_t cap) {
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
            src_type_str(super, inner, sizeof inner);
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

bool src_is_u8(hid_t t) {
    return H5Tget_class(t) == H5T_INTEGER && H5Tget_size(t) == 1 && H5Tget_sign(t) == H5T_SGN_NONE;
}

/* Rank (or -1) and up to 4 dims of d. */
int src_dims_of(hid_t d, hsize_t dims[4]) {
    hid_t sp = H5Dget_space(d);
    if (sp < 0) return -1;
    int r = H5Sget_simple_extent_ndims(sp);
    if (r >= 0 && r <= 4) H5Sget_simple_extent_dims(sp, dims, NULL);
    H5Sclose(sp);
    return r;
}

/* What dataset d could be: a vlen or a dense image dataset, or neither; `why` describes it and
 * *near says whether it looks like what a user meant as images (a vlen of another type, a 4-D
 * array of another type), for the message that lists near misses. */
int src_classify(hid_t d, char *why, size_t cap, bool *near) {
    hid_t t = H5Dget_type(d);
    hsize_t dims[4] = {0};
    int rank = src_dims_of(d, dims);
    int kind = CAND_NONE;
    char ts[128] = "unreadable type";
    if (t >= 0) src_type_str(t, ts, sizeof ts);
    bool vlen = t >= 0 && H5Tget_class(t) == H5T_VLEN;
    if (vlen) {
        hid_t super = H5Tget_super(t);
        bool u8 = super >= 0 && src_is_u8(super);
        if (super >= 0) H5Tclose(super);
        if (u8 && rank == 1) kind = CAND_VLEN;
    } else if (t >= 0 && src_is_u8(t) && rank == 4) {
        kind = CAND_DENSE;
    }
    if (near) *near = kind == CAND_NONE && (vlen || rank == 4);
    snprintf(why, cap, "%s, rank %d", ts, rank);
    if (t >= 0) H5Tclose(t);
    return kind;
}

/* --- candidate search ------------------------------------------------------------------------- */

typedef struct {
    si_source *s; /* its dapl, and its fault note when a read fails under the walk */
    bool want_vlen, want_dense;
    int n;                       /* candidates */
    char *names[MAX_CANDIDATES]; /* the first few */
    int kinds[MAX_CANDIDATES];
    char misses[512]; /* near misses: vlen or 4-D datasets of the wrong kind */
} cand_search;

static herr_t visit_one(hid_t obj, const char *name, H5O_type_t type, cand_search *cs) {
    if (type != H5O_TYPE_DATASET) return 0;
    hid_t d = H5Dopen2(obj, name, cs->s->dapl);
    if (d < 0) return src_fault(cs->s) ? -1 : 0; /* EIO stops the walk: no answer from it */
    char why[160];
    bool near = false;
    int kind = src_classify(d, why, sizeof why, &near);
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

/* --- detection -------------------------------------------------------------------------------- */

/* Whether f is read as packed: forced, offsets named, or the default offsets present (unless the
 * named data dataset is itself an image dataset). f->offsets_name is set. */
static bool is_packed(si_source *s, src_file *f, const si_source_opts *o, int want) {
    f->offsets_name = abs_name(o->offsets_dataset ? o->offsets_dataset : "/images/offsets");
    if (want == SI_LAYOUT_PACKED) return true;
    if (want != SI_LAYOUT_AUTO) return false;
    if (o->offsets_dataset) return true;
    if (!src_path_exists(s, f->file, f->offsets_name)) return false;
    /* a packed file may hold other datasets too: a named data dataset that is itself an image
     * dataset is read as one, the packed bytes otherwise */
    bool packed = true;
    if (o->data_dataset && src_path_exists(s, f->file, o->data_dataset)) {
        hid_t d = H5Dopen2(f->file, o->data_dataset, s->dapl);
        char why[160];
        if (d >= 0 && src_classify(d, why, sizeof why, NULL) != CAND_NONE) packed = false;
        if (d >= 0) H5Dclose(d);
    }
    return packed;
}

/* The data dataset named with --data-dataset, which must be an image dataset. */
static si_status named_data(si_source *s, src_file *f, const si_source_opts *o, int want,
                            int *layout) {
    f->data_name = abs_name(o->data_dataset);
    if (!src_path_exists(s, f->file, f->data_name))
        return si_error(SI_ERR_FORMAT, "%s: no dataset %s (given with --data-dataset)", f->path,
                        f->data_name);
    hid_t d = H5I_INVALID_HID;
    si_status st = src_open_dataset(s, f, f->data_name, 0, &d);
    if (st != SI_OK) return st;
    char why[160];
    int kind = src_classify(d, why, sizeof why, NULL);
    H5Dclose(d);
    if (kind == CAND_NONE)
        return si_error(SI_ERR_FORMAT,
                        "%s: %s is %s: expected variable-length uint8 (rank 1: encoded "
                        "images) or uint8 of rank 4 (pixels)",
                        f->path, f->data_name, why);
    if (want == SI_LAYOUT_AUTO) *layout = kind == CAND_VLEN ? SI_LAYOUT_VLEN : DENSE_UNDECIDED;
    return SI_OK;
}

/* No dataset named: the one image dataset of the wanted kind in the file. */
static si_status search_data(si_source *s, src_file *f, int want, int *layout) {
    cand_search cs = {.s = s,
                      .want_vlen = want == SI_LAYOUT_AUTO || want == SI_LAYOUT_VLEN,
                      .want_dense = want == SI_LAYOUT_AUTO || src_is_dense(want)};
    herr_t e;
#if H5_VERSION_GE(1, 12, 0)
    e = H5Ovisit3(f->file, H5_INDEX_NAME, H5_ITER_INC, visit_cb, &cs, H5O_INFO_BASIC);
#else
    e = H5Ovisit2(f->file, H5_INDEX_NAME, H5_ITER_INC, visit_cb, &cs, H5O_INFO_BASIC);
#endif
    if (e < 0) {
        cand_free(&cs);
        return src_fault(s) || s->fault[0]
                   ? src_io_error(s, f, "its list of datasets")
                   : si_error(SI_ERR_FORMAT, "%s: cannot list the datasets in the file", f->path);
    }
    if (cs.n == 0) {
        const char *what = want == SI_LAYOUT_VLEN ? "a 1-D variable-length uint8 dataset"
                           : src_is_dense(want)
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
        si_status st = si_error(SI_ERR_ARG,
                                "%s: file has %d candidate image datasets: %s%s - pick one with "
                                "--data-dataset",
                                f->path, cs.n, list, cs.n > MAX_CANDIDATES ? ", ..." : "");
        cand_free(&cs);
        return st;
    }
    f->data_name = cs.names[0];
    if (want == SI_LAYOUT_AUTO)
        *layout = cs.kinds[0] == CAND_VLEN ? SI_LAYOUT_VLEN : DENSE_UNDECIDED;
    return SI_OK;
}

/* Dense: the order of the axes, from the dims unless forced; dd gets the dims. */
static si_status dense_axes(si_source *s, src_file *f, int *layout, hsize_t dd[4]) {
    hid_t d = H5Dopen2(f->file, f->data_name, s->dapl);
    int rank = d >= 0 ? src_dims_of(d, dd) : -1;
    if (d >= 0) H5Dclose(d);
    if (rank != 4)
        return si_error(SI_ERR_FORMAT, "%s: %s has rank %d: a dense set needs rank 4", f->path,
                        f->data_name, rank);
    bool last = dd[3] == 1 || dd[3] == 3, second = dd[1] == 1 || dd[1] == 3;
    if (*layout == DENSE_UNDECIDED) {
        if (!last && !second)
            return si_error(SI_ERR_FORMAT,
                            "%s: %s is [%llu, %llu, %llu, %llu]: neither dim 3 (NHWC) nor dim 1 "
                            "(NCHW) is 1 or 3 channels",
                            f->path, f->data_name, (unsigned long long)dd[0],
                            (unsigned long long)dd[1], (unsigned long long)dd[2],
                            (unsigned long long)dd[3]);
        *layout = last ? SI_LAYOUT_DENSE_NHWC : SI_LAYOUT_DENSE_NCHW;
        if (last && second) s->ambiguous = true;
    } else if ((*layout == SI_LAYOUT_DENSE_NHWC && !last) ||
               (*layout == SI_LAYOUT_DENSE_NCHW && !second)) {
        return si_error(
            SI_ERR_FORMAT, "%s: %s is [%llu, %llu, %llu, %llu]: %s needs %s of 1 or 3 channels",
            f->path, f->data_name, (unsigned long long)dd[0], (unsigned long long)dd[1],
            (unsigned long long)dd[2], (unsigned long long)dd[3], si_source_layout_name(*layout),
            *layout == SI_LAYOUT_DENSE_NHWC ? "dim 3" : "dim 1");
    }
    return SI_OK;
}

/* ids: the named dataset (must exist), else an "ids" beside the images if there is one. */
static si_status find_ids(si_source *s, src_file *f, const si_source_opts *o) {
    if (o->ids_dataset) {
        f->ids_name = abs_name(o->ids_dataset);
        if (!src_path_exists(s, f->file, f->ids_name))
            return si_error(SI_ERR_FORMAT, "%s: no ids dataset %s", f->path, f->ids_name);
    } else {
        char *sib = sibling_ids(f->data_name);
        if (strcmp(sib, f->data_name) != 0 && src_path_exists(s, f->file, sib))
            f->ids_name = sib;
        else
            free(sib);
    }
    return SI_OK;
}

si_status src_probe(si_source *s, src_file *f, const si_source_opts *o, int *layout,
                    hsize_t dd[4]) {
    src_mark_open(s, f);
    si_status st = src_guard_file(s, f);
    if (st == SI_OK) st = src_h5_open(f->path, &f->file);
    if (st != SI_OK) return st;
    int want = *layout;
    bool packed = is_packed(s, f, o, want);
    /* a read that failed under the probe (EIO) is not an answer about the file's layout */
    if (s->fault[0]) return src_io_error(s, f, "its metadata");
    if (packed) {
        *layout = SI_LAYOUT_PACKED;
        f->data_name = abs_name(o->data_dataset ? o->data_dataset : "/images/data");
    } else if (o->data_dataset) {
        st = named_data(s, f, o, want, layout);
    } else {
        st = search_data(s, f, want, layout);
    }
    if (st == SI_OK && (*layout == DENSE_UNDECIDED || src_is_dense(*layout)))
        st = dense_axes(s, f, layout, dd);
    if (st == SI_OK) st = find_ids(s, f, o);
    if (st != SI_OK) return st;
    return src_open_handles(s, f, *layout, UINT64_MAX);
}
