/* YOLOv8 detection decoding (src/post/detect.c): hand-made cases with known answers, then the
 * seeded random cases post_detect_ref.py wrote with torchvision.ops.nms (cross-checked by numpy),
 * compared exactly. Usage: test_post_detect DATA_DIR */
#include <stdint.h>
#include <string.h>

#include "base/common.h"
#include "post/detect.h"
#include "tests/test_util.h"

#define MAGIC 0x54454450

/* Decodes with a scratch block of exactly the advertised size (so ASan sees overruns) and an
 * output poisoned past what the call may write. */
static int decode(const float *pred, int64_t classes, int64_t anchors, const si_detect_params *p,
                  si_detection *out, int cap) {
    size_t sz = si_detect_scratch_size(anchors);
    void *scratch = malloc(sz ? sz : 1);
    memset(scratch, 0xA5, sz);
    memset(out, 0xFF, sizeof(si_detection) * (size_t)(cap + 1));
    int n = si_detect_decode(pred, classes, anchors, p, scratch, out, cap);
    free(scratch);
    return n;
}

static bool poisoned(const si_detection *d) {
    unsigned char b[sizeof(si_detection)];
    memcpy(b, d, sizeof b);
    for (size_t i = 0; i < sizeof b; i++)
        if (b[i] != 0xFF) return false;
    return true;
}

/* pred (4 + C, A) from per-anchor xywh and per-anchor scores s[a * C + c]. */
static void fill(float *pred, int C, int A, const float (*xywh)[4], const float *s) {
    for (int a = 0; a < A; a++) {
        for (int r = 0; r < 4; r++) pred[r * A + a] = xywh[a][r];
        for (int c = 0; c < C; c++) pred[(4 + c) * A + a] = s[a * C + c];
    }
}

static bool box_is(const si_detection *d, float x1, float y1, float x2, float y2) {
    return d->x1 == x1 && d->y1 == y1 && d->x2 == x2 && d->y2 == y2;
}

static void hand_cases(void) {
    si_detect_params p = si_detect_params_default();
    CHECK(p.score_threshold == 0.25f && p.iou_threshold == 0.45f && p.max_detections == 300 &&
          !p.class_agnostic);
    si_detection out[8];
    float pred[(4 + 3) * 4];

    /* Two identical boxes, same class: one kept; xywh (10, 20, 4, 6) -> (8, 17, 12, 23). */
    const float same[2][4] = {{10, 20, 4, 6}, {10, 20, 4, 6}};
    const float s_same[] = {0.9f, 0.1f, 0.8f, 0.2f};
    fill(pred, 2, 2, same, s_same);
    int n = decode(pred, 2, 2, &p, out, 4);
    CHECK(n == 1 && out[0].cls == 0 && out[0].score == 0.9f && box_is(&out[0], 8, 17, 12, 23));
    CHECK(poisoned(&out[1]));

    /* Same boxes, different classes: both kept, by score; class-agnostic keeps one. */
    const float s_diff[] = {0.7f, 0.1f, 0.1f, 0.8f};
    fill(pred, 2, 2, same, s_diff);
    n = decode(pred, 2, 2, &p, out, 4);
    CHECK(n == 2 && out[0].cls == 1 && out[0].score == 0.8f && out[1].cls == 0 &&
          out[1].score == 0.7f);
    p.class_agnostic = true;
    n = decode(pred, 2, 2, &p, out, 4);
    CHECK(n == 1 && out[0].cls == 1 && out[0].score == 0.8f);
    p.class_agnostic = false;

    /* IoU exactly at the threshold keeps both (suppression is IoU > threshold, as torchvision):
     * (0,0,2,1) and (0,0,1,1) overlap by 1 over a union of 2, IoU 0.5 exactly in float. */
    const float half[2][4] = {{1, 0.5f, 2, 1}, {0.5f, 0.5f, 1, 1}};
    const float s_half[] = {0.9f, 0.8f};
    fill(pred, 1, 2, half, s_half);
    p.iou_threshold = 0.5f;
    CHECK(decode(pred, 1, 2, &p, out, 4) == 2);
    p.iou_threshold = nextafterf(0.5f, 0.0f);
    n = decode(pred, 1, 2, &p, out, 4);
    CHECK(n == 1 && out[0].score == 0.9f && box_is(&out[0], 0, 0, 2, 1));
    p.iou_threshold = 0.45f;

    /* Equal scores: the lower anchor wins, whatever the order the boxes would sort in. */
    const float tie[3][4] = {{100, 100, 10, 10}, {1, 0.5f, 2, 1}, {0.5f, 0.5f, 1, 1}};
    const float s_tie[] = {0.1f, 0.6f, 0.6f};
    fill(pred, 1, 3, tie, s_tie);
    n = decode(pred, 1, 3, &p, out, 4);
    CHECK(n == 1 && box_is(&out[0], 0, 0, 2, 1));
    const float tie_rev[3][4] = {{100, 100, 10, 10}, {0.5f, 0.5f, 1, 1}, {1, 0.5f, 2, 1}};
    fill(pred, 1, 3, tie_rev, s_tie);
    n = decode(pred, 1, 3, &p, out, 4);
    CHECK(n == 1 && box_is(&out[0], 0, 0, 1, 1));

    /* Score threshold is inclusive; the best class of a tie is the lower class. */
    const float apart[3][4] = {{10, 10, 2, 2}, {50, 50, 2, 2}, {90, 90, 2, 2}};
    const float s_thr[] = {0.25f, 0.1f, 0.0f, nextafterf(0.25f, 0.0f), 0.0f, 0.0f,
                           0.0f,  0.6f, 0.6f};
    fill(pred, 3, 3, apart, s_thr);
    n = decode(pred, 3, 3, &p, out, 4);
    CHECK(n == 2 && out[0].cls == 1 && out[0].score == 0.6f && box_is(&out[0], 89, 89, 91, 91) &&
          out[1].cls == 0 && out[1].score == 0.25f);

    /* cap below max_detections, max_detections below the survivors, and zero of either. */
    CHECK(decode(pred, 3, 3, &p, out, 1) == 1 && out[0].score == 0.6f && poisoned(&out[1]));
    CHECK(decode(pred, 3, 3, &p, out, 0) == 0 && poisoned(&out[0]));
    p.max_detections = 1;
    CHECK(decode(pred, 3, 3, &p, out, 4) == 1 && out[0].score == 0.6f && poisoned(&out[1]));
    p.max_detections = 0;
    CHECK(decode(pred, 3, 3, &p, out, 4) == 0);
    p.max_detections = 300;
    CHECK(decode(pred, 3, 0, &p, out, 4) == 0);

    /* Bad arguments are reported, not asserted. */
    char scratch[256];
    si_error_clear();
    CHECK(si_detect_decode(NULL, 3, 3, &p, scratch, out, 4) == -1 && si_error_msg()[0]);
    CHECK(si_detect_decode(pred, 0, 3, &p, scratch, out, 4) == -1);
    CHECK(si_detect_decode(pred, 3, -1, &p, scratch, out, 4) == -1);
    CHECK(si_detect_decode(pred, 3, 3, &p, scratch, out, -1) == -1);
    CHECK(si_detect_decode(pred, 3, 3, &p, scratch, NULL, 4) == -1);
    p.iou_threshold = NAN;
    CHECK(si_detect_decode(pred, 3, 3, &p, scratch, out, 4) == -1);
    p.iou_threshold = 0.45f;
    CHECK(si_detect_scratch_size(-1) == 0 && si_detect_scratch_size(8400) > 8400 * 32);
}

static bool read_all(FILE *f, void *dst, size_t n) {
    return fread(dst, 1, n, f) == n;
}

/* One reference case; returns false if the file is unreadable (counted as a failure). */
static bool run_case(const char *path, double *secs) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    int32_t hdr[5];
    float thr[2];
    bool ok = read_all(f, hdr, sizeof hdr) && hdr[0] == MAGIC && hdr[1] > 0 && hdr[2] > 0 &&
              read_all(f, thr, sizeof thr);
    if (!ok) {
        fclose(f);
        return false;
    }
    const int64_t C = hdr[1], A = hdr[2];
    si_detect_params p = {thr[0], thr[1], hdr[3], hdr[4] != 0};
    float *pred = malloc(sizeof(float) * (size_t)((4 + C) * A));
    int32_t count = -1;
    ok = read_all(f, pred, sizeof(float) * (size_t)((4 + C) * A)) &&
         read_all(f, &count, sizeof count) && count >= 0 && count <= p.max_detections;
    si_detection *want = malloc(sizeof(si_detection) * (size_t)(count > 0 ? count : 1));
    ok = ok && read_all(f, want, sizeof(si_detection) * (size_t)count);
    fclose(f);
    if (ok) {
        int cap = p.max_detections + 5;
        si_detection *got = malloc(sizeof(si_detection) * (size_t)(cap + 1));
        double t0 = si_now();
        int n = decode(pred, C, A, &p, got, cap);
        *secs = si_now() - t0;
        CHECK_MSG(n == count, "%s: %d detections, want %d", path, n, count);
        int bad = 0;
        for (int i = 0; i < n && i < count; i++) {
            const si_detection *g = &got[i], *w = &want[i];
            bool same = g->cls == w->cls && g->score == w->score && g->x1 == w->x1 &&
                        g->y1 == w->y1 && g->x2 == w->x2 && g->y2 == w->y2;
            if (!same && bad++ < 3)
                fprintf(stderr,
                        "%s[%d]: got cls %d score %.9g (%g %g %g %g), want cls %d score %.9g "
                        "(%g %g %g %g)\n",
                        path, i, g->cls, (double)g->score, (double)g->x1, (double)g->y1,
                        (double)g->x2, (double)g->y2, w->cls, (double)w->score, (double)w->x1,
                        (double)w->y1, (double)w->x2, (double)w->y2);
        }
        CHECK_MSG(bad == 0, "%s: %d detections differ", path, bad);
        CHECK(n < 0 || poisoned(&got[n]));
        /* A cap below the count gives the same leading detections. */
        if (count > 1) {
            int m = decode(pred, C, A, &p, got, count / 2);
            CHECK(m == count / 2 && memcmp(got, want, sizeof(si_detection) * (size_t)m) == 0);
        }
        free(got);
    }
    free(pred);
    free(want);
    return ok;
}

int main(int argc, char **argv) {
    hand_cases();
    if (argc < 2) {
        fprintf(stderr, "usage: %s DATA_DIR (reference cases from post_detect_ref.py)\n", argv[0]);
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/cases.txt", argv[1]);
    FILE *f = fopen(path, "r");
    int ncases = 0;
    CHECK_MSG(f && fscanf(f, "%d", &ncases) == 1 && ncases > 0, "%s: no case list", path);
    if (f) fclose(f);
    for (int i = 0; i < ncases; i++) {
        snprintf(path, sizeof path, "%s/case_%03d.bin", argv[1], i);
        double secs = 0;
        bool ok = run_case(path, &secs);
        CHECK_MSG(ok, "%s: missing or malformed", path);
        if (ok) printf("%s: %.3f ms\n", path, secs * 1e3);
    }
    return test_finish();
}
