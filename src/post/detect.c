/* --post detect, YOLOv8 detection decoding: threshold, xywh -> xyxy, greedy class-wise NMS. Only
 * anchors above the score threshold reach NMS, so its quadratic pass runs over tens to hundreds of
 * candidates, not the 8400 anchors; it stops as soon as max_detections boxes are kept, which is
 * exact because boxes are kept in the same score order they are output in. */
#include "detect.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/common.h"
#include "kinds.h"

typedef struct {
    float x1, y1, x2, y2, area, score;
    int32_t cls, anchor;
} cand;

/* The scratch layout, carved from one block: the per-anchor best score and class (filled class
 * by class so pred is read in its memory order), then the candidates and the merge sort's other
 * half. cand holds only 4-byte fields, so every part stays 4-byte aligned. */
typedef struct {
    float *best;
    int32_t *best_cls;
    cand *c, *tmp;
    uint8_t *suppressed;
} layout;

/* Anchors are stored as int32 and sizes must not overflow size_t. */
#define MAX_ANCHORS ((int64_t)INT32_MAX / 2)

static size_t layout_of(int64_t anchors, void *base, layout *l) {
    size_t n = (size_t)anchors;
    size_t off = 0;
    char *b = base;
    if (l) l->best = (float *)(b + off);
    off += n * sizeof(float);
    if (l) l->best_cls = (int32_t *)(b + off);
    off += n * sizeof(int32_t);
    if (l) l->c = (cand *)(b + off);
    off += n * sizeof(cand);
    if (l) l->tmp = (cand *)(b + off);
    off += n * sizeof(cand);
    if (l) l->suppressed = (uint8_t *)(b + off);
    off += n;
    return off;
}

si_detect_params si_detect_params_default(void) {
    return (si_detect_params){.score_threshold = 0.25f,
                              .iou_threshold = 0.45f,
                              .max_detections = 300,
                              .class_agnostic = false};
}

size_t si_detect_scratch_size(int64_t anchors) {
    if (anchors < 0 || anchors > MAX_ANCHORS) return 0;
    return layout_of(anchors, NULL, NULL);
}

/* a goes before b: higher score, then lower anchor. Candidates are gathered in anchor order and
 * the merge is stable, so the anchor tie-break holds without comparing anchors; it is spelled out
 * anyway so the order does not depend on how the array was filled. */
static bool before(const cand *a, const cand *b) {
    if (a->score != b->score) return a->score > b->score;
    return a->anchor < b->anchor;
}

/* Bottom-up merge sort of c[0..n) using tmp[0..n); returns whichever buffer holds the result.
 * Not qsort: glibc's qsort may malloc, and it is not stable. */
static cand *sort_cands(cand *c, cand *tmp, size_t n) {
    cand *src = c, *dst = tmp;
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n;
            size_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) dst[k++] = before(&src[j], &src[i]) ? src[j++] : src[i++];
            while (i < mid) dst[k++] = src[i++];
            while (j < hi) dst[k++] = src[j++];
        }
        cand *t = src;
        src = dst;
        dst = t;
    }
    return src;
}

/* Written as torchvision's CPU nms kernel computes it, so the float results agree bit for bit. */
static float iou(const cand *a, const cand *b) {
    float w = fmaxf(0.0f, fminf(a->x2, b->x2) - fmaxf(a->x1, b->x1));
    float h = fmaxf(0.0f, fminf(a->y2, b->y2) - fmaxf(a->y1, b->y1));
    float inter = w * h;
    return inter / (a->area + b->area - inter);
}

int si_detect_decode(const float *pred, int64_t classes, int64_t anchors, const si_detect_params *p,
                     void *scratch, si_detection *out, int cap) {
    if (!pred || !p || (!scratch && anchors > 0) || (!out && cap > 0)) {
        si_error(SI_ERR_ARG, "detect decode: NULL argument");
        return -1;
    }
    if (classes < 1 || anchors < 0 || anchors > MAX_ANCHORS || cap < 0 || p->max_detections < 0 ||
        isnan(p->score_threshold) || isnan(p->iou_threshold)) {
        si_error(SI_ERR_ARG,
                 "detect decode: bad shape or parameters (classes %lld, anchors %lld, cap %d, "
                 "max_detections %d, score_threshold %g, iou_threshold %g)",
                 (long long)classes, (long long)anchors, cap, p->max_detections,
                 (double)p->score_threshold, (double)p->iou_threshold);
        return -1;
    }
    int limit = p->max_detections < cap ? p->max_detections : cap;
    if (anchors == 0 || limit == 0) return 0;

    layout l;
    layout_of(anchors, scratch, &l);
    const size_t A = (size_t)anchors;

    /* Best class per anchor, strict > so the lower class wins a tie (as numpy's argmax). A NaN
     * first score is replaced by any real one and a NaN later one never wins. */
    const float *scores = pred + 4 * A;
    memcpy(l.best, scores, A * sizeof(float));
    memset(l.best_cls, 0, A * sizeof(int32_t));
    for (int64_t c = 1; c < classes; c++) {
        const float *row = scores + (size_t)c * A;
        for (size_t a = 0; a < A; a++) {
            if (row[a] > l.best[a] || (isnan(l.best[a]) && !isnan(row[a]))) {
                l.best[a] = row[a];
                l.best_cls[a] = (int32_t)c;
            }
        }
    }

    const float *cx = pred, *cy = pred + A, *w = pred + 2 * A, *h = pred + 3 * A;
    size_t n = 0;
    for (size_t a = 0; a < A; a++) {
        if (!(l.best[a] >= p->score_threshold)) continue;
        cand *k = &l.c[n++];
        float hw = w[a] * 0.5f, hh = h[a] * 0.5f;
        k->x1 = cx[a] - hw;
        k->y1 = cy[a] - hh;
        k->x2 = cx[a] + hw;
        k->y2 = cy[a] + hh;
        k->area = (k->x2 - k->x1) * (k->y2 - k->y1);
        k->score = l.best[a];
        k->cls = l.best_cls[a];
        k->anchor = (int32_t)a;
    }
    if (n == 0) return 0;

    cand *c = sort_cands(l.c, l.tmp, n);
    memset(l.suppressed, 0, n);
    int kept = 0;
    for (size_t i = 0; i < n && kept < limit; i++) {
        if (l.suppressed[i]) continue;
        const cand *k = &c[i];
        out[kept++] = (si_detection){k->x1, k->y1, k->x2, k->y2, k->score, k->cls};
        for (size_t j = i + 1; j < n; j++) {
            if (l.suppressed[j] || (!p->class_agnostic && c[j].cls != k->cls)) continue;
            if (iou(k, &c[j]) > p->iou_threshold) l.suppressed[j] = 1;
        }
    }
    return kept;
}

void si_detect_params_format(const si_detect_params *p, char *buf, size_t cap) {
    snprintf(buf, cap,
             "detect score_threshold=%g iou_threshold=%g max_detections=%d class_agnostic=%d",
             p->score_threshold, p->iou_threshold, p->max_detections, p->class_agnostic);
}

/* --- the --post detect row ------------------------------------------------------------------ */

/* Output 0 (4 + classes, anchors); no columns, the detections go to the list. */
static si_status plan(const si_post_config *c, int n_outputs, const char *const *names,
                      const si_shape *per_image, si_post_plan *p) {
    const si_shape *s = &per_image[0];
    const char *exp = "(4 + classes, anchors) with classes >= 1";
    if (s->ndim != 2 || si_post_numel(s) < 0 || s->dims[0] < 5)
        return si_post_mismatch(c, 0, names, s, exp);
    if (c->detect.max_detections < 0)
        return si_error(SI_ERR_ARG, "--post detect: max detections %d is negative",
                        c->detect.max_detections);
    p->classes = s->dims[0] - 4;
    p->anchors = s->dims[1];
    p->scratch_bytes = si_detect_scratch_size(p->anchors);
    if (!p->scratch_bytes) return si_post_mismatch(c, 0, names, s, exp);
    /* An image cannot keep more boxes than it has anchors, so a huge --max-det does not size the
     * caller's detection buffers beyond what can be filled. */
    p->max_dets =
        c->detect.max_detections < p->anchors ? c->detect.max_detections : (int)p->anchors;
    p->out_numel[0] = (p->classes + 4) * p->anchors;
    return SI_OK;
}

static si_status image(const si_post_config *c, const si_post_plan *p, const float *const *outs,
                       void *scratch, uint8_t *row, si_detection *dets, int *n_dets) {
    SI_ASSERT(n_dets && (dets || p->max_dets == 0));
    int n =
        si_detect_decode(outs[0], p->classes, p->anchors, &c->detect, scratch, dets, p->max_dets);
    if (n < 0) return SI_ERR_ARG; /* message set by the decoder */
    *n_dets = n;
    return SI_OK;
}

static void params(const si_post_config *c, const si_post_plan *p, char *buf, size_t cap) {
    si_detect_params_format(&c->detect, buf, cap);
}

const si_post_kind_ops si_post_detect_ops = {
    .name = "detect",
    .plan = plan,
    .image = image,
    .params = params,
    .detections = true,
};
