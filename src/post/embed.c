/* --post embed: output 0 (N, D) or (N, D, 1, 1), L2-normalised into the column embedding [D], so
 * cosine similarity between images is a dot product. float32 by default; with --embed-dtype
 * float16 each normalised float32 is rounded to the nearest half (ties to even), the value
 * numpy's astype(float16) gives, at half the bytes. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/half.h"
#include "kinds.h"

static si_status plan(const si_post_config *c, int n_outputs, const char *const *names,
                      const si_shape *per_image, si_post_plan *p) {
    const si_shape *s = &per_image[0];
    int64_t D = si_post_vector_len(s);
    if (D < 1) return si_post_mismatch(c, 0, names, s, "(dim) or (dim, 1, 1)");
    si_post_add_col(p, "embedding", c->embed_dtype == SI_EMBED_F16 ? SI_COL_F16 : SI_COL_F32, 1,
                    &D);
    p->out_numel[0] = D;
    return SI_OK;
}

/* x / max(||x||_2, 1e-12), as torch.nn.functional.normalize; the norm summed in double so a
 * 2048-wide embedding loses nothing to float accumulation. A zero vector stays zero (0 times
 * 1e12), never NaN. */
static si_status image(const si_post_config *c, const si_post_plan *p, const float *const *outs,
                       void *scratch, uint8_t *row, si_detection *dets, int *n_dets) {
    const float *x = outs[0];
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
    if (p->cols[0].type == SI_COL_F16) {
        for (int64_t i = 0; i < D; i++) {
            uint16_t h = si_half_from_float((float)(x[i] * inv));
            memcpy(dst + (size_t)i * sizeof h, &h, sizeof h);
        }
        return SI_OK;
    }
    for (int64_t i = 0; i < D; i++) {
        float v = (float)(x[i] * inv);
        memcpy(dst + (size_t)i * sizeof v, &v, sizeof v);
    }
    return SI_OK;
}

/* "embed" for float32, as before the option existed, so those results and resume keys keep
 * their spelling; "embed dtype=float16" otherwise. */
static void params(const si_post_config *c, const si_post_plan *p, char *buf, size_t cap) {
    snprintf(buf, cap, "embed%s", c->embed_dtype == SI_EMBED_F16 ? " dtype=float16" : "");
}

const si_post_kind_ops si_post_embed_ops = {
    .name = "embed",
    .plan = plan,
    .image = image,
    .params = params,
};
