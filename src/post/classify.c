/* --post classify: softmax of output 0 (N, C) or (N, C, 1, 1), then top-K. K is small (default
 * 5), so an insertion pass over the row beats sorting. */
#include "classify.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <string.h>

#include "cpu/kernels.h"
#include "kinds.h"

void si_post_topk_row(const float *p, int64_t cols, int k, int32_t *cls, float *prob) {
    int n = 0;
    for (int64_t j = 0; j < cols; j++) {
        float v = p[j];
        if (n == k && !(v > prob[k - 1])) continue; /* strict: earlier index wins ties */
        int pos = n < k ? n++ : k - 1;
        while (pos > 0 && v > prob[pos - 1]) {
            prob[pos] = prob[pos - 1];
            cls[pos] = cls[pos - 1];
            pos--;
        }
        prob[pos] = v;
        cls[pos] = (int32_t)j;
    }
}

void si_post_topk(const float *logits, int64_t rows, int64_t cols, int k, float *scratch,
                  int32_t *cls, float *prob) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        float *p = scratch + (int64_t)omp_get_thread_num() * cols;
        si_cpu_softmax(logits + r * cols, 1, cols, p);
        si_post_topk_row(p, cols, k, cls + r * k, prob + r * k);
    }
}

/* Columns topk_class int32 [K] and topk_prob float32 [K], K = topk clamped to the classes. */
static si_status plan(const si_post_config *c, int n_outputs, const char *const *names,
                      const si_shape *per_image, si_post_plan *p) {
    const si_shape *s = &per_image[0];
    if (c->topk < 1)
        return si_error(SI_ERR_ARG, "--post classify: top-K %d must be at least 1", c->topk);
    int64_t C = si_post_vector_len(s);
    if (C < 1) return si_post_mismatch(c, 0, names, s, "(classes) or (classes, 1, 1)");
    p->topk = c->topk < C ? c->topk : (int)C;
    int64_t k = p->topk;
    si_post_add_col(p, "topk_class", SI_COL_I32, 1, &k);
    si_post_add_col(p, "topk_prob", SI_COL_F32, 1, &k);
    /* The softmax, then top-K staged there so the row is written with memcpy. */
    p->scratch_bytes = (size_t)C * sizeof(float) + (size_t)k * (sizeof(int32_t) + sizeof(float));
    p->out_numel[0] = C;
    return SI_OK;
}

static si_status image(const si_post_config *c, const si_post_plan *p, const float *const *outs,
                       void *scratch, uint8_t *row, si_detection *dets, int *n_dets) {
    const float *x = outs[0];
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

/* The plan's K (after clamping), not the one asked for. */
static void params(const si_post_config *c, const si_post_plan *p, char *buf, size_t cap) {
    snprintf(buf, cap, "classify topk=%d", p->topk);
}

const si_post_kind_ops si_post_classify_ops = {
    .name = "classify",
    .plan = plan,
    .image = image,
    .params = params,
    .zero_fill = "topk_prob",
};
