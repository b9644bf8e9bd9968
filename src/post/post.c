/* The postprocessors behind --post: the plan checks the model's output shapes once, at load, so a
 * mismatch is one clear message before any image is read; si_post_image then only computes. Rows
 * are written with memcpy, so a row buffer needs no particular alignment. */
#include "post.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cpu/kernels.h"
#include "classify.h"

/* Per image and output: 2^30 floats (4 GiB) is far beyond any real head and keeps every count in
 * an int32 (class indices, congestion's int sizes) and every byte count far from overflow. */
#define MAX_NUMEL ((int64_t)1 << 30)
#define COL_ALIGN 8

si_post_config si_post_config_default(void) {
    si_post_config c = {.kind = SI_POST_CLASSIFY,
                        .topk = 5,
                        .detect = si_detect_params_default(),
                        .congestion = si_congestion_defaults()};
    return c;
}

static const char *const kind_names[] = {
    [SI_POST_CLASSIFY] = "classify",     [SI_POST_DETECT] = "detect", [SI_POST_EMBED] = "embed",
    [SI_POST_CONGESTION] = "congestion", [SI_POST_RAW] = "raw",
};
#define N_KINDS ((int)(sizeof kind_names / sizeof kind_names[0]))

/* Borrowed static string; "unknown" for a value outside the enum. */
const char *si_post_kind_name(si_post_kind k) {
    return (int)k >= 0 && (int)k < N_KINDS ? kind_names[k] : "unknown";
}

/* Borrows s; writes *k only on success. */
bool si_post_kind_parse(const char *s, si_post_kind *k) {
    if (!s) return false;
    for (int i = 0; i < N_KINDS; i++) {
        if (strcmp(s, kind_names[i]) == 0) {
            *k = (si_post_kind)i;
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

/* The one message for a model that does not fit: names the output, its shape and what the
 * postprocessor takes, since the user fixes it by choosing another --post or exporting again. */
static si_status mismatch(const si_post_config *c, int o, const char *const *names,
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

/* Checked numel: every dim >= 1 and the product within MAX_NUMEL; -1 otherwise. A scalar is 1. */
static int64_t numel_checked(const si_shape *s) {
    if (s->ndim < 0 || s->ndim > SI_MAX_DIMS) return -1;
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++) {
        if (s->dims[d] < 1 || s->dims[d] > MAX_NUMEL) return -1;
        n *= s->dims[d];
        if (n > MAX_NUMEL) return -1;
    }
    return n;
}

/* A vector per image: (n) or (n, 1, ..., 1), as a classifier's or embedder's head ends either
 * with Flatten + Gemm or with a 1x1 conv. Returns n, or -1. */
static int64_t vector_len(const si_shape *s) {
    if (s->ndim < 1 || numel_checked(s) < 0) return -1;
    for (int d = 1; d < s->ndim; d++)
        if (s->dims[d] != 1) return -1;
    return s->dims[0];
}

static void add_col(si_post_plan *p, const char *name, si_col_type t, int ndim,
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
                                     : sizeof(double);
    col->offset = align_up(p->row_bytes);
    col->bytes = (size_t)n * esize;
    p->row_bytes = align_up(col->offset + col->bytes);
}

/* raw: the output's name as an HDF5 link name that cannot escape raw/ or collide: only
 * [A-Za-z0-9._-], "." and ".." replaced (they are path components), clashes suffixed "_<k>" in
 * output order so the mapping is stable across runs. */
static void raw_name(const si_post_plan *p, int o, const char *name, char *out, size_t n) {
    /* Room for "raw/" and a "_<k>" suffix (k < SI_POST_MAX_COLS) within si_post_col.name. */
    char base[sizeof p->cols[0].name - 4 - 4];
    size_t len = 0;
    for (const char *s = name ? name : ""; *s && len < sizeof base - 1; s++) {
        char ch = *s;
        bool ok = (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                  (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' || ch == '-';
        base[len++] = ok ? ch : '_';
    }
    base[len] = 0;
    if (len == 0 || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        snprintf(base, sizeof base, "output%d", o);
    for (int k = 0;; k++) {
        if (k == 0)
            snprintf(out, n, "raw/%s", base);
        else
            snprintf(out, n, "raw/%s_%d", base, k);
        bool clash = false;
        for (int i = 0; i < p->n_cols && !clash; i++) clash = strcmp(p->cols[i].name, out) == 0;
        if (!clash) return;
        /* At most n_cols < SI_POST_MAX_COLS names are taken, so some k <= n_cols is free. */
        SI_ASSERT(k <= p->n_cols);
    }
}

static si_status make(const si_post_config *c, int n_outputs, const char *const *names,
                      const si_shape *per_image, si_post_plan *p) {
    if (n_outputs < 1)
        return si_error(SI_ERR_UNSUPPORTED, "the model has no outputs; --post %s needs one",
                        si_post_kind_name(c->kind));
    if (n_outputs > SI_MAX_OUTPUTS)
        return si_error(SI_ERR_UNSUPPORTED, "the model has %d outputs; at most %d are supported",
                        n_outputs, SI_MAX_OUTPUTS);

    const si_shape *s = &per_image[0];
    switch (c->kind) {
    case SI_POST_CLASSIFY: {
        if (c->topk < 1)
            return si_error(SI_ERR_ARG, "--post classify: top-K %d must be at least 1", c->topk);
        int64_t C = vector_len(s);
        if (C < 1) return mismatch(c, 0, names, s, "(classes) or (classes, 1, 1)");
        p->topk = c->topk < C ? c->topk : (int)C;
        int64_t k = p->topk;
        add_col(p, "topk_class", SI_COL_I32, 1, &k);
        add_col(p, "topk_prob", SI_COL_F32, 1, &k);
        /* The softmax, then top-K staged there so the row is written with memcpy. */
        p->scratch_bytes =
            (size_t)C * sizeof(float) + (size_t)k * (sizeof(int32_t) + sizeof(float));
        p->out_numel[0] = C;
        break;
    }
    case SI_POST_EMBED: {
        int64_t D = vector_len(s);
        if (D < 1) return mismatch(c, 0, names, s, "(dim) or (dim, 1, 1)");
        add_col(p, "embedding", SI_COL_F32, 1, &D);
        p->out_numel[0] = D;
        break;
    }
    case SI_POST_CONGESTION: {
        bool ok = numel_checked(s) > 0 && (s->ndim == 2 || (s->ndim == 3 && s->dims[0] == 1));
        if (!ok) return mismatch(c, 0, names, s, "(height, width) or (1, height, width)");
        /* numel <= MAX_NUMEL, so both fit an int. */
        p->map_h = (int)s->dims[s->ndim - 2];
        p->map_w = (int)s->dims[s->ndim - 1];
        p->scratch_bytes = si_congestion_scratch_size(p->map_h, p->map_w);
        if (!p->scratch_bytes)
            return mismatch(c, 0, names, s, "a map small enough for the congestion scratch");
        add_col(p, "congestion/score", SI_COL_F64, 0, NULL);
        add_col(p, "congestion/map_mean", SI_COL_F64, 0, NULL);
        p->out_numel[0] = (int64_t)p->map_h * p->map_w;
        break;
    }
    case SI_POST_DETECT: {
        const char *exp = "(4 + classes, anchors) with classes >= 1";
        if (s->ndim != 2 || numel_checked(s) < 0 || s->dims[0] < 5)
            return mismatch(c, 0, names, s, exp);
        if (c->detect.max_detections < 0)
            return si_error(SI_ERR_ARG, "--post detect: max detections %d is negative",
                            c->detect.max_detections);
        p->classes = s->dims[0] - 4;
        p->anchors = s->dims[1];
        p->scratch_bytes = si_detect_scratch_size(p->anchors);
        if (!p->scratch_bytes) return mismatch(c, 0, names, s, exp);
        /* An image cannot keep more boxes than it has anchors, so a huge --max-det does not
         * size the caller's detection buffers beyond what can be filled. */
        p->max_dets =
            c->detect.max_detections < p->anchors ? c->detect.max_detections : (int)p->anchors;
        p->out_numel[0] = (p->classes + 4) * p->anchors;
        break;
    }
    case SI_POST_RAW: {
        if (n_outputs > SI_POST_MAX_COLS)
            return si_error(SI_ERR_UNSUPPORTED,
                            "the model has %d outputs; --post raw stores at most %d", n_outputs,
                            SI_POST_MAX_COLS);
        for (int o = 0; o < n_outputs; o++) {
            int64_t n = numel_checked(&per_image[o]);
            if (n < 0)
                return mismatch(c, o, names, &per_image[o],
                                "every dimension at least 1 and at most 2^30 values per image");
            char name[sizeof p->cols[0].name];
            raw_name(p, o, names ? names[o] : NULL, name, sizeof name);
            add_col(p, name, SI_COL_F32, per_image[o].ndim, per_image[o].dims);
            p->out_numel[o] = n;
        }
        p->n_outputs = n_outputs;
        return SI_OK;
    }
    default: return si_error(SI_ERR_ARG, "unknown postprocessor %d", (int)c->kind);
    }
    p->n_outputs = 1;
    return SI_OK;
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
    for (int i = 0; i < p->n_cols; i++) {
        const si_post_col *col = &p->cols[i];
        uint8_t *dst = row + col->offset;
        /* topk_prob 0: "no probability" reads more naturally than NaN next to class -1. */
        bool zero = p->kind == SI_POST_CLASSIFY && strcmp(col->name, "topk_prob") == 0;
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
        }
    }
}

static si_status classify(const si_post_plan *p, const float *x, void *scratch, uint8_t *row) {
    const int64_t C = p->out_numel[0];
    const int k = p->topk;
    float *prob_all = scratch;
    int32_t *cls = (int32_t *)(prob_all + C);
    float *prob = (float *)(cls + k);
    si_cpu_softmax(x, 1, C, prob_all);
    /* NaN or +inf logits (or all -inf) make the softmax NaN; top-K of NaN has no meaning. */
    for (int64_t j = 0; j < C; j++)
        if (isnan(prob_all[j]))
            return si_error(SI_ERR_ARG, "non-finite value in the logits (class %lld is %g)",
                            (long long)j, (double)x[j]);
    si_post_topk_row(prob_all, C, k, cls, prob);
    memcpy(row + p->cols[0].offset, cls, p->cols[0].bytes);
    memcpy(row + p->cols[1].offset, prob, p->cols[1].bytes);
    return SI_OK;
}

/* x / max(||x||_2, 1e-12), as torch.nn.functional.normalize; the norm summed in double so a
 * 2048-wide embedding loses nothing to float accumulation. */
static si_status embed(const si_post_plan *p, const float *x, uint8_t *row) {
    const int64_t D = p->out_numel[0];
    double ss = 0.0;
    for (int64_t i = 0; i < D; i++) {
        if (!isfinite(x[i]))
            return si_error(SI_ERR_ARG, "non-finite value in the embedding (element %lld is %g)",
                            (long long)i, (double)x[i]);
        ss += (double)x[i] * x[i];
    }
    double norm = sqrt(ss);
    double inv = 1.0 / (norm > 1e-12 ? norm : 1e-12);
    uint8_t *dst = row + p->cols[0].offset;
    for (int64_t i = 0; i < D; i++) {
        float v = (float)(x[i] * inv);
        memcpy(dst + (size_t)i * sizeof v, &v, sizeof v);
    }
    return SI_OK;
}

static si_status run(const si_post_config *c, const si_post_plan *p, const float *const *outs,
                     void *scratch, uint8_t *row, si_detection *dets, int *n_dets) {
    switch (p->kind) {
    case SI_POST_CLASSIFY: return classify(p, outs[0], scratch, row);
    case SI_POST_EMBED: return embed(p, outs[0], row);
    case SI_POST_CONGESTION: {
        double score, mean;
        si_status st = si_congestion_score(outs[0], p->map_h, p->map_w, &c->congestion, scratch,
                                           &score, &mean);
        if (st != SI_OK) return st;
        memcpy(row + p->cols[0].offset, &score, sizeof score);
        memcpy(row + p->cols[1].offset, &mean, sizeof mean);
        return SI_OK;
    }
    case SI_POST_DETECT: {
        SI_ASSERT(n_dets && (dets || p->max_dets == 0));
        int n = si_detect_decode(outs[0], p->classes, p->anchors, &c->detect, scratch, dets,
                                 p->max_dets);
        if (n < 0) return SI_ERR_ARG; /* message set by the decoder */
        *n_dets = n;
        return SI_OK;
    }
    case SI_POST_RAW:
        for (int o = 0; o < p->n_outputs; o++) {
            SI_ASSERT(p->cols[o].bytes == (size_t)p->out_numel[o] * sizeof(float));
            memcpy(row + p->cols[o].offset, outs[o], p->cols[o].bytes);
        }
        return SI_OK;
    }
    SI_ASSERT(!"unknown postprocessor kind");
    return SI_ERR_INTERNAL;
}

/* Borrows c, p, outs and scratch; writes row and dets/n_dets. On failure the row holds the fill
 * values (si_post_fill_empty) and *n_dets is 0, so a caller may store it as it is. */
si_status si_post_image(const si_post_config *c, const si_post_plan *p, const float *const *outs,
                        void *scratch, uint8_t *row, si_detection *dets, int *n_dets) {
    SI_ASSERT(c && p && outs && c->kind == p->kind && p->n_outputs >= 1);
    SI_ASSERT(row || p->row_bytes == 0);
    SI_ASSERT(scratch || p->scratch_bytes == 0);
    if (n_dets) *n_dets = 0;
    si_status st = run(c, p, outs, scratch, row, dets, n_dets);
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
    static const si_result_type types[] = {
        [SI_COL_I32] = SI_RESULT_I32, [SI_COL_F32] = SI_RESULT_F32, [SI_COL_F64] = SI_RESULT_F64};
    memset(s, 0, sizeof *s);
    snprintf(s->post, sizeof s->post, "%s", si_post_kind_name(p->kind));
    s->detect = p->kind == SI_POST_DETECT;
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

/* --- si_post_params: one formatter per kind ------------------------------------------------ */
typedef void (*params_fn)(const si_post_config *c, const si_post_plan *p, char *buf, size_t cap);

static void classify_params(const si_post_config *c, const si_post_plan *p, char *buf, size_t cap) {
    snprintf(buf, cap, "classify topk=%d", p->topk);
}

static void detect_params(const si_post_config *c, const si_post_plan *p, char *buf, size_t cap) {
    si_detect_params_format(&c->detect, buf, cap);
}

static void congestion_params(const si_post_config *c, const si_post_plan *p, char *buf,
                              size_t cap) {
    si_congestion_params_format(&c->congestion, buf, cap);
}

/* embed and raw have no parameters: their name alone */
static void name_only_params(const si_post_config *c, const si_post_plan *p, char *buf,
                             size_t cap) {
    snprintf(buf, cap, "%s", si_post_kind_name(c->kind));
}

static const params_fn params_fns[] = {
    [SI_POST_CLASSIFY] = classify_params, [SI_POST_DETECT] = detect_params,
    [SI_POST_EMBED] = name_only_params,   [SI_POST_CONGESTION] = congestion_params,
    [SI_POST_RAW] = name_only_params,
};
_Static_assert(sizeof params_fns / sizeof params_fns[0] == sizeof kind_names / sizeof kind_names[0],
               "a parameter formatter for every kind");

void si_post_params(const si_post_config *c, const si_post_plan *p, char *buf, size_t cap) {
    params_fn f = (int)c->kind >= 0 && (int)c->kind < N_KINDS ? params_fns[c->kind] : NULL;
    (f ? f : name_only_params)(c, p, buf, cap);
}
