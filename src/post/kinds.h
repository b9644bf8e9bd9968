/* The postprocessor interface, internal to src/post/: each kind's file (classify.c, detect.c,
 * congestion.c, embed.c, raw.c) fills one si_post_kind_ops, and post.c's table holds one row per
 * si_post_kind. post.c keeps what the kinds share: the table lookup, the plan's common machinery
 * (the checks below, column placement, the mismatch message) and the dispatch of si_post_image. */
#ifndef SI_POST_KINDS_H
#define SI_POST_KINDS_H

#include "post.h"

typedef struct {
    const char *name; /* --post's spelling, the result's post attribute: "classify" */
    /* Checks the model's outputs and fills the kind's part of p: its columns (si_post_add_col),
     * out_numel, scratch_bytes and its own fields. p arrives zeroed but for kind, with n_outputs
     * 1 (raw sets its own), 1 <= n_outputs <= SI_MAX_OUTPUTS; a failure is zeroed again by the
     * caller. Errors as si_post_plan_make's. Borrows everything but p. */
    si_status (*plan)(const si_post_config *c, int n_outputs, const char *const *names,
                      const si_shape *per_image, si_post_plan *p);
    /* One image, as si_post_image but without the fill on failure (the caller does it): writes
     * the kind's columns of row, or dets and *n_dets. Allocates nothing. */
    si_status (*image)(const si_post_config *c, const si_post_plan *p, const float *const *outs,
                       void *scratch, uint8_t *row, si_detection *dets, int *n_dets);
    /* The kind's si_post_params string; its spelling never changes (the resume key). NULL:
     * the kind has no parameters, and its name alone is the string. */
    void (*params)(const si_post_config *c, const si_post_plan *p, char *buf, size_t cap);
    const char *zero_fill; /* the float column whose fill value is 0, not NaN; NULL: none */
    bool detections;       /* results carry a detection list (si_result_schema.detect) */
} si_post_kind_ops;

extern const si_post_kind_ops si_post_classify_ops;
extern const si_post_kind_ops si_post_detect_ops;
extern const si_post_kind_ops si_post_embed_ops;
extern const si_post_kind_ops si_post_congestion_ops;
extern const si_post_kind_ops si_post_raw_ops;

/* --- shared by the plan steps (post.c) ------------------------------------------------------ */

/* Per image and output: 2^30 floats (4 GiB) is far beyond any real head and keeps every count in
 * an int32 (class indices, congestion's int sizes) and every byte count far from overflow. */
#define SI_POST_MAX_NUMEL ((int64_t)1 << 30)

/* Checked numel: every dim >= 1 and the product within SI_POST_MAX_NUMEL; -1 otherwise. A scalar
 * is 1. Borrows s. */
int64_t si_post_numel(const si_shape *s);

/* A vector per image: (n) or (n, 1, ..., 1), as a classifier's or embedder's head ends either
 * with Flatten + Gemm or with a 1x1 conv. Returns n, or -1. Borrows s. */
int64_t si_post_vector_len(const si_shape *s);

/* Appends a column to p at the next 8-byte-aligned offset and grows row_bytes. dims: ndim
 * per-image dims (NULL when ndim is 0), copied. */
void si_post_add_col(si_post_plan *p, const char *name, si_col_type t, int ndim,
                     const int64_t *dims);

/* The one message for a model that does not fit: output o (by name, or by position when
 * unnamed), its per-image shape s and what --post <kind> expects. Returns SI_ERR_UNSUPPORTED. */
si_status si_post_mismatch(const si_post_config *c, int o, const char *const *names,
                           const si_shape *s, const char *expects);

#endif
