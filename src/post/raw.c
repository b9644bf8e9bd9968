/* --post raw: every model output stored as it is, one column raw/<name> float32 [per-image dims]
 * per output, for inspection and for postprocessing done elsewhere. */
#include <stdio.h>
#include <string.h>

#include "kinds.h"

/* The output's name as an HDF5 link name that cannot escape raw/ or collide: only
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

/* Every output, any shape with every dim >= 1; one column each, so at most SI_POST_MAX_COLS. */
static si_status plan(const si_post_config *c, int n_outputs, const char *const *names,
                      const si_shape *per_image, si_post_plan *p) {
    if (n_outputs > SI_POST_MAX_COLS)
        return si_error(SI_ERR_UNSUPPORTED,
                        "the model has %d outputs; --post raw stores at most %d", n_outputs,
                        SI_POST_MAX_COLS);
    for (int o = 0; o < n_outputs; o++) {
        int64_t n = si_post_numel(&per_image[o]);
        if (n < 0)
            return si_post_mismatch(c, o, names, &per_image[o],
                                    "every dimension at least 1 and at most 2^30 values per image");
        char name[sizeof p->cols[0].name];
        raw_name(p, o, names ? names[o] : NULL, name, sizeof name);
        si_post_add_col(p, name, SI_COL_F32, per_image[o].ndim, per_image[o].dims);
        p->out_numel[o] = n;
    }
    p->n_outputs = n_outputs;
    return SI_OK;
}

static si_status image(const si_post_config *c, const si_post_plan *p, const float *const *outs,
                       void *scratch, uint8_t *row, si_detection *dets, int *n_dets) {
    for (int o = 0; o < p->n_outputs; o++) {
        SI_ASSERT(p->cols[o].bytes == (size_t)p->out_numel[o] * sizeof(float));
        memcpy(row + p->cols[o].offset, outs[o], p->cols[o].bytes);
    }
    return SI_OK;
}

const si_post_kind_ops si_post_raw_ops = {
    .name = "raw",
    .plan = plan,
    .image = image,
};
