/* The postprocessors behind --post, the part every kind shares: the table of kinds (kinds.h), the
 * plan's common machinery and the dispatch of one image. The plan checks the model's output shapes
 * once, at load, so a mismatch is one clear message before any image is read; si_post_image then
 * only computes. Rows are written with memcpy, so a row buffer needs no particular alignment. */
#include "post.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kinds.h"

#define COL_ALIGN 8

/* One row per kind, indexed by si_post_kind. */
static const si_post_kind_ops *const kinds[] = {
    [SI_POST_CLASSIFY] = &si_post_classify_ops, [SI_POST_DETECT] = &si_post_detect_ops,
    [SI_POST_EMBED] = &si_post_embed_ops,       [SI_POST_CONGESTION] = &si_post_congestion_ops,
    [SI_POST_RAW] = &si_post_raw_ops,
};
#define N_KINDS ((int)(sizeof kinds / sizeof kinds[0]))
_Static_assert(N_KINDS == SI_POST_RAW + 1, "a row for every kind");

/* The kind's row; NULL for a value outside the enum. */
static const si_post_kind_ops *ops_of(si_post_kind k) {
    return (int)k >= 0 && (int)k < N_KINDS ? kinds[k] : NULL;
}

si_post_config si_post_config_default(void) {
    si_post_config c = {.kind = SI_POST_CLASSIFY,
                        .topk = 5,
                        .embed_dtype = SI_EMBED_F32,
                        .detect = si_detect_params_default(),
                        .congestion = si_congestion_defaults()};
    return c;
}

/* Borrowed static string; "unknown" for a value outside the enum. */
const char *si_post_kind_name(si_post_kind k) {
    const si_post_kind_ops *ops = ops_of(k);
    return ops ? ops->name : "unknown";
}

/* Borrows s; writes *k only on success. */
bool si_post_kind_parse(const char *s, si_post_kind *k) {
    if (!s) return false;
    for (int i = 0; i < N_KINDS; i++) {
        if (strcmp(s, kinds[i]->name) == 0) {
            *k = (si_post_kind)i;
            return true;
        }
    }
    return false;
}

/* Borrows s; writes *t only on success. */
bool si_post_embed_dtype_parse(const char *s, si_embed_dtype *t) {
    static const char *const names[] = {[SI_EMBED_F32] = "float32", [SI_EMBED_F16] = "float16"};
    for (int i = 0; s && i < (int)(sizeof names / sizeof names[0]); i++) {
        if (strcmp(s, names[i]) == 0) {
            *t = (si_embed_dtype)i;
            return true;
        }
    }
    return false;
}

/* --- the plan ------------------------------------------------------------------------------- */

static size_t align_up(size_t n) {
    return (n + COL_ALIGN - 1) / COL_ALIGN * COL_ALIGN;
}

/* "(3, 7, 7)", "()" for a scalar; always NUL-terminated in buf. */
static void shape_str(const si_shape *s, char *buf, size_t n) {
    size_t len = 0;
    buf[0] = 0;
    len += (size_t)snprintf(buf + len, n - len, "(");
    int nd = s->ndim < 0 ? 0 : s->ndim > SI_MAX_DIMS ? SI_MAX_DIMS : s->ndim;
    for (int d = 0; d < nd && len < n; d++)
        len += (size_t)snprintf(buf + len, n - len, "%s%lld", d ? ", " : "", (long long)s->dims[d]);
    if (len < n) snprintf(buf + len, n - len, ")");
}

/* Names the output, its shape and what the postprocessor takes, since the user fixes it by
 * choosing another --post or exporting again. */
si_status si_post_mismatch(const si_post_config *c, int o, const char *const *names,
                           const si_shape *s, const char *expects) {
    char shp[SI_MAX_DIMS * 24 + 4];
    shape_str(s, shp, sizeof shp);
    const char *name = names && names[o] ? names[o] : "";
    const char *kind = si_post_kind_name(c->kind);
    if (name[0])
        return si_error(SI_ERR_UNSUPPORTED,
                        "output '%s' has per-image shape %s; --post %s expects %s", name, shp, kind,
                        expects);
    /* Unnamed: its position is all the user can look for. */
    return si_error(SI_ERR_UNSUPPORTED, "output %d has per-image shape %s; --post %s expects %s", o,
                    shp, kind, expects);
}

int64_t si_post_numel(const si_shape *s) {
    if (s->ndim < 0 || s->ndim > SI_MAX_DIMS) return -1;
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++) {
        if (s->dims[d] < 1 || s->dims[d] > SI_POST_MAX_NUMEL) return -1;
        n *= s->dims[d];
        if (n > SI_POST_MAX_NUMEL) return -1;
    }
    return n;
}

int64_t si_post_vector_len(const si_shape *s) {
    if (s->ndim < 1 || si_post_numel(s) < 0) return -1;
    for (int d = 1; d < s->ndim; d++)
        if (s->dims[d] != 1) return -1;
    return s->dims[0];
}

/* Borrows name and dims; writes the next column of p. */
void si_post_add_col(si_post_plan *p, const char *name, si_col_type t, int ndim,
                     const int64_t *dims) {
    SI_ASSERT(p->n_cols < SI_POST_MAX_COLS);
    si_post_col *col = &p->cols[p->n_cols++];
    snprintf(col->name, sizeof col->name, "%s", name);
    col->type = t;
    col->ndim = ndim;
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= col->dims[d] = dims[d];
    size_t esize = t == SI_COL_I32   ? sizeof(int32_t)
                   : t == SI_COL_F32 ? sizeof(float)
                   : t == SI_COL_F16 ? sizeof(uint16_t)
                                     : sizeof(double);
    col->offset = align_up(p->row_bytes);
    col->bytes = (size_t)n * esize;
    p->row_bytes = align_up(col->offset + col->bytes);
}

/* The checks every kind shares, then the kind's own plan step. */
static si_status make(const si_post_config *c, int n_outputs, const char *const *names,
                      const si_shape *per_image, si_post_plan *p) {
    if (n_outputs < 1)
        return si_error(SI_ERR_UNSUPPORTED, "the model has no outputs; --post %s needs one",
                        si_post_kind_name(c->kind));
    if (n_outputs > SI_MAX_OUTPUTS)
        return si_error(SI_ERR_UNSUPPORTED, "the model has %d outputs; at most %d are supported",
                        n_outputs, SI_MAX_OUTPUTS);
    const si_post_kind_ops *ops = ops_of(c->kind);
    if (!ops) return si_error(SI_ERR_ARG, "unknown postprocessor %d", (int)c->kind);
    if (c->embed_dtype != SI_EMBED_F32 && c->kind != SI_POST_EMBED)
        return si_error(SI_ERR_ARG, "--embed-dtype float16 is for --post embed, not --post %s",
                        ops->name);
    p->n_outputs = 1; /* every kind but raw reads output 0 alone */
    return ops->plan(c, n_outputs, names, per_image, p);
}

/* Borrows everything; writes *p. A failed plan is all zeros but its kind, so nothing half-made
 * (raw's first columns) can be mistaken for a plan. */
si_status si_post_plan_make(const si_post_config *c, int n_outputs, const char *const *names,
                            const si_shape *per_image, si_post_plan *p) {
    SI_ASSERT(c && p && (n_outputs <= 0 || per_image));
    memset(p, 0, sizeof *p);
    p->kind = c->kind;
    si_status st = make(c, n_outputs, names, per_image, p);
    if (st != SI_OK) {
        memset(p, 0, sizeof *p);
        p->kind = c->kind;
    }
    return st;
}

/* --- one image ------------------------------------------------------------------------------ */

/* Borrows p; writes row[0 .. p->row_bytes), padding included, so failed rows are byte-stable. */
void si_post_fill_empty(const si_post_plan *p, uint8_t *row) {
    SI_ASSERT(p && (row || p->row_bytes == 0));
    if (p->row_bytes) memset(row, 0, p->row_bytes);
    const si_post_kind_ops *ops = ops_of(p->kind);
    const char *zero_fill = ops ? ops->zero_fill : NULL;
    for (int i = 0; i < p->n_cols; i++) {
        const si_post_col *col = &p->cols[i];
        uint8_t *dst = row + col->offset;
        /* classify's topk_prob 0: "no probability" reads more naturally than NaN next to -1. */
        bool zero = zero_fill && strcmp(col->name, zero_fill) == 0;
        switch (col->type) {
        case SI_COL_I32: {
            int32_t v = -1;
            for (size_t b = 0; b < col->bytes; b += sizeof v) memcpy(dst + b, &v, sizeof v);
            break;
        }
        case SI_COL_F32: {
            float v = zero ? 0.0f : NAN;
            for (size_t b = 0; b < col->bytes; b += sizeof v) memcpy(dst + b, &v, sizeof v);
            break;
        }
        case SI_COL_F64: {
            double v = NAN;
            for (size_t b = 0; b < col->bytes; b += sizeof v) memcpy(dst + b, &v, sizeof v);
            break;
        }
        case SI_COL_F16: {
            uint16_t v = zero ? 0 : 0x7e00; /* numpy's float16 NaN */
            for (size_t b = 0; b < col->bytes; b += sizeof v) memcpy(dst + b, &v, sizeof v);
            break;
        }
        }
    }
}

/* Borrows c, p, outs and scratch; writes row and dets/n_dets. On failure the row holds the fill
 * values (si_post_fill_empty) and *n_dets is 0, so a caller may store it as it is. */
si_status si_post_image(const si_post_config *c, const si_post_plan *p, const float *const *outs,
                        void *scratch, uint8_t *row, si_detection *dets, int *n_dets) {
    SI_ASSERT(c && p && outs && c->kind == p->kind && p->n_outputs >= 1);
    SI_ASSERT(row || p->row_bytes == 0);
    SI_ASSERT(scratch || p->scratch_bytes == 0);
    const si_post_kind_ops *ops = ops_of(p->kind);
    SI_ASSERT(ops);
    if (n_dets) *n_dets = 0;
    si_status st = ops->image(c, p, outs, scratch, row, dets, n_dets);
    if (st != SI_OK) {
        si_post_fill_empty(p, row);
        if (n_dets) *n_dets = 0;
    }
    return st;
}

void si_post_column(const si_post_plan *p, int c, const uint8_t *rows, uint32_t n, void *dst) {
    const si_post_col *col = &p->cols[c];
    uint8_t *d = dst;
    for (uint32_t j = 0; j < n; j++)
        memcpy(d + col->bytes * j, rows + p->row_bytes * j + col->offset, col->bytes);
}

/* The result writer's view of a plan (io/result.h): the columns' types in its own terms, so that
 * io/ needs nothing of the postprocessors. */
_Static_assert(SI_POST_MAX_COLS <= SI_RESULT_MAX_COLS && SI_MAX_DIMS <= SI_RESULT_MAX_DIMS &&
                   sizeof(((si_post_col *)0)->name) == sizeof(((si_result_col *)0)->name),
               "a plan's columns must fit the result schema");

void si_post_schema(const si_post_plan *p, si_result_schema *s) {
    static const si_result_type types[] = {[SI_COL_I32] = SI_RESULT_I32,
                                           [SI_COL_F32] = SI_RESULT_F32,
                                           [SI_COL_F64] = SI_RESULT_F64,
                                           [SI_COL_F16] = SI_RESULT_F16};
    const si_post_kind_ops *ops = ops_of(p->kind);
    memset(s, 0, sizeof *s);
    snprintf(s->post, sizeof s->post, "%s", si_post_kind_name(p->kind));
    s->detect = ops && ops->detections;
    s->n_cols = p->n_cols;
    s->row_bytes = p->row_bytes;
    for (int c = 0; c < p->n_cols; c++) {
        const si_post_col *pc = &p->cols[c];
        si_result_col *rc = &s->cols[c];
        memcpy(rc->name, pc->name, sizeof rc->name);
        rc->type = types[pc->type];
        rc->ndim = pc->ndim;
        memcpy(rc->dims, pc->dims, sizeof pc->dims);
        rc->offset = pc->offset;
        rc->bytes = pc->bytes;
    }
}

void si_post_params(const si_post_config *c, const si_post_plan *p, char *buf, size_t cap) {
    const si_post_kind_ops *ops = ops_of(c->kind);
    if (ops && ops->params)
        ops->params(c, p, buf, cap);
    else /* a kind without parameters: its name alone */
        snprintf(buf, cap, "%s", si_post_kind_name(c->kind));
}
